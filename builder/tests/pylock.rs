//! `stackbuild lock --pylock`: the image's Python stack as a PEP 751 `pylock.toml`, read by
//! the tools that install such files: the Python Packaging Authority's `packaging.pylock` validates it against the
//! specification, `uv pip install --dry-run -r` and `pip install --dry-run -r` (pip 26) read
//! it, and `uv pip sync` of it into a fresh virtual environment installs exactly the locked
//! versions. Needs the configured index (metadata and three small wheels); each tool that is
//! not installed is reported as skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{image_distributions, locked_packages};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn have(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The validators' virtual environment that `.ci/install` makes (`packaging`, `pip` 26).
fn validators() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sbom-validators");
    let ok = Command::new(venv.join("bin/python"))
        .args(["-c", "import packaging.pylock"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(venv)
}

fn small_recipe(dir: &Path) -> PathBuf {
    let recipe = dir.join("small.toml");
    std::fs::write(
        &recipe,
        "[image]\nname = \"small\"\n[base]\nscratch = true\n[python]\nversion = \"3.11\"\n\
         packages = [\"six==1.16.0\", \"idna==3.7\", \"packaging==24.1\"]\n",
    )
    .unwrap();
    recipe
}

/// `stackbuild lock RECIPE --pylock PYLOCK`, with a cache under `dir`.
fn lock_with_pylock(recipe: &Path, pylock: &Path, dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .arg("lock")
        .arg(recipe)
        .arg("--pylock")
        .arg(pylock)
        .env("STACKBUILD_CACHE", dir.join("cache"))
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn the_pylock_is_what_the_image_installs_and_the_pypa_tools_read_it() {
    if !have("uv") {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recipe = small_recipe(dir.path());
    let pylock = dir.path().join("pylock.toml");
    let out = lock_with_pylock(&recipe, &pylock, dir.path());
    if !out.status.success() && text(&out.stderr).contains("could not reach") {
        eprintln!("SKIPPED: the index does not answer: {}", text(&out.stderr));
        return;
    }
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&pylock).unwrap();
    let doc: toml::Value = toml::from_str(&written).unwrap();
    assert_eq!(doc["lock-version"].as_str(), Some("1.0"));
    assert_eq!(doc["requires-python"].as_str(), Some("==3.11.*"));
    let packages = doc["packages"].as_array().unwrap();
    let locked = locked_packages(&dir.path().join("small.toml.lock"));
    let listed: Vec<(String, String, String)> = packages
        .iter()
        .map(|p| {
            let wheel = &p["wheels"][0];
            assert!(
                wheel["url"].as_str().is_some_and(|u| u.ends_with(wheel["name"].as_str().unwrap())),
                "{p}"
            );
            assert!(wheel["size"].as_integer().unwrap() > 0);
            (
                p["name"].as_str().unwrap().into(),
                p["version"].as_str().unwrap().into(),
                wheel["hashes"]["sha256"].as_str().unwrap().into(),
            )
        })
        .collect();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, locked, "{written}");
    assert!(written.contains("[tool.stackbuild]"), "{written}");

    pypa_tools_read(&pylock, dir.path(), &locked);

    // uv installs exactly the lock into a fresh environment.
    let venv = dir.path().join("venv");
    let out = Command::new("uv").args(["venv", "-q", "--python", "3.11"]).arg(&venv).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let py = venv.join("bin/python");
    let out =
        Command::new("uv").args(["pip", "sync", "-q", "--python"]).arg(&py).arg(&pylock).output().unwrap();
    assert!(out.status.success(), "uv pip sync: {}", text(&out.stderr));
    let out = Command::new("uv").args(["pip", "freeze", "--python"]).arg(&py).output().unwrap();
    let mut frozen: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    frozen.sort();
    let mut want: Vec<String> = locked.iter().map(|(n, v, _)| format!("{n}=={v}")).collect();
    want.sort();
    assert_eq!(frozen, want);

    // The image built from the same lock (`--pylock` on a build writes the same file) carries
    // exactly these distributions in its site-packages.
    let image = dir.path().join("image");
    let again = dir.path().join("from-build.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .arg(&recipe)
        .arg("--locked")
        .arg("--out")
        .arg(&image)
        .arg("--pylock")
        .arg(&again)
        .env("STACKBUILD_CACHE", dir.path().join("cache"))
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&again).unwrap(), written);
    let mut in_image = image_distributions(&image);
    in_image.sort();
    assert_eq!(in_image, want, "the image's site-packages");
}

/// The Python Packaging Authority's reference implementation of the specification validates the file, and pip 26 reads
/// it as a requirements file and would install exactly `locked`.
fn pypa_tools_read(pylock: &Path, dir: &Path, locked: &[(String, String, String)]) {
    // PyPA's reference implementation of the specification.
    if let Some(venv) = validators() {
        let py = venv.join("bin/python");
        let check = "import sys, tomllib, packaging.pylock as p; p.Pylock.from_dict(tomllib.load(open(sys.argv[1], 'rb')))";
        let out = Command::new(&py).args(["-c", check]).arg(pylock).output().unwrap();
        assert!(out.status.success(), "packaging.pylock: {}", text(&out.stderr));
        // pip 26 reads it as a requirements file.
        let out = Command::new(&py)
            .args(["-m", "pip", "install", "--dry-run", "--no-deps", "--target"])
            .arg(dir.join("pip-target"))
            .arg("-r")
            .arg(pylock)
            .output()
            .unwrap();
        let said = text(&out.stdout);
        assert!(out.status.success(), "pip: {said}{}", text(&out.stderr));
        for (name, version, _) in locked {
            assert!(
                said.contains(&format!("{name}-{version}")),
                "pip would not install {name} {version}: {said}"
            );
        }
    } else {
        eprintln!(
            "SKIPPED: packaging.pylock and pip 26 are not in target/sbom-validators (.ci/install makes it)"
        );
    }
}

