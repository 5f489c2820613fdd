//! The build: recipe -> lock -> layers -> OCI image layout (and archive).
//!
//! Layers, one per concern, in the order that maximizes reuse (what changes least goes first):
//! base; CUDA libraries; cuDNN; torch and its companions; the other Python packages; sources;
//! patches and configuration. Each layer's cache key is computed from its inputs *before*
//! anything is fetched or staged, so a rebuild with no change hashes a few strings, finds every
//! layer in the cache and touches nothing else.
//!
//! One platform's image is a pipeline of steps over shared state (`build/platform.rs`), run
//! in order by `build_platform`: the base's layers (`build/base_layers.rs`); the plan of the
//! Python layers, which locked wheel goes in which layer (`build/plan.rs`); each layer above
//! the base (`build/layers.rs`); the image config and manifest over them (`build/image.rs`).
//! This module then audits the images, writes the layout and the archive, and loads or pushes
//! them.

mod ahead;
mod base_layers;
mod from_source;
mod image;
mod layers;
mod plan;
mod platform;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use stackcontract::image::StackManifest;

use platform::PlatformBuilder;
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_image::Image;
use stackbuild_python::Lock;
use stackbuild_recipe::{Base, Recipe};

/// Errors of a build, each naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The lock is missing or out of date and `--locked` was given.
    #[error("{lock}: {reason}; run `stackbuild lock {recipe}` (or build without --locked)")]
    StaleLock {
        /// The lock file.
        lock: PathBuf,
        /// The recipe.
        recipe: PathBuf,
        /// Why it is stale.
        reason: String,
    },
    /// Something the recipe asks for that this version cannot do yet.
    #[error("{0}")]
    Unsupported(String),
    /// The base's interpreter is not the recipe's.
    #[error("the recipe asks for Python {wanted}, but the base image has {found}")]
    PythonMismatch {
        /// The recipe's version.
        wanted: String,
        /// What the base has.
        found: String,
    },
    /// The base's glibc is older than the one the lock chose wheels for.
    #[error(
        "the lock chose wheels for glibc {locked} (manylinux_2_{minor}), but the base has glibc {found}; \
         run `stackbuild lock` again to choose wheels this base runs",
        minor = .locked.minor
    )]
    GlibcBelowLock {
        /// The lock's glibc.
        locked: stackbuild_common::Glibc,
        /// The base's.
        found: stackbuild_common::Glibc,
    },
    /// A patch names a package the stack does not install.
    #[error("patch {patch:?} targets package {package:?}, which the stack does not install")]
    PatchTargetMissing {
        /// The patch.
        patch: String,
        /// The package.
        package: String,
    },
    /// A patch names a source the recipe does not have.
    #[error("patch {patch:?} targets source {source_name:?}, which the recipe does not define")]
    PatchSourceMissing {
        /// The patch.
        patch: String,
        /// The source.
        source_name: String,
    },
    /// I/O on a path.
    #[error(transparent)]
    Io(#[from] stackbuild_common::IoError),
    /// A file the recipe names (a patch, a base archive) that is not a readable regular file.
    #[error(transparent)]
    Input(#[from] stackbuild_common::InputError),
    /// Lock file.
    #[error(transparent)]
    Lock(#[from] stackbuild_python::LockError),
    /// Resolution.
    #[error(transparent)]
    Solve(#[from] stackbuild_python::SolveError),
    /// Downloads.
    #[error(transparent)]
    Fetch(#[from] stackbuild_python::FetchError),
    /// The recipe's `[python] lock` could not be used.
    #[error(transparent)]
    GivenLock(#[from] stackbuild_python::GivenLockError),
    /// Cache.
    #[error(transparent)]
    Cache(#[from] stackbuild_cache::CacheError),
    /// Layers.
    #[error(transparent)]
    Layer(#[from] stackbuild_image::LayerError),
    /// Base.
    #[error(transparent)]
    Base(#[from] stackbuild_image::BaseError),
    /// Wheel installation.
    #[error("installing {wheel}: {source}")]
    Wheel {
        /// The wheel's file name.
        wheel: String,
        /// The error (boxed: it is the largest of these errors).
        source: Box<stackbuild_python::WheelError>,
    },
    /// Source staging.
    #[error("source {name:?}: {source}")]
    Source {
        /// The source.
        name: String,
        /// The error.
        source: stackbuild_source::SourceError,
    },
    /// A patch that does not apply.
    #[error(transparent)]
    Patch(#[from] stackbuild_source::PatchError),
    /// Compiling the bytecode failed.
    #[error(transparent)]
    Bytecode(#[from] stackbuild_python::BytecodeError),
    /// Building a package from source failed.
    #[error(transparent)]
    WheelBuild(#[from] stackbuild_wheelbuild::WheelBuildError),
    /// Image output.
    #[error(transparent)]
    Oci(#[from] stackbuild_image::OciError),
    /// An output path (`--out`, `--archive`) that is not ours to write.
    #[error(transparent)]
    Output(#[from] stackbuild_image::OutputError),
    /// `--load`.
    #[error(transparent)]
    Load(#[from] stackbuild_image::LoadError),
    /// The audit found errors.
    #[error("the image's libraries do not resolve:\n{0}")]
    Audit(String),
    /// An Ubuntu base's archive keyring could not be had.
    #[error("an Ubuntu base on this machine needs Ubuntu's archive keyring: {0} (or install ubuntu-keyring, or set [base] mirror)")]
    Keyring(String),
    /// The audit could not run.
    #[error(transparent)]
    AuditFailed(#[from] stackbuild_audit::AuditError),
    /// `--push` or a registry base.
    #[error(transparent)]
    Registry(#[from] stackbuild_image::RegistryError),
}

/// [`stackbuild_common::io_err`], already a [`BuildError`] (also where no `?` converts it).
fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BuildError + 'a {
    move |source| stackbuild_common::io_err(op, path)(source).into()
}

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Where the OCI layout goes (default `images/<name>`).
    pub out: Option<PathBuf>,
    /// Also write a `docker load` / `skopeo` / `podman load` archive here.
    pub archive: Option<PathBuf>,
    /// Load the image into the local Docker daemon.
    pub load: bool,
    /// Audit the image's libraries before it is written (on by default).
    pub audit: bool,
    /// Push the image to this registry reference (`127.0.0.1:5000/name:tag`).
    pub push: Option<String>,
    /// Registry hosts spoken to over plain HTTP (loopback always is).
    pub insecure_registries: Vec<String>,
    /// Fail instead of resolving when the lock is missing or stale.
    pub locked: bool,
    /// The cache directory (default: `$STACKBUILD_CACHE`, then the user cache dir).
    pub cache_dir: Option<PathBuf>,
    /// Layer compression.
    pub compression: Compression,
    /// `--source NAME=PATH`: local directories that replace recipe sources.
    pub source_overrides: BTreeMap<String, PathBuf>,
    /// `--sbom DIR`: also write the image's SBOM documents (the ones inside it) here.
    pub sbom_dir: Option<PathBuf>,
    /// `--cache-registry HOST[:PORT]/REPO`: a registry repository shared as the layer cache.
    pub cache_registry: Option<String>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            out: None,
            archive: None,
            load: false,
            audit: true,
            push: None,
            insecure_registries: Vec::new(),
            locked: false,
            cache_dir: None,
            compression: Compression::Gzip,
            source_overrides: BTreeMap::new(),
            sbom_dir: None,
            cache_registry: None,
        }
    }
}

/// One layer of the result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerReport {
    /// What the layer holds (`base`, `cuda`, `cudnn`, `torch`, `python`, `sources`, `config`).
    pub name: String,
    /// Blob digest.
    pub digest: String,
    /// Blob size.
    pub size: u64,
    /// Built in this run (false: reused from the cache).
    pub built: bool,
    /// Where the layer came from.
    pub source: LayerSource,
    /// The `.pyc` this layer holds that the build compiled (Python layers and patched files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytecode: Option<stackbuild_python::Added>,
}

/// Where a layer of the result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerSource {
    /// Built in this run.
    Built,
    /// Reused from the local cache (or, for a base image's layers, from the base).
    Cache,
    /// Pulled from the cache registry (`--cache-registry`) in this run.
    Registry,
}

impl LayerSource {
    /// Where `blob` came from, given whether it was `built` and the cache it went through.
    fn of(blob: &LayerBlob, built: bool, cache: &Cache) -> Self {
        if built {
            Self::Built
        } else if cache.remote().is_some_and(|r| r.pulled(&blob.digest)) {
            Self::Registry
        } else {
            Self::Cache
        }
    }

    /// What the log says of the layer.
    fn verb(self) -> &'static str {
        match self {
            Self::Built => "built ",
            Self::Cache => "reused",
            Self::Registry => "pulled",
        }
    }
}

/// What a build produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildReport {
    /// The manifest digest (what stdout prints).
    pub manifest_digest: String,
    /// The layout directory.
    pub layout: PathBuf,
    /// `name:tag`.
    pub reference: String,
    /// The layers, base first.
    pub layers: Vec<LayerReport>,
    /// The stack description written into the image.
    pub stack: StackManifest,
    /// The library audit (static ldd) of the image.
    pub audit: Option<stackbuild_audit::AuditReport>,
    /// The registry push, when asked for.
    pub push: Option<stackbuild_image::PushReport>,
    /// The SBOM documents attached to the pushed image as OCI referrers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub referrers: Vec<stackbuild_image::ReferrerReport>,
    /// The SBOM files `--sbom DIR` wrote.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sbom_files: Vec<PathBuf>,
    /// Seconds taken.
    pub seconds: f64,
    /// Each platform's image, when the recipe lists several (`manifest_digest` is then the
    /// image index's, and `layers`, `stack` and `audit` are the first platform's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<PlatformReport>,
}

/// One platform's image of a multi-platform build.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlatformReport {
    /// `linux/arm64`.
    pub platform: String,
    /// Its manifest digest.
    pub manifest_digest: String,
    /// Its layers, base first.
    pub layers: Vec<LayerReport>,
    /// Its library audit.
    pub audit: Option<stackbuild_audit::AuditReport>,
}

/// One platform's image, assembled but not written.
struct PlatformBuild {
    platform: Platform,
    image: Image,
    layers: Vec<LayerReport>,
    stack: StackManifest,
    /// Written when the config layer was built or `--sbom`/`--push` hand it out
    /// ([`PlatformBuilder::config_layer`]).
    sbom: Option<stackbuild_image::Sbom>,
    /// Its spent stages, removed while the image is audited and written.
    _removal: platform::StageRemoval,
}

impl PlatformBuild {
    fn sbom(&self) -> Result<&stackbuild_image::Sbom, BuildError> {
        self.sbom.as_ref().ok_or_else(|| {
            BuildError::Unsupported(format!("the SBOM of {} was not written (a bug)", self.platform.as_str()))
        })
    }
}

/// When [`lock_recipe`] resolves, and what it keeps of the lock there is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relock {
    /// Never: a missing or stale lock is an error (`--locked`).
    Never,
    /// Only when the lock is missing or stale (a build).
    IfStale,
    /// Always, keeping every pin of the lock the recipe still allows but those of the packages
    /// named (PEP 503 normalized): `stackbuild lock [--upgrade-package NAME]`, as `uv lock`
    /// keeps a `uv.lock`.
    Keeping {
        /// The packages resolved afresh.
        upgrade: Vec<pep508_rs::PackageName>,
    },
    /// Always, from nothing: `stackbuild lock --upgrade` (`uv lock --upgrade`).
    Fresh,
}

/// Resolves (or reads the lock) and returns the locked wheels for `platform`, updating the
/// lock file when it had to resolve ([`Relock`] says when).
/// `sources` are the `--source NAME=DIR` trees that stand for recipe sources: a project
/// installed as a wheel is resolved from that tree's metadata, not fetched (a pin changed
/// beside the README's offline `--source dreamzero=...` cloned github.com).
pub fn lock_recipe(
    recipe: &Recipe,
    relock: &Relock,
    cache: &Cache,
    sources: &BTreeMap<String, PathBuf>,
) -> Result<Lock, BuildError> {
    let lock_path = Lock::path_for(&recipe.path);
    let existing = if *relock == Relock::Fresh { None } else { Lock::load_optional(&lock_path)? };
    if let Some(lock) = &existing {
        match lock.stale_reason(recipe) {
            None if matches!(relock, Relock::Never | Relock::IfStale) => return Ok(lock.clone()),
            None => tracing::info!("resolving again, keeping the lock's pins (--upgrade resolves afresh)"),
            Some(reason) if *relock == Relock::Never => {
                return Err(BuildError::StaleLock { lock: lock_path, recipe: recipe.path.clone(), reason })
            }
            Some(reason) => tracing::info!("lock is stale ({reason}); resolving again"),
        }
    } else if *relock == Relock::Never {
        return Err(BuildError::StaleLock {
            lock: lock_path,
            recipe: recipe.path.clone(),
            reason: "no lock file".into(),
        });
    }
    let upgrade: &[pep508_rs::PackageName] = match relock {
        Relock::Keeping { upgrade } => upgrade,
        _ => &[],
    };
    if let Some(lock) = &existing {
        for name in upgrade.iter().filter(|n| !lock.packages.iter().any(|p| p.name == **n)) {
            tracing::warn!(
                "--upgrade-package {name}: not in {}; it is resolved as the recipe asks",
                lock_path.display()
            );
        }
    }
    let kept = |pins: Vec<stackbuild_python::Pinned>| -> Vec<stackbuild_python::Pinned> {
        pins.into_iter().filter(|p| !upgrade.contains(&p.name)).collect()
    };
    let mut lock = Lock::new(recipe);
    let glibc = base_glibc(recipe)?;
    lock.glibc = Some(glibc);
    if let Some((py, given)) = recipe.python.as_ref().and_then(|p| Some((p, p.lock.as_deref()?))) {
        lock_given(recipe, py, given, glibc, cache, existing.as_ref(), &mut lock)?;
    } else if let Some(python) = &recipe.python {
        for target in stackbuild_python::targets_with(recipe, glibc) {
            tracing::info!("resolving {} package(s) for {target}", python.packages.len());
            // The stale lock's pins for this platform, kept where the recipe allows
            // (`stackbuild_python::resolve`).
            let prefer = kept(existing.as_ref().map(|l| l.pins_for(target.platform)).unwrap_or_default());
            // Its packages taken from their sdists: taken so again from the start.
            let sdists_before =
                kept(existing.as_ref().map(|l| l.sdist_pins(target.platform)).unwrap_or_default());
            // Packages without a wheel resolve to their sdists, whose metadata is prepared in
            // the build sandbox (`from_source`).
            let metadata = from_source::SandboxMetadata {
                recipe,
                python,
                target: &target,
                cache,
                epoch: stackbuild_image::source_date_epoch()?,
                root: std::sync::OnceLock::new(),
            };
            let fetch = stackbuild_python::SourceFetch {
                artifacts: &artifact_dir(cache),
                memo: Some(&pip_settings_dir(cache)),
                cache: cache.root(),
            };
            let cache_root = [cache.root()];
            let projects = recipe_projects(recipe, sources, &cache_root);
            let resolution = stackbuild_python::resolve_with_sources(
                python,
                &target,
                &prefer,
                &sdists_before,
                &projects,
                &metadata,
                fetch,
            )?;
            let pins = resolution.pins.clone();
            stackbuild_python::import_local_wheels(&python.wheels, &pins, &target, &artifact_dir(cache))?;
            let artifacts = stackbuild_python::fetch_wheels(
                &pins,
                &target,
                python.sources(),
                &artifact_dir(cache),
                Some(&pip_settings_dir(cache)),
            )?;
            lock.set_packages(target.platform, &artifacts);
            lock.set_origins(target.platform, &resolution);
            from_source::lock_build_environments(
                python,
                &target,
                cache,
                &artifacts,
                existing.as_ref(),
                &mut lock,
            )?;
        }
    }
    lock.save(&lock_path)?;
    tracing::info!("wrote {}", lock_path.display());
    Ok(lock)
}

/// The lock of a recipe whose `[python] lock` is the project's own: its wheels, as they are,
/// with its git packages and the recipe's projects made into sdists; nothing is resolved.
fn lock_given(
    recipe: &Recipe,
    py: &stackbuild_recipe::PythonSection,
    given: &Path,
    glibc: stackbuild_common::Glibc,
    cache: &Cache,
    existing: Option<&Lock>,
    lock: &mut Lock,
) -> Result<(), BuildError> {
    // The project's own lock: its wheels, as they are; nothing is resolved.
    let given = stackbuild_python::GivenLock::load(given)?;
    for target in stackbuild_python::targets_with(recipe, glibc) {
        let (chosen, git) = given.select_all(&target)?;
        tracing::info!("{} wheel(s) from {} for {target}", chosen.len(), given.path.display());
        let mut artifacts = stackbuild_python::fetch(&given.path, &chosen, &artifact_dir(cache), &|| {
            stackbuild_python::Config::for_lock_urls(py.sources(), Some(&pip_settings_dir(cache)))
        })?;
        // Its git packages: the tar of each locked commit, built from source like a recipe's
        // git dependency (the lock records the commit; the tar is made again where missing).
        let fetch = stackbuild_python::SourceFetch {
            artifacts: &artifact_dir(cache),
            memo: None,
            cache: cache.root(),
        };
        for g in &git {
            let tree = stackbuild_python::Tree::Git { url: &g.url, commit: &g.commit, subdirectory: None };
            let made =
                stackbuild_python::tree_sdist(&g.name, tree, Some(&g.version), fetch).map_err(|e| {
                    BuildError::Unsupported(format!("{}: {} from git: {e}", given.path.display(), g.name))
                })?;
            artifacts.push(made);
        }
        // The recipe's projects (`[[source]] install = "wheel"`): the tree's sdist at the
        // version the lock gives the project of that directory (or name), its dependencies
        // the lock's, as `uv sync` installs the workspace's members.
        let (projects, origins) = given_lock_projects(recipe, &given, fetch, cache)?;
        artifacts.extend(projects);
        lock.set_packages(target.platform, &artifacts);
        lock.set_origins(target.platform, &origins);
        for g in &git {
            lock.set_commit(target.platform, &g.name, &g.commit);
        }
        from_source::lock_build_environments(py, &target, cache, &artifacts, existing, lock)?;
    }
    Ok(())
}

/// The recipe's projects (`[[source]] install = "wheel"`) to resolve, each from its `--source`
/// tree where `sources` gives one.
fn recipe_projects<'a>(
    recipe: &'a Recipe,
    sources: &'a BTreeMap<String, PathBuf>,
    cache_root: &'a [&'a Path],
) -> Vec<stackbuild_python::Project<'a>> {
    recipe
        .sources
        .iter()
        .filter(|s| s.install_wheel)
        .map(|s| stackbuild_python::Project {
            source: s.name.clone(),
            tree: match sources.get(&s.name) {
                Some(dir) => stackbuild_python::Tree::Path { path: dir, exclude: cache_root },
                None => from_source::tree_of(s, cache_root),
            },
            extras: s.extras.clone(),
        })
        .collect()
}

/// The sdists of the recipe's projects (`[[source]] install = "wheel"`) beside a project's own
/// lock, and where each comes from (its source, the commit of a git one): the lock's project
/// whose directory is the source's (a path source), else whose name is the source's name, at
/// the version the lock records.
fn given_lock_projects(
    recipe: &Recipe,
    given: &stackbuild_python::GivenLock,
    fetch: stackbuild_python::SourceFetch<'_>,
    cache: &Cache,
) -> Result<(Vec<stackbuild_python::Artifact>, stackbuild_python::Resolution), BuildError> {
    let members = given.projects();
    let cache_root = [cache.root()];
    let mut out = Vec::new();
    let mut origins = stackbuild_python::Resolution::default();
    for src in recipe.sources.iter().filter(|s| s.install_wheel) {
        let same_dir = |dir: &std::path::Path| match &src.origin {
            stackbuild_recipe::SourceOrigin::Path { path } => {
                std::fs::canonicalize(path).ok().is_some_and(|p| std::fs::canonicalize(dir).ok() == Some(p))
            }
            stackbuild_recipe::SourceOrigin::Git { .. } => false,
        };
        let wanted = stackbuild_python::normalize_name(&src.name);
        let member = members
            .iter()
            .find(|(_, _, dir)| same_dir(dir))
            .or_else(|| members.iter().find(|(name, _, _)| name.as_ref() == wanted));
        let Some((name, version, _)) = member else {
            return Err(BuildError::Unsupported(format!(
                "[[source]] {} (install = \"wheel\"): {} lists no project of its directory or name (uv's \
                 `source = {{ editable = ... }}`); install = \"wheel\" needs the lock's version of it",
                src.name,
                given.path.display()
            )));
        };
        let Some(version) = version else {
            return Err(BuildError::Unsupported(format!(
                "[[source]] {}: {} gives {name} no version (a dynamic one): lock the project with a static \
                 version, or drop install = \"wheel\"",
                src.name,
                given.path.display()
            )));
        };
        let tree = from_source::tree_of(src, &cache_root);
        let made = stackbuild_python::tree_sdist(name, tree, Some(version), fetch)
            .map_err(|e| BuildError::Unsupported(format!("[[source]] {}: {e}", src.name)))?;
        origins.projects.insert(made.name.clone(), src.name.clone());
        if let stackbuild_recipe::SourceOrigin::Git { commit, .. } = &src.origin {
            origins.commits.insert(made.name.clone(), commit.clone());
        }
        out.push(made);
    }
    Ok((out, origins))
}

/// The glibc the wheels are chosen for: a bootstrapped suite's from the table, an OCI layout's
/// read from its `libc.so.6`. Other bases (a registry's, an archive's, the daemon's) are not
/// at hand before the build, so their wheels are chosen up to the conservative
/// [`Glibc::DEFAULT`](stackbuild_common::Glibc::DEFAULT); the build checks every base's glibc
/// against the lock's (`PlatformBuilder::check_glibc`).
fn base_glibc(recipe: &Recipe) -> Result<stackbuild_common::Glibc, BuildError> {
    use stackbuild_common::Glibc;
    if recipe.python.is_none() {
        return Ok(Glibc::DEFAULT);
    }
    if let Some(known) = stackbuild_python::glibc_baseline(recipe) {
        return Ok(known);
    }
    match &recipe.base {
        Base::Oci { path, tag } => {
            let image = stackbuild_image::read_layout(path, tag.as_deref())?;
            let found = stackbuild_image::glibc_of_layers(&image.layers)?;
            if found.is_none() {
                tracing::warn!(
                    "{}: no glibc libc.so.6 found in the base; choosing wheels up to manylinux_2_{}",
                    path.display(),
                    Glibc::DEFAULT.minor
                );
            }
            Ok(found.unwrap_or(Glibc::DEFAULT))
        }
        Base::Bootstrap(b) => {
            tracing::warn!(
                "the glibc of {} {} is not in stackbuild's table; choosing wheels up to manylinux_2_{}",
                b.distro.as_str(),
                b.suite,
                Glibc::DEFAULT.minor
            );
            Ok(Glibc::DEFAULT)
        }
        base => {
            tracing::info!(
                "a {} base's glibc is read when it is built; choosing wheels up to manylinux_2_{}",
                base.kind(),
                Glibc::DEFAULT.minor
            );
            Ok(Glibc::DEFAULT)
        }
    }
}

fn artifact_dir(cache: &Cache) -> PathBuf {
    cache.root().join("artifacts")
}

/// Where pip's settings are remembered (`download::pip`): beside the downloads, not among them,
/// since `artifacts/` holds only `<sha256>/` entries and scratch removed once stale
/// (`Cache::clean_temps`).
fn pip_settings_dir(cache: &Cache) -> PathBuf {
    cache.root().join("pip-settings")
}

#[allow(clippy::too_many_lines)] // the steps in order: platforms, layout and audit, archive, push
/// Builds the image of `recipe`: one image, or an image index with one image per platform when
/// the recipe lists several.
pub fn build(recipe: &Recipe, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    // A bad `--cache-registry` fails before anything is created.
    let remote = opts
        .cache_registry
        .as_deref()
        .map(|spec| stackbuild_image::RemoteCache::new(spec, registry_client(opts)))
        .transpose()?;
    let mut cache = match &opts.cache_dir {
        Some(dir) => Cache::open(dir)?,
        None => Cache::open_default()?,
    };
    if let Some(remote) = remote {
        cache = cache.with_remote(remote);
    }
    let _guard = cache.lock()?;
    let epoch = stackbuild_image::source_date_epoch()?;
    let out = opts.out.clone().unwrap_or_else(|| PathBuf::from("images").join(&recipe.image.name));
    // Before any work: what is at the output paths must be ours to write (checked again when
    // writing).
    stackbuild_image::check_layout_dir(&out)?;
    if let Some(archive) = &opts.archive {
        stackbuild_image::check_output_file("--archive", archive)?;
        stackbuild_image::check_distinct(archive, &out)?;
    }
    let relock = if opts.locked { Relock::Never } else { Relock::IfStale };
    let lock = lock_recipe(recipe, &relock, &cache, &opts.source_overrides)?;
    let reference = format!("{}:{}", recipe.image.name, recipe.image.tag);
    // `docker load` and `podman load` archives hold one platform's image: the host's, as
    // `docker pull` would choose it.
    let archived = if recipe.image.platforms.len() == 1 {
        Some(0)
    } else {
        recipe.image.platforms.iter().position(|p| p.machine() == std::env::consts::ARCH)
    };
    if archived.is_none() && (opts.archive.is_some() || opts.load) {
        return Err(BuildError::Unsupported(format!(
            "--archive and --load take the image of this host's platform ({}), which {} does not list; \
             push the image index to a registry instead",
            std::env::consts::ARCH,
            recipe.path.display()
        )));
    }
    // `--load` takes each layer of the host's image into the daemon as soon as it is written.
    let mut loader = match archived.filter(|_| opts.load) {
        Some(i) => Some(stackbuild_image::Loader::start(&reference, recipe.image.platforms[i], &cache)?),
        None => None,
    };
    let mut builds = Vec::with_capacity(recipe.image.platforms.len());
    for (i, &platform) in recipe.image.platforms.iter().enumerate() {
        if recipe.image.platforms.len() > 1 {
            tracing::info!("platform {platform}");
        }
        // Base, download (logged on its own) and layers.
        let _stage = stackbuild_common::Stage::start(format!("build of {platform}"));
        let mut b = PlatformBuilder::new(recipe, platform, &lock, &cache, &out, opts, epoch);
        b.loader = loader.as_ref().filter(|_| archived == Some(i));
        builds.push(build_platform(b)?);
    }
    let images: Vec<Image> = builds.iter().map(|b| b.image.clone()).collect();
    let multi = builds.len() > 1;

    // The audit reads the layers from the cache, before the output is touched: an image that
    // fails it is never written.
    let mut audits: Vec<Option<stackbuild_audit::AuditReport>> = vec![None; builds.len()];
    if opts.audit {
        let _stage = stackbuild_common::Stage::start("audit");
        for (i, b) in builds.iter().enumerate() {
            let mut report = audit_cached(&cache, &b.image)?;
            for ignore in &recipe.audit_ignore {
                report.accept(&ignore.path, &ignore.reason);
            }
            for w in &report.warnings {
                tracing::debug!("audit: {}: {}", w.path, w.message);
            }
            tracing::info!(
                "audit{}: {} ELF object(s), {} error(s), {} warning(s) (listed by `stackbuild audit`), {} host-provided librar(ies)",
                if multi { format!(" of {}", b.platform) } else { String::new() },
                report.objects_scanned,
                report.errors.len(),
                report.warnings.len(),
                report.host_provided.len()
            );
            if report.has_errors() {
                let mut text = report.render_human();
                text.push_str(&missing_packages(recipe, &cache, b.platform, &report));
                return Err(BuildError::Audit(text));
            }
            audits[i] = Some(report);
        }
    }
    let write = stackbuild_common::Stage::start("write");
    let digest = stackbuild_image::write_out_layout(&out, &images, &recipe.image.tag)?;
    if let Some(image) = archived.and_then(|i| images.get(i)) {
        if let Some(archive) = &opts.archive {
            stackbuild_image::check_output_file("--archive", archive)?;
            stackbuild_image::write_archive(archive, image, &reference)?;
            tracing::info!("wrote {}", archive.display());
        }
        if let Some(loader) = loader.take() {
            for line in loader.finish(image)? {
                tracing::info!("docker: {line}");
            }
        }
    }
    drop(write);
    // Before the push: a failed push still leaves the documents of the image just written.
    let sbom_files = match &opts.sbom_dir {
        Some(dir) => write_sbom_files(&builds, dir, &recipe.image.name)?,
        None => Vec::new(),
    };
    let push = match &opts.push {
        Some(dest) => {
            let dest = stackbuild_image::Reference::parse(dest)?;
            let _stage = stackbuild_common::Stage::start("push");
            let report =
                stackbuild_image::push_layout(&registry_client(opts), &out, Some(&recipe.image.tag), &dest)?;
            tracing::info!(
                "pushed {dest}: {} blob(s) uploaded, {} already there, {} mounted ({} requests)",
                report.blobs_uploaded,
                report.blobs_skipped,
                report.blobs_mounted,
                report.requests
            );
            Some(report)
        }
        None => None,
    };
    let referrers = match &opts.push {
        Some(dest) => push_sbom_referrers(&builds, dest, opts)?,
        None => Vec::new(),
    };

    let mut platforms = Vec::new();
    if multi {
        for (b, audit) in builds.iter().zip(&audits) {
            platforms.push(PlatformReport {
                platform: b.platform.to_string(),
                manifest_digest: b.image.manifest_digest()?,
                layers: b.layers.clone(),
                audit: audit.clone(),
            });
        }
    }
    let first = builds.into_iter().next().ok_or_else(|| BuildError::Unsupported("no platform".into()))?;
    Ok(BuildReport {
        manifest_digest: digest,
        layout: out,
        reference,
        layers: first.layers,
        stack: first.stack,
        audit: audits.into_iter().next().flatten(),
        push,
        referrers,
        sbom_files,
        seconds: started.elapsed().as_secs_f64(),
        platforms,
    })
}

/// Attaches each platform image's SBOM documents to it in the registry `dest` names (OCI 1.1
/// referrers, or the referrers tag scheme where the registry has no referrers API).
fn push_sbom_referrers(
    builds: &[PlatformBuild],
    dest: &str,
    opts: &BuildOptions,
) -> Result<Vec<stackbuild_image::ReferrerReport>, BuildError> {
    let dest = stackbuild_image::Reference::parse(dest)?;
    let client = registry_client(opts);
    let mut reports = Vec::new();
    for b in builds {
        let subject = stackbuild_image::Subject {
            media_type: stackbuild_image::MEDIA_TYPE_MANIFEST.to_owned(),
            digest: b.image.manifest_digest()?,
            size: b.image.manifest_json()?.len() as u64,
        };
        let sbom = b.sbom()?;
        for (media_type, bytes) in [
            (stackbuild_image::SPDX_MEDIA_TYPE, &sbom.spdx),
            (stackbuild_image::CYCLONEDX_MEDIA_TYPE, &sbom.cyclonedx),
        ] {
            let report = stackbuild_image::push_referrer(&client, &dest, &subject, media_type, bytes)?;
            tracing::info!(
                "attached {media_type} to {}: {} ({})",
                subject.digest,
                report.digest,
                if report.referrers_api { "referrers API" } else { "referrers tag" }
            );
            reports.push(report);
        }
    }
    Ok(reports)
}

/// `--sbom DIR`: `<name>.spdx.json` and `<name>.cdx.json` (with `-<os>-<arch>` per platform when
/// there are several), the same bytes as in the image.
fn write_sbom_files(builds: &[PlatformBuild], dir: &Path, name: &str) -> Result<Vec<PathBuf>, BuildError> {
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let base = name.rsplit('/').next().unwrap_or(name);
    let mut files = Vec::new();
    for b in builds {
        let stem = if builds.len() > 1 {
            format!("{base}-{}", b.platform.as_str().replace('/', "-"))
        } else {
            base.to_owned()
        };
        let sbom = b.sbom()?;
        for (ext, bytes) in [("spdx.json", &sbom.spdx), ("cdx.json", &sbom.cyclonedx)] {
            let path = dir.join(format!("{stem}.{ext}"));
            stackbuild_common::write_atomic(&path, bytes).map_err(io("writing", &path))?;
            files.push(path);
        }
    }
    Ok(files)
}

/// Assembles the image of one platform: every layer built or found in the cache, the config,
/// the stack description; nothing is written to `out`. The steps in layer order: base, Python
/// package groups, sources, configuration; then the image over them.
fn build_platform(mut b: PlatformBuilder<'_>) -> Result<PlatformBuild, BuildError> {
    let (recipe, platform, epoch) = (b.recipe, b.platform, b.epoch);
    let base = b.base_layers()?;
    b.check_glibc(&base.facts)?;
    let mut py = b.python_plan(&base.facts, base.interpreter.as_ref())?;
    b.build_from_source_and_layers_ahead(&mut py)?;
    b.python_layers(&py)?;
    let removal = platform::StageRemoval::start(std::mem::take(&mut b.spent_stages));
    b.check_lock(&py)?;
    b.sources_layer()?;
    let stack = b.stack_manifest(&py)?;
    let sbom = b.config_layer(&py, &stack)?;
    let config = image::runtime_config(recipe, base.config, &stack.requirements);
    let (image, layers) = image::image(recipe, platform, epoch, base.image, config, b.layers)?;
    Ok(PlatformBuild { platform, image, layers, stack, sbom, _removal: removal })
}

fn registry_client(opts: &BuildOptions) -> stackbuild_image::Client {
    stackbuild_image::Client::new(opts.insecure_registries.iter().cloned())
}

/// The audit of an image, reused from the cache when the same manifest was audited before (a
/// no-change rebuild must not re-read gigabytes of layers).
fn audit_cached(cache: &Cache, image: &Image) -> Result<stackbuild_audit::AuditReport, BuildError> {
    let digest = image.manifest_digest()?;
    let name = format!("v{}-{}.json", stackbuild_audit::POLICY_VERSION, digest.trim_start_matches("sha256:"));
    let path = cache.root().join("audits").join(name);
    if let Some(report) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
        return Ok(report);
    }
    let layers = stackbuild_audit::LayerTap::cache_dir(cache.root());
    let report = stackbuild_audit::audit_image_cached(image, &layers)?;
    if let Ok(json) = serde_json::to_vec(&report) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        }
        stackbuild_common::write_atomic(&path, &json).map_err(io("writing", &path))?;
    }
    Ok(report)
}

