//! Members left in their wheels: the layer must be the one a staged install gives, byte for
//! byte once inflated, and a member that is not what `RECORD` says must fail the layer.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};

use sha2::{Digest as _, Sha256};
use zip::write::SimpleFileOptions;
use zip::ZipWriter;

use super::*;
use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackbuild_image::{LayerError, LayerWriter};

/// Compressible but not trivial content of `len` bytes.
fn content(len: usize, seed: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = u32::from(seed) + 1;
    while out.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let word = ["tensor", "cuda", "kernel", "\n", " ", "lib", "\0\0\0\0"][(x >> 16) as usize % 7];
        out.extend_from_slice(word.as_bytes());
    }
    out.truncate(len);
    out
}

/// A platlib wheel `big-1.0` with a large library, a large Python source and small files;
/// `lie` replaces the library's RECORD hash.
fn wheel(dir: &Path, lie: Option<&str>) -> (PathBuf, Vec<u8>) {
    let lib = content(300_000, 1);
    let members: Vec<(&str, Vec<u8>, u32)> = vec![
        ("big/_C.so", lib.clone(), 0o755),
        ("big/models.py", content(100_000, 2), 0o644),
        ("big/data.bin", content(70_000, 3), 0o644),
        ("big/__init__.py", b"x = 1\n".to_vec(), 0o644),
        ("big-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: big\nVersion: 1.0\n".to_vec(), 0o644),
        (
            "big-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
                .to_vec(),
            0o644,
        ),
    ];
    let path = dir.join("big-1.0-cp311-cp311-linux_x86_64.whl");
    let mut zip = ZipWriter::new(File::create(&path).unwrap());
    let mut record = String::new();
    for (name, bytes, mode) in &members {
        zip.start_file(*name, SimpleFileOptions::default().unix_permissions(*mode)).unwrap();
        zip.write_all(bytes).unwrap();
        let hash = match lie {
            Some(h) if *name == "big/_C.so" => h.to_owned(),
            _ => urlsafe_b64(&Sha256::digest(bytes)),
        };
        let _ = writeln!(record, "{name},sha256={hash},{}", bytes.len());
    }
    record.push_str("big-1.0.dist-info/RECORD,,\n");
    zip.start_file("big-1.0.dist-info/RECORD", SimpleFileOptions::default()).unwrap();
    zip.write_all(record.as_bytes()).unwrap();
    zip.finish().unwrap();
    (path, lib)
}

fn scheme() -> Scheme {
    Scheme::debian_local(&"3.11".parse().unwrap())
}

/// The layer of `whl`, staged whole or with its large members deferred.
fn layer(
    cache: &Cache,
    whl: &Path,
    defer: bool,
    compression: Compression,
) -> Result<stackbuild_common::LayerBlob, LayerError> {
    let stage = tempfile::tempdir().unwrap();
    let mut deferred = Deferred::default();
    if defer {
        install_wheel_deferring(whl, &scheme(), stage.path(), ("big", "1.0"), &mut deferred).unwrap();
    } else {
        install_wheel_as(whl, &scheme(), stage.path(), "big", "1.0").unwrap();
    }
    let mut writer = LayerWriter::new(cache, 0);
    writer.add_dir(stage.path(), "")?;
    for (path, member, mode) in deferred.into_members() {
        writer.add_zip_member(&path, member, mode)?;
    }
    writer.finish(compression)
}

fn inflate(blob: &stackbuild_common::LayerBlob) -> Vec<u8> {
    let mut out = Vec::new();
    let compression = Compression::from_media_type(&blob.media_type).unwrap();
    compression.decoder(File::open(&blob.path).unwrap()).unwrap().read_to_end(&mut out).unwrap();
    out
}

#[test]
fn defers_large_members_but_not_python_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let (whl, _) = wheel(tmp.path(), None);
    let stage = tmp.path().join("stage");
    let mut deferred = Deferred::default();
    let got = install_wheel_deferring(&whl, &scheme(), &stage, ("big", "1.0"), &mut deferred).unwrap();
    let site = stage.join(&got.site_packages_rel);
    let paths: Vec<String> = deferred.into_members().map(|(p, _, mode)| format!("{p} {mode:o}")).collect();
    assert_eq!(
        paths,
        [
            "usr/local/lib/python3.11/dist-packages/big/_C.so 755",
            "usr/local/lib/python3.11/dist-packages/big/data.bin 644",
        ]
    );
    assert!(!site.join("big/_C.so").exists(), "a deferred member is not staged");
    assert!(site.join("big/models.py").is_file(), "Python sources are staged for byte-code");
    // RECORD still lists every file, with the wheel's hashes.
    let record = fs::read_to_string(site.join("big-1.0.dist-info/RECORD")).unwrap();
    assert!(record.contains("big/_C.so,sha256="), "{record}");
    assert_eq!(got.files, 8, "4 members + METADATA + WHEEL + INSTALLER + RECORD, deferred ones included");
}

