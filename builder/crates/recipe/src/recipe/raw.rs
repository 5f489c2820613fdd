//! The recipe as serde reads it: every leaf a [`toml::Spanned`], so validation can point at it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

pub(super) type S = Spanned<String>;

/// `[host] platform`: one platform or a list of them, for the schema.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(super) enum PlatformList {
    /// One platform (`"wsl2"`).
    One(String),
    /// Several (`["linux", "jetson"]`).
    Several(Vec<String>),
}

/// A stackbuild recipe: the image, its base, its Python stack with CUDA, sources, patches and
/// what the host must provide (docs/recipes.md).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Recipe")]
pub(super) struct RawRecipe {
    #[schemars(with = "RawImage")]
    pub(super) image: Spanned<RawImage>,
    #[schemars(with = "RawBase")]
    pub(super) base: Spanned<RawBase>,
    #[schemars(with = "Option<RawPython>")]
    pub(super) python: Option<Spanned<RawPython>>,
    #[schemars(with = "Option<RawCuda>")]
    pub(super) cuda: Option<Spanned<RawCuda>>,
    #[serde(default)]
    #[schemars(with = "Vec<RawSource>")]
    pub(super) source: Vec<Spanned<RawSource>>,
    #[serde(default)]
    #[schemars(with = "Vec<RawPatch>")]
    pub(super) patch: Vec<Spanned<RawPatch>>,
    #[serde(default)]
    pub(super) host: Option<RawHost>,
    #[serde(default)]
    pub(super) audit: Option<RawAudit>,
}

/// `[audit]`: what the image audit accepts.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Audit")]
pub(super) struct RawAudit {
    #[serde(default)]
    #[schemars(with = "Vec<RawAuditIgnore>")]
    pub(super) ignore: Vec<Spanned<RawAuditIgnore>>,
}

/// `[[audit.ignore]]`: an object the audit accepts unresolved, with the reason.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "AuditIgnore")]
pub(super) struct RawAuditIgnore {
    #[schemars(with = "String")]
    pub(super) path: S,
    #[schemars(with = "String")]
    pub(super) reason: S,
}

/// `[image]`: the image's name, tag, platforms and config.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Image")]
pub(super) struct RawImage {
    #[schemars(with = "String")]
    pub(super) name: S,
    #[schemars(with = "Option<String>")]
    pub(super) tag: Option<S>,
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) platforms: Option<Spanned<Vec<S>>>,
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) entrypoint: Option<Vec<S>>,
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) cmd: Option<Vec<S>>,
    #[schemars(with = "Option<String>")]
    pub(super) workdir: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) user: Option<S>,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub(super) env: BTreeMap<S, S>,
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub(super) labels: BTreeMap<S, S>,
}

/// `[base]`: exactly one of `scratch`, `oci`, `archive`, `docker`, `registry`, `debian`, `ubuntu`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Base")]
pub(super) struct RawBase {
    #[schemars(with = "Option<bool>")]
    pub(super) scratch: Option<Spanned<bool>>,
    #[schemars(with = "Option<String>")]
    pub(super) oci: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) archive: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) docker: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) registry: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) debian: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) ubuntu: Option<S>,
    #[schemars(with = "Option<Vec<String>>")]
    pub(super) packages: Option<Spanned<Vec<S>>>,
    #[schemars(with = "Option<String>")]
    pub(super) mirror: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) variant: Option<S>,
}

/// `[python]`: the interpreter version, the pinned packages, constraints, the index and
/// the recipe's own wheels.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Python")]
pub(super) struct RawPython {
    #[schemars(with = "String")]
    pub(super) version: S,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) packages: Vec<S>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) constraints: Vec<S>,
    /// Requirements that replace every requirement of the same name in the graph, as uv's
    /// `--override` and `override-dependencies` do (`tensorrt ; sys_platform == 'never'` drops a
    /// dependency; `numpy<2` lifts a bound a package declares).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) overrides: Vec<S>,
    #[schemars(with = "Option<String>")]
    pub(super) index: Option<S>,
    /// More indexes, searched as pip's `--extra-index-url` and uv's are (`PyTorch`'s per-CUDA
    /// index, a private one).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) extra_index: Vec<S>,
    /// Directories or pages of wheels, as pip's and uv's `--find-links` (relative paths are the
    /// recipe's directory's).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) find_links: Vec<S>,
    #[serde(default)]
    #[schemars(with = "Vec<RawWheel>")]
    pub(super) wheel: Vec<Spanned<RawWheel>>,
    pub(super) bytecode: Option<bool>,
    /// A lock the project already has, installed as it is: `uv.lock` or a PEP 751
    /// `pylock.toml`, relative to the recipe.
    #[schemars(with = "Option<String>")]
    pub(super) lock: Option<S>,
    /// How packages without a wheel are built from source (docs/recipes.md, "Source builds").
    // Not `Spanned`: toml gives no span to a table made implicitly by a header below it
    // (`[python.build.env]` with no `[python.build]`), and fails to read it as one.
    #[schemars(with = "Option<RawBuild>")]
    pub(super) build: Option<RawBuild>,
}

