//! L3, the GPUs: the selection resolves, the selected GPUs answer the driver, are not excluded
//! and are of an architecture the loaded branch drives; NVIDIA GPUs the driver does not own; and
//! the selected GPUs' PCI Express links (an L4 warning).

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::contract::kb;
use crate::probe::{self, GpuProbe, HostProbe, UnresolvedDevice};

impl<'a> Checks<'a> {
    /// L3: the selected GPUs. `Err` when the selection cannot be resolved or there are none.
    pub(super) fn l3_gpus(&mut self) -> Result<Vec<&'a GpuProbe>, ()> {
        let p: &'a HostProbe = self.p;
        if (p.is_wsl2() || p.is_jetson()) && p.gpus.is_empty() {
            self.push(Finding::new(
                "L3-GPUS-NOT-LISTED",
                Layer::L3Gpus,
                Severity::Info,
                if p.is_jetson() {
                    "this Jetson's SoC (/proc/device-tree/compatible) is not in the knowledge base and nvgpu \
                     does not list the GPU in /proc/driver/nvidia/gpus: per-GPU checks cannot be made"
                } else {
                    "this host does not list its GPUs in /proc/driver/nvidia/gpus: per-GPU checks cannot be made"
                },
            ));
            return Err(());
        }
        let resolved = match p.resolve(&self.req.selection) {
            Ok(r) => r,
            Err(e) => {
                let listed: Vec<String> = p
                    .gpus
                    .iter()
                    .map(|g| format!("{} {} {}", g.index, g.bus_id, g.uuid.as_deref().unwrap_or("(no uuid)")))
                    .collect();
                self.push(
                    Finding::new("L3-SELECTION-UNMATCHED", Layer::L3Gpus, Severity::Error, e.to_string())
                        .with(
                            "/proc/driver/nvidia/gpus",
                            if listed.is_empty() { "(none)".to_owned() } else { listed.join("; ") },
                        )
                        .remedy("set NVIDIA_VISIBLE_DEVICES to indexes, UUIDs or bus ids that nvidia-smi -L lists"),
                );
                return Err(());
            }
        };
        let selected = resolved.gpus;
        if p.gpus.is_empty() || (selected.is_empty() && resolved.unresolved.is_empty()) {
            self.push(
                Finding::new(
                    "L3-NO-GPUS",
                    Layer::L3Gpus,
                    Severity::Error,
                    "the nvidia driver is loaded but lists no GPU",
                )
                .with("/proc/driver/nvidia/gpus", "(empty)")
                .remedy("sudo dmesg | grep -i -e NVRM -e Xid"),
            );
            self.unbound_too_new();
            return Err(());
        }
        for g in &selected {
            self.l3_gpu(g);
        }
        for u in &resolved.unresolved {
            self.l3_unresolved(u);
        }
        for other in p.other_pci_gpus.iter().filter(|g| g.pci.driver.as_deref() != Some("nouveau")) {
            let mut f = Finding::new(
                "L3-GPU-NOT-OWNED",
                Layer::L3Gpus,
                Severity::Warning,
                format!(
                    "the NVIDIA GPU at {} is bound to {}, not nvidia: containers cannot use it",
                    other.bus_id,
                    other.pci.driver.as_deref().unwrap_or("no driver")
                ),
            )
            .with(&format!("{}/driver", other.pci.path), other.pci.driver.as_deref().unwrap_or("(none)"));
            if let Some(why) = self.architecture_dropped(other.pci.device_id()) {
                f.message = format!("{}; {why}", f.message);
                f = f.remedy("install a driver of a branch that still supports this GPU's architecture");
            } else if let Some((why, first)) =
                other.pci.device_id().and_then(kb::gpu_by_pci_id).and_then(|m| self.branch_too_old(m))
            {
                f.message = format!("{}; {why}", f.message);
                f = f.remedy(format!("install a driver of branch R{first} or later"));
            }
            self.push(f);
        }
        Ok(selected)
    }

    /// L3: the driver lists no GPU and an NVIDIA GPU on PCI has no driver because the loaded
    /// branch is older than its architecture's first: the known cause, with its remedy.
    fn unbound_too_new(&mut self) {
        let p = self.p;
        for g in p.other_pci_gpus.iter().filter(|g| g.pci.driver.is_none()) {
            let Some(model) = g.pci.device_id().and_then(kb::gpu_by_pci_id) else { continue };
            let Some((why, first)) = self.branch_too_old(model) else { continue };
            let mut f = Finding::new(
                "L3-DRIVER-TOO-OLD-FOR-GPU",
                Layer::L3Gpus,
                Severity::Error,
                format!("the NVIDIA GPU at {} has no driver: {why}, so the driver cannot drive it", g.bus_id),
            )
            .with(&format!("{}/driver", g.pci.path), "(no driver bound)")
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(d) = &p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(format!("install a driver of branch R{first} or later")));
        }
    }

    /// L3: a selected device whose GPU the host does not tell.
    fn l3_unresolved(&mut self, u: &UnresolvedDevice<'_>) {
        let candidates: Vec<String> = u.candidates.iter().map(|g| g.index.to_string()).collect();
        let mut f = match u.common_model() {
            Some(m) => Finding::new(
                "L3-DEVICE-PARENT-UNKNOWN",
                Layer::L3Gpus,
                Severity::Info,
                format!(
                    "{}: which GPU it is on is not recorded; every GPU it may be on (GPU {}) is an {}, so it \
                     is checked as one",
                    u.id,
                    candidates.join(", "),
                    m.name
                ),
            ),
            None => Finding::new(
                "L3-DEVICE-PARENT-UNKNOWN",
                Layer::L3Gpus,
                Severity::Info,
                format!(
                    "{}: which GPU it is on is not recorded and the GPUs it may be on (GPU {}) differ: arch and \
                     brand requirements cannot be checked for it",
                    u.id,
                    candidates.join(", ")
                ),
            ),
        };
        if u.id.starts_with(crate::contract::image::VOLUME_MOUNT_DEVICES_ROOT) {
            f = f.with("NVIDIA_VISIBLE_DEVICES", &u.id);
            self.push(f.remedy(
                "the device plugin passes devices as volume mounts, but none is mounted under that path: check \
                 its volume-mount setting",
            ));
            return;
        }
        f = f.with(&format!("/{}", probe::MIG_RECORD_PATH), "no line for this device");
        self.push(f.remedy(format!(
            "record which GPU each MIG device is on: nvidia-smi -L | sudo tee /{} (again after each MIG change)",
            probe::MIG_RECORD_PATH
        )));
    }

    /// Why the loaded driver does not drive a GPU of this PCI id, when its architecture's last
    /// branch (`driver_branches.toml`, `[[architecture]]`) is older than the loaded one.
    fn architecture_dropped(&self, device_id: Option<u16>) -> Option<String> {
        let model = device_id.and_then(kb::gpu_by_pci_id)?;
        let last = kb::architecture_support(&model.architecture)?;
        let driver = self.p.driver.as_ref()?;
        (driver.value.branch() > last.last_branch).then(|| {
            format!(
                "it is a {} GPU ({}), and R{} was the last driver branch for {} (the loaded driver is {})",
                model.architecture, model.name, last.last_branch, model.architecture, driver.value
            )
        })
    }

    /// Why the loaded driver cannot drive a GPU of `model`, with the first branch that can, when
    /// the first branch of its architecture (`driver_branches.toml`, `[[architecture]]`, the row
    /// of its compute capability where there is one) is newer than the loaded one.
    fn branch_too_old(&self, model: &kb::GpuModel) -> Option<(String, u64)> {
        let support = kb::gpu_support(model)?;
        let first = support.first_branch?;
        let driver = self.p.driver.as_ref()?;
        let which = if support.compute_capabilities.is_empty() {
            model.architecture.clone()
        } else {
            format!("{} {}", model.architecture, model.compute_capability)
        };
        (driver.value.branch() < first).then(|| {
            (
                format!(
                    "it is a {} GPU ({}, compute capability {}), and R{first} is the first driver branch for {which} \
                     (the loaded driver is {})",
                    model.architecture, model.name, model.compute_capability, driver.value
                ),
                first,
            )
        })
    }

    /// L3: one selected GPU.
    fn l3_gpu(&mut self, g: &GpuProbe) {
        if g.model_unknown() {
            self.push(
                Finding::new(
                    "L3-GPU-MODEL-UNKNOWN",
                    Layer::L3Gpus,
                    Severity::Error,
                    format!(
                        "GPU {} ({}) reports Model: Unknown: the board does not answer the driver (fallen off \
                         the bus, failing, or not supported by this driver)",
                        g.index, g.bus_id
                    ),
                )
                .with_evidence(&g.evidence)
                .remedy("sudo dmesg | grep -i -e NVRM -e Xid; reseat or replace the board, or update the driver"),
            );
            return;
        }
        if g.excluded == Some(true) {
            self.push(
                Finding::new(
                    "L3-GPU-EXCLUDED",
                    Layer::L3Gpus,
                    Severity::Error,
                    format!("GPU {} ({}) is excluded by the driver", g.index, g.bus_id),
                )
                .with(&g.evidence.path, "GPU Excluded: Yes")
                .remedy("check NVreg_ExcludedGpus in /etc/modprobe.d and the driver's health checks (dmesg)"),
            );
        }
        if let Some((why, first)) = self.p.gpu_model(g).and_then(|(m, _)| self.branch_too_old(m)) {
            let mut f = Finding::new(
                "L3-DRIVER-TOO-OLD-FOR-GPU",
                Layer::L3Gpus,
                Severity::Error,
                format!("GPU {} ({}): {why}: this driver cannot drive it", g.index, g.bus_id),
            )
            .with_evidence(&g.evidence)
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(d) = &self.p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(format!("install a driver of branch R{first} or later")));
        }
        if self.p.gpu_model(g).is_none() {
            let known_arch = self.p.gpu_arch(g);
            let what = if known_arch.is_some() {
                "its brand is unknown (its compute capability comes from the recorded nvidia-smi facts), so \
                 brand requirements cannot be verified"
            } else {
                "its compute capability and brand are unknown, so arch and brand requirements cannot be verified \
                 (they are reported, not enforced)"
            };
            let mut f = Finding::new(
                "L3-GPU-NOT-IN-KB",
                Layer::L3Gpus,
                Severity::Warning,
                format!(
                    "GPU {} ({}) is not in the knowledge base of {}: {what}",
                    g.index,
                    g.model.as_deref().unwrap_or(""),
                    kb::KB_DATE
                ),
            )
            .with_evidence(&g.evidence)
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(a) = known_arch {
                f = f.with_evidence(&a.how.into());
            }
            self.push(f.remedy(
                "confirm with nvidia-smi --query-gpu=name,pci.device_id,compute_cap --format=csv \
                 (sudo stackhook doctor --record saves it for the hook), or add a [[gpu]] row with its source \
                 in /etc/stackhook/kb.d/",
            ));
        }
    }

    /// L4: PCI Express links below their maximum (a warning: idle GPUs may train down).
    pub(super) fn l4_links(&mut self, gpus: &[&GpuProbe]) {
        for g in gpus {
            let pci = &g.pci;
            let speed = |s: &Option<String>| {
                s.as_deref().and_then(|s| s.split_whitespace().next()).and_then(|n| n.parse::<f64>().ok())
            };
            let slow = matches!((speed(&pci.current_link_speed), speed(&pci.max_link_speed)), (Some(c), Some(m)) if c < m);
            let narrow = matches!((pci.current_link_width, pci.max_link_width), (Some(c), Some(m)) if c < m);
            if slow || narrow {
                self.push(
                    Finding::new(
                        "L4-PCIE-LINK-DEGRADED",
                        Layer::L4Versions,
                        Severity::Warning,
                        format!(
                            "GPU {} ({}) links at {} x{} of {} x{}; an idle GPU may train down, so check under load",
                            g.index,
                            g.bus_id,
                            pci.current_link_speed.as_deref().unwrap_or("?"),
                            pci.current_link_width.map_or("?".to_owned(), |w| w.to_string()),
                            pci.max_link_speed.as_deref().unwrap_or("?"),
                            pci.max_link_width.map_or("?".to_owned(), |w| w.to_string()),
                        ),
                    )
                    .with(&format!("{}/current_link_speed", pci.path), pci.current_link_speed.as_deref().unwrap_or("?"))
                    .with(
                        &format!("{}/current_link_width", pci.path),
                        pci.current_link_width.map_or("?".to_owned(), |w| w.to_string()),
                    )
                    .remedy("nvidia-smi -q -d PERFORMANCE,PCI under load; reseat the board or check the slot and riser"),
                );
            }
        }
    }
}
