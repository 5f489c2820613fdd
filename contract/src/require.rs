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

use std::collections::BTreeSet;
use std::fmt;

use super::version::{ComputeCapability, CudaVersion, DriverVersion, KernelRelease, VersionError};

/// Longest expression we parse: every official CUDA image's value is under 2 KiB.
pub const MAX_EXPRESSION_LEN: usize = 16 * 1024;

/// A requirement that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid requirement {input:?} at column {column}: {message}")]
pub struct RequireError {
    /// The expression as given (cut to 200 characters).
    pub input: String,
    /// 1-based column (in characters) where the problem starts.
    pub column: usize,
    /// What was expected.
    pub message: String,
}

/// What a factor constrains.
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

/// The values `platform` takes, as the probe names the kinds of host.
pub const PLATFORMS: [&str; 3] = ["linux", "wsl2", "jetson"];

impl Key {
    const ALL: [(Key, &'static str); 9] = [
        (Key::Cuda, "cuda"),
        (Key::Driver, "driver"),
        (Key::Arch, "arch"),
        (Key::Brand, "brand"),
        (Key::Kernel, "kernel"),
        (Key::Module, "module"),
        (Key::Gpus, "gpus"),
        (Key::Machine, "machine"),
        (Key::Platform, "platform"),
    ];

    /// The key as written in expressions.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(k, _)| *k == self).map_or("", |(_, s)| s)
    }

    /// Whether libnvidia-container's evaluator has a rule for the key (`cuda`, `driver`, `arch`,
    /// `brand`: the `rules` table of `src/cli/configure.c`); the others are ours.
    pub fn nvidia(self) -> bool {
        matches!(self, Key::Cuda | Key::Driver | Key::Arch | Key::Brand)
    }

    /// Whether the key is evaluated once per selected GPU.
    pub fn per_gpu(self) -> bool {
        matches!(self, Key::Arch | Key::Brand)
    }
}

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

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Cuda(v) => v.fmt(f),
            Value::Driver(v) => v.fmt(f),
            Value::Arch(v) => v.fmt(f),
            Value::Kernel(v) => v.fmt(f),
            Value::Count(n) => n.fmt(f),
            Value::Name(s) => f.write_str(s),
        }
    }
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
}

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.key.as_str(), self.op.as_str(), self.raw)
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
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, factor) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{factor}")?;
        }
        Ok(())
    }
}

/// Terms of which one must hold (OR): the parsed value of one variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr(pub Vec<Term>);

impl Expr {
    /// Parses an expression in our dialect (`STACKBUILD_REQUIRE_*`, annotations, the doctor's
    /// `--require`): every key must be known. Input with no factor at all is an error: an empty
    /// requirement variable is better ignored by the caller than silently satisfied.
    pub fn parse(input: &str) -> Result<Self, RequireError> {
        match Self::parse_as(Dialect::Stackbuild, input)? {
            Some(e) => Ok(e),
            None => Err(Parser { input }.error(0, "empty requirement")),
        }
    }

    /// Parses an expression the way a variable named `source` is read: [`Dialect::of`], keeping
    /// only the factors of known keys (see [`Requirement::nvidia_order`] for the others).
    /// `None` when no such factor is left.
    pub fn parse_for(source: &str, input: &str) -> Result<Option<Self>, RequireError> {
        Self::parse_as(Dialect::of(source), input)
    }

    fn parse_as(dialect: Dialect, input: &str) -> Result<Option<Self>, RequireError> {
        let slots = Parser { input }.expr(dialect)?;
        let expr = Self::of_slots(&slots);
        Ok((!expr.0.is_empty()).then_some(expr))
    }

    /// The terms of `slots` with their known factors, terms left without one dropped.
    fn of_slots(slots: &[Vec<Slot>]) -> Self {
        let terms = slots.iter().map(|t| {
            Term(
                t.iter()
                    .filter_map(|s| if let Slot::Factor(f) = s { Some(f.clone()) } else { None })
                    .collect(),
            )
        });
        Expr(terms.filter(|t| !t.0.is_empty()).collect())
    }

    /// This expression and `other`: every pair of their terms joined (distributing AND over OR),
    /// so `a b` and `c` is `a,c b,c`. An expression without terms is the neutral element.
    #[must_use]
    pub fn and(&self, other: &Expr) -> Expr {
        match (self.0.is_empty(), other.0.is_empty()) {
            (_, true) => self.clone(),
            (true, false) => other.clone(),
            (false, false) => Expr(self.0.iter().flat_map(|a| other.0.iter().map(|b| a.and(b))).collect()),
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

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{term}")?;
        }
        Ok(())
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

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slot::Factor(x) => x.fmt(f),
            Slot::Unsupported(u) => f.write_str(&u.factor),
        }
    }
}

