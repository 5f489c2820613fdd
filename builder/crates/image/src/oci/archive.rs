//! `docker load` archives: an OCI layout in a tar *plus* the legacy `manifest.json` of `docker
//! save`, pointing at the same blobs. Docker 20.10 (Debian bookworm) reads only the latter,
//! skopeo and podman the former; Docker 25+ `docker save` produces the same shape.
//!
//! An [`Archive`] is the list of its members; it is written to a file ([`write_archive`]) or to
//! any writer, such as the request body that streams it into the Docker daemon
//! ([`crate::load`]), which then never exists as a file. Entries are sorted, mtime 0,
//! root-owned, so the same image always gives the same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    null_default, split_repo_tag, to_json, Image, Index, OciError, ANNOTATION_CONTAINERD_NAME,
    ANNOTATION_REF_NAME, MEDIA_TYPE_INDEX, OCI_LAYOUT,
};
use stackbuild_cache::sha256_hex;
use stackbuild_common::io_err;
use stackbuild_common::unique_temp_name;
use stackbuild_common::LayerBlob;

/// One entry of `docker save`'s `manifest.json` (Docker's image spec v1.2, "Combined Image JSON +
/// Filesystem Changeset Format", <https://github.com/moby/docker-image-spec/blob/main/spec.md>):
/// written into archives, read from base and `affinity` archives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DockerSaveEntry {
    /// The config's member name (`blobs/sha256/<hex>`, or `<hex>.json` before Docker 25).
    pub config: String,
    /// `name:tag`s of the image (absent or `null` for an untagged one).
    #[serde(default, deserialize_with = "null_default")]
    pub repo_tags: Vec<String>,
    /// The layers' member names, base first.
    pub layers: Vec<String>,
}

/// The content of an archive member.
#[derive(Clone, Debug)]
enum Member {
    Bytes(Vec<u8>),
    /// A blob file of the cache, of this size.
    File(PathBuf, u64),
}

/// The file a Docker archive holds for a layer. Docker's loader reads a layer's file whatever
/// its name, inflates it if it is compressed and checks what it read against the config's
/// `diff_ids` (`image/tarexport/load.go` in moby); an uncompressed tar spares it the inflating.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerFile<'a> {
    /// The layer's blob digest (what [`Archive::without_layers`] names it by).
    pub blob: &'a str,
    /// The digest of the file's bytes, which names it in the archive: the blob digest, or the
    /// `diff_id` for the uncompressed tar.
    pub digest: &'a str,
    /// Where the file is.
    pub path: &'a Path,
    /// Its size.
    pub size: u64,
}

impl<'a> LayerFile<'a> {
    /// The layer's blob.
    pub(crate) fn blob(layer: &'a LayerBlob) -> Self {
        Self { blob: &layer.digest, digest: &layer.digest, path: &layer.path, size: layer.size }
    }
}

/// The members of an image archive, by name (the order they are written in).
#[derive(Clone, Debug)]
pub(crate) struct Archive {
    members: BTreeMap<String, Member>,
    /// The layer members, by blob digest.
    layers: BTreeMap<String, String>,
    manifest_digest: String,
}

/// `blobs/sha256/<hex>`: where an archive holds the blob `digest`.
fn blob_name(digest: &str) -> Result<String, OciError> {
    Ok(format!("blobs/sha256/{}", sha256_hex(digest)?))
}

impl Archive {
    /// The archive of `image`, named `repo_tag` (`name:tag`; tag `latest` if missing): its OCI
    /// layout and Docker's `manifest.json`.
    pub(crate) fn of(image: &Image, repo_tag: &str) -> Result<Self, OciError> {
        let (name, tag) = split_repo_tag(repo_tag)?;
        let full = format!("{name}:{tag}");
        let docs = image.documents()?;
        let annotations = BTreeMap::from([
            (ANNOTATION_CONTAINERD_NAME.to_string(), full.clone()),
            (ANNOTATION_REF_NAME.to_string(), tag.to_string()),
        ]);
        let index = Index {
            schema_version: 2,
            media_type: Some(MEDIA_TYPE_INDEX.to_string()),
            manifests: vec![image.index_descriptor(&docs, annotations)],
            annotations: BTreeMap::new(),
        };
        let files: Vec<LayerFile<'_>> = image.layers.iter().map(LayerFile::blob).collect();
        let mut archive = Self::docker(docs.config, &files, vec![full])?;
        archive.manifest_digest.clone_from(&docs.manifest_digest);
        let members = &mut archive.members;
        members.insert(blob_name(&docs.manifest_digest)?, Member::Bytes(docs.manifest));
        members
            .insert("index.json".into(), Member::Bytes(to_json("index.json", &super::spec::index(&index)?)?));
        members.insert("oci-layout".into(), Member::Bytes(OCI_LAYOUT.to_vec()));
        Ok(archive)
    }

