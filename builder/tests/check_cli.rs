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
            "cuda-mismatch",
            "cudnn-mismatch",
            "host-arch",
            "host-driver",
            "mixed-cuda-minor",
            "numpy-abi",
            "python-unsupported",
            "torch-requirement",
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
        ("dreamzero-cu121", "NVIDIA_REQUIRE_CUDA=cuda>=12.1 driver>=525.60.13"),
        ("dreamzero", "NVIDIA_REQUIRE_CUDA=cuda>=12.8 driver>=525.60.13"),
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

/// The `Requires-Dist` of torch 2.11.0+cu129, the build the torch project publishes on its cu129 index
/// (pytorch/pytorch `.github/scripts/generate_binary_build_matrix.py` of the 2.11 release,
/// `PYTORCH_EXTRA_INSTALL_REQUIREMENTS["12.9"]`, and the `triton==3.6.0` pin every 2.11 Linux
/// wheel carries). Every `nvidia-*` wheel it names is on the package index.
const TORCH_2_11_CU129: &[&str] = &[
    "filelock",
    "typing-extensions>=4.10.0",
    "setuptools<82",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
    "cuda-bindings==12.9.4; platform_system == \"Linux\"",
    "nvidia-cuda-nvrtc-cu12==12.9.86; platform_system == \"Linux\"",
    "nvidia-cuda-runtime-cu12==12.9.79; platform_system == \"Linux\"",
    "nvidia-cuda-cupti-cu12==12.9.79; platform_system == \"Linux\"",
    "nvidia-cudnn-cu12==9.17.1.4; platform_system == \"Linux\"",
    "nvidia-cublas-cu12==12.9.1.4; platform_system == \"Linux\"",
    "nvidia-cufft-cu12==11.4.1.4; platform_system == \"Linux\"",
    "nvidia-curand-cu12==10.3.10.19; platform_system == \"Linux\"",
    "nvidia-cusolver-cu12==11.7.5.82; platform_system == \"Linux\"",
    "nvidia-cusparse-cu12==12.5.10.65; platform_system == \"Linux\"",
    "nvidia-cusparselt-cu12==0.7.1; platform_system == \"Linux\"",
    "nvidia-nccl-cu12==2.28.9; platform_system == \"Linux\"",
    "nvidia-nvshmem-cu12==3.4.5; platform_system == \"Linux\"",
    "nvidia-nvtx-cu12==12.9.79; platform_system == \"Linux\"",
    "nvidia-nvjitlink-cu12==12.9.86; platform_system == \"Linux\"",
    "nvidia-cufile-cu12==1.14.1.1; platform_system == \"Linux\"",
    "triton==3.6.0; platform_system == \"Linux\"",
    "optree>=0.13.0; extra == \"optree\"",
];

