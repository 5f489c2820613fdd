//! `stackbuild init`: a recipe from what a project already has.
//!
//! Nobody starts from a blank recipe: a project comes with a `requirements.txt`, a
//! `pyproject.toml`, a `uv.lock` or `pylock.toml`, a `.python-version`, a Dockerfile on
//! `nvidia/cuda`, a conda `environment.yml`. [`plan`] reads what it finds (or is given) into [`Found`], decides the recipe
//! ([`Plan`]) and says why; [`Plan::to_toml`] writes it. Which input wins where several say the
//! same thing:
//!
//! - **Packages**: a lock (`uv.lock`, then `pylock.toml`) is used as it is (`[python] lock`);
//!   else the requirements files and a conda environment; else `pyproject.toml`'s dependencies; plus a Dockerfile's
//!   `pip install` lines when nothing else lists packages.
//! - **Python**: `.python-version`, then a Dockerfile's `FROM python:X`, then the newest of
//!   3.11, 3.12, 3.10, 3.13, 3.9, 3.8 (in that order: the versions the most CUDA wheels are built
//!   for first) that every `requires-python` admits and, with a lock, that the lock has wheels
//!   for.
//! - **Base**: the Debian or Ubuntu release whose `python3` is that version (bookworm 3.11,
//!   trixie 3.13, jammy 3.10, noble 3.12, bullseye 3.9, focal 3.8), with the Dockerfile's `apt-get
//!   install` packages.
//! - **CUDA**: a torch local version (`+cu121`), a `PyTorch` per-CUDA index (`.../whl/cu121`) or
//!   a Dockerfile's `nvidia/cuda:12.1.1-cudnn8-...` tag.
//!
//! Anything it cannot translate is listed with the file, the line and why, never dropped
//! silently.
//!
//! Readers per input: `requirements`, `pyproject`, `dockerfile`, `conda`, `readme`; `layout`
//! finds where a project keeps them; `torch` finds builds against the image's torch; `resolved`
//! applies a resolution to the plan and `system` the base packages known wheels need; `render`
//! writes the plan as the recipe and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) use inputs::InputKind;
use inputs::{dockerfile_project_below, project_name};
use layout::{not_runtime, projects_below};

mod conda;
mod dockerfile;
mod inputs;
mod layout;
mod pyproject;
mod readme;
mod render;
mod requirements;
mod resolved;
mod system;
mod torch;

/// Why `init` could not write a recipe.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// An input could not be read.
    #[error("{source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: stackbuild_common::InputError,
    },
    /// A TOML input does not parse.
    #[error("{diagnostic}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and what.
        diagnostic: Box<stackbuild_common::Diagnostic>,
    },
    /// A given lock cannot be read.
    #[error(transparent)]
    Lock(#[from] stackbuild_python::GivenLockError),
    /// `--from` names a file of a kind init does not read.
    #[error(
        "{}: not an input init reads (requirements*.txt, pyproject.toml, uv.lock, pylock.toml, \
         .python-version, Dockerfile / Containerfile, a conda environment .yml)",
        path.display()
    )]
    UnknownInput {
        /// The file.
        path: PathBuf,
    },
    /// The project directory has nothing to start from.
    #[error(
        "{}: no requirements*.txt, pyproject.toml, uv.lock, pylock.toml, environment.yml or Dockerfile here; name \
         one with --from FILE{}",
        dir.display(),
        if below.is_empty() { String::new() } else {
            format!(", or run init on one of the Python projects below it: {}", below.join(", "))
        }
    )]
    NothingFound {
        /// The project directory.
        dir: PathBuf,
        /// The Python projects in its subdirectories, when there are several.
        below: Vec<String>,
    },
    /// The recipe file exists.
    #[error(
        "{} already exists; init never overwrites a recipe: remove it, or write another with --out",
        path.display()
    )]
    Exists {
        /// The recipe path.
        path: PathBuf,
    },
    /// No supported Python version satisfies the inputs.
    #[error("no Python version this init can base an image on (3.8 to 3.13) satisfies {0}")]
    NoPython(String),
    /// Writing the recipe failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The recipe path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One thing of an input that has no place in the recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untranslated {
    /// `file:line` (line 0: the file as a whole).
    pub at: String,
    /// What it says.
    pub what: String,
    /// Why it is not in the recipe, and what to do.
    pub why: String,
}

impl Untranslated {
    fn new(path: &Path, line: usize, what: &str, why: &str) -> Self {
        let at = if line == 0 { path.display().to_string() } else { format!("{}:{line}", path.display()) };
        Self { at, what: what.to_owned(), why: why.to_owned() }
    }
}

/// A Dockerfile's `uv sync` (<https://docs.astral.sh/uv/reference/cli/#uv-sync>): the optional
/// dependencies and dependency groups it installs with the project's dependencies. uv syncs
/// the `dev` group unless told not to (`--no-dev`, `--no-default-groups`).
#[derive(Debug, Clone, Default)]
pub(crate) struct UvSync {
    /// Where: `Dockerfile:LINE`.
    pub(crate) origin: String,
    /// `--extra NAME`.
    pub(crate) extras: Vec<String>,
    /// `--all-extras`.
    pub(crate) all_extras: bool,
    /// `--group NAME`, and `dev` unless `--no-dev` or `--no-default-groups`.
    pub(crate) groups: Vec<String>,
    /// `--all-groups`.
    pub(crate) all_groups: bool,
}

