//! Fixture host trees for tests: a directory laid out like `/` of a GPU host.
//!
//! A [`FixtureSpec`] describes the host (driver, GPUs, modules, libraries, firmware); its
//! [`build`](FixtureSpec::build) writes the files the probe reads, in the formats the kernel and
//! the driver print them (`/proc/driver/nvidia/*` as NVIDIA's open-gpu-kernel-modules
//! `kernel-open/nvidia/nv-procfs.c` writes them; `/proc/modules` and `/sys` as the kernel does). [`Preset`] lists the scenarios
//! the doctor is tested against, each with the requirements it is paired with and the finding
//! it must produce; end-to-end tests use the same presets.
//!
//! Device nodes are made with `mknod` when the process may (root with `CAP_MKNOD`). Otherwise a
//! regular file stands in, which the probe reports as "not a character device", never as a
//! device; [`FixtureHost::real_device_nodes`] tells tests whether node checks can be asserted.
//!
//! The spec, its builder methods and the host on disk are here; writing the tree is in `write`,
//! the presets in `preset`, CDI specs for fixture hosts in [`cdi`].
//!
//! Test support, not part of the hook: the module is compiled for this crate's unit tests and
//! with the `fixture` feature (benchmarks, examples, the end-to-end tests), never into the
//! shipped binary.

pub mod cdi;
mod preset;
mod write;

pub use preset::{Preset, CUDA_12_1_REQUIRE};

use std::io;
use std::path::{Path, PathBuf};

/// A fixture file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write fixture {path}: {source}")]
pub struct FixtureError {
    /// The path being written.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// The dynamic major the fixture gives `nvidia-uvm` (as on the reference host).
pub const UVM_MAJOR: u32 = 510;

/// The kernel boot id every fixture host has (`proc/sys/kernel/random/boot_id`).
pub const FIXTURE_BOOT_ID: &str = "5eed0b00-0000-4000-8000-00000000b001";

/// The NVIDIA frontend major (fixed).
pub const NVIDIA_MAJOR: u32 = 195;

/// The dynamic major a Jetson fixture's nvgpu nodes get.
pub const JETSON_NVHOST_MAJOR: u32 = 497;

/// One GPU of a fixture host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureGpu {
    /// PCI bus id (`0000:18:00.0`).
    pub bus_id: String,
    /// PCI device id (`0x2330`).
    pub device_id: u16,
    /// `Model:` as the driver prints it.
    pub model: String,
    /// `Device Minor:`.
    pub minor: u32,
    /// `GPU UUID:`.
    pub uuid: String,
    /// `GPU Excluded: Yes`.
    pub excluded: bool,
    /// The link trained below its maximum (`8.0 GT/s` x8 of `32.0 GT/s` x16).
    pub degraded_link: bool,
}

/// Which `libcuda.so.1` the fixture installs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Libcuda {
    /// The same version as the driver package.
    Driver,
    /// Another version (a driver upgraded without a reboot).
    Version(String),
    /// None at all.
    Missing,
}

/// A description of a fixture host; build it with [`FixtureSpec::build`].
// Independent switches of a test fixture, each set by its own builder method.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureSpec {
    driver: String,
    module_loaded: bool,
    open_module: bool,
    module_taint: Option<String>,
    modules: Vec<String>,
    nouveau: bool,
    gpus: Vec<FixtureGpu>,
    libcuda: Libcuda,
    libcuda_stub: bool,
    secure_boot: Option<bool>,
    kernel: String,
    machine: String,
    wsl2: bool,
    jetson: Option<Vec<String>>,
    l4t: (u32, String),
    uvm_node: bool,
    device_nodes: bool,
    /// MIG devices per GPU index: (GPU instance id, compute instance id) each.
    mig: Vec<(usize, u32, u32)>,
    /// Whether `etc/stackhook/mig-devices.txt` records the MIG devices (`nvidia-smi -L`).
    mig_recorded: bool,
}

/// The root `compatible` property of a Jetson AGX Orin developer kit: carrier board p3737-0000
/// with module p3701-0005, then the SOC, most specific first as device trees list them.
pub const JETSON_AGX_ORIN_COMPATIBLE: [&str; 3] =
    ["nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234"];

/// The root `compatible` property of a Jetson TX2 NX on its carrier board (Linux
/// `tegra186-p3509-0000+p3636-0001.dts`).
pub const JETSON_TX2_NX_COMPATIBLE: [&str; 3] =
    ["nvidia,p3509-0000+p3636-0001", "nvidia,p3636-0001", "nvidia,tegra186"];

