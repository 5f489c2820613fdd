//! Audits of OCI layouts, streamed layer by layer without extracting them (whiteouts and
//! replaced files included).

use super::*;

// OCI layouts

fn go_config(env: &[&str]) -> ImageConfig {
    ImageConfig {
        created: Some(stackcontract::time::rfc3339(0)),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RuntimeConfig {
            env: env.iter().map(|s| (*s).to_string()).collect(),
            ..RuntimeConfig::default()
        },
        ..ImageConfig::default()
    }
}

/// A two-layer image: a Debian-like base (gzip) and an application layer (zstd) that removes
/// a library of the base with a whiteout and empties a directory with an opaque whiteout.
fn layout(work: &Path, cache: &Cache) -> PathBuf {
    let base_tree = Tree::debian();
    base_tree.elf("/usr/lib/x86_64-linux-gnu/libgone.so.1", &lib("libgone.so.1"));
    base_tree.elf("/opt/cleared/libold.so.1", &lib("libold.so.1"));
    base_tree.elf("/usr/local/cuda-12.1/lib64/stubs/libcuda.so", &lib("libcuda.so.1"));
    base_tree.symlink("/usr/local/cuda", "cuda-12.1");
    base_tree.file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n");
    base_tree.file("/etc/ld.so.conf.d/app.conf", b"/opt/app/lib\n/opt/cleared\n");
    let mut w = LayerWriter::new(cache, 0);
    w.add_dir(base_tree.0.path(), "/").unwrap();
    let base = w.finish(Compression::Gzip).unwrap();

    let app_tree = Tree(tempfile::tempdir().unwrap());
    app_tree.elf("/opt/app/lib/libapp.so.1", &lib("libapp.so.1").needs(&["libc.so.6", "libcuda.so.1"]));
    app_tree.elf("/opt/app/bin/app", &exe().needs(&["libapp.so.1", "libgone.so.1", "libold.so.1"]));
    std::fs::hard_link(app_tree.host("/opt/app/bin/app"), app_tree.host("/opt/app/bin/app2")).unwrap();
    let mut w = LayerWriter::new(cache, 0);
    w.add_dir(app_tree.0.path(), "/").unwrap();
    w.add_whiteout("/usr/lib/x86_64-linux-gnu/libgone.so.1").unwrap();
    w.add_file("/opt/cleared/.wh..wh..opq", Vec::new(), 0o644).unwrap();
    w.add_file("/opt/cleared/new.txt", b"x".to_vec(), 0o644).unwrap();
    let app = w.finish(Compression::Zstd).unwrap();

    let env = ["PATH=/usr/bin", "LD_LIBRARY_PATH=/usr/local/cuda/lib64/stubs"];
    let image = Image::new(go_config(&env), vec![base, app], BTreeMap::new()).unwrap();
    let dir = work.join("layout");
    stackbuild_image::write_layout(&dir, &image, "test").unwrap();
    dir
}

