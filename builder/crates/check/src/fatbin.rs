//! What GPU code a CUDA library carries: the cubins and PTX in the fat binary of its ELF
//! section `.nv_fatbin`, by compute capability.
//!
//! This is how the build learns a torch build's architectures from the build itself (its
//! `torch/lib/libtorch_cuda.so` and the other libraries next to it) instead of a per-release
//! table. `cuobjdump --list-elf --list-ptx` shows the same entries.
//!
//! Layout, little-endian, as NVIDIA's `fatbinary_section.h` (CUDA toolkit headers: the
//! `.nv_fatbin` section, `FATBIN_MAGIC`) and the public reverse-engineering of the format
//! describe it (ZLUDA's fat binary reader, github.com/vosen/ZLUDA; gpgpu-sim's
//! `cuobjdump_to_ptxplus`):
//!
//! - The section holds one or more *containers*, each aligned to 8 bytes:
//!   `u32 magic = 0xBA55ED50`, `u16 version = 1`, `u16 header_size = 16`, `u64 size` (bytes of
//!   entries after the header).
//! - Each container holds *entries*, one after the other: `u16 kind` (1 = PTX, 2 = ELF, i.e.
//!   a cubin), `u16 version`, `u32 header_size` (64 or more), `u64 payload size`, `u32
//!   compressed size`, `u32` (reserved), `u16 minor`, `u16 major` (of the format), `u32 arch`
//!   (the compute capability as `10 * major + minor`: 80 for `sm_80`, 120 for `sm_120`), then the
//!   name offset and length, `u64 flags` (`0x2000`: the payload is compressed) and the
//!   decompressed size. The next entry starts `header_size + payload size` bytes later.
//!
//! Only headers are read: a compressed entry still names its architecture in its header, and
//! a 1 GB library costs a few thousand small reads. Every read is bounded by the file's size
//! and by caps on the section and entry counts.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use goblin::container::Ctx;
use goblin::elf::section_header::SectionHeader;
use goblin::elf::Elf;
use stackcontract::version::ComputeCapability;

use crate::gpu_code::GpuCode;
use stackbuild_common::ReadAt;
use stackbuild_common::{io_err, IoError};

/// The magic number of a fat binary container.
pub(crate) const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Entry kind: PTX text.
const KIND_PTX: u16 = 1;
/// Entry kind: an ELF cubin.
const KIND_ELF: u16 = 2;
/// Entry flag: the payload is compressed.
const FLAG_COMPRESSED: u64 = 0x2000;
/// Bytes of a container header.
const CONTAINER_HEADER: u64 = 16;
/// Bytes of an entry header up to and including `flags`.
const ENTRY_HEADER: u64 = 48;
/// Most section headers read from one ELF file.
const MAX_SECTIONS: u64 = 1 << 16;
/// Largest section-name table read.
const MAX_SHSTRTAB: u64 = 1 << 20;
/// Most entries read from one `.nv_fatbin` (`libtorch_cuda.so` has some tens of thousands).
const MAX_ENTRIES: usize = 1 << 20;
/// Largest library extracted from a wheel to read its fat binary.
const MAX_MEMBER: u64 = 16 << 30;

/// Why a fat binary could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FatbinError {
    /// Reading the file (or writing a member extracted from a wheel) failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The ELF file or its `.nv_fatbin` section is malformed.
    #[error("{path}: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The wheel could not be read as a zip archive.
    #[error("reading wheel {path}: {why}")]
    Wheel {
        /// The wheel.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum EntryKind {
    /// PTX, which the driver JIT-compiles for its GPU.
    Ptx,
    /// A cubin: machine code for one architecture.
    Cubin,
}

/// One entry of a fat binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// PTX or cubin.
    pub kind: EntryKind,
    /// The architecture it is for (`sm_80` -> 8.0).
    pub arch: ComputeCapability,
    /// Whether the payload is compressed.
    pub compressed: bool,
}

/// `len` bytes at `offset`, which must lie inside `size`.
fn read_range<R: ReadAt + ?Sized>(src: &R, size: u64, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= size)
        .ok_or_else(|| format!("{len} bytes at {offset:#x} run past the end of the file ({size} bytes)"))?;
    let _ = end;
    let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit in memory"))?;
    let mut buf = vec![0; len];
    let mut done = 0;
    while done < len {
        let n = src.read_at(&mut buf[done..], offset + done as u64).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("file ended at {:#x}", offset + done as u64));
        }
        done += n;
    }
    Ok(buf)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// The `(offset, size)` of the `.nv_fatbin` section of ELF `src`, if it has one.
