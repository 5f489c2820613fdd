//! Pushing an OCI image layout to a registry.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::client::MAX_MANIFEST;
use super::client::{http_error, is_retryable_status, resolve_location, with_query, Body, Req, Session};
use super::reference::check_repository;
use super::{io_err, Client, Reference, RegistryError};
use crate::oci::{self, MEDIA_TYPE_INDEX, MEDIA_TYPE_MANIFEST};
use stackbuild_cache::sha256_hex;

mod referrers;
pub use referrers::push_referrer;
pub use referrers::ReferrerReport;
pub use referrers::Subject;
pub(crate) use referrers::MEDIA_TYPE_EMPTY;

/// Options of [`push_layout_with`].
#[derive(Clone, Debug, Default)]
pub struct PushOptions<'a> {
    /// A repository of the same registry that may already hold the blobs: missing blobs are
    /// mounted from it (`POST ..uploads/?mount=<digest>&from=<repo>`) before being uploaded.
    pub mount_from: Option<&'a str>,
}

/// What a push did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PushReport {
    /// Where the image went: `registry/repository:tag@digest`.
    pub reference: String,
    /// The digest of the manifest (the layout's, byte for byte).
    pub manifest_digest: String,
    /// Blobs uploaded.
    pub blobs_uploaded: usize,
    /// Blobs the registry already had.
    pub blobs_skipped: usize,
    /// Blobs mounted from [`PushOptions::mount_from`].
    pub blobs_mounted: usize,
    /// Bytes of blob content sent (retried chunks count again).
    pub bytes_uploaded: u64,
    /// HTTP requests sent (token requests and retries included).
    pub requests: u64,
}

/// One blob to push.
pub(super) struct Blob {
    /// `sha256:<hex>`.
    pub(super) digest: String,
    /// Its size in bytes.
    pub(super) size: u64,
    /// The file that holds it.
    pub(super) path: PathBuf,
}

/// Pushes the image tagged `tag` in the OCI layout `layout_dir` (`None`: its only image) to
/// `dest`, under `dest`'s tag (`latest` when it has neither tag nor digest).
pub fn push_layout(
    client: &Client,
    layout_dir: &Path,
    tag: Option<&str>,
    dest: &Reference,
) -> Result<PushReport, RegistryError> {
    push_layout_with(client, layout_dir, tag, dest, &PushOptions::default())
}

/// [`push_layout`] with options.
///
/// Every blob is checked with `HEAD` and only the missing ones are sent; then the manifest is
/// put with its own media type, as the exact bytes of the layout's manifest blob, so its digest
/// is the layout's. A `dest` with a digest must carry the layout's manifest digest.
pub fn push_layout_with(
    client: &Client,
    layout_dir: &Path,
    tag: Option<&str>,
    dest: &Reference,
    options: &PushOptions<'_>,
) -> Result<PushReport, RegistryError> {
    let index = oci::read_layout_index(layout_dir, tag)?;
    let top_digest = match &index {
        Some((_, digest, _)) => digest.clone(),
        None => oci::read_layout(layout_dir, tag)?.manifest_digest,
    };
    if let Some(digest) = &dest.digest {
        if *digest != top_digest {
            return Err(RegistryError::DigestMismatch {
                what: format!("push to {dest}"),
                expected: digest.clone(),
                actual: top_digest,
            });
        }
    }
    let target = dest.tag.as_deref().or(dest.digest.as_deref()).unwrap_or("latest").to_string();

    let mount_from = options.mount_from.filter(|from| *from != dest.repository);
    if let Some(from) = mount_from {
        check_repository(from)
            .map_err(|reason| RegistryError::BadReference { reference: from.to_string(), reason })?;
    }
    let mut scope = format!("repository:{}:pull,push", dest.repository);
    if let Some(from) = mount_from {
        let _ = write!(scope, " repository:{from}:pull");
    }
    let mut pusher = Pusher::new(client, dest, &scope);
    pusher.report.manifest_digest.clone_from(&top_digest);
    if let Some((bytes, digest, platforms)) = &index {
        // A multi-platform image: each platform's image by digest, then the index under the tag
        // (a registry refuses an index whose manifests it does not have).
        for platform in platforms {
            let image = oci::read_layout_for(layout_dir, tag, Some(platform))?;
            let by_digest = image.manifest_digest.clone();
            pusher.push_image(layout_dir, &image, &by_digest, mount_from)?;
        }
        pusher.put_manifest(&target, bytes, MEDIA_TYPE_INDEX, digest)?;
    } else {
        let image = oci::read_layout(layout_dir, tag)?;
        pusher.push_image(layout_dir, &image, &target, mount_from)?;
    }
    let mut report = pusher.report;
    report.requests = pusher.session.requests;
    let tag_part =
        if dest.tag.is_some() || dest.digest.is_none() { format!(":{target}") } else { String::new() };
    report.reference = format!("{}/{}{tag_part}@{top_digest}", dest.registry, dest.repository);
    Ok(report)
}

