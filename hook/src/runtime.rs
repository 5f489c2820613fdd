//! `stackhook runtime`: a wrapper around runc (or crun) that adds stackhook to a container's
//! hooks, for engines without a hook directory.
//!
//! Docker names runtimes in `/etc/docker/daemon.json` (`"runtimes"`) and containerd in a runtime
//! handler's `BinaryName`; both then invoke that path with runc's command line. NVIDIA's
//! `nvidia-container-runtime` works the same way: on `create` it edits the bundle's
//! `config.json` and execs runc. This module is the library side: reading the wrapper's own
//! configuration, finding the command in runc's arguments, adding the hook entry to
//! `config.json`, and finding the real runtime. The command (`cmd/runtime.rs`) execs it.
//!
//! Everything but `create` and `run` passes through untouched, and even those only gain one
//! entry in `hooks.createRuntime`; the arguments handed to the real runtime are the ones we got.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::invoke::Policy;

pub mod precheck;

/// The wrapper's configuration file when `STACKHOOK_CONFIG` does not name one.
pub const DEFAULT_CONFIG: &str = "/etc/stackhook/config.toml";
/// Names this binary answers to as the wrapper (`argv[0]`), and the symlink `install` makes.
pub const WRAPPER_NAME: &str = "stackhook-runtime";
/// Where a runtime named without a slash is looked for, in order. Fixed rather than `PATH`:
/// the engine's environment decides nothing about which binary runs containers as root.
pub const RUNTIME_SEARCH_DIRS: [&str; 6] =
    ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];
/// The runtime when neither `STACKHOOK_RUNTIME` nor the config names one.
pub const DEFAULT_RUNTIME: &str = "runc";
/// `PATH` in the hook entry's environment: the hook gets this explicit minimal environment,
/// never the engine's or the container's.
pub const HOOK_PATH_ENV: &str = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
/// `args` of the hook entry (`argv[0]` first, as the runtime-spec has it).
pub const HOOK_ARGS: [&str; 2] = ["stackhook", "hook"];
/// Seconds the runtime gives the hook before killing it (and failing the start) by default.
pub const DEFAULT_HOOK_TIMEOUT: u32 = 10;
/// The hook stage the wrapper and the hooks.d files use. `createRuntime` runs in the runtime
/// namespace after the container's namespaces exist and before its process does; `prestart`
/// is deprecated in runtime-spec 1.0.2.
pub const HOOK_STAGE: &str = "createRuntime";
/// Largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 64 << 10;
/// Largest `config.json` rewritten (the same cap as [`crate::oci::MAX_CONFIG_BYTES`]).
const MAX_BUNDLE_CONFIG_BYTES: u64 = crate::oci::MAX_CONFIG_BYTES;