#[test]
fn a_deferred_layer_holds_the_same_tar_as_a_staged_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (whl, lib) = wheel(tmp.path(), None);
    let cache = Cache::open(tmp.path().join("cache")).unwrap();
    for compression in [Compression::Gzip, Compression::Zstd, Compression::None] {
        let staged = layer(&cache, &whl, false, compression).unwrap();
        let carried = layer(&cache, &whl, true, compression).unwrap();
        assert_eq!(carried.diff_id, staged.diff_id, "{compression:?}: the uncompressed tar is the same");
        let tar = inflate(&carried);
        assert_eq!(format!("sha256:{}", hex::encode(Sha256::digest(&tar))), carried.diff_id);
        assert!(tar.windows(lib.len()).any(|w| w == lib), "the library's bytes are in the tar");
        let again = layer(&cache, &whl, true, compression).unwrap();
        assert_eq!(again.digest, carried.digest, "{compression:?}: reproducible");
    }
}

#[test]
fn a_gzip_layer_carries_the_wheels_own_deflate_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let (whl, _) = wheel(tmp.path(), None);
    let cache = Cache::open(tmp.path().join("cache")).unwrap();
    let blob = layer(&cache, &whl, true, Compression::Gzip).unwrap();
    let gz = fs::read(&blob.path).unwrap();
    // The library's compressed bytes, as the wheel holds them, appear in the layer.
    let mut archive = ZipArchive::new(File::open(&whl).unwrap()).unwrap();
    let entry = archive.by_name("big/_C.so").unwrap();
    let (start, len) = (entry.data_start(), entry.compressed_size());
    drop(entry);
    let raw =
        fs::read(&whl).unwrap()[usize::try_from(start).unwrap()..][..usize::try_from(len).unwrap()].to_vec();
    assert!(gz.windows(raw.len()).any(|w| w == raw), "the member's deflate stream is carried as is");
    // And every gzip reader sees one stream: the system's gzip too, when it is here.
    if let Ok(status) = std::process::Command::new("gzip").arg("-t").arg(&blob.path).status() {
        assert!(status.success(), "gzip -t refuses the layer");
    }
}

#[test]
fn a_layer_with_a_toc_carries_members_as_chunks_that_inflate_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (whl, lib) = wheel(tmp.path(), None);
    let cache = Cache::open(tmp.path().join("cache")).unwrap();
    // eStargz carries the deflate stream; zstd:chunked inflates it into frames of its own.
    for compression in [Compression::Estargz, Compression::ZstdChunked] {
        let carried = layer(&cache, &whl, true, compression).unwrap();
        let staged = layer(&cache, &whl, false, compression).unwrap();
        let (a, b) =
            (stackbuild_image::estargz::verify(&carried), stackbuild_image::estargz::verify(&staged));
        assert_eq!(a, b, "{compression:?}: the same files, whether carried or staged");
        assert!(
            a.values().any(|content| *content == lib),
            "{compression:?}: the library is a file of the TOC"
        );
    }
}

#[test]
fn a_member_that_does_not_match_record_fails_the_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let lie = urlsafe_b64(&Sha256::digest(b"something else"));
    let (whl, _) = wheel(tmp.path(), Some(&lie));
    let cache = Cache::open(tmp.path().join("cache")).unwrap();
    for compression in [Compression::Gzip, Compression::Zstd, Compression::Estargz, Compression::ZstdChunked]
    {
        let err = layer(&cache, &whl, true, compression).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LayerError::Member(_)), "{compression:?}: {text}");
        assert!(text.contains("big/_C.so") && text.contains(&lie), "{text}");
    }
    // The staged install refuses it at once, as before.
    let stage = tmp.path().join("stage");
    assert!(install_wheel_as(&whl, &scheme(), &stage, "big", "1.0").is_err());
}

#[test]
fn a_later_wheels_file_replaces_a_deferred_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (whl, _) = wheel(tmp.path(), None);
    let stage = tmp.path().join("stage");
    let mut deferred = Deferred::default();
    install_wheel_deferring(&whl, &scheme(), &stage, ("big", "1.0"), &mut deferred).unwrap();
    assert_eq!(deferred.len(), 2);
    // The same wheel installed again without deferral writes the files into the stage: the
    // deferred entries of the earlier install are gone.
    let mut out = Output {
        stage: &stage,
        written: HashSet::new(),
        rows: Vec::new(),
        bytes: 0,
        deferred: Some(&mut deferred),
    };
    let dest: Vec<String> =
        "usr/local/lib/python3.11/dist-packages/big/_C.so".split('/').map(str::to_owned).collect();
    assert!(out.create(&dest).is_ok());
    assert_eq!(deferred.len(), 1);
}
