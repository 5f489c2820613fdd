//! Host facts recorded from `nvidia-smi` by an administrator's command (`stackhook doctor
//! --record`, `stackhook labels --record`), which the hook reads back instead of running anything.
//!
//! Files under `/proc` and `/sys` do not say which CUDA version the driver supports nor a GPU's
//! compute capability; the driver does (`nvidia-smi` prints `CUDA Version`, from R610 on
//! `CUDA UMD Version`, and
//! `--query-gpu=compute_cap` since driver 510). The hook runs as root on every container start and
//! never executes anything, so these facts are recorded on the host's own initiative into
//! [`FACTS_PATH`] and read by the hook only while they still describe the running driver: the
//! recorded driver version must equal the loaded module's, and the recorded boot id
//! (`/proc/sys/kernel/random/boot_id`, a random UUID the kernel draws at each boot) the current
//! one. A driver upgrade or a reboot makes them stale, and they are then ignored, with a note.

use serde::{Deserialize, Serialize};

use crate::contract::version::{ComputeCapability, CudaVersion, DriverVersion};

/// Where the facts live, relative to the host root.
pub const FACTS_PATH: &str = "var/lib/stackhook/host-facts.json";
/// The kernel's boot id, relative to the host root.
pub const BOOT_ID_PATH: &str = "proc/sys/kernel/random/boot_id";
/// Largest facts file read (64 GPUs of a few hundred bytes each fit many times over).
pub const FACTS_CAP: usize = 64 * 1024;
/// The file format's version.
pub const SCHEMA: u32 = 1;

/// What `nvidia-smi` said about the host, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedFacts {
    /// [`SCHEMA`].
    pub schema: u32,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
    /// The boot id at that time.
    pub boot_id: String,
    /// `nvidia-smi --query-gpu=driver_version`.
    pub driver_version: DriverVersion,
    /// `CUDA Version` (from R610 `CUDA UMD Version`) of `nvidia-smi`'s header: the highest CUDA
    /// the driver supports.
    pub cuda_version: Option<CudaVersion>,
    /// Each GPU.
    #[serde(default)]
    pub gpus: Vec<RecordedGpu>,
}

/// One GPU as `nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,compute_cap` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedGpu {
    /// `index`.
    pub index: usize,
    /// `uuid` (`GPU-…`).
    pub uuid: String,
    /// `pci.bus_id` (`00000000:18:00.0`).
    pub pci_bus_id: String,
    /// `name`.
    pub name: String,
    /// `compute_cap`, where the driver reports it.
    pub compute_cap: Option<ComputeCapability>,
}

impl RecordedFacts {
    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let facts: Self = serde_json::from_str(text).map_err(|e| format!("not a facts file: {e}"))?;
        if facts.schema != SCHEMA {
            return Err(format!("schema {} (this stackhook reads {SCHEMA})", facts.schema));
        }
        Ok(facts)
    }

    /// `Ok` when the facts describe the running driver: the same driver version and boot id;
    /// else why they are stale.
    pub fn current(&self, driver: Option<&DriverVersion>, boot_id: Option<&str>) -> Result<(), String> {
        match driver {
            Some(d) if *d == self.driver_version => {}
            Some(d) => {
                return Err(format!("recorded for driver {}, the loaded driver is {d}", self.driver_version))
            }
            None => return Err("no driver version was read from the host to compare with".to_owned()),
        }
        match boot_id.map(str::trim) {
            Some(b) if b == self.boot_id.trim() => Ok(()),
            Some(_) => Err("recorded before the last reboot (boot id differs)".to_owned()),
            None => Err(format!("/{BOOT_ID_PATH} cannot be read to compare with")),
        }
    }

    /// The recorded GPU with this UUID, else this PCI bus id (`0000:18:00.0`; `nvidia-smi` pads
    /// the domain to eight digits).
    pub fn gpu(&self, uuid: Option<&str>, bus_id: &str) -> Option<&RecordedGpu> {
        let by_uuid = uuid.and_then(|u| self.gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(u)));
        by_uuid.or_else(|| {
            self.gpus
                .iter()
                .find(|g| super::parse::bus_id(&g.pci_bus_id).is_some_and(|b| b.eq_ignore_ascii_case(bus_id)))
        })
    }
}

/// Parses `nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,compute_cap --format=csv,noheader`.
/// A `compute_cap` the driver does not know (`[N/A]`, or a field missing on drivers before 510) is
/// `None`.
pub fn parse_query_gpu(csv: &str) -> Vec<RecordedGpu> {
    csv.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let index = fields.first()?.parse().ok()?;
            Some(RecordedGpu {
                index,
                uuid: (*fields.get(1)?).to_owned(),
                pci_bus_id: (*fields.get(2)?).to_owned(),
                name: (*fields.get(3)?).to_owned(),
                compute_cap: fields.get(4).and_then(|c| c.parse().ok()),
            })
        })
        .collect()
}

