//! Whether requirements hold on a host: each factor, term and expression [`Truth::Holds`],
//! [`Truth::Fails`] or is [`Truth::Unknown`] (what the host cannot tell and the knowledge base does
//! not know), per selected GPU for `arch` and `brand`; an `NVIDIA_REQUIRE_*` value that NVIDIA's
//! evaluator would not read as written is walked in libnvidia-container's order
//! (`src/cli/dsl.c`, `dsl_evaluate`).

use std::collections::BTreeSet;
use std::fmt;

use super::render::render_slots;
use super::{
    Expr, Factor, FactorFailure, Invalid, Key, Op, Requirement, RequirementSet, Slot, Term, Unsatisfied,
    Unsupported, Unverifiable, Value,
};
use crate::version::{ComputeCapability, CudaVersion, DriverVersion, KernelRelease};

/// Whether a factor, term or expression holds on a host. `Unknown`: the host cannot tell and the
/// knowledge base does not know (a GPU model without a row, a driver branch newer than the
/// tables); such a requirement is unverifiable, which the hook reports as a warning and does not
/// block on. Only what is known to be wrong fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Truth {
    /// Known to hold.
    Holds,
    /// Known not to hold.
    Fails,
    /// Cannot be told.
    Unknown,
}

impl Truth {
    fn of(holds: bool) -> Self {
        if holds {
            Truth::Holds
        } else {
            Truth::Fails
        }
    }

    /// AND: any failure fails, else any unknown is unknown.
    fn and(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::Fails, _) | (_, Truth::Fails) => Truth::Fails,
            (Truth::Unknown, _) | (_, Truth::Unknown) => Truth::Unknown,
            _ => Truth::Holds,
        }
    }

    /// OR: any hold holds, else any unknown is unknown.
    fn or(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::Holds, _) | (_, Truth::Holds) => Truth::Holds,
            (Truth::Unknown, _) | (_, Truth::Unknown) => Truth::Unknown,
            _ => Truth::Fails,
        }
    }
}

/// How far [`HostFacts::cuda`] is known.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CudaBound {
    /// `cuda` is the driver's value (`None`: no driver, so no CUDA).
    #[default]
    Exact,
    /// The driver's value is not known exactly: it is at least `cuda` (when set) and below
    /// `below` (when set). A comparison that the whole range decides is decided; any other is
    /// unknown.
    Range {
        /// Exclusive upper bound.
        below: Option<CudaVersion>,
    },
}

/// What the host is, as far as requirements can see.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostFacts {
    /// Highest CUDA version the loaded driver supports (a lower bound when `cuda_bound` is a range).
    pub cuda: Option<CudaVersion>,
    /// Whether `cuda` is exact or bounds a value the host and the tables cannot tell.
    pub cuda_bound: CudaBound,
    /// Loaded driver version.
    pub driver: Option<DriverVersion>,
    /// Kernel release.
    pub kernel: Option<KernelRelease>,
    /// Machine architecture (`x86_64`, `aarch64`).
    pub machine: Option<String>,
    /// Kind of host (`linux`, `wsl2`, `jetson`), lowercase.
    pub platform: Option<String>,
    /// Loaded kernel modules.
    pub modules: BTreeSet<String>,
    /// The GPUs the container gets, in selection order.
    pub gpus: Vec<GpuFacts>,
    /// The container gets the driver but no GPU device (`NVIDIA_VISIBLE_DEVICES=none`): `cuda`
    /// and `driver` are checked, and `arch` and `brand` hold for want of a device to compare, as
    /// libnvidia-container evaluates them ("No device is visible, assume the arch is ok",
    /// `src/cli/configure.c`).
    pub no_devices: bool,
}

/// One selected GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GpuFacts {
    /// Compute capability, when the model is known (`None`: unknown, so `arch` factors are
    /// unverifiable on this GPU, never failed).
    pub arch: Option<ComputeCapability>,
    /// Brand as NVML names it, lowercase (`None`: unknown).
    pub brand: Option<String>,
}

