//! The image of one platform from its layers: the runtime configuration (the base's, with the
//! recipe's settings and the derived host requirements over it), the history and the
//! annotations. Nothing is written here; the parent writes the layout.

// Every step returns the build's one error type, as the rest of `build` does; its size is
// that type's concern (clippy's `result_large_err`), not each step's.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;

use stackcontract::image::{DerivedRequirement, LABEL_PREFIX, STACK_JSON_PATH};

use super::{BuildError, LayerReport};
use stackbuild_common::LayerBlob;
use stackbuild_common::Platform;
use stackbuild_image::{History, Image, ImageConfig, RuntimeConfig};
use stackbuild_recipe::Recipe;

/// The base's runtime configuration with the requirements and the recipe's settings over it:
/// requirements as `STACKBUILD_REQUIRE_*` variables and labels, then the recipe's own
/// environment, entrypoint, command, working directory, user and labels.
pub(super) fn runtime_config(
    recipe: &Recipe,
    base_config: RuntimeConfig,
    requirements: &[DerivedRequirement],
) -> RuntimeConfig {
    let mut config = base_config;
    if config.env.is_empty() {
        config.env.push("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    }
    let mut env: Vec<(String, String)> = config
        .env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut set = |k: &str, v: &str| {
        if let Some(e) = env.iter_mut().find(|(key, _)| key == k) {
            v.clone_into(&mut e.1);
        } else {
            env.push((k.to_owned(), v.to_owned()));
        }
    };
    if !requirements.is_empty() {
        set("NVIDIA_VISIBLE_DEVICES", "all");
        set("NVIDIA_DRIVER_CAPABILITIES", "compute,utility");
    }
    for r in requirements {
        set(&r.variable, &r.expr);
    }
    for (k, v) in &recipe.image.env {
        set(k, v);
    }
    config.env = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    if let Some(e) = &recipe.image.entrypoint {
        config.entrypoint = Some(e.clone());
    }
    if let Some(c) = &recipe.image.cmd {
        config.cmd = Some(c.clone());
    }
    if let Some(w) = &recipe.image.workdir {
        config.working_dir = Some(w.clone());
    }
    if let Some(u) = &recipe.image.user {
        config.user = Some(u.clone());
    }
    config.labels.extend(recipe.image.labels.clone());
    config.labels.insert(format!("{LABEL_PREFIX}recipe"), recipe.image.name.clone());
    config.labels.insert(format!("{LABEL_PREFIX}stack"), format!("/{STACK_JSON_PATH}"));
    if let Some(py) = &recipe.python {
        config.labels.insert(format!("{LABEL_PREFIX}python"), py.version.to_string());
    }
    for r in requirements {
        config
            .labels
            .insert(format!("{LABEL_PREFIX}require.{}", r.variable.to_ascii_lowercase()), r.expr.clone());
    }
    config
}

/// The image over `layers` (report, blob, `created_by`; base first): the image config keeps the
/// image-level fields of `base_image` that the build does not decide. Returns the layers'
/// reports beside it.
pub(super) fn image(
    recipe: &Recipe,
    platform: Platform,
    epoch: u64,
    base_image: ImageConfig,
    config: RuntimeConfig,
    layers: Vec<(LayerReport, LayerBlob, String)>,
) -> Result<(Image, Vec<LayerReport>), BuildError> {
    let created = stackcontract::time::rfc3339(epoch);
    let history = layers
        .iter()
        .map(|(_, _, by)| History {
            created: Some(created.clone()),
            created_by: Some(by.clone()),
            ..History::default()
        })
        .collect();
    let image_config = ImageConfig {
        created: Some(created.clone()),
        architecture: platform.architecture().to_owned(),
        os: platform.os().to_owned(),
        variant: None,
        os_version: base_image.os_version,
        os_features: base_image.os_features,
        author: base_image.author,
        config,
        rootfs: stackbuild_image::RootFs::default(),
        history,
    };
    let annotations = BTreeMap::from([
        ("org.opencontainers.image.created".to_owned(), created),
        ("org.opencontainers.image.title".to_owned(), recipe.image.name.clone()),
        ("org.opencontainers.image.version".to_owned(), recipe.image.tag.clone()),
    ]);
    let (reports, blobs): (Vec<LayerReport>, Vec<LayerBlob>) =
        layers.into_iter().map(|(r, b, _)| (r, b)).unzip();
    let image = Image::new(image_config, blobs, annotations)?;
    Ok((image, reports))
}
