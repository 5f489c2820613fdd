//! Resolution with source distributions: wheels stay preferred; a package with no wheel for the
//! target resolves to its sdist, whose dependencies come from its metadata prepared where code
//! may run (the build sandbox of `stackbuild-wheelbuild`), never on this machine.
//!
//! uv is asked first for wheels only (`--only-binary :all:`), as before. When that fails because
//! some packages have no usable wheel (uv's hint: "Wheels are required for `NAME`"), each such
//! package not in `[python.build] no_build` gets a version (the recipe's `==` pin, else the
//! newest sdist on the index whose `Requires-Python` admits the target), its sdist is fetched and
//! verified, and its `METADATA` prepared by the caller's [`SdistMetadata`]. uv is then run again
//! with `--no-binary NAME`, the constraint `NAME==VERSION`, and the metadata as a
//! `[[dependency-metadata]]` entry of a `uv.toml` (<https://docs.astral.sh/uv/reference/settings/#dependency-metadata>):
//! uv takes those dependencies as given and builds nothing. New packages without wheels may
//! appear among the sdists' dependencies; the loop goes on until none is left.

use std::path::Path;
use std::str::FromStr;

use pep508_rs::PackageName;
use stackcontract::version::PackageVersion;

use crate::artifact::Artifact;
use crate::solve::{compile, FromSource, Pinned, SolveError, Target};
use stackbuild_recipe::PythonSection;

/// Most rounds of "resolve, find packages without wheels, prepare their metadata".
const MAX_ROUNDS: usize = 8;
/// Most steps back to an older sdist of a package whose newest one conflicts.
const MAX_BACKTRACK: usize = 6;

/// Prepares the core metadata (`METADATA` text) of a source distribution.
pub trait SdistMetadata {
    /// The `METADATA` of `sdist`, a verified file in the artifact directory.
    fn metadata(&self, sdist: &Artifact) -> Result<String, String>;
}

/// An sdist's metadata as its `PKG-INFO` says, static or not: for a first look at a project
/// (`stackbuild init` pinning its top-level packages, `stackbuild check`), never for a lock.
#[derive(Debug, Clone, Copy, Default)]
pub struct PkgInfoMetadata;

impl SdistMetadata for PkgInfoMetadata {
    fn metadata(&self, sdist: &Artifact) -> Result<String, String> {
        crate::pkg_info::sdist_pkg_info(&sdist.path)
    }
}

/// Where sdists are fetched to and from.
#[derive(Clone, Copy)]
pub struct SourceFetch<'a> {
    /// The artifact directory.
    pub artifacts: &'a Path,
    /// pip's settings memo (`download::pip`).
    pub memo: Option<&'a Path>,
    /// The cache directory, where git dependencies' mirrors are kept (`git/`).
    pub cache: &'a Path,
}

/// What a resolution with sources pins.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// Every package, pinned.
    pub pins: Vec<Pinned>,
    /// The commit each git dependency (and project from git) is pinned to, by name.
    pub commits: std::collections::BTreeMap<PackageName, String>,
    /// The `[[source]]` each project installed as a wheel is built from, by package name.
    pub projects: std::collections::BTreeMap<PackageName, String>,
}

/// A `[[source]]` installed as a wheel: the project itself.
#[derive(Debug, Clone)]
pub struct Project<'a> {
    /// The source's name in the recipe.
    pub source: String,
    /// Its tree.
    pub tree: Tree<'a>,
    /// The optional dependencies installed with it (`[[source]] extras`).
    pub extras: Vec<String>,
}

