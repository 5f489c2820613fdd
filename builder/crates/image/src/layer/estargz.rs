//! eStargz: a gzip layer that a node can mount before it has arrived.
//!
//! The format (<https://github.com/containerd/stargz-snapshotter/blob/main/docs/estargz.md>) is
//! an ordinary gzip-compressed tar, so every runtime pulls it as gzip, with three additions that
//! the stargz snapshotter reads to mount the layer lazily over HTTP range requests and fetch each
//! file as it is first read:
//!
//! - every regular file's content begins a gzip member of its own (its tar header ends the member
//!   before), and content is cut into members of [`CHUNK`] bytes, so any file or chunk can be
//!   inflated from its offset in the blob alone;
//! - a table of contents, the tar entry `stargz.index.json` in the last member but one, lists
//!   every entry with its metadata and, for file contents, the compressed offset of each chunk
//!   and the sha256 of the file and of each chunk;
//! - a 51-byte empty gzip member ends the blob, its `FEXTRA` field (RFC 1952 section 2.3.1.1)
//!   holding the TOC's offset: subfield `SG`, `%016x` of the offset followed by `STARGZ`.
//!
//! The layer's descriptor carries the TOC's sha256 as `containerd.io/snapshot/stargz/toc.digest`
//! (the snapshotter refuses to mount a layer whose TOC does not match it, then checks each
//! chunk it fetches against the TOC) and the tar's size as
//! `io.containers.estargz.uncompressed-size` (which containers/storage's stargz store needs).
//!
//! The chunks are the members the parallel writer ([`super::members`]) makes anyway: a file's
//! content starts a member ([`super::members::ParallelMembers::cut`]) and the writer ends one every
//! [`CHUNK`] bytes, so cutting costs one small member per file and no second pass. A wheel
//! member goes in as its own deflate stream, as in a gzip layer: one chunk, whose digest is the
//! one `RECORD` gives (checked as it streams). The field names and their omission when empty
//! follow `estargz/types.go` of the stargz snapshotter (`TOCEntry`).
//!
//! zstd:chunked ([`Flavor::ZstdChunked`]) is the same layout in zstd frames, as the stargz
//! snapshotter reads it (`estargz/zstdchunked/zstdchunked.go`, 0.12 on) and containers/storage
//! writes it (`pkg/chunked/compressor`): each file's content begins a frame and is cut into
//! [`CHUNK`]-byte frames, and the tar ends in frames of its own. The TOC is not a tar entry: its
//! JSON, zstd-compressed, follows the tar in a skippable frame (RFC 8878 section 3.1.2, magic
//! `0x184D2A50`), and a skippable frame with a 40-byte footer ends the blob: the compressed
//! TOC's offset, its compressed and raw sizes and the manifest type 1 (this TOC format), each a
//! little-endian u64, then the magic `GnUlInUx`. Decoders skip both frames, so any runtime pulls
//! the layer as plain zstd. The descriptor carries the TOC's digest (of its JSON) as in eStargz,
//! plus `io.containers.zstd-chunked.manifest-checksum` (the compressed TOC's digest) and
//! `io.containers.zstd-chunked.manifest-position` (`offset:compressed:raw:1`). Wheel members
//! are inflated and go in as zstd like any other file.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use tar::{EntryType, Header};

use super::members::CHUNK;
use super::{
    entry_error, lossy, write_gzip_member, ChangedError, Data, Encoder, Hashing, Kind, LayerError,
    LayerWriter, Node, TocLayout,
};

