//! The compatibility knowledge base: what NVIDIA, the torch project and the PCI ID Repository
//! publish about which driver runs which CUDA, which GPU has which compute capability, and what
//! a torch wheel was built for and pins.
//!
//! The facts live as data in `contract/kb/*.toml`. Every row carries a `source` naming where it comes
//! from (a release-notes table, a wheel's `Requires-Dist`, `pci.ids`), a public page, never a file
//! outside the repository; the tables' comments name the errors of the project's origin documents
//! that must not be encoded. Prefer the artifact over a table: torch rows were read from the wheels
//! on the Python Package Index (metadata, and the `-gencode` flags compiled into
//! `libtorch_cuda.so`).
//!
//! `build.rs` converts each TOML file to JSON, which is embedded with `include_str!` and read
//! into the row types on the first lookup in that table; each table loads on its own. Why: the
//! hook runs on every container start and must finish in about a millisecond; parsing all six
//! TOML files took it some 3 ms, where reading the two tables it needs (GPUs, driver branches; on a
//! Jetson also the SOC table) as JSON takes tens of microseconds.
//!
//! The tables are compile-time data: a malformed one is a build defect that the build (TOML
//! syntax) or the unit tests ([`validate`]: schema and row rules) catch; at run time the
//! accessors `expect` a valid table.
//!
//! Lookups are total over their input: a version older or newer than the tables answers
//! `None` (or, where documented, the nearest row below or a flagged lower bound), never an
//! invented value. The hook treats what the tables do not know as unknown, not as failed
//! ([`DriverCuda::Bounded`]); an administrator adds rows without a rebuild in
//! `/etc/stackhook/kb.d` ([`extra`]).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::LazyLock;

use serde::Deserialize;

use super::version::{
    ComputeCapability, CudaVersion, DriverVersion, PackageSpecifiers, PackageVersion, PythonVersion,
};

pub mod extra;
#[cfg(test)]
mod tests;

/// The tables as `build.rs` wrote them: JSON of `contract/kb/<name>.toml`.
mod json {
    pub(super) const CUDA_DRIVER: &str = include_str!(concat!(env!("OUT_DIR"), "/cuda_driver.json"));
    pub(super) const DRIVER_BRANCHES: &str = include_str!(concat!(env!("OUT_DIR"), "/driver_branches.json"));
    pub(super) const TORCH: &str = include_str!(concat!(env!("OUT_DIR"), "/torch.json"));
    pub(super) const CUDNN: &str = include_str!(concat!(env!("OUT_DIR"), "/cudnn.json"));
    pub(super) const GPUS: &str = include_str!(concat!(env!("OUT_DIR"), "/gpus.json"));
    pub(super) const CUDA_COMPONENTS: &str = include_str!(concat!(env!("OUT_DIR"), "/cuda_components.json"));
    pub(super) const JETSON_SOCS: &str = include_str!(concat!(env!("OUT_DIR"), "/jetson_socs.json"));
}

/// The TOML source of each table, by the name errors quote: the tests feed broken text to the same
/// checks the embedded tables go through.
#[cfg(test)]
const TABLES: Tables = Tables {
    cuda_driver: include_str!("../../kb/cuda_driver.toml"),
    driver_branches: include_str!("../../kb/driver_branches.toml"),
    torch: include_str!("../../kb/torch.toml"),
    cudnn: include_str!("../../kb/cudnn.toml"),
    gpus: include_str!("../../kb/gpus.toml"),
    cuda_components: include_str!("../../kb/cuda_components.toml"),
    jetson_socs: include_str!("../../kb/jetson_socs.toml"),
};

/// The TOML text of each table (kept apart so tests can feed broken text to the same checks).
#[cfg(test)]
#[derive(Clone, Copy)]
struct Tables {
    cuda_driver: &'static str,
    driver_branches: &'static str,
    torch: &'static str,
    cudnn: &'static str,
    gpus: &'static str,
    cuda_components: &'static str,
    jetson_socs: &'static str,
}

/// An embedded table that does not parse or breaks a rule of its schema.
#[derive(Debug, thiserror::Error)]
pub enum KbError {
    /// The TOML does not parse into the table's schema (tables given as TOML text, in tests; the
    /// build fails on TOML that does not parse at all).
    #[error("knowledge base table {table}: {source}")]
    Parse {
        /// File name under `contract/kb/`.
        table: &'static str,
        /// What the TOML parser said (it quotes line and column).
        #[source]
        source: Box<toml::de::Error>,
    },
    /// The embedded JSON form of the table (`build.rs` converts the TOML file) does not fit the
    /// table's schema: an unknown or missing field, or a value of the wrong type.
    #[error("knowledge base table {table}: {source}")]
    Schema {
        /// File name under `contract/kb/`.
        table: &'static str,
        /// What the JSON parser said (it names the field; its line and column are of the JSON).
        #[source]
        source: Box<serde_json::Error>,
    },
    /// A row parses but is not valid (bad version text, duplicate key, missing source...).
    #[error("knowledge base table {table}, row {row:?}: {why}")]
    Invalid {
        /// File name under `contract/kb/`.
        table: &'static str,
        /// The row's key (CUDA version, GPU name, torch version...).
        row: String,
        /// What is wrong with it.
        why: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Public row types
// ---------------------------------------------------------------------------------------------

/// A CUDA toolkit release and the driver it needs (CUDA release notes, table 3).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaToolkit {
    /// The toolkit's `major.minor` (`12.1`).
    pub cuda: CudaVersion,
    /// Minimum Linux `x86_64` driver of the GA release.
    pub driver: DriverVersion,
    /// Update releases whose minimum driver differs from the GA one, where the table gives it.
    #[serde(default)]
    pub updates: Vec<CudaUpdate>,
    /// Where the row comes from.
    pub source: String,
}

/// An update release of a toolkit (`12.2.2`, "12.2 Update 2") and its minimum driver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaUpdate {
    /// The update's full version.
    pub cuda: CudaVersion,
    /// Its minimum Linux `x86_64` driver.
    pub driver: DriverVersion,
}

/// CUDA minor-version compatibility: the driver every toolkit of a major version runs on,
/// as long as the application uses no newer-driver feature (CUDA release notes, table 2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinorCompat {
    /// CUDA major version (11, 12, 13).
    pub major: u64,
    /// Minimum driver.
    pub driver: DriverVersion,
    /// Where the row comes from.
    pub source: String,
}

