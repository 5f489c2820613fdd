//! Just enough ELF to do what `ld.so` does when it maps an object: the header (class, machine,
//! type), the program headers, `PT_INTERP`, and from `PT_DYNAMIC` the `DT_NEEDED`, `DT_SONAME`,
//! `DT_RPATH`, `DT_RUNPATH` strings and `DT_FLAGS_1`.
//!
//! Parsing reads only those parts, by offset, so a 1 GB `libtorch_cuda.so` whose `.dynamic`
//! sits after `.text` costs a handful of small reads. Section headers are never used: `ld.so`
//! ignores them, and stripped or oddly linked objects may lack them. See the System V gABI,
//! <https://refspecs.linuxfoundation.org/elf/gabi4+/ch5.dynamic.html>, and glibc's
//! `elf/dl-load.c` (`open_verify`, `_dl_map_object_from_fd`).

use std::io;

use goblin::container::Ctx;
use goblin::elf::dynamic::{Dynamic, DF_1_NODEFLIB, DT_FLAGS_1, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME};
use goblin::elf::dynamic::{DT_STRSZ, DT_STRTAB};
use goblin::elf::header::{ELFCLASS64, ET_DYN, ET_EXEC};
use goblin::elf::program_header::{ProgramHeader, PT_DYNAMIC, PT_INTERP, PT_LOAD};
use goblin::elf::Elf;

pub(super) use stackbuild_common::ReadAt;

/// The four bytes every ELF file starts with.
pub(super) const MAGIC: [u8; 4] = *b"\x7fELF";
/// Largest program header table read (65535 entries of 56 bytes fit well below this).
const MAX_PHDRS: u64 = 4 << 20;
/// Largest `PT_DYNAMIC` segment read; real ones hold a few dozen entries.
const MAX_DYNAMIC: u64 = 1 << 20;
/// Longest string read from the dynamic string table or `PT_INTERP`. `PATH_MAX` is 4096.
const MAX_STRING: u64 = 4096;

/// What the dynamic loader needs to know about one ELF file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct ElfInfo {
    /// `ELFCLASS64` (true) or `ELFCLASS32`.
    pub class64: bool,
    /// `e_machine`.
    pub machine: u16,
    /// `e_type` (`ET_EXEC`, `ET_DYN`, ...).
    pub e_type: u16,
    /// The program interpreter (`PT_INTERP`), present in dynamically linked executables.
    pub interp: Option<String>,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    /// `DT_RPATH`, unexpanded.
    pub rpath: Option<String>,
    /// `DT_RUNPATH`, unexpanded.
    pub runpath: Option<String>,
    /// `DF_1_NODEFLIB`: the object's dependencies are not looked up in the cache or the
    /// default directories.
    pub nodeflib: bool,
}

impl ElfInfo {
    /// Whether the loader maps this kind of file (executables and shared objects; not
    /// relocatable objects or core dumps).
    pub(super) fn is_loadable(&self) -> bool {
        self.e_type == ET_EXEC || self.e_type == ET_DYN
    }
}

/// Why a file with the ELF magic could not be parsed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ElfError {
    /// Reading failed.
    #[error("reading: {0}")]
    Io(#[from] io::Error),
    /// goblin refused a structure.
    #[error("{0}")]
    Goblin(#[from] goblin::error::Error),
    /// A structure lies outside the file or is implausibly large.
    #[error("{0}")]
    Malformed(String),
}

/// Reads exactly `len` bytes at `offset` of a file of `size` bytes.
fn read_range<R: ReadAt + ?Sized>(src: &R, size: u64, offset: u64, len: u64) -> Result<Vec<u8>, ElfError> {
    let end = offset.checked_add(len).filter(|&e| e <= size).ok_or_else(|| {
        ElfError::Malformed(format!("{len} bytes at offset {offset:#x} lie past the end ({size} bytes)"))
    })?;
    let len = usize::try_from(end - offset).map_err(|_| ElfError::Malformed("range too large".into()))?;
    let mut buf = vec![0; len];
    let mut done = 0;
    while done < len {
        let n = src.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(ElfError::Malformed(format!("file ends before offset {:#x}", offset + done as u64)));
        }
        done += n;
    }
    Ok(buf)
}

/// Reads a NUL-terminated string at `offset`, not past `limit` (exclusive).
fn read_cstr<R: ReadAt + ?Sized>(src: &R, size: u64, offset: u64, limit: u64) -> Result<String, ElfError> {
    let limit = limit.min(size);
    if offset >= limit {
        return Err(ElfError::Malformed(format!("string at {offset:#x} outside its table")));
    }
    let bytes = read_range(src, size, offset, (limit - offset).min(MAX_STRING))?;
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| ElfError::Malformed(format!("unterminated string at {offset:#x}")))?;
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// The file offset of virtual address `addr`, through the `PT_LOAD` segment that maps it (what
/// glibc does with `D_PTR` after relocation, in reverse).
fn vaddr_to_offset(phdrs: &[ProgramHeader], addr: u64) -> Option<u64> {
    phdrs.iter().filter(|p| p.p_type == PT_LOAD).find_map(|p| {
        let delta = addr.checked_sub(p.p_vaddr)?;
        (delta < p.p_filesz).then(|| p.p_offset.checked_add(delta)).flatten()
    })
}

