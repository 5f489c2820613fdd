//! The image's software bill of materials: SPDX 2.3 JSON and `CycloneDX` 1.6 JSON, written into the
//! image under `/etc/stackbuild/` next to `stack.json` (and, with `--sbom DIR`, beside it), and
//! attached on `--push` as OCI 1.1 referrers (see [`crate::registry::push_referrers`]).
//!
//! Both documents are pure functions of what the build already knows: the stack description
//! (every Debian package of the base from its dpkg status, every locked wheel with its sha256,
//! every source with its repository URL and commit or tree hash, every patch), the layers that
//! come before the configuration layer (by digest), the platform and `SOURCE_DATE_EPOCH`. No
//! clock, no random ids: the SPDX namespace and the `CycloneDX` serial number are derived from a
//! hash of the inputs, so the same inputs give the same bytes and the same image digest.
//!
//! - SPDX 2.3 (<https://spdx.github.io/spdx-spec/v2.3/>): one package for the image (described by
//!   the document), one per layer, one per component; `CONTAINS` from the image to each layer and
//!   from a layer to what it holds; `PATCH_APPLIED` from a patch to what it patched.
//! - `CycloneDX` 1.6 (<https://cyclonedx.org/docs/1.6/json/>): the image is `metadata.component`
//!   (the BOM's subject), the layers are the BOM's components with their packages nested inside
//!   them (an assembly, which is `CycloneDX`'s "contains"); patches are the `pedigree.patches` of what they patched.
//! - Package URLs (<https://github.com/package-url/purl-spec>): `pkg:deb/debian/NAME@VERSION?arch=..`,
//!   `pkg:pypi/NAME@VERSION`.
//!
//! The layer holding these files cannot name its own digest, nor can the image: the image is
//! named by `name:tag`, and the registry copy is bound to the manifest by the referrer's `subject`.

use std::fmt::Write as _;

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use stackcontract::image::{Component, StackManifest};

/// Where the SPDX document goes in the image (next to `stack.json`).
pub const SPDX_PATH: &str = "etc/stackbuild/sbom.spdx.json";
/// Where the `CycloneDX` document goes in the image.
pub const CYCLONEDX_PATH: &str = "etc/stackbuild/sbom.cdx.json";
/// The SPDX JSON media type (IANA: `application/spdx+json`), the referrer's `artifactType`.
pub const SPDX_MEDIA_TYPE: &str = "application/spdx+json";
/// The `CycloneDX` JSON media type (IANA: `application/vnd.cyclonedx+json`).
pub const CYCLONEDX_MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";

/// A layer as the SBOM lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbomLayer {
    /// What it holds: `base`, `cuda`, `python`, `sources`, `config`, ...
    pub name: String,
    /// Its blob digest; `None` for the layer holding the SBOM itself.
    pub digest: Option<String>,
}

/// Everything the documents are made from.
#[derive(Debug, Clone)]
pub struct SbomInput<'a> {
    /// The stack description (image `name:tag`, platform, components).
    pub stack: &'a StackManifest,
    /// The layers, base first.
    pub layers: &'a [SbomLayer],
    /// For each of `stack.components`, the index in `layers` of the layer holding it.
    pub placement: &'a [usize],
    /// The Debian architecture of the image's packages (`amd64`, `arm64`).
    pub deb_arch: &'a str,
    /// `SOURCE_DATE_EPOCH`: the documents' creation time.
    pub epoch: u64,
}

/// The two documents, as the bytes written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sbom {
    /// SPDX 2.3 JSON.
    pub spdx: Vec<u8>,
    /// `CycloneDX` 1.6 JSON.
    pub cyclonedx: Vec<u8>,
}

/// One component, as both formats see it.
struct Item<'a> {
    component: &'a Component,
    layer: usize,
    purl: Option<String>,
    /// `(url, commit)` of a git source.
    git: Option<(String, String)>,
}

/// This file's own text: the documents are a function of their inputs and of the code that
/// writes them, so [`Sbom::key`] covers both without a revision number kept by hand.
const GENERATOR: &str = include_str!("sbom.rs");

