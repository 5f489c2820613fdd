//! `stackbuild init`: a recipe from what a project has, for each kind of input as it comes in
//! real projects (a requirements file on the `PyTorch` cu121 index with hashes, includes and
//! markers; a pyproject with optional groups and dependency groups; a `uv.lock` and a
//! `pylock.toml` written here by uv itself; a Dockerfile on `nvidia/cuda`). Each recipe it writes
//! parses, passes `stackbuild check` (or init shows the conflicts with their fixes and exits 1),
//! and validates against the recipe schema with the independent validators. uv and the index
//! are needed for the uv-written inputs only; what cannot run is reported as skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn stackbuild(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stackbuild"))
        .args(args)
        .current_dir(dir)
        .env("STACKBUILD_LOG", "warn")
        .env("STACKBUILD_CACHE", dir.join(".cache-of-test"))
        .output()
        .unwrap()
}

fn write(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// The recipe init wrote, checked: it loads, `check --offline` passes, and the schema's
/// validators accept it.
fn recipe_checks(dir: &Path) -> String {
    let recipe = dir.join("stackbuild.toml");
    let written = std::fs::read_to_string(&recipe).unwrap();
    stackbuild_recipe::Recipe::load(&recipe).unwrap_or_else(|e| panic!("{e}\n{written}"));
    let out = stackbuild(dir, &["check", "--offline", "stackbuild.toml"]);
    assert!(out.status.success(), "check: {}{}\n{written}", text(&out.stdout), text(&out.stderr));
    validates(&recipe);
    written
}

/// `check-jsonschema` and `taplo check` with the recipe schema, where installed.
fn validates(recipe: &Path) {
    let schema = workspace().join("recipes/recipe.schema.json");
    let bin = workspace().join("target/sbom-validators/bin/check-jsonschema");
    if bin.is_file() {
        let out = Command::new(&bin).arg("--schemafile").arg(&schema).arg(recipe).output().unwrap();
        assert!(out.status.success(), "check-jsonschema: {}{}", text(&out.stdout), text(&out.stderr));
    } else {
        eprintln!("SKIPPED (schema): check-jsonschema is not in target/sbom-validators");
    }
    let taplo =
        Command::new("taplo").arg("--version").output().is_ok_and(|o| text(&o.stdout).starts_with("taplo "));
    if taplo {
        let out = Command::new("taplo")
            .args(["check", "--schema"])
            .arg(format!("file://{}", schema.display()))
            .arg(recipe)
            .output()
            .unwrap();
        assert!(out.status.success(), "taplo: {}", text(&out.stderr));
    } else {
        eprintln!("SKIPPED (schema): taplo is not installed");
    }
}

fn init(dir: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["init"];
    all.extend_from_slice(args);
    let out = stackbuild(dir, &all);
    (out.status.success(), format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn a_requirements_file_on_the_cu121_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "requirements.txt",
        "# exported by pip-compile\n--extra-index-url https://download.pytorch.org/whl/cu121\n\
         torch==2.1.0+cu121 \\\n    --hash=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n\
         numpy==1.26.4 ; python_version < \"3.12\"\n-r requirements/extra.txt\n-c constraints.txt\n-e .\n\
         git+https://example.invalid/org/tool.git@v1#egg=tool\n",
    );
    write(dir, "requirements/extra.txt", "safetensors==0.4.1\n");
    write(dir, "constraints.txt", "pyarrow==14.0.2\n");
    let (ok, said) = init(dir, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(dir);
    for wanted in [
        "\"torch==2.1.0+cu121\"",
        "\"numpy==1.26.4 ; python_full_version < '3.12'\"",
        "\"safetensors==0.4.1\"",
        "constraints = [\n  \"pyarrow==14.0.2\"",
        "extra_index = [\"https://download.pytorch.org/whl/cu121\"]",
        "[cuda]\nversion = \"12.1\"",
        "[[source]]\nname = ",
        "path = \".\"",
    ] {
        assert!(recipe.contains(wanted), "{wanted:?} not in\n{recipe}");
    }
    // What it decided says why; what it could not translate is listed, never dropped.
    assert!(said.contains("[cuda] 12.1: ./requirements.txt:2: extra index"), "{said}");
    assert!(said.contains("1 --hash option(s): not copied"), "{said}");
    // pip's `git+URL@REV#egg=NAME` is a git dependency, built from source; `-e .` installs the
    // project itself as a wheel.
    assert!(
        recipe.contains("\"tool @ git+https://example.invalid/org/tool.git@v1\",  # ./requirements.txt:9"),
        "{recipe}"
    );
    assert!(recipe.contains("install = \"wheel\""), "{recipe}");
    // It never writes over a recipe.
    let (ok, said) = init(dir, &["--offline"]);
    assert!(!ok && said.contains("already exists; init never overwrites a recipe"), "{said}");
    assert_eq!(std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap(), recipe);
}

#[test]
fn a_pyproject_with_groups_and_a_python_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"Vision_Model\"\nversion = \"0.3.0\"\nrequires-python = \">=3.10,<3.13\"\n\
         dependencies = [\"torch==2.2.1\", \"numpy>=1.24,<2\", \"pillow==10.2.0\"]\n\n\
         [project.optional-dependencies]\ntrain = [\"accelerate==0.25.0\"]\nviz = [\"matplotlib==3.8.2\"]\n\n\
         [dependency-groups]\ndev = [\"pytest==8.0.0\"]\n\n\
         [[tool.uv.index]]\nname = \"pytorch-cu121\"\nurl = \"https://download.pytorch.org/whl/cu121\"\nexplicit = true\n\n\
         [tool.uv.sources]\ntorch = [{ index = \"pytorch-cu121\" }]\n",
    );
    write(dir, ".python-version", "3.11\n");
    let (ok, said) = init(dir, &["--offline", "--extra", "train"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(dir);
    assert!(recipe.contains("name = \"vision-model\""), "{recipe}");
    assert!(recipe.contains("version = \"3.11\"") && recipe.contains("debian = \"bookworm\""), "{recipe}");
    assert!(
        recipe.contains("\"accelerate==0.25.0\"")
            && !recipe.contains("matplotlib")
            && !recipe.contains("pytest")
    );
    assert!(recipe.contains("[cuda]\nversion = \"12.1\""), "{recipe}");
    assert!(said.contains("optional dependencies `viz` (1) left out"), "{said}");
    assert!(said.contains("dependency group `dev` (1 package(s)) left out of the image"), "{said}");
    assert!(said.contains("Python 3.11: ./.python-version"), "{said}");
}

#[test]
fn a_dockerfile_on_nvidia_cuda_with_pip_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "Dockerfile",
        "ARG CUDA=12.1.1\nFROM nvidia/cuda:${CUDA}-cudnn8-runtime-ubuntu22.04 AS base\n\
         ENV DEBIAN_FRONTEND=noninteractive HF_HOME=/cache/hf\n\
         RUN apt-get update && apt-get install -y --no-install-recommends \\\n    python3 python3-pip ffmpeg git \\\n    && rm -rf /var/lib/apt/lists/*\n\
         WORKDIR /app\nCOPY requirements.txt .\n\
         RUN pip3 install --no-cache-dir torch==2.1.0 torchvision==0.16.0 \"numpy<2\" \\\n    && pip3 install --no-cache-dir -r requirements.txt\n\
         COPY . /app\nRUN python3 -c 'import torch' && make weights\nEXPOSE 8000\nCMD [\"python3\", \"serve.py\"]\n",
    );
    write(dir, "requirements.txt", "transformers==4.36.2\n");
    let (ok, said) = init(dir, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(dir);
    for wanted in [
        "ubuntu = \"jammy\"",
        "version = \"3.10\"",
        "packages = [\"python3\", \"python3-venv\", \"ca-certificates\", \"ffmpeg\", \"git\"]",
        "\"torch==2.1.0\"",
        "\"numpy<2\"",
        "\"transformers==4.36.2\"",
        "[cuda]\nversion = \"12.1\"\ncudnn = \"8\"",
        "dest = \"/app\"",
        "cmd = [\"python3\", \"serve.py\"]",
        "\"HF_HOME\" = \"/cache/hf\"",
    ] {
        assert!(recipe.contains(wanted), "{wanted:?} not in\n{recipe}");
    }
    assert!(said.contains("make weights: a command init does not run or translate"), "{said}");
    assert!(said.contains("EXPOSE 8000: no recipe field"), "{said}");
}

/// A Dockerfile for `BuildKit` (`RUN --mount=...` before the command) that installs with `uv sync`
/// (cosmos-predict2's): the mount flags are not the command, and `uv sync`'s `--extra` and
/// `--no-dev` choose what of `pyproject.toml` is installed.
#[test]
fn a_buildkit_dockerfile_that_runs_uv_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "Dockerfile",
        "FROM nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04
         RUN --mount=type=cache,target=/var/cache/apt --mount=type=cache,target=/var/lib/apt \
             apt-get update && apt-get install -y --no-install-recommends libgl1 ffmpeg
         COPY --from=ghcr.io/astral-sh/uv:0.8.12 /uv /usr/local/bin/
WORKDIR /workspace
         RUN --mount=type=cache,target=/root/.cache/uv --mount=type=bind,source=pyproject.toml,target=pyproject.toml \
             uv sync --locked --no-install-project --extra=train --no-dev
",
    );
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"world-model\"\nversion = \"0.1.0\"\nrequires-python = \">=3.10\"\n\
         dependencies = [\"torch==2.1.0\", \"numpy==1.26.4\"]\n\n\
         [project.optional-dependencies]\ntrain = [\"accelerate==0.25.0\"]\nviz = [\"matplotlib==3.8.2\"]\n\n\
         [dependency-groups]\ndev = [\"pytest==8.0.0\"]\n",
    );
    let (ok, said) = init(dir, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(dir);
    assert!(
        recipe.contains("\"libgl1\"") && recipe.contains("\"ffmpeg\""),
        "the apt line was lost:\n{recipe}"
    );
    assert!(recipe.contains("\"torch==2.1.0\"") && recipe.contains("\"accelerate==0.25.0\""), "{recipe}");
    assert!(!recipe.contains("matplotlib") && !recipe.contains("pytest"), "{recipe}");
    assert!(said.contains("`uv sync` installs the project's dependencies, the extras train"), "{said}");
    assert!(said.contains("optional dependencies `train` (1), as the Dockerfile's `uv sync` asks"), "{said}");
    assert!(!said.contains("--mount=type=cache"), "a mount flag was taken for a command: {said}");
}

