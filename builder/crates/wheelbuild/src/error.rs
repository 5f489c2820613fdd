//! Why a package could not be built.

use std::path::Path;

use crate::sandbox::SandboxError;
use crate::sdist::SdistError;

/// Why a package could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WheelBuildError {
    /// The sdist could not be unpacked or read.
    #[error("{package}: {source}")]
    Sdist {
        /// `name version`.
        package: String,
        /// What went wrong.
        #[source]
        source: SdistError,
    },
    /// The sandboxed backend failed.
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    /// The build requirements could not be resolved or fetched.
    #[error("building {package}: its build requirements {requires:?}: {message}")]
    Requires {
        /// `name version`.
        package: String,
        /// What was asked.
        requires: Vec<String>,
        /// Why it failed.
        message: String,
    },
    /// A wheel of the build environment could not be installed.
    #[error("building {package}: {source}")]
    Install {
        /// `name version`.
        package: String,
        /// The installer's error.
        #[source]
        source: Box<stackbuild_python::WheelError>,
    },
    /// The backend returned something that is not the package's wheel.
    #[error("building {package}: {problem}")]
    Output {
        /// `name version`.
        package: String,
        /// What is wrong.
        problem: String,
    },
    /// A file operation failed.
    #[error("{0}")]
    Io(#[from] stackbuild_common::IoError),
}

pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> WheelBuildError + 'a {
    move |e| WheelBuildError::Io(stackbuild_common::io_err(op, path)(e))
}
