//! The requirement keys and their facts: one row per [`Key`] in [`KEYS`], which every program
//! that handles a key reads instead of writing the fact down again.
//!
//! A row says how the key is written and typed, whether NVIDIA's evaluator knows it and whether
//! it holds per GPU (the parser and the evaluator); where the hook's evidence for the host's value
//! comes from (the doctor's findings); how `stackhook labels` publishes that value (the node
//! affinity of `stackbuild affinity`); the DRA device attribute it is compared with, if any (the
//! CEL of `stackbuild claim`); and how the builder writes it (the recipe's `[host]` rules and
//! the image variables that `stackbuild` derives).
//!
//! A new key is a variant of [`Key`] and its row, in the same place in both (checked when the
//! crate compiles). Where behaviour differs per key (how the evaluator reads the host, what a
//! finding advises), the consumer matches on the key exhaustively, so the new key does not compile
//! until it is handled there too.

use crate::labels as l;

/// Declares the key enum and [`Key::ALL`], its variants in order.
macro_rules! keys {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)* }) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every key, in the order of its declaration and of [`KEYS`].
            pub const ALL: [$name; [$($name::$variant),*].len()] = [$($name::$variant),*];
        }
    };
}

keys! {
    /// What a factor constrains. Its facts are its row of [`KEYS`] ([`Key::spec`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Key {
        /// Highest CUDA version the host driver supports.
        Cuda,
        /// Driver version.
        Driver,
        /// Compute capability of each selected GPU.
        Arch,
        /// Brand of each selected GPU (`tesla`, `geforce`, ...).
        Brand,
        /// Kernel release.
        Kernel,
        /// A kernel module, loaded (`=`) or not (`!=`).
        Module,
        /// Number of GPUs the container gets.
        Gpus,
        /// Host machine architecture.
        Machine,
        /// Kind of host: `linux`, `wsl2` or `jetson`.
        Platform,
    }
}

/// The values `platform` takes, as the probe names the kinds of host.
pub const PLATFORMS: [&str; 3] = ["linux", "wsl2", "jetson"];

/// The facts of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// The key.
    pub key: Key,
    /// The key as written in expressions (`cuda`).
    pub name: &'static str,
    /// What its values are, and so which operators it takes.
    pub value: ValueType,
    /// A value of its type, as written (`12.4`): for documentation and tests.
    pub example: &'static str,
    /// Whether libnvidia-container's evaluator has a rule for the key (`cuda`, `driver`, `arch`,
    /// `brand`: the `rules` table of `src/cli/configure.c`); the others are ours, and an
    /// `NVIDIA_REQUIRE_*` factor on them is an "invalid expression" where NVIDIA's evaluator
    /// reaches it.
    pub nvidia: bool,
    /// Whether the key is evaluated once per selected GPU.
    pub per_gpu: bool,
    /// Where the hook reads the host's value, which a finding shows as its evidence.
    pub evidence: Evidence,
    /// How `stackhook labels` publishes the host's value, which `stackbuild affinity` selects on.
    pub labels: NodeLabels,
    /// The DRA device attribute `stackbuild claim` compares it with, or why there is none.
    pub device: DeviceAttribute,
    /// The recipe's `[host]` rules that state it, or why none does.
    pub recipe: RecipeRule,
    /// The image variable `stackbuild` writes requirements on the key in
    /// (`STACKBUILD_REQUIRE_DRIVER`); `None`: the builder writes none.
    pub variable: Option<&'static str>,
}

/// What the values of a key are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// A CUDA version (`12.4`), ordered.
    CudaVersion,
    /// A driver version (`535.104.05`), ordered.
    DriverVersion,
    /// A compute capability (`8.6`; a missing minor is zero, as NVIDIA reads it), ordered.
    ComputeCapability,
    /// A kernel release (`5.15.0-105-generic`), ordered by runs of digits and of other text.
    KernelRelease,
    /// A count (`2`), ordered.
    Count,
    /// A word of letters, digits, `_` and `-`, compared case-insensitively with `=` and `!=`
    /// only; one of `one_of` where that is not empty.
    Word {
        /// The words the key takes; empty: any.
        one_of: &'static [&'static str],
    },
}

