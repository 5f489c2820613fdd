//! stackhook installed into real engines by `stackhook install`: Docker through the runc
//! wrapper (`stackhook-runtime`, named in daemon.json), runc and crun behind the wrapper
//! directly, and Podman through the generated hooks.d file. A broken fixture host stops a
//! GPU container with our verdict in the engine's error; a healthy one lets it run; a container
//! that asks for no GPU runs untouched either way.
//!
//! Nothing of the machine's own engine configuration is touched: Docker runs as a private
//! dockerd (own data root, exec root and socket, `--config-file` pointing at the daemon.json
//! `install --prefix` wrote), Podman with its own storage and `--hooks-dir`. The wrapper finds
//! its configuration through `STACKHOOK_CONFIG` in dockerd's environment, which reaches it
//! through dockerd's containerd and the runc shim.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use e2e::{busybox_rootfs_tar, have, installed_copy, is_root, text, write_config, Bundle, Dockerd};
use stackhook::fixture::Preset;

/// What the imported test images need from the host (the healthy fixture's driver 535 gives
/// CUDA 12.2).
const REQUIRE: &str = "STACKBUILD_REQUIRE_CUDA=cuda>=12.1";
/// An image that asks for GPUs.
const GPU_IMAGE: &str = "stackhook-e2e-gpu:test";
/// The same image without `NVIDIA_VISIBLE_DEVICES`: no GPU asked for.
const PLAIN_IMAGE: &str = "stackhook-e2e-plain:test";
/// The broken host the blocking cases use, and the code its verdict names.
const BROKEN: Preset = Preset::UvmMissing;

