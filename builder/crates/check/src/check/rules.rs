//! The conflict rules. Each looks at the [`Facts`] of one platform and reports what cannot
//! work, naming both sides (the recipe's line or the resolved package, and the torch build or
//! the knowledge-base fact it collides with) and a fix.
//!
//! Facts come from `contract/kb/*.toml` through [`kb`]; every row there names its source, and
//! docs/recipes.md's "Checking a stack before and after building" summarizes them.

use std::collections::BTreeSet;
use std::str::FromStr;

use pep440_rs::Operator;
use stackcontract::kb;
use stackcontract::require::Op;
use stackcontract::version::{
    ComputeCapability, CudaVersion, PackageSpecifiers, PackageVersion, PythonVersion,
};

use super::facts::{component_version, library_component, library_cuda, local_tag, Facts, Requires};
use super::{Finding, FindingKind, Severity};
use crate::derive;
use stackbuild_recipe::{Comparison, VersionRange};

/// The findings of one platform, and the packages already blamed (so one package is not
/// reported twice, say as a cuDNN mismatch and again as a mixed CUDA minor).
struct Findings {
    list: Vec<Finding>,
    blamed: BTreeSet<String>,
}

impl Findings {
    fn push(
        &mut self,
        severity: Severity,
        kind: FindingKind,
        subject: Option<&str>,
        message: String,
        fix: Option<String>,
    ) {
        if let Some(s) = subject {
            self.blamed.insert(s.to_owned());
        }
        self.list.push(Finding { severity, kind, message, fix });
    }

    fn error(&mut self, kind: FindingKind, subject: Option<&str>, message: String, fix: String) {
        self.push(Severity::Error, kind, subject, message, Some(fix));
    }
}

/// What the stack's packages rest on, which decides what a table may say about them.
///
/// A table is never complete (every torch release brings new builds on the project's own index),
/// so it may add knowledge to an artifact (which GPU has which compute capability, a driver
/// minimum, the numpy ABI) but never contradict one: a build the resolver found, or a wheel the user gave,
/// was published, whatever the table lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// A lock or a fresh resolution: every package was found on an index (or is the recipe's own
    /// wheel) and the resolver honoured their real `Requires-Dist`.
    Found,
    /// `--offline` without a current lock: predicted from the recipe's pins and the tables; what
    /// the tables lack is unknown, not wrong.
    Predicted,
    /// The resolver ran and found no solution: a build it could not find and no table knows
    /// was never published.
    NotFound,
}

impl Evidence {
    /// The evidence of a platform's stack.
    pub(crate) fn of(resolution: &super::Resolution) -> Self {
        match resolution {
            // uv could not reach an index: nothing is known about what it serves, so nothing
            // is "never published" (the resolution failure is still an error of its own).
            super::Resolution::Failed { message } if index_unreachable(message) => Self::Predicted,
            super::Resolution::Failed { .. } => Self::NotFound,
            super::Resolution::Predicted { .. } => Self::Predicted,
            super::Resolution::NoPython
            | super::Resolution::Lock { .. }
            | super::Resolution::Resolved { .. } => Self::Found,
        }
    }
}

/// Whether uv's failure is about reaching an index (a connection, a name, a timeout, a TLS
/// handshake) rather than about what the index serves.
pub(super) fn index_unreachable(message: &str) -> bool {
    const NETWORK: &[&str] = &[
        "Failed to fetch",
        "error sending request",
        "tcp connect error",
        "dns error",
        "Connection refused",
        "connection reset",
        "operation timed out",
        "invalid peer certificate",
        "Could not connect",
    ];
    NETWORK.iter().any(|n| message.contains(n))
}

/// Every rule, in report order.
pub(super) fn run(f: &Facts<'_>, ev: Evidence) -> Vec<Finding> {
    let mut out = Findings { list: Vec::new(), blamed: BTreeSet::new() };
    let resolved = ev == Evidence::Found;
    torch_known(f, resolved, &mut out);
    python(f, ev, &mut out);
    torch_variant(f, ev, &mut out);
    cudnn(f, resolved, &mut out);
    torch_requirements(f, resolved, &mut out);
    numpy(f, resolved, &mut out);
    companions(f, resolved, &mut out);
    host_driver(f, &mut out);
    host_arch(f, &mut out);
    unknown_cuda(f, &mut out);
    mixed_cuda_minor(f, &mut out);
    out.list
}

fn parse(version: &str) -> Option<PackageVersion> {
    PackageVersion::from_str(version).ok()
}

/// `3.12` from `3.12.1`.
fn minor(py: &PythonVersion) -> String {
    format!("{}.{}", py.part(0), py.part(1))
}

