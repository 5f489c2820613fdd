use std::io::Read;
use std::os::unix::fs::symlink;

use super::*;
use crate::layer::LayerWriter;
use stackbuild_cache::Cache;
use stackbuild_common::Compression;
use stackcontract::time::rfc3339;

fn cache() -> (tempfile::TempDir, Cache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    (dir, cache)
}

fn layer(cache: &Cache, content: &str) -> LayerBlob {
    let mut w = LayerWriter::new(cache, 0);
    w.add_file("/etc/motd", content, 0o644).unwrap();
    w.finish(Compression::Gzip).unwrap()
}

fn image(cache: &Cache) -> Image {
    let config = ImageConfig {
        created: Some(rfc3339(1_700_000_000)),
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RuntimeConfig {
            env: vec!["PATH=/usr/bin:/bin".into()],
            cmd: Some(vec!["/bin/sh".into()]),
            labels: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
            ..RuntimeConfig::default()
        },
        ..ImageConfig::default()
    };
    let annotations = BTreeMap::from([("org.opencontainers.image.title".to_string(), "test".to_string())]);
    Image::new(config, vec![layer(cache, "one\n"), layer(cache, "two\n")], annotations).unwrap()
}

#[test]
fn rfc3339_from_epoch() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
}

#[test]
fn documents_are_canonical() {
    let (_c, cache) = cache();
    let image = image(&cache);
    let config = String::from_utf8(image.config_json().unwrap()).unwrap();
    let config =
        config.replace(&image.layers()[0].diff_id, "<L0>").replace(&image.layers()[1].diff_id, "<L1>");
    insta::assert_snapshot!(config, @r#"{"architecture":"amd64","config":{"Cmd":["/bin/sh"],"Env":["PATH=/usr/bin:/bin"],"Labels":{"a":"1","b":"2"}},"created":"2023-11-14T22:13:20Z","history":[{"created":"2023-11-14T22:13:20Z"},{"created":"2023-11-14T22:13:20Z"}],"os":"linux","rootfs":{"diff_ids":["<L0>","<L1>"],"type":"layers"}}"#);
    let manifest = image.manifest().unwrap();
    assert_eq!(manifest.layers.len(), 2);
    assert_eq!(manifest.config.media_type, MEDIA_TYPE_CONFIG);
    let json = String::from_utf8(image.manifest_json().unwrap()).unwrap();
    assert_eq!(sha256_bytes(json.as_bytes()), image.manifest_digest().unwrap());
    assert!(
        json.starts_with(
            r#"{"annotations":{"org.opencontainers.image.title":"test"},"config":{"digest":"sha256:"#
        ),
        "{json}"
    );
    assert!(
        json.ends_with(r#"],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}"#),
        "{json}"
    );
}

#[test]
fn history_must_match_layers() {
    let (_c, cache) = cache();
    let config = ImageConfig {
        history: vec![History::default(), History { empty_layer: true, ..History::default() }],
        ..ImageConfig::default()
    };
    let err = Image::new(config, vec![layer(&cache, "a"), layer(&cache, "b")], BTreeMap::new()).unwrap_err();
    assert!(matches!(err, OciError::HistoryMismatch { history: 1, layers: 2 }), "{err}");
}

#[test]
fn layout_is_deterministic_and_reads_back() {
    let (_c, cache) = cache();
    let image = image(&cache);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let m1 = write_layout(d1.path(), &image, "v1").unwrap();
    let m2 = write_layout(d2.path(), &image, "v1").unwrap();
    assert_eq!(m1, m2);
    assert_eq!(m1, image.manifest_digest().unwrap());
    for name in ["oci-layout", "index.json"] {
        assert_eq!(fs::read(d1.path().join(name)).unwrap(), fs::read(d2.path().join(name)).unwrap());
    }
    assert_eq!(
        fs::read_to_string(d1.path().join("oci-layout")).unwrap(),
        r#"{"imageLayoutVersion":"1.0.0"}"#
    );

    // Rewriting is idempotent; a second tag is added, the same tag replaced.
    write_layout(d1.path(), &image, "v1").unwrap();
    write_layout(d1.path(), &image, "v2").unwrap();
    let index: Index = read_json(&d1.path().join("index.json")).unwrap();
    let tags: Vec<_> = index.manifests.iter().map(|d| d.annotations[ANNOTATION_REF_NAME].as_str()).collect();
    assert_eq!(tags, ["v1", "v2"]);
    assert_eq!(index.manifests[0].platform.as_ref().unwrap().architecture, "amd64");

    let read = read_layout(d1.path(), Some("v2")).unwrap();
    assert_eq!(read.manifest_digest, m1);
    assert_eq!(read.config, *image.config());
    assert_eq!(read.manifest, image.manifest().unwrap());
    assert_eq!(read.layers.len(), 2);
    for (read, written) in read.layers.iter().zip(image.layers()) {
        assert_eq!(
            (&read.digest, &read.diff_id, read.size),
            (&written.digest, &written.diff_id, written.size)
        );
        assert!(read.path.starts_with(fs::canonicalize(d1.path()).unwrap()));
        verify_layout_blob(read).unwrap();
    }
    assert_eq!(read_layout(d2.path(), None).unwrap().manifest_digest, m1);
    assert!(matches!(read_layout(d1.path(), None), Err(OciError::TagNotFound { .. })));
    let err = read_layout(d1.path(), Some("v3")).unwrap_err();
    assert!(err.to_string().contains("tags: v1, v2"), "{err}");
    assert!(write_layout(d1.path(), &image, "../x").is_err());
    assert!(fs::read_dir(d1.path().join("blobs/sha256"))
        .unwrap()
        .all(|e| { !e.unwrap().file_name().to_string_lossy().starts_with('.') }));
}

#[test]
fn reading_refuses_escapes_and_tampering() {
    let (_c, cache) = cache();
    let image = image(&cache);
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_layout(dir.path(), &image, "t").unwrap();
    let blob = |digest: &str| dir.path().join("blobs/sha256").join(sha256_hex(digest).unwrap());

    // A layer blob replaced by a symlink to a file outside the layout.
    let layer = blob(&image.layers()[0].digest);
    let copy = outside.path().join("blob");
    fs::copy(&layer, &copy).unwrap();
    fs::remove_file(&layer).unwrap();
    symlink(&copy, &layer).unwrap();
    assert!(matches!(read_layout(dir.path(), Some("t")), Err(OciError::Escapes { .. })));
    fs::remove_file(&layer).unwrap();
    fs::copy(&copy, &layer).unwrap();
    read_layout(dir.path(), Some("t")).unwrap();

    // A tampered config.
    let config = blob(&image.manifest().unwrap().config.digest);
    let mut bytes = fs::read(&config).unwrap();
    bytes[2] ^= 1;
    fs::write(&config, &bytes).unwrap();
    assert!(matches!(read_layout(dir.path(), Some("t")), Err(OciError::BlobMismatch { .. })));

    // A digest that is not one.
    let index = fs::read_to_string(dir.path().join("index.json")).unwrap();
    let digest = image.manifest_digest().unwrap();
    fs::write(dir.path().join("index.json"), index.replace(&digest, "sha256:../../../etc/passwd")).unwrap();
    assert!(matches!(read_layout(dir.path(), Some("t")), Err(OciError::Digest(_))));
}

#[test]
fn archive_is_deterministic_and_complete() {
    let (_c, cache) = cache();
    let image = image(&cache);
    let dir = tempfile::tempdir().unwrap();
    let (a1, a2) = (dir.path().join("a1.tar"), dir.path().join("a2.tar"));
    let m1 = write_archive(&a1, &image, "example/app:1.0").unwrap();
    let m2 = write_archive(&a2, &image, "example/app:1.0").unwrap();
    assert_eq!(m1, m2);
    assert_eq!(fs::read(&a1).unwrap(), fs::read(&a2).unwrap());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary files left");

    let bytes = fs::read(&a1).unwrap();
    let mut archive = tar::Archive::new(&bytes[..]);
    let mut names = Vec::new();
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        assert_eq!(entry.header().mtime().unwrap(), 0);
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        names.push(name.clone());
        files.insert(name, data);
    }
    let hex = |d: &str| sha256_hex(d).unwrap().to_string();
    let docs = image.documents().unwrap();
    let mut blobs: Vec<_> = [&docs.config_digest, &docs.manifest_digest]
        .into_iter()
        .chain(image.layers().iter().map(|l| &l.digest))
        .map(|d| format!("blobs/sha256/{}", hex(d)))
        .collect();
    blobs.sort();
    let mut expected = vec!["blobs".to_string(), "blobs/sha256".to_string()];
    expected.extend(blobs);
    expected.extend(["index.json", "manifest.json", "oci-layout"].map(String::from));
    assert_eq!(names, expected);

    let legacy = String::from_utf8(files["manifest.json"].clone()).unwrap();
    assert_eq!(
        legacy,
        format!(
            r#"[{{"Config":"blobs/sha256/{}","Layers":["blobs/sha256/{}","blobs/sha256/{}"],"RepoTags":["example/app:1.0"]}}]"#,
            hex(&docs.config_digest),
            hex(&image.layers()[0].digest),
            hex(&image.layers()[1].digest)
        )
    );
    let index: Index = serde_json::from_slice(&files["index.json"]).unwrap();
    assert_eq!(index.manifests[0].digest, m1);
    assert_eq!(index.manifests[0].annotations[ANNOTATION_REF_NAME], "1.0");
    assert_eq!(index.manifests[0].annotations[ANNOTATION_CONTAINERD_NAME], "example/app:1.0");
    for (name, data) in &files {
        if let Some(h) = name.strip_prefix("blobs/sha256/") {
            assert_eq!(sha256_bytes(data), format!("sha256:{h}"));
        }
    }
}

#[test]
fn repo_tags() {
    assert_eq!(split_repo_tag("app").unwrap(), ("app", "latest"));
    assert_eq!(split_repo_tag("app:1.0").unwrap(), ("app", "1.0"));
    assert_eq!(split_repo_tag("localhost:5000/team/app:v2").unwrap(), ("localhost:5000/team/app", "v2"));
    assert_eq!(split_repo_tag("localhost:5000/app").unwrap(), ("localhost:5000/app", "latest"));
    for bad in ["", "App:1", "app:", "app:-x", "app@sha256:00", "app:a/b", "a b", "host:x/app", "a//b"] {
        assert!(split_repo_tag(bad).is_err(), "{bad}");
    }
}

#[test]
fn docker_style_config_reads() {
    let json = r#"{"architecture":"amd64","os":"linux","config":{"Env":null,"Cmd":null,"Labels":null,
        "Hostname":"","ExposedPorts":{"80/tcp":{}}},"container_config":{},"rootfs":{"type":"layers","diff_ids":[]},
        "history":[{"created":"2020-01-01T00:00:00Z","created_by":"/bin/sh","empty_layer":true}]}"#;
    let config: ImageConfig = serde_json::from_str(json).unwrap();
    assert!(config.config.env.is_empty());
    assert_eq!(config.history.len(), 1);
    assert!(config.history[0].empty_layer);
}

