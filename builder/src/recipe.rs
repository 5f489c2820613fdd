//! The recipe: one TOML file that says what goes into an image.
//!
//! Parsing happens in two passes. Serde reads the file into `Raw*` structs whose leaves are
//! [`toml::Spanned`], so every value keeps its byte range in the file; then [`Recipe::parse`]
//! validates those values into the public types and reports each problem as a [`Diagnostic`]
//! that points at file, line and column with the offending line and a caret, the way rustc and
//! uv print their errors. Syntax and type errors come from `toml` (one at a time, as its parser
//! stops at the first); semantic errors are all collected, so one run shows every mistake.
//!
//! The schema is documented on [`Recipe`]; `tests/fixtures/recipes/dreamzero.toml` uses all of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use pep508_rs::{PackageName, Requirement, VersionOrUrl};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stackcontract::version::{
    ComputeCapability, CudaVersion, DriverVersion, KernelRelease, PackageVersion, PythonVersion,
};
use toml::Spanned;

// ---------------------------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------------------------

/// A validated recipe.
///
/// ```toml
/// [image]      # name, tag, platforms, entrypoint, cmd, workdir, user, env, labels
/// [base]       # exactly one of scratch/oci/archive/docker/registry/debian/ubuntu (+ apt options)
/// [python]     # version, packages, constraints, index
/// [cuda]       # version, cudnn: what the author expects, compared with the wheels later
/// [[source]]   # name, git + commit | path, dest
/// [[patch]]    # name, package | source, file + find + replace + count | diff
/// [host]       # driver, kernel_deny, modules, modules_deny, gpus, arch
/// ```
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The recipe file, as given (used in messages and to name the lock file).
    pub path: PathBuf,
    /// The directory relative paths in the recipe are resolved against.
    pub dir: PathBuf,
    /// `[image]`: the image's name and runtime configuration.
    pub image: ImageSection,
    /// `[base]`: what the image starts from.
    pub base: Base,
    /// `[python]`: the interpreter version the image must have and the packages to install.
    pub python: Option<PythonSection>,
    /// `[cuda]`: the CUDA and cuDNN versions the author expects.
    pub cuda: Option<CudaSection>,
    /// `[[source]]`: source trees copied into the image.
    pub sources: Vec<Source>,
    /// `[[patch]]`: edits applied to installed packages or sources.
    pub patches: Vec<Patch>,
    /// `[host]`: the author's rules about the host; each becomes a `STACKBUILD_REQUIRE_*`.
    pub host: HostRules,
    /// `[[audit.ignore]]`: objects whose unresolved libraries the author accepts, with why.
    pub audit_ignore: Vec<AuditIgnore>,
}

/// `[[audit.ignore]]`: an object of the image the library audit reports as a warning instead
/// of an error, because the author knows it is never loaded or degrades gracefully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditIgnore {
    /// Absolute path in the image.
    pub path: String,
    /// Why it is safe, shown with every finding it downgrades.
    pub reason: String,
}

/// `[image]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSection {
    /// Repository name, `[a-z0-9._-]`, starting with a letter or digit.
    pub name: String,
    /// Tag, as the OCI distribution spec allows (`[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).
    pub tag: String,
    /// Target platforms, in the order given, without duplicates.
    pub platforms: Vec<Platform>,
    /// `Entrypoint` of the image config.
    pub entrypoint: Option<Vec<String>>,
    /// `Cmd` of the image config.
    pub cmd: Option<Vec<String>>,
    /// `WorkingDir`: an absolute path.
    pub workdir: Option<String>,
    /// `User`: `uid[:gid]` or `name[:group]`.
    pub user: Option<String>,
    /// Environment variables (sorted by name).
    pub env: BTreeMap<String, String>,
    /// Labels (sorted by key).
    pub labels: BTreeMap<String, String>,
}

/// A target platform of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Platform {
    /// `linux/amd64`
    LinuxAmd64,
    /// `linux/arm64`
    LinuxArm64,
}

impl Platform {
    /// Every supported platform.
    pub const ALL: [Platform; 2] = [Platform::LinuxAmd64, Platform::LinuxArm64];

    /// `linux/amd64`: the OCI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "linux/amd64",
            Self::LinuxArm64 => "linux/arm64",
        }
    }

    /// The OCI `os`.
    pub fn os(self) -> &'static str {
        "linux"
    }

    /// The OCI `architecture` (`amd64`, `arm64`).
    pub fn architecture(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "amd64",
            Self::LinuxArm64 => "arm64",
        }
    }

    /// The machine name as `uname -m` and wheel tags spell it (`x86_64`, `aarch64`).
    pub fn machine(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "x86_64",
            Self::LinuxArm64 => "aarch64",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Platform {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unsupported platform {s:?}: expected \"linux/amd64\" or \"linux/arm64\""))
    }
}

impl Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `[base]`: what the image starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// `scratch = true`: an empty root file system.
    Scratch,
    /// `oci = "PATH[:TAG]"`: an OCI image layout on disk (path resolved against the recipe's dir).
    Oci {
        /// The layout directory.
        path: PathBuf,
        /// The `org.opencontainers.image.ref.name` to pick, if the layout holds several.
        tag: Option<String>,
    },
    /// `archive = "FILE"`: an OCI or `docker save` archive (path resolved against the recipe's dir).
    Archive {
        /// The archive file.
        path: PathBuf,
    },
    /// `docker = "NAME:TAG"`: an image in the local Docker daemon.
    Docker {
        /// The reference as given.
        reference: String,
    },
    /// `registry = "REF"`: an image in a registry.
    Registry {
        /// The reference as given.
        reference: String,
    },
    /// `debian = "SUITE"` or `ubuntu = "SUITE"`: a root file system built by mmdebstrap.
    Bootstrap(Bootstrap),
}

impl Base {
    /// The key that selected this base in the recipe (`scratch`, `oci`, `debian`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Scratch => "scratch",
            Self::Oci { .. } => "oci",
            Self::Archive { .. } => "archive",
            Self::Docker { .. } => "docker",
            Self::Registry { .. } => "registry",
            Self::Bootstrap(b) => b.distro.as_str(),
        }
    }
}

/// A Debian or Ubuntu root file system to bootstrap with mmdebstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    /// Debian or Ubuntu.
    pub distro: Distro,
    /// The suite (`bookworm`, `jammy`).
    pub suite: String,
    /// Packages to install, in the order given.
    pub packages: Vec<AptPackage>,
    /// The mirror; `None` uses the host's apt sources.
    pub mirror: Option<String>,
    /// The mmdebstrap variant (default `apt`).
    pub variant: String,
}

/// The distribution of a [`Bootstrap`] base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Distro {
    /// `debian = "..."`
    Debian,
    /// `ubuntu = "..."`
    Ubuntu,
}

impl Distro {
    /// `debian` or `ubuntu`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debian => "debian",
            Self::Ubuntu => "ubuntu",
        }
    }
}

/// An apt package: `name` or `name=version` (apt's own syntax for an exact version).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AptPackage {
    /// The package name.
    pub name: String,
    /// The exact version, when pinned.
    pub version: Option<String>,
}

