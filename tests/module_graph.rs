//! The shape of the workspace, checked: no import cycle between modules, and the crate graph in
//! `docs/architecture.md` is the one `cargo metadata` reports.
//!
//! Why a small reader of `crate::`/`super::`/`self::` paths and not `cargo modules`: the latter
//! needs rust-analyzer's crates built for the toolchain at hand (minutes on a 2-core machine,
//! and a new tool to install in CI), while every path this workspace writes is one of these three
//! forms (no glob re-exports across modules, no `#[path]`), so the paths in the code are the
//! graph. Comments and test code (`tests.rs`, `*_tests.rs`, an inline `#[cfg(test)] mod tests`)
//! are left out: a test may look at its siblings.
//!
//! A cycle is counted where it hurts: between sibling modules under one parent (the top-level
//! modules of a crate, or the files of one folder). A child naming its ancestor, or a parent its
//! child, is the ordinary shape of a module tree and is not an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// Module path (from the crate root) of a source file under `src`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "main.rs" if parts.is_empty() => {}
        "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_owned()),
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_test_file(module: &[String]) -> bool {
    module.last().is_some_and(|m| m == "tests" || m.ends_with("_tests"))
}

/// The code of a file without comments and without a trailing `#[cfg(test)] mod NAME { ... }`.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .get(i + 1)
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        out.push((i + 1, code.to_owned()));
    }
    out
}

/// The module paths a line names, resolved against `here` (the file's module).
fn paths_in(line: &str, here: &[String]) -> Vec<Vec<String>> {
    let bytes = line.as_bytes();
    let mut found = Vec::new();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            let start = i;
            while i < bytes.len()
                && (ident(bytes[i]) || (bytes[i] == b':' && bytes.get(i + 1) == Some(&b':')))
            {
                i += if bytes[i] == b':' { 2 } else { 1 };
            }
            let path: Vec<&str> = line[start..i].split("::").filter(|s| !s.is_empty()).collect();
            let mut segs: Vec<String>;
            let rest: &[&str];
            match path.first().copied() {
                Some("crate") => {
                    segs = Vec::new();
                    rest = &path[1..];
                }
                Some("super") => {
                    segs = here.to_vec();
                    let ups = path.iter().take_while(|s| **s == "super").count();
                    for _ in 0..ups {
                        segs.pop();
                    }
                    rest = &path[ups..];
                }
                Some("self") if path.len() > 1 => {
                    segs = here.to_vec();
                    rest = &path[1..];
                }
                _ => continue,
            }
            segs.extend(rest.iter().map(|s| (*s).to_owned()));
            found.push(segs);
        } else {
            i += 1;
        }
    }
    found
}

struct Crate {
    name: String,
    modules: BTreeSet<Vec<String>>,
    /// (from module, to module path as written, `file:line`)
    refs: Vec<(Vec<String>, Vec<String>, String)>,
}

fn read_crate(name: &str, src: &Path) -> Crate {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut refs = Vec::new();
    for file in &files {
        let module = module_of(src, file);
        modules.insert(module.clone());
        if is_test_file(&module) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code_lines(&text) {
            for path in paths_in(&line, &module) {
                let at = format!("{}:{n}", file.strip_prefix(workspace()).unwrap_or(file).display());
                refs.push((module.clone(), path, at));
            }
        }
    }
    Crate { name: name.to_owned(), modules, refs }
}

/// Sibling edges: parent -> (from child, to child) -> where.
type Edges = BTreeMap<Vec<String>, BTreeMap<(String, String), String>>;

fn sibling_edges(c: &Crate) -> Edges {
    let mut edges = Edges::new();
    for (from, path, at) in &c.refs {
        // The longest prefix of the path that is a module of the crate (a file of its own).
        let to = (0..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|p| c.modules.contains(p))
            .unwrap_or_default();
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            continue; // one is the ancestor of the other
        }
        let parent = from[..common].to_vec();
        edges
            .entry(parent)
            .or_default()
            .entry((from[common].clone(), to[common].clone()))
            .or_insert_with(|| at.clone());
    }
    edges
}

/// Depth-first search from `v`, recording each back edge's cycle.
fn visit<'a>(
    v: &'a str,
    next: &BTreeMap<&'a str, Vec<&'a str>>,
    state: &mut BTreeMap<&'a str, u8>,
    stack: &mut Vec<&'a str>,
    found: &mut Vec<Vec<String>>,
) {
    state.insert(v, 1);
    stack.push(v);
    for w in next.get(v).into_iter().flatten() {
        match state.get(w) {
            Some(1) => {
                let i = stack.iter().position(|s| s == w).unwrap();
                found.push(stack[i..].iter().chain(std::iter::once(w)).map(|s| (*s).to_owned()).collect());
            }
            Some(_) => {}
            None => visit(w, next, state, stack, found),
        }
    }
    stack.pop();
    state.insert(v, 2);
}

