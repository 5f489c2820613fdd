//! Pushes and pulls through `stackbuild_image::registry` against a real registry: Debian's
//! `docker-registry` (the CNCF distribution registry 2.8) on a free loopback port, with skopeo
//! as the independent client that reads back what was pushed.
//!
//! Without `docker-registry` (or `/bin/busybox`) the tests print why and pass; without skopeo
//! they skip only its checks.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_image::LayerWriter;
use stackbuild_image::{Client, Credentials, PushOptions, Reference, RegistryError};
use stackbuild_image::{Image, ImageConfig, RuntimeConfig};

mod common;
use common::{have, Registry, RegistryExt};
use test_support::digest::sha256_hex;
use test_support::process::run;
use test_support::rng::noise;
use test_support::tools::go_arch;

const BUSYBOX: &str = "/bin/busybox";
const MIB: u64 = 1024 * 1024;

/// An image layout at `dir` tagged `tag`: `/bin/busybox`, `/bin/sh` and, when `extra` is not
/// zero, `/data` of `extra` incompressible bytes. Returns the manifest digest.
fn busybox_layout(cache: &Cache, dir: &Path, tag: &str, extra: usize) -> String {
    let stage = tempfile::tempdir().unwrap();
    fs::create_dir(stage.path().join("bin")).unwrap();
    fs::copy(BUSYBOX, stage.path().join("bin/busybox")).unwrap();
    fs::hard_link(stage.path().join("bin/busybox"), stage.path().join("bin/sh")).unwrap();
    if extra > 0 {
        fs::write(stage.path().join("data"), noise(extra, 42)).unwrap();
    }
    let mut writer = LayerWriter::new(cache, 0);
    writer.add_dir(stage.path(), "/").unwrap();
    let layer = writer.finish(Compression::Gzip).unwrap();
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
    let image = Image::new(config, vec![layer], BTreeMap::new()).unwrap();
    stackbuild_image::write_layout(dir, &image, tag).unwrap()
}

fn client() -> Client {
    Client::new(Vec::<String>::new()).anonymous().with_retries(3, Duration::from_millis(50))
}

/// The manifest digest skopeo sees at `reference` (`docker://` references over plain HTTP),
/// checked against the raw manifest it reads.
fn skopeo_digest(reference: &str) -> String {
    let tls = reference.starts_with("docker://").then_some("--tls-verify=false");
    let raw = run(Command::new("skopeo").args(["inspect", "--raw"]).args(tls).arg(reference)).stdout;
    let out = run(Command::new("skopeo").arg("inspect").args(tls).arg(reference));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let digest = json["Digest"].as_str().unwrap_or_default().to_string();
    assert_eq!(digest, format!("sha256:{}", sha256_hex(&raw)), "{reference}");
    digest
}

fn setup() -> Option<(Registry, tempfile::TempDir, Cache)> {
    if !Path::new(BUSYBOX).is_file() {
        eprintln!("note: {BUSYBOX} missing (install busybox-static); skipping");
        return None;
    }
    let registry = Registry::start(None)?;
    let work = tempfile::tempdir().unwrap();
    let cache = Cache::open(work.path().join("cache")).unwrap();
    Some((registry, work, cache))
}

#[test]
fn push_is_read_back_by_skopeo_and_a_second_push_uploads_nothing() {
    let Some((registry, work, cache)) = setup() else { return };
    let layout = work.path().join("layout");
    let digest = busybox_layout(&cache, &layout, "test", 0);
    let dest = registry.reference("stackbuild/busybox:v1");
    let client = client();

    let report = stackbuild_image::push_layout(&client, &layout, Some("test"), &dest).unwrap();
    assert_eq!(report.manifest_digest, digest);
    assert_eq!((report.blobs_uploaded, report.blobs_skipped, report.blobs_mounted), (2, 0, 0));
    // busybox gzipped is under the default 16 MiB chunk: HEAD, POST and PUT per blob, then
    // the manifest PUT.
    assert_eq!(report.requests, 7);

    if have("skopeo") {
        let remote = format!("docker://{}/stackbuild/busybox:v1", registry.addr);
        assert_eq!(skopeo_digest(&remote), digest);
        let copy = work.path().join("copy");
        run(Command::new("skopeo")
            .args(["copy", "--insecure-policy", "--src-tls-verify=false", &remote])
            .arg(format!("oci:{}:v1", copy.display())));
        assert_eq!(skopeo_digest(&format!("oci:{}:v1", copy.display())), digest);
    } else {
        eprintln!("note: skopeo not installed; skipping skopeo checks");
    }

    let again = stackbuild_image::push_layout(&client, &layout, Some("test"), &dest).unwrap();
    assert_eq!(again.manifest_digest, digest);
    assert_eq!((again.blobs_uploaded, again.blobs_skipped, again.bytes_uploaded), (0, 2, 0));
    // One HEAD per blob and the manifest PUT.
    assert_eq!(again.requests, 3);
}

