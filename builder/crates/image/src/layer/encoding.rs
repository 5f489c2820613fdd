//! What a layer's compression is, in full: the settings the writer compresses with and the layout
//! it lays out, as one struct (Encoding) that the layer's cache key hashes, so that a setting
//! cannot change the bytes without changing the key.

use super::{estargz, members, GZIP_LEVEL, ZSTD_LEVEL};
use stackbuild_common::Compression;

/// How a layer's entries become its blob: everything besides the entries and the epoch that the
/// blob's bytes depend on, which is each layer key's part from the compression
/// ([`Encoding::of`]). The writer takes its settings from this struct (`LayerWriter::finish`
/// makes one and encodes by it), so a setting cannot change the bytes without changing the keys
/// of the layers written with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Encoding {
    /// The blob's media type: recorded with the blob, and what tells a runtime how to read it.
    pub media_type: &'static str,
    /// How the tar stream is compressed.
    pub codec: Codec,
    /// The table of contents of a layout a snapshotter mounts lazily, if any: its format and
    /// footer are bytes of the blob.
    pub toc: Option<TocLayout>,
    /// The revision of the writer's own code, which no setting captures: the tar layout (GNU
    /// headers, entry order, implied directories, hardlink canonicalization), the fixed gzip
    /// headers, where members are cut. Raised by hand (`WRITER_REVISION`) when the writer
    /// writes other bytes for the same entries and settings; nothing else is.
    pub writer_revision: u32,
}

/// [`Encoding::writer_revision`].
pub(super) const WRITER_REVISION: u32 = 1;

/// How a layer's tar stream is compressed ([`Encoding::codec`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Codec {
    /// The tar as it is.
    Plain,
    /// Independent members, each of `chunk` bytes of input compressed on its own on a worker
    /// thread (`members`, pigz's independent mode): the bytes depend on the chunk size and the
    /// member codec, never on the number of threads.
    Members {
        /// Bytes of input per member; also a TOC's chunk size.
        chunk: usize,
        /// What each member is.
        member: MemberCodec,
    },
    /// One zstd stream by libzstd's multithreaded encoder, whose jobs share their window.
    Zstd {
        /// The compression level.
        level: i32,
        /// Multithreaded mode, with at least one worker: its output does not depend on the
        /// number of workers, but differs from the single-threaded mode's.
        multithreaded: bool,
        /// The libzstd version compressing (`1.5.7`): another version may choose other matches.
        library: &'static str,
    },
}

/// What each member of [`Codec::Members`] is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemberCodec {
    /// A gzip member.
    Gzip {
        /// The deflate level.
        level: u32,
        /// The deflate implementation (flate2's `zlib-rs` backend, the workspace's `flate2`
        /// features): another one writes other bytes at the same level.
        deflate: &'static str,
        /// A wheel's deflated member goes in as its own gzip member, its deflate stream as the
        /// wheel has it ([`stackbuild_common::ZipMember`]), instead of being compressed again.
        carries_wheel_deflate: bool,
    },
    /// A zstd frame: the content size in its header, no checksum.
    Zstd {
        /// The compression level.
        level: i32,
        /// The libzstd version compressing.
        library: &'static str,
    },
}

/// The table of contents a lazily mounted layout adds to the blob ([`estargz`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TocLayout {
    /// eStargz: the TOC a tar entry in a gzip member of its own, a gzip footer naming it.
    Estargz {
        /// The TOC document's `version`.
        version: u32,
        /// Bytes of the footer member.
        footer: usize,
    },
    /// zstd:chunked: the TOC, zstd-compressed, and a footer in skippable frames after the tar.
    ZstdChunked {
        /// The TOC document's `version`.
        version: u32,
        /// The level the TOC is compressed at.
        level: i32,
        /// The manifest type the footer and the position annotation give.
        manifest_type: u64,
        /// Bytes of the footer.
        footer: usize,
        /// The footer's last eight bytes.
        magic: &'static str,
    },
}

impl Encoding {
    /// The encoding of a layer written with `compression`.
    pub fn of(compression: Compression) -> Self {
        let zstd = zstd::zstd_safe::version_string();
        let gzip = Codec::Members {
            chunk: members::CHUNK,
            member: MemberCodec::Gzip {
                level: GZIP_LEVEL,
                deflate: DEFLATE_BACKEND,
                carries_wheel_deflate: true,
            },
        };
        let (codec, toc) = match compression {
            Compression::None => (Codec::Plain, None),
            Compression::Gzip => (gzip, None),
            Compression::Estargz => (gzip, Some(estargz::layout(estargz::Flavor::Estargz))),
            Compression::Zstd => {
                (Codec::Zstd { level: ZSTD_LEVEL, multithreaded: true, library: zstd }, None)
            }
            Compression::ZstdChunked => (
                Codec::Members {
                    chunk: members::CHUNK,
                    member: MemberCodec::Zstd { level: ZSTD_LEVEL, library: zstd },
                },
                Some(estargz::layout(estargz::Flavor::ZstdChunked)),
            ),
        };
        Self { media_type: compression.media_type(), codec, toc, writer_revision: WRITER_REVISION }
    }

    /// Whether a wheel's deflated member goes into the layer as its own gzip member.
    pub(super) const fn carries_wheel_deflate(&self) -> bool {
        matches!(
            self.codec,
            Codec::Members { member: MemberCodec::Gzip { carries_wheel_deflate: true, .. }, .. }
        )
    }
}

/// The `deflate` of [`MemberCodec::Gzip`]: what flate2 compresses with (its `zlib-rs` feature,
/// set in the workspace's `Cargo.toml`).
pub(super) const DEFLATE_BACKEND: &str = "zlib-rs";
