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

/// A stand-in for `nvidia-container-runtime`: on `create` or `run` it writes the CDI-edited
/// `config.json` into the bundle (as NVIDIA's runtime does in jit-CDI and `cdi` mode), then
/// execs the first of its config's `runtimes`, as NVIDIA's does.
const STAND_IN: &str = r#"#!/bin/sh
lower=$(sed -n 's/^runtimes *= *\[ *"\([^"]*\)".*/\1/p' "$STANDIN_NVIDIA_CONFIG" | head -n 1)
bundle=.
prev=
for a in "$@"; do
  if [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ]; then bundle="$a"; fi
  prev="$a"
done
case " $* " in *" create "*|*" run "*) cp "$STANDIN_EDITED" "$bundle/config.json" ;; esac
exec "$lower" "$@"
"#;

#[test]
fn nvidia_runtime_in_front_runs_the_wrapper_on_its_edited_config() {
    if !runnable(&["runc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let healthy = Preset::Healthy.spec();
    let Some(root) = host(&healthy, d, "host") else { return };
    let stackhook = installed_copy(d);
    let prefix = d.join("prefix");
    let nvidia_config = prefix.join("etc/nvidia-container-runtime/config.toml");
    std::fs::create_dir_all(nvidia_config.parent().unwrap()).unwrap();
    std::fs::write(
        &nvidia_config,
        "[nvidia-container-runtime]\nmode = \"auto\"\nruntimes = [\"docker-runc\", \"runc\", \"crun\"]\n",
    )
    .unwrap();
    let config = d.join("stackhook.toml");
    let reports = d.join("reports");
    write_config(&config, &root, "enforce", &reports);
    let out = Command::new(&stackhook)
        .args(["install", "containerd", "--prefix"])
        .arg(&prefix)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "install: {}", text(&out.stderr));
    let wrapper = stackhook.with_file_name(stackhook::runtime::WRAPPER_NAME);
    let chained = std::fs::read_to_string(&nvidia_config).unwrap();
    assert!(
        chained.contains(&format!("runtimes = [\"{}\", \"docker-runc\"", wrapper.display())),
        "{chained}"
    );

    let stand_in = d.join("bin/nvidia-container-runtime");
    std::fs::write(&stand_in, STAND_IN).unwrap();
    std::fs::set_permissions(&stand_in, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let run = |n: usize, generated_on: &FixtureSpec, env: &str| {
        let plain = Bundle::busybox(&d.join(format!("plain{n}")), &["echo", "container-ran"]).write();
        let edited = d.join(format!("edited{n}"));
        let spec = generated_on.cdi_spec(&root, "nvidia.com/gpu");
        let _ = Bundle::busybox(&edited, &["echo", "container-ran"]).cdi(&spec, &["0"]).env(env).write();
        let id = format!("chain{n}-{}", std::process::id());
        let out = Command::new(&stand_in)
            .args(["run", "--bundle"])
            .arg(&plain.dir)
            .arg(&id)
            .env("STACKHOOK_CONFIG", &config)
            .env("STANDIN_NVIDIA_CONFIG", &nvidia_config)
            .env("STANDIN_EDITED", edited.join("config.json"))
            .output()
            .unwrap();
        let _ = Command::new("runc").args(["delete", "--force", &id]).output();
        let final_config = std::fs::read_to_string(plain.dir.join("config.json")).unwrap();
        (out, final_config)
    };

    // NVIDIA's edits first, then our hook on top of them, then runc: the container runs.
    let (out, final_config) = run(0, &healthy, CUDA12);
    assert_eq!(text(&out.stdout).trim(), "container-ran", "{}", text(&out.stderr));
    assert!(
        final_config.contains("NVIDIA_VISIBLE_DEVICES=void")
            && final_config.contains("\"stackhook\",\"hook\"")
    );
    // The hook judges the edited file: CUDA 13 on R535.
    let (out, _) = run(1, &healthy, CUDA13);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && stderr.contains("L4-CUDA-REQUIREMENT"), "{stderr}");
    // The wrapper's pre-check sees NVIDIA's edits too: a static spec of the driver before,
    // whose libraries are gone, is diagnosed before runc fails on them.
    let (out, _) = run(2, &Preset::Healthy.spec().driver("550.54.14"), CUDA12);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "started");
    assert!(
        stderr.contains("stackhook-runtime: blocked") && stderr.contains("L2-CDI-STALE-LIBRARIES"),
        "{stderr}"
    );

    let out =
        Command::new(&stackhook).args(["uninstall", "containerd", "--prefix"]).arg(&prefix).output().unwrap();
    assert!(out.status.success(), "uninstall: {}", text(&out.stderr));
    assert!(!std::fs::read_to_string(&nvidia_config).unwrap().contains("stackhook-runtime"));
}
