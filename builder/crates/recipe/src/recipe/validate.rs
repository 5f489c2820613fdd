//! Validation of the raw recipe, one function per section; every problem becomes a
//! [`Diagnostic`] and all of them are collected.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use pep508_rs::{PackageName, Requirement, VersionOrUrl};
use stackcontract::require::PLATFORMS;
use stackcontract::version::{CudaVersion, PackageVersion, PythonVersion};
use toml::Spanned;

use stackbuild_common::Diagnostic;
use stackbuild_common::Platform;

mod python;

pub(super) use python::validate_python;
pub use python::{git_dependency, git_subdirectory, url_dependency, UrlDependency};

use super::raw::{
    RawBase, RawBuild, RawCuda, RawHost, RawImage, RawPatch, RawPython, RawSource, RawWheel, S,
};
use super::BuildSection;
use super::{
    AptPackage, Base, Bootstrap, CudaSection, Distro, HostRules, ImageSection, LocalWheel, Patch,
    PatchChange, PatchTarget, PythonSection, Source, SourceOrigin, VersionRange,
};

/// Collects diagnostics while the raw recipe is validated.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
    pub(super) diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    pub(super) fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.diags.push(Diagnostic::new(self.file, self.text, span, message));
    }

    pub(super) fn error_help(
        &mut self,
        span: Range<usize>,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.diags.push(Diagnostic::new(self.file, self.text, span, message).with_help(help));
    }

    /// The 1-based line of byte `offset`.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.text.get(..offset).unwrap_or(self.text).matches('\n').count() + 1
    }

    /// The span of the text inside a string literal, so an error at byte `offset` of the
    /// string's value can point at the exact character. Falls back to the whole literal when
    /// the literal has escapes (then value offsets and file offsets differ).
    pub(super) fn inner_span(&self, s: &S, offset: usize, len: usize) -> Range<usize> {
        let span = s.span();
        let raw = self.text.get(span.clone()).unwrap_or("");
        let quote = if raw.starts_with("'''") || raw.starts_with("\"\"\"") { 3 } else { 1 };
        let inner = raw.get(quote..raw.len().saturating_sub(quote)).unwrap_or("");
        if raw.len() >= 2 * quote && inner == s.get_ref().as_str() {
            let start = span.start + quote + offset.min(inner.len());
            start..start + len.max(1).min(inner.len().saturating_sub(offset).max(1))
        } else {
            span
        }
    }

    /// Parse a spanned string with `FromStr`, reporting the error at the value.
    pub(super) fn parse<T: FromStr>(&mut self, s: &S, what: &str) -> Option<T>
    where
        T::Err: fmt::Display,
    {
        match s.get_ref().parse() {
            Ok(v) => Some(v),
            Err(e) => {
                // The contract's version errors already read "invalid <what> "<input>": why".
                let e = e.to_string();
                let message = if e.starts_with("invalid ") { e } else { format!("invalid {what}: {e}") };
                self.error(s.span(), message);
                None
            }
        }
    }
}

