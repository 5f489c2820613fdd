//! Plans the Python layers of one platform: the locked wheels, the layer group each goes in,
//! how they are installed and compiled, and the check that the lock installs only what the
//! recipe asks for.

// Every step returns the build's one error type, as the rest of `build` does; its size is
// that type's concern (clippy's `result_large_err`), not each step's.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use super::platform::PlatformBuilder;
use super::{artifact_dir, io, pip_settings_dir, BuildError};
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_check::GpuCode;
use stackbuild_common::BaseFacts;
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_python::Artifact;
use stackbuild_python::Lock;
use stackbuild_python::Scheme;
use stackbuild_python::{Pinned, Target};
use stackbuild_recipe::{PythonSection, Recipe};

/// A Python package layer group, in layer order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Group {
    Cuda,
    Cudnn,
    Torch,
    Python,
}

impl Group {
    pub(super) fn of(name: &str) -> Self {
        if name.starts_with("nvidia-cudnn") {
            Group::Cudnn
        } else if name.starts_with("nvidia-") {
            Group::Cuda
        } else if matches!(name, "torch" | "torchvision" | "torchaudio" | "triton") {
            Group::Torch
        } else {
            Group::Python
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Group::Cuda => "cuda",
            Group::Cudnn => "cudnn",
            Group::Torch => "torch",
            Group::Python => "python",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Group::Cuda => "CUDA libraries (nvidia-* wheels)",
            Group::Cudnn => "cuDNN",
            Group::Torch => "torch and its companions",
            Group::Python => "Python packages",
        }
    }
}

/// A locked wheel: what the lock says, and where the file is once fetched.
#[derive(Debug, Clone)]
pub(super) struct Wheel {
    pub(super) pin: Pinned,
    pub(super) filename: String,
    pub(super) sha256: String,
    /// Bytes of the file: as the lock records, then the wheel's once built from source.
    pub(super) size: u64,
    /// Bytes of the file the lock records, kept when the package is built from source: the
    /// layer plan is made from it, so the layers written beside the builds (`ahead`) and those
    /// after them are planned alike (the built wheel's size moved a package in or out of the
    /// largest packages' own layers, and with it the members of another layer).
    pub(super) lock_size: u64,
    /// The commit of a git dependency, whose file is made from it.
    pub(super) commit: Option<String>,
    /// The `[[source]]` a project installed as a wheel is built from.
    pub(super) source: Option<String>,
    /// A source package's locked build environment: the requirements, and their wheels.
    pub(super) build: (Vec<String>, Vec<stackbuild_python::LockedBuildWheel>),
}

/// A wheel as a key has it.
#[derive(Debug, serde::Serialize)]
pub(super) struct WheelKey<'a> {
    /// Its file name: the distribution and version the lock pins.
    filename: &'a str,
    /// Its sha256: its bytes.
    sha256: &'a str,
}

impl<'a> WheelKey<'a> {
    pub(super) fn of(w: &'a Wheel) -> Self {
        Self { filename: &w.filename, sha256: &w.sha256 }
    }
}

/// Smallest wheel that gets a layer of its own (outside the CUDA, cuDNN and torch groups): a
/// changed pin then rebuilds that package's layer alone, and the many small packages share one.
const OWN_LAYER_MIN: u64 = 1 << 20;
/// Most packages with a layer of their own (the largest first), so that a stack of many large
/// wheels stays far below the 127 layers overlay-based runtimes stack.
const MAX_OWN_LAYERS: usize = 40;
/// Smallest wheel of the CUDA and torch groups that gets a layer of its own, when its group has
/// several: the runtimes that pull for a node (the kubelet through containerd's CRI plugin,
/// CRI-O, Podman, dockerd) download a few layers at once but unpack them one after another, in
/// order, each as soon as it has arrived. A layer of the whole CUDA group (1.2 GB of gzip for
/// CUDA 12.1) right after the base keeps the unpacking waiting until all of it is in, while
/// the layers behind it are already there; layers of a few hundred MB keep it busy from the
/// start (docs/benchmarks.md, "node"). Each stays one package's, so a recipe on the same
/// CUDA wheels shares them, and one that changes one of them rebuilds that one.
const GROUP_OWN_MIN: u64 = 64 << 20;

/// One Python layer: its name in reports (`cuda`, `python-numpy`, `python`), the `created_by`
/// prefix of its history entry, and its wheels in lock order.
pub(super) struct PythonLayer<'w> {
    pub(super) name: String,
    pub(super) describe: String,
    pub(super) members: Vec<&'w Wheel>,
}

