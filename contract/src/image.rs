//! What an image carries for the host, and how the hook reads it back.
//!
//! - `NVIDIA_REQUIRE_CUDA` in the image env, so NVIDIA's own toolkit checks our images too.
//! - `STACKBUILD_REQUIRE_<NAME>` env variables, same syntax, for everything else (driver range,
//!   kernel deny list, modules, GPU count, arch range, platform:
//!   `STACKBUILD_REQUIRE_PLATFORM=platform=wsl2`).
//! - Labels under `io.stackbuild.` and annotations `io.stackbuild.require.<name>` (added per pod).
//! - `/etc/stackbuild/stack.json`: the stack's components and the derived requirements with
//!   their reasons ([`StackManifest`]).

use std::collections::BTreeMap;

use super::require::{RequireError, RequirementSet};

/// Prefix of NVIDIA's requirement variables (`NVIDIA_REQUIRE_CUDA`, ...).
pub const NVIDIA_REQUIRE_PREFIX: &str = "NVIDIA_REQUIRE_";
/// `NVIDIA_REQUIRE_JETPACK*` hold Jetson mount settings (`csv-mounts=all`), not requirements.
pub const NVIDIA_REQUIRE_JETPACK_PREFIX: &str = "NVIDIA_REQUIRE_JETPACK";
/// Prefix of our requirement variables.
pub const STACKBUILD_REQUIRE_PREFIX: &str = "STACKBUILD_REQUIRE_";
/// Annotation prefix for requirements added at run time (Kubernetes pod annotations).
pub const REQUIRE_ANNOTATION_PREFIX: &str = "io.stackbuild.require.";
/// Label prefix of everything stackbuild writes into an image config.
pub const LABEL_PREFIX: &str = "io.stackbuild.";
/// Where the stack description lives inside the image.
pub const STACK_JSON_PATH: &str = "etc/stackbuild/stack.json";
/// `NVIDIA_DISABLE_REQUIRE=true` skips every requirement check ([`disables_requirements`]).
pub const DISABLE_REQUIRE: &str = "NVIDIA_DISABLE_REQUIRE";
/// Which GPUs the container gets.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// Where device plugins that pass devices as volume mounts put them: a mount of `/dev/null` at
/// `<root>/<device id>` per device, with `NVIDIA_VISIBLE_DEVICES=<root>` (nvidia-container-toolkit
/// `cmd/nvidia-container-runtime-hook/container_config.go`, `deviceListAsVolumeMountsRoot`).
pub const VOLUME_MOUNT_DEVICES_ROOT: &str = "/var/run/nvidia-container-devices";

/// The GPUs a container asks for, from `NVIDIA_VISIBLE_DEVICES` (or device volume mounts).
///
/// NVIDIA's rules (nvidia-container-toolkit `internal/config/image/cuda_image.go` and
/// `devices.go`; libnvidia-container `src/cli/common.c`): the value is split on commas, entries
/// trimmed and empty ones dropped; `void` anywhere wins over `none`, which wins over `all`.
/// `all` is matched case-insensitively (the toolkit passes `ALL` on and the CLI selects all
/// devices with it); `none` and `void` only in lower case.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "devices")]
pub enum DeviceSelection {
    /// Not a GPU container: unset (on an image that is not a legacy CUDA image), empty, or
    /// `void` anywhere in the list. Nothing is checked.
    None,
    /// `none`: no GPU device, but NVIDIA still mounts the driver's libraries, so the `cuda` and
    /// `driver` requirements are checked (and `arch`/`brand` hold: there is no device to compare).
    NoDevices,
    /// `all` (in any case), alone or anywhere in the list.
    All,
    /// Device identifiers as given, CDI names reduced to their device name: GPU indexes (`0`),
    /// GPU UUIDs (`GPU-…`), PCI bus ids, MIG device UUIDs (`MIG-…`) and MIG indexes
    /// (`<gpu>:<mig>`, `0:0`).
    List(Vec<String>),
}

/// One entry of a device list.
enum Entry<'a> {
    All,
    Device(&'a str),
    /// A CDI name of a kind that is not a GPU (`nvidia.com/imex-channel=0`).
    NotGpu,
}

