//! Which GPUs a container selects: `NVIDIA_VISIBLE_DEVICES` entries (indexes, GPU and MIG UUIDs,
//! MIG indexes, PCI bus ids, `all`) resolved against the probed GPUs, a MIG device standing for
//! its parent GPU.

use super::gpus::GpuProbe;
use super::{parse, HostProbe};
use crate::contract::image::DeviceSelection;
use crate::contract::kb;

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

impl HostProbe {
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
}