/// Why the wrapper cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration file could not be read.
    #[error("cannot read {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// The configuration file is not valid.
    #[error("{path} is not a valid stackhook configuration: {source}")]
    ParseConfig {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: Box<toml::de::Error>,
    },
    /// A file longer than its cap.
    #[error("{path} is larger than {cap} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap.
        cap: u64,
    },
    /// No runtime binary under that name.
    #[error("cannot find the runtime {name:?} (looked in {searched}); set `runtime` in {DEFAULT_CONFIG} or STACKHOOK_RUNTIME")]
    RuntimeNotFound {
        /// The name or path asked for.
        name: String,
        /// Where it was looked for.
        searched: String,
    },
    /// The runtime resolves to this very binary: exec-ing it would loop.
    #[error("the runtime {path} is stackhook itself; point `runtime` at runc or crun")]
    RuntimeIsSelf {
        /// The runtime path.
        path: PathBuf,
    },
    /// `config.json` could not be read or written.
    #[error("cannot update {path}: {source}")]
    BundleIo {
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// `config.json` is not JSON.
    #[error("{path} is not valid JSON: {source}")]
    BundleJson {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// `config.json` has an unexpected shape where the hook goes.
    #[error("{path}: {what}")]
    BundleShape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// The bundle carries a stale CDI spec's edits (see [`precheck`]).
    #[error("blocked: {diagnosis}")]
    StaleSpec {
        /// The diagnosis, first line the verdict.
        diagnosis: String,
    },
    /// A path that must go into JSON is not UTF-8.
    #[error("{what} {} is not valid UTF-8", path.display())]
    NotUtf8 {
        /// Which path.
        what: &'static str,
        /// The path.
        path: PathBuf,
    },
}

/// The wrapper's configuration (`/etc/stackhook/config.toml`):
///
/// ```toml
/// runtime = "/usr/bin/runc"         # the real runtime: a path, or a name looked up in /usr/local/sbin, ...
/// policy = "enforce"                # enforce | warn | audit, handed to the hook
/// host_root = "/"                   # the host root the hook probes (a fixture tree in tests)
/// report_dir = "/var/log/stackhook" # a JSON report per container
/// hook_timeout = 10                 # seconds
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrapperConfig {
    /// The real runtime: an absolute path, or a name looked up in [`RUNTIME_SEARCH_DIRS`].
    #[serde(default)]
    pub runtime: Option<String>,
    /// The hook's policy.
    #[serde(default, deserialize_with = "policy_from_str")]
    pub policy: Policy,
    /// The host root the hook probes; `/` when unset.
    #[serde(default)]
    pub host_root: Option<PathBuf>,
    /// Where the hook writes a report per container.
    #[serde(default)]
    pub report_dir: Option<PathBuf>,
    /// The hook entry's `timeout`, seconds.
    #[serde(default)]
    pub hook_timeout: Option<u32>,
}

fn policy_from_str<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

impl WrapperConfig {
    /// Parses a configuration file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, RuntimeError> {
        toml::from_str(text)
            .map_err(|source| RuntimeError::ParseConfig { path: path.to_owned(), source: Box::new(source) })
    }

    /// Reads the configuration: the file `explicit` names (`STACKHOOK_CONFIG`), which must
    /// exist, or else [`DEFAULT_CONFIG`] under `root` when it exists, or else the defaults.
    pub fn load(explicit: Option<&Path>, root: &Path) -> Result<Self, RuntimeError> {
        let (path, required) = match explicit {
            Some(p) => (p.to_owned(), true),
            None => (join_under(root, Path::new(DEFAULT_CONFIG)), false),
        };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => return Err(RuntimeError::ReadConfig { path, source }),
        };
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|source| RuntimeError::ReadConfig { path: path.clone(), source })?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(RuntimeError::TooLarge { path, cap: MAX_CONFIG_BYTES });
        }
        Self::parse(&text, &path)
    }

    /// The hook entry for the stackhook binary at `exe`, with this configuration's settings as
    /// its explicit environment.
    pub fn hook_entry(&self, exe: &Path) -> Result<HookEntry, RuntimeError> {
        let utf8 = |what, p: &Path| {
            p.to_str().map(str::to_owned).ok_or_else(|| RuntimeError::NotUtf8 { what, path: p.to_owned() })
        };
        let mut env =
            vec![HOOK_PATH_ENV.to_owned(), format!("STACKHOOK_POLICY={}", policy_name(self.policy))];
        if let Some(root) = &self.host_root {
            env.push(format!("STACKHOOK_HOST_ROOT={}", utf8("host_root", root)?));
        }
        if let Some(dir) = &self.report_dir {
            env.push(format!("STACKHOOK_REPORT_DIR={}", utf8("report_dir", dir)?));
        }
        Ok(HookEntry {
            path: utf8("the stackhook binary", exe)?,
            args: HOOK_ARGS.iter().map(|s| (*s).to_owned()).collect(),
            env,
            timeout: self.hook_timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT),
        })
    }
}

/// The lower-case name of a policy, as `STACKHOOK_POLICY` takes it.
pub fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Enforce => "enforce",
        Policy::Warn => "warn",
        Policy::Audit => "audit",
    }
}