/// A CUDA release known to exist whose minimum driver was not verified (`[[unverified]]` of
/// `cuda_driver.toml`): no number is invented for it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnverifiedToolkit {
    /// The release's `major.minor`.
    pub cuda: CudaVersion,
    /// Where it is known from.
    pub source: String,
}

/// The drivers a CUDA release needs, as [`cuda_min_driver`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDriverRow {
    /// The release the values are for: the GA `major.minor` or a known update (`12.2.2`).
    pub cuda: CudaVersion,
    /// Minimum driver to use every feature of this release (table 3).
    pub toolkit_driver: DriverVersion,
    /// Minimum driver under minor-version compatibility (table 2), without newer-driver features.
    pub minor_compat_driver: DriverVersion,
    /// Where both values come from.
    pub source: String,
    /// `Some(why)` when `toolkit_driver` is only a lower bound: the release is newer than every
    /// verified row (or has no verified minimum), so the newest verified floor is answered.
    pub unverified: Option<String>,
}

/// A driver branch and the highest CUDA it supports (`nvidia-smi` "CUDA Version").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriverBranch {
    /// The branch: the driver's major number (535).
    pub branch: u64,
    /// The highest CUDA version drivers of this branch report; `None` where the branch is known
    /// to exist but that value was not verified (it is then at least the previous row's).
    #[serde(default)]
    pub max_cuda: Option<CudaVersion>,
    /// A long-term support branch of the data-center driver lifecycle.
    #[serde(default)]
    pub lts: bool,
    /// End of life (`YYYY-MM`), where known.
    #[serde(default)]
    pub eol: Option<String>,
    /// Where the row comes from.
    pub source: String,
}

/// The driver branches that drive GPUs of an architecture (`[[architecture]]` of
/// `driver_branches.toml`): the first (Blackwell: 570) and the last (Pascal: 580).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchitectureSupport {
    /// The architecture as `gpus.toml` names it (`Pascal`).
    pub name: String,
    /// The compute capabilities of the architecture the row is about (GB10's 12.1), where it is
    /// not about all of them; such a row overrides the architecture's row for those GPUs.
    #[serde(default)]
    pub compute_capabilities: Vec<ComputeCapability>,
    /// The first branch that supports it (570), where the table names one.
    #[serde(default)]
    pub first_branch: Option<u64>,
    /// The last branch that supports it (580); [`NO_LAST_BRANCH`] while every branch since the
    /// first does.
    #[serde(default = "no_last_branch")]
    pub last_branch: u64,
    /// Where the row comes from.
    pub source: String,
}

/// [`ArchitectureSupport::last_branch`] of an architecture that no branch has dropped.
pub const NO_LAST_BRANCH: u64 = u64::MAX;

fn no_last_branch() -> u64 {
    NO_LAST_BRANCH
}

/// A Jetson Linux (L4T) release line and the CUDA it ships (`[[l4t]]` of `jetson_socs.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L4tRelease {
    /// The first L4T release of the line (`32.4`); the row applies up to the next row of the
    /// same major.
    pub release: CudaVersion,
    /// The `JetPack` version of that release (`4.4`).
    pub jetpack: String,
    /// The CUDA it ships (`10.2`).
    pub cuda: CudaVersion,
    /// Whether NVIDIA's CUDA upgrade (compatibility) package exists for this release line
    /// (`JetPack` 5.0 and later); `None`: not known.
    #[serde(default)]
    pub cuda_compat: Option<bool>,
    /// Where the row comes from.
    pub source: String,
}

/// A GPU model as the driver names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuModel {
    /// Display name (`NVIDIA H100`).
    pub name: String,
    /// Substrings of the driver's model name that identify this model, matched
    /// case-insensitively at word boundaries; see [`gpu_by_model_name`].
    pub patterns: Vec<String>,
    /// Full model names the driver prints for it (`NVIDIA H100 80GB HBM3`), kept as examples.
    pub model_names: Vec<String>,
    /// PCI device ids (vendor 0x10de); empty for integrated GPUs (Jetson).
    pub pci_ids: Vec<u16>,
    /// Compute capability.
    pub compute_capability: ComputeCapability,
    /// Architecture name (`Ampere`, `Ada Lovelace`, `Hopper`).
    pub architecture: String,
    /// NVML product brand, lowercase as `NVIDIA_REQUIRE_*` compares it (`nvidia`, `tesla`,
    /// `geforce`), as current drivers report it.
    pub brand: String,
    /// A data-center GPU.
    pub datacenter: bool,
    /// Runs newer CUDA through the cuda-compat forward-compatibility package (data-center GPUs
    /// and Jetson only).
    pub forward_compat: bool,
    /// Where the row comes from.
    pub source: String,
}

/// A Tegra SOC of the Jetson modules and its integrated GPU (`jetson_socs.toml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetsonSoc {
    /// The SOC's device-tree `compatible` string (`nvidia,tegra234`), the last one of the root
    /// node's `compatible` property.
    pub compatible: String,
    /// The module family (`Jetson Orin`).
    pub name: String,
    /// The Jetson modules built on it (`Jetson AGX Orin`, `Jetson Orin NX`, ...).
    pub modules: Vec<String>,
    /// Where the row comes from.
    pub source: String,
    /// Whether the GPU runs a CUDA newer than its L4T release ships through the CUDA upgrade
    /// package (`JetPack` 5.0 and later, Xavier and Orin); `None`: not known.
    pub forward_compat: Option<bool>,
    /// The CUDA version from which the upgrade package no longer serves this SOC (Xavier: 13.0).
    pub cuda_compat_below: Option<CudaVersion>,
    /// The integrated GPU as a knowledge-base model (compute capability, architecture, brand),
    /// for the code that reads GPU models.
    gpu: GpuModel,
}

impl JetsonSoc {
    /// The SOC's name: `compatible` without its vendor (`tegra234`).
    pub fn soc(&self) -> &str {
        self.compatible.split_once(',').map_or(self.compatible.as_str(), |(_, soc)| soc)
    }

    /// The name the probe gives the integrated GPU: `Jetson Orin (tegra234)`.
    pub fn model_name(&self) -> String {
        format!("{} ({})", self.name, self.soc())
    }

    /// The integrated GPU as a [`GpuModel`]: no PCI ids, not a data-center part, and
    /// forward-compatible where the SOC's row says so (`JetPack` 5+ boards: Xavier and Orin).
    pub fn gpu(&self) -> &GpuModel {
        &self.gpu
    }
}

