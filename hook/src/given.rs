//! What a container was given, read from its final `config.json` rather than its environment:
//! GPU device nodes (`linux.devices`), the Kubernetes device plugin's CDI annotations and the
//! driver libraries bound in.
//!
//! Under CDI (NVIDIA's generated specs, the toolkit's jit-CDI mode that is the nvidia runtime's
//! default since 1.18.0, the GPU Operator since 25.10, Podman's `--device nvidia.com/gpu=0`,
//! Kubernetes DRA) the environment says `NVIDIA_VISIBLE_DEVICES=void`, which NVIDIA's generated
//! specs set so that the legacy hook "makes no additional modifications" (toolkit CHANGELOG),
//! and the GPUs arrive only as device nodes plus read-only bind mounts of the driver's libraries
//! (CDI `SPEC.md`, `pkg/cdi/container-edits.go`: each `deviceNodes` entry becomes a
//! `linux.devices` entry; no annotation records that CDI was applied). NVIDIA's hook then checks
//! no requirement (NVIDIA/nvidia-container-toolkit issue 1470), so these are read here.
//!
//! A node is identified by its major:minor, never by its path inside the container, which a
//! spec may name anything: the `nvidia` major (named `nvidia-frontend` before driver 550.40,
//! `nvidia` and `nvidiactl` after) with minor 255 is the control device and 254 `nvidia-modeset`
//! (libnvidia-container `nvc_internal.h`: `NV_CTL_DEVICE_MINOR`, `NV_MODESET_DEVICE_MINOR`),
//! any other minor the GPU whose `Device Minor` it is; `nvidia-uvm` (dynamic major, minor 0 and
//! 1 for `-tools`); `nvidia-caps` minors are the MIG capabilities the driver lists in
//! `proc/driver/nvidia/capabilities/**/access` (`DeviceFileMinor`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::contract::image::DeviceSelection;
use crate::contract::version::DriverVersion;
use crate::oci::Config;
use crate::probe::{HostProbe, NodeState, INTEGRATED_NODES};

/// `NV_CTL_DEVICE_MINOR`.
const CTL_MINOR: u32 = 255;
/// `NV_MODESET_DEVICE_MINOR`.
const MODESET_MINOR: u32 = 254;
/// The DRM major (`/dev/dri/card*`, `renderD*`), which NVIDIA's generated specs hand out with a
/// display-capable GPU: not a sign of a privileged container.
const DRM_MAJOR: u32 = 226;
/// Where the Kubernetes device plugin's `cdi-annotations` strategy names a container's CDI
/// devices (`cdi.k8s.io/nvidia-device-plugin_<id>` = `nvidia.com/gpu=<id>`,
/// NVIDIA/k8s-device-plugin `internal/plugin/server.go`; the CDI annotation format of
/// `pkg/cdi/annotations.go`).
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";
/// Most devices and mounts looked at: a privileged container lists every host device.
const MAX_ENTRIES: usize = 4096;

/// What an NVIDIA device node is, by its numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum Role {
    /// `/dev/nvidia<minor>`: a whole GPU.
    Gpu {
        /// The GPU's `Device Minor`.
        minor: u32,
    },
    /// `/dev/nvidiactl`.
    Control,
    /// `/dev/nvidia-modeset`.
    Modeset,
    /// `/dev/nvidia-uvm` or `/dev/nvidia-uvm-tools`.
    Uvm,
    /// `/dev/nvidia-caps/nvidia-cap<minor>`: a MIG capability.
    Capability {
        /// Its minor.
        minor: u32,
    },
    /// A node of another NVIDIA major (`nvidia-nvswitch`, `nvidia-caps-imex-channels`).
    OtherNvidia,
}

/// One NVIDIA device node the container was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// Its path in the container (for messages only).
    pub path: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// What its numbers make it.
    #[serde(flatten)]
    pub role: Role,
}

impl Node {
    /// `/dev/nvidia0 (195:0)`.
    pub fn describe(&self) -> String {
        format!("{} ({}:{})", self.path, self.major, self.minor)
    }
}

