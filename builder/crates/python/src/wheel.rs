//! Installs a wheel into a staging tree without running Python.
//!
//! This follows the binary distribution format (PEP 427,
//! <https://packaging.python.org/en/latest/specifications/binary-distribution-format/>) the way
//! installers that never start an interpreter do (uv's `uv-install-wheel`, pypa's `installer`):
//!
//! 1. the single `*.dist-info` directory is found, `WHEEL` is checked (`Wheel-Version` 1.x) and
//!    `Root-Is-Purelib` picks whether the archive root goes to purelib or platlib;
//! 2. every member is streamed to its place in the scheme (`<dist>.data/<key>/...` to the scheme
//!    directory named by `<key>`), its sha256 checked against the wheel's `RECORD` on the way;
//! 3. `#!python` shebangs of `.data/scripts` files are pointed at the image's interpreter, and
//!    launchers are generated for `console_scripts` / `gui_scripts` in `entry_points.txt`
//!    (<https://packaging.python.org/en/latest/specifications/entry-points/>);
//! 4. `INSTALLER` and a regenerated, sorted `RECORD` are written
//!    (<https://packaging.python.org/en/latest/specifications/recording-installed-packages/>).
//!
//! Byte-code is not compiled: `.pyc` files would embed source mtimes and make layers depend on the
//! build clock; Python writes them lazily (or not, on a read-only root) at run time.
//!
//! The wheel is untrusted input. Member names are validated before anything is written (no `..`,
//! no absolute names, no backslashes, no NUL or control characters), symlink members are refused,
//! files are created with `create_new` (which never follows a symlink, `O_CREAT | O_EXCL`) under
//! directories this module created itself or checked to be real directories, so nothing is ever
//! written outside the stage. These are the lessons of the archive-extraction advisories
//! (RUSTSEC-2018-0002 and RUSTSEC-2021-0080 for the `tar` crate, umoci CVE-2021-29136, containerd
//! CVE-2021-32760).
//!
//! With [`install_wheel_deferring`], large deflated members other than Python sources are not
//! written at all: they are recorded in a [`Deferred`] set, and the layer carries them straight
//! from the wheel as their own gzip members ([`stackbuild_common::zip_member`]), checked against `RECORD`
//! as the layer is written. Python sources are always staged, for byte-code compilation.
//!
//! On error the stage is left partly written; callers stage into a scratch directory and discard
//! it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{self, File, Permissions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::Digest;
use stackcontract::version::PythonVersion;
use zip::ZipArchive;

use stackbuild_common::ZipMember;
use stackbuild_common::{io_err, IoError};

mod formats;
mod output;
use self::formats::{
    csv_field, header, is_project_name, parse_entry_points, parse_headers, parse_record, urlsafe_b64,
    RecordRow,
};
use self::output::{HashingReader, HashingWriter, Output};

/// Largest metadata member (`WHEEL`, `METADATA`, `RECORD`, `entry_points.txt`) read into memory.
const METADATA_CAP: u64 = 64 << 20;
/// Most bytes a wheel may inflate to, all members together. The largest wheels of a GPU stack
/// (torch, the `nvidia-*` CUDA libraries) inflate to a few GiB each; a "zip bomb" is far larger.
pub(crate) const MAX_INFLATED_TOTAL: u64 = 32 << 30;
/// Most a wheel may inflate relative to its compressed members, all together, once it inflates
/// past [`RATIO_FLOOR`]. Deflate cannot exceed about 1032:1. One member can come near that
/// legitimately: a shared library whose segments are aligned with zero padding (pillow 13's
/// `libXau` is 2.1 MB from 9.4 kB, 223:1), so the ratio is taken over the whole wheel, where real
/// wheels stay far below it (torch about 3:1) and a wheel that is mostly one bomb member does not.
pub(crate) const MAX_RATIO: u64 = 200;
/// Wheels that inflate to at most this many bytes are exempt from [`MAX_RATIO`].
pub(crate) const RATIO_FLOOR: u64 = 64 << 20;
/// Most members a wheel may have (torch has about 15 000).
pub(crate) const MAX_MEMBERS: usize = 1_000_000;
/// Longest first line inspected for a `#!python` shebang.
const SHEBANG_CAP: u64 = 4096;
/// What `INSTALLER` says (<https://packaging.python.org/en/latest/specifications/recording-installed-packages/#the-installer-file>).
const INSTALLER: &str = "stackbuild";

/// Smallest member left in the wheel by [`install_wheel_deferring`]: below it, a member's own
/// gzip header and trailer and the end of the compression chunk before it cost more than
/// compressing it again saves.
pub const DEFER_MIN: u64 = 64 << 10;

/// How this installer lays a wheel out: the part of a Python layer's key that the installer
/// gives ([`InstallKey::current`]), beside the scheme and the wheels themselves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InstallKey {
    /// What every `INSTALLER` file says (`stackbuild`).
    pub installer: &'static str,
    /// The smallest deflated member [`install_wheel_deferring`] leaves in its wheel
    /// ([`DEFER_MIN`]): which members a gzip layer carries as the wheel's own deflate streams
    /// instead of compressing them again.
    pub defer_min: u64,
    /// The revision of the installer's code, which no setting captures: where each part of a
    /// wheel goes, the `RECORD` it writes, the launchers and shebangs, the modes. Raised by hand
    /// (`INSTALL_REVISION`) when the same wheel and scheme install to other bytes; nothing else
    /// is.
    pub revision: u32,
}

/// [`InstallKey::revision`].
const INSTALL_REVISION: u32 = 1;

impl InstallKey {
    /// This installer's.
    pub const fn current() -> Self {
        Self { installer: INSTALLER, defer_min: DEFER_MIN, revision: INSTALL_REVISION }
    }
}

/// Unix file type bits of a zip member's external attributes.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;
/// Why a link member is refused, naming the rule.
pub(crate) const SYMLINK_RULE: &str = "a symbolic link; a wheel holds regular files only (the binary \
     distribution format, PEP 427, defines no links), so no installer can apply it";

/// Where the parts of a wheel go in the image: absolute in-image paths. Part of a Python layer's
/// key: every field places files or is written into them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Scheme {
    /// Pure-Python modules (`Root-Is-Purelib: true` wheels and `.data/purelib`).
    pub purelib: String,
    /// Platform-specific modules (`Root-Is-Purelib: false` wheels and `.data/platlib`).
    pub platlib: String,
    /// Executables: `.data/scripts` and generated entry-point launchers.
    pub scripts: String,
    /// The prefix `.data/data` is laid over (`share/...` lands in `<data>/share/...`).
    pub data: String,
    /// C headers of `.data/headers`; `{name}` is replaced by the distribution's name.
    pub headers: String,
    /// Shebang target of scripts, e.g. `/usr/bin/python3`.
    pub interpreter: String,
}

impl Scheme {
    /// Debian's layout for `pip install` as root into the system interpreter: Debian patches
    /// `sysconfig` so that the `posix_local` scheme puts packages in
    /// `/usr/local/lib/python3.X/dist-packages` and scripts in `/usr/local/bin`, keeping
    /// `/usr/lib/python3/dist-packages` for its own packages.
    pub fn debian_local(python: &PythonVersion) -> Self {
        let py = format!("python{}.{}", python.part(0), python.part(1));
        let site_root = format!("/usr/local/lib/{py}/dist-packages");
        Self {
            purelib: site_root.clone(),
            platlib: site_root,
            scripts: "/usr/local/bin".to_owned(),
            data: "/usr/local".to_owned(),
            headers: format!("/usr/local/include/{py}/{{name}}"),
            interpreter: "/usr/bin/python3".to_owned(),
        }
    }
}

/// What [`install_wheel`] installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledWheel {
    /// The distribution name, as `METADATA` spells it.
    pub name: String,
    /// The version, as `METADATA` spells it.
    pub version: String,
    /// Files written, `INSTALLER`, `RECORD` and launchers included.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
    /// The directory holding the `.dist-info`, relative to the stage (no leading `/`), e.g.
    /// `usr/local/lib/python3.11/dist-packages`.
    pub site_packages_rel: String,
    /// Top-level names installed in that directory (packages, modules, `.libs` directories), the
    /// `.dist-info` directory excluded; sorted.
    pub top_level: Vec<String>,
}