fn find_section<R: ReadAt + ?Sized>(src: &R, size: u64) -> Result<Option<(u64, u64)>, String> {
    let head = read_range(src, size, 0, size.min(64))?;
    let header = Elf::parse_header(&head).map_err(|e| e.to_string())?;
    let ctx = Ctx::new(
        header.container().map_err(|e| e.to_string())?,
        header.endianness().map_err(|e| e.to_string())?,
    );
    let count = u64::from(header.e_shnum);
    if count == 0 {
        return Ok(None);
    }
    if count > MAX_SECTIONS {
        return Err(format!("{count} section headers"));
    }
    let entsize = SectionHeader::size(ctx) as u64;
    let table = read_range(src, size, header.e_shoff, count * entsize)?;
    let sections =
        SectionHeader::parse_from(&table, 0, usize::from(header.e_shnum), ctx).map_err(|e| e.to_string())?;
    let Some(names) = sections.get(usize::from(header.e_shstrndx)) else { return Ok(None) };
    if names.sh_size > MAX_SHSTRTAB {
        return Err(format!("section name table of {} bytes", names.sh_size));
    }
    let names = read_range(src, size, names.sh_offset, names.sh_size)?;
    let found = sections.iter().find(|s| {
        let start = s.sh_name;
        names.get(start..).is_some_and(|rest| rest.split(|&b| b == 0).next() == Some(b".nv_fatbin"))
    });
    // SHT_NOBITS (8) has no bytes in the file.
    Ok(found.filter(|s| s.sh_type != 8).map(|s| (s.sh_offset, s.sh_size)))
}

/// The entries of the fat binary containers in `section_size` bytes at `start` of `src`.
fn parse_containers<R: ReadAt + ?Sized>(
    src: &R,
    size: u64,
    start: u64,
    section_size: u64,
) -> Result<Vec<Entry>, String> {
    let end = start.checked_add(section_size).filter(|&e| e <= size).ok_or("section runs past the file")?;
    let mut out = Vec::new();
    let mut at = start;
    while at + CONTAINER_HEADER <= end {
        let head = read_range(src, size, at, CONTAINER_HEADER)?;
        if u32_at(&head, 0) != FATBIN_MAGIC {
            // Padding between containers (they are 8-byte aligned).
            at += 8;
            continue;
        }
        let header_size = u64::from(u16_at(&head, 6));
        let body = u64_at(&head, 8);
        let body_start = at.checked_add(header_size).ok_or("container header overflows")?;
        let body_end = body_start
            .checked_add(body)
            .filter(|&e| e <= end)
            .ok_or_else(|| format!("container at {at:#x} of {body} bytes runs past the section"))?;
        if header_size < CONTAINER_HEADER {
            return Err(format!("container at {at:#x} has a {header_size}-byte header"));
        }
        let mut entry = body_start;
        while entry + ENTRY_HEADER <= body_end {
            let h = read_range(src, size, entry, ENTRY_HEADER)?;
            let (kind, entry_header, payload) = (u16_at(&h, 0), u64::from(u32_at(&h, 4)), u64_at(&h, 8));
            if entry_header < ENTRY_HEADER {
                return Err(format!("entry at {entry:#x} has a {entry_header}-byte header"));
            }
            let arch = u32_at(&h, 28);
            let kind = match kind {
                KIND_PTX => Some(EntryKind::Ptx),
                KIND_ELF => Some(EntryKind::Cubin),
                _ => None, // other kinds (none known today) carry no code we judge
            };
            if let Some(kind) = kind {
                if out.len() >= MAX_ENTRIES {
                    return Err(format!("more than {MAX_ENTRIES} entries"));
                }
                out.push(Entry {
                    kind,
                    arch: ComputeCapability::new(arch / 10, arch % 10),
                    compressed: u64_at(&h, 40) & FLAG_COMPRESSED != 0,
                });
            }
            entry = entry
                .checked_add(entry_header)
                .and_then(|e| e.checked_add(payload))
                .filter(|&e| e <= body_end)
                .ok_or_else(|| format!("entry at {entry:#x} runs past its container"))?;
        }
        at = body_end.next_multiple_of(8);
    }
    Ok(out)
}

