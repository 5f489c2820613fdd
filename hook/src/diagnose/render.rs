//! Text renderings of a [`Diagnosis`].

use std::fmt::Write as _;

use super::report::{Diagnosis, Finding, Layer, Severity, Verdict};

impl Diagnosis {
    /// The report for people (ANSI colours when `color`).
    pub fn render_human(&self, color: bool) -> String {
        human(self, color)
    }

    /// The errors only, one line each with their remedy: what a hook prints when it blocks a
    /// container (runc shows the hook's stderr).
    pub fn render_errors(&self) -> String {
        errors(self)
    }
}

struct Style {
    on: bool,
}

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn severity(&self, s: Severity) -> String {
        match s {
            Severity::Error => self.paint("1;31", "error  "),
            Severity::Warning => self.paint("33", "warning"),
            Severity::Info => self.paint("36", "info   "),
        }
    }
}

/// The report for people.
fn human(d: &Diagnosis, color: bool) -> String {
    let st = Style { on: color };
    let mut out = String::new();
    let h = &d.host;
    let _ = writeln!(out, "{}", st.paint("1", "stackhook doctor"));
    let _ = writeln!(
        out,
        "  host    {} {}, kernel {}",
        h.platform,
        h.machine,
        h.kernel.as_deref().unwrap_or("unknown")
    );
    let driver = match (&h.driver, h.module) {
        (Some(v), Some(m)) => format!("{v} ({m} module)"),
        (Some(v), None) => v.clone(),
        (None, _) => "not loaded or unknown".to_owned(),
    };
    let cuda = h.cuda.as_deref().map_or(String::new(), |c| format!(", CUDA {c}"));
    let _ = writeln!(out, "  driver  {driver}{cuda}");
    let _ = writeln!(out, "  cuda    {}: {}", h.cuda_source.path, h.cuda_source.value);
    for g in &h.gpus {
        let cc =
            g.compute_capability.as_deref().map_or(String::new(), |c| format!(", compute capability {c}"));
        let sel = if g.selected { "" } else { " (not selected)" };
        let _ = writeln!(out, "  GPU {}   {} at {}{cc}{sel}", g.index, g.model, g.bus_id);
        if let Some(src) = &g.compute_capability_source {
            let _ = writeln!(out, "          {}: {}", src.path, src.value);
        }
    }
    for src in &d.gpu_sources {
        let counted = if src.counted { "" } else { " (not a GPU request: privileged container)" };
        let _ = writeln!(out, "  from    {}{counted}: {}", src.source, src.devices.join(", "));
    }
    let kb_d = if h.knowledge_base.kb_d.is_empty() {
        String::new()
    } else {
        format!(", with {}", h.knowledge_base.kb_d.join(", "))
    };
    let _ = writeln!(out, "  kb      built-in tables of {}{kb_d}", h.knowledge_base.date);
    for layer in Layer::ALL {
        let findings: Vec<&Finding> = d.findings.iter().filter(|f| f.layer == layer).collect();
        out.push('\n');
        if findings.is_empty() {
            let state =
                if d.skipped.contains(&layer) { st.paint("33", "not checked") } else { st.paint("32", "ok") };
            let _ = writeln!(out, "{}: {state}", st.paint("1", layer.title()));
            continue;
        }
        let _ = writeln!(out, "{}", st.paint("1", layer.title()));
        for f in findings {
            let _ = writeln!(out, "  {} {}: {}", st.severity(f.severity), st.paint("1", f.code), f.message);
            for e in &f.evidence {
                let _ = writeln!(out, "          {}: {}", e.path, e.value);
            }
            if let Some(r) = &f.remedy {
                let _ = writeln!(out, "          {} {r}", st.paint("1", "fix:"));
            }
        }
    }
    let errors = d.of(Severity::Error).count();
    let warnings = d.of(Severity::Warning).count();
    let verdict = match d.verdict() {
        Verdict::Allow => st.paint("1;32", "allow"),
        Verdict::Block => st.paint("1;31", "block"),
    };
    let _ = writeln!(out, "\nverdict: {verdict} ({errors} error(s), {warnings} warning(s))");
    out
}

/// The errors, one line each with the remedy, for a hook's stderr.
fn errors(d: &Diagnosis) -> String {
    let mut out = String::new();
    for f in d.of(Severity::Error) {
        let _ = write!(out, "stackhook: [{}] {}", f.code, f.message);
        if let Some(r) = &f.remedy {
            let _ = write!(out, " (fix: {r})");
        }
        out.push('\n');
    }
    out
}