/// One entry of a runtime-spec `hooks.<stage>` array (and the `hook` object of a hooks.d file).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HookEntry {
    /// Absolute path of the stackhook binary.
    pub path: String,
    /// `["stackhook", "hook"]`.
    pub args: Vec<String>,
    /// The hook's whole environment.
    pub env: Vec<String>,
    /// Seconds.
    pub timeout: u32,
}

impl HookEntry {
    /// As JSON.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::json!({ "path": self.path, "args": self.args, "env": self.env, "timeout": self.timeout })
    }
}

/// What the wrapper found in runc's command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuncInvocation {
    /// The command (`create`, `run`, `state`, ...); `None` for `--version`, `--help` or nothing.
    pub command: Option<String>,
    /// `--bundle`/`-b` of `create`/`run`, as given.
    pub bundle: Option<PathBuf>,
    /// crun's `--config`/`-f` of `create`/`run`, as given.
    pub config: Option<PathBuf>,
    /// The global `--log` file, where containerd's shim reads a failed runtime's error.
    pub log: Option<PathBuf>,
    /// `--log-format json`.
    pub log_json: bool,
}

impl RuncInvocation {
    /// Whether this invocation creates a container (and so gets the hook).
    pub fn creates(&self) -> bool {
        matches!(self.command.as_deref(), Some("create" | "run"))
    }

    /// The `config.json` the runtime will read: crun's `--config` against `cwd`, else
    /// `<bundle>/config.json`, the bundle being `--bundle` against `cwd`, or `cwd` itself.
    pub fn config_path(&self, cwd: &Path) -> PathBuf {
        if let Some(config) = &self.config {
            return cwd.join(config);
        }
        self.bundle.as_ref().map_or_else(|| cwd.to_owned(), |b| cwd.join(b)).join("config.json")
    }
}

/// Global options that take a value, runc's (`runc --help`, 1.1) and crun's (`crun --help`,
/// 1.8). Any other option is taken to be a flag; an unknown option with a value would make its
/// value look like the command, which then passes through untouched.
const GLOBAL_VALUE_OPTIONS: [&str; 7] =
    ["root", "log", "log-format", "criu", "rootless", "cgroup-manager", "log-level"];
/// `create`/`run` options that take a value (runc 1.1, crun 1.8).
const CREATE_VALUE_OPTIONS: [&str; 7] =
    ["bundle", "b", "console-socket", "pid-file", "preserve-fds", "config", "f"];

/// Finds the command and, for `create`/`run`, the bundle in a runc or crun command line (the
/// arguments after `argv[0]`).
///
/// Both accept `--name value`, `--name=value`, and runc (Go's urfave/cli) also `-name value`;
/// crun (argp) also takes short options with the value attached (`-b/path`).
pub fn parse_runc_args(args: &[OsString]) -> RuncInvocation {
    let mut out = RuncInvocation::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else {
            // Not UTF-8: not an option of ours to understand; treat it as the command.
            return out;
        };
        if text == "--" {
            out.command = iter.next().and_then(|a| a.to_str()).map(str::to_owned);
            break;
        }
        let Some((name, inline)) = option_name(text) else {
            out.command = Some(text.to_owned());
            break;
        };
        let value = match inline {
            Some(v) => Some(v),
            None if GLOBAL_VALUE_OPTIONS.contains(&name) => iter.next().and_then(|a| a.to_str()),
            None => None,
        };
        match (name, value) {
            ("log", Some(v)) => out.log = Some(PathBuf::from(v)),
            ("log-format", Some(v)) => out.log_json = v == "json",
            _ => {}
        }
    }
    if !out.creates() {
        return out;
    }
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        let Some((name, inline)) = option_name(text) else { continue };
        let (name, inline) = match (CREATE_VALUE_OPTIONS.contains(&name), text.starts_with("--")) {
            (true, _) | (false, true) => (name, inline),
            // crun's `-b/path`: a short option with its value attached.
            (false, false) => match name.split_at_checked(1) {
                Some((short @ ("b" | "f"), rest)) if inline.is_none() => (short, Some(rest)),
                _ => (name, inline),
            },
        };
        if !CREATE_VALUE_OPTIONS.contains(&name) {
            continue;
        }
        let value = match inline {
            Some(v) => Some(PathBuf::from(v)),
            None => iter.next().map(PathBuf::from),
        };
        match name {
            "bundle" | "b" => out.bundle = value,
            "config" | "f" => out.config = value,
            _ => {}
        }
    }
    out
}

