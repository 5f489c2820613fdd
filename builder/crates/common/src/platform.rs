//! The target platforms of an image (`linux/amd64`, `linux/arm64`), with their OCI, Debian and
//! ELF names. A leaf module: the recipe, the lock, the solver and the builder all name platforms.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A target platform of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Platform {
    /// `linux/amd64`
    LinuxAmd64,
    /// `linux/arm64`
    LinuxArm64,
}

impl Platform {
    /// Every supported platform.
    pub const ALL: [Platform; 2] = [Platform::LinuxAmd64, Platform::LinuxArm64];

    /// `linux/amd64`: the OCI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "linux/amd64",
            Self::LinuxArm64 => "linux/arm64",
        }
    }

    /// The OCI `os`.
    pub fn os(self) -> &'static str {
        "linux"
    }

    /// The OCI `architecture` (`amd64`, `arm64`).
    pub fn architecture(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "amd64",
            Self::LinuxArm64 => "arm64",
        }
    }

    /// The machine name as `uname -m` and wheel tags spell it (`x86_64`, `aarch64`).
    pub fn machine(self) -> &'static str {
        match self {
            Self::LinuxAmd64 => "x86_64",
            Self::LinuxArm64 => "aarch64",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Platform {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unsupported platform {s:?}: expected \"linux/amd64\" or \"linux/arm64\""))
    }
}

impl Serialize for Platform {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Platform {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