impl ValueType {
    /// Whether values are ordered (`<`, `<=`, `>`, `>=` apply), not only equal or not.
    pub fn ordered(self) -> bool {
        !matches!(self, ValueType::Word { .. })
    }
}

/// Where the hook reads the host's value of a key (the probe's facts), which its findings show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The highest CUDA the loaded driver supports: its version (`/sys/module/nvidia/version`,
    /// `/proc/driver/nvidia/version`, or a WSL2 or Jetson host's own record) looked up in
    /// recorded `nvidia-smi` facts, else the knowledge base.
    HostCuda,
    /// The loaded driver's version (`/sys/module/nvidia/version`, `/proc/driver/nvidia/version`).
    Driver,
    /// Each selected GPU's model: its PCI device id or Tegra system-on-chip, and the knowledge
    /// base's row of it (or recorded `nvidia-smi` facts).
    GpuModel,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    KernelRelease,
    /// The loaded kernel modules (`/proc/modules`).
    Modules,
    /// The devices the container gets (`NVIDIA_VISIBLE_DEVICES`, device nodes, CDI).
    Selection,
    /// The machine (`/proc/sys/kernel/arch`).
    Machine,
    /// The markers of the kind of host (`/dev/dxg`, `/usr/lib/wsl/lib`, `/etc/nv_tegra_release`,
    /// a Tegra system-on-chip); a host without them is `linux`.
    Platform,
}

/// How `stackhook labels` publishes a key's host value as node labels (the names of
/// [`crate::labels`]), which `stackbuild affinity` selects on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeLabels {
    /// The version as an integer code ([`crate::labels::version_code`]) in one label, compared
    /// with `Gt` and `Lt`.
    VersionCode(&'static str),
    /// The compute capabilities of all the node's GPUs as the codes
    /// ([`crate::labels::compute_code`]) of the lowest and of the highest: a per-GPU factor must
    /// hold on each.
    ComputeCodes {
        /// The lowest's code.
        min: &'static str,
        /// The highest's code.
        max: &'static str,
    },
    /// The kernel release, sanitized to a label value and flagged when that changed it, and the
    /// [`crate::labels::kernel_code`] of its first three numbers.
    KernelRelease {
        /// The release.
        release: &'static str,
        /// `true` when `release` differs from the real one.
        sanitized: &'static str,
        /// The code.
        code: &'static str,
    },
    /// The word, lowercase, in one label (`In`, `NotIn`).
    Word {
        /// The label.
        label: &'static str,
        /// A label the kubelet sets to the same fact in its own words
        /// ([`crate::labels::kubernetes_arch`]), which `=` requires too.
        kubelet: Option<&'static str>,
    },
    /// A `true` flag per loaded module, `prefix` + its name ([`crate::labels::module_label`]),
    /// for the modules `names` only.
    ModuleFlags {
        /// The flags' prefix.
        prefix: &'static str,
        /// The modules that get a flag.
        names: &'static [&'static str],
    },
    /// The count in one label, compared with `Gt` and `Lt`.
    Count(&'static str),
}

impl NodeLabels {
    /// The labels a selector on a factor of the key reads; `word` names the module of a module
    /// flag (`None`: the flags of all [`NodeLabels::ModuleFlags::names`]).
    pub fn names(self, word: Option<&str>) -> Vec<String> {
        let own = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        match self {
            NodeLabels::VersionCode(label) | NodeLabels::Count(label) => own(&[label]),
            NodeLabels::ComputeCodes { min, max } => own(&[min, max]),
            NodeLabels::KernelRelease { release, sanitized, code } => own(&[release, sanitized, code]),
            NodeLabels::Word { label, kubelet } => {
                [Some(label), kubelet].into_iter().flatten().map(str::to_owned).collect()
            }
            NodeLabels::ModuleFlags { prefix, names } => match word {
                Some(w) => vec![format!("{prefix}{w}")],
                None => names.iter().map(|n| format!("{prefix}{n}")).collect(),
            },
        }
    }
}

