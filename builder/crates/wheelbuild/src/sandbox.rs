//! The sandbox a package's build runs in: `bwrap` (bubblewrap, Debian's `bubblewrap`).
//!
//! A `setup.py` is someone else's program. What it may touch:
//! - the build root, read-only, as `/` (the image's base with its Python and the build packages);
//! - one writable directory, [`BUILD_DIR`], which holds the unpacked source, the build
//!   environment and the output;
//! - a fresh `/proc`, a minimal `/dev` and a `tmpfs` `/tmp`.
//!
//! Nothing else of the host exists inside. It has no network (a new network namespace with only
//! loopback, `--unshare-all`), no capabilities (bwrap drops them for the sandboxed process), a
//! new PID namespace whose processes all die with it (`--die-with-parent`), a new session (no
//! `TIOCSTI` into the caller's terminal, CVE-2017-5226), an environment of our making only, and
//! caps on address space and time. It never runs as host root: when stackbuild runs as root, the
//! sandbox is started as [`BUILD_UID`] (`nobody`), so even a file it creates in the build
//! directory belongs to that user.
//!
//! Why bubblewrap rather than `unshare` + `chroot` (which the bytecode compiler uses on the
//! interpreter alone): bwrap `pivot_root`s into the new root and drops every capability, so the
//! process has no `CAP_SYS_CHROOT` to climb out of a chroot with and no `CAP_SYS_ADMIN` to
//! remount the root writable; it also runs unprivileged (the kernel's user namespaces), which is
//! how Flatpak runs every application.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a build may print nothing before a line says it is still running.
const QUIET: Duration = Duration::from_mins(2);
/// Where the writable build directory is inside the sandbox; fixed, so the paths compiled into a
/// wheel (debug info, `__FILE__`) are the same on every machine.
pub const BUILD_DIR: &str = "/build";

/// The user a build runs as when stackbuild runs as root: `nobody`.
pub const BUILD_UID: u32 = 65534;

/// How much of a build's log its error shows.
const TAIL_LINES: usize = 25;

/// bwrap's options besides the mounts: part of a built wheel's key.
pub(crate) const BWRAP_ARGS: [&str; 3] = ["--unshare-all", "--die-with-parent", "--new-session"];

/// The kernel's file systems, mounted after the build root (bwrap applies its operations in
/// order, so a root bound at `/` after them would hide them: torch opens `/dev/urandom` when it
/// is imported, which a no-isolation build does). Part of a built wheel's key.
pub(crate) const KERNEL_FS: [&str; 4] = ["--proc", "/proc", "--dev", "/dev"];

/// Why a sandboxed run failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bwrap is missing or could not start.
    #[error("cannot start the build sandbox (bwrap): {0}; install Debian's `bubblewrap` package")]
    Start(String),
    /// The program exited with an error.
    #[error("{what} failed ({status}); the last lines of its log ({log}):\n{tail}{hint}")]
    Failed {
        /// What ran (`building evdev 1.7.1`).
        what: String,
        /// The exit status.
        status: String,
        /// The last lines of the log.
        tail: String,
        /// The whole log.
        log: String,
        /// What to do, when the log says what went wrong (no network, no memory).
        hint: String,
    },
    /// The time cap was reached.
    #[error("{what} ran past its time cap of {secs} s and was stopped (`timeout_s` in [python.build]); its log: {log}")]
    Timeout {
        /// What ran.
        what: String,
        /// The cap.
        secs: u64,
        /// The whole log.
        log: String,
    },
    /// The build user cannot reach a directory the sandbox is made of.
    #[error(
        "the build sandbox runs as nobody (uid {uid}), who cannot search {} (mode {mode:o}) above {}: use \
         a cache directory that others may search (STACKBUILD_CACHE; root's default is {}), or let others \
         search that directory (chmod o+x)",
        blocked.display(),
        path.display(),
        stackbuild_cache::ROOT_CACHE
    )]
    Unreachable {
        /// What is to be mounted.
        path: PathBuf,
        /// The directory above it the build user may not search.
        blocked: PathBuf,
        /// That directory's permission bits.
        mode: u32,
        /// The build user.
        uid: u32,
    },
    /// The log could not be written.
    #[error("writing the build log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
}

