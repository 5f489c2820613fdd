//! The build-from-source stage in a build: the build root of the recipe's base, the metadata of
//! sdists for resolution, and each locked sdist turned into its wheel before the Python layers
//! are planned ([`stackbuild_wheelbuild`]).

use std::str::FromStr as _;
use std::sync::OnceLock;

use stackbuild_cache::Cache;
use stackbuild_common::{Compression, Platform};
use stackbuild_image::DebianBase;
use stackbuild_python::{Artifact, Target};
use stackbuild_recipe::{Base, PythonSection, Recipe};
use stackbuild_wheelbuild::{BuildRoot, Settings, SourcePackage, WheelBuilder};

use super::plan::{PythonPlan, Wheel};
use super::platform::PlatformBuilder;
use super::{artifact_dir, debian_arch, pip_settings_dir, BuildError};

/// The packages every build root has besides the base's: a C and C++ toolchain with `make`
/// (`build-essential`) and the interpreter's headers and `python3.X-config`.
fn default_build_packages(python: &PythonSection) -> Vec<String> {
    let minor = format!("{}.{}", python.version.part(0), python.version.part(1));
    vec!["build-essential".to_owned(), format!("python{minor}-dev")]
}

/// The build root for `platform`: the recipe's Debian or Ubuntu base with the default build
/// packages and `[python.build] packages` added to its rootfs by mmdebstrap (apt installs only
/// what the base lacks), made in the cache as a directory when run as root
/// (`DebianBase::make_dir_on`), else cached as a layer and unpacked into the cache
/// (`DebianBase::prepare_on`). Nothing of it reaches the image. The base is the image's own layer,
/// in `compression` or any other the cache has it in (made in `compression` where it has none,
/// as when a lock prepares an sdist's metadata before the image's base is built).
pub(super) fn build_root(
    recipe: &Recipe,
    python: &PythonSection,
    platform: Platform,
    cache: &Cache,
    epoch: u64,
    compression: Compression,
) -> Result<BuildRoot, BuildError> {
    let Base::Bootstrap(b) = &recipe.base else {
        return Err(BuildError::Unsupported(format!(
            "{}: building Python packages from source needs a Debian or Ubuntu base (`[base] debian = ...`), \
             whose packages give the build its compilers and headers; this recipe's base is `{}`. Use \
             wheels for these packages ([[python.wheel]]) or a Debian base",
            recipe.path.display(),
            recipe.base.kind()
        )));
    };
    if platform.machine() != std::env::consts::ARCH {
        return Err(BuildError::Unsupported(format!(
            "building Python packages from source for {platform} on this {} machine is not supported yet: \
             build on a {platform} machine, or supply the wheels ([[python.wheel]])",
            std::env::consts::ARCH
        )));
    }
    let base = super::base_layers::debian_base(recipe, b, platform, cache)?;
    let added: Vec<String> = default_build_packages(python)
        .into_iter()
        .chain(python.build.packages.iter().cloned())
        .filter(|p| !base.packages.contains(p))
        .fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        });
    let _stage = stackbuild_common::Stage::start("build root");
    tracing::info!(
        "build root: {} {} with {} package(s) and {} to build with ({})",
        base.distribution,
        base.suite,
        base.packages.len(),
        added.len(),
        added.join(", ")
    );
    let prepared_base = base.prepare_any(cache, epoch, compression)?;
    let layer = if added.is_empty() {
        prepared_base.layer
    } else {
        let root = DebianBase { packages: added, ..base };
        // As root, made in place in the cache; else as a layer, unpacked.
        if let Some(key) = root.dir_key_on(&prepared_base.layer, epoch)? {
            return BuildRoot::made(cache, key.as_hex(), &python.version, |into| {
                Ok::<_, BuildError>(root.make_dir_on(&prepared_base.layer, cache, epoch, &key, into)?)
            });
        }
        // Uncompressed: it is unpacked here and never pushed.
        root.prepare_on(&prepared_base.layer, cache, epoch, Compression::None)?.layer
    };
    Ok(BuildRoot::unpacked(cache, &layer, &python.version)?)
}

