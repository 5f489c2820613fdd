//! MIG devices: the compute instances the driver lists as capability files, the `nvidia-caps`
//! minors that grant them, and the recorded `nvidia-smi -L` that ties MIG UUIDs to their GPUs.

use serde::Serialize;

use super::parse::{self, MigRecord};
use super::{HostProbe, Reader, FILE_CAP, MAX_GPUS};

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

impl Reader {
    /// MIG instances per GPU from the capability files, and the recorded `nvidia-smi -L`. On a
    /// host without MIG this is one directory listing and one failed open.
    pub(super) fn mig(&mut self, p: &mut HostProbe) {
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
}
