//! The GNU C library version of a base: what decides which `manylinux_2_NN` wheels (PEP 600)
//! run in the image.
//!
//! A `manylinux_2_NN` wheel needs glibc 2.NN or newer at run time, so the highest tag a
//! target accepts is the base's own glibc. Read from the artifact where there is one (the
//! `libc6` package of a bootstrapped base, the banner `libc.so.6` carries), from the suite
//! table ([`Glibc::of_suite`]) before the base exists.

use std::fmt;
use std::str::FromStr;

/// The `libc6` of each suite: (distribution, suite, glibc minor). Sources, one per row: the
/// suite's `libc6` page on packages.debian.org or packages.ubuntu.com.
const SUITES: [(&str, &str, u32); 8] = [
    // https://packages.debian.org/buster/libc6 (2.28-10+deb10u*)
    ("debian", "buster", 28),
    // https://packages.debian.org/bullseye/libc6 (2.31-13+deb11u*)
    ("debian", "bullseye", 31),
    // https://packages.debian.org/bookworm/libc6 (2.36-9+deb12u*)
    ("debian", "bookworm", 36),
    // https://packages.debian.org/trixie/libc6 (2.41-12)
    ("debian", "trixie", 41),
    // https://packages.ubuntu.com/bionic/libc6 (2.27-3ubuntu1.*): below manylinux_2_28
    ("ubuntu", "bionic", 27),
    // https://packages.ubuntu.com/focal/libc6 (2.31-0ubuntu9.*)
    ("ubuntu", "focal", 31),
    // https://packages.ubuntu.com/jammy/libc6 (2.35-0ubuntu3.*)
    ("ubuntu", "jammy", 35),
    // https://packages.ubuntu.com/noble/libc6 (2.39-0ubuntu8.*)
    ("ubuntu", "noble", 39),
];

/// A glibc version, `2.NN` (glibc has kept major version 2 since 1997).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Glibc {
    /// The minor version: 36 for glibc 2.36.
    pub minor: u32,
}

impl Glibc {
    /// The baseline when the base's glibc is unknown: `manylinux_2_28` covers Debian 11+,
    /// Ubuntu 20.04+ and RHEL 8+, and every older manylinux tag is compatible with it.
    pub const DEFAULT: Self = Self { minor: 28 };

    /// The glibc of a Debian or Ubuntu suite's `libc6` package, where the table knows it.
    /// Sources, one per row: the `libc6` package pages of packages.debian.org and
    /// packages.ubuntu.com for each suite.
    pub fn of_suite(distro: &str, suite: &str) -> Option<Self> {
        SUITES.iter().find(|(d, s, _)| *d == distro && *s == suite).map(|&(_, _, minor)| Self { minor })
    }

    /// The version of a Debian `libc6` package (`2.36-9+deb12u9`, `2.35-0ubuntu3.8`).
    pub fn of_deb_version(version: &str) -> Option<Self> {
        // An epoch (`1:`) never appears on libc6, but is allowed by Debian policy.
        let upstream = version.rsplit_once(':').map_or(version, |(_, v)| v);
        let upstream = upstream.split(['-', '+', '~']).next()?;
        let mut parts = upstream.split('.');
        (parts.next()? == "2").then_some(())?;
        Some(Self { minor: parts.next()?.parse().ok()? })
    }

    /// The version in the banner glibc builds into `libc.so.6` ("GNU C Library (Debian GLIBC
    /// 2.36-9+deb12u9) stable release version 2.36."; the same text `libc.so.6` prints when
    /// run, which is never done here).
    pub fn of_banner(bytes: &[u8]) -> Option<Self> {
        const MARK: &[u8] = b"release version 2.";
        let at = bytes.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
        let digits: Vec<u8> = bytes[at..].iter().take(3).copied().take_while(u8::is_ascii_digit).collect();
        let minor = std::str::from_utf8(&digits).ok()?.parse().ok()?;
        Some(Self { minor })
    }

    /// The version in a versioned library name (`libc-2.31.so`, which `libc.so.6` links to
    /// up to glibc 2.33).
    pub fn of_file_name(name: &str) -> Option<Self> {
        let minor = name.strip_prefix("libc-2.")?.strip_suffix(".so")?;
        Some(Self { minor: minor.parse().ok()? })
    }
}

impl fmt::Display for Glibc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "2.{}", self.minor)
    }
}

impl FromStr for Glibc {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        s.strip_prefix("2.")
            .and_then(|m| m.parse().ok())
            .map(|minor| Self { minor })
            .ok_or_else(|| format!("{s:?} is not a glibc version (expected 2.NN, such as 2.36)"))
    }
}

impl serde::Serialize for Glibc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Glibc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::Glibc;

    #[test]
    fn readings() {
        assert_eq!(Glibc::of_suite("debian", "bookworm"), Some(Glibc { minor: 36 }));
        assert_eq!(Glibc::of_suite("debian", "trixie"), Some(Glibc { minor: 41 }));
        assert_eq!(Glibc::of_suite("ubuntu", "jammy"), Some(Glibc { minor: 35 }));
        assert_eq!(Glibc::of_suite("ubuntu", "noble"), Some(Glibc { minor: 39 }));
        assert_eq!(Glibc::of_suite("ubuntu", "bionic"), Some(Glibc { minor: 27 }));
        assert_eq!(Glibc::of_suite("debian", "sid"), None);
        assert_eq!(Glibc::of_deb_version("2.36-9+deb12u9"), Some(Glibc { minor: 36 }));
        assert_eq!(Glibc::of_deb_version("2.35-0ubuntu3.8"), Some(Glibc { minor: 35 }));
        assert_eq!(Glibc::of_deb_version("3.1-1"), None);
        let banner = b"\0\0GNU C Library (Debian GLIBC 2.36-9+deb12u9) stable release version 2.36.\n";
        assert_eq!(Glibc::of_banner(banner), Some(Glibc { minor: 36 }));
        assert_eq!(
            Glibc::of_banner(b"GNU C Library (GNU libc) release release version 2.28.\n"),
            Some(Glibc { minor: 28 })
        );
        assert_eq!(Glibc::of_banner(b"release version 2."), None);
        assert_eq!(Glibc::of_file_name("libc-2.31.so"), Some(Glibc { minor: 31 }));
        assert_eq!(Glibc::of_file_name("libc.so.6"), None);
        assert_eq!("2.41".parse::<Glibc>().unwrap().to_string(), "2.41");
        assert!("2.x".parse::<Glibc>().unwrap_err().contains("expected 2.NN"));
    }
}
