//! Replacing a file atomically: the one way every file the builder writes whole gets written
//! (layout documents, cache records, the lock, patched files, reports).
//!
//! A temporary file is created with `O_EXCL` under a unique name, written, `fsync`ed, renamed over
//! the destination (`rename(2)` is atomic within one file system), and the directory is `fsync`ed
//! so that the rename survives a crash: a reader, or a crash, sees the old content or the new
//! one, never a part.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name for a temporary file that no other process or thread picks at the same time.
pub fn unique_temp_name(prefix: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}{}-{nanos:09}-{n}.tmp", std::process::id())
}

/// `fsync`s a directory so that a rename into it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory `path` is in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Writes `bytes` to `path` atomically, the temporary file next to it; a new file gets the
/// default mode (0666 less the umask), as `fs::write` gives.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(parent_of(path), path, bytes, None)
}

/// [`write_atomic`] with the temporary file in `tmp_dir` (on the same file system as `path`).
pub fn write_atomic_in(tmp_dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(tmp_dir, path, bytes, None)
}

/// [`write_atomic`] with the file's mode set to exactly `mode` (the umask does not apply): a lock
/// file everyone reads, a patched file keeping its executable bit.
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_with(parent_of(path), path, bytes, Some(mode))
}

fn write_atomic_with(tmp_dir: &Path, path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let tmp = tmp_dir.join(unique_temp_name(".stackbuild-tmp-"));
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        if mode.is_some() {
            // Nobody else may read it before its mode is set.
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            file.set_permissions(Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        sync_dir(parent_of(path))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        fs::write(&path, "old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        write_atomic_mode(&path, b"#!/bin/sh\n", 0o755).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_removes_its_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails after the temporary file was written.
        let target = dir.path().join("d");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("x"), "").unwrap();
        assert!(write_atomic(&target, b"data").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
