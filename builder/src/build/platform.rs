//! One platform's image as it is assembled: what every step reads (recipe, lock, cache,
//! platform, epoch, compression) and what the steps have produced so far (the layers in order,
//! the components of the stack description). The steps are `impl` blocks in the sibling
//! modules; `build_platform` in the parent runs them in order.

use std::path::Path;

use stackcontract::image::Component;

use super::{BuildError, BuildOptions, LayerReport, LayerSource};
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::Compression;
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_image::LayerWriter;
use stackbuild_python::Lock;
use stackbuild_recipe::Recipe;

/// The state the steps of one platform's build share.
pub(super) struct PlatformBuilder<'a> {
    pub(super) recipe: &'a Recipe,
    pub(super) platform: Platform,
    pub(super) lock: &'a Lock,
    pub(super) cache: &'a Cache,
    /// The layout the image will be written to: its blobs need not be hashed again.
    pub(super) out: &'a Path,
    pub(super) opts: &'a BuildOptions,
    pub(super) epoch: u64,
    pub(super) compression: Compression,
    /// The layers so far, base first: report, blob, `created_by`.
    pub(super) layers: Vec<(LayerReport, LayerBlob, String)>,
    /// The stack description's components so far.
    pub(super) components: Vec<Component>,
    /// `--load`: takes each layer into the Docker daemon as it is pushed.
    pub(super) loader: Option<&'a stackbuild_image::Loader>,
    /// The Python layers' stages, removed together when the builder is dropped. Removing each
    /// after its layer made the next layer's file creations slow: ext4's inode allocator skips
    /// recently deleted inodes one inode-table lookup at a time (`recently_deleted` in
    /// `fs/ext4/ialloc.c`), which took about 10 s of system time in a build of `recipes/dreamzero.toml` (`perf`;
    /// system time 53 s -> 36 s, build 90 s -> 87 s on the 2-core VM). A killed build's
    /// stages are removed by the next one (`Cache::clean_temps`).
    pub(super) spent_stages: Vec<tempfile::TempDir>,
    /// The uncompressed tar of the layer just finished, for `loader` with the layer's push.
    spooled: Option<stackbuild_image::SpooledTar>,
    /// The Python layers written in this run beside the builds from source, by key, with the
    /// bytecode each compiled (`ahead`): reported as built, not reused.
    pub(super) ahead: std::collections::BTreeMap<String, Option<stackbuild_python::Added>>,
}

/// The Python layers' stages being removed beside the rest of the build (the sources and config
/// layers, the audit, the write): joined when dropped, so none outlives the process. Removing
/// them after the image was assembled, one after the other, took 7.6 to 10.6 s at the end of a
/// cold build of `recipes/dreamzero.toml` (ext4 unlinking 150,000 files) on the 2-core VM.
pub(super) struct StageRemoval(Vec<std::thread::JoinHandle<()>>);

impl StageRemoval {
    /// Removes `stages` on one thread per core, from now on.
    pub(super) fn start(stages: Vec<tempfile::TempDir>) -> Self {
        let threads =
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(stages.len());
        let mut shares: Vec<Vec<tempfile::TempDir>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, stage) in stages.into_iter().enumerate() {
            shares[i % threads].push(stage);
        }
        // Where a thread cannot start, its share is removed here and now: the closure that
        // holds it is dropped with the error.
        Self(
            shares
                .into_iter()
                .filter_map(|share| std::thread::Builder::new().spawn(move || drop(share)).ok())
                .collect(),
        )
    }
}

impl Drop for StageRemoval {
    fn drop(&mut self) {
        for thread in self.0.drain(..) {
            let _ = thread.join();
        }
    }
}

impl<'a> PlatformBuilder<'a> {
    pub(super) fn new(
        recipe: &'a Recipe,
        platform: Platform,
        lock: &'a Lock,
        cache: &'a Cache,
        out: &'a Path,
        opts: &'a BuildOptions,
        epoch: u64,
    ) -> Self {
        Self {
            recipe,
            platform,
            lock,
            cache,
            out,
            opts,
            epoch,
            compression: opts.compression,
            layers: Vec::new(),
            components: Vec::new(),
            loader: None,
            spent_stages: Vec::new(),
            spooled: None,
            ahead: std::collections::BTreeMap::new(),
        }
    }

    /// Finishes a layer the build wrote ([`LayerFinisher::finish`]); its spooled tar, if any,
    /// goes with the next [`PlatformBuilder::push`].
    pub(super) fn finish_layer(&mut self, writer: LayerWriter) -> Result<LayerBlob, BuildError> {
        let (blob, spooled) = self.finisher().finish(writer)?;
        self.spooled = spooled;
        Ok(blob)
    }