/// A driver library bound into the container (a CDI spec's `mounts`, the toolkit's own mounts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Library {
    /// Host path.
    pub source: String,
    /// Path in the container.
    pub destination: String,
    /// The driver version in its file name (`libcuda.so.550.54.14` -> `550.54.14`).
    pub version: DriverVersion,
}

/// Everything the container was given that tells which GPUs and which driver it gets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Given {
    /// Character devices of the host's NVIDIA majors.
    pub nodes: Vec<Node>,
    /// Nodes at NVIDIA device paths (`/dev/nvidia*`) whose major is none of the host's NVIDIA
    /// majors: numbers from before a driver reload, as a stale spec carries them.
    pub misnumbered: Vec<Node>,
    /// How many devices of other drivers it has (a privileged container has every host device).
    pub other_devices: usize,
    /// The numbers of the character devices of other majors (at most [`MAX_ENTRIES`]): an
    /// integrated GPU's nodes are among them (WSL2's `/dev/dxg`, a Jetson's `/dev/nvhost-gpu`).
    pub others: Vec<(u32, u32)>,
    /// CDI device names from `cdi.k8s.io/*` annotations.
    pub annotated: Vec<String>,
    /// Driver libraries mounted in, with the version their file names carry.
    pub libraries: Vec<Library>,
}

/// The driver libraries whose file names carry the driver version: every `lib*nvidia*` and
/// `libcuda`, `libnvcuvid`, `libnvoptix` (what `nvidia-ctk cdi generate` mounts).
pub fn driver_library_version(file_name: &str) -> Option<DriverVersion> {
    let (stem, version) = file_name.split_once(".so.")?;
    let driver = stem == "libcuda"
        || stem == "libcudadebugger"
        || stem == "libnvcuvid"
        || stem == "libnvoptix"
        || (stem.starts_with("lib") && stem.contains("nvidia"));
    // A driver version has at least two components (`550.54.14`, `565.57.01`, `470.256.02`);
    // `libcuda.so.1` and `libnvidia-ml.so.1` are sonames.
    (driver && version.contains('.')).then(|| version.parse().ok()).flatten()
}