/// Most bytes of wheels downloaded together for several layers. Each download is one pip run,
/// whose start-up alone costs about 0.7 s of CPU (`time python3 -m pip download`, pip 23.2);
/// the twenty layers of `recipes/dreamzero.toml` took twenty runs when fetched one by one,
/// while everything after torch is a few hundred MB.
const FETCH_BATCH_BYTES: u64 = 256 << 20;

/// How many of `layers` (at least one) to fetch in one download: the first, and the next ones
/// while all together stay within [`FETCH_BATCH_BYTES`].
pub(super) fn fetch_batch<'a: 'b, 'b>(layers: impl Iterator<Item = &'b PythonLayer<'a>>) -> usize {
    let mut total = 0;
    let n = layers.take_while(|l| {
        total += l.members.iter().map(|w| w.size).sum::<u64>();
        total <= FETCH_BATCH_BYTES
    });
    n.count().max(1)
}

/// The Python layers of `wheels`, in layer order: the CUDA, cuDNN and torch groups (each
/// wheel of a group of several of at least [`GROUP_OWN_MIN`] in a layer of its own, then the
/// rest of the group), then one layer per large package (by name), then the other packages
/// together. The plan depends on the lock alone (names and sizes), so it is the same on every
/// machine.
pub(super) fn python_layers(wheels: &[Wheel]) -> Vec<PythonLayer<'_>> {
    let mut own: Vec<&Wheel> = wheels
        .iter()
        .filter(|w| Group::of(w.pin.name.as_ref()) == Group::Python && w.lock_size >= OWN_LAYER_MIN)
        .collect();
    own.sort_by(|a, b| {
        b.lock_size.cmp(&a.lock_size).then_with(|| a.pin.name.as_ref().cmp(b.pin.name.as_ref()))
    });
    own.truncate(MAX_OWN_LAYERS);
    for g in [Group::Cuda, Group::Cudnn, Group::Torch] {
        let members: Vec<&Wheel> = wheels.iter().filter(|w| Group::of(w.pin.name.as_ref()) == g).collect();
        if members.len() > 1 {
            own.extend(members.into_iter().filter(|w| w.lock_size >= GROUP_OWN_MIN));
        }
    }
    let is_own = |w: &Wheel| own.iter().any(|o| std::ptr::eq(*o, w));
    let mut layers = Vec::new();
    for g in [Group::Cuda, Group::Cudnn, Group::Torch, Group::Python] {
        let mut own_here: Vec<&Wheel> =
            own.iter().copied().filter(|w| Group::of(w.pin.name.as_ref()) == g).collect();
        own_here.sort_by(|a, b| a.pin.name.as_ref().cmp(b.pin.name.as_ref()));
        let rest = PythonLayer {
            name: g.name().to_owned(),
            describe: g.describe().to_owned(),
            members: wheels.iter().filter(|w| Group::of(w.pin.name.as_ref()) == g && !is_own(w)).collect(),
        };
        // A group's own layers, then the rest of the group.
        layers.extend(own_here.iter().map(|w| own_layer(w)));
        if g == Group::Python {
            layers.extend(split_rest(rest));
        } else {
            layers.push(rest);
        }
    }
    layers.retain(|l| !l.members.is_empty());
    layers
}

/// The rest of the Python packages is split in [`REST_BUCKETS`] layers once its wheels reach
/// [`REST_SPLIT_MIN`] bytes: a pin changed among them then rebuilds an eighth of them. In one
/// layer, the 194 small packages of `recipes/dreamzero.toml` (115 MB of gzip, 135 MB of it
/// bytecode once compiled) were written again whole for one changed pin: 14 s of the 33 s of
/// that rebuild (docs/benchmarks.md).
const REST_SPLIT_MIN: u64 = 32 << 20;
/// How many layers the rest is split in. Fixed, so that a package stays in its layer whatever
/// else the lock holds; with [`MAX_OWN_LAYERS`] and the CUDA and torch groups the image stays far
/// below the 127 layers overlay-based runtimes stack.
const REST_BUCKETS: u8 = 8;