#[test]
fn a_conflict_is_shown_with_its_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // torch 2.1 is built against NumPy 1.x.
    write(dir, "requirements.txt", "torch==2.1.0\nnumpy==2.0.0\n");
    let (ok, said) = init(dir, &["--offline"]);
    assert!(!ok, "{said}");
    assert!(said.contains("Wrote ./stackbuild.toml."), "{said}");
    assert!(said.contains("reports, with the fixes:") && said.to_lowercase().contains("numpy"), "{said}");
    assert!(said.contains("fix:") || said.contains("Fix:") || said.contains("->"), "{said}");
}

fn have_uv() -> bool {
    Command::new("uv").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn a_uv_lock_and_a_pylock_written_by_uv() {
    if !have_uv() {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
         dependencies = [\"six==1.16.0\", \"idna==3.7\"]\n\n[dependency-groups]\ndev = [\"iniconfig==2.0.0\"]\n",
    );
    let out = Command::new("uv").args(["lock", "-q"]).current_dir(dir).output().unwrap();
    if !out.status.success() {
        eprintln!("SKIPPED: uv lock could not reach the index: {}", text(&out.stderr));
        return;
    }
    let (ok, said) = init(dir, &[]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(dir);
    assert!(recipe.contains("lock = \"uv.lock\"") && !recipe.contains("packages = [\n"), "{recipe}");
    assert!(said.contains("uv.lock: the project's lock"), "{said}");

    // The same project as a PEP 751 pylock.toml only.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let out = Command::new("uv")
        .args(["export", "-q", "--format", "pylock.toml", "--no-dev", "-o"])
        .arg(other.join("pylock.toml"))
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (ok, said) = init(&other, &[]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&other);
    assert!(recipe.contains("lock = \"pylock.toml\""), "{recipe}");

    // Unpinned requirements are pinned to what uv resolves, and the decision says so.
    let third = tmp.path().join("third");
    std::fs::create_dir(&third).unwrap();
    write(&third, "requirements.txt", "six\nidna==3.7\n");
    let (ok, said) = init(&third, &[]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&third);
    assert!(
        recipe.contains("\"six==1.") && said.contains("`six` has no version; pinned to 1."),
        "{said}\n{recipe}"
    );
}

/// The shapes real projects keep their dependencies in: a `requirements/` folder (runtime files
/// chosen, tests and other hardware left out and said), a name that starts with "http", extras
/// without a version, a poetry table, a setuptools project with no requirements; and a recipe
/// that always loads, whatever the inputs' text.
#[test]
fn the_shapes_real_projects_have() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir, "requirements/common.txt", "httpx==0.24.0\nmarkdown2[all]\n");
    write(&dir, "requirements/cuda.txt", "-r common.txt\ntorch==2.5.1\n");
    write(&dir, "requirements/test.txt", "pytest==8.0.0\n");
    write(&dir, "requirements/rocm.txt", "-r common.txt\n");
    let (ok, said) = init(&dir, &["--offline"]);
    let recipe = std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap_or_default();
    assert!(recipe.contains("\"httpx==0.24.0\""), "a plain pin, not a URL:\n{recipe}\n{said}");
    assert!(recipe.contains("\"torch==2.5.1\""), "{recipe}");
    assert!(!recipe.contains("pytest"), "{recipe}");
    assert!(said.contains("read cuda (what the image runs); not read: common, rocm, test"), "{said}");
    // Offline, the unpinned one is said (with its extras), never left in unpinned.
    assert!(said.contains("markdown2[all]"), "{said}");
    assert!(!recipe.contains("\"markdown2[all]\""), "{recipe}");
    validates(&dir.join("stackbuild.toml"));
    let _ = ok;

    // A poetry project.
    let poetry = tmp.path().join("poetry");
    write(
        &poetry,
        "pyproject.toml",
        "[tool.poetry]\nname = \"Poetry App\"\n[tool.poetry.dependencies]\npython = \"^3.10\"\n\
         numpy = \"^1.26.4\"\nrich = { version = \"~13.7.0\", extras = [\"jupyter\"] }\n\
         extra-thing = { version = \"^1\", optional = true }\n",
    );
    let (_, said) = init(&poetry, &["--offline"]);
    let recipe = std::fs::read_to_string(poetry.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("\"numpy>=1.26.4,<2\""), "{recipe}\n{said}");
    assert!(recipe.contains("\"rich[jupyter]>=13.7.0,<13.8\""), "{recipe}");
    assert!(recipe.contains("name = \"poetry-app\""), "{recipe}");
    assert!(!recipe.contains("extra-thing"), "{recipe}");
    validates(&poetry.join("stackbuild.toml"));

    // A setuptools project: installed as a wheel of its tree, its dependencies from its build.
    let setup = tmp.path().join("setup-only");
    write(&setup, "setup.py", "from setuptools import setup\nsetup(name='x', install_requires=['six'])\n");
    let (_, said) = init(&setup, &["--offline"]);
    let recipe = std::fs::read_to_string(setup.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("install = \"wheel\""), "{recipe}\n{said}");
    assert!(said.contains("a setuptools project (setup.py / setup.cfg) with no requirements file"), "{said}");
    validates(&setup.join("stackbuild.toml"));

    // Text that would break out of a comment stays inside it.
    let odd = tmp.path().join("odd");
    write(&odd, "requirements.txt", "six==1.16.0\n--weird-option x\u{0b}y\n-r \"nested\n[image]\".txt\n");
    let (_, said) = init(&odd, &["--offline"]);
    let recipe = std::fs::read_to_string(odd.join("stackbuild.toml")).unwrap();
    assert!(
        recipe.contains("#   ./requirements.txt:4: [image]\".txt (not a PEP 508 requirement"),
        "{recipe}\n{said}"
    );
    stackbuild_recipe::Recipe::load(odd.join("stackbuild.toml")).unwrap();
    validates(&odd.join("stackbuild.toml"));
}

/// More shapes of real projects: LLaMA-Factory's optional-feature requirements folder, sam2's
/// Dockerfile that installs the project with an extra, Wan2.1's requirements file that repeats
/// its pyproject, detectron2's setup.py that imports torch.
#[test]
fn more_shapes_real_projects_have() {
    let tmp = tempfile::tempdir().unwrap();
    // LLaMA-Factory's shape: pyproject lists the dependencies and a console script, the package
    // is under src/, and requirements/ holds optional features (vllm, npu, ...): the folder is
    // not read, and the project is installed.
    let features = tmp.path().join("features");
    write(
        &features,
        "pyproject.toml",
        "[build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n\
         [project]\nname = \"lmf\"\nversion = \"1.0\"\ndependencies = [\"six==1.16.0\"]\n\
         [project.scripts]\nlmf-cli = \"lmf.cli:main\"\n",
    );
    write(&features, "src/lmf/__init__.py", "");
    write(
        &features,
        "requirements/npu.txt",
        "--extra-index-url https://npu.example.invalid/simple\ntorch-npu==2.1.0\n",
    );
    write(&features, "requirements/vllm.txt", "vllm==0.9.0\n");
    let (_, said) = init(&features, &["--offline"]);
    let recipe = std::fs::read_to_string(features.join("stackbuild.toml")).unwrap();
    assert!(!recipe.contains("vllm") && !recipe.contains("npu.example"), "{recipe}\n{said}");
    assert!(said.contains("not read: pyproject.toml lists the project's dependencies"), "{said}");
    assert!(said.contains("[project.scripts] declares lmf-cli"), "{said}");
    assert!(recipe.contains("install = \"wheel\""), "{recipe}");
    validates(&features.join("stackbuild.toml"));

    // sam2's shape: the Dockerfile installs the project with an extra (`-e .[demo]`), and a
    // requirements file that repeats pyproject word for word is said once, not per line.
    let extras = tmp.path().join("extras");
    write(
        &extras,
        "setup.py",
        "from setuptools import setup\nsetup(name='x', extras_require={'demo': ['six']})\n",
    );
    write(
        &extras,
        "Dockerfile",
        "FROM python:3.11\nWORKDIR /opt/x\nCOPY . .\nRUN pip install -e \".[demo]\"\n",
    );
    let (_, said) = init(&extras, &["--offline"]);
    let recipe = std::fs::read_to_string(extras.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("install = \"wheel\"\nextras = [\"demo\"]"), "{recipe}\n{said}");
    validates(&extras.join("stackbuild.toml"));
    let repeats = tmp.path().join("repeats");
    write(&repeats, "requirements.txt", "six==1.16.0\nattrs==23.1.0\n");
    write(
        &repeats,
        "pyproject.toml",
        "[project]\nname = \"r\"\nversion = \"1\"\ndependencies = [\"six==1.16.0\", \"attrs==23.1.0\"]\n",
    );
    let (_, said) = init(&repeats, &["--offline"]);
    assert!(said.contains("2 requirement(s) repeat"), "{said}");
    assert!(!said.contains("` repeats `"), "{said}");

    // detectron2's shape: setup.py imports torch to build, and no requirement names torch.
    let ext = tmp.path().join("ext");
    write(
        &ext,
        "setup.py",
        "import torch\nfrom torch.utils.cpp_extension import CUDAExtension\nfrom setuptools import setup\n\
         setup(\n    name=\"det_ext\",\n    install_requires=[\"six\"],\n)\n",
    );
    let (_, said) = init(&ext, &["--offline"]);
    let recipe = std::fs::read_to_string(ext.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("no_isolation = [\"det-ext\"]"), "{recipe}\n{said}");
    assert!(recipe.contains("\"det-ext\" = [\"ninja\", \"setuptools\"]"), "{recipe}");
    assert!(said.contains("imports torch to build, and nothing lists torch"), "{said}");
    validates(&ext.join("stackbuild.toml"));
}

/// Research projects' conda environments (`DiT`'s `environment.yml`, `diffusion_policy`'s
/// `conda_environment.yaml`): Python, torch under its index name, the CUDA the conda build is
/// for, the `pip:` list read as a requirements file (and winning over a conda package of the
/// same name, as pip runs after conda), conda's tools and C libraries left out, said once.
/// A requirements file that is a symlink inside the project (torchtitan's) is read through it.
#[test]
fn a_conda_environment_and_a_symlinked_requirements_file() {
    let tmp = tempfile::tempdir().unwrap();
    let conda = tmp.path().join("conda");
    write(
        &conda,
        "environment.yml",
        "name: robodiff\nchannels:\n  - pytorch\n  - nvidia\ndependencies:\n  - python=3.11\n  - pip=22.2.2\n\
         \x20 - cudatoolkit=11.6\n  - pytorch::pytorch=2.1.0\n  - py-opencv=4.6.0\n  - six==1.16.0\n\
         \x20 - ffmpeg\n  - llvm-openmp=14\n  - attrs >= 23.1\n  - pip:\n    - six==1.15.0\n    - -r extra.txt\n",
    );
    write(&conda, "extra.txt", "idna==3.4\n");
    write(&conda, "environment_macos.yml", "dependencies:\n  - python=3.9\n");
    let (_, said) = init(&conda, &["--offline"]);
    let recipe = std::fs::read_to_string(conda.join("stackbuild.toml")).unwrap();
    for want in [
        "\"torch==2.1.0.*\"",
        "\"opencv-python==4.6.0.*\"",
        "\"six==1.15.0\"",
        "\"idna==3.4\"",
        "\"attrs>=23.1\"",
    ] {
        assert!(recipe.contains(want), "{want}\n{recipe}\n{said}");
    }
    assert!(recipe.contains("\"ffmpeg\""), "{recipe}");
    assert!(!recipe.contains("llvm") && !recipe.contains("\"pip"), "{recipe}");
    assert!(recipe.contains("version = \"11.6\""), "{recipe}");
    assert!(said.contains("Python 3.11") && said.contains("(pip, llvm-openmp)"), "{said}");
    assert!(said.contains("conda's `pytorch` is `torch`"), "{said}");
    validates(&conda.join("stackbuild.toml"));

    let linked = tmp.path().join("linked");
    write(&linked, ".ci/docker/requirements.txt", "six==1.16.0\n");
    std::os::unix::fs::symlink(".ci/docker/requirements.txt", linked.join("requirements.txt")).unwrap();
    let outside = tmp.path().join("outside.txt");
    write(tmp.path(), "outside.txt", "idna==3.4\n");
    std::os::unix::fs::symlink(&outside, linked.join("requirements-extra.txt")).unwrap();
    let (_, said) = init(&linked, &["--offline"]);
    let recipe = std::fs::read_to_string(linked.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("six==1.16.0") && !recipe.contains("idna"), "{recipe}\n{said}");
    assert!(said.contains("a symlink to .ci/docker/requirements.txt; that file is read"), "{said}");
    assert!(said.contains("requirements-extra.txt: not read: a symlink"), "{said}");
}

/// A project lock the image cannot install as it is, a wheel without a sha256 (as an index of
/// release links serves them: cosmos-predict2's `uv.lock`), is said, and the project's
/// manifests are read instead: the recipe lists the pyproject's dependencies and no lock.
#[test]
fn a_lock_without_digests_is_said_and_the_manifests_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\ndependencies = [\"six==1.16.0\"]\n",
    );
    write(
        dir,
        "uv.lock",
        "version = 1\nrequires-python = \">=3.11\"\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\
         source = { editable = \".\" }\ndependencies = [{ name = \"six\" }]\n\n[[package]]\nname = \"six\"\n\
         version = \"1.16.0\"\nsource = { registry = \"https://example.invalid/simple\" }\n\
         wheels = [{ url = \"https://example.invalid/six-1.16.0-py2.py3-none-any.whl\" }]\n",
    );
    let (ok, said) = init(dir, &["--offline"]);
    assert!(ok, "{said}");
    assert!(said.contains("uv.lock: not used as the image's lock") && said.contains("no sha256"), "{said}");
    let recipe = std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("\"six==1.16.0\"") && !recipe.contains("lock = "), "{recipe}");
}