/// A torch release: what it supports and which builds were published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchRelease {
    /// The version (`2.1.0`).
    pub version: String,
    /// Oldest and newest Python minor with published wheels (inclusive).
    pub python: (PythonVersion, PythonVersion),
    /// The CUDA builds published for Linux `x86_64`.
    pub variants: Vec<TorchVariant>,
    /// The torchvision release that pins this torch (`0.16.0`); empty when none pins it
    /// exactly.
    pub torchvision: String,
    /// The torchaudio release that pins this torch; empty when none does (after 2.10).
    pub torchaudio: String,
    /// PEP 440 specifier of the `numpy` versions the wheels work with (`<2`); empty: no bound.
    pub numpy: String,
    /// What maintainers know beyond the index's metadata (the `numpy` bound's source), with its
    /// citation; `stackbuild tables torch` keeps it.
    pub notes: String,
    /// Where the row comes from: the metadata files `stackbuild tables torch` read.
    pub source: String,
    /// `version` parsed, for lookups.
    parsed: PackageVersion,
}

/// One CUDA build of a torch release.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchVariant {
    /// The CUDA version it was built with.
    pub cuda: CudaVersion,
    /// The local version tag (`cu121`).
    pub tag: String,
    /// The cuDNN it was built against and must load (`8.9.2.26`).
    pub cudnn: String,
    /// Compute capabilities with machine code (cubins) in the wheel, ascending; empty where no
    /// one has read the wheel's fat binaries yet (the build reads them itself).
    pub arch: Vec<ComputeCapability>,
    /// Whether PTX of the highest `arch` entry is included, which the driver can JIT-compile
    /// for newer GPUs.
    pub ptx: bool,
    /// This build is the plain Linux `x86_64` wheel on the Python Package Index (the other builds
    /// are only on the torch project's own index).
    #[serde(default)]
    pub pypi: bool,
    /// Exact `Requires-Dist` pins of the wheel (requirement name -> version), for the build on
    /// the Python Package Index; empty where the pins were not read from the artifact.
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
    /// Compute capabilities with cubins in the Linux `aarch64` wheel of this build, where the
    /// index publishes one (the package index's wheels from torch 2.11, whose CUDA pins hold on `aarch64`
    /// too; PTX as `ptx` says); empty: no `aarch64` CUDA wheel of this build.
    #[serde(default)]
    pub aarch64_arch: Vec<ComputeCapability>,
    /// Where `arch`, `ptx` and `aarch64_arch` come from (only the wheel's fat-binary headers
    /// tell them, so the table generator keeps this as maintainers wrote it).
    #[serde(default)]
    pub arch_source: String,
    /// What maintainers know beyond the metadata, with its citation.
    #[serde(default)]
    pub notes: String,
    /// Where the row comes from: for the package index's build, the metadata file the table
    /// generator read.
    pub source: String,
}

/// A cuDNN release line (`8.9`, `9.1`) and the builds it ships.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudnnRow {
    /// `major.minor` of the line.
    pub line: String,
    /// Its packages ("for CUDA 12.x", ...).
    #[serde(rename = "build")]
    pub builds: Vec<CudnnBuild>,
    /// Where the row comes from.
    pub source: String,
}

/// One cuDNN package flavour of a line, per the support matrix.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudnnBuild {
    /// The package as NVIDIA names it (`for CUDA 12.x`).
    pub package: String,
    /// Oldest and newest CUDA toolkit it supports (inclusive, `major.minor`).
    pub cuda: (CudaVersion, CudaVersion),
    /// Minimum Linux driver.
    pub driver: DriverVersion,
    /// Lowest and highest compute capability it supports (inclusive).
    pub compute_capability: (ComputeCapability, ComputeCapability),
}

/// Versions of the libraries one CUDA toolkit release ships (its release notes' "CUDA Toolkit
/// Major Component Versions", and NVIDIA's redistributable manifest of the release).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaComponents {
    /// The full release (`12.1.1`).
    pub cuda: CudaVersion,
    /// CUDA runtime (`nvidia-cuda-runtime-cu12`).
    pub cudart: String,
    /// cuBLAS.
    pub cublas: String,
    /// cuFFT.
    pub cufft: String,
    /// cuRAND.
    pub curand: String,
    /// cuSOLVER.
    pub cusolver: String,
    /// cuSPARSE.
    pub cusparse: String,
    /// NVRTC.
    pub nvrtc: String,
    /// nvJitLink (CUDA 12 and later), where known.
    #[serde(default)]
    pub nvjitlink: Option<String>,
    /// Where the row comes from.
    pub source: String,
}

// ---------------------------------------------------------------------------------------------
// Lookups
// ---------------------------------------------------------------------------------------------

/// The GPU with this PCI device id (vendor 0x10de), if the table knows it.
pub fn gpu_by_pci_id(device_id: u16) -> Option<&'static GpuModel> {
    let table = loaded(&GPUS);
    table.gpu_by_id.get(&device_id).map(|&i| &table.gpus[i])
}

/// The GPU a driver model name denotes (`Model:` of `/proc/driver/nvidia/gpus/*/information`,
/// or `nvidia-smi`'s product name).
///
/// Patterns match case-insensitively, with runs of whitespace collapsed, and only at word
/// boundaries (the characters around a match are not letters or digits), so `A10` matches
/// neither `A100` nor `A10G`. The longest matching pattern wins, so `RTX 4090 D` beats
/// `RTX 4090` and `RTX 4060 Ti` beats `RTX 4060`. `None` if nothing matches.
pub fn gpu_by_model_name(model: &str) -> Option<&'static GpuModel> {
    let haystack = normalize_model(model);
    let mut best: Option<(usize, &'static GpuModel)> = None;
    for gpu in all_gpus() {
        for pattern in &gpu.patterns {
            let needle = pattern.to_ascii_lowercase();
            if contains_word(&haystack, &needle) && best.is_none_or(|(len, _)| needle.len() > len) {
                best = Some((needle.len(), gpu));
            }
        }
    }
    best.map(|(_, gpu)| gpu)
}

/// Every GPU model in the table.
pub fn all_gpus() -> &'static [GpuModel] {
    &loaded(&GPUS).gpus
}

/// The Jetson SOC with this device-tree `compatible` string (`nvidia,tegra234`, compared exactly
/// after trimming whitespace), if the table knows it.
pub fn jetson_soc(compatible: &str) -> Option<&'static JetsonSoc> {
    let compatible = compatible.trim();
    jetson_socs().iter().find(|soc| soc.compatible == compatible)
}

/// Every Jetson SOC row.
pub fn jetson_socs() -> &'static [JetsonSoc] {
    &loaded(&JETSON_SOCS).rows
}

