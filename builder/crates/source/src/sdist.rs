//! Trees as source distributions: a git commit or a directory made into a reproducible
//! `.tar.gz` that the build sandbox builds like any sdist (the recipe's projects and git
//! dependencies).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use stackbuild_common::io_err;

use crate::source::{digest_path_excluding, stage_git, stage_path_excluding, SourceError};

/// `commit` of the repository at `url` as a source distribution (`.tar.gz`, what PEP 625 and uv
/// accept): a tar whose one top directory `prefix` holds the tree, every entry in sorted order
/// with a fixed mtime, owner 0 and mode 0644 or 0755, gzip-compressed at level 6 with mtime 0 in
/// its header. The same commit gives the same bytes on every machine running the same
/// stackbuild (the deflate implementation is pinned by its `Cargo.lock`; a stackbuild with
/// another one would make other bytes, and the build would say to lock again). Returns its
/// sha256.
pub fn git_sdist(
    url: &str,
    commit: &str,
    subdirectory: Option<&str>,
    cache_dir: &Path,
    prefix: &str,
    out: &Path,
) -> Result<String, SourceError> {
    let tmp = tempfile::Builder::new()
        .prefix(".git-sdist-")
        .tempdir_in(out.parent().unwrap_or(Path::new(".")))
        .map_err(io_err("creating a directory beside", out))?;
    stage_git(url, commit, "/tree", tmp.path(), cache_dir)?;
    let mut root = tmp.path().join("tree");
    // `#subdirectory=`: a directory of the staged tree, reached through real directories only
    // (a symlink in the repository could point anywhere on this machine).
    for part in subdirectory.into_iter().flat_map(|s| s.split('/')) {
        root.push(part);
        let is_dir = fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir());
        if part == ".." || part.is_empty() || !is_dir {
            return Err(SourceError::Unsafe {
                origin: format!("{url}@{commit}"),
                entry: subdirectory.unwrap_or_default().to_owned(),
                reason: "the subdirectory is not a directory of the repository".to_owned(),
            });
        }
    }
    tree_sdist(&root, prefix, out)
}

/// Where [`path_sdist`] records the sdist each staged tree made, and which sdists are still at
/// hand: an unchanged tree is not archived and compressed again (a no-change build of `DreamZero`'s
/// 11 MB checkout spent 0.3 s there).
pub struct SdistMemo<'a> {
    /// The directory of the records.
    pub dir: &'a Path,
    /// Whether the sdist of this sha256 is still at hand (the caller keeps them by sha256).
    pub have: &'a dyn Fn(&str) -> bool,
}

/// What an sdist of a staged tree is made of: the key of its [`SdistMemo`] record.
#[derive(serde::Serialize)]
struct PathSdistKey<'a> {
    /// The staged tree's digest ([`crate::source`]'s `tree_digest`: paths, modes, contents,
    /// link targets).
    tree_sha256: &'a str,
    /// The archive's top directory.
    prefix: &'a str,
    /// The gzip level and the deflate implementation (the workspace's `flate2` feature).
    gzip_level: u32,
    deflate: &'static str,
}

/// Level of the sdists' gzip.
const SDIST_GZIP_LEVEL: u32 = 6;

/// The directory `src` (a `[[source]]` path, the project itself) as a source distribution, like
/// [`git_sdist`]: staged as a path source is (symlinks checked inside the tree, `.git` and
/// `exclude` left out), then archived the same way. Returns its sha256; with a `memo` that
/// has the sdist of the same staged tree at hand, `out` is not written.
pub fn path_sdist(
    src: &Path,
    exclude: &[&Path],
    prefix: &str,
    out: &Path,
    memo: Option<&SdistMemo<'_>>,
) -> Result<String, SourceError> {
    let record = |m: &SdistMemo<'_>, tree_sha256: &str| {
        let key = PathSdistKey { tree_sha256, prefix, gzip_level: SDIST_GZIP_LEVEL, deflate: "zlib-rs" };
        let json = serde_json::to_vec(&key).unwrap_or_default();
        m.dir.join(format!("{}.json", stackbuild_common::sha256_bytes(&json).trim_start_matches("sha256:")))
    };
    // The tree's digest without copying it ([`digest_path_excluding`]): an unchanged tree whose
    // sdist is at hand is neither staged nor archived.
    if let Some(m) = memo {
        let tree = digest_path_excluding(src, exclude)?;
        if let Some(sha256) = stackbuild_common::read_record::<String>(&record(m, &tree.tree_sha256)) {
            if (m.have)(&sha256) {
                return Ok(sha256);
            }
        }
    }
    let tmp = tempfile::Builder::new()
        .prefix(".path-sdist-")
        .tempdir_in(out.parent().unwrap_or(Path::new(".")))
        .map_err(io_err("creating a directory beside", out))?;
    // Recorded under the copy's digest: a tree changed while it was read is keyed by what was
    // archived.
    let staged = stage_path_excluding(src, "/tree", tmp.path(), exclude)?;
    let sha256 = tree_sdist(&tmp.path().join("tree"), prefix, out)?;
    if let Some(m) = memo {
        stackbuild_common::write_record(&record(m, &staged.tree_sha256), &sha256);
    }
    Ok(sha256)
}

