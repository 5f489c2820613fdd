//! The runtime's state on stdin and the parts of the bundle's `config.json` the hook reads.
//!
//! The state is `{"ociVersion","id","status","pid","bundle","annotations"}` (runtime-spec
//! `runtime.md`); very old runc wrote `bundlePath`. Both inputs are capped: a hook must not be
//! made to allocate without bound by whoever writes them.
//!
//! These few fields are read by hand rather than through oci-spec's runtime types
//! (<https://github.com/youki-dev/oci-spec-rs>, which the builder uses for the image documents it
//! writes): those types are closed enums, so a valid input from a newer or another runtime would
//! fail to parse here: `ContainerState` has no `paused` (runc reports one, `runc state`), and
//! `Capability` refuses a capability name it does not list (one a newer kernel added). The hook
//! must read what it needs and ignore the rest; it also stays a small static binary that every
//! container start runs, without oci-spec's builders and their dependencies linked in.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most bytes read from stdin.
pub const MAX_STATE_BYTES: u64 = 1 << 20;
/// Most bytes read from `config.json`.
pub const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// Why the hook's input could not be used.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Reading stdin failed.
    #[error("cannot read the container state from stdin: {0}")]
    Stdin(#[source] std::io::Error),
    /// Input longer than its cap.
    #[error("{what} is larger than {cap} bytes")]
    TooLarge {
        /// Which input.
        what: &'static str,
        /// The cap.
        cap: u64,
    },
    /// Not the JSON we expect.
    #[error("{what} is not valid: {source}")]
    Json {
        /// Which input.
        what: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// Neither `bundle` nor `bundlePath`.
    #[error("the container state names no bundle (neither \"bundle\" nor \"bundlePath\")")]
    NoBundle,
    /// The bundle's config could not be opened.
    #[error("cannot read {path}: {source}")]
    Config {
        /// The config path.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
}

/// The container state a runtime writes to a hook's stdin.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct State {
    /// Container id.
    #[serde(default)]
    pub id: String,
    /// Status (`creating`, `created`).
    #[serde(default)]
    pub status: String,
    /// The bundle directory.
    #[serde(default)]
    pub bundle: Option<PathBuf>,
    /// The bundle directory, as runc before 1.0-rc5 named it.
    #[serde(default, rename = "bundlePath")]
    pub bundle_path: Option<PathBuf>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl State {
    /// Reads and parses the state from `input`, capped.
    pub fn read(input: impl Read) -> Result<Self, OciError> {
        let bytes = read_capped(input, MAX_STATE_BYTES, "the container state").map_err(|e| match e {
            Capped::Io(e) => OciError::Stdin(e),
            Capped::TooLarge => OciError::TooLarge { what: "the container state", cap: MAX_STATE_BYTES },
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|source| OciError::Json { what: "the container state on stdin", source })
    }

    /// The bundle directory.
    pub fn bundle(&self) -> Result<&Path, OciError> {
        self.bundle
            .as_deref()
            .or(self.bundle_path.as_deref())
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or(OciError::NoBundle)
    }
}

/// The parts of `config.json` the hook needs.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Config {
    /// The container's process.
    #[serde(default)]
    pub process: Option<Process>,
    /// The root filesystem.
    #[serde(default)]
    pub root: Option<Root>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Mounts: device volume mounts, and the driver libraries a CDI spec binds in.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// `linux` of `config.json`.
    #[serde(default)]
    pub linux: Option<Linux>,
}

/// `linux` of `config.json`: its device list and its cgroups path are read.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Linux {
    /// Device nodes the runtime creates in the container (runtime-spec `config-linux.md`
    /// "Devices"): where CDI edits, `--device` and privileged containers put theirs.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// `cgroupsPath`: `slice:prefix:name` when systemd manages the container's cgroup (runc's
    /// and crun's systemd cgroup driver), a path otherwise.
    #[serde(default, rename = "cgroupsPath")]
    pub cgroups_path: Option<String>,
}

impl Linux {
    /// Whether systemd manages the container's cgroup: runc and crun take a `cgroupsPath` of
    /// the form `slice:prefix:name` only with their systemd driver (runc `libcontainer/specconv`,
    /// "systemd cgroup path").
    pub fn systemd_cgroup(&self) -> bool {
        self.cgroups_path.as_deref().is_some_and(|p| {
            let parts: Vec<&str> = p.split(':').collect();
            parts.len() == 3 && !p.starts_with('/') && parts[2].len() <= 1024
        })
    }
}

/// One entry of `linux.devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct Device {
    /// Path in the container; a spec may name a node anything, so it never identifies one.
    #[serde(default)]
    pub path: String,
    /// `c` (or `u`, unbuffered character), `b` or `p`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Major number (int64 in the spec; a negative or absent one reads as `None`).
    #[serde(default, deserialize_with = "device_number")]
    pub major: Option<u32>,
    /// Minor number.
    #[serde(default, deserialize_with = "device_number")]
    pub minor: Option<u32>,
}

