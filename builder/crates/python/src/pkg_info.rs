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
    let bytes = sdist_top_member(path, "PKG-INFO", MAX_PKG_INFO)?
        .ok_or_else(|| format!("{}: no PKG-INFO", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{}: PKG-INFO is not UTF-8", path.display()))
}

/// The member `<top>/<name>` of the sdist at `path` (`.tar.gz`, `.tar` or `.zip`), its first
/// `cap` bytes; `None` when the sdist has none.
pub fn sdist_top_member(path: &Path, name: &str, cap: u64) -> Result<Option<Vec<u8>>, String> {
    sdist_member(path, |rest| rest == name, cap)
}

/// The first member `<top>/<rest>` of the sdist at `path` whose `rest` is `wanted`, its first
/// `cap` bytes; `None` when the sdist has none.
pub(crate) fn sdist_member(
    path: &Path,
    wanted: impl Fn(&str) -> bool,
    cap: u64,
) -> Result<Option<Vec<u8>>, String> {
    let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let is_top = |member: &str| {
        let member = member.trim_start_matches("./");
        member.split_once('/').is_some_and(|(_, rest)| wanted(rest))
    };
    let mut bytes = Vec::new();
    if extension == "zip" {
        let mut zip = zip::ZipArchive::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
        let Some(member) = zip.file_names().find(|m| is_top(m)).map(str::to_owned) else {
            return Ok(None);
        };
        let entry = zip.by_name(&member).map_err(|e| format!("{}: {e}", path.display()))?;
        entry.take(cap).read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(Some(bytes));
    }
    let reader: Box<dyn Read> =
        if extension == "tar" { Box::new(file) } else { Box::new(flate2::read::GzDecoder::new(file)) };
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(|e| format!("{}: {e}", path.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
        let member = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if entry.header().entry_type().is_file() && is_top(&member) {
            entry.take(cap).read_to_end(&mut bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

/// What an sdist's `PKG-INFO` says of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdistInfo {
    /// `Name`, as written.
    pub name: String,
    /// `Version`, as written.
    pub version: String,
    /// `Requires-Dist`, as written (markers included).
    pub requires: Vec<String>,
}

/// The name, version and requirements the `PKG-INFO` of the sdist at `path` declares.
pub fn sdist_info(path: &Path) -> Option<SdistInfo> {
    let fields = header_fields(&sdist_pkg_info(path).ok()?);
    let first = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    Some(SdistInfo {
        name: first("name")?,
        version: first("version")?,
        requires: fields.iter().filter(|(k, _)| k == "requires-dist").map(|(_, v)| v.clone()).collect(),
    })
}

/// The header fields of core metadata (`METADATA`, `PKG-INFO`: RFC 822 headers, continuation
/// lines indented; the body after the first empty line is not read), names lowercased.
pub(crate) fn header_fields(text: &str) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    fields
}

/// Whether `pkg_info` is static where resolution looks (PEP 643): Metadata-Version 2.2 or
/// later, and neither `Requires-Dist` nor `Requires-Python` marked `Dynamic`.
pub fn is_static(pkg_info: &str) -> bool {
    let mut version = None;
    let mut dynamic = false;
    for (key, value) in header_fields(pkg_info) {
        match key.as_str() {
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

/// The index a *wheel stub* downloads its wheel from: an sdist whose build backend is
/// `wheel_stub.buildapi` (NVIDIA's wheel-stub, <https://github.com/wheelnext/wheel-stub>) holds
/// no code; building it fetches the real wheel from `[tool.wheel_stub] index_url` (`TensorRT`'s
/// `tensorrt-cu13-libs`, whose wheels live only on NVIDIA's index). A build here has no network,
/// so such an sdist can never be built; `Some("")` when the stub names no index.
pub(crate) fn wheel_stub_index(path: &Path) -> Option<String> {
    let bytes = sdist_top_member(path, "pyproject.toml", 256 << 10).ok()??;
    let doc: toml::Table = toml::from_str(std::str::from_utf8(&bytes).ok()?).ok()?;
    let backend = doc.get("build-system")?.get("build-backend")?.as_str()?;
    if backend.split([':', '.']).next() != Some("wheel_stub") {
        return None;
    }
    let index = doc.get("tool").and_then(|t| t.get("wheel_stub")).and_then(|w| w.get("index_url"));
    Some(index.and_then(toml::Value::as_str).unwrap_or_default().to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `.tar.gz` at `path` holding `files` (member name, text): a stand-in sdist.
    pub(crate) fn write_sdist(path: &Path, files: &[(&str, &str)]) {
        let gz =
            flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (name, body) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, body.as_bytes()).unwrap();
        }
        b.into_inner().unwrap().finish().unwrap();
    }

    fn sdist(dir: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
        let path = dir.join("a-1.0.tar.gz");
        write_sdist(&path, files);
        path
    }

    #[test]
    fn a_wheel_stub_and_its_index() {
        let dir = tempfile::tempdir().unwrap();
        // As tensorrt_cu13_libs-11.4.0.106.tar.gz has it.
        let stub = "[build-system]\nrequires = [\"wheel-stub\"]\nbuild-backend = \"wheel_stub.buildapi\"\n\n\
                    [tool.wheel_stub]\nindex_url = \"https://example.invalid/simple/\"\n";
        let path = sdist(dir.path(), &[("a-1.0/pyproject.toml", stub)]);
        assert_eq!(wheel_stub_index(&path).as_deref(), Some("https://example.invalid/simple/"));
        let plain =
            "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n";
        let path = sdist(dir.path(), &[("a-1.0/pyproject.toml", plain)]);
        assert_eq!(wheel_stub_index(&path), None);
        let path = sdist(dir.path(), &[("a-1.0/setup.py", "")]);
        assert_eq!(wheel_stub_index(&path), None);
    }

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
        let path = sdist(
            dir.path(),
            &[("a-1.0/sub/PKG-INFO", "wrong"), ("a-1.0/PKG-INFO", "Metadata-Version: 2.2\nName: a\n")],
        );
        assert_eq!(sdist_pkg_info(&path).unwrap(), "Metadata-Version: 2.2\nName: a\n");
    }
}