/// A project lock whose wheels are served from where this machine cannot reach (lerobot's
/// `uv.lock` takes torch from download.pytorch.org), and an explicit index that cannot be
/// reached either: the lock is not used, the manifests are resolved without that index, and
/// the report says both, with what to do where they can be reached. Port 9 on 127.0.0.1 (the
/// discard service, not running) refuses the connection.
#[test]
fn a_lock_and_an_index_this_machine_cannot_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\ndependencies = [\"six==1.16.0\"]\n\n\
         [[tool.uv.index]]\nname = \"mirror\"\nurl = \"http://127.0.0.1:9/simple\"\nexplicit = true\n\n\
         [tool.uv.sources]\nsix = [{ index = \"mirror\", marker = \"sys_platform == 'linux'\" }]\n",
    );
    write(
        dir,
        "uv.lock",
        "version = 1\nrequires-python = \">=3.11\"\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\
         source = { editable = \".\" }\ndependencies = [{ name = \"six\" }]\n\n[[package]]\nname = \"six\"\n\
         version = \"1.16.0\"\nsource = { registry = \"http://127.0.0.1:9/simple\" }\n\
         wheels = [{ url = \"http://127.0.0.1:9/six-1.16.0-py2.py3-none-any.whl\", hash = \
         \"sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254\" }]\n",
    );
    let (_, said) = init(dir, &[]);
    if said.contains("no version could be found") {
        eprintln!("SKIPPED: the index cannot be reached: {said}");
        return;
    }
    assert!(
        said.contains(
            "uv.lock: not used as the image's lock: its wheels of six are served from http://127.0.0.1:9"
        ),
        "{said}"
    );
    assert!(said.contains("http://127.0.0.1:9/simple: not reachable from here"), "{said}");
    let recipe = recipe_checks(dir);
    assert!(recipe.contains("\"six==1.16.0\"") && !recipe.contains("lock = "), "{recipe}");
    assert!(!recipe.contains("extra_index = ") && recipe.contains("(Connection refused"), "{recipe}");
}

