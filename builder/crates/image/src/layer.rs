//! Deterministic layer tars and their compression.
//!
//! A [`LayerWriter`] collects entries from staged directories ([`LayerWriter::add_dir`]), from
//! untrusted tar streams ([`LayerWriter::add_tar`], transcoded entry by entry, never extracted)
//! and from memory ([`LayerWriter::add_file`], [`LayerWriter::add_symlink`]), then writes one
//! layer whose bytes depend only on those entries and the epoch, the way apko, ko and Nix's
//! `dockerTools` make layers reproducible:
//!
//! - entries in bytewise lexical order of their paths, parents before children, and every
//!   directory implied by a path emitted too (mode 0755);
//! - mtime = the epoch (`SOURCE_DATE_EPOCH` or 0), empty user and group names, no atime/ctime,
//!   no xattrs, GNU headers (long names as GNU `././@LongLink` records);
//! - hardlinks kept as links to the lexically first member of their group, so that the target
//!   always precedes the link whatever the order of the sources;
//! - gzip with a fixed header (mtime 0, OS byte 255, no name) and zstd at a fixed level.
//!
//! Untrusted names are checked as the umoci (CVE-2021-29136) and containerd (CVE-2021-32760)
//! advisories teach: `..` and absolute names are refused, and no entry may go through a symlink
//! of the same layer, whatever the order in which the two arrive.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{FileExt as _, FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use tar::{EntryType, Header};

use stackbuild_cache::{Cache, CacheError, TempFile};
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;
use stackbuild_common::{io_err, IoError};
use stackbuild_common::{MemberError, ZipMember};

mod encoder;
mod encoding;
use self::encoder::Encoder;
pub use self::encoding::{Codec, Encoding, MemberCodec, TocLayout};

/// Default gzip level (gzip's own default).
const GZIP_LEVEL: u32 = 6;
/// Default zstd level (zstd's own default).
const ZSTD_LEVEL: i32 = 3;
/// Most zstd worker threads used. zstd's multithreaded output does not depend on the number of
/// workers (as long as there is at least one), which a unit test checks.
const ZSTD_MAX_WORKERS: u32 = 8;
/// Most links followed to resolve a hardlink to a hardlink.
const MAX_HARDLINK_HOPS: usize = 64;
/// Longest entry name (Linux's `PATH_MAX`): a longer one cannot be opened by a runtime, and
/// every one of its parents becomes an entry, so names are what a hostile tar would inflate.
const MAX_NAME: usize = 4096;
/// Longest name component (Linux's `NAME_MAX`).
const MAX_COMPONENT: usize = 255;
/// Most entries in one layer (a CUDA + torch rootfs has a few hundred thousand).
const MAX_ENTRIES: usize = 8 << 20;

/// Errors of layer building.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A tar stream could not be read.
    #[error("reading tar {source_name}{}: {source}", entry.as_ref().map(|e| format!(" at entry {e:?}")).unwrap_or_default())]
    Tar {
        /// The tar being read ([`TarImport::name`]).
        source_name: String,
        /// The entry being read, when known.
        entry: Option<String>,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An entry name would leave the layer root or is malformed.
    #[error("unsafe entry name {entry:?}: {reason}")]
    UnsafeName {
        /// The name as given.
        entry: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An entry would be written through a symlink of the same layer.
    #[error("entry {entry:?} would be written through the symlink {symlink:?}")]
    ThroughSymlink {
        /// The entry.
        entry: String,
        /// The symlink on its path.
        symlink: String,
    },
    /// An entry's parent is not a directory.
    #[error("entry {entry:?}: parent {parent:?} is not a directory")]
    NotADirectory {
        /// The entry.
        entry: String,
        /// The parent that is a file, device or hardlink.
        parent: String,
    },
    /// A non-directory would replace a directory that has entries.
    #[error("entry {entry:?} would replace a non-empty directory")]
    ReplacesDirectory {
        /// The entry.
        entry: String,
    },
    /// A hardlink does not lead to a regular file of the layer.
    #[error("hardlink {entry:?} -> {target:?} does not lead to a regular file of this layer")]
    BadHardlink {
        /// The hardlink.
        entry: String,
        /// Its target.
        target: String,
    },
    /// An entry of a kind layers cannot carry.
    #[error("entry {entry:?}: unsupported {what}")]
    Unsupported {
        /// The entry.
        entry: String,
        /// What is unsupported.
        what: String,
    },
    /// A file on disk changed between being listed and being written.
    #[error("{path} changed while the layer was being written")]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// `SOURCE_DATE_EPOCH` is not a number of seconds.
    #[error("SOURCE_DATE_EPOCH={0:?} is not a non-negative integer")]
    BadEpoch(String),
    /// `SOURCE_DATE_EPOCH` is a time no image date can express.
    #[error(
        "SOURCE_DATE_EPOCH={0} is after 9999-12-31T23:59:59Z ({MAX_EPOCH}), the last time an image's \
         RFC 3339 `created` date can express"
    )]
    EpochTooLate(String),
    /// The cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A wheel member carried into the layer is not what its wheel says.
    #[error(transparent)]
    Member(#[from] MemberError),
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The epoch for mtimes: `SOURCE_DATE_EPOCH` (<https://reproducible-builds.org/specs/source-date-epoch/>)
/// or 0 when unset or empty.
pub fn source_date_epoch() -> Result<u64, LayerError> {
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if v.trim().is_empty() => 0,
        Ok(v) => match v.trim().parse() {
            Ok(epoch) => epoch,
            // All digits, yet no u64: later still than the last date.
            Err(_) if v.trim().bytes().all(|b| b.is_ascii_digit()) => {
                return Err(LayerError::EpochTooLate(v.trim().to_owned()))
            }
            Err(_) => return Err(LayerError::BadEpoch(v)),
        },
        Err(std::env::VarError::NotPresent) => 0,
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(LayerError::BadEpoch(v.to_string_lossy().into_owned()))
        }
    };
    check_epoch(epoch)
}