/// Everything the inputs say, before deciding.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The files read, in order.
    pub inputs: Vec<PathBuf>,
    name: Option<(String, String)>,
    python: Option<(String, String)>,
    requires_python: Vec<(String, String)>,
    lock: Option<PathBuf>,
    /// That lock, read once.
    given: Option<stackbuild_python::GivenLock>,
    /// `(requirement, name, where)`.
    packages: Vec<(String, String, String)>,
    constraints: Vec<(String, String, String)>,
    /// `(requirement, where)`: `[tool.uv] override-dependencies`.
    pub(crate) overrides: Vec<(String, String)>,
    index: Option<(String, String)>,
    extra_index: Vec<String>,
    find_links: Vec<String>,
    /// Hashes on requirement lines (`--hash`).
    hashes: usize,
    cuda: Option<(String, String)>,
    cudnn: Option<(String, String)>,
    /// `(debian|ubuntu, suite, why)`.
    distro: Option<(String, String, String)>,
    apt: Vec<String>,
    env: BTreeMap<String, String>,
    labels: Vec<(String, String)>,
    workdir: Option<String>,
    user: Option<String>,
    cmd: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    source_dest: Option<(String, String)>,
    /// The project itself is installed as a wheel built from its tree (`[[source]] install =
    /// "wheel"`), and why.
    pub(crate) project_wheel: Option<String>,
    /// The extras it is installed with (`pip install -e ".[train]"`), normalized.
    pub(crate) project_extras: Vec<String>,
    /// What a Dockerfile's `uv sync` installs of `pyproject.toml` beside its dependencies.
    pub(crate) uv_sync: Option<UvSync>,
    /// `pyproject.toml` lists its dependencies as `dynamic` (its build computes them).
    pub(crate) dynamic_dependencies: bool,
    /// `[tool.uv.sources]` git entries: (package, `name @ git+URL@REV`), which replace the
    /// package's requirement.
    pub(crate) git_sources: Vec<(String, String)>,
    /// `[tool.uv.sources]` entries that are projects on disk (`{ path = "..." }` and workspace
    /// members): (package, directory), each a `[[source]]` installed as a wheel, which
    /// replaces the package's requirement.
    pub(crate) local_projects: Vec<(String, PathBuf)>,
    /// Requirements that repeat an earlier one word for word: (where the repeat is, where the
    /// first is), files only; said once per pair of files, not once per line.
    pub(crate) same_repeats: Vec<(String, String)>,
    /// The project itself builds against the image's torch (`torch::project`).
    pub(crate) torch_project: Option<stackbuild_python::TorchAtBuild>,
    /// What was decided on the way, and why.
    pub decisions: Vec<String>,
    /// What has no place in the recipe.
    pub untranslated: Vec<Untranslated>,
}

impl Found {
    fn decide(&mut self, text: String) {
        self.decisions.push(text);
    }

    /// Whether the project's own lock installs the project in `dir` from its tree at a version
    /// it records (uv's `source = { editable = ... }`): then the recipe builds it as a
    /// `[[source]]` installed as a wheel, its dependencies the lock's, as `uv sync` does.
    fn lock_installs(&self, dir: &Path) -> bool {
        let Some(given) = &self.given else { return false };
        let want = std::fs::canonicalize(dir).ok();
        want.is_some()
            && given.projects().iter().any(|(_, v, d)| v.is_some() && std::fs::canonicalize(d).ok() == want)
    }

    fn set_name(&mut self, name: &str, why: &str) {
        if self.name.is_none() {
            self.name = Some((name.to_owned(), why.to_owned()));
        }
    }

    fn set_cuda(&mut self, cuda: &str, why: &str) {
        match &self.cuda {
            None => self.cuda = Some((cuda.to_owned(), why.to_owned())),
            Some((have, first)) if have != cuda => {
                let text = format!(
                    "CUDA {cuda} ({why}) disagrees with CUDA {have} ({first}); the recipe says {have}"
                );
                self.decide(text);
            }
            Some(_) => {}
        }
    }

    /// A `PyTorch` per-CUDA index (`.../whl/cu121`, `.../whl/cpu`) says which build of torch.
    fn index_cuda(&mut self, url: &str, why: &str) {
        let last = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        if let Some(digits) =
            last.strip_prefix("cu").filter(|d| d.len() >= 3 && d.bytes().all(|b| b.is_ascii_digit()))
        {
            let (major, minor) = digits.split_at(digits.len() - 1);
            self.set_cuda(&format!("{major}.{minor}"), why);
        }
    }

    fn set_index(&mut self, url: String, origin: &requirements::Origin<'_>) {
        let why = format!("{}:{}", origin.path.display(), origin.line);
        self.index_cuda(&url, &format!("{why}: index {url}"));
        if self.index.as_ref().is_none_or(|(u, _)| *u == url) {
            self.index = Some((url, why));
        } else {
            self.untranslated.push(Untranslated::new(
                origin.path,
                origin.line,
                &format!("--index-url {url}"),
                "a second index-url; the first stays",
            ));
        }
    }

    fn add_extra_index(&mut self, url: String, origin: &requirements::Origin<'_>) {
        let why = format!("{}:{}: extra index {url}", origin.path.display(), origin.line);
        self.index_cuda(&url, &why);
        if !self.extra_index.contains(&url) {
            self.extra_index.push(url);
        }
    }

