//! OCI image layouts, `docker load` archives, and reading layouts back.
//!
//! Everything written here is a function of its inputs only: every JSON document is built as
//! oci-spec's image types ([`spec`]) and written by [`stackbuild_common::to_vec`] (compact, keys
//! sorted), times come from the epoch, and archives have sorted entries with mtime 0, so the same
//! image always has the same manifest digest. See
//! <https://github.com/opencontainers/image-spec> (`image-layout.md`, `manifest.md`, `config.md`).
//!
//! [`write_archive`] writes an OCI layout in a tar *plus* the legacy `manifest.json` of
//! `docker save`, pointing at the same blobs: Docker 20.10 (Debian bookworm) only reads the
//! latter, skopeo and podman the former; Docker 25+ `docker save` produces the same shape.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

use stackbuild_cache::sha256_hex;
use stackbuild_common::{io_err, IoError};
use stackbuild_common::{sha256_bytes, LayerBlob};
use stackbuild_common::{unique_temp_name, write_atomic_in};

/// Media type of an OCI image manifest.
pub const MEDIA_TYPE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an OCI image index.
pub(crate) const MEDIA_TYPE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Media type of an OCI image config.
pub(crate) const MEDIA_TYPE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of a Docker schema 2 manifest (accepted when reading).
pub(crate) const MEDIA_TYPE_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Media type of a Docker manifest list (recognized when reading, to refuse it clearly).
pub(crate) const MEDIA_TYPE_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Annotation holding a tag in `index.json`.
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Annotation containerd and Docker 25+ use for the full image name in `index.json`.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";

/// Largest JSON document (index, manifest, config) read from a layout.
const MAX_JSON: u64 = 16 * 1024 * 1024;

/// Errors of image writing and reading.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A JSON document could not be parsed or written.
    #[error("JSON of {path}: {source}")]
    Json {
        /// The document.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// A blob does not match its descriptor.
    #[error("blob {path}: expected {expected}, found {actual}")]
    BlobMismatch {
        /// The blob.
        path: PathBuf,
        /// The digest or size expected.
        expected: String,
        /// The digest or size found.
        actual: String,
    },
    /// A digest is malformed.
    #[error(transparent)]
    Digest(#[from] stackbuild_cache::CacheError),
    /// No manifest with this tag in a layout.
    #[error("no image tagged {tag:?} in {dir} (tags: {available})")]
    TagNotFound {
        /// The layout.
        dir: PathBuf,
        /// The tag asked for.
        tag: String,
        /// The tags present.
        available: String,
    },
    /// A layout holds something this reader does not handle.
    #[error("{path}: unsupported {what}")]
    Unsupported {
        /// The document.
        path: PathBuf,
        /// What is unsupported.
        what: String,
    },
    /// A blob path resolves outside the layout directory.
    #[error("{path} escapes the layout {dir}")]
    Escapes {
        /// The layout.
        dir: PathBuf,
        /// The blob path.
        path: PathBuf,
    },
    /// The image's history does not match its layers.
    #[error("history has {history} non-empty entries but the image has {layers} layers")]
    HistoryMismatch {
        /// Entries of the history without `empty_layer`.
        history: usize,
        /// Layers of the image.
        layers: usize,
    },
    /// A tag or image name is malformed.
    #[error("invalid image reference {0:?}")]
    BadReference(String),
    /// oci-spec refused a document or value this writer built.
    #[error("{what}: {source}")]
    Spec {
        /// What was being built.
        what: String,
        /// The underlying error.
        #[source]
        source: oci_spec::OciSpecError,
    },
}

pub use archive::write_archive;
pub use archive::DockerSaveEntry;
pub(crate) use archive::{Archive, LayerFile};

/// `null` (as Docker writes for empty fields) reads as the default value.
fn null_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The platform of an image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// CPU architecture in Go's spelling (`amd64`, `arm64`).
    pub architecture: String,
    /// Operating system (`linux`).
    pub os: String,
    /// CPU variant (`v8` for arm64), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// The execution parameters of an image (`config` in the image config).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuntimeConfig {
    /// User (name or uid[:gid]) the process runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `NAME=value` environment entries.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Entrypoint argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Default arguments (argv when there is no entrypoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Labels.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Every other field of a base's config (`ExposedPorts`, `Volumes`, `StopSignal`,
    /// `ArgsEscaped`, `Shell`, `Healthcheck`, ...; image-spec `config.md`, Docker's image spec v1.2),
    /// kept as it is: an image built on a base keeps what it does not override. A sorted map, so
    /// the bytes written do not depend on the order the base listed them in.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `rootfs` of an image config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFs {
    /// Always `layers`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Digests of the uncompressed layer tars, base first.
    #[serde(default, deserialize_with = "null_default")]
    pub diff_ids: Vec<String>,
}

