//! Model and code sources staged into a directory tree: a git commit or a local directory.
//!
//! A git source is fetched into a bare mirror in the cache (`<cache>/git/<sha256(url)>`, cloned
//! with `git clone --mirror`, refreshed with `git fetch`), then `git archive <commit>` is read
//! in-process, entry by entry, and written under the destination. Nothing is ever `unpack`ed by a
//! generic helper: every name is checked (no `..`, no absolute names), parents are created here or
//! checked to be real directories, files are created with `create_new` (which refuses to follow a
//! symlink), and a symlink is kept only when its target stays inside the source tree. These are
//! the lessons of the archive-extraction advisories: umoci CVE-2021-29136, containerd
//! CVE-2021-32760 and the Rust `tar` advisories RUSTSEC-2018-0002 and RUSTSEC-2021-0080 (entries
//! with `..`, absolute names, or symlinks that later entries write through).
//!
//! Git runs with a clean environment: no system or user configuration (`GIT_CONFIG_NOSYSTEM=1`,
//! `HOME` pointing into the cache), no prompts (`GIT_TERMINAL_PROMPT=0`), and only the transports
//! `file`, `git`, `http`, `https` and `ssh` (`GIT_ALLOW_PROTOCOL`), so that a recipe URL such as
//! `ext::sh -c ...` cannot run a command (<https://git-scm.com/docs/git#Documentation/git.txt-GITALLOWPROTOCOL>).
//!
//! [`StagedSource::tree_sha256`] digests the staged tree (paths, kinds, modes, contents, link
//! targets) so that the lock file and the layer cache can key on the content, whichever way it
//! was staged.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, BufWriter, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;

use sha2::{Digest, Sha256};

use stackbuild_common::InputError;
use stackbuild_common::{io_err, IoError};

/// Environment variables passed through to git: the search path, proxies and CA bundles, which
/// fetching over HTTPS may need. Everything else is cleared.
const PASS_ENV: &[&str] = &[
    "PATH",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Most of git's stderr kept for an error message.
const STDERR_CAP: usize = 8 << 10;

/// What was staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedSource {
    /// Regular files and symlinks staged.
    pub files: usize,
    /// Bytes of the regular files.
    pub bytes: u64,
    /// Digest of the staged tree, lowercase hex; see [`tree_digest`].
    pub tree_sha256: String,
}

