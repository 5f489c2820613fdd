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