/// Why a wheel could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    /// Reading the wheel or writing the stage failed.
    #[error("wheel {}: {source}", wheel.display())]
    Io {
        /// The wheel file.
        wheel: PathBuf,
        /// What failed, on the wheel or on the file being written.
        #[source]
        source: IoError,
    },
    /// The archive is not a readable zip file, or a member could not be opened.
    #[error("wheel {}: {what}: {source}", wheel.display())]
    Zip {
        /// The wheel file.
        wheel: PathBuf,
        /// What was being read.
        what: String,
        /// The underlying error.
        #[source]
        source: zip::result::ZipError,
    },
    /// A member's data could not be read (corrupt compressed data, bad CRC).
    #[error("wheel {}: reading entry {entry:?}: {source}", wheel.display())]
    ReadEntry {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name.
        entry: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A member whose name or type could write outside its place.
    #[error("wheel {}: unsafe entry {entry:?}: {reason}", wheel.display())]
    UnsafeEntry {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name, as stored.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The archive does not have the structure of a wheel.
    #[error("wheel {}: {problem}", wheel.display())]
    Layout {
        /// The wheel file.
        wheel: PathBuf,
        /// What is missing or ambiguous.
        problem: String,
    },
    /// `WHEEL` declares a format version this installer does not know.
    #[error("wheel {}: unsupported Wheel-Version {version:?} (only 1.x is supported)", wheel.display())]
    UnsupportedVersion {
        /// The wheel file.
        wheel: PathBuf,
        /// The declared version.
        version: String,
    },
    /// A metadata file (`WHEEL`, `METADATA`, `RECORD`, `entry_points.txt`) is malformed.
    #[error("wheel {}: {file}: {problem}", wheel.display())]
    Metadata {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name of the metadata file.
        file: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A member is not covered by `RECORD`, so its content cannot be verified.
    #[error("wheel {}: entry {entry:?} has no sha256 in RECORD", wheel.display())]
    NotInRecord {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name.
        entry: String,
    },
    /// `RECORD` lists a file the archive does not contain.
    #[error("wheel {}: RECORD lists {entry:?}, which the wheel does not contain", wheel.display())]
    MissingFromWheel {
        /// The wheel file.
        wheel: PathBuf,
        /// The path listed in `RECORD`.
        entry: String,
    },
    /// A member's content does not match its `RECORD` hash.
    #[error("wheel {}: entry {entry:?} has sha256={actual}, RECORD says sha256={expected}", wheel.display())]
    HashMismatch {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name.
        entry: String,
        /// The hash from `RECORD` (urlsafe base64, no padding).
        expected: String,
        /// The hash of the content.
        actual: String,
    },
    /// A member's size does not match its `RECORD` size.
    #[error("wheel {}: entry {entry:?} is {actual} bytes, RECORD says {expected}", wheel.display())]
    SizeMismatch {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name.
        entry: String,
        /// The size from `RECORD`.
        expected: u64,
        /// The bytes read (at most one more than expected: reading stops there).
        actual: u64,
    },
    /// Something already occupies the destination of a file.
    #[error("wheel {}: {entry:?} would be installed at /{dest}, which {problem}", wheel.display())]
    Conflict {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name (or `console_scripts:<name>` for a launcher).
        entry: String,
        /// The in-image destination, without the leading `/`.
        dest: String,
        /// What is in the way.
        problem: String,
    },
    /// The wheel is not a readable regular file.
    #[error(transparent)]
    Input(#[from] stackbuild_common::InputError),
    /// A member is declared (or found) to inflate beyond the caps: a decompression bomb.
    #[error("wheel {}: entry {entry:?}: {problem}", wheel.display())]
    Bomb {
        /// The wheel file.
        wheel: PathBuf,
        /// The member name (`*` for the whole wheel).
        entry: String,
        /// Which cap it exceeds.
        problem: String,
    },
    /// Two members have the same name: which one an installer takes differs between tools.
    #[error("wheel {}: {problem}; a wheel must not hold two members with one name", wheel.display())]
    Duplicate {
        /// The wheel file.
        wheel: PathBuf,
        /// Which name, or how many.
        problem: String,
    },
    /// The wheel's metadata names another project or version than the lock pins.
    #[error(
        "wheel {}: its METADATA says {found}, but the lock pins {expected}; the file is not the \
         package it claims to be",
        wheel.display()
    )]
    NotThePin {
        /// The wheel file.
        wheel: PathBuf,
        /// `name version` from the lock.
        expected: String,
        /// `Name Version` from `METADATA` (or the `.dist-info` directory).
        found: String,
    },
    /// A scheme path is not a clean absolute path.
    #[error("scheme {field} {path:?}: {problem}")]
    Scheme {
        /// The scheme field.
        field: &'static str,
        /// Its value.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// The large members of the wheels installed into one stage that were left in their wheels:
/// in-image path (no leading `/`) -> the member and its mode. A later wheel's file replaces an
/// earlier wheel's, staged or deferred, as pip replaces it.
#[derive(Debug, Default)]
pub struct Deferred {
    members: BTreeMap<String, (ZipMember, u32)>,
}

impl Deferred {
    /// The members, by in-image path.
    pub fn into_members(self) -> impl Iterator<Item = (String, ZipMember, u32)> {
        self.members.into_iter().map(|(path, (member, mode))| (path, member, mode))
    }

    /// How many members are deferred.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

#[cfg(test)]
/// Installs `wheel` into `stage` (the root of the future layer) at the places `scheme` names.
///
/// See the module documentation for what is checked and written.
pub(crate) fn install_wheel(
    wheel: &Path,
    scheme: &Scheme,
    stage: &Path,
) -> Result<InstalledWheel, WheelError> {
    Installer::open(wheel, scheme, stage)?.run(None, None)
}

/// [`install_wheel`] of a wheel that must be project `name` at `version` (what the lock pins):
/// a wheel whose `METADATA` or `.dist-info` names another project (compared as PEP 503
/// normalized names) or another version (compared as PEP 440 versions) is refused before
/// anything is written, so that an image never holds one package under another's name.
pub fn install_wheel_as(
    wheel: &Path,
    scheme: &Scheme,
    stage: &Path,
    name: &str,
    version: &str,
) -> Result<InstalledWheel, WheelError> {
    Installer::open(wheel, scheme, stage)?.run(Some((name, version)), None)
}

/// [`install_wheel_as`], leaving every deflated member of at least [`DEFER_MIN`] bytes that is
/// not a Python source or a script in the wheel, recorded in `deferred` for the layer writer.
/// Nothing of such a member is read here: it is checked against `RECORD` when the layer is
/// written, and the layer fails then if it does not match.
pub fn install_wheel_deferring(
    wheel: &Path,
    scheme: &Scheme,
    stage: &Path,
    (name, version): (&str, &str),
    deferred: &mut Deferred,
) -> Result<InstalledWheel, WheelError> {
    Installer::open(wheel, scheme, stage)?.run(Some((name, version)), Some(deferred))
}

/// What a wheel's `METADATA` says it is and needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelIdentity {
    /// `Name`, as written.
    pub name: String,
    /// `Version`, as written.
    pub version: String,
    /// The project names of every `Requires-Dist` (PEP 503 normalized), whatever their markers or
    /// extras: an over-approximation of what the wheel can pull in.
    pub requires: Vec<String>,
}

/// Reads the `METADATA` of `wheel` without installing it (the zip's central directory and one
/// member), with the same checks of the file and its members as [`install_wheel`].
pub fn wheel_identity(wheel: &Path) -> Result<WheelIdentity, WheelError> {
    let scheme = Scheme::debian_local(&"3.11".parse().map_err(|_| WheelError::Layout {
        wheel: wheel.to_owned(),
        problem: "internal: default scheme".to_owned(),
    })?);
    let mut installer = Installer::open(wheel, &scheme, Path::new("/nonexistent"))?;
    let files = installer.scan()?;
    let dist_infos: BTreeSet<String> = files
        .iter()
        .filter_map(|(_, n)| n.split_once('/').map(|(top, _)| top))
        .filter(|top| top.ends_with(".dist-info"))
        .map(str::to_owned)
        .collect();
    let dist_infos: Vec<String> = dist_infos.into_iter().collect();
    let [dist_info] = &dist_infos[..] else {
        return Err(installer.layout("not exactly one .dist-info directory".to_owned()));
    };
    let metadata_name = format!("{dist_info}/METADATA");
    let headers = parse_headers(&installer.require_small(&metadata_name)?);
    let field = |key| header(&headers, key).unwrap_or_default().to_owned();
    let mut requires: Vec<String> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Requires-Dist"))
        .map(|(_, v)| {
            let end = v
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
                .unwrap_or(v.len());
            normalize_name(&v[..end])
        })
        .filter(|n| !n.is_empty())
        .collect();
    requires.sort();
    requires.dedup();
    Ok(WheelIdentity { name: field("Name"), version: field("Version"), requires })
}

/// The text of the one top-level `*.dist-info/METADATA` of a wheel's zip (at most `cap`
/// bytes), and its member name; whatever the zip is read from (a file, range requests).
pub fn dist_info_metadata<R: std::io::Read + std::io::Seek>(
    archive: &mut zip::ZipArchive<R>,
    cap: u64,
) -> Result<(String, String), String> {
    use std::io::Read as _;
    let names: Vec<String> = archive
        .file_names()
        .filter(|n| n.matches('/').count() == 1 && n.ends_with(".dist-info/METADATA"))
        .map(str::to_owned)
        .collect();
    let [name] = names.as_slice() else {
        return Err(format!("expected one *.dist-info/METADATA, found {}", names.len()));
    };
    let member = archive.by_name(name).map_err(|e| format!("{name}: {e}"))?;
    let mut text = String::new();
    member.take(cap).read_to_string(&mut text).map_err(|e| format!("{name}: {e}"))?;
    Ok((name.clone(), text))
}

/// A project name normalized as PEP 503 says: runs of `-`, `_` and `.` become one `-`, lowercase.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Whether two version strings are the same PEP 440 version (`1.0` and `1.0.0` are).
fn same_version(a: &str, b: &str) -> bool {
    match (a.parse::<pep440_rs::Version>(), b.parse::<pep440_rs::Version>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A validated, in-image path: its components, none of them empty, `.` or `..`.
type Components = Vec<String>;

/// The scheme with its paths split and checked.
struct Dirs {
    purelib: Components,
    platlib: Components,
    scripts: Components,
    data: Components,
    headers: String,
    interpreter: String,
}

impl Dirs {
    fn new(s: &Scheme) -> Result<Self, WheelError> {
        let interp = &s.interpreter;
        // The interpreter lands on a shebang line: one absolute path, no spaces or line breaks.
        if !interp.starts_with('/') || interp.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(WheelError::Scheme {
                field: "interpreter",
                path: interp.clone(),
                problem: "must be an absolute path without whitespace",
            });
        }
        Ok(Self {
            purelib: image_path("purelib", &s.purelib)?,
            platlib: image_path("platlib", &s.platlib)?,
            scripts: image_path("scripts", &s.scripts)?,
            data: image_path("data", &s.data)?,
            headers: s.headers.clone(),
            interpreter: interp.clone(),
        })
    }
}

/// Splits an absolute in-image path of the scheme into checked components.
fn image_path(field: &'static str, path: &str) -> Result<Components, WheelError> {
    let err = |problem| WheelError::Scheme { field, path: path.to_owned(), problem };
    let rest = path.strip_prefix('/').ok_or_else(|| err("must be absolute"))?;
    let mut out = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(err("must not contain `..`")),
            p if p.contains('\0') => return Err(err("must not contain NUL")),
            p => out.push(p.to_owned()),
        }
    }
    Ok(out)
}

/// Checks a zip member name and splits it into components (a trailing `/` marks a directory).
fn entry_components(name: &str) -> Result<Vec<&str>, &'static str> {
    if name.is_empty() {
        return Err("empty name");
    }
    if name.contains('\0') {
        return Err("name contains a NUL byte");
    }
    if name.contains('\\') {
        // A Windows separator: `..\..\x` is harmless on Linux but means escape to other tools.
        return Err("name contains a backslash");
    }
    if name.chars().any(char::is_control) {
        return Err("name contains a control character");
    }
    if name.starts_with('/') {
        return Err("absolute name");
    }
    let trimmed = name.strip_suffix('/').unwrap_or(name);
    let parts: Vec<&str> = trimmed.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        match *part {
            "" => return Err("name has an empty path component"),
            "." => return Err("name has a `.` component"),
            ".." => return Err("name has a `..` component"),
            p if i == 0 && p.len() == 2 && p.ends_with(':') => return Err("name starts with a drive letter"),
            _ => {}
        }
    }
    Ok(parts)
}

