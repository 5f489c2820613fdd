//! `stackhook cdi check`: the CDI specs of a host against its driver, GPUs and MIG devices.
//!
//! A CDI spec (cncf-tags/container-device-interface `SPEC.md`; YAML or JSON, `cdiVersion`,
//! `kind`, `devices[].containerEdits`, spec-level `containerEdits` with `env`, `deviceNodes`,
//! `mounts`, `hooks`) is written once: by `nvidia-ctk cdi generate`, the toolkit's
//! `nvidia-cdi-refresh` service, the device plugin or the DRA driver. Runtimes read every
//! `*.json` and `*.yaml` under `/etc/cdi` and `/var/run/cdi` at each container start. After a
//! driver upgrade, a reload or a MIG change an old spec mounts libraries that are gone or of the
//! old version (NVIDIA/nvidia-container-toolkit issues 450, 856), names nodes by numbers that
//! are no longer the device's, and lacks the GPUs and MIG devices made since (1828). This module
//! reports, for each NVIDIA spec (a kind whose vendor is `nvidia.com` or ends in `.nvidia.com`),
//! what no longer matches.
//!
//! Paths in a spec are host paths. They are looked up below the host root (`/` in production;
//! a path already under the host root, as a spec written for a fixture tree has them, is taken
//! as it is) with in-root resolution and `lstat`: nothing is followed out of the root, opened or
//! read but the spec files themselves, each read capped.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;
use serde::{Deserialize, Serialize};

use crate::given::driver_library_version;
use crate::probe::{self, HostFs, HostProbe, ReadError};

/// Where runtimes look for specs (CDI `SPEC.md`: the default spec directories).
pub const SPEC_DIRS: [&str; 2] = ["etc/cdi", "var/run/cdi"];
/// Largest spec file read (NVIDIA's for an eight-GPU host is some 30 KiB).
pub const MAX_SPEC_BYTES: usize = 4 << 20;
/// Most spec files read per directory.
const MAX_SPECS: usize = 256;
/// Most device nodes and mounts looked at per spec.
const MAX_EDITS: usize = 4096;

/// What to do about a stale spec: the remedy of this check, of the doctor's findings on what a
/// container was given and of the runtime wrapper's pre-check.
pub const REGENERATE_CDI: &str = "regenerate the CDI spec for the running driver: \
     sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (or sudo systemctl restart \
     nvidia-cdi-refresh.service where the toolkit installed it); on Kubernetes, restart the device \
     plugin or DRA driver pods so that they write theirs again";

/// Why a spec could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A named file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// Larger than [`MAX_SPEC_BYTES`].
    #[error("{path} is larger than {MAX_SPEC_BYTES} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
}

/// A spec, as much of it as the check needs (unknown fields are ignored, as runtimes of older
/// spec versions do).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// `cdiVersion`.
    #[serde(default)]
    pub cdi_version: String,
    /// `vendor/class`.
    #[serde(default)]
    pub kind: String,
    /// The devices.
    #[serde(default)]
    pub devices: Vec<SpecDevice>,
    /// Edits for every device of the spec.
    #[serde(default)]
    pub container_edits: Edits,
}

/// One device of a spec.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecDevice {
    /// Its name (`0`, `GPU-…`, `all`, `0:1`).
    #[serde(default)]
    pub name: String,
    /// Its edits.
    #[serde(default)]
    pub container_edits: Edits,
}

/// `containerEdits`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    /// Device nodes.
    #[serde(default)]
    pub device_nodes: Vec<SpecNode>,
    /// Mounts.
    #[serde(default)]
    pub mounts: Vec<SpecMount>,
}

/// `deviceNodes[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecNode {
    /// Path in the container (and on the host without `hostPath`).
    #[serde(default)]
    pub path: String,
    /// Path on the host.
    #[serde(default)]
    pub host_path: Option<String>,
    /// Major, when the spec fixes it.
    #[serde(default)]
    pub major: Option<i64>,
    /// Minor, when the spec fixes it.
    #[serde(default)]
    pub minor: Option<i64>,
}

/// `mounts[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecMount {
    /// Path on the host.
    #[serde(default)]
    pub host_path: String,
    /// Path in the container.
    #[serde(default)]
    pub container_path: String,
}

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Containers given the spec's devices fail or get the wrong device.
    Error,
    /// The spec is incomplete: devices the host has cannot be asked for.
    Warning,
}

