//! stackhook under containerd, as Kubernetes uses it: a `RuntimeClass` handler is a runtime of
//! type `io.containerd.runc.v2` whose `BinaryName` is the stackhook wrapper, so the runc v2 shim
//! runs the wrapper in place of runc, and the wrapper adds the hook to the container's bundle.
//!
//! Each test runs a private containerd (Debian's `containerd` package, 1.6 on bookworm; it
//! comes with `docker.io`): its own `--config` with root, state and gRPC/ttrpc sockets under a
//! temp dir, the overlayfs snapshotter, no TCP listener. The machine's containerd is not
//! touched. The image is built by `stackbuild` (`--archive`) and imported with
//! `ctr images import`; containers start with `ctr run --runtime io.containerd.runc.v2
//! --runc-binary <wrapper>`, which sets the same shim option (`BinaryName`) a runtime handler
//! does. The wrapper finds its configuration through `STACKHOOK_CONFIG` in containerd's
//! environment, which containerd hands to the shim and the shim to the wrapper.
//!
//! The runtime handler `stackhook install containerd` prints is loaded into such a containerd
//! and must come out of `containerd config dump` with the CRI plugin running.
//!
//! Skipped (with a message, not passed) without root, containerd, ctr, runc or the builder.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::containerd::{install_handler, Containerd, SHIM};
use e2e::{binary, have, installed_copy, is_root, text, write_config};
use stackhook::fixture::Preset;

/// The test image: scratch, a static busybox in `/bin`, and `[host] modules = ["nvidia_uvm"]`,
/// which stackbuild turns into `NVIDIA_VISIBLE_DEVICES=all` and
/// `STACKBUILD_REQUIRE_MODULES=module=nvidia_uvm`.
const IMAGE: &str = "stackhook-e2e-containerd:test";
/// The broken host, and the code its verdict names.
const BROKEN: Preset = Preset::UvmMissing;
/// The containerd namespace the tests use (Kubernetes uses `k8s.io`).
const NAMESPACE: &str = "stackhook-e2e";

