//! A registry as a shared layer cache: `stackbuild RECIPE --cache-registry HOST[:PORT]/REPO`.
//!
//! `BuildKit`'s `--cache-to/--cache-from type=registry` keeps a build cache in a registry
//! (<https://docs.docker.com/build/cache/backends/registry/>); this does the same with
//! stackbuild's own layer keys, which are computed from a layer's inputs before anything is
//! fetched or built. Each cached layer is one OCI 1.1 artifact in `REPO` (image-spec 1.1,
//! "Guidelines for Artifact Usage",
//! <https://github.com/opencontainers/image-spec/blob/v1.1.0/manifest.md#guidelines-for-artifact-usage>):
//! an image manifest with the `artifactType` [`ARTIFACT_TYPE`], the empty config
//! (`application/vnd.oci.empty.v1+json`), the layer blob as its first layer (its `diff_id` in
//! the annotation [`ANNOTATION_DIFF_ID`]), then the small records the build keeps beside the
//! layer under the same key (a Debian base's package list, the bytecode a Python layer holds),
//! each named by [`ANNOTATION_RECORD`]. It is tagged [`cache_tag`]: a hash of the key, so that
//! no input of the recipe (a URL with a token in it, a path) can be read off the registry.
//!
//! Nothing pulled is trusted: the blob is hashed while it streams in and must match its digest
//! and size, and it is decompressed and hashed again to check the `diff_id` the manifest claims,
//! before the key is recorded in the local cache. A key whose manifest is missing, malformed, or
//! points at a missing or corrupt blob is a miss (with a warning): the layer is built again and
//! pushed again. A push that fails is a warning too; the build does not depend on the registry.
//! The cache trusts whoever may push to `REPO` to map keys to layers honestly, as `BuildKit`'s
//! registry cache does: give write access only to the build machines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File};
use std::io::BufReader;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::pull::Puller;
use super::push::{Blob, Pusher};
use super::{Client, Reference, RegistryError, MEDIA_TYPE_EMPTY};
use crate::oci::{Descriptor, MEDIA_TYPE_MANIFEST};
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::Compression;
use stackbuild_common::{sha256_bytes, LayerBlob};

/// The `artifactType` of a cached layer.
pub(super) const ARTIFACT_TYPE: &str = "application/vnd.stackbuild.layer-cache.v1";
/// The annotation of the layer descriptor that holds its `diff_id` (the uncompressed tar's digest).
pub(super) const ANNOTATION_DIFF_ID: &str = "io.stackbuild.cache.diff-id";
/// The annotation that names a record descriptor (one of [`RECORDS`]).
pub(super) const ANNOTATION_RECORD: &str = "io.stackbuild.cache.record";
/// The media type of a record blob.
pub(super) const MEDIA_TYPE_RECORD: &str = "application/vnd.stackbuild.cache-record.v1+json";
/// The records kept beside a layer, as `<cache>/<name>/<key hex>.json`: the facts of a Debian
/// base (its packages and interpreter, which the build needs when it reuses the layer) and what
/// bytecode a Python layer holds (for the report).
pub(super) const RECORDS: [&str; 2] = ["facts", "bytecode"];
/// Largest record shared (a base's package list is some tens of KiB).
const MAX_RECORD: u64 = 4 * 1024 * 1024;
/// The prefix of what [`cache_tag`] hashes; a new scheme gets a new version.
const TAG_DOMAIN: &[u8] = b"stackbuild-cache/v1\0";

