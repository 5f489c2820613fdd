//! The audit's tests: synthetic root filesystems (`Tree`, the ELF writers) here, OCI layouts in
//! `layouts`, real objects built with `cc` in `real`.

use std::os::unix::fs::symlink;
use std::process::Command;
use std::sync::Arc;

use std::collections::BTreeMap;
use std::time::Duration;

use goblin::elf::header::{EM_386, EM_AARCH64, EM_ARM, EM_CUDA, EM_X86_64};

use super::fs::{ElfState, FileInfo, Kind};
use super::report::{Finding, FindingKind};
use super::search::{
    expand_tokens, family_name, file_version, glob_match, is_driver_library, is_python_module,
};
use super::*;
use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_image::LayerWriter;
use stackbuild_image::{Image, ImageConfig, RuntimeConfig};

mod layouts;
mod real;

const LDSO: &str = "/lib64/ld-linux-x86-64.so.2";

/// A synthetic ELF file: header, program headers, `PT_INTERP`, `.dynstr` and `PT_DYNAMIC`,
/// laid out in one `PT_LOAD` segment whose addresses equal file offsets (plus an offset, to
/// check address translation).
#[derive(Clone, Debug)]
struct Spec {
    class64: bool,
    machine: u16,
    e_type: u16,
    interp: Option<&'static str>,
    soname: Option<String>,
    needed: Vec<String>,
    rpath: Option<String>,
    runpath: Option<String>,
    nodeflib: bool,
    /// Bytes between the string table and the dynamic section (".text").
    padding: usize,
}

/// Virtual address of file offset 0.
const BASE: u64 = 0x40_0000;

fn lib(soname: &str) -> Spec {
    Spec {
        class64: true,
        machine: EM_X86_64,
        e_type: goblin::elf::header::ET_DYN,
        interp: None,
        soname: Some(soname.into()),
        needed: Vec::new(),
        rpath: None,
        runpath: None,
        nodeflib: false,
        padding: 0,
    }
}

fn exe() -> Spec {
    Spec { interp: Some(LDSO), soname: None, ..lib("") }
}

impl Spec {
    fn needs(mut self, names: &[&str]) -> Self {
        self.needed = names.iter().map(|s| (*s).to_string()).collect();
        self
    }
    fn runpath(mut self, r: &str) -> Self {
        self.runpath = Some(r.into());
        self
    }
    fn rpath(mut self, r: &str) -> Self {
        self.rpath = Some(r.into());
        self
    }
    fn machine(mut self, class64: bool, machine: u16) -> Self {
        self.class64 = class64;
        self.machine = machine;
        self
    }

    fn build(&self) -> Vec<u8> {
        let word = if self.class64 { 8 } else { 4 };
        let ehsize = if self.class64 { 64 } else { 52 };
        let phentsize = if self.class64 { 56 } else { 32 };
        let phnum = 2 + usize::from(self.interp.is_some());
        let interp_off = ehsize + phnum * phentsize;
        let interp = self.interp.map(|i| format!("{i}\0")).unwrap_or_default();
        let strtab_off = interp_off + interp.len();
        let mut strtab = vec![0u8];
        let mut dyns: Vec<(u64, u64)> = Vec::new();
        let mut add_str = |tag: u64, s: &str, dyns: &mut Vec<(u64, u64)>| {
            dyns.push((tag, strtab.len() as u64));
            strtab.extend_from_slice(s.as_bytes());
            strtab.push(0);
        };
        for n in &self.needed {
            add_str(1, n, &mut dyns);
        }
        if let Some(s) = &self.soname {
            add_str(14, s, &mut dyns);
        }
        if let Some(r) = &self.rpath {
            add_str(15, r, &mut dyns);
        }
        if let Some(r) = &self.runpath {
            add_str(29, r, &mut dyns);
        }
        if self.nodeflib {
            dyns.push((0x6fff_fffb, 0x800));
        }
        dyns.push((5, BASE + strtab_off as u64));
        dyns.push((10, strtab.len() as u64));
        dyns.push((0, 0));
        let dyn_off = strtab_off + strtab.len() + self.padding;
        let dyn_size = dyns.len() * 2 * word;
        let total = dyn_off + dyn_size;

        let mut out = Vec::with_capacity(total);
        let w = |out: &mut Vec<u8>, v: u64| {
            if self.class64 {
                out.extend_from_slice(&v.to_le_bytes());
            } else {
                out.extend_from_slice(&u32::try_from(v).unwrap().to_le_bytes());
            }
        };
        out.extend_from_slice(b"\x7fELF");
        out.extend_from_slice(&[if self.class64 { 2 } else { 1 }, 1, 1, 0]);
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&self.e_type.to_le_bytes());
        out.extend_from_slice(&self.machine.to_le_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        w(&mut out, 0); // e_entry
        w(&mut out, ehsize as u64); // e_phoff
        w(&mut out, 0); // e_shoff
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [ehsize, phentsize, phnum, 64, 0, 0] {
            out.extend_from_slice(&u16::try_from(v).unwrap().to_le_bytes());
        }
        assert_eq!(out.len(), ehsize);
        let phdr = |out: &mut Vec<u8>, ty: u32, off: usize, size: usize| {
            let (off, size) = (off as u64, size as u64);
            if self.class64 {
                out.extend_from_slice(&ty.to_le_bytes());
                out.extend_from_slice(&4u32.to_le_bytes());
                for v in [off, BASE + off, BASE + off, size, size, 8] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            } else {
                out.extend_from_slice(&ty.to_le_bytes());
                for v in [off, BASE + off, BASE + off, size, size, 4, 4] {
                    out.extend_from_slice(&u32::try_from(v).unwrap().to_le_bytes());
                }
            }
        };
        if !interp.is_empty() {
            phdr(&mut out, 3, interp_off, interp.len());
        }
        phdr(&mut out, 1, 0, total);
        phdr(&mut out, 2, dyn_off, dyn_size);
        out.extend_from_slice(interp.as_bytes());
        out.extend_from_slice(&strtab);
        out.resize(dyn_off, 0xcc);
        for (tag, val) in dyns {
            w(&mut out, tag);
            w(&mut out, val);
        }
        assert_eq!(out.len(), total);
        out
    }
}

