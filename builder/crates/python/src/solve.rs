//! Resolution of a recipe's Python packages for the image's interpreter and platform.
//!
//! The resolver is uv (`uv pip compile`), asked to resolve for the *target*: the Python version
//! of the recipe (`--python-version`) and a manylinux platform of the image's architecture
//! (`--python-platform`), wheels only, with every file's hash. Nothing about the host's own
//! interpreter or platform leaks into the result, so a lock made on one machine is valid on
//! another. The index is the recipe's when it names one; otherwise the machine's configuration
//! applies, as it would for uv or pip run by hand.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

use pep508_rs::PackageName;
use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use stackcontract::version::{PackageVersion, PythonVersion};

use stackbuild_common::{io_err, IoError};
use stackbuild_common::{Glibc, Platform};
use stackbuild_recipe::{PythonSection, Recipe};

/// The targets `recipe` resolves Python packages for: one per platform, when the recipe has a
/// `[python]` section, with the glibc its base is known to have ([`glibc_baseline`]).
pub fn targets(recipe: &Recipe) -> Vec<Target> {
    targets_with(recipe, glibc_baseline(recipe).unwrap_or(Glibc::DEFAULT))
}

/// [`targets`], with the base's glibc as read by the caller (a lock's, or an OCI base's).
pub fn targets_with(recipe: &Recipe, glibc: Glibc) -> Vec<Target> {
    recipe.python.as_ref().map_or_else(Vec::new, |py| {
        recipe
            .image
            .platforms
            .iter()
            .map(|&platform| Target::new(py.version.clone(), platform).with_glibc(glibc))
            .collect()
    })
}

/// The glibc of the recipe's base where the recipe alone tells it: a bootstrapped suite the
/// table knows ([`Glibc::of_suite`]). `None` for other bases, whose glibc is read from their
/// layers.
pub fn glibc_baseline(recipe: &Recipe) -> Option<Glibc> {
    match &recipe.base {
        stackbuild_recipe::Base::Bootstrap(b) => Glibc::of_suite(b.distro.as_str(), &b.suite),
        _ => None,
    }
}

/// The `manylinux_2_NN` values uv's `--python-platform` takes (uv 0.13): `2_17`, `2_28` and
/// `2_31` to `2_40`. A baseline between two of them is asked as the lower one; our own selection of
/// files ([`Target::platform_tags`]) still goes up to the baseline itself.
fn uv_manylinux(glibc: Glibc) -> u32 {
    match glibc.minor {
        m if m >= 40 => 40,
        m if m >= 31 => m,
        m if m >= 28 => 28,
        _ => 17,
    }
}

/// What Python packages are resolved and fetched for: an interpreter version and a platform.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// The interpreter version of the image.
    pub python: PythonVersion,
    /// The image platform.
    pub platform: Platform,
    /// The glibc of the image's base: the highest `manylinux_2_NN` accepted.
    pub glibc: Glibc,
}

impl Target {
    /// The environment markers of the target (PEP 508), to tell which requirements apply to it.
    pub fn marker_env(&self) -> Option<pep508_rs::MarkerEnvironment> {
        let minor = self.python_minor();
        let full =
            if self.python.parts().len() >= 3 { self.python.to_string() } else { format!("{minor}.0") };
        pep508_rs::MarkerEnvironment::try_from(pep508_rs::MarkerEnvironmentBuilder {
            implementation_name: "cpython",
            implementation_version: &full,
            os_name: "posix",
            platform_machine: self.platform.machine(),
            platform_python_implementation: "CPython",
            platform_release: "",
            platform_system: "Linux",
            platform_version: "",
            python_full_version: &full,
            python_version: &minor,
            sys_platform: "linux",
        })
        .ok()
    }

    /// A target from its parts, with the conservative glibc baseline ([`Glibc::DEFAULT`]).
    pub fn new(python: PythonVersion, platform: Platform) -> Self {
        Self { python, platform, glibc: Glibc::DEFAULT }
    }

    /// The target for a base with `glibc`.
    #[must_use]
    pub fn with_glibc(mut self, glibc: Glibc) -> Self {
        self.glibc = glibc;
        self
    }

    /// `3.11`: the major.minor version, as pip's `--python-version` wants it.
    pub fn python_minor(&self) -> String {
        format!("{}.{}", self.python.part(0), self.python.part(1))
    }

    /// `cp311`: the `CPython` interpreter and ABI tag.
    pub fn python_tag(&self) -> String {
        format!("cp{}{}", self.python.part(0), self.python.part(1))
    }

