//! `stackbuild audit`: a static `ldd` over an image's root filesystem.
//!
//! For every ELF object of the image, each `DT_NEEDED` is resolved the way glibc's `ld.so`
//! would inside a container of that image (`elf/dl-load.c`, `_dl_map_object`; `ld.so(8)`):
//!
//! 1. `DT_RPATH` of the object, then of the objects that loaded it up to the executable, but
//!    only while the object itself has no `DT_RUNPATH` (glibc ignores a `DT_RPATH` next to a
//!    `DT_RUNPATH`, `elf/get-dynamic-info.h`);
//! 2. `LD_LIBRARY_PATH` from the image's environment;
//! 3. `DT_RUNPATH` of the object itself;
//! 4. the directories of the image's `/etc/ld.so.conf` (what `ldconfig` puts in the cache);
//! 5. the default directories (`/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib64`, `/usr/lib64`,
//!    `/lib`, `/usr/lib`); 4 and 5 are skipped for objects linked with `-z nodefaultlib`.
//!
//! `$ORIGIN` is the directory the object was found in (glibc does not resolve a library's
//! symlinks for it), `$LIB` is `lib64` for 64-bit objects and `lib` for 32-bit ones, and
//! `$PLATFORM` the `AT_PLATFORM` string of the architecture. A candidate of another ELF class
//! or machine is skipped, as `open_verify` does; a candidate that is not ELF at all stops the
//! search with `invalid ELF header`, as in glibc.
//!
//! Findings ([`FindingKind`]): unresolved libraries; libraries that the host's NVIDIA driver
//! provides (`libcuda.so.1`, `libnvidia-ml.so.1`, ...), which become [`AuditReport::host_provided`]
//! requirements instead; `LD_LIBRARY_PATH` entries that shadow the copy an object's `RUNPATH`
//! pins (a system cuDNN 8.9.7 loaded before the 8.9.2 of the `nvidia-cudnn-cu12` wheel that
//! torch 2.1 pins gives NaNs or undefined symbols, not a clean error); `libcuda.so` stubs or
//! copies on the search path (they make CUDA report "CUDA driver version is insufficient" on a
//! good host); objects of another machine than the image's platform.
//!
//! Each executable is loaded as `ld.so` loads it, breadth first, and a `DT_NEEDED` that matches
//! the name or `DT_SONAME` of an object loaded earlier is not searched for (`elf/dl-deps.c`):
//! systemd's `libsystemd-core` finds `libsystemd-shared` only that way. An object with a
//! `RUNPATH` that receives such an earlier copy while its `RUNPATH` pins another is reported as
//! shadowed too. A library that nothing in the image links to (a plugin, a Python extension
//! module) is loaded on its own; a dependency it cannot find on its own search path but that the image
//! has elsewhere is only a warning, since the process that `dlopen`s it may have loaded that
//! copy already (the loader then matches it by name without searching).
//!
//! Findings are recorded per root (an executable, or a `dlopen` root: a library that nothing
//! else in the image loads), and the severity of an unresolved library is decided at the end,
//! from the roots it was reached from. It is only a warning when every root that reaches it is
//!
//! - an *alternative build*: a `dlopen` root of a family of at least two in one directory whose
//!   names differ only in digits (bitsandbytes' `libbitsandbytes_cuda110.so` ...
//!   `libbitsandbytes_cuda122.so`, torchaudio's `_torchaudio_ffmpeg4.so` ... `_ffmpeg6.so`), at
//!   least one of which has no unresolved library in its closure: the package loads the build
//!   that matches what it finds (bitsandbytes' `cuda_setup`; torchaudio tries each major
//!   version of `FFmpeg`);
//! - a *plugin*: a `dlopen` root outside Python packages (`site-packages`, `dist-packages`,
//!   `lib-dynload`, `*.cpython-*.so`), outside the directories every object searches
//!   (`LD_LIBRARY_PATH`, `ld.so.conf`, the default directories) and in a directory that nothing
//!   outside it links into, such as libcaca's `caca/libgl_plugin.so`, loaded only when
//!   `CACA_DRIVER=gl`.
//!
//! Anything an executable loads keeps its errors, and so do Python extension modules and
//! libraries on the search path; shadowed copies, stubs and foreign machines stay errors.
//!
//! [`audit_dir`] reads an unpacked root filesystem; [`audit_layout`] streams the layers of an
//! OCI layout without extracting them.

mod elf;
mod fs;
mod tap;

pub use tap::LayerTap;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use goblin::elf::header::{machine_to_str, EM_386, EM_AARCH64, EM_AMDGPU, EM_ARM, EM_BPF, EM_CUDA};
use goblin::elf::header::{EM_PPC64, EM_RISCV, EM_S390, EM_X86_64};
use serde::{Deserialize, Serialize};

use self::elf::ElfInfo;
use self::fs::{join, split_parent, ElfState, FileInfo, Kind, RootFs};
use stackbuild_common::{io_err, IoError};
use stackbuild_image::OciError;

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
mod secs {
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
pub const POLICY_VERSION: u32 = 2;

/// Most findings of one kind listed by [`AuditReport::render_human`].
const HUMAN_LIMIT: usize = 50;

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

/// The ABI of one kind of object of a platform.
#[derive(Clone, Copy, Debug)]
struct Abi {
    machine: u16,
    class64: bool,
    /// Debian's multiarch triplet (`/usr/lib/<triplet>`).
    triplet: &'static str,
    /// `AT_PLATFORM`, what `$PLATFORM` expands to.
    platform: &'static str,
}

/// A platform: its native ABI and the 32-bit ABI its kernel may also run.
#[derive(Clone, Copy, Debug)]
struct Arch {
    native: Abi,
    compat: Option<Abi>,
}

const fn abi(machine: u16, class64: bool, triplet: &'static str, platform: &'static str) -> Abi {
    Abi { machine, class64, triplet, platform }
}

/// Parses `linux/amd64`, `amd64`, `linux/arm64/v8`, `x86_64`, ... (Go's and the kernel's
/// spellings).
fn parse_platform(platform: &str) -> Option<Arch> {
    let mut parts = platform.split('/');
    let first = parts.next()?;
    let arch = if first == "linux" { parts.next()? } else { first };
    let i386 = abi(EM_386, false, "i386-linux-gnu", "i686");
    let arm = abi(EM_ARM, false, "arm-linux-gnueabihf", "v7l");
    Some(match arch {
        "amd64" | "x86_64" => {
            Arch { native: abi(EM_X86_64, true, "x86_64-linux-gnu", "x86_64"), compat: Some(i386) }
        }
        "arm64" | "aarch64" => {
            Arch { native: abi(EM_AARCH64, true, "aarch64-linux-gnu", "aarch64"), compat: Some(arm) }
        }
        "ppc64le" => Arch { native: abi(EM_PPC64, true, "powerpc64le-linux-gnu", "ppc64le"), compat: None },
        "s390x" => Arch { native: abi(EM_S390, true, "s390x-linux-gnu", "s390x"), compat: None },
        "riscv64" => Arch { native: abi(EM_RISCV, true, "riscv64-linux-gnu", "riscv64"), compat: None },
        "386" | "i386" | "i686" => Arch { native: i386, compat: None },
        "arm" | "armhf" => Arch { native: arm, compat: None },
        _ => return None,
    })
}

impl Arch {
    /// `64-bit x86_64 and 32-bit i386 objects`, for messages.
    fn describe(&self) -> String {
        let one = |a: Abi| format!("{}-bit {}", if a.class64 { 64 } else { 32 }, machine_name(a.machine));
        match self.compat {
            Some(c) => format!("{} and {} objects", one(self.native), one(c)),
            None => format!("{} objects", one(self.native)),
        }
    }

