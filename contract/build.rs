//! Converts the compatibility knowledge base, `kb/*.toml`, to JSON in `$OUT_DIR/<name>.json`,
//! which `src/kb` embeds.
//!
//! The TOML files stay the source of truth (each row names its source, and comments explain the
//! figures). Parsing all of them with the `toml` crate on first use cost every `stackhook hook`
//! invocation about 3 ms, most of its run time; `serde_json` reads the same data into the same
//! serde types in a small fraction of that, so the TOML parse happens here, once per build.
//!
//! A table that is not valid TOML fails the build, naming the file. Only the syntax is checked
//! here: the schema and the row rules are checked where the tables are loaded, and the kb unit
//! tests load every table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Cargo prints a failing build script's stderr under "--- stderr".
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let kb = Path::new(&manifest).join("kb");
    // The directory too, so that a table added there is converted.
    println!("cargo:rerun-if-changed={}", kb.display());
    let entries = std::fs::read_dir(&kb).map_err(|e| format!("{}: {e}", kb.display()))?;
    let mut tables = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", kb.display()))?.path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            tables.push(path);
        }
    }
    tables.sort();
    for path in tables {
        println!("cargo:rerun-if-changed={}", path.display());
        let json = convert(&path)?;
        let mut target =
            out.join(path.file_stem().ok_or_else(|| format!("{}: no file name", path.display()))?);
        target.set_extension("json");
        std::fs::write(&target, json).map_err(|e| format!("{}: {e}", target.display()))?;
    }
    Ok(())
}

/// The table at `path` as compact JSON.
fn convert(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // The parser's message quotes line, column and the offending text.
    let table: toml::Table = text.parse().map_err(|e| format!("{}: {e}", path.display()))?;
    let json = to_json(toml::Value::Table(table), &mut String::new())
        .map_err(|why| format!("{}: {why}", path.display()))?;
    Ok(json.to_string())
}

/// The JSON value of a TOML value. TOML values without a JSON equivalent are refused rather than
/// mapped to something a field could then accept where the TOML would have been rejected:
/// a datetime (the `toml` deserializer hands it to serde as a private map, which no field of the
/// tables takes) and a NaN or infinite float (`serde_json` would write `null`, which an
/// `Option` field reads as absent). `at` is the key path, for the message.
fn to_json(value: toml::Value, at: &mut String) -> Result<serde_json::Value, String> {
    use serde_json::Value as Json;
    Ok(match value {
        toml::Value::String(s) => Json::String(s),
        toml::Value::Integer(i) => Json::from(i),
        toml::Value::Boolean(b) => Json::Bool(b),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Json::Number)
            .ok_or_else(|| format!("{at}: {f} has no JSON form; no table field takes a float"))?,
        toml::Value::Datetime(d) => {
            return Err(format!("{at}: datetime {d}; no table field takes one (quote it)"));
        }
        toml::Value::Array(items) => {
            let mut array = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let len = at.len();
                let _ = write!(at, "[{i}]");
                array.push(to_json(item, at)?);
                at.truncate(len);
            }
            Json::Array(array)
        }
        toml::Value::Table(table) => {
            let mut object = serde_json::Map::new();
            for (key, item) in table {
                let len = at.len();
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(&key);
                let item = to_json(item, at)?;
                at.truncate(len);
                object.insert(key, item);
            }
            Json::Object(object)
        }
    })
}
