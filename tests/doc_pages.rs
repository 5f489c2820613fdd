//! The README and every page under `docs/` as a reader meets them: each relative link and
//! `#anchor` resolves, each external link is well-formed, and each example command runs and
//! prints what the page shows.
//!
//! The convention (docs/README.md, "Examples on these pages"):
//!
//! - A fenced block with the info string `console` is a transcript: each line starting with `$ `
//!   is a command (lines after it starting with `> ` continue it, as a shell's second prompt
//!   shows a here-document), and the lines after it up to the next `$ ` are its expected output
//!   (stdout and stderr together). Compared line by line, trimmed, blank lines ignored: a line
//!   `...` stands for any number of lines, `[..]` within a line for any text. A block without
//!   output lines only has to succeed.
//! - Every command must exit 0, unless the next command of the block is `echo $?`, which then
//!   shows its status.
//! - The commands of a block run in order in one bash, with `set +e`, in a scratch directory
//!   per page that holds a copy of `recipes/`, `contract/kb/` and the recorded index
//!   `builder/tests/fixtures/index/`, and keeps what earlier blocks of the page wrote;
//!   `PATH` starts with the directory of the built `stackbuild` and `stackhook`, `HOME` and the
//!   stackbuild cache are the scratch directory's own.
//! - `<!-- host: NAME -->` right above a block runs it against the fixture GPU host of that name
//!   (`stackhook::fixture::Preset`), given as `STACKHOOK_HOST_ROOT`, which every `stackhook`
//!   command reads as its `--host-root`.
//! - `<!-- needs: gpu -->` (or `root`, `internet`, or several: `needs: root, internet`) right
//!   above a block says it cannot run here: a GPU host, root on a real host (an engine's
//!   configuration, mmdebstrap), or the network. It is not run, and counted. Every `sh` block is
//!   a script to copy and must carry one; a `console` block may.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{binary, kill_group, text, workspace};
use stackhook::fixture::Preset;

/// What a block may say it needs instead of running.
const NEEDS: [&str; 3] = ["gpu", "root", "internet"];
/// How long one block may run.
const BLOCK_TIMEOUT: Duration = Duration::from_mins(1);
/// What the scratch directory of a page holds of the repository (read by the examples).
const COPIED: [&str; 3] = ["recipes", "contract/kb", "builder/tests/fixtures/index"];
/// Ends each command's output in the transcript of a block.
const MARK: &str = "@@doc-pages-status@@";

/// A fenced code block.
#[derive(Debug, Default)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string's first word.
    lang: String,
    lines: Vec<String>,
    needs: Vec<String>,
    host: Option<String>,
}

/// One page: its headings' anchors, its links and its code blocks.
#[derive(Debug, Default)]
struct Page {
    anchors: BTreeSet<String>,
    /// (line, target)
    links: Vec<(usize, String)>,
    blocks: Vec<Block>,
    /// Problems found while reading it (a marker with no block under it, an unclosed fence).
    errors: Vec<String>,
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, every character but letters,
/// digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// `line` with its inline code spans taken out (a link inside backticks is no link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let fence = &rest[start..start + ticks];
        let Some(end) = rest[start + ticks..].find(fence) else {
            out.push_str(&rest[start..]);
            return out;
        };
        rest = &rest[start + ticks + end + ticks..];
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)`, images included, and of autolinks
/// `<https://...>` on one line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        // `[text](target "title")`: the target is the first word.
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        targets.push(target.trim_start_matches('<').trim_end_matches('>').to_owned());
        rest = &after[end..];
    }
    let mut rest = line.as_str();
    while let Some(i) = rest.find("<http") {
        let after = &rest[i + 1..];
        let Some(end) = after.find('>') else { break };
        targets.push(after[..end].to_owned());
        rest = &after[end..];
    }
    targets
}

/// A marker comment `<!-- key: value -->` on its own line.
fn marker(line: &str) -> Option<(&str, &str)> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let (key, value) = inner.split_once(':')?;
    matches!(key.trim(), "needs" | "host").then(|| (key.trim(), value.trim()))
}