impl Default for RootFs {
    fn default() -> Self {
        Self { kind: "layers".to_string(), diff_ids: Vec::new() }
    }
}

/// One entry of an image's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// When (RFC 3339, from the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// What created the layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Free-form comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// True when the step produced no layer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub empty_layer: bool,
}

/// An OCI image config (`application/vnd.oci.image.config.v1+json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// When the image was created (RFC 3339, from the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// CPU architecture.
    pub architecture: String,
    /// Operating system.
    pub os: String,
    /// CPU variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The operating system's version (`os.version`, Windows images name their build here).
    #[serde(default, rename = "os.version", skip_serializing_if = "Option::is_none")]
    pub os_version: Option<String>,
    /// Required OS features (`os.features`).
    #[serde(
        default,
        rename = "os.features",
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub os_features: Vec<String>,
    /// Who made the image (`author`); a base's stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Execution parameters.
    #[serde(default, deserialize_with = "null_default")]
    pub config: RuntimeConfig,
    /// The layers' `diff_ids` ([`Image::new`] fills them in).
    #[serde(default)]
    pub rootfs: RootFs,
    /// One entry per build step.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<History>,
}

impl ImageConfig {
    /// The platform of this config.
    pub fn platform(&self) -> Platform {
        Platform {
            architecture: self.architecture.clone(),
            os: self.os.clone(),
            variant: self.variant.clone(),
        }
    }
}

/// A content descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the content.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// Annotations.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Platform (in an index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

impl Descriptor {
    fn new(media_type: &str, digest: String, size: u64) -> Self {
        Self {
            media_type: media_type.to_string(),
            digest,
            size,
            annotations: BTreeMap::new(),
            platform: None,
        }
    }
}

/// An image manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MEDIA_TYPE_MANIFEST`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layer blobs, base first.
    #[serde(default, deserialize_with = "null_default")]
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image index (`index.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// [`MEDIA_TYPE_INDEX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The manifests.
    #[serde(default, deserialize_with = "null_default")]
    pub manifests: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, deserialize_with = "null_default", skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image ready to be written: config, layer blobs on disk and manifest annotations.
#[derive(Clone, Debug)]
pub struct Image {
    /// The config; `rootfs.diff_ids` always match `layers`.
    config: ImageConfig,
    /// The layers, base first.
    layers: Vec<LayerBlob>,
    /// Manifest annotations (`org.opencontainers.image.*`).
    annotations: BTreeMap<String, String>,
}

/// The serialized documents of an [`Image`].
struct Documents {
    config: Vec<u8>,
    config_digest: String,
    manifest: Vec<u8>,
    manifest_digest: String,
}

impl Image {
    /// Assembles an image. `config.rootfs` is replaced by the layers' `diff_ids`. An empty
    /// `config.history` gets one entry per layer (dated `config.created`); a given history must
    /// have as many entries without `empty_layer` as there are layers (Docker checks this).
    pub fn new(
        mut config: ImageConfig,
        layers: Vec<LayerBlob>,
        annotations: BTreeMap<String, String>,
    ) -> Result<Self, OciError> {
        config.rootfs =
            RootFs { kind: "layers".into(), diff_ids: layers.iter().map(|l| l.diff_id.clone()).collect() };
        if config.history.is_empty() {
            config.history = layers
                .iter()
                .map(|_| History { created: config.created.clone(), ..History::default() })
                .collect();
        }
        let history = config.history.iter().filter(|h| !h.empty_layer).count();
        if history != layers.len() {
            return Err(OciError::HistoryMismatch { history, layers: layers.len() });
        }
        for layer in &layers {
            sha256_hex(&layer.digest)?;
            sha256_hex(&layer.diff_id)?;
        }
        Ok(Self { config, layers, annotations })
    }

    /// The config.
    pub fn config(&self) -> &ImageConfig {
        &self.config
    }

    /// The layers, base first.
    pub fn layers(&self) -> &[LayerBlob] {
        &self.layers
    }

    /// The manifest annotations.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }

    /// The manifest of this image.
    pub fn manifest(&self) -> Result<Manifest, OciError> {
        let config = self.config_json()?;
        Ok(self.manifest_for(&config))
    }

    /// The canonical config JSON (oci-spec's `ImageConfiguration` with the base's other `config`
    /// fields, through [`stackbuild_common::to_vec`]).
    pub fn config_json(&self) -> Result<Vec<u8>, OciError> {
        to_json("config", &spec::config(&self.config)?)
    }

    /// The canonical manifest JSON: the bytes [`Image::manifest_digest`] hashes.
    pub fn manifest_json(&self) -> Result<Vec<u8>, OciError> {
        Ok(self.documents()?.manifest)
    }

    fn manifest_for(&self, config_json: &[u8]) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: Some(MEDIA_TYPE_MANIFEST.to_string()),
            config: Descriptor::new(MEDIA_TYPE_CONFIG, sha256_bytes(config_json), config_json.len() as u64),
            layers: self
                .layers
                .iter()
                .map(|l| Descriptor {
                    annotations: l.annotations.clone(),
                    ..Descriptor::new(&l.media_type, l.digest.clone(), l.size)
                })
                .collect(),
            annotations: self.annotations.clone(),
        }
    }

    fn documents(&self) -> Result<Documents, OciError> {
        let config = self.config_json()?;
        let manifest = to_json("manifest", &spec::manifest(&self.manifest_for(&config))?)?;
        Ok(Documents {
            config_digest: sha256_bytes(&config),
            manifest_digest: sha256_bytes(&manifest),
            config,
            manifest,
        })
    }

    /// The digest of the manifest (the image's identity), `sha256:<hex>`.
    pub fn manifest_digest(&self) -> Result<String, OciError> {
        Ok(self.documents()?.manifest_digest)
    }

    /// The index descriptor of the manifest, with the platform and the given annotations.
    fn index_descriptor(&self, docs: &Documents, annotations: BTreeMap<String, String>) -> Descriptor {
        Descriptor {
            annotations,
            platform: Some(self.config.platform()),
            ..Descriptor::new(MEDIA_TYPE_MANIFEST, docs.manifest_digest.clone(), docs.manifest.len() as u64)
        }
    }
}

