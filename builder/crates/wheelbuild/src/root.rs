//! A build root in the cache (`build-roots/<name>/`): unpacked from its layer, or made in place
//! by the caller. Either way it is made in a temporary directory beside, marked whole with its
//! identity, and renamed into place, once.

use std::path::{Component, Path};

use stackbuild_cache::Cache;
use stackbuild_common::{Compression, LayerBlob};
use stackcontract::version::PythonVersion;

use crate::error::{io, WheelBuildError};
use crate::sandbox::Mount;

/// The file whose presence says a build root is whole; it holds the root's identity.
const COMPLETE: &str = ".stackbuild-complete";

/// The root file system builds run in: the image's base and Python with the build packages.
#[derive(Debug, Clone)]
pub struct BuildRoot {
    /// What the sandbox mounts read-only.
    pub mounts: Vec<Mount>,
    /// What identifies its content (the build root's layer digest, or what its maker says):
    /// part of every built wheel's key.
    pub identity: String,
    /// Its interpreter version (`3.11`): `/usr/bin/python3.11` runs the backend.
    pub python: PythonVersion,
}

impl BuildRoot {
    /// The root file system of `layer` (a Debian rootfs with the image's Python and the build
    /// packages), unpacked into `cache/build-roots/<diff_id>` unless it is there already.
    /// Devices and whiteouts are left out; nothing is written through a symlink of the layer.
    pub fn unpacked(
        cache: &Cache,
        layer: &LayerBlob,
        python: &PythonVersion,
    ) -> Result<Self, WheelBuildError> {
        let hex = layer.diff_id.trim_start_matches("sha256:");
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WheelBuildError::Output {
                package: "the build root".into(),
                problem: format!("unexpected layer diff_id {:?}", layer.diff_id),
            });
        }
        Self::made(cache, hex, python, |rootfs| {
            std::fs::create_dir(rootfs).map_err(io("creating", rootfs))?;
            unpack(layer, rootfs)?;
            Ok(layer.diff_id.clone())
        })
    }

    /// The root file system `make` writes into the directory it is given (which does not exist
    /// yet) and whose identity it returns, kept as `cache/build-roots/<name>` (`name`: the
    /// hex of a key of every input); `make` is not called when it is there already.
    pub fn made<E: From<WheelBuildError>>(
        cache: &Cache,
        name: &str,
        python: &PythonVersion,
        make: impl FnOnce(&Path) -> Result<String, E>,
    ) -> Result<Self, E> {
        let parent = cache.root().join("build-roots");
        let rootfs = parent.join(name);
        let marker = rootfs.join(COMPLETE);
        let identity = if let Ok(identity) = std::fs::read_to_string(&marker) {
            identity
        } else {
            std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
            let tmp = tempfile::Builder::new()
                .prefix(".making-")
                .tempdir_in(&parent)
                .map_err(io("creating a directory in", &parent))?;
            let fresh = tmp.path().join("rootfs");
            let identity = make(&fresh)?;
            // bwrap mounts the build directory there and cannot make it in a read-only root.
            let mount = fresh.join(crate::sandbox::BUILD_DIR.trim_start_matches('/'));
            std::fs::create_dir_all(&mount).map_err(io("creating", &mount))?;
            std::fs::write(fresh.join(COMPLETE), &identity).map_err(io("writing", &fresh))?;
            match std::fs::rename(&fresh, &rootfs) {
                Ok(()) => identity,
                // Another build placed it first: theirs is as good, under its own identity (a
                // mirror may have moved in between).
                Err(e) => std::fs::read_to_string(&marker).map_err(|_| io("renaming to", &rootfs)(e))?,
            }
        };
        let python_bin = format!("usr/bin/python{}.{}", python.part(0), python.part(1));
        if std::fs::symlink_metadata(rootfs.join(&python_bin)).is_err() {
            return Err(WheelBuildError::Output {
                package: "the build root".into(),
                problem: format!("it has no /{python_bin}: the base must carry the recipe's Python"),
            }
            .into());
        }
        Ok(Self { mounts: Mount::root(&rootfs), identity, python: python.clone() })
    }
}

/// `layer`'s entries unpacked into `rootfs`: directories, files and links, nothing outside it.
fn unpack(layer: &LayerBlob, rootfs: &Path) -> Result<(), WheelBuildError> {
    let compression = Compression::from_media_type(&layer.media_type).unwrap_or(Compression::None);
    let file = std::fs::File::open(&layer.path).map_err(io("opening", &layer.path))?;
    let decoded = compression
        .decoder(std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(io("reading", &layer.path))?;
    let mut archive = tar::Archive::new(decoded);
    archive.set_preserve_permissions(true);
    archive.set_unpack_xattrs(false);
    for entry in archive.entries().map_err(io("reading", &layer.path))? {
        let mut entry = entry.map_err(io("reading", &layer.path))?;
        let kind = entry.header().entry_type();
        let name = entry.path().map_err(io("reading", &layer.path))?.into_owned();
        let safe = name.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        let whiteout = name.iter().any(|c| c.as_encoded_bytes().starts_with(b".wh."));
        if !safe || whiteout {
            continue;
        }
        if kind.is_dir() || kind.is_file() || kind.is_symlink() || kind.is_hard_link() {
            entry.unpack_in(rootfs).map_err(io("unpacking into", rootfs))?;
        }
    }
    Ok(())
}
