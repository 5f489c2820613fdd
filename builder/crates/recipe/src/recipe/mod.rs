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

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pep508_rs::{PackageName, Requirement};
use stackcontract::require::{Expr, Factor, Key, Op, Term, Value};
use stackcontract::version::{
    ComputeCapability, CudaVersion, DriverVersion, KernelRelease, PackageVersion, PythonVersion,
};

use stackbuild_common::Diagnostic;
use stackbuild_common::Platform;

pub use self::lock_format::{lock_format_of_name, LockFormat};
use self::raw::RawRecipe;
use self::validate::{
    validate_base, validate_cuda, validate_host, validate_image, validate_patches, validate_python,
    validate_sources, Ctx,
};

mod hash;
mod lock_format;
mod raw;
mod validate;
pub use self::validate::{git_dependency, git_subdirectory, url_dependency, UrlDependency};

#[cfg(test)]
mod tests;

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

#[cfg(test)]
/// The recipe format as a JSON Schema (draft 2020-12), generated from the types serde reads a
/// recipe into: what `recipes/recipe.schema.json` holds, for editors (taplo, Even Better TOML)
/// and validators. It says the shape; [`Recipe::parse`] says the rest (versions, exclusive
/// fields) with the file, line and column.
pub(crate) fn json_schema() -> String {
    let mut schema = schemars::schema_for!(raw::RawRecipe);
    schema.insert("title".into(), "stackbuild recipe".into());
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema serializes");
    text.push('\n');
    text
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
    /// Requirements that replace every requirement of their name in the graph (uv's
    /// `--override`).
    pub overrides: Vec<Requirement>,
    /// The index to use; `None` uses the machine's configuration.
    pub index: Option<String>,
    /// `extra_index`: more indexes (pip's and uv's `--extra-index-url`).
    pub extra_index: Vec<String>,
    /// `find_links`: directories (absolute) or URLs of wheels (`--find-links`).
    pub find_links: Vec<String>,
    /// `[[python.wheel]]`: wheel files the recipe supplies itself.
    pub wheels: Vec<LocalWheel>,
    /// `bytecode = false` leaves the `.pyc` out of the image (default: written at build time,
    /// hash-based; see `bytecode`).
    pub bytecode: bool,
    /// `lock = "uv.lock"` or `"pylock.toml"`: the project's own lock, whose wheels the image
    /// installs as they are, without resolving (the given-lock reader of the Python stage); resolved against the
    /// recipe's directory.
    pub lock: Option<PathBuf>,
    /// `[python.build]`: how packages without a wheel are built.
    pub build: BuildSection,
}

/// `[python.build]`: how packages that have no wheel for the image are built from source, in a
/// sandbox (`stackbuild-wheelbuild`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildSection {
    /// Debian packages of the build root besides the base's and the defaults.
    pub packages: Vec<String>,
    /// Never built from source.
    pub no_build: Vec<PackageName>,
    /// Built with the image's locked wheels importable, not in an isolated environment.
    pub no_isolation: Vec<PackageName>,
    /// Build requirements a package does not declare, by package.
    pub extra_requires: BTreeMap<PackageName, Vec<Requirement>>,
    /// A source package's dependencies, given instead of prepared (uv's `dependency-metadata`).
    pub dependency_metadata: BTreeMap<PackageName, Vec<Requirement>>,
    /// Environment variables of a package's build, by package (`[python.build.env]`).
    pub env: BTreeMap<PackageName, BTreeMap<String, String>>,
    /// `TORCH_CUDA_ARCH_LIST` for CUDA extensions.
    pub cuda_arch_list: Option<String>,
    /// Memory cap of one build, MiB.
    pub memory_mib: Option<u64>,
    /// Time cap of one build, seconds.
    pub timeout_s: Option<u64>,
    /// `MAX_JOBS`.
    pub jobs: Option<u32>,
}

/// Where Python packages are looked up, as handed to uv and pip.
#[derive(Debug, Clone, Copy, Default)]
pub struct IndexSources<'a> {
    /// `index` (`--index-url`); `None`: the machine's configuration.
    pub index: Option<&'a str>,
    /// `extra_index` (`--extra-index-url`).
    pub extra: &'a [String],
    /// `find_links` (`--find-links`).
    pub find_links: &'a [String],
}

impl PythonSection {
    /// A section of `packages` for `version` that takes its indexes from `like` (none: the
    /// machine's), with nothing else: no wheels, no lock, no bytecode, no build settings. What
    /// a resolution of build requirements, or a test, needs.
    pub fn of(version: PythonVersion, packages: Vec<Requirement>, like: Option<&Self>) -> Self {
        Self {
            version,
            packages,
            constraints: Vec::new(),
            overrides: Vec::new(),
            index: like.and_then(|l| l.index.clone()),
            extra_index: like.map(|l| l.extra_index.clone()).unwrap_or_default(),
            find_links: like.map(|l| l.find_links.clone()).unwrap_or_default(),
            wheels: Vec::new(),
            bytecode: false,
            lock: None,
            build: BuildSection::default(),
        }
    }