/// Why a source could not be staged.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The commit is not a full 40-hex-digit object name.
    #[error("git source {url}: commit {commit:?} must be a full 40-hex-digit commit id")]
    InvalidCommit {
        /// The repository URL.
        url: String,
        /// The commit as given.
        commit: String,
    },
    /// The destination is not a clean absolute in-image path.
    #[error("destination {dest:?}: {problem}")]
    InvalidDest {
        /// The destination as given.
        dest: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The local source directory is not a directory.
    #[error("source directory {}: not a directory", path.display())]
    NotADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The local source directory is a symlink.
    #[error(
        "source directory {}: is a symlink; name the directory itself (a source must be a real \
         directory: a link can be re-pointed between lock and build)",
        path.display()
    )]
    SymlinkRoot {
        /// The path given.
        path: PathBuf,
    },
    /// git could not be started.
    #[error("cannot run git: {source}")]
    Spawn {
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A git command failed.
    #[error("git source {url}: `git {args}` failed ({status}): {stderr}")]
    Git {
        /// The repository URL.
        url: String,
        /// The git arguments.
        args: String,
        /// How git exited.
        status: String,
        /// What git printed on stderr (trimmed, capped).
        stderr: String,
    },
    /// The commit is not in the repository, even after fetching.
    #[error("git source {url}: commit {commit} not found (fetched all refs and asked for it by id)")]
    CommitNotFound {
        /// The repository URL.
        url: String,
        /// The commit.
        commit: String,
    },
    /// An entry that would leave the tree, or a file type that has no place in a layer.
    #[error("{origin}: unsafe entry {entry:?}: {reason}")]
    Unsafe {
        /// `url@commit` or the local directory.
        origin: String,
        /// The path inside the source.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A file of the tree is not a regular file any more, or could not be opened.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Reading the `git archive` stream failed.
    #[error("git source {url}: reading `git archive {commit}`: {source}")]
    Archive {
        /// The repository URL.
        url: String,
        /// The commit.
        commit: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Stages `commit` of the repository at `url` into `stage` at `dest_in_image` (an absolute
/// in-image path such as `/opt/model`), using a mirror under `cache_dir/git/`.
pub fn stage_git(
    url: &str,
    commit: &str,
    dest_in_image: &str,
    stage: &Path,
    cache_dir: &Path,
) -> Result<StagedSource, SourceError> {
    let commit = commit.to_ascii_lowercase();
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SourceError::InvalidCommit { url: url.to_owned(), commit });
    }
    let git = Git::new(url, cache_dir)?;
    git.ensure_commit(&commit)?;
    let dest = prepare_dest(stage, dest_in_image)?;
    git.archive_into(&commit, &dest)?;
    check_links(&dest, &dest, Path::new(""), &format!("{url}@{commit}"))?;
    tree_digest(&dest)
}

#[cfg(test)]
/// Stages the local directory `src` into `stage` at `dest_in_image`, skipping `.git`.
///
/// Symlinks are copied as symlinks (never followed) when their target, resolved link by link
/// inside `src`, stays inside `src`; sockets, devices and FIFOs are refused.
pub(crate) fn stage_path(src: &Path, dest_in_image: &str, stage: &Path) -> Result<StagedSource, SourceError> {
    stage_path_excluding(src, dest_in_image, stage, &[])
}

/// [`stage_path`], skipping the directories `exclude` (the cache, the output) and `stage` itself
/// wherever they appear inside `src`: a source `path = "."` whose tree holds the cache would
/// otherwise copy the stage into itself, level after level.
///
/// `src` itself must be a real directory, not a symlink to one: the lock records the tree's
/// digest under the recipe's path, and a link can be re-pointed between lock and build (or at a
/// directory of someone else's, such as `/root`).
pub fn stage_path_excluding(
    src: &Path,
    dest_in_image: &str,
    stage: &Path,
    exclude: &[&Path],
) -> Result<StagedSource, SourceError> {
    let meta = fs::symlink_metadata(src).map_err(io_err("reading", src))?;
    if meta.file_type().is_symlink() {
        return Err(SourceError::SymlinkRoot { path: src.to_owned() });
    }
    if !meta.is_dir() {
        return Err(SourceError::NotADirectory { path: src.to_owned() });
    }
    let dest = prepare_dest(stage, dest_in_image)?;
    let mut skip = Skip::default();
    for dir in exclude.iter().copied().chain([stage, dest.as_path()]) {
        if let Ok(m) = fs::metadata(dir) {
            skip.ids.push((m.dev(), m.ino()));
        }
    }
    let origin = src.display().to_string();
    walk_source(src, Path::new(""), &origin, &skip, &mut Stage { dest: &dest, origin: &origin })?;
    tree_digest(&dest)
}

/// Directories (by device and inode, so that any spelling of their path matches) not copied.
#[derive(Default)]
struct Skip {
    ids: Vec<(u64, u64)>,
}

impl Skip {
    fn contains(&self, meta: &fs::Metadata) -> bool {
        self.ids.contains(&(meta.dev(), meta.ino()))
    }
}

/// Digests a staged tree: sha256 over one record per entry below `root` (the root itself
/// excluded), sorted by relative path bytes:
///
/// - a directory: `d <mode> <path>\n`
/// - a regular file: `f <mode> <path>\0<sha256 hex of content>\n`
/// - a symlink: `l <path>\0<target>\n`
///
/// `<mode>` is the permission bits in octal. Also counts files and bytes.
pub(crate) fn tree_digest(root: &Path) -> Result<StagedSource, SourceError> {
    let mut listed = Vec::new();
    collect(root, Path::new(""), &mut listed)?;
    let mut entries = Vec::with_capacity(listed.len());
    for (rel, meta) in listed {
        let path = root.join(&rel);
        let mode = meta.permissions().mode() & 0o7777;
        let ft = meta.file_type();
        let entry = if ft.is_dir() {
            TreeEntry::Dir(mode)
        } else if ft.is_symlink() {
            TreeEntry::Link(fs::read_link(&path).map_err(io_err("reading link", &path))?)
        } else {
            let mut file = File::open(&path).map_err(io_err("opening", &path))?;
            let (hex, size) = hash_reader(&mut file, &path)?;
            TreeEntry::File(mode, hex, size)
        };
        entries.push((rel, entry));
    }
    Ok(digest_entries(entries))
}

/// One entry of a tree, as [`tree_digest`] records it.
enum TreeEntry {
    Dir(u32),
    /// Mode, sha256 of the content (hex), size.
    File(u32, String, u64),
    Link(PathBuf),
}

/// The record of [`tree_digest`] over `entries` (paths relative to the tree's root).
fn digest_entries(mut entries: Vec<(PathBuf, TreeEntry)>) -> StagedSource {
    entries.sort_by(|a, b| a.0.as_os_str().as_bytes().cmp(b.0.as_os_str().as_bytes()));
    let mut hasher = Sha256::new();
    let (mut files, mut bytes) = (0, 0);
    for (rel, entry) in entries {
        let rel = rel.as_os_str().as_bytes();
        match entry {
            TreeEntry::Dir(mode) => {
                hasher.update(format!("d {mode:o} ").as_bytes());
                hasher.update(rel);
                hasher.update(b"\n");
            }
            TreeEntry::Link(target) => {
                hasher.update(b"l ");
                hasher.update(rel);
                hasher.update(b"\0");
                hasher.update(target.as_os_str().as_bytes());
                hasher.update(b"\n");
                files += 1;
            }
            TreeEntry::File(mode, hex, size) => {
                hasher.update(format!("f {mode:o} ").as_bytes());
                hasher.update(rel);
                hasher.update(b"\0");
                hasher.update(hex.as_bytes());
                hasher.update(b"\n");
                files += 1;
                bytes += size;
            }
        }
    }
    StagedSource { files, bytes, tree_sha256: hex::encode(hasher.finalize()) }
}

fn hash_reader(reader: &mut impl Read, path: &Path) -> Result<(String, u64), SourceError> {
    let mut content = Sha256::new();
    let size = io::copy(reader, &mut content).map_err(io_err("reading", path))?;
    Ok((hex::encode(content.finalize()), size))
}

/// The digest [`stage_path_excluding`] gives `src`, read in place: nothing is copied. A build
/// looks the sources layer up by it and stages the directory only when that misses, so a
/// rebuild of unchanged local sources creates no file (copying a checkout of a few hundred
/// files cost `recipes/dreamzero.toml` with `--source` about 40 ms of a 80 ms rebuild, most of
/// it in ext4's inode allocator, `perf`). The entries are what the copy would hold, with the
/// modes it would give them and the same refusals; a tree that changes while it is read gives a
/// digest no layer has, and the build then stages it and keys the layer by the copy.
pub fn digest_path_excluding(src: &Path, exclude: &[&Path]) -> Result<StagedSource, SourceError> {
    let meta = fs::symlink_metadata(src).map_err(io_err("reading", src))?;
    if meta.file_type().is_symlink() {
        return Err(SourceError::SymlinkRoot { path: src.to_owned() });
    }
    if !meta.is_dir() {
        return Err(SourceError::NotADirectory { path: src.to_owned() });
    }
    let mut skip = Skip::default();
    for dir in exclude {
        if let Ok(m) = fs::metadata(dir) {
            skip.ids.push((m.dev(), m.ino()));
        }
    }
    let mut record = Record::default();
    walk_source(src, Path::new(""), &src.display().to_string(), &skip, &mut record)?;
    Ok(digest_entries(record.0))
}

fn collect(root: &Path, rel: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) -> Result<(), SourceError> {
    let dir = root.join(rel);
    for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
        let entry = entry.map_err(io_err("listing", &dir))?;
        let meta = entry.metadata().map_err(io_err("reading", &entry.path()))?;
        let child = rel.join(entry.file_name());
        if meta.is_dir() {
            collect(root, &child, out)?;
        }
        out.push((child, meta));
    }
    Ok(())
}

/// Checks `dest_in_image`, creates its parents in `stage` and the directory itself (an existing
/// empty directory is accepted), and returns its path on the host.
fn prepare_dest(stage: &Path, dest_in_image: &str) -> Result<PathBuf, SourceError> {
    let invalid = |problem| SourceError::InvalidDest { dest: dest_in_image.to_owned(), problem };
    let rel = dest_in_image.strip_prefix('/').ok_or_else(|| invalid("must be an absolute in-image path"))?;
    let mut parts = Vec::new();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid("must not contain `..`")),
            p if p.contains('\0') => return Err(invalid("must not contain NUL")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(invalid("must not be the image root"));
    }
    fs::create_dir_all(stage).map_err(io_err("creating", stage))?;
    let dest = ensure_dirs(
        stage,
        parts.iter().map(OsStr::new),
        stage.display().to_string().as_str(),
        dest_in_image,
    )?;
    let mut listing = fs::read_dir(&dest).map_err(io_err("listing", &dest))?;
    if listing.next().is_some() {
        return Err(invalid("already exists and is not empty"));
    }
    Ok(dest)
}