/// `index` as written into a layout: oci-spec's `ImageIndex`, canonical JSON.
pub(crate) fn index_json(index: &Index) -> Result<Vec<u8>, OciError> {
    to_json("image index", &spec::index(index)?)
}

/// A document as canonical JSON; `what` names it in an error.
fn to_json<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, OciError> {
    stackbuild_common::to_vec(value).map_err(|source| OciError::Json { path: what.into(), source })
}

const OCI_LAYOUT: &[u8] = br#"{"imageLayoutVersion":"1.0.0"}"#;

/// Checks a tag against the OCI `ref.name` grammar's character set (and keeps it out of paths).
fn check_tag(tag: &str) -> Result<(), OciError> {
    let ok = !tag.is_empty()
        && tag.len() <= 255
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:@+/".contains(&b))
        && tag.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(OciError::BadReference(tag.to_string()))
    }
}

/// The prefix of the temporary files a writer makes in a layout's root directory (they are
/// renamed into `blobs/sha256/` or over `index.json` once complete).
pub(crate) const TEMP_PREFIX: &str = ".stackbuild-tmp-";

/// `index.json` of a layout with no image yet.
const EMPTY_INDEX: &[u8] =
    br#"{"manifests":[],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}"#;

/// Copies `src` to `dest` unless an identical-size file is there: hardlink if possible, else a
/// copy, always through a temporary name in `tmp_dir` and a rename.
fn place_blob(src: &Path, dest: &Path, size: u64, tmp_dir: &Path) -> Result<(), OciError> {
    if fs::symlink_metadata(dest).is_ok_and(|m| m.is_file() && m.len() == size) {
        return Ok(());
    }
    let src_meta = fs::metadata(src).map_err(io_err("reading", src))?;
    if src_meta.len() != size {
        return Err(OciError::BlobMismatch {
            path: src.to_path_buf(),
            expected: format!("{size} bytes"),
            actual: format!("{} bytes", src_meta.len()),
        });
    }
    let tmp = tmp_dir.join(unique_temp_name(TEMP_PREFIX));
    let result = fs::hard_link(src, &tmp).or_else(|_| {
        let mut from = File::open(src)?;
        let mut to = File::options().write(true).create_new(true).open(&tmp)?;
        io::copy(&mut from, &mut to)?;
        to.sync_all()
    });
    let result = result.and_then(|()| fs::rename(&tmp, dest));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(|e| io_err("writing", dest)(e).into())
}