/// Whether `h op want` holds for every host value `h` with `low <= h < below` (an absent bound is
/// open): `Holds` if for all, `Fails` if for none, else `Unknown`.
fn range_truth<T: Ord>(op: Op, low: Option<&T>, below: Option<&T>, want: &T) -> Truth {
    use std::cmp::Ordering::Greater;
    let below_le_want = below.is_some_and(|b| b <= want);
    let (all, none) = match op {
        Op::Ge | Op::Gt => (low.is_some_and(|l| op.holds(l.cmp(want))), below_le_want),
        Op::Lt | Op::Le => (below_le_want, low.is_some_and(|l| !op.holds(l.cmp(want)))),
        Op::Eq | Op::Ne => {
            let outside = low.is_some_and(|l| l.cmp(want) == Greater) || below_le_want;
            if op == Op::Eq {
                (false, outside)
            } else {
                (outside, false)
            }
        }
    };
    if all {
        Truth::Holds
    } else if none {
        Truth::Fails
    } else {
        Truth::Unknown
    }
}

impl Factor {
    /// Whether the factor is known to hold on `host` (for GPU `gpu` when the key is per-GPU).
    pub fn holds(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> bool {
        self.truth(host, gpu) == Truth::Holds
    }

    /// Whether the factor holds, fails or cannot be told on `host`. A GPU whose compute
    /// capability or brand is unknown makes `arch` and `brand` unknown (with no GPU at all they
    /// fail, except for a container that gets the driver without devices, where they hold as
    /// libnvidia-container's per-device loop never runs); a CUDA version known only as a range
    /// makes `cuda` unknown where the range does not decide it.
    pub fn truth(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> Truth {
        if self.key.per_gpu() && gpu.is_none() && host.no_devices {
            return Truth::Holds;
        }
        // Where the host's value may be unknown rather than absent; a new key decides here.
        let unknown = match self.key {
            Key::Cuda => match (&self.value, &host.cuda_bound) {
                (Value::Cuda(want), CudaBound::Range { below }) => {
                    return range_truth(self.op, host.cuda.as_ref(), below.as_ref(), want)
                }
                _ => false,
            },
            Key::Arch => gpu.is_some_and(|g| g.arch.is_none()),
            Key::Brand => gpu.is_some_and(|g| g.brand.is_none()),
            Key::Driver | Key::Kernel | Key::Module | Key::Gpus | Key::Machine | Key::Platform => false,
        };
        if unknown {
            Truth::Unknown
        } else {
            Truth::of(self.known_holds(host, gpu))
        }
    }

    /// [`Factor::holds`] for the keys whose host value is either known or absent (absent fails).
    fn known_holds(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> bool {
        use std::cmp::Ordering::{Equal, Less};
        /// The host's value against the wanted one, where the host has one.
        fn cmp<T: Ord>(host: Option<&T>, want: &T) -> Option<std::cmp::Ordering> {
            host.map(|h| h.cmp(want))
        }
        /// A name against the wanted one, case-insensitively: equal or not.
        fn name(host: Option<&str>, want: &str) -> Option<std::cmp::Ordering> {
            host.map(|h| h.to_ascii_lowercase().as_str().cmp(want).min_eq())
        }
        let gpu_arch = gpu.and_then(|g| g.arch.as_ref());
        let gpu_brand = gpu.and_then(|g| g.brand.as_deref());
        let count = u32::try_from(host.gpus.len()).unwrap_or(u32::MAX);
        // What each key compares on the host (a value of another type never holds): a new key
        // decides here.
        let ordering = match (self.key, &self.value) {
            (Key::Cuda, Value::Cuda(want)) => cmp(host.cuda.as_ref(), want),
            (Key::Driver, Value::Driver(want)) => cmp(host.driver.as_ref(), want),
            (Key::Kernel, Value::Kernel(want)) => cmp(host.kernel.as_ref(), want),
            (Key::Arch, Value::Arch(want)) => cmp(gpu_arch, want),
            (Key::Gpus, Value::Count(want)) => cmp(Some(&count), want),
            (Key::Module, Value::Name(want)) => Some(if host.modules.contains(want) { Equal } else { Less }),
            (Key::Brand, Value::Name(want)) => name(gpu_brand, want),
            (Key::Platform, Value::Name(want)) => name(host.platform.as_deref(), want),
            (Key::Machine, Value::Name(want)) => name(host.machine.as_deref(), want),
            (
                Key::Cuda
                | Key::Driver
                | Key::Kernel
                | Key::Arch
                | Key::Gpus
                | Key::Module
                | Key::Brand
                | Key::Platform
                | Key::Machine,
                _,
            ) => None,
        };
        ordering.is_some_and(|o| self.op.holds(o))
    }

    /// The host's value for this factor's key, as a message shows it.
    pub fn host_value(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> String {
        fn or_unknown<T: fmt::Display>(v: Option<&T>, what: &str) -> String {
            v.map_or_else(|| format!("no {what}"), ToString::to_string)
        }
        match self.key {
            Key::Cuda => match (&host.cuda_bound, &host.cuda) {
                (CudaBound::Exact, cuda) => or_unknown(cuda.as_ref(), "CUDA (driver not loaded or unknown)"),
                (CudaBound::Range { below }, low) => match (low, below) {
                    (Some(l), Some(b)) => format!("at least {l} and below {b}"),
                    (Some(l), None) => format!("at least {l}"),
                    (None, Some(b)) => format!("below {b}"),
                    (None, None) => "an unknown CUDA version".to_owned(),
                },
            },
            Key::Driver => or_unknown(host.driver.as_ref(), "driver loaded"),
            Key::Kernel => or_unknown(host.kernel.as_ref(), "kernel release"),
            Key::Machine => or_unknown(host.machine.as_ref(), "machine"),
            Key::Platform => or_unknown(host.platform.as_ref(), "known platform"),
            Key::Arch => or_unknown(gpu.and_then(|g| g.arch.as_ref()), "known compute capability"),
            Key::Brand => or_unknown(gpu.and_then(|g| g.brand.as_ref()), "known brand"),
            Key::Gpus => format!("{} GPU(s) selected", host.gpus.len()),
            Key::Module => {
                let name = match &self.value {
                    Value::Name(n) => n.as_str(),
                    _ => "",
                };
                if host.modules.contains(name) {
                    format!("{name} loaded")
                } else {
                    format!("{name} not loaded")
                }
            }
        }
    }
}

/// Orderings only distinguish equal from not equal for names.
trait MinEq {
    fn min_eq(self) -> Self;
}
impl MinEq for std::cmp::Ordering {
    fn min_eq(self) -> Self {
        if self.is_eq() {
            self
        } else {
            std::cmp::Ordering::Less
        }
    }
}

impl Term {
    /// The first factor that is known to fail, or `None` when none does.
    pub fn first_failure(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> Option<&Factor> {
        self.0.iter().find(|f| f.truth(host, gpu) == Truth::Fails)
    }

    /// The term's truth: its factors joined by AND.
    pub fn truth(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> Truth {
        self.0.iter().fold(Truth::Holds, |acc, f| acc.and(f.truth(host, gpu)))
    }

    /// The factors whose truth is unknown.
    fn unknown_factors<'a>(
        &'a self,
        host: &'a HostFacts,
        gpu: Option<&'a GpuFacts>,
    ) -> impl Iterator<Item = &'a Factor> {
        self.0.iter().filter(move |f| f.truth(host, gpu) == Truth::Unknown)
    }
}

impl Expr {
    /// The expression's truth: its terms joined by OR.
    pub fn truth(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> Truth {
        self.0.iter().fold(Truth::Fails, |acc, t| acc.or(t.truth(host, gpu)))
    }
}

/// The outcomes `dsl_evaluate` may reach on a host, where some factors' truth is unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct DslOutcomes {
    met: bool,
    unmet: bool,
    invalid: bool,
}

/// What libnvidia-container's `dsl_evaluate` (`src/cli/dsl.c`) makes of a value, walked in its
/// order: alternatives left to right, the first whose factors all hold ends the evaluation (met);
/// inside one, the first factor that fails ends it (the next alternative is tried); a factor
/// without a rule ends everything ("invalid expression"); after the last alternative, unmet. An
/// alternative that is nothing but commas ends the evaluation with the last result: met when it
/// comes before any factor was evaluated, unmet after. A factor whose truth is unknown may go
/// either way, so several outcomes may be possible. Also returns the first unsupported factor
/// that evaluation may reach.
fn dsl_walk<'a>(
    order: &'a [Vec<Slot>],
    host: &HostFacts,
    gpu: Option<&GpuFacts>,
) -> (DslOutcomes, Option<&'a Unsupported>) {
    let mut out = DslOutcomes::default();
    let mut reached = None;
    // Whether some host value reaches this alternative, and whether a factor was evaluated.
    let mut continuing = true;
    let mut evaluated = false;
    for term in order {
        if !continuing {
            break;
        }
        if term.is_empty() {
            if evaluated {
                out.unmet = true;
            } else {
                out.met = true;
            }
            return (out, reached);
        }
        evaluated = true;
        let (mut alive, mut may_fail) = (true, false);
        for slot in term {
            match slot {
                Slot::Factor(f) => match f.truth(host, gpu) {
                    Truth::Holds => {}
                    Truth::Fails => {
                        may_fail = true;
                        alive = false;
                        break;
                    }
                    Truth::Unknown => may_fail = true,
                },
                Slot::Unsupported(u) => {
                    out.invalid = true;
                    reached.get_or_insert(u);
                    alive = false;
                    break;
                }
            }
        }
        out.met |= alive;
        continuing = may_fail;
    }
    out.unmet |= continuing;
    (out, reached)
}

/// At most this many alternatives in [`Requirement::nvidia_expr`]: each unknown key behind known
/// factors multiplies them, and no real value comes near.
const NVIDIA_EXPR_TERMS: usize = 256;

impl Requirement {
    /// The devices on which NVIDIA's evaluator meets this value, as an OR of terms of known
    /// keys: [`Requirement::expr`] when the evaluator reads it as written; with
    /// [`Requirement::nvidia_order`], the alternatives met before evaluation reaches a factor
    /// it has no rule for (where it stops with "invalid expression") or an alternative of
    /// nothing but commas (where it stops with the failure before it). An alternative `i` counts
    /// where every earlier alternative with an unknown key failed before reaching it: one of the
    /// factors ahead of that key fails. No term at all: NVIDIA refuses it everywhere.
    pub fn nvidia_expr(&self) -> Expr {
        let Some(order) = &self.nvidia_order else { return self.expr.clone() };
        let mut out: Vec<Term> = Vec::new();
        // What must hold to reach the current alternative, as an OR of conjunctions.
        let mut reach: Vec<Vec<Factor>> = vec![Vec::new()];
        for alternative in order {
            if alternative.is_empty() {
                break;
            }
            match alternative.iter().position(|s| matches!(s, Slot::Unsupported(_))) {
                None => {
                    let factors: Vec<Factor> = alternative
                        .iter()
                        .filter_map(|s| match s {
                            Slot::Factor(f) => Some(f.clone()),
                            Slot::Unsupported(_) => None,
                        })
                        .collect();
                    for r in &reach {
                        out.push(Term(r.iter().cloned().chain(factors.iter().cloned()).collect()));
                    }
                }
                Some(at) => {
                    let ahead: Vec<Factor> = alternative[..at]
                        .iter()
                        .filter_map(|s| match s {
                            Slot::Factor(f) => Some(f.negated()),
                            Slot::Unsupported(_) => None,
                        })
                        .collect();
                    reach = reach
                        .iter()
                        .flat_map(|r| {
                            ahead.iter().map(move |n| r.iter().cloned().chain([n.clone()]).collect())
                        })
                        .take(NVIDIA_EXPR_TERMS)
                        .collect();
                }
            }
            if reach.is_empty() || out.len() >= NVIDIA_EXPR_TERMS {
                break;
            }
        }
        out.truncate(NVIDIA_EXPR_TERMS);
        Expr(out)
    }
}

/// What [`RequirementSet::assess`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assessment {
    /// Requirements known not to hold.
    pub failures: Vec<Unsatisfied>,
    /// Requirements that cannot be told.
    pub unverifiable: Vec<Unverifiable>,
    /// Requirements NVIDIA's evaluator refuses as invalid expressions here (one per variable).
    pub invalid: Vec<Invalid>,
}

/// The result of checking a set against a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No GPU is selected: as with NVIDIA's toolkit, requirements do not apply.
    NotApplicable,
    /// Every requirement holds.
    Satisfied,
    /// At least one requirement fails.
    Unsatisfied(Vec<Unsatisfied>),
    /// None fails, but NVIDIA's evaluator refuses at least one as an invalid expression.
    Invalid(Vec<Invalid>),
}

impl RequirementSet {
    /// Evaluates every requirement; per-GPU requirements once for each selected GPU (once with
    /// no GPU when none is selected, so that their GPU factors fail). Returns the requirements
    /// known to fail; see [`RequirementSet::assess`] for the unverifiable and the invalid ones.
    pub fn evaluate(&self, host: &HostFacts) -> Vec<Unsatisfied> {
        self.assess(host).failures
    }