/// Reads a CDI-qualified name (`nvidia.com/gpu=0`, `runtime.nvidia.com/gpu=all`,
/// `nvidia.com/mig=0:1`, the names `nvidia-ctk cdi generate` and the toolkit's `jit-cdi` mode
/// give GPUs) as its device name; anything else as it is.
fn entry(e: &str) -> Entry<'_> {
    let device = match e.split_once('=') {
        Some((kind, name)) if kind.contains('/') => {
            let (vendor, class) = kind.split_once('/').unwrap_or((kind, ""));
            let nvidia = vendor == "nvidia.com" || vendor.ends_with(".nvidia.com");
            if !nvidia || !matches!(class, "gpu" | "mig") {
                return Entry::NotGpu;
            }
            name
        }
        _ => e,
    };
    if device.eq_ignore_ascii_case("all") {
        Entry::All
    } else {
        Entry::Device(device)
    }
}

impl DeviceSelection {
    /// Parses the variable's value (`None` when unset).
    pub fn parse(value: Option<&str>) -> Self {
        let Some(v) = value else { return Self::None };
        let entries: Vec<&str> = v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if entries.is_empty() || entries.contains(&"void") {
            return Self::None;
        }
        if entries.contains(&"none") {
            return Self::NoDevices;
        }
        let mut ids = Vec::new();
        for e in entries {
            match entry(e) {
                Entry::All => return Self::All,
                Entry::Device(d) => ids.push(d.to_owned()),
                Entry::NotGpu => {}
            }
        }
        if ids.is_empty() {
            Self::NoDevices
        } else {
            Self::List(ids)
        }
    }

    /// The GPUs the CDI device names `names` select (`nvidia.com/gpu=0`, `nvidia.com/mig=0:1`,
    /// as the Kubernetes device plugin's `cdi-annotations` strategy writes them), `None` when
    /// none of them is an NVIDIA GPU or MIG device: a CDI name of another kind (a NIC, an IMEX
    /// channel, a DRA claim's opaque device) asks for no GPU.
    pub fn from_cdi_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let gpus: Vec<&str> = names
            .into_iter()
            .map(str::trim)
            .filter(|n| n.contains('/') && !matches!(entry(n), Entry::NotGpu))
            .collect();
        if gpus.is_empty() {
            Self::None
        } else {
            Self::parse(Some(&gpus.join(",")))
        }
    }

    /// Both selections together: `all` in either wins, then the devices of both in order
    /// (without repeats), then `none`.
    #[must_use]
    pub fn union(self, other: Self) -> Self {
        match (self, other) {
            (Self::All, _) | (_, Self::All) => Self::All,
            (Self::List(mut a), Self::List(b)) => {
                for id in b {
                    if !a.contains(&id) {
                        a.push(id);
                    }
                }
                Self::List(a)
            }
            (l @ Self::List(_), _) | (_, l @ Self::List(_)) => l,
            (Self::NoDevices, _) | (_, Self::NoDevices) => Self::NoDevices,
            (Self::None, Self::None) => Self::None,
        }
    }

    /// Whether this is a GPU container, the condition for any check: some GPU is requested,
    /// or `none` (the driver without devices).
    pub fn any(&self) -> bool {
        !matches!(self, Self::None) && !matches!(self, Self::List(l) if l.is_empty())
    }
}