    /// The ABI of `info` if the platform runs it; `None` for a foreign object.
    fn abi_of(&self, info: &ElfInfo) -> Option<Abi> {
        [Some(self.native), self.compat]
            .into_iter()
            .flatten()
            .find(|a| a.machine == info.machine && a.class64 == info.class64)
    }
}

/// The name of an ELF machine for messages (`x86_64`, `aarch64`, ...).
fn machine_name(machine: u16) -> String {
    match machine {
        EM_X86_64 => "x86_64".into(),
        EM_AARCH64 => "aarch64".into(),
        EM_386 => "i386".into(),
        EM_ARM => "arm".into(),
        other => format!("{} (e_machine {other})", machine_to_str(other)),
    }
}

/// Machines of device code (CUDA cubins, AMD GPU code objects, eBPF) that sit in images as ELF
/// files without ever being loaded by `ld.so`.
const DEVICE_MACHINES: [u16; 3] = [EM_CUDA, EM_AMDGPU, EM_BPF];

/// Libraries of the NVIDIA driver that the container toolkit mounts from the host, by name
/// before `.so` (libnvidia-container `src/nvc_info.c`, which also lists every `libnvidia-*`).
const DRIVER_LIBRARIES: [&str; 9] = [
    "libcuda",
    "libcudadebugger",
    "libnvcuvid",
    "libvdpau_nvidia",
    "libnvoptix",
    "libEGL_nvidia",
    "libGLX_nvidia",
    "libGLESv2_nvidia",
    "libGLESv1_CM_nvidia",
];

/// Whether `name` is a library of the host's NVIDIA driver.
fn is_driver_library(name: &str) -> bool {
    let Some((stem, _)) = name.split_once(".so") else { return false };
    DRIVER_LIBRARIES.contains(&stem) || stem.starts_with("libnvidia-")
}

/// Whether `name` is `libcuda.so` or `libcuda.so.*`.
fn is_libcuda(name: &str) -> bool {
    name == "libcuda.so" || name.starts_with("libcuda.so.")
}

/// The version in a library's file name (`8.9.7` for `libcudnn.so.8.9.7`).
fn file_version(path: &str) -> Option<&str> {
    let (_, name) = split_parent(path);
    name.split_once(".so.").map(|(_, v)| v).filter(|v| !v.is_empty())
}

/// `path` with `.` and `..` removed lexically, for messages only (the loader takes `..` after
/// symlinks, which [`RootFs::resolve`] does).
fn lexical_clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Where a search directory comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Via {
    /// `DT_RPATH` of the object itself.
    Rpath,
    /// `DT_RPATH` of an object that loaded it.
    LoaderRpath(String),
    LdLibraryPath,
    Runpath,
    LdSoConf,
    Default,
    /// A `DT_NEEDED` that is a path.
    Path,
    /// Already loaded, because this object needed it first.
    Loaded(String),
}

/// One directory of a search, with the entry it was expanded from.
#[derive(Clone, Debug)]
struct SearchDir {
    dir: String,
    via: Via,
    /// The unexpanded `RPATH`/`RUNPATH` entry, for messages.
    raw: Option<String>,
}

impl SearchDir {
    fn describe(&self) -> String {
        let raw = self.raw.as_deref().filter(|r| *r != self.dir).map(|r| format!(" {r}")).unwrap_or_default();
        match &self.via {
            Via::Rpath => format!("RPATH{raw}"),
            Via::LoaderRpath(owner) => format!("RPATH{raw} of {owner}"),
            Via::LdLibraryPath => "LD_LIBRARY_PATH".into(),
            Via::Runpath => format!("RUNPATH{raw}"),
            Via::LdSoConf => "ld.so.conf".into(),
            Via::Default => "the default directories".into(),
            Via::Path => "its path".into(),
            Via::Loaded(by) => format!("{by}, which loaded it first"),
        }
    }
}

/// A `DT_RPATH` directory inherited from a loader.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ChainDir {
    dir: String,
    raw: String,
    owner: String,
}

/// A file a search found.
#[derive(Clone, Debug)]
struct Hit {
    /// `dir/name` as the loader opened it.
    found_at: String,
    /// The file after symlinks.
    real: String,
    /// The search directory.
    from: SearchDir,
    /// Whether it is an ELF file (else the loader stops with `invalid ELF header`).
    elf: bool,
}

/// An object already loaded into the simulated process.
#[derive(Clone, Debug)]
struct Loaded {
    /// Its real path.
    real: String,
    /// Where it was found.
    found_at: String,
    /// The object that needed it first.
    by: String,
}