impl fmt::Display for AptPackage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}={v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// `[python]`.
#[derive(Debug, Clone)]
pub struct PythonSection {
    /// The interpreter version the image must have (`3.11` or `3.11.2`).
    pub version: PythonVersion,
    /// Top-level requirements, each pinned with `==` or given an explicit range.
    pub packages: Vec<Requirement>,
    /// Extra constraints for the resolver.
    pub constraints: Vec<Requirement>,
    /// The index to use; `None` uses the machine's configuration.
    pub index: Option<String>,
    /// `[[python.wheel]]`: wheel files the recipe supplies itself.
    pub wheels: Vec<LocalWheel>,
    /// `bytecode = false` leaves the `.pyc` out of the image (default: written at build time,
    /// hash-based; see [`crate::bytecode`]).
    pub bytecode: bool,
}

/// `[[python.wheel]]`: a wheel file the recipe supplies itself, for builds no index this machine
/// uses carries (NVIDIA's `JetPack` torch, `PyTorch`'s CUDA 11.8 builds). It takes part in resolution
/// as a direct reference (`name @ file:///path`), its sha256 goes into the lock, and every build
/// checks the file against the lock before installing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalWheel {
    /// The file, resolved against the recipe's directory.
    pub path: PathBuf,
    /// The path as the recipe writes it (relative paths stay relative in the lock's hash).
    pub written: String,
    /// The wheel's file name.
    pub filename: String,
    /// The project name its file name gives (normalized).
    pub name: PackageName,
    /// The version its file name gives.
    pub version: PackageVersion,
    /// Its platform tags (`linux_aarch64`, `any`).
    pub platform_tags: Vec<String>,
    /// The sha256 the recipe expects, when it states one.
    pub sha256: Option<String>,
}

impl LocalWheel {
    /// Whether this wheel can be installed on `platform` (its platform tag is `any` or names the
    /// platform's machine).
    pub fn fits(&self, platform: Platform) -> bool {
        self.platform_tags.iter().any(|t| t == "any" || t.ends_with(&format!("_{}", platform.machine())))
    }
}

/// `[cuda]`: what the author expects; checked against the wheels later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaSection {
    /// The CUDA version (`12.1`).
    pub version: CudaVersion,
    /// The cuDNN version (`8.9.2.26`), as its wheel spells it.
    pub cudnn: Option<PackageVersion>,
}

/// `[[source]]`: a source tree copied into the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// A unique name, `[a-z0-9._-]`.
    pub name: String,
    /// Where the tree comes from.
    pub origin: SourceOrigin,
    /// The absolute path in the image.
    pub dest: String,
}

/// Where a [`Source`] comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOrigin {
    /// A git repository at a fixed commit.
    Git {
        /// The repository URL.
        url: String,
        /// The full commit id (40 or 64 lowercase hex digits).
        commit: String,
    },
    /// A directory on the build machine (resolved against the recipe's dir).
    Path {
        /// The directory.
        path: PathBuf,
    },
}

/// `[[patch]]`: an edit applied to an installed package or a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// A unique name, used in messages and layer history.
    pub name: String,
    /// What is patched.
    pub target: PatchTarget,
    /// The edit.
    pub change: PatchChange,
}

/// What a [`Patch`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchTarget {
    /// An installed Python package; paths are relative to its site-packages root.
    Package(PackageName),
    /// A `[[source]]` by name; paths are relative to the source root.
    Source(String),
}

/// The edit of a [`Patch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchChange {
    /// Replace `find` by `replace` in `file`, which must match exactly `count` times.
    Replace {
        /// Relative path of the file (no `..`).
        file: PathBuf,
        /// The text to find.
        find: String,
        /// Its replacement.
        replace: String,
        /// The exact number of matches expected.
        count: u32,
    },
    /// A unified diff (path resolved against the recipe's dir).
    Diff {
        /// The diff file.
        path: PathBuf,
    },
}

/// `[host]`: the author's rules about the host the image runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostRules {
    /// The driver versions allowed.
    pub driver: Option<VersionRange<DriverVersion>>,
    /// Kernel releases known to break the workload.
    pub kernel_deny: Vec<KernelRelease>,
    /// Kernel modules that must be loaded.
    pub modules: Vec<String>,
    /// Kernel modules that must not be loaded.
    pub modules_deny: Vec<String>,
    /// The number of GPUs required.
    pub gpus: Option<VersionRange<u32>>,
    /// The compute capabilities allowed.
    pub arch: Option<VersionRange<ComputeCapability>>,
    /// The kinds of host allowed (`linux`, `wsl2`, `jetson`); empty: any.
    pub platform: Vec<String>,
}

/// The host kinds `[host] platform` names, as the hook's probe tells them apart.
pub const HOST_PLATFORMS: [&str; 3] = ["linux", "wsl2", "jetson"];

impl HostRules {
    /// Whether the recipe states no host rule.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The rules as requirement expressions of the image-host contract
    /// (`stackcontract::require`), one per rule, keyed by the rule's name in `[host]`:
    /// `("driver", "driver>=525.60.13,driver<560")`, `("kernel_deny", "kernel!=5.15.0-107-generic")`,
    /// `("modules", "module=nvidia_uvm")`, `("modules_deny", "module!=nouveau")`, `("gpus",
    /// "gpus>=1")`, `("arch", "arch>=8.0,arch<=9.0")`. All factors of one expression must hold.
    pub fn expressions(&self) -> Vec<(&'static str, String)> {
        let list = |key: &str, op: &str, items: &mut dyn Iterator<Item = String>| {
            items.map(|v| format!("{key}{op}{v}")).collect::<Vec<_>>().join(",")
        };
        let mut out = Vec::new();
        if let Some(r) = &self.driver {
            out.push(("driver", r.to_factors("driver")));
        }
        if !self.kernel_deny.is_empty() {
            out.push((
                "kernel_deny",
                list("kernel", "!=", &mut self.kernel_deny.iter().map(ToString::to_string)),
            ));
        }
        if !self.modules.is_empty() {
            out.push(("modules", list("module", "=", &mut self.modules.iter().cloned())));
        }
        if !self.modules_deny.is_empty() {
            out.push(("modules_deny", list("module", "!=", &mut self.modules_deny.iter().cloned())));
        }
        if let Some(r) = &self.gpus {
            out.push(("gpus", r.to_factors("gpus")));
        }
        if let Some(r) = &self.arch {
            out.push(("arch", r.to_factors("arch")));
        }
        if !self.platform.is_empty() {
            // Alternatives are separated by spaces in the NVIDIA_REQUIRE_* language.
            let alternatives: Vec<String> = self.platform.iter().map(|p| format!("platform={p}")).collect();
            out.push(("platform", alternatives.join(" ")));
        }
        out
    }
}

/// A comparison operator of a [`VersionRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `==` (also written `=`, as `NVIDIA_REQUIRE_*` does)
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
    /// The operator's canonical spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
        }
    }
}

/// One `OP VALUE` factor of a [`VersionRange`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison<T> {
    /// The operator.
    pub op: Op,
    /// The value compared with.
    pub value: T,
}