/// Appends `message` as an error to the runtime log the command line names (`--log`), in its
/// `--log-format`, as runc would: containerd's shim reports a failed `create` from that file
/// ("unable to retrieve OCI runtime error" when it is missing), not from stderr. The file is
/// opened without following a symlink; nothing happens without `--log`.
pub fn write_runtime_log(args: &[OsString], message: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let invocation = parse_runc_args(args);
    let Some(path) = invocation.log else { return };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let time = crate::time::rfc3339(now);
    let line = if invocation.log_json {
        serde_json::json!({ "level": "error", "msg": message, "time": time }).to_string()
    } else {
        format!("time={time:?} level=error msg={message:?}")
    };
    let flags = i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0);
    if let Ok(mut f) =
        std::fs::OpenOptions::new().append(true).create(true).mode(0o600).custom_flags(flags).open(&path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// `--name[=value]` or `-name[=value]` -> (name, value); `None` for a non-option.
fn option_name(arg: &str) -> Option<(&str, Option<&str>)> {
    let body = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')).filter(|_| arg.len() > 1)?;
    Some(match body.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (body, None),
    })
}

/// Whether a hook entry is stackhook's: our binary's path, or `args` starting with
/// `["stackhook", "hook"]` (the entry `install podman` writes, or another copy's).
fn is_stackhook_entry(entry: &serde_json::Value, ours: &HookEntry) -> bool {
    let path_matches = entry.get("path").and_then(serde_json::Value::as_str) == Some(ours.path.as_str());
    let args_match = entry.get("args").and_then(serde_json::Value::as_array).is_some_and(|args| {
        args.len() >= 2 && args.iter().zip(HOOK_ARGS).all(|(a, b)| a.as_str() == Some(b))
    });
    path_matches || args_match
}

/// Adds `entry` first in `hooks.createRuntime` of a `config.json` document, unless a stackhook
/// entry is already at any stage that runs before the container's process. Returns whether the
/// document changed. Everything else in it is left as it was.
pub fn add_hook(
    config: &mut serde_json::Value,
    entry: &HookEntry,
    path: &Path,
) -> Result<bool, RuntimeError> {
    let shape = |what| RuntimeError::BundleShape { path: path.to_owned(), what };
    let root = config.as_object_mut().ok_or_else(|| shape("the document is not a JSON object"))?;
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| shape("\"hooks\" is not an object"))?;
    for stage in ["prestart", "createRuntime", "createContainer", "startContainer"] {
        if let Some(list) = hooks.get(stage) {
            let list = list.as_array().ok_or_else(|| shape("a hook stage is not an array"))?;
            if list.iter().any(|e| is_stackhook_entry(e, entry)) {
                return Ok(false);
            }
        }
    }
    // First, so that the check reports before other hooks of the stage act on a host that
    // cannot run the container.
    hooks
        .entry(HOOK_STAGE)
        .or_insert_with(|| serde_json::json!([]))
        .as_array_mut()
        .ok_or_else(|| shape("\"hooks.createRuntime\" is not an array"))?
        .insert(0, entry.to_value());
    Ok(true)
}

