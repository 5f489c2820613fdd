//! Layer keys from their inputs: each cached layer's key is the hash of one struct of every input
//! that can change its bytes (the cache's `LayerKey::of`), the compression's settings included
//! (the image crate's `Encoding`). So a build with another compression rebuilds the Python layer
//! instead of serving the one made with the first, and going back to the first compression finds
//! the first layer in the cache again, byte for byte.
//!
//! The build runs offline: a scratch base and a `[[python.wheel]]` file, locked by uv.

use std::path::{Path, PathBuf};

mod common;
use common::{build_ok, have, Built};

/// A scratch recipe installing the wheel `wheel` (relative to `dir`), with one local source.
fn recipe(dir: &Path, wheel: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/README"), "cache keys test data\n").unwrap();
    let path = dir.join("keys.toml");
    std::fs::write(
        &path,
        format!(
            "[image]\nname = \"keys\"\ntag = \"test\"\n\n[base]\nscratch = true\n\n\
             [python]\nversion = \"3.11\"\npackages = []\n\n[[python.wheel]]\npath = \"{wheel}\"\n\n\
             [[source]]\nname = \"data\"\npath = \"data\"\ndest = \"/data\"\n"
        ),
    )
    .unwrap();
    path
}

/// The report's line for the layer `name`: (digest, built in this run, where it came from).
fn layer(b: &Built, name: &str) -> (String, bool, String) {
    let layers = b.report["layers"].as_array().expect("a report with layers");
    let l =
        layers.iter().find(|l| l["name"] == name).unwrap_or_else(|| panic!("no {name} layer: {}", b.report));
    (
        l["digest"].as_str().unwrap().to_owned(),
        l["built"].as_bool().unwrap(),
        l["source"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn another_compression_rebuilds_the_python_layer_and_the_first_comes_back_from_the_cache() {
    if !have("uv") {
        eprintln!("skipped: needs uv (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wheel = "wheels/keys_demo-1.0-py3-none-any.whl";
    let init = ("keys_demo/__init__.py".to_owned(), b"NAME = 'keys-demo'\n".to_vec());
    let data = ("keys_demo/table.txt".to_owned(), "row\n".repeat(50_000).into_bytes());
    test_support::wheel::pure_wheel(&tmp.path().join(wheel), "keys-demo", "1.0", vec![init, data]);
    let recipe = recipe(tmp.path(), wheel);
    let cache = tmp.path().join("cache");

    let gzip = build_ok(&recipe, &cache, &tmp.path().join("gzip"), &[]);
    let (gzip_python, built, _) = layer(&gzip, "python");
    assert!(built, "a cold build builds the Python layer");

    // Another compression: another key, so the layer is built again, not served stale.
    let zstd = build_ok(&recipe, &cache, &tmp.path().join("zstd"), &["--locked", "--compression", "zstd"]);
    let (zstd_python, built, source) = layer(&zstd, "python");
    assert!(built && source == "built", "zstd: the Python layer is rebuilt ({source})");
    assert_ne!(zstd_python, gzip_python, "zstd writes other bytes");
    assert_ne!(zstd.digest, gzip.digest);
    let sources = layer(&zstd, "sources");
    assert!(sources.1, "every layer's key has the compression: the sources layer is rebuilt too");
    let image = stackbuild_image::read_layout(&tmp.path().join("zstd"), Some("test")).unwrap();
    assert!(
        image.layers.iter().all(|l| l.media_type == "application/vnd.oci.image.layer.v1.tar+zstd"),
        "no gzip layer served to a zstd build"
    );

    // Back to gzip: the first layer, found by the first key.
    let again = build_ok(&recipe, &cache, &tmp.path().join("again"), &["--locked", "--compression", "gzip"]);
    let (again_python, built, source) = layer(&again, "python");
    assert!(!built && source == "cache", "gzip again: the first Python layer is reused ({source})");
    assert_eq!(again_python, gzip_python);
    assert_eq!(again.digest, gzip.digest, "the same inputs, the same image");
    // And zstd again: its layer too.
    let zstd_again =
        build_ok(&recipe, &cache, &tmp.path().join("zstd2"), &["--locked", "--compression", "zstd"]);
    assert_eq!(layer(&zstd_again, "python"), (zstd_python, false, "cache".to_owned()));
    assert_eq!(zstd_again.digest, zstd.digest);
}
