//! A README's `pip install` lines, read only where a project has no manifest at all: nanoGPT's
//! install instructions are its README's `pip install torch numpy transformers datasets
//! tiktoken wandb tqdm`, and no file lists its packages.

use std::path::{Path, PathBuf};

use super::requirements::{read_tokens, Origin};
use super::{Found, InitError};

/// The names a README goes by, in the order they are looked for.
pub(super) const NAMES: [&str; 4] = ["README.md", "README.rst", "README.txt", "README"];

/// The most a README is read.
const MAX_README: u64 = 1 << 20;

/// The README of `dir` with at least one `pip install` line, when there is one.
pub(super) fn with_pip_lines(dir: &Path) -> Option<PathBuf> {
    NAMES.iter().map(|n| dir.join(n)).find(|p| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
            && stackbuild_common::read_text(p, MAX_README, "README")
                .is_ok_and(|t| t.lines().any(|l| pip_args(l).is_some()))
    })
}

/// Reads every `pip install` line of the README at `path` (in code blocks or not; a shell
/// prompt `$ ` before it, a `!` of a notebook cell), as a Dockerfile's pip lines are read.
pub(super) fn read_file(path: &Path, found: &mut Found, project: &Path) -> Result<(), InitError> {
    let text = stackbuild_common::read_text(path, MAX_README, "README")
        .map_err(|source| InitError::Read { path: path.to_owned(), source })?;
    found.inputs.push(path.to_owned());
    let mut stack = Vec::new();
    let mut lines = 0;
    for (i, line) in text.lines().enumerate() {
        for command in line.split("&&").flat_map(|c| c.split(';')) {
            let Some(args) = pip_args(command) else { continue };
            let origin = Origin { path, line: i + 1, dir: project, project };
            read_tokens(&args, &origin, found, &mut stack, false)?;
            lines += 1;
        }
    }
    found.decide(format!(
        "{}: no manifest lists the packages; its {lines} `pip install` line(s) are read, as a new user following it \
         would run them",
        path.display()
    ));
    Ok(())
}

/// What a README's install instructions add where the manifests leave a choice open: the
/// extras of the first line that installs the project itself (flux's `pip install -e ".[all]"`,
/// litgpt's `pip install 'litgpt[extra]'`), and its torch pins, where no manifest names torch
/// (`HunyuanVideo`'s `conda install pytorch==2.4.0 torchvision==0.19.0 ... pytorch-cuda=12.4`:
/// its requirements.txt leaves torch to the reader).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Supplement {
    /// The extras, and `README.md:LINE`.
    pub(super) extras: Option<(Vec<String>, String)>,
    /// `torch==X` (and torchvision's, torchaudio's), each with `README.md:LINE`: the first
    /// line's exact pins of each.
    pub(super) torch: Vec<(String, String, String)>,
}

/// The README of `dir`, when it has one.
pub(super) fn of_dir(dir: &Path) -> Option<PathBuf> {
    NAMES.iter().map(|n| dir.join(n)).find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
}

/// Reads the [`Supplement`] of the README at `path` for the project named `name`.
pub(super) fn supplement(path: &Path, name: Option<&str>) -> Supplement {
    let Ok(text) = stackbuild_common::read_text(path, MAX_README, "README") else {
        return Supplement::default();
    };
    let mut out = Supplement::default();
    let normal = |n: &str| n.to_ascii_lowercase().replace(['_', '.'], "-");
    for (i, line) in text.lines().enumerate() {
        let at = format!("{}:{}", path.display(), i + 1);
        for command in line.split("&&").flat_map(|c| c.split(';')) {
            // Words up to a comment (`pip install openrlhf  # Basic`).
            let command = command.split(" #").next().unwrap_or(command);
            let (args, conda) = match (pip_args(command), conda_args(command)) {
                (Some(a), _) => (a, false),
                (None, Some(a)) => (a, true),
                (None, None) => continue,
            };
            let mut skip = false;
            let mut torch_here = Vec::new();
            for arg in &args {
                if std::mem::take(&mut skip) {
                    continue;
                }
                if matches!(
                    arg.as_str(),
                    "-r" | "-c"
                        | "-f"
                        | "-i"
                        | "--index-url"
                        | "--extra-index-url"
                        | "--find-links"
                        | "--channel"
                ) {
                    skip = true;
                    continue;
                }
                if arg.starts_with('-') {
                    continue;
                }
                // `.[all]`, `./[train]`, `litgpt[extra]`: the project with extras.
                let (head, extras) = match arg.split_once('[') {
                    Some((h, rest)) => {
                        (h, rest.trim_end_matches(']').split(',').map(|e| e.trim().to_owned()).collect())
                    }
                    None => (arg.as_str(), Vec::new()),
                };
                let itself = matches!(head, "." | "./") || name.is_some_and(|n| normal(head) == normal(n));
                if itself && !conda {
                    if out.extras.is_none() {
                        out.extras =
                            Some((extras.into_iter().filter(|e| !e.is_empty()).collect(), at.clone()));
                    }
                    continue;
                }
                // `torch==2.4.0`; conda's `pytorch==2.4.0` and `pytorch=2.4.0`.
                let spec = if conda { arg.replacen("pytorch", "torch", 1) } else { arg.clone() };
                let (pkg, version) =
                    match spec.split_once("==").or_else(|| conda.then(|| spec.split_once('=')).flatten()) {
                        Some((p, v)) => (p.to_owned(), v.to_owned()),
                        None => continue,
                    };
                if matches!(pkg.as_str(), "torch" | "torchvision" | "torchaudio")
                    && !version.is_empty()
                    && version.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+')
                {
                    torch_here.push((format!("{pkg}=={version}"), pkg, at.clone()));
                }
            }
            for pin in torch_here {
                if !out.torch.iter().any(|(_, p, _)| *p == pin.1) {
                    out.torch.push(pin);
                }
            }
        }
    }
    out
}