/// The TOC document's `version` (`JTOC.Version` in the snapshotter's `estargz/types.go`).
const TOC_VERSION: u32 = 1;
/// Bytes of the eStargz footer member.
const FOOTER_LEN: usize = 51;
/// Bytes of the zstd:chunked footer.
const ZSTD_CHUNKED_FOOTER_LEN: usize = 40;
/// The zstd:chunked manifest type of this TOC format, in the footer and the position annotation.
const MANIFEST_TYPE: u64 = 1;
/// The TOC's entry name.
pub const TOC_NAME: &str = "stargz.index.json";
/// The descriptor annotation with the TOC's digest.
pub const TOC_DIGEST_ANNOTATION: &str = "containerd.io/snapshot/stargz/toc.digest";
/// The descriptor annotation with the uncompressed size.
pub const UNCOMPRESSED_SIZE_ANNOTATION: &str = "io.containers.estargz.uncompressed-size";
/// zstd:chunked: the descriptor annotation with the compressed TOC's digest.
pub const MANIFEST_CHECKSUM_ANNOTATION: &str = "io.containers.zstd-chunked.manifest-checksum";
/// zstd:chunked: the descriptor annotation with the compressed TOC's place and sizes.
pub const MANIFEST_POSITION_ANNOTATION: &str = "io.containers.zstd-chunked.manifest-position";
/// A zstd skippable frame's magic (RFC 8878 section 3.1.2), little-endian.
const SKIPPABLE_MAGIC: [u8; 4] = [0x50, 0x2a, 0x4d, 0x18];
/// The end of a zstd:chunked footer.
const ZSTD_CHUNKED_MAGIC: &str = "GnUlInUx";
/// The zstd level of a zstd:chunked TOC.
const TOC_ZSTD_LEVEL: i32 = 3;

/// Which of the two layouts a layer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// gzip members, the TOC a tar entry, the 51-byte gzip footer.
    Estargz,
    /// zstd frames, the TOC and the 40-byte footer in skippable frames after the tar.
    ZstdChunked,
}

/// The part of a layer's [`super::Encoding`] that its TOC gives: the constants this module
/// writes into the blob.
pub(super) const fn layout(flavor: Flavor) -> TocLayout {
    match flavor {
        Flavor::Estargz => TocLayout::Estargz { version: TOC_VERSION, footer: FOOTER_LEN },
        Flavor::ZstdChunked => TocLayout::ZstdChunked {
            version: TOC_VERSION,
            level: TOC_ZSTD_LEVEL,
            manifest_type: MANIFEST_TYPE,
            footer: ZSTD_CHUNKED_FOOTER_LEN,
            magic: ZSTD_CHUNKED_MAGIC,
        },
    }
}

impl TocLayout {
    /// Which layout writes this TOC.
    pub(super) const fn flavor(&self) -> Flavor {
        match self {
            Self::Estargz { .. } => Flavor::Estargz,
            Self::ZstdChunked { .. } => Flavor::ZstdChunked,
        }
    }
}

/// A TOC once every entry is written: what ends the blob after the compressed tar.
pub enum Ending {
    /// The TOC's digest and where the member holding its tar entry begins.
    Estargz { digest: String, offset: u64 },
    /// The TOC's JSON and digest, to follow the tar.
    ZstdChunked { json: Vec<u8>, digest: String },
}

impl Ending {
    /// Writes the end of the blob to `out`, which is at byte `at` of it, and returns the
    /// descriptor's annotations for a tar of `tar_size` bytes.
    pub fn end(self, out: &mut impl Write, at: u64, tar_size: u64) -> io::Result<BTreeMap<String, String>> {
        match self {
            Self::Estargz { digest, offset } => {
                out.write_all(&footer(offset))?;
                Ok(annotations(&digest, tar_size))
            }
            Self::ZstdChunked { json, digest } => {
                let compressed = zstd::bulk::compress(&json, TOC_ZSTD_LEVEL)?;
                out.write_all(&skippable(&compressed)?)?;
                // The TOC begins after its frame's magic and size.
                let toc_offset = at + 8;
                let raw = json.len() as u64;
                out.write_all(&skippable(&zstd_chunked_footer(toc_offset, compressed.len() as u64, raw))?)?;
                Ok(BTreeMap::from([
                    (TOC_DIGEST_ANNOTATION.to_owned(), digest),
                    (
                        MANIFEST_CHECKSUM_ANNOTATION.to_owned(),
                        format!("sha256:{}", hex::encode(Sha256::digest(&compressed))),
                    ),
                    (
                        MANIFEST_POSITION_ANNOTATION.to_owned(),
                        format!("{toc_offset}:{}:{raw}:{MANIFEST_TYPE}", compressed.len()),
                    ),
                ]))
            }
        }
    }
}