    /// Evaluates every requirement as [`RequirementSet::evaluate`] does, and also lists those
    /// whose truth is unknown: no term holds, and at least one term does not fail.
    pub fn assess(&self, host: &HostFacts) -> Assessment {
        let mut failures = Vec::new();
        let mut unverifiable = Vec::new();
        let mut invalid = Vec::new();
        for req in &self.entries {
            let gpus: Vec<Option<usize>> = if req.expr.per_gpu() && !host.gpus.is_empty() {
                (0..host.gpus.len()).map(Some).collect()
            } else {
                vec![None]
            };
            for gpu in gpus {
                let facts = gpu.and_then(|i| host.gpus.get(i));
                let gpu = if req.expr.per_gpu() { gpu } else { None };
                let failure = |f: &Factor| FactorFailure {
                    factor: f.to_string(),
                    key: f.key,
                    host: f.host_value(host, facts),
                };
                let (truth, may_be_invalid) = match &req.nvidia_order {
                    None => (req.expr.truth(host, facts), None),
                    Some(order) => match dsl_walk(order, host, facts) {
                        (DslOutcomes { met: false, unmet: false, invalid: true }, Some(u)) => {
                            invalid.push(Invalid {
                                source: req.source.clone(),
                                expr: render_slots(order),
                                gpu,
                                unsupported: u.clone(),
                            });
                            break; // NVIDIA's evaluator stops at the first error
                        }
                        (DslOutcomes { met: true, unmet: false, invalid: false }, _) => (Truth::Holds, None),
                        (DslOutcomes { met: false, unmet: true, invalid: false }, _) => (Truth::Fails, None),
                        (_, u) => (Truth::Unknown, u.cloned()),
                    },
                };
                match truth {
                    Truth::Holds => {}
                    Truth::Unknown => unverifiable.push(Unverifiable {
                        source: req.source.clone(),
                        expr: req.expr.to_string(),
                        gpu,
                        unknown: req
                            .expr
                            .0
                            .iter()
                            .filter(|t| t.truth(host, facts) == Truth::Unknown)
                            .flat_map(|t| t.unknown_factors(host, facts))
                            .map(failure)
                            .collect(),
                        may_be_invalid,
                    }),
                    Truth::Fails => failures.push(Unsatisfied {
                        source: req.source.clone(),
                        expr: req.expr.to_string(),
                        gpu,
                        alternatives: req
                            .expr
                            .0
                            .iter()
                            .filter_map(|t| t.first_failure(host, facts))
                            .map(failure)
                            .collect(),
                    }),
                }
            }
        }
        Assessment { failures, unverifiable, invalid }
    }