struct Installer<'a> {
    wheel: &'a Path,
    dirs: Dirs,
    stage: &'a Path,
    archive: ZipArchive<File>,
    /// Device and inode of the wheel, for the members left in it.
    identity: (u64, u64),
}

/// Metadata gathered before any file is written.
struct Plan {
    dist_info: String,
    data_dir: String,
    name: String,
    version: String,
    purelib_root: bool,
    record: BTreeMap<String, RecordRow>,
    /// `(index, name)` of every file member, in archive order.
    files: Vec<(usize, String)>,
}

impl<'a> Installer<'a> {
    fn open(wheel: &'a Path, scheme: &Scheme, stage: &'a Path) -> Result<Self, WheelError> {
        let dirs = Dirs::new(scheme)?;
        // A regular file only: a FIFO or a device would block or never end.
        let file = stackbuild_common::open_regular(wheel, "wheel")?;
        let probe = file.try_clone().map_err(wheel_io(wheel, "opening", wheel))?;
        let archive = ZipArchive::new(file).map_err(|source| WheelError::Zip {
            wheel: wheel.to_owned(),
            what: "opening the archive".to_owned(),
            source,
        })?;
        check_unique_members(wheel, &probe, &archive)?;
        let meta = probe.metadata().map_err(wheel_io(wheel, "reading", wheel))?;
        let identity =
            (std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta));
        Ok(Self { wheel, dirs, stage, archive, identity })
    }

    fn layout(&self, problem: String) -> WheelError {
        WheelError::Layout { wheel: self.wheel.to_owned(), problem }
    }

    fn metadata_err(&self, file: &str, problem: String) -> WheelError {
        WheelError::Metadata { wheel: self.wheel.to_owned(), file: file.to_owned(), problem }
    }

    /// Validates every member name and type without decompressing anything.
    fn scan(&mut self) -> Result<Vec<(usize, String)>, WheelError> {
        let mut files = Vec::new();
        let (mut inflated, mut packed_total) = (0u64, 0u64);
        // The member that inflates most relative to its compressed size, for the message.
        let mut steepest: Option<(String, u64, u64)> = None;
        for index in 0..self.archive.len() {
            let member = self.archive.by_index_raw(index).map_err(|source| WheelError::Zip {
                wheel: self.wheel.to_owned(),
                what: format!("reading entry #{index}"),
                source,
            })?;
            let name = member.name().to_owned();
            let unsafe_entry = |reason: &str| WheelError::UnsafeEntry {
                wheel: self.wheel.to_owned(),
                entry: name.clone(),
                reason: reason.to_owned(),
            };
            if member.name_raw().contains(&0) {
                return Err(unsafe_entry("name contains a NUL byte"));
            }
            entry_components(&name).map_err(unsafe_entry)?;
            let file_type = member.unix_mode().map_or(0, |m| m & S_IFMT);
            match file_type {
                // The binary distribution format (PEP 427) stores files; it defines no links, and
                // installers differ on one (uv fails creating it, pip writes its target as text).
                S_IFLNK => return Err(unsafe_entry(SYMLINK_RULE)),
                0 | S_IFREG | S_IFDIR => {}
                _ => return Err(unsafe_entry("special file entries are not allowed in a wheel")),
            }
            if member.encrypted() {
                return Err(unsafe_entry("encrypted entry"));
            }
            let (size, packed) = (member.size(), member.compressed_size());
            inflated = inflated.saturating_add(size);
            packed_total = packed_total.saturating_add(packed);
            if steepest.as_ref().is_none_or(|(_, s, p)| {
                u128::from(size) * u128::from(*p) > u128::from(*s) * u128::from(packed)
            }) {
                steepest = Some((name.clone(), size, packed));
            }
            let bomb = |problem: String| WheelError::Bomb {
                wheel: self.wheel.to_owned(),
                entry: name.clone(),
                problem,
            };
            if inflated > MAX_INFLATED_TOTAL {
                return Err(bomb(format!("the wheel inflates to more than {MAX_INFLATED_TOTAL} bytes")));
            }
            if !member.is_dir() && file_type != S_IFDIR {
                files.push((index, name));
            }
        }
        if inflated > RATIO_FLOOR && inflated / packed_total.max(1) > MAX_RATIO {
            let (entry, size, packed) = steepest.unwrap_or_default();
            return Err(WheelError::Bomb {
                wheel: self.wheel.to_owned(),
                entry,
                problem: format!(
                    "the wheel declares {inflated} bytes from {packed_total} compressed, more than {MAX_RATIO}:1 \
                     (this member: {size} bytes from {packed})"
                ),
            });
        }
        Ok(files)
    }

    /// Reads a small member fully, refusing to read more than [`METADATA_CAP`].
    fn read_small(&mut self, name: &str) -> Result<Option<String>, WheelError> {
        let Some(index) = self.archive.index_for_name(name) else { return Ok(None) };
        let wheel = self.wheel.to_owned();
        let member = self.archive.by_index(index).map_err(|source| WheelError::Zip {
            wheel: wheel.clone(),
            what: format!("opening {name}"),
            source,
        })?;
        let mut bytes = Vec::new();
        member.take(METADATA_CAP + 1).read_to_end(&mut bytes).map_err(|source| WheelError::ReadEntry {
            wheel: wheel.clone(),
            entry: name.to_owned(),
            source,
        })?;
        if bytes.len() as u64 > METADATA_CAP {
            return Err(self.metadata_err(name, format!("larger than {METADATA_CAP} bytes")));
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| self.metadata_err(name, "is not valid UTF-8".to_owned()))
    }

    fn require_small(&mut self, name: &str) -> Result<String, WheelError> {
        self.read_small(name)?.ok_or_else(|| self.layout(format!("missing {name}")))
    }

    fn plan(&mut self) -> Result<Plan, WheelError> {
        let files = self.scan()?;
        let dist_infos: BTreeSet<&str> = files
            .iter()
            .filter_map(|(_, n)| n.split_once('/').map(|(top, _)| top))
            .filter(|top| top.ends_with(".dist-info"))
            .collect();
        let dist_info = match dist_infos.len() {
            1 => dist_infos.into_iter().next().unwrap_or_default().to_owned(),
            0 => return Err(self.layout("no .dist-info directory".to_owned())),
            _ => {
                let list: Vec<&str> = dist_infos.into_iter().collect();
                return Err(self.layout(format!("several .dist-info directories: {}", list.join(", "))));
            }
        };
        let data_dir = format!("{}.data", dist_info.trim_end_matches(".dist-info"));

        let wheel_name = format!("{dist_info}/WHEEL");
        let wheel_text = self.require_small(&wheel_name)?;
        let headers = parse_headers(&wheel_text);
        let version = header(&headers, "Wheel-Version")
            .ok_or_else(|| self.metadata_err(&wheel_name, "no Wheel-Version".to_owned()))?;
        if version.split('.').next() != Some("1") {
            return Err(WheelError::UnsupportedVersion {
                wheel: self.wheel.to_owned(),
                version: version.to_owned(),
            });
        }
        let purelib_root = match header(&headers, "Root-Is-Purelib").map(str::to_ascii_lowercase).as_deref() {
            Some("true") => true,
            Some("false") => false,
            other => {
                return Err(self.metadata_err(
                    &wheel_name,
                    format!("Root-Is-Purelib must be true or false, found {other:?}"),
                ))
            }
        };

        let metadata_name = format!("{dist_info}/METADATA");
        let metadata = parse_headers(&self.require_small(&metadata_name)?);
        let name = header(&metadata, "Name")
            .ok_or_else(|| self.metadata_err(&metadata_name, "no Name".to_owned()))?
            .to_owned();
        if !is_project_name(&name) {
            return Err(self.metadata_err(&metadata_name, format!("invalid Name {name:?}")));
        }
        let version = header(&metadata, "Version")
            .ok_or_else(|| self.metadata_err(&metadata_name, "no Version".to_owned()))?
            .to_owned();

        let record_name = format!("{dist_info}/RECORD");
        let record_text = self.require_small(&record_name)?;
        let record = parse_record(&record_text).map_err(|p| self.metadata_err(&record_name, p))?;
        Ok(Plan { dist_info, data_dir, name, version, purelib_root, record, files })
    }

    fn run(
        mut self,
        expected: Option<(&str, &str)>,
        deferred: Option<&mut Deferred>,
    ) -> Result<InstalledWheel, WheelError> {
        let plan = self.plan()?;
        if let Some((name, version)) = expected {
            self.check_identity(&plan, name, version)?;
        }
        let site_root = if plan.purelib_root { self.dirs.purelib.clone() } else { self.dirs.platlib.clone() };
        let headers_path = self.dirs.headers.replace("{name}", &plan.name);
        let headers = image_path("headers", &headers_path)?;
        fs::create_dir_all(self.stage).map_err(wheel_io(self.wheel, "creating", self.stage))?;
        let mut out =
            Output { stage: self.stage, written: HashSet::new(), rows: Vec::new(), bytes: 0, deferred };

        let skip: HashSet<String> = ["RECORD", "RECORD.jws", "RECORD.p7s", "INSTALLER"]
            .iter()
            .map(|f| format!("{}/{f}", plan.dist_info))
            .collect();
        let mut seen = HashSet::new();
        for (index, name) in &plan.files {
            if skip.contains(name) {
                continue;
            }
            let parts = entry_components(name).unwrap_or_default();
            let (dest, is_script) = if parts.first() == Some(&plan.data_dir.as_str()) {
                let (base, is_script) = match parts.get(1).copied() {
                    Some("purelib") => (&self.dirs.purelib, false),
                    Some("platlib") => (&self.dirs.platlib, false),
                    Some("scripts") => (&self.dirs.scripts, true),
                    Some("data") => (&self.dirs.data, false),
                    Some("headers") => (&headers, false),
                    _ => {
                        return Err(self.layout(format!(
                            "entry {name:?}: unknown .data directory (expected purelib, platlib, scripts, \
                             data or headers)"
                        )))
                    }
                };
                if parts.len() < 3 {
                    return Err(self.layout(format!("entry {name:?}: file directly in {}", plan.data_dir)));
                }
                (join(base, &parts[2..]), is_script)
            } else {
                (join(&site_root, &parts), false)
            };
            let row = plan.record.get(name.as_str()).and_then(|r| r.sha256.clone().map(|h| (h, r.size)));
            let Some((expected, size)) = row else {
                return Err(WheelError::NotInRecord { wheel: self.wheel.to_owned(), entry: name.clone() });
            };
            seen.insert(name.as_str());
            // Python imports `.py` only, case and all: the sources bytecode is compiled from.
            let python_source = Path::new(name).extension().is_some_and(|e| e == "py");
            if out.deferred.is_some() && !is_script && !python_source {
                if let Some((member, mode)) = self.deferrable(*index, name, &expected, size)? {
                    let digest = member.sha256.trim_end_matches('=').to_owned();
                    let size = member.size;
                    out.defer(&dest, member, mode).map_err(|e| e.into_wheel_error(self.wheel, name))?;
                    out.record(&dest, digest, size, &site_root);
                    continue;
                }
            }
            self.extract(*index, name, &dest, is_script, &expected, size, &site_root, &mut out)?;
        }
        for (path, row) in &plan.record {
            let ignorable = skip.contains(path) || path.ends_with('/') || row.sha256.is_none();
            if !ignorable && !seen.contains(path.as_str()) {
                return Err(WheelError::MissingFromWheel {
                    wheel: self.wheel.to_owned(),
                    entry: path.clone(),
                });
            }
        }

        self.write_scripts(&plan, &site_root, &mut out)?;
        write_record(self.wheel, &plan.dist_info, &site_root, &mut out)?;

        let top_level: BTreeSet<String> = out
            .rows
            .iter()
            .filter_map(|w| w.path.split('/').next())
            .filter(|top| *top != ".." && *top != plan.dist_info)
            .map(str::to_owned)
            .collect();
        Ok(InstalledWheel {
            name: plan.name,
            version: plan.version,
            files: out.written.len(),
            bytes: out.bytes,
            site_packages_rel: site_root.join("/"),
            top_level: top_level.into_iter().collect(),
        })
    }

    /// Refuses a wheel whose `METADATA` (or `.dist-info` directory name) is not `name` `version`.
    fn check_identity(&self, plan: &Plan, name: &str, version: &str) -> Result<(), WheelError> {
        let mismatch = |found: String| WheelError::NotThePin {
            wheel: self.wheel.to_owned(),
            expected: format!("{name} {version}"),
            found,
        };
        if normalize_name(&plan.name) != normalize_name(name) || !same_version(&plan.version, version) {
            return Err(mismatch(format!("{} {}", plan.name, plan.version)));
        }
        // PEP 427: the directory is `{name}-{version}.dist-info`, the name with `-` escaped as `_`.
        let stem = plan.dist_info.trim_end_matches(".dist-info");
        let (dir_name, dir_version) = stem.rsplit_once('-').unwrap_or((stem, ""));
        if normalize_name(dir_name) != normalize_name(name) || !same_version(dir_version, version) {
            return Err(mismatch(format!("{} (its .dist-info directory)", plan.dist_info)));
        }
        Ok(())
    }

    /// Generates the launchers of `entry_points.txt`.
    fn write_scripts(
        &mut self,
        plan: &Plan,
        site_root: &[String],
        out: &mut Output<'_>,
    ) -> Result<(), WheelError> {
        let entry_points_name = format!("{}/entry_points.txt", plan.dist_info);
        if let Some(text) = self.read_small(&entry_points_name)? {
            let scripts = parse_entry_points(&text).map_err(|p| self.metadata_err(&entry_points_name, p))?;
            for script in scripts {
                let launcher = script.launcher(&self.dirs.interpreter, &plan.name, &plan.version);
                let dest = join(&self.dirs.scripts, &[script.name.as_str()]);
                let entry = format!("{}:{}", script.section, script.name);
                out.write_generated(&dest, launcher.as_bytes(), 0o755, site_root)
                    .map_err(|e| e.into_wheel_error(self.wheel, &entry))?;
            }
        }
        Ok(())
    }

    /// Member `index` as a [`ZipMember`] and its mode, if it is deflated and large enough to be
    /// left in the wheel.
    fn deferrable(
        &mut self,
        index: usize,
        name: &str,
        expected: &str,
        size: Option<u64>,
    ) -> Result<Option<(ZipMember, u32)>, WheelError> {
        let wheel = self.wheel.to_owned();
        let (dev, ino) = self.identity;
        let entry = self.archive.by_index_raw(index).map_err(|source| WheelError::Zip {
            wheel: wheel.clone(),
            what: format!("opening entry {name:?}"),
            source,
        })?;
        if entry.size() < DEFER_MIN || entry.compression() != zip::CompressionMethod::Deflated {
            return Ok(None);
        }
        if let Some(recorded) = size.filter(|s| *s != entry.size()) {
            return Err(WheelError::SizeMismatch {
                wheel,
                entry: name.to_owned(),
                expected: recorded,
                actual: entry.size(),
            });
        }
        let mode = if entry.unix_mode().is_some_and(|m| m & 0o111 != 0) { 0o755 } else { 0o644 };
        let member = ZipMember {
            wheel,
            entry: name.to_owned(),
            dev,
            ino,
            data_start: entry.data_start(),
            compressed: entry.compressed_size(),
            size: entry.size(),
            sha256: expected.to_owned(),
        };
        Ok(Some((member, mode)))
    }

    /// Streams member `index` to `dest`, verifying it against `RECORD` on the way.
    #[allow(clippy::too_many_arguments)]
    fn extract(
        &mut self,
        index: usize,
        name: &str,
        dest: &[String],
        is_script: bool,
        expected: &str,
        size: Option<u64>,
        site_root: &[String],
        out: &mut Output<'_>,
    ) -> Result<(), WheelError> {
        let wheel = self.wheel.to_owned();
        let interpreter = self.dirs.interpreter.clone();
        let mut member = self.archive.by_index(index).map_err(|source| WheelError::Zip {
            wheel: wheel.clone(),
            what: format!("opening entry {name:?}"),
            source,
        })?;
        let executable = is_script || member.unix_mode().is_some_and(|m| m & 0o111 != 0);
        let mode = if executable { 0o755 } else { 0o644 };
        let (file, path) = out.create(dest).map_err(|e| e.into_wheel_error(&wheel, name))?;
        let write_err = |op| wheel_io(&wheel, op, &path);
        let read_err =
            |source| WheelError::ReadEntry { wheel: wheel.clone(), entry: name.to_owned(), source };

        // Reading stops one byte past the recorded size and past the size the zip declares (which
        // the scan capped), so a lying member cannot fill the disk.
        let declared = member.size();
        let limit = size.unwrap_or(u64::MAX).min(declared).saturating_add(1);
        let mut source = HashingReader::new((&mut member).take(limit));
        let mut sink = HashingWriter::new(BufWriter::with_capacity(1 << 18, file));
        let copied = if is_script {
            copy_script(&mut source, &mut sink, &interpreter)
        } else {
            io::copy(&mut source, &mut sink)
        };
        if let Err(e) = copied {
            return Err(if source.failed { read_err(e) } else { write_err("writing")(e) });
        }
        let file = sink.inner.into_inner().map_err(|e| write_err("writing")(e.into_error()))?;
        file.set_permissions(Permissions::from_mode(mode)).map_err(write_err("setting permissions of"))?;
        drop(file);

        let actual = urlsafe_b64(&source.hasher.finalize());
        let got = source.len;
        let fail = |err: WheelError| {
            // Leave no unverified content behind, even in a stage that is about to be discarded.
            let _ = fs::remove_file(&path);
            Err(err)
        };
        if let Some(expected) = size.filter(|s| *s != got) {
            return fail(WheelError::SizeMismatch { wheel, entry: name.to_owned(), expected, actual: got });
        }
        if got != declared {
            return fail(WheelError::Bomb {
                wheel,
                entry: name.to_owned(),
                problem: format!("inflates to more than the {declared} bytes its zip header declares"),
            });
        }
        if actual != expected.trim_end_matches('=') {
            return fail(WheelError::HashMismatch {
                wheel,
                entry: name.to_owned(),
                expected: expected.to_owned(),
                actual,
            });
        }
        let written_hash = if is_script { urlsafe_b64(&sink.hasher.finalize()) } else { actual };
        out.record(dest, written_hash, sink.len, site_root);
        Ok(())
    }
}

