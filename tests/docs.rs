//! The man pages and completions both programs generate from their clap definitions
//! (`generate-docs`), checked by the tools that read them: groff with every warning on (what
//! lintian's `groff-message` check runs), `mandoc -Tlint`, and the shells' own parsers. Each
//! tool that is not installed is reported as skipped.

use std::path::Path;
use std::process::Command;

use e2e::{binary, have, text};

/// The visible subcommands of `program`, from its `--help`.
fn subcommands(program: &str) -> Vec<String> {
    let out = Command::new(binary(program)).arg("--help").output().unwrap();
    let help = text(&out.stdout);
    let commands = help.split("Commands:").nth(1).unwrap().split("\n\n").next().unwrap();
    commands
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

fn generate(program: &str, dir: &Path) -> Vec<String> {
    let out = Command::new(binary(program)).arg("generate-docs").arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn every_subcommand_has_a_page_an_example_and_completions_that_parse() {
    for program in ["stackbuild", "stackhook"] {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(program, dir.path());
        let help = text(&Command::new(binary(program)).arg("--help").output().unwrap().stdout);
        let examples = help.split("Examples:").nth(1).unwrap_or_default();
        for sub in subcommands(program) {
            let page = dir.path().join(format!("man/{program}-{sub}.1"));
            assert!(page.is_file(), "{program} {sub}: no page in {files:?}");
            assert!(
                examples.lines().any(|l| l.contains(&format!("{program} {sub}"))) || sub == "build",
                "{program} --help has no example of {sub}:\n{examples}"
            );
        }
        assert!(
            !dir.path().join(format!("man/{program}-generate-docs.1")).exists(),
            "the hidden command has no page"
        );
        for page in std::fs::read_dir(dir.path().join("man")).unwrap() {
            let page = page.unwrap().path();
            if have("groff") {
                let out = Command::new("groff").args(["-man", "-ww", "-z"]).arg(&page).output().unwrap();
                assert!(
                    out.status.success() && out.stderr.is_empty(),
                    "{}: {}",
                    page.display(),
                    text(&out.stderr)
                );
            }
            if have("mandoc") {
                let out = Command::new("mandoc").args(["-Tlint", "-W", "error"]).arg(&page).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}: {}{}",
                    page.display(),
                    text(&out.stdout),
                    text(&out.stderr)
                );
            }
        }
        for (shell, file) in [
            ("bash", format!("{program}.bash")),
            ("zsh", format!("_{program}")),
            ("fish", format!("{program}.fish")),
        ] {
            let path = dir.path().join("completions").join(file);
            assert!(path.is_file(), "{}", path.display());
            if have(shell) {
                let out = Command::new(shell).arg("-n").arg(&path).output().unwrap();
                assert!(out.status.success(), "{shell} -n {}: {}", path.display(), text(&out.stderr));
            } else {
                eprintln!("SKIPPED: {shell} is not installed; {} not parsed", path.display());
            }
        }
        if !have("groff") || !have("mandoc") {
            eprintln!("SKIPPED: groff or mandoc is not installed; the pages were not linted");
        }
        // The bash completion completes the subcommands.
        if have("bash") {
            let script = format!(
                "source {}; COMP_WORDS=({program} ''); COMP_CWORD=1; _{program} {program} '' {program}; echo \"${{COMPREPLY[@]}}\"",
                dir.path().join(format!("completions/{program}.bash")).display()
            );
            let out = Command::new("bash").arg("-c").arg(&script).output().unwrap();
            let words = text(&out.stdout);
            for sub in subcommands(program) {
                assert!(
                    words.split_whitespace().any(|w| w == sub),
                    "{program} completion lacks {sub}: {words}"
                );
            }
        }
    }
}

#[test]
fn a_page_that_is_not_ours_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("man")).unwrap();
    let mine = dir.path().join("man/stackbuild-check.1");
    std::fs::write(&mine, ".TH MINE 1\n").unwrap();
    let out = Command::new(binary("stackbuild")).arg("generate-docs").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("stackbuild-check.1"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), ".TH MINE 1\n");
    // Regenerating over our own files is fine.
    let fresh = tempfile::tempdir().unwrap();
    generate("stackbuild", fresh.path());
    generate("stackbuild", fresh.path());
}
