//! The content-addressed cache of downloaded artifacts and built layer blobs.
//!
//! Layout of the cache directory:
//!
//! - `blobs/sha256/<hex>`: content-addressed files (artifacts and compressed layer blobs).
//! - `keys/<hex>.json`: a layer's input key ([`LayerKey`]) -> the [`LayerBlob`] built from those
//!   inputs, so that an unchanged layer is neither rebuilt nor recompressed.
//! - `tmp/`: files being written. Every file is written there, `fsync`ed and then renamed into
//!   place, so only complete files are ever visible under `blobs/` and `keys/`: a build killed
//!   with `SIGKILL` at any point leaves at worst a stale temporary file, which a later
//!   [`Cache::open`] removes.
//! - `lock`: the file behind [`Cache::lock`], held for a whole build.
//! - `CACHEDIR.TAG` and [`MARKER`]: what makes a directory a stackbuild cache (see below).
//!
//! The cache directory is the user's choice (`--cache-dir`, `STACKBUILD_CACHE`), so a build only
//! ever uses and cleans a directory that is provably a cache: one carrying [`MARKER`], which
//! [`Cache::open`] writes into a new or empty directory (with a `CACHEDIR.TAG` of the Cache
//! Directory Tagging Specification, <https://bford.info/cachedir/>, so that backup tools skip
//! it). A directory holding only what an older, unmarked version of the cache held is adopted
//! and marked; any other non-empty directory is refused (`--cache-dir /` must never empty
//! `/tmp`). Even inside a marked cache, cleaning removes only entries whose names the cache
//! itself gives its temporary files and scratch directories.
//!
//! A temporary file is `flock`ed by its writer for as long as it is written; since the kernel
//! drops that lock when the writer dies, a temporary file whose lock can be taken belongs to a
//! dead writer and may be removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use stackbuild_common::LayerBlob;
use stackbuild_common::{io_err, IoError};
use stackbuild_common::{sync_dir, unique_temp_name, write_atomic};

pub mod stamp;

/// Largest key file accepted by [`Cache::get_layer`]; real ones are a few hundred bytes.
const MAX_KEY_FILE: u64 = 64 * 1024;

/// Temporary files younger than this are never removed, even if unlocked: their writer may have
/// created the file and not yet taken its lock.
const STALE_AFTER: Duration = Duration::from_mins(1);

/// The file whose presence makes a directory a stackbuild cache.
pub(crate) const MARKER: &str = ".stackbuild-cache";

/// Its content (only its presence matters).
const MARKER_TEXT: &[u8] = b"stackbuild cache, format 1: managed by stackbuild; safe to delete as a whole\n";

/// `CACHEDIR.TAG` as the Cache Directory Tagging Specification words it: the signature line
/// first, then free comment lines.
const CACHEDIR_TAG: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by stackbuild.\n\
# For information about cache directory tags, see https://bford.info/cachedir/\n";

/// Entries of the root of a cache made by a version without [`MARKER`]: a directory holding
/// only these, at least one of them a directory of cached content ([`LEGACY_CONTENT`]), is
/// adopted. Names ending in `-` are prefixes of scratch directories.
const LEGACY_ENTRIES: &[&str] = &[
    "blobs",
    "keys",
    "tmp",
    "lock",
    "artifacts",
    "pulls",
    "audits",
    "facts",
    "git",
    "CACHEDIR.TAG",
    "mmdebstrap-",
    "import-",
];

/// The entries only a cache has (a seeded cache may hold just its downloaded `artifacts`).
const LEGACY_CONTENT: &[&str] = &["blobs", "keys", "artifacts"];

/// Errors of the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// An I/O operation on a cache path failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Content did not hash to the digest it was expected to have.
    #[error("sha256 mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// What was hashed (a path or a description of the stream).
        what: String,
        /// The expected digest, `sha256:<hex>`.
        expected: String,
        /// The digest of the content actually seen, `sha256:<hex>`.
        actual: String,
    },
    /// A string that should be a sha256 digest is not one.
    #[error("invalid sha256 digest {0:?}: expected `sha256:` followed by 64 lowercase hex digits")]
    InvalidDigest(String),
    /// The directory given as the cache is something else, left untouched.
    #[error(
        "{path} is not a stackbuild cache: {what}; give --cache-dir (or STACKBUILD_CACHE) a new or \
         empty directory, or one a build made (it carries {MARKER}); nothing was changed"
    )]
    NotACache {
        /// The directory given.
        path: PathBuf,
        /// What is there.
        what: String,
    },
    /// No cache directory could be derived from the environment.
    #[error("no cache directory: set STACKBUILD_CACHE, XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// A key file could not be serialized.
    #[error("serializing {path}: {source}")]
    Json {
        /// The key file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
}

/// Returns the 64 hex digits of a sha256 digest given as `sha256:<hex>` or bare `<hex>`.
///
/// Only lowercase hex is accepted, so that one digest has exactly one file name.
pub fn sha256_hex(digest: &str) -> Result<&str, CacheError> {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(hex)
    } else {
        Err(CacheError::InvalidDigest(digest.to_string()))
    }
}