impl Given {
    /// Reads `config`: its devices against the host's NVIDIA majors (`proc/devices`, as
    /// [`crate::probe::char_majors`] reads it), the CDI annotations among `annotations`, and
    /// its mounts of driver libraries.
    pub fn read(
        config: &Config,
        annotations: &BTreeMap<String, String>,
        majors: &BTreeMap<String, u32>,
    ) -> Self {
        let major = |names: &[&str]| names.iter().filter_map(|n| majors.get(*n).copied()).collect::<Vec<_>>();
        let frontend = major(&["nvidia", "nvidia-frontend", "nvidiactl"]);
        let uvm = major(&["nvidia-uvm"]);
        let caps = major(&["nvidia-caps"]);
        let mut given = Self::default();
        for d in config.devices().iter().take(MAX_ENTRIES) {
            let Some((maj, min)) = d.char_numbers() else {
                if matches!(d.kind.as_str(), "b") {
                    given.other_devices += 1;
                }
                continue;
            };
            let role = if frontend.contains(&maj) {
                match min {
                    CTL_MINOR => Role::Control,
                    MODESET_MINOR => Role::Modeset,
                    m => Role::Gpu { minor: m },
                }
            } else if uvm.contains(&maj) {
                Role::Uvm
            } else if caps.contains(&maj) {
                Role::Capability { minor: min }
            } else if majors.values().any(|&m| m == maj) {
                Role::OtherNvidia
            } else {
                given.others.push((maj, min));
                let name = d.path.rsplit('/').next().unwrap_or("");
                if name.starts_with("nvidia") && d.path.starts_with("/dev/") {
                    given.misnumbered.push(Node {
                        path: d.path.clone(),
                        major: maj,
                        minor: min,
                        role: Role::OtherNvidia,
                    });
                } else if maj != DRM_MAJOR {
                    given.other_devices += 1;
                }
                continue;
            };
            let node = Node { path: d.path.clone(), major: maj, minor: min, role };
            if !given.nodes.iter().any(|n| n.major == maj && n.minor == min) {
                given.nodes.push(node);
            }
        }
        for (k, v) in annotations {
            if k.starts_with(CDI_ANNOTATION_PREFIX) {
                given
                    .annotated
                    .extend(v.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned));
            }
        }
        for m in config.mounts.iter().take(MAX_ENTRIES) {
            let name = m.source.rsplit('/').next().unwrap_or("");
            if let Some(version) = driver_library_version(name) {
                given.libraries.push(Library {
                    source: m.source.clone(),
                    destination: m.destination.clone(),
                    version,
                });
            }
        }
        given
    }

    /// Whether any node grants a GPU or a MIG device (what makes a container a GPU container
    /// without its environment saying so).
    pub fn has_gpu_nodes(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.role, Role::Gpu { .. } | Role::Capability { .. }))
    }

    /// Whether the container has the driver's control or UVM node: the driver without a GPU,
    /// as `NVIDIA_VISIBLE_DEVICES=none` gives it.
    pub fn has_driver_nodes(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.role, Role::Control | Role::Uvm)) || !self.misnumbered.is_empty()
    }

    /// Whether a node may be an integrated GPU's, which only the probed host can tell.
    pub fn may_be_integrated(&self) -> bool {
        !self.others.is_empty()
    }

    /// The host node (of [`INTEGRATED_NODES`]) the container was given, on a WSL2 host or a
    /// Jetson, whose GPUs come through those nodes rather than the `nvidia` major.
    fn integrated_node(&self, host: &HostProbe) -> Option<&'static str> {
        if !host.is_wsl2() && !host.is_jetson() {
            return None;
        }
        INTEGRATED_NODES.into_iter().find(|name| {
            matches!(host.node(name), NodeState::CharDevice { major, minor } if self.others.contains(&(major, minor)))
        })
    }

    /// Whether the container holds every host device by privilege: `CAP_SYS_ADMIN` in its
    /// bounding set (NVIDIA's `IsPrivileged`) and devices of other drivers, which `--privileged`
    /// and Kubernetes privileged pods copy from the host and no GPU spec hands out. Its NVIDIA
    /// nodes then do not ask for a GPU (see docs/contract.md, "Privileged containers").
    pub fn by_privilege(&self, privileged: bool) -> bool {
        privileged && self.other_devices > 0
    }

    /// The selection the annotations make.
    pub fn annotated_selection(&self) -> DeviceSelection {
        DeviceSelection::from_cdi_names(self.annotated.iter().map(String::as_str))
    }

    /// The GPUs the nodes grant, by index on `host` (a MIG capability standing for its parent
    /// GPU, as libnvidia-container checks a MIG device's requirements on its parent); nodes the
    /// host has no GPU for are left to [`Given::unmatched`]. The driver without a GPU is
    /// `NoDevices`; no NVIDIA node at all is `None`.
    pub fn node_selection(&self, host: &HostProbe) -> DeviceSelection {
        if self.integrated_node(host).is_some() {
            // WSL2's dxg and a Jetson's GPU nodes grant every GPU the host has.
            return DeviceSelection::All;
        }
        let mut ids: Vec<String> = Vec::new();
        for n in &self.nodes {
            let gpu = match n.role {
                Role::Gpu { minor } => host.gpus.iter().find(|g| g.minor == Some(minor)),
                Role::Capability { minor } => mig_parent(host, minor),
                _ => None,
            };
            if let Some(g) = gpu {
                let id = g.index.to_string();
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        if !ids.is_empty() {
            DeviceSelection::List(ids)
        } else if self.has_gpu_nodes() || self.has_driver_nodes() {
            DeviceSelection::NoDevices
        } else {
            DeviceSelection::None
        }
    }

    /// GPU and MIG nodes that name nothing the host has: a GPU minor no listed GPU has, an
    /// `nvidia-caps` minor no MIG capability file gives (the MIG layout changed since the spec
    /// was written: toolkit issue 1828).
    pub fn unmatched<'a>(&'a self, host: &HostProbe) -> Vec<&'a Node> {
        self.nodes
            .iter()
            .filter(|n| match n.role {
                Role::Gpu { minor } => !host.gpus.iter().any(|g| g.minor == Some(minor)),
                Role::Capability { minor } => {
                    !is_mig_control(host, minor) && mig_parent(host, minor).is_none()
                }
                _ => false,
            })
            .collect()
    }

    /// Whether anything at all was given.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
            && self.misnumbered.is_empty()
            && self.annotated.is_empty()
            && self.libraries.is_empty()
    }
}