/// One thing a spec has wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// How bad.
    pub level: Level,
    /// Stable code: `node-missing`, `node-numbers`, `library-missing`, `library-version`,
    /// `mount-missing`, `gpu-unknown`, `gpu-missing-from-spec`, `mig-missing-from-spec`.
    pub code: &'static str,
    /// What, in a sentence.
    pub message: String,
}

/// A spec file's path and its text, or why it could not be read.
pub type SpecText = (String, Result<String, String>);

/// The check of one spec file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecReport {
    /// The file.
    pub path: String,
    /// Its kind, when it parsed.
    pub kind: Option<String>,
    /// Whether it is an NVIDIA spec (only those are checked).
    pub nvidia: bool,
    /// Why it was not read or parsed, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// What is wrong.
    pub problems: Vec<Problem>,
}

impl SpecReport {
    /// Whether anything is an error.
    pub fn has_errors(&self) -> bool {
        self.unreadable.is_some() || self.problems.iter().any(|p| p.level == Level::Error)
    }
}

/// Whether `kind` (`vendor/class`) is NVIDIA's: `nvidia.com/gpu`, `runtime.nvidia.com/gpu`,
/// `k8s.gpu.nvidia.com/device`, `management.nvidia.com/gpu`.
pub fn is_nvidia_kind(kind: &str) -> bool {
    let vendor = kind.split_once('/').map_or("", |(v, _)| v);
    vendor == "nvidia.com" || vendor.ends_with(".nvidia.com")
}

/// Parses a spec's text (YAML, of which JSON is a subset).
pub fn parse(text: &str) -> Result<Spec, String> {
    serde_norway::from_str(text).map_err(|e| e.to_string())
}

/// The spec files to check: `paths` as named, or every `*.json` and `*.yaml` in the host's
/// [`SPEC_DIRS`] (in name order, as runtimes read them). Returns each with its text or why it
/// could not be read; an explicitly named file that cannot be read is an error.
pub fn load(host_root: &Path, paths: &[PathBuf]) -> Result<Vec<SpecText>, CdiError> {
    let mut out = Vec::new();
    if !paths.is_empty() {
        for p in paths {
            out.push((p.display().to_string(), Ok(read_named(p)?)));
        }
        return Ok(out);
    }
    let Ok(fs) = HostFs::open(host_root) else { return Ok(out) };
    for dir in SPEC_DIRS {
        let Ok((mut names, _)) = fs.list(dir, MAX_SPECS) else { continue };
        names.retain(|n| {
            !n.starts_with('.')
                && Path::new(n)
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("json") || e.eq_ignore_ascii_case("yaml"))
        });
        names.sort();
        for name in names {
            let rel = format!("{dir}/{name}");
            let text = fs
                .read(&rel, MAX_SPEC_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|b| String::from_utf8(b).map_err(|_| "not UTF-8".to_owned()));
            out.push((format!("/{rel}"), text));
        }
    }
    Ok(out)
}

/// A file the user named: a regular file, not through a symlink, capped.
fn read_named(path: &Path) -> Result<String, CdiError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| CdiError::Read { path: path.to_owned(), source };
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(flags.bits()).unwrap_or(0))
        .open(path)
        .map_err(err)?;
    if !file.metadata().map_err(err)?.is_file() {
        return Err(err(std::io::Error::other("not a regular file")));
    }
    let mut text = String::new();
    file.take(MAX_SPEC_BYTES as u64 + 1).read_to_string(&mut text).map_err(err)?;
    if text.len() > MAX_SPEC_BYTES {
        return Err(CdiError::TooLarge { path: path.to_owned() });
    }
    Ok(text)
}

/// Checks every spec `load` returned against the host.
pub fn check_all(host_root: &Path, specs: &[SpecText]) -> Vec<SpecReport> {
    let host = probe::probe(host_root);
    let fs = HostFs::open(host_root).ok();
    specs
        .iter()
        .map(|(path, text)| check(&host, fs.as_ref(), path, text.as_deref().map_err(Clone::clone)))
        .collect()
}

