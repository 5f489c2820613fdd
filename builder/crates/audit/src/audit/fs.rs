//! An in-memory view of an image's root filesystem: paths, kinds, symlink targets, and for
//! regular files only what the audit needs (ELF dynamic info, the text of `ld.so.conf` files).
//!
//! It is built either by walking an unpacked directory ([`RootFs::from_dir`]) or by streaming
//! the layers of an image ([`read_layer`] then [`RootFs::apply`]) with the OCI whiteout rules
//! (<https://github.com/opencontainers/image-spec/blob/main/layer.md#whiteouts>). Symlinks are
//! resolved inside this view only, never on the host.

use std::collections::BTreeMap;
#[cfg(test)]
use std::fs;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::Arc;

use super::elf::{self, ElfInfo, MAGIC};
use stackbuild_common::Compression;
#[cfg(test)]
use stackbuild_common::{io_err, IoError};

/// ELF files larger than this are not held in memory whole before parsing: read from a blob,
/// they are spooled to an anonymous temporary file; read as the build writes them
/// ([`Large::Once`]), only their first `SPOOL_ABOVE` bytes are kept.
pub(super) const SPOOL_ABOVE: u64 = 64 << 20;

/// How an ELF file larger than the limit is read.
#[derive(Clone, Copy, Debug)]
pub(super) enum Large {
    /// Spooled whole to an anonymous temporary file, then parsed: any layout parses.
    Spool(u64),
    /// Read once, front to back: the first bytes up to the limit kept in memory, later ranges
    /// read as the stream reaches them. The parser reads the headers, then the dynamic segment,
    /// then its strings; in every library of `recipes/dreamzero.toml` (4.2 GB of ELF files over
    /// 64 MiB: CUDA, cuDNN, NCCL, torch, triton) the strings lie in the first bytes, before
    /// the code, so nothing is written to disk. A file whose strings do not (they would have to
    /// be read again) fails the reading, and the audit then reads the layer from its blob.
    Once(u64),
}

impl Large {
    fn limit(self) -> u64 {
        match self {
            Self::Spool(n) | Self::Once(n) => n,
        }
    }
}
/// Largest configuration file kept as text.
const MAX_TEXT: u64 = 64 << 10;
/// Most symlinks followed while resolving one path (Linux's `MAXSYMLINKS`).
const MAX_HOPS: usize = 40;

/// What a regular file is, as far as the loader cares.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum ElfState {
    /// Not an ELF file (no magic, or shorter than 4 bytes).
    NotElf,
    /// A parsed ELF file.
    Elf(ElfInfo),
    /// An ELF magic followed by something unparsable.
    Invalid(String),
}

/// A regular file.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct FileInfo {
    /// What the loader would make of it.
    pub elf: ElfState,
    /// The content of small `*.conf` files under `/etc` and of `/etc/ld.so.conf`.
    pub text: Option<String>,
}

/// The kind of a path.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum Kind {
    /// A directory.
    Dir,
    /// A regular file (shared between hardlinks).
    File(Arc<FileInfo>),
    /// A symlink and its target as stored.
    Symlink(String),
    /// A device, FIFO or socket.
    Other,
}

/// One path of the view.
#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    /// The layer that put it there (0 for a directory walk).
    layer: usize,
}

/// One change a layer makes, in tar order. A layer's changes depend on its bytes alone, so the
/// audit keeps them by layer digest and reads a layer again only when it is new.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum Op {
    /// Create or replace a path.
    Put(String, Kind),
    /// A hardlink `path -> target` (target is an absolute normalized path).
    Link(String, String),
    /// Delete a path of the lower layers (`.wh.<name>`).
    Whiteout(String),
    /// Hide the lower layers' content of a directory (`.wh..wh..opq`).
    Opaque(String),
}

/// The view. Keys are absolute, normalized paths (`/usr/lib`); the root itself is implicit.
#[derive(Debug, Default)]
pub(super) struct RootFs {
    nodes: BTreeMap<String, Node>,
}

