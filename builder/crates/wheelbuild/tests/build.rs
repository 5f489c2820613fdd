//! Packages built from source in the sandbox, on a build root made of this machine's `/usr`
//! (Debian bookworm: python3.11, gcc, the Python headers), with build requirements resolved by
//! uv from the machine's index: a pure-Python sdist, a C extension, a second build that compiles
//! nothing, and build scripts that try to leave the sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use stackbuild_cache::Cache;
use stackbuild_common::Platform;
use stackbuild_python::{Artifact, Target};
use stackbuild_wheelbuild::{index_resolver, BuildRoot, Mount, Settings, SourcePackage, WheelBuilder};

fn ready() -> bool {
    let missing: Vec<&str> =
        ["bwrap", "prlimit", "uv", "gcc"].into_iter().filter(|t| !test_support::tools::have(t)).collect();
    if !missing.is_empty() || !Path::new("/usr/bin/python3.11").exists() {
        eprintln!("skipped: needs {missing:?} and /usr/bin/python3.11 (run .ci/install)");
        return false;
    }
    true
}

/// This machine's `/usr` as a build root: nothing of `/etc`, `/root`, `/home` or `/tmp`.
fn host_usr_root() -> BuildRoot {
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

fn python_section() -> stackbuild_recipe::PythonSection {
    stackbuild_recipe::PythonSection {
        version: "3.11".parse().unwrap(),
        packages: Vec::new(),
        constraints: Vec::new(),
        index: None,
        extra_index: Vec::new(),
        find_links: Vec::new(),
        wheels: Vec::new(),
        bytecode: false,
        lock: None,
        build: stackbuild_recipe::BuildSection::default(),
    }
}

/// An sdist `name-version.tar.gz` with `files` under `name-version/`.
fn sdist(dir: &Path, name: &str, version: &str, files: &[(&str, &str)]) -> Artifact {
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

struct Fixture {
    _dir: tempfile::TempDir,
    work: PathBuf,
    cache: Cache,
    root: BuildRoot,
    settings: Settings,
    target: Target,
    python: stackbuild_recipe::PythonSection,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache")).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let settings = Settings {
            memory: 2 << 30,
            timeout: Duration::from_secs(300),
            jobs: 2,
            cuda_arch_list: None,
            epoch: 1_700_000_000,
        };
        let target = Target::new("3.11".parse().unwrap(), Platform::LinuxAmd64);
        Self { _dir: dir, work, cache, root: host_usr_root(), settings, target, python: python_section() }
    }

    fn build(&self, pkg: &SourcePackage<'_>) -> Result<stackbuild_wheelbuild::Built, String> {
        let artifacts = self.cache.root().join("artifacts");
        let resolve = index_resolver(&self.python, &self.target, &artifacts, None);
        let builder = WheelBuilder::new(&self.cache, &self.root, &self.settings, &self.target, &resolve);
        builder.build(pkg, &mut |line| eprintln!("  | {line}")).map_err(|e| e.to_string())
    }
}

fn package(a: &Artifact) -> SourcePackage<'_> {
    SourcePackage {
        name: &a.name,
        version: &a.version,
        sdist: a,
        extra_requires: Vec::new(),
        runtime: Vec::new(),
        cuda: None,
    }
}

fn members(wheel: &Path) -> Vec<String> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
    (0..zip.len()).map(|i| zip.by_index(i).unwrap().name().to_owned()).collect()
}