impl Sbom {
    /// What both documents for `input` depend on, hex, without writing them: every input and
    /// this generator (its source and version). A cached layer holding the documents is found by
    /// it, so a build that reuses the layer writes them only when it hands them out.
    pub fn key(input: &SbomInput<'_>) -> String {
        let mut h = Sha256::new();
        h.update(input_hash(input));
        h.update(format!("\0{}\0", env!("CARGO_PKG_VERSION")));
        h.update(GENERATOR);
        hex::encode(h.finalize())
    }

    /// Both documents for `input`.
    pub fn new(input: &SbomInput<'_>) -> Self {
        let seed = input_hash(input);
        let items = items(input);
        let mut spdx = serde_json::to_vec_pretty(&spdx(input, &items, &seed)).unwrap_or_default();
        spdx.push(b'\n');
        let mut cyclonedx = serde_json::to_vec_pretty(&cyclonedx(input, &items, &seed)).unwrap_or_default();
        cyclonedx.push(b'\n');
        Self { spdx, cyclonedx }
    }
}

/// A hash of every input, for the document namespace and serial number.
fn input_hash(input: &SbomInput<'_>) -> String {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(input.stack).unwrap_or_default());
    for (l, p) in input.layers.iter().zip(0..) {
        h.update(format!("\0layer {p} {} {}", l.name, l.digest.as_deref().unwrap_or("-")).as_bytes());
    }
    for p in input.placement {
        h.update(format!("\0at {p}").as_bytes());
    }
    h.update(format!("\0{}\0{}", input.deb_arch, input.epoch).as_bytes());
    hex::encode(h.finalize())
}

/// A name-based UUID (version 5 layout, RFC 9562) from a hex hash.
fn uuid(hex: &str) -> String {
    let mut b: Vec<u8> =
        (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0)).collect();
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

fn items<'a>(input: &SbomInput<'a>) -> Vec<Item<'a>> {
    input
        .stack
        .components
        .iter()
        .enumerate()
        .map(|(i, c)| Item {
            component: c,
            layer: input.placement.get(i).copied().unwrap_or(0),
            purl: purl(c, input.deb_arch),
            git: git_origin(c),
        })
        .collect()
}

/// The package URL of a Debian package or a wheel.
fn purl(c: &Component, deb_arch: &str) -> Option<String> {
    match c.kind.as_str() {
        "deb" => {
            // `source` is `debian:bookworm` (or `ubuntu:jammy`).
            let (distro, suite) = c.source.split_once(':').unwrap_or(("debian", ""));
            let mut p = format!(
                "pkg:deb/{}/{}@{}?arch={deb_arch}",
                purl_part(distro),
                purl_part(&c.name),
                purl_part(&c.version)
            );
            if !suite.is_empty() {
                p.push_str("&distro=");
                p.push_str(&purl_part(suite));
            }
            Some(p)
        }
        // purl-spec: PyPI names are lowercased with `_` as `-`.
        "wheel" => Some(format!(
            "pkg:pypi/{}@{}",
            purl_part(&c.name.to_ascii_lowercase().replace('_', "-")),
            purl_part(&c.version)
        )),
        _ => None,
    }
}

/// Percent-encodes what a purl segment may not hold (`:` of a Debian epoch, `/`, `@`, `?`, ...).
fn purl_part(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~+".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `(repository URL without credentials, commit)` of a git source (`version` is
/// `git:<url>@<commit>`).
fn git_origin(c: &Component) -> Option<(String, String)> {
    if c.kind != "source" {
        return None;
    }
    let (url, commit) = c.version.strip_prefix("git:")?.rsplit_once('@')?;
    Some((strip_credentials(url), commit.to_owned()))
}

/// A URL without `user:password@`: a recipe's credentials never reach the image.
fn strip_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if path.is_empty() && !rest.contains('/') {
        format!("{scheme}://{host}")
    } else {
        format!("{scheme}://{host}/{path}")
    }
}

/// Whether `url` is an absolute http(s) URL (what SPDX `downloadLocation` and `CycloneDX`
/// external references accept without question).
fn is_web_url(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://")) && !url.contains(char::is_whitespace)
}