impl Pusher<'_, '_> {
    /// Pushes one image's blobs (the config first, then the layers, each distinct blob once)
    /// and puts its manifest under `target` (a tag or its digest), as the exact bytes of the
    /// layout's manifest blob, so its digest is the layout's.
    fn push_image(
        &mut self,
        layout_dir: &Path,
        image: &oci::LayoutImage,
        target: &str,
        mount_from: Option<&str>,
    ) -> Result<(), RegistryError> {
        let blobs_dir = layout_dir.join("blobs").join("sha256");
        let manifest_path = blobs_dir.join(sha256_hex(&image.manifest_digest)?);
        let manifest = read_manifest_blob(&manifest_path, &image.manifest_digest)?;
        let media_type = image.manifest.media_type.clone().unwrap_or_else(|| MEDIA_TYPE_MANIFEST.to_string());
        let mut blobs: Vec<Blob> = Vec::new();
        let config_path = blobs_dir.join(sha256_hex(&image.manifest.config.digest)?);
        blobs.push(Blob {
            digest: image.manifest.config.digest.clone(),
            size: image.manifest.config.size,
            path: config_path,
        });
        for layer in &image.layers {
            if !blobs.iter().any(|b| b.digest == layer.digest) {
                blobs.push(Blob { digest: layer.digest.clone(), size: layer.size, path: layer.path.clone() });
            }
        }
        for blob in &blobs {
            let size = fs::metadata(&blob.path).map_err(io_err("reading", &blob.path))?.len();
            if size != blob.size {
                return Err(RegistryError::DigestMismatch {
                    what: format!("blob {} at {}", blob.digest, blob.path.display()),
                    expected: format!("{} bytes", blob.size),
                    actual: format!("{size} bytes"),
                });
            }
            self.push_blob(blob, mount_from)?;
        }
        self.put_manifest(target, &manifest, &media_type, &image.manifest_digest)
    }
}

/// Reads the raw manifest blob and checks it against its digest.
fn read_manifest_blob(path: &Path, digest: &str) -> Result<Vec<u8>, RegistryError> {
    let file = File::open(path).map_err(io_err("opening", path))?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST + 1).read_to_end(&mut bytes).map_err(io_err("reading", path))?;
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err(RegistryError::Manifest {
            what: path.display().to_string(),
            reason: format!("larger than {MAX_MANIFEST} bytes"),
        });
    }
    let actual = stackbuild_common::sha256_bytes(&bytes);
    if actual != digest {
        return Err(RegistryError::DigestMismatch {
            what: format!("manifest {}", path.display()),
            expected: digest.to_string(),
            actual,
        });
    }
    Ok(bytes)
}

/// Where a push goes.
#[derive(Clone, Copy)]
struct Target<'a> {
    dest: &'a Reference,
    scope: &'a str,
}

