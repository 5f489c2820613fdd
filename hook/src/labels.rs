//! Kubernetes node labels from a [`HostProbe`], so the scheduler can place a pod only on nodes
//! whose hook would let it start.
//!
//! Every label lives under [`PREFIX`] (`stackbuild.io/`); the names follow GPU Feature
//! Discovery's (`nvidia.com/cuda.driver-version.full`, `nvidia.com/gpu.compute.major`,
//! `nvidia.com/gpu.product`) where there is one, so people recognize them.
//!
//! The scheduler compares label values only as strings (`In`, `NotIn`) or, with `Gt` and `Lt`, as
//! integers. So every version that requirements order is also published as an integer *code*
//! ([`version_code`], [`compute_code`], [`kernel_code`]) whose integer order is the version's
//! order: `driver.version.code=535104005` for driver 535.104.05, `cuda.max.code=12002000` for
//! CUDA 12.2, `gpu.compute.min.code=900` for compute capability 9.0. `stackbuild affinity`
//! translates an image's requirements into node affinity over exactly these labels.
//!
//! Labels are derived from the same [`HostFacts`](crate::contract::require::HostFacts) the hook
//! evaluates requirements against ([`HostProbe::facts`] for all GPUs), so a label says what the
//! hook would see. A value the probe could not read is left out, never guessed: a selector on an
//! absent label does not match, as the hook's check on an unknown value fails.
//!
//! [`render`] prints them as `key=value` lines, as a Node Feature Discovery feature file (local
//! source, `/etc/kubernetes/node-feature-discovery/features.d/`: `<namespace>/<name>=<value>`
//! lines, `#` comments, an optional `# +expiry-time=<RFC 3339>` directive; see NFD's
//! customization guide, "Local feature source"), or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use crate::contract::image::DeviceSelection;
use crate::contract::kb;
use crate::contract::require::RequirementSet;
use crate::contract::version::ComputeCapability;
use crate::diagnose::{self, Request, Severity, Verdict};
use crate::probe::{HostProbe, ModuleFlavor};

/// The label names and value codes, shared with `stackbuild affinity`.
pub use crate::contract::labels::*;

/// Label output that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum LabelsError {
    /// Writing or renaming the output file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// How [`render`] prints labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `key=value` lines, sorted by key.
    Labels,
    /// A Node Feature Discovery feature file (local source): a comment header, an optional
    /// `# +expiry-time=` directive, then `key=value` lines.
    Nfd,
    /// A JSON object, keys sorted.
    Json,
}

/// The node labels of a probed host, sorted by key.
pub fn node_labels(probe: &HostProbe) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut put = |key: &str, value: String| {
        if !value.is_empty() && is_label_value(&value) {
            labels.insert(key.to_owned(), value);
        }
    };
    put(SCHEMA, SCHEMA_VERSION.to_owned());
    // The facts the hook checks requirements against, for every GPU (a pod gets a subset, and
    // a bound over all of them holds for any subset).
    let facts = probe.facts(&DeviceSelection::All).unwrap_or_default();

    let ready = diagnose::diagnose(probe, &Request::new(DeviceSelection::All, RequirementSet::default()));
    put(HOST_READY, (ready.verdict() == Verdict::Allow).to_string());
    if let Some(first) = ready.of(Severity::Error).next() {
        put(HOST_ERROR, sanitize_value(first.code));
    }
    if let Ok(specs) = crate::cdi::load(&probe.root, &[]) {
        let reports = crate::cdi::check_all(&probe.root, &specs);
        let nvidia: Vec<_> = reports.iter().filter(|r| r.nvidia).collect();
        if !nvidia.is_empty() {
            let state = if nvidia.iter().any(|r| r.has_errors()) {
                "stale"
            } else if nvidia.iter().any(|r| !r.problems.is_empty()) {
                "incomplete"
            } else {
                "current"
            };
            put(HOST_CDI, state.to_owned());
        }
    }
    if let Some(module) = &probe.driver {
        let scan = crate::drift::scan(probe, &module.value.to_string());
        put(HOST_DRIFT, scan.containers().len().to_string());
    }
    if !crate::drift::exposure(probe).is_empty() {
        put(HOST_DAEMON_RELOAD_EXPOSED, "true".to_owned());
    }
    put(PLATFORM, probe.platform.name().to_owned());
    if let Some(machine) = &facts.machine {
        put(MACHINE, machine.to_ascii_lowercase());
    }
    if let Some(kernel) = &facts.kernel {
        let release = kernel.as_str();
        let value = sanitize_value(release);
        if value != release {
            put(KERNEL_RELEASE_SANITIZED, "true".to_owned());
        }
        put(KERNEL_RELEASE, value);
        if let Some(code) = kernel_code(release) {
            put(KERNEL_CODE, code.to_string());
        }
    }
    if let Some(driver) = &facts.driver {
        put(DRIVER_VERSION, sanitize_value(driver.as_str()));
        put(DRIVER_MAJOR, driver.branch().to_string());
        if let Some(code) = version_code(driver.parts()) {
            put(DRIVER_CODE, code.to_string());
        }
    }
    if let Some(flavor) = &probe.module_flavor {
        put(
            DRIVER_MODULE,
            match flavor.value {
                ModuleFlavor::Proprietary => "proprietary",
                ModuleFlavor::Open => "open",
            }
            .to_owned(),
        );
    }
    if let Some(cuda) = &facts.cuda {
        put(CUDA_MAX, sanitize_value(cuda.as_str()));
        put(CUDA_MAX_MAJOR, cuda.part(0).to_string());
        put(CUDA_MAX_MINOR, cuda.part(1).to_string());
        if let Some(code) = version_code(cuda.parts()) {
            put(CUDA_MAX_CODE, code.to_string());
        }
    }
    gpu_labels(probe, &facts, &mut put);
    for name in LABELED_MODULES {
        if facts.modules.contains(name) {
            put(&module_label(name), "true".to_owned());
        }
    }
    labels
}

