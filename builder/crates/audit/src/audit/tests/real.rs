//! Audits of real objects: ELF files built here with `cc`, the host's own `ls` with its
//! libraries, and a large file read once.

use super::*;

// Real objects built with the C compiler

fn cc(args: &[&str], dir: &Path) -> bool {
    let out = Command::new("cc").args(args).current_dir(dir).output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => panic!("cc {args:?}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => false,
    }
}

#[test]
fn real_objects_built_with_cc() {
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("note: not an x86_64 host; skipping");
        return;
    }
    let build = tempfile::tempdir().unwrap();
    let b = build.path();
    std::fs::write(b.join("bar.c"), "int bar(void) { return 1; }\n").unwrap();
    std::fs::write(b.join("foo.c"), "int bar(void); int foo(void) { return bar(); }\n").unwrap();
    std::fs::write(b.join("main.c"), "int foo(void); void _start(void) { foo(); }\n").unwrap();
    let ok =
        cc(&["-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libbar.so.1", "-o", "libbar.so.1", "bar.c"], b)
            && cc(
                &[
                    "-shared",
                    "-fPIC",
                    "-nostdlib",
                    "-Wl,-soname,libfoo.so.1",
                    "-Wl,--enable-new-dtags",
                    "-Wl,-rpath,$ORIGIN",
                    "-o",
                    "libfoo.so.1",
                    "foo.c",
                    "-L.",
                    "-l:libbar.so.1",
                ],
                b,
            )
            && cc(
                &[
                    "-nostdlib",
                    "-Wl,--disable-new-dtags",
                    "-Wl,-rpath,$ORIGIN/../lib",
                    "-Wl,--dynamic-linker,/lib64/ld-linux-x86-64.so.2",
                    "-o",
                    "app",
                    "main.c",
                    "-L.",
                    "-l:libfoo.so.1",
                ],
                b,
            );
    if !ok {
        eprintln!("note: no C compiler; skipping");
        return;
    }
    let app = std::fs::read(b.join("app")).unwrap();
    let info = elf::parse(app.as_slice(), app.len() as u64).unwrap();
    assert_eq!(info.needed, ["libfoo.so.1"]);
    assert_eq!(info.rpath.as_deref(), Some("$ORIGIN/../lib"));
    assert!(info.runpath.is_none());

    let t = Tree::debian();
    for (name, dest) in [("app", "/opt/x/bin/app"), ("libfoo.so.1", "/opt/x/lib/libfoo.so.1")] {
        t.file(dest, &std::fs::read(b.join(name)).unwrap());
    }
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/opt/x/lib/libfoo.so.1", Some("libbar.so.1"))]
    );
    t.file("/opt/x/lib/libbar.so.1", &std::fs::read(b.join("libbar.so.1")).unwrap());
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(report.objects_scanned, 5);
}

#[test]
fn host_ls_with_its_libraries() {
    let libs = ["libselinux.so.1", "libc.so.6", "libpcre2-8.so.0", "ld-linux-x86-64.so.2"];
    let host_dir = Path::new("/lib/x86_64-linux-gnu");
    if std::env::consts::ARCH != "x86_64" || !libs.iter().all(|l| host_dir.join(l).exists()) {
        eprintln!("note: not a Debian x86_64 host; skipping");
        return;
    }
    let t = Tree(tempfile::tempdir().unwrap());
    t.symlink("/lib", "usr/lib");
    t.symlink("/lib64", "usr/lib64");
    t.symlink("/usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
    t.file("/usr/bin/ls", &std::fs::read("/bin/ls").unwrap());
    for l in libs {
        t.file(&format!("/usr/lib/x86_64-linux-gnu/{l}"), &std::fs::read(host_dir.join(l)).unwrap());
    }
    let report = t.audit(&[]);
    assert!(!report.has_errors(), "{}", report.render_human());
    assert_eq!(report.objects_scanned, 5);

    std::fs::remove_file(t.host("/usr/lib/x86_64-linux-gnu/libpcre2-8.so.0")).unwrap();
    let report = t.audit(&[]);
    assert_eq!(
        kinds(&report.errors),
        [(FindingKind::Unresolved, "/usr/lib/x86_64-linux-gnu/libselinux.so.1", Some("libpcre2-8.so.0"))]
    );
}

/// Audits a real tree or layout named by `STACKBUILD_AUDIT_DIR` / `STACKBUILD_AUDIT_LAYOUT`
/// (the latter's whole report as JSON to `STACKBUILD_AUDIT_JSON` if set)
/// (`cargo test -p stackbuild --lib audit::tests::audit_from_env -- --ignored --nocapture`).
#[test]
#[ignore = "needs STACKBUILD_AUDIT_DIR or STACKBUILD_AUDIT_LAYOUT"]
fn audit_from_env() {
    if let Ok(dir) = std::env::var("STACKBUILD_AUDIT_DIR") {
        let env: Vec<String> = std::env::var("STACKBUILD_AUDIT_ENV").map(|e| vec![e]).unwrap_or_default();
        let report = audit_dir(Path::new(&dir), &env, "linux/amd64").unwrap();
        println!("{}", report.render_human());
        // The same in two steps, to tell reading from resolving.
        let started = Instant::now();
        let root = RootFs::from_dir(Path::new(&dir)).unwrap();
        let read = started.elapsed();
        let mut auditor = Auditor::new(&root, &env, "linux/amd64").unwrap();
        auditor.audit();
        println!(
            "read {:.2}s, resolved {:.2}s",
            read.as_secs_f64(),
            started.elapsed().saturating_sub(read).as_secs_f64()
        );
    }
    if let Ok(dir) = std::env::var("STACKBUILD_AUDIT_LAYOUT") {
        let report = audit_layout(Path::new(&dir), None).unwrap();
        println!("{}", report.render_human());
        // The whole report (the human one lists 50 findings of a kind).
        if let Ok(json) = std::env::var("STACKBUILD_AUDIT_JSON") {
            std::fs::write(json, serde_json::to_vec_pretty(&report).unwrap()).unwrap();
        }
    }
}

/// A large ELF file read once as the build writes it: the headers, its dynamic segment far
/// after them and its strings near the start are all found without keeping the file; a file
/// whose strings come after the kept bytes but before the dynamic segment cannot be read that
/// way, and says so (the audit then reads the blob).
#[test]
fn large_elf_files_are_read_once_without_a_spool() {
    let spec = Spec { padding: 200_000, ..lib("libbig.so.1") }.needs(&["liba.so.1"]).runpath("$ORIGIN");
    let bytes = spec.build();
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o755);
    tar.append_data(&mut header, "usr/lib/libbig.so.1", bytes.as_slice()).unwrap();
    let tar = tar.into_inner().unwrap();
    let json = |ops: &[fs::Op]| serde_json::to_string(ops).unwrap();

    let spooled = fs::read_tar(tar.as_slice(), fs::Large::Spool(0)).unwrap();
    assert!(json(&spooled).contains("liba.so.1"), "{}", json(&spooled));
    let once = fs::read_tar(tar.as_slice(), fs::Large::Once(4096)).unwrap();
    assert_eq!(json(&once), json(&spooled));

    // Only the ELF header kept: the strings (just after the program headers) are gone by the
    // time the dynamic segment names them.
    let err = fs::read_tar(tar.as_slice(), fs::Large::Once(100)).unwrap_err();
    assert!(err.to_string().contains("past the first 100 bytes"), "{err}");
}