impl<'a> Target<'a> {
    fn req<'r>(self, what: &'r str, method: &'static str, url: String, body: Body<'r>) -> Req<'r>
    where
        'a: 'r,
    {
        Req { what, method, url, registry: &self.dest.registry, scope: self.scope, headers: Vec::new(), body }
    }
}

/// The state of one push.
pub(super) struct Pusher<'a, 'c> {
    session: Session<'c>,
    target: Target<'a>,
    dest: &'a Reference,
    /// `http(s)://registry/v2/<name>`.
    base: String,
    report: PushReport,
}

impl<'a, 'c> Pusher<'a, 'c> {
    /// A pusher into `dest`'s repository with the token `scope`, its report empty.
    pub(super) fn new(client: &'c Client, dest: &'a Reference, scope: &'a str) -> Self {
        Pusher {
            session: client.session(),
            target: Target { dest, scope },
            dest,
            base: format!("{}/v2/{}", client.base_url(&dest.registry), dest.repository),
            report: PushReport::default(),
        }
    }

    /// Checks, mounts or uploads one blob.
    pub(super) fn push_blob(&mut self, blob: &Blob, mount_from: Option<&str>) -> Result<(), RegistryError> {
        let what = format!(
            "blob {} ({} bytes) to {}/{}",
            blob.digest, blob.size, self.dest.registry, self.dest.repository
        );
        let head =
            self.target.req(&what, "HEAD", format!("{}/blobs/{}", self.base, blob.digest), Body::Empty);
        let resp = self.session.send_retrying(&head)?;
        match resp.status() {
            200 => {
                self.report.blobs_skipped += 1;
                return Ok(());
            }
            404 => {}
            _ => return Err(http_error(&head, resp)),
        }
        let location = match mount_from {
            Some(from) => {
                let url = format!("{}/blobs/uploads/?mount={}&from={from}", self.base, blob.digest);
                let post = self.target.req(&what, "POST", url, Body::Empty);
                let resp = self.session.send_retrying(&post)?;
                match resp.status() {
                    201 => {
                        self.report.blobs_mounted += 1;
                        return Ok(());
                    }
                    202 => location(&post, &resp)?,
                    _ => return Err(http_error(&post, resp)),
                }
            }
            None => self.start_upload(&what)?,
        };
        if blob.size <= self.session.client.chunk_size() {
            self.upload_monolithic(&what, blob, location)?;
        } else {
            self.upload_chunked(&what, blob, location)?;
        }
        self.report.blobs_uploaded += 1;
        Ok(())
    }

    /// `POST /v2/<name>/blobs/uploads/` -> the upload's location.
    fn start_upload(&mut self, what: &str) -> Result<String, RegistryError> {
        let post = self.target.req(what, "POST", format!("{}/blobs/uploads/", self.base), Body::Empty);
        let resp = self.session.send_retrying(&post)?;
        if resp.status() == 202 {
            location(&post, &resp)
        } else {
            Err(http_error(&post, resp))
        }
    }

    /// One `PUT <location>?digest=` with the whole blob; a failed attempt starts a new upload.
    fn upload_monolithic(
        &mut self,
        what: &str,
        blob: &Blob,
        mut location: String,
    ) -> Result<(), RegistryError> {
        let max = self.session.client.max_attempts();
        let mut attempt = 1;
        loop {
            let Some(failure) = self.close_upload(what, &location, blob, true)? else { return Ok(()) };
            if attempt >= max {
                return Err(failure);
            }
            tracing::warn!("{failure}; retrying");
            std::thread::sleep(self.session.client.backoff(attempt));
            attempt += 1;
            if self.blob_exists(what, &blob.digest)? {
                return Ok(());
            }
            location = self.start_upload(what)?;
        }
    }