/// The words after `install` of a `conda install` (or mamba's) command.
fn conda_args(command: &str) -> Option<Vec<String>> {
    let command = command.trim().trim_start_matches("$ ").trim_start_matches('!').trim();
    let words: Vec<String> =
        command.split_whitespace().map(|w| w.trim_matches(['`', '"', '\'']).to_owned()).collect();
    match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["conda" | "mamba" | "micromamba", "install", ..] => Some(words[2..].to_vec()),
        _ => None,
    }
}

/// The words after `install` of a `pip install` command (`pip`, `pip3`, `python -m pip`,
/// `uv pip`), with a prompt or notebook `!` before it.
fn pip_args(command: &str) -> Option<Vec<String>> {
    let command =
        command.trim().trim_start_matches("$ ").trim_start_matches("> ").trim_start_matches('!').trim();
    // A placeholder for the reader to fill in (`pip install -r requirements/full/<requirements
    // file according to the table below>`) is prose, not packages.
    if command.contains('<') && command.contains('>') && !command.contains("<=") && !command.contains(">=") {
        return None;
    }
    let words: Vec<String> = command.split_whitespace().map(|w| w.trim_matches('`').to_owned()).collect();
    let skip = match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["pip" | "pip3", "install", ..] => 2,
        ["uv", "pip", "install", ..] => 3,
        [python, "-m", "pip", "install", ..] if python.starts_with("python") => 4,
        _ => return None,
    };
    // Quotes a shell would take away (`"transformers>=4.40"`).
    let args: Vec<String> = words[skip..]
        .iter()
        .map(|w| w.trim_matches(['"', '\'']).to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    (!args.is_empty()).then_some(args)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pip_lines_of_a_readme() {
        assert_eq!(
            super::pip_args("pip install torch numpy \"transformers>=4\"").unwrap(),
            ["torch", "numpy", "transformers>=4"]
        );
        assert_eq!(super::pip_args("$ python3 -m pip install -e .").unwrap(), ["-e", "."]);
        assert_eq!(super::pip_args("!pip install tiktoken").unwrap(), ["tiktoken"]);
        assert!(super::pip_args("Then pip install what you need").is_none());
        assert!(super::pip_args("pip install").is_none());
        let placeholder = "pip install -r requirements/full/<requirements file according to table below>";
        assert!(super::pip_args(placeholder).is_none());
        assert_eq!(super::pip_args("pip install torch>=2").unwrap(), ["torch>=2"]);
    }

    #[test]
    fn what_a_readme_adds_to_the_manifests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("README.md");
        // HunyuanVideo's, flux's, OpenRLHF's shapes.
        std::fs::write(
            &path,
            "```\nconda install pytorch==2.4.0 torchvision==0.19.0 torchaudio==2.4.0 pytorch-cuda=11.8 -c pytorch\n\
             pip install torch==2.5.0 --index-url https://download.pytorch.org/whl/cu118\n\
             pip install openrlhf[vllm,ring]   # + All optimizations\npip install -e \".[all]\"\n```\n",
        )
        .unwrap();
        let got = super::supplement(&path, Some("OpenRLHF"));
        let at = |line: usize| format!("{}:{line}", path.display());
        assert_eq!(got.extras, Some((vec!["vllm".to_owned(), "ring".to_owned()], at(4))));
        assert_eq!(
            got.torch,
            [
                ("torch==2.4.0".to_owned(), "torch".to_owned(), at(2)),
                ("torchvision==0.19.0".to_owned(), "torchvision".to_owned(), at(2)),
                ("torchaudio==2.4.0".to_owned(), "torchaudio".to_owned(), at(2)),
            ]
        );
        std::fs::write(&path, "pip install -e .\npip install torch\n").unwrap();
        assert_eq!(
            super::supplement(&path, None),
            super::Supplement { extras: Some((vec![], at(1))), torch: vec![] }
        );
    }
}
