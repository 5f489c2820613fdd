//! Reads inside an untrusted container root without ever leaving it.
//!
//! A crafted image can turn any path into a symlink to a host file (CVE-2024-0132,
//! CVE-2025-23359 in NVIDIA's toolkit). Every path here is resolved *in root* with
//! `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, the last component is never followed
//! (`O_NOFOLLOW`), the file must be a regular file, and reads are capped. `O_NONBLOCK` keeps a
//! FIFO planted by the image from blocking the open. Where `openat2` is missing (Linux < 5.6),
//! the path is walked one component at a time with `O_NOFOLLOW`, refusing any symlink.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Why a file inside a container root could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// The path names a symlink (or goes through one on the fallback path).
    #[error("{path} in the container root is a symlink; not followed")]
    Symlink {
        /// The path inside the root.
        path: String,
    },
    /// Not a regular file (a FIFO, a device, a directory).
    #[error("{path} in the container root is not a regular file ({kind})")]
    NotRegular {
        /// The path inside the root.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("{path} in the container root is larger than {cap} bytes; not read")]
    TooLarge {
        /// The path inside the root.
        path: String,
        /// The cap.
        cap: u64,
    },
    /// The path is not relative or climbs out with `..`.
    #[error("{path:?} is not a plain relative path")]
    BadPath {
        /// The path as given.
        path: String,
    },
    /// Missing, or another error from the system.
    #[error("cannot open {path} in the container root {root}: {source}")]
    Io {
        /// The path inside the root.
        path: String,
        /// The root.
        root: PathBuf,
        /// The system error.
        source: std::io::Error,
    },
}

impl RootfsError {
    /// Whether the file simply does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn file_kind(ft: FileType) -> &'static str {
    match ft {
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Symlink => "a symlink",
        _ => "not a regular file",
    }
}

/// Reads `path` (relative to `root`) as a regular file of at most `cap` bytes.
pub fn read_in_root(root: &Path, path: &str, cap: u64) -> Result<Vec<u8>, RootfsError> {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() || rel.split('/').any(|c| c == "..") || rel.contains('\0') {
        return Err(RootfsError::BadPath { path: path.to_owned() });
    }
    let io = |e: Errno| RootfsError::Io { path: rel.to_owned(), root: root.to_owned(), source: e.into() };
    let dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(io)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match openat2(&dir, rel, flags, ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS) {
        Ok(fd) => fd,
        Err(Errno::NOSYS | Errno::PERM | Errno::AGAIN) => {
            walk_nofollow(dir, rel, flags).map_err(|e| map_loop(e, rel, root))?
        }
        Err(e) => return Err(map_loop(e, rel, root)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(io)?;
    let ft = FileType::from_raw_mode(stat.st_mode);
    if ft != FileType::RegularFile {
        return Err(RootfsError::NotRegular { path: rel.to_owned(), kind: file_kind(ft) });
    }
    let mut buf = Vec::new();
    File::from(fd).take(cap + 1).read_to_end(&mut buf).map_err(|source| RootfsError::Io {
        path: rel.to_owned(),
        root: root.to_owned(),
        source,
    })?;
    if buf.len() as u64 > cap {
        return Err(RootfsError::TooLarge { path: rel.to_owned(), cap });
    }
    Ok(buf)
}

/// `openat2`, tried again while it answers `EAGAIN`.
///
/// With `RESOLVE_IN_ROOT` or `RESOLVE_BENEATH`, a path whose resolution crosses `..` (as a
/// sysfs link such as `../../../devices/pci0000:00/...` does) fails with `EAGAIN` when any
/// rename or mount anywhere on the system raced the lookup, and "the caller may choose to retry"
/// (<https://man7.org/linux/man-pages/man2/openat2.2.html>). CI saw it on a busy machine. The
/// callers walk the path themselves should it persist.
pub(crate) fn openat2(
    dir: impl AsFd,
    rel: &str,
    flags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    const TRIES: usize = 16;
    let mut tries = 1;
    loop {
        match rustix::fs::openat2(&dir, rel, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) if tries < TRIES => tries += 1,
            other => return other,
        }
    }
}

fn map_loop(e: Errno, rel: &str, root: &Path) -> RootfsError {
    if e == Errno::LOOP {
        RootfsError::Symlink { path: rel.to_owned() }
    } else {
        RootfsError::Io { path: rel.to_owned(), root: root.to_owned(), source: e.into() }
    }
}

/// The fallback for kernels without `openat2`: one component at a time, no symlinks at all.
fn walk_nofollow(root: OwnedFd, rel: &str, last: OFlags) -> Result<OwnedFd, Errno> {
    let mut dir = root;
    let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let Some((name, parents)) = parts.split_last() else { return Err(Errno::INVAL) };
    for part in parents {
        dir = rustix::fs::openat(
            &dir,
            *part,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| if e == Errno::NOTDIR { Errno::LOOP } else { e })?;
    }
    rustix::fs::openat(&dir, *name, last, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn reads_regular_files_and_refuses_the_rest() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("shadow"), "host secret").unwrap();
        std::fs::create_dir_all(root.path().join("etc/stackbuild")).unwrap();
        std::fs::write(root.path().join("etc/stackbuild/ok.json"), "{}").unwrap();
        std::fs::write(root.path().join("etc/big"), vec![b'x'; 100]).unwrap();
        symlink(outside.path().join("shadow"), root.path().join("etc/stackbuild/link.json")).unwrap();
        // A directory symlink pointing out of the root is resolved *inside* the root.
        symlink(outside.path(), root.path().join("escape")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.path().join("etc/fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();

        let r = root.path();
        assert_eq!(read_in_root(r, "/etc/stackbuild/ok.json", 10).unwrap(), b"{}");
        assert!(matches!(
            read_in_root(r, "etc/stackbuild/link.json", 1000),
            Err(RootfsError::Symlink { .. })
        ));
        let e = read_in_root(r, "escape/shadow", 1000).unwrap_err();
        assert!(e.is_not_found(), "{e}");
        assert!(matches!(
            read_in_root(r, "etc/fifo", 1000),
            Err(RootfsError::NotRegular { kind: "a FIFO", .. })
        ));
        assert!(matches!(read_in_root(r, "etc", 1000), Err(RootfsError::NotRegular { .. })));
        assert!(matches!(read_in_root(r, "etc/big", 99), Err(RootfsError::TooLarge { .. })));
        assert_eq!(read_in_root(r, "etc/big", 100).unwrap().len(), 100);
        assert!(matches!(read_in_root(r, "../etc/passwd", 1000), Err(RootfsError::BadPath { .. })));
        assert!(read_in_root(r, "missing", 10).unwrap_err().is_not_found());
    }

    #[test]
    fn fallback_walk_refuses_symlinked_directories() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("real")).unwrap();
        std::fs::write(root.path().join("real/f"), "x").unwrap();
        symlink("real", root.path().join("link")).unwrap();
        let open = |p: &str| {
            let dir = rustix::fs::open(root.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
            walk_nofollow(dir, p, OFlags::RDONLY | OFlags::NOFOLLOW)
        };
        assert!(open("real/f").is_ok());
        assert_eq!(open("link/f").unwrap_err(), Errno::LOOP);
    }
}
