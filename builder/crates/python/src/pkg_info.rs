//! The `PKG-INFO` of a source distribution: its core metadata as the sdist carries it.
//!
//! From Metadata-Version 2.2 (PEP 643) a field of an sdist's `PKG-INFO` that is not listed as
//! `Dynamic` is what every wheel built from it says: such metadata is used as it is, with no
//! build. Older sdists (`docopt` 0.6.2, `antlr4-python3-runtime` 4.9.3: Metadata-Version 1.x or
//! 2.1) say nothing reliable about their dependencies; only running their build tells, which
//! the build sandbox does. The reader takes the archive as data: the one member
//! `<name>-<version>/PKG-INFO`, with a cap.

use std::io::Read;
use std::path::Path;

/// The largest `PKG-INFO` read (a long description is part of it).
const MAX_PKG_INFO: u64 = 4 << 20;

/// The `PKG-INFO` at the top of the sdist at `path` (`.tar.gz`, `.tar` or `.zip`).
pub fn sdist_pkg_info(path: &Path) -> Result<String, String> {
    let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let is_top_pkg_info = |member: &str| {
        let member = member.trim_start_matches("./");
        member.split('/').count() == 2 && member.ends_with("/PKG-INFO")
    };
    let mut bytes = Vec::new();
    if extension == "zip" {
        let mut zip = zip::ZipArchive::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
        let Some(member) = zip.file_names().find(|m| is_top_pkg_info(m)).map(str::to_owned) else {
            return Err(format!("{}: no PKG-INFO", path.display()));
        };
        let entry = zip.by_name(&member).map_err(|e| format!("{}: {e}", path.display()))?;
        entry.take(MAX_PKG_INFO).read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    } else {
        let reader: Box<dyn Read> =
            if extension == "tar" { Box::new(file) } else { Box::new(flate2::read::GzDecoder::new(file)) };
        let mut archive = tar::Archive::new(reader);
        let mut found = false;
        for entry in archive.entries().map_err(|e| format!("{}: {e}", path.display()))? {
            let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
            let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            if entry.header().entry_type().is_file() && is_top_pkg_info(&member) {
                entry
                    .take(MAX_PKG_INFO)
                    .read_to_end(&mut bytes)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                found = true;
                break;
            }
        }
        if !found {
            return Err(format!("{}: no PKG-INFO", path.display()));
        }
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: PKG-INFO is not UTF-8", path.display()))
}

/// Whether `pkg_info` is static where resolution looks (PEP 643): Metadata-Version 2.2 or
/// later, and neither `Requires-Dist` nor `Requires-Python` marked `Dynamic`.
pub fn is_static(pkg_info: &str) -> bool {
    let headers = pkg_info.split("\n\n").next().unwrap_or_default();
    let mut version = None;
    let mut dynamic = false;
    for line in headers.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "metadata-version" => {
                let mut parts = value.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                version = Some((parts.next().unwrap_or(0), parts.next().unwrap_or(0)));
            }
            "dynamic" => {
                dynamic |=
                    ["requires-dist", "requires-python"].contains(&value.to_ascii_lowercase().as_str());
            }
            _ => {}
        }
    }
    version.is_some_and(|v| v >= (2, 2)) && !dynamic
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_metadata_per_pep_643() {
        assert!(is_static("Metadata-Version: 2.2\nName: a\nVersion: 1\nRequires-Dist: b\n\nlong text"));
        assert!(is_static("Metadata-Version: 2.4\nName: a\nDynamic: license\n"));
        assert!(!is_static("Metadata-Version: 2.2\nName: a\nDynamic: Requires-Dist\n"));
        assert!(!is_static("Metadata-Version: 2.1\nName: a\n"));
        assert!(!is_static("Metadata-Version: 1.0\nName: docopt\n"));
        assert!(!is_static("Name: a\n"));
    }

    #[test]
    fn reads_the_top_pkg_info_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a-1.0.tar.gz");
        let gz =
            flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (name, body) in
            [("a-1.0/sub/PKG-INFO", "wrong"), ("a-1.0/PKG-INFO", "Metadata-Version: 2.2\nName: a\n")]
        {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, body.as_bytes()).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap();
        assert_eq!(sdist_pkg_info(&path).unwrap(), "Metadata-Version: 2.2\nName: a\n");
    }
}
