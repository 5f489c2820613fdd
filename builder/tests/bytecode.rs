//! Bytecode in the image, end to end: a Debian base by mmdebstrap, a small wheel from the
//! package index and a patch of it; the `.pyc` are hash-based, the same in two caches, match the
//! patched text, and Python writes none when a fresh container imports the modules.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;
use common::{
    build_ok as build, debian_builds_ready, have, runc_output, six_patch, unpack_bundle, Built,
    BOOKWORM_PYTHON,
};
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
    unpack_bundle(&layout, "test", &bundle);
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
    let printed = runc_output(
        &bundle,
        "stackbuild-bytecode",
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

fn pinned_recipe(dir: &Path, idna: &str) -> PathBuf {
    recipe_on(dir, idna, BOOKWORM_PYTHON)
}

fn recipe_on(dir: &Path, idna: &str, base: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("pins.toml");
    std::fs::write(
        &path,
        format!(
            "[image]\nname = \"bytecode\"\ntag = \"test\"\n\n{base}\n[python]\nversion = \"3.11\"\n\
             packages = [\"six==1.16.0\", \"idna=={idna}\"]\n"
        ),
    )
    .unwrap();
    path
}

/// The report's entry of the `python` layer.
fn python_layer(b: &Built) -> serde_json::Value {
    b.report["layers"].as_array().unwrap().iter().find(|l| l["name"] == "python").unwrap().clone()
}

/// `(compiled, reused)` compile units of the `python` layer in this build.
fn units(b: &Built) -> (u64, u64) {
    let l = python_layer(b);
    (l["bytecode"]["compiled"].as_u64().unwrap(), l["bytecode"]["reused"].as_u64().unwrap())
}

/// The cache's bytecode record holding `pyc` and the pack it names.
fn record_with(cache: &Path, pyc: &str) -> (PathBuf, String) {
    for e in std::fs::read_dir(cache.join("bytecode-units")).unwrap() {
        let path = e.unwrap().path();
        let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        if record["files"].as_array().unwrap().iter().any(|f| f["path"] == pyc) {
            return (path, record["pack"].as_str().unwrap().to_owned());
        }
    }
    panic!("no bytecode record holds {pyc}");
}

#[test]
fn bytecode_is_compiled_once_per_wheel_and_reused_verified_across_builds() {
    if !debian_builds_ready(&["unshare"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    // Cold: six.py and idna/ compiled, the .dist-info directories need no process.
    let first = build(&pinned_recipe(&tmp.path().join("a"), "3.6"), &cache, &tmp.path().join("l1"), &[]);
    assert_eq!(units(&first), (2, 0), "{}", python_layer(&first));

    // Another idna: the layer is staged again, and only idna compiled; six's comes from the cache.
    let v2 = pinned_recipe(&tmp.path().join("b"), "3.7");
    let second = build(&v2, &cache, &tmp.path().join("l2"), &[]);
    assert_eq!(python_layer(&second)["built"], true);
    assert_eq!(units(&second), (1, 1), "{}", python_layer(&second));
    assert_eq!(python_layer(&second)["bytecode"]["files"], python_layer(&first)["bytecode"]["files"]);

    // Another Debian package in the base: every Python layer is staged again, nothing compiled
    // (the compiling process is the interpreter and its standard library), the same bytes.
    let other_base = BOOKWORM_PYTHON.replace(r#"["python3"]"#, r#"["python3", "netbase"]"#);
    assert_ne!(other_base, BOOKWORM_PYTHON);
    let rebased =
        build(&recipe_on(&tmp.path().join("d"), "3.7", &other_base), &cache, &tmp.path().join("l6"), &[]);
    assert_eq!(python_layer(&rebased)["built"], true);
    assert_eq!(units(&rebased), (0, 2), "{}", python_layer(&rebased));
    assert_eq!(python_layer(&rebased)["digest"], python_layer(&second)["digest"]);

    // The same recipe in a fresh cache compiles everything: the layer holds the same bytes.
    let cold = build(&v2, &tmp.path().join("cache2"), &tmp.path().join("l3"), &["--locked"]);
    assert_eq!(units(&cold), (2, 0));
    assert_eq!(
        python_layer(&second)["digest"],
        python_layer(&cold)["digest"],
        "restored bytecode is the bytes compiling gives"
    );

    // A damaged record is never used: six is compiled again, to the same bytes.
    let (_, pack) = record_with(&cache, "__pycache__/six.cpython-311.pyc");
    let blob = cache.join("blobs/sha256").join(pack.trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();
    let third = build(&pinned_recipe(&tmp.path().join("c"), "3.5"), &cache, &tmp.path().join("l4"), &[]);
    assert_eq!(units(&third), (2, 0), "{}", python_layer(&third));
    let err = String::from_utf8_lossy(&third.out.stderr);
    assert!(err.contains("damaged"), "the build says the record was damaged: {err}");
    let (_, again) = record_with(&cache, "__pycache__/six.cpython-311.pyc");
    assert_eq!(again, pack, "compiled again to the same bytes");
    assert_eq!(sha256_hex(&std::fs::read(&blob).unwrap()), pack.trim_start_matches("sha256:"));
}