/// [`crate::resolve`], with packages that have no wheel resolved to their sdists, git
/// dependencies (`name @ git+URL@REV`) to the tar of their commit, and the recipe's projects
/// (`[[source]] install = "wheel"`) to the tar of their tree, their dependencies resolved with
/// the rest.
///
/// `sdists_before` are the packages the lock this resolution replaces took from their sdists:
/// each is taken again at once, where the recipe still admits its version, so that uv runs once
/// instead of once per package found without a wheel (a pin changed in `recipes/dreamzero.toml`
/// re-resolved four times, 2 to 3.5 s each, for evdev, deepspeed and antlr4). Should that not
/// resolve, the resolution starts again without them.
pub fn resolve_with_sources(
    python: &PythonSection,
    target: &Target,
    prefer: &[Pinned],
    sdists_before: &[Pinned],
    projects_in: &[Project<'_>],
    metadata: &dyn SdistMetadata,
    fetch: SourceFetch<'_>,
) -> Result<Resolution, SolveError> {
    if !sdists_before.is_empty() {
        match resolve_from(python, target, prefer, sdists_before, projects_in, metadata, fetch) {
            Ok(resolution) => return Ok(resolution),
            Err(e) => tracing::info!(
                "the source packages of the lock before do not resolve as they were ({e}); resolving again without them"
            ),
        }
    }
    resolve_from(python, target, prefer, &[], projects_in, metadata, fetch)
}

/// [`resolve_with_sources`], with `seeds` taken from their sdists from the start.
#[allow(clippy::too_many_lines)] // one loop: resolve, then take sources or step one back
fn resolve_from(
    python: &PythonSection,
    target: &Target,
    prefer: &[Pinned],
    seeds: &[Pinned],
    projects_in: &[Project<'_>],
    metadata: &dyn SdistMetadata,
    fetch: SourceFetch<'_>,
) -> Result<Resolution, SolveError> {
    let dir = tempfile::Builder::new().prefix("stackbuild-sources-").tempdir().map_err(|e| {
        SolveError::Uv { target: target.clone(), message: format!("a temporary directory: {e}") }
    })?;
    let mut plan = FromSource::default();
    let mut entries: Vec<MetadataEntry> = Vec::new();
    let mut commits = std::collections::BTreeMap::new();
    for req in &python.packages {
        let Some((url, rev)) = stackbuild_recipe::git_dependency(req) else { continue };
        let fail = |why: String| SolveError::Uv {
            target: target.clone(),
            message: format!("{} @ git+{url}@{rev}: {why}", req.name),
        };
        let commit =
            stackbuild_source::resolve_git_rev(&url, &rev, fetch.cache).map_err(|e| fail(e.to_string()))?;
        let subdirectory = stackbuild_recipe::git_subdirectory(req);
        let tree = Tree::Git { url: &url, commit: &commit, subdirectory: subdirectory.as_deref() };
        let (sdist, entry) = tree_package(&req.name, tree, metadata, fetch).map_err(fail)?;
        if sdist.name != req.name {
            return Err(fail(format!("its metadata names the project `{}`", sdist.name)));
        }
        tracing::info!("{} {}: git commit {commit}, built from source", req.name, sdist.version);
        entries.push(entry);
        plan.no_binary.push(req.name.clone());
        plan.direct.push((req.name.clone(), sdist.path.clone(), sdist.sha256.clone()));
        commits.insert(req.name.clone(), commit);
    }
    url_packages(python, target, metadata, fetch, &mut plan, &mut entries)?;
    let mut projects = std::collections::BTreeMap::new();
    for project in projects_in {
        let fail = |why: String| SolveError::Uv {
            target: target.clone(),
            message: format!("[[source]] {} (install = \"wheel\"): {why}", project.source),
        };
        let hint = PackageName::from_str(&project.source).map_err(|e| fail(e.to_string()))?;
        let (sdist, entry) = tree_package(&hint, project.tree, metadata, fetch).map_err(fail)?;
        tracing::info!(
            "{} {}: the project of [[source]] {}, built from source",
            sdist.name,
            sdist.version,
            project.source
        );
        if let Tree::Git { commit, .. } = project.tree {
            commits.insert(sdist.name.clone(), commit.to_owned());
        }
        entries.push(entry);
        plan.no_binary.push(sdist.name.clone());
        plan.direct.push((sdist.name.clone(), sdist.path.clone(), sdist.sha256.clone()));
        if !project.extras.is_empty() {
            plan.project_extras.push((sdist.name.clone(), project.extras.clone()));
        }
        projects.insert(sdist.name.clone(), project.source.clone());
    }
    // The sdists taken, at their versions, and how many were stepped back.
    let mut taken: Vec<(PackageName, PackageVersion)> = Vec::new();
    let seeds: Vec<&Pinned> =
        seeds.iter().filter(|p| !plan.no_binary.contains(&p.name) && admitted(python, p)).collect();
    for seed in seeds {
        let fail = |why: String| SolveError::Uv {
            target: target.clone(),
            message: format!("{} {} (a source package of the lock before): {why}", seed.name, seed.version),
        };
        let got = crate::fetch::fetch_wheels(
            std::slice::from_ref(seed),
            target,
            python.sources(),
            fetch.artifacts,
            fetch.memo,
        )
        .map_err(|e| fail(e.to_string()))?;
        let sdist = got.into_iter().next().ok_or_else(|| fail("not fetched".into()))?;
        if !stackbuild_common::is_sdist(&sdist.filename) {
            return Err(fail(format!("{} is not a source distribution", sdist.filename)));
        }
        let text = sdist_metadata(metadata, &refuse_stub(sdist.clone()).map_err(fail)?).map_err(fail)?;
        say(&format!("{} {}: from source, as in the lock before", seed.name, seed.version));
        take_source(&mut plan, &mut entries, &mut taken, &seed.name, &seed.version, &text);
    }
    if !entries.is_empty() {
        plan.config = Some(write_config(&dir, &entries, target)?);
    }
    let prefer: Vec<Pinned> =
        prefer.iter().filter(|p| !plan.direct.iter().any(|(n, _, _)| n == &p.name)).cloned().collect();
    let prefer = prefer.as_slice();
    let mut backtracked = 0;
    for _ in 0..MAX_ROUNDS + MAX_BACKTRACK {
        let err = match compile(python, target, prefer, &plan) {
            Ok(pins) => return Ok(Resolution { pins, commits, projects }),
            Err(e) => e,
        };
        let SolveError::Uv { message, .. } = &err else { return Err(err) };
        let wanted: Vec<PackageName> = without_wheels(message)
            .into_iter()
            .filter(|n| !python.build.no_build.contains(n) && !plan.no_binary.contains(n))
            .filter(|n| !yanked_release(python, n, message))
            .collect();
        if wanted.is_empty() {
            // A package taken from source at a version that uv's message now rules out
            // ("moviepy>=2.2.1 depends on numpy>=1.25.0 and you require numpy==1.24.3"): its next
            // older sdist, as uv would backtrack were it allowed to build (octo's moviepy>=1.0.3).
            let Some((name, had)) = ruled_out(message, &taken).cloned() else { return Err(err) };
            if backtracked >= MAX_BACKTRACK {
                return Err(err);
            }
            backtracked += 1;
            let Ok(sdist) =
                fetch_sdist(python, target, &name, message, fetch, Some(&had)).and_then(refuse_stub)
            else {
                return Err(err);
            };
            let Ok(text) = sdist_metadata(metadata, &sdist) else { return Err(err) };
            say(&format!(
                "{name} {had} conflicts with the rest; trying its source distribution {}",
                sdist.version
            ));
            entries.retain(|e| PackageName::from_str(&e.name).ok().as_ref() != Some(&name));
            entries.push(MetadataEntry::parse(&name, &sdist.version, &text));
            let old = format!("{name}=={had}");
            plan.constraints.retain(|c| c != &old);
            plan.constraints.push(format!("{name}=={}", sdist.version));
            taken.retain(|(n, _)| n != &name);
            taken.push((name, sdist.version.clone()));
            plan.config = Some(write_config(&dir, &entries, target)?);
            continue;
        }
        for name in wanted {
            let sdist = fetch_sdist(python, target, &name, message, fetch, None)
                .and_then(refuse_stub)
                .map_err(|why| SolveError::SourceUnusable {
                    target: Box::new(target.clone()),
                    message: message.clone(),
                    package: name.clone(),
                    why,
                })?;
            say(&format!(
                "{name} {}: no wheel for {target}; resolving its source distribution",
                sdist.version
            ));
            let text = sdist_metadata(metadata, &sdist).map_err(|why| SolveError::Uv {
                target: target.clone(),
                message: format!(
                    "{name} {} has no wheel for {target}; preparing its metadata failed: {why}",
                    sdist.version
                ),
            })?;
            take_source(&mut plan, &mut entries, &mut taken, &name, &sdist.version, &text);
        }
        plan.config = Some(write_config(&dir, &entries, target)?);
    }
    compile(python, target, prefer, &plan).map(|pins| Resolution { pins, commits, projects })
}

/// `name` taken from its sdist at `version`, whose `METADATA` is `text`: uv is told so
/// (`--no-binary`, the constraint `NAME==VERSION`, its dependency metadata).
fn take_source(
    plan: &mut FromSource,
    entries: &mut Vec<MetadataEntry>,
    taken: &mut Vec<(PackageName, PackageVersion)>,
    name: &PackageName,
    version: &PackageVersion,
    text: &str,
) {
    entries.push(MetadataEntry::parse(name, version, text));
    plan.no_binary.push(name.clone());
    plan.constraints.push(format!("{name}=={version}"));
    taken.push((name.clone(), version.clone()));
}

/// Whether every requirement and constraint of the recipe on `pin`'s package admits its version.
fn admitted(python: &PythonSection, pin: &Pinned) -> bool {
    let Ok(version) = pep440_rs::Version::from_str(&pin.version.to_string()) else { return false };
    python
        .packages
        .iter()
        .chain(&python.constraints)
        .chain(&python.overrides)
        .filter(|r| r.name == pin.name)
        .all(|r| match &r.version_or_url {
            None => true,
            Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) => specs.contains(&version),
            Some(pep508_rs::VersionOrUrl::Url(_)) => false,
        })
}

/// `sdist`, unless it is a wheel stub ([`crate::pkg_info::wheel_stub_index`]): its build
/// would download the wheel, and builds have no network.
fn refuse_stub(sdist: Artifact) -> Result<Artifact, String> {
    let Some(index) = crate::pkg_info::wheel_stub_index(&sdist.path) else { return Ok(sdist) };
    let from = if index.is_empty() { "another index".to_owned() } else { index.clone() };
    let add = if index.is_empty() {
        String::new()
    } else {
        format!(" Where {index} is reachable, add it to [python] extra_index and its wheel is used instead;")
    };
    Err(format!(
        "{} {} is a wheel stub: building it downloads the real wheel from {from} (wheel-stub), and a build \
         has no network.{add} else leave out the requirement that brings it in (in [python] overrides: \
         \"NAME ; sys_platform == 'never'\", with the reason in a comment).",
        sdist.name, sdist.version
    ))
}

/// The sdist taken whose version uv's message rules out: uv names a package held to one
/// version as `NAME>=VERSION` ("moviepy>=2.2.1 depends on numpy>=1.25.0") or `NAME==VERSION`.
fn ruled_out<'a>(
    message: &str,
    taken: &'a [(PackageName, PackageVersion)],
) -> Option<&'a (PackageName, PackageVersion)> {
    taken.iter().find(|(n, v)| {
        [format!("{n}>={v} "), format!("{n}=={v} ")].iter().any(|needle| message.contains(needle.as_str()))
    })
}

