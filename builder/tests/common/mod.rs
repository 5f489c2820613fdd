//! Helpers the builder's end-to-end tests share (each test file includes this module): the
//! small test recipes and `build()`. Tool probes, git and the registry launcher come from the
//! `test-support` crate, re-exported here.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub(crate) use test_support::registry::Registry;
pub(crate) use test_support::tools::{git, have, is_root};

/// The Debian base of the small test recipes: bookworm with its Python.
pub(crate) const BOOKWORM_PYTHON: &str = "[base]\ndebian = \"bookworm\"\npackages = [\"python3\"]\n";

/// The small test recipes' patch of `six`: `find` replaced by a `+patched` version, once.
pub(crate) fn six_patch(find: &str) -> String {
    format!(
        "[[patch]]\nname = \"six-version\"\npackage = \"six\"\nfile = \"six.py\"\nfind = '{find}'\n\
         replace = '__version__ = \"1.16.0+patched\"'\ncount = 1\n"
    )
}

/// The builder under test.
pub(crate) const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");

/// Whether builds on a Debian base can run here: root, mmdebstrap, uv and the programs in
/// `more`; prints what is missing (the test then reports itself skipped).
pub(crate) fn debian_builds_ready(more: &[&str]) -> bool {
    let root = is_root();
    let missing: Vec<&str> = ["mmdebstrap", "uv"].iter().chain(more).copied().filter(|p| !have(p)).collect();
    if !root || !missing.is_empty() {
        eprintln!("skipped: needs root and mmdebstrap, uv {} (run .ci/install)", more.join(" "));
        return false;
    }
    true
}

/// A stand-in for a model's source repository: a git repo with one commit.
pub(crate) fn stand_in_repo(dir: &Path) -> (String, String) {
    std::fs::create_dir_all(dir.join("model")).unwrap();
    std::fs::write(dir.join("model/__init__.py"), "NAME = 'stand-in'\n").unwrap();
    std::fs::write(dir.join("train.py"), "print('training')\n").unwrap();
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "stand-in"]);
    (format!("file://{}", dir.display()), git(dir, &["rev-parse", "HEAD"]))
}

/// One `stackbuild` run: the digest it printed, its report, its process output.
pub(crate) struct Built {
    pub digest: String,
    pub report: serde_json::Value,
    pub out: Output,
}

/// Builds `recipe` into the layout `out` with the cache `cache` (`SOURCE_DATE_EPOCH=0`).
pub(crate) fn build(recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Built {
    let report = out.with_extension("report.json");
    let output = Command::new(STACKBUILD)
        .arg(recipe)
        .arg("--cache-dir")
        .arg(cache)
        .arg("--out")
        .arg(out)
        .arg("--report")
        .arg(&report)
        .args(extra)
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .unwrap();
    let digest = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let report =
        std::fs::read(&report).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    Built { digest, report, out: output }
}

/// Asserts that the build succeeded and printed only the digest.
pub(crate) fn ok(b: &Built) -> &Built {
    assert!(b.out.status.success(), "build failed: {}", String::from_utf8_lossy(&b.out.stderr));
    assert!(
        b.digest.starts_with("sha256:") && b.digest.len() == 71,
        "stdout is the digest alone: {:?}",
        b.digest
    );
    b
}

/// [`build`] that must succeed.
pub(crate) fn build_ok(recipe: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Built {
    let b = build(recipe, cache, out, extra);
    ok(&b);
    b
}

/// The registry helpers that need stackbuild's types.
pub(crate) trait RegistryExt {
    /// A reference to `rest` (`NAME:TAG`) in this registry.
    fn reference(&self, rest: &str) -> stackbuild_image::Reference;
}

impl RegistryExt for Registry {
    fn reference(&self, rest: &str) -> stackbuild_image::Reference {
        stackbuild_image::Reference::parse(&format!("{}/{rest}", self.addr)).unwrap()
    }
}

/// `(name, version, sha256)` of every `[[package]]` of our lock file at `path`, sorted.
pub(crate) fn locked_packages(path: &Path) -> Vec<(String, String, String)> {
    let doc: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out: Vec<_> = doc["package"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["version"].as_str().unwrap().into(),
                p["sha256"].as_str().unwrap().into(),
            )
        })
        .collect();
    out.sort();
    out
}

/// `name==version` of every `*.dist-info` in the gzip layers of the OCI layout at `layout`
/// (normalized names, as `uv pip freeze` prints them), sorted.
pub(crate) fn image_distributions(layout: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        if bytes.len() < 2 || bytes[..2] != [0x1f, 0x8b] {
            continue;
        }
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        for member in archive.entries().unwrap() {
            let name = member.unwrap().path().unwrap().display().to_string();
            let Some(dist) = name.strip_suffix(".dist-info/METADATA") else { continue };
            let (project, version) = dist.rsplit('/').next().unwrap().split_once('-').unwrap();
            out.push(format!("{}=={version}", project.to_lowercase().replace('_', "-")));
        }
    }
    out.sort();
    out
}

/// `umoci unpack` of the image `layout:tag` into the bundle `bundle`.
pub(crate) fn unpack_bundle(layout: &Path, tag: &str, bundle: &Path) {
    let out = std::process::Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:{tag}", layout.display()))
        .arg(bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "umoci unpack: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `args` in `bundle` under runc (no terminal) as container `id`, which is deleted after;
/// returns its trimmed stdout, asserting it succeeded.
pub(crate) fn runc_output(bundle: &Path, id: &str, args: &[&str]) -> String {
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(args);
    std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let id = format!("{id}-{}", std::process::id());
    let out =
        std::process::Command::new("runc").arg("run").arg("--bundle").arg(bundle).arg(&id).output().unwrap();
    let _ = std::process::Command::new("runc").args(["delete", "--force", &id]).output();
    assert!(out.status.success(), "runc run: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