    /// `x86_64-manylinux_2_36`: uv's `--python-platform` for this target (see [`uv_manylinux`]).
    pub fn python_platform(&self) -> String {
        format!("{}-manylinux_2_{}", self.platform.machine(), uv_manylinux(self.glibc))
    }

    /// The wheel platform tags this target accepts, most preferred first: `manylinux_2_<glibc>_x86_64`
    /// down to `manylinux_2_17_x86_64` (`x86_64` from `2_5`, `aarch64` from `2_17`), each with its legacy
    /// alias (`manylinux2014_x86_64`, `manylinux2010_x86_64`, `manylinux1_x86_64`; PEP 600).
    /// `any` is not in the list; pure wheels are always accepted.
    pub fn platform_tags(&self) -> Vec<String> {
        let arch = self.platform.machine();
        let lowest = match self.platform {
            Platform::LinuxAmd64 => 5,
            Platform::LinuxArm64 => 17,
        };
        let mut tags = Vec::new();
        for minor in (lowest..=self.glibc.minor).rev() {
            tags.push(format!("manylinux_2_{minor}_{arch}"));
            let legacy = match minor {
                17 => Some("manylinux2014"),
                12 => Some("manylinux2010"),
                5 => Some("manylinux1"),
                _ => None,
            };
            if let Some(legacy) = legacy {
                tags.push(format!("{legacy}_{arch}"));
            }
        }
        // Plain `linux_<arch>` last, as pip orders it: no index carries such wheels, but a
        // recipe's own `[[python.wheel]]` (a JetPack torch build) does.
        tags.push(format!("linux_{arch}"));
        tags
    }
}

impl fmt::Display for Target {
    /// `cp311/x86_64-manylinux_2_36`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}-manylinux_2_{}", self.python_tag(), self.platform.machine(), self.glibc.minor)
    }
}

/// One resolved package: an exact version and the sha256 of every file of that release the
/// index lists (the file for the target is chosen when fetching).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pinned {
    /// The normalized name (PEP 503).
    pub name: PackageName,
    /// The exact version.
    pub version: PackageVersion,
    /// Lowercase hex sha256 digests, sorted.
    pub hashes: Vec<String>,
}

impl fmt::Display for Pinned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=={}", self.name, self.version)
    }
}

/// Why resolution failed.
#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    /// uv is not installed.
    #[error(
        "uv was not found (looked for `uv` on PATH and for `python3 -m uv`): install it with \
         `python3 -m pip install uv`"
    )]
    UvMissing,
    /// uv could not be started or its files written.
    #[error("running uv for {target}: {source}")]
    Io {
        /// The target being resolved.
        target: Target,
        /// The I/O error.
        #[source]
        source: IoError,
    },
    /// uv ran and reported a failure.
    #[error("resolving python packages for {target} failed: {message}")]
    Uv {
        /// The target being resolved.
        target: Target,
        /// uv's message (its warnings removed).
        message: String,
    },
    /// uv needs a package that has no wheel for the target, and its source distribution
    /// cannot stand in (a wheel stub, an sdist that cannot be fetched).
    #[error(
        "resolving python packages for {target} failed: {message}\n\n{package} has no wheel for \
         {target}, and its source cannot be used: {why}"
    )]
    SourceUnusable {
        /// The target being resolved (boxed: the error stays small).
        target: Box<Target>,
        /// uv's message that asked for the package's source.
        message: String,
        /// The package.
        package: PackageName,
        /// Why its source cannot be used, with what to do.
        why: String,
    },
    /// A `[[python.wheel]]` file is not there.
    #[error("{}: {source} (the recipe's [[python.wheel]]; its comment says where the file comes from)", path.display())]
    LocalWheel {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A `[[python.wheel]]` file is not a wheel an installer can apply.
    #[error("{source} (the recipe's [[python.wheel]])")]
    LocalWheelInvalid {
        /// What is wrong, with the member it concerns.
        #[source]
        source: Box<crate::wheel::WheelError>,
    },
    /// A `[[python.wheel]]` file is not the one the recipe names.
    #[error("{}: sha256 is {actual}, the recipe expects {expected}", path.display())]
    LocalWheelHash {
        /// The file.
        path: PathBuf,
        /// What the recipe states.
        expected: String,
        /// What the file has.
        actual: String,
    },
    /// A requirement that would not be one line of a requirements file.
    #[error("refusing to hand uv the requirement {line:?}: it holds a control character")]
    ControlCharacter {
        /// The requirement.
        line: String,
    },
    /// uv's output could not be understood.
    #[error("resolving python packages for {target}: unexpected uv output {line:?}: {why}")]
    Output {
        /// The target being resolved.
        target: Target,
        /// The offending line.
        line: String,
        /// What was wrong with it.
        why: String,
    },
}

