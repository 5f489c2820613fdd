//! The SBOM of a real build (Debian base by mmdebstrap, wheels from the package index, a git
//! source, a package patch): SPDX 2.3 and `CycloneDX` 1.6 JSON in the image under
//! `/etc/stackbuild/`, the same bytes with `--sbom DIR`, every Debian package of the base's dpkg
//! status listed, and on `--push` both attached as OCI referrers (the referrers tag where the
//! registry, like Debian's docker-registry 2.8, has no referrers API).
//!
//! The documents are checked by independent validators from the Python package index, not by
//! our code: `spdx-tools`' `pyspdxtools -i` and `cyclonedx-python-lib`'s strict JSON validator.
//! They live in a venv (`$STACKBUILD_SBOM_VENV`, default `target/sbom-validators`, made by
//! `.ci/install`; made here when missing). Without them the validation is reported as skipped.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{debian_builds_ready, six_patch, stand_in_repo, BOOKWORM_PYTHON};
use test_support::process::text;

const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");

/// The venv holding the validators, installed when missing; `None` (with the reason printed)
/// when they cannot be had.
fn validators() -> Option<PathBuf> {
    let venv = std::env::var_os("STACKBUILD_SBOM_VENV").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sbom-validators"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    let works = || {
        Command::new(&python)
            .args(["-c", "import spdx_tools, cyclonedx.validation.json, jsonschema"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works() {
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).output();
        let installed = made.is_ok_and(|o| o.status.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "spdx-tools", "cyclonedx-python-lib[json-validation]"])
                .output()
                .is_ok_and(|o| o.status.success());
        if !installed || !works() {
            eprintln!(
                "skipped: the SBOM validators (spdx-tools, cyclonedx-python-lib) cannot be installed in {}",
                venv.display()
            );
            return None;
        }
    }
    Some(venv)
}