pub(super) fn is_name(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

pub(super) fn is_tag(s: &str) -> bool {
    s.len() <= 128
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A relative path that stays below its root: no `/` prefix, no `..`.
pub(super) fn is_contained_relative(s: &str) -> bool {
    !s.is_empty() && Path::new(s).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// An absolute path in the image without `..`.
pub(super) fn is_image_path(s: &str) -> bool {
    s.starts_with('/') && Path::new(s).components().all(|c| !matches!(c, Component::ParentDir))
}

pub(super) fn is_url(s: &str) -> bool {
    ["http://", "https://", "file://"].iter().any(|p| s.starts_with(p)) && !s.contains(char::is_whitespace)
}

pub(super) fn check_name(ctx: &mut Ctx, s: &S, what: &str) -> bool {
    if is_name(s.get_ref()) {
        true
    } else {
        ctx.error(
            s.span(),
            format!(
                "invalid {what} {:?}: expected lowercase letters, digits, `.`, `_` or `-`, \
                 starting with a letter or digit",
                s.get_ref()
            ),
        );
        false
    }
}

pub(super) fn strings(v: Option<Vec<S>>) -> Option<Vec<String>> {
    v.map(|v| v.into_iter().map(Spanned::into_inner).collect())
}

#[allow(clippy::too_many_lines)] // one check after another, each short
pub(super) fn validate_image(ctx: &mut Ctx, raw: Spanned<RawImage>) -> Option<ImageSection> {
    let raw = raw.into_inner();
    let mut ok = check_name(ctx, &raw.name, "image name");
    let tag = match raw.tag {
        Some(t) if !is_tag(t.get_ref()) => {
            ctx.error(
                t.span(),
                format!(
                    "invalid tag {:?}: expected up to 128 letters, digits, `.`, `_` or `-`, \
                     not starting with `.` or `-`",
                    t.get_ref()
                ),
            );
            ok = false;
            String::new()
        }
        Some(t) => t.into_inner(),
        None => "latest".to_owned(),
    };
    let mut platforms = Vec::new();
    match raw.platforms {
        None => platforms.push(Platform::LinuxAmd64),
        Some(list) => {
            if list.get_ref().is_empty() {
                ctx.error(list.span(), "`platforms` is empty: expected at least one platform");
                ok = false;
            }
            for p in list.get_ref() {
                match p.get_ref().parse::<Platform>() {
                    Ok(pl) if platforms.contains(&pl) => {
                        ctx.error(p.span(), format!("platform {pl} is listed twice"));
                        ok = false;
                    }
                    Ok(pl) => platforms.push(pl),
                    Err(e) => {
                        ctx.error(p.span(), e);
                        ok = false;
                    }
                }
            }
        }
    }
    if let Some(w) = &raw.workdir {
        if !is_image_path(w.get_ref()) {
            ctx.error(
                w.span(),
                format!("invalid workdir {:?}: expected an absolute path without `..`", w.get_ref()),
            );
            ok = false;
        }
    }
    if let Some(u) = &raw.user {
        let valid = |part: &str| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        let user = u.get_ref();
        let (a, b) = user.split_once(':').unwrap_or((user, "x"));
        if !valid(a) || !valid(b) {
            ctx.error(u.span(), format!("invalid user {user:?}: expected `uid[:gid]` or `name[:group]`"));
            ok = false;
        }
    }
    let mut env = BTreeMap::new();
    for (k, v) in raw.env {
        let key = k.get_ref();
        let valid = key.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            ctx.error(
                k.span(),
                format!("invalid environment variable name {key:?}: expected [A-Za-z_][A-Za-z0-9_]*"),
            );
            ok = false;
        } else if key.starts_with("STACKBUILD_") {
            ctx.error_help(
                k.span(),
                format!(
                    "environment variable {key} is reserved: stackbuild writes the STACKBUILD_* variables"
                ),
                "state host requirements in [host]",
            );
            ok = false;
        } else {
            env.insert(k.into_inner(), v.into_inner());
        }
    }
    let mut labels = BTreeMap::new();
    for (k, v) in raw.labels {
        if k.get_ref().is_empty() {
            ctx.error(k.span(), "empty label key");
            ok = false;
        } else {
            labels.insert(k.into_inner(), v.into_inner());
        }
    }
    ok.then(|| ImageSection {
        name: raw.name.into_inner(),
        tag,
        platforms,
        entrypoint: strings(raw.entrypoint),
        cmd: strings(raw.cmd),
        workdir: raw.workdir.map(Spanned::into_inner),
        user: raw.user.map(Spanned::into_inner),
        env,
        labels,
    })
}

pub(super) const BASE_KEYS: &str = "`scratch = true`, `oci = \"PATH[:TAG]\"`, `archive = \"FILE\"`, \
     `docker = \"NAME:TAG\"`, `registry = \"REF\"`, `debian = \"SUITE\"` or `ubuntu = \"SUITE\"`";

/// mmdebstrap's variants (mmdebstrap(1), `--variant`).
pub(super) const VARIANTS: &[&str] = &[
    "extract",
    "custom",
    "essential",
    "apt",
    "required",
    "minbase",
    "buildd",
    "important",
    "debootstrap",
    "-",
    "standard",
];

pub(super) fn validate_base(ctx: &mut Ctx, dir: &Path, raw: Spanned<RawBase>) -> Option<Base> {
    let table_span = raw.span();
    let raw = raw.into_inner();
    let kind = base_kind(ctx, &table_span, &raw)?;
    let ok_before = ctx.diags.len();
    let base = match kind {
        "scratch" => {
            if raw.scratch.as_ref().is_some_and(|s| !*s.get_ref()) {
                ctx.error_help(
                    raw.scratch.as_ref().map_or(table_span.clone(), Spanned::span),
                    "`scratch = false` names no base",
                    format!("write `scratch = true` or give one of {BASE_KEYS}"),
                );
            }
            Base::Scratch
        }
        "oci" => {
            let v = raw.oci?;
            nonempty(ctx, &v, "OCI layout path");
            // `PATH:TAG`, split as `stackbuild audit` splits its argument (`image_arg`).
            let text = v.get_ref();
            let stackbuild_common::ImageArg { path, tag } = stackbuild_common::ImageArg::parse_in(dir, text);
            if let Some(t) = tag.as_deref().filter(|t| !is_tag(t)) {
                ctx.error(v.span(), format!("invalid tag {t:?} in {text:?}"));
            }
            Base::Oci { path: dir.join(path), tag }
        }
        "archive" => {
            let v = raw.archive?;
            nonempty(ctx, &v, "archive path");
            Base::Archive { path: dir.join(v.get_ref()) }
        }
        "docker" => {
            let v = raw.docker?;
            nonempty(ctx, &v, "image reference");
            Base::Docker { reference: v.into_inner() }
        }
        "registry" => {
            let v = raw.registry?;
            nonempty(ctx, &v, "image reference");
            Base::Registry { reference: v.into_inner() }
        }
        _ => Base::Bootstrap(validate_bootstrap(ctx, kind, raw)?),
    };
    (ctx.diags.len() == ok_before).then_some(base)
}

/// Which of the mutually exclusive base keys `[base]` gives (exactly one, else an error), and
/// an error for each mmdebstrap key beside a base that is not bootstrapped.
fn base_kind(ctx: &mut Ctx, table_span: &Range<usize>, raw: &RawBase) -> Option<&'static str> {
    // Which of the mutually exclusive keys are present, with their spans.
    let mut chosen: Vec<(&'static str, Range<usize>)> = Vec::new();
    if let Some(s) = &raw.scratch {
        chosen.push(("scratch", s.span()));
    }
    for (key, v) in [
        ("oci", &raw.oci),
        ("archive", &raw.archive),
        ("docker", &raw.docker),
        ("registry", &raw.registry),
        ("debian", &raw.debian),
        ("ubuntu", &raw.ubuntu),
    ] {
        if let Some(v) = v {
            chosen.push((key, v.span()));
        }
    }
    chosen.sort_by_key(|(_, span)| span.start);
    let kind = match chosen.as_slice() {
        [] => {
            ctx.error_help(
                table_span.start..table_span.start,
                "[base] names no base image",
                format!("give exactly one of {BASE_KEYS}"),
            );
            return None;
        }
        [(kind, _)] => *kind,
        [(first, _), (second, span), ..] => {
            ctx.error_help(
                span.clone(),
                format!("[base] names two bases, `{first}` and `{second}`"),
                format!("give exactly one of {BASE_KEYS}"),
            );
            return None;
        }
    };
    let bootstrap = matches!(kind, "debian" | "ubuntu");
    if !bootstrap {
        for (key, span) in [
            ("packages", raw.packages.as_ref().map(Spanned::span)),
            ("mirror", raw.mirror.as_ref().map(Spanned::span)),
            ("variant", raw.variant.as_ref().map(Spanned::span)),
        ] {
            if let Some(span) = span {
                ctx.error(
                    span,
                    format!("`{key}` applies only to a `debian` or `ubuntu` base, not to `{kind}`"),
                );
            }
        }
    }
    Some(kind)
}

/// Whether `s` is a non-empty value without spaces; an error naming `what` if not.
fn nonempty(ctx: &mut Ctx, s: &S, what: &str) -> bool {
    let v = s.get_ref();
    if v.trim().is_empty() || v.contains(char::is_whitespace) {
        ctx.error(s.span(), format!("invalid {what} {v:?}: expected a non-empty value without spaces"));
        false
    } else {
        true
    }
}

/// A `debian` or `ubuntu` base (`kind`): suite, apt packages, mirror and mmdebstrap variant.
fn validate_bootstrap(ctx: &mut Ctx, kind: &str, raw: RawBase) -> Option<Bootstrap> {
    let (distro, suite) =
        if kind == "debian" { (Distro::Debian, raw.debian?) } else { (Distro::Ubuntu, raw.ubuntu?) };
    if !is_name(suite.get_ref()) {
        ctx.error(
            suite.span(),
            format!("invalid suite {:?}: expected a name such as \"bookworm\"", suite.get_ref()),
        );
    }
    let mut packages = Vec::new();
    let mut seen = BTreeSet::new();
    for p in raw.packages.map(Spanned::into_inner).unwrap_or_default() {
        match parse_apt_package(p.get_ref()) {
            Ok(pkg) => {
                if !seen.insert(pkg.name.clone()) {
                    ctx.error(p.span(), format!("apt package `{}` is listed twice", pkg.name));
                }
                packages.push(pkg);
            }
            Err(e) => ctx.error(p.span(), e),
        }
    }
    if let Some(m) = &raw.mirror {
        if !is_url(m.get_ref()) {
            ctx.error(
                m.span(),
                format!("invalid mirror {:?}: expected an http://, https:// or file:// URL", m.get_ref()),
            );
        }
    }
    let variant = match raw.variant {
        Some(v) if !VARIANTS.contains(&v.get_ref().as_str()) => {
            ctx.error(
                v.span(),
                format!(
                    "unknown mmdebstrap variant {:?}: expected one of {}",
                    v.get_ref(),
                    VARIANTS.join(", ")
                ),
            );
            String::new()
        }
        Some(v) => v.into_inner(),
        None => "apt".to_owned(),
    };
    Some(Bootstrap {
        distro,
        suite: suite.into_inner(),
        packages,
        mirror: raw.mirror.map(Spanned::into_inner),
        variant,
    })
}

/// `name` or `name=version`; names per Debian policy 5.6.1, versions per 5.6.12.
pub(super) fn parse_apt_package(s: &str) -> Result<AptPackage, String> {
    let (name, version) = match s.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (s, None),
    };
    let name_ok = name.len() >= 2
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b));
    if !name_ok {
        return Err(format!(
            "invalid apt package {s:?}: expected `name` or `name=version`, the name in lowercase letters, \
             digits, `+`, `-` and `.`"
        ));
    }
    if let Some(v) = version {
        let ok = v.bytes().next().is_some_and(|b| b.is_ascii_digit())
            && v.bytes().all(|b| b.is_ascii_alphanumeric() || b".+~:-".contains(&b));
        if !ok {
            return Err(format!(
                "invalid version {v:?} of apt package `{name}`: expected a Debian version \
                 such as \"3.11.2-6+deb12u6\""
            ));
        }
    }
    Ok(AptPackage { name: name.to_owned(), version: version.map(str::to_owned) })
}