/// A recipe whose torch is a stand-in of torch 2.11.0+cu129 (its real Requires-Dist, no
/// libraries) given as `[[python.wheel]]`, in a fresh directory.
fn torch_2_11_cu129_recipe() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let wheels = dir.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let wheel = test_support::wheel::stand_in_wheel(
        &wheels,
        "torch",
        "2.11.0+cu129",
        "cp311-cp311-manylinux_2_28_x86_64",
        ">=3.10",
        TORCH_2_11_CU129,
    );
    let recipe = dir.path().join("cu129.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"cu129\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
             packages = [\"numpy==2.2.6\"]\n[[python.wheel]]\npath = \"wheels/{}\"\n",
            wheel.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    (dir, recipe)
}

/// What `check` must derive for the cu129 build, from the wheels alone: CUDA 12.9 (the runtime
/// wheel it requires), so `cuda>=12.9` and the CUDA 12 minor-version-compatibility driver.
fn assert_cu129_derived(out: &str) {
    assert!(out.contains("NVIDIA_REQUIRE_CUDA=cuda>=12.9"), "{out}");
    assert!(out.contains("nvidia-cudnn-cu12") && out.contains("9.17.1.4"), "{out}");
    assert!(!out.contains("never published"), "{out}");
    assert!(out.contains("result: compatible"), "{out}");
}

/// A torch build the tables lack (the cu129 build of 2.11.0), given as the recipe's own
/// wheel: checked from its Requires-Dist, offline, and compatible.
#[test]
fn a_build_the_tables_lack_is_checked_from_its_wheel_offline() {
    let (_dir, recipe) = torch_2_11_cu129_recipe();
    let (code, out, err) = check(&["--offline", path(&recipe)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_cu129_derived(&out);
    assert!(out.contains("torch-2.11.0+cu129-cp311-cp311-manylinux_2_28_x86_64.whl"), "{out}");
    assert!(
        out.contains("note[unknown-torch]: torch 2.11.0+cu129 is a build the knowledge base lacks"),
        "{out}"
    );
}

/// The same build resolved for real: uv reads the index's metadata for the CUDA 12.9 wheels the
/// stand-in requires (no wheel is downloaded), and the check reads the stack it found.
#[test]
fn a_build_the_tables_lack_is_checked_from_its_resolution() {
    let (_dir, recipe) = torch_2_11_cu129_recipe();
    let (code, out, err) = check(&[path(&recipe)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resolved by uv"), "{out}");
    assert_cu129_derived(&out);
    assert!(out.contains("nvidia-cuda-runtime-cu12") && out.contains("12.9.79"), "{out}");
}

/// An index that does not answer says nothing about what it serves: the resolution failure is
/// an error, and the build is not called "never published".
#[test]
fn an_unreachable_index_is_not_evidence_that_a_build_was_never_published() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("unreachable.toml");
    std::fs::write(
        &recipe,
        "[image]\nname = \"unreachable\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
         index = \"http://127.0.0.1:9/simple\"\npackages = [\"torch==2.1.0+cu124\"]\n",
    )
    .unwrap();
    let (code, out, err) = check(&[path(&recipe)]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("error[resolution-failed]"), "{out}");
    assert!(!out.contains("never published") && out.contains("warning[torch-variant]"), "{out}");
    assert!(out.contains("uv could not reach the index"), "{out}");
}

/// A CUDA 13 build the tables lack (a cu132 build of torch 2.13.0), as the recipe's own wheel
/// carrying the CUDA 13.2 `Requires-Dist` the index serves for its cu132 wheel of torch 2.15.0
/// (the recorded metadata): CUDA from the `cuda-toolkit` pin, cuDNN from `nvidia-cudnn-cu13`.
#[test]
fn a_cuda_13_build_the_tables_lack_is_checked_from_its_wheel_offline() {
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "tests/fixtures/index/torch/metadata/torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl.metadata",
    );
    let metadata = std::fs::read_to_string(recorded).unwrap();
    let requires: Vec<&str> = metadata.lines().filter_map(|l| l.strip_prefix("Requires-Dist: ")).collect();
    assert!(requires.iter().any(|r| r.starts_with("cuda-toolkit[")), "{requires:?}");
    let dir = tempfile::tempdir().unwrap();
    let wheel = test_support::wheel::stand_in_wheel(
        dir.path(),
        "torch",
        "2.13.0+cu132",
        "cp311-cp311-manylinux_2_28_x86_64",
        ">=3.10",
        &requires,
    );
    let recipe = dir.path().join("cu132.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"cu132\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
             packages = [\"numpy==2.2.6\"]\n[[python.wheel]]\npath = \"{}\"\n",
            wheel.file_name().unwrap().to_str().unwrap()
        ),
    )
    .unwrap();
    let (code, out, err) = check(&["--offline", path(&recipe)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("NVIDIA_REQUIRE_CUDA=cuda>=13.2"), "{out}");
    assert!(out.contains("nvidia-cudnn-cu13") && out.contains("9.26.0.51"), "{out}");
    assert!(
        out.contains("note[unknown-torch]: torch 2.13.0+cu132 is a build the knowledge base lacks"),
        "{out}"
    );
    assert!(!out.contains("never published") && out.contains("result: compatible"), "{out}");
}

/// A CUDA build no index serves (torch 2.1.0+cu124): the resolver finds none, and only then is it
/// "never published", naming the builds that exist.
#[test]
fn never_published_only_when_the_resolver_finds_no_such_build() {
    let (code, out, err) = check(&[path(&fixture("variant-local"))]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("error[torch-variant]: torch 2.1.0+cu124 was never published"), "{out}");
    assert!(out.contains("cu118 (CUDA 11.8), cu121 (CUDA 12.1, the PyPI wheel)"), "{out}");
    assert!(out.contains("error[resolution-failed]"), "{out}");
    let (code, out, err) = check(&["--offline", path(&fixture("variant-local"))]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning[torch-variant]") && !out.contains("never published"), "{out}");
}
