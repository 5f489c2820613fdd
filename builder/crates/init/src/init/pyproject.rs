//! `pyproject.toml`: the project's name, `requires-python` and dependencies (PEP 621), its
//! optional dependencies and dependency groups (PEP 735), and uv's `[tool.uv]` indexes and
//! sources (<https://docs.astral.sh/uv/concepts/indexes/>).

use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use super::{Found, Untranslated};

const MAX_FILE: u64 = 4 << 20;

/// Whether `dir/pyproject.toml` lists its dependencies itself (`[project] dependencies`, not
/// `dynamic`): then `pip install .` installs those, and a requirements folder beside it holds
/// optional features (LLaMA-Factory's `requirements/vllm.txt`, `npu.txt`, ...), not the runtime.
pub(super) fn lists_dependencies(dir: &Path) -> bool {
    let Ok(text) = stackbuild_common::read_text(&dir.join("pyproject.toml"), MAX_FILE, "pyproject.toml")
    else {
        return false;
    };
    let Ok(doc) = text.parse::<toml::Table>() else { return false };
    let Some(project) = doc.get("project").and_then(toml::Value::as_table) else { return false };
    let dynamic = project
        .get("dynamic")
        .and_then(toml::Value::as_array)
        .is_some_and(|d| d.iter().any(|v| v.as_str() == Some("dependencies")));
    !dynamic && project.get("dependencies").and_then(toml::Value::as_array).is_some_and(|d| !d.is_empty())
}

/// Why the project of `dir` must be installed to run, not only copied, when it must: its
/// `setup.py` builds extension modules, its `pyproject.toml` declares console scripts (`[project.scripts]`, on PATH only once installed)
/// or it keeps its package under `src/` (importable only once installed), and a build backend
/// can build it. `None` for a tree that runs from its checkout (`python generate.py`).
pub(super) fn must_install(dir: &Path) -> Option<String> {
    // Compiled extensions (`ext_modules`: mamba's CUDA kernels) exist only once the project is
    // built; a copy of the tree has their sources, not them.
    let setup = dir.join("setup.py");
    if let Ok(text) = stackbuild_common::read_text(&setup, MAX_FILE, "setup.py") {
        if text.contains("ext_modules") {
            return Some(format!(
                "{}: it builds extension modules (`ext_modules`), which exist only once the project is built, \
                 as `pip install .` does",
                setup.display()
            ));
        }
    }
    let path = dir.join("pyproject.toml");
    let text = stackbuild_common::read_text(&path, MAX_FILE, "pyproject.toml").ok()?;
    let doc: toml::Table = text.parse().ok()?;
    let project = doc.get("project").and_then(toml::Value::as_table)?;
    project.get("name")?;
    if doc.get("build-system").is_none() && !dir.join("setup.py").is_file() {
        return None;
    }
    let scripts: Vec<&str> = ["scripts", "gui-scripts"]
        .iter()
        .filter_map(|t| project.get(*t).and_then(toml::Value::as_table))
        .flat_map(|t| t.keys().map(String::as_str))
        .collect();
    if !scripts.is_empty() {
        return Some(format!(
            "{}: [project.scripts] declares {} (on PATH once the project is installed, as `pip install .` does)",
            path.display(),
            scripts.join(", ")
        ));
    }
    let src = dir.join("src");
    let src_package = std::fs::read_dir(&src)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("__init__.py").is_file());
    src_package.then(|| {
        format!("{}: its package is under src/ (importable once the project is installed, as `pip install .` does)", dir.display())
    })
}

/// The optional dependencies and dependency groups installed beside the project's own (none by
/// default, as `pip install .` and `uv sync --no-dev`): `--extra`/`--group`, and a
/// Dockerfile's `uv sync` ([`super::UvSync`]).
pub(super) struct Selection {
    pub(super) extras: Vec<String>,
    pub(super) all_extras: bool,
    pub(super) groups: Vec<String>,
    pub(super) all_groups: bool,
    /// Who asked for them, for the decisions: the command line's `--extra` and `--group` when
    /// `None`.
    pub(super) by: Option<String>,
}

/// Whether two extra or group names are the same: compared normalized, as PEP 685 (extras) and
/// PEP 735 (groups) compare them (`Dev_Tools` is `dev-tools`).
fn same_name(a: &str, b: &str) -> bool {
    let normal = |s: &str| s.to_ascii_lowercase().replace(['_', '.'], "-");
    normal(a) == normal(b)
}

