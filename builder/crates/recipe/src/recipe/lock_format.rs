//! The lock files a project may bring (`[python] lock`), told apart by their names: uv's
//! `uv.lock` and PEP 751's `pylock.toml`. The recipe validates the name; the given-lock reader
//! in the Python stage reads the file.

use std::path::Path;

/// Which kind of lock file a project brings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockFormat {
    /// uv's `uv.lock`.
    UvLock,
    /// PEP 751 `pylock.toml`.
    Pylock,
}

/// The format a file name says: `uv.lock`, or `pylock.toml` / `pylock.NAME.toml` (PEP 751:
/// `^pylock\.([^.]+)\.toml$`, lowercase).
pub fn lock_format_of_name(path: &Path) -> Option<LockFormat> {
    let name = path.file_name()?.to_str()?;
    if name == "uv.lock" {
        Some(LockFormat::UvLock)
    } else if name == "pylock.toml"
        || name
            .strip_prefix("pylock.")
            .and_then(|n| n.strip_suffix(".toml"))
            .is_some_and(|mid| !mid.is_empty() && !mid.contains('.'))
    {
        Some(LockFormat::Pylock)
    } else {
        None
    }
}
