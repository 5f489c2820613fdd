//! A Dockerfile (<https://docs.docker.com/reference/dockerfile/>): the final stage's `FROM`
//! (`nvidia/cuda:<cuda>-cudnn<N>-<flavor>-ubuntu<ver>`, `python:<ver>`, `pytorch/pytorch`,
//! `ubuntu`, `debian`), its `pip install`, `uv sync` and `apt-get install` lines, `ENV`, `WORKDIR`, `CMD`,
//! `ENTRYPOINT`, `USER`, and the `COPY`/`ADD` of the project. Nothing in it is run; whatever
//! has no recipe field is listed as not translated.

use std::collections::BTreeMap;
use std::path::Path;

use super::requirements::{logical_lines, read_tokens, split_words, Origin};
use super::{Found, Untranslated};

const MAX_FILE: u64 = 4 << 20;

/// Reads `path` into `found`.
pub(super) fn read_file(path: &Path, found: &mut Found, project: &Path) -> Result<(), super::InitError> {
    let text = stackbuild_common::read_text(path, MAX_FILE, "Dockerfile")
        .map_err(|source| super::InitError::Read { path: path.to_owned(), source })?;
    found.inputs.push(path.to_owned());
    let lines = logical_lines(&text);
    // The final stage: from its FROM on (earlier stages build things this one may COPY).
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, (_, l))| l.split_whitespace().next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")))
        .map(|(i, _)| i)
        .collect();
    let Some(_) = starts.last() else {
        found.untranslated.push(Untranslated::new(path, 0, "(no FROM)", "not a Dockerfile"));
        return Ok(());
    };
    let chain = stage_chain(&lines, &starts);
    if starts.len() > 1 {
        let lines_of: Vec<String> = chain.iter().map(|&i| lines[starts[i]].0.to_string()).collect();
        found.decide(format!(
            "{}: {} build stages; the recipe follows the final one (from line{} {})",
            path.display(),
            starts.len(),
            if chain.len() > 1 { "s" } else { "" },
            lines_of.join(", ")
        ));
    }
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    for (_, text) in &lines[..starts[chain[0]]] {
        let (word, rest) = split_instruction(text);
        if word == "ARG" {
            read_arg(rest, &mut args);
        }
    }
    // A RUN's relative paths are the image's, under a WORKDIR the project's files were copied
    // to (`COPY . .`), from the build context, which is the project's directory as a rule
    // (`docker build .`), also for a Dockerfile kept in `docker/`.
    let dir = project;
    let mut stack = Vec::new();
    let ranges: Vec<(usize, usize)> =
        chain.iter().map(|&i| (starts[i], starts.get(i + 1).copied().unwrap_or(lines.len()))).collect();
    for (k, (from, to)) in ranges.iter().enumerate() {
        for (line_no, text) in &lines[*from..*to] {
            let origin = Origin { path, line: *line_no, dir, project };
            let (word, rest) = split_instruction(text);
            let rest = substitute(rest, &args);
            match word.as_str() {
                // Only the first stage of the chain names a real image.
                "FROM" if k > 0 => {}
                "FROM" => read_from(&rest, &origin, found),
                "ARG" => read_arg(&rest, &mut args),
                "RUN" => read_run(&rest, &origin, found, &mut stack)?,
                "ENV" => {
                    for (k, v) in key_values(&rest) {
                        args.insert(k.clone(), v.clone());
                        found.env.insert(k, v);
                    }
                }
                "WORKDIR" => found.workdir = Some(rest.trim().to_owned()),
                "USER" => found.user = Some(rest.trim().to_owned()),
                "CMD" => {
                    found.cmd = exec_form(&rest)
                        .or_else(|| Some(vec!["/bin/sh".into(), "-c".into(), rest.trim().into()]));
                }
                "ENTRYPOINT" => {
                    found.entrypoint = exec_form(&rest)
                        .or_else(|| Some(vec!["/bin/sh".into(), "-c".into(), rest.trim().into()]));
                }
                "COPY" | "ADD" => read_copy(&word, &rest, &origin, found),
                "LABEL" => found.labels.extend(key_values(&rest)),
                "EXPOSE" | "SHELL" | "HEALTHCHECK" | "STOPSIGNAL" | "VOLUME" | "ONBUILD" | "MAINTAINER" => {
                    found.untranslated.push(Untranslated::new(
                        path,
                        *line_no,
                        text,
                        "no recipe field for this instruction",
                    ));
                }
                _ => found.untranslated.push(Untranslated::new(
                    path,
                    *line_no,
                    text,
                    "not a Dockerfile instruction",
                )),
            }
        }
    }
    Ok(())
}