/// Every cycle among one parent's children, as the list of modules it goes through.
fn cycles(edges: &BTreeMap<(String, String), String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let mut found = Vec::new();
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    let starts: Vec<&str> = next.keys().copied().collect();
    for v in starts {
        if !state.contains_key(v) {
            visit(v, &next, &mut state, &mut Vec::new(), &mut found);
        }
    }
    found
}

/// The workspace's crates with their `src` folders, from `cargo metadata`.
fn metadata() -> serde_json::Value {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn no_module_cycle_in_any_crate() {
    let meta = metadata();
    let mut report = Vec::new();
    let mut checked = 0;
    for package in meta["packages"].as_array().unwrap() {
        let manifest = Path::new(package["manifest_path"].as_str().unwrap());
        let src = manifest.parent().unwrap().join("src");
        if !src.is_dir() {
            continue;
        }
        let name = package["name"].as_str().unwrap();
        let c = read_crate(name, &src);
        checked += 1;
        for (parent, edges) in sibling_edges(&c) {
            for cycle in cycles(&edges) {
                let at: Vec<String> = cycle
                    .windows(2)
                    .map(|w| format!("{} -> {} ({})", w[0], w[1], edges[&(w[0].clone(), w[1].clone())]))
                    .collect();
                let under = if parent.is_empty() { "the crate root".to_owned() } else { parent.join("::") };
                report.push(format!(
                    "{} under {under}: {}\n    {}",
                    c.name,
                    cycle.join(" -> "),
                    at.join("\n    ")
                ));
            }
        }
    }
    assert!(checked >= 10, "only {checked} crates read");
    assert!(report.is_empty(), "import cycles between modules:\n{}", report.join("\n"));
}

/// The reader sees what it must: a two-module cycle at the top and one inside a folder.
#[test]
fn the_cycle_reader_finds_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "mod x;\nmod y;\nuse crate::b::B; // crate::c in a comment\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub(crate) fn f() { crate::a::x::g(); }\n").unwrap();
    std::fs::write(src.join("a/x.rs"), "use super::y::Y;\nuse super::super::b;\n").unwrap();
    std::fs::write(src.join("a/y.rs"), "use super::x::X;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\n")
        .unwrap();
    let c = read_crate("fixture", src);
    let edges = sibling_edges(&c);
    assert_eq!(cycles(&edges[&Vec::new()]), [vec!["a", "b", "a"]]);
    assert_eq!(cycles(&edges[&vec!["a".to_owned()]]), [vec!["x", "y", "x"]]);
}

/// The block of `docs/architecture.md` between the markers: each workspace crate and the
/// workspace crates it depends on (normal dependencies), as `cargo metadata` says.
#[test]
fn architecture_page_shows_the_crate_graph() {
    let meta = metadata();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<&str> = packages.iter().map(|p| p["name"].as_str().unwrap()).collect();
    let mut lines = Vec::new();
    let mut rows: Vec<(String, String, Vec<String>)> = packages
        .iter()
        .map(|p| {
            let dir = Path::new(p["manifest_path"].as_str().unwrap())
                .parent()
                .unwrap()
                .strip_prefix(workspace())
                .unwrap();
            let deps: BTreeSet<String> = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null() && names.contains(d["name"].as_str().unwrap()))
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (
                format!("{}/", dir.display()),
                p["name"].as_str().unwrap().to_owned(),
                deps.into_iter().collect(),
            )
        })
        .collect();
    rows.sort();
    // The hook and the builder share the contract and nothing else (what the hook links stays
    // small and static; the builder never compiles the hook's probe).
    for (_, name, deps) in &rows {
        let builder = |n: &str| n == "stackbuild" || n.starts_with("stackbuild-");
        if name == "stackhook" {
            assert!(!deps.iter().any(|d| builder(d)), "the hook depends on a builder crate: {deps:?}");
        }
        if builder(name) {
            assert!(!deps.iter().any(|d| d == "stackhook"), "{name} depends on the hook");
        }
    }
    for (dir, name, deps) in rows {
        let deps = if deps.is_empty() { "(none)".to_owned() } else { deps.join(", ") };
        lines.push(format!("{dir:<26} {name:<19} -> {deps}"));
    }
    let want = lines.join("\n");
    let page = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let (start, end) = ("<!-- crate-graph: begin -->\n```\n", "\n```\n<!-- crate-graph: end -->");
    let got = page.split_once(start).and_then(|(_, rest)| rest.split_once(end)).map(|(block, _)| block);
    assert_eq!(
        got,
        Some(want.as_str()),
        "docs/architecture.md's crate graph is not the workspace's; put this between the markers:\n{want}"
    );
}