fn parse(markdown: &str) -> Page {
    let mut page = Page::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence: Option<(String, Block)> = None;
    let mut pending = Block::default();
    let mut pending_line = 0;
    for (n, line) in markdown.lines().enumerate() {
        let n = n + 1;
        let trimmed = line.trim_start();
        if let Some((close, block)) = &mut fence {
            if trimmed.trim_end() == close.as_str() {
                page.blocks.push(std::mem::take(block));
                fence = None;
            } else {
                block.lines.push(line.to_owned());
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let ch = trimmed.chars().next().unwrap();
            let ticks = trimmed.chars().take_while(|&c| c == ch).count();
            let info = trimmed[ticks..].trim();
            let lang = info.split([' ', ',']).next().unwrap_or_default().to_owned();
            let block = Block { line: n, lang, ..std::mem::take(&mut pending) };
            pending_line = 0;
            fence = Some((ch.to_string().repeat(ticks), block));
            continue;
        }
        if let Some((key, value)) = marker(line) {
            if key == "needs" {
                pending.needs.extend(value.split(',').map(|v| v.trim().to_owned()));
            } else {
                pending.host = Some(value.to_owned());
            }
            pending_line = n;
            continue;
        }
        if !trimmed.is_empty() && pending_line != 0 {
            page.errors.push(format!("line {pending_line}: a marker with no code block right under it"));
            pending = Block::default();
            pending_line = 0;
        }
        if let Some(heading) = trimmed.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            if heading.starts_with(' ') || heading.is_empty() {
                let base = slug(heading.trim().trim_end_matches('#').trim());
                let count = seen.entry(base.clone()).or_insert(0);
                let anchor = if *count == 0 { base.clone() } else { format!("{base}-{count}") };
                *count += 1;
                page.anchors.insert(anchor);
            }
        }
        for html in ["id=\"", "name=\""] {
            if let Some(i) = line.find(&format!("<a {html}")) {
                let rest = &line[i + 3 + html.len()..];
                if let Some(end) = rest.find('"') {
                    page.anchors.insert(rest[..end].to_owned());
                }
            }
        }
        for target in link_targets(line) {
            page.links.push((n, target));
        }
        // Reference definitions: `[name]: target`.
        if let Some(rest) = trimmed.strip_prefix('[') {
            if let Some((_, target)) = rest.split_once("]: ") {
                page.links.push((n, target.split_whitespace().next().unwrap_or_default().to_owned()));
            }
        }
    }
    if let Some((_, block)) = fence {
        page.errors.push(format!("line {}: a code block that is never closed", block.line));
    }
    if pending_line != 0 {
        page.errors.push(format!("line {pending_line}: a marker with no code block right under it"));
    }
    page
}

/// Whether `url` is a well-formed http(s) URL: a scheme, a host of letters, digits, dots and
/// dashes (a port allowed), and no whitespace.
fn url_well_formed(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let name = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.chars().all(|c| c.is_ascii_digit()) {
            name
        } else {
            host
        }
    });
    !name.is_empty()
        && name.contains('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && !url.chars().any(char::is_whitespace)
}

/// `path` with `.` and `..` taken out, without touching the file system; `None` when it leaves
/// the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// The link errors of `page` (at `file`, relative to `root`).
fn check_links(root: &Path, file: &Path, page: &Page, pages: &mut BTreeMap<PathBuf, Page>) -> Vec<String> {
    let mut errors = Vec::new();
    for (line, target) in &page.links {
        let at = format!("{}:{line}: {target}", file.display());
        if target.starts_with("http://") || target.starts_with("https://") {
            if !url_well_formed(target) {
                errors.push(format!("{at}: not a well-formed URL"));
            }
            continue;
        }
        if target.starts_with("mailto:") {
            continue;
        }
        if target.contains("://") || target.starts_with('/') || target.is_empty() {
            errors.push(format!("{at}: neither a relative link nor http(s)"));
            continue;
        }
        let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
        let dest = if path.is_empty() {
            Some(file.to_owned())
        } else {
            normalize(&file.parent().unwrap().join(path))
        };
        let Some(dest) = dest.filter(|d| root.join(d).exists()) else {
            errors.push(format!("{at}: no such file in the repository"));
            continue;
        };
        let Some(anchor) = anchor else { continue };
        if dest.extension().is_none_or(|e| e != "md") {
            errors.push(format!("{at}: an anchor into a file that is not Markdown"));
            continue;
        }
        let anchors = &pages
            .entry(dest.clone())
            .or_insert_with(|| parse(&std::fs::read_to_string(root.join(&dest)).unwrap()))
            .anchors;
        if !anchors.contains(anchor) {
            errors.push(format!("{at}: {} has no heading #{anchor}", dest.display()));
        }
    }
    errors
}

/// One command of a console block and the output it shows.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continuing = false;
    for line in &block.lines {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step { command: command.to_owned(), expected: Vec::new() });
            continuing = true;
        } else if let (true, Some(more)) =
            (continuing, line.strip_prefix("> ").or_else(|| (line == ">").then_some("")))
        {
            let step = steps.last_mut().unwrap();
            step.command.push('\n');
            step.command.push_str(more);
        } else if let Some(step) = steps.last_mut() {
            continuing = false;
            step.expected.push(line.clone());
        }
    }
    steps
}