/// `12.1` from `12.1.1`.
fn cuda_minor(cuda: &CudaVersion) -> String {
    let (major, minor) = cuda.major_minor();
    format!("{major}.{minor}")
}

/// The oldest torch release after `after` (or the newest before it, when `newest_before`)
/// that `fits`.
fn nearest_release(
    after: &PackageVersion,
    newest_before: bool,
    fits: impl Fn(&kb::TorchRelease) -> bool,
) -> Option<&'static kb::TorchRelease> {
    let releases = kb::torch_releases().iter().filter(|r| fits(r));
    if newest_before {
        releases.filter(|r| parse(&r.version).is_some_and(|v| v < *after)).last()
    } else {
        releases.into_iter().find(|r| parse(&r.version).is_some_and(|v| v > *after))
    }
}

/// Notes when the torch rules cannot run: torch unknown to the knowledge base, or not pinned.
fn torch_known(f: &Facts<'_>, resolved: bool, out: &mut Findings) {
    if let Some(t) = &f.torch {
        if t.release.is_none() {
            let known = kb::torch_releases();
            let span = match (known.first(), known.last()) {
                (Some(a), Some(b)) => format!(" (it knows {} to {})", a.version, b.version),
                _ => String::new(),
            };
            out.push(
                Severity::Note,
                FindingKind::UnknownTorch,
                None,
                if resolved {
                    format!(
                        "torch {} is not in the knowledge base{span}: its CUDA and cuDNN are checked from the \
                         wheels its metadata requires (the resolved CUDA runtime and cuDNN wheels); its GPU \
                         architectures are read from the fat binaries of its libraries at build time; the checks \
                         of its Python range, NumPy and companions were skipped",
                        t.version
                    )
                } else {
                    format!(
                        "torch {} is not in the knowledge base{span} and the stack is not resolved: its CUDA, \
                         cuDNN, Python, NumPy and companions were not checked (a resolution reads them from its \
                         wheels' metadata; its GPU architectures are read at build time)",
                        t.version
                    )
                },
                None,
            );
        }
    } else if !resolved {
        if let Some(req) = f.reqs_for("torch").next() {
            out.push(
                Severity::Note,
                FindingKind::TorchUnpinned,
                None,
                format!(
                    "torch is not pinned exactly ({}): the checks of its build need a resolution",
                    req.describe()
                ),
                Some("run `stackbuild check` without --offline, or pin torch with `==`".into()),
            );
        }
    }
}

/// Whether the stack's torch is an artifact in hand: found by the resolver (or locked), or the
/// recipe's own wheel. Such a build was published, whatever the tables say.
fn torch_found(f: &Facts<'_>, ev: Evidence) -> bool {
    ev == Evidence::Found || f.torch.as_ref().is_some_and(|t| t.user_wheel)
}

/// What the checks read from the wheels instead of a table: the CUDA runtime and the cuDNN of
/// the stack (`CUDA 12.9 (nvidia-cuda-runtime-cu12 12.9.79) and cuDNN 9.17.1.4 (...)`).
fn derived_from_wheels(f: &Facts<'_>) -> String {
    let mut parts = Vec::new();
    let runtime = f
        .packages
        .iter()
        .find(|p| library_component(&p.name) == Some("cuda-runtime"))
        .or_else(|| f.packages.iter().find(|p| p.name == "cuda-toolkit"));
    if let (Some(cuda), Some(p)) = (derive::stack_cuda(&f.derive_packages()), runtime) {
        parts.push(format!("CUDA {} ({} {})", cuda_minor(&cuda), p.name, p.version));
    }
    if let Some(p) = f.packages.iter().find(|p| p.name.starts_with("nvidia-cudnn-cu")) {
        parts.push(format!("cuDNN {} ({})", p.version, p.name));
    }
    if parts.is_empty() {
        "no CUDA runtime or cuDNN wheel among them".into()
    } else {
        parts.join(" and ")
    }
}