/// The labels `nvidia-smi` gives the highest CUDA version the driver supports, in its header
/// (`CUDA Version: 12.2`) and in `-q` (`CUDA Version : 12.2`): from R610 on `CUDA UMD Version`,
/// with the old `CUDA Version` marked deprecated. The first is preferred.
const CUDA_LABELS: [&str; 2] = ["CUDA UMD Version", "CUDA Version"];

/// The `CUDA Version: 12.2` of `nvidia-smi`'s header (or `CUDA Version : 12.2` of `-q`), or from
/// R610 on its `CUDA UMD Version: 13.3`: the first label followed by a version wins, so a
/// deprecated `CUDA Version` field without a number is passed over.
pub fn parse_cuda_version(text: &str) -> Option<CudaVersion> {
    CUDA_LABELS.iter().find_map(|label| {
        text.match_indices(label).find_map(|(at, _)| {
            let rest = text[at + label.len()..].trim_start_matches([' ', '\t', ':']);
            let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(driver: &str, boot: &str) -> RecordedFacts {
        RecordedFacts {
            schema: SCHEMA,
            recorded_at: "2026-12-01T08:00:00Z".into(),
            boot_id: boot.into(),
            driver_version: driver.parse().unwrap(),
            cuda_version: Some("13.3".parse().unwrap()),
            gpus: parse_query_gpu(
                "0, GPU-5eed0001-0000-4000-8000-000000001111, 00000000:18:00.0, NVIDIA RTX A6000, 8.6\n\
                 1, GPU-5eed0002-0000-4000-8000-000000002222, 00000000:3B:00.0, NVIDIA Future GPU, [N/A]\n",
            ),
        }
    }

    #[test]
    fn nvidia_smi_output_parses() {
        let f = facts("610.43.02", "b");
        assert_eq!(f.gpus.len(), 2);
        assert_eq!(f.gpus[0].compute_cap, Some(ComputeCapability::new(8, 6)));
        assert_eq!(f.gpus[1].compute_cap, None);
        assert_eq!(f.gpu(None, "0000:3b:00.0").map(|g| g.index), Some(1));
        assert_eq!(f.gpu(Some("gpu-5eed0001-0000-4000-8000-000000001111"), "x").map(|g| g.index), Some(0));
        let header = "| NVIDIA-SMI 610.43.02    Driver Version: 610.43.02    CUDA Version: 13.3     |";
        assert_eq!(parse_cuda_version(header), Some("13.3".parse().unwrap()));
        assert_eq!(
            parse_cuda_version("CUDA Version                              : 12.2\n"),
            Some("12.2".parse().unwrap())
        );
        assert_eq!(parse_cuda_version("no header"), None);
        // From R610: "CUDA UMD Version", in the header and in -q, with or without the old label.
        let umd =
            "| NVIDIA-SMI 610.43.02              Driver Version: 610.43.02      CUDA UMD Version: 13.3     |";
        assert_eq!(parse_cuda_version(umd), Some("13.3".parse().unwrap()));
        let q = "Driver Version                            : 615.71.09\n\
                 CUDA Version                              : Deprecated\n\
                 CUDA UMD Version                          : 13.4\n";
        assert_eq!(parse_cuda_version(q), Some("13.4".parse().unwrap()));
        assert_eq!(
            parse_cuda_version("CUDA UMD Version                          : 13.3\n"),
            Some("13.3".parse().unwrap())
        );
        assert_eq!(
            parse_cuda_version("CUDA UMD Version: N/A\nCUDA Version: 13.3"),
            Some("13.3".parse().unwrap())
        );
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(RecordedFacts::parse(&json).unwrap(), f);
        assert!(RecordedFacts::parse("{}").is_err());
    }

    #[test]
    fn stale_facts_are_refused_with_the_reason() {
        let f = facts("610.43.02", "boot-a\n");
        let d: DriverVersion = "610.43.02".parse().unwrap();
        assert_eq!(f.current(Some(&d), Some("boot-a")), Ok(()));
        assert_eq!(
            f.current(Some(&"610.57.01".parse().unwrap()), Some("boot-a")).unwrap_err(),
            "recorded for driver 610.43.02, the loaded driver is 610.57.01"
        );
        assert_eq!(
            f.current(Some(&d), Some("boot-b")).unwrap_err(),
            "recorded before the last reboot (boot id differs)"
        );
        assert!(f.current(None, Some("boot-a")).is_err());
    }
}
