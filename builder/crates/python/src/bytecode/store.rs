//! The bytecode store: what compiling one unit (a top-level entry of a site directory, the
//! compiler's unit, see the module above) wrote, kept in the cache under a key of everything
//! those bytes depend on, so that a later build staging the same entry (the same wheel in another
//! layer, another recipe, a lock with another pin elsewhere) restores it instead of compiling.
//!
//! The key ([`Unit::key`]) is the [`stackbuild_cache::LayerKey`] of one struct (`UnitKey`): the
//! compiler's identity (a digest of the interpreter binary and its standard library, all the
//! process that compiles is made of, since it runs with `-S`; digests of the driver and sandbox
//! text, which fix the optimization level and the invalidation mode; the environment such as
//! `PYTHONHASHSEED`; the epoch: `super::Compiler`), not the base's `diff_id`: a
//! base with other Debian packages reuses the units. Then the directory's name in the image (the
//! `dfile` recorded in every `.pyc`), the
//! entry's name and, in the order the driver compiles them, each source it will compile: its
//! path, mode and content digest, and what is already at its `.pyc` path (a wheel may ship one).
//! Keying by the files rather than by the wheel's digest gives the same key for the same tree
//! whichever wheel or wheels put it there: a namespace directory two wheels share (`nvidia/`)
//! is one unit keyed by its union, and the output is the bytes compiling that tree gives.
//!
//! A unit's record is `bytecode-units/<key>.json`, naming a pack in the content-addressed
//! `blobs/sha256/` (the `.pyc` bytes concatenated) and each file's path, mode, place in the pack
//! and digest. The pack is written and renamed into place before the record, and both atomically,
//! so a killed build leaves the old record, the new one, or none. On reuse the pack's digest and
//! every file's are checked, and the paths must be `__pycache__/*.pyc` under the entry: anything
//! else is a corrupt record, and the unit is compiled again and its record rewritten.

// Python imports `.py` and writes `.pyc` exactly so spelled (the driver tests `endswith(".py")`).
#![allow(clippy::case_sensitive_file_extension_comparisons)]

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use stackbuild_cache::Cache;

/// Largest record read back; a record is some 150 bytes per `.pyc`.
const MAX_RECORD: u64 = 64 << 20;

/// The record's format.
const SCHEMA: u32 = 1;

/// One compile unit: the sources the driver compiles, in its order, and the key.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    /// The entry (`six.py`, `idna`).
    pub name: String,
    /// Paths relative to the site directory of the sources that will be compiled, in order.
    pub sources: Vec<String>,
    /// Hex of the [`stackbuild_cache::LayerKey`] of everything the unit's bytecode depends on
    /// (`UnitKey`).
    pub key: String,
}

/// A `.pyc` a unit wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pyc {
    /// Relative to the site directory.
    pub path: String,
    /// Its permission bits.
    pub mode: u32,
    /// Those of its `__pycache__`, for when it must be created.
    pub dir_mode: u32,
    /// Its content.
    pub bytes: Vec<u8>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    schema: u32,
    /// `sha256:<hex>` of the pack.
    pack: String,
    size: u64,
    files: Vec<RecordFile>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordFile {
    path: String,
    mode: u32,
    dir_mode: u32,
    offset: u64,
    len: u64,
    sha256: String,
}

/// What every unit of one site directory shares in its key: the compiler and how it runs, and
/// the directory.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct Context<'a> {
    /// The compiling interpreter, how it runs and the epoch.
    pub compiler: super::Compiler<'a>,
    /// The site directory's name in the image (`/usr/local/lib/python3.11/dist-packages`): the
    /// `dfile` every `.pyc` records.
    pub site: String,
}