/// The extras of the project itself that the requirement `req` names, when it names the project
/// `own` (flux's `all = ["flux[streamlit]", "flux[torch]"]`): pip reads those as the project's
/// extras, not as a package of that name from the index.
fn own_extras(req: &str, own: Option<&str>) -> Option<Vec<String>> {
    let r = pep508_rs::Requirement::<pep508_rs::VerbatimUrl>::from_str(req).ok()?;
    own.is_some_and(|n| same_name(n, r.name.as_ref()))
        .then(|| r.extras.iter().map(ToString::to_string).collect())
}

/// The extras `selection` installs, with those the chosen ones name of the project itself.
fn chosen_extras(optional: Option<&toml::Table>, selection: &Selection, own: Option<&str>) -> Vec<String> {
    let mut chosen: Vec<String> = selection.extras.clone();
    let mut grew = true;
    while grew {
        grew = false;
        for (extra, list) in optional.into_iter().flatten() {
            if !(selection.all_extras || chosen.iter().any(|e| same_name(e, extra))) {
                continue;
            }
            for more in strings(Some(list)).iter().filter_map(|r| own_extras(r, own)).flatten() {
                if !chosen.iter().any(|e| same_name(e, &more)) {
                    chosen.push(more);
                    grew = true;
                }
            }
        }
    }
    chosen
}

