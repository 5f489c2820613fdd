//! `pyproject.toml`: the project's name, `requires-python` and dependencies (PEP 621), its
//! optional dependencies and dependency groups (PEP 735), and uv's `[tool.uv]` indexes and
//! sources (<https://docs.astral.sh/uv/concepts/indexes/>).

use std::path::Path;

use super::{Found, Untranslated};

const MAX_FILE: u64 = 4 << 20;

/// Reads `path` into `found`; `extras` and `groups` name the optional dependencies and
/// dependency groups to install (none by default, as `pip install .` and `uv sync --no-dev`).
pub(super) fn read_file(
    path: &Path,
    found: &mut Found,
    extras: &[String],
    groups: &[String],
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
    let strings = |v: Option<&toml::Value>| -> Vec<String> {
        v.and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect()
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let o = super::requirements::Origin { path, line: 0, dir, project: dir };
    let mut stack = Vec::new();
    let deps = strings(project.and_then(|p| p.get("dependencies")));
    found.decide(format!("{}: {} [project] dependencies", path.display(), deps.len()));
    super::requirements::read_tokens(&deps, &o, found, &mut stack, false)?;
    let optional = project.and_then(|p| p.get("optional-dependencies")).and_then(toml::Value::as_table);
    for (extra, list) in optional.into_iter().flatten() {
        let list = strings(Some(list));
        if extras.contains(extra) {
            found.decide(format!(
                "{}: optional dependencies `{extra}` ({}), as --extra asks",
                path.display(),
                list.len()
            ));
            super::requirements::read_tokens(&list, &o, found, &mut stack, false)?;
        } else {
            found.decide(format!(
                "{}: optional dependencies `{extra}` ({} package(s)) left out, as `pip install .` does; `--extra {extra}` adds them",
                path.display(),
                list.len()
            ));
        }
    }
    let dep_groups = doc.get("dependency-groups").and_then(toml::Value::as_table);
    for (group, list) in dep_groups.into_iter().flatten() {
        // PEP 735 entries are requirement strings or `{ include-group = "..." }` tables.
        let list_strings = strings(Some(list));
        if groups.contains(group) {
            found.decide(format!(
                "{}: dependency group `{group}` ({}), as --group asks",
                path.display(),
                list_strings.len()
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

/// `[[tool.uv.index]]` (`default = true`: the index; others: extra indexes) and the older
/// `index-url` / `extra-index-url` / `find-links` keys.
fn read_uv_indexes(path: &Path, tool_uv: Option<&toml::Table>, found: &mut Found) {
    let Some(uv) = tool_uv else { return };
    let origin_dir = path.parent().unwrap_or(Path::new("."));
    let o = super::requirements::Origin { path, line: 0, dir: origin_dir, project: origin_dir };
    for index in uv.get("index").and_then(toml::Value::as_array).into_iter().flatten() {
        let Some(t) = index.as_table() else { continue };
        let Some(url) = t.get("url").and_then(toml::Value::as_str) else { continue };
        let name = t.get("name").and_then(toml::Value::as_str).unwrap_or("(unnamed)");
        if t.get("default").and_then(toml::Value::as_bool) == Some(true) {
            found.set_index(url.to_owned(), &o);
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
    if let Some(url) = uv.get("index-url").and_then(toml::Value::as_str) {
        found.set_index(url.to_owned(), &o);
    }
    for url in uv.get("extra-index-url").and_then(toml::Value::as_array).into_iter().flatten() {
        if let Some(url) = url.as_str() {
            found.add_extra_index(url.to_owned(), &o);
        }
    }
    for links in uv.get("find-links").and_then(toml::Value::as_array).into_iter().flatten() {
        if let Some(l) = links.as_str() {
            found.find_links.push(if l.contains("://") {
                l.to_owned()
            } else {
                origin_dir.join(l).to_string_lossy().into_owned()
            });
        }
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
                let kind = ["git", "path", "url", "workspace"]
                    .into_iter()
                    .find(|k| e.contains_key(*k))
                    .unwrap_or("source");
                found.untranslated.push(Untranslated::new(
                    path,
                    0,
                    &format!("[tool.uv.sources] {package} = {{ {kind} = ... }}"),
                    "the recipe installs wheels from indexes; build a wheel and give it as [[python.wheel]], or lock with uv and use `lock = \"uv.lock\"`",
                ));
            }
        }
    }
}