/// A Python with no wheels of the stack's torch.
fn python(f: &Facts<'_>, ev: Evidence, out: &mut Findings) {
    let (Some(t), Some(py)) = (&f.torch, f.recipe.python.as_ref().map(|p| &p.version)) else { return };
    let Some(release) = t.release else { return };
    if release.supports_python(py) {
        return;
    }
    let (lo, hi) = (&release.python.0, &release.python.1);
    if torch_found(f, ev) {
        // The wheel for this Python is in hand: the table's range is behind the index.
        out.push(
            Severity::Note,
            FindingKind::UnknownTorch,
            None,
            format!(
                "the knowledge base lists wheels of {} for Python {lo} to {hi} only, but the stack has one for \
                 Python {}: the table is behind the index, and the wheel in hand is what counts",
                t.display(),
                minor(py)
            ),
            None,
        );
        return;
    }
    let older = py < lo;
    let base = t.base_version();
    let (use_python, other) = if older {
        (lo, nearest_release(&base, true, |r| r.supports_python(py)).map(|r| ("last", r)))
    } else {
        (hi, nearest_release(&base, false, |r| r.supports_python(py)).map(|r| ("first", r)))
    };
    let alternative = other.map_or_else(String::new, |(which, r)| {
        format!(", or torch=={}, the {which} release with wheels for Python {}", r.version, minor(py))
    });
    out.error(
        FindingKind::PythonUnsupported,
        Some("torch"),
        format!(
            "[python] version = \"{py}\" is outside the range of {}: its wheels were published for Python \
             {lo} to {hi} only, so there is no cp{}{} wheel to install",
            t.display(),
            py.part(0),
            py.part(1)
        ),
        format!(
            "use Python {} ([python] version = \"{}\"){alternative}",
            minor(use_python),
            minor(use_python)
        ),
    );
}

/// A torch CUDA build the tables do not know, or a `[cuda] version` the stack does not ship.
///
/// "Never published" is said only when the resolver looked and found no such build; a build it
/// found (or the recipe's own wheel) is checked from its wheels, and offline the table's silence
/// is only a warning.
fn torch_variant(f: &Facts<'_>, ev: Evidence, out: &mut Findings) {
    let expected = f.recipe.cuda.as_ref().map(|c| &c.version);
    if let Some(t) = &f.torch {
        if let Some(release) = t.release {
            let base = t.base_version();
            let builds = release
                .variants
                .iter()
                .map(|v| {
                    format!("{} (CUDA {}{})", v.tag, v.cuda, if v.pypi { ", the PyPI wheel" } else { "" })
                })
                .collect::<Vec<_>>()
                .join(", ");
            let tag = local_tag(&t.version);
            // Only CUDA tags: `+cpu` and `+rocm5.6` builds exist but are not in the table.
            let cuda_tag = tag
                .strip_prefix("cu")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            if cuda_tag
                && release.variant(&tag).is_none()
                && missing_build(f, ev, t, release, &builds, &tag, out)
            {
                return;
            }
            // Offline or resolved, the CUDA the stack ships is compared below; only when the
            // resolver failed does the table's list of builds explain why.
            if let Some(cv) = expected.filter(|_| ev == Evidence::NotFound) {
                if !release.variants.iter().any(|v| v.cuda.major_minor() == cv.major_minor()) {
                    let pypi = release.pypi_variant().map_or_else(String::new, |v| {
                        format!(
                            "set [cuda] version = \"{}\" (the CUDA of the PyPI wheel torch=={base})",
                            v.cuda
                        )
                    });
                    let later = nearest_release(&base, false, |r| {
                        r.variants.iter().any(|v| v.cuda.major_minor() == cv.major_minor())
                    })
                    .map_or_else(String::new, |r| {
                        format!("torch=={}, the first release with a CUDA {cv} build", r.version)
                    });
                    let fix = [pypi, later]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(", or use ");
                    out.error(
                        FindingKind::TorchVariant,
                        Some("torch"),
                        format!(
                            "[cuda] version = \"{cv}\" but torch {base} was never built for CUDA {cv}: the resolver \
                             found no such build, and its CUDA builds are {builds}"
                        ),
                        fix,
                    );
                    return;
                }
            }
        }
    }
    // The CUDA the stack ships against the one the author expects.
    let Some(cv) = expected else { return };
    let packages = f.derive_packages();
    let Some(ships) = derive::stack_cuda(&packages) else { return };
    if ships.major_minor() == cv.major_minor() {
        return;
    }
    let runtime = |p: &&super::StackPackage| {
        library_component(&p.name) == Some("cuda-runtime") || p.name == "cuda-toolkit"
    };
    let evidence = match f.packages.iter().find(runtime) {
        Some(p) => f.named(p),
        None => f.torch.as_ref().map_or_else(String::new, |t| format!("the build of {}", t.display())),
    };
    let with_cuda = |v: &kb::TorchVariant| v.cuda.major_minor() == cv.major_minor();
    let other_build = f.torch.as_ref().and_then(|t| {
        if let Some(v) = t.release.and_then(|r| r.variants.iter().find(|v| with_cuda(v))) {
            return Some(format!(
                ", or install torch=={}+{} (CUDA {}) from the PyTorch index that publishes it ([python] index)",
                t.base_version(),
                v.tag,
                v.cuda
            ));
        }
        // The knowledge base adds what it knows of later releases; the stack is what it is.
        let r = nearest_release(&t.base_version(), false, |r| r.variants.iter().any(&with_cuda))?;
        let v = r.variants.iter().find(|v| with_cuda(v))?;
        Some(format!(", or use torch=={}+{}, the first release the knowledge base knows with a CUDA {cv} build", r.version, v.tag))
    });
    out.error(
        FindingKind::CudaMismatch,
        None,
        format!("[cuda] version = \"{cv}\" but the stack ships CUDA {}: {evidence}", cuda_minor(&ships)),
        format!("set [cuda] version = \"{}\"{}", cuda_minor(&ships), other_build.unwrap_or_default()),
    );
}