/// A unit's key ([`Unit::key`]): everything the bytecode it compiles to depends on.
#[derive(Debug, serde::Serialize)]
struct UnitKey<'a> {
    /// The compiler and the site directory.
    context: &'a Context<'a>,
    /// The top-level entry (`six.py`, `idna`): what one interpreter process compiles.
    entry: &'a str,
    /// Each source the driver will compile, in its order (what one compilation marshals can
    /// depend on what the same process compiled before).
    sources: Vec<Source>,
}

/// A source of a unit, as its key has it.
#[derive(Debug, serde::Serialize)]
struct Source {
    /// Relative to the site directory: the `.pyc`'s name and its recorded `dfile`.
    path: String,
    /// Permission bits: the `.pyc`'s mode follows the source's.
    mode: u32,
    /// The hex sha256 of the source text.
    sha256: String,
    /// What is at its `.pyc` path before: the driver writes over it, or leaves it when the
    /// source does not compile.
    before: Before,
}

/// What is at a source's `.pyc` path before the driver runs (a wheel may ship one).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum Before {
    /// Nothing.
    Nothing,
    /// A regular file.
    File {
        /// Its permission bits.
        mode: u32,
        /// The hex sha256 of its content.
        sha256: String,
    },
    /// A symlink.
    Link {
        /// Its target's bytes.
        target: Vec<u8>,
    },
    /// Anything else (a directory, a FIFO).
    Other,
}

fn file_sha256(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut file = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

/// `.pyc` of `source` (`d/x.py` -> `d/__pycache__/x.TAG.pyc`), as `importlib.util.cache_from_source`
/// names it at optimization level 0.
pub(super) fn pyc_of(source: &str, tag: &str) -> String {
    let (dir, file) = source.rsplit_once('/').map_or(("", source), |(d, f)| (d, f));
    let stem = file.strip_suffix(".py").unwrap_or(file);
    if dir.is_empty() {
        format!("__pycache__/{stem}.{tag}.pyc")
    } else {
        format!("{dir}/__pycache__/{stem}.{tag}.pyc")
    }
}

/// Whether a `__pycache__` at `dir` keeps the driver from compiling there: a link or a non-directory.
fn cache_dir_blocked(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("__pycache__")).is_ok_and(|m| !m.is_dir())
}

/// The unit of the top-level entry `name` of `site`, walked as the driver walks it; `None` when
/// the driver would compile nothing there (a `.dist-info`, a data directory), so no process runs.
pub(super) fn unit(
    context: &Context<'_>,
    site: &Path,
    name: &str,
    tag: &str,
) -> std::io::Result<Option<Unit>> {
    let Some(inputs) = unit_key(context, site, name, tag)? else { return Ok(None) };
    let key = stackbuild_cache::LayerKey::of("bytecode-unit", &inputs);
    let sources = inputs.sources.into_iter().map(|s| s.path).collect();
    Ok(Some(Unit { name: name.to_owned(), sources, key: key.as_hex().to_owned() }))
}

