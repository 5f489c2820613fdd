//! `--cache-registry` against a real registry: Debian's `docker-registry` (the CNCF distribution
//! registry 2.8) on a free loopback port, its storage in a temporary directory so that a test can
//! corrupt or remove a blob behind the registry's back. Two cache directories stand for two
//! build machines.
//!
//! Without `docker-registry` or uv (which resolves the recipe's lock) the tests print why and
//! pass.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

mod common;
use common::{build_ok, have, Built, Registry};

/// A small recipe on a scratch base: one Python layer (a wheel from the package index, patched),
/// a local source tree, the configuration layer.
fn recipe(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir.join("app")).unwrap();
    fs::write(dir.join("app/main.py"), "print('shared cache')\n").unwrap();
    let path = dir.join("shared.toml");
    fs::write(
        &path,
        r#"[image]
name = "shared"
tag = "test"
cmd = ["python3", "/workspace/app/main.py"]

[base]
scratch = true

[python]
version = "3.11"
packages = ["six==1.16.0"]

[[source]]
name = "app"
path = "app"
dest = "/workspace/app"

[[patch]]
name = "six-version"
package = "six"
file = "six.py"
find = '__version__ = "1.16.0"'
replace = '__version__ = "1.16.0+shared"'
count = 1
"#,
    )
    .unwrap();
    path
}

/// Each layer's name, source (`built`, `cache`, `registry`) and digest.
fn layers(b: &Built) -> Vec<(String, String, String)> {
    b.report["layers"]
        .as_array()
        .expect("layers in the report")
        .iter()
        .map(|l| {
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
            (field("name"), field("source"), field("digest"))
        })
        .collect()
}

fn sources(b: &Built) -> Vec<(String, String)> {
    layers(b).into_iter().map(|(name, source, _)| (name, source)).collect()
}

fn setup() -> Option<(Registry, tempfile::TempDir)> {
    if !have("uv") {
        eprintln!("skipped: needs uv to lock the recipe (run .ci/install)");
        return None;
    }
    Some((Registry::start(None)?, tempfile::tempdir().unwrap()))
}

#[test]
fn a_second_machine_with_an_empty_cache_pulls_every_layer_and_gets_the_same_image() {
    let Some((registry, tmp)) = setup() else { return };
    let recipe = recipe(tmp.path());
    let repo = "team/shared-cache";
    let flag = format!("{}/{repo}", registry.addr);
    let shared = ["--cache-registry", flag.as_str()];

    let first = build_ok(&recipe, &tmp.path().join("cache-a"), &tmp.path().join("out-a"), &shared);
    let names: Vec<String> = layers(&first).into_iter().map(|(n, _, _)| n).collect();
    assert_eq!(names, ["python", "sources", "config"]);
    assert!(sources(&first).iter().all(|(_, s)| s == "built"), "{:?}", sources(&first));
    let tags = registry.tags(repo);
    assert_eq!(tags.len(), 3, "one tag per layer: {tags:?}");
    assert!(tags.iter().all(|t| t.starts_with("cache-v1-") && t.len() == 73), "{tags:?}");

    // Machine B: an empty cache, the same recipe and lock.
    let second = build_ok(&recipe, &tmp.path().join("cache-b"), &tmp.path().join("out-b"), &shared);
    assert_eq!(second.digest, first.digest, "the same image");
    assert!(
        sources(&second).iter().all(|(_, s)| s == "registry"),
        "every layer pulled: {:?}\n{}",
        sources(&second),
        String::from_utf8_lossy(&second.out.stderr)
    );
    assert!(second.report["layers"].as_array().unwrap().iter().all(|l| l["built"] == false));
    assert_eq!(
        layers(&second),
        layers(&first).into_iter().map(|(n, _, d)| (n, "registry".into(), d)).collect::<Vec<_>>()
    );

    // Machine B again: now every layer is in its own cache.
    let again = build_ok(&recipe, &tmp.path().join("cache-b"), &tmp.path().join("out-b"), &shared);
    assert_eq!(again.digest, first.digest);
    assert!(sources(&again).iter().all(|(_, s)| s == "cache"), "{:?}", sources(&again));
}

#[test]
fn a_corrupt_or_missing_blob_in_the_registry_is_rebuilt_not_trusted() {
    let Some((registry, tmp)) = setup() else { return };
    let recipe = recipe(tmp.path());
    let flag = format!("{}/team/broken-cache", registry.addr);
    let shared = ["--cache-registry", flag.as_str()];
    let first = build_ok(&recipe, &tmp.path().join("cache-a"), &tmp.path().join("out-a"), &shared);
    let digest_of = |name: &str| layers(&first).into_iter().find(|(n, _, _)| n == name).unwrap().2;

    // Behind the registry's back: the sources blob's bytes replaced, the python blob removed.
    let corrupt = registry.blob_data(&digest_of("sources"));
    let len = fs::metadata(&corrupt).unwrap().len();
    fs::write(&corrupt, vec![0x5a; usize::try_from(len).unwrap()]).unwrap();
    fs::remove_file(registry.blob_data(&digest_of("python"))).unwrap();

    let second = build_ok(&recipe, &tmp.path().join("cache-b"), &tmp.path().join("out-b"), &shared);
    assert_eq!(second.digest, first.digest, "rebuilt, the same image");
    assert_eq!(
        sources(&second),
        [
            ("python".into(), "built".into()),
            ("sources".into(), "built".into()),
            ("config".into(), "registry".into())
        ]
    );
    let log = String::from_utf8_lossy(&second.out.stderr);
    assert!(log.contains("cache registry") && log.contains("building it"), "{log}");
    // What B built is its own: the layout's blobs hash to their names.
    for (_, _, digest) in layers(&second) {
        let hex = digest.strip_prefix("sha256:").unwrap();
        let bytes = fs::read(tmp.path().join("out-b/blobs/sha256").join(hex)).unwrap();
        assert_eq!(stackbuild_common::sha256_bytes(&bytes), digest);
    }
}

#[test]
fn an_unreachable_cache_registry_only_warns() {
    if !have("uv") {
        eprintln!("skipped: needs uv to lock the recipe (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let recipe = recipe(tmp.path());
    // A port nothing listens on (bound, then released).
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let flag = format!("127.0.0.1:{port}/cache");
    let built =
        build_ok(&recipe, &tmp.path().join("cache"), &tmp.path().join("out"), &["--cache-registry", &flag]);
    assert!(sources(&built).iter().all(|(_, s)| s == "built"), "{:?}", sources(&built));
    let log = String::from_utf8_lossy(&built.out.stderr);
    assert!(log.contains("not used for the rest of this build"), "{log}");
}

#[test]
fn a_cache_registry_with_a_tag_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = recipe(tmp.path());
    let (cache, out) = (tmp.path().join("cache"), tmp.path().join("out"));
    let built =
        common::build(&recipe, &cache, &out, &["--cache-registry", "127.0.0.1:5115/team/cache:latest"]);
    assert_eq!(built.out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&built.out.stderr);
    assert!(err.contains("without a tag or digest"), "{err}");
    assert!(!cache.exists() && !out.exists(), "nothing created");
}