/// Metadata of sdists for resolution, prepared in the sandbox on the recipe's build root (made
/// on first use: a recipe whose packages all have wheels never makes one).
pub(super) struct SandboxMetadata<'a> {
    pub(super) recipe: &'a Recipe,
    pub(super) python: &'a PythonSection,
    pub(super) target: &'a Target,
    pub(super) cache: &'a Cache,
    pub(super) epoch: u64,
    pub(super) root: OnceLock<BuildRoot>,
}

impl stackbuild_python::SdistMetadata for SandboxMetadata<'_> {
    fn metadata(&self, sdist: &Artifact) -> Result<String, String> {
        // Given by the recipe (uv's `dependency-metadata`): nothing is prepared. For packages
        // whose setup.py imports torch before it says what it needs, which an isolated
        // metadata build cannot run and a build against the image's torch cannot run before
        // torch is resolved.
        if let Some(requires) = self.python.build.dependency_metadata.get(&sdist.name) {
            let mut text =
                format!("Metadata-Version: 2.1\nName: {}\nVersion: {}\n", sdist.name, sdist.version);
            for r in requires {
                text.push_str("Requires-Dist: ");
                text.push_str(&r.to_string());
                text.push('\n');
            }
            return Ok(text);
        }
        let root = if let Some(root) = self.root.get() {
            root
        } else {
            let root = build_root(
                self.recipe,
                self.python,
                self.target.platform,
                self.cache,
                self.epoch,
                // The image's compression is not known yet: the default's, or the base as found.
                Compression::default(),
            )
            .map_err(|e| e.to_string())?;
            self.root.get_or_init(|| root)
        };
        let settings = Settings::new(&self.python.build, self.epoch);
        let artifacts = artifact_dir(self.cache);
        let memo = pip_settings_dir(self.cache);
        let resolve =
            stackbuild_wheelbuild::index_resolver(self.python, self.target, &artifacts, Some(&memo));
        // A build against the image's torch (`no_isolation`: its setup.py imports torch before
        // it says what it needs, as detectron2's does) prepares its metadata with the recipe's
        // torch importable, as pip's `--no-build-isolation` does after `pip install torch`.
        let runtime = if self.python.build.no_isolation.contains(&sdist.name) {
            let mut torch: Vec<String> = self
                .python
                .packages
                .iter()
                .filter(|r| r.name.as_ref() == "torch")
                .map(ToString::to_string)
                .collect();
            if torch.is_empty() {
                torch.push("torch".to_owned());
            }
            resolve(&torch)
                .map_err(|e| format!("resolving {} for its metadata build: {e}", torch.join(", ")))?
        } else {
            Vec::new()
        };
        let builder = WheelBuilder::new(self.cache, root, &settings, self.target, &resolve);
        let pkg = SourcePackage {
            name: &sdist.name,
            version: &sdist.version,
            sdist,
            extra_requires: extra_requires(self.python, &sdist.name),
            env: build_env(self.python, &sdist.name),
            runtime,
            cuda: None,
            editable: None,
        };
        builder
            .metadata(&pkg, &mut |line| tracing::debug!("{}: {line}", sdist.name))
            .map_err(|e| e.to_string())
    }
}

