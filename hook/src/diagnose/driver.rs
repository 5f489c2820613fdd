//! L1, the driver: the `nvidia` module loaded and its version readable, `nouveau` neither loaded
//! nor bound to a GPU, and Secure Boot not refusing (or about to refuse) an unsigned module.

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::probe::{self, Platform};

const BLACKLIST_NOUVEAU: &str = "echo 'blacklist nouveau' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf \
     && sudo update-initramfs -u && sudo reboot";
const ENROL_MOK: &str = "sign the nvidia modules with a Machine Owner Key and enrol it: \
     sudo mokutil --import /var/lib/shim-signed/mok/MOK.der, then reboot and confirm in MokManager \
     (or install your distribution's signed driver packages)";

impl Checks<'_> {
    /// L1. Returns whether the driver is usable for the checks above it.
    pub(super) fn l1_driver(&mut self) -> bool {
        let p = self.p;
        match &p.platform {
            Platform::Wsl2 { evidence } => {
                self.push(
                    Finding::new(
                        "L1-WSL2",
                        Layer::L1Driver,
                        Severity::Info,
                        "WSL2 host: the Windows driver serves the GPUs through /dev/dxg; kernel module \
                         checks do not apply and the driver version cannot be read from files",
                    )
                    .with_evidence(evidence),
                );
                return true;
            }
            Platform::Jetson { evidence, .. } => {
                self.push(
                    Finding::new(
                        "L1-JETSON",
                        Layer::L1Driver,
                        Severity::Info,
                        "Jetson board: the integrated GPU is driven by nvgpu; PCI and module checks do not apply",
                    )
                    .with_evidence(evidence),
                );
                return true;
            }
            Platform::Linux => {}
        }
        let nvidia = p.modules.get("nvidia");
        self.l1_nouveau(nvidia.is_some());

        let Some(nv) = nvidia else {
            self.l1_not_loaded();
            return false;
        };

        if nv.state != "Live" {
            self.push(
                Finding::new(
                    "L1-MODULE-NOT-LIVE",
                    Layer::L1Driver,
                    Severity::Warning,
                    format!("the nvidia module is {}, not Live", nv.state),
                )
                .with_evidence(&nv.evidence),
            );
        }
        let taint = nv.sys_taint.as_deref().unwrap_or(&nv.taint);
        if p.secure_boot_enforced() && taint.contains('E') {
            let mut f = Finding::new(
                "L1-SECURE-BOOT-UNSIGNED-MODULE",
                Layer::L1Driver,
                Severity::Warning,
                "Secure Boot is on and the loaded nvidia module is unsigned (taint E): this kernel does not \
                 enforce module signatures now, but one that does (lockdown, an update) will refuse it",
            )
            .with(if nv.sys_taint.is_some() { "/sys/module/nvidia/taint" } else { "/proc/modules" }, taint);
            if let Some(sb) = &p.secure_boot {
                f = f.with_evidence(&sb.evidence);
            }
            self.push(f.remedy(ENROL_MOK));
        }
        if p.driver.is_none() {
            let mut f = Finding::new(
                "L1-DRIVER-VERSION-UNREADABLE",
                Layer::L1Driver,
                Severity::Error,
                "the nvidia module is loaded but no version can be read from /sys/module/nvidia/version \
                 or /proc/driver/nvidia/version",
            )
            .with_evidence(&nv.evidence);
            if let Some(l4t) = &p.l4t_release {
                f = f.with_evidence(&l4t.evidence);
            }
            self.push(f.remedy("sudo dmesg | grep -i NVRM"));
            return false;
        }
        true
    }

    /// L1: `nouveau` loaded, or bound to NVIDIA GPUs.
    fn l1_nouveau(&mut self, nvidia_loaded: bool) {
        let p = self.p;
        let nouveau_bound: Vec<&probe::PciGpu> =
            p.other_pci_gpus.iter().filter(|g| g.pci.driver.as_deref() == Some("nouveau")).collect();
        if let Some(m) = p.modules.get("nouveau") {
            let severity =
                if !nvidia_loaded || !nouveau_bound.is_empty() { Severity::Error } else { Severity::Warning };
            let mut f = Finding::new(
                "L1-NOUVEAU-LOADED",
                Layer::L1Driver,
                severity,
                if nouveau_bound.is_empty() {
                    "the open-source nouveau driver is loaded; it competes with nvidia for the GPUs".to_owned()
                } else {
                    format!(
                        "the open-source nouveau driver is loaded and holds {} NVIDIA GPU(s), so nvidia cannot \
                         drive them",
                        nouveau_bound.len()
                    )
                },
            )
            .with_evidence(&m.evidence);
            for g in &nouveau_bound {
                f = f.with(&format!("{}/driver", g.pci.path), "nouveau");
            }
            self.push(f.remedy(BLACKLIST_NOUVEAU));
        } else if !nouveau_bound.is_empty() {
            let mut f = Finding::new(
                "L1-NOUVEAU-LOADED",
                Layer::L1Driver,
                Severity::Error,
                format!("{} NVIDIA GPU(s) are bound to nouveau", nouveau_bound.len()),
            );
            for g in &nouveau_bound {
                f = f.with(&format!("{}/driver", g.pci.path), "nouveau");
            }
            self.push(f.remedy(BLACKLIST_NOUVEAU));
        }
    }

    /// L1: no `nvidia` module: refused under Secure Boot, or simply not loaded.
    fn l1_not_loaded(&mut self) {
        let p = self.p;
        let unbound: Vec<&probe::PciGpu> =
            p.other_pci_gpus.iter().filter(|g| g.pci.driver.is_none()).collect();
        let modules_evidence = if p.modules_readable { "no line for nvidia" } else { "not readable" };
        if p.secure_boot_enforced() && !unbound.is_empty() {
            let mut f = Finding::new(
                "L1-SECURE-BOOT-MODULE-REFUSED",
                Layer::L1Driver,
                Severity::Error,
                format!(
                    "Secure Boot is on, the nvidia module is not loaded and {} NVIDIA GPU(s) have no driver: \
                     the kernel refuses an unsigned module under Secure Boot",
                    unbound.len()
                ),
            );
            if let Some(sb) = &p.secure_boot {
                f = f.with_evidence(&sb.evidence);
            }
            f = f.with("/proc/modules", modules_evidence);
            for g in &unbound {
                f = f.with(&format!("{}/driver", g.pci.path), "(no driver bound)");
            }
            self.push(f.remedy(ENROL_MOK));
        } else {
            let mut f = Finding::new(
                "L1-NVIDIA-NOT-LOADED",
                Layer::L1Driver,
                Severity::Error,
                "the nvidia kernel module is not loaded",
            )
            .with("/proc/modules", modules_evidence);
            for g in &p.other_pci_gpus {
                f = f.with(
                    &format!("{}/driver", g.pci.path),
                    g.pci.driver.as_deref().unwrap_or("(no driver bound)"),
                );
            }
            self.push(f.remedy("sudo modprobe nvidia (if it fails: sudo dmesg | grep -i -e nvidia -e NVRM)"));
        }
    }
}
