//! The build: recipe -> lock -> layers -> OCI image layout (and archive).
//!
//! Layers, one per concern, in the order that maximizes reuse (what changes least goes first):
//! base; CUDA libraries; cuDNN; torch and its companions; the other Python packages; sources;
//! patches and configuration. Each layer's cache key is computed from its inputs *before*
//! anything is fetched or staged, so a rebuild with no change hashes a few strings, finds every
//! layer in the cache and touches nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};
use stackcontract::image::{Component, StackManifest, LABEL_PREFIX, STACK_JSON_PATH};

use crate::base::{BaseFacts, DebianBase};
use crate::blob::LayerBlob;
use crate::cache::{Cache, LayerKey};
use crate::derive;
use crate::fetch::{self, Artifact};
use crate::layer::{self, Compression, LayerWriter};
use crate::lock::Lock;
use crate::oci::{self, History, Image, ImageConfig, RuntimeConfig};
use crate::patch::{self, PatchSpec};
use crate::platform::Platform;
use crate::recipe::{Base, PatchChange, PatchTarget, Recipe, SourceOrigin};
use crate::sbom;
use crate::solve::{self, Pinned, Target};
use crate::source;
use crate::wheel::{self, Scheme};

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
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file the recipe names (a patch, a base archive) that is not a readable regular file.
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    /// Lock file.
    #[error(transparent)]
    Lock(#[from] crate::lock::LockError),
    /// Resolution.
    #[error(transparent)]
    Solve(#[from] solve::SolveError),
    /// Downloads.
    #[error(transparent)]
    Fetch(#[from] fetch::FetchError),
    /// Cache.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
    /// Layers.
    #[error(transparent)]
    Layer(#[from] layer::LayerError),
    /// Base.
    #[error(transparent)]
    Base(#[from] crate::base::BaseError),
    /// Wheel installation.
    #[error("installing {wheel}: {source}")]
    Wheel {
        /// The wheel's file name.
        wheel: String,
        /// The error.
        source: wheel::WheelError,
    },
    /// Source staging.
    #[error("source {name:?}: {source}")]
    Source {
        /// The source.
        name: String,
        /// The error.
        source: source::SourceError,
    },
    /// A patch that does not apply.
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// Compiling the bytecode failed.
    #[error(transparent)]
    Bytecode(#[from] crate::bytecode::BytecodeError),
    /// Image output.
    #[error(transparent)]
    Oci(#[from] oci::OciError),
    /// An output path (`--out`, `--archive`) that is not ours to write.
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// `--load`.
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    /// The audit found errors.
    #[error("the image's libraries do not resolve:\n{0}")]
    Audit(String),
    /// The audit could not run.
    #[error(transparent)]
    AuditFailed(#[from] crate::audit::AuditError),
    /// `--push` or a registry base.
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BuildError + 'a {
    move |source| BuildError::Io { op, path: path.to_owned(), source }
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
    /// The `.pyc` this layer holds that the build compiled (Python layers and patched files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytecode: Option<crate::bytecode::Added>,
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
    pub audit: Option<crate::audit::AuditReport>,
    /// The registry push, when asked for.
    pub push: Option<crate::registry::PushReport>,
    /// The SBOM documents attached to the pushed image as OCI referrers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub referrers: Vec<crate::registry::ReferrerReport>,
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
    pub audit: Option<crate::audit::AuditReport>,
}

/// One platform's image, assembled but not written.
struct PlatformBuild {
    platform: Platform,
    image: Image,
    layers: Vec<LayerReport>,
    stack: StackManifest,
    sbom: sbom::Sbom,
}

/// A Python package layer group, in layer order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Cuda,
    Cudnn,
    Torch,
    Python,
}

impl Group {
    const ALL: [Group; 4] = [Group::Cuda, Group::Cudnn, Group::Torch, Group::Python];

    fn of(name: &str) -> Self {
        if name.starts_with("nvidia-cudnn") {
            Group::Cudnn
        } else if name.starts_with("nvidia-") {
            Group::Cuda
        } else if matches!(name, "torch" | "torchvision" | "torchaudio" | "triton") {
            Group::Torch
        } else {
            Group::Python
        }
    }

    fn name(self) -> &'static str {
        match self {
            Group::Cuda => "cuda",
            Group::Cudnn => "cudnn",
            Group::Torch => "torch",
            Group::Python => "python",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Group::Cuda => "CUDA libraries (nvidia-* wheels)",
            Group::Cudnn => "cuDNN",
            Group::Torch => "torch and its companions",
            Group::Python => "Python packages",
        }
    }
}

/// A locked wheel: what the lock says, and where the file is once fetched.
#[derive(Debug, Clone)]
struct Wheel {
    pin: Pinned,
    filename: String,
    sha256: String,
}

/// Resolves (or reads the lock) and returns the locked wheels for `platform`, updating the
/// lock file when it had to resolve.
/// With `refresh`, resolves again even when the lock is current (`stackbuild lock`).
pub fn lock_recipe(recipe: &Recipe, locked: bool, refresh: bool, cache: &Cache) -> Result<Lock, BuildError> {
    let lock_path = Lock::path_for(&recipe.path);
    let existing = if refresh { None } else { Lock::load_optional(&lock_path)? };
    if let Some(lock) = &existing {
        match lock.stale_reason(recipe) {
            None => return Ok(lock.clone()),
            Some(reason) if locked => {
                return Err(BuildError::StaleLock { lock: lock_path, recipe: recipe.path.clone(), reason })
            }
            Some(reason) => tracing::info!("lock is stale ({reason}); resolving again"),
        }
    } else if locked && !refresh {
        return Err(BuildError::StaleLock {
            lock: lock_path,
            recipe: recipe.path.clone(),
            reason: "no lock file".into(),
        });
    }
    let mut lock = Lock::new(recipe);
    if let Some(python) = &recipe.python {
        for target in solve::targets(recipe) {
            tracing::info!("resolving {} package(s) for {target}", python.packages.len());
            let pins = solve::resolve(python, &target)?;
            fetch::import_local_wheels(&python.wheels, &pins, &target, &artifact_dir(cache))?;
            let artifacts =
                fetch::fetch_wheels(&pins, &target, python.index.as_deref(), &artifact_dir(cache))?;
            lock.set_packages(target.platform, &artifacts);
        }
    }
    lock.save(&lock_path)?;
    tracing::info!("wrote {}", lock_path.display());
    Ok(lock)
}

fn artifact_dir(cache: &Cache) -> PathBuf {
    cache.root().join("artifacts")
}

#[allow(clippy::too_many_lines)] // the steps in order: platforms, layout and audit, archive, push
/// Builds the image of `recipe`: one image, or an image index with one image per platform when
/// the recipe lists several.
pub fn build(recipe: &Recipe, opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    let cache = match &opts.cache_dir {
        Some(dir) => Cache::open(dir)?,
        None => Cache::open_default()?,
    };
    let _guard = cache.lock()?;
    let epoch = layer::source_date_epoch()?;
    let out = opts.out.clone().unwrap_or_else(|| PathBuf::from("images").join(&recipe.image.name));
    // Before any work: what is at the output paths must be ours to write (checked again when
    // writing).
    crate::output::check_layout_dir(&out)?;
    if let Some(archive) = &opts.archive {
        crate::output::check_output_file("--archive", archive)?;
        crate::output::check_distinct(archive, &out)?;
    }
    let lock = lock_recipe(recipe, opts.locked, false, &cache)?;
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
    let mut builds = Vec::with_capacity(recipe.image.platforms.len());
    for &platform in &recipe.image.platforms {
        if recipe.image.platforms.len() > 1 {
            tracing::info!("platform {platform}");
        }
        // Base, download (logged on its own) and layers.
        let _stage = crate::progress::Stage::start(format!("build of {platform}"));
        builds.push(build_platform(recipe, platform, &lock, &cache, &out, opts, epoch)?);
    }
    let images: Vec<Image> = builds.iter().map(|b| b.image.clone()).collect();
    let multi = builds.len() > 1;

    // The audit reads the layers from the cache, before the output is touched: an image that
    // fails it is never written.
    let mut audits: Vec<Option<crate::audit::AuditReport>> = vec![None; builds.len()];
    if opts.audit {
        let _stage = crate::progress::Stage::start("audit");
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
                return Err(BuildError::Audit(report.render_human()));
            }
            audits[i] = Some(report);
        }
    }
    let write = crate::progress::Stage::start("write");
    let digest = crate::output::write_layout(&out, &images, &recipe.image.tag)?;
    if let Some(image) = archived.and_then(|i| images.get(i)) {
        write_archive_and_load(image, &reference, &cache, opts)?;
    }
    drop(write);
    // Before the push: a failed push still leaves the documents of the image just written.
    let sbom_files = match &opts.sbom_dir {
        Some(dir) => write_sbom_files(&builds, dir, &recipe.image.name)?,
        None => Vec::new(),
    };
    let push = match &opts.push {
        Some(dest) => {
            let dest = crate::registry::Reference::parse(dest)?;
            let _stage = crate::progress::Stage::start("push");
            let report =
                crate::registry::push_layout(&registry_client(opts), &out, Some(&recipe.image.tag), &dest)?;
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
) -> Result<Vec<crate::registry::ReferrerReport>, BuildError> {
    let dest = crate::registry::Reference::parse(dest)?;
    let client = registry_client(opts);
    let mut reports = Vec::new();
    for b in builds {
        let subject = crate::registry::Subject {
            media_type: oci::MEDIA_TYPE_MANIFEST.to_owned(),
            digest: b.image.manifest_digest()?,
            size: b.image.manifest_json()?.len() as u64,
        };
        for (media_type, bytes) in
            [(sbom::SPDX_MEDIA_TYPE, &b.sbom.spdx), (sbom::CYCLONEDX_MEDIA_TYPE, &b.sbom.cyclonedx)]
        {
            let report = crate::registry::push_referrer(&client, &dest, &subject, media_type, bytes)?;
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
        for (ext, bytes) in [("spdx.json", &b.sbom.spdx), ("cdx.json", &b.sbom.cyclonedx)] {
            let path = dir.join(format!("{stem}.{ext}"));
            crate::atomic::write_atomic(&path, bytes).map_err(io("writing", &path))?;
            files.push(path);
        }
    }
    Ok(files)
}

/// `--archive` and `--load` of one image.
fn write_archive_and_load(
    image: &Image,
    reference: &str,
    cache: &Cache,
    opts: &BuildOptions,
) -> Result<(), BuildError> {
    if let Some(archive) = &opts.archive {
        crate::output::check_output_file("--archive", archive)?;
        oci::write_archive(archive, image, reference)?;
        tracing::info!("wrote {}", archive.display());
    }
    if opts.load {
        // The archive the daemon reads: the one asked for, or a temporary one in the cache.
        let tmp;
        let archive = if let Some(a) = &opts.archive {
            a.clone()
        } else {
            tmp = tempdir(cache)?;
            let path = tmp.path().join("image.tar");
            oci::write_archive(&path, image, reference)?;
            path
        };
        for line in crate::load::load_archive(&archive)? {
            tracing::info!("docker: {line}");
        }
    }
    Ok(())
}

/// Assembles the image of one platform: every layer built or found in the cache, the config,
/// the stack description; nothing is written to `out`.
#[allow(clippy::too_many_lines)] // the layers in order, each short
fn build_platform(
    recipe: &Recipe,
    platform: Platform,
    lock: &Lock,
    cache: &Cache,
    out: &Path,
    opts: &BuildOptions,
    epoch: u64,
) -> Result<PlatformBuild, BuildError> {
    let compression = opts.compression;

    // A cell: the SBOM reads the layers so far while `push` is still to add the last one.
    let layers: std::cell::RefCell<Vec<(LayerReport, LayerBlob, String)>> = std::cell::RefCell::default();
    let push = |name: &str, created_by: String, blob: LayerBlob, built: bool| {
        tracing::info!(
            "layer {name:<8} {} {} ({} bytes)",
            if built { "built " } else { "reused" },
            blob.digest,
            blob.size
        );
        layers.borrow_mut().push((
            LayerReport {
                name: name.to_owned(),
                digest: blob.digest.clone(),
                size: blob.size,
                built,
                bytecode: None,
            },
            blob,
            created_by,
        ));
    };

    // Base.
    let mut base_config = RuntimeConfig::default();
    // The image-level fields of an OCI base that our build does not decide: kept.
    let mut base_image = ImageConfig::default();
    let mut components = Vec::new();
    let mut facts = BaseFacts::default();
    // The layer whose interpreter compiles the bytecode (a Debian base's only layer).
    let mut interpreter_base: Option<LayerBlob> = None;
    match &recipe.base {
        Base::Scratch => {}
        Base::Bootstrap(b) => {
            let debian = DebianBase {
                distribution: b.distro.as_str().to_owned(),
                suite: b.suite.clone(),
                packages: b
                    .packages
                    .iter()
                    .map(|p| p.version.as_ref().map_or_else(|| p.name.clone(), |v| format!("{}={v}", p.name)))
                    .collect(),
                mirror: b.mirror.clone(),
                variant: b.variant.clone(),
                architecture: debian_arch(platform).to_owned(),
            };
            tracing::info!(
                "base: {} {} with {} package(s)",
                debian.distribution,
                debian.suite,
                debian.packages.len()
            );
            let mut prepared = debian.prepare(cache, epoch, compression)?;
            if prepared.cached && must_verify(&prepared.layer, out, opts) {
                if let Err(e) = cache.verify_blob(&prepared.layer.digest) {
                    tracing::warn!("{e}; building the base again");
                    cache.remove_blob(&prepared.layer.digest)?;
                    prepared = debian.prepare(cache, epoch, compression)?;
                }
            }
            facts = prepared.facts;
            components.push(Component {
                kind: "base".into(),
                name: format!("{} {}", debian.distribution, debian.suite),
                version: String::new(),
                source: format!("mmdebstrap --variant={}", debian.variant),
                sha256: prepared.layer.diff_id.trim_start_matches("sha256:").to_owned(),
            });
            components.extend(facts.packages.iter().map(|(name, version)| Component {
                kind: "deb".into(),
                name: name.clone(),
                version: version.clone(),
                source: format!("{}:{}", debian.distribution, debian.suite),
                sha256: String::new(),
            }));
            interpreter_base = Some(prepared.layer.clone());
            push(
                "base",
                format!("stackbuild: {} {} (mmdebstrap)", debian.distribution, debian.suite),
                prepared.layer,
                !prepared.cached,
            );
        }
        Base::Oci { .. } | Base::Registry { .. } => {
            let (path, tag) = match &recipe.base {
                Base::Oci { path, tag } => (path.clone(), tag.clone()),
                Base::Registry { reference } => {
                    (pull_base(reference, platform, cache, opts)?, Some("base".to_owned()))
                }
                _ => unreachable!("matched above"),
            };
            let (path, tag) = (&path, &tag);
            let image = oci::read_layout(path, tag.as_deref())?;
            // The layers go into the image as they are: each is checked like an archive base's
            // (entry names, links, whiteouts) and against its digest and diff_id first.
            crate::base::check_layout_layers(&image.layers, cache, &path.display().to_string())?;
            base_config = image.config.config.clone();
            base_image = image.config.clone();
            components.push(Component {
                kind: "base".into(),
                name: path.display().to_string(),
                version: tag.clone().unwrap_or_default(),
                source: "oci-layout".into(),
                sha256: image.manifest_digest.trim_start_matches("sha256:").to_owned(),
            });
            let history: Vec<History> =
                image.config.history.iter().filter(|h| !h.empty_layer).cloned().collect();
            for (i, mut blob) in image.layers.into_iter().enumerate() {
                // Docker v2 layers are the same bytes under another name; an OCI manifest
                // names them the OCI way.
                if let Some(c) = Compression::from_media_type(&blob.media_type) {
                    blob.media_type = c.media_type().to_owned();
                }
                let by =
                    history.get(i).and_then(|h| h.created_by.clone()).unwrap_or_else(|| "base layer".into());
                push("base", by, blob, false);
            }
        }
        Base::Archive { .. } | Base::Docker { .. } => {
            let tmp = tempdir(cache)?;
            let (identity, name) = match &recipe.base {
                Base::Archive { path } => (crate::base::archive_identity(path)?, path.display().to_string()),
                Base::Docker { reference } => (crate::load::image_id(reference)?, reference.clone()),
                _ => unreachable!("matched above"),
            };
            let key = LayerKey::builder("base-import/v1")
                .str(&identity)
                .number(epoch)
                .str(&compression.cache_id())
                .finish();
            let imported = match crate::base::cached_import(&key, cache) {
                Some(imported) => imported,
                None => {
                    let archive = match &recipe.base {
                        Base::Archive { path } => path.clone(),
                        Base::Docker { reference } => {
                            let file = tmp.path().join("image.tar");
                            crate::load::export_image(reference, &file)?;
                            file
                        }
                        _ => unreachable!("matched above"),
                    };
                    crate::base::import_archive(&archive, &key, cache, epoch, compression)?
                }
            };
            base_config = imported.config;
            components.push(Component {
                kind: "base".into(),
                name: name.clone(),
                version: String::new(),
                source: recipe.base.kind().to_owned(),
                sha256: identity.trim_start_matches("sha256:").to_owned(),
            });
            for blob in imported.layers {
                push("base", format!("base layer of {name}"), blob, false);
            }
        }
    }

    // Python packages.
    let python = recipe.python.as_ref();
    if let (Some(py), Some(found)) = (python, facts.python_version()) {
        if (py.version.part(0), py.version.part(1)) != (found.part(0), found.part(1)) {
            return Err(BuildError::PythonMismatch {
                wanted: py.version.to_string(),
                found: format!("/usr/bin/python{found}"),
            });
        }
    }
    let wheels: Vec<Wheel> = lock
        .packages_for(platform)
        .map(|p| Wheel { pin: p.pinned(), filename: p.filename.clone(), sha256: p.sha256.clone() })
        .collect();
    let scheme = python.map(|py| Scheme::debian_local(&py.version));
    let target = python.map(|py| Target::new(py.version.clone(), platform));
    // Only the wheels of layers that must be built are fetched (and re-hashed): a change of one
    // small package must not re-read torch's 2 GB wheel.
    let fetch = |cache: &Cache, wanted: &[&Wheel]| -> Result<BTreeMap<String, Artifact>, BuildError> {
        let (Some(py), Some(target)) = (python, target.as_ref()) else { return Ok(BTreeMap::new()) };
        let pins: Vec<Pinned> = wanted.iter().map(|w| w.pin.clone()).collect();
        tracing::info!("fetching {} wheel(s)", pins.len());
        let _stage = crate::progress::Stage::start("download");
        fetch::import_local_wheels(&py.wheels, &pins, target, &artifact_dir(cache))?;
        let artifacts = fetch::fetch_wheels(&pins, target, py.index.as_deref(), &artifact_dir(cache))?;
        Ok(artifacts.into_iter().map(|a| (a.name.to_string(), a)).collect())
    };
    if let Some(py) = python {
        check_lock_graph(recipe, py, lock, platform, &wheels, cache, &fetch)?;
    }
    // A foreign platform's interpreter would run under qemu-user, whose binfmt handler is not
    // inside the chroot: no bytecode for it (yet), with a note.
    let native = platform.machine() == std::env::consts::ARCH;
    let bytecode =
        crate::bytecode::Plan::new(python, &facts, interpreter_base.as_ref().filter(|_| native), cache);
    let note_bytecode = |key: &LayerKey, added: Option<crate::bytecode::Added>| {
        let added = added.or_else(|| bytecode.recorded(key));
        if let Some((report, _, _)) = layers.borrow_mut().last_mut() {
            report.bytecode = added;
        }
    };
    if let Some(scheme) = &scheme {
        for group in Group::ALL {
            let members: Vec<&Wheel> =
                wheels.iter().filter(|w| Group::of(w.pin.name.as_ref()) == group).collect();
            if members.is_empty() {
                continue;
            }
            let mut key = LayerKey::builder("python-layer/v1")
                .str(group.name())
                .str(&scheme.purelib)
                .str(&scheme.interpreter)
                .str(&bytecode.key())
                .number(epoch)
                .str(&compression.cache_id());
            for w in &members {
                key = key.str(&w.filename).str(&w.sha256);
            }
            let key = key.finish();
            let names = members.iter().map(|w| w.pin.to_string()).collect::<Vec<_>>().join(" ");
            let created_by = format!("stackbuild: {}: {names}", group.describe());
            if let Some(blob) = reuse(cache, &key, out, opts) {
                push(group.name(), created_by, blob, false);
                note_bytecode(&key, None);
                continue;
            }
            let artifacts = fetch(cache, &members)?;
            let stage = tempdir(cache)?;
            for w in &members {
                let artifact = artifacts.get(w.pin.name.as_ref()).ok_or_else(|| {
                    BuildError::Unsupported(format!("wheel {} was not fetched", w.filename))
                })?;
                // The lock's name and version, checked against the wheel's METADATA: stack.json
                // records the lock's, so the wheel must be that package.
                wheel::install_wheel_as(
                    &artifact.path,
                    scheme,
                    stage.path(),
                    w.pin.name.as_ref(),
                    &w.pin.version.to_string(),
                )
                .map_err(|source| BuildError::Wheel { wheel: w.filename.clone(), source })?;
            }
            let added = bytecode.compile(stage.path(), scheme, epoch, &key)?;
            let mut writer = LayerWriter::new(cache, epoch);
            writer.add_dir(stage.path(), "")?;
            let blob = writer.finish(compression)?;
            cache.put_layer(&key, &blob)?;
            push(group.name(), created_by, blob, true);
            note_bytecode(&key, added);
        }
    }
    components.extend(wheels.iter().map(|w| Component {
        kind: "wheel".into(),
        name: w.pin.name.to_string(),
        version: w.pin.version.to_string(),
        source: if python.is_some_and(|p| p.wheels.iter().any(|l| l.name == w.pin.name)) {
            "recipe wheel".into()
        } else {
            python
                .and_then(|p| p.index.clone())
                .map_or_else(|| "python package index".into(), |_| "recipe index".into())
        },
        sha256: w.sha256.clone(),
    }));

    // Sources, with the patches that target them.
    if !recipe.sources.is_empty() {
        let stage = tempdir(cache)?;
        let mut key = LayerKey::builder("sources/v1").number(epoch).str(&compression.cache_id());
        let mut staged_all = true;
        for src in &recipe.sources {
            let dest = src.dest.clone();
            let over = opts.source_overrides.get(&src.name);
            let identity = match (over, &src.origin) {
                (Some(path), _) | (None, SourceOrigin::Path { path }) => {
                    // The cache and the output never go into the image, even with `path = "."`.
                    let staged =
                        source::stage_path_excluding(path, &dest, stage.path(), &[cache.root(), out])
                            .map_err(|source| BuildError::Source { name: src.name.clone(), source })?;
                    format!("tree:{}", staged.tree_sha256)
                }
                (None, SourceOrigin::Git { url, commit }) => {
                    staged_all = false;
                    format!("git:{url}@{commit}")
                }
            };
            components.push(Component {
                kind: "source".into(),
                name: src.name.clone(),
                version: identity.clone(),
                source: match &src.origin {
                    SourceOrigin::Git { url, .. } if over.is_none() => url.clone(),
                    _ => "local directory".into(),
                },
                sha256: String::new(),
            });
            key = key.str(&src.name).str(&dest).str(&identity);
        }
        for p in recipe.patches.iter().filter(|p| matches!(p.target, PatchTarget::Source(_))) {
            key = key.str(&p.name).str(&patch_identity(&p.change)?);
        }
        let key = key.finish();
        if let Some(blob) = reuse(cache, &key, out, opts) {
            push("sources", "stackbuild: sources".into(), blob, false);
        } else {
            if !staged_all {
                for src in recipe.sources.iter().filter(|s| !opts.source_overrides.contains_key(&s.name)) {
                    if let SourceOrigin::Git { url, commit } = &src.origin {
                        source::stage_git(url, commit, &src.dest, stage.path(), &cache.root().join("git"))
                            .map_err(|source| BuildError::Source { name: src.name.clone(), source })?;
                    }
                }
            }
            for p in &recipe.patches {
                let PatchTarget::Source(name) = &p.target else { continue };
                let src = recipe.sources.iter().find(|s| &s.name == name).ok_or_else(|| {
                    BuildError::PatchSourceMissing { patch: p.name.clone(), source_name: name.clone() }
                })?;
                let root = stage.path().join(src.dest.trim_start_matches('/'));
                let report = patch::apply(&p.name, &patch_spec(&p.change)?, &root)?;
                tracing::info!(
                    "patch {}: {} change(s) in {}",
                    p.name,
                    report.changes,
                    report.files.join(", ")
                );
            }
            let mut writer = LayerWriter::new(cache, epoch);
            writer.add_dir(stage.path(), "")?;
            let blob = writer.finish(compression)?;
            cache.put_layer(&key, &blob)?;
            push("sources", "stackbuild: sources".into(), blob, true);
        }
    }

    // Requirements, stack description, package patches: the last layer.
    let packages: Vec<derive::Package<'_>> = wheels
        .iter()
        .map(|w| derive::Package { name: w.pin.name.as_ref(), version: &w.pin.version, platform })
        .collect();
    // The torch build's architectures from its own fat binaries, else the knowledge base's row.
    let torch_code = wheels
        .iter()
        .find(|w| w.pin.name.as_ref() == "torch")
        .and_then(|w| crate::fatbin::torch_code_for_build(cache.root(), &w.filename, &w.sha256))
        .or_else(|| derive::torch_code(&packages));
    let requirements = derive::requirements_with(&packages, &recipe.host, torch_code.as_ref());
    for p in &recipe.patches {
        components.push(Component {
            kind: "patch".into(),
            name: p.name.clone(),
            version: String::new(),
            source: match &p.target {
                PatchTarget::Package(n) => format!("package {n}"),
                PatchTarget::Source(s) => format!("source {s}"),
            },
            sha256: patch_identity(&p.change)?,
        });
    }
    let stack = StackManifest {
        schema: 1,
        image: format!("{}:{}", recipe.image.name, recipe.image.tag),
        platform: platform.as_str().to_owned(),
        components,
        requirements: requirements.clone(),
    };
    let mut stack_json =
        serde_json::to_vec_pretty(&stack).map_err(|e| BuildError::Unsupported(e.to_string()))?;
    stack_json.push(b'\n');
    let package_patches: Vec<_> =
        recipe.patches.iter().filter(|p| matches!(p.target, PatchTarget::Package(_))).collect();
    let sbom = platform_sbom(&stack, &layers.borrow(), platform, epoch);
    let mut key = LayerKey::builder("config/v1")
        .str(&bytecode.key())
        .number(epoch)
        .str(&compression.cache_id())
        .bytes(&stack_json)
        .bytes(&sbom.spdx)
        .bytes(&sbom.cyclonedx);
    for p in &package_patches {
        key = key.str(&p.name).str(&patch_identity(&p.change)?);
    }
    let key = key.finish();
    if let Some(blob) = reuse(cache, &key, out, opts) {
        push("config", "stackbuild: patches and configuration".into(), blob, false);
        note_bytecode(&key, None);
    } else {
        let mut writer = LayerWriter::new(cache, epoch);
        writer.add_file(STACK_JSON_PATH, stack_json.clone(), 0o644)?;
        writer.add_file(sbom::SPDX_PATH, sbom.spdx.clone(), 0o644)?;
        writer.add_file(sbom::CYCLONEDX_PATH, sbom.cyclonedx.clone(), 0o644)?;
        // The writer reads file contents in `finish`: the stage must outlive it.
        let stage = tempdir(cache)?;
        let mut added = None;
        if !package_patches.is_empty() {
            let Some(scheme) = &scheme else {
                return Err(BuildError::Unsupported("package patches need a [python] section".into()));
            };
            let targets: Vec<&Wheel> = wheels
                .iter()
                .filter(|w| {
                    package_patches
                        .iter()
                        .any(|p| matches!(&p.target, PatchTarget::Package(n) if *n == w.pin.name))
                })
                .collect();
            let artifacts = fetch(cache, &targets)?;
            for p in package_patches {
                let PatchTarget::Package(name) = &p.target else { continue };
                let artifact = artifacts.get(name.as_ref()).ok_or_else(|| {
                    BuildError::PatchTargetMissing { patch: p.name.clone(), package: name.to_string() }
                })?;
                let pristine = tempdir(cache)?;
                wheel::install_wheel_as(
                    &artifact.path,
                    scheme,
                    pristine.path(),
                    artifact.name.as_ref(),
                    &artifact.version.to_string(),
                )
                .map_err(|source| BuildError::Wheel { wheel: artifact.filename.clone(), source })?;
                let site_rel = scheme.purelib.trim_start_matches('/');
                let site = pristine.path().join(site_rel);
                let report = patch::apply(&p.name, &patch_spec(&p.change)?, &site)?;
                tracing::info!(
                    "patch {}: {} change(s) in {}",
                    p.name,
                    report.changes,
                    report.files.join(", ")
                );
                for file in &report.files {
                    let from = site.join(file);
                    let to = stage.path().join(site_rel).join(file);
                    if let Some(parent) = to.parent() {
                        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
                    }
                    if from.exists() {
                        std::fs::copy(&from, &to).map_err(io("copying", &from))?;
                    }
                }
            }
            // The patched modules' own bytecode, over the earlier layer's stale one.
            added = bytecode.compile(stage.path(), scheme, epoch, &key)?;
            writer.add_dir(stage.path(), "")?;
        }
        let blob = writer.finish(compression)?;
        cache.put_layer(&key, &blob)?;
        push("config", "stackbuild: patches and configuration".into(), blob, true);
        note_bytecode(&key, added);
    }

    // The image.
    let mut config = base_config;
    if config.env.is_empty() {
        config.env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    let mut env: Vec<(String, String)> = config
        .env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut set = |k: &str, v: &str| {
        if let Some(e) = env.iter_mut().find(|(key, _)| key == k) {
            e.1 = v.to_owned();
        } else {
            env.push((k.to_owned(), v.to_owned()));
        }
    };
    if !requirements.is_empty() {
        set("NVIDIA_VISIBLE_DEVICES", "all");
        set("NVIDIA_DRIVER_CAPABILITIES", "compute,utility");
    }
    for r in &requirements {
        set(&r.variable, &r.expr);
    }
    for (k, v) in &recipe.image.env {
        set(k, v);
    }
    config.env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    if let Some(e) = &recipe.image.entrypoint {
        config.entrypoint = Some(e.clone());
    }
    if let Some(c) = &recipe.image.cmd {
        config.cmd = Some(c.clone());
    }
    if let Some(w) = &recipe.image.workdir {
        config.working_dir = Some(w.clone());
    }
    if let Some(u) = &recipe.image.user {
        config.user = Some(u.clone());
    }
    config.labels.extend(recipe.image.labels.clone());
    config.labels.insert(format!("{LABEL_PREFIX}recipe"), recipe.image.name.clone());
    config.labels.insert(format!("{LABEL_PREFIX}stack"), format!("/{STACK_JSON_PATH}"));
    if let Some(py) = python {
        config.labels.insert(format!("{LABEL_PREFIX}python"), py.version.to_string());
    }
    for r in &requirements {
        config
            .labels
            .insert(format!("{LABEL_PREFIX}require.{}", r.variable.to_ascii_lowercase()), r.expr.clone());
    }
    let created = oci::rfc3339(epoch);
    let layers = layers.into_inner();
    let history = layers
        .iter()
        .map(|(_, _, by)| History {
            created: Some(created.clone()),
            created_by: Some(by.clone()),
            ..History::default()
        })
        .collect();
    let image_config = ImageConfig {
        created: Some(created.clone()),
        architecture: platform.architecture().to_owned(),
        os: platform.os().to_owned(),
        variant: None,
        os_version: base_image.os_version,
        os_features: base_image.os_features,
        author: base_image.author,
        config,
        rootfs: oci::RootFs::default(),
        history,
    };
    let annotations = BTreeMap::from([
        ("org.opencontainers.image.created".to_owned(), created),
        ("org.opencontainers.image.title".to_owned(), recipe.image.name.clone()),
        ("org.opencontainers.image.version".to_owned(), recipe.image.tag.clone()),
    ]);
    let (reports, blobs): (Vec<LayerReport>, Vec<LayerBlob>) =
        layers.into_iter().map(|(r, b, _)| (r, b)).unzip();
    let image = Image::new(image_config, blobs, annotations)?;
    Ok(PlatformBuild { platform, image, layers: reports, stack, sbom })
}

/// The SBOM of one platform's image: the layers built so far by digest, then the configuration
/// layer that will hold it; each component placed in the layer that holds it.
fn platform_sbom(
    stack: &StackManifest,
    layers: &[(LayerReport, LayerBlob, String)],
    platform: Platform,
    epoch: u64,
) -> sbom::Sbom {
    let mut list: Vec<sbom::SbomLayer> = layers
        .iter()
        .map(|(r, _, _)| sbom::SbomLayer { name: r.name.clone(), digest: Some(r.digest.clone()) })
        .collect();
    let config = list.len();
    list.push(sbom::SbomLayer { name: "config".into(), digest: None });
    let find = |name: &str| list.iter().position(|l| l.name == name).unwrap_or(config);
    let placement: Vec<usize> = stack
        .components
        .iter()
        .map(|c| match c.kind.as_str() {
            "base" | "deb" => find("base"),
            "wheel" => find(Group::of(&c.name).name()),
            "source" => find("sources"),
            "patch" if c.source.starts_with("source ") => find("sources"),
            _ => config,
        })
        .collect();
    sbom::Sbom::new(&sbom::SbomInput {
        stack,
        layers: &list,
        placement: &placement,
        deb_arch: debian_arch(platform),
        epoch,
    })
}

fn registry_client(opts: &BuildOptions) -> crate::registry::Client {
    crate::registry::Client::new(opts.insecure_registries.iter().cloned())
}

/// Pulls a `registry = "REF"` base into the cache (every blob verified by digest) and returns
/// the layout it landed in.
fn pull_base(
    reference: &str,
    platform: Platform,
    cache: &Cache,
    opts: &BuildOptions,
) -> Result<PathBuf, BuildError> {
    let src = crate::registry::Reference::parse(reference)?;
    let dir = cache.root().join("pulls").join(hex::encode(Sha256::digest(reference.as_bytes())));
    let pulled = crate::registry::pull_with(
        &registry_client(opts),
        &src,
        &dir,
        &crate::registry::PullOptions {
            platform: oci::Platform {
                architecture: platform.architecture().to_owned(),
                os: platform.os().to_owned(),
                variant: None,
            },
            layout_tag: Some("base"),
        },
    )?;
    tracing::info!(
        "base {reference}: pulled {} ({} blob(s) downloaded)",
        pulled.pinned,
        pulled.blobs_downloaded
    );
    Ok(dir)
}

/// The audit of an image, reused from the cache when the same manifest was audited before (a
/// no-change rebuild must not re-read gigabytes of layers).
fn audit_cached(cache: &Cache, image: &Image) -> Result<crate::audit::AuditReport, BuildError> {
    let digest = image.manifest_digest()?;
    let name = format!("v{}-{}.json", crate::audit::POLICY_VERSION, digest.trim_start_matches("sha256:"));
    let path = cache.root().join("audits").join(name);
    if let Some(report) = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
        return Ok(report);
    }
    let layers = cache.root().join("audits").join("layers");
    let report = crate::audit::audit_image_cached(image, &layers)?;
    if let Ok(json) = serde_json::to_vec(&report) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        }
        crate::cache::write_atomic(&path, &json).map_err(io("writing", &path))?;
    }
    Ok(report)
}

/// Looks `key` up in the cache. The cache trusts a blob of the right size, so a hit whose bytes
/// are about to go somewhere new (the layout at `out` lacks the blob, or an archive or `--load`
/// reads it) is hashed again first; a corrupted one is removed and counts as a miss, so the
/// layer is built again instead of shipped. A no-change rebuild into the same layout hashes
/// nothing, which keeps it within the 0.1 s no-change target (README, "Benchmarks") where hashing a
/// multi-GB stack would take seconds.
fn reuse(cache: &Cache, key: &LayerKey, out: &Path, opts: &BuildOptions) -> Option<LayerBlob> {
    let blob = cache.get_layer(key)?;
    if !must_verify(&blob, out, opts) {
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
    let Ok(hex) = crate::cache::sha256_hex(&blob.digest) else { return true };
    let placed = out.join("blobs").join("sha256").join(hex);
    !std::fs::symlink_metadata(placed).is_ok_and(|m| m.is_file() && m.len() == blob.size)
}

fn tempdir(cache: &Cache) -> Result<tempfile::TempDir, BuildError> {
    let dir = cache.root().join("tmp");
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    tempfile::Builder::new().prefix("stage-").tempdir_in(&dir).map_err(io("creating a stage in", &dir))
}

fn patch_spec(change: &PatchChange) -> Result<PatchSpec, BuildError> {
    Ok(match change {
        PatchChange::Replace { file, find, replace, count } => PatchSpec::FindReplace {
            file: file.to_string_lossy().into_owned(),
            find: find.clone(),
            replace: replace.clone(),
            count: *count as usize,
        },
        PatchChange::Diff { path } => PatchSpec::Diff {
            diff_text: crate::input::read_text(path, crate::input::MAX_TEXT, "patch")?,
            diff_path: path.clone(),
        },
    })
}

/// A digest of what a patch does, for cache keys and the stack description.
fn patch_identity(change: &PatchChange) -> Result<String, BuildError> {
    let mut h = Sha256::new();
    match change {
        PatchChange::Replace { file, find, replace, count } => {
            for part in
                [file.to_string_lossy().as_bytes(), find.as_bytes(), replace.as_bytes(), &count.to_le_bytes()]
            {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
        }
        PatchChange::Diff { path } => {
            h.update(crate::input::read_capped(path, crate::input::MAX_TEXT, "patch")?);
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// Fetches the wheels of some locked packages, by normalized name.
type FetchWheels<'a> = dyn Fn(&Cache, &[&Wheel]) -> Result<BTreeMap<String, Artifact>, BuildError> + 'a;

/// Refuses a lock that installs packages the recipe never asks for: every locked wheel must be
/// a requirement or a `[[python.wheel]]` of the recipe, or be reachable from one through the
/// wheels' `Requires-Dist`. The answer depends only on the recipe's requirements and the locked
/// files, so it is remembered in the cache and the wheels are read once per lock.
#[allow(clippy::result_large_err)] // BuildError, as every step of a build returns
fn check_lock_graph(
    recipe: &Recipe,
    py: &crate::recipe::PythonSection,
    lock: &Lock,
    platform: Platform,
    wheels: &[Wheel],
    cache: &Cache,
    fetch: &FetchWheels<'_>,
) -> Result<(), BuildError> {
    let mut roots: Vec<String> = py.packages.iter().map(|r| r.name.to_string()).collect();
    roots.extend(py.wheels.iter().filter(|w| w.fits(platform)).map(|w| w.name.to_string()));
    roots.sort();
    let mut key = LayerKey::builder("lock-graph/v1").str(platform.as_str());
    for r in &roots {
        key = key.str(r);
    }
    for w in wheels {
        key = key.str(&w.filename).str(&w.sha256);
    }
    let marker = cache.root().join("facts").join(format!("lock-graph-{}", key.finish().as_hex()));
    if marker.is_file() {
        return Ok(());
    }
    // Each wheel's `Requires-Dist` names are kept by its sha256, so a changed pin reads (and
    // fetches) only its own wheel, not torch's 2 GB one again.
    let record = |w: &Wheel| cache.root().join("facts").join(format!("requires-{}.json", w.sha256));
    let mut requires = BTreeMap::new();
    let mut unread: Vec<&Wheel> = Vec::new();
    for w in wheels {
        let known: Option<Vec<String>> =
            std::fs::read(record(w)).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
        match known {
            Some(names) => {
                requires.insert(wheel::normalize_name(w.pin.name.as_ref()), names);
            }
            None => unread.push(w),
        }
    }
    if !unread.is_empty() {
        let artifacts = fetch(cache, &unread)?;
        let _ = std::fs::create_dir_all(cache.root().join("facts"));
        for w in unread {
            let Some(artifact) = artifacts.get(w.pin.name.as_ref()) else { continue };
            let id = wheel::wheel_identity(&artifact.path)
                .map_err(|source| BuildError::Wheel { wheel: artifact.filename.clone(), source })?;
            if let Ok(json) = serde_json::to_vec(&id.requires) {
                // A lost record is read again next time: nothing depends on it being written.
                let _ = crate::cache::write_atomic(&record(w), &json);
            }
            requires.insert(wheel::normalize_name(w.pin.name.as_ref()), id.requires);
        }
    }
    let extra: Vec<String> = lock
        .unrequested(platform, &roots, &requires)
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    if !extra.is_empty() {
        return Err(BuildError::Lock(crate::lock::LockError::Invalid {
            path: Lock::path_for(&recipe.path),
            why: format!(
                "it installs {} for {platform}, which nothing in the recipe asks for (neither a \
                 [python] requirement or wheel nor a dependency of one); delete the lock and run \
                 `stackbuild lock` again",
                extra.join(", ")
            ),
        }));
    }
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    }
    crate::cache::write_atomic(&marker, b"checked\n").map_err(io("writing", &marker))
}

fn debian_arch(platform: Platform) -> &'static str {
    match platform {
        Platform::LinuxAmd64 => "amd64",
        Platform::LinuxArm64 => "arm64",
    }
}