    fn add_requirement(
        &mut self,
        requirement: String,
        name: String,
        constraint: bool,
        origin: &requirements::Origin<'_>,
    ) {
        let at = if origin.line == 0 {
            origin.path.display().to_string()
        } else {
            format!("{}:{}", origin.path.display(), origin.line)
        };
        // `torch==2.1.0+cu121`: the local version names the CUDA build.
        if let Some(local) = requirement.split("==").nth(1).and_then(|v| v.split('+').nth(1)) {
            let local = local.split([';', ' ', ',']).next().unwrap_or_default();
            self.index_cuda(local, &format!("{at}: {requirement}"));
        }
        let norm = stackbuild_python::normalize_name(&name);
        if !constraint
            && self.local_projects.iter().any(|(p, _)| stackbuild_python::normalize_name(p) == norm)
        {
            // The [[source]] of that project provides it, with its own dependencies.
            return;
        }
        let requirement =
            match self.git_sources.iter().find(|(p, _)| stackbuild_python::normalize_name(p) == norm) {
                Some((_, git)) if !constraint => {
                    // The marker of the project's requirement stays with the git form.
                    requirement.split_once(';').map_or_else(|| git.clone(), |(_, m)| format!("{git} ;{m}"))
                }
                _ => requirement,
            };
        let list = if constraint { &mut self.constraints } else { &mut self.packages };
        if let Some(first) = list.iter_mut().find(|(_, n, _)| stackbuild_python::normalize_name(n) == norm) {
            // The first line's version stays; extras the repeat adds join it
            // (`imageio[ffmpeg]` and `imageio[pyav]` are `imageio[ffmpeg,pyav]`).
            let merged = merge_extras(&first.0, &requirement);
            if merged.is_none() && first.0.replace(' ', "") == requirement.replace(' ', "") {
                let file = |at: &str| match at.rsplit_once(':') {
                    Some((f, line)) if line.bytes().all(|b| b.is_ascii_digit()) => f.to_owned(),
                    _ => at.to_owned(),
                };
                self.same_repeats.push((origin.path.display().to_string(), file(&first.2)));
                return;
            }
            let text = match &merged {
                Some(m) => format!(
                    "{at}: `{requirement}` repeats `{}` ({}); its extras join it: `{m}`",
                    first.0, first.2
                ),
                None => format!("{at}: `{requirement}` repeats `{}` ({}); the first stays", first.0, first.2),
            };
            if let Some(m) = merged {
                first.0 = m;
            }
            self.decide(text);
            return;
        }
        list.push((requirement, name, at));
    }
}

/// What `init` is asked.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// The project directory.
    pub dir: PathBuf,
    /// Inputs named by `--from`; empty: what the directory holds.
    pub from: Vec<PathBuf>,
    /// `--extra NAME`: optional dependencies of `pyproject.toml` to install.
    pub extras: Vec<String>,
    /// `--group NAME`: dependency groups of `pyproject.toml` to install.
    pub groups: Vec<String>,
    /// `--name`: the image name.
    pub name: Option<String>,
    /// Why the project's lock is not to be used, when it is not (its wheels are served from
    /// where this machine cannot fetch them): its manifests are read as if it had none.
    pub skip_lock: Option<String>,
    /// The Python version to take where the inputs leave the choice open (one of
    /// [`Plan::python_alternatives`]), and why.
    pub python: Option<(String, String)>,
}

/// The recipe init decided on.
#[derive(Debug, Clone)]
pub struct Plan {
    name: String,
    python: String,
    distro: (String, String),
    apt: Vec<String>,
    lock: Option<PathBuf>,
    packages: Vec<(String, String)>,
    constraints: Vec<(String, String)>,
    overrides: Vec<(String, String)>,
    /// Requirements left unpinned, for [`Plan::pin`].
    pub unpinned: Vec<String>,
    index: Option<String>,
    extra_index: Vec<String>,
    find_links: Vec<String>,
    project: PathBuf,
    cuda: Option<(String, Option<String>)>,
    source_dest: String,
    project_wheel: bool,
    project_extras: Vec<String>,
    /// Packages from source built against the image's torch (`[python.build]`).
    torch_builds: Vec<stackbuild_python::TorchAtBuild>,
    /// Other projects on disk installed as wheels: (package, directory).
    local_projects: Vec<(String, PathBuf)>,
    env: BTreeMap<String, String>,
    labels: Vec<(String, String)>,
    workdir: String,
    user: Option<String>,
    cmd: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    /// What was decided and why, in order.
    pub decisions: Vec<String>,
    /// What has no place in the recipe.
    pub untranslated: Vec<Untranslated>,
    /// The files read.
    pub inputs: Vec<PathBuf>,
    /// The Python versions the inputs admit when they leave the choice to init, in init's
    /// order; empty when an input names the version.
    pub python_alternatives: Vec<String>,
}

/// The Debian and Ubuntu releases whose `python3` is each version, in the order init prefers
/// the versions (see the module comment).
const PYTHONS: [(&str, &str, &str); 6] = [
    ("3.11", "debian", "bookworm"),
    ("3.12", "ubuntu", "noble"),
    ("3.10", "ubuntu", "jammy"),
    ("3.13", "debian", "trixie"),
    ("3.9", "debian", "bullseye"),
    // Last: Python 3.8 reached its end of life in October 2024 (PEP 569), and focal's standard
    // support ended in May 2025; projects of its time still pin it (CompVis stable-diffusion's
    // `python=3.8.5`), and torch has cp38 wheels up to 2.4.
    ("3.8", "ubuntu", "focal"),
];

