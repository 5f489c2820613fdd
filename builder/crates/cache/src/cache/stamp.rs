//! A record, on a cached file itself, that its bytes hash to a digest and have not changed since,
//! so that a later build uses the file without reading all of it again.
//!
//! Why: a cache hit is re-hashed before its bytes go somewhere new (`fetch::find_present` for
//! every locked wheel when a lock is made again, `build::reuse` for every reused layer written
//! to a new layout). On the `DreamZero` recipe with one pin changed that was 2.8 GB of wheels and
//! 3.3 GB of layers read and hashed, 4.1 of the build's 9.4 s (docs/benchmarks.md), for files
//! nobody had touched.
//!
//! How: the extended attribute `user.stackbuild.sha256` holds the digest with the file's size
//! and modification time as they were when the digest was known. The file is trusted while its
//! size and modification time are still those; any write changes the modification time (POSIX
//! `write(2)`: "upon successful completion, ... mark for update the last data modification
//! timestamp"), and the attribute is on the inode, so a file replaced by another has none.
//! Two moments record one:
//! - [`record_new`], by the writer of a file it has just hashed as it wrote it, after its last
//!   write and `fsync`, before the rename that publishes it;
//! - [`record_verified`], after a file was read and hashed, with the size and time taken
//!   *before* reading it, and only when that time was at least [`RACY`] old: a write in the same
//!   clock tick as the one before would leave the modification time as it was (git's "racily
//!   clean" entries, Documentation/technical/racy-git.txt), and such a file is hashed again next
//!   time instead.
//!
//! What it does not defend against is what reading the file again would not either: someone
//! who can write the cache can also rewrite the attribute. A file system without user extended
//! attributes (tmpfs before Linux 6.6), or a file this user may not write, keeps no record, and
//! its files are hashed each time as before.

use std::fs::File;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::XattrFlags;

/// The attribute's name.
const NAME: &str = "user.stackbuild.sha256";

/// How old a file's modification time must be before a verification is recorded.
pub const RACY: Duration = Duration::from_secs(2);

/// A file's size and modification time (seconds and nanoseconds since the epoch).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Identity {
    size: u64,
    mtime: (i64, i64),
}

impl Identity {
    /// `file`'s, from `fstat`.
    pub fn of(file: &File) -> Option<Self> {
        let st = rustix::fs::fstat(file).ok()?;
        let mtime = (st.st_mtime, st.st_mtime_nsec.try_into().ok()?);
        Some(Self { size: st.st_size.try_into().ok()?, mtime })
    }

    fn value(self, hex: &str) -> String {
        format!("sha256:{hex} {} {}.{:09}", self.size, self.mtime.0, self.mtime.1)
    }

    /// Whether this modification time lies at least [`RACY`] before now.
    fn settled(self) -> bool {
        let Ok(secs) = u64::try_from(self.mtime.0) else { return false };
        let Ok(nanos) = u32::try_from(self.mtime.1) else { return false };
        let mtime = UNIX_EPOCH + Duration::new(secs, nanos);
        SystemTime::now().duration_since(mtime).is_ok_and(|age| age >= RACY)
    }
}

/// Whether `file` carries a record that it hashes to `hex` and is as it was then.
pub fn holds(file: &File, hex: &str) -> bool {
    recorded(file).is_some_and(|recorded| recorded == hex)
}

/// The digest `file` carries a record of, while it is as it was then ([`holds`] without knowing
/// the digest beforehand: a file found by name, as a built wheel in its key's directory).
pub fn recorded(file: &File) -> Option<String> {
    let now = Identity::of(file)?;
    let mut buf = [0u8; 160];
    let n = rustix::fs::fgetxattr(file, NAME, &mut buf).ok()?;
    let value = std::str::from_utf8(buf.get(..n)?).ok()?;
    let hex = value.strip_prefix("sha256:")?.split(' ').next()?;
    (value == now.value(hex)).then(|| hex.to_owned())
}

/// Records that `file`, just written and synced by this process and not yet where others look,
/// hashes to `hex`. Not recorded is only slower next time.
pub fn record_new(file: &File, hex: &str) {
    if let Some(id) = Identity::of(file) {
        set(file, id, hex);
    }
}

/// Records that `file` hashed to `hex` when it had identity `before` (taken before it was
/// read), unless it has changed since or was modified too recently to tell ([`RACY`]).
pub fn record_verified(file: &File, before: Identity, hex: &str) {
    if before.settled() && Identity::of(file) == Some(before) {
        set(file, before, hex);
    }
}

fn set(file: &File, id: Identity, hex: &str) {
    if let Err(e) = rustix::fs::fsetxattr(file, NAME, id.value(hex).as_bytes(), XattrFlags::empty()) {
        tracing::trace!("no verification record on a cached file: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn supported(file: &File) -> bool {
        rustix::fs::fsetxattr(file, "user.stackbuild.probe", b"1", XattrFlags::empty()).is_ok()
    }

    #[test]
    fn a_record_holds_until_the_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file =
            std::fs::OpenOptions::new().create_new(true).read(true).write(true).open(&path).unwrap();
        file.write_all(b"hello").unwrap();
        if !supported(&file) {
            eprintln!("skipped: {} keeps no user extended attributes", dir.path().display());
            return;
        }
        assert!(!holds(&file, "aa"), "no record yet");
        record_new(&file, "aa");
        assert!(holds(&file, "aa"));
        assert!(!holds(&file, "bb"), "a record is for one digest");
        // A write in the same second, same size: the nanoseconds differ.
        std::thread::sleep(Duration::from_millis(20));
        std::os::unix::fs::FileExt::write_all_at(&file, b"j", 0).unwrap();
        let reopened = File::open(&path).unwrap();
        assert!(!holds(&reopened, "aa"), "a written file is not trusted");
    }

    #[test]
    fn a_verification_of_a_recent_file_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = File::open(&path).unwrap();
        if !supported(&std::fs::OpenOptions::new().write(true).open(&path).unwrap()) {
            eprintln!("skipped: no user extended attributes here");
            return;
        }
        let before = Identity::of(&file).unwrap();
        record_verified(&file, before, "aa");
        assert!(!holds(&file, "aa"), "modified just now: racy, not recorded");
        let old = SystemTime::now() - Duration::from_mins(1);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        let before = Identity::of(&file).unwrap();
        record_verified(&file, before, "aa");
        assert!(holds(&file, "aa"));
    }
}
