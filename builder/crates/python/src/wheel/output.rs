//! Where an installed wheel's files go: each member written under the staging tree, hashed as it
//! is copied, with RECORD's rows for what was written.

use super::formats::urlsafe_b64;
use super::{Deferred, WheelError};
use sha2::{Digest, Sha256};
use stackbuild_common::ZipMember;
use stackbuild_common::{io_err, IoError};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a file could not be placed; turned into a [`WheelError`] by the caller who knows the entry.
pub(super) enum PlaceError {
    Io(IoError),
    Conflict(String, String),
}

impl PlaceError {
    pub(super) fn into_wheel_error(self, wheel: &Path, entry: &str) -> WheelError {
        match self {
            Self::Io(source) => WheelError::Io { wheel: wheel.to_owned(), source },
            Self::Conflict(dest, problem) => {
                WheelError::Conflict { wheel: wheel.to_owned(), entry: entry.to_owned(), dest, problem }
            }
        }
    }
}

impl From<IoError> for PlaceError {
    fn from(e: IoError) -> Self {
        Self::Io(e)
    }
}

/// The stage being written, and what has been written to it.
pub(super) struct Output<'a> {
    pub(super) stage: &'a Path,
    /// In-image paths written by this installation.
    pub(super) written: HashSet<String>,
    pub(super) rows: Vec<Written>,
    pub(super) bytes: u64,
    /// Where large members are left in their wheels, when they may be.
    pub(super) deferred: Option<&'a mut Deferred>,
}

impl Output<'_> {
    /// Creates `dest` (in-image components) for writing, creating its parent directories.
    ///
    /// Every existing parent must be a real directory (not a symlink); the file is opened with
    /// `create_new`, which fails rather than follow a symlink. A regular file left by another
    /// wheel in the same stage is replaced, as pip does; one written by this wheel is a conflict.
    pub(super) fn create(&mut self, dest: &[String]) -> Result<(File, PathBuf), PlaceError> {
        let path = self.place(dest)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("creating", &path))?;
        Ok((file, path))
    }

    /// Leaves `member` in its wheel as the file at `dest`, with the checks of [`Output::create`].
    pub(super) fn defer(&mut self, dest: &[String], member: ZipMember, mode: u32) -> Result<(), PlaceError> {
        self.place(dest)?;
        if let Some(deferred) = self.deferred.as_deref_mut() {
            deferred.members.insert(dest.join("/"), (member, mode));
        }
        Ok(())
    }

    /// Checks that `dest` may be written by this wheel, creating its parents and removing a file
    /// of another wheel (staged or deferred) that is there; returns the path in the stage.
    fn place(&mut self, dest: &[String]) -> Result<PathBuf, PlaceError> {
        let rel = dest.join("/");
        let conflict = |problem: &str| PlaceError::Conflict(rel.clone(), problem.to_owned());
        let Some((file_name, parents)) = dest.split_last() else {
            return Err(conflict("is the image root"));
        };
        let mut dir = self.stage.to_owned();
        for part in parents {
            dir.push(part);
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.file_type().is_dir() => {}
                Ok(_) => return Err(conflict("has a parent that is not a directory")),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&dir).map_err(io_err("creating", &dir))?;
                    fs::set_permissions(&dir, Permissions::from_mode(0o755))
                        .map_err(io_err("setting permissions of", &dir))?;
                }
                Err(e) => return Err(io_err("reading", &dir)(e).into()),
            }
        }
        let path = dir.join(file_name);
        if self.written.contains(&rel) {
            return Err(conflict("this wheel already installed"));
        }
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_file() => {
                // The nvidia-*-cu12 wheels all ship the same empty `nvidia/__init__.py`: replacing
                // an empty file loses nothing, so only a non-empty one is worth a warning.
                if m.len() == 0 {
                    tracing::debug!(path = %rel, "replacing an empty file installed by another wheel");
                } else {
                    tracing::warn!(path = %rel, "replacing a file installed by another wheel");
                }
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
            }
            Ok(_) => return Err(conflict("exists and is not a regular file")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("reading", &path)(e).into()),
        }
        if self.deferred.as_deref_mut().and_then(|d| d.members.remove(&rel)).is_some() {
            tracing::warn!(path = %rel, "replacing a file installed by another wheel");
        }
        self.written.insert(rel);
        Ok(path)
    }

    /// Writes a whole file created here (not from the archive).
    pub(super) fn write_file(
        &mut self,
        dest: &[String],
        content: &[u8],
        mode: u32,
    ) -> Result<(), PlaceError> {
        let (mut file, path) = self.create(dest)?;
        file.write_all(content)
            .and_then(|()| file.set_permissions(Permissions::from_mode(mode)))
            .map_err(io_err("writing", &path))?;
        self.bytes += content.len() as u64;
        Ok(())
    }

    /// Writes a generated file and records it in `RECORD`.
    pub(super) fn write_generated(
        &mut self,
        dest: &[String],
        content: &[u8],
        mode: u32,
        site_root: &[String],
    ) -> Result<(), PlaceError> {
        self.write_file(dest, content, mode)?;
        self.rows.push(Written {
            path: relative_to(site_root, dest),
            sha256: urlsafe_b64(&Sha256::digest(content)),
            size: content.len() as u64,
        });
        Ok(())
    }

    /// Records a file streamed by [`Installer::extract`].
    pub(super) fn record(&mut self, dest: &[String], sha256: String, size: u64, site_root: &[String]) {
        self.bytes += size;
        self.rows.push(Written { path: relative_to(site_root, dest), sha256, size });
    }
}

/// `dest` relative to `site`, `/`-separated, with `..` where it leaves `site` (as `RECORD` wants
/// for scripts: `../../../bin/tool`).
pub(super) fn relative_to(site_root: &[String], dest: &[String]) -> String {
    let common = site_root.iter().zip(dest).take_while(|(a, b)| a == b).count();
    let ups = std::iter::repeat_n("..", site_root.len() - common);
    ups.chain(dest[common..].iter().map(String::as_str)).collect::<Vec<_>>().join("/")
}

/// A reader that hashes and counts what passes through, remembering whether reading failed.
pub(super) struct HashingReader<R> {
    pub(super) inner: R,
    pub(super) hasher: Sha256,
    pub(super) len: u64,
    pub(super) failed: bool,
}

impl<R> HashingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        Self { inner, hasher: Sha256::new(), len: 0, failed: false }
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).inspect_err(|_| self.failed = true)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts what passes through.
pub(super) struct HashingWriter<W> {
    pub(super) inner: W,
    pub(super) hasher: Sha256,
    pub(super) len: u64,
}

impl<W> HashingWriter<W> {
    pub(super) fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), len: 0 }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// One row of the regenerated `RECORD`.
pub(super) struct Written {
    /// Relative to the site directory, `/`-separated, possibly starting with `../`.
    pub(super) path: String,
    pub(super) sha256: String,
    pub(super) size: u64,
}
