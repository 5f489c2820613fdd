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

pub mod cdi;

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode};

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

    /// Writes the host tree into `dir` (created if needed; should be empty).
    pub fn build(&self, dir: &Path) -> Result<FixtureHost, FixtureError> {
        let mut w = Writer { root: dir.to_path_buf(), real_nodes: None };
        w.mkdir("")?;
        self.write_kernel(&mut w)?;
        self.write_modules(&mut w)?;
        self.write_pci(&mut w)?;
        if self.module_loaded {
            self.write_driver(&mut w)?;
        }
        self.write_libraries(&mut w)?;
        if self.secure_boot.is_some() {
            let var =
                |name: &str| format!("sys/firmware/efi/efivars/{name}-8be4df61-93ca-11d2-aa0d-00e098032b8c");
            w.file(&var("SecureBoot"), [6, 0, 0, 0, 1])?;
            w.file(&var("SetupMode"), [6, 0, 0, 0, 0])?;
        }
        if self.wsl2 {
            w.node("dev/dxg", 10, 63)?;
            for lib in ["libcuda.so", "libcuda.so.1", "libcuda.so.1.1", "libnvidia-ml.so.1"] {
                w.file(&format!("usr/lib/wsl/lib/{lib}"), b"\x7fELF fixture: Windows-provided library\n")?;
            }
        }
        if let Some(compatible) = &self.jetson {
            // As L4T writes it (the first line is what the probe reads).
            w.file(
                "etc/nv_tegra_release",
                format!(
                    "# R{} (release), REVISION: {}, GCID: 33958178, BOARD: t186ref, EABI: aarch64\n",
                    self.l4t.0, self.l4t.1
                ),
            )?;
            // A device-tree string property: each string NUL-terminated.
            let property: String = compatible.iter().flat_map(|c| [c.as_str(), "\0"]).collect();
            w.file("proc/device-tree/compatible", property)?;
            // nvgpu's channel and control nodes and nvmap (numbers of this fixture's own).
            w.node("dev/nvhost-ctrl-gpu", JETSON_NVHOST_MAJOR, 1)?;
            w.node("dev/nvhost-gpu", JETSON_NVHOST_MAJOR, 2)?;
            w.node("dev/nvmap", 10, 62)?;
        }
        if self.mig_recorded {
            w.file("etc/stackhook/mig-devices.txt", self.nvidia_smi_list())?;
        }
        w.mkdir("dev")?;
        Ok(FixtureHost { root: dir.to_path_buf(), real_device_nodes: w.real_nodes.unwrap_or(true) })
    }

    /// What `nvidia-smi -L` prints for this host.
    fn nvidia_smi_list(&self) -> String {
        let mut out = String::new();
        for (i, g) in self.gpus.iter().enumerate() {
            let _ = writeln!(out, "GPU {i}: {} (UUID: {})", g.model, g.uuid);
            for (n, _) in self.mig.iter().filter(|(gpu, _, _)| *gpu == i).enumerate() {
                let _ = writeln!(
                    out,
                    "  MIG 3g.40gb     Device  {n}: (UUID: {})",
                    fixture_mig_uuid(u32::try_from(i).unwrap_or(0), u32::try_from(n).unwrap_or(0))
                );
            }
        }
        out
    }

    /// The driver's MIG capability files: `gpu<minor>/mig/gi<G>/access` and `.../ci<C>/access`,
    /// each with the minor of the `nvidia-caps` device node that grants it.
    fn write_mig(&self, w: &mut Writer) -> Result<(), FixtureError> {
        let caps = "proc/driver/nvidia/capabilities";
        w.file(
            &format!("{caps}/mig/config"),
            "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
        )?;
        w.file(
            &format!("{caps}/mig/monitor"),
            "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
        )?;
        for (k, (gpu, gi, ci)) in self.mig.iter().enumerate() {
            let Some(g) = self.gpus.get(*gpu) else { continue };
            let dir = format!("{caps}/gpu{}/mig/gi{gi}", g.minor);
            let minor = 3 + k * 2;
            w.file(
                &format!("{dir}/access"),
                format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
            )?;
            w.file(
                &format!("{dir}/ci{ci}/access"),
                format!("DeviceFileMinor: {}\nDeviceFileMode: 292\nDeviceFileModify: 1\n", minor + 1),
            )?;
        }
        Ok(())
    }

    fn taint(&self) -> String {
        self.module_taint.clone().unwrap_or_else(|| if self.open_module { "OE" } else { "POE" }.to_owned())
    }

    fn uvm_loaded(&self) -> bool {
        self.modules.iter().any(|m| m == "nvidia_uvm")
    }

    /// The Jetson Linux (L4T) release `etc/nv_tegra_release` names: `R<major>`, `REVISION:
    /// <revision>` (`l4t(32, "7.1")` for L4T R32.7.1, `JetPack` 4.6.1).
    #[must_use]
    pub fn l4t(mut self, major: u32, revision: &str) -> Self {
        self.l4t = (major, revision.to_owned());
        self
    }

    fn write_kernel(&self, w: &mut Writer) -> Result<(), FixtureError> {
        w.file("proc/sys/kernel/osrelease", format!("{}\n", self.kernel))?;
        w.file("proc/sys/kernel/arch", format!("{}\n", self.machine))?;
        w.file("proc/sys/kernel/random/boot_id", format!("{FIXTURE_BOOT_ID}\n"))?;
        // Bits of `tainted`: P = 1, O = 4096, E = 8192 (Documentation/admin-guide/tainted-kernels).
        let mut tainted = 0u32;
        if self.module_loaded {
            let t = self.taint();
            for (letter, bit) in [('P', 1), ('O', 4096), ('E', 8192)] {
                if t.contains(letter) {
                    tainted |= bit;
                }
            }
        }
        w.file("proc/sys/kernel/tainted", format!("{tainted}\n"))?;
        let mut devices = String::from("Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n");
        if self.module_loaded {
            // The 195 major was named nvidia-frontend before 550.40 and nvidia/nvidiactl after.
            if version_lt(&self.driver, &[550, 40]) {
                devices.push_str("195 nvidia-frontend\n");
            } else {
                devices.push_str("195 nvidia\n195 nvidiactl\n");
            }
            devices.push_str("236 nvidia-caps-imex-channels\n237 nvidia-caps\n");
            if self.uvm_loaded() {
                let _ = writeln!(devices, "{UVM_MAJOR} nvidia-uvm");
            }
        }
        devices.push_str("\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n");
        w.file("proc/devices", devices)
    }

    fn write_modules(&self, w: &mut Writer) -> Result<(), FixtureError> {
        let mut text = String::new();
        let taint = self.taint();
        let mut names: Vec<&str> = self.modules.iter().map(String::as_str).collect();
        if self.nouveau && !names.contains(&"nouveau") {
            names.push("nouveau");
        }
        for name in &names {
            let users = match *name {
                "nvidia" => "nvidia_uvm,nvidia_modeset,",
                "nvidia_modeset" => "nvidia_drm,",
                _ => "-",
            };
            if name.starts_with("nvidia") {
                let _ = writeln!(text, "{name} 1605632 0 {users} Live 0x0000000000000000 ({taint})");
                w.file(&format!("sys/module/{name}/taint"), format!("{taint}\n"))?;
            } else {
                let _ = writeln!(text, "{name} 2306048 0 {users} Live 0x0000000000000000");
                w.file(&format!("sys/module/{name}/taint"), "\n")?;
            }
        }
        text.push_str("ext4 1003520 1 - Live 0x0000000000000000\n");
        w.file("proc/modules", text)
    }

    fn write_pci(&self, w: &mut Writer) -> Result<(), FixtureError> {
        // A host bridge first, so the probe's PCI scan sees a non-NVIDIA device.
        let host_bridge = "sys/devices/pci0000:00/0000:00:00.0";
        w.file(&format!("{host_bridge}/vendor"), "0x8086\n")?;
        w.file(&format!("{host_bridge}/device"), "0x09a2\n")?;
        w.file(&format!("{host_bridge}/class"), "0x060000\n")?;
        w.link("sys/bus/pci/devices/0000:00:00.0", "../../../devices/pci0000:00/0000:00:00.0")?;
        let binding = if self.module_loaded {
            Some("nvidia")
        } else if self.nouveau {
            Some("nouveau")
        } else {
            None
        };
        for g in &self.gpus {
            let root_port = g.bus_id.get(5..7).unwrap_or("00");
            let dev = format!("devices/pci0000:{root_port}/{}", g.bus_id);
            let d = format!("sys/{dev}");
            w.file(&format!("{d}/vendor"), "0x10de\n")?;
            w.file(&format!("{d}/device"), format!("0x{:04x}\n", g.device_id))?;
            w.file(&format!("{d}/class"), "0x030200\n")?;
            let (speed, width) = if g.degraded_link { ("8.0 GT/s PCIe", 8) } else { ("32.0 GT/s PCIe", 16) };
            w.file(&format!("{d}/current_link_speed"), format!("{speed}\n"))?;
            w.file(&format!("{d}/max_link_speed"), "32.0 GT/s PCIe\n")?;
            w.file(&format!("{d}/current_link_width"), format!("{width}\n"))?;
            w.file(&format!("{d}/max_link_width"), "16\n")?;
            w.link(&format!("sys/bus/pci/devices/{}", g.bus_id), &format!("../../../{dev}"))?;
            if let Some(drv) = binding {
                w.mkdir(&format!("sys/bus/pci/drivers/{drv}"))?;
                w.link(&format!("{d}/driver"), &format!("../../../bus/pci/drivers/{drv}"))?;
            }
        }
        Ok(())
    }

    fn write_driver(&self, w: &mut Writer) -> Result<(), FixtureError> {
        let v = &self.driver;
        let line = if self.open_module {
            format!(
                "NVRM version: NVIDIA UNIX Open Kernel Module for {}  {v}  Release Build  \
                 (dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n",
                self.machine
            )
        } else {
            format!(
                "NVRM version: NVIDIA UNIX {} Kernel Module  {v}  Tue Jun 23 08:38:17 UTC 2026\n",
                self.machine
            )
        };
        w.file(
            "proc/driver/nvidia/version",
            format!("{line}GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
        )?;
        w.file("sys/module/nvidia/version", format!("{v}\n"))?;
        w.mkdir("proc/driver/nvidia/gpus")?;
        if !self.mig.is_empty() {
            self.write_mig(w)?;
        }
        for (i, g) in self.gpus.iter().enumerate() {
            let info = format!(
                "Model: \t\t {}\nIRQ:   \t\t {}\nGPU UUID: \t {}\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\n\
                 DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {}\nDevice Minor: \t {}\n\
                 GPU Firmware: \t {v}\nGPU Excluded:\t {}\n",
                g.model,
                150 + i,
                g.uuid,
                g.bus_id,
                g.minor,
                if g.excluded { "Yes" } else { "No" }
            );
            w.file(&format!("proc/driver/nvidia/gpus/{}/information", g.bus_id), info)?;
        }
        if self.device_nodes {
            w.node("dev/nvidiactl", NVIDIA_MAJOR, 255)?;
            w.node("dev/nvidia-modeset", NVIDIA_MAJOR, 254)?;
            for g in &self.gpus {
                w.node(&format!("dev/nvidia{}", g.minor), NVIDIA_MAJOR, g.minor)?;
            }
            if self.uvm_loaded() && self.uvm_node {
                w.node("dev/nvidia-uvm", UVM_MAJOR, 0)?;
                w.node("dev/nvidia-uvm-tools", UVM_MAJOR, 1)?;
            }
        }
        Ok(())
    }

    fn write_libraries(&self, w: &mut Writer) -> Result<(), FixtureError> {
        let version = match &self.libcuda {
            Libcuda::Missing => None,
            Libcuda::Driver => Some(self.driver.as_str()),
            Libcuda::Version(v) => Some(v.as_str()),
        };
        let dir =
            if self.machine == "aarch64" { "usr/lib/aarch64-linux-gnu" } else { "usr/lib/x86_64-linux-gnu" };
        w.file(&format!("{dir}/libc.so.6"), b"\x7fELF fixture\n")?;
        if let Some(v) = version {
            for stem in ["libcuda.so", "libnvidia-ml.so"] {
                w.file(&format!("{dir}/{stem}.{v}"), b"\x7fELF fixture: driver library\n")?;
                w.link(&format!("{dir}/{stem}.1"), &format!("{stem}.{v}"))?;
            }
        }
        if self.libcuda_stub {
            w.file(&format!("{dir}/libcuda.so"), b"\x7fELF fixture: toolkit stub\n")?;
        }
        Ok(())
    }
}

