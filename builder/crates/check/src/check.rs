//! `stackbuild check`: resolve a recipe without building it, show the stack and what it needs
//! from the host, and refuse the combinations that cannot work.
//!
//! The stack comes from the lock when it is current; otherwise uv resolves it (the lock is not
//! written and no wheel is downloaded: uv reads the index's metadata only). With `--offline`, or
//! when uv finds no solution, the stack is *predicted* from the recipe's exact pins and the
//! knowledge base (`stackcontract::kb`), so a recipe-level conflict such as torch 2.1.0
//! with `[cuda] version = "12.4"` is still reported, next to uv's own message.
//!
//! torch's requirements come from the artifact when it is at hand (a fetched wheel's `METADATA`
//! in the cache's artifact directory), else from the knowledge base's row for its build
//! (prefer the artifact over a table). A torch release the table does not know is checked from
//! what its wheels require (the resolved CUDA runtime and cuDNN wheels); its architectures are
//! read from its fat binaries at build time ([`crate::fatbin`]).
//!
//! The host requirements are [`crate::derive::requirements`] of the stack: the same function,
//! on the same packages, that the build writes into the image.
//!
//! The rules live in `check/rules.rs`, one function per conflict; each finding names both sides
//! and a fix.

use std::path::{Path, PathBuf};

use serde::Serialize;
use stackcontract::image::DerivedRequirement;

use stackbuild_common::Platform;
use stackbuild_python::{Lock, LockError};
use stackbuild_python::{SolveError, Target};
use stackbuild_recipe::{Base, Recipe};

mod facts;
pub(crate) use facts::exact_requires;
mod render;
mod rules;
#[cfg(test)]
mod tests;

pub(crate) use facts::{Origin, StackPackage};

use facts::Facts;

/// How [`check`] runs.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Never run the resolver: without a current lock, predict the stack from the recipe's
    /// pins and the knowledge base.
    pub offline: bool,
    /// The cache directory whose `artifacts/<sha256>/<wheel>` files may be read for their
    /// metadata (read only; nothing is created). `None`: tables only.
    pub cache_dir: Option<PathBuf>,
}

/// Why a check could not run at all (a conflict is a [`Finding`], not an error).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The lock file exists but cannot be read.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The resolver could not run, or its output was not understood (a resolution that finds
    /// no solution is reported as a conflict instead).
    #[error("{source} (use --offline to check the recipe's pins against the knowledge base alone)")]
    Solve {
        /// The resolver's error.
        #[source]
        source: SolveError,
    },
    /// The recipe's `[python] lock` cannot be read or has no wheel for a target.
    #[error("{source}")]
    GivenLock {
        /// Why.
        source: stackbuild_python::GivenLockError,
    },
}

/// How severe a [`Finding`] is. Only errors make a recipe incompatible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The stack cannot work: the recipe is refused.
    Error,
    /// The stack may work, but something is fragile or unusual.
    Warning,
    /// Something the check could not verify.
    Note,
}

impl Severity {
    /// `error`, `warning`, `note`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Note => "note",
        }
    }
}

/// What a [`Finding`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// cuDNN differs from the one the torch wheel was built against and requires.
    CudnnMismatch,
    /// Another exact requirement of the torch wheel is pinned differently by the recipe.
    TorchRequirement,
    /// A torch CUDA build that was never published (`+cu124` of torch 2.1.0).
    TorchVariant,
    /// `[cuda] version` differs from the CUDA the stack ships.
    CudaMismatch,
    /// The recipe's Python has no wheels of its torch.
    PythonUnsupported,
    /// A numpy version the torch wheels were not built for.
    NumpyAbi,
    /// torchvision/torchaudio built for another torch.
    CompanionMismatch,
    /// CUDA libraries of different minor releases.
    MixedCudaMinor,
    /// `[host] driver` admits no driver that runs the image's CUDA libraries.
    HostDriver,
    /// `[host] arch` admits no GPU the torch build has code for.
    HostArch,
    /// The resolver found no solution.
    ResolutionFailed,
    /// The torch version is not in the knowledge base.
    UnknownTorch,
    /// The stack's CUDA is newer than the knowledge base's driver table.
    UnknownCuda,
    /// torch is not pinned exactly, so the torch rules need a resolution.
    TorchUnpinned,
}

