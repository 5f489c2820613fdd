//! One package built from source into a wheel: unpack, prepare the build environment, call the
//! backend in the sandbox, check and keep the wheel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pep508_rs::PackageName;
use sha2::Digest as _;
use stackcontract::version::{PackageVersion, PythonVersion};

use stackbuild_cache::{Cache, LayerKey};
use stackbuild_python::{Artifact, Scheme, Target};

use crate::error::{io, WheelBuildError};
use crate::frontend::{Hook, DRIVER};
pub use crate::root::BuildRoot;
use crate::sandbox::{Mount, Sandbox, SandboxError, BUILD_DIR, BWRAP_ARGS, KERNEL_FS};
use crate::sdist::{self, BuildSystem};
use crate::toolkit::DebianCuda;

/// How an environment is laid out (`env/site`, `env/bin`, the CUDA development names): part of
/// its key, changed when the layout does.
const ENV_LAYOUT: u32 = 1;
/// Default time cap of one build: two hours (flash-attn for several architectures on a small
/// machine takes most of that).
const DEFAULT_TIMEOUT_S: u64 = 7200;
/// Most bytes of a hook's `result.json` and of a prepared `METADATA`.
const MAX_RESULT: u64 = 1 << 20;

/// How builds run: caps and the knobs that reach the backend.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Address-space cap of one build, bytes.
    pub memory: u64,
    /// Time cap of one build.
    pub timeout: Duration,
    /// `MAX_JOBS`: parallel compiles.
    pub jobs: u32,
    /// `TORCH_CUDA_ARCH_LIST`.
    pub cuda_arch_list: Option<String>,
    /// `SOURCE_DATE_EPOCH`.
    pub epoch: u64,
}

impl Settings {
    /// From `[python.build]`, the machine's cores and memory where the recipe says nothing: a
    /// memory cap of three quarters of the machine's, and a job per core that leaves at least
    /// 2 GiB to each (nvcc and cicc take one to two each on flash-attn's kernels).
    pub fn new(build: &stackbuild_recipe::BuildSection, epoch: u64) -> Self {
        let total = machine_memory().unwrap_or(8 << 30);
        let memory = build.memory_mib.map_or(total / 4 * 3, |m| m << 20);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let jobs = build.jobs.map_or_else(
            || u32::try_from(cores.min(memory / (2 << 30)).max(1)).unwrap_or(u32::MAX),
            |j| j.max(1),
        );
        Self {
            memory,
            timeout: Duration::from_secs(build.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)),
            jobs,
            cuda_arch_list: build.cuda_arch_list.clone(),
            epoch,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// One package to build.
#[derive(Debug, Clone)]
pub struct SourcePackage<'a> {
    /// Its name.
    pub name: &'a PackageName,
    /// Its version.
    pub version: &'a PackageVersion,
    /// The verified source distribution.
    pub sdist: &'a Artifact,
    /// Build requirements the package does not declare (`extra_requires`).
    pub extra_requires: Vec<String>,
    /// For a build without isolation: the image's locked wheels it may import (torch); empty
    /// for an isolated build.
    pub runtime: Vec<Artifact>,
    /// The CUDA toolchain the build gets (a CUDA extension against the image's torch).
    pub cuda: Option<CudaToolchain>,
    /// Build the editable wheel (PEP 660 `build_editable`) with the project at this absolute
    /// path, where the image has its tree: the wheel's `.pth` (or import finder) points there.
    pub editable: Option<&'a str>,
    /// Variables of its build the recipe sets (`[python.build.env]`), after the build's own.
    pub env: Vec<(String, String)>,
}

/// nvcc and the CUDA headers of one CUDA release. From CUDA 13 on, NVIDIA's wheels on the
/// Python package index carry the whole compiler: `nvidia-cuda-nvcc` (nvcc, cudafe++,
/// fatbinary, nvlink, ptxas), `nvidia-nvvm` (cicc, libdevice), `nvidia-cuda-crt` (the
/// compiler's headers), `nvidia-cuda-runtime` (the runtime's headers and library) and
/// `nvidia-cuda-cccl` (Thrust, CUB, libcu++). CUDA 12's `nvidia-cuda-nvcc-cu12` carries only
/// ptxas and headers, so CUDA 12 extensions get Debian's toolkit ([`crate::debian_cuda12`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaToolchain {
    /// The CUDA major (13): torch's `cpp_extension` refuses an nvcc of another major.
    pub major: u32,
    /// The minor of the image's CUDA runtime: the toolchain of the same release.
    pub minor: u32,
    /// Debian's toolkit, assembled as a `CUDA_HOME`, in place of NVIDIA's wheels.
    pub debian: Option<DebianCuda>,
}

/// Where the sandbox sees Debian's toolkit.
const DEBIAN_CUDA_HOME: &str = "/build/cuda";

impl CudaToolchain {
    /// The toolchain for the image's CUDA runtime `version` (`13.0.96` from the locked
    /// `nvidia-cuda-runtime`), when its wheels have nvcc (CUDA 13 and later).
    pub fn for_runtime(version: &str) -> Option<Self> {
        let (major, minor) = major_minor(version)?;
        (major >= 13).then_some(Self { major, minor, debian: None })
    }