/// An object to resolve the dependencies of, in one loading context.
struct Visit {
    /// Its real path.
    object: String,
    /// The directory it was found in (`$ORIGIN`).
    origin: String,
    /// `DT_RPATH` directories of its loaders, nearest first.
    chain: Vec<ChainDir>,
    /// Whether nothing in the image links to the root of this loading chain (a plugin or a
    /// Python extension module, loaded with `dlopen` by a process that has already loaded
    /// other libraries).
    dlopened: bool,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Severity {
    Warning,
    Error,
}

/// A finding as recorded, before [`Auditor::report`] applies the policy of the roots it was
/// reached from.
#[derive(Clone, Debug)]
struct Noted {
    severity: Severity,
    finding: Finding,
}

/// What loading one root (an executable, or a library that nothing else loads) found.
#[derive(Debug)]
struct Load {
    /// The real path of the root.
    root: String,
    /// Whether the root is loaded with `dlopen` (else it is an executable).
    dlopened: bool,
    /// Real paths of the objects whose dependencies were resolved, the root included.
    objects: HashSet<String>,
    /// What resolving them found.
    notes: Vec<Noted>,
}

/// Why the unresolved errors in the closure of a plugin root are only warnings.
const PLUGIN_EXCUSE: &str = "a plugin nothing in the image links to; loaded only on demand";

/// Whether `path` is a Python extension module: in a directory of Python packages or the
/// standard library's `lib-dynload`, or named with a CPython/PyPy ABI tag (PEP 3149) or the
/// stable ABI's `.abi3.so`.
fn is_python_module(path: &str) -> bool {
    let (_, name) = split_parent(path);
    path.split('/').any(|c| matches!(c, "site-packages" | "dist-packages" | "lib-dynload"))
        || name.contains(".cpython-")
        || name.contains(".pypy")
        || name.ends_with(".abi3.so")
}

/// The name of a file without its digits, which names a family of alternative builds
/// (`libbitsandbytes_cuda.so` for `libbitsandbytes_cuda118.so` and `..._cuda121.so`).
fn family_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// Expands the dynamic string tokens of one `RPATH`/`RUNPATH` entry; `None` for entries that
/// are relative after expansion (relative to the process's working directory, unknowable here)
/// or empty.
fn expand_tokens(entry: &str, origin: &str, abi: Abi) -> Option<String> {
    let out = expand_string(entry, origin, abi);
    out.starts_with('/').then_some(out)
}

/// Expands `$ORIGIN`, `$LIB` and `$PLATFORM` (braced or not) in `entry`, as glibc's
/// `_dl_dst_substitute` does for `RPATH`, `RUNPATH` and `DT_NEEDED` (`elf/dl-load.c`).
fn expand_string(entry: &str, origin: &str, abi: Abi) -> String {
    let mut out = String::with_capacity(entry.len() + origin.len());
    let mut rest = entry;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => ("", after),
            }
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match name {
            "ORIGIN" => out.push_str(origin),
            "LIB" => out.push_str(if abi.class64 { "lib64" } else { "lib" }),
            "PLATFORM" => out.push_str(abi.platform),
            // glibc copies an unknown `$` sequence as it is.
            _ => {
                out.push('$');
                rest = after;
                continue;
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// Matches one path component against a shell glob (`*`, `?`, `[...]`), as `glob(3)` does for
/// `include` lines.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob_match(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob_match(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some((&c, name_rest)) = name.split_first() else { return false };
            let (negate, body) = match rest.first() {
                Some(b'!' | b'^') => (true, &rest[1..]),
                _ => (false, rest),
            };
            // A `]` right after `[` (or `[!`) is a literal member.
            let Some(close) = body.iter().skip(1).position(|&b| b == b']').map(|p| p + 1) else {
                return c == b'[' && glob_match(rest, name_rest);
            };
            let set = &body[..close];
            let mut matched = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    matched |= (set[i]..=set[i + 2]).contains(&c);
                    i += 3;
                } else {
                    matched |= set[i] == c;
                    i += 1;
                }
            }
            matched != negate && glob_match(&body[close + 1..], name_rest)
        }
        Some((&p, rest)) => name.first() == Some(&p) && glob_match(rest, &name[1..]),
    }
}

/// The audit of one root filesystem.
struct Auditor<'a> {
    fs: &'a RootFs,
    arch: Arch,
    platform: String,
    ld_library_path: Vec<String>,
    conf_dirs: Vec<String>,
    /// Search directory -> its resolved path (`None`: not a directory).
    canonical: HashMap<String, Option<String>>,
    /// Findings recorded since the last [`Auditor::load`] (or the start) took them.
    notes: Vec<Noted>,
    /// Findings about the image as a whole or single files, not about one root's closure.
    global: Vec<Noted>,
    /// The roots loaded: executables, then `dlopen` roots, each in path order.
    loads: Vec<Load>,
    host_provided: BTreeMap<String, BTreeSet<String>>,
    /// (`DT_SONAME` or file name, machine, class64) -> the loadable objects of that name.
    by_name: HashMap<(String, u16, bool), Vec<String>>,
}

impl<'a> Auditor<'a> {
    fn new(fs: &'a RootFs, env: &[String], platform: &str) -> Result<Self, AuditError> {
        let arch = parse_platform(platform).ok_or_else(|| AuditError::Platform(platform.to_string()))?;
        let mut auditor = Self {
            fs,
            arch,
            platform: platform.to_string(),
            ld_library_path: Vec::new(),
            conf_dirs: Vec::new(),
            canonical: HashMap::new(),
            notes: Vec::new(),
            global: Vec::new(),
            loads: Vec::new(),
            host_provided: BTreeMap::new(),
            by_name: HashMap::new(),
        };
        // ld.so keeps the last definition (`process_envvars` in glibc's elf/rtld.c sees them all).
        if let Some(value) = env.iter().rev().find_map(|e| e.strip_prefix("LD_LIBRARY_PATH=")) {
            // glibc splits LD_LIBRARY_PATH at `:` and `;` (elf/dl-load.c, `_dl_init_paths`).
            for entry in value.split([':', ';']).filter(|e| !e.is_empty()) {
                if entry.starts_with('/') && !entry.contains('$') {
                    if !auditor.ld_library_path.iter().any(|d| d == entry) {
                        auditor.ld_library_path.push(entry.to_string());
                    }
                } else {
                    auditor.warn(
                        FindingKind::Unchecked,
                        "LD_LIBRARY_PATH",
                        None,
                        format!(
                            "entry {entry:?} depends on the working directory or executable; not searched"
                        ),
                    );
                }
            }
        }
        let mut seen_files = HashSet::new();
        auditor.read_conf("/etc/ld.so.conf", 0, &mut seen_files);
        Ok(auditor)
    }

    fn finding(kind: FindingKind, path: &str, soname: Option<&str>, message: String) -> Finding {
        Finding { kind, path: path.to_string(), soname: soname.map(str::to_string), message }
    }

    /// Records an error (which [`Auditor::report`] may turn into a warning, see
    /// [`Auditor::excuses`]).
    fn error(&mut self, kind: FindingKind, path: &str, soname: Option<&str>, message: String) {
        let finding = Self::finding(kind, path, soname, message);
        self.notes.push(Noted { severity: Severity::Error, finding });
    }

    fn warn(&mut self, kind: FindingKind, path: &str, soname: Option<&str>, message: String) {
        let finding = Self::finding(kind, path, soname, message);
        self.notes.push(Noted { severity: Severity::Warning, finding });
    }

