//! A source distribution unpacked for a build, and what its `pyproject.toml` says about building
//! it (PEP 517, PEP 518).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Most bytes an sdist may unpack to; a tar bomb stops here.
const MAX_UNPACKED: u64 = 8 << 30;
/// Most entries an sdist may have.
const MAX_ENTRIES: u64 = 500_000;
/// Most bytes of `pyproject.toml` read.
const MAX_PYPROJECT: u64 = 1 << 20;

/// Why an sdist could not be unpacked or read.
#[derive(Debug, thiserror::Error)]
pub enum SdistError {
    /// Reading or writing failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
    /// The archive is not a source distribution we unpack.
    #[error("{}: {problem}", path.display())]
    Bad {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

/// What `[build-system]` says (PEP 518), or PEP 517's fallback when there is none.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuildSystem {
    /// `requires`: the build requirements.
    pub requires: Vec<String>,
    /// `build-backend`: `module:object`.
    pub backend: String,
    /// `backend-path`: directories of the source tree put on `sys.path` (in-tree backends).
    pub backend_path: Vec<String>,
}

impl BuildSystem {
    /// The build environment's requirements: `requires` and then `extra` (the recipe's
    /// `extra_requires`), in the order `stackbuild lock` records them and a build asks for them,
    /// so the lock's `build_requires` are a prefix of what the build resolves. Those that
    /// `provided` names are left out: a build without isolation has the image's wheels, as pip's
    /// `--no-build-isolation` installs no build requirement (mamba's and causal-conv1d's
    /// `requires = ["torch", ...]` is the image's torch, not another one resolved beside it).
    pub fn requires_with(&self, extra: &[String], provided: &[stackbuild_python::Artifact]) -> Vec<String> {
        self.requires
            .iter()
            .chain(extra)
            .filter(|r| {
                let name = <pep508_rs::Requirement<pep508_rs::VerbatimUrl> as std::str::FromStr>::from_str(r)
                    .map(|req| req.name);
                !name.is_ok_and(|n| provided.iter().any(|a| a.name == n))
            })
            .cloned()
            .collect()
    }

    /// PEP 517's fallback for a project without `build-backend`: setuptools' legacy backend,
    /// which runs `setup.py`, and pip's and uv's `setuptools>=40.8.0`.
    fn legacy() -> Self {
        Self {
            requires: vec!["setuptools>=40.8.0".to_owned()],
            backend: "setuptools.build_meta:__legacy__".to_owned(),
            backend_path: Vec::new(),
        }
    }
}

/// Unpacks `archive` (`.tar.gz`, `.tar.bz2`, `.tar.xz`, `.tar`, `.zip`) into `dest` and returns
/// the project directory: the one top-level directory (PEP 625), or `dest` itself. Only files,
/// directories and symlinks that stay inside are written; nothing is written through a symlink.
#[allow(clippy::case_sensitive_file_extension_comparisons)] // `name` is lowercased first
pub fn unpack(archive: &Path, dest: &Path) -> Result<PathBuf, SdistError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| SdistError::Io { what, path, source }
    };
    let bad = |problem: String| SdistError::Bad { path: archive.to_owned(), problem };
    let name = archive.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_ascii_lowercase();
    std::fs::create_dir_all(dest).map_err(io("creating", dest))?;
    if name.ends_with(".zip") {
        let file = stackbuild_common::open_regular(archive, "source distribution")
            .map_err(|e| bad(e.to_string()))?;
        let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(format!("not a zip archive: {e}")))?;
        let mut total = 0u64;
        if zip.len() as u64 > MAX_ENTRIES {
            return Err(bad(format!("more than {MAX_ENTRIES} entries")));
        }
        for i in 0..zip.len() {
            let mut member = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
            let Some(rel) = member.enclosed_name() else {
                return Err(bad(format!("member {:?} leaves the archive's directory", member.name())));
            };
            let out = dest.join(rel);
            if member.is_dir() {
                std::fs::create_dir_all(&out).map_err(io("creating", &out))?;
                continue;
            }
            if member.is_symlink() {
                continue;
            }
            total += member.size();
            if total > MAX_UNPACKED {
                return Err(bad(format!("unpacks to more than {MAX_UNPACKED} bytes")));
            }
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
            }
            let mut f = std::fs::File::create_new(&out).map_err(io("creating", &out))?;
            std::io::copy(&mut (&mut member).take(MAX_UNPACKED), &mut f).map_err(io("writing", &out))?;
            if member.unix_mode().is_some_and(|m| m & 0o111 != 0) {
                use std::os::unix::fs::PermissionsExt as _;
                std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755))
                    .map_err(io("chmod", &out))?;
            }
        }
    } else {
        let file = stackbuild_common::open_regular(archive, "source distribution")
            .map_err(|e| bad(e.to_string()))?;
        let reader: Box<dyn std::io::Read> = if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
            Box::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)))
        } else if name.ends_with(".tar") {
            Box::new(std::io::BufReader::new(file))
        } else {
            return Err(bad("expected a .tar.gz, .tar or .zip source distribution".to_owned()));
        };
        let mut tar = tar::Archive::new(reader.take(MAX_UNPACKED));
        tar.set_preserve_permissions(false);
        tar.set_unpack_xattrs(false);
        tar.set_overwrite(false);
        let mut count = 0u64;
        for entry in tar.entries().map_err(|e| bad(e.to_string()))? {
            let mut entry = entry.map_err(|e| bad(format!("not a tar archive: {e}")))?;
            count += 1;
            if count > MAX_ENTRIES {
                return Err(bad(format!("more than {MAX_ENTRIES} entries")));
            }
            match entry.header().entry_type() {
                tar::EntryType::Regular
                | tar::EntryType::Directory
                | tar::EntryType::Continuous
                | tar::EntryType::Symlink => {}
                // pax and GNU headers are read by the tar crate; links to other members,
                // devices and FIFOs have no place in a source tree.
                _ => continue,
            }
            // `unpack_in` refuses `..` and absolute paths and any write through a symlink that
            // leads out of `dest` (it checks the canonical parent of every path).
            let ok = entry.unpack_in(dest).map_err(|e| bad(format!("unpacking: {e}")))?;
            if !ok {
                return Err(bad("a member leaves the archive's directory".to_owned()));
            }
        }
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dest).map_err(io("listing", dest))? {
        let entry = entry.map_err(io("listing", dest))?;
        dirs.push((entry.path(), entry.file_type().map_err(io("reading", dest))?.is_dir()));
    }
    Ok(match dirs.as_slice() {
        [(only, true)] => only.clone(),
        _ => dest.to_owned(),
    })
}

