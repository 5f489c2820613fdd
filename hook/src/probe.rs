//! What the host is, read from a host root (`/` in production, a fixture tree in tests).
//!
//! [`probe`] reads a fixed list of files under `/proc`, `/sys`, `/dev` and the driver's library
//! directories (the driver's procfs files as NVIDIA's open-gpu-kernel-modules `nv-procfs.c` writes
//! them, `/proc/modules` and `/sys/module/*/taint` as the kernel's documentation describes), records
//! each fact with the file it came from, and never fails: what it cannot read is absent, and
//! read problems other than "does not exist" are kept as [`ProbeNote`]s. Every read is capped
//! and resolved inside the host root ([`hostfs`]); directory listings are capped too, so a
//! probe costs a bounded number of system calls (about 15 per GPU).
//!
//! [`HostProbe::facts`] turns a probe into the [`HostFacts`] that requirement expressions are
//! evaluated against, for the GPUs a container selects. Facts the files do not hold come, in this
//! order, from the `nvidia-smi` answers an administrator recorded ([`recorded`], used only while
//! the driver version and boot id match), from admin rows in `/etc/stackhook/kb.d`
//! ([`kb::extra`]), and from the built-in tables; what none of them knows stays unknown (a range
//! for the CUDA version, `None` for a compute capability), which makes a requirement unverifiable,
//! not failed. [`HostProbe::host_cuda`] and [`HostProbe::gpu_arch`] say how each was obtained.

mod hostfs;
pub mod parse;
pub mod recorded;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;
use serde::Serialize;

pub use hostfs::{HostFs, ReadError};

use crate::contract::image::DeviceSelection;
use crate::contract::kb;
use crate::contract::kb::extra::Extension;
use crate::contract::require::{CudaBound, GpuFacts, HostFacts};
use crate::contract::version::{ComputeCapability, CudaVersion, DriverVersion, KernelRelease};
use recorded::RecordedFacts;

/// Cap for one file read (proc and sysfs files are a few hundred bytes).
const FILE_CAP: usize = 64 * 1024;
/// Cap for `proc/modules`, which lists every loaded module.
const MODULES_CAP: usize = 256 * 1024;
/// At most this many GPUs are read from `proc/driver/nvidia/gpus`.
pub const MAX_GPUS: usize = 64;
/// At most this many PCI devices are looked at for NVIDIA display controllers.
const MAX_PCI_DEVICES: usize = 1024;

/// The directories searched for the driver's user-space libraries.
pub const LIBRARY_DIRS: [&str; 5] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/wsl/lib",
    "usr/local/nvidia/lib64",
];

/// The libraries whose symlink chains are followed.
pub const LIBRARIES: [&str; 2] = ["libcuda.so.1", "libnvidia-ml.so.1"];

/// The modules whose `proc/modules` line and `sys/module/<name>/taint` are kept.
const DRIVER_MODULES: [&str; 7] =
    ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nouveau", "nvgpu"];

/// EFI variable GUID of the global variables (UEFI spec, `EFI_GLOBAL_VARIABLE`).
const EFI_GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// The NVIDIA PCI vendor id.
pub const NVIDIA_VENDOR: u32 = 0x10de;

/// Where a fact was read and what the file said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// The path inside the host root, written absolute (`/proc/modules`).
    pub path: String,
    /// What was found there (one line, shortened), or why nothing was.
    pub value: String,
}

impl Evidence {
    /// Evidence from `path` (relative to the host root) with `value` shortened to one line.
    pub fn new(path: &str, value: &str) -> Self {
        let mut v = String::new();
        hostfs::evidence_text(&mut v, value);
        Self { path: abs(path), value: v }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fact<T> {
    /// The parsed value.
    pub value: T,
    /// The file and its text.
    pub evidence: Evidence,
}

/// Which kind of host this is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Platform {
    /// A Linux host with PCI GPUs.
    Linux,
    /// Windows Subsystem for Linux 2: GPUs through `/dev/dxg`, no `nvidia` module.
    Wsl2 {
        /// What showed it.
        evidence: Evidence,
    },
    /// An NVIDIA Jetson (Tegra) board.
    Jetson {
        /// The L4T release (`R35 (release), REVISION: 4.1`), when known.
        release: Option<String>,
        /// What showed it.
        evidence: Evidence,
    },
}

impl Platform {
    /// The platform's name as requirements (`platform=wsl2`), reports and node labels write it:
    /// `linux`, `wsl2` or `jetson`.
    pub fn name(&self) -> &'static str {
        match self {
            Platform::Linux => "linux",
            Platform::Wsl2 { .. } => "wsl2",
            Platform::Jetson { .. } => "jetson",
        }
    }

    /// What showed the platform; `None` for Linux, which is what a host is without the markers
    /// of the others.
    pub fn evidence(&self) -> Option<&Evidence> {
        match self {
            Platform::Linux => None,
            Platform::Wsl2 { evidence } | Platform::Jetson { evidence, .. } => Some(evidence),
        }
    }
}

/// Which kernel module flavour is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModuleFlavor {
    /// The closed-source module (taints `P`).
    Proprietary,
    /// open-gpu-kernel-modules (MIT/GPL, Turing and newer).
    Open,
}

/// A driver-related kernel module that is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleProbe {
    /// `Live`, `Loading` or `Unloading`.
    pub state: String,
    /// Taint letters from `proc/modules` (`POE`).
    pub taint: String,
    /// `sys/module/<name>/taint`, when readable.
    pub sys_taint: Option<String>,
    /// The `proc/modules` line.
    pub evidence: Evidence,
}

/// What PCI sysfs says about one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PciProbe {
    /// `sys/bus/pci/devices/<bdf>`.
    pub path: String,
    /// Vendor id (`0x10de`); not read for GPUs the driver lists (they are NVIDIA's).
    #[serde(serialize_with = "hex_opt")]
    pub vendor: Option<u32>,
    /// Device id, which names the chip (`0x2330` = H100 SXM5 80GB).
    #[serde(serialize_with = "hex_opt")]
    pub device: Option<u32>,
    /// Class code (`0x030200` = 3D controller); not read for GPUs the driver lists.
    #[serde(serialize_with = "hex_opt")]
    pub class: Option<u32>,
    /// Basename of the `driver` link (`nvidia`, `nouveau`, `vfio-pci`), `None` when unbound.
    pub driver: Option<String>,
    /// `current_link_speed` (`16.0 GT/s PCIe`).
    pub current_link_speed: Option<String>,
    /// `max_link_speed`.
    pub max_link_speed: Option<String>,
    /// `current_link_width` (`16`).
    pub current_link_width: Option<u32>,
    /// `max_link_width`.
    pub max_link_width: Option<u32>,
}

impl PciProbe {
    /// The PCI device id as the knowledge base keys it.
    pub fn device_id(&self) -> Option<u16> {
        self.device.and_then(|d| u16::try_from(d).ok())
    }
}

/// One GPU the `nvidia` driver knows (`proc/driver/nvidia/gpus/<bdf>`), or a Jetson's
/// integrated GPU, recognised from its SOC (see [`GpuProbe::soc`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuProbe {
    /// Index in PCI bus order, as `nvidia-smi` and `NVIDIA_VISIBLE_DEVICES` count.
    pub index: usize,
    /// PCI bus id (`0000:18:00.0`); [`INTEGRATED_BUS_ID`] for a Jetson's integrated GPU.
    pub bus_id: String,
    /// `Model:` (`NVIDIA H100 80GB HBM3`; `Unknown` on a broken board); for a Jetson's
    /// integrated GPU, the knowledge base's name and the SOC (`Jetson Orin (tegra234)`).
    pub model: Option<String>,
    /// `GPU UUID:` (`GPU-…`).
    pub uuid: Option<String>,
    /// `Device Minor:`, the N of `/dev/nvidiaN`.
    pub minor: Option<u32>,
    /// `GPU Excluded:` (`Yes`/`No`), absent on older drivers.
    pub excluded: Option<bool>,
    /// The `information` file (for an integrated GPU, the device tree's SOC string).
    pub evidence: Evidence,
    /// The device's PCI sysfs attributes (all absent for an integrated GPU).
    pub pci: PciProbe,
    /// For a Jetson's integrated GPU, which is not on PCI and which the driver does not list:
    /// the SOC's device-tree `compatible` string (`nvidia,tegra234`) it was recognised from.
    /// Such a GPU has no UUID, device minor, `/dev/nvidiaN` node or PCI link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soc: Option<String>,
}