#[test]
fn audits_a_layout_without_extracting_it() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(cache_dir.path()).unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = layout(work.path(), &cache);
    let mut report = audit_layout(&dir, Some("test")).unwrap();
    report.elapsed = Duration::ZERO;
    assert_eq!(
        kinds(&report.errors),
        [
            (FindingKind::Unresolved, "/opt/app/bin/app", Some("libgone.so.1")),
            (FindingKind::Unresolved, "/opt/app/bin/app", Some("libold.so.1")),
            (FindingKind::Unresolved, "/opt/app/bin/app2", Some("libgone.so.1")),
            (FindingKind::Unresolved, "/opt/app/bin/app2", Some("libold.so.1")),
            (FindingKind::Stub, "/usr/local/cuda-12.1/lib64/stubs/libcuda.so", Some("libcuda.so")),
        ]
    );
    assert_eq!(report.host_provided["libcuda.so.1"], ["/opt/app/lib/libapp.so.1"]);
    // ld.so, libc, the stub, libapp and the two links of app.
    assert_eq!(report.objects_scanned, 6);
    insta::assert_snapshot!("layout", report.render_human());

    // Spooling every ELF file through a temporary file gives the same result.
    let mut spooled = audit_layout_with(&dir, None, None, 0, None).unwrap();
    spooled.elapsed = Duration::ZERO;
    assert_eq!(spooled, report);

    assert!(matches!(audit_layout(&dir, Some("nope")), Err(AuditError::Oci(_))));

    // With a layer cache: the same report, then the same again from the cache alone (the blobs
    // emptied), and a corrupted entry read again from its blob.
    let layers = work.path().join("layer-cache");
    let mut first = audit_layout_cached(&dir, Some("test"), None, &layers).unwrap();
    first.elapsed = Duration::ZERO;
    assert_eq!(first, report);
    let entries: Vec<_> = std::fs::read_dir(&layers).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 2, "one entry per layer: {entries:?}");
    let blobs = dir.join("blobs/sha256");
    let image = stackbuild_image::read_layout(&dir, Some("test")).unwrap();
    let saved: Vec<Vec<u8>> = image.layers.iter().map(|l| std::fs::read(&l.path).unwrap()).collect();
    for l in &image.layers {
        std::fs::write(
            blobs.join(l.digest.trim_start_matches("sha256:")),
            vec![0u8; usize::try_from(l.size).unwrap()],
        )
        .unwrap();
    }
    let mut cached = audit_layout_cached(&dir, Some("test"), None, &layers).unwrap();
    cached.elapsed = Duration::ZERO;
    assert_eq!(cached, report);
    for (l, bytes) in image.layers.iter().zip(&saved) {
        std::fs::write(&l.path, bytes).unwrap();
    }
    std::fs::write(&entries[0], b"{not json").unwrap();
    let mut again = audit_layout_cached(&dir, Some("test"), None, &layers).unwrap();
    again.elapsed = Duration::ZERO;
    assert_eq!(again, report);
    assert!(serde_json::from_slice::<serde_json::Value>(&std::fs::read(&entries[0]).unwrap()).is_ok());
}

#[test]
fn whiteouts_and_replacements() {
    let mut root = RootFs::default();
    let file = |text: &str| Kind::File(Arc::new(FileInfo { elf: ElfState::NotElf, text: Some(text.into()) }));
    root.apply(
        vec![
            fs::Op::Put("/a/b/c".into(), file("1")),
            fs::Op::Put("/a/d".into(), Kind::Symlink("b".into())),
            fs::Op::Put("/x/y".into(), file("2")),
            fs::Op::Put("/lib".into(), Kind::Symlink("usr/lib".into())),
            fs::Op::Put("/usr/lib/libz.so".into(), file("z")),
        ],
        1,
    );
    assert_eq!(root.resolve("/a/d/c").map(|(p, _)| p).as_deref(), Some("/a/b/c"));
    assert_eq!(root.resolve("/lib/../lib/libz.so").map(|(p, _)| p).as_deref(), Some("/usr/lib/libz.so"));
    assert_eq!(root.resolve("/a/b/c/../c").map(|(p, _)| p), None);
    root.apply(
        vec![
            // Opaque: the lower /a content goes, this layer's stays whatever the order.
            fs::Op::Put("/a/new".into(), file("3")),
            fs::Op::Opaque("/a".into()),
            // A file replacing a directory hides what was below it.
            fs::Op::Put("/x".into(), file("4")),
            fs::Op::Whiteout("/lib".into()),
            fs::Op::Link("/a/link".into(), "/a/new".into()),
        ],
        2,
    );
    assert!(root.resolve("/a/b/c").is_none() && root.resolve("/a/d").is_none());
    assert!(root.resolve("/a/new").is_some() && root.resolve("/x/y").is_none());
    assert!(matches!(root.resolve("/x"), Some((_, Kind::File(_)))));
    assert!(root.resolve("/lib/libz.so").is_none() && root.resolve("/usr/lib/libz.so").is_some());
    assert!(matches!(root.resolve("/a/link"), Some((_, Kind::File(f))) if f.text.as_deref() == Some("3")));
    assert_eq!(root.children("/a"), ["link", "new"]);
}
