//! conda environment files (`environment.yml`, `conda_environment.yaml`, ...), as research
//! projects ship them in place of a requirements file (`DiT`, `diffusion_policy`,
//! Stable Diffusion): `dependencies:` lists conda packages as match specs, and a `pip:` list that conda
//! hands to pip as a requirements file (conda's "Managing environments" guide,
//! <https://docs.conda.io/projects/conda/en/latest/user-guide/tasks/manage-environments.html>).
//!
//! An image has no conda: each conda package becomes what stands for it here. `python` is the
//! interpreter; `pytorch` is torch's wheel; `pytorch-cuda`, `cudatoolkit` and `cuda-version` name
//! the CUDA the torch build is for; conda's own tools and the system libraries conda-forge ships
//! (compilers, MKL, ffmpeg) are not Python packages of the image; the rest are asked of the
//! package index under the same name, which is how most conda packages are named. The match
//! spec's version (`name=1.2`, `name==1.2.3`, `name>=1.13`, `name 1.2.*`, `name=1.2=build`) is
//! the PEP 440 specifier with the same meaning (conda's "Package match specifications":
//! `=1.2` is `1.2.*`; the build string is conda's own and is dropped).

use std::path::{Path, PathBuf};

use super::requirements::{read_line, Origin};
use super::{Found, Untranslated};

/// The largest environment file read.
const MAX_FILE: u64 = 1 << 20;

/// The file names conda environments are kept under, best first.
pub(super) const NAMES: [&str; 8] = [
    "environment.yml",
    "environment.yaml",
    "conda_environment.yml",
    "conda_environment.yaml",
    "conda-environment.yml",
    "conda-environment.yaml",
    "conda.yml",
    "conda.yaml",
];

/// conda package names whose package on the index has another name. Sources: each package's
/// conda-forge feedstock or anaconda.org page names the project it packages.
const RENAMED: [(&str, &str); 9] = [
    // https://anaconda.org/pytorch/pytorch: PyTorch, `pip install torch`.
    ("pytorch", "torch"),
    ("pytorch-gpu", "torch"),
    // https://github.com/conda-forge/opencv-feedstock: py-opencv is OpenCV's Python binding.
    ("py-opencv", "opencv-python"),
    ("opencv", "opencv-python"),
    // https://github.com/conda-forge/msgpack-python-feedstock: the `msgpack` project.
    ("msgpack-python", "msgpack"),
    // https://github.com/conda-forge/pytables-feedstock: the `tables` project.
    ("pytables", "tables"),
    // https://github.com/conda-forge/matplotlib-feedstock: matplotlib-base is matplotlib
    // without its Qt backend.
    ("matplotlib-base", "matplotlib"),
    // https://anaconda.org/pyg/pyg: PyTorch Geometric, `pip install torch_geometric`.
    ("pyg", "torch-geometric"),
    // https://github.com/conda-forge/pyqt-feedstock: PyQt 5.
    ("pyqt", "pyqt5"),
];

/// conda packages that name the CUDA a conda torch is built for (conda-forge's
/// `cuda-version` metapackage, `PyTorch`'s `pytorch-cuda`, the older `cudatoolkit`).
const CUDA_NAMES: [&str; 5] = ["pytorch-cuda", "cudatoolkit", "cuda-version", "cuda-toolkit", "cuda-runtime"];

/// conda packages that are not Python packages the image installs: conda's and pip's own
/// tools (the image installs with its own), compilers and build tools, and C/C++ libraries
/// conda-forge ships that a wheel carries or the base provides.
const NOT_PYTHON: [&str; 40] = [
    "pip",
    "setuptools",
    "wheel",
    "conda",
    "mamba",
    "cmake",
    "make",
    "ninja",
    "gcc",
    "gxx",
    "gcc_linux-64",
    "gxx_linux-64",
    "cxx-compiler",
    "c-compiler",
    "compilers",
    "libgcc",
    "libgcc-ng",
    "libstdcxx-ng",
    "libgomp",
    "llvm-openmp",
    "intel-openmp",
    "mkl",
    "mkl-include",
    "mkl-service",
    "blas",
    "libblas",
    "openblas",
    "numpy-base",
    "pytorch-mutex",
    "cudnn",
    "nccl",
    "cuda-nvcc",
    "cuda-nvrtc",
    "libjpeg-turbo",
    "libpng",
    "zlib",
    "openssl",
    "ca-certificates",
    "readline",
    "sqlite",
];

