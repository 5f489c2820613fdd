//! A Docker daemon of the test's own, so that tests never touch the machine's Docker.

use std::path::{Path, PathBuf};
use std::process::Command;

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
        // dockerd stops its containers before it exits: give it 30 s.
        crate::process::stop(&mut self.child, std::time::Duration::from_secs(30));
    }
}