/// `data` in a zstd skippable frame.
fn skippable(data: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(data.len()).map_err(|_| io::Error::other("a zstd:chunked TOC over 4 GiB"))?;
    let mut frame = Vec::with_capacity(data.len() + 8);
    frame.extend_from_slice(&SKIPPABLE_MAGIC);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(data);
    Ok(frame)
}

/// The 40-byte zstd:chunked footer (`zstdFooterBytes` in the snapshotter's `zstdchunked.go`).
fn zstd_chunked_footer(toc_offset: u64, compressed: u64, raw: u64) -> [u8; ZSTD_CHUNKED_FOOTER_LEN] {
    let mut f = [0u8; ZSTD_CHUNKED_FOOTER_LEN];
    f[..8].copy_from_slice(&toc_offset.to_le_bytes());
    f[8..16].copy_from_slice(&compressed.to_le_bytes());
    f[16..24].copy_from_slice(&raw.to_le_bytes());
    f[24..32].copy_from_slice(&MANIFEST_TYPE.to_le_bytes());
    f[32..].copy_from_slice(ZSTD_CHUNKED_MAGIC.as_bytes());
    f
}

/// Where a file's chunk begins in the blob: a member not yet written, or a known offset.
#[derive(Debug, Clone, Copy)]
pub enum At {
    /// The member with this sequence number of the parallel gzip writer.
    Member(u64),
    /// This byte of the blob.
    Byte(u64),
}

/// The TOC document (`JTOC`).
#[derive(Serialize)]
struct Jtoc<'a> {
    version: u32,
    entries: &'a [Entry],
}

/// One entry of the TOC.
#[derive(Debug, Serialize)]
pub struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "is_zero")]
    size: u64,
    #[serde(rename = "modtime", skip_serializing_if = "String::is_empty")]
    modtime: String,
    #[serde(rename = "linkName", skip_serializing_if = "String::is_empty")]
    link_name: String,
    #[serde(skip_serializing_if = "is_zero")]
    mode: u64,
    #[serde(skip_serializing_if = "is_zero")]
    uid: u64,
    #[serde(skip_serializing_if = "is_zero")]
    gid: u64,
    #[serde(skip_serializing_if = "is_zero")]
    offset: u64,
    #[serde(rename = "devMajor", skip_serializing_if = "is_zero")]
    dev_major: u64,
    #[serde(rename = "devMinor", skip_serializing_if = "is_zero")]
    dev_minor: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    digest: String,
    #[serde(rename = "chunkOffset", skip_serializing_if = "is_zero")]
    chunk_offset: u64,
    #[serde(rename = "chunkSize", skip_serializing_if = "is_zero")]
    chunk_size: u64,
    #[serde(rename = "chunkDigest", skip_serializing_if = "String::is_empty")]
    chunk_digest: String,
    #[serde(skip)]
    at: Option<At>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The metadata of one tar entry, as the TOC records it.
pub struct Meta<'a> {
    /// The entry's name in the tar (UTF-8: JSON carries nothing else).
    pub name: &'a str,
    /// `dir`, `reg`, `symlink`, `hardlink`, `char`, `block` or `fifo`.
    pub kind: &'static str,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// A link's target.
    pub link: &'a str,
    /// A device's numbers.
    pub dev: (u32, u32),
}

/// The TOC of one layer, built as its entries are written.
pub struct Toc {
    flavor: Flavor,
    entries: Vec<Entry>,
    modtime: String,
    /// A wheel's deflated member goes in as its own gzip member ([`Toc::carrying`]).
    carry: bool,
}

impl Toc {
    /// A TOC of a `flavor` layer for entries whose mtime is `epoch` (omitted at 0, as the
    /// snapshotter's writer does).
    pub fn new(flavor: Flavor, epoch: u64) -> Self {
        let modtime = if epoch == 0 { String::new() } else { stackcontract::time::rfc3339(epoch) };
        Self { flavor, entries: Vec::new(), modtime, carry: false }
    }

    /// The TOC of a layer that carries wheels' deflated members as their own gzip members when
    /// `carry` (the layer's [`super::Encoding::carries_wheel_deflate`]: eStargz's), one chunk each.
    #[must_use]
    pub(super) fn carrying(mut self, carry: bool) -> Self {
        self.carry = carry;
        self
    }