/// A git dependency without a revision (openvla's `dlimp @ git+https://github.com/...`, a
/// `[tool.uv.sources]` git entry with no `rev`): pip and uv clone the default branch, so the
/// recipe pins the commit it points to today; offline, it is listed with what to do. The
/// repository is a local one (`file://`), made here with git.
#[test]
fn a_git_dependency_without_a_revision_is_pinned_to_its_default_branch() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs git");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("dlimp");
    write(
        &repo,
        "setup.py",
        "from setuptools import setup\nsetup(name='dlimp', version='0.0.1', py_modules=['dlimp'])\n",
    );
    write(&repo, "dlimp.py", "X = 1\n");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.email=t@example.invalid",
                "-c",
                "user.name=t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "first"]);
    let head = git(&["rev-parse", "HEAD"]);
    let url = format!("file://{}", repo.display());
    for (project, offline) in [("online", false), ("offline", true)] {
        let dir = tmp.path().join(project);
        write(&dir, "requirements.txt", &format!("dlimp @ git+{url}\n"));
        let (_, said) = init(&dir, if offline { &["--offline"] } else { &[] });
        let recipe = recipe_checks(&dir);
        if offline {
            assert!(!recipe.contains("\"dlimp @"), "{recipe}");
            assert!(
                said.contains("a git dependency without a revision, and its default branch could not be read (--offline)"),
                "{said}"
            );
        } else {
            assert!(recipe.contains(&format!("\"dlimp @ git+{url}@{head}\"")), "{recipe}\n{said}");
            assert!(
                said.contains(&format!("pinned to {head}, the commit its default branch points to today")),
                "{said}"
            );
        }
    }
}