/// A fabricated root filesystem.
struct Tree(tempfile::TempDir);

impl Tree {
    /// An empty usr-merged Debian-like tree: `/lib -> usr/lib`, `/lib64 -> usr/lib64`, with the
    /// loader and libc.
    fn debian() -> Self {
        let t = Self(tempfile::tempdir().unwrap());
        t.symlink("/lib", "usr/lib");
        t.symlink("/lib64", "usr/lib64");
        t.symlink("/usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
        t.elf("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", &lib("ld-linux-x86-64.so.2"));
        t.elf("/usr/lib/x86_64-linux-gnu/libc.so.6", &lib("libc.so.6").needs(&["ld-linux-x86-64.so.2"]));
        t
    }

    fn host(&self, path: &str) -> PathBuf {
        self.0.path().join(path.trim_start_matches('/'))
    }

    fn file(&self, path: &str, bytes: &[u8]) -> &Self {
        let p = self.host(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
        self
    }

    fn elf(&self, path: &str, spec: &Spec) -> &Self {
        self.file(path, &spec.build())
    }

    fn symlink(&self, path: &str, target: &str) -> &Self {
        let p = self.host(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
        self
    }

    fn audit(&self, env: &[&str]) -> AuditReport {
        let env: Vec<String> = env.iter().map(|s| (*s).to_string()).collect();
        let mut report = audit_dir(self.0.path(), &env, "linux/amd64").unwrap();
        report.elapsed = Duration::ZERO;
        report
    }
}

fn kinds(findings: &[Finding]) -> Vec<(FindingKind, &str, Option<&str>)> {
    findings.iter().map(|f| (f.kind, f.path.as_str(), f.soname.as_deref())).collect()
}

#[test]
fn parses_synthetic_elf_from_memory_and_file() {
    let spec = Spec { padding: 100_000, nodeflib: true, ..lib("libx.so.1") }
        .needs(&["liba.so.1", "libb.so.2"])
        .runpath("$ORIGIN/../lib")
        .rpath("/opt/r");
    let bytes = spec.build();
    let info = elf::parse(bytes.as_slice(), bytes.len() as u64).unwrap();
    assert_eq!(info.needed, ["liba.so.1", "libb.so.2"]);
    assert_eq!(info.soname.as_deref(), Some("libx.so.1"));
    assert_eq!(info.runpath.as_deref(), Some("$ORIGIN/../lib"));
    assert_eq!(info.rpath.as_deref(), Some("/opt/r"));
    assert!(info.class64 && info.nodeflib && info.interp.is_none());
    assert_eq!(info.machine, EM_X86_64);

    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), &bytes).unwrap();
    let file = std::fs::File::open(tmp.path()).unwrap();
    assert_eq!(elf::parse(&file, bytes.len() as u64).unwrap(), info);

    let bytes32 = exe().machine(false, EM_386).needs(&["libc.so.6"]).build();
    let info32 = elf::parse(bytes32.as_slice(), bytes32.len() as u64).unwrap();
    assert!(!info32.class64);
    assert_eq!(info32.machine, EM_386);
    assert_eq!(info32.interp.as_deref(), Some(LDSO));
    assert_eq!(info32.needed, ["libc.so.6"]);

    // Truncated and garbage files are errors, not panics.
    for cut in [3, 20, 64, 100, bytes.len() - 1] {
        let _ = elf::parse(&bytes[..cut], cut as u64);
    }
    assert!(elf::parse(&bytes[..bytes.len() - 8], bytes.len() as u64 - 8).is_err());
}

#[test]
fn parses_real_host_binaries() {
    let ls = Path::new("/bin/ls");
    if std::env::consts::ARCH != "x86_64" || !ls.is_file() {
        eprintln!("note: not an x86_64 host with /bin/ls; skipping");
        return;
    }
    let bytes = std::fs::read(ls).unwrap();
    let info = elf::parse(bytes.as_slice(), bytes.len() as u64).unwrap();
    assert_eq!(info.machine, EM_X86_64);
    assert!(info.needed.iter().any(|n| n == "libc.so.6"), "{info:?}");
    assert_eq!(info.interp.as_deref(), Some(LDSO));
    if let Ok(bytes) = std::fs::read("/bin/busybox") {
        let info = elf::parse(bytes.as_slice(), bytes.len() as u64).unwrap();
        assert!(info.needed.is_empty() && info.interp.is_none(), "{info:?}");
    }
}

#[test]
fn token_expansion_and_globs() {
    let abi64 = parse_platform("linux/amd64").unwrap().native;
    let abi32 = parse_platform("linux/amd64").unwrap().compat.unwrap();
    assert_eq!(expand_tokens("$ORIGIN/../lib", "/opt/a/bin", abi64).as_deref(), Some("/opt/a/bin/../lib"));
    assert_eq!(expand_tokens("${ORIGIN}/x:", "/o", abi64).as_deref(), Some("/o/x:"));
    assert_eq!(expand_tokens("/usr/$LIB/$PLATFORM", "/o", abi64).as_deref(), Some("/usr/lib64/x86_64"));
    assert_eq!(expand_tokens("/usr/${LIB}", "/o", abi32).as_deref(), Some("/usr/lib"));
    assert_eq!(expand_tokens("/a/$UNKNOWN/b", "/o", abi64).as_deref(), Some("/a/$UNKNOWN/b"));
    assert_eq!(expand_tokens("relative/dir", "/o", abi64), None);
    assert_eq!(expand_tokens("", "/o", abi64), None);

    assert!(glob_match(b"*.conf", b"cuda.conf"));
    assert!(!glob_match(b"*.conf", b"cuda.conf.bak"));
    assert!(glob_match(b"lib?.conf", b"lib6.conf"));
    assert!(glob_match(b"[0-9]*", b"000_cuda"));
    assert!(!glob_match(b"[!0-9]*", b"000_cuda"));
    assert!(glob_match(b"[]]", b"]"));
    assert!(!glob_match(b"[abc", b"a"));

    assert!(is_driver_library("libcuda.so.1") && is_driver_library("libnvidia-ml.so.1"));
    assert!(is_driver_library("libEGL_nvidia.so.0") && is_driver_library("libcuda.so"));
    assert!(!is_driver_library("libcudart.so.12") && !is_driver_library("libcudnn.so.8"));
    assert_eq!(file_version("/a/libcudnn.so.8.9.7"), Some("8.9.7"));
    assert_eq!(file_version("/a/libcudnn.so"), None);
    assert!(parse_platform("linux/mips64").is_none());
    assert!(parse_platform("linux/arm64/v8").is_some());
}

#[test]
fn resolved_tree_has_no_findings() {
    let t = Tree::debian();
    t.elf("/usr/bin/app", &exe().needs(&["libfoo.so.1", "libc.so.6"]).runpath("$ORIGIN/../lib/app"));
    t.elf("/usr/lib/app/libfoo.so.1.2.3", &lib("libfoo.so.1").needs(&["libbar.so.2", "libc.so.6"]));
    t.symlink("/usr/lib/app/libfoo.so.1", "libfoo.so.1.2.3");
    // Found through ld.so.conf.d (include with a glob, comments, a relative include).
    t.file("/etc/ld.so.conf", b"# comment\ninclude /etc/ld.so.conf.d/*.conf\n");
    t.file("/etc/ld.so.conf.d/a.conf", b"/opt/bar/lib  # bar\ninclude more/*.conf\n");
    t.file("/etc/ld.so.conf.d/more/b.conf", b"/opt/baz/lib\n");
    t.elf("/opt/bar/lib/libbar.so.2", &lib("libbar.so.2").needs(&["libbaz.so.3"]));
    t.elf("/opt/baz/lib/libbaz.so.3", &lib("libbaz.so.3"));
    let report = t.audit(&["PATH=/usr/bin"]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert!(report.warnings.is_empty(), "{}", report.render_human());
    assert_eq!(report.objects_scanned, 6);
    insta::assert_snapshot!(report.render_human(), @"6 ELF objects scanned in 0.00s: 0 errors, 0 warnings");
}

#[test]
fn unresolved_and_interpreter() {
    let t = Tree::debian();
    t.elf("/usr/bin/app", &exe().needs(&["libmissing.so.1", "libc.so.6"]).runpath("/opt/app/lib"));
    t.elf("/usr/bin/noloader", &Spec { interp: Some("/lib/ld-musl-x86_64.so.1"), ..exe() });
    // A file that is not ELF where the loader looks first stops the search.
    t.file("/usr/lib/x86_64-linux-gnu/libscript.so.1", b"/* GNU ld script */\nGROUP ( libother.so )\n");
    t.elf("/usr/lib/libscript.so.1", &lib("libscript.so.1"));
    t.elf("/usr/bin/scripted", &exe().needs(&["libscript.so.1"]));
    let report = t.audit(&["LD_LIBRARY_PATH=/usr/local/lib:relative/dir"]);
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, "/usr/bin/app", Some("libmissing.so.1")),
            (FindingKind::Unresolved, "/usr/bin/noloader", Some("/lib/ld-musl-x86_64.so.1")),
            (FindingKind::Unresolved, "/usr/bin/scripted", Some("libscript.so.1")),
        ]
    );
    assert_eq!(kinds(&report.warnings), [(FindingKind::Unchecked, "LD_LIBRARY_PATH", None)]);
    insta::assert_snapshot!("unresolved", report.render_human());
}