/// The key of [`unit`]'s unit, before it is hashed.
fn unit_key<'a>(
    context: &'a Context<'a>,
    site: &Path,
    name: &'a str,
    tag: &str,
) -> std::io::Result<Option<UnitKey<'a>>> {
    let start = site.join(name);
    let Ok(meta) = std::fs::symlink_metadata(&start) else { return Ok(None) };
    let mut sources = Vec::new();
    if name == "__pycache__" || meta.file_type().is_symlink() {
        return Ok(None);
    } else if meta.is_file() {
        if name.ends_with(".py") && !cache_dir_blocked(site) {
            sources.push(name.to_owned());
        }
    } else if meta.is_dir() {
        // os.walk top-down, directories and files sorted, `__pycache__` and links not entered.
        let mut stack = vec![name.to_owned()];
        while let Some(rel) = stack.pop() {
            let dir = site.join(&rel);
            let mut files = Vec::new();
            let mut dirs = Vec::new();
            let Ok(list) = std::fs::read_dir(&dir) else { continue };
            for entry in list {
                let entry = entry?;
                let Some(n) = entry.file_name().to_str().map(str::to_owned) else { continue };
                let m = std::fs::symlink_metadata(entry.path())?;
                if m.is_dir() {
                    if n != "__pycache__" {
                        dirs.push(n);
                    }
                } else {
                    files.push((n, m.is_file()));
                }
            }
            // Python sorts by code point, as Rust sorts `String`s.
            files.sort();
            dirs.sort();
            if !cache_dir_blocked(&dir) {
                sources.extend(
                    files
                        .into_iter()
                        .filter(|(n, regular)| *regular && n.ends_with(".py"))
                        .map(|(n, _)| format!("{rel}/{n}")),
                );
            }
            stack.extend(dirs.into_iter().rev().map(|d| format!("{rel}/{d}")));
        }
    }
    if sources.is_empty() {
        return Ok(None);
    }
    let mut keyed = Vec::with_capacity(sources.len());
    for source in sources {
        let path = site.join(&source);
        let m = std::fs::symlink_metadata(&path)?;
        let pyc = site.join(pyc_of(&source, tag));
        let before = match std::fs::symlink_metadata(&pyc) {
            Err(_) => Before::Nothing,
            Ok(m) if m.is_file() => {
                Before::File { mode: m.mode() & 0o7777, sha256: hex::encode(file_sha256(&pyc)?) }
            }
            Ok(m) if m.file_type().is_symlink() => {
                Before::Link { target: std::fs::read_link(&pyc)?.into_os_string().into_encoded_bytes() }
            }
            Ok(_) => Before::Other,
        };
        keyed.push(Source {
            mode: m.mode() & 0o7777,
            sha256: hex::encode(file_sha256(&path)?),
            before,
            path: source,
        });
    }
    Ok(Some(UnitKey { context, entry: name, sources: keyed }))
}

/// The `.pyc` the driver wrote for `unit` (regular files at its sources' `.pyc` paths).
pub(super) fn collect(site: &Path, unit: &Unit, tag: &str) -> std::io::Result<Vec<Pyc>> {
    let mut out = Vec::new();
    for source in &unit.sources {
        let rel = pyc_of(source, tag);
        let path = site.join(&rel);
        let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
        if !m.is_file() {
            continue;
        }
        let dir_mode = std::fs::symlink_metadata(path.parent().unwrap_or(site))?.mode() & 0o7777;
        out.push(Pyc { path: rel, mode: m.mode() & 0o7777, dir_mode, bytes: std::fs::read(&path)? });
    }
    Ok(out)
}

