//! Whole-file writes that readers never see half done.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a dot file in the same directory (readers such as NFD's
/// worker skip dot files), `fsync`, and a rename; the temp file is removed when anything fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("labels");
        super::write_atomic(&path, b"a=1\n").unwrap();
        super::write_atomic(&path, b"b=2\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"b=2\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temp file left");
    }
}
