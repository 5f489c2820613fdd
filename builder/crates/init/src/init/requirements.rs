//! pip's requirements files (<https://pip.pypa.io/en/stable/reference/requirements-file-format/>):
//! requirement lines (PEP 508, with markers and `--hash` options), `-r`/`-c` includes relative
//! to the including file, `--index-url`, `--extra-index-url`, `--find-links`, `-e` of the
//! project itself, `\` continuations and `#` comments. The same tokens are read from a
//! Dockerfile's `pip install` arguments.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use super::{Found, Untranslated};

/// The largest requirements file read.
const MAX_FILE: u64 = 4 << 20;
/// How deep `-r` includes may nest (pip has no limit; a cycle is caught before this).
const MAX_DEPTH: usize = 16;

/// Reads `path` (and what it includes) into `found`.
pub(super) fn read_file(path: &Path, found: &mut Found, project: &Path) -> Result<(), super::InitError> {
    read_nested(path, found, project, &mut Vec::new(), false)
}

fn read_nested(
    path: &Path,
    found: &mut Found,
    project: &Path,
    stack: &mut Vec<PathBuf>,
    constraints: bool,
) -> Result<(), super::InitError> {
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    if stack.contains(&canonical) || stack.len() > MAX_DEPTH {
        found.untranslated.push(Untranslated::new(path, 0, "-r", "an include cycle; read once"));
        return Ok(());
    }
    let text = stackbuild_common::read_text(path, MAX_FILE, "requirements file")
        .map_err(|source| super::InitError::Read { path: path.to_owned(), source })?;
    found.inputs.push(path.to_owned());
    stack.push(canonical);
    let dir = path.parent().unwrap_or(Path::new("."));
    for (line_no, line) in logical_lines(&text) {
        let origin = Origin { path, line: line_no, dir, project };
        read_line(&line, &origin, found, stack, constraints)?;
    }
    stack.pop();
    Ok(())
}

/// Reads one logical line of a requirements file (or an item of a conda environment's `pip:`
/// list, which pip writes to a requirements file and reads as one).
pub(super) fn read_line(
    line: &str,
    origin: &Origin<'_>,
    found: &mut Found,
    stack: &mut Vec<PathBuf>,
    constraints: bool,
) -> Result<(), super::InitError> {
    // A requirement line is the requirement up to its first option (` --hash=...`), as pip
    // reads it: its marker's quotes are the marker's, not a shell's.
    let (requirement, options) = if line.starts_with('-') {
        ("", line)
    } else {
        match line.find(" -").or_else(|| line.find("\t-")) {
            Some(at) => (line[..at].trim(), &line[at..]),
            None => (line, ""),
        }
    };
    if !requirement.is_empty() {
        add_requirement(requirement, origin, found, constraints);
    }
    read_tokens(&split_words(options), origin, found, stack, constraints)
}

/// Where a line of requirements comes from.
pub(super) struct Origin<'a> {
    /// The file.
    pub path: &'a Path,
    /// Its line (1-based).
    pub line: usize,
    /// What relative includes are relative to.
    pub dir: &'a Path,
    /// The project directory (an `-e .` of it is the project itself).
    pub project: &'a Path,
}