pub(super) fn validate_cuda(ctx: &mut Ctx, raw: Spanned<RawCuda>) -> Option<CudaSection> {
    let raw = raw.into_inner();
    let version: Option<CudaVersion> = ctx.parse(&raw.version, "CUDA version");
    let cudnn = raw.cudnn.as_ref().map(|c| ctx.parse::<PackageVersion>(c, "cuDNN version"));
    match cudnn {
        Some(None) => None,
        Some(Some(c)) => Some(CudaSection { version: version?, cudnn: Some(c) }),
        None => Some(CudaSection { version: version?, cudnn: None }),
    }
}

pub(super) fn validate_sources(
    ctx: &mut Ctx,
    dir: &Path,
    raw: Vec<Spanned<RawSource>>,
) -> Vec<(Range<usize>, Source)> {
    let mut out: Vec<(Range<usize>, Source)> = Vec::new();
    for item in raw {
        let span = item.span();
        let raw = item.into_inner();
        let before = ctx.diags.len();
        check_name(ctx, &raw.name, "source name");
        if out.iter().any(|(_, s)| s.name == *raw.name.get_ref()) {
            ctx.error(raw.name.span(), format!("source `{}` is defined twice", raw.name.get_ref()));
        }
        if !is_image_path(raw.dest.get_ref()) {
            ctx.error(
                raw.dest.span(),
                format!(
                    "invalid dest {:?}: expected an absolute path in the image without `..`",
                    raw.dest.get_ref()
                ),
            );
        }
        let origin = match (&raw.git, &raw.path) {
            (Some(_), Some(p)) => {
                ctx.error_help(p.span(), "a [[source]] has both `git` and `path`", "keep one of them");
                None
            }
            (None, None) => {
                ctx.error_help(
                    span.start..span.start,
                    format!("source `{}` has neither `git` nor `path`", raw.name.get_ref()),
                    "add `git = \"URL\"` with `commit = \"<full hash>\"`, or `path = \"DIR\"`",
                );
                None
            }
            (Some(url), None) => {
                if url.get_ref().is_empty() || url.get_ref().contains(char::is_whitespace) {
                    ctx.error(url.span(), format!("invalid git URL {:?}", url.get_ref()));
                }
                match &raw.commit {
                    None => {
                        ctx.error_help(
                            url.span(),
                            format!("source `{}` from git has no `commit`", raw.name.get_ref()),
                            "add `commit = \"<40 hex digits>\"`: a branch or tag can move, a commit cannot",
                        );
                        None
                    }
                    Some(c) => {
                        let h = c.get_ref();
                        if (h.len() == 40 || h.len() == 64)
                            && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                        {
                            Some(SourceOrigin::Git { url: url.get_ref().clone(), commit: h.clone() })
                        } else {
                            ctx.error(
                                c.span(),
                                format!(
                                    "invalid commit {h:?}: expected the full commit id, \
                                     40 lowercase hex digits"
                                ),
                            );
                            None
                        }
                    }
                }
            }
            (None, Some(p)) => {
                if let Some(c) = &raw.commit {
                    ctx.error(c.span(), "`commit` applies only to a `git` source");
                }
                if p.get_ref().is_empty() {
                    ctx.error(p.span(), "empty `path`");
                }
                Some(SourceOrigin::Path { path: dir.join(p.get_ref()) })
            }
        };
        if let (Some(origin), true) = (origin, ctx.diags.len() == before) {
            let (install_wheel, editable) = install_of(ctx, raw.install.as_ref());
            let extras = validate_extras(ctx, &raw.extras, install_wheel);
            out.push((
                span,
                Source {
                    name: raw.name.into_inner(),
                    origin,
                    dest: raw.dest.into_inner(),
                    install_wheel,
                    editable,
                    extras,
                },
            ));
        }
    }
    out
}

