//! Bytecode in the image, end to end: a Debian base by mmdebstrap, a small wheel from the
//! package index and a patch of it; the `.pyc` are hash-based, the same in two caches, match the
//! patched text, and Python writes none when a fresh container imports the modules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{build_ok as build, debian_builds_ready, have, six_patch, Built, BOOKWORM_PYTHON};
use test_support::digest::sha256_hex;

fn recipe(dir: &Path, bytecode: &str) -> PathBuf {
    let path = dir.join("bytecode.toml");
    std::fs::write(
        &path,
        format!(
            r#"[image]
name = "bytecode"
tag = "test"
cmd = ["python3", "-c", "import six; print(six.__version__)"]

{base}
[python]
version = "3.11"
packages = ["six==1.16.0", "idna==3.6"]
{bytecode}

{patch}"#,
            base = BOOKWORM_PYTHON,
            patch = six_patch(r#"__version__ = "1.16.0""#),
        ),
    )
    .unwrap();
    path
}

/// `(layer name, .pyc files)` of the report.
fn bytecode_of(b: &Built) -> Vec<(String, u64)> {
    b.report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap().to_owned(), l["bytecode"]["files"].as_u64().unwrap_or(0)))
        .collect()
}

/// sha256 of every file below `dir` whose path contains `__pycache__`.
fn pyc_hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() && p.to_string_lossy().contains("__pycache__") {
                out.insert(p.clone(), sha256_hex(&std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn unpack(layout: &Path, bundle: &Path) {
    let out = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:test", layout.display()))
        .arg(bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "umoci unpack: {}", String::from_utf8_lossy(&out.stderr));
}

fn run_in(bundle: &Path, args: &[&str]) -> String {
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(args);
    std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let id = format!("stackbuild-bytecode-{}", std::process::id());
    let out = Command::new("runc").arg("run").arg("--bundle").arg(bundle).arg(&id).output().unwrap();
    let _ = Command::new("runc").args(["delete", "--force", &id]).output();
    assert!(out.status.success(), "runc run: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn hash_based_bytecode_the_same_in_two_caches_and_never_rewritten() {
    if !debian_builds_ready(&["unshare"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let recipe = recipe(tmp.path(), "");
    let layout = tmp.path().join("layout");
    let first = build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let other = build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("layout2"), &["--locked"]);
    // Two caches: one digest. Each cache runs mmdebstrap against the mirror, which may publish
    // a package update between the two; then the base differs, but the Python layer (whose bytes
    // depend on the wheels and the interpreter only) must not.
    let layer = |b: &Built, name: &str| {
        b.report["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap()["digest"].clone()
    };
    if layer(&first, "base") == layer(&other, "base") {
        assert_eq!(other.digest, first.digest, "two caches: one digest");
    } else {
        eprintln!("note: the mirror changed between the two base builds; comparing the Python layer");
    }
    assert_eq!(layer(&first, "python"), layer(&other, "python"), "two caches: one Python layer");
    let counts = bytecode_of(&first);
    // six and idna in the python layer; the patched six.py's own in the config layer.
    assert!(counts.iter().any(|(n, c)| n == "python" && *c >= 2), "{counts:?}");
    assert!(counts.iter().any(|(n, c)| n == "config" && *c == 1), "{counts:?}");
    let err = String::from_utf8_lossy(&first.out.stderr);
    assert!(err.contains("bytecode:"), "the log says what bytecode added: {err}");

    if !have("umoci") || !have("runc") {
        eprintln!("skipped the container half: umoci or runc not installed");
        return;
    }
    let bundle = tmp.path().join("bundle");
    unpack(&layout, &bundle);
    let site = bundle.join("rootfs/usr/local/lib/python3.11/dist-packages");
    let pyc = site.join("__pycache__/six.cpython-311.pyc");
    let bytes = std::fs::read(&pyc).unwrap();
    // PEP 552: the flags word after the magic number; 0b11 is a checked hash-based .pyc.
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 0b11, "checked hash-based");
    assert!(site.join("idna/__pycache__/core.cpython-311.pyc").is_file());
    assert!(!site.join("__pycache__/six.cpython-311.opt-1.pyc").exists(), "level 0 only");

    // A fresh container imports the modules: the patched text runs, and no .pyc is written or
    // rewritten (a stale or mismatched one would be recompiled and written back).
    let before = pyc_hashes(&bundle.join("rootfs"));
    let printed = run_in(
        &bundle,
        &["python3", "-c", "import six, idna, idna.core; print(six.__version__, idna.core.__name__)"],
    );
    assert_eq!(printed, "1.16.0+patched idna.core");
    let after = pyc_hashes(&bundle.join("rootfs"));
    let changed: Vec<_> = after.iter().filter(|(p, h)| before.get(*p) != Some(*h)).map(|(p, _)| p).collect();
    assert!(changed.is_empty(), "Python wrote bytecode at first import: {changed:?}");

    // With the switch off: no bytecode in the Python layers, and another digest.
    let recipe = self::recipe(tmp.path(), "bytecode = false");
    let off = build(&recipe, &tmp.path().join("cache"), &tmp.path().join("layout-off"), &[]);
    assert_ne!(off.digest, first.digest);
    assert!(bytecode_of(&off).iter().all(|(_, c)| *c == 0), "{:?}", bytecode_of(&off));
}
