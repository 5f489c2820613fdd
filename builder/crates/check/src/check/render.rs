//! The report for people: recipe, stack, host requirements, findings and verdict.

use std::fmt::Write as _;

use super::{Origin, PlatformStack, Report, Resolution, Severity, StackPackage, TorchBuild};

/// Width lines are wrapped at.
const WIDTH: usize = 100;
/// Width of the label column of the stack.
const LABEL: usize = 16;

pub(super) fn text(report: &Report) -> String {
    let mut out = String::new();
    let mut field = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<8} {value}");
    };
    field("recipe", &report.recipe.display().to_string());
    field("image", &report.image);
    field("base", &report.base);
    if let Some(py) = &report.python {
        field("python", py);
    }
    if let Some(cuda) = &report.cuda_expected {
        let cudnn = report.cudnn_expected.as_ref().map_or_else(String::new, |c| format!(", cuDNN {c}"));
        field("[cuda]", &format!("CUDA {cuda}{cudnn} (as the recipe expects)"));
    }
    for stack in &report.stacks {
        out.push('\n');
        stack_text(&mut out, stack);
    }
    for f in &report.findings {
        out.push('\n');
        let head = format!("{}[{}]: ", f.severity.as_str(), f.kind.as_str());
        wrap(&mut out, &head, "    ", &f.message);
        if let Some(fix) = &f.fix {
            wrap(&mut out, "  fix: ", "       ", fix);
        }
    }
    let count = |s| report.of(s).count();
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
    let warnings = match warnings {
        0 => String::new(),
        1 => " (1 warning)".into(),
        n => format!(" ({n} warnings)"),
    };
    out.push('\n');
    if report.compatible {
        let _ = writeln!(out, "result: compatible{warnings}");
    } else {
        let conflicts = if errors == 1 { "1 conflict".to_owned() } else { format!("{errors} conflicts") };
        let _ = writeln!(out, "result: NOT compatible, {conflicts}{warnings}");
    }
    out
}

fn stack_text(out: &mut String, stack: &PlatformStack) {
    let from = match &stack.resolution {
        Resolution::NoPython => "no [python] section".to_owned(),
        Resolution::Lock { path } => format!("from the lock {}", path.display()),
        Resolution::Resolved { lock } => format!("resolved by uv ({lock}; nothing written)"),
        Resolution::Predicted { why } => format!("predicted, not resolved ({why})"),
        Resolution::Failed { .. } => "predicted: the resolution failed".to_owned(),
    };
    let _ = writeln!(out, "stack for {}, {from}", stack.platform);
    let predicted = matches!(stack.resolution, Resolution::Predicted { .. } | Resolution::Failed { .. });
    if predicted {
        wrap(
            out,
            "  ",
            "  ",
            "(the recipe's exact pins and torch's exact requirements; what other packages pull in is \
             known only after a resolution)",
        );
    }
    // `12.1.3.1 (CUDA 12.1, torch requires)`: the version, and what else is worth knowing.
    let version = |p: &StackPackage, extra: Option<String>| {
        let origin = match p.origin {
            Origin::RecipePin if predicted => Some("pinned".to_owned()),
            Origin::TorchRequirement => Some("torch requires".to_owned()),
            _ => None,
        };
        let notes: Vec<String> = extra.into_iter().chain(origin).collect();
        if notes.is_empty() {
            p.version.to_string()
        } else {
            format!("{} ({})", p.version, notes.join(", "))
        }
    };
    let find = |name: &str| stack.packages.iter().find(|p| p.name == name);
    let mut shown: Vec<&str> = Vec::new();
    if let Some(t) = &stack.torch {
        torch_rows(out, t);
        shown.push("torch");
    }
    if let Some(cuda) = &stack.cuda {
        row(out, "CUDA", cuda);
    }
    if let Some(p) = stack.packages.iter().find(|p| p.name.starts_with("nvidia-cudnn-cu")) {
        row(out, "cuDNN", &version(p, Some(p.name.clone())));
        shown.push(&p.name);
    }
    for (label, name) in [
        ("NumPy", "numpy"),
        ("torchvision", "torchvision"),
        ("torchaudio", "torchaudio"),
        ("triton", "triton"),
    ] {
        if let Some(p) = find(name) {
            row(out, label, &version(p, None));
            shown.push(name);
        }
    }
    let libraries: Vec<&StackPackage> = stack
        .packages
        .iter()
        .filter(|p| p.name.starts_with("nvidia-") && !shown.contains(&p.name.as_str()))
        .collect();
    for (i, p) in libraries.iter().enumerate() {
        let label = if i == 0 { "CUDA libraries" } else { "" };
        row(out, label, &format!("{} {}", p.name, version(p, p.cuda.as_ref().map(|c| format!("CUDA {c}")))));
    }
    let others: Vec<String> = stack
        .packages
        .iter()
        .filter(|p| !shown.contains(&p.name.as_str()) && !p.name.starts_with("nvidia-"))
        .map(|p| format!("{} {}", p.name, version(p, None)))
        .collect();
    if !others.is_empty() {
        row(out, &format!("others ({})", others.len()), &others.join(", "));
    }
    out.push('\n');
    if stack.requirements.is_empty() {
        let _ = writeln!(out, "host requirements: none (no CUDA in the stack and no [host] rule)");
        return;
    }
    let _ = writeln!(out, "host requirements (what the build writes into the image):");
    if stack.requirements.iter().any(|r| r.expr.contains(' ')) {
        // NVIDIA's requirement language (libnvidia-container src/cli/dsl.c).
        let _ = writeln!(
            out,
            "  (space-separated terms are alternatives; comma-separated factors must all hold)"
        );
    }
    for r in &stack.requirements {
        wrap(out, "  ", "    ", &format!("{}={}", r.variable, r.expr));
        for reason in &r.reasons {
            wrap(out, "    - ", "      ", reason);
        }
    }
}

