//! The dynamic loader's rules as the audit applies them: the ABI a platform names, the search
//! directories and their order, `$ORIGIN`-style tokens, and the glob of `ld.so.conf` includes.

use super::elf::ElfInfo;
use super::fs::split_parent;
use super::report::Finding;
use goblin::elf::header::{machine_to_str, EM_386, EM_AARCH64, EM_AMDGPU, EM_ARM, EM_BPF, EM_CUDA};
use goblin::elf::header::{EM_PPC64, EM_RISCV, EM_S390, EM_X86_64};
use std::collections::HashSet;

/// The ABI of one kind of object of a platform.
#[derive(Clone, Copy, Debug)]
pub(super) struct Abi {
    pub(super) machine: u16,
    pub(super) class64: bool,
    /// Debian's multiarch triplet (`/usr/lib/<triplet>`).
    pub(super) triplet: &'static str,
    /// `AT_PLATFORM`, what `$PLATFORM` expands to.
    pub(super) platform: &'static str,
}

/// A platform: its native ABI and the 32-bit ABI its kernel may also run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arch {
    pub(super) native: Abi,
    pub(super) compat: Option<Abi>,
}

pub(super) const fn abi(machine: u16, class64: bool, triplet: &'static str, platform: &'static str) -> Abi {
    Abi { machine, class64, triplet, platform }
}

/// Parses `linux/amd64`, `amd64`, `linux/arm64/v8`, `x86_64`, ... (Go's and the kernel's
/// spellings).
pub(super) fn parse_platform(platform: &str) -> Option<Arch> {
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
    pub(super) fn describe(&self) -> String {
        let one = |a: Abi| format!("{}-bit {}", if a.class64 { 64 } else { 32 }, machine_name(a.machine));
        match self.compat {
            Some(c) => format!("{} and {} objects", one(self.native), one(c)),
            None => format!("{} objects", one(self.native)),
        }
    }

    /// The ABI of `info` if the platform runs it; `None` for a foreign object.
    pub(super) fn abi_of(&self, info: &ElfInfo) -> Option<Abi> {
        [Some(self.native), self.compat]
            .into_iter()
            .flatten()
            .find(|a| a.machine == info.machine && a.class64 == info.class64)
    }
}

