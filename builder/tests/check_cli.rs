//! `stackbuild check` as users run it: exit codes, text and JSON output. The `--offline` cases
//! need no network; the two resolver cases ask the package index for metadata only (uv
//! downloads no wheel) and take a few seconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check").join(format!("{name}.toml"))
}

/// Runs `stackbuild check ARGS`, with an empty cache so no wheel of the machine's cache is read.
fn check(args: &[&str]) -> (i32, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let Output { status, stdout, stderr } = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .arg("check")
        .args(args)
        .env("STACKBUILD_CACHE", cache.path())
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (status.code().unwrap_or(-1), text(stdout), text(stderr))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn compatible_recipe_exits_0() {
    let (code, out, err) = check(&["--offline", path(&fixture("ok"))]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("NVIDIA_REQUIRE_CUDA=cuda>=12.1 driver>=525.60.13"), "{out}");
    assert!(
        out.contains(
            "STACKBUILD_REQUIRE_ARCH=arch>=5.0,arch<10.0,arch!=5.3,arch!=6.2,arch!=7.2,arch!=8.7,arch>=8.0"
        ),
        "{out}"
    );
    assert!(out.trim_end().ends_with("result: compatible"), "{out}");
}

#[test]
fn a_warning_alone_exits_0() {
    let (code, out, err) = check(&["--offline", path(&fixture("mixed-nvjitlink"))]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning[mixed-cuda-minor]"), "{out}");
    assert!(out.contains("nvidia-nvjitlink-cu12==12.1.105"), "{out}");
}

#[test]
fn conflict_exits_1_with_the_report_on_stdout() {
    let (code, out, err) = check(&["--offline", path(&fixture("cudnn-pin"))]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("error[cudnn-mismatch]"), "{out}");
    assert!(out.contains("result: NOT compatible, 1 conflict"), "{out}");
}

#[test]
fn json_lists_every_conflict() {
    let (code, out, err) = check(&["--offline", "--json", path(&fixture("everything"))]);
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["compatible"], false);
    let mut kinds: Vec<&str> =
        report["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "companion-mismatch",
            "cudnn-mismatch",
            "host-arch",
            "host-driver",
            "mixed-cuda-minor",
            "numpy-abi",
            "python-unsupported",
            "torch-requirement",
            "torch-variant",
        ]
    );
}

#[test]
fn bad_recipe_exits_2() {
    let (code, out, err) = check(&[path(&fixture("no-such-recipe"))]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no-such-recipe.toml"), "{err}");
}

/// uv refuses torch 2.1.0 on Python 3.12: its message and the knowledge base's explanation.
#[test]
fn resolution_failure_is_explained() {
    let (code, out, err) = check(&[path(&fixture("python312"))]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("error[python-unsupported]"), "{out}");
    assert!(out.contains("error[resolution-failed]: uv found no resolution"), "{out}");
    assert!(out.contains("see python-unsupported above"), "{out}");
}

/// The real resolver brings the newest nvJitLink beside torch 2.1.0's CUDA 12.1 libraries.
#[test]
fn resolution_shows_unpinned_nvjitlink() {
    let (code, out, err) = check(&[path(&fixture("unpinned-nvjitlink"))]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resolved by uv (no lock file; nothing written)"), "{out}");
    assert!(out.contains("warning[mixed-cuda-minor]"), "{out}");
    assert!(out.contains("pin `nvidia-nvjitlink-cu12==12.1.105`"), "{out}");
    assert!(!fixture("unpinned-nvjitlink").with_extension("toml.lock").exists(), "check wrote a lock");
}

/// The project's own recipes pass. Those with a committed lock are checked from it (no resolver
/// runs); the two that take a wheel file no index carries (their locks pin each user's file, so
/// none is committed) are checked `--offline`, from the knowledge base's prediction.
#[test]
fn the_project_recipes_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes");
    for (name, expect) in [
        ("dreamzero", "NVIDIA_REQUIRE_CUDA=cuda>=12.1 driver>=525.60.13"),
        ("rtx40-workstation", "STACKBUILD_REQUIRE_DRIVER=driver>=535.129.03"),
        ("wsl2", "STACKBUILD_REQUIRE_PLATFORM=platform=wsl2"),
        ("a100-cluster", "NVIDIA_REQUIRE_CUDA=cuda>=11.8 driver>=450.80.02"),
        ("jetson-orin", "STACKBUILD_REQUIRE_PLATFORM=platform=jetson"),
    ] {
        let recipe = dir.join(format!("{name}.toml"));
        let locked = dir.join(format!("{name}.toml.lock")).exists();
        let args = if locked { vec![path(&recipe)] } else { vec!["--offline", path(&recipe)] };
        let (code, out, err) = check(&args);
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(out.contains("result: compatible"), "{name}: {out}");
        assert!(out.contains(expect), "{name}: {out}");
    }
}
