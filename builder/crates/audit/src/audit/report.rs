//! What an audit finds: its errors, its findings and their kinds, the report and how it is
//! rendered for people and machines.

use serde::{Deserialize, Serialize};
use stackbuild_common::IoError;
use stackbuild_image::OciError;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Errors of an audit (findings are not errors: they are in the [`AuditReport`]).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Reading the root filesystem failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Reading a layer failed.
    #[error("layer {digest}: {source}")]
    Layer {
        /// The layer's digest.
        digest: String,
        /// What failed, on the layer's blob.
        #[source]
        source: IoError,
    },
    /// The OCI layout could not be read.
    #[error(transparent)]
    Oci(#[from] OciError),
    /// The platform is not one this audit knows the ELF machine of.
    #[error("unsupported platform {0:?} (known: linux/amd64, linux/arm64, linux/ppc64le, linux/s390x, linux/riscv64, linux/386, linux/arm)")]
    Platform(String),
}

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A `DT_NEEDED` library (or a program interpreter) found nowhere.
    Unresolved,
    /// A library found first somewhere else than where the object's `RUNPATH` pins it.
    Shadowed,
    /// A `libcuda.so*` inside the image that the loader can reach.
    Stub,
    /// An object for another machine than the image's platform.
    Machine,
    /// A 32-bit object in a 64-bit image.
    Elf32,
    /// A file with the ELF magic that could not be parsed.
    BadElf,
    /// A library of the host's NVIDIA driver (other than `libcuda`) inside the image.
    DriverLibrary,
    /// Something this audit cannot check statically (a relative path).
    Unchecked,
}

impl FindingKind {
    /// The name used in reports (as serialized).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unresolved => "unresolved",
            Self::Shadowed => "shadowed",
            Self::Stub => "stub",
            Self::Machine => "machine",
            Self::Elf32 => "elf32",
            Self::BadElf => "bad_elf",
            Self::DriverLibrary => "driver_library",
            Self::Unchecked => "unchecked",
        }
    }
}

/// One error or warning.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What kind of problem.
    pub kind: FindingKind,
    /// The file concerned, inside the image (the needing object, or the stub).
    pub path: String,
    /// The library name concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soname: Option<String>,
    /// A sentence saying what is wrong (without `path`).
    pub message: String,
}

/// The result of an audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// ELF files read.
    pub objects_scanned: usize,
    /// How long the audit took (serialized as seconds).
    #[serde(with = "secs")]
    pub elapsed: Duration,
    /// Problems that break loading, sorted by kind, path and library.
    pub errors: Vec<Finding>,
    /// Problems that may not matter, sorted likewise.
    pub warnings: Vec<Finding>,
    /// Libraries the host's NVIDIA driver must provide -> the objects that need them.
    pub host_provided: BTreeMap<String, Vec<String>>,
}

/// `Duration` as floating-point seconds.
pub(super) mod secs {
    use std::time::Duration;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// Changes whenever the rules that decide a finding's severity change, so that reports cached
/// by a builder (keyed by image digest) are not reused across policies.
pub const POLICY_VERSION: u32 = 4;

/// Most findings of one kind listed by [`AuditReport::render_human`].
pub(super) const HUMAN_LIMIT: usize = 50;

impl AuditReport {
    /// Turns the errors of objects the recipe accepts (exact path, or a directory prefix ending
    /// in `/`) into warnings that carry the recipe's reason.
    pub fn accept(&mut self, path: &str, reason: &str) {
        let (accepted, kept): (Vec<Finding>, Vec<Finding>) = std::mem::take(&mut self.errors)
            .into_iter()
            .partition(|f| f.path == path || (path.ends_with('/') && f.path.starts_with(path)));
        self.errors = kept;
        for mut f in accepted {
            f.message = format!("{} (accepted by the recipe: {reason})", f.message);
            self.warnings.push(f);
        }
    }

    /// Whether any error was found.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// A report for people: errors, warnings, host requirements, then a summary line.
    pub fn render_human(&self) -> String {
        let mut out = String::new();
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        for (title, findings) in [("errors", &self.errors), ("warnings", &self.warnings)] {
            if findings.is_empty() {
                continue;
            }
            let _ = writeln!(out, "{title}:");
            let mut shown: BTreeMap<FindingKind, usize> = BTreeMap::new();
            for f in findings {
                let n = shown.entry(f.kind).or_default();
                *n += 1;
                if *n <= HUMAN_LIMIT {
                    let _ = writeln!(out, "  {:<14} {}: {}", f.kind.as_str(), f.path, f.message);
                }
            }
            for (kind, n) in shown {
                if n > HUMAN_LIMIT {
                    let _ = writeln!(out, "  ... and {} more {}", n - HUMAN_LIMIT, kind.as_str());
                }
            }
        }
        if !self.host_provided.is_empty() {
            let _ = writeln!(out, "provided by the host's NVIDIA driver:");
            for (lib, users) in &self.host_provided {
                let listed: Vec<&str> = users.iter().take(5).map(String::as_str).collect();
                let more =
                    if users.len() > 5 { format!(" and {} more", users.len() - 5) } else { String::new() };
                let _ = writeln!(out, "  {lib} (needed by {}{more})", listed.join(", "));
            }
        }
        let _ = writeln!(
            out,
            "{} scanned in {:.2}s: {}, {}",
            plural(self.objects_scanned, "ELF object"),
            self.elapsed.as_secs_f64(),
            plural(self.errors.len(), "error"),
            plural(self.warnings.len(), "warning"),
        );
        out
    }
}