#[test]
fn an_update_keeps_other_tags_their_blobs_and_foreign_files() {
    let (_c, cache) = cache();
    let first = image(&cache);
    let dir = tempfile::tempdir().unwrap();
    write_layout(dir.path(), &first, "v1").unwrap();
    // Another tool's entry with fields this writer does not know, an index annotation, and a
    // file of the user's next to the layout's own.
    let index_path = dir.path().join("index.json");
    let mut index: serde_json::Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    let foreign = serde_json::json!({
        "mediaType": MEDIA_TYPE_MANIFEST, "digest": format!("sha256:{}", "a".repeat(64)), "size": 7,
        "annotations": {ANNOTATION_REF_NAME: "other"}, "artifactType": "application/x-kept", "urls": ["x"],
    });
    index["manifests"].as_array_mut().unwrap().push(foreign.clone());
    index["annotations"] = serde_json::json!({"org.example": "kept"});
    fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    fs::write(dir.path().join("NOTES"), "mine").unwrap();
    let before: Vec<_> =
        fs::read_dir(dir.path().join("blobs/sha256")).unwrap().map(|e| e.unwrap().path()).collect();

    // A second image under a new tag, then the first tag replaced by a two-platform index.
    let mut config = first.config().clone();
    config.config.cmd = Some(vec!["/bin/true".into()]);
    config.history.clear();
    let second = Image::new(config.clone(), vec![layer(&cache, "three\n")], BTreeMap::new()).unwrap();
    write_layout(dir.path(), &second, "v2").unwrap();
    config.architecture = "arm64".into();
    let arm = Image::new(config, vec![layer(&cache, "four\n")], BTreeMap::new()).unwrap();
    let index_digest = write_layout_images(dir.path(), &[second.clone(), arm], "v1").unwrap();

    let index: serde_json::Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    let entries = index["manifests"].as_array().unwrap();
    assert!(entries.contains(&foreign), "the foreign entry changed: {index}");
    assert_eq!(index["annotations"]["org.example"], "kept");
    let tags: Vec<_> =
        entries.iter().map(|e| e["annotations"][ANNOTATION_REF_NAME].as_str().unwrap()).collect();
    assert_eq!(tags, ["other", "v2", "v1"]);
    assert_eq!(
        read_layout(dir.path(), Some("v2")).unwrap().manifest_digest,
        second.manifest_digest().unwrap()
    );
    let nested = read_layout_index(dir.path(), Some("v1")).unwrap().unwrap();
    assert_eq!(nested.1, index_digest);
    assert_eq!(fs::read_to_string(dir.path().join("NOTES")).unwrap(), "mine");
    for blob in before {
        assert!(blob.is_file(), "{} was removed", blob.display());
    }
    let stray: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "temporary files left: {stray:?}");
}