/// `root` as a reproducible `.tar.gz` under the top directory `prefix` ([`git_sdist`]).
fn tree_sdist(root: &Path, prefix: &str, out: &Path) -> Result<String, SourceError> {
    let root = root.to_path_buf();
    let file = fs::File::create(out).map_err(io_err("creating", out))?;
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(io::BufWriter::new(file), flate2::Compression::new(SDIST_GZIP_LEVEL));
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let mut stack = vec![(root.clone(), PathBuf::from(prefix))];
    let mut entries: Vec<(PathBuf, PathBuf)> = Vec::new();
    while let Some((dir, rel)) = stack.pop() {
        let mut names: Vec<_> = fs::read_dir(&dir)
            .map_err(io_err("listing", &dir))?
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names.into_iter().rev() {
            let path = dir.join(&name);
            let rel = rel.join(&name);
            if fs::symlink_metadata(&path).map_err(io_err("reading", &path))?.is_dir() {
                stack.push((path.clone(), rel.clone()));
            }
            entries.push((path, rel));
        }
    }
    entries.sort_by(|a, b| a.1.cmp(&b.1));
    for (path, rel) in entries {
        tar.append_path_with_name(&path, &rel).map_err(io_err("archiving", &path))?;
    }
    tar.into_inner()
        .map_err(io_err("writing", out))?
        .finish()
        .map_err(io_err("writing", out))?
        .into_inner()
        .map_err(|e| io_err("writing", out)(e.into_error()))?
        .sync_all()
        .map_err(io_err("syncing", out))?;
    let (hex, _) = stackbuild_common::sha256_reader(fs::File::open(out).map_err(io_err("opening", out))?)
        .map_err(io_err("hashing", out))?;
    Ok(hex.trim_start_matches("sha256:").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_tree_is_not_archived_again_while_its_sdist_is_at_hand() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("proj");
        fs::create_dir_all(src.join("pkg")).unwrap();
        fs::write(src.join("pyproject.toml"), "[project]\nname = \"p\"\n").unwrap();
        fs::write(src.join("pkg/__init__.py"), "x = 1\n").unwrap();
        let (records, out_dir) = (dir.path().join("records"), dir.path().join("out"));
        fs::create_dir_all(&out_dir).unwrap();
        let made = std::cell::RefCell::new(Vec::<String>::new());
        let have = |sha: &str| made.borrow().iter().any(|m| m == sha);
        let memo = SdistMemo { dir: &records, have: &have };
        let sdist = |name: &str| {
            let out = out_dir.join(name);
            let sha = path_sdist(&src, &[], "p-1.0", &out, Some(&memo)).unwrap();
            (sha, out.is_file())
        };

        let (first, written) = sdist("a.tar.gz");
        assert!(written);
        assert_eq!(first, stackbuild_common::sha256_file(&out_dir.join("a.tar.gz")).unwrap());
        made.borrow_mut().push(first.clone());
        assert_eq!(sdist("b.tar.gz"), (first.clone(), false), "the same tree: the sdist made before");

        // A changed file is another sdist; the first one gone, it is made again.
        fs::write(src.join("pkg/__init__.py"), "x = 2\n").unwrap();
        let (second, written) = sdist("c.tar.gz");
        assert!(written && second != first);
        fs::write(src.join("pkg/__init__.py"), "x = 1\n").unwrap();
        made.borrow_mut().clear();
        assert_eq!(sdist("d.tar.gz"), (first, true), "not at hand: made again, the same bytes");
    }
}
