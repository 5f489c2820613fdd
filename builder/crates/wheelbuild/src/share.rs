//! Built wheels shared through the cache's layer store, and so through `--cache-registry`: one
//! machine compiles flash-attn, every other machine and CI pulls the wheel by its key.
//!
//! A built wheel is kept twice: as a file (`built-wheels/<key>/<wheel>`) for the build, and as a
//! one-file uncompressed tar blob recorded under the same key, which the layer store hands to the
//! remote like any layer ([`stackbuild_cache::RemoteLayers`]). An empty cache that misses the
//! file asks the layer store, which asks the remote, and unpacks the one file it gets.

use std::io::Write as _;
use std::path::Path;

use sha2::Digest as _;
use stackbuild_cache::{Cache, LayerKey};
use stackbuild_common::LayerBlob;

use crate::error::{io, WheelBuildError};

/// The media type of the blob: a plain tar.
const MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// Most bytes of a wheel taken from a shared blob (torch's wheel is about 1 GiB).
const MAX_WHEEL: u64 = 8 << 30;

#[allow(clippy::needless_pass_by_value)] // a `map_err` argument
fn cache_err(e: stackbuild_cache::CacheError) -> WheelBuildError {
    WheelBuildError::Output { package: "the built-wheel cache".into(), problem: e.to_string() }
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: sha2::Sha256,
    written: u64,
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Records `wheel` (file name `filename`) as the blob of `key`.
pub(crate) fn store(
    cache: &Cache,
    key: &LayerKey,
    wheel: &Path,
    filename: &str,
) -> Result<(), WheelBuildError> {
    let tmp = cache.temp_file().map_err(cache_err)?;
    let mut out = Hashing { inner: &tmp.file, hasher: sha2::Sha256::new(), written: 0 };
    {
        let mut tar = tar::Builder::new(&mut out);
        let mut file = std::fs::File::open(wheel).map_err(io("opening", wheel))?;
        let len = file.metadata().map_err(io("reading", wheel))?.len();
        let mut header = tar::Header::new_ustar();
        header.set_size(len);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, filename, &mut file).map_err(io("archiving", wheel))?;
        tar.finish().map_err(io("archiving", wheel))?;
    }
    out.flush().map_err(io("writing", wheel))?;
    let hex = hex::encode(out.hasher.finalize());
    let size = out.written;
    let path = cache.commit_blob(tmp, &hex).map_err(cache_err)?;
    let blob = LayerBlob {
        digest: format!("sha256:{hex}"),
        diff_id: format!("sha256:{hex}"),
        size,
        media_type: MEDIA_TYPE.to_owned(),
        annotations: std::collections::BTreeMap::new(),
        path,
    };
    cache.put_layer(key, &blob).map_err(cache_err)
}

/// Unpacks the wheel recorded as `key`'s blob (here or on the remote) into `dir`; `false` when
/// there is none. Only one regular file with a wheel's name is taken.
pub(crate) fn restore(cache: &Cache, key: &LayerKey, dir: &Path) -> Result<bool, WheelBuildError> {
    let Some(blob) = cache.get_layer(key) else { return Ok(false) };
    if blob.media_type != MEDIA_TYPE {
        return Ok(false);
    }
    let file = std::fs::File::open(&blob.path).map_err(io("opening", &blob.path))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    let staging =
        tempfile::Builder::new().prefix(".restore-").tempdir_in(parent).map_err(io("creating in", parent))?;
    let mut found = false;
    for entry in archive.entries().map_err(io("reading", &blob.path))? {
        let mut entry = entry.map_err(io("reading", &blob.path))?;
        let name = entry.path().map_err(io("reading", &blob.path))?.to_string_lossy().into_owned();
        let plain = !name.contains('/') && stackbuild_common::parse_wheel_name(&name).is_some();
        if found
            || !plain
            || entry.header().entry_type() != tar::EntryType::Regular
            || entry.size() > MAX_WHEEL
        {
            return Ok(false);
        }
        let out = staging.path().join(&name);
        let mut f = std::fs::File::create_new(&out).map_err(io("creating", &out))?;
        std::io::copy(&mut entry, &mut f).map_err(io("writing", &out))?;
        found = true;
    }
    if !found {
        return Ok(false);
    }
    let kept = staging.keep();
    if std::fs::rename(&kept, dir).is_err() {
        let _ = std::fs::remove_dir_all(&kept);
    }
    Ok(dir.is_dir())
}
