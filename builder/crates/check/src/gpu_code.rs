//! What a build's GPU code runs on: its cubins and PTX by compute capability ([`GpuCode`]), and
//! the exact set of compute capabilities that admits, as the terms of an `NVIDIA_REQUIRE_*`
//! expression ([`ArchSet`]). Read from fat binaries by `fatbin`, from knowledge-base rows
//! here; `derive` turns it into the image's architecture requirement.

use std::collections::BTreeSet;
use std::fmt;

use stackcontract::kb;
use stackcontract::require::{Expr, Factor, Key, Op, Term};
use stackcontract::version::ComputeCapability;

use stackbuild_common::Platform;

/// The compute capabilities of NVIDIA's Tegra chips' integrated GPUs: TX1 5.3, TX2 6.2, Xavier
/// 7.2, Orin 8.7, Thor 10.1 (CUDA 12.x; 11.0 from CUDA 13.0) (developer.nvidia.com/cuda-gpus,
/// "Jetson"). A cubin of another compute capability does not run on them: "an `sm_70` GPU binary
/// will not run on Xavier's integrated GPU" (CUDA C++ Programming Guide, binary compatibility,
/// which guarantees X.y -> X.z only "for a given major revision" of discrete GPUs).
pub(crate) const TEGRA: [ComputeCapability; 6] = [
    ComputeCapability::new(5, 3),
    ComputeCapability::new(6, 2),
    ComputeCapability::new(7, 2),
    ComputeCapability::new(8, 7),
    ComputeCapability::new(10, 1),
    ComputeCapability::new(11, 0),
];

/// Whether `cc` is the integrated GPU of a Tegra chip ([`TEGRA`]).
pub(crate) fn is_tegra(cc: ComputeCapability) -> bool {
    TEGRA.contains(&cc)
}

/// The GPU code a torch build carries: cubins (machine code) and PTX, by compute capability.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuCode {
    /// Compute capabilities with a cubin.
    pub cubins: BTreeSet<ComputeCapability>,
    /// Compute capabilities with PTX.
    pub ptx: BTreeSet<ComputeCapability>,
    /// Where this comes from, in words (the fat binaries read, or the knowledge-base row).
    pub from: String,
}

impl GpuCode {
    /// The code of a knowledge-base build for `platform`: its arch list, with PTX of the highest
    /// entry when the row says so; `None` where the row has no list yet (a generated row of a
    /// build whose fat binaries nobody read: the build reads them, [`crate::fatbin`]).
    pub fn from_variant(
        release: &kb::TorchRelease,
        variant: &kb::TorchVariant,
        platform: Platform,
    ) -> Option<Self> {
        let arch = match platform {
            Platform::LinuxArm64 if !variant.aarch64_arch.is_empty() => &variant.aarch64_arch,
            _ => &variant.arch,
        };
        if arch.is_empty() {
            return None;
        }
        let cubins: BTreeSet<_> = arch.iter().copied().collect();
        let ptx = if variant.ptx { arch.last().copied().into_iter().collect() } else { BTreeSet::new() };
        let from = format!("the knowledge base's row of torch {}+{}", release.version, variant.tag);
        Some(Self { cubins, ptx, from })
    }

    /// Whether one of the cubins runs on a GPU of compute capability `cc`: its own, or on a
    /// discrete GPU one of the same major and a lower or equal minor.
    pub fn cubin_runs_on(&self, cc: ComputeCapability) -> bool {
        self.cubins.contains(&cc)
            || (!is_tegra(cc) && self.cubins.iter().any(|c| c.major == cc.major && c.minor <= cc.minor))
    }

    /// Whether the driver can JIT-compile one of the PTX entries for `cc` (PTX for X.y: any
    /// compute capability >= X.y).
    pub fn ptx_runs_on(&self, cc: ComputeCapability) -> bool {
        self.ptx.iter().any(|p| *p <= cc)
    }

    /// Whether the build has code that runs on `cc`.
    pub fn runs_on(&self, cc: ComputeCapability) -> bool {
        self.cubin_runs_on(cc) || self.ptx_runs_on(cc)
    }

    /// The exact set of compute capabilities the build runs on (cubins and PTX).
    pub fn arch_set(&self) -> ArchSet {
        ArchSet::build(&self.cubins, &self.ptx, |cc| self.runs_on(cc))
    }

