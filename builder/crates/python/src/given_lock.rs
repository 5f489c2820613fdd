//! A lock the user brings: uv's `uv.lock` or a PEP 751 `pylock.toml`, named by `[python] lock`.
//!
//! The build installs exactly the wheels it lists for the image's interpreter and platform, with
//! the versions and sha256 digests it gives, and resolves nothing. Which packages apply follows
//! the file's own rules:
//!
//! - `pylock.toml` (PEP 751, <https://packaging.python.org/en/latest/specifications/pylock-toml/>):
//!   every `[[packages]]` entry whose `marker` and `requires-python` hold for the image. Entries
//!   that are the project itself (`directory`) are left to the recipe's `[[source]]`.
//! - `uv.lock` (<https://docs.astral.sh/uv/concepts/projects/layout/#the-lockfile>): a universal
//!   lock, which may hold several versions of one package for different environments; what
//!   applies is what `uv sync --no-dev` installs: the dependencies of the workspace members
//!   (`source = { editable | virtual }`), followed edge by edge where each edge's `marker`
//!   holds, with the optional dependencies an edge's `extra` asks for. Development groups are
//!   not installed into an image; the members themselves come from the recipe's `[[source]]`.
//!
//! A package that applies but has no wheel for the image (only an sdist, a git checkout, or
//! wheels for other platforms) is an error naming it, and so is a wheel whose bytes do not hash
//! to the digest the file gives. Wheels are downloaded from the URL the file records (the index
//! that served them when the lock was made), or copied from the `path` it records relative to
//! itself, and verified as they stream. Downloads go through [`crate::download`]'s client
//! with the machine's index configuration (credentials by host from an index URL or the netrc,
//! proxy, CA bundle, pip's timeout and retries), so a lock made against a private index builds
//! with the credentials that index needs, and a broken transfer resumes with `Range`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use pep508_rs::{MarkerTree, PackageName};
use sha2::{Digest as _, Sha256};
use stackcontract::version::PackageVersion;

use crate::artifact::Artifact;
use crate::solve::{Pinned, Target};
use stackbuild_common::Diagnostic;
use stackbuild_common::{io_err, IoError};
use stackbuild_recipe::{lock_format_of_name, LockFormat};

/// The largest lock file read (`uv.lock` of a large workspace is a few MB).
const MAX_LOCK: u64 = 64 << 20;
/// Why a given lock cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum GivenLockError {
    /// The file could not be read.
    #[error("[python] lock: {source}")]
    Read {
        /// The lock file.
        path: PathBuf,
        /// Why: a system error, not a regular file, or too large.
        source: stackbuild_common::InputError,
    },
    /// The file is not TOML, or a field has the wrong type.
    #[error("{diagnostic}")]
    Parse {
        /// The lock file.
        path: PathBuf,
        /// Where and what.
        diagnostic: Box<Diagnostic>,
    },
    /// The file is neither a `uv.lock` nor a `pylock.toml`, or a version it does not read.
    #[error("{}: {why}", path.display())]
    Format {
        /// The lock file.
        path: PathBuf,
        /// What was expected.
        why: String,
    },
    /// One package entry cannot be used as it is.
    #[error("{}: package {package}: {why}", path.display())]
    Package {
        /// The lock file.
        path: PathBuf,
        /// `name` or `name version`.
        package: String,
        /// What is wrong.
        why: String,
    },
    /// A package that applies has no wheel for the image.
    #[error(
        "{}: package {package} has no wheel for {target} and no sdist to build (it lists {}): \
         lock again for this platform (`uv lock` resolves for every platform; `uv export --format \
         pylock.toml` or `pip lock` for the image's), or build a wheel and give it as [[python.wheel]]",
        path.display(),
        if wheels.is_empty() { "none".to_owned() } else { wheels.join(", ") }
    )]
    NoWheel {
        /// The lock file.
        path: PathBuf,
        /// `name version`.
        package: String,
        /// The image's interpreter and platform.
        target: String,
        /// The wheels (or sdist) it has.
        wheels: Vec<String>,
    },
    /// The image's interpreter is outside the lock's `requires-python`.
    #[error("{}: requires-python {spec:?} does not admit the image's Python {python}", path.display())]
    RequiresPython {
        /// The lock file.
        path: PathBuf,
        /// The specifier.
        spec: String,
        /// `[python] version`.
        python: String,
    },
    /// A wheel could not be downloaded.
    #[error("{}: package {package}: downloading {url}: {reason}", path.display())]
    Download {
        /// The lock file.
        path: PathBuf,
        /// `name version`.
        package: String,
        /// The URL.
        url: String,
        /// The HTTP status or transport error.
        reason: String,
    },
    /// A wheel's bytes are not the ones the lock names.
    #[error(
        "{}: package {package}: {from} has sha256 {actual}, but the lock gives {expected}; the file \
         was replaced or the lock edited",
        path.display()
    )]
    Hash {
        /// The lock file.
        path: PathBuf,
        /// `name version`.
        package: String,
        /// The URL or path it came from.
        from: String,
        /// The digest in the lock.
        expected: String,
        /// The digest of the bytes.
        actual: String,
    },
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
}

