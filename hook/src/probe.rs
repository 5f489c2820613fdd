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
//! ([`kb::extra`](crate::contract::kb::extra)), and from the built-in tables; what none of them
//! knows stays unknown (a range for the CUDA version, `None` for a compute capability), which
//! makes a requirement unverifiable, not failed. [`HostProbe::host_cuda`] and
//! [`HostProbe::gpu_arch`] say how each was obtained.
//!
//! The probe's parts, each reading its files in [`probe`] and answering questions about them on
//! [`HostProbe`]:
//!
//! - `kernel`: the platform, the kernel, the driver's modules and version, Secure Boot.
//! - `gpus`: the GPUs the driver lists, a Jetson's integrated GPU, unlisted NVIDIA PCI display
//!   controllers, and each GPU's model and compute capability.
//! - `devices`: the driver's `/dev` nodes.
//! - `libraries`: the driver's user-space libraries and their symlink chains.
//! - `mig`: MIG instances and the recorded `nvidia-smi -L`.
//! - `admin`: the recorded `nvidia-smi` facts and `kb.d` rows an administrator added.
//! - `select`: the GPUs a container's `NVIDIA_VISIBLE_DEVICES` names.
//! - `cuda`: the highest CUDA version the driver supports.
//! - [`parse`]: the parsers of the files' formats; [`recorded`]: the recorded facts file;
//!   `hostfs`: capped reads that never leave the host root.

mod admin;
mod cuda;
mod devices;
mod gpus;
mod hostfs;
mod kernel;
mod libraries;
mod mig;
pub mod parse;
pub mod recorded;
mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use cuda::HostCuda;
pub use devices::{NodeState, INTEGRATED_NODES};
pub use gpus::{GpuArch, GpuProbe, PciGpu, PciProbe, INTEGRATED_BUS_ID, NVIDIA_VENDOR};
pub use hostfs::{HostFs, ReadError};
pub use kernel::{ModuleFlavor, ModuleProbe, Platform};
pub use libraries::{ChainEnd, LibraryProbe, LIBRARIES, LIBRARY_DIRS};
pub use mig::{MigInstance, MigProbe, MIG_CAPABILITIES_DIR, MIG_RECORD_PATH};
pub use parse::MigRecord;
pub use select::{Resolved, SelectionError, UnresolvedDevice};

use crate::contract::image::DeviceSelection;
use crate::contract::kb::extra::Extension;
use crate::contract::require::{GpuFacts, HostFacts};
use crate::contract::version::{DriverVersion, KernelRelease};
use recorded::RecordedFacts;

/// Cap for one file read (proc and sysfs files are a few hundred bytes).
const FILE_CAP: usize = 64 * 1024;

/// At most this many GPUs are read from `proc/driver/nvidia/gpus`.
pub const MAX_GPUS: usize = 64;

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
    r.text_all("proc/devices", FILE_CAP).map(|t| kernel::nvidia_majors(&t)).unwrap_or_default()
}

/// The file system plus the notes of failed reads. The generic reads are here; each part of the
/// probe adds the reads of its own files (`impl Reader` in its module).
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

    fn exists(&self, rel: &str) -> Option<rustix::fs::Stat> {
        self.fs.lstat(rel).ok()
    }
}

impl HostProbe {
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
}

#[cfg(test)]
mod tests;