/// Adds `entry` to the `config.json` at `path` ([`add_hook`]) and rewrites the file atomically
/// with its permissions kept. Returns whether it changed. A symlink is refused: the daemon
/// writes a regular file, and following one would let it point the edit elsewhere.
pub fn add_hook_to_file(path: &Path, entry: &HookEntry) -> Result<bool, RuntimeError> {
    let io = |source| RuntimeError::BundleIo { path: path.to_owned(), source };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(io(std::io::Error::other("not a regular file")));
    }
    if meta.len() > MAX_BUNDLE_CONFIG_BYTES {
        return Err(RuntimeError::TooLarge { path: path.to_owned(), cap: MAX_BUNDLE_CONFIG_BYTES });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let mut doc: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|source| RuntimeError::BundleJson { path: path.to_owned(), source })?;
    if !add_hook(&mut doc, entry, path)? {
        return Ok(false);
    }
    let out = serde_json::to_vec(&doc)
        .map_err(|source| RuntimeError::BundleJson { path: path.to_owned(), source })?;
    write_file_atomic(path, &out, Some(&meta)).map_err(io)?;
    Ok(true)
}

/// Writes `bytes` to `path` through a temp file in the same directory and a rename, with the
/// permissions of `keep` (the file being replaced) when given.
pub(crate) fn write_file_atomic(
    path: &Path,
    bytes: &[u8],
    keep: Option<&std::fs::Metadata>,
) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(|| OsString::from("file"), OsStr::to_owned);
    let mut tmp_name = OsString::from(".");
    tmp_name.push(&name);
    tmp_name.push(format!(".stackhook.{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Some(meta) = keep {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Finds the real runtime: a name with a slash is taken as a path, any other name is looked up
/// in `dirs`. The result must be an executable file and must not be `exe` (this binary).
pub fn find_runtime(name: &str, dirs: &[&Path], exe: &Path) -> Result<PathBuf, RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if name.contains('/') {
        Some(PathBuf::from(name)).filter(|p| executable(p))
    } else if name.is_empty() {
        None
    } else {
        dirs.iter().map(|d| d.join(name)).find(|p| executable(p))
    };
    let Some(path) = found else {
        let searched = if name.contains('/') {
            name.to_owned()
        } else {
            dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
        };
        return Err(RuntimeError::RuntimeNotFound { name: name.to_owned(), searched });
    };
    let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let me = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_owned());
    if real == me {
        return Err(RuntimeError::RuntimeIsSelf { path });
    }
    Ok(path)
}

/// The wrapper's inputs besides the command line.
#[derive(Debug, Clone, Default)]
pub struct WrapperEnv {
    /// `STACKHOOK_RUNTIME`: overrides the configured runtime.
    pub runtime: Option<OsString>,
    /// `STACKHOOK_CONFIG`: the configuration file.
    pub config: Option<PathBuf>,
    /// The directory the wrapper was started in (the default bundle).
    pub cwd: PathBuf,
    /// This binary's absolute path (`/proc/self/exe` resolved): the hook's `path`.
    pub exe: PathBuf,
}

/// What the wrapper decided for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The runtime to exec with the original arguments.
    pub runtime: PathBuf,
    /// The `config.json` the hook was added to, when this call added it.
    pub edited: Option<PathBuf>,
    /// What the pre-check found, to print before the runtime runs (policy `warn`).
    pub warning: Option<String>,
}

/// Decides one wrapper invocation: loads the configuration, finds the real runtime and, on
/// `create`/`run`, adds the hook to the bundle's `config.json`.
pub fn prepare(args: &[OsString], env: &WrapperEnv) -> Result<Plan, RuntimeError> {
    let config = WrapperConfig::load(env.config.as_deref(), Path::new("/"))?;
    let name = match &env.runtime {
        Some(r) if !r.is_empty() => r.to_string_lossy().into_owned(),
        _ => config.runtime.clone().unwrap_or_else(|| DEFAULT_RUNTIME.to_owned()),
    };
    let dirs: Vec<&Path> = RUNTIME_SEARCH_DIRS.iter().map(Path::new).collect();
    let runtime = find_runtime(&name, &dirs, &env.exe)?;
    let invocation = parse_runc_args(args);
    let mut edited = None;
    let mut warning = None;
    if invocation.creates() {
        let path = invocation.config_path(&env.cwd);
        if add_hook_to_file(&path, &config.hook_entry(&env.exe)?)? {
            edited = Some(path.clone());
        }
        let bundle = path.parent().unwrap_or(Path::new("."));
        let host_root = config.host_root.clone().unwrap_or_else(|| PathBuf::from("/"));
        if let Some(found) = precheck::stale_spec(bundle, &host_root) {
            match config.policy {
                Policy::Enforce => return Err(RuntimeError::StaleSpec { diagnosis: found }),
                Policy::Warn => warning = Some(found),
                Policy::Audit => {}
            }
        }
    }
    Ok(Plan { runtime, edited, warning })
}

