//! `stackhook install` and `uninstall`: wiring the hook into a container engine.
//!
//! - Docker has no hook directory: it runs the runtimes named in `/etc/docker/daemon.json`
//!   (`"runtimes": {"stackhook": {"path": ".../stackhook-runtime"}}`), so we add one that is
//!   this binary under the name [`WRAPPER_NAME`] (a symlink next to it), see [`crate::runtime`].
//!   dockerd rereads `runtimes` on SIGHUP.
//! - Podman and CRI-O read hook files (schema 1.0.0, `oci-hooks(5)`) from
//!   `/usr/share/containers/oci/hooks.d` and `/etc/containers/oci/hooks.d`.
//! - containerd: a runtime handler whose `BinaryName` is the wrapper; we print the snippet and a
//!   Kubernetes `RuntimeClass`, as containerd's config is usually owned by other tooling.
//!
//! Every engine file lives under a prefix (`/`, or a temp dir in tests); the wrapper symlink
//! lives next to the binary, since that is the path the engine will run. `uninstall` removes
//! what `install` adds and nothing else.
//!
//! [`Installer`] here does the writing (backups, atomic replacement, files the Debian package
//! owns left to dpkg); the engines' file contents are built in `files`, the chaining with
//! NVIDIA's runtime is [`nvidia`], and the refusal of a dynamically linked binary
//! ([`check_static`]) is in `elf`.

use std::fmt;
use std::path::{Path, PathBuf};

mod elf;
mod files;
pub mod nvidia;

pub use elf::check_static;
pub use files::{containerd_snippet, docker_add_runtime, docker_remove_runtime, hooks_d_file};

use crate::runtime::{self, join_under, RuntimeError, WrapperConfig, WRAPPER_NAME};
use files::is_our_hook_file;

/// Docker's daemon configuration, under the prefix.
pub const DOCKER_DAEMON_JSON: &str = "/etc/docker/daemon.json";

/// The runtime name under which Docker and containerd know the wrapper.
pub const RUNTIME_NAME: &str = "stackhook";

/// Podman's hook file (the distribution-wide hooks directory; both podman and CRI-O read it).
pub const PODMAN_HOOK_FILE: &str = "/usr/share/containers/oci/hooks.d/stackhook.json";

/// CRI-O's hook file (the administrator's hooks directory, which overrides the one above).
pub const CRIO_HOOK_FILE: &str = "/etc/containers/oci/hooks.d/stackhook.json";

/// containerd's configuration, read only to see whether it still names the wrapper.
pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";

/// A container engine stackhook can be installed into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// dockerd: a runtime in `/etc/docker/daemon.json`.
    Docker,
    /// Podman: a hooks.d file.
    Podman,
    /// CRI-O: a hooks.d file.
    Crio,
    /// containerd (Kubernetes): the wrapper, and a printed runtime handler and `RuntimeClass`.
    Containerd,
}