/// `NVIDIA_DISABLE_REQUIRE`'s truth, as Go's `strconv.ParseBool` reads it (the toolkit's
/// `HasDisableRequire`): exactly `1`, `t`, `T`, `TRUE`, `true` or `True`; anything else
/// (`yes`, `on`, ` true`, `TrUe`) leaves the checks on.
pub fn disables_requirements(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// `CUDA_VERSION` of a legacy image as NVIDIA reads it (toolkit `parseMajorMinorVersion`, a
/// semantic version as Masterminds' `semver.NewVersion` reads one): an optional leading `v`, then
/// `major[.minor[.patch]]` (numbers without leading zeros) with an optional pre-release and build
/// suffix, major and minor fitting in 32 bits; `8` reads as `8.0`. `None` for anything else,
/// which NVIDIA refuses.
pub fn legacy_cuda_version(value: &str) -> Option<(u32, u32)> {
    let v = value.strip_prefix('v').unwrap_or(value);
    let (core, suffix) = match v.find(['-', '+']) {
        Some(i) => (&v[..i], Some(&v[i..])),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let number =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && (p == "0" || !p.starts_with('0'));
    if parts.len() > 3 || !parts.iter().all(|p| number(p)) {
        return None;
    }
    if let Some(suffix) = suffix {
        if !semver_suffix_ok(suffix) {
            return None;
        }
    }
    let major = parts[0].parse().ok()?;
    let minor = parts.get(1).map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// `-pre.release+build` of a semantic version (semver.org items 9 and 10).
fn semver_suffix_ok(suffix: &str) -> bool {
    let (pre, build) = match suffix.find('+') {
        Some(i) => (&suffix[..i], Some(&suffix[i + 1..])),
        None => (suffix, None),
    };
    let idents = |s: &str, numeric_rule: bool| {
        s.split('.').all(|id| {
            !id.is_empty()
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !(numeric_rule
                    && id.len() > 1
                    && id.starts_with('0')
                    && id.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    let pre_ok = pre.is_empty() || pre.strip_prefix('-').is_some_and(|p| idents(p, true));
    pre_ok && build.is_none_or(|b| idents(b, false))
}

/// A requirement variable or annotation that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {error}")]
pub struct ContractError {
    /// The variable or annotation.
    pub source_name: String,
    /// Why it did not parse.
    #[source]
    pub error: RequireError,
}

/// Why the hook refuses a container before checking the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// A requirement does not parse.
    #[error("the image's requirements do not parse: {0}")]
    Contract(#[from] ContractError),
    /// `NVIDIA_MIG_CONFIG_DEVICES` or `NVIDIA_MIG_MONITOR_DEVICES` in a container that is not
    /// privileged: NVIDIA's hook refuses it ("cannot set `MIG_CONFIG_DEVICES` in non privileged
    /// container", `getNvidiaConfig`), since MIG configuration and monitoring act on the whole GPU.
    #[error(
        "{0} is set but the container is not privileged (no CAP_SYS_ADMIN in its bounding set): only a \
         privileged container may configure or monitor MIG, as NVIDIA's hook enforces"
    )]
    MigUnprivileged(&'static str),
    /// `NVIDIA_DRIVER_CAPABILITIES` names a capability NVIDIA's hook does not know: it refuses
    /// the container ("unsupported capabilities found", `getDriverCapabilities`).
    #[error(
        "NVIDIA_DRIVER_CAPABILITIES={0:?} names an unsupported capability (supported: all, compat32, compute, \
         display, graphics, ngx, utility, video)"
    )]
    UnsupportedCapability(String),
}

/// The driver capabilities NVIDIA's hook supports by default (`SupportedDriverCapabilities`).
pub const DRIVER_CAPABILITIES: [&str; 7] =
    ["compat32", "compute", "display", "graphics", "ngx", "utility", "video"];

/// Whether NVIDIA's hook accepts `NVIDIA_DRIVER_CAPABILITIES=value`: empty, containing `all`, or
/// only supported capabilities (comma-separated, trimmed, empty entries skipped).
pub fn driver_capabilities_supported(value: &str) -> bool {
    let caps: Vec<&str> = value.split(',').map(str::trim).filter(|c| !c.is_empty()).collect();
    caps.contains(&"all") || caps.iter().all(|c| DRIVER_CAPABILITIES.contains(c))
}

/// Everything a container's configuration says about its GPU needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequest {
    /// Which GPUs it gets.
    pub selection: DeviceSelection,
    /// What the host must satisfy.
    pub requirements: RequirementSet,
    /// `NVIDIA_DISABLE_REQUIRE` was set to a true value.
    pub disabled: bool,
}

/// The environment as a map; when a variable appears twice the last one wins, as in `execve`'s
/// environment.
fn env_map<'a>(env: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'a str, &'a str> {
    let mut vars = BTreeMap::new();
    for entry in env {
        if let Some((k, v)) = entry.split_once('=') {
            vars.insert(k, v);
        }
    }
    vars
}

/// A legacy image: `CUDA_VERSION` set and `NVIDIA_REQUIRE_CUDA` unset or empty (toolkit
/// `IsLegacy`). It gets every GPU when `NVIDIA_VISIBLE_DEVICES` is unset, and `cuda>=<M.m>`.
fn is_legacy(vars: &BTreeMap<&str, &str>) -> bool {
    vars.get("CUDA_VERSION").is_some_and(|v| !v.is_empty())
        && vars.get("NVIDIA_REQUIRE_CUDA").is_none_or(|v| v.is_empty())
}

/// The selection. Devices passed as volume mounts are used when `NVIDIA_VISIBLE_DEVICES` points
/// at them (names the mounts' root, as device plugins in that mode set it); NVIDIA's hook reads
/// them only when configured to (`accept-nvidia-visible-devices-as-volume-mounts`), and without
/// that setting the root path itself would be an unknown device.
fn selection_of(vars: &BTreeMap<&str, &str>, mount_devices: &[String]) -> DeviceSelection {
    let points_at_mounts = vars
        .get(VISIBLE_DEVICES)
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with(VOLUME_MOUNT_DEVICES_ROOT)));
    if points_at_mounts && !mount_devices.is_empty() {
        return DeviceSelection::parse(Some(&mount_devices.join(",")));
    }
    match vars.get(VISIBLE_DEVICES) {
        None if is_legacy(vars) => DeviceSelection::All,
        v => DeviceSelection::parse(v.copied()),
    }
}

