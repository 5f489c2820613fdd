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
