//! Which files of a project init reads: the kinds of input by file name, what the directory
//! holds (a requirements folder, symlinks inside the project, one Dockerfile of several, a
//! README where nothing else is), and a Python project one level down that a Dockerfile
//! installs.

use std::path::{Path, PathBuf};

use super::layout::{choose_dockerfile, requirements_folder};
use super::{conda, dockerfile, pyproject, readme, relative, torch, InitError, InitOptions};

/// The kinds of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum InputKind {
    /// `uv.lock`.
    UvLock,
    /// `pylock.toml`.
    Pylock,
    /// `requirements*.txt`.
    Requirements,
    /// `pyproject.toml`.
    Pyproject,
    /// `.python-version`.
    PythonVersion,
    /// `Dockerfile`, `Containerfile`, `*.Dockerfile`.
    Dockerfile,
    /// A conda environment file (`environment.yml`, ...).
    Conda,
    /// `setup.py` or `setup.cfg`: a setuptools project, whose dependencies only its build
    /// tells (PEP 517 metadata, prepared in the build sandbox when the recipe is locked).
    Setup,
    /// A README's `pip install` lines, only where nothing else is found (`readme`).
    Readme,
}

/// What kind of input a file name says.
pub(crate) fn input_kind(path: &Path) -> Option<InputKind> {
    let name = path.file_name()?.to_str()?;
    let lower = name.to_ascii_lowercase();
    Some(match stackbuild_recipe::lock_format_of_name(path) {
        Some(stackbuild_recipe::LockFormat::UvLock) => InputKind::UvLock,
        Some(stackbuild_recipe::LockFormat::Pylock) => InputKind::Pylock,
        None if name == "pyproject.toml" => InputKind::Pyproject,
        None if name == ".python-version" => InputKind::PythonVersion,
        None if name == "setup.py" || name == "setup.cfg" => InputKind::Setup,
        None if conda::NAMES.contains(&lower.as_str()) => InputKind::Conda,
        None if lower.starts_with("dockerfile")
            || lower.ends_with(".dockerfile")
            || lower.starts_with("containerfile") =>
        {
            InputKind::Dockerfile
        }
        None if Path::new(&lower).extension().is_some_and(|e| e == "txt" || e == "in") => {
            InputKind::Requirements
        }
        None => return None,
    })
}

/// The project's name, for reading its README before its manifests: `pyproject.toml`'s
/// `[project] name`, else the one `setup.py` passes to `setup()`.
pub(super) fn project_name(dir: &Path) -> Option<String> {
    let read = |name: &'static str| stackbuild_common::read_text(&dir.join(name), 1 << 20, name).ok();
    read("pyproject.toml")
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .and_then(|doc| doc.get("project")?.get("name")?.as_str().map(str::to_owned))
        .or_else(|| torch::setup_name(&read("setup.py")?))
}

/// The Dockerfile init reads at the top level of `opts.dir`, the subdirectory whose Python
/// project it installs, and its line, when the top level has no Python manifest of its own.
pub(super) fn dockerfile_project_below(opts: &InitOptions) -> Option<(PathBuf, String, usize)> {
    if !opts.from.is_empty() {
        return None;
    }
    let files: Vec<PathBuf> = std::fs::read_dir(&opts.dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_file()))
        .collect();
    let manifest = files.iter().any(|p| {
        matches!(
            input_kind(p),
            Some(
                InputKind::UvLock
                    | InputKind::Pylock
                    | InputKind::Pyproject
                    | InputKind::Setup
                    | InputKind::Conda
                    | InputKind::Requirements
            )
        )
    });
    if manifest {
        return None;
    }
    let mut dockerfiles: Vec<PathBuf> =
        files.into_iter().filter(|p| input_kind(p) == Some(InputKind::Dockerfile)).collect();
    dockerfiles.sort();
    let dockerfile = choose_dockerfile(&dockerfiles).0?;
    let (sub, line) = dockerfile::project_dir(&dockerfile, &opts.dir)?;
    Some((dockerfile, sub, line))
}

/// Inputs by kind, in their order of precedence.
pub(super) type Inputs = Vec<(InputKind, PathBuf)>;