    /// The indexes and wheel directories of this section.
    pub fn sources(&self) -> IndexSources<'_> {
        IndexSources { index: self.index.as_deref(), extra: &self.extra_index, find_links: &self.find_links }
    }
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
    /// `install = "wheel"` or `"editable"`: the tree is a Python project, also built into a
    /// wheel and installed with its dependencies.
    pub install_wheel: bool,
    /// `install = "editable"`: that wheel is the backend's editable one (PEP 660), built with the
    /// project at `dest`, so the image imports the tree at `dest` (a development image: edit the
    /// tree in a bind mount, no reinstall).
    pub editable: bool,
    /// `extras = [...]`: the project's optional dependencies installed with it, normalized
    /// (PEP 685), sorted.
    pub extras: Vec<String>,
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

impl HostRules {
    /// Whether the recipe states no host rule.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The rules as requirement expressions of the image-host contract
    /// (`stackcontract::require`), one per rule, keyed by the rule's name in `[host]`:
    /// `("driver", "driver>=525.60.13,driver<560")`, `("kernel_deny", "kernel!=5.15.0-107-generic")`,
    /// `("modules", "module=nvidia_uvm")`, `("modules_deny", "module!=nouveau")`, `("gpus",
    /// "gpus>=1")`, `("arch", "arch>=8.0,arch<=9.0")`. All factors of one expression must hold;
    /// `platform` lists alternatives.
    pub fn expressions(&self) -> Vec<(&'static str, Expr)> {
        let all = |factors: Vec<Factor>| Expr(vec![Term(factors)]);
        let mut out = Vec::new();
        if let Some(r) = &self.driver {
            out.push(("driver", all(r.to_factors(Key::Driver))));
        }
        if !self.kernel_deny.is_empty() {
            let factors = self.kernel_deny.iter().map(|k| Factor::new(Key::Kernel, Op::Ne, k.clone()));
            out.push(("kernel_deny", all(factors.collect())));
        }
        if !self.modules.is_empty() {
            let factors = self.modules.iter().map(|m| Factor::name(Key::Module, Op::Eq, m));
            out.push(("modules", all(factors.collect())));
        }
        if !self.modules_deny.is_empty() {
            let factors = self.modules_deny.iter().map(|m| Factor::name(Key::Module, Op::Ne, m));
            out.push(("modules_deny", all(factors.collect())));
        }
        if let Some(r) = &self.gpus {
            out.push(("gpus", all(r.to_factors(Key::Gpus))));
        }
        if let Some(r) = &self.arch {
            out.push(("arch", all(r.to_factors(Key::Arch))));
        }
        if !self.platform.is_empty() {
            // Alternatives: one term each.
            let terms = self.platform.iter().map(|p| Term(vec![Factor::name(Key::Platform, Op::Eq, p)]));
            out.push(("platform", Expr(terms.collect())));
        }
        out
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
        self.op.holds(v.cmp(&self.value))
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

impl<T: Clone + Into<Value>> VersionRange<T> {
    /// The range as factors of `key` (all must hold), as the contract writes them:
    /// `driver>=525.60.13,driver<560` (equality spelled `=`).
    pub fn to_factors(&self, key: Key) -> Vec<Factor> {
        self.comparisons.iter().map(|c| Factor::new(key, c.op, c.value.clone())).collect()
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
            // The recipe's own spelling of equality (`==`, as in PEP 440 specifiers).
            let op = if c.op == Op::Eq { "==" } else { c.op.as_str() };
            write!(f, "{op}{}", c.value)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a recipe could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// The file could not be read.
    #[error("{source}")]
    Read {
        /// The recipe file.
        path: PathBuf,
        /// Why: a system error, or not a regular file, or too large.
        source: stackbuild_common::InputError,
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
            .map(|f| (strsim::levenshtein(given, f), f))
            .filter(|(d, _)| *d <= 2)
            .min();
        if let Some((_, f)) = closest {
            return diagnostic.with_help(format!("did you mean `{f}`?"));
        }
    }
    diagnostic
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

impl Recipe {
    /// Read and validate the recipe at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Recipe, RecipeError> {
        let path = path.as_ref();
        // A regular file only: a FIFO would block, /dev/zero never end, and a symlink could make
        // a parse error quote someone else's file.
        let text = stackbuild_common::read_text(path, stackbuild_common::MAX_TEXT, "recipe")
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
}