impl SolveError {
    /// The resolver's account of a resolution that found no answer, when that is what this
    /// error is (not uv missing, a file or uv's output).
    pub fn no_resolution(&self) -> Option<String> {
        match self {
            Self::Uv { message, .. } => Some(message.clone()),
            Self::SourceUnusable { message, package, why, target } => Some(format!(
                "{message}\n\n{package} has no wheel for {target}, and its source cannot be used: {why}"
            )),
            _ => None,
        }
    }
}

/// How to run uv: a program and the arguments before `pip compile`.
#[derive(Debug, Clone)]
struct Uv {
    program: PathBuf,
    prefix: Vec<&'static str>,
}

impl Uv {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix);
        cmd
    }
}

/// Find `uv` on `PATH`, else `python3 -m uv`.
fn find_uv() -> Result<Uv, SolveError> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("uv");
            if is_executable(&candidate) {
                return Ok(Uv { program: candidate, prefix: Vec::new() });
            }
        }
    }
    let module = Command::new("python3")
        .args(["-m", "uv", "--version"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match module {
        Ok(status) if status.success() => Ok(Uv { program: "python3".into(), prefix: vec!["-m", "uv"] }),
        _ => Err(SolveError::UvMissing),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolve `python`'s packages and constraints, with their dependencies, for `target`.
///
/// Runs `uv pip compile` with `--python-version`, `--python-platform`, `--only-binary :all:`
/// and `--generate-hashes`; `--index-url` only when the recipe names an index. When the machine
/// configures pip's index through `PIP_INDEX_URL` / `PIP_EXTRA_INDEX_URL` and not uv's, those
/// are handed to uv as `UV_INDEX_URL` / `UV_EXTRA_INDEX_URL`, so that uv resolves from the same
/// index pip later downloads from.
///
/// `prefer` are the pins of the lock this resolution replaces: each is kept where the recipe
/// still allows it, so that one pin changed in a recipe changes only that pin and what it needs
/// (as `uv lock` keeps an existing `uv.lock`, and as `uv pip compile` and pip-tools keep the
/// pins of an existing output file, which is how they are handed to uv). Without them, every
/// unpinned dependency moves to the newest release the index has, and each moved package
/// restages its layer.
pub fn resolve(
    python: &PythonSection,
    target: &Target,
    prefer: &[Pinned],
) -> Result<Vec<Pinned>, SolveError> {
    compile(python, target, prefer, &FromSource::default())
}

/// Packages resolved to their source distributions (`crate::sources`): what `uv pip compile`
/// is told besides the recipe.
#[derive(Debug, Default)]
pub(crate) struct FromSource {
    /// `--no-binary NAME`: these resolve to their sdists, whose metadata uv finds in `config`.
    pub(crate) no_binary: Vec<PackageName>,
    /// `NAME==VERSION`: each at the version whose metadata was prepared, so uv never needs
    /// another's (it would build it on this machine to learn its dependencies).
    pub(crate) constraints: Vec<String>,
    /// A `uv.toml` with a `[[dependency-metadata]]` entry per sdist (uv's settings reference).
    pub(crate) config: Option<PathBuf>,
    /// Git dependencies, each in place of the recipe's requirement of its name: the tar of its
    /// commit as a `name @ file://` requirement, and that file's sha256.
    pub(crate) direct: Vec<(PackageName, PathBuf, String)>,
    /// The extras a recipe's project is installed with (`[[source]] extras`), by its name.
    pub(crate) project_extras: Vec<(PackageName, Vec<String>)>,
}

#[allow(clippy::too_many_lines)] // one uv run in order: its inputs, its command line, its output
pub(crate) fn compile(
    python: &PythonSection,
    target: &Target,
    prefer: &[Pinned],
    from_source: &FromSource,
) -> Result<Vec<Pinned>, SolveError> {
    let uv = find_uv()?;
    let tmp = std::env::temp_dir();
    let dir = tempfile::Builder::new().prefix("stackbuild-solve-").tempdir_in(&tmp).map_err(uv_io(
        target,
        "creating a directory in",
        &tmp,
    ))?;
    let requirements = dir.path().join("requirements.in");
    let constraints = dir.path().join("constraints.txt");
    let overrides = dir.path().join("overrides.txt");
    let mut lines: Vec<String> = python
        .packages
        .iter()
        .filter(|r| !from_source.direct.iter().any(|(n, _, _)| n == &r.name))
        .map(ToString::to_string)
        .collect();
    for (name, path, _) in &from_source.direct {
        // The extras of the requirement it stands in for (`name[x] @ git+...`), or of the project.
        let mut extras: Vec<String> = python
            .packages
            .iter()
            .filter(|r| &r.name == name)
            .flat_map(|r| r.extras.iter().map(ToString::to_string))
            .chain(from_source.project_extras.iter().filter(|(n, _)| n == name).flat_map(|(_, e)| e.clone()))
            .collect();
        extras.sort();
        extras.dedup();
        let extras = if extras.is_empty() { String::new() } else { format!("[{}]", extras.join(",")) };
        lines.push(format!("{name}{extras} @ {}", file_url(path)));
    }
    for wheel in python.wheels.iter().filter(|w| w.fits(target.platform)) {
        check_local_wheel(&wheel.path)?;
        let path = std::fs::canonicalize(&wheel.path)
            .map_err(|source| SolveError::LocalWheel { path: wheel.path.clone(), source })?;
        lines.push(format!("{} @ {}", wheel.name, file_url(&path)));
    }
    let mut constraint_lines: Vec<String> = python.constraints.iter().map(ToString::to_string).collect();
    constraint_lines.extend(from_source.constraints.iter().cloned());
    let override_lines: Vec<String> = python.overrides.iter().map(ToString::to_string).collect();
    for line in lines.iter().chain(&constraint_lines).chain(&override_lines) {
        check_line(line)?;
    }
    write_lines(&overrides, override_lines.into_iter()).map_err(uv_io(target, "writing", &overrides))?;
    write_lines(&requirements, lines.into_iter()).map_err(uv_io(target, "writing", &requirements))?;
    write_lines(&constraints, constraint_lines.into_iter()).map_err(uv_io(
        target,
        "writing",
        &constraints,
    ))?;

    // uv reads an existing output file as preferences (uv's `pip compile` docs, "Locking
    // requirements": "If the output file already exists, uv will prefer the versions in it").
    let output_file = (!prefer.is_empty()).then(|| dir.path().join("requirements.txt"));
    if let Some(path) = &output_file {
        write_lines(path, prefer.iter().map(ToString::to_string)).map_err(uv_io(target, "writing", path))?;
    }

    let mut cmd = uv.command();
    cmd.args(["pip", "compile"])
        .arg(&requirements)
        .arg("--constraint")
        .arg(&constraints)
        .arg("--override")
        .arg(&overrides)
        .args(["--python-version", python.version.as_str()])
        .args(["--python-platform", &target.python_platform()])
        .args(["--only-binary", ":all:", "--generate-hashes", "--no-header", "--no-annotate"])
        // Resolution must not depend on downloading an interpreter: nothing is built.
        .args(["--no-python-downloads", "--color", "never"]);
    if let Some(index) = &python.index {
        // One argument: a value that starts with `-` stays a value.
        cmd.arg(format!("--index-url={index}"));
    } else {
        bridge_pip_index_env(&mut cmd);
    }
    for extra in &python.extra_index {
        cmd.arg(format!("--extra-index-url={extra}"));
    }
    for links in &python.find_links {
        cmd.arg(format!("--find-links={links}"));
    }
    if let Some(path) = &output_file {
        cmd.arg("--output-file").arg(path);
    }
    for name in &from_source.no_binary {
        cmd.arg(format!("--no-binary={name}"));
    }
    if let Some(config) = &from_source.config {
        cmd.arg("--config-file").arg(config);
    }
    let output = cmd.stdin(Stdio::null()).output().map_err(uv_io(target, "starting", &uv.program))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(SolveError::Uv { target: target.clone(), message: uv_error_message(&stderr) });
    }
    let text = match &output_file {
        // uv wrote the resolution there (and may or may not echo it on stdout).
        // (A file in our own private temporary directory, not one a user named.)
        Some(path) => std::fs::read(path).map_err(uv_io(target, "reading", path))?,
        None => output.stdout,
    };
    let mut pins = parse_compile_output(&String::from_utf8_lossy(&text))
        .map_err(|(line, why)| SolveError::Output { target: target.clone(), line, why })?;
    // uv writes no hash for a local file; the git dependency's is the one we made it with.
    for pin in pins.iter_mut().filter(|p| p.hashes.is_empty()) {
        match from_source.direct.iter().find(|(n, _, _)| n == &pin.name) {
            Some((_, _, sha256)) => pin.hashes = vec![sha256.clone()],
            None => {
                return Err(SolveError::Output {
                    target: target.clone(),
                    line: pin.to_string(),
                    why: "no --hash for this requirement".into(),
                })
            }
        }
    }
    for wheel in python.wheels.iter().filter(|w| w.fits(target.platform)) {
        let Some(expected) = &wheel.sha256 else { continue };
        if let Some(pin) = pins.iter().find(|p| p.name == wheel.name) {
            if !pin.hashes.contains(expected) {
                return Err(SolveError::LocalWheelHash {
                    path: wheel.path.clone(),
                    expected: expected.clone(),
                    actual: pin.hashes.join(", "),
                });
            }
        }
    }
    Ok(pins)
}

/// A `map_err` argument for a failed operation on `path` while resolving for `target`.
fn uv_io<'a>(
    target: &'a Target,
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SolveError + 'a {
    move |source| SolveError::Io { target: target.clone(), source: io_err(op, path)(source) }
}

/// A `[[python.wheel]]` must be a regular file before uv is pointed at it: uv would block on a
/// FIFO and follow a symlink anywhere. Its members get the installer's checks here too (names,
/// types, duplicates, `METADATA`), so that a wheel we would refuse at install is refused by us,
/// naming the member and the rule, not by uv's unzip with an `os error`.
fn check_local_wheel(path: &Path) -> Result<(), SolveError> {
    stackbuild_common::open_regular(path, "[[python.wheel]] file").map(drop).map_err(|e| {
        SolveError::LocalWheel { path: path.to_owned(), source: std::io::Error::other(e.to_string()) }
    })?;
    crate::wheel::wheel_identity(path)
        .map(drop)
        .map_err(|source| SolveError::LocalWheelInvalid { source: Box::new(source) })
}

/// Bytes a `file://` URL keeps as they are: letters, digits, `/` and the characters a wheel's
/// file name may hold (PEP 427: `-`, `_`, `.`, `+`, `!`) and `~`. Everything else, a space,
/// `#` (a comment in a requirements file), `%`, `;`, any control character and every non-ASCII
/// byte, is percent-encoded (RFC 3986 section 2.1), so that a path is one token of data that
/// cannot end the line, start a comment or an option, or change the marker; uv decodes it back
/// to the same path.
const URL_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'+')
    .remove(b'!')
    .remove(b'~');

