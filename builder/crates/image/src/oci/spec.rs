//! The documents this builder writes, as oci-spec's image types
//! (<https://github.com/youki-dev/oci-spec-rs>, which follows
//! <https://github.com/opencontainers/image-spec>).
//!
//! The builder's own types in [`super`] stay the model it reads layouts and registries with: they
//! take Docker's `null`s, unknown media types and malformed digests as data and let the reader
//! report them with the path they came from, where oci-spec's would fail inside serde. Every
//! document written goes through the types here and then [`stackbuild_common::to_vec`], since
//! oci-spec keeps annotations and labels in `HashMap`s.
//!
//! oci-spec's `Config` has no field for Docker's `ArgsEscaped`, `Shell`, `Healthcheck` or
//! `OnBuild` (Docker image spec v1.2,
//! <https://github.com/moby/docker-image-spec/blob/main/spec.md>): a base image's are kept from
//! [`super::RuntimeConfig::other`] and added to the written `config` object as they were.

use std::collections::{BTreeMap, HashMap};

use oci_spec::image::{self as spec, Arch, Digest, MediaType, Os};
use serde_json::Value;

use super::{Descriptor, History, ImageConfig, Index, Manifest, OciError, Platform};

/// oci-spec's value for `s` when it writes `s` back unchanged, else `Other(s)`: its parsers map a
/// few spellings to another one (`armbe` reads as `arm64be`), and what is written must be what the
/// base or the recipe said.
fn exact<T: for<'a> From<&'a str> + std::fmt::Display>(s: &str, other: impl FnOnce(String) -> T) -> T {
    let parsed = T::from(s);
    if parsed.to_string() == s {
        parsed
    } else {
        other(s.to_owned())
    }
}

fn arch(s: &str) -> Arch {
    exact(s, Arch::Other)
}

fn os(s: &str) -> Os {
    exact(s, Os::Other)
}

fn media_type(s: &str) -> MediaType {
    exact(s, MediaType::Other)
}

fn digest(s: &str) -> Result<Digest, OciError> {
    s.parse().map_err(|source| OciError::Spec { what: format!("digest {s:?}"), source })
}

fn built<T>(what: &str, result: Result<T, oci_spec::OciSpecError>) -> Result<T, OciError> {
    result.map_err(|source| OciError::Spec { what: what.to_owned(), source })
}

/// `None` for an empty map, as the spec's optional maps are left out when empty.
fn map(m: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    (!m.is_empty()).then(|| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn list(v: &[String]) -> Option<Vec<String>> {
    (!v.is_empty()).then(|| v.to_vec())
}

fn platform(p: &Platform) -> spec::Platform {
    let mut out = spec::Platform::default();
    out.set_architecture(arch(&p.architecture));
    out.set_os(os(&p.os));
    out.set_variant(p.variant.clone());
    out
}

/// A descriptor.
pub(super) fn descriptor(d: &Descriptor) -> Result<spec::Descriptor, OciError> {
    let mut out = spec::Descriptor::new(media_type(&d.media_type), d.size, digest(&d.digest)?);
    out.set_annotations(map(&d.annotations));
    out.set_platform(d.platform.as_ref().map(platform));
    Ok(out)
}

/// An image manifest.
pub(super) fn manifest(m: &Manifest) -> Result<spec::ImageManifest, OciError> {
    let layers = m.layers.iter().map(descriptor).collect::<Result<Vec<_>, _>>()?;
    let mut out = built(
        "image manifest",
        spec::ImageManifestBuilder::default()
            .schema_version(m.schema_version)
            .config(descriptor(&m.config)?)
            .layers(layers)
            .build(),
    )?;
    out.set_media_type(m.media_type.as_deref().map(media_type));
    out.set_annotations(map(&m.annotations));
    Ok(out)
}

/// An image index.
pub(super) fn index(i: &Index) -> Result<spec::ImageIndex, OciError> {
    let manifests = i.manifests.iter().map(descriptor).collect::<Result<Vec<_>, _>>()?;
    let mut out = built(
        "image index",
        spec::ImageIndexBuilder::default().schema_version(i.schema_version).manifests(manifests).build(),
    )?;
    out.set_media_type(i.media_type.as_deref().map(media_type));
    out.set_annotations(map(&i.annotations));
    Ok(out)
}

fn history(h: &History) -> spec::History {
    let mut out = spec::History::default();
    out.set_created(h.created.clone());
    out.set_created_by(h.created_by.clone());
    out.set_author(h.author.clone());
    out.set_comment(h.comment.clone());
    out.set_empty_layer(h.empty_layer.then_some(true));
    out
}

/// The keys of a Go `map[string]struct{}` (`ExposedPorts`, `Volumes`) in `extra`, removed from
/// it; left there when it is anything else, to be written as it was.
fn take_go_set(extra: &mut BTreeMap<String, Value>, key: &str) -> Option<Vec<String>> {
    let Some(Value::Object(set)) = extra.get(key) else { return None };
    if !set.values().all(|v| v.as_object().is_some_and(serde_json::Map::is_empty)) {
        return None;
    }
    let keys = set.keys().cloned().collect();
    extra.remove(key);
    Some(keys)
}

/// The execution parameters, and the base's fields oci-spec has no type for.
fn runtime(c: &super::RuntimeConfig) -> (spec::Config, BTreeMap<String, Value>) {
    let mut extra = c.other.clone();
    let mut out = spec::Config::default();
    out.set_user(c.user.clone());
    out.set_env(list(&c.env));
    out.set_entrypoint(c.entrypoint.clone());
    out.set_cmd(c.cmd.clone());
    out.set_working_dir(c.working_dir.clone());
    out.set_labels(map(&c.labels));
    out.set_exposed_ports(take_go_set(&mut extra, "ExposedPorts"));
    out.set_volumes(take_go_set(&mut extra, "Volumes"));
    if let Some(Value::String(signal)) = extra.get("StopSignal") {
        out.set_stop_signal(Some(signal.clone()));
        extra.remove("StopSignal");
    }
    (out, extra)
}

/// An image config, as a JSON value: oci-spec's `ImageConfiguration` with the base's other
/// `config` fields added.
pub(super) fn config(c: &ImageConfig) -> Result<Value, OciError> {
    let (run, extra) = runtime(&c.config);
    let mut rootfs = spec::RootFs::default();
    rootfs.set_typ(c.rootfs.kind.clone());
    rootfs.set_diff_ids(c.rootfs.diff_ids.clone());
    let mut out = spec::ImageConfiguration::default();
    out.set_created(c.created.clone());
    out.set_author(c.author.clone());
    out.set_architecture(arch(&c.architecture));
    out.set_os(os(&c.os));
    out.set_os_version(c.os_version.clone());
    out.set_os_features(list(&c.os_features));
    out.set_variant(c.variant.clone());
    out.set_config(Some(run));
    out.set_rootfs(rootfs);
    out.set_history((!c.history.is_empty()).then(|| c.history.iter().map(history).collect()));
    let mut value =
        serde_json::to_value(&out).map_err(|source| OciError::Json { path: "config".into(), source })?;
    if let Some(Value::Object(config)) = value.get_mut("config") {
        for (key, field) in extra {
            config.entry(key).or_insert(field);
        }
    }
    Ok(value)
}
