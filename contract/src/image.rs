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
/// Prefix of our requirement variables.
pub const STACKBUILD_REQUIRE_PREFIX: &str = "STACKBUILD_REQUIRE_";
/// Annotation prefix for requirements added at run time (Kubernetes pod annotations).
pub const REQUIRE_ANNOTATION_PREFIX: &str = "io.stackbuild.require.";
/// Label prefix of everything stackbuild writes into an image config.
pub const LABEL_PREFIX: &str = "io.stackbuild.";
/// Where the stack description lives inside the image.
pub const STACK_JSON_PATH: &str = "etc/stackbuild/stack.json";
/// `NVIDIA_DISABLE_REQUIRE=true` skips every requirement check.
pub const DISABLE_REQUIRE: &str = "NVIDIA_DISABLE_REQUIRE";
/// Which GPUs the container gets.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// The GPUs a container asks for, from `NVIDIA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "devices")]
pub enum DeviceSelection {
    /// Unset, empty, `void` or `none`: no GPU.
    None,
    /// `all`.
    All,
    /// Indexes (`0,1`), UUIDs (`GPU-...`) or MIG names, as given.
    List(Vec<String>),
}

impl DeviceSelection {
    /// Parses the variable's value (`None` when unset).
    pub fn parse(value: Option<&str>) -> Self {
        let Some(v) = value.map(str::trim) else { return Self::None };
        match v {
            "" | "void" | "none" => Self::None,
            "all" => Self::All,
            list => Self::List(
                list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            ),
        }
    }

    /// Whether any GPU is requested.
    pub fn any(&self) -> bool {
        !matches!(self, Self::None) && !matches!(self, Self::List(l) if l.is_empty())
    }
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

impl ContainerRequest {
    /// Gathers the request from `KEY=VALUE` environment entries and annotations.
    ///
    /// An image with `CUDA_VERSION` but no `NVIDIA_REQUIRE_CUDA` is treated as
    /// `cuda>=<major.minor>`, as NVIDIA's toolkit does (`internal/config/image/cuda_image.go`).
    /// When a variable appears twice, the last one wins, as in `execve`'s environment.
    pub fn from_env<'a>(
        env: impl IntoIterator<Item = &'a str>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Self, ContractError> {
        let mut vars: BTreeMap<&str, &str> = BTreeMap::new();
        for entry in env {
            if let Some((k, v)) = entry.split_once('=') {
                vars.insert(k, v);
            }
        }
        let mut requirements = RequirementSet::default();
        let mut push = |name: &str, value: &str| {
            if value.trim().is_empty() {
                return Ok(());
            }
            requirements
                .push(name, value)
                .map_err(|error| ContractError { source_name: name.to_owned(), error })
        };
        for (k, v) in &vars {
            if k.starts_with(NVIDIA_REQUIRE_PREFIX) || k.starts_with(STACKBUILD_REQUIRE_PREFIX) {
                push(k, v)?;
            }
        }
        if !vars.contains_key("NVIDIA_REQUIRE_CUDA") {
            if let Some(cuda) = vars.get("CUDA_VERSION") {
                let mut parts = cuda.trim().split('.');
                if let (Some(major), Some(minor)) = (parts.next(), parts.next()) {
                    push("CUDA_VERSION", &format!("cuda>={major}.{minor}"))?;
                }
            }
        }
        for (k, v) in annotations {
            if k.starts_with(REQUIRE_ANNOTATION_PREFIX) {
                push(k, v)?;
            }
        }
        let disabled = vars
            .get(DISABLE_REQUIRE)
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"));
        Ok(Self {
            selection: DeviceSelection::parse(vars.get(VISIBLE_DEVICES).copied()),
            requirements,
            disabled,
        })
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
    fn device_selection() {
        assert_eq!(DeviceSelection::parse(None), DeviceSelection::None);
        for none in ["", "void", "none", " "] {
            assert!(!DeviceSelection::parse(Some(none)).any(), "{none:?}");
        }
        assert_eq!(DeviceSelection::parse(Some("all")), DeviceSelection::All);
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
        let req = ContainerRequest::from_env(
            ["CUDA_VERSION=11.8.0", "NVIDIA_DISABLE_REQUIRE=true"],
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(req.requirements.entries[0].expr.to_string(), "cuda>=11.8");
        assert!(req.disabled);
    }

    #[test]
    fn bad_requirement_names_its_variable() {
        let err = ContainerRequest::from_env(["STACKBUILD_REQUIRE_DRIVER=driver>>5"], &BTreeMap::new())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"STACKBUILD_REQUIRE_DRIVER: invalid requirement "driver>>5" at column 8: invalid driver version ">5": expected numbers separated by dots"#
        );
    }
}
