//! `--load`: streams an image archive into the local Docker daemon (bollard, `POST /images/load`).
//!
//! The archive is read in chunks and sent as the request body, so a multi-gigabyte image is
//! never held in memory. The API version is negotiated down to the daemon's, since Debian's
//! Docker 20.10 speaks API 1.41 and refuses newer clients.

use std::path::{Path, PathBuf};

use bollard::image::ImportImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

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
    /// Reading the archive or starting the runtime failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Loads a `docker load` archive into the daemon; returns what the daemon reported
/// (`Loaded image: name:tag`).
pub fn load_archive(archive: &Path) -> Result<Vec<String>, LoadError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| LoadError::Io { op: "starting the runtime for", path: archive.to_owned(), source })?;
    runtime.block_on(async {
        let docker = Docker::connect_with_local_defaults().map_err(LoadError::Connect)?;
        let docker = docker.negotiate_version().await.map_err(LoadError::Connect)?;
        let file = tokio::fs::File::open(archive)
            .await
            .map_err(|source| LoadError::Io { op: "opening", path: archive.to_owned(), source })?;
        let body = tokio_util::codec::FramedRead::with_capacity(file, tokio_util::codec::BytesCodec::new(), 1 << 20)
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