/// Reads `path` into `found`, with the optional dependencies and groups `selection` names.
pub(super) fn read_file(
    path: &Path,
    found: &mut Found,
    selection: &Selection,
    with_dependencies: bool,
) -> Result<(), super::InitError> {
    let text = stackbuild_common::read_text(path, MAX_FILE, "pyproject.toml")
        .map_err(|source| super::InitError::Read { path: path.to_owned(), source })?;
    let doc: toml::Table = toml::from_str(&text).map_err(|e| super::InitError::Parse {
        path: path.to_owned(),
        diagnostic: Box::new(stackbuild_common::Diagnostic::from_toml(path, &text, &e)),
    })?;
    found.inputs.push(path.to_owned());
    let project = doc.get("project").and_then(toml::Value::as_table);
    if let Some(name) = project.and_then(|p| p.get("name")).and_then(toml::Value::as_str) {
        found.set_name(name, &format!("{}: [project] name", path.display()));
    }
    if let Some(spec) = project.and_then(|p| p.get("requires-python")).and_then(toml::Value::as_str) {
        found
            .requires_python
            .push((spec.to_owned(), format!("{}: [project] requires-python", path.display())));
    }
    let tool_uv = doc.get("tool").and_then(|t| t.get("uv")).and_then(toml::Value::as_table);
    read_uv_indexes(path, tool_uv, found);
    if !with_dependencies {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let o = super::requirements::Origin { path, line: 0, dir, project: dir };
    let mut stack = Vec::new();
    let deps = dependencies(path, &doc, found);
    super::requirements::read_tokens(&deps, &o, found, &mut stack, false)?;
    let optional = project.and_then(|p| p.get("optional-dependencies")).and_then(toml::Value::as_table);
    let own = project.and_then(|p| p.get("name")).and_then(toml::Value::as_str);
    let itself = |req: &str| own_extras(req, own);
    let chosen = chosen_extras(optional, selection, own);
    let mut left_out: Vec<String> = Vec::new();
    for (extra, list) in optional.into_iter().flatten() {
        let (own_extras, list): (Vec<String>, Vec<String>) =
            strings(Some(list)).into_iter().partition(|r| itself(r).is_some());
        if selection.all_extras || chosen.iter().any(|e| same_name(e, extra)) {
            let own = if own_extras.is_empty() {
                String::new()
            } else {
                format!(", and {} of the project itself", own_extras.join(", "))
            };
            found.decide(format!(
                "{}: optional dependencies `{extra}` ({}{own}), as {} asks",
                path.display(),
                list.len(),
                selection.by.as_deref().unwrap_or("--extra")
            ));
            super::requirements::read_tokens(&list, &o, found, &mut stack, false)?;
        } else {
            left_out.push(format!("`{extra}` ({})", list.len()));
        }
    }
    if !left_out.is_empty() {
        found.decide(format!(
            "{}: optional dependencies {} left out, as `pip install .` does; `--extra NAME` adds one",
            path.display(),
            left_out.join(", ")
        ));
    }
    let dep_groups = doc.get("dependency-groups").and_then(toml::Value::as_table);
    for (group, list) in dep_groups.into_iter().flatten() {
        // PEP 735 entries are requirement strings or `{ include-group = "..." }` tables.
        let list_strings = strings(Some(list));
        if selection.all_groups || selection.groups.iter().any(|g| same_name(g, group)) {
            found.decide(format!(
                "{}: dependency group `{group}` ({}), as {} asks",
                path.display(),
                list_strings.len(),
                selection.by.as_deref().unwrap_or("--group")
            ));
            super::requirements::read_tokens(&list_strings, &o, found, &mut stack, false)?;
            for include in list.as_array().into_iter().flatten().filter_map(toml::Value::as_table) {
                if let Some(other) = include.get("include-group").and_then(toml::Value::as_str) {
                    let more = strings(dep_groups.and_then(|g| g.get(other)));
                    super::requirements::read_tokens(&more, &o, found, &mut stack, false)?;
                }
            }
        } else {
            found.decide(format!(
                "{}: dependency group `{group}` ({} package(s)) left out of the image, as `uv sync --no-dev` does; `--group {group}` adds it",
                path.display(),
                list_strings.len()
            ));
        }
    }
    Ok(())
}

/// The project's own dependencies: `[project] dependencies`, else poetry's table; notes a
/// `dynamic` list (only the project's build tells it).
fn dependencies(path: &Path, doc: &toml::Table, found: &mut Found) -> Vec<String> {
    let project = doc.get("project").and_then(toml::Value::as_table);
    let dynamic = strings(project.and_then(|p| p.get("dynamic")));
    if dynamic.iter().any(|d| d == "dependencies") {
        found.dynamic_dependencies = true;
        found.decide(format!(
            "{}: [project] dynamic = [\"dependencies\"]: its build computes them",
            path.display()
        ));
    }
    let poetry = doc.get("tool").and_then(|t| t.get("poetry")).and_then(toml::Value::as_table);
    if project.is_some_and(|p| p.contains_key("dependencies")) {
        let deps = strings(project.and_then(|p| p.get("dependencies")));
        found.decide(format!("{}: {} [project] dependencies", path.display(), deps.len()));
        deps
    } else if let Some(table) = poetry.and_then(|p| p.get("dependencies")).and_then(toml::Value::as_table) {
        if let Some(name) = poetry.and_then(|p| p.get("name")).and_then(toml::Value::as_str) {
            found.set_name(name, &format!("{}: [tool.poetry] name", path.display()));
        }
        if let Some(spec) = table.get("python").and_then(toml::Value::as_str) {
            if let Some(spec) = poetry_constraint(spec) {
                found
                    .requires_python
                    .push((spec, format!("{}: [tool.poetry.dependencies] python", path.display())));
            }
        }
        let deps = poetry_dependencies(path, table, found);
        found.decide(format!(
            "{}: {} [tool.poetry.dependencies], in PEP 508 form",
            path.display(),
            deps.len()
        ));
        deps
    } else {
        Vec::new()
    }
}

/// The strings of a TOML array (other items, and a value that is not an array, give none).
fn strings(v: Option<&toml::Value>) -> Vec<String> {
    v.and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_owned))
        .collect()
}