/// The `python3` of a release, when init knows it.
fn release_python(suite: &str) -> Option<&'static str> {
    match suite {
        "bionic" => Some("3.6"),
        _ => PYTHONS.iter().find(|(_, _, s)| *s == suite).map(|(v, _, _)| *v),
    }
}

/// Reads the inputs and decides the recipe.
pub fn plan(opts: &InitOptions) -> Result<Plan, InitError> {
    // A repository whose Dockerfile installs a Python project kept one level down, with no
    // manifest at the top level (text-generation-inference's `RUN cd server && uv sync ...`):
    // that project, with the Dockerfile read beside its own inputs.
    if let Some((dockerfile, sub, line)) = dockerfile_project_below(opts) {
        let mut plan = plan_in(&InitOptions { dir: opts.dir.join(&sub), ..opts.clone() }, Some(&dockerfile))?;
        plan.decisions.insert(
            0,
            format!(
                "{}:{line}: the Dockerfile installs the Python project in {sub}/ (no manifest at the top level): \
                 the recipe is that project's, with the Dockerfile read beside its inputs, and only {sub}/ goes \
                 into the image",
                dockerfile.display()
            ),
        );
        return Ok(plan);
    }
    match plan_in(opts, None) {
        // A repository that keeps its Python project one level down (sglang's `python/`, whose
        // README installs `pip install -e "python[all]"`): that project, said.
        Err(InitError::NothingFound { dir, .. }) if opts.from.is_empty() => {
            let below = projects_below(&dir);
            let [sub] = below.as_slice() else { return Err(InitError::NothingFound { dir, below }) };
            let mut plan = plan_in(&InitOptions { dir: dir.join(sub), ..opts.clone() }, None)?;
            plan.decisions.insert(
                0,
                format!(
                    "{}: no manifest at the top level; the Python project is {sub}/ (its own manifest), as \
                     `pip install ./{sub}` installs it: the recipe is that project's, and only {sub}/ goes into \
                     the image",
                    dir.display()
                ),
            );
            Ok(plan)
        }
        other => other,
    }
}