impl<T: Ord> Comparison<T> {
    /// Whether `v` satisfies this comparison.
    pub fn matches(&self, v: &T) -> bool {
        let o = v.cmp(&self.value);
        match self.op {
            Op::Eq => o.is_eq(),
            Op::Ne => o.is_ne(),
            Op::Lt => o.is_lt(),
            Op::Le => o.is_le(),
            Op::Gt => o.is_gt(),
            Op::Ge => o.is_ge(),
        }
    }
}

/// A range written as comparisons joined by commas, all of which must hold:
/// `">=525.60.13, <560"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRange<T> {
    /// The comparisons, in the order written (never empty).
    pub comparisons: Vec<Comparison<T>>,
}

/// A [`VersionRange`] that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RangeError(pub String);

impl<T: Ord> VersionRange<T> {
    /// Whether `v` satisfies every comparison.
    pub fn contains(&self, v: &T) -> bool {
        self.comparisons.iter().all(|c| c.matches(v))
    }

    /// Whether some value could satisfy the range, treating values as dense (so `>1, <2` is
    /// satisfiable): catches `">=560, <525"` and `"==9.0, <8.0"`.
    pub fn is_satisfiable(&self) -> bool {
        if let Some(eq) = self.comparisons.iter().find(|c| c.op == Op::Eq) {
            return self.contains(&eq.value);
        }
        let lower = self
            .comparisons
            .iter()
            .filter(|c| matches!(c.op, Op::Gt | Op::Ge))
            .max_by(|a, b| a.value.cmp(&b.value).then_with(|| (a.op == Op::Gt).cmp(&(b.op == Op::Gt))));
        let upper = self
            .comparisons
            .iter()
            .filter(|c| matches!(c.op, Op::Lt | Op::Le))
            .min_by(|a, b| a.value.cmp(&b.value).then_with(|| (a.op == Op::Le).cmp(&(b.op == Op::Le))));
        match (lower, upper) {
            (Some(l), Some(u)) => match l.value.cmp(&u.value) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => l.op == Op::Ge && u.op == Op::Le && self.contains(&l.value),
                std::cmp::Ordering::Greater => false,
            },
            _ => true,
        }
    }
}

impl<T: fmt::Display> VersionRange<T> {
    /// The range as factors (all must hold) in `NVIDIA_REQUIRE_*` syntax: `driver>=525.60.13,driver<560`
    /// (equality spelled `=`, as libnvidia-container writes it).
    pub fn to_factors(&self, key: &str) -> String {
        let factors: Vec<String> = self
            .comparisons
            .iter()
            .map(|c| {
                let op = if c.op == Op::Eq { "=" } else { c.op.as_str() };
                format!("{key}{op}{}", c.value)
            })
            .collect();
        factors.join(",")
    }
}

impl<T: FromStr> FromStr for VersionRange<T>
where
    T::Err: fmt::Display,
{
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut comparisons = Vec::new();
        if s.trim().is_empty() {
            return Err(RangeError("empty range: expected comparisons such as \">=1.0, <2\"".into()));
        }
        for factor in s.split(',') {
            let factor = factor.trim();
            if factor.is_empty() {
                return Err(RangeError(format!("empty comparison in {s:?}")));
            }
            // Longest operators first, so `>=` is not read as `>` followed by `=1`.
            let ops = [
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("==", Op::Eq),
                ("!=", Op::Ne),
                (">", Op::Gt),
                ("<", Op::Lt),
                ("=", Op::Eq),
            ];
            let Some((op, rest)) = ops.iter().find_map(|(t, op)| factor.strip_prefix(t).map(|r| (*op, r)))
            else {
                return Err(RangeError(format!(
                    "expected an operator (>=, <=, >, <, ==, !=) before {factor:?}"
                )));
            };
            let rest = rest.trim();
            if rest.contains(char::is_whitespace) {
                return Err(RangeError(format!(
                    "{factor:?} holds two comparisons: separate them with a comma (a comma means AND; \
                     alternatives are not supported)"
                )));
            }
            let value = rest.parse::<T>().map_err(|e| RangeError(e.to_string()))?;
            comparisons.push(Comparison { op, value });
        }
        Ok(Self { comparisons })
    }
}

impl<T: fmt::Display> fmt::Display for VersionRange<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.comparisons.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}{}", c.op.as_str(), c.value)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One problem in a TOML file, located by line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as given.
    pub file: PathBuf,
    /// Line, 1-based.
    pub line: usize,
    /// Column in characters, 1-based.
    pub column: usize,
    /// What is wrong, and what was expected.
    pub message: String,
    /// The text of the offending line.
    pub source_line: String,
    /// How many characters the caret underlines (at least 1).
    pub width: usize,
    /// An optional hint on how to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic for the byte range `span` of `text`.
    pub fn new(file: &Path, text: &str, span: Range<usize>, message: impl Into<String>) -> Self {
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let end = floor_char_boundary(text, span.end.clamp(start, text.len()));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let source_line = text[line_start..line_end].trim_end_matches('\r').to_owned();
        let column = text[line_start..start].chars().count() + 1;
        let width = text[start..end.min(line_end)].trim_end_matches('\r').chars().count().max(1);
        // toml joins the parts of some messages with a newline ("invalid table header\nduplicate
        // key ..."); one line reads better after `FILE:LINE:COL:`.
        let message = message.into().trim().replace('\n', ": ");
        Self {
            file: file.to_owned(),
            line: text[..start].matches('\n').count() + 1,
            column,
            message,
            source_line,
            width,
            help: None,
        }
    }

    /// The same diagnostic with a hint.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// A diagnostic from a `toml` error (syntax, unknown field, wrong type, missing field).
    pub fn from_toml(file: &Path, text: &str, err: &toml::de::Error) -> Self {
        let message = friendlier_serde_message(err.message());
        Self::new(file, text, err.span().unwrap_or(0..0), message)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self.line.to_string();
        let pad = " ".repeat(number.len());
        // Keep tabs in the padding so the caret lines up under tab-indented text.
        let lead: String = self
            .source_line
            .chars()
            .take(self.column - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        writeln!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.column, self.message)?;
        writeln!(f, "{pad} |")?;
        writeln!(f, "{number} | {}", self.source_line)?;
        write!(f, "{pad} | {lead}{}", "^".repeat(self.width))?;
        if let Some(help) = &self.help {
            write!(f, "\n{pad} = help: {help}")?;
        }
        Ok(())
    }
}

/// Why a recipe could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// The file could not be read.
    #[error("{source}")]
    Read {
        /// The recipe file.
        path: PathBuf,
        /// Why: a system error, or not a regular file, or too large.
        source: crate::input::InputError,
    },
    /// The file has errors; each diagnostic points at one.
    #[error("{}", render_all(diagnostics))]
    Invalid {
        /// The recipe file.
        path: PathBuf,
        /// Every problem found, in file order.
        diagnostics: Vec<Diagnostic>,
    },
}

fn render_all(diagnostics: &[Diagnostic]) -> String {
    let mut out = diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n\n");
    if diagnostics.len() > 1 {
        out.push_str("\n\n");
        out.push_str(&diagnostics.len().to_string());
        out.push_str(" errors in the recipe");
    }
    out
}