/// The [`GpuProbe::bus_id`] of a Jetson's integrated GPU, which is part of the SOC, not on PCI.
pub const INTEGRATED_BUS_ID: &str = "soc";

impl GpuProbe {
    /// Whether the driver reports the board as `Model: Unknown`.
    pub fn model_unknown(&self) -> bool {
        self.model.as_deref().is_none_or(|m| m.is_empty() || m.eq_ignore_ascii_case("unknown"))
    }

    /// The knowledge base's entry: a Jetson's integrated GPU by its SOC; others by PCI device id
    /// first, then by model name.
    pub fn kb_model(&self) -> Option<&'static kb::GpuModel> {
        if let Some(compatible) = &self.soc {
            return kb::jetson_soc(compatible).map(kb::JetsonSoc::gpu);
        }
        self.pci.device_id().and_then(kb::gpu_by_pci_id).or_else(|| {
            self.model.as_deref().filter(|_| !self.model_unknown()).and_then(kb::gpu_by_model_name)
        })
    }
}

/// An NVIDIA display controller on the PCI bus that the `nvidia` driver does not list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciGpu {
    /// PCI bus id.
    pub bus_id: String,
    /// Its sysfs attributes.
    pub pci: PciProbe,
}

/// What a `/dev` entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeState {
    /// No such entry.
    Missing,
    /// A character device.
    CharDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// Something else (a regular file, a symlink, a directory).
    Other {
        /// What it is.
        what: &'static str,
    },
}

/// How a library's symlink chain ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChainEnd {
    /// At a regular file.
    File,
    /// At a link whose target does not exist.
    Dangling,
    /// After more than 8 links.
    TooManyLinks,
    /// At something that is not a regular file, or a read error.
    Unusable {
        /// Why.
        why: String,
    },
}

/// A driver library found in one of [`LIBRARY_DIRS`], with its symlink chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LibraryProbe {
    /// The name looked for (`libcuda.so.1`).
    pub name: String,
    /// Where it was found (`/usr/lib/x86_64-linux-gnu/libcuda.so.1`).
    pub path: String,
    /// Each link target in turn, re-rooted (`/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05`).
    pub chain: Vec<String>,
    /// How the chain ended.
    pub end: ChainEnd,
    /// The version in the final file's name (`535.104.05`); none for a bare `.so.1` file.
    pub version: Option<String>,
}

impl LibraryProbe {
    /// The last path of the chain.
    pub fn final_path(&self) -> &str {
        self.chain.last().unwrap_or(&self.path)
    }

    /// The final file's name.
    pub fn final_name(&self) -> &str {
        self.final_path().rsplit('/').next().unwrap_or("")
    }
}

/// A read that failed for a reason other than "does not exist".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeNote {
    /// The path, absolute inside the host root.
    pub path: String,
    /// What went wrong.
    pub problem: String,
}

/// Everything the probe learned about the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostProbe {
    /// The host root that was probed.
    #[serde(skip)]
    pub root: PathBuf,
    /// Linux, WSL2 or Jetson.
    pub platform: Platform,
    /// CPU architecture (`x86_64`), from `proc/sys/kernel/arch` or this program's own.
    pub machine: Fact<String>,
    /// Kernel release (`proc/sys/kernel/osrelease`).
    pub kernel: Option<Fact<KernelRelease>>,
    /// `proc/sys/kernel/tainted`.
    pub tainted: Option<Fact<u64>>,
    /// The loaded `nvidia` module's version.
    pub driver: Option<Fact<DriverVersion>>,
    /// Proprietary or open module.
    pub module_flavor: Option<Fact<ModuleFlavor>>,
    /// Jetson's L4T release where the proc file prints it in place of a driver version.
    pub l4t_release: Option<Fact<String>>,
    /// Driver-related loaded modules (`nvidia*`, `nouveau`, `nvgpu`).
    pub modules: BTreeMap<String, ModuleProbe>,
    /// Names of all loaded modules, for `module=` requirements.
    #[serde(skip)]
    pub loaded_modules: BTreeSet<String>,
    /// Whether `proc/modules` could be read at all.
    pub modules_readable: bool,
    /// NVIDIA character-device majors from `proc/devices` (`nvidia-uvm` -> 510).
    pub char_majors: BTreeMap<String, u32>,
    /// The GPUs the driver lists, in PCI bus order; on a Jetson whose SOC the knowledge base
    /// knows, its one integrated GPU.
    pub gpus: Vec<GpuProbe>,
    /// NVIDIA display controllers the `nvidia` driver does not list (unbound, `nouveau`,
    /// `vfio-pci`).
    pub other_pci_gpus: Vec<PciGpu>,
    /// `/dev` entries, keyed by absolute path.
    pub device_nodes: BTreeMap<String, NodeState>,
    /// Driver libraries found, in [`LIBRARY_DIRS`] order.
    pub libraries: Vec<LibraryProbe>,
    /// `libcuda.so` files that are toolkit stubs rather than links into the driver.
    pub libcuda_stubs: Vec<String>,
    /// Secure Boot enabled (`SecureBoot-…` efivar, fifth byte).
    pub secure_boot: Option<Fact<bool>>,
    /// Setup mode (`SetupMode-…` efivar): Secure Boot is not enforced while it is on.
    pub setup_mode: Option<Fact<bool>>,
    /// MIG devices, from the driver's capability files and a recorded `nvidia-smi -L`.
    #[serde(skip_serializing_if = "MigProbe::is_empty")]
    pub mig: MigProbe,
    /// Facts `stackhook doctor --record` saved from `nvidia-smi`, when they still describe the
    /// running driver (same driver version and boot id); see [`recorded`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedFacts>,
    /// Why a facts file that exists was not used (stale, unreadable, malformed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_ignored: Option<String>,
    /// Rows an administrator added in `/etc/stackhook/kb.d/*.toml`.
    #[serde(skip)]
    pub kb_extension: Extension,
    /// The `kb.d` files whose rows were accepted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kb_files: Vec<String>,
    /// Reads that failed other than by absence.
    pub notes: Vec<ProbeNote>,
}

/// Where the driver lists MIG instances: `gpu<minor>/mig/gi<G>/ci<C>/access` for each compute
/// instance of each GPU instance (the files `nvidia-container-toolkit`'s `internal/nvcaps` and
/// the device plugin read to give a container a MIG device).
pub const MIG_CAPABILITIES_DIR: &str = "proc/driver/nvidia/capabilities";

/// A recorded `nvidia-smi -L`, which ties each MIG device's UUID to its parent GPU: the driver
/// prints MIG UUIDs only through NVML, never in a file. Record it after every MIG change
/// (`nvidia-smi -L > /etc/stackhook/mig-devices.txt`).
pub const MIG_RECORD_PATH: &str = "etc/stackhook/mig-devices.txt";

/// Most MIG entries read per directory (an A100/H100 has at most 7 GPU instances, each with at
/// most 7 compute instances).
const MAX_MIG_ENTRIES: usize = 16;

/// What the host says about MIG devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MigProbe {
    /// Compute instances from the capability files.
    pub instances: Vec<MigInstance>,
    /// MIG devices from the recorded `nvidia-smi -L`.
    pub records: Vec<MigRecord>,
    /// The `nvidia-caps` minors of `mig/config` and `mig/monitor`: capabilities to configure
    /// or watch MIG, which a container may be given without a MIG device.
    #[serde(skip)]
    pub control_minors: Vec<u32>,
}

impl MigProbe {
    /// Whether the host shows no MIG device at all.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.records.is_empty()
    }
}