    /// Checks the set the way the hook does: nothing applies when no GPU is selected (unless the
    /// container gets the driver without devices, [`HostFacts::no_devices`]).
    pub fn check(&self, host: &HostFacts) -> Outcome {
        if host.gpus.is_empty() && !host.no_devices {
            return Outcome::NotApplicable;
        }
        let Assessment { failures, invalid, .. } = self.assess(host);
        if !failures.is_empty() {
            Outcome::Unsatisfied(failures)
        } else if !invalid.is_empty() {
            Outcome::Invalid(invalid)
        } else {
            Outcome::Satisfied
        }
    }

    /// For each requirement and selected GPU, the first term that holds, when it holds only
    /// through a term without a `cuda` factor while the expression does have a `cuda` term: the
    /// image then relies on forward compatibility (`cuda-compat`), which NVIDIA supports only on
    /// data-center GPUs and Jetson (CUDA compatibility guide, "Forward Compatibility").
    pub fn forward_compat_terms(&self, host: &HostFacts) -> Vec<(String, Option<usize>, String)> {
        let mut out = Vec::new();
        for req in &self.entries {
            if !req.expr.0.iter().any(|t| t.has(Key::Cuda)) {
                continue;
            }
            let gpus: Vec<Option<usize>> =
                if host.gpus.is_empty() { vec![None] } else { (0..host.gpus.len()).map(Some).collect() };
            for gpu in gpus {
                let facts = gpu.and_then(|i| host.gpus.get(i));
                let passing = req.expr.0.iter().find(|t| t.truth(host, facts) == Truth::Holds);
                if let Some(term) = passing {
                    if !term.has(Key::Cuda) {
                        out.push((req.source.clone(), gpu, term.to_string()));
                    }
                }
            }
        }
        out
    }
}
