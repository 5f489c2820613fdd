//! Requirement expressions: the `NVIDIA_REQUIRE_*` language, extended with our keys.
//!
//! Syntax (libnvidia-container `src/cli/dsl.c`): a value is a list of *terms* separated by
//! whitespace, any of which may hold (OR); a term is a list of *factors* separated by commas, all
//! of which must hold (AND); a factor is `key op value`. Separate variables must all hold
//! ([`RequirementSet`]).
//!
//! NVIDIA's keys: `cuda` (the highest CUDA the host driver supports), `driver`, `arch` (compute
//! capability) and `brand` (`=`/`!=` only). `arch` and `brand` are evaluated for each GPU the
//! container gets. In an `NVIDIA_REQUIRE_*` value any other key is an "invalid expression" where
//! NVIDIA's evaluator reaches it ([`Dialect::Nvidia`]). Ours, in our variables: `kernel` (kernel release), `module` (`module=nvidia_uvm` must be loaded,
//! `module!=nouveau` must not be), `gpus` (how many GPUs the container gets), `machine`
//! (`x86_64`, `aarch64`) and `platform` (the kind of host: `linux`, `wsl2` or `jetson`, as the
//! probe classifies it; `=`/`!=` only).
//!
//! The language's types are here: [`Expr`], [`Term`], [`Factor`], their operators and values,
//! the requirements an image carries ([`Requirement`], [`RequirementSet`]) and what a host makes
//! of them ([`Unsatisfied`], [`Unverifiable`], [`Invalid`]). The rest is in four parts:
//!
//! - `keys`: the keys ([`Key`]) and their facts, one row each ([`KEYS`], [`KeySpec`]): name,
//!   value type, NVIDIA's or ours, per GPU or not, the hook's evidence, the node labels, the DRA
//!   device attribute and how the builder writes it;
//! - `parse`: reading a value in either [`Dialect`], with the column of any error;
//! - `evaluate`: the truth of a requirement on a host ([`HostFacts`]), three-valued where the
//!   host cannot tell, and libnvidia-container's order of evaluation for `NVIDIA_REQUIRE_*`;
//! - `render`: how expressions and outcomes read as text (which [`Expr::parse`] reads back).

mod evaluate;
mod keys;
mod parse;
mod render;

pub use evaluate::{Assessment, CudaBound, GpuFacts, HostFacts, Outcome, Truth};
pub use keys::{DeviceAttribute, Evidence, Key, KeySpec, NodeLabels, RecipeRule, ValueType, KEYS, PLATFORMS};
pub use parse::{Dialect, RequireError, MAX_EXPRESSION_LEN};

use super::version::{ComputeCapability, CudaVersion, DriverVersion, KernelRelease};

/// Comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Op {
    /// `=` (also written `==`)
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    /// Whether a value that compares `ord` with the factor's value satisfies the operator.
    pub fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            Op::Eq => ord == Equal,
            Op::Ne => ord != Equal,
            Op::Lt => ord == Less,
            Op::Le => ord != Greater,
            Op::Gt => ord == Greater,
            Op::Ge => ord != Less,
        }
    }
}

/// The typed right-hand side of a factor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A CUDA version.
    Cuda(CudaVersion),
    /// A driver version.
    Driver(DriverVersion),
    /// A compute capability.
    Arch(ComputeCapability),
    /// A kernel release.
    Kernel(KernelRelease),
    /// A count.
    Count(u32),
    /// A name compared case-insensitively (brand, module, machine, platform); stored lowercase.
    Name(String),
}

/// One `key op value` comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factor {
    /// What is constrained.
    pub key: Key,
    /// How.
    pub op: Op,
    /// Against what.
    pub value: Value,
    /// The value as written.
    pub raw: String,
}

impl From<CudaVersion> for Value {
    fn from(v: CudaVersion) -> Self {
        Value::Cuda(v)
    }
}

impl From<DriverVersion> for Value {
    fn from(v: DriverVersion) -> Self {
        Value::Driver(v)
    }
}

impl From<ComputeCapability> for Value {
    fn from(v: ComputeCapability) -> Self {
        Value::Arch(v)
    }
}

impl From<KernelRelease> for Value {
    fn from(v: KernelRelease) -> Self {
        Value::Kernel(v)
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Count(n)
    }
}