/// The hook's report for container `id`.
fn report(reports: &Path, id: &str) -> serde_json::Value {
    let path = reports.join(format!("{id}.json"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("no report {}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// The `decision` of the hook's report for container `id`.
fn decision(reports: &Path, id: &str) -> String {
    report(reports, id)["decision"].as_str().unwrap_or_default().to_owned()
}

fn install(stackhook: &Path, verb: &str, engine: &str, prefix: &Path, config: Option<&Path>) -> String {
    let mut cmd = Command::new(stackhook);
    cmd.args([verb, engine, "--prefix"]).arg(prefix);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "stackhook {verb} {engine}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The GPU image as `stackbuild` builds it: scratch, the busybox of [`busybox_rootfs_tar`] in
/// `/bin`, and `[host] modules = ["nvidia_uvm"]`, which the builder turns into
/// `NVIDIA_VISIBLE_DEVICES=all`, `STACKBUILD_REQUIRE_MODULES=module=nvidia_uvm` and
/// `/etc/stackbuild/stack.json`. Returns its `docker load` archive, or `None` with the reason
/// printed when the builder is not built or fails (the image is then made by `import`).
fn stackbuild_archive(dir: &Path) -> Option<PathBuf> {
    let builder = e2e::stackbuild_bin();
    if !builder.is_file() {
        eprintln!("note: {} is not built; the GPU image is made by `import`", builder.display());
        return None;
    }
    match e2e::build_gpu_test_image(dir, GPU_IMAGE) {
        Ok(archive) => Some(archive),
        Err(e) => {
            eprintln!("note: stackbuild failed, the GPU image is made by `import`: {e}");
            None
        }
    }
}

/// Puts the two test images into an engine (`engine()` is a `docker` or `podman` command):
/// [`GPU_IMAGE`] built by stackbuild and loaded (or imported with the same contract when the
/// builder is not available), and [`PLAIN_IMAGE`], an imported busybox that asks for no GPU.
/// Returns whether stackbuild made the GPU image.
fn load_images(engine: &dyn Fn() -> Command, dir: &Path) -> bool {
    let tar = busybox_rootfs_tar(dir);
    let import = |image: &str, changes: &[&str]| {
        let mut cmd = engine();
        cmd.arg("import");
        for change in changes {
            cmd.args(["--change", change]);
        }
        let out = cmd.arg(&tar).arg(image).output().unwrap();
        assert!(out.status.success(), "import {image}: {}", text(&out.stderr));
    };
    let built = stackbuild_archive(dir);
    if let Some(archive) = &built {
        let out = engine().args(["load", "--input"]).arg(archive).output().unwrap();
        assert!(out.status.success(), "load {}: {}", archive.display(), text(&out.stderr));
    } else {
        import(GPU_IMAGE, &["ENV NVIDIA_VISIBLE_DEVICES=all", &format!("ENV {REQUIRE}")]);
    }
    import(PLAIN_IMAGE, &[&format!("ENV {REQUIRE}")]);
    built.is_some()
}

fn docker_skip_reason() -> Option<String> {
    if !is_root() {
        return Some("needs root".into());
    }
    for path in [Dockerd::DOCKERD, Dockerd::DOCKER, "/bin/busybox"] {
        if !Path::new(path).exists() {
            return Some(format!("needs {path} (docker.io, busybox-static)"));
        }
    }
    if !have("containerd") || !have("runc") {
        return Some("needs containerd and runc".into());
    }
    if Path::new("/run/containerd/containerd.sock").exists() {
        // dockerd would use that containerd, whose environment lacks STACKHOOK_CONFIG.
        return Some("a system containerd runs at /run/containerd; the test dockerd would use it".into());
    }
    None
}

/// `docker run --rm --network none --cidfile ...` on the test daemon; returns the output and
/// the container id.
fn docker_run(dockerd: &Dockerd, dir: &Path, args: &[&str]) -> (Output, String) {
    static N: AtomicUsize = AtomicUsize::new(0);
    let cidfile = dir.join(format!("cid-{}", N.fetch_add(1, Ordering::Relaxed)));
    let out = dockerd
        .docker()
        .args(["run", "--rm", "--network", "none", "--cidfile"])
        .arg(&cidfile)
        .args(args)
        .output()
        .unwrap();
    let id = std::fs::read_to_string(&cidfile).unwrap_or_default().trim().to_owned();
    (out, id)
}

#[test]
fn docker_runs_the_hook_through_the_stackhook_runtime() {
    if let Some(reason) = docker_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stackhook = installed_copy(d);
    let prefix = d.join("root");
    let said = install(&stackhook, "install", "docker", &prefix, None);
    assert!(said.contains("stackhook-runtime"), "{said}");
    let daemon_json = prefix.join("etc/docker/daemon.json");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&daemon_json).unwrap()).unwrap();
    let wrapper = d.join("bin/stackhook-runtime");
    assert_eq!(doc["runtimes"]["stackhook"]["path"], wrapper.to_str().unwrap());

    let config = prefix.join("etc/stackhook/config.toml");
    let reports = d.join("reports");
    let healthy = Preset::Healthy.build(&d.join("hosts/healthy")).unwrap();
    let broken = BROKEN.build(&d.join("hosts/broken")).unwrap();
    write_config(&config, healthy.root(), "enforce", &reports);

    let dockerd = Dockerd::start(&d.join("docker"), &daemon_json, &[("STACKHOOK_CONFIG", &config)])
        .unwrap_or_else(|e| panic!("{e}"));
    let by_stackbuild = load_images(&|| dockerd.docker(), d);

    // A healthy host: the GPU container runs, and the hook was there to say so.
    let (out, id) = docker_run(&dockerd, d, &["--runtime", "stackhook", GPU_IMAGE, "echo", "hi"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stderr), dockerd.log_tail(20));
    assert_eq!(text(&out.stdout).trim(), "hi");
    let done = report(&reports, &id);
    assert_eq!(done["decision"], "allowed");
    if by_stackbuild {
        // The hook read the image's stack.json through Docker's overlay root.
        assert!(done["stack"].is_object(), "no stack in the report: {done}");
    }

    // A long-running container: exec, kill and delete pass through the wrapper.
    let out = dockerd
        .docker()
        .args(["run", "-d", "--network", "none", "--runtime", "stackhook", GPU_IMAGE, "sleep", "60"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let long = text(&out.stdout).trim().to_owned();
    let out = dockerd.docker().args(["exec", &long, "echo", "exec-ok"]).output().unwrap();
    assert_eq!(text(&out.stdout).trim(), "exec-ok", "{}", text(&out.stderr));
    let out = dockerd.docker().args(["rm", "--force", &long]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A broken host: the GPU container is stopped before its process runs, with our verdict
    // in Docker's error. The wrapper reads its configuration on every call.
    write_config(&config, broken.root(), "enforce", &reports);
    let (out, id) = docker_run(&dockerd, d, &["--runtime", "stackhook", GPU_IMAGE, "echo", "hi"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "the container started on a broken host");
    assert!(!text(&out.stdout).contains("hi"), "the process ran");
    assert!(stderr.contains("stackhook: blocked"), "{stderr}");
    let code = BROKEN.expected_code().unwrap();
    assert!(stderr.contains(code), "{code} missing from docker's error: {stderr}");
    eprintln!("docker run exit status on a blocked start: {}", out.status);
    assert_eq!(decision(&reports, &id), "blocked");

    // No GPU asked for: runs untouched on the same broken host (the hook ran, and skipped).
    let (out, id) = docker_run(&dockerd, d, &["--runtime", "stackhook", PLAIN_IMAGE, "echo", "hi"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "hi");
    assert_eq!(decision(&reports, &id), "skipped");

    // Without `--runtime stackhook` Docker's default runc runs, with no hook.
    let (out, id) = docker_run(&dockerd, d, &[GPU_IMAGE, "echo", "hi"]);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));
    assert!(!reports.join(format!("{id}.json")).exists());

    // Policy warn: the verdict is reported, the container runs.
    write_config(&config, broken.root(), "warn", &reports);
    let (out, id) = docker_run(&dockerd, d, &["--runtime", "stackhook", GPU_IMAGE, "echo", "hi"]);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));
    assert_eq!(decision(&reports, &id), "allowed-despite-failure");

    drop(dockerd);
    let said = install(&stackhook, "uninstall", "docker", &prefix, None);
    assert!(said.contains("removed"), "{said}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&daemon_json).unwrap()).unwrap();
    assert_eq!(doc, serde_json::json!({}));
    assert!(wrapper.symlink_metadata().is_err(), "the wrapper link is still there");
}

/// Runs the wrapper (as `stackhook-runtime`) with `args`, configured by `config`.
fn run_wrapper(link: &Path, config: &Path, runtime: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(link);
    cmd.env("STACKHOOK_CONFIG", config).args(args);
    if let Some(runtime) = runtime {
        cmd.env("STACKHOOK_RUNTIME", runtime);
    }
    cmd.output().unwrap()
}

#[test]
fn the_wrapper_in_front_of_runc() {
    if !is_root() || !have("runc") || !Path::new("/bin/busybox").exists() {
        eprintln!("skipped: needs root, runc and busybox-static");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stackhook = installed_copy(d);
    let link = d.join("bin/stackhook-runtime");
    std::os::unix::fs::symlink("stackhook", &link).unwrap();
    let config = d.join("config.toml");
    let reports = d.join("reports");
    let healthy = Preset::Healthy.build(&d.join("hosts/healthy")).unwrap();
    let broken = BROKEN.build(&d.join("hosts/broken")).unwrap();
    let pid = std::process::id();

    // Commands other than create/run pass through: output and exit status are runc's own.
    write_config(&config, broken.root(), "enforce", &reports);
    let ours = run_wrapper(&link, &config, None, &["--version"]);
    let runc_version = Command::new("runc").arg("--version").output().unwrap();
    assert_eq!(
        (ours.status.code(), text(&ours.stdout)),
        (runc_version.status.code(), text(&runc_version.stdout))
    );
    let missing = format!("sh-absent-{pid}");
    let ours = run_wrapper(&link, &config, None, &["state", &missing]);
    let theirs = Command::new("runc").args(["state", &missing]).output().unwrap();
    assert_eq!(ours.status.code(), theirs.status.code());
    assert!(
        !ours.status.success() && text(&ours.stderr).contains("container does not exist"),
        "{}",
        text(&ours.stderr)
    );
    // `stackhook runtime ...` is the same wrapper.
    let sub = Command::new(&stackhook)
        .args(["runtime", "--version"])
        .env("STACKHOOK_CONFIG", &config)
        .output()
        .unwrap();
    assert_eq!(text(&sub.stdout), text(&runc_version.stdout));

    // create on a broken host: the hook is added to config.json and blocks.
    let bundle = Bundle::busybox(&d.join("b1"), &["echo", "container-ran"])
        .env("NVIDIA_VISIBLE_DEVICES=all")
        .env(REQUIRE)
        .write();
    let id = format!("sh-wrap-broken-{pid}");
    let out = run_wrapper(
        &link,
        &config,
        None,
        &["--log-format", "text", "run", "--bundle", bundle.dir.to_str().unwrap(), &id],
    );
    let _ = Command::new("runc").args(["delete", "--force", &id]).output();
    assert!(!out.status.success() && !text(&out.stdout).contains("container-ran"));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("stackhook: blocked") && stderr.contains(BROKEN.expected_code().unwrap()),
        "{stderr}"
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.dir.join("config.json")).unwrap()).unwrap();
    let entry = &doc["hooks"]["createRuntime"][0];
    assert_eq!(entry["path"], std::fs::canonicalize(&stackhook).unwrap().to_str().unwrap());
    assert_eq!(entry["args"], serde_json::json!(["stackhook", "hook"]));
    assert_eq!(entry["env"][0], "PATH=/usr/sbin:/usr/bin:/sbin:/bin");
    assert_eq!(doc["process"]["args"][1], "echo", "the rest of config.json is kept");

    // A healthy host: the wrapper adds the hook, and runc runs the container.
    write_config(&config, healthy.root(), "enforce", &reports);
    run_healthy_through_wrapper(&link, &config, &reports, d, "runc", &[]);

    // A runtime that is the wrapper itself is refused rather than exec'd in a loop.
    let out = run_wrapper(&link, &config, Some(link.to_str().unwrap()), &["--version"]);
    assert!(!out.status.success() && text(&out.stderr).contains("stackhook itself"), "{}", text(&out.stderr));
}

/// Runs a container through the wrapper with `runtime` (given by `STACKHOOK_RUNTIME`) on the
/// healthy host `config` points at: the wrapper adds the hook, the container runs, the hook allows.
fn run_healthy_through_wrapper(
    link: &Path,
    config: &Path,
    reports: &Path,
    d: &Path,
    runtime: &str,
    globals: &[&str],
) {
    let pid = std::process::id();
    let bundle = Bundle::busybox(&d.join(format!("ok-{runtime}")), &["echo", "container-ran"])
        .env("NVIDIA_VISIBLE_DEVICES=all")
        .env(REQUIRE)
        .write();
    let id = format!("sh-wrap-ok-{runtime}-{pid}");
    let mut args = globals.to_vec();
    args.extend(["run", "-b", bundle.dir.to_str().unwrap(), &id]);
    let out = run_wrapper(link, config, Some(runtime), &args);
    let _ = Command::new(runtime).args(globals).args(["delete", "--force", &id]).output();
    let hooked = std::fs::read_to_string(bundle.dir.join("config.json")).unwrap().contains("createRuntime");
    assert!(hooked, "{runtime}: the wrapper did not add the hook");
    assert!(out.status.success(), "{runtime}: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "container-ran", "{runtime}");
    assert_eq!(decision(reports, &id), "allowed", "{runtime}");
}

#[test]
// crun 1.8 refuses a hybrid cgroup hierarchy (cgroup v1 plus the unified mount) before it runs any
// hook, so on such a machine nothing of ours would run: reported as ignored, not as passed.
#[cfg_attr(hybrid_cgroups, ignore = "crun refuses this machine's hybrid cgroup hierarchy")]
fn the_wrapper_in_front_of_crun() {
    if !is_root() || !have("crun") || !Path::new("/bin/busybox").exists() {
        eprintln!("skipped: needs root, crun and busybox-static");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    installed_copy(d);
    let link = d.join("bin/stackhook-runtime");
    std::os::unix::fs::symlink("stackhook", &link).unwrap();
    let (config, reports) = (d.join("config.toml"), d.join("reports"));
    let healthy = Preset::Healthy.build(&d.join("hosts/healthy")).unwrap();
    write_config(&config, healthy.root(), "enforce", &reports);
    run_healthy_through_wrapper(&link, &config, &reports, d, "crun", &["--cgroup-manager=disabled"]);
}

#[test]
fn podman_runs_the_hooks_d_file() {
    if !is_root() || !have("podman") || !have("runc") || !Path::new("/bin/busybox").exists() {
        eprintln!("skipped: needs root, podman, runc and busybox-static");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stackhook = installed_copy(d);
    let prefix = d.join("root");
    let config = d.join("config.toml");
    let reports = d.join("reports");
    let healthy = Preset::Healthy.build(&d.join("hosts/healthy")).unwrap();
    let broken = BROKEN.build(&d.join("hosts/broken")).unwrap();
    write_config(&config, broken.root(), "enforce", &reports);
    install(&stackhook, "install", "podman", &prefix, Some(&config));
    let hooks_dir = prefix.join("usr/share/containers/oci/hooks.d");
    assert!(hooks_dir.join("stackhook.json").is_file());

    // Podman 4.3 on this machine: runc (crun fails on cgroups in hybrid mode and on
    // RLIMIT_NOFILE), cgroupfs, no journald for events.
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
    load_images(&podman, d);
    let run = |image: &str| {
        podman().args(["run", "--rm", "--network", "none", image, "echo", "hi"]).output().unwrap()
    };

    let out = run(GPU_IMAGE);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !text(&out.stdout).contains("hi"), "started on a broken host");
    assert!(
        stderr.contains("stackhook: blocked") && stderr.contains(BROKEN.expected_code().unwrap()),
        "{stderr}"
    );
    eprintln!("podman run exit status on a blocked start: {}", out.status);

    let out = run(PLAIN_IMAGE);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));

    // Reinstalled for a healthy host (the file is rewritten, podman reads it per container).
    write_config(&config, healthy.root(), "enforce", &reports);
    let said = install(&stackhook, "install", "podman", &prefix, Some(&config));
    assert!(said.starts_with("modified"), "{said}");
    let out = run(GPU_IMAGE);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}", text(&out.stderr));

    let _ = podman().args(["rmi", "--all", "--force"]).output();
    let said = install(&stackhook, "uninstall", "podman", &prefix, None);
    assert!(said.starts_with("removed") && !hooks_dir.join("stackhook.json").exists(), "{said}");
}

/// A stand-in for `nvidia-container-runtime` under dockerd: on `create` it adds the CDI edits in
/// `$STANDIN_EDITS` (env, `linux.devices` with their cgroup rules, mounts) to the bundle's
/// `config.json`, as NVIDIA's runtime does in jit-CDI and `cdi` mode, then execs the first of
/// the `runtimes` in `$STANDIN_NVIDIA_CONFIG`.
const NVIDIA_STAND_IN: &str = r#"#!/usr/bin/python3
import json, os, re, sys
conf = open(os.environ["STANDIN_NVIDIA_CONFIG"]).read()
lower = re.search(r'^runtimes\s*=\s*\[\s*"([^"]+)"', conf, re.M).group(1)
args = sys.argv[1:]
if "create" in args or "run" in args:
    bundle = args[args.index("--bundle") + 1] if "--bundle" in args else "."
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        c = json.load(f)
    with open(os.environ["STANDIN_EDITS"]) as f:
        e = json.load(f)
    c["process"]["env"] += e["process"]["env"]
    linux = c.setdefault("linux", {})
    linux["devices"] = linux.get("devices") or []
    linux["devices"] += e["linux"]["devices"]
    res = linux.setdefault("resources", {})
    res["devices"] = (res.get("devices") or []) + e["linux"]["resources"]["devices"]
    c["mounts"] += e["mounts"]
    with open(path, "w") as f:
        json.dump(c, f)
os.execv(lower, [lower] + args)
"#;

/// Docker with NVIDIA's runtime as `--runtime nvidia`, chained by `stackhook install docker`: a
/// container given GPU 0 through CDI edits runs on a healthy host, and one whose static spec is
/// of the driver before (its libraries gone) is stopped by the wrapper's pre-check with the
/// diagnosis in Docker's error, where runc would only fail to stat the file.
#[test]
fn docker_with_nvidias_runtime_in_front() {
    if let Some(why) = docker_skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    if !have("python3") {
        eprintln!("skipped: needs python3 for the stand-in NVIDIA runtime");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let host = Preset::Healthy.build(&d.join("hosts/healthy")).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here");
        return;
    }
    let stackhook = installed_copy(d);
    let prefix = d.join("root");
    let nvidia_config = prefix.join("etc/nvidia-container-runtime/config.toml");
    std::fs::create_dir_all(nvidia_config.parent().unwrap()).unwrap();
    std::fs::write(
        &nvidia_config,
        "[nvidia-container-runtime]\nruntimes = [\"docker-runc\", \"runc\", \"crun\"]\n",
    )
    .unwrap();
    let stand_in = d.join("bin/nvidia-container-runtime");
    std::fs::write(&stand_in, NVIDIA_STAND_IN).unwrap();
    std::fs::set_permissions(&stand_in, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let daemon_json = prefix.join("etc/docker/daemon.json");
    std::fs::create_dir_all(daemon_json.parent().unwrap()).unwrap();
    std::fs::write(
        &daemon_json,
        serde_json::json!({ "runtimes": { "nvidia": { "path": stand_in } } }).to_string(),
    )
    .unwrap();
    let said = install(&stackhook, "install", "docker", &prefix, None);
    assert!(said.contains("NVIDIA's runtime is installed"), "{said}");
    let config = prefix.join("etc/stackhook/config.toml");
    let reports = d.join("reports");
    write_config(&config, host.root(), "enforce", &reports);
    let edits = d.join("edits.json");
    let write_edits = |spec: serde_json::Value| {
        let applied = stackhook::fixture::cdi::apply(&spec, &["0"], &[]);
        std::fs::write(&edits, applied.to_string()).unwrap();
    };
    write_edits(Preset::Healthy.spec().cdi_spec(host.root(), "nvidia.com/gpu"));
    let dockerd = Dockerd::start(
        &d.join("docker"),
        &daemon_json,
        &[
            ("STACKHOOK_CONFIG", &config),
            ("STANDIN_NVIDIA_CONFIG", &nvidia_config),
            ("STANDIN_EDITS", &edits),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    load_images(&|| dockerd.docker(), d);

    // The plain image asks for no GPU; the edits give it GPU 0, and the hook checks that.
    let (out, id) = docker_run(&dockerd, d, &["--runtime", "nvidia", PLAIN_IMAGE, "echo", "hi"]);
    assert_eq!(text(&out.stdout).trim(), "hi", "{}\n{}", text(&out.stderr), dockerd.log_tail(20));
    let done = report(&reports, &id);
    assert_eq!(done["decision"], "allowed", "{done}");
    assert_eq!(done["diagnosis"]["gpu_sources"][1]["source"], "device-nodes", "{done}");

    write_edits(Preset::Healthy.spec().driver("550.54.14").cdi_spec(host.root(), "nvidia.com/gpu"));
    let (out, _) = docker_run(&dockerd, d, &["--runtime", "nvidia", PLAIN_IMAGE, "echo", "hi"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success() && !text(&out.stdout).contains("hi"), "started: {stderr}");
    assert!(stderr.contains("L2-CDI-STALE-LIBRARIES") && stderr.contains("550.54.14"), "{stderr}");
    assert!(stderr.contains("nvidia-ctk cdi generate"), "{stderr}");
    drop(dockerd);
}
