//! What the build tests and the benchmark share: a build root of this machine's `/usr`, sdists
//! written on the spot, a fixture cache.
#![allow(dead_code)] // each test file uses its part

use std::path::{Path, PathBuf};
use std::time::Duration;

use stackbuild_cache::Cache;
use stackbuild_common::Platform;
use stackbuild_python::{Artifact, Target};
use stackbuild_wheelbuild::{index_resolver, BuildRoot, Mount, Settings, SourcePackage, WheelBuilder};

/// One disk-heavy build at a time in this test binary: a CUDA test's fixture cache holds torch's
/// wheels and their unpacked build environment (about 12 GB); two side by side filled the disk
/// of a CI machine (`No space left on device` while unpacking triton).
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for the other disk-heavy tests of this binary, then checks that the temporary
/// directory's filesystem has `gib` GiB free; `None` (said, as a skip) when it has not.
pub(crate) fn heavy(gib: u64) -> Option<std::sync::MutexGuard<'static, ()>> {
    let guard = HEAVY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let tmp = std::env::temp_dir();
    let free = test_support::tools::free_bytes(&tmp).unwrap_or(u64::MAX);
    if free < gib << 30 {
        eprintln!("skipped: needs {gib} GiB free in {}, has {} MiB", tmp.display(), free >> 20);
        return None;
    }
    Some(guard)
}

pub(crate) fn ready() -> bool {
    let missing: Vec<&str> =
        ["bwrap", "prlimit", "uv", "gcc"].into_iter().filter(|t| !test_support::tools::have(t)).collect();
    if !missing.is_empty() || !Path::new("/usr/bin/python3.11").exists() {
        eprintln!("skipped: needs {missing:?} and /usr/bin/python3.11 (run .ci/install)");
        return false;
    }
    true
}

/// This machine's `/usr` as a build root: nothing of `/etc`, `/root`, `/home` or `/tmp`.
pub(crate) fn host_usr_root() -> BuildRoot {
    BuildRoot {
        mounts: vec![
            Mount::ReadOnly("/usr".into(), "/usr".into()),
            Mount::Symlink("usr/bin".into(), "/bin".into()),
            Mount::Symlink("usr/lib".into(), "/lib".into()),
            Mount::Symlink("usr/lib64".into(), "/lib64".into()),
        ],
        identity: "host-usr".into(),
        python: "3.11".parse().unwrap(),
    }
}

pub(crate) fn python_section() -> stackbuild_recipe::PythonSection {
    stackbuild_recipe::PythonSection::of("3.11".parse().unwrap(), Vec::new(), None)
}

/// An sdist `name-version.tar.gz` with `files` under `name-version/`.
pub(crate) fn sdist(dir: &Path, name: &str, version: &str, files: &[(&str, &str)]) -> Artifact {
    let path = dir.join(format!("{name}-{version}.tar.gz"));
    let file = std::fs::File::create(&path).unwrap();
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    for (rel, text) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        b.append_data(&mut h, format!("{name}-{version}/{rel}"), text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
    let sha256 = test_support::digest::sha256_file(&path).unwrap();
    Artifact {
        name: name.parse().unwrap(),
        version: version.parse().unwrap(),
        filename: path.file_name().unwrap().to_string_lossy().into_owned(),
        sha256,
        size: std::fs::metadata(&path).unwrap().len(),
        path,
    }
}

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) work: PathBuf,
    pub(crate) cache: Cache,
    pub(crate) root: BuildRoot,
    pub(crate) settings: Settings,
    pub(crate) target: Target,
    pub(crate) python: stackbuild_recipe::PythonSection,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache")).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let settings = Settings {
            memory: 2 << 30,
            timeout: Duration::from_mins(5),
            jobs: 2,
            cuda_arch_list: None,
            epoch: 1_700_000_000,
        };
        let target = Target::new("3.11".parse().unwrap(), Platform::LinuxAmd64);
        Self { _dir: dir, work, cache, root: host_usr_root(), settings, target, python: python_section() }
    }

    pub(crate) fn build(&self, pkg: &SourcePackage<'_>) -> Result<stackbuild_wheelbuild::Built, String> {
        let artifacts = self.cache.root().join("artifacts");
        let resolve = index_resolver(&self.python, &self.target, &artifacts, None);
        let builder = WheelBuilder::new(&self.cache, &self.root, &self.settings, &self.target, &resolve);
        builder.build(pkg, &mut |line| eprintln!("  | {line}")).map_err(|e| e.to_string())
    }
}