/// The `file://` URL of an absolute path, percent-encoded byte by byte.
pub(crate) fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    format!("file://{}", percent_encode(path.as_os_str().as_bytes(), URL_PATH))
}

/// A requirements file line carries one requirement: a control character (a newline would start
/// a line of uv's options, such as `-r /etc/shadow`) is refused whatever put it there.
fn check_line(line: &str) -> Result<(), SolveError> {
    if line.chars().any(char::is_control) {
        return Err(SolveError::ControlCharacter { line: line.to_owned() });
    }
    Ok(())
}

fn write_lines(path: &Path, lines: impl Iterator<Item = String>) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    for line in lines {
        writeln!(f, "{line}")?;
    }
    f.flush()
}

/// Hand pip's index settings to uv when only pip's are configured (uv does not read them).
fn bridge_pip_index_env(cmd: &mut Command) {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if !set("UV_INDEX_URL") && !set("UV_DEFAULT_INDEX") && !set("UV_INDEX") {
        if let Some(v) = std::env::var_os("PIP_INDEX_URL").filter(|v| !v.is_empty()) {
            cmd.env("UV_INDEX_URL", v);
        }
    }
    if !set("UV_EXTRA_INDEX_URL") && !set("UV_INDEX") {
        if let Some(v) = std::env::var_os("PIP_EXTRA_INDEX_URL").filter(|v| !v.is_empty()) {
            cmd.env("UV_EXTRA_INDEX_URL", v);
        }
    }
}

