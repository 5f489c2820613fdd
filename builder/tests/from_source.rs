//! Packages with no wheel, end to end: a Debian bookworm base by mmdebstrap and three packages
//! from the machine's index: `docopt` (a pure-Python sdist), `evdev` (a C extension whose build
//! needs the kernel's input headers, from `linux-libc-dev` in the build root and absent from the
//! image) and `six` (a wheel). The lock records the two sdists; the build compiles them in the
//! sandbox on the build root; the image imports them under runc; a second build compiles nothing;
//! a second cache builds the same Python layer.

use std::path::{Path, PathBuf};

mod common;
use common::{
    build_ok as build, debian_builds_ready, have, runc_output, unpack_bundle, Built, BOOKWORM_PYTHON,
};

fn recipe(dir: &Path) -> PathBuf {
    let path = dir.join("from-source.toml");
    std::fs::write(
        &path,
        format!(
            "[image]\nname = \"from-source\"\ntag = \"test\"\ncmd = [\"python3\"]\n\n{BOOKWORM_PYTHON}\n\
             [python]\nversion = \"3.11\"\npackages = [\"docopt==0.6.2\", \"evdev==1.7.1\", \"six==1.16.0\"]\n"
        ),
    )
    .unwrap();
    path
}

/// The image of `layout` (tag `test`) unpacked into `dir/bundle`; `None` (said) without umoci.
fn unpacked(layout: &Path, dir: &Path) -> Option<PathBuf> {
    if !have("umoci") {
        eprintln!("skipped the image check: umoci not installed");
        return None;
    }
    let bundle = dir.join("bundle");
    unpack_bundle(layout, "test", &bundle);
    Some(bundle)
}