    /// Reads an `ld.so.conf` file: one directory per line, `#` comments, `include <glob>...`
    /// (relative patterns are relative to the including file's directory) and `hwcap` lines
    /// (ignored), as ldconfig's `parse_conf` does.
    fn read_conf(&mut self, path: &str, depth: usize, seen: &mut HashSet<String>) {
        let Some((real, Kind::File(info))) = self.fs.resolve(path) else { return };
        if depth > 16 || !seen.insert(real) {
            return;
        }
        let Some(text) = info.text.clone() else { return };
        let (conf_dir, _) = split_parent(path);
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            match words.next() {
                Some("include") => {
                    for pattern in words {
                        let pattern = if pattern.starts_with('/') {
                            pattern.to_string()
                        } else {
                            join(conf_dir, pattern)
                        };
                        for file in self.glob(&pattern) {
                            self.read_conf(&file, depth + 1, seen);
                        }
                    }
                }
                Some("hwcap") => {}
                _ => {
                    // Old syntax `dir=libc6` names the library type after `=`.
                    let dir = match line.rsplit_once('=') {
                        Some((d, "libc4" | "libc5" | "libc6" | "glibc2")) => d.trim_end(),
                        _ => line,
                    };
                    let dir = dir.trim_end_matches('/');
                    if dir.starts_with('/') && !self.conf_dirs.iter().any(|d| d == dir) {
                        self.conf_dirs.push(dir.to_string());
                    }
                }
            }
        }
    }

    /// The existing paths matching an absolute glob, sorted.
    fn glob(&self, pattern: &str) -> Vec<String> {
        let mut current = vec![String::new()];
        for comp in pattern.split('/').filter(|c| !c.is_empty()) {
            let mut next = Vec::new();
            for base in &current {
                if comp.contains(['*', '?', '[']) {
                    let dir = if base.is_empty() { "/" } else { base.as_str() };
                    let Some((real, Kind::Dir)) = self.fs.resolve(dir) else { continue };
                    for name in self.fs.children(&real) {
                        // As in glob(3), a leading dot must be matched explicitly.
                        if (!name.starts_with('.') || comp.starts_with('.'))
                            && glob_match(comp.as_bytes(), name.as_bytes())
                        {
                            next.push(format!("{base}/{name}"));
                        }
                    }
                } else {
                    next.push(format!("{base}/{comp}"));
                }
            }
            current = next;
        }
        current.retain(|p| self.fs.resolve(p).is_some());
        current.sort();
        current
    }

    /// The default directories for objects of `abi`.
    fn default_dirs(abi: Abi) -> Vec<String> {
        let mut dirs = vec![format!("/lib/{}", abi.triplet), format!("/usr/lib/{}", abi.triplet)];
        if abi.class64 {
            dirs.extend(["/lib64".to_string(), "/usr/lib64".to_string()]);
        } else if abi.machine == EM_386 {
            dirs.extend(["/lib32".to_string(), "/usr/lib32".to_string()]);
        }
        dirs.extend(["/lib".to_string(), "/usr/lib".to_string()]);
        dirs
    }

    /// The resolved form of a search directory, cached.
    fn canonical_dir(&mut self, dir: &str) -> Option<String> {
        if let Some(c) = self.canonical.get(dir) {
            return c.clone();
        }
        let c = match self.fs.resolve(dir) {
            Some((real, Kind::Dir)) => Some(real),
            _ => None,
        };
        self.canonical.insert(dir.to_string(), c.clone());
        c
    }

    /// Looks `name` up in one directory for an object of `abi`.
    fn lookup(&mut self, search: &SearchDir, name: &str, abi: Abi) -> Option<Hit> {
        let dir = self.canonical_dir(&search.dir)?;
        let (real, kind) = self.fs.resolve_in(&dir, name)?;
        let Kind::File(info) = kind else { return None };
        let elf = match &info.elf {
            ElfState::Elf(e) if e.machine == abi.machine && e.class64 == abi.class64 => true,
            // Another class or machine: skipped, the search goes on (`open_verify`).
            ElfState::Elf(_) => return None,
            ElfState::Invalid(_) => true,
            ElfState::NotElf => false,
        };
        Some(Hit { found_at: join(&search.dir, name), real, from: search.clone(), elf })
    }

    /// The search list of an object for its dependencies.
    fn search_list(&self, info: &ElfInfo, origin: &str, abi: Abi, chain: &[ChainDir]) -> Vec<SearchDir> {
        let mut list = Vec::new();
        let split = |s: &str| s.split(':').map(str::to_string).collect::<Vec<_>>();
        if info.runpath.is_none() {
            for raw in info.rpath.as_deref().map(split).unwrap_or_default() {
                if let Some(dir) = expand_tokens(&raw, origin, abi) {
                    list.push(SearchDir { dir, via: Via::Rpath, raw: Some(raw) });
                }
            }
            for c in chain {
                let via = Via::LoaderRpath(c.owner.clone());
                list.push(SearchDir { dir: c.dir.clone(), via, raw: Some(c.raw.clone()) });
            }
        }
        for dir in &self.ld_library_path {
            list.push(SearchDir { dir: dir.clone(), via: Via::LdLibraryPath, raw: None });
        }
        for raw in info.runpath.as_deref().map(split).unwrap_or_default() {
            if let Some(dir) = expand_tokens(&raw, origin, abi) {
                list.push(SearchDir { dir, via: Via::Runpath, raw: Some(raw) });
            }
        }
        if !info.nodeflib {
            for dir in &self.conf_dirs {
                list.push(SearchDir { dir: dir.clone(), via: Via::LdSoConf, raw: None });
            }
            for dir in Self::default_dirs(abi) {
                list.push(SearchDir { dir, via: Via::Default, raw: None });
            }
        }
        list
    }

    /// A short description of a search list for "not found" messages.
    fn describe_search(list: &[SearchDir]) -> String {
        let mut parts: Vec<String> = Vec::new();
        for s in list {
            let part = match s.via {
                Via::LdSoConf => "ld.so.conf".to_string(),
                Via::Default => "the default directories".to_string(),
                _ => format!("{} ({})", s.dir, s.describe()),
            };
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        parts.join(", ")
    }

    /// The ELF info of the regular file at the real path `path`.
    fn elf_at(&self, path: &str) -> Option<&'a ElfInfo> {
        match self.fs.resolve(path) {
            Some((_, Kind::File(info))) => match &info.elf {
                ElfState::Elf(e) => Some(e),
                _ => None,
            },
            _ => None,
        }
    }

    /// Loads `root` the way `ld.so` would, breadth first: each `DT_NEEDED` is first matched
    /// against the names (requested names and `DT_SONAME`s) of what is already loaded, and only
    /// searched for when nothing matches (glibc `elf/dl-deps.c` and `_dl_map_object`). An object
    /// found by a search gets its loader's `RPATH` chain. Returns what was loaded and the
    /// findings recorded meanwhile.
    fn load(&mut self, root: &str, dlopened: bool) -> Load {
        let (origin, _) = split_parent(root);
        let mut queue = VecDeque::from([Visit {
            object: root.to_string(),
            origin: origin.to_string(),
            chain: Vec::new(),
            dlopened,
        }]);
        let mut names: HashMap<String, Loaded> = HashMap::new();
        let mut loaded: HashSet<String> = HashSet::from([root.to_string()]);
        let remember =
            |names: &mut HashMap<String, Loaded>, info: Option<&ElfInfo>, name: &str, l: &Loaded| {
                for n in info.and_then(|i| i.soname.as_deref()).into_iter().chain([name]) {
                    names.entry(n.to_string()).or_insert_with(|| l.clone());
                }
            };
        if let Some(info) = self.elf_at(root) {
            let me = Loaded { real: root.to_string(), found_at: root.to_string(), by: root.to_string() };
            remember(&mut names, Some(info), root, &me);
            // The dynamic loader itself is loaded, under its path and soname.
            if let Some(interp) = &info.interp {
                if let Some((real, _)) = self.fs.resolve(interp) {
                    let l = Loaded { real: real.clone(), found_at: interp.clone(), by: root.to_string() };
                    remember(&mut names, self.elf_at(&real), interp, &l);
                    loaded.insert(real);
                }
            }
        }
        let mut objects = HashSet::new();
        while let Some(visit) = queue.pop_front() {
            objects.insert(visit.object.clone());
            let Some(info) = self.elf_at(&visit.object) else { continue };
            let Some(abi) = self.arch.abi_of(info) else { continue };
            // The RPATH chain this object passes on: its own (ignored next to a RUNPATH) in
            // front of its loaders'.
            let mut chain = Vec::new();
            if info.runpath.is_none() {
                for raw in info.rpath.as_deref().unwrap_or_default().split(':') {
                    if let Some(dir) = expand_tokens(raw, &visit.origin, abi) {
                        chain.push(ChainDir { dir, raw: raw.to_string(), owner: visit.object.clone() });
                    }
                }
            }
            for inherited in &visit.chain {
                if !chain.iter().any(|c| c.dir == inherited.dir) {
                    chain.push(inherited.clone());
                }
            }
            let list = self.search_list(info, &visit.origin, abi, &visit.chain);
            for needed in &info.needed {
                // glibc expands dynamic string tokens in DT_NEEDED too
                // (`$ORIGIN/../lib/libpython3.12.so.1.0`).
                let name = if needed.contains('$') {
                    expand_string(needed, &visit.origin, abi)
                } else {
                    needed.clone()
                };
                if let Some(earlier) = names.get(&name) {
                    if info.runpath.is_some() && !is_driver_library(&name) {
                        let earlier = earlier.clone();
                        self.check_pinned(&visit.object, &name, abi, &list, &earlier);
                    }
                    continue;
                }
                let Some(hit) = self.resolve_needed(&visit, info, abi, &name, &list) else { continue };
                let l = Loaded {
                    real: hit.real.clone(),
                    found_at: hit.found_at.clone(),
                    by: visit.object.clone(),
                };
                remember(&mut names, self.elf_at(&hit.real), &name, &l);
                if loaded.insert(hit.real.clone()) {
                    let (origin, _) = split_parent(&hit.found_at);
                    queue.push_back(Visit {
                        object: hit.real,
                        origin: origin.to_string(),
                        chain: chain.clone(),
                        dlopened: visit.dlopened,
                    });
                }
            }
        }
        Load { root: root.to_string(), dlopened, objects, notes: std::mem::take(&mut self.notes) }
    }

    /// An object with a RUNPATH gets `name` from what an earlier object loaded: reports it when
    /// its RUNPATH pins another file.
    fn check_pinned(&mut self, object: &str, name: &str, abi: Abi, list: &[SearchDir], earlier: &Loaded) {
        if earlier.real == object {
            return;
        }
        let runpath: Vec<SearchDir> = list.iter().filter(|s| s.via == Via::Runpath).cloned().collect();
        let Some(pinned) = runpath.iter().find_map(|s| self.lookup(s, name, abi)) else { return };
        if !pinned.elf || pinned.real == earlier.real {
            return;
        }
        let (dir, _) = split_parent(&earlier.found_at);
        let from = SearchDir { dir: dir.to_string(), via: Via::Loaded(earlier.by.clone()), raw: None };
        let first = Hit { found_at: earlier.found_at.clone(), real: earlier.real.clone(), from, elf: true };
        self.shadowed(object, name, &first, &pinned);
    }

    /// Resolves one `DT_NEEDED` of `object`; returns the ELF file to descend into.
    fn resolve_needed(
        &mut self,
        visit: &Visit,
        info: &ElfInfo,
        abi: Abi,
        name: &str,
        list: &[SearchDir],
    ) -> Option<Hit> {
        let object = visit.object.as_str();
        let compat = abi.class64 != self.arch.native.class64;
        if name.contains('/') {
            // A path: used as is, relative to the working directory if relative.
            if !name.starts_with('/') {
                self.warn(
                    FindingKind::Unchecked,
                    object,
                    Some(name),
                    "needs a library by relative path (relative to the working directory)".into(),
                );
                return None;
            }
            let (dir, base) = split_parent(name);
            let search = SearchDir { dir: dir.to_string(), via: Via::Path, raw: None };
            return match self.lookup(&search, base, abi) {
                None => {
                    self.unresolved(object, name, compat, format!("{name} not found"));
                    None
                }
                Some(hit) if !hit.elf => {
                    let message =
                        format!("{name} is not an ELF object (ld.so stops with \"invalid ELF header\")");
                    self.unresolved(object, name, compat, message);
                    None
                }
                hit => hit,
            };
        }
        let mut hits: Vec<Hit> = Vec::new();
        for search in list {
            if let Some(hit) = self.lookup(search, name, abi) {
                if !hits.iter().any(|h| h.real == hit.real) {
                    hits.push(hit);
                }
                // Only an object with a RUNPATH can have its pinned copy shadowed, and only by
                // LD_LIBRARY_PATH, which comes before the RUNPATH: look further only then.
                if info.runpath.is_none() || search.via != Via::LdLibraryPath {
                    break;
                }
            }
        }
        let first = hits.first().cloned();
        if is_driver_library(name) {
            self.host_provided.entry(name.to_string()).or_default().insert(object.to_string());
            if let Some(hit) = &first {
                self.driver_copy(hit, Some(object));
            }
            return None;
        }
        let Some(first) = first else {
            let searched = Self::describe_search(list);
            let elsewhere = self.by_name.get(&(name.to_string(), abi.machine, abi.class64));
            match elsewhere.and_then(|paths| paths.first()).filter(|_| visit.dlopened) {
                // Loaded by dlopen into a process that may have loaded that copy already: the
                // loader then matches it by name without searching (`_dl_map_object`).
                Some(path) => {
                    let message = format!(
                        "{name} is not on the search path (searched {searched}) but the image has \
                         {path}; nothing in the image links to this object, so it loads only if \
                         that copy is already loaded when it is dlopen'ed"
                    );
                    self.warn(FindingKind::Unresolved, object, Some(name), message);
                }
                None => {
                    self.unresolved(object, name, compat, format!("{name} not found (searched {searched})"));
                }
            }
            return None;
        };
        if !first.elf {
            self.unresolved(
                object,
                name,
                compat,
                format!(
                    "{name} is {}, which is not an ELF object (ld.so stops with \"invalid ELF header\")",
                    Self::describe_file(&first)
                ),
            );
            return None;
        }
        if first.from.via == Via::LdLibraryPath {
            if let Some(pinned) = hits.iter().find(|h| h.from.via == Via::Runpath) {
                self.shadowed(object, name, &first, pinned);
            }
        }
        Some(first)
    }

    fn unresolved(&mut self, object: &str, name: &str, compat: bool, message: String) {
        if compat {
            self.warn(FindingKind::Unresolved, object, Some(name), format!("{message} (32-bit object)"));
        } else {
            self.error(FindingKind::Unresolved, object, Some(name), message);
        }
    }

    /// `path -> real (version V, via X)` for messages.
    fn describe_file(hit: &Hit) -> String {
        let shown = lexical_clean(&hit.found_at);
        let mut s = shown.clone();
        if hit.real != shown {
            let _ = write!(s, " -> {}", hit.real);
        }
        let version = file_version(&hit.real).or_else(|| file_version(&hit.found_at));
        match version {
            Some(v) => {
                let _ = write!(s, " (version {v}, via {})", hit.from.describe());
            }
            None => {
                let _ = write!(s, " (unversioned, via {})", hit.from.describe());
            }
        }
        s
    }

    fn shadowed(&mut self, object: &str, name: &str, first: &Hit, pinned: &Hit) {
        let file = |h: &Hit| match self.fs.resolve(&h.real) {
            Some((_, Kind::File(f))) => Some(std::ptr::from_ref::<FileInfo>(f)),
            _ => None,
        };
        // Two hardlinks of one file (as a layer stores them) are the same library.
        if file(first).is_some() && file(first) == file(pinned) {
            return;
        }
        let version =
            |h: &Hit| file_version(&h.real).or_else(|| file_version(&h.found_at)).map(str::to_string);
        let message = format!(
            "{name} resolves to {} instead of {} that its RUNPATH pins",
            Self::describe_file(first),
            Self::describe_file(pinned)
        );
        // Equal full versions (`8.9.2` in both names, not just the soname's `8`): most likely
        // two copies of one release.
        let same_release =
            version(first).is_some_and(|v| v.contains('.')) && version(first) == version(pinned);
        if same_release {
            self.warn(FindingKind::Shadowed, object, Some(name), format!("{message} (same version)"));
        } else {
            self.error(FindingKind::Shadowed, object, Some(name), message);
        }
    }

    /// Reports an in-image copy of a driver library that the loader can reach.
    fn driver_copy(&mut self, hit: &Hit, needed_by: Option<&str>) {
        let (_, base) = split_parent(&hit.found_at);
        let by = needed_by.map(|o| format!(", needed by {o},")).unwrap_or_default();
        if is_libcuda(base) {
            // Each root that reaches it records it; the report keeps the first message.
            let what = if hit.found_at.split('/').any(|c| c == "stubs")
                || hit.real.split('/').any(|c| c == "stubs")
            {
                "a libcuda stub"
            } else {
                "a copy of libcuda"
            };
            let message = format!(
                "{what}{by} is reachable via {} ({}): the host's driver provides libcuda, and a \
                 copy loaded instead makes CUDA report \"CUDA driver version is insufficient\"",
                hit.from.describe(),
                hit.found_at
            );
            self.error(FindingKind::Stub, &hit.real, Some(base), message);
        } else {
            let message = format!(
                "host driver library{by} inside the image, reachable via {} ({}): a copy that does \
                 not match the host's driver fails (NVML: \"Driver/library version mismatch\")",
                hit.from.describe(),
                hit.found_at
            );
            self.warn(FindingKind::DriverLibrary, &hit.real, Some(base), message);
        }
    }

    /// Reports driver libraries (and libcuda stubs) in the directories every object searches.
    fn scan_global_dirs(&mut self) {
        let mut searches: Vec<SearchDir> = Vec::new();
        for dir in &self.ld_library_path {
            searches.push(SearchDir { dir: dir.clone(), via: Via::LdLibraryPath, raw: None });
        }
        for dir in &self.conf_dirs {
            searches.push(SearchDir { dir: dir.clone(), via: Via::LdSoConf, raw: None });
        }
        for dir in Self::default_dirs(self.arch.native) {
            searches.push(SearchDir { dir, via: Via::Default, raw: None });
        }
        let mut done = HashSet::new();
        for search in searches {
            let Some(real_dir) = self.canonical_dir(&search.dir) else { continue };
            if !done.insert(real_dir.clone()) {
                continue;
            }
            let names: Vec<String> = self
                .fs
                .children(&real_dir)
                .into_iter()
                .filter(|n| is_driver_library(n))
                .map(str::to_string)
                .collect();
            for name in names {
                if let Some((real, Kind::File(_))) = self.fs.resolve(&join(&real_dir, &name)) {
                    let hit =
                        Hit { found_at: join(&search.dir, &name), real, from: search.clone(), elf: true };
                    self.driver_copy(&hit, None);
                }
            }
        }
    }

    /// Checks the program interpreter of an executable.
    fn check_interp(&mut self, object: &str, interp: &str, abi: Abi) {
        let ok = match self.fs.resolve(interp) {
            Some((_, Kind::File(f))) => match &f.elf {
                ElfState::Elf(e) => e.machine == abi.machine && e.class64 == abi.class64,
                ElfState::Invalid(_) => true,
                ElfState::NotElf => false,
            },
            _ => false,
        };
        if !ok {
            let compat = abi.class64 != self.arch.native.class64;
            self.unresolved(
                object,
                interp,
                compat,
                format!("program interpreter {interp} not found (or not an ELF file of this machine)"),
            );
        }
    }

    /// Runs the audit over every ELF file; returns how many were read.
    fn audit(&mut self) -> usize {
        self.scan_global_dirs();
        let mut scanned = 0;
        let mut executables = Vec::new();
        let mut libraries = Vec::new();
        let fs = self.fs;
        for (path, file) in fs.files() {
            if is_ignored(path) {
                scanned += usize::from(!matches!(file.elf, ElfState::NotElf));
                continue;
            }
            let info = match &file.elf {
                ElfState::NotElf => continue,
                ElfState::Invalid(why) => {
                    scanned += 1;
                    self.warn(FindingKind::BadElf, path, None, format!("unparsable ELF file: {why}"));
                    continue;
                }
                ElfState::Elf(info) => info,
            };
            scanned += 1;
            if !info.is_loadable() || DEVICE_MACHINES.contains(&info.machine) {
                continue;
            }
            let Some(abi) = self.arch.abi_of(info) else {
                let bits = if info.class64 { 64 } else { 32 };
                self.error(
                    FindingKind::Machine,
                    path,
                    None,
                    format!(
                        "{bits}-bit {} object in a {} image (which runs {})",
                        machine_name(info.machine),
                        self.platform,
                        self.arch.describe()
                    ),
                );
                continue;
            };
            if abi.class64 != self.arch.native.class64 {
                self.warn(
                    FindingKind::Elf32,
                    path,
                    None,
                    format!(
                        "32-bit {} object in a 64-bit image: it needs the 32-bit loader and libraries",
                        machine_name(info.machine)
                    ),
                );
            }
            let (_, base) = split_parent(path);
            for name in info.soname.iter().map(String::as_str).chain([base]) {
                let paths = self.by_name.entry((name.to_string(), abi.machine, abi.class64)).or_default();
                if !paths.iter().any(|p| p == path) {
                    paths.push(path.to_string());
                }
            }
            if let Some(interp) = &info.interp {
                self.check_interp(path, interp, abi);
                executables.push(path.to_string());
            } else {
                libraries.push(path.to_string());
            }
        }
        self.global.append(&mut self.notes);
        // Every executable, as the process it starts.
        let mut by_executables = HashSet::new();
        for path in executables {
            let load = self.load(&path, false);
            by_executables.extend(load.objects.iter().cloned());
            self.loads.push(load);
        }
        // Then every library that none of them loads, as if dlopen'ed on its own; the roots are
        // those that no other of them loads either (plugins, Python extension modules).
        let candidates: Vec<Load> =
            libraries.iter().filter(|p| !by_executables.contains(*p)).map(|p| self.load(p, true)).collect();
        let is_root = Self::dlopen_roots(&candidates);
        self.loads
            .extend(candidates.into_iter().zip(is_root).filter_map(|(load, root)| root.then_some(load)));
        scanned
    }

    /// Which of `candidates` (each loaded on its own) are roots: those no other one loads, then,
    /// in order, the first of each group that only loads each other (a dependency cycle).
    fn dlopen_roots(candidates: &[Load]) -> Vec<bool> {
        let loaded: HashSet<&str> = candidates
            .iter()
            .flat_map(|l| l.objects.iter().filter(move |o| **o != l.root).map(String::as_str))
            .collect();
        let mut is_root: Vec<bool> = candidates.iter().map(|l| !loaded.contains(l.root.as_str())).collect();
        let mut covered: HashSet<&str> = HashSet::new();
        for (load, _) in candidates.iter().zip(&is_root).filter(|(_, root)| **root) {
            covered.extend(load.objects.iter().map(String::as_str));
        }
        for (load, root) in candidates.iter().zip(&mut is_root) {
            if !covered.contains(load.root.as_str()) {
                *root = true;
                covered.extend(load.objects.iter().map(String::as_str));
            }
        }
        is_root
    }

    /// The directories every object searches (`LD_LIBRARY_PATH`, `ld.so.conf`, the default
    /// directories), resolved.
    fn search_path_dirs(&mut self) -> HashSet<String> {
        let mut dirs: Vec<String> = self.ld_library_path.clone();
        dirs.extend(self.conf_dirs.iter().cloned());
        for abi in [Some(self.arch.native), self.arch.compat].into_iter().flatten() {
            dirs.extend(Self::default_dirs(abi));
        }
        dirs.iter().filter_map(|d| self.canonical_dir(d)).collect()
    }

    /// For each of [`Auditor::loads`], why the unresolved libraries in its closure are only
    /// warnings, if they are: the root is an alternative build of a library another build of
    /// which resolves, or a plugin (see the module documentation).
    fn excuses(&mut self) -> Vec<Option<String>> {
        let search_path = self.search_path_dirs();
        let loads = &self.loads;
        let resolves = |l: &Load| {
            !l.notes
                .iter()
                .any(|n| n.severity == Severity::Error && n.finding.kind == FindingKind::Unresolved)
        };
        let mut excuses: Vec<Option<String>> = vec![None; loads.len()];

        // Alternative builds: dlopen roots by directory and name without digits.
        let mut families: BTreeMap<(&str, String), Vec<usize>> = BTreeMap::new();
        for (i, load) in loads.iter().enumerate().filter(|(_, l)| l.dlopened) {
            let (dir, name) = split_parent(&load.root);
            families.entry((dir, family_name(name))).or_default().push(i);
        }
        for members in families.values().filter(|m| m.len() >= 2) {
            let Some(&good) = members.iter().find(|&&i| resolves(&loads[i])) else { continue };
            let (_, good_name) = split_parent(&loads[good].root);
            for &i in members.iter().filter(|&&i| !resolves(&loads[i])) {
                excuses[i] = Some(format!("an alternative build; {good_name} in the same directory does"));
            }
        }

        // Plugins: directories of dlopen roots that nothing links into, except from inside.
        let mut linked_into: HashSet<&str> = HashSet::new();
        for load in loads {
            let (root_dir, _) = split_parent(&load.root);
            for object in load.objects.iter().filter(|o| **o != load.root) {
                let (dir, _) = split_parent(object);
                if !load.dlopened || dir != root_dir {
                    linked_into.insert(dir);
                }
            }
        }
        for (load, excuse) in loads.iter().zip(&mut excuses) {
            let (dir, _) = split_parent(&load.root);
            if excuse.is_none()
                && load.dlopened
                && !is_python_module(&load.root)
                && !search_path.contains(dir)
                && !linked_into.contains(dir)
            {
                *excuse = Some(PLUGIN_EXCUSE.to_string());
            }
        }
        excuses
    }

    /// The report: the findings of every root, where an unresolved library is an error unless
    /// every root that reaches it excuses it ([`Auditor::excuses`]), and each finding is kept
    /// once, with the message of its first recording at its final severity.
    fn report(mut self, objects_scanned: usize, started: Instant) -> AuditReport {
        let excuses = self.excuses();
        let recorded = std::mem::take(&mut self.loads).into_iter().zip(excuses).flat_map(|(load, excuse)| {
            load.notes.into_iter().map(move |mut note| {
                if let Some(excuse) = &excuse {
                    if note.severity == Severity::Error && note.finding.kind == FindingKind::Unresolved {
                        note.severity = Severity::Warning;
                        let _ = write!(note.finding.message, " ({excuse})");
                    }
                }
                note
            })
        });
        let mut merged: BTreeMap<(FindingKind, String, Option<String>), Noted> = BTreeMap::new();
        for note in std::mem::take(&mut self.global).into_iter().chain(recorded) {
            let f = &note.finding;
            // A stub is reported once, under the name that reached it first.
            let soname = if f.kind == FindingKind::Stub { None } else { f.soname.clone() };
            let key = (f.kind, f.path.clone(), soname);
            match merged.entry(key) {
                Entry::Vacant(e) => {
                    e.insert(note);
                }
                Entry::Occupied(mut e) => {
                    if note.severity > e.get().severity {
                        e.insert(note);
                    }
                }
            }
        }
        let (errors, warnings): (Vec<Noted>, Vec<Noted>) =
            merged.into_values().partition(|n| n.severity == Severity::Error);
        AuditReport {
            objects_scanned,
            elapsed: started.elapsed(),
            errors: errors.into_iter().map(|n| n.finding).collect(),
            warnings: warnings.into_iter().map(|n| n.finding).collect(),
            host_provided: self
                .host_provided
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect(),
        }
    }
}

