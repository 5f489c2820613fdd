//! Pulling an image from a registry into an OCI image layout.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, Read as _, Seek as _, Write as _};
use std::path::Path;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::client::MAX_MANIFEST;
use super::client::{http_error, is_retryable_status, Body, Req, Session};
use super::{io_err, Client, Reference, RegistryError};
use crate::oci::{
    self, Descriptor, Index, LayoutImage, Platform, ANNOTATION_REF_NAME, MEDIA_TYPE_DOCKER_LIST,
    MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST,
};
use stackbuild_cache::sha256_hex;
use stackbuild_common::sha256_bytes;
use stackbuild_common::{unique_temp_name, write_atomic};

/// Docker's schema 1 manifests (refused: they have no content-addressed config).
const MEDIA_TYPE_DOCKER_V1: &str = "application/vnd.docker.distribution.manifest.v1+json";
const MEDIA_TYPE_DOCKER_V1_SIGNED: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";

/// Options of [`pull_with`].
#[derive(Clone, Debug)]
pub struct PullOptions<'a> {
    /// The platform picked from an index or manifest list (default `linux/amd64`; a variant
    /// of `None` accepts any).
    pub platform: Platform,
    /// The tag in the layout's `index.json` (default: the reference's tag, else `latest`).
    pub layout_tag: Option<&'a str>,
}

impl Default for PullOptions<'_> {
    fn default() -> Self {
        Self {
            platform: Platform { architecture: "amd64".into(), os: "linux".into(), variant: None },
            layout_tag: None,
        }
    }
}

/// What a pull produced.
#[derive(Clone, Debug)]
pub struct PulledImage {
    /// `registry/repository@<manifest digest>`: the image, pinned.
    pub pinned: String,
    /// The digest of the index or manifest list the manifest was picked from, if any.
    pub index_digest: Option<String>,
    /// The media type of the manifest (OCI or Docker schema 2).
    pub manifest_media_type: String,
    /// The tag of the image in the layout.
    pub layout_tag: String,
    /// The image as read back from the layout (manifest digest, manifest, config, layers).
    pub image: LayoutImage,
    /// Blobs downloaded.
    pub blobs_downloaded: usize,
    /// Blobs the layout already had (re-hashed, not downloaded).
    pub blobs_present: usize,
    /// Bytes downloaded (blobs and manifests; retried ranges count again).
    pub bytes_downloaded: u64,
    /// HTTP requests sent (token requests and retries included).
    pub requests: u64,
}

/// Pulls `src` into the OCI layout `dest_layout_dir` (created if needed; other images in it are
/// kept) with the default [`PullOptions`].
pub fn pull(client: &Client, src: &Reference, dest_layout_dir: &Path) -> Result<PulledImage, RegistryError> {
    pull_with(client, src, dest_layout_dir, &PullOptions::default())
}