/// One wheel a lock lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenWheel {
    /// The wheel's file name.
    pub filename: String,
    /// Where it is served, as the lock records it.
    pub url: Option<String>,
    /// A local file, resolved against the lock's directory.
    pub path: Option<PathBuf>,
    /// Lowercase hex sha256.
    pub sha256: String,
    /// Size in bytes, when recorded.
    pub size: Option<u64>,
}

/// Where a package comes from, as far as the image is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// Wheels (and maybe an sdist) from an index, a URL or a path.
    Files,
    /// The project itself or a workspace member: the recipe's `[[source]]`.
    Project,
    /// A git repository at a full commit: the tar stackbuild makes of that commit, built from
    /// source like a recipe's git dependency.
    Git {
        /// The repository URL.
        url: String,
        /// The full commit id.
        commit: String,
    },
    /// Only something to build (an sdist, git, a directory that is not the project).
    Build(String),
}

/// A dependency edge of `uv.lock`.
#[derive(Debug, Clone)]
struct Edge {
    name: PackageName,
    version: Option<String>,
    source: Option<String>,
    marker: Option<MarkerTree>,
    extras: Vec<String>,
}

/// One package entry.
#[derive(Debug, Clone)]
struct Entry {
    name: PackageName,
    version: Option<PackageVersion>,
    /// The `source` table as text (`uv.lock`), to match an edge that names it.
    source: Option<String>,
    origin: Origin,
    marker: Option<MarkerTree>,
    requires_python: Option<pep440_rs::VersionSpecifiers>,
    wheels: Vec<GivenWheel>,
    sdist: bool,
    /// The sdist, built from source when no wheel fits the image.
    sdist_file: Option<GivenWheel>,
    dependencies: Vec<Edge>,
    optional: BTreeMap<String, Vec<Edge>>,
    /// The directory of a project the lock installs from its tree (uv's `editable`, PEP 751's
    /// `[packages.directory] path`), as written, relative to the lock's directory.
    directory: Option<String>,
}

