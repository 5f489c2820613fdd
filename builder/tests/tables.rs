//! `stackbuild tables torch`: the checked-in torch table is what the generator makes of the
//! index's metadata. Offline against the recording in `fixtures/index/torch` (what the index
//! served when the table was last generated: PEP 691 pages reduced to the files consulted, and
//! the header part of each wheel's `METADATA`); live against the machine's configured index
//! where it answers, reading metadata only.

use std::path::{Path, PathBuf};
use std::process::Command;

fn recorded() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/index/torch")
}

fn table() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../contract/kb/torch.toml")
}

fn tables(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .args(["tables", "torch"])
        .args(args)
        .env("STACKBUILD_LOG", "warn")
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_torch_table_is_what_the_generator_makes_of_the_recorded_metadata() {
    let (code, out, err) = tables(&["--index", path(&recorded()), "--table", path(&table()), "--check"]);
    assert_eq!(
        code, 0,
        "contract/kb/torch.toml differs from what `stackbuild tables torch` makes of the recorded \
         metadata; regenerate it (stackbuild tables torch --index builder/tests/fixtures/index/torch):\n{out}{err}"
    );
    assert!(out.contains("the table matches"), "{out}");
    let releases: usize = out.split_whitespace().find_map(|w| w.parse().ok()).unwrap();
    assert!(releases >= 28, "{out}");
}

#[test]
fn a_hand_edit_the_metadata_contradicts_is_caught_and_regenerated() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("torch.toml");
    let original = std::fs::read_to_string(table()).unwrap();
    // The audit's wrong row, put back: 2.9.1's PyPI build pins cuDNN 9.10.2.21, and a typed
    // table said otherwise.
    let start = original.find("version = \"2.9.1\"").unwrap();
    let at = start + original[start..].find("pypi = true").unwrap();
    let line_start = original[..at].rfind("cudnn = \"").unwrap();
    let mut edited = original.clone();
    let line_end = line_start + edited[line_start..].find('\n').unwrap();
    edited.replace_range(line_start..line_end, "cudnn = \"9.1.0.70\"");
    std::fs::write(&copy, &edited).unwrap();
    let (code, out, _) = tables(&["--index", path(&recorded()), "--table", path(&copy), "--check"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("2.9.1 cu128: cudnn \"9.1.0.70\" -> \"9.10.2.21\""), "{out}");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), edited, "--check writes nothing");
    let (code, out, err) = tables(&["--index", path(&recorded()), "--table", path(&copy)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), original);
}

#[test]
fn a_file_that_is_not_a_torch_table_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("notes.toml");
    std::fs::write(&other, "title = \"mine\"\n").unwrap();
    let (code, _, err) = tables(&["--index", path(&recorded()), "--table", path(&other)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("notes.toml") && err.contains("[[release]]"), "{err}");
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "title = \"mine\"\n");
}

/// The machine's configured index (pip's and uv's), read for metadata only: the releases the
/// table has must be what the index says today. New releases are listed, not failed: adding them
/// is a maintainer's regeneration.
#[test]
fn the_configured_index_agrees_with_the_table_on_every_release_the_table_has() {
    let rec = tempfile::tempdir().unwrap();
    let (code, out, err) =
        tables(&["--table", path(&table()), "--check", "--known-only", "--record", path(rec.path())]);
    if code == 2 && (err.contains("Connection") || err.contains("Dns") || err.contains("configured index")) {
        eprintln!("SKIPPED: the configured index does not answer here: {err}");
        return;
    }
    for line in out.lines().filter(|l| l.contains("not in the table")) {
        eprintln!("note: {line}");
    }
    assert_eq!(code, 0, "the live index disagrees with contract/kb/torch.toml:\n{out}{err}");
}