fn layer(b: &Built, name: &str) -> serde_json::Value {
    b.report["layers"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap()["digest"].clone()
}

#[test]
fn sdists_are_locked_built_in_the_sandbox_and_imported_in_the_image() {
    if !debian_builds_ready(&["bwrap", "prlimit"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let recipe = recipe(tmp.path());
    let layout = tmp.path().join("layout");
    // A registry as the shared cache, when one can be started: a second machine pulls the built
    // wheels instead of compiling them.
    let registry = test_support::registry::Registry::start(None);
    let flag = registry.as_ref().map(|r| format!("{}/team/wheels", r.addr));
    let shared: Vec<&str> = flag.as_deref().map(|f| vec!["--cache-registry", f]).unwrap_or_default();
    let first = build(&recipe, &tmp.path().join("cache"), &layout, &shared);
    let err = String::from_utf8_lossy(&first.out.stderr);
    assert!(err.contains("docopt 0.6.2: no wheel for cp311"), "{err}");
    assert!(err.contains("evdev 1.7.1: built evdev-1.7.1-cp311-cp311-linux_x86_64.whl"), "{err}");
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains("filename = \"docopt-0.6.2.tar.gz\""), "{lock}");
    assert!(lock.contains("filename = \"evdev-1.7.1.tar.gz\""), "{lock}");

    // The same recipe again: every wheel comes from the cache of built wheels.
    let again = build(&recipe, &tmp.path().join("cache"), &tmp.path().join("layout-again"), &["--locked"]);
    let err = String::from_utf8_lossy(&again.out.stderr);
    assert!(!err.contains("building a wheel"), "a second build compiles nothing: {err}");
    assert!(err.contains("evdev 1.7.1: built before"), "{err}");
    assert_eq!(again.digest, first.digest);

    // One pin changed beside them: the sdists are taken from their sources at once, as the lock
    // before had them (uv runs once, not once per package found without a wheel), and their
    // build environments are kept; nothing is compiled.
    let changed = tmp.path().join("from-source-changed.toml");
    std::fs::write(&changed, std::fs::read_to_string(&recipe).unwrap().replace("six==1.16.0", "six==1.17.0"))
        .unwrap();
    std::fs::copy(recipe.with_extension("toml.lock"), changed.with_extension("toml.lock")).unwrap();
    let moved = build(&changed, &tmp.path().join("cache"), &tmp.path().join("layout-changed"), &[]);
    let err = String::from_utf8_lossy(&moved.out.stderr);
    for line in [
        "docopt 0.6.2: from source, as in the lock before",
        "evdev 1.7.1: from source, as in the lock before",
        "evdev 1.7.1: build environment as locked before",
        "evdev 1.7.1: built before",
    ] {
        assert!(err.contains(line), "{line}: {err}");
    }
    assert!(!err.contains("no wheel for cp311") && !err.contains("building a wheel"), "{err}");
    let relocked = std::fs::read_to_string(changed.with_extension("toml.lock")).unwrap();
    assert!(relocked.contains("filename = \"six-1.17.0-py2.py3-none-any.whl\""), "{relocked}");
    let files = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("filename = ") && !l.contains("six-"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(files(&relocked), files(&lock), "only six moved:\n{relocked}");

    // A second cache: the same wheels, byte for byte, so the same Python layer.
    let other = build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("layout2"), &["--locked"]);
    assert_eq!(layer(&other, "python"), layer(&first, "python"), "two caches: one Python layer");
    let err = String::from_utf8_lossy(&other.out.stderr);
    assert!(
        err.contains("evdev 1.7.1: building a wheel"),
        "a fresh cache without a registry compiles: {err}"
    );

    // A third, empty cache with the registry: every wheel comes from it, nothing is compiled.
    if flag.is_some() {
        let mut args = shared.clone();
        args.push("--locked");
        let pulled = build(&recipe, &tmp.path().join("cache3"), &tmp.path().join("layout3"), &args);
        let err = String::from_utf8_lossy(&pulled.out.stderr);
        assert!(!err.contains("building a wheel"), "an empty cache pulls the built wheels: {err}");
        assert!(err.contains("evdev 1.7.1: built before, shared through the cache"), "{err}");
        assert_eq!(pulled.digest, first.digest);
    } else {
        eprintln!("skipped the shared-cache half: no docker-registry (run .ci/install)");
    }

    if !have("umoci") || !have("runc") {
        eprintln!("skipped the container half: umoci or runc not installed");
        return;
    }
    let bundle = tmp.path().join("bundle");
    unpack_bundle(&layout, "test", &bundle);
    let rootfs = bundle.join("rootfs");
    for absent in ["usr/bin/gcc", "usr/include/linux/input.h", "usr/include/python3.11/Python.h"] {
        assert!(!rootfs.join(absent).exists(), "/{absent}: nothing of the build root is in the image");
    }
    let printed = runc_output(
        &bundle,
        "stackbuild-from-source",
        &[
            "python3",
            "-c",
            "import docopt, evdev.ecodes as e, six; print(docopt.__version__, e.EV_KEY, e.ecodes['KEY_A'])",
        ],
    );
    assert_eq!(printed, "0.6.2 1 30");
}

/// A git dependency pinned by tag: the lock pins the tag's commit and the tar stackbuild makes of
/// it; the package and its dependency (`six`, from its metadata) are in the image; a second,
/// empty cache makes the same tar from the commit, byte for byte.
#[test]
fn a_git_dependency_is_pinned_to_its_commit_and_built_from_it() {
    if !debian_builds_ready(&["bwrap", "prlimit", "git"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("sbgit");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join("pyproject.toml"),
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
         [project]\nname = \"sbgit\"\nversion = \"1.2.3\"\ndependencies = [\"six==1.16.0\"]\n\n\
         [tool.setuptools]\npy-modules = [\"sbgit\"]\n",
    )
    .unwrap();
    std::fs::write(repo.join("sbgit.py"), "import six\nVALUE = 'from git'\n").unwrap();
    // A second project in a subdirectory of the same repository (`#subdirectory=`), as
    // monorepos keep their clients (openpi's `packages/openpi-client`).
    let client = repo.join("packages/client");
    std::fs::create_dir_all(&client).unwrap();
    std::fs::write(
        client.join("pyproject.toml"),
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
         [project]\nname = \"sbclient\"\nversion = \"0.1.0\"\n\n[tool.setuptools]\npy-modules = [\"sbclient\"]\n",
    )
    .unwrap();
    std::fs::write(client.join("sbclient.py"), "VALUE = 'from a subdirectory'\n").unwrap();
    test_support::tools::git(&repo, &["init", "-q"]);
    test_support::tools::git(&repo, &["add", "."]);
    test_support::tools::git(
        &repo,
        &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "v1"],
    );
    test_support::tools::git(&repo, &["tag", "v1.2.3"]);
    let commit = test_support::tools::git(&repo, &["rev-parse", "HEAD"]);
    let recipe = tmp.path().join("git-dep.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"git-dep\"\ntag = \"test\"\n\n{BOOKWORM_PYTHON}\n[python]\nversion = \"3.11\"\n\
             packages = [\"sbgit @ git+file://{0}@v1.2.3\", \"sbclient @ git+file://{0}@v1.2.3#subdirectory=packages/client\"]\n",
            repo.display()
        ),
    )
    .unwrap();
    let layout = tmp.path().join("layout");
    let first = build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains(&format!("commit = \"{}\"", commit.trim())), "{lock}");
    assert!(lock.contains("filename = \"sbgit-1.2.3.tar.gz\""), "{lock}");
    assert!(lock.contains("name = \"six\""), "its dependencies come from its metadata: {lock}");
    assert!(lock.contains("filename = \"sbclient-0.1.0.tar.gz\""), "{lock}");
    let other = build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("layout2"), &["--locked"]);
    assert_eq!(layer(&other, "python"), layer(&first, "python"), "the same tar, the same wheel");
    let Some(bundle) = unpacked(&layout, tmp.path()) else { return };
    let site = bundle.join("rootfs/usr/local/lib/python3.11/dist-packages");
    assert_eq!(std::fs::read_to_string(site.join("sbgit.py")).unwrap(), "import six\nVALUE = 'from git'\n");
    assert!(site.join("six.py").is_file());
    assert_eq!(std::fs::read_to_string(site.join("sbclient.py")).unwrap(), "VALUE = 'from a subdirectory'\n");
    assert!(!site.join("packages").exists());
}