/// A `map_err` argument for a failed operation on `path` while installing `wheel`.
fn wheel_io<'a>(
    wheel: &'a Path,
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> WheelError + 'a {
    move |source| WheelError::Io { wheel: wheel.to_owned(), source: io_err(op, path)(source) }
}

/// Refuses a zip whose central directory lists one name twice. The `zip` crate keeps one of
/// them (by name) and others keep the other, so the file an installer writes would depend on the
/// tool; the central directory is walked here to count what the crate collapsed.
fn check_unique_members(wheel: &Path, file: &File, archive: &ZipArchive<File>) -> Result<(), WheelError> {
    use std::os::unix::fs::FileExt as _;
    let mut names: HashSet<Vec<u8>> = HashSet::new();
    let mut pos = archive.central_directory_start();
    let mut header = [0u8; 46];
    loop {
        match file.read_exact_at(&mut header, pos) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(wheel_io(wheel, "reading", wheel)(e)),
        }
        if header[..4] != [0x50, 0x4b, 0x01, 0x02] {
            break;
        }
        let u16_at = |i: usize| u64::from(u16::from_le_bytes([header[i], header[i + 1]]));
        let (name_len, extra_len, comment_len) = (u16_at(28), u16_at(30), u16_at(32));
        let mut name = vec![0u8; usize::try_from(name_len).unwrap_or(0)];
        file.read_exact_at(&mut name, pos + 46).map_err(wheel_io(wheel, "reading", wheel))?;
        if !names.insert(name.clone()) {
            return Err(WheelError::Duplicate {
                wheel: wheel.to_owned(),
                problem: format!("member {:?} appears twice", String::from_utf8_lossy(&name)),
            });
        }
        if names.len() > MAX_MEMBERS {
            return Err(WheelError::Bomb {
                wheel: wheel.to_owned(),
                entry: "*".to_owned(),
                problem: format!("more than {MAX_MEMBERS} members"),
            });
        }
        pos += 46 + name_len + extra_len + comment_len;
    }
    if names.len() != archive.len() {
        return Err(WheelError::Duplicate {
            wheel: wheel.to_owned(),
            problem: format!(
                "its central directory lists {} members but only {} distinct names",
                names.len(),
                archive.len()
            ),
        });
    }
    Ok(())
}