/// Reads one line's (or one `pip install`'s) words: options and requirements.
#[allow(clippy::too_many_lines)] // one arm per pip option
pub(super) fn read_tokens(
    tokens: &[String],
    origin: &Origin<'_>,
    found: &mut Found,
    stack: &mut Vec<PathBuf>,
    constraints: bool,
) -> Result<(), super::InitError> {
    let mut i = 0;
    let untranslated = |found: &mut Found, what: &str, why: &str| {
        found.untranslated.push(Untranslated::new(origin.path, origin.line, what, why));
    };
    while i < tokens.len() {
        let token = &tokens[i];
        // `--opt=value` or `--opt value`.
        let (opt, inline) = match token.split_once('=') {
            Some((o, v)) if o.starts_with('-') => (o.to_owned(), Some(v.to_owned())),
            _ => (token.clone(), None),
        };
        let takes_value = matches!(
            opt.as_str(),
            "-r" | "--requirement"
                | "-c"
                | "--constraint"
                | "-i"
                | "--index-url"
                | "--extra-index-url"
                | "-f"
                | "--find-links"
                | "-e"
                | "--editable"
                | "--hash"
                | "--trusted-host"
                | "--no-binary"
                | "--only-binary"
                | "--config-settings"
                | "-C"
                | "--target"
                | "-t"
                | "--prefix"
                | "--root"
        );
        if !opt.starts_with('-') {
            // A shell word of `pip install`: one requirement, its quotes already removed.
            add_requirement(token, origin, found, constraints);
            i += 1;
            continue;
        }
        let value = if takes_value {
            if let Some(v) = inline {
                i += 1;
                Some(v)
            } else {
                i += 2;
                tokens.get(i - 1).cloned()
            }
        } else {
            i += 1;
            None
        };
        let value = value.unwrap_or_default();
        match opt.as_str() {
            "-r" | "--requirement" | "-c" | "--constraint" => {
                let nested = origin.dir.join(&value);
                let as_constraints = constraints || opt == "-c" || opt == "--constraint";
                if value.contains("://") {
                    untranslated(
                        found,
                        &format!("{opt} {value}"),
                        "a remote requirements file is not fetched",
                    );
                } else if nested.is_file() {
                    read_nested(&nested, found, origin.project, stack, as_constraints)?;
                } else {
                    untranslated(found, &format!("{opt} {value}"), "the file is not there");
                }
            }
            "-i" | "--index-url" => found.set_index(value, origin),
            "--extra-index-url" => found.add_extra_index(value, origin),
            "-f" | "--find-links" => {
                let links = if value.contains("://") {
                    value
                } else {
                    origin.dir.join(&value).to_string_lossy().into_owned()
                };
                if !found.find_links.contains(&links) {
                    found.find_links.push(links);
                }
            }
            "-e" | "--editable" if value.starts_with("git+") => {
                found.decide(format!(
                    "{}:{}: `-e {value}`: installed from its commit, not editable (an image has no checkout to edit)",
                    origin.path.display(),
                    origin.line
                ));
                add_requirement(&value, origin, found, constraints);
            }
            "-e" | "--editable" => {
                let (tree, extras) = split_extras(&value);
                let path = origin.dir.join(tree);
                let is_project =
                    std::fs::canonicalize(&path).ok() == std::fs::canonicalize(origin.project).ok();
                if is_project {
                    add_project_extras(found, &extras);
                    found.decide(format!(
                        "{}:{}: `-e {value}` is the project itself: it is installed as a wheel built from its \
                         tree ([[source]] install = \"wheel\"; not editable: an image has no checkout to edit)",
                        origin.path.display(),
                        origin.line
                    ));
                    found.project_wheel = Some(format!("{}:{}", origin.path.display(), origin.line));
                } else {
                    untranslated(
                        found,
                        &format!("-e {value}"),
                        "an editable install of another tree; add it as a [[source]]",
                    );
                }
            }
            "--hash" => found.hashes += 1,
            "--no-build-isolation" => found.decide(format!(
                "{}:{}: --no-build-isolation: the packages built from source whose setup.py imports torch are \
                 built against the image's torch; init finds them in their sdists when it resolves (not with \
                 --offline) and lists them in [python.build] no_isolation",
                origin.path.display(),
                origin.line
            )),
            // What pip's own install takes that has no meaning for an image build.
            "-U"
            | "--upgrade"
            | "--no-cache-dir"
            | "--user"
            | "-q"
            | "--quiet"
            | "-v"
            | "--verbose"
            | "--no-deps"
            | "--disable-pip-version-check"
            | "--root-user-action"
            | "--break-system-packages"
            | "--no-warn-script-location"
            | "--progress-bar"
            | "--require-hashes"
            | "--system"
            | "--compile" => {}
            other => untranslated(
                found,
                &if value.is_empty() { other.to_owned() } else { format!("{other} {value}") },
                "no recipe field says this; the build uses wheels from the index",
            ),
        }
    }
    Ok(())
}

