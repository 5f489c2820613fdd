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

/// The prefix of every label written here.
pub const PREFIX: &str = "stackbuild.io/";
/// The version of this label set: selectors require it, so a node labelled by an older or newer
/// scheme (or not at all) is never matched by accident.
pub const SCHEMA_VERSION: &str = "1";

/// `1`: the labels of this scheme are present (see [`SCHEMA_VERSION`]).
pub const SCHEMA: &str = "stackbuild.io/labels.schema";
/// `true` when the doctor, with no image requirements, finds no error for all GPUs.
pub const HOST_READY: &str = "stackbuild.io/host.ready";
/// The code of the doctor's first error (`L2-UVM-NOT-LOADED`) when the host is not ready.
pub const HOST_ERROR: &str = "stackbuild.io/host.error";
/// `linux`, `wsl2` or `jetson`.
pub const PLATFORM: &str = "stackbuild.io/platform";
/// The machine as the hook compares it (`x86_64`, `aarch64`), lowercase.
pub const MACHINE: &str = "stackbuild.io/machine";
/// The kernel release (`5.15.0-105-generic`), sanitized to the label-value character set.
pub const KERNEL_RELEASE: &str = "stackbuild.io/kernel.release";
/// `true` when [`KERNEL_RELEASE`] had to be changed to be a label value (it then differs from
/// the real release, so it must not be matched with `In`).
pub const KERNEL_RELEASE_SANITIZED: &str = "stackbuild.io/kernel.release.sanitized";
/// [`kernel_code`] of the release (`5015000`), for `Gt`/`Lt`.
pub const KERNEL_CODE: &str = "stackbuild.io/kernel.version.code";
/// The loaded driver's version as it prints it (`535.104.05`).
pub const DRIVER_VERSION: &str = "stackbuild.io/driver.version";
/// The driver branch (`535`).
pub const DRIVER_MAJOR: &str = "stackbuild.io/driver.major";
/// [`version_code`] of the driver version (`535104005`).
pub const DRIVER_CODE: &str = "stackbuild.io/driver.version.code";
/// `proprietary` or `open`.
pub const DRIVER_MODULE: &str = "stackbuild.io/driver.module";
/// The highest CUDA the loaded driver supports (`12.2`): recorded `nvidia-smi` facts, else the
/// knowledge base. Where only a lower bound is known (a driver branch newer than the tables, a
/// Jetson that runs newer CUDA through the upgrade package), the lower bound: a pod placed by it
/// needs no more than the host is known to support.
pub const CUDA_MAX: &str = "stackbuild.io/cuda.max";
/// Its major number.
pub const CUDA_MAX_MAJOR: &str = "stackbuild.io/cuda.max.major";
/// Its minor number.
pub const CUDA_MAX_MINOR: &str = "stackbuild.io/cuda.max.minor";
/// [`version_code`] of it (`12002000`).
pub const CUDA_MAX_CODE: &str = "stackbuild.io/cuda.max.code";
/// How many GPUs the driver lists.
pub const GPU_COUNT: &str = "stackbuild.io/gpu.count";
/// The GPUs' model, as GPU Feature Discovery writes it (`NVIDIA-H100-80GB-HBM3`), or `mixed`.
pub const GPU_PRODUCT: &str = "stackbuild.io/gpu.product";
/// The brand requirements compare (`nvidia`, `tesla`, `geforce`), when every GPU has the same
/// known brand.
pub const GPU_BRAND: &str = "stackbuild.io/gpu.brand";
/// The lowest compute capability's major number (as GFD's `gpu.compute.major`).
pub const GPU_COMPUTE_MAJOR: &str = "stackbuild.io/gpu.compute.major";
/// The lowest compute capability's minor number.
pub const GPU_COMPUTE_MINOR: &str = "stackbuild.io/gpu.compute.minor";
/// The lowest compute capability among the GPUs (`8.0`), when every GPU's is known.
pub const GPU_COMPUTE_MIN: &str = "stackbuild.io/gpu.compute.min";
/// The highest compute capability among the GPUs.
pub const GPU_COMPUTE_MAX: &str = "stackbuild.io/gpu.compute.max";
/// [`compute_code`] of the lowest (`800`).
pub const GPU_COMPUTE_MIN_CODE: &str = "stackbuild.io/gpu.compute.min.code";
/// [`compute_code`] of the highest.
pub const GPU_COMPUTE_MAX_CODE: &str = "stackbuild.io/gpu.compute.max.code";
/// `false` when some GPU is known not to run the cuda-compat forward-compatibility package
/// (only data-center GPUs and Jetson do); `true` when all do; absent when unknown.
pub const GPU_FORWARD_COMPAT: &str = "stackbuild.io/gpu.forward-compat";
/// Prefix of the module flags: `stackbuild.io/module.nvidia_uvm=true` while it is loaded.
pub const MODULE_PREFIX: &str = "stackbuild.io/module.";
/// The label Kubernetes' kubelet sets to the node's Go architecture (`amd64`).
pub const KUBERNETES_ARCH: &str = "kubernetes.io/arch";

