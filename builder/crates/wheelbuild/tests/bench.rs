//! The source-build benchmark (bench/source-build.sh runs it; ignored in the suite): the CUDA
//! test extension built by stackbuild (sandbox, environment from the cache) against
//! `pip wheel --no-build-isolation --no-deps` run on this machine's interpreter with the very same
//! installed torch, nvcc and CUDA headers (the environment stackbuild installed, on `PYTHONPATH`),
//! the same `TORCH_CUDA_ARCH_LIST`, `MAX_JOBS` and `SOURCE_DATE_EPOCH`. Each side builds a fresh
//! version of the extension (nothing compiled before), alternating, twice; the table gives the
//! medians and the ratio to pip, then a warm build (the same inputs again: nothing compiles) and
//! what installing the environment the first time took.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use stackbuild_wheelbuild::{index_resolver, SourcePackage, WheelBuilder};

mod common;
use common::{ready, Fixture};

#[test]
#[ignore = "a benchmark: bench/source-build.sh"]
fn cuda_extension_against_pip_wheel_without_isolation() {
    if !ready() {
        return;
    }
    let jobs = 2;
    let mut f = Fixture::new();
    f.settings.cuda_arch_list = Some("8.0;9.0".into());
    f.settings.memory = 16 << 30;
    f.settings.timeout = Duration::from_hours(1);
    f.settings.jobs = jobs;
    let (runtime, cuda) = common::cuda_runtime(&f);
    let artifacts = f.cache.root().join("artifacts");
    let resolve = index_resolver(&f.python, &f.target, &artifacts, None);
    let builder = WheelBuilder::new(&f.cache, &f.root, &f.settings, &f.target, &resolve);
    let build = |version: &str| {
        let ext = common::cuda_extension(&f.work, "sbcuda", version);
        let pkg = SourcePackage {
            name: &ext.name,
            version: &ext.version,
            sdist: &ext,
            extra_requires: Vec::new(),
            runtime: runtime.clone(),
            cuda: Some(cuda.clone()),
            editable: None,
            env: Vec::new(),
        };
        let started = Instant::now();
        let built = builder.build(&pkg, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
        (started.elapsed(), built.compiled)
    };
    // The first build installs the environment into the cache: timed on its own.
    let (first, _) = build("0.0.1");
    let envs: Vec<PathBuf> = std::fs::read_dir(f.cache.root().join("build-envs"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(".complete").is_file())
        .collect();
    let [env] = envs.as_slice() else { panic!("one environment: {envs:?}") };
    let site = env.join("env/site");
    let home = site.join(format!("nvidia/cu{}", cuda.major));
    let pip = |version: &str| {
        let ext = common::cuda_extension(&f.work, "sbcuda", version);
        let out = f.work.join(format!("pip-{version}"));
        let started = Instant::now();
        let run = Command::new("/usr/bin/python3.11")
            .args(["-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-q", "-w"])
            .arg(&out)
            .arg(&ext.path)
            .env("PYTHONPATH", &site)
            .env("CUDA_HOME", &home)
            .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", home.join("bin").display()))
            .env("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
            .env("MAX_JOBS", jobs.to_string())
            .env("SOURCE_DATE_EPOCH", f.settings.epoch.to_string())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap();
        assert!(run.status.success(), "pip wheel: {}", String::from_utf8_lossy(&run.stderr));
        started.elapsed()
    };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..2 {
        theirs.push(pip(&format!("1.0.{round}")));
        let (t, compiled) = build(&format!("2.0.{round}"));
        assert!(compiled);
        ours.push(t);
    }
    let (warm, compiled) = build("2.0.0");
    assert!(!compiled, "the same inputs again compile nothing");
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        (v[0] + v[v.len() - 1]) / 2
    };
    let (ours, theirs) = (median(&mut ours), median(&mut theirs));
    let ratio = |d: Duration| d.as_secs_f64() / theirs.as_secs_f64();
    println!(
        "source-build benchmark: the CUDA test extension for 8.0 and 9.0, MAX_JOBS={jobs}, torch 2.15.0"
    );
    println!("| build | seconds | vs pip |");
    println!("|---|---|---|");
    println!(
        "| pip wheel --no-build-isolation (baseline, median of 2) | {:.1} | 1.00x |",
        theirs.as_secs_f64()
    );
    println!("| stackbuild, cold (median of 2) | {:.1} | {:.2}x |", ours.as_secs_f64(), ratio(ours));
    println!("| stackbuild, warm (0 compiles) | {:.2} | {:.3}x |", warm.as_secs_f64(), ratio(warm));
    println!(
        "| stackbuild, first build (installs the environment: torch and CUDA 13) | {:.1} | {:.2}x |",
        first.as_secs_f64(),
        ratio(first)
    );
}
