//! `stackbuild lock` as `uv lock` behaves: the lock's pins are kept wherever the recipe allows
//! them, `--upgrade-package NAME` moves that package alone and `--upgrade` every package. Needs
//! the configured index (two small wheels, and newer versions of them than the ones pinned first).

use std::path::Path;
use std::process::Command;

mod common;
use common::locked_packages;

fn lock(recipe: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .arg("lock")
        .arg(recipe)
        .args(args)
        .env("STACKBUILD_CACHE", cache)
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap()
}

fn versions(recipe: &Path) -> Vec<(String, String)> {
    locked_packages(&recipe.with_extension("toml.lock")).into_iter().map(|(n, v, _)| (n, v)).collect()
}

#[test]
fn lock_keeps_the_pins_and_upgrades_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (recipe, cache) = (dir.path().join("r.toml"), dir.path().join("cache"));
    let write = |packages: &str| {
        std::fs::write(
            &recipe,
            format!("[image]\nname = \"r\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\npackages = [{packages}]\n"),
        )
        .unwrap();
    };
    // Old versions first, pinned; then the pins loosened.
    write("\"six==1.15.0\", \"idna==3.6\"");
    let out = lock(&recipe, &cache, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not reach") {
        eprintln!("SKIPPED: the index does not answer: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let old = vec![("idna".to_owned(), "3.6".to_owned()), ("six".to_owned(), "1.15.0".to_owned())];
    assert_eq!(versions(&recipe), old);
    write("\"six>=1.15\", \"idna>=3.6\"");
    for _ in 0..2 {
        // Stale (the recipe changed), then current: both keep the pins.
        let out = lock(&recipe, &cache, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(versions(&recipe), old, "the lock's pins are kept");
    }

    let out = lock(&recipe, &cache, &["--upgrade-package", "SIX"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let moved = versions(&recipe);
    assert_eq!(moved[0], old[0], "idna is kept: {moved:?}");
    assert_ne!(moved[1], old[1], "six moves: {moved:?}");

    let out = lock(&recipe, &cache, &["-U"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fresh = versions(&recipe);
    assert_ne!(fresh[0], old[0], "--upgrade moves idna too: {fresh:?}");
    assert_eq!(fresh[1], moved[1]);

    // A name the lock does not hold is said, and the lock is still written.
    let out = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .args(["lock", "-P", "numpy"])
        .arg(&recipe)
        .env("STACKBUILD_CACHE", &cache)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("--upgrade-package numpy: not in"), "{stderr}");
    assert_eq!(versions(&recipe), fresh);
    // --upgrade with --check makes no sense: clap says so.
    assert!(!lock(&recipe, &cache, &["--check", "-U"]).status.success());
}