/// The date the built-in tables were last checked against their sources (`stackhook doctor`
/// prints it, and warns when the host is newer than the tables).
pub const KB_DATE: &str = "2026-12-01";

/// The highest CUDA version a driver supports, by its branch: the exact value of its own branch's
/// row, else the nearest verified value below it (a lower bound: see [`driver_cuda`] for what is
/// known exactly). `None` for a branch older than the table.
pub fn driver_max_cuda(driver: &DriverVersion) -> Option<CudaVersion> {
    loaded(&BRANCHES)
        .rows
        .iter()
        .rev()
        .filter(|row| row.branch <= driver.branch())
        .find_map(|row| row.max_cuda.clone())
}

/// The branch row that applies to a driver: its own branch, or the nearest one below it.
pub fn driver_branch(driver: &DriverVersion) -> Option<&'static DriverBranch> {
    loaded(&BRANCHES).rows.iter().rev().find(|row| row.branch <= driver.branch())
}

/// What the tables tell of the highest CUDA a driver supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverCuda {
    /// The driver's own branch has a verified row.
    Exact {
        /// The CUDA version drivers of the branch report.
        cuda: CudaVersion,
        /// The row.
        branch: u64,
        /// Where the row comes from.
        source: String,
    },
    /// The branch has no verified row (newer than the table, between rows, older than the table,
    /// or a row without `max_cuda`): the driver supports at least `at_least` (the nearest verified
    /// row below) and less than `below` (the first toolkit whose minimum driver is of a newer
    /// branch), where known.
    Bounded {
        /// A lower bound, `None` below the table.
        at_least: Option<CudaVersion>,
        /// An exclusive upper bound, `None` when no newer toolkit's minimum is known.
        below: Option<CudaVersion>,
        /// Why the value is not known, for reports.
        why: String,
    },
}

/// What the branch and toolkit tables tell of `driver`'s CUDA version. A toolkit's minimum
/// driver belongs to the branch that first reports it, and branches report increasing CUDA, so a
/// driver of an older branch than a toolkit's minimum reports less than that toolkit.
pub fn driver_cuda(driver: &DriverVersion) -> DriverCuda {
    let branch = driver.branch();
    let rows = &loaded(&BRANCHES).rows;
    if let Some(row) = rows.iter().find(|row| row.branch == branch) {
        if let Some(cuda) = &row.max_cuda {
            return DriverCuda::Exact { cuda: cuda.clone(), branch, source: row.source.clone() };
        }
    }
    let at_least = driver_max_cuda(driver);
    let below = cuda_toolkits().iter().find(|t| t.driver.branch() > branch).map(|t| t.cuda.clone());
    let newest = rows.last().map_or(0, |r| r.branch);
    let why = if branch > newest {
        format!("driver branch {branch} is newer than the knowledge base (newest branch: {newest})")
    } else if rows.iter().any(|r| r.branch == branch) {
        format!("the CUDA version of driver branch {branch} is not verified in the knowledge base")
    } else if at_least.is_none() {
        format!("driver branch {branch} is older than the knowledge base")
    } else {
        format!("driver branch {branch} is not in the knowledge base")
    };
    DriverCuda::Bounded { at_least, below, why }
}

/// The newest driver branch row.
pub fn newest_branch() -> Option<&'static DriverBranch> {
    driver_branches().last()
}

/// The row of `architecture` (`Pascal`: last branch 580; `Blackwell`: first branch 570) about all
/// its GPUs, if the table has one; architectures without a row are driven by every branch in the
/// table.
pub fn architecture_support(architecture: &str) -> Option<&'static ArchitectureSupport> {
    loaded(&BRANCHES)
        .architectures
        .iter()
        .find(|a| a.name.eq_ignore_ascii_case(architecture) && a.compute_capabilities.is_empty())
}

/// The row that says which branches drive `model`: the one of its architecture that names its
/// compute capability (GB10, 12.1: first branch 580), else its architecture's
/// ([`architecture_support`]).
pub fn gpu_support(model: &GpuModel) -> Option<&'static ArchitectureSupport> {
    let rows = &loaded(&BRANCHES).architectures;
    let same = |a: &&ArchitectureSupport| a.name.eq_ignore_ascii_case(&model.architecture);
    rows.iter()
        .filter(same)
        .find(|a| a.compute_capabilities.contains(&model.compute_capability))
        .or_else(|| architecture_support(&model.architecture))
}

/// The L4T release line a Jetson Linux release (`32.7.1`, `35.4.1`) belongs to: the row of the
/// same major with the highest release at or below it. `None` for a major the table lacks.
pub fn l4t_release(release: &CudaVersion) -> Option<&'static L4tRelease> {
    l4t_releases()
        .iter()
        .filter(|row| row.release.part(0) == release.part(0) && row.release <= *release)
        .max_by(|a, b| a.release.cmp(&b.release))
}

/// Every L4T row, ascending.
pub fn l4t_releases() -> &'static [L4tRelease] {
    &loaded(&JETSON_SOCS).l4t
}

/// Every driver branch row, ascending.
pub fn driver_branches() -> &'static [DriverBranch] {
    &loaded(&BRANCHES).rows
}

/// The drivers a CUDA release needs: the toolkit's own minimum and the minor-version
/// compatibility minimum of its major.
///
/// `12.1` answers the GA row; a full version (`12.2.2`) answers the highest known update at or
/// below it, or the GA row (the table lists every update whose minimum differs from GA).
/// A release newer than every verified row, or one known to exist without a verified minimum
/// (`[[unverified]]`), answers the newest verified floor with [`CudaDriverRow::unverified`] set:
/// a newer toolkit never needs an older driver. `None` for a release inside the table's range that
/// it does not know (there is no 12.7 toolkit) or older than the table. Before CUDA 11 there is
/// no minor-version compatibility: the minor-compat driver is the toolkit's own.
pub fn cuda_min_driver(cuda: &CudaVersion) -> Option<CudaDriverRow> {
    let table = loaded(&CUDA_DRIVER);
    let Some(toolkit) = table.toolkits.iter().find(|row| row.cuda.major_minor() == cuda.major_minor()) else {
        return newer_than_table(cuda);
    };
    let (release, driver) = toolkit
        .updates
        .iter()
        .filter(|update| update.cuda <= *cuda)
        .max_by(|a, b| a.cuda.cmp(&b.cuda))
        .map_or((&toolkit.cuda, &toolkit.driver), |update| (&update.cuda, &update.driver));
    let (minor_driver, source) = match minor_compat(cuda.part(0)) {
        Some(minor) => (minor.driver.clone(), format!("{}; {}", toolkit.source, minor.source)),
        None => (driver.clone(), toolkit.source.clone()),
    };
    Some(CudaDriverRow {
        cuda: release.clone(),
        toolkit_driver: driver.clone(),
        minor_compat_driver: minor_driver,
        source,
        unverified: None,
    })
}