/// Whether the tests can run here; prints why not.
fn runnable() -> bool {
    let missing: Vec<&str> = [
        (!is_root()).then_some("root"),
        (!have("containerd")).then_some("containerd"),
        (!have("ctr")).then_some("ctr"),
        (!have("runc")).then_some("runc"),
        (!Path::new("/bin/busybox").is_file()).then_some("busybox-static"),
        (!e2e::stackbuild_bin().is_file()).then_some("target/release/stackbuild (or STACKBUILD_BIN)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!("skipped: containerd tests need {}", missing.join(", "));
    false
}

/// Builds the test image with stackbuild; returns its archive.
fn build_image(dir: &Path) -> PathBuf {
    let bin = dir.join("rootfs/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    for applet in ["sh", "echo", "cat", "true"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    e2e::build_gpu_test_image(dir, IMAGE).unwrap_or_else(|e| panic!("stackbuild: {e}"))
}

/// What one test sets up: the wrapper installed, its configuration file, a containerd running
/// the handler `install` printed with `STACKHOOK_CONFIG` pointing at that file, and the image
/// imported.
struct Setup {
    dir: tempfile::TempDir,
    wrapper: PathBuf,
    table: String,
    config: PathBuf,
    reports: PathBuf,
    daemon: Containerd,
}

fn setup() -> Setup {
    // Short paths: containerd's sockets must fit in sun_path (108 bytes).
    let dir = tempfile::Builder::new().prefix("shctd").tempdir_in("/tmp").unwrap();
    let stackhook = installed_copy(dir.path());
    let config = dir.path().join("stackhook.toml");
    let reports = dir.path().join("reports");
    write_config(&config, &dir.path().join("no-host-yet"), "enforce", &reports);
    let (wrapper, table) = install_handler(&stackhook, &dir.path().join("prefix"), &config);
    let archive = build_image(&dir.path().join("image"));
    let ctd = dir.path().join("ctd");
    let toml = format!("{}{table}", Containerd::base_config(&ctd));
    let daemon = Containerd::start(&ctd, &toml, &[("STACKHOOK_CONFIG", &config)], NAMESPACE).unwrap();
    daemon.import(&archive);
    Setup { dir, wrapper, table, config, reports, daemon }
}

impl Setup {
    /// Runs the image on the fixture host `preset`; returns (started, stdout, stderr) and the
    /// hook's decision.
    fn run_on(&self, preset: Preset) -> (bool, String, String, String) {
        let host = preset.build(&self.dir.path().join(format!("host-{}", preset.name()))).unwrap();
        write_config(&self.config, host.root(), "enforce", &self.reports);
        let id = format!("ctd-{}-{}", preset.name().replace('_', "-"), std::process::id());
        let out = self.daemon.run_with(&self.wrapper, &[], IMAGE, &id, &["echo", "container-ran"]);
        let report = self.reports.join(format!("{id}.json"));
        let decision = std::fs::read(&report)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["decision"].as_str().map(str::to_owned))
            .unwrap_or_default();
        (out.status.success(), text(&out.stdout), text(&out.stderr), decision)
    }
}

#[test]
fn containerd_accepts_the_runtime_handler_install_prints() {
    if !runnable() {
        return;
    }
    let s = setup();
    let dump = Command::new("containerd")
        .arg("--config")
        .arg(&s.daemon.config)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(dump.status.success(), "containerd config dump: {}", text(&dump.stderr));
    let dump = text(&dump.stdout);
    let handler = format!("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.{}]", "stackhook");
    let at = dump
        .find(&handler)
        .unwrap_or_else(|| panic!("no {handler} in the dump:\n{dump}\nloaded:\n{}", s.table));
    let section = &dump[at..];
    assert!(section.contains(&format!("runtime_type = \"{SHIM}\"")), "{section}");
    assert!(section.contains(&format!("BinaryName = \"{}\"", s.wrapper.display())), "{section}");
    // The CRI plugin validates its runtimes when it loads: it is running with ours.
    let plugins = s.daemon.ctr().args(["plugins", "ls"]).output().unwrap();
    let plugins = text(&plugins.stdout);
    let cri = plugins.lines().find(|l| l.contains("io.containerd.grpc.v1") && l.contains(" cri "));
    assert!(
        cri.is_some_and(|l| l.trim_end().ends_with("ok")),
        "CRI plugin not ok:\n{plugins}\n{}",
        s.daemon.log_tail(20)
    );
}

#[test]
fn healthy_host_starts_and_broken_host_is_blocked_through_the_runc_shim() {
    if !runnable() {
        return;
    }
    let s = setup();
    let (ok, stdout, stderr, decision) = s.run_on(Preset::Healthy);
    assert!(ok, "healthy host: the container did not start: {stderr}\n{}", s.daemon.log_tail(20));
    assert_eq!(stdout.trim(), "container-ran");
    assert_eq!(decision, "allowed", "the hook did not run on the healthy host");

    let (ok, stdout, stderr, decision) = s.run_on(BROKEN);
    assert!(!ok, "broken host: the container started: {stdout}");
    assert!(!stdout.contains("container-ran"), "the process ran: {stdout}");
    assert!(stderr.contains("stackhook: blocked"), "no verdict in ctr's error: {stderr}");
    let code = BROKEN.expected_code().unwrap();
    assert!(stderr.contains(code), "{code} missing from ctr's error: {stderr}");
    assert_eq!(decision, "blocked");
}

/// A CDI spec written for the driver before an upgrade mounts libraries that are gone: containerd
/// applies its edits and hands runc a bundle whose mount source does not exist. The wrapper's
/// pre-check says so with both driver versions and the remedy, where runc would only say that it
/// cannot stat the file.
#[test]
fn the_wrapper_diagnoses_a_stale_cdi_mount_before_runc() {
    if !runnable() {
        return;
    }
    let s = setup();
    let host = Preset::Healthy.build(&s.dir.path().join("host-stale")).unwrap();
    write_config(&s.config, host.root(), "enforce", &s.reports);
    let gone = host.root().join("usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14");
    let mount = format!(
        "type=bind,src={},dst=/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14,options=rbind:ro",
        gone.display()
    );
    let id = format!("ctd-stale-{}", std::process::id());
    let out = s.daemon.run_with(&s.wrapper, &["--mount", &mount], IMAGE, &id, &["echo", "container-ran"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !text(&out.stdout).contains("container-ran"), "started: {stderr}");
    assert!(stderr.contains("L2-CDI-STALE-LIBRARIES"), "no diagnosis in ctr's error: {stderr}");
    assert!(stderr.contains("550.54.14") && stderr.contains("535.104.05"), "{stderr}");
    assert!(stderr.contains("nvidia-ctk cdi generate"), "{stderr}");
}

/// `name:tag` of the node image recipe.
fn node_image_reference() -> String {
    let recipe = std::fs::read_to_string(e2e::workspace().join("recipes/stackhook-node.toml")).unwrap();
    let value = |key: &str| {
        recipe.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.trim().strip_prefix('='))).map_or_else(
            || panic!("no {key} in recipes/stackhook-node.toml"),
            |v| v.trim().trim_matches('"').to_owned(),
        )
    };
    format!("{}:{}", value("name"), value("tag"))
}

#[test]
fn the_daemonset_runs_the_image_the_node_recipe_builds() {
    let reference = node_image_reference();
    let daemonset =
        std::fs::read_to_string(e2e::workspace().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    let images: Vec<&str> =
        daemonset.lines().filter_map(|l| l.trim().strip_prefix("image:")).map(str::trim).collect();
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(images.iter().all(|i| *i == reference), "{images:?} is not {reference}");
    let kustomization =
        std::fs::read_to_string(e2e::workspace().join("deploy/kubernetes/kustomization.yaml")).unwrap();
    let (name, _) = reference.split_once(':').unwrap();
    assert!(kustomization.contains(&format!("name: {name}")), "{kustomization}");
}

/// The init container's shell script, as the `DaemonSet` has it.
fn init_script() -> String {
    let daemonset =
        std::fs::read_to_string(e2e::workspace().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    let mut lines = daemonset.lines().skip_while(|l| l.trim() != "- |").skip(1);
    let first = lines.next().unwrap();
    let indent = first.len() - first.trim_start().len();
    let mut script = format!("{}\n", first.trim_start());
    for line in lines {
        if !line.trim().is_empty() && line.len() - line.trim_start().len() < indent {
            break;
        }
        script.push_str(line.get(indent..).unwrap_or(""));
        script.push('\n');
    }
    script
}

/// The node image under containerd: built from recipes/stackhook-node.toml as
/// deploy/kubernetes/build-image.sh does (static hook, static busybox, scratch), imported, and
/// its init container's script run against a bind-mounted empty "host": the binary lands in the
/// host's /usr/local/bin, `stackhook install containerd` runs chrooted there, and the drop-in
/// with the runtime handler is written.
#[test]
fn the_node_image_installs_the_runtime_under_containerd() {
    if !runnable() {
        return;
    }
    let hook = binary("stackhook");
    let file = Command::new("file").arg(&hook).output().map(|o| text(&o.stdout)).unwrap_or_default();
    if !(file.contains("statically linked") || file.contains("static-pie")) {
        eprintln!(
            "skipped: {} is not statically linked (set STACKHOOK_BIN to the static hook)",
            hook.display()
        );
        return;
    }
    let dir = tempfile::Builder::new().prefix("shnode").tempdir_in("/tmp").unwrap();
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(stage.join("bin")).unwrap();
    std::fs::create_dir_all(stage.join("usr-local-bin")).unwrap();
    std::fs::copy(&hook, stage.join("usr-local-bin/stackhook")).unwrap();
    std::fs::copy("/bin/busybox", stage.join("bin/busybox")).unwrap();
    for applet in
        ["sh", "cp", "chmod", "mv", "chroot", "sed", "grep", "mkdir", "cat", "dirname", "echo", "rm"]
    {
        std::os::unix::fs::symlink("busybox", stage.join("bin").join(applet)).unwrap();
    }
    let archive = dir.path().join("node.tar");
    let out = Command::new(e2e::stackbuild_bin())
        .arg("build")
        .arg(e2e::workspace().join("recipes/stackhook-node.toml"))
        .args(["--quiet", "--out"])
        .arg(dir.path().join("layout"))
        .arg("--archive")
        .arg(&archive)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--source")
        .arg(format!("busybox={}", stage.join("bin").display()))
        .arg("--source")
        .arg(format!("stackhook={}", stage.join("usr-local-bin").display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "stackbuild recipes/stackhook-node.toml: {}", text(&out.stderr));
    let daemon = Containerd::start(
        &dir.path().join("ctd"),
        &Containerd::base_config(&dir.path().join("ctd")),
        &[],
        NAMESPACE,
    )
    .unwrap();
    daemon.import(&archive);
    let image = node_image_reference();
    let host = dir.path().join("host");
    std::fs::create_dir_all(host.join("usr/local/bin")).unwrap();
    std::fs::create_dir_all(host.join("etc/containerd")).unwrap();
    std::fs::create_dir_all(host.join("proc")).unwrap();
    let out = daemon
        .ctr()
        .args(["run", "--rm", "--mount"])
        .arg(format!("type=bind,src={},dst=/host,options=rbind:rw", host.display()))
        // A node's hostPath `/` brings the host's /proc along (the chrooted install reads
        // /proc/self/exe); the fake host gets the machine's.
        .args(["--mount", "type=bind,src=/proc,dst=/host/proc,options=rbind:ro"])
        .args([&image, &format!("node-{}", std::process::id()), "/bin/sh", "-c", &init_script()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the init script failed: {}{}\n{}",
        text(&out.stdout),
        text(&out.stderr),
        daemon.log_tail(20)
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("stackhook: installed"), "{stderr}");
    assert!(host.join("usr/local/bin/stackhook").is_file());
    assert_eq!(
        std::fs::read_link(host.join("usr/local/bin/stackhook-runtime")).unwrap(),
        Path::new("stackhook")
    );
    let dropin = std::fs::read_to_string(host.join("etc/containerd/conf.d/stackhook.toml")).unwrap();
    assert!(dropin.starts_with("version = 2\n"), "{dropin}");
    assert!(dropin.contains("BinaryName = \"/usr/local/bin/stackhook-runtime\""), "{dropin}");
    // The labels container's binary answers in the image too.
    let out = daemon
        .ctr()
        .args([
            "run",
            "--rm",
            &image,
            &format!("node-v-{}", std::process::id()),
            "/usr/local/bin/stackhook",
            "--version",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success() && text(&out.stdout).starts_with("stackhook "), "{}", text(&out.stderr));
}

/// The NRI mode's `DaemonSet`: the node image, `stackhook nri` with flags the binary takes, the
/// NRI socket mounted, and nothing that edits the runtime (no init container, no privilege, no
/// `RuntimeClass` in its kustomization). Both `DaemonSets` validate with kubernetes-validate
/// `--strict` for every Kubernetes it bundles from 1.34 on.
#[test]
fn the_nri_daemonset_edits_no_runtime_and_both_modes_validate() {
    let root = e2e::workspace().join("deploy/kubernetes");
    let nri = std::fs::read_to_string(root.join("nri/daemonset.yaml")).unwrap();
    let reference = node_image_reference();
    let images: Vec<&str> =
        nri.lines().filter_map(|l| l.trim().strip_prefix("image:")).map(str::trim).collect();
    assert!(!images.is_empty() && images.iter().all(|i| *i == reference), "{images:?} is not {reference}");
    for absent in [
        "initContainers",
        "privileged: true",
        "install containerd",
        "conf.d",
        "kind: RuntimeClass",
        "runtimeClassName",
    ] {
        assert!(!nri.contains(absent), "the NRI DaemonSet has {absent:?}");
    }
    assert!(!std::fs::read_to_string(root.join("nri/kustomization.yaml")).unwrap().contains("runtimeclass"));
    assert!(nri.contains("path: /var/run/nri"), "no NRI socket mount");
    // The container's command, run as written but for the socket: the binary takes every flag
    // and fails only on the missing socket.
    let mut args: Vec<String> = Vec::new();
    let mut lines = nri.lines().skip_while(|l| l.trim() != "- /usr/local/bin/stackhook").skip(1);
    for line in lines.by_ref() {
        let Some(arg) = line.trim().strip_prefix("- ") else { break };
        args.push(arg.replace("/var/run/nri/nri.sock", "/nonexistent/nri.sock").replace("/host", "/"));
    }
    assert_eq!(args.first().map(String::as_str), Some("nri"), "{args:?}");
    let out = Command::new(binary("stackhook")).args(&args).arg("--once").output().unwrap();
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("cannot connect to the NRI socket /nonexistent/nri.sock"),
        "{stderr}"
    );

    let venv = std::env::var_os("STACKBUILD_K8S_VENV")
        .map_or_else(|| e2e::workspace().join("target/k8s-validators"), PathBuf::from);
    let validate = venv.join("bin/kubernetes-validate");
    if !validate.is_file() {
        eprintln!("SKIPPED: kubernetes-validate not installed in {} (.ci/install makes it)", venv.display());
        return;
    }
    let versions = e2e::k8s_versions(&venv);
    assert!(!versions.is_empty(), "no schema from 1.34 on in {}", venv.display());
    for v in &versions {
        for file in
            [root.join("daemonset.yaml"), root.join("nri/daemonset.yaml"), root.join("runtimeclass.yaml")]
        {
            let out = Command::new(&validate).args(["--strict", "-k", v]).arg(&file).output().unwrap();
            assert!(
                out.status.success(),
                "kubernetes-validate --strict -k {v} {}: {}{}",
                file.display(),
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
    eprintln!(
        "kubernetes-validate --strict: both DaemonSets and the RuntimeClass, Kubernetes {}",
        versions.join(", ")
    );
}