/// A setuptools project `sbhello` (a console script, a dependency on six) in `dir/hello`, and a
/// recipe installing it with `install`; returns both paths.
fn hello_project(dir: &std::path::Path, install: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let project = dir.join("hello");
    std::fs::create_dir_all(project.join("sbhello")).unwrap();
    std::fs::write(
        project.join("pyproject.toml"),
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
         [project]\nname = \"sbhello\"\nversion = \"0.3.0\"\ndependencies = [\"six==1.16.0\"]\n\n\
         [project.scripts]\nsbhello = \"sbhello:main\"\n",
    )
    .unwrap();
    std::fs::write(
        project.join("sbhello/__init__.py"),
        "import sys, six\ndef main():\n    print('sbhello 0.3.0 with six', six.__version__, sys.argv[1:])\n",
    )
    .unwrap();
    let recipe = dir.join("project.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"project\"\ntag = \"test\"\n\n{BOOKWORM_PYTHON}\n[python]\nversion = \"3.11\"\n\
             packages = []\n\n[[source]]\nname = \"hello\"\npath = \"hello\"\ndest = \"/workspace/hello\"\n\
             install = \"{install}\"\n"
        ),
    )
    .unwrap();
    (project, recipe)
}

/// The project itself: a `[[source]]` path with `install = "wheel"` is built into a wheel in the
/// sandbox, its dependencies (from its metadata) resolved with the rest, its console script on
/// PATH in the image; the tree is also at `dest`. A tree changed after the lock is refused.
#[test]
fn a_source_installed_as_a_wheel_puts_its_console_script_on_path() {
    if !debian_builds_ready(&["bwrap", "prlimit"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (project, recipe) = hello_project(tmp.path(), "wheel");
    let layout = tmp.path().join("layout");
    build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains("filename = \"sbhello-0.3.0.tar.gz\""), "{lock}");
    assert!(lock.contains("source = \"hello\""), "{lock}");
    assert!(lock.contains("name = \"six\""), "{lock}");
    // Its build environment is locked too: what `[build-system] requires` resolved to.
    assert!(lock.contains("build_requires = [\"setuptools>=61\"]"), "{lock}");
    assert!(lock.contains("[[package.build]]\nname = \"setuptools\""), "{lock}");

    if have("umoci") && have("runc") {
        let bundle = tmp.path().join("bundle");
        unpack_bundle(&layout, "test", &bundle);
        assert!(bundle.join("rootfs/workspace/hello/pyproject.toml").is_file(), "the tree is at dest too");
        let printed = runc_output(&bundle, "stackbuild-project", &["sbhello", "--help"]);
        assert_eq!(printed, "sbhello 0.3.0 with six 1.16.0 ['--help']");
    } else {
        eprintln!("skipped the container half: umoci or runc not installed");
    }

    // The tree changed, the lock did not: an empty cache cannot make the locked file.
    std::fs::write(project.join("sbhello/extra.py"), "X = 1\n").unwrap();
    let stale =
        common::build(&recipe, &tmp.path().join("cache2"), &tmp.path().join("layout2"), &["--locked"]);
    assert!(!stale.out.status.success());
    let err = String::from_utf8_lossy(&stale.out.stderr);
    assert!(err.contains("[[source]] hello: its tree makes sbhello-0.3.0.tar.gz"), "{err}");
    assert!(err.contains("lock again"), "{err}");
}

/// `install = "editable"`: the backend's editable wheel (PEP 660), built with the project at
/// `dest`, so the image imports the tree at `dest` (no copy in site-packages) and the console
/// script runs from it; the same lock as a wheel install.
#[test]
fn a_source_installed_editable_imports_the_tree_at_dest() {
    if !debian_builds_ready(&["bwrap", "prlimit"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_project, recipe) = hello_project(tmp.path(), "editable");
    let layout = tmp.path().join("layout");
    build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains("source = \"hello\""), "{lock}");
    if !(have("umoci") && have("runc")) {
        eprintln!("skipped the container half: umoci or runc not installed");
        return;
    }
    let bundle = tmp.path().join("bundle");
    unpack_bundle(&layout, "test", &bundle);
    let site = bundle.join("rootfs/usr/local/lib/python3.11/dist-packages");
    assert!(!site.join("sbhello/__init__.py").exists(), "an editable install copied the package");
    let pth: Vec<String> = std::fs::read_dir(&site)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| std::path::Path::new(n).extension().is_some_and(|e| e == "pth") && n.contains("sbhello"))
        .collect();
    assert!(!pth.is_empty(), "no editable .pth in site-packages");
    let printed = runc_output(
        &bundle,
        "stackbuild-editable",
        &["python3", "-c", "import sbhello; print(sbhello.__file__)"],
    );
    assert_eq!(printed, "/workspace/hello/sbhello/__init__.py");
    let printed = runc_output(&bundle, "stackbuild-editable-script", &["sbhello", "--help"]);
    assert_eq!(printed, "sbhello 0.3.0 with six 1.16.0 ['--help']");
}