/// The `gpu.*` labels: count, product, brand, compute capability bounds, forward compatibility.
fn gpu_labels(
    probe: &HostProbe,
    facts: &crate::contract::require::HostFacts,
    put: &mut impl FnMut(&str, String),
) {
    put(GPU_COUNT, probe.gpus.len().to_string());
    let Some(first) = probe.gpus.first() else { return };
    let model = |g: &crate::probe::GpuProbe| g.model.clone().unwrap_or_default();
    if probe.gpus.iter().all(|g| model(g) == model(first)) {
        put(GPU_PRODUCT, sanitize_value(&model(first)));
    } else {
        put(GPU_PRODUCT, "mixed".to_owned());
    }
    // A per-GPU requirement must hold for every GPU the pod gets: publish a value only when it
    // is known for all of them, and bounds rather than one GPU's value.
    let brands: Option<Vec<String>> =
        facts.gpus.iter().map(|g| g.brand.as_ref().map(|b| b.to_ascii_lowercase())).collect();
    if let Some(brands) = brands {
        if brands.windows(2).all(|w| w[0] == w[1]) {
            if let Some(brand) = brands.first() {
                put(GPU_BRAND, brand.clone());
            }
        }
    }
    let archs: Option<Vec<ComputeCapability>> = facts.gpus.iter().map(|g| g.arch).collect();
    if let Some((min, max)) = archs.and_then(|a| Some((*a.iter().min()?, *a.iter().max()?))) {
        put(GPU_COMPUTE_MAJOR, min.major.to_string());
        put(GPU_COMPUTE_MINOR, min.minor.to_string());
        put(GPU_COMPUTE_MIN, min.to_string());
        put(GPU_COMPUTE_MAX, max.to_string());
        if let (Some(lo), Some(hi)) = (compute_code(min), compute_code(max)) {
            put(GPU_COMPUTE_MIN_CODE, lo.to_string());
            put(GPU_COMPUTE_MAX_CODE, hi.to_string());
        }
    }
    // As the doctor decides it: the knowledge base's model (admin rows first); a Jetson SoC by
    // its row (JetPack 5+ boards only; unknown where the row does not say).
    let models: Vec<Option<&kb::GpuModel>> = probe
        .gpus
        .iter()
        .map(|g| match g.soc.as_deref().and_then(kb::jetson_soc) {
            Some(soc) if soc.forward_compat.is_none() => None,
            _ => probe.gpu_model(g).map(|(m, _)| m),
        })
        .collect();
    let forward_compat = if models.iter().any(|m| m.is_some_and(|m| !m.forward_compat)) {
        Some(false)
    } else if models.iter().all(Option::is_some) {
        Some(true)
    } else {
        None
    };
    if let Some(fc) = forward_compat {
        put(GPU_FORWARD_COMPAT, fc.to_string());
    }
}