/// uv's stderr without its `warning:` blocks (a warning line and the indented lines after it),
/// which are noise next to the error; all of it if nothing else is left.
fn uv_error_message(stderr: &str) -> String {
    let mut kept = Vec::new();
    let mut in_warning = false;
    for line in stderr.lines() {
        if line.starts_with("warning:") {
            in_warning = true;
            continue;
        }
        if in_warning && (line.starts_with(' ') || line.is_empty()) {
            continue;
        }
        in_warning = false;
        kept.push(line);
    }
    let message = kept.join("\n");
    // "resolving ... failed: error: No solution found" reads better without uv's own prefix.
    let message = message.trim().strip_prefix("error: ").unwrap_or(message.trim()).to_owned();
    if message.is_empty() {
        stderr.trim().to_owned()
    } else {
        message
    }
}

/// Parse `uv pip compile --generate-hashes --no-header --no-annotate` output: one
/// `name==version [; marker]` per requirement, continued with ` \` by `--hash=sha256:HEX` lines.
/// Returns the offending line and why on failure.
pub(crate) fn parse_compile_output(text: &str) -> Result<Vec<Pinned>, (String, String)> {
    // Join continuation lines first.
    let mut entries: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            entries.push(std::mem::take(&mut current));
        }
    }
    if !current.trim().is_empty() {
        entries.push(current);
    }
    let mut out = Vec::new();
    for entry in entries {
        let fail = |why: &str| (entry.clone(), why.to_owned());
        // Index options (`--index-url ...`) are never written with our flags, but skip them.
        if entry.starts_with('-') {
            continue;
        }
        let (spec, rest) = entry.split_once(char::is_whitespace).unwrap_or((entry.as_str(), ""));
        let spec = spec.split(';').next().unwrap_or(spec);
        // A direct reference (`name @ file:///.../name-1.0-py3-none-any.whl`), as a recipe's
        // own wheel comes back: the version is the wheel file name's.
        let direct;
        let (name, version) = if let Some(url) = rest.trim_start().strip_prefix("@ ") {
            let url = url.split_whitespace().next().unwrap_or_default();
            let file = percent_decode(url.rsplit('/').next().unwrap_or_default());
            direct = match stackbuild_common::parse_wheel_name(&file) {
                Some(wheel) => wheel.version.to_string(),
                // A git dependency's tar (`crate::sources`): its hash is filled in by the caller.
                None => stackbuild_common::parse_sdist_name(&file)
                    .ok_or_else(|| fail("expected a wheel or source distribution file URL"))?
                    .1
                    .to_string(),
            };
            (spec, direct.as_str())
        } else {
            spec.split_once("==").ok_or_else(|| fail("expected `name==version`"))?
        };
        // `--no-strip-extras` is off, but tolerate `name[extra]`.
        let name = name.split('[').next().unwrap_or(name);
        let name = PackageName::from_str(name).map_err(|e| fail(&e.to_string()))?;
        let version = PackageVersion::from_str(version).map_err(|e| fail(&e.to_string()))?;
        let mut hashes = Vec::new();
        for token in rest.split_whitespace() {
            if let Some(h) = token.strip_prefix("--hash=") {
                let hex = h.strip_prefix("sha256:").ok_or_else(|| fail("expected sha256 hashes"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(fail("malformed sha256 hash"));
                }
                hashes.push(hex.to_ascii_lowercase());
            }
        }
        let direct_file = rest.trim_start().starts_with("@ ");
        if hashes.is_empty() && !direct_file {
            return Err(fail("no --hash for this requirement"));
        }
        hashes.sort();
        hashes.dedup();
        out.push(Pinned { name, version, hashes });
    }
    out.sort();
    Ok(out)
}