/// conda packages that are programs the base installs, by their Debian package.
const DEBIAN: [(&str, &str); 3] = [("ffmpeg", "ffmpeg"), ("git", "git"), ("git-lfs", "git-lfs")];

/// Reads the environment file `path` into `found`.
pub(super) fn read_file(path: &Path, found: &mut Found, project: &Path) -> Result<(), super::InitError> {
    let text = stackbuild_common::read_text(path, MAX_FILE, "conda environment file")
        .map_err(|source| super::InitError::Read { path: path.to_owned(), source })?;
    found.inputs.push(path.to_owned());
    let doc: serde_norway::Value = match serde_norway::from_str(&text) {
        Ok(doc) => doc,
        Err(e) => {
            found.untranslated.push(Untranslated::new(path, 0, "(the file)", &format!("not YAML: {e}")));
            return Ok(());
        }
    };
    let Some(dependencies) = doc.get("dependencies").and_then(serde_norway::Value::as_sequence) else {
        found.untranslated.push(Untranslated::new(path, 0, "(the file)", "no `dependencies:` list"));
        return Ok(());
    };
    let mut dropped: Vec<String> = Vec::new();
    let dir = path.parent().unwrap_or(Path::new("."));
    // The `pip:` list first: pip runs after conda and replaces a conda package of the same name
    // (diffusion_policy's `imagecodecs`, listed under both "to force reinstall ... via pip"),
    // and of two requirements of one name the first stays.
    for pip in dependencies.iter().filter_map(|i| i.get("pip")).filter_map(serde_norway::Value::as_sequence) {
        // conda writes the list to a requirements file beside the environment file and runs
        // `pip install -r` on it: `-r` and `-e` are relative to this directory.
        for line in pip.iter().filter_map(serde_norway::Value::as_str) {
            let origin = Origin { path, line: line_of(&text, line), dir, project };
            read_line(line.trim(), &origin, found, &mut Vec::<PathBuf>::new(), false)?;
        }
    }
    for spec in dependencies.iter().filter_map(serde_norway::Value::as_str) {
        conda_package(spec, path, line_of(&text, spec), found, &mut dropped);
    }
    if !dropped.is_empty() {
        found.decide(format!(
            "{}: {} conda package(s) not installed from the index: conda's tools, compilers and the C \
             libraries conda-forge ships ({}); the wheels carry what they link, and the audit of every \
             build says what is missing",
            path.display(),
            dropped.len(),
            dropped.join(", ")
        ));
    }
    Ok(())
}

/// The 1-based line of the first list item `- item` in `text` (0 when not found).
fn line_of(text: &str, item: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().strip_prefix('-').is_some_and(|rest| rest.trim() == item.trim()))
        .map_or(0, |i| i + 1)
}

/// One conda match spec of `dependencies:`.
fn conda_package(spec: &str, path: &Path, line: usize, found: &mut Found, dropped: &mut Vec<String>) {
    let at = format!("{}:{line}", path.display());
    // `channel::name`: the channel is conda's.
    let spec = spec.rsplit("::").next().unwrap_or(spec).trim();
    let split = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(spec.len());
    let (name, rest) = (spec[..split].to_ascii_lowercase(), spec[split..].trim());
    let Some(version) = specifier(rest) else {
        found.untranslated.push(Untranslated::new(
            path,
            line,
            spec,
            "a conda version spec with no PEP 440 equivalent",
        ));
        return;
    };
    if name == "python" {
        python(&version, &at, found);
    } else if CUDA_NAMES.contains(&name.as_str()) {
        if let Some(minor) = minor_of(&version) {
            found.set_cuda(&minor, &format!("{at}: {spec}"));
        }
    } else if let Some((_, deb)) = DEBIAN.iter().find(|(n, _)| *n == name) {
        if !found.apt.iter().any(|a| a == deb) {
            found.apt.push((*deb).to_owned());
        }
        found.decide(format!("{at}: `{spec}` is a program, installed from the base's `{deb}` package"));
    } else if NOT_PYTHON.contains(&name.as_str()) || name.starts_with("lib") || name.starts_with("cuda-") {
        dropped.push(name);
    } else {
        let pypi = RENAMED.iter().find(|(c, _)| *c == name).map_or(name.as_str(), |(_, p)| p);
        if pypi != name {
            found.decide(format!("{at}: conda's `{name}` is `{pypi}` on the package index"));
        }
        let requirement = format!("{pypi}{version}");
        let origin = Origin { path, line, dir: Path::new("."), project: Path::new(".") };
        found.add_requirement(requirement, pypi.to_owned(), false, &origin);
    }
}