impl Device {
    /// Major and minor of a character device, the only kind a GPU driver's nodes are.
    pub fn char_numbers(&self) -> Option<(u32, u32)> {
        matches!(self.kind.as_str(), "c" | "u").then_some(())?;
        Some((self.major?, self.minor?))
    }
}

/// A device number as runtime-spec writes it (int64), kept only when it fits a Linux major or
/// minor; anything else (a string, a float, out of range) reads as absent rather than failing
/// the whole config.
fn device_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = <serde_json::Value as serde::Deserialize>::deserialize(d)?;
    Ok(v.as_u64().and_then(|n| u32::try_from(n).ok()))
}

/// One entry of `mounts` in `config.json`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Mount {
    /// Where it lands in the container.
    #[serde(default)]
    pub destination: String,
    /// What is mounted.
    #[serde(default)]
    pub source: String,
}

/// `process` of `config.json`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Process {
    /// `KEY=VALUE` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// Capabilities, kept as JSON: runtime-spec 1.0.0-rc1 to rc4 wrote a list, later versions
    /// an object of sets; either must load.
    #[serde(default)]
    pub capabilities: Option<serde_json::Value>,
}

/// `root` of `config.json`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Root {
    /// Path of the rootfs, absolute or relative to the bundle.
    pub path: PathBuf,
}

impl Config {
    /// Loads `<bundle>/config.json`: not through a symlink, a regular file, capped.
    pub fn load(bundle: &Path) -> Result<Self, OciError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = bundle.join("config.json");
        let err = |source| OciError::Config { path: path.clone(), source };
        let file =
            std::fs::OpenOptions::new().read(true).custom_flags(libc_flags()).open(&path).map_err(err)?;
        if !file.metadata().map_err(err)?.is_file() {
            return Err(err(std::io::Error::other("not a regular file")));
        }
        let bytes = read_capped(file, MAX_CONFIG_BYTES, "config.json").map_err(|e| match e {
            Capped::Io(e) => err(e),
            Capped::TooLarge => OciError::TooLarge { what: "config.json", cap: MAX_CONFIG_BYTES },
        })?;
        serde_json::from_slice(&bytes).map_err(|source| OciError::Json { what: "config.json", source })
    }

    /// The process environment.
    pub fn env(&self) -> impl Iterator<Item = &str> {
        self.process.iter().flat_map(|p| p.env.iter().map(String::as_str))
    }

    /// Whether the container is privileged as NVIDIA's hook reads it (`IsPrivileged`):
    /// `CAP_SYS_ADMIN` in the bounding set (or in the flat list of pre-1.0 specs).
    pub fn privileged(&self) -> bool {
        let caps = self.process.as_ref().and_then(|p| p.capabilities.as_ref());
        let set = caps.and_then(|c| if c.is_array() { Some(c) } else { c.get("bounding") });
        set.and_then(serde_json::Value::as_array)
            .is_some_and(|l| l.iter().any(|c| c.as_str() == Some("CAP_SYS_ADMIN")))
    }

    /// The devices a device plugin passed as volume mounts: a mount of `/dev/null` at
    /// `/var/run/nvidia-container-devices/<id>` per device (nvidia-container-toolkit
    /// `visibleDevicesFromMounts`): `imex/…` entries are IMEX channels, not devices;
    /// `cdi/<vendor>/<class>/<device>` is the CDI device `<vendor>/<class>=<device>`.
    pub fn volume_mount_devices(&self) -> Vec<String> {
        let root = crate::contract::image::VOLUME_MOUNT_DEVICES_ROOT;
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for m in self.mounts.iter().filter(|m| clean(&m.source) == "/dev/null") {
            let dest = clean(&m.destination);
            if seen.contains(&dest) {
                continue;
            }
            let Some(id) = dest.strip_prefix(root).map(|d| d.trim_matches('/').to_owned()) else { continue };
            seen.push(dest.clone());
            if id.is_empty() || id.starts_with("imex/") {
                continue;
            }
            match id.strip_prefix("cdi/") {
                Some(name) if name.contains('=') => out.push(name.to_owned()),
                Some(name) => {
                    let parts: Vec<&str> = name.splitn(3, '/').collect();
                    if let [vendor, class, device] = parts[..] {
                        out.push(format!("{vendor}/{class}={device}"));
                    }
                }
                None => out.push(id),
            }
        }
        out
    }

    /// `linux.devices`.
    pub fn devices(&self) -> &[Device] {
        self.linux.as_ref().map_or(&[], |l| l.devices.as_slice())
    }

    /// The rootfs directory, resolved against the bundle.
    pub fn rootfs(&self, bundle: &Path) -> Option<PathBuf> {
        self.root.as_ref().map(|r| bundle.join(&r.path))
    }
}