pub(crate) fn package(a: &Artifact) -> SourcePackage<'_> {
    SourcePackage {
        name: &a.name,
        version: &a.version,
        sdist: a,
        extra_requires: Vec::new(),
        runtime: Vec::new(),
        cuda: None,
        editable: None,
        env: Vec::new(),
    }
}

pub(crate) fn members(wheel: &Path) -> Vec<String> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    (0..zip.len()).map(|i| zip.by_index(i).unwrap().name().to_owned()).collect()
}

/// The image's torch (2.15.0, CUDA 13) and its CUDA libraries, as a lock would have them, from
/// the machine's index, and the CUDA toolchain of its CUDA runtime.
pub(crate) fn cuda_runtime(f: &Fixture) -> (Vec<Artifact>, stackbuild_wheelbuild::CudaToolchain) {
    let artifacts = f.cache.root().join("artifacts");
    let runtime = index_resolver(&f.python, &f.target, &artifacts, None)(&["torch==2.15.0".to_owned()])
        .expect("torch 2.15.0 and its CUDA 13 wheels from the index");
    let cuda_runtime = runtime
        .iter()
        .find(|a| a.name.as_ref() == "nvidia-cuda-runtime")
        .expect("torch 2.15.0 pulls nvidia-cuda-runtime (CUDA 13)");
    let cuda = stackbuild_wheelbuild::CudaToolchain::for_runtime(&cuda_runtime.version.to_string()).unwrap();
    (runtime, cuda)
}

/// torch 2.8.0 (`PyPI`'s build is CUDA 12.8) and its CUDA 12 wheels, with Debian's CUDA 12
/// toolkit (trixie non-free) assembled in the fixture's cache; `None` (said) when Debian's
/// archive cannot be reached.
pub(crate) fn cuda12_runtime(f: &Fixture) -> Option<(Vec<Artifact>, stackbuild_wheelbuild::CudaToolchain)> {
    let artifacts = f.cache.root().join("artifacts");
    let runtime = index_resolver(&f.python, &f.target, &artifacts, None)(&["torch==2.8.0".to_owned()])
        .expect("torch 2.8.0 and its CUDA 12 wheels from the index");
    let cuda_runtime = runtime
        .iter()
        .find(|a| a.name.as_ref() == "nvidia-cuda-runtime-cu12")
        .expect("torch 2.8.0 pulls nvidia-cuda-runtime-cu12")
        .version
        .to_string();
    let mirror = debian_mirror()?;
    let toolkit = match stackbuild_wheelbuild::debian_cuda12(&f.cache, &mirror, "amd64") {
        Ok(t) => t,
        Err(e) => {
            eprintln!("skipped: Debian's CUDA 12 toolkit cannot be had here: {e}");
            return None;
        }
    };
    Some((runtime, stackbuild_wheelbuild::CudaToolchain::debian(&cuda_runtime, toolkit).unwrap()))
}

/// The first Debian (non-security) mirror of this machine's apt sources.
fn debian_mirror() -> Option<String> {
    let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    for e in std::fs::read_dir("/etc/apt/sources.list.d").into_iter().flatten().flatten() {
        text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    let found = stackbuild_wheelbuild::debian_mirror(&text);
    if found.is_none() {
        eprintln!("skipped: no Debian mirror in this machine's apt sources");
    }
    found
}

/// A CUDA extension's sdist: one kernel that doubles a tensor, and its binding, built with
/// `torch.utils.cpp_extension.CUDAExtension`.
pub(crate) fn cuda_extension(dir: &Path, name: &str, version: &str) -> Artifact {
    let setup = format!(
        "from setuptools import setup\n\
         from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n\
         setup(name='{name}', version='{version}', ext_modules=[CUDAExtension('{name}', ['binding.cpp', 'kernel.cu'])],\n\
               cmdclass={{'build_ext': BuildExtension}})\n"
    );
    sdist(
        dir,
        name,
        version,
        &[
            ("setup.py", &setup),
            (
                "binding.cpp",
                "#include <torch/extension.h>\nvoid twice(torch::Tensor x);\n\
                 PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"twice\", &twice); }\n",
            ),
            (
                "kernel.cu",
                "#include <torch/extension.h>\n\
                 __global__ void k(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }\n\
                 void twice(torch::Tensor x) { int n = x.numel(); k<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n); }\n",
            ),
        ],
    )
}