/// Creates (mode 0755) or walks the directories `parts` below `root`, refusing any existing
/// component that is not a real directory, and returns the last one.
fn ensure_dirs<'p>(
    root: &Path,
    parts: impl IntoIterator<Item = &'p OsStr>,
    origin: &str,
    entry: &str,
) -> Result<PathBuf, SourceError> {
    let mut dir = root.to_owned();
    for part in parts {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(SourceError::Unsafe {
                    origin: origin.to_owned(),
                    entry: entry.to_owned(),
                    reason: format!("{} exists and is not a directory", dir.display()),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&dir).map_err(io_err("creating", &dir))?;
                fs::set_permissions(&dir, Permissions::from_mode(0o755))
                    .map_err(io_err("setting permissions of", &dir))?;
            }
            Err(e) => return Err(IoError { op: "reading", path: dir, source: e }.into()),
        }
    }
    Ok(dir)
}

/// Splits an archive or tree entry name into normal components, or says why it is unsafe.
fn entry_parts(name: &[u8]) -> Result<Vec<&OsStr>, &'static str> {
    if name.starts_with(b"/") {
        return Err("absolute path");
    }
    let name = name.strip_suffix(b"/").unwrap_or(name);
    let mut parts = Vec::new();
    for part in name.split(|b| *b == b'/') {
        match part {
            b"" => return Err("empty path component"),
            b"." => return Err("`.` component"),
            b".." => return Err("`..` component"),
            p if p.contains(&0) => return Err("NUL in the name"),
            p => parts.push(OsStr::from_bytes(p)),
        }
    }
    Ok(parts)
}

/// Checks that a symlink at `link` (components relative to the tree root) with `target` resolves,
/// lexically, to a path inside the tree. Intermediate links need no resolution: each of them is
/// checked the same way when it is created, so a chain of in-tree links stays in the tree.
fn link_stays_inside(link: &[&OsStr], target: &Path) -> Result<(), &'static str> {
    if target.as_os_str().is_empty() {
        return Err("symlink with an empty target");
    }
    let mut depth: Vec<&OsStr> = link[..link.len().saturating_sub(1)].to_vec();
    for component in target.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => return Err("symlink to an absolute path"),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return Err("symlink pointing outside the source tree");
                }
            }
            Component::Normal(p) => depth.push(p),
        }
    }
    Ok(())
}

/// Creates `path` for writing; `create_new` fails on anything already there, symlinks included.
fn create_file(path: &Path, mode: u32) -> Result<File, SourceError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err("creating", path))?;
    file.set_permissions(Permissions::from_mode(mode)).map_err(io_err("setting permissions of", path))?;
    Ok(file)
}

/// The mode of a staged file: `0644`, or `0755` when executable, restricted further by the
/// source's own bits, so a private file (`0600`, `0640`) stays private in the image while
/// group/other write bits that only reflect the user's umask (`0664`, `0775`) do not change the
/// layer. setuid, setgid and sticky bits are dropped.
fn file_mode(source_mode: u32) -> u32 {
    let most = if source_mode & 0o111 == 0 { 0o644 } else { 0o755 };
    // The owner keeps read: the layer writer reads the staged copy.
    (most & source_mode & 0o777) | 0o400
}

/// The mode of a staged directory: `0755` restricted by the source's bits (a `0700` directory
/// stays closed; the owner always keeps `rwx`).
fn dir_mode(source_mode: u32) -> u32 {
    // The owner keeps rwx: the stage must stay listable and removable.
    (0o755 & source_mode) | 0o700
}

/// Most symlinks followed while resolving one link (Linux's own limit, `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;

/// Resolves the symlink at `link` (components relative to the tree `root`) with `target` the
/// way the kernel will, component by component, following every symlink it meets inside the
/// tree, and fails when the walk leaves the tree or meets an absolute target. A purely lexical
/// check is not enough: with `d/l -> ..`, `d/l/d/l/../..` climbs two levels above the root.
/// Components that do not exist are taken lexically (nothing there can be a link).
fn resolve_in_tree(root: &Path, link: &[&OsStr], target: &Path) -> Result<(), &'static str> {
    if target.as_os_str().is_empty() {
        return Err("symlink with an empty target");
    }
    let mut cur: Vec<OsString> =
        link[..link.len().saturating_sub(1)].iter().map(|p| (*p).to_owned()).collect();
    let mut work = parts_of(target)?;
    let mut hops = 0;
    while let Some(part) = work.pop_front() {
        let Some(name) = part else {
            if cur.pop().is_none() {
                return Err("symlink pointing outside the source tree");
            }
            continue;
        };
        cur.push(name);
        let path: PathBuf =
            std::iter::once(root.as_os_str()).chain(cur.iter().map(OsString::as_os_str)).collect();
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err("symlink loop (too many levels of symlinks)");
                }
                let next = fs::read_link(&path).map_err(|_| "symlink whose target cannot be read")?;
                if next.as_os_str().is_empty() {
                    return Err("symlink with an empty target");
                }
                cur.pop();
                for p in parts_of(&next)?.into_iter().rev() {
                    work.push_front(p);
                }
            }
            Ok(_) => {}
            // Missing (or below a non-directory, ENOTDIR): nothing further can be a link.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(20) => {}
            Err(_) => return Err("symlink whose target cannot be examined"),
        }
    }
    Ok(())
}