/// One compute instance: `proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>/ci<ci>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigInstance {
    /// The parent GPU's device minor (the `N` of `gpuN`, as the driver numbers its GPUs).
    pub gpu_minor: u32,
    /// GPU instance id.
    pub gi: u32,
    /// Compute instance id.
    pub ci: u32,
    /// The `nvidia-caps` minor granting the GPU instance (`gi<G>/access`), when readable.
    pub gi_minor: Option<u32>,
    /// The `nvidia-caps` minor granting the compute instance (`ci<C>/access`), when readable.
    pub ci_minor: Option<u32>,
}

/// One MIG device of the recorded `nvidia-smi -L`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigRecord {
    /// `MIG-…`.
    pub uuid: String,
    /// The parent GPU's UUID (`GPU-…`).
    pub parent_uuid: String,
    /// `Device N` under its parent: the `N` of a `<gpu>:<N>` MIG index.
    pub index: usize,
}

/// The devices a selection names.
#[derive(Debug, Clone, Default)]
pub struct Resolved<'a> {
    /// The GPUs, a MIG device standing for its parent (as libnvidia-container adds a MIG
    /// device's parent to the GPUs it checks requirements on), in order, without repeats.
    pub gpus: Vec<&'a GpuProbe>,
    /// Devices the host does not tie to one GPU.
    pub unresolved: Vec<UnresolvedDevice<'a>>,
}

/// A selected device whose GPU is not known: a MIG device whose parent is not recorded, or a
/// device list passed as volume mounts without the mounts.
#[derive(Debug, Clone)]
pub struct UnresolvedDevice<'a> {
    /// The identifier as given.
    pub id: String,
    /// The GPUs it may be on: those with MIG instances, else every GPU.
    pub candidates: Vec<&'a GpuProbe>,
}

impl UnresolvedDevice<'_> {
    /// The knowledge base's model when every candidate is the same one: then the device is
    /// checked as that model, whichever GPU it is on.
    pub fn common_model(&self) -> Option<&'static kb::GpuModel> {
        let first = self.candidates.first()?.kb_model()?;
        self.candidates.iter().all(|g| g.kb_model().is_some_and(|m| std::ptr::eq(m, first))).then_some(first)
    }
}

/// What one device identifier names.
enum Found<'a> {
    Gpu(&'a GpuProbe),
    Unresolved(UnresolvedDevice<'a>),
}

/// How a fact the requirements use was obtained, as reports show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Where: a host file, `(knowledge base)`, `(kb.d) <file>` or the recorded facts file.
    pub path: String,
    /// What it said.
    pub value: String,
}

impl From<Provenance> for Evidence {
    fn from(p: Provenance) -> Self {
        Evidence { path: p.path, value: p.value }
    }
}

/// The highest CUDA version the host's driver supports, as far as it can be told, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCuda {
    /// The value, or the lower bound when `bound` is a range.
    pub cuda: Option<CudaVersion>,
    /// Exact, or the range the value lies in.
    pub bound: CudaBound,
    /// How it was obtained.
    pub how: Provenance,
}

/// A GPU's compute capability and how it was obtained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuArch {
    /// The compute capability.
    pub value: ComputeCapability,
    /// How it was obtained.
    pub how: Provenance,
}

/// `NVIDIA_VISIBLE_DEVICES` names a GPU the host does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// An index beyond the GPU count.
    #[error("NVIDIA_VISIBLE_DEVICES names GPU {index}, but the host has {count} GPU(s)")]
    NoSuchIndex {
        /// The index given.
        index: usize,
        /// How many GPUs the driver lists.
        count: usize,
    },
    /// A UUID or bus id no GPU has.
    #[error("NVIDIA_VISIBLE_DEVICES names {id:?}, which matches no GPU on this host")]
    NoSuchGpu {
        /// The identifier given.
        id: String,
    },
    /// A MIG index beyond the MIG devices its GPU has.
    #[error("NVIDIA_VISIBLE_DEVICES names MIG device {id:?}, but GPU {gpu} has {count} MIG device(s)")]
    NoSuchMig {
        /// The identifier given.
        id: String,
        /// The parent GPU's index.
        gpu: usize,
        /// How many MIG devices it has.
        count: usize,
    },
    /// A form no NVIDIA tool selects a device by (NVIDIA's CLI refuses it: "unknown device").
    #[error(
        "NVIDIA_VISIBLE_DEVICES entry {id:?} names no device (use GPU indexes, GPU or MIG UUIDs, MIG indexes \
         like 0:1, PCI bus ids or all)"
    )]
    Unsupported {
        /// The identifier given.
        id: String,
    },
    /// `all` or a list on a host whose GPUs cannot be listed (WSL2, Jetson).
    #[error("this host does not list its GPUs, so NVIDIA_VISIBLE_DEVICES={id:?} cannot be checked")]
    Unlisted {
        /// The identifier given.
        id: String,
    },
}

/// PCI ids as sysfs prints them (`0x10de`), not as decimal numbers.
#[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)] // serde's `serialize_with` passes `&T`.
fn hex_opt<S: serde::Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) if *v > 0xffff => s.serialize_str(&format!("0x{v:06x}")),
        Some(v) => s.serialize_str(&format!("0x{v:04x}")),
        None => s.serialize_none(),
    }
}

fn abs(rel: &str) -> String {
    format!("/{}", rel.trim_start_matches('/'))
}

/// Reads the host at `host_root`. Never panics; what cannot be read is absent.
pub fn probe(host_root: &Path) -> HostProbe {
    let mut p = HostProbe {
        root: host_root.to_path_buf(),
        platform: Platform::Linux,
        machine: Fact {
            value: std::env::consts::ARCH.to_owned(),
            evidence: Evidence {
                path: "(stackhook build)".to_owned(),
                value: std::env::consts::ARCH.to_owned(),
            },
        },
        kernel: None,
        tainted: None,
        driver: None,
        module_flavor: None,
        l4t_release: None,
        modules: BTreeMap::new(),
        loaded_modules: BTreeSet::new(),
        modules_readable: false,
        char_majors: BTreeMap::new(),
        gpus: Vec::new(),
        other_pci_gpus: Vec::new(),
        device_nodes: BTreeMap::new(),
        libraries: Vec::new(),
        libcuda_stubs: Vec::new(),
        secure_boot: None,
        setup_mode: None,
        mig: MigProbe::default(),
        recorded: None,
        recorded_ignored: None,
        kb_extension: Extension::default(),
        kb_files: Vec::new(),
        notes: Vec::new(),
    };
    let fs = match HostFs::open(host_root) {
        Ok(fs) => fs,
        Err(e) => {
            p.notes.push(ProbeNote { path: host_root.display().to_string(), problem: e.to_string() });
            return p;
        }
    };
    let mut r = Reader { fs, notes: Vec::new() };
    r.kernel(&mut p);
    r.platform(&mut p);
    r.modules(&mut p);
    r.driver(&mut p);
    r.char_devices(&mut p);
    r.gpus(&mut p);
    r.integrated_gpu(&mut p);
    r.other_pci(&mut p);
    r.device_nodes(&mut p);
    r.libraries(&mut p);
    r.secure_boot(&mut p);
    r.mig(&mut p);
    r.recorded(&mut p);
    r.kb_d(&mut p);
    p.notes.append(&mut r.notes);
    p
}

/// The NVIDIA character-device majors of `proc/devices` alone (`nvidia-uvm` -> 510): what the
/// hook needs to tell a container's GPU nodes from others before it decides to probe the host.
pub fn char_majors(host_root: &Path) -> BTreeMap<String, u32> {
    let Ok(fs) = HostFs::open(host_root) else { return BTreeMap::new() };
    let mut r = Reader { fs, notes: Vec::new() };
    r.text_all("proc/devices", FILE_CAP).map(|t| nvidia_majors(&t)).unwrap_or_default()
}