/// Builds `pkg`. On a terminal, a spinner with the package, the elapsed time and the backend's
/// last line; elsewhere (CI logs), plain timed lines, one every few seconds at most, so a long
/// compile shows it is alive and where it is.
fn build_showing_progress(
    builder: &WheelBuilder<'_>,
    pkg: &SourcePackage<'_>,
    label: &str,
) -> Result<stackbuild_wheelbuild::Built, BuildError> {
    let started = std::time::Instant::now();
    let mut last = std::time::Instant::now();
    let spinner = stackbuild_common::Progress::spinner(format!("building {label}"));
    let built = builder.build(pkg, &mut |line| {
        if !spinner.is_hidden() {
            spinner.set_message(format!("building {label}: {}", truncate(line, 100)));
        } else if last.elapsed().as_secs() >= 5 {
            last = std::time::Instant::now();
            tracing::info!("{label} [{}s]: {}", started.elapsed().as_secs(), truncate(line, 160));
        }
    })?;
    drop(spinner);
    if built.compiled {
        tracing::info!(
            "{label}: built {} in {:.1}s (log: {})",
            built.wheel.filename,
            started.elapsed().as_secs_f64(),
            built.log.display()
        );
    }
    Ok(built)
}

/// What a scoped thread returned; its panic goes on in the caller.
pub(super) fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The recipe's variables of `name`'s build (`[python.build.env]`).
fn build_env(python: &PythonSection, name: &pep508_rs::PackageName) -> Vec<(String, String)> {
    python.build.env.get(name).map(|vars| vars.clone().into_iter().collect()).unwrap_or_default()
}

/// The names an sdist's `PKG-INFO` requires (`Requires-Dist` without an extra's marker).
fn declared_requires(sdist: &std::path::Path) -> Vec<String> {
    let Some(info) = stackbuild_python::sdist_info(sdist) else { return Vec::new() };
    info.requires
        .iter()
        .filter(|r| !r.split_once(';').is_some_and(|(_, marker)| marker.contains("extra")))
        .filter_map(|r| pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok())
        .map(|r| r.name.to_string())
        .collect()
}

fn extra_requires(python: &PythonSection, name: &pep508_rs::PackageName) -> Vec<String> {
    python
        .build
        .extra_requires
        .get(name)
        .map(|r| r.iter().map(ToString::to_string).collect())
        .unwrap_or_default()
}