/// Writes `pycs` into `site` as the driver would have: over what is there, `__pycache__`
/// created with its recorded mode when missing, each file with its recorded mode.
pub(super) fn restore(site: &Path, pycs: &[Pyc]) -> std::io::Result<()> {
    for pyc in pycs {
        let path = site.join(&pyc.path);
        let dir = path.parent().unwrap_or(site);
        match std::fs::create_dir(dir) {
            Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(pyc.dir_mode))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // As the driver's atomic replace does: a link or file there is replaced, not followed.
        let tmp = dir.join(stackbuild_common::unique_temp_name(".stackbuild-pyc-"));
        let result = (|| {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(&pyc.bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(pyc.mode))?;
            std::fs::rename(&tmp, &path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result?;
    }
    Ok(())
}

fn record_path(cache: &Cache, key: &str) -> PathBuf {
    cache.root().join("bytecode-units").join(format!("{key}.json"))
}

/// Whether `path` is a `.pyc` in a `__pycache__` of the unit `name`, with no way out of `site`.
fn belongs(path: &str, name: &str) -> bool {
    let p = Path::new(path);
    let normal = p.components().all(|c| matches!(c, Component::Normal(_)));
    let in_cache = p.parent().and_then(Path::file_name).is_some_and(|n| n == "__pycache__");
    let under =
        path.starts_with(&format!("{name}/")) || (name.ends_with(".py") && path.starts_with("__pycache__/"));
    normal && in_cache && under && path.ends_with(".pyc")
}

/// The recorded `.pyc` of `unit`: `Ok(None)` when none is recorded, `Err(why)` when the record
/// or its pack is damaged (the caller compiles again).
pub(super) fn load(cache: &Cache, unit: &Unit) -> Result<Option<Vec<Pyc>>, String> {
    let path = record_path(cache, &unit.key);
    let Ok(file) = std::fs::File::open(&path) else { return Ok(None) };
    let mut text = Vec::new();
    file.take(MAX_RECORD).read_to_end(&mut text).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let record: Record = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if record.schema != SCHEMA {
        return Err(format!("{}: schema {}", path.display(), record.schema));
    }
    let pack_path = cache.blob_path(&record.pack).map_err(|e| e.to_string())?;
    let pack = std::fs::read(&pack_path).map_err(|e| format!("reading {}: {e}", pack_path.display()))?;
    let actual = format!("sha256:{}", hex::encode(Sha256::digest(&pack)));
    if pack.len() as u64 != record.size || actual != record.pack {
        return Err(format!("{} holds {actual}, not {}", pack_path.display(), record.pack));
    }
    let mut out = Vec::with_capacity(record.files.len());
    for f in record.files {
        let end = f.offset.checked_add(f.len).filter(|e| *e <= record.size);
        let Some(end) = end else {
            return Err(format!("{}: {} lies outside the pack", path.display(), f.path));
        };
        let bytes = &pack
            [usize::try_from(f.offset).unwrap_or(usize::MAX)..usize::try_from(end).unwrap_or(usize::MAX)];
        if hex::encode(Sha256::digest(bytes)) != f.sha256 {
            return Err(format!("{}: {} does not match its digest", path.display(), f.path));
        }
        if !belongs(&f.path, &unit.name) || f.mode & !0o777 != 0 || f.dir_mode & !0o777 != 0 {
            return Err(format!("{}: {:?} is not bytecode of {}", path.display(), f.path, unit.name));
        }
        out.push(Pyc { path: f.path, mode: f.mode, dir_mode: f.dir_mode, bytes: bytes.to_vec() });
    }
    Ok(Some(out))
}

/// Records `pycs` as the bytecode of `unit`: the pack into the blobs, then the record.
pub(super) fn save(cache: &Cache, unit: &Unit, pycs: &[Pyc]) -> Result<(), String> {
    let mut tmp = cache.temp_file().map_err(|e| e.to_string())?;
    let mut h = Sha256::new();
    let mut files = Vec::with_capacity(pycs.len());
    let mut offset = 0u64;
    for pyc in pycs {
        tmp.file.write_all(&pyc.bytes).map_err(|e| format!("writing {}: {e}", tmp.path().display()))?;
        h.update(&pyc.bytes);
        let len = pyc.bytes.len() as u64;
        files.push(RecordFile {
            path: pyc.path.clone(),
            mode: pyc.mode,
            dir_mode: pyc.dir_mode,
            offset,
            len,
            sha256: hex::encode(Sha256::digest(&pyc.bytes)),
        });
        offset += len;
    }
    let hex = hex::encode(h.finalize());
    cache.commit_blob(tmp, &hex).map_err(|e| e.to_string())?;
    let record = Record { schema: SCHEMA, pack: format!("sha256:{hex}"), size: offset, files };
    let json = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
    let path = record_path(cache, &unit.key);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    stackbuild_common::write_atomic(&path, &json).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "cpython-311";

    /// A context whose interpreter digest is `interpreter`.
    fn ctx(interpreter: &str) -> Context<'_> {
        Context {
            compiler: super::super::Compiler {
                interpreter,
                run: super::super::Invocation::current(),
                epoch: 0,
            },
            site: "/usr/local/lib/python3.11/dist-packages".into(),
        }
    }

    #[test]
    fn every_input_of_a_unit_is_part_of_its_key() {
        let tmp = site();
        let s = tmp.path();
        // A `.pyc` a wheel ships, a link where another goes, nothing at the third: every kind.
        std::fs::create_dir_all(s.join("pkg/__pycache__")).unwrap();
        std::fs::write(s.join("pkg/__pycache__/__init__.cpython-311.pyc"), b"shipped").unwrap();
        std::fs::create_dir_all(s.join("pkg/sub/__pycache__")).unwrap();
        std::os::unix::fs::symlink("elsewhere", s.join("pkg/sub/__pycache__/a.cpython-311.pyc")).unwrap();
        let digest = format!("python3.11:{}", "ab".repeat(32));
        let context = ctx(&digest);
        let inputs = unit_key(&context, s, "pkg", TAG).unwrap().unwrap();
        let changed = stackbuild_cache::assert_every_input_changes_key(
            "bytecode-unit",
            &inputs,
            &["context", "entry", "sources"],
        );
        for path in [
            "context.compiler.interpreter",
            "context.compiler.run.driver",
            "context.compiler.run.sandbox",
            "context.compiler.run.stage_mount",
            "context.compiler.run.unshare[0]",
            "context.compiler.run.env[2][1]",
            "context.compiler.epoch",
            "context.site",
            "entry",
            "sources[0].path",
            "sources[0].mode",
            "sources[0].sha256",
            "sources[0].before.file.mode",
            "sources[0].before.file.sha256",
            "sources[1].before.link.target",
            "sources[2].before",
        ] {
            assert!(changed.iter().any(|p| p == path), "{path} not checked: {changed:?}");
        }
        let u = unit(&context, s, "pkg", TAG).unwrap().unwrap();
        assert_eq!(u.key, stackbuild_cache::LayerKey::of("bytecode-unit", &inputs).as_hex());
    }

    fn site() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let s = tmp.path();
        std::fs::create_dir_all(s.join("pkg/sub")).unwrap();
        std::fs::create_dir_all(s.join("pkg-1.0.dist-info")).unwrap();
        std::fs::write(s.join("pkg/__init__.py"), b"x = 1\n").unwrap();
        std::fs::write(s.join("pkg/sub/b.py"), b"y = 2\n").unwrap();
        std::fs::write(s.join("pkg/sub/a.py"), b"z = 3\n").unwrap();
        std::fs::write(s.join("pkg/data.txt"), b"not code\n").unwrap();
        std::fs::write(s.join("pkg-1.0.dist-info/METADATA"), b"Name: pkg\n").unwrap();
        std::fs::write(s.join("mod.py"), b"w = 4\n").unwrap();
        tmp
    }

    #[test]
    fn units_follow_the_driver_walk_and_key_by_content() {
        let tmp = site();
        let s = tmp.path();
        let u = unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap();
        assert_eq!(u.sources, ["pkg/__init__.py", "pkg/sub/a.py", "pkg/sub/b.py"]);
        assert!(unit(&ctx("ctx"), s, "pkg-1.0.dist-info", TAG).unwrap().is_none(), "nothing to compile");
        assert!(unit(&ctx("ctx"), s, "__pycache__", TAG).unwrap().is_none());
        let m = unit(&ctx("ctx"), s, "mod.py", TAG).unwrap().unwrap();
        assert_eq!(m.sources, ["mod.py"]);
        assert_eq!(pyc_of("mod.py", TAG), "__pycache__/mod.cpython-311.pyc");
        assert_eq!(pyc_of("pkg/sub/a.py", TAG), "pkg/sub/__pycache__/a.cpython-311.pyc");
        // The same tree, the same key; another context, content or data file...
        assert_eq!(unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().key, u.key);
        assert_ne!(unit(&ctx("other"), s, "pkg", TAG).unwrap().unwrap().key, u.key);
        std::fs::write(s.join("pkg/data.txt"), b"changed\n").unwrap();
        assert_eq!(unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().key, u.key, "data files do not count");
        std::fs::write(s.join("pkg/sub/a.py"), b"z = 4\n").unwrap();
        assert_ne!(unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().key, u.key);
        std::fs::set_permissions(s.join("pkg/sub/a.py"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().key;
        std::fs::set_permissions(s.join("pkg/sub/a.py"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_ne!(
            unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().key,
            before,
            "the .pyc mode follows the source's"
        );
        // A blocked `__pycache__` leaves the directory's sources out, as the driver does.
        std::fs::write(s.join("pkg/sub/__pycache__"), b"").unwrap();
        assert_eq!(unit(&ctx("ctx"), s, "pkg", TAG).unwrap().unwrap().sources, ["pkg/__init__.py"]);
    }

    fn pycs() -> Vec<Pyc> {
        vec![
            Pyc {
                path: "pkg/__pycache__/__init__.cpython-311.pyc".into(),
                mode: 0o644,
                dir_mode: 0o755,
                bytes: b"one".to_vec(),
            },
            Pyc {
                path: "pkg/sub/__pycache__/a.cpython-311.pyc".into(),
                mode: 0o600,
                dir_mode: 0o755,
                bytes: b"two!".to_vec(),
            },
        ]
    }

    #[test]
    fn saved_units_come_back_verified_and_damage_is_a_miss() {
        let tmp = site();
        let cache = Cache::open(tmp.path().join("cache")).unwrap();
        let u = unit(&ctx("ctx"), tmp.path(), "pkg", TAG).unwrap().unwrap();
        assert_eq!(load(&cache, &u), Ok(None));
        save(&cache, &u, &pycs()).unwrap();
        assert_eq!(load(&cache, &u), Ok(Some(pycs())));

        // Restored as the driver writes them.
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(out.path().join("pkg/sub")).unwrap();
        restore(out.path(), &pycs()).unwrap();
        let got = std::fs::metadata(out.path().join("pkg/sub/__pycache__/a.cpython-311.pyc")).unwrap();
        assert_eq!(got.mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::read(out.path().join("pkg/__pycache__/__init__.cpython-311.pyc")).unwrap(),
            b"one"
        );

        // A flipped byte in the pack.
        let record: Record =
            serde_json::from_slice(&std::fs::read(record_path(&cache, &u.key)).unwrap()).unwrap();
        let pack = cache.blob_path(&record.pack).unwrap();
        std::fs::write(&pack, b"onf two!").unwrap();
        assert!(load(&cache, &u).is_err());
        // Saved again (after compiling), it is whole again.
        save(&cache, &u, &pycs()).unwrap();
        assert_eq!(load(&cache, &u), Ok(Some(pycs())));
        // A truncated record, a record pointing out of the unit, a missing pack.
        let rp = record_path(&cache, &u.key);
        let text = std::fs::read_to_string(&rp).unwrap();
        std::fs::write(&rp, &text[..text.len() / 2]).unwrap();
        assert!(load(&cache, &u).is_err());
        std::fs::write(&rp, text.replace("pkg/sub/__pycache__/a", "../evil/__pycache__/a")).unwrap();
        assert!(load(&cache, &u).is_err());
        std::fs::write(&rp, &text).unwrap();
        std::fs::remove_file(&pack).unwrap();
        assert!(load(&cache, &u).is_err());
    }

    #[test]
    fn records_stay_inside_their_unit() {
        assert!(belongs("pkg/__pycache__/a.cpython-311.pyc", "pkg"));
        assert!(belongs("__pycache__/mod.cpython-311.pyc", "mod.py"));
        assert!(!belongs("__pycache__/mod.cpython-311.pyc", "pkg"));
        assert!(!belongs("pkg/../x/__pycache__/a.pyc", "pkg"));
        assert!(!belongs("pkg/a.pyc", "pkg"));
        assert!(!belongs("/pkg/__pycache__/a.pyc", "pkg"));
        assert!(!belongs("pkg/__pycache__/a.py", "pkg"));
    }
}