/// Every requirement: `NVIDIA_REQUIRE_*` but `NVIDIA_REQUIRE_JETPACK*` (Jetson mount settings,
/// not requirements: toolkit `GetRequirements`), `STACKBUILD_REQUIRE_*`, the legacy
/// `CUDA_VERSION`, then the annotations. Blank values are skipped.
fn requirements_of(
    vars: &BTreeMap<&str, &str>,
    annotations: &BTreeMap<String, String>,
) -> Result<RequirementSet, ContractError> {
    let mut requirements = RequirementSet::default();
    let mut push = |name: &str, value: &str| {
        if value.trim().is_empty() {
            return Ok(());
        }
        requirements.push(name, value).map_err(|error| ContractError { source_name: name.to_owned(), error })
    };
    for (k, v) in vars {
        let nvidia = k.starts_with(NVIDIA_REQUIRE_PREFIX) && !k.starts_with(NVIDIA_REQUIRE_JETPACK_PREFIX);
        if nvidia || k.starts_with(STACKBUILD_REQUIRE_PREFIX) {
            push(k, v)?;
        }
    }
    if is_legacy(vars) {
        let cuda = vars.get("CUDA_VERSION").copied().unwrap_or_default();
        let Some((major, minor)) = legacy_cuda_version(cuda) else {
            return Err(ContractError {
                source_name: "CUDA_VERSION".to_owned(),
                error: RequireError {
                    input: cuda.chars().take(200).collect(),
                    column: 1,
                    message: "not a CUDA version NVIDIA reads (major[.minor[.patch]], optionally after a v)"
                        .to_owned(),
                },
            });
        };
        push("CUDA_VERSION", &format!("cuda>={major}.{minor}"))?;
    }
    for (k, v) in annotations {
        if k.starts_with(REQUIRE_ANNOTATION_PREFIX) {
            push(k, v)?;
        }
    }
    Ok(requirements)
}