/// A CUDA build of a known release that the table lacks: a note when it is in hand, a warning
/// offline, "never published" only when the resolver found none. Whether the rule stops here.
fn missing_build(
    f: &Facts<'_>,
    ev: Evidence,
    t: &super::facts::TorchFacts,
    release: &kb::TorchRelease,
    builds: &str,
    tag: &str,
    out: &mut Findings,
) -> bool {
    let base = t.base_version();
    let published =
        release.variants.iter().map(|v| format!("torch=={base}+{}", v.tag)).collect::<Vec<_>>().join(" or ");
    let later = nearest_release(&base, false, |r| r.variant(tag).is_some()).map_or_else(String::new, |r| {
        format!(", or torch=={}+{tag}, the first release with a {tag} build", r.version)
    });
    if torch_found(f, ev) {
        let how = if t.user_wheel { "it is the recipe's own wheel" } else { "the resolver found it" };
        out.push(
            Severity::Note,
            FindingKind::UnknownTorch,
            None,
            format!(
                "torch {} is a build the knowledge base lacks (it knows {builds}); {how}, so it was \
                 published, and it is checked from the wheels its Requires-Dist names: {}; its GPU \
                 architectures are read from its fat binaries at build time",
                t.version,
                derived_from_wheels(f)
            ),
            None,
        );
    } else if ev == Evidence::Predicted {
        out.push(
            Severity::Warning,
            FindingKind::TorchVariant,
            Some("torch"),
            format!(
                "torch {} is not among the builds the knowledge base knows ({builds}), and without a \
                 resolution (--offline, or an index that did not answer) its CUDA, cuDNN and \
                 architectures are unchecked; a table is not the index, and the build may well be \
                 published",
                t.version
            ),
            Some(format!(
                "resolve it (`stackbuild check` without --offline, against an index that answers): a \
                 build the index serves is checked from its wheels' metadata (the builds the knowledge base knows: {published}{later})"
            )),
        );
        return true;
    } else {
        out.error(
            FindingKind::TorchVariant,
            Some("torch"),
            format!(
                "torch {} was never published: the resolver found no such build, and torch {base} has \
                 the CUDA builds {builds}",
                t.version
            ),
            format!("pin a published build ({published}){later}"),
        );
        return true;
    }
    false
}

/// Whether `wanted` (as the recipe writes it, possibly shorter: `8.9`) names `actual`.
fn names_version(wanted: &PackageVersion, actual: &PackageVersion) -> bool {
    let (w, a) = (wanted.release(), actual.release());
    w.len() <= a.len() && a.starts_with(w) && wanted.local().is_empty()
}