/// `[[source]] install`: (installed as a wheel, editable).
fn install_of(ctx: &mut Ctx, install: Option<&S>) -> (bool, bool) {
    match install.map(|i| (i.get_ref().as_str(), i.span())) {
        None => (false, false),
        Some(("wheel", _)) => (true, false),
        Some(("editable", _)) => (true, true),
        Some((other, span)) => {
            ctx.error(span, format!("invalid install {other:?}: expected \"wheel\" or \"editable\""));
            (false, false)
        }
    }
}

/// `[[source]] extras`: PEP 685 names, normalized, sorted, only with an `install`.
fn validate_extras(ctx: &mut Ctx, raw: &[S], install_wheel: bool) -> Vec<String> {
    let mut extras: Vec<String> = Vec::new();
    for extra in raw {
        let text = extra.get_ref();
        match <pep508_rs::ExtraName as std::str::FromStr>::from_str(text) {
            Err(_) => {
                ctx.error(
                    extra.span(),
                    format!("invalid extra {text:?}: expected an extra's name (PEP 685)"),
                );
            }
            Ok(_) if !install_wheel => {
                ctx.error(extra.span(), "`extras` needs `install = \"wheel\"` or `\"editable\"`");
            }
            Ok(name) => extras.push(name.to_string()),
        }
    }
    extras.sort();
    extras.dedup();
    extras
}