fn nvidia_majors(proc_devices: &str) -> BTreeMap<String, u32> {
    parse::char_devices(proc_devices)
        .into_iter()
        .filter(|(_, n)| n.starts_with("nvidia"))
        .map(|(m, n)| (n, m))
        .collect()
}

/// The file system plus the notes of failed reads.
struct Reader {
    fs: HostFs,
    notes: Vec<ProbeNote>,
}

impl Reader {
    /// Reads a text file; absence is `None`, other failures are noted.
    fn text(&mut self, rel: &str, cap: usize) -> Option<String> {
        match self.fs.read_text(rel, cap) {
            Ok(t) => Some(t),
            Err(e) => {
                self.note(rel, &e);
                None
            }
        }
    }

    /// Reads a listing the kernel prints a record at a time, to its end.
    fn text_all(&mut self, rel: &str, cap: usize) -> Option<String> {
        match self.fs.read_all_text(rel, cap) {
            Ok(t) => Some(t),
            Err(e) => {
                self.note(rel, &e);
                None
            }
        }
    }

    fn bytes(&mut self, rel: &str) -> Option<Vec<u8>> {
        match self.fs.read(rel, FILE_CAP) {
            Ok(b) => Some(b),
            Err(e) => {
                self.note(rel, &e);
                None
            }
        }
    }

    fn note(&mut self, rel: &str, e: &ReadError) {
        if *e != ReadError::NotFound {
            self.notes.push(ProbeNote { path: abs(rel), problem: e.to_string() });
        }
    }

    fn list(&mut self, rel: &str, max: usize) -> Vec<String> {
        match self.fs.list(rel, max) {
            Ok((names, more)) => {
                if more {
                    self.notes.push(ProbeNote {
                        path: abs(rel),
                        problem: format!("more than {max} entries; the rest were not read"),
                    });
                }
                names
            }
            Err(e) => {
                self.note(rel, &e);
                Vec::new()
            }
        }
    }

    fn kernel(&mut self, p: &mut HostProbe) {
        const OSRELEASE: &str = "proc/sys/kernel/osrelease";
        const TAINTED: &str = "proc/sys/kernel/tainted";
        const ARCH: &str = "proc/sys/kernel/arch";
        if let Some(t) = self.text(OSRELEASE, FILE_CAP) {
            match t.trim().parse::<KernelRelease>() {
                Ok(k) => p.kernel = Some(Fact { value: k, evidence: Evidence::new(OSRELEASE, &t) }),
                Err(e) => self.notes.push(ProbeNote { path: abs(OSRELEASE), problem: e.to_string() }),
            }
        }
        if let Some(t) = self.text(TAINTED, FILE_CAP) {
            if let Ok(v) = t.trim().parse::<u64>() {
                p.tainted = Some(Fact { value: v, evidence: Evidence::new(TAINTED, &t) });
            }
        }
        if let Some(t) = self.text(ARCH, FILE_CAP) {
            let v = t.trim();
            if !v.is_empty() {
                p.machine = Fact { value: v.to_owned(), evidence: Evidence::new(ARCH, v) };
            }
        }
    }

    fn exists(&self, rel: &str) -> Option<rustix::fs::Stat> {
        self.fs.lstat(rel).ok()
    }

    fn platform(&mut self, p: &mut HostProbe) {
        // WSL2: the paravirtual GPU device and the libraries Windows mounts in.
        if self.exists("dev/dxg").is_some() {
            p.platform = Platform::Wsl2 { evidence: Evidence::new("dev/dxg", "exists") };
            return;
        }
        if self.exists("usr/lib/wsl/lib").is_some() {
            p.platform = Platform::Wsl2 { evidence: Evidence::new("usr/lib/wsl/lib", "exists") };
            return;
        }
        // Jetson: the L4T release file, the SoC family, or the device tree.
        if let Some(t) = self.text("etc/nv_tegra_release", FILE_CAP) {
            let release = t.lines().next().map(|l| l.trim_start_matches('#').trim().to_owned());
            p.platform = Platform::Jetson { release, evidence: Evidence::new("etc/nv_tegra_release", &t) };
            return;
        }
        if let Some(t) = self.text("sys/devices/soc0/family", FILE_CAP) {
            if t.trim().to_ascii_lowercase().starts_with("tegra") {
                p.platform = Platform::Jetson {
                    release: None,
                    evidence: Evidence::new("sys/devices/soc0/family", &t),
                };
                return;
            }
        }
        if let Some(t) = self.text("proc/device-tree/compatible", FILE_CAP) {
            if let Some(c) = t.split('\0').find(|c| c.starts_with("nvidia,tegra")) {
                p.platform = Platform::Jetson {
                    release: None,
                    evidence: Evidence::new("proc/device-tree/compatible", c),
                };
            }
        }
    }

    fn modules(&mut self, p: &mut HostProbe) {
        const MODULES: &str = "proc/modules";
        let Some(text) = self.text_all(MODULES, MODULES_CAP) else { return };
        p.modules_readable = true;
        for m in parse::modules(&text) {
            if DRIVER_MODULES.contains(&m.name.as_str()) {
                // `proc/modules` already prints the letters; sysfs is read for `nvidia` only,
                // whose taint decides the Secure Boot finding.
                let sys_taint = if m.name == "nvidia" {
                    self.text("sys/module/nvidia/taint", FILE_CAP).map(|t| t.trim().to_owned())
                } else {
                    None
                };
                p.modules.insert(
                    m.name.clone(),
                    ModuleProbe {
                        state: m.state,
                        taint: m.taint,
                        sys_taint,
                        evidence: Evidence::new(MODULES, &m.line),
                    },
                );
            }
            p.loaded_modules.insert(m.name);
        }
    }

    fn driver(&mut self, p: &mut HostProbe) {
        const SYS_VERSION: &str = "sys/module/nvidia/version";
        const PROC_VERSION: &str = "proc/driver/nvidia/version";
        let nvrm = self.text(PROC_VERSION, FILE_CAP).and_then(|t| parse::nvrm_version(&t));
        let jetson = matches!(p.platform, Platform::Jetson { .. });
        if let Some(t) = self.text(SYS_VERSION, FILE_CAP) {
            if let Ok(v) = t.trim().parse::<DriverVersion>() {
                p.driver = Some(Fact { value: v, evidence: Evidence::new(SYS_VERSION, &t) });
            }
        }
        if let Some(n) = &nvrm {
            p.module_flavor = Some(Fact {
                value: if n.open { ModuleFlavor::Open } else { ModuleFlavor::Proprietary },
                evidence: Evidence::new(PROC_VERSION, &n.line),
            });
            if let Some(num) = &n.number {
                // Jetson's nvgpu prints its L4T release (35.3.1) here. Desktop and data-center
                // driver branches have had three digits for fifteen years, so a two-digit major
                // on a Jetson (or on aarch64) is the L4T number, never a driver version.
                let major: u64 = num.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
                let aarch64 = n.line.contains("aarch64");
                if major < 100 && (jetson || aarch64) {
                    p.l4t_release =
                        Some(Fact { value: num.clone(), evidence: Evidence::new(PROC_VERSION, &n.line) });
                } else if p.driver.is_none() {
                    if let Ok(v) = num.parse::<DriverVersion>() {
                        p.driver = Some(Fact { value: v, evidence: Evidence::new(PROC_VERSION, &n.line) });
                    }
                }
            }
        }
        if p.module_flavor.is_none() {
            // Without the proc file, the taint letters tell: only the proprietary module sets P.
            if let Some(m) = p.modules.get("nvidia") {
                let letters = m.sys_taint.as_deref().unwrap_or(&m.taint);
                let value =
                    if letters.contains('P') { ModuleFlavor::Proprietary } else { ModuleFlavor::Open };
                p.module_flavor = Some(Fact { value, evidence: m.evidence.clone() });
            }
        }
    }

    fn char_devices(&mut self, p: &mut HostProbe) {
        if let Some(t) = self.text_all("proc/devices", FILE_CAP) {
            p.char_majors = nvidia_majors(&t);
        }
    }

