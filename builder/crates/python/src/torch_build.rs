//! Source distributions whose build imports torch: CUDA and C++ extensions (flash-attn,
//! mamba-ssm, causal-conv1d, apex, detectron2). Their `setup.py` runs `import torch` before it
//! says what it needs. Where their build system does not require torch, an isolated build
//! (PEP 517, pip's and uv's default) fails with `No module named 'torch'`; where it does
//! (mamba-ssm, sam2), an isolated build compiles against whatever torch it resolves, not the
//! image's, and the extension fails to load against another torch's ABI. Their READMEs say
//! `pip install --no-build-isolation`: they are built against the environment's torch
//! (<https://github.com/Dao-AILab/flash-attention#installation-and-features>,
//! <https://github.com/state-spaces/mamba#installation>). Read from the sdist itself, as data:
//! its top-level `setup.py` and `PKG-INFO`, capped.

use std::path::Path;

use crate::pkg_info::{is_static, sdist_pkg_info, sdist_top_member};

/// The largest `setup.py` read.
const MAX_SCRIPT: u64 = 1 << 20;

/// Modules a `setup.py` imports that a build environment lacks unless asked for, and the
/// distribution that provides each. Others (the standard library, the project's own) are not
/// named.
const BUILD_MODULES: [(&str, &str); 8] = [
    ("packaging", "packaging"),
    ("psutil", "psutil"),
    ("wheel", "wheel"),
    ("ninja", "ninja"),
    ("numpy", "numpy"),
    ("Cython", "cython"),
    ("pybind11", "pybind11"),
    ("setuptools", "setuptools"),
];

/// An sdist that builds against the environment's torch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchAtBuild {
    /// Its name, as its `PKG-INFO` says.
    pub name: String,
    /// Its version, as its `PKG-INFO` says.
    pub version: String,
    /// The distributions its build needs besides torch, sorted: what `setup.py` imports of
    /// [`BUILD_MODULES`], and ninja, which `torch.utils.cpp_extension` compiles in parallel
    /// with (without it, one file at a time).
    pub build_requires: Vec<String>,
    /// Its `Requires-Dist` as `PKG-INFO` says, when that is not static (PEP 643): the lock
    /// cannot prepare its metadata in isolation either, so these stand in for it. `None` when
    /// `PKG-INFO` is static and the lock reads it as it is.
    pub requires: Option<Vec<String>>,
    /// The variable its `setup.py` reads to compile instead of downloading a prebuilt wheel
    /// from the project's releases (`CAUSAL_CONV1D_FORCE_BUILD`, `FLASH_ATTENTION_FORCE_BUILD`,
    /// `MAMBA_FORCE_BUILD`: compared with `"TRUE"`), when it reads one. A build has no network;
    /// causal-conv1d 1.5.2 falls back to compiling only on an HTTP error, not on a failed lookup.
    pub force_build: Option<String>,
}

/// Whether the sdist at `path` builds against the environment's torch, and what else it needs.
pub fn torch_at_build(path: &Path) -> Option<TorchAtBuild> {
    let setup = sdist_top_member(path, "setup.py", MAX_SCRIPT).ok()??;
    let build_requires = build_against_torch(&String::from_utf8_lossy(&setup))?;
    let pkg_info = sdist_pkg_info(path).ok()?;
    let crate::pkg_info::SdistInfo { name, version, requires: listed } = crate::pkg_info::sdist_info(path)?;
    let requires = (!is_static(&pkg_info)).then(|| {
        // Older setuptools wrote them only to the egg-info's requires.txt.
        if listed.is_empty() {
            egg_info_requires(path).unwrap_or_default()
        } else {
            listed
        }
    });
    let force_build = force_build_variable(&String::from_utf8_lossy(&setup));
    Some(TorchAtBuild { name, version, build_requires, requires, force_build })
}

/// The `*_FORCE_BUILD` variable a setup script reads with `os.getenv("...")` or
/// `os.environ.get("...")`, when it reads one.
pub fn force_build_variable(setup: &str) -> Option<String> {
    setup.match_indices("_FORCE_BUILD").find_map(|(at, _)| {
        let before = &setup[..at];
        let start = before.rfind(['"', '\''])?;
        let name = &setup[start + 1..at + "_FORCE_BUILD".len()];
        let closed = setup[at + "_FORCE_BUILD".len()..].starts_with(['"', '\'']);
        let read = before[..start].trim_end().ends_with("getenv(")
            || before[..start].trim_end().ends_with("environ.get(");
        let valid = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        (closed && read && valid).then(|| name.to_owned())
    })
}

/// What a project whose `setup.py` is `setup` needs in its build environment besides torch,
/// when it builds against the environment's torch: its `setup.py` imports torch where a failure
/// stops the build, whether or not its build system requires torch (see the module's comment).
/// `None` when it builds in isolation.
pub fn build_against_torch(setup: &str) -> Option<Vec<String>> {
    if !needs_torch(setup) {
        return None;
    }
    let modules: Vec<&str> = setup.lines().filter_map(imported_module).collect();
    let mut build_requires: Vec<String> = BUILD_MODULES
        .iter()
        .filter(|(module, _)| modules.contains(module))
        .map(|(_, dist)| (*dist).to_owned())
        .chain(std::iter::once("ninja".to_owned()))
        .collect();
    build_requires.sort();
    build_requires.dedup();
    Some(build_requires)
}

/// Whether `setup` imports torch where its failure stops the build: an import inside a `try:`
/// block (`DeepSpeed`'s `try: import torch except ImportError: ...`) is the script's own
/// fallback, and an isolated build runs.
fn needs_torch(setup: &str) -> bool {
    let lines: Vec<&str> = setup.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    lines.iter().enumerate().any(|(i, line)| {
        if imported_module(line) != Some("torch") {
            return false;
        }
        let own = indent(line);
        let opener = lines[..i].iter().rev().find(|l| !l.trim().is_empty() && indent(l) < own);
        !opener.is_some_and(|l| l.trim_start().starts_with("try:"))
    })
}