/// Whether `path` is an ELF file that `ld.so` never loads: firmware for other processors
/// (`/lib/firmware`) and separate debug info (`/usr/lib/debug`, whose program headers point at
/// sections stripped from the file).
fn is_ignored(path: &str) -> bool {
    ["/lib/firmware/", "/usr/lib/firmware/", "/usr/lib/debug/"].iter().any(|p| path.starts_with(p))
}

#[cfg(test)]
/// Audits the unpacked root filesystem `root` of an image whose environment is `env`
/// (`NAME=value`, for `LD_LIBRARY_PATH`) and platform is `platform` (`linux/amd64`,
/// `linux/arm64`, ...). Symlinks under `root` are resolved inside it, never on the host.
pub(crate) fn audit_dir(root: &Path, env: &[String], platform: &str) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    // Check the platform before the (possibly long) walk.
    parse_platform(platform).ok_or_else(|| AuditError::Platform(platform.to_string()))?;
    let fs = RootFs::from_dir(root)?;
    let mut auditor = Auditor::new(&fs, env, platform)?;
    let scanned = auditor.audit();
    Ok(auditor.report(scanned, started))
}

/// Audits the image tagged `tag` (`None`: the only image) of the OCI layout `layout_dir`, with
/// the environment and architecture of its config. Layers are streamed (gzip, zstd or plain)
/// on parallel threads and never extracted: only ELF files and `ld.so.conf` files are read, an
/// ELF file above 64 MiB through an anonymous temporary file. Layer digests are not re-hashed
/// ([`stackbuild_image::verify_layout_blob`] does that).
pub fn audit_layout(layout_dir: &Path, tag: Option<&str>) -> Result<AuditReport, AuditError> {
    audit_layout_with(layout_dir, tag, None, fs::SPOOL_ABOVE, None)
}