/// `path` taken as absolute and placed under `root` (`/etc/x` under `/tmp/p` is `/tmp/p/etc/x`).
pub fn join_under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn entry() -> HookEntry {
        WrapperConfig::default().hook_entry(Path::new("/usr/local/bin/stackhook")).unwrap()
    }

    #[test]
    fn a_failure_goes_to_the_runtime_log_as_runc_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.json");
        let line = |format: &str| {
            let _ = std::fs::remove_file(&log);
            let a = args(&[
                "--root",
                "/r",
                "--log",
                log.to_str().unwrap(),
                "--log-format",
                format,
                "create",
                "x",
            ]);
            write_runtime_log(&a, "stackhook-runtime: blocked: why");
            std::fs::read_to_string(&log).unwrap()
        };
        let json: serde_json::Value = serde_json::from_str(line("json").trim()).unwrap();
        assert_eq!(
            (json["level"].as_str(), json["msg"].as_str()),
            (Some("error"), Some("stackhook-runtime: blocked: why"))
        );
        assert!(line("text").contains("level=error msg=\"stackhook-runtime: blocked: why\""));
        // No --log, nothing written.
        write_runtime_log(&args(&["create", "x"]), "m");
    }

    #[test]
    fn docker_create_line_is_understood() {
        // What containerd's runc shim runs for Docker 20.10.
        let inv = parse_runc_args(&args(&[
            "--root",
            "/var/run/docker/runtime-stackhook/moby",
            "--log",
            "/run/containerd/io.containerd.runtime.v2.task/moby/abc/log.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/run/containerd/io.containerd.runtime.v2.task/moby/abc",
            "--pid-file",
            "/run/x/init.pid",
            "abc",
        ]));
        assert_eq!(inv.command.as_deref(), Some("create"));
        assert!(inv.creates());
        assert_eq!(
            inv.bundle.as_deref(),
            Some(Path::new("/run/containerd/io.containerd.runtime.v2.task/moby/abc"))
        );
        assert_eq!(
            inv.config_path(Path::new("/")),
            Path::new("/run/containerd/io.containerd.runtime.v2.task/moby/abc/config.json")
        );
    }

    #[test]
    fn option_spellings() {
        let inv =
            parse_runc_args(&args(&["--root=/r", "-log", "/l", "--debug", "run", "-b=/b1", "-d", "id"]));
        assert_eq!((inv.command.as_deref(), inv.bundle.as_deref()), (Some("run"), Some(Path::new("/b1"))));
        let inv = parse_runc_args(&args(&["--cgroup-manager", "disabled", "create", "-b/crun", "id"]));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/crun")));
        let inv = parse_runc_args(&args(&["create", "-bundle", "/b2", "--console-socket", "/s", "id"]));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/b2")));
        // crun's --config is relative to the working directory; the bundle defaults to it.
        let inv = parse_runc_args(&args(&["create", "--config", "alt.json", "id"]));
        assert_eq!(inv.config_path(Path::new("/cwd")), Path::new("/cwd/alt.json"));
        let inv = parse_runc_args(&args(&["create", "id"]));
        assert_eq!(inv.config_path(Path::new("/cwd")), Path::new("/cwd/config.json"));
        let inv = parse_runc_args(&args(&["create", "--bundle", "rel", "id"]));
        assert_eq!(inv.config_path(Path::new("/cwd")), Path::new("/cwd/rel/config.json"));
        // `--` ends the global options.
        let inv = parse_runc_args(&args(&["--", "create", "--bundle", "/b", "id"]));
        assert_eq!(inv.bundle.as_deref(), Some(Path::new("/b")));
    }

    #[test]
    fn other_commands_pass_through() {
        for line in [
            &["--version"][..],
            &["-v"],
            &["--help"],
            &[],
            &["--root", "/r", "state", "id"],
            &["--root", "/r", "delete", "--force", "id"],
            &["exec", "--process", "/p.json", "--bundle", "/x", "id"],
            &["kill", "id", "KILL"],
            &["--root", "create"],
        ] {
            let inv = parse_runc_args(&args(line));
            assert!(!inv.creates(), "{line:?}: {inv:?}");
        }
        assert_eq!(
            parse_runc_args(&args(&["--root", "/r", "state", "id"])).command.as_deref(),
            Some("state")
        );
    }

    #[test]
    fn the_hook_goes_first_in_create_runtime_once() {
        let path = Path::new("config.json");
        let mut doc = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"env": ["A=1"]},
            "hooks": {"createRuntime": [{"path": "/other"}], "poststop": [{"path": "/cleanup"}]},
            "x-unknown": {"kept": true}
        });
        assert!(add_hook(&mut doc, &entry(), path).unwrap());
        assert_eq!(doc["hooks"]["createRuntime"][0]["path"], "/usr/local/bin/stackhook");
        assert_eq!(doc["hooks"]["createRuntime"][1]["path"], "/other");
        assert_eq!(doc["x-unknown"]["kept"], true);
        assert_eq!(doc["hooks"]["poststop"][0]["path"], "/cleanup");
        let before = doc.clone();
        assert!(!add_hook(&mut doc, &entry(), path).unwrap());
        assert_eq!(doc, before);

        // Another copy of stackhook (a hooks.d entry) counts as already there.
        let mut doc =
            serde_json::json!({"hooks": {"prestart": [{"path": "/opt/sh", "args": ["stackhook", "hook"]}]}});
        assert!(!add_hook(&mut doc, &entry(), path).unwrap());

        let mut doc = serde_json::json!({});
        assert!(add_hook(&mut doc, &entry(), path).unwrap());
        insta::assert_snapshot!(serde_json::to_string_pretty(&doc).unwrap());
    }

    #[test]
    fn bad_documents_are_errors_not_panics() {
        let path = Path::new("config.json");
        for bad in [
            serde_json::json!([]),
            serde_json::json!({"hooks": []}),
            serde_json::json!({"hooks": {"createRuntime": {}}}),
            serde_json::json!({"hooks": {"prestart": 5}}),
        ] {
            let mut doc = bad.clone();
            assert!(
                matches!(add_hook(&mut doc, &entry(), path), Err(RuntimeError::BundleShape { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn hook_entry_carries_the_configured_environment() {
        let config = WrapperConfig::parse(
            "runtime = \"/usr/bin/crun\"\npolicy = \"warn\"\nhost_root = \"/fixture\"\nreport_dir = \"/var/log/sh\"\nhook_timeout = 3\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(config.runtime.as_deref(), Some("/usr/bin/crun"));
        let e = config.hook_entry(Path::new("/bin/stackhook")).unwrap();
        assert_eq!(
            e.env,
            [
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "STACKHOOK_POLICY=warn",
                "STACKHOOK_HOST_ROOT=/fixture",
                "STACKHOOK_REPORT_DIR=/var/log/sh"
            ]
        );
        assert_eq!((e.timeout, e.args.as_slice()), (3, &["stackhook".to_owned(), "hook".to_owned()][..]));
        assert_eq!(entry().env, ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "STACKHOOK_POLICY=enforce"]);
        assert!(matches!(
            WrapperConfig::parse("policy = \"lax\"", Path::new("c.toml")),
            Err(RuntimeError::ParseConfig { .. })
        ));
        assert!(matches!(
            WrapperConfig::parse("runtim = \"runc\"", Path::new("c.toml")),
            Err(RuntimeError::ParseConfig { .. })
        ));
    }

    #[test]
    fn config_file_is_optional_only_by_default() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(WrapperConfig::load(None, dir.path()).unwrap(), WrapperConfig::default());
        let missing = dir.path().join("nope.toml");
        assert!(matches!(
            WrapperConfig::load(Some(&missing), dir.path()),
            Err(RuntimeError::ReadConfig { .. })
        ));
        let etc = join_under(dir.path(), Path::new(DEFAULT_CONFIG));
        std::fs::create_dir_all(etc.parent().unwrap()).unwrap();
        std::fs::write(&etc, "policy = \"audit\"\n").unwrap();
        assert_eq!(WrapperConfig::load(None, dir.path()).unwrap().policy, Policy::Audit);
        std::fs::write(&etc, vec![b'#'; 70_000]).unwrap();
        assert!(matches!(WrapperConfig::load(None, dir.path()), Err(RuntimeError::TooLarge { .. })));
    }

    #[test]
    fn the_file_is_rewritten_in_place_keeping_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"}}"#).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(add_hook_to_file(&path, &entry()).unwrap());
        assert!(!add_hook_to_file(&path, &entry()).unwrap());
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["root"]["path"], "rootfs");
        assert_eq!(doc["hooks"]["createRuntime"].as_array().unwrap().len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temp file left");

        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(add_hook_to_file(&link, &entry()), Err(RuntimeError::BundleIo { .. })));
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(add_hook_to_file(&path, &entry()), Err(RuntimeError::BundleJson { .. })));
    }

    #[test]
    fn runtime_lookup() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("runc"), "").unwrap(); // not executable: skipped
        std::fs::write(b.join("runc"), "").unwrap();
        std::fs::set_permissions(b.join("runc"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let me = dir.path().join("stackhook");
        std::fs::write(&me, "").unwrap();
        let dirs = [a.as_path(), b.as_path()];
        assert_eq!(find_runtime("runc", &dirs, &me).unwrap(), b.join("runc"));
        assert!(matches!(find_runtime("crun", &dirs, &me), Err(RuntimeError::RuntimeNotFound { .. })));
        assert!(matches!(find_runtime("", &dirs, &me), Err(RuntimeError::RuntimeNotFound { .. })));
        let abs = b.join("runc");
        assert_eq!(find_runtime(abs.to_str().unwrap(), &[], &me).unwrap(), abs);
        std::fs::set_permissions(&me, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = b.join(WRAPPER_NAME);
        std::os::unix::fs::symlink(&me, &link).unwrap();
        assert!(matches!(
            find_runtime(link.to_str().unwrap(), &[], &me),
            Err(RuntimeError::RuntimeIsSelf { .. })
        ));
    }

    #[test]
    fn prepare_edits_only_on_create() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(bundle.join("config.json"), "{}").unwrap();
        let runtime = dir.path().join("fake-runc");
        std::fs::write(&runtime, "").unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("config.toml");
        std::fs::write(&config, format!("runtime = {:?}\nhost_root = \"/fx\"\n", runtime.to_str().unwrap()))
            .unwrap();
        let env = WrapperEnv {
            runtime: None,
            config: Some(config),
            cwd: bundle.clone(),
            exe: PathBuf::from("/opt/stackhook"),
        };
        let plan = prepare(&args(&["--root", "/r", "state", "id"]), &env).unwrap();
        assert_eq!(plan, Plan { runtime: runtime.clone(), edited: None, warning: None });
        assert_eq!(std::fs::read_to_string(bundle.join("config.json")).unwrap(), "{}");
        let plan = prepare(&args(&["create", "id"]), &env).unwrap();
        assert_eq!(plan.edited, Some(bundle.join("config.json")));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
        assert_eq!(doc["hooks"]["createRuntime"][0]["env"][2], "STACKHOOK_HOST_ROOT=/fx");
        // STACKHOOK_RUNTIME wins over the file.
        let env = WrapperEnv { runtime: Some("/nonexistent/runc".into()), ..env };
        assert!(matches!(prepare(&args(&["state", "id"]), &env), Err(RuntimeError::RuntimeNotFound { .. })));
    }
}