#[test]
fn pure_and_c_extension_sdists_become_wheels_and_a_second_build_compiles_nothing() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let pure = sdist(
        &f.work,
        "sbpure",
        "1.0",
        &[
            (
                "setup.py",
                "from setuptools import setup\nsetup(name='sbpure', version='1.0', py_modules=['sbpure'])\n",
            ),
            ("sbpure.py", "VALUE = 42\n"),
        ],
    );
    let built = f.build(&package(&pure)).unwrap();
    assert!(built.compiled);
    assert_eq!(built.wheel.filename, "sbpure-1.0-py3-none-any.whl");
    assert!(members(&built.wheel.path).contains(&"sbpure.py".to_owned()));

    let c = sdist(
        &f.work,
        "sbcext",
        "2.0",
        &[
            (
                "pyproject.toml",
                "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
                 [project]\nname = \"sbcext\"\nversion = \"2.0\"\n",
            ),
            ("setup.py", "from setuptools import setup, Extension\nsetup(ext_modules=[Extension('sbcext', ['sbcext.c'])])\n"),
            (
                "sbcext.c",
                "#include <Python.h>\n#include <linux/input.h>\n\
                 static PyObject *ev(PyObject *s, PyObject *a) { return PyLong_FromLong(EV_KEY); }\n\
                 static PyMethodDef m[] = {{\"ev_key\", ev, METH_NOARGS, \"\"}, {0}};\n\
                 static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"sbcext\", 0, -1, m};\n\
                 PyMODINIT_FUNC PyInit_sbcext(void) { return PyModule_Create(&d); }\n",
            ),
        ],
    );
    let built = f.build(&package(&c)).unwrap();
    assert!(built.compiled);
    assert!(
        built.wheel.filename.starts_with("sbcext-2.0-cp311-cp311-linux_x86_64"),
        "{}",
        built.wheel.filename
    );
    let so: Vec<String> = members(&built.wheel.path).into_iter().filter(|m| m.ends_with(".so")).collect();
    assert_eq!(so.len(), 1, "{so:?}");

    // The same inputs again: the wheel comes from the cache, nothing is compiled.
    let again = f.build(&package(&c)).unwrap();
    assert!(!again.compiled);
    assert_eq!(again.wheel.sha256, built.wheel.sha256);

    // A fresh cache builds the same bytes (SOURCE_DATE_EPOCH, a fixed build path).
    let g = Fixture::new();
    let c2 = sdist(&g.work, "sbcext", "2.0", &[]);
    let _ = c2;
    let fresh = {
        let copy = g.work.join(&c.filename);
        std::fs::copy(&c.path, &copy).unwrap();
        let a = Artifact { path: copy, ..c.clone() };
        g.build(&package(&a)).unwrap()
    };
    assert!(fresh.compiled);
    assert_eq!(fresh.wheel.sha256, built.wheel.sha256, "two fresh caches build the same wheel");
}

#[test]
fn build_scripts_stay_in_the_sandbox() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    // A host file a build must not see: the sandbox has nothing of the host but /usr.
    let secret = f.work.join("config.json");
    std::fs::write(&secret, "{\"auths\":{}}").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cases: Vec<(&str, String, &str)> = vec![
        ("reads", format!("open({:?}).read()", secret.display().to_string()), "No such file or directory"),
        ("reads-docker", "open('/root/.docker/config.json').read()".to_owned(), "No such file or directory"),
        ("writes", "open('/usr/stackbuild-was-here', 'w').write('x')".to_owned(), "Read-only file system"),
        (
            "connects",
            format!("import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"),
            "Connection refused",
        ),
        ("allocates", "b = bytearray(3 << 30)".to_owned(), "MemoryError"),
        ("is-root", "import os; assert os.getuid() != 0 and os.geteuid() != 0, 'root'".to_owned(), "SKIP"),
    ];
    for (name, code, expected) in cases {
        let setup =
            format!("{code}\nfrom setuptools import setup\nsetup(name='evil{name}', version='1.0')\n");
        let evil = sdist(&f.work, &format!("evil{name}"), "1.0", &[("setup.py", &setup)]);
        let result = f.build(&package(&evil));
        if expected == "SKIP" {
            // Not root: the build ran to its end.
            result.unwrap_or_else(|e| panic!("{name}: {e}"));
            continue;
        }
        let err = result.expect_err(name);
        assert!(err.contains(expected), "{name}: expected {expected:?} in:\n{err}");
        assert!(err.contains(&format!("evil{name} 1.0")), "{name}: the error names the package:\n{err}");
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing reached the host's loopback");
    assert!(!Path::new("/usr/stackbuild-was-here").exists());
}