/// The subdirectory of `project` whose Python project the Dockerfile at `path` installs, and
/// the line that says so: a `RUN` that changes into it before `uv sync` or `pip install`
/// (text-generation-inference's `RUN cd server && uv sync --frozen --extra gen ...`), or
/// `uv sync --directory DIR` / `--project DIR`. Only a relative directory inside the project
/// that holds a `pyproject.toml` or `setup.py`.
pub(super) fn project_dir(path: &Path, project: &Path) -> Option<(String, usize)> {
    let text = stackbuild_common::read_text(path, MAX_FILE, "Dockerfile").ok()?;
    let holds_project = |dir: &str| {
        let dir = dir.trim_end_matches('/');
        !dir.is_empty()
            && dir != "."
            && !dir.starts_with('/')
            && !dir.split('/').any(|part| part == "..")
            && ["pyproject.toml", "setup.py"].iter().any(|f| project.join(dir).join(f).is_file())
    };
    for (line_no, text) in logical_lines(&text) {
        let (word, rest) = split_instruction(&text);
        if word != "RUN" {
            continue;
        }
        let mut cwd: Option<String> = None;
        for (_, words) in run_commands(rest) {
            let args: Vec<&str> = words.iter().map(String::as_str).collect();
            let dir = match args.as_slice() {
                ["cd", dir, ..] => {
                    cwd = Some((*dir).to_owned());
                    continue;
                }
                ["uv", "sync", rest @ ..] => rest
                    .windows(2)
                    .find(|w| matches!(w[0], "--directory" | "--project"))
                    .map(|w| w[1].to_owned())
                    .or_else(|| {
                        rest.iter().find_map(|a| {
                            a.strip_prefix("--directory=")
                                .or_else(|| a.strip_prefix("--project="))
                                .map(str::to_owned)
                        })
                    })
                    .or_else(|| cwd.clone()),
                [pip, "install", ..] | [_, "-m", pip, "install", ..] | ["uv", pip, "install", ..]
                    if matches!(*pip, "pip" | "pip3") =>
                {
                    cwd.clone()
                }
                _ => None,
            };
            if let Some(dir) = dir.filter(|d| holds_project(d)) {
                return Some((dir.trim_end_matches('/').to_owned(), line_no));
            }
        }
    }
    None
}

/// The stages the final one is made of, first to last: a stage `FROM <an earlier stage's
/// name>` is that stage plus its own lines, back to the stage on a real image. `starts` are the
/// indexes of the `FROM` lines in `lines`.
fn stage_chain(lines: &[(usize, String)], starts: &[usize]) -> Vec<usize> {
    let stage_of = |i: usize| -> (Option<String>, Option<String>) {
        let (_, rest) = split_instruction(&lines[starts[i]].1);
        let words: Vec<&str> = rest.split_whitespace().filter(|w| !w.starts_with("--")).collect();
        let image = words.first().map(|w| w.to_ascii_lowercase());
        let alias = match words.as_slice() {
            [_, kw, name, ..] if kw.eq_ignore_ascii_case("as") => Some(name.to_ascii_lowercase()),
            _ => None,
        };
        (image, alias)
    };
    let mut chain = vec![starts.len() - 1];
    while let Some(&i) = chain.last() {
        let (image, _) = stage_of(i);
        let parent = (0..i).rev().find(|&j| stage_of(j).1.is_some() && stage_of(j).1 == image);
        match parent {
            Some(j) if chain.len() < starts.len() => chain.push(j),
            _ => break,
        }
    }
    chain.reverse();
    chain
}

fn split_instruction(line: &str) -> (String, &str) {
    let line = line.trim_start();
    let end = line.find(char::is_whitespace).unwrap_or(line.len());
    (line[..end].to_ascii_uppercase(), line[end..].trim())
}