/// A value as NVIDIA's evaluator reads it: alternatives separated by spaces, factors by commas.
fn render_slots(order: &[Vec<Slot>]) -> String {
    let terms: Vec<String> =
        order.iter().map(|t| t.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")).collect();
    terms.iter().map(|t| if t.is_empty() { "," } else { t.as_str() }).collect::<Vec<_>>().join(" ")
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

/// Which rules a requirement variable is read with.
///
/// Both share NVIDIA's lexical rules (libnvidia-container `src/cli/dsl.c`, `dsl_evaluate` and
/// `evaluate_rule`): alternatives are separated by single spaces only (a tab or line break is not
/// a separator, and makes the factor invalid), factors by commas; empty alternatives and factors
/// (`a,,b`, a trailing comma, two spaces) are skipped; a factor is `key op value` where the key
/// runs to the first of `<>=!` and the operator is exactly one of `= != < <= > >=` (so `==` is
/// refused, as NVIDIA refuses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `NVIDIA_REQUIRE_*`, read as libnvidia-container's evaluator reads it: its keys are `cuda`,
    /// `driver`, `arch` and `brand` (compared case-insensitively), and a factor with any other key
    /// (ours included) is kept as an [`Unsupported`] factor, which makes the whole value an
    /// "invalid expression" when evaluation reaches it (`evaluate_rule` returns -1 when no rule
    /// matches) and changes nothing when it does not: `dsl_evaluate` stops at the first
    /// alternative whose factors all hold, and leaves an alternative at its first factor that
    /// fails. See [`Requirement::nvidia_order`].
    Nvidia,
    /// `STACKBUILD_REQUIRE_*`, `io.stackbuild.require.*`, `--require`: all our keys; an unknown key
    /// is an error, so a misspelt key fails where the image is built rather than on every host.
    Stackbuild,
}

impl Dialect {
    /// The dialect of the variable or annotation named `source`.
    pub fn of(source: &str) -> Self {
        if source.starts_with("NVIDIA_REQUIRE_") {
            Dialect::Nvidia
        } else {
            Dialect::Stackbuild
        }
    }
}

struct Parser<'a> {
    input: &'a str,
}

const KEYS_HINT: &str = "cuda, driver, arch, brand, kernel, module, gpus, machine or platform";

impl Parser<'_> {
    fn error(&self, at: usize, message: impl Into<String>) -> RequireError {
        let input: String = self.input.chars().take(200).collect();
        let column = self.input.get(..at).map_or(at, |s| s.chars().count()) + 1;
        RequireError { input, column, message: message.into() }
    }

    /// The terms in order, each with its factors in order (empty factors skipped). A term that
    /// is nothing but empty factors (`,`) is kept, empty: `dsl_evaluate` stops at it (see
    /// [`Requirement::nvidia_order`]); a term with nothing at all (two spaces) is skipped.
    fn expr(&self, dialect: Dialect) -> Result<Vec<Vec<Slot>>, RequireError> {
        if self.input.len() > MAX_EXPRESSION_LEN {
            return Err(self.error(0, format!("longer than {MAX_EXPRESSION_LEN} bytes")));
        }
        let mut terms = Vec::new();
        let mut at = 0;
        for term in self.input.split(' ') {
            let mut factors = Vec::new();
            let mut factor_at = at;
            for factor in term.split(',') {
                if !factor.is_empty() {
                    factors.push(self.factor(factor, factor_at, dialect)?);
                }
                factor_at += factor.len() + 1;
            }
            if !term.is_empty() {
                terms.push(factors);
            }
            at += term.len() + 1;
        }
        Ok(terms)
    }

    /// One factor at byte offset `start`.
    fn factor(&self, text: &str, start: usize, dialect: Dialect) -> Result<Slot, RequireError> {
        if let Some(i) = text.find(char::is_whitespace) {
            return Err(self.error(
                start + i,
                "only a space separates alternatives and only a comma separates factors (tabs and line \
                 breaks are not allowed)",
            ));
        }
        let Some(key_len) = text.find(['<', '>', '=', '!']) else {
            return Err(self
                .error(start + text.len(), format!("expected an operator (= != < <= > >=) after {text:?}")));
        };
        let key_text = &text[..key_len];
        if key_text.is_empty() {
            return Err(self.error(start, format!("expected a key ({KEYS_HINT})")));
        }
        let key = Key::ALL.iter().find(|(_, s)| s.eq_ignore_ascii_case(key_text)).map(|(k, _)| *k);
        let key = match (key, dialect) {
            (Some(k), Dialect::Nvidia) if k.nvidia() => k,
            (_, Dialect::Nvidia) => {
                return Ok(Slot::Unsupported(Unsupported {
                    factor: text.to_owned(),
                    key: key_text.to_owned(),
                }))
            }
            (Some(k), Dialect::Stackbuild) => k,
            (None, Dialect::Stackbuild) => {
                return Err(self.error(start, format!("unknown key {key_text:?}; expected {KEYS_HINT}")))
            }
        };
        let op_at = start + key_len;
        let rest = &text[key_len..];
        let op_len = rest.find(|c| !matches!(c, '<' | '>' | '=' | '!')).unwrap_or(rest.len());
        let op = match &rest[..op_len] {
            ">=" => Op::Ge,
            "<=" => Op::Le,
            "!=" => Op::Ne,
            "=" => Op::Eq,
            "<" => Op::Lt,
            ">" => Op::Gt,
            other => {
                return Err(self.error(
                    op_at,
                    format!("invalid operator {other:?} after {key_text:?}: expected one of = != < <= > >="),
                ))
            }
        };
        let value_at = op_at + op_len;
        let raw = &rest[op_len..];
        if raw.is_empty() {
            return Err(self.error(value_at, format!("expected a value after \"{key_text}{}\"", op.as_str())));
        }
        let value = self.value(key, op, raw, op_at, value_at)?;
        Ok(Slot::Factor(Factor { key, op, value, raw: raw.to_owned() }))
    }

    fn value(
        &self,
        key: Key,
        op: Op,
        raw: &str,
        op_at: usize,
        value_at: usize,
    ) -> Result<Value, RequireError> {
        let bad_value = |e: VersionError| self.error(value_at, e.to_string());
        Ok(match key {
            Key::Cuda => Value::Cuda(raw.parse().map_err(bad_value)?),
            Key::Driver => Value::Driver(raw.parse().map_err(bad_value)?),
            Key::Arch => Value::Arch(parse_arch(raw).map_err(bad_value)?),
            Key::Kernel => Value::Kernel(raw.parse().map_err(bad_value)?),
            Key::Gpus => Value::Count(
                raw.parse()
                    .map_err(|_| self.error(value_at, format!("expected a GPU count, found {raw:?}")))?,
            ),
            Key::Brand | Key::Module | Key::Machine | Key::Platform => {
                if !matches!(op, Op::Eq | Op::Ne) {
                    return Err(self.error(op_at, format!("{} takes only = or !=", key.as_str())));
                }
                if !raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                    return Err(self.error(value_at, format!("invalid name {raw:?}")));
                }
                let name = raw.to_ascii_lowercase();
                // A misspelt platform would never hold (or always, with `!=`): refuse it here,
                // where the image is built, rather than on every host.
                if key == Key::Platform && !PLATFORMS.contains(&name.as_str()) {
                    return Err(self.error(
                        value_at,
                        format!("unknown platform {raw:?}; expected linux, wsl2 or jetson"),
                    ));
                }
                Value::Name(name)
            }
        })
    }
}

