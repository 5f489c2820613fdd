//! Bytecode in the image: the `.pyc` of every module a Python layer installs, written at build
//! time so a fresh container does not compile them again on every start.
//!
//! Python caches the compiled form of each imported module in `__pycache__/NAME.TAG.pyc` (PEP
//! 3147) and writes it when missing. An image without them makes every new container (a fresh
//! writable layer each) compile everything it imports, and a read-only root compiles on every
//! start; `pip install` compiles at install time, so images built with it ship them.
//!
//! Reproducibility: the `.pyc` are hash-based (PEP 552,
//! <https://peps.python.org/pep-0552/>): the header holds a hash of the source instead of its
//! mtime and size, so the bytes depend only on the source text and the interpreter. They are
//! **checked** hash-based: at import Python hashes the source (`SipHash`, cheap next to compiling)
//! and compiles afresh in memory when it differs. Unchecked ones would skip that, but then a `.py`
//! changed after the build (a later `FROM` layer, a `pip install` over it, a file edited in a
//! container) would run its old bytecode silently; Python's documentation keeps unchecked ones for
//! files "kept up to date by a system external to Python"
//! (<https://docs.python.org/3/library/py_compile.html#py_compile.PycInvalidationMode>). pip
//! writes timestamp-based ones (`compileall`'s default), whose bytes change with every install.
//!
//! The bytecode format is per interpreter version (the magic number changes between minor
//! versions), so the compiler is the image's own interpreter: the base layer is unpacked once
//! into the cache (keyed by its `diff_id`) and `python3.X` runs chrooted into that copy, in new
//! user, mount, PID and network namespaces (`unshare --map-root-user`, which works rootless and as
//! root alike), with the rootfs mounted read-only, the stage bind-mounted at [`STAGE_MOUNT`], an
//! empty environment except `PYTHONHASHSEED=0` (set and frozenset constants are marshalled in
//! iteration order) and `SOURCE_DATE_EPOCH`, and `--kill-child` so nothing it starts outlives it.
//! It runs with `-S` (no `site`: no `.pth` file or `sitecustomize` of the base is imported), so
//! the process that compiles is made of the interpreter and its standard library alone.
//! Each top-level entry of the site directory (a package, a module) is compiled by its own
//! interpreter process, walking its tree in sorted order: the marshalled bytes can depend on what
//! was compiled before in the same process (`marshal` writes a back-reference for an object whose
//! reference count says it is shared, and interned strings are shared across compilations), so
//! what one process compiles is fixed by the tree alone, and the processes run in parallel on
//! every core without the output depending on their number or order. The driver compiles at
//! optimization level 0 only (as pip does) and records the name of the source in the image
//! (`dfile`), not the stage path.
//! Nothing from the recipe or the image is passed as an option: the paths follow `-c CODE`, where
//! Python hands them to the script as `sys.argv`.
//!
//! No work done twice: since what one process compiles is fixed by its entry's tree and the
//! interpreter, each entry's output is kept in the cache under a key of exactly that ([`store`]),
//! and an entry staged again (the same wheel in a layer restaged for another pin, another recipe
//! on the same base) gets its recorded `.pyc` back, verified, instead of a process: the bytes are
//! the ones compiling it gives. An entry with no source to compile (a `.dist-info`) starts no
//! process at all.

mod store;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::Digest as _;

use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_common::IoError;
use stackbuild_common::LayerBlob;

/// Where the stage is mounted inside the chroot.
pub(crate) const STAGE_MOUNT: &str = "/.stackbuild-stage";

/// Why bytecode could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BytecodeError {
    /// An I/O operation failed.
    #[error("bytecode: {0}")]
    Io(#[from] IoError),
    /// The interpreter version is not `3.N`.
    #[error("bytecode: unexpected Python version {0:?}")]
    Version(String),
    /// The sandboxed compiler failed.
    #[error(
        "bytecode: compiling with the image's python{version} failed ({status}): {message}; set \
         `bytecode = false` in [python] to build without bytecode"
    )]
    Compile {
        /// The interpreter version.
        version: String,
        /// The exit status.
        status: String,
        /// What it printed last.
        message: String,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BytecodeError + 'a {
    move |source| BytecodeError::Io(IoError { op, path: path.to_owned(), source })
}

