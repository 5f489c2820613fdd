//! The kubelet's calls, end to end: `RunPodSandbox`, `CreateContainer` and `StartContainer` on
//! containerd's CRI socket, through a CRI client built on tonic and kubernetes/cri-api's proto
//! (`test-support/cri`), on two paths:
//!
//! - **the runtime handler** (Debian bookworm's containerd 1.6): the pod names the `stackhook`
//!   handler that `stackhook install containerd` prints; the hook runs when the task is created,
//!   so a refusal is the error of `StartContainer`;
//! - **NRI** (Debian trixie's containerd 1.7.24, NRI enabled, unpacked by
//!   `.ci/trixie-containerd`): `stackhook nri` registered on the runtime's NRI socket, pods on
//!   the default runc handler, no runtime configuration of ours; a refusal is the error of
//!   `CreateContainer`.
//!
//! Each case runs on a fixture host (driver 535.104.05, one H100): a CUDA 13 image is refused
//! with its verdict code and remedy in the CRI error text (printed, so a run shows what a pod's
//! events carry); a fitting one starts; a container without a GPU is untouched; a GPU given by
//! CDI (containerd's `enable_cdi`, a spec for the fixture host) is judged by its device nodes.
//! Then the plugin is stopped mid-run: containerd 1.7 drops it and creates what it would have
//! refused (NRI fails open; docs/kubernetes.md says how a node makes the plugin required), and
//! the plugin, started again, refuses again.
//!
//! Skipped (with a message, not passed) without root, runc, busybox, our binaries or the
//! containerd each path needs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cri_client::{container_config, pod_config, v1, Cri};
use e2e::containerd::{install_handler, Containerd};
use e2e::{binary, have, installed_copy, is_root, write_config};
use stackhook::fixture::Preset;

/// The CRI plugin's namespace, the kubelet's.
const K8S: &str = "k8s.io";
const PAUSE: &str = "stackhook-e2e-pause:test";
const PLAIN: &str = "stackhook-e2e-plain:test";
const CUDA13: &str = "stackhook-e2e-cuda13:test";
const CUDA122: &str = "stackhook-e2e-cuda122:test";
/// Asks for CUDA 13 but for no GPU: a GPU comes only through CDI.
const REQUIRE13: &str = "stackhook-e2e-require13:test";