/// A repository whose Python project is one level down (sglang's `python/pyproject.toml`, which
/// its README installs with `pip install -e "python[all]"`): that project, said; with several
/// such directories and none named `python`, init names them and writes nothing.
#[test]
fn a_project_one_level_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("serving");
    write(
        &dir,
        "python/pyproject.toml",
        "[project]\nname = \"serving\"\nversion = \"0.1.0\"\nrequires-python = \">=3.10\"\ndependencies = [\"six==1.16.0\"]\n",
    );
    write(&dir, "python/serving/__init__.py", "");
    write(&dir, "benchmark/setup.py", "from setuptools import setup\nsetup(name='bench')\n");
    write(&dir, "README.md", "# serving\n");
    let (ok, said) = init(&dir, &["--offline"]);
    assert!(ok, "{said}");
    assert!(said.contains("no manifest at the top level; the Python project is python/"), "{said}");
    let recipe = recipe_checks(&dir);
    assert!(recipe.contains("\"six==1.16.0\"") && recipe.contains("path = \"python\""), "{recipe}");

    let two = tmp.path().join("two");
    write(&two, "client/pyproject.toml", "[project]\nname = \"client\"\nversion = \"1\"\n");
    write(&two, "server/setup.py", "from setuptools import setup\nsetup(name='server')\n");
    let (ok, said) = init(&two, &["--offline"]);
    assert!(
        !ok && said.contains("run init on one of the Python projects below it: client, server"),
        "{said}"
    );
    assert!(!two.join("stackbuild.toml").exists());
}