    /// The compute capabilities its cubins run on, without the JIT.
    pub fn cubin_set(&self) -> ArchSet {
        ArchSet::build(&self.cubins, &BTreeSet::new(), |cc| self.cubin_runs_on(cc))
    }

    /// `cubins for 7.5 8.0 ...; PTX for 12.0` in words.
    pub fn describe(&self) -> String {
        let list =
            |s: &BTreeSet<ComputeCapability>| s.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
        match (self.cubins.is_empty(), self.ptx.is_empty()) {
            (false, true) => format!("cubins for {} and no PTX", list(&self.cubins)),
            (true, false) => format!("no cubins and PTX for {}", list(&self.ptx)),
            (true, true) => "no GPU code".into(),
            (false, false) => format!("cubins for {} and PTX for {}", list(&self.cubins), list(&self.ptx)),
        }
    }
}

/// One term of an [`ArchSet`]: `low <= cc < below`, except the listed Tegra compute
/// capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchTerm {
    /// The lowest compute capability (inclusive).
    pub low: ComputeCapability,
    /// The first compute capability above the term (exclusive); `None`: no upper bound (PTX).
    pub below: Option<ComputeCapability>,
    /// Compute capabilities inside the range that are not admitted (Tegra chips without their
    /// own cubin).
    pub except: Vec<ComputeCapability>,
}

impl ArchTerm {
    /// The range as factors that must all hold: `arch>=7.0,arch<10.0,arch!=7.2`.
    pub fn term(&self) -> Term {
        let mut factors = vec![Factor::new(Key::Arch, Op::Ge, self.low)];
        factors.extend(self.below.map(|below| Factor::new(Key::Arch, Op::Lt, below)));
        factors.extend(self.except.iter().map(|cc| Factor::new(Key::Arch, Op::Ne, *cc)));
        Term(factors)
    }
}

impl fmt::Display for ArchTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.term().fmt(f)
    }
}

/// A set of compute capabilities as the terms of an `NVIDIA_REQUIRE_*` expression (alternatives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchSet(pub Vec<ArchTerm>);

impl ArchSet {
    /// The union of the ranges a cubin (its major, from its minor) and a PTX entry (from it
    /// upward) reach, merged where they touch, with the Tegra compute capabilities inside that
    /// `admits` refuses written as exceptions.
    fn build(
        cubins: &BTreeSet<ComputeCapability>,
        ptx: &BTreeSet<ComputeCapability>,
        admits: impl Fn(ComputeCapability) -> bool,
    ) -> Self {
        let mut ranges: Vec<(ComputeCapability, Option<ComputeCapability>)> = cubins
            .iter()
            .map(|c| (*c, Some(ComputeCapability::new(c.major + 1, 0))))
            .chain(ptx.iter().map(|p| (*p, None)))
            .collect();
        ranges.sort();
        let mut merged: Vec<(ComputeCapability, Option<ComputeCapability>)> = Vec::new();
        for (low, below) in ranges {
            match merged.last_mut() {
                // Overlapping or adjacent (`below` is exclusive): one range.
                Some((_, last)) if last.is_none_or(|end| low <= end) => {
                    *last = match (*last, below) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                }
                _ => merged.push((low, below)),
            }
        }
        let terms = merged
            .into_iter()
            .map(|(low, below)| {
                let except = TEGRA
                    .iter()
                    .copied()
                    .filter(|t| *t >= low && below.is_none_or(|b| *t < b) && !admits(*t))
                    .collect();
                ArchTerm { low, below, except }
            })
            .collect();
        Self(terms)
    }

    /// Whether no compute capability is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The set in words: `7.0 <= cc < 10.0 except 7.2, 8.7 (Tegra); cc >= 12.0`.
    pub fn describe(&self) -> String {
        self.0
            .iter()
            .map(|t| {
                let range = match t.below {
                    Some(b) => format!("{} <= cc < {b}", t.low),
                    None => format!("cc >= {}", t.low),
                };
                if t.except.is_empty() {
                    range
                } else {
                    let list = t.except.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                    format!("{range} except {list} (Tegra)")
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The set as an expression: one alternative per range.
    pub fn expr(&self) -> Expr {
        Expr(self.0.iter().map(ArchTerm::term).collect())
    }
}

impl fmt::Display for ArchSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.expr().fmt(f)
    }
}
