//! The compression of a layer blob: its media type, its name in recipes, and a decoder.
//!
//! Below the layer writer (which encodes) so that readers of blobs (the bytecode compiler
//! reading a base layer, the audit, the loader) need no writer.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

/// Compression of a layer blob.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip (`tar+gzip`), what every tool can read.
    #[default]
    Gzip,
    /// zstd (`tar+zstd`), faster and smaller; needs a recent runtime to pull.
    Zstd,
    /// No compression (`tar`).
    None,
    /// eStargz: gzip whose files each start a gzip member, with a table of contents
    /// (see the layer writer's `estargz` module), so that a node with the stargz snapshotter mounts the layer before it has
    /// arrived and fetches files as they are read; any other runtime pulls it as gzip.
    Estargz,
    /// zstd:chunked: the eStargz layout in zstd frames (see the layer writer's `estargz` module), which the stargz
    /// snapshotter also mounts lazily and inflates several times faster; any other runtime pulls
    /// it as zstd.
    #[serde(rename = "zstd:chunked")]
    ZstdChunked,
}

impl Compression {
    /// The OCI media type of a layer with this compression.
    pub const fn media_type(self) -> &'static str {
        match self {
            Self::Gzip | Self::Estargz => "application/vnd.oci.image.layer.v1.tar+gzip",
            Self::Zstd | Self::ZstdChunked => "application/vnd.oci.image.layer.v1.tar+zstd",
            Self::None => "application/vnd.oci.image.layer.v1.tar",
        }
    }

    /// The compression a layer media type (OCI or Docker) stands for.
    pub fn from_media_type(media_type: &str) -> Option<Self> {
        match media_type {
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Some(Self::Gzip),
            "application/vnd.oci.image.layer.v1.tar+zstd" => Some(Self::Zstd),
            "application/vnd.oci.image.layer.v1.tar" | "application/vnd.docker.image.rootfs.diff.tar" => {
                Some(Self::None)
            }
            _ => None,
        }
    }

    /// A reader of the uncompressed tar of a blob with this compression (for example a base
    /// image layer to transcode with `LayerWriter::add_tar`).
    pub fn decoder<'a, R: Read + 'a>(self, reader: R) -> io::Result<Box<dyn Read + 'a>> {
        Ok(match self {
            Self::Gzip | Self::Estargz => Box::new(flate2::read::MultiGzDecoder::new(reader)),
            Self::Zstd | Self::ZstdChunked => Box::new(zstd::stream::read::Decoder::new(reader)?),
            Self::None => Box::new(reader),
        })
    }

    /// The name used in recipes and cache keys: `gzip`, `zstd`, `estargz`, `zstd:chunked` or
    /// `none`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
            Self::None => "none",
            Self::Estargz => "estargz",
            Self::ZstdChunked => "zstd:chunked",
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = UnknownCompression;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gzip" => Ok(Self::Gzip),
            "zstd" => Ok(Self::Zstd),
            "none" => Ok(Self::None),
            "estargz" => Ok(Self::Estargz),
            "zstd:chunked" => Ok(Self::ZstdChunked),
            other => Err(UnknownCompression(other.to_string())),
        }
    }
}

/// A compression name that is none of `gzip`, `zstd`, `estargz`, `zstd:chunked` and `none`.
#[derive(Debug, thiserror::Error)]
#[error("unknown compression {0:?} (expected gzip, zstd, estargz, zstd:chunked or none)")]
pub struct UnknownCompression(pub String);
