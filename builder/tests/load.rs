//! `--load` into a real dockerd: the layers go in as they are written (as untagged partial
//! images), the image comes out under its name with exactly the layout's layers, and no
//! partial image is left behind, whether the build succeeds, is rebuilt with one layer changed,
//! or fails after some layers went in; zstd layers go in too (Docker 20.10 reads no zstd).

use std::path::Path;
use std::process::Command;

mod common;
use common::{build, have, ok, six_patch, Built};
use test_support::tools::{dockerd_answers, DOCKER};

const PARTIAL: &str = "label=io.stackbuild.partial";

fn docker(args: &[&str]) -> String {
    let out = Command::new(DOCKER).args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The `diff_ids` of the image `tag` of the layout `dir`.
fn layout_diff_ids(dir: &Path) -> Vec<String> {
    stackbuild_image::read_layout(dir, Some("test")).unwrap().config.rootfs.diff_ids
}

/// The `diff_ids` dockerd holds for `reference`.
fn docker_diff_ids(reference: &str) -> Vec<String> {
    let json = docker(&["image", "inspect", "--format", "{{json .RootFS.Layers}}", reference]);
    serde_json::from_str(&json).unwrap()
}

/// `built` loaded the image of `layout` into dockerd as `reference`, layer by layer (no
/// fallback to a whole-image load), and it prints `says`; no partial image and none of the
/// layers' uncompressed copies for the daemon (`load::TarSpool`) are left.
fn assert_loaded(built: &Built, reference: &str, layout: &Path, cache: &Path, says: &str) {
    ok(built);
    let stderr = String::from_utf8_lossy(&built.out.stderr);
    assert!(!stderr.contains("whole"), "no fallback to a whole-image load: {stderr}");
    assert_eq!(docker(&["run", "--rm", "--network", "none", reference]), says);
    assert_eq!(docker_diff_ids(reference), layout_diff_ids(layout), "dockerd holds the layout's layers");
    assert_eq!(docker(&["images", "-aq", "--filter", PARTIAL]), "", "partial images removed");
    let left: Vec<_> = std::fs::read_dir(cache.join("tmp")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "nothing left in the cache's tmp/: {left:?}");
}

fn recipe(dir: &Path, message: &str, find: &str) -> std::path::PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("message"), message).unwrap();
    let path = dir.join("loaded.toml");
    std::fs::write(
        &path,
        format!(
            r#"[image]
name = "stackbuild-load-test"
tag = "test"
cmd = ["/bin/busybox", "cat", "/srv/message"]

[base]
scratch = true

[python]
version = "3.11"
packages = ["six==1.16.0"]

[[source]]
name = "bin"
path = "{bin}"
dest = "/bin"

[[source]]
name = "files"
path = "{files}"
dest = "/srv"

{patch}"#,
            bin = bin.display(),
            files = files.display(),
            patch = six_patch(find),
        ),
    )
    .unwrap();
    path
}

#[test]
fn load_streams_layers_and_leaves_no_partial_images() {
    if !rustix::process::geteuid().is_root() || !Path::new("/bin/busybox").exists() || !have("uv") {
        eprintln!("skipped: needs root, busybox-static and uv (run .ci/install)");
        return;
    }
    if !dockerd_answers() {
        eprintln!("skipped: no dockerd answering (.ci/services starts one)");
        return;
    }
    let reference = "stackbuild-load-test:test";
    let _ = Command::new(DOCKER).args(["rmi", "-f", reference]).output();
    let dangling_before = docker(&["images", "-q", "--filter", "dangling=true"]);
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let layout = tmp.path().join("layout");
    let find = r#"__version__ = "1.16.0""#;

    let first = build(&recipe(tmp.path(), "first\n", find), &cache, &layout, &["--load"]);
    assert_loaded(&first, reference, &layout, &cache, "first");
    let first_id = docker(&["image", "inspect", "--format", "{{.Id}}", reference]);

    // One layer changed: only it (and what follows) is sent, and the image is replaced.
    let second = build(&recipe(tmp.path(), "second\n", find), &cache, &layout, &["--load"]);
    assert_loaded(&second, reference, &layout, &cache, "second");

    // A build that fails after its first layers went in leaves nothing behind, and the image
    // of the last good build keeps its name.
    let failed = build(
        &recipe(tmp.path(), "third\n", "not in six.py"),
        &cache,
        &tmp.path().join("failed"),
        &["--load"],
    );
    assert!(!failed.out.status.success(), "the patch cannot apply");
    assert_eq!(docker(&["images", "-aq", "--filter", PARTIAL]), "", "partial images removed after a failure");
    assert_eq!(docker(&["run", "--rm", "--network", "none", reference]), "second");

    // zstd layers, which Docker before 23.0 cannot read: those the build writes go in as their
    // uncompressed tars, and those reused from the cache (all of them here, after a build
    // without --load) are decompressed into one first.
    let _ = Command::new(DOCKER).args(["rmi", "-f", reference]).output();
    let zstd = tmp.path().join("zstd");
    ok(&build(&recipe(tmp.path(), "zstd\n", find), &cache, &zstd, &["--compression", "zstd"]));
    let reused =
        build(&recipe(tmp.path(), "zstd\n", find), &cache, &zstd, &["--compression", "zstd", "--load"]);
    assert_loaded(&reused, reference, &zstd, &cache, "zstd");

    // The first image lost its name to the second, as with `docker load`; both go.
    let _ = Command::new(DOCKER).args(["rmi", "-f", reference, &first_id]).output();
    let dangling_after = docker(&["images", "-q", "--filter", "dangling=true"]);
    assert!(
        dangling_after.lines().all(|id| dangling_before.contains(id)),
        "no new dangling images: before {dangling_before:?}, after {dangling_after:?}"
    );
}