/// [`cuda_min_driver`] of a release above the verified rows: the newest verified floor.
fn newer_than_table(cuda: &CudaVersion) -> Option<CudaDriverRow> {
    let table = loaded(&CUDA_DRIVER);
    let newest = table.toolkits.last()?;
    if cuda.major_minor() <= newest.cuda.major_minor() {
        return None;
    }
    let floor = newest.updates.last().map_or(&newest.driver, |u| &u.driver);
    let known = table.unverified.iter().find(|u| u.cuda.major_minor() == cuda.major_minor());
    let why = match known {
        Some(_) => format!(
            "CUDA {cuda}'s minimum driver is not verified in the knowledge base; {floor} (CUDA {}'s) is a lower bound",
            newest.cuda
        ),
        None => format!(
            "CUDA {cuda} is newer than the knowledge base (newest: CUDA {}); {floor} (CUDA {}'s minimum) is a lower bound",
            table.unverified.last().map_or(&newest.cuda, |u| &u.cuda),
            newest.cuda
        ),
    };
    let minor = minor_compat(cuda.part(0)).filter(|m| m.driver <= *floor);
    Some(CudaDriverRow {
        cuda: cuda.clone(),
        toolkit_driver: floor.clone(),
        minor_compat_driver: minor.map_or_else(|| floor.clone(), |m| m.driver.clone()),
        source: known.map_or_else(|| newest.source.clone(), |k| format!("{}; {}", k.source, newest.source)),
        unverified: Some(why),
    })
}

/// Every toolkit row, ascending.
pub fn cuda_toolkits() -> &'static [CudaToolkit] {
    &loaded(&CUDA_DRIVER).toolkits
}

/// The minor-version compatibility row of a CUDA major version.
pub fn minor_compat(cuda_major: u64) -> Option<&'static MinorCompat> {
    loaded(&CUDA_DRIVER).minor_compat.iter().find(|row| row.major == cuda_major)
}

/// A torch release: the release with the same release numbers (local tags such as `+cu121`
/// and pre-release suffixes ignored, so `2.1.0+cu121` and `2.3.0rc1` find `2.1.0` and
/// `2.3.0`), else the newest known release of the same `major.minor` line (for a patch
/// release the table lacks). `None` for a line the table does not cover.
pub fn torch_release(version: &PackageVersion) -> Option<&'static TorchRelease> {
    let wanted = version.only_release();
    let releases = torch_releases();
    releases.iter().find(|row| row.parsed == wanted).or_else(|| {
        let line = |v: &PackageVersion| (v.release().first().copied(), v.release().get(1).copied());
        releases
            .iter()
            .filter(|row| line(&row.parsed) == line(&wanted))
            .max_by(|a, b| a.parsed.cmp(&b.parsed))
    })
}

/// Every torch release row, ascending.
pub fn torch_releases() -> &'static [TorchRelease] {
    &loaded(&TORCH).rows
}

impl TorchRelease {
    /// The build with this local tag (`cu121`).
    pub fn variant(&self, tag: &str) -> Option<&TorchVariant> {
        self.variants.iter().find(|v| v.tag == tag)
    }

    /// The build published on the Python Package Index as the plain Linux `x86_64` wheel.
    pub fn pypi_variant(&self) -> Option<&TorchVariant> {
        self.variants.iter().find(|v| v.pypi)
    }

    /// Whether wheels were published for this Python (compared by `major.minor`).
    pub fn supports_python(&self, python: &PythonVersion) -> bool {
        let minor = |v: &PythonVersion| (v.part(0), v.part(1));
        (minor(&self.python.0)..=minor(&self.python.1)).contains(&minor(python))
    }

    /// The `numpy` specifier, parsed.
    pub fn numpy_specifiers(&self) -> PackageSpecifiers {
        // Validated at load, so the fallback (no bound) is unreachable.
        PackageSpecifiers::from_str(&self.numpy).unwrap_or_else(|_| PackageSpecifiers::empty())
    }
}

impl TorchVariant {
    /// Whether the build has code for a GPU of this compute capability: a cubin of the same
    /// major and an equal or lower minor (`sm_86` code runs on 8.9), or PTX of an architecture
    /// at or below it, which the driver JIT-compiles. Nothing runs across majors without PTX:
    /// that case fails with "no kernel image is available for execution on the device".
    pub fn runs_on(&self, cc: ComputeCapability) -> bool {
        let cubin = self.arch.iter().any(|a| a.major == cc.major && a.minor <= cc.minor);
        let ptx = self.ptx && self.arch.last().is_some_and(|highest| *highest <= cc);
        cubin || ptx
    }
}

/// The cuDNN line of a version (`8.9.2.26`, `8.9`, `9.1.0.70`): the row whose `major.minor`
/// matches.
pub fn cudnn_line(version: &str) -> Option<&'static CudnnRow> {
    let mut parts = version.trim().split('.');
    let major = parts.next()?;
    let minor = parts.next()?;
    let line = format!("{major}.{minor}");
    cudnn_lines().iter().find(|row| row.line == line)
}

/// Every cuDNN line row, ascending.
pub fn cudnn_lines() -> &'static [CudnnRow] {
    &loaded(&CUDNN).rows
}

/// The component versions of a CUDA release. A full version (`12.4.1`) must match a row
/// exactly; a `major.minor` (`12.4`) answers the newest known release of that line.
pub fn cuda_components(cuda: &CudaVersion) -> Option<&'static CudaComponents> {
    let rows = all_cuda_components();
    if cuda.parts().len() >= 3 {
        rows.iter().find(|row| row.cuda == *cuda)
    } else {
        rows.iter()
            .filter(|row| row.cuda.major_minor() == cuda.major_minor())
            .max_by(|a, b| a.cuda.cmp(&b.cuda))
    }
}

/// Every component row, ascending.
pub fn all_cuda_components() -> &'static [CudaComponents] {
    &loaded(&COMPONENTS).rows
}