/// The image's interpreter, unpacked from its base layer.
#[derive(Debug, Clone)]
pub(crate) struct Interpreter {
    /// The unpacked base rootfs.
    pub rootfs: PathBuf,
    /// `3.11`.
    pub version: String,
    /// What identifies the compiling process, whatever else the base holds: the version and a
    /// digest of the interpreter and its standard library, all it runs with `-S`.
    pub compiler: String,
}

/// What compiling added to a stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Added {
    /// `.pyc` files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Compile units (top-level entries of the site directory) compiled in this build.
    #[serde(default)]
    pub compiled: u64,
    /// Compile units whose recorded bytecode was restored from the cache instead.
    #[serde(default)]
    pub reused: u64,
}

impl Interpreter {
    /// Unpacks `base` (a layer with `/usr/bin/python{version}`) into the cache, once per base.
    pub(crate) fn prepare(cache: &Cache, base: &LayerBlob, version: &str) -> Result<Self, BytecodeError> {
        if !valid_version(version) {
            return Err(BytecodeError::Version(version.to_owned()));
        }
        let hex = base.diff_id.trim_start_matches("sha256:");
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BytecodeError::Version(format!("base diff_id {}", base.diff_id)));
        }
        let parent = cache.root().join("bytecode-rootfs");
        let rootfs = parent.join(hex);
        let digest_file = parent.join(format!("{hex}.compiler-python{version}"));
        if rootfs.join(STAGE_MOUNT.trim_start_matches('/')).is_dir() {
            let compiler = recorded_digest(&rootfs, &digest_file, version)?;
            return Ok(Self { rootfs, version: version.to_owned(), compiler });
        }
        std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
        let tmp = tempfile::Builder::new()
            .prefix(".unpack-")
            .tempdir_in(&parent)
            .map_err(io("creating a directory in", &parent))?;
        let compression = Compression::from_media_type(&base.media_type).unwrap_or(Compression::None);
        unpack(&base.path, compression, tmp.path(), version)?;
        // Created last: its presence marks a complete copy.
        let mount = tmp.path().join(STAGE_MOUNT.trim_start_matches('/'));
        std::fs::create_dir_all(&mount).map_err(io("creating", &mount))?;
        let done = tmp.keep();
        if let Err(e) = std::fs::rename(&done, &rootfs) {
            // Another build unpacked the same base meanwhile: use its copy.
            let _ = std::fs::remove_dir_all(&done);
            if !rootfs.is_dir() {
                return Err(io("renaming to", &rootfs)(e));
            }
        }
        let compiler = recorded_digest(&rootfs, &digest_file, version)?;
        Ok(Self { rootfs, version: version.to_owned(), compiler })
    }

    /// Compiles every `.py` below `stage/rel` (the in-image directory `/rel`) and returns what it
    /// added. Files that do not compile (Python 2 leftovers, templates) get no `.pyc`, as with pip.
    /// With a `cache`, a unit compiled before is restored from it, and one compiled is recorded.
    pub(crate) fn compile(
        &self,
        stage: &Path,
        rel: &str,
        epoch: u64,
        cache: Option<&Cache>,
    ) -> Result<Added, BytecodeError> {
        let rel = rel.trim_matches('/');
        let dir = stage.join(rel);
        if !dir.is_dir() {
            return Ok(Added::default());
        }
        let before = count_pyc(&dir)?;
        let mut entries: Vec<String> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io("listing", &dir))? {
            let entry = entry.map_err(io("listing", &dir))?;
            // Wheel member names are UTF-8 (checked when installed); anything else is not ours.
            if let Some(name) = entry.file_name().to_str() {
                entries.push(name.to_owned());
            }
        }
        entries.sort();
        let tag = self.cache_tag();
        let context = store::Context { compiler: self.compiler_identity(epoch), site: format!("/{rel}") };
        // Every unit's key before anything is written: units share the top `__pycache__`.
        let units = parallel(&entries, |name| {
            store::unit(&context, &dir, name, &tag).map_err(io("reading", &dir.join(name)))
        })?;
        let units: Vec<store::Unit> = units.into_iter().flatten().collect();
        let done = parallel(&units, |unit| {
            if let Some(cache) = cache {
                match store::load(cache, unit) {
                    Ok(Some(pycs)) => {
                        store::restore(&dir, &pycs).map_err(io("writing bytecode into", &dir))?;
                        return Ok(false);
                    }
                    Ok(None) => {}
                    Err(why) => tracing::warn!(
                        "bytecode: the cached bytecode of {} is damaged ({why}); compiling it again",
                        unit.name
                    ),
                }
            }
            self.compile_one(stage, rel, &unit.name, epoch)?;
            if let Some(cache) = cache {
                let pycs = store::collect(&dir, unit, &tag).map_err(io("reading bytecode in", &dir))?;
                if let Err(why) = store::save(cache, unit, &pycs) {
                    tracing::warn!("bytecode: not recorded for later builds: {why}");
                }
            }
            Ok(true)
        })?;
        let compiled = done.iter().filter(|c| **c).count() as u64;
        let after = count_pyc(&dir)?;
        Ok(Added {
            files: after.files - before.files.min(after.files),
            bytes: after.bytes.saturating_sub(before.bytes),
            compiled,
            reused: done.len() as u64 - compiled,
        })
    }

    /// `cpython-311`: the tag in the names of the `.pyc` this interpreter writes.
    fn cache_tag(&self) -> String {
        format!("cpython-{}", self.version.replace('.', ""))
    }

    /// Everything besides the sources that the bytes a unit compiles to depend on ([`Compiler`]).
    fn compiler_identity(&self, epoch: u64) -> Compiler<'_> {
        Compiler { interpreter: &self.compiler, run: Invocation::current(), epoch }
    }

    /// Compiles the top-level entry `name` of `stage/rel` in one sandboxed interpreter process.
    fn compile_one(&self, stage: &Path, rel: &str, name: &str, epoch: u64) -> Result<(), BytecodeError> {
        let in_image = format!("/{rel}");
        let output = Command::new("unshare")
            .args(UNSHARE)
            .arg("--")
            .args(["/bin/sh", "-c", SANDBOX, "sh"])
            .arg(&self.rootfs)
            .arg(stage)
            .arg(format!("/usr/bin/python{}", self.version))
            .arg(DRIVER)
            .arg(format!("{STAGE_MOUNT}/{rel}"))
            .arg(&in_image)
            .arg(name)
            .env_clear()
            .envs(ENV.iter().copied())
            .env("SOURCE_DATE_EPOCH", epoch.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| BytecodeError::Compile {
                version: self.version.clone(),
                status: "not started".into(),
                message: format!("cannot run unshare: {e}"),
            })?;
        let err = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            return Err(BytecodeError::Compile {
                version: self.version.clone(),
                status: output.status.to_string(),
                message: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            });
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(file) = line.strip_prefix("skipped ") {
                tracing::debug!("bytecode: {in_image}/{file} does not compile; no .pyc");
            }
        }
        Ok(())
    }
}