/// Logs `line` once per process: `init` resolves several times (each lagging package asked
/// again).
fn say(line: &str) {
    if SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(line.to_owned()) {
        tracing::info!("{line}");
    }
}

/// The source-resolution lines this process has logged.
static SAID: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The metadata of a downloaded sdist: its `PKG-INFO` where that is static (PEP 643), used as it
/// is with no build; else what `metadata` prepares.
fn sdist_metadata(metadata: &dyn SdistMetadata, sdist: &Artifact) -> Result<String, String> {
    match crate::pkg_info::sdist_pkg_info(&sdist.path) {
        Ok(text) if crate::pkg_info::is_static(&text) => Ok(text),
        _ => metadata.metadata(sdist),
    }
}

/// Direct URL dependencies: the file, verified by the recipe's digest; a wheel as it is, an sdist
/// with its metadata like any other.
fn url_packages(
    python: &PythonSection,
    target: &Target,
    metadata: &dyn SdistMetadata,
    fetch: SourceFetch<'_>,
    plan: &mut FromSource,
    entries: &mut Vec<MetadataEntry>,
) -> Result<(), SolveError> {
    let fail = |message: String| SolveError::Uv { target: target.clone(), message };
    for artifact in crate::url_deps::fetch_url_dependencies(python, None, fetch.artifacts, fetch.memo)
        .map_err(|e| fail(e.to_string()))?
    {
        if !stackbuild_common::is_sdist(&artifact.filename) {
            plan.direct.push((artifact.name.clone(), artifact.path.clone(), artifact.sha256.clone()));
            continue;
        }
        let text = sdist_metadata(metadata, &artifact).map_err(|why| {
            fail(format!(
                "{} {} (a URL dependency): preparing its metadata failed: {why}",
                artifact.name, artifact.version
            ))
        })?;
        entries.push(MetadataEntry::parse(&artifact.name, &artifact.version, &text));
        plan.no_binary.push(artifact.name.clone());
        plan.direct.push((artifact.name.clone(), artifact.path.clone(), artifact.sha256.clone()));
    }
    Ok(())
}