/// Checks that every embedded table parses and is valid. The accessors panic on an invalid
/// table; tests (and `doctor`, to report a broken build) call this first.
pub fn validate() -> Result<(), &'static KbError> {
    CUDA_DRIVER.as_ref()?;
    BRANCHES.as_ref()?;
    TORCH.as_ref()?;
    CUDNN.as_ref()?;
    GPUS.as_ref()?;
    COMPONENTS.as_ref()?;
    JETSON_SOCS.as_ref()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

// One lazy cell per table, so that a lookup pays only for the table it reads.
static CUDA_DRIVER: LazyLock<Result<CudaDriverTable, KbError>> =
    LazyLock::new(|| from_json(json::CUDA_DRIVER));
static BRANCHES: LazyLock<Result<BranchTable, KbError>> = LazyLock::new(|| from_json(json::DRIVER_BRANCHES));
static TORCH: LazyLock<Result<TorchTable, KbError>> = LazyLock::new(|| from_json(json::TORCH));
static CUDNN: LazyLock<Result<CudnnTable, KbError>> = LazyLock::new(|| from_json(json::CUDNN));
static GPUS: LazyLock<Result<GpuTable, KbError>> = LazyLock::new(|| from_json(json::GPUS));
static COMPONENTS: LazyLock<Result<ComponentsTable, KbError>> =
    LazyLock::new(|| from_json(json::CUDA_COMPONENTS));
static JETSON_SOCS: LazyLock<Result<JetsonSocTable, KbError>> =
    LazyLock::new(|| from_json(json::JETSON_SOCS));