/// cuDNN other than the one torch was built against.
fn cudnn(f: &Facts<'_>, resolved: bool, out: &mut Findings) {
    let Some(t) = &f.torch else { return };
    // A torch the table does not know: the cuDNN wheel its metadata made the resolver pick.
    let resolved_cudnn = || {
        let p = f.packages.iter().find(|p| p.name.starts_with("nvidia-cudnn-cu")).filter(|_| resolved)?;
        Some((p.name.clone(), p.version.clone(), "the cuDNN wheel its Requires-Dist resolved to".to_owned()))
    };
    // The artifact first: in a resolved stack whose torch wheel is not at hand, the cuDNN its
    // real Requires-Dist resolved to; a table row that says otherwise is checked (as a warning)
    // below, and never decides what `[cuda] cudnn` must be.
    let from_wheel = matches!(t.requires_from, Some(Requires::Wheel(_)));
    let table = t.cudnn();
    let artifact = if from_wheel { None } else { resolved_cudnn() };
    let Some((wheel, want, from)) = artifact.clone().or_else(|| table.clone()) else { return };
    let torch = t.display();
    let consequence = "a process must load the cuDNN its torch was built against: another one gives wrong \
                       results (NaNs) or undefined symbols, not a clean error";
    let alternative = |have: &PackageVersion| {
        kb::torch_releases()
            .iter()
            .find(|r| r.variants.iter().any(|v| parse(&v.cudnn).as_ref() == Some(have)))
            .map_or_else(String::new, |r| {
                format!(", or use torch {} (built against cuDNN {have})", r.version)
            })
    };
    if let Some(expected) = f.recipe.cuda.as_ref().and_then(|c| c.cudnn.as_ref()) {
        if !names_version(expected, &want) {
            out.error(
                FindingKind::CudnnMismatch,
                None,
                format!(
                    "[cuda] cudnn = \"{expected}\" but {torch} was built against cuDNN {want} and requires \
                     {wheel}=={want} ({from}); {consequence}"
                ),
                format!("set [cuda] cudnn = \"{want}\"{}", alternative(expected)),
            );
        }
    }
    // The stack against the table's (or the wheel's) requirement.
    let Some((wheel, want, from)) = table.or(artifact) else { return };
    let Some(p) = f.package(&wheel) else { return };
    if p.version == want {
        return;
    }
    // A resolution honoured the wheel's real Requires-Dist; a table that disagrees with it
    // may describe another build of the same version.
    let severity = if resolved && !from_wheel { Severity::Warning } else { Severity::Error };
    let pinned = f.exact_pin(&wheel).is_some();
    out.push(
        severity,
        FindingKind::CudnnMismatch,
        Some(&wheel),
        format!(
            "the stack has {}, but {torch} was built against cuDNN {want} and requires {wheel}=={want} \
             ({from}); {consequence}",
            f.named(p)
        ),
        Some(if pinned {
            format!(
                "drop the pin (torch brings {wheel}=={want} itself) or pin {wheel}=={want}{}",
                alternative(&p.version)
            )
        } else {
            format!("pin {wheel}=={want} in [python] constraints")
        }),
    );
}

/// The recipe pins another version of something the torch wheel requires exactly.
fn torch_requirements(f: &Facts<'_>, resolved: bool, out: &mut Findings) {
    let Some(t) = &f.torch else { return };
    let from_wheel = matches!(t.requires_from, Some(Requires::Wheel(_)));
    let from = t.requires_from.as_ref().map_or_else(String::new, Requires::short);
    for (name, want) in &t.requires {
        if name.starts_with("nvidia-cudnn-cu") || out.blamed.contains(name) {
            continue;
        }
        let Some(p) = f.package(name) else { continue };
        // Without the wheel at hand, trust a resolution over the table.
        if p.version == *want || (resolved && !from_wheel) {
            continue;
        }
        out.error(
            FindingKind::TorchRequirement,
            Some(name),
            format!("the stack has {}, but {} requires {name}=={want} ({from})", f.named(p), t.display()),
            format!("drop the pin, or pin {name}=={want}"),
        );
    }
}

/// The lowest version a specifier set admits, where it has one.
fn lower_bounds(specs: &PackageSpecifiers) -> impl Iterator<Item = (&PackageVersion, bool)> {
    specs.iter().filter_map(|s| match s.operator() {
        Operator::Equal
        | Operator::ExactEqual
        | Operator::EqualStar
        | Operator::GreaterThanEqual
        | Operator::TildeEqual => Some((s.version(), true)),
        Operator::GreaterThan => Some((s.version(), false)),
        _ => None,
    })
}

/// Whether no version satisfies both `a` and `b`, judged from `a`'s lower bounds against
/// `b`'s upper bounds: sound (never a false conflict) but not complete.
fn disjoint(a: &PackageSpecifiers, b: &PackageSpecifiers) -> bool {
    lower_bounds(a).any(|(low, inclusive)| {
        b.iter().any(|s| match s.operator() {
            Operator::LessThan => low >= s.version(),
            Operator::LessThanEqual => low > s.version() || (!inclusive && low == s.version()),
            _ => false,
        })
    })
}