    /// What finishing a layer needs, for the threads that write layers side by side.
    pub(super) fn finisher(&self) -> LayerFinisher<'a> {
        LayerFinisher {
            cache: self.cache,
            epoch: self.epoch,
            compression: self.compression,
            audit: self.opts.audit,
            spool: self.loader.is_some() && self.compression != Compression::None,
        }
    }

    /// Sets the spooled tar that goes with the next [`PlatformBuilder::push`].
    pub(super) fn set_spooled(&mut self, spooled: Option<stackbuild_image::SpooledTar>) {
        self.spooled = spooled;
    }

    /// Appends a layer, built in this run or reused from the cache.
    pub(super) fn push(&mut self, name: &str, created_by: String, blob: LayerBlob, built: bool) {
        let source = LayerSource::of(&blob, built, self.cache);
        tracing::info!("layer {name:<8} {} {} ({} bytes)", source.verb(), blob.digest, blob.size);
        if let Some(loader) = self.loader {
            loader.layer(&blob, self.spooled.take());
        }
        self.layers.push((
            LayerReport {
                name: name.to_owned(),
                digest: blob.digest.clone(),
                size: blob.size,
                built,
                source,
                bytecode: None,
            },
            blob,
            created_by,
        ));
    }

    /// Records on the last layer the bytecode it holds: `added` when it was just compiled, else
    /// what was recorded when the cached layer `key` was built.
    pub(super) fn note_bytecode(
        &mut self,
        bytecode: &stackbuild_python::Plan<'_>,
        key: &LayerKey,
        added: Option<stackbuild_python::Added>,
    ) {
        let added = added.or_else(|| bytecode.recorded(key));
        if let Some((report, _, _)) = self.layers.last_mut() {
            report.bytecode = added;
        }
    }
}

/// Finishes layers: owns nothing of the builder, so layers are finished on several threads.
#[derive(Clone, Copy)]
pub(super) struct LayerFinisher<'a> {
    cache: &'a Cache,
    epoch: u64,
    compression: Compression,
    audit: bool,
    /// `--load` with a compressed layer: keep its tar for the daemon.
    spool: bool,
}

impl<'a> LayerFinisher<'a> {
    pub(super) const fn cache(self) -> &'a Cache {
        self.cache
    }

    pub(super) const fn epoch(self) -> u64 {
        self.epoch
    }

    /// Finishes a layer the build wrote, the audit reading it as it is written
    /// ([`stackbuild_audit::LayerTap`]) instead of inflating its blob again, unless the audit is
    /// off; with `--load` and a compressed layer, its tar is also kept for the daemon
    /// ([`stackbuild_image::TarSpool`]) and returned, for [`PlatformBuilder::push`].
    pub(super) fn finish(
        self,
        mut writer: LayerWriter,
    ) -> Result<(LayerBlob, Option<stackbuild_image::SpooledTar>), BuildError> {
        let spool = if self.spool {
            stackbuild_image::TarSpool::create(self.cache, writer.content_size())
        } else {
            None
        };
        // A spool whose writer cannot be made gives no tar (`TarSpool::finish`).
        if let Some(w) = spool.as_ref().and_then(|s| s.writer().ok()) {
            writer = writer.with_tap(w);
        }
        let blob = if self.audit {
            let mut tap = stackbuild_audit::LayerTap::spawn();
            let blob = writer.with_tap(tap.writer()).finish(self.compression)?;
            tap.store(&stackbuild_audit::LayerTap::cache_dir(self.cache.root()), &blob.digest);
            blob
        } else {
            writer.finish(self.compression)?
        };
        let spooled = spool.and_then(|s| s.finish(&blob));
        Ok((blob, spooled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_stages_are_gone_once_their_removal_is_dropped() {
        let parent = tempfile::tempdir().unwrap();
        let stages: Vec<tempfile::TempDir> = (0..5)
            .map(|i| {
                let stage = tempfile::tempdir_in(parent.path()).unwrap();
                std::fs::create_dir_all(stage.path().join("a/b")).unwrap();
                std::fs::write(stage.path().join(format!("a/b/{i}.py")), "x = 1\n").unwrap();
                stage
            })
            .collect();
        let removal = StageRemoval::start(stages);
        drop(removal);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "a stage outlived its removal");
        // No stage: nothing to start, nothing to join.
        drop(StageRemoval::start(Vec::new()));
    }
}