/// Whether and how a build compiles bytecode, decided once per platform; the interpreter is
/// unpacked on first use (a build whose Python layers are all cached never unpacks it).
pub struct Plan<'a> {
    cache: &'a Cache,
    on: Option<(LayerBlob, String)>,
    interpreter: std::sync::OnceLock<Interpreter>,
    /// Held while the interpreter is unpacked, so two threads asking at once unpack it once.
    preparing: std::sync::Mutex<()>,
}

impl<'a> Plan<'a> {
    /// Bytecode is compiled when the recipe asks for it (the default) and the base's interpreter
    /// can be run: a Debian base built here for the build machine's architecture (`base`; the
    /// caller passes `None` otherwise), whose only layer holds `/usr/bin/python3.X`.
    /// Otherwise the build goes on without and says why.
    pub fn new(
        python: Option<&stackbuild_recipe::PythonSection>,
        facts: &stackbuild_common::BaseFacts,
        base: Option<&LayerBlob>,
        cache: &'a Cache,
    ) -> Self {
        let mut plan = Self {
            cache,
            on: None,
            interpreter: std::sync::OnceLock::new(),
            preparing: std::sync::Mutex::default(),
        };
        let Some(py) = python else { return plan };
        if !py.bytecode {
            tracing::info!("bytecode: off (bytecode = false in [python])");
            return plan;
        }
        match (base, facts.python.as_deref()) {
            (Some(base), Some(version)) if valid_version(version) => {
                plan.on = Some((base.clone(), version.to_owned()));
            }
            (Some(_), _) => {
                tracing::warn!("bytecode: none: the base has no /usr/bin/python3.X to compile with");
            }
            (None, _) => tracing::warn!(
                "bytecode: none: only a Debian base built by stackbuild for this machine's \
                 architecture provides an interpreter to compile with; Python will compile the \
                 modules when a container imports them"
            ),
        }
        plan
    }