/// An SPDX identifier: `SPDXRef-` and letters, digits, `.` and `-`.
fn spdx_id(kind: &str, index: usize, name: &str) -> String {
    let clean: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
    format!("SPDXRef-{kind}-{index}-{clean}")
}

fn layer_label(index: usize, layer: &SbomLayer) -> String {
    format!("layer {index}: {}", layer.name)
}

/// The target a patch names: `package NAME` or `source NAME`, as (kind, name).
fn patch_target(c: &Component) -> Option<(&'static str, &str)> {
    if let Some(n) = c.source.strip_prefix("package ") {
        Some(("wheel", n))
    } else {
        c.source.strip_prefix("source ").map(|n| ("source", n))
    }
}

fn find_target(items: &[Item<'_>], patch: &Component) -> Option<usize> {
    let (kind, name) = patch_target(patch)?;
    // PEP 503: Python package names compare lowercased, with runs of `-_.` as one `-`.
    let normal = |n: &str| {
        if kind == "wheel" {
            n.to_ascii_lowercase().replace(['_', '.'], "-")
        } else {
            n.to_owned()
        }
    };
    items.iter().position(|i| i.component.kind == kind && normal(&i.component.name) == normal(name))
}

fn spdx(input: &SbomInput<'_>, items: &[Item<'_>], seed: &str) -> Value {
    let image_id = "SPDXRef-image";
    let (image_name, image_tag) = input.stack.image.rsplit_once(':').unwrap_or((&input.stack.image, ""));
    let mut packages = vec![json!({
        "SPDXID": image_id,
        "name": image_name,
        "versionInfo": image_tag,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "primaryPackagePurpose": "CONTAINER",
        "comment": format!("the OCI image {} for {}, built by stackbuild", input.stack.image, input.stack.platform),
    })];
    let mut relationships = vec![json!({
        "spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": image_id,
    })];
    let layer_ids: Vec<String> =
        input.layers.iter().enumerate().map(|(i, l)| spdx_id("layer", i, &l.name)).collect();
    for ((i, layer), id) in input.layers.iter().enumerate().zip(&layer_ids) {
        let mut p = json!({
            "SPDXID": id,
            "name": layer_label(i, layer),
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "primaryPackagePurpose": "ARCHIVE",
        });
        match &layer.digest {
            Some(d) => {
                p["checksums"] =
                    json!([{ "algorithm": "SHA256", "checksumValue": d.trim_start_matches("sha256:") }]);
                p["comment"] = json!(format!("layer blob {d}"));
            }
            None => p["comment"] = json!("the layer holding stack.json and this document"),
        }
        packages.push(p);
        relationships.push(
            json!({ "spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": id }),
        );
    }
    let ids: Vec<String> =
        items.iter().enumerate().map(|(i, it)| spdx_id(&it.component.kind, i, &it.component.name)).collect();
    for (it, id) in items.iter().zip(&ids) {
        packages.push(spdx_package(it, id));
        if let Some(layer) = layer_ids.get(it.layer) {
            relationships.push(
                json!({ "spdxElementId": layer, "relationshipType": "CONTAINS", "relatedSpdxElement": id }),
            );
        }
        if it.component.kind == "patch" {
            if let Some(t) = find_target(items, it.component) {
                relationships.push(json!({ "spdxElementId": id, "relationshipType": "PATCH_APPLIED", "relatedSpdxElement": ids[t] }));
            }
        }
    }
    let name = format!("stackbuild-{}", input.stack.image.replace([':', '/'], "-"));
    json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        // SPDX 2.3 section 6.5: a unique URI per document; the spec's own examples use this form.
        "documentNamespace": format!("https://spdx.org/spdxdocs/{name}-{}", uuid(seed)),
        "creationInfo": {
            "created": stackcontract::time::rfc3339(input.epoch),
            "creators": [format!("Tool: stackbuild-{}", env!("CARGO_PKG_VERSION"))],
        },
        "documentDescribes": [image_id],
        "packages": packages,
        "relationships": relationships,
    })
}