/// 9999-12-31T23:59:59Z: RFC 3339's `date-fullyear` has four digits, and the OCI image spec
/// (`config.md`: `created` "MUST be formatted as defined by RFC 3339") and the tools reading
/// images (Go's `time.Time` JSON parsing in skopeo, containerd, Docker) accept no later date.
pub(crate) const MAX_EPOCH: u64 = 253_402_300_799;

/// `epoch` if an image date can express it.
pub(crate) fn check_epoch(epoch: u64) -> Result<u64, LayerError> {
    if epoch > MAX_EPOCH {
        Err(LayerError::EpochTooLate(epoch.to_string()))
    } else {
        Ok(epoch)
    }
}

/// Normalizes an entry name into `a/b/c` form (no leading `./`, no empty or `.` components, no
/// trailing slash). `..` is always refused; a leading `/` only where `allow_absolute` (names
/// given by the builder itself, never names from a tar).
fn normalize(raw: &[u8], allow_absolute: bool) -> Result<Vec<u8>, LayerError> {
    let unsafe_name = |reason| LayerError::UnsafeName { entry: lossy(raw), reason };
    if raw.starts_with(b"/") && !allow_absolute {
        return Err(unsafe_name("absolute name"));
    }
    if raw.contains(&0) {
        return Err(unsafe_name("NUL byte in name"));
    }
    if raw.len() > MAX_NAME {
        return Err(unsafe_name("name longer than 4096 bytes (PATH_MAX)"));
    }
    let mut out = Vec::with_capacity(raw.len());
    for component in raw.split(|&b| b == b'/') {
        match component {
            b"" | b"." => {}
            b".." => return Err(unsafe_name("`..` component")),
            c if c.len() > MAX_COMPONENT => return Err(unsafe_name("name component longer than 255 bytes")),
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

/// Checks a whiteout entry (image-spec `layer.md`): `.wh.<name>` deletes `<name>` of the
/// layers below and `.wh..wh..opq` makes its directory opaque; either must be an empty regular
/// file. `<name>` must be a real name (not empty, `.` or `..`, which would delete the directory
/// itself or its parent), and other `.wh..wh.` names (aufs internals) have no meaning in an image.
fn check_whiteout(name: &[u8], kind: &Kind, raw: &[u8]) -> Result<(), LayerError> {
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    let Some(target) = base.strip_prefix(b".wh.") else { return Ok(()) };
    let bad = |reason| Err(LayerError::UnsafeName { entry: lossy(raw), reason });
    if !matches!(kind, Kind::File(d) if d.len() == 0) {
        return bad("a whiteout must be an empty regular file");
    }
    if base == b".wh..wh..opq" {
        return Ok(());
    }
    if target.starts_with(b".wh.") {
        return bad("unknown `.wh..wh.` whiteout (only `.wh..wh..opq` is defined)");
    }
    if target.is_empty() || target == b"." || target == b".." {
        return bad("whiteout of an empty, `.` or `..` name");
    }
    Ok(())
}

/// Options of [`LayerWriter::add_tar`].
#[derive(Clone, Debug)]
pub struct TarImport {
    /// A name for the tar in error messages (for example its path).
    pub name: String,
    /// Directory under which the tar's entries go (`""`: the layer root).
    pub prefix: String,
    /// Keep the entries' numeric uid/gid (a base rootfs needs them: `/etc/shadow` belongs to the
    /// group `shadow`); when false they become 0. User and group names are always dropped.
    pub keep_owner: bool,
}

impl Default for TarImport {
    fn default() -> Self {
        Self { name: "<tar>".to_string(), prefix: String::new(), keep_owner: true }
    }
}

/// Where a regular file's bytes come from.
#[derive(Debug)]
enum Data {
    /// In memory.
    Bytes(Vec<u8>),
    /// A file on disk, identified by device and inode so that a swap is noticed.
    Disk { path: PathBuf, dev: u64, ino: u64, size: u64 },
    /// A range of the spool file (content of a transcoded tar entry).
    Spool { offset: u64, len: u64 },
    /// A deflated wheel member: carried as its own gzip member into a gzip layer.
    Zip(Box<ZipMember>),
}

impl Data {
    fn len(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::Disk { size, .. } => *size,
            Self::Spool { len, .. } => *len,
            Self::Zip(member) => member.size,
        }
    }
}

#[derive(Debug)]
enum Kind {
    Dir,
    File(Data),
    Symlink(Vec<u8>),
    /// Target path, normalized.
    Hardlink(Vec<u8>),
    Char(u32, u32),
    Block(u32, u32),
    Fifo,
}

#[derive(Debug)]
struct Node {
    kind: Kind,
    /// Permission bits plus setuid, setgid and sticky.
    mode: u32,
    uid: u64,
    gid: u64,
    /// A directory only implied by the paths below it (replaced by an explicit one).
    implied: bool,
}

impl Node {
    fn new(kind: Kind, mode: u32) -> Self {
        Self { kind, mode: mode & 0o7777, uid: 0, gid: 0, implied: false }
    }
}

/// The spool: contents of transcoded tar entries, in an unlinked file in the cache's `tmp/`
/// (never in memory, as layers of a GPU stack run to gigabytes).
struct Spool {
    tmp: TempFile,
    len: u64,
}

/// Builds one deterministic layer; see the module documentation.
pub struct LayerWriter {
    cache: Cache,
    epoch: u64,
    entries: BTreeMap<Vec<u8>, Node>,
    spool: Option<Spool>,
    /// Check only ([`LayerWriter::checker`]): contents are read and dropped, nothing is written.
    discard: bool,
    /// Where [`LayerWriter::finish`] copies the uncompressed tar as it writes it.
    tap: Option<Tap>,
}

impl std::fmt::Debug for LayerWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayerWriter")
            .field("epoch", &self.epoch)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl LayerWriter {
    /// A writer whose blob will go to `cache`, with every mtime set to `epoch`.
    pub fn new(cache: &Cache, epoch: u64) -> Self {
        Self { cache: cache.clone(), epoch, entries: BTreeMap::new(), spool: None, discard: false, tap: None }
    }

    /// Copies the uncompressed tar to `tap` as [`LayerWriter::finish`] writes it, for a reader
    /// that would otherwise inflate the blob again (the audit's `audit::LayerTap`, the
    /// `--load` spool [`crate::load::TarSpool`]); with taps given before.
    #[must_use]
    pub fn with_tap(mut self, tap: impl Write + Send + 'static) -> Self {
        self.tap = Some(match self.tap.take() {
            Some(before) => Box::new(Tee(before, Box::new(tap))),
            None => Box::new(tap),
        });
        self
    }

    /// A writer that only checks: [`LayerWriter::add_tar`] validates every entry as it would for
    /// a layer (names, links, whiteouts) but keeps no content, and [`LayerWriter::check`] ends
    /// it. Used for base layers that are reused as they are, so that they get the same checks
    /// as the layers transcoded from an archive base.
    pub fn checker(cache: &Cache) -> Self {
        Self { discard: true, ..Self::new(cache, 0) }
    }

    /// Ends a [`LayerWriter::checker`]: checks that every hardlink leads to a file of the layer.
    pub fn check(mut self) -> Result<(), LayerError> {
        self.resolve_hardlinks()
    }

    /// Bytes of file contents so far (the tar adds headers and padding).
    pub fn content_size(&self) -> u64 {
        self.entries.values().map(|n| if let Kind::File(d) = &n.kind { d.len() } else { 0 }).sum()
    }

    /// Number of entries so far (implied directories included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an entry, creating implied parents, enforcing that every parent is a directory (and
    /// never a symlink) and that nothing sits below a symlink. A later entry replaces an earlier
    /// one with the same path, as a later tar entry does on extraction.
    fn insert(&mut self, path: Vec<u8>, node: Node) -> Result<(), LayerError> {
        if path.is_empty() {
            return if matches!(node.kind, Kind::Dir) {
                // The root directory itself (`./` of a rootfs tarball) is not a layer entry.
                Ok(())
            } else {
                Err(LayerError::UnsafeName { entry: String::new(), reason: "empty name" })
            };
        }
        for (i, _) in path.iter().enumerate().filter(|(_, &b)| b == b'/') {
            let parent = &path[..i];
            match self.entries.get(parent) {
                None => {
                    let mut dir = Node::new(Kind::Dir, 0o755);
                    dir.implied = true;
                    self.entries.insert(parent.to_vec(), dir);
                }
                Some(Node { kind: Kind::Dir, .. }) => {}
                Some(Node { kind: Kind::Symlink(_), .. }) => {
                    return Err(LayerError::ThroughSymlink { entry: lossy(&path), symlink: lossy(parent) });
                }
                Some(_) => {
                    return Err(LayerError::NotADirectory { entry: lossy(&path), parent: lossy(parent) })
                }
            }
        }
        if let Some(old) = self.entries.get(&path) {
            if matches!(old.kind, Kind::Dir) {
                if matches!(node.kind, Kind::Dir) {
                    if node.implied {
                        return Ok(());
                    }
                } else if let Some(child) = self.first_child(&path) {
                    return Err(if matches!(node.kind, Kind::Symlink(_)) {
                        LayerError::ThroughSymlink { entry: lossy(&child), symlink: lossy(&path) }
                    } else {
                        LayerError::ReplacesDirectory { entry: lossy(&path) }
                    });
                }
            }
        }
        self.entries.insert(path, node);
        if self.entries.len() > MAX_ENTRIES {
            return Err(LayerError::Unsupported {
                entry: String::new(),
                what: format!("layer with more than {MAX_ENTRIES} entries"),
            });
        }
        Ok(())
    }

    /// The first entry below `dir`, if any.
    fn first_child(&self, dir: &[u8]) -> Option<Vec<u8>> {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        self.entries
            .range(prefix.clone()..)
            .next()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
    }

    /// Adds a regular file with the given content and mode (`path` may start with `/`).
    pub fn add_file(&mut self, path: &str, bytes: impl Into<Vec<u8>>, mode: u32) -> Result<(), LayerError> {
        let path = normalize(path.as_bytes(), true)?;
        self.insert(path, Node::new(Kind::File(Data::Bytes(bytes.into())), mode))
    }

    /// Adds a regular file whose content is a deflated wheel member (`path` may start with `/`).
    /// A gzip layer carries the member's deflate stream as it is (see [`stackbuild_common::zip_member`]);
    /// other compressions get its inflated bytes. Either way it is checked against `RECORD` as it
    /// is written.
    pub fn add_zip_member(&mut self, path: &str, member: ZipMember, mode: u32) -> Result<(), LayerError> {
        let path = normalize(path.as_bytes(), true)?;
        self.insert(path, Node::new(Kind::File(Data::Zip(Box::new(member))), mode))
    }

    /// Adds a symlink `path -> target` (the target is stored as given).
    pub fn add_symlink(&mut self, path: &str, target: &str) -> Result<(), LayerError> {
        let path = normalize(path.as_bytes(), true)?;
        if target.is_empty() || target.contains('\0') {
            return Err(LayerError::UnsafeName {
                entry: lossy(&path),
                reason: "empty or NUL symlink target",
            });
        }
        self.insert(path, Node::new(Kind::Symlink(target.as_bytes().to_vec()), 0o777))
    }

    /// Adds a directory with the given mode.
    pub fn add_directory(&mut self, path: &str, mode: u32) -> Result<(), LayerError> {
        let path = normalize(path.as_bytes(), true)?;
        self.insert(path, Node::new(Kind::Dir, mode))
    }

    /// Adds a whiteout for `path` (`.wh.<name>`): the path is deleted from the lower layers.
    pub fn add_whiteout(&mut self, path: &str) -> Result<(), LayerError> {
        let path = normalize(path.as_bytes(), true)?;
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..=i], &path[i + 1..]),
            None => (&b""[..], &path[..]),
        };
        if name.is_empty() {
            return Err(LayerError::UnsafeName { entry: lossy(&path), reason: "whiteout of the root" });
        }
        let whiteout = [dir, b".wh.", name].concat();
        self.insert(whiteout, Node::new(Kind::File(Data::Bytes(Vec::new())), 0o644))
    }

    /// Adds the tree below `root` under `prefix` (`""` or `/` for the layer root), owned by
    /// root. Symlinks are recorded as symlinks, never followed; hardlinked files stay hardlinked;
    /// the prefix directories themselves are emitted with mode 0755 (not the mode of `root`,
    /// which is typically a 0700 temporary directory). File contents are read only by
    /// [`LayerWriter::finish`].
    pub fn add_dir(&mut self, root: &Path, prefix: &str) -> Result<(), LayerError> {
        let prefix = normalize(prefix.as_bytes(), true)?;
        if !prefix.is_empty() {
            let mut dir = Node::new(Kind::Dir, 0o755);
            dir.implied = true;
            self.insert(prefix.clone(), dir)?;
        }
        let meta = fs::symlink_metadata(root).map_err(io_err("reading", root))?;
        if !meta.is_dir() {
            return Err(LayerError::Unsupported {
                entry: root.display().to_string(),
                what: "non-directory root".into(),
            });
        }
        let mut links: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
        let mut stack = vec![(root.to_path_buf(), prefix)];
        while let Some((dir, name)) = stack.pop() {
            let mut children = Vec::new();
            for entry in fs::read_dir(&dir).map_err(io_err("listing", &dir))? {
                children.push(entry.map_err(io_err("listing", &dir))?.path());
            }
            children.sort();
            for path in children {
                let Some(file_name) = path.file_name() else { continue };
                let entry_name = if name.is_empty() {
                    file_name.as_bytes().to_vec()
                } else {
                    [&name[..], b"/", file_name.as_bytes()].concat()
                };
                let meta = fs::symlink_metadata(&path).map_err(io_err("reading", &path))?;
                let ft = meta.file_type();
                let kind = if ft.is_dir() {
                    stack.push((path.clone(), entry_name.clone()));
                    Kind::Dir
                } else if ft.is_file() {
                    let id = (meta.dev(), meta.ino());
                    match links.get(&id) {
                        Some(first) if meta.nlink() > 1 => Kind::Hardlink(first.clone()),
                        _ => {
                            if meta.nlink() > 1 {
                                links.insert(id, entry_name.clone());
                            }
                            Kind::File(Data::Disk {
                                path: path.clone(),
                                dev: id.0,
                                ino: id.1,
                                size: meta.len(),
                            })
                        }
                    }
                } else if ft.is_symlink() {
                    let target = fs::read_link(&path).map_err(io_err("reading link", &path))?;
                    Kind::Symlink(target.as_os_str().as_bytes().to_vec())
                } else if ft.is_fifo() {
                    Kind::Fifo
                } else if ft.is_char_device() {
                    let (major, minor) = dev_numbers(meta.rdev());
                    Kind::Char(major, minor)
                } else if ft.is_block_device() {
                    let (major, minor) = dev_numbers(meta.rdev());
                    Kind::Block(major, minor)
                } else {
                    return Err(LayerError::Unsupported {
                        entry: path.display().to_string(),
                        what: "file type (socket)".into(),
                    });
                };
                self.insert(entry_name, Node::new(kind, meta.mode()))?;
            }
        }
        Ok(())
    }

    /// Transcodes the entries of an untrusted tar stream into this layer without extracting
    /// anything to disk: names are normalized (`./x` -> `x`) and checked (no `..`, no absolute
    /// names, nothing through a symlink of this layer); regular files, directories, symlinks,
    /// hardlinks, devices, fifos and whiteouts (`.wh.*`) are kept; user/group names, mtimes,
    /// xattrs and PAX records are dropped.
    pub fn add_tar<R: Read>(&mut self, reader: R, opts: &TarImport) -> Result<(), LayerError> {
        let prefix = normalize(opts.prefix.as_bytes(), true)?;
        if !prefix.is_empty() {
            let mut dir = Node::new(Kind::Dir, 0o755);
            dir.implied = true;
            self.insert(prefix.clone(), dir)?;
        }
        let tar_err = |entry: Option<&[u8]>| {
            let source_name = opts.name.clone();
            let entry = entry.map(lossy);
            move |source| LayerError::Tar { source_name, entry, source }
        };
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries().map_err(tar_err(None))? {
            let mut entry = entry.map_err(tar_err(None))?;
            let raw_name = entry.path_bytes().into_owned();
            let header = entry.header();
            let entry_type = header.entry_type();
            if entry_type.is_pax_global_extensions() {
                continue;
            }
            let name = normalize(&raw_name, false)?;
            let name = if prefix.is_empty() || (name.is_empty() && !entry_type.is_dir()) {
                name
            } else if name.is_empty() {
                prefix.clone()
            } else {
                [&prefix[..], b"/", &name[..]].concat()
            };
            let mode = header.mode().map_err(tar_err(Some(&raw_name)))?;
            let (uid, gid) = if opts.keep_owner {
                (
                    header.uid().map_err(tar_err(Some(&raw_name)))?,
                    header.gid().map_err(tar_err(Some(&raw_name)))?,
                )
            } else {
                (0, 0)
            };
            let devices = |h: &Header| -> Result<(u32, u32), LayerError> {
                let major = h.device_major().map_err(tar_err(Some(&raw_name)))?.unwrap_or(0);
                let minor = h.device_minor().map_err(tar_err(Some(&raw_name)))?.unwrap_or(0);
                Ok((major, minor))
            };
            let link_name = || -> Result<Vec<u8>, LayerError> {
                match entry.link_name_bytes() {
                    Some(l) if !l.is_empty() => Ok(l.into_owned()),
                    _ => Err(LayerError::UnsafeName {
                        entry: lossy(&raw_name),
                        reason: "link without a target",
                    }),
                }
            };
            let kind = match entry_type {
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    Kind::File(Data::Spool {
                        offset: 0, // set below, once the content is spooled
                        len: entry.size(),
                    })
                }
                EntryType::Directory => Kind::Dir,
                EntryType::Symlink => Kind::Symlink(link_name()?),
                EntryType::Link => {
                    let target = normalize(&link_name()?, false)?;
                    let target =
                        if prefix.is_empty() { target } else { [&prefix[..], b"/", &target[..]].concat() };
                    Kind::Hardlink(target)
                }
                EntryType::Char => {
                    let (major, minor) = devices(header)?;
                    Kind::Char(major, minor)
                }
                EntryType::Block => {
                    let (major, minor) = devices(header)?;
                    Kind::Block(major, minor)
                }
                EntryType::Fifo => Kind::Fifo,
                other => {
                    return Err(LayerError::Unsupported {
                        entry: lossy(&raw_name),
                        what: format!("tar entry type {:?}", other.as_byte() as char),
                    })
                }
            };
            let kind = match kind {
                Kind::File(Data::Spool { len, .. }) => {
                    let offset = self.spool_copy(&mut entry, len).map_err(|e| match e {
                        LayerError::Io(IoError { source, .. }) => tar_err(Some(&raw_name))(source),
                        other => other,
                    })?;
                    Kind::File(Data::Spool { offset, len })
                }
                other => other,
            };
            check_whiteout(&name, &kind, &raw_name)?;
            let mut node = Node::new(kind, mode);
            node.uid = uid;
            node.gid = gid;
            self.insert(name, node)?;
        }
        Ok(())
    }

    /// Appends exactly `len` bytes of `reader` to the spool; returns their offset.
    fn spool_copy(&mut self, reader: &mut impl Read, len: u64) -> Result<u64, LayerError> {
        if self.discard {
            let copied = io::copy(&mut reader.take(len), &mut io::sink())
                .map_err(io_err("reading", Path::new("<layer>")))?;
            if copied != len {
                return Err(IoError {
                    op: "reading",
                    path: PathBuf::from("<layer>"),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "tar entry shorter than its header says",
                    ),
                }
                .into());
            }
            return Ok(0);
        }
        if self.spool.is_none() {
            let tmp = self.cache.temp_file()?;
            // Unlinked at once: a killed build leaves nothing behind; the open file stays usable.
            let _ = fs::remove_file(tmp.path());
            self.spool = Some(Spool { tmp, len: 0 });
        }
        let Some(spool) = self.spool.as_mut() else { unreachable!("spool was just created") };
        let offset = spool.len;
        let path = spool.tmp.path().to_path_buf();
        let mut out = BufWriter::with_capacity(1 << 20, &spool.tmp.file);
        let copied = io::copy(&mut reader.take(len), &mut out).map_err(io_err("spooling into", &path))?;
        out.flush().map_err(io_err("spooling into", &path))?;
        if copied != len {
            return Err(IoError {
                op: "spooling into",
                path,
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "tar entry shorter than its header says",
                ),
            }
            .into());
        }
        spool.len += len;
        Ok(offset)
    }

    /// Rewrites every hardlink group so that its lexically first member is the regular file and
    /// all others link to it: the target then precedes its links in the tar.
    fn resolve_hardlinks(&mut self) -> Result<(), LayerError> {
        let mut groups: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for (path, node) in &self.entries {
            let Kind::Hardlink(first) = &node.kind else { continue };
            let mut target = first;
            let mut hops = 0;
            loop {
                match self.entries.get(target).map(|n| &n.kind) {
                    Some(Kind::File(_)) => break,
                    Some(Kind::Hardlink(next)) if hops < MAX_HARDLINK_HOPS && next != path => {
                        target = next;
                        hops += 1;
                    }
                    _ => return Err(LayerError::BadHardlink { entry: lossy(path), target: lossy(first) }),
                }
            }
            groups.entry(target.clone()).or_default().push(path.clone());
        }
        for (file, links) in groups {
            // `links` is in lexical order, as `entries` was iterated in order.
            let canonical = if links[0] < file { links[0].clone() } else { file.clone() };
            if canonical != file {
                // The file's content, mode and owner move to the canonical path; the file's old
                // path becomes a link like the others.
                let Some(file_node) = self.entries.get_mut(&file) else { continue };
                let kind = std::mem::replace(&mut file_node.kind, Kind::Hardlink(canonical.clone()));
                let canonical_node = Node {
                    kind,
                    mode: file_node.mode,
                    uid: file_node.uid,
                    gid: file_node.gid,
                    implied: false,
                };
                self.entries.insert(canonical.clone(), canonical_node);
            }
            for link in links.into_iter().filter(|l| *l != canonical) {
                if let Some(node) = self.entries.get_mut(&link) {
                    node.kind = Kind::Hardlink(canonical.clone());
                }
            }
        }
        Ok(())
    }

    /// Writes the layer, compressed, into the cache and returns its blob.
    ///
    /// The tar streams through a sha256 (the `diff_id`), the compressor and a second sha256 (the
    /// blob digest) into a temporary file, which is renamed to `blobs/sha256/<hex>` once complete.
    ///
    /// The compression's settings all come from its [`Encoding`], the part of the layer's key
    /// that the compression gives.
    pub fn finish(mut self, compression: Compression) -> Result<LayerBlob, LayerError> {
        self.resolve_hardlinks()?;
        let encoding = Encoding::of(compression);
        let tmp = self.cache.temp_file()?;
        let tmp_path = tmp.path().to_path_buf();
        let write_err = io_err("writing", &tmp_path);

        let bar = stackbuild_common::Progress::bytes(self.content_size(), "writing layer");

        let blob_out = Hashing::new(BufWriter::with_capacity(1 << 20, &tmp.file));
        let encoder =
            Encoder::new(&encoding.codec, blob_out).map_err(io_err("starting compression for", &tmp_path))?;
        let mut tar_hash = Hashing::new(encoder);
        tar_hash.tap = self.tap.take();
        let tar_out = BufWriter::with_capacity(1 << 16, tar_hash);
        let mut builder = tar::Builder::new(tar_out);
        // A TOC's chunks are the members: of the size its chunk hashes count in.
        debug_assert!(
            encoding.toc.is_none() || matches!(encoding.codec, Codec::Members { chunk: members::CHUNK, .. })
        );
        let carry = encoding.carries_wheel_deflate();
        let mut toc = encoding
            .toc
            .as_ref()
            .map(|layout| estargz::Toc::new(layout.flavor(), self.epoch).carrying(carry));
        if toc.is_some() && self.entries.contains_key(estargz::TOC_NAME.as_bytes()) {
            return Err(LayerError::Unsupported {
                entry: estargz::TOC_NAME.into(),
                what: format!("entry in an {} layer (the name of its table of contents)", compression.name()),
            });
        }
        for (path, node) in &self.entries {
            if let Some(toc) = &mut toc {
                self.estargz_entry(toc, &mut builder, path, node, &bar, &tmp_path)?;
                continue;
            }
            self.tar_entry(&mut builder, path, node, carry, &bar, &tmp_path)?;
        }
        drop(bar);
        // eStargz: every member written, the TOC as the last tar entry in a member of its own
        // (zstd:chunked: after the tar, in a skippable frame).
        let toc = match toc {
            Some(toc) => {
                Some(Self::estargz_toc(toc, &mut builder, self.epoch).map_err(io_err("writing", &tmp_path))?)
            }
            None => None,
        };
        let tar_out = builder.into_inner().map_err(io_err("finishing tar", &tmp_path))?;
        let mut tar_hash = tar_out.into_inner().map_err(|e| write_err(e.into_error()))?;
        // The tap ends here: its reader sees the whole tar before the blob is committed.
        drop(tar_hash.tap.take());
        let (encoder, diff_id, tar_size) = tar_hash.finish();
        let mut blob_out = encoder.finish().map_err(io_err("finishing compression for", &tmp_path))?;
        let mut annotations = BTreeMap::new();
        if let Some(toc) = toc {
            let at = blob_out.count;
            annotations = toc.end(&mut blob_out, at, tar_size).map_err(io_err("writing", &tmp_path))?;
        }
        let (file_out, digest, size) = blob_out.finish();
        file_out.into_inner().map_err(|e| io_err("writing", &tmp_path)(e.into_error()))?;
        let hex = digest.strip_prefix("sha256:").unwrap_or(&digest).to_string();
        let path = self.cache.commit_blob(tmp, &hex)?;
        Ok(LayerBlob {
            digest,
            diff_id,
            size,
            media_type: encoding.media_type.to_string(),
            annotations,
            path,
        })
    }

    /// A GNU header with `node`'s owner and mode, the epoch as its mtime, and no size yet.
    fn header_of(&self, node: &Node) -> Header {
        let mut header = Header::new_gnu();
        header.set_mtime(self.epoch);
        header.set_uid(node.uid);
        header.set_gid(node.gid);
        header.set_mode(node.mode);
        header.set_size(0);
        header
    }

    /// Writes one entry of a layer (of an eStargz one, every entry without content); a wheel's
    /// member as its own gzip member when `carry` ([`Encoding::carries_wheel_deflate`]).
    fn tar_entry<W: Write>(
        &self,
        builder: &mut tar::Builder<BufWriter<Hashing<Encoder<W>>>>,
        path: &[u8],
        node: &Node,
        carry: bool,
        bar: &stackbuild_common::Progress,
        tmp_path: &Path,
    ) -> Result<(), LayerError> {
        let name = Path::new(OsStr::from_bytes(path));
        let mut header = self.header_of(node);
        let result = match &node.kind {
            Kind::Dir => {
                header.set_entry_type(EntryType::Directory);
                builder.append_data(&mut header, name, io::empty())
            }
            Kind::File(Data::Zip(member)) if carry => {
                header.set_entry_type(EntryType::Regular);
                header.set_size(member.size);
                // The header alone (the tar crate writes no padding after no data), then
                // the member as its own gzip member, then the padding as usual.
                builder.append_data(&mut header, name, io::empty()).map_err(io_err("writing", tmp_path))?;
                builder.get_mut().flush().map_err(io_err("writing", tmp_path))?;
                write_gzip_member(builder.get_mut().get_mut(), member)?;
                bar.inc(member.size);
                let padding = (512 - member.size % 512) % 512;
                #[allow(clippy::cast_possible_truncation)]
                builder.get_mut().write_all(&[0; 512][..padding as usize])
            }
            Kind::File(data) => {
                header.set_entry_type(EntryType::Regular);
                header.set_size(data.len());
                let reader = self.open_data(data)?;
                builder.append_data(&mut header, name, bar.wrap_read(reader))
            }
            Kind::Symlink(target) | Kind::Hardlink(target) => {
                let ty =
                    if matches!(node.kind, Kind::Symlink(_)) { EntryType::Symlink } else { EntryType::Link };
                header.set_entry_type(ty);
                builder.append_link(&mut header, name, Path::new(OsStr::from_bytes(target)))
            }
            Kind::Char(major, minor) | Kind::Block(major, minor) => {
                let ty = if matches!(node.kind, Kind::Char(..)) { EntryType::Char } else { EntryType::Block };
                header.set_entry_type(ty);
                header
                    .set_device_major(*major)
                    .and_then(|()| header.set_device_minor(*minor))
                    .and_then(|()| builder.append_data(&mut header, name, io::empty()))
            }
            Kind::Fifo => {
                header.set_entry_type(EntryType::Fifo);
                builder.append_data(&mut header, name, io::empty())
            }
        };
        result.map_err(|source| entry_error(source, tmp_path, path))
    }

    /// A reader of exactly a file's bytes.
    fn open_data<'a>(&'a self, data: &'a Data) -> Result<Box<dyn Read + 'a>, LayerError> {
        match data {
            Data::Bytes(bytes) => Ok(Box::new(&bytes[..])),
            Data::Spool { offset, len } => {
                let Some(spool) = &self.spool else {
                    unreachable!("spooled data without a spool");
                };
                Ok(Box::new(SpoolReader { file: &spool.tmp.file, pos: *offset, end: offset + len }))
            }
            Data::Zip(member) => Ok(Box::new(member.reader()?)),
            Data::Disk { path, dev, ino, size } => {
                let file = File::open(path).map_err(io_err("opening", path))?;
                let meta = file.metadata().map_err(io_err("reading", path))?;
                if meta.dev() != *dev || meta.ino() != *ino || meta.len() != *size || !meta.is_file() {
                    return Err(LayerError::Changed { path: path.clone() });
                }
                Ok(Box::new(ExactReader { inner: file.take(*size), remaining: *size, path: path.clone() }))
            }
        }
    }
}

