//! Reading a requirement value: terms separated by single spaces, factors by commas, each factor
//! `key op value` with the value typed by its key, in the [`Dialect`] of the variable it comes
//! from. An error names the column where the problem starts.

use super::keys::or_list;
use super::{
    Expr, Factor, Key, Op, Requirement, RequirementSet, Slot, Term, Unsupported, Value, ValueType, KEYS,
};
use crate::version::{ComputeCapability, CudaVersion, VersionError};

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

/// `cuda, driver, ... or platform`: every key's name.
fn keys_hint() -> String {
    or_list(KEYS.iter().map(|s| s.name))
}

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
            return Err(self.error(start, format!("expected a key ({})", keys_hint())));
        }
        let key = match (Key::from_name(key_text), dialect) {
            (Some(k), Dialect::Nvidia) if k.nvidia() => k,
            (_, Dialect::Nvidia) => {
                return Ok(Slot::Unsupported(Unsupported {
                    factor: text.to_owned(),
                    key: key_text.to_owned(),
                }))
            }
            (Some(k), Dialect::Stackbuild) => k,
            (None, Dialect::Stackbuild) => {
                return Err(self.error(start, format!("unknown key {key_text:?}; expected {}", keys_hint())))
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
        // By the key's type (its row of `KEYS`), so a new key of a known type needs nothing here.
        Ok(match key.spec().value {
            ValueType::CudaVersion => Value::Cuda(raw.parse().map_err(bad_value)?),
            ValueType::DriverVersion => Value::Driver(raw.parse().map_err(bad_value)?),
            ValueType::ComputeCapability => Value::Arch(parse_arch(raw).map_err(bad_value)?),
            ValueType::KernelRelease => Value::Kernel(raw.parse().map_err(bad_value)?),
            ValueType::Count => Value::Count(
                raw.parse()
                    .map_err(|_| self.error(value_at, format!("expected a GPU count, found {raw:?}")))?,
            ),
            ValueType::Word { one_of } => {
                if !matches!(op, Op::Eq | Op::Ne) {
                    return Err(self.error(op_at, format!("{} takes only = or !=", key.as_str())));
                }
                if !raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                    return Err(self.error(value_at, format!("invalid name {raw:?}")));
                }
                let name = raw.to_ascii_lowercase();
                // A misspelt platform would never hold (or always, with `!=`): refuse it here,
                // where the image is built, rather than on every host.
                if !one_of.is_empty() && !one_of.contains(&name.as_str()) {
                    return Err(self.error(
                        value_at,
                        format!(
                            "unknown {} {raw:?}; expected {}",
                            key.as_str(),
                            or_list(one_of.iter().copied())
                        ),
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
}