/// `rest` as one layer, or in [`REST_BUCKETS`] layers (`python.1` .. `python.8`: a dot, which
/// no normalized package name of a `python-NAME` layer has) by the sha256 of each package's
/// normalized name, so a package's layer depends on its name alone, not on its version or on
/// the other packages. Each keeps the lock order; empty ones are dropped by the caller.
fn split_rest(rest: PythonLayer<'_>) -> Vec<PythonLayer<'_>> {
    use sha2::Digest as _;
    if rest.members.iter().map(|w| w.lock_size).sum::<u64>() < REST_SPLIT_MIN {
        return vec![rest];
    }
    let mut buckets: Vec<PythonLayer<'_>> = (1..=REST_BUCKETS)
        .map(|i| PythonLayer {
            name: format!("{}.{i}", rest.name),
            describe: format!("{} ({i} of {REST_BUCKETS})", rest.describe),
            members: Vec::new(),
        })
        .collect();
    for w in rest.members {
        let hash = sha2::Sha256::digest(w.pin.name.as_ref().as_bytes());
        buckets[usize::from(hash[0] % REST_BUCKETS)].members.push(w);
    }
    buckets
}

/// The layer of a package of its own (`python-NAME`).
fn own_layer(w: &Wheel) -> PythonLayer<'_> {
    PythonLayer {
        name: format!("python-{}", w.pin.name.as_ref()),
        describe: format!("Python package {}", w.pin.name.as_ref()),
        members: vec![w],
    }
}

/// The Python side of one platform's image: the locked wheels, where they install, and whether
/// the build compiles their bytecode.
pub(super) struct PythonPlan<'a> {
    pub(super) python: Option<&'a PythonSection>,
    pub(super) wheels: Vec<Wheel>,
    pub(super) scheme: Option<Scheme>,
    pub(super) target: Option<Target>,
    pub(super) bytecode: stackbuild_python::Plan<'a>,
    /// The wheels fetched and verified in this run, by normalized name: a second use (the lock
    /// check after the layers) does not hash gigabytes again. The cache is locked meanwhile.
    verified: Mutex<BTreeMap<String, Artifact>>,
    /// Held while wheels are fetched: two threads asking for the same wheel at once (the
    /// layers written ahead and the runtime of a build against torch, both at the start of a
    /// cold build) would each download it; the second now finds it verified.
    fetching: Mutex<()>,
    /// The packages built from source in this build, by normalized name.
    pub(super) built: Vec<String>,
    /// [`PythonPlan::torch_code`], once read.
    torch_code: OnceLock<Option<GpuCode>>,
}

impl PythonPlan<'_> {
    /// The locked torch wheel, if the image has torch.
    pub(super) fn torch(&self) -> Option<&Wheel> {
        self.wheels.iter().find(|w| w.pin.name.as_ref() == "torch")
    }

    /// The torch build's GPU code from its wheel's fat binaries
    /// ([`stackbuild_check::torch_code_for_build`], recorded in the cache), read once per build
    /// by the first thread that asks; the others wait for it. The layers written ahead ask
    /// first, beside the build root: a CUDA build's `TORCH_CUDA_ARCH_LIST` and the contract
    /// need it, and reading it inflates seconds of fat binaries. The wheel must be fetched.
    pub(super) fn torch_code(&self, cache: &Cache) -> Option<&GpuCode> {
        let torch = self.torch()?;
        self.torch_code
            .get_or_init(|| {
                stackbuild_check::torch_code_for_build(cache.root(), &torch.filename, &torch.sha256)
            })
            .as_ref()
    }

    /// Tells the fetcher that `wheel`, built from source in this run, is verified: it is fetched
    /// from the cache as it is, not hashed again.
    pub(super) fn note_built(&self, wheel: &Artifact) {
        let mut verified = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        verified.insert(wheel.name.to_string(), wheel.clone());
    }

    /// Puts the wheels built from source ([`PlatformBuilder::build_from_source`]) in their
    /// places: the layers install them like any other.
    pub(super) fn replace_built(&mut self, built: Vec<(usize, Wheel)>) {
        for (index, wheel) in built {
            self.built.push(wheel.pin.name.to_string());
            self.wheels[index] = wheel;
        }
    }

    /// What fetching the locked wheels needs, to use here or hand to another thread.
    pub(super) fn fetcher(&self) -> Fetcher<'_> {
        Fetcher {
            python: self.python,
            target: self.target.as_ref(),
            verified: &self.verified,
            fetching: &self.fetching,
        }
    }
}

impl Wheel {
    /// This locked sdist, now the wheel `built` from it.
    pub(super) fn built_as(&mut self, built: &Artifact) {
        self.filename.clone_from(&built.filename);
        self.sha256.clone_from(&built.sha256);
        self.size = built.size;
        self.pin.hashes = vec![built.sha256.clone()];
    }
}

/// Fetches locked wheels ([`PythonPlan::fetch`]) on any thread.
#[derive(Clone, Copy)]
pub(super) struct Fetcher<'a> {
    python: Option<&'a PythonSection>,
    target: Option<&'a Target>,
    verified: &'a Mutex<BTreeMap<String, Artifact>>,
    fetching: &'a Mutex<()>,
}