/// The project's own `uv.lock` (`[python] lock`) with a git package: uv locks it at the full
/// commit (`source = { git = "URL?tag=...#COMMIT" }`); stackbuild makes the tar of that commit,
/// locks it with its commit, builds it from source and installs it with the lock's wheels.
#[test]
fn a_git_package_of_the_projects_uv_lock_is_built_from_its_commit() {
    if !debian_builds_ready(&["bwrap", "prlimit", "git", "uv"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("sbuvgit");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join("pyproject.toml"),
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
         [project]\nname = \"sbuvgit\"\nversion = \"0.4.0\"\ndependencies = [\"six==1.16.0\"]\n\n\
         [tool.setuptools]\npy-modules = [\"sbuvgit\"]\n",
    )
    .unwrap();
    std::fs::write(repo.join("sbuvgit.py"), "import six\nVALUE = 'from the uv.lock git'\n").unwrap();
    test_support::tools::git(&repo, &["init", "-q"]);
    test_support::tools::git(&repo, &["add", "."]);
    test_support::tools::git(
        &repo,
        &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "v0.4"],
    );
    test_support::tools::git(&repo, &["tag", "v0.4.0"]);
    let commit = test_support::tools::git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let project = tmp.path().join("app");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("pyproject.toml"),
        format!(
            "[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
             dependencies = [\"sbuvgit @ git+file://{}@v0.4.0\"]\n\n[tool.uv]\npackage = false\n",
            repo.display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new("uv")
        .args(["lock", "--python", "3.11"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "uv lock: {}", String::from_utf8_lossy(&out.stderr));
    let uv_lock = std::fs::read_to_string(project.join("uv.lock")).unwrap();
    assert!(uv_lock.contains(&format!("#{commit}\"")), "{uv_lock}");
    let recipe = project.join("image.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"uvgit\"\ntag = \"test\"\n\n{BOOKWORM_PYTHON}\n[python]\nversion = \"3.11\"\n\
             lock = \"uv.lock\"\n"
        ),
    )
    .unwrap();
    let layout = tmp.path().join("layout");
    build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(lock.contains(&format!("commit = \"{commit}\"")), "{lock}");
    assert!(lock.contains("filename = \"sbuvgit-0.4.0.tar.gz\""), "{lock}");
    if !(have("umoci") && have("runc")) {
        eprintln!("skipped the container half: umoci or runc not installed");
        return;
    }
    let bundle = tmp.path().join("bundle");
    unpack_bundle(&layout, "test", &bundle);
    let printed = runc_output(
        &bundle,
        "stackbuild-uvgit",
        &["python3", "-c", "import sbuvgit, six; print(sbuvgit.VALUE, six.__version__)"],
    );
    assert_eq!(printed, "from the uv.lock git 1.16.0");
}

/// The project's own `uv.lock` beside the project and a workspace member, each a `[[source]]`
/// installed as a wheel: as `uv sync --no-dev` installs them, the wheels of the lock and the two
/// projects built from their trees at the versions the lock records, the project's console
/// script on `PATH`. The lock records each project's source.
#[test]
fn a_projects_uv_lock_with_the_project_and_a_workspace_member_installed() {
    if !debian_builds_ready(&["bwrap", "prlimit", "uv"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let app = tmp.path().join("app");
    let member = app.join("packages/member");
    std::fs::create_dir_all(&member).unwrap();
    let setuptools =
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n";
    std::fs::write(
        app.join("pyproject.toml"),
        format!(
            "{setuptools}[project]\nname = \"sbapp\"\nversion = \"0.2.0\"\nrequires-python = \">=3.11\"\n\
             dependencies = [\"six==1.16.0\", \"sbmember\"]\n\n[project.scripts]\nsbapp = \"sbapp:main\"\n\n\
             [tool.setuptools]\npy-modules = [\"sbapp\"]\n\n[tool.uv.sources]\nsbmember = {{ workspace = true }}\n\n\
             [tool.uv.workspace]\nmembers = [\"packages/*\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        app.join("sbapp.py"),
        "import sbmember, six\ndef main():\n    print(sbmember.VALUE, six.__version__)\n",
    )
    .unwrap();
    std::fs::write(
        member.join("pyproject.toml"),
        format!(
            "{setuptools}[project]\nname = \"sbmember\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\n\
             [tool.setuptools]\npy-modules = [\"sbmember\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(member.join("sbmember.py"), "VALUE = 'member'\n").unwrap();
    let out = std::process::Command::new("uv").args(["lock", "-q"]).current_dir(&app).output().unwrap();
    if !out.status.success() {
        eprintln!("skipped: uv lock could not reach the index: {}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    let recipe = tmp.path().join("locked-app.toml");
    std::fs::write(
        &recipe,
        format!(
            "[image]\nname = \"locked-app\"\ntag = \"test\"\n\n{BOOKWORM_PYTHON}\n[python]\nversion = \"3.11\"\n\
             lock = \"app/uv.lock\"\n\n[[source]]\nname = \"sbapp\"\npath = \"app\"\ndest = \"/opt/app\"\n\
             install = \"wheel\"\n\n[[source]]\nname = \"member\"\npath = \"app/packages/member\"\n\
             dest = \"/opt/member\"\ninstall = \"wheel\"\n"
        ),
    )
    .unwrap();
    let layout = tmp.path().join("layout");
    build(&recipe, &tmp.path().join("cache"), &layout, &[]);
    let lock = std::fs::read_to_string(recipe.with_extension("toml.lock")).unwrap();
    assert!(
        lock.contains("filename = \"sbapp-0.2.0.tar.gz\"") && lock.contains("source = \"sbapp\""),
        "{lock}"
    );
    assert!(
        lock.contains("filename = \"sbmember-0.1.0.tar.gz\"") && lock.contains("source = \"member\""),
        "{lock}"
    );
    let Some(bundle) = unpacked(&layout, tmp.path()) else { return };
    let site = bundle.join("rootfs/usr/local/lib/python3.11/dist-packages");
    for file in ["sbapp.py", "sbmember.py", "six.py"] {
        assert!(site.join(file).is_file(), "{file} not in the image");
    }
    assert!(bundle.join("rootfs/usr/local/bin/sbapp").is_file());
}