#[allow(clippy::too_many_lines)] // the inputs in their order of precedence, one step each
fn plan_in(opts: &InitOptions, outer_dockerfile: Option<&Path>) -> Result<Plan, InitError> {
    let (inputs, found_early) = inputs::discover(opts, outer_dockerfile)?;
    let dir = &opts.dir;
    let mut found = Found { decisions: found_early, ..Found::default() };
    let has = |k: InputKind| inputs.iter().any(|(kind, _)| *kind == k);
    let mut lock_kind = if has(InputKind::UvLock) {
        Some(InputKind::UvLock)
    } else if has(InputKind::Pylock) {
        Some(InputKind::Pylock)
    } else {
        None
    };
    // Requirements files: `requirements.txt` when there is one, else all of them.
    let requirement_files: Vec<&PathBuf> = {
        let all: Vec<&PathBuf> =
            inputs.iter().filter(|(k, _)| *k == InputKind::Requirements).map(|(_, p)| p).collect();
        let main: Vec<&PathBuf> =
            all.iter().copied().filter(|p| p.file_name().is_some_and(|n| n == "requirements.txt")).collect();
        // Without a requirements.txt, the top-level files whose names say they are not what
        // the image runs (robomimic's requirements-docs.txt beside its setup.py) are left out,
        // as in a requirements folder; all of them when nothing else would be left.
        let runtime: Vec<&PathBuf> = all.iter().copied().filter(|p| !not_runtime(p)).collect();
        if !opts.from.is_empty() {
            all
        } else if !main.is_empty() {
            main
        } else if !runtime.is_empty()
            || inputs.iter().any(|(k, _)| matches!(k, InputKind::Setup | InputKind::Pyproject))
        {
            runtime
        } else {
            all
        }
    };
    let of = |k: InputKind| inputs.iter().filter(move |(kind, _)| *kind == k).map(|(_, p)| p);
    // 1. The interpreter a `.python-version` names.
    for path in of(InputKind::PythonVersion) {
        let text = stackbuild_common::read_text(path, 4096, ".python-version")
            .map_err(|source| InitError::Read { path: path.clone(), source })?;
        found.inputs.push(path.clone());
        if let Some(v) = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')) {
            let minor: Vec<&str> =
                v.trim_start_matches("cpython-").trim_start_matches("python").split('.').take(2).collect();
            found.python = Some((minor.join("."), path.display().to_string()));
        }
    }
    // 2. A lock: the whole list of what is installed.
    for (kind, path) in inputs.iter().filter(|(k, _)| matches!(k, InputKind::UvLock | InputKind::Pylock)) {
        if Some(*kind) == lock_kind && found.lock.is_none() {
            if let Some(why) = &opts.skip_lock {
                found.decide(format!(
                    "{}: not used as the image's lock: {why}; the packages are resolved from the project's \
                     manifests instead",
                    path.display()
                ));
                continue;
            }
            // A lock the image cannot install as it is (a wheel without a sha256, as an index
            // of release links serves them): said, and the project's own manifests are read
            // instead, as if there were no lock.
            let given = match stackbuild_python::GivenLock::load(path) {
                Ok(given) => given,
                Err(e) => {
                    found.decide(format!(
                        "{}: not used as the image's lock ({e}); the packages are resolved from the project's \
                         manifests instead",
                        path.display()
                    ));
                    continue;
                }
            };
            found.given = Some(given);
            found.inputs.push(path.clone());
            found.decide(format!(
                "{}: the project's lock: the image installs exactly its wheels ([python] lock), nothing is resolved",
                path.display()
            ));
            found.lock = Some(path.clone());
        } else {
            let lock = found.lock.as_ref().map_or_else(String::new, |l| l.display().to_string());
            found.decide(format!("{}: not used ({lock} is the lock)", path.display()));
        }
    }
    // A lock that could not be used is as no lock: the manifests say what is installed.
    if found.lock.is_none() {
        lock_kind = None;
    }
    // 3. A Dockerfile: its base, environment, and the `pip install` lines that made its image
    //    (those read the requirements files they name).
    let python_before = found.python.clone();
    for path in of(InputKind::Dockerfile) {
        let before = found.packages.len();
        dockerfile::read_file(path, &mut found, dir)?;
        if lock_kind.is_some() && found.packages.len() > before {
            let extra: Vec<String> = found.packages.drain(before..).map(|(r, _, _)| r).collect();
            found.decide(format!(
                "{}: its pip install lines ({}) are not added: the lock lists what is installed",
                path.display(),
                extra.join(", ")
            ));
        }
    }
    if python_before.is_some() {
        found.python = python_before;
    }
    // A README's pip lines, where nothing else is here.
    for path in of(InputKind::Readme) {
        readme::read_file(path, &mut found, dir)?;
    }
    // The Dockerfile's pip lines say what is installed, unless it syncs the project with uv
    // (then they add to what `uv sync` installs: text-generation-inference's `uv pip install
    // nvidia-nccl-cu12==2.25.1` after its `uv sync`).
    let from_dockerfile = !found.packages.is_empty() && found.uv_sync.is_none();
    // 4. Requirements files, unless the lock or the Dockerfile's pip lines said what is installed.
    for path in &requirement_files {
        if lock_kind.is_some() {
            found.decide(format!("{}: not read: the lock lists what is installed", path.display()));
        } else if let Some(origin) =
            found.uv_sync.as_ref().filter(|_| has(InputKind::Pyproject)).map(|s| s.origin.clone())
        {
            found.decide(format!(
                "{}: not read: {origin}'s `uv sync` installs pyproject.toml's dependencies",
                path.display()
            ));
        } else if from_dockerfile {
            let text = format!(
                "{}: not read on its own: the Dockerfile's pip install lines say what is installed",
                path.display()
            );
            if !found.inputs.contains(path) {
                found.decide(text);
            }
        } else {
            requirements::read_file(path, &mut found, dir)?;
        }
    }
    // 4b. A conda environment, on the same terms: its conda packages as the index names them,
    //     its `pip:` list as a requirements file (conda::read_file). One file: the first of
    //     conda::NAMES (a project's `conda_environment_macos.yaml` is another machine's).
    if let Some(path) = of(InputKind::Conda).next() {
        if lock_kind.is_some() {
            found.decide(format!("{}: not read: the lock lists what is installed", path.display()));
        } else if from_dockerfile {
            found.decide(format!(
                "{}: not read: the Dockerfile's pip install lines say what is installed",
                path.display()
            ));
        } else {
            conda::read_file(path, &mut found, dir)?;
        }
    }
    // 5. pyproject.toml: the name and requires-python always; its dependencies unless a lock or
    //    the Dockerfile's pip lines say what is installed. Beside a requirements file they are
    //    added to it (`pip install -r requirements.txt .` installs both); where both name a
    //    package, the requirements file's line stays (it is usually the exact pin).
    // The README, where the manifests leave a choice open (`readme::Supplement`): read only
    // when init finds its inputs itself, and only where no lock or Dockerfile says more.
    let readme = (opts.from.is_empty() && lock_kind.is_none() && !from_dockerfile && !has(InputKind::Readme))
        .then(|| readme::of_dir(dir))
        .flatten()
        .map(|path| readme::supplement(&path, project_name(dir).as_deref()))
        .unwrap_or_default();
    for path in of(InputKind::Pyproject) {
        let deps = lock_kind.is_none() && !from_dockerfile;
        let before = found.packages.len();
        let mut selection = pyproject::Selection {
            extras: opts.extras.clone(),
            all_extras: false,
            groups: opts.groups.clone(),
            all_groups: false,
            by: None,
        };
        if let (Some((extras, at)), true, true) =
            (&readme.extras, opts.extras.is_empty(), found.uv_sync.is_none())
        {
            if !extras.is_empty() {
                selection.extras.clone_from(extras);
                selection.by = Some(format!("{at} (the README's install of the project)"));
            }
        }
        if let Some(sync) = found.uv_sync.clone() {
            selection.extras.extend(sync.extras);
            selection.groups.extend(sync.groups);
            selection.all_extras = sync.all_extras;
            selection.all_groups = sync.all_groups;
            selection.by = Some("the Dockerfile's `uv sync`".to_owned());
        }
        pyproject::read_file(path, &mut found, &selection, deps)?;
        if !deps {
            found.decide(format!(
                "{}: name and requires-python only; the packages come from the {}",
                path.display(),
                if lock_kind.is_some() { "lock" } else { "Dockerfile" }
            ));
        } else if before > 0 && requirement_files.iter().any(|p| found.inputs.contains(p)) {
            found.decide(format!(
                "{}: its dependencies are added to the requirements file's ({} more), as `pip install -r \
                 requirements.txt .` installs both",
                path.display(),
                found.packages.len() - before
            ));
        }
    }
    // 5b. The README's torch, where no manifest names torch: the version its install
    //     instructions give (pip's `torch==X` or conda's `pytorch==X`).
    let names_torch = |found: &Found| {
        found.packages.iter().any(|(_, n, _)| stackbuild_python::normalize_name(n) == "torch")
    };
    if !readme.torch.is_empty() && !names_torch(&found) {
        for (requirement, name, at) in &readme.torch {
            found.packages.push((requirement.clone(), name.clone(), at.clone()));
        }
        let (pins, at): (Vec<&str>, Vec<&str>) =
            readme.torch.iter().map(|(r, _, at)| (r.as_str(), at.as_str())).unzip();
        found.decide(format!(
            "{}: no manifest names torch; {} from the README's install instructions, as a new user following it installs it",
            at[0],
            pins.join(", ")
        ));
    }
    // 6. A setuptools project (`setup.py`, `setup.cfg`) or a pyproject whose dependencies are
    //    `dynamic`, with no other list of packages: only its build tells its dependencies, so
    //    the project is installed as a wheel built from its tree, and the lock resolves what
    //    its metadata (prepared in the build sandbox) requires.
    for path in of(InputKind::Setup) {
        found.inputs.push(path.clone());
    }
    if lock_kind.is_none()
        && found.packages.is_empty()
        && found.project_wheel.is_none()
        && (has(InputKind::Setup) || found.dynamic_dependencies)
    {
        let what = if found.dynamic_dependencies {
            "pyproject.toml lists its dependencies as dynamic"
        } else {
            "a setuptools project (setup.py / setup.cfg) with no requirements file"
        };
        found.project_wheel = Some(what.to_owned());
        found.decide(format!(
            "the project is installed as a wheel built from its tree ([[source]] install = \"wheel\"): {what}; \
             `stackbuild lock` prepares its metadata in the build sandbox and resolves what it requires"
        ));
    }
    // 7. The project's own lock installs the project from its tree (uv's editable root).
    if lock_kind.is_some() && found.project_wheel.is_none() && found.lock_installs(dir) {
        let what = format!(
            "{} installs it from its tree (`source = {{ editable = ... }}`), as `uv sync` does; its \
             dependencies are the lock's",
            found.lock.as_ref().map(|l| l.display().to_string()).unwrap_or_default()
        );
        found.decide(format!("the project is installed as a wheel built from its tree ([[source]] install = \"wheel\"): {what}"));
        found.project_wheel = Some(what);
    }
    // 8. A project that runs only once installed (console scripts, a src/ layout).
    if lock_kind.is_none() && found.project_wheel.is_none() && opts.from.is_empty() {
        if let Some(why) = pyproject::must_install(dir) {
            found.decide(format!("the project is installed as a wheel built from its tree ([[source]] install = \"wheel\"): {why}"));
            found.project_wheel = Some(why);
        }
    }
    torch::project(dir, &mut found);
    // Requirements files nothing included: named, so that a reader knows they were seen.
    for (kind, path) in &inputs {
        let read = |p: &Path| {
            found.inputs.iter().any(|i| std::fs::canonicalize(i).ok() == std::fs::canonicalize(p).ok())
        };
        let synced = found.uv_sync.is_some() && has(InputKind::Pyproject);
        if *kind == InputKind::Requirements
            && lock_kind.is_none()
            && !from_dockerfile
            && !synced
            && !read(path)
        {
            let text = if not_runtime(path)
                && !inputs.iter().any(|(_, p)| p.file_name().is_some_and(|n| n == "requirements.txt"))
            {
                format!(
                    "{}: not read: its name says it is not what the image runs (--from names it)",
                    path.display()
                )
            } else {
                format!(
                    "{}: not read (requirements.txt is, and does not include it; --from names it)",
                    path.display()
                )
            };
            found.decide(text);
        }
    }
    let mut pairs: Vec<(String, String)> = found.same_repeats.clone();
    pairs.dedup();
    for (at, of) in pairs {
        let n = found.same_repeats.iter().filter(|p| p.0 == at && p.1 == of).count();
        found.decide(format!("{at}: {n} requirement(s) repeat {of}'s word for word; the first stays"));
    }
    decide(opts, found)
}