#[test]
fn an_archive_replaces_only_its_own_file() {
    let (_c, cache) = cache();
    let image = image(&cache);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("x.tar");
    // The names an earlier version used for its temporary file, and a user's file.
    fs::write(dir.path().join("x.tmp"), "user data").unwrap();
    fs::write(&archive, "an older archive").unwrap();
    write_archive(&archive, &image, "x:1").unwrap();
    assert_eq!(fs::read_to_string(dir.path().join("x.tmp")).unwrap(), "user data");
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["x.tar", "x.tmp"]);
    // A directory or a symlink at the archive's name is refused and left as it is.
    let sub = dir.path().join("d.tar");
    fs::create_dir(&sub).unwrap();
    let err = write_archive(&sub, &image, "x:1").unwrap_err().to_string();
    assert!(err.contains("a directory is there"), "{err}");
    symlink(dir.path().join("x.tmp"), dir.path().join("l.tar")).unwrap();
    let err = write_archive(&dir.path().join("l.tar"), &image, "x:1").unwrap_err().to_string();
    assert!(err.contains("a symlink is there"), "{err}");
    assert_eq!(fs::read_to_string(dir.path().join("x.tmp")).unwrap(), "user data");
    // An error names the user's path, not a temporary one.
    let err = write_archive(&dir.path().join("missing/y.tar"), &image, "x:1").unwrap_err().to_string();
    assert!(err.contains("missing/y.tar") && !err.contains("stackbuild-tmp"), "{err}");
}