/// Pins from before Python 3.11 (LIBERO's `numpy==1.22.4`, whose wheels stop at cp310) where
/// nothing names a Python version: 3.11 would take numpy from source, so init resolves the
/// older versions too and takes 3.10 (Ubuntu jammy), said with why.
#[test]
fn old_pins_take_the_python_of_their_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "requirements.txt", "numpy==1.22.4\n");
    let (_, said) = init(dir, &[]);
    if said.contains("no version could be found") {
        eprintln!("SKIPPED: the index cannot be reached: {said}");
        return;
    }
    assert!(
        said.contains("Python 3.10: with Python 3.11 (init's first choice), 1 package(s) have no wheel"),
        "{said}"
    );
    assert!(said.contains("(numpy); with 3.10, none"), "{said}");
    let recipe = recipe_checks(dir);
    assert!(recipe.contains("ubuntu = \"jammy\"") && recipe.contains("version = \"3.10\""), "{recipe}");
}

/// Where projects keep their install steps when no manifest lists them: nanoGPT's README
/// (`pip install torch numpy ...`), robomimic's `setup.py` beside a `requirements-docs.txt`
/// (the docs' packages are not the image's), a Dockerfile's `conda run -n ENV pip install`.
#[test]
fn install_steps_in_a_readme_a_setup_py_and_conda_run() {
    let tmp = tempfile::tempdir().unwrap();
    let readme = tmp.path().join("readme");
    write(
        &readme,
        "README.md",
        "# gpt\n\nDependencies:\n\n```sh\npip install six==1.16.0 \"idna==3.7\"\n```\n\nThen pip install what you like.\n",
    );
    write(&readme, "train.py", "print('train')\n");
    let (ok, said) = init(&readme, &["--offline"]);
    assert!(ok, "{said}");
    assert!(
        said.contains("README.md: no manifest lists the packages; its 1 `pip install` line(s) are read"),
        "{said}"
    );
    let recipe = recipe_checks(&readme);
    assert!(recipe.contains("\"six==1.16.0\"") && recipe.contains("\"idna==3.7\""), "{recipe}");

    let setup = tmp.path().join("setup");
    write(&setup, "setup.py", "from setuptools import setup\nsetup(name='robo', install_requires=['six'])\n");
    write(&setup, "requirements-docs.txt", "sphinx==7.0.0\n");
    let (_, said) = init(&setup, &["--offline"]);
    let recipe = recipe_checks(&setup);
    assert!(!recipe.contains("sphinx") && recipe.contains("install = \"wheel\""), "{recipe}\n{said}");
    assert!(
        said.contains("requirements-docs.txt: not read: its name says it is not what the image runs"),
        "{said}"
    );

    let conda = tmp.path().join("conda");
    write(
        &conda,
        "Dockerfile",
        "FROM nvidia/cuda:12.1.1-base-ubuntu22.04\nRUN /opt/conda/bin/conda run -n venv --no-capture-output pip install six==1.16.0\n",
    );
    let (_, said) = init(&conda, &["--offline"]);
    let recipe = recipe_checks(&conda);
    assert!(recipe.contains("\"six==1.16.0\""), "{recipe}\n{said}");
}

