//! Attaching an artifact (the image's SBOM) to a pushed image as an OCI 1.1 referrer.
//!
//! OCI image-spec 1.1 ("Guidelines for Artifact Usage"): an artifact is an image manifest with
//! an `artifactType`, the empty config (`application/vnd.oci.empty.v1+json`, the two bytes `{}`),
//! its files as `layers`, and a `subject` descriptor naming the image it is about. It is put by
//! digest. OCI distribution-spec 1.1 ("Pushing Manifests with Subject"): a registry that indexes
//! referrers answers that `PUT` with an `OCI-Subject` header, and `GET /v2/<name>/referrers/<digest>`
//! then lists it. A registry without the referrers API (distribution 2.8, Debian's
//! `docker-registry`) does not: the client then keeps the list itself, as an image index under
//! the tag `sha256-<hex of the subject digest>` (the "referrers tag schema"), fetched, extended
//! with the new descriptor and put back.

use std::io::Read as _;

use super::super::client::{http_error, Body};
use super::{check_digest_header, Blob, Pusher};
use crate::oci::{MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST};
use crate::registry::client::MAX_MANIFEST;
use crate::registry::{io_err, Client, Reference, RegistryError};

/// The empty descriptor's media type (image-spec 1.1).
pub(crate) const MEDIA_TYPE_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// `sha256` of `{}`.
const EMPTY_DIGEST: &str = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

/// The image an artifact is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The image manifest's media type.
    pub media_type: String,
    /// Its digest.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

/// What attaching one artifact did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReferrerReport {
    /// The artifact manifest's digest.
    pub digest: String,
    /// Its `artifactType`.
    pub artifact_type: String,
    /// The image it refers to.
    pub subject: String,
    /// The registry indexed it (`OCI-Subject` in the answer); false: the referrers tag was used.
    pub referrers_api: bool,
    /// The referrers tag updated when the registry had no referrers API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_tag: Option<String>,
}

