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
//!
//! It also links the `stackhook` binary statically ([`link_static`]): the hook runs as root on
//! every container start, and a dynamically linked program runs the dynamic loader first, which
//! honours `LD_PRELOAD` and `LD_LIBRARY_PATH` from whatever environment the hook was handed.

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
    link_static()?;
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

/// Makes every link of the `stackhook` binary (`cargo build`, `cargo install`, the copy `cargo
/// test` relinks) a static PIE, on `*-linux-gnu` targets where it would otherwise be dynamic.
///
/// The usual way, `-C target-feature=+crt-static`, cannot be set from a package: in
/// `RUSTFLAGS` or `.cargo/config.toml` it also reaches proc-macro crates (serde's, clap's),
/// which cannot be built with it on `*-linux-gnu` unless `--target` is given, and it moves the
/// output to `target/<triple>/`. So this asks for the same link with per-binary linker
/// arguments: `-static-pie` (rcrt1.o, no `PT_INTERP`, no dynamic section needing libraries,
/// ASLR kept), and a search directory that the linker reads before the system's, holding the
/// static archives under the names rustc's dynamic link line asks for (`-lc`, `-lm`, ...;
/// `-lgcc_s` is libgcc's static unwinder `libgcc_eh.a`, which is what rustc links instead under
/// `crt-static`). With `-Bdynamic` in force the linker takes `libc.a` when no `libc.so` comes
/// before it in the search order, so the result is the link `crt-static` makes.
///
/// Skipped, with a warning, where it does not apply: other targets (musl is static already),
/// a build that already asks for `crt-static`, cross builds (whose C toolchain this does not
/// know), or a C toolchain without the static archives (`libc6-dev` provides them).
fn link_static() -> Result<(), String> {
    let env = |key: &str| std::env::var(key).unwrap_or_default();
    println!("cargo:rerun-if-env-changed=CC");
    let gnu_linux = env("CARGO_CFG_TARGET_OS") == "linux" && env("CARGO_CFG_TARGET_ENV") == "gnu";
    let static_already = env("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static");
    if !gnu_linux || static_already {
        return Ok(());
    }
    if env("TARGET") != env("HOST") {
        println!(
            "cargo:warning=stackhook is linked dynamically for {}: build it with \
             RUSTFLAGS='-C target-feature=+crt-static' --target {}",
            env("TARGET"),
            env("TARGET")
        );
        return Ok(());
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let dir = out.join("static-libs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let names = [
        ("c", "c"),
        ("m", "m"),
        ("rt", "rt"),
        ("pthread", "pthread"),
        ("dl", "dl"),
        ("util", "util"),
        ("gcc_s", "gcc_eh"),
    ];
    for (asked, archive) in names {
        let Some(path) = static_archive(&cc, archive) else {
            println!(
                "cargo:warning=stackhook is linked dynamically: no lib{archive}.a found by `{cc} \
                 -print-file-name` (install libc6-dev, or build with RUSTFLAGS='-C \
                 target-feature=+crt-static' --target {})",
                env("TARGET")
            );
            return Ok(());
        };
        let link = dir.join(format!("lib{asked}.a"));
        std::os::unix::fs::symlink(&path, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    }
    println!("cargo:rustc-link-arg-bin=stackhook=-L{}", dir.display());
    println!("cargo:rustc-link-arg-bin=stackhook=-static-pie");
    Ok(())
}

/// The path of `lib<name>.a` as the C compiler driver finds it, if it does.
fn static_archive(cc: &str, name: &str) -> Option<PathBuf> {
    let out = std::process::Command::new(cc).arg(format!("-print-file-name=lib{name}.a")).output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // An unknown file comes back as its bare name.
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}