/// The kernel modules that get a [`MODULE_PREFIX`] flag when loaded. Labelling every loaded
/// module would put a hundred labels on a node; requirements name these.
pub const LABELED_MODULES: [&str; 9] = [
    "gdrdrv",
    "nouveau",
    "nvgpu",
    "nvidia",
    "nvidia_drm",
    "nvidia_fs",
    "nvidia_modeset",
    "nvidia_peermem",
    "nvidia_uvm",
];

/// Longest label value (Kubernetes API conventions, "Syntax and character set" of labels).
pub const MAX_VALUE_LEN: usize = 63;

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

/// The label of kernel module `name` ([`MODULE_PREFIX`] + name).
pub fn module_label(name: &str) -> String {
    format!("{MODULE_PREFIX}{name}")
}

/// Whether `s` is a valid label value: at most 63 characters of `[A-Za-z0-9._-]`, beginning and
/// ending with a letter or digit (or empty).
pub fn is_label_value(s: &str) -> bool {
    let alnum = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    s.len() <= MAX_VALUE_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && alnum(s.as_bytes().first())
        && alnum(s.as_bytes().last())
}

/// `s` made a label value: whitespace becomes `-` (as GFD writes product names), other
/// characters outside `[A-Za-z0-9._-]` become `_`, then it is cut to 63 characters and trimmed
/// to begin and end with a letter or digit. Different inputs may give the same value.
pub fn sanitize_value(s: &str) -> String {
    let mapped: String = s
        .trim()
        .chars()
        .map(|c| match c {
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') => c,
            c if c.is_whitespace() => '-',
            _ => '_',
        })
        .collect();
    let cut: String = mapped.chars().take(MAX_VALUE_LEN).collect();
    cut.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// The integer code of a dotted version of at most three components, `major * 1_000_000 +
/// minor * 1_000 + patch` (missing components are zero, as requirements compare them), so that
/// integers order as versions do: `535.104.05` -> `535104005`, `12.2` -> `12002000`. `None` when
/// there are more than three components, minor or patch is 1000 or more, or the major is a
/// million or more.
pub fn version_code(parts: &[u64]) -> Option<u64> {
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let part = |i: usize| parts.get(i).copied().unwrap_or(0);
    let (major, minor, patch) = (part(0), part(1), part(2));
    (major < 1_000_000 && minor < 1000 && patch < 1000).then(|| major * 1_000_000 + minor * 1000 + patch)
}

/// The integer code of a compute capability, `major * 100 + minor` (`8.9` -> `809`, `12.0` ->
/// `1200`); `None` for a minor of 100 or more.
pub fn compute_code(cc: ComputeCapability) -> Option<u64> {
    (cc.minor < 100).then(|| u64::from(cc.major) * 100 + u64::from(cc.minor))
}

/// The leading dotted numbers of a kernel release (at most three, as written) and the rest:
/// `5.15.0-105-generic` -> (`["5", "15", "0"]`, `-105-generic`), `5.15` -> (`["5", "15"]`, `""`),
/// `6.1.21-v8+` -> (`["6", "1", "21"]`, `-v8+`), `5.15.167.4-microsoft` -> three numbers and
/// `.4-microsoft`.
pub fn kernel_prefix(release: &str) -> (Vec<&str>, &str) {
    let mut numbers = Vec::new();
    let mut rest = release;
    while numbers.len() < 3 {
        let body = if numbers.is_empty() {
            rest
        } else {
            match rest.strip_prefix('.') {
                Some(r) if r.starts_with(|c: char| c.is_ascii_digit()) => r,
                _ => break,
            }
        };
        let len = body.find(|c: char| !c.is_ascii_digit()).unwrap_or(body.len());
        if len == 0 {
            break;
        }
        numbers.push(&body[..len]);
        rest = &body[len..];
    }
    (numbers, rest)
}

/// The integer code of a kernel release that begins with three dotted numbers
/// (`VERSION.PATCHLEVEL.SUBLEVEL`, as every released kernel's `uname -r` does): `5.15.0-105` ->
/// `5015000`. `None` for another shape, or numbers out of [`version_code`]'s range.
///
/// A release's order (numeric runs numerically, text lexically) agrees with its code's wherever
/// the codes differ: both releases start `Num . Num . Num`, so the first difference is a number.
/// Releases with equal codes may still differ (`5.15.0-105` < `5.15.0-107`). Numbers with a
/// leading zero get no code.
pub fn kernel_code(release: &str) -> Option<u64> {
    let (numbers, _) = kernel_prefix(release);
    // Written without leading zeros, so that equal codes mean the same text up to the third
    // number (the kernel's Makefile never pads them).
    if numbers.len() != 3 || numbers.iter().any(|n| n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    let parts: Option<Vec<u64>> = numbers.iter().map(|n| n.parse().ok()).collect();
    version_code(&parts?)
}

/// The Kubernetes (Go) architecture of a machine name, for the kubelet's [`KUBERNETES_ARCH`].
pub fn kubernetes_arch(machine: &str) -> Option<&'static str> {
    // Go's GOARCH names for the kernel's `uname -m` (Go `cmd/dist` and `internal/syslist`).
    Some(match machine.to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        "ppc64le" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        _ => return None,
    })
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