    /// An entry without content (a directory, a link, a device, an empty file).
    pub fn entry(&mut self, meta: &Meta<'_>) {
        let mut e = self.base(meta);
        if meta.kind == "reg" {
            e.digest = format!("sha256:{}", hex::encode(Sha256::digest(b"")));
        }
        self.entries.push(e);
    }

    /// A regular file of `size` bytes whose content begins at `at`, as one chunk of `sha256`.
    pub fn file(&mut self, meta: &Meta<'_>, size: u64, at: At, sha256: &str) {
        let mut e = self.base(meta);
        e.size = size;
        e.digest = format!("sha256:{sha256}");
        e.chunk_digest.clone_from(&e.digest);
        e.at = Some(at);
        self.entries.push(e);
    }

    /// A regular file of `size` bytes cut into [`CHUNK`]-byte chunks, the first in member
    /// `first` and each next one in the next member, with the file's and the chunks' sha256.
    pub fn chunked(&mut self, meta: &Meta<'_>, size: u64, first: u64, sha256: &str, chunks: &[String]) {
        let chunk = CHUNK as u64;
        for (k, digest) in (0u64..).zip(chunks) {
            let from = k * chunk;
            let mut c = if k == 0 {
                Entry { size, digest: format!("sha256:{sha256}"), ..self.base(meta) }
            } else {
                // A chunk entry carries only its name, place and digest.
                let bare = Meta { kind: "chunk", mode: 0, uid: 0, gid: 0, ..*meta };
                Entry { modtime: String::new(), ..self.base(&bare) }
            };
            c.chunk_offset = from;
            // Every chunk but a short last one says its size (`estargz.go`, `appendTar`).
            if size - from >= chunk {
                c.chunk_size = chunk;
            }
            c.chunk_digest = format!("sha256:{digest}");
            c.at = Some(At::Member(first + k));
            self.entries.push(c);
        }
    }

    fn base(&self, meta: &Meta<'_>) -> Entry {
        Entry {
            name: meta.name.to_owned(),
            kind: meta.kind,
            size: 0,
            modtime: self.modtime.clone(),
            link_name: meta.link.to_owned(),
            mode: u64::from(meta.mode),
            uid: meta.uid,
            gid: meta.gid,
            offset: 0,
            dev_major: u64::from(meta.dev.0),
            dev_minor: u64::from(meta.dev.1),
            digest: String::new(),
            chunk_offset: 0,
            chunk_size: 0,
            chunk_digest: String::new(),
            at: None,
        }
    }

    /// The TOC's JSON, every offset resolved by `start_of` (a member's place in the blob), and
    /// its sha256 (`sha256:<hex>`). `None` when a member's place is unknown.
    pub fn json(mut self, start_of: impl Fn(u64) -> Option<u64>) -> Option<(Vec<u8>, String)> {
        for e in &mut self.entries {
            e.offset = match e.at {
                None => 0,
                Some(At::Byte(b)) => b,
                Some(At::Member(seq)) => start_of(seq)?,
            };
        }
        // No trailing newline: the reader digests the bytes its JSON decoder consumes.
        let json = serde_json::to_vec(&Jtoc { version: TOC_VERSION, entries: &self.entries }).ok()?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&json)));
        Some((json, digest))
    }
}