/// The `uv.toml` that hands uv the metadata of every sdist.
fn write_config(
    dir: &tempfile::TempDir,
    entries: &[MetadataEntry],
    target: &Target,
) -> Result<std::path::PathBuf, SolveError> {
    let config = dir.path().join("uv.toml");
    let text = toml::to_string(&UvConfig { dependency_metadata: entries })
        .map_err(|e| SolveError::Uv { target: target.clone(), message: e.to_string() })?;
    std::fs::write(&config, text).map_err(|e| SolveError::Uv {
        target: target.clone(),
        message: format!("{}: {e}", config.display()),
    })?;
    Ok(config)
}

/// A tree a package is built from: a git commit (a git dependency, or a `[[source]]` from git
/// installed as a wheel) or a directory (a `[[source]]` path installed as a wheel).
#[derive(Debug, Clone, Copy)]
pub enum Tree<'a> {
    /// `url` at `commit`.
    Git {
        /// The repository.
        url: &'a str,
        /// The full commit.
        commit: &'a str,
        /// The directory inside it the project is in (`#subdirectory=`), relative.
        subdirectory: Option<&'a str>,
    },
    /// A directory, with what inside it is not part of the tree (the cache, the output).
    Path {
        /// The directory.
        path: &'a Path,
        /// Left out wherever they appear inside.
        exclude: &'a [&'a Path],
    },
}