impl Entry {
    fn label(&self) -> String {
        match &self.version {
            Some(v) => format!("{} {v}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// A `uv.lock` or `pylock.toml`, read and checked.
#[derive(Debug, Clone)]
pub struct GivenLock {
    /// The file.
    pub path: PathBuf,
    /// Which kind.
    pub format: LockFormat,
    requires_python: Option<pep440_rs::VersionSpecifiers>,
    entries: Vec<Entry>,
}

/// A package the lock takes from git: built from the tar of its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitChosen {
    /// Normalized name.
    pub name: PackageName,
    /// Exact version.
    pub version: PackageVersion,
    /// The repository URL.
    pub url: String,
    /// The full commit id.
    pub commit: String,
}

/// The wheel of one package chosen for a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// Normalized name.
    pub name: PackageName,
    /// Exact version.
    pub version: PackageVersion,
    /// The wheel.
    pub wheel: GivenWheel,
}

impl Chosen {
    /// The pin that stands for exactly this file.
    pub fn pin(&self) -> Pinned {
        Pinned {
            name: self.name.clone(),
            version: self.version.clone(),
            hashes: vec![self.wheel.sha256.clone()],
        }
    }

    fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
}

impl GivenLock {
    /// Reads the lock at `path` (a regular file, at most 64 MiB).
    pub fn load(path: &Path) -> Result<Self, GivenLockError> {
        let text = stackbuild_common::read_text(path, MAX_LOCK, "[python] lock file")
            .map_err(|source| GivenLockError::Read { path: path.to_owned(), source })?;
        Self::parse(path, &text)
    }

    /// Parses lock `text`; `path` names it in messages and anchors relative wheel paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, GivenLockError> {
        let doc: toml::Table = toml::from_str(text).map_err(|e| GivenLockError::Parse {
            path: path.to_owned(),
            diagnostic: Box::new(Diagnostic::from_toml(path, text, &e)),
        })?;
        let format = match lock_format_of_name(path) {
            Some(f) => f,
            None if doc.contains_key("lock-version") => LockFormat::Pylock,
            None if doc.contains_key("package") && doc.contains_key("version") => LockFormat::UvLock,
            None => {
                return Err(GivenLockError::Format {
                    path: path.to_owned(),
                    why: "expected a uv.lock (`version`, `[[package]]`) or a PEP 751 pylock.toml \
                          (`lock-version`, `[[packages]]`)"
                        .into(),
                })
            }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let reader = Reader { path, dir };
        match format {
            LockFormat::UvLock => reader.uv_lock(&doc),
            LockFormat::Pylock => reader.pylock(&doc),
        }
    }

    /// The wheels to install for `target`, one per package, sorted by name.
    pub fn select(&self, target: &Target) -> Result<Vec<Chosen>, GivenLockError> {
        self.select_all(target).map(|(files, _)| files)
    }

    fn git_chosen(&self, entry: &Entry, url: &str, commit: &str) -> Result<GitChosen, GivenLockError> {
        let Some(version) = entry.version.clone() else {
            return Err(GivenLockError::Package {
                path: self.path.clone(),
                package: entry.label(),
                why: "a git package needs its version in the lock".into(),
            });
        };
        Ok(GitChosen { name: entry.name.clone(), version, url: url.to_owned(), commit: commit.to_owned() })
    }

    /// The repository URL of the package `name` the lock takes from git at `commit`.
    pub fn git_url(&self, name: &PackageName, commit: &str) -> Option<String> {
        self.entries.iter().find_map(|e| match &e.origin {
            Origin::Git { url, commit: c } if &e.name == name && c == commit => Some(url.clone()),
            _ => None,
        })
    }

    /// The projects the lock installs from their trees (the project itself and uv's workspace
    /// members, `source = { editable = ... }`; PEP 751's `[packages.directory]`): name, version
    /// (`None` where it is dynamic) and directory, resolved against the lock's. A `virtual`
    /// project is not one: uv installs its dependencies only.
    pub fn projects(&self) -> Vec<(PackageName, Option<PackageVersion>, PathBuf)> {
        let base = self.path.parent().unwrap_or(Path::new("."));
        self.entries
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.version.clone(), base.join(e.directory.as_deref()?))))
            .collect()
    }

    /// [`GivenLock::select`], and the packages that come from git (built from their commit).
    pub fn select_all(&self, target: &Target) -> Result<(Vec<Chosen>, Vec<GitChosen>), GivenLockError> {
        let python = python_version(target);
        if let Some(spec) = &self.requires_python {
            if !spec.contains(&python) {
                return Err(GivenLockError::RequiresPython {
                    path: self.path.clone(),
                    spec: spec.to_string(),
                    python: target.python.to_string(),
                });
            }
        }
        let env = target.marker_env();
        // No environment to evaluate in: keep the entry, as an installer that cannot tell.
        let holds = |m: &Option<MarkerTree>| {
            m.as_ref().is_none_or(|m| env.as_ref().is_none_or(|env| m.evaluate(env, &[])))
        };
        let applies: Vec<&Entry> = match self.format {
            LockFormat::Pylock => self
                .entries
                .iter()
                .filter(|e| holds(&e.marker))
                .filter(|e| e.requires_python.as_ref().is_none_or(|s| s.contains(&python)))
                .collect(),
            LockFormat::UvLock => self.uv_reachable(&holds)?,
        };
        let mut chosen: Vec<Chosen> = Vec::new();
        let mut git: Vec<GitChosen> = Vec::new();
        for entry in applies {
            match &entry.origin {
                Origin::Project => continue,
                Origin::Git { url, commit } => {
                    git.push(self.git_chosen(entry, url, commit)?);
                    continue;
                }
                Origin::Build(what) => {
                    return Err(GivenLockError::Package {
                        path: self.path.clone(),
                        package: entry.label(),
                        why: format!(
                            "it comes from {what}, which would have to be built; the image installs \
                             wheels only: build a wheel and give it as [[python.wheel]], or add it as a \
                             [[source]]"
                        ),
                    })
                }
                Origin::Files => {}
            }
            let best = entry
                .wheels
                .iter()
                .filter_map(|w| {
                    let name = stackbuild_common::parse_wheel_name(&w.filename)?;
                    name.rank(&target.python, &target.platform_tags()).map(|rank| (rank, name, w))
                })
                .min_by_key(|(rank, _, _)| *rank);
            if best.is_none() {
                if let (Some(sdist), Some(version)) = (&entry.sdist_file, &entry.version) {
                    // No wheel fits: the sdist is fetched like a wheel and built from source.
                    chosen.push(Chosen {
                        name: entry.name.clone(),
                        version: version.clone(),
                        wheel: sdist.clone(),
                    });
                    continue;
                }
            }
            let Some((_, name, wheel)) = best else {
                let mut wheels: Vec<String> = entry.wheels.iter().map(|w| w.filename.clone()).collect();
                if entry.sdist {
                    wheels.push("an sdist".into());
                }
                return Err(GivenLockError::NoWheel {
                    path: self.path.clone(),
                    package: entry.label(),
                    target: format!("cp{} {}", target.python_tag().trim_start_matches("cp"), target.platform),
                    wheels,
                });
            };
            if name.name != entry.name || entry.version.as_ref().is_some_and(|v| *v != name.version) {
                return Err(GivenLockError::Package {
                    path: self.path.clone(),
                    package: entry.label(),
                    why: format!("its wheel {} is named for {} {}", wheel.filename, name.name, name.version),
                });
            }
            if let Some(other) = chosen.iter().find(|c| c.name == entry.name) {
                return Err(GivenLockError::Package {
                    path: self.path.clone(),
                    package: entry.label(),
                    why: format!("{} applies to the image too; one package, one version", other.label()),
                });
            }
            chosen.push(Chosen { name: entry.name.clone(), version: name.version, wheel: wheel.clone() });
        }
        chosen.sort_by(|a, b| a.name.cmp(&b.name));
        git.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((chosen, git))
    }

    /// The entries `uv sync --no-dev` installs: from the workspace members along every edge
    /// whose marker holds, with the extras each edge asks for.
    fn uv_reachable(
        &self,
        holds: &dyn Fn(&Option<MarkerTree>) -> bool,
    ) -> Result<Vec<&Entry>, GivenLockError> {
        let mut seen: BTreeSet<(usize, Vec<String>)> = BTreeSet::new();
        let mut out: BTreeSet<usize> = BTreeSet::new();
        let mut todo: Vec<(usize, Vec<String>)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.origin == Origin::Project)
            .map(|(i, _)| (i, Vec::new()))
            .collect();
        if todo.is_empty() {
            return Err(GivenLockError::Format {
                path: self.path.clone(),
                why: "no workspace member (a package with source = { editable = ... } or { virtual = ... }) \
                      to start from"
                    .into(),
            });
        }
        while let Some((i, extras)) = todo.pop() {
            if !seen.insert((i, extras.clone())) {
                continue;
            }
            out.insert(i);
            let entry = &self.entries[i];
            let edges = entry
                .dependencies
                .iter()
                .chain(extras.iter().flat_map(|x| entry.optional.get(x).into_iter().flatten()));
            for edge in edges.filter(|e| holds(&e.marker)) {
                todo.push((self.uv_target(entry, edge)?, edge.extras.clone()));
            }
        }
        Ok(out.into_iter().map(|i| &self.entries[i]).collect())
    }

    /// The entry an edge of `from` names: by name, then by the version and source it gives.
    fn uv_target(&self, from: &Entry, edge: &Edge) -> Result<usize, GivenLockError> {
        let candidates: Vec<usize> = (0..self.entries.len())
            .filter(|&i| {
                let e = &self.entries[i];
                e.name == edge.name
                    && edge
                        .version
                        .as_ref()
                        .is_none_or(|v| e.version.as_ref().is_some_and(|ev| ev.to_string() == *v))
                    && edge.source.as_ref().is_none_or(|s| e.source.as_ref() == Some(s))
            })
            .collect();
        match candidates[..] {
            [i] => Ok(i),
            _ => Err(GivenLockError::Package {
                path: self.path.clone(),
                package: from.label(),
                why: format!(
                    "its dependency {} matches {} entries of the lock; lock again with this uv",
                    edge.name,
                    candidates.len()
                ),
            }),
        }
    }

    /// Every package name the lock holds, normalized: what a recipe's requirements must not
    /// repeat.
    pub fn names(&self) -> BTreeSet<String> {
        self.entries.iter().map(|e| e.name.to_string()).collect()
    }
}