#[test]
fn host_driver_libraries_are_requirements() {
    let t = Tree::debian();
    let gpu = lib("libgpu.so.1").needs(&["libcuda.so.1", "libnvidia-ml.so.1", "libc.so.6"]);
    t.elf("/opt/app/lib/libgpu.so.1", &gpu);
    t.elf("/opt/app/lib/libenc.so.1", &lib("libenc.so.1").needs(&["libnvidia-encode.so.1", "libcuda.so.1"]));
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(
        report.host_provided,
        BTreeMap::from([
            (
                "libcuda.so.1".into(),
                vec!["/opt/app/lib/libenc.so.1".into(), "/opt/app/lib/libgpu.so.1".into()]
            ),
            ("libnvidia-encode.so.1".into(), vec!["/opt/app/lib/libenc.so.1".into()]),
            ("libnvidia-ml.so.1".into(), vec!["/opt/app/lib/libgpu.so.1".into()]),
        ])
    );
    insta::assert_snapshot!("host_provided", report.render_human());
}

/// The torch + cuDNN layout of `compatibility.md`: the wheel's RUNPATH pins
/// `nvidia/cudnn/lib/libcudnn.so.8` (8.9.2) and a system 8.9.7 sits on `LD_LIBRARY_PATH`.
fn torch_tree() -> Tree {
    let t = Tree::debian();
    let site = "/usr/local/lib/python3.11/site-packages";
    t.elf(
        &format!("{site}/torch/lib/libtorch_cuda.so"),
        &lib("libtorch_cuda.so")
            .needs(&["libcudnn.so.8", "libc.so.6"])
            .runpath("$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN"),
    );
    t.elf(&format!("{site}/nvidia/cudnn/lib/libcudnn.so.8"), &lib("libcudnn.so.8"));
    t.symlink("/usr/local/cuda", "cuda-12.1");
    t.elf("/usr/local/cuda-12.1/lib64/libcudnn.so.8.9.7", &lib("libcudnn.so.8"));
    t.symlink("/usr/local/cuda-12.1/lib64/libcudnn.so.8", "libcudnn.so.8.9.7");
    t
}

