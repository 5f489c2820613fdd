//! `--load` while the build runs: each layer goes into the Docker daemon as soon as it is
//! written, so that the daemon unpacks one layer while the build writes the next, instead of
//! unpacking the whole image after the build (measured on `recipes/dreamzero.toml`: 52 s after a
//! 97 s build, docs/benchmarks.md).
//!
//! The daemon's API loads images, not layers, so the layers written so far go in as an
//! untagged image of their own: its config lists their `diff_ids` and nothing else, and it
//! carries the label [`PARTIAL_LABEL`]. Docker's loader (`image/tarexport/load.go` in moby)
//! registers a layer only when its chain ID is missing and reads the layer's file only then, so
//! each load after the first sends only the layers written since; the last one sends the real
//! config and manifest under the image's name, without the layers already there. Then the
//! partial images are removed; their layers stay, held by the image. A build that fails (the
//! audit included) removes them too, and the daemon drops the layers; a killed build's are
//! removed by the next `--load` of the same image (or `docker image prune --filter
//! label=io.stackbuild.partial`). Anything that goes wrong on the way falls back to sending
//! the whole image at the end, as `docker load` would.
//!
//! A layer built in this run goes in as its uncompressed tar when the build kept a copy
//! ([`super::TarSpool`]); a reused one as its blob.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::{describe, image_layers, Daemon, LoadError, SpooledTar, TarSpool};
use crate::oci::{Archive, Image, LayerFile};
use stackbuild_cache::Cache;
use stackbuild_common::Platform;
use stackbuild_common::{sha256_bytes, LayerBlob};

/// The label of the untagged images holding the layers loaded so far; its value is the image's
/// `name:tag`.
pub(super) const PARTIAL_LABEL: &str = "io.stackbuild.partial";

/// Loads an image into the local Docker daemon layer by layer as the build writes them.
pub struct Loader {
    queue: Option<mpsc::Sender<(LayerBlob, Option<SpooledTar>)>>,
    worker: Option<JoinHandle<Worker>>,
    reference: String,
}

/// The thread that talks to the daemon, and what it has done.
struct Worker {
    daemon: Daemon,
    reference: String,
    platform: Platform,
    /// Where spools go.
    cache: Cache,
    /// The image's layers so far, base first.
    chain: Vec<LayerBlob>,
    /// Uncompressed tars of layers of `chain` not loaded yet, by blob digest.
    tars: HashMap<String, SpooledTar>,
    /// How many of `chain` the daemon holds.
    in_daemon: usize,
    /// The `diff_ids` of the image the daemon had under this name before: a common prefix of
    /// them and `chain` is there already.
    present: Vec<String>,
    /// The partial images created.
    partials: Vec<String>,
    /// A partial load failed: the rest waits for the end.
    failed: bool,
}