impl PlatformBuilder<'_> {
    /// Turns every locked sdist of `py` into its wheel (built now, or found built in the cache):
    /// the wheels that take their places ([`PythonPlan::replace_built`]), by index. `py` is only
    /// read, so the layers of the other packages are written meanwhile
    /// ([`PlatformBuilder::write_layers_ahead`]); the sdists are built in order, each against
    /// the wheels built before it.
    pub(super) fn build_from_source(&self, py: &PythonPlan<'_>) -> Result<Vec<(usize, Wheel)>, BuildError> {
        let mut wheels = py.wheels.clone();
        let sdists: Vec<usize> = wheels
            .iter()
            .enumerate()
            .filter(|(_, w)| stackbuild_common::is_sdist(&w.filename))
            .map(|(i, _)| i)
            .collect();
        let (Some(python), Some(target)) = (py.python, py.target.clone()) else { return Ok(Vec::new()) };
        if sdists.is_empty() {
            return Ok(Vec::new());
        }
        let mut replaced = Vec::with_capacity(sdists.len());
        let _stage = stackbuild_common::Stage::start("build from source");
        let (root, cuda) = self.build_prerequisites(py, python, &sdists)?;
        let settings = Settings::new(&python.build, self.epoch);
        // The image's torch build's architectures, read once its wheel is in the cache (the
        // runtime of a build against torch fetches it): computed before, it depended on whether
        // an earlier build had left torch there, and every built wheel's key with it.
        let mut torch_arch: Option<Option<String>> = None;
        let artifacts = artifact_dir(self.cache);
        let memo = pip_settings_dir(self.cache);
        let resolve = stackbuild_wheelbuild::index_resolver(python, &target, &artifacts, Some(&memo));
        for i in sdists {
            if wheels[i].commit.is_some() || wheels[i].source.is_some() {
                self.tree_sdist(python, &mut wheels[i])?;
            }
            let wanted: Vec<&Wheel> = vec![&wheels[i]];
            let fetched = py.fetcher().fetch(self.cache, &wanted)?;
            let name = wheels[i].pin.name.clone();
            let Some(sdist) = fetched.get(name.as_ref()).cloned() else {
                return Err(BuildError::Unsupported(format!("the sdist of {name} was not fetched")));
            };
            let isolated = !python.build.no_isolation.contains(&name);
            // A build against the image's torch gets the CUDA toolchain of the image's CUDA
            // runtime (`nvidia-cuda-runtime`): NVIDIA's wheels from CUDA 13 on, Debian's
            // toolkit for CUDA 12.
            let cuda = if isolated { None } else { cuda.clone() };
            let runtime =
                if isolated { Vec::new() } else { self.build_runtime(py, &wheels, python, &name, &sdist)? };
            // A `[[source]]` installed editable: its editable wheel, made with the project at
            // the tree's `dest`.
            let editable = wheels[i].source.as_ref().and_then(|source| {
                self.recipe.sources.iter().find(|s| &s.name == source && s.editable).map(|s| s.dest.as_str())
            });
            let pkg = SourcePackage {
                name: &sdist.name,
                version: &sdist.version,
                sdist: &sdist,
                extra_requires: extra_requires(python, &name),
                env: build_env(python, &name),
                runtime,
                cuda,
                editable,
            };
            // The lock's build environment, where the requirements start with the ones it was
            // resolved from: those wheels exactly, and anything asked beyond them resolved now.
            let (locked_requires, locked_wheels) = &wheels[i].build;
            let locked = |requires: &[String]| -> Result<Vec<Artifact>, String> {
                // Asked for the lock's requirements and maybe more after them, or for some of
                // them only (a lock made before builds without isolation left out what the image
                // has: the image's wheels win over the locked ones of the same name).
                let within = !requires.is_empty() && requires.iter().all(|r| locked_requires.contains(r));
                if locked_wheels.is_empty() || !(within || requires.starts_with(locked_requires)) {
                    return resolve(requires);
                }
                let pins: Vec<stackbuild_python::Pinned> =
                    locked_wheels.iter().map(stackbuild_python::LockedBuildWheel::pinned).collect();
                let mut wheels = stackbuild_python::fetch_wheels(
                    &pins,
                    &target,
                    python.sources(),
                    &artifacts,
                    Some(&memo),
                )
                .map_err(|e| e.to_string())?;
                let rest = requires.get(locked_requires.len()..).unwrap_or_default();
                if !rest.is_empty() {
                    wheels.extend(resolve(rest)?);
                }
                Ok(wheels)
            };
            // `TORCH_CUDA_ARCH_LIST` reaches only a build with the CUDA toolchain: elsewhere it
            // changes nothing but the key.
            let mut settings = settings.clone();
            if pkg.cuda.is_none() {
                settings.cuda_arch_list = None;
            } else if settings.cuda_arch_list.is_none() {
                settings
                    .cuda_arch_list
                    .clone_from(torch_arch.get_or_insert_with(|| self.torch_arch_list(py)));
            }
            let builder = WheelBuilder::new(self.cache, &root, &settings, &target, &locked);
            let built = build_showing_progress(&builder, &pkg, &format!("{} {}", sdist.name, sdist.version))?;
            let wheel = place(self.cache, &built.wheel)?;
            py.note_built(&wheel);
            wheels[i].built_as(&wheel);
            replaced.push(i);
        }
        Ok(replaced.into_iter().map(|i| (i, wheels[i].clone())).collect())
    }
}