/// `pyspdxtools -i` and cyclonedx-python-lib's `JsonStrictValidator` for 1.6.
fn validate(venv: &Path, spdx: &Path, cyclonedx: &Path) {
    let out = Command::new(venv.join("bin/pyspdxtools")).arg("-i").arg(spdx).output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "pyspdxtools -i {}: {}{}",
        spdx.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
    let script = "import sys\n\
        from cyclonedx.validation.json import JsonStrictValidator\n\
        from cyclonedx.schema import SchemaVersion\n\
        errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(open(sys.argv[1]).read())\n\
        print(errors or '')\n\
        sys.exit(1 if errors else 0)\n";
    let out = Command::new(venv.join("bin/python")).args(["-c", script]).arg(cyclonedx).output().unwrap();
    assert!(
        out.status.success(),
        "CycloneDX 1.6 validation of {}: {}{}",
        cyclonedx.display(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn recipe(dir: &Path) -> (PathBuf, String) {
    let (url, commit) = stand_in_repo(&dir.join("repo"));
    let path = dir.join("small.toml");
    std::fs::write(
        &path,
        format!(
            r#"[image]
name = "small"
tag = "test"

{base}
[python]
version = "3.11"
packages = ["six==1.16.0", "tomli==2.0.1"]

[[source]]
name = "model"
git = "{url}"
commit = "{commit}"
dest = "/workspace/model"

{patch}"#,
            base = BOOKWORM_PYTHON,
            patch = six_patch(r#"__version__ = "1.16.0""#),
        ),
    )
    .unwrap();
    (path, commit)
}

/// The files of a layer blob (gzip or plain tar) whose names `want` accepts.
fn layer_files(blob: &Path, want: &dyn Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let mut bytes = Vec::new();
    std::fs::File::open(blob).unwrap().read_to_end(&mut bytes).unwrap();
    let reader: Box<dyn std::io::Read> = if bytes.starts_with(&[0x1f, 0x8b]) {
        // Multi-member: stackbuild compresses gzip layers in parallel members.
        Box::new(flate2::read::MultiGzDecoder::new(&bytes[..]))
    } else {
        Box::new(&bytes[..])
    };
    let mut archive = tar::Archive::new(reader);
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().trim_start_matches("./").to_owned();
        if want(&name) {
            let mut content = Vec::new();
            entry.read_to_end(&mut content).unwrap();
            out.push((name, content));
        }
    }
    out
}

/// The layer blobs of the layout's image, base first.
fn layer_blobs(layout: &Path) -> Vec<PathBuf> {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let blob = |d: &str| layout.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(blob(index["manifests"][0]["digest"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    manifest["layers"].as_array().unwrap().iter().map(|l| blob(l["digest"].as_str().unwrap())).collect()
}

fn get(url: &str, accept: &str) -> Vec<u8> {
    let resp = ureq::get(url).set("Accept", accept).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let mut bytes = Vec::new();
    resp.into_reader().read_to_end(&mut bytes).unwrap();
    bytes
}

#[test]
#[allow(clippy::too_many_lines)] // one build, then each of its outputs checked in turn
fn sbom_in_the_image_beside_it_and_attached_as_referrers() {
    if !debian_builds_ready(&["git"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (recipe, commit) = recipe(tmp.path());
    let layout = tmp.path().join("layout");
    let sboms = tmp.path().join("sbom");
    let report = tmp.path().join("report.json");
    let port = std::env::var("STACKBUILD_TEST_REGISTRY_PORT").unwrap_or_else(|_| "5115".into());
    let registry = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_ok();
    let dest = format!("127.0.0.1:{port}/stackbuild-e2e/sbom:test");
    let mut cmd = Command::new(STACKBUILD);
    // `STACKBUILD_TEST_CACHE` reuses a cache between runs (the Debian base takes minutes).
    let cache =
        std::env::var_os("STACKBUILD_TEST_CACHE").map_or_else(|| tmp.path().join("cache"), PathBuf::from);
    cmd.arg(&recipe).arg("--cache-dir").arg(&cache).arg("--out").arg(&layout);
    cmd.arg("--sbom").arg(&sboms).arg("--report").arg(&report).env("SOURCE_DATE_EPOCH", "0");
    if registry {
        cmd.args(["--push", &dest]);
    } else {
        eprintln!("skipped the referrers: no registry on 127.0.0.1:{port} (.ci/services starts one)");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "build: {}", text(&out.stderr));
    let digest = text(&out.stdout).trim().to_owned();
    let (spdx_file, cdx_file) = (sboms.join("small.spdx.json"), sboms.join("small.cdx.json"));
    let spdx_bytes = std::fs::read(&spdx_file).unwrap();
    let cdx_bytes = std::fs::read(&cdx_file).unwrap();

    // In the image, the same bytes, next to stack.json.
    let blobs = layer_blobs(&layout);
    let inside = layer_files(blobs.last().unwrap(), &|n| n.starts_with("etc/stackbuild/"));
    let find = |name: &str| inside.iter().find(|(n, _)| n == name).map(|(_, c)| c.clone());
    assert!(find("etc/stackbuild/stack.json").is_some());
    assert_eq!(find("etc/stackbuild/sbom.spdx.json").as_deref(), Some(&spdx_bytes[..]));
    assert_eq!(find("etc/stackbuild/sbom.cdx.json").as_deref(), Some(&cdx_bytes[..]));

    // Every installed package of the base's dpkg status, as a purl.
    let status = layer_files(&blobs[0], &|n| n == "var/lib/dpkg/status");
    let status = text(&status[0].1);
    let installed: Vec<(String, String)> = status
        .split("\n\n")
        .filter(|s| s.lines().any(|l| l.starts_with("Status:") && l.ends_with(" installed")))
        .filter_map(|s| {
            let field = |f: &str| s.lines().find_map(|l| l.strip_prefix(f)).map(|v| v.trim().to_owned());
            Some((field("Package:")?, field("Version:")?))
        })
        .collect();
    assert!(installed.len() > 50, "{} packages in the base", installed.len());
    let spdx: serde_json::Value = serde_json::from_slice(&spdx_bytes).unwrap();
    let purls: Vec<String> = spdx["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["externalRefs"][0]["referenceLocator"].as_str().map(str::to_owned))
        .collect();
    for (name, version) in &installed {
        let want = format!("pkg:deb/debian/{name}@{}?arch=", version.replace(':', "%3A"));
        assert!(purls.iter().any(|p| p.starts_with(&want)), "{want} missing");
    }
    assert_eq!(purls.iter().filter(|p| p.starts_with("pkg:deb/")).count(), installed.len());
    for wheel in ["pkg:pypi/six@1.16.0", "pkg:pypi/tomli@2.0.1"] {
        let p = spdx["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["externalRefs"][0]["referenceLocator"] == wheel);
        let sha = p.and_then(|p| p["checksums"][0]["checksumValue"].as_str()).unwrap_or_default();
        assert_eq!(sha.len(), 64, "{wheel} without its sha256");
    }
    let text_spdx = text(&spdx_bytes);
    assert!(text_spdx.contains(&commit), "the source commit is missing");
    assert!(text_spdx.contains("PATCH_APPLIED"), "the patch is missing");
    assert_eq!(spdx["creationInfo"]["created"], "1970-01-01T00:00:00Z", "not from SOURCE_DATE_EPOCH");

    // Independent validators.
    if let Some(venv) = validators() {
        validate(&venv, &spdx_file, &cdx_file);
    }

    if !registry {
        return;
    }
    // Attached to the pushed image: through the referrers API, or (distribution 2.8) the tag.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let referrers = report["referrers"].as_array().unwrap();
    assert_eq!(referrers.len(), 2, "{report}");
    let base = format!("http://127.0.0.1:{port}/v2/stackbuild-e2e/sbom");
    let listed: serde_json::Value = if referrers[0]["referrers_api"] == true {
        serde_json::from_slice(&get(
            &format!("{base}/referrers/{digest}"),
            "application/vnd.oci.image.index.v1+json",
        ))
        .unwrap()
    } else {
        let tag = digest.replace(':', "-");
        assert_eq!(referrers[0]["fallback_tag"], tag.as_str());
        serde_json::from_slice(&get(
            &format!("{base}/manifests/{tag}"),
            "application/vnd.oci.image.index.v1+json",
        ))
        .unwrap()
    };
    for (artifact_type, expected) in
        [("application/spdx+json", &spdx_bytes), ("application/vnd.cyclonedx+json", &cdx_bytes)]
    {
        let entry =
            listed["manifests"].as_array().unwrap().iter().find(|m| m["artifactType"] == artifact_type);
        let entry = entry.unwrap_or_else(|| panic!("no {artifact_type} referrer in {listed}"));
        let manifest: serde_json::Value = serde_json::from_slice(&get(
            &format!("{base}/manifests/{}", entry["digest"].as_str().unwrap()),
            "application/vnd.oci.image.manifest.v1+json",
        ))
        .unwrap();
        assert_eq!(manifest["subject"]["digest"], digest.as_str(), "{manifest}");
        assert_eq!(manifest["artifactType"], artifact_type);
        let blob = get(&format!("{base}/blobs/{}", manifest["layers"][0]["digest"].as_str().unwrap()), "*/*");
        assert_eq!(&blob, expected, "the attached {artifact_type} is not the image's");
    }
}
