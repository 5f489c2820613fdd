//! Records of what a build learned by reading an artifact, kept in the cache under a name made
//! of the artifact's content (its sha256) or of a key of every input, so that a record cannot go
//! stale: a later build reads the small record instead of the artifact.
//!
//! A record is a cache, not an input: one that cannot be read or parsed is as good as none (the
//! caller reads the artifact again), and one that cannot be written costs only time.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The record at `path`, if there is one that parses as `T`.
pub fn read_record<T: DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Records `value` at `path` (its directory made, the file replaced atomically); a failure is
/// logged, never returned.
pub fn write_record<T: Serialize + ?Sized>(path: &Path, value: &T) {
    let written = serde_json::to_vec(value).map_err(std::io::Error::other).and_then(|json| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::write_atomic(path, &json)
    });
    if let Err(e) = written {
        tracing::debug!("could not record {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_bad_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kind/v1-abc.json");
        assert_eq!(read_record::<Vec<String>>(&path), None);
        write_record(&path, &vec!["x".to_owned()]);
        assert_eq!(read_record::<Vec<String>>(&path), Some(vec!["x".to_owned()]));
        std::fs::write(&path, b"{not json").unwrap();
        assert_eq!(read_record::<Vec<String>>(&path), None);
    }
}