impl PlatformBuilder<'_> {
    /// The build root and, where a package of `sdists` builds against the image's torch, the
    /// CUDA toolchain, with the image's wheels fetched. A build against torch needs the image's
    /// wheels (its runtime, and every wheel's Requires-Dist to find that runtime) and, for CUDA
    /// 12, Debian's toolkit. Each is a download and an unpack of its own, as the build root is
    /// (mmdebstrap): they run side by side instead of one after the other (`recipes/dreamzero.toml`:
    /// build root 60 s, toolkit 44 s, wheels 16 s; build from source 185 s -> 145 s).
    fn build_prerequisites(
        &self,
        py: &PythonPlan<'_>,
        python: &PythonSection,
        sdists: &[usize],
    ) -> Result<(BuildRoot, Option<stackbuild_wheelbuild::CudaToolchain>), BuildError> {
        let against_runtime =
            sdists.iter().any(|&i| python.build.no_isolation.contains(&py.wheels[i].pin.name));
        let (root, cuda, fetched) = std::thread::scope(|s| {
            let cuda = against_runtime.then(|| s.spawn(|| self.cuda_toolchain(py)));
            let wheels = against_runtime.then(|| {
                s.spawn(|| {
                    let image: Vec<&Wheel> =
                        py.wheels.iter().filter(|w| !stackbuild_common::is_sdist(&w.filename)).collect();
                    py.fetcher().fetch(self.cache, &image).map(drop)
                })
            });
            let root =
                build_root(self.recipe, python, self.platform, self.cache, self.epoch, self.compression);
            (root, cuda.map(joined), wheels.map(joined))
        });
        let root = root?;
        fetched.transpose()?;
        Ok((root, cuda.transpose()?.flatten()))
    }
}

impl PlatformBuilder<'_> {
    /// The image's wheels a build without isolation gets, as pip's `--no-build-isolation`
    /// builds against the installed ones: those its build can import, torch and what the
    /// package requires with all they require, so that a pin changed elsewhere in the image
    /// (termcolor) neither rebuilds a CUDA extension nor installs another copy of torch's 5 GB
    /// environment.
    fn build_runtime(
        &self,
        py: &PythonPlan<'_>,
        wheels: &[Wheel],
        python: &PythonSection,
        name: &pep508_rs::PackageName,
        sdist: &Artifact,
    ) -> Result<Vec<Artifact>, BuildError> {
        let image: Vec<&Wheel> =
            wheels.iter().filter(|w| !stackbuild_common::is_sdist(&w.filename)).collect();
        let fetcher = py.fetcher();
        let fetch = |cache: &Cache, w: &[&Wheel]| fetcher.fetch(cache, w);
        let requires = super::plan::wheel_requires(self.cache, image.iter().copied(), &fetch)?;
        let mut roots = vec!["torch".to_owned()];
        roots.extend(declared_requires(&sdist.path));
        roots.extend(extra_requires(python, name).iter().filter_map(|r| {
            pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(r).ok().map(|r| r.name.to_string())
        }));
        let needed = stackbuild_python::reachable(&roots, &requires);
        let wanted: Vec<&Wheel> = image
            .into_iter()
            .filter(|w| needed.contains(&stackbuild_python::normalize_name(w.pin.name.as_ref())))
            .collect();
        Ok(fetcher.fetch(self.cache, &wanted)?.into_values().collect())
    }
}

