//! Checks images written by `stackbuild_image::oci` with the real tools: umoci, skopeo, docker (when
//! a daemon is reachable) and runc (when running as root).
//!
//! A missing tool skips its check with a note on stderr, so that the test passes on machines
//! without them; on the reference machine (Debian bookworm) they are all installed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_image::LayerWriter;
use stackbuild_image::{Image, ImageConfig, RuntimeConfig};

mod common;
use common::{have, is_root};
use test_support::digest::sha256_hex;
use test_support::process::run;
use test_support::tools::go_arch;

const BUSYBOX: &str = "/bin/busybox";

/// Builds the test image: `/bin/busybox` and `/bin/sh` (a hardlink to it), gzip or zstd.
fn build_image(cache: &Cache, compression: Compression) -> Image {
    let stage = tempfile::tempdir().unwrap();
    fs::create_dir(stage.path().join("bin")).unwrap();
    fs::copy(BUSYBOX, stage.path().join("bin/busybox")).unwrap();
    fs::hard_link(stage.path().join("bin/busybox"), stage.path().join("bin/sh")).unwrap();
    let mut writer = LayerWriter::new(cache, 0);
    writer.add_dir(stage.path(), "/").unwrap();
    writer.add_directory("/tmp", 0o1777).unwrap();
    let layer = writer.finish(compression).unwrap();
    let config = ImageConfig {
        created: Some(stackcontract::time::rfc3339(0)),
        architecture: go_arch().into(),
        os: "linux".into(),
        config: RuntimeConfig {
            env: vec!["PATH=/bin".into()],
            cmd: Some(vec![BUSYBOX.into(), "echo".into(), "hello".into()]),
            ..RuntimeConfig::default()
        },
        ..ImageConfig::default()
    };
    let annotations = BTreeMap::from([("org.opencontainers.image.title".into(), "busybox".into())]);
    Image::new(config, vec![layer], annotations).unwrap()
}

