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
}