/// Reads the `[build-system]` of the project in `dir`.
pub fn build_system(dir: &Path) -> Result<BuildSystem, SdistError> {
    let path = dir.join("pyproject.toml");
    let meta = match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BuildSystem::legacy()),
        other => other.map_err(|source| SdistError::Io { what: "reading", path: path.clone(), source })?,
    };
    if !meta.is_file() {
        return Err(SdistError::Bad { path, problem: "not a regular file".to_owned() });
    }
    let text = stackbuild_common::read_capped(&path, MAX_PYPROJECT, "pyproject.toml")
        .map_err(|e| SdistError::Bad { path: path.clone(), problem: e.to_string() })?;
    parse_build_system(text, path)
}

/// The `[build-system]` of the sdist at `archive`, read from its `pyproject.toml` without
/// unpacking it: what a built wheel's key needs, so that a wheel built before is found
/// without unpacking its sdist again (deepspeed's took most of a rebuild with nothing
/// changed). The unpacked project is read again before a build (`build_system`), which also
/// refuses a `pyproject.toml` that is not a regular file.
pub(crate) fn build_system_of_archive(archive: &Path) -> Result<BuildSystem, SdistError> {
    let bad = |problem: String| SdistError::Bad { path: archive.to_owned(), problem };
    let cap = MAX_PYPROJECT + 1;
    match stackbuild_python::sdist_top_member(archive, "pyproject.toml", cap).map_err(bad)? {
        None => Ok(BuildSystem::legacy()),
        Some(text) if text.len() as u64 >= cap => {
            Err(bad(format!("its pyproject.toml is larger than {MAX_PYPROJECT} bytes")))
        }
        Some(text) => parse_build_system(text, archive.join("pyproject.toml")),
    }
}

/// [`build_system_of_archive`] of the sdist whose content is `sha256`, recorded under
/// `<cache>/sdist-build-system/`: a rebuild with nothing changed reads a small record instead of
/// inflating the archive up to its `pyproject.toml` (most of deepspeed's 2 MB sdist). The record
/// is keyed by the archive's content, so it cannot go stale; an unreadable one is read again.
pub fn build_system_recorded(
    cache_root: &Path,
    archive: &Path,
    sha256: &str,
) -> Result<BuildSystem, SdistError> {
    let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
    let record = cache_root.join("sdist-build-system").join(format!("v1-{sha256}.json"));
    if let Some(system) = stackbuild_common::read_record(&record).filter(|_| hex) {
        return Ok(system);
    }
    let system = build_system_of_archive(archive)?;
    if hex {
        stackbuild_common::write_record(&record, &system);
    }
    Ok(system)
}