/// The modules a healthy host with the proprietary driver has loaded.
const DRIVER_MODULES: [&str; 4] = ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"];

impl Default for FixtureSpec {
    fn default() -> Self {
        Self::healthy_h100()
    }
}

impl FixtureSpec {
    /// A host with no GPU and no driver: only a kernel.
    pub fn bare() -> Self {
        Self {
            driver: "535.104.05".to_owned(),
            module_loaded: false,
            open_module: false,
            module_taint: None,
            modules: Vec::new(),
            nouveau: false,
            gpus: Vec::new(),
            libcuda: Libcuda::Missing,
            libcuda_stub: false,
            secure_boot: None,
            kernel: "5.15.0-105-generic".to_owned(),
            machine: "x86_64".to_owned(),
            wsl2: false,
            jetson: None,
            l4t: (35, "4.1".to_owned()),
            uvm_node: true,
            device_nodes: true,
            mig: Vec::new(),
            mig_recorded: false,
        }
    }

    /// Driver 535.104.05 with an A100-SXM4-40GB in MIG mode (two MIG devices) at index 0 and an
    /// H100 80GB HBM3 in MIG mode (one) at index 1, `nvidia-smi -L` recorded.
    pub fn mig_node() -> Self {
        Self::healthy_h100s(0)
            .gpu("0000:18:00.0", 0x20b0, "NVIDIA A100-SXM4-40GB", 0, &fixture_uuid(0))
            .gpu("0000:2a:00.0", 0x2330, "NVIDIA H100 80GB HBM3", 1, &fixture_uuid(1))
            .mig(0, 2)
            .mig(1, 1)
    }

    /// Driver 535.104.05 (proprietary), one H100 80GB HBM3, kernel 5.15.0-105-generic.
    pub fn healthy_h100() -> Self {
        Self::healthy_h100s(1)
    }

    /// Driver 535.104.05 with `n` H100s (at most 64).
    pub fn healthy_h100s(n: u32) -> Self {
        let mut s = Self::bare();
        s.module_loaded = true;
        s.modules = DRIVER_MODULES.iter().map(|m| (*m).to_owned()).collect();
        s.libcuda = Libcuda::Driver;
        for i in 0..n.min(64) {
            // Eight-GPU HGX boards put their GPUs on separate root ports: 18, 2a, 3a, 5d, ...
            let bus = 0x18 + i * 0x12;
            s = s.gpu(&format!("0000:{bus:02x}:00.0"), 0x2330, "NVIDIA H100 80GB HBM3", i, &fixture_uuid(i));
        }
        s
    }

    /// The driver package's version (module and user-space libraries alike).
    #[must_use]
    pub fn driver(mut self, version: &str) -> Self {
        version.clone_into(&mut self.driver);
        self
    }

    /// The open kernel module (open-gpu-kernel-modules) instead of the proprietary one.
    #[must_use]
    pub fn open_module(mut self) -> Self {
        self.open_module = true;
        self
    }

    /// Taint letters of the `nvidia*` modules (default `POE`, or `OE` for the open module).
    #[must_use]
    pub fn module_taint(mut self, letters: &str) -> Self {
        self.module_taint = Some(letters.to_owned());
        self
    }

    /// The `nvidia` kernel module is not loaded (its user-space stays installed).
    #[must_use]
    pub fn no_driver(mut self) -> Self {
        self.module_loaded = false;
        self.modules.retain(|m| !m.starts_with("nvidia"));
        self
    }

    /// Adds a GPU.
    #[must_use]
    pub fn gpu(mut self, bus_id: &str, device_id: u16, model: &str, minor: u32, uuid: &str) -> Self {
        self.gpus.push(FixtureGpu {
            bus_id: bus_id.to_owned(),
            device_id,
            model: model.to_owned(),
            minor,
            uuid: uuid.to_owned(),
            excluded: false,
            degraded_link: false,
        });
        self
    }

    /// Replaces every GPU by `n` copies of one model.
    #[must_use]
    pub fn gpus_of(mut self, n: u32, device_id: u16, model: &str) -> Self {
        self.gpus.clear();
        for i in 0..n.min(64) {
            let bus = 0x18 + i * 0x12;
            self = self.gpu(&format!("0000:{bus:02x}:00.0"), device_id, model, i, &fixture_uuid(i));
        }
        self
    }

