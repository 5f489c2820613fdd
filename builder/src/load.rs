//! The local Docker daemon through bollard: `--load` streams an image archive into it
//! (`POST /images/load`), and a `docker = "NAME:TAG"` base is exported from it (`GET /images/{name}/get`).
//!
//! The archive is read in chunks and sent as the request body, so a multi-gigabyte image is
//! never held in memory. The API version is negotiated down to the daemon's, since Debian's
//! Docker 20.10 speaks API 1.41 and refuses newer clients.

use std::path::{Path, PathBuf};

use bollard::image::ImportImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use crate::io_error::IoError;

/// Why loading into Docker failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No daemon to talk to.
    #[error("cannot reach the Docker daemon ({0}); is dockerd running and /var/run/docker.sock reachable?")]
    Connect(#[source] bollard::errors::Error),
    /// The daemon refused the archive.
    #[error("docker refused {archive}: {source}")]
    Load {
        /// The archive.
        archive: PathBuf,
        /// What the daemon said.
        source: bollard::errors::Error,
    },
    /// The daemon has no such image, or could not export it.
    #[error("docker cannot export {reference}: {source}")]
    Export {
        /// The image reference.
        reference: String,
        /// What the daemon said.
        source: bollard::errors::Error,
    },
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Loads a `docker load` archive into the daemon; returns what the daemon reported
/// (`Loaded image: name:tag`).
pub fn load_archive(archive: &Path) -> Result<Vec<String>, LoadError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| {
        LoadError::Io(IoError { op: "starting the runtime for", path: archive.to_owned(), source })
    })?;
    runtime.block_on(async {
        let docker = Docker::connect_with_local_defaults().map_err(LoadError::Connect)?;
        let docker = docker.negotiate_version().await.map_err(LoadError::Connect)?;
        let file = tokio::fs::File::open(archive)
            .await
            .map_err(|source| LoadError::Io(IoError { op: "opening", path: archive.to_owned(), source }))?;
        let body =
            tokio_util::codec::FramedRead::with_capacity(file, tokio_util::codec::BytesCodec::new(), 1 << 20)
                .filter_map(|chunk| async move { chunk.ok().map(bytes::BytesMut::freeze) });
        let mut responses = docker.import_image_stream(ImportImageOptions { quiet: true }, body, None);
        let mut said = Vec::new();
        while let Some(info) = responses.next().await {
            let info = info.map_err(|source| LoadError::Load { archive: archive.to_owned(), source })?;
            if let Some(text) = info.stream.filter(|s| !s.trim().is_empty()) {
                said.push(text.trim().to_owned());
            }
        }
        Ok(said)
    })
}

/// The id of an image of the local Docker daemon: the digest of its config, which names exactly
/// that image's content.
pub fn image_id(reference: &str) -> Result<String, LoadError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| {
        LoadError::Io(IoError { op: "starting the runtime for", path: reference.into(), source })
    })?;
    runtime.block_on(async {
        let docker = Docker::connect_with_local_defaults().map_err(LoadError::Connect)?;
        let docker = docker.negotiate_version().await.map_err(LoadError::Connect)?;
        let image = docker
            .inspect_image(reference)
            .await
            .map_err(|source| LoadError::Export { reference: reference.to_owned(), source })?;
        Ok(image.id.unwrap_or_default())
    })
}

/// Exports an image of the local Docker daemon (`docker save`, streamed to `dest`) and returns
/// its id.
pub fn export_image(reference: &str, dest: &Path) -> Result<String, LoadError> {
    use tokio::io::AsyncWriteExt;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| {
        LoadError::Io(IoError { op: "starting the runtime for", path: dest.to_owned(), source })
    })?;
    runtime.block_on(async {
        let docker = Docker::connect_with_local_defaults().map_err(LoadError::Connect)?;
        let docker = docker.negotiate_version().await.map_err(LoadError::Connect)?;
        let id = docker
            .inspect_image(reference)
            .await
            .map_err(|source| LoadError::Export { reference: reference.to_owned(), source })?
            .id
            .unwrap_or_default();
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|source| LoadError::Io(IoError { op: "creating", path: dest.to_owned(), source }))?;
        let mut stream = docker.export_image(reference);
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|source| LoadError::Export { reference: reference.to_owned(), source })?;
            file.write_all(&chunk)
                .await
                .map_err(|source| LoadError::Io(IoError { op: "writing", path: dest.to_owned(), source }))?;
        }
        file.sync_all()
            .await
            .map_err(|source| LoadError::Io(IoError { op: "writing", path: dest.to_owned(), source }))?;
        Ok(id)
    })
}