#[cfg(test)]
/// The fat binary entries of the ELF file at `path`; empty when it has no `.nv_fatbin`.
pub(crate) fn read_elf(path: &Path) -> Result<Vec<Entry>, FatbinError> {
    let file = File::open(path).map_err(io_err("opening", path))?;
    let size = file.metadata().map_err(io_err("reading", path))?.len();
    entries_of(&file, size).map_err(|why| FatbinError::Malformed { path: path.to_owned(), why })
}

#[cfg(test)]
/// The fat binary entries of an ELF image in memory.
pub(crate) fn parse_elf(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    entries_of(bytes, bytes.len() as u64)
}

fn entries_of<R: ReadAt + ?Sized>(src: &R, size: u64) -> Result<Vec<Entry>, String> {
    match find_section(src, size)? {
        Some((offset, len)) => parse_containers(src, size, offset, len),
        None => Ok(Vec::new()),
    }
}

/// The GPU code of a set of entries, `None` when there are none.
pub(crate) fn code_of(entries: &[Entry], from: String) -> Option<GpuCode> {
    if entries.is_empty() {
        return None;
    }
    let pick = |kind| entries.iter().filter(|e| e.kind == kind).map(|e| e.arch).collect::<BTreeSet<_>>();
    Some(GpuCode { cubins: pick(EntryKind::Cubin), ptx: pick(EntryKind::Ptx), from })
}

/// Whether `name` (a path inside the wheel or the site directory) is one of torch's own
/// libraries: `torch/lib/*.so*`.
fn is_torch_library(name: &str) -> bool {
    name.strip_prefix("torch/lib/").is_some_and(|f| !f.contains('/') && f.contains(".so"))
}

/// The GPU code of a torch wheel: the fat binary of its `torch/lib/libtorch_cuda.so`, else
/// of all its `torch/lib/*.so*` libraries together, each extracted in turn to a temporary file
/// under `tmp` (their headers are read by offset). `None` when no library carries GPU code (a
/// CPU build).
pub(crate) fn torch_wheel_code(wheel: &Path, tmp: &Path) -> Result<Option<GpuCode>, FatbinError> {
    let read = members_code(wheel, tmp, is_torch_library)?;
    // torch's kernels live in libtorch_cuda.so, built for TORCH_CUDA_ARCH_LIST (what
    // `torch.cuda.get_arch_list()` reports); other libraries it bundles may carry code for other
    // architectures, which does not make torch run there.
    let mut read = read;
    let main = read.iter().position(|(name, _)| name == "torch/lib/libtorch_cuda.so");
    let chosen: Vec<(String, Vec<Entry>)> = match main {
        Some(i) => vec![read.swap_remove(i)],
        None => read,
    };
    Ok(code_from(wheel, &chosen))
}

/// The GPU code of a wheel built from source (a CUDA extension): the fat binaries of every
/// shared object it carries, together. `None` when none carries GPU code.
pub fn extension_wheel_code(wheel: &Path, tmp: &Path) -> Result<Option<GpuCode>, String> {
    let read = members_code(wheel, tmp, |name| {
        let file = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
        std::path::Path::new(&file).extension().is_some_and(|e| e == "so") || file.contains(".so.")
    })
    .map_err(|e| e.to_string())?;
    Ok(code_from(wheel, &read))
}

/// The code of `chosen` members of `wheel`, with where it was read from.
fn code_from(wheel: &Path, chosen: &[(String, Vec<Entry>)]) -> Option<GpuCode> {
    let names: Vec<&str> = chosen.iter().map(|(n, _)| n.as_str()).collect();
    let from = format!(
        "the fat binaries (.nv_fatbin) of {} in {}",
        names.join(", "),
        wheel.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    );
    let entries: Vec<Entry> = chosen.iter().flat_map(|(_, e)| e.iter().copied()).collect();
    code_of(&entries, from)
}