    /// Reads a device's PCI sysfs attributes through one opened directory.
    fn pci(&mut self, bus_id: &str, listed: bool) -> PciProbe {
        let base = format!("sys/bus/pci/devices/{bus_id}");
        let mut pci = PciProbe { path: abs(&base), ..PciProbe::default() };
        let dir = match self.fs.open_dir(&base) {
            Ok(d) => d,
            Err(e) => {
                self.note(&base, &e);
                return pci;
            }
        };
        let mut read = |attr: &str| match self.fs.attr(&dir, attr, FILE_CAP) {
            Ok(b) => Some(String::from_utf8_lossy(&b).trim().to_owned()),
            Err(e) => {
                self.note(&format!("{base}/{attr}"), &e);
                None
            }
        };
        // The driver lists only its own (NVIDIA display) devices: vendor and class are known.
        if !listed {
            pci.vendor = read("vendor").as_deref().and_then(parse::hex_u32);
            pci.class = read("class").as_deref().and_then(parse::hex_u32);
        }
        pci.device = read("device").as_deref().and_then(parse::hex_u32);
        pci.current_link_speed = read("current_link_speed");
        pci.max_link_speed = read("max_link_speed");
        pci.current_link_width = read("current_link_width").and_then(|w| w.parse().ok());
        pci.max_link_width = read("max_link_width").and_then(|w| w.parse().ok());
        pci.driver = match HostFs::readlink_in(&dir, "driver") {
            Ok(target) => target.trim_end_matches('/').rsplit('/').next().map(str::to_owned),
            Err(e) => {
                self.note(&format!("{base}/driver"), &e);
                None
            }
        };
        pci
    }

    fn gpus(&mut self, p: &mut HostProbe) {
        const GPUS: &str = "proc/driver/nvidia/gpus";
        let mut gpus = Vec::new();
        for name in self.list(GPUS, MAX_GPUS) {
            let info_path = format!("{GPUS}/{name}/information");
            let Some(text) = self.text(&info_path, FILE_CAP) else { continue };
            let kv = parse::key_values(&text);
            let get = |key: &str| kv.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
            let bus_id = get("Bus Location")
                .as_deref()
                .and_then(parse::bus_id)
                .or_else(|| parse::bus_id(&name))
                .unwrap_or_else(|| name.clone());
            let pci = self.pci(&bus_id, true);
            let model = get("Model");
            gpus.push(GpuProbe {
                index: 0,
                evidence: Evidence::new(
                    &info_path,
                    &format!("Model: {}", model.as_deref().unwrap_or("(none)")),
                ),
                bus_id,
                model,
                uuid: get("GPU UUID"),
                minor: get("Device Minor").and_then(|m| m.parse().ok()),
                excluded: get("GPU Excluded").map(|v| v.eq_ignore_ascii_case("yes")),
                pci,
                soc: None,
            });
        }
        gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
        for (i, g) in gpus.iter_mut().enumerate() {
            g.index = i;
        }
        p.gpus = gpus;
    }

    /// A Jetson's GPU is part of its SOC: nvgpu does not list it in `proc/driver/nvidia/gpus`
    /// and it has no PCI function. The device tree's root `compatible` property (NUL-separated,
    /// most specific first, the SOC last: `nvidia,p3701-0005\0nvidia,tegra234\0`) names the SOC,
    /// and the knowledge base its GPU's compute capability. An unknown SOC adds nothing, and a
    /// Jetson whose driver does list GPUs (a discrete GPU on PCI) keeps those.
    fn integrated_gpu(&mut self, p: &mut HostProbe) {
        const COMPATIBLE: &str = "proc/device-tree/compatible";
        if !p.is_jetson() || !p.gpus.is_empty() {
            return;
        }
        let Some(text) = self.text(COMPATIBLE, FILE_CAP) else { return };
        let Some((compatible, soc)) =
            text.split('\0').find_map(|c| kb::jetson_soc(c).map(|soc| (c.trim().to_owned(), soc)))
        else {
            return;
        };
        p.gpus.push(GpuProbe {
            index: 0,
            bus_id: INTEGRATED_BUS_ID.to_owned(),
            model: Some(soc.model_name()),
            uuid: None,
            minor: None,
            excluded: None,
            evidence: Evidence::new(COMPATIBLE, &compatible),
            pci: PciProbe::default(),
            soc: Some(compatible),
        });
    }

    fn other_pci(&mut self, p: &mut HostProbe) {
        const DEVICES: &str = "sys/bus/pci/devices";
        let known: BTreeSet<&str> = p.gpus.iter().map(|g| g.bus_id.as_str()).collect();
        let mut others = Vec::new();
        for name in self.list(DEVICES, MAX_PCI_DEVICES) {
            if known.contains(name.as_str()) {
                continue;
            }
            let vendor = self.text(&format!("{DEVICES}/{name}/vendor"), FILE_CAP);
            if vendor.as_deref().and_then(parse::hex_u32) != Some(NVIDIA_VENDOR) {
                continue;
            }
            let class = self.text(&format!("{DEVICES}/{name}/class"), FILE_CAP);
            // Class 0x03xxxx: display controllers (VGA 0x0300, 3D 0x0302); NVSwitches and audio
            // functions of the same boards are other classes.
            if class.as_deref().and_then(parse::hex_u32).is_none_or(|c| c >> 16 != 0x03) {
                continue;
            }
            let pci = self.pci(&name, false);
            others.push(PciGpu { bus_id: name, pci });
        }
        p.other_pci_gpus = others;
    }

