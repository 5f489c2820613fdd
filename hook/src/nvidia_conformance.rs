//! Conformance with NVIDIA's container contract: one table, each row a case of NVIDIA's own test
//! suites (or a rule of its code where it has no test) translated to a container start, run
//! through the hook's real entry ([`crate::invoke::run`]: state on stdin, `config.json`, the
//! fixture host) and checked against the decision NVIDIA's hook makes.
//!
//! Sources of the rows (all public):
//! - nvidia-container-toolkit `internal/config/image/cuda_image_test.go`
//!   (`TestParseMajorMinorVersionValid`, `TestParseMajorMinorVersionInvalid`, `TestGetRequirements`)
//!   and `devices.go` (`NewVisibleDevices`: void > none > all);
//! - `cmd/nvidia-container-runtime-hook/container_config_test.go` (`TestGetNvidiaConfig`,
//!   `TestGetDevicesFromMounts`, `TestDeviceListSourcePriority`, `TestGetDevicesFromEnvvar`);
//! - `internal/requirements/constraints/factory_test.go` (`TestParse`,
//!   `TestNewConstraintFromRequirement`);
//! - libnvidia-container `src/cli/dsl.c` (`dsl_evaluate`, `dsl_compare_version`),
//!   `src/cli/configure.c` (per-device evaluation, no device: arch/brand hold) and
//!   `src/cli/common.c` (`select_devices`: `all` in any case, GPU/MIG UUIDs, MIG indexes, PCI ids).
//!
//! Where NVIDIA's hook would hand a value to its CLI and the CLI refuses it ("unknown device",
//! "invalid expression"), the decision is "blocked". Rows marked DELIBERATE are where stackhook
//! decides otherwise on purpose (docs/contract.md, "Where stackhook deliberately differs from NVIDIA's hook").
//!
//! Host facts: `H100` is driver 535.104.05 (CUDA 12.2), one H100 (compute capability 9.0, brand
//! `nvidia`) at 0000:18:00.0.

use std::collections::BTreeMap;
use std::path::Path;

use crate::fixture::{fixture_mig_uuid, fixture_uuid, FixtureHost, FixtureSpec, Preset, CUDA_12_1_REQUIRE};
use crate::invoke::{run, HookConfig, Policy};

/// The hosts rows run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Host {
    /// Driver 535.104.05, one H100.
    H100,
    /// Driver 535.104.05, two H100s.
    H100x2,
    /// [`Preset::MigNode`]: GPU 0 an A100 (8.0) with MIG devices 0:0 and 0:1, GPU 1 an H100
    /// (9.0) with 1:0; `nvidia-smi -L` recorded.
    Mig,
    /// The same without the recorded `nvidia-smi -L`: a MIG UUID's parent is unknown and the
    /// GPUs with MIG instances differ.
    MigUnrecorded,
    /// Two A100s, both with MIG devices, nothing recorded: every candidate parent is an A100.
    MigA100s,
    /// An RTX 4090 (`GeForce`) on driver 470 (CUDA 11.4).
    Geforce470,
    /// An A100 on driver 470 (CUDA 11.4).
    A100On470,
    /// A Tesla P100 on driver 352.93 (R352: CUDA 7.5).
    P100On352,
}