/// The fat-binary entries of each member of `wheel` that `wanted` names and that is an ELF
/// file with any, each extracted in turn to a temporary file under `tmp`.
fn members_code(
    wheel: &Path,
    tmp: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<Entry>)>, FatbinError> {
    let werr = |why: String| FatbinError::Wheel { path: wheel.to_owned(), why };
    let file = File::open(wheel).map_err(io_err("opening", wheel))?;
    // Buffered: the zip crate reads the central directory a record at a time (deepspeed's
    // wheel took 5,000 read and seek calls unbuffered).
    let mut archive = zip::ZipArchive::new(io::BufReader::new(file)).map_err(|e| werr(e.to_string()))?;
    let names: Vec<String> = archive.file_names().filter(|n| wanted(n)).map(str::to_owned).collect();
    let mut read: Vec<(String, Vec<Entry>)> = Vec::new();
    for name in names {
        let mut member = archive.by_name(&name).map_err(|e| werr(e.to_string()))?;
        if member.size() > MAX_MEMBER {
            return Err(werr(format!("{name} is {} bytes, above the cap of {MAX_MEMBER}", member.size())));
        }
        let mut out =
            tempfile::NamedTempFile::new_in(tmp).map_err(io_err("creating a temporary file in", tmp))?;
        let copied = io::copy(&mut (&mut member).take(MAX_MEMBER), out.as_file_mut())
            .map_err(io_err("extracting", &wheel.join(&name)))?;
        let mut magic = [0u8; 4];
        if copied < 64 || ReadAt::read_at(out.as_file(), &mut magic, 0).is_err() || magic != *b"\x7fELF" {
            continue;
        }
        let found = entries_of(out.as_file(), copied)
            .map_err(|why| FatbinError::Malformed { path: wheel.join(&name), why })?;
        if !found.is_empty() {
            read.push((name, found));
        }
    }
    Ok(read)
}

/// Bumped when what [`torch_code_for_build`] and [`extension_code_for_build`] store changes.
const CACHE_VERSION: u32 = 1;

/// Which reading of a wheel a record holds: torch's main library, or every shared object of a
/// wheel built from source.
#[derive(Clone, Copy)]
enum Reading {
    Torch,
    Extension,
}

/// The GPU code of the locked torch wheel `filename` (content `sha256`) for a build: from the
/// cache's record of an earlier read, else read from the wheel in the cache's artifact
/// directory (`<cache>/artifacts/<sha256>/<filename>`) and recorded under
/// `<cache>/fatbin/`. `None` (with a warning logged) when the wheel is not at hand or cannot be
/// read: the knowledge base's row stands in.
pub fn torch_code_for_build(cache_root: &Path, filename: &str, sha256: &str) -> Option<GpuCode> {
    match recorded_code(cache_root, filename, sha256, Reading::Torch) {
        Ok(code) => code,
        Err(e) => {
            tracing::warn!("{e}: the torch build's GPU architectures come from the knowledge base");
            None
        }
    }
}

/// The GPU code of a wheel built from source (`filename`, content `sha256`, in the cache's
/// artifact directory), as [`extension_wheel_code`] reads it, recorded under `<cache>/fatbin/`
/// like torch's: a rebuild with nothing changed reads a small record, not every shared object
/// of every built wheel again.
pub fn extension_code_for_build(
    cache_root: &Path,
    filename: &str,
    sha256: &str,
) -> Result<Option<GpuCode>, String> {
    recorded_code(cache_root, filename, sha256, Reading::Extension)
}

fn recorded_code(
    cache_root: &Path,
    filename: &str,
    sha256: &str,
    reading: Reading,
) -> Result<Option<GpuCode>, String> {
    let safe = |s: &str| !s.is_empty() && !s.contains(['/', '\\']) && s != "." && s != "..";
    if !safe(filename) || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) || sha256.is_empty() {
        return Err(format!("{filename}: not a cached wheel's name and sha256"));
    }
    let prefix = match reading {
        Reading::Torch => "",
        Reading::Extension => "extension-",
    };
    let record = cache_root.join("fatbin").join(format!("{prefix}v{CACHE_VERSION}-{sha256}.json"));
    if let Some(code) = stackbuild_common::read_record::<Option<GpuCode>>(&record) {
        return Ok(code);
    }
    let wheel = cache_root.join("artifacts").join(sha256).join(filename);
    if !wheel.is_file() {
        return Err(format!("{filename} is not in the cache"));
    }
    let tmp = cache_root.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| FatbinError::from(io_err("creating", &tmp)(e)).to_string())?;
    let code = match reading {
        Reading::Torch => torch_wheel_code(&wheel, &tmp).map_err(|e| e.to_string())?,
        Reading::Extension => extension_wheel_code(&wheel, &tmp)?,
    };
    stackbuild_common::write_record(&record, &code);
    Ok(code)
}

#[cfg(test)]
mod tests;