impl Loader {
    /// Connects to the daemon (failing now rather than after the build) and starts the thread
    /// that loads the layers of `reference`'s image for `platform`; spools go into `cache`.
    pub fn start(reference: &str, platform: Platform, cache: &Cache) -> Result<Self, LoadError> {
        let daemon = Daemon::connect(Path::new(reference))?;
        let mut worker = Worker {
            present: image_layers(&daemon, reference),
            daemon,
            reference: reference.to_owned(),
            platform,
            cache: cache.clone(),
            chain: Vec::new(),
            tars: HashMap::new(),
            in_daemon: 0,
            partials: Vec::new(),
            failed: false,
        };
        worker.remove_leftovers();
        let (tx, rx) = mpsc::channel::<(LayerBlob, Option<SpooledTar>)>();
        let handle = std::thread::Builder::new()
            .name("load".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    // Layers written while the last load ran go in together.
                    for (blob, tar) in std::iter::once(first).chain(rx.try_iter()) {
                        worker.add(blob, tar);
                    }
                    worker.load_written();
                }
                worker
            })
            .map_err(|source| stackbuild_common::IoError {
                op: "starting the loader for",
                path: reference.into(),
                source,
            })?;
        Ok(Self { queue: Some(tx), worker: Some(handle), reference: reference.to_owned() })
    }

    /// The build wrote (or reused) the next layer of the image; `tar` is its uncompressed tar
    /// if the build kept one.
    pub fn layer(&self, blob: &LayerBlob, tar: Option<SpooledTar>) {
        if let Some(queue) = &self.queue {
            // A worker that is gone failed; `finish` then loads everything.
            let _ = queue.send((blob.clone(), tar));
        }
    }

    /// Loads the rest of `image` under its name (what the daemon does not hold yet, its config
    /// and manifest) and removes the partial images; returns what the daemon reported.
    pub fn finish(mut self, image: &Image) -> Result<Vec<String>, LoadError> {
        let Some(worker) = self.stop() else {
            return Err(LoadError::Io(stackbuild_common::IoError {
                op: "loading",
                path: self.reference.clone().into(),
                source: std::io::Error::other("the loader thread panicked"),
            }));
        };
        let result = worker.load_image(image);
        worker.remove_partials();
        result
    }

    fn stop(&mut self) -> Option<Worker> {
        drop(self.queue.take());
        self.worker.take().and_then(|w| w.join().ok())
    }
}

impl Drop for Loader {
    /// A build that stops before [`Loader::finish`] leaves nothing in the daemon.
    fn drop(&mut self) {
        if let Some(worker) = self.stop() {
            worker.remove_partials();
        }
    }
}

impl Worker {
    /// Appends a layer to the chain.
    fn add(&mut self, blob: LayerBlob, tar: Option<SpooledTar>) {
        if let Some(tar) = tar.filter(|t| t.diff_id == blob.diff_id && !self.failed) {
            self.tars.insert(blob.digest.clone(), tar);
        }
        self.chain.push(blob);
    }

    /// Loads the layers written so far as a partial image.
    fn load_written(&mut self) {
        let n = self.chain.len();
        let known = self.chain.iter().zip(&self.present).take_while(|(l, d)| l.diff_id == **d).count();
        let from = self.in_daemon.max(known).min(n);
        if self.failed || from == n {
            self.in_daemon = from;
            self.tars.clear();
            return;
        }
        for layer in &self.chain[from..] {
            if !self.tars.contains_key(&layer.digest) {
                if let Some(tar) = TarSpool::of_zstd_blob(&self.cache, layer) {
                    self.tars.insert(layer.digest.clone(), tar);
                }
            }
        }
        let uncompressed = self.tars.len();
        let result = self.partial_config().and_then(|config| {
            let id = sha256_bytes(&config);
            let files: Vec<LayerFile<'_>> = self.chain.iter().map(|l| self.file(l)).collect();
            let archive =
                Archive::docker(config, &files, Vec::new())?.without_layers(&skip(&self.chain, from));
            self.daemon.load(&archive, &describe(&self.reference, Some(n)))?;
            Ok(id)
        });
        // Loaded or not, the tars are not needed again: the end sends blobs.
        self.tars.clear();
        match result {
            Ok(id) => {
                tracing::debug!(
                    "docker holds layers {}..{n} of {} ({id}; {uncompressed} sent as uncompressed tars)",
                    from + 1,
                    self.reference
                );
                self.partials.push(id);
                self.in_daemon = n;
            }
            Err(e) => {
                tracing::warn!("loading layers into Docker as they are written failed ({e}); the image goes in whole at the end");
                self.failed = true;
            }
        }
    }

    /// The file that carries `layer` into the daemon: its uncompressed tar if there is one.
    fn file<'a>(&'a self, layer: &'a LayerBlob) -> LayerFile<'a> {
        match self.tars.get(&layer.digest) {
            Some(tar) => {
                let (path, size) = tar.file();
                LayerFile { blob: &layer.digest, digest: &layer.diff_id, path, size }
            }
            None => LayerFile::blob(layer),
        }
    }