#[test]
fn a_file_that_is_not_ours_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = small_recipe(dir.path());
    let pylock = dir.path().join("pylock.toml");
    std::fs::write(&pylock, "lock-version = \"1.0\"\n# mine\n").unwrap();
    let out = lock_with_pylock(&recipe, &pylock, dir.path());
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a pylock.toml stackbuild wrote"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&pylock).unwrap(), "lock-version = \"1.0\"\n# mine\n");
}

/// The `DreamZero` stack's own lock (62 wheels, torch 2.1.0 with its CUDA 12.1 wheels) as a
/// `pylock.toml`, written from the checked-in lock without resolving (`lock --locked`): the `PyPA`'s
/// `packaging.pylock` reads it, `uv pip install --dry-run` for the image's interpreter and
/// platform would install exactly the lock's versions, and pip 26 reads it (where this machine's
/// Python is the image's, 3.11 on x86-64, since pip takes no platform options for a pylock).
#[test]
#[allow(clippy::too_many_lines)] // one stack, read by four tools in turn
fn the_dreamzero_pylock_passes_uv_pip_and_packaging() {
    if !have("uv") {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recipes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes");
    for name in ["dreamzero-cu121.toml", "dreamzero-cu121.toml.lock"] {
        std::fs::copy(recipes.join(name), dir.path().join(name)).unwrap();
    }
    let pylock = dir.path().join("pylock.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .args(["lock", "--locked", "--pylock"])
        .arg(&pylock)
        .arg(dir.path().join("dreamzero-cu121.toml"))
        .env("STACKBUILD_CACHE", dir.path().join("cache"))
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap();
    if !out.status.success() && text(&out.stderr).contains("could not reach") {
        eprintln!("SKIPPED: the index does not answer: {}", text(&out.stderr));
        return;
    }
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Nothing was resolved: the checked-in lock is what was written from.
    assert_eq!(
        std::fs::read(dir.path().join("dreamzero-cu121.toml.lock")).unwrap(),
        std::fs::read(recipes.join("dreamzero-cu121.toml.lock")).unwrap()
    );
    let mut want: Vec<String> = locked_packages(&dir.path().join("dreamzero-cu121.toml.lock"))
        .into_iter()
        .map(|(name, version, _)| format!("{name}=={version}"))
        .collect();
    want.sort();
    assert_eq!(want.len(), 62);
    let out = Command::new("uv")
        .args([
            "pip",
            "install",
            "--dry-run",
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-manylinux_2_28",
            "--target",
        ])
        .arg(dir.path().join("target"))
        .arg("-r")
        .arg(&pylock)
        .output()
        .unwrap();
    let said = text(&out.stderr);
    assert!(out.status.success(), "uv: {said}");
    let mut would: Vec<String> = said
        .lines()
        .filter_map(|l| l.trim().strip_prefix("+ "))
        .map(|l| {
            let (name, version) = l.split_once("==").unwrap();
            format!("{}=={version}", name.to_lowercase().replace('_', "-"))
        })
        .collect();
    would.sort();
    let normalized: Vec<String> = want.iter().map(|w| w.to_lowercase().replace('_', "-")).collect();
    assert_eq!(would, normalized, "uv pip install --dry-run -r pylock.toml");
    let Some(venv) = validators() else {
        eprintln!(
            "SKIPPED: packaging.pylock and pip 26 are not in target/sbom-validators (.ci/install makes it)"
        );
        return;
    };
    let py = venv.join("bin/python");
    let check = "import sys, tomllib, packaging.pylock as p; print(len(p.Pylock.from_dict(tomllib.load(open(sys.argv[1], 'rb'))).packages))";
    let out = Command::new(&py).args(["-c", check]).arg(&pylock).output().unwrap();
    assert!(out.status.success(), "packaging.pylock: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "62");
    let host = Command::new(&py)
        .args(["-c", "import sys, platform; print(f'{sys.version_info[0]}.{sys.version_info[1]} {platform.machine()}')"])
        .output()
        .unwrap();
    if text(&host.stdout).trim() != "3.11 x86_64" {
        eprintln!(
            "SKIPPED (pip): this machine's Python is {}, not the image's 3.11 on x86_64",
            text(&host.stdout).trim()
        );
        return;
    }
    let out = Command::new(&py)
        .args(["-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--target"])
        .arg(dir.path().join("pip-target"))
        .arg("-r")
        .arg(&pylock)
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "pip: {said}{}", text(&out.stderr));
    for w in &want {
        let (name, version) = w.split_once("==").unwrap();
        let lower = said.to_lowercase().replace('_', "-");
        assert!(
            lower.contains(&format!("{}-{version}", name.to_lowercase().replace('_', "-"))),
            "pip would not install {w}: {said}"
        );
    }
}