/// Writes `INSTALLER`, then `RECORD` listing every written file, sorted by path.
fn write_record(
    wheel: &Path,
    dist_info: &str,
    site_root: &[String],
    out: &mut Output<'_>,
) -> Result<(), WheelError> {
    let installer = format!("{INSTALLER}\n");
    let installer_dest = join(site_root, &[dist_info, "INSTALLER"]);
    out.write_generated(&installer_dest, installer.as_bytes(), 0o644, site_root)
        .map_err(|e| e.into_wheel_error(wheel, "INSTALLER"))?;

    let record_rel = format!("{dist_info}/RECORD");
    let mut rows: Vec<(String, String)> = out
        .rows
        .iter()
        .map(|w| (w.path.clone(), format!("{},sha256={},{}", csv_field(&w.path), w.sha256, w.size)))
        .collect();
    rows.push((record_rel.clone(), format!("{},,", csv_field(&record_rel))));
    rows.sort();
    let record: String = rows.into_iter().fold(String::new(), |mut acc, (_, line)| {
        acc.push_str(&line);
        acc.push('\n');
        acc
    });
    let record_dest = join(site_root, &[dist_info, "RECORD"]);
    out.write_file(&record_dest, record.as_bytes(), 0o644)
        .map_err(|e| e.into_wheel_error(wheel, "RECORD"))?;
    Ok(())
}

/// Copies a script, replacing a `#!python` shebang with one naming `interpreter`.
///
/// `#!python`, `#!pythonw`, `#!python3 -u` all become `#!<interpreter>` followed by whatever came
/// after the first word (interpreter options and the line ending).
fn copy_script(source: &mut impl Read, sink: &mut impl Write, interpreter: &str) -> io::Result<u64> {
    let mut reader = BufReader::new(source);
    let mut first = Vec::new();
    (&mut reader).take(SHEBANG_CAP).read_until(b'\n', &mut first)?;
    let mut written = 0;
    if let Some(rest) = first.strip_prefix(b"#!python") {
        let word_end = rest.iter().position(u8::is_ascii_whitespace).unwrap_or(rest.len());
        let line = [b"#!", interpreter.as_bytes(), &rest[word_end..]].concat();
        sink.write_all(&line)?;
        written += line.len() as u64;
    } else {
        sink.write_all(&first)?;
        written += first.len() as u64;
    }
    Ok(written + io::copy(&mut reader, sink)?)
}

