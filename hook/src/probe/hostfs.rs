//! Capped reads below a host root that never leave it.
//!
//! The host root is trusted (it is `/` in production), but tests point it at fixture trees and a
//! symlink in such a tree must not make the probe read a file of the machine running the tests.
//! Paths are therefore resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, which
//! treats the root directory as `/` for every absolute symlink and every `..`
//! (<https://man7.org/linux/man-pages/man2/openat2.2.html>). Kernels before 5.6, and seccomp
//! profiles that refuse `openat2` (Docker 20.10's default answers `ENOSYS`), get the same rule
//! from a component-by-component walk in user space.

use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::rootfs::openat2;

/// How many symlinks one resolution may follow, as the kernel's own `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Why a read below the host root gave nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The path does not exist (the common case: the fact is absent).
    #[error("does not exist")]
    NotFound,
    /// The file holds more than the cap allows; nothing of it is used.
    #[error("larger than {cap} bytes")]
    TooLarge {
        /// The cap in bytes.
        cap: usize,
    },
    /// The path is not a regular file (or not a directory where one was listed).
    #[error("is a {kind}, not a {expected}")]
    WrongType {
        /// What was found.
        kind: &'static str,
        /// What was expected.
        expected: &'static str,
    },
    /// Any other system error.
    #[error("{0}")]
    Sys(Errno),
}

impl From<Errno> for ReadError {
    fn from(e: Errno) -> Self {
        if e == Errno::NOENT || e == Errno::NOTDIR {
            Self::NotFound
        } else {
            Self::Sys(e)
        }
    }
}

/// Reads an open file to its end, at most `cap` bytes. With `short_read_is_eof`, a read that
/// returns less than asked ends it (true of regular files and of sysfs attributes; not of
/// iterating `seq_file`s such as `proc/modules`, which fill a page at a time).
fn read_fd(fd: &OwnedFd, cap: usize, short_read_is_eof: bool) -> Result<Vec<u8>, ReadError> {
    let st = rustix::fs::fstat(fd)?;
    let ft = FileType::from_raw_mode(st.st_mode);
    if ft != FileType::RegularFile {
        return Err(ReadError::WrongType { kind: type_name(ft), expected: "regular file" });
    }
    read_loop(fd, cap, short_read_is_eof)
}

fn read_loop(fd: &OwnedFd, cap: usize, short_read_is_eof: bool) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match rustix::io::read(fd, &mut chunk[..]) {
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ReadError::Sys(e)),
        };
        if n == 0 {
            break;
        }
        if buf.len() + n > cap {
            return Err(ReadError::TooLarge { cap });
        }
        buf.extend_from_slice(&chunk[..n]);
        if short_read_is_eof && n < chunk.len() {
            break;
        }
    }
    Ok(buf)
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A short name for a file type, for messages.
pub(super) fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// A directory treated as `/`.
pub struct HostFs {
    root: OwnedFd,
    openat2: bool,
}