    /// What goes into the cache key of a layer that may hold bytecode: `None` when the plan
    /// compiles none, else what compiles it ([`BytecodeKey`]).
    pub fn key(&self) -> Option<BytecodeKey> {
        self.on.as_ref().map(|(base, version)| BytecodeKey {
            base: base.diff_id.clone(),
            python: version.clone(),
            run: Invocation::current(),
        })
    }

    /// Unpacks the compiling interpreter now, when the plan is on and it is not there yet: the
    /// build calls it while the first layer's wheels download, so that the first compile does
    /// not wait for the base to be unpacked after them.
    pub fn prepare(&self) -> Result<(), BytecodeError> {
        let Some((base, version)) = &self.on else { return Ok(()) };
        let _one = self.preparing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.interpreter.get().is_none() {
            let i = Interpreter::prepare(self.cache, base, version)?;
            let _ = self.interpreter.set(i);
        }
        Ok(())
    }

    /// Compiles the modules of `stage` (its site-packages) when the plan is on; records what
    /// was added next to the layer `key` for later builds that reuse the layer.
    pub fn compile(
        &self,
        stage: &Path,
        scheme: &crate::wheel::Scheme,
        epoch: u64,
        key: &stackbuild_cache::LayerKey,
    ) -> Result<Option<Added>, BytecodeError> {
        if self.on.is_none() {
            return Ok(None);
        }
        self.prepare()?;
        let Some(interpreter) = self.interpreter.get() else { return Ok(None) };
        let mut added = interpreter.compile(stage, &scheme.purelib, epoch, Some(self.cache))?;
        if scheme.platlib != scheme.purelib {
            let more = interpreter.compile(stage, &scheme.platlib, epoch, Some(self.cache))?;
            added.files += more.files;
            added.bytes += more.bytes;
            added.compiled += more.compiled;
            added.reused += more.reused;
        }
        tracing::info!(
            "bytecode: {} .pyc, {} bytes ({} unit(s) compiled, {} restored from the cache)",
            added.files,
            added.bytes,
            added.compiled,
            added.reused
        );
        let path = self.record_path(key);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        }
        let json = serde_json::to_vec(&added).unwrap_or_default();
        stackbuild_common::write_atomic(&path, &json).map_err(io("writing", &path))?;
        Ok(Some(added))
    }

    /// What compiling added to the cached layer `key`, when it was recorded.
    /// The layer is reused whole, so this build compiled and restored none of it.
    pub fn recorded(&self, key: &stackbuild_cache::LayerKey) -> Option<Added> {
        self.on.as_ref()?;
        let added: Added =
            std::fs::read(self.record_path(key)).ok().and_then(|b| serde_json::from_slice(&b).ok())?;
        Some(Added { compiled: 0, reused: 0, ..added })
    }

    fn record_path(&self, key: &stackbuild_cache::LayerKey) -> PathBuf {
        self.cache.root().join("bytecode").join(format!("{}.json", key.as_hex()))
    }
}

/// What compiles a layer's bytecode: the part of a Python layer's key (and of the configuration
/// layer's, whose patched modules are compiled) that the bytecode plan gives ([`Plan::key`]).
/// A layer's key is computed before the base is unpacked, so the interpreter is named by its
/// base layer; each unit's own key (`Compiler`) has the digest of the interpreter alone.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BytecodeKey {
    /// The `diff_id` of the base layer whose interpreter and standard library compile.
    base: String,
    /// The interpreter version (`3.11`): the bytecode format (its magic number) and the `.pyc`
    /// names' tag.
    python: String,
    /// How the compiler runs.
    run: Invocation,
}

/// What a compile unit's bytecode depends on besides its sources and its site directory: the
/// compiler's part of every unit's key (`store::Context`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Compiler<'a> {
    /// `python3.11:<sha256>` of the interpreter binary and its standard library
    /// ([`compiler_digest`]): all the compiling process is made of, since it runs with `-S`.
    pub(crate) interpreter: &'a str,
    /// How it runs.
    pub(crate) run: Invocation,
    /// `SOURCE_DATE_EPOCH` in its environment.
    pub(crate) epoch: u64,
}