/// Joins a scheme directory and member components.
fn join(base: &[String], rest: &[impl AsRef<str>]) -> Components {
    base.iter().cloned().chain(rest.iter().map(|p| p.as_ref().to_owned())).collect()
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use sha2::Sha256;

    use super::formats::parse_csv;
    use super::output::relative_to;
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use zip::write::SimpleFileOptions;
    use zip::ZipWriter;

    #[test]
    fn every_setting_of_the_installer_is_part_of_the_layer_key() {
        stackbuild_cache::assert_every_input_changes_key(
            "install",
            &InstallKey::current(),
            &["installer", "defer_min", "revision"],
        );
        let scheme = Scheme::debian_local(&"3.11".parse().unwrap());
        stackbuild_cache::assert_every_input_changes_key(
            "scheme",
            &scheme,
            &["purelib", "platlib", "scripts", "data", "headers", "interpreter"],
        );
    }

    /// Builds a wheel from `(name, content, unix mode)`; RECORD is generated unless given.
    fn make_wheel(dir: &Path, file: &str, members: &[(&str, &[u8], u32)], record: Option<&str>) -> PathBuf {
        let path = dir.join(file);
        let mut zip = ZipWriter::new(File::create(&path).unwrap());
        let mut rec = String::new();
        let dist_info = members.iter().find_map(|(n, ..)| n.split_once(".dist-info/")).unwrap().0;
        for (name, content, mode) in members {
            let opts = SimpleFileOptions::default().unix_permissions(*mode);
            zip.start_file(*name, opts).unwrap();
            zip.write_all(content).unwrap();
            let _ =
                writeln!(rec, "{name},sha256={},{}", urlsafe_b64(&Sha256::digest(content)), content.len());
        }
        let _ = writeln!(rec, "{dist_info}.dist-info/RECORD,,");
        zip.start_file(format!("{dist_info}.dist-info/RECORD"), SimpleFileOptions::default()).unwrap();
        zip.write_all(record.unwrap_or(&rec).as_bytes()).unwrap();
        zip.finish().unwrap();
        path
    }

    fn scheme() -> Scheme {
        Scheme::debian_local(&"3.11".parse().unwrap())
    }

    const WHEEL_PURE: &[u8] =
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n";

    fn pure_members() -> Vec<(&'static str, &'static [u8], u32)> {
        vec![
            ("demo/__init__.py", b"def main():\n    return 0\n", 0o644),
            ("demo/cli.py", b"def run():\n    pass\n", 0o644),
            ("demo-1.0.data/scripts/demo-tool", b"#!python -u\nimport demo\n", 0o644),
            ("demo-1.0.data/scripts/plain.sh", b"#!/bin/sh\necho hi\n", 0o755),
            ("demo-1.0.data/data/share/demo/config.toml", b"x = 1\n", 0o644),
            ("demo-1.0.data/headers/demo.h", b"int demo(void);\n", 0o644),
            ("demo-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n", 0o644),
            ("demo-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
            (
                "demo-1.0.dist-info/entry_points.txt",
                b"[console_scripts]\ndemo = demo:main\ndemo-run = demo.cli:run [extra]\n\n[gui_scripts]\ndemo-gui = demo:main\n\n[other]\nx = y:z\n",
                0o644,
            ),
        ]
    }

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(urlsafe_b64(b""), "");
        assert_eq!(urlsafe_b64(b"f"), "Zg");
        assert_eq!(urlsafe_b64(b"fo"), "Zm8");
        assert_eq!(urlsafe_b64(b"foo"), "Zm9v");
        assert_eq!(urlsafe_b64(&[0xfb, 0xff]), "-_8");
        // sha256 of the empty string as it appears in RECORD files.
        assert_eq!(urlsafe_b64(&Sha256::digest(b"")), "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
    }

    #[test]
    fn debian_scheme() {
        let s = Scheme::debian_local(&"3.12.1".parse().unwrap());
        assert_eq!(s.purelib, "/usr/local/lib/python3.12/dist-packages");
        assert_eq!(s.platlib, s.purelib);
        assert_eq!(s.headers, "/usr/local/include/python3.12/{name}");
    }

    #[test]
    fn installs_a_pure_wheel() {
        let tmp = tempfile::tempdir().unwrap();
        let whl = make_wheel(tmp.path(), "demo-1.0-py3-none-any.whl", &pure_members(), None);
        let stage = tmp.path().join("stage");
        let got = install_wheel(&whl, &scheme(), &stage).unwrap();
        assert_eq!(got.name, "demo");
        assert_eq!(got.version, "1.0");
        assert_eq!(got.site_packages_rel, "usr/local/lib/python3.11/dist-packages");
        assert_eq!(got.top_level, vec!["demo".to_owned()]);
        // 2 modules + 2 scripts + data + header + METADATA + WHEEL + entry_points + 3 launchers
        // + INSTALLER + RECORD.
        assert_eq!(got.files, 14);

        let site_root = stage.join(&got.site_packages_rel);
        assert_eq!(fs::read_to_string(site_root.join("demo/cli.py")).unwrap(), "def run():\n    pass\n");
        let tool = stage.join("usr/local/bin/demo-tool");
        assert_eq!(fs::read_to_string(&tool).unwrap(), "#!/usr/bin/python3 -u\nimport demo\n");
        assert_eq!(fs::metadata(&tool).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_to_string(stage.join("usr/local/bin/plain.sh")).unwrap(), "#!/bin/sh\necho hi\n");
        assert_eq!(fs::read_to_string(stage.join("usr/local/share/demo/config.toml")).unwrap(), "x = 1\n");
        assert!(stage.join("usr/local/include/python3.11/demo/demo.h").is_file());
        assert_eq!(fs::metadata(site_root.join("demo/__init__.py")).unwrap().mode() & 0o7777, 0o644);
        assert!(!stage.join("usr/local/lib/python3.11/dist-packages/demo-1.0.data").exists());

        let launcher = stage.join("usr/local/bin/demo-run");
        assert_eq!(fs::metadata(&launcher).unwrap().mode() & 0o7777, 0o755);
        insta::assert_snapshot!(fs::read_to_string(&launcher).unwrap(), @r#"
        #!/usr/bin/python3
        # console_scripts entry point "demo-run" of demo 1.0; written by stackbuild.
        import sys
        from demo.cli import run
        if __name__ == "__main__":
            sys.exit(run())
        "#);
        assert!(stage.join("usr/local/bin/demo-gui").is_file());
        assert!(!stage.join("usr/local/bin/x").exists());
        assert_eq!(
            fs::read_to_string(site_root.join("demo-1.0.dist-info/INSTALLER")).unwrap(),
            "stackbuild\n"
        );
        let record = fs::read_to_string(site_root.join("demo-1.0.dist-info/RECORD")).unwrap();
        let paths: Vec<&str> = record.lines().map(|l| l.split(',').next().unwrap()).collect();
        insta::assert_snapshot!(paths.join("\n"), @r"
        ../../../bin/demo
        ../../../bin/demo-gui
        ../../../bin/demo-run
        ../../../bin/demo-tool
        ../../../bin/plain.sh
        ../../../include/python3.11/demo/demo.h
        ../../../share/demo/config.toml
        demo-1.0.dist-info/INSTALLER
        demo-1.0.dist-info/METADATA
        demo-1.0.dist-info/RECORD
        demo-1.0.dist-info/WHEEL
        demo-1.0.dist-info/entry_points.txt
        demo/__init__.py
        demo/cli.py
        ");
        let tool_row = record.lines().find(|l| l.starts_with("../../../bin/demo-tool,")).unwrap();
        let content = fs::read(&tool).unwrap();
        assert_eq!(
            tool_row,
            format!(
                "../../../bin/demo-tool,sha256={},{}",
                urlsafe_b64(&Sha256::digest(&content)),
                content.len()
            )
        );
        assert!(record.contains("demo-1.0.dist-info/RECORD,,\n"));

        // Deterministic: a second install into a fresh stage writes the same RECORD.
        let stage2 = tmp.path().join("stage2");
        install_wheel(&whl, &scheme(), &stage2).unwrap();
        assert_eq!(
            fs::read_to_string(stage2.join(&got.site_packages_rel).join("demo-1.0.dist-info/RECORD"))
                .unwrap(),
            record
        );
    }

    #[test]
    fn installs_a_platlib_wheel_keeping_exec_bits() {
        let tmp = tempfile::tempdir().unwrap();
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("fast/__init__.py", b"", 0o644),
            ("fast/_core.cpython-311-x86_64-linux-gnu.so", b"\x7fELF fake", 0o755),
            ("fast.libs/libfoo.so.1", b"\x7fELF lib", 0o755),
            ("fast-2.0.data/purelib/fast_extra.py", b"X = 1\n", 0o644),
            ("fast-2.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: Fast\nVersion: 2.0\n", 0o644),
            ("fast-2.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n", 0o644),
        ];
        let whl = make_wheel(tmp.path(), "fast-2.0-cp311-cp311-linux_x86_64.whl", &members, None);
        let stage = tmp.path().join("stage");
        let mut s = scheme();
        s.platlib = "/usr/local/lib64/python3.11/site-packages".to_owned();
        let got = install_wheel(&whl, &s, &stage).unwrap();
        assert_eq!(got.name, "Fast");
        assert_eq!(got.site_packages_rel, "usr/local/lib64/python3.11/site-packages");
        assert_eq!(got.top_level, vec!["fast".to_owned(), "fast.libs".to_owned()]);
        let site_root = stage.join(&got.site_packages_rel);
        let so = site_root.join("fast/_core.cpython-311-x86_64-linux-gnu.so");
        assert_eq!(fs::metadata(so).unwrap().mode() & 0o7777, 0o755);
        assert!(stage.join("usr/local/lib/python3.11/dist-packages/fast_extra.py").is_file());
        let record = fs::read_to_string(site_root.join("fast-2.0.dist-info/RECORD")).unwrap();
        assert!(record.contains("../../../lib/python3.11/dist-packages/fast_extra.py,sha256="), "{record}");
        let record_len = fs::metadata(site_root.join("fast-2.0.dist-info/RECORD")).unwrap().len();
        let member_bytes: usize = members.iter().map(|(_, c, _)| c.len()).sum();
        assert_eq!(got.bytes, record_len + member_bytes as u64 + "stackbuild\n".len() as u64);
    }

    fn install_err(members: &[(&str, &[u8], u32)], record: Option<&str>) -> (String, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let whl = make_wheel(tmp.path(), "bad-1.0-py3-none-any.whl", members, record);
        let stage = tmp.path().join("stage");
        let err = install_wheel(&whl, &scheme(), &stage).unwrap_err();
        let msg = err.to_string().replace(&whl.display().to_string(), "bad.whl");
        // Nothing escaped the stage: the temp dir holds only the wheel and the stage.
        let mut names: Vec<_> = fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert!(names.len() <= 2, "{names:?}");
        (msg, tmp.keep())
    }

    fn bad_members(extra: (&'static str, &'static [u8], u32)) -> Vec<(&'static str, &'static [u8], u32)> {
        vec![
            extra,
            ("bad-1.0.dist-info/METADATA", b"Name: bad\nVersion: 1.0\n", 0o644),
            ("bad-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ]
    }

    /// Rewrites, in both the local and the central header of member `name`, the declared
    /// uncompressed size (`size`) and/or the name itself (`rename`, same length).
    fn patch_member(path: &Path, name: &str, size: Option<u32>, rename: Option<&str>) {
        let mut bytes = fs::read(path).unwrap();
        let n = name.len();
        let mut i = 0;
        while i + 4 <= bytes.len() {
            let (name_at, size_at) = match &bytes[i..i + 4] {
                [0x50, 0x4b, 0x03, 0x04] => (i + 30, i + 22),
                [0x50, 0x4b, 0x01, 0x02] => (i + 46, i + 24),
                _ => {
                    i += 1;
                    continue;
                }
            };
            if bytes.get(name_at..name_at + n) == Some(name.as_bytes()) {
                if let Some(size) = size {
                    bytes[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
                }
                if let Some(new) = rename {
                    bytes[name_at..name_at + n].copy_from_slice(new.as_bytes());
                }
            }
            i += 4;
        }
        fs::write(path, bytes).unwrap();
    }

    /// A library padded with zeros (segment alignment) compresses far beyond 200:1 on its own, as
    /// pillow 13's `libXau` does (2.1 MB from 9.4 kB): the cap is over the whole wheel, so it installs.
    /// A folded header with a whitespace-only line (pandas' `License`) does not end the headers:
    /// the `Requires-Dist` after it are read.
    #[test]
    fn headers_continue_past_a_whitespace_only_folded_line() {
        let text = "Metadata-Version: 2.1\nName: pandas\nLicense: BSD\n        \n        Copyright\nRequires-Dist: pytz>=2020.1\n\nbody: no\n";
        let headers = parse_headers(text);
        assert_eq!(header(&headers, "Requires-Dist"), Some("pytz>=2020.1"));
        assert_eq!(header(&headers, "body"), None);
    }

    #[test]
    fn a_zero_padded_library_is_not_a_bomb() {
        let tmp = tempfile::tempdir().unwrap();
        let padded = vec![0u8; 3 << 20];
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("padded.libs/libXau-1.so.6", &padded, 0o755),
            ("padded-1.0.dist-info/METADATA", b"Name: padded\nVersion: 1.0\n", 0o644),
            ("padded-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ];
        let whl = make_wheel(tmp.path(), "padded-1.0-py3-none-any.whl", &members, None);
        install_wheel(&whl, &scheme(), &tmp.path().join("stage")).unwrap();
    }

    #[test]
    fn refuses_a_member_that_inflates_past_the_ratio_cap() {
        let zeros = vec![0u8; 64 << 20];
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("bad/zeros.bin", &zeros, 0o644),
            ("bad-1.0.dist-info/METADATA", b"Name: bad\nVersion: 1.0\n", 0o644),
            ("bad-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ];
        let (msg, dir) = install_err(&members, None);
        assert!(msg.contains("bad/zeros.bin") && msg.contains(&format!("more than {MAX_RATIO}:1")), "{msg}");
        // Refused from the central directory alone: nothing was written.
        assert!(!dir.join("stage").exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_a_member_that_inflates_past_its_declared_size() {
        let tmp = tempfile::tempdir().unwrap();
        let data = vec![b'a'; 300_000];
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("bad/big.txt", &data, 0o644),
            ("bad-1.0.dist-info/METADATA", b"Name: bad\nVersion: 1.0\n", 0o644),
            ("bad-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ];
        // RECORD gives no size for the member, so only the zip's own declaration bounds it.
        let sha = urlsafe_b64(&Sha256::digest(&data));
        let meta = urlsafe_b64(&Sha256::digest(b"Name: bad\nVersion: 1.0\n"));
        let wheel = urlsafe_b64(&Sha256::digest(WHEEL_PURE));
        let record = format!(
            "bad/big.txt,sha256={sha},\nbad-1.0.dist-info/METADATA,sha256={meta},\nbad-1.0.dist-info/WHEEL,sha256={wheel},\nbad-1.0.dist-info/RECORD,,\n"
        );
        let whl = make_wheel(tmp.path(), "bad-1.0-py3-none-any.whl", &members, Some(&record));
        patch_member(&whl, "bad/big.txt", Some(1000), None);
        let stage = tmp.path().join("stage");
        let err = install_wheel(&whl, &scheme(), &stage).unwrap_err();
        assert!(matches!(err, WheelError::Bomb { .. } | WheelError::ReadEntry { .. }), "{err}");
        let written = stage.join("usr/local/lib/python3.11/dist-packages/bad/big.txt");
        assert!(!written.exists(), "the unverified file was left behind");
    }

    #[test]
    fn refuses_duplicate_members() {
        let tmp = tempfile::tempdir().unwrap();
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("bad/a.py", b"print('first')\n", 0o644),
            ("bad/b.py", b"print('second')\n", 0o644),
            ("bad-1.0.dist-info/METADATA", b"Name: bad\nVersion: 1.0\n", 0o644),
            ("bad-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ];
        let whl = make_wheel(tmp.path(), "bad-1.0-py3-none-any.whl", &members, None);
        patch_member(&whl, "bad/b.py", None, Some("bad/a.py"));
        let err = install_wheel(&whl, &scheme(), &tmp.path().join("stage")).unwrap_err();
        assert!(matches!(err, WheelError::Duplicate { .. }), "{err}");
        assert!(err.to_string().contains("\"bad/a.py\" appears twice"), "{err}");
        // The same when the metadata is duplicated: which METADATA names the project?
        let members: Vec<(&str, &[u8], u32)> = vec![
            ("bad-1.0.dist-info/METADATA", b"Name: bad\nVersion: 1.0\n", 0o644),
            ("bad-1.0.dist-info/METADATB", b"Name: pip\nVersion: 9.0\n", 0o644),
            ("bad-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
        ];
        let whl = make_wheel(tmp.path(), "bad2-1.0-py3-none-any.whl", &members, None);
        patch_member(&whl, "bad-1.0.dist-info/METADATB", None, Some("bad-1.0.dist-info/METADATA"));
        assert!(matches!(wheel_identity(&whl), Err(WheelError::Duplicate { .. })));
    }

    #[test]
    fn refuses_a_wheel_whose_metadata_names_another_project() {
        let tmp = tempfile::tempdir().unwrap();
        let whl = make_wheel(tmp.path(), "demo-1.0-py3-none-any.whl", &pure_members(), None);
        let stage = tmp.path().join("stage");
        let err = install_wheel_as(&whl, &scheme(), &stage, "requests", "1.0").unwrap_err();
        assert!(matches!(err, WheelError::NotThePin { .. }), "{err}");
        assert!(err.to_string().contains("METADATA says demo 1.0, but the lock pins requests 1.0"), "{err}");
        assert!(!stage.exists(), "nothing is written before the check");
        let err = install_wheel_as(&whl, &scheme(), &stage, "demo", "2.0").unwrap_err();
        assert!(matches!(err, WheelError::NotThePin { .. }), "{err}");
        // PEP 503 names and PEP 440 versions: `Demo` is `demo`, `1.0.0` is `1.0`.
        install_wheel_as(&whl, &scheme(), &stage, "DEMO", "1.0.0").unwrap();
        // A .dist-info directory of another project is refused too.
        let mut members = pure_members();
        for m in &mut members {
            if let Some(rest) = m.0.strip_prefix("demo-1.0.dist-info/") {
                m.0 = Box::leak(format!("evil-1.0.dist-info/{rest}").into_boxed_str());
            }
        }
        let whl = make_wheel(tmp.path(), "demo-1.0-py3-none-any.whl", &members, None);
        let err = install_wheel_as(&whl, &scheme(), &tmp.path().join("s2"), "demo", "1.0").unwrap_err();
        assert!(err.to_string().contains("evil-1.0.dist-info"), "{err}");
    }

    #[test]
    fn normalizes_names_as_pep_503() {
        assert_eq!(normalize_name("Foo.Bar__baz--Qux"), "foo-bar-baz-qux");
        assert_eq!(normalize_name("nvidia_cudnn_cu12"), "nvidia-cudnn-cu12");
        assert_eq!(normalize_name("six"), "six");
    }

    #[test]
    fn reads_requires_dist_names() {
        let tmp = tempfile::tempdir().unwrap();
        let mut members = pure_members();
        members[6].1 = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: Typing_Extensions (>=4)\nRequires-Dist: numpy>=1.0; extra == \"np\"\nRequires-Dist: six\n";
        let whl = make_wheel(tmp.path(), "demo-1.0-py3-none-any.whl", &members, None);
        let id = wheel_identity(&whl).unwrap();
        assert_eq!((id.name.as_str(), id.version.as_str()), ("demo", "1.0"));
        assert_eq!(id.requires, ["numpy", "six", "typing-extensions"]);
    }

    #[test]
    fn a_wheel_that_is_not_a_regular_file_is_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("demo-1.0-py3-none-any.whl");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        for path in [fifo.clone(), PathBuf::from("/dev/zero")] {
            let stage = tmp.path().join("stage");
            let err = test_support::process::within(10, move || install_wheel(&path, &scheme(), &stage))
                .unwrap_err();
            assert!(matches!(err, WheelError::Input(_)), "{err}");
            assert!(err.to_string().contains("must be a regular file"), "{err}");
        }
    }

    #[test]
    fn rejects_parent_escape() {
        let (msg, dir) = install_err(&bad_members(("../evil", b"x", 0o644)), None);
        assert_eq!(msg, r#"wheel bad.whl: unsafe entry "../evil": name has a `..` component"#);
        assert!(!dir.parent().unwrap().join("evil").exists());
        fs::remove_dir_all(dir).unwrap();
        let (msg, dir) = install_err(&bad_members(("bad/../../x", b"x", 0o644)), None);
        assert_eq!(msg, r#"wheel bad.whl: unsafe entry "bad/../../x": name has a `..` component"#);
        fs::remove_dir_all(dir).unwrap();
        let (msg, dir) = install_err(&bad_members(("bad\\..\\..\\x", b"x", 0o644)), None);
        assert_eq!(msg, r#"wheel bad.whl: unsafe entry "bad\\..\\..\\x": name contains a backslash"#);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn rejects_absolute_names() {
        let (msg, dir) = install_err(&bad_members(("/etc/x", b"x", 0o644)), None);
        assert_eq!(msg, r#"wheel bad.whl: unsafe entry "/etc/x": absolute name"#);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn rejects_symlink_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("link-1.0-py3-none-any.whl");
        let mut zip = ZipWriter::new(File::create(&path).unwrap());
        zip.add_symlink("link/passwd", "/etc/passwd", SimpleFileOptions::default()).unwrap();
        for (name, content, _) in bad_members(("link/__init__.py", b"", 0o644)) {
            zip.start_file(name, SimpleFileOptions::default()).unwrap();
            zip.write_all(content).unwrap();
        }
        zip.finish().unwrap();
        let err = install_wheel(&path, &scheme(), &tmp.path().join("stage")).unwrap_err();
        assert!(matches!(&err, WheelError::UnsafeEntry { entry, .. } if entry == "link/passwd"), "{err}");
        assert!(err.to_string().ends_with(&format!(r#"unsafe entry "link/passwd": {SYMLINK_RULE}"#)));
        assert!(!tmp.path().join("stage").exists());
    }

    #[test]
    fn rejects_hash_mismatch_and_removes_the_file() {
        let members = bad_members(("bad/__init__.py", b"print('tampered')\n", 0o644));
        let mut record = String::new();
        for (name, content, _) in &members {
            let content: &[u8] = if *name == "bad/__init__.py" { b"print('original')\n" } else { content };
            let _ =
                writeln!(record, "{name},sha256={},{}", urlsafe_b64(&Sha256::digest(content)), content.len());
        }
        let (msg, dir) = install_err(&members, Some(&record));
        assert!(msg.starts_with(r#"wheel bad.whl: entry "bad/__init__.py" has sha256="#), "{msg}");
        assert!(!dir.join("stage/usr/local/lib/python3.11/dist-packages/bad/__init__.py").exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn rejects_size_mismatch_and_unrecorded_files() {
        let members = bad_members(("bad/__init__.py", b"0123456789", 0o644));
        let record = format!(
            "bad/__init__.py,sha256={},4\nbad-1.0.dist-info/METADATA,,\n",
            urlsafe_b64(&Sha256::digest(b"0123"))
        );
        let (msg, dir) = install_err(&members, Some(&record));
        assert_eq!(msg, r#"wheel bad.whl: entry "bad/__init__.py" is 5 bytes, RECORD says 4"#);
        fs::remove_dir_all(dir).unwrap();
        let record = format!("bad/__init__.py,sha256={},10\n", urlsafe_b64(&Sha256::digest(b"0123456789")));
        let (msg, dir) = install_err(&members, Some(&record));
        assert_eq!(msg, r#"wheel bad.whl: entry "bad-1.0.dist-info/METADATA" has no sha256 in RECORD"#);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn rejects_unsupported_wheel_version_and_bad_entry_points() {
        let members = vec![
            ("x/__init__.py", &b""[..], 0o644),
            ("x-1.0.dist-info/METADATA", b"Name: x\nVersion: 1.0\n", 0o644),
            ("x-1.0.dist-info/WHEEL", b"Wheel-Version: 2.0\nRoot-Is-Purelib: true\n", 0o644),
        ];
        let (msg, dir) = install_err(&members, None);
        assert_eq!(msg, r#"wheel bad.whl: unsupported Wheel-Version "2.0" (only 1.x is supported)"#);
        fs::remove_dir_all(dir).unwrap();
        let members = vec![
            ("x/__init__.py", &b""[..], 0o644),
            ("x-1.0.dist-info/METADATA", b"Name: x\nVersion: 1.0\n", 0o644),
            ("x-1.0.dist-info/WHEEL", WHEEL_PURE, 0o644),
            ("x-1.0.dist-info/entry_points.txt", b"[console_scripts]\nx = os; import evil:f\n", 0o644),
        ];
        let (msg, dir) = install_err(&members, None);
        assert_eq!(
            msg,
            r#"wheel bad.whl: x-1.0.dist-info/entry_points.txt: line 2: invalid object reference: "x = os; import evil:f""#
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_to_write_through_a_symlink_in_the_stage() {
        let tmp = tempfile::tempdir().unwrap();
        let whl = make_wheel(tmp.path(), "demo-1.0-py3-none-any.whl", &pure_members(), None);
        let stage = tmp.path().join("stage");
        let outside = tmp.path().join("outside");
        fs::create_dir_all(stage.join("usr/local")).unwrap();
        fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, stage.join("usr/local/bin")).unwrap();
        let err = install_wheel(&whl, &scheme(), &stage).unwrap_err();
        assert!(matches!(err, WheelError::Conflict { .. }), "{err}");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    /// Installs every wheel of `$STACKBUILD_TEST_WHEELS` (a directory) into
    /// `$STACKBUILD_TEST_STAGE`, for checks against real wheels (`pip download` some first).
    #[test]
    #[ignore = "needs STACKBUILD_TEST_WHEELS and STACKBUILD_TEST_STAGE"]
    fn installs_real_wheels() {
        let dir = PathBuf::from(std::env::var_os("STACKBUILD_TEST_WHEELS").unwrap());
        let stage = PathBuf::from(std::env::var_os("STACKBUILD_TEST_STAGE").unwrap());
        let mut wheels: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        wheels.sort();
        for whl in wheels.iter().filter(|p| p.extension().is_some_and(|e| e == "whl")) {
            let got = install_wheel(whl, &scheme(), &stage).unwrap();
            println!("{got:?}");
        }
    }

    #[test]
    fn csv_round_trip() {
        let rows = parse_csv("a,b,c\n\"x,y\",\"q\"\"\",3\r\nlast,,").unwrap();
        assert_eq!(rows, vec![vec!["a", "b", "c"], vec!["x,y", "q\"", "3"], vec!["last", "", ""]]);
        assert_eq!(csv_field("x,y"), "\"x,y\"");
        assert!(parse_csv("\"open").is_err());
    }

    #[test]
    fn relative_paths_for_record() {
        let site_root: Vec<String> =
            ["usr", "local", "lib", "python3.11", "dist-packages"].map(String::from).into();
        let bin: Vec<String> = ["usr", "local", "bin", "x"].map(String::from).into();
        assert_eq!(relative_to(&site_root, &bin), "../../../bin/x");
        let inside: Vec<String> =
            site_root.iter().cloned().chain(["a".to_owned(), "b.py".to_owned()]).collect();
        assert_eq!(relative_to(&site_root, &inside), "a/b.py");
    }
}

#[cfg(test)]
mod deferred_tests;