/// The name of an ELF machine for messages (`x86_64`, `aarch64`, ...).
pub(super) fn machine_name(machine: u16) -> String {
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
pub(super) const DEVICE_MACHINES: [u16; 3] = [EM_CUDA, EM_AMDGPU, EM_BPF];

/// Libraries of the NVIDIA driver that the container toolkit mounts from the host, by name
/// before `.so` (libnvidia-container `src/nvc_info.c`, which also lists every `libnvidia-*`).
pub(super) const DRIVER_LIBRARIES: [&str; 9] = [
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
pub(super) fn is_driver_library(name: &str) -> bool {
    let Some((stem, _)) = name.split_once(".so") else { return false };
    DRIVER_LIBRARIES.contains(&stem) || stem.starts_with("libnvidia-")
}

/// Whether `name` is `libcuda.so` or `libcuda.so.*`.
pub(super) fn is_libcuda(name: &str) -> bool {
    name == "libcuda.so" || name.starts_with("libcuda.so.")
}

/// The version in a library's file name (`8.9.7` for `libcudnn.so.8.9.7`).
pub(super) fn file_version(path: &str) -> Option<&str> {
    let (_, name) = split_parent(path);
    name.split_once(".so.").map(|(_, v)| v).filter(|v| !v.is_empty())
}

/// `path` with `.` and `..` removed lexically, for messages only (the loader takes `..` after
/// symlinks, which [`RootFs::resolve`] does).
pub(super) fn lexical_clean(path: &str) -> String {
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
pub(super) enum Via {
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
pub(super) struct SearchDir {
    pub(super) dir: String,
    pub(super) via: Via,
    /// The unexpanded `RPATH`/`RUNPATH` entry, for messages.
    pub(super) raw: Option<String>,
}

impl SearchDir {
    pub(super) fn describe(&self) -> String {
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
pub(super) struct ChainDir {
    pub(super) dir: String,
    pub(super) raw: String,
    pub(super) owner: String,
}

/// A file a search found.
#[derive(Clone, Debug)]
pub(super) struct Hit {
    /// `dir/name` as the loader opened it.
    pub(super) found_at: String,
    /// The file after symlinks.
    pub(super) real: String,
    /// The search directory.
    pub(super) from: SearchDir,
    /// Whether it is an ELF file (else the loader stops with `invalid ELF header`).
    pub(super) elf: bool,
}

/// An object already loaded into the simulated process.
#[derive(Clone, Debug)]
pub(super) struct Loaded {
    /// Its real path.
    pub(super) real: String,
    /// Where it was found.
    pub(super) found_at: String,
    /// The object that needed it first.
    pub(super) by: String,
}

/// An object to resolve the dependencies of, in one loading context.
pub(super) struct Visit {
    /// Its real path.
    pub(super) object: String,
    /// The directory it was found in (`$ORIGIN`).
    pub(super) origin: String,
    /// `DT_RPATH` directories of its loaders, nearest first.
    pub(super) chain: Vec<ChainDir>,
    /// Whether nothing in the image links to the root of this loading chain (a plugin or a
    /// Python extension module, loaded with `dlopen` by a process that has already loaded
    /// other libraries).
    pub(super) dlopened: bool,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Severity {
    Warning,
    Error,
}

/// A finding as recorded, before [`Auditor::report`] applies the policy of the roots it was
/// reached from.
#[derive(Clone, Debug)]
pub(super) struct Noted {
    pub(super) severity: Severity,
    pub(super) finding: Finding,
}

/// What loading one root (an executable, or a library that nothing else loads) found.
#[derive(Debug)]
pub(super) struct Load {
    /// The real path of the root.
    pub(super) root: String,
    /// Whether the root is loaded with `dlopen` (else it is an executable).
    pub(super) dlopened: bool,
    /// Real paths of the objects whose dependencies were resolved, the root included.
    pub(super) objects: HashSet<String>,
    /// What resolving them found.
    pub(super) notes: Vec<Noted>,
}

/// Why the unresolved errors in the closure of a plugin root are only warnings.
pub(super) const PLUGIN_EXCUSE: &str = "a plugin nothing in the image links to; loaded only on demand";

/// Libraries in Python packages that their package loads only when the host has what they
/// need, by path suffix, with why and the public source. Knowledge the files do not carry:
/// nothing links to them, but the library that `dlopen`s them sits beside them.
pub(super) const OPTIONAL_LIBRARIES: [(&str, &str); 1] = [(
    "/nvidia/cufile/lib/libcufile_rdma.so.1",
    "cuFile's RDMA plugin, which libcufile loads only on hosts with InfiniBand verbs for GPUDirect Storage \
     over RDMA; cuFile works without it (NVIDIA GPUDirect Storage troubleshooting guide, \
     https://docs.nvidia.com/gpudirect-storage/troubleshooting-guide/)",
)];

/// Why the unresolved errors in the closure of a Qt plugin are only warnings.
pub(super) const QT_PLUGIN_EXCUSE: &str = "a Qt plugin (or QML module), which Qt loads on demand and skips \
     when its libraries are missing; a GUI that needs it says so at start (Qt's \"Deploying Plugins\", \
     https://doc.qt.io/qt-6/deployment-plugins.html)";

/// Whether `path` is a plugin or QML module of a Qt tree that a wheel carries
/// (`PyQt6/Qt6/plugins/platforms/libqxcb.so`, `PySide6/Qt/qml/...`, opencv-python's
/// `cv2/qt/plugins/...`): Qt finds them by directory, nothing links to them.
pub(super) fn is_qt_plugin(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.windows(2).any(|w| matches!(w[0], "Qt6" | "Qt5" | "Qt" | "qt") && matches!(w[1], "plugins" | "qml"))
}

/// Whether `path` is a Python extension module: in a directory of Python packages or the
/// standard library's `lib-dynload`, or named with a CPython/PyPy ABI tag (PEP 3149) or the
/// stable ABI's `.abi3.so`.
pub(super) fn is_python_module(path: &str) -> bool {
    let (_, name) = split_parent(path);
    path.split('/').any(|c| matches!(c, "site-packages" | "dist-packages" | "lib-dynload"))
        || name.contains(".cpython-")
        || name.contains(".pypy")
        || name.ends_with(".abi3.so")
}

/// The name of a file without its digits, which names a family of alternative builds
/// (`libbitsandbytes_cuda.so` for `libbitsandbytes_cuda118.so` and `..._cuda121.so`).
pub(super) fn family_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// Expands the dynamic string tokens of one `RPATH`/`RUNPATH` entry; `None` for entries that
/// are relative after expansion (relative to the process's working directory, unknowable here)
/// or empty.
pub(super) fn expand_tokens(entry: &str, origin: &str, abi: Abi) -> Option<String> {
    let out = expand_string(entry, origin, abi);
    out.starts_with('/').then_some(out)
}

/// Expands `$ORIGIN`, `$LIB` and `$PLATFORM` (braced or not) in `entry`, as glibc's
/// `_dl_dst_substitute` does for `RPATH`, `RUNPATH` and `DT_NEEDED` (`elf/dl-load.c`).
pub(super) fn expand_string(entry: &str, origin: &str, abi: Abi) -> String {
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
pub(super) fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
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