fn read_arg(rest: &str, args: &mut BTreeMap<String, String>) {
    for word in split_words(rest) {
        if let Some((k, v)) = word.split_once('=') {
            args.insert(k.to_owned(), v.to_owned());
        }
    }
}

/// `$NAME` and `${NAME}` from the ARG and ENV defaults seen so far (`${NAME:-default}` too);
/// unknown names stay as written.
fn substitute(text: &str, args: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, default, len) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => {
                    let body = &inner[..end];
                    let (n, d) = body.split_once(":-").map_or((body, None), |(n, d)| (n, Some(d)));
                    (n.to_owned(), d.map(str::to_owned), end + 2)
                }
                None => (String::new(), None, 0),
            }
        } else {
            let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (after[..end].to_owned(), None, end)
        };
        match args.get(&name).cloned().or(default) {
            Some(v) if !name.is_empty() => out.push_str(&v),
            _ => {
                out.push_str(&rest[at..=at + len.min(after.len())].chars().take(len + 1).collect::<String>());
            }
        }
        rest = &rest[(at + 1 + len).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// `ENV A=1 B="two words"` and the legacy `ENV A 1`.
fn key_values(rest: &str) -> Vec<(String, String)> {
    let words = split_words(rest);
    if words.first().is_some_and(|w| !w.contains('=')) {
        let (k, v) = rest.trim().split_once(char::is_whitespace).unwrap_or((rest.trim(), ""));
        return vec![(k.to_owned(), v.trim().to_owned())];
    }
    words.iter().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// `["python3", "app.py"]`.
fn exec_form(rest: &str) -> Option<Vec<String>> {
    serde_json::from_str::<Vec<String>>(rest.trim()).ok()
}

fn read_from(rest: &str, origin: &Origin<'_>, found: &mut Found) {
    let words: Vec<&str> = rest.split_whitespace().filter(|w| !w.starts_with("--platform")).collect();
    let Some(image) = words.first() else { return };
    let at = format!("{}:{}", origin.path.display(), origin.line);
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (*image, "latest"),
    };
    let repo =
        repo.trim_start_matches("docker.io/").trim_start_matches("library/").trim_start_matches("nvcr.io/");
    let ubuntu = |v: &str| match v {
        "18.04" => Some("bionic"),
        "20.04" => Some("focal"),
        "22.04" => Some("jammy"),
        "24.04" => Some("noble"),
        _ => None,
    };
    match repo {
        "nvidia/cuda" => {
            // `12.1.1-cudnn8-runtime-ubuntu22.04`; from CUDA 12.4 the tags say `cudnn` (cuDNN 9).
            let parts: Vec<&str> = tag.split('-').collect();
            if let Some(cuda) = parts.first().and_then(|v| cuda_minor(v)) {
                found.set_cuda(&cuda, &format!("{at}: FROM {image}"));
            }
            if let Some(c) = parts.iter().find(|p| p.starts_with("cudnn")) {
                let major = c.trim_start_matches("cudnn");
                found.cudnn = Some((
                    if major.is_empty() { "9".to_owned() } else { major.to_owned() },
                    format!("{at}: FROM {image}"),
                ));
            }
            match parts.iter().find_map(|p| p.strip_prefix("ubuntu")).and_then(ubuntu) {
                Some(suite) => found.distro = Some(("ubuntu".into(), suite.into(), format!("{at}: FROM {image}"))),
                None => found.untranslated.push(Untranslated::new(
                    origin.path,
                    origin.line,
                    &format!("FROM {image}"),
                    "its OS is not Debian or Ubuntu; the recipe builds a Debian or Ubuntu base",
                )),
            }
            found.decide(format!(
                "{at}: FROM {image}: its CUDA and cuDNN libraries come in the image from the wheels (torch's \
                 nvidia-* dependencies), not from the base, as on PyPI since torch 2.1"
            ));
        }
        "python" => {
            let version: String = tag.split('-').next().unwrap_or_default().to_owned();
            if version.split('.').count() >= 2 && version.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                let minor: Vec<&str> = version.split('.').take(2).collect();
                found.python = Some((minor.join("."), format!("{at}: FROM {image}")));
            }
            if let Some(suite) = ["bookworm", "bullseye", "trixie"].into_iter().find(|s| tag.contains(s)) {
                found.distro = Some(("debian".into(), suite.into(), format!("{at}: FROM {image}")));
            }
        }
        "pytorch/pytorch" => {
            // `2.1.0-cuda12.1-cudnn8-runtime`.
            let parts: Vec<&str> = tag.split('-').collect();
            if let Some(v) = parts.first().filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit())) {
                found.add_requirement(format!("torch=={v}"), "torch".into(), false, origin);
            }
            if let Some(cuda) = parts.iter().find_map(|p| p.strip_prefix("cuda")).and_then(cuda_minor) {
                found.set_cuda(&cuda, &format!("{at}: FROM {image}"));
            }
            if let Some(c) = parts.iter().find_map(|p| p.strip_prefix("cudnn")) {
                found.cudnn = Some((c.to_owned(), format!("{at}: FROM {image}")));
            }
            found.untranslated.push(Untranslated::new(
                origin.path,
                origin.line,
                &format!("FROM {image}"),
                "its conda Python and packages; the recipe installs torch's wheel on a Debian base instead",
            ));
        }
        "ubuntu" => match ubuntu(tag).or_else(|| ["bionic", "focal", "jammy", "noble"].into_iter().find(|s| *s == tag)) {
            Some(suite) => found.distro = Some(("ubuntu".into(), suite.into(), format!("{at}: FROM {image}"))),
            None => found.untranslated.push(Untranslated::new(origin.path, origin.line, &format!("FROM {image}"), "an Ubuntu release this init does not know")),
        },
        "debian" => match ["bullseye", "bookworm", "trixie"].into_iter().find(|s| tag.starts_with(s)) {
            Some(suite) => found.distro = Some(("debian".into(), suite.into(), format!("{at}: FROM {image}"))),
            None => found.untranslated.push(Untranslated::new(origin.path, origin.line, &format!("FROM {image}"), "a Debian release this init does not know")),
        },
        _ => found.untranslated.push(Untranslated::new(
            origin.path,
            origin.line,
            &format!("FROM {image}"),
            "an image whose contents init cannot tell; the recipe builds a Debian or Ubuntu base (or `[base] registry = ...` takes it as it is)",
        )),
    }
}