/// The artifact manifest for `bytes` of `artifact_type` about `subject`.
pub(super) fn artifact_manifest(subject: &Subject, artifact_type: &str, bytes: &[u8]) -> Vec<u8> {
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_TYPE_MANIFEST,
        "artifactType": artifact_type,
        "config": { "mediaType": MEDIA_TYPE_EMPTY, "digest": EMPTY_DIGEST, "size": 2, "data": "e30=" },
        "layers": [{ "mediaType": artifact_type, "digest": stackbuild_common::sha256_bytes(bytes), "size": bytes.len() }],
        "subject": { "mediaType": subject.media_type, "digest": subject.digest, "size": subject.size },
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The referrers tag of a subject digest: `sha256-<hex>`.
pub(super) fn referrers_tag(digest: &str) -> String {
    digest.replacen(':', "-", 1)
}

/// Pushes `bytes` as an artifact of `artifact_type` referring to `subject` in `dest`'s repository.
pub fn push_referrer(
    client: &Client,
    dest: &Reference,
    subject: &Subject,
    artifact_type: &str,
    bytes: &[u8],
) -> Result<ReferrerReport, RegistryError> {
    let scope = format!("repository:{}:pull,push", dest.repository);
    let mut pusher = Pusher::new(client, dest, &scope);
    let dir = tempfile::tempdir().map_err(io_err("creating", &std::env::temp_dir()))?;
    for content in [&b"{}"[..], bytes] {
        let digest = stackbuild_common::sha256_bytes(content);
        let path = dir.path().join(digest.trim_start_matches("sha256:"));
        std::fs::write(&path, content).map_err(io_err("writing", &path))?;
        pusher.push_blob(&Blob { digest, size: content.len() as u64, path }, None)?;
    }
    let manifest = artifact_manifest(subject, artifact_type, bytes);
    let digest = stackbuild_common::sha256_bytes(&manifest);
    let indexed = pusher.put_with_subject(&digest, &manifest, &digest)?;
    let mut report = ReferrerReport {
        digest: digest.clone(),
        artifact_type: artifact_type.to_owned(),
        subject: subject.digest.clone(),
        referrers_api: indexed,
        fallback_tag: None,
    };
    if !indexed {
        let tag = referrers_tag(&subject.digest);
        let descriptor = serde_json::json!({
            "mediaType": MEDIA_TYPE_MANIFEST,
            "digest": digest,
            "size": manifest.len(),
            "artifactType": artifact_type,
        });
        let mut index = pusher.get_index(&tag)?.unwrap_or_else(
            || serde_json::json!({ "schemaVersion": 2, "mediaType": MEDIA_TYPE_INDEX, "manifests": [] }),
        );
        let list = index.get_mut("manifests").and_then(serde_json::Value::as_array_mut).ok_or_else(|| {
            RegistryError::Manifest { what: tag.clone(), reason: "no manifests list".into() }
        })?;
        if !list.iter().any(|d| d["digest"] == descriptor["digest"]) {
            list.push(descriptor);
            let bytes = serde_json::to_vec(&index)
                .map_err(|e| RegistryError::Manifest { what: tag.clone(), reason: e.to_string() })?;
            let index_digest = stackbuild_common::sha256_bytes(&bytes);
            pusher.put_manifest(&tag, &bytes, MEDIA_TYPE_INDEX, &index_digest)?;
        }
        report.fallback_tag = Some(tag);
    }
    Ok(report)
}

impl Pusher<'_, '_> {
    /// Puts an image manifest by digest; whether the registry answered with `OCI-Subject`.
    fn put_with_subject(&mut self, target: &str, bytes: &[u8], digest: &str) -> Result<bool, RegistryError> {
        let what = format!("referrer {digest} to {}/{}", self.dest.registry, self.dest.repository);
        let mut put =
            self.target.req(&what, "PUT", format!("{}/manifests/{target}", self.base), Body::Bytes(bytes));
        put.headers.push(("Content-Type", MEDIA_TYPE_MANIFEST.to_string()));
        let resp = self.session.send_retrying(&put)?;
        if !(200..300).contains(&resp.status()) {
            return Err(http_error(&put, resp));
        }
        check_digest_header(&what, &resp, digest)?;
        Ok(resp.header("oci-subject").is_some())
    }

    /// The image index under `tag`, `None` when there is none.
    fn get_index(&mut self, tag: &str) -> Result<Option<serde_json::Value>, RegistryError> {
        let what = format!("referrers tag {tag} of {}/{}", self.dest.registry, self.dest.repository);
        let mut get = self.target.req(&what, "GET", format!("{}/manifests/{tag}", self.base), Body::Empty);
        get.headers.push(("Accept", MEDIA_TYPE_INDEX.to_string()));
        let resp = self.session.send_retrying(&get)?;
        match resp.status() {
            404 => Ok(None),
            200 => {
                let mut bytes = Vec::new();
                resp.into_reader()
                    .take(MAX_MANIFEST + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| RegistryError::Manifest { what: what.clone(), reason: e.to_string() })?;
                if bytes.len() as u64 > MAX_MANIFEST {
                    return Err(RegistryError::Manifest {
                        what,
                        reason: format!("larger than {MAX_MANIFEST} bytes"),
                    });
                }
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| RegistryError::Manifest { what, reason: e.to_string() })
            }
            _ => Err(http_error(&get, resp)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_manifests_follow_image_spec_1_1() {
        let subject = Subject {
            media_type: MEDIA_TYPE_MANIFEST.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 7,
        };
        let m: serde_json::Value =
            serde_json::from_slice(&artifact_manifest(&subject, "application/spdx+json", b"{}")).unwrap();
        assert_eq!(m["artifactType"], "application/spdx+json");
        assert_eq!(m["config"]["digest"], stackbuild_common::sha256_bytes(b"{}"));
        assert_eq!(m["subject"]["digest"], subject.digest);
        assert_eq!(m["layers"][0]["size"], 2);
        assert_eq!(referrers_tag(&subject.digest), format!("sha256-{}", "a".repeat(64)));
    }
}