impl LayerWriter {
    /// Writes one entry of an eStargz or zstd:chunked layer and records it in `toc`: a regular
    /// file's content begins a member of its own and is cut into chunks ([this module](self)); a
    /// wheel's member goes in as its own deflate stream when the TOC's layer carries them
    /// ([`Toc::carrying`]).
    pub(super) fn estargz_entry<W: Write>(
        &self,
        toc: &mut Toc,
        builder: &mut tar::Builder<BufWriter<Hashing<Encoder<W>>>>,
        path: &[u8],
        node: &Node,
        bar: &stackbuild_common::Progress,
        tmp_path: &Path,
    ) -> Result<(), LayerError> {
        let meta = meta_of(path, node)?;
        let data = match &node.kind {
            Kind::File(data) if data.len() > 0 => data,
            // Nothing to chunk: the entry as in any layer, and its line in the TOC.
            _ => {
                self.tar_entry(builder, path, node, toc.carry, bar, tmp_path)?;
                toc.entry(&meta);
                return Ok(());
            }
        };
        let entry_err = |source| entry_error(source, tmp_path, path);
        // The header alone ends the member before; the content begins the next one.
        let size = data.len();
        let mut header = self.header_of(node);
        header.set_entry_type(EntryType::Regular);
        header.set_size(size);
        builder
            .append_data(&mut header, Path::new(OsStr::from_bytes(path)), io::empty())
            .map_err(entry_err)?;
        let out = builder.get_mut();
        out.flush().map_err(entry_err)?;
        if let (true, Data::Zip(member)) = (toc.carry, data) {
            let offset = {
                let Encoder::Members(gzip) = &mut out.get_mut().inner else {
                    unreachable!("eStargz is gzip")
                };
                gzip.raw().map_err(entry_err)?;
                gzip.written()
            };
            write_gzip_member(out.get_mut(), member)?;
            bar.inc(member.size);
            let sha256 = member.sha256_hex().ok_or_else(|| LayerError::Unsupported {
                entry: lossy(path),
                what: "wheel member whose RECORD hash is not a sha256".into(),
            })?;
            toc.file(&meta, size, At::Byte(offset), &sha256);
        } else {
            let first = {
                let Encoder::Members(members) = &mut out.get_mut().inner else {
                    unreachable!("written in members")
                };
                members.cut().map_err(entry_err)?
            };
            let mut sink = ChunkSink { out, hasher: ChunkHasher::new(size) };
            let copied = io::copy(&mut bar.wrap_read(self.open_data(data)?), &mut sink).map_err(entry_err)?;
            let hasher = sink.hasher;
            if copied != size {
                return Err(entry_err(io::Error::other(ChangedError(tmp_path.join(lossy(path))))));
            }
            let (sha256, chunks) = hasher.finish();
            toc.chunked(&meta, size, first, &sha256, &chunks);
        }
        let padding = (512 - size % 512) % 512;
        #[allow(clippy::cast_possible_truncation)]
        builder.get_mut().write_all(&[0; 512][..padding as usize]).map_err(entry_err)?;
        Ok(())
    }

    /// Ends a layer's entries: every member written, then (eStargz) the TOC as the tar entry
    /// [`TOC_NAME`] in one member (the reader inflates that member alone). Returns what ends
    /// the blob.
    pub(super) fn estargz_toc<W: Write>(
        toc: Toc,
        builder: &mut tar::Builder<BufWriter<Hashing<Encoder<W>>>>,
        epoch: u64,
    ) -> io::Result<Ending> {
        let out = builder.get_mut();
        out.flush()?;
        let Encoder::Members(members) = &mut out.get_mut().inner else { unreachable!("written in members") };
        members.raw()?;
        let offset = members.written();
        let flavor = toc.flavor;
        let (json, digest) = toc
            .json(|seq| members.start_of(seq))
            .ok_or_else(|| io::Error::other("a member's offset is unknown"))?;
        if flavor == Flavor::ZstdChunked {
            // The tar's end goes in frames of its own; the TOC follows the tar.
            return Ok(Ending::ZstdChunked { json, digest });
        }
        members.whole();
        let mut header = Header::new_gnu();
        header.set_entry_type(EntryType::Regular);
        header.set_mtime(epoch);
        header.set_mode(0o444);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(json.len() as u64);
        builder.append_data(&mut header, TOC_NAME, &json[..])?;
        Ok(Ending::Estargz { digest, offset })
    }
}

/// The TOC's view of an entry. Names and link targets must be UTF-8: the TOC is JSON, which
/// carries nothing else.
fn meta_of<'a>(path: &'a [u8], node: &'a Node) -> Result<Meta<'a>, LayerError> {
    let (kind, link, dev) = match &node.kind {
        Kind::Dir => ("dir", &[][..], (0, 0)),
        Kind::File(_) => ("reg", &[][..], (0, 0)),
        Kind::Symlink(t) => ("symlink", &t[..], (0, 0)),
        Kind::Hardlink(t) => ("hardlink", &t[..], (0, 0)),
        Kind::Char(a, b) => ("char", &[][..], (*a, *b)),
        Kind::Block(a, b) => ("block", &[][..], (*a, *b)),
        Kind::Fifo => ("fifo", &[][..], (0, 0)),
    };
    let utf8 = |bytes: &'a [u8], what: &str| {
        std::str::from_utf8(bytes).map_err(|_| LayerError::Unsupported {
            entry: lossy(path),
            what: format!("{what} that is not UTF-8 in a layer with a table of contents (it is JSON)"),
        })
    };
    let meta = Meta {
        name: utf8(path, "name")?,
        kind,
        mode: node.mode,
        uid: node.uid,
        gid: node.gid,
        link: utf8(link, "link target")?,
        dev,
    };
    Ok(meta)
}