impl ContainerRequest {
    /// Everything an image's configuration says, whichever GPUs it will get: for placement
    /// (`stackbuild affinity`), where a device plugin picks the GPUs at run time. Requirements are
    /// read with NVIDIA's rules; with `NVIDIA_DISABLE_REQUIRE` none is read.
    pub fn from_env<'a>(
        env: impl IntoIterator<Item = &'a str>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, ContractError> {
        let vars = env_map(env);
        let disabled = vars.get(DISABLE_REQUIRE).is_some_and(|v| disables_requirements(v));
        let requirements =
            if disabled { RequirementSet::default() } else { requirements_of(&vars, annotations)? };
        Ok(Self { selection: selection_of(&vars, &[]), requirements, disabled })
    }

    /// What the hook checks at a container's start, in the order NVIDIA's hook decides
    /// (`getNvidiaConfig`): first whether a GPU is requested (device volume mounts, then
    /// `NVIDIA_VISIBLE_DEVICES`, then the legacy default), and not a GPU container means nothing
    /// more is read; then the MIG configuration variables and the driver capabilities, which
    /// NVIDIA refuses whatever `NVIDIA_DISABLE_REQUIRE` says; then `NVIDIA_DISABLE_REQUIRE`; only
    /// then are the requirements parsed, so a malformed one blocks only a GPU container that has
    /// checks on.
    ///
    /// `privileged`: the container has `CAP_SYS_ADMIN` in its bounding set (NVIDIA's
    /// `IsPrivileged`), which `NVIDIA_MIG_CONFIG_DEVICES` and `NVIDIA_MIG_MONITOR_DEVICES` need.
    ///
    /// `given`: the GPUs the container was handed otherwise (device nodes, CDI annotations, read
    /// by the hook from the final `config.json`), added to what the environment selects.
    pub fn for_start<'a>(
        env: impl IntoIterator<Item = &'a str>,
        annotations: &BTreeMap<String, String>,
        mount_devices: &[String],
        given: DeviceSelection,
        privileged: bool,
    ) -> Result<Self, StartError> {
        let vars = env_map(env);
        let selection = selection_of(&vars, mount_devices).union(given);
        let mut request = Self { selection, requirements: RequirementSet::default(), disabled: false };
        if !request.selection.any() {
            return Ok(request);
        }
        for var in ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"] {
            if !privileged && vars.get(var).is_some_and(|v| !v.is_empty()) {
                return Err(StartError::MigUnprivileged(var));
            }
        }
        if let Some(caps) =
            vars.get("NVIDIA_DRIVER_CAPABILITIES").filter(|c| !driver_capabilities_supported(c))
        {
            return Err(StartError::UnsupportedCapability((*caps).to_owned()));
        }
        request.disabled = vars.get(DISABLE_REQUIRE).is_some_and(|v| disables_requirements(v));
        if !request.disabled {
            request.requirements = requirements_of(&vars, annotations)?;
        }
        Ok(request)
    }
}

/// `/etc/stackbuild/stack.json`: what the stack is made of and what it needs from the host.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct StackManifest {
    /// Format version of this file; 1.
    pub schema: u32,
    /// Image name and tag.
    pub image: String,
    /// Target platform (`linux/amd64`).
    pub platform: String,
    /// Every component with its version, origin and hash.
    pub components: Vec<Component>,
    /// Requirements on the host, each with the reasons it was derived.
    pub requirements: Vec<DerivedRequirement>,
}

/// One component of the stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Component {
    /// What kind: `base`, `deb`, `wheel`, `source`, `patch`.
    pub kind: String,
    /// Name (normalized for Python packages).
    pub name: String,
    /// Version, commit or empty.
    pub version: String,
    /// Where it came from, without a registry host name: `pypi`, `debian:bookworm`, a git URL.
    pub source: String,
    /// sha256 of the artifact, when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