/// Parses the ELF file `src` of `size` bytes (which starts with [`MAGIC`]).
pub(super) fn parse<R: ReadAt + ?Sized>(src: &R, size: u64) -> Result<ElfInfo, ElfError> {
    let head = read_range(src, size, 0, size.min(64))?;
    let header = Elf::parse_header(&head)?;
    let container = header.container()?;
    let ctx = Ctx::new(container, header.endianness()?);
    let mut info = ElfInfo {
        class64: header.e_ident[goblin::elf::header::EI_CLASS] == ELFCLASS64,
        machine: header.e_machine,
        e_type: header.e_type,
        ..ElfInfo::default()
    };
    let entsize = ProgramHeader::size(ctx) as u64;
    if header.e_phnum == 0 {
        return Ok(info);
    }
    if u64::from(header.e_phentsize) != entsize {
        return Err(ElfError::Malformed(format!(
            "program header entries of {} bytes, expected {entsize}",
            header.e_phentsize
        )));
    }
    let table = u64::from(header.e_phnum) * entsize;
    if table > MAX_PHDRS {
        return Err(ElfError::Malformed(format!("{} program headers", header.e_phnum)));
    }
    let bytes = read_range(src, size, header.e_phoff, table)?;
    let phdrs = ProgramHeader::parse(&bytes, 0, usize::from(header.e_phnum), ctx)?;

    if let Some(interp) = phdrs.iter().find(|p| p.p_type == PT_INTERP) {
        let end = interp.p_offset.saturating_add(interp.p_filesz);
        info.interp = Some(read_cstr(src, size, interp.p_offset, end)?);
    }
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return Ok(info);
    };
    if dynamic.p_filesz > MAX_DYNAMIC {
        return Err(ElfError::Malformed(format!("PT_DYNAMIC of {} bytes", dynamic.p_filesz)));
    }
    // goblin parses the segment from a buffer holding the whole file; hand it just the segment,
    // with a copy of the program header that says it starts at offset 0.
    let dyn_bytes = read_range(src, size, dynamic.p_offset, dynamic.p_filesz)?;
    let mut local = dynamic.clone();
    local.p_offset = 0;
    let Some(parsed) = Dynamic::parse(&dyn_bytes, &[local], ctx)? else {
        return Ok(info);
    };
    let tag = |t: u64| parsed.dyns.iter().find(|d| d.d_tag == t).map(|d| d.d_val);
    info.nodeflib = tag(DT_FLAGS_1).is_some_and(|f| f & DF_1_NODEFLIB != 0);
    let has_strings =
        parsed.dyns.iter().any(|d| [DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH].contains(&d.d_tag));
    if !has_strings {
        return Ok(info);
    }
    let strtab_addr =
        tag(DT_STRTAB).ok_or_else(|| ElfError::Malformed("DT_NEEDED without DT_STRTAB".into()))?;
    let strtab = vaddr_to_offset(&phdrs, strtab_addr).ok_or_else(|| {
        ElfError::Malformed(format!("DT_STRTAB {strtab_addr:#x} is not in a PT_LOAD segment"))
    })?;
    let strsz = tag(DT_STRSZ).unwrap_or(size.saturating_sub(strtab));
    // The part of the table holding the strings asked for, read once, front to back (a file
    // read as a stream, [`super::fs::Large::Once`], cannot go back for strings in another
    // order); usually a few hundred bytes, not the whole table.
    let wanted =
        parsed.dyns.iter().filter(|d| [DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH].contains(&d.d_tag));
    let first = wanted.clone().map(|d| d.d_val).min().unwrap_or(0);
    let last = wanted.map(|d| d.d_val).max().unwrap_or(0);
    let span_end = last.saturating_add(MAX_STRING).min(strsz).min(size.saturating_sub(strtab));
    if first >= span_end {
        return Err(ElfError::Malformed(format!(
            "string at {:#x} outside its table",
            strtab.saturating_add(first)
        )));
    }
    let span = read_range(src, size, strtab.saturating_add(first), span_end - first)?;
    for d in &parsed.dyns {
        let string = || {
            let at = d
                .d_val
                .checked_sub(first)
                .ok_or_else(|| ElfError::Malformed("string before its table".into()))?;
            read_cstr(span.as_slice(), span.len() as u64, at, span.len() as u64)
        };
        match d.d_tag {
            DT_NEEDED => info.needed.push(string()?),
            DT_SONAME => info.soname = Some(string()?),
            DT_RPATH => info.rpath = Some(string()?),
            DT_RUNPATH => info.runpath = Some(string()?),
            _ => {}
        }
    }
    // glibc drops DT_RPATH when DT_RUNPATH is present (elf/get-dynamic-info.h); both are kept
    // here and the resolver decides.
    Ok(info)
}
