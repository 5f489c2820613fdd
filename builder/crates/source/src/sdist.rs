//! Trees as source distributions: a git commit or a directory made into a reproducible
//! `.tar.gz` that the build sandbox builds like any sdist (the recipe's projects and git
//! dependencies).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use stackbuild_common::io_err;

use crate::source::{stage_git, stage_path_excluding, SourceError};

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

/// The directory `src` (a `[[source]]` path, the project itself) as a source distribution, like
/// [`git_sdist`]: staged as a path source is (symlinks checked inside the tree, `.git` and
/// `exclude` left out), then archived the same way. Returns its sha256.
pub fn path_sdist(src: &Path, exclude: &[&Path], prefix: &str, out: &Path) -> Result<String, SourceError> {
    let tmp = tempfile::Builder::new()
        .prefix(".path-sdist-")
        .tempdir_in(out.parent().unwrap_or(Path::new(".")))
        .map_err(io_err("creating a directory beside", out))?;
    stage_path_excluding(src, "/tree", tmp.path(), exclude)?;
    tree_sdist(&tmp.path().join("tree"), prefix, out)
}

/// `root` as a reproducible `.tar.gz` under the top directory `prefix` ([`git_sdist`]).
fn tree_sdist(root: &Path, prefix: &str, out: &Path) -> Result<String, SourceError> {
    let root = root.to_path_buf();
    let file = fs::File::create(out).map_err(io_err("creating", out))?;
    let gz = flate2::GzBuilder::new().mtime(0).write(io::BufWriter::new(file), flate2::Compression::new(6));
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