fn spdx_package(it: &Item<'_>, id: &str) -> Value {
    let c = it.component;
    let mut p = json!({
        "SPDXID": id,
        "name": c.name,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
    });
    if !c.version.is_empty() {
        p["versionInfo"] = json!(c.version);
    }
    if !c.sha256.is_empty() && c.sha256.len() == 64 && c.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        p["checksums"] = json!([{ "algorithm": "SHA256", "checksumValue": c.sha256.to_ascii_lowercase() }]);
    }
    if let Some(purl) = &it.purl {
        p["externalRefs"] = json!([{ "referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl }]);
    }
    let purpose = match c.kind.as_str() {
        "deb" | "wheel" => "LIBRARY",
        "base" => "OPERATING-SYSTEM",
        "source" => "SOURCE",
        _ => "OTHER",
    };
    p["primaryPackagePurpose"] = json!(purpose);
    match (&it.git, c.kind.as_str()) {
        (Some((url, commit)), _) => {
            p["versionInfo"] = json!(commit);
            // SPDX 2.3 section 7.7: `git+<url>@<commit>` names a commit of a repository.
            if is_web_url(url) {
                p["downloadLocation"] = json!(format!("git+{url}@{commit}"));
            }
            p["sourceInfo"] = json!(format!("git repository {url} at commit {commit}"));
        }
        (None, "source") => p["sourceInfo"] = json!(format!("{} ({})", c.source, c.version)),
        (None, "patch") => {
            p["comment"] = json!(format!("patch applied to {}; sha256 of the change", c.source));
        }
        (None, _) if !c.source.is_empty() => p["sourceInfo"] = json!(format!("from {}", c.source)),
        _ => {}
    }
    p
}

fn cyclonedx(input: &SbomInput<'_>, items: &[Item<'_>], seed: &str) -> Value {
    let (image_name, image_tag) = input.stack.image.rsplit_once(':').unwrap_or((&input.stack.image, ""));
    let refs: Vec<String> = items
        .iter()
        .enumerate()
        .map(|(i, it)| format!("{}-{i}-{}", it.component.kind, it.component.name))
        .collect();
    let mut layers: Vec<Value> = input
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v = json!({ "type": "file", "bom-ref": format!("layer-{i}"), "name": layer_label(i, l), "components": [] });
            if let Some(d) = &l.digest {
                v["hashes"] = json!([{ "alg": "SHA-256", "content": d.trim_start_matches("sha256:") }]);
            } else {
                v["description"] = json!("the layer holding stack.json and this document");
            }
            v
        })
        .collect();
    for (i, it) in items.iter().enumerate() {
        if it.component.kind == "patch" {
            continue;
        }
        let mut v = cyclonedx_component(it, &refs[i]);
        let patches: Vec<Value> = items
            .iter()
            .filter(|p| p.component.kind == "patch" && find_target(items, p.component) == Some(i))
            .map(|p| json!({ "type": "unofficial", "diff": { "text": { "content": format!("stackbuild patch {} (sha256 {})", p.component.name, p.component.sha256) } } }))
            .collect();
        if !patches.is_empty() {
            v["pedigree"] = json!({ "patches": patches });
        }
        if let Some(layer) = layers.get_mut(it.layer) {
            if let Some(list) = layer["components"].as_array_mut() {
                list.push(v);
            }
        }
    }
    for l in &mut layers {
        if l["components"].as_array().is_some_and(Vec::is_empty) {
            if let Some(o) = l.as_object_mut() {
                o.remove("components");
            }
        }
    }
    json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": format!("urn:uuid:{}", uuid(seed)),
        "version": 1,
        "metadata": {
            "timestamp": stackcontract::time::rfc3339(input.epoch),
            "tools": { "components": [{ "type": "application", "name": "stackbuild", "version": env!("CARGO_PKG_VERSION") }] },
            "component": {
                "type": "container",
                "bom-ref": "image",
                "name": image_name,
                "version": image_tag,
                "description": format!("OCI image for {}", input.stack.platform),
            },
        },
        // What the BOM's subject (the image) holds: its layers, each with its packages nested.
        "components": layers,
    })
}