#[test]
fn ld_library_path_shadows_the_pinned_cudnn() {
    let t = torch_tree();
    let report = t.audit(&["LD_LIBRARY_PATH=/usr/local/cuda/lib64"]);
    assert_eq!(
        kinds(&report.errors),
        [(
            FindingKind::Shadowed,
            "/usr/local/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
            Some("libcudnn.so.8")
        )]
    );
    let message = &report.errors[0].message;
    assert!(message
        .contains("/usr/local/cuda/lib64/libcudnn.so.8 -> /usr/local/cuda-12.1/lib64/libcudnn.so.8.9.7"));
    assert!(
        message.contains("version 8.9.7") && message.contains("nvidia/cudnn/lib/libcudnn.so.8 (version 8,")
    );
    insta::assert_snapshot!("shadowed", report.render_human());

    // Without LD_LIBRARY_PATH the RUNPATH wins and all is well.
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
}

#[test]
fn libcuda_stub_on_the_search_path() {
    let t = Tree::debian();
    t.elf("/usr/local/cuda-12.1/lib64/stubs/libcuda.so", &lib("libcuda.so.1"));
    t.symlink("/usr/local/cuda", "cuda-12.1");
    t.elf("/opt/app/libgpu.so", &lib("libgpu.so").needs(&["libcuda.so.1"]));
    // Not on any search path: not an error.
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(report.host_provided["libcuda.so.1"], ["/opt/app/libgpu.so"]);

    let report = t.audit(&["LD_LIBRARY_PATH=/usr/local/cuda/lib64/stubs:/usr/local/nvidia/lib64"]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Stub, "/usr/local/cuda-12.1/lib64/stubs/libcuda.so", Some("libcuda.so"))]
    );
    assert!(report.errors[0].message.contains("a libcuda stub is reachable via LD_LIBRARY_PATH"));
    insta::assert_snapshot!("stub", report.render_human());

    // A libcuda.so.1 in a default directory, found by the object's own lookup too, and another
    // driver library (a warning).
    let t = Tree::debian();
    t.elf("/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", &lib("libcuda.so.1"));
    t.symlink("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.535.104.05");
    t.elf("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", &lib("libnvidia-ml.so.1"));
    t.elf("/opt/app/libgpu.so", &lib("libgpu.so").needs(&["libcuda.so.1"]));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Stub, "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05", Some("libcuda.so.1"))]
    );
    assert_eq!(
        kinds(&report.warnings),
        [(
            FindingKind::DriverLibrary,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            Some("libnvidia-ml.so.1")
        )]
    );
}

#[test]
fn machine_mismatch() {
    let t = Tree::debian();
    t.elf("/usr/bin/app", &exe().needs(&["libc.so.6"]));
    let report = audit_dir(t.0.path(), &[], "linux/arm64").unwrap();
    // Every x86_64 object of the tree is wrong for arm64; none is resolved.
    assert_eq!(report.errors.len(), 3);
    assert!(report.errors.iter().all(|f| f.kind == FindingKind::Machine));
    assert_eq!(
        report.errors[0].message,
        "64-bit x86_64 object in a linux/arm64 image (which runs 64-bit aarch64 and 32-bit arm objects)"
    );

    // 32-bit objects in a 64-bit image are warnings, and so are their missing libraries; device
    // code and relocatable objects are ignored.
    let t = Tree::debian();
    t.elf("/opt/old/bin/tool32", &exe().machine(false, EM_386).needs(&["libc.so.6"]));
    t.elf(
        "/opt/kernels/k.cubin",
        &Spec { e_type: goblin::elf::header::ET_EXEC, ..lib("").machine(true, EM_CUDA) },
    );
    t.elf("/opt/obj/a.o", &Spec { e_type: goblin::elf::header::ET_REL, ..lib("").machine(true, EM_AARCH64) });
    t.elf("/opt/arm/libarm.so", &lib("libarm.so").machine(true, EM_AARCH64));
    t.file("/opt/broken.so", b"\x7fELF\x02\x01\x01garbage");
    let report = t.audit(&[]);
    assert_eq!(kinds(&report.errors), [(FindingKind::Machine, "/opt/arm/libarm.so", None)]);
    assert_eq!(
        kinds(&report.warnings),
        [
            (FindingKind::Unresolved, "/opt/old/bin/tool32", Some(LDSO)),
            (FindingKind::Unresolved, "/opt/old/bin/tool32", Some("libc.so.6")),
            (FindingKind::Elf32, "/opt/old/bin/tool32", None),
            (FindingKind::BadElf, "/opt/broken.so", None),
        ]
    );
    insta::assert_snapshot!("machine", report.render_human());
}