/// Shapes found by taking init to more projects (2026-12-08): text-generation-inference's
/// Dockerfiles for other hardware beside its CUDA one, `HunyuanVideo`'s torch named only in its
/// README, flux's README installing the project with an extra that names its own extras.
#[test]
fn the_readme_fills_what_the_manifests_leave_open_and_one_dockerfile_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let tgi = tmp.path().join("tgi");
    write(&tgi, "Dockerfile", "FROM nvidia/cuda:12.4.0-base-ubuntu22.04\nRUN DEBIAN_FRONTEND=noninteractive apt-get install -y libssl-dev && pip install six==1.16.0\n");
    write(&tgi, "Dockerfile_amd", "FROM rocm/dev-ubuntu-22.04:6.2\nRUN pip install idna==3.7\n");
    write(&tgi, "Dockerfile.neuron", "FROM ubuntu:24.04\nRUN pip install idna==3.6\n");
    let (ok, said) = init(&tgi, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&tgi);
    assert!(recipe.contains("\"six==1.16.0\"") && !recipe.contains("idna"), "{recipe}\n{said}");
    assert!(recipe.contains("\"libssl-dev\"") && recipe.contains("jammy"), "{recipe}\n{said}");
    assert!(said.contains("Dockerfile: the Dockerfile read (the one `docker build .` reads); not read: dockerfile.neuron, dockerfile_amd"), "{said}");

    let hunyuan = tmp.path().join("hunyuan");
    write(&hunyuan, "requirements.txt", "six==1.16.0\n");
    write(&hunyuan, "README.md", "```\nconda install pytorch==2.4.0 torchvision==0.19.0 pytorch-cuda=12.4 -c pytorch\npip install -r requirements.txt\n```\n");
    let (ok, said) = init(&hunyuan, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&hunyuan);
    assert!(
        recipe.contains("\"torch==2.4.0\"") && recipe.contains("\"torchvision==0.19.0\""),
        "{recipe}\n{said}"
    );
    assert!(
        said.contains(
            "README.md:2: no manifest names torch; torch==2.4.0, torchvision==0.19.0 from the README"
        ),
        "{said}"
    );

    let flux = tmp.path().join("flux");
    write(
        &flux,
        "pyproject.toml",
        "[project]\nname = \"flux\"\nversion = \"0.1\"\ndependencies = [\"six==1.16.0\"]\n\
         [project.optional-dependencies]\nweb = [\"idna==3.7\"]\nall = [\"flux[web]\"]\ntrt = [\"certifi==2024.2.2\"]\n",
    );
    write(&flux, "README.md", "Install:\n\n    pip install -e \".[all]\"\n");
    let (ok, said) = init(&flux, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&flux);
    assert!(
        recipe.contains("\"idna==3.7\"") && !recipe.contains("certifi==") && !recipe.contains("\"flux["),
        "{recipe}\n{said}"
    );
    assert!(said.contains("optional dependencies `web` (1), as "), "{said}");

    // text-generation-inference: no manifest at the top level; the Dockerfile syncs `server/`.
    let tgi = tmp.path().join("tgi-server");
    write(
        &tgi,
        "Dockerfile",
        "FROM nvidia/cuda:12.4.0-base-ubuntu22.04\nCOPY server server\n\
         RUN cd server && uv sync --frozen --extra gen --active && uv pip install six==1.16.0\n",
    );
    write(
        &tgi.join("server"),
        "pyproject.toml",
        "[project]\nname = \"text-generation-server\"\nversion = \"2.0\"\ndependencies = [\"idna==3.7\"]\n\
         [project.optional-dependencies]\ngen = [\"certifi==2024.2.2\"]\nrocm = [\"charset-normalizer==3.3.2\"]\n",
    );
    write(&tgi.join("server"), "requirements_cuda.txt", "urllib3==2.2.1\n");
    let (ok, said) = init(&tgi, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = recipe_checks(&tgi);
    assert!(recipe.contains("path = \"server\""), "{recipe}");
    for pin in ["six==1.16.0", "idna==3.7", "certifi==2024.2.2"] {
        assert!(recipe.contains(&format!("\"{pin}\"")), "{pin}\n{recipe}\n{said}");
    }
    assert!(
        !recipe.contains("urllib3") && !recipe.contains("charset") && recipe.contains("jammy"),
        "{recipe}\n{said}"
    );
    assert!(said.contains("Dockerfile:3: the Dockerfile installs the Python project in server/"), "{said}");
}