    /// The toolchain for a CUDA 12 runtime `version` (`12.8.90` from `nvidia-cuda-runtime-cu12`):
    /// Debian's `toolkit`, whose nvcc may be of another minor (torch only warns).
    pub fn debian(version: &str, toolkit: DebianCuda) -> Option<Self> {
        let (major, minor) = major_minor(version)?;
        (major == 12).then_some(Self { major, minor, debian: Some(toolkit) })
    }

    /// The requirements that install it (none for Debian's: it is mounted, not installed).
    pub fn requirements(&self) -> Vec<String> {
        if self.debian.is_some() {
            return Vec::new();
        }
        let release = format!("{}.{}.*", self.major, self.minor);
        ["nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime"]
            .iter()
            .map(|name| format!("{name}=={release}"))
            // CCCL has its own numbering (13.3.5.0.6 beside CUDA 13.2): the major's newest.
            .chain(std::iter::once(format!("nvidia-cuda-cccl>={}.0,<{}", self.major, self.major + 1)))
            .collect()
    }

    /// What identifies it in a key: the wheels' requirements, or Debian's packages.
    fn identity(&self) -> String {
        match &self.debian {
            Some(d) => format!("debian {}", d.identity),
            None => self.requirements().join(","),
        }
    }

    /// `CUDA_HOME` inside the sandbox.
    fn home(&self) -> String {
        if self.debian.is_some() {
            DEBIAN_CUDA_HOME.to_owned()
        } else {
            // The toolchain wheels lay out one CUDA tree under site-packages
            // (`nvidia/cu13/{bin,include,lib,nvvm}`).
            format!("{BUILD_DIR}/env/site/nvidia/cu{}", self.major)
        }
    }
}

fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

impl SourcePackage<'_> {
    fn label(&self) -> String {
        format!("{} {}", self.name, self.version)
    }
}

/// Resolves build requirements for the target into verified wheels.
pub type ResolveRequires<'a> = dyn Fn(&[String]) -> Result<Vec<Artifact>, String> + Sync + 'a;

/// A wheel built (or found built) from source.
#[derive(Debug, Clone)]
pub struct Built {
    /// The wheel, in the cache.
    pub wheel: Artifact,
    /// Whether this run compiled it (not found in the cache).
    pub compiled: bool,
    /// The build's whole log.
    pub log: PathBuf,
}

/// The inputs of a built wheel, its key: every input that can change the wheel's bytes.
#[derive(Debug, serde::Serialize)]
pub struct BuiltWheelKey<'a> {
    /// The sdist's sha256 and file name.
    sdist: (&'a str, &'a str),
    /// The build root (base, interpreter, compilers, headers).
    root: &'a str,
    /// The target it is built for.
    target: String,
    /// The build environment's wheels: file name and sha256, sorted (the build requirements,
    /// and for a build without isolation the runtime wheels it imports).
    environment: Vec<(String, String)>,
    /// The backend and its path (`[build-system]`).
    build_system: &'a BuildSystem,
    /// The whole environment of the backend but `MAX_JOBS` (which changes the order compiles run
    /// in, not what they produce): `SOURCE_DATE_EPOCH`, `TORCH_CUDA_ARCH_LIST`, `PATH`.
    env: Vec<(String, String)>,
    /// The frontend's code.
    driver: String,
    /// The CUDA toolchain: NVIDIA's wheels (in `environment`) or Debian's packages.
    toolchain: Option<String>,
    /// Where an editable wheel's project is (its paths are in the wheel).
    editable: Option<&'a str>,
    /// The sandbox's options and where the build directory is (paths are compiled in).
    sandbox: (&'static [&'static str], &'static [&'static str], &'static str),
}

/// What a built wheel's `METADATA` is recorded by for resolution ([`WheelBuilder::metadata`]):
/// the inputs of a metadata request that can change what the backend says the package is and
/// requires. The build environment is left out but for the torch a build without isolation
/// imports (deepspeed's requirements are decided with it importable); the toolchain is left out
/// (a metadata request has none). So a lock made again after a build (one pin changed) takes the
/// built wheel's own metadata, as pip does, instead of preparing it in the sandbox again (40 s
/// for deepspeed, which installs torch's environment to say what it needs).
#[derive(Debug, serde::Serialize)]
struct BuiltMetadataKey<'a> {
    sdist: (&'a str, &'a str),
    root: &'a str,
    target: String,
    extra_requires: &'a [String],
    env: &'a [(String, String)],
    /// The torch wheel of a build without isolation: file name and sha256.
    torch: Option<(&'a str, &'a str)>,
}

/// Builds packages from source for one target on one build root.
pub struct WheelBuilder<'a> {
    cache: &'a Cache,
    root: &'a BuildRoot,
    settings: &'a Settings,
    target: &'a Target,
    resolve: &'a ResolveRequires<'a>,
}

