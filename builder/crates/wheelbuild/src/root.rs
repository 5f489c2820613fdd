//! A build root: unpacked from its layer into the cache, once per layer, or made in place.

use std::path::{Component, Path};

use stackbuild_cache::Cache;
use stackbuild_common::{Compression, LayerBlob};
use stackcontract::version::PythonVersion;

use crate::error::{io, WheelBuildError};
use crate::sandbox::Mount;

/// The root file system builds run in: the image's base and Python with the build packages.
#[derive(Debug, Clone)]
pub struct BuildRoot {
    /// What the sandbox mounts read-only.
    pub mounts: Vec<Mount>,
    /// What identifies its content (the build root's layer digest): part of every built wheel's
    /// key.
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
        let parent = cache.root().join("build-roots");
        let rootfs = parent.join(hex);
        if !rootfs.join(".stackbuild-complete").is_file() {
            std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
            let tmp = tempfile::Builder::new()
                .prefix(".unpack-")
                .tempdir_in(&parent)
                .map_err(io("creating a directory in", &parent))?;
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
                    entry.unpack_in(tmp.path()).map_err(io("unpacking into", tmp.path()))?;
                }
            }
            // bwrap mounts the build directory there and cannot make it in a read-only root.
            let mount = tmp.path().join(crate::sandbox::BUILD_DIR.trim_start_matches('/'));
            std::fs::create_dir_all(&mount).map_err(io("creating", &mount))?;
            std::fs::write(tmp.path().join(".stackbuild-complete"), layer.diff_id.as_bytes())
                .map_err(io("writing", tmp.path()))?;
            let done = tmp.keep();
            if let Err(e) = std::fs::rename(&done, &rootfs) {
                let _ = std::fs::remove_dir_all(&done);
                if !rootfs.join(".stackbuild-complete").is_file() {
                    return Err(io("renaming to", &rootfs)(e));
                }
            }
        }
        Self::in_dir(&rootfs, &layer.diff_id, python)
    }

    /// The root file system made as the directory `rootfs` (`DebianBase::prepare_dir_on`),
    /// whose content `identity` names.
    pub fn in_dir(rootfs: &Path, identity: &str, python: &PythonVersion) -> Result<Self, WheelBuildError> {
        let python_bin = format!("usr/bin/python{}.{}", python.part(0), python.part(1));
        if std::fs::symlink_metadata(rootfs.join(&python_bin)).is_err() {
            return Err(WheelBuildError::Output {
                package: "the build root".into(),
                problem: format!("it has no /{python_bin}: the base must carry the recipe's Python"),
            });
        }
        // bwrap mounts the build directory there and cannot make it in a read-only root.
        let mount = rootfs.join(crate::sandbox::BUILD_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&mount).map_err(io("creating", &mount))?;
        Ok(Self { mounts: Mount::root(rootfs), identity: identity.to_owned(), python: python.clone() })
    }
}