/// The torch build: version, CUDA, cuDNN, architectures, and where its requirements come from.
fn torch_rows(out: &mut String, t: &TorchBuild) {
    let mut build = Vec::new();
    if let (Some(tag), Some(cuda)) = (&t.variant, &t.cuda) {
        build.push(format!("{tag} build: CUDA {cuda}"));
    }
    if let Some(cudnn) = &t.cudnn {
        build.push(format!("cuDNN {cudnn}"));
    }
    if !t.arch.is_empty() {
        let ptx = if t.ptx { "with PTX" } else { "no PTX" };
        build.push(format!("cubins for {}, {ptx}", t.arch.join(" ")));
    }
    let build = if build.is_empty() { String::new() } else { format!(" ({})", build.join("; ")) };
    row(out, "torch", &format!("{}{build}", t.version));
    match &t.runs_on {
        Some(set) => row(out, "", &format!("runs on compute capability {set}")),
        None => row(out, "", "its GPU architectures are read from its fat binaries at build time"),
    }
    if let Some(from) = &t.requires_from {
        // The knowledge base's full source is in --json; the text names the kind of source.
        let from = if from.starts_with("knowledge base") { "the knowledge base" } else { from };
        row(out, "", &format!("torch's exact requirements from {from}"));
    }
}

/// A row of the stack: a label column, then the value wrapped under itself.
fn row(out: &mut String, label: &str, value: &str) {
    wrap(out, &format!("  {label:<LABEL$}"), &" ".repeat(LABEL + 2), value);
}

/// Append `text` wrapped at [`WIDTH`]: the first line after `first`, the others after `rest`.
/// Line breaks in `text` are kept, each line's own indentation too.
fn wrap(out: &mut String, first: &str, rest: &str, text: &str) {
    for (n, line) in text.lines().enumerate() {
        let lead = if n == 0 { first.to_owned() } else { rest.to_owned() };
        let own = &line[..line.len() - line.trim_start().len()];
        let cont = format!("{rest}{own}");
        let mut current = format!("{lead}{own}");
        let mut empty = true;
        for word in line.split_whitespace() {
            let width = current.chars().count() + usize::from(!empty) + word.chars().count();
            if !empty && width > WIDTH {
                out.push_str(current.trim_end());
                out.push('\n');
                current.clone_from(&cont);
                empty = true;
            }
            if !empty {
                current.push(' ');
            }
            current.push_str(word);
            empty = false;
        }
        out.push_str(current.trim_end());
        out.push('\n');
    }
}