/// Resolves every symlink of the staged tree `root` with [`resolve_in_tree`]: links are checked
/// one by one as they arrive, and only the whole tree shows where a chain of them leads.
fn check_links(root: &Path, tree: &Path, rel: &Path, origin: &str) -> Result<(), SourceError> {
    let dir = tree.join(rel);
    for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
        let entry = entry.map_err(io_err("listing", &dir))?;
        let rel = rel.join(entry.file_name());
        let ft = entry.file_type().map_err(io_err("listing", &dir))?;
        if ft.is_dir() {
            check_links(root, tree, &rel, origin)?;
        } else if ft.is_symlink() {
            let path = tree.join(&rel);
            let target = fs::read_link(&path).map_err(io_err("reading link", &path))?;
            let parts: Vec<&OsStr> = rel.iter().collect();
            resolve_in_tree(root, &parts, &target).map_err(|reason| SourceError::Unsafe {
                origin: origin.to_owned(),
                entry: rel.display().to_string(),
                reason: reason.to_owned(),
            })?;
        }
    }
    Ok(())
}

/// The components of a relative symlink target: `None` for `..`, names otherwise.
fn parts_of(target: &Path) -> Result<std::collections::VecDeque<Option<OsString>>, &'static str> {
    let mut out = std::collections::VecDeque::new();
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => return Err("symlink to an absolute path"),
            Component::CurDir => {}
            Component::ParentDir => out.push_back(None),
            Component::Normal(p) => out.push_back(Some(p.to_owned())),
        }
    }
    Ok(out)
}

/// What one walk of a local source tree ([`walk_source`]) does with each entry it accepts: the
/// stage ([`Copy`]) writes it, the in-place digest ([`Record`]) records it. One walk serves both,
/// so the digest read in place is the digest of the copy by construction: same entries, same
/// modes, same refusals.
trait Visit {
    /// A directory `rel` was skipped (the cache, the output or the stage).
    fn skipped(&mut self, _rel: &Path) {}
    /// Before the entries of the directory `rel`.
    fn enter_dir(&mut self, rel: &Path) -> Result<(), SourceError>;
    /// After them, with the mode the staged directory gets.
    fn leave_dir(&mut self, rel: PathBuf, mode: u32) -> Result<(), SourceError>;
    /// A symlink whose target stays inside the tree.
    fn link(&mut self, rel: PathBuf, target: PathBuf) -> Result<(), SourceError>;
    /// A regular file, opened, with the mode the staged file gets.
    fn file(&mut self, rel: PathBuf, from: &Path, input: File, mode: u32) -> Result<(), SourceError>;
}

/// Walks the directory `src/rel`, entries in sorted order, leaving out `.git` and the
/// directories of `skip`, and hands each entry to `visit`.
fn walk_source(
    src: &Path,
    rel: &Path,
    origin: &str,
    skip: &Skip,
    visit: &mut impl Visit,
) -> Result<(), SourceError> {
    let dir = src.join(rel);
    let mut names: Vec<OsString> = fs::read_dir(&dir)
        .map_err(io_err("listing", &dir))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io_err("listing", &dir))?;
    names.sort();
    for name in names {
        if name == ".git" {
            continue;
        }
        let rel = rel.join(&name);
        let from = src.join(&rel);
        let meta = fs::symlink_metadata(&from).map_err(io_err("reading", &from))?;
        let ft = meta.file_type();
        let unsafe_entry = |reason: &str| SourceError::Unsafe {
            origin: origin.to_owned(),
            entry: rel.display().to_string(),
            reason: reason.to_owned(),
        };
        if ft.is_dir() {
            if skip.contains(&meta) {
                visit.skipped(&rel);
                continue;
            }
            visit.enter_dir(&rel)?;
            walk_source(src, &rel, origin, skip, visit)?;
            visit.leave_dir(rel, dir_mode(meta.permissions().mode()))?;
        } else if ft.is_symlink() {
            let target = fs::read_link(&from).map_err(io_err("reading link", &from))?;
            let parts: Vec<&OsStr> = rel.iter().collect();
            resolve_in_tree(src, &parts, &target).map_err(unsafe_entry)?;
            visit.link(rel, target)?;
        } else if ft.is_file() {
            // O_NOFOLLOW | O_NONBLOCK and a check of what was opened: the entry could have been
            // swapped for a link or a FIFO since it was listed.
            let input = stackbuild_common::open_regular(&from, "source file")?;
            visit.file(rel, &from, input, file_mode(meta.permissions().mode()))?;
        } else {
            return Err(unsafe_entry("not a regular file, directory or symlink"));
        }
    }
    Ok(())
}

/// Writes each entry of the walk below `dest`.
struct Stage<'a> {
    dest: &'a Path,
    origin: &'a str,
}

impl Visit for Stage<'_> {
    fn skipped(&mut self, rel: &Path) {
        tracing::warn!("{}: not copying {} (the cache, the output or the stage)", self.origin, rel.display());
    }

    fn enter_dir(&mut self, rel: &Path) -> Result<(), SourceError> {
        let to = self.dest.join(rel);
        Ok(fs::create_dir(&to).map_err(io_err("creating", &to))?)
    }

    fn leave_dir(&mut self, rel: PathBuf, mode: u32) -> Result<(), SourceError> {
        // Set last: a directory without write permission must still receive its entries.
        let to = self.dest.join(rel);
        Ok(fs::set_permissions(&to, Permissions::from_mode(mode))
            .map_err(io_err("setting permissions of", &to))?)
    }

    fn link(&mut self, rel: PathBuf, target: PathBuf) -> Result<(), SourceError> {
        let to = self.dest.join(rel);
        Ok(std::os::unix::fs::symlink(&target, &to).map_err(io_err("creating symlink", &to))?)
    }

    fn file(&mut self, rel: PathBuf, _from: &Path, mut input: File, mode: u32) -> Result<(), SourceError> {
        let to = self.dest.join(rel);
        let mut out = BufWriter::new(create_file(&to, mode)?);
        io::copy(&mut input, &mut out).map_err(io_err("writing", &to))?;
        out.into_inner().map_err(|e| io_err("writing", &to)(e.into_error()))?;
        Ok(())
    }
}

/// Records each entry of the walk as [`tree_digest`] would find it in the copy.
#[derive(Default)]
struct Record(Vec<(PathBuf, TreeEntry)>);