/// The package of a tree as a source distribution in the artifact directory
/// (`<sha256>/<name>-<version>.tar.gz`, name and version from its metadata), and that metadata.
/// `hint` names it until its metadata says its name.
fn tree_package(
    hint: &PackageName,
    tree: Tree<'_>,
    metadata: &dyn SdistMetadata,
    fetch: SourceFetch<'_>,
) -> Result<(Artifact, MetadataEntry), String> {
    let first = tree_sdist(hint, tree, None, fetch)?;
    let text = metadata.metadata(&first)?;
    let field = |key: &str| {
        text.lines().take_while(|l| !l.is_empty()).find_map(|l| l.strip_prefix(key)).map(str::trim)
    };
    let version = field("Version:")
        .and_then(|v| PackageVersion::from_str(v).ok())
        .ok_or("its metadata has no valid Version")?;
    let name =
        field("Name:").and_then(|n| PackageName::from_str(n).ok()).ok_or("its metadata has no valid Name")?;
    let sdist = tree_sdist(&name, tree, Some(&version), fetch)?;
    Ok((sdist, MetadataEntry::parse(&name, &version, &text)))
}

/// The tree as `<name>-<version>.tar.gz` (`<name>-0.tar.gz` while the version is not known yet),
/// made in the artifact directory unless it is there: at lock time, and at build time on a
/// machine whose cache lacks it (the lock's `commit` or `source`). The same tree gives the same
/// bytes ([`stackbuild_source::git_sdist`]).
pub fn tree_sdist(
    name: &PackageName,
    tree: Tree<'_>,
    version: Option<&PackageVersion>,
    fetch: SourceFetch<'_>,
) -> Result<Artifact, String> {
    let version = match version {
        Some(v) => v.clone(),
        None => PackageVersion::from_str("0").map_err(|e| e.to_string())?,
    };
    let stem = format!("{}-{version}", name.as_dist_info_name());
    let filename = format!("{stem}.tar.gz");
    std::fs::create_dir_all(fetch.artifacts).map_err(|e| format!("{}: {e}", fetch.artifacts.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".import-")
        .tempdir_in(fetch.artifacts)
        .map_err(|e| format!("{}: {e}", fetch.artifacts.display()))?;
    let file = tmp.path().join(&filename);
    let sha256 = match tree {
        Tree::Git { url, commit, subdirectory } => {
            stackbuild_source::git_sdist(url, commit, subdirectory, fetch.cache, &stem, &file)
        }
        Tree::Path { path, exclude } => {
            // The sdist of an unchanged tree is the one made before, when it is still here.
            let have = |sha256: &str| fetch.artifacts.join(sha256).join(&filename).is_file();
            let memo = stackbuild_source::SdistMemo { dir: &fetch.cache.join("path-sdists"), have: &have };
            stackbuild_source::path_sdist(path, exclude, &stem, &file, Some(&memo))
        }
    }
    .map_err(|e| e.to_string())?;
    let path = fetch.artifacts.join(&sha256).join(&filename);
    if !path.is_file() {
        crate::artifact::place(&file, &filename, &sha256, tmp.path(), fetch.artifacts)
            .map_err(|e| e.to_string())?;
    }
    let size = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    Ok(Artifact { name: name.clone(), version, filename, sha256, size, path })
}

#[derive(serde::Serialize)]
struct UvConfig<'a> {
    #[serde(rename = "dependency-metadata")]
    dependency_metadata: &'a [MetadataEntry],
}

/// One `[[dependency-metadata]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct MetadataEntry {
    name: String,
    version: String,
    #[serde(rename = "requires-dist")]
    requires_dist: Vec<String>,
    #[serde(rename = "requires-python", skip_serializing_if = "Option::is_none")]
    requires_python: Option<String>,
    #[serde(rename = "provides-extras")]
    provides_extras: Vec<String>,
}

impl MetadataEntry {
    /// The `Requires-Dist`, `Requires-Python` and `Provides-Extra` of a `METADATA` (RFC 822
    /// headers, continuation lines indented; the body after the first empty line is not read).
    pub(crate) fn parse(name: &PackageName, version: &PackageVersion, text: &str) -> Self {
        let fields = crate::pkg_info::header_fields(text);
        let all =
            |key: &str| fields.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()).collect::<Vec<_>>();
        Self {
            name: name.to_string(),
            version: version.to_string(),
            requires_dist: all("requires-dist").iter().filter_map(|r| valid_requirement(name, r)).collect(),
            requires_python: all("requires-python").into_iter().next().filter(|v| !v.is_empty()),
            provides_extras: all("provides-extra"),
        }
    }
}