/// How the compiling interpreter runs: the code and the environment it is given, each as the
/// compiler is given it ([`Interpreter::compile_one`] reads the same constants).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Invocation {
    /// The sha256 of [`DRIVER`]: the invalidation mode (checked hash-based), the optimization
    /// level, the order of the walk (which fixes the marshalled bytes), each `.pyc`'s `dfile`.
    driver: String,
    /// The sha256 of [`SANDBOX`]: the interpreter's flags (`-S -s -B`), the read-only rootfs.
    sandbox: String,
    /// Where the stage is mounted ([`STAGE_MOUNT`]).
    stage_mount: &'static str,
    /// `unshare`'s arguments ([`UNSHARE`]): the namespaces the compiler runs in.
    unshare: &'static [&'static str],
    /// The environment besides `SOURCE_DATE_EPOCH` ([`ENV`]): `PYTHONHASHSEED` fixes the order of
    /// set constants, `LC_ALL` the encoding of names.
    env: &'static [(&'static str, &'static str)],
}

impl Invocation {
    pub(crate) fn current() -> Self {
        Self {
            driver: hex::encode(sha2::Sha256::digest(DRIVER)),
            sandbox: hex::encode(sha2::Sha256::digest(SANDBOX)),
            stage_mount: STAGE_MOUNT,
            unshare: &UNSHARE,
            env: &ENV,
        }
    }
}

/// `unshare`'s options for the compiler: new user (root mapped to the caller), mount, network and
/// PID namespaces, nothing outliving the interpreter.
const UNSHARE: [&str; 7] =
    ["--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--kill-child"];

/// The compiler's whole environment besides `SOURCE_DATE_EPOCH` (set and frozenset constants are
/// marshalled in iteration order: `PYTHONHASHSEED=0` fixes it).
const ENV: [(&str, &str); 3] =
    [("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), ("LC_ALL", "C.UTF-8"), ("PYTHONHASHSEED", "0")];

/// Runs in the new namespaces, before the chroot: `$1` rootfs, `$2` stage, `$3` interpreter,
/// then the driver's code and arguments. The rootfs copy is made read-only so nothing the
/// interpreter runs can alter the cached copy; the stage is the only writable place.
const SANDBOX: &str = r#"set -e
umask 022
root=$1; stage=$2; py=$3; shift 3
mount --bind "$root" "$root"
mount --bind "$stage" "$root/.stackbuild-stage"
mount -o remount,bind,ro "$root"
exec chroot "$root" "$py" -S -s -B -c "$@"
"#;

/// The compiler, run by the image's interpreter: `argv[1]` the site directory (below the stage
/// mount), `argv[2]` its name in the image, `argv[3]` the top-level entry to compile (a package
/// directory or a module). Symlinks are neither followed nor compiled, and a `__pycache__` that
/// is not a plain directory is left alone.
const DRIVER: &str = r#"
import os, sys, py_compile, importlib.util
root, shown, entry = sys.argv[1], sys.argv[2], sys.argv[3]
mode = py_compile.PycInvalidationMode.CHECKED_HASH
def one(src):
    if not src.endswith(".py") or os.path.islink(src) or not os.path.isfile(src):
        return
    cache = os.path.dirname(importlib.util.cache_from_source(src))
    if os.path.lexists(cache) and (os.path.islink(cache) or not os.path.isdir(cache)):
        return
    rel = os.path.relpath(src, root)
    try:
        py_compile.compile(src, dfile=os.path.join(shown, rel), doraise=True,
                           invalidation_mode=mode, optimize=0)
    except (py_compile.PyCompileError, OSError, ValueError):
        print("skipped", rel)
start = os.path.join(root, entry)
if os.path.islink(start) or entry == "__pycache__":
    pass
elif os.path.isfile(start):
    one(start)
else:
    for top, dirs, files in os.walk(start):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            one(os.path.join(top, name))
"#;

/// `f` over `items` on every core, in their order; the first error wins.
fn parallel<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, BytecodeError> + Sync,
) -> Result<Vec<R>, BytecodeError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(items.len());
    let results: Vec<Vec<(usize, Result<R, BytecodeError>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { return mine };
                        let r = f(item);
                        let failed = r.is_err();
                        mine.push((i, r));
                        if failed {
                            return mine;
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut all: Vec<(usize, Result<R, BytecodeError>)> = results.into_iter().flatten().collect();
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, r)| r).collect()
}

