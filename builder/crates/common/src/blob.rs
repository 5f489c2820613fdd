//! Content-addressed blobs: the record of a finished layer blob, and SHA-256 digests in the
//! `sha256:<hex>` form OCI uses (image-spec `descriptor.md`, "Digests"). A leaf module: the cache
//! stores [`LayerBlob`]s, the layer writer makes them and the image writer lists them, and none
//! of those needs the others to name one.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A finished layer blob in the cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerBlob {
    /// Digest of the (compressed) blob, `sha256:<hex>`.
    pub digest: String,
    /// Digest of the uncompressed tar, `sha256:<hex>` (the config's `rootfs.diff_ids`).
    pub diff_id: String,
    /// Size of the blob in bytes.
    pub size: u64,
    /// The layer media type.
    pub media_type: String,
    /// Annotations of the layer's descriptor (an eStargz layer's TOC digest and size).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// Where the blob is on disk (not serialized: it depends on where the cache is).
    #[serde(skip)]
    pub path: PathBuf,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Hashes everything `reader` yields; returns (`sha256:<hex>`, byte count).
pub fn sha256_reader(mut reader: impl Read) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((format!("sha256:{}", hex::encode(hasher.finalize())), total))
}

/// Lowercase hex sha256 of a file (no `sha256:` prefix, as wheel hashes are written).
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let (digest, _) = sha256_reader(std::fs::File::open(path)?)?;
    Ok(digest.trim_start_matches("sha256:").to_owned())
}