/// What the sandbox's file system is made of, besides the build directory, `/proc`, `/dev` and
/// `/tmp`: read-only binds and symlinks, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// A host directory, read-only, at a path inside.
    ReadOnly(PathBuf, String),
    /// A symlink inside (`/bin` -> `usr/bin`).
    Symlink(String, String),
    /// A host directory the run may write, at a path inside (an editable build's project).
    Writable(PathBuf, String),
}

impl Mount {
    /// A whole root file system (a build root), read-only, as `/`.
    pub fn root(path: &Path) -> Vec<Self> {
        vec![Self::ReadOnly(path.to_owned(), "/".to_owned())]
    }
}

/// One sandboxed run: the root, the build directory, the caps.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The read-only file system.
    pub root: Vec<Mount>,
    /// The writable directory, mounted at [`BUILD_DIR`].
    pub build_dir: PathBuf,
    /// Mounts inside the build directory, made after it (the read-only build environment).
    pub over_build: Vec<Mount>,
    /// Address-space cap in bytes (`RLIMIT_AS`).
    pub memory: u64,
    /// Wall-clock cap.
    pub timeout: Duration,
}

impl Sandbox {
    /// Runs `argv` (a program inside the root and its arguments) with exactly `env`, its output
    /// into `log`; `what` names the run in errors. `on_line` sees each line of output as it comes
    /// (progress on a terminal, timed lines in CI).
    #[allow(clippy::too_many_lines)] // one run in order: the command, the pump of its output, the verdict
    pub fn run(
        &self,
        what: &str,
        argv: &[String],
        env: &[(String, String)],
        log: &Path,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<(), SandboxError> {
        self.hand_over()?;
        self.reachable()?;
        // The caps are set by util-linux's `prlimit` before it runs bwrap (the workspace has no
        // unsafe code, which `pre_exec` would need): `RLIMIT_AS` for memory, no core files.
        let mut cmd = Command::new("prlimit");
        cmd.arg(format!("--as={}", self.memory)).arg("--core=0").args(["--", "bwrap"]);
        cmd.args(BWRAP_ARGS);
        for mount in &self.root {
            match mount {
                Mount::ReadOnly(host, inside) => cmd.arg("--ro-bind").arg(host).arg(inside),
                Mount::Writable(host, inside) => cmd.arg("--bind").arg(host).arg(inside),
                Mount::Symlink(target, inside) => cmd.args(["--symlink", target, inside]),
            };
        }
        cmd.args(KERNEL_FS);
        cmd.arg("--bind").arg(&self.build_dir).arg(BUILD_DIR);
        for mount in &self.over_build {
            match mount {
                Mount::ReadOnly(host, inside) => cmd.arg("--ro-bind").arg(host).arg(inside),
                Mount::Writable(host, inside) => cmd.arg("--bind").arg(host).arg(inside),
                Mount::Symlink(target, inside) => cmd.args(["--symlink", target, inside]),
            };
        }
        cmd.args(["--tmpfs", "/tmp", "--chdir", BUILD_DIR, "--"])
            .args(argv)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if rustix::process::geteuid().is_root() {
            // std drops the supplementary groups when it changes the uid of a root process.
            cmd.uid(BUILD_UID).gid(BUILD_UID);
        }
        let mut child = cmd.spawn().map_err(|e| SandboxError::Start(e.to_string()))?;
        let mut file = std::fs::File::create(log)
            .map_err(|source| SandboxError::Log { path: log.to_owned(), source })?;
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let readers: Vec<_> = [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        .map(|mut pipe| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
        drop(tx);
        let started = Instant::now();
        let mut pending = Vec::new();
        let mut timed_out = false;
        // A compile step can print nothing for many minutes (nvcc on one kernel file): a line
        // then says the build is alive, so a CI log never looks hung.
        let mut heard = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(chunk) => {
                    use std::io::Write as _;
                    heard = Instant::now();
                    file.write_all(&chunk)
                        .map_err(|source| SandboxError::Log { path: log.to_owned(), source })?;
                    pending.extend_from_slice(&chunk);
                    while let Some(end) = pending.iter().position(|&b| b == b'\n' || b == b'\r') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        let line = String::from_utf8_lossy(&line);
                        if !line.trim().is_empty() {
                            on_line(line.trim_end());
                        }
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if heard.elapsed() >= QUIET {
                        on_line(&format!("(still running: nothing printed for {} s)", QUIET.as_secs()));
                        heard = Instant::now();
                    }
                }
            }
            if started.elapsed() > self.timeout {
                timed_out = true;
                // bwrap's child is the PID namespace's init: with bwrap gone it gets SIGKILL
                // (`--die-with-parent`), and the kernel kills every process of the namespace.
                let _ = child.kill();
                break;
            }
        }
        let status = child.wait().map_err(|e| SandboxError::Start(e.to_string()))?;
        if !timed_out {
            for r in readers {
                let _ = r.join();
            }
        }
        if timed_out {
            return Err(SandboxError::Timeout {
                what: what.to_owned(),
                secs: self.timeout.as_secs(),
                log: log.display().to_string(),
            });
        }
        if !status.success() {
            let text = std::fs::read(log).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
            return Err(SandboxError::Failed {
                what: what.to_owned(),
                status: status.to_string(),
                hint: hint(&text, self.memory),
                tail,
                log: log.display().to_string(),
            });
        }
        Ok(())
    }

    /// The build directory belongs to the user the build runs as.
    fn hand_over(&self) -> Result<(), SandboxError> {
        if !rustix::process::geteuid().is_root() {
            return Ok(());
        }
        chown_tree(&self.build_dir)
            .map_err(|source| SandboxError::Log { path: self.build_dir.clone(), source })
    }
}

impl Sandbox {
    /// When the build runs as [`BUILD_UID`] (stackbuild runs as root), that every host path
    /// the sandbox is made of can be reached by it: bwrap resolves each as the build user
    /// (`realpath`, bubblewrap.c `resolve_symlinks_in_ops`), and a directory above the cache
    /// that others may not search (root's home, a `mktemp -d`) fails every build with "Can't
    /// find source path". Said before bwrap runs, with the directory to change. Permission bits
    /// only: an ACL that grants more is not read.
    fn reachable(&self) -> Result<(), SandboxError> {
        if !rustix::process::geteuid().is_root() {
            return Ok(());
        }
        let hosts = self
            .root
            .iter()
            .chain(&self.over_build)
            .filter_map(|m| match m {
                Mount::ReadOnly(host, _) | Mount::Writable(host, _) => Some(host),
                Mount::Symlink(..) => None,
            })
            .chain(std::iter::once(&self.build_dir));
        for path in hosts {
            for dir in path.ancestors().skip(1) {
                let Ok(meta) = std::fs::metadata(dir) else { continue };
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
                let owner = std::os::unix::fs::MetadataExt::uid(&meta);
                if mode & 0o001 == 0 && owner != BUILD_UID {
                    return Err(SandboxError::Unreachable {
                        path: path.clone(),
                        blocked: dir.to_owned(),
                        mode,
                        uid: BUILD_UID,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Gives every entry below `dir` (not following symlinks) to [`BUILD_UID`].
fn chown_tree(dir: &Path) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(BUILD_UID), Some(BUILD_UID))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            chown_tree(&entry.path())?;
        } else {
            std::os::unix::fs::lchown(entry.path(), Some(BUILD_UID), Some(BUILD_UID))?;
        }
    }
    Ok(())
}

/// What to do, when a failed build's log says what it lacked.
fn hint(log: &str, memory: u64) -> String {
    const NETWORK: [&str; 7] = [
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "Failed to establish a new connection",
        "Could not resolve host",
        "getaddrinfo failed",
        "Connection refused",
    ];
    if NETWORK.iter().any(|n| log.contains(n)) {
        return "\nhint: builds have no network. The package tried to download something while \
                building: install it from a wheel instead (an index that serves one, \
                `[[python.wheel]]`, or `[python.build] no_build` to make resolution pick a \
                version with a wheel), or vendor what it downloads"
            .to_owned();
    }
    if log.contains("MemoryError") || log.contains("Cannot allocate memory") || log.contains("out of memory")
    {
        return format!(
            "\nhint: the build ran out of its memory cap ({} MiB); raise `memory_mib` or lower \
             `jobs` in [python.build]",
            memory >> 20
        );
    }
    if log.contains("No module named 'pkg_resources'") {
        // setuptools 82.0.0 ships no pkg_resources (80.10.2 and 81.0.0 do; read from their
        // wheels), and an isolated build gets the newest setuptools, as pip's and uv's do.
        return "\nhint: its setup.py imports pkg_resources, which setuptools 82 and later no longer \
                ship; give its build an older one: `NAME = [\"setuptools<82\"]` in \
                [python.build.extra_requires]"
            .to_owned();
    }
    if log.contains("pkg-config is required") || log.contains("pkg-config: not found") {
        // PyAV's setup.py: "pkg-config is required for building PyAV" (it finds FFmpeg so).
        return "\nhint: the build needs pkg-config and the C libraries' development packages it \
                looks for (PyAV: libavformat-dev, libavcodec-dev, libavdevice-dev, libavutil-dev, \
                libavfilter-dev, libswscale-dev, libswresample-dev): add them to [python.build] packages"
            .to_owned();
    }
    if log.contains("Suggest adding 'noexcept'") {
        // Cython 3.0 made callbacks `except *` unless declared `noexcept` (Cython's "Migrating
        // to Cython 3.0"): code written for 0.29 (PyAV 10's logging.pyx) no longer compiles.
        return "\nhint: its Cython code was written for Cython 0.29, which Cython 3 refuses; give \
                its build the older one: `NAME = [\"cython<3\"]` in [python.build.extra_requires]"
            .to_owned();
    }
    if log.contains("valid project/version requirement specifiers") {
        // setuptools 67 made packaging's PEP 508 parser strict: gym 0.21's
        // `extras_require` (`opencv-python>=3.`) no longer parses.
        return "\nhint: its setup.py declares requirements that setuptools 67 and later refuse as \
                invalid PEP 508; give its build an older one: `NAME = [\"setuptools<66\"]` in \
                [python.build.extra_requires]"
            .to_owned();
    }
    if log.contains("Read-only file system") || log.contains("Permission denied") {
        return "\nhint: a build may write only below its build directory; everything else is read-only"
            .to_owned();
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::{hint, Mount, Sandbox};
    use std::time::Duration;

    #[test]
    fn a_directory_the_build_user_cannot_search_is_named() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let private = tmp.path().join("home");
        let root = private.join("cache/build-roots/x");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sandbox = Sandbox {
            root: Mount::root(&root),
            build_dir: root.clone(),
            over_build: Vec::new(),
            memory: 1 << 30,
            timeout: Duration::from_secs(1),
        };
        let said = sandbox.reachable().map_err(|e| e.to_string());
        if rustix::process::geteuid().is_root() {
            let said = said.unwrap_err();
            assert!(said.contains(&format!("cannot search {} (mode 700)", private.display())), "{said}");
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
            sandbox.reachable().unwrap();
        } else {
            // As another user the build runs as that user, who owns the directory.
            assert!(said.is_ok(), "{said:?}");
        }
    }

    #[test]
    fn hints_name_what_the_build_lacked() {
        assert!(hint("socket.gaierror: [Errno -3] Temporary failure in name resolution", 1 << 30)
            .contains("no network"));
        assert!(hint("MemoryError", 1 << 30).contains("1024 MiB"));
        assert!(hint("error: some compile error", 1 << 30).is_empty());
        assert!(
            hint("ModuleNotFoundError: No module named 'pkg_resources'", 1 << 30).contains("setuptools<82")
        );
        let gym =
            "error in gym setup command: 'extras_require' must be a dictionary whose values are strings \
                   or lists of strings containing valid project/version requirement specifiers.";
        assert!(hint(gym, 1 << 30).contains("setuptools<66"));
        assert!(hint("pkg-config is required for building PyAV", 1 << 30).contains("[python.build] packages"));
        let pyav = "av/logging.pyx:351:28: ... Exception values are incompatible. Suggest adding 'noexcept' to the type";
        assert!(hint(pyav, 1 << 30).contains("cython<3"));
    }
}