/// Poetry's dependency table as PEP 508 requirements
/// (<https://python-poetry.org/docs/dependency-specification/>): version constraints with `^`
/// and `~`, tables with `version`, `extras` and `markers`; `optional` ones are extras, left out
/// as `pip install .` leaves them; `git`, `path` and `url` ones are said, not translated.
fn poetry_dependencies(path: &Path, table: &toml::Table, found: &mut Found) -> Vec<String> {
    let mut out = Vec::new();
    for (name, spec) in table {
        if name == "python" {
            continue;
        }
        let (constraint, extras, markers) = match spec {
            toml::Value::String(c) => (c.clone(), Vec::new(), None),
            toml::Value::Table(t) => {
                if t.get("optional").and_then(toml::Value::as_bool) == Some(true) {
                    found.decide(format!(
                        "{}: poetry dependency {name} is optional (an extra): left out",
                        path.display()
                    ));
                    continue;
                }
                if let Some(kind) = ["git", "path", "url"].into_iter().find(|k| t.contains_key(*k)) {
                    found.untranslated.push(Untranslated::new(
                        path,
                        0,
                        &format!("[tool.poetry.dependencies] {name} = {{ {kind} = ... }}"),
                        "write it as `name @ git+URL@REV` in [python] packages (a git dependency), or add the tree as a [[source]] with install = \"wheel\"",
                    ));
                    continue;
                }
                let extras = strings(t.get("extras"));
                let markers = t.get("markers").and_then(toml::Value::as_str).map(str::to_owned);
                (t.get("version").and_then(toml::Value::as_str).unwrap_or("*").to_owned(), extras, markers)
            }
            _ => {
                found.untranslated.push(Untranslated::new(
                    path,
                    0,
                    &format!("[tool.poetry.dependencies] {name}"),
                    "several constraints per platform: pick the one for linux and write it in [python] packages",
                ));
                continue;
            }
        };
        let Some(version) = poetry_constraint(&constraint) else {
            found.untranslated.push(Untranslated::new(
                path,
                0,
                &format!("[tool.poetry.dependencies] {name} = {constraint:?}"),
                "not a version constraint init can translate; write it in PEP 440 form",
            ));
            continue;
        };
        let extras = if extras.is_empty() { String::new() } else { format!("[{}]", extras.join(",")) };
        let marker = markers.map_or_else(String::new, |m| format!(" ; {m}"));
        out.push(format!("{name}{extras}{version}{marker}"));
    }
    out
}

/// A poetry version constraint in PEP 440 form (empty for `*`): `^1.2.3` is `>=1.2.3,<2.0.0`,
/// `^0.2.3` is `>=0.2.3,<0.3.0`, `~1.2.3` is `>=1.2.3,<1.3.0`, `1.2.3` is `==1.2.3`; PEP 440
/// operators are kept.
fn poetry_constraint(c: &str) -> Option<String> {
    let mut parts = Vec::new();
    for one in c.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if one == "*" {
            continue;
        }
        let nums = |v: &str| -> Option<Vec<u64>> { v.trim().split('.').map(|p| p.parse().ok()).collect() };
        if let Some(v) = one.strip_prefix('^') {
            let n = nums(v)?;
            let first = n.iter().position(|&x| x != 0).unwrap_or(n.len().saturating_sub(1));
            let mut upper: Vec<u64> = n[..=first.min(n.len() - 1)].to_vec();
            *upper.last_mut()? += 1;
            parts.push(format!(
                ">={},<{}",
                v.trim(),
                upper.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
            ));
        } else if let Some(v) = one.strip_prefix('~').filter(|v| !v.starts_with('=')) {
            let n = nums(v)?;
            let upper = if n.len() >= 2 { vec![n[0], n[1] + 1] } else { vec![n[0] + 1] };
            parts.push(format!(
                ">={},<{}",
                v.trim(),
                upper.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
            ));
        } else if one.starts_with(|ch: char| ch.is_ascii_digit()) {
            parts.push(format!("=={one}"));
        } else {
            parts.push(one.replace(' ', ""));
        }
    }
    let joined = parts.join(",");
    // What pep440 cannot read is not translated.
    if !joined.is_empty() && <pep440_rs::VersionSpecifiers as std::str::FromStr>::from_str(&joined).is_err() {
        return None;
    }
    Some(joined)
}