/// Prints labels in `format`. `expires_at` (seconds since the epoch) adds NFD's
/// `# +expiry-time=` directive to the [`Format::Nfd`] output, so labels of a node whose labeller
/// stopped go away instead of going stale.
pub fn render(labels: &BTreeMap<String, String>, format: Format, expires_at: Option<u64>) -> String {
    let mut out = String::new();
    match format {
        Format::Labels => {}
        Format::Nfd => {
            out.push_str(
                "# Node labels from `stackhook labels --format nfd` (Node Feature Discovery local source).\n",
            );
            if let Some(t) = expires_at {
                let _ = writeln!(out, "# +expiry-time={}", crate::time::rfc3339(t));
            }
        }
        Format::Json => {
            let mut s = serde_json::to_string_pretty(labels).unwrap_or_else(|_| "{}".to_owned());
            s.push('\n');
            return s;
        }
    }
    for (k, v) in labels {
        let _ = writeln!(out, "{k}={v}");
    }
    out
}

/// Writes `contents` to `path` through a dot file in the same directory and a rename, so a
/// reader (NFD's worker) never sees a partial file: NFD ignores dot files.
pub fn write_atomic(path: &Path, contents: &str) -> Result<(), LabelsError> {
    let err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| LabelsError::Write { path: p, source }
    };
    crate::atomic::write_atomic(path, contents.as_bytes()).map_err(err(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Preset;

    #[test]
    fn codes_order_as_versions_do() {
        assert_eq!(version_code(&[535, 104, 5]), Some(535_104_005));
        assert_eq!(version_code(&[12, 2]), Some(12_002_000));
        assert_eq!(version_code(&[470]), Some(470_000_000));
        assert_eq!(version_code(&[1, 1000]), None);
        assert_eq!(version_code(&[1, 2, 3, 4]), None);
        assert_eq!(version_code(&[]), None);
        assert!(version_code(&[535, 104, 5]) < version_code(&[535, 183, 1]));
        assert_eq!(compute_code(ComputeCapability::new(8, 9)), Some(809));
        assert_eq!(compute_code(ComputeCapability::new(12, 0)), Some(1200));
        assert!(compute_code(ComputeCapability::new(9, 0)) < compute_code(ComputeCapability::new(10, 0)));
        assert_eq!(compute_code(ComputeCapability::new(1, 100)), None);
    }

    #[test]
    fn kernel_codes_need_three_numbers() {
        assert_eq!(kernel_prefix("5.15.0-105-generic"), (vec!["5", "15", "0"], "-105-generic"));
        assert_eq!(kernel_prefix("5.15"), (vec!["5", "15"], ""));
        assert_eq!(kernel_prefix("5.15."), (vec!["5", "15"], "."));
        assert_eq!(kernel_prefix("5.15.167.4-microsoft"), (vec!["5", "15", "167"], ".4-microsoft"));
        assert_eq!(kernel_prefix("6.8.0+rpt"), (vec!["6", "8", "0"], "+rpt"));
        assert_eq!(kernel_code("5.15.0-105-generic"), Some(5_015_000));
        assert_eq!(kernel_code("6.1.0-27-amd64"), Some(6_001_000));
        assert_eq!(kernel_code("5.15.167.4-microsoft-standard-WSL2"), Some(5_015_167));
        assert_eq!(kernel_code("6.1-rc1"), None);
        assert_eq!(kernel_code("5.4.1000"), None);
        assert_eq!(kernel_code("5.15.00"), None);
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("5.15.0-105-generic"));
        assert!(is_label_value(""));
        assert!(!is_label_value("6.1.21-v8+"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
        assert_eq!(sanitize_value("NVIDIA H100 80GB HBM3"), "NVIDIA-H100-80GB-HBM3");
        assert_eq!(sanitize_value("6.1.21-v8+"), "6.1.21-v8");
        assert_eq!(sanitize_value("6.8.0+rpt-rpi-v8"), "6.8.0_rpt-rpi-v8");
        assert_eq!(sanitize_value(&format!("{}!", "b".repeat(70))).len(), 63);
        assert_eq!(kubernetes_arch("x86_64"), Some("amd64"));
        assert_eq!(kubernetes_arch("AARCH64"), Some("arm64"));
        assert_eq!(kubernetes_arch("mips"), None);
        assert_eq!(crate::time::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(crate::time::rfc3339(1_714_564_800), "2024-05-01T12:00:00Z");
    }

    /// The labels of a preset host; `host.*` is left out (it depends on whether this process
    /// may make device nodes, see `FixtureHost::real_device_nodes`).
    fn preset_labels(preset: Preset, dir: &Path) -> (BTreeMap<String, String>, bool) {
        let host = preset.build(&dir.join(preset.name())).unwrap();
        let labels = node_labels(&crate::probe::probe(host.root()));
        (labels, host.real_device_nodes())
    }

    #[test]
    fn preset_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let mut all = String::new();
        let mut ready = String::new();
        let mut real = true;
        for preset in Preset::ALL {
            let (mut labels, real_nodes) = preset_labels(preset, dir.path());
            real &= real_nodes;
            let state = labels.remove(HOST_READY).unwrap_or_default();
            match labels.remove(HOST_ERROR) {
                Some(code) => writeln!(ready, "{}: {state} {code}", preset.name()),
                None => writeln!(ready, "{}: {state}", preset.name()),
            }
            .unwrap();
            let _ = writeln!(all, "# {}\n{}", preset.name(), render(&labels, Format::Labels, None));
        }
        insta::assert_snapshot!("preset_hosts", all);
        if real {
            insta::assert_snapshot!("preset_hosts_ready", ready);
        }
    }

    #[test]
    fn the_cdi_label_says_whether_the_specs_are_current() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        let host = Preset::Healthy.build(&root).unwrap();
        let label = || node_labels(&crate::probe::probe(&root)).get(HOST_CDI).cloned();
        assert_eq!(label(), None, "no spec, no label");
        if !host.real_device_nodes() {
            return;
        }
        std::fs::create_dir_all(root.join("etc/cdi")).unwrap();
        let spec = |s: crate::fixture::FixtureSpec| s.cdi_spec(&root, "nvidia.com/gpu").to_string();
        std::fs::write(root.join("etc/cdi/nvidia.json"), spec(Preset::Healthy.spec())).unwrap();
        assert_eq!(label().as_deref(), Some("current"));
        std::fs::write(root.join("etc/cdi/nvidia.json"), spec(Preset::Healthy.spec().driver("550.54.14")))
            .unwrap();
        assert_eq!(label().as_deref(), Some("stale"));
    }

    #[test]
    fn nfd_and_json_formats() {
        let labels = BTreeMap::from([
            (SCHEMA.to_owned(), "1".to_owned()),
            (module_label("nvidia_uvm"), "true".to_owned()),
        ]);
        insta::assert_snapshot!(render(&labels, Format::Nfd, Some(1_714_564_800)), @r"
        # Node labels from `stackhook labels --format nfd` (Node Feature Discovery local source).
        # +expiry-time=2024-05-01T12:00:00Z
        stackbuild.io/labels.schema=1
        stackbuild.io/module.nvidia_uvm=true
        ");
        insta::assert_snapshot!(render(&labels, Format::Json, None), @r#"
        {
          "stackbuild.io/labels.schema": "1",
          "stackbuild.io/module.nvidia_uvm": "true"
        }
        "#);
        assert!(!render(&labels, Format::Nfd, None).contains("expiry"));
    }

    #[test]
    fn every_label_is_a_valid_key_and_value() {
        let dir = tempfile::tempdir().unwrap();
        for preset in Preset::ALL {
            let (labels, _) = preset_labels(preset, dir.path());
            for (k, v) in &labels {
                let name = k.strip_prefix(PREFIX).unwrap_or_else(|| panic!("{k} outside {PREFIX}"));
                assert!(is_label_value(name) && !name.is_empty(), "{k}");
                assert!(is_label_value(v), "{k}={v}");
            }
        }
    }

    #[test]
    fn writes_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stackhook");
        write_atomic(&path, "a=1\n").unwrap();
        write_atomic(&path, "a=2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a=2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let err = write_atomic(&dir.path().join("missing/x"), "").unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