/// The key of a cached thing (a layer, a base, a bytecode unit): a sha256 of one serialized
/// struct of every input that can change its bytes ([`LayerKey::of`]).
///
/// The struct is the key's definition: each cached thing declares its own, next to the code that
/// makes it, one field per input; adding a field changes every key, and no version string is
/// bumped by hand. The key must cover everything that changes the output, compression included
/// (the image crate's `Encoding`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayerKey(String);

/// What every key's hash starts with, so that no other sha256 of the cache's (a blob's digest, a
/// tree's) can be mistaken for a key.
const KEY_DOMAIN: &[u8] = b"stackbuild-key\0";

impl LayerKey {
    /// The key of a cached thing of `kind` (`python-layer`, `bytecode-unit`) made from `inputs`:
    /// the sha256 of `stackbuild-key\0`, `kind`, a NUL and the canonical JSON of `inputs`
    /// ([`stackbuild_common::to_vec`]: object keys sorted at every depth, compact), so the key
    /// depends on the inputs' values alone, not on the order their struct declares them in.
    /// `kind` keeps apart keys of different things whose inputs happen to serialize alike.
    ///
    /// Any `Serialize` value works, a `serde_json::Value` of the same inputs included (which
    /// gives the same key: the tests mutate one and compare).
    ///
    /// # Panics
    ///
    /// When `inputs` cannot be written as JSON (a map with non-string keys): key structs are
    /// plain data, so that is a bug of the struct, found by its test.
    pub fn of<T: serde::Serialize + ?Sized>(kind: &str, inputs: &T) -> Self {
        let json = stackbuild_common::to_vec(inputs).expect("a key's inputs serialize as JSON");
        let mut hasher = Sha256::new();
        hasher.update(KEY_DOMAIN);
        hasher.update(kind.as_bytes());
        hasher.update([0]);
        hasher.update(&json);
        Self(hex::encode(hasher.finalize()))
    }

    /// Parses a key previously obtained from [`LayerKey::as_hex`].
    pub fn from_hex(hex: &str) -> Result<Self, CacheError> {
        sha256_hex(hex).map(|h| Self(h.to_string()))
    }

    /// The key as 64 lowercase hex digits.
    pub fn as_hex(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LayerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A store of layers behind this cache (`--cache-registry`: a registry repository, in
/// `registry::remote_cache`). Declared here and implemented there, so that the cache does not
/// depend on the registry client that depends on it.
pub trait RemoteLayers: std::fmt::Debug + Send + Sync {
    /// The layer built from `key`, put into `cache` (verified) when the remote has it; `None`
    /// on a miss or any failure (the caller builds the layer).
    fn fetch(&self, cache: &Cache, key: &LayerKey) -> Option<LayerBlob>;
    /// Gives the remote the layer `blob` built from `key`; a failure is a warning.
    fn store(&self, cache: &Cache, key: &LayerKey, blob: &LayerBlob);
    /// Whether the layer blob `digest` came from the remote in this process.
    fn pulled(&self, digest: &str) -> bool;
}

/// The cache directory. Cheap to clone: it is a path, and the shared registry cache if any.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
    /// `--cache-registry`: consulted when a layer is not here, and given every layer put here.
    remote: Option<std::sync::Arc<dyn RemoteLayers>>,
}

/// An exclusive lock on a cache, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct CacheLock {
    _file: File,
}

/// A file being written under `tmp/`, locked by this process, removed on drop unless committed.
#[derive(Debug)]
pub struct TempFile {
    pub file: File,
    path: PathBuf,
    committed: bool,
}

impl TempFile {
    /// The path of the temporary file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: a leftover is removed by the next `Cache::open` anyway.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Whether `entry` was last modified more than `age` ago (false when its time is unreadable).
pub fn modified_before(entry: &fs::DirEntry, age: std::time::Duration) -> bool {
    entry
        .metadata()
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|a| a > age)
}

/// What a directory given as the cache is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CacheDir {
    /// Nothing there yet.
    Missing,
    /// A cache: it carries [`MARKER`].
    Marked,
    /// Empty, or holding only what an older, unmarked cache held.
    Adoptable {
        /// Nothing in it.
        empty: bool,
    },
    /// Anything else, in words.
    Foreign(String),
}

/// Looks at `dir` without changing anything. A symlink is followed: a link to a cache is one.
fn inspect_dir(dir: &Path) -> Result<CacheDir, CacheError> {
    let meta = match fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(if fs::symlink_metadata(dir).is_ok() {
                CacheDir::Foreign("a symlink to a missing target".into())
            } else {
                CacheDir::Missing
            });
        }
        Err(e) => return Err(io_err("reading", dir)(e).into()),
    };
    if !meta.is_dir() {
        return Ok(CacheDir::Foreign(stackbuild_common::kind_of(meta.file_type()).to_owned()));
    }
    if fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|m| m.is_file()) {
        return Ok(CacheDir::Marked);
    }
    let mut names: Vec<String> = fs::read_dir(dir)
        .map_err(io_err("listing", dir))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io_err("listing", dir))?;
    names.sort();
    let legacy = |name: &String| {
        LEGACY_ENTRIES.iter().any(|e| if e.ends_with('-') { name.starts_with(e) } else { name == e })
    };
    let is_dir = |name: &str| fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_dir());
    if names.is_empty() {
        Ok(CacheDir::Adoptable { empty: true })
    } else if names.iter().all(legacy) && LEGACY_CONTENT.iter().any(|n| is_dir(n)) {
        Ok(CacheDir::Adoptable { empty: false })
    } else {
        Ok(CacheDir::Foreign(format!(
            "a directory without {MARKER} that holds {}",
            stackbuild_common::list_names(&names)
        )))
    }
}