/// A uv workspace without a lock: the member `[tool.uv.sources]` names (`{ workspace = true }`)
/// and a project at a `path` each become a `[[source]]` installed as a wheel, in place of their
/// requirement; the rest are the recipe's packages.
#[test]
fn uv_workspace_members_and_path_projects_become_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "pyproject.toml",
        "[project]\nname = \"robot\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
         dependencies = [\"six==1.16.0\", \"robot-client\", \"vendored-kit\"]\n\n\
         [tool.uv.sources]\nrobot-client = { workspace = true }\nvendored-kit = { path = \"third_party/kit\" }\n\n\
         [tool.uv.workspace]\nmembers = [\"packages/*\"]\n",
    );
    write(
        dir,
        "packages/robot-client/pyproject.toml",
        "[project]\nname = \"robot-client\"\nversion = \"0.2.0\"\ndependencies = [\"idna==3.7\"]\n",
    );
    write(
        dir,
        "third_party/kit/setup.py",
        "from setuptools import setup\nsetup(name='vendored-kit', version='1.0')\n",
    );
    let (ok, said) = init(dir, &["--offline"]);
    assert!(ok, "{said}");
    let recipe = std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap();
    assert!(recipe.contains("\"six==1.16.0\""), "{recipe}");
    assert!(!recipe.contains("  \"robot-client") && !recipe.contains("  \"vendored-kit"), "{recipe}");
    assert!(
        recipe.contains(
            "[[source]]\nname = \"robot-client\"\npath = \"packages/robot-client\"\ndest = \"/workspace/robot-client\"\ninstall = \"wheel\""
        ),
        "{recipe}"
    );
    assert!(recipe.contains("name = \"vendored-kit\"\npath = \"third_party/kit\""), "{recipe}");
    assert!(said.contains("is a [[source]] of its own"), "{said}");
}

/// flash-attn from the index: it has no wheel, and its `setup.py` imports torch, which its
/// build system does not require (an isolated build fails). The recipe init writes builds it
/// against the image's torch, with the helpers its setup.py imports and its dependencies as
/// its `PKG-INFO` says; the recipe validates.
#[test]
fn a_cuda_extension_from_source_is_built_against_the_images_torch() {
    if !have_uv() {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(dir, "requirements.txt", "torch==2.8.0\nflash-attn==2.8.3\n");
    let (_, said) = init(dir, &[]);
    if said.contains("could not reach the index") {
        eprintln!("SKIPPED: the index cannot be reached: {said}");
        return;
    }
    let recipe = std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap_or_default();
    for wanted in [
        "no_isolation = [\"flash-attn\"]",
        "\"flash-attn\" = [\"ninja\", \"packaging\", \"psutil\", \"setuptools\", \"wheel\"]",
        "[python.build.dependency_metadata]",
        "\"flash-attn\" = [\"torch\", \"einops\"]",
    ] {
        assert!(recipe.contains(wanted), "{wanted:?} not in\n{recipe}\n{said}");
    }
    assert!(said.contains("flash-attn 2.8.3: no wheel, and its setup.py imports torch"), "{said}");
    validates(&dir.join("stackbuild.toml"));
}

/// A `uv.lock` that installs the project and a workspace member from their trees (`source = {
/// editable = ... }`, uv's default for a packaged project): both become `[[source]]`s installed as
/// wheels beside `[python] lock`; a project without a build system is `virtual` in the lock and
/// stays uninstalled, as `uv sync` leaves it.
#[test]
fn a_uv_lock_that_installs_the_project_and_a_member() {
    if !have_uv() {
        eprintln!("SKIPPED: uv is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    let setuptools =
        "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n";
    write(
        &dir,
        "pyproject.toml",
        &format!(
            "{setuptools}[project]\nname = \"app\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\n\
             dependencies = [\"six==1.16.0\", \"client\"]\n[tool.uv.sources]\nclient = {{ workspace = true }}\n\
             [tool.uv.workspace]\nmembers = [\"packages/client\"]\n"
        ),
    );
    write(
        &dir,
        "packages/client/pyproject.toml",
        &format!(
            "{setuptools}[project]\nname = \"client\"\nversion = \"0.2.0\"\nrequires-python = \">=3.11\"\n"
        ),
    );
    let out = Command::new("uv").args(["lock", "-q"]).current_dir(&dir).output().unwrap();
    if !out.status.success() {
        eprintln!("SKIPPED: uv lock could not reach the index: {}", text(&out.stderr));
        return;
    }
    let (_, said) = init(&dir, &[]);
    let recipe = std::fs::read_to_string(dir.join("stackbuild.toml")).unwrap_or_default();
    assert!(recipe.contains("lock = \"uv.lock\""), "{recipe}\n{said}");
    assert!(
        recipe.contains("path = \".\"\ndest = \"/workspace/app\"\ninstall = \"wheel\""),
        "{recipe}\n{said}"
    );
    assert!(recipe.contains("name = \"client\"\npath = \"packages/client\""), "{recipe}");
    assert!(said.contains("installs it from its tree"), "{said}");
    validates(&dir.join("stackbuild.toml"));

    // Without a build system the root is virtual: not installed.
    let virt = tmp.path().join("virtual");
    write(
        &virt,
        "pyproject.toml",
        "[project]\nname = \"v\"\nversion = \"0.1.0\"\nrequires-python = \">=3.11\"\ndependencies = [\"six==1.16.0\"]\n",
    );
    assert!(Command::new("uv").args(["lock", "-q"]).current_dir(&virt).output().unwrap().status.success());
    let (_, said) = init(&virt, &[]);
    let recipe = std::fs::read_to_string(virt.join("stackbuild.toml")).unwrap_or_default();
    assert!(!recipe.contains("install = \"wheel\""), "{recipe}\n{said}");
}
