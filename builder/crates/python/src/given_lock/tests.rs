use super::*;
use stackbuild_common::Platform;

fn target(python: &str, platform: Platform) -> Target {
    Target::new(python.parse().unwrap(), platform)
}

const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
const H3: &str = "3333333333333333333333333333333333333333333333333333333333333333";
const H4: &str = "4444444444444444444444444444444444444444444444444444444444444444";

/// A universal `uv.lock` as uv 0.9 writes it: numpy forks by Python version, a Linux-only
/// dependency, an extra, and a development group.
fn uv_lock() -> String {
    format!(
        r#"version = 1
revision = 3
requires-python = ">=3.10"
resolution-markers = [
    "python_full_version >= '3.11'",
    "python_full_version < '3.11'",
]

[[package]]
name = "app"
version = "0.1.0"
source = {{ virtual = "." }}
dependencies = [
    {{ name = "numpy", version = "1.26.4", source = {{ registry = "https://pypi.org/simple" }}, marker = "python_full_version < '3.11'" }},
    {{ name = "numpy", version = "2.1.0", source = {{ registry = "https://pypi.org/simple" }}, marker = "python_full_version >= '3.11'" }},
    {{ name = "requests", extra = ["socks"] }},
    {{ name = "triton", marker = "sys_platform == 'linux' and platform_machine == 'x86_64'" }},
]

[package.dev-dependencies]
dev = [
    {{ name = "pytest" }},
]

[[package]]
name = "numpy"
version = "1.26.4"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version < '3.11'"]
wheels = [
    {{ url = "https://files.example/numpy-1.26.4-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", hash = "sha256:{H1}", size = 10 }},
]

[[package]]
name = "numpy"
version = "2.1.0"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version >= '3.11'"]
sdist = {{ url = "https://files.example/numpy-2.1.0.tar.gz", hash = "sha256:{H1}", size = 10 }}
wheels = [
    {{ url = "https://files.example/numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", hash = "sha256:{H2}", size = 20 }},
    {{ url = "https://files.example/numpy-2.1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", hash = "sha256:{H3}", size = 20 }},
    {{ url = "https://files.example/numpy-2.1.0-cp311-cp311-macosx_14_0_arm64.whl", hash = "sha256:{H4}", size = 20 }},
]

[[package]]
name = "requests"
version = "2.32.3"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "https://files.example/requests-2.32.3-py3-none-any.whl", hash = "sha256:{H3}", size = 30 }},
]

[package.optional-dependencies]
socks = [
    {{ name = "pysocks" }},
]
security = [
    {{ name = "never" }},
]

[[package]]
name = "pysocks"
version = "1.7.1"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "https://files.example/PySocks-1.7.1-py3-none-any.whl", hash = "sha256:{H4}", size = 40 }},
]

[[package]]
name = "triton"
version = "3.1.0"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "https://files.example/triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", hash = "sha256:{H1}", size = 50 }},
]

[[package]]
name = "pytest"
version = "8.3.3"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "https://files.example/pytest-8.3.3-py3-none-any.whl", hash = "sha256:{H2}", size = 60 }},
]
"#
    )
}

fn names(chosen: &[Chosen]) -> Vec<String> {
    chosen.iter().map(|c| format!("{} {} {}", c.name, c.version, c.wheel.filename)).collect()
}

