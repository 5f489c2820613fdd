//! Wheel members carried into gzip layers as they are, without compressing them again.
//!
//! A wheel is a zip archive whose members are, almost always, raw deflate streams (PKWARE
//! APPNOTE 4.4.5, method 8), and a gzip member is exactly a raw deflate stream between a 10-byte
//! header and an 8-byte trailer holding the CRC-32 and the size mod 2^32 of the data (RFC 1952
//! section 2.3). A sequence of gzip members is one gzip stream (RFC 1952 section 2.2), which
//! Docker, containerd, Podman and skopeo read. So a layer can carry a wheel's large members
//! byte for byte, and only the tar headers, the padding and the files the build writes itself
//! are compressed here: the layer is written at the speed of reading the wheel.
//!
//! Nothing in the zip is trusted for that: the member is still inflated once as it is copied,
//! because the layer's `diff_id` is the SHA-256 of the uncompressed tar, and that pass also
//! checks the member against the wheel's `RECORD` hash and size, computes the trailer's CRC-32
//! from the inflated bytes (never from the zip's directory), and checks that the deflate stream
//! ends exactly where the member ends, so no byte that is not deflate data enters the layer.
//! The layer bytes stay a pure function of the inputs: the wheel's bytes are pinned by their
//! sha256 in the lock.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek as _, SeekFrom, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::mpsc;

use flate2::bufread::DeflateDecoder;
use sha2::{Digest as _, Sha256};

use crate::io_error::{io_err, IoError};

/// The fixed gzip member header: deflate, no flags, mtime 0, no extra flags, OS 255 (unknown),
/// so the member depends on the data alone (the same header as the layer writer's own members).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Bytes read from the wheel at a time.
const READ_BUFFER: usize = 1 << 18;
/// Members from this size on are hashed into the tar on a second thread (below it, starting
/// the thread costs more than it saves).
const PARALLEL_HASH_MIN: u64 = 1 << 20;
/// Inflated chunks waiting for the tar's hash: bounds the memory a slow hash can hold.
const HASH_QUEUE: usize = 8;

/// A deflated member of a wheel file, with what `RECORD` says it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipMember {
    /// The wheel file (in the build cache, verified against the lock's sha256).
    pub wheel: PathBuf,
    /// The member's name in the archive, for messages.
    pub entry: String,
    /// Device and inode of the wheel when the member was planned, so a swapped file is noticed.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Offset of the member's compressed data in the wheel.
    pub data_start: u64,
    /// Length of the compressed data.
    pub compressed: u64,
    /// Length of the inflated data, as `RECORD` and the zip directory both say.
    pub size: u64,
    /// `RECORD`'s sha256 of the inflated data (urlsafe base64 without padding).
    pub sha256: String,
}

/// Why a member could not be carried into a layer.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// Reading the wheel (or writing the layer made from it) failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The wheel file was replaced after its members were planned.
    #[error("{} changed while the layer was being written", path.display())]
    Changed {
        /// The wheel.
        path: PathBuf,
    },
    /// The member is not what the wheel's directory and `RECORD` say.
    #[error("wheel {}: entry {entry:?}: {problem}", wheel.display())]
    Corrupt {
        /// The wheel.
        wheel: PathBuf,
        /// The member.
        entry: String,
        /// What is wrong.
        problem: String,
    },
}

impl ZipMember {
    /// Opens the wheel at the member's data, checking it is still the file that was planned.
    fn open(&self) -> Result<File, MemberError> {
        let mut file = File::open(&self.wheel).map_err(io_err("opening", &self.wheel))?;
        let meta = file.metadata().map_err(io_err("reading", &self.wheel))?;
        if !meta.is_file() || meta.dev() != self.dev || meta.ino() != self.ino {
            return Err(MemberError::Changed { path: self.wheel.clone() });
        }
        file.seek(SeekFrom::Start(self.data_start)).map_err(io_err("reading", &self.wheel))?;
        Ok(file)
    }