#[allow(clippy::too_many_lines)]
pub(super) fn validate_patches(
    ctx: &mut Ctx,
    dir: &Path,
    raw: Vec<Spanned<RawPatch>>,
    sources: &[(Range<usize>, Source)],
) -> Vec<Patch> {
    let mut out: Vec<Patch> = Vec::new();
    let mut names = BTreeSet::new();
    for item in raw {
        let span = item.span();
        let raw = item.into_inner();
        let before = ctx.diags.len();
        if raw.name.get_ref().trim().is_empty() {
            ctx.error(raw.name.span(), "empty patch name");
        } else if !names.insert(raw.name.get_ref().clone()) {
            ctx.error(raw.name.span(), format!("patch `{}` is defined twice", raw.name.get_ref()));
        }
        let target = match (&raw.package, &raw.source) {
            (Some(_), Some(s)) => {
                ctx.error_help(s.span(), "a [[patch]] has both `package` and `source`", "keep one of them");
                None
            }
            (None, None) => {
                ctx.error_help(
                    span.start..span.start,
                    format!("patch `{}` names nothing to patch", raw.name.get_ref()),
                    "add `package = \"<python package>\"` or `source = \"<source name>\"`",
                );
                None
            }
            (Some(p), None) => match PackageName::from_str(p.get_ref()) {
                Ok(name) => Some(PatchTarget::Package(name)),
                Err(e) => {
                    ctx.error(p.span(), format!("invalid package name {:?}: {e}", p.get_ref()));
                    None
                }
            },
            // An editable install imports the tree at `dest`, which the patch edits; a wheel
            // install imports the wheel built from the unpatched tree.
            (None, Some(s))
                if sources
                    .iter()
                    .any(|(_, src)| src.name == *s.get_ref() && src.install_wheel && !src.editable) =>
            {
                ctx.error_help(
                    s.span(),
                    format!(
                        "source `{}` is installed as a wheel, whose build does not see patches yet",
                        s.get_ref()
                    ),
                    "install it editable (`install = \"editable\"`: the image imports the patched tree), patch \
                     the installed package instead (`package = \"<its name>\"`), or drop `install`",
                );
                None
            }
            (None, Some(s)) => {
                if sources.iter().any(|(_, src)| src.name == *s.get_ref()) {
                    Some(PatchTarget::Source(s.get_ref().clone()))
                } else {
                    let known: Vec<&str> = sources.iter().map(|(_, s)| s.name.as_str()).collect();
                    let help = if known.is_empty() {
                        "the recipe defines no [[source]]".to_owned()
                    } else {
                        format!("defined sources: {}", known.join(", "))
                    };
                    ctx.error_help(s.span(), format!("patch names unknown source `{}`", s.get_ref()), help);
                    None
                }
            }
        };
        let change = match (&raw.find, &raw.diff) {
            (Some(_), Some(d)) => {
                ctx.error_help(d.span(), "a [[patch]] has both `find` and `diff`", "keep one of them");
                None
            }
            (None, None) => {
                ctx.error_help(
                    span.start..span.start,
                    format!("patch `{}` has no change", raw.name.get_ref()),
                    "add `file`, `find`, `replace` and `count`, or `diff = \"FILE\"`",
                );
                None
            }
            (None, Some(d)) => {
                for (key, s) in [("file", &raw.file), ("replace", &raw.replace)] {
                    if let Some(s) = s {
                        ctx.error(
                            s.span(),
                            format!("`{key}` is used with `find`, not with `diff` (a diff names its files)"),
                        );
                    }
                }
                if let Some(c) = &raw.count {
                    ctx.error(c.span(), "`count` is used with `find`, not with `diff`");
                }
                if d.get_ref().is_empty() {
                    ctx.error(d.span(), "empty `diff` path");
                }
                Some(PatchChange::Diff { path: dir.join(d.get_ref()) })
            }
            (Some(find), None) => {
                let file = match &raw.file {
                    None => {
                        ctx.error_help(
                            find.span(),
                            "`find` without `file`",
                            "add `file = \"<path relative to the package's site-packages or the \
                             source root>\"`",
                        );
                        None
                    }
                    Some(f) if !is_contained_relative(f.get_ref()) => {
                        ctx.error(
                            f.span(),
                            format!("invalid file {:?}: expected a relative path without `..`", f.get_ref()),
                        );
                        None
                    }
                    Some(f) => Some(PathBuf::from(f.get_ref())),
                };
                if find.get_ref().is_empty() {
                    ctx.error(find.span(), "empty `find`: expected the text to replace");
                }
                let replace = raw.replace.as_ref().map(|r| r.get_ref().clone());
                if replace.is_none() {
                    ctx.error_help(find.span(), "`find` without `replace`", "add `replace = \"...\"`");
                }
                let count = match &raw.count {
                    None => {
                        ctx.error_help(
                            find.span(),
                            "`find` without `count`",
                            "add `count = N`, the exact number of matches expected, so a changed file fails \
                             the build instead of being patched wrongly",
                        );
                        None
                    }
                    Some(c) => match u32::try_from(*c.get_ref()) {
                        Ok(n) if n >= 1 => Some(n),
                        _ => {
                            ctx.error(
                                c.span(),
                                format!("invalid count {}: expected a positive integer", c.get_ref()),
                            );
                            None
                        }
                    },
                };
                match (file, replace, count) {
                    (Some(file), Some(replace), Some(count)) => {
                        Some(PatchChange::Replace { file, find: find.get_ref().clone(), replace, count })
                    }
                    _ => None,
                }
            }
        };
        if let (Some(target), Some(change), true) = (target, change, ctx.diags.len() == before) {
            out.push(Patch { name: raw.name.into_inner(), target, change });
        }
    }
    out
}