/// Normalizes a name from a tar header or symlink walk into an absolute path; `None` for names
/// with `..` (refused, as the layer writer and containerd refuse them).
pub(super) fn normalize(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len() + 1);
    for comp in name.split('/') {
        match comp {
            "" | "." => {}
            ".." => return None,
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// `(parent, name)` of an absolute normalized path (`/` for top-level names).
pub(super) fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

/// `dir/name` for an absolute directory.
pub(super) fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The key range of everything below `dir`.
fn descendants_prefix(dir: &str) -> String {
    if dir == "/" {
        "/".to_string()
    } else {
        format!("{dir}/")
    }
}

impl RootFs {
    /// Removes the lower layers' entries at and below `path` (or only below, for `keep_self`).
    fn remove_lower(&mut self, path: &str, layer: usize, keep_self: bool) {
        if !keep_self && self.nodes.get(path).is_some_and(|n| n.layer < layer) {
            self.nodes.remove(path);
        }
        let prefix = descendants_prefix(path);
        let doomed: Vec<String> = self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(_, n)| n.layer < layer)
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            self.nodes.remove(&key);
        }
    }

    /// Creates `path` (with its missing parents) as overlayfs would show it after extracting
    /// the entry on top of the lower layers.
    fn put(&mut self, path: &str, kind: Kind, layer: usize) {
        if path == "/" {
            return;
        }
        // Parents: a missing one is created; a lower non-directory there is replaced by one.
        let mut end = 0;
        while let Some(i) = path[end + 1..].find('/') {
            end += i + 1;
            let parent = &path[..end];
            match self.nodes.get(parent) {
                Some(Node { kind: Kind::Dir, .. }) => {}
                _ => {
                    self.nodes.insert(parent.to_string(), Node { kind: Kind::Dir, layer });
                }
            }
        }
        let replaces_dir = matches!(self.nodes.get(path), Some(Node { kind: Kind::Dir, .. }));
        if replaces_dir && !matches!(kind, Kind::Dir) {
            // A non-directory over a directory hides everything the lower layers had below it.
            self.remove_lower(path, layer, true);
        }
        self.nodes.insert(path.to_string(), Node { kind, layer });
    }

    /// Applies one layer's changes (`layer` counts from 1, base first).
    pub(super) fn apply(&mut self, ops: Vec<Op>, layer: usize) {
        for op in ops {
            match op {
                Op::Put(path, kind) => self.put(&path, kind, layer),
                Op::Link(path, target) => {
                    let kind = match self.nodes.get(&target) {
                        Some(Node { kind: kind @ Kind::File(_), .. }) => kind.clone(),
                        // A link to nothing (or to a non-file) is a broken layer; keep the path
                        // as an unknown file so that it still exists.
                        _ => Kind::Other,
                    };
                    self.put(&path, kind, layer);
                }
                Op::Whiteout(path) => self.remove_lower(&path, layer, false),
                Op::Opaque(dir) => self.remove_lower(&dir, layer, true),
            }
        }
    }

    /// Every regular file, in path order.
    pub(super) fn files(&self) -> impl Iterator<Item = (&str, &FileInfo)> {
        self.nodes.iter().filter_map(|(k, n)| match &n.kind {
            Kind::File(info) => Some((k.as_str(), info.as_ref())),
            _ => None,
        })
    }

    /// The names directly below the resolved directory `dir`, in order.
    pub(super) fn children(&self, dir: &str) -> Vec<&str> {
        let prefix = descendants_prefix(dir);
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| Some(&k[prefix.len()..]).filter(|rest| !rest.contains('/')))
            .collect()
    }

    /// Resolves `path` (absolute; relative ones are taken from `/`) the way the kernel would
    /// inside this root: every symlink followed, `..` taken after symlinks, absolute targets
    /// relative to this root. Returns the canonical path and its kind; `None` when some
    /// component is missing, not a directory, or the symlinks loop.
    pub(super) fn resolve(&self, path: &str) -> Option<(String, &Kind)> {
        let mut pending: Vec<String> = path.split('/').rev().map(str::to_string).collect();
        let mut cur = String::new();
        let mut kind: Option<&Kind> = None;
        let mut hops = 0;
        while let Some(comp) = pending.pop() {
            if comp.is_empty() {
                continue;
            }
            // Anything after a non-directory, even `.` or `..`, is ENOTDIR.
            if matches!(kind, Some(Kind::File(_) | Kind::Other)) {
                return None;
            }
            match comp.as_str() {
                "." => continue,
                ".." => {
                    let cut = cur.rfind('/').unwrap_or(0);
                    cur.truncate(cut);
                    kind = None;
                    continue;
                }
                _ => {}
            }
            let next = format!("{cur}/{comp}");
            match &self.nodes.get(&next)?.kind {
                Kind::Symlink(target) => {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return None;
                    }
                    if target.starts_with('/') {
                        cur.clear();
                    }
                    kind = None;
                    pending.extend(target.split('/').rev().map(str::to_string));
                }
                k => {
                    cur = next;
                    kind = Some(k);
                }
            }
        }
        if cur.is_empty() {
            return Some(("/".to_string(), &Kind::Dir));
        }
        // `kind` is None only after a trailing `..`: look the directory up again.
        let kind = match kind {
            Some(k) => k,
            None => &self.nodes.get(&cur)?.kind,
        };
        Some((cur, kind))
    }

    /// Resolves `name` (one component) in the resolved directory `dir`: [`Self::resolve`] with
    /// a fast path for the common cases of a missing name or a non-symlink.
    pub(super) fn resolve_in(&self, dir: &str, name: &str) -> Option<(String, &Kind)> {
        let path = join(dir, name);
        match &self.nodes.get(&path)?.kind {
            Kind::Symlink(_) => self.resolve(&path),
            kind => Some((path, kind)),
        }
    }

    #[cfg(test)]
    /// Builds the view of the directory `root`, never following its symlinks.
    pub(super) fn from_dir(root: &Path) -> Result<Self, IoError> {
        let mut fs = Self::default();
        let mut stack = vec![(root.to_path_buf(), String::new())];
        while let Some((dir, image_dir)) = stack.pop() {
            let entries = fs::read_dir(&dir).map_err(io_err("reading directory", &dir))?;
            for entry in entries {
                let entry = entry.map_err(io_err("reading directory", &dir))?;
                let host = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                let path = format!("{image_dir}/{name}");
                let meta = fs::symlink_metadata(&host).map_err(io_err("reading", &host))?;
                let ty = meta.file_type();
                let kind = if ty.is_dir() {
                    stack.push((host, path.clone()));
                    Kind::Dir
                } else if ty.is_symlink() {
                    let target = fs::read_link(&host).map_err(io_err("reading link", &host))?;
                    Kind::Symlink(target.to_string_lossy().into_owned())
                } else if ty.is_file() {
                    let file = File::open(&host).map_err(io_err("opening", &host))?;
                    let info =
                        file_info_from_file(&file, meta.len(), &path).map_err(io_err("reading", &host))?;
                    Kind::File(Arc::new(info))
                } else {
                    Kind::Other
                };
                fs.nodes.insert(path, Node { kind, layer: 0 });
            }
        }
        Ok(fs)
    }
}