/// One requirement (PEP 508), with its markers; paths, URLs other than wheels and VCS links are
/// listed as not translated.
fn add_requirement(text: &str, origin: &Origin<'_>, found: &mut Found, constraint: bool) {
    // `.` / `./pkg` / `file:...` of the project itself, with its extras (`.[train]`).
    let (tree, extras) = split_extras(text);
    let path = origin.dir.join(tree);
    if (text.starts_with('.') || text.starts_with('/')) && path.exists() {
        let is_project = std::fs::canonicalize(&path).ok() == std::fs::canonicalize(origin.project).ok();
        if is_project {
            add_project_extras(found, &extras);
            found.decide(format!(
                "{}:{}: `{text}` is the project itself: it is installed as a wheel built from its tree \
                 ([[source]] install = \"wheel\")",
                origin.path.display(),
                origin.line
            ));
            found.project_wheel = Some(format!("{}:{}", origin.path.display(), origin.line));
        } else {
            found.untranslated.push(Untranslated::new(
                origin.path,
                origin.line,
                text,
                "a local tree to build; add it as a [[source]]",
            ));
        }
        return;
    }
    // A bare VCS link (`git+https://host/repo@REV#egg=name`, pip's older form): a git
    // dependency when it names its project and a revision.
    if ["git+", "hg+", "svn+", "bzr+"].iter().any(|p| text.starts_with(p)) {
        match bare_git(text) {
            Some(req) => add_requirement(&req, origin, found, constraint),
            None => found.untranslated.push(Untranslated::new(
                origin.path,
                origin.line,
                text,
                "a VCS link without `#egg=NAME` and `@REVISION`: write it as `name @ git+URL@REV` (a git \
                 dependency, built from source)",
            )),
        }
        return;
    }
    // A bare URL (not `httpx==0.24.0`, a name that starts with "http").
    if text.starts_with("http://") || text.starts_with("https://") || text.starts_with("file:") {
        found.untranslated.push(Untranslated::new(
            origin.path,
            origin.line,
            text,
            "a URL without a project name: download the wheel and give it as [[python.wheel]] (with its sha256)",
        ));
        return;
    }
    match pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(text) {
        Ok(req) => {
            if let Some(pep508_rs::VersionOrUrl::Url(url)) = &req.version_or_url {
                let given = url.given().unwrap_or_default();
                if stackbuild_recipe::git_dependency(&req).is_some()
                    || stackbuild_recipe::url_dependency(&req).is_some()
                    || (given.starts_with("git+") && !constraint)
                {
                    // `name @ git+URL@REV`: a git dependency the recipe builds from source.
                    // Without `@REV` it is pinned to the commit its default branch points to
                    // (`Plan::pin_git_heads`), as pip and uv would clone it today.
                    found.add_requirement(text.trim().to_owned(), req.name.to_string(), constraint, origin);
                    return;
                }
                let why = if given.starts_with("git+") {
                    "a git constraint without a revision: pin it as `name @ git+URL@<commit or tag>`"
                } else if given
                    .split(['#', '?'])
                    .next()
                    .is_some_and(|p| Path::new(p).extension().is_some_and(|e| e.eq_ignore_ascii_case("whl")))
                {
                    "a direct reference to a wheel without its digest: append `#sha256=<its sha256>` to the URL (a \
                     URL dependency, verified by it)"
                } else {
                    "a direct reference to an archive without its digest: append `#sha256=<its sha256>` to the URL \
                     (a URL dependency, built from source), or take its release from the index (`name==VERSION`)"
                };
                found.untranslated.push(Untranslated::new(origin.path, origin.line, text, why));
                return;
            }
            found.add_requirement(req.to_string(), req.name.to_string(), constraint, origin);
        }
        Err(e) => found.untranslated.push(Untranslated::new(
            origin.path,
            origin.line,
            text,
            &format!("not a PEP 508 requirement: {}", e.message),
        )),
    }
}

/// `git+URL@REV#egg=NAME` as a PEP 508 git dependency (`NAME @ git+URL@REV`), when it names
/// both.
fn bare_git(text: &str) -> Option<String> {
    let rest = text.strip_prefix("git+")?;
    let (url, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let name = fragment
        .split('&')
        .find_map(|kv| kv.strip_prefix("egg="))
        .map(|n| n.split(['[', '=', '-']).next().unwrap_or(n))
        .filter(|n| !n.is_empty())?;
    let req = format!("{name} @ git+{url}");
    let parsed = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(&req).ok()?;
    stackbuild_recipe::git_dependency(&parsed).map(|_| req)
}

/// The file's logical lines: `\` continuations joined, comments (`#` at the start or after
/// whitespace) removed, blank lines dropped; each with the number of its first line.
pub(super) fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if current.is_empty() {
            start = i + 1;
        }
        let line = strip_comment(raw);
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let done = current.trim().to_owned();
        if !done.is_empty() {
            out.push((start, done));
        }
        current.clear();
    }
    if !current.trim().is_empty() {
        out.push((start, current.trim().to_owned()));
    }
    out
}

fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return line[..i].trim_end();
        }
    }
    line.trim_end()
}

/// Words as a POSIX shell splits them, with `'...'` and `"..."` quoting and `\` escapes; no
/// expansion of any kind (nothing is run).
pub(super) fn split_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                word.push(n);
                            }
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A local tree's requirement and its extras: `.[train,eval]` is `.` with `train` and `eval`;
/// extras that are not valid names (PEP 685) are left in the path, which then names nothing.
fn split_extras(text: &str) -> (&str, Vec<String>) {
    let Some((tree, rest)) = text.split_once('[') else { return (text, Vec::new()) };
    let Some(list) = rest.strip_suffix(']') else { return (text, Vec::new()) };
    let extras: Option<Vec<String>> = list
        .split(',')
        .map(|e| <pep508_rs::ExtraName as std::str::FromStr>::from_str(e.trim()).ok().map(|n| n.to_string()))
        .collect();
    extras.map_or((text, Vec::new()), |e| (tree, e))
}

/// The project is installed with `extras` too (`[[source]] extras`).
fn add_project_extras(found: &mut Found, extras: &[String]) {
    for e in extras {
        if !found.project_extras.contains(e) {
            found.project_extras.push(e.clone());
        }
    }
    found.project_extras.sort();
}