#[test]
fn chunked_push_and_pull_back() {
    let Some((registry, work, cache)) = setup() else { return };
    let layout = work.path().join("layout");
    let digest = busybox_layout(&cache, &layout, "big", 3 * 1024 * 1024);
    let image = stackbuild_image::read_layout(&layout, Some("big")).unwrap();
    let layer_size = image.layers[0].size;
    assert!(layer_size > 3 * MIB, "{layer_size}");
    let chunks = layer_size.div_ceil(MIB);
    let client = client().with_chunk_size(MIB);
    let dest = registry.reference("chunked:1");

    let report = stackbuild_image::push_layout(&client, &layout, None, &dest).unwrap();
    assert_eq!(report.manifest_digest, digest);
    assert_eq!(report.blobs_uploaded, 2);
    // HEAD x2, POST x2, the config in one PUT, the layer in PATCHes and a closing PUT, the
    // manifest PUT.
    assert_eq!(report.requests, 2 + 2 + 1 + chunks + 1 + 1, "{report:?}");
    assert_eq!(report.bytes_uploaded, layer_size + image.manifest.config.size);
    if have("skopeo") {
        assert_eq!(skopeo_digest(&format!("docker://{}/chunked:1", registry.addr)), digest);
    }

    // Pull it back into a new layout: the same manifest and the same blobs.
    let out = work.path().join("pulled");
    let pulled = stackbuild_image::pull(&client, &dest, &out).unwrap();
    assert_eq!(pulled.image.manifest_digest, digest);
    assert_eq!(pulled.layout_tag, "1");
    assert_eq!(pulled.blobs_downloaded, 2);
    assert_eq!(pulled.image.config, image.config);
    assert_eq!(pulled.image.layers[0].digest, image.layers[0].digest);
    assert_eq!(fs::read(&pulled.image.layers[0].path).unwrap(), fs::read(&image.layers[0].path).unwrap());
    stackbuild_image::verify_layout_blob(&pulled.image.layers[0]).unwrap();
    if have("skopeo") {
        assert_eq!(skopeo_digest(&format!("oci:{}:1", out.display())), digest);
    }

    // By digest, into the same layout under another tag: nothing downloaded again.
    let by_digest = Reference { tag: None, digest: Some(digest.clone()), ..dest.clone() };
    let options = stackbuild_image::PullOptions {
        layout_tag: Some("pinned"),
        ..stackbuild_image::PullOptions::default()
    };
    let again = stackbuild_image::pull_with(&client, &by_digest, &out, &options).unwrap();
    assert_eq!((again.blobs_downloaded, again.blobs_present), (0, 2));
    assert_eq!(stackbuild_image::read_layout(&out, Some("pinned")).unwrap().manifest_digest, digest);
}

#[test]
fn cross_repository_mount() {
    let Some((registry, work, cache)) = setup() else { return };
    let layout = work.path().join("layout");
    let digest = busybox_layout(&cache, &layout, "t", 0);
    let client = client();
    stackbuild_image::push_layout(&client, &layout, None, &registry.reference("team/a:1")).unwrap();
    let options = PushOptions { mount_from: Some("team/a") };
    let report =
        stackbuild_image::push_layout_with(&client, &layout, None, &registry.reference("team/b:1"), &options)
            .unwrap();
    assert_eq!((report.blobs_mounted, report.blobs_uploaded, report.bytes_uploaded), (2, 0, 0), "{report:?}");
    assert_eq!(report.manifest_digest, digest);
    let pulled =
        stackbuild_image::pull(&client, &registry.reference("team/b:1"), &work.path().join("out")).unwrap();
    assert_eq!(pulled.image.manifest_digest, digest);
}

#[test]
fn corrupted_blob_in_the_registry_fails_the_pull() {
    let Some((registry, work, cache)) = setup() else { return };
    let layout = work.path().join("layout");
    busybox_layout(&cache, &layout, "t", 0);
    let client = client();
    let dest = registry.reference("corrupt:1");
    stackbuild_image::push_layout(&client, &layout, None, &dest).unwrap();

    let layer = stackbuild_image::read_layout(&layout, None).unwrap().layers[0].digest.clone();
    let data = registry.blob_data(&layer);
    let mut bytes = fs::read(&data).unwrap_or_else(|e| panic!("{}: {e}", data.display()));
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&data, bytes).unwrap();

    let out = work.path().join("out");
    let err = stackbuild_image::pull(&client, &dest, &out).unwrap_err();
    let text = err.to_string();
    assert!(matches!(&err, RegistryError::DigestMismatch { what, .. } if what.contains(&layer)), "{text}");
    assert!(!out.join("blobs/sha256").join(&layer[7..]).exists(), "a corrupt blob stays out of the layout");
}

#[test]
fn basic_auth_with_htpasswd() {
    // docker-registry's htpasswd file wants bcrypt; make one with `htpasswd` or Python's crypt.
    let bcrypt = |cmd: &mut Command| cmd.output().ok().filter(|o| o.status.success()).map(|o| o.stdout);
    let script = "import crypt; print('alice:' + crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH)))";
    let line = bcrypt(Command::new("htpasswd").args(["-nbB", "alice", "s3cret"]))
        .or_else(|| bcrypt(Command::new("python3").args(["-W", "ignore", "-c", script])));
    let Some(line) = line else {
        eprintln!("note: neither htpasswd nor Python's crypt can make a bcrypt hash; skipping");
        return;
    };
    if !Path::new(BUSYBOX).is_file() {
        eprintln!("note: {BUSYBOX} missing; skipping");
        return;
    }
    let Some(registry) = Registry::start(Some(&String::from_utf8_lossy(&line))) else { return };
    let work = tempfile::tempdir().unwrap();
    let cache = Cache::open(work.path().join("cache")).unwrap();
    let layout = work.path().join("layout");
    let digest = busybox_layout(&cache, &layout, "t", 0);
    let dest = registry.reference("private:1");

    let err = stackbuild_image::push_layout(&client(), &layout, None, &dest).unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");

    let user = Credentials { username: "alice".into(), password: "s3cret".into() };
    let client = client().with_credentials(&registry.addr, user);
    let report = stackbuild_image::push_layout(&client, &layout, None, &dest).unwrap();
    assert_eq!(report.manifest_digest, digest);
    let pulled = stackbuild_image::pull(&client, &dest, &work.path().join("out")).unwrap();
    assert_eq!(pulled.image.manifest_digest, digest);
}
