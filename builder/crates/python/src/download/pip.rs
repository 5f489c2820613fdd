//! What pip is configured with on this machine, asked of pip once and remembered.
//!
//! [`super::Config`] honours what pip is given (its index, extra indexes, find-links,
//! certificates, proxy, timeout) and pip's own default index. Asking pip costs a Python start-up
//! and the import of pip's command line: `python3 -m pip config list` took 2.0 s here (pyenv's
//! shim about 0.45 s of it), most of a 2.3 s download of three small wheels, paid by every build
//! that downloads anything. So one Python process reads pip's own `Configuration` (the class
//! `pip config list` prints) and its default index, and the answer is kept in the cache next to
//! what it depends on:
//!
//! - in the record's name, the environment that selects the interpreter and pip's files
//!   (`PIP_*`, `HOME`, `XDG_CONFIG_HOME`, `XDG_CONFIG_DIRS`, `VIRTUAL_ENV`, `CONDA_PREFIX`,
//!   `PATH`, `PYENV_VERSION`, `PYENV_ROOT`) and the working directory;
//! - in the record, every configuration file pip considers (whether there or not: global, user,
//!   site, `PIP_CONFIG_FILE`), the interpreter, pip's own package and pyenv's version files,
//!   each with its size, modification time and inode, compared on reuse.
//!
//! Any difference asks pip again. Where pip's internals cannot be read that way (another pip),
//! `pip config list` and a second process for the default index run as before, unremembered.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::Digest as _;

/// pip's configuration as `pip config list` prints it (`section.key` -> value, `:env:.key` for
/// `PIP_*` variables) and pip's default index.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Settings {
    /// `section.key` -> value.
    pub config: BTreeMap<String, String>,
    /// pip's default index (`PyPI.simple_url`), when pip says it.
    pub default_index: Option<String>,
}

/// A record: the settings and the files they were read from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    settings: Settings,
    /// Each file and its identity when read (`None`: not there).
    files: Vec<(PathBuf, Option<Identity>)>,
}

/// Size, modification time (ns) and inode.
type Identity = (u64, i64, u64);

fn identity(path: &Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino()))
}

/// Reads pip's configuration files the way `pip config list` does, and its default index; the
/// files it considers, the interpreter and pip's package are printed with them (JSON).
const SCRIPT: &str = r#"
import json, os, sys
import pip
from pip._internal.configuration import Configuration
from pip._internal.models.index import PyPI
c = Configuration(isolated=False)
c.load()
files = []
walk = getattr(c, "iter_config_files", None) or getattr(c, "_iter_config_files")
for _variant, paths in walk():
    files.extend(paths)
files += [sys.executable, os.path.realpath(sys.executable), pip.__file__]
print(json.dumps({"config": {k: v for k, v in c.items()}, "default_index": PyPI.simple_url, "files": files}))
"#;

/// The output of [`SCRIPT`].
#[derive(serde::Deserialize)]
struct Answer {
    config: BTreeMap<String, String>,
    default_index: Option<String>,
    files: Vec<PathBuf>,
}

impl Settings {
    /// This machine's pip settings: from the record in `memo` when nothing it was read from
    /// changed, else from pip (and recorded there).
    pub(super) fn of_this_machine(memo: Option<&Path>) -> Self {
        let record = memo.map(|dir| dir.join(format!("pip-settings-{}.json", environment_key())));
        if let Some(path) = &record {
            if let Some(settings) = reuse(path) {
                return settings;
            }
        }
        match ask_pip() {
            Some((settings, mut files)) => {
                files.extend(pyenv_version_files());
                if let Some(path) = &record {
                    let files = files.into_iter().map(|f| {
                        let id = identity(&f);
                        (f, id)
                    });
                    let record = Record { settings: settings.clone(), files: files.collect() };
                    if let Ok(json) = serde_json::to_vec(&record) {
                        // Not recorded is only slower next time.
                        let _ = path.parent().map(std::fs::create_dir_all);
                        let _ = stackbuild_common::write_atomic(path, &json);
                    }
                }
                settings
            }
            None => Self::from_pip_cli(),
        }
    }

    /// `pip config list` and pip's default index, two processes at once.
    fn from_pip_cli() -> Self {
        let default = std::thread::spawn(pip_default_index);
        let config = pip_config();
        Self { config, default_index: default.join().ok().flatten() }
    }
}

