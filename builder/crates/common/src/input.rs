//! Opening the files a user, a recipe, a lock or an image names: each must be what it claims to
//! be, a regular file, and is read with a size cap.
//!
//! A path given as "a file" can be a FIFO (a read blocks forever), `/dev/zero` (a read never
//! ends), a socket, a directory, or a symlink to a file the user did not mean (`/etc/shadow`,
//! whose first line a parse error would then quote). So every such file is opened with
//! `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` (the last component may not be a symlink; opening a FIFO
//! does not wait for a writer), checked with `fstat` on the open descriptor (no race with a
//! swap of the path) to be a regular file, and only then switched back to blocking reads.
//! See open(2) (`O_NOFOLLOW`, `O_NONBLOCK` on FIFOs) and the OWASP "symlink following" and
//! CWE-59 / CWE-400 entries for the classes of attack this closes.

use std::fs::File;
use std::io::{self, Read as _};
use std::os::unix::fs::{FileExt, FileTypeExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use crate::io_error::{io_err, IoError};

/// The rule every file opened here must follow, quoted in errors.
pub(crate) const RULE: &str = "it must be a regular file (not a symlink, FIFO, socket, device or directory)";

/// Largest recipe, lock, patch or JSON document read whole.
pub const MAX_TEXT: u64 = 64 << 20;

/// Why an input file could not be opened or read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or read.
    #[error("{what}: {source}")]
    Io {
        /// What the file is for (`recipe`, `lock file`, `patch`, ...).
        what: &'static str,
        /// The operation, on the path as the user gave it.
        #[source]
        source: IoError,
    },
    /// The path is not a regular file.
    #[error("the {what} {path} is {kind}; {RULE}")]
    NotRegular {
        /// What the file is for.
        what: &'static str,
        /// The path as the user gave it.
        path: PathBuf,
        /// What it is instead (`a symlink`, `a FIFO`, ...).
        kind: &'static str,
    },
    /// The file is larger than what is read of such files.
    #[error("the {what} {path} is larger than {cap} bytes, the most read of a {what}")]
    TooLarge {
        /// What the file is for.
        what: &'static str,
        /// The path as the user gave it.
        path: PathBuf,
        /// The cap.
        cap: u64,
    },
}

impl InputError {
    /// The system error, when the open or read failed (for example `NotFound`).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Self::Io { source, .. } => Some(source.source.kind()),
            _ => None,
        }
    }
}

fn describe(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "a file of unknown type",
    }
}

/// The kind of file a `std` file type names, in words (`a regular file`, `a FIFO`).
pub fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "a symlink"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "a file of unknown type"
    }
}

/// Opens `path` for reading if, and only if, it is a regular file and not a symlink; `what`
/// names the file's role in errors (`"recipe"`, `"lock file"`, `"patch"`).
pub fn open_regular(path: &Path, what: &'static str) -> Result<File, InputError> {
    let failed = |op, source: io::Error| InputError::Io { what, source: io_err(op, path)(source) };
    let not_regular = |kind| InputError::NotRegular { what, path: path.to_owned(), kind };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            // ELOOP (or EMLINK on some systems) is how O_NOFOLLOW says "the last component is a
            // symlink"; ENXIO is a socket. Say what the path is rather than quote errno.
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if !meta.is_file() {
                    return Err(not_regular(kind_of(meta.file_type())));
                }
            }
            return Err(failed("opening", e.into()));
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| failed("reading", e.into()))?;
    let ft = FileType::from_raw_mode(stat.st_mode);
    if ft != FileType::RegularFile {
        return Err(not_regular(describe(ft)));
    }
    let fl = rustix::fs::fcntl_getfl(&fd).map_err(|e| failed("opening", e.into()))?;
    rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK).map_err(|e| failed("opening", e.into()))?;
    Ok(File::from(fd))
}

/// Reads the whole of `path`, a regular file (see [`open_regular`]) of at most `cap` bytes.
pub fn read_capped(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let file = open_regular(path, what)?;
    read_open_capped(file, path, cap, what)
}

/// Reads the whole of an already opened `file` (named `path` in errors), at most `cap` bytes.
pub(crate) fn read_open_capped(
    file: File,
    path: &Path,
    cap: u64,
    what: &'static str,
) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io { what, source: io_err("reading", path)(source) })?;
    if bytes.len() as u64 > cap {
        return Err(InputError::TooLarge { what, path: path.to_owned(), cap });
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_text(path: &Path, cap: u64, what: &'static str) -> Result<String, InputError> {
    let bytes = read_capped(path, cap, what)?;
    String::from_utf8(bytes).map_err(|_| InputError::Io {
        what,
        source: io_err("reading", path)(io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
    })
}

/// Runs `f` on a thread and fails the test if it has not returned within `secs` seconds: a
/// regression that blocks on a FIFO must fail, not hang the suite.
/// Positional reads, from a buffer or a file.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> PathBuf {
        let p = dir.join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &p, Mode::from_raw_mode(0o600)).unwrap();
        p
    }

    #[test]
    fn a_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "hello").unwrap();
        assert_eq!(read_capped(&p, 5, "recipe").unwrap(), b"hello");
        let e = read_capped(&p, 4, "recipe").unwrap_err();
        assert!(matches!(e, InputError::TooLarge { cap: 4, .. }), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = fifo(dir.path());
        let path = p.clone();
        let e =
            test_support::process::within(10, move || read_capped(&path, MAX_TEXT, "recipe")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("is a FIFO") && msg.contains("must be a regular file"), "{msg}");
        assert!(msg.contains(&p.display().to_string()), "{msg}");
    }

    #[test]
    fn devices_directories_and_symlinks_are_refused() {
        let e = test_support::process::within(10, || read_capped(Path::new("/dev/zero"), MAX_TEXT, "patch"))
            .unwrap_err();
        assert!(e.to_string().contains("is a character device"), "{e}");
        let e = read_capped(Path::new("/dev/null"), MAX_TEXT, "patch").unwrap_err();
        assert!(e.to_string().contains("is a character device"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = read_capped(dir.path(), MAX_TEXT, "lock file").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let target = dir.path().join("secret");
        std::fs::write(&target, "root:x:0:0").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = read_capped(&link, MAX_TEXT, "lock file").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("is a symlink") && !msg.contains("root:x"), "{msg}");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("/nonexistent/x", &dangling).unwrap();
        assert!(read_capped(&dangling, MAX_TEXT, "lock file").unwrap_err().to_string().contains("symlink"));
    }

    #[test]
    fn a_missing_file_keeps_its_error_kind() {
        let e = read_capped(Path::new("/nonexistent/recipe.toml"), 10, "recipe").unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn a_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let e = read_capped(&p, 10, "wheel").unwrap_err();
        assert!(e.to_string().contains("is a socket"), "{e}");
    }
}