/// Marks `root` as a cache: [`MARKER`] first (its presence is what counts, so a build killed
/// after it left a cache), then `CACHEDIR.TAG`.
fn mark(root: &Path) -> Result<(), CacheError> {
    let marker = root.join(MARKER);
    fs::write(&marker, MARKER_TEXT).map_err(io_err("writing", &marker))?;
    let tag = root.join("CACHEDIR.TAG");
    if fs::symlink_metadata(&tag).is_err() {
        write_new(&tag, CACHEDIR_TAG)?;
    }
    Ok(())
}

/// Creates `path` with `bytes`; a file already there (another build's) is left as it is.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(mut file) => Ok(file.write_all(bytes).map_err(io_err("writing", path))?),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("creating", path)(e).into()),
    }
}

/// Whether `name` is one [`unique_temp_name`] gave with `prefix`: `<prefix>PID-NANOS-N.tmp`.
pub fn is_temp_name(name: &str, prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_suffix(".tmp")) else { return false };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` is one `tempfile::Builder::prefix(prefix)` gave: the prefix and six random
/// letters or digits.
fn is_tempdir_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|r| r.len() == 6 && r.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// Whether `path` is a real directory (not a symlink to one): cleaning never follows a link out
/// of the cache.
fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Root's default cache. Not `/root/.cache`: root's home is mode 0700 (Debian's `adduser`
/// and base-passwd make it so), and a package's build runs as `nobody`, who could then not reach
/// the build root in the cache; `/var/cache` is where the FHS puts an application's cached data
/// (FHS 3.0, 5.5).
pub const ROOT_CACHE: &str = "/var/cache/stackbuild";

impl Cache {
    /// The default cache directory: `$STACKBUILD_CACHE`, else `$XDG_CACHE_HOME/stackbuild`, else
    /// for root [`ROOT_CACHE`], else `~/.cache/stackbuild`. Empty variables count as unset.
    pub fn default_dir() -> Result<PathBuf, CacheError> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        if let Some(dir) = var("STACKBUILD_CACHE") {
            return Ok(dir);
        }
        if let Some(dir) = var("XDG_CACHE_HOME") {
            return Ok(dir.join("stackbuild"));
        }
        if rustix::process::geteuid().is_root() {
            return Ok(PathBuf::from(ROOT_CACHE));
        }
        var("HOME").map(|home| home.join(".cache").join("stackbuild")).ok_or(CacheError::NoCacheDir)
    }

    /// Opens (creating if needed) the cache at [`Cache::default_dir`].
    pub fn open_default() -> Result<Self, CacheError> {
        Self::open(Self::default_dir()?)
    }

    /// Opens the cache at `dir` and removes temporary files left by dead writers.
    ///
    /// `dir` is made absolute first (git runs in a directory of its own, and a relative cache
    /// path would mean something else there). A missing or empty directory becomes a cache; an
    /// unmarked one laid out as an older version's cache is adopted; anything else is refused
    /// with [`CacheError::NotACache`] before anything in it is touched.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, CacheError> {
        let given = dir.into();
        let root = std::path::absolute(&given).map_err(io_err("resolving", &given))?;
        match inspect_dir(&root)? {
            CacheDir::Missing => {
                fs::create_dir_all(&root).map_err(io_err("creating", &given))?;
                mark(&root)?;
            }
            CacheDir::Marked => {
                if fs::symlink_metadata(root.join("CACHEDIR.TAG")).is_err() {
                    write_new(&root.join("CACHEDIR.TAG"), CACHEDIR_TAG)?;
                }
            }
            CacheDir::Adoptable { empty } => {
                if !empty {
                    tracing::info!("{}: a cache of an older stackbuild; marking it as one", given.display());
                }
                mark(&root)?;
            }
            CacheDir::Foreign(what) => return Err(CacheError::NotACache { path: given, what }),
        }
        let cache = Self { root, remote: None };
        for sub in [cache.blob_dir(), cache.root.join("keys"), cache.tmp_dir()] {
            fs::create_dir_all(&sub).map_err(io_err("creating", &sub))?;
        }
        cache.clean_temps()?;
        Ok(cache)
    }

    /// Whether `dir` may be read as a cache: it carries [`MARKER`], or is laid out as an older
    /// cache (or empty). For readers that must not create or claim anything (`stackbuild check`).
    pub fn is_cache(dir: &Path) -> bool {
        matches!(inspect_dir(dir), Ok(CacheDir::Marked | CacheDir::Adoptable { .. }))
    }

    /// This cache backed by a registry (`--cache-registry`): a layer missing here is looked up
    /// there (and pulled, verified), and every layer put here is pushed there too.
    #[must_use]
    pub fn with_remote(mut self, remote: impl RemoteLayers + 'static) -> Self {
        self.remote = Some(std::sync::Arc::new(remote));
        self
    }

    /// The registry behind this cache, if any.
    pub fn remote(&self) -> Option<&dyn RemoteLayers> {
        self.remote.as_deref()
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn blob_dir(&self) -> PathBuf {
        self.root.join("blobs").join("sha256")
    }

    fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    fn key_path(&self, key: &LayerKey) -> PathBuf {
        self.root.join("keys").join(format!("{}.json", key.as_hex()))
    }

    /// Takes the cache's exclusive lock, waiting for another build to release it.
    ///
    /// Hold the returned guard for the whole build: builds sharing a cache then run one after
    /// the other. The kernel releases the lock if the process dies.
    pub fn lock(&self) -> Result<CacheLock, CacheError> {
        let path = self.root.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("opening", &path))?;
        if file.try_lock().is_err() {
            tracing::info!("waiting for another build to release {}", path.display());
            file.lock().map_err(io_err("locking", &path))?;
        }
        Ok(CacheLock { _file: file })
    }

    /// Takes the cache's lock only if no build holds it (released when the guard drops).
    fn try_lock(&self) -> Option<CacheLock> {
        let path = self.root.join("lock");
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(path).ok()?;
        file.try_lock().ok()?;
        Some(CacheLock { _file: file })
    }

    /// Removes temporary files whose writer is gone; returns how many were removed.
    ///
    /// Only names the cache gives its own temporary files and scratch directories are removed,
    /// and only in real directories of the cache (a `tmp` that is a symlink is not followed).
    /// Scratch directories (build stages under `tmp/`, `mmdebstrap-*` rootfs tars and `import-*`
    /// archives, downloads in `artifacts/.fetch-*` and `.import-*`) carry no lock of their own: a
    /// stale one is removed only while no build holds the cache, since a live build may read a
    /// stage for longer than [`STALE_AFTER`] without touching it.
    pub fn clean_temps(&self) -> Result<usize, CacheError> {
        let mut removed = 0;
        let idle = self.try_lock();
        let stale = |path: &Path| {
            fs::symlink_metadata(path)
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age > STALE_AFTER)
        };
        if idle.is_some() {
            let artifacts = self.root.join("artifacts");
            let build_roots = self.root.join("build-roots");
            let scratch: [(&Path, &[&str]); 4] = [
                (&self.root, &["mmdebstrap-", "import-"]),
                (&artifacts, &[".fetch-", ".import-"]),
                (&self.tmp_dir(), &["stage-", "wheelbuild-"]),
                // A build root being made (`.making-`; `.unpack-` before 2026-12-07).
                (&build_roots, &[".making-", ".unpack-"]),
            ];
            for (parent, prefixes) in scratch {
                if !is_real_dir(parent) {
                    continue;
                }
                let Ok(entries) = fs::read_dir(parent) else { continue };
                for entry in entries.flatten() {
                    let path = entry.path();
                    let name = entry.file_name();
                    let name = name.to_string_lossy();
                    let ours = prefixes.iter().any(|p| is_tempdir_name(&name, p));
                    if ours && entry.file_type().is_ok_and(|t| t.is_dir()) && stale(&path) {
                        removed += usize::from(fs::remove_dir_all(&path).is_ok());
                    }
                }
            }
        }
        // Key records are written next to their final name (see `write_atomic`); a leftover of a
        // killed writer is only garbage, never read, and removed once old.
        let keys = self.root.join("keys");
        if is_real_dir(&keys) {
            for entry in fs::read_dir(&keys).map_err(io_err("listing", &keys))?.flatten() {
                let ours = is_temp_name(&entry.file_name().to_string_lossy(), ".stackbuild-tmp-");
                if ours && stale(&entry.path()) && fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        let dir = self.tmp_dir();
        if !is_real_dir(&dir) {
            return Ok(removed);
        }
        for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
            let entry = entry.map_err(io_err("listing", &dir))?;
            let path = entry.path();
            let ours = is_temp_name(&entry.file_name().to_string_lossy(), "");
            let Ok(meta) = fs::symlink_metadata(&path) else { continue };
            if !ours || !meta.is_file() || !stale(&path) {
                continue;
            }
            let Ok(file) = OpenOptions::new().read(true).open(&path) else { continue };
            // A live writer holds the lock; `try_lock` fails then and the file is kept.
            if file.try_lock().is_ok() && fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Creates a locked temporary file under `tmp/`.
    pub fn temp_file(&self) -> Result<TempFile, CacheError> {
        let path = self.tmp_dir().join(unique_temp_name(""));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(io_err("creating", &path))?;
        file.try_lock().map_err(|e| io_err("locking", &path)(e.into()))?;
        Ok(TempFile { file, path, committed: false })
    }

    /// `fsync`s a finished temporary file and renames it to `blobs/sha256/<hex>`.
    pub fn commit_blob(&self, mut tmp: TempFile, hex: &str) -> Result<PathBuf, CacheError> {
        let dest = self.blob_dir().join(hex);
        tmp.file.flush().map_err(io_err("writing", &tmp.path))?;
        tmp.file.sync_all().map_err(io_err("syncing", &tmp.path))?;
        // Every caller hashed the bytes as it wrote them.
        stamp::record_new(&tmp.file, hex);
        fs::rename(&tmp.path, &dest).map_err(io_err("renaming into", &dest))?;
        tmp.committed = true;
        let dir = self.blob_dir();
        sync_dir(&dir).map_err(io_err("syncing", &dir))?;
        Ok(dest)
    }

    /// The path a blob has (or would have) in the cache.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, CacheError> {
        Ok(self.blob_dir().join(sha256_hex(digest)?))
    }

    /// Whether a blob with this digest is present (by name; see [`Cache::verify_blob`]).
    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
    }

    /// Looks up the layer built from `key`, here and then in the registry behind the cache (see
    /// [`Cache::with_remote`]).
    ///
    /// A key whose record is unreadable, or whose blob is missing or has the wrong size, is a
    /// miss: the caller rebuilds the layer and [`Cache::put_layer`] overwrites the record.
    pub fn get_layer(&self, key: &LayerKey) -> Option<LayerBlob> {
        self.get_local_layer(key).or_else(|| self.remote.as_ref()?.fetch(self, key))
    }

    /// [`Cache::get_layer`] in this directory only.
    pub fn get_local_layer(&self, key: &LayerKey) -> Option<LayerBlob> {
        let path = self.key_path(key);
        let mut text = String::new();
        let file = File::open(&path).ok()?;
        if let Err(e) = file.take(MAX_KEY_FILE).read_to_string(&mut text) {
            tracing::warn!("ignoring unreadable cache key {}: {e}", path.display());
            return None;
        }
        let mut blob: LayerBlob = match serde_json::from_str(&text) {
            Ok(blob) => blob,
            Err(e) => {
                tracing::warn!("ignoring corrupt cache key {}: {e}", path.display());
                return None;
            }
        };
        let blob_path = self.blob_path(&blob.digest).ok()?;
        match fs::symlink_metadata(&blob_path) {
            Ok(meta) if meta.is_file() && meta.len() == blob.size => {
                blob.path = blob_path;
                Some(blob)
            }
            Ok(_) => {
                tracing::warn!("cache blob {} has the wrong size; rebuilding", blob_path.display());
                None
            }
            Err(_) => None,
        }
    }

    /// Like [`Cache::get_layer`], and re-hashes the blob too (a mismatch is a miss).
    pub fn get_layer_verified(&self, key: &LayerKey) -> Option<LayerBlob> {
        let blob = self.get_layer(key)?;
        match self.verify_blob(&blob.digest) {
            Ok(()) => Some(blob),
            Err(e) => {
                tracing::warn!("{e}; rebuilding");
                None
            }
        }
    }

    /// Records that `key` built `blob` (whose blob must already be in the cache), and pushes
    /// it to the registry behind the cache, if any (a failed push is a warning). The records
    /// kept beside the layer under the same key (a base's facts, a layer's bytecode) must be
    /// written before, to travel with it.
    pub fn put_layer(&self, key: &LayerKey, blob: &LayerBlob) -> Result<(), CacheError> {
        self.put_local_layer(key, blob)?;
        if let Some(remote) = &self.remote {
            remote.store(self, key, blob);
        }
        Ok(())
    }

    /// [`Cache::put_layer`] in this directory only.
    pub fn put_local_layer(&self, key: &LayerKey, blob: &LayerBlob) -> Result<(), CacheError> {
        let path = self.key_path(key);
        let json =
            serde_json::to_vec(blob).map_err(|source| CacheError::Json { path: path.clone(), source })?;
        Ok(write_atomic(&path, &json).map_err(io_err("writing", &path))?)
    }

    /// Streams `reader` into the cache, verifying its sha256 on the way; returns the blob's path.
    ///
    /// `expected_sha256` is `sha256:<hex>` or `<hex>`. On a mismatch nothing is stored and the
    /// error names both digests.
    pub fn put_artifact(&self, mut reader: impl Read, expected_sha256: &str) -> Result<PathBuf, CacheError> {
        let expected_hex = sha256_hex(expected_sha256)?.to_string();
        let mut tmp = self.temp_file()?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    // The stream failed, not the temporary file: name where it was going.
                    let path = self.blob_dir().join(&expected_hex);
                    return Err(IoError { op: "reading the artifact for", path, source }.into());
                }
            };
            hasher.update(&buf[..n]);
            tmp.file.write_all(&buf[..n]).map_err(io_err("writing", &tmp.path))?;
        }
        let actual_hex = hex::encode(hasher.finalize());
        if actual_hex != expected_hex {
            return Err(CacheError::DigestMismatch {
                what: "downloaded artifact".to_string(),
                expected: format!("sha256:{expected_hex}"),
                actual: format!("sha256:{actual_hex}"),
            });
        }
        self.commit_blob(tmp, &actual_hex)
    }

    /// Re-hashes a cached blob, unless it carries a record that it was hashed and has not
    /// changed since ([`stamp`]); an error names the expected and actual digests.
    pub fn verify_blob(&self, digest: &str) -> Result<(), CacheError> {
        let hex = sha256_hex(digest)?;
        let path = self.blob_dir().join(hex);
        let file = File::open(&path).map_err(io_err("opening", &path))?;
        if stamp::holds(&file, hex) {
            return Ok(());
        }
        let before = stamp::Identity::of(&file);
        let (actual, _) =
            stackbuild_common::sha256_reader(BufReader::new(&file)).map_err(io_err("reading", &path))?;
        if actual.strip_prefix("sha256:") == Some(hex) {
            if let Some(before) = before {
                stamp::record_verified(&file, before, hex);
            }
            Ok(())
        } else {
            Err(CacheError::DigestMismatch {
                what: path.display().to_string(),
                expected: format!("sha256:{hex}"),
                actual,
            })
        }
    }

    /// Removes a blob (for example one that failed [`Cache::verify_blob`]).
    pub fn remove_blob(&self, digest: &str) -> Result<(), CacheError> {
        let path = self.blob_path(digest)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("removing", &path)(e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    const HELLO_SHA: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    fn blob(cache: &Cache, bytes: &[u8]) -> LayerBlob {
        let (digest, size) = stackbuild_common::sha256_reader(bytes).unwrap();
        let path = cache.put_artifact(bytes, &digest).unwrap();
        LayerBlob {
            digest: digest.clone(),
            diff_id: digest,
            size,
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            annotations: std::collections::BTreeMap::new(),
            path,
        }
    }

    #[test]
    fn digest_syntax() {
        assert_eq!(sha256_hex(&format!("sha256:{HELLO_SHA}")).unwrap(), HELLO_SHA);
        assert_eq!(sha256_hex(HELLO_SHA).unwrap(), HELLO_SHA);
        for bad in ["", "sha256:", "sha256:../../etc/passwd", &HELLO_SHA.to_uppercase(), &HELLO_SHA[1..]] {
            assert!(matches!(sha256_hex(bad), Err(CacheError::InvalidDigest(_))), "{bad}");
        }
    }

    #[test]
    fn put_artifact_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let path = cache.put_artifact(&b"hello"[..], HELLO_SHA).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert!(cache.has_blob(&format!("sha256:{HELLO_SHA}")));
        cache.verify_blob(HELLO_SHA).unwrap();

        let wrong = "0".repeat(64);
        let err = cache.put_artifact(&b"hellO"[..], &wrong).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&format!("expected sha256:{wrong}")), "{text}");
        assert!(text.contains("got sha256:"), "{text}");
        assert!(!cache.has_blob(&wrong));
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0, "temp file left behind");
    }

    #[test]
    fn corrupted_blob_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let layer = blob(&cache, b"layer bytes");
        let key = LayerKey::of("test", "a");
        cache.put_layer(&key, &layer).unwrap();
        assert!(cache.get_layer_verified(&key).is_some());

        // Same size, different content: only re-hashing notices.
        fs::write(&layer.path, b"LAYER bytes").unwrap();
        assert!(cache.get_layer(&key).is_some());
        assert!(cache.get_layer_verified(&key).is_none());
        let err = cache.verify_blob(&layer.digest).unwrap_err();
        assert!(matches!(err, CacheError::DigestMismatch { ref expected, .. } if *expected == layer.digest));

        // Different size: a plain lookup is a miss already.
        fs::write(&layer.path, b"short").unwrap();
        assert!(cache.get_layer(&key).is_none());
    }

    #[test]
    fn layer_hit_and_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let key = LayerKey::of("apt", &["curl=8.0", "sha256:aa"]);
        let other = LayerKey::of("apt", &["curl=8.1", "sha256:aa"]);
        assert!(cache.get_layer(&key).is_none());
        let layer = blob(&cache, b"some layer");
        cache.put_layer(&key, &layer).unwrap();
        let hit = cache.get_layer(&key).unwrap();
        assert_eq!(hit, layer);
        assert!(cache.get_layer(&other).is_none());
        // A reopened cache sees the same record.
        assert_eq!(Cache::open(dir.path()).unwrap().get_layer(&key).unwrap(), layer);
        // A missing blob is a miss.
        cache.remove_blob(&layer.digest).unwrap();
        assert!(cache.get_layer(&key).is_none());
        // A corrupt record is a miss.
        fs::write(dir.path().join("keys").join(format!("{key}.json")), b"{not json").unwrap();
        assert!(cache.get_layer(&key).is_none());
    }

    #[test]
    fn keys_are_unambiguous() {
        #[derive(serde::Serialize)]
        struct Inputs<'a> {
            name: &'a str,
            parts: Vec<&'a str>,
            epoch: u64,
        }
        let k = |parts: &[&str]| LayerKey::of("k", &Inputs { name: "n", parts: parts.to_vec(), epoch: 0 });
        assert_eq!(k(&["a", "b"]), k(&["a", "b"]));
        assert_ne!(k(&["ab"]), k(&["a", "b"]));
        assert_ne!(k(&["a", "b"]), k(&["b", "a"]));
        assert_ne!(LayerKey::of("x", "a"), LayerKey::of("x", &["a"]));
        assert_ne!(LayerKey::of("x", &()), LayerKey::of("y", &()));
        // The kind ends before the inputs begin.
        assert_ne!(LayerKey::of("ab", "c"), LayerKey::of("a", "bc"));
        // A struct and its `Value` are one key, whatever order the struct declares its fields in.
        let inputs = Inputs { name: "n", parts: vec!["a"], epoch: 7 };
        let value = serde_json::to_value(&inputs).unwrap();
        assert_eq!(LayerKey::of("k", &inputs), LayerKey::of("k", &value));
        let reordered = serde_json::json!({ "epoch": 7, "parts": ["a"], "name": "n" });
        assert_eq!(LayerKey::of("k", &inputs), LayerKey::of("k", &reordered));
        let key = k(&["a"]);
        assert_eq!(LayerKey::from_hex(key.as_hex()).unwrap(), key);
    }

    /// The key's definition, pinned: the same inputs give this key in every build and on every
    /// machine (a change here invalidates every cache, so it must be deliberate).
    #[test]
    fn a_key_is_the_sha256_of_domain_kind_and_canonical_json() {
        let key = LayerKey::of("test", &serde_json::json!({ "b": [1, "x"], "a": null }));
        let mut h = Sha256::new();
        h.update(b"stackbuild-key\0test\0{\"a\":null,\"b\":[1,\"x\"]}");
        assert_eq!(key.as_hex(), hex::encode(h.finalize()));
    }

    #[test]
    fn the_field_check_finds_every_input() {
        #[derive(serde::Serialize)]
        struct Nested {
            level: i32,
            on: bool,
        }
        #[derive(serde::Serialize)]
        struct Inputs {
            name: String,
            tags: Vec<String>,
            empty: Vec<u8>,
            nested: Nested,
            maybe: Option<u64>,
            some: Option<Nested>,
        }
        let inputs = Inputs {
            name: "n".into(),
            tags: vec!["a".into(), "b".into()],
            empty: Vec::new(),
            nested: Nested { level: -3, on: false },
            maybe: None,
            some: Some(Nested { level: 1, on: true }),
        };
        let checked = crate::assert_every_input_changes_key(
            "test",
            &inputs,
            &["name", "tags", "empty", "nested", "maybe", "some"],
        );
        for path in
            ["name", "tags", "tags[0]", "tags[1]", "empty", "nested.level", "nested.on", "maybe", "some"]
        {
            assert!(checked.iter().any(|p| p == path), "{path} not mutated: {checked:?}");
        }
        // A wrong field list is caught.
        let missing = std::panic::catch_unwind(|| {
            crate::assert_every_input_changes_key(
                "test",
                &inputs,
                &["name", "tags", "empty", "nested", "maybe"],
            );
        });
        assert!(missing.is_err(), "a field missing from the list must fail the check");
    }

    #[test]
    fn stale_temps_are_cleaned_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let live = cache.temp_file().unwrap();
        let dead = dir.path().join("tmp").join("4242-000000001-0.tmp");
        fs::write(&dead, b"partial").unwrap();
        let old = SystemTime::now() - Duration::from_hours(1);
        for p in [live.path(), &dead] {
            File::options().write(true).open(p).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(cache.clean_temps().unwrap(), 1);
        assert!(!dead.exists());
        assert!(live.path().exists(), "a locked temp file belongs to a live writer");
        let live_path = live.path().to_path_buf();
        drop(live);
        assert!(!live_path.exists(), "an uncommitted temp file is removed on drop");
    }

    #[test]
    fn stale_scratch_dirs_are_removed_only_while_no_build_holds_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let old = SystemTime::now() - Duration::from_hours(1);
        let stage = dir.path().join("tmp/stage-killed");
        let fetch = dir.path().join("artifacts/.fetch-killed");
        let rootfs = dir.path().join("mmdebstrap-killed");
        let young = dir.path().join("tmp/stage-live01");
        for d in [&stage, &fetch, &rootfs, &young] {
            fs::create_dir_all(d.join("sub")).unwrap();
            fs::write(d.join("sub/f"), b"partial").unwrap();
        }
        let age = |d: &Path| File::open(d).unwrap().set_modified(old).unwrap();
        for d in [&stage, &fetch, &rootfs] {
            age(d);
        }
        // A build holds the cache: its stages may be old and still in use.
        let guard = cache.lock().unwrap();
        assert_eq!(cache.clean_temps().unwrap(), 0);
        assert!(stage.exists() && fetch.exists() && rootfs.exists());
        drop(guard);
        assert_eq!(cache.clean_temps().unwrap(), 3);
        assert!(!stage.exists() && !fetch.exists() && !rootfs.exists());
        assert!(young.exists(), "a young stage may belong to a build that has not locked yet");
    }

    #[test]
    fn a_directory_that_is_not_a_cache_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        // Stands in for `--cache-dir /`: a `tmp` full of other programs' old files.
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("tmp")).unwrap();
        fs::write(root.join("tmp/4242-000000001-0.tmp"), b"someone's").unwrap();
        fs::create_dir_all(root.join("tmp/stage-abcdef")).unwrap();
        fs::write(root.join("etc"), b"x").unwrap();
        let old = SystemTime::now() - Duration::from_hours(5);
        File::options()
            .write(true)
            .open(root.join("tmp/4242-000000001-0.tmp"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let err = Cache::open(&root).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, CacheError::NotACache { .. }), "{text}");
        assert!(text.contains("\"etc\"") && text.contains(MARKER), "{text}");
        assert!(root.join("tmp/4242-000000001-0.tmp").exists() && root.join("tmp/stage-abcdef").exists());
        assert!(
            !root.join(MARKER).exists()
                && !root.join("blobs").exists()
                && !root.join("CACHEDIR.TAG").exists()
        );

        // A regular file, a dangling symlink: refused, named.
        let file = dir.path().join("file");
        fs::write(&file, b"x").unwrap();
        assert!(Cache::open(&file).unwrap_err().to_string().contains("a regular file"));
        std::os::unix::fs::symlink(dir.path().join("nowhere"), dir.path().join("dangling")).unwrap();
        assert!(Cache::open(dir.path().join("dangling")).unwrap_err().to_string().contains("symlink"));
        assert!(!dir.path().join("nowhere").exists());
    }

    #[test]
    fn new_empty_and_older_caches_are_marked() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["new", "empty"] {
            let root = dir.path().join(name);
            if name == "empty" {
                fs::create_dir(&root).unwrap();
            }
            Cache::open(&root).unwrap();
            assert!(root.join(MARKER).is_file());
            let tag = fs::read_to_string(root.join("CACHEDIR.TAG")).unwrap();
            assert!(tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55"), "{tag}");
            // Marked: opened again, whatever it holds now.
            fs::write(root.join("notes"), b"x").unwrap();
            Cache::open(&root).unwrap();
        }
        // The layout an unmarked older version left is adopted.
        let legacy = dir.path().join("legacy");
        for sub in ["blobs/sha256", "keys", "tmp", "artifacts", "mmdebstrap-AbC123"] {
            fs::create_dir_all(legacy.join(sub)).unwrap();
        }
        fs::write(legacy.join("lock"), b"").unwrap();
        Cache::open(&legacy).unwrap();
        assert!(legacy.join(MARKER).is_file());
        // Nor is a directory of generic names alone.
        let generic = dir.path().join("generic");
        fs::create_dir_all(generic.join("tmp")).unwrap();
        assert!(Cache::open(&generic).unwrap_err().to_string().contains("\"tmp\""));
        // The same with one foreign entry is not.
        let almost = dir.path().join("almost");
        for sub in ["blobs/sha256", "keys", "Documents"] {
            fs::create_dir_all(almost.join(sub)).unwrap();
        }
        assert!(Cache::open(&almost).unwrap_err().to_string().contains("Documents"));
    }

    #[test]
    fn a_relative_cache_dir_is_made_absolute() {
        let cache = Cache::open(Path::new("target/tmp-cache-test-relative")).unwrap();
        assert!(cache.root().is_absolute(), "{}", cache.root().display());
        assert!(cache.root().ends_with("target/tmp-cache-test-relative"));
        let _ = fs::remove_dir_all(cache.root());
    }

    #[test]
    fn cleaning_removes_only_names_the_cache_gives() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let old = SystemTime::now() - Duration::from_hours(2);
        let tmp = dir.path().join("tmp");
        let foreign =
            [tmp.join("notes.txt"), tmp.join("stage-not-ours"), dir.path().join("keys/.stackbuild-tmp-x")];
        fs::write(&foreign[0], b"x").unwrap();
        fs::create_dir(&foreign[1]).unwrap();
        fs::write(&foreign[2], b"x").unwrap();
        for p in &foreign {
            File::open(p).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(cache.clean_temps().unwrap(), 0);
        assert!(foreign.iter().all(|p| p.exists()));

        // A `tmp` that is a symlink is not followed.
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("4242-000000001-0.tmp");
        fs::write(&victim, b"x").unwrap();
        File::open(&victim).unwrap().set_modified(old).unwrap();
        fs::remove_dir_all(&tmp).unwrap();
        std::os::unix::fs::symlink(outside.path(), &tmp).unwrap();
        cache.clean_temps().unwrap();
        assert!(victim.exists());
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let guard = cache.lock().unwrap();
        let probe = File::options().write(true).open(dir.path().join("lock")).unwrap();
        assert!(probe.try_lock().is_err());
        drop(guard);
        assert!(probe.try_lock().is_ok());
    }
}