/// `%2B` -> `+`: the escapes uv writes in file URLs (a local version's `+`, spaces).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackbuild_recipe::Recipe;

    fn target() -> Target {
        Target::new("3.11".parse().unwrap(), Platform::LinuxAmd64)
    }

    /// The recipe fixtures' targets: the full recipe's one interpreter and platform, with the
    /// glibc of its bookworm base, none for a recipe without `[python]`.
    #[test]
    fn targets_of_the_recipe_fixtures() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/recipes");
        let full = Recipe::load(dir.join("dreamzero.toml")).unwrap();
        assert_eq!(targets(&full).len(), 1);
        assert_eq!(targets(&full)[0].to_string(), "cp311/x86_64-manylinux_2_36");
        assert_eq!(targets(&full)[0].python_platform(), "x86_64-manylinux_2_36");
        let minimal = std::fs::read_to_string(dir.join("minimal.toml")).unwrap();
        assert!(targets(&Recipe::parse("minimal.toml", &minimal).unwrap()).is_empty());
    }

    #[test]
    fn a_local_wheel_with_a_link_member_is_refused_before_uv_sees_it() {
        use std::io::Write as _;
        use zip::write::SimpleFileOptions;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("linked-1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = SimpleFileOptions::default();
        zip.start_file("linked/__init__.py", options).unwrap();
        zip.add_symlink("linked/data", "../../etc", options).unwrap();
        zip.start_file("linked-1.0.dist-info/METADATA", options).unwrap();
        zip.write_all(b"Metadata-Version: 2.1\nName: linked\nVersion: 1.0\n").unwrap();
        zip.start_file("linked-1.0.dist-info/WHEEL", options).unwrap();
        zip.write_all(b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n").unwrap();
        zip.finish().unwrap();
        let err = check_local_wheel(&path).unwrap_err().to_string();
        assert!(err.contains(r#"unsafe entry "linked/data""#), "{err}");
        assert!(err.contains("PEP 427"), "{err}");
        assert!(err.ends_with("(the recipe's [[python.wheel]])"), "{err}");
    }

    #[test]
    fn wheel_paths_are_data_in_the_requirements() {
        let url =
            file_url(Path::new("/w/dir with space#1/50%/torch-2.3.0+cu118-cp311-cp311-linux_x86_64.whl"));
        assert_eq!(
            url,
            "file:///w/dir%20with%20space%231/50%25/torch-2.3.0+cu118-cp311-cp311-linux_x86_64.whl"
        );
        let url = file_url(Path::new("/w/x\n-r /etc/shadow\r;v/t-1-py3-none-any.whl"));
        assert_eq!(url, "file:///w/x%0A-r%20/etc/shadow%0D%3Bv/t-1-py3-none-any.whl");
        assert!(!url.chars().any(|c| c.is_control() || c == ' ' || c == '#'));
        check_line("six==1.16.0").unwrap();
        for bad in ["six==1.16.0\n-r /etc/shadow", "six\r", "a\u{85}b"] {
            let err = check_line(bad).unwrap_err().to_string();
            assert!(err.contains("control character"), "{err}");
        }
    }

    #[test]
    fn target_names() {
        let t = target();
        assert_eq!(t.to_string(), "cp311/x86_64-manylinux_2_28");
        assert_eq!(t.python_minor(), "3.11");
        let tags = t.platform_tags();
        assert_eq!(tags.first().map(String::as_str), Some("manylinux_2_28_x86_64"));
        assert!(tags.contains(&"manylinux2014_x86_64".to_owned()));
        assert_eq!(tags.last().map(String::as_str), Some("linux_x86_64"));
        assert_eq!(tags[tags.len() - 2], "manylinux1_x86_64");
        let arm = Target::new("3.11.2".parse().unwrap(), Platform::LinuxArm64);
        assert_eq!(arm.to_string(), "cp311/aarch64-manylinux_2_28");
        assert_eq!(arm.python_minor(), "3.11");
        assert_eq!(arm.platform_tags().last().map(String::as_str), Some("linux_aarch64"));
    }

    /// A base's glibc is the highest manylinux tag taken; uv is asked for the nearest value it
    /// knows at or below it.
    #[test]
    fn glibc_bounds_the_tags() {
        let trixie = target().with_glibc(Glibc { minor: 41 });
        assert_eq!(trixie.to_string(), "cp311/x86_64-manylinux_2_41");
        assert_eq!(trixie.python_platform(), "x86_64-manylinux_2_40");
        assert_eq!(trixie.platform_tags()[0], "manylinux_2_41_x86_64");
        let bookworm = target().with_glibc(Glibc { minor: 36 });
        assert!(bookworm.platform_tags().contains(&"manylinux_2_31_x86_64".to_owned()));
        assert!(!bookworm.platform_tags().contains(&"manylinux_2_37_x86_64".to_owned()));
        assert_eq!(target().with_glibc(Glibc { minor: 30 }).python_platform(), "x86_64-manylinux_2_28");
        assert_eq!(target().with_glibc(Glibc { minor: 27 }).python_platform(), "x86_64-manylinux_2_17");
    }

    #[test]
    fn parses_uv_output() {
        let out = "\
Six==1.16.0 \\
    --hash=sha256:1E61C37477A1626458E36F7B1D82AA5C9B094FA4802892072E49DE9C60C4C926 \\
    --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254
# a comment
typing_extensions==4.9.0 ; python_version >= '3.8' \\
    --hash=sha256:af72aea155e91adfc61c3ae9e0e342dbc0cba726d6cba4b6c72c1f34e47291cd
";
        let pins = parse_compile_output(out).unwrap();
        assert_eq!(pins.len(), 2);
        assert_eq!(pins[0].to_string(), "six==1.16.0");
        assert_eq!(
            pins[0].hashes,
            [
                "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926",
                "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"
            ]
        );
        assert_eq!(pins[1].name.as_ref(), "typing-extensions");
        // A recipe's own wheel comes back as a direct reference; `+` is escaped in the URL.
        let h = "a".repeat(64);
        let direct = format!(
            "torch @ file:///r/wheels/torch-2.1.2%2Bcu118-cp311-cp311-linux_x86_64.whl \\\n    --hash=sha256:{h}\n"
        );
        let pins = parse_compile_output(&direct).unwrap();
        assert_eq!(pins[0].to_string(), "torch==2.1.2+cu118");
        assert_eq!(pins[0].hashes, [h]);
        assert!(parse_compile_output("torch @ file:///r/torch.zip --hash=sha256:00\n").is_err());
        assert!(parse_compile_output("six>=1\n").is_err());
        assert!(parse_compile_output("six==1.16.0\n").is_err());
        assert!(parse_compile_output("six==1.16.0 --hash=md5:abcd\n").is_err());
        assert_eq!(parse_compile_output("\n# nothing\n").unwrap(), []);
    }

    #[test]
    fn strips_uv_warnings() {
        let stderr = "warning: A managed Python download is available\n  cause: dns error\n\
                      error: No solution found when resolving dependencies\n  cause: Because x was not found";
        assert_eq!(
            uv_error_message(stderr),
            "No solution found when resolving dependencies\n  cause: Because x was not found"
        );
        assert_eq!(uv_error_message("warning: only\n"), "warning: only");
    }

    fn python(packages: &str) -> PythonSection {
        let text = format!(
            "[image]\nname = \"t\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
             packages = {packages}\n"
        );
        Recipe::parse("t.toml", &text).unwrap().python.unwrap()
    }

    /// Resolves two tiny pure-Python packages from the machine's configured index.
    #[test]
    fn resolves_for_the_target() {
        let pins = resolve(&python(r#"["six==1.16.0", "packaging==23.2"]"#), &target(), &[]).unwrap();
        let names: Vec<String> = pins.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["packaging==23.2", "six==1.16.0"]);
        // The wheels' hashes, as published.
        assert!(pins[0]
            .hashes
            .contains(&"8c491190033a9af7e1d931d0b5dacc2ef47509b34dd0de67ed209b5203fc88c7".to_owned()));
        assert!(pins[1]
            .hashes
            .contains(&"8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254".to_owned()));
    }

    /// A stale lock's pins are kept where the recipe allows them: requests' unpinned
    /// dependencies stay where the old lock had them, a preference the recipe now contradicts
    /// gives way, and one nothing requires any more is not added.
    #[test]
    fn keeps_the_previous_pins_where_the_recipe_allows() {
        let pin = |s: &str| {
            let (name, version) = s.split_once("==").unwrap();
            Pinned { name: name.parse().unwrap(), version: version.parse().unwrap(), hashes: Vec::new() }
        };
        let old = [
            "certifi==2023.7.22",
            "charset-normalizer==3.2.0",
            "idna==3.4",
            "six==1.15.0",
            "urllib3==2.0.4",
            "packaging==23.1",
        ];
        let prefer: Vec<Pinned> = old.iter().map(|s| pin(s)).collect();
        let recipe = python(r#"["requests==2.31.0", "six==1.16.0"]"#);
        let names = |pins: &[Pinned]| pins.iter().map(ToString::to_string).collect::<Vec<_>>();
        let kept = resolve(&recipe, &target(), &prefer).unwrap();
        assert_eq!(
            names(&kept),
            [
                "certifi==2023.7.22",
                "charset-normalizer==3.2.0",
                "idna==3.4",
                "requests==2.31.0",
                "six==1.16.0",
                "urllib3==2.0.4"
            ]
        );
        assert!(kept.iter().all(|p| !p.hashes.is_empty()), "every pin keeps its hashes");
        // From scratch, the same recipe moves them to newer releases.
        let fresh = resolve(&recipe, &target(), &[]).unwrap();
        assert_ne!(names(&fresh), names(&kept));
    }

    #[test]
    fn surfaces_uv_errors() {
        let err = resolve(&python(r#"["stackbuild-no-such-package-zz==1.0"]"#), &target(), &[]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("resolving python packages for cp311/x86_64-manylinux_2_28 failed: "),
            "{msg}"
        );
        assert!(msg.contains("stackbuild-no-such-package-zz"), "{msg}");
    }
}