/// The GPU a MIG capability minor belongs to (its GPU instance's or compute instance's
/// `access` file gives that minor).
fn mig_parent(host: &HostProbe, minor: u32) -> Option<&crate::probe::GpuProbe> {
    let inst = host.mig.instances.iter().find(|i| i.gi_minor == Some(minor) || i.ci_minor == Some(minor))?;
    host.gpus.iter().find(|g| g.minor == Some(inst.gpu_minor))
}

/// `mig/config` and `mig/monitor` (minors 1 and 2 on every driver so far): capabilities to
/// configure or watch MIG, not a device.
fn is_mig_control(host: &HostProbe, minor: u32) -> bool {
    host.mig.control_minors.contains(&minor)
}

/// Where a container's GPUs came from, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSource {
    /// `environment` (`NVIDIA_VISIBLE_DEVICES`), `volume-mounts`, `device-nodes`,
    /// `cdi-annotation` or `command-line` (`doctor --gpus`).
    pub source: &'static str,
    /// What it named: variable values, CDI names, or nodes with the GPU each is.
    pub devices: Vec<String>,
    /// Whether it counted (a privileged container's nodes do not).
    pub counted: bool,
}

impl Given {
    /// The sources of a container's GPU set: `env_value` (`NVIDIA_VISIBLE_DEVICES`, or the
    /// device volume mounts when `from_mounts`), then the annotations, then the nodes resolved
    /// on `host`.
    pub fn sources(
        &self,
        env: Option<(&str, bool)>,
        host: Option<&HostProbe>,
        nodes_count: bool,
    ) -> Vec<GpuSource> {
        let mut out = Vec::new();
        if let Some((value, from_mounts)) = env {
            out.push(GpuSource {
                source: if from_mounts { "volume-mounts" } else { "environment" },
                devices: vec![value.to_owned()],
                counted: true,
            });
        }
        if !self.annotated.is_empty() {
            out.push(GpuSource { source: "cdi-annotation", devices: self.annotated.clone(), counted: true });
        }
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| {
                matches!(n.role, Role::Gpu { .. } | Role::Capability { .. } | Role::Control | Role::Uvm)
            })
            .map(|n| {
                let gpu = host.and_then(|h| match n.role {
                    Role::Gpu { minor } => h.gpus.iter().find(|g| g.minor == Some(minor)),
                    Role::Capability { minor } => mig_parent(h, minor),
                    _ => None,
                });
                match (n.role, gpu) {
                    (Role::Capability { .. }, Some(g)) => {
                        format!("{} -> MIG device on GPU {}", n.describe(), g.index)
                    }
                    (_, Some(g)) => format!("{} -> GPU {} ({})", n.describe(), g.index, g.bus_id),
                    (Role::Control | Role::Uvm, _) => format!("{} -> the driver", n.describe()),
                    (Role::Capability { minor }, None) if host.is_some_and(|h| is_mig_control(h, minor)) => {
                        format!("{} -> MIG control", n.describe())
                    }
                    (_, None) => format!("{} -> no GPU of this host", n.describe()),
                }
            })
            .collect();
        let mut nodes = nodes;
        if let Some(name) = host.and_then(|h| self.integrated_node(h)) {
            nodes.push(format!("/dev/{name} -> every GPU of the host"));
        }
        if !nodes.is_empty() {
            out.push(GpuSource { source: "device-nodes", devices: nodes, counted: nodes_count });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Preset;

    fn config(json: &str) -> Config {
        serde_json::from_str(json).unwrap()
    }

    fn majors() -> BTreeMap<String, u32> {
        [
            ("nvidia", 195),
            ("nvidiactl", 195),
            ("nvidia-uvm", 510),
            ("nvidia-caps", 237),
            ("nvidia-nvswitch", 238),
        ]
        .into_iter()
        .map(|(n, m)| (n.to_owned(), m))
        .collect()
    }

    #[test]
    fn nodes_are_known_by_their_numbers_not_their_paths() {
        let c = config(
            r#"{"linux":{"devices":[
                {"path":"/dev/gpu-zero","type":"c","major":195,"minor":0},
                {"path":"/dev/nvidiactl","type":"c","major":195,"minor":255},
                {"path":"/dev/nvidia-modeset","type":"c","major":195,"minor":254},
                {"path":"/dev/nvidia-uvm","type":"c","major":510,"minor":0},
                {"path":"/dev/nvidia-caps/nvidia-cap3","type":"c","major":237,"minor":3},
                {"path":"/dev/nvidia-nvswitch0","type":"c","major":238,"minor":0},
                {"path":"/dev/dri/card1","type":"c","major":226,"minor":1},
                {"path":"/dev/again","type":"c","major":195,"minor":0},
                {"path":"/dev/nvidia1","type":"b","major":195,"minor":1}
            ]}}"#,
        );
        let g = Given::read(&c, &BTreeMap::new(), &majors());
        let roles: Vec<Role> = g.nodes.iter().map(|n| n.role).collect();
        assert_eq!(
            roles,
            [
                Role::Gpu { minor: 0 },
                Role::Control,
                Role::Modeset,
                Role::Uvm,
                Role::Capability { minor: 3 },
                Role::OtherNvidia
            ]
        );
        assert_eq!(g.nodes[0].path, "/dev/gpu-zero");
        assert_eq!(g.other_devices, 1, "the block device; DRM nodes come with display GPUs");
        assert!(g.has_gpu_nodes() && g.has_driver_nodes());
    }

    #[test]
    fn a_uvm_node_of_an_old_major_is_misnumbered() {
        let c =
            config(r#"{"linux":{"devices":[{"path":"/dev/nvidia-uvm","type":"c","major":509,"minor":0}]}}"#);
        let g = Given::read(&c, &BTreeMap::new(), &majors());
        assert!(g.nodes.is_empty());
        assert_eq!(g.misnumbered.len(), 1);
        assert!(g.has_driver_nodes());
    }

    #[test]
    fn node_selection_maps_minors_and_mig_capabilities_to_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let host = Preset::MigNode.build(dir.path()).unwrap();
        let probe = crate::probe::probe(host.root());
        let majors = crate::probe::char_majors(host.root());
        let inst = &probe.mig.instances;
        let on_gpu1 = inst.iter().find(|i| i.gpu_minor == 1).and_then(|i| i.ci_minor).unwrap();
        let c = config(&format!(
            r#"{{"linux":{{"devices":[
                {{"path":"/dev/nvidiactl","type":"c","major":195,"minor":255}},
                {{"path":"/dev/nvidia-caps/nvidia-cap{on_gpu1}","type":"c","major":237,"minor":{on_gpu1}}},
                {{"path":"/dev/nvidia-caps/nvidia-cap1","type":"c","major":237,"minor":1}},
                {{"path":"/dev/x","type":"c","major":195,"minor":7}}
            ]}}}}"#
        ));
        let g = Given::read(&c, &BTreeMap::new(), &majors);
        assert_eq!(g.node_selection(&probe), DeviceSelection::List(vec!["1".into()]));
        let unmatched: Vec<&str> = g.unmatched(&probe).iter().map(|n| n.path.as_str()).collect();
        assert_eq!(unmatched, ["/dev/x"], "minor 1 is mig/config, minor 7 no GPU's");
        let only_ctl =
            config(r#"{"linux":{"devices":[{"path":"/dev/nvidiactl","type":"c","major":195,"minor":255}]}}"#);
        assert_eq!(
            Given::read(&only_ctl, &BTreeMap::new(), &majors).node_selection(&probe),
            DeviceSelection::NoDevices
        );
        assert_eq!(Given::default().node_selection(&probe), DeviceSelection::None);
    }

    #[test]
    fn annotations_and_driver_libraries() {
        let c = config(
            r#"{"mounts":[
                {"source":"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14","destination":"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14"},
                {"source":"/usr/lib64/libEGL_nvidia.so.550.54.14","destination":"/usr/lib64/libEGL_nvidia.so.550.54.14"},
                {"source":"/usr/lib/x86_64-linux-gnu/libcuda.so.1","destination":"/x"},
                {"source":"/usr/lib/libfoo.so.1.2.3","destination":"/y"},
                {"source":"/usr/bin/nvidia-smi","destination":"/usr/bin/nvidia-smi"}
            ]}"#,
        );
        let mut ann = BTreeMap::new();
        ann.insert(
            "cdi.k8s.io/nvidia-device-plugin_abc".to_owned(),
            "nvidia.com/gpu=0,nvidia.com/gpu=1".to_owned(),
        );
        ann.insert("other".to_owned(), "nvidia.com/gpu=2".to_owned());
        let g = Given::read(&c, &ann, &majors());
        assert_eq!(g.annotated, ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]);
        assert_eq!(g.annotated_selection(), DeviceSelection::List(vec!["0".into(), "1".into()]));
        let versions: Vec<String> = g.libraries.iter().map(|l| l.version.to_string()).collect();
        assert_eq!(versions, ["550.54.14", "550.54.14"]);
    }

    #[test]
    fn integrated_gpus_come_through_their_hosts_nodes() {
        let dir = tempfile::tempdir().unwrap();
        for (preset, node) in [(Preset::Wsl2, "dxg"), (Preset::JetsonOrin, "nvhost-gpu")] {
            let host = preset.build(&dir.path().join(preset.name())).unwrap();
            if !host.real_device_nodes() {
                return;
            }
            let probe = crate::probe::probe(host.root());
            let NodeState::CharDevice { major, minor } = probe.node(node) else {
                panic!("{node}: {:?}", probe.node(node))
            };
            let c = config(&format!(
                r#"{{"linux":{{"devices":[{{"path":"/dev/renamed","type":"c","major":{major},"minor":{minor}}}]}}}}"#
            ));
            let g = Given::read(&c, &BTreeMap::new(), &crate::probe::char_majors(host.root()));
            assert!(g.may_be_integrated());
            assert_eq!(g.node_selection(&probe), DeviceSelection::All, "{}", preset.name());
            let fuse =
                config(r#"{"linux":{"devices":[{"path":"/dev/fuse","type":"c","major":10,"minor":229}]}}"#);
            let g = Given::read(&fuse, &BTreeMap::new(), &BTreeMap::new());
            assert_eq!(g.node_selection(&probe), DeviceSelection::None, "{}", preset.name());
        }
    }

    #[test]
    fn privilege_needs_devices_of_other_drivers() {
        let c = config(
            r#"{"linux":{"devices":[
                {"path":"/dev/nvidia0","type":"c","major":195,"minor":0},
                {"path":"/dev/null","type":"c","major":1,"minor":3}
            ]}}"#,
        );
        let g = Given::read(&c, &BTreeMap::new(), &majors());
        assert!(g.by_privilege(true));
        assert!(!g.by_privilege(false));
        let cdi =
            config(r#"{"linux":{"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0}]}}"#);
        assert!(!Given::read(&cdi, &BTreeMap::new(), &majors()).by_privilege(true));
    }
}