/// Why an install or uninstall stopped. Nothing is half-written: each file is replaced
/// atomically, and a problem found while reading stops before any write.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file could not be read, written or removed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// A JSON file that does not parse: left alone.
    #[error("{path} is not valid JSON ({source}); fix it first, nothing was changed")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A JSON file of an unexpected shape.
    #[error("{path}: {what}; nothing was changed")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// A TOML file that does not parse: left alone.
    #[error("{path} is not valid TOML ({message}); fix it first, nothing was changed")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        message: String,
    },
    /// The wrapper's lower runtime is NVIDIA's, which would exec the wrapper again.
    #[error(
        "the wrapper's `runtime` is {runtime}, and NVIDIA's runtime runs the wrapper: that would loop; \
         leave `runtime` unset (runc) in the stackhook configuration, nothing was changed"
    )]
    Loop {
        /// The configured runtime.
        runtime: String,
    },
    /// Docker's default runtime is ours: removing it would stop dockerd from starting.
    #[error("{path} sets \"default-runtime\": \"{RUNTIME_NAME}\"; set it back (e.g. to \"runc\") first")]
    DefaultRuntime {
        /// daemon.json.
        path: PathBuf,
    },
    /// A file at our path that we did not write.
    #[error("{path} exists and is not stackhook's; remove it by hand if it should go")]
    NotOurs {
        /// The file.
        path: PathBuf,
    },
    /// A file the Debian package ships, which only the package manager changes.
    #[error(
        "{path} belongs to the Debian package {package}; dpkg owns it, so install does not rewrite \
         it{hint}"
    )]
    PackageOwned {
        /// The file.
        path: PathBuf,
        /// The package that ships it.
        package: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// The binary path has no directory to put the wrapper link in.
    #[error("{binary}: not an absolute path to a file")]
    Binary {
        /// The binary path.
        binary: PathBuf,
    },
    /// The hook's settings could not be read or used.
    #[error(transparent)]
    Config(#[from] RuntimeError),
    /// The binary would run the dynamic loader, which loads what `LD_PRELOAD` names.
    #[error(
        "{binary} is dynamically linked (it asks for the loader {interpreter}), so an LD_PRELOAD or \
         LD_LIBRARY_PATH handed to the hook would load code into it, as root; install the static \
         build (`cargo build --release` on a *-linux-gnu host with libc6-dev gives one: `file` \
         says \"static-pie linked\"); nothing was changed"
    )]
    Dynamic {
        /// The binary.
        binary: PathBuf,
        /// Its `PT_INTERP`.
        interpreter: String,
    },
    /// The binary is not an ELF file this check can read.
    #[error("{binary}: {why}; cannot tell whether it is statically linked; nothing was changed")]
    NotElf {
        /// The binary.
        binary: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// What changed (or, in a dry run, would change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A new file or link.
    Create,
    /// An existing file rewritten.
    Modify,
    /// A file or link removed.
    Remove,
    /// Already as wanted.
    Keep,
}

/// One file touched, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What was done.
    pub action: Action,
    /// The file.
    pub path: PathBuf,
    /// In a few words.
    pub detail: String,
}

/// What an install or uninstall did, printed on stdout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Nothing was written.
    pub dry_run: bool,
    /// The files.
    pub changes: Vec<Change>,
    /// What to do next, or text to paste elsewhere.
    pub notes: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.changes {
            let verb = match (c.action, self.dry_run) {
                (Action::Create, false) => "created",
                (Action::Create, true) => "would create",
                (Action::Modify, false) => "modified",
                (Action::Modify, true) => "would modify",
                (Action::Remove, false) => "removed",
                (Action::Remove, true) => "would remove",
                (Action::Keep, _) => "unchanged",
            };
            writeln!(f, "{verb} {}: {}", c.path.display(), c.detail)?;
        }
        for n in &self.notes {
            writeln!(f, "{n}")?;
        }
        Ok(())
    }
}

/// How to install.
#[derive(Debug, Clone)]
pub struct Installer {
    /// Root under which engine files are read and written: `/`, or a temp dir in tests.
    pub prefix: PathBuf,
    /// The stackhook binary, absolute: the hook's `path` and the wrapper link's target. The
    /// link is made in its directory.
    pub binary: PathBuf,
    /// The hook's settings (policy, host root, report dir, timeout), as the wrapper reads them.
    pub config: WrapperConfig,
    /// Report, write nothing.
    pub dry_run: bool,
}

impl Installer {
    /// The wrapper's path: [`WRAPPER_NAME`] next to the binary.
    pub fn wrapper(&self) -> Result<PathBuf, InstallError> {
        match (self.binary.is_absolute(), self.binary.parent(), self.binary.file_name()) {
            (true, Some(dir), Some(_)) => Ok(dir.join(WRAPPER_NAME)),
            _ => Err(InstallError::Binary { binary: self.binary.clone() }),
        }
    }

    fn under(&self, path: &str) -> PathBuf {
        join_under(&self.prefix, Path::new(path))
    }

