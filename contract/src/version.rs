//! Version types of the image-host contract, each with a total order and a parse error that
//! quotes its input.
//!
//! NVIDIA compares versions "numerically, component by component" (libnvidia-container
//! `src/cli/dsl.c`), so `535.104.05` and `535.104.5` are equal and a missing component counts as
//! zero (`470` == `470.0`). The original text is kept for display, so a message shows the host's
//! `535.104.05` as the driver printed it. Python package versions follow PEP 440 and use
//! [`pep440_rs`] instead (re-exported here as [`PackageVersion`]).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

pub use pep440_rs::{Version as PackageVersion, VersionSpecifiers as PackageSpecifiers};

/// A version string that could not be parsed; the message quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {why}")]
pub struct VersionError {
    /// What kind of version was expected ("driver version", "CUDA version", ...).
    pub what: &'static str,
    /// The text as given.
    pub input: String,
    /// Why it was rejected.
    pub why: &'static str,
}

/// Dotted decimal components, compared numerically with missing components as zero.
#[derive(Debug, Clone)]
pub struct Dotted {
    parts: Vec<u64>,
    text: String,
}

impl Dotted {
    fn parse(what: &'static str, input: &str, min: usize, max: usize) -> Result<Self, VersionError> {
        let err = |why| VersionError { what, input: input.to_owned(), why };
        let text = input.trim();
        if text.is_empty() {
            return Err(err("empty"));
        }
        let mut parts = Vec::with_capacity(3);
        for part in text.split('.') {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("expected numbers separated by dots"));
            }
            parts.push(part.parse().map_err(|_| err("component out of range"))?);
        }
        if parts.len() < min {
            return Err(err("too few components"));
        }
        if parts.len() > max {
            return Err(err("too many components"));
        }
        Ok(Self { parts, text: text.to_owned() })
    }

    /// The numeric components as written.
    pub fn parts(&self) -> &[u64] {
        &self.parts
    }

    /// Component `i`, zero when absent.
    pub fn part(&self, i: usize) -> u64 {
        self.parts.get(i).copied().unwrap_or(0)
    }

    /// The text as given (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Ord for Dotted {
    fn cmp(&self, other: &Self) -> Ordering {
        let n = self.parts.len().max(other.parts.len());
        (0..n).map(|i| self.part(i).cmp(&other.part(i))).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
    }
}
impl PartialOrd for Dotted {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Dotted {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Dotted {}
impl fmt::Display for Dotted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

macro_rules! dotted_type {
    ($(#[$doc:meta])* $name:ident, $what:literal, $min:literal, $max:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
        pub struct $name(Dotted);

        impl $name {
            /// Component `i` (0 = major), zero when absent.
            pub fn part(&self, i: usize) -> u64 {
                self.0.part(i)
            }
            /// The numeric components as written.
            pub fn parts(&self) -> &[u64] {
                self.0.parts()
            }
            /// The text as given.
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }
        impl FromStr for $name {
            type Err = VersionError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Dotted::parse($what, s, $min, $max).map(Self)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

dotted_type!(
    /// An NVIDIA driver version: `535.104.05`, `570.26`, `470`.
    DriverVersion, "driver version", 1, 3
);
dotted_type!(
    /// A CUDA version: `12.1`, `12.1.1`.
    CudaVersion, "CUDA version", 1, 3
);
dotted_type!(
    /// A Python interpreter version: `3.11`, `3.11.7`.
    PythonVersion, "Python version", 2, 3
);

impl DriverVersion {
    /// The driver branch (the major number): 535 for `535.104.05`.
    pub fn branch(&self) -> u64 {
        self.part(0)
    }
}

impl CudaVersion {
    /// The `major.minor` part, as CUDA's compatibility rules use it.
    pub fn major_minor(&self) -> (u64, u64) {
        (self.part(0), self.part(1))
    }

    /// `12.1` of `12.1.105`: the `major.minor` release, as a version of its own.
    #[must_use]
    pub fn release(&self) -> CudaVersion {
        let (major, minor) = self.major_minor();
        Self(Dotted { parts: vec![major, minor], text: format!("{major}.{minor}") })
    }
}

/// A GPU's compute capability, `major.minor` (`8.9`, `12.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// Major revision: the architecture generation (8 = Ampere/Ada, 9 = Hopper).
    pub major: u32,
    /// Minor revision within the generation.
    pub minor: u32,
}

impl ComputeCapability {
    /// A compute capability from its two numbers.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// `sm_89` for 8.9, the way nvcc and torch name the targets.
    pub fn sm(self) -> String {
        format!("sm_{}{}", self.major, self.minor)
    }
}

impl FromStr for ComputeCapability {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| VersionError { what: "compute capability", input: s.to_owned(), why };
        let t = s.trim();
        // Accept `sm_89` / `compute_89` too, as torch's arch lists spell them.
        if let Some(digits) = t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_")) {
            if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err("expected sm_<major><minor>"));
            }
            let (major, minor) = digits.split_at(digits.len() - 1);
            return Ok(Self::new(
                major.parse().map_err(|_| err("major out of range"))?,
                minor.parse().map_err(|_| err("minor out of range"))?,
            ));
        }
        let d = Dotted::parse("compute capability", t, 2, 2)?;
        let conv = |v: u64| u32::try_from(v).map_err(|_| err("component out of range"));
        Ok(Self::new(conv(d.part(0))?, conv(d.part(1))?))
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl serde::Serialize for ComputeCapability {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> serde::Deserialize<'de> for ComputeCapability {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One run of a kernel release: digits compare numerically, other text lexically.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Run {
    Num(u64),
    Text(String),
}

/// A kernel release as `uname -r` prints it: `5.15.0-105-generic`, `6.1.0-27-amd64`.
///
/// Numeric runs compare numerically and the rest as text, so `5.15.0-105` < `5.15.0-107`
/// and `5.15.0-99` < `5.15.0-105`. A release that is a prefix of another sorts first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelRelease {
    runs: Vec<Run>,
    text: String,
}

impl KernelRelease {
    /// The text as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for KernelRelease {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| VersionError { what: "kernel release", input: s.to_owned(), why };
        let text = s.trim();
        if text.is_empty() {
            return Err(err("empty"));
        }
        if !text.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
            return Err(err("must start with a digit"));
        }
        if text.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b == b',') {
            return Err(err("contains whitespace, a comma or a control character"));
        }
        let mut runs = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let digit = bytes[i].is_ascii_digit();
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() == digit {
                i += 1;
            }
            let run = &text[start..i];
            runs.push(if digit {
                Run::Num(run.parse().map_err(|_| err("number out of range"))?)
            } else {
                Run::Text(run.to_owned())
            });
        }
        Ok(Self { runs, text: text.to_owned() })
    }
}