/// [`pull`] with options.
///
/// The manifest is checked against `src`'s digest when it has one (and against the registry's
/// `Docker-Content-Digest` when it names a sha256); an index or manifest list is resolved to
/// the manifest of `options.platform`, which is checked against the index's descriptor. Every
/// blob streams to a temporary file in the layout while it is hashed, and is renamed into
/// `blobs/sha256/` only when its size and digest match. `index.json` is written last.
pub fn pull_with(
    client: &Client,
    src: &Reference,
    dest_layout_dir: &Path,
    options: &PullOptions<'_>,
) -> Result<PulledImage, RegistryError> {
    let layout_tag = options.layout_tag.or(src.tag.as_deref()).unwrap_or("latest").to_string();
    let scope = format!("repository:{}:pull", src.repository);
    let mut puller = Puller::new(client, src, &scope);

    let first = puller.get_manifest(src.manifest_reference())?;
    if let Some(digest) = &src.digest {
        check_digest(&format!("manifest {src}"), digest, &first.bytes)?;
    }
    let (index_digest, index_platform, manifest) = match first.kind()? {
        Kind::Manifest(media_type) => (None, None, (first, media_type)),
        Kind::Index => {
            let index_digest = sha256_bytes(&first.bytes);
            let index: Index = serde_json::from_slice(&first.bytes).map_err(|e| RegistryError::Manifest {
                what: format!("index {src}"),
                reason: e.to_string(),
            })?;
            let desc = pick_platform(src, &index, &options.platform)?;
            let picked = puller.get_manifest(&desc.digest)?;
            let what = format!("manifest {} of {src}", desc.digest);
            check_digest(&what, &desc.digest, &picked.bytes)?;
            if picked.bytes.len() as u64 != desc.size {
                return Err(RegistryError::DigestMismatch {
                    what,
                    expected: format!("{} bytes", desc.size),
                    actual: format!("{} bytes", picked.bytes.len()),
                });
            }
            match picked.kind()? {
                Kind::Manifest(media_type) => {
                    (Some(index_digest), desc.platform.clone(), (picked, media_type))
                }
                Kind::Index => {
                    return Err(RegistryError::Manifest { what, reason: "an index inside an index".into() })
                }
            }
        }
    };
    let (manifest, media_type) = manifest;
    let manifest_digest = sha256_bytes(&manifest.bytes);
    let parsed: oci::Manifest =
        serde_json::from_slice(&manifest.bytes).map_err(|e| RegistryError::Manifest {
            what: format!("manifest {manifest_digest} of {src}"),
            reason: e.to_string(),
        })?;

    let blobs_dir = dest_layout_dir.join("blobs").join("sha256");
    fs::create_dir_all(&blobs_dir).map_err(io_err("creating", &blobs_dir))?;
    let mut downloaded = 0;
    let mut present = 0;
    let mut seen: Vec<&str> = Vec::new();
    for desc in std::iter::once(&parsed.config).chain(&parsed.layers) {
        if seen.contains(&desc.digest.as_str()) {
            continue;
        }
        seen.push(&desc.digest);
        if puller.fetch_blob(desc, &blobs_dir)? {
            downloaded += 1;
        } else {
            present += 1;
        }
    }
    let manifest_path = blobs_dir.join(sha256_hex(&manifest_digest)?);
    write_atomic(&manifest_path, &manifest.bytes).map_err(io_err("writing", &manifest_path))?;
    let oci_layout = dest_layout_dir.join("oci-layout");
    write_atomic(&oci_layout, br#"{"imageLayoutVersion":"1.0.0"}"#)
        .map_err(io_err("writing", &oci_layout))?;

    let config_path = blobs_dir.join(sha256_hex(&parsed.config.digest)?);
    // The index entry names the platform, from the index or else from the config.
    let platform = index_platform.or_else(|| config_platform(&config_path, parsed.config.size));
    let descriptor = Descriptor {
        media_type: media_type.clone(),
        digest: manifest_digest.clone(),
        size: manifest.bytes.len() as u64,
        annotations: BTreeMap::from([(ANNOTATION_REF_NAME.to_string(), layout_tag.clone())]),
        platform,
    };
    update_index(dest_layout_dir, descriptor, &layout_tag)?;
    let image = oci::read_layout(dest_layout_dir, Some(&layout_tag))?;
    if image.manifest_digest != manifest_digest {
        return Err(RegistryError::DigestMismatch {
            what: format!("layout {} after pulling {src}", dest_layout_dir.display()),
            expected: manifest_digest,
            actual: image.manifest_digest,
        });
    }
    Ok(PulledImage {
        pinned: format!("{}/{}@{manifest_digest}", src.registry, src.repository),
        index_digest,
        manifest_media_type: media_type,
        layout_tag,
        image,
        blobs_downloaded: downloaded,
        blobs_present: present,
        bytes_downloaded: puller.bytes,
        requests: puller.session.requests,
    })
}

/// The platform in an image config blob, if it parses.
fn config_platform(path: &Path, size: u64) -> Option<Platform> {
    const MAX_CONFIG: u64 = 16 * 1024 * 1024;
    if size > MAX_CONFIG {
        return None;
    }
    let bytes = fs::read(path).ok()?;
    let config: oci::ImageConfig = serde_json::from_slice(&bytes).ok()?;
    Some(config.platform())
}

/// Adds (or replaces) the entry tagged `tag` in the layout's `index.json`.
fn update_index(dir: &Path, descriptor: Descriptor, tag: &str) -> Result<(), RegistryError> {
    let path = dir.join("index.json");
    let mut manifests = match fs::read(&path) {
        Ok(bytes) => {
            let index: Index = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Manifest {
                what: path.display().to_string(),
                reason: e.to_string(),
            })?;
            index.manifests
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err("reading", &path)(e).into()),
    };
    manifests.retain(|d| d.annotations.get(ANNOTATION_REF_NAME).map(String::as_str) != Some(tag));
    manifests.push(descriptor);
    let index = Index {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_INDEX.to_string()),
        manifests,
        annotations: BTreeMap::new(),
    };
    let json = oci::index_json(&index)
        .map_err(|e| RegistryError::Manifest { what: path.display().to_string(), reason: e.to_string() })?;
    write_atomic(&path, &json).map_err(|e| io_err("writing", &path)(e).into())
}

