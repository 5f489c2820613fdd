//! A containerd of a test's own: its own `--config` with root, state and gRPC/ttrpc sockets
//! under a temp dir, the overlayfs snapshotter, no TCP listener. The machine's containerd is not
//! touched. Debian bookworm's `containerd` package (1.6) by default; the NRI tests run trixie's
//! (1.7.24) from `target/tools/containerd-trixie` (`.ci/trixie-containerd`), its shim first
//! on the daemon's `PATH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::text;

/// containerd's runc v2 shim, the `runtime_type` of a Kubernetes runtime handler.
pub const SHIM: &str = "io.containerd.runc.v2";

/// A running containerd, stopped (SIGTERM, then SIGKILL) on drop.
pub struct Containerd {
    /// Its gRPC socket (the CRI plugin's too).
    pub socket: PathBuf,
    /// Its configuration file.
    pub config: PathBuf,
    /// Its log.
    pub log: PathBuf,
    /// Where its `containerd`, `ctr` and shims are; `None`: the machine's.
    bin: Option<PathBuf>,
    namespace: String,
    child: std::process::Child,
}

impl Containerd {
    /// The top of a private configuration (version 2): everything under `dir`, the overlayfs
    /// snapshotter, no TCP, debug or metrics listener, and the `runc` runtime as `containerd
    /// config default` writes it: containerd 1.6 decodes `containerd.runtimes` as a whole, so a
    /// config that declares any runtime (ours) and not `runc` loses the built-in default and the
    /// CRI plugin refuses to load ("no corresponding runtime configured ... runc").
    pub fn base_config(dir: &Path) -> String {
        let d = dir.display();
        format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\n[grpc]\n  address = \"{d}/c.sock\"\n\n\
             [ttrpc]\n  address = \"{d}/c.sock.ttrpc\"\n\n[debug]\n  address = \"\"\n\n[metrics]\n  address = \"\"\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = \"runc\"\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"{SHIM}\"\n\n"
        )
    }

    /// Starts the machine's containerd with `config` (written to `<dir>/config.toml`) and `env`
    /// added to its environment; `ctr` calls use `namespace`. Waits up to 30 s for it to
    /// answer. `Err` carries its log.
    pub fn start(dir: &Path, config: &str, env: &[(&str, &Path)], namespace: &str) -> Result<Self, String> {
        Self::start_from(None, dir, config, env, namespace)
    }

    /// [`Containerd::start`] with the binaries in `bin` (containerd, ctr, its shims), which
    /// goes first on the daemon's `PATH` so the shim it starts is its own.
    pub fn start_from(
        bin: Option<&Path>,
        dir: &Path,
        config: &str,
        env: &[(&str, &Path)],
        namespace: &str,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let path = dir.join("config.toml");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let log = dir.join("containerd.log");
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin.map_or_else(|| PathBuf::from("containerd"), |b| b.join("containerd")));
        cmd.arg("--config").arg(&path).stdin(Stdio::null()).stdout(out).stderr(err);
        if let Some(bin) = bin {
            let system = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{system}", bin.display()));
        }
        for (key, value) in env {
            cmd.env(key, value);
        }
        let child = cmd.spawn().map_err(|e| format!("containerd: {e}"))?;
        let mut daemon = Self {
            socket: dir.join("c.sock"),
            config: path,
            log,
            bin: bin.map(Path::to_path_buf),
            namespace: namespace.to_owned(),
            child,
        };
        for _ in 0..120 {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("containerd exited ({status}):\n{}", daemon.log_tail(30)));
            }
            if daemon.ctr().arg("version").output().is_ok_and(|o| o.status.success()) {
                return Ok(daemon);
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        Err(format!("containerd did not answer within 30 s:\n{}", daemon.log_tail(30)))
    }

    /// `ctr --address <this daemon> --namespace <its namespace>`.
    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new(self.bin.as_ref().map_or_else(|| PathBuf::from("ctr"), |b| b.join("ctr")));
        cmd.arg("--address").arg(&self.socket).args(["--namespace", &self.namespace]);
        cmd
    }

    /// The last `lines` of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Imports a `docker load`/OCI archive.
    pub fn import(&self, archive: &Path) {
        let out = self.ctr().args(["images", "import"]).arg(archive).output().unwrap();
        assert!(out.status.success(), "ctr images import: {}\n{}", text(&out.stderr), self.log_tail(20));
    }

    /// `ctr run --rm IMAGE ID ARGS` through the runc v2 shim with `runc_binary` as its runc,
    /// and `options` for `ctr run` (`--mount ...`).
    pub fn run_with(
        &self,
        runc_binary: &Path,
        options: &[&str],
        image: &str,
        id: &str,
        args: &[&str],
    ) -> Output {
        self.ctr()
            .args(["run", "--rm", "--runtime", SHIM, "--runc-binary"])
            .arg(runc_binary)
            .args(options)
            .args([image, id])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Stops it now (the test's "runtime restarts" case); dropping it afterwards is a no-op.
    pub fn stop(&mut self) {
        test_support::process::stop(&mut self.child, std::time::Duration::from_secs(20));
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `stackhook install containerd`: links the wrapper and returns the runtime handler table it
/// prints (the lines from `[plugins.` to the blank line, as deploy/kubernetes/daemonset.yaml
/// cuts them out).
pub fn install_handler(stackhook: &Path, prefix: &Path, config: &Path) -> (PathBuf, String) {
    let out = Command::new(stackhook)
        .args(["install", "containerd", "--prefix"])
        .arg(prefix)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    assert!(out.status.success(), "stackhook install containerd: {}", text(&out.stderr));
    let printed = text(&out.stdout);
    let mut table = String::new();
    let mut inside = false;
    for line in printed.lines() {
        inside = (inside && !line.trim().is_empty()) || line.starts_with("[plugins.");
        if inside {
            table.push_str(line);
            table.push('\n');
        }
    }
    assert!(table.contains("BinaryName"), "no runtime handler in:\n{printed}");
    let wrapper = stackhook.with_file_name(stackhook::runtime::WRAPPER_NAME);
    assert!(wrapper.symlink_metadata().is_ok(), "{} was not linked", wrapper.display());
    (wrapper, table)
}