/// Whether version `v` (dotted) is below `than`, component by component.
fn version_lt(v: &str, than: &[u64]) -> bool {
    let parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    let n = parts.len().max(than.len());
    for i in 0..n {
        let (a, b) = (parts.get(i).copied().unwrap_or(0), than.get(i).copied().unwrap_or(0));
        if a != b {
            return a < b;
        }
    }
    false
}

/// A stable, UUID-shaped MIG device id for MIG device `n` of fixture GPU `gpu`.
pub fn fixture_mig_uuid(gpu: u32, n: u32) -> String {
    format!("MIG-{:08x}-{n:04x}-4000-8000-{:012x}", 0x0a1a_0000 + gpu, u64::from(gpu) * 0x1111)
}

/// A stable, UUID-shaped GPU id for fixture GPU `i`.
pub fn fixture_uuid(i: u32) -> String {
    format!("GPU-{:08x}-0000-4000-8000-{:012x}", 0x5eed_0000 + i, u64::from(i) * 0x1111)
}

struct Writer {
    root: PathBuf,
    real_nodes: Option<bool>,
}

impl Writer {
    fn err(&self, rel: &str) -> impl FnOnce(io::Error) -> FixtureError + '_ {
        let path = self.root.join(rel);
        move |source| FixtureError { path, source }
    }

    fn mkdir(&self, rel: &str) -> Result<(), FixtureError> {
        fs::create_dir_all(self.root.join(rel)).map_err(self.err(rel))
    }

    fn parent(&self, rel: &str) -> Result<(), FixtureError> {
        match rel.rsplit_once('/') {
            Some((dir, _)) => self.mkdir(dir),
            None => Ok(()),
        }
    }

    fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> Result<(), FixtureError> {
        self.parent(rel)?;
        fs::write(self.root.join(rel), content).map_err(self.err(rel))
    }

    fn link(&self, rel: &str, target: &str) -> Result<(), FixtureError> {
        self.parent(rel)?;
        let path = self.root.join(rel);
        if path.symlink_metadata().is_ok() {
            return Ok(());
        }
        symlink(target, &path).map_err(self.err(rel))
    }

    /// A character device, or a marker file when `mknod` is not permitted.
    fn node(&mut self, rel: &str, major: u32, minor: u32) -> Result<(), FixtureError> {
        self.parent(rel)?;
        let path = self.root.join(rel);
        if self.real_nodes != Some(false) {
            match rustix::fs::mknodat(
                rustix::fs::CWD,
                &path,
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o666),
                rustix::fs::makedev(major, minor),
            ) {
                Ok(()) => {
                    self.real_nodes = Some(true);
                    return Ok(());
                }
                Err(e) if e == rustix::io::Errno::PERM || e == rustix::io::Errno::ACCESS => {
                    self.real_nodes = Some(false);
                }
                Err(e) => return Err(self.err(rel)(e.into())),
            }
        }
        fs::write(&path, format!("stackhook fixture: char {major}:{minor} (mknod not permitted here)\n"))
            .map_err(self.err(rel))
    }
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
}