/// The layer's tar, hashing a file's content and its chunks on the way.
struct ChunkSink<'a, W> {
    out: &'a mut W,
    hasher: ChunkHasher,
}

impl<W: Write> Write for ChunkSink<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The annotations of a layer descriptor for a TOC and an uncompressed size.
pub fn annotations(toc_digest: &str, uncompressed: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (TOC_DIGEST_ANNOTATION.to_owned(), toc_digest.to_owned()),
        (UNCOMPRESSED_SIZE_ANNOTATION.to_owned(), uncompressed.to_string()),
    ])
}

/// The 51-byte footer: an empty gzip member whose extra field says where the TOC begins.
pub fn footer(toc_offset: u64) -> [u8; FOOTER_LEN] {
    let mut f = [0u8; FOOTER_LEN];
    // ID1 ID2, CM = deflate, FLG = FEXTRA, MTIME = 0, XFL = 0, OS = 255.
    f[..10].copy_from_slice(&[0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 255]);
    // XLEN = 26: subfield id `SG`, length 22, `%016x` offset + `STARGZ`.
    f[10..12].copy_from_slice(&26u16.to_le_bytes());
    f[12..14].copy_from_slice(b"SG");
    f[14..16].copy_from_slice(&22u16.to_le_bytes());
    f[16..38].copy_from_slice(format!("{toc_offset:016x}STARGZ").as_bytes());
    // An empty stored final block, then CRC32 = 0 and ISIZE = 0 of no data.
    f[38..43].copy_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
    f
}

/// The sha256 of a file's content and of each [`CHUNK`]-byte chunk of it, as it streams.
pub struct ChunkHasher {
    /// The whole file's, for a file of several chunks only: of one, it is the chunk's.
    file: Option<Sha256>,
    chunk: Sha256,
    in_chunk: usize,
    /// Hex digests of the chunks finished so far.
    pub chunks: Vec<String>,
}

impl ChunkHasher {
    /// A hasher for content of `size` bytes.
    pub fn new(size: u64) -> Self {
        let file = (size > CHUNK as u64).then(Sha256::new);
        Self { file, chunk: Sha256::new(), in_chunk: 0, chunks: Vec::new() }
    }

    /// Takes the next bytes of the content.
    pub fn update(&mut self, mut data: &[u8]) {
        if let Some(file) = &mut self.file {
            file.update(data);
        }
        while !data.is_empty() {
            let n = data.len().min(CHUNK - self.in_chunk);
            self.chunk.update(&data[..n]);
            self.in_chunk += n;
            data = &data[n..];
            if self.in_chunk == CHUNK {
                self.chunks.push(hex::encode(std::mem::take(&mut self.chunk).finalize()));
                self.in_chunk = 0;
            }
        }
    }

    /// The file's hex sha256 and its chunks' (a short last chunk included).
    pub fn finish(mut self) -> (String, Vec<String>) {
        if self.in_chunk > 0 || self.chunks.is_empty() {
            self.chunks.push(hex::encode(self.chunk.finalize()));
        }
        let file = self.file.map_or_else(|| self.chunks[0].clone(), |f| hex::encode(f.finalize()));
        (file, self.chunks)
    }
}

