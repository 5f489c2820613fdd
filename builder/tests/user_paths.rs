//! Every path a user gives is theirs (issue 12, part A): `--out`, `--archive`, `--report`,
//! `--cache-dir` / `STACKBUILD_CACHE`, `[[python.wheel]] path`, `SOURCE_DATE_EPOCH`. A build
//! writes into a new or empty directory or an existing OCI layout, replaces only a regular file,
//! keeps its temporary files in names of its own, uses and cleans only a directory marked as its
//! cache, and hands uv paths as data. Each case runs the real binary on a scratch recipe (a
//! build takes well under a second); the wheel case needs uv and is skipped without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

const STACKBUILD: &str = env!("CARGO_BIN_EXE_stackbuild");

/// A project directory: a scratch recipe with one local source, built into `images/`.
struct Project {
    tmp: tempfile::TempDir,
}

impl Project {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("data")).unwrap();
        std::fs::write(tmp.path().join("data/README"), "user-paths test data\n").unwrap();
        let p = Self { tmp };
        p.recipe("a", "");
        p
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Writes `r.toml` with image tag `tag` and `extra` TOML appended.
    fn recipe(&self, tag: &str, extra: &str) -> PathBuf {
        let path = self.path("r.toml");
        std::fs::write(
            &path,
            format!(
                "[image]\nname = \"userpaths\"\ntag = \"{tag}\"\n\n[base]\nscratch = true\n\n\
                 [[source]]\nname = \"data\"\npath = \"data\"\ndest = \"/data\"\n{extra}"
            ),
        )
        .unwrap();
        path
    }

    /// `stackbuild ARGS` in the project directory, with a fixed epoch and no cache from the
    /// environment.
    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(STACKBUILD);
        cmd.args(args)
            .current_dir(self.tmp.path())
            .env("SOURCE_DATE_EPOCH", "0")
            .env("NO_COLOR", "1")
            .env_remove("STACKBUILD_CACHE")
            .env("TMPDIR", self.tmp.path());
        cmd
    }

    /// `stackbuild r.toml --cache-dir cache --out OUT EXTRA...`.
    fn build(&self, out: &str, extra: &[&str]) -> Output {
        let mut args = vec!["r.toml", "--cache-dir", "cache", "--out", out];
        args.extend_from_slice(extra);
        self.run(&args)
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "stackbuild failed:\n{}", stderr(out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Asserts a refusal (exit 2, no digest) whose message has every one of `parts`.
fn refused(out: &Output, parts: &[&str]) -> String {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(2), "not refused:\n{text}");
    assert!(out.stdout.is_empty(), "printed a digest: {}", String::from_utf8_lossy(&out.stdout));
    for part in parts {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
    text
}

/// Every file under `dir` (relative path, content), sorted.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else {
                let content = if meta.is_file() { std::fs::read(&path).unwrap() } else { Vec::new() };
                files.push((path.strip_prefix(dir).unwrap().to_owned(), content));
            }
        }
    }
    files.sort();
    files
}

fn set_old(path: &Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_hours(5);
    std::fs::File::open(path).unwrap().set_modified(old).unwrap();
}

#[test]
fn out_onto_a_directory_of_user_files_is_refused_and_kept() {
    let p = Project::new();
    let user = p.path("thesis");
    std::fs::create_dir_all(user.join("chapters")).unwrap();
    std::fs::write(user.join("thesis.tex"), "five years of work").unwrap();
    std::fs::write(user.join("chapters/one.tex"), "chapter one").unwrap();
    let before = snapshot(&user);
    let out = p.build("thesis", &[]);
    refused(&out, &["--out thesis", "not an OCI image layout", "thesis.tex", "nothing was changed"]);
    assert_eq!(snapshot(&user), before);
    // Nothing moved aside next to it either.
    let mut names: Vec<_> = std::fs::read_dir(p.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.iter().all(|n| !n.starts_with(".thesis")), "{names:?}");
}