/// Checks one spec's text against the probed host.
fn check(host: &HostProbe, fs: Option<&HostFs>, path: &str, text: Result<&str, String>) -> SpecReport {
    let mut report = SpecReport {
        path: path.to_owned(),
        kind: None,
        nvidia: false,
        unreadable: None,
        problems: Vec::new(),
    };
    let spec = match text.and_then(parse) {
        Ok(s) => s,
        Err(why) => {
            report.unreadable = Some(why);
            return report;
        }
    };
    report.nvidia = is_nvidia_kind(&spec.kind);
    report.kind = Some(spec.kind.clone());
    if report.nvidia {
        report.problems = Checker { host, fs, root: &host.root, problems: Vec::new() }.run(&spec);
    }
    report
}

struct Checker<'a> {
    host: &'a HostProbe,
    fs: Option<&'a HostFs>,
    root: &'a Path,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn push(&mut self, level: Level, code: &'static str, message: String) {
        self.problems.push(Problem { level, code, message });
    }

    /// `path` relative to the host root.
    fn rel(&self, path: &str) -> String {
        let p = Path::new(path);
        let inside = p.strip_prefix(self.root).ok().filter(|_| self.root != Path::new("/"));
        inside.map_or_else(|| path.trim_start_matches('/').to_owned(), |r| r.display().to_string())
    }

    fn lstat(&self, path: &str) -> Result<rustix::fs::Stat, ReadError> {
        match self.fs {
            Some(fs) => fs.lstat(&self.rel(path)),
            None => Err(ReadError::NotFound),
        }
    }

    fn run(mut self, spec: &Spec) -> Vec<Problem> {
        let edits: Vec<(&str, &Edits)> = std::iter::once(("(every device)", &spec.container_edits))
            .chain(spec.devices.iter().map(|d| (d.name.as_str(), &d.container_edits)))
            .collect();
        let mut seen_nodes: BTreeSet<String> = BTreeSet::new();
        let mut seen_mounts: BTreeSet<String> = BTreeSet::new();
        let mut granted: Vec<(u32, u32)> = Vec::new();
        for (device, e) in &edits {
            for n in e.device_nodes.iter().take(MAX_EDITS) {
                let host_path = n.host_path.clone().unwrap_or_else(|| n.path.clone());
                if let (Some(maj), Some(min)) = (n.major.and_then(to_u32), n.minor.and_then(to_u32)) {
                    granted.push((maj, min));
                }
                if !seen_nodes.insert(host_path.clone()) {
                    continue;
                }
                self.node(device, n, &host_path, &mut granted);
            }
            for m in e.mounts.iter().take(MAX_EDITS) {
                if !seen_mounts.insert(m.host_path.clone()) {
                    continue;
                }
                self.mount(m);
            }
        }
        self.coverage(&granted);
        self.problems
    }

    fn node(&mut self, device: &str, n: &SpecNode, host_path: &str, granted: &mut Vec<(u32, u32)>) {
        let st = match self.lstat(host_path) {
            Ok(st) => st,
            Err(ReadError::NotFound) => {
                return self.push(
                    Level::Error,
                    "node-missing",
                    format!("device {device:?}: {host_path} does not exist on the host"),
                );
            }
            Err(e) => {
                return self.push(
                    Level::Error,
                    "node-missing",
                    format!("device {device:?}: {host_path}: {e}"),
                );
            }
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::CharacterDevice {
            return self.push(
                Level::Error,
                "node-missing",
                format!("device {device:?}: {host_path} is not a character device"),
            );
        }
        let (maj, min) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
        granted.push((maj, min));
        if let (Some(sm), Some(sn)) = (n.major, n.minor) {
            if (sm, sn) != (i64::from(maj), i64::from(min)) {
                self.push(
                    Level::Error,
                    "node-numbers",
                    format!(
                        "device {device:?}: the spec gives {} as {sm}:{sn}, the host's {host_path} is {maj}:{min}",
                        n.path
                    ),
                );
            }
        }
        let gpu_major = ["nvidia", "nvidia-frontend"].iter().any(|d| self.host.char_major(d) == Some(maj));
        if gpu_major
            && min < 254
            && !self.host.gpus.is_empty()
            && !self.host.gpus.iter().any(|g| g.minor == Some(min))
        {
            self.push(
                Level::Error,
                "gpu-unknown",
                format!("device {device:?}: {} is GPU minor {min}, which no GPU of this host has", n.path),
            );
        }
    }

    fn mount(&mut self, m: &SpecMount) {
        let name = m.host_path.rsplit('/').next().unwrap_or("");
        let version = driver_library_version(name);
        let exists = self.lstat(&m.host_path).is_ok();
        let loaded = self.host.driver.as_ref().map(|d| &d.value);
        match (version, exists, loaded) {
            (Some(v), false, Some(d)) if &v != d => self.push(
                Level::Error,
                "library-missing",
                format!(
                    "{} does not exist: a library of driver {v}, and the loaded driver is {d}",
                    m.host_path
                ),
            ),
            (Some(v), true, Some(d)) if &v != d => self.push(
                Level::Error,
                "library-version",
                format!("{} is a library of driver {v}, and the loaded driver is {d}", m.host_path),
            ),
            (_, false, _) => {
                self.push(
                    Level::Error,
                    "mount-missing",
                    format!("{} does not exist on the host", m.host_path),
                );
            }
            _ => {}
        }
    }

    /// The GPUs and MIG devices the host has that no node of the spec grants.
    fn coverage(&mut self, granted: &[(u32, u32)]) {
        let frontend: Vec<u32> =
            ["nvidia", "nvidia-frontend"].iter().filter_map(|d| self.host.char_major(d)).collect();
        for g in &self.host.gpus {
            let Some(minor) = g.minor else { continue };
            if !granted.iter().any(|(maj, min)| frontend.contains(maj) && *min == minor) {
                self.push(
                    Level::Warning,
                    "gpu-missing-from-spec",
                    format!("GPU {} ({}, minor {minor}) is not in the spec", g.index, g.bus_id),
                );
            }
        }
        let Some(caps) = self.host.char_major("nvidia-caps") else { return };
        for i in &self.host.mig.instances {
            let Some(ci) = i.ci_minor else { continue };
            if !granted.iter().any(|&(maj, min)| maj == caps && min == ci) {
                self.push(
                    Level::Warning,
                    "mig-missing-from-spec",
                    format!(
                        "MIG device gi{}/ci{} of GPU minor {} (capability minor {ci}) is not in the spec",
                        i.gi, i.ci, i.gpu_minor
                    ),
                );
            }
        }
    }
}