/// `12.1.1` -> `12.1`.
fn cuda_minor(v: &str) -> Option<String> {
    let parts: Vec<&str> = v.split('.').collect();
    let ok =
        parts.len() >= 2 && parts[..2].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok.then(|| format!("{}.{}", parts[0], parts[1]))
}

/// The commands of a `RUN` instruction's text, each as written and as the words of what runs
/// (`in_environment`): the exec form joined, `BuildKit`'s own flags (`RUN --mount=type=cache,...
/// uv sync`) left out, split at `&&`, `||` and `;`.
fn run_commands(rest: &str) -> Vec<(String, Vec<String>)> {
    let rest = exec_form(rest).map_or_else(|| rest.to_owned(), |v| v.join(" "));
    let mut rest = rest.trim_start();
    while ["--mount=", "--network=", "--security="].iter().any(|f| rest.starts_with(f)) {
        rest = rest.split_once(char::is_whitespace).map_or("", |(_, r)| r).trim_start();
    }
    rest.split("&&")
        .flat_map(|c| c.split("||"))
        .flat_map(|c| c.split(';'))
        .map(|c| (c.trim().to_owned(), in_environment(&split_words(c.trim()))))
        .collect()
}

/// A `RUN`'s shell commands, split at `&&`, `||`, `;` and `|`: `pip install` and `apt-get
/// install` are read, the usual housekeeping is known, anything else is listed.
fn read_run(
    rest: &str,
    origin: &Origin<'_>,
    found: &mut Found,
    stack: &mut Vec<std::path::PathBuf>,
) -> Result<(), super::InitError> {
    for (command, words) in run_commands(rest) {
        let command = command.as_str();
        let Some(first) = words.first() else { continue };
        let program = first.rsplit('/').next().unwrap_or(first);
        let args: Vec<String> = words[1..].to_vec();
        let is_pip = matches!(program, "pip" | "pip3")
            || (program.starts_with("python")
                && args.first().map(String::as_str) == Some("-m")
                && args.get(1).map(String::as_str) == Some("pip"));
        let is_uv_pip = program == "uv" && args.first().map(String::as_str) == Some("pip");
        let pip_args: Option<&[String]> = if is_pip {
            let skip = if program.starts_with("python") { 2 } else { 0 };
            Some(&args[skip..])
        } else if is_uv_pip {
            Some(&args[1..])
        } else {
            None
        };
        if let Some(pip) = pip_args {
            match pip.first().map(String::as_str) {
                Some("install") => read_tokens(&pip[1..], origin, found, stack, false)?,
                Some("uninstall" | "cache" | "list" | "freeze" | "check") => {}
                _ => found.untranslated.push(Untranslated::new(
                    origin.path,
                    origin.line,
                    command.trim(),
                    "a pip command that installs nothing",
                )),
            }
            continue;
        }
        if program == "uv" && args.first().map(String::as_str) == Some("sync") {
            read_uv_sync(&args[1..], origin, found);
            continue;
        }
        match program {
            "apt-get" | "apt" => match args.iter().find(|a| !a.starts_with('-')).map(String::as_str) {
                Some("install") => {
                    let mut it = args.iter().skip_while(|a| *a != "install").skip(1);
                    while let Some(a) = it.next() {
                        if a == "-o" || a == "-t" {
                            it.next();
                        } else if !a.starts_with('-') && !found.apt.contains(a) {
                            found.apt.push(a.clone());
                        }
                    }
                }
                Some("update" | "clean" | "autoremove" | "upgrade" | "dist-upgrade") | None => {}
                Some(_) => found.untranslated.push(Untranslated::new(
                    origin.path,
                    origin.line,
                    command.trim(),
                    "an apt command that is not an install",
                )),
            },
            // Housekeeping an image build does itself (the base drops apt's lists and caches).
            "rm" if command.contains("/var/lib/apt/lists") || command.contains(".cache") => {}
            "true" | ":" | "set" | "echo" => {}
            _ => found.untranslated.push(Untranslated::new(
                origin.path,
                origin.line,
                command.trim(),
                "a command init does not run or translate",
            )),
        }
    }
    Ok(())
}

