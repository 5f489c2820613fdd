//! Where projects keep their inputs: the requirements folders (`requirements/cuda.txt`), the
//! files whose names say they are not what the image runs, and a Python project one directory
//! down (sglang's `python/`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Folders projects keep requirements files in.
const REQUIREMENT_FOLDERS: [&str; 3] = ["requirements", "reqs", "requirements.d"];
/// Stems of the file that lists what runs, most telling first (`cuda.txt` usually includes
/// `common.txt`).
const RUNTIME_STEMS: [&str; 12] = [
    "cuda",
    "gpu",
    "requirements",
    "base",
    "common",
    "runtime",
    "main",
    "default",
    "core",
    "prod",
    "production",
    "install",
];
/// Words in a requirements file's stem that say it is not what the image runs on an NVIDIA GPU.
const NOT_RUNTIME: [&str; 33] = [
    "test", "dev", "doc", "lint", "ci", "bench", "style", "format", "typing", "mypy", "build", "release",
    "example", "notebook", "rocm", "cpu", "tpu", "xpu", "hpu", "neuron", "openvino", "nightly", "mac", "win",
    "lock", "optional", "extra", "npu", "ascend", "mlu", "musa", "mps", "intel",
];

/// Whether a top-level requirements file's name says it is not what the image runs
/// (`requirements-docs.txt`, `requirements_test.txt`).
pub(super) fn not_runtime(path: &Path) -> bool {
    let stem = path.file_stem().map(|s| s.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let rest = stem.strip_prefix("requirements").unwrap_or(&stem);
    rest.split(['-', '_', '.'])
        .any(|part| !part.is_empty() && NOT_RUNTIME.iter().any(|w| part.starts_with(w)))
}

/// Words in a Dockerfile's name that say it builds for other hardware than an NVIDIA GPU on
/// linux/amd64 (text-generation-inference's `Dockerfile_amd`, `Dockerfile.neuron`,
/// `Dockerfile_gaudi`, `Dockerfile_intel`), or an image that is not the project's runtime.
const NOT_THIS_IMAGE: [&str; 22] = [
    "amd", "rocm", "hip", "intel", "xpu", "gaudi", "hpu", "habana", "neuron", "tpu", "npu", "ascend", "cpu",
    "mps", "mac", "win", "test", "dev", "doc", "ci", "nix", "lint",
];
/// Words in a Dockerfile's name that say it is the NVIDIA GPU image.
const GPU_IMAGE: [&str; 3] = ["cuda", "gpu", "nvidia"];

/// Of a project's top-level Dockerfiles, the one `docker build .` builds for an NVIDIA GPU, and
/// why the others are not read: merging them would mix other images' bases and packages into
/// one recipe (text-generation-inference has seven, for AMD, Gaudi, Intel, Neuron, llama.cpp
/// and TensorRT-LLM beside its CUDA one). `Dockerfile` (or `Containerfile`), as `docker build`
/// and `podman build` read by default; else the one whose name says CUDA or GPU; else the only
/// one whose name does not say other hardware; else the first of those by name.
pub(super) fn choose_dockerfile(files: &[PathBuf]) -> (Option<PathBuf>, Option<String>) {
    if files.len() < 2 {
        return (files.first().cloned(), None);
    }
    let name =
        |p: &PathBuf| p.file_name().map(|s| s.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    // The words of the name beside `dockerfile`/`containerfile` (`Dockerfile_amd`,
    // `gpu.Dockerfile`, `Dockerfile.cuda12`).
    let words = |p: &PathBuf| -> Vec<String> {
        name(p)
            .split(['-', '_', '.'])
            .filter(|w| !w.is_empty() && *w != "dockerfile" && *w != "containerfile")
            .map(str::to_owned)
            .collect()
    };
    let says = |p: &PathBuf, list: &[&str]| words(p).iter().any(|w| list.iter().any(|l| w.starts_with(l)));
    let candidates: Vec<&PathBuf> = files.iter().filter(|p| !says(p, &NOT_THIS_IMAGE)).collect();
    let (chosen, why) = if let Some(p) = candidates.iter().find(|p| words(p).is_empty()) {
        ((*p).clone(), "the one `docker build .` reads")
    } else if let Some(p) = candidates.iter().find(|p| says(p, &GPU_IMAGE)) {
        ((*p).clone(), "its name says CUDA or GPU")
    } else if let Some(p) = candidates.first() {
        let why = if candidates.len() == 1 {
            "the only one whose name says no other hardware"
        } else {
            "the first by name of those whose names say no other hardware"
        };
        ((*p).clone(), why)
    } else {
        let names: Vec<String> = files.iter().map(name).collect();
        return (
            None,
            Some(format!(
                "Dockerfiles not read: {}: their names say other hardware than an NVIDIA GPU, or images                  other than the project's runtime (--from names one)",
                names.join(", ")
            )),
        );
    };
    let others: Vec<String> = files.iter().filter(|p| **p != chosen).map(name).collect();
    let why = format!(
        "{}: the Dockerfile read ({why}); not read: {} (other images: merging them would mix their bases and \
         packages; --from names one)",
        chosen.display(),
        others.join(", ")
    );
    (Some(chosen), Some(why))
}

/// The runtime requirements files of a project's requirements folder, and why those.
pub(super) fn requirements_folder(dir: &Path) -> Option<(Vec<PathBuf>, String)> {
    for folder in REQUIREMENT_FOLDERS {
        let path = dir.join(folder);
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "txt" || e == "in"))
            .collect();
        files.sort();
        // `x.in` compiles to `x.txt`: the pinned one.
        let stems: Vec<String> = files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .collect();
        files.retain(|p| {
            p.extension().is_some_and(|e| e == "txt")
                || !p.file_stem().is_some_and(|s| stems.contains(&s.to_string_lossy().into_owned()))
        });
        if files.is_empty() {
            continue;
        }
        let stem =
            |p: &PathBuf| p.file_stem().map(|s| s.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        let runtime: Vec<PathBuf> = files
            .iter()
            .filter(|p| {
                let s = stem(p);
                !NOT_RUNTIME.iter().any(|w| s.split(['-', '_', '.']).any(|part| part.starts_with(w)))
            })
            .cloned()
            .collect();
        let names = |list: &[PathBuf]| list.iter().map(stem).collect::<Vec<_>>().join(", ");
        let left_out: Vec<PathBuf> = files.iter().filter(|p| !runtime.contains(p)).cloned().collect();
        let chosen = RUNTIME_STEMS
            .iter()
            .find_map(|want| runtime.iter().find(|p| stem(p) == *want))
            .map_or_else(|| runtime.clone(), |p| vec![p.clone()]);
        if chosen.is_empty() {
            continue;
        }
        let mut why = format!(
            "{}: the project's requirements folder; read {} (what the image runs)",
            path.display(),
            names(&chosen)
        );
        let others: Vec<PathBuf> = files.iter().filter(|p| !chosen.contains(p)).cloned().collect();
        if !others.is_empty() {
            let _ = write!(
                why,
                "; not read: {} (--from names one{})",
                names(&others),
                if left_out.is_empty() {
                    String::new()
                } else {
                    format!("; {} are for tests, docs or other hardware", names(&left_out))
                }
            );
        }
        return Some((chosen, why));
    }
    None
}

/// The immediate subdirectories of `dir` that hold a Python project (`pyproject.toml` or
/// `setup.py`), leaving out those that by name hold tests, docs, examples, benchmarks or
/// vendored code; `python/` alone when it is one of them.
pub(super) fn projects_below(dir: &Path) -> Vec<String> {
    const NOT: [&str; 14] = [
        "test",
        "tests",
        "doc",
        "docs",
        "example",
        "examples",
        "benchmark",
        "benchmarks",
        "third_party",
        "3rdparty",
        "vendor",
        "scripts",
        "tools",
        "assets",
    ];
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| !n.starts_with('.') && !NOT.contains(&n.to_ascii_lowercase().as_str()))
        .filter(|n| ["pyproject.toml", "setup.py"].iter().any(|f| dir.join(n).join(f).is_file()))
        .collect();
    found.sort();
    if found.iter().any(|n| n == "python") {
        return vec!["python".to_owned()];
    }
    found
}