/// Whether this path can run here; prints why not.
fn runnable(path: &str, containerd: &Path) -> bool {
    let missing: Vec<String> = [
        (!is_root()).then(|| "root".to_owned()),
        (!have("runc")).then(|| "runc".to_owned()),
        (!Path::new("/bin/busybox").is_file()).then(|| "busybox-static".to_owned()),
        (!e2e::stackbuild_bin().is_file())
            .then(|| "target/release/stackbuild (or STACKBUILD_BIN)".to_owned()),
        (!containerd.is_file()).then(|| containerd.display().to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!("skipped: the CRI {path} test needs {}", missing.join(", "));
    false
}

/// Trixie's containerd, unpacked by `.ci/trixie-containerd`.
fn trixie_bin() -> PathBuf {
    e2e::workspace().join("target/tools/containerd-trixie/usr/bin")
}

/// The images, built by stackbuild and imported into the daemon's `k8s.io` namespace.
fn import_images(daemon: &Containerd, dir: &Path) {
    let pause = "entrypoint = [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM INT; while :; do sleep 1; done\"]\n";
    let gpu = |cuda: &str, visible: bool| {
        let visible = if visible { "NVIDIA_VISIBLE_DEVICES = \"all\"\n" } else { "" };
        format!("[image.env]\n{visible}NVIDIA_REQUIRE_CUDA = \"cuda>={cuda}\"\n")
    };
    for (reference, keys, tail) in [
        (PAUSE, pause.to_owned(), String::new()),
        (PLAIN, String::new(), String::new()),
        (CUDA13, String::new(), gpu("13.0", true)),
        (CUDA122, String::new(), gpu("12.2", true)),
        (REQUIRE13, String::new(), gpu("13.0", false)),
    ] {
        let sub = dir.join(reference.rsplit('/').next().unwrap().replace(':', "-"));
        std::fs::create_dir_all(&sub).unwrap();
        // `[image.env]` is a table of [image]: it goes after the image's own keys.
        let archive = e2e::build_busybox_image(&sub, reference, &format!("{keys}{tail}"), "")
            .unwrap_or_else(|e| panic!("stackbuild {reference}: {e}"));
        daemon.import(&archive);
        // The CRI plugin looks images up by their normalized name (`docker.io/library/...`,
        // as the kubelet's pull would have named them); `ctr images import` keeps the name the
        // archive carries.
        let normalized = format!("docker.io/library/{reference}");
        let out = daemon.ctr().args(["images", "tag", "--force", reference, &normalized]).output().unwrap();
        assert!(out.status.success(), "ctr images tag: {}", e2e::text(&out.stderr));
    }
}

/// The CRI plugin's CNI directories, empty: pods use the node's network.
fn cni_config(dir: &Path) -> String {
    let d = dir.display();
    format!("[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"{d}/cni-bin\"\n  conf_dir = \"{d}/cni-conf\"\n\n")
}

/// A pod's containers, run as the kubelet runs them.
struct Pod<'a> {
    cri: &'a mut Cri,
    id: String,
    config: v1::PodSandboxConfig,
}

impl Pod<'_> {
    /// `CreateContainer` then `StartContainer`; `Ok` once it exited 0 (its output was
    /// `container-ran`), `Err` with the first CRI error's text.
    fn run(&mut self, name: &str, image: &str, annotations: &[(&str, &str)]) -> Result<(), String> {
        let config = container_config(name, image, &["/bin/echo", "container-ran"], &[], annotations);
        let id = self
            .cri
            .create_container(&self.id, &self.config, &config)
            .map_err(|s| format!("CreateContainer: {}", s.message()))?;
        self.cri.start_container(&id).map_err(|s| format!("StartContainer: {}", s.message()))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = self.cri.container_status(&id).map_err(|s| s.message().to_owned())?;
            if status.state == v1::ContainerState::ContainerExited as i32 {
                return if status.exit_code == 0 {
                    Ok(())
                } else {
                    Err(format!("exited {}: {}", status.exit_code, status.message))
                };
            }
            if Instant::now() > deadline {
                return Err(format!("{name} did not exit within 20 s"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn run_pod<'a>(cri: &'a mut Cri, dir: &Path, handler: &str) -> Pod<'a> {
    let logs = dir.join("pod-logs");
    std::fs::create_dir_all(&logs).unwrap();
    let config = pod_config("ml", "trainer-0", &format!("uid-{}", std::process::id()), &logs);
    let id =
        cri.run_pod_sandbox(&config, handler).unwrap_or_else(|s| panic!("RunPodSandbox: {}", s.message()));
    Pod { cri, id, config }
}

/// Prints a refusal as a pod's events would carry it, and checks its verdict and remedy.
fn assert_refused(what: &str, err: &str, code: &str) {
    eprintln!("--- {what}: the CRI error ---\n{err}\n---");
    assert!(err.contains("stackhook: blocked"), "{what}: no verdict in the CRI error: {err}");
    assert!(err.contains(code), "{what}: {code} missing from the CRI error: {err}");
    assert!(err.contains("fix: install driver"), "{what}: no remedy in the CRI error: {err}");
}

#[test]
fn the_runtime_handler_path_refuses_through_cri_on_containerd_1_6() {
    if !runnable("runtime-handler", Path::new("/usr/bin/containerd")) || !have("ctr") {
        return;
    }
    // Short paths: containerd's sockets must fit in sun_path (108 bytes).
    let dir = tempfile::Builder::new().prefix("shcri").tempdir_in("/tmp").unwrap();
    let host = Preset::Healthy.build(&dir.path().join("host")).unwrap();
    let stackhook = installed_copy(dir.path());
    let config = dir.path().join("stackhook.toml");
    let reports = dir.path().join("reports");
    write_config(&config, host.root(), "enforce", &reports);
    let (_wrapper, table) = install_handler(&stackhook, &dir.path().join("prefix"), &config);
    let ctd = dir.path().join("ctd");
    let toml = format!("{}{}{table}", Containerd::base_config(&ctd), cni_config(&ctd));
    let toml = for_this_machine(&toml, None, &ctd);
    let daemon = Containerd::start(&ctd, &toml, &[("STACKHOOK_CONFIG", &config)], K8S).unwrap();
    import_images(&daemon, &dir.path().join("images"));
    let mut cri = Cri::connect(&daemon.socket).unwrap();
    let version = cri.version().unwrap();
    eprintln!("CRI: {} {}", version.runtime_name, version.runtime_version);
    let mut pod = run_pod(&mut cri, dir.path(), "stackhook");

    let refused = pod.run("cuda13", CUDA13, &[]).expect_err("a CUDA 13 image started on R535");
    assert!(refused.starts_with("StartContainer:"), "{refused}");
    assert_refused("runtime handler, CUDA 13 on R535", &refused, "L4-CUDA-REQUIREMENT");
    pod.run("fits", CUDA122, &[]).unwrap_or_else(|e| panic!("a fitting image: {e}\n{}", daemon.log_tail(20)));
    pod.run("plain", PLAIN, &[]).unwrap_or_else(|e| panic!("a container without a GPU: {e}"));
    let id = pod.id.clone();
    cri.remove_pod(&id).unwrap();
}

/// The CRI plugin's settings for this machine: `sandbox_image` ours; `restrict_oom_score_adj`
/// (this VM refuses a lower OOM score to the pod's processes, and runc fails with "can't get
/// final child's PID from pipe" without it); and for every runtime a `base_runtime_spec` of
/// containerd's own default without `process.rlimits` (runc cannot set `RLIMIT_NOFILE` here).
/// A node needs none of this but the first.
fn for_this_machine(toml: &str, daemon_bin: Option<&Path>, dir: &Path) -> String {
    let ctr = daemon_bin.map_or_else(|| PathBuf::from("ctr"), |b| b.join("ctr"));
    let out = Command::new(ctr).args(["oci", "spec"]).output().unwrap();
    assert!(out.status.success(), "ctr oci spec: {}", e2e::text(&out.stderr));
    let mut spec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    spec["process"].as_object_mut().unwrap().remove("rlimits");
    std::fs::create_dir_all(dir).unwrap();
    let base = dir.join("base-spec.json");
    std::fs::write(&base, spec.to_string()).unwrap();
    let mut out = String::new();
    for line in toml.lines() {
        out.push_str(line);
        out.push('\n');
        if line == "[plugins.\"io.containerd.grpc.v1.cri\"]" {
            let _ = write!(out, "  sandbox_image = \"{PAUSE}\"\n  restrict_oom_score_adj = true\n");
        } else if line.starts_with("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.")
            && !line.ends_with(".options]")
        {
            let _ = writeln!(out, "  base_runtime_spec = \"{}\"", base.display());
        }
    }
    out
}

/// The plugin's process, stopped when the test ends, passed or not (it would dial the
/// removed socket every second otherwise).
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        test_support::process::stop(&mut self.0, Duration::from_secs(5));
    }
}

/// `stackhook nri` on `socket`, its log in `log`.
fn start_plugin(stackhook: &Path, socket: &Path, host: &Path, log: &Path) -> Plugin {
    let out = std::fs::File::create(log).unwrap();
    Plugin(
        Command::new(stackhook)
            .args(["nri", "--socket"])
            .arg(socket)
            .arg("--host-root")
            .arg(host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap(),
    )
}

/// Waits until the plugin's log has `needle` (the runtime configured it).
fn wait_for(log: &Path, needle: &str, times: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.matches(needle).count() >= times {
            return;
        }
        assert!(Instant::now() < deadline, "the plugin never logged {needle:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_nri_plugin_refuses_through_cri_on_containerd_1_7() {
    let bin = trixie_bin();
    if !runnable("NRI", &bin.join("containerd")) {
        return;
    }
    let dir = tempfile::Builder::new().prefix("shnri").tempdir_in("/tmp").unwrap();
    let host = Preset::Healthy.build(&dir.path().join("host")).unwrap();
    let ctd = dir.path().join("ctd");
    let cdi = dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let spec = Preset::Healthy.spec().cdi_spec(host.root(), "nvidia.com/gpu");
    std::fs::write(cdi.join("nvidia.json"), spec.to_string()).unwrap();
    let nri_socket = ctd.join("nri.sock");
    let d = ctd.display();
    let toml = format!(
        "{}{}\
         [plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  disable_connections = false\n  \
         socket_path = \"{}\"\n  plugin_path = \"{d}/nri-plugins\"\n  plugin_config_path = \"{d}/nri-conf\"\n  \
         plugin_registration_timeout = \"5s\"\n  plugin_request_timeout = \"2s\"\n",
        Containerd::base_config(&ctd).replacen(
            "  disable_tcp_service = true\n",
            &format!("  disable_tcp_service = true\n  enable_cdi = true\n  cdi_spec_dirs = [\"{}\"]\n", cdi.display()),
            1
        ),
        cni_config(&ctd),
        nri_socket.display()
    );
    let toml = for_this_machine(&toml, Some(&bin), &ctd);
    let daemon = Containerd::start_from(Some(&bin), &ctd, &toml, &[], K8S).unwrap();
    import_images(&daemon, &dir.path().join("images"));
    let stackhook = binary("stackhook");
    let log = dir.path().join("nri.log");
    let plugin = start_plugin(&stackhook, &nri_socket, host.root(), &log);
    wait_for(&log, "configured by", 1);
    let mut cri = Cri::connect(&daemon.socket).unwrap();
    let version = cri.version().unwrap();
    eprintln!("CRI: {} {}", version.runtime_name, version.runtime_version);
    let mut pod = run_pod(&mut cri, dir.path(), "");

    let refused = pod.run("cuda13", CUDA13, &[]).expect_err("a CUDA 13 image was created on R535");
    assert!(refused.starts_with("CreateContainer:"), "{refused}");
    assert_refused("NRI, CUDA 13 on R535", &refused, "L4-CUDA-REQUIREMENT");
    pod.run("fits", CUDA122, &[]).unwrap_or_else(|e| panic!("a fitting image: {e}\n{}", daemon.log_tail(20)));
    pod.run("plain", PLAIN, &[]).unwrap_or_else(|e| panic!("a container without a GPU: {e}"));
    // The same image with and without a GPU given by CDI: judged by the device nodes the CDI
    // spec put in the spec, untouched without them.
    pod.run("require13-no-gpu", REQUIRE13, &[]).unwrap_or_else(|e| panic!("no GPU given: {e}"));
    let by_cdi = pod
        .run("require13-cdi", REQUIRE13, &[("cdi.k8s.io/gpu", "nvidia.com/gpu=0")])
        .expect_err("a CUDA 13 image with a CDI GPU was created on R535");
    assert_refused("NRI, a CDI-given GPU", &by_cdi, "L4-CUDA-REQUIREMENT");

    // The plugin stopped mid-run: containerd 1.7 drops it and creates the container.
    drop(plugin);
    let unguarded = pod.run("cuda13-unguarded", CUDA13, &[]);
    eprintln!("with the plugin stopped, CUDA 13 on R535: {unguarded:?}");
    assert!(unguarded.is_ok(), "containerd 1.7 refused without the plugin: {unguarded:?}");
    // Started again, it registers again and refuses again.
    let plugin = start_plugin(&stackhook, &nri_socket, host.root(), &dir.path().join("nri2.log"));
    wait_for(&dir.path().join("nri2.log"), "configured by", 1);
    let again = pod.run("cuda13-again", CUDA13, &[]).expect_err("refused again once the plugin is back");
    assert_refused("NRI, plugin restarted", &again, "L4-CUDA-REQUIREMENT");
    let id = pod.id.clone();
    cri.remove_pod(&id).unwrap();
    drop(plugin);
    eprintln!("plugin log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
}