    /// What Docker's classic image store reads and nothing more: the config, `manifest.json`
    /// and each layer's file (its blob or its uncompressed tar). The manifest digest of such an
    /// archive is empty.
    pub(crate) fn docker(
        config: Vec<u8>,
        layers: &[LayerFile<'_>],
        repo_tags: Vec<String>,
    ) -> Result<Self, OciError> {
        let config_name = blob_name(&stackbuild_common::sha256_bytes(&config))?;
        let mut members = BTreeMap::new();
        let mut names = BTreeMap::new();
        // A layer used twice is stored once.
        for layer in layers {
            let name = blob_name(layer.digest)?;
            members.insert(name.clone(), Member::File(layer.path.to_owned(), layer.size));
            names.insert(layer.blob.to_owned(), name);
        }
        let legacy = [DockerSaveEntry {
            config: config_name.clone(),
            repo_tags,
            layers: layers.iter().map(|l| blob_name(l.digest)).collect::<Result<_, _>>()?,
        }];
        members.insert("manifest.json".into(), Member::Bytes(to_json("manifest.json", &legacy)?));
        members.insert(config_name, Member::Bytes(config));
        Ok(Self { members, layers: names, manifest_digest: String::new() })
    }

    /// Leaves out the files of these layers (blob digests): the daemon it is for has them.
    #[must_use]
    pub(crate) fn without_layers(mut self, digests: &BTreeSet<String>) -> Self {
        for digest in digests {
            if let Some(name) = self.layers.remove(digest) {
                self.members.remove(&name);
            }
        }
        self
    }

    /// Writes the archive as a tar to `out`; errors name `what` (the file, or the daemon).
    pub(crate) fn write_to(&self, out: impl Write, what: &Path) -> Result<(), OciError> {
        let mut builder = tar::Builder::new(out);
        let header = |ty: tar::EntryType, mode: u32, size: u64| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(ty);
            h.set_mode(mode);
            h.set_size(size);
            h.set_mtime(0);
            h.set_uid(0);
            h.set_gid(0);
            h
        };
        let writing = || io_err("writing", what);
        for dir_name in ["blobs", "blobs/sha256"] {
            let mut h = header(tar::EntryType::Directory, 0o755, 0);
            builder.append_data(&mut h, dir_name, io::empty()).map_err(writing())?;
        }
        for (name, member) in &self.members {
            match member {
                Member::Bytes(bytes) => {
                    let mut h = header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
                    builder.append_data(&mut h, name, bytes.as_slice()).map_err(writing())?;
                }
                Member::File(path, size) => {
                    let f = File::open(path).map_err(io_err("opening", path))?;
                    let actual = f.metadata().map_err(io_err("reading", path))?.len();
                    if actual != *size {
                        return Err(OciError::BlobMismatch {
                            path: path.clone(),
                            expected: format!("{size} bytes"),
                            actual: format!("{actual} bytes"),
                        });
                    }
                    let mut h = header(tar::EntryType::Regular, 0o644, *size);
                    builder.append_data(&mut h, name, f.take(*size)).map_err(writing())?;
                }
            }
        }
        builder.into_inner().and_then(|mut out| out.flush()).map_err(writing())?;
        Ok(())
    }
}

/// Writes `image` as a tar archive at `file` that `docker load` (20.10 and later), `skopeo copy
/// oci-archive:` and `podman load` accept, named `repo_tag` (`name:tag`; tag `latest` if
/// missing); returns the manifest digest.
///
/// It is written to a unique temporary name next to `file` (`.<name>.stackbuild-tmp-*`, never
/// another file of that directory) and renamed over it, as `docker save -o` does; errors name
/// `file`.
pub fn write_archive(file: &Path, image: &Image, repo_tag: &str) -> Result<String, OciError> {
    let archive = Archive::of(image, repo_tag)?;
    // Replacing a regular file is what writing an archive means; a directory, a symlink or a
    // device there is the user's and stays.
    if let Ok(meta) = fs::symlink_metadata(file) {
        if !meta.is_file() {
            return Err(OciError::Unsupported {
                path: file.to_owned(),
                what: format!("archive path: {} is there", stackbuild_common::kind_of(meta.file_type())),
            });
        }
    }
    let dir = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let prefix = archive_temp_prefix(file);
    clean_archive_temps(dir, &prefix);
    let tmp = dir.join(unique_temp_name(&prefix));
    // Errors name the archive the user asked for; the temporary name is ours.
    let user = |op: &'static str| io_err(op, file);
    let out = File::options().write(true).create_new(true).open(&tmp).map_err(user("creating"))?;
    // Held while writing: a later build removes only a leftover whose writer is gone.
    out.try_lock().map_err(|e| user("locking")(e.into()))?;
    let result = (|| -> Result<(), OciError> {
        archive.write_to(io::BufWriter::with_capacity(1 << 20, &out), file)?;
        out.sync_all().map_err(user("syncing"))?;
        fs::rename(&tmp, file).map_err(user("writing"))?;
        stackbuild_common::sync_dir(dir).map_err(|e| io_err("syncing", dir)(e).into())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| archive.manifest_digest)
}

/// `.<archive name>.stackbuild-tmp-`: the temporary names of an archive being written.
fn archive_temp_prefix(file: &Path) -> String {
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Short enough that the stamp still fits NAME_MAX (255 bytes).
    let name: String = name.chars().take(100).collect();
    format!(".{name}.stackbuild-tmp-")
}

/// Removes archives a killed build left half-written next to the final name: files named with
/// `prefix` by [`unique_temp_name`] that no writer holds locked, a minute old.
fn clean_archive_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let ours = stackbuild_cache::is_temp_name(&entry.file_name().to_string_lossy(), prefix);
        if !ours || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let unlocked = File::open(entry.path()).is_ok_and(|f| f.try_lock().is_ok());
        if unlocked && stackbuild_cache::modified_before(&entry, std::time::Duration::from_mins(1)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}