impl Factor {
    /// A factor built from its parts, as the builder writes requirements: it renders as
    /// `key op value` (equality spelled `=`), which [`Expr::parse`] reads back. The value's type
    /// should be the key's own ([`Value::Driver`] for `driver`, ...); names go through
    /// [`Factor::name`].
    pub fn new(key: Key, op: Op, value: impl Into<Value>) -> Self {
        let value = value.into();
        let raw = value.to_string();
        Self { key, op, value, raw }
    }

    /// A factor on a name (`module`, `brand`, `machine`, `platform`), written as given and
    /// compared case-insensitively, as the parser stores it.
    pub fn name(key: Key, op: Op, name: &str) -> Self {
        Self { key, op, value: Value::Name(name.to_ascii_lowercase()), raw: name.to_owned() }
    }

    /// The factor that holds exactly where this one fails (`cuda>=12.4` -> `cuda<12.4`).
    #[must_use]
    pub fn negated(&self) -> Self {
        let op = match self.op {
            Op::Eq => Op::Ne,
            Op::Ne => Op::Eq,
            Op::Lt => Op::Ge,
            Op::Le => Op::Gt,
            Op::Gt => Op::Le,
            Op::Ge => Op::Lt,
        };
        Self { op, ..self.clone() }
    }
}

/// Factors that must all hold (AND).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term(pub Vec<Factor>);

impl Term {
    /// This term and `other`: the factors of both, in order.
    #[must_use]
    pub fn and(&self, other: &Term) -> Term {
        Term(self.0.iter().chain(&other.0).cloned().collect())
    }

    /// Whether any factor of this term uses `key`.
    pub fn has(&self, key: Key) -> bool {
        self.0.iter().any(|f| f.key == key)
    }

    /// Whether no value can satisfy this term: on some key, a lower bound above an upper bound
    /// (`arch>=7.0,arch<6.0`, what joining torch's architectures with an extension's 5.3 cubin
    /// gives).
    pub fn contradicts(&self) -> bool {
        use std::cmp::Ordering;
        let order = |a: &Value, b: &Value| match (a, b) {
            (Value::Cuda(x), Value::Cuda(y)) => Some(x.cmp(y)),
            (Value::Driver(x), Value::Driver(y)) => Some(x.cmp(y)),
            (Value::Arch(x), Value::Arch(y)) => Some(x.cmp(y)),
            (Value::Count(x), Value::Count(y)) => Some(x.cmp(y)),
            _ => None,
        };
        // (value, inclusive) of each bound.
        let lows = |key: Key| {
            self.0.iter().filter(move |f| f.key == key).filter_map(|f| match f.op {
                Op::Ge | Op::Eq => Some((&f.value, true)),
                Op::Gt => Some((&f.value, false)),
                _ => None,
            })
        };
        let highs = |key: Key| {
            self.0.iter().filter(move |f| f.key == key).filter_map(|f| match f.op {
                Op::Le | Op::Eq => Some((&f.value, true)),
                Op::Lt => Some((&f.value, false)),
                _ => None,
            })
        };
        self.0.iter().any(|f| {
            lows(f.key).any(|(low, low_in)| {
                highs(f.key).any(|(high, high_in)| match order(low, high) {
                    Some(Ordering::Greater) => true,
                    Some(Ordering::Equal) => !(low_in && high_in),
                    _ => false,
                })
            })
        })
    }
}

/// Terms of which one must hold (OR): the parsed value of one variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr(pub Vec<Term>);

impl Expr {
    /// This expression and `other`: every pair of their terms joined (distributing AND over OR),
    /// so `a b` and `c` is `a,c b,c`. An expression without terms is the neutral element.
    #[must_use]
    pub fn and(&self, other: &Expr) -> Expr {
        match (self.0.is_empty(), other.0.is_empty()) {
            (_, true) => self.clone(),
            (true, false) => other.clone(),
            (false, false) => {
                let all: Vec<Term> = self.0.iter().flat_map(|a| other.0.iter().map(|b| a.and(b))).collect();
                // Alternatives nothing can satisfy say nothing; if every one is such, they stay,
                // and the requirement holds nowhere, as it should.
                let possible: Vec<Term> = all.iter().filter(|t| !t.contradicts()).cloned().collect();
                Expr(if possible.is_empty() { all } else { possible })
            }
        }
    }