impl PlatformBuilder<'_> {
    /// Makes the tar of a git dependency's locked commit, or of a project's tree, where the cache
    /// lacks it, and checks it is the file the lock pins. A project whose `[[source]]` is given
    /// another tree by `--source NAME=DIR` is built from that tree instead: its own file stands
    /// in for the locked one, while its dependencies stay the lock's (resolved from the recipe's
    /// tree), so a stand-in tree still gets the image the whole dependency set.
    fn tree_sdist(&self, python: &PythonSection, w: &mut Wheel) -> Result<(), BuildError> {
        let name = w.pin.name.clone();
        let name = &name;
        let cache_root = [self.cache.root()];
        if let Some(dir) = w.source.as_ref().and_then(|s| self.opts.source_overrides.get(s)) {
            let fetch = stackbuild_python::SourceFetch {
                artifacts: &artifact_dir(self.cache),
                memo: None,
                cache: self.cache.root(),
            };
            let tree = stackbuild_python::Tree::Path { path: dir, exclude: &cache_root };
            let made =
                stackbuild_python::tree_sdist(name, tree, Some(&w.pin.version), fetch).map_err(|e| {
                    BuildError::Unsupported(format!(
                        "--source {}={}: {e}",
                        w.source.as_deref().unwrap_or_default(),
                        dir.display()
                    ))
                })?;
            if made.sha256 != w.sha256 {
                tracing::info!(
                    "{name} {}: built from the --source tree {} (its sha256 {}; the lock's tree has {}); its \
                     dependencies are the lock's",
                    w.pin.version,
                    dir.display(),
                    made.sha256,
                    w.sha256
                );
                w.pin.hashes = vec![made.sha256.clone()];
                w.sha256 = made.sha256;
                w.filename = made.filename;
                w.size = made.size;
            }
            return Ok(());
        }
        if artifact_dir(self.cache).join(&w.sha256).join(&w.filename).is_file() {
            return Ok(());
        }
        let git;
        let (tree, what) = if let Some(source) = &w.source {
            let src = self.recipe.sources.iter().find(|s| &s.name == source && s.install_wheel).ok_or_else(|| {
                BuildError::Unsupported(format!(
                    "the lock builds {name} from [[source]] {source}, which the recipe does not install as a wheel: \
                     lock again"
                ))
            })?;
            (tree_of(src, &cache_root), format!("[[source]] {source}"))
        } else {
            let commit = w.commit.as_deref().unwrap_or_default();
            git = python
                .packages
                .iter()
                .filter(|r| &r.name == name)
                .find_map(|r| {
                    let (url, _) = stackbuild_recipe::git_dependency(r)?;
                    Some((url, stackbuild_recipe::git_subdirectory(r)))
                })
                // A git package of the project's own lock (`[python] lock`): its URL is there.
                .or_else(|| {
                    let given = stackbuild_python::GivenLock::load(python.lock.as_deref()?).ok()?;
                    Some((given.git_url(name, commit)?, None))
                })
                .ok_or_else(|| {
                    BuildError::Unsupported(format!(
                        "the lock pins {name} to git commit {commit}, but the recipe has no git dependency of \
                         that name: lock again"
                    ))
                })?;
            let tree = stackbuild_python::Tree::Git { url: &git.0, commit, subdirectory: git.1.as_deref() };
            (tree, format!("{name} @ git+{}", git.0))
        };
        let fetch = stackbuild_python::SourceFetch {
            artifacts: &artifact_dir(self.cache),
            memo: None,
            cache: self.cache.root(),
        };
        let made = stackbuild_python::tree_sdist(name, tree, Some(&w.pin.version), fetch)
            .map_err(|e| BuildError::Unsupported(format!("{what}: {e}")))?;
        if made.sha256 != w.sha256 {
            return Err(BuildError::Unsupported(format!(
                "{what}: its tree makes {} with sha256 {}, the lock pins {}: the tree changed since the lock; \
                 lock again (`stackbuild lock`)",
                made.filename, made.sha256, w.sha256
            )));
        }
        Ok(())
    }
}

