//! `--compression estargz` and `--compression zstd:chunked` against the stargz snapshotter, the
//! lazy pull they exist for.
//!
//! stackbuild builds an image (scratch, a static busybox, a 9 MiB file of three chunks and a
//! small one) with eStargz (or zstd:chunked) layers, `skopeo copy --preserve-digests` pushes it to the suite's
//! registry on 127.0.0.1, and a private containerd whose `stargz` snapshotter is the stargz
//! snapshotter's own library (Debian's `golang-github-containerd-stargz-snapshotter-dev`,
//! served by `tests/stargz/main.go`, built by `.ci/install`) pulls it with `ctr-remote image
//! rpull`. The snapshotter mounts each layer over FUSE from the registry without downloading
//! it, after checking the TOC against the descriptor's `containerd.io/snapshot/stargz/toc.digest`,
//! and checks every chunk it fetches against the TOC. The test asserts that: the layers are
//! FUSE mounts, no layer blob is in containerd's content store, and a container started from
//! them reads every file with its right sha256 (each chunk fetched from the registry then).
//! Then the same image is pulled the ordinary way (`ctr images pull`, overlayfs) and reads the
//! same: to every other runtime it is a gzip (or zstd) image.
//!
//! Skipped (with a message, not passed) without root, /dev/fuse, containerd, ctr, ctr-remote,
//! skopeo, busybox, the daemon (`target/tools/containerd-stargz-grpc`, or
//! `STACKBUILD_STARGZ_GRPC`), the builder or the registry.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e::{have, is_root, text};

fn daemon_binary() -> PathBuf {
    std::env::var_os("STACKBUILD_STARGZ_GRPC").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/containerd-stargz-grpc"),
        PathBuf::from,
    )
}

fn registry() -> String {
    let port = std::env::var("STACKBUILD_TEST_REGISTRY_PORT").unwrap_or_else(|_| "5115".into());
    format!("127.0.0.1:{port}")
}

fn runnable() -> bool {
    let registry_up = std::net::TcpStream::connect(registry()).is_ok();
    let missing: Vec<&str> = [
        (!is_root()).then_some("root"),
        (!Path::new("/dev/fuse").exists()).then_some("/dev/fuse"),
        (!have("containerd")).then_some("containerd"),
        (!have("ctr")).then_some("ctr"),
        (!have("ctr-remote")).then_some("ctr-remote (stargz-snapshotter)"),
        (!have("skopeo")).then_some("skopeo"),
        (!Path::new("/bin/busybox").is_file()).then_some("busybox-static"),
        (!daemon_binary().is_file()).then_some("target/tools/containerd-stargz-grpc (.ci/install)"),
        (!e2e::stackbuild_bin().is_file()).then_some("target/release/stackbuild (or STACKBUILD_BIN)"),
        (!registry_up).then_some("the registry on 127.0.0.1 (.ci/services)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!("skipped: the eStargz test needs {}", missing.join(", "));
    false
}

/// A child process stopped (SIGTERM, then SIGKILL) on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::process::stop(&mut self.0, Duration::from_secs(20));
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Daemon {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    Daemon(cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn().unwrap())
}

/// The mount points below `dir` (from /proc/self/mountinfo) with their file system type.
fn mounts_below(dir: &Path) -> Vec<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = dir.to_string_lossy().into_owned();
    info.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = (*fields.get(4)?).to_owned();
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = (*fields.get(sep + 1)?).to_owned();
            point.starts_with(&prefix).then_some((point, fstype))
        })
        .collect()
}

/// Unmounts whatever is still mounted below `dir` (deepest first), so the temp dir can go.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let mut points: Vec<String> = mounts_below(&self.0).into_iter().map(|(p, _)| p).collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = Command::new("umount").arg("-l").arg(&p).status();
        }
    }
}

fn wait_for(what: &str, log: &Path, mut ready: impl FnMut() -> bool) {
    for _ in 0..120 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{what} did not come up within 30 s:\n{}", std::fs::read_to_string(log).unwrap_or_default());
}

fn sha256_hex(bytes: &[u8]) -> String {
    test_support::digest::sha256_hex(bytes)
}

