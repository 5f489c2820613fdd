//! What was learned from a base image's root filesystem: its Python and its Debian packages.
//!
//! A plain record below both the base's maker (which reads it off the rootfs) and its readers
//! (the bytecode compiler picks the interpreter from it), so neither depends on the other.

use stackcontract::version::PythonVersion;

/// What was learned from a base rootfs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BaseFacts {
    /// `major.minor` of `/usr/bin/python3.X`, when present.
    pub python: Option<String>,
    /// Installed Debian packages and versions (from `var/lib/dpkg/status`).
    pub packages: Vec<(String, String)>,
}

impl BaseFacts {
    /// The interpreter version, parsed.
    pub fn python_version(&self) -> Option<PythonVersion> {
        self.python.as_deref().and_then(|p| p.parse().ok())
    }

    /// The glibc of the base, from its `libc6` package.
    pub fn glibc(&self) -> Option<crate::Glibc> {
        self.packages
            .iter()
            .find(|(name, _)| name == "libc6")
            .and_then(|(_, v)| crate::Glibc::of_deb_version(v))
    }
}
