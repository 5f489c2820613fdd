//! A failed file system operation: what was being done, to which path, and why. Module errors
//! wrap it (`Io(#[from] IoError)`) rather than each declaring its own copy of these fields.

use std::io;
use std::path::{Path, PathBuf};

/// An I/O operation on `path` failed.
#[derive(Debug, thiserror::Error)]
#[error("{op} {path}: {source}")]
pub struct IoError {
    /// What was being done (`reading`, `writing`, `renaming`, ...).
    pub op: &'static str,
    /// The path involved.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

/// A `map_err` argument: `.map_err(io_err("reading", path))?` converts into any error that wraps
/// [`IoError`].
pub fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> IoError + 'a {
    move |source| IoError { op, path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_the_operation_and_the_path() {
        let e = super::io_err("reading", std::path::Path::new("/x/y"))(std::io::Error::other("boom"));
        assert_eq!(e.to_string(), "reading /x/y: boom");
    }
}