/// Removes temporary files a killed writer left in a layout: only names [`unique_temp_name`]
/// gave with [`TEMP_PREFIX`], an hour old (older versions wrote them into `blobs/sha256/`).
fn clean_layout_temps(dir: &Path) {
    for sub in [dir.to_path_buf(), dir.join("blobs").join("sha256")] {
        let Ok(entries) = fs::read_dir(&sub) else { continue };
        for entry in entries.flatten() {
            let ours = stackbuild_cache::is_temp_name(&entry.file_name().to_string_lossy(), TEMP_PREFIX);
            let file = entry.file_type().is_ok_and(|t| t.is_file());
            if ours && file && stackbuild_cache::modified_before(&entry, std::time::Duration::from_hours(1)) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// A directory of a layout, created when missing; anything else there (a symlink, which would
/// send blobs out of the layout, or a file) is refused.
fn layout_subdir(path: &Path) -> Result<(), OciError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(OciError::Unsupported {
            path: path.to_owned(),
            what: "layout entry that is not a directory".into(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(path).map_err(|e| io_err("creating", path)(e).into())
        }
        Err(e) => Err(io_err("reading", path)(e).into()),
    }
}

/// `index.json` as read for an update: the fields this writer knows in their order, and every
/// other field (`annotations`, `subject`, ...) kept.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIndex<E> {
    #[serde(default = "schema_version_2")]
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<E>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

fn schema_version_2() -> u32 {
    2
}

/// Writes `image` into the OCI image layout `dir` (created if needed) under `tag`; returns the
/// manifest digest.
///
/// Blobs first, then `oci-layout`, then `index.json` (each renamed into place), so the layout is
/// valid at every moment. Other tags already in `index.json` are kept; an entry with the same
/// tag is replaced.
pub fn write_layout(dir: &Path, image: &Image, tag: &str) -> Result<String, OciError> {
    write_layout_images(dir, std::slice::from_ref(image), tag)
}

/// Writes `images` (one per platform) into the OCI image layout `dir` under `tag`, as
/// [`write_layout`] does one. Several images become one image index blob whose descriptors carry
/// each image's platform, and `tag` names that index (what `docker pull`, `skopeo copy --all`
/// and containerd expect of a multi-platform image); returns the digest `tag` names: the index's,
/// or the only manifest's.
///
/// The layout is updated in place and is valid at every moment: a missing `oci-layout` and
/// `index.json` are written first (a directory this writer starts is a layout from then on),
/// then the blobs by content address (through temporary names in `dir`, renamed into
/// `blobs/sha256/` once complete; the nested index of a multi-platform image last among them),
/// and `index.json` is replaced atomically at the end, under an exclusive lock on `dir` so that
/// two builds into one layout do not lose each other's tags. Nothing is deleted: the other tags'
/// entries are kept with every field (keys in sorted order), and blobs only the replaced tag used
/// stay.
pub(crate) fn write_layout_images(dir: &Path, images: &[Image], tag: &str) -> Result<String, OciError> {
    check_tag(tag)?;
    if images.is_empty() {
        return Err(OciError::BadReference(format!("{tag} (no image to write)")));
    }
    fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    let guard = File::open(dir).map_err(io_err("opening", dir))?;
    guard.lock().map_err(io_err("locking", dir))?;
    let blobs = dir.join("blobs").join("sha256");
    layout_subdir(&dir.join("blobs"))?;
    layout_subdir(&blobs)?;
    clean_layout_temps(dir);
    let index_path = dir.join("index.json");
    let layout = dir.join("oci-layout");
    for (path, bytes) in [(&layout, OCI_LAYOUT), (&index_path, EMPTY_INDEX)] {
        match fs::symlink_metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                write_atomic_in(dir, path, bytes).map_err(io_err("writing", path))?;
            }
            Err(e) => return Err(io_err("reading", path)(e).into()),
        }
    }
    let write_small = |bytes: &[u8], digest: &str| -> Result<(), OciError> {
        let dest = blobs.join(sha256_hex(digest)?);
        if !fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64) {
            write_atomic_in(dir, &dest, bytes).map_err(io_err("writing", &dest))?;
        }
        Ok(())
    };
    let mut descriptors = Vec::with_capacity(images.len());
    for image in images {
        let docs = image.documents()?;
        for layer in &image.layers {
            let dest = blobs.join(sha256_hex(&layer.digest)?);
            place_blob(&layer.path, &dest, layer.size, dir)?;
        }
        write_small(&docs.config, &docs.config_digest)?;
        write_small(&docs.manifest, &docs.manifest_digest)?;
        descriptors.push(image.index_descriptor(&docs, BTreeMap::new()));
    }
    let mut top = if let [only] = descriptors.as_slice() {
        only.clone()
    } else {
        let nested = Index {
            schema_version: 2,
            media_type: Some(MEDIA_TYPE_INDEX.to_string()),
            manifests: descriptors,
            annotations: BTreeMap::new(),
        };
        let bytes = index_json(&nested)?;
        let digest = sha256_bytes(&bytes);
        write_small(&bytes, &digest)?;
        Descriptor::new(MEDIA_TYPE_INDEX, digest, bytes.len() as u64)
    };
    stackbuild_common::sync_dir(&blobs).map_err(io_err("syncing", &blobs))?;

    let old: RawIndex<serde_json::Value> = read_json(&index_path)?;
    // Other tags' entries are kept with every field; this tag's is written by oci-spec's type.
    let mut manifests: Vec<serde_json::Value> = old
        .manifests
        .into_iter()
        .filter(|d| {
            d.pointer("/annotations/org.opencontainers.image.ref.name").and_then(|v| v.as_str()) != Some(tag)
        })
        .collect();
    top.annotations.insert(ANNOTATION_REF_NAME.to_string(), tag.to_string());
    let digest = top.digest.clone();
    let ours = serde_json::to_value(spec::descriptor(&top)?)
        .map_err(|source| OciError::Json { path: index_path.clone(), source })?;
    manifests.push(ours);
    let index = RawIndex {
        schema_version: 2,
        media_type: Some(MEDIA_TYPE_INDEX.to_string()),
        manifests,
        other: old.other,
    };
    let json = to_json(&index_path.to_string_lossy(), &index)?;
    write_atomic_in(dir, &index_path, &json).map_err(io_err("writing", &index_path))?;
    drop(guard);
    Ok(digest)
}