#[test]
fn out_onto_a_file_a_symlink_or_a_broken_layout_is_refused() {
    let p = Project::new();
    std::fs::write(p.path("image.oci"), "my notes").unwrap();
    refused(&p.build("image.oci", &[]), &["--out image.oci", "a regular file is there"]);
    assert_eq!(std::fs::read_to_string(p.path("image.oci")).unwrap(), "my notes");

    std::fs::create_dir(p.path("elsewhere")).unwrap();
    std::os::unix::fs::symlink("elsewhere", p.path("link")).unwrap();
    refused(&p.build("link", &[]), &["--out link", "a symlink to elsewhere"]);
    assert_eq!(std::fs::read_dir(p.path("elsewhere")).unwrap().count(), 0);

    // A layout whose blobs directory leads elsewhere would write outside it.
    let layout = p.path("layout");
    std::fs::create_dir(&layout).unwrap();
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    std::fs::write(layout.join("index.json"), r#"{"schemaVersion":2,"manifests":[]}"#).unwrap();
    std::os::unix::fs::symlink("../elsewhere", layout.join("blobs")).unwrap();
    refused(&p.build("layout", &[]), &["--out layout", "its blobs is not a directory"]);
    assert_eq!(std::fs::read_dir(p.path("elsewhere")).unwrap().count(), 0);

    // A device or FIFO is refused as well, and so is a report path that is a directory, before
    // anything is built.
    refused(&p.build("/dev/null", &[]), &["a character device is there"]);
    std::fs::create_dir(p.path("reports")).unwrap();
    refused(&p.build("new", &["--report", "reports"]), &["--report reports", "a directory is there"]);
    assert!(!p.path("new").exists());
}

#[test]
fn a_new_or_empty_directory_becomes_a_layout() {
    let p = Project::new();
    let digest = ok(&p.build("images/deep/new", &[]));
    assert_eq!(read_tag(&p.path("images/deep/new"), "a"), digest);
    std::fs::create_dir(p.path("empty")).unwrap();
    assert_eq!(ok(&p.build("empty", &[])), digest);
    // No temporary name is left next to the outputs.
    for dir in [p.path("images/deep"), p.tmp.path().to_owned()] {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().into_string().unwrap();
            assert!(!name.contains("stackbuild-tmp"), "{name} left behind");
        }
    }
}

fn read_tag(layout: &Path, tag: &str) -> String {
    stackbuild_image::read_layout(layout, Some(tag)).unwrap().manifest_digest
}

#[test]
fn a_second_tag_keeps_the_first_its_blobs_and_other_files() {
    let p = Project::new();
    let first = ok(&p.build("img", &[]));
    let first_blobs = snapshot(&p.path("img/blobs"));
    std::fs::write(p.path("img/NOTES.txt"), "the user's note in the layout").unwrap();
    std::fs::write(p.path("data/README"), "changed data\n").unwrap();
    p.recipe("b", "");
    let second = ok(&p.build("img", &[]));
    assert_ne!(first, second);
    assert_eq!(read_tag(&p.path("img"), "a"), first, "the first tag is gone");
    assert_eq!(read_tag(&p.path("img"), "b"), second);
    let blobs = snapshot(&p.path("img/blobs"));
    for blob in &first_blobs {
        assert!(blobs.contains(blob), "the first tag's blob {} is gone or changed", blob.0.display());
    }
    for tag in ["a", "b"] {
        for layer in stackbuild_image::read_layout(&p.path("img"), Some(tag)).unwrap().layers {
            stackbuild_image::verify_layout_blob(&layer).unwrap();
        }
    }
    assert_eq!(std::fs::read_to_string(p.path("img/NOTES.txt")).unwrap(), "the user's note in the layout");
    // Rebuilding tag b replaces only b.
    std::fs::write(p.path("data/README"), "changed again\n").unwrap();
    let third = ok(&p.build("img", &[]));
    assert_eq!(read_tag(&p.path("img"), "a"), first);
    assert_eq!(read_tag(&p.path("img"), "b"), third);
}