impl Visit for Record {
    fn enter_dir(&mut self, _rel: &Path) -> Result<(), SourceError> {
        Ok(())
    }

    fn leave_dir(&mut self, rel: PathBuf, mode: u32) -> Result<(), SourceError> {
        self.0.push((rel, TreeEntry::Dir(mode)));
        Ok(())
    }

    fn link(&mut self, rel: PathBuf, target: PathBuf) -> Result<(), SourceError> {
        self.0.push((rel, TreeEntry::Link(target)));
        Ok(())
    }

    fn file(&mut self, rel: PathBuf, from: &Path, mut input: File, mode: u32) -> Result<(), SourceError> {
        let (hex, size) = hash_reader(&mut input, from)?;
        self.0.push((rel, TreeEntry::File(mode, hex, size)));
        Ok(())
    }
}

/// The full commit `rev` (a commit id, tag or branch) names in the repository at `url`, read
/// from the cache's mirror after a fetch: what a lock pins a `name @ git+URL@REV` dependency to.
pub fn resolve_git_rev(url: &str, rev: &str, cache_dir: &Path) -> Result<String, SourceError> {
    let git = Git::new(url, cache_dir)?;
    let full = rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit());
    if full {
        git.ensure_commit(&rev.to_ascii_lowercase())?;
        return Ok(rev.to_ascii_lowercase());
    }
    if git.mirror.exists() {
        git.run(true, &["fetch", "--quiet", "--prune", "origin"])?;
    } else {
        // A clone of a commit that cannot exist: clones the mirror, then fails the lookup.
        let _ = git.ensure_commit(&"0".repeat(40));
    }
    // `--end-of-options`: a revision that starts with `-` is a revision, never an option.
    let spec = format!("{rev}^{{commit}}");
    let out = git
        .run(true, &["rev-parse", "--verify", "--quiet", "--end-of-options", &spec])
        .map_err(|_| SourceError::CommitNotFound { url: url.to_owned(), commit: rev.to_owned() })?;
    let commit = String::from_utf8_lossy(&out).trim().to_ascii_lowercase();
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SourceError::CommitNotFound { url: url.to_owned(), commit: rev.to_owned() });
    }
    Ok(commit)
}

/// Git commands on the cache mirror of one URL.
struct Git {
    url: String,
    home: PathBuf,
    mirror: PathBuf,
}

impl Git {
    fn new(url: &str, cache_dir: &Path) -> Result<Self, SourceError> {
        // Absolute: git runs with `home` as its working directory, where a relative path would
        // name another directory.
        let home = std::path::absolute(cache_dir).map_err(io_err("resolving", cache_dir))?.join("git");
        fs::create_dir_all(&home).map_err(io_err("creating", &home))?;
        let mirror = home.join(hex::encode(Sha256::digest(url.as_bytes())));
        Ok(Self { url: url.to_owned(), home, mirror })
    }

    /// A git command with a clean environment. `GIT_DIR` is set for commands on the mirror so git
    /// never searches parent directories for another repository.
    fn command(&self, on_mirror: bool) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear();
        for key in PASS_ENV {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        cmd.env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ALLOW_PROTOCOL", "file:git:http:https:ssh")
            .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
            .env("LC_ALL", "C")
            .current_dir(&self.home)
            .stdin(Stdio::null());
        if on_mirror {
            cmd.env("GIT_DIR", &self.mirror);
        }
        cmd
    }