/// Splits `name[:tag]` (the tag is after the last `:` that follows the last `/`); the tag
/// defaults to `latest`.
fn split_repo_tag(repo_tag: &str) -> Result<(&str, &str), OciError> {
    let bad = || OciError::BadReference(repo_tag.to_string());
    if repo_tag.contains('@') {
        return Err(bad());
    }
    let slash = repo_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match repo_tag[slash..].rfind(':') {
        Some(i) => (&repo_tag[..slash + i], &repo_tag[slash + i + 1..]),
        None => (repo_tag, "latest"),
    };
    // Path components are lowercase; only the first (a registry host) may carry `:port`.
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
    };
    let name_ok = name.split('/').enumerate().all(|(i, c)| match c.split_once(':') {
        Some((host, port)) => {
            i == 0
                && name.contains('/')
                && component_ok(host)
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => component_ok(c),
    });
    let tag_ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        && !tag.starts_with(['.', '-']);
    if name_ok && tag_ok {
        Ok((name, tag))
    } else {
        Err(bad())
    }
}

/// An image read back from an OCI layout.
#[derive(Clone, Debug)]
pub struct LayoutImage {
    /// Digest of the manifest.
    pub manifest_digest: String,
    /// The manifest.
    pub manifest: Manifest,
    /// The config.
    pub config: ImageConfig,
    /// The layers, base first, with `path` inside the layout and `diff_id` from the config.
    pub layers: Vec<LayerBlob>,
}

impl LayoutImage {
    /// The layers' descriptors, base first.
    pub fn layer_descriptors(&self) -> &[Descriptor] {
        &self.manifest.layers
    }
}

/// Reads a JSON file of at most [`MAX_JSON`] bytes.
fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, OciError> {
    let bytes = read_capped(path)?;
    serde_json::from_slice(&bytes).map_err(|source| OciError::Json { path: path.to_path_buf(), source })
}

