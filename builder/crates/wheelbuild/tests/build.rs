//! Packages built from source in the sandbox, on a build root made of this machine's `/usr`
//! (Debian bookworm: python3.11, gcc, the Python headers), with build requirements resolved by
//! uv from the machine's index: a pure-Python sdist, a C extension, a second build that compiles
//! nothing, and build scripts that try to leave the sandbox.

use std::path::Path;
use std::time::Duration;

use stackbuild_python::Artifact;
use stackbuild_wheelbuild::{index_resolver, SourcePackage, WheelBuilder};

mod common;
use common::{members, package, ready, sdist, Fixture};

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
    let so: Vec<String> = members(&built.wheel.path)
        .into_iter()
        .filter(|m| Path::new(m).extension().is_some_and(|e| e == "so"))
        .collect();
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

/// A package's build variables (`[python.build.env]`) reach its `setup.py`, as causal-conv1d's
/// `CAUSAL_CONV1D_FORCE_BUILD` must; another value is another wheel's key.
#[test]
fn a_packages_build_variables_reach_its_setup_py() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let switch = sdist(
        &f.work,
        "sbswitch",
        "1.0",
        &[(
            "setup.py",
            "import os\nfrom setuptools import setup\n\
             if os.getenv('SBSWITCH_FORCE_BUILD', 'FALSE') != 'TRUE':\n    raise SystemExit('would download')\n\
             setup(name='sbswitch', version='1.0', py_modules=[])\n",
        )],
    );
    let err = f.build(&package(&switch)).unwrap_err();
    assert!(err.contains("would download"), "{err}");
    let mut pkg = package(&switch);
    pkg.env = vec![("SBSWITCH_FORCE_BUILD".to_owned(), "TRUE".to_owned())];
    let built = f.build(&pkg).unwrap();
    assert!(built.compiled);
    assert!(!f.build(&pkg).unwrap().compiled);
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
        // What a build may use: the kernel's /dev (torch reads /dev/urandom when imported) and
        // a fresh /proc.
        (
            "devices",
            "assert len(open('/dev/urandom', 'rb').read(8)) == 8 and open('/proc/self/status').read()"
                .to_owned(),
            "SKIP",
        ),
    ];
    for (name, code, expected) in cases {
        let setup =
            format!("{code}\nfrom setuptools import setup\nsetup(name='evil{name}', version='1.0')\n");
        let evil = sdist(&f.work, &format!("evil{name}"), "1.0", &[("setup.py", &setup)]);
        let result = f.build(&package(&evil));
        if expected == "SKIP" {
            // Allowed: the build ran to its end.
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
    let Some(_one_at_a_time) = common::heavy(HEAVY_GIB) else { return };
    let f = cuda_fixture();
    let (runtime, cuda) = common::cuda_runtime(&f);
    build_cuda_extension_twice(&f, "sbcuda", runtime, cuda);
}

/// The same extension against a CUDA 12 torch (`PyPI`'s torch 2.8.0, CUDA 12.8), compiled by
/// Debian's nvcc 12.4 (trixie non-free, laid out as a `CUDA_HOME`): torch accepts another minor
/// of the same major, and the fat binary carries cubins for both architectures.
#[test]
fn a_cuda_extension_builds_against_a_cuda_12_torch_with_debians_nvcc() {
    if !ready() {
        return;
    }
    let Some(_one_at_a_time) = common::heavy(HEAVY_GIB) else { return };
    let f = cuda_fixture();
    let Some((runtime, cuda)) = common::cuda12_runtime(&f) else { return };
    let toolkit = cuda.debian.clone().unwrap();
    assert_eq!(toolkit.release, "12.4");
    assert!(toolkit.home.join("bin/nvcc").is_file() && toolkit.home.join("include/cuda_runtime.h").is_file());
    build_cuda_extension_twice(&f, "sbcuda12", runtime, cuda);
}

/// What one CUDA extension test writes at its peak (torch's wheels, their build environment, the
/// toolkit), measured, with room to spare.
const HEAVY_GIB: u64 = 16;

/// A fixture for CUDA builds: 8.0 and 9.0, room for nvcc.
fn cuda_fixture() -> Fixture {
    let mut f = Fixture::new();
    f.settings.cuda_arch_list = Some("8.0;9.0".into());
    f.settings.memory = 8 << 30;
    f.settings.timeout = Duration::from_mins(30);
    f
}

/// Builds the one-kernel extension `name` against `runtime` with `cuda`: its wheel carries
/// cubins for 8.0 and 9.0, read back by the fat-binary reader; built again, nothing compiles.
fn build_cuda_extension_twice(
    f: &Fixture,
    name: &str,
    runtime: Vec<Artifact>,
    cuda: stackbuild_wheelbuild::CudaToolchain,
) {
    let ext = common::cuda_extension(&f.work, name, "0.1");
    let pkg = SourcePackage {
        name: &ext.name,
        version: &ext.version,
        sdist: &ext,
        extra_requires: Vec::new(),
        runtime,
        cuda: Some(cuda),
        editable: None,
        env: Vec::new(),
    };
    let artifacts = f.cache.root().join("artifacts");
    let resolve = index_resolver(&f.python, &f.target, &artifacts, None);
    let builder = WheelBuilder::new(&f.cache, &f.root, &f.settings, &f.target, &resolve);
    let built = builder.build(&pkg, &mut |line| eprintln!("  | {line}")).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        built.wheel.filename.starts_with(&format!("{name}-0.1-cp311-cp311-linux_x86_64")),
        "{}",
        built.wheel.filename
    );
    let tmp = f.work.join("fatbin");
    std::fs::create_dir_all(&tmp).unwrap();
    let code = stackbuild_check::extension_wheel_code(&built.wheel.path, &tmp).unwrap().expect("GPU code");
    let cubins: Vec<String> = code.cubins.iter().map(ToString::to_string).collect();
    assert_eq!(cubins, ["8.0", "9.0"], "{}", code.describe());
    let again = builder.build(&pkg, &mut |_| {}).unwrap();
    assert!(!again.compiled);
}