impl FindingKind {
    /// The kebab-case name (`cudnn-mismatch`), as `--json` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CudnnMismatch => "cudnn-mismatch",
            Self::TorchRequirement => "torch-requirement",
            Self::TorchVariant => "torch-variant",
            Self::CudaMismatch => "cuda-mismatch",
            Self::PythonUnsupported => "python-unsupported",
            Self::NumpyAbi => "numpy-abi",
            Self::CompanionMismatch => "companion-mismatch",
            Self::MixedCudaMinor => "mixed-cuda-minor",
            Self::HostDriver => "host-driver",
            Self::HostArch => "host-arch",
            Self::ResolutionFailed => "resolution-failed",
            Self::UnknownTorch => "unknown-torch",
            Self::UnknownCuda => "unknown-cuda",
            Self::TorchUnpinned => "torch-unpinned",
        }
    }
}

/// One conflict, warning or note: what is wrong (naming both sides) and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// How severe.
    pub severity: Severity,
    /// What about.
    pub kind: FindingKind,
    /// What is wrong, naming both sides and the consequence.
    pub message: String,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Where a platform's stack comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Resolution {
    /// The recipe has no `[python]` section: nothing to resolve.
    NoPython,
    /// The current lock file.
    Lock {
        /// The lock file.
        path: PathBuf,
    },
    /// A fresh resolution by uv (not written anywhere).
    Resolved {
        /// Why the lock was not used.
        lock: String,
    },
    /// Not resolved: predicted from the recipe's exact pins and the knowledge base.
    Predicted {
        /// Why there was no resolution.
        why: String,
    },
    /// uv found no solution; the stack shown is predicted as for [`Resolution::Predicted`].
    Failed {
        /// uv's message.
        message: String,
    },
}

impl Resolution {
    /// Whether the packages are known (lock or resolution) rather than predicted.
    pub fn is_resolved(&self) -> bool {
        matches!(self, Self::Lock { .. } | Self::Resolved { .. })
    }
}

/// The torch build of a stack, as the checks saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchBuild {
    /// The version (`2.1.0`, `2.1.0+cu121`).
    pub version: String,
    /// The build's local tag (`cu121`), when the knowledge base knows the build.
    pub variant: Option<String>,
    /// The CUDA it was built with.
    pub cuda: Option<String>,
    /// The cuDNN it was built against and requires.
    pub cudnn: Option<String>,
    /// Compute capabilities with cubins.
    pub arch: Vec<String>,
    /// Whether PTX of the highest architecture is included.
    pub ptx: bool,
    /// The compute capabilities the build runs on, in words (cubins and PTX JIT); `None` when
    /// the build is unknown (its fat binaries are read at build time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
    /// Where its exact requirements come from: a wheel's `METADATA`, or a knowledge-base row.
    pub requires_from: Option<String>,
}

/// The stack of one platform.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformStack {
    /// The platform.
    pub platform: Platform,
    /// Where the packages come from.
    pub resolution: Resolution,
    /// The Python packages, sorted by name (predicted stacks hold only what is known).
    pub packages: Vec<StackPackage>,
    /// The torch build, when the stack has torch.
    pub torch: Option<TorchBuild>,
    /// The CUDA version the stack ships (`12.1`).
    pub cuda: Option<String>,
    /// What the host must provide, with reasons: what the build writes into the image.
    pub requirements: Vec<DerivedRequirement>,
}

/// The result of [`check`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The recipe file, as given.
    pub recipe: PathBuf,
    /// `name:tag` of the image.
    pub image: String,
    /// The base, in words (`scratch`, `debian bookworm`).
    pub base: String,
    /// The recipe's Python version.
    pub python: Option<String>,
    /// `[cuda] version`, as the author expects it.
    pub cuda_expected: Option<String>,
    /// `[cuda] cudnn`, as the author expects it.
    pub cudnn_expected: Option<String>,
    /// One stack per platform.
    pub stacks: Vec<PlatformStack>,
    /// Every conflict, warning and note, errors first.
    pub findings: Vec<Finding>,
    /// No error among the findings.
    pub compatible: bool,
}

