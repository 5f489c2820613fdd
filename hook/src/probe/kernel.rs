//! The kernel and the driver: the platform (Linux, WSL2, Jetson), the kernel release and taint,
//! the driver's loaded modules and version, its character-device majors, and Secure Boot.
//!
//! The driver's version comes from `sys/module/nvidia/version`, else the `NVRM version:` line of
//! `proc/driver/nvidia/version` (as NVIDIA's open-gpu-kernel-modules `nv-procfs.c` prints it),
//! which also tells the open module from the proprietary one; `/proc/modules` and
//! `/sys/module/*/taint` are read as the kernel's documentation describes them.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{abs, parse, Evidence, Fact, HostProbe, ProbeNote, Reader, FILE_CAP};
use crate::contract::version::{DriverVersion, KernelRelease};

/// Cap for `proc/modules`, which lists every loaded module.
const MODULES_CAP: usize = 256 * 1024;

/// The modules whose `proc/modules` line and `sys/module/<name>/taint` are kept.
const DRIVER_MODULES: [&str; 7] =
    ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nouveau", "nvgpu"];

/// EFI variable GUID of the global variables (UEFI spec, `EFI_GLOBAL_VARIABLE`).
const EFI_GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";

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

pub(super) fn nvidia_majors(proc_devices: &str) -> BTreeMap<String, u32> {
    parse::char_devices(proc_devices)
        .into_iter()
        .filter(|(_, n)| n.starts_with("nvidia"))
        .map(|(m, n)| (n, m))
        .collect()
}

impl Reader {
    pub(super) fn kernel(&mut self, p: &mut HostProbe) {
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

    pub(super) fn platform(&mut self, p: &mut HostProbe) {
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

    pub(super) fn modules(&mut self, p: &mut HostProbe) {
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

    pub(super) fn driver(&mut self, p: &mut HostProbe) {
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

    pub(super) fn char_devices(&mut self, p: &mut HostProbe) {
        if let Some(t) = self.text_all("proc/devices", FILE_CAP) {
            p.char_majors = nvidia_majors(&t);
        }
    }

    pub(super) fn secure_boot(&mut self, p: &mut HostProbe) {
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

    /// The major of character device `name` in `proc/devices` (whole-name match).
    pub fn char_major(&self, name: &str) -> Option<u32> {
        self.char_majors.get(name).copied()
    }
}