fn check_digest(what: &str, expected: &str, bytes: &[u8]) -> Result<(), RegistryError> {
    let actual = sha256_bytes(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(RegistryError::DigestMismatch { what: what.to_string(), expected: expected.to_string(), actual })
    }
}

/// `os/arch[/variant]`.
fn platform_name(p: &Platform) -> String {
    match &p.variant {
        Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
        None => format!("{}/{}", p.os, p.architecture),
    }
}

/// The manifest of `wanted` in `index` (arm64 without a variant is arm64/v8).
fn pick_platform<'i>(
    src: &Reference,
    index: &'i Index,
    wanted: &Platform,
) -> Result<&'i Descriptor, RegistryError> {
    let variant = |p: &Platform| match (p.architecture.as_str(), p.variant.as_deref()) {
        ("arm64", None) => Some("v8".to_string()),
        (_, v) => v.map(str::to_string),
    };
    let is_manifest =
        |d: &Descriptor| d.media_type == MEDIA_TYPE_MANIFEST || d.media_type == MEDIA_TYPE_DOCKER_MANIFEST;
    index
        .manifests
        .iter()
        .filter(|d| is_manifest(d))
        .find(|d| {
            d.platform.as_ref().is_some_and(|p| {
                p.os == wanted.os
                    && p.architecture == wanted.architecture
                    && (wanted.variant.is_none() || variant(p) == variant(wanted))
            })
        })
        .ok_or_else(|| {
            let available: Vec<String> =
                index.manifests.iter().filter_map(|d| d.platform.as_ref().map(platform_name)).collect();
            RegistryError::NoPlatform {
                reference: src.to_string(),
                wanted: platform_name(wanted),
                available: if available.is_empty() { "no platforms".into() } else { available.join(", ") },
            }
        })
}

/// What a manifest document is.
enum Kind {
    /// An image manifest of this media type.
    Manifest(String),
    /// An OCI index or Docker manifest list.
    Index,
}

/// A manifest as fetched.
pub(super) struct Fetched {
    what: String,
    /// The manifest's bytes, as the registry sent them.
    pub(super) bytes: Vec<u8>,
    content_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    #[serde(default)]
    schema_version: Option<u64>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<serde_json::Value>,
    #[serde(default)]
    config: Option<serde_json::Value>,
}

