//! End-to-end builds of small real recipes: a Debian base by mmdebstrap, small wheels from the
//! package index, a generated stand-in git repository and a patch; checked with umoci, skopeo,
//! runc and (when dockerd runs) `docker load`.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{
    build, debian_builds_ready as ready, have, ok, six_patch, stand_in_repo, Built, BOOKWORM_PYTHON,
};

fn recipe(dir: &Path, url: &str, commit: &str, tomli: &str, find: &str) -> PathBuf {
    let path = dir.join("small.toml");
    std::fs::write(
        &path,
        format!(
            r#"[image]
name = "small"
tag = "test"
cmd = ["python3", "-c", "import six; print(six.__version__)"]

{base}
[python]
version = "3.11"
packages = ["six==1.16.0", "tomli=={tomli}"]

[[source]]
name = "model"
git = "{url}"
commit = "{commit}"
dest = "/workspace/model"

{patch}
[host]
modules = ["nvidia_uvm"]
"#,
            base = BOOKWORM_PYTHON,
            patch = six_patch(find),
        ),
    )
    .unwrap();
    path
}

fn built_layers(b: &Built) -> Vec<(String, bool)> {
    b.report["layers"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|l| (l["name"].as_str().unwrap().to_owned(), l["built"].as_bool().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn small_recipe_end_to_end() {
    if !ready(&[]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (url, commit) = stand_in_repo(&tmp.path().join("repo"));
    let find = r#"__version__ = "1.16.0""#;
    let recipe = recipe(tmp.path(), &url, &commit, "2.0.1", find);
    let cache = tmp.path().join("cache");
    let layout = tmp.path().join("layout");
    let archive = tmp.path().join("small.tar");

    // Cold build, then the same build in a fresh cache: the same digest.
    let first = build(&recipe, &cache, &layout, &["--archive", archive.to_str().unwrap()]);
    ok(&first);
    // stderr is a pipe here, as in CI or `2>log`: plain text, no escape codes.
    assert!(!first.out.stderr.contains(&0x1b), "escape codes in a piped log");
    assert!(built_layers(&first).iter().all(|(_, built)| *built));
    let names: Vec<String> = built_layers(&first).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["base", "python", "sources", "config"]);
    let other = build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("layout2"), &["--locked"]);
    assert_eq!(ok(&other).digest, first.digest, "two caches, one recipe and lock: one digest");

    // No change: every layer reused.
    let again = build(&recipe, &cache, &layout, &["--locked"]);
    assert_eq!(ok(&again).digest, first.digest);
    assert!(built_layers(&again).iter().all(|(_, built)| !*built), "{:?}", built_layers(&again));

    // The tools agree it is a valid image.
    check_with_umoci_and_runc(tmp.path(), &layout);
    let inspect =
        Command::new("skopeo").arg("inspect").arg(format!("oci:{}:test", layout.display())).output().unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let inspect: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(inspect["Digest"], first.digest.as_str());
    let env = inspect["Env"].to_string();
    assert!(env.contains("STACKBUILD_REQUIRE_MODULES=module=nvidia_uvm"), "{env}");
    docker_load(&archive);
    push_to_registry(&recipe, &cache, &layout, &first.digest);

    // One package changed: only its layer and those above that depend on it are rebuilt.
    let recipe = self::recipe(tmp.path(), &url, &commit, "2.0.0", find);
    let changed = build(&recipe, &cache, &layout, &[]);
    ok(&changed);
    assert_ne!(changed.digest, first.digest);
    assert_eq!(
        built_layers(&changed),
        [("base".into(), false), ("python".into(), true), ("sources".into(), false), ("config".into(), true)]
    );

    // A patch that no longer applies fails the build, naming the patch and the file.
    let recipe = self::recipe(tmp.path(), &url, &commit, "2.0.0", r#"__version__ = "9.9.9""#);
    let broken = build(&recipe, &cache, &tmp.path().join("layout3"), &[]);
    assert!(!broken.out.status.success());
    let err = String::from_utf8_lossy(&broken.out.stderr);
    assert!(err.contains("six-version") && err.contains("six.py"), "{err}");
    assert!(!tmp.path().join("layout3").exists(), "a failed build leaves no image");
}

fn check_with_umoci_and_runc(dir: &Path, layout: &Path) {
    if !have("umoci") || !have("runc") {
        eprintln!("skipped umoci/runc: not installed");
        return;
    }
    let bundle = dir.join("bundle");
    let out = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:test", layout.display()))
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(out.status.success(), "umoci unpack: {}", String::from_utf8_lossy(&out.stderr));
    assert!(bundle.join("rootfs/etc/stackbuild/stack.json").is_file());
    assert!(bundle.join("rootfs/workspace/model/train.py").is_file());
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["process"]["terminal"] = false.into();
    config["process"]["args"] =
        serde_json::json!(["python3", "-c", "import six, tomli; print(six.__version__, tomli.__name__)"]);
    std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    let id = format!("stackbuild-e2e-{}", std::process::id());
    let out = Command::new("runc").arg("run").arg("--bundle").arg(&bundle).arg(&id).output().unwrap();
    let _ = Command::new("runc").args(["delete", "--force", &id]).output();
    assert!(out.status.success(), "runc run: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1.16.0+patched tomli");
}

fn docker_load(archive: &Path) {
    let docker = Path::new(test_support::tools::DOCKER);
    if !test_support::tools::dockerd_answers() {
        eprintln!("skipped docker load: no dockerd answering (.ci/services starts one)");
        return;
    }
    let out = Command::new(docker).arg("load").arg("-i").arg(archive).output().unwrap();
    assert!(out.status.success(), "docker load: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("small:test"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = Command::new(docker).args(["run", "--rm", "--network", "none", "small:test"]).output().unwrap();
    assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1.16.0+patched");
    let _ = Command::new(docker).args(["rmi", "-f", "small:test"]).output();
}

/// Pushes with `--push` to the registry `.ci/services` runs on 127.0.0.1, twice: the second push
/// uploads no blob, and skopeo reads back the same digest.
fn push_to_registry(recipe: &Path, cache: &Path, layout: &Path, digest: &str) {
    let port = std::env::var("STACKBUILD_TEST_REGISTRY_PORT").unwrap_or_else(|_| "5115".into());
    if std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        eprintln!("skipped --push: no registry on 127.0.0.1:{port} (.ci/services starts one)");
        return;
    }
    let dest = format!("127.0.0.1:{port}/stackbuild-e2e/small:test");
    for round in 0..2 {
        let pushed = build(recipe, cache, layout, &["--locked", "--push", &dest]);
        assert_eq!(ok(&pushed).digest, digest);
        let uploaded = pushed.report["push"]["blobs_uploaded"].as_u64().unwrap();
        if round == 1 {
            assert_eq!(uploaded, 0, "second push uploads nothing: {}", pushed.report["push"]);
        }
    }
    let inspect = Command::new("skopeo")
        .args(["inspect", "--tls-verify=false"])
        .arg(format!("docker://{dest}"))
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let inspect: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(inspect["Digest"], digest);
}

/// Bases from an image archive and from the local Docker daemon: both transcode the same layers
/// into the same blobs, and the image built on them runs.
#[test]
fn bases_from_an_archive_and_the_docker_daemon() {
    if !common::is_root() || !Path::new("/bin/busybox").exists() {
        eprintln!("skipped: needs root and busybox-static");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("busybox-tree");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", bin.join("sh")).unwrap();
    let write = |name: &str, base: &str| {
        let path = tmp.path().join(name);
        std::fs::write(
            &path,
            format!(
                "[image]\nname = \"{}\"\ntag = \"test\"\ncmd = [\"/bin/busybox\", \"echo\", \"from-{}\"]\nenv = {{ FROM_BASE = \"{}\" }}\n{base}\n",
                name.trim_end_matches(".toml"),
                name.trim_end_matches(".toml"),
                name.trim_end_matches(".toml"),
            ),
        )
        .unwrap();
        path
    };
    let cache = tmp.path().join("cache");
    let first = write(
        "first.toml",
        &format!(
            "[base]\nscratch = true\n[[source]]\nname = \"bin\"\npath = \"{}\"\ndest = \"/bin\"\n",
            bin.display()
        ),
    );
    let archive = tmp.path().join("first.tar");
    ok(&build(&first, &cache, &tmp.path().join("first"), &["--archive", archive.to_str().unwrap()]));

    let second = write("second.toml", &format!("[base]\narchive = \"{}\"\n", archive.display()));
    let from_archive = build(&second, &cache, &tmp.path().join("second"), &[]);
    ok(&from_archive);
    let diff_ids = |layout: &Path| -> Vec<String> {
        let image = stackbuild_image::read_layout(layout, Some("test")).unwrap();
        image.config.rootfs.diff_ids
    };
    let archive_ids = diff_ids(&tmp.path().join("second"));
    let first_ids = diff_ids(&tmp.path().join("first"));
    assert_eq!(
        archive_ids[..first_ids.len()],
        first_ids[..],
        "the base's layers, transcoded, are the same tars"
    );
    // The second build on the same archive reuses the import.
    let again = build(&second, &cache, &tmp.path().join("second"), &[]);
    assert_eq!(ok(&again).digest, from_archive.digest);

    // An OCI layout base's config fields that the recipe does not set are kept: exposed ports,
    // volumes, stop signal (set here with umoci, an independent writer of image configs).
    if Command::new("umoci").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let layout = tmp.path().join("first");
        let out = Command::new("umoci")
            .args(["config", "--image"])
            .arg(format!("{}:test", layout.display()))
            .args(["--config.exposedports", "8080/tcp", "--config.volume", "/data"])
            .args(["--config.stopsignal", "SIGINT", "--author", "base-author"])
            .output()
            .unwrap();
        assert!(out.status.success(), "umoci config: {}", String::from_utf8_lossy(&out.stderr));
        let fourth = write("fourth.toml", &format!("[base]\noci = \"{}:test\"\n", layout.display()));
        ok(&build(&fourth, &cache, &tmp.path().join("fourth"), &[]));
        let config = stackbuild_image::read_layout(&tmp.path().join("fourth"), Some("test")).unwrap().config;
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["config"]["ExposedPorts"]["8080/tcp"], serde_json::json!({}), "{json}");
        assert_eq!(json["config"]["Volumes"]["/data"], serde_json::json!({}), "{json}");
        assert_eq!(json["config"]["StopSignal"], "SIGINT", "{json}");
        assert_eq!(json["author"], "base-author", "{json}");
        assert_eq!(json["config"]["Cmd"][2], "from-fourth", "the recipe's own fields win");
    } else {
        eprintln!("skipped the OCI base's config fields: umoci is not installed");
    }

    let docker = Path::new(test_support::tools::DOCKER);
    if !test_support::tools::dockerd_answers() {
        eprintln!("skipped the docker base: no dockerd answering (.ci/services starts one)");
        return;
    }
    let out = Command::new(docker).arg("load").arg("-i").arg(&archive).output().unwrap();
    assert!(out.status.success(), "docker load: {}", String::from_utf8_lossy(&out.stderr));
    let third = write("third.toml", "[base]\ndocker = \"first:test\"\n");
    let from_docker = build(&third, &cache, &tmp.path().join("third"), &["--load"]);
    ok(&from_docker);
    assert_eq!(diff_ids(&tmp.path().join("third"))[..first_ids.len()], first_ids[..]);
    let out = Command::new(docker).args(["run", "--rm", "--network", "none", "third:test"]).output().unwrap();
    assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "from-third");
    let _ = Command::new(docker).args(["rmi", "-f", "first:test", "third:test"]).output();
}

/// A recipe listing two platforms, each with its own `[[python.wheel]]` (generated stand-ins of
/// `linux_x86_64` and `linux_aarch64` builds) beside a wheel from the index: one image index whose
/// two manifests carry their platform, each image holding its own platform's wheel and the
/// host rules; skopeo reads the index, copies all of it, and picks each platform; a rebuild gives
/// the same digest.
#[test]
#[allow(clippy::too_many_lines)] // one scenario, checked step by step
fn multi_platform_index_with_recipe_wheels() {
    if !have("uv") || !have("skopeo") {
        eprintln!("skipped: needs uv and skopeo (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let maker = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes/stand-in/make-wheel.py");
    let wheels = tmp.path().join("wheels");
    for (machine, marker) in [("x86_64", "amd"), ("aarch64", "arm")] {
        let out = Command::new("python3")
            .arg(&maker)
            .args(["--name", "demo", "--version", &format!("1.0+{marker}")])
            .args(["--tag", &format!("cp311-cp311-linux_{machine}"), "--requires", "six==1.16.0"])
            .arg("--out")
            .arg(&wheels)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let recipe = tmp.path().join("multi.toml");
    std::fs::write(
        &recipe,
        r#"[image]
name = "multi"
tag = "test"
platforms = ["linux/amd64", "linux/arm64"]

[base]
scratch = true

[python]
version = "3.11"
packages = ["tomli==2.0.1"]

[[python.wheel]]
path = "wheels/demo-1.0+amd-cp311-cp311-linux_x86_64.whl"

[[python.wheel]]
path = "wheels/demo-1.0+arm-cp311-cp311-linux_aarch64.whl"

[host]
platform = "jetson"
"#,
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let layout = tmp.path().join("out");
    let first = build(&recipe, &cache, &layout, &[]);
    ok(&first);
    let platforms = first.report["platforms"].as_array().expect("a report per platform");
    assert_eq!(platforms.len(), 2, "{}", first.report);

    // The lock pins each platform's own file.
    let lock = std::fs::read_to_string(tmp.path().join("multi.toml.lock")).unwrap();
    for file in ["demo-1.0+amd-cp311-cp311-linux_x86_64.whl", "demo-1.0+arm-cp311-cp311-linux_aarch64.whl"] {
        assert!(lock.contains(file), "{lock}");
    }

    let raw = Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("oci:{}:test", layout.display()))
        .output()
        .unwrap();
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    let index: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json", "{index}");
    let archs: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    assert_eq!(archs, ["amd64", "arm64"]);

    for (arch, marker) in [("amd64", "amd"), ("arm64", "arm")] {
        let image = stackbuild_image::read_layout_for(
            &layout,
            Some("test"),
            Some(&stackbuild_image::Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: None,
            }),
        )
        .unwrap();
        assert_eq!(image.config.architecture, arch);
        let env = image.config.config.env.join("\n");
        assert!(env.contains("STACKBUILD_REQUIRE_PLATFORM=platform=jetson"), "{env}");
        let out = Command::new("skopeo")
            .args(["inspect", "--override-arch", arch, "--config"])
            .arg(format!("oci:{}:test", layout.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stack = image.layers.last().unwrap();
        let listing = Command::new("tar").arg("-xzOf").arg(&stack.path).output().unwrap();
        let text = String::from_utf8_lossy(&listing.stdout);
        assert!(text.contains(&format!("\"1.0+{marker}\"")), "{arch}: {text}");
        assert!(text.contains("recipe wheel"), "{text}");
    }
    let copy = tmp.path().join("copy");
    let out = Command::new("skopeo")
        .args(["copy", "--all"])
        .arg(format!("oci:{}:test", layout.display()))
        .arg(format!("oci:{}:test", copy.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "skopeo copy --all: {}", String::from_utf8_lossy(&out.stderr));

    let again = build(&recipe, &cache, &layout, &["--locked"]);
    assert_eq!(ok(&again).digest, first.digest);
    // Pushed, the registry serves the index under the tag and each image by digest.
    let port = std::env::var("STACKBUILD_TEST_REGISTRY_PORT").unwrap_or_else(|_| "5115".into());
    if std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_ok() {
        let dest = format!("127.0.0.1:{port}/stackbuild-e2e/multi:test");
        let pushed = build(&recipe, &cache, &layout, &["--locked", "--push", &dest]);
        assert_eq!(ok(&pushed).digest, first.digest);
        let raw = Command::new("skopeo")
            .args(["inspect", "--raw", "--tls-verify=false"])
            .arg(format!("docker://{dest}"))
            .output()
            .unwrap();
        assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
        let served: serde_json::Value = serde_json::from_slice(&raw.stdout).unwrap();
        assert_eq!(served, index, "the registry serves the layout's index");
        let arm = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false", "--override-arch", "arm64"])
            .arg(format!("docker://{dest}"))
            .output()
            .unwrap();
        assert!(arm.status.success(), "{}", String::from_utf8_lossy(&arm.stderr));
        let arm: serde_json::Value = serde_json::from_slice(&arm.stdout).unwrap();
        assert_eq!(arm["Architecture"], "arm64");
    } else {
        eprintln!("skipped --push: no registry on 127.0.0.1:{port} (.ci/services starts one)");
    }
    // A changed recipe wheel is refused against the lock, naming the file.
    std::fs::write(wheels.join("demo-1.0+arm-cp311-cp311-linux_aarch64.whl"), b"not the wheel").unwrap();
    let changed = build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("out2"), &["--locked"]);
    assert!(!changed.out.status.success());
    let stderr = String::from_utf8_lossy(&changed.out.stderr);
    assert!(
        stderr.contains("demo-1.0+arm-cp311-cp311-linux_aarch64.whl") && stderr.contains("sha256"),
        "{stderr}"
    );
}

/// The glibc of an OCI layout base is read from its `libc.so.6` (here a stand-in carrying
/// glibc's banner) and recorded in the lock; a base older than the lock's glibc is refused at
/// build time, naming both versions and the fix.
#[test]
fn an_oci_base_glibc_is_read_and_checked() {
    if !have("uv") {
        eprintln!("skipped: needs uv (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("lib-tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(
        tree.join("libc.so.6"),
        b"\x7fELF\0\0GNU C Library (Ubuntu GLIBC 2.35-0ubuntu3.8) stable release version 2.35.\n",
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let base = tmp.path().join("base.toml");
    std::fs::write(
        &base,
        format!(
            "[image]\nname = \"base\"\ntag = \"test\"\n[base]\nscratch = true\n[[source]]\nname = \"libc\"\n\
             path = \"{}\"\ndest = \"/usr/lib/x86_64-linux-gnu\"\n",
            tree.display()
        ),
    )
    .unwrap();
    let layout = tmp.path().join("base-layout");
    ok(&build(&base, &cache, &layout, &[]));

    let app = tmp.path().join("app.toml");
    std::fs::write(
        &app,
        format!(
            "[image]\nname = \"app\"\ntag = \"test\"\n[base]\noci = \"{}:test\"\n[python]\nversion = \"3.11\"\n\
             packages = [\"six==1.16.0\"]\n",
            layout.display()
        ),
    )
    .unwrap();
    ok(&build(&app, &cache, &tmp.path().join("app"), &[]));
    let lock_path = tmp.path().join("app.toml.lock");
    let lock = std::fs::read_to_string(&lock_path).unwrap();
    assert!(lock.contains("\nglibc = \"2.35\"\n"), "{lock}");

    // A lock that chose wheels for a newer glibc than the base has is refused.
    std::fs::write(&lock_path, lock.replace("glibc = \"2.35\"", "glibc = \"2.39\"")).unwrap();
    let refused = build(&app, &cache, &tmp.path().join("app2"), &["--locked"]);
    assert!(!refused.out.status.success());
    let err = String::from_utf8_lossy(&refused.out.stderr);
    assert!(
        err.contains("the lock chose wheels for glibc 2.39 (manylinux_2_39), but the base has glibc 2.35"),
        "{err}"
    );
    assert!(err.contains("run `stackbuild lock` again"), "{err}");
}

/// A URL dependency (`name @ http://host/file.whl#sha256=...`): locked with its digest, the
/// lock holding no URL; installed into the image; fetched again from the recipe's URL by a
/// build on an empty cache (no index serves it); and refused, naming the package and the URL,
/// when the file there changed.
#[test]
fn a_url_dependency_is_locked_fetched_and_verified() {
    if !have("uv") {
        eprintln!("skipped: needs uv (run .ci/install)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    let wheel = test_support::wheel::pure_wheel(
        &served.join("tinyurl-1.0-py3-none-any.whl"),
        "tinyurl",
        "1.0",
        vec![("tinyurl/__init__.py".into(), b"VALUE = 'from a URL'\n".to_vec())],
    );
    let sha = test_support::digest::sha256_file(&wheel).unwrap();
    let files = test_support::server::FileServer::start(&served);
    let url = files.url("tinyurl-1.0-py3-none-any.whl");
    let recipe = tmp.path().join("url.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"url\"\ntag = \"test\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
             packages = [\"tinyurl @ {url}#sha256={sha}\"]\nbytecode = false\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("img");
    ok(&build(&recipe, &tmp.path().join("cache"), &out, &[]));
    let lock = std::fs::read_to_string(tmp.path().join("url.toml.lock")).unwrap();
    assert!(lock.contains("name = \"tinyurl\"") && lock.contains(&sha), "{lock}");
    assert!(!lock.contains("://"), "a lock holds no URL: {lock}");
    let image = stackbuild_image::read_layout(&out, Some("test")).unwrap();
    let mut found = false;
    for layer in &image.layers {
        let file = std::fs::File::open(&layer.path).unwrap();
        let reader = stackbuild_common::Compression::from_media_type(&layer.media_type)
            .unwrap_or(stackbuild_common::Compression::None)
            .decoder(file)
            .unwrap();
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            found |= entry.path().unwrap().ends_with("tinyurl/__init__.py");
        }
    }
    assert!(found, "the URL dependency's module is in the image");

    // An empty cache: the file comes from the recipe's URL again, checked by the lock's digest.
    ok(&build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("img2"), &["--locked"]));

    // The file at the URL changed: refused, naming the package and where it came from.
    test_support::wheel::pure_wheel(
        &served.join("tinyurl-1.0-py3-none-any.whl"),
        "tinyurl",
        "1.0",
        vec![("tinyurl/__init__.py".into(), b"VALUE = 'swapped'\n".to_vec())],
    );
    let refused = build(&recipe, &tmp.path().join("cache3"), &tmp.path().join("img3"), &["--locked"]);
    assert!(!refused.out.status.success());
    let err = String::from_utf8_lossy(&refused.out.stderr);
    assert!(err.contains("tinyurl 1.0") && err.contains(&sha), "{err}");
}

/// An Ubuntu base on this Debian host with no `[base] mirror`: mmdebstrap's Ubuntu archive,
/// checked with Ubuntu's keys from Debian's `ubuntu-keyring` package (fetched into the cache).
/// And a wheel that links a library the base lacks (opencv-python's `libGL.so.1`): the audit
/// stops the build and names the Debian packages that ship what is missing; with them it
/// builds, and the Qt plugins opencv-python carries are only warnings.
#[test]
fn an_ubuntu_base_and_the_audits_package_fix() {
    if !ready(&[]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let write = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ubuntu = write(
        "jammy.toml",
        "[image]\nname = \"jammy\"\ntag = \"test\"\n\n[base]\nubuntu = \"jammy\"\npackages = [\"python3\"]\n\n\
         [python]\nversion = \"3.10\"\npackages = [\"six==1.16.0\"]\nbytecode = false\n",
    );
    let jammy = build(&ubuntu, &cache, &tmp.path().join("jammy"), &[]);
    let err = String::from_utf8_lossy(&jammy.out.stderr).into_owned();
    let offline = ["Temporary failure resolving", "Could not resolve", "Failed to fetch"];
    if !jammy.out.status.success() && offline.iter().any(|m| err.contains(m)) {
        eprintln!("skipped the Ubuntu base: Ubuntu's archive is not reachable from here:\n{err}");
    } else {
        ok(&jammy);
    }

    let cv = |packages: &str| {
        format!(
            "[image]\nname = \"cv\"\ntag = \"test\"\n\n[base]\ndebian = \"bookworm\"\npackages = [{packages}]\n\n\
             [python]\nversion = \"3.11\"\npackages = [\"opencv-python==4.8.0.74\", \"numpy==1.26.4\"]\n\
             bytecode = false\n"
        )
    };
    let bare = write("cv.toml", &cv("\"python3\""));
    let failed = build(&bare, &cache, &tmp.path().join("cv"), &[]);
    let err = String::from_utf8_lossy(&failed.out.stderr).into_owned();
    assert!(!failed.out.status.success(), "{err}");
    assert!(
        err.contains("fix: add \"libgl1\", \"libglib2.0-0\" to [base] packages: Debian bookworm's packages that ship libGL.so.1 (libgl1)"),
        "{err}"
    );
    assert!(err.contains("a Qt plugin"), "{err}");
    let fixed = write("cv-fixed.toml", &cv("\"python3\", \"libgl1\", \"libglib2.0-0\""));
    ok(&build(&fixed, &cache, &tmp.path().join("cv-fixed"), &[]));
}