    /// Runs git to completion; returns stdout, or the failure with stderr.
    fn run(&self, on_mirror: bool, args: &[&str]) -> Result<Vec<u8>, SourceError> {
        let out =
            self.command(on_mirror).args(args).output().map_err(|source| SourceError::Spawn { source })?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(self.failure(args, &out.status.to_string(), &out.stderr))
        }
    }

    fn failure(&self, args: &[&str], status: &str, stderr: &[u8]) -> SourceError {
        let stderr = String::from_utf8_lossy(&stderr[..stderr.len().min(STDERR_CAP)]).trim().to_owned();
        SourceError::Git { url: self.url.clone(), args: args.join(" "), status: status.to_owned(), stderr }
    }

    fn has_commit(&self, commit: &str) -> bool {
        self.run(true, &["cat-file", "-t", commit]).is_ok_and(|out| out == b"commit\n")
    }

    /// Makes sure the mirror holds `commit`: clones the mirror if it is missing, otherwise fetches
    /// all refs, and as a last resort asks the server for the commit by id (which servers allow for
    /// reachable commits with `uploadpack.allowReachableSHA1InWant`, GitHub among them).
    fn ensure_commit(&self, commit: &str) -> Result<(), SourceError> {
        if self.mirror.exists() {
            if self.has_commit(commit) {
                return Ok(());
            }
            self.run(true, &["fetch", "--quiet", "--prune", "origin"])?;
        } else {
            // Clone next to the final place and rename, so an interrupted clone is never mistaken
            // for a mirror.
            let tmp = self.mirror.with_extension(format!("tmp{}", std::process::id()));
            if tmp.exists() {
                fs::remove_dir_all(&tmp).map_err(io_err("removing", &tmp))?;
            }
            let tmp_str = tmp.to_string_lossy().into_owned();
            self.run(false, &["clone", "--mirror", "--quiet", "--", &self.url, &tmp_str])?;
            if let Err(e) = fs::rename(&tmp, &self.mirror) {
                // Another build won the race; its mirror is as good as ours.
                let _ = fs::remove_dir_all(&tmp);
                if !self.mirror.exists() {
                    return Err(io_err("moving the clone into place at", &self.mirror)(e).into());
                }
            }
        }
        if !self.has_commit(commit) {
            // Failure here just means the server refuses fetching by id; the check below reports.
            let _ = self.run(true, &["fetch", "--quiet", "origin", commit]);
        }
        if self.has_commit(commit) {
            Ok(())
        } else {
            Err(SourceError::CommitNotFound { url: self.url.clone(), commit: commit.to_owned() })
        }
    }

    /// Streams `git archive <commit>` into `dest`.
    fn archive_into(&self, commit: &str, dest: &Path) -> Result<(), SourceError> {
        let args = ["archive", "--format=tar", commit];
        let mut child = self
            .command(true)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SourceError::Spawn { source })?;
        // Drain stderr on a thread so a chatty git cannot block on a full pipe.
        let stderr_thread = child.stderr.take().map(|mut err| {
            thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = err.read_to_end(&mut buf);
                buf
            })
        });
        let result = self.write_entries(&mut child, commit, dest);
        if result.is_err() {
            // Do not leave git blocked on a pipe nobody reads.
            let _ = child.kill();
        }
        let status = child.wait().map_err(|source| SourceError::Spawn { source })?;
        let stderr = stderr_thread.and_then(|t| t.join().ok()).unwrap_or_default();
        result?;
        if status.success() {
            Ok(())
        } else {
            Err(self.failure(&args, &status.to_string(), &stderr))
        }
    }

    fn write_entries(&self, child: &mut Child, commit: &str, dest: &Path) -> Result<(), SourceError> {
        let Some(stdout) = child.stdout.take() else { return Ok(()) };
        let origin = format!("{}@{commit}", self.url);
        let archive_err =
            |source| SourceError::Archive { url: self.url.clone(), commit: commit.to_owned(), source };
        let mut archive = tar::Archive::new(stdout);
        for entry in archive.entries().map_err(archive_err)? {
            let mut entry = entry.map_err(archive_err)?;
            let name = entry.path_bytes().into_owned();
            let display = String::from_utf8_lossy(&name).into_owned();
            let unsafe_entry = |reason: &str| SourceError::Unsafe {
                origin: origin.clone(),
                entry: display.clone(),
                reason: reason.to_owned(),
            };
            let kind = entry.header().entry_type();
            // git archive starts with a pax global header carrying the commit id.
            if kind == tar::EntryType::XGlobalHeader {
                continue;
            }
            let parts = entry_parts(&name).map_err(unsafe_entry)?;
            let Some((last, parents)) = parts.split_last() else { continue };
            let parent = ensure_dirs(dest, parents.iter().copied(), &origin, &display)?;
            let path = parent.join(last);
            match kind {
                tar::EntryType::Directory => {
                    ensure_dirs(&parent, [*last], &origin, &display)?;
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mode = entry.header().mode().map_err(archive_err)?;
                    let mut out = BufWriter::new(create_file(&path, file_mode(mode))?);
                    io::copy(&mut entry, &mut out).map_err(io_err("writing", &path))?;
                    out.into_inner().map_err(|e| io_err("writing", &path)(e.into_error()))?;
                }
                tar::EntryType::Symlink => {
                    let target = entry
                        .link_name_bytes()
                        .map(|t| PathBuf::from(OsString::from_vec(t.into_owned())))
                        .ok_or_else(|| unsafe_entry("symlink without a target"))?;
                    link_stays_inside(&parts, &target).map_err(unsafe_entry)?;
                    std::os::unix::fs::symlink(&target, &path).map_err(io_err("creating symlink", &path))?;
                }
                other => return Err(unsafe_entry(&format!("unsupported entry type {other:?}"))),
            }
        }
        // Read the end-of-archive padding so git can exit.
        io::copy(&mut archive.into_inner(), &mut io::sink()).map_err(archive_err)?;
        Ok(())
    }
}