/// The target's interpreter as a PEP 440 version.
fn python_version(target: &Target) -> pep440_rs::Version {
    let parts = target.python.parts();
    let text =
        if parts.len() >= 3 { target.python.to_string() } else { format!("{}.0", target.python_minor()) };
    pep440_rs::Version::from_str(&text).unwrap_or_else(|_| pep440_rs::Version::new([3, 0]))
}

/// Reads the fields of one file.
struct Reader<'a> {
    path: &'a Path,
    dir: &'a Path,
}

impl Reader<'_> {
    fn bad(&self, package: &str, why: impl Into<String>) -> GivenLockError {
        GivenLockError::Package { path: self.path.to_owned(), package: package.to_owned(), why: why.into() }
    }

    fn format(&self, why: impl Into<String>) -> GivenLockError {
        GivenLockError::Format { path: self.path.to_owned(), why: why.into() }
    }

    fn requires_python(
        &self,
        doc: &toml::Table,
        package: &str,
    ) -> Result<Option<pep440_rs::VersionSpecifiers>, GivenLockError> {
        match doc.get("requires-python") {
            None => Ok(None),
            Some(toml::Value::String(s)) => pep440_rs::VersionSpecifiers::from_str(s)
                .map(Some)
                .map_err(|e| self.bad(package, format!("requires-python {s:?}: {e}"))),
            Some(_) => Err(self.bad(package, "requires-python: expected a string")),
        }
    }

    fn marker(&self, table: &toml::Table, package: &str) -> Result<Option<MarkerTree>, GivenLockError> {
        match table.get("marker") {
            None => Ok(None),
            Some(toml::Value::String(s)) => {
                MarkerTree::from_str(s).map(Some).map_err(|e| self.bad(package, format!("marker {s:?}: {e}")))
            }
            Some(_) => Err(self.bad(package, "marker: expected a string")),
        }
    }

    fn name_version(
        &self,
        table: &toml::Table,
    ) -> Result<(PackageName, Option<PackageVersion>), GivenLockError> {
        let Some(name) = table.get("name").and_then(toml::Value::as_str) else {
            return Err(self.format("a package entry has no `name`"));
        };
        let parsed = PackageName::from_str(name).map_err(|e| self.bad(name, format!("name: {e}")))?;
        let version = match table.get("version") {
            None => None,
            Some(toml::Value::String(v)) => {
                Some(PackageVersion::from_str(v).map_err(|e| self.bad(name, format!("version {v:?}: {e}")))?)
            }
            Some(_) => return Err(self.bad(name, "version: expected a string")),
        };
        Ok((parsed, version))
    }

    /// A wheel table: `url` or `path`, a sha256 (`hash = "sha256:.."` in uv.lock, `hashes =
    /// { sha256 = ".." }` in pylock.toml), `size`, and a file name (`name`/`filename`, else the
    /// last segment of the URL or path).
    /// The `sdist` table of a package, as a file to fetch and build (`stackbuild-wheelbuild`).
    fn sdist(&self, table: &toml::Table, package: &str) -> Result<Option<GivenWheel>, GivenLockError> {
        let Some(sdist) = table.get("sdist") else { return Ok(None) };
        let Some(sdist) = sdist.as_table() else { return Err(self.bad(package, "sdist: expected a table")) };
        self.file(sdist, package, true).map(Some)
    }

    fn wheel(&self, table: &toml::Table, package: &str) -> Result<GivenWheel, GivenLockError> {
        self.file(table, package, false)
    }

    fn file(&self, table: &toml::Table, package: &str, sdist: bool) -> Result<GivenWheel, GivenLockError> {
        let text = |key: &str| table.get(key).and_then(toml::Value::as_str).map(str::to_owned);
        let url = text("url");
        let path = text("path");
        let filename = text("name")
            .or_else(|| text("filename"))
            .or_else(|| {
                url.as_deref().and_then(|u| u.split(['?', '#']).next()?.rsplit('/').next()).map(decode)
            })
            .or_else(|| path.as_deref().and_then(|p| Path::new(p).file_name()?.to_str()).map(str::to_owned));
        let Some(filename) = filename else {
            return Err(self.bad(package, "a wheel without a url, path or name"));
        };
        let plain = !filename.starts_with('.')
            && !filename.contains(['/', '\\', '\0'])
            && if sdist {
                stackbuild_common::is_sdist(&filename)
            } else {
                Path::new(&filename).extension().is_some_and(|e| e == "whl")
            };
        if !plain {
            let what = if sdist { "a source distribution" } else { "a wheel" };
            return Err(self.bad(package, format!("{filename:?} is not {what} file name")));
        }
        let sha256 = match (text("hash"), table.get("hashes").and_then(toml::Value::as_table)) {
            (Some(h), _) => h.strip_prefix("sha256:").map(str::to_owned),
            (None, Some(hashes)) => hashes.get("sha256").and_then(toml::Value::as_str).map(str::to_owned),
            (None, None) => None,
        };
        let Some(sha256) = sha256.map(|h| h.to_ascii_lowercase()).filter(|h| is_sha256(h)) else {
            return Err(self.bad(
                package,
                format!("wheel {filename}: no sha256 (a lock without one cannot be verified)"),
            ));
        };
        if let Some(u) = &url {
            if !(u.starts_with("https://") || u.starts_with("http://") || u.starts_with("file://")) {
                return Err(self.bad(package, format!("wheel {filename}: url {u:?} is not http(s) or file")));
            }
        }
        let path = path.map(|p| self.dir.join(p)).or_else(|| {
            url.as_deref().and_then(|u| u.strip_prefix("file://")).map(|p| PathBuf::from(decode(p)))
        });
        let size = table.get("size").and_then(toml::Value::as_integer).and_then(|s| u64::try_from(s).ok());
        Ok(GivenWheel { filename, url: url.filter(|u| !u.starts_with("file://")), path, sha256, size })
    }

    fn wheels(&self, table: &toml::Table, package: &str) -> Result<Vec<GivenWheel>, GivenLockError> {
        let Some(list) = table.get("wheels") else { return Ok(Vec::new()) };
        let Some(list) = list.as_array() else { return Err(self.bad(package, "wheels: expected an array")) };
        list.iter()
            .map(|w| {
                w.as_table()
                    .ok_or_else(|| self.bad(package, "wheels: expected tables"))
                    .and_then(|t| self.wheel(t, package))
            })
            .collect()
    }

    fn pylock(&self, doc: &toml::Table) -> Result<GivenLock, GivenLockError> {
        match doc.get("lock-version").and_then(toml::Value::as_str) {
            Some(v) if v.split('.').next() == Some("1") => {}
            Some(v) => {
                return Err(
                    self.format(format!("lock-version {v:?}: this stackbuild reads PEP 751 version 1"))
                )
            }
            None => return Err(self.format("no lock-version: not a PEP 751 pylock.toml")),
        }
        let requires_python = self.requires_python(doc, "(the lock)")?;
        let mut entries = Vec::new();
        for table in doc.get("packages").and_then(toml::Value::as_array).into_iter().flatten() {
            let Some(table) = table.as_table() else { return Err(self.format("packages: expected tables")) };
            let (name, version) = self.name_version(table)?;
            let label = name.to_string();
            let origin = if table.contains_key("directory") {
                Origin::Project
            } else if let Some(vcs) = table.get("vcs").and_then(toml::Value::as_table) {
                // PEP 751 `[packages.vcs]`: `type`, `url`, `commit-id`.
                let field = |k: &str| vcs.get(k).and_then(toml::Value::as_str);
                match (field("type"), field("url"), field("commit-id")) {
                    (Some("git"), Some(url), Some(commit))
                        if is_commit(commit) && !vcs.contains_key("subdirectory") =>
                    {
                        Origin::Git { url: url.to_owned(), commit: commit.to_owned() }
                    }
                    _ => Origin::Build(
                        "a version-control checkout (vcs) that is not git at a full commit".into(),
                    ),
                }
            } else if table.contains_key("archive") {
                Origin::Build("an archive".into())
            } else {
                Origin::Files
            };
            entries.push(Entry {
                marker: self.marker(table, &label)?,
                requires_python: self.requires_python(table, &label)?,
                wheels: self.wheels(table, &label)?,
                sdist: table.contains_key("sdist"),
                sdist_file: self.sdist(table, &label)?,
                source: None,
                directory: table
                    .get("directory")
                    .and_then(|d| d.get("path"))
                    .and_then(toml::Value::as_str)
                    .map(str::to_owned),
                origin,
                dependencies: Vec::new(),
                optional: BTreeMap::new(),
                name,
                version,
            });
        }
        Ok(GivenLock { path: self.path.to_owned(), format: LockFormat::Pylock, requires_python, entries })
    }

    fn edges(&self, list: Option<&toml::Value>, package: &str) -> Result<Vec<Edge>, GivenLockError> {
        let mut out = Vec::new();
        for edge in list.and_then(toml::Value::as_array).into_iter().flatten() {
            let Some(t) = edge.as_table() else {
                return Err(self.bad(package, "dependencies: expected tables"));
            };
            let (name, version) = self.name_version(t)?;
            out.push(Edge {
                name,
                version: version.map(|v| v.to_string()),
                source: t.get("source").map(ToString::to_string),
                marker: self.marker(t, package)?,
                extras: t
                    .get("extra")
                    .and_then(toml::Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect(),
            });
        }
        Ok(out)
    }

    fn uv_lock(&self, doc: &toml::Table) -> Result<GivenLock, GivenLockError> {
        match doc.get("version").and_then(toml::Value::as_integer) {
            Some(1) => {}
            Some(v) => {
                return Err(self.format(format!("uv.lock version {v}: this stackbuild reads version 1")))
            }
            None => return Err(self.format("no `version`: not a uv.lock")),
        }
        let requires_python = self.requires_python(doc, "(the lock)")?;
        let mut entries = Vec::new();
        for table in doc.get("package").and_then(toml::Value::as_array).into_iter().flatten() {
            let Some(table) = table.as_table() else { return Err(self.format("package: expected tables")) };
            let (name, version) = self.name_version(table)?;
            let label = name.to_string();
            let source = table.get("source").and_then(toml::Value::as_table);
            let has = |key: &str| source.is_some_and(|s| s.contains_key(key));
            let origin = if has("editable") || has("virtual") {
                Origin::Project
            } else if let Some(git) = source.and_then(|s| s.get("git")).and_then(toml::Value::as_str) {
                uv_git(git).map_or_else(
                    || Origin::Build("git, not at a full commit or with a subdirectory".into()),
                    |(url, commit)| Origin::Git { url, commit },
                )
            } else if has("directory") {
                Origin::Build("a local directory".into())
            } else {
                Origin::Files
            };
            let mut optional = BTreeMap::new();
            if let Some(groups) = table.get("optional-dependencies").and_then(toml::Value::as_table) {
                for (extra, list) in groups {
                    optional.insert(extra.clone(), self.edges(Some(list), &label)?);
                }
            }
            entries.push(Entry {
                marker: None,
                requires_python: None,
                wheels: self.wheels(table, &label)?,
                sdist: table.contains_key("sdist"),
                sdist_file: self.sdist(table, &label)?,
                source: table.get("source").map(ToString::to_string),
                directory: source
                    .and_then(|s| s.get("editable"))
                    .and_then(toml::Value::as_str)
                    .map(str::to_owned),
                origin,
                dependencies: self.edges(table.get("dependencies"), &label)?,
                optional,
                name,
                version,
            });
        }
        Ok(GivenLock { path: self.path.to_owned(), format: LockFormat::UvLock, requires_python, entries })
    }
}