    /// The Debian package that ships `path` (a path on the host), when dpkg's file list of
    /// `stackhook` names it: such a file is the package manager's, so install never rewrites it
    /// and uninstall never removes it (`apt remove stackhook` does, and dpkg would otherwise
    /// find its file changed or gone).
    fn package_owner(&self, path: &Path) -> Option<String> {
        const LIST_CAP: u64 = 1 << 20;
        let list = self.under("/var/lib/dpkg/info/stackhook.list");
        let file = std::fs::File::open(&list).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, LIST_CAP), &mut text).ok()?;
        let wanted = path.to_string_lossy();
        text.lines().any(|l| l == wanted).then(|| "stackhook".to_owned())
    }

    /// Installs into `engine`.
    pub fn install(&self, engine: Engine) -> Result<Report, InstallError> {
        let mut report = Report { dry_run: self.dry_run, ..Report::default() };
        match engine {
            Engine::Docker => {
                let path = self.under(DOCKER_DAEMON_JSON);
                let wrapper = self.wrapper()?;
                let existing = read_optional(&path)?;
                let new = docker_add_runtime(existing.as_deref(), &wrapper, &path)?;
                self.apply_json(&path, existing.is_some(), new, "runtimes.stackhook", &mut report)?;
                self.link_wrapper(&mut report)?;
                self.chain_nvidia(&mut report)?;
                report.notes.push(format!(
                    "next: reload dockerd (`systemctl reload docker` or `kill -HUP $(pidof dockerd)`), then \
                     `docker run --runtime {RUNTIME_NAME} ...`; the wrapper reads its settings (runtime, \
                     policy, host_root, report_dir) from $STACKHOOK_CONFIG or {}",
                    runtime::DEFAULT_CONFIG
                ));
            }
            Engine::Podman | Engine::Crio => {
                let path =
                    self.under(if engine == Engine::Podman { PODMAN_HOOK_FILE } else { CRIO_HOOK_FILE });
                let entry = self.config.hook_entry(&self.binary)?;
                let mut text = serde_json::to_string_pretty(&hooks_d_file(&entry))
                    .map_err(|source| InstallError::Json { path: path.clone(), source })?;
                text.push('\n');
                let existing = read_optional(&path)?;
                if existing.as_deref() == Some(text.as_bytes()) {
                    report.changes.push(Change {
                        action: Action::Keep,
                        path,
                        detail: "already installed".into(),
                    });
                } else {
                    if let Some(old) = &existing {
                        if !is_our_hook_file(old) {
                            return Err(InstallError::NotOurs { path });
                        }
                    }
                    let host_path =
                        Path::new(if engine == Engine::Podman { PODMAN_HOOK_FILE } else { CRIO_HOOK_FILE });
                    if let Some(package) = self.package_owner(host_path) {
                        return Err(InstallError::PackageOwned {
                            path,
                            package,
                            hint: "; `stackhook install crio` writes the administrator's copy in \
                                   /etc/containers/oci/hooks.d, which overrides it where hooks_dir lists that directory",
                        });
                    }
                    let action = if existing.is_some() { Action::Modify } else { Action::Create };
                    if !self.dry_run {
                        write_new(&path, text.as_bytes())?;
                    }
                    report.changes.push(Change {
                        action,
                        path,
                        detail: format!("hook at {} for every container (always: true)", runtime::HOOK_STAGE),
                    });
                }
                if engine == Engine::Crio {
                    report.notes.push(format!(
                        "CRI-O reads it when `hooks_dir` in crio.conf lists {}",
                        Path::new(CRIO_HOOK_FILE)
                            .parent()
                            .map(Path::display)
                            .map(|d| d.to_string())
                            .unwrap_or_default()
                    ));
                }
            }
            Engine::Containerd => {
                self.link_wrapper(&mut report)?;
                self.chain_nvidia(&mut report)?;
                report.notes.push(containerd_snippet(&self.wrapper()?));
            }
        }
        Ok(report)
    }

    /// Removes what [`Installer::install`] added to `engine`.
    pub fn uninstall(&self, engine: Engine) -> Result<Report, InstallError> {
        let mut report = Report { dry_run: self.dry_run, ..Report::default() };
        match engine {
            Engine::Docker => {
                let path = self.under(DOCKER_DAEMON_JSON);
                if let Some(existing) = read_optional(&path)? {
                    if let Some(new) = docker_remove_runtime(&existing, &path)? {
                        self.apply_json(&path, true, Some(new), "runtimes.stackhook", &mut report)?;
                    }
                }
                self.unchain_nvidia(&mut report)?;
                self.unlink_wrapper(&mut report)?;
            }
            Engine::Podman | Engine::Crio => {
                let path =
                    self.under(if engine == Engine::Podman { PODMAN_HOOK_FILE } else { CRIO_HOOK_FILE });
                if let Some(existing) = read_optional(&path)? {
                    if !is_our_hook_file(&existing) {
                        return Err(InstallError::NotOurs { path });
                    }
                    let host_path =
                        Path::new(if engine == Engine::Podman { PODMAN_HOOK_FILE } else { CRIO_HOOK_FILE });
                    if let Some(package) = self.package_owner(host_path) {
                        report.notes.push(format!(
                            "kept {}: the {package} package ships it (`apt remove {package}` removes it)",
                            path.display()
                        ));
                        return Ok(report);
                    }
                    if !self.dry_run {
                        std::fs::remove_file(&path)
                            .map_err(|source| InstallError::Io { path: path.clone(), source })?;
                    }
                    report.changes.push(Change {
                        action: Action::Remove,
                        path,
                        detail: "stackhook's hook file".into(),
                    });
                }
            }
            Engine::Containerd => {
                self.unchain_nvidia(&mut report)?;
                self.unlink_wrapper(&mut report)?;
                report.notes.push(format!(
                    "remove the `{RUNTIME_NAME}` runtime handler from containerd's config and the RuntimeClass \
                     `{RUNTIME_NAME}` yourself"
                ));
            }
        }
        if report.changes.is_empty() {
            report.notes.insert(0, "nothing to remove".into());
        }
        Ok(report)
    }

    /// Writes `new` (when `Some`) to `path` with a backup of the old file.
    fn apply_json(
        &self,
        path: &Path,
        existed: bool,
        new: Option<serde_json::Value>,
        what: &str,
        report: &mut Report,
    ) -> Result<(), InstallError> {
        let Some(doc) = new else {
            report.changes.push(Change {
                action: Action::Keep,
                path: path.to_owned(),
                detail: format!("{what} already as wanted"),
            });
            return Ok(());
        };
        let mut text = serde_json::to_string_pretty(&doc)
            .map_err(|source| InstallError::Json { path: path.to_owned(), source })?;
        text.push('\n');
        let (action, detail) = if existed {
            let backup = backup_path(path);
            if !self.dry_run {
                std::fs::copy(path, &backup)
                    .map_err(|source| InstallError::Io { path: backup.clone(), source })?;
            }
            let verb = if doc.pointer("/runtimes/stackhook").is_some() { "set" } else { "removed" };
            (Action::Modify, format!("{verb} {what} (backup: {})", backup.display()))
        } else {
            (Action::Create, format!("set {what}"))
        };
        if !self.dry_run {
            if existed {
                let meta = std::fs::metadata(path)
                    .map_err(|source| InstallError::Io { path: path.to_owned(), source })?;
                runtime::write_file_atomic(path, text.as_bytes(), Some(&meta))
                    .map_err(|source| InstallError::Io { path: path.to_owned(), source })?;
            } else {
                write_new(path, text.as_bytes())?;
            }
        }
        report.changes.push(Change { action, path: path.to_owned(), detail });
        Ok(())
    }

    /// When NVIDIA's runtime is installed, puts the wrapper first among its lower runtimes
    /// ([`nvidia`]): every engine handler that runs it then runs ours after its CDI edits.
    fn chain_nvidia(&self, report: &mut Report) -> Result<(), InstallError> {
        let path = self.under(nvidia::NVIDIA_RUNTIME_CONFIG);
        let Some(existing) = read_optional(&path)? else { return Ok(()) };
        if nvidia::loops(self.config.runtime.as_deref()) {
            return Err(InstallError::Loop { runtime: self.config.runtime.clone().unwrap_or_default() });
        }
        let wrapper = self.wrapper()?;
        let wrapper =
            wrapper.to_str().ok_or(RuntimeError::NotUtf8 { what: "the wrapper", path: wrapper.clone() })?;
        let text = String::from_utf8_lossy(&existing);
        let new = nvidia::chain(&text, wrapper, &path)?;
        self.apply_text(&path, new, "the wrapper first in nvidia-container-runtime.runtimes", report)?;
        report.notes.push(format!(
            "NVIDIA's runtime is installed: it now runs {wrapper} (then runc) after writing its CDI edits, so \
             Docker's `nvidia` runtime and containerd's `nvidia` handlers (the GPU Operator's `nvidia` and \
             `nvidia-cdi` RuntimeClasses) are checked on the final config.json without further setup"
        ));
        Ok(())
    }

    /// Takes the wrapper out of NVIDIA's lower runtimes again.
    fn unchain_nvidia(&self, report: &mut Report) -> Result<(), InstallError> {
        let path = self.under(nvidia::NVIDIA_RUNTIME_CONFIG);
        let Some(existing) = read_optional(&path)? else { return Ok(()) };
        let wrapper = self.wrapper()?;
        let new = nvidia::unchain(&String::from_utf8_lossy(&existing), &wrapper.to_string_lossy(), &path)?;
        if new.is_some() {
            self.apply_text(&path, new, "the wrapper out of nvidia-container-runtime.runtimes", report)?;
        }
        Ok(())
    }

    /// Replaces an existing file with `new` (when `Some`), after a backup.
    fn apply_text(
        &self,
        path: &Path,
        new: Option<String>,
        what: &str,
        report: &mut Report,
    ) -> Result<(), InstallError> {
        let Some(text) = new else {
            report.changes.push(Change {
                action: Action::Keep,
                path: path.to_owned(),
                detail: format!("{what} already"),
            });
            return Ok(());
        };
        let backup = backup_path(path);
        if !self.dry_run {
            std::fs::copy(path, &backup)
                .map_err(|source| InstallError::Io { path: backup.clone(), source })?;
            let meta = std::fs::metadata(path)
                .map_err(|source| InstallError::Io { path: path.to_owned(), source })?;
            runtime::write_file_atomic(path, text.as_bytes(), Some(&meta))
                .map_err(|source| InstallError::Io { path: path.to_owned(), source })?;
        }
        report.changes.push(Change {
            action: Action::Modify,
            path: path.to_owned(),
            detail: format!("{what} (backup: {})", backup.display()),
        });
        Ok(())
    }

    /// Makes `stackhook-runtime -> <binary name>` next to the binary.
    fn link_wrapper(&self, report: &mut Report) -> Result<(), InstallError> {
        let wrapper = self.wrapper()?;
        let target = self.binary.file_name().map(PathBuf::from).unwrap_or_default();
        let io = |source| InstallError::Io { path: wrapper.clone(), source };
        match std::fs::symlink_metadata(&wrapper) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if std::fs::read_link(&wrapper).map_err(io)? == target {
                    report.changes.push(Change {
                        action: Action::Keep,
                        path: wrapper,
                        detail: format!("link to {}", target.display()),
                    });
                    return Ok(());
                }
                if !self.dry_run {
                    std::fs::remove_file(&wrapper).map_err(io)?;
                    std::os::unix::fs::symlink(&target, &wrapper).map_err(io)?;
                }
                report.changes.push(Change {
                    action: Action::Modify,
                    path: wrapper,
                    detail: format!("link now to {}", target.display()),
                });
            }
            Ok(_) => return Err(InstallError::NotOurs { path: wrapper }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.dry_run {
                    std::os::unix::fs::symlink(&target, &wrapper).map_err(io)?;
                }
                report.changes.push(Change {
                    action: Action::Create,
                    path: wrapper,
                    detail: format!("link to {} (the runc wrapper)", target.display()),
                });
            }
            Err(e) => return Err(io(e)),
        }
        Ok(())
    }

    /// Removes the wrapper link unless Docker's or containerd's configuration still names it.
    fn unlink_wrapper(&self, report: &mut Report) -> Result<(), InstallError> {
        let wrapper = self.wrapper()?;
        match std::fs::symlink_metadata(&wrapper) {
            Ok(meta) if meta.file_type().is_symlink() => {}
            Ok(_) => return Err(InstallError::NotOurs { path: wrapper }),
            Err(_) => return Ok(()),
        }
        // The wrapper of a packaged binary is the package's.
        let on_host = wrapper
            .strip_prefix(&self.prefix)
            .map_or_else(|_| wrapper.clone(), |rel| Path::new("/").join(rel));
        if let Some(package) = self.package_owner(&on_host) {
            report.notes.push(format!(
                "kept {}: the {package} package ships it (`apt remove {package}` removes it)",
                wrapper.display()
            ));
            return Ok(());
        }
        let needle = wrapper.to_string_lossy().into_owned();
        for file in [DOCKER_DAEMON_JSON, CONTAINERD_CONFIG] {
            let path = self.under(file);
            // In a dry run daemon.json still holds the entry being removed: only the
            // containerd check applies then.
            if self.dry_run && file == DOCKER_DAEMON_JSON {
                continue;
            }
            if read_optional(&path)?.is_some_and(|text| String::from_utf8_lossy(&text).contains(&needle)) {
                report.notes.push(format!("kept {}: {} still names it", wrapper.display(), path.display()));
                return Ok(());
            }
        }
        if !self.dry_run {
            std::fs::remove_file(&wrapper)
                .map_err(|source| InstallError::Io { path: wrapper.clone(), source })?;
        }
        report.changes.push(Change {
            action: Action::Remove,
            path: wrapper,
            detail: "the runc wrapper link".into(),
        });
        Ok(())
    }
}

