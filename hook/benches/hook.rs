//! Hook latency: full `stackhook hook` invocations (process start, state, config.json, probe of
//! an 8-GPU fixture host, diagnosis, verdict) against a no-op hook (`/bin/true`) in the same run.
//!
//! `cargo bench -p stackhook --bench hook` (uses target/release/stackhook, static as every build
//! of it; `STACKHOOK_BIN` overrides). Prints medians, p90 and the ratio; target: median
//! under 2 ms and at most 3x `/bin/true`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stackhook::fixture::Preset;

const RUNS: usize = 300;

fn time_runs(program: &Path, args: &[&str], env: &[(&str, String)], stdin: &[u8]) -> Vec<Duration> {
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        // A runtime writes the state and closes stdin; /bin/true may exit before reading it.
        let _ = child.stdin.take().expect("stdin").write_all(stdin);
        let status = child.wait().expect("wait");
        times.push(start.elapsed());
        assert!(status.success() || program.ends_with("true"), "{} failed", program.display());
    }
    times.sort();
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let bin = test_support::tools::binary("stackhook");
    let dir = tempfile::tempdir().expect("tempdir");
    let host = Preset::EightGpus.build(&dir.path().join("host")).expect("fixture");
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs")).expect("bundle");
    let env: Vec<String> = ["NVIDIA_VISIBLE_DEVICES=all".to_owned()]
        .into_iter()
        .chain(
            Preset::EightGpus
                .requires()
                .iter()
                .enumerate()
                .map(|(i, r)| format!("STACKBUILD_REQUIRE_R{i}={r}")),
        )
        .collect();
    let config =
        serde_json::json!({"ociVersion": "1.0.2", "process": {"env": env}, "root": {"path": "rootfs"}});
    std::fs::write(bundle.join("config.json"), config.to_string()).expect("config");
    let state = serde_json::json!({"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": 1, "bundle": bundle});
    let state = state.to_string().into_bytes();
    let hook_env = [("STACKHOOK_HOST_ROOT", host.root().display().to_string())];

    // Warm the page cache, then interleave nothing: each series runs back to back.
    let _ = time_runs(&bin, &["hook"], &hook_env, &state);
    let noop = time_runs(Path::new("/bin/true"), &[], &[], &state);
    let hook = time_runs(&bin, &["hook"], &hook_env, &state);
    let (n50, h50) = (noop[RUNS / 2], hook[RUNS / 2]);
    let (n90, h90) = (noop[RUNS * 9 / 10], hook[RUNS * 9 / 10]);
    println!("hook invocation, 8-GPU fixture host, {RUNS} runs each");
    println!("  /bin/true        median {:.3} ms  p90 {:.3} ms", ms(n50), ms(n90));
    println!("  stackhook hook   median {:.3} ms  p90 {:.3} ms", ms(h50), ms(h90));
    println!(
        "  ratio (median)   {:.2}x /bin/true; target: < 2 ms and <= 3x",
        h50.as_secs_f64() / n50.as_secs_f64()
    );
}
