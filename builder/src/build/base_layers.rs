//! The base's layers: none (`scratch`), one built by mmdebstrap, those of an OCI layout or a
//! registry image as they are, or those imported from a `docker save` archive or the daemon.

// Every step returns the build's one error type, as the rest of `build` does; its size is
// that type's concern (clippy's `result_large_err`), not each step's.
#![allow(clippy::result_large_err)]

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use stackcontract::image::Component;

use super::platform::PlatformBuilder;
use super::{debian_arch, must_verify, registry_client, tempdir, BuildError, BuildOptions};
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::BaseFacts;
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_image::{DebianBase, Encoding};
use stackbuild_image::{History, ImageConfig, RuntimeConfig};
use stackbuild_recipe::{Base, Bootstrap, Recipe};

/// The inputs of the layers imported from an image archive or the Docker daemon: their key
/// (`PlatformBuilder::imported_base`).
#[derive(Debug, serde::Serialize)]
struct BaseImportKey<'a> {
    /// The image's identity: the archive's digest, or the daemon's image ID.
    identity: &'a str,
    /// Every mtime of the transcoded layers.
    epoch: u64,
    /// How each transcoded layer becomes its blob.
    encoding: Encoding,
}

impl BaseImportKey<'_> {
    const KIND: &'static str = "base-import";
}

/// What the base gives the build besides its layers.
#[derive(Default)]
pub(super) struct BaseParts {
    /// The runtime configuration the image starts from.
    pub(super) config: RuntimeConfig,
    /// The image-level fields of an OCI base that our build does not decide: kept.
    pub(super) image: ImageConfig,
    /// What the base has installed.
    pub(super) facts: BaseFacts,
    /// The layer whose interpreter compiles the bytecode (a Debian base's only layer).
    pub(super) interpreter: Option<LayerBlob>,
}

/// What the recipe's Debian or Ubuntu base `b` asks mmdebstrap for, on `platform`.
pub(super) fn debian_base(
    recipe: &Recipe,
    b: &Bootstrap,
    platform: Platform,
    cache: &Cache,
) -> Result<DebianBase, BuildError> {
    Ok(DebianBase {
        distribution: b.distro.as_str().to_owned(),
        suite: b.suite.clone(),
        packages: b
            .packages
            .iter()
            .map(|p| p.version.as_ref().map_or_else(|| p.name.clone(), |v| format!("{}={v}", p.name)))
            .collect(),
        mirror: b.mirror.clone(),
        variant: b.variant.clone(),
        architecture: debian_arch(platform).to_owned(),
        keyring: super::archive_keyring(recipe, b, cache)?,
    })
}