/// `[[tool.uv.index]]` (`default = true`: the index; others: extra indexes) and the older
/// `index-url` / `extra-index-url` / `find-links` keys.
fn read_uv_indexes(path: &Path, tool_uv: Option<&toml::Table>, found: &mut Found) {
    let Some(uv) = tool_uv else { return };
    let origin_dir = path.parent().unwrap_or(Path::new("."));
    let o = super::requirements::Origin { path, line: 0, dir: origin_dir, project: origin_dir };
    let used = indexes_sources_use(uv);
    for index in uv.get("index").and_then(toml::Value::as_array).into_iter().flatten() {
        let Some(t) = index.as_table() else { continue };
        let Some(url) = t.get("url").and_then(toml::Value::as_str) else { continue };
        let name = t.get("name").and_then(toml::Value::as_str).unwrap_or("(unnamed)");
        let explicit = t.get("explicit").and_then(toml::Value::as_bool) == Some(true);
        if t.get("default").and_then(toml::Value::as_bool) == Some(true) {
            found.set_index(url.to_owned(), &o);
        } else if explicit && !used.iter().any(|u| u == name) {
            // uv asks an explicit index only for the packages [tool.uv.sources] pins to it
            // (uv's "Package indexes": `explicit = true`); none does for linux/amd64 (Isaac-GR00T's
            // `pytorch-cu128` serves torch on aarch64 only, its `nvidia-pypi` nothing).
            found.decide(format!(
                "{}: [[tool.uv.index]] `{name}` ({url}) is not used: it is explicit, and no [tool.uv.sources] \
                 entry for linux/amd64 sends a package there",
                path.display()
            ));
        } else {
            found.add_extra_index(url.to_owned(), &o);
            if t.get("explicit").and_then(toml::Value::as_bool) == Some(true) {
                found.decide(format!(
                    "{}: [[tool.uv.index]] `{name}` is explicit (only for the packages [tool.uv.sources] sends \
                     there); the recipe searches it as an extra index for every package",
                    path.display()
                ));
            }
        }
    }
    // uv's `override-dependencies` and `constraint-dependencies`: the recipe's overrides and
    // constraints.
    let at = format!("{}: [tool.uv]", path.display());
    for o in strings(uv.get("override-dependencies")) {
        found.overrides.push((o, format!("{at} override-dependencies")));
    }
    let constraints = strings(uv.get("constraint-dependencies"));
    if !constraints.is_empty() {
        let mut stack = Vec::new();
        super::requirements::read_tokens(&constraints, &o, found, &mut stack, true).ok();
    }
    if let Some(url) = uv.get("index-url").and_then(toml::Value::as_str) {
        found.set_index(url.to_owned(), &o);
    }
    for url in strings(uv.get("extra-index-url")) {
        found.add_extra_index(url, &o);
    }
    for l in strings(uv.get("find-links")) {
        found.find_links.push(if l.contains("://") {
            l
        } else {
            origin_dir.join(l).to_string_lossy().into_owned()
        });
    }
    if let Some(sources) = uv.get("sources").and_then(toml::Value::as_table) {
        for (package, source) in sources {
            let entries: Vec<&toml::Table> = match source {
                toml::Value::Table(t) => vec![t],
                toml::Value::Array(a) => a.iter().filter_map(toml::Value::as_table).collect(),
                _ => Vec::new(),
            };
            for e in entries {
                if e.contains_key("index") {
                    continue;
                }
                if let (Some(git), Some(rev)) = (
                    e.get("git").and_then(toml::Value::as_str),
                    ["rev", "tag", "branch"].iter().find_map(|k| e.get(*k).and_then(toml::Value::as_str)),
                ) {
                    found.decide(format!(
                        "{}: [tool.uv.sources] {package} = {{ git = {git:?} }}: the dependency `{package}` is taken as \
                         `{package} @ git+{git}@{rev}`, built from source",
                        path.display()
                    ));
                    found.git_sources.push((package.clone(), format!("{package} @ git+{git}@{rev}")));
                    continue;
                }
                // No revision: uv takes the default branch; the recipe pins the commit it points
                // to today (`Plan::pin_git_heads`).
                if let Some(git) = e.get("git").and_then(toml::Value::as_str) {
                    found.git_sources.push((package.clone(), format!("{package} @ git+{git}")));
                    continue;
                }
                let kind = ["git", "path", "url", "workspace"]
                    .into_iter()
                    .find(|k| e.contains_key(*k))
                    .unwrap_or("source");
                if local_project(path, origin_dir, uv, package, kind, e, found) {
                    continue;
                }
                let why = if kind == "workspace" {
                    // uv installs workspace members editable from the project's tree; with
                    // the project's uv.lock the image gets their dependencies, and their code
                    // is in the tree the [[source]] copies.
                    "a uv workspace member: not installed as a package; its code is in the project's tree at its dest (add its directory to PYTHONPATH in [image] env), its dependencies come with uv.lock"
                } else {
                    "the recipe installs wheels from indexes; build a wheel and give it as [[python.wheel]], or lock with uv and use `lock = \"uv.lock\"`"
                };
                found.untranslated.push(Untranslated::new(
                    path,
                    0,
                    &format!("[tool.uv.sources] {package} = {{ {kind} = ... }}"),
                    why,
                ));
            }
        }
    }
}