/// A base's config fields that a build does not decide survive a read and a write: exposed
/// ports, volumes, stop signal, `ArgsEscaped`, health check, `author`, `os.version`; and the bytes
/// do not depend on the order the base listed them in.
#[test]
fn base_config_fields_are_kept_in_a_canonical_order() {
    let base = r#"{"architecture":"amd64","os":"linux","os.version":"10.0.17763.1",
        "os.features":["win32k"],"author":"someone",
        "config":{"Env":["A=1"],"Volumes":{"/data":{},"/a":{}},"ExposedPorts":{"8080/tcp":{},"443/tcp":{}},
            "StopSignal":"SIGINT","ArgsEscaped":true,"Healthcheck":{"Test":["CMD","true"]}},
        "rootfs":{"type":"layers","diff_ids":[]}}"#;
    let reordered = r#"{"rootfs":{"type":"layers","diff_ids":[]},"author":"someone",
        "config":{"StopSignal":"SIGINT","Healthcheck":{"Test":["CMD","true"]},"ArgsEscaped":true,
            "ExposedPorts":{"443/tcp":{},"8080/tcp":{}},"Env":["A=1"],"Volumes":{"/a":{},"/data":{}}},
        "os.features":["win32k"],"os.version":"10.0.17763.1","architecture":"amd64","os":"linux"}"#;
    let a: ImageConfig = serde_json::from_str(base).unwrap();
    let b: ImageConfig = serde_json::from_str(reordered).unwrap();
    // Written as the builder writes it: oci-spec's types, then the canonical writer.
    let written = |c: ImageConfig| {
        String::from_utf8(Image::new(c, Vec::new(), BTreeMap::new()).unwrap().config_json().unwrap()).unwrap()
    };
    let (ja, jb) = (written(a), written(b));
    assert_eq!(ja, jb);
    assert!(ja.contains(r#""ExposedPorts":{"443/tcp":{},"8080/tcp":{}}"#), "{ja}");
    let back: serde_json::Value = serde_json::from_str(&ja).unwrap();
    assert_eq!(back["config"]["ExposedPorts"]["8080/tcp"], serde_json::json!({}));
    assert_eq!(back["config"]["Volumes"]["/data"], serde_json::json!({}));
    assert_eq!(back["config"]["StopSignal"], "SIGINT");
    assert_eq!(back["config"]["ArgsEscaped"], true);
    assert_eq!(back["config"]["Healthcheck"]["Test"][0], "CMD");
    assert_eq!(
        (back["author"].as_str(), back["os.version"].as_str()),
        (Some("someone"), Some("10.0.17763.1"))
    );
    assert_eq!(back["os.features"][0], "win32k");
}

/// The environment variable that makes [`twenty_processes_write_identical_bytes`] a child: it
/// then writes one archive at the path it names.
const CHILD_ARCHIVE: &str = "STACKBUILD_TEST_CHILD_ARCHIVE";

/// oci-spec keeps labels and annotations in `HashMap`s, whose iteration order is seeded per
/// process: only separate processes show whether the bytes written depend on it. This test runs
/// itself 20 times as a child, each writing an archive of an image with many labels, annotations,
/// ports and volumes, and compares the bytes.
#[test]
fn twenty_processes_write_identical_bytes() {
    let (_c, cache) = cache();
    let many = |prefix: &str| -> BTreeMap<String, String> {
        (0..32).map(|i| (format!("{prefix}.{i}"), format!("value {i}"))).collect()
    };
    let set = |keys: &[&str]| {
        serde_json::Value::Object(keys.iter().map(|k| ((*k).to_owned(), serde_json::json!({}))).collect())
    };
    let config = ImageConfig {
        architecture: "amd64".into(),
        os: "linux".into(),
        config: RuntimeConfig {
            labels: many("org.example.label"),
            other: BTreeMap::from([
                ("ExposedPorts".to_owned(), set(&["80/tcp", "443/tcp", "8080/tcp", "9090/udp"])),
                ("Volumes".to_owned(), set(&["/data", "/cache", "/models", "/logs"])),
            ]),
            ..RuntimeConfig::default()
        },
        ..ImageConfig::default()
    };
    let image = Image::new(config, vec![layer(&cache, "one\n")], many("org.example.annotation")).unwrap();
    if let Some(path) = std::env::var_os(CHILD_ARCHIVE) {
        write_archive(Path::new(&path), &image, "example/app:1.0").unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let name = "oci::tests::twenty_processes_write_identical_bytes";
    let archives: Vec<Vec<u8>> = (0..20)
        .map(|i| {
            let path = dir.path().join(format!("{i}.tar"));
            let status = std::process::Command::new(&exe)
                .args([name, "--exact", "--quiet", "--test-threads=1"])
                .env(CHILD_ARCHIVE, &path)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "child {i}: {status}");
            fs::read(&path).unwrap()
        })
        .collect();
    assert!(archives.iter().all(|a| *a == archives[0]), "the archives differ between processes");
    // The parent's own write matches too.
    let own = dir.path().join("own.tar");
    write_archive(&own, &image, "example/app:1.0").unwrap();
    assert_eq!(fs::read(&own).unwrap(), archives[0]);
}