impl Report {
    /// The findings of one severity.
    pub fn of(&self, severity: Severity) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.severity == severity)
    }

    /// The report for people: the stack, the host requirements, the findings and the verdict.
    pub fn to_text(&self) -> String {
        render::text(self)
    }
}

/// Check `recipe`: find its stack (lock, resolution, or prediction), derive the host
/// requirements and report every conflict. Never writes the lock, never downloads a wheel.
pub fn check(recipe: &Recipe, opts: &CheckOptions) -> Result<Report, CheckError> {
    let artifacts = opts.cache_dir.as_ref().map(|d| d.join("artifacts"));
    let mut stacks = Vec::new();
    let mut findings = Vec::new();
    let targets = stackbuild_python::targets(recipe);
    if targets.is_empty() {
        for &platform in &recipe.image.platforms {
            let facts = Facts::without_python(recipe, platform);
            stacks.push(finish(&facts, Resolution::NoPython, &mut findings));
        }
    } else {
        let lock_path = Lock::path_for(&recipe.path);
        let lock = Lock::load_optional(&lock_path)?;
        let stale = match &lock {
            None => Some("no lock file".to_owned()),
            Some(l) => l.stale_reason(recipe).map(|r| format!("the lock is stale: {r}")),
        };
        for target in &targets {
            let (facts, resolution) = match (&lock, &stale) {
                (Some(lock), None) => (
                    Facts::from_lock(recipe, target, lock, artifacts.as_deref()),
                    Resolution::Lock { path: lock_path.clone() },
                ),
                // A given lock is read, not resolved: it needs no network, even with --offline.
                (_, Some(why)) if opts.offline && recipe.python.as_ref().is_none_or(|p| p.lock.is_none()) => {
                    (
                        Facts::predicted(recipe, target),
                        Resolution::Predicted { why: format!("--offline and {why}") },
                    )
                }
                (_, why) => resolve(recipe, target, why.as_deref(), artifacts.as_deref(), &mut findings)?,
            };
            stacks.push(finish(&facts, resolution, &mut findings));
        }
    }
    let mut findings = dedup(findings);
    // Errors first, then warnings, then notes, in the rules' order; uv's refusal last among the
    // errors, after the conflicts that explain it.
    findings.sort_by_key(|f| (f.severity, f.kind == FindingKind::ResolutionFailed));
    if let Some(i) = findings.iter().position(|f| f.kind == FindingKind::ResolutionFailed) {
        explain_resolution_failure(&mut findings, i);
    }
    let compatible = !findings.iter().any(|f| f.severity == Severity::Error);
    Ok(Report {
        recipe: recipe.path.clone(),
        image: format!("{}:{}", recipe.image.name, recipe.image.tag),
        base: describe_base(&recipe.base),
        python: recipe.python.as_ref().map(|p| p.version.to_string()),
        cuda_expected: recipe.cuda.as_ref().map(|c| c.version.to_string()),
        cudnn_expected: recipe.cuda.as_ref().and_then(|c| c.cudnn.as_ref()).map(ToString::to_string),
        stacks,
        findings,
        compatible,
    })
}

