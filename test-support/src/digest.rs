//! Hashes as tests compare them.

use std::path::Path;

use sha2::Digest as _;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `sha256:<hex>`, the OCI digest of `bytes` (OCI image spec, descriptor.md "Digests").
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Lowercase hex SHA-256 of a file's content, streamed.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Unpadded URL-safe base64, as a wheel's `RECORD` writes hashes (PEP 376; RFC 4648 §5).
pub fn urlsafe_b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The SHA-256 of the empty string (FIPS 180-4 test vectors).
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn known_vectors() {
        assert_eq!(sha256_hex(b""), EMPTY);
        assert_eq!(sha256_digest(b""), format!("sha256:{EMPTY}"));
        // The RECORD hash of an empty file, as pip writes it.
        assert_eq!(urlsafe_b64(&sha2::Sha256::digest(b"")), "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
    }

    #[test]
    fn a_file_hashes_like_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), sha256_hex(b"abc"));
    }
}