    /// Sends the closing `PUT <location>?digest=` once, with the whole blob as its body or none:
    /// `Ok(None)` when the registry took the blob, `Ok(Some(e))` for a failure worth retrying,
    /// `Err` for one that is not.
    fn close_upload(
        &mut self,
        what: &str,
        location: &str,
        blob: &Blob,
        with_data: bool,
    ) -> Result<Option<RegistryError>, RegistryError> {
        let body =
            if with_data { Body::File { path: &blob.path, offset: 0, len: blob.size } } else { Body::Empty };
        let mut put =
            self.target.req(what, "PUT", with_query(location, &format!("digest={}", blob.digest)), body);
        if with_data {
            put.headers.push(("Content-Type", "application/octet-stream".into()));
            self.report.bytes_uploaded += blob.size;
        }
        match self.session.send(&put) {
            Ok(resp) if (200..300).contains(&resp.status()) => {
                check_digest_header(what, &resp, &blob.digest).map(|()| None)
            }
            Ok(resp) if is_retryable_status(resp.status()) => Ok(Some(http_error(&put, resp))),
            Ok(resp) => Err(http_error(&put, resp)),
            Err(e @ RegistryError::Transport { .. }) => Ok(Some(e)),
            Err(e) => Err(e),
        }
    }

    /// Whether the registry has the blob (after an upload whose answer was lost).
    fn blob_exists(&mut self, what: &str, digest: &str) -> Result<bool, RegistryError> {
        let head = self.target.req(what, "HEAD", format!("{}/blobs/{digest}", self.base), Body::Empty);
        Ok(self.session.send_retrying(&head)?.status() == 200)
    }