/// Rewrite serde's type names into the words a recipe's author uses.
fn friendlier_serde_message(message: &str) -> String {
    let mut m = message.to_owned();
    for (from, to) in [
        ("expected i64", "expected an integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected a table"),
        ("expected struct", "expected a table for"),
        ("expected a boolean", "expected `true` or `false`"),
    ] {
        m = m.replace(from, to);
    }
    m
}

/// A diagnostic for a `toml` error in a recipe, in the recipe's words: a missing top-level
/// table is a missing section, and a misspelt field gets a suggestion.
fn toml_diagnostic(file: &Path, text: &str, err: &toml::de::Error) -> Diagnostic {
    let message = err.message();
    let quoted = |rest: &str| rest.split('`').nth(1).map(str::to_owned);
    let top_level = err.span().is_none_or(|s| s.start == 0 && s.end == 0);
    if let (Some(field), true) = (message.strip_prefix("missing field ").and_then(quoted), top_level) {
        return Diagnostic::new(file, text, 0..0, format!("the recipe has no [{field}] section"))
            .with_help(format!("add a [{field}] table; see the schema on `stackbuild::recipe::Recipe`"));
    }
    let diagnostic = Diagnostic::from_toml(file, text, err);
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (given, expected) = rest.split_once(", expected one of ").unwrap_or((rest, ""));
        let given = given.trim_matches('`');
        let closest = expected
            .split(", ")
            .map(|f| f.trim_matches('`'))
            .map(|f| (edit_distance(given, f), f))
            .filter(|(d, _)| *d <= 2)
            .min();
        if let Some((_, f)) = closest {
            return diagnostic.with_help(format!("did you mean `{f}`?"));
        }
    }
    diagnostic
}

/// Levenshtein distance, for "did you mean" hints on short field names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

// ---------------------------------------------------------------------------------------------
// Raw (serde) form
// ---------------------------------------------------------------------------------------------