impl Fetched {
    /// The kind, from the document's `mediaType`, else the `Content-Type`, else its shape.
    fn kind(&self) -> Result<Kind, RegistryError> {
        let bad = |reason: String| RegistryError::Manifest { what: self.what.clone(), reason };
        let probe: Probe = serde_json::from_slice(&self.bytes).map_err(|e| bad(e.to_string()))?;
        if probe.schema_version == Some(1) {
            return Err(bad("Docker schema 1 manifests are not supported".into()));
        }
        let media_type = probe.media_type.clone().or_else(|| {
            self.content_type
                .as_deref()
                .map(|t| t.split(';').next().unwrap_or(t).trim().to_string())
                .filter(|t| t.starts_with("application/vnd."))
        });
        match media_type.as_deref() {
            Some(MEDIA_TYPE_INDEX | MEDIA_TYPE_DOCKER_LIST) => Ok(Kind::Index),
            Some(t @ (MEDIA_TYPE_MANIFEST | MEDIA_TYPE_DOCKER_MANIFEST)) => Ok(Kind::Manifest(t.to_string())),
            Some(MEDIA_TYPE_DOCKER_V1 | MEDIA_TYPE_DOCKER_V1_SIGNED) => {
                Err(bad("Docker schema 1 manifests are not supported".into()))
            }
            Some(other) => Err(bad(format!("unsupported manifest media type {other}"))),
            None if probe.manifests.is_some() => Ok(Kind::Index),
            None if probe.config.is_some() => Ok(Kind::Manifest(MEDIA_TYPE_MANIFEST.to_string())),
            None => Err(bad("neither a manifest nor an index".into())),
        }
    }
}

/// The state of one pull.
pub(super) struct Puller<'a, 'c> {
    session: Session<'c>,
    src: &'a Reference,
    scope: &'a str,
    /// `http(s)://registry/v2/<name>`.
    base: String,
    bytes: u64,
}

/// A `GET` for a pull.
fn get_req<'r>(src: &'r Reference, scope: &'r str, what: &'r str, url: String) -> Req<'r> {
    Req { what, method: "GET", url, registry: &src.registry, scope, headers: Vec::new(), body: Body::Empty }
}

impl<'a, 'c> Puller<'a, 'c> {
    /// A puller from `src`'s repository with the token `scope` (`repository:<name>:pull`).
    pub(super) fn new(client: &'c Client, src: &'a Reference, scope: &'a str) -> Self {
        Puller {
            session: client.session(),
            src,
            scope,
            base: format!("{}/v2/{}", client.base_url(&src.registry), src.repository),
            bytes: 0,
        }
    }
}

impl Puller<'_, '_> {
    /// `GET /v2/<name>/manifests/<reference>`, accepting the four manifest types.
    pub(super) fn get_manifest(&mut self, reference: &str) -> Result<Fetched, RegistryError> {
        let what = format!("manifest {}/{}:{reference}", self.src.registry, self.src.repository);
        let what = what.replacen(":sha256:", "@sha256:", 1);
        let mut get = get_req(self.src, self.scope, &what, format!("{}/manifests/{reference}", self.base));
        get.headers.push((
            "Accept",
            [MEDIA_TYPE_MANIFEST, MEDIA_TYPE_INDEX, MEDIA_TYPE_DOCKER_MANIFEST, MEDIA_TYPE_DOCKER_LIST]
                .join(", "),
        ));
        let resp = self.session.send_retrying(&get)?;
        if resp.status() != 200 {
            return Err(http_error(&get, resp));
        }
        let content_type = resp.header("content-type").map(str::to_string);
        let header_digest = resp.header("docker-content-digest").map(str::to_string);
        let mut bytes = Vec::new();
        let read = resp.into_reader().take(MAX_MANIFEST + 1).read_to_end(&mut bytes);
        read.map_err(|e| RegistryError::Manifest { what: what.clone(), reason: format!("reading: {e}") })?;
        if bytes.len() as u64 > MAX_MANIFEST {
            return Err(RegistryError::Manifest {
                what,
                reason: format!("larger than {MAX_MANIFEST} bytes"),
            });
        }
        self.bytes += bytes.len() as u64;
        if let Some(digest) = header_digest.filter(|d| d.starts_with("sha256:")) {
            check_digest(&format!("{what} (Docker-Content-Digest)"), &digest, &bytes)?;
        }
        Ok(Fetched { what, bytes, content_type })
    }

