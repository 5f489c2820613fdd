//! The GPUs: those the `nvidia` driver lists (`proc/driver/nvidia/gpus/<bdf>/information`) with
//! their PCI sysfs attributes, a Jetson's integrated GPU (recognised from its SOC), NVIDIA display
//! controllers the driver does not list, and what each GPU is: its knowledge-base model and
//! compute capability, and where they come from.

use std::collections::BTreeSet;

use serde::Serialize;

use super::hostfs::HostFs;
use super::{abs, parse, recorded, Evidence, HostProbe, Provenance, Reader, FILE_CAP, MAX_GPUS};
use crate::contract::kb;
use crate::contract::version::ComputeCapability;

/// At most this many PCI devices are looked at for NVIDIA display controllers.
const MAX_PCI_DEVICES: usize = 1024;

/// The NVIDIA PCI vendor id.
pub const NVIDIA_VENDOR: u32 = 0x10de;

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

/// PCI ids as sysfs prints them (`0x10de`), not as decimal numbers.
#[allow(clippy::ref_option, clippy::trivially_copy_pass_by_ref)] // serde's `serialize_with` passes `&T`.
fn hex_opt<S: serde::Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) if *v > 0xffff => s.serialize_str(&format!("0x{v:06x}")),
        Some(v) => s.serialize_str(&format!("0x{v:04x}")),
        None => s.serialize_none(),
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

/// A GPU's compute capability and how it was obtained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuArch {
    /// The compute capability.
    pub value: ComputeCapability,
    /// How it was obtained.
    pub how: Provenance,
}

impl Reader {
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

    pub(super) fn gpus(&mut self, p: &mut HostProbe) {
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
    pub(super) fn integrated_gpu(&mut self, p: &mut HostProbe) {
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

    pub(super) fn other_pci(&mut self, p: &mut HostProbe) {
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
}

impl HostProbe {
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
}

/// How a GPU is named in provenance: its PCI id when it has one.
fn gpu_key(g: &GpuProbe) -> String {
    match (&g.soc, g.pci.device) {
        (Some(soc), _) => soc.clone(),
        (None, Some(d)) => format!("PCI 0x{d:04x}"),
        (None, None) => format!("model {:?}", g.model.as_deref().unwrap_or("")),
    }
}