fn skopeo_digest(reference: &str) -> String {
    let out = run(Command::new("skopeo").args(["inspect", "--raw", reference]));
    let raw = out.stdout;
    let out = run(Command::new("skopeo").args(["inspect", reference]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let digest = json["Digest"].as_str().unwrap_or_default().to_string();
    // The digest skopeo reports is the manifest it read.
    assert_eq!(digest, format!("sha256:{}", sha256_hex(&raw)), "{reference}");
    digest
}

#[test]
fn tools_accept_layout_and_archive() {
    if !Path::new(BUSYBOX).is_file() {
        eprintln!("note: {BUSYBOX} missing (install busybox-static); skipping");
        return;
    }
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(cache_dir.path()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = build_image(&cache, Compression::Gzip);
    let layout = work.path().join("layout");
    let digest = stackbuild_image::write_layout(&layout, &image, "test").unwrap();
    let archive = work.path().join("image.tar");
    assert_eq!(stackbuild_image::write_archive(&archive, &image, "stackbuild-test:latest").unwrap(), digest);

    // The same inputs in another cache give the same image.
    let other_cache_dir = tempfile::tempdir().unwrap();
    let other = build_image(&Cache::open(other_cache_dir.path()).unwrap(), Compression::Gzip);
    assert_eq!(other.manifest_digest().unwrap(), digest);

    if have("skopeo") {
        assert_eq!(skopeo_digest(&format!("oci:{}:test", layout.display())), digest);
        assert_eq!(skopeo_digest(&format!("oci-archive:{}", archive.display())), digest);
        // skopeo's docker-archive transport reads the legacy manifest.json, as `docker load` does.
        // Selecting the image by its RepoTag checks that entry too.
        let reference = format!("docker-archive:{}:stackbuild-test:latest", archive.display());
        let out = run(Command::new("skopeo").args(["inspect", &reference]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // This transport names layers by their diff_ids (from the config it found via manifest.json).
        assert_eq!(json["Layers"], serde_json::json!([image.layers()[0].diff_id]), "{json}");
        let wrong = format!("docker-archive:{}:other:latest", archive.display());
        assert!(!Command::new("skopeo").args(["inspect", &wrong]).output().unwrap().status.success());
    } else {
        eprintln!("note: skopeo not installed; skipping skopeo checks");
    }

    if Path::new("/var/run/docker.sock").exists() && have("docker") {
        let out = run(Command::new("docker").args(["load", "-i"]).arg(&archive));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("stackbuild-test:latest"), "{text}");
        let out =
            run(Command::new("docker").args(["run", "--rm", "--network", "none", "stackbuild-test:latest"]));
        assert_eq!(out.stdout, b"hello\n");
        let _ = Command::new("docker").args(["rmi", "stackbuild-test:latest"]).output();
    } else {
        eprintln!("note: no docker daemon at /var/run/docker.sock; skipping `docker load`");
    }

    if !have("umoci") {
        eprintln!("note: umoci not installed; skipping unpack and runc checks");
        return;
    }
    let bundle = work.path().join("bundle");
    let mut unpack = Command::new("umoci");
    unpack.arg("unpack");
    if !is_root() {
        unpack.arg("--rootless");
    }
    run(unpack.arg("--image").arg(format!("{}:test", layout.display())).arg(&bundle));
    let rootfs = bundle.join("rootfs");
    assert_eq!(fs::read(rootfs.join("bin/busybox")).unwrap(), fs::read(BUSYBOX).unwrap());
    assert!(rootfs.join("bin/sh").is_file());
    run_bundle(&bundle);
}

/// Runs the umoci bundle with runc (root only) and expects `hello`.
fn run_bundle(bundle: &Path) {
    if !is_root() || !have("runc") {
        eprintln!("note: not root or no runc; skipping `runc run`");
        return;
    }
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&fs::read(&config_path).unwrap()).unwrap();
    config["process"]["terminal"] = false.into();
    assert_eq!(config["process"]["args"], serde_json::json!([BUSYBOX, "echo", "hello"]));
    fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let state = tempfile::tempdir().unwrap();
    let id = format!("stackbuild-test-{}", std::process::id());
    let out = Command::new("runc")
        .arg("--root")
        .arg(state.path())
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(&id)
        .output()
        .unwrap();
    let _ = Command::new("runc").arg("--root").arg(state.path()).args(["delete", "--force", &id]).output();
    assert!(
        out.status.success(),
        "runc run failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
}

#[test]
fn zstd_layout_reads_back_and_unpacks_where_supported() {
    if !Path::new(BUSYBOX).is_file() || !have("umoci") {
        eprintln!("note: busybox or umoci missing; skipping");
        return;
    }
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(cache_dir.path()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let image = build_image(&cache, Compression::Zstd);
    let layout: PathBuf = work.path().join("layout");
    let digest = stackbuild_image::write_layout(&layout, &image, "zstd").unwrap();
    // Reading it back gives the same layers.
    let read = stackbuild_image::read_layout(&layout, Some("zstd")).unwrap();
    assert_eq!(read.manifest_digest, digest);
    assert_eq!(read.layers[0].diff_id, image.layers()[0].diff_id);
    if have("skopeo") {
        assert_eq!(skopeo_digest(&format!("oci:{}:zstd", layout.display())), digest);
    }
    let bundle = work.path().join("bundle");
    let mut unpack = Command::new("umoci");
    unpack.arg("unpack");
    if !is_root() {
        unpack.arg("--rootless");
    }
    let out = unpack.arg("--image").arg(format!("{}:zstd", layout.display())).arg(&bundle).output().unwrap();
    if out.status.success() {
        assert!(bundle.join("rootfs/bin/busybox").is_file());
    } else {
        // umoci 0.4.7 (bookworm) predates zstd layers; newer versions read them.
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("note: this umoci cannot unpack zstd layers: {err}");
    }
}
