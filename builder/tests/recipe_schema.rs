//! The recipe schema (`recipes/recipe.schema.json`, generated from the recipe types) read by
//! independent validators: `check-jsonschema` (Python's jsonschema, TOML instances read as
//! JSON) and `taplo check` (the TOML toolkit behind Even Better TOML, which finds the schema by
//! each recipe's `#:schema` line). Every recipe of the repository and every fixture that parses
//! validates; a recipe with a misspelt field does not. A validator that is not installed is
//! reported as skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The recipes that parse: the repository's own and the check fixtures.
fn recipes() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [workspace().join("recipes"), workspace().join("builder/tests/fixtures/check")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") && stackbuild_recipe::Recipe::load(&path).is_ok()
            {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn check_jsonschema() -> Option<PathBuf> {
    let bin = workspace().join("target/sbom-validators/bin/check-jsonschema");
    bin.is_file().then_some(bin)
}

/// Whether taplo runs (its npm build exits 1 after printing `--version`, so the output tells).
fn taplo() -> bool {
    Command::new("taplo")
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).starts_with("taplo "))
}

#[test]
fn every_recipe_validates_and_a_misspelt_field_does_not() {
    let schema = workspace().join("recipes/recipe.schema.json");
    let recipes = recipes();
    assert!(recipes.len() >= 10, "{recipes:?}");
    for recipe in recipes.iter().filter(|r| r.starts_with(workspace().join("recipes"))) {
        let text = std::fs::read_to_string(recipe).unwrap();
        assert!(
            text.starts_with("#:schema ./recipe.schema.json\n"),
            "{}: no #:schema line",
            recipe.display()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "#:schema {}\n[image]\nname = \"x\"\nnmae = \"y\"\n[base]\nscratch = true\n",
            schema.display()
        ),
    )
    .unwrap();
    let mut ran = 0;
    if let Some(bin) = check_jsonschema() {
        let out = Command::new(&bin).arg("--schemafile").arg(&schema).args(&recipes).output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(&bin).arg("--schemafile").arg(&schema).arg(&bad).output().unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("'nmae' was unexpected"));
        ran += 1;
    } else {
        eprintln!("SKIPPED: check-jsonschema is not in target/sbom-validators (.ci/install puts it there)");
    }
    if taplo() {
        for recipe in &recipes {
            // The fixtures carry no #:schema line: the schema is given.
            let out = Command::new("taplo")
                .args(["check", "--schema"])
                .arg(format!("file://{}", schema.display()))
                .arg(recipe)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "taplo check {}: {}",
                recipe.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The #:schema line alone is enough, as in an editor.
        let out = Command::new("taplo").arg("check").arg(&bad).output().unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("nmae"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    } else {
        eprintln!("SKIPPED: taplo is not installed (.ci/install installs @taplo/cli with npm)");
    }
    eprintln!("{} recipes validated by {ran} validator(s)", recipes.len());
}
