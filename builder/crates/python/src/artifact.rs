//! A verified file in the artifact directory (`DEST/<sha256>/<file name>`), why fetching one
//! failed, and how a file is placed there: the pieces both downloaders share (the index client
//! in `download` and pip in `fetch`), below both so that neither depends on the other.

use std::path::{Path, PathBuf};

use pep508_rs::PackageName;
use stackcontract::version::PackageVersion;

use stackbuild_common::IoError;

/// A verified wheel in the artifact directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Normalized package name.
    pub name: PackageName,
    /// Exact version.
    pub version: PackageVersion,
    /// The wheel's file name.
    pub filename: String,
    /// Lowercase hex sha256 of the file.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Where it is: `DEST/<sha256>/<filename>`.
    pub path: PathBuf,
}

/// Why fetching failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// pip is not available to the host's `python3`.
    #[error("`python3 -m pip` is not available to download wheels: {reason}")]
    PipMissing {
        /// What happened when it was tried.
        reason: String,
    },
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// pip could not download some artifacts (index unreachable, no such file, hash mismatch).
    #[error("downloading {} for {target} failed: {reason}", artifacts.join(", "))]
    Download {
        /// The artifacts concerned (`name==version`).
        artifacts: Vec<String>,
        /// The target.
        target: String,
        /// pip's error message.
        reason: String,
    },
    /// A downloaded file is not one the pins allow.
    #[error(
        "downloaded {filename} has sha256 {sha256}, which {pin} does not list (expected one of: {})",
        expected.join(", ")
    )]
    HashMismatch {
        /// The file.
        filename: String,
        /// Its actual digest.
        sha256: String,
        /// The pin it was downloaded for.
        pin: String,
        /// The digests the pin allows.
        expected: Vec<String>,
    },
    /// A recipe's own wheel is not the file the lock pins.
    #[error(
        "{}: sha256 is {sha256}, but the lock pins {pin} to {}; run `stackbuild lock` if the file was replaced on purpose",
        path.display(), expected.join(", ")
    )]
    LocalChanged {
        /// The recipe's file.
        path: PathBuf,
        /// Its digest now.
        sha256: String,
        /// The pin.
        pin: String,
        /// What the lock allows.
        expected: Vec<String>,
    },
    /// A recipe's own wheel is not a readable regular file.
    #[error(transparent)]
    Input(#[from] stackbuild_common::InputError),
    /// The downloader could not get a pin's file from an index (no such file, HTTP error,
    /// broken transfers, wrong bytes).
    #[error("downloading {pin} from {index} failed: {reason}")]
    Index {
        /// The pin (`name==version`).
        pin: String,
        /// The index or link location, without credentials.
        index: String,
        /// What happened.
        reason: String,
    },
    /// pip reported success but a pin got no file.
    #[error("downloading {pin} for {target}: pip wrote no file for it")]
    Missing {
        /// The pin.
        pin: String,
        /// The target.
        target: String,
    },
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FetchError {
    let path = path.to_owned();
    move |source| FetchError::Io(IoError { op: what, path, source })
}

/// The sha256 of the cached file at `path`, which should be `expected`: read and hashed, unless
/// the file carries a record that it was and has not changed since (`cache::stamp`).
pub(crate) fn verified_hash(path: &Path, expected: &str) -> std::io::Result<String> {
    use stackbuild_cache::stamp;
    let file = std::fs::File::open(path)?;
    if stamp::holds(&file, expected) {
        return Ok(expected.to_owned());
    }
    let before = stamp::Identity::of(&file);
    let (digest, _) = stackbuild_common::sha256_reader(std::io::BufReader::new(&file))?;
    let actual = digest.trim_start_matches("sha256:").to_owned();
    if let Some(before) = before.filter(|_| actual == expected) {
        stamp::record_verified(&file, before, expected);
    }
    Ok(actual)
}

/// Move a verified file to `dest/<sha256>/<filename>`: staged as `tmp/<sha256>/<filename>`, then
/// the directory renamed into place in one step. When another process put the same content
/// there first, that copy is kept (after checking it).
pub(crate) fn place(
    file: &Path,
    filename: &str,
    sha256: &str,
    tmp: &Path,
    dest: &Path,
) -> Result<PathBuf, FetchError> {
    let stage = tmp.join(sha256);
    std::fs::create_dir(&stage).map_err(io("creating", &stage))?;
    std::fs::rename(file, stage.join(filename)).map_err(io("moving", file))?;
    let target_dir = dest.join(sha256);
    let final_path = target_dir.join(filename);
    if let Err(e) = std::fs::rename(&stage, &target_dir) {
        // `rename` over a non-empty directory fails: someone else placed it.
        let same = stackbuild_common::sha256_file(&final_path).is_ok_and(|h| h == sha256);
        if !same {
            return Err(FetchError::Io(IoError { op: "moving into place", path: target_dir, source: e }));
        }
    }
    Ok(final_path)
}