impl PlatformBuilder<'_> {
    /// Adds the base's layers and components.
    pub(super) fn base_layers(&mut self) -> Result<BaseParts, BuildError> {
        match &self.recipe.base {
            Base::Scratch => Ok(BaseParts::default()),
            Base::Bootstrap(b) => self.bootstrap_base(b),
            Base::Oci { .. } | Base::Registry { .. } => self.layout_base(),
            Base::Archive { .. } | Base::Docker { .. } => self.imported_base(),
        }
    }

    /// A Debian or Ubuntu base built by mmdebstrap: one layer.
    fn bootstrap_base(&mut self, b: &Bootstrap) -> Result<BaseParts, BuildError> {
        let (platform, cache, out, opts, epoch, compression) =
            (self.platform, self.cache, self.out, self.opts, self.epoch, self.compression);
        let debian = debian_base(self.recipe, b, platform, cache)?;
        tracing::info!(
            "base: {} {} with {} package(s)",
            debian.distribution,
            debian.suite,
            debian.packages.len()
        );
        let mut prepared = debian.prepare(cache, epoch, compression)?;
        if prepared.cached && must_verify(&prepared.layer, out, opts) {
            if let Err(e) = cache.verify_blob(&prepared.layer.digest) {
                tracing::warn!("{e}; building the base again");
                cache.remove_blob(&prepared.layer.digest)?;
                prepared = debian.prepare(cache, epoch, compression)?;
            }
        }
        let facts = prepared.facts;
        self.components.push(Component {
            kind: "base".into(),
            name: format!("{} {}", debian.distribution, debian.suite),
            version: String::new(),
            source: format!("mmdebstrap --variant={}", debian.variant),
            sha256: prepared.layer.diff_id.trim_start_matches("sha256:").to_owned(),
        });
        self.components.extend(facts.packages.iter().map(|(name, version)| Component {
            kind: "deb".into(),
            name: name.clone(),
            version: version.clone(),
            source: format!("{}:{}", debian.distribution, debian.suite),
            sha256: String::new(),
        }));
        let interpreter = Some(prepared.layer.clone());
        self.push(
            "base",
            format!("stackbuild: {} {} (mmdebstrap)", debian.distribution, debian.suite),
            prepared.layer,
            !prepared.cached,
        );
        Ok(BaseParts { facts, interpreter, ..BaseParts::default() })
    }

    /// An OCI layout's or a registry's image: its layers go into the image as they are.
    fn layout_base(&mut self) -> Result<BaseParts, BuildError> {
        let (recipe, platform, cache, opts) = (self.recipe, self.platform, self.cache, self.opts);
        let (path, tag) = match &recipe.base {
            Base::Oci { path, tag } => (path.clone(), tag.clone()),
            Base::Registry { reference } => {
                (pull_base(reference, platform, cache, opts)?, Some("base".to_owned()))
            }
            _ => unreachable!("matched by the caller"),
        };
        let (path, tag) = (&path, &tag);
        let image = stackbuild_image::read_layout(path, tag.as_deref())?;
        // The layers go into the image as they are: each is checked like an archive base's
        // (entry names, links, whiteouts) and against its digest and diff_id first.
        stackbuild_image::check_layout_layers(&image.layers, cache, &path.display().to_string())?;
        let parts = BaseParts {
            config: image.config.config.clone(),
            image: image.config.clone(),
            ..BaseParts::default()
        };
        self.components.push(Component {
            kind: "base".into(),
            name: path.display().to_string(),
            version: tag.clone().unwrap_or_default(),
            source: "oci-layout".into(),
            sha256: image.manifest_digest.trim_start_matches("sha256:").to_owned(),
        });
        let history: Vec<History> = image.config.history.iter().filter(|h| !h.empty_layer).cloned().collect();
        for (i, mut blob) in image.layers.into_iter().enumerate() {
            // Docker v2 layers are the same bytes under another name; an OCI manifest
            // names them the OCI way.
            if let Some(c) = Compression::from_media_type(&blob.media_type) {
                c.media_type().clone_into(&mut blob.media_type);
            }
            let by = history.get(i).and_then(|h| h.created_by.clone()).unwrap_or_else(|| "base layer".into());
            self.push("base", by, blob, false);
        }
        Ok(parts)
    }

    /// A `docker save` archive's or the Docker daemon's image: its layers imported (checked
    /// and recompressed) once per identity and epoch.
    fn imported_base(&mut self) -> Result<BaseParts, BuildError> {
        let (recipe, cache, epoch, compression) = (self.recipe, self.cache, self.epoch, self.compression);
        let tmp = tempdir(cache)?;
        let (identity, name) = match &recipe.base {
            Base::Archive { path } => (stackbuild_image::archive_identity(path)?, path.display().to_string()),
            Base::Docker { reference } => (stackbuild_image::image_id(reference)?, reference.clone()),
            _ => unreachable!("matched by the caller"),
        };
        let inputs = BaseImportKey { identity: &identity, epoch, encoding: Encoding::of(compression) };
        let key = LayerKey::of(BaseImportKey::KIND, &inputs);
        let imported = if let Some(imported) = stackbuild_image::cached_import(&key, cache) {
            imported
        } else {
            let archive = match &recipe.base {
                Base::Archive { path } => path.clone(),
                Base::Docker { reference } => {
                    let file = tmp.path().join("image.tar");
                    stackbuild_image::export_image(reference, &file)?;
                    file
                }
                _ => unreachable!("matched by the caller"),
            };
            stackbuild_image::import_archive(&archive, &key, cache, epoch, compression)?
        };
        self.components.push(Component {
            kind: "base".into(),
            name: name.clone(),
            version: String::new(),
            source: recipe.base.kind().to_owned(),
            sha256: identity.trim_start_matches("sha256:").to_owned(),
        });
        for blob in imported.layers {
            self.push("base", format!("base layer of {name}"), blob, false);
        }
        Ok(BaseParts { config: imported.config, ..BaseParts::default() })
    }
}

/// Pulls a `registry = "REF"` base into the cache (every blob verified by digest) and returns
/// the layout it landed in.
fn pull_base(
    reference: &str,
    platform: Platform,
    cache: &Cache,
    opts: &BuildOptions,
) -> Result<PathBuf, BuildError> {
    let src = stackbuild_image::Reference::parse(reference)?;
    let dir = cache.root().join("pulls").join(hex::encode(Sha256::digest(reference.as_bytes())));
    let pulled = stackbuild_image::pull_with(
        &registry_client(opts),
        &src,
        &dir,
        &stackbuild_image::PullOptions {
            platform: stackbuild_image::Platform {
                architecture: platform.architecture().to_owned(),
                os: platform.os().to_owned(),
                variant: None,
            },
            layout_tag: Some("base"),
        },
    )?;
    tracing::info!(
        "base {reference}: pulled {} ({} blob(s) downloaded)",
        pulled.pinned,
        pulled.blobs_downloaded
    );
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_of_an_imported_base_is_part_of_its_key() {
        let identity = format!("sha256:{}", "3c".repeat(32));
        let inputs =
            BaseImportKey { identity: &identity, epoch: 0, encoding: Encoding::of(Compression::Gzip) };
        stackbuild_cache::assert_every_input_changes_key(
            BaseImportKey::KIND,
            &inputs,
            &["identity", "epoch", "encoding"],
        );
    }
}