impl fmt::Display for KernelRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for KernelRelease {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> DriverVersion {
        s.parse().unwrap()
    }
    fn k(s: &str) -> KernelRelease {
        s.parse().unwrap()
    }

    #[test]
    fn driver_versions_compare_numerically() {
        assert!(d("535.104.05") > d("535.54.03"));
        assert!(d("570.26") > d("565.57.01"));
        assert_eq!(d("470"), d("470.0.0"));
        assert!(d("470.57.02") < d("471"));
        assert_eq!(d("535.104.05").to_string(), "535.104.05");
        assert_eq!(d("535.104.05").branch(), 535);
    }

    #[test]
    fn parse_errors_quote_the_input() {
        let e = "535.x".parse::<DriverVersion>().unwrap_err();
        assert_eq!(e.to_string(), r#"invalid driver version "535.x": expected numbers separated by dots"#);
        assert!("1.2.3.4".parse::<CudaVersion>().is_err());
        assert!("".parse::<CudaVersion>().is_err());
        assert!("3".parse::<PythonVersion>().is_err());
        assert!("99999999999999999999999".parse::<DriverVersion>().is_err());
    }

    #[test]
    fn compute_capabilities() {
        let cc: ComputeCapability = "8.9".parse().unwrap();
        assert_eq!(cc, ComputeCapability::new(8, 9));
        assert_eq!("sm_90".parse::<ComputeCapability>().unwrap(), ComputeCapability::new(9, 0));
        assert_eq!("sm_120".parse::<ComputeCapability>().unwrap(), ComputeCapability::new(12, 0));
        assert!(ComputeCapability::new(12, 0) > ComputeCapability::new(9, 0));
        assert_eq!(ComputeCapability::new(8, 6).sm(), "sm_86");
        assert!("8".parse::<ComputeCapability>().is_err());
        assert!("8.9.1".parse::<ComputeCapability>().is_err());
    }

    #[test]
    fn kernel_releases_order_numeric_runs_numerically() {
        assert!(k("5.15.0-105-generic") < k("5.15.0-107-generic"));
        assert!(k("5.15.0-99-generic") < k("5.15.0-105-generic"));
        assert!(k("6.1.0-27-amd64") > k("5.15.0-107-generic"));
        assert!(k("5.15.0") < k("5.15.0-105"));
        assert_eq!(k("5.15.0-105-generic").to_string(), "5.15.0-105-generic");
        assert!("generic".parse::<KernelRelease>().is_err());
        assert!("5.15 0".parse::<KernelRelease>().is_err());
    }

    #[test]
    fn cuda_and_python() {
        let c: CudaVersion = "12.1.1".parse().unwrap();
        assert_eq!(c.major_minor(), (12, 1));
        assert!(c > "12.1".parse().unwrap());
        let p: PythonVersion = "3.11.7".parse().unwrap();
        assert!(p < "3.12".parse().unwrap());
    }
}
