//! The audit's reading of a layer, done as the layer writer produces it.
//!
//! The audit lists what each layer changes ([`super::fs::Op`]) from the layer's uncompressed tar
//! and keeps it by layer digest. A layer the build has just written would otherwise be inflated
//! again from its blob for that; a [`LayerTap`] is given the tar as it is written instead (on
//! another thread, so the reading overlaps the writing), and stores the list under the blob's
//! digest once the blob exists, where the audit finds it.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::fs::{self, Op};

/// Bytes sent to the reading thread at a time.
const CHUNK: usize = 1 << 20;
/// Chunks in flight: bounds the memory the tap holds when the reader falls behind.
const IN_FLIGHT: usize = 16;

/// A reading of a layer's tar on its own thread; see the module documentation.
pub struct LayerTap {
    tx: Option<SyncSender<Vec<u8>>>,
    reader: JoinHandle<io::Result<Vec<Op>>>,
}

impl LayerTap {
    /// Starts the reading thread.
    pub fn spawn() -> Self {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT);
        let reader = std::thread::spawn(move || {
            let mut chunks = Chunks { rx, chunk: Vec::new(), pos: 0 };
            let ops = fs::read_tar(&mut chunks, fs::Large::Once(fs::SPOOL_ABOVE));
            // The writer may still send the tar's end padding: take it, so it never blocks.
            for _ in &chunks.rx {}
            ops
        });
        Self { tx: Some(tx), reader }
    }

    /// The writer to give the layer writer. It never fails, so a reading that gave up (a
    /// malformed entry the audit will report when it reads the blob itself) cannot fail the
    /// layer; once the reader is gone it stops sending.
    pub fn writer(&mut self) -> impl Write + Send + 'static {
        let mut tx = self.tx.take();
        stackbuild_common::ChunkWriter::new(CHUNK, move |chunk| {
            if tx.as_ref().is_some_and(|tx| tx.send(chunk).is_err()) {
                tx = None;
            }
            Ok(())
        })
    }

    /// Waits for the reading and keeps it for the blob `digest` in the audit's layer cache
    /// `dir`. The writer must have been dropped (the layer is finished).
    pub fn store(self, dir: &Path, digest: &str) {
        drop(self.tx);
        match self.reader.join() {
            Ok(Ok(ops)) => {
                if let Some(path) = super::layer_cache_entry(dir, digest) {
                    super::store_layer_ops(&path, digest, &ops);
                }
            }
            Ok(Err(e)) => tracing::debug!("the audit will read layer {digest} from its blob: {e}"),
            Err(_) => tracing::debug!("the audit will read layer {digest} from its blob"),
        }
    }

    /// The directory of the audit's layer cache in a build cache rooted at `cache_root`.
    pub fn cache_dir(cache_root: &Path) -> PathBuf {
        cache_root.join("audits").join("layers")
    }
}

/// The received chunks as one stream; it ends when the writer is dropped.
struct Chunks {
    rx: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for &mut Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(next) => (self.chunk, self.pos) = (next, 0),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stackbuild_cache::Cache;
    use stackbuild_common::Compression;
    use stackbuild_image::LayerWriter;

    #[test]
    fn the_tap_records_what_reading_the_blob_gives() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache")).unwrap();
        let elf = std::fs::read("/bin/true").unwrap();
        for compression in [Compression::Gzip, Compression::Zstd] {
            let mut writer = LayerWriter::new(&cache, 0);
            writer.add_file("/usr/bin/tool", elf.clone(), 0o755).unwrap();
            writer
                .add_file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n".to_vec(), 0o644)
                .unwrap();
            writer.add_symlink("/usr/lib/libx.so", "libx.so.1").unwrap();
            writer.add_whiteout("/opt/gone").unwrap();
            let mut tap = LayerTap::spawn();
            let blob = writer.with_tap(tap.writer()).finish(compression).unwrap();
            let store = dir.path().join("layers");
            tap.store(&store, &blob.digest);
            let path = super::super::layer_cache_entry(&store, &blob.digest).unwrap();
            let tapped = std::fs::read(&path).unwrap();
            let read = fs::read_layer(&blob.path, &blob.media_type, fs::SPOOL_ABOVE).unwrap();
            assert_eq!(tapped, serde_json::to_vec(&read).unwrap(), "{compression:?}");
        }
    }
}