fn to_u32(v: i64) -> Option<u32> {
    u32::try_from(v).ok()
}

/// The reports for people: one block per spec, `ok` or its problems.
pub fn render(reports: &[SpecReport]) -> String {
    let mut out = String::new();
    if reports.is_empty() {
        let _ = writeln!(out, "no CDI spec found (looked in /etc/cdi and /var/run/cdi)");
    }
    for r in reports {
        let kind = r.kind.as_deref().unwrap_or("?");
        match (&r.unreadable, r.nvidia, r.problems.is_empty()) {
            (Some(why), _, _) => {
                let _ = writeln!(out, "{}: error: not a CDI spec: {why}", r.path);
            }
            (None, false, _) => {
                let _ = writeln!(out, "{}: {kind}: not NVIDIA's, not checked", r.path);
            }
            (None, true, true) => {
                let _ = writeln!(out, "{}: {kind}: ok", r.path);
            }
            (None, true, false) => {
                let _ = writeln!(out, "{}: {kind}:", r.path);
                for p in &r.problems {
                    let level = match p.level {
                        Level::Error => "error  ",
                        Level::Warning => "warning",
                    };
                    let _ = writeln!(out, "  {level} {}: {}", p.code, p.message);
                }
            }
        }
    }
    if reports.iter().any(|r| r.nvidia && !r.problems.is_empty()) {
        let _ = writeln!(out, "fix: {REGENERATE_CDI}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Preset;

    fn run(root: &Path, spec: &serde_json::Value, yaml: bool) -> SpecReport {
        let text = if yaml { serde_norway::to_string(spec).unwrap() } else { spec.to_string() };
        check_all(root, &[("/etc/cdi/nvidia.yaml".to_owned(), Ok(text))]).remove(0)
    }

    fn codes(r: &SpecReport) -> Vec<&'static str> {
        r.problems.iter().map(|p| p.code).collect()
    }

    #[test]
    fn a_current_spec_is_ok_in_yaml_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let host = Preset::EightGpus.build(&root).unwrap();
        if !host.real_device_nodes() {
            eprintln!("skipped: mknod is not permitted here");
            return;
        }
        let spec = Preset::EightGpus.spec().cdi_spec(&root, "nvidia.com/gpu");
        for yaml in [true, false] {
            let r = run(&root, &spec, yaml);
            assert!(r.nvidia && r.problems.is_empty(), "{:?}", r.problems);
        }
        // A spec with host-relative paths, as on a real host.
        let relative: serde_json::Value =
            serde_json::from_str(&spec.to_string().replace(&format!("{}/", root.display()), "/")).unwrap();
        assert_eq!(run(&root, &relative, true).problems, []);
    }

    #[test]
    fn a_spec_of_the_driver_before_and_of_fewer_gpus_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let host = Preset::EightGpus.build(&root).unwrap();
        if !host.real_device_nodes() {
            eprintln!("skipped: mknod is not permitted here");
            return;
        }
        // Written for driver 550.54.14 and two GPUs, one since renumbered.
        let mut old = Preset::Healthy.spec().driver("550.54.14").cdi_spec(&root, "nvidia.com/gpu");
        old["devices"][0]["containerEdits"]["deviceNodes"][0]["minor"] = 3.into();
        std::fs::write(root.join("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14"), "old").unwrap();
        let r = run(&root, &old, true);
        let c = codes(&r);
        assert!(c.contains(&"library-missing"), "{c:?}");
        assert!(c.contains(&"library-version"), "{c:?}");
        assert!(c.contains(&"node-numbers"), "{c:?}");
        assert!(c.contains(&"gpu-missing-from-spec"), "{c:?}");
        assert!(r.has_errors());
        let text = render(&[r]);
        assert!(text.contains("libcuda.so.550.54.14 does not exist: a library of driver 550.54.14, and the loaded driver is 535.104.05"), "{text}");
        assert!(text.contains("fix: regenerate the CDI spec"), "{text}");
    }

    #[test]
    fn mig_devices_missing_from_a_spec_and_other_vendors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let host = Preset::MigNode.build(&root).unwrap();
        if !host.real_device_nodes() {
            eprintln!("skipped: mknod is not permitted here");
            return;
        }
        let spec = Preset::MigNode.spec().cdi_spec(&root, "nvidia.com/gpu");
        let r = run(&root, &spec, false);
        assert_eq!(
            codes(&r).iter().filter(|c| **c == "mig-missing-from-spec").count(),
            3,
            "{:?}",
            r.problems
        );
        assert!(!r.has_errors(), "an incomplete spec still works for what it lists");
        let other = serde_json::json!({ "cdiVersion": "0.6.0", "kind": "vendor.com/nic", "devices": [] });
        let r = run(&root, &other, true);
        assert!(!r.nvidia && r.problems.is_empty());
        let bad = check_all(&root, &[("x.yaml".into(), Ok(": : :\n- [".into()))]).remove(0);
        assert!(bad.unreadable.is_some() && bad.has_errors());
    }

    #[test]
    fn default_dirs_are_read_below_the_host_root_and_named_files_as_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("etc/cdi")).unwrap();
        std::fs::create_dir_all(root.join("var/run/cdi")).unwrap();
        std::fs::write(root.join("etc/cdi/b.yaml"), "kind: nvidia.com/gpu\n").unwrap();
        std::fs::write(root.join("etc/cdi/a.json"), "{}").unwrap();
        std::fs::write(root.join("etc/cdi/notes.txt"), "x").unwrap();
        std::fs::write(root.join("var/run/cdi/c.yaml"), "kind: k8s.gpu.nvidia.com/device\n").unwrap();
        let names: Vec<String> = load(root, &[]).unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!(names, ["/etc/cdi/a.json", "/etc/cdi/b.yaml", "/var/run/cdi/c.yaml"]);
        std::os::unix::fs::symlink(root.join("etc/cdi/b.yaml"), root.join("link.yaml")).unwrap();
        assert!(matches!(load(root, &[root.join("link.yaml")]), Err(CdiError::Read { .. })));
        assert!(matches!(load(root, &[root.join("etc/cdi")]), Err(CdiError::Read { .. })));
    }
}