impl Fetcher<'_> {
    /// Fetches the wheels of some locked packages, by normalized name; those fetched before in
    /// this run are not fetched (nor hashed) again.
    pub(super) fn fetch(
        &self,
        cache: &Cache,
        wanted: &[&Wheel],
    ) -> Result<BTreeMap<String, Artifact>, BuildError> {
        let known = |verified: &BTreeMap<String, Artifact>, w: &Wheel| {
            verified.get(w.pin.name.as_ref()).is_some_and(|a| a.sha256 == w.sha256)
        };
        // One fetch at a time (`PythonPlan::fetching`); fetch_wheels downloads in parallel.
        let _fetching = self.fetching.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let missing: Vec<&Wheel> = {
            let verified = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            wanted.iter().copied().filter(|w| !known(&verified, w)).collect()
        };
        let fetched = fetch_wheels(self.python, self.target, cache, &missing)?;
        let mut verified = self.verified.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        verified.extend(fetched);
        Ok(wanted
            .iter()
            .filter_map(|w| verified.get(w.pin.name.as_ref()).map(|a| (w.pin.name.to_string(), a.clone())))
            .collect())
    }
}

impl<'a> PlatformBuilder<'a> {
    /// Refuses a base whose glibc is older than the one the lock chose wheels for: the glibc
    /// of a bootstrapped base from its `libc6` package, of any other from its layers. A base
    /// without glibc (scratch, musl) is left to the audit.
    pub(super) fn check_glibc(&self, facts: &BaseFacts) -> Result<(), BuildError> {
        let (Some(_), Some(locked)) = (&self.recipe.python, self.lock.glibc) else { return Ok(()) };
        let found = if let Some(found) = facts.glibc() { Some(found) } else { self.layers_glibc()? };
        match found {
            Some(found) if found < locked => Err(BuildError::GlibcBelowLock { locked, found }),
            _ => Ok(()),
        }
    }

    /// The glibc of the layers so far (the base's), read from its `libc.so.6` once per set of
    /// layers and remembered in the cache: a no-change rebuild on a multi-GB OCI base must not
    /// decompress it again.
    fn layers_glibc(&self) -> Result<Option<stackbuild_common::Glibc>, BuildError> {
        #[derive(serde::Serialize)]
        struct BaseGlibcKey<'k> {
            /// The base's layers, lowest first: what the answer depends on.
            diff_ids: Vec<&'k str>,
        }
        let diff_ids = self.layers.iter().map(|(_, blob, _)| blob.diff_id.as_str()).collect();
        let key = LayerKey::of("base-glibc", &BaseGlibcKey { diff_ids });
        let path = self.cache.root().join("facts").join(format!("base-glibc-{}", key.as_hex()));
        if let Ok(text) = std::fs::read_to_string(&path) {
            // `none`: the base has no glibc (scratch, musl).
            return Ok(text.trim().parse().ok());
        }
        let base: Vec<LayerBlob> = self.layers.iter().map(|(_, blob, _)| blob.clone()).collect();
        let found = stackbuild_image::glibc_of_layers(&base)?;
        let text = found.map_or_else(|| "none".to_owned(), |g| g.to_string());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        }
        stackbuild_common::write_atomic(&path, text.as_bytes()).map_err(io("writing", &path))?;
        Ok(found)
    }

    /// The locked wheels for this platform, checked against the base's interpreter and the
    /// recipe; `facts` and `interpreter_base` come from the base.
    pub(super) fn python_plan(
        &self,
        facts: &BaseFacts,
        interpreter_base: Option<&LayerBlob>,
    ) -> Result<PythonPlan<'a>, BuildError> {
        let (recipe, lock, platform, cache) = (self.recipe, self.lock, self.platform, self.cache);
        let python = recipe.python.as_ref();
        if let (Some(py), Some(found)) = (python, facts.python_version()) {
            if (py.version.part(0), py.version.part(1)) != (found.part(0), found.part(1)) {
                return Err(BuildError::PythonMismatch {
                    wanted: py.version.to_string(),
                    found: format!("/usr/bin/python{found}"),
                });
            }
        }
        let wheels: Vec<Wheel> = lock
            .packages_for(platform)
            .map(|p| Wheel {
                pin: p.pinned(),
                filename: p.filename.clone(),
                sha256: p.sha256.clone(),
                size: p.size,
                lock_size: p.size,
                commit: p.commit.clone(),
                source: p.source.clone(),
                build: (p.build_requires.clone(), p.build.clone()),
            })
            .collect();
        let scheme = python.map(|py| Scheme::debian_local(&py.version));
        let glibc = lock.glibc.unwrap_or(stackbuild_common::Glibc::DEFAULT);
        let target = python.map(|py| Target::new(py.version.clone(), platform).with_glibc(glibc));
        // A foreign platform's interpreter would run under qemu-user, whose binfmt handler is not
        // inside the chroot: no bytecode for it (yet), with a note.
        let native = platform.machine() == std::env::consts::ARCH;
        let bytecode =
            stackbuild_python::Plan::new(python, facts, interpreter_base.filter(|_| native), cache);
        Ok(PythonPlan {
            python,
            wheels,
            scheme,
            target,
            bytecode,
            verified: Mutex::default(),
            fetching: Mutex::default(),
            built: Vec::new(),
            torch_code: OnceLock::new(),
        })
    }
}