/// One requirement variable and why it is there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DerivedRequirement {
    /// The variable (`NVIDIA_REQUIRE_CUDA`, `STACKBUILD_REQUIRE_ARCH`).
    pub variable: String,
    /// Its value.
    pub expr: String,
    /// Why: "CUDA 12.1 libraries, minor-version compatibility".
    pub reasons: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_and_cdi_names() {
        use DeviceSelection as S;
        let l = |ids: &[&str]| S::List(ids.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(S::None.union(S::None), S::None);
        assert_eq!(S::None.union(S::NoDevices), S::NoDevices);
        assert_eq!(S::NoDevices.union(l(&["1"])), l(&["1"]));
        assert_eq!(l(&["0", "1"]).union(l(&["1", "2"])), l(&["0", "1", "2"]));
        assert_eq!(l(&["0"]).union(S::All), S::All);
        assert_eq!(S::from_cdi_names(["nvidia.com/gpu=0", " nvidia.com/mig=1:0"]), l(&["0", "1:0"]));
        assert_eq!(S::from_cdi_names(["vendor.com/net=eth0", "nvidia.com/imex-channel=0"]), S::None);
        assert_eq!(S::from_cdi_names(["k8s.gpu.nvidia.com/device=gpu-0"]), S::None);
        assert_eq!(S::from_cdi_names(["0", "all"]), S::None, "bare names are not CDI names");
        assert_eq!(S::from_cdi_names(["nvidia.com/gpu=all"]), S::All);
    }

    #[test]
    fn device_selection() {
        assert_eq!(DeviceSelection::parse(None), DeviceSelection::None);
        for void in ["", "void", " ", "0,void", ",", "none,void"] {
            assert!(!DeviceSelection::parse(Some(void)).any(), "{void:?}");
        }
        assert_eq!(DeviceSelection::parse(Some("none")), DeviceSelection::NoDevices);
        assert!(DeviceSelection::parse(Some("none")).any());
        assert_eq!(DeviceSelection::parse(Some("all")), DeviceSelection::All);
        assert_eq!(DeviceSelection::parse(Some("nvidia.com/gpu=1,ALL")), DeviceSelection::All);
        assert_eq!(DeviceSelection::parse(Some("nvidia.com/gpu=1")), DeviceSelection::List(vec!["1".into()]));
        assert_eq!(
            DeviceSelection::parse(Some("0, GPU-1234,")),
            DeviceSelection::List(vec!["0".into(), "GPU-1234".into()])
        );
        assert!(!DeviceSelection::parse(Some(",")).any());
    }

    #[test]
    fn gathers_env_and_annotations() {
        let ann = BTreeMap::from([
            ("io.stackbuild.require.pool".to_owned(), "gpus>=2".to_owned()),
            ("unrelated".to_owned(), "x".to_owned()),
        ]);
        let req = ContainerRequest::from_env(
            [
                "PATH=/usr/bin",
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_REQUIRE_CUDA=cuda>=12.1",
                "STACKBUILD_REQUIRE_KERNEL=kernel!=5.15.0-107-generic",
                "STACKBUILD_REQUIRE_EMPTY=",
            ],
            &ann,
        )
        .unwrap();
        let sources: Vec<_> = req.requirements.entries.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(
            sources,
            ["NVIDIA_REQUIRE_CUDA", "STACKBUILD_REQUIRE_KERNEL", "io.stackbuild.require.pool"]
        );
        assert_eq!(req.selection, DeviceSelection::All);
        assert!(!req.disabled);
    }

    #[test]
    fn platform_requirement_is_read_like_any_other() {
        use crate::require::{GpuFacts, HostFacts};
        let req = ContainerRequest::from_env(
            ["NVIDIA_VISIBLE_DEVICES=0", "STACKBUILD_REQUIRE_PLATFORM=platform=wsl2"],
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(req.requirements.entries[0].source, "STACKBUILD_REQUIRE_PLATFORM");
        let on = |platform: &str| HostFacts {
            platform: Some(platform.to_owned()),
            gpus: vec![GpuFacts::default()],
            ..HostFacts::default()
        };
        let failures = req.requirements.evaluate(&on("linux"));
        assert_eq!(failures[0].to_string(), "needs platform=wsl2; host has linux");
        assert!(req.requirements.evaluate(&on("wsl2")).is_empty());
    }

    #[test]
    fn cuda_version_implies_a_requirement() {
        let req = ContainerRequest::from_env(["CUDA_VERSION=11.8.0"], &BTreeMap::new()).unwrap();
        assert_eq!(req.requirements.entries[0].expr.to_string(), "cuda>=11.8");
        assert_eq!(req.selection, DeviceSelection::All, "a legacy image gets every GPU");
        let req = ContainerRequest::from_env(
            ["CUDA_VERSION=11.8.0", "NVIDIA_DISABLE_REQUIRE=true"],
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(req.disabled && req.requirements.is_empty());
    }

    #[test]
    fn legacy_cuda_versions() {
        for (v, want) in [("8", Some((8, 0))), ("v11.6", Some((11, 6))), ("9.0.116-rc1+b2", Some((9, 0)))] {
            assert_eq!(legacy_cuda_version(v), want, "{v}");
        }
        assert_eq!(legacy_cuda_version("12.4-rc1"), Some((12, 4)));
        for v in ["", "v", "vv8", "08", "9.0-", "1.2.3.4", "9.4294967296", "9.0.01"] {
            assert_eq!(legacy_cuda_version(v), None, "{v}");
        }
    }

    #[test]
    fn bad_requirement_names_its_variable() {
        let err = ContainerRequest::from_env(["STACKBUILD_REQUIRE_DRIVER=driver>>5"], &BTreeMap::new())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"STACKBUILD_REQUIRE_DRIVER: invalid requirement "driver>>5" at column 7: invalid operator ">>" after "driver": expected one of = != < <= > >="#
        );
    }
}