/// `python3.11:<sha256>` over what the compiling process is made of: the interpreter binary, a
/// `pyvenv.cfg` that would move its prefix, and its standard library (sources, their cached
/// bytecode, extension modules), the names, kinds, link targets and contents in sorted order.
/// Run with `-S`, the interpreter imports nothing else of the base: a base with other packages
/// (another Debian pin) compiles to the same bytes, and its units are reused.
fn compiler_digest(rootfs: &Path, version: &str) -> Result<String, BytecodeError> {
    let mut h = sha2::Sha256::new();
    let mut feed = |tag: u8, bytes: &[u8]| {
        h.update([tag]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let tops = [
        format!("usr/bin/python{version}"),
        "usr/bin/pyvenv.cfg".into(),
        "usr/pyvenv.cfg".into(),
        format!("usr/lib/python{version}"),
    ];
    for top in tops {
        let mut stack = vec![top];
        while let Some(rel) = stack.pop() {
            let path = rootfs.join(&rel);
            feed(0, rel.as_bytes());
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                feed(1, b"none");
                continue;
            };
            if meta.file_type().is_symlink() {
                feed(1, b"link");
                let target = std::fs::read_link(&path).map_err(io("reading", &path))?;
                feed(2, target.as_os_str().as_encoded_bytes());
                // The interpreter behind a link, within the copy.
                if !rel.starts_with("usr/lib/") {
                    let t = Path::new(&rel).parent().unwrap_or(Path::new("")).join(&target);
                    let t = t.to_string_lossy().trim_start_matches('/').to_owned();
                    let resolved = rootfs.join(&t);
                    if resolved.starts_with(rootfs) && !t.contains("..") && resolved.is_file() {
                        let (digest, _) = stackbuild_common::sha256_reader(
                            std::fs::File::open(&resolved).map_err(io("opening", &resolved))?,
                        )
                        .map_err(io("reading", &resolved))?;
                        feed(3, digest.as_bytes());
                    }
                }
            } else if meta.is_dir() {
                feed(1, b"dir");
                let mut names = Vec::new();
                for entry in std::fs::read_dir(&path).map_err(io("listing", &path))? {
                    let entry = entry.map_err(io("listing", &path))?;
                    names.push(entry.file_name().to_string_lossy().into_owned());
                }
                names.sort();
                stack.extend(names.into_iter().rev().map(|n| format!("{rel}/{n}")));
            } else if meta.is_file() {
                feed(1, b"file");
                let file = std::fs::File::open(&path).map_err(io("opening", &path))?;
                let (digest, _) = stackbuild_common::sha256_reader(std::io::BufReader::new(file))
                    .map_err(io("reading", &path))?;
                feed(3, digest.as_bytes());
            } else {
                feed(1, b"other");
            }
        }
    }
    Ok(format!("python{version}:{}", hex::encode(h.finalize())))
}

fn valid_version(v: &str) -> bool {
    v.split_once('.').is_some_and(|(a, b)| {
        a == "3" && !b.is_empty() && b.len() <= 3 && b.bytes().all(|c| c.is_ascii_digit())
    })
}

/// `.pyc` files in `__pycache__` directories below `dir` (symlinks not followed).
pub(crate) fn count_pyc(dir: &Path) -> Result<Added, BytecodeError> {
    let mut added = Added::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io("listing", &d))? {
            let entry = entry.map_err(io("listing", &d))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && path.extension().is_some_and(|e| e == "pyc")
                && d.file_name().is_some_and(|n| n == "__pycache__")
            {
                added.files += 1;
                added.bytes += meta.size();
            }
        }
    }
    Ok(added)
}

/// Unpacks a layer blob into `dir` for the compiler: regular files, directories, symlinks and
/// hardlinks (the tar crate keeps every one inside `dir`); device nodes, FIFOs and whiteouts
/// are left out, as the compiler needs none and a rootless build cannot create devices.
/// [`compiler_digest`] of the unpacked copy, computed once and kept beside it: the copy is only
/// ever mounted read-only, so its digest cannot change, and hashing the standard library again
/// (about 27 MB, 1,200 files on bookworm) was a fixed cost of every build that compiles.
/// A missing or unreadable record is computed again and rewritten (atomically).
fn recorded_digest(rootfs: &Path, record: &Path, version: &str) -> Result<String, BytecodeError> {
    let prefix = format!("python{version}:");
    if let Ok(text) = stackbuild_common::read_text(record, 256, "compiler digest record") {
        let text = text.trim();
        if text
            .strip_prefix(&prefix)
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Ok(text.to_owned());
        }
    }
    let digest = compiler_digest(rootfs, version)?;
    let parent = record.parent().unwrap_or(Path::new("."));
    if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(parent) {
        use std::io::Write as _;
        if tmp.write_all(digest.as_bytes()).is_ok() {
            // Not recorded is only slower next time.
            let _ = tmp.persist(record);
        }
    }
    Ok(digest)
}