/// The tree of a `[[source]]` installed as a wheel (`exclude`: the cache, never part of it).
impl PlatformBuilder<'_> {
    /// The CUDA toolchain for a build against the image's locked CUDA runtime, if it has one.
    fn cuda_toolchain(
        &self,
        py: &PythonPlan<'_>,
    ) -> Result<Option<stackbuild_wheelbuild::CudaToolchain>, BuildError> {
        let Some(runtime) = py.wheels.iter().find(|w| {
            matches!(
                w.pin.name.as_ref(),
                "nvidia-cuda-runtime" | "nvidia-cuda-runtime-cu13" | "nvidia-cuda-runtime-cu12"
            )
        }) else {
            return Ok(None);
        };
        let version = runtime.pin.version.to_string();
        if let Some(wheels) = stackbuild_wheelbuild::CudaToolchain::for_runtime(&version) {
            return Ok(Some(wheels));
        }
        if !version.starts_with("12.") {
            return Ok(None);
        }
        let toolkit = debian_mirror(self.recipe)
            .ok_or_else(|| {
                "no Debian mirror in the recipe's `[base] mirror` nor in this machine's apt sources"
                    .to_owned()
            })
            .and_then(|mirror| {
                stackbuild_wheelbuild::debian_cuda12(self.cache, &mirror, debian_arch(self.platform))
                    .map_err(|e| e.to_string())
            });
        match toolkit {
            Ok(t) => {
                if !version.starts_with(&format!("{}.", t.release)) {
                    tracing::info!(
                        "CUDA extensions are compiled with Debian's nvcc {} against the image's CUDA {version}                          (torch accepts another minor of the same major)",
                        t.release
                    );
                }
                Ok(stackbuild_wheelbuild::CudaToolchain::debian(&version, t))
            }
            Err(e) => Err(BuildError::Unsupported(format!(
                "a CUDA 12 extension needs nvcc, and NVIDIA's CUDA 12 wheels do not carry it: {e}"
            ))),
        }
    }
}

/// Resolves and records, for each package of `target` built from source, its build
/// environment: the `[build-system] requires` read from its sdist (nothing of it runs) and the
/// recipe's `extra_requires`, resolved for the image's Python and platform into wheels with
/// their hashes (`[[package.build]]` of the lock). A build then installs exactly those; what a
/// backend asks for beyond them at build time (`get_requires_for_build_wheel`) is resolved then.
///
/// A package whose sdist and requirements are those of `before` (the stale lock this one
/// replaces) keeps the wheels locked there, as its other pins are kept (`prefer`): a pin changed
/// elsewhere in the recipe does not move a build environment, and costs no resolution.
pub(super) fn lock_build_environments(
    python: &PythonSection,
    target: &Target,
    cache: &Cache,
    artifacts: &[Artifact],
    before: Option<&stackbuild_python::Lock>,
    lock: &mut stackbuild_python::Lock,
) -> Result<(), BuildError> {
    let sdists: Vec<&Artifact> =
        artifacts.iter().filter(|a| stackbuild_common::is_sdist(&a.filename)).collect();
    if sdists.is_empty() {
        return Ok(());
    }
    let dir = artifact_dir(cache);
    let memo = pip_settings_dir(cache);
    let resolve = stackbuild_wheelbuild::index_resolver(python, target, &dir, Some(&memo));
    let wheels_of_image: Vec<Artifact> =
        artifacts.iter().filter(|a| !stackbuild_common::is_sdist(&a.filename)).cloned().collect();
    for a in sdists {
        let label = format!("{} {}", a.name, a.version);
        let system = stackbuild_wheelbuild::build_system_recorded(cache.root(), &a.path, &a.sha256)
            .map_err(|e| BuildError::Unsupported(format!("{label}: {e}")))?;
        // A build without isolation has the image's wheels (as the build's runtime: the locked
        // wheels, not the sdists).
        let provided: &[Artifact] =
            if python.build.no_isolation.contains(&a.name) { &wheels_of_image } else { &[] };
        let requires = system.requires_with(&extra_requires(python, &a.name), provided);
        if requires.is_empty() {
            continue;
        }
        // The same sdist for the same Python and glibc, the same requirements.
        let kept = before.filter(|l| l.python == lock.python && l.glibc == lock.glibc).and_then(|l| {
            l.packages_for(target.platform).find(|p| {
                p.name == a.name
                    && p.sha256 == a.sha256
                    && p.build_requires == requires
                    && !p.build.is_empty()
            })
        });
        if let Some(kept) = kept {
            tracing::info!("{label}: build environment as locked before ({} wheel(s))", kept.build.len());
            lock.set_build_locked(target.platform, &a.name, requires, kept.build.clone());
            continue;
        }
        let wheels = resolve(&requires).map_err(|e| {
            BuildError::Unsupported(format!("{label}: its build requirements {requires:?}: {e}"))
        })?;
        tracing::info!(
            "{label}: build environment locked ({} wheel(s) for {})",
            wheels.len(),
            requires.join(", ")
        );
        lock.set_build(target.platform, &a.name, requires, &wheels);
    }
    Ok(())
}