pub(super) fn validate_host(ctx: &mut Ctx, raw: &RawHost) -> HostRules {
    pub(super) fn range<T: FromStr + Ord>(ctx: &mut Ctx, s: Option<&S>, what: &str) -> Option<VersionRange<T>>
    where
        T::Err: fmt::Display,
    {
        let s = s?;
        let r: VersionRange<T> = ctx.parse(s, what)?;
        if r.is_satisfiable() {
            Some(r)
        } else {
            ctx.error(s.span(), format!("{what} {:?} is empty: no value satisfies it", s.get_ref()));
            None
        }
    }
    let driver = range(ctx, raw.driver.as_ref(), "driver range");
    let gpus = range(ctx, raw.gpus.as_ref(), "GPU count range");
    let arch = range(ctx, raw.arch.as_ref(), "compute capability range");
    let kernel_deny = raw.kernel_deny.iter().filter_map(|k| ctx.parse(k, "kernel release")).collect();
    let module_list = |ctx: &mut Ctx, list: &[S]| -> Vec<String> {
        let mut out = Vec::new();
        for m in list {
            let name = m.get_ref();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                ctx.error(
                    m.span(),
                    format!("invalid module name {name:?}: expected letters, digits, `_` or `-`"),
                );
            } else {
                out.push(name.clone());
            }
        }
        out
    };
    let modules = module_list(ctx, &raw.modules);
    let modules_deny = module_list(ctx, &raw.modules_deny);
    // The kernel treats `-` and `_` in module names alike (kernel/params.c, parameq).
    let norm = |s: &str| s.replace('-', "_");
    for m in &raw.modules_deny {
        if modules.iter().any(|n| norm(n) == norm(m.get_ref())) {
            ctx.error(m.span(), format!("module `{}` is both required and denied", m.get_ref()));
        }
    }
    let mut platform: Vec<String> = Vec::new();
    if let Some(value) = &raw.platform {
        let listed: Option<Vec<&str>> = match value.get_ref() {
            toml::Value::String(s) => Some(vec![s.as_str()]),
            toml::Value::Array(items) => items.iter().map(toml::Value::as_str).collect(),
            _ => None,
        };
        match listed {
            None => ctx.error(
                value.span(),
                "expected a host platform or a list of them: \"linux\", \"wsl2\", \"jetson\"",
            ),
            Some(names) => {
                for name in names {
                    let lower = name.to_ascii_lowercase();
                    if !PLATFORMS.contains(&lower.as_str()) {
                        ctx.error(
                            value.span(),
                            format!("unknown host platform {name:?}: expected linux, wsl2 or jetson"),
                        );
                    } else if !platform.contains(&lower) {
                        platform.push(lower);
                    }
                }
            }
        }
    }
    HostRules { driver, kernel_deny, modules, modules_deny, gpus, arch, platform }
}