/// A loaded table.
fn loaded<T>(cell: &'static LazyLock<Result<T, KbError>>) -> &'static T {
    // The tables are compiled in; `validate` is tested, so this cannot fail in a released build.
    cell.as_ref()
        .expect("embedded compatibility knowledge base is invalid (a build defect; run the kb tests)")
}

/// A table file under `contract/kb/`: its schema as serde reads it and the rules its rows keep.
trait Table: Sized {
    /// File name under `contract/kb/`, which errors quote.
    const FILE: &'static str;
    /// The file's schema.
    type File: for<'de> Deserialize<'de>;
    /// Checks the rows and builds the table.
    fn check(file: Self::File) -> Result<Self, KbError>;
}

/// A table from the JSON `build.rs` wrote of it.
fn from_json<T: Table>(json: &str) -> Result<T, KbError> {
    let file = serde_json::from_str(json)
        .map_err(|source| KbError::Schema { table: T::FILE, source: Box::new(source) })?;
    T::check(file)
}

/// A table from TOML text, as the build reads it: the tests feed broken tables through this.
#[cfg(test)]
fn from_toml<T: Table>(text: &str) -> Result<T, KbError> {
    let file =
        toml::from_str(text).map_err(|source| KbError::Parse { table: T::FILE, source: Box::new(source) })?;
    T::check(file)
}

/// All seven tables given as TOML text.
#[cfg(test)]
struct Kb;

#[cfg(test)]
impl Kb {
    /// Loads and checks every table of `tables`, in the order the files are listed.
    fn parse(tables: Tables) -> Result<(), KbError> {
        from_toml::<CudaDriverTable>(tables.cuda_driver)?;
        from_toml::<BranchTable>(tables.driver_branches)?;
        from_toml::<TorchTable>(tables.torch)?;
        from_toml::<CudnnTable>(tables.cudnn)?;
        from_toml::<GpuTable>(tables.gpus)?;
        from_toml::<ComponentsTable>(tables.cuda_components)?;
        from_toml::<JetsonSocTable>(tables.jetson_socs)?;
        Ok(())
    }
}

/// The parts of the embedded tables that the tests inspect beyond the public accessors.
#[cfg(test)]
struct KbView {
    minor_compat: &'static [MinorCompat],
    gpu_by_id: &'static BTreeMap<u16, usize>,
}

#[cfg(test)]
fn kb() -> KbView {
    KbView { minor_compat: &loaded(&CUDA_DRIVER).minor_compat, gpu_by_id: &loaded(&GPUS).gpu_by_id }
}

/// `cuda_driver.toml`: toolkits and minor-version compatibility.
struct CudaDriverTable {
    toolkits: Vec<CudaToolkit>,
    minor_compat: Vec<MinorCompat>,
    unverified: Vec<UnverifiedToolkit>,
}

/// `driver_branches.toml`.
struct BranchTable {
    rows: Vec<DriverBranch>,
    architectures: Vec<ArchitectureSupport>,
}

/// `torch.toml`.
struct TorchTable {
    rows: Vec<TorchRelease>,
}

/// `cudnn.toml`.
struct CudnnTable {
    rows: Vec<CudnnRow>,
}

/// `gpus.toml`, with an index by PCI device id.
struct GpuTable {
    gpus: Vec<GpuModel>,
    gpu_by_id: BTreeMap<u16, usize>,
}

/// `cuda_components.toml`.
struct ComponentsTable {
    rows: Vec<CudaComponents>,
}

/// `jetson_socs.toml`.
struct JetsonSocTable {
    rows: Vec<JetsonSoc>,
    l4t: Vec<L4tRelease>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CudaDriverFile {
    minor_compat: Vec<MinorCompat>,
    toolkit: Vec<CudaToolkit>,
    #[serde(default)]
    unverified: Vec<UnverifiedToolkit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BranchFile {
    branch: Vec<DriverBranch>,
    #[serde(default)]
    architecture: Vec<ArchitectureSupport>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TorchFile {
    release: Vec<RawTorchRelease>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTorchRelease {
    version: String,
    python: (PythonVersion, PythonVersion),
    torchvision: String,
    torchaudio: String,
    numpy: String,
    #[serde(default)]
    notes: String,
    source: String,
    #[serde(rename = "variant")]
    variants: Vec<TorchVariant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CudnnFile {
    line: Vec<CudnnRow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    gpu: Vec<RawGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    name: String,
    patterns: Vec<String>,
    #[serde(default)]
    model_names: Vec<String>,
    pci_ids: Vec<u16>,
    compute_capability: ComputeCapability,
    architecture: String,
    brand: String,
    datacenter: bool,
    /// Defaults to `datacenter`.
    #[serde(default)]
    forward_compat: Option<bool>,
    source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComponentsFile {
    release: Vec<CudaComponents>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JetsonSocFile {
    soc: Vec<RawJetsonSoc>,
    #[serde(default)]
    l4t: Vec<L4tRelease>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJetsonSoc {
    compatible: String,
    name: String,
    modules: Vec<String>,
    compute_capability: ComputeCapability,
    architecture: String,
    brand: String,
    #[serde(default)]
    forward_compat: Option<bool>,
    #[serde(default)]
    cuda_compat_below: Option<CudaVersion>,
    source: String,
}

fn invalid(table: &'static str, row: impl std::fmt::Display, why: impl std::fmt::Display) -> KbError {
    KbError::Invalid { table, row: row.to_string(), why: why.to_string() }
}

fn require_source(table: &'static str, row: &str, source: &str) -> Result<(), KbError> {
    if source.trim().is_empty() {
        return Err(invalid(table, row, "empty source"));
    }
    Ok(())
}

/// Dotted decimal components (`12.1.3.1`): what a library version field must look like.
fn is_dotted_number(text: &str) -> bool {
    !text.is_empty() && text.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl Table for CudaDriverTable {
    const FILE: &'static str = "cuda_driver.toml";
    type File = CudaDriverFile;

    fn check(file: CudaDriverFile) -> Result<Self, KbError> {
        for row in &file.minor_compat {
            require_source(Self::FILE, &row.major.to_string(), &row.source)?;
        }
        for row in &file.toolkit {
            require_source(Self::FILE, row.cuda.as_str(), &row.source)?;
            if row.cuda.parts().len() != 2 {
                return Err(invalid(Self::FILE, &row.cuda, "toolkit rows are major.minor"));
            }
            for update in &row.updates {
                if update.cuda.major_minor() != row.cuda.major_minor() || update.cuda <= row.cuda {
                    return Err(invalid(Self::FILE, &update.cuda, "update of another release"));
                }
            }
        }
        let newest = file.toolkit.last().map(|t| t.cuda.clone());
        for row in &file.unverified {
            require_source(Self::FILE, row.cuda.as_str(), &row.source)?;
            if newest.as_ref().is_some_and(|n| row.cuda <= *n) {
                return Err(invalid(
                    Self::FILE,
                    &row.cuda,
                    "unverified releases must be newer than every toolkit row",
                ));
            }
        }
        Ok(Self { toolkits: file.toolkit, minor_compat: file.minor_compat, unverified: file.unverified })
    }
}

impl Table for BranchTable {
    const FILE: &'static str = "driver_branches.toml";
    type File = BranchFile;

    fn check(file: BranchFile) -> Result<Self, KbError> {
        for row in &file.branch {
            require_source(Self::FILE, &row.branch.to_string(), &row.source)?;
        }
        for row in &file.architecture {
            require_source(Self::FILE, &row.name, &row.source)?;
            if row.first_branch.is_some_and(|first| first > row.last_branch) {
                return Err(KbError::Invalid {
                    table: Self::FILE,
                    row: row.name.clone(),
                    why: format!("first_branch is after last_branch {}", row.last_branch),
                });
            }
        }
        Ok(Self { rows: file.branch, architectures: file.architecture })
    }
}

impl Table for TorchTable {
    const FILE: &'static str = "torch.toml";
    type File = TorchFile;

    fn check(file: TorchFile) -> Result<Self, KbError> {
        let rows = file.release.into_iter().map(TorchRelease::from_raw).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { rows })
    }
}

impl Table for CudnnTable {
    const FILE: &'static str = "cudnn.toml";
    type File = CudnnFile;

    fn check(file: CudnnFile) -> Result<Self, KbError> {
        for row in &file.line {
            require_source(Self::FILE, &row.line, &row.source)?;
            if row.builds.is_empty() {
                return Err(invalid(Self::FILE, &row.line, "no builds"));
            }
        }
        Ok(Self { rows: file.line })
    }
}

impl Table for GpuTable {
    const FILE: &'static str = "gpus.toml";
    type File = GpuFile;

    fn check(file: GpuFile) -> Result<Self, KbError> {
        let gpus = file.gpu.into_iter().map(GpuModel::from_raw).collect::<Result<Vec<_>, _>>()?;
        let mut gpu_by_id = BTreeMap::new();
        for (i, gpu) in gpus.iter().enumerate() {
            for &id in &gpu.pci_ids {
                if let Some(other) = gpu_by_id.insert(id, i) {
                    let why = format!("PCI id {id:#06x} is also listed for {}", gpus[other].name);
                    return Err(invalid(Self::FILE, &gpu.name, why));
                }
            }
        }
        Ok(Self { gpus, gpu_by_id })
    }
}

impl Table for ComponentsTable {
    const FILE: &'static str = "cuda_components.toml";
    type File = ComponentsFile;

    fn check(file: ComponentsFile) -> Result<Self, KbError> {
        for row in &file.release {
            require_source(Self::FILE, row.cuda.as_str(), &row.source)?;
            let versions =
                [&row.cudart, &row.cublas, &row.cufft, &row.curand, &row.cusolver, &row.cusparse, &row.nvrtc];
            if let Some(bad) = versions.into_iter().chain(&row.nvjitlink).find(|v| !is_dotted_number(v)) {
                return Err(invalid(Self::FILE, &row.cuda, format!("bad version {bad:?}")));
            }
        }
        Ok(Self { rows: file.release })
    }
}

impl Table for JetsonSocTable {
    const FILE: &'static str = "jetson_socs.toml";
    type File = JetsonSocFile;

    fn check(file: JetsonSocFile) -> Result<Self, KbError> {
        let mut rows: Vec<JetsonSoc> = Vec::with_capacity(file.soc.len());
        for raw in file.soc {
            let row = raw.compatible.as_str();
            require_source(Self::FILE, row, &raw.source)?;
            // The probe matches the device tree's string exactly: it must be written as the
            // kernel's device trees write it.
            let soc = row.strip_prefix("nvidia,").unwrap_or("");
            if !soc.starts_with("tegra") || !soc.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            {
                return Err(invalid(Self::FILE, row, "compatible is not of the form nvidia,tegra<N>"));
            }
            if rows.iter().any(|r| r.compatible == raw.compatible) {
                return Err(invalid(Self::FILE, row, "listed twice"));
            }
            if raw.name.trim().is_empty() || raw.modules.is_empty() {
                return Err(invalid(Self::FILE, row, "empty name or module list"));
            }
            if raw.brand.is_empty() || raw.brand.bytes().any(|b| !b.is_ascii_lowercase()) {
                return Err(invalid(
                    Self::FILE,
                    row,
                    format!("brand {:?} is not lowercase letters", raw.brand),
                ));
            }
            let gpu = GpuModel {
                name: raw.name.clone(),
                patterns: Vec::new(),
                model_names: Vec::new(),
                pci_ids: Vec::new(),
                compute_capability: raw.compute_capability,
                architecture: raw.architecture,
                brand: raw.brand,
                datacenter: false,
                forward_compat: raw.forward_compat.unwrap_or(false),
                source: raw.source.clone(),
            };
            rows.push(JetsonSoc {
                compatible: raw.compatible,
                name: raw.name,
                modules: raw.modules,
                source: raw.source,
                forward_compat: raw.forward_compat,
                cuda_compat_below: raw.cuda_compat_below,
                gpu,
            });
        }
        for row in &file.l4t {
            require_source(Self::FILE, row.release.as_str(), &row.source)?;
        }
        Ok(Self { rows, l4t: file.l4t })
    }
}

impl TorchRelease {
    fn from_raw(raw: RawTorchRelease) -> Result<Self, KbError> {
        const TABLE: &str = "torch.toml";
        let row = raw.version.as_str();
        require_source(TABLE, row, &raw.source)?;
        let parsed = PackageVersion::from_str(row).map_err(|e| invalid(TABLE, row, e))?;
        if raw.python.0 > raw.python.1 {
            return Err(invalid(TABLE, row, "python range is reversed"));
        }
        PackageSpecifiers::from_str(&raw.numpy).map_err(|e| invalid(TABLE, row, e))?;
        // Empty: no release of the companion pins this torch exactly.
        for version in [&raw.torchvision, &raw.torchaudio].into_iter().filter(|v| !v.is_empty()) {
            PackageVersion::from_str(version).map_err(|e| invalid(TABLE, row, e))?;
        }
        if raw.variants.is_empty() {
            return Err(invalid(TABLE, row, "no CUDA builds"));
        }
        for variant in &raw.variants {
            let at = format!("{row} {}", variant.tag);
            require_source(TABLE, &at, &variant.source)?;
            let (major, minor) = variant.cuda.major_minor();
            if variant.tag != format!("cu{major}{minor}") {
                return Err(invalid(TABLE, at, format!("tag does not match CUDA {}", variant.cuda)));
            }
            if !is_dotted_number(&variant.cudnn) {
                return Err(invalid(TABLE, at, "bad cuDNN version"));
            }
            // An empty list is a generated row whose fat binaries nobody has read yet: it says
            // so, and nothing is derived from it.
            if variant.arch.is_empty() && variant.arch_source.is_empty() {
                return Err(invalid(TABLE, at, "empty arch list without an arch_source saying why"));
            }
            if !variant.aarch64_arch.is_empty() && !variant.pypi {
                return Err(invalid(TABLE, at, "aarch64_arch is for the PyPI build"));
            }
            for (name, version) in &variant.pins {
                PackageVersion::from_str(version).map_err(|e| invalid(TABLE, format!("{at} {name}"), e))?;
            }
        }
        if raw.variants.iter().filter(|v| v.pypi).count() > 1 {
            return Err(invalid(TABLE, row, "more than one PyPI build"));
        }
        Ok(Self {
            version: raw.version,
            python: raw.python,
            variants: raw.variants,
            torchvision: raw.torchvision,
            torchaudio: raw.torchaudio,
            numpy: raw.numpy,
            notes: raw.notes,
            source: raw.source,
            parsed,
        })
    }
}

impl GpuModel {
    fn from_raw(raw: RawGpu) -> Result<Self, KbError> {
        const TABLE: &str = "gpus.toml";
        let row = raw.name.as_str();
        require_source(TABLE, row, &raw.source)?;
        if raw.patterns.is_empty() {
            return Err(invalid(TABLE, row, "no name patterns"));
        }
        for pattern in &raw.patterns {
            // A pattern must begin and end on a word character and be written normalized, or the
            // word-boundary match of `gpu_by_model_name` would never see it.
            let edges_ok = pattern.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
                && pattern.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
            if !edges_ok || normalize_model(pattern) != pattern.to_ascii_lowercase() {
                return Err(invalid(TABLE, row, format!("pattern {pattern:?} is not a normalized word run")));
            }
        }
        if raw.brand.is_empty() || raw.brand.bytes().any(|b| !b.is_ascii_lowercase()) {
            return Err(invalid(TABLE, row, format!("brand {:?} is not lowercase letters", raw.brand)));
        }
        Ok(Self {
            forward_compat: raw.forward_compat.unwrap_or(raw.datacenter),
            name: raw.name,
            patterns: raw.patterns,
            model_names: raw.model_names,
            pci_ids: raw.pci_ids,
            compute_capability: raw.compute_capability,
            architecture: raw.architecture,
            brand: raw.brand,
            datacenter: raw.datacenter,
            source: raw.source,
        })
    }
}

/// Lowercase, trimmed, whitespace runs collapsed to one space.
fn normalize_model(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase()
}

/// Whether `needle` occurs in `haystack` with no letter or digit right before or after it.
fn contains_word(haystack: &str, needle: &str) -> bool {
    let bytes = haystack.as_bytes();
    haystack.match_indices(needle).any(|(start, _)| {
        let end = start + needle.len();
        let before = start.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(end).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod architecture_tests {
    use super::*;

    /// `[[architecture]]`: the first branch of new architectures, with the rows about some of an
    /// architecture's compute capabilities overriding its own row.
    #[test]
    fn first_branches_of_new_architectures() {
        let first = |id: u16| gpu_by_pci_id(id).and_then(gpu_support).and_then(|a| a.first_branch);
        assert_eq!(first(0x2901), Some(570), "B200 (Blackwell 10.0)");
        assert_eq!(first(0x2b85), Some(570), "RTX 5090 (Blackwell 12.0)");
        assert_eq!(first(0x2e12), Some(580), "GB10 (Blackwell 12.1)");
        assert_eq!(first(0x2b00), Some(580), "Thor (Blackwell 11.0)");
        assert_eq!(first(0x2330), None, "H100 (Hopper): every branch of the table");
        assert_eq!(architecture_support("Blackwell").and_then(|a| a.first_branch), Some(570));
        assert_eq!(architecture_support("Blackwell").map(|a| a.last_branch), Some(NO_LAST_BRANCH));
        assert_eq!(architecture_support("Rubin").and_then(|a| a.first_branch), Some(615));
        if let Some(rubin) = all_gpus().iter().find(|g| g.architecture == "Rubin") {
            assert_eq!(gpu_support(rubin).and_then(|a| a.first_branch), Some(615));
        }
        // Every row names an architecture of gpus.toml.
        for a in &loaded(&BRANCHES).architectures {
            assert!(all_gpus().iter().any(|g| g.architecture == a.name), "{}", a.name);
        }
    }
}