    fn device_nodes(&mut self, p: &mut HostProbe) {
        let mut names: Vec<String> = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
            .iter()
            .chain(crate::given::INTEGRATED_NODES.iter())
            .map(|s| (*s).to_owned())
            .collect();
        names.extend(p.gpus.iter().filter_map(|g| g.minor).map(|m| format!("nvidia{m}")));
        let dev = match self.fs.open_dir("dev") {
            Ok(fd) => Some(fd),
            Err(e) => {
                self.note("dev", &e);
                None
            }
        };
        for name in names {
            let state = match dev.as_ref().map(|d| HostFs::lstat_in(d, &name)) {
                None | Some(Err(ReadError::NotFound)) => NodeState::Missing,
                Some(Err(e)) => {
                    self.note(&format!("dev/{name}"), &e);
                    NodeState::Missing
                }
                Some(Ok(st)) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::CharacterDevice => NodeState::CharDevice {
                        major: rustix::fs::major(st.st_rdev),
                        minor: rustix::fs::minor(st.st_rdev),
                    },
                    other => NodeState::Other { what: hostfs::type_name(other) },
                },
            };
            p.device_nodes.insert(format!("/dev/{name}"), state);
        }
    }

    /// Follows `dir/name`'s symlink chain inside the host root, at most 8 links. `dir_fd` is
    /// `dir` opened; a link within the same directory reuses it.
    fn chain(&mut self, dir: &str, dir_fd: &OwnedFd, name: &str, stem: &str) -> Option<LibraryProbe> {
        const MAX_HOPS: usize = 8;
        let start = format!("{dir}/{name}");
        let mut path = start.clone();
        let mut chain = Vec::new();
        let mut end = ChainEnd::TooManyLinks;
        let mut other_dir: Option<(String, OwnedFd)> = None;
        for hop in 0..=MAX_HOPS {
            let (d, n) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            let fd = if d == dir {
                Ok(dir_fd)
            } else {
                if other_dir.as_ref().is_none_or(|(od, _)| od != d) {
                    other_dir = self.fs.open_dir(d).ok().map(|fd| (d.to_owned(), fd));
                }
                other_dir.as_ref().map(|(_, fd)| fd).ok_or(ReadError::NotFound)
            };
            match fd.and_then(|fd| HostFs::lstat_in(fd, n).map(|st| (fd, st))) {
                Err(ReadError::NotFound) if hop == 0 => return None,
                Err(ReadError::NotFound) => {
                    end = ChainEnd::Dangling;
                    break;
                }
                Err(e) => {
                    end = ChainEnd::Unusable { why: e.to_string() };
                    break;
                }
                Ok((fd, st)) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::Symlink if hop < MAX_HOPS => match HostFs::readlink_in(fd, n) {
                        Ok(target) => {
                            path = rejoin(&path, &target);
                            chain.push(abs(&path));
                        }
                        Err(e) => {
                            end = ChainEnd::Unusable { why: e.to_string() };
                            break;
                        }
                    },
                    FileType::Symlink => break,
                    FileType::RegularFile => {
                        end = ChainEnd::File;
                        break;
                    }
                    other => {
                        end = ChainEnd::Unusable { why: format!("ends at a {}", hostfs::type_name(other)) };
                        break;
                    }
                },
            }
        }
        let final_name = path.rsplit('/').next().unwrap_or("");
        let version = match end {
            ChainEnd::File => {
                parse::so_version(final_name, stem).filter(|v| v.contains('.')).map(str::to_owned)
            }
            _ => None,
        };
        Some(LibraryProbe { name: name.to_owned(), path: abs(&start), chain, end, version })
    }

    fn libraries(&mut self, p: &mut HostProbe) {
        for dir in LIBRARY_DIRS {
            let fd = match self.fs.open_dir(dir) {
                Ok(fd) => fd,
                Err(e) => {
                    self.note(dir, &e);
                    continue;
                }
            };
            for name in LIBRARIES {
                let stem = name.trim_end_matches(".1");
                if let Some(lib) = self.chain(dir, &fd, name, stem) {
                    p.libraries.push(lib);
                }
            }
            // A toolkit stub named libcuda.so: a regular file, or a link into a stubs directory.
            // WSL2's directory holds regular files by design (Windows mounts cannot hold links).
            if dir == "usr/lib/wsl/lib" {
                continue;
            }
            if let Some(lib) = self.chain(dir, &fd, "libcuda.so", "libcuda.so") {
                let stub = lib.end == ChainEnd::File
                    && (lib.final_name() == "libcuda.so" || lib.final_path().contains("/stubs/"));
                if stub {
                    p.libcuda_stubs.push(lib.final_path().to_owned());
                }
            }
        }
    }

    /// MIG instances per GPU from the capability files, and the recorded `nvidia-smi -L`. On a
    /// host without MIG this is one directory listing and one failed open.
    fn mig(&mut self, p: &mut HostProbe) {
        let numbered =
            |name: &str, prefix: &str| name.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
        for control in ["config", "monitor"] {
            if let Some(m) = self.capability_minor(&format!("{MIG_CAPABILITIES_DIR}/mig/{control}")) {
                p.mig.control_minors.push(m);
            }
        }
        for gpu in self.list(MIG_CAPABILITIES_DIR, MAX_GPUS + 8) {
            let Some(minor) = numbered(&gpu, "gpu") else { continue };
            let mig = format!("{MIG_CAPABILITIES_DIR}/{gpu}/mig");
            let mut gis: Vec<u32> =
                self.list(&mig, MAX_MIG_ENTRIES).iter().filter_map(|n| numbered(n, "gi")).collect();
            gis.sort_unstable();
            for gi in gis {
                let mut cis: Vec<u32> = self
                    .list(&format!("{mig}/gi{gi}"), MAX_MIG_ENTRIES)
                    .iter()
                    .filter_map(|n| numbered(n, "ci"))
                    .collect();
                cis.sort_unstable();
                let gi_minor = self.capability_minor(&format!("{mig}/gi{gi}/access"));
                for ci in cis {
                    let ci_minor = self.capability_minor(&format!("{mig}/gi{gi}/ci{ci}/access"));
                    p.mig.instances.push(MigInstance { gpu_minor: minor, gi, ci, gi_minor, ci_minor });
                }
            }
        }
        if let Some(text) = self.text(MIG_RECORD_PATH, FILE_CAP) {
            p.mig.records = parse::nvidia_smi_list(&text);
        }
    }

    /// `DeviceFileMinor:` of a capability's `access` file: the minor of the `nvidia-caps` node
    /// that grants it (what the toolkit's `internal/nvcaps` reads to give a MIG device).
    fn capability_minor(&mut self, rel: &str) -> Option<u32> {
        let text = self.text(rel, FILE_CAP)?;
        parse::key_values(&text)
            .into_iter()
            .find(|(k, _)| k == "DeviceFileMinor")
            .and_then(|(_, v)| v.parse().ok())
    }

    /// The facts file `stackhook doctor --record` writes, used only while its driver version and
    /// boot id match the running host's.
    fn recorded(&mut self, p: &mut HostProbe) {
        let text = match self.fs.read_text(recorded::FACTS_PATH, recorded::FACTS_CAP) {
            Ok(t) => t,
            Err(ReadError::NotFound) => return,
            Err(e) => {
                p.recorded_ignored = Some(e.to_string());
                return;
            }
        };
        let boot_id = self.text(recorded::BOOT_ID_PATH, FILE_CAP);
        let facts = RecordedFacts::parse(&text)
            .and_then(|f| f.current(p.driver.as_ref().map(|d| &d.value), boot_id.as_deref()).map(|()| f));
        match facts {
            Ok(f) => p.recorded = Some(f),
            Err(why) => p.recorded_ignored = Some(why),
        }
    }

    /// `etc/stackhook/kb.d/*.toml`: read only when the directory exists, at most
    /// [`kb::extra::MAX_FILES`] regular files of at most [`kb::extra::MAX_FILE`] bytes, in name
    /// order. A file that does not read or check is left out with a note.
    fn kb_d(&mut self, p: &mut HostProbe) {
        let dir = kb::extra::KB_D;
        if self.exists(dir).is_none() {
            return;
        }
        let mut names: Vec<String> = self
            .list(dir, kb::extra::MAX_FILES)
            .into_iter()
            .filter(|n| {
                !n.starts_with('.')
                    && Path::new(n).extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"))
            })
            .collect();
        names.sort();
        for name in names {
            let rel = format!("{dir}/{name}");
            let Some(text) = self.text(&rel, kb::extra::MAX_FILE) else { continue };
            match p.kb_extension.add(&abs(&rel), &text) {
                Ok(()) => p.kb_files.push(abs(&rel)),
                Err(e) => self.notes.push(ProbeNote { path: abs(&rel), problem: format!("ignored: {e}") }),
            }
        }
    }

    fn secure_boot(&mut self, p: &mut HostProbe) {
        let var = |name: &str| format!("sys/firmware/efi/efivars/{name}-{EFI_GLOBAL}");
        // efivarfs: 4 bytes of attributes, then the value; one byte for these two variables.
        let mut flag = |rel: String| {
            self.bytes(&rel).and_then(|b| {
                b.get(4)
                    .map(|&v| Fact { value: v == 1, evidence: Evidence::new(&rel, &format!("byte 5 = {v}")) })
            })
        };
        p.secure_boot = flag(var("SecureBoot"));
        p.setup_mode = flag(var("SetupMode"));
    }
}

/// The path a link at `link` (relative to the root) with `target` points to, relative to the
/// root: absolute targets are re-rooted, `..` never climbs above the root.
fn rejoin(link: &str, target: &str) -> String {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        let mut v: Vec<&str> = link.split('/').filter(|c| !c.is_empty()).collect();
        v.pop();
        v
    };
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

impl HostProbe {
    /// Whether module `name` is listed in `proc/modules`.
    pub fn module_loaded(&self, name: &str) -> bool {
        self.loaded_modules.contains(name)
    }

    /// Whether this is a WSL2 host.
    pub fn is_wsl2(&self) -> bool {
        matches!(self.platform, Platform::Wsl2 { .. })
    }

    /// Whether this is a Jetson board.
    pub fn is_jetson(&self) -> bool {
        matches!(self.platform, Platform::Jetson { .. })
    }

    /// Secure Boot is enabled and not in setup mode.
    pub fn secure_boot_enforced(&self) -> bool {
        self.secure_boot.as_ref().is_some_and(|f| f.value)
            && !self.setup_mode.as_ref().is_some_and(|f| f.value)
    }

