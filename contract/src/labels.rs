//! The names and value codes of the Kubernetes node labels `stackhook labels` publishes and
//! `stackbuild affinity` selects on: one vocabulary for both programs.
//!
//! The scheduler compares label values only as strings (`In`, `NotIn`) or, with `Gt` and `Lt`, as
//! integers. So every version that requirements order is also published as an integer *code*
//! ([`version_code`], [`compute_code`], [`kernel_code`]) whose integer order is the version's
//! order: `driver.version.code=535104005` for driver 535.104.05, `cuda.max.code=12002000` for
//! CUDA 12.2, `gpu.compute.min.code=900` for compute capability 9.0.

use crate::version::ComputeCapability;

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
/// The node's NVIDIA CDI specs (`stackhook cdi check`): `current`, `stale` (containers given
/// their devices fail or get the wrong ones) or `incomplete` (devices the host has are missing);
/// absent without one. Pods whose GPUs come through CDI (DRA, `cdi-cri`) need `current`.
pub const HOST_CDI: &str = "stackbuild.io/host.cdi";
/// How many containers (or processes outside any) map driver libraries of another version than
/// the loaded module (`0` when none): after a driver upgrade they fail with "Driver/library
/// version mismatch" until restarted; a node with a nonzero count wants draining. Absent without
/// a loaded driver.
pub const HOST_DRIFT: &str = "stackbuild.io/host.drift";
/// `true` when `systemctl daemon-reload` can take GPUs away from running containers (systemd
/// cgroups, NVIDIA nodes without a `/dev/char` link); absent otherwise.
pub const HOST_DAEMON_RELOAD_EXPOSED: &str = "stackbuild.io/host.daemon-reload-exposed";
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