/// Builds the test image with `compression` into `dir/layout` and pushes it to the registry;
/// returns the layout, the pushed reference and the big file's bytes.
fn build_and_push(dir: &Path, compression: &str) -> (PathBuf, String, Vec<u8>) {
    // The image: busybox, a file of three chunks (4 + 4 + 1 MiB) and a small one.
    let bin = dir.join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", bin.join("sh")).unwrap();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let big = test_support::rng::noise(9 << 20, 11);
    std::fs::write(data.join("big.bin"), &big).unwrap();
    std::fs::write(data.join("hello.txt"), b"hello from a lazy layer\n").unwrap();
    let recipe = dir.join("recipe.toml");
    std::fs::write(
        &recipe,
        "[image]\nname = \"estargz\"\ntag = \"e2e\"\n\n[base]\nscratch = true\n\n[[source]]\nname = \"bin\"\n\
         path = \"rootfs/bin\"\ndest = \"/bin\"\n\n[[source]]\nname = \"data\"\npath = \"data\"\ndest = \"/data\"\n",
    )
    .unwrap();
    let layout = dir.join("layout");
    let out = Command::new(e2e::stackbuild_bin())
        .args(["build", "--quiet", "--compression", compression, "--out"])
        .arg(&layout)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .arg(&recipe)
        .output()
        .unwrap();
    assert!(out.status.success(), "stackbuild: {}", text(&out.stderr));
    e2e::verify_layout(&layout, "e2e").unwrap_or_else(|e| panic!("layout: {e}"));

    let repository = compression.replace(':', "-");
    let reference = format!("{}/stackbuild-e2e/{repository}:{}", registry(), std::process::id());
    let out = Command::new("skopeo")
        .args(["copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:e2e", layout.display()))
        .arg(format!("docker://{reference}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo copy: {}", text(&out.stderr));

    (layout, reference, big)
}

/// The layer descriptors of the layout's (only) manifest.
fn manifest_layers(layout: &Path) -> Vec<serde_json::Value> {
    let read = |path: PathBuf| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let index = read(layout.join("index.json"));
    let digest = index["manifests"][0]["digest"].as_str().unwrap().trim_start_matches("sha256:");
    read(layout.join("blobs/sha256").join(digest))["layers"].as_array().unwrap().clone()
}

/// The snapshotter's daemon (its socket, log and root under `dir`), then a containerd that
/// uses it as its `stargz` snapshotter (socket `dir/c.sock`, log `dir/containerd.log`).
fn start_node(dir: &Path) -> (Daemon, Daemon) {
    let sock = dir.join("stargz.sock");
    let stargz_log = dir.join("stargz.log");
    let stargz_root = dir.join("stargz-root");
    let stargz = spawn(
        Command::new(daemon_binary()).arg("-address").arg(&sock).arg("-root").arg(&stargz_root).args([
            "-config",
            "",
            "-log-level",
            "debug",
        ]),
        &stargz_log,
    );
    wait_for("the stargz snapshotter", &stargz_log, || sock.exists());
    let d = dir.display();
    let config = format!(
        "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\n[grpc]\n  address = \"{d}/c.sock\"\n\n\
         [ttrpc]\n  address = \"{d}/c.sock.ttrpc\"\n\n[debug]\n  address = \"\"\n\n[metrics]\n  address = \"\"\n\n\
         [proxy_plugins]\n  [proxy_plugins.stargz]\n    type = \"snapshot\"\n    address = \"{}\"\n",
        sock.display()
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let containerd_log = dir.join("containerd.log");
    let containerd =
        spawn(Command::new("containerd").arg("--config").arg(dir.join("config.toml")), &containerd_log);
    (stargz, containerd)
}

#[test]
fn an_estargz_image_is_mounted_lazily_by_the_stargz_snapshotter_and_reads_right() {
    lazy_pull("estargz", "application/vnd.oci.image.layer.v1.tar+gzip");
}

#[test]
fn a_zstd_chunked_image_is_mounted_lazily_by_the_stargz_snapshotter_and_reads_right() {
    lazy_pull("zstd:chunked", "application/vnd.oci.image.layer.v1.tar+zstd");
}

/// An image built with `compression` (its layers of `media_type`) pulled lazily, then the
/// ordinary way.
fn lazy_pull(compression: &str, media_type: &str) {
    if !runnable() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _unmount = Unmount(dir.to_owned());

    let (layout, reference, big) = build_and_push(dir, compression);
    // The runtime's state is the host's: the two tests' containers and namespaces apart.
    let name = compression.replace(':', "-");
    let namespace = format!("stackbuild-{name}");

    let (_stargz, _containerd) = start_node(dir);
    let (stargz_log, stargz_root) = (dir.join("stargz.log"), dir.join("stargz-root"));
    let containerd_log = dir.join("containerd.log");
    let ctr = |program: &str| {
        let mut cmd = Command::new(program);
        cmd.arg("--address").arg(dir.join("c.sock")).args(["--namespace", &namespace]);
        cmd
    };
    wait_for("containerd", &containerd_log, || {
        ctr("ctr").arg("version").output().is_ok_and(|o| o.status.success())
    });

    let out = ctr("ctr-remote").args(["image", "rpull", "--plain-http", &reference]).output().unwrap();
    assert!(
        out.status.success(),
        "ctr-remote image rpull: {}{}\n{}",
        text(&out.stdout),
        text(&out.stderr),
        std::fs::read_to_string(&stargz_log).unwrap_or_default()
    );

    // Lazily: every layer a FUSE mount of the snapshotter, no layer blob downloaded.
    let layers = manifest_layers(&layout);
    assert!(
        layers.iter().all(|l| l["annotations"]["containerd.io/snapshot/stargz/toc.digest"].is_string()
            && l["mediaType"] == media_type),
        "{layers:?}"
    );
    let fuse: Vec<_> =
        mounts_below(&stargz_root).into_iter().filter(|(_, t)| t.starts_with("fuse")).collect();
    assert_eq!(fuse.len(), layers.len(), "one FUSE mount per layer: {fuse:?}");
    let content = ctr("ctr").args(["content", "ls", "-q"]).output().unwrap();
    let stored = text(&content.stdout);
    for l in &layers {
        let digest = l["digest"].as_str().unwrap();
        assert!(!stored.contains(digest), "layer {digest} was downloaded: {stored}");
    }

    // A container reads every file through the mounts.
    let busybox = std::fs::read("/bin/busybox").unwrap();
    let want = [
        (sha256_hex(&big), "/data/big.bin"),
        (sha256_hex(b"hello from a lazy layer\n"), "/data/hello.txt"),
        (sha256_hex(&busybox), "/bin/busybox"),
    ];
    let sums = |namespace: &str, snapshotter: &str, id: &str| {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address").arg(dir.join("c.sock")).args(["--namespace", namespace]);
        let out = cmd
            .args(["run", "--rm", "--snapshotter", snapshotter, &reference, id, "/bin/busybox", "sha256sum"])
            .args(want.iter().map(|(_, path)| *path))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctr run ({snapshotter}): {}\n{}",
            text(&out.stderr),
            text(&out.stdout)
        );
        let printed = text(&out.stdout);
        for (digest, path) in &want {
            assert!(printed.contains(&format!("{digest}  {path}")), "{snapshotter}: {path}: {printed}");
        }
    };
    sums(&namespace, "stargz", &format!("{name}-lazy"));
    let log = std::fs::read_to_string(&stargz_log).unwrap_or_default();
    assert!(log.contains("msg=verified"), "the snapshotter did not verify the TOC:\n{log}");
    assert!(!log.contains("invalid"), "{log}");

    // Any other runtime pulls the same image as gzip or zstd: containerd's own pull and overlayfs.
    let plain = &format!("{namespace}-plain");
    let out = Command::new("ctr")
        .arg("--address")
        .arg(dir.join("c.sock"))
        .args(["--namespace", plain, "images", "pull", "--plain-http", &reference])
        .output()
        .unwrap();
    assert!(out.status.success(), "ctr images pull: {}", text(&out.stderr));
    sums(plain, "overlayfs", &format!("{name}-plain"));
    // The image goes before containerd stops, so its snapshots unmount.
    let _ = ctr("ctr").args(["image", "rm", "--sync", &reference]).output();
}
