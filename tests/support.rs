//! Helpers shared by the end-to-end tests: locating our binaries, and OCI bundles that real
//! runtimes (runc, crun) execute with stackhook installed as a hook.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

/// A release binary of ours, built by `.ci/test` (`cargo build --release` and the static hook).
pub fn binary(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_ascii_uppercase());
    let path =
        std::env::var_os(&var).map_or_else(|| workspace().join("target/release").join(name), PathBuf::from);
    assert!(path.is_file(), "{} is missing: run .ci/test (or set {var})", path.display());
    path
}

/// Whether this process runs as root (runc, mknod and dockerd need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether `program` is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An OCI bundle whose rootfs holds a static busybox.
pub struct Bundle {
    /// The bundle directory.
    pub dir: PathBuf,
    config: serde_json::Value,
}

impl Bundle {
    /// A bundle in `dir` that runs `args` (busybox applets), made by `runc spec`.
    pub fn busybox(dir: &Path, args: &[&str]) -> Self {
        let rootfs = dir.join("rootfs/bin");
        std::fs::create_dir_all(&rootfs).unwrap();
        std::fs::copy("/bin/busybox", rootfs.join("busybox")).expect("busybox-static is installed");
        std::os::unix::fs::symlink("busybox", rootfs.join("sh")).unwrap();
        let spec =
            Command::new("runc").args(["spec", "--bundle"]).arg(dir).output().expect("runc is installed");
        assert!(spec.status.success(), "runc spec: {}", String::from_utf8_lossy(&spec.stderr));
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        config["process"]["terminal"] = false.into();
        config["process"]["args"] =
            std::iter::once("/bin/busybox").chain(args.iter().copied()).collect::<Vec<_>>().into();
        Self { dir: dir.to_owned(), config }
    }

    /// Adds `KEY=VALUE` to the container's environment.
    pub fn env(mut self, entry: &str) -> Self {
        self.config["process"]["env"].as_array_mut().unwrap().push(entry.into());
        self
    }

    /// Adds a hook entry at `stage` (`createRuntime`, `prestart`, ...).
    pub fn hook(mut self, stage: &str, path: &Path, args: &[&str], env: &[&str]) -> Self {
        let entry = serde_json::json!({ "path": path, "args": args, "env": env, "timeout": 10 });
        let hooks =
            self.config.as_object_mut().unwrap().entry("hooks").or_insert_with(|| serde_json::json!({}));
        hooks
            .as_object_mut()
            .unwrap()
            .entry(stage)
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .unwrap()
            .push(entry);
        self
    }

    /// Writes `config.json`.
    pub fn write(self) -> Self {
        std::fs::write(self.dir.join("config.json"), serde_json::to_vec_pretty(&self.config).unwrap())
            .unwrap();
        self
    }

    /// Runs the bundle with `runtime` (`runc` or `crun`) under container id `id`.
    pub fn run(&self, runtime: &str, id: &str) -> Output {
        let mut cmd = Command::new(runtime);
        if runtime == "crun" {
            // crun cannot manage cgroups in this machine's hybrid cgroup mode.
            cmd.arg("--cgroup-manager=disabled");
        }
        let out = cmd.arg("run").arg("--bundle").arg(&self.dir).arg(id).output().expect("runtime runs");
        let _ = Command::new(runtime).args(["delete", "--force", id]).output();
        out
    }
}

/// A root file system holding a static busybox (`/bin/busybox` and links for `sh`, `echo`,
/// `cat`, `sleep`, `true`), packed as `<dir>/rootfs.tar` for `docker import`/`podman import`.
/// Returns the tar's path.
pub fn busybox_rootfs_tar(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox-static is installed");
    for applet in ["sh", "echo", "cat", "sleep", "true"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let tar = dir.join("rootfs.tar");
    let out =
        Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").output().expect("tar runs");
    assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
    tar
}

/// A dockerd of the test's own: its own data root, exec root, pid file and socket, no bridge
/// and no iptables rules, and the daemon.json it is given; the machine's Docker (its config,
/// images and containers) is not touched. It starts its own containerd (unless a system one
/// answers at `/run/containerd/containerd.sock`), so the environment it is started with reaches
/// the runtimes it runs. Stopped (SIGTERM, then SIGKILL) on drop.
pub struct Dockerd {
    socket: PathBuf,
    log: PathBuf,
    child: std::process::Child,
}

impl Dockerd {
    /// The Debian `docker.io` binaries; a newer CLI may sit in /usr/local/bin.
    pub const DOCKERD: &'static str = "/usr/sbin/dockerd";
    /// The Docker CLI used against it.
    pub const DOCKER: &'static str = "/usr/bin/docker";

    /// Starts dockerd with its state under `dir`, `config_file` as its daemon.json and `env`
    /// added to its environment; waits up to 60 s for it to answer.
    pub fn start(dir: &Path, config_file: &Path, env: &[(&str, &Path)]) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let socket = dir.join("docker.sock");
        let log = dir.join("dockerd.log");
        let log_file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let log_err = log_file.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(Self::DOCKERD);
        cmd.arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("--host")
            .arg(format!("unix://{}", socket.display()))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .arg("--config-file")
            .arg(config_file)
            .stdin(std::process::Stdio::null())
            .stdout(log_file)
            .stderr(log_err);
        for (key, value) in env {
            cmd.env(key, value);
        }
        let child = cmd.spawn().map_err(|e| format!("{}: {e}", Self::DOCKERD))?;
        let mut daemon = Self { socket, log, child };
        for _ in 0..240 {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("dockerd exited ({status}):\n{}", daemon.log_tail(30)));
            }
            if daemon.docker().arg("version").output().is_ok_and(|o| o.status.success()) {
                return Ok(daemon);
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        Err(format!("dockerd did not answer within 60 s:\n{}", daemon.log_tail(30)))
    }

    /// `docker --host <this daemon>`.
    pub fn docker(&self) -> Command {
        let mut cmd = Command::new(Self::DOCKER);
        cmd.arg("--host").arg(format!("unix://{}", self.socket.display()));
        cmd
    }

    /// The last `lines` lines of dockerd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        for _ in 0..120 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