/// `daemon.json.bak.<unix seconds>`, with `.N` added while that exists.
fn backup_path(path: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let base = format!("{}.bak.{secs}", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
    let mut candidate = path.with_file_name(&base);
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() {
        candidate = path.with_file_name(format!("{base}.{n}"));
        n += 1;
    }
    candidate
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, InstallError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(InstallError::Io { path: path.to_owned(), source }),
    }
}

/// Writes a file that is new or ours, mode 0644, creating its directory.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| InstallError::Io { path: path.to_owned(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    runtime::write_file_atomic(path, bytes, None).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Setup {
        dir: tempfile::TempDir,
        installer: Installer,
    }

    /// A prefix and a fake binary in `<tmp>/bin/stackhook`.
    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("stackhook"), "").unwrap();
        let installer = Installer {
            prefix: dir.path().join("root"),
            binary: bin.join("stackhook"),
            config: WrapperConfig::default(),
            dry_run: false,
        };
        Setup { dir, installer }
    }

    impl Setup {
        fn scrub(&self, text: &str) -> String {
            text.replace(self.dir.path().to_str().unwrap(), "[TMP]")
        }
        fn daemon_json(&self) -> PathBuf {
            self.installer.under(DOCKER_DAEMON_JSON)
        }
        fn backups(&self) -> Vec<PathBuf> {
            let dir = self.daemon_json().parent().unwrap().to_owned();
            let mut list: Vec<PathBuf> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("daemon.json.bak."))
                .collect();
            list.sort();
            list
        }
    }

    const EXISTING: &str = r#"{
  "log-driver": "json-file",
  "log-opts": {"max-size": "10m"},
  "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
  "default-runtime": "runc"
}
"#;

    #[test]
    fn files_the_debian_package_ships_are_left_to_dpkg() {
        let s = setup();
        let info = s.installer.under("/var/lib/dpkg/info/stackhook.list");
        std::fs::create_dir_all(info.parent().unwrap()).unwrap();
        // The package's hook file, as it shipped it (an older policy), and dpkg's list naming it.
        let hook = s.installer.under(PODMAN_HOOK_FILE);
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        let shipped = "{\"version\": \"1.0.0\", \"hook\": {\"path\": \"/usr/bin/stackhook\", \"args\": [\"stackhook\", \"hook\"]}, \"when\": {\"always\": true}, \"stages\": [\"createRuntime\"]}\n";
        std::fs::write(&hook, shipped).unwrap();
        std::fs::write(&info, format!("/.\n/usr\n{PODMAN_HOOK_FILE}\n/usr/bin/stackhook-runtime\n")).unwrap();
        let err = s.installer.install(Engine::Podman).unwrap_err().to_string();
        assert!(
            err.contains("belongs to the Debian package stackhook") && err.contains("install crio"),
            "{err}"
        );
        let report = s.installer.uninstall(Engine::Podman).unwrap();
        assert!(report.notes.iter().any(|n| n.contains("the stackhook package ships it")), "{report:?}");
        assert_eq!(std::fs::read_to_string(&hook).unwrap(), shipped);
        // crio's copy in /etc is the administrator's, not the package's: written and removed.
        s.installer.install(Engine::Crio).unwrap();
        assert!(s.installer.under(CRIO_HOOK_FILE).is_file());
        s.installer.uninstall(Engine::Crio).unwrap();
        assert!(!s.installer.under(CRIO_HOOK_FILE).exists());
    }

    #[test]
    fn a_dynamically_linked_binary_is_refused() {
        // Any dynamically linked system program stands in for a dynamic stackhook.
        let dynamic = ["/bin/sh", "/usr/bin/env", "/bin/ls"].into_iter().map(Path::new).find(|p| p.is_file());
        if let Some(dynamic) = dynamic {
            let err = check_static(dynamic).unwrap_err().to_string();
            assert!(err.contains("dynamically linked") && err.contains("ld-linux"), "{err}");
        }
        let s = setup();
        let err = check_static(&s.installer.binary).unwrap_err().to_string();
        assert!(err.contains("shorter than an ELF header"), "{err}");
        std::fs::write(&s.installer.binary, [b'#'; 80]).unwrap();
        assert!(check_static(&s.installer.binary).unwrap_err().to_string().contains("not an ELF file"));

        // A minimal static ELF64: a header and one PT_LOAD program header.
        let mut elf = vec![0u8; 64 + 56];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[64..68].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&s.installer.binary, &elf).unwrap();
        check_static(&s.installer.binary).unwrap();
        // The same with a PT_INTERP naming a loader.
        elf[64..68].copy_from_slice(&3u32.to_le_bytes());
        elf[72..80].copy_from_slice(&120u64.to_le_bytes());
        elf[96..104].copy_from_slice(&12u64.to_le_bytes());
        elf.extend_from_slice(b"/lib/ld.so\0\0");
        std::fs::write(&s.installer.binary, &elf).unwrap();
        let err = check_static(&s.installer.binary).unwrap_err().to_string();
        assert!(err.contains("asks for the loader /lib/ld.so)"), "{err}");
    }

    #[test]
    fn docker_merges_keeps_other_keys_and_backs_up() {
        let s = setup();
        std::fs::create_dir_all(s.daemon_json().parent().unwrap()).unwrap();
        std::fs::write(s.daemon_json(), EXISTING).unwrap();
        let report = s.installer.install(Engine::Docker).unwrap();
        let written = std::fs::read_to_string(s.daemon_json()).unwrap();
        insta::assert_snapshot!("docker_daemon_json", s.scrub(&written));
        let backups = s.backups();
        assert_eq!(backups.len(), 1);
        assert_eq!(std::fs::read_to_string(&backups[0]).unwrap(), EXISTING);
        let wrapper = s.dir.path().join("bin").join(WRAPPER_NAME);
        assert_eq!(std::fs::read_link(&wrapper).unwrap(), Path::new("stackhook"));
        let text = s.scrub(&report.to_string());
        let text = text.replace(backups[0].file_name().unwrap().to_str().unwrap(), "daemon.json.bak.[SECS]");
        insta::assert_snapshot!("docker_install_report", text);

        // A second install changes nothing and makes no backup.
        let again = s.installer.install(Engine::Docker).unwrap();
        assert!(again.changes.iter().all(|c| c.action == Action::Keep), "{again}");
        assert_eq!(s.backups().len(), 1);

        // Uninstall: our key and link go, the rest is as it was (key order aside).
        let report = s.installer.uninstall(Engine::Docker).unwrap();
        assert_eq!(
            report.changes.iter().map(|c| c.action).collect::<Vec<_>>(),
            [Action::Modify, Action::Remove]
        );
        let after: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(s.daemon_json()).unwrap()).unwrap();
        assert_eq!(after, serde_json::from_str::<serde_json::Value>(EXISTING).unwrap());
        assert!(wrapper.symlink_metadata().is_err());
        assert_eq!(s.backups().len(), 2);
        let nothing = s.installer.uninstall(Engine::Docker).unwrap();
        assert!(nothing.to_string().contains("nothing to remove"), "{nothing}");
    }

    #[test]
    fn docker_without_a_daemon_json_creates_one_and_removes_runtimes_again() {
        let s = setup();
        let report = s.installer.install(Engine::Docker).unwrap();
        assert_eq!(report.changes[0].action, Action::Create);
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.daemon_json()).unwrap()).unwrap();
        let wrapper = s.dir.path().join("bin").join(WRAPPER_NAME);
        assert_eq!(doc, serde_json::json!({"runtimes": {"stackhook": {"path": wrapper}}}));
        assert!(s.backups().is_empty());
        s.installer.uninstall(Engine::Docker).unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(s.daemon_json()).unwrap()).unwrap();
        assert_eq!(doc, serde_json::json!({}));
    }

    #[test]
    fn dry_run_writes_nothing() {
        let s = setup();
        let installer = Installer { dry_run: true, ..s.installer.clone() };
        for engine in [Engine::Docker, Engine::Podman, Engine::Crio, Engine::Containerd] {
            let report = installer.install(engine).unwrap();
            assert!(report.to_string().contains("would create"), "{engine:?}: {report}");
        }
        assert!(!s.installer.prefix.exists());
        assert!(s.dir.path().join("bin").join(WRAPPER_NAME).symlink_metadata().is_err());
    }

    #[test]
    fn bad_daemon_json_is_left_alone() {
        let s = setup();
        std::fs::create_dir_all(s.daemon_json().parent().unwrap()).unwrap();
        for (text, shape) in [("{\"a\": ", false), ("[1]", true), ("{\"runtimes\": 5}", true)] {
            std::fs::write(s.daemon_json(), text).unwrap();
            let err = s.installer.install(Engine::Docker).unwrap_err();
            assert_eq!(matches!(err, InstallError::Shape { .. }), shape, "{text}: {err}");
            assert!(matches!(err, InstallError::Shape { .. } | InstallError::Json { .. }));
            assert_eq!(std::fs::read_to_string(s.daemon_json()).unwrap(), text);
        }
        assert!(s.backups().is_empty());
        std::fs::write(
            s.daemon_json(),
            "{\"default-runtime\": \"stackhook\", \"runtimes\": {\"stackhook\": {}}}",
        )
        .unwrap();
        assert!(matches!(s.installer.uninstall(Engine::Docker), Err(InstallError::DefaultRuntime { .. })));
    }

    #[test]
    fn hooks_d_files_for_podman_and_crio() {
        let s = setup();
        let installer = Installer {
            config: WrapperConfig::parse(
                "policy = \"warn\"\nreport_dir = \"/var/log/stackhook\"\n",
                Path::new("c"),
            )
            .unwrap(),
            ..s.installer.clone()
        };
        let report = installer.install(Engine::Podman).unwrap();
        let path = installer.under(PODMAN_HOOK_FILE);
        insta::assert_snapshot!("podman_hooks_d", s.scrub(&std::fs::read_to_string(&path).unwrap()));
        assert_eq!(report.changes[0].action, Action::Create);
        assert_eq!(installer.install(Engine::Podman).unwrap().changes[0].action, Action::Keep);
        installer.install(Engine::Crio).unwrap();
        assert_eq!(std::fs::read(installer.under(CRIO_HOOK_FILE)).unwrap(), std::fs::read(&path).unwrap());
        // Someone else's file under our name is not overwritten or removed.
        std::fs::write(&path, "{\"version\": \"1.0.0\", \"hook\": {\"path\": \"/x\"}}").unwrap();
        assert!(matches!(installer.install(Engine::Podman), Err(InstallError::NotOurs { .. })));
        assert!(matches!(installer.uninstall(Engine::Podman), Err(InstallError::NotOurs { .. })));
        let report = installer.uninstall(Engine::Crio).unwrap();
        assert_eq!(report.changes[0].action, Action::Remove);
        assert!(!installer.under(CRIO_HOOK_FILE).exists());
    }

    #[test]
    fn containerd_prints_the_handler_and_shares_the_link_with_docker() {
        let s = setup();
        let report = s.installer.install(Engine::Containerd).unwrap();
        insta::assert_snapshot!("containerd_install_report", s.scrub(&report.to_string()));
        s.installer.install(Engine::Docker).unwrap();
        // daemon.json still names the link: uninstalling containerd keeps it.
        let report = s.installer.uninstall(Engine::Containerd).unwrap();
        assert!(report.changes.is_empty(), "{report}");
        assert!(s.dir.path().join("bin").join(WRAPPER_NAME).symlink_metadata().is_ok());
        s.installer.uninstall(Engine::Docker).unwrap();
        assert!(s.dir.path().join("bin").join(WRAPPER_NAME).symlink_metadata().is_err());
    }

    #[test]
    fn a_foreign_file_in_place_of_the_link_is_kept() {
        let s = setup();
        let wrapper = s.dir.path().join("bin").join(WRAPPER_NAME);
        std::fs::write(&wrapper, "#!/bin/sh\n").unwrap();
        assert!(matches!(s.installer.install(Engine::Containerd), Err(InstallError::NotOurs { .. })));
        assert!(matches!(s.installer.uninstall(Engine::Containerd), Err(InstallError::NotOurs { .. })));
        assert!(wrapper.is_file());
        let relative = Installer { binary: PathBuf::from("stackhook"), ..s.installer.clone() };
        assert!(matches!(relative.install(Engine::Docker), Err(InstallError::Binary { .. })));
    }
}
