use std::fmt::Write as _;
use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::time::{Duration, SystemTime};

use super::*;

/// A tar entry written with raw header bytes, so that names the `tar` crate refuses to write
/// (`..`, absolute) can be tested.
struct Raw<'a> {
    name: &'a str,
    ty: EntryType,
    link: &'a str,
    data: &'a [u8],
}

fn raw(name: &str, ty: EntryType) -> Raw<'_> {
    Raw { name, ty, link: "", data: b"" }
}

fn tar_of(entries: &[Raw<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let mut h = Header::new_ustar();
        h.as_old_mut().name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        h.as_old_mut().linkname[..e.link.len()].copy_from_slice(e.link.as_bytes());
        h.set_entry_type(e.ty);
        h.set_mode(if e.ty == EntryType::Directory { 0o755 } else { 0o644 });
        h.set_uid(1000);
        h.set_gid(42);
        h.set_mtime(1_234_567);
        h.set_size(e.data.len() as u64);
        h.set_device_major(if e.ty == EntryType::Char { 1 } else { 8 }).unwrap();
        h.set_device_minor(if e.ty == EntryType::Char { 3 } else { 0 }).unwrap();
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(e.data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn cache() -> (tempfile::TempDir, Cache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    (dir, cache)
}

/// Decompresses a blob.
fn tar_bytes(blob: &LayerBlob) -> Vec<u8> {
    let file = File::open(&blob.path).unwrap();
    let mut out = Vec::new();
    let compression = Compression::from_media_type(&blob.media_type).unwrap();
    compression.decoder(file).unwrap().read_to_end(&mut out).unwrap();
    out
}

/// One line per entry: type, mode, uid:gid, mtime, size, name, link target, device numbers.
fn listing(blob: &LayerBlob) -> String {
    let bytes = tar_bytes(blob);
    let mut archive = tar::Archive::new(&bytes[..]);
    let mut out = String::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let h = entry.header();
        assert!(h.as_gnu().is_some(), "GNU headers throughout");
        assert_eq!(h.username_bytes(), Some(&b""[..]));
        assert_eq!(h.groupname_bytes(), Some(&b""[..]));
        let link = entry.link_name_bytes().map(|l| format!(" -> {}", lossy(&l))).unwrap_or_default();
        let dev = match h.entry_type() {
            EntryType::Char | EntryType::Block => {
                format!(" dev {}:{}", h.device_major().unwrap().unwrap(), h.device_minor().unwrap().unwrap())
            }
            _ => String::new(),
        };
        writeln!(
            out,
            "{} {:04o} {}:{} {} {:>3} {}{link}{dev}",
            h.entry_type().as_byte() as char,
            h.mode().unwrap(),
            h.uid().unwrap(),
            h.gid().unwrap(),
            h.mtime().unwrap(),
            entry.size(),
            lossy(&entry.path_bytes()),
        )
        .unwrap();
    }
    out
}

/// Stages a small tree with files, a symlink, a hardlink and an executable.
fn stage(root: &Path, mtime: SystemTime) {
    fs::create_dir_all(root.join("usr/bin")).unwrap();
    fs::create_dir_all(root.join("etc/empty")).unwrap();
    fs::write(root.join("usr/bin/tool"), b"#!/bin/sh\necho tool\n").unwrap();
    fs::set_permissions(root.join("usr/bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(root.join("etc/conf"), b"key=value\n").unwrap();
    fs::hard_link(root.join("usr/bin/tool"), root.join("usr/bin/alias")).unwrap();
    symlink("/etc/conf", root.join("usr/conf-link")).unwrap();
    symlink("../nowhere", root.join("usr/dangling")).unwrap();
    for p in ["usr/bin/tool", "etc/conf", "usr/bin", "etc"] {
        File::open(root.join(p)).unwrap().set_modified(mtime).unwrap();
    }
}

#[test]
fn same_tree_gives_same_digests_whatever_the_mtimes() {
    let (_c1, cache1) = cache();
    let (_c2, cache2) = cache();
    let (t1, t2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    stage(t1.path(), SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
    stage(t2.path(), SystemTime::now());
    for compression in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let mut w1 = LayerWriter::new(&cache1, 1_700_000_000);
        w1.add_dir(t1.path(), "/opt/app").unwrap();
        let b1 = w1.finish(compression).unwrap();
        let mut w2 = LayerWriter::new(&cache2, 1_700_000_000);
        w2.add_dir(t2.path(), "opt/app/").unwrap();
        let b2 = w2.finish(compression).unwrap();
        assert_eq!((&b1.digest, &b1.diff_id, b1.size), (&b2.digest, &b2.diff_id, b2.size), "{compression:?}");
        assert_eq!(b1.media_type, compression.media_type());
        assert_eq!(b1.path, cache1.blob_path(&b1.digest).unwrap());
        cache1.verify_blob(&b1.digest).unwrap();
        let (diff_id, _) = stackbuild_common::sha256_reader(&tar_bytes(&b1)[..]).unwrap();
        assert_eq!(diff_id, b1.diff_id);
        if compression == Compression::None {
            assert_eq!(b1.digest, b1.diff_id);
        }
    }
    // A different epoch gives a different layer.
    let mut w = LayerWriter::new(&cache1, 0);
    w.add_dir(t1.path(), "/opt/app").unwrap();
    let other = w.finish(Compression::None).unwrap();
    let mut w = LayerWriter::new(&cache1, 1_700_000_000);
    w.add_dir(t1.path(), "/opt/app").unwrap();
    assert_ne!(other.diff_id, w.finish(Compression::None).unwrap().diff_id);
}

#[test]
fn staged_tree_listing() {
    let (_c, cache) = cache();
    let tree = tempfile::tempdir().unwrap();
    stage(tree.path(), SystemTime::now());
    let mut w = LayerWriter::new(&cache, 1_700_000_000);
    w.add_dir(tree.path(), "/opt/app").unwrap();
    w.add_file("/opt/app/generated.txt", "generated\n", 0o100_644).unwrap();
    let blob = w.finish(Compression::Gzip).unwrap();
    insta::assert_snapshot!(listing(&blob), @r"
    5 0755 0:0 1700000000   0 opt
    5 0755 0:0 1700000000   0 opt/app
    5 0755 0:0 1700000000   0 opt/app/etc
    0 0644 0:0 1700000000  10 opt/app/etc/conf
    5 0755 0:0 1700000000   0 opt/app/etc/empty
    0 0644 0:0 1700000000  10 opt/app/generated.txt
    5 0755 0:0 1700000000   0 opt/app/usr
    5 0755 0:0 1700000000   0 opt/app/usr/bin
    0 0755 0:0 1700000000  20 opt/app/usr/bin/alias
    1 0755 0:0 1700000000   0 opt/app/usr/bin/tool -> opt/app/usr/bin/alias
    2 0777 0:0 1700000000   0 opt/app/usr/conf-link -> /etc/conf
    2 0777 0:0 1700000000   0 opt/app/usr/dangling -> ../nowhere
    ");
}

#[test]
fn gzip_header_is_fixed() {
    let (_c, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    w.add_file("a", "x", 0o644).unwrap();
    let blob = w.finish(Compression::Gzip).unwrap();
    let bytes = fs::read(&blob.path).unwrap();
    assert_eq!(&bytes[..4], &[0x1f, 0x8b, 8, 0], "gzip magic, deflate, no flags (no file name)");
    assert_eq!(&bytes[4..8], &[0, 0, 0, 0], "mtime 0");
    assert_eq!(bytes[9], 255, "OS byte");
}

#[test]
fn zstd_output_does_not_depend_on_worker_count() {
    // Several zstd jobs' worth of compressible, non-repetitive data.
    let mut data = Vec::with_capacity(24 << 20);
    let mut x: u64 = 1;
    while data.len() < 24 << 20 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        writeln!(&mut StringSink(&mut data), "line {} value {}", x >> 40, (x >> 20) % 1000).unwrap();
    }
    let compress = |workers: u32| {
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL).unwrap();
        e.multithread(workers).unwrap();
        for chunk in data.chunks(100_000) {
            e.write_all(chunk).unwrap();
        }
        e.finish().unwrap()
    };
    let one = compress(1);
    assert_eq!(one, compress(2));
    assert_eq!(one, compress(ZSTD_MAX_WORKERS));
}

struct StringSink<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for StringSink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn import(entries: &[Raw<'_>]) -> Result<LayerWriter, LayerError> {
    let (dir, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    let result = w.add_tar(&tar_of(entries)[..], &TarImport::default());
    // Keep the cache directory alive as long as the writer.
    std::mem::forget(dir);
    result.map(|()| w)
}

#[test]
fn unsafe_names_are_rejected() {
    use EntryType::{Directory, Link, Regular, Symlink};
    let cases: Vec<(Vec<Raw<'_>>, &str)> = vec![
        (vec![raw("../x", Regular)], "\"../x\": `..`"),
        (vec![raw("a/../../x", Regular)], "`..` component"),
        (vec![raw("./..", Directory)], "`..` component"),
        (vec![raw("/etc/passwd", Regular)], "\"/etc/passwd\": absolute name"),
        (
            vec![Raw { link: "/etc", ..raw("a", Symlink) }, raw("a/passwd", Regular)],
            "\"a/passwd\" would be written through the symlink \"a\"",
        ),
        // The same in the other order: sorted, the symlink would come first.
        (
            vec![raw("a/passwd", Regular), Raw { link: "/etc", ..raw("a", Symlink) }],
            "\"a/passwd\" would be written through the symlink \"a\"",
        ),
        (
            vec![Raw { link: "/etc", ..raw("a", Symlink) }, raw("a/b/c", Directory)],
            "through the symlink \"a\"",
        ),
        (vec![raw("f", Regular), raw("f/x", Regular)], "parent \"f\" is not a directory"),
        (vec![Raw { link: "../etc/shadow", ..raw("h", Link) }], "`..` component"),
        (vec![Raw { link: "/etc/shadow", ..raw("h", Link) }], "absolute name"),
        (vec![raw("d/x", Regular), raw("d", Regular)], "\"d\" would replace a non-empty directory"),
    ];
    for (entries, expected) in cases {
        let names: Vec<_> = entries.iter().map(|e| e.name).collect();
        let err = import(&entries).err().unwrap_or_else(|| panic!("{names:?} accepted"));
        assert!(err.to_string().contains(expected), "{names:?}: {err}");
    }
    // A hardlink through a symlink or to nothing is caught when the layer is finished.
    for entries in [
        vec![Raw { link: "/etc", ..raw("a", Symlink) }, Raw { link: "a/shadow", ..raw("h", Link) }],
        vec![Raw { link: "missing", ..raw("h", Link) }],
        vec![Raw { link: "h", ..raw("h", Link) }],
    ] {
        let err = import(&entries).unwrap().finish(Compression::None).unwrap_err();
        assert!(matches!(err, LayerError::BadHardlink { .. }), "{err}");
    }
    // The builder's own API accepts a leading `/` but never `..`.
    let (_c, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    assert!(w.add_file("/ok", "", 0o644).is_ok());
    assert!(w.add_file("/../x", "", 0o644).is_err());
    assert!(w.add_dir(Path::new("/nonexistent"), "../up").is_err());
    w.add_symlink("/link", "/etc").unwrap();
    assert!(matches!(w.add_file("/link/passwd", "", 0o644), Err(LayerError::ThroughSymlink { .. })));
}

#[test]
fn tar_transcoding_keeps_what_a_rootfs_needs() {
    use EntryType::{Block, Char, Directory, Fifo, Link, Regular, Symlink};
    let long = format!("./usr/share/{}/file", "d".repeat(120));
    let long_target = format!("/{}", "t".repeat(150));
    let entries = vec![
        raw("./", Directory),
        Raw { data: b"root:x:0:0\n", ..raw("./etc/passwd", Regular) },
        Raw { data: b"perl", ..raw("./usr/bin/perl5.36", Regular) },
        // A hardlink whose target sorts after it.
        Raw { link: "./usr/bin/perl5.36", ..raw("./usr/bin/perl", Link) },
        Raw { link: "usr/bin", ..raw("./bin", Symlink) },
        raw("./dev/null", Char),
        raw("./dev/sda", Block),
        raw("./run/initctl", Fifo),
        raw("./var/.wh.cache", Regular),
        raw("./opt/.wh..wh..opq", Regular),
        // A duplicate: the later one wins, as on extraction.
        Raw { data: b"root:x:0:0:new\n", ..raw("./etc/passwd", Regular) },
    ];
    let mut bytes = tar_of(&entries);
    bytes.truncate(bytes.len() - 1024);
    // GNU long name and long link target, as the `tar` crate writes them.
    let mut builder = tar::Builder::new(Vec::new());
    let mut h = Header::new_gnu();
    h.set_entry_type(Regular);
    h.set_mode(0o4755);
    h.set_size(4);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    builder.append_data(&mut h, &long, &b"long"[..]).unwrap();
    let mut h = Header::new_gnu();
    h.set_entry_type(Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    builder.append_link(&mut h, "./usr/lib/longlink", &long_target).unwrap();
    bytes.extend(builder.into_inner().unwrap());

    let (_c, cache) = cache();
    let mut w = LayerWriter::new(&cache, 7);
    w.add_tar(&bytes[..], &TarImport { name: "rootfs.tar".into(), ..TarImport::default() }).unwrap();
    let blob = w.finish(Compression::Zstd).unwrap();
    let text = listing(&blob);
    insta::assert_snapshot!(text.replace(&"d".repeat(120), "D120").replace(&"t".repeat(150), "T150"), @r"
    2 0644 1000:42 7   0 bin -> usr/bin
    5 0755 0:0 7   0 dev
    3 0644 1000:42 7   0 dev/null dev 1:3
    4 0644 1000:42 7   0 dev/sda dev 8:0
    5 0755 0:0 7   0 etc
    0 0644 1000:42 7  15 etc/passwd
    5 0755 0:0 7   0 opt
    0 0644 1000:42 7   0 opt/.wh..wh..opq
    5 0755 0:0 7   0 run
    6 0644 1000:42 7   0 run/initctl
    5 0755 0:0 7   0 usr
    5 0755 0:0 7   0 usr/bin
    0 0644 1000:42 7   4 usr/bin/perl
    1 0644 1000:42 7   0 usr/bin/perl5.36 -> usr/bin/perl
    5 0755 0:0 7   0 usr/lib
    2 0777 0:0 7   0 usr/lib/longlink -> /T150
    5 0755 0:0 7   0 usr/share
    5 0755 0:0 7   0 usr/share/D120
    0 4755 0:0 7   4 usr/share/D120/file
    5 0755 0:0 7   0 var
    0 0644 1000:42 7   0 var/.wh.cache
    ");
    // Content survives transcoding (through the spool).
    let tar = tar_bytes(&blob);
    let mut archive = tar::Archive::new(&tar[..]);
    let mut contents = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut data = String::new();
        entry.read_to_string(&mut data).unwrap();
        contents.insert(lossy(&entry.path_bytes()), data);
    }
    assert_eq!(contents["etc/passwd"], "root:x:0:0:new\n");
    assert_eq!(contents["usr/bin/perl"], "perl");
    assert_eq!(contents[&format!("usr/share/{}/file", "d".repeat(120))], "long");

    // Dropping owners on request.
    let mut w = LayerWriter::new(&cache, 7);
    w.add_tar(&bytes[..], &TarImport { keep_owner: false, prefix: "/srv".into(), ..TarImport::default() })
        .unwrap();
    let text = listing(&w.finish(Compression::None).unwrap());
    assert!(text.contains("0 0644 0:0 7  15 srv/etc/passwd\n"), "{text}");
    assert!(text.contains("1 0644 0:0 7   0 srv/usr/bin/perl5.36 -> srv/usr/bin/perl\n"), "{text}");
}

#[test]
fn a_truncated_tar_is_an_error_naming_the_source() {
    let bytes = tar_of(&[Raw { data: &[b'x'; 2000], ..raw("big", EntryType::Regular) }]);
    let (_c, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    let err = w
        .add_tar(&bytes[..1000], &TarImport { name: "base.tar".into(), ..TarImport::default() })
        .unwrap_err();
    assert!(err.to_string().contains("base.tar"), "{err}");
}

#[test]
fn a_file_changed_after_listing_is_an_error() {
    let (_c, cache) = cache();
    let tree = tempfile::tempdir().unwrap();
    fs::write(tree.path().join("f"), b"12345").unwrap();
    let mut w = LayerWriter::new(&cache, 0);
    w.add_dir(tree.path(), "").unwrap();
    fs::write(tree.path().join("f"), b"123").unwrap();
    assert!(matches!(w.finish(Compression::None), Err(LayerError::Changed { .. })));
}

#[test]
fn whiteouts_and_replacement() {
    let (_c, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    w.add_whiteout("/usr/share/doc").unwrap();
    w.add_file("x", "old", 0o644).unwrap();
    w.add_file("x", "new", 0o600).unwrap();
    w.add_directory("usr", 0o700).unwrap();
    assert!(w.add_whiteout("/").is_err());
    let text = listing(&w.finish(Compression::None).unwrap());
    assert_eq!(
        text,
        "5 0700 0:0 0   0 usr\n5 0755 0:0 0   0 usr/share\n0 0644 0:0 0   0 usr/share/.wh.doc\n\
         0 0600 0:0 0   3 x\n"
    );
}

#[test]
fn compression_names_and_media_types() {
    for c in [Compression::Gzip, Compression::Zstd, Compression::None] {
        assert_eq!(c.name().parse::<Compression>().unwrap(), c);
        assert_eq!(Compression::from_media_type(c.media_type()), Some(c));
    }
    assert!("brotli".parse::<Compression>().is_err());
}

#[test]
fn an_empty_layer_is_valid() {
    let (_c, cache) = cache();
    let blob = LayerWriter::new(&cache, 0).finish(Compression::Gzip).unwrap();
    assert_eq!(tar_bytes(&blob), vec![0; 1024]);
}

#[test]
fn transcoding_a_layer_reproduces_it() {
    let (_c, cache) = cache();
    let tree = tempfile::tempdir().unwrap();
    stage(tree.path(), SystemTime::now());
    let mut w = LayerWriter::new(&cache, 5);
    w.add_dir(tree.path(), "").unwrap();
    let first = w.finish(Compression::Zstd).unwrap();
    let mut w = LayerWriter::new(&cache, 5);
    let reader = Compression::Zstd.decoder(File::open(&first.path).unwrap()).unwrap();
    w.add_tar(reader, &TarImport::default()).unwrap();
    let second = w.finish(Compression::Gzip).unwrap();
    assert_eq!(first.diff_id, second.diff_id);
}

/// A PAX extended header (`x`) whose `path` record overrides the next entry's name.
fn pax_path(path: &str, then: &str) -> Vec<u8> {
    let record = |k: &str, v: &str| {
        let body = format!(" {k}={v}\n");
        let mut n = body.len() + 1;
        while format!("{n}{body}").len() != n {
            n += 1;
        }
        format!("{n}{body}")
    };
    let data = record("path", path);
    let mut out = Vec::new();
    let mut h = Header::new_ustar();
    h.as_old_mut().name[..9].copy_from_slice(b"PaxHeader");
    h.set_entry_type(EntryType::XHeader);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data.as_bytes());
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&tar_of(&[raw(then, EntryType::Regular)]));
    out
}

#[test]
fn pax_path_overrides_are_checked_like_names() {
    let (_c, cache) = cache();
    for hostile in ["../../etc/cron.d/x", "/etc/shadow", "a/../../x", "ok/../../../up"] {
        let mut w = LayerWriter::new(&cache, 0);
        let err = w.add_tar(&pax_path(hostile, "innocent")[..], &TarImport::default()).unwrap_err();
        assert!(matches!(err, LayerError::UnsafeName { .. }), "{hostile}: {err}");
    }
    // A harmless override is taken: the entry is named by its PAX path.
    let mut w = LayerWriter::new(&cache, 0);
    w.add_tar(&pax_path("usr/real-name", "innocent")[..], &TarImport::default()).unwrap();
    let text = listing(&w.finish(Compression::None).unwrap());
    assert!(text.contains("usr/real-name") && !text.contains("innocent"), "{text}");
}

#[test]
fn whiteouts_from_a_tar_are_checked() {
    use EntryType::{Directory, Regular, Symlink};
    let bad: Vec<(Vec<Raw<'_>>, &str)> = vec![
        (vec![raw(".wh.", Regular)], "whiteout of an empty"),
        (vec![raw("usr/.wh..", Regular)], "whiteout of an empty"),
        (vec![raw("usr/.wh...", Regular)], "whiteout of an empty"),
        (vec![raw("usr/.wh..wh.plnk", Regular)], "unknown `.wh..wh.`"),
        (vec![raw("usr/.wh.doc", Directory)], "empty regular file"),
        (vec![Raw { link: "/etc/shadow", ..raw("usr/.wh.doc", Symlink) }], "empty regular file"),
        (vec![Raw { data: b"x", ..raw("usr/.wh.doc", Regular) }], "empty regular file"),
    ];
    for (entries, expected) in bad {
        let names: Vec<_> = entries.iter().map(|e| e.name).collect();
        let err = import(&entries).err().unwrap_or_else(|| panic!("{names:?} accepted"));
        assert!(err.to_string().contains(expected), "{names:?}: {err}");
    }
    for ok in [raw("usr/.wh.doc", Regular), raw("usr/.wh..wh..opq", Regular), raw(".wh.etc", Regular)] {
        assert!(import(&[ok]).is_ok());
    }
}

#[test]
fn a_checker_validates_without_writing() {
    use EntryType::{Link, Regular, Symlink};
    let (dir, cache) = cache();
    let mut c = LayerWriter::checker(&cache);
    c.add_tar(
        &tar_of(&[Raw { data: b"hello", ..raw("a/f", Regular) }, Raw { link: "a/f", ..raw("h", Link) }])[..],
        &TarImport::default(),
    )
    .unwrap();
    c.check().unwrap();
    assert!(std::fs::read_dir(dir.path().join("blobs/sha256")).map_or(true, |mut d| d.next().is_none()));
    let mut c = LayerWriter::checker(&cache);
    c.add_tar(&tar_of(&[Raw { link: "etc/shadow", ..raw("h", Link) }])[..], &TarImport::default()).unwrap();
    assert!(matches!(c.check(), Err(LayerError::BadHardlink { .. })));
    let mut c = LayerWriter::checker(&cache);
    let err = c
        .add_tar(
            &tar_of(&[Raw { link: "/etc", ..raw("a", Symlink) }, raw("a/shadow", Regular)])[..],
            &TarImport::default(),
        )
        .unwrap_err();
    assert!(matches!(err, LayerError::ThroughSymlink { .. }), "{err}");
}

#[test]
fn epochs_past_year_9999_are_refused() {
    assert_eq!(stackcontract::time::rfc3339(MAX_EPOCH), "9999-12-31T23:59:59Z");
    assert_eq!(check_epoch(MAX_EPOCH).unwrap(), MAX_EPOCH);
    for late in [MAX_EPOCH + 1, u64::MAX] {
        let err = check_epoch(late).unwrap_err().to_string();
        assert!(err.contains(&late.to_string()) && err.contains("9999-12-31T23:59:59Z"), "{err}");
    }
}

#[test]
fn oversized_names_are_refused_before_their_parents_are_made() {
    let (_c, cache) = cache();
    // 4097 bytes of `a/a/...`: 2049 parents, each a key, if it were accepted.
    let deep = "a/".repeat(2048) + "a";
    for name in [deep, format!("d/{}", "x".repeat(256))] {
        let mut w = LayerWriter::new(&cache, 0);
        let err = w.add_tar(&pax_path(&name, "innocent")[..], &TarImport::default()).unwrap_err();
        assert!(matches!(err, LayerError::UnsafeName { .. }), "{err}");
        assert!(w.is_empty());
    }
    // At the limits, accepted.
    let mut w = LayerWriter::new(&cache, 0);
    let name = format!("{}/{}", "y".repeat(255), "z/".repeat(1500) + "f");
    w.add_tar(&pax_path(&name, "innocent")[..], &TarImport::default()).unwrap();
}

/// A writer whose bytes can be read after it is handed away.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_tap_gets_the_whole_tar() {
    let (_dir, cache) = cache();
    let (a, b) = (Shared::default(), Shared::default());
    let mut w = LayerWriter::new(&cache, 0);
    w.add_file("etc/a", b"a file".to_vec(), 0o644).unwrap();
    let blob = w.with_tap(a.clone()).with_tap(b.clone()).finish(Compression::Gzip).unwrap();
    let tar = tar_bytes(&blob);
    assert_eq!(*a.0.lock().unwrap(), tar);
    assert_eq!(*b.0.lock().unwrap(), tar);
}

#[test]
fn an_estargz_layer_has_a_toc_whose_chunks_inflate_from_their_offsets_alone() {
    let list = layer_with_a_toc(Compression::Estargz, "application/vnd.oci.image.layer.v1.tar+gzip");
    // Every runtime reads it as a gzip tar: the entries, then the TOC.
    assert!(list.lines().last().unwrap().contains(estargz::TOC_NAME), "{list}");
    // Keyed apart from gzip.
    assert_ne!(Encoding::of(Compression::Estargz), Encoding::of(Compression::Gzip));
}

#[test]
fn a_zstd_chunked_layer_has_a_toc_whose_frames_decode_from_their_offsets_alone() {
    let list = layer_with_a_toc(Compression::ZstdChunked, "application/vnd.oci.image.layer.v1.tar+zstd");
    // Every runtime reads it as a zstd tar of the entries alone: the TOC is outside the tar.
    assert!(!list.contains(estargz::TOC_NAME), "{list}");
    assert_ne!(Encoding::of(Compression::ZstdChunked), Encoding::of(Compression::Zstd));
    assert_eq!("zstd:chunked".parse::<Compression>().unwrap(), Compression::ZstdChunked);
    assert_eq!(Compression::ZstdChunked.name(), "zstd:chunked");
}

/// A layer of every kind of entry with `compression`, read as the snapshotter reads it
/// ([`estargz::verify`]); returns its listing.
fn layer_with_a_toc(compression: Compression, media_type: &str) -> String {
    let (dir, cache) = cache();
    let big: Vec<u8> = test_support::rng::noise(9 << 20, 7);
    let staged = dir.path().join("staged");
    fs::create_dir_all(staged.join("lib")).unwrap();
    fs::write(staged.join("lib/exact.bin"), &big[..4 << 20]).unwrap();
    fs::write(staged.join("lib/tiny"), b"t").unwrap();
    let mut w = LayerWriter::new(&cache, 1_700_000_000);
    w.add_directory("d", 0o755).unwrap();
    w.add_file("d/small", b"hello".to_vec(), 0o644).unwrap();
    w.add_file("d/big", big.clone(), 0o755).unwrap();
    w.add_file("d/empty", Vec::new(), 0o600).unwrap();
    w.add_symlink("d/link", "small").unwrap();
    w.add_dir(&staged, "opt").unwrap();
    let tar = tar_of(&[
        Raw { name: "x/file", ty: EntryType::Regular, link: "", data: b"linked" },
        Raw { name: "x/hard", ty: EntryType::Link, link: "x/file", data: b"" },
    ]);
    w.add_tar(&tar[..], &TarImport { name: "t".into(), prefix: String::new(), keep_owner: false }).unwrap();
    let blob = w.finish(compression).unwrap();
    assert_eq!(blob.media_type, media_type);
    let files = estargz::verify(&blob);
    assert_eq!(files["d/big"], big);
    assert_eq!(files["d/small"], b"hello");
    assert_eq!(files["d/empty"], b"");
    assert_eq!(files["opt/lib/exact.bin"], &big[..4 << 20]);
    assert_eq!(files["x/file"], b"linked");
    let list = listing(&blob);
    assert!(list.contains("d/link") && list.contains("x/hard"), "{list}");
    list
}

#[test]
fn an_estargz_layer_refuses_an_entry_named_like_its_toc() {
    let (_dir, cache) = cache();
    let mut w = LayerWriter::new(&cache, 0);
    w.add_file(estargz::TOC_NAME, b"{}".to_vec(), 0o644).unwrap();
    let err = w.finish(Compression::Estargz).unwrap_err().to_string();
    assert!(err.contains("stargz.index.json") && err.contains("table of contents"), "{err}");
    // zstd:chunked's TOC is outside the tar, but its reader keys entries by name all the same.
    let mut w = LayerWriter::new(&cache, 0);
    w.add_file(estargz::TOC_NAME, b"{}".to_vec(), 0o644).unwrap();
    assert!(w.finish(Compression::ZstdChunked).is_err());
}

/// The compression's part of every layer key: each of its fields changes the key, for every
/// compression, and no two compressions share one.
#[test]
fn every_field_of_an_encoding_is_part_of_the_key() {
    let all = [
        Compression::Gzip,
        Compression::Zstd,
        Compression::None,
        Compression::Estargz,
        Compression::ZstdChunked,
    ];
    for c in all {
        let encoding = Encoding::of(c);
        let changed = stackbuild_cache::assert_every_input_changes_key(
            "encoding",
            &encoding,
            &["media_type", "codec", "toc", "writer_revision"],
        );
        assert!(changed.iter().any(|p| p == "writer_revision"), "{c:?}: {changed:?}");
        assert_eq!(encoding.media_type, c.media_type());
    }
    let keys: std::collections::BTreeSet<_> =
        all.iter().map(|c| stackbuild_cache::LayerKey::of("encoding", &Encoding::of(*c))).collect();
    assert_eq!(keys.len(), all.len(), "each compression is keyed apart");
    // The settings the writer uses are the ones keyed.
    let gzip = serde_json::to_value(Encoding::of(Compression::Gzip)).unwrap();
    assert_eq!(gzip["codec"]["members"]["chunk"], members::CHUNK);
    assert_eq!(gzip["codec"]["members"]["member"]["gzip"]["level"], GZIP_LEVEL);
    assert_eq!(gzip["codec"]["members"]["member"]["gzip"]["carries_wheel_deflate"], true);
    let chunked = serde_json::to_value(Encoding::of(Compression::ZstdChunked)).unwrap();
    assert_eq!(chunked["codec"]["members"]["member"]["zstd"]["level"], ZSTD_LEVEL);
    assert_eq!(chunked["toc"]["zstd-chunked"]["footer"], 40);
    let estargz = serde_json::to_value(Encoding::of(Compression::Estargz)).unwrap();
    assert_eq!(estargz["toc"]["estargz"]["footer"], 51);
    assert_eq!(estargz["toc"]["estargz"]["version"], 1);
}