impl HostFs {
    /// Opens `root`; it must be a directory.
    pub fn open(root: &Path) -> Result<Self, ReadError> {
        let root = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        // One probe call decides which resolver to use for the whole run.
        let openat2 = match rustix::fs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(_) => true,
            Err(e) if e == Errno::NOSYS || e == Errno::PERM || e == Errno::INVAL => false,
            Err(e) => return Err(e.into()),
        };
        Ok(Self { root, openat2 })
    }

    /// Forces the user-space resolver (for tests of the fallback).
    #[cfg(test)]
    #[must_use]
    pub fn without_openat2(mut self) -> Self {
        self.openat2 = false;
        self
    }

    /// Opens `rel` (relative to the root, `/`-separated) with every symlink resolved in root.
    pub fn open_at(&self, rel: &str, flags: OFlags) -> Result<OwnedFd, ReadError> {
        // openat2 refuses (EINVAL) flags other than O_DIRECTORY/O_NOFOLLOW/O_CLOEXEC with O_PATH.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        if self.openat2 {
            let rel = rel.trim_start_matches('/');
            let rel = if rel.is_empty() { "." } else { rel };
            match openat2(&self.root, rel, flags, ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS) {
                // Renames kept racing the kernel's `..` check: resolve in user space instead.
                Err(Errno::AGAIN) => {}
                other => return Ok(other?),
            }
        }
        let resolved = self.resolve(rel, true)?;
        let path = if resolved.is_empty() { ".".to_owned() } else { resolved };
        Ok(rustix::fs::openat(&self.root, path.as_str(), flags | OFlags::NOFOLLOW, Mode::empty())?)
    }

    /// Resolves `rel` to a path without symlinks (but the last component's when `follow_last`
    /// is false), walking one component at a time and re-rooting absolute targets.
    fn resolve(&self, rel: &str, follow_last: bool) -> Result<String, ReadError> {
        let mut pending: Vec<String> = rel.split('/').rev().map(str::to_owned).collect();
        let mut out: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = pending.pop() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    out.pop();
                    continue;
                }
                _ => {}
            }
            let is_last = pending.iter().all(|p| p.is_empty() || p == ".");
            if is_last && !follow_last {
                out.push(c);
                break;
            }
            let mut candidate = out.join("/");
            if !candidate.is_empty() {
                candidate.push('/');
            }
            candidate.push_str(&c);
            let st = rustix::fs::statat(&self.root, candidate.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                hops += 1;
                if hops > MAX_SYMLINKS {
                    return Err(ReadError::Sys(Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(&self.root, candidate.as_str(), Vec::new())?;
                let target = target.to_string_lossy().into_owned();
                if target.starts_with('/') {
                    out.clear();
                }
                pending.extend(target.split('/').rev().map(str::to_owned));
            } else {
                out.push(c);
            }
        }
        Ok(out.join("/"))
    }

    /// Opens the directory holding `rel`'s last component, and returns that component.
    fn parent<'a>(&self, rel: &'a str) -> Result<(OwnedFd, &'a str), ReadError> {
        let rel = rel.trim_end_matches('/');
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if name.is_empty() || name == "." || name == ".." {
            return Err(ReadError::WrongType { kind: "directory", expected: "named file" });
        }
        let fd = self.open_at(dir, OFlags::PATH | OFlags::DIRECTORY)?;
        Ok((fd, name))
    }

    /// `lstat` of `rel`: the last component is not followed.
    pub fn lstat(&self, rel: &str) -> Result<Stat, ReadError> {
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
    }

    /// `lstat` of `name` inside an already opened directory.
    pub fn lstat_in(dir: impl AsFd, name: &str) -> Result<Stat, ReadError> {
        Ok(rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)
    }

    /// Opens a directory for `lstat_in` calls.
    pub fn open_dir(&self, rel: &str) -> Result<OwnedFd, ReadError> {
        self.open_at(rel, OFlags::PATH | OFlags::DIRECTORY)
    }

    /// Reads the regular file `rel`, at most `cap` bytes (a larger file is an error, so a
    /// truncated value is never mistaken for the whole).
    ///
    /// A short read ends the file: true of regular files, sysctls and the driver's proc files
    /// (`single_open` seq files print everything at once). Use [`read_all`](Self::read_all)
    /// for listings that the kernel prints a page at a time.
    pub fn read(&self, rel: &str, cap: usize) -> Result<Vec<u8>, ReadError> {
        // O_NONBLOCK: opening a FIFO planted in a fixture must not hang the probe.
        let fd = self.open_at(rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
        read_fd(&fd, cap, true)
    }

    /// Reads `rel` up to end of file, however many `read` calls that takes (`proc/modules`,
    /// `proc/devices`, which iterate a record at a time).
    pub fn read_all(&self, rel: &str, cap: usize) -> Result<Vec<u8>, ReadError> {
        let fd = self.open_at(rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
        read_fd(&fd, cap, false)
    }

    /// Reads attribute `name` of an opened sysfs directory: `name` itself must not be a symlink
    /// (sysfs attributes never are). One `read` call suffices, since sysfs returns an
    /// attribute's whole text (at most a page) at once.
    pub fn attr(&self, dir: impl AsFd, name: &str, cap: usize) -> Result<Vec<u8>, ReadError> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = if self.openat2 {
            openat2(
                dir,
                name,
                flags,
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )?
        } else if name.contains('/') || name == ".." {
            return Err(ReadError::WrongType { kind: "path", expected: "file name" });
        } else {
            rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty())?
        };
        // No fstat here: the name is a plain entry of a sysfs directory (no symlink followed),
        // and O_NONBLOCK keeps a planted FIFO from blocking; the cap bounds anything else.
        read_loop(&fd, cap, true)
    }

    /// The target of symlink `name` inside an opened directory, as written.
    pub fn readlink_in(dir: impl AsFd, name: &str) -> Result<String, ReadError> {
        let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
        Ok(target.to_string_lossy().into_owned())
    }

    /// Reads `rel` as text (lossy UTF-8), at most `cap` bytes.
    pub fn read_text(&self, rel: &str, cap: usize) -> Result<String, ReadError> {
        self.read(rel, cap).map(lossy)
    }

    /// Reads `rel` to its end as text (lossy UTF-8), at most `cap` bytes.
    pub fn read_all_text(&self, rel: &str, cap: usize) -> Result<String, ReadError> {
        self.read_all(rel, cap).map(lossy)
    }

    /// The names in directory `rel`, sorted, at most `max` of them (the flag says some were left
    /// out).
    pub fn list(&self, rel: &str, max: usize) -> Result<(Vec<String>, bool), ReadError> {
        let fd = self.open_at(rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let dir = Dir::new(fd)?;
        let mut names = Vec::new();
        let mut more = false;
        for entry in dir {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy();
            if name == "." || name == ".." {
                continue;
            }
            if names.len() == max {
                more = true;
                break;
            }
            names.push(name.into_owned());
        }
        names.sort_unstable();
        Ok((names, more))
    }
}

/// Writes `value` into `out` quoted for evidence: the first line, at most 200 characters.
pub(super) fn evidence_text(out: &mut String, value: &str) {
    let line = value.lines().next().unwrap_or("").trim_end();
    for (n, ch) in line.chars().enumerate() {
        if n == 200 {
            out.push('…');
            return;
        }
        if ch.is_control() && ch != '\t' {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(ch));
        } else {
            out.push(ch);
        }
    }
}