#[test]
fn an_archive_replaces_only_its_own_file() {
    let p = Project::new();
    std::fs::write(p.path("x.tmp"), "unrelated user file").unwrap();
    std::fs::write(p.path("x.tar"), "an older archive the user asked to replace").unwrap();
    ok(&p.build("img", &["--archive", "x.tar"]));
    assert_eq!(std::fs::read_to_string(p.path("x.tmp")).unwrap(), "unrelated user file");
    let tar = std::fs::read(p.path("x.tar")).unwrap();
    assert!(tar.windows(10).any(|w| w == b"index.json"), "x.tar is not the image archive");
    let leftovers: Vec<_> = std::fs::read_dir(p.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("stackbuild-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A directory, a symlink or a device at the archive's name is refused before the build.
    std::fs::create_dir(p.path("d.tar")).unwrap();
    std::fs::write(p.path("d.tar/keep"), "x").unwrap();
    refused(&p.build("img2", &["--archive", "d.tar"]), &["--archive d.tar", "a directory is there"]);
    assert!(p.path("d.tar/keep").is_file() && !p.path("img2").exists());
    std::os::unix::fs::symlink("x.tmp", p.path("l.tar")).unwrap();
    refused(&p.build("img2", &["--archive", "l.tar"]), &["a symlink to x.tmp is there"]);
    assert_eq!(std::fs::read_to_string(p.path("x.tmp")).unwrap(), "unrelated user file");
    refused(&p.build("same", &["--archive", "same"]), &["the --out directory of the same build"]);
    // A missing directory is named as the user wrote it, not by a temporary name.
    let out = p.build("img3", &["--archive", "no/such/x.tar"]);
    let text = stderr(&out);
    assert!(
        !out.status.success() && text.contains("no/such/x.tar") && !text.contains("stackbuild-tmp"),
        "{text}"
    );
}

#[test]
fn a_cache_dir_that_is_not_a_cache_is_refused_and_untouched() {
    let p = Project::new();
    // Stands in for `--cache-dir /` (and `$HOME`): other programs' files, and a `tmp` whose old
    // entries a cache cleaner would remove.
    let root = p.path("fake-root");
    std::fs::create_dir_all(root.join("tmp/stage-abcdef")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0").unwrap();
    for name in ["4242-000000001-0.tmp", "x11-socket", "session.lock"] {
        std::fs::write(root.join("tmp").join(name), "someone else's").unwrap();
        set_old(&root.join("tmp").join(name));
    }
    set_old(&root.join("tmp/stage-abcdef"));
    let before = snapshot(&root);
    for how in ["--cache-dir", "STACKBUILD_CACHE"] {
        let out = if how == "--cache-dir" {
            p.run(&["r.toml", "--cache-dir", "fake-root", "--out", "img"])
        } else {
            p.command(&["r.toml", "--out", "img"]).env("STACKBUILD_CACHE", &root).output().unwrap()
        };
        refused(&out, &["is not a stackbuild cache", "\"etc\"", ".stackbuild-cache", "nothing was changed"]);
        assert_eq!(snapshot(&root), before, "{how}: the directory was changed");
        assert!(!p.path("img").exists());
    }
    // `stackbuild lock` opens the cache the same way; `check` does not read it as one.
    refused(&p.run(&["lock", "r.toml", "--cache-dir", "fake-root"]), &["is not a stackbuild cache"]);
    assert_eq!(snapshot(&root), before);

    // A file as the cache: refused by what it is.
    std::fs::write(p.path("cachefile"), "x").unwrap();
    refused(&p.run(&["r.toml", "--cache-dir", "cachefile", "--out", "img"]), &["a regular file"]);
}

#[test]
fn a_cache_is_marked_and_cleans_only_its_own_names() {
    let p = Project::new();
    ok(&p.build("img", &[]));
    let cache = p.path("cache");
    assert!(cache.join(".stackbuild-cache").is_file());
    let tag = std::fs::read_to_string(cache.join("CACHEDIR.TAG")).unwrap();
    assert!(tag.starts_with("Signature: 8a477f597d28d172789f06886806bc55"), "{tag}");
    // A user's file that ended up in the cache's tmp is not the cache's to remove; a stale
    // temporary file of a killed build is.
    let foreign = cache.join("tmp/important.txt");
    let stale = cache.join("tmp/4242-000000001-0.tmp");
    std::fs::write(&foreign, "keep").unwrap();
    std::fs::write(&stale, "partial").unwrap();
    set_old(&foreign);
    set_old(&stale);
    ok(&p.build("img", &[]));
    assert!(foreign.is_file() && !stale.exists());
}

#[test]
fn a_relative_cache_dir_works_with_a_git_source() {
    let p = Project::new();
    let repo = p.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("model.py"), "print('model')\n").unwrap();
    let git = |args: &[&str]| common::git(&repo, args);
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "model"]);
    let commit = git(&["rev-parse", "HEAD"]);
    p.recipe(
        "a",
        &format!(
            "\n[[source]]\nname = \"model\"\ngit = \"file://{}\"\ncommit = \"{commit}\"\ndest = \"/model\"\n",
            repo.display()
        ),
    );
    std::fs::create_dir(p.path("work")).unwrap();
    let out = p
        .command(&["../r.toml", "--cache-dir", "../rel-cache", "--out", "../img"])
        .current_dir(p.path("work"))
        .output()
        .unwrap();
    let digest = ok(&out);
    assert_eq!(read_tag(&p.path("img"), "a"), digest);
    assert!(p.path("rel-cache/.stackbuild-cache").is_file());
}