    /// Puts the blob of `desc` into `blobs_dir`; `false` when a file with its digest is already
    /// there (it is re-hashed; a wrong one is replaced).
    pub(super) fn fetch_blob(&mut self, desc: &Descriptor, blobs_dir: &Path) -> Result<bool, RegistryError> {
        let final_path = blobs_dir.join(sha256_hex(&desc.digest)?);
        if fs::symlink_metadata(&final_path).is_ok_and(|m| m.is_file() && m.len() == desc.size) {
            let file = File::open(&final_path).map_err(io_err("opening", &final_path))?;
            let (actual, _) = stackbuild_common::sha256_reader(BufReader::new(file))
                .map_err(io_err("reading", &final_path))?;
            if actual == desc.digest {
                return Ok(false);
            }
            tracing::warn!("{}: wrong content ({actual}); downloading it again", final_path.display());
        }
        let tmp = blobs_dir.join(unique_temp_name(".stackbuild-tmp-"));
        let result = self.download(desc, &tmp).and_then(|()| {
            fs::rename(&tmp, &final_path).map_err(io_err("renaming to", &final_path))?;
            stackbuild_common::sync_dir(blobs_dir).map_err(|e| io_err("syncing", blobs_dir)(e).into())
        });
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map(|()| true)
    }

    /// Streams the blob into `tmp`, hashing it; an interrupted transfer resumes with a `Range`
    /// request when the registry honours it, and starts over when it does not.
    fn download(&mut self, desc: &Descriptor, tmp: &Path) -> Result<(), RegistryError> {
        let what = format!("blob {} of {}/{}", desc.digest, self.src.registry, self.src.repository);
        let url = format!("{}/blobs/{}", self.base, desc.digest);
        let mut file =
            File::options().write(true).create_new(true).open(tmp).map_err(io_err("creating", tmp))?;
        let mut hasher = Sha256::new();
        let mut written = 0u64;
        let max = self.session.client.max_attempts();
        let mut attempt = 1;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let mut get = get_req(self.src, self.scope, &what, url.clone());
            if written > 0 {
                get.headers.push(("Range", format!("bytes={written}-")));
            }
            let failure = match self.session.send(&get) {
                Ok(resp) if resp.status() == 200 || (resp.status() == 206 && written > 0) => {
                    if resp.status() == 200 && written > 0 {
                        // The registry sent the whole blob again.
                        file.set_len(0).map_err(io_err("truncating", tmp))?;
                        file.rewind().map_err(io_err("truncating", tmp))?;
                        hasher = Sha256::new();
                        written = 0;
                    }
                    let mut reader = resp.into_reader();
                    let read_failure = loop {
                        let n = match reader.read(&mut buf) {
                            Ok(0) => break None,
                            Ok(n) => n,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(e) => break Some(format!("reading: {e}")),
                        };
                        let chunk = &buf[..n];
                        if written + n as u64 > desc.size {
                            return Err(RegistryError::DigestMismatch {
                                what,
                                expected: format!("{} bytes", desc.size),
                                actual: format!("more than {} bytes", desc.size),
                            });
                        }
                        hasher.update(chunk);
                        file.write_all(chunk).map_err(io_err("writing", tmp))?;
                        written += n as u64;
                        self.bytes += n as u64;
                    };
                    match read_failure {
                        Some(failure) => Some(failure),
                        None if written == desc.size => None,
                        None => Some(format!("connection ended after {written} of {} bytes", desc.size)),
                    }
                }
                Ok(resp) if is_retryable_status(resp.status()) => Some(http_error(&get, resp).to_string()),
                Ok(resp) => return Err(http_error(&get, resp)),
                Err(e @ RegistryError::Transport { .. }) => Some(e.to_string()),
                Err(e) => return Err(e),
            };
            let Some(failure) = failure else { break };
            if attempt >= max {
                return Err(RegistryError::Transfer {
                    what,
                    attempts: attempt,
                    offset: written,
                    last: failure,
                });
            }
            tracing::warn!("{what}: {failure}; retrying from byte {written}");
            std::thread::sleep(self.session.client.backoff(attempt));
            attempt += 1;
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != desc.digest {
            return Err(RegistryError::DigestMismatch { what, expected: desc.digest.clone(), actual });
        }
        file.sync_all().map_err(|e| io_err("syncing", tmp)(e).into())
    }
}