/// The PEP 440 specifier of a conda match spec's version part (`=1.2`, `==1.2.3`, `>=1.13`,
/// `1.2.*`, `=1.2=py39_0`, empty); `None` for one with no equivalent (`|` alternatives).
fn specifier(rest: &str) -> Option<String> {
    let rest = rest.trim();
    if rest.is_empty() {
        return Some(String::new());
    }
    if rest.contains('|') {
        return None;
    }
    // A space separates a version from a build string (`numpy 1.26.4 py311_0`), but may also
    // follow an operator (`pytorch >= 1.13`).
    let compact: String;
    let version = if rest.starts_with(['>', '<', '!', '~']) {
        compact = rest.split_whitespace().collect();
        compact.as_str()
    } else {
        rest.split_whitespace().next().unwrap_or_default()
    };
    let spec = if let Some(v) = version.strip_prefix("==") {
        format!("=={}", v.split('=').next().unwrap_or_default())
    } else if let Some(v) = version.strip_prefix('=') {
        fuzzy(v.split('=').next().unwrap_or_default())
    } else if version.starts_with(['>', '<', '!', '~']) {
        version.to_owned()
    } else {
        fuzzy(version)
    };
    let parsed = <pep440_rs::VersionSpecifiers as std::str::FromStr>::from_str(&spec).ok()?;
    Some(parsed.to_string())
}

/// conda's fuzzy `=1.2` / `1.2`: every release that starts with it.
fn fuzzy(v: &str) -> String {
    let v = v.trim_end_matches(".*").trim_end_matches('*');
    format!("=={v}.*")
}

/// The `major.minor` a specifier pins (`==11.7.*`, `==11.6`, `>=12.1`).
fn minor_of(spec: &str) -> Option<String> {
    let v = spec.trim_start_matches(['=', '>', '<', '~', '!']);
    let parts: Vec<&str> = v.split('.').take(2).collect();
    (parts.len() == 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
        .then(|| parts.join("."))
}

/// `python=3.9` is the interpreter; `python>=3.8` what it must admit.
fn python(spec: &str, at: &str, found: &mut Found) {
    if spec.is_empty() {
        return;
    }
    if spec.starts_with("==") {
        if let Some(minor) = minor_of(spec) {
            if found.python.is_none() {
                found.python = Some((minor, format!("{at}: python{spec}")));
            }
            return;
        }
    }
    found.requires_python.push((spec.to_owned(), format!("{at}: python")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conda_versions_as_pep_440() {
        assert_eq!(specifier("").as_deref(), Some(""));
        assert_eq!(specifier("=1.12.1").as_deref(), Some("==1.12.1.*"));
        assert_eq!(specifier("==0.56.4").as_deref(), Some("==0.56.4"));
        assert_eq!(specifier(">= 1.13").as_deref(), Some(">=1.13"));
        assert_eq!(specifier(">= 3.8, <3.12").as_deref(), Some(">=3.8, <3.12"));
        assert_eq!(specifier(">=1.0,<2").as_deref(), Some(">=1.0, <2"));
        assert_eq!(specifier("=3.9=h12debd9_1").as_deref(), Some("==3.9.*"));
        assert_eq!(specifier("1.26.4 py311_0").as_deref(), Some("==1.26.4.*"));
        assert_eq!(specifier("2.*").as_deref(), Some("==2.*"));
        assert_eq!(specifier("1.2|1.4"), None);
        assert_eq!(minor_of("==11.7.*").as_deref(), Some("11.7"));
        assert_eq!(minor_of(">=12.1").as_deref(), Some("12.1"));
        assert_eq!(minor_of("==12"), None);
    }
}