#[test]
fn candidates_of_another_class_are_skipped() {
    let t = Tree::debian();
    t.elf("/opt/a/lib/libfoo.so.1", &lib("libfoo.so.1").machine(false, EM_386));
    t.elf("/opt/b/lib/libfoo.so.1", &lib("libfoo.so.1").needs(&["libdeep.so.1"]));
    t.elf("/usr/bin/app", &exe().needs(&["libfoo.so.1"]).runpath("/opt/a/lib:/opt/b/lib"));
    let report = t.audit(&[]);
    // libfoo resolved to the 64-bit copy, whose own dependency is then missing.
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/opt/b/lib/libfoo.so.1", Some("libdeep.so.1"))]
    );
}

#[test]
fn rpath_of_loaders_and_runpath_scope() {
    let t = Tree::debian();
    // app has RPATH $ORIGIN/../lib; libA (no RPATH/RUNPATH) needs libB, found through app's RPATH.
    t.elf("/opt/p/bin/app", &exe().needs(&["libR.so", "libA.so"]).rpath("$ORIGIN/../lib"));
    t.elf("/opt/p/lib/libA.so", &lib("libA.so").needs(&["libB.so"]));
    t.elf("/opt/p/lib/libB.so", &lib("libB.so"));
    // libR has a RUNPATH: its loaders' RPATHs do not apply to it.
    t.elf("/opt/p/lib/libR.so", &lib("libR.so").needs(&["libB.so"]).runpath("/nowhere"));
    let report = t.audit(&[]);
    assert_eq!(kinds(&report.errors), [(FindingKind::Unresolved, "/opt/p/lib/libR.so", Some("libB.so"))]);
    assert!(report.errors[0].message.contains("/nowhere (RUNPATH)"), "{}", report.errors[0].message);

    // A library nothing links to is checked on its own, where the executable's RPATH is
    // unknown: a dependency off its path that the image has elsewhere is a warning (the process
    // that dlopens it may have loaded that copy already), one the image lacks is an error.
    t.elf("/opt/p/lib/libplugin.so", &lib("libplugin.so").needs(&["libB.so", "libnowhere.so"]));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, "/opt/p/lib/libR.so", Some("libB.so")),
            (FindingKind::Unresolved, "/opt/p/lib/libplugin.so", Some("libnowhere.so")),
        ]
    );
    assert_eq!(
        kinds(&report.warnings),
        [(FindingKind::Unresolved, "/opt/p/lib/libplugin.so", Some("libB.so"))]
    );
    assert!(
        report.warnings[0].message.contains("the image has /opt/p/lib/libB.so"),
        "{}",
        report.warnings[0].message
    );

    // An object's own RPATH is ignored when it also has a RUNPATH.
    let t = Tree::debian();
    t.elf("/opt/q/lib/libC.so", &lib("libC.so"));
    t.elf("/opt/q/bin/app", &exe().needs(&["libC.so"]).rpath("/opt/q/lib").runpath("/elsewhere"));
    let report = t.audit(&[]);
    assert_eq!(kinds(&report.errors), [(FindingKind::Unresolved, "/opt/q/bin/app", Some("libC.so"))]);
}

#[test]
fn needed_with_origin_and_ignored_files() {
    let t = Tree::debian();
    t.elf("/opt/py/bin/python3", &exe().needs(&["$ORIGIN/../lib/libpython3.so.1.0", "${ORIGIN}/libnope.so"]));
    t.elf("/opt/py/lib/libpython3.so.1.0", &lib("libpython3.so.1.0"));
    // Separate debug info keeps program headers that point at stripped sections.
    t.file("/usr/lib/debug/.build-id/00/abc.debug", &exe().needs(&["libgone.so"]).build()[..200]);
    t.elf("/usr/lib/firmware/fw.elf", &exe().machine(false, EM_ARM));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/opt/py/bin/python3", Some("/opt/py/bin/libnope.so"))]
    );
    assert!(report.warnings.is_empty(), "{}", report.render_human());
    assert_eq!(report.objects_scanned, 6);
}

#[test]
fn already_loaded_libraries_match_by_name() {
    // systemd's layout: the executable's RUNPATH finds both libraries; the first needs the
    // second, which it could not find itself, but ld.so has loaded it by then (breadth first).
    let t = Tree::debian();
    let dir = "/usr/lib/x86_64-linux-gnu/systemd";
    t.elf("/usr/lib/systemd/systemd", &exe().needs(&["libcore.so", "libshared.so"]).runpath(dir));
    t.elf(&format!("{dir}/libcore.so"), &lib("libcore.so").needs(&["libshared.so"]));
    t.elf(&format!("{dir}/libshared.so"), &lib("libshared.so"));
    let report = t.audit(&[]);
    assert!(!report.has_errors() && report.warnings.is_empty(), "{}", report.render_human());

    // Needed the other way round, libcore's turn comes first and fails.
    t.elf("/usr/lib/systemd/systemd", &exe().needs(&["libcore.so"]).runpath(dir));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/usr/lib/x86_64-linux-gnu/systemd/libcore.so", Some("libshared.so"))]
    );
}

