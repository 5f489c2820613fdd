//! `[python] lock = "uv.lock"` and `lock = "pylock.toml"`: a build from the project's own lock,
//! written here by uv itself (`uv lock`, `uv export --format pylock.toml`), installs exactly the
//! wheels it lists, with its hashes, and resolves nothing; a lock whose hash does not match
//! the file is refused naming the package. Needs uv and the configured index (three small
//! wheels); without them the test is reported as skipped.

use std::path::Path;
use std::process::Command;

mod common;
use common::{image_distributions, locked_packages};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// A project as an ML engineer has it: dependencies, and a development group that an image
/// does not carry.
const PYPROJECT: &str = "[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
    dependencies = [\"six==1.16.0\", \"idna==3.7\"]\n\n[dependency-groups]\ndev = [\"iniconfig==2.0.0\"]\n";

fn uv(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("uv").args(args).current_dir(dir).output().unwrap()
}

fn build(dir: &Path, recipe: &str, cache: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .arg(dir.join(recipe))
        .arg("--out")
        .arg(dir.join(format!("images/{recipe}")))
        .env("STACKBUILD_CACHE", cache)
        .env("STACKBUILD_LOG", "warn")
        .env("SOURCE_DATE_EPOCH", "0")
        .output()
        .unwrap()
}

fn recipe(dir: &Path, name: &str, lock: &str) {
    std::fs::write(
        dir.join(name),
        format!(
            "[image]\nname = \"app\"\ntag = \"test\"\n\n[base]\nscratch = true\n\n[python]\nversion = \"3.11\"\n\
             lock = \"{lock}\"\n\n[[source]]\nname = \"app\"\npath = \".\"\ndest = \"/opt/app\"\n"
        ),
    )
    .unwrap();
}

/// `(name, version, sha256)` of every wheel the lock file `path` lists for the image, read
/// with a TOML parser (not with the code under test).
fn wheels_of(path: &Path) -> Vec<(String, String, String)> {
    let doc: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let list = doc.get("package").or_else(|| doc.get("packages")).unwrap().as_array().unwrap();
    let mut out = Vec::new();
    for p in list {
        let Some(wheels) = p.get("wheels").and_then(|w| w.as_array()) else { continue };
        let wheel = &wheels[0];
        let hash = wheel
            .get("hash")
            .and_then(|h| h.as_str())
            .map(|h| h.trim_start_matches("sha256:").to_owned())
            .or_else(|| wheel["hashes"]["sha256"].as_str().map(str::to_owned))
            .unwrap();
        out.push((p["name"].as_str().unwrap().into(), p["version"].as_str().unwrap().into(), hash));
    }
    out.sort();
    out
}

#[test]
fn a_build_from_the_projects_uv_lock_or_pylock_installs_exactly_its_wheels() {
    if !have("uv") {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("pyproject.toml"), PYPROJECT).unwrap();
    let out = uv(dir, &["lock", "-q"]);
    if !out.status.success() {
        eprintln!("SKIPPED: uv lock could not reach the index: {}", text(&out.stderr));
        return;
    }
    let out = uv(dir, &["export", "-q", "--format", "pylock.toml", "--no-dev", "-o", "pylock.toml"]);
    assert!(out.status.success(), "uv export: {}", text(&out.stderr));
    let want = ["idna==3.7", "six==1.16.0"];

    for (name, lock) in [("from-uv.toml", "uv.lock"), ("from-pylock.toml", "pylock.toml")] {
        recipe(dir, name, lock);
        let out = build(dir, name, &dir.join("cache"));
        assert!(out.status.success(), "{lock}: {}", text(&out.stderr));
        // The development group is not in the image; the locked wheels are, with their hashes.
        assert_eq!(image_distributions(&dir.join(format!("images/{name}"))), want, "{lock}");
        let listed: Vec<_> =
            wheels_of(&dir.join(lock)).into_iter().filter(|(n, _, _)| n != "iniconfig").collect();
        assert_eq!(locked_packages(&dir.join(format!("{name}.lock"))), listed, "{lock}");
    }

    // An edited lock is a new input: the next build reads it again, and a hash that is not the
    // file's is refused, naming the package; nothing is placed in the cache under either hash.
    let text_before = std::fs::read_to_string(dir.join("uv.lock")).unwrap();
    let six = wheels_of(&dir.join("uv.lock")).into_iter().find(|(n, _, _)| n == "six").unwrap().2;
    let wrong = "0".repeat(64);
    std::fs::write(dir.join("uv.lock"), text_before.replace(&six, &wrong)).unwrap();
    let fresh = dir.join("fresh-cache");
    let out = build(dir, "from-uv.toml", &fresh);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("package six 1.16.0") && err.contains(&format!("but the lock gives {wrong}")),
        "{err}"
    );
    assert!(!fresh.join("artifacts").join(&wrong).exists() && !fresh.join("artifacts").join(&six).exists());

    // `check` reads the lock as it is, offline too: nothing to resolve.
    std::fs::write(dir.join("uv.lock"), &text_before).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .args(["check", "--offline"])
        .arg(dir.join("from-uv.toml"))
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
}