#[allow(clippy::too_many_lines)] // name, Python, base, CUDA, paths: one decision after another
fn decide(opts: &InitOptions, mut found: Found) -> Result<Plan, InitError> {
    let dir = &opts.dir;
    // The name: --name, [project] name, the directory's.
    let dir_name = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "app".into());
    let (raw_name, name_why) = match (&opts.name, &found.name) {
        (Some(n), _) => (n.clone(), "--name".to_owned()),
        (None, Some((n, why))) => (n.clone(), why.clone()),
        (None, None) => (dir_name, "the project directory's name".to_owned()),
    };
    let name = image_name(&raw_name);
    found.decide(format!("image name {name:?}: {name_why}"));

    // Python.
    let specs: Vec<(pep440_rs::VersionSpecifiers, String)> = found
        .requires_python
        .iter()
        .filter_map(|(s, why)| s.parse().ok().map(|spec| (spec, format!("{why} {s:?}"))))
        .collect();
    let lock = found.given.take();
    let admits = |v: &str| {
        let version: pep440_rs::Version =
            format!("{v}.0").parse().unwrap_or_else(|_| pep440_rs::Version::new([3]));
        specs.iter().all(|(s, _)| s.contains(&version))
            && lock.as_ref().is_none_or(|l| {
                v.parse().is_ok_and(|py| {
                    l.select(&stackbuild_python::Target::new(py, stackbuild_common::Platform::LinuxAmd64))
                        .is_ok()
                })
            })
    };
    // The versions the inputs leave open, when they leave the choice to init.
    let mut python_alternatives: Vec<String> = Vec::new();
    let python = match (found.python.clone(), found.distro.clone()) {
        (Some((v, why)), _) => {
            found.decide(format!("Python {v}: {why}"));
            v
        }
        (None, Some((_, suite, why))) if release_python(&suite).is_some_and(admits) => {
            let v = release_python(&suite).unwrap_or_default().to_owned();
            found.decide(format!("Python {v}: the python3 of {suite} ({why})"));
            v
        }
        _ if opts.python.as_ref().is_some_and(|(v, _)| admits(v)) => {
            let (v, why) = opts.python.clone().unwrap_or_default();
            python_alternatives =
                PYTHONS.iter().map(|(v, _, _)| (*v).to_owned()).filter(|v| admits(v)).collect();
            found.decide(format!("Python {v}: {why}"));
            v
        }
        _ => {
            python_alternatives =
                PYTHONS.iter().map(|(v, _, _)| (*v).to_owned()).filter(|v| admits(v)).collect();
            let Some((v, _, _)) = PYTHONS.iter().find(|(v, _, _)| admits(v)) else {
                let mut what: Vec<String> = specs.iter().map(|(_, w)| w.clone()).collect();
                if let Some(l) = &found.lock {
                    what.push(format!("the wheels of {}", l.display()));
                }
                return Err(InitError::NoPython(what.join(" and ")));
            };
            let why = if specs.is_empty() && lock.is_none() {
                "nothing names a version; 3.11 is the newest Python that every torch release since 2.1 has CUDA wheels for".to_owned()
            } else {
                let mut w: Vec<String> = specs.iter().map(|(_, w)| w.clone()).collect();
                if let Some(l) = &found.lock {
                    w.push(format!("{} has wheels for it", l.display()));
                }
                let order: Vec<&str> = PYTHONS.iter().map(|(v, _, _)| *v).collect();
                format!("the first of {} that {} admits", order.join(", "), w.join(" and "))
            };
            found.decide(format!("Python {v}: {why}"));
            (*v).to_owned()
        }
    };
    // The base: the release whose python3 is that version.
    let distro = match found.distro.clone() {
        Some((d, suite, why)) if release_python(&suite) == Some(python.as_str()) => {
            found.decide(format!("base {d} {suite}: {why}"));
            (d, suite)
        }
        other => {
            let Some((_, d, suite)) = PYTHONS.iter().find(|(v, _, _)| *v == python) else {
                return Err(InitError::NoPython(format!(
                    "Python {python} (no Debian or Ubuntu release ships it as python3)"
                )));
            };
            if let Some((od, osuite, why)) = other {
                found.decide(format!(
                    "base {d} {suite}, not {od} {osuite} ({why}): {osuite}'s python3 is {}, the image's is {python}",
                    release_python(&osuite).unwrap_or("another")
                ));
            } else {
                found.decide(format!("base {d} {suite}: its python3 is {python}"));
            }
            ((*d).to_owned(), (*suite).to_owned())
        }
    };
    let mut apt: Vec<String> = ["python3", "python3-venv", "ca-certificates"].map(str::to_owned).to_vec();
    for p in std::mem::take(&mut found.apt) {
        let plain = p.split(['=', ':']).next().unwrap_or_default().to_owned();
        if matches!(plain.as_str(), "python3-pip" | "python3-dev" | "build-essential")
            || plain.starts_with("python3.")
        {
            found.decide(format!(
                "apt package {p}: left out: the build installs wheels without pip or a compiler"
            ));
        } else if !apt.contains(&p) {
            apt.push(p);
        }
    }
    // CUDA.
    let cuda = found.cuda.clone().map(|(v, why)| {
        found.decide(format!("[cuda] {v}: {why}"));
        let cudnn = found.cudnn.clone().map(|(c, why)| {
            found.decide(format!("[cuda] cudnn {c}: {why}"));
            c
        });
        (v, cudnn)
    });
    if found.hashes > 0 {
        found.decide(format!(
            "{} --hash option(s): not copied; `stackbuild lock` pins every file by sha256 in the recipe's lock",
            found.hashes
        ));
    }
    let (source_dest, workdir) = match (found.source_dest.clone(), found.workdir.clone()) {
        (Some((dest, why)), w) => {
            found.decide(format!("the project goes to {dest} ({why})"));
            (dest.clone(), w.unwrap_or(dest))
        }
        (None, Some(w)) => (w.clone(), w),
        (None, None) => {
            let dest = format!("/workspace/{name}");
            found.decide(format!("the project goes to {dest}"));
            (dest.clone(), dest)
        }
    };
    let packages: Vec<(String, String)> =
        found.packages.iter().map(|(r, _, at)| (r.clone(), at.clone())).collect();
    let unpinned: Vec<String> =
        found.packages.iter().filter(|(r, _, _)| is_unpinned(r)).map(|(_, n, _)| n.clone()).collect();
    let mut plan = Plan {
        name,
        python,
        distro,
        apt,
        lock: found.lock.clone(),
        packages,
        constraints: found.constraints.iter().map(|(r, _, at)| (r.clone(), at.clone())).collect(),
        overrides: found.overrides.clone(),
        unpinned,
        index: found.index.map(|(u, _)| u),
        extra_index: found.extra_index,
        find_links: found.find_links,
        project: dir.clone(),
        cuda,
        source_dest,
        project_wheel: found.project_wheel.is_some(),
        project_extras: found.project_extras,
        torch_builds: Vec::new(),
        local_projects: found.local_projects.clone(),
        env: found.env,
        labels: found.labels,
        workdir,
        user: found.user,
        cmd: found.cmd,
        entrypoint: found.entrypoint,
        decisions: found.decisions,
        untranslated: found.untranslated,
        inputs: found.inputs,
        python_alternatives,
    };
    if let Some(project) = found.torch_project {
        plan.build_against_torch(project);
    }
    Ok(plan)
}