    /// The state of `/dev/<name>`, `Missing` when it was not looked at.
    pub fn node(&self, name: &str) -> NodeState {
        self.device_nodes.get(&format!("/dev/{name}")).copied().unwrap_or(NodeState::Missing)
    }

    /// The major of character device `name` in `proc/devices` (whole-name match).
    pub fn char_major(&self, name: &str) -> Option<u32> {
        self.char_majors.get(name).copied()
    }

    /// The GPUs a selection names, in the order it names them (a MIG device's parent standing
    /// for it); devices the host does not tie to a GPU are left out ([`HostProbe::resolve`]).
    pub fn select(&self, selection: &DeviceSelection) -> Result<Vec<&GpuProbe>, SelectionError> {
        self.resolve(selection).map(|r| r.gpus)
    }

    /// The devices a selection names: GPUs, and devices whose GPU is not known.
    pub fn resolve(&self, selection: &DeviceSelection) -> Result<Resolved<'_>, SelectionError> {
        match selection {
            DeviceSelection::None | DeviceSelection::NoDevices => Ok(Resolved::default()),
            DeviceSelection::All => Ok(Resolved { gpus: self.gpus.iter().collect(), unresolved: Vec::new() }),
            DeviceSelection::List(ids) => {
                let mut out = Resolved::default();
                for id in ids {
                    match self.find_device(id)? {
                        Found::Gpu(g) => {
                            if !out.gpus.iter().any(|o| o.index == g.index) {
                                out.gpus.push(g);
                            }
                        }
                        Found::Unresolved(u) => out.unresolved.push(u),
                    }
                }
                Ok(out)
            }
        }
    }

    fn find_device(&self, id: &str) -> Result<Found<'_>, SelectionError> {
        let id = id.trim();
        if self.gpus.is_empty() && (self.is_wsl2() || self.is_jetson()) {
            return Err(SelectionError::Unlisted { id: id.to_owned() });
        }
        if id.starts_with(crate::contract::image::VOLUME_MOUNT_DEVICES_ROOT) {
            return Ok(self.unresolved(id, false));
        }
        if id.len() > 4 && id[..4].eq_ignore_ascii_case("MIG-") {
            return self.find_mig_uuid(id);
        }
        if let Some((gpu, mig)) = parse::mig_index(id) {
            return self.find_mig_index(id, gpu, mig).map(Found::Gpu);
        }
        self.find_gpu(id).map(Found::Gpu)
    }

    /// A MIG device by UUID: through the parent the UUID names (`MIG-GPU-<uuid>/<gi>/<ci>`, as
    /// R450 drivers print them), else the recorded `nvidia-smi -L`; else unresolved.
    fn find_mig_uuid(&self, id: &str) -> Result<Found<'_>, SelectionError> {
        let by_uuid = |uuid: &str| {
            self.gpus.iter().find(|g| g.uuid.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(uuid)))
        };
        if let Some(parent) =
            id[4..].split('/').next().filter(|p| p.len() > 4 && p[..4].eq_ignore_ascii_case("GPU-"))
        {
            return by_uuid(parent)
                .map(Found::Gpu)
                .ok_or_else(|| SelectionError::NoSuchGpu { id: id.to_owned() });
        }
        let record = self.mig.records.iter().find(|r| r.uuid.eq_ignore_ascii_case(id));
        match record.and_then(|r| by_uuid(&r.parent_uuid)) {
            Some(parent) => Ok(Found::Gpu(parent)),
            None => Ok(self.unresolved(id, true)),
        }
    }

    /// A MIG index `<gpu>:<mig>`: GPU `gpu`, which must have a MIG device `mig` where the
    /// capability files list its instances.
    fn find_mig_index(&self, id: &str, gpu: usize, mig: usize) -> Result<&GpuProbe, SelectionError> {
        let parent =
            self.gpus.get(gpu).ok_or(SelectionError::NoSuchIndex { index: gpu, count: self.gpus.len() })?;
        let recorded = parent
            .uuid
            .as_deref()
            .map(|u| self.mig.records.iter().filter(|r| r.parent_uuid.eq_ignore_ascii_case(u)).count());
        let listed = parent.minor.map(|m| self.mig.instances.iter().filter(|i| i.gpu_minor == m).count());
        let known = [recorded, listed].into_iter().flatten().max().filter(|&n| n > 0);
        match known {
            Some(count) if mig >= count => Err(SelectionError::NoSuchMig { id: id.to_owned(), gpu, count }),
            _ => Ok(parent),
        }
    }

    fn unresolved(&self, id: &str, mig: bool) -> Found<'_> {
        let with_mig: Vec<&GpuProbe> = self
            .gpus
            .iter()
            .filter(|g| g.minor.is_some_and(|m| self.mig.instances.iter().any(|i| i.gpu_minor == m)))
            .collect();
        let candidates = if mig && !with_mig.is_empty() { with_mig } else { self.gpus.iter().collect() };
        Found::Unresolved(UnresolvedDevice { id: id.to_owned(), candidates })
    }

    fn find_gpu(&self, id: &str) -> Result<&GpuProbe, SelectionError> {
        if let Ok(index) = id.parse::<usize>() {
            return self.gpus.get(index).ok_or(SelectionError::NoSuchIndex { index, count: self.gpus.len() });
        }
        if id.len() > 4 && id[..4].eq_ignore_ascii_case("GPU-") {
            return self
                .gpus
                .iter()
                .find(|g| g.uuid.as_deref().is_some_and(|u| u.eq_ignore_ascii_case(id)))
                .ok_or_else(|| SelectionError::NoSuchGpu { id: id.to_owned() });
        }
        if let Some(bus) = parse::bus_id(id) {
            return self
                .gpus
                .iter()
                .find(|g| g.bus_id == bus)
                .ok_or_else(|| SelectionError::NoSuchGpu { id: id.to_owned() });
        }
        Err(SelectionError::Unsupported { id: id.to_owned() })
    }

    /// The facts requirement expressions are evaluated against, for the selected GPUs.
    ///
    /// A GPU's compute capability comes from the recorded `nvidia-smi` facts, else the knowledge
    /// base (admin rows of `kb.d` first) by PCI device id or model name; its brand from the
    /// knowledge base. `cuda` comes from [`HostProbe::host_cuda`]. What none of them knows stays
    /// unknown, which makes the requirements that need it unverifiable rather than failed.
    ///
    /// Devices whose GPU is not known come after the GPUs: as their candidates' common model when
    /// they share one, else with nothing known. With `none`, the facts have no GPU and
    /// [`HostFacts::no_devices`] set.
    pub fn facts(&self, selection: &DeviceSelection) -> Result<HostFacts, SelectionError> {
        let resolved = self.resolve(selection)?;
        let gpus = resolved
            .gpus
            .iter()
            .map(|g| GpuFacts {
                arch: self.gpu_arch(g).map(|a| a.value),
                brand: self.gpu_model(g).map(|(m, _)| m.brand.clone()),
            })
            .chain(resolved.unresolved.iter().map(|u| {
                let model = u.common_model();
                GpuFacts { arch: model.map(|m| m.compute_capability), brand: model.map(|m| m.brand.clone()) }
            }))
            .collect();
        let driver = self.driver.as_ref().map(|d| d.value.clone());
        let cuda = self.host_cuda();
        Ok(HostFacts {
            cuda: cuda.cuda,
            cuda_bound: cuda.bound,
            driver,
            kernel: self.kernel.as_ref().map(|k| k.value.clone()),
            machine: Some(self.machine.value.clone()),
            platform: Some(self.platform.name().to_owned()),
            modules: self.loaded_modules.clone(),
            gpus,
            no_devices: matches!(selection, DeviceSelection::NoDevices),
        })
    }

    /// The knowledge base's row for a GPU (admin rows of `kb.d` first), and where it comes from.
    pub fn gpu_model<'a>(&'a self, g: &'a GpuProbe) -> Option<(&'a kb::GpuModel, Provenance)> {
        let ext = &self.kb_extension;
        let id = g.pci.device_id();
        let model = g.model.as_deref().filter(|_| !g.model_unknown() && g.soc.is_none());
        let admin =
            id.and_then(|id| ext.gpu_by_pci_id(id)).or_else(|| model.and_then(|m| ext.gpu_by_model_name(m)));
        if let Some((m, file)) = admin {
            return Some((
                m,
                Provenance { path: format!("(kb.d) {file}"), value: format!("{} = {}", gpu_key(g), m.name) },
            ));
        }
        let m = g.kb_model()?;
        let table = if g.soc.is_some() { "jetson_socs.toml" } else { "gpus.toml" };
        Some((
            m,
            Provenance {
                path: format!("(knowledge base) {table}"),
                value: format!("{} = {}", gpu_key(g), m.name),
            },
        ))
    }

    /// A GPU's compute capability: what `nvidia-smi` recorded for it, else the knowledge base's.
    pub fn gpu_arch(&self, g: &GpuProbe) -> Option<GpuArch> {
        if let Some(cc) = self
            .recorded
            .as_ref()
            .and_then(|r| r.gpu(g.uuid.as_deref(), &g.bus_id))
            .and_then(|r| r.compute_cap)
        {
            return Some(GpuArch {
                value: cc,
                how: Provenance {
                    path: format!("/{}", recorded::FACTS_PATH),
                    value: format!(
                        "nvidia-smi compute_cap {cc} (recorded for driver {})",
                        self.recorded.as_ref().map_or(String::new(), |r| r.driver_version.to_string())
                    ),
                },
            });
        }
        let (m, how) = self.gpu_model(g)?;
        Some(GpuArch {
            value: m.compute_capability,
            how: Provenance {
                value: format!("{}, compute capability {}", how.value, m.compute_capability),
                ..how
            },
        })
    }

    /// The highest CUDA version the driver supports: what `nvidia-smi` recorded, else an admin
    /// branch row, else the knowledge base's branch table (exact for a branch it lists, a range
    /// otherwise); on a Jetson without a driver version, the CUDA of its L4T release (a range
    /// where the SOC runs the CUDA upgrade package).
    pub fn host_cuda(&self) -> HostCuda {
        if let Some(r) = &self.recorded {
            if let Some(c) = &r.cuda_version {
                return HostCuda {
                    cuda: Some(c.clone()),
                    bound: CudaBound::Exact,
                    how: Provenance {
                        path: format!("/{}", recorded::FACTS_PATH),
                        value: format!(
                            "nvidia-smi: CUDA Version {c} (driver {}, recorded {})",
                            r.driver_version, r.recorded_at
                        ),
                    },
                };
            }
        }
        let Some(driver) = self.driver.as_ref().map(|d| &d.value) else {
            return self.host_cuda_without_driver();
        };
        if let Some((c, file)) = self.kb_extension.branch_cuda(driver) {
            return HostCuda {
                cuda: Some(c.clone()),
                bound: CudaBound::Exact,
                how: Provenance {
                    path: format!("(kb.d) {file}"),
                    value: format!("driver branch {} supports CUDA up to {c}", driver.branch()),
                },
            };
        }
        match kb::driver_cuda(driver) {
            kb::DriverCuda::Exact { cuda, branch, .. } => HostCuda {
                how: Provenance {
                    path: "(knowledge base) driver_branches.toml".to_owned(),
                    value: format!("driver branch {branch} supports CUDA up to {cuda}"),
                },
                cuda: Some(cuda),
                bound: CudaBound::Exact,
            },
            kb::DriverCuda::Bounded { at_least, below, why } => {
                // Admin rows narrow the range: a branch row below the driver raises the floor,
                // a toolkit whose minimum is of a newer branch lowers the ceiling.
                let ext = &self.kb_extension;
                let at_least =
                    at_least.into_iter().chain(ext.cuda_at_or_below(driver.branch()).cloned()).max();
                let below = below.into_iter().chain(ext.toolkit_above(driver.branch()).cloned()).min();
                Self::bounded_cuda(at_least, below, &why)
            }
        }
    }

    /// A [`HostCuda`] known only as a range, with why.
    fn bounded_cuda(at_least: Option<CudaVersion>, below: Option<CudaVersion>, why: &str) -> HostCuda {
        HostCuda {
            how: Provenance {
                path: "(knowledge base) driver_branches.toml".to_owned(),
                value: format!("{why}; confirm with nvidia-smi (stackhook doctor --record saves it)"),
            },
            cuda: at_least,
            bound: CudaBound::Range { below },
        }
    }

    /// [`HostProbe::host_cuda`] with no driver version: Jetson's L4T release, WSL2's unknown
    /// Windows driver, or no driver (no CUDA).
    fn host_cuda_without_driver(&self) -> HostCuda {
        let unknown = |why: &str| HostCuda {
            cuda: None,
            bound: CudaBound::Range { below: None },
            how: Provenance { path: "(knowledge base)".to_owned(), value: why.to_owned() },
        };
        if self.is_wsl2() {
            return unknown("WSL2: the Windows driver's version cannot be read from files");
        }
        if !self.is_jetson() {
            return HostCuda {
                cuda: None,
                bound: CudaBound::Exact,
                how: Provenance {
                    path: "/proc/driver/nvidia/version".to_owned(),
                    value: "no driver loaded".to_owned(),
                },
            };
        }
        let Some(release) = self.l4t_version() else {
            return unknown("Jetson: the L4T release is not known");
        };
        let Some(row) = kb::l4t_release(&release) else {
            return unknown(&format!("Jetson Linux (L4T) R{release} is not in the knowledge base"));
        };
        let soc = self.gpus.first().and_then(|g| g.soc.as_deref()).and_then(kb::jetson_soc);
        let compat = match (row.cuda_compat, soc.and_then(|s| s.forward_compat)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        };
        let jetpack = row.jetpack.split('.').next().unwrap_or(&row.jetpack);
        let base = format!("L4T R{release} = JetPack {jetpack} = CUDA {}", row.cuda);
        let (bound, value) = match compat {
            Some(false) => {
                (CudaBound::Exact, format!("{base}; no CUDA upgrade package for this board and release"))
            }
            Some(true) => (
                CudaBound::Range { below: soc.and_then(|s| s.cuda_compat_below.clone()) },
                format!("{base}; newer CUDA runs only through the CUDA upgrade (cuda-compat) package"),
            ),
            None => (
                CudaBound::Range { below: None },
                format!("{base}; whether newer CUDA runs through cuda-compat is not known"),
            ),
        };
        HostCuda {
            cuda: Some(row.cuda.clone()),
            bound,
            how: Provenance { path: "(knowledge base) jetson_socs.toml".to_owned(), value },
        }
    }

    /// The L4T release as a version (`35.4.1`): `proc/driver/nvidia/version`'s number, else the
    /// first line of `etc/nv_tegra_release` (`# R35 (release), REVISION: 4.1, ...`).
    pub fn l4t_version(&self) -> Option<CudaVersion> {
        if let Some(f) = &self.l4t_release {
            if let Ok(v) = f.value.parse() {
                return Some(v);
            }
        }
        let Platform::Jetson { release: Some(line), .. } = &self.platform else { return None };
        let major = line.trim_start_matches('R').split(|c: char| !c.is_ascii_digit()).next()?;
        let revision = line.split("REVISION:").nth(1).map(|r| r.split(',').next().unwrap_or("").trim());
        let text = match revision {
            Some(r) if !r.is_empty() => format!("{major}.{r}"),
            _ => major.to_owned(),
        };
        text.parse().ok()
    }
}

/// How a GPU is named in provenance: its PCI id when it has one.
fn gpu_key(g: &GpuProbe) -> String {
    match (&g.soc, g.pci.device) {
        (Some(soc), _) => soc.clone(),
        (None, Some(d)) => format!("PCI 0x{d:04x}"),
        (None, None) => format!("model {:?}", g.model.as_deref().unwrap_or("")),
    }
}

#[cfg(test)]
mod tests;