/// An `arch` value: NVIDIA compares it as a version, so a missing minor is zero (`arch>=8` is
/// `arch>=8.0`, `arch=9` is `arch=9.0`, as libnvidia-container's `dsl_compare_version` reads
/// them) and trailing zero components change nothing (`8.6.0`).
fn parse_arch(raw: &str) -> Result<ComputeCapability, VersionError> {
    let d: CudaVersion =
        raw.parse().map_err(|e: VersionError| VersionError { what: "compute capability", ..e })?;
    let err = |why| VersionError { what: "compute capability", input: raw.to_owned(), why };
    if d.parts().iter().skip(2).any(|&p| p != 0) {
        return Err(err("expected major.minor"));
    }
    let conv = |v: u64| u32::try_from(v).map_err(|_| err("component out of range"));
    Ok(ComputeCapability::new(conv(d.part(0))?, conv(d.part(1))?))
}

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
        match (&self.value, self.key, &host.cuda_bound) {
            (Value::Arch(_) | Value::Name(_), Key::Arch | Key::Brand, _)
                if gpu.is_none() && host.no_devices =>
            {
                Truth::Holds
            }
            (Value::Cuda(want), _, CudaBound::Range { below }) => {
                range_truth(self.op, host.cuda.as_ref(), below.as_ref(), want)
            }
            (Value::Arch(want), _, _) => match gpu {
                None => Truth::Fails,
                Some(GpuFacts { arch: None, .. }) => Truth::Unknown,
                Some(GpuFacts { arch: Some(h), .. }) => Truth::of(self.op.holds(h.cmp(want))),
            },
            (Value::Name(want), Key::Brand, _) => match gpu {
                None => Truth::Fails,
                Some(GpuFacts { brand: None, .. }) => Truth::Unknown,
                Some(GpuFacts { brand: Some(b), .. }) => Truth::of(self.name_holds(Some(b), want)),
            },
            _ => Truth::of(self.known_holds(host, gpu)),
        }
    }

    /// [`Factor::holds`] for the keys whose host value is either known or absent (absent fails).
    fn known_holds(&self, host: &HostFacts, gpu: Option<&GpuFacts>) -> bool {
        match (&self.value, self.key) {
            (Value::Cuda(want), _) => host.cuda.as_ref().is_some_and(|h| self.op.holds(h.cmp(want))),
            (Value::Driver(want), _) => host.driver.as_ref().is_some_and(|h| self.op.holds(h.cmp(want))),
            (Value::Kernel(want), _) => host.kernel.as_ref().is_some_and(|h| self.op.holds(h.cmp(want))),
            (Value::Arch(want), _) => {
                gpu.and_then(|g| g.arch.as_ref()).is_some_and(|h| self.op.holds(h.cmp(want)))
            }
            (Value::Count(want), _) => {
                let n = u32::try_from(host.gpus.len()).unwrap_or(u32::MAX);
                self.op.holds(n.cmp(want))
            }
            (Value::Name(want), Key::Module) => self.op.holds(if host.modules.contains(want) {
                std::cmp::Ordering::Equal
            } else {
                std::cmp::Ordering::Less
            }),
            (Value::Name(want), Key::Brand) => self.name_holds(gpu.and_then(|g| g.brand.as_deref()), want),
            (Value::Name(want), Key::Platform) => self.name_holds(host.platform.as_deref(), want),
            (Value::Name(want), _) => self.name_holds(host.machine.as_deref(), want),
        }
    }

    /// `=`/`!=` of a name, case-insensitively; an unknown host value never holds.
    fn name_holds(&self, host: Option<&str>, want: &str) -> bool {
        host.is_some_and(|h| self.op.holds(h.to_ascii_lowercase().as_str().cmp(want).min_eq()))
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

    /// The value as the image states it: [`Requirement::expr`], or with
    /// [`Requirement::nvidia_order`] every alternative and factor in its order.
    pub fn written(&self) -> String {
        match &self.nvidia_order {
            None => self.expr.to_string(),
            Some(order) => order
                .iter()
                .map(|a| a.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

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

impl Factor {
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

impl fmt::Display for Unsatisfied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(first) = self.primary() else { return write!(f, "{}: unsatisfied", self.source) };
        if let Some(gpu) = self.gpu {
            write!(f, "GPU {gpu}: ")?;
        }
        write!(f, "needs {}; host has {}", first.factor, first.host)?;
        match self.alternatives.len() {
            1 => Ok(()),
            2 => write!(
                f,
                " (the other alternative, {}, fails too: host has {})",
                self.alternatives[1].factor, self.alternatives[1].host
            ),
            n => write!(f, " (none of the {} other alternatives of {} holds either)", n - 1, self.source),
        }
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

impl fmt::Display for Unverifiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(gpu) = self.gpu {
            write!(f, "GPU {gpu}: ")?;
        }
        let factors: Vec<String> =
            self.unknown.iter().map(|u| format!("{} (host has {})", u.factor, u.host)).collect();
        write!(f, "cannot tell whether {} holds", factors.join(", "))?;
        if let Some(u) = &self.may_be_invalid {
            write!(f, " (if not, NVIDIA's evaluator reaches {}, a key it has no rule for)", u.factor)?;
        }
        Ok(())
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

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(gpu) = self.gpu {
            write!(f, "GPU {gpu}: ")?;
        }
        write!(
            f,
            "invalid expression: evaluation reaches {}, and NVIDIA's evaluator has no rule for the key {:?} (its \
             keys are cuda, driver, arch and brand)",
            self.unsupported.factor, self.unsupported.key
        )
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

/// Every requirement an image and its annotations carry; all must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequirementSet {
    /// The requirements, in the order found.
    pub entries: Vec<Requirement>,
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
    /// Adds a requirement parsed from `value`, found under `source`.
    /// The variable's name picks the rules it is read with ([`Dialect::of`]); a value with
    /// nothing to check (empty, only spaces or commas) adds nothing, as NVIDIA treats an empty
    /// requirement as met. An `NVIDIA_REQUIRE_*` value that only factors NVIDIA's evaluator has
    /// no rule for is added, with no term in [`Requirement::expr`]: NVIDIA refuses it.
    pub fn push(&mut self, source: impl Into<String>, value: &str) -> Result<(), RequireError> {
        let source = source.into();
        let dialect = Dialect::of(&source);
        let slots = Parser { input: value }.expr(dialect)?;
        let expr = Expr::of_slots(&slots);
        if dialect == Dialect::Stackbuild {
            if !expr.0.is_empty() {
                self.entries.push(Requirement { source, expr, nvidia_order: None });
            }
            return Ok(());
        }
        // Only commas (or nothing) before any factor: met, as `dsl_evaluate` stops there.
        if slots.first().is_none_or(Vec::is_empty) {
            return Ok(());
        }
        let unsupported = slots.iter().flatten().any(|s| matches!(s, Slot::Unsupported(_)));
        let differs = unsupported || slots.iter().any(Vec::is_empty);
        let nvidia_order = differs.then_some(slots);
        self.entries.push(Requirement { source, expr, nvidia_order });
        Ok(())
    }

    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    /// `NVIDIA_REQUIRE_CUDA` of the official `nvidia/cuda:12.1.1-*` images (gitlab.com/nvidia/
    /// container-images/cuda, `dist/12.1.1/ubuntu2204/base/Dockerfile`).
    const CUDA_12_1_1: &str = "cuda>=12.1 brand=tesla,driver>=450,driver<451 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 brand=geforcertx,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=titan,driver>=470,driver<471 brand=titanrtx,driver>=470,driver<471 brand=tesla,driver>=510,driver<511 brand=unknown,driver>=510,driver<511 brand=nvidia,driver>=510,driver<511 brand=nvidiartx,driver>=510,driver<511 brand=geforce,driver>=510,driver<511 brand=geforcertx,driver>=510,driver<511 brand=quadro,driver>=510,driver<511 brand=quadrortx,driver>=510,driver<511 brand=titan,driver>=510,driver<511 brand=titanrtx,driver>=510,driver<511 brand=tesla,driver>=515,driver<516 brand=unknown,driver>=515,driver<516 brand=nvidia,driver>=515,driver<516 brand=nvidiartx,driver>=515,driver<516 brand=geforce,driver>=515,driver<516 brand=geforcertx,driver>=515,driver<516 brand=quadro,driver>=515,driver<516 brand=quadrortx,driver>=515,driver<516 brand=titan,driver>=515,driver<516 brand=titanrtx,driver>=515,driver<516 brand=tesla,driver>=525,driver<526 brand=unknown,driver>=525,driver<526 brand=nvidia,driver>=525,driver<526 brand=nvidiartx,driver>=525,driver<526 brand=geforce,driver>=525,driver<526 brand=geforcertx,driver>=525,driver<526 brand=quadro,driver>=525,driver<526 brand=quadrortx,driver>=525,driver<526 brand=titan,driver>=525,driver<526 brand=titanrtx,driver>=525,driver<526";

    /// What the builder writes with the constructors reads back as the same factors.
    #[test]
    fn built_expressions_render_and_parse_back() {
        let driver = Term(vec![
            Factor::new(Key::Driver, Op::Ge, "525.60.13".parse::<DriverVersion>().unwrap()),
            Factor::new(Key::Driver, Op::Lt, "560".parse::<DriverVersion>().unwrap()),
        ]);
        let cuda: CudaVersion = "12.1.105".parse().unwrap();
        let driver_expr = Expr(vec![driver.clone()]);
        let expr = Expr(vec![Term(vec![Factor::new(Key::Cuda, Op::Ge, cuda.release())]), driver]);
        assert_eq!(expr.to_string(), "cuda>=12.1 driver>=525.60.13,driver<560");
        assert_eq!(Expr::parse(&expr.to_string()).unwrap(), expr);
        let modules = Expr(vec![Term(vec![
            Factor::name(Key::Module, Op::Eq, "Nvidia_UVM"),
            Factor::new(Key::Gpus, Op::Ge, 2u32),
            Factor::new(Key::Arch, Op::Ne, ComputeCapability::new(8, 7)),
        ])]);
        assert_eq!(modules.to_string(), "module=Nvidia_UVM,gpus>=2,arch!=8.7");
        assert_eq!(Expr::parse(&modules.to_string()).unwrap(), modules);
        // AND distributes over the alternatives; an empty expression changes nothing.
        let both = expr.and(&modules);
        assert_eq!(
            both.to_string(),
            "cuda>=12.1,module=Nvidia_UVM,gpus>=2,arch!=8.7 driver>=525.60.13,driver<560,module=Nvidia_UVM,gpus>=2,arch!=8.7"
        );
        assert_eq!(Expr(Vec::new()).and(&modules), modules);
        assert_eq!(
            driver_expr.or(&modules).to_string(),
            "driver>=525.60.13,driver<560 module=Nvidia_UVM,gpus>=2,arch!=8.7"
        );
        assert_eq!(modules.and(&Expr(Vec::new())), modules);
    }

    fn host(driver: &str, cuda: &str, brands: &[&str]) -> HostFacts {
        HostFacts {
            driver: Some(driver.parse().unwrap()),
            cuda: Some(cuda.parse().unwrap()),
            gpus: brands.iter().map(|b| GpuFacts { arch: None, brand: Some((*b).to_owned()) }).collect(),
            ..HostFacts::default()
        }
    }

    fn set(source: &str, value: &str) -> RequirementSet {
        let mut s = RequirementSet::default();
        s.push(source, value).unwrap();
        s
    }

    #[test]
    fn official_12_1_1_value() {
        let req = set("NVIDIA_REQUIRE_CUDA", CUDA_12_1_1);
        assert_eq!(req.entries[0].expr.0.len(), 42);
        // 535.104.05 reports CUDA 12.2: passes through the `cuda` term.
        assert_eq!(req.check(&host("535.104.05", "12.2", &["tesla"])), Outcome::Satisfied);
        assert!(req.forward_compat_terms(&host("535.104.05", "12.2", &["tesla"])).is_empty());
        // 470 reports 11.4: a Tesla passes only through its brand term (forward compatibility).
        let t470 = host("470.199.02", "11.4", &["tesla"]);
        assert_eq!(req.check(&t470), Outcome::Satisfied);
        assert_eq!(
            req.forward_compat_terms(&t470),
            vec![("NVIDIA_REQUIRE_CUDA".into(), Some(0), "brand=tesla,driver>=470,driver<471".into())]
        );
        // NVIDIA's value also lists geforce for 470, so the DSL alone admits it; the hook's
        // forward-compatibility rule (data-center GPUs only) is what refuses it (diagnose).
        let g470 = host("470.199.02", "11.4", &["geforce"]);
        assert_eq!(req.check(&g470), Outcome::Satisfied);
        assert_eq!(req.forward_compat_terms(&g470)[0].2, "brand=geforce,driver>=470,driver<471");
        // A GeForce on 450 matches no term at all.
        let Outcome::Unsatisfied(f) = req.check(&host("450.80.02", "11.0", &["geforce"])) else { panic!() };
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].to_string(),
            "GPU 0: needs cuda>=12.1; host has 11.0 (none of the 41 other alternatives of NVIDIA_REQUIRE_CUDA holds either)"
        );
        // A 525 GeForce: cuda 12.0 < 12.1 but minor-version compatibility term 525 holds.
        assert_eq!(req.check(&host("525.60.13", "12.0", &["geforce"])), Outcome::Satisfied);
        // No GPU selected: nothing applies.
        assert_eq!(req.check(&host("450.80.02", "11.0", &[])), Outcome::NotApplicable);
    }

    #[test]
    fn failure_names_factor_and_host_value() {
        let req = set("STACKBUILD_REQUIRE_DRIVER", "driver>=535.104.05");
        let f = req.evaluate(&host("530.30.02", "12.1", &["tesla"]));
        assert_eq!(f[0].to_string(), "needs driver>=535.104.05; host has 530.30.02");
        assert_eq!(f[0].primary().unwrap().key, Key::Driver);
    }

    #[test]
    fn per_gpu_keys_are_checked_for_each_gpu() {
        let req = set("STACKBUILD_REQUIRE_ARCH", "arch>=5.0,arch<=9.0");
        let mut h = host("570.26", "12.8", &["nvidia", "geforce"]);
        h.gpus[0].arch = Some(ComputeCapability::new(9, 0));
        h.gpus[1].arch = Some(ComputeCapability::new(12, 0));
        let f = req.evaluate(&h);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].to_string(), "GPU 1: needs arch<=9.0; host has 12.0");
    }

    #[test]
    fn our_keys() {
        let mut h = host("535.104.05", "12.2", &["tesla", "tesla"]);
        h.kernel = Some("5.15.0-107-generic".parse().unwrap());
        h.modules = ["nvidia".to_owned(), "nouveau".to_owned()].into();
        h.machine = Some("x86_64".into());
        let check = |v: &str| set("X", v).evaluate(&h).into_iter().map(|u| u.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check("kernel!=5.15.0-107-generic"),
            ["needs kernel!=5.15.0-107-generic; host has 5.15.0-107-generic"]
        );
        assert!(check("kernel>=5.15.0-105-generic").is_empty());
        assert_eq!(check("module=nvidia_uvm"), ["needs module=nvidia_uvm; host has nvidia_uvm not loaded"]);
        assert_eq!(check("module!=nouveau"), ["needs module!=nouveau; host has nouveau loaded"]);
        assert!(check("module=nvidia gpus>=8").is_empty());
        assert_eq!(check("gpus>=4"), ["needs gpus>=4; host has 2 GPU(s) selected"]);
        assert!(check("machine=X86_64").is_empty());
        assert_eq!(check("machine=aarch64"), ["needs machine=aarch64; host has x86_64"]);
    }

    #[test]
    fn platform_key() {
        let e = Expr::parse("platform=WSL2 platform=jetson,machine=aarch64 platform!=linux").unwrap();
        let f = &e.0[0].0[0];
        assert_eq!((f.key, f.op, &f.value), (Key::Platform, Op::Eq, &Value::Name("wsl2".into())));
        assert_eq!(e.0[1].0[0].op, Op::Eq);
        assert_eq!(e.0[2].0[0].op, Op::Ne);
        assert!(!e.per_gpu());
        assert_eq!(e.to_string(), "platform=WSL2 platform=jetson,machine=aarch64 platform!=linux");
        assert_eq!(Expr::parse(&e.to_string()).unwrap(), e);
        assert_eq!(serde_json::to_string(&Key::Platform).unwrap(), "\"platform\"");

        let on = |platform: Option<&str>, v: &str| {
            let h = HostFacts {
                platform: platform.map(str::to_owned),
                gpus: vec![GpuFacts::default()],
                ..HostFacts::default()
            };
            set("STACKBUILD_REQUIRE_PLATFORM", v)
                .evaluate(&h)
                .into_iter()
                .map(|u| u.to_string())
                .collect::<Vec<_>>()
        };
        assert!(on(Some("wsl2"), "platform=wsl2").is_empty());
        assert!(on(Some("jetson"), "platform=JETSON").is_empty());
        assert_eq!(on(Some("linux"), "platform=jetson"), ["needs platform=jetson; host has linux"]);
        assert_eq!(on(Some("wsl2"), "platform!=wsl2"), ["needs platform!=wsl2; host has wsl2"]);
        assert!(on(Some("linux"), "platform!=wsl2").is_empty());
        assert!(on(Some("linux"), "platform=wsl2 platform=linux").is_empty());
        // A host whose platform is unknown satisfies neither = nor !=.
        assert_eq!(on(None, "platform=linux"), ["needs platform=linux; host has no known platform"]);
        assert_eq!(on(None, "platform!=linux"), ["needs platform!=linux; host has no known platform"]);
    }

    #[test]
    fn unknown_host_values_fail_with_a_reason() {
        let req = set("NVIDIA_REQUIRE_CUDA", "cuda>=12.1");
        let h = HostFacts { gpus: vec![GpuFacts::default()], ..HostFacts::default() };
        assert_eq!(
            req.evaluate(&h)[0].to_string(),
            "needs cuda>=12.1; host has no CUDA (driver not loaded or unknown)"
        );
    }

    #[test]
    fn unknown_is_not_failure() {
        let cuda = |v: &str| Some(v.parse::<CudaVersion>().unwrap());
        let range = |low: Option<CudaVersion>, below: Option<CudaVersion>| HostFacts {
            cuda: low,
            cuda_bound: CudaBound::Range { below },
            driver: Some("630.10.01".parse().unwrap()),
            gpus: vec![GpuFacts::default()],
            ..HostFacts::default()
        };
        let truth = |h: &HostFacts, v: &str| Expr::parse(v).unwrap().truth(h, h.gpus.first());
        // At least 13.3, upper bound unknown (a branch newer than the tables).
        let newer = range(cuda("13.3"), None);
        assert_eq!(truth(&newer, "cuda>=13.3"), Truth::Holds);
        assert_eq!(truth(&newer, "cuda>13.2"), Truth::Holds);
        assert_eq!(truth(&newer, "cuda>=13.5"), Truth::Unknown);
        assert_eq!(truth(&newer, "cuda<13.3"), Truth::Fails);
        assert_eq!(truth(&newer, "cuda<=13.2"), Truth::Fails);
        assert_eq!(truth(&newer, "cuda=13.2"), Truth::Fails);
        assert_eq!(truth(&newer, "cuda!=13.2"), Truth::Holds);
        assert_eq!(truth(&newer, "cuda=13.4"), Truth::Unknown);
        // Between 12.2 and 12.3 (exclusive): a branch between two rows.
        let between = range(cuda("12.2"), cuda("12.3"));
        assert_eq!(truth(&between, "cuda>=12.3"), Truth::Fails);
        assert_eq!(truth(&between, "cuda<12.3"), Truth::Holds);
        assert_eq!(truth(&between, "cuda>=12.2"), Truth::Holds);
        // Below 9.0, no lower bound: a driver older than the tables.
        let old = range(None, cuda("9.0"));
        assert_eq!(truth(&old, "cuda>=12.1"), Truth::Fails);
        assert_eq!(truth(&old, "cuda>=8.0"), Truth::Unknown);
        // An unknown GPU model: arch and brand are unknown; with no GPU at all they fail.
        assert_eq!(truth(&newer, "arch>=5.0,arch<10.0"), Truth::Unknown);
        assert_eq!(truth(&newer, "brand=tesla"), Truth::Unknown);
        assert_eq!(Expr::parse("arch>=5.0").unwrap().truth(&newer, None), Truth::Fails);
        // AND: a known failure wins over an unknown; OR: a known hold wins over an unknown.
        assert_eq!(truth(&newer, "arch>=5.0,driver<600"), Truth::Fails);
        assert_eq!(truth(&newer, "arch>=5.0 cuda>=13.0"), Truth::Holds);
        assert_eq!(truth(&newer, "arch>=5.0 cuda>=14.0"), Truth::Unknown);

        let set = set("STACKBUILD_REQUIRE_ARCH", "arch>=5.0,arch<10.0");
        let assessed = set.assess(&newer);
        assert!(assessed.failures.is_empty() && set.evaluate(&newer).is_empty());
        assert_eq!(
            assessed.unverifiable[0].to_string(),
            "GPU 0: cannot tell whether arch>=5.0 (host has no known compute capability), arch<10.0 (host has no \
             known compute capability) holds"
        );
        assert_eq!(set.check(&newer), Outcome::Satisfied);
    }

    #[test]
    fn parse_errors_point_at_the_column() {
        let err = |s: &str| Expr::parse(s).unwrap_err().to_string();
        insta::assert_snapshot!(
            [
                err(""),
                err("   "),
                err("cuda"),
                err("cuda>="),
                err("cuda>=12.x"),
                err("flavour=vanilla"),
                err(" , ,"),
                err("cuda==12.1"),
                err("cuda!12"),
                err("cuda>=12.1\tdriver>=535"),
                err("=12"),
                err("arch>=8.1.1"),
                err("brand>=tesla"),
                err("gpus>=many"),
                err("module=nvidia$uvm"),
                err("platform=wls2"),
                err("platform>=wsl2"),
            ]
            .join("\n"),
            @r#"
        invalid requirement "" at column 1: empty requirement
        invalid requirement "   " at column 1: empty requirement
        invalid requirement "cuda" at column 5: expected an operator (= != < <= > >=) after "cuda"
        invalid requirement "cuda>=" at column 7: expected a value after "cuda>="
        invalid requirement "cuda>=12.x" at column 7: invalid CUDA version "12.x": expected numbers separated by dots
        invalid requirement "flavour=vanilla" at column 1: unknown key "flavour"; expected cuda, driver, arch, brand, kernel, module, gpus, machine or platform
        invalid requirement " , ," at column 1: empty requirement
        invalid requirement "cuda==12.1" at column 5: invalid operator "==" after "cuda": expected one of = != < <= > >=
        invalid requirement "cuda!12" at column 5: invalid operator "!" after "cuda": expected one of = != < <= > >=
        invalid requirement "cuda>=12.1\tdriver>=535" at column 11: only a space separates alternatives and only a comma separates factors (tabs and line breaks are not allowed)
        invalid requirement "=12" at column 1: expected a key (cuda, driver, arch, brand, kernel, module, gpus, machine or platform)
        invalid requirement "arch>=8.1.1" at column 7: invalid compute capability "8.1.1": expected major.minor
        invalid requirement "brand>=tesla" at column 6: brand takes only = or !=
        invalid requirement "gpus>=many" at column 7: expected a GPU count, found "many"
        invalid requirement "module=nvidia$uvm" at column 8: invalid name "nvidia$uvm"
        invalid requirement "platform=wls2" at column 10: unknown platform "wls2"; expected linux, wsl2 or jetson
        invalid requirement "platform>=wsl2" at column 9: platform takes only = or !=
        "#
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [CUDA_12_1_1, "driver>=525.60.13,driver<560 kernel!=5.15.0-107-generic", "gpus>=1"] {
            let e = Expr::parse(s).unwrap();
            assert_eq!(Expr::parse(&e.to_string()).unwrap(), e);
        }
        assert_eq!(Expr::parse("  cuda>=12.1   driver=535, ").unwrap().to_string(), "cuda>=12.1 driver=535");
    }

    /// libnvidia-container `src/cli/dsl.c`: `evaluate_rule` returns -1 for a key without a rule
    /// (keys compared with `str_case_equal`), and `dsl_evaluate` fails with "invalid expression"
    /// when it gets there; the first alternative that holds, or a factor that fails, stops it first.
    #[test]
    fn nvidia_unknown_keys_are_invalid_where_evaluation_reaches_them() {
        let h = host("535.104.05", "12.2", &["nvidia"]);
        let outcome = |value: &str| set("NVIDIA_REQUIRE_X", value).check(&h);
        let invalid = |value: &str| match outcome(value) {
            Outcome::Invalid(v) => v[0].unsupported.factor.clone(),
            other => panic!("{value}: {other:?}"),
        };
        // Reached: the only factor, after factors that hold, after a failing alternative.
        assert_eq!(invalid("req0=true"), "req0=true");
        assert_eq!(invalid("cuda>=12.0,foo=bar"), "foo=bar");
        assert_eq!(invalid("cuda>=99.0 foo=bar"), "foo=bar");
        assert_eq!(invalid("cuda>=99.0 Foo>1,cuda>=1"), "Foo>1");
        // Our keys are not NVIDIA's: its evaluator refuses them too.
        assert_eq!(invalid("kernel!=5.15.0-105-generic"), "kernel!=5.15.0-105-generic");
        assert_eq!(invalid("gpus>=1"), "gpus>=1");
        // Not reached: an earlier alternative holds, or an earlier factor of its alternative fails.
        assert_eq!(outcome("cuda>=11.6 foo=bar"), Outcome::Satisfied);
        assert_eq!(outcome("cuda>=99.0,foo=bar cuda>=12.0"), Outcome::Satisfied);
        assert!(matches!(outcome("cuda>=99.0,foo=bar"), Outcome::Unsatisfied(_)));
        // NVIDIA's keys in any case are rules, not unknown keys.
        assert_eq!(outcome("CUDA>=12.0 foo=bar"), Outcome::Satisfied);
        let req = set("NVIDIA_REQUIRE_X", "cuda>=99.0 req0=true");
        let a = req.assess(&h);
        assert!(a.failures.is_empty() && a.unverifiable.is_empty());
        assert_eq!(
            a.invalid[0].to_string(),
            "invalid expression: evaluation reaches req0=true, and NVIDIA's evaluator has no rule for the key \
             \"req0\" (its keys are cuda, driver, arch and brand)"
        );
        assert_eq!(a.invalid[0].expr, "cuda>=99.0 req0=true");
        // Our variables keep our keys, and refuse unknown ones where the image is built.
        assert_eq!(set("STACKBUILD_REQUIRE_X", "gpus>=1").check(&h), Outcome::Satisfied);
        assert!(RequirementSet::default().push("STACKBUILD_REQUIRE_X", "req0=true").is_err());
    }

    /// Per GPU, and where a factor before the unknown key cannot be told, NVIDIA's evaluator may
    /// or may not reach it: unverifiable, saying so.
    #[test]
    fn nvidia_unknown_key_behind_an_unknown_factor() {
        let mut h = host("535.104.05", "12.2", &["nvidia"]);
        h.gpus[0].arch = Some(ComputeCapability::new(9, 0));
        let req = set("NVIDIA_REQUIRE_X", "arch>=9.0 req0=true");
        assert_eq!(req.check(&h), Outcome::Satisfied);
        h.gpus[0].arch = Some(ComputeCapability::new(8, 0));
        let Outcome::Invalid(v) = req.check(&h) else { panic!() };
        assert_eq!(v[0].gpu, Some(0));
        h.gpus[0].arch = None;
        let a = req.assess(&h);
        assert!(a.invalid.is_empty() && a.failures.is_empty());
        assert_eq!(
            a.unverifiable[0].to_string(),
            "GPU 0: cannot tell whether arch>=9.0 (host has no known compute capability) holds (if not, NVIDIA's \
             evaluator reaches req0=true, a key it has no rule for)"
        );
    }

    /// `dsl_evaluate` stops at an alternative of nothing but commas with the last result: met
    /// before any factor was evaluated, unmet after one failed.
    #[test]
    fn nvidia_comma_only_alternative_ends_the_evaluation() {
        let h = host("535.104.05", "12.2", &["nvidia"]);
        let outcome = |value: &str| set("NVIDIA_REQUIRE_X", value).check(&h);
        assert!(set("NVIDIA_REQUIRE_X", ", cuda>=99.0").is_empty());
        assert!(set("NVIDIA_REQUIRE_X", ",, req0=true").is_empty());
        assert!(matches!(outcome("cuda>=99.0 , cuda>=12.0"), Outcome::Unsatisfied(_)));
        assert!(matches!(outcome("cuda>=99.0 , req0=true"), Outcome::Unsatisfied(_)));
        assert_eq!(outcome("cuda>=12.0 , cuda>=99.0"), Outcome::Satisfied);
        assert_eq!(outcome("cuda>=99.0 cuda>=12.0 ,"), Outcome::Satisfied);
        // Our variables: no such stop (every alternative is read).
        assert_eq!(set("STACKBUILD_REQUIRE_X", "cuda>=99.0 , cuda>=12.0").check(&h), Outcome::Satisfied);
    }

    #[test]
    fn multibyte_input_never_panics() {
        for s in ["é", "cuda>=é", "driver>=5\u{3000}35", "ärch=1", "cuda\u{0}>=1", "🦀=1", ",", ",,", "=1"]
        {
            let _ = Expr::parse(s);
        }
    }
}