impl PlatformBuilder<'_> {
    /// Refuses a lock that installs what the recipe never asks for ([`check_lock_graph`]).
    ///
    /// It runs after the Python layers, not before: it reads every wheel's `Requires-Dist`, and
    /// by then the wheels of the layers that were built are in the cache, downloaded one layer
    /// ahead while the layer before was written, instead of all up front with nothing to overlap.
    /// A lock it refuses still fails the build before the image is written.
    pub(super) fn check_lock(&self, py: &PythonPlan<'_>) -> Result<(), BuildError> {
        let Some(python) = py.python else { return Ok(()) };
        let fetcher = py.fetcher();
        let fetch = |cache: &Cache, wanted: &[&Wheel]| fetcher.fetch(cache, wanted);
        check_lock_graph(self.recipe, python, self.lock, self.platform, &py.wheels, self.cache, &fetch)
    }
}

/// Only the wheels of layers that must be built are fetched (and re-hashed): a change of one
/// small package must not re-read torch's 2 GB wheel.
fn fetch_wheels(
    python: Option<&PythonSection>,
    target: Option<&Target>,
    cache: &Cache,
    wanted: &[&Wheel],
) -> Result<BTreeMap<String, Artifact>, BuildError> {
    let (Some(py), Some(target)) = (python, target) else { return Ok(BTreeMap::new()) };
    if wanted.is_empty() {
        return Ok(BTreeMap::new());
    }
    let pins: Vec<Pinned> = wanted.iter().map(|w| w.pin.clone()).collect();
    tracing::info!("fetching {} wheel(s)", pins.len());
    let _stage = stackbuild_common::Stage::start("download");
    if let Some(given) = &py.lock {
        // From where the project's lock says each wheel is served, not from an index of ours.
        let given = stackbuild_python::GivenLock::load(given)?;
        let chosen: Vec<_> = given
            .select(target)?
            .into_iter()
            .filter(|c| wanted.iter().any(|w| w.pin.name == c.name && w.sha256 == c.wheel.sha256))
            .collect();
        let mut artifacts = stackbuild_python::fetch(&given.path, &chosen, &artifact_dir(cache), &|| {
            stackbuild_python::Config::for_lock_urls(py.sources(), Some(&pip_settings_dir(cache)))
        })?;
        // Its git packages and the recipe's projects are no file it serves: the tar of each
        // commit or tree, made into the cache before (`from_source`), by the lock's digest.
        for w in wanted.iter().filter(|w| w.commit.is_some() || w.source.is_some()) {
            let path = artifact_dir(cache).join(&w.sha256).join(&w.filename);
            if stackbuild_common::sha256_file(&path).is_ok_and(|h| h == w.sha256) {
                artifacts.push(stackbuild_python::Artifact {
                    name: w.pin.name.clone(),
                    version: w.pin.version.clone(),
                    filename: w.filename.clone(),
                    sha256: w.sha256.clone(),
                    size: w.size,
                    path,
                });
            }
        }
        return Ok(artifacts.into_iter().map(|a| (a.name.to_string(), a)).collect());
    }
    stackbuild_python::import_local_wheels(&py.wheels, &pins, target, &artifact_dir(cache))?;
    // No index serves a URL dependency: from the recipe's URL, by the lock's digest.
    stackbuild_python::fetch_url_dependencies(
        py,
        Some(&pins),
        &artifact_dir(cache),
        Some(&pip_settings_dir(cache)),
    )?;
    let artifacts = stackbuild_python::fetch_wheels(
        &pins,
        target,
        py.sources(),
        &artifact_dir(cache),
        Some(&pip_settings_dir(cache)),
    )?;
    Ok(artifacts.into_iter().map(|a| (a.name.to_string(), a)).collect())
}