/// `requirement` as uv reads `[[dependency-metadata]]` (strict PEP 508): as it is when it
/// parses; else with the versions old setuptools let through mended, a trailing dot dropped
/// (gym 0.21's `opencv-python (>=3.)` is `>=3`, as pip's and uv's lenient readers of installed
/// metadata take it); else left out, and said.
fn valid_requirement(name: &PackageName, requirement: &str) -> Option<String> {
    let parses = |r: &str| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).is_ok();
    if parses(requirement) {
        return Some(requirement.to_owned());
    }
    let mut mended = String::with_capacity(requirement.len());
    let chars: Vec<char> = requirement.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let after = chars.get(i + 1).copied();
        let trailing_dot = c == '.'
            && i > 0
            && chars[i - 1].is_ascii_digit()
            && after.is_none_or(|a| matches!(a, ',' | ')' | ';' | ' '));
        if !trailing_dot {
            mended.push(c);
        }
    }
    if parses(&mended) {
        return Some(mended);
    }
    tracing::warn!("{name}: its metadata's requirement {requirement:?} is not PEP 508; left out");
    None
}

/// The packages uv's failure names as having no usable wheel: its hint "Wheels are required for
/// `NAME` because building from source is disabled", or "NAME==V has no usable wheels".
pub(crate) fn without_wheels(message: &str) -> Vec<PackageName> {
    let mut names: Vec<PackageName> = Vec::new();
    let mut push = |raw: &str| {
        if let Ok(name) = PackageName::from_str(raw.trim()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    };
    for part in message.split("Wheels are required for `").skip(1) {
        if let Some((name, _)) = part.split_once('`') {
            push(name);
        }
    }
    // "pathtools==0.1.2 has no usable wheels", and "all versions of pathtools have no usable
    // wheels" (uv's wording when no release of the package has one).
    let singular = message.match_indices(" has no usable wheels");
    let plural = message
        .match_indices(" have no usable wheels")
        .filter(|(i, _)| message[..*i].rsplit([' ', '\n']).nth(1).is_some_and(|w| w == "of"));
    for (i, _) in singular.chain(plural) {
        let before = &message[..i];
        let token = before.rsplit([' ', '\n', '(']).next().unwrap_or_default();
        let name = token.split(['=', '<', '>', '!', '~', '[']).next().unwrap_or_default();
        push(name);
    }
    names
}

/// The files of `name` on the section's index.
fn index_files(python: &PythonSection, name: &PackageName) -> Result<Vec<crate::index::IndexFile>, String> {
    let base = match python.index.clone() {
        Some(i) => i,
        None => crate::index::configured_index().map_err(|e| e.to_string())?,
    };
    let mut index = crate::index::Index::http(&base).map_err(|e| e.to_string())?;
    index.files(name.as_ref()).map_err(|e| e.to_string())
}

/// Whether the release uv's `message` says has no usable wheels (`transformers==4.52.0 has no
/// usable wheels`) is a yanked one: asked for wheels only, uv says so of a yanked release where
/// it would otherwise say "was yanked". Such a package does not lack wheels, and its sdist,
/// whose `PKG-INFO` may list no dependencies (transformers 4.51.3's has none, metadata 2.1),
/// would hide the real conflict (`tokenizers==0.23.3` beside `transformers<4.57`).
fn yanked_release(python: &PythonSection, name: &PackageName, message: &str) -> bool {
    let Some(version) = without_wheels_version(message, name) else { return false };
    let Ok(files) = index_files(python, name) else { return false };
    let of_version: Vec<&crate::index::IndexFile> = files
        .iter()
        .filter(|f| {
            stackbuild_common::parse_wheel_name(&f.filename)
                .map(|w| w.version)
                .or_else(|| stackbuild_common::parse_sdist_name(&f.filename).map(|(_, v)| v))
                .is_some_and(|v| v == version)
        })
        .collect();
    !of_version.is_empty() && of_version.iter().all(|f| f.is_yanked())
}

/// The release of `name` that uv's `message` says has no usable wheels: the word before
/// " has no usable wheels" (`transformers==4.52.0`), not the first `name==` of the message
/// (which is often a range's member: "all of: transformers==4.51.3 ...").
fn without_wheels_version(message: &str, name: &PackageName) -> Option<PackageVersion> {
    let prefix = format!("{name}==");
    message
        .match_indices(" has no usable wheels")
        .filter_map(|(i, _)| message[..i].rsplit([' ', '\n', '(']).next()?.strip_prefix(prefix.as_str()))
        .find_map(|v| PackageVersion::from_str(v).ok())
}

/// The sdist a package without wheels resolves to, fetched and verified.
fn fetch_sdist(
    python: &PythonSection,
    target: &Target,
    name: &PackageName,
    message: &str,
    fetch: SourceFetch<'_>,
    below: Option<&PackageVersion>,
) -> Result<Artifact, String> {
    let pinned = python
        .packages
        .iter()
        .chain(&python.constraints)
        .filter(|r| &r.name == name)
        .find_map(|r| exact_pin(r.version_or_url.as_ref()));
    // uv's message names the version it wanted ("docopt==0.6.2 has no usable wheels"), else
    // the first `name==` it writes.
    let from_uv = without_wheels_version(message, name).or_else(|| {
        message
            .split(&format!("{name}=="))
            .nth(1)
            .and_then(|rest| rest.split([' ', ',', '\n']).next())
            .and_then(|v| PackageVersion::from_str(v).ok())
    });
    let files = index_files(python, name)?;
    let python_version = pep440_rs::Version::from_str(&target.python.to_string()).ok();
    // The version uv's message names is a hint: when it has no sdist, the newest that has one.
    // The ranges uv's message puts on it ("hydra-core==1.3.2 depends on
    // antlr4-python3-runtime==4.9.*", and the ranges of releases it found: "only ... <4.9.dev0,
    // >=4.9,<=4.9.3, >4.10.dev0 are available"): the sdist in the most of them, the newest of
    // those; the newest outside the one a dependent asks for would only conflict.
    let ranges = ranges_in(message, name);
    let score = |v: &PackageVersion| {
        let Ok(v) = pep440_rs::Version::from_str(&v.to_string()) else { return 0 };
        ranges.iter().filter(|r| r.contains(&v)).count()
    };
    let pick = |wanted: Option<&PackageVersion>| {
        let mut best: Option<(PackageVersion, crate::index::IndexFile)> = None;
        for file in &files {
            let Some((n, v)) = stackbuild_common::parse_sdist_name(&file.filename) else { continue };
            if &n != name || file.is_yanked() || !file.hashes.contains_key("sha256") {
                continue;
            }
            // Stepping back goes a release series at a time (2.2.1, then 2.1's newest, then
            // 2.0's): a dependency's bound moves with a series far more often than with a patch.
            let series = |x: &PackageVersion| {
                let r = x.release();
                (r.first().copied().unwrap_or(0), r.get(1).copied().unwrap_or(0))
            };
            if wanted.is_some_and(|w| w != &v)
                || below.is_some_and(|b| series(&v) >= series(b) || v.any_prerelease())
            {
                continue;
            }
            let admits = file.requires_python.as_deref().is_none_or(|spec| {
                match (pep440_rs::VersionSpecifiers::from_str(spec), &python_version) {
                    (Ok(specs), Some(py)) => specs.contains(py),
                    _ => true,
                }
            });
            if admits && best.as_ref().is_none_or(|(b, _)| (score(&v), &v) > (score(b), b)) {
                best = Some((v, file.clone()));
            }
        }
        best
    };
    // Stepping back from a version: any older one, uv's hint being the version left.
    let wanted = if below.is_some() { pinned.clone() } else { pinned.clone().or(from_uv) };
    let best = match (pick(wanted.as_ref()), &pinned) {
        (Some(found), _) => Some(found),
        (None, None) => pick(None),
        (None, Some(_)) => None,
    };
    let Some((version, file)) = best else {
        return Err(match pinned {
            Some(v) => format!("the index has no source distribution of {name} {v}"),
            None => format!("the index has no source distribution of {name} for Python {}", target.python),
        });
    };
    let pin =
        Pinned { name: name.clone(), version, hashes: vec![file.hashes["sha256"].to_ascii_lowercase()] };
    let sources = python.sources();
    let mut got =
        crate::fetch::fetch_wheels(std::slice::from_ref(&pin), target, sources, fetch.artifacts, fetch.memo)
            .map_err(|e| e.to_string())?;
    got.pop().ok_or_else(|| format!("{pin} was not fetched"))
}

/// The version ranges `message` writes right after `name` (`name==4.9.*`, `name>=1.2,<2`).
fn ranges_in(message: &str, name: &PackageName) -> Vec<pep440_rs::VersionSpecifiers> {
    let lower = message.to_ascii_lowercase();
    let needle = name.to_string();
    let mut out = Vec::new();
    for (i, _) in lower.match_indices(&needle) {
        let before = lower[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            continue;
        }
        let rest = &lower[i + needle.len()..];
        if !rest.starts_with(['=', '<', '>', '!', '~']) {
            continue;
        }
        let spec: String =
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || "=<>!~.*,+".contains(*c)).collect();
        if let Ok(s) = pep440_rs::VersionSpecifiers::from_str(spec.trim_end_matches([',', '.'])) {
            out.push(s);
        }
    }
    out
}

