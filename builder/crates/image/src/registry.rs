//! A client of the OCI distribution API: push an image layout to a registry, pull an image from
//! one into a layout.
//!
//! The protocol is the OCI distribution spec
//! (<https://github.com/opencontainers/distribution-spec/blob/main/spec.md>), as served by the
//! CNCF distribution registry (`docker-registry` in Debian) and the hosted registries:
//!
//! - push: `HEAD /v2/<name>/blobs/<digest>` for every blob, upload only the missing ones
//!   (cross-repository mount first when asked to), in one `PUT` when a blob fits in one chunk
//!   and in resumable `PATCH` chunks otherwise, then `PUT /v2/<name>/manifests/<tag>` with the
//!   layout's manifest bytes unchanged, so the digest the registry computes is the layout's;
//! - pull: the manifest (an index or Docker manifest list picks one platform), then every blob,
//!   hashed while it streams to disk and renamed into place only when its digest matches.
//!
//! Authentication follows Docker's token flow
//! (<https://distribution.github.io/distribution/spec/auth/token/>): anonymous first; a `401`
//! with `WWW-Authenticate: Bearer realm=..,service=..` makes the client fetch a token for the
//! repository scope (with the user's credentials, if any, as HTTP Basic) and retry; `Basic`
//! challenges are answered with the credentials directly. Credentials come from
//! `STACKBUILD_REGISTRY_USER`/`STACKBUILD_REGISTRY_PASSWORD` or the `auths` of Docker's
//! `config.json`.
//!
//! There is no default registry: every [`Reference`] names its host.

mod auth;
mod client;
#[cfg(test)]
mod fake;
mod pull;
mod push;
mod reference;
mod remote_cache;
#[cfg(test)]
mod tests;

pub use auth::Credentials;
pub use client::Client;
pub use pull::{pull, pull_with, PullOptions};
pub use push::push_layout;
pub use push::push_layout_with;
pub use push::push_referrer;
pub use push::PushOptions;
pub use push::PushReport;
pub use push::ReferrerReport;
pub use push::Subject;
pub(crate) use push::MEDIA_TYPE_EMPTY;
pub use reference::Reference;
pub use remote_cache::RemoteCache;

use crate::oci::OciError;
use stackbuild_common::{io_err, IoError};

/// Errors of registry operations.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// An image reference could not be parsed.
    #[error("invalid image reference {reference:?}: {reason}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An image reference does not name a registry.
    #[error(
        "image reference {reference:?} names no registry host: write HOST[:PORT]/NAME[:TAG] \
         (there is no default registry)"
    )]
    NoRegistryHost {
        /// The reference as given.
        reference: String,
    },
    /// The registry could not be reached or the connection failed.
    #[error("{what}: {method} {url}: {source}")]
    Transport {
        /// What was being done (`upload of blob sha256:..`).
        what: String,
        /// The HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// The underlying error.
        #[source]
        source: Box<ureq::Transport>,
    },
    /// The registry answered with an unexpected status.
    #[error("{what}: {method} {url}: HTTP {status}: {body}")]
    Http {
        /// What was being done.
        what: String,
        /// The HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// The registry's error (`CODE: message`), or the start of the body.
        body: String,
    },
    /// The registry refused the credentials (or wants some and there are none).
    #[error("{what}: {registry} refused access (HTTP 401: {body}); {hint}")]
    Unauthorized {
        /// What was being done.
        what: String,
        /// The registry.
        registry: String,
        /// The registry's error.
        body: String,
        /// What the user can do.
        hint: String,
    },
    /// Getting a bearer token failed.
    #[error("token for {scope} from {realm}: {reason}")]
    Token {
        /// The token endpoint.
        realm: String,
        /// The scope asked for.
        scope: String,
        /// What went wrong.
        reason: String,
    },
    /// Credentials could not be read.
    #[error("credentials from {source_name}: {reason}")]
    Credentials {
        /// Where they were read from (a path or environment variables).
        source_name: String,
        /// What is wrong.
        reason: String,
    },
    /// Content does not match its digest (or size).
    #[error("{what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The blob or manifest.
        what: String,
        /// The expected digest or size.
        expected: String,
        /// The digest or size seen.
        actual: String,
    },
    /// A manifest or index is malformed or of a kind this client does not handle.
    #[error("{what}: {reason}")]
    Manifest {
        /// The manifest (reference or digest).
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// An index has no manifest for the wanted platform.
    #[error("{reference} has no image for {wanted} (it has: {available})")]
    NoPlatform {
        /// The reference pulled.
        reference: String,
        /// The platform asked for.
        wanted: String,
        /// The platforms present.
        available: String,
    },
    /// A chunked upload or a download did not complete within the allowed attempts.
    #[error("{what}: gave up after {attempts} attempts at offset {offset}: {last}")]
    Transfer {
        /// The blob.
        what: String,
        /// Attempts made.
        attempts: u32,
        /// Bytes the registry had confirmed.
        offset: u64,
        /// The last failure.
        last: String,
    },
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// A digest is malformed (or not sha256).
    #[error(transparent)]
    Digest(#[from] stackbuild_cache::CacheError),
    /// The layout could not be read.
    #[error(transparent)]
    Layout(#[from] OciError),
}