/// Whether a requirement has no version at all (`numpy`, `markdown2[all]`, `x ; sys_platform ==
/// "linux"`): a recipe pins its top-level packages, with `==` or a range.
fn is_unpinned(requirement: &str) -> bool {
    use pep508_rs::pep440_rs::Operator;
    use std::str::FromStr as _;
    // A range (`streamlit>=0.73.1`) or a prefix (`torch==1.11.0.*`, a conda `=1.11.0`) is not
    // a pin: the recipe gets the version the resolution takes within it, as pip-compile and
    // uv's lock would record it.
    pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(requirement).is_ok_and(|r| {
        match &r.version_or_url {
            None => true,
            Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) => {
                !specs.iter().any(|s| matches!(s.operator(), Operator::Equal | Operator::ExactEqual))
            }
            Some(pep508_rs::VersionOrUrl::Url(_)) => false,
        }
    })
}

/// `first` with the extras of `other` it lacks (`None` when it lacks none).
fn merge_extras(first: &str, other: &str) -> Option<String> {
    use std::str::FromStr as _;
    let parse = |r: &str| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok();
    let (mut a, b) = (parse(first)?, parse(other)?);
    let missing: Vec<_> = b.extras.iter().filter(|e| !a.extras.contains(e)).cloned().collect();
    if missing.is_empty() {
        return None;
    }
    a.extras.extend(missing);
    a.extras.sort();
    Some(a.to_string())
}