/// A numpy version that the torch wheels were not built for.
fn numpy(f: &Facts<'_>, resolved: bool, out: &mut Findings) {
    let Some(t) = &f.torch else { return };
    let Some(release) = t.release else { return };
    let allowed = release.numpy_specifiers();
    if allowed.is_empty() {
        return;
    }
    let side = match f.package("numpy") {
        Some(p) if !allowed.contains(&p.version) => {
            Some((format!("the stack has {}", f.named(p)), Some(p.version.clone())))
        }
        None if !resolved => f.reqs_for("numpy").find(|r| disjoint(&r.specs, &allowed)).map(|r| {
            (
                format!("the recipe requires {}", r.describe()),
                lower_bounds(&r.specs).next().map(|(v, _)| v.clone()),
            )
        }),
        _ => None,
    };
    let Some((side, version)) = side else { return };
    let numpy_one = allowed.to_string() == "<2";
    let built = if numpy_one { " were built against NumPy 1 and" } else { "" };
    let newer = version.as_ref().and_then(|v| {
        nearest_release(&t.base_version(), false, |r| {
            let s = r.numpy_specifiers();
            s.is_empty() || s.contains(v)
        })
    });
    let example = if numpy_one { " (numpy==1.26.4 is the last NumPy 1 release)" } else { "" };
    let alternative = newer.map_or_else(String::new, |r| {
        format!(
            ", or use torch>={}, whose wheels work with NumPy {}",
            r.version,
            version.as_ref().map_or_else(String::new, ToString::to_string)
        )
    });
    out.error(
        FindingKind::NumpyAbi,
        Some("numpy"),
        format!(
            "{side}, but the wheels of {}{built} work only with numpy{allowed}: with another NumPy its \
             NumPy interop (tensor.numpy(), torch.from_numpy()) fails at run time (pytorch/pytorch issue 107302)",
            t.display()
        ),
        format!("require numpy{allowed} in [python]{example}{alternative}"),
    );
}

/// Reads a companion's version from a torch release row.
type Companion = fn(&kb::TorchRelease) -> &str;

/// torchvision or torchaudio built for another torch. In a resolved stack the resolver honoured
/// the companion's real `Requires-Dist`, so a table that disagrees is only a warning.
fn companions(f: &Facts<'_>, resolved: bool, out: &mut Findings) {
    let Some(t) = &f.torch else { return };
    let base = t.base_version();
    let fields: [(&str, Companion); 2] =
        [("torchvision", |r| &r.torchvision), ("torchaudio", |r| &r.torchaudio)];
    for (name, field) in fields {
        let Some(p) = f.package(name) else { continue };
        let have = p.version.only_release();
        // The release whose row names this companion version: the torch it pins exactly.
        let Some(wants) = kb::torch_releases().iter().find(|r| parse(field(r)).as_ref() == Some(&have))
        else {
            continue;
        };
        if parse(&wants.version).as_ref() == Some(&base) {
            continue;
        }
        let torch_side = match f.package("torch") {
            Some(tp) => f.named(tp),
            None => t.display(),
        };
        let matching = t.release.map(|r| field(r).to_owned()).filter(|m| !m.is_empty());
        let fix = match &matching {
            Some(m) => format!("pin {name}=={m} (the release for torch {base}), or torch=={}", wants.version),
            None => format!("pin torch=={}, or the {name} release of torch {base}", wants.version),
        };
        let (severity, table) = if resolved {
            (
                Severity::Warning,
                " (per the knowledge base; the resolution, which read the wheels' Requires-Dist, accepted the pair)",
            )
        } else {
            (Severity::Error, "")
        };
        out.push(
            severity,
            FindingKind::CompanionMismatch,
            Some(name),
            format!(
                "{} is built for torch {} and requires torch=={}, but the stack has {torch_side}{table}",
                f.named(p),
                wants.version,
                wants.version
            ),
            Some(fix),
        );
    }
}

/// A `[host] driver` range that admits no driver running the image's CUDA libraries.
fn host_driver(f: &Facts<'_>, out: &mut Findings) {
    let Some(range) = &f.recipe.host.driver else { return };
    let Some(floor) = derive::driver_floor(&f.derive_packages()) else { return };
    let admits = |driver: &stackcontract::version::DriverVersion| {
        let mut comparisons = range.comparisons.clone();
        comparisons.push(Comparison { op: Op::Ge, value: driver.clone() });
        VersionRange { comparisons }.is_satisfiable()
    };
    if admits(&floor.driver) {
        return;
    }
    let cuda = cuda_minor(&floor.cuda);
    // The row the floor comes from: table 2 under minor-version compatibility, else table 3.
    let source = match kb::minor_compat(floor.cuda.part(0)).filter(|_| floor.minor_compat) {
        Some(row) => row.source.clone(),
        None => floor.source.clone(),
    };
    let why = if floor.minor_compat {
        format!(
            "the minimum of every CUDA {}.x application under minor-version compatibility",
            floor.cuda.part(0)
        )
    } else if floor.estimated.is_some() {
        format!("the newest known toolkit minimum, a lower bound for CUDA {cuda}")
    } else {
        format!("the CUDA {cuda} toolkit's own minimum, as the torch build has only PTX to JIT-compile")
    };
    let others: Vec<String> = [11, 12, 13]
        .into_iter()
        .filter(|&m| m != floor.cuda.part(0))
        .filter_map(kb::minor_compat)
        .filter(|row| admits(&row.driver))
        .map(|row| format!("CUDA {}.x (driver>={})", row.major, row.driver))
        .collect();
    let alternative = if others.is_empty() {
        String::new()
    } else {
        format!(", or build the stack for {}", others.join(" or "))
    };
    out.error(
        FindingKind::HostDriver,
        None,
        format!(
            "[host] driver = \"{range}\" admits no driver that runs the image's CUDA {cuda} libraries: they need \
             driver>={} ({why}; {source})",
            floor.driver
        ),
        format!("allow driver>={} in [host] driver{alternative}", floor.driver),
    );
}

