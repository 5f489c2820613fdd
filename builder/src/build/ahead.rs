//! The Python layers written while packages are built from source.
//!
//! A layer whose wheels are all from the index does not wait for the builds: while the build
//! root is made, the CUDA toolkit fetched and the sdists built (downloads, `dpkg`, `xz` and
//! compilers, which leave a core idle much of the time), one thread writes those layers into the
//! cache. The Python layers step then finds them there, as it would after an earlier build, and
//! writes on all its workers only the layers that hold a built wheel and those not reached yet.
//! The layers are the same bytes either way: a layer depends on its key's inputs alone.
//!
//! Why: on `recipes/dreamzero.toml` the builds took 145 to 177 s and the layers 72 to 88 s after
//! them, one after the other, on the 2-core VM.

#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use super::from_source::joined;
use super::layers::{stage_python_layer, write_staged};
use super::plan::{python_layers, PythonPlan};
use super::platform::PlatformBuilder;
use super::BuildError;

/// What the layers written ahead left: their stages (kept until the image is assembled, as
/// [`PlatformBuilder::spent_stages`] says why) and the bytecode each compiled, by key.
#[derive(Default)]
pub(super) struct Ahead {
    stages: Vec<tempfile::TempDir>,
    pub(super) added: BTreeMap<String, Option<stackbuild_python::Added>>,
}

impl PlatformBuilder<'_> {
    /// Builds the recipe's sdists ([`PlatformBuilder::build_from_source`]) with the Python
    /// layers that need none of them written beside the builds, then puts the built wheels in
    /// their places.
    pub(super) fn build_from_source_and_layers_ahead(
        &mut self,
        py: &mut PythonPlan<'_>,
    ) -> Result<(), BuildError> {
        if !py.wheels.iter().any(|w| stackbuild_common::is_sdist(&w.filename)) {
            return Ok(());
        }
        let stop = AtomicBool::new(false);
        let (this, shared) = (&*self, &*py);
        let (built, ahead) = std::thread::scope(|s| {
            let ahead = s.spawn(|| this.write_layers_ahead(shared, &stop));
            let built = this.build_from_source(shared);
            // The layers not reached yet go to the Python layers step, on all its workers.
            stop.store(true, Ordering::Relaxed);
            (built, joined(ahead))
        });
        py.replace_built(built?);
        // A layer that failed ahead is written again by the Python layers step, whose error
        // names it then.
        match ahead {
            Ok(ahead) => {
                self.spent_stages.extend(ahead.stages);
                self.ahead = ahead.added;
            }
            Err(e) => tracing::debug!("a layer written beside the builds failed: {e}"),
        }
        Ok(())
    }

    /// Writes into the cache, one after the other until `stop`, the Python layers of `py` that
    /// hold no sdist and are not in the cache yet. Not with `--load`, which takes each layer's
    /// tar as it is pushed, in order.
    fn write_layers_ahead(&self, py: &PythonPlan<'_>, stop: &AtomicBool) -> Result<Ahead, BuildError> {
        let mut ahead = Ahead::default();
        let Some(scheme) = py.scheme.as_ref().filter(|_| self.loader.is_none()) else { return Ok(ahead) };
        // torch's GPU architectures first, beside the build root: off the builds' path.
        if let Some(t) = py.torch() {
            py.fetcher().fetch(self.cache, &[t])?;
            py.torch_code(self.cache);
        }
        for layer in python_layers(&py.wheels) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if layer.members.iter().any(|w| stackbuild_common::is_sdist(&w.filename)) {
                continue;
            }
            let key = self.python_layer_key(py, scheme, &layer);
            if self.cache.get_layer(&key).is_some() {
                continue;
            }
            let artifacts = py.fetcher().fetch(self.cache, &layer.members)?;
            let staged =
                stage_python_layer(&py.bytecode, scheme, &layer, &key, &artifacts, self.cache, self.epoch)?;
            let written = write_staged(self.finisher(), &key, staged)?;
            tracing::debug!("layer {} written beside the builds", layer.name);
            ahead.stages.push(written.stage);
            ahead.added.insert(key.as_hex().to_owned(), written.added);
        }
        Ok(ahead)
    }
}
