//! Containers given their GPUs through CDI, checked by stackhook on fixture hosts.
//!
//! runc gets the `config.json` containerd and CRI-O write after applying a CDI spec's edits
//! (`NVIDIA_VISIBLE_DEVICES=void`, the device nodes, the driver libraries' bind mounts); Podman
//! 4.3 resolves `--device <kind>=<name>` from a spec the test writes under `/etc/cdi` (uniquely
//! named, with a kind of its own so that no spec of the machine's conflicts, and removed after)
//! and runs stackhook from `--hooks-dir`. The spec's device nodes are nodes of the fixture host,
//! made with mknod; the libraries are the fixture's files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use e2e::{binary, busybox_rootfs_tar, have, installed_copy, is_root, text, write_config, Bundle};
use stackhook::fixture::{FixtureSpec, Preset};

const CUDA13: &str = "STACKBUILD_REQUIRE_CUDA=cuda>=13.0";
const CUDA12: &str = "STACKBUILD_REQUIRE_CUDA=cuda>=12.1";

fn runnable(what: &[&str]) -> bool {
    let missing: Vec<&&str> = what.iter().filter(|p| !have(p)).collect();
    if !is_root() || !missing.is_empty() || !Path::new("/bin/busybox").exists() {
        eprintln!("skipped: needs root, busybox-static and {what:?} (missing {missing:?})");
        return false;
    }
    true
}

/// A fixture host built at `dir/name`, with real device nodes (or `None` where mknod is
/// refused: the spec's nodes would not be devices).
fn host(spec: &FixtureSpec, dir: &Path, name: &str) -> Option<PathBuf> {
    let root = dir.join(name);
    let built = spec.build(&root).unwrap();
    if !built.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here");
        return None;
    }
    Some(root)
}

/// runc with stackhook at `createRuntime`, given CDI devices `names` of the spec `generated_on`
/// writes for the host at `root`.
fn runc_cdi(root: &Path, generated_on: &FixtureSpec, names: &[&str], env: &[&str], id: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let spec = generated_on.cdi_spec(root, "nvidia.com/gpu");
    let host_env = format!("STACKHOOK_HOST_ROOT={}", root.display());
    let mut bundle = Bundle::busybox(&dir.path().join("bundle"), &["echo", "container-ran"])
        .hook(
            "createRuntime",
            &binary("stackhook"),
            &["stackhook", "hook"],
            &[&host_env, "STACKHOOK_POLICY=enforce"],
        )
        .cdi(&spec, names);
    for e in env {
        bundle = bundle.env(e);
    }
    bundle.write().run("runc", &format!("{id}-{}", std::process::id()))
}