/// Reads an eStargz or zstd:chunked blob the way the stargz snapshotter does, for tests: the
/// footer, the TOC (its digest the descriptor's annotation), then every chunk inflated from its
/// own offset alone and checked against its digest. Returns each regular file's content by name.
#[cfg(any(test, feature = "verify"))]
pub fn verify(blob: &stackbuild_common::LayerBlob) -> BTreeMap<String, Vec<u8>> {
    use std::io::Read as _;
    let bytes = std::fs::read(&blob.path).unwrap();
    let zstd = blob.media_type.ends_with("+zstd");
    let json = if zstd { zstd_chunked_toc(blob, &bytes) } else { estargz_toc(&bytes) };
    assert_eq!(
        blob.annotations[TOC_DIGEST_ANNOTATION],
        format!("sha256:{}", hex::encode(Sha256::digest(&json)))
    );
    let inflate = |offset: usize, len: u64| {
        let mut chunk = Vec::new();
        if zstd {
            // As the snapshotter's zstd reader: a stream from the offset, frames in turn.
            zstd::stream::read::Decoder::new(&bytes[offset..])
                .unwrap()
                .take(len)
                .read_to_end(&mut chunk)
                .unwrap();
        } else {
            flate2::read::GzDecoder::new(&bytes[offset..]).take(len).read_to_end(&mut chunk).unwrap();
        }
        chunk
    };
    let toc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let files = read_chunks(&toc, inflate);
    // And the whole blob is one gzip or zstd stream of the tar the diff_id names.
    let mut tar = Vec::new();
    if zstd {
        zstd::stream::read::Decoder::new(&bytes[..]).unwrap().read_to_end(&mut tar).unwrap();
    } else {
        flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_end(&mut tar).unwrap();
        assert_eq!(blob.annotations[UNCOMPRESSED_SIZE_ANNOTATION], tar.len().to_string());
    }
    assert_eq!(blob.diff_id, format!("sha256:{}", hex::encode(Sha256::digest(&tar))));
    files
}

/// The TOC JSON of an eStargz blob: the footer, then the TOC member alone.
#[cfg(any(test, feature = "verify"))]
fn estargz_toc(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let (body, foot) = bytes.split_at(bytes.len() - 51);
    let mut d = flate2::read::GzDecoder::new(foot);
    std::io::copy(&mut d, &mut std::io::sink()).unwrap();
    let extra = d.header().unwrap().extra().unwrap().to_vec();
    assert_eq!(&extra[..4], b"SG\x16\x00");
    assert_eq!(&extra[20..], b"STARGZ");
    let toc_offset = usize::from_str_radix(std::str::from_utf8(&extra[4..20]).unwrap(), 16).unwrap();
    // The TOC member alone (a single-member decoder), its first entry the TOC.
    let mut toc_tar = tar::Archive::new(flate2::read::GzDecoder::new(&body[toc_offset..]));
    let mut first = toc_tar.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(first.path().unwrap().to_str().unwrap(), TOC_NAME);
    let mut json = Vec::new();
    first.read_to_end(&mut json).unwrap();
    json
}

/// The TOC JSON of a zstd:chunked blob, as `zstdchunked.go`'s `ParseFooter` and
/// `ParseTOC` find it, checked against the containers/storage annotations.
#[cfg(any(test, feature = "verify"))]
fn zstd_chunked_toc(blob: &stackbuild_common::LayerBlob, bytes: &[u8]) -> Vec<u8> {
    let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let foot = &bytes[bytes.len() - 40..];
    assert_eq!(&foot[32..], ZSTD_CHUNKED_MAGIC.as_bytes());
    assert_eq!(&bytes[bytes.len() - 48..bytes.len() - 40], b"\x50\x2a\x4d\x18\x28\x00\x00\x00");
    let (offset, compressed, raw) = (u64_at(foot, 0), u64_at(foot, 8), u64_at(foot, 16));
    assert_eq!(u64_at(foot, 24), 1);
    assert_eq!(blob.annotations[MANIFEST_POSITION_ANNOTATION], format!("{offset}:{compressed}:{raw}:1"));
    let at = usize::try_from(offset).unwrap();
    assert_eq!(&bytes[at - 8..at - 4], SKIPPABLE_MAGIC);
    let toc = &bytes[at..at + usize::try_from(compressed).unwrap()];
    assert_eq!(
        blob.annotations[MANIFEST_CHECKSUM_ANNOTATION],
        format!("sha256:{}", hex::encode(Sha256::digest(toc)))
    );
    let json = zstd::stream::decode_all(toc).unwrap();
    assert_eq!(json.len() as u64, raw);
    json
}