/// Formats a tree listing (for tests and debugging): one `kind mode path [-> target]` per entry.
#[cfg(test)]
fn listing(root: &Path) -> String {
    use std::fmt::Write as _;
    let mut entries = Vec::new();
    collect(root, Path::new(""), &mut entries).unwrap();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::new();
    for (rel, meta) in entries {
        let mode = meta.permissions().mode() & 0o7777;
        if meta.file_type().is_symlink() {
            let target = fs::read_link(root.join(&rel)).unwrap();
            let _ = writeln!(out, "l {} -> {}", rel.display(), target.display());
        } else if meta.is_dir() {
            let _ = writeln!(out, "d {mode:o} {}", rel.display());
        } else {
            let _ = writeln!(out, "f {mode:o} {}", rel.display());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::tools::git;

    /// A repository with a README, an executable, a nested file and an in-tree symlink.
    fn repo(dir: &Path) -> String {
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::create_dir_all(dir.join("models/small")).unwrap();
        fs::write(dir.join("README.md"), "# model\n").unwrap();
        fs::write(dir.join("bin/run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(dir.join("bin/run.sh"), Permissions::from_mode(0o755)).unwrap();
        fs::write(dir.join("models/small/weights.bin"), [0u8, 1, 2, 3]).unwrap();
        std::os::unix::fs::symlink("../README.md", dir.join("bin/README")).unwrap();
        git(dir, &["init", "-q"]);
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "one"]);
        git(dir, &["rev-parse", "HEAD"])
    }

    #[test]
    fn stages_a_commit_and_matches_a_path_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        let commit = repo(&origin);
        let url = format!("file://{}", origin.display());
        let cache = tmp.path().join("cache");
        let stage = tmp.path().join("stage");
        let first = stage_git(&url, &commit, "/opt/model", &stage, &cache).unwrap();
        assert_eq!(first.files, 4);
        assert_eq!(first.bytes, 8 + 10 + 4);
        insta::assert_snapshot!(listing(&stage), @r"
        d 755 opt
        d 755 opt/model
        f 644 opt/model/README.md
        d 755 opt/model/bin
        l opt/model/bin/README -> ../README.md
        f 755 opt/model/bin/run.sh
        d 755 opt/model/models
        d 755 opt/model/models/small
        f 644 opt/model/models/small/weights.bin
        ");

        // The same content staged from the working tree (its .git skipped) has the same digest.
        let stage2 = tmp.path().join("stage2");
        let copied = stage_path(&origin, "/srv/elsewhere", &stage2).unwrap();
        assert_eq!(copied, first);

        // A later commit is fetched into the existing mirror.
        fs::write(origin.join("README.md"), "# model v2\n").unwrap();
        git(&origin, &["commit", "-q", "-am", "two"]);
        let commit2 = git(&origin, &["rev-parse", "HEAD"]);
        let stage3 = tmp.path().join("stage3");
        let second = stage_git(&url, &commit2.to_uppercase(), "/opt/model", &stage3, &cache).unwrap();
        assert_ne!(second.tree_sha256, first.tree_sha256);
        assert_eq!(fs::read_to_string(stage3.join("opt/model/README.md")).unwrap(), "# model v2\n");
        // The first commit is still served from the mirror.
        let stage4 = tmp.path().join("stage4");
        assert_eq!(stage_git(&url, &commit, "/opt/model", &stage4, &cache).unwrap(), first);
    }

    #[test]
    fn the_digest_in_place_is_the_digest_of_the_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        repo(&origin);
        // Modes the copy narrows (group write, a private file, a 0700 directory), and a
        // directory to leave out.
        fs::write(origin.join("shared.txt"), "x").unwrap();
        fs::set_permissions(origin.join("shared.txt"), Permissions::from_mode(0o664)).unwrap();
        fs::write(origin.join("secret.txt"), "y").unwrap();
        fs::set_permissions(origin.join("secret.txt"), Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(origin.join("models"), Permissions::from_mode(0o700)).unwrap();
        fs::create_dir_all(origin.join("cache/blobs")).unwrap();
        fs::write(origin.join("cache/blobs/big"), "z").unwrap();
        let exclude = origin.join("cache");
        let copied = stage_path_excluding(&origin, "/src", &tmp.path().join("stage"), &[&exclude]).unwrap();
        assert_eq!(digest_path_excluding(&origin, &[&exclude]).unwrap(), copied);
        // Any change shows.
        fs::write(origin.join("bin/run.sh"), "#!/bin/sh\nexit 1\n").unwrap();
        assert_ne!(digest_path_excluding(&origin, &[&exclude]).unwrap().tree_sha256, copied.tree_sha256);
        // And the refusals are the copy's.
        std::os::unix::fs::symlink("../../etc/passwd", origin.join("bin/out")).unwrap();
        let err = digest_path_excluding(&origin, &[&exclude]).unwrap_err();
        assert!(matches!(err, SourceError::Unsafe { .. }), "{err}");
    }

    #[test]
    fn wrong_commits_error_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        repo(&origin);
        let url = format!("file://{}", origin.display());
        let cache = tmp.path().join("cache");
        let stage = tmp.path().join("stage");
        let err = stage_git(&url, "main", "/src", &stage, &cache).unwrap_err().to_string();
        assert_eq!(
            err.replace(&url, "URL"),
            r#"git source URL: commit "main" must be a full 40-hex-digit commit id"#
        );
        let missing = "0123456789abcdef0123456789abcdef01234567";
        let err = stage_git(&url, missing, "/src", &stage, &cache).unwrap_err().to_string();
        insta::assert_snapshot!(err.replace(&url, "URL"), @"git source URL: commit 0123456789abcdef0123456789abcdef01234567 not found (fetched all refs and asked for it by id)");
        assert!(!stage.join("src").exists());
        let bad_url = format!("file://{}", tmp.path().join("nope").display());
        let err = stage_git(&bad_url, missing, "/src", &stage, &cache).unwrap_err();
        assert!(matches!(err, SourceError::Git { .. }), "{err}");
    }

    #[test]
    fn rejects_escaping_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        fs::create_dir_all(origin.join("sub")).unwrap();
        fs::write(origin.join("sub/a"), "a").unwrap();
        std::os::unix::fs::symlink("../../etc/passwd", origin.join("sub/evil")).unwrap();
        git(&origin, &["init", "-q"]);
        git(&origin, &["add", "-A"]);
        git(&origin, &["commit", "-q", "-m", "evil"]);
        let commit = git(&origin, &["rev-parse", "HEAD"]);
        let url = format!("file://{}", origin.display());
        let err = stage_git(&url, &commit, "/src", &tmp.path().join("s1"), &tmp.path().join("cache"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err.replace(&format!("{url}@{commit}"), "ORIGIN"),
            r#"ORIGIN: unsafe entry "sub/evil": symlink pointing outside the source tree"#
        );
        let err = stage_path(&origin, "/src", &tmp.path().join("s2")).unwrap_err().to_string();
        assert_eq!(
            err.replace(&origin.display().to_string(), "ORIGIN"),
            r#"ORIGIN: unsafe entry "sub/evil": symlink pointing outside the source tree"#
        );
        fs::remove_file(origin.join("sub/evil")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", origin.join("sub/evil")).unwrap();
        let err = stage_path(&origin, "/src", &tmp.path().join("s3")).unwrap_err().to_string();
        assert!(err.ends_with("symlink to an absolute path"), "{err}");
    }

    #[test]
    fn checks_names_and_destinations() {
        assert_eq!(entry_parts(b"a/../b"), Err("`..` component"));
        assert_eq!(entry_parts(b"/etc/x"), Err("absolute path"));
        assert_eq!(entry_parts(b"a//b"), Err("empty path component"));
        assert_eq!(entry_parts(b"a/b/").unwrap(), vec![OsStr::new("a"), OsStr::new("b")]);
        let inside = [OsStr::new("a"), OsStr::new("b"), OsStr::new("link")];
        assert!(link_stays_inside(&inside, Path::new("../../c")).is_ok());
        assert!(link_stays_inside(&inside, Path::new("../../../c")).is_err());
        assert!(link_stays_inside(&inside, Path::new("x/../../y")).is_ok());

        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir(&src).unwrap();
        fs::write(src.join("f"), "x").unwrap();
        let stage = tmp.path().join("stage");
        let err = stage_path(&src, "opt/x", &stage).unwrap_err().to_string();
        assert_eq!(err, r#"destination "opt/x": must be an absolute in-image path"#);
        let err = stage_path(&src, "/opt/../x", &stage).unwrap_err().to_string();
        assert_eq!(err, r#"destination "/opt/../x": must not contain `..`"#);
        stage_path(&src, "/opt/x", &stage).unwrap();
        let err = stage_path(&src, "/opt/x", &stage).unwrap_err().to_string();
        assert_eq!(err, r#"destination "/opt/x": already exists and is not empty"#);
        // A symlink planted in the stage is not followed.
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, stage.join("opt/link")).unwrap();
        assert!(stage_path(&src, "/opt/link/x", &stage).is_err());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }
    /// Symlinks to create and the error expected (`None`: accepted).
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);

    /// The classic: `d/l -> ..` is harmless alone and lexically `esc`'s target stays inside, but
    /// walked the way the kernel resolves it, `d/l/d/l/../..` climbs two levels above the root.
    #[test]
    fn symlinks_are_resolved_by_walking_them() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("d")).unwrap();
        std::os::unix::fs::symlink("..", src.join("d/l")).unwrap();
        stage_path(&src, "/s", &tmp.path().join("ok")).unwrap();
        std::os::unix::fs::symlink("d/l/d/l/../../etc/shadow", src.join("esc")).unwrap();
        let err = stage_path(&src, "/s", &tmp.path().join("s1")).unwrap_err().to_string();
        assert!(err.ends_with(r#"unsafe entry "esc": symlink pointing outside the source tree"#), "{err}");

        // More of the class: chains, loops, links to links that leave, absolute hops.
        let cases: &[Case<'_>] = &[
            (&[("a", "b"), ("b", "..")], Some("outside")),
            (&[("a", "b/../.."), ("b", "c")], Some("outside")),
            (&[("up", "x/.."), ("x", "y"), ("y", "..")], Some("outside")),
            (&[("loop", "loop2"), ("loop2", "loop")], Some("loop")),
            (&[("self", "self/x")], Some("loop")),
            (&[("a", "b/x"), ("b", "/etc")], Some("absolute")),
            (&[("a", "missing/../c")], None),
            (&[("a", "b/c"), ("b", "."), ("c", "z")], None),
            (&[("deep", "d2/d2/d2/../../..")], Some("outside")),
        ];
        for (i, (links, expected)) in cases.iter().enumerate() {
            let root = tmp.path().join(format!("case{i}"));
            fs::create_dir_all(root.join("d2")).unwrap();
            std::os::unix::fs::symlink(".", root.join("d2/d2")).unwrap();
            for (name, target) in *links {
                std::os::unix::fs::symlink(target, root.join(name)).unwrap();
            }
            let got = stage_path(&root, "/s", &tmp.path().join(format!("stage{i}")));
            match expected {
                None => assert!(got.is_ok(), "{links:?}: {got:?}"),
                Some(what) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.contains(what), "{links:?}: {err}");
                }
            }
        }
        // A git tree with the same pair is refused as well (checked once the tree is staged).
        let origin = tmp.path().join("origin");
        fs::create_dir_all(origin.join("d")).unwrap();
        std::os::unix::fs::symlink("..", origin.join("d/l")).unwrap();
        std::os::unix::fs::symlink("d/l/d/l/../../etc/shadow", origin.join("esc")).unwrap();
        git(&origin, &["init", "-q"]);
        git(&origin, &["add", "-A"]);
        git(&origin, &["commit", "-q", "-m", "evil"]);
        let commit = git(&origin, &["rev-parse", "HEAD"]);
        let url = format!("file://{}", origin.display());
        let err = stage_git(&url, &commit, "/src", &tmp.path().join("g"), &tmp.path().join("cache"))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with(r#"unsafe entry "esc": symlink pointing outside the source tree"#), "{err}");
    }

    #[test]
    fn fifos_sockets_and_devices_in_a_tree_are_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir(&src).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, src.join("pipe"), rustix::fs::Mode::from_raw_mode(0o600))
            .unwrap();
        let stage = tmp.path().join("stage");
        let (s, st) = (src.clone(), stage.clone());
        let err = test_support::process::within(10, move || stage_path(&s, "/s", &st)).unwrap_err();
        assert!(err.to_string().contains(r#"unsafe entry "pipe": not a regular file"#), "{err}");
        fs::remove_file(src.join("pipe")).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
        let err = stage_path(&src, "/s", &tmp.path().join("stage2")).unwrap_err();
        assert!(err.to_string().contains(r#"unsafe entry "sock""#), "{err}");
    }

    #[test]
    fn a_symlinked_source_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("f"), "x").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = stage_path(&link, "/s", &tmp.path().join("stage")).unwrap_err();
        assert!(matches!(err, SourceError::SymlinkRoot { .. }), "{err}");
        assert!(err.to_string().contains("is a symlink"), "{err}");
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            stage_path(&file, "/s", &tmp.path().join("s2")),
            Err(SourceError::NotADirectory { .. })
        ));
    }

    #[test]
    fn private_modes_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("private")).unwrap();
        for (name, mode) in [
            ("secret", 0o600),
            ("group", 0o640),
            ("umask", 0o664),
            ("exec", 0o775),
            ("own-exec", 0o700),
            ("ro", 0o444),
        ] {
            fs::write(src.join(name), "x").unwrap();
            fs::set_permissions(src.join(name), Permissions::from_mode(mode)).unwrap();
        }
        fs::write(src.join("private/key"), "k").unwrap();
        fs::set_permissions(src.join("private"), Permissions::from_mode(0o700)).unwrap();
        let stage = tmp.path().join("stage");
        stage_path(&src, "/s", &stage).unwrap();
        let mode = |rel: &str| {
            fs::symlink_metadata(stage.join("s").join(rel)).unwrap().permissions().mode() & 0o7777
        };
        assert_eq!(
            [
                mode("secret"),
                mode("group"),
                mode("umask"),
                mode("exec"),
                mode("own-exec"),
                mode("ro"),
                mode("private")
            ],
            [0o600, 0o640, 0o644, 0o755, 0o700, 0o444, 0o700]
        );
    }

    #[test]
    fn the_cache_and_output_inside_the_tree_are_not_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("project");
        fs::create_dir_all(src.join("code")).unwrap();
        fs::write(src.join("code/a.py"), "print(1)\n").unwrap();
        let cache = src.join(".cache");
        let out = src.join("images/out");
        fs::create_dir_all(cache.join("tmp")).unwrap();
        fs::create_dir_all(&out).unwrap();
        fs::write(out.join("index.json"), "{}").unwrap();
        // The stage lives in the cache, inside the tree being copied.
        let stage = cache.join("tmp/stage-1");
        let staged = stage_path_excluding(&src, "/w", &stage, &[&cache, &out]).unwrap();
        assert_eq!(staged.files, 1);
        assert!(stage.join("w/code/a.py").is_file());
        assert!(!stage.join("w/.cache").exists());
        assert!(stage.join("w/images").is_dir() && !stage.join("w/images/out").exists());
        // Without being told of the cache, the stage itself is still never copied into itself.
        let second = cache.join("tmp/stage-2");
        stage_path(&src, "/w", &second).unwrap();
        assert!(!second.join("w/.cache/tmp/stage-2").exists());
    }
}
