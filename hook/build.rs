//! Links the `stackhook` binary statically ([`link_static`]): the hook runs as root on every
//! container start, and a dynamically linked program runs the dynamic loader first, which honours
//! `LD_PRELOAD` and `LD_LIBRARY_PATH` from whatever environment the hook was handed.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    match link_static() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            // Cargo prints a failing build script's stderr under "--- stderr".
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
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