/// Every regular file's content, from its chunks each inflated by `inflate(offset, length)`
/// and checked against its digest, and each file against its own.
#[cfg(any(test, feature = "verify"))]
fn read_chunks(
    toc: &serde_json::Value,
    inflate: impl Fn(usize, u64) -> Vec<u8>,
) -> BTreeMap<String, Vec<u8>> {
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut current: Option<(String, u64, String)> = None;
    let mut offsets = std::collections::BTreeSet::new();
    for e in toc["entries"].as_array().unwrap() {
        let kind = e["type"].as_str().unwrap();
        let name = e["name"].as_str().unwrap().to_owned();
        if kind == "reg" {
            let size = e.get("size").and_then(serde_json::Value::as_u64).unwrap_or(0);
            files.insert(name.clone(), Vec::new());
            current = Some((name.clone(), size, e["digest"].as_str().unwrap().to_owned()));
            if size == 0 {
                continue;
            }
        } else if kind != "chunk" {
            continue;
        }
        let (file, size, _) = current.clone().unwrap();
        assert_eq!(file, name);
        let offset = usize::try_from(e["offset"].as_u64().unwrap()).unwrap();
        assert!(offsets.insert(offset), "offset {offset} twice");
        let from = e.get("chunkOffset").and_then(serde_json::Value::as_u64).unwrap_or(0);
        let len = e.get("chunkSize").and_then(serde_json::Value::as_u64).unwrap_or(size - from);
        let chunk = inflate(offset, len);
        assert_eq!(chunk.len() as u64, len, "{name} at {from}");
        assert_eq!(
            e["chunkDigest"].as_str().unwrap(),
            format!("sha256:{}", hex::encode(Sha256::digest(&chunk))),
            "{name} at {from}"
        );
        let content = files.get_mut(&file).unwrap();
        assert_eq!(content.len() as u64, from, "{name}: chunks in order");
        content.extend_from_slice(&chunk);
    }
    for e in toc["entries"].as_array().unwrap().iter().filter(|e| e["type"] == "reg") {
        let content = &files[e["name"].as_str().unwrap()];
        assert_eq!(e["digest"].as_str().unwrap(), format!("sha256:{}", hex::encode(Sha256::digest(content))));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn the_footer_is_an_empty_gzip_member_naming_the_toc_offset() {
        let f = footer(0x1234_5678);
        let mut d = flate2::read::GzDecoder::new(&f[..]);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert!(out.is_empty());
        let extra = d.header().unwrap().extra().unwrap();
        assert_eq!(&extra[..4], b"SG\x16\x00");
        assert_eq!(&extra[4..], b"0000000012345678STARGZ");
    }

    #[test]
    fn chunks_follow_the_content() {
        let data: Vec<u8> = (0..CHUNK * 2 + 10).map(|i| u8::try_from(i % 251).unwrap()).collect();
        let mut h = ChunkHasher::new(data.len() as u64);
        for piece in data.chunks(100_001) {
            h.update(piece);
        }
        let (file, chunks) = h.finish();
        assert_eq!(file, hex::encode(Sha256::digest(&data)));
        let want: Vec<String> = data.chunks(CHUNK).map(|c| hex::encode(Sha256::digest(c))).collect();
        assert_eq!(chunks, want);

        let meta = Meta { name: "a/big", kind: "reg", mode: 0o644, uid: 0, gid: 0, link: "", dev: (0, 0) };
        let mut toc = Toc::new(Flavor::Estargz, 0);
        toc.chunked(&meta, data.len() as u64, 3, &file, &chunks);
        let (json, _) = toc.json(|seq| Some(seq * 100)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let e = v["entries"].as_array().unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0]["type"], "reg");
        assert_eq!(e[0]["offset"], 300);
        assert_eq!(e[0]["chunkSize"], CHUNK);
        assert_eq!(e[1]["type"], "chunk");
        assert_eq!(e[1]["chunkOffset"], CHUNK);
        assert_eq!(e[2]["offset"], 500);
        assert!(e[2].get("chunkSize").is_none(), "{}", e[2]);
    }
}