#[test]
fn a_control_character_in_a_wheel_path_is_refused_without_leaking() {
    let p = Project::new();
    let secret = p.path("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-LINE\n").unwrap();
    let wheel = |path: &str| {
        format!(
            "\n[python]\nversion = \"3.11\"\npackages = []\n\n[[python.wheel]]\npath = \"{path}\"\n",
            path = path.replace('\n', "\\n").replace('\r', "\\r")
        )
    };
    for path in [
        format!("w/x\n-r {}\n/demo_pkg-1.0-py3-none-any.whl", secret.display()),
        format!("w/x\r-c {}/demo_pkg-1.0-py3-none-any.whl", secret.display()),
    ] {
        p.recipe("a", &wheel(&path));
        for args in [
            &["check", "r.toml"][..],
            &["lock", "r.toml", "--cache-dir", "cache"],
            &["r.toml", "--cache-dir", "cache"],
        ] {
            let out = p.run(args);
            let text = refused(&out, &["r.toml:18:8", "control character"]);
            assert!(!text.contains("TOP-SECRET"), "{args:?} leaked the file:\n{text}");
            assert!(!String::from_utf8_lossy(&out.stdout).contains("TOP-SECRET"));
        }
    }
    // The class, not the instance: PEP 508 lets a marker string hold a newline, so any
    // requirement could carry a line of uv options; none reaches uv's requirements file.
    let marker = format!("platform_release == \"6\\n-r {}\"", secret.display());
    for (key, value) in
        [("packages", format!("six==1.16.0 ; {marker}")), ("constraints", format!("six ; {marker}"))]
    {
        let other = if key == "packages" { "constraints = []" } else { "packages = [\"six==1.16.0\"]" };
        let toml_value = value.replace('"', "\\\"");
        p.recipe("a", &format!("\n[python]\nversion = \"3.11\"\n{key} = [\"{toml_value}\"]\n{other}\n"));
        for args in [&["check", "r.toml"][..], &["lock", "r.toml", "--cache-dir", "cache"]] {
            let out = p.run(args);
            let text = stderr(&out);
            assert!(!out.status.success(), "{args:?} {key}: accepted:\n{text}");
            assert!(text.contains("control character"), "{args:?} {key}:\n{text}");
            assert!(!text.contains("TOP-SECRET"), "{args:?} {key} leaked the file:\n{text}");
        }
    }
}

/// A minimal pure-Python wheel of `demo-pkg` 1.0 at `path`.
fn write_demo_wheel(path: &Path) {
    let init = ("demo_pkg/__init__.py".to_owned(), b"NAME = 'demo'\n".to_vec());
    test_support::wheel::pure_wheel(path, "demo-pkg", "1.0", vec![init]);
}

#[test]
fn wheel_paths_with_a_space_and_a_hash_work() {
    let uv = Command::new("uv").arg("--version").output().is_ok_and(|o| o.status.success());
    if !uv {
        eprintln!("skipped: needs uv (run .ci/install)");
        return;
    }
    let p = Project::new();
    write_demo_wheel(&p.path("my wheels #1/demo_pkg-1.0-py3-none-any.whl"));
    p.recipe(
        "a",
        "\n[python]\nversion = \"3.11\"\npackages = []\n\n[[python.wheel]]\npath = \"my wheels #1/demo_pkg-1.0-py3-none-any.whl\"\n",
    );
    let lock = p.run(&["lock", "r.toml", "--cache-dir", "cache"]);
    assert!(lock.status.success(), "{}", stderr(&lock));
    let text = std::fs::read_to_string(p.path("r.toml.lock")).unwrap();
    assert!(text.contains("demo-pkg") || text.contains("demo_pkg"), "{text}");
    let digest = ok(&p.build("img", &["--locked", "--report", "report.json"]));
    assert_eq!(read_tag(&p.path("img"), "a"), digest);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.path("report.json")).unwrap()).unwrap();
    let names: Vec<_> =
        report["layers"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"python"), "{names:?}");
}

#[test]
fn source_date_epoch_beyond_year_9999_is_refused() {
    let p = Project::new();
    for (value, said) in [
        ("18446744073709551615", "is after 9999-12-31T23:59:59Z"),
        ("253402300800", "is after 9999-12-31T23:59:59Z"),
        ("99999999999999999999999", "is after 9999-12-31T23:59:59Z"),
        ("-1", "is not a non-negative integer"),
        ("1e9", "is not a non-negative integer"),
    ] {
        let out = p
            .command(&["r.toml", "--cache-dir", "cache", "--out", "img"])
            .env("SOURCE_DATE_EPOCH", value)
            .output()
            .unwrap();
        refused(&out, &[said]);
        assert!(!p.path("img").exists(), "{value}: an image was written");
    }
    // The last second RFC 3339 can write is fine.
    let out = p
        .command(&["r.toml", "--cache-dir", "cache", "--out", "img"])
        .env("SOURCE_DATE_EPOCH", "253402300799")
        .output()
        .unwrap();
    ok(&out);
    let image = stackbuild_image::read_layout(&p.path("img"), Some("a")).unwrap();
    assert_eq!(image.config.created.as_deref(), Some("9999-12-31T23:59:59Z"));
}