fn parse_build_system(text: Vec<u8>, path: PathBuf) -> Result<BuildSystem, SdistError> {
    #[derive(Deserialize)]
    struct Pyproject {
        #[serde(rename = "build-system")]
        build_system: Option<Raw>,
    }
    #[derive(Deserialize)]
    struct Raw {
        requires: Option<Vec<String>>,
        #[serde(rename = "build-backend")]
        backend: Option<String>,
        #[serde(rename = "backend-path", default)]
        backend_path: Vec<String>,
    }
    let text = String::from_utf8(text)
        .map_err(|_| SdistError::Bad { path: path.clone(), problem: "not UTF-8".into() })?;
    let parsed: Pyproject = toml::from_str(&text)
        .map_err(|e| SdistError::Bad { path: path.clone(), problem: format!("not valid TOML: {e}") })?;
    let Some(raw) = parsed.build_system else { return Ok(BuildSystem::legacy()) };
    let legacy = BuildSystem::legacy();
    let system = BuildSystem {
        // PEP 518: `requires` is mandatory in the table; pip and uv take the fallback's.
        requires: raw.requires.unwrap_or(legacy.requires),
        backend: raw.backend.unwrap_or(legacy.backend),
        backend_path: raw.backend_path,
    };
    for p in &system.backend_path {
        // PEP 517: backend-path entries are relative to the project and stay inside it.
        if Path::new(p).is_absolute()
            || Path::new(p).components().any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(SdistError::Bad { path, problem: format!("backend-path {p:?} leaves the project") });
        }
    }
    Ok(system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_without_build_system_gets_the_legacy_backend() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(build_system(dir.path()).unwrap(), BuildSystem::legacy());
        std::fs::write(dir.path().join("pyproject.toml"), "[tool.black]\nline-length = 100\n").unwrap();
        assert_eq!(build_system(dir.path()).unwrap(), BuildSystem::legacy());
        std::fs::write(
            dir.path().join("pyproject.toml"),
            "[build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n",
        )
        .unwrap();
        let s = build_system(dir.path()).unwrap();
        assert_eq!((s.requires, s.backend.as_str()), (vec!["hatchling".to_owned()], "hatchling.build"));
        std::fs::write(
            dir.path().join("pyproject.toml"),
            "[build-system]\nrequires = []\nbuild-backend = \"b\"\nbackend-path = [\"../x\"]\n",
        )
        .unwrap();
        assert!(build_system(dir.path()).unwrap_err().to_string().contains("leaves the project"));
    }

    /// mamba-ssm's `requires = ["setuptools>=61.0.0", "wheel", "torch", "packaging", "ninja"]`,
    /// built without isolation beside the image's torch and packaging: those two are the
    /// image's, the rest resolved, in the order given.
    #[test]
    fn a_build_without_isolation_takes_what_the_image_has() {
        let system = BuildSystem {
            requires: ["setuptools>=61.0.0", "wheel", "torch", "packaging", "ninja"]
                .map(str::to_owned)
                .to_vec(),
            backend: "setuptools.build_meta".to_owned(),
            backend_path: Vec::new(),
        };
        let image = |name: &str| stackbuild_python::Artifact {
            name: name.parse().unwrap(),
            version: "1.0".parse().unwrap(),
            filename: format!("{name}-1.0-py3-none-any.whl"),
            sha256: "0".repeat(64),
            size: 1,
            path: PathBuf::new(),
        };
        let extra = ["psutil".to_owned()];
        assert_eq!(
            system.requires_with(&extra, &[image("torch"), image("packaging")]),
            ["setuptools>=61.0.0", "wheel", "ninja", "psutil"]
        );
        assert_eq!(system.requires_with(&extra, &[]).len(), 6);
    }

    #[test]
    fn unpacking_refuses_what_leaves_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("evil-1.0.tar");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "evil-1.0/out", "/etc").unwrap();
        let data = b"x";
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        b.append_data(&mut h, "evil-1.0/out/passwd", &data[..]).unwrap();
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let err = unpack(&archive, &dir.path().join("x")).unwrap_err();
        assert!(err.to_string().contains("unpacking") || err.to_string().contains("leaves"), "{err}");
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o644);
        b.append_data(&mut h, "good-1.0/setup.py", &b""[..]).unwrap();
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let project = unpack(&archive, &dir.path().join("y")).unwrap();
        assert!(project.ends_with("good-1.0"));
    }

    /// The `[build-system]` of an archive is read once per content: the record stands in for the
    /// archive afterwards, and a record under another sha256 is not taken.
    #[test]
    fn an_archives_build_system_is_recorded_by_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("demo-1.0.tar");
        let mut b = tar::Builder::new(Vec::new());
        let text = b"[build-system]\nrequires = [\"flit_core\"]\nbuild-backend = \"flit_core.buildapi\"\n";
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, "demo-1.0/pyproject.toml", &text[..]).unwrap();
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let sha = "a".repeat(64);
        let cache = dir.path().join("cache");
        let first = build_system_recorded(&cache, &archive, &sha).unwrap();
        assert_eq!(first.backend, "flit_core.buildapi");
        // The archive is gone: the record answers.
        std::fs::remove_file(&archive).unwrap();
        assert_eq!(build_system_recorded(&cache, &archive, &sha).unwrap(), first);
        assert!(build_system_recorded(&cache, &archive, &"b".repeat(64)).is_err());
    }
}