fn cyclonedx_component(it: &Item<'_>, bom_ref: &str) -> Value {
    let c = it.component;
    let kind = match c.kind.as_str() {
        "base" => "operating-system",
        "source" => "application",
        _ => "library",
    };
    let mut v = json!({ "type": kind, "bom-ref": bom_ref, "name": c.name });
    if !c.version.is_empty() {
        v["version"] = json!(c.version);
    }
    if let Some(purl) = &it.purl {
        v["purl"] = json!(purl);
    }
    if c.sha256.len() == 64 && c.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        v["hashes"] = json!([{ "alg": "SHA-256", "content": c.sha256.to_ascii_lowercase() }]);
    }
    if let Some((url, commit)) = &it.git {
        v["version"] = json!(commit);
        if is_web_url(url) {
            v["externalReferences"] =
                json!([{ "type": "vcs", "url": url, "comment": format!("commit {commit}") }]);
        } else {
            v["description"] = json!(format!("git repository {url} at commit {commit}"));
        }
    } else if !c.source.is_empty() {
        v["description"] = json!(format!("from {}", c.source));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(kind: &str, name: &str, version: &str, source: &str, sha256: &str) -> Component {
        Component {
            kind: kind.into(),
            name: name.into(),
            version: version.into(),
            source: source.into(),
            sha256: sha256.into(),
        }
    }

    fn stack() -> StackManifest {
        StackManifest {
            schema: 1,
            image: "demo:1.0".into(),
            platform: "linux/amd64".into(),
            components: vec![
                component("base", "debian bookworm", "", "mmdebstrap --variant=apt", &"ab".repeat(32)),
                component("deb", "libc6", "2.36-9+deb12u4", "debian:bookworm", ""),
                component("deb", "tzdata", "1:2024a-0", "debian:bookworm", ""),
                component("wheel", "Typing_Extensions", "4.9.0", "python package index", &"cd".repeat(32)),
                component(
                    "source",
                    "app",
                    "git:https://user:secret@example.org/app.git@0123abcd",
                    "https://user:secret@example.org/app.git",
                    "",
                ),
                component("source", "local", "tree:ffff", "local directory", ""),
                component("patch", "fix", "", "package typing_extensions", &"ee".repeat(32)),
                component("patch", "fix-app", "", "source app", &"ef".repeat(32)),
            ],
            requirements: Vec::new(),
        }
    }

    fn layers() -> Vec<SbomLayer> {
        vec![
            SbomLayer { name: "base".into(), digest: Some(format!("sha256:{}", "11".repeat(32))) },
            SbomLayer { name: "python".into(), digest: Some(format!("sha256:{}", "22".repeat(32))) },
            SbomLayer { name: "sources".into(), digest: Some(format!("sha256:{}", "33".repeat(32))) },
            SbomLayer { name: "config".into(), digest: None },
        ]
    }

    fn sbom() -> Sbom {
        let stack = stack();
        let layers = layers();
        Sbom::new(&SbomInput {
            stack: &stack,
            layers: &layers,
            placement: &[0, 0, 0, 1, 2, 2, 3, 2],
            deb_arch: "amd64",
            epoch: 0,
        })
    }

    #[test]
    fn purls_follow_the_purl_spec() {
        let s = stack();
        assert_eq!(
            purl(&s.components[1], "amd64").unwrap(),
            "pkg:deb/debian/libc6@2.36-9+deb12u4?arch=amd64&distro=bookworm"
        );
        assert_eq!(
            purl(&s.components[2], "arm64").unwrap(),
            "pkg:deb/debian/tzdata@1%3A2024a-0?arch=arm64&distro=bookworm"
        );
        assert_eq!(purl(&s.components[3], "amd64").unwrap(), "pkg:pypi/typing-extensions@4.9.0");
        assert_eq!(purl(&s.components[4], "amd64"), None);
    }

    #[test]
    fn the_documents_are_a_pure_function_of_the_inputs() {
        assert_eq!(sbom(), sbom());
        let stack = stack();
        let layers = layers();
        let other = Sbom::new(&SbomInput {
            stack: &stack,
            layers: &layers,
            placement: &[0, 0, 0, 1, 2, 2, 3, 2],
            deb_arch: "amd64",
            epoch: 1,
        });
        assert_ne!(sbom().spdx, other.spdx, "the epoch is an input");
    }

    #[test]
    fn the_key_moves_with_every_input() {
        let (stack, layers) = (stack(), layers());
        let input = SbomInput {
            stack: &stack,
            layers: &layers,
            placement: &[0, 0, 0, 1, 2, 2, 3, 2],
            deb_arch: "amd64",
            epoch: 0,
        };
        let key = Sbom::key(&input);
        assert_eq!(key, Sbom::key(&input));
        let mut other_stack = stack.clone();
        other_stack.components[3].version.push_str(".1");
        let mut other_layers = layers.clone();
        other_layers[1].digest = Some("sha256:00".into());
        for other in [
            SbomInput { epoch: 1, ..input },
            SbomInput { deb_arch: "arm64", ..input },
            SbomInput { placement: &[0, 0, 0, 1, 2, 2, 2, 2], ..input },
            SbomInput { stack: &other_stack, ..input },
            SbomInput { layers: &other_layers, ..input },
        ] {
            assert_ne!(Sbom::key(&other), key);
        }
    }

    #[test]
    fn spdx_lists_everything_with_its_relationships() {
        let doc: Value = serde_json::from_slice(&sbom().spdx).unwrap();
        assert_eq!(doc["spdxVersion"], "SPDX-2.3");
        assert_eq!(doc["creationInfo"]["created"], "1970-01-01T00:00:00Z");
        let packages = doc["packages"].as_array().unwrap();
        // The image, 4 layers, 8 components.
        assert_eq!(packages.len(), 13);
        let text = String::from_utf8(sbom().spdx).unwrap();
        assert!(!text.contains("secret"), "credentials leaked: {text}");
        assert!(text.contains("git+https://example.org/app.git@0123abcd"));
        let rels = doc["relationships"].as_array().unwrap();
        let has = |from: &str, kind: &str, to: &str| {
            rels.iter().any(|r| {
                r["spdxElementId"].as_str().unwrap().starts_with(from)
                    && r["relationshipType"] == kind
                    && r["relatedSpdxElement"].as_str().unwrap().starts_with(to)
            })
        };
        assert!(has("SPDXRef-image", "CONTAINS", "SPDXRef-layer-0-base"));
        assert!(has("SPDXRef-layer-0-base", "CONTAINS", "SPDXRef-deb-1-libc6"));
        assert!(has("SPDXRef-layer-1-python", "CONTAINS", "SPDXRef-wheel-3-"));
        assert!(has("SPDXRef-patch-6-fix", "PATCH_APPLIED", "SPDXRef-wheel-3-"));
        assert!(has("SPDXRef-patch-7-fix-app", "PATCH_APPLIED", "SPDXRef-source-4-app"));
    }

    #[test]
    fn cyclonedx_nests_packages_in_layers() {
        let doc: Value = serde_json::from_slice(&sbom().cyclonedx).unwrap();
        assert_eq!(doc["specVersion"], "1.6");
        let serial = doc["serialNumber"].as_str().unwrap();
        assert_eq!(serial.len(), "urn:uuid:".len() + 36);
        assert_eq!(&serial[23..24], "5");
        let layers = doc["components"].as_array().unwrap();
        assert_eq!(layers.len(), 4);
        assert_eq!(layers[0]["components"].as_array().unwrap().len(), 3);
        let wheel = &layers[1]["components"][0];
        assert_eq!(wheel["purl"], "pkg:pypi/typing-extensions@4.9.0");
        assert_eq!(wheel["pedigree"]["patches"].as_array().unwrap().len(), 1);
        assert_eq!(layers[2]["components"][0]["externalReferences"][0]["url"], "https://example.org/app.git");
    }

    #[test]
    fn credentials_are_stripped_from_urls() {
        assert_eq!(strip_credentials("https://u:p@host/x.git"), "https://host/x.git");
        assert_eq!(strip_credentials("https://host"), "https://host");
        assert_eq!(strip_credentials("/srv/repo"), "/srv/repo");
    }
}