/// The error of writing the entry `path` of the layer at `tmp_path`: what a reader carried
/// (a changed file, a wheel member that is not what its `RECORD` says), else the I/O error.
fn entry_error(source: io::Error, tmp_path: &Path, path: &[u8]) -> LayerError {
    if source.get_ref().is_some_and(<dyn std::error::Error + Send + Sync>::is::<MemberError>) {
        if let Some(Ok(e)) =
            source.into_inner().map(<dyn std::error::Error + Send + Sync>::downcast::<MemberError>)
        {
            return LayerError::Member(*e);
        }
        unreachable!("checked above");
    }
    match source.get_ref().and_then(|e| e.downcast_ref::<ChangedError>()) {
        Some(ChangedError(path)) => LayerError::Changed { path: path.clone() },
        None => IoError { op: "writing entry into", path: tmp_path.join(lossy(path)), source }.into(),
    }
}

/// Linux `dev_t` -> (major, minor), as glibc's `gnu_dev_major`/`gnu_dev_minor`.
fn dev_numbers(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (u32::try_from(major).unwrap_or(u32::MAX), u32::try_from(minor).unwrap_or(u32::MAX))
}

/// Marks a file that shrank while being copied into the tar.
#[derive(Debug)]
struct ChangedError(PathBuf);