/// The scenarios of the doctor's test matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Driver 535.104.05, one H100, everything in place.
    Healthy,
    /// The same host and an image that needs CUDA 12.4 (535 tops out at 12.2).
    DriverTooOld,
    /// `nouveau` loaded and bound to the GPU; no `nvidia` module.
    Nouveau,
    /// `nvidia_uvm` not loaded and `/dev/nvidia-uvm` missing.
    UvmMissing,
    /// No `libcuda.so.1` anywhere.
    LibcudaMissing,
    /// `libcuda.so.1 -> libcuda.so.535.54.03` while the module is 535.104.05.
    LibraryMismatch,
    /// Secure Boot on and the unsigned module refused.
    SecureBootUnsigned,
    /// Kernel 5.15.0-107-generic and an image that denies it.
    KernelDenied,
    /// An RTX 5090 (compute capability 12.0) and an image built for `arch<=9.0`.
    ArchTooNew,
    /// The GPU reports `Model: Unknown`.
    ModelUnknown,
    /// A WSL2 guest.
    Wsl2,
    /// Eight healthy H100s (for benchmarks).
    EightGpus,
    /// An RTX 4090 on driver 470 and an image that passes only through a brand term.
    ForwardCompatGeforce,
    /// A Jetson AGX Orin (SOC tegra234, compute capability 8.7) and an image that needs
    /// `arch>=8.7`.
    JetsonOrin,
    /// A MIG node: GPU 0 an A100 (compute capability 8.0) with two MIG devices, GPU 1 an H100
    /// (9.0) with one, `nvidia-smi -L` recorded; an image that needs `arch>=8.0`.
    MigNode,
    /// Driver 610.43.02 (R610 reports CUDA 13.3) and a CUDA 13.3 image: it starts.
    R610Cuda133,
    /// An RTX A6000 (8.6, driver 535) and a torch 2.1+cu121 image (`cuda>=12.1 driver>=525.60.13`,
    /// `arch>=5.0,arch<10.0`, as `stackbuild` derives them): it starts.
    RtxA6000Torch21,
    /// An RTX 6000 Ada (8.9, driver 535) and a torch 2.1+cu118 image: it starts.
    Rtx6000AdaTorch21,
    /// A GPU model no table knows (PCI id 0x3ff0) and a torch image's `arch` requirement: it starts,
    /// with an unverifiable-requirement warning.
    UnknownGpu,
    /// A Jetson TX2 NX on L4T R32.7.1 (`JetPack` 4.6.1, CUDA 10.2, no CUDA upgrade package) and an
    /// image that needs `cuda>=11.4`: blocked.
    JetsonTx2,
}