/// A path with repeated and trailing slashes and `.` components removed (enough of Go's
/// `filepath.Clean` for comparing mount paths).
fn clean(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    format!("{}{}", if path.starts_with('/') { "/" } else { "" }, parts.join("/"))
}

/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, for std's `custom_flags`.
fn libc_flags() -> i32 {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
    i32::try_from(flags.bits()).unwrap_or(0)
}

enum Capped {
    Io(std::io::Error),
    TooLarge,
}

fn read_capped(input: impl Read, cap: u64, _what: &str) -> Result<Vec<u8>, Capped> {
    let mut buf = Vec::new();
    input.take(cap + 1).read_to_end(&mut buf).map_err(Capped::Io)?;
    if buf.len() as u64 > cap {
        return Err(Capped::TooLarge);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_with_bundle_or_legacy_bundle_path() {
        let s = State::read(
            &br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,"bundle":"/b"}"#[..],
        )
        .unwrap();
        assert_eq!(s.bundle().unwrap(), Path::new("/b"));
        let s = State::read(&br#"{"id":"c1","bundlePath":"/old"}"#[..]).unwrap();
        assert_eq!(s.bundle().unwrap(), Path::new("/old"));
        assert!(matches!(State::read(&br#"{"id":"c1"}"#[..]).unwrap().bundle(), Err(OciError::NoBundle)));
    }

    #[test]
    fn garbage_and_oversized_input_fail_cleanly() {
        assert!(matches!(State::read(&b"\xff\x00garbage"[..]), Err(OciError::Json { .. })));
        assert!(matches!(State::read(&b""[..]), Err(OciError::Json { .. })));
        assert!(matches!(State::read(&br#"{"bundle": 5}"#[..]), Err(OciError::Json { .. })));
        let huge = vec![b' '; usize::try_from(MAX_STATE_BYTES).unwrap() + 1];
        assert!(matches!(State::read(&huge[..]), Err(OciError::TooLarge { .. })));
    }

    #[test]
    fn privilege_and_volume_mount_devices() {
        let config = |json: &str| serde_json::from_str::<Config>(json).unwrap();
        let c = config(r#"{"process":{"capabilities":{"bounding":["CAP_SYS_ADMIN"]}}}"#);
        assert!(c.privileged());
        // runtime-spec 1.0.0-rc1..rc4 wrote a flat list.
        assert!(config(r#"{"process":{"capabilities":["CAP_CHOWN","CAP_SYS_ADMIN"]}}"#).privileged());
        assert!(!config(r#"{"process":{"capabilities":{"effective":["CAP_SYS_ADMIN"]}}}"#).privileged());
        assert!(!config("{}").privileged());
        let c = config(
            r#"{"mounts":[
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices/GPU0"},
                {"source":"/dev//null","destination":"/var/run/nvidia-container-devices//GPU1-MIG0/0/1/"},
                {"source":"/not/dev/null","destination":"/var/run/nvidia-container-devices/GPU2"},
                {"source":"/dev/null","destination":"/other/prefix/GPU3"},
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices"},
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices/imex/0"},
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"},
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=all"},
                {"source":"/dev/null","destination":"/var/run/nvidia-container-devices/GPU0"}
            ]}"#,
        );
        assert_eq!(
            c.volume_mount_devices(),
            ["GPU0", "GPU1-MIG0/0/1", "nvidia.com/gpu=0", "nvidia.com/gpu=all"]
        );
    }

    #[test]
    fn linux_devices_are_read_leniently() {
        let c: Config = serde_json::from_str(
            r#"{"linux":{"devices":[
                {"path":"/dev/nvidia0","type":"c","major":195,"minor":0,"fileMode":438},
                {"path":"/dev/x","type":"b","major":8,"minor":0},
                {"path":"/dev/odd","type":"c","major":-1,"minor":"3"},
                {"path":"/dev/u","type":"u","major":10,"minor":200}
            ]}}"#,
        )
        .unwrap();
        let numbers: Vec<_> = c.devices().iter().map(Device::char_numbers).collect();
        assert_eq!(numbers, [Some((195, 0)), None, None, Some((10, 200))]);
        assert!(serde_json::from_str::<Config>("{}").unwrap().devices().is_empty());
    }

    #[test]
    fn config_is_read_without_following_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ociVersion":"1.0.2","process":{"env":["A=1","NVIDIA_VISIBLE_DEVICES=all"]},"root":{"path":"rootfs"},"annotations":{"k":"v"}}"#,
        )
        .unwrap();
        let c = Config::load(dir.path()).unwrap();
        assert_eq!(c.env().collect::<Vec<_>>(), ["A=1", "NVIDIA_VISIBLE_DEVICES=all"]);
        assert_eq!(c.rootfs(dir.path()).unwrap(), dir.path().join("rootfs"));
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join("config.json"), other.path().join("config.json")).unwrap();
        assert!(matches!(Config::load(other.path()), Err(OciError::Config { .. })));
    }
}