/// The record at `path` when every file it lists is as it was.
fn reuse(path: &Path) -> Option<Settings> {
    let bytes = stackbuild_common::read_capped(path, 1 << 20, "pip settings record").ok()?;
    let record: Record = serde_json::from_slice(&bytes).ok()?;
    record.files.iter().all(|(f, id)| identity(f) == *id).then_some(record.settings)
}

/// The environment variables and the working directory that decide which interpreter runs and
/// which files pip reads, as a digest.
fn environment_key() -> String {
    let mut h = sha2::Sha256::new();
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| {
            k.starts_with("PIP_")
                || matches!(
                    k.as_str(),
                    "HOME"
                        | "XDG_CONFIG_HOME"
                        | "XDG_CONFIG_DIRS"
                        | "VIRTUAL_ENV"
                        | "CONDA_PREFIX"
                        | "PATH"
                        | "PYENV_VERSION"
                        | "PYENV_ROOT"
                )
        })
        .collect();
    vars.sort();
    for (k, v) in vars {
        for part in [k.as_str(), v.as_str()] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    h.update(cwd.as_os_str().as_encoded_bytes());
    hex::encode(h.finalize())
}

/// pyenv's choice of interpreter: `$PYENV_ROOT/version` and every `.python-version` from the
/// working directory up.
fn pyenv_version_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    if let Some(root) = root {
        files.push(root.join("version"));
    }
    if let Ok(cwd) = std::env::current_dir() {
        files.extend(cwd.ancestors().map(|d| d.join(".python-version")));
    }
    files
}

/// [`SCRIPT`]'s answer, or `None` when pip is not there or its internals differ.
fn ask_pip() -> Option<(Settings, Vec<PathBuf>)> {
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let answer: Answer = serde_json::from_slice(&out.stdout).ok()?;
    let settings =
        Settings { config: answer.config, default_index: answer.default_index.filter(|d| !d.is_empty()) };
    Some((settings, answer.files))
}

/// `python3 -m pip config list`: `section.key='value'` lines, as a map; empty when pip is not
/// there (then only the environment and the recipe configure anything).
fn pip_config() -> BTreeMap<String, String> {
    let out = std::process::Command::new("python3")
        .args(["-m", "pip", "config", "list"])
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => parse_pip_config_list(&String::from_utf8_lossy(&o.stdout)),
        _ => BTreeMap::new(),
    }
}

/// Parses `pip config list` output: `key=REPR` per line, REPR a Python string literal.
pub(super) fn parse_pip_config_list(text: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else { continue };
        if let Some(v) = python_str(value.trim()) {
            map.insert(key.trim().to_owned(), v);
        }
    }
    map
}

/// A Python `repr()` of a string: quoted with `'` or `"`, backslash escapes.
fn python_str(repr: &str) -> Option<String> {
    let quote = repr.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = repr.strip_prefix(quote)?.strip_suffix(quote)?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// pip's default index, asked of pip.
fn pip_default_index() -> Option<String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_reused_until_a_file_it_was_read_from_changes() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("pip.conf");
        std::fs::write(&conf, "[global]\nindex-url = https://a.invalid/simple\n").unwrap();
        let absent = dir.path().join("user-pip.conf");
        let settings = Settings {
            config: BTreeMap::from([("global.index-url".into(), "https://a.invalid/simple".into())]),
            default_index: Some("https://default.invalid/simple".into()),
        };
        let record = Record {
            settings: settings.clone(),
            files: vec![(conf.clone(), identity(&conf)), (absent.clone(), None)],
        };
        let path = dir.path().join("record.json");
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(reuse(&path), Some(settings));
        // A user config file appears: pip would read it.
        std::fs::write(&absent, "[global]\n").unwrap();
        assert_eq!(reuse(&path), None);
        std::fs::remove_file(&absent).unwrap();
        // The file is edited (another size).
        std::fs::write(&conf, "[global]\nindex-url = https://b.invalid/simple/\n").unwrap();
        assert_eq!(reuse(&path), None);
        std::fs::write(&path, b"not json").unwrap();
        assert_eq!(reuse(&path), None);
    }
}