/// `text` as the rest of a TOML comment line: TOML 1.0 allows no control character but tab
/// in a comment, and a newline would end it (a resolver's error once spilled out of one).
fn comment(text: &str) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    one_line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `req` with `==version`, its name, extras and marker kept (`markdown2[all]==2.5.4`).
fn pin_requirement(req: &str, version: &str) -> String {
    let (head, marker) = match req.split_once(';') {
        Some((h, m)) => (h.trim(), Some(m.trim())),
        None => (req.trim(), None),
    };
    // The name and extras as written; a range or prefix the pin replaces goes.
    let end = head.find(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c))).unwrap_or(head.len());
    let mut base = head[..end].to_owned();
    let rest = head[end..].trim_start();
    if let Some(close) = rest.strip_prefix('[').and_then(|r| r.find(']')) {
        base.push_str(&rest[..close + 2]);
    }
    match marker {
        Some(m) => format!("{base}=={version} ; {m}"),
        None => format!("{base}=={version}"),
    }
}

/// A path as the recipe (in `dir`) names it: relative when it is inside `dir`.
fn relative(path: &Path, dir: &Path) -> String {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let (p, d) = (canon(path), canon(dir));
    // Outside the recipe's directory: absolute, since the recipe's paths are relative to it,
    // not to where init ran.
    p.strip_prefix(&d).map_or_else(|_| p.display().to_string(), |r| r.display().to_string())
}

/// An OCI repository name component: lowercase letters, digits and `.`, `_`, `-` between them.
fn image_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with(['-', '.', '_']) {
            out.push('-');
        }
    }
    let out = out.trim_end_matches(['-', '.', '_']).to_owned();
    if out.is_empty() {
        "app".into()
    } else {
        out
    }
}

/// Writes `text` to `path` as a new file: never over anything that is there.
pub fn write_new(path: &Path, text: &str) -> Result<(), InitError> {
    use std::io::Write as _;
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(InitError::Exists { path: path.to_owned() });
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|source| InitError::Write { path: path.to_owned(), source })?;
    tmp.write_all(text.as_bytes()).map_err(|source| InitError::Write { path: path.to_owned(), source })?;
    // `persist_noclobber`: the rename fails if a file appeared meanwhile.
    tmp.persist_noclobber(path).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            InitError::Exists { path: path.to_owned() }
        } else {
            InitError::Write { path: path.to_owned(), source: e.error }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests;