/// Reads a document of a layout: a regular file only (a FIFO named `index.json` would block,
/// `/dev/zero` never end), at most [`MAX_JSON`] bytes.
fn read_capped(path: &Path) -> Result<Vec<u8>, OciError> {
    use stackbuild_common::InputError;
    stackbuild_common::read_capped(path, MAX_JSON, "OCI layout document").map_err(|e| match e {
        InputError::TooLarge { .. } => OciError::Unsupported {
            path: path.to_path_buf(),
            what: format!("document over {MAX_JSON} bytes"),
        },
        InputError::Io { source, .. } => OciError::Io(source),
        other @ InputError::NotRegular { .. } => {
            OciError::Unsupported { path: path.to_path_buf(), what: other.to_string() }
        }
    })
}

/// The path of a blob of the layout `dir` (whose canonical form is `root`), checked to be a
/// regular file that resolves inside the layout, of the descriptor's size.
fn layout_blob(dir: &Path, root: &Path, desc: &Descriptor) -> Result<PathBuf, OciError> {
    let path = dir.join("blobs").join("sha256").join(sha256_hex(&desc.digest)?);
    let real = fs::canonicalize(&path).map_err(io_err("resolving", &path))?;
    if !real.starts_with(root) {
        return Err(OciError::Escapes { dir: dir.to_path_buf(), path });
    }
    let meta = fs::metadata(&real).map_err(io_err("reading", &path))?;
    if !meta.is_file() {
        return Err(OciError::Unsupported { path, what: "blob that is not a regular file".into() });
    }
    if meta.len() != desc.size {
        return Err(OciError::BlobMismatch {
            path,
            expected: format!("{} bytes", desc.size),
            actual: format!("{} bytes", meta.len()),
        });
    }
    Ok(real)
}

/// Reads a small blob, checking its digest.
fn read_verified(dir: &Path, root: &Path, desc: &Descriptor) -> Result<Vec<u8>, OciError> {
    let path = layout_blob(dir, root, desc)?;
    let bytes = read_capped(&path)?;
    let actual = sha256_bytes(&bytes);
    if actual != desc.digest {
        return Err(OciError::BlobMismatch { path, expected: desc.digest.clone(), actual });
    }
    Ok(bytes)
}

/// Reads the image tagged `tag` from the OCI layout `dir` (`None`: the only image there).
///
/// Every blob path is derived from a validated digest and must resolve inside `dir`; the index,
/// manifest and config are size-capped and the manifest and config digest-checked. Layer blobs
/// are checked for size only (hash them with [`verify_layout_blob`] when it matters).
pub fn read_layout(dir: &Path, tag: Option<&str>) -> Result<LayoutImage, OciError> {
    read_layout_for(dir, tag, None)
}

/// A multi-platform image `tag` of the layout `dir`: the image index's exact bytes, its digest
/// and the platforms it lists, in order; `None` for a single image.
pub(crate) fn read_layout_index(dir: &Path, tag: Option<&str>) -> Result<Option<LayoutIndex>, OciError> {
    let root = fs::canonicalize(dir).map_err(io_err("resolving", dir))?;
    let index_path = dir.join("index.json");
    let index: Index = read_json(&index_path)?;
    let desc = pick_tag(dir, &index, tag)?;
    if desc.media_type != MEDIA_TYPE_INDEX {
        return Ok(None);
    }
    let bytes = read_verified(dir, &root, desc)?;
    let nested: Index = serde_json::from_slice(&bytes)
        .map_err(|source| OciError::Json { path: PathBuf::from(&desc.digest), source })?;
    let platforms = nested.manifests.iter().filter_map(|d| d.platform.clone()).collect();
    Ok(Some((bytes, desc.digest.clone(), platforms)))
}

/// A multi-platform image's index: its exact bytes, its digest and its platforms, in order.
pub(crate) type LayoutIndex = (Vec<u8>, String, Vec<Platform>);

fn pick_tag<'i>(dir: &Path, index: &'i Index, tag: Option<&str>) -> Result<&'i Descriptor, OciError> {
    let desc = match tag {
        Some(tag) => index
            .manifests
            .iter()
            .find(|d| d.annotations.get(ANNOTATION_REF_NAME).map(String::as_str) == Some(tag)),
        None if index.manifests.len() == 1 => index.manifests.first(),
        None => None,
    };
    desc.ok_or_else(|| {
        let names: Vec<_> =
            index.manifests.iter().filter_map(|d| d.annotations.get(ANNOTATION_REF_NAME).cloned()).collect();
        OciError::TagNotFound {
            dir: dir.to_path_buf(),
            tag: tag.unwrap_or("<only image>").to_string(),
            available: if names.is_empty() { "none".to_string() } else { names.join(", ") },
        }
    })
}