/// A prepared build directory: the unpacked project, its build system, the installed environment.
struct Prepared {
    work: tempfile::TempDir,
    /// The unpacked project on this machine.
    project: PathBuf,
    project_in_sandbox: String,
    system: BuildSystem,
    /// The build requirements resolved into `environment`.
    requires: Vec<String>,
    /// The wheels of the build environment.
    environment: Vec<Artifact>,
    /// Where they are installed, mounted read-only at `/build/env`.
    env_dir: Option<std::path::PathBuf>,
}

impl<'a> WheelBuilder<'a> {
    /// A builder; `resolve` turns build requirements into wheels for `target`.
    pub fn new(
        cache: &'a Cache,
        root: &'a BuildRoot,
        settings: &'a Settings,
        target: &'a Target,
        resolve: &'a ResolveRequires<'a>,
    ) -> Self {
        Self { cache, root, settings, target, resolve }
    }

    /// The wheel of `pkg`: from the cache when it was built before with the same inputs, else
    /// built now in the sandbox. `on_line` sees the backend's output lines.
    pub fn build(
        &self,
        pkg: &SourcePackage<'_>,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<Built, WheelBuildError> {
        let mut prepared = self.prepare(pkg)?;
        let key = self.key(pkg, &prepared);
        let dir = self.cache.root().join("built-wheels").join(key.as_hex());
        let log = self.cache.root().join("built-wheels").join(format!("{}.log", key.as_hex()));
        if let Some(wheel) = Self::cached(pkg, &dir)? {
            tracing::info!("{}: built before ({})", pkg.label(), wheel.filename);
            self.record_built_metadata(pkg, &wheel.path);
            return Ok(Built { wheel, compiled: false, log });
        }
        // Built on another machine: the layer store's record of the key, here or on the
        // `--cache-registry` remote.
        if crate::share::restore(self.cache, &key, &dir)? {
            if let Some(wheel) = Self::cached(pkg, &dir)? {
                tracing::info!(
                    "{}: built before, shared through the cache ({})",
                    pkg.label(),
                    wheel.filename
                );
                return Ok(Built { wheel, compiled: false, log });
            }
        }
        self.complete(pkg, &mut prepared, on_line)?;
        let out = prepared.work.path().join("out");
        std::fs::create_dir_all(&out).map_err(io("creating", &out))?;
        tracing::info!("{}: building a wheel from {}", pkg.label(), pkg.sdist.filename);
        let run_log = prepared.work.path().join("log");
        let hook = if pkg.editable.is_some() { Hook::Editable } else { Hook::Wheel };
        let result = self.run_hook(pkg, &prepared, hook, &run_log, on_line);
        // The log is kept whatever happened: a failure names it.
        if let Some(parent) = log.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        let _ = std::fs::copy(&run_log, &log);
        result.map_err(|e| relabel_log(e, &log))?;
        let name = result_wheel(&out, &pkg.label())?;
        let wheel_path = out.join(&name);
        self.check_wheel(pkg, &name)?;
        let sha256 = stackbuild_common::sha256_file(&wheel_path).map_err(io("hashing", &wheel_path))?;
        let staged = prepared.work.path().join("keep");
        std::fs::create_dir_all(&staged).map_err(io("creating", &staged))?;
        std::fs::rename(&wheel_path, staged.join(&name)).map_err(io("moving", &wheel_path))?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        if std::fs::rename(&staged, &dir).is_err() && !dir.is_dir() {
            return Err(io("placing", &dir)(std::io::Error::other("rename failed")));
        }
        let wheel = Self::cached(pkg, &dir)?.ok_or_else(|| WheelBuildError::Output {
            package: pkg.label(),
            problem: format!("the built wheel is not in {}", dir.display()),
        })?;
        if wheel.sha256 != sha256 {
            tracing::info!("{}: another build placed {} first; using it", pkg.label(), wheel.filename);
        }
        if let Err(e) = crate::share::store(self.cache, &key, &wheel.path, &wheel.filename) {
            tracing::warn!("{}: the built wheel is not shared through the cache: {e}", pkg.label());
        }
        self.record_built_metadata(pkg, &wheel.path);
        Ok(Built { wheel, compiled: true, log })
    }