/// Whether the text of a non-ELF file at `path` is kept (`ld.so.conf` and its includes).
fn wants_text(path: &str, size: u64) -> bool {
    size <= MAX_TEXT
        && (path == "/etc/ld.so.conf"
            || (path.starts_with("/etc/")
                && Path::new(path).extension().is_some_and(|e| e.eq_ignore_ascii_case("conf"))))
}

#[cfg(test)]
/// Reads what the audit needs from a file on disk.
fn file_info_from_file(file: &File, size: u64, path: &str) -> io::Result<FileInfo> {
    let mut magic = [0; 4];
    let got = elf::ReadAt::read_at(file, &mut magic, 0)?;
    if got == 4 && magic == MAGIC {
        let elf = match elf::parse(file, size) {
            Ok(info) => ElfState::Elf(info),
            Err(elf::ElfError::Io(e)) => return Err(e),
            Err(e) => ElfState::Invalid(e.to_string()),
        };
        return Ok(FileInfo { elf, text: None });
    }
    let text = if wants_text(path, size) {
        let mut bytes = Vec::new();
        file.take(MAX_TEXT).read_to_end(&mut bytes)?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        None
    };
    Ok(FileInfo { elf: ElfState::NotElf, text })
}

/// Reads into `buf` until it is full or the reader ends; returns how much was read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match r.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads what the audit needs from a file streamed out of a tar, `size` bytes long. ELF files
/// are buffered (in memory up to `spool_above` bytes, in an anonymous temporary file beyond)
/// since their dynamic section may come after the bytes that point at it.
fn file_info_from_stream(r: &mut impl Read, size: u64, path: &str, large: Large) -> io::Result<FileInfo> {
    let mut magic = [0; 4];
    let got = read_full(r, &mut magic)?;
    if got == 4 && magic == MAGIC {
        let parsed = match large {
            _ if size <= large.limit() => {
                let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                buf.extend_from_slice(&magic);
                r.read_to_end(&mut buf)?;
                elf::parse(buf.as_slice(), buf.len() as u64)
            }
            Large::Spool(_) => {
                let mut tmp = tempfile::tempfile()?;
                tmp.write_all(&magic)?;
                let copied = io::copy(r, &mut tmp)?;
                elf::parse(&tmp, copied + 4)
            }
            Large::Once(keep) => {
                let once = Once::new(r, magic, keep)?;
                let parsed = elf::parse(&once, size);
                if once.missed.get() {
                    return Err(io::Error::other(format!(
                        "{path}: its dynamic strings lie past the first {keep} bytes"
                    )));
                }
                parsed
            }
        };
        let elf = match parsed {
            Ok(info) => ElfState::Elf(info),
            Err(elf::ElfError::Io(e)) => return Err(e),
            Err(e) => ElfState::Invalid(e.to_string()),
        };
        return Ok(FileInfo { elf, text: None });
    }
    let text = if wants_text(path, size) {
        let mut bytes = magic[..got].to_vec();
        r.take(MAX_TEXT).read_to_end(&mut bytes)?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        None
    };
    Ok(FileInfo { elf: ElfState::NotElf, text })
}