/// [`read_layout`] for one `platform` of a multi-platform image (an image index, one level deep);
/// a single image is returned whatever its platform. Without `platform`, an index with more than
/// one image is an error naming its platforms.
pub fn read_layout_for(
    dir: &Path,
    tag: Option<&str>,
    platform: Option<&Platform>,
) -> Result<LayoutImage, OciError> {
    let root = fs::canonicalize(dir).map_err(io_err("resolving", dir))?;
    let index_path = dir.join("index.json");
    let index: Index = read_json(&index_path)?;
    let mut desc = pick_tag(dir, &index, tag)?.clone();
    if desc.media_type == MEDIA_TYPE_INDEX || desc.media_type == MEDIA_TYPE_DOCKER_LIST {
        let nested: Index = serde_json::from_slice(&read_verified(dir, &root, &desc)?)
            .map_err(|source| OciError::Json { path: PathBuf::from(&desc.digest), source })?;
        let same = |d: &&Descriptor| {
            d.platform.as_ref().is_some_and(|p| {
                platform.is_some_and(|want| p.os == want.os && p.architecture == want.architecture)
            })
        };
        let chosen = match (platform, nested.manifests.as_slice()) {
            (None, [only]) => Some(only),
            (None, _) => None,
            (Some(_), list) => list.iter().find(same),
        };
        let Some(chosen) = chosen else {
            let listed: Vec<String> = nested
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref().map(|p| format!("{}/{}", p.os, p.architecture)))
                .collect();
            return Err(OciError::Unsupported {
                path: index_path,
                what: format!(
                    "image index {} without {} (it holds {})",
                    desc.digest,
                    platform.map_or_else(
                        || "a platform chosen".to_owned(),
                        |p| format!("{}/{}", p.os, p.architecture)
                    ),
                    listed.join(", ")
                ),
            });
        };
        desc = chosen.clone();
    }
    let desc = &desc;
    let manifest_bytes = read_verified(dir, &root, desc)?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|source| OciError::Json { path: PathBuf::from(&desc.digest), source })?;
    match manifest.media_type.as_deref() {
        None | Some(MEDIA_TYPE_MANIFEST | MEDIA_TYPE_DOCKER_MANIFEST) => {}
        Some(other) => {
            return Err(OciError::Unsupported {
                path: PathBuf::from(&desc.digest),
                what: format!("manifest type {other}"),
            })
        }
    }
    let config_bytes = read_verified(dir, &root, &manifest.config)?;
    let config: ImageConfig = serde_json::from_slice(&config_bytes)
        .map_err(|source| OciError::Json { path: PathBuf::from(&manifest.config.digest), source })?;
    if config.rootfs.diff_ids.len() != manifest.layers.len() {
        return Err(OciError::Unsupported {
            path: PathBuf::from(&manifest.config.digest),
            what: format!(
                "config with {} diff_ids for {} layers",
                config.rootfs.diff_ids.len(),
                manifest.layers.len()
            ),
        });
    }
    let mut layers = Vec::with_capacity(manifest.layers.len());
    for (layer, diff_id) in manifest.layers.iter().zip(&config.rootfs.diff_ids) {
        sha256_hex(diff_id)?;
        layers.push(LayerBlob {
            digest: layer.digest.clone(),
            diff_id: diff_id.clone(),
            size: layer.size,
            media_type: layer.media_type.clone(),
            annotations: layer.annotations.clone(),
            path: layout_blob(dir, &root, layer)?,
        });
    }
    Ok(LayoutImage { manifest_digest: desc.digest.clone(), manifest, config, layers })
}

/// Re-hashes a layer blob read by [`read_layout`].
pub fn verify_layout_blob(blob: &LayerBlob) -> Result<(), OciError> {
    let file = File::open(&blob.path).map_err(io_err("opening", &blob.path))?;
    let (actual, _) =
        stackbuild_common::sha256_reader(BufReader::new(file)).map_err(io_err("reading", &blob.path))?;
    if actual == blob.digest {
        Ok(())
    } else {
        Err(OciError::BlobMismatch { path: blob.path.clone(), expected: blob.digest.clone(), actual })
    }
}

mod archive;
mod spec;
#[cfg(test)]
mod tests;