/// The attribute of a device in NVIDIA's DRA driver (`gpu.nvidia.com`) that a key compares, as
/// `stackbuild claim` writes its CEL selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAttribute {
    /// A version attribute, compared with `compareTo(semver('X.Y.Z'))`.
    Version(&'static str),
    /// A string attribute, compared lowercased (`lowerAscii()`) with the key's word.
    Word(&'static str),
    /// No attribute: the key counts the devices, which the request's count decides.
    Count,
    /// No attribute: the key is a fact of the node, not of a device; the hook checks it at
    /// container start, and `stackbuild affinity` places the pod by node labels.
    Node,
}

impl DeviceAttribute {
    /// The attribute's name (`cudaDriverVersion`), if the key has one.
    pub fn name(self) -> Option<&'static str> {
        match self {
            DeviceAttribute::Version(name) | DeviceAttribute::Word(name) => Some(name),
            DeviceAttribute::Count | DeviceAttribute::Node => None,
        }
    }
}

/// Whether a recipe's `[host]` table states a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecipeRule {
    /// These `[host]` rules do (`kernel_deny`).
    Stated(&'static [&'static str]),
    /// No rule does: why.
    Unstated(&'static str),
}

impl RecipeRule {
    /// The rules, none for [`RecipeRule::Unstated`].
    pub fn rules(self) -> &'static [&'static str] {
        match self {
            RecipeRule::Stated(rules) => rules,
            RecipeRule::Unstated(_) => &[],
        }
    }
}

/// The facts of every key, one row each, in the order of [`Key`] ([`Key::spec`] reads them).
pub static KEYS: [KeySpec; Key::ALL.len()] = TABLE;