/// Fetches the wheels of some locked packages, by normalized name.
pub(super) type FetchWheels<'a> =
    dyn Fn(&Cache, &[&Wheel]) -> Result<BTreeMap<String, Artifact>, BuildError> + 'a;

/// What the answer of [`check_lock_graph`] depends on: its key, which names the marker of a lock
/// found clean.
#[derive(Debug, serde::Serialize)]
struct LockGraphKey<'a> {
    /// The platform whose markers select the dependencies.
    platform: &'a str,
    /// The names the recipe asks for (requirements and recipe wheels), sorted.
    roots: &'a [String],
    /// The locked wheels, whose `Requires-Dist` make the graph.
    wheels: Vec<WheelKey<'a>>,
}

impl<'a> LockGraphKey<'a> {
    const KIND: &'static str = "lock-graph";

    fn new(platform: Platform, roots: &'a [String], wheels: &'a [Wheel]) -> Self {
        Self { platform: platform.as_str(), roots, wheels: wheels.iter().map(WheelKey::of).collect() }
    }
}

/// Each wheel's `Requires-Dist` names (normalized package name -> the names it requires),
/// read from the wheels, kept by their sha256 in the cache: a changed pin reads (and fetches)
/// only its own wheel, not torch's 2 GB one again.
pub(super) fn wheel_requires<'w>(
    cache: &Cache,
    wheels: impl Iterator<Item = &'w Wheel>,
    fetch: &FetchWheels<'_>,
) -> Result<BTreeMap<String, Vec<String>>, BuildError> {
    let record = |w: &Wheel| cache.root().join("facts").join(format!("requires-{}.json", w.sha256));
    let mut requires = BTreeMap::new();
    let mut unread: Vec<&Wheel> = Vec::new();
    for w in wheels {
        let known: Option<Vec<String>> =
            std::fs::read(record(w)).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
        match known {
            Some(names) => {
                requires.insert(stackbuild_python::normalize_name(w.pin.name.as_ref()), names);
            }
            None => unread.push(w),
        }
    }
    if !unread.is_empty() {
        let artifacts = fetch(cache, &unread)?;
        let _ = std::fs::create_dir_all(cache.root().join("facts"));
        for w in unread {
            let Some(artifact) = artifacts.get(w.pin.name.as_ref()) else { continue };
            let id = stackbuild_python::wheel_identity(&artifact.path).map_err(|source| {
                BuildError::Wheel { wheel: artifact.filename.clone(), source: Box::new(source) }
            })?;
            if let Ok(json) = serde_json::to_vec(&id.requires) {
                // A lost record is read again next time: nothing depends on it being written.
                let _ = stackbuild_common::write_atomic(&record(w), &json);
            }
            requires.insert(stackbuild_python::normalize_name(w.pin.name.as_ref()), id.requires);
        }
    }
    Ok(requires)
}

