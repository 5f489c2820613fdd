//! The uncompressed tar of a layer, copied aside as the build writes the compressed blob, so
//! that `--load` hands the daemon a tar it need not inflate.
//!
//! Docker 20.10 inflates a gzip layer with `unpigz` (or Go's `compress/gzip`) before it unpacks
//! it. On `recipes/dreamzero.toml` (6.5 GB of layers, the 2-core VM) that took about 40 s of the
//! two cores' time in a 118 s `--load` build (`perf record -a`: `unpigz` 17 % of all samples),
//! while the build itself holds the same bytes uncompressed for a moment anyway (it hashes them
//! for the `diff_id`). Writing them once more into the page cache costs a few seconds of system
//! time; the spool is removed as soon as the daemon holds the layer, usually before it reaches
//! the disk. Docker before 23.0 reads no zstd layer at all: a zstd layer goes in this way too,
//! and one reused from the cache is decompressed into a spool first
//! ([`TarSpool::of_zstd_blob`]).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::{Arc, OnceLock};

use stackbuild_cache::{Cache, TempFile};
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;

/// Free space a spool leaves besides itself and the layer's blob.
pub(super) const SPOOL_MARGIN: u64 = 1 << 30;

/// A spool being written: [`TarSpool::writer`] is the layer writer's tap.
pub struct TarSpool {
    file: TempFile,
    /// Set when the writer is dropped: the bytes written, or `None` when a write failed.
    written: Arc<OnceLock<Option<u64>>>,
}

/// A layer's complete uncompressed tar, removed when dropped.
#[derive(Debug)]
pub struct SpooledTar {
    file: TempFile,
    size: u64,
    /// The layer's `diff_id`: the digest of these bytes.
    pub diff_id: String,
}

impl TarSpool {
    /// A new spool in the cache's temporary directory for a tar of about `size` bytes; `None`
    /// (and the layer goes in as its blob) when it cannot be created, or when the file system
    /// lacks room for it and the blob with [`SPOOL_MARGIN`] to spare: a spool must never be
    /// what fills the disk under the build.
    pub fn create(cache: &Cache, size: u64) -> Option<Self> {
        let file = match cache.temp_file() {
            Ok(file) => file,
            Err(e) => {
                tracing::debug!("no uncompressed copy of the layer for --load: {e}");
                return None;
            }
        };
        let free = rustix::fs::fstatvfs(&file.file).map(|s| s.f_bavail.saturating_mul(s.f_frsize));
        match free {
            Ok(free) if free >= size.saturating_mul(2).saturating_add(SPOOL_MARGIN) => {
                Some(Self { file, written: Arc::default() })
            }
            _ => {
                tracing::debug!("no uncompressed copy of the layer for --load: {free:?} bytes free");
                None
            }
        }
    }

    /// The uncompressed tar of a zstd blob the build did not write in this run (one reused
    /// from the cache): Docker before 23.0 reads no zstd layer, and refuses the archive with
    /// nothing more than "stream error". Four times the blob is taken as the tar's size for the
    /// room check (zstd -3 makes about a third of a layer of libraries). `None` for any other
    /// blob, or when the blob cannot be read whole: the blob is sent then.
    pub fn of_zstd_blob(cache: &Cache, blob: &LayerBlob) -> Option<SpooledTar> {
        if Compression::from_media_type(&blob.media_type) != Some(Compression::Zstd) {
            return None;
        }
        let spool = Self::create(cache, blob.size.saturating_mul(4))?;
        let file = stackbuild_common::open_regular(&blob.path, "layer blob").ok()?;
        let mut tar = Compression::Zstd.decoder(io::Read::take(file, blob.size)).ok()?;
        let mut writer = spool.writer().ok()?;
        // A short or corrupt blob gives no tar (the spool is removed on return), not a short one.
        io::copy(&mut tar, &mut writer).ok()?;
        drop(writer);
        spool.finish(blob)
    }

    /// The writer to give the layer writer as its tap ([`crate::layer::LayerWriter::with_tap`]).
    pub fn writer(&self) -> io::Result<impl Write + Send + 'static> {
        Ok(SpoolWriter {
            out: BufWriter::with_capacity(1 << 20, self.file.file.try_clone()?),
            count: 0,
            failed: false,
            written: Arc::clone(&self.written),
        })
    }

    /// The spooled tar of `blob`, once its writer is done; `None` if a write failed.
    pub fn finish(self, blob: &LayerBlob) -> Option<SpooledTar> {
        let size = (*self.written.get()?)?;
        Some(SpooledTar { file: self.file, size, diff_id: blob.diff_id.clone() })
    }
}

impl SpooledTar {
    /// The file and its size.
    pub fn file(&self) -> (&std::path::Path, u64) {
        (self.file.path(), self.size)
    }
}

/// Writes the spool; a failed write (a full disk) only means the blob is sent instead.
struct SpoolWriter {
    out: BufWriter<File>,
    count: u64,
    failed: bool,
    written: Arc<OnceLock<Option<u64>>>,
}

impl Write for SpoolWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.failed {
            match self.out.write_all(buf) {
                Ok(()) => self.count += buf.len() as u64,
                Err(_) => self.failed = true,
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SpoolWriter {
    fn drop(&mut self) {
        let ok = !self.failed && self.out.flush().is_ok();
        let _ = self.written.set(ok.then_some(self.count));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob() -> LayerBlob {
        LayerBlob {
            digest: "sha256:00".into(),
            diff_id: "sha256:11".into(),
            size: 1,
            media_type: String::new(),
            annotations: std::collections::BTreeMap::new(),
            path: "/nonexistent".into(),
        }
    }

    #[test]
    fn holds_what_was_written_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let spool = TarSpool::create(&cache, 9).unwrap();
        let mut w = spool.writer().unwrap();
        w.write_all(b"tar bytes").unwrap();
        drop(w);
        let tar = spool.finish(&blob()).unwrap();
        let (path, size) = tar.file();
        assert_eq!((std::fs::read(path).unwrap(), size), (b"tar bytes".to_vec(), 9));
        assert_eq!(tar.diff_id, "sha256:11");
        let path = path.to_owned();
        drop(tar);
        assert!(!path.exists(), "the spool is removed once loaded");
    }

    #[test]
    fn no_spool_that_would_fill_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(TarSpool::create(&cache, u64::MAX / 2).is_none());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("tmp")).unwrap().collect();
        assert!(left.is_empty(), "its temporary file is gone: {left:?}");
    }

    #[test]
    fn a_writer_still_open_gives_no_tar() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let spool = TarSpool::create(&cache, 9).unwrap();
        let _w = spool.writer().unwrap();
        assert!(spool.finish(&blob()).is_none());
    }
}