#[test]
fn a_build_that_downloads_is_told_builds_have_no_network() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let setup = "import urllib.request\nurllib.request.urlopen('https://pypi.nvidia.com/tensorrt-cu12/', timeout=5)\n";
    let net = sdist(&f.work, "netty", "1.0", &[("setup.py", setup)]);
    let err = f.build(&package(&net)).unwrap_err();
    eprintln!("{err}");
    assert!(err.contains("builds have no network"), "{err}");
    assert!(err.contains("netty 1.0"), "{err}");
}

/// A CUDA extension written here (one kernel, `CUDAExtension`), built without isolation against
/// a CUDA 13 torch from the index, with nvcc and the CUDA headers from NVIDIA's wheels of the same
/// release as torch's CUDA runtime, for two architectures: its fat binary carries cubins for
/// both, read back by the fat-binary reader the image's contract is made with.
#[test]
fn a_cuda_extension_builds_against_the_image_torch_with_nvcc_from_wheels() {
    if !ready() {
        return;
    }
    let mut f = Fixture::new();
    f.settings.cuda_arch_list = Some("8.0;9.0".into());
    f.settings.memory = 8 << 30;
    f.settings.timeout = Duration::from_secs(1800);
    let artifacts = f.cache.root().join("artifacts");
    // The image's torch and its CUDA libraries, as a lock would have them.
    let runtime = index_resolver(&f.python, &f.target, &artifacts, None)(&["torch==2.15.0".to_owned()])
        .expect("torch 2.15.0 and its CUDA 13 wheels from the index");
    let cuda_runtime = runtime
        .iter()
        .find(|a| a.name.as_ref() == "nvidia-cuda-runtime")
        .expect("torch 2.15.0 pulls nvidia-cuda-runtime (CUDA 13)");
    let cuda = stackbuild_wheelbuild::CudaToolchain::for_runtime(&cuda_runtime.version.to_string()).unwrap();
    let ext = sdist(
        &f.work,
        "sbcuda",
        "0.1",
        &[
            (
                "setup.py",
                "from setuptools import setup\n\
                 from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n\
                 setup(name='sbcuda', version='0.1', ext_modules=[CUDAExtension('sbcuda', ['sbcuda.cpp', 'kernel.cu'])],\n\
                       cmdclass={'build_ext': BuildExtension})\n",
            ),
            (
                "sbcuda.cpp",
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
    );
    let pkg = SourcePackage {
        name: &ext.name,
        version: &ext.version,
        sdist: &ext,
        extra_requires: Vec::new(),
        runtime,
        cuda: Some(cuda),
    };
    let resolve = index_resolver(&f.python, &f.target, &artifacts, None);
    let builder = WheelBuilder::new(&f.cache, &f.root, &f.settings, &f.target, &resolve);
    let built = builder.build(&pkg, &mut |line| eprintln!("  | {line}")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        built.wheel.filename.starts_with("sbcuda-0.1-cp311-cp311-linux_x86_64"),
        "{}",
        built.wheel.filename
    );
    let tmp = f.work.join("fatbin");
    std::fs::create_dir_all(&tmp).unwrap();
    let code = stackbuild_check::extension_wheel_code(&built.wheel.path, &tmp).unwrap().expect("GPU code");
    let cubins: Vec<String> = code.cubins.iter().map(ToString::to_string).collect();
    assert_eq!(cubins, ["8.0", "9.0"], "{}", code.describe());
    // Built again: nothing compiles.
    let again = builder.build(&pkg, &mut |_| {}).unwrap();
    assert!(!again.compiled);
    f.settings.cuda_arch_list = None;
}