/// Refuses a lock that installs packages the recipe never asks for: every locked wheel must be
/// a requirement or a `[[python.wheel]]` of the recipe, or be reachable from one through the
/// wheels' `Requires-Dist`. The answer depends only on the recipe's requirements and the locked
/// files, so it is remembered in the cache and the wheels are read once per lock.
fn check_lock_graph(
    recipe: &Recipe,
    py: &stackbuild_recipe::PythonSection,
    lock: &Lock,
    platform: Platform,
    wheels: &[Wheel],
    cache: &Cache,
    fetch: &FetchWheels<'_>,
) -> Result<(), BuildError> {
    if py.lock.is_some() {
        // The project's lock is the list of what is installed; `select` took what applies.
        return Ok(());
    }
    let mut roots: Vec<String> = py.packages.iter().map(|r| r.name.to_string()).collect();
    roots.extend(py.wheels.iter().filter(|w| w.fits(platform)).map(|w| w.name.to_string()));
    // The projects the recipe installs from its `[[source]]`s are asked for by the recipe too.
    roots.extend(wheels.iter().filter(|w| w.source.is_some()).map(|w| w.pin.name.to_string()));
    roots.sort();
    let key = LayerKey::of(LockGraphKey::KIND, &LockGraphKey::new(platform, &roots, wheels));
    let marker = cache.root().join("facts").join(format!("lock-graph-{}", key.as_hex()));
    if marker.is_file() {
        return Ok(());
    }
    let requires = wheel_requires(cache, wheels.iter(), fetch)?;
    let extra: Vec<String> = lock
        .unrequested(platform, &roots, &requires)
        .iter()
        .map(|p| format!("{} {}", p.name, p.version))
        .collect();
    if !extra.is_empty() {
        return Err(BuildError::Lock(stackbuild_python::LockError::Invalid {
            path: Lock::path_for(&recipe.path),
            why: format!(
                "it installs {} for {platform}, which nothing in the recipe asks for (neither a \
                 [python] requirement or wheel nor a dependency of one); delete the lock and run \
                 `stackbuild lock` again",
                extra.join(", ")
            ),
        }));
    }
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    }
    stackbuild_common::write_atomic(&marker, b"checked\n").map_err(io("writing", &marker))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr as _;

    use super::*;

    fn wheel(name: &str, size: u64) -> Wheel {
        Wheel {
            pin: Pinned {
                name: pep508_rs::PackageName::from_str(name).unwrap(),
                version: "1.0".parse().unwrap(),
                hashes: Vec::new(),
            },
            filename: format!("{name}-1.0-py3-none-any.whl"),
            sha256: "00".repeat(32),
            size,
            lock_size: size,
            commit: None,
            source: None,
            build: (Vec::new(), Vec::new()),
        }
    }

    #[test]
    fn every_input_of_the_lock_graph_check_is_part_of_its_key() {
        let wheels = [wheel("six", 11_053), wheel("tomli", 12_757)];
        let roots = vec!["six".to_owned(), "tomli".to_owned()];
        let inputs = LockGraphKey::new(Platform::LinuxAmd64, &roots, &wheels);
        let changed = stackbuild_cache::assert_every_input_changes_key(
            LockGraphKey::KIND,
            &inputs,
            &["platform", "roots", "wheels"],
        );
        for path in ["roots[1]", "wheels[0].filename", "wheels[1].sha256"] {
            assert!(changed.iter().any(|p| p == path), "{path}: {changed:?}");
        }
    }

    #[test]
    fn small_layers_are_fetched_together_large_ones_alone() {
        let wheels = [wheel("torch", 600 << 20), wheel("numpy", 18 << 20), wheel("six", 11_053)];
        let layer = |w: &[&'static str]| PythonLayer {
            name: w.join("+"),
            describe: String::new(),
            members: wheels.iter().filter(|x| w.contains(&x.pin.name.as_ref())).collect(),
        };
        let layers = [layer(&["torch"]), layer(&["numpy"]), layer(&["six"])];
        assert_eq!(fetch_batch(layers.iter()), 1, "a layer over the batch size goes alone");
        assert_eq!(fetch_batch(layers[1..].iter()), 2);
        assert_eq!(fetch_batch(std::iter::empty()), 1);
    }

    #[test]
    fn large_packages_get_layers_of_their_own_in_a_stable_order() {
        let wheels = [
            wheel("six", 11_053),
            wheel("scipy", 36 << 20),
            wheel("nvidia-cublas-cu12", 400 << 20),
            wheel("numpy", 18 << 20),
            wheel("torch", 600 << 20),
            wheel("idna", 61_567),
            wheel("nvidia-cudnn-cu12", 700 << 20),
        ];
        let plan: Vec<(String, Vec<&str>)> = python_layers(&wheels)
            .into_iter()
            .map(|l| (l.name, l.members.iter().map(|w| w.pin.name.as_ref()).collect()))
            .collect();
        let expected: Vec<(String, Vec<&str>)> = vec![
            ("cuda".into(), vec!["nvidia-cublas-cu12"]),
            ("cudnn".into(), vec!["nvidia-cudnn-cu12"]),
            ("torch".into(), vec!["torch"]),
            ("python-numpy".into(), vec!["numpy"]),
            ("python-scipy".into(), vec!["scipy"]),
            ("python".into(), vec!["six", "idna"]),
        ];
        assert_eq!(plan, expected);
    }

    #[test]
    fn the_large_wheels_of_a_group_of_several_get_layers_of_their_own() {
        let wheels = [
            wheel("nvidia-cublas-cu12", 400 << 20),
            wheel("nvidia-cuda-runtime-cu12", 1 << 20),
            wheel("nvidia-nccl-cu12", 160 << 20),
            wheel("nvidia-cudnn-cu12", 700 << 20),
            wheel("torch", 600 << 20),
            wheel("triton", 90 << 20),
            wheel("torchvision", 25 << 20),
            wheel("six", 11_053),
        ];
        let plan: Vec<(String, Vec<&str>)> = python_layers(&wheels)
            .into_iter()
            .map(|l| (l.name, l.members.iter().map(|w| w.pin.name.as_ref()).collect()))
            .collect();
        let expected: Vec<(String, Vec<&str>)> = vec![
            ("python-nvidia-cublas-cu12".into(), vec!["nvidia-cublas-cu12"]),
            ("python-nvidia-nccl-cu12".into(), vec!["nvidia-nccl-cu12"]),
            ("cuda".into(), vec!["nvidia-cuda-runtime-cu12"]),
            ("cudnn".into(), vec!["nvidia-cudnn-cu12"]),
            ("python-torch".into(), vec!["torch"]),
            ("python-triton".into(), vec!["triton"]),
            ("torch".into(), vec!["torchvision"]),
            ("python".into(), vec!["six"]),
        ];
        assert_eq!(plan, expected);
    }

    #[test]
    fn own_layers_are_capped_to_the_largest_packages() {
        let wheels: Vec<Wheel> =
            (0..MAX_OWN_LAYERS as u64 + 5).map(|i| wheel(&format!("pkg{i:03}"), OWN_LAYER_MIN + i)).collect();
        let layers = python_layers(&wheels);
        assert_eq!(layers.len(), MAX_OWN_LAYERS + 1);
        let rest = layers.last().unwrap();
        assert_eq!(rest.name, "python");
        let names: Vec<&str> = rest.members.iter().map(|w| w.pin.name.as_ref()).collect();
        assert_eq!(names, ["pkg000", "pkg001", "pkg002", "pkg003", "pkg004"], "the smallest share a layer");
    }

    #[test]
    fn a_package_built_from_source_keeps_the_layer_plan_of_the_lock() {
        // The 41st largest package is an sdist: built, its wheel is larger than the 40th.
        let mut wheels: Vec<Wheel> =
            (0..MAX_OWN_LAYERS as u64).map(|i| wheel(&format!("pkg{i:03}"), (2 << 20) + i)).collect();
        wheels.extend((0..100).map(|i| wheel(&format!("small{i:03}"), 1 << 19)));
        let mut sdist = wheel("built", (2 << 20) - 1);
        sdist.filename = "built-1.0.tar.gz".into();
        wheels.push(sdist);
        let plan = |wheels: &[Wheel]| -> Vec<(String, Vec<String>)> {
            python_layers(wheels)
                .into_iter()
                .map(|l| (l.name, l.members.iter().map(|w| w.pin.name.to_string()).collect()))
                .collect()
        };
        let before = plan(&wheels);
        let built = stackbuild_python::Artifact {
            name: "built".parse().unwrap(),
            version: "1.0".parse().unwrap(),
            filename: "built-1.0-py3-none-any.whl".into(),
            sha256: "11".repeat(32),
            size: 8 << 20,
            path: "/nonexistent".into(),
        };
        wheels.last_mut().unwrap().built_as(&built);
        assert_eq!(plan(&wheels), before);
    }

    #[test]
    fn a_large_rest_is_split_by_name_and_a_package_stays_in_its_layer() {
        let small: Vec<Wheel> = (0..40).map(|i| wheel(&format!("small{i:02}"), 1 << 19)).collect();
        let layers = python_layers(&small);
        assert_eq!(layers.len(), 1, "20 MB of small packages: one layer");
        assert_eq!(layers[0].name, "python");

        let many: Vec<Wheel> = (0..200).map(|i| wheel(&format!("pkg{i:03}"), 1 << 19)).collect();
        let layers = python_layers(&many);
        assert!(layers.len() > 4 && layers.len() <= usize::from(REST_BUCKETS), "{}", layers.len());
        assert!(layers.iter().all(|l| l.name.starts_with("python.")));
        let placed = |layers: &[PythonLayer<'_>], name: &str| {
            layers
                .iter()
                .find(|l| l.members.iter().any(|w| w.pin.name.as_ref() == name))
                .unwrap()
                .name
                .clone()
        };
        let before = placed(&layers, "pkg007");
        assert_eq!(layers.iter().map(|l| l.members.len()).sum::<usize>(), 200);

        // Another version of one package, and one package more: every package keeps its layer.
        let mut changed = many.clone();
        changed[7].pin.version = "2.0".parse().unwrap();
        changed[7].lock_size = 3 << 18;
        changed.push(wheel("newcomer", 1 << 19));
        let after = python_layers(&changed);
        assert_eq!(placed(&after, "pkg007"), before);
        for w in &many {
            let name = w.pin.name.as_ref();
            assert_eq!(placed(&after, name), placed(&layers, name), "{name}");
        }
    }
}