/// `NVIDIA_REQUIRE_CUDA` of the official CUDA 12.1.1 images, cut to the 470 branch's terms.
pub const CUDA_12_1_REQUIRE: &str = "cuda>=12.1 brand=tesla,driver>=470,driver<471 \
    brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 \
    brand=geforce,driver>=470,driver<471 brand=quadro,driver>=470,driver<471";

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 20] = [
        Preset::Healthy,
        Preset::DriverTooOld,
        Preset::Nouveau,
        Preset::UvmMissing,
        Preset::LibcudaMissing,
        Preset::LibraryMismatch,
        Preset::SecureBootUnsigned,
        Preset::KernelDenied,
        Preset::ArchTooNew,
        Preset::ModelUnknown,
        Preset::Wsl2,
        Preset::EightGpus,
        Preset::ForwardCompatGeforce,
        Preset::JetsonOrin,
        Preset::MigNode,
        Preset::R610Cuda133,
        Preset::RtxA6000Torch21,
        Preset::Rtx6000AdaTorch21,
        Preset::UnknownGpu,
        Preset::JetsonTx2,
    ];

    /// A short name (for directories and snapshot names).
    pub fn name(self) -> &'static str {
        match self {
            Preset::Healthy => "healthy",
            Preset::DriverTooOld => "driver_too_old",
            Preset::Nouveau => "nouveau",
            Preset::UvmMissing => "uvm_missing",
            Preset::LibcudaMissing => "libcuda_missing",
            Preset::LibraryMismatch => "library_mismatch",
            Preset::SecureBootUnsigned => "secure_boot_unsigned",
            Preset::KernelDenied => "kernel_denied",
            Preset::ArchTooNew => "arch_too_new",
            Preset::ModelUnknown => "model_unknown",
            Preset::Wsl2 => "wsl2",
            Preset::EightGpus => "eight_gpus",
            Preset::ForwardCompatGeforce => "forward_compat_geforce",
            Preset::JetsonOrin => "jetson_orin",
            Preset::MigNode => "mig_node",
            Preset::R610Cuda133 => "r610_cuda_13_3",
            Preset::RtxA6000Torch21 => "rtx_a6000_torch_2_1",
            Preset::Rtx6000AdaTorch21 => "rtx_6000_ada_torch_2_1",
            Preset::UnknownGpu => "unknown_gpu",
            Preset::JetsonTx2 => "jetson_tx2",
        }
    }

    /// The host.
    pub fn spec(self) -> FixtureSpec {
        let h100 = FixtureSpec::healthy_h100();
        match self {
            Preset::Healthy | Preset::DriverTooOld => h100,
            Preset::Nouveau => h100.no_driver().nouveau(),
            Preset::UvmMissing => h100.without_module("nvidia_uvm").no_uvm_node(),
            Preset::LibcudaMissing => h100.no_libcuda(),
            Preset::LibraryMismatch => h100.libcuda_version("535.54.03"),
            Preset::SecureBootUnsigned => h100.secure_boot(true),
            Preset::KernelDenied => h100.kernel("5.15.0-107-generic"),
            Preset::ArchTooNew => h100.driver("570.133.07").gpus_of(1, 0x2b85, "NVIDIA GeForce RTX 5090"),
            Preset::ModelUnknown => h100.model_unknown(),
            Preset::Wsl2 => h100.wsl2(),
            Preset::EightGpus => FixtureSpec::healthy_h100s(8),
            Preset::ForwardCompatGeforce => {
                h100.driver("470.256.02").gpus_of(1, 0x2684, "NVIDIA GeForce RTX 4090")
            }
            Preset::JetsonOrin => FixtureSpec::bare().jetson(&JETSON_AGX_ORIN_COMPATIBLE),
            Preset::MigNode => FixtureSpec::mig_node(),
            Preset::R610Cuda133 => h100.driver("610.43.02"),
            Preset::RtxA6000Torch21 => h100.gpus_of(1, 0x2230, "NVIDIA RTX A6000"),
            Preset::Rtx6000AdaTorch21 => h100.gpus_of(1, 0x26b1, "NVIDIA RTX 6000 Ada Generation"),
            Preset::UnknownGpu => h100.driver("570.133.07").gpus_of(1, 0x3ff0, "NVIDIA Future GPU 9000"),
            Preset::JetsonTx2 => FixtureSpec::bare().jetson(&JETSON_TX2_NX_COMPATIBLE).l4t(32, "7.1"),
        }
    }

    /// The requirement expressions the scenario's image carries.
    pub fn requires(self) -> &'static [&'static str] {
        match self {
            Preset::Healthy | Preset::EightGpus => &["cuda>=12.1", "arch>=8.0,arch<=9.0"],
            Preset::MigNode => &["cuda>=12.1", "arch>=8.0"],
            Preset::DriverTooOld => &["cuda>=12.4"],
            Preset::KernelDenied => &["kernel!=5.15.0-107-generic"],
            Preset::ArchTooNew => &["arch<=9.0"],
            Preset::ForwardCompatGeforce => &[CUDA_12_1_REQUIRE],
            Preset::JetsonOrin => &["arch>=8.7"],
            Preset::R610Cuda133 => &["cuda>=13.3"],
            Preset::RtxA6000Torch21 | Preset::UnknownGpu => {
                &["cuda>=12.1 driver>=525.60.13", "arch>=5.0,arch<10.0"]
            }
            Preset::Rtx6000AdaTorch21 => &["cuda>=11.8 driver>=450.80.02", "arch>=5.0,arch<10.0"],
            Preset::JetsonTx2 => &["cuda>=11.4"],
            _ => &["cuda>=12.1"],
        }
    }

    /// The finding code the doctor must report, `None` when the host passes with no finding
    /// above `Info`.
    pub fn expected_code(self) -> Option<&'static str> {
        match self {
            Preset::Healthy
            | Preset::EightGpus
            | Preset::JetsonOrin
            | Preset::R610Cuda133
            | Preset::RtxA6000Torch21
            | Preset::Rtx6000AdaTorch21
            | Preset::MigNode => None,
            Preset::DriverTooOld | Preset::JetsonTx2 => Some("L4-CUDA-REQUIREMENT"),
            Preset::Nouveau => Some("L1-NOUVEAU-LOADED"),
            Preset::UvmMissing => Some("L2-UVM-NOT-LOADED"),
            Preset::LibcudaMissing => Some("L2-LIBCUDA-MISSING"),
            Preset::LibraryMismatch => Some("L2-DRIVER-LIBRARY-MISMATCH"),
            Preset::SecureBootUnsigned => Some("L1-SECURE-BOOT-MODULE-REFUSED"),
            Preset::KernelDenied => Some("L1-KERNEL-REQUIREMENT"),
            Preset::ArchTooNew => Some("L4-ARCH-REQUIREMENT"),
            Preset::ModelUnknown => Some("L3-GPU-MODEL-UNKNOWN"),
            Preset::Wsl2 | Preset::UnknownGpu => Some("L4-REQUIREMENT-UNVERIFIABLE"),
            Preset::ForwardCompatGeforce => Some("L4-FORWARD-COMPAT-UNSUPPORTED"),
        }
    }

    /// Whether the doctor must allow the container (exit 0).
    pub fn allowed(self) -> bool {
        matches!(
            self,
            Preset::Healthy
                | Preset::EightGpus
                | Preset::Wsl2
                | Preset::JetsonOrin
                | Preset::R610Cuda133
                | Preset::RtxA6000Torch21
                | Preset::Rtx6000AdaTorch21
                | Preset::UnknownGpu
                | Preset::MigNode
        )
    }

    /// Builds the host into `dir`.
    pub fn build(self, dir: &Path) -> Result<FixtureHost, FixtureError> {
        self.spec().build(dir)
    }
}

#[cfg(test)]
mod tests {
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