/// Looks `key` up in the cache. The cache trusts a blob of the right size, so a hit whose bytes
/// are about to go somewhere new (the layout at `out` lacks the blob, or an archive or `--load`
/// reads it) is hashed again first; a corrupted one is removed and counts as a miss, so the
/// layer is built again instead of shipped. A no-change rebuild into the same layout hashes
/// nothing, which keeps it within the 0.05 s no-change target (docs/benchmarks.md, "Targets") where hashing a
/// multi-GB stack would take seconds.
fn reuse(cache: &Cache, key: &LayerKey, out: &Path, opts: &BuildOptions) -> Option<LayerBlob> {
    let blob = cache.get_layer(key)?;
    // A layer just pulled from the cache registry was hashed as it came in.
    let pulled = cache.remote().is_some_and(|r| r.pulled(&blob.digest));
    if pulled || !must_verify(&blob, out, opts) {
        return Some(blob);
    }
    match cache.verify_blob(&blob.digest) {
        Ok(()) => Some(blob),
        Err(e) => {
            tracing::warn!("{e}; building the layer again");
            let _ = cache.remove_blob(&blob.digest);
            None
        }
    }
}

/// Whether a cached blob must be hashed before use: see [`reuse`].
fn must_verify(blob: &LayerBlob, out: &Path, opts: &BuildOptions) -> bool {
    if opts.archive.is_some() || opts.load {
        return true;
    }
    let Ok(hex) = stackbuild_cache::sha256_hex(&blob.digest) else { return true };
    let placed = out.join("blobs").join("sha256").join(hex);
    !std::fs::symlink_metadata(placed).is_ok_and(|m| m.is_file() && m.len() == blob.size)
}

