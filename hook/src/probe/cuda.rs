//! The host's CUDA: the highest CUDA version its driver supports, from the recorded `nvidia-smi`
//! facts, admin rows of `kb.d` or the knowledge base's driver branches, and on a Jetson from its
//! L4T release.

use serde::Serialize;

use super::kernel::Platform;
use super::{recorded, HostProbe, Provenance};
use crate::contract::kb;
use crate::contract::require::CudaBound;
use crate::contract::version::CudaVersion;

/// The highest CUDA version the host's driver supports, as far as it can be told, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostCuda {
    /// The value, or the lower bound when `bound` is a range.
    pub cuda: Option<CudaVersion>,
    /// Exact, or the range the value lies in.
    pub bound: CudaBound,
    /// How it was obtained.
    pub how: Provenance,
}

impl HostProbe {
    /// The highest CUDA version the driver supports: what `nvidia-smi` recorded, else an admin
    /// branch row, else the knowledge base's branch table (exact for a branch it lists, a range
    /// otherwise); on a Jetson without a driver version, the CUDA of its L4T release (a range
    /// where the SOC runs the CUDA upgrade package).
    pub fn host_cuda(&self) -> HostCuda {
        if let Some(r) = &self.recorded {
            if let Some(c) = &r.cuda_version {
                return HostCuda {
                    cuda: Some(c.clone()),
                    bound: CudaBound::Exact,
                    how: Provenance {
                        path: format!("/{}", recorded::FACTS_PATH),
                        value: format!(
                            "nvidia-smi: CUDA Version {c} (driver {}, recorded {})",
                            r.driver_version, r.recorded_at
                        ),
                    },
                };
            }
        }
        let Some(driver) = self.driver.as_ref().map(|d| &d.value) else {
            return self.host_cuda_without_driver();
        };
        if let Some((c, file)) = self.kb_extension.branch_cuda(driver) {
            return HostCuda {
                cuda: Some(c.clone()),
                bound: CudaBound::Exact,
                how: Provenance {
                    path: format!("(kb.d) {file}"),
                    value: format!("driver branch {} supports CUDA up to {c}", driver.branch()),
                },
            };
        }
        match kb::driver_cuda(driver) {
            kb::DriverCuda::Exact { cuda, branch, .. } => HostCuda {
                how: Provenance {
                    path: "(knowledge base) driver_branches.toml".to_owned(),
                    value: format!("driver branch {branch} supports CUDA up to {cuda}"),
                },
                cuda: Some(cuda),
                bound: CudaBound::Exact,
            },
            kb::DriverCuda::Bounded { at_least, below, why } => {
                // Admin rows narrow the range: a branch row below the driver raises the floor,
                // a toolkit whose minimum is of a newer branch lowers the ceiling.
                let ext = &self.kb_extension;
                let at_least =
                    at_least.into_iter().chain(ext.cuda_at_or_below(driver.branch()).cloned()).max();
                let below = below.into_iter().chain(ext.toolkit_above(driver.branch()).cloned()).min();
                Self::bounded_cuda(at_least, below, &why)
            }
        }
    }

    /// A [`HostCuda`] known only as a range, with why.
    fn bounded_cuda(at_least: Option<CudaVersion>, below: Option<CudaVersion>, why: &str) -> HostCuda {
        HostCuda {
            how: Provenance {
                path: "(knowledge base) driver_branches.toml".to_owned(),
                value: format!("{why}; confirm with nvidia-smi (stackhook doctor --record saves it)"),
            },
            cuda: at_least,
            bound: CudaBound::Range { below },
        }
    }

    /// [`HostProbe::host_cuda`] with no driver version: Jetson's L4T release, WSL2's unknown
    /// Windows driver, or no driver (no CUDA).
    fn host_cuda_without_driver(&self) -> HostCuda {
        let unknown = |why: &str| HostCuda {
            cuda: None,
            bound: CudaBound::Range { below: None },
            how: Provenance { path: "(knowledge base)".to_owned(), value: why.to_owned() },
        };
        if self.is_wsl2() {
            return unknown("WSL2: the Windows driver's version cannot be read from files");
        }
        if !self.is_jetson() {
            return HostCuda {
                cuda: None,
                bound: CudaBound::Exact,
                how: Provenance {
                    path: "/proc/driver/nvidia/version".to_owned(),
                    value: "no driver loaded".to_owned(),
                },
            };
        }
        let Some(release) = self.l4t_version() else {
            return unknown("Jetson: the L4T release is not known");
        };
        let Some(row) = kb::l4t_release(&release) else {
            return unknown(&format!("Jetson Linux (L4T) R{release} is not in the knowledge base"));
        };
        let soc = self.gpus.first().and_then(|g| g.soc.as_deref()).and_then(kb::jetson_soc);
        let compat = match (row.cuda_compat, soc.and_then(|s| s.forward_compat)) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        };
        let jetpack = row.jetpack.split('.').next().unwrap_or(&row.jetpack);
        let base = format!("L4T R{release} = JetPack {jetpack} = CUDA {}", row.cuda);
        let (bound, value) = match compat {
            Some(false) => {
                (CudaBound::Exact, format!("{base}; no CUDA upgrade package for this board and release"))
            }
            Some(true) => (
                CudaBound::Range { below: soc.and_then(|s| s.cuda_compat_below.clone()) },
                format!("{base}; newer CUDA runs only through the CUDA upgrade (cuda-compat) package"),
            ),
            None => (
                CudaBound::Range { below: None },
                format!("{base}; whether newer CUDA runs through cuda-compat is not known"),
            ),
        };
        HostCuda {
            cuda: Some(row.cuda.clone()),
            bound,
            how: Provenance { path: "(knowledge base) jetson_socs.toml".to_owned(), value },
        }
    }

    /// The L4T release as a version (`35.4.1`): `proc/driver/nvidia/version`'s number, else the
    /// first line of `etc/nv_tegra_release` (`# R35 (release), REVISION: 4.1, ...`).
    pub fn l4t_version(&self) -> Option<CudaVersion> {
        if let Some(f) = &self.l4t_release {
            if let Ok(v) = f.value.parse() {
                return Some(v);
            }
        }
        let Platform::Jetson { release: Some(line), .. } = &self.platform else { return None };
        let major = line.trim_start_matches('R').split(|c: char| !c.is_ascii_digit()).next()?;
        let revision = line.split("REVISION:").nth(1).map(|r| r.split(',').next().unwrap_or("").trim());
        let text = match revision {
            Some(r) if !r.is_empty() => format!("{major}.{r}"),
            _ => major.to_owned(),
        };
        text.parse().ok()
    }
}