/// The inputs of `opts` in their order of precedence, and what was decided on the way; the
/// Dockerfile `outer_dockerfile` (one level up) is read too where the project has none.
#[allow(clippy::too_many_lines)] // one step per place a project keeps its inputs
pub(super) fn discover(
    opts: &InitOptions,
    outer_dockerfile: Option<&Path>,
) -> Result<(Inputs, Vec<String>), InitError> {
    let dir = &opts.dir;
    let mut inputs: Vec<(InputKind, PathBuf)> = Vec::new();
    let mut found_early: Vec<String> = Vec::new();
    if opts.from.is_empty() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| InitError::Read {
                path: dir.clone(),
                source: stackbuild_common::InputError::Io {
                    what: "project directory",
                    source: stackbuild_common::io_err("reading", dir)(e),
                },
            })?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        names.sort();
        // A symlinked input (torchtitan's requirements.txt -> .ci/docker/requirements.txt) is
        // read as the file it names when that file is inside the project, as `pip install -r`
        // and Docker's build context would have it; one pointing out of the project is not read.
        let inside = std::fs::canonicalize(dir).ok();
        names = names
            .into_iter()
            .filter_map(|p| {
                if input_kind(&p).is_none() || !p.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink())
                {
                    return Some(p);
                }
                match std::fs::canonicalize(&p) {
                    Ok(target)
                        if inside.as_ref().is_some_and(|d| target.starts_with(d))
                            && input_kind(&target) == input_kind(&p) =>
                    {
                        let shown = relative(&target, dir);
                        found_early.push(format!("{}: a symlink to {shown}; that file is read", p.display()));
                        Some(dir.join(shown))
                    }
                    _ => {
                        found_early.push(format!(
                            "{}: not read: a symlink to a file out of the project, or of another kind",
                            p.display()
                        ));
                        None
                    }
                }
            })
            .collect();
        // Projects that keep their requirements in a folder (`requirements/cuda.txt`, ...): the
        // runtime ones, when the top level has none.
        let top_level_requirements = names.iter().any(|p| {
            input_kind(p) == Some(InputKind::Requirements)
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.to_ascii_lowercase().starts_with("requirements"))
        });
        let mut folder = Vec::new();
        if !top_level_requirements {
            if let Some((files, why)) = requirements_folder(dir) {
                if pyproject::lists_dependencies(dir) {
                    found_early.push(format!(
                        "{}: not read: pyproject.toml lists the project's dependencies, and `pip install .` \
                         installs those; the folder's files are optional features (--from names one)",
                        files[0].parent().unwrap_or(dir).display()
                    ));
                } else {
                    found_early.push(why);
                    folder = files;
                }
            }
        }
        for path in folder {
            inputs.push((InputKind::Requirements, path));
        }
        for path in names {
            let Some(kind) = input_kind(&path) else { continue };
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_ascii_lowercase();
            // Of the .txt files, only requirements files; a Dockerfile only as named.
            if kind == InputKind::Requirements && !name.starts_with("requirements") {
                continue;
            }
            inputs.push((kind, path));
        }
        let dockerfiles: Vec<PathBuf> =
            inputs.iter().filter(|(k, _)| *k == InputKind::Dockerfile).map(|(_, p)| p.clone()).collect();
        let (chosen, why) = choose_dockerfile(&dockerfiles);
        inputs.retain(|(k, p)| *k != InputKind::Dockerfile || chosen.as_ref() == Some(p));
        found_early.extend(why);
        // The Dockerfile of the repository that installs this project from one level up.
        if let (Some(outer), None) = (outer_dockerfile, &chosen) {
            inputs.push((InputKind::Dockerfile, outer.to_owned()));
        }
    } else {
        for path in &opts.from {
            let yaml = path.extension().is_some_and(|e| e == "yml" || e == "yaml");
            let kind = input_kind(path)
                .or(yaml.then_some(InputKind::Conda))
                .ok_or_else(|| InitError::UnknownInput { path: path.clone() })?;
            inputs.push((kind, path.clone()));
        }
    }
    // A setup.cfg of tool settings only (text-generation-webui's `[pycodestyle]`) is no
    // setuptools project: setuptools reads a project from its `[metadata]` and `[options]`.
    inputs.retain(|(kind, path)| {
        *kind != InputKind::Setup
            || path.file_name().is_none_or(|n| n != "setup.cfg")
            || dir.join("setup.py").is_file()
            || stackbuild_common::read_text(path, 1 << 20, "setup.cfg")
                .is_ok_and(|t| t.lines().any(|l| matches!(l.trim(), "[metadata]" | "[options]")))
    });
    if opts.from.is_empty() && inputs.iter().all(|(k, _)| *k == InputKind::PythonVersion) {
        if let Some(readme) = readme::with_pip_lines(dir) {
            inputs.push((InputKind::Readme, readme));
        }
    }
    inputs.sort_by_key(|(k, _)| *k);
    if inputs.iter().all(|(k, _)| *k == InputKind::PythonVersion) {
        return Err(InitError::NothingFound { dir: dir.clone(), below: Vec::new() });
    }
    Ok((inputs, found_early))
}