/// The requirements of `<top>/<name>.egg-info/requires.txt` as `Requires-Dist` lines: its
/// sections (`[extra]`, `[:marker]`, `[extra:marker]`) become markers.
fn egg_info_requires(path: &Path) -> Option<Vec<String>> {
    let text = crate::pkg_info::sdist_member(
        path,
        |rest| rest.ends_with(".egg-info/requires.txt") && rest.matches('/').count() == 1,
        MAX_SCRIPT,
    )
    .ok()??;
    let mut marker: Option<String> = None;
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&text).lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (extra, condition) = section.split_once(':').unwrap_or((section, ""));
            marker = match (extra.is_empty(), condition.is_empty()) {
                (true, true) => None,
                (true, false) => Some(condition.to_owned()),
                (false, true) => Some(format!("extra == \"{extra}\"")),
                (false, false) => Some(format!("({condition}) and extra == \"{extra}\"")),
            };
            continue;
        }
        out.push(marker.as_ref().map_or_else(|| line.to_owned(), |m| format!("{line} ; {m}")));
    }
    Some(out)
}

/// The top-level module a line of Python imports (`import torch.utils`, `from wheel.bdist_wheel
/// import x`), indented or not (setup scripts import in functions and `try` blocks too).
fn imported_module(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = line.strip_prefix("import ").or_else(|| line.strip_prefix("from "))?;
    let module = rest.trim_start().split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next()?;
    (!module.is_empty()).then_some(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdist(dir: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
        let path = dir.join("x-1.0.tar.gz");
        let named: Vec<(String, &str)> = files.iter().map(|(n, b)| (format!("x-1.0/{n}"), *b)).collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, b)| (n.as_str(), *b)).collect();
        crate::pkg_info::tests::write_sdist(&path, &named);
        path
    }

    /// flash-attn 2.8.3's shape: `import torch` and build helpers at the top of setup.py, no
    /// pyproject, a PKG-INFO of Metadata-Version 2.1.
    #[test]
    fn a_setup_py_that_imports_torch_builds_against_the_environments() {
        let dir = tempfile::tempdir().unwrap();
        let path = sdist(
            dir.path(),
            &[
                (
                    "setup.py",
                    "import os\nimport torch\nfrom packaging.version import parse\nimport psutil\n\
                     from wheel.bdist_wheel import bdist_wheel\nfrom torch.utils.cpp_extension import CUDAExtension\n\
                     # FORCE_BUILD: Force a fresh build locally\n\
                     FORCE_BUILD = os.getenv(\"FLASH_ATTENTION_FORCE_BUILD\", \"FALSE\") == \"TRUE\"\n",
                ),
                ("PKG-INFO", "Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\nRequires-Dist: torch\nRequires-Dist: einops\n"),
            ],
        );
        let got = torch_at_build(&path).unwrap();
        assert_eq!(got.name, "flash_attn");
        assert_eq!(got.build_requires, ["ninja", "packaging", "psutil", "wheel"]);
        assert_eq!(got.requires.as_deref(), Some(&["torch".to_owned(), "einops".to_owned()][..]));
        assert_eq!(got.force_build.as_deref(), Some("FLASH_ATTENTION_FORCE_BUILD"));
        assert_eq!(
            force_build_variable("x = os.environ.get('MAMBA_FORCE_BUILD', 'FALSE')").as_deref(),
            Some("MAMBA_FORCE_BUILD")
        );
        assert_eq!(force_build_variable("# FORCE_BUILD: a comment"), None);
    }

    #[test]
    fn a_setup_py_without_torch_or_with_it_optional_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let info = ("PKG-INFO", "Metadata-Version: 2.2\nName: x\nVersion: 1.0\n");
        // mamba-ssm's shape: the build system requires torch, and the extension still has to be
        // compiled against the image's.
        let with_torch = sdist(
            dir.path(),
            &[
                ("setup.py", "import torch\n"),
                ("pyproject.toml", "[build-system]\nrequires = [\"setuptools\", \"torch>=2.5.1\"]\n"),
                info,
            ],
        );
        assert_eq!(torch_at_build(&with_torch).unwrap().requires, None, "static PKG-INFO: read as it is");
        let plain =
            sdist(dir.path(), &[("setup.py", "from setuptools import setup\n# import torch later\n"), info]);
        assert_eq!(torch_at_build(&plain), None);
        // DeepSpeed: torch is optional at build (ops are compiled just in time without it).
        let optional = sdist(
            dir.path(),
            &[("setup.py", "torch_available = True\ntry:\n    import torch\nexcept ImportError:\n    torch_available = False\n"), info],
        );
        assert_eq!(torch_at_build(&optional), None);
    }

    #[test]
    fn requirements_only_in_the_egg_info_are_read_with_their_sections_as_markers() {
        let dir = tempfile::tempdir().unwrap();
        let path = sdist(
            dir.path(),
            &[
                ("setup.py", "import torch\n"),
                ("PKG-INFO", "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n"),
                (
                    "x.egg-info/requires.txt",
                    "einops\nninja\n\n[dev]\npytest\n\n[:sys_platform == \"linux\"]\ntriton\n",
                ),
            ],
        );
        let got = torch_at_build(&path).unwrap();
        assert_eq!(
            got.requires.unwrap(),
            ["einops", "ninja", "pytest ; extra == \"dev\"", "triton ; sys_platform == \"linux\""]
        );
    }
}