#[test]
fn earlier_load_shadows_the_pinned_copy() {
    // A library without RUNPATH loads the system cuDNN first; torch then gets that copy by name
    // although its RUNPATH pins the wheel's.
    let t = torch_tree();
    t.file("/etc/ld.so.conf.d/cuda.conf", b"/usr/local/cuda/lib64\n");
    t.file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n");
    let site = "/usr/local/lib/python3.11/site-packages";
    t.elf(&format!("{site}/other/libother.so"), &lib("libother.so").needs(&["libcudnn.so.8"]));
    t.elf(
        &format!("{site}/torch/_C.so"),
        &lib("_C.so").needs(&["libother.so", "libtorch_cuda.so"]).runpath("$ORIGIN/lib:$ORIGIN/../other"),
    );
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(
            FindingKind::Shadowed,
            "/usr/local/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
            Some("libcudnn.so.8")
        )]
    );
    let message = &report.errors[0].message;
    assert!(message.contains("libother.so, which loaded it first"), "{message}");
}

#[test]
fn alternative_builds_of_one_library() {
    // bitsandbytes 0.41 ships one build per CUDA release and loads the one matching the CUDA
    // it finds: the builds for CUDA 11 cannot resolve their libraries in a CUDA 12 image.
    let t = Tree::debian();
    let bnb = "/usr/local/lib/python3.11/dist-packages/bitsandbytes";
    t.elf("/usr/lib/x86_64-linux-gnu/libcublas.so.12", &lib("libcublas.so.12"));
    for (cuda, cublas) in [("110", "libcublas.so.11"), ("118", "libcublas.so.11"), ("121", "libcublas.so.12")]
    {
        let name = format!("libbitsandbytes_cuda{cuda}.so");
        t.elf(&format!("{bnb}/{name}"), &lib(&name).needs(&[cublas, "libc.so.6"]));
    }
    t.elf(&format!("{bnb}/libbitsandbytes_cpu.so"), &lib("libbitsandbytes_cpu.so").needs(&["libc.so.6"]));
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(
        kinds(&report.warnings),
        [
            (FindingKind::Unresolved, &*format!("{bnb}/libbitsandbytes_cuda110.so"), Some("libcublas.so.11")),
            (FindingKind::Unresolved, &*format!("{bnb}/libbitsandbytes_cuda118.so"), Some("libcublas.so.11")),
        ]
    );
    assert!(report.warnings.iter().all(|w| w
        .message
        .ends_with("(an alternative build; libbitsandbytes_cuda121.so in the same directory does)")));
    insta::assert_snapshot!("alternative_builds", report.render_human());
}

#[test]
fn alternative_builds_none_of_which_resolves() {
    // torchaudio 2.1 tries `_torchaudio_ffmpeg6.so`, 5, then 4; each links its own
    // `libtorchaudio_ffmpegN.so`, which needs the FFmpeg of that major version (libavutil 58,
    // 57, 56). The errors are on those libraries, inside the closures of the roots.
    let t = Tree::debian();
    let ta = "/usr/local/lib/python3.11/site-packages/torchaudio/lib";
    for (n, avutil) in [("4", "libavutil.so.56"), ("5", "libavutil.so.57"), ("6", "libavutil.so.58")] {
        let ext = format!("_torchaudio_ffmpeg{n}.so");
        let inner = format!("libtorchaudio_ffmpeg{n}.so");
        t.elf(&format!("{ta}/{ext}"), &lib(&ext).needs(&[&inner]).runpath("$ORIGIN"));
        t.elf(&format!("{ta}/{inner}"), &lib(&inner).needs(&[avutil, "libc.so.6"]));
    }
    // No FFmpeg at all: every build fails, and so do the errors.
    let report = t.audit(&[]);
    assert!(report.warnings.is_empty(), "{}", report.render_human());
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, &*format!("{ta}/libtorchaudio_ffmpeg4.so"), Some("libavutil.so.56")),
            (FindingKind::Unresolved, &*format!("{ta}/libtorchaudio_ffmpeg5.so"), Some("libavutil.so.57")),
            (FindingKind::Unresolved, &*format!("{ta}/libtorchaudio_ffmpeg6.so"), Some("libavutil.so.58")),
        ]
    );

    // Debian bookworm's FFmpeg 5: the other two are alternatives.
    t.elf("/usr/lib/x86_64-linux-gnu/libavutil.so.57", &lib("libavutil.so.57"));
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(report.warnings.len(), 2, "{}", report.render_human());
    assert!(report.warnings.iter().all(|w| w
        .message
        .ends_with("(an alternative build; _torchaudio_ffmpeg5.so in the same directory does)")));
}