/// Every compute capability a `[host] arch` range could name (1.0 to 20.9).
fn all_compute_capabilities() -> impl Iterator<Item = ComputeCapability> {
    (1..=20).flat_map(|major| (0..10).map(move |minor| ComputeCapability::new(major, minor)))
}

/// A `[host] arch` range that admits no GPU the torch build has code for.
fn host_arch(f: &Facts<'_>, out: &mut Findings) {
    let Some(range) = &f.recipe.host.arch else { return };
    let packages = f.derive_packages();
    let Some((release, variant)) = derive::torch_variant(&packages) else { return };
    let Some(code) = crate::gpu_code::GpuCode::from_variant(release, variant, f.platform) else { return };
    if all_compute_capabilities().any(|cc| range.contains(&cc) && code.runs_on(cc)) {
        return;
    }
    // Known GPUs in the range, by compute capability, for the message and the fix.
    let mut gpus: std::collections::BTreeMap<ComputeCapability, Vec<&str>> =
        std::collections::BTreeMap::new();
    for g in kb::all_gpus().iter().filter(|g| range.contains(&g.compute_capability)) {
        gpus.entry(g.compute_capability).or_default().push(&g.name);
    }
    let mut ccs: Vec<ComputeCapability> = gpus.keys().copied().collect();
    if ccs.is_empty() {
        ccs.extend(range.comparisons.iter().filter(|c| matches!(c.op, Op::Ge | Op::Eq)).map(|c| c.value));
    }
    let on = if gpus.is_empty() {
        format!("compute capability {range}")
    } else {
        let models = |names: &[&str]| match names {
            [] => String::new(),
            [one] => (*one).to_owned(),
            [a, b] => format!("{a}, {b}"),
            [head, .., tail] => format!("{head} ... {tail}, {} models", names.len()),
        };
        gpus.iter()
            .take(3)
            .map(|(cc, names)| format!("{cc} ({})", models(names)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let torch = format!("torch {}+{}", release.version, variant.tag);
    let newer = (!ccs.is_empty())
        .then(|| {
            kb::torch_releases().iter().find_map(|r| {
                let v = r.variants.iter().find(|v| {
                    let c = crate::gpu_code::GpuCode::from_variant(r, v, f.platform);
                    c.is_some_and(|c| ccs.iter().all(|&cc| c.runs_on(cc)))
                })?;
                Some(format!(
                    "torch {}+{} has code for {}",
                    r.version,
                    v.tag,
                    ccs.iter().map(|cc| cc.sm()).collect::<Vec<_>>().join(", ")
                ))
            })
        })
        .flatten();
    let span_text = code.arch_set().describe();
    out.error(
        FindingKind::HostArch,
        None,
        format!(
            "[host] arch = \"{range}\" admits only GPUs that {torch} has no code for: its wheels carry {}, so \
             on {on} every kernel launch fails with \"no kernel image is available for execution on the device\"",
            code.describe()
        ),
        match newer {
            Some(n) => format!("use a torch built for these GPUs ({n}), or let [host] arch include {span_text}"),
            None => format!("let [host] arch include {span_text}, the GPUs {torch} runs on"),
        },
    );
}

/// A CUDA release newer than the knowledge base's driver table: its floor is a lower bound.
fn unknown_cuda(f: &Facts<'_>, out: &mut Findings) {
    let Some(floor) = derive::driver_floor(&f.derive_packages()) else { return };
    let Some(warning) = floor.estimated else { return };
    out.push(
        Severity::Warning,
        FindingKind::UnknownCuda,
        None,
        warning,
        Some("check the release notes of this CUDA release for its minimum driver".into()),
    );
}

/// CUDA libraries of another minor release than the rest of the stack.
fn mixed_cuda_minor(f: &Facts<'_>, out: &mut Findings) {
    let packages = f.derive_packages();
    // The runtime wheel in the stack first (the artifact), the table's build second.
    let reference = derive::cuda_runtime(&packages)
        .map(|c| c.major_minor())
        .or_else(|| f.torch.as_ref().and_then(|t| t.variant).map(|v| v.cuda.major_minor()));
    let Some((major, minor)) = reference else { return };
    let in_release: Vec<String> = f
        .packages
        .iter()
        .filter(|p| library_cuda(&p.name, &p.version) == reference)
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    let others = match in_release.len() {
        0 => format!("the rest of the stack is CUDA {major}.{minor}"),
        1..=3 => format!(
            "{} {} from CUDA {major}.{minor}",
            in_release.join(", "),
            if in_release.len() == 1 { "is" } else { "are" }
        ),
        n => format!("{} and {} more are from CUDA {major}.{minor}", in_release[..3].join(", "), n - 3),
    };
    let built = f
        .torch
        .as_ref()
        .filter(|t| t.variant.is_some())
        .map_or_else(String::new, |t| format!(" (the release {} was built with)", t.display()));
    let floor = derive::driver_floor(&packages);
    for p in &f.packages {
        let Some(lib) = library_cuda(&p.name, &p.version) else { continue };
        if Some(lib) == reference || out.blamed.contains(&p.name) {
            continue;
        }
        let consequence = if lib.0 != major {
            "libraries of one CUDA major do not load the other's (the sonames differ), so the image \
             carries two CUDA runtimes"
                .to_owned()
        } else if lib > (major, minor) {
            let newer: Option<CudaVersion> = format!("{}.{}", lib.0, lib.1).parse().ok();
            let needs = newer
                .as_ref()
                .and_then(kb::cuda_min_driver)
                .map_or_else(String::new, |row| format!(" (>= {})", row.toolkit_driver));
            let derived = floor.as_ref().map_or_else(String::new, |fl| format!(" (driver>={})", fl.driver));
            format!(
                "the image's driver requirement is derived from CUDA {major}.{minor}{derived}, but a CUDA {}.{} \
                 library has its full feature set only on a CUDA {}.{} driver{needs}; the two releases were never \
                 shipped or tested together, and an unpinned library moves with every resolution",
                lib.0, lib.1, lib.0, lib.1
            )
        } else {
            format!(
                "the CUDA {major}.{minor} libraries that load it can fail with undefined versioned symbols (as \
                 `libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4`, pytorch/pytorch issue 134929)"
            )
        };
        let pin = fix_version(f, &p.name, (major, minor))
            .map_or_else(|| format!("{}=={major}.{minor}.*", p.name), |v| format!("{}=={v}", p.name));
        out.push(
            Severity::Warning,
            FindingKind::MixedCudaMinor,
            Some(&p.name),
            format!(
                "mixed CUDA minor versions: {} is from CUDA {}.{}, while {others}{built}; {consequence}",
                f.named(p),
                lib.0,
                lib.1
            ),
            Some(format!("pin `{pin}` in [python] constraints")),
        );
    }
}

/// The version of library `name` in CUDA release `reference`: torch's own exact requirement,
/// else the component table. nvJitLink, which the table lacks for some releases, ships with the
/// same version as NVRTC (every row that lists both agrees), so NVRTC's version stands in.
fn fix_version(f: &Facts<'_>, name: &str, reference: (u64, u64)) -> Option<String> {
    if let Some(v) = f.torch.as_ref().and_then(|t| t.requires.get(name)) {
        if library_cuda(name, v) == Some(reference) {
            return Some(v.to_string());
        }
    }
    let component = library_component(name)?;
    let cuda: CudaVersion = format!("{}.{}", reference.0, reference.1).parse().ok()?;
    let row = kb::cuda_components(&cuda);
    if let Some(v) = row.and_then(|r| component_version(r, component)) {
        return Some(v.to_owned());
    }
    if component != "nvjitlink" {
        return None;
    }
    let nvrtc = f
        .packages
        .iter()
        .find(|p| {
            library_component(&p.name) == Some("cuda-nvrtc")
                && library_cuda(&p.name, &p.version) == Some(reference)
        })
        .map(|p| p.version.to_string());
    nvrtc.or_else(|| row.map(|r| r.nvrtc.clone()))
}

#[cfg(test)]
pub(super) fn disjoint_for_tests(a: &str, b: &str) -> bool {
    disjoint(&a.parse().unwrap(), &b.parse().unwrap())
}