/// Whether the compiler's copy of the base needs the entry `name` (a path in the base layer):
/// the interpreter, its standard library, the shared libraries and loader it runs with, the
/// loader's cache and the locales (`LC_ALL=C.UTF-8`), and the top-level links of a merged
/// `/usr`. Nothing else of the base is read by `python3.X -S` compiling a stage, and skipping
/// it (documentation, `dpkg` state, other programs: about two thirds of a bookworm base's 9,600
/// entries) saves creating those files on every first compile with a base: `perf` of a cold
/// `bench/small.toml` build had 79 % of its samples in the kernel creating inodes for it.
/// [`compiler_digest`] reads only entries kept here, so the identity is the same either way.
fn compiler_needs(name: &str, version: &str, is_dir: bool) -> bool {
    let stdlib = format!("usr/lib/python{version}");
    let roots: [&str; 11] = [
        "usr/bin/python",
        "usr/bin/pyvenv.cfg",
        "usr/pyvenv.cfg",
        &stdlib,
        "lib",
        "lib32",
        "lib64",
        "usr/lib32",
        "usr/lib64",
        "usr/lib/locale",
        "etc/ld.so.",
    ];
    let under = |root: &str| {
        name == root
            || name.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
            // `usr/bin/python3`, `usr/bin/python3.11`: the interpreter and its links.
            || (root == "usr/bin/python" && name.starts_with(root) && !name[root.len()..].contains('/'))
            || (root == "etc/ld.so." && name.starts_with(root))
    };
    // A multiarch library directory: `usr/lib/x86_64-linux-gnu`, `usr/lib/aarch64-linux-gnu`.
    let multiarch = name
        .strip_prefix("usr/lib/")
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|dir| dir.contains("-linux-gnu"));
    if multiarch || roots.iter().any(|r| under(r)) || !name.contains('/') {
        return true;
    }
    // The directories above what is kept.
    is_dir && roots.iter().any(|r| r.starts_with(&format!("{name}/")))
}

/// `usr/bin/python3` for `./usr/bin/python3` or `usr//bin/python3`.
fn relative_name(name: &Path) -> String {
    let parts: Vec<String> = name
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    parts.join("/")
}

fn unpack(blob: &Path, compression: Compression, dir: &Path, version: &str) -> Result<(), BytecodeError> {
    let file = std::fs::File::open(blob).map_err(io("opening", blob))?;
    let decoded =
        compression.decoder(std::io::BufReader::with_capacity(1 << 20, file)).map_err(io("reading", blob))?;
    let mut archive = tar::Archive::new(decoded);
    archive.set_preserve_permissions(true);
    let mut dirs = Vec::new();
    for entry in archive.entries().map_err(io("reading", blob))? {
        let mut entry = entry.map_err(io("reading", blob))?;
        let kind = entry.header().entry_type();
        let name = entry.path().map_err(io("reading", blob))?.into_owned();
        let safe = name.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        let whiteout = name.iter().any(|c| c.as_encoded_bytes().starts_with(b".wh."));
        if !safe || whiteout {
            continue;
        }
        let rel = relative_name(&name);
        if !compiler_needs(&rel, version, kind.is_dir()) {
            continue;
        }
        if kind.is_hard_link() {
            // A link to an entry left out would fail: leave it out too.
            let target = entry.link_name().ok().flatten().map(|t| relative_name(&t));
            if !target.is_some_and(|t| compiler_needs(&t, version, false)) {
                continue;
            }
        }
        if kind.is_dir() {
            dirs.push((name, entry.header().mode().unwrap_or(0o755) & 0o7777));
        } else if kind.is_file() || kind.is_symlink() || kind.is_hard_link() {
            entry.unpack_in(dir).map_err(io("unpacking into", dir))?;
        }
    }
    // Modes last, deepest first, so a read-only directory does not block its children.
    dirs.sort_by(|a, b| b.0.cmp(&a.0));
    for (name, mode) in dirs {
        // Never through a symlink of the layer: it may point anywhere on this machine.
        let mut path = dir.to_path_buf();
        let mut through_link = false;
        for c in name.components() {
            path.push(c);
            through_link |= std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        }
        if through_link {
            continue;
        }
        std::fs::create_dir_all(&path).map_err(io("creating", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o700))
            .map_err(io("setting the mode of", &path))?;
    }
    Ok(())
}