    /// `PATCH` chunks with `Content-Range`, resuming from the registry's `Range` after a failed
    /// chunk, then the closing `PUT <location>?digest=`.
    fn upload_chunked(&mut self, what: &str, blob: &Blob, mut location: String) -> Result<(), RegistryError> {
        let chunk = self.session.client.chunk_size();
        let max = self.session.client.max_attempts();
        let mut offset = 0u64;
        let mut failures = 0u32;
        while offset < blob.size {
            let end = blob.size.min(offset.saturating_add(chunk));
            let body = Body::File { path: &blob.path, offset, len: end - offset };
            let mut patch = self.target.req(what, "PATCH", location.clone(), body);
            patch.headers.push(("Content-Type", "application/octet-stream".into()));
            patch.headers.push(("Content-Range", format!("{offset}-{}", end - 1)));
            self.report.bytes_uploaded += end - offset;
            let failure = match self.session.send(&patch) {
                Ok(resp) if resp.status() == 202 => {
                    if resp.header("location").is_some() {
                        location = location_of(&patch.url, &resp);
                    }
                    offset = match resp.header("range") {
                        Some(range) => range_end(range, end).unwrap_or(end),
                        None => end,
                    };
                    if offset > end {
                        return Err(RegistryError::Transfer {
                            what: what.to_string(),
                            attempts: failures + 1,
                            offset,
                            last: format!(
                                "the registry reports {offset} bytes after a chunk ending at {end}"
                            ),
                        });
                    }
                    failures = 0;
                    continue;
                }
                Ok(resp) if is_retryable_status(resp.status()) || resp.status() == 416 => {
                    http_error(&patch, resp).to_string()
                }
                Ok(resp) => return Err(http_error(&patch, resp)),
                Err(e @ RegistryError::Transport { .. }) => e.to_string(),
                Err(e) => return Err(e),
            };
            failures += 1;
            if failures >= max {
                return Err(RegistryError::Transfer {
                    what: what.to_string(),
                    attempts: failures,
                    offset,
                    last: failure,
                });
            }
            tracing::warn!(
                "{what}: chunk at {offset} failed ({failure}); asking the registry where to resume"
            );
            std::thread::sleep(self.session.client.backoff(failures));
            // Where is the upload now? `GET <location>` -> 204 with `Range: 0-<last byte>`.
            let status = self.target.req(what, "GET", location.clone(), Body::Empty);
            match self.session.send(&status) {
                Ok(resp) if resp.status() == 204 || resp.status() == 200 => {
                    if resp.header("location").is_some() {
                        location = location_of(&status.url, &resp);
                    }
                    offset = resp.header("range").and_then(|r| range_end(r, offset)).unwrap_or(0);
                }
                Ok(resp) if resp.status() == 404 => {
                    // The registry forgot the upload: start again.
                    location = self.start_upload(what)?;
                    offset = 0;
                }
                Ok(_) | Err(RegistryError::Transport { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // The closing PUT carries no data.
        let mut attempt = 1;
        loop {
            let Some(failure) = self.close_upload(what, &location, blob, false)? else { return Ok(()) };
            if attempt >= max {
                return Err(failure);
            }
            std::thread::sleep(self.session.client.backoff(attempt));
            attempt += 1;
            if self.blob_exists(what, &blob.digest)? {
                return Ok(());
            }
        }
    }

    /// `PUT /v2/<name>/manifests/<target>` with the manifest's media type.
    pub(super) fn put_manifest(
        &mut self,
        target: &str,
        bytes: &[u8],
        media_type: &str,
        digest: &str,
    ) -> Result<(), RegistryError> {
        let what = format!("manifest {digest} to {}/{}:{target}", self.dest.registry, self.dest.repository);
        let mut put =
            self.target.req(&what, "PUT", format!("{}/manifests/{target}", self.base), Body::Bytes(bytes));
        put.headers.push(("Content-Type", media_type.to_string()));
        let resp = self.session.send_retrying(&put)?;
        if !(200..300).contains(&resp.status()) {
            return Err(http_error(&put, resp));
        }
        check_digest_header(&what, &resp, digest)
    }
}

/// The `Location` of a `202`, resolved; its absence is an error.
fn location(req: &Req<'_>, resp: &ureq::Response) -> Result<String, RegistryError> {
    match resp.header("location") {
        Some(_) => Ok(location_of(&req.url, resp)),
        None => Err(RegistryError::Http {
            what: req.what.to_string(),
            method: req.method.to_string(),
            url: req.url.clone(),
            status: resp.status(),
            body: "no Location header in the answer".into(),
        }),
    }
}

fn location_of(request_url: &str, resp: &ureq::Response) -> String {
    resolve_location(request_url, resp.header("location").unwrap_or_default())
}

/// The offset after the registry's `Range: 0-<last>` (also `bytes=0-<last>`).
///
/// distribution answers `0-0` both for an empty upload and for one byte
/// (<https://github.com/distribution/distribution/blob/v2.8.3/registry/handlers/blobupload.go>,
/// `blobUploadResponse`), so `0-0` means 1 only when 1 is what the caller expects.
pub(super) fn range_end(range: &str, expected: u64) -> Option<u64> {
    let range = range.trim();
    let range = range.strip_prefix("bytes=").unwrap_or(range);
    let (start, last) = range.split_once('-')?;
    let (start, last) = (start.trim().parse::<u64>().ok()?, last.trim().parse::<u64>().ok()?);
    if start != 0 {
        return None;
    }
    if last == 0 {
        return Some(u64::from(expected == 1));
    }
    last.checked_add(1)
}

/// A `Docker-Content-Digest` in the answer must be the digest sent.
fn check_digest_header(what: &str, resp: &ureq::Response, digest: &str) -> Result<(), RegistryError> {
    match resp.header("docker-content-digest") {
        Some(got) if got.starts_with("sha256:") && got != digest => Err(RegistryError::DigestMismatch {
            what: format!("{what} (digest the registry computed)"),
            expected: digest.to_string(),
            actual: got.to_string(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(range_end("0-1023", 0), Some(1024));
        assert_eq!(range_end("bytes=0-1023", 0), Some(1024));
        assert_eq!(range_end("0-0", 0), Some(0));
        assert_eq!(range_end("0-0", 1), Some(1));
        assert_eq!(range_end("0-0", 5), Some(0));
        assert_eq!(range_end("5-9", 0), None);
        assert_eq!(range_end("junk", 0), None);
        assert_eq!(range_end("0-", 0), None);
    }
}