/// The tag of the artifact that caches the layer `key`: `cache-v1-` and the sha256 of
/// `stackbuild-cache/v1\0` and the key's hex (73 characters; a tag may have 128 and must match
/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`, distribution-spec "Pulling manifests").
pub(super) fn cache_tag(key: &LayerKey) -> String {
    let mut h = Sha256::new();
    h.update(TAG_DOMAIN);
    h.update(key.as_hex().as_bytes());
    format!("cache-v1-{}", hex::encode(h.finalize()))
}

/// A registry repository used as a layer cache. Cheap to clone: the clones share the client
/// and the record of what was pulled.
#[derive(Clone)]
pub struct RemoteCache {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// The repository (its tag and digest unset).
    repo: Reference,
    /// `repository:<name>:pull` and `repository:<name>:pull,push`.
    pull_scope: String,
    push_scope: String,
    /// Digests of the layer blobs taken from the registry in this process.
    pulled: Mutex<BTreeSet<String>>,
    /// Set when the registry could not be reached or refused us: the build goes on without it
    /// rather than wait out the retries of every layer.
    off: AtomicBool,
    /// Set when the registry refused a push (read-only credentials): pulls go on.
    push_off: AtomicBool,
}

impl fmt::Debug for RemoteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteCache").field("repository", &self.to_string()).finish_non_exhaustive()
    }
}

impl fmt::Display for RemoteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.inner.repo.registry, self.inner.repo.repository)
    }
}

/// A cache artifact's manifest, as far as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CacheManifest {
    #[serde(default)]
    artifact_type: Option<String>,
    layers: Vec<Descriptor>,
}

impl RemoteCache {
    /// The cache in `spec` (`HOST[:PORT]/REPO`, no tag or digest), reached through `client`.
    pub fn new(spec: &str, client: Client) -> Result<Self, RegistryError> {
        let repo = Reference::parse(spec)?;
        if repo.tag.is_some() || repo.digest.is_some() {
            return Err(RegistryError::BadReference {
                reference: spec.to_string(),
                reason: "a cache registry is a repository, HOST[:PORT]/REPO, without a tag or digest \
                         (each layer gets its own tag)"
                    .into(),
            });
        }
        let pull_scope = format!("repository:{}:pull", repo.repository);
        let push_scope = format!("repository:{}:pull,push", repo.repository);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                repo,
                pull_scope,
                push_scope,
                pulled: Mutex::default(),
                off: AtomicBool::new(false),
                push_off: AtomicBool::new(false),
            }),
        })
    }

    /// Whether the layer blob `digest` was taken from the registry by this process.
    fn was_pulled(&self, digest: &str) -> bool {
        self.inner.pulled.lock().unwrap_or_else(PoisonError::into_inner).contains(digest)
    }

    /// Looks `key` up in the registry; on a hit the blob (verified) and its records go into
    /// `cache` and the key is recorded there. A miss, or anything wrong, is `None`: the caller
    /// builds the layer.
    fn fetch_layer(&self, cache: &Cache, key: &LayerKey) -> Option<LayerBlob> {
        if self.inner.off.load(Ordering::Relaxed) {
            return None;
        }
        match self.try_fetch(cache, key) {
            Ok(Some(blob)) => {
                tracing::debug!("layer {key}: pulled {} from the cache registry {self}", blob.digest);
                self.inner.pulled.lock().unwrap_or_else(PoisonError::into_inner).insert(blob.digest.clone());
                Some(blob)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("cache registry {self}: layer {key}: {e}; building it");
                self.turn_off_after(&e);
                None
            }
        }
    }

    /// Pushes the layer `blob` built from `key` (its blob in `cache`) with its records; a failure
    /// is a warning.
    fn store_layer(&self, cache: &Cache, key: &LayerKey, blob: &LayerBlob) {
        if self.inner.off.load(Ordering::Relaxed) || self.inner.push_off.load(Ordering::Relaxed) {
            return;
        }
        match self.try_store(cache, key, blob) {
            Ok(tag) => {
                tracing::debug!("layer {key}: pushed {} to the cache registry {self}:{tag}", blob.digest);
            }
            Err(e) => {
                tracing::warn!("cache registry {self}: could not push layer {key}: {e}");
                if matches!(e, RegistryError::Http { status: 401 | 403, .. })
                    && !self.inner.push_off.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!("cache registry {self}: no layers pushed for the rest of this build");
                }
                self.turn_off_after(&e);
            }
        }
    }

    /// Stops using the registry after an error that will not go away for the next layer: it
    /// could not be reached (after the client's retries), or it refused the credentials.
    fn turn_off_after(&self, e: &RegistryError) {
        let lasting = matches!(
            e,
            RegistryError::Transport { .. }
                | RegistryError::Transfer { .. }
                | RegistryError::Unauthorized { .. }
                | RegistryError::Token { .. }
                | RegistryError::Credentials { .. }
        );
        if lasting && !self.inner.off.swap(true, Ordering::Relaxed) {
            tracing::warn!("cache registry {self}: not used for the rest of this build");
        }
    }

    fn try_fetch(&self, cache: &Cache, key: &LayerKey) -> Result<Option<LayerBlob>, RegistryError> {
        let inner = &*self.inner;
        let tag = cache_tag(key);
        let mut puller = Puller::new(&inner.client, &inner.repo, &inner.pull_scope);
        let manifest = match puller.get_manifest(&tag) {
            Ok(fetched) => fetched,
            Err(RegistryError::Http { status: 404, .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (layer, records) = parse_manifest(&format!("{self}:{tag}"), &manifest.bytes)?;
        let blob_path = cache.blob_path(&layer.digest)?;
        let blobs_dir = blob_path.parent().unwrap_or(cache.root()).to_path_buf();
        fs::create_dir_all(&blobs_dir).map_err(super::io_err("creating", &blobs_dir))?;
        let had_blob = cache.has_blob(&layer.digest);
        // Hashed while it streams in; renamed into the cache only when digest and size match.
        puller.fetch_blob(&layer.descriptor, &blobs_dir)?;
        if let Err(e) = check_diff_id(&blob_path, &layer) {
            if !had_blob {
                let _ = cache.remove_blob(&layer.digest);
            }
            return Err(e);
        }
        let tmp = scratch_dir(cache)?;
        for (name, desc) in &records {
            puller.fetch_blob(desc, tmp.path())?;
            let from = tmp.path().join(stackbuild_cache::sha256_hex(&desc.digest)?);
            let bytes = fs::read(&from).map_err(super::io_err("reading", &from))?;
            let dir = cache.root().join(name);
            fs::create_dir_all(&dir).map_err(super::io_err("creating", &dir))?;
            let to = dir.join(format!("{}.json", key.as_hex()));
            stackbuild_common::write_atomic(&to, &bytes).map_err(super::io_err("writing", &to))?;
        }
        let blob = LayerBlob {
            digest: layer.digest,
            diff_id: layer.diff_id,
            size: layer.descriptor.size,
            media_type: layer.descriptor.media_type,
            annotations: {
                let mut own = layer.descriptor.annotations;
                own.remove(ANNOTATION_DIFF_ID);
                own
            },
            path: blob_path,
        };
        // The key last: it is what makes the layer a hit.
        cache.put_local_layer(key, &blob)?;
        Ok(Some(blob))
    }

    fn try_store(&self, cache: &Cache, key: &LayerKey, blob: &LayerBlob) -> Result<String, RegistryError> {
        let inner = &*self.inner;
        let tag = cache_tag(key);
        let mut pusher = Pusher::new(&inner.client, &inner.repo, &inner.push_scope);
        let tmp = scratch_dir(cache)?;
        let empty = tmp.path().join("empty");
        fs::write(&empty, b"{}").map_err(super::io_err("writing", &empty))?;
        pusher.push_blob(&Blob { digest: sha256_bytes(b"{}"), size: 2, path: empty }, None)?;
        let blob_path = cache.blob_path(&blob.digest)?;
        pusher.push_blob(&Blob { digest: blob.digest.clone(), size: blob.size, path: blob_path }, None)?;
        let mut records = Vec::new();
        for name in RECORDS {
            let path = cache.root().join(name).join(format!("{}.json", key.as_hex()));
            let Ok(meta) = fs::metadata(&path) else { continue };
            if !meta.is_file() || meta.len() > MAX_RECORD {
                continue;
            }
            let bytes = fs::read(&path).map_err(super::io_err("reading", &path))?;
            let digest = sha256_bytes(&bytes);
            // A copy: the record may be rewritten while it is being sent.
            let copy = tmp.path().join(name);
            fs::write(&copy, &bytes).map_err(super::io_err("writing", &copy))?;
            pusher.push_blob(&Blob { digest: digest.clone(), size: bytes.len() as u64, path: copy }, None)?;
            records.push((name, digest, bytes.len() as u64));
        }
        let manifest = cache_manifest(blob, &records);
        pusher.put_manifest(&tag, &manifest, MEDIA_TYPE_MANIFEST, &sha256_bytes(&manifest))?;
        Ok(tag)
    }
}

/// A scratch directory under the cache's `tmp/`, named as the build's stages are (so a stale one
/// is cleaned like theirs).
fn scratch_dir(cache: &Cache) -> Result<tempfile::TempDir, RegistryError> {
    let dir = cache.root().join("tmp");
    fs::create_dir_all(&dir).map_err(super::io_err("creating", &dir))?;
    Ok(tempfile::Builder::new()
        .prefix("stage-")
        .tempdir_in(&dir)
        .map_err(super::io_err("creating a directory in", &dir))?)
}

/// The artifact manifest of a cached layer and its records (`(name, digest, size)`).
fn cache_manifest(blob: &LayerBlob, records: &[(&str, String, u64)]) -> Vec<u8> {
    // The layer's own annotations (an eStargz TOC digest) travel with it.
    let mut annotations = blob.annotations.clone();
    annotations.insert(ANNOTATION_DIFF_ID.to_owned(), blob.diff_id.clone());
    let mut layers = vec![serde_json::json!({
        "mediaType": blob.media_type,
        "digest": blob.digest,
        "size": blob.size,
        "annotations": annotations,
    })];
    for (name, digest, size) in records {
        layers.push(serde_json::json!({
            "mediaType": MEDIA_TYPE_RECORD,
            "digest": digest,
            "size": size,
            "annotations": { ANNOTATION_RECORD: name },
        }));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_TYPE_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": { "mediaType": MEDIA_TYPE_EMPTY, "digest": sha256_bytes(b"{}"), "size": 2 },
        "layers": layers,
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The layer a cache manifest names.
#[derive(Debug)]
struct CachedLayer {
    descriptor: Descriptor,
    digest: String,
    diff_id: String,
}

/// Reads a cache manifest: the layer (a known layer media type, a sha256 digest and `diff_id`)
/// and the records it carries (only names of [`RECORDS`], each at most [`MAX_RECORD`] bytes).
fn parse_manifest(
    what: &str,
    bytes: &[u8],
) -> Result<(CachedLayer, BTreeMap<&'static str, Descriptor>), RegistryError> {
    let bad = |reason: String| RegistryError::Manifest { what: what.to_string(), reason };
    let manifest: CacheManifest = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if manifest.artifact_type.as_deref() != Some(ARTIFACT_TYPE) {
        return Err(bad(format!(
            "not a stackbuild layer cache entry (artifactType {:?})",
            manifest.artifact_type
        )));
    }
    let mut layers = manifest.layers.into_iter();
    let descriptor = layers.next().ok_or_else(|| bad("no layer".into()))?;
    if Compression::from_media_type(&descriptor.media_type).is_none() {
        return Err(bad(format!("unsupported layer media type {}", descriptor.media_type)));
    }
    stackbuild_cache::sha256_hex(&descriptor.digest)?;
    let diff_id = descriptor
        .annotations
        .get(ANNOTATION_DIFF_ID)
        .filter(|d| d.starts_with("sha256:") && stackbuild_cache::sha256_hex(d).is_ok())
        .cloned()
        .ok_or_else(|| bad(format!("the layer has no valid {ANNOTATION_DIFF_ID} annotation")))?;
    let mut records = BTreeMap::new();
    for desc in layers {
        let name = desc.annotations.get(ANNOTATION_RECORD).map(String::as_str).unwrap_or_default();
        let Some(name) = RECORDS.iter().copied().find(|r| *r == name) else {
            tracing::debug!("{what}: ignoring an unknown record {name:?}");
            continue;
        };
        if desc.media_type != MEDIA_TYPE_RECORD || desc.size > MAX_RECORD {
            return Err(bad(format!("record {name}: {} of {} bytes", desc.media_type, desc.size)));
        }
        stackbuild_cache::sha256_hex(&desc.digest)?;
        records.insert(name, desc);
    }
    Ok((CachedLayer { digest: descriptor.digest.clone(), descriptor, diff_id }, records))
}

/// Decompresses the blob at `path` and checks its `diff_id`.
fn check_diff_id(path: &Path, layer: &CachedLayer) -> Result<(), RegistryError> {
    let what = || format!("layer {} (uncompressed)", layer.digest);
    let compression = Compression::from_media_type(&layer.descriptor.media_type).ok_or_else(|| {
        RegistryError::Manifest {
            what: what(),
            reason: format!("media type {}", layer.descriptor.media_type),
        }
    })?;
    let file = File::open(path).map_err(super::io_err("opening", path))?;
    let decoder = compression
        .decoder(BufReader::with_capacity(1 << 20, file))
        .map_err(super::io_err("reading", path))?;
    let (actual, _) =
        stackbuild_common::sha256_reader(decoder).map_err(super::io_err("decompressing", path))?;
    if actual == layer.diff_id {
        Ok(())
    } else {
        Err(RegistryError::DigestMismatch { what: what(), expected: layer.diff_id.clone(), actual })
    }
}

impl stackbuild_cache::RemoteLayers for RemoteCache {
    fn fetch(&self, cache: &Cache, key: &LayerKey) -> Option<LayerBlob> {
        self.fetch_layer(cache, key)
    }

    fn store(&self, cache: &Cache, key: &LayerKey, blob: &LayerBlob) {
        self.store_layer(cache, key, blob);
    }

    fn pulled(&self, digest: &str) -> bool {
        self.was_pulled(digest)
    }
}

#[cfg(test)]
mod tests;