    /// The config of the partial image of `chain`: the platform, the `diff_ids`, the label.
    fn partial_config(&self) -> Result<Vec<u8>, LoadError> {
        let config = serde_json::json!({
            "architecture": self.platform.architecture(),
            "os": self.platform.os(),
            "config": { "Labels": { PARTIAL_LABEL: self.reference } },
            "rootfs": {
                "type": "layers",
                "diff_ids": self.chain.iter().map(|l| l.diff_id.as_str()).collect::<Vec<_>>(),
            },
        });
        Ok(stackbuild_common::to_vec(&config)
            .map_err(|source| crate::oci::OciError::Json { path: "partial image config".into(), source })?)
    }

    /// Loads `image` under its name, sending only the layers the daemon lacks; the whole image
    /// if that fails.
    fn load_image(&self, image: &Image) -> Result<Vec<String>, LoadError> {
        let layers = image.layers();
        let same = |a: &LayerBlob, b: &LayerBlob| a.digest == b.digest && a.diff_id == b.diff_id;
        let prefix =
            self.chain.len() <= layers.len() && self.chain.iter().zip(layers).all(|(a, b)| same(a, b));
        let in_daemon = if prefix { self.in_daemon } else { 0 };
        let full = Archive::of(image, &self.reference)?;
        if in_daemon == 0 {
            return self.daemon.load(&full, &describe(&self.reference, None));
        }
        let rest = full.clone().without_layers(&skip(layers, in_daemon));
        match self.daemon.load(&rest, &describe(&self.reference, None)) {
            Ok(said) => Ok(said),
            Err(e) => {
                tracing::warn!("Docker did not take the image without the layers it was sent before ({e}); sending it whole");
                self.daemon.load(&full, &describe(&self.reference, None))
            }
        }
    }

    /// Removes the partial images this build created.
    fn remove_partials(&self) {
        for id in &self.partials {
            if !self.daemon.remove(id) {
                tracing::warn!("could not remove the partial image {id} from Docker (label {PARTIAL_LABEL})");
            }
        }
    }

    /// Removes partial images of this image name that a killed build left behind.
    fn remove_leftovers(&self) {
        let filter = format!("{PARTIAL_LABEL}={}", self.reference);
        let options = bollard::image::ListImagesOptions {
            all: true,
            filters: HashMap::from([("label".to_owned(), vec![filter])]),
            digests: false,
        };
        let listed = self.daemon.runtime.block_on(self.daemon.docker.list_images(Some(options)));
        for image in listed.unwrap_or_default() {
            if self.daemon.remove(&image.id) {
                tracing::info!("removed {} left in Docker by an interrupted --load", image.id);
            }
        }
    }
}

/// The blobs of `layers[..from]`, which the daemon holds, that no later position needs: their
/// files stay out of the archive.
fn skip(layers: &[LayerBlob], from: usize) -> BTreeSet<String> {
    let needed: BTreeSet<&str> = layers[from..].iter().map(|l| l.digest.as_str()).collect();
    layers[..from].iter().map(|l| l.digest.clone()).filter(|d| !needed.contains(d.as_str())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: u8) -> LayerBlob {
        LayerBlob {
            digest: format!("sha256:{}", hex::encode([n; 32])),
            diff_id: format!("sha256:{}", hex::encode([n + 100; 32])),
            size: 1,
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            annotations: std::collections::BTreeMap::new(),
            path: format!("/nonexistent/{n}").into(),
        }
    }

    #[test]
    fn skips_what_the_daemon_holds_unless_a_later_layer_repeats_it() {
        let layers = [blob(1), blob(2), blob(1), blob(3)];
        assert_eq!(skip(&layers, 2), BTreeSet::from([blob(2).digest]));
        assert_eq!(skip(&layers, 3), BTreeSet::from([blob(1).digest, blob(2).digest]));
        assert!(skip(&layers, 0).is_empty());
    }
}