/// `uv sync ARGS`: the project's dependencies with the extras and groups its flags name, read
/// when `pyproject.toml` is ([`super::UvSync`]). `--no-install-project` changes nothing here:
/// the project's own tree is a `[[source]]` only where a line installs it.
fn read_uv_sync(args: &[String], origin: &Origin<'_>, found: &mut Found) {
    let mut sync =
        super::UvSync { origin: format!("{}:{}", origin.path.display(), origin.line), ..Default::default() };
    let mut dev = true;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--extra" => sync.extras.extend(value()),
            "--group" => sync.groups.extend(value()),
            "--all-extras" => sync.all_extras = true,
            "--all-groups" => sync.all_groups = true,
            "--no-dev" | "--no-default-groups" => dev = false,
            // Flags with a value that says nothing of what is installed.
            "--python"
            | "-p"
            | "--index"
            | "--default-index"
            | "--index-url"
            | "--extra-index-url"
            | "--directory"
            | "--project"
            | "--package"
            | "--link-mode"
            | "--compile-bytecode-timeout" => {
                let _ = value();
            }
            _ => {}
        }
    }
    if dev && !sync.groups.iter().any(|g| g == "dev") {
        sync.groups.push("dev".to_owned());
    }
    // ", every optional dependency", ", the extras a, b", or nothing.
    let part = |all: bool, names: &[String], every: &str, some: &str| match (all, names.is_empty()) {
        (true, _) => format!(", every {every}"),
        (false, true) => String::new(),
        (false, false) => format!(", the {some} {}", names.join(", ")),
    };
    found.decide(format!(
        "{}: `uv sync` installs the project's dependencies{}{}{}",
        sync.origin,
        part(sync.all_extras, &sync.extras, "optional dependency", "extras"),
        part(sync.all_groups, &sync.groups, "dependency group", "groups"),
        if dev { " (uv syncs the `dev` group unless told --no-dev)" } else { "" }
    ));
    found.uv_sync = Some(sync);
}

