//! The text formats inside a wheel: the RFC 822 headers of `METADATA` and `WHEEL`, `RECORD`'s CSV
//! (PEP 376, PEP 427) with its urlsafe-base64 digests, and `entry_points.txt`'s console scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Base64 with the URL-safe alphabet and no padding, as `RECORD` hashes are written
/// (<https://packaging.python.org/en/latest/specifications/recording-installed-packages/#the-record-file>).
pub(super) fn urlsafe_b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Parses `Key: Value` headers (the email-header format of `WHEEL` and `METADATA`) up to the
/// first empty line; continuation lines are ignored, as no field read here uses them. A line of
/// only spaces is a continuation, not the end (RFC 5322 section 2.2.3 folding): pandas' `License`
/// field carries such lines, and its `Requires-Dist` come after them.
pub(super) fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.lines()
        .take_while(|l| !l.is_empty())
        .filter(|l| !l.starts_with([' ', '\t']))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

pub(super) fn header<'h>(headers: &'h [(String, String)], key: &str) -> Option<&'h str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
}

/// A project name as the core metadata spec allows it: ASCII letters, digits, `.`, `_`, `-`,
/// starting and ending with a letter or digit. Checked because the name becomes a path component
/// (the headers directory).
pub(super) fn is_project_name(name: &str) -> bool {
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    ok_end(name.chars().next())
        && ok_end(name.chars().last())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Splits CSV text (RFC 4180 quoting, as Python's `csv` module writes it) into rows of fields.
pub(super) fn parse_csv(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    let mut quoted_field = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if field.is_empty() && !quoted_field => {
                quoted_field = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => {
                            line += usize::from(c == '\n');
                            field.push(c);
                        }
                        None => return Err(format!("line {line}: unterminated quoted field")),
                    }
                }
            }
            ',' => {
                row.push(std::mem::take(&mut field));
                quoted_field = false;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                quoted_field = false;
                rows.push(std::mem::take(&mut row));
                line += 1;
            }
            c if quoted_field => return Err(format!("line {line}: text {c:?} after a quoted field")),
            c => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() || quoted_field {
        row.push(field);
        rows.push(row);
    }
    Ok(rows)
}

/// Quotes a CSV field when Python's `csv` module would.
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// Parses `RECORD` into `path -> (sha256, size)`.
pub(super) fn parse_record(text: &str) -> Result<BTreeMap<String, RecordRow>, String> {
    let mut out = BTreeMap::new();
    for (i, fields) in parse_csv(text)?.into_iter().enumerate() {
        if fields.iter().all(String::is_empty) {
            continue;
        }
        let [path, hash, size] = <[String; 3]>::try_from(fields)
            .map_err(|f| format!("row {}: expected 3 fields (path,hash,size), found {}", i + 1, f.len()))?;
        let sha256 = if hash.is_empty() {
            None
        } else {
            match hash.split_once('=') {
                Some(("sha256", digest)) => Some(digest.trim_end_matches('=').to_owned()),
                Some((algorithm, _)) => {
                    return Err(format!(
                        "row {}: {path:?} uses hash {algorithm:?}; only sha256 is supported",
                        i + 1
                    ))
                }
                None => return Err(format!("row {}: malformed hash {hash:?}", i + 1)),
            }
        };
        let size = if size.is_empty() {
            None
        } else {
            Some(size.parse::<u64>().map_err(|_| format!("row {}: malformed size {size:?}", i + 1))?)
        };
        let row = RecordRow { sha256, size };
        if let Some(previous) = out.insert(path.clone(), row.clone()) {
            if previous != row {
                return Err(format!("row {}: {path:?} is listed twice with different hashes", i + 1));
            }
        }
    }
    Ok(out)
}

/// A launcher to generate from `entry_points.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScriptEntry {
    pub(super) section: &'static str,
    pub(super) name: String,
    pub(super) module: String,
    /// The dotted attribute path inside the module (`main`, `cli.main`).
    pub(super) attr: String,
}

impl ScriptEntry {
    /// A launcher that imports the object and exits with what it returns: the behaviour pip's
    /// launchers have on Linux (the Windows-only `argv[0]` suffix stripping is left out).
    pub(super) fn launcher(&self, interpreter: &str, dist: &str, version: &str) -> String {
        let head = self.attr.split('.').next().unwrap_or(&self.attr);
        let mut s = format!("#!{interpreter}\n");
        let _ = writeln!(
            s,
            "# {} entry point {:?} of {dist} {version}; written by stackbuild.",
            self.section, self.name
        );
        let _ = writeln!(s, "import sys");
        let _ = writeln!(s, "from {} import {head}", self.module);
        let _ = writeln!(s, "if __name__ == \"__main__\":");
        let _ = writeln!(s, "    sys.exit({}())", self.attr);
        s
    }
}

/// A dotted Python name (`pkg.mod`); checked because it is pasted into generated code.
pub(super) fn is_dotted_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
                && chars.all(|c| c == '_' || c.is_alphanumeric())
        })
}

/// Parses the `console_scripts` and `gui_scripts` sections of `entry_points.txt` (an INI file).
pub(super) fn parse_entry_points(text: &str) -> Result<Vec<ScriptEntry>, String> {
    let mut section: Option<&'static str> = None;
    let mut out: Vec<ScriptEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = match name.trim() {
                "console_scripts" => Some("console_scripts"),
                "gui_scripts" => Some("gui_scripts"),
                _ => None,
            };
            continue;
        }
        let Some(section) = section else { continue };
        let err = |what: &str| format!("line {}: {what}: {raw:?}", i + 1);
        let (name, value) = line.split_once('=').ok_or_else(|| err("expected `name = module:function`"))?;
        let name = name.trim();
        if name.is_empty()
            || matches!(name, "." | "..")
            || name.contains(['/', '\\'])
            || name.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(err("invalid script name"));
        }
        // Extras (`module:func [extra]`) only gate optional dependencies; the launcher ignores them.
        let value = value.split_once('[').map_or(value, |(v, _)| v).trim();
        let (module, attr) = value.split_once(':').ok_or_else(|| err("expected `module:function`"))?;
        let (module, attr) = (module.trim(), attr.trim());
        if !is_dotted_identifier(module) || !is_dotted_identifier(attr) {
            return Err(err("invalid object reference"));
        }
        if out.iter().any(|s| s.name == name) {
            return Err(err("script defined twice"));
        }
        out.push(ScriptEntry {
            section,
            name: name.to_owned(),
            module: module.to_owned(),
            attr: attr.to_owned(),
        });
    }
    Ok(out)
}

/// One row of the wheel's `RECORD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RecordRow {
    /// `sha256` digest, urlsafe base64 without padding; `None` when the hash field is empty.
    pub(super) sha256: Option<String>,
    pub(super) size: Option<u64>,
}