fn tempdir(cache: &Cache) -> Result<tempfile::TempDir, BuildError> {
    let dir = cache.root().join("tmp");
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    tempfile::Builder::new().prefix("stage-").tempdir_in(&dir).map_err(io("creating a stage in", &dir))
}

/// The fix line of a failed audit: the Debian packages of the base's suite that ship the
/// libraries nothing in the image provides (from the suite's Contents index), or nothing when
/// the base is not a Debian suite or the index cannot be had.
fn missing_packages(
    recipe: &Recipe,
    cache: &Cache,
    platform: Platform,
    report: &stackbuild_audit::AuditReport,
) -> String {
    let Base::Bootstrap(base) = &recipe.base else { return String::new() };
    if base.distro.as_str() != "debian" {
        return String::new();
    }
    let sonames: std::collections::BTreeSet<String> = report
        .errors
        .iter()
        .filter(|f| f.kind == stackbuild_audit::FindingKind::Unresolved)
        .filter_map(|f| f.soname.clone())
        .collect();
    let Some(mirror) = from_source::debian_mirror(recipe) else { return String::new() };
    if sonames.is_empty() {
        return String::new();
    }
    let found = match stackbuild_wheelbuild::debian_providers(
        cache,
        &mirror,
        &base.suite,
        debian_arch(platform),
        &sonames,
    ) {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!("which Debian packages ship the missing libraries is unknown: {e}");
            return String::new();
        }
    };
    let mut packages: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut shipped = Vec::new();
    for (soname, providers) in &found {
        // The plain runtime package before its variants (libavcodec59, not libavcodec-extra59;
        // a -dev package only where it alone ships the name, as for an unversioned `.so`).
        let rank =
            |p: &&String| (["-dev", "-extra", "-dbg"].iter().any(|v| p.contains(v)), p.len(), (*p).clone());
        if let Some(p) = providers.iter().min_by_key(rank) {
            packages.insert(p);
            shipped.push(format!("{soname} ({p})"));
        }
    }
    let missing: Vec<&str> = sonames.iter().filter(|s| !found.contains_key(*s)).map(String::as_str).collect();
    let mut out = String::new();
    if !packages.is_empty() {
        let list: Vec<String> = packages.iter().map(|p| format!("{p:?}")).collect();
        let _ = writeln!(
            out,
            "fix: add {} to [base] packages: Debian {}'s packages that ship {}",
            list.join(", "),
            base.suite,
            shipped.join(", ")
        );
    }
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "no package of Debian {} main ships {}: a wheel that should carry it, or a plugin to accept with [[audit.ignore]] and its reason",
            base.suite,
            missing.join(", ")
        );
    }
    out
}

/// The keyring an Ubuntu base needs where the host has none and its apt is Debian's (no
/// `[base] mirror`): Ubuntu's archive keys from Debian's `ubuntu-keyring` package
/// ([`stackbuild_wheelbuild::ubuntu_keyring`]); `None` for every other base.
fn archive_keyring(
    recipe: &Recipe,
    b: &stackbuild_recipe::Bootstrap,
    cache: &Cache,
) -> Result<Option<PathBuf>, BuildError> {
    let host_has = Path::new("/usr/share/keyrings/ubuntu-archive-keyring.gpg").is_file();
    if b.distro.as_str() != "ubuntu" || b.mirror.is_some() || host_has {
        return Ok(None);
    }
    let mirror = from_source::debian_mirror(recipe).ok_or_else(|| {
        BuildError::Keyring(
            "no Debian mirror in this machine's apt sources to fetch ubuntu-keyring from".into(),
        )
    })?;
    stackbuild_wheelbuild::ubuntu_keyring(cache, &mirror).map(Some).map_err(BuildError::Keyring)
}

fn debian_arch(platform: Platform) -> &'static str {
    match platform {
        Platform::LinuxAmd64 => "amd64",
        Platform::LinuxArm64 => "arm64",
    }
}