/// An editable build (PEP 660): the backend's `build_editable` runs with the project at the
/// path the image has its tree at, so what the wheel points to (setuptools' `.pth` or import
/// finder) names that path, not the sandbox's build directory; another path is another key.
#[test]
fn an_editable_build_points_at_the_trees_path_in_the_image() {
    if !ready() {
        return;
    }
    let f = Fixture::new();
    let project = sdist(
        &f.work,
        "sbedit",
        "1.0",
        &[
            (
                "pyproject.toml",
                "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
                 [project]\nname = \"sbedit\"\nversion = \"1.0\"\n",
            ),
            ("sbedit/__init__.py", "VALUE = 1\n"),
        ],
    );
    let mut pkg = package(&project);
    pkg.editable = Some("/workspace/sbedit");
    let built = f.build(&pkg).unwrap();
    let names = members(&built.wheel.path);
    assert!(!names.iter().any(|n| n == "sbedit/__init__.py"), "the code was copied: {names:?}");
    let file = std::fs::File::open(&built.wheel.path).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut pointers = String::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let name = entry.name().to_owned();
        let ext =
            std::path::Path::new(&name).extension().and_then(|e| e.to_str()).unwrap_or_default().to_owned();
        if !name.contains('/') && (ext == "pth" || ext == "py") {
            std::io::Read::read_to_string(&mut entry, &mut pointers).unwrap();
        }
    }
    assert!(pointers.contains("/workspace/sbedit"), "{names:?}\n{pointers}");
    assert!(!pointers.contains("/build/"), "{pointers}");
    let mut elsewhere = package(&project);
    elsewhere.editable = Some("/srv/sbedit");
    assert!(f.build(&elsewhere).unwrap().compiled, "another path must be another build");
}