#[test]
fn runc_with_the_config_containerd_and_crio_write_after_cdi_edits() {
    if !runnable(&["runc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let healthy = Preset::Healthy.spec();
    let Some(root) = host(&healthy, dir.path(), "r535") else { return };

    let out = runc_cdi(&root, &healthy, &["0"], &[CUDA13], "cdi-cuda13");
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !text(&out.stdout).contains("container-ran"), "started: {stderr}");
    assert!(stderr.contains("stackhook: blocked") && stderr.contains("L4-CUDA-REQUIREMENT"), "{stderr}");

    let out = runc_cdi(&root, &healthy, &["0"], &[CUDA12], "cdi-ok");
    assert_eq!(text(&out.stdout).trim(), "container-ran", "{}", text(&out.stderr));

    // A spec written before the driver went from 550.54.14 to 535.104.05, whose libraries are
    // still on disk (the runtime wrapper covers the case where they are gone).
    let old = Preset::Healthy.spec().driver("550.54.14");
    leave_old_libraries(&root, "550.54.14");
    let out = runc_cdi(&root, &old, &["0"], &[CUDA12], "cdi-stale");
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a stale spec started");
    assert!(stderr.contains("L2-CDI-STALE-LIBRARIES") && stderr.contains("550.54.14"), "{stderr}");
    assert!(stderr.contains("nvidia-ctk cdi generate"), "{stderr}");
}

/// The library files an upgrade left behind.
fn leave_old_libraries(root: &Path, version: &str) {
    for stem in ["libcuda.so", "libnvidia-ml.so"] {
        let path = root.join(format!("usr/lib/x86_64-linux-gnu/{stem}.{version}"));
        std::fs::write(path, b"\x7fELF fixture: left by an upgrade\n").unwrap();
    }
}

/// A CDI spec under `/etc/cdi` for the test's lifetime.
struct SpecFile(PathBuf);

impl SpecFile {
    fn write(spec: &serde_json::Value) -> Self {
        std::fs::create_dir_all("/etc/cdi").unwrap();
        let path = PathBuf::from(format!("/etc/cdi/stackhook-e2e-{}.json", std::process::id()));
        std::fs::write(&path, serde_json::to_vec_pretty(spec).unwrap()).unwrap();
        Self(path)
    }
}

impl Drop for SpecFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn podman_device_nvidia_gpu_through_hooks_d() {
    if !runnable(&["podman", "runc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let healthy = Preset::Healthy.spec();
    let Some(r535) = host(&healthy, d, "hosts/r535") else { return };
    let Some(nouveau) = host(&Preset::Nouveau.spec(), d, "hosts/nouveau") else { return };
    let stackhook = installed_copy(d);
    let prefix = d.join("root");
    let config = d.join("config.toml");
    let reports = d.join("reports");
    let install = |host: &Path| {
        write_config(&config, host, "enforce", &reports);
        let out = Command::new(&stackhook)
            .args(["install", "podman", "--prefix"])
            .arg(&prefix)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(out.status.success(), "install: {}", text(&out.stderr));
    };
    install(&r535);
    let hooks_dir = prefix.join("usr/share/containers/oci/hooks.d");

    // Our own kind, so that a spec of this machine's cannot conflict with it.
    let kind = format!("e2e{}.nvidia.com/gpu", std::process::id());
    let spec = SpecFile::write(&healthy.cdi_spec(&r535, &kind));
    let conf = d.join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = []\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
         events_logger = \"file\"\n",
    )
    .unwrap();
    let podman = || {
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", &conf)
            .arg("--root")
            .arg(d.join("storage"))
            .arg("--runroot")
            .arg(d.join("run"))
            .arg("--tmpdir")
            .arg(d.join("tmp"))
            .arg("--hooks-dir")
            .arg(&hooks_dir);
        cmd
    };
    let tar = busybox_rootfs_tar(d);
    for (image, env) in [("stackhook-cdi-cuda13:test", CUDA13), ("stackhook-cdi-cuda12:test", CUDA12)] {
        let out = podman()
            .args(["import", "--change", &format!("ENV {env}")])
            .arg(&tar)
            .arg(image)
            .output()
            .unwrap();
        assert!(out.status.success(), "import {image}: {}", text(&out.stderr));
    }
    let run = |args: &[&str]| {
        podman().args(["run", "--rm", "--network", "none"]).args(args).args(["echo", "hi"]).output().unwrap()
    };
    let gpu0 = format!("{kind}=0");

    // A CUDA 13 image given GPU 0 on an R535 host: blocked.
    let out = run(&["--device", &gpu0, "stackhook-cdi-cuda13:test"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !text(&out.stdout).contains("hi"), "started: {stderr}");
    assert!(stderr.contains("stackhook: blocked") && stderr.contains("L4-CUDA-REQUIREMENT"), "{stderr}");

    // A CUDA 12.1 image on the same host: starts.
    let out = run(&["--device", &gpu0, "stackhook-cdi-cuda12:test"]);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));

    // The spec of the driver before (550.54.14), its libraries still on disk: blocked, with
    // both versions and the remedy.
    leave_old_libraries(&r535, "550.54.14");
    let stale = SpecFile::write(&Preset::Healthy.spec().driver("550.54.14").cdi_spec(&r535, &kind));
    let out = run(&["--device", &gpu0, "stackhook-cdi-cuda12:test"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a stale spec started");
    assert!(
        stderr.contains("L2-CDI-STALE-LIBRARIES")
            && stderr.contains("550.54.14")
            && stderr.contains("535.104.05"),
        "{stderr}"
    );
    assert!(stderr.contains("nvidia-ctk cdi generate"), "{stderr}");
    drop(stale);
    drop(spec);

    // A privileged container without a GPU request on a host whose driver is not ready (the GPU
    // Operator's driver container): it starts.
    install(&nouveau);
    let out = run(&["--privileged", "stackhook-cdi-cuda13:test"]);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));

    let _ = podman().args(["rmi", "--all", "--force"]).output();
}