    /// The core metadata (`METADATA`) of `pkg`, prepared in the sandbox by its backend
    /// (`prepare_metadata_for_build_wheel`), for resolution; kept in the cache by the key a
    /// built wheel would have.
    pub fn metadata(
        &self,
        pkg: &SourcePackage<'_>,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<String, WheelBuildError> {
        // Recorded by the inputs known before anything is resolved: a lock made again does not
        // install a build environment to learn what it learned before.
        let mut runtime: Vec<(&str, &str)> =
            pkg.runtime.iter().map(|a| (a.filename.as_str(), a.sha256.as_str())).collect();
        runtime.sort_unstable();
        let key = LayerKey::of(
            "sdist-metadata",
            &(
                (&pkg.sdist.sha256, &pkg.sdist.filename),
                &self.root.identity,
                self.target.to_string(),
                &pkg.extra_requires,
                &pkg.env,
                runtime,
                pkg.cuda.as_ref().map(CudaToolchain::identity),
                hex::encode(sha2::Sha256::digest(DRIVER)),
            ),
        );
        let record = self.cache.root().join("facts").join(format!("sdist-metadata-{}", key.as_hex()));
        if let Ok(text) = std::fs::read_to_string(&record) {
            return Ok(text);
        }
        if let Ok(text) = std::fs::read_to_string(self.built_metadata_record(pkg)) {
            return Ok(text);
        }
        let mut prepared = self.prepare(pkg)?;
        self.complete(pkg, &mut prepared, on_line)?;
        let out = prepared.work.path().join("out");
        std::fs::create_dir_all(&out).map_err(io("creating", &out))?;
        let log = prepared.work.path().join("log");
        self.run_hook(pkg, &prepared, Hook::Metadata, &log, on_line)?;
        let result: serde_json::Value = read_result(&out, &pkg.label())?;
        let text = if let Some(dist_info) = result.get("dist_info").and_then(|d| d.as_str()) {
            let path = out.join(safe_name(dist_info, &pkg.label())?).join("METADATA");
            let bytes = stackbuild_common::read_capped(&path, MAX_RESULT, "METADATA")
                .map_err(|e| output(&pkg.label(), e.to_string()))?;
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let name = result.get("wheel").and_then(|w| w.as_str()).unwrap_or_default();
            let path = out.join(safe_name(name, &pkg.label())?);
            let file = stackbuild_common::open_regular(&path, "wheel")
                .map_err(|e| output(&pkg.label(), e.to_string()))?;
            let mut zip = zip::ZipArchive::new(file).map_err(|e| output(&pkg.label(), e.to_string()))?;
            stackbuild_python::dist_info_metadata(&mut zip, MAX_RESULT)
                .map_err(|e| output(&pkg.label(), e))?
                .1
        };
        if let Some(parent) = record.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        stackbuild_common::write_atomic(&record, text.as_bytes()).map_err(io("writing", &record))?;
        Ok(text)
    }

    /// Where the `METADATA` of `pkg`'s built wheel is recorded ([`BuiltMetadataKey`]).
    fn built_metadata_record(&self, pkg: &SourcePackage<'_>) -> PathBuf {
        let key = LayerKey::of(
            "built-wheel-metadata",
            &BuiltMetadataKey {
                sdist: (&pkg.sdist.sha256, &pkg.sdist.filename),
                root: &self.root.identity,
                target: self.target.to_string(),
                extra_requires: &pkg.extra_requires,
                env: &pkg.env,
                torch: pkg
                    .runtime
                    .iter()
                    .find(|a| a.name.as_ref() == "torch")
                    .map(|a| (a.filename.as_str(), a.sha256.as_str())),
            },
        );
        self.cache.root().join("facts").join(format!("built-wheel-metadata-{}", key.as_hex()))
    }