#[cfg(test)]
/// [`audit_layout`] of one platform's image of a multi-platform `tag` (`None`: the only image),
/// keeping what it reads of each layer in `layer_cache` by layer digest, so that the audit of an
/// image that shares layers with one audited before reads only its new layers (a changed pin
/// rebuilds one layer of seven; reading the others again costs most of the audit).
pub(crate) fn audit_layout_cached(
    layout_dir: &Path,
    tag: Option<&str>,
    platform: Option<&stackbuild_image::Platform>,
    layer_cache: &Path,
) -> Result<AuditReport, AuditError> {
    audit_layout_with(layout_dir, tag, platform, fs::SPOOL_ABOVE, Some(layer_cache))
}

/// The version of the cached layer reading ([`fs::Op`] as JSON): bump it when `Op` or what
/// `fs::read_layer` records changes.
const LAYER_CACHE_FORMAT: u32 = 1;

/// A layer's changes from `cache` (by digest), else read from its blob and stored there. The
/// cache is only an accelerator: an entry that does not parse is read again and replaced.
fn layer_ops(layer: &stackbuild_common::LayerBlob, spool_above: u64, cache: Option<&Path>) -> LayerResult {
    let entry = cache.and_then(|dir| layer_cache_entry(dir, &layer.digest));
    if let Some(ops) = entry
        .as_ref()
        .and_then(|path| std::fs::read(path).ok())
        .and_then(|bytes| serde_json::from_slice::<Vec<fs::Op>>(&bytes).ok())
    {
        return Ok(ops);
    }
    let ops = fs::read_layer(&layer.path, &layer.media_type, spool_above).map_err(|source| {
        AuditError::Layer { digest: layer.digest.clone(), source: io_err("reading", &layer.path)(source) }
    })?;
    if let Some(path) = &entry {
        store_layer_ops(path, &layer.digest, &ops);
    }
    Ok(ops)
}