/// uv's git source, `URL?rev=REV#COMMIT` (or `?tag=`, `?branch=`): the URL and the full
/// commit uv resolved, which its fragment holds; `None` with a subdirectory (not supported yet)
/// or without a full commit.
fn uv_git(source: &str) -> Option<(String, String)> {
    let (rest, commit) = source.split_once('#')?;
    let (url, query) = rest.split_once('?').unwrap_or((rest, ""));
    if query.split('&').any(|kv| kv.starts_with("subdirectory=")) || !is_commit(commit) || url.is_empty() {
        return None;
    }
    Some((url.to_owned(), commit.to_owned()))
}

/// A full git commit id: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
fn is_commit(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `%2B` -> `+`: the escapes of a URL's last segment (a local version's `+`).
fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// Puts the chosen wheels into `dest` (`DEST/<sha256>/<filename>`, as [`crate::fetch`] keeps
/// them), each verified against the lock's digest; those already there are checked (hashed
/// again unless their record says they have not changed, `cache::stamp`), not downloaded again.
/// The others download [`crate::download::JOBS`] at a time, the largest first (the sizes the
/// lock records), so that a long torch download overlaps all the small ones, as
/// [`crate::download`] does for a lock of its own, with the configuration `config` gives
/// ([`crate::download::Config::for_lock_urls`]). Returns them in the order of `chosen`.
pub fn fetch(
    lock: &Path,
    chosen: &[Chosen],
    dest: &Path,
    config: &dyn Fn() -> crate::download::Config,
) -> Result<Vec<Artifact>, GivenLockError> {
    std::fs::create_dir_all(dest).map_err(io("creating", dest))?;
    let final_path = |c: &Chosen| dest.join(&c.wheel.sha256).join(&c.wheel.filename);
    let mut missing: Vec<usize> = (0..chosen.len())
        .filter(|&i| {
            let path = final_path(&chosen[i]);
            !(std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
                && crate::artifact::verified_hash(&path, &chosen[i].wheel.sha256)
                    .is_ok_and(|h| h == chosen[i].wheel.sha256))
        })
        .collect();
    missing.sort_by_key(|&i| std::cmp::Reverse(chosen[i].wheel.size.unwrap_or(u64::MAX)));
    if !missing.is_empty() {
        // Read only now: a build with every wheel in the cache reads no configuration.
        let config = config();
        let http = crate::download::Http::new(&config).map_err(|reason| GivenLockError::Download {
            path: lock.to_owned(),
            package: chosen[missing[0]].label(),
            url: chosen[missing[0]].wheel.url.clone().unwrap_or_default(),
            reason,
        })?;
        crate::download::parallel(missing.len(), config.jobs(), |k| {
            fetch_one(&http, lock, &chosen[missing[k]], dest)
        })?;
    }
    let mut out = Vec::with_capacity(chosen.len());
    for c in chosen {
        let final_path = final_path(c);
        let size = std::fs::metadata(&final_path).map_err(io("reading", &final_path))?.len();
        out.push(Artifact {
            name: c.name.clone(),
            version: c.version.clone(),
            filename: c.wheel.filename.clone(),
            sha256: c.wheel.sha256.clone(),
            size,
            path: final_path,
        });
    }
    Ok(out)
}