#[test]
fn uv_lock_installs_what_uv_sync_no_dev_would() {
    let lock = GivenLock::parse(Path::new("/p/uv.lock"), &uv_lock()).unwrap();
    assert_eq!(lock.format, stackbuild_recipe::LockFormat::UvLock);
    let amd = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap();
    assert_eq!(
        names(&amd),
        [
            "numpy 2.1.0 numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "pysocks 1.7.1 PySocks-1.7.1-py3-none-any.whl",
            "requests 2.32.3 requests-2.32.3-py3-none-any.whl",
            "triton 3.1.0 triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        ]
    );
    assert_eq!(amd[0].wheel.sha256, H2);
    assert_eq!(
        amd[0].wheel.url.as_deref(),
        Some("https://files.example/numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    );
    // arm64: its own numpy wheel, and no triton (its edge's marker names x86_64).
    let arm = lock.select(&target("3.11", Platform::LinuxArm64)).unwrap();
    assert_eq!(arm.len(), 3, "{:?}", names(&arm));
    assert_eq!(arm[0].wheel.sha256, H3);
    // Python 3.10 takes the other fork of numpy.
    let old = lock.select(&target("3.10", Platform::LinuxAmd64)).unwrap_err().to_string();
    // (triton has no cp310 wheel: named, with what it has.)
    assert!(old.contains("package triton 3.1.0 has no wheel for cp310 linux/amd64"), "{old}");
    assert!(old.contains("triton-3.1.0-cp311-cp311"), "{old}");
}

#[test]
fn uv_lock_outside_requires_python_is_refused() {
    let lock = GivenLock::parse(Path::new("/p/uv.lock"), &uv_lock()).unwrap();
    let err = lock.select(&target("3.9", Platform::LinuxAmd64)).unwrap_err().to_string();
    assert_eq!(err, "/p/uv.lock: requires-python \">=3.10\" does not admit the image's Python 3.9");
}

#[test]
fn a_git_dependency_is_named_as_what_cannot_be_installed() {
    let text = uv_lock().replace(
        "[[package]]\nname = \"pysocks\"\nversion = \"1.7.1\"\nsource = { registry = \"https://pypi.org/simple\" }",
        "[[package]]\nname = \"pysocks\"\nversion = \"1.7.1\"\nsource = { git = \"https://example/pysocks?rev=abc#abc\" }",
    );
    let lock = GivenLock::parse(Path::new("/p/uv.lock"), &text).unwrap();
    let err = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap_err().to_string();
    assert!(err.starts_with("/p/uv.lock: package pysocks 1.7.1: it comes from git"), "{err}");
}

/// A `pylock.toml` as `uv export --format pylock.toml` writes it.
fn pylock() -> String {
    format!(
        r#"lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.11"

[[packages]]
name = "app"
directory = {{ path = ".", editable = true }}

[[packages]]
name = "six"
version = "1.16.0"
index = "https://pypi.org/simple"
wheels = [{{ url = "https://files.example/six-1.16.0-py2.py3-none-any.whl", upload-time = 2021-05-05T14:18:17Z, size = 11053, hashes = {{ sha256 = "{H1}" }} }}]

[[packages]]
name = "triton"
version = "3.1.0"
marker = "platform_machine == 'x86_64'"
wheels = [{{ name = "triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", path = "wheels/triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", hashes = {{ sha256 = "{H2}" }} }}]

[[packages]]
name = "pywin32"
version = "306"
marker = "sys_platform == 'win32'"
wheels = [{{ url = "https://files.example/pywin32-306-cp311-cp311-win_amd64.whl", hashes = {{ sha256 = "{H3}" }} }}]
"#
    )
}

#[test]
fn pylock_installs_the_entries_whose_markers_hold() {
    let lock = GivenLock::parse(Path::new("/p/pylock.toml"), &pylock()).unwrap();
    assert_eq!(lock.format, stackbuild_recipe::LockFormat::Pylock);
    let amd = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap();
    assert_eq!(
        names(&amd),
        [
            "six 1.16.0 six-1.16.0-py2.py3-none-any.whl",
            "triton 3.1.0 triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        ]
    );
    // A relative path is the lock's directory's.
    assert_eq!(
        amd[1].wheel.path.as_deref(),
        Some(Path::new("/p/wheels/triton-3.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"))
    );
    assert_eq!(lock.select(&target("3.11", Platform::LinuxArm64)).unwrap().len(), 1);
}

#[test]
fn a_pylock_without_a_wheel_for_the_image_names_the_package() {
    let text = pylock().replace("marker = \"platform_machine == 'x86_64'\"\n", "");
    let lock = GivenLock::parse(Path::new("/p/pylock.toml"), &text).unwrap();
    let err = lock.select(&target("3.11", Platform::LinuxArm64)).unwrap_err().to_string();
    assert!(
        err.starts_with("/p/pylock.toml: package triton 3.1.0 has no wheel for cp311 linux/arm64"),
        "{err}"
    );
}

#[test]
fn malformed_entries_name_the_package_and_the_field() {
    let cases = [
        (
            pylock().replace(&format!("sha256 = \"{H1}\""), "sha256 = \"abc\""),
            "package six: wheel six-1.16.0-py2.py3-none-any.whl: no sha256",
        ),
        (
            pylock().replace("marker = \"sys_platform == 'win32'\"", "marker = \"sys_platform ==\""),
            "package pywin32: marker",
        ),
        (pylock().replace("lock-version = \"1.0\"", "lock-version = \"2.0\""), "lock-version \"2.0\""),
        (pylock().replace("https://files.example/six", "ftp://files.example/six"), "is not http(s) or file"),
        (
            pylock().replace("name = \"triton-3.1.0-cp311", "name = \"../triton-3.1.0-cp311"),
            "is not a wheel file name",
        ),
    ];
    for (text, wanted) in cases {
        let err = GivenLock::parse(Path::new("/p/pylock.toml"), &text).unwrap_err().to_string();
        assert!(err.contains(wanted), "{wanted:?} not in {err}");
    }
}

#[test]
fn fetch_copies_and_verifies_and_a_wrong_hash_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = dir.path().join("wheels/six-1.16.0-py2.py3-none-any.whl");
    std::fs::create_dir_all(wheel.parent().unwrap()).unwrap();
    std::fs::write(&wheel, b"wheel bytes").unwrap();
    let good = hex::encode(Sha256::digest(b"wheel bytes"));
    let text = format!(
        "lock-version = \"1.0\"\n[[packages]]\nname = \"six\"\nversion = \"1.16.0\"\nwheels = [{{ path = \"wheels/six-1.16.0-py2.py3-none-any.whl\", hashes = {{ sha256 = \"{good}\" }} }}]\n"
    );
    let lock_path = dir.path().join("pylock.toml");
    let lock = GivenLock::parse(&lock_path, &text).unwrap();
    let chosen = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap();
    let dest = dir.path().join("artifacts");
    let got = fetch(&lock_path, &chosen, &dest, &crate::download::Config::netrc_only).unwrap();
    assert_eq!(got[0].path, dest.join(&good).join("six-1.16.0-py2.py3-none-any.whl"));
    assert_eq!(std::fs::read(&got[0].path).unwrap(), b"wheel bytes");
    // The lock edited (or the file replaced): refused, naming the package, nothing placed.
    let lock = GivenLock::parse(&lock_path, &text.replace(&good, H1)).unwrap();
    let chosen = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap();
    let err =
        fetch(&lock_path, &chosen, &dest, &crate::download::Config::netrc_only).unwrap_err().to_string();
    assert!(
        err.contains("package six 1.16.0:") && err.contains(&format!("but the lock gives {H1}")),
        "{err}"
    );
    assert!(!dest.join(H1).exists());
    let left: Vec<_> = std::fs::read_dir(&dest).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// A package whose only file for the image is its sdist (`docopt` has no wheel at all) is
/// chosen as that sdist, to be built from source; a wheel that fits still wins over an sdist.
#[test]
fn an_sdist_is_chosen_where_no_wheel_fits() {
    let text = format!(
        "{}\n[[packages]]\nname = \"docopt\"\nversion = \"0.6.2\"\nsdist = {{ url = \"https://files.example/docopt-0.6.2.tar.gz\", hashes = {{ sha256 = \"{H3}\" }} }}\n",
        pylock().replace("wheels = [{ url = \"https://files.example/six-1.16.0-py2.py3-none-any.whl\"", "sdist = { url = \"https://files.example/six-1.16.0.tar.gz\", hashes = { sha256 = \"00\" } }\nwheels = [{ url = \"https://files.example/six-1.16.0-py2.py3-none-any.whl\"")
    );
    let lock = GivenLock::parse(Path::new("/p/pylock.toml"), &text);
    // The sdist of six carries a malformed hash: refused, naming the package.
    let err = lock.unwrap_err().to_string();
    assert!(err.contains("six") && err.contains("sha256"), "{err}");
    let text = format!(
        "{}\n[[packages]]\nname = \"docopt\"\nversion = \"0.6.2\"\nsdist = {{ url = \"https://files.example/docopt-0.6.2.tar.gz\", hashes = {{ sha256 = \"{H3}\" }} }}\n",
        pylock()
    );
    let lock = GivenLock::parse(Path::new("/p/pylock.toml"), &text).unwrap();
    let amd = lock.select(&target("3.11", Platform::LinuxAmd64)).unwrap();
    assert!(names(&amd).contains(&"docopt 0.6.2 docopt-0.6.2.tar.gz".to_owned()), "{:?}", names(&amd));
    assert!(names(&amd).contains(&"six 1.16.0 six-1.16.0-py2.py3-none-any.whl".to_owned()));
}
