//! Whether the binary to install is statically linked: the hook runs as root on every container
//! start, and a dynamically linked one runs the dynamic loader first, which honours `LD_PRELOAD`
//! and `LD_LIBRARY_PATH` from whatever environment the hook was handed (hook/build.rs links it
//! statically; this refuses a build that is not).

use std::path::Path;

use super::InstallError;

/// Refuses a `binary` that runs a dynamic loader: an ELF file with a `PT_INTERP` program header
/// (the System V ABI's request for an interpreter, `ld-linux`, which the kernel runs before the
/// program and which honours `LD_PRELOAD`). A static PIE has none. Reads only the ELF header and
/// the program headers (at most 64 KiB).
pub fn check_static(binary: &Path) -> Result<(), InstallError> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const PT_INTERP: u32 = 3;
    let not_elf = |why: &str| InstallError::NotElf { binary: binary.to_owned(), why: why.to_owned() };
    let io = |source| InstallError::Io { path: binary.to_owned(), source };
    let mut file = std::fs::File::open(binary).map_err(io)?;
    let mut header = [0u8; 64];
    file.read_exact(&mut header).map_err(|_| not_elf("shorter than an ELF header"))?;
    if header[..4] != *b"\x7fELF" {
        return Err(not_elf("not an ELF file"));
    }
    let (wide, big) = match (header[4], header[5]) {
        (c @ (1 | 2), d @ (1 | 2)) => (c == 2, d == 2),
        _ => return Err(not_elf("unknown ELF class or byte order")),
    };
    let num = |bytes: &[u8]| -> u64 {
        let mut buf = [0u8; 8];
        if big {
            buf[8 - bytes.len()..].copy_from_slice(bytes);
            u64::from_be_bytes(buf)
        } else {
            buf[..bytes.len()].copy_from_slice(bytes);
            u64::from_le_bytes(buf)
        }
    };
    // e_phoff, e_phentsize, e_phnum (ELF32 and ELF64 layouts).
    let (phoff, phentsize, phnum) = if wide {
        (num(&header[0x20..0x28]), num(&header[0x36..0x38]), num(&header[0x38..0x3a]))
    } else {
        (num(&header[0x1c..0x20]), num(&header[0x2a..0x2c]), num(&header[0x2c..0x2e]))
    };
    let min_entry = if wide { 56 } else { 32 };
    let total = phentsize.saturating_mul(phnum);
    if phnum > 0 && (phentsize < min_entry || total > 64 * 1024) {
        return Err(not_elf("implausible program headers"));
    }
    let mut table = vec![0u8; usize::try_from(total).map_err(|_| not_elf("implausible program headers"))?];
    file.seek(SeekFrom::Start(phoff)).map_err(io)?;
    file.read_exact(&mut table).map_err(|_| not_elf("program headers past the end of the file"))?;
    for entry in table.chunks_exact(usize::try_from(phentsize).unwrap_or(usize::MAX).max(1)) {
        if num(&entry[..4]) != u64::from(PT_INTERP) {
            continue;
        }
        // p_offset and p_filesz: where the interpreter's path is.
        let (offset, size) = if wide {
            (num(&entry[8..16]), num(&entry[32..40]))
        } else {
            (num(&entry[4..8]), num(&entry[16..20]))
        };
        let mut name = vec![0u8; usize::try_from(size.min(4096)).unwrap_or(0)];
        let read = file.seek(SeekFrom::Start(offset)).and_then(|_| file.read_exact(&mut name));
        let interpreter = if read.is_ok() {
            String::from_utf8_lossy(name.split(|&b| b == 0).next().unwrap_or_default()).into_owned()
        } else {
            "(unreadable)".to_owned()
        };
        return Err(InstallError::Dynamic { binary: binary.to_owned(), interpreter });
    }
    Ok(())
}