/// Where the changes of the layer `digest` are kept in the layer cache `dir`.
fn layer_cache_entry(dir: &Path, digest: &str) -> Option<PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(dir.join(format!("v{LAYER_CACHE_FORMAT}-{hex}.json")))
}

/// Keeps a layer's changes at `path`; failing only costs reading the layer again later.
fn store_layer_ops(path: &Path, digest: &str, ops: &[fs::Op]) {
    let stored = serde_json::to_vec(ops).map_err(io::Error::other).and_then(|json| {
        path.parent().map_or(Ok(()), std::fs::create_dir_all)?;
        stackbuild_cache::write_atomic(path, &json)
    });
    if let Err(e) = stored {
        tracing::debug!("not caching the audit of layer {digest}: {e}");
    }
}

/// The changes of one layer, as a worker thread read them.
type LayerResult = Result<Vec<fs::Op>, AuditError>;

fn audit_layout_with(
    layout_dir: &Path,
    tag: Option<&str>,
    platform: Option<&stackbuild_image::Platform>,
    spool_above: u64,
    layer_cache: Option<&Path>,
) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    let image = stackbuild_image::read_layout_for(layout_dir, tag, platform)?;
    audit_layers(&image.config, &image.layers, spool_above, layer_cache, started)
}

/// [`audit_layout_cached`] of an image not written anywhere yet (its layers in the cache), so
/// that a build audits before it touches its output.
pub fn audit_image_cached(
    image: &stackbuild_image::Image,
    layer_cache: &Path,
) -> Result<AuditReport, AuditError> {
    audit_layers(image.config(), image.layers(), fs::SPOOL_ABOVE, Some(layer_cache), Instant::now())
}