    /// Records the `METADATA` of `pkg`'s built `wheel` for a later resolution, once.
    fn record_built_metadata(&self, pkg: &SourcePackage<'_>, wheel: &Path) {
        let record = self.built_metadata_record(pkg);
        if record.is_file() {
            return;
        }
        let read = stackbuild_common::open_regular(wheel, "wheel")
            .map_err(|e| e.to_string())
            .and_then(|file| {
                let mut zip =
                    zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| e.to_string())?;
                stackbuild_python::dist_info_metadata(&mut zip, MAX_RESULT)
            })
            .and_then(|(_, text)| {
                let parent = record.parent().ok_or("no parent")?;
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                stackbuild_common::write_atomic(&record, text.as_bytes()).map_err(|e| e.to_string())
            });
        if let Err(e) = read {
            tracing::debug!("{}: its built wheel's METADATA is not recorded: {e}", pkg.label());
        }
    }

    fn key(&self, pkg: &SourcePackage<'_>, prepared: &Prepared) -> LayerKey {
        let mut environment: Vec<(String, String)> =
            prepared.environment.iter().map(|a| (a.filename.clone(), a.sha256.clone())).collect();
        environment.sort();
        environment.dedup();
        let env = self.env(pkg, false);
        LayerKey::of(
            "built-wheel",
            &BuiltWheelKey {
                sdist: (&pkg.sdist.sha256, &pkg.sdist.filename),
                root: &self.root.identity,
                target: self.target.to_string(),
                environment,
                build_system: &prepared.system,
                env,
                driver: hex::encode(sha2::Sha256::digest(DRIVER)),
                toolchain: pkg.cuda.as_ref().map(CudaToolchain::identity),
                editable: pkg.editable,
                sandbox: (&BWRAP_ARGS, &KERNEL_FS, BUILD_DIR),
            },
        )
    }

    /// Makes `dest` exist in a build root mounted read-only as `/` (bwrap cannot make a mount
    /// point there): an empty directory, made without following any link of the root, since an
    /// absolute link in it would lead out to this machine's files.
    fn mount_point(&self, dest: &str) -> Result<(), WheelBuildError> {
        let Some(root) = self.root.mounts.iter().find_map(|m| match m {
            Mount::ReadOnly(host, inside) if inside == "/" => Some(host),
            _ => None,
        }) else {
            return Ok(());
        };
        let mut at = root.clone();
        for part in Path::new(dest).components() {
            let std::path::Component::Normal(part) = part else { continue };
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(output(
                        dest,
                        format!(
                            "the build root has a link or file at {}, where the editable project goes",
                            at.display()
                        ),
                    ))
                }
                Err(_) => std::fs::create_dir(&at).map_err(io("creating", &at))?,
            }
        }
        Ok(())
    }

    /// The wheel kept in `dir`, verified, if there is one.
    fn cached(pkg: &SourcePackage<'_>, dir: &Path) -> Result<Option<Artifact>, WheelBuildError> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Ok(None) };
        let files: Vec<_> = entries.filter_map(Result::ok).collect();
        let [entry] = files.as_slice() else { return Ok(None) };
        let filename = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        if !meta.is_file() || stackbuild_common::parse_wheel_name(&filename).is_none() {
            return Ok(None);
        }
        let sha256 = recorded_sha256(&path)?;
        Ok(Some(Artifact {
            name: pkg.name.clone(),
            version: pkg.version.clone(),
            filename,
            sha256,
            size: meta.len(),
            path,
        }))
    }

    /// Unpacks the sdist and resolves the build requirements its `[build-system]` declares (with
    /// the recipe's `extra_requires` and the CUDA toolchain), nothing installed or run yet: what
    /// a built wheel's key is made of.
    fn prepare(&self, pkg: &SourcePackage<'_>) -> Result<Prepared, WheelBuildError> {
        let tmp = self.cache.root().join("tmp");
        std::fs::create_dir_all(&tmp).map_err(io("creating", &tmp))?;
        let work = tempfile::Builder::new()
            .prefix("wheelbuild-")
            .tempdir_in(&tmp)
            .map_err(io("creating a directory in", &tmp))?;
        // Read from the archive: unpacked only when something is built (`unpack`).
        let system = sdist::build_system_recorded(self.cache.root(), &pkg.sdist.path, &pkg.sdist.sha256)
            .map_err(|source| WheelBuildError::Sdist { package: pkg.label(), source })?;
        let mut requires = system.requires_with(&pkg.extra_requires, &pkg.runtime);
        if let Some(cuda) = &pkg.cuda {
            requires.extend(cuda.requirements());
        }
        let mut prepared = Prepared {
            project: PathBuf::new(),
            work,
            project_in_sandbox: String::new(),
            system,
            requires: Vec::new(),
            environment: Vec::new(),
            env_dir: None,
        };
        self.resolve_environment(pkg, &mut prepared, requires)?;
        Ok(prepared)
    }

    /// Unpacks the sdist into the work directory, and checks that its project declares the
    /// build system the key was made of.
    fn unpack(pkg: &SourcePackage<'_>, prepared: &mut Prepared) -> Result<(), WheelBuildError> {
        let sdist_error = |source| WheelBuildError::Sdist { package: pkg.label(), source };
        let src = prepared.work.path().join("src");
        let project = sdist::unpack(&pkg.sdist.path, &src).map_err(sdist_error)?;
        let system = sdist::build_system(&project).map_err(sdist_error)?;
        if system != prepared.system {
            return Err(output(
                &pkg.label(),
                "its unpacked pyproject.toml declares another [build-system] than the archive's member"
                    .to_owned(),
            ));
        }
        let rel = project.strip_prefix(prepared.work.path()).unwrap_or(Path::new("src"));
        // An editable build runs with the project where the image has it: the backend writes
        // that path into the wheel.
        prepared.project_in_sandbox =
            pkg.editable.map_or_else(|| format!("{BUILD_DIR}/{}", rel.display()), str::to_owned);
        prepared.project = project;
        Ok(())
    }

    /// Installs the environment, then asks the backend what else it needs (PEP 517's
    /// `get_requires_for_build_wheel`: setuptools < 70.1 asks for `wheel`, scikit-build for
    /// cmake) and installs that too.
    fn complete(
        &self,
        pkg: &SourcePackage<'_>,
        prepared: &mut Prepared,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<(), WheelBuildError> {
        Self::unpack(pkg, prepared)?;
        self.install_environment(pkg, prepared)?;
        let out = prepared.work.path().join("requires");
        std::fs::create_dir_all(&out).map_err(io("creating", &out))?;
        let log = prepared.work.path().join("requires.log");
        let requires = if pkg.editable.is_some() { Hook::RequiresEditable } else { Hook::Requires };
        self.run_hook_in(pkg, prepared, requires, "requires", &log, on_line)?;
        let more: Vec<String> = read_result(&out, &pkg.label())?;
        let have: Vec<String> = prepared.environment.iter().map(|a| a.name.to_string()).collect();
        let missing: Vec<String> = more
            .into_iter()
            .filter(|r| {
                <pep508_rs::Requirement<pep508_rs::VerbatimUrl> as std::str::FromStr>::from_str(r)
                    .ok()
                    .is_none_or(|req| !have.contains(&req.name.to_string()))
            })
            .collect();
        if !missing.is_empty() {
            let mut requires = prepared.requires.clone();
            requires.extend(missing);
            self.resolve_environment(pkg, prepared, requires)?;
            self.install_environment(pkg, prepared)?;
        }
        Ok(())
    }

    /// The wheels of the build environment: `requires` resolved for the target, and the runtime
    /// wheels of a build without isolation, which win over a build requirement of the same name
    /// (pip's `--no-build-isolation` sees the installed numpy, not another).
    fn resolve_environment(
        &self,
        pkg: &SourcePackage<'_>,
        prepared: &mut Prepared,
        requires: Vec<String>,
    ) -> Result<(), WheelBuildError> {
        let wheels = if requires.is_empty() {
            Vec::new()
        } else {
            (self.resolve)(&requires).map_err(|message| WheelBuildError::Requires {
                package: pkg.label(),
                requires: requires.clone(),
                message,
            })?
        };
        let mut environment: Vec<Artifact> = pkg.runtime.clone();
        for wheel in wheels {
            if !environment.iter().any(|a| a.name == wheel.name) {
                environment.push(wheel);
            }
        }
        prepared.requires = requires;
        prepared.environment = environment;
        Ok(())
    }

    /// The build environment of `prepared`: installed once per set of wheels into the cache
    /// (`build-envs/<key>/env`), and mounted read-only at `/build/env` in every build that uses
    /// the same set. torch and its CUDA libraries take half a minute to install; a second
    /// package built against them, or the same one again, does not pay it again.
    fn install_environment(
        &self,
        pkg: &SourcePackage<'_>,
        prepared: &mut Prepared,
    ) -> Result<(), WheelBuildError> {
        let mut wheels: Vec<(&str, &str)> =
            prepared.environment.iter().map(|a| (a.filename.as_str(), a.sha256.as_str())).collect();
        wheels.sort_unstable();
        let scheme = env_scheme(&self.root.python);
        let key = LayerKey::of(
            "build-env",
            &(wheels, &scheme.interpreter, pkg.cuda.as_ref().map(|c| c.major), ENV_LAYOUT),
        );
        let parent = self.cache.root().join("build-envs");
        let dir = parent.join(key.as_hex());
        if !dir.join(".complete").is_file() {
            std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
            let tmp = tempfile::Builder::new()
                .prefix(".install-")
                .tempdir_in(&parent)
                .map_err(io("creating a directory in", &parent))?;
            let env = tmp.path().join("env");
            std::fs::create_dir_all(env.join("site")).map_err(io("creating", &env))?;
            std::fs::create_dir_all(env.join("bin")).map_err(io("creating", &env))?;
            crate::environment::install(&prepared.environment, &scheme, tmp.path(), &pkg.label())?;
            if let Some(cuda) = pkg.cuda.as_ref().filter(|c| c.debian.is_none()) {
                link_development_names(&env.join("site").join(format!("nvidia/cu{}/lib", cuda.major)))?;
            }
            std::fs::write(tmp.path().join(".complete"), b"").map_err(io("writing", tmp.path()))?;
            let done = tmp.keep();
            if std::fs::rename(&done, &dir).is_err() {
                // Another build installed the same set meanwhile: use its copy.
                let _ = std::fs::remove_dir_all(&done);
            }
        }
        let mount = prepared.work.path().join("env");
        std::fs::create_dir_all(&mount).map_err(io("creating", &mount))?;
        if pkg.cuda.as_ref().is_some_and(|c| c.debian.is_some()) {
            let cuda = prepared.work.path().join("cuda");
            std::fs::create_dir_all(&cuda).map_err(io("creating", &cuda))?;
        }
        prepared.env_dir = Some(dir.join("env"));
        Ok(())
    }

    /// The backend's environment: nothing of stackbuild's own.
    fn env(&self, pkg: &SourcePackage<'_>, with_jobs: bool) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            (
                "PATH",
                format!("{BUILD_DIR}/env/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            ),
            ("PYTHONPATH", format!("{BUILD_DIR}/env/site")),
            ("HOME", "/tmp".to_owned()),
            ("TMPDIR", "/tmp".to_owned()),
            ("LC_ALL", "C.UTF-8".to_owned()),
            ("PYTHONHASHSEED", "0".to_owned()),
            ("PYTHONDONTWRITEBYTECODE", "1".to_owned()),
            ("SOURCE_DATE_EPOCH", self.settings.epoch.to_string()),
            // Whatever the backend hands pip, it has no index to reach.
            ("PIP_NO_INDEX", "1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if let Some(arch) = &self.settings.cuda_arch_list {
            env.push(("TORCH_CUDA_ARCH_LIST".to_owned(), arch.clone()));
        }
        if let Some(cuda) = &pkg.cuda {
            // The CUDA_HOME that `torch.utils.cpp_extension` looks for nvcc in.
            let home = cuda.home();
            env[0].1 = format!("{home}/bin:{}", env[0].1);
            env.push(("CUDA_HOME".to_owned(), home.clone()));
            env.push(("CUDA_PATH".to_owned(), home));
            // The sandbox has no GPU, so `torch.cuda.is_available()` is false: setup scripts
            // that gate their CUDA kernels on it take FORCE_CUDA=1 as the override (detectron2,
            // mmcv, pytorch3d: the same variable their Docker builds set).
            env.push(("FORCE_CUDA".to_owned(), "1".to_owned()));
        }
        if with_jobs {
            env.push(("MAX_JOBS".to_owned(), self.settings.jobs.to_string()));
            env.push(("CMAKE_BUILD_PARALLEL_LEVEL".to_owned(), self.settings.jobs.to_string()));
        }
        // The list the recipe's validation refuses is this one's (`[python.build.env]`).
        debug_assert!(env.iter().all(|(k, _)| stackbuild_common::BUILD_OWN_ENV.contains(&k.as_str())));
        env.extend(pkg.env.iter().cloned());
        env
    }

    fn run_hook(
        &self,
        pkg: &SourcePackage<'_>,
        prepared: &Prepared,
        hook: Hook,
        log: &Path,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<(), SandboxError> {
        self.run_hook_in(pkg, prepared, hook, "out", log, on_line).map_err(|e| match e {
            WheelBuildError::Sandbox(s) => s,
            other => SandboxError::Start(other.to_string()),
        })
    }

    fn run_hook_in(
        &self,
        pkg: &SourcePackage<'_>,
        prepared: &Prepared,
        hook: Hook,
        out: &str,
        log: &Path,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<(), WheelBuildError> {
        let python = format!("/usr/bin/python{}.{}", self.root.python.part(0), self.root.python.part(1));
        let argv = vec![
            python,
            "-s".to_owned(),
            "-c".to_owned(),
            DRIVER.to_owned(),
            hook.arg().to_owned(),
            prepared.project_in_sandbox.clone(),
            format!("{BUILD_DIR}/{out}"),
            prepared.system.backend.clone(),
            serde_json::to_string(&prepared.system.backend_path).unwrap_or_else(|_| "[]".to_owned()),
        ];
        if let Some(dest) = pkg.editable {
            self.mount_point(dest)?;
        }
        let sandbox = Sandbox {
            root: self.root.mounts.clone(),
            over_build: prepared
                .env_dir
                .iter()
                .map(|d| Mount::ReadOnly(d.clone(), format!("{BUILD_DIR}/env")))
                .chain(
                    pkg.cuda
                        .as_ref()
                        .and_then(|c| c.debian.as_ref())
                        .map(|d| Mount::ReadOnly(d.home.clone(), DEBIAN_CUDA_HOME.to_owned())),
                )
                .chain(pkg.editable.map(|dest| Mount::Writable(prepared.project.clone(), dest.to_owned())))
                .collect(),
            build_dir: prepared.work.path().to_owned(),
            memory: self.settings.memory,
            timeout: self.settings.timeout,
        };
        let what = match hook {
            Hook::Requires | Hook::RequiresEditable => {
                format!("asking {}'s build backend what it needs", pkg.label())
            }
            Hook::Editable => format!("building {}'s editable wheel (PEP 660)", pkg.label()),
            Hook::Metadata => format!("preparing the metadata of {}", pkg.label()),
            Hook::Wheel => format!("building {}", pkg.label()),
        };
        sandbox.run(&what, &argv, &self.env(pkg, true), log, on_line).map_err(|e| {
            // The build directory goes; its log stays where the error says.
            let dir = self.cache.root().join("built-wheels").join("failed");
            let kept = dir.join(format!("{}-{}-{}.log", pkg.name, pkg.version, hook.arg()));
            if std::fs::create_dir_all(&dir).is_ok() && std::fs::copy(log, &kept).is_ok() {
                relabel_log(e, &kept)
            } else {
                WheelBuildError::Sandbox(e)
            }
        })?;
        Ok(())
    }

    /// The wheel the backend wrote must be the package's, for the target.
    fn check_wheel(&self, pkg: &SourcePackage<'_>, name: &str) -> Result<(), WheelBuildError> {
        let parsed = stackbuild_common::parse_wheel_name(name).ok_or_else(|| {
            output(&pkg.label(), format!("the backend returned {name:?}, not a wheel file name"))
        })?;
        if &parsed.name != pkg.name || &parsed.version != pkg.version {
            return Err(output(
                &pkg.label(),
                format!("the backend built {name}, which is not {}", pkg.label()),
            ));
        }
        if parsed.rank(&self.target.python, &self.target.platform_tags()).is_none() {
            return Err(output(&pkg.label(), format!("the built wheel {name} does not fit {}", self.target)));
        }
        Ok(())
    }
}

/// `libcudart.so` -> `libcudart.so.13` for every versioned library in `lib`: a wheel cannot hold
/// symlinks, so NVIDIA's runtime wheels carry only the names the loader asks for, and the linker
/// (`-lcudart`, as `torch.utils.cpp_extension` links) needs the development name.
fn link_development_names(lib: &Path) -> Result<(), WheelBuildError> {
    let Ok(entries) = std::fs::read_dir(lib) else { return Ok(()) };
    for entry in entries {
        let entry = entry.map_err(io("listing", lib))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((stem, version)) = name.split_once(".so.") else { continue };
        if stem.is_empty() || version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            continue;
        }
        let link = lib.join(format!("{stem}.so"));
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(&name, &link).map_err(io("linking", &link))?;
        }
    }
    Ok(())
}

/// Where the build environment's wheels go: `/env/site` of the build directory.
fn env_scheme(python: &PythonVersion) -> Scheme {
    let env = format!("{BUILD_DIR}/env");
    let _ = env;
    Scheme {
        purelib: "/env/site".to_owned(),
        platlib: "/env/site".to_owned(),
        scripts: "/env/bin".to_owned(),
        data: "/env".to_owned(),
        headers: "/env/include/{name}".to_owned(),
        interpreter: format!("/usr/bin/python{}.{}", python.part(0), python.part(1)),
    }
}

fn output(package: &str, problem: impl Into<String>) -> WheelBuildError {
    WheelBuildError::Output { package: package.to_owned(), problem: problem.into() }
}

/// A name the backend returned must be a plain file name in the output directory.
fn safe_name<'n>(name: &'n str, package: &str) -> Result<&'n str, WheelBuildError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(output(package, format!("the backend returned {name:?}, not a file name")));
    }
    Ok(name)
}