#[test]
fn plugins_outside_python_packages() {
    let t = Tree::debian();
    let multiarch = "/usr/lib/x86_64-linux-gnu";
    // libcaca's OpenGL driver, loaded only with CACA_DRIVER=gl; freeglut is not installed.
    t.elf(&format!("{multiarch}/libcaca.so.0"), &lib("libcaca.so.0").needs(&["libc.so.6"]));
    t.elf(
        &format!("{multiarch}/caca/libgl_plugin.so.0.0.0"),
        &lib("libgl_plugin.so.0").needs(&["libGLU.so.1", "libglut.so.3.12", "libcaca.so.0"]),
    );
    // A library on the search path that nothing links to keeps its errors.
    t.elf(&format!("{multiarch}/libunused.so.1"), &lib("libunused.so.1").needs(&["libgone.so.1"]));
    // A library only a plugin loads is in that plugin's closure, whatever the path order (here
    // the library comes first, and could have been taken for a root of its own).
    t.elf(&format!("{multiarch}/libvlccore.so.9"), &lib("libvlccore.so.9").needs(&["libidn.so.12"]));
    t.elf(
        &format!("{multiarch}/vlc/plugins/libidn_plugin.so"),
        &lib("libidn_plugin.so").needs(&["libvlccore.so.9"]),
    );
    // Libraries that only load each other: the first is a root.
    t.elf("/opt/plug/liba.so", &lib("liba.so").needs(&["libb.so", "libnone.so"]).runpath("$ORIGIN"));
    t.elf("/opt/plug/libb.so", &lib("libb.so").needs(&["liba.so"]).runpath("$ORIGIN"));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/usr/lib/x86_64-linux-gnu/libunused.so.1", Some("libgone.so.1"))]
    );
    assert_eq!(
        kinds(&report.warnings),
        [
            (FindingKind::Unresolved, "/opt/plug/liba.so", Some("libnone.so")),
            (
                FindingKind::Unresolved,
                "/usr/lib/x86_64-linux-gnu/caca/libgl_plugin.so.0.0.0",
                Some("libGLU.so.1")
            ),
            (
                FindingKind::Unresolved,
                "/usr/lib/x86_64-linux-gnu/caca/libgl_plugin.so.0.0.0",
                Some("libglut.so.3.12")
            ),
            (FindingKind::Unresolved, "/usr/lib/x86_64-linux-gnu/libvlccore.so.9", Some("libidn.so.12")),
        ]
    );
    assert!(report
        .warnings
        .iter()
        .all(|w| w.message.ends_with("(a plugin nothing in the image links to; loaded only on demand)")));
    insta::assert_snapshot!("plugins", report.render_human());
}

#[test]
fn python_extension_modules_keep_their_errors() {
    // torch without the cuDNN wheel: `_C` (nothing links to it) reaches libtorch_cuda, whose
    // libcudnn.so.8 is missing. Neither a plugin nor an alternative build.
    let t = Tree::debian();
    let site = "/usr/local/lib/python3.11/site-packages";
    t.elf(
        &format!("{site}/torch/_C.cpython-311-x86_64-linux-gnu.so"),
        &lib("_C.so").needs(&["libtorch_cuda.so"]).runpath("$ORIGIN/lib"),
    );
    t.elf(
        &format!("{site}/torch/lib/libtorch_cuda.so"),
        &lib("libtorch_cuda.so")
            .needs(&["libcudnn.so.8", "libc.so.6"])
            .runpath("$ORIGIN/../../nvidia/cudnn/lib"),
    );
    // An extension module outside site-packages, and one in the standard library.
    t.elf("/opt/app/fast.cpython-311-x86_64-linux-gnu.so", &lib("fast.so").needs(&["libfast.so.1"]));
    t.elf("/usr/local/lib/python3.11/lib-dynload/_ssl.so", &lib("_ssl.so").needs(&["libssl.so.3"]));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, "/opt/app/fast.cpython-311-x86_64-linux-gnu.so", Some("libfast.so.1")),
            (FindingKind::Unresolved, "/usr/local/lib/python3.11/lib-dynload/_ssl.so", Some("libssl.so.3")),
            (FindingKind::Unresolved, &*format!("{site}/torch/lib/libtorch_cuda.so"), Some("libcudnn.so.8")),
        ]
    );
    assert!(report.warnings.is_empty(), "{}", report.render_human());
}

#[test]
fn executables_keep_errors_shared_with_plugins() {
    // libshared is loaded by an executable and by a plugin: its missing library is an error
    // (from the executable), reported once; the plugin's own missing library is a warning.
    let t = Tree::debian();
    let multiarch = "/usr/lib/x86_64-linux-gnu";
    t.elf(&format!("{multiarch}/libshared.so.1"), &lib("libshared.so.1").needs(&["libmissing.so.1"]));
    t.elf("/usr/bin/tool", &exe().needs(&["libshared.so.1", "libc.so.6"]));
    t.elf(
        &format!("{multiarch}/caca/libx_plugin.so.0.0.0"),
        &lib("libx_plugin.so.0").needs(&["libshared.so.1", "libX11.so.6"]),
    );
    // Also a member of a family whose other member resolves.
    t.elf(
        &format!("{multiarch}/caca/libx_plugin2.so.0.0.0"),
        &lib("libx_plugin2.so.0").needs(&["libc.so.6"]),
    );
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/usr/lib/x86_64-linux-gnu/libshared.so.1", Some("libmissing.so.1"))]
    );
    assert_eq!(report.errors[0].message, "libmissing.so.1 not found (searched the default directories)");
    assert_eq!(
        kinds(&report.warnings),
        [(
            FindingKind::Unresolved,
            "/usr/lib/x86_64-linux-gnu/caca/libx_plugin.so.0.0.0",
            Some("libX11.so.6")
        )]
    );

    // Without the executable, the plugin's whole closure is excused.
    std::fs::remove_file(t.host("/usr/bin/tool")).unwrap();
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(report.warnings.len(), 2, "{}", report.render_human());
}