/// Resolve `target` with uv; a resolution without solution becomes a finding and a predicted
/// stack.
fn resolve<'r>(
    recipe: &'r Recipe,
    target: &Target,
    lock_state: Option<&str>,
    artifacts: Option<&Path>,
    findings: &mut Vec<Finding>,
) -> Result<(Facts<'r>, Resolution), CheckError> {
    let Some(python) = &recipe.python else {
        return Ok((Facts::without_python(recipe, target.platform), Resolution::NoPython));
    };
    if let Some(given) = &python.lock {
        // The project's lock stands for the resolution: its wheels for this target, as pins.
        let chosen = stackbuild_python::GivenLock::load(given)
            .and_then(|g| g.select(target))
            .map_err(|source| CheckError::GivenLock { source })?;
        let pins: Vec<_> = chosen.iter().map(stackbuild_python::Chosen::pin).collect();
        return Ok((
            Facts::from_pins(recipe, target, &pins, artifacts),
            Resolution::Resolved { lock: format!("{} (as it is)", given.display()) },
        ));
    }
    tracing::info!("resolving {} package(s) for {target} (nothing is written)", python.packages.len());
    // Packages with no wheel resolve to their sdists, their dependencies as the sdist's PKG-INFO
    // says (the lock prepares them in the build sandbox); git dependencies and the recipe's
    // projects are left to the lock, which resolves their trees.
    let mut section = python.clone();
    section.packages.retain(|r| stackbuild_recipe::git_dependency(r).is_none());
    let scratch =
        tempfile::Builder::new().prefix("stackbuild-check-").tempdir().map_err(|e| CheckError::Solve {
            source: SolveError::Uv { target: target.clone(), message: format!("a temporary directory: {e}") },
        })?;
    let fetch = stackbuild_python::SourceFetch {
        artifacts: artifacts.unwrap_or(scratch.path()),
        memo: None,
        cache: scratch.path(),
    };
    let resolved = stackbuild_python::resolve_with_sources(
        &section,
        target,
        &[],
        &[],
        &[],
        &stackbuild_python::PkgInfoMetadata,
        fetch,
    )
    .map(|r| r.pins);
    match resolved {
        Ok(pins) => Ok((
            Facts::from_pins(recipe, target, &pins, artifacts),
            Resolution::Resolved { lock: lock_state.unwrap_or("not used").to_owned() },
        )),
        Err(source) => {
            let Some(message) = source.no_resolution() else { return Err(CheckError::Solve { source }) };
            findings.push(Finding {
                severity: Severity::Error,
                kind: FindingKind::ResolutionFailed,
                message: format!("uv found no resolution for {target}:\n{message}"),
                fix: None,
            });
            Ok((Facts::predicted(recipe, target), Resolution::Failed { message }))
        }
    }
}

/// Run the rules on one platform's facts and describe its stack.
fn finish(facts: &Facts<'_>, resolution: Resolution, findings: &mut Vec<Finding>) -> PlatformStack {
    findings.extend(rules::run(facts, rules::Evidence::of(&resolution)));
    let packages = facts.derive_packages();
    PlatformStack {
        platform: facts.platform,
        resolution,
        packages: facts.packages.clone(),
        torch: facts.torch.as_ref().map(|t| t.describe(facts.platform)),
        cuda: crate::derive::stack_cuda(&packages).map(|c| {
            let (major, minor) = c.major_minor();
            format!("{major}.{minor}")
        }),
        requirements: crate::derive::requirements(&packages, &facts.recipe.host),
    }
}

/// The same finding from several platforms, once.
fn dedup(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for f in findings {
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// Tell the reader which of the knowledge base's conflicts explain uv's refusal.
fn explain_resolution_failure(findings: &mut [Finding], index: usize) {
    let explained: Vec<&str> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.kind != FindingKind::ResolutionFailed)
        .map(|f| f.kind.as_str())
        .collect();
    let fix = if rules::index_unreachable(&findings[index].message) {
        "uv could not reach the index: check its URL (the recipe's [python] index, or pip's and uv's \
         configuration), the network, the proxy and the CA bundle, then check again"
            .to_owned()
    } else if explained.is_empty() {
        "the knowledge base has no explanation for this: adjust the pins uv names above".to_owned()
    } else {
        let mut kinds = explained.clone();
        kinds.dedup();
        format!(
            "explained by the knowledge base: see {} above; fix those and resolve again",
            kinds.join(", ")
        )
    };
    findings[index].fix = Some(fix);
}

/// The base in words.
fn describe_base(base: &Base) -> String {
    match base {
        Base::Scratch => "scratch".into(),
        Base::Oci { path, tag } => match tag {
            Some(t) => format!("OCI layout {}:{t}", path.display()),
            None => format!("OCI layout {}", path.display()),
        },
        Base::Archive { path } => format!("archive {}", path.display()),
        Base::Docker { reference } => format!("docker {reference}"),
        Base::Registry { reference } => format!("registry {reference}"),
        Base::Bootstrap(b) => {
            let packages: Vec<String> = b.packages.iter().map(ToString::to_string).collect();
            if packages.is_empty() {
                format!("{} {}", b.distro.as_str(), b.suite)
            } else {
                format!("{} {} with {}", b.distro.as_str(), b.suite, packages.join(", "))
            }
        }
    }
}