impl std::fmt::Display for ChangedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} changed while being read", self.0.display())
    }
}

impl std::error::Error for ChangedError {}

/// Reads exactly `remaining` bytes or fails: a tar header promised that many.
struct ExactReader<R> {
    inner: R,
    remaining: u64,
    path: PathBuf,
}

impl<R: Read> Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(io::Error::other(ChangedError(self.path.clone())));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// Reads a range of the spool with positional reads (no shared seek position).
struct SpoolReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX).min(buf.len());
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "spool file truncated"));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Where a copy of a layer's uncompressed tar goes as it is written ([`LayerWriter::tap`]).
pub(crate) type Tap = Box<dyn Write + Send>;

/// Two taps given the same bytes; one that fails does not keep them from the other.
struct Tee(Tap, Tap);

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (a, b) = (self.0.write_all(buf), self.1.write_all(buf));
        a.and(b).map(|()| buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let (a, b) = (self.0.flush(), self.1.flush());
        a.and(b)
    }
}

/// A writer that hashes and counts what passes through it, and copies it to a tap if it has one.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
    tap: Option<Tap>,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), count: 0, tap: None }
    }

    /// The inner writer, `sha256:<hex>` of what was written, and its size.
    fn finish(self) -> (W, String, u64) {
        (self.inner, format!("sha256:{}", hex::encode(self.hasher.finalize())), self.count)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        if let Some(tap) = &mut self.tap {
            // A tap only ever reads along: what it does with the bytes cannot fail the layer.
            let _ = tap.write_all(&buf[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a wheel member into the layer: into a gzip layer as its own deflate stream (after the
/// members compressed so far), hashing its inflated bytes as part of the tar.
fn write_gzip_member<W: Write>(sink: &mut Hashing<Encoder<W>>, member: &ZipMember) -> Result<(), LayerError> {
    let Hashing { inner, hasher, count, tap } = sink;
    let Encoder::Members(gzip) = inner else { unreachable!("called for gzip layers only") };
    let mut plain = HashOnly { hasher, count, tap };
    let mut out = gzip.raw().map_err(io_err("writing a layer from", &member.wheel))?;
    member.write_gzip(&mut out, &mut plain)?;
    Ok(())
}

/// A writer that only hashes and counts (the tar stream of bytes written elsewhere compressed).
struct HashOnly<'a> {
    hasher: &'a mut Sha256,
    count: &'a mut u64,
    tap: &'a mut Option<Tap>,
}

impl Write for HashOnly<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        *self.count += buf.len() as u64;
        if let Some(tap) = self.tap {
            let _ = tap.write_all(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub mod estargz;
mod members;

#[cfg(test)]
mod tests;