type S = Spanned<String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecipe {
    image: Spanned<RawImage>,
    base: Spanned<RawBase>,
    python: Option<Spanned<RawPython>>,
    cuda: Option<Spanned<RawCuda>>,
    #[serde(default)]
    source: Vec<Spanned<RawSource>>,
    #[serde(default)]
    patch: Vec<Spanned<RawPatch>>,
    #[serde(default)]
    host: Option<RawHost>,
    #[serde(default)]
    audit: Option<RawAudit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default)]
    ignore: Vec<Spanned<RawAuditIgnore>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuditIgnore {
    path: S,
    reason: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawImage {
    name: S,
    tag: Option<S>,
    platforms: Option<Spanned<Vec<S>>>,
    entrypoint: Option<Vec<S>>,
    cmd: Option<Vec<S>>,
    workdir: Option<S>,
    user: Option<S>,
    #[serde(default)]
    env: BTreeMap<S, S>,
    #[serde(default)]
    labels: BTreeMap<S, S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBase {
    scratch: Option<Spanned<bool>>,
    oci: Option<S>,
    archive: Option<S>,
    docker: Option<S>,
    registry: Option<S>,
    debian: Option<S>,
    ubuntu: Option<S>,
    packages: Option<Spanned<Vec<S>>>,
    mirror: Option<S>,
    variant: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPython {
    version: S,
    #[serde(default)]
    packages: Vec<S>,
    #[serde(default)]
    constraints: Vec<S>,
    index: Option<S>,
    #[serde(default)]
    wheel: Vec<Spanned<RawWheel>>,
    bytecode: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWheel {
    path: S,
    sha256: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCuda {
    version: S,
    cudnn: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: S,
    git: Option<S>,
    path: Option<S>,
    commit: Option<S>,
    dest: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPatch {
    name: S,
    package: Option<S>,
    source: Option<S>,
    file: Option<S>,
    find: Option<S>,
    replace: Option<S>,
    count: Option<Spanned<i64>>,
    diff: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    driver: Option<S>,
    #[serde(default)]
    kernel_deny: Vec<S>,
    #[serde(default)]
    modules: Vec<S>,
    #[serde(default)]
    modules_deny: Vec<S>,
    gpus: Option<S>,
    arch: Option<S>,
    /// `"wsl2"` or `["linux", "jetson"]`.
    platform: Option<Spanned<toml::Value>>,
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// Collects diagnostics while the raw recipe is validated.
struct Ctx<'a> {
    file: &'a Path,
    text: &'a str,
    diags: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.diags.push(Diagnostic::new(self.file, self.text, span, message));
    }

    fn error_help(&mut self, span: Range<usize>, message: impl Into<String>, help: impl Into<String>) {
        self.diags.push(Diagnostic::new(self.file, self.text, span, message).with_help(help));
    }

    /// The 1-based line of byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.text.get(..offset).unwrap_or(self.text).matches('\n').count() + 1
    }

    /// The span of the text inside a string literal, so an error at byte `offset` of the
    /// string's value can point at the exact character. Falls back to the whole literal when
    /// the literal has escapes (then value offsets and file offsets differ).
    fn inner_span(&self, s: &S, offset: usize, len: usize) -> Range<usize> {
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
    fn parse<T: FromStr>(&mut self, s: &S, what: &str) -> Option<T>
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

fn is_name(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn is_tag(s: &str) -> bool {
    s.len() <= 128
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A relative path that stays below its root: no `/` prefix, no `..`.
fn is_contained_relative(s: &str) -> bool {
    !s.is_empty() && Path::new(s).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// An absolute path in the image without `..`.
fn is_image_path(s: &str) -> bool {
    s.starts_with('/') && Path::new(s).components().all(|c| !matches!(c, Component::ParentDir))
}

fn is_url(s: &str) -> bool {
    ["http://", "https://", "file://"].iter().any(|p| s.starts_with(p)) && !s.contains(char::is_whitespace)
}

fn check_name(ctx: &mut Ctx, s: &S, what: &str) -> bool {
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

fn strings(v: Option<Vec<S>>) -> Option<Vec<String>> {
    v.map(|v| v.into_iter().map(Spanned::into_inner).collect())
}

impl Recipe {
    /// Read and validate the recipe at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Recipe, RecipeError> {
        let path = path.as_ref();
        // A regular file only: a FIFO would block, /dev/zero never end, and a symlink could make
        // a parse error quote someone else's file.
        let text = crate::input::read_text(path, crate::input::MAX_TEXT, "recipe")
            .map_err(|source| RecipeError::Read { path: path.to_owned(), source })?;
        Self::parse(path, &text)
    }

    /// Validate recipe `text`; `path` names the file in messages, locates the lock file, and its
    /// parent directory anchors the recipe's relative paths.
    pub fn parse(path: impl AsRef<Path>, text: &str) -> Result<Recipe, RecipeError> {
        let path = path.as_ref();
        let invalid = |diagnostics| RecipeError::Invalid { path: path.to_owned(), diagnostics };
        let raw: RawRecipe =
            toml::from_str(text).map_err(|e| invalid(vec![toml_diagnostic(path, text, &e)]))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let mut ctx = Ctx { file: path, text, diags: Vec::new() };
        let image = validate_image(&mut ctx, raw.image);
        let base = validate_base(&mut ctx, &dir, raw.base);
        let python = raw.python.and_then(|p| validate_python(&mut ctx, &dir, p));
        let cuda = raw.cuda.and_then(|c| validate_cuda(&mut ctx, c));
        let sources = validate_sources(&mut ctx, &dir, raw.source);
        let patches = validate_patches(&mut ctx, &dir, raw.patch, &sources);
        let host = raw.host.map(|h| validate_host(&mut ctx, &h)).unwrap_or_default();
        let mut audit_ignore = Vec::new();
        for entry in raw.audit.map(|a| a.ignore).unwrap_or_default() {
            let e = entry.get_ref();
            if !e.path.get_ref().starts_with('/') || e.path.get_ref().split('/').any(|c| c == "..") {
                ctx.error(e.path.span(), "expected an absolute path in the image, without `..`");
            } else if e.reason.get_ref().trim().is_empty() {
                ctx.error(e.reason.span(), "say why this object's unresolved libraries are acceptable");
            } else {
                audit_ignore
                    .push(AuditIgnore { path: e.path.get_ref().clone(), reason: e.reason.get_ref().clone() });
            }
        }
        if !ctx.diags.is_empty() {
            let mut diags = ctx.diags;
            diags.sort_by_key(|d| (d.line, d.column));
            return Err(invalid(diags));
        }
        match (image, base) {
            (Some(image), Some(base)) => Ok(Recipe {
                path: path.to_owned(),
                dir,
                image,
                base,
                python,
                cuda,
                sources: sources.into_iter().map(|(_, s)| s).collect(),
                patches,
                host,
                audit_ignore,
            }),
            // Validation returns None only after recording a diagnostic.
            _ => Err(invalid(Vec::new())),
        }
    }

    /// The lock file next to the recipe: `recipes/x.toml` -> `recipes/x.toml.lock`.
    pub fn lock_path(&self) -> PathBuf {
        crate::lock::Lock::path_for(&self.path)
    }

    /// The targets this recipe resolves Python packages for: one per platform, when the
    /// recipe has a `[python]` section.
    pub fn targets(&self) -> Vec<crate::solve::Target> {
        self.python.as_ref().map_or_else(Vec::new, |py| {
            self.image
                .platforms
                .iter()
                .map(|&platform| crate::solve::Target::new(py.version.clone(), platform))
                .collect()
        })
    }

    /// Lowercase hex sha256 of a canonical serialization of what affects resolution: the
    /// platforms, the base, and the Python version, packages, constraints and index. The lock
    /// records it; a different hash means the lock is stale. Order of packages does not matter,
    /// and paths are taken relative to the recipe's directory, so moving the checkout does not
    /// invalidate the lock.
    pub fn input_hash(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            format: u32,
            platforms: Vec<&'static str>,
            base: BTreeMap<&'static str, serde_json::Value>,
            python: Option<CanonicalPython<'a>>,
        }
        #[derive(Serialize)]
        struct CanonicalPython<'a> {
            version: &'a str,
            packages: Vec<String>,
            constraints: Vec<String>,
            index: Option<&'a str>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            wheels: Vec<(&'a str, Option<&'a str>)>,
        }
        let rel = |p: &Path| p.strip_prefix(&self.dir).unwrap_or(p).to_string_lossy().into_owned();
        let mut base = BTreeMap::new();
        base.insert("kind", self.base.kind().into());
        match &self.base {
            Base::Scratch => {}
            Base::Oci { path, tag } => {
                base.insert("path", rel(path).into());
                base.insert("tag", tag.clone().into());
            }
            Base::Archive { path } => {
                base.insert("path", rel(path).into());
            }
            Base::Docker { reference } | Base::Registry { reference } => {
                base.insert("reference", reference.clone().into());
            }
            Base::Bootstrap(b) => {
                let mut packages: Vec<String> = b.packages.iter().map(ToString::to_string).collect();
                packages.sort();
                base.insert("suite", b.suite.clone().into());
                base.insert("packages", packages.into());
                base.insert("mirror", b.mirror.clone().into());
                base.insert("variant", b.variant.clone().into());
            }
        }
        let sorted = |reqs: &[Requirement]| {
            let mut v: Vec<String> = reqs.iter().map(ToString::to_string).collect();
            v.sort();
            v
        };
        let mut platforms: Vec<&'static str> = self.image.platforms.iter().map(|p| p.as_str()).collect();
        platforms.sort_unstable();
        let canonical = Canonical {
            format: 1,
            platforms,
            base,
            python: self.python.as_ref().map(|py| CanonicalPython {
                version: py.version.as_str(),
                packages: sorted(&py.packages),
                constraints: sorted(&py.constraints),
                index: py.index.as_deref(),
                wheels: py.wheels.iter().map(|w| (w.written.as_str(), w.sha256.as_deref())).collect(),
            }),
        };
        // Serializing plain structs, strings and a BTreeMap cannot fail.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }
}

#[allow(clippy::too_many_lines)] // one check after another, each short
fn validate_image(ctx: &mut Ctx, raw: Spanned<RawImage>) -> Option<ImageSection> {
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

const BASE_KEYS: &str = "`scratch = true`, `oci = \"PATH[:TAG]\"`, `archive = \"FILE\"`, \
     `docker = \"NAME:TAG\"`, `registry = \"REF\"`, `debian = \"SUITE\"` or `ubuntu = \"SUITE\"`";

/// mmdebstrap's variants (mmdebstrap(1), `--variant`).
const VARIANTS: &[&str] = &[
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

#[allow(clippy::too_many_lines)]
fn validate_base(ctx: &mut Ctx, dir: &Path, raw: Spanned<RawBase>) -> Option<Base> {
    let table_span = raw.span();
    let raw = raw.into_inner();
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
    let nonempty = |ctx: &mut Ctx, s: &S, what: &str| {
        let v = s.get_ref();
        if v.trim().is_empty() || v.contains(char::is_whitespace) {
            ctx.error(s.span(), format!("invalid {what} {v:?}: expected a non-empty value without spaces"));
            false
        } else {
            true
        }
    };
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
            // `PATH:TAG`: the tag is after the last `:` when no `/` follows it.
            let text = v.get_ref();
            let (path, tag) = match text.rsplit_once(':') {
                Some((p, t)) if !t.contains('/') && !p.is_empty() => {
                    if !is_tag(t) {
                        ctx.error(v.span(), format!("invalid tag {t:?} in {text:?}"));
                    }
                    (p, Some(t.to_owned()))
                }
                _ => (text.as_str(), None),
            };
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
        _ => {
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
                        format!(
                            "invalid mirror {:?}: expected an http://, https:// or file:// URL",
                            m.get_ref()
                        ),
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
            Base::Bootstrap(Bootstrap {
                distro,
                suite: suite.into_inner(),
                packages,
                mirror: raw.mirror.map(Spanned::into_inner),
                variant,
            })
        }
    };
    (ctx.diags.len() == ok_before).then_some(base)
}

/// `name` or `name=version`; names per Debian policy 5.6.1, versions per 5.6.12.
fn parse_apt_package(s: &str) -> Result<AptPackage, String> {
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

fn validate_python(ctx: &mut Ctx, dir: &Path, raw: Spanned<RawPython>) -> Option<PythonSection> {
    let raw = raw.into_inner();
    let before = ctx.diags.len();
    let version: Option<PythonVersion> = ctx.parse(&raw.version, "Python version");
    if let Some(v) = &version {
        if v.part(0) != 3 {
            ctx.error(raw.version.span(), format!("unsupported Python version {v}: expected 3.x"));
        }
    }
    let mut packages = Vec::new();
    let mut seen: BTreeMap<PackageName, usize> = BTreeMap::new();
    for p in &raw.packages {
        let Some(req) = parse_requirement(ctx, p) else { continue };
        let unpinned = match &req.version_or_url {
            None => true,
            Some(VersionOrUrl::VersionSpecifier(specs)) => specs.is_empty(),
            Some(VersionOrUrl::Url(_)) => false,
        };
        if unpinned {
            ctx.error_help(
                p.span(),
                format!(
                    "`{}` is not pinned: top-level packages need `==VERSION` or an explicit range",
                    req.name
                ),
                format!("write e.g. \"{}==1.2.3\" or \"{}>=1.2, <2\"", req.name, req.name),
            );
        }
        let line = ctx.line_of(p.span().start);
        if let Some(first) = seen.insert(req.name.clone(), line) {
            ctx.error(p.span(), format!("package `{}` is listed twice (first on line {first})", req.name));
        }
        packages.push(req);
    }
    let mut constraints = Vec::new();
    for c in &raw.constraints {
        if let Some(req) = parse_requirement(ctx, c) {
            constraints.push(req);
        }
    }
    if let Some(i) = &raw.index {
        if !is_url(i.get_ref()) {
            ctx.error(
                i.span(),
                format!("invalid index {:?}: expected an http://, https:// or file:// URL", i.get_ref()),
            );
        }
    }
    let mut wheels: Vec<LocalWheel> = Vec::new();
    for w in &raw.wheel {
        let Some(wheel) = validate_wheel(ctx, dir, w.get_ref()) else { continue };
        if let Some(line) = seen.get(&wheel.name) {
            ctx.error_help(
                w.get_ref().path.span(),
                format!("`{}` is also listed in packages (line {line})", wheel.name),
                "a package comes either from the index or from a [[python.wheel]]: remove one",
            );
        } else if wheels.iter().any(|o| o.name == wheel.name && o.platform_tags == wheel.platform_tags) {
            ctx.error(
                w.get_ref().path.span(),
                format!("a second wheel of `{}` for the same platform", wheel.name),
            );
        }
        wheels.push(wheel);
    }
    (ctx.diags.len() == before).then_some(PythonSection {
        version: version?,
        packages,
        constraints,
        index: raw.index.map(Spanned::into_inner),
        wheels,
        bytecode: raw.bytecode.unwrap_or(true),
    })
}

fn validate_wheel(ctx: &mut Ctx, dir: &Path, raw: &RawWheel) -> Option<LocalWheel> {
    let written = raw.path.get_ref();
    // A path is handed to the resolver; a newline in it must never become a line of its own.
    if let Some(c) = written.chars().find(|c| c.is_control()) {
        ctx.error_help(
            raw.path.span(),
            format!("the wheel path holds the control character {c:?}"),
            "a file name has no control characters; spaces and `#` are fine",
        );
        return None;
    }
    let filename = Path::new(written).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let Some(parsed) = crate::fetch::parse_wheel_name(filename) else {
        ctx.error_help(
            raw.path.span(),
            format!("{written:?} is not a wheel file name"),
            "expected NAME-VERSION-PYTHON-ABI-PLATFORM.whl (PEP 427), as the wheel was published",
        );
        return None;
    };
    let sha256 = match &raw.sha256 {
        Some(h) if h.get_ref().len() != 64 || !h.get_ref().bytes().all(|b| b.is_ascii_hexdigit()) => {
            ctx.error(h.span(), "expected 64 hex digits (the file's sha256)");
            return None;
        }
        Some(h) => Some(h.get_ref().to_ascii_lowercase()),
        None => None,
    };
    Some(LocalWheel {
        path: dir.join(written),
        written: written.clone(),
        filename: filename.to_owned(),
        name: parsed.name,
        version: parsed.version,
        platform_tags: parsed.platform,
        sha256,
    })
}

/// A PEP 508 requirement from the index (no URL), with the parser's error pointed at the
/// exact character inside the string.
fn parse_requirement(ctx: &mut Ctx, s: &S) -> Option<Requirement> {
    match Requirement::<pep508_rs::VerbatimUrl>::from_str(s.get_ref()) {
        Ok(req) => {
            if let Some(VersionOrUrl::Url(_)) = req.version_or_url {
                ctx.error_help(
                    s.span(),
                    format!("`{}` names a URL: packages come from the index as wheels", req.name),
                    "give a version (`name==1.2.3`) or use a [[source]]",
                );
                return None;
            }
            Some(req)
        }
        Err(e) => {
            let span = ctx.inner_span(s, e.start, e.len);
            ctx.error(span, format!("invalid requirement {:?}: {}", s.get_ref(), e.message));
            None
        }
    }
}

fn validate_cuda(ctx: &mut Ctx, raw: Spanned<RawCuda>) -> Option<CudaSection> {
    let raw = raw.into_inner();
    let version: Option<CudaVersion> = ctx.parse(&raw.version, "CUDA version");
    let cudnn = raw.cudnn.as_ref().map(|c| ctx.parse::<PackageVersion>(c, "cuDNN version"));
    match cudnn {
        Some(None) => None,
        Some(Some(c)) => Some(CudaSection { version: version?, cudnn: Some(c) }),
        None => Some(CudaSection { version: version?, cudnn: None }),
    }
}

fn validate_sources(ctx: &mut Ctx, dir: &Path, raw: Vec<Spanned<RawSource>>) -> Vec<(Range<usize>, Source)> {
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
            out.push((span, Source { name: raw.name.into_inner(), origin, dest: raw.dest.into_inner() }));
        }
    }
    out
}

#[allow(clippy::too_many_lines)]
fn validate_patches(
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

fn validate_host(ctx: &mut Ctx, raw: &RawHost) -> HostRules {
    fn range<T: FromStr + Ord>(ctx: &mut Ctx, s: Option<&S>, what: &str) -> Option<VersionRange<T>>
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
                    if !HOST_PLATFORMS.contains(&lower.as_str()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = "tests/fixtures/recipes";

    fn fixture(name: &str) -> (PathBuf, String) {
        let rel = Path::new(FIXTURES).join(name);
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel)).unwrap();
        (rel, text)
    }

    /// The rendered errors of a bad fixture, with the path relative to the crate so the
    /// snapshot does not depend on where the checkout is.
    fn errors(name: &str) -> String {
        let (rel, text) = fixture(name);
        match Recipe::parse(&rel, &text) {
            Ok(_) => panic!("{name} parsed"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_wheel_path_with_a_control_character_is_refused_where_it_is_written() {
        let text = "[image]\nname = \"j\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
                    [[python.wheel]]\npath = \"w/x\\n-r /etc/shadow/t-1.0-py3-none-any.whl\"\n";
        let err = Recipe::parse("r.toml", text).unwrap_err().to_string();
        assert!(err.contains("r.toml:8:8") && err.contains("control character '\\n'"), "{err}");
        assert!(!err.contains("root:"), "{err}");
        // Spaces and `#` are a path's business.
        let ok = text.replace("w/x\\n-r /etc/shadow/", "my wheels #2/");
        let r = Recipe::parse("r.toml", &ok).unwrap();
        assert_eq!(r.python.unwrap().wheels[0].path, Path::new("./my wheels #2/t-1.0-py3-none-any.whl"));
    }

    #[test]
    fn recipe_wheels_and_host_platforms() {
        let r = Recipe::parse(
            "dir/r.toml",
            "[image]\nname = \"j\"\nplatforms = [\"linux/arm64\"]\n[base]\nscratch = true\n\
             [python]\nversion = \"3.10\"\n[[python.wheel]]\n\
             path = \"w/torch-2.3.0-cp310-cp310-linux_aarch64.whl\"\nsha256 = \"AB{}\"\n\
             [host]\nplatform = \"Jetson\"\n"
                .replace("{}", &"0".repeat(62))
                .as_str(),
        )
        .unwrap();
        let w = &r.python.as_ref().unwrap().wheels[0];
        assert_eq!((w.name.as_ref(), w.version.to_string().as_str()), ("torch", "2.3.0"));
        assert_eq!(w.path, Path::new("dir/w/torch-2.3.0-cp310-cp310-linux_aarch64.whl"));
        assert_eq!(w.sha256.as_deref(), Some(format!("ab{}", "0".repeat(62)).as_str()));
        assert!(w.fits(Platform::LinuxArm64) && !w.fits(Platform::LinuxAmd64));
        assert_eq!(r.host.platform, ["jetson"]);
        assert_eq!(r.host.expressions(), [("platform", "platform=jetson".to_owned())]);
        let two = Recipe::parse(
            "r.toml",
            "[image]\nname = \"w\"\n[base]\nscratch = true\n[host]\nplatform = [\"linux\", \"wsl2\"]\n",
        )
        .unwrap();
        assert_eq!(two.host.expressions(), [("platform", "platform=linux platform=wsl2".to_owned())]);
    }

    #[test]
    fn parses_the_full_schema() {
        let r = Recipe::load(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURES).join("dreamzero.toml"))
            .unwrap();
        assert_eq!(r.image.name, "dreamzero");
        assert_eq!(r.image.tag, "torch2.1.0-cu121");
        assert_eq!(r.image.platforms, [Platform::LinuxAmd64]);
        assert_eq!(r.image.entrypoint, Some(vec![]));
        assert_eq!(r.image.cmd, Some(vec!["python3".to_owned()]));
        assert_eq!(r.image.workdir.as_deref(), Some("/workspace"));
        assert_eq!(r.image.user.as_deref(), Some("0:0"));
        assert_eq!(r.image.env["HF_HOME"], "/workspace/.cache/huggingface");
        assert_eq!(r.image.labels.len(), 1);
        let Base::Bootstrap(b) = &r.base else { panic!("{:?}", r.base) };
        assert_eq!(
            (b.distro, b.suite.as_str(), b.variant.as_str(), b.mirror.as_deref()),
            (Distro::Debian, "bookworm", "apt", None)
        );
        assert_eq!(
            b.packages[1],
            AptPackage { name: "python3.11".into(), version: Some("3.11.2-6+deb12u6".into()) }
        );
        let py = r.python.as_ref().unwrap();
        assert_eq!(py.version.as_str(), "3.11");
        let pkgs: Vec<String> = py.packages.iter().map(ToString::to_string).collect();
        assert_eq!(pkgs[0], "torch==2.1.0");
        assert_eq!(pkgs[2], "numpy<2");
        assert_eq!(py.packages[4].name.as_ref(), "transformers");
        assert_eq!(py.constraints.len(), 1);
        assert_eq!(py.index, None);
        let cuda = r.cuda.as_ref().unwrap();
        assert_eq!(
            (cuda.version.as_str(), cuda.cudnn.as_ref().map(ToString::to_string)),
            ("12.1", Some("8.9.2.26".into()))
        );
        assert_eq!(r.sources.len(), 2);
        assert_eq!(
            r.sources[0].origin,
            SourceOrigin::Git {
                url: "https://example.invalid/dreamzero0/dreamzero.git".into(),
                commit: "0123456789abcdef0123456789abcdef01234567".into()
            }
        );
        assert_eq!(r.sources[1].origin, SourceOrigin::Path { path: r.dir.join("../tools") });
        assert_eq!(r.patches[0].target, PatchTarget::Package("transformers".parse().unwrap()));
        assert_eq!(
            r.patches[0].change,
            PatchChange::Replace {
                file: "transformers/modeling_utils.py".into(),
                find: "is_torch_sdpa_available()".into(),
                replace: "False".into(),
                count: 1
            }
        );
        assert_eq!(
            r.patches[1].change,
            PatchChange::Diff { path: r.dir.join("patches/dreamzero-config.diff") }
        );
        assert!(r.dir.join("patches/dreamzero-config.diff").is_file());
        let h = &r.host;
        assert_eq!(h.driver.as_ref().unwrap().to_string(), ">=525.60.13, <560");
        assert!(h.driver.as_ref().unwrap().contains(&"535.104.05".parse().unwrap()));
        assert!(!h.driver.as_ref().unwrap().contains(&"560.28.03".parse().unwrap()));
        assert_eq!(h.kernel_deny[0].as_str(), "5.15.0-107-generic");
        assert_eq!(
            (h.modules.as_slice(), h.modules_deny.as_slice()),
            (&["nvidia_uvm".to_owned()][..], &["nouveau".to_owned()][..])
        );
        assert!(h.gpus.as_ref().unwrap().contains(&1) && !h.gpus.as_ref().unwrap().contains(&0));
        let arch = h.arch.as_ref().unwrap();
        assert!(
            arch.contains(&ComputeCapability::new(8, 9)) && !arch.contains(&ComputeCapability::new(10, 0))
        );
        let exprs = h.expressions();
        let text: Vec<String> = exprs.iter().map(|(k, e)| format!("{k}: {e}")).collect();
        assert_eq!(
            text,
            [
                "driver: driver>=525.60.13,driver<560",
                "kernel_deny: kernel!=5.15.0-107-generic",
                "modules: module=nvidia_uvm",
                "modules_deny: module!=nouveau",
                "gpus: gpus>=1",
                "arch: arch>=8.0,arch<=9.0",
            ]
        );
        // The hook's parser reads every one of them.
        for (_, e) in &exprs {
            stackcontract::require::Expr::parse(e).unwrap();
        }
        assert_eq!(r.targets().len(), 1);
        assert_eq!(r.targets()[0].to_string(), "cp311/x86_64-manylinux_2_28");
        assert_eq!(r.input_hash().len(), 64);
    }

    #[test]
    fn defaults() {
        let (rel, text) = fixture("minimal.toml");
        let r = Recipe::parse(&rel, &text).unwrap();
        assert_eq!(r.image.tag, "latest");
        assert_eq!(r.image.platforms, [Platform::LinuxAmd64]);
        assert_eq!((r.image.cmd.as_ref(), r.image.entrypoint.as_ref()), (None, None));
        assert_eq!(r.base, Base::Scratch);
        assert!(r.python.is_none() && r.cuda.is_none() && r.sources.is_empty() && r.patches.is_empty());
        assert!(r.host.is_empty());
        assert!(r.targets().is_empty());
        assert_eq!(r.dir, Path::new(FIXTURES));
        assert_eq!(Recipe::parse("x.toml", &text).unwrap().dir, Path::new("."));
    }

    #[test]
    fn bases() {
        let base = |b: &str| {
            let text = format!("[image]\nname = \"x\"\n[base]\n{b}\n");
            Recipe::parse("r/x.toml", &text).map(|r| r.base)
        };
        assert_eq!(
            base("oci = \"layouts/debian:12\"").unwrap(),
            Base::Oci { path: "r/layouts/debian".into(), tag: Some("12".into()) }
        );
        assert_eq!(
            base("oci = \"/srv/layout\"").unwrap(),
            Base::Oci { path: "/srv/layout".into(), tag: None }
        );
        assert_eq!(base("archive = \"base.tar\"").unwrap(), Base::Archive { path: "r/base.tar".into() });
        assert_eq!(
            base("docker = \"debian:bookworm\"").unwrap(),
            Base::Docker { reference: "debian:bookworm".into() }
        );
        assert_eq!(
            base("registry = \"localhost:5000/base:1\"").unwrap(),
            Base::Registry { reference: "localhost:5000/base:1".into() }
        );
        let Base::Bootstrap(b) =
            base("ubuntu = \"jammy\"\nmirror = \"http://mirror.invalid/ubuntu\"").unwrap()
        else {
            panic!()
        };
        assert_eq!((b.distro, b.mirror.as_deref()), (Distro::Ubuntu, Some("http://mirror.invalid/ubuntu")));
        assert!(base("scratch = false").is_err());
        assert!(base("docker = \"x:1\"\npackages = [\"git\"]").is_err());
        assert!(base("").is_err());
    }

    #[test]
    fn ranges() {
        let r: VersionRange<DriverVersion> = ">= 525.60.13,<560".parse().unwrap();
        assert_eq!(r.to_string(), ">=525.60.13, <560");
        let r: VersionRange<u32> = "=2".parse().unwrap();
        assert_eq!(r.comparisons[0].op, Op::Eq);
        assert!(r.contains(&2) && !r.contains(&1));
        for bad in ["", "525", ">=525,", ">=525 <560", ">=x"] {
            assert!(bad.parse::<VersionRange<DriverVersion>>().is_err(), "{bad}");
        }
        let sat = |s: &str| s.parse::<VersionRange<ComputeCapability>>().unwrap().is_satisfiable();
        assert!(sat(">=8.0, <=9.0") && sat(">=8.0, <=8.0") && sat("!=8.0") && sat("==8.6, >=8.0"));
        assert!(
            !sat(">=9.0, <8.0") && !sat(">8.0, <=8.0") && !sat("==7.5, >=8.0") && !sat(">=8.0, <=8.0, !=8.0")
        );
    }

    #[test]
    fn input_hash_tracks_resolution_inputs() {
        let (rel, text) = fixture("dreamzero.toml");
        let h = Recipe::parse(&rel, &text).unwrap().input_hash();
        let with = |from: &str, to: &str| {
            assert!(text.contains(from), "{from}");
            Recipe::parse(&rel, &text.replace(from, to)).unwrap().input_hash()
        };
        assert_eq!(with("cmd = [\"python3\"]", "cmd = [\"bash\"]"), h);
        assert_eq!(with("count = 1", "count = 2"), h);
        assert_eq!(with("driver = \">=525.60.13, <560\"", "driver = \">=530\""), h);
        assert_ne!(with("torch==2.1.0", "torch==2.1.1"), h);
        assert_ne!(with("numpy<2", "numpy<1.27"), h);
        assert_ne!(with("triton==2.1.0", "triton==2.1.1"), h);
        assert_ne!(with("version = \"3.11\"", "version = \"3.10\""), h);
        assert_ne!(with("\"ffmpeg\"", "\"ffmpeg\", \"git\""), h);
        assert_ne!(with("[\"linux/amd64\"]", "[\"linux/amd64\", \"linux/arm64\"]"), h);
    }

    #[test]
    fn diagnostics_point_at_the_character() {
        let text = "[image]\nname = \"x\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
                    packages = [\"numpy<<2\"]\n";
        let Err(RecipeError::Invalid { diagnostics, .. }) = Recipe::parse("r.toml", text) else { panic!() };
        let d = &diagnostics[0];
        assert_eq!((d.line, d.column), (7, 19), "{d}");
        // With escapes in the literal, the whole string is underlined instead.
        let text = text.replace("\"numpy<<2\"", "\"num\\u0070y<<2\"");
        let Err(RecipeError::Invalid { diagnostics, .. }) = Recipe::parse("r.toml", &text) else { panic!() };
        assert_eq!((diagnostics[0].column, diagnostics[0].width), (13, 15));
        // Tabs are kept in the caret line, so it lines up.
        let text = "[image]\n\tname = 3\n[base]\nscratch = true\n";
        let e = Recipe::parse("r.toml", text).unwrap_err().to_string();
        assert!(e.ends_with("2 | \tname = 3\n  | \t       ^"), "{e}");
    }

    #[test]
    fn bytecode_is_on_unless_the_recipe_turns_it_off() {
        let text = "[image]\nname = \"b\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n";
        assert!(Recipe::parse("r.toml", text).unwrap().python.unwrap().bytecode);
        let off = format!("{text}bytecode = false\n");
        assert!(!Recipe::parse("r.toml", &off).unwrap().python.unwrap().bytecode);
        let on = format!("{text}bytecode = true\n");
        assert!(Recipe::parse("r.toml", &on).unwrap().python.unwrap().bytecode);
        // Not a boolean: refused where it is written.
        let bad = format!("{text}bytecode = \"no\"\n");
        let e = Recipe::parse("r.toml", &bad).unwrap_err().to_string();
        assert!(e.contains("r.toml:7:12") && e.contains("expected `true` or `false`"), "{e}");
    }

    #[test]
    fn missing_file() {
        let e = Recipe::load("/nonexistent/recipe.toml").unwrap_err();
        assert!(matches!(e, RecipeError::Read { .. }));
        assert!(e.to_string().starts_with("reading recipe /nonexistent/recipe.toml: "));
    }

    macro_rules! error_snapshots {
        ($($test:ident => $file:literal,)*) => {$(
            #[test]
            fn $test() {
                insta::assert_snapshot!(errors($file));
            }
        )*};
    }

    error_snapshots! {
        error_syntax => "bad-syntax.toml",
        error_unknown_field => "bad-unknown-field.toml",
        error_wrong_type => "bad-type.toml",
        error_missing_section => "bad-missing-section.toml",
        error_invalid_requirement => "bad-requirement.toml",
        error_packages => "bad-packages.toml",
        error_platform => "bad-platform.toml",
        error_patch_without_count => "bad-patch-count.toml",
        error_source_git_and_path => "bad-source-both.toml",
        error_two_bases => "bad-base.toml",
        error_host_rules => "bad-host.toml",
        error_recipe_wheels => "bad-wheel.toml",
        error_many => "bad-many.toml",
    }
}