    /// A reader of the inflated member that fails, at its end at the latest, unless the member
    /// is exactly what `RECORD` says.
    pub fn reader(&self) -> Result<MemberReader<'_, File>, MemberError> {
        Ok(MemberReader::new(self, self.open()?))
    }

    /// `RECORD`'s sha256 in hex, or `None` when it is not a sha256 in urlsafe base64.
    pub fn sha256_hex(&self) -> Option<String> {
        let bytes =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &self.sha256).ok()?;
        (bytes.len() == 32).then(|| hex::encode(bytes))
    }

    /// Writes the member to `gzip` as one gzip member made of its own deflate stream, and its
    /// inflated bytes to `plain` (for the tar's hash).
    pub fn write_gzip(
        &self,
        gzip: &mut dyn Write,
        plain: &mut (dyn Write + Send),
    ) -> Result<(), MemberError> {
        let file = self.open()?;
        let write_err = |source| MemberError::from(io_err("writing a layer from", &self.wheel)(source));
        gzip.write_all(&GZIP_HEADER).map_err(write_err)?;
        let mut reader = MemberReader::new(self, Tee { inner: file, copy: &mut *gzip, failed: None });
        let read = |reader: &mut MemberReader<'_, Tee<'_, File>>, buf: &mut [u8]| {
            reader.read(buf).map_err(|e| {
                // A failed copy is a write error, not a corrupt member.
                let tee = reader.decoder.get_mut().get_mut().get_mut();
                tee.failed.take().map_or_else(|| into_member_error(self, e), write_err)
            })
        };
        if self.size < PARALLEL_HASH_MIN {
            let mut buf = vec![0; READ_BUFFER];
            loop {
                let n = read(&mut reader, &mut buf)?;
                if n == 0 {
                    break;
                }
                plain.write_all(&buf[..n]).map_err(write_err)?;
            }
        } else {
            // The tar's hash (and the audit's tap) take the inflated bytes on a second thread
            // while this one inflates and checks the next ones against RECORD: the two SHA-256
            // passes overlap instead of running one after the other on one core.
            std::thread::scope(|scope| {
                let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(HASH_QUEUE);
                let tar_hash =
                    scope.spawn(move || rx.into_iter().try_for_each(|chunk| plain.write_all(&chunk)));
                let inflated = (|| loop {
                    let mut buf = vec![0; READ_BUFFER];
                    let n = read(&mut reader, &mut buf)?;
                    buf.truncate(n);
                    if n == 0 || tx.send(buf).is_err() {
                        return Ok::<(), MemberError>(());
                    }
                })();
                drop(tx);
                let tar_hashed = tar_hash.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                inflated.and(tar_hashed.map_err(write_err))
            })?;
        }
        let crc = reader.crc.clone().finalize();
        // RFC 1952: CRC32 then ISIZE, the size modulo 2^32, both little-endian.
        #[allow(clippy::cast_possible_truncation)]
        let isize = self.size as u32;
        gzip.write_all(&crc.to_le_bytes())
            .and_then(|()| gzip.write_all(&isize.to_le_bytes()))
            .map_err(write_err)
    }

    fn corrupt(&self, problem: String) -> MemberError {
        MemberError::Corrupt { wheel: self.wheel.clone(), entry: self.entry.clone(), problem }
    }
}

/// A reader that copies what it reads to a writer, remembering a failed write.
struct Tee<'w, R> {
    inner: R,
    copy: &'w mut dyn Write,
    failed: Option<io::Error>,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Err(e) = self.copy.write_all(&buf[..n]) {
            let kind = e.kind();
            self.failed = Some(e);
            return Err(io::Error::new(kind, "copying the member failed"));
        }
        Ok(n)
    }
}

/// The inflated bytes of a member, checked against its size, `RECORD` hash and the end of its
/// deflate stream.
pub struct MemberReader<'m, R: Read> {
    member: &'m ZipMember,
    decoder: DeflateDecoder<BufReader<io::Take<R>>>,
    hasher: Sha256,
    crc: crc32fast::Hasher,
    len: u64,
    checked: bool,
}

impl<'m, R: Read> MemberReader<'m, R> {
    fn new(member: &'m ZipMember, raw: R) -> Self {
        let raw = BufReader::with_capacity(READ_BUFFER, raw.take(member.compressed));
        Self {
            member,
            decoder: DeflateDecoder::new(raw),
            hasher: Sha256::new(),
            crc: crc32fast::Hasher::new(),
            len: 0,
            checked: false,
        }
    }

    /// The end of the stream: every compressed byte consumed, the size and the hash right.
    fn check_end(&mut self) -> Result<(), MemberError> {
        let m = self.member;
        if self.len != m.size {
            return Err(m.corrupt(format!("inflates to {} bytes, RECORD says {}", self.len, m.size)));
        }
        if self.decoder.total_in() != m.compressed {
            return Err(m.corrupt(format!(
                "its deflate stream ends after {} of its {} compressed bytes",
                self.decoder.total_in(),
                m.compressed
            )));
        }
        let actual = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            std::mem::take(&mut self.hasher).finalize(),
        );
        if actual != m.sha256.trim_end_matches('=') {
            return Err(m.corrupt(format!("has sha256={actual}, RECORD says sha256={}", m.sha256)));
        }
        self.checked = true;
        Ok(())
    }
}

