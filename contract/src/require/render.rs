//! Requirements as text: expressions as [`Expr::parse`](super::Expr::parse) reads them back
//! (`key op value`, factors joined by commas, terms by spaces), a value in the order NVIDIA's
//! evaluator reads it, and the messages of failed, unverifiable and invalid requirements.

use std::fmt;

use super::{Expr, Factor, Invalid, Requirement, Slot, Term, Unsatisfied, Unverifiable, Value};

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

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.key.as_str(), self.op.as_str(), self.raw)
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

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Slot::Factor(x) => x.fmt(f),
            Slot::Unsupported(u) => f.write_str(&u.factor),
        }
    }
}

/// A value as NVIDIA's evaluator reads it: alternatives separated by spaces, factors by commas.
pub(super) fn render_slots(order: &[Vec<Slot>]) -> String {
    let terms: Vec<String> =
        order.iter().map(|t| t.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")).collect();
    terms.iter().map(|t| if t.is_empty() { "," } else { t.as_str() }).collect::<Vec<_>>().join(" ")
}

impl Requirement {
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
