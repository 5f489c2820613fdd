//! The image's Python stack as a PEP 751 lock (`pylock.toml`,
//! <https://packaging.python.org/en/latest/specifications/pylock-toml/>), which uv
//! (`uv pip install -r`, `uv pip sync`), pip 26 and PDM install: the environment of the image,
//! on a laptop.
//!
//! Every wheel of the lock is written with its file name, the URL the index serves it at (read
//! from the index's PEP 691/503 page, whose sha256 must be the lock's), its size and its sha256;
//! a `[[python.wheel]]` of the recipe is written as a `path`. `requires-python` and
//! `environments` name the image's interpreter and platforms; a stack for several platforms
//! gives each package its platform's `marker`. What only this project knows (the recipe, CUDA,
//! the base, patches and sources) goes under `[tool.stackbuild]`, which PEP 751 reserves for
//! the tool that wrote the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::index::{Index, IndexError};
use crate::lock::{Lock, LockedPackage};
use stackbuild_common::Platform;
use stackbuild_recipe::Recipe;

/// Why the PEP 751 lock could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PylockError {
    /// The index could not answer.
    #[error("looking up {package} on {index}: {source}")]
    Index {
        /// The package.
        package: String,
        /// The index URL.
        index: String,
        /// Why.
        #[source]
        source: IndexError,
    },
    /// The wheel the lock names is not where the recipe's indexes are.
    #[error("{filename} ({package}): not on {index}'s page of {package} nor a [[python.wheel]] of the recipe; a pylock.toml needs its URL")]
    NotFound {
        /// The package.
        package: String,
        /// The wheel.
        filename: String,
        /// The index URL.
        index: String,
    },
    /// The index serves another file under the lock's file name.
    #[error("{filename}: the index gives sha256 {served}, the lock has {locked}")]
    Digest {
        /// The wheel.
        filename: String,
        /// What the index says.
        served: String,
        /// What the lock says.
        locked: String,
    },
    /// The recipe has no `[python]`.
    #[error("{recipe}: no [python] section, so no Python stack to write as pylock.toml")]
    NoPython {
        /// The recipe.
        recipe: PathBuf,
    },
    /// A file that is not ours is in the way.
    #[error(
        "{path}: already there and not a pylock.toml stackbuild wrote; move it away or choose another path"
    )]
    NotOurs {
        /// The file.
        path: PathBuf,
    },
    /// The file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Serialize)]
struct Pylock {
    #[serde(rename = "lock-version")]
    lock_version: &'static str,
    #[serde(rename = "created-by")]
    created_by: &'static str,
    #[serde(rename = "requires-python")]
    requires_python: String,
    environments: Vec<String>,
    packages: Vec<Package>,
    tool: Tool,
}

#[derive(Serialize)]
struct Package {
    name: String,
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    marker: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<String>,
    wheels: Vec<Wheel>,
}