/// A file read once, front to back ([`Large::Once`]), as [`elf::ReadAt`]: its first bytes are
/// kept, later ones read when asked for and then gone.
struct Once<'r, R> {
    head: Vec<u8>,
    rest: std::cell::RefCell<(&'r mut R, u64)>,
    /// A read asked for bytes already gone.
    missed: std::cell::Cell<bool>,
}

impl<'r, R: Read> Once<'r, R> {
    /// Keeps the first `keep` bytes of the file (`magic` already read from `r`).
    fn new(r: &'r mut R, magic: [u8; 4], keep: u64) -> io::Result<Self> {
        let mut head = magic.to_vec();
        r.take(keep.saturating_sub(4)).read_to_end(&mut head)?;
        let pos = head.len() as u64;
        Ok(Self { head, rest: std::cell::RefCell::new((r, pos)), missed: std::cell::Cell::new(false) })
    }
}

impl<R: Read> elf::ReadAt for Once<'_, R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let kept = self.head.len() as u64;
        if offset < kept {
            return self.head.read_at(buf, offset);
        }
        let mut rest = self.rest.borrow_mut();
        let (r, pos) = &mut *rest;
        if offset < *pos {
            self.missed.set(true);
            return Err(io::Error::other(format!("offset {offset:#x} was streamed past")));
        }
        let skipped = io::copy(&mut (&mut **r).take(offset - *pos), &mut io::sink())?;
        *pos += skipped;
        if *pos < offset {
            return Ok(0);
        }
        let n = r.read(buf)?;
        *pos += n as u64;
        Ok(n)
    }
}

/// The compression of a layer: from its media type, else from its first bytes.
fn detect(media_type: &str, reader: &mut impl BufRead) -> io::Result<Compression> {
    if let Some(c) = Compression::from_media_type(media_type) {
        return Ok(c);
    }
    let head = reader.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    })
}

/// Streams the layer blob at `path` (gzip, zstd or plain tar) and lists its changes, reading
/// the content of ELF files and configuration files only.
pub(super) fn read_layer(path: &Path, media_type: &str, spool_above: u64) -> io::Result<Vec<Op>> {
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path)?);
    let decoded: Box<dyn Read> = match detect(media_type, &mut reader)? {
        Compression::Gzip | Compression::Estargz => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
        Compression::Zstd | Compression::ZstdChunked => {
            Box::new(zstd::stream::read::Decoder::with_buffer(reader)?)
        }
        Compression::None => Box::new(reader),
    };
    read_tar(decoded, Large::Spool(spool_above))
}

/// Lists the changes of an uncompressed layer tar.
pub(super) fn read_tar(reader: impl Read, large: Large) -> io::Result<Vec<Op>> {
    let mut archive = tar::Archive::new(reader);
    let mut ops = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(path) = normalize(&name) else { continue };
        if path == "/" {
            continue;
        }
        let (parent, base) = split_parent(&path);
        if base == ".wh..wh..opq" {
            ops.push(Op::Opaque(parent.to_string()));
            continue;
        }
        if let Some(hidden) = base.strip_prefix(".wh.") {
            // `.wh..wh.*` other than the opaque marker are aufs bookkeeping (`.wh..wh.plnk`).
            if !hidden.starts_with(".wh.") && !hidden.is_empty() {
                ops.push(Op::Whiteout(join(parent, hidden)));
            }
            continue;
        }
        let ty = entry.header().entry_type();
        let op = match ty {
            tar::EntryType::Directory => Op::Put(path, Kind::Dir),
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| String::from_utf8_lossy(&t).into_owned());
                match target {
                    Some(t) if !t.is_empty() => Op::Put(path, Kind::Symlink(t)),
                    _ => Op::Put(path, Kind::Other),
                }
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .and_then(|t| normalize(&String::from_utf8_lossy(&t)))
                    .filter(|t| t != "/");
                match target {
                    Some(t) => Op::Link(path, t),
                    None => Op::Put(path, Kind::Other),
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                let size = entry.size();
                let info = file_info_from_stream(&mut entry, size, &path, large)?;
                Op::Put(path, Kind::File(Arc::new(info)))
            }
            _ => Op::Put(path, Kind::Other),
        };
        ops.push(op);
    }
    Ok(ops)
}