#[test]
fn family_and_python_names() {
    assert_eq!(family_name("libbitsandbytes_cuda118_nocublaslt.so"), "libbitsandbytes_cuda_nocublaslt.so");
    assert_eq!(family_name("_torchaudio_ffmpeg6.so"), "_torchaudio_ffmpeg.so");
    assert!(is_python_module("/usr/lib/python3/dist-packages/yaml/_yaml.so"));
    assert!(
        is_python_module("/opt/x/mod.abi3.so")
            && is_python_module("/opt/x/m.cpython-311-x86_64-linux-gnu.so")
    );
    assert!(!is_python_module("/usr/lib/x86_64-linux-gnu/caca/libgl_plugin.so.0.0.0"));
}

#[test]
fn nodeflib_skips_default_dirs() {
    let t = Tree::debian();
    t.elf("/usr/bin/app", &Spec { nodeflib: true, ..exe() }.needs(&["libc.so.6"]));
    let report = t.audit(&[]);
    assert_eq!(kinds(&report.errors), [(FindingKind::Unresolved, "/usr/bin/app", Some("libc.so.6"))]);
}

#[test]
fn symlinks_resolve_inside_the_root_never_on_the_host() {
    let t = Tree(tempfile::tempdir().unwrap());
    // The host has /lib/x86_64-linux-gnu/libc.so.6; the tree has only a link to that path.
    t.symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6");
    t.symlink("/opt/loop/liba.so", "libb.so");
    t.symlink("/opt/loop/libb.so", "liba.so");
    t.elf("/opt/ld.so", &lib("ld.so"));
    t.elf(
        "/opt/app",
        &Spec { interp: Some("/opt/ld.so"), ..exe() }.needs(&["libc.so.6", "liba.so"]).runpath("/opt/loop"),
    );
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, "/opt/app", Some("liba.so")),
            (FindingKind::Unresolved, "/opt/app", Some("libc.so.6")),
        ]
    );
}

#[test]
fn report_serializes() {
    let t = torch_tree();
    let report = t.audit(&["LD_LIBRARY_PATH=/usr/local/cuda/lib64"]);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["errors"][0]["kind"], "shadowed");
    assert_eq!(json["elapsed"], 0.0);
    let back: AuditReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn unknown_platform_is_an_error() {
    let t = Tree::debian();
    assert!(matches!(audit_dir(t.0.path(), &[], "linux/mips64"), Err(AuditError::Platform(_))));
}

/// torch 2.8.0's `nvidia-cufile-cu12`: `libcufile_rdma.so.1`, which libcufile loads only on
/// hosts with InfiniBand verbs, needs libibverbs, libmlx5 and librdmacm, which an image does not
/// carry: a warning with the reason, not an error. A library of the same directory that torch
/// links keeps its errors.
#[test]
fn cufiles_rdma_plugin_is_optional() {
    let t = Tree::debian();
    let lib_dir = "/usr/local/lib/python3.11/dist-packages/nvidia/cufile/lib";
    t.elf(
        &format!("{lib_dir}/libcufile_rdma.so.1"),
        &lib("libcufile_rdma.so.1").needs(&["libibverbs.so.1", "libc.so.6"]).runpath("$ORIGIN"),
    );
    t.elf(&format!("{lib_dir}/libcufile.so.0"), &lib("libcufile.so.0").needs(&["libgone.so.1"]));
    t.elf(
        "/usr/local/lib/python3.11/dist-packages/torch/_C.cpython-311-x86_64-linux-gnu.so",
        &lib("_C.so").needs(&["libcufile.so.0"]).runpath("$ORIGIN/../nvidia/cufile/lib"),
    );
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.warnings),
        [(FindingKind::Unresolved, &*format!("{lib_dir}/libcufile_rdma.so.1"), Some("libibverbs.so.1"))]
    );
    assert!(report.warnings[0].message.contains("InfiniBand verbs"), "{}", report.render_human());
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, &*format!("{lib_dir}/libcufile.so.0"), Some("libgone.so.1"))]
    );
}

/// Qt plugins that wheels carry (`PyQt6`'s `Qt6/plugins/platforms/libqxcb.so`, opencv-python's
/// `cv2/qt/plugins/...`) need X11 libraries a headless image lacks: Qt loads a plugin on demand
/// and skips it, so those are warnings; what the extension module itself links stays an error.
#[test]
fn qt_plugins_are_loaded_on_demand() {
    let t = Tree::debian();
    let pkg = "/usr/local/lib/python3.11/dist-packages";
    t.elf(
        &format!("{pkg}/PyQt6/Qt6/plugins/platforms/libqxcb.so"),
        &lib("libqxcb.so").needs(&["libxcb-cursor.so.0", "libc.so.6"]),
    );
    t.elf(&format!("{pkg}/cv2/qt/plugins/platforms/libqxcb.so"), &lib("libqxcb.so").needs(&["libxcb.so.1"]));
    t.elf(&format!("{pkg}/cv2/cv2.abi3.so"), &lib("cv2.abi3.so").needs(&["libGL.so.1"]));
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, &*format!("{pkg}/cv2/cv2.abi3.so"), Some("libGL.so.1"))]
    );
    assert_eq!(report.warnings.len(), 2, "{}", report.render_human());
    assert!(report.warnings.iter().all(|w| w.message.contains("a Qt plugin")), "{}", report.render_human());
}