fn audit_layers(
    config: &stackbuild_image::ImageConfig,
    layers: &[stackbuild_common::LayerBlob],
    spool_above: u64,
    layer_cache: Option<&Path>,
    started: Instant,
) -> Result<AuditReport, AuditError> {
    let platform = if config.os.is_empty() {
        config.architecture.clone()
    } else {
        format!("{}/{}", config.os, config.architecture)
    };
    parse_platform(&platform).ok_or_else(|| AuditError::Platform(platform.clone()))?;
    let results: Vec<Mutex<Option<LayerResult>>> = layers.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, usize::from).min(layers.len()).max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(layer) = layers.get(i) else { break };
                let result = layer_ops(layer, spool_above, layer_cache);
                *results[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            });
        }
    });
    let mut rootfs = RootFs::default();
    for (i, slot) in results.into_iter().enumerate() {
        let ops = slot.into_inner().unwrap_or_else(PoisonError::into_inner).unwrap_or_else(|| {
            Err(AuditError::Io(IoError {
                op: "reading layer",
                path: layers[i].path.clone(),
                source: io::Error::other("worker did not finish"),
            }))
        })?;
        rootfs.apply(ops, i + 1);
    }
    let mut auditor = Auditor::new(&rootfs, &config.config.env, &platform)?;
    let scanned = auditor.audit();
    Ok(auditor.report(scanned, started))
}

#[cfg(test)]
mod tests;
