//! A writer that hands its bytes on in chunks to another thread: the layer writer's copy of a
//! layer's tar to the audit (`audit::tap`), and an archive to the request body that streams it
//! into the Docker daemon (`load`).

use std::io::{self, Write};

/// Collects what is written and passes it to `send` in chunks of `size` bytes, the rest when
/// dropped. `flush` passes nothing on: a chunk is never cut short by a writer that flushes
/// often. An error of `send` is the error of the write that filled the chunk.
pub struct ChunkWriter<F: FnMut(Vec<u8>) -> io::Result<()>> {
    send: F,
    buf: Vec<u8>,
    size: usize,
}

impl<F: FnMut(Vec<u8>) -> io::Result<()>> ChunkWriter<F> {
    /// A writer passing chunks of `size` bytes to `send`.
    pub fn new(size: usize, send: F) -> Self {
        Self { send, buf: Vec::with_capacity(size), size: size.max(1) }
    }

    fn pass(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(self.size));
        (self.send)(chunk)
    }
}

impl<F: FnMut(Vec<u8>) -> io::Result<()>> Write for ChunkWriter<F> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(self.size - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == self.size {
            self.pass()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<F: FnMut(Vec<u8>) -> io::Result<()>> Drop for ChunkWriter<F> {
    fn drop(&mut self) {
        let _ = self.pass();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_full_chunks_then_the_rest_when_dropped() {
        let mut got = Vec::new();
        {
            let mut w = ChunkWriter::new(4, |c: Vec<u8>| {
                got.push(c);
                Ok(())
            });
            w.write_all(b"abcdefghij").unwrap();
            w.flush().unwrap();
        }
        assert_eq!(got, [b"abcd".to_vec(), b"efgh".to_vec(), b"ij".to_vec()]);
    }

    #[test]
    fn a_failed_send_fails_the_write() {
        let mut w = ChunkWriter::new(2, |_| Err(io::ErrorKind::BrokenPipe.into()));
        assert_eq!(w.write_all(b"abc").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
