//! Fat binaries built byte by byte: a minimal ELF64 with a `.nv_fatbin` section holding
//! containers and entries laid out as the module documentation describes.

use super::*;

/// One entry: kind, arch (`80`), flags, payload length.
fn entry(kind: u16, arch: u32, flags: u64, payload: usize) -> Vec<u8> {
    let header = 64u32;
    let mut b = Vec::new();
    b.extend(kind.to_le_bytes());
    b.extend(0x0101u16.to_le_bytes());
    b.extend(header.to_le_bytes());
    b.extend((payload as u64).to_le_bytes());
    b.extend(0u32.to_le_bytes()); // compressed size
    b.extend(0u32.to_le_bytes());
    b.extend(7u16.to_le_bytes()); // format minor
    b.extend(1u16.to_le_bytes()); // format major
    b.extend(arch.to_le_bytes());
    b.extend(0u32.to_le_bytes()); // name offset
    b.extend(0u32.to_le_bytes()); // name length
    b.extend(flags.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(0u64.to_le_bytes()); // decompressed size
    assert_eq!(b.len(), 64);
    b.extend(std::iter::repeat_n(0xAB, payload));
    b
}

/// A container of `entries`.
fn container(entries: &[Vec<u8>]) -> Vec<u8> {
    let body: Vec<u8> = entries.concat();
    let mut b = Vec::new();
    b.extend(FATBIN_MAGIC.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(16u16.to_le_bytes());
    b.extend((body.len() as u64).to_le_bytes());
    b.extend(body);
    b
}

/// A little-endian ELF64 shared object whose only sections are `name` (with `data`) and the
/// section-name table.
fn elf(name: &str, data: &[u8]) -> Vec<u8> {
    let mut names = vec![0u8];
    names.extend(name.as_bytes());
    names.push(0);
    let shstrtab_name = names.len();
    names.extend(b".shstrtab\0");
    let data_off = 64u64;
    let names_off = data_off + data.len() as u64;
    let shoff = (names_off + names.len() as u64).next_multiple_of(8);
    let mut b = Vec::new();
    b.extend(b"\x7fELF");
    b.extend([2, 1, 1, 0]);
    b.extend([0u8; 8]);
    b.extend(3u16.to_le_bytes()); // ET_DYN
    b.extend(62u16.to_le_bytes()); // EM_X86_64
    b.extend(1u32.to_le_bytes());
    b.extend(0u64.to_le_bytes()); // entry
    b.extend(0u64.to_le_bytes()); // phoff
    b.extend(shoff.to_le_bytes());
    b.extend(0u32.to_le_bytes()); // flags
    b.extend(64u16.to_le_bytes()); // ehsize
    b.extend(56u16.to_le_bytes()); // phentsize
    b.extend(0u16.to_le_bytes()); // phnum
    b.extend(64u16.to_le_bytes()); // shentsize
    b.extend(3u16.to_le_bytes()); // shnum
    b.extend(2u16.to_le_bytes()); // shstrndx
    assert_eq!(b.len(), 64);
    b.extend(data);
    b.extend(&names);
    b.resize(usize::try_from(shoff).unwrap(), 0);
    let section = |name: u32, kind: u32, offset: u64, size: u64| {
        let mut s = Vec::new();
        s.extend(name.to_le_bytes());
        s.extend(kind.to_le_bytes());
        s.extend(0u64.to_le_bytes()); // flags
        s.extend(0u64.to_le_bytes()); // addr
        s.extend(offset.to_le_bytes());
        s.extend(size.to_le_bytes());
        s.extend(0u32.to_le_bytes());
        s.extend(0u32.to_le_bytes());
        s.extend(8u64.to_le_bytes());
        s.extend(0u64.to_le_bytes());
        s
    };
    b.extend(section(0, 0, 0, 0));
    b.extend(section(1, 1, data_off, data.len() as u64));
    b.extend(section(u32::try_from(shstrtab_name).unwrap(), 3, names_off, names.len() as u64));
    b
}

fn cc(s: &str) -> ComputeCapability {
    s.parse().unwrap()
}

/// Cubins for `sm_80`, `sm_86`, `sm_90` (one compressed) and PTX for `compute_90`, in two containers
/// with alignment padding between them.
fn torch_like() -> Vec<u8> {
    let mut section = container(&[entry(2, 80, 0x11, 40), entry(2, 86, 0x2011, 13)]);
    section.resize(section.len().next_multiple_of(8), 0);
    section.extend(container(&[entry(2, 90, 0x11, 24), entry(1, 90, 0x2011, 7)]));
    elf(".nv_fatbin", &section)
}

#[test]
fn entries_name_kind_and_arch() {
    let entries = parse_elf(&torch_like()).unwrap();
    let summary: Vec<(EntryKind, String, bool)> =
        entries.iter().map(|e| (e.kind, e.arch.to_string(), e.compressed)).collect();
    assert_eq!(
        summary,
        [
            (EntryKind::Cubin, "8.0".into(), false),
            (EntryKind::Cubin, "8.6".into(), true),
            (EntryKind::Cubin, "9.0".into(), false),
            (EntryKind::Ptx, "9.0".into(), true),
        ]
    );
    let code = code_of(&entries, "test".into()).unwrap();
    assert_eq!(code.cubins, [cc("8.0"), cc("8.6"), cc("9.0")].into());
    assert_eq!(code.ptx, [cc("9.0")].into());
    // The exact set: Orin (8.7) needs its own cubin, 8.9 runs the 8.6 cubin, 10.0 and up only
    // through the PTX JIT.
    assert!(!code.runs_on(cc("8.7")));
    assert!(code.cubin_runs_on(cc("8.9")));
    assert!(!code.cubin_runs_on(cc("10.0")) && code.runs_on(cc("10.0")));
    assert_eq!(code.arch_set().to_string(), "arch>=8.0,arch!=8.7");
}

#[test]
fn two_digit_majors() {
    let section = container(&[entry(2, 100, 0, 8), entry(2, 120, 0, 8), entry(1, 120, 0, 8)]);
    let entries = parse_elf(&elf(".nv_fatbin", &section)).unwrap();
    let archs: Vec<String> = entries.iter().map(|e| e.arch.to_string()).collect();
    assert_eq!(archs, ["10.0", "12.0", "12.0"]);
}

#[test]
fn no_fatbin_section_is_no_code() {
    let bytes = elf(".rodata", &container(&[entry(2, 80, 0, 8)]));
    assert!(parse_elf(&bytes).unwrap().is_empty());
    assert!(code_of(&[], "x".into()).is_none());
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    // An entry whose payload runs past its container.
    let mut section = container(&[entry(2, 80, 0, 8)]);
    section[16 + 8] = 0xFF;
    let err = parse_elf(&elf(".nv_fatbin", &section)).unwrap_err();
    assert!(err.contains("runs past its container"), "{err}");
    // A container that claims more bytes than the section has.
    let mut section = container(&[entry(2, 80, 0, 8)]);
    section[8] = 0xFF;
    section[13] = 0x7F;
    assert!(parse_elf(&elf(".nv_fatbin", &section)).is_err());
    // Not ELF, and truncated ELF.
    assert!(parse_elf(b"not an elf file at all, not even close to one; just some text here...").is_err());
    let whole = torch_like();
    for cut in [10, 64, whole.len() - 20] {
        assert!(parse_elf(&whole[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn reads_files_and_wheels() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libtorch_cuda.so");
    std::fs::write(&lib, torch_like()).unwrap();
    assert_eq!(read_elf(&lib).unwrap().len(), 4);

    let wheel = dir.path().join("torch-9.9.0-cp312-cp312-manylinux_2_28_x86_64.whl");
    let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
    let options = zip::write::SimpleFileOptions::default();
    zip.start_file("torch/__init__.py", options).unwrap();
    zip.write_all(b"# torch\n").unwrap();
    zip.start_file("torch/lib/libtorch_cuda.so", options).unwrap();
    zip.write_all(&torch_like()).unwrap();
    zip.start_file("torch/lib/libc10.so", options).unwrap();
    zip.write_all(&elf(".text", b"code")).unwrap();
    // A bundled library with code for other architectures does not widen torch's set.
    zip.start_file("torch/lib/libnvshmem_host.so.3", options).unwrap();
    zip.write_all(&elf(".nv_fatbin", &container(&[entry(2, 100, 0, 8)]))).unwrap();
    zip.start_file("torch/lib/libtext.so.1", options).unwrap();
    zip.write_all(b"not ELF").unwrap();
    zip.finish().unwrap();
    let code = torch_wheel_code(&wheel, dir.path()).unwrap().unwrap();
    assert_eq!(code.arch_set().to_string(), "arch>=8.0,arch!=8.7");
    assert!(code.from.contains("torch/lib/libtorch_cuda.so"), "{}", code.from);
    assert!(!code.from.contains("libc10") && !code.from.contains("nvshmem"), "{}", code.from);
    // Without libtorch_cuda.so, every library with GPU code counts.
    let other = dir.path().join("torch-9.9.1-cp312-cp312-manylinux_2_28_x86_64.whl");
    let mut zip = zip::ZipWriter::new(File::create(&other).unwrap());
    for (name, arch) in [("torch/lib/liba.so", 80), ("torch/lib/libb.so", 100)] {
        zip.start_file(name, options).unwrap();
        zip.write_all(&elf(".nv_fatbin", &container(&[entry(2, arch, 0, 8)]))).unwrap();
    }
    zip.finish().unwrap();
    let code = torch_wheel_code(&other, dir.path()).unwrap().unwrap();
    assert_eq!(code.cubins, [cc("8.0"), cc("10.0")].into());
}

/// A real CUDA library (a `.so`, or a torch wheel) named by `STACKBUILD_FATBIN_SAMPLE`: every
/// entry has a plausible architecture, and the code summary is printed.
#[test]
#[ignore = "needs a real CUDA library: STACKBUILD_FATBIN_SAMPLE=/path/to/libX.so"]
fn reads_a_real_library() {
    let path = PathBuf::from(std::env::var("STACKBUILD_FATBIN_SAMPLE").unwrap());
    let entries = read_elf(&path).unwrap();
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|e| (3..=15).contains(&e.arch.major)), "{entries:?}");
    let compressed = entries.iter().filter(|e| e.compressed).count();
    let code = code_of(&entries, path.display().to_string()).unwrap();
    eprintln!("{} entries ({compressed} compressed): {}", entries.len(), code.describe());
    eprintln!("runs on {}", code.arch_set().describe());
}