    /// Loads a kernel module (listed in `proc/modules`).
    #[must_use]
    pub fn module(mut self, name: &str) -> Self {
        if !self.modules.iter().any(|m| m == name) {
            self.modules.insert(0, name.to_owned());
        }
        self
    }

    /// Unloads a kernel module (`nvidia_uvm` also drops its `proc/devices` line and node).
    #[must_use]
    pub fn without_module(mut self, name: &str) -> Self {
        self.modules.retain(|m| m != name);
        if name == "nvidia" {
            self.module_loaded = false;
        }
        self
    }

    /// Loads `nouveau`; GPUs the `nvidia` module does not hold are bound to it.
    #[must_use]
    pub fn nouveau(mut self) -> Self {
        self.nouveau = true;
        self
    }

    /// Installs `libcuda.so.1 -> libcuda.so.<version>` (and NVML likewise) whatever the module.
    #[must_use]
    pub fn libcuda_version(mut self, version: &str) -> Self {
        self.libcuda = Libcuda::Version(version.to_owned());
        self
    }

    /// Installs no driver libraries.
    #[must_use]
    pub fn no_libcuda(mut self) -> Self {
        self.libcuda = Libcuda::Missing;
        self
    }

    /// Puts a toolkit stub `libcuda.so` (a regular file) in the library directory.
    #[must_use]
    pub fn libcuda_stub(mut self) -> Self {
        self.libcuda_stub = true;
        self
    }

    /// Turns Secure Boot on. With `unsigned`, the kernel refuses the unsigned `nvidia` module:
    /// no `nvidia*` module is loaded and the GPUs stay unbound.
    #[must_use]
    pub fn secure_boot(mut self, unsigned: bool) -> Self {
        self.secure_boot = Some(unsigned);
        if unsigned {
            self = self.no_driver();
        }
        self
    }

    /// The kernel release.
    #[must_use]
    pub fn kernel(mut self, release: &str) -> Self {
        release.clone_into(&mut self.kernel);
        self
    }

    /// The machine (`proc/sys/kernel/arch`).
    #[must_use]
    pub fn machine(mut self, machine: &str) -> Self {
        machine.clone_into(&mut self.machine);
        self
    }

    /// A WSL2 guest: `/dev/dxg`, the libraries Windows mounts in `usr/lib/wsl/lib`, no
    /// `nvidia` module and no PCI GPUs.
    #[must_use]
    pub fn wsl2(mut self) -> Self {
        self = self.no_driver();
        self.wsl2 = true;
        self.gpus.clear();
        self.libcuda = Libcuda::Missing;
        "5.15.167.4-microsoft-standard-WSL2".clone_into(&mut self.kernel);
        self
    }

    /// A Jetson board (L4T R35.4.1, kernel 5.10.120-tegra, aarch64) whose device tree's root
    /// `compatible` property lists `compatible` (board, module, SOC; see
    /// [`JETSON_AGX_ORIN_COMPATIBLE`]): `nvgpu` loaded, no `nvidia` module, no PCI GPUs, no
    /// `/dev/nvidia*` nodes and no driver libraries in the probed directories (L4T keeps them in
    /// `usr/lib/aarch64-linux-gnu/tegra`).
    #[must_use]
    pub fn jetson(mut self, compatible: &[&str]) -> Self {
        self = self.no_driver().module("nvgpu");
        self.gpus.clear();
        self.libcuda = Libcuda::Missing;
        self.jetson = Some(compatible.iter().map(|c| (*c).to_owned()).collect());
        "5.10.120-tegra".clone_into(&mut self.kernel);
        "aarch64".clone_into(&mut self.machine);
        self
    }

    /// `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools` are not created.
    #[must_use]
    pub fn no_uvm_node(mut self) -> Self {
        self.uvm_node = false;
        self
    }

    /// No `/dev/nvidia*` node at all.
    #[must_use]
    pub fn no_device_nodes(mut self) -> Self {
        self.device_nodes = false;
        self
    }

    /// The first GPU reports `Model: Unknown`.
    #[must_use]
    pub fn model_unknown(mut self) -> Self {
        if let Some(g) = self.gpus.first_mut() {
            "Unknown".clone_into(&mut g.model);
        }
        self
    }

    /// GPU `index` is excluded by the driver (`GPU Excluded: Yes`).
    #[must_use]
    pub fn excluded(mut self, index: usize) -> Self {
        if let Some(g) = self.gpus.get_mut(index) {
            g.excluded = true;
        }
        self
    }

