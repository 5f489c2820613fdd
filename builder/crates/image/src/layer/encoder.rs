//! The compressors a layer's tar goes through: gzip members on worker threads, one zstd stream
//! (libzstd's multithreaded encoder), or none, each configured from the layer's Encoding.

use super::encoding::{Codec, MemberCodec};
use super::{members, ZSTD_MAX_WORKERS};
use std::io::{self, Write};

/// The compressor of a layer.
pub(super) enum Encoder<W: Write> {
    Members(members::ParallelMembers<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
    Plain(W),
}

impl<W: Write> Encoder<W> {
    /// The compressor of `codec`, every setting from it.
    pub(super) fn new(codec: &Codec, out: W) -> io::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Ok(match *codec {
            // Multi-member gzip with fixed headers: the blob depends on the bytes alone, not on
            // when, where or on how many cores it was built.
            Codec::Members { chunk, member: MemberCodec::Gzip { level, .. } } => Self::Members(
                members::ParallelMembers::new(out, members::Codec::Gzip(level), chunk, threads)?,
            ),
            Codec::Members { chunk, member: MemberCodec::Zstd { level, .. } } => Self::Members(
                members::ParallelMembers::new(out, members::Codec::Zstd(level), chunk, threads)?,
            ),
            Codec::Zstd { level, multithreaded, .. } => {
                let mut encoder = zstd::stream::write::Encoder::new(out, level)?;
                if multithreaded {
                    encoder.multithread(zstd_workers())?;
                }
                Self::Zstd(encoder)
            }
            Codec::Plain => Self::Plain(out),
        })
    }

    pub(super) fn finish(self) -> io::Result<W> {
        match self {
            Self::Members(e) => e.finish(),
            Self::Zstd(e) => e.finish(),
            Self::Plain(w) => Ok(w),
        }
    }
}

/// Number of zstd workers: at least 1 always (0 selects zstd's single-threaded mode, whose output
/// differs from the multithreaded one).
pub(super) fn zstd_workers() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| u32::try_from(n.get()).unwrap_or(ZSTD_MAX_WORKERS))
        .clamp(1, ZSTD_MAX_WORKERS)
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Members(e) => e.write(buf),
            Self::Zstd(e) => e.write(buf),
            Self::Plain(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Members(e) => e.flush(),
            Self::Zstd(e) => e.flush(),
            Self::Plain(w) => w.flush(),
        }
    }
}
