//! A build reads the torch build's GPU architectures from the fat binaries of the torch wheel it
//! installs (`torch/lib/*.so`, ELF section `.nv_fatbin`), not from the knowledge base: a stand-in
//! torch wheel of a release the table does not know, whose `libtorch_cuda.so` carries cubins for
//! `sm_80`, `sm_86` and `sm_90` and PTX for `compute_90`, gives the image that exact arch requirement.

use std::path::Path;
use std::process::Command;

mod common;
use common::have;

const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");

/// One fat binary entry (layout in `builder/crates/check/src/fatbin.rs`): kind 1 PTX, 2 cubin; arch `80`.
fn entry(kind: u16, arch: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(kind.to_le_bytes());
    b.extend(0x0101u16.to_le_bytes());
    b.extend(64u32.to_le_bytes());
    b.extend(8u64.to_le_bytes());
    b.extend([0u8; 8]);
    b.extend(7u16.to_le_bytes());
    b.extend(1u16.to_le_bytes());
    b.extend(arch.to_le_bytes());
    b.extend([0u8; 8]);
    b.extend(0x11u64.to_le_bytes());
    b.extend([0u8; 16]);
    b.extend([0xABu8; 8]);
    b
}

/// A little-endian ELF64 object whose `.nv_fatbin` holds one container of `entries`.
fn elf_with_fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
    let body = entries.concat();
    let mut fatbin = Vec::new();
    fatbin.extend(0xBA55_ED50u32.to_le_bytes());
    fatbin.extend(1u16.to_le_bytes());
    fatbin.extend(16u16.to_le_bytes());
    fatbin.extend((body.len() as u64).to_le_bytes());
    fatbin.extend(body);
    let names = b"\0.nv_fatbin\0.shstrtab\0";
    let names_off = 64 + fatbin.len() as u64;
    let shoff = (names_off + names.len() as u64).next_multiple_of(8);
    let mut b = Vec::new();
    b.extend(b"\x7fELF\x02\x01\x01\0");
    b.extend([0u8; 8]);
    b.extend(3u16.to_le_bytes());
    b.extend(62u16.to_le_bytes());
    b.extend(1u32.to_le_bytes());
    b.extend([0u8; 16]);
    b.extend(shoff.to_le_bytes());
    b.extend(0u32.to_le_bytes());
    for v in [64u16, 56, 0, 64, 3, 2] {
        b.extend(v.to_le_bytes());
    }
    b.extend(&fatbin);
    b.extend(names);
    b.resize(usize::try_from(shoff).unwrap(), 0);
    for (name, kind, offset, size) in
        [(0u32, 0u32, 0u64, 0u64), (1, 1, 64, fatbin.len() as u64), (12, 3, names_off, names.len() as u64)]
    {
        b.extend(name.to_le_bytes());
        b.extend(kind.to_le_bytes());
        b.extend([0u8; 16]);
        b.extend(offset.to_le_bytes());
        b.extend(size.to_le_bytes());
        b.extend([0u8; 8]);
        b.extend(8u64.to_le_bytes());
        b.extend(0u64.to_le_bytes());
    }
    b
}

/// Writes a wheel of `torch 2.99.0` for `cp311-cp311-linux_x86_64` holding `lib` as
/// `torch/lib/libtorch_cuda.so`, with a valid `RECORD` (Python writes the hashes).
fn stand_in_torch(dir: &Path, lib: &Path) {
    let script = r##"
import base64, hashlib, sys, zipfile
lib, out = sys.argv[1], sys.argv[2]
dist = "torch-2.99.0.dist-info"
members = [
    ("torch/__init__.py", b"# stand-in\n"),
    ("torch/lib/libtorch_cuda.so", open(lib, "rb").read()),
    (dist + "/METADATA", b"Metadata-Version: 2.1\nName: torch\nVersion: 2.99.0\n"),
    (dist + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"),
]
def line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"
record = "\n".join([line(n, d) for n, d in members] + [dist + "/RECORD,,"]) + "\n"
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for n, d in members + [(dist + "/RECORD", record.encode())]:
        z.writestr(n, d)
"##;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(lib)
        .arg(dir.join("torch-2.99.0-cp311-cp311-linux_x86_64.whl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn arch_requirement_comes_from_the_fat_binaries() {
    if !have("uv") || !have("python3") {
        eprintln!("skipped: needs uv and python3 (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let lib = tmp.path().join("libtorch_cuda.so");
    std::fs::write(&lib, elf_with_fatbin(&[entry(2, 80), entry(2, 86), entry(2, 90), entry(1, 90)])).unwrap();
    stand_in_torch(&wheels, &lib);
    let recipe = tmp.path().join("fat.toml");
    std::fs::write(
        &recipe,
        "[image]\nname = \"fat\"\ntag = \"test\"\n\n[base]\nscratch = true\n\n[python]\nversion = \"3.11\"\n\
         packages = []\n\n[[python.wheel]]\npath = \"wheels/torch-2.99.0-cp311-cp311-linux_x86_64.whl\"\n",
    )
    .unwrap();
    let layout = tmp.path().join("out");
    let out = Command::new(STACKBUILD)
        .arg(&recipe)
        .arg("--cache-dir")
        .arg(tmp.path().join("cache"))
        .arg("--out")
        .arg(&layout)
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "build failed: {}", String::from_utf8_lossy(&out.stderr));
    let image = stackbuild_image::read_layout_for(&layout, Some("test"), None).unwrap();
    let env = image.config.config.env.join("\n");
    // Orin (8.7) has no cubin of its own; 10.0 and up run through the PTX JIT.
    assert!(env.lines().any(|l| l == "STACKBUILD_REQUIRE_ARCH=arch>=8.0,arch!=8.7"), "{env}");
    // The result is recorded, and a second build (which reads the record) gives the same image.
    let records: Vec<_> = std::fs::read_dir(tmp.path().join("cache/fatbin")).unwrap().collect();
    assert_eq!(records.len(), 1);
    let again = Command::new(STACKBUILD)
        .arg(&recipe)
        .args(["--locked", "--cache-dir"])
        .arg(tmp.path().join("cache"))
        .arg("--out")
        .arg(&layout)
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(again.stdout, out.stdout, "same digest");
}
