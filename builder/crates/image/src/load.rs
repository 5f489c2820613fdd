//! The local Docker daemon through bollard: `--load` streams the image into it as the build
//! writes its layers ([`Loader`]), and a `docker = "NAME:TAG"` base is exported from it
//! (`GET /images/{name}/get`).
//!
//! Archives are never written to a file for the daemon: a thread writes the tar into the body of
//! `POST /images/load` as it is sent, in chunks, so a multi-gigabyte image is never held in
//! memory or stored twice. The API version is negotiated down to the daemon's, since Debian's
//! Docker 20.10 speaks API 1.41 and refuses newer clients.

mod spool;
mod stream;

use std::io;
use std::path::Path;

use bollard::image::ImportImageOptions;
use bollard::Docker;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::oci::{Archive, OciError};
use stackbuild_common::IoError;

pub use spool::{SpooledTar, TarSpool};
pub use stream::Loader;

/// Why loading into Docker failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No daemon to talk to.
    #[error("cannot reach the Docker daemon ({0}); is dockerd running and /var/run/docker.sock reachable?")]
    Connect(#[source] bollard::errors::Error),
    /// The daemon refused the archive.
    #[error("docker refused {archive}: {source}")]
    Load {
        /// What was sent (the image, or a part of it).
        archive: String,
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
    /// The archive could not be written (a blob of the cache could not be read).
    #[error(transparent)]
    Archive(Box<OciError>),
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
}

impl From<OciError> for LoadError {
    fn from(e: OciError) -> Self {
        Self::Archive(Box::new(e))
    }
}

/// A single-threaded runtime and a client of the daemon at its own API version.
struct Daemon {
    runtime: tokio::runtime::Runtime,
    docker: Docker,
}

impl Daemon {
    /// Connects to the local daemon; `what` names the work in errors.
    fn connect(what: &Path) -> Result<Self, LoadError> {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| {
                LoadError::Io(IoError { op: "starting the runtime for", path: what.to_owned(), source })
            })?;
        let docker = runtime.block_on(async {
            let docker = Docker::connect_with_local_defaults().map_err(LoadError::Connect)?;
            docker.negotiate_version().await.map_err(LoadError::Connect)
        })?;
        Ok(Self { runtime, docker })
    }

    /// `POST /images/load` with `archive` as the body, written by another thread as it is
    /// sent; returns what the daemon reported (`Loaded image: name:tag`). `what` names the
    /// archive in errors.
    fn load(&self, archive: &Archive, what: &str) -> Result<Vec<String>, LoadError> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let daemon = Path::new("the Docker daemon");
        std::thread::scope(|scope| {
            let chunks = stackbuild_common::ChunkWriter::new(1 << 20, move |chunk| {
                // Fails only when the request is gone: the daemon answered (with an error) early.
                tx.blocking_send(Bytes::from(chunk)).map_err(|_| io::ErrorKind::BrokenPipe.into())
            });
            let writer = scope.spawn(move || archive.write_to(chunks, daemon));
            let said = self.runtime.block_on(async {
                let mut responses =
                    self.docker.import_image_stream(ImportImageOptions { quiet: true }, body, None);
                let mut said = Vec::new();
                while let Some(info) = responses.next().await {
                    let info = info.map_err(|source| LoadError::Load { archive: what.to_owned(), source })?;
                    if let Some(text) = info.stream.filter(|s| !s.trim().is_empty()) {
                        said.push(text.trim().to_owned());
                    }
                }
                Ok(said)
            });
            let wrote = writer.join().unwrap_or_else(|_| Err(io_panic(daemon)));
            // A blob that could not be read explains why the daemon saw a short archive; a body
            // cut short because the daemon stopped reading is explained by its answer. An
            // archive not sent whole is never a success.
            match (wrote, said) {
                (Ok(()), said) => said,
                (Err(e), Err(said)) if is_broken_pipe(&e) => Err(said),
                (Err(e), _) => Err(e.into()),
            }
        })
    }

    /// Removes the image `id` (an untagged one this build created); `false` if the daemon
    /// refused.
    fn remove(&self, id: &str) -> bool {
        let options = bollard::image::RemoveImageOptions { force: false, noprune: false };
        self.runtime.block_on(self.docker.remove_image(id, Some(options), None)).is_ok()
    }
}

fn io_panic(path: &Path) -> OciError {
    OciError::Io(IoError {
        op: "writing",
        path: path.to_owned(),
        source: io::Error::other("writer panicked"),
    })
}

/// Whether writing stopped because the daemon stopped reading (its answer says why).
fn is_broken_pipe(e: &OciError) -> bool {
    matches!(e, OciError::Io(IoError { source, .. }) if source.kind() == io::ErrorKind::BrokenPipe)
}

/// The id of an image of the local Docker daemon: the digest of its config, which names exactly
/// that image's content.
pub fn image_id(reference: &str) -> Result<String, LoadError> {
    let daemon = Daemon::connect(Path::new(reference))?;
    daemon.runtime.block_on(async {
        let image = daemon
            .docker
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
    let daemon = Daemon::connect(dest)?;
    let write_err =
        |op: &'static str| move |source| LoadError::Io(IoError { op, path: dest.to_owned(), source });
    daemon.runtime.block_on(async {
        let docker = &daemon.docker;
        let id = docker
            .inspect_image(reference)
            .await
            .map_err(|source| LoadError::Export { reference: reference.to_owned(), source })?
            .id
            .unwrap_or_default();
        let mut file = tokio::fs::File::create(dest).await.map_err(write_err("creating"))?;
        let mut stream = docker.export_image(reference);
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|source| LoadError::Export { reference: reference.to_owned(), source })?;
            file.write_all(&chunk).await.map_err(write_err("writing"))?;
        }
        file.sync_all().await.map_err(write_err("writing"))?;
        Ok(id)
    })
}

/// The layers (`diff_ids`, base first) of the daemon's image `reference`; empty when it has none.
fn image_layers(daemon: &Daemon, reference: &str) -> Vec<String> {
    let inspected = daemon.runtime.block_on(daemon.docker.inspect_image(reference));
    inspected.ok().and_then(|i| i.root_fs).and_then(|r| r.layers).unwrap_or_default()
}

/// `what` for errors about an archive of `reference`.
fn describe(reference: &str, part: Option<usize>) -> String {
    match part {
        Some(n) => format!("the first {n} layer(s) of {reference}"),
        None => reference.to_owned(),
    }
}