/// `[python.build]`: how packages that have no wheel for the image are built from source.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Build")]
pub(super) struct RawBuild {
    /// Debian packages of the build root, besides the base's own and the default
    /// `build-essential` and `python3.X-dev` (headers of C libraries a package compiles against).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) packages: Vec<S>,
    /// Packages never built from source: a wheel, or resolution fails (uv's `--no-build-package`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) no_build: Vec<S>,
    /// Packages built with the image's locked wheels importable (uv's
    /// `--no-build-isolation-package`): CUDA extensions that import torch in `setup.py`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) no_isolation: Vec<S>,
    /// Build requirements a package needs but does not declare, by package (uv's
    /// `extra-build-dependencies`).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Vec<String>>")]
    pub(super) extra_requires: BTreeMap<String, Vec<S>>,
    /// The dependencies of a source package, given, so resolution does not prepare its metadata
    /// (uv's `dependency-metadata`): packages whose `setup.py` imports torch before it can say
    /// what it requires (flash-attn), by package.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Vec<String>>")]
    pub(super) dependency_metadata: BTreeMap<String, Vec<S>>,
    /// Environment variables of a package's build, by package: the switches its build script
    /// reads (`FLASH_ATTENTION_FORCE_BUILD = "TRUE"`: compile, do not download a prebuilt wheel).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, BTreeMap<String, String>>")]
    pub(super) env: BTreeMap<String, Spanned<BTreeMap<String, String>>>,
    /// `TORCH_CUDA_ARCH_LIST` of CUDA extensions (`"8.0;9.0+PTX"`).
    #[schemars(with = "Option<String>")]
    pub(super) cuda_arch_list: Option<S>,
    /// Most memory one build may use, in MiB (default: three quarters of the machine's).
    pub(super) memory_mib: Option<u64>,
    /// Most seconds one build may run (default: 7200).
    pub(super) timeout_s: Option<u64>,
    /// Parallel compile jobs (`MAX_JOBS`; default: from cores and memory).
    pub(super) jobs: Option<u32>,
}

/// `[[python.wheel]]`: a wheel file the recipe supplies itself.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Wheel")]
pub(super) struct RawWheel {
    #[schemars(with = "String")]
    pub(super) path: S,
    #[schemars(with = "Option<String>")]
    pub(super) sha256: Option<S>,
}

/// `[cuda]`: the CUDA and cuDNN the author expects, checked against the wheels.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Cuda")]
pub(super) struct RawCuda {
    #[schemars(with = "String")]
    pub(super) version: S,
    #[schemars(with = "Option<String>")]
    pub(super) cudnn: Option<S>,
}

/// `[[source]]`: a git commit or a local directory staged into the image at `dest`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Source")]
pub(super) struct RawSource {
    #[schemars(with = "String")]
    pub(super) name: S,
    #[schemars(with = "Option<String>")]
    pub(super) git: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) path: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) commit: Option<S>,
    #[schemars(with = "String")]
    pub(super) dest: S,
    /// `"wheel"`: the tree is a Python project, built into a wheel in the sandbox and installed
    /// with its dependencies (console scripts on PATH), besides being copied to `dest`.
    #[schemars(with = "Option<String>")]
    pub(super) install: Option<S>,
    /// With `install`: the project's optional dependencies to install too (`pip install
    /// ".[train,eval]"`), each a PEP 685 extra name.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) extras: Vec<S>,
}

/// `[[patch]]`: a find/replace or unified diff applied to a package or a source.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Patch")]
pub(super) struct RawPatch {
    #[schemars(with = "String")]
    pub(super) name: S,
    #[schemars(with = "Option<String>")]
    pub(super) package: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) source: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) file: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) find: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) replace: Option<S>,
    #[schemars(with = "Option<i64>")]
    pub(super) count: Option<Spanned<i64>>,
    #[schemars(with = "Option<String>")]
    pub(super) diff: Option<S>,
}

/// `[host]`: what the host must provide beyond what the stack implies.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Host")]
pub(super) struct RawHost {
    #[schemars(with = "Option<String>")]
    pub(super) driver: Option<S>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) kernel_deny: Vec<S>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) modules: Vec<S>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) modules_deny: Vec<S>,
    #[schemars(with = "Option<String>")]
    pub(super) gpus: Option<S>,
    #[schemars(with = "Option<String>")]
    pub(super) arch: Option<S>,
    /// `"wsl2"` or `["linux", "jetson"]`.
    #[schemars(with = "Option<PlatformList>")]
    pub(super) platform: Option<Spanned<toml::Value>>,
}