fn read_result<T: serde::de::DeserializeOwned>(out: &Path, package: &str) -> Result<T, WheelBuildError> {
    let path = out.join("result.json");
    let bytes = stackbuild_common::read_capped(&path, MAX_RESULT, "build result")
        .map_err(|e| output(package, format!("the build backend left no result: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| output(package, format!("{}: {e}", path.display())))
}

fn result_wheel(out: &Path, package: &str) -> Result<String, WheelBuildError> {
    let result: serde_json::Value = read_result(out, package)?;
    let name = result.get("wheel").and_then(|w| w.as_str()).unwrap_or_default();
    Ok(safe_name(name, package)?.to_owned())
}

/// A failure names the kept log, not the one in the removed build directory.
fn relabel_log(e: SandboxError, kept: &Path) -> WheelBuildError {
    let kept = kept.display().to_string();
    WheelBuildError::Sandbox(match e {
        SandboxError::Failed { what, status, tail, hint, .. } => {
            SandboxError::Failed { what, status, tail, log: kept, hint }
        }
        SandboxError::Timeout { what, secs, .. } => SandboxError::Timeout { what, secs, log: kept },
        other => other,
    })
}

/// Build requirements resolved and fetched from the recipe's indexes: wheels only (a build
/// requirement built from source would need a build of its own first; none of the common
/// backends lacks a wheel), for `target`, verified by sha256 into `artifacts`.
pub fn index_resolver<'a>(
    python: &'a stackbuild_recipe::PythonSection,
    target: &'a Target,
    artifacts: &'a Path,
    memo: Option<&'a Path>,
) -> impl Fn(&[String]) -> Result<Vec<Artifact>, String> + Sync + 'a {
    move |requires: &[String]| {
        let mut packages = Vec::new();
        for r in requires {
            let req = <pep508_rs::Requirement<pep508_rs::VerbatimUrl> as std::str::FromStr>::from_str(r)
                .map_err(|e| format!("{r:?} is not a requirement: {e}"))?;
            packages.push(req);
        }
        let section = stackbuild_recipe::PythonSection::of(python.version.clone(), packages, Some(python));
        let pins = stackbuild_python::resolve(&section, target, &[]).map_err(|e| e.to_string())?;
        stackbuild_python::fetch_wheels(&pins, target, section.sources(), artifacts, memo)
            .map_err(|e| e.to_string())
    }
}

/// The sha256 of the built wheel at `path`: from the record the cache keeps on a file it hashed
/// before ([`stackbuild_cache::stamp`]: the digest with the file's size and modification time),
/// else hashed and recorded. A rebuild with nothing changed then reads an attribute per built
/// wheel instead of every built wheel's bytes.
fn recorded_sha256(path: &Path) -> Result<String, WheelBuildError> {
    let file = std::fs::File::open(path).map_err(io("opening", path))?;
    let valid = |hex: &String| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(hex) = stackbuild_cache::stamp::recorded(&file).filter(valid) {
        return Ok(hex);
    }
    let before = stackbuild_cache::stamp::Identity::of(&file);
    let (digest, _) = stackbuild_common::sha256_reader(&file).map_err(io("hashing", path))?;
    let sha256 = digest.trim_start_matches("sha256:").to_owned();
    if let Some(before) = before {
        stackbuild_cache::stamp::record_verified(&file, before, &sha256);
    }
    Ok(sha256)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built wheel is hashed once while it is unchanged: the cache's record on the file answers
    /// after, and a write to the file ends it.
    #[test]
    fn a_built_wheels_sha256_is_recorded_on_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("demo-1.0-py3-none-any.whl");
        std::fs::write(&wheel, b"one").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_mins(1);
        std::fs::File::options().write(true).open(&wheel).unwrap().set_modified(old).unwrap();
        let first = recorded_sha256(&wheel).unwrap();
        assert_eq!(first, stackbuild_common::sha256_file(&wheel).unwrap());
        let file = std::fs::File::open(&wheel).unwrap();
        if stackbuild_cache::stamp::recorded(&file).is_none() {
            eprintln!("skipped: this file system keeps no user extended attributes");
            return;
        }
        std::fs::write(&wheel, b"two").unwrap();
        assert_eq!(recorded_sha256(&wheel).unwrap(), stackbuild_common::sha256_file(&wheel).unwrap());
    }
}