/// The Debian mirror the toolkit comes from: the recipe's `[base] mirror` when it is a URL of a
/// Debian archive, else the first Debian (non-security) URI of this machine's apt sources.
pub(super) fn debian_mirror(recipe: &Recipe) -> Option<String> {
    let given = match &recipe.base {
        Base::Bootstrap(b) => b.mirror.clone().unwrap_or_default(),
        _ => String::new(),
    };
    stackbuild_wheelbuild::debian_mirror(&given)
        .or_else(|| stackbuild_wheelbuild::debian_mirror(&stackbuild_image::host_apt_sources().ok()?))
}

pub(super) fn tree_of<'a>(
    src: &'a stackbuild_recipe::Source,
    exclude: &'a [&'a std::path::Path],
) -> stackbuild_python::Tree<'a> {
    match &src.origin {
        stackbuild_recipe::SourceOrigin::Git { url, commit } => {
            stackbuild_python::Tree::Git { url, commit, subdirectory: None }
        }
        stackbuild_recipe::SourceOrigin::Path { path } => stackbuild_python::Tree::Path { path, exclude },
    }
}

impl PlatformBuilder<'_> {
    /// `TORCH_CUDA_ARCH_LIST` where the recipe gives none: the architectures of the image's own
    /// torch build, read from its fat binaries (`8.0;8.6;9.0+PTX`), so an extension runs on
    /// every GPU torch runs on; `None` without a CUDA torch (torch's `cpp_extension` then picks).
    fn torch_arch_list(&self, py: &PythonPlan<'_>) -> Option<String> {
        let code = py.torch_code(self.cache)?;
        let highest_ptx = code.ptx.iter().next_back().copied();
        let mut list: Vec<String> = code.cubins.iter().map(ToString::to_string).collect();
        match highest_ptx {
            Some(ptx) if code.cubins.contains(&ptx) => {
                if let Some(entry) = list.iter_mut().find(|a| **a == ptx.to_string()) {
                    entry.push_str("+PTX");
                }
            }
            Some(ptx) => list.push(format!("{ptx}+PTX")),
            None => {}
        }
        (!list.is_empty()).then(|| {
            let list = list.join(";");
            tracing::info!("TORCH_CUDA_ARCH_LIST={list}: the torch build's own (set cuda_arch_list in [python.build] to choose)");
            list
        })
    }
}

/// The built wheel, copied into the artifact directory where the layers fetch it from
/// (`artifacts/<sha256>/<file>`).
fn place(cache: &Cache, wheel: &Artifact) -> Result<Artifact, BuildError> {
    let dir = artifact_dir(cache).join(&wheel.sha256);
    let path = dir.join(&wheel.filename);
    if !path.is_file() {
        std::fs::create_dir_all(artifact_dir(cache)).map_err(super::io("creating", &dir))?;
        let tmp = tempfile::Builder::new()
            .prefix(".import-")
            .tempdir_in(artifact_dir(cache))
            .map_err(super::io("creating a directory in", &dir))?;
        std::fs::copy(&wheel.path, tmp.path().join(&wheel.filename))
            .map_err(super::io("copying", &wheel.path))?;
        let kept = tmp.keep();
        if std::fs::rename(&kept, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&kept);
        }
    }
    Ok(Artifact { path, ..wheel.clone() })
}

fn truncate(line: &str, max: usize) -> &str {
    match line.char_indices().nth(max) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}