/// Turns an error from a [`MemberReader`] back into the [`MemberError`] it carries.
pub(crate) fn into_member_error(member: &ZipMember, e: io::Error) -> MemberError {
    if e.get_ref().is_some_and(<dyn std::error::Error + Send + Sync>::is::<MemberError>) {
        if let Ok(inner) = e.into_inner().expect("checked above").downcast::<MemberError>() {
            return *inner;
        }
        unreachable!("checked above");
    }
    match e.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => {
            member.corrupt(format!("not a valid deflate stream: {e}"))
        }
        _ => io_err("reading", &member.wheel)(e).into(),
    }
}

impl<R: Read> Read for MemberReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.checked {
            return Ok(0);
        }
        let n = self.decoder.read(buf)?;
        if n == 0 {
            self.check_end().map_err(io::Error::other)?;
            return Ok(0);
        }
        self.len += n as u64;
        if self.len > self.member.size {
            let problem = format!("inflates past the {} bytes RECORD says", self.member.size);
            return Err(io::Error::other(self.member.corrupt(problem)));
        }
        self.hasher.update(&buf[..n]);
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    /// A file holding `prefix` then the raw deflate stream of `data` then `suffix`, and the
    /// member for it.
    fn member(dir: &std::path::Path, data: &[u8], suffix: &[u8], extra_len: i64) -> ZipMember {
        let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        deflate.write_all(data).unwrap();
        let raw = deflate.finish().unwrap();
        let path = dir.join("w.whl");
        std::fs::write(&path, [&b"PK-prefix"[..], &raw, suffix].concat()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        ZipMember {
            wheel: path,
            entry: "m".into(),
            dev: meta.dev(),
            ino: meta.ino(),
            data_start: 9,
            compressed: u64::try_from(i64::try_from(raw.len()).unwrap() + extra_len).unwrap(),
            size: data.len() as u64,
            sha256: base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                Sha256::digest(data),
            ),
        }
    }

    fn gzip_of(m: &ZipMember) -> Result<(Vec<u8>, Vec<u8>), MemberError> {
        let (mut gz, mut plain) = (Vec::new(), Vec::new());
        m.write_gzip(&mut gz, &mut plain)?;
        Ok((gz, plain))
    }

    #[test]
    fn a_member_becomes_a_gzip_member() {
        let dir = tempfile::tempdir().unwrap();
        let data = b"hello hello hello hello, deflate".repeat(1000);
        let (gz, plain) = gzip_of(&member(dir.path(), &data, b"trailing", 0)).unwrap();
        assert_eq!(plain, data);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, data, "a valid gzip member, CRC and size checked by the decoder");
    }

    #[test]
    fn a_large_member_is_hashed_on_a_second_thread_with_the_same_result() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).flat_map(|i| (i % 7919).to_le_bytes()).collect();
        let m = member(dir.path(), &data, b"", 0);
        assert!(m.size >= PARALLEL_HASH_MIN);
        let (gz, plain) = gzip_of(&m).unwrap();
        assert_eq!(plain, data, "every inflated byte, in order");
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        let mut lying = m.clone();
        lying.sha256 = "AAAA".into();
        assert!(gzip_of(&lying).unwrap_err().to_string().contains("RECORD says sha256=AAAA"));
    }

    #[test]
    fn bytes_after_the_deflate_stream_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = gzip_of(&member(dir.path(), b"data data data", b"junk", 4)).unwrap_err();
        assert!(err.to_string().contains("deflate stream ends after"), "{err}");
    }

    #[test]
    fn a_truncated_stream_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = gzip_of(&member(dir.path(), &b"abcdefgh".repeat(5000), b"", -3)).unwrap_err();
        assert!(matches!(err, MemberError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_wrong_size_or_hash_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = member(dir.path(), b"some bytes", b"", 0);
        m.size = 5;
        assert!(gzip_of(&m).unwrap_err().to_string().contains("inflates past"));
        let mut m = member(dir.path(), b"some bytes", b"", 0);
        m.sha256 = "AAAA".into();
        assert!(gzip_of(&m).unwrap_err().to_string().contains("RECORD says sha256=AAAA"));
    }

    #[test]
    fn a_replaced_wheel_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let m = member(dir.path(), b"some bytes", b"", 0);
        // A new file (a new inode: the old one still exists when it is made) renamed over it.
        let other = dir.path().join("other");
        std::fs::write(&other, std::fs::read(&m.wheel).unwrap()).unwrap();
        std::fs::rename(&other, &m.wheel).unwrap();
        let err = gzip_of(&m).unwrap_err();
        assert!(matches!(err, MemberError::Changed { .. }), "{err}");
    }
}