/// The names of the indexes `[tool.uv.sources]` sends a package to on linux/amd64: entries
/// `{ index = "name" }` whose `marker` holds there (or has none).
pub(super) fn indexes_sources_use(uv: &toml::Table) -> Vec<String> {
    use std::str::FromStr as _;
    // Platform markers are what these entries use; the Python version is any of the image's.
    let env = "3.11".parse().ok().and_then(|py| {
        stackbuild_python::Target::new(py, stackbuild_common::Platform::LinuxAmd64).marker_env()
    });
    let mut used = Vec::new();
    let Some(sources) = uv.get("sources").and_then(toml::Value::as_table) else { return used };
    for source in sources.values() {
        let entries: Vec<&toml::Table> = match source {
            toml::Value::Table(t) => vec![t],
            toml::Value::Array(a) => a.iter().filter_map(toml::Value::as_table).collect(),
            _ => Vec::new(),
        };
        for e in entries {
            let Some(index) = e.get("index").and_then(toml::Value::as_str) else { continue };
            let applies = e.get("marker").and_then(toml::Value::as_str).is_none_or(|m| {
                match (pep508_rs::MarkerTree::from_str(m), &env) {
                    (Ok(tree), Some(env)) => tree.evaluate(env, &[]),
                    _ => true,
                }
            });
            if applies && !used.iter().any(|u| u == index) {
                used.push(index.to_owned());
            }
        }
    }
    used
}

/// The directory of workspace member `package`: the first of `[tool.uv.workspace] members`
/// (a directory, or `dir/*`) whose pyproject names it.
fn workspace_member(root: &Path, uv: &toml::Table, package: &str) -> Option<PathBuf> {
    let members = uv.get("workspace").and_then(|w| w.get("members")).and_then(toml::Value::as_array)?;
    let want = stackbuild_python::normalize_name(package);
    let mut dirs = Vec::new();
    for m in members.iter().filter_map(toml::Value::as_str) {
        if let Some(parent) = m.strip_suffix("/*") {
            let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(parent))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            found.sort();
            dirs.extend(found);
        } else if !m.contains(['*', '?', '[']) {
            dirs.push(root.join(m));
        }
    }
    dirs.into_iter().find(|d| {
        std::fs::read_to_string(d.join("pyproject.toml"))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|t| t.get("project")?.get("name")?.as_str().map(stackbuild_python::normalize_name))
            .is_some_and(|n| n == want)
    })
}

/// A `[tool.uv.sources]` entry that is a project on disk, taken as a [[source]] of its own;
/// whether it was.
fn local_project(
    path: &Path,
    origin_dir: &Path,
    uv: &toml::Table,
    package: &str,
    kind: &str,
    e: &toml::Table,
    found: &mut Found,
) -> bool {
    // A project on disk: a `path` to a directory with a pyproject.toml or setup.py,
    // or a workspace member (`[tool.uv.workspace] members`): a [[source]] of its
    // own, installed as a wheel built from its tree, as uv installs it (editable).
    let dir = match kind {
        "path" => e.get("path").and_then(toml::Value::as_str).map(|p| origin_dir.join(p)),
        "workspace" => workspace_member(origin_dir, uv, package),
        _ => None,
    };
    // With the project's own lock, only a project the lock installs from its tree (at a
    // version it records): its dependencies are the lock's.
    let dir = dir.filter(|d| found.lock.is_none() || found.lock_installs(d));
    if let Some(dir) = dir.filter(|d| d.join("pyproject.toml").is_file() || d.join("setup.py").is_file()) {
        found.decide(format!(
            "{}: [tool.uv.sources] {package} = {{ {kind} = ... }}: the project in {} is a [[source]] of \
             its own, installed as a wheel built from its tree (uv installs it editable; `install = \
             \"editable\"` does the same in a development image)",
            path.display(),
            dir.display()
        ));
        found.local_projects.push((package.to_owned(), dir));
        return true;
    }
    false
}