/// Downloads (or copies) one wheel into a temporary file of `dest`, hashing as it streams, and
/// renames it into place only when the digest matches: a killed or failed fetch leaves nothing
/// under its final name.
fn fetch_one(
    http: &crate::download::Http<'_>,
    lock: &Path,
    c: &Chosen,
    dest: &Path,
) -> Result<(), GivenLockError> {
    let tmp = tempfile::Builder::new()
        .prefix(".given-")
        .tempdir_in(dest)
        .map_err(io("creating a temporary directory in", dest))?;
    let file = tmp.path().join(&c.wheel.filename);
    let (from, actual) = if let Some(path) = &c.wheel.path {
        let mut src = stackbuild_common::open_regular(path, "wheel").map_err(|e| {
            GivenLockError::Package { path: lock.to_owned(), package: c.label(), why: e.to_string() }
        })?;
        let actual = copy_hashing(&mut src, &file)?;
        (path.display().to_string(), actual)
    } else if let Some(url) = &c.wheel.url {
        let fail = |reason: String| GivenLockError::Download {
            path: lock.to_owned(),
            package: c.label(),
            url: url.clone(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| fail(format!("not a URL: {e}")))?;
        let (hex, _) = http.get_file(&parsed, &file, c.wheel.size).map_err(|f| fail(f.into_reason()))?;
        (url.clone(), hex)
    } else {
        return Err(GivenLockError::Package {
            path: lock.to_owned(),
            package: c.label(),
            why: format!("wheel {} has neither a url nor a path", c.wheel.filename),
        });
    };
    if actual != c.wheel.sha256 {
        return Err(GivenLockError::Hash {
            path: lock.to_owned(),
            package: c.label(),
            from,
            expected: c.wheel.sha256.clone(),
            actual,
        });
    }
    let stage = tmp.path().join("stage");
    std::fs::create_dir(&stage).map_err(io("creating", &stage))?;
    std::fs::rename(&file, stage.join(&c.wheel.filename)).map_err(io("moving", &file))?;
    let target_dir = dest.join(&c.wheel.sha256);
    if let Err(e) = std::fs::rename(&stage, &target_dir) {
        // Another build placed the same file meanwhile (or a corrupt one is there: replace it).
        let final_path = target_dir.join(&c.wheel.filename);
        if !stackbuild_common::sha256_file(&final_path).is_ok_and(|h| h == c.wheel.sha256) {
            if target_dir.is_dir()
                && std::fs::remove_dir_all(&target_dir).is_ok()
                && std::fs::rename(&stage, &target_dir).is_ok()
            {
                return Ok(());
            }
            return Err(IoError { op: "moving into place", path: target_dir, source: e }.into());
        }
    }
    Ok(())
}

/// Writes `reader` (a wheel the lock gives a path for) to a new `file`, returning its sha256.
fn copy_hashing(reader: &mut dyn std::io::Read, file: &Path) -> Result<String, GivenLockError> {
    let mut out = std::fs::File::create(file).map_err(io("creating", file))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io("downloading into", file)(e)),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io("writing", file))?;
    }
    out.sync_all().map_err(io("writing", file))?;
    let hex = hex::encode(hasher.finalize());
    // What it hashes to, on the file before it is renamed into place: the next build that finds
    // it there need not read it again. A file that is not the lock's is removed, record and all.
    stackbuild_cache::stamp::record_new(&out, &hex);
    Ok(hex)
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> GivenLockError + 'a {
    move |source| GivenLockError::Io(io_err(op, path)(source))
}

#[cfg(test)]
mod tests;