/// The command `conda run -n ENV CMD...` (or mamba's, micromamba's) runs: `CMD...`, as the
/// environment's pip is the image's pip (robomimic's `conda run -n robomimic_venv pip install
/// ...`); any other command as it is.
fn in_environment(words: &[String]) -> Vec<String> {
    // What runs the command, not the command: assignments before it
    // (`DEBIAN_FRONTEND=noninteractive apt-get install ...`), `env` with its own, and `sudo`.
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let (mut start, mut sudo) = (0, false);
    while let Some(w) = words.get(start) {
        match w.as_str() {
            "sudo" => sudo = true,
            "env" => {}
            w if (sudo && w.starts_with('-')) || assignment(w) => {}
            _ => break,
        }
        start += 1;
    }
    let words = &words[start..];
    let program = words.first().map(|w| w.rsplit('/').next().unwrap_or(w).to_owned()).unwrap_or_default();
    if !matches!(program.as_str(), "conda" | "mamba" | "micromamba")
        || words.get(1).map(String::as_str) != Some("run")
    {
        return words.to_vec();
    }
    let mut i = 2;
    while let Some(w) = words.get(i) {
        match w.as_str() {
            "-n" | "--name" | "-p" | "--prefix" | "--cwd" => i += 2,
            w if w.starts_with('-') => i += 1,
            _ => break,
        }
    }
    words[i.min(words.len())..].to_vec()
}

/// `COPY . /app` of the project: where the [[source]] goes.
fn read_copy(word: &str, rest: &str, origin: &Origin<'_>, found: &mut Found) {
    let words: Vec<String> = exec_form(rest)
        .unwrap_or_else(|| split_words(rest))
        .into_iter()
        .filter(|w| !w.starts_with("--"))
        .collect();
    let [sources @ .., dest] = words.as_slice() else { return };
    if sources.iter().any(|s| s == "." || s == "./") {
        // A relative destination is relative to the WORKDIR in effect (`/` without one).
        let dest = if dest.starts_with('/') {
            dest.clone()
        } else {
            let workdir = found.workdir.clone().unwrap_or_else(|| "/".to_owned());
            let joined = Path::new(&workdir).join(dest);
            let mut parts: Vec<String> = Vec::new();
            for c in joined.components() {
                match c {
                    std::path::Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
                    std::path::Component::ParentDir => {
                        parts.pop();
                    }
                    _ => {}
                }
            }
            format!("/{}", parts.join("/"))
        };
        if dest == "/" {
            // The project over the image's root: the recipe keeps it apart (init's default).
            found.decide(format!(
                "{}:{}: {word} {rest} copies the project to /; the recipe puts it in its own directory",
                origin.path.display(),
                origin.line
            ));
            return;
        }
        found.source_dest = Some((dest, format!("{}:{}: {word} {rest}", origin.path.display(), origin.line)));
    } else if sources.iter().all(|s| {
        s.starts_with("requirements")
            || s == "pyproject.toml"
            || Path::new(s).extension().is_some_and(|e| e == "lock")
    }) {
        // The files a pip line reads: already read from the project.
    } else {
        found.untranslated.push(Untranslated::new(
            origin.path,
            origin.line,
            &format!("{word} {rest}"),
            "only the project directory goes into the image (as the [[source]]); add other trees as [[source]]s",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{in_environment, split_words};

    #[test]
    fn the_command_behind_assignments_sudo_env_and_conda_run() {
        let command = |line: &str| in_environment(&split_words(line)).join(" ");
        // text-generation-inference's apt line.
        assert_eq!(
            command("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git"),
            "apt-get install -y --no-install-recommends git"
        );
        assert_eq!(command("sudo -E env A=1 B_2=x pip install six"), "pip install six");
        assert_eq!(command("conda run -n venv --no-capture-output pip install six"), "pip install six");
        assert_eq!(command("pip install a=b"), "pip install a=b");
        assert_eq!(command("-E pip"), "-E pip");
    }
}
