//! Hook latency: full `stackhook hook` invocations (process start, state, config.json, probe of
//! an 8-GPU fixture host, diagnosis, verdict) against a no-op hook (`/bin/true`) in the same run:
//! a container asking through `NVIDIA_VISIBLE_DEVICES=all`, and one given two GPUs through CDI
//! (`void`, the spec's device nodes and library mounts in `config.json`).
//!
//! `cargo bench -p stackhook --features fixture --bench hook` (the fixture host is behind the
//! `fixture` feature; uses target/release/stackhook, static as every build of it; `STACKHOOK_BIN`
//! overrides). Prints medians, p90 and the ratio; target: median under 2 ms and at most 3x
//! `/bin/true`.

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
    // The same image given GPUs 3 and 5 through CDI, as containerd writes it after the edits.
    let cdi_bundle = dir.path().join("cdi-bundle");
    std::fs::create_dir_all(cdi_bundle.join("rootfs")).expect("bundle");
    let spec = Preset::EightGpus.spec().cdi_spec(host.root(), "nvidia.com/gpu");
    let env_refs: Vec<&str> = env.iter().skip(1).map(String::as_str).collect();
    let cdi_config = stackhook::fixture::cdi::apply(&spec, &["3", "5"], &env_refs);
    std::fs::write(cdi_bundle.join("config.json"), cdi_config.to_string()).expect("config");
    let cdi_state = serde_json::json!({"ociVersion": "1.0.2", "id": "bench-cdi", "status": "creating", "pid": 1, "bundle": cdi_bundle});
    let cdi_state = cdi_state.to_string().into_bytes();
    let hook_env = [("STACKHOOK_HOST_ROOT", host.root().display().to_string())];

    // Warm the page cache, then interleave nothing: each series runs back to back.
    let _ = time_runs(&bin, &["hook"], &hook_env, &state);
    let noop = time_runs(Path::new("/bin/true"), &[], &[], &state);
    let hook = time_runs(&bin, &["hook"], &hook_env, &state);
    let cdi = time_runs(&bin, &["hook"], &hook_env, &cdi_state);
    let (n50, n90) = (noop[RUNS / 2], noop[RUNS * 9 / 10]);
    println!("hook invocation, 8-GPU fixture host, {RUNS} runs each");
    println!("  /bin/true              median {:.3} ms  p90 {:.3} ms", ms(n50), ms(n90));
    for (name, t) in [("stackhook hook (env)", &hook), ("stackhook hook (CDI)", &cdi)] {
        let (h50, h90) = (t[RUNS / 2], t[RUNS * 9 / 10]);
        println!(
            "  {name:<22} median {:.3} ms  p90 {:.3} ms  ratio {:.2}x /bin/true",
            ms(h50),
            ms(h90),
            h50.as_secs_f64() / n50.as_secs_f64()
        );
    }
    println!("  target: median < 2 ms and <= 3x /bin/true");
}
