//! Rows an administrator adds without a rebuild: `/etc/stackhook/kb.d/*.toml` under the host
//! root.
//!
//! A file uses the built-in tables' schema: any of `[[gpu]]` (as `gpus.toml`), `[[branch]]` (as
//! `driver_branches.toml`) and `[[toolkit]]` (as `cuda_driver.toml`), each row with a non-empty
//! `source`, checked by the same rules as the built-in rows. A file that breaks a rule is refused
//! whole (the caller reports why); the rows of the others still apply. Admin rows take precedence
//! over built-in ones: a GPU's PCI id or model name, a branch's CUDA version.

use serde::Deserialize;

use super::{
    contains_word, invalid, normalize_model, require_source, CudaToolkit, DriverBranch, GpuModel, KbError,
    RawGpu,
};
use crate::version::{CudaVersion, DriverVersion};

/// The directory, relative to the host root.
pub const KB_D: &str = "etc/stackhook/kb.d";
/// At most this many files are read from [`KB_D`].
pub const MAX_FILES: usize = 32;
/// Largest file read.
pub const MAX_FILE: usize = 256 * 1024;

/// The admin rows of every accepted file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extension {
    /// The files whose rows were accepted (absolute inside the host root).
    pub files: Vec<String>,
    gpus: Vec<(GpuModel, String)>,
    branches: Vec<(DriverBranch, String)>,
    toolkits: Vec<(CudaToolkit, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    gpu: Vec<RawGpu>,
    #[serde(default)]
    branch: Vec<DriverBranch>,
    #[serde(default)]
    toolkit: Vec<CudaToolkit>,
}

/// The name kb.d errors quote.
const TABLE: &str = "kb.d";

impl Extension {
    /// Checks `text` (the file at `path`) and adds its rows; on error nothing of it is added.
    pub fn add(&mut self, path: &str, text: &str) -> Result<(), KbError> {
        let file: File = toml::from_str(text)
            .map_err(|source| KbError::Parse { table: TABLE, source: Box::new(source) })?;
        let mut gpus = Vec::new();
        for raw in file.gpu {
            let gpu = GpuModel::from_raw(raw)?;
            gpus.push((gpu, path.to_owned()));
        }
        for row in &file.branch {
            require_source(TABLE, &row.branch.to_string(), &row.source)?;
        }
        for row in &file.toolkit {
            require_source(TABLE, row.cuda.as_str(), &row.source)?;
            if row.cuda.parts().len() != 2 {
                return Err(invalid(TABLE, &row.cuda, "toolkit rows are major.minor"));
            }
        }
        self.gpus.extend(gpus);
        self.branches.extend(file.branch.into_iter().map(|b| (b, path.to_owned())));
        self.toolkits.extend(file.toolkit.into_iter().map(|t| (t, path.to_owned())));
        self.files.push(path.to_owned());
        Ok(())
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.branches.is_empty() && self.toolkits.is_empty()
    }

    /// The admin GPU row with this PCI device id, and its file.
    pub fn gpu_by_pci_id(&self, id: u16) -> Option<(&GpuModel, &str)> {
        self.gpus.iter().find(|(g, _)| g.pci_ids.contains(&id)).map(|(g, f)| (g, f.as_str()))
    }

    /// The admin GPU row a model name denotes (matched as [`super::gpu_by_model_name`] does).
    pub fn gpu_by_model_name(&self, model: &str) -> Option<(&GpuModel, &str)> {
        let haystack = normalize_model(model);
        let mut best: Option<(usize, &(GpuModel, String))> = None;
        for row in &self.gpus {
            for pattern in &row.0.patterns {
                let needle = pattern.to_ascii_lowercase();
                if contains_word(&haystack, &needle) && best.is_none_or(|(len, _)| needle.len() > len) {
                    best = Some((needle.len(), row));
                }
            }
        }
        best.map(|(_, (g, f))| (g, f.as_str()))
    }

    /// The admin row of a driver's own branch that gives its CUDA version, and its file.
    pub fn branch_cuda(&self, driver: &DriverVersion) -> Option<(&CudaVersion, &str)> {
        self.branches
            .iter()
            .find(|(b, _)| b.branch == driver.branch() && b.max_cuda.is_some())
            .and_then(|(b, f)| b.max_cuda.as_ref().map(|c| (c, f.as_str())))
    }

    /// The admin toolkit row of a CUDA release (`major.minor`), and its file.
    pub fn toolkit(&self, cuda: &CudaVersion) -> Option<(&CudaToolkit, &str)> {
        self.toolkits
            .iter()
            .find(|(t, _)| t.cuda.major_minor() == cuda.major_minor())
            .map(|(t, f)| (t, f.as_str()))
    }

    /// The highest CUDA an admin branch row at or below `branch` gives: a lower bound for a
    /// driver of that branch.
    pub fn cuda_at_or_below(&self, branch: u64) -> Option<&CudaVersion> {
        self.branches
            .iter()
            .filter(|(b, _)| b.branch <= branch)
            .filter_map(|(b, _)| b.max_cuda.as_ref())
            .max()
    }

    /// The oldest admin toolkit whose minimum driver is of a branch newer than `branch`: a driver
    /// of `branch` reports less than it.
    pub fn toolkit_above(&self, branch: u64) -> Option<&CudaVersion> {
        self.toolkits.iter().filter(|(t, _)| t.driver.branch() > branch).map(|(t, _)| &t.cuda).min()
    }

    /// The newest branch an admin row names.
    pub fn newest_branch(&self) -> Option<u64> {
        self.branches.iter().map(|(b, _)| b.branch).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FUTURE_GPU: &str = r#"
[[gpu]]
name = "NVIDIA Future 9000"
patterns = ["Future 9000"]
pci_ids = [0x3ff0]
compute_capability = "12.0"
architecture = "Blackwell"
brand = "nvidia"
datacenter = true
source = "nvidia-smi --query-gpu=compute_cap on our fleet, 2026-11"

[[branch]]
branch = 630
max_cuda = "13.6"
source = "nvidia-smi header on our fleet"
"#;

    #[test]
    fn admin_rows_are_found_and_checked() {
        let mut ext = Extension::default();
        ext.add("/etc/stackhook/kb.d/fleet.toml", FUTURE_GPU).unwrap();
        let (gpu, file) = ext.gpu_by_pci_id(0x3ff0).unwrap();
        assert_eq!((gpu.name.as_str(), file), ("NVIDIA Future 9000", "/etc/stackhook/kb.d/fleet.toml"));
        assert!(ext.gpu_by_model_name("NVIDIA Future 9000 80GB").is_some());
        assert!(gpu.forward_compat);
        let (cuda, _) = ext.branch_cuda(&"630.10".parse().unwrap()).unwrap();
        assert_eq!(cuda.as_str(), "13.6");
        assert_eq!(ext.newest_branch(), Some(630));

        // A row without a source refuses the whole file.
        let mut ext = Extension::default();
        let err = ext
            .add(
                "/x.toml",
                &FUTURE_GPU.replace("source = \"nvidia-smi header on our fleet\"", "source = \"\""),
            )
            .unwrap_err();
        assert_eq!(err.to_string(), r#"knowledge base table kb.d, row "630": empty source"#);
        assert!(ext.is_empty() && ext.files.is_empty());
        let err = ext.add("/x.toml", "[[gpus]]\nname = 1\n").unwrap_err();
        assert!(matches!(err, KbError::Parse { table: "kb.d", .. }), "{err}");
    }
}