    /// This expression or `other`: the alternatives of both, in order.
    #[must_use]
    pub fn or(&self, other: &Expr) -> Expr {
        Expr(self.0.iter().chain(&other.0).cloned().collect())
    }

    /// Whether any factor uses a per-GPU key (`arch`, `brand`).
    pub fn per_gpu(&self) -> bool {
        self.0.iter().flat_map(|t| &t.0).any(|f| f.key.per_gpu())
    }
}

/// A factor of an `NVIDIA_REQUIRE_*` value whose key libnvidia-container's evaluator has no
/// rule for (`req0=true`, and our own keys there: `kernel!=5.15.0-105-generic`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unsupported {
    /// The factor as written.
    pub factor: String,
    /// Its key as written.
    pub key: String,
}

/// One factor of a value in the order NVIDIA's evaluator meets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// A factor of a known key.
    Factor(Factor),
    /// A factor NVIDIA's evaluator refuses when it reaches it.
    Unsupported(Unsupported),
}

/// One requirement variable: where it came from and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The variable or annotation it came from (`NVIDIA_REQUIRE_CUDA`,
    /// `io.stackbuild.require.driver`).
    pub source: String,
    /// The parsed expression: the factors of known keys.
    pub expr: Expr,
    /// For an `NVIDIA_REQUIRE_*` value that libnvidia-container's evaluator would not read as
    /// [`Requirement::expr`] says (a factor it has no rule for, or an alternative of nothing but
    /// commas): every alternative and factor in its order, which decides the outcome.
    pub nvidia_order: Option<Vec<Vec<Slot>>>,
}

impl Requirement {
    /// The keys NVIDIA's evaluator has no rule for, as written (`kernel`), in order.
    pub fn unsupported_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = Vec::new();
        for slot in self.nvidia_order.iter().flatten().flatten() {
            if let Slot::Unsupported(u) = slot {
                if !keys.contains(&u.key.as_str()) {
                    keys.push(&u.key);
                }
            }
        }
        keys
    }
}

/// A factor that failed, with the host's value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FactorFailure {
    /// The factor as written (`driver>=535.104.05`).
    pub factor: String,
    /// The key it constrains.
    pub key: Key,
    /// The host's value (`530.30.02`).
    pub host: String,
}

/// A requirement the host does not satisfy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unsatisfied {
    /// The variable or annotation it came from.
    pub source: String,
    /// The whole expression.
    pub expr: String,
    /// Index into the selected GPUs, for per-GPU requirements.
    pub gpu: Option<usize>,
    /// For each alternative (OR) term, the first factor that failed, in order.
    pub alternatives: Vec<FactorFailure>,
}

impl Unsatisfied {
    /// The failure to lead with: the first term's (in official images the `cuda>=` term).
    pub fn primary(&self) -> Option<&FactorFailure> {
        self.alternatives.first()
    }
}

/// A requirement that neither holds nor fails on this host: what it hinges on is unknown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unverifiable {
    /// The variable or annotation it came from.
    pub source: String,
    /// The whole expression.
    pub expr: String,
    /// Index into the selected GPUs, for per-GPU requirements.
    pub gpu: Option<usize>,
    /// The factors that could not be told, with what the host has (no term holds, and these keep
    /// the others from failing).
    pub unknown: Vec<FactorFailure>,
    /// A factor NVIDIA's evaluator has no rule for, which it reaches (and refuses the value at)
    /// if the unknown factors go one way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub may_be_invalid: Option<Unsupported>,
}

impl Unverifiable {
    /// The key to lead with.
    pub fn key(&self) -> Option<Key> {
        self.unknown.first().map(|f| f.key)
    }
}

/// A requirement NVIDIA's evaluator refuses on this host: evaluation reaches a factor whose key it
/// has no rule for, and libnvidia-container fails with "invalid expression".
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Invalid {
    /// The variable it came from.
    pub source: String,
    /// The whole value, as NVIDIA's evaluator reads it.
    pub expr: String,
    /// Index into the selected GPUs, for a value evaluated per GPU.
    pub gpu: Option<usize>,
    /// The factor evaluation reaches.
    pub unsupported: Unsupported,
}

/// Every requirement an image and its annotations carry; all must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequirementSet {
    /// The requirements, in the order found.
    pub entries: Vec<Requirement>,
}

impl RequirementSet {
    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests;