const TABLE: [KeySpec; Key::ALL.len()] = [
    KeySpec {
        key: Key::Cuda,
        name: "cuda",
        value: ValueType::CudaVersion,
        example: "12.4",
        nvidia: true,
        per_gpu: false,
        evidence: Evidence::HostCuda,
        labels: NodeLabels::VersionCode(l::CUDA_MAX_CODE),
        device: DeviceAttribute::Version("cudaDriverVersion"),
        recipe: RecipeRule::Unstated(
            "the stack's CUDA libraries decide it: the builder derives `cuda>=` from the CUDA runtime wheel",
        ),
        variable: Some("NVIDIA_REQUIRE_CUDA"),
    },
    KeySpec {
        key: Key::Driver,
        name: "driver",
        value: ValueType::DriverVersion,
        example: "535.104.05",
        nvidia: true,
        per_gpu: false,
        evidence: Evidence::Driver,
        labels: NodeLabels::VersionCode(l::DRIVER_CODE),
        device: DeviceAttribute::Version("driverVersion"),
        recipe: RecipeRule::Stated(&["driver"]),
        variable: Some("STACKBUILD_REQUIRE_DRIVER"),
    },
    KeySpec {
        key: Key::Arch,
        name: "arch",
        value: ValueType::ComputeCapability,
        example: "8.0",
        nvidia: true,
        per_gpu: true,
        evidence: Evidence::GpuModel,
        labels: NodeLabels::ComputeCodes { min: l::GPU_COMPUTE_MIN_CODE, max: l::GPU_COMPUTE_MAX_CODE },
        device: DeviceAttribute::Version("cudaComputeCapability"),
        recipe: RecipeRule::Stated(&["arch"]),
        variable: Some("STACKBUILD_REQUIRE_ARCH"),
    },
    KeySpec {
        key: Key::Brand,
        name: "brand",
        value: ValueType::Word { one_of: &[] },
        example: "tesla",
        nvidia: true,
        per_gpu: true,
        evidence: Evidence::GpuModel,
        labels: NodeLabels::Word { label: l::GPU_BRAND, kubelet: None },
        device: DeviceAttribute::Word("brand"),
        recipe: RecipeRule::Unstated(
            "brands appear in the forward-compatibility terms of NVIDIA's own images; a stack needs none",
        ),
        variable: None,
    },
    KeySpec {
        key: Key::Kernel,
        name: "kernel",
        value: ValueType::KernelRelease,
        example: "5.15.0-105-generic",
        nvidia: false,
        per_gpu: false,
        evidence: Evidence::KernelRelease,
        labels: NodeLabels::KernelRelease {
            release: l::KERNEL_RELEASE,
            sanitized: l::KERNEL_RELEASE_SANITIZED,
            code: l::KERNEL_CODE,
        },
        device: DeviceAttribute::Node,
        recipe: RecipeRule::Stated(&["kernel_deny"]),
        variable: Some("STACKBUILD_REQUIRE_KERNEL"),
    },
    KeySpec {
        key: Key::Module,
        name: "module",
        value: ValueType::Word { one_of: &[] },
        example: "nvidia_uvm",
        nvidia: false,
        per_gpu: false,
        evidence: Evidence::Modules,
        labels: NodeLabels::ModuleFlags { prefix: l::MODULE_PREFIX, names: &l::LABELED_MODULES },
        device: DeviceAttribute::Node,
        recipe: RecipeRule::Stated(&["modules", "modules_deny"]),
        variable: Some("STACKBUILD_REQUIRE_MODULES"),
    },
    KeySpec {
        key: Key::Gpus,
        name: "gpus",
        value: ValueType::Count,
        example: "1",
        nvidia: false,
        per_gpu: false,
        evidence: Evidence::Selection,
        labels: NodeLabels::Count(l::GPU_COUNT),
        device: DeviceAttribute::Count,
        recipe: RecipeRule::Stated(&["gpus"]),
        variable: Some("STACKBUILD_REQUIRE_GPUS"),
    },
    KeySpec {
        key: Key::Machine,
        name: "machine",
        value: ValueType::Word { one_of: &[] },
        example: "x86_64",
        nvidia: false,
        per_gpu: false,
        evidence: Evidence::Machine,
        labels: NodeLabels::Word { label: l::MACHINE, kubelet: Some(l::KUBERNETES_ARCH) },
        device: DeviceAttribute::Node,
        recipe: RecipeRule::Unstated(
            "the image's platforms (`[image] platforms`) decide the machine its programs run on",
        ),
        variable: None,
    },
    KeySpec {
        key: Key::Platform,
        name: "platform",
        value: ValueType::Word { one_of: &PLATFORMS },
        example: "linux",
        nvidia: false,
        per_gpu: false,
        evidence: Evidence::Platform,
        labels: NodeLabels::Word { label: l::PLATFORM, kubelet: None },
        device: DeviceAttribute::Node,
        recipe: RecipeRule::Stated(&["platform"]),
        variable: Some("STACKBUILD_REQUIRE_PLATFORM"),
    },
];

// One row per key, in the order of `Key`, so that `Key::spec` is an index; a key that a `[host]`
// rule states has a variable for the builder to write it in.
const _: () = {
    assert!(TABLE.len() == Key::ALL.len());
    let mut i = 0;
    while i < TABLE.len() {
        assert!(TABLE[i].key as usize == i, "KEYS lists one row per key, in the order of Key");
        if let RecipeRule::Stated(_) = TABLE[i].recipe {
            assert!(TABLE[i].variable.is_some(), "a key that a [host] rule states has a variable");
        }
        i += 1;
    }
};

impl Key {
    /// The key's row of [`KEYS`].
    pub fn spec(self) -> &'static KeySpec {
        &KEYS[self as usize]
    }

    /// The key written `name` (case-insensitively, as NVIDIA's evaluator compares keys).
    pub fn from_name(name: &str) -> Option<Key> {
        KEYS.iter().find(|s| s.name.eq_ignore_ascii_case(name)).map(|s| s.key)
    }

    /// The key as written in expressions.
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// Whether libnvidia-container's evaluator has a rule for the key ([`KeySpec::nvidia`]).
    pub fn nvidia(self) -> bool {
        self.spec().nvidia
    }

    /// Whether the key is evaluated once per selected GPU ([`KeySpec::per_gpu`]).
    pub fn per_gpu(self) -> bool {
        self.spec().per_gpu
    }
}

/// `a, b or c`.
pub(super) fn or_list(words: impl IntoIterator<Item = &'static str>) -> String {
    let words: Vec<&str> = words.into_iter().collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}