impl Host {
    fn spec(self) -> FixtureSpec {
        match self {
            Host::H100 => FixtureSpec::healthy_h100(),
            Host::H100x2 => FixtureSpec::healthy_h100s(2),
            Host::Mig => Preset::MigNode.spec(),
            Host::MigUnrecorded => Preset::MigNode.spec().mig_unrecorded(),
            Host::MigA100s => FixtureSpec::healthy_h100()
                .gpus_of(2, 0x20b0, "NVIDIA A100-SXM4-40GB")
                .mig(0, 2)
                .mig(1, 1)
                .mig_unrecorded(),
            Host::Geforce470 => Preset::ForwardCompatGeforce.spec(),
            Host::A100On470 => {
                FixtureSpec::healthy_h100().driver("470.256.02").gpus_of(1, 0x20b0, "NVIDIA A100-SXM4-40GB")
            }
            Host::P100On352 => {
                FixtureSpec::healthy_h100().driver("352.93").gpus_of(1, 0x15f8, "Tesla P100-PCIE-16GB")
            }
        }
    }
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Not a GPU container: nothing read, nothing checked (NVIDIA's `getNvidiaConfig` is nil).
    Skip,
    /// Checked and started, with no warning.
    Allow,
    /// Started with this warning (a check that cannot be made here).
    Warn(&'static str),
    /// Refused: this error code, or this text in the reason when refused before the host is
    /// checked (a requirement that does not parse).
    Block(&'static str),
}
use Want::{Allow, Block, Skip, Warn};

/// One case: the upstream test it mirrors, the host, the container's environment, the decision.
/// Pseudo-entries in `env`: `+privileged` (`CAP_SYS_ADMIN` in the bounding set) and
/// `+mount:<source>:<destination>`.
struct Row {
    upstream: &'static str,
    host: Host,
    env: Vec<String>,
    want: Want,
}

fn row(upstream: &'static str, host: Host, env: &[&str], want: Want) -> Row {
    Row { upstream, host, env: env.iter().map(|s| (*s).to_owned()).collect(), want }
}

const ROOT: &str = "/var/run/nvidia-container-devices";

/// Device selection: `TestGetNvidiaConfig`, `TestGetDevicesFromEnvvar`, `NewVisibleDevices`,
/// libnvidia-container's `select_devices`.
#[allow(clippy::too_many_lines)] // A table.
fn device_selection() -> Vec<Row> {
    use Host::{H100x2, Mig, MigA100s, MigUnrecorded, H100};
    let gpu0 = fixture_uuid(0);
    let gpu0_upper = gpu0.to_ascii_uppercase();
    let nvd_uuid = format!("NVIDIA_VISIBLE_DEVICES={gpu0}");
    let nvd_uuid_upper = format!("NVIDIA_VISIBLE_DEVICES={gpu0_upper}");
    let cdi_uuid = format!("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu={gpu0}");
    let mig00 = format!("NVIDIA_VISIBLE_DEVICES={}", fixture_mig_uuid(0, 0));
    let mig01 = format!("NVIDIA_VISIBLE_DEVICES={},{}", fixture_mig_uuid(0, 0), fixture_mig_uuid(0, 1));
    let mig10 = format!("NVIDIA_VISIBLE_DEVICES={}", fixture_mig_uuid(1, 0));
    let mig_lower = format!("NVIDIA_VISIBLE_DEVICES={}", fixture_mig_uuid(0, 0).to_ascii_lowercase());
    let mig_r450 = format!("NVIDIA_VISIBLE_DEVICES=MIG-{gpu0}/1/0");
    let mig_cdi = format!("NVIDIA_VISIBLE_DEVICES=nvidia.com/mig={}", fixture_mig_uuid(1, 0));
    let mount = |d: &str| format!("+mount:/dev/null:{ROOT}/{d}");
    let nvd_root = format!("NVIDIA_VISIBLE_DEVICES={ROOT}");
    let (m0, m1) = (mount("0"), mount("1"));
    let not_null = format!("+mount:/not/dev/null:{ROOT}/0");
    let other_prefix = "+mount:/dev/null:/other/prefix/0".to_owned();
    let only_root = format!("+mount:/dev/null:{ROOT}");
    let cdi_mount = format!("+mount:/dev/null:{ROOT}/cdi/nvidia.com/gpu/0");
    let cdi_all_mount = format!("+mount:/dev/null:{ROOT}/nvidia.com/gpu=1");
    let imex_mount = format!("+mount:/dev/null:{ROOT}/imex/0");

    let c = "NVIDIA_REQUIRE_CUDA=cuda>=9.0";
    let arch9 = "NVIDIA_REQUIRE_ARCH=arch>=9.0";
    let arch10 = "NVIDIA_REQUIRE_ARCH=arch>=10.0";
    vec![
        row("TestGetNvidiaConfig/No environment, unprivileged", H100, &[], Skip),
        row("TestGetNvidiaConfig/No environment, privileged", H100, &["+privileged"], Skip),
        row("TestGetNvidiaConfig/Legacy image, no devices, no capabilities, no requirements", H100, &["CUDA_VERSION=9.0"], Allow),
        row("TestGetNvidiaConfig/Legacy image, no devices (gets all GPUs: the legacy cuda>=13.0 is checked)", H100, &["CUDA_VERSION=13.0"], Block("L4-CUDA-REQUIREMENT")),
        row("TestGetNvidiaConfig/Legacy image, devices 'all'", H100, &["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=all"], Allow),
        row("TestGetNvidiaConfig/Legacy image, devices 'empty'", H100, &["CUDA_VERSION=99.0", "NVIDIA_VISIBLE_DEVICES="], Skip),
        row("TestGetNvidiaConfig/Legacy image, devices 'void'", H100, &["CUDA_VERSION=99.0", "NVIDIA_VISIBLE_DEVICES=void"], Skip),
        row("TestGetNvidiaConfig/Legacy image, devices 'none'", H100, &["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=none"], Allow),
        row("TestGetNvidiaConfig/Legacy image, devices 'none' (requirement cuda>=13.0 still checked)", H100, &["CUDA_VERSION=13.0", "NVIDIA_VISIBLE_DEVICES=none"], Block("L4-CUDA-REQUIREMENT")),
        row("TestGetNvidiaConfig/Legacy image, devices set (gpu0,gpu1: the CLI's unknown device)", H100, &["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=gpu0,gpu1"], Block("L3-SELECTION-UNMATCHED")),
        row("TestGetNvidiaConfig/Legacy image, devices set, capabilities set, requirements set (req0=true: the CLI's invalid expression)", H100, &["CUDA_VERSION=9.0", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=video,display", "NVIDIA_REQUIRE_REQ0=req0=true", "NVIDIA_REQUIRE_REQ1=req1=false"], Block("L4-REQUIREMENT-INVALID")),
        row("TestGetNvidiaConfig/Legacy image, devices set, capabilities set, requirements set, disable requirements", H100, &["CUDA_VERSION=99.0", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_REQ0=req0=true", "NVIDIA_DISABLE_REQUIRE=true"], Allow),
        row("TestGetNvidiaConfig/Modern image, no devices, no capabilities, no requirements, no envCUDAVersion", H100, &["NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Skip),
        row("TestGetNvidiaConfig/Modern image, no devices, no capabilities, no requirement, envCUDAVersion set", H100, &["CUDA_VERSION=99.0", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Skip),
        row("TestGetNvidiaConfig/Modern image, devices 'all', no capabilities, no requirements", H100, &[c, "NVIDIA_VISIBLE_DEVICES=all"], Allow),
        row("TestGetNvidiaConfig/Modern image, devices 'empty'", H100, &["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_VISIBLE_DEVICES="], Skip),
        row("TestGetNvidiaConfig/Modern image, devices 'void'", H100, &["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_VISIBLE_DEVICES=void"], Skip),
        row("TestGetNvidiaConfig/Modern image, devices 'none'", H100, &[c, "NVIDIA_VISIBLE_DEVICES=none"], Allow),
        row("TestGetNvidiaConfig/Modern image, devices 'none' (cuda>=99.0 still checked)", H100, &["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_VISIBLE_DEVICES=none"], Block("L4-CUDA-REQUIREMENT")),
        row("TestGetNvidiaConfig/Modern image, devices set (gpu0,gpu1: the CLI's unknown device)", H100, &[c, "NVIDIA_VISIBLE_DEVICES=gpu0,gpu1"], Block("L3-SELECTION-UNMATCHED")),
        row("TestGetNvidiaConfig/Modern image, devices set, capabilities 'empty', no requirements", H100, &[c, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES="], Allow),
        row("TestGetNvidiaConfig/Modern image, devices set, capabilities set, requirements set (req0=true: the CLI's invalid expression)", H100, &[c, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_REQ0=req0=true", "NVIDIA_REQUIRE_REQ1=req1=false"], Block("L4-REQUIREMENT-INVALID")),
        row("TestGetNvidiaConfig/Modern image, devices set, capabilities set, requirements set, disable requirements", H100, &["NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DISABLE_REQUIRE=true"], Allow),
        row("TestGetNvidiaConfig/No cuda envs, devices 'all'", H100, &["NVIDIA_VISIBLE_DEVICES=all"], Allow),
        row("TestGetNvidiaConfig/Modern image, devices 'all', migConfig set, privileged", H100, &[c, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=mig0,mig1", "+privileged"], Allow),
        row("TestGetNvidiaConfig/Modern image, devices 'all', migConfig set, unprivileged", H100, &[c, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_CONFIG_DEVICES=mig0,mig1"], Block("NVIDIA_MIG_CONFIG_DEVICES is set")),
        row("TestGetNvidiaConfig/Modern image, devices 'all', migMonitor set, privileged", H100, &[c, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=mig0,mig1", "+privileged"], Allow),
        row("TestGetNvidiaConfig/Modern image, devices 'all', migMonitor set, unprivileged", H100, &[c, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_MIG_MONITOR_DEVICES=mig0,mig1"], Block("NVIDIA_MIG_MONITOR_DEVICES is set")),
        row("TestGetNvidiaConfig (no GPU: MIG_CONFIG_DEVICES of a non-GPU container is never read)", H100, &["NVIDIA_MIG_CONFIG_DEVICES=all"], Skip),
        // Driver capabilities: NVIDIA's hook refuses a GPU container asking for one it does not know.
        row("TestGetDriverCapabilities/Env is set for modern image", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=display,video"], Allow),
        row("TestGetDriverCapabilities/Env is all for modern image", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"], Allow),
        row("TestGetDriverCapabilities/Env is empty for modern image", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES="], Allow),
        row("TestGetDriverCapabilities/Env unset for legacy image is 'all'", H100, &["CUDA_VERSION=11.0"], Allow),
        row("TestGetDriverCapabilities/Invalid capabilities panic", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,not-utility"], Block("unsupported capability")),
        row("TestGetDriverCapabilities/Invalid capabilities panic (even with requirements disabled)", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=gpu", "NVIDIA_DISABLE_REQUIRE=true"], Block("unsupported capability")),
        row("TestGetDriverCapabilities (all among unknown ones is all)", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=foo,all"], Allow),
        row("TestGetDriverCapabilities (entries trimmed, empty ones skipped)", H100, &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES= compute , utility,,ngx"], Allow),
        row("TestGetDriverCapabilities (no GPU: never read)", H100, &["NVIDIA_DRIVER_CAPABILITIES=foo"], Skip),
        // Volume mounts.
        row("TestGetDevicesFromMounts/Discover 2 devices", H100x2, &[&nvd_root, &m0, &m1, arch9], Allow),
        row("TestGetDevicesFromMounts/Discover 2 devices (their GPU is the one checked)", Mig, &[&nvd_root, &m0, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("TestGetDevicesFromMounts/Host path is not /dev/null", H100, &[&nvd_root, &not_null, arch9], Allow),
        row("TestGetDevicesFromMounts/Container path is not prefixed by 'root'", H100, &[&nvd_root, &other_prefix, arch9], Allow),
        row("TestGetDevicesFromMounts/Container path is only 'root'", H100, &[&nvd_root, &only_root, arch10], Block("L4-ARCH-REQUIREMENT")),
        row("TestGetDevicesFromMounts/No mounts (root path, GPUs differ: per-GPU checks unverifiable)", Mig, &[&nvd_root, arch9], Warn("L4-REQUIREMENT-UNVERIFIABLE")),
        row("TestGetVisibleDevicesFromMounts/cdi devices are included", H100x2, &[&nvd_root, &cdi_mount, &cdi_all_mount, arch9], Allow),
        row("TestGetVisibleDevicesFromMounts/cdi devices are included (cdi/<vendor>/<class>/<device>)", Mig, &[&nvd_root, &cdi_mount, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("TestGetVisibleDevicesFromMounts/imex devices are ignored", Mig, &[&nvd_root, &imex_mount, &m1, arch9], Allow),
        row("TestDeviceListSourcePriority/Mount devices, unprivileged, accept unprivileged, no accept mounts (env wins)", Mig, &["NVIDIA_VISIBLE_DEVICES=1", &m0, arch9], Allow),
        row("TestDeviceListSourcePriority/Mount devices, accept mounts (env names the mounts' root)", Mig, &[&nvd_root, &m1, arch9], Allow),
        row("TestDeviceListSourcePriority/No mount devices, unprivileged, accept unprivileged", H100x2, &["NVIDIA_VISIBLE_DEVICES=0,1"], Allow),
        row("TestDeviceListSourcePriority/No mount devices, privileged", H100x2, &["NVIDIA_VISIBLE_DEVICES=0,1", "+privileged"], Allow),
        // Swarm resources are read only when the hook is configured for them (off by default).
        row("TestGetDevicesFromEnvvar/missing NVIDIA_VISIBLE_DEVICES returns nil for non-legacy image (swarm off)", H100, &["DOCKER_RESOURCE_GPUS=GPU-67890"], Skip),
        row("TestGetDevicesFromEnvvar/blank NVIDIA_VISIBLE_DEVICES returns nil (swarm off)", H100, &["NVIDIA_VISIBLE_DEVICES=", "DOCKER_RESOURCE_GPUS=GPU-67890"], Skip),
        row("TestGetDevicesFromEnvvar/'void' NVIDIA_VISIBLE_DEVICES returns nil (swarm off)", H100, &["NVIDIA_VISIBLE_DEVICES=void", "DOCKER_RESOURCE_GPUS=GPU-67890"], Skip),
        row("TestGetDevicesFromEnvvar/'none' NVIDIA_VISIBLE_DEVICES returns empty (swarm off)", H100, &["NVIDIA_VISIBLE_DEVICES=none", "DOCKER_RESOURCE_GPUS=GPU-67890"], Allow),
        row("TestGetDevicesFromEnvvar/NVIDIA_VISIBLE_DEVICES set returns value for non-legacy image", H100, &[&nvd_uuid, "DOCKER_RESOURCE_GPUS=GPU-67890"], Allow),
        row("TestGetDevicesFromEnvvar/NVIDIA_VISIBLE_DEVICES set returns value for legacy image (CUDA_VERSION=legacy refused)", H100, &[&nvd_uuid, "CUDA_VERSION=legacy"], Block("CUDA_VERSION")),
        row("TestGetDevicesFromEnvvar/empty env returns all for legacy image (CUDA_VERSION=legacy refused)", H100, &["CUDA_VERSION=legacy"], Block("CUDA_VERSION")),
        row("TestGetDevicesFromEnvvar/blank NVIDIA_VISIBLE_DEVICES returns nil for non-legacy image", H100, &["NVIDIA_VISIBLE_DEVICES="], Skip),
        // NewVisibleDevices: void > none > all, anywhere in the list.
        row("devices.go NewVisibleDevices (void anywhere)", H100, &["NVIDIA_VISIBLE_DEVICES=0,void", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Skip),
        row("devices.go NewVisibleDevices (none over all)", H100, &["NVIDIA_VISIBLE_DEVICES=all,none", arch10], Allow),
        row("devices.go NewVisibleDevices (none over all, cuda checked)", H100, &["NVIDIA_VISIBLE_DEVICES=none,all", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Block("L4-CUDA-REQUIREMENT")),
        row("devices.go NewVisibleDevices (all in a list)", Mig, &["NVIDIA_VISIBLE_DEVICES=1,all", arch9], Block("L4-ARCH-REQUIREMENT")),
        row("common.c select_devices (ALL: str_case_equal)", H100, &["NVIDIA_VISIBLE_DEVICES=ALL", arch10], Block("L4-ARCH-REQUIREMENT")),
        row("common.c select_devices (NONE is an unknown device)", H100, &["NVIDIA_VISIBLE_DEVICES=NONE"], Block("L3-SELECTION-UNMATCHED")),
        row("cuda_image.go DevicesFromEnvvars (entries trimmed, empty ones dropped)", H100, &["NVIDIA_VISIBLE_DEVICES= 0 , ,"], Allow),
        row("cuda_image.go DevicesFromEnvvars (only commas: void)", H100, &["NVIDIA_VISIBLE_DEVICES=,", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Skip),
        row("common.c select_devices (a device twice)", H100, &["NVIDIA_VISIBLE_DEVICES=0,0"], Allow),
        row("common.c select_gpu_device (GPU UUID, any case)", H100, &[&nvd_uuid_upper], Allow),
        row("common.c select_gpu_device (PCI bus id)", H100, &["NVIDIA_VISIBLE_DEVICES=0000:18:00.0"], Allow),
        row("common.c select_gpu_device (index beyond the GPUs: unknown device)", H100, &["NVIDIA_VISIBLE_DEVICES=5"], Block("L3-SELECTION-UNMATCHED")),
        row("common.c select_gpu_device (unknown GPU UUID)", H100, &["NVIDIA_VISIBLE_DEVICES=GPU-12345"], Block("L3-SELECTION-UNMATCHED")),
        // CDI names (nvidia-ctk cdi generate, jit-cdi mode).
        row("CDI name nvidia.com/gpu=<index>", H100, &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], Allow),
        row("CDI name nvidia.com/gpu=<uuid>", H100, &[&cdi_uuid], Allow),
        row("CDI name runtime.nvidia.com/gpu=all", H100, &["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=all"], Allow),
        row("CDI name nvidia.com/gpu=all (checked like all)", H100, &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all", arch10], Block("L4-ARCH-REQUIREMENT")),
        row("CDI name nvidia.com/mig=<MIG uuid> (parent H100)", Mig, &[&mig_cdi, arch9], Allow),
        row("CDI name nvidia.com/gpu=<mig index> (parent A100)", Mig, &["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0:1", arch9], Block("L4-ARCH-REQUIREMENT")),
        // MIG devices: select_mig_device, checked on their parent GPU.
        row("common.c select_mig_device (MIG UUID on the A100, arch>=8.0)", Mig, &[&mig00, "NVIDIA_REQUIRE_ARCH=arch>=8.0"], Allow),
        row("common.c select_mig_device (MIG UUID on the A100, arch>=9.0)", Mig, &[&mig00, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("common.c select_mig_device (MIG UUID on the H100, arch>=9.0)", Mig, &[&mig10, arch9], Allow),
        row("common.c select_mig_device (MIG UUID, any case)", Mig, &[&mig_lower, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("common.c select_mig_device (two MIG devices of one GPU)", Mig, &[&mig01, "NVIDIA_REQUIRE_ARCH=arch=8.0"], Allow),
        row("common.c select_mig_device (MIG index 0:0, parent A100)", Mig, &["NVIDIA_VISIBLE_DEVICES=0:0", arch9], Block("L4-ARCH-REQUIREMENT")),
        row("common.c select_mig_device (MIG index 1:0, parent H100)", Mig, &["NVIDIA_VISIBLE_DEVICES=1:0", arch9], Allow),
        row("common.c select_mig_device (MIG index 0:1)", Mig, &["NVIDIA_VISIBLE_DEVICES=0:1", c], Allow),
        row("common.c select_mig_device (MIG index beyond the GPU's MIG devices)", Mig, &["NVIDIA_VISIBLE_DEVICES=0:5"], Block("L3-SELECTION-UNMATCHED")),
        row("common.c select_mig_device (MIG index on a GPU that does not exist)", Mig, &["NVIDIA_VISIBLE_DEVICES=9:0"], Block("L3-SELECTION-UNMATCHED")),
        row("MIG UUID of R450 drivers (MIG-GPU-<uuid>/gi/ci names its parent)", Mig, &[&mig_r450, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("MIG UUID, parent not recorded, GPUs differ (unverifiable: starts with a warning)", MigUnrecorded, &[&mig00, arch9], Warn("L4-REQUIREMENT-UNVERIFIABLE")),
        row("MIG UUID, parent not recorded, cuda still checked", MigUnrecorded, &[&mig00, "NVIDIA_REQUIRE_CUDA=cuda>=99.0"], Block("L4-CUDA-REQUIREMENT")),
        row("MIG UUID, not in the record, GPUs differ (unverifiable)", Mig, &["NVIDIA_VISIBLE_DEVICES=MIG-00000000-1111-2222-3333-444444444444", arch9], Warn("L4-REQUIREMENT-UNVERIFIABLE")),
        row("MIG UUID, parent not recorded, every MIG GPU an A100 (checked as one)", MigA100s, &[&mig00, arch9], Block("L4-ARCH-REQUIREMENT")),
        row("MIG UUID, parent not recorded, every MIG GPU an A100 (passes)", MigA100s, &[&mig00, "NVIDIA_REQUIRE_ARCH=arch>=8.0"], Allow),
        row("MIG index with MIG mode, no record", MigUnrecorded, &["NVIDIA_VISIBLE_DEVICES=1:0", arch9], Allow),
        row("common.c select_mig_device (MIG index beyond, from capability files)", MigUnrecorded, &["NVIDIA_VISIBLE_DEVICES=1:1"], Block("L3-SELECTION-UNMATCHED")),
        row("configure.c (whole GPU and MIG device of another GPU)", Mig, &["NVIDIA_VISIBLE_DEVICES=1,0:0", arch9], Block("L4-ARCH-REQUIREMENT")),
        row("NewCUDAImageFromEnv: the last NVIDIA_VISIBLE_DEVICES entry counts", Mig, &[&mig10, "NVIDIA_VISIBLE_DEVICES=all", arch9], Block("L4-ARCH-REQUIREMENT")),
    ]
}

/// `NVIDIA_DISABLE_REQUIRE` (Go `strconv.ParseBool`, toolkit `HasDisableRequire`),
/// `TestGetRequirements`, and the order: GPU request, then the switch, then parsing.
#[allow(clippy::too_many_lines)] // A table.
fn disable_switch_and_order() -> Vec<Row> {
    use Host::H100;
    let mut rows = Vec::new();
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        let env = format!("NVIDIA_DISABLE_REQUIRE={t}");
        rows.push(Row {
            upstream: "HasDisableRequire: strconv.ParseBool true",
            host: H100,
            env: vec!["NVIDIA_VISIBLE_DEVICES=all".into(), "NVIDIA_REQUIRE_CUDA=cuda>=99.0".into(), env],
            want: Allow,
        });
    }
    for f in ["0", "f", "F", "FALSE", "false", "False", "yes", "on", "TrUe", " true", "true ", "y", ""] {
        let env = format!("NVIDIA_DISABLE_REQUIRE={f}");
        rows.push(Row {
            upstream: "HasDisableRequire: strconv.ParseBool false or invalid (checks stay on)",
            host: H100,
            env: vec!["NVIDIA_VISIBLE_DEVICES=all".into(), "NVIDIA_REQUIRE_CUDA=cuda>=99.0".into(), env],
            want: Block("L4-CUDA-REQUIREMENT"),
        });
    }
    let all = "NVIDIA_VISIBLE_DEVICES=all";
    rows.extend([
        row(
            "TestGetRequirements/NVIDIA_REQUIRE_JETPACK is ignored",
            H100,
            &[all, "NVIDIA_REQUIRE_JETPACK=csv-mounts=all"],
            Allow,
        ),
        row(
            "TestGetRequirements/NVIDIA_REQUIRE_JETPACK is ignored (no GPU)",
            H100,
            &["NVIDIA_REQUIRE_JETPACK=csv-mounts=all"],
            Skip,
        ),
        row(
            "TestGetRequirements/NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS is ignored",
            H100,
            &[all, "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=base-only"],
            Allow,
        ),
        row(
            "TestGetRequirements/single requirement set",
            H100,
            &[all, "NVIDIA_REQUIRE_CUDA=cuda>=11.6"],
            Allow,
        ),
        row(
            "TestGetRequirements/requirements are concatenated requirement set",
            H100,
            &[all, "NVIDIA_REQUIRE_CUDA=cuda>=11.6", "NVIDIA_REQUIRE_BRAND=brand=tesla"],
            Block("L4-BRAND-REQUIREMENT"),
        ),
        row(
            "TestGetRequirements/requirements are concatenated (both hold)",
            H100,
            &[all, "NVIDIA_REQUIRE_CUDA=cuda>=11.6", "NVIDIA_REQUIRE_BRAND=brand=nvidia"],
            Allow,
        ),
        row("TestGetRequirements/legacy image", H100, &["CUDA_VERSION=11.6"], Allow),
        row(
            "TestGetRequirements/legacy image with additional requirement",
            H100,
            &["CUDA_VERSION=11.6", "NVIDIA_REQUIRE_BRAND=brand=tesla"],
            Block("L4-BRAND-REQUIREMENT"),
        ),
        row(
            "TestGetRequirements/NVIDIA_DISABLE_REQUIRE ignores requirements",
            H100,
            &[
                all,
                "NVIDIA_REQUIRE_CUDA=cuda>=11.6",
                "NVIDIA_REQUIRE_BRAND=brand=tesla",
                "NVIDIA_DISABLE_REQUIRE=true",
            ],
            Allow,
        ),
        row(
            "TestGetRequirements/NVIDIA_DISABLE_REQUIRE ignores legacy image requirements",
            H100,
            &["CUDA_VERSION=99.6", "NVIDIA_REQUIRE_BRAND=brand=tesla", "NVIDIA_DISABLE_REQUIRE=true"],
            Allow,
        ),
        row(
            "getNvidiaConfig order: a malformed requirement under NVIDIA_DISABLE_REQUIRE is never parsed",
            H100,
            &[all, "NVIDIA_REQUIRE_CUDA=cuda>>1", "NVIDIA_DISABLE_REQUIRE=true"],
            Allow,
        ),
        row(
            "getNvidiaConfig order: a malformed requirement without a GPU is never parsed",
            H100,
            &["NVIDIA_REQUIRE_CUDA=cuda>>1"],
            Skip,
        ),
        row(
            "getNvidiaConfig order: a malformed requirement with void is never parsed",
            H100,
            &["NVIDIA_VISIBLE_DEVICES=void", "STACKBUILD_REQUIRE_X=kernel>>1"],
            Skip,
        ),
        row(
            "getNvidiaConfig order: a malformed requirement of a GPU container blocks",
            H100,
            &[all, "NVIDIA_REQUIRE_CUDA=cuda>>1"],
            Block("do not parse"),
        ),
        row(
            "getNvidiaConfig order: a garbage CUDA_VERSION under NVIDIA_DISABLE_REQUIRE is never parsed",
            H100,
            &["CUDA_VERSION=garbage", "NVIDIA_DISABLE_REQUIRE=1"],
            Allow,
        ),
    ]);
    rows
}

/// Legacy images: `TestParseMajorMinorVersionValid`/`Invalid`, `IsLegacy`.
fn legacy_cuda_version() -> Vec<Row> {
    use Host::H100;
    let mut rows = Vec::new();
    // Valid versions: the legacy image gets every GPU and `cuda>=<major.minor>` (host: 12.2).
    for (v, want) in [
        ("0", Allow),
        ("8", Allow),
        ("7.5", Allow),
        ("9.0.116", Allow),
        ("4294967295.4294967295.4294967295", Block("L4-CUDA-REQUIREMENT")),
        ("v11.6", Allow),
        ("12", Allow),
        ("12.2.140", Allow),
        ("12.3", Block("L4-CUDA-REQUIREMENT")),
        ("13", Block("L4-CUDA-REQUIREMENT")),
    ] {
        rows.push(Row {
            upstream: "TestParseMajorMinorVersionValid",
            host: H100,
            env: vec![format!("CUDA_VERSION={v}")],
            want,
        });
    }
    for v in [
        "foo",
        "foo.5.10",
        "9.0.116.50",
        "9.0.116foo",
        "7.foo",
        "9.0.bar",
        "9.4294967296",
        "9.0.116.",
        "9..0",
        "9.",
        ".5.10",
        "-9",
        "+9",
        "-9.1.116",
        "-9.-1.-116",
    ] {
        rows.push(Row {
            upstream: "TestParseMajorMinorVersionInvalid",
            host: H100,
            env: vec![format!("CUDA_VERSION={v}")],
            want: Block("CUDA_VERSION"),
        });
    }
    rows.extend([
        row(
            "IsLegacy: an empty NVIDIA_REQUIRE_CUDA is absent (legacy, cuda>=13.0)",
            H100,
            &["CUDA_VERSION=13.0", "NVIDIA_REQUIRE_CUDA="],
            Block("L4-CUDA-REQUIREMENT"),
        ),
        row(
            "IsLegacy: an empty NVIDIA_REQUIRE_CUDA is absent (legacy, cuda>=11.0)",
            H100,
            &["CUDA_VERSION=11.0", "NVIDIA_REQUIRE_CUDA="],
            Allow,
        ),
        row("IsLegacy: an empty CUDA_VERSION is no legacy image", H100, &["CUDA_VERSION="], Skip),
        row(
            "IsLegacy: NVIDIA_REQUIRE_CUDA set, CUDA_VERSION not read",
            H100,
            &["CUDA_VERSION=garbage", "NVIDIA_REQUIRE_CUDA=cuda>=11.0", "NVIDIA_VISIBLE_DEVICES=all"],
            Allow,
        ),
        // CUDA 7.5 and 8.0 (minimum drivers 352.31 and 367.48, CUDA release notes): R352
        // reports 7.5, so the CLI refuses a legacy CUDA 8 image there.
        row(
            "legacy CUDA_VERSION=8.0 on R352",
            Host::P100On352,
            &["CUDA_VERSION=8.0"],
            Block("L4-CUDA-REQUIREMENT"),
        ),
        row(
            "legacy CUDA_VERSION=8 on R352",
            Host::P100On352,
            &["CUDA_VERSION=8"],
            Block("L4-CUDA-REQUIREMENT"),
        ),
        row("legacy CUDA_VERSION=7.5 on R352", Host::P100On352, &["CUDA_VERSION=7.5"], Allow),
        row(
            "NVIDIA_REQUIRE_CUDA=cuda>=8.0 on R352",
            Host::P100On352,
            &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=8.0"],
            Block("L4-CUDA-REQUIREMENT"),
        ),
        row(
            "IsLegacy: the last of two CUDA_VERSION entries counts",
            H100,
            &["CUDA_VERSION=99.0", "CUDA_VERSION=11.0"],
            Allow,
        ),
    ]);
    rows
}

/// Requirement parsing: `TestParse`, `TestNewConstraintFromRequirement`, dsl.c's lexical rules.
#[allow(clippy::too_many_lines)] // A table.
fn parsing() -> Vec<Row> {
    use Host::H100;
    let cases: [(&str, &str, Want); 47] = [
        ("TestParse/empty is nil", "", Allow),
        ("TestParse/missing operator is invalid", "notvalid", Block("do not parse")),
        // The toolkit's Go constraints (CSV mode) ignore an unsupported property; the CLI that
        // NVIDIA's hook runs refuses it where evaluation reaches it (dsl.c evaluate_rule: -1).
        (
            "TestParse/invalid property is invalid (CLI: invalid expression)",
            "foo=45",
            Block("L4-REQUIREMENT-INVALID"),
        ),
        ("TestParse/cuda must be semver", "cuda=foo", Block("do not parse")),
        ("TestParse/cuda greater than equal", "cuda>=11.6", Allow),
        ("TestParse/cuda greater than", "cuda>11.6", Allow),
        ("TestParse/cuda less than equal", "cuda<=11.6", Block("L4-CUDA-REQUIREMENT")),
        ("TestParse/cuda less than", "cuda<11.6", Block("L4-CUDA-REQUIREMENT")),
        ("TestParse/cuda equal", "cuda=11.6", Block("L4-CUDA-REQUIREMENT")),
        ("TestParse/cuda not equal", "cuda!=11.6", Allow),
        ("TestNewConstraintFromRequirement/empty is nil", " ", Allow),
        (
            "TestNewConstraintFromRequirement/malformed constraint is invalid",
            "notvalid",
            Block("do not parse"),
        ),
        (
            "TestNewConstraintFromRequirement/unsupported property (CLI: not reached, the first term holds)",
            "cuda>=11.6 foo=bar",
            Allow,
        ),
        (
            "TestNewConstraintFromRequirement/unsupported property (CLI: reached after the failing term)",
            "cuda>=99.0 foo=bar",
            Block("L4-REQUIREMENT-INVALID"),
        ),
        (
            "dsl.c evaluate_rule: unknown key after factors that hold",
            "cuda>=12.0,foo=bar",
            Block("L4-REQUIREMENT-INVALID"),
        ),
        (
            "dsl.c dsl_evaluate: unknown key after a failing factor is not reached",
            "cuda>=99.0,foo=bar cuda>=12.0",
            Allow,
        ),
        (
            "dsl.c dsl_evaluate: unknown key after a failing factor, no term holds",
            "cuda>=99.0,foo=bar",
            Block("L4-CUDA-REQUIREMENT"),
        ),
        (
            "dsl.c evaluate_rule: unknown key in capitals",
            "CUDA>=99.0 REQ0=TRUE",
            Block("L4-REQUIREMENT-INVALID"),
        ),
        ("dsl.c dsl_evaluate: a term of only commas first: met", ", cuda>=99.0", Allow),
        (
            "dsl.c dsl_evaluate: a term of only commas after a failing term: unmet",
            "cuda>=99.0 , cuda>=12.0",
            Block("L4-CUDA-REQUIREMENT"),
        ),
        (
            "dsl.c dsl_evaluate: a term of only commas ends the evaluation before an unknown key",
            ", req0=true",
            Allow,
        ),
        ("TestNewConstraintFromRequirement/space-separated alternatives", "cuda>=11.6 arch=5.3", Allow),
        (
            "TestNewConstraintFromRequirement/comma-separated factors",
            "cuda>=11.6,arch=5.3",
            Block("L4-ARCH-REQUIREMENT"),
        ),
        ("TestNewConstraintFromRequirement/and takes precedence", "cuda<13.6 cuda>=11.6,arch=5.3", Allow),
        (
            "TestNewConstraintFromRequirement/and takes precedence (neither holds)",
            "cuda<12.0 cuda>=11.6,arch=5.3",
            Block("L4-CUDA-REQUIREMENT"),
        ),
        ("dsl.c dsl_evaluate: empty factor skipped", "cuda>=11.6,,driver>=535", Allow),
        ("dsl.c dsl_evaluate: trailing comma", "cuda>=11.6,", Allow),
        ("dsl.c dsl_evaluate: leading comma", ",cuda>=11.6", Allow),
        ("dsl.c dsl_evaluate: repeated spaces", "  cuda>=99.0   driver>=535  ", Allow),
        (
            "dsl.c dsl_evaluate: empty factor, failing term",
            "cuda>=99.0,,driver>=535",
            Block("L4-CUDA-REQUIREMENT"),
        ),
        ("dsl.c dsl_evaluate: only commas", ",,", Allow),
        ("dsl.c evaluate_rule: == is no operator", "cuda==12.2", Block("do not parse")),
        ("dsl.c evaluate_rule: => is no operator", "cuda=>11.6", Block("do not parse")),
        ("dsl.c dsl_evaluate: a tab is no separator", "cuda>=11.6\tdriver>=535", Block("do not parse")),
        ("dsl.c evaluate_rule: empty value", "cuda>=", Block("do not parse")),
        ("dsl.c evaluate_rule: empty key", ">=11.6", Block("do not parse")),
        ("dsl.c evaluate_rule: keys compare case-insensitively", "CUDA>=11.6", Allow),
        ("dsl.c dsl_compare_string: brand case-insensitively", "Brand=NVIDIA", Allow),
        ("dsl.c dsl_compare_string: brand differs", "brand=Tesla", Block("L4-BRAND-REQUIREMENT")),
        ("dsl.c dsl_compare_string: brand has only = and !=", "brand>=tesla", Block("do not parse")),
        ("dsl.c dsl_compare_version: missing components are zero (arch=9)", "arch=9", Allow),
        ("dsl.c dsl_compare_version: missing components are zero (arch>=8)", "arch>=8", Allow),
        ("dsl.c dsl_compare_version: trailing zero components (arch=9.0.0)", "arch=9.0.0", Allow),
        ("dsl.c dsl_compare_version: arch above the GPU's", "arch>=9.1", Block("L4-ARCH-REQUIREMENT")),
        ("dsl.c dsl_compare_version: numeric components (535.104.5 = 535.104.05)", "driver=535.104.5", Allow),
        ("dsl.c dsl_compare_version: driver above", "driver>535.104.05", Block("L4-DRIVER-REQUIREMENT")),
        ("dsl.c dsl_compare_version: driver minor compared numerically", "driver>=535.54", Allow),
    ];
    cases
        .into_iter()
        .map(|(upstream, value, want)| Row {
            upstream,
            host: H100,
            env: vec!["NVIDIA_VISIBLE_DEVICES=all".into(), format!("NVIDIA_REQUIRE_CUDA={value}")],
            want,
        })
        .collect()
}

/// Evaluation: variables `AND`ed, per-GPU keys for each GPU, `none`, forward compatibility.
fn evaluation() -> Vec<Row> {
    use Host::{A100On470, Geforce470, Mig, H100};
    let official = format!("NVIDIA_REQUIRE_CUDA={CUDA_12_1_REQUIRE}");
    let all = "NVIDIA_VISIBLE_DEVICES=all";
    vec![
        row("GetRequirements: variables are ANDed", H100, &[all, "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_REQUIRE_ARCH=arch>=10.0"], Block("L4-ARCH-REQUIREMENT")),
        row("GetRequirements: variables are ANDed (both hold)", H100, &[all, "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"], Allow),
        row("configure.c: arch for each visible GPU (one fails)", Mig, &[all, "NVIDIA_REQUIRE_ARCH=arch>=9.0"], Block("L4-ARCH-REQUIREMENT")),
        row("configure.c: arch for each visible GPU (the selected one holds)", Mig, &["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_ARCH=arch>=9.0"], Allow),
        row("configure.c: brand for each visible GPU", Mig, &[all, "NVIDIA_REQUIRE_BRAND=brand=nvidia"], Allow),
        row("configure.c: arch OR brand per GPU", Mig, &[all, "NVIDIA_REQUIRE_X=arch>=9.0 brand=nvidia"], Allow),
        row("configure.c: no device visible, arch holds", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_ARCH=arch>=10.0"], Allow),
        row("configure.c: no device visible, brand holds", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_BRAND=brand=tesla"], Allow),
        row("configure.c: no device visible, driver checked", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_DRIVER=driver>=550"], Block("L4-DRIVER-REQUIREMENT")),
        row("configure.c: no device visible, driver holds", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_DRIVER=driver>=535"], Allow),
        row("official nvidia/cuda:12.1.1 value, driver 535 (cuda term)", H100, &[all, &official], Allow),
        row("official nvidia/cuda:12.1.1 value, data-center GPU on 470 (forward compatibility)", A100On470, &[all, &official], Allow),
        row("DELIBERATE: official nvidia/cuda:12.1.1 value, GeForce on 470 (NVIDIA starts it; forward compatibility does not run on GeForce)", Geforce470, &[all, &official], Block("L4-FORWARD-COMPAT-UNSUPPORTED")),
        row("official value on GeForce 470, checks disabled", Geforce470, &[all, &official, "NVIDIA_DISABLE_REQUIRE=true"], Allow),
        row("configure.c rules: our key in an NVIDIA variable has no rule (kernel: invalid expression)", H100, &[all, "NVIDIA_REQUIRE_KERNEL=kernel!=5.15.0-105-generic"], Block("L4-REQUIREMENT-INVALID")),
        row("our key in our variable is honoured (kernel)", H100, &[all, "STACKBUILD_REQUIRE_KERNEL=kernel!=5.15.0-105-generic"], Block("L1-KERNEL-REQUIREMENT")),
        row("configure.c: per visible GPU, the unknown key reached on the A100", Mig, &[all, "NVIDIA_REQUIRE_X=arch>=9.0 req0=true"], Block("L4-REQUIREMENT-INVALID")),
        row("configure.c: per visible GPU, not reached on the H100", Mig, &["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_X=arch>=9.0 req0=true"], Allow),
        row("configure.c: no device visible, arch holds, the unknown key not reached", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_X=arch>=10.0 req0=true"], Allow),
        row("configure.c: no device visible, the unknown key reached", H100, &["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_REQUIRE_REQ0=req0=true"], Block("L4-REQUIREMENT-INVALID")),
        row("our variables: an unknown key is an error", H100, &[all, "STACKBUILD_REQUIRE_X=flavour=vanilla"], Block("do not parse")),
        row("our variables: our keys", H100, &[all, "STACKBUILD_REQUIRE_GPUS=gpus>=2"], Block("L3-GPU-COUNT-REQUIREMENT")),
    ]
}

fn table() -> Vec<Row> {
    let mut rows = device_selection();
    rows.extend(disable_switch_and_order());
    rows.extend(legacy_cuda_version());
    rows.extend(parsing());
    rows.extend(evaluation());
    rows
}

/// The decision the hook made: the report's `decision`, reason, and findings (code, severity).
struct Decision {
    verdict: String,
    reason: String,
    findings: Vec<(String, String)>,
}

/// Runs the hook for one row's container on `host`.
fn decide(host: &FixtureHost, dir: &Path, id: &str, env: &[String]) -> Decision {
    let bundle = dir.join(id);
    std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let mut process_env = Vec::new();
    let mut mounts = Vec::new();
    let mut caps = serde_json::json!({ "bounding": ["CAP_CHOWN"] });
    for e in env {
        if e == "+privileged" {
            caps = serde_json::json!({ "bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"] });
        } else if let Some(m) = e.strip_prefix("+mount:") {
            let (source, destination) = m.split_once(':').unwrap();
            mounts.push(serde_json::json!({ "source": source, "destination": destination, "type": "bind" }));
        } else {
            process_env.push(e.clone());
        }
    }
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": { "env": process_env, "capabilities": caps },
        "root": { "path": "rootfs" },
        "mounts": mounts,
    });
    std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
    let state =
        serde_json::json!({ "ociVersion": "1.0.2", "id": id, "status": "creating", "bundle": bundle });
    let reports = dir.join("reports");
    let config = HookConfig {
        host_root: host.root().to_path_buf(),
        policy: Policy::Enforce,
        report_dir: Some(reports.clone()),
    };
    let outcome = run(state.to_string().as_bytes(), &config);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reports.join(format!("{id}.json"))).unwrap()).unwrap();
    let findings = report["diagnosis"]["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| {
                    (
                        f["code"].as_str().unwrap_or("").to_owned(),
                        f["severity"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let decision = report["decision"].as_str().unwrap_or("").to_owned();
    assert_eq!(outcome.code == 1, decision == "blocked", "{id}: exit {} but {decision}", outcome.code);
    Decision { verdict: decision, reason: report["reason"].as_str().unwrap_or("").to_owned(), findings }
}

/// Whether `d` is the decision `want`; `Err` says how it differs.
fn check(d: &Decision, want: Want) -> Result<(), String> {
    let has = |code: &str, severity: &str| d.findings.iter().any(|(c, s)| c == code && s == severity);
    let warnings: Vec<&str> =
        d.findings.iter().filter(|(_, s)| s == "warning" || s == "error").map(|(c, _)| c.as_str()).collect();
    let ok = match want {
        Skip => d.verdict == "skipped",
        Allow => d.verdict == "allowed" && warnings.is_empty(),
        Warn(code) => d.verdict == "allowed" && has(code, "warning"),
        Block(needle) => d.verdict == "blocked" && (has(needle, "error") || d.reason.contains(needle)),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("wanted {want:?}, got {} ({}) {:?}", d.verdict, d.reason, warnings))
    }
}

#[test]
fn nvidia_conformance_table() {
    let rows = table();
    assert!(rows.len() >= 150, "{} rows", rows.len());
    eprintln!("{} rows", rows.len());
    let dir = tempfile::tempdir().unwrap();
    let mut hosts: BTreeMap<Host, FixtureHost> = BTreeMap::new();
    for r in &rows {
        if let std::collections::btree_map::Entry::Vacant(slot) = hosts.entry(r.host) {
            let h = r.host.spec().build(&dir.path().join(format!("host-{:?}", r.host))).unwrap();
            if !h.real_device_nodes() {
                eprintln!("skipped: mknod is not permitted here, so the fixture hosts' device-node checks cannot pass");
                return;
            }
            slot.insert(h);
        }
    }
    let mut failures = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let d = decide(&hosts[&r.host], dir.path(), &format!("row{i}"), &r.env);
        if let Err(why) = check(&d, r.want) {
            failures.push(format!("row {i} [{}] {:?} on {:?}: {why}", r.upstream, r.env, r.host));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows disagree:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
}

/// `stackhook doctor --gpus MIG-…` decides as the hook does for the same MIG device.
#[test]
fn doctor_checks_a_mig_device_on_its_parent() {
    use crate::diagnose::doctor;
    let dir = tempfile::tempdir().unwrap();
    let host = Preset::MigNode.spec().build(&dir.path().join("mig")).unwrap();
    let unrecorded = Preset::MigNode.spec().mig_unrecorded().build(&dir.path().join("unrecorded")).unwrap();
    if !host.real_device_nodes() {
        eprintln!("skipped: mknod is not permitted here");
        return;
    }
    let arch9 = ["arch>=9.0".to_owned()];
    let a100_mig = fixture_mig_uuid(0, 0);
    let (text, code) = doctor(host.root(), &arch9, &a100_mig, false, false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("L4-ARCH-REQUIREMENT") && text.contains("GPU 0 (NVIDIA A100-SXM4-40GB)"), "{text}");
    let (text, code) = doctor(host.root(), &arch9, &fixture_mig_uuid(1, 0), false, false);
    assert_eq!(code, 0, "{text}");
    let (text, code) = doctor(host.root(), &arch9, "0:1", false, false);
    assert_eq!(code, 1, "{text}");
    let (text, code) = doctor(unrecorded.root(), &arch9, &a100_mig, false, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("L4-REQUIREMENT-UNVERIFIABLE") && text.contains(&a100_mig), "{text}");
    assert!(text.contains("L3-DEVICE-PARENT-UNKNOWN"), "{text}");
}