/// `V` of a requirement `==V`.
fn exact_pin(spec: Option<&pep508_rs::VersionOrUrl<pep508_rs::VerbatimUrl>>) -> Option<PackageVersion> {
    let Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) = spec else { return None };
    let [one] = specs.iter().collect::<Vec<_>>()[..] else { return None };
    (one.operator() == &pep440_rs::Operator::Equal)
        .then(|| PackageVersion::from_str(&one.version().to_string()).ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_uv_puts_on_a_package() {
        let m = "Because hydra-core==1.3.2 depends on antlr4-python3-runtime==4.9.* and all versions of antlr4-python3-runtime have no usable wheels";
        let name = PackageName::from_str("antlr4-python3-runtime").unwrap();
        let r = ranges_in(m, &name);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains(&pep440_rs::Version::from_str("4.9.3").unwrap()));
        assert!(!r[0].contains(&pep440_rs::Version::from_str("4.13.2").unwrap()));
        assert!(ranges_in("x-antlr4-python3-runtime==1", &name).is_empty());
    }

    #[test]
    fn the_release_uv_says_has_no_usable_wheels() {
        let m = "Because all of:\n             transformers==4.51.3\n             transformers>=4.52.1,<=4.55.4\n         \
                 depend on tokenizers>=0.21,<0.22 and transformers==4.52.0 has no usable wheels, we can conclude ...";
        let name = PackageName::from_str("transformers").unwrap();
        assert_eq!(without_wheels_version(m, &name), PackageVersion::from_str("4.52.0").ok());
        assert_eq!(without_wheels_version("all versions of transformers have no usable wheels", &name), None);
    }

    #[test]
    fn metadata_old_setuptools_let_through_is_mended() {
        let gym: PackageName = "gym".parse().unwrap();
        assert_eq!(valid_requirement(&gym, "numpy>=1.18.0").as_deref(), Some("numpy>=1.18.0"));
        assert_eq!(
            valid_requirement(&gym, "opencv-python (>=3.) ; extra == 'all'").as_deref(),
            Some("opencv-python (>=3) ; extra == 'all'")
        );
        assert_eq!(valid_requirement(&gym, "not a requirement !!"), None);
    }

    #[test]
    fn the_sdist_a_conflict_rules_out() {
        let taken = [
            ("gym".parse().unwrap(), "0.26.2".parse().unwrap()),
            ("moviepy".parse().unwrap(), "2.2.1".parse().unwrap()),
        ];
        let message =
            "Because moviepy>=2.2.1 depends on numpy>=1.25.0 and you require numpy==1.24.3, we can \
                       conclude that your requirements and moviepy>=2.2.1 are incompatible.";
        assert_eq!(ruled_out(message, &taken).map(|(n, _)| n.to_string()).as_deref(), Some("moviepy"));
        assert!(ruled_out("Because moviepy>=2.2.10 depends on x", &taken).is_none());
        assert!(ruled_out("Because numpy==1.24.3 has no wheels", &taken).is_none());
    }

    #[test]
    fn uv_names_the_packages_without_wheels() {
        let message = "No solution found when resolving dependencies:\n  ╰─▶ Because docopt==0.6.2 has no usable wheels and you require docopt==0.6.2, we can conclude that your requirements are unsatisfiable.\n\n      hint: Wheels are required for `docopt` because building from source is disabled for all packages (i.e., with `--no-build`)";
        let names: Vec<String> = without_wheels(message).iter().map(ToString::to_string).collect();
        assert_eq!(names, ["docopt"]);
        // diffusion_policy's wandb 0.13.3 (cp39): no release of pathtools has a wheel.
        let message = "Because all versions of pathtools have no usable wheels and wandb==0.13.3 depends on \
                       pathtools, we can conclude that wandb==0.13.3 cannot be used. And because all versions of \
                       x have no usable wheels ...";
        let names: Vec<String> = without_wheels(message).iter().map(ToString::to_string).collect();
        assert_eq!(names, ["pathtools", "x"]);
    }

    #[test]
    fn metadata_headers_become_an_entry() {
        let text = "Metadata-Version: 2.1\nName: Foo\nVersion: 1.0\nRequires-Python: >=3.8\nRequires-Dist: six\nRequires-Dist: numpy; extra == \"np\"\nProvides-Extra: np\n\nRequires-Dist: not-a-header\n";
        let e = MetadataEntry::parse(&"foo".parse().unwrap(), &"1.0".parse().unwrap(), text);
        assert_eq!(e.requires_dist, ["six", "numpy; extra == \"np\""]);
        assert_eq!(e.requires_python.as_deref(), Some(">=3.8"));
        assert_eq!(e.provides_extras, ["np"]);
    }
}