/// A stand-in base (a layer record with made-up digests under `dir`, Python 3.11) and a
/// `[python]` section that compiles bytecode: what a bytecode plan's key is made from, for the
/// key tests of this crate and of the build.
#[cfg(any(test, feature = "key-test"))]
pub fn stand_in(dir: &Path) -> (LayerBlob, stackbuild_common::BaseFacts, stackbuild_recipe::PythonSection) {
    let base = LayerBlob {
        digest: format!("sha256:{}", "1".repeat(64)),
        diff_id: format!("sha256:{}", "2".repeat(64)),
        size: 1,
        media_type: Compression::Gzip.media_type().into(),
        annotations: std::collections::BTreeMap::new(),
        path: dir.join("base"),
    };
    let facts = stackbuild_common::BaseFacts { python: Some("3.11".into()), packages: Vec::new() };
    let section = stackbuild_recipe::PythonSection {
        bytecode: true,
        ..stackbuild_recipe::PythonSection::of("3.11".parse().unwrap(), Vec::new(), None)
    };
    (base, facts, section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_of_the_bytecode_plan_is_part_of_the_layer_key() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let (base, facts, section) = stand_in(dir.path());
        let plan = Plan::new(Some(&section), &facts, Some(&base), &cache);
        let key = plan.key().expect("the plan compiles");
        let changed =
            stackbuild_cache::assert_every_input_changes_key("bytecode", &key, &["base", "python", "run"]);
        for path in ["run.driver", "run.sandbox", "run.stage_mount", "run.unshare", "run.env"] {
            assert!(changed.iter().any(|p| p == path), "{path}: {changed:?}");
        }
        // Off, or without an interpreter: no bytecode, no compiler in the key.
        assert!(Plan::new(Some(&section), &facts, None, &cache).key().is_none());
        let off = stackbuild_recipe::PythonSection { bytecode: false, ..section.clone() };
        assert!(Plan::new(Some(&off), &facts, Some(&base), &cache).key().is_none());
    }

    #[test]
    fn the_compiler_copy_keeps_the_interpreter_its_libraries_and_nothing_else() {
        for kept in [
            "usr/bin/python3.11",
            "usr/bin/python3",
            "usr/lib/python3.11/os.py",
            "usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
            "usr/lib/x86_64-linux-gnu/libz.so.1",
            "usr/lib/aarch64-linux-gnu/libc.so.6",
            "lib64/ld-linux-x86-64.so.2",
            "etc/ld.so.cache",
            "usr/lib/locale/C.utf8/LC_CTYPE",
            "bin",
        ] {
            assert!(compiler_needs(kept, "3.11", false), "{kept}");
        }
        for dir in ["usr", "usr/lib", "usr/bin", "etc"] {
            assert!(compiler_needs(dir, "3.11", true), "{dir}");
        }
        for left in [
            "usr/share/doc/python3.11/copyright",
            "usr/lib/python3/dist-packages/six.py",
            "usr/lib/python3.12/os.py",
            "usr/bin/perl",
            "usr/bin/pythonista/x",
            "var/lib/dpkg/status",
            "etc/passwd",
            "usr/libexec/x",
        ] {
            assert!(!compiler_needs(left, "3.11", false), "{left}");
        }
        assert!(!compiler_needs("usr/share", "3.11", true));
        assert_eq!(relative_name(Path::new("./usr//bin/python3")), "usr/bin/python3");
    }

    #[test]
    fn versions_are_checked_before_they_name_a_binary() {
        assert!(valid_version("3.11"));
        assert!(valid_version("3.9"));
        for bad in ["3", "3.", "2.7", "3.11.2", "3.x", "3.1/../../bin/sh", "3.11 -c"] {
            assert!(!valid_version(bad), "{bad}");
        }
    }

    #[test]
    fn counts_only_pyc_in_pycache() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("pkg/__pycache__");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("m.cpython-311.pyc"), b"12345").unwrap();
        std::fs::write(tmp.path().join("pkg/stray.pyc"), b"123").unwrap();
        std::fs::write(tmp.path().join("pkg/m.py"), b"x = 1\n").unwrap();
        assert_eq!(count_pyc(tmp.path()).unwrap(), Added { files: 1, bytes: 5, ..Added::default() });
    }
}