    /// GPU `index`'s PCI Express link runs below its maximum.
    #[must_use]
    pub fn degraded_link(mut self, index: usize) -> Self {
        if let Some(g) = self.gpus.get_mut(index) {
            g.degraded_link = true;
        }
        self
    }

    /// GPU `index` is in MIG mode with `count` MIG devices (GPU instances 1.., one compute
    /// instance each), listed in the driver's capability files; the recorded `nvidia-smi -L`
    /// (see [`FixtureSpec::mig_unrecorded`]) lists them with UUIDs from [`fixture_mig_uuid`].
    #[must_use]
    pub fn mig(mut self, index: usize, count: u32) -> Self {
        self.mig.extend((1..=count).map(|gi| (index, gi, 0)));
        self.mig_recorded = true;
        self
    }

    /// No `etc/stackhook/mig-devices.txt`: which GPU a MIG UUID is on is not recorded.
    #[must_use]
    pub fn mig_unrecorded(mut self) -> Self {
        self.mig_recorded = false;
        self
    }

    /// The MIG devices: (GPU index, GPU instance, compute instance).
    pub fn mig_list(&self) -> &[(usize, u32, u32)] {
        &self.mig
    }

    /// The GPUs, in index order.
    pub fn gpu_list(&self) -> &[FixtureGpu] {
        &self.gpus
    }

    /// The Jetson Linux (L4T) release `etc/nv_tegra_release` names: `R<major>`, `REVISION:
    /// <revision>` (`l4t(32, "7.1")` for L4T R32.7.1, `JetPack` 4.6.1).
    #[must_use]
    pub fn l4t(mut self, major: u32, revision: &str) -> Self {
        self.l4t = (major, revision.to_owned());
        self
    }
}

/// A stable, UUID-shaped MIG device id for MIG device `n` of fixture GPU `gpu`.
pub fn fixture_mig_uuid(gpu: u32, n: u32) -> String {
    format!("MIG-{:08x}-{n:04x}-4000-8000-{:012x}", 0x0a1a_0000 + gpu, u64::from(gpu) * 0x1111)
}

/// A stable, UUID-shaped GPU id for fixture GPU `i`.
pub fn fixture_uuid(i: u32) -> String {
    format!("GPU-{:08x}-0000-4000-8000-{:012x}", 0x5eed_0000 + i, u64::from(i) * 0x1111)
}

/// A fixture host tree on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureHost {
    root: PathBuf,
    real_device_nodes: bool,
}

impl FixtureHost {
    /// Builds [`FixtureSpec::healthy_h100`] into `dir`.
    pub fn healthy_h100(dir: &Path) -> Result<Self, FixtureError> {
        FixtureSpec::healthy_h100().build(dir)
    }

    /// The host root to probe.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether `/dev` holds real character devices (false: marker files, so checks of device
    /// nodes cannot pass and tests that assert them should be skipped).
    pub fn real_device_nodes(&self) -> bool {
        self.real_device_nodes
    }

    /// Makes the host one whose cgroups systemd manages on the unified hierarchy: cgroup v2's
    /// `cgroup.controllers` and systemd's `run/systemd/system` (what `sd_booted()` checks).
    pub fn systemd_cgroup2(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join("sys/fs/cgroup"))?;
        std::fs::write(self.root.join("sys/fs/cgroup/cgroup.controllers"), "cpu io memory pids\n")?;
        std::fs::create_dir_all(self.root.join("run/systemd/system"))
    }
}

#[cfg(test)]
mod tests {
    use super::write::version_lt;
    use super::*;

    #[test]
    fn presets_have_unique_names_and_build() {
        let mut names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Preset::ALL.len());
        let dir = tempfile::tempdir().unwrap();
        for p in Preset::ALL {
            let host = p.build(&dir.path().join(p.name())).unwrap();
            assert!(host.root().join("proc/sys/kernel/osrelease").is_file(), "{}", p.name());
            // Allowed with a warning: the host cannot tell (WSL2's driver, an unknown GPU).
            assert_eq!(
                p.allowed(),
                p.expected_code().is_none() || matches!(p, Preset::Wsl2 | Preset::UnknownGpu)
            );
        }
    }

    #[test]
    fn frontend_major_name_follows_the_driver_version() {
        assert!(version_lt("535.104.05", &[550, 40]));
        assert!(!version_lt("550.40", &[550, 40]));
        assert!(!version_lt("570.26", &[550, 40]));
        assert_eq!(fixture_uuid(1), "GPU-5eed0001-0000-4000-8000-000000001111");
    }
}
