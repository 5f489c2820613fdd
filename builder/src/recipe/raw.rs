//! The recipe as serde reads it: every leaf a [`toml::Spanned`], so validation can point at it.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

pub(super) type S = Spanned<String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecipe {
    pub(super) image: Spanned<RawImage>,
    pub(super) base: Spanned<RawBase>,
    pub(super) python: Option<Spanned<RawPython>>,
    pub(super) cuda: Option<Spanned<RawCuda>>,
    #[serde(default)]
    pub(super) source: Vec<Spanned<RawSource>>,
    #[serde(default)]
    pub(super) patch: Vec<Spanned<RawPatch>>,
    #[serde(default)]
    pub(super) host: Option<RawHost>,
    #[serde(default)]
    pub(super) audit: Option<RawAudit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    #[serde(default)]
    pub(super) ignore: Vec<Spanned<RawAuditIgnore>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuditIgnore {
    pub(super) path: S,
    pub(super) reason: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawImage {
    pub(super) name: S,
    pub(super) tag: Option<S>,
    pub(super) platforms: Option<Spanned<Vec<S>>>,
    pub(super) entrypoint: Option<Vec<S>>,
    pub(super) cmd: Option<Vec<S>>,
    pub(super) workdir: Option<S>,
    pub(super) user: Option<S>,
    #[serde(default)]
    pub(super) env: BTreeMap<S, S>,
    #[serde(default)]
    pub(super) labels: BTreeMap<S, S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBase {
    pub(super) scratch: Option<Spanned<bool>>,
    pub(super) oci: Option<S>,
    pub(super) archive: Option<S>,
    pub(super) docker: Option<S>,
    pub(super) registry: Option<S>,
    pub(super) debian: Option<S>,
    pub(super) ubuntu: Option<S>,
    pub(super) packages: Option<Spanned<Vec<S>>>,
    pub(super) mirror: Option<S>,
    pub(super) variant: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPython {
    pub(super) version: S,
    #[serde(default)]
    pub(super) packages: Vec<S>,
    #[serde(default)]
    pub(super) constraints: Vec<S>,
    pub(super) index: Option<S>,
    #[serde(default)]
    pub(super) wheel: Vec<Spanned<RawWheel>>,
    pub(super) bytecode: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWheel {
    pub(super) path: S,
    pub(super) sha256: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCuda {
    pub(super) version: S,
    pub(super) cudnn: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub(super) name: S,
    pub(super) git: Option<S>,
    pub(super) path: Option<S>,
    pub(super) commit: Option<S>,
    pub(super) dest: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPatch {
    pub(super) name: S,
    pub(super) package: Option<S>,
    pub(super) source: Option<S>,
    pub(super) file: Option<S>,
    pub(super) find: Option<S>,
    pub(super) replace: Option<S>,
    pub(super) count: Option<Spanned<i64>>,
    pub(super) diff: Option<S>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) driver: Option<S>,
    #[serde(default)]
    pub(super) kernel_deny: Vec<S>,
    #[serde(default)]
    pub(super) modules: Vec<S>,
    #[serde(default)]
    pub(super) modules_deny: Vec<S>,
    pub(super) gpus: Option<S>,
    pub(super) arch: Option<S>,
    /// `"wsl2"` or `["linux", "jetson"]`.
    pub(super) platform: Option<Spanned<toml::Value>>,
}