/// Whether `actual` matches the pattern line `expected`, where `[..]` stands for any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() || !actual.ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the output lines match the expected lines (both trimmed, blank lines left out),
/// where a line `...` stands for any number of lines.
fn output_matches(expected: &[String], actual: &str) -> bool {
    let want: Vec<&str> = expected.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
    let got: Vec<&str> = actual.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    // ok[i][j]: want[i..] matches got[j..].
    let mut ok = vec![vec![false; got.len() + 1]; want.len() + 1];
    ok[want.len()][got.len()] = true;
    for i in (0..want.len()).rev() {
        for j in (0..=got.len()).rev() {
            ok[i][j] = if want[i] == "..." {
                ok[i + 1][j] || (j < got.len() && ok[i][j + 1])
            } else {
                j < got.len() && line_matches(want[i], got[j]) && ok[i + 1][j + 1]
            };
        }
    }
    ok[0][0]
}

/// Everything a page's examples run in.
struct Scratch {
    dir: tempfile::TempDir,
    hosts: BTreeMap<String, Result<PathBuf, String>>,
}

impl Scratch {
    fn new(root: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for tree in COPIED {
            copy_tree(&root.join(tree), &dir.path().join("work").join(tree));
        }
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Self { dir, hosts: BTreeMap::new() }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The fixture host `name`, built once per page; `Err` says why it cannot be used here.
    fn host(&mut self, name: &str) -> Result<PathBuf, String> {
        let base = self.dir.path().join("hosts").join(name);
        self.hosts
            .entry(name.to_owned())
            .or_insert_with(|| {
                let Some(preset) = Preset::ALL.iter().find(|p| p.name() == name) else {
                    let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
                    panic!("<!-- host: {name} -->: no such fixture host; there are {names:?}");
                };
                let host = preset.build(&base).unwrap();
                if host.real_device_nodes() {
                    Ok(host.root().to_owned())
                } else {
                    Err("the fixture host's device nodes need root (mknod)".to_owned())
                }
            })
            .clone()
    }
}

/// Copies the regular files and directories under `from` to `to`, leaving out what only this
/// machine has (`recipes/wheels/`).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        let name = entry.file_name();
        if kind.is_dir() && name != "wheels" {
            copy_tree(&entry.path(), &to.join(&name));
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// Runs the steps of one block in one bash; returns each step's output and exit status, or why
/// the block did not finish.
fn run_block(
    steps: &[Step],
    work: &Path,
    host: Option<&Path>,
    home: &Path,
) -> Result<Vec<(String, i32)>, String> {
    let mut script = String::from("exec 2>&1\n");
    for step in steps {
        script.push_str(&step.command);
        let _ = write!(script, "\n__s=$?; printf '\\n{MARK} %d\\n' \"$__s\"; (exit \"$__s\")\n");
    }
    let bin = binary("stackbuild");
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("NO_COLOR", "1")
        .env("STACKBUILD_CACHE", home.join(".cache/stackbuild"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .process_group(0);
    if let Some(host) = host {
        cmd.env("STACKHOOK_HOST_ROOT", host);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > BLOCK_TIMEOUT {
            kill_group(&mut child);
            return Err(format!("did not finish in {BLOCK_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = text(&reader.join().unwrap());
    let mut results = Vec::new();
    let mut current = String::new();
    for line in out.lines() {
        if let Some(status) = line.strip_prefix(MARK) {
            results.push((std::mem::take(&mut current), status.trim().parse().unwrap()));
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if results.len() != steps.len() {
        return Err(format!("the shell stopped after {} of {} commands:\n{out}", results.len(), steps.len()));
    }
    Ok(results)
}

/// The pages: README.md and docs/*.md, relative to the repository root.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_owned())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn links_resolve_and_examples_run_as_shown() {
    let root = workspace();
    let mut parsed: BTreeMap<PathBuf, Page> = BTreeMap::new();
    let mut errors = Vec::new();
    let (mut ran, mut commands) = (0, 0);
    let mut skipped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in pages(&root) {
        let page = parse(&std::fs::read_to_string(root.join(&file)).unwrap());
        errors.extend(page.errors.iter().map(|e| format!("{}:{e}", file.display())));
        errors.extend(check_links(&root, &file, &page, &mut parsed));
        let mut scratch = Scratch::new(&root);
        for block in &page.blocks {
            let at = format!("{}:{}", file.display(), block.line);
            if let Some(bad) = block.needs.iter().find(|n| !NEEDS.contains(&n.as_str())) {
                errors.push(format!("{at}: needs: {bad}? (one of {NEEDS:?})"));
                continue;
            }
            let is_shell = matches!(block.lang.as_str(), "sh" | "bash" | "shell");
            if block.lang != "console" && !is_shell {
                if !block.needs.is_empty() || block.host.is_some() {
                    errors.push(format!("{at}: a marker on a `{}` block, which is never run", block.lang));
                }
                continue;
            }
            if !block.needs.is_empty() {
                skipped.entry(format!("needs {}", block.needs.join(", "))).or_default().push(at);
                continue;
            }
            if is_shell {
                errors.push(format!(
                    "{at}: a `{}` block without `<!-- needs: ... -->`: make it a `console` block with `$ ` \
                     lines that the test runs, or say what it needs",
                    block.lang
                ));
                continue;
            }
            let steps = steps(block);
            if steps.is_empty() {
                errors.push(format!("{at}: a console block with no `$ ` command"));
                continue;
            }
            let host = match block.host.as_deref().map(|h| scratch.host(h)) {
                Some(Err(why)) => {
                    skipped.entry(why).or_default().push(at);
                    continue;
                }
                Some(Ok(host)) => Some(host),
                None => None,
            };
            let home = scratch.dir.path().join("home");
            match run_block(&steps, &scratch.work(), host.as_deref(), &home) {
                Err(why) => errors.push(format!("{at}: {why}")),
                Ok(results) => {
                    for (i, (step, (out, status))) in steps.iter().zip(&results).enumerate() {
                        let shown = steps.get(i + 1).is_some_and(|next| next.command.trim() == "echo $?");
                        if *status != 0 && !shown {
                            errors.push(format!(
                                "{at}: `{}` exited {status} (follow it with `$ echo $?` to show a failure):\n{out}",
                                step.command
                            ));
                        } else if !step.expected.iter().all(|l| l.trim().is_empty())
                            && !output_matches(&step.expected, out)
                        {
                            errors.push(format!(
                                "{at}: `{}` printed:\n{out}\nbut the page shows:\n{}",
                                step.command,
                                step.expected.join("\n")
                            ));
                        }
                    }
                    ran += 1;
                    commands += steps.len();
                }
            }
        }
    }
    println!("ran {ran} example blocks ({commands} commands)");
    for (why, blocks) in &skipped {
        println!("SKIPPED: {} block(s) that {why}: {}", blocks.len(), blocks.join(" "));
    }
    assert!(errors.is_empty(), "{} problem(s):\n\n{}", errors.len(), errors.join("\n\n"));
    assert!(ran > 0, "no example ran");
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug("The image's Python stack as `pylock.toml`"), "the-images-python-stack-as-pylocktoml");
    assert_eq!(slug("What the hook knows, and what it does not"), "what-the-hook-knows-and-what-it-does-not");
    assert_eq!(slug("Podman and CRI-O: `hooks.d`"), "podman-and-cri-o-hooksd");
    assert_eq!(slug("L4_x  two"), "l4_x--two");
    let page = parse("# A\n## A\n```sh\n# not a heading\n```\n");
    assert_eq!(page.anchors, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
}

#[test]
fn links_are_found_outside_code() {
    assert_eq!(
        link_targets("see [a](x.md#b) and `[c](y.md)` or <https://example.org/p> [d](z.md \"t\")"),
        ["x.md#b", "z.md", "https://example.org/p"]
    );
    assert!(url_well_formed("https://github.com/NVIDIA/nvidia-container-toolkit/issues/1470"));
    assert!(url_well_formed("http://127.0.0.1:5115/v2/"));
    assert!(!url_well_formed("https://"));
    assert!(!url_well_formed("https://exa mple.org"));
    assert!(!url_well_formed("https://localhost"));
}

#[test]
fn markers_attach_to_the_block_below() {
    let page = parse(
        "<!-- needs: root, internet -->\n\n```sh\nx\n```\n<!-- host: healthy -->\n```console\n$ y\n```\n",
    );
    assert_eq!(page.blocks[0].needs, ["root", "internet"]);
    assert_eq!(page.blocks[1].host.as_deref(), Some("healthy"));
    assert!(page.errors.is_empty(), "{:?}", page.errors);
    let page = parse("<!-- needs: gpu -->\ntext\n```sh\nx\n```\n");
    assert_eq!(page.errors.len(), 1);
    assert!(page.blocks[0].needs.is_empty());
}

#[test]
fn output_patterns() {
    let want = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(output_matches(&want("a\n...\nd"), "a\nb\nc\nd\n"));
    assert!(output_matches(&want("a\n...\nd"), "a\n\nd\n"));
    assert!(output_matches(&want("  a [..] c"), "a b c\n"));
    assert!(output_matches(&want("sha256:[..]"), "sha256:00ff\n"));
    assert!(!output_matches(&want("a\nd"), "a\nb\nd\n"));
    assert!(!output_matches(&want("a [..] c"), "a b d\n"));
    assert!(!output_matches(&want("ab[..]ba"), "aba\n"));
    let block = Block {
        lines: want("$ cat <<EOF\n> x\n>\n> EOF\nx\n$ echo $?\n0"),
        lang: "console".into(),
        ..Block::default()
    };
    let s = steps(&block);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].command, "cat <<EOF\nx\n\nEOF");
    assert_eq!(s[0].expected, ["x"]);
}