#[derive(Serialize)]
struct Wheel {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    size: u64,
    hashes: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Tool {
    stackbuild: StackbuildTool,
}

#[derive(Serialize)]
struct StackbuildTool {
    recipe: String,
    image: String,
    platforms: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cuda: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cudnn: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    patches: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sources: Vec<String>,
}

/// The PEP 508 marker of a platform, as the image's interpreter reports it.
fn marker(platform: Platform) -> String {
    format!("sys_platform == 'linux' and platform_machine == '{}'", platform.machine())
}

/// Where each locked wheel is: `url` from `index`'s page, or the recipe's own file.
fn locate(
    recipe: &Recipe,
    pylock_dir: &Path,
    index: &mut Index,
    index_url: &str,
    pages: &mut BTreeMap<String, Vec<crate::index::IndexFile>>,
    package: &LockedPackage,
) -> Result<(Option<String>, Option<String>), PylockError> {
    let python =
        recipe.python.as_ref().ok_or_else(|| PylockError::NoPython { recipe: recipe.path.clone() })?;
    if let Some(local) = python.wheels.iter().find(|w| w.filename == package.filename) {
        let path = pathdiff(&local.path, pylock_dir);
        return Ok((None, Some(path)));
    }
    let name = package.name.to_string();
    if !pages.contains_key(&name) {
        let files = index.files(&name).map_err(|source| PylockError::Index {
            package: name.clone(),
            index: index_url.to_owned(),
            source,
        })?;
        pages.insert(name.clone(), files);
    }
    let file = pages[&name].iter().find(|f| f.filename == package.filename).ok_or_else(|| {
        PylockError::NotFound {
            package: name.clone(),
            filename: package.filename.clone(),
            index: index_url.to_owned(),
        }
    })?;
    if let Some(served) = file.hashes.get("sha256").filter(|s| !s.eq_ignore_ascii_case(&package.sha256)) {
        return Err(PylockError::Digest {
            filename: package.filename.clone(),
            served: served.clone(),
            locked: package.sha256.clone(),
        });
    }
    Ok((Some(file.url.clone()), None))
}

/// `path` relative to `dir` where it is under it, else absolute (PEP 751: a relative `path` is
/// relative to the lock file's directory).
fn pathdiff(path: &Path, dir: &Path) -> String {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let (path, dir) = (abs(path), abs(dir));
    path.strip_prefix(&dir).map_or_else(|_| path.display().to_string(), |rel| rel.display().to_string())
}

/// The text of the recipe's PEP 751 lock, from its lock, for a file in `pylock_dir`; wheels
/// are looked up on `index` (at `index_url`).
pub(crate) fn render(
    recipe: &Recipe,
    lock: &Lock,
    pylock_dir: &Path,
    index: &mut Index,
    index_url: &str,
) -> Result<String, PylockError> {
    let python =
        recipe.python.as_ref().ok_or_else(|| PylockError::NoPython { recipe: recipe.path.clone() })?;
    let several = lock.platforms.len() > 1;
    let mut pages = BTreeMap::new();
    let mut packages = Vec::new();
    let mut locked: Vec<&LockedPackage> = lock.packages.iter().collect();
    locked.sort_by(|a, b| (a.name.as_ref(), a.platform).cmp(&(b.name.as_ref(), b.platform)));
    for package in locked {
        let (url, path) = locate(recipe, pylock_dir, index, index_url, &mut pages, package)?;
        let from_index = url.is_some();
        packages.push(Package {
            name: package.name.to_string(),
            version: package.version.to_string(),
            marker: several.then(|| marker(package.platform)),
            index: from_index.then(|| index_url.to_owned()),
            wheels: vec![Wheel {
                name: package.filename.clone(),
                url,
                path,
                size: package.size,
                hashes: BTreeMap::from([("sha256".to_owned(), package.sha256.clone())]),
            }],
        });
    }
    let minor = format!("{}.{}", python.version.part(0), python.version.part(1));
    let doc = Pylock {
        lock_version: "1.0",
        created_by: "stackbuild",
        requires_python: format!("=={minor}.*"),
        environments: lock.platforms.iter().map(|p| marker(*p)).collect(),
        packages,
        tool: Tool {
            stackbuild: StackbuildTool {
                recipe: recipe.path.display().to_string(),
                image: format!("{}:{}", recipe.image.name, recipe.image.tag),
                platforms: lock.platforms.iter().map(|p| p.as_str().to_owned()).collect(),
                cuda: recipe.cuda.as_ref().map(|c| c.version.to_string()),
                cudnn: recipe.cuda.as_ref().and_then(|c| c.cudnn.as_ref()).map(ToString::to_string),
                patches: recipe.patches.iter().map(|p| p.name.clone()).collect(),
                sources: lock.sources.iter().map(|s| s.name.clone()).collect(),
            },
        },
    };
    let body = toml::to_string(&doc)
        .map_err(|e| PylockError::Write { path: pylock_dir.to_owned(), source: std::io::Error::other(e) })?;
    Ok(format!(
        "{HEADER}{} as a PEP 751 lock, written by stackbuild from {}.\n\
         # Install it with `uv pip sync pylock.toml` or `pip install -r pylock.toml` (pip 26+).\n\n{body}",
        doc.tool.stackbuild.image,
        crate::lock::Lock::path_for(&recipe.path).display()
    ))
}

/// The first words of every file [`write`] writes: a file at the path without them is the
/// user's and is left alone.
const HEADER: &str = "# The Python stack of ";

/// [`write`], looking the wheels up on the recipe's `[python] index`, else on the one pip and uv
/// are configured with.
pub fn write_from_index(recipe: &Recipe, lock: &Lock, out: &Path) -> Result<(), PylockError> {
    let url = match recipe.python.as_ref().and_then(|p| p.index.clone()) {
        Some(url) => url,
        None => crate::index::configured_index().map_err(|source| PylockError::Index {
            package: "(any)".into(),
            index: "the configured index".into(),
            source,
        })?,
    };
    let mut index = Index::http(&url).map_err(|source| PylockError::Index {
        package: "(any)".into(),
        index: url.clone(),
        source,
    })?;
    write(recipe, lock, out, &mut index, &url)
}

/// Refuses `out` when a file that is not one of ours is there (call it before resolving).
pub fn may_write(out: &Path) -> Result<(), PylockError> {
    if let Ok(meta) = std::fs::symlink_metadata(out) {
        let ours = meta.is_file()
            && stackbuild_common::read_text(out, stackbuild_common::MAX_TEXT, "pylock.toml")
                .is_ok_and(|t| t.starts_with(HEADER));
        if !ours {
            return Err(PylockError::NotOurs { path: out.to_owned() });
        }
    }
    Ok(())
}

/// Writes [`render`]'s text to `out` atomically; a file already there must be one of ours.
pub(crate) fn write(
    recipe: &Recipe,
    lock: &Lock,
    out: &Path,
    index: &mut Index,
    index_url: &str,
) -> Result<(), PylockError> {
    may_write(out)?;
    let dir = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let text = render(recipe, lock, dir, index, index_url)?;
    stackbuild_common::write_atomic(out, text.as_bytes())
        .map_err(|source| PylockError::Write { path: out.to_owned(), source })
}
