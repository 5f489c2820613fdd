//! Hand-made wheels and a package index of them, so that builds install packages without the
//! network.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use crate::digest::{sha256_file, urlsafe_b64};
use crate::rng::XorShift;

/// Writes a pure-Python wheel (`Tag: py3-none-any`) at `path`: `members` (archive name,
/// content), then `METADATA` and `WHEEL` for distribution `name` `version`, then a `RECORD`
/// listing each member's sha256 and size (PEP 376, PEP 427). Members are stored uncompressed
/// with a fixed timestamp, so the same arguments give the same bytes.
pub fn pure_wheel(path: &Path, name: &str, version: &str, members: Vec<(String, Vec<u8>)>) -> PathBuf {
    // The .dist-info directory uses the normalized name with `_` (PEP 427 "Escaping").
    let dist_info = format!("{}-{version}.dist-info", name.replace('-', "_"));
    let mut members = members;
    members.push((
        format!("{dist_info}/METADATA"),
        format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").into_bytes(),
    ));
    members.push((
        format!("{dist_info}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: test-support\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
    ));
    write_zip(path, &dist_info, members)
}

/// Writes `members`, then a `RECORD` of them, as a zip at `path`.
fn write_zip(path: &Path, dist_info: &str, mut members: Vec<(String, Vec<u8>)>) -> PathBuf {
    let mut record = String::new();
    for (member, bytes) in &members {
        let hash = urlsafe_b64(&sha2::Sha256::digest(bytes));
        let _ = writeln!(record, "{member},sha256={hash},{}", bytes.len());
    }
    let _ = writeln!(record, "{dist_info}/RECORD,,");
    members.push((format!("{dist_info}/RECORD"), record.into_bytes()));

    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .last_modified_time(zip::DateTime::default())
        .unix_permissions(0o644);
    for (member, bytes) in &members {
        zip.start_file(member.as_str(), options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
    path.to_owned()
}

/// Writes a metadata-only stand-in of a platform wheel into `dir`:
/// `<name>-<version>-<tag>.whl` (`tag` as `cp311-cp311-manylinux_2_28_x86_64`) whose `METADATA`
/// carries `requires_python` and every `Requires-Dist` of `requires`, as the real wheel's does, and
/// whose only module is an empty `<name>/__init__.py`. For checks that read a wheel's metadata,
/// not its libraries.
pub fn stand_in_wheel(
    dir: &Path,
    name: &str,
    version: &str,
    tag: &str,
    requires_python: &str,
    requires: &[&str],
) -> PathBuf {
    let dist_info = format!("{}-{version}.dist-info", name.replace('-', "_"));
    let mut metadata = format!(
        "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: {requires_python}\n"
    );
    for r in requires {
        let _ = writeln!(metadata, "Requires-Dist: {r}");
    }
    let wheel = format!("Wheel-Version: 1.0\nGenerator: test-support\nRoot-Is-Purelib: false\nTag: {tag}\n");
    let members = vec![
        (format!("{name}/__init__.py"), Vec::new()),
        (format!("{dist_info}/METADATA"), metadata.into_bytes()),
        (format!("{dist_info}/WHEEL"), wheel.into_bytes()),
    ];
    write_zip(&dir.join(format!("{name}-{version}-{tag}.whl")), &dist_info, members)
}

/// Writes `<name>-<version>-py3-none-any.whl` into `dir`: a package `<name>/__init__.py` and
/// `<name>/payload.bin` of `payload` pseudo-random (incompressible) bytes drawn from `seed`.
pub fn write_wheel(dir: &Path, name: &str, version: &str, payload: usize, seed: u64) -> PathBuf {
    let members = vec![
        (format!("{name}/__init__.py"), format!("VERSION = {version:?}\n").into_bytes()),
        (format!("{name}/payload.bin"), XorShift::new(seed).bytes(payload)),
    ];
    pure_wheel(&dir.join(format!("{name}-{version}-py3-none-any.whl")), name, version, members)
}

/// Writes a PEP 503 "simple" index under `<root>/simple` that lists `wheels` (copied into
/// `<root>/simple/<project>/`), each link carrying its `#sha256=` as the spec recommends.
/// Returns the copies' paths, in the order given.
pub fn write_simple_index(root: &Path, wheels: &[PathBuf]) -> Vec<PathBuf> {
    let simple = root.join("simple");
    let mut projects: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    let mut copies = Vec::new();
    for wheel in wheels {
        let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
        let project = file.split('-').next().unwrap().to_ascii_lowercase().replace('_', "-");
        let dir = simple.join(&project);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(wheel, dir.join(&file)).unwrap();
        copies.push(dir.join(&file));
        projects.entry(project).or_default().push((file, sha256_file(wheel).unwrap()));
    }
    let mut top = String::from("<!DOCTYPE html>\n<html><body>\n");
    for (project, files) in &projects {
        let _ = writeln!(top, "<a href=\"{project}/\">{project}</a>");
        let mut page = String::from("<!DOCTYPE html>\n<html><body>\n");
        for (file, sha) in files {
            let _ = writeln!(page, "<a href=\"{file}#sha256={sha}\">{file}</a>");
        }
        page.push_str("</body></html>\n");
        std::fs::write(simple.join(project).join("index.html"), page).unwrap();
    }
    top.push_str("</body></html>\n");
    std::fs::write(simple.join("index.html"), top).unwrap();
    copies
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn record_matches_every_member_and_bytes_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = write_wheel(dir.path(), "pkg", "1.0", 100, 3);
        assert_eq!(wheel.file_name().unwrap(), "pkg-1.0-py3-none-any.whl");
        let again = write_wheel(&dir.path().join("again"), "pkg", "1.0", 100, 3);
        assert_eq!(std::fs::read(&wheel).unwrap(), std::fs::read(again).unwrap());

        let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
        let mut record = String::new();
        zip.by_name("pkg-1.0.dist-info/RECORD").unwrap().read_to_string(&mut record).unwrap();
        for line in record.lines().filter(|l| !l.ends_with(",,")) {
            let mut fields = line.split(',');
            let (name, hash, size) = (fields.next().unwrap(), fields.next().unwrap(), fields.next().unwrap());
            let mut bytes = Vec::new();
            zip.by_name(name).unwrap().read_to_end(&mut bytes).unwrap();
            assert_eq!(hash, format!("sha256={}", urlsafe_b64(&sha2::Sha256::digest(&bytes))));
            assert_eq!(size, bytes.len().to_string());
        }
        assert_eq!(record.lines().count(), 5);
    }

    #[test]
    fn a_dashed_name_gets_an_underscored_dist_info() {
        let dir = tempfile::tempdir().unwrap();
        let path = pure_wheel(&dir.path().join("w/demo_pkg-1.0-py3-none-any.whl"), "demo-pkg", "1.0", vec![]);
        let zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
        assert!(zip.file_names().any(|n| n == "demo_pkg-1.0.dist-info/METADATA"));
    }

    #[test]
    fn the_index_links_each_wheel_with_its_hash() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = write_wheel(&dir.path().join("wheels"), "Some_Pkg", "2.0", 10, 1);
        let copies = write_simple_index(&dir.path().join("index"), std::slice::from_ref(&wheel));
        assert_eq!(copies, [dir.path().join("index/simple/some-pkg/Some_Pkg-2.0-py3-none-any.whl")]);
        let page = std::fs::read_to_string(dir.path().join("index/simple/some-pkg/index.html")).unwrap();
        assert!(page.contains(&format!("#sha256={}", sha256_file(&wheel).unwrap())), "{page}");
        let top = std::fs::read_to_string(dir.path().join("index/simple/index.html")).unwrap();
        assert!(top.contains("href=\"some-pkg/\""), "{top}");
    }
}
