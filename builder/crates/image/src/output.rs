//! The paths a build writes to: the `--out` image layout, the `--archive` file and the
//! `--report` file. They are the user's, so a build writes only where it may, and says what is
//! there when it may not:
//!
//! - `--out DIR`: a new directory, an empty one, or an existing OCI image layout. A new one is
//!   written next to its final name under a unique temporary name and renamed into place, so a
//!   build that fails or is killed leaves no image rather than part of one. An existing layout is
//!   updated in place by [`oci::write_layout_images`]: new blobs by content address first, then
//!   `index.json` replaced atomically with only this build's tag added or replaced, so the other
//!   tags, their blobs and every file the build did not write stay. Anything else (a directory of
//!   other files, a regular file, a symlink, a device) is refused, before the build starts and
//!   again before writing.
//! - `--archive FILE`, `--report FILE`: a regular file, replaced as `docker save -o` replaces it
//!   (a new file under a unique temporary name in the same directory, renamed over it), or a new
//!   name; a directory, a symlink, a FIFO or a device there is refused.
//!
//! Temporary names carry the output's name, a `stackbuild-tmp-` stamp, the process id, the time
//! and a counter ([`stackbuild_common::unique_temp_name`]); only such names are ever cleaned up, never a
//! user's sibling file.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::oci::{self, Image, OciError};
use stackbuild_cache::is_temp_name;
use stackbuild_common::unique_temp_name;
use stackbuild_common::{io_err, IoError};

/// A leftover of a killed build next to the output is removed once this old (a live build
/// writes its temporary layout for minutes at most).
const STALE_SIBLING: Duration = Duration::from_hours(1);

/// Largest `oci-layout` read when deciding whether a directory is a layout.
const MAX_OCI_LAYOUT: u64 = 4096;

/// Largest `index.json` read when deciding whether a directory is a layout.
const MAX_INDEX: u64 = 16 * 1024 * 1024;

/// Errors about output paths.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// What is at an output path is not something a build may write to.
    #[error("{option} {}: {what}; {hint}; nothing was changed", path.display())]
    Refused {
        /// The option (`--out`, `--archive`, `--report`).
        option: &'static str,
        /// The path given.
        path: PathBuf,
        /// What is there, in words.
        what: String,
        /// What the option takes.
        hint: &'static str,
    },
    /// An I/O operation failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Writing the layout failed.
    #[error(transparent)]
    Oci(#[from] OciError),
}

const OUT_HINT: &str = "--out takes a new or empty directory or an existing OCI image layout";
const FILE_HINT: &str = "it takes a regular file (which is replaced) or a new file's name";

/// What is at `path` (whose `symlink_metadata` is `meta`), with a symlink's target.
fn describe(path: &Path, meta: &fs::Metadata) -> String {
    match fs::read_link(path) {
        Ok(target) if meta.file_type().is_symlink() => format!("a symlink to {}", target.display()),
        _ => stackbuild_common::kind_of(meta.file_type()).to_owned(),
    }
}

/// What `--out` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutTarget {
    /// Nothing there yet.
    New,
    /// An empty directory (or one holding only a killed build's temporary files).
    Empty,
    /// An OCI image layout.
    Layout,
}

/// Looks at what `--out` names, changing nothing; refuses what a build may not write into.
pub fn check_layout_dir(out: &Path) -> Result<LayoutTarget, OutputError> {
    let refused =
        |what: String| OutputError::Refused { option: "--out", path: out.to_owned(), what, hint: OUT_HINT };
    if out.as_os_str().is_empty() {
        return Err(refused("an empty path".into()));
    }
    let meta = match fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LayoutTarget::New),
        Err(e) => return Err(io_err("reading", out)(e).into()),
    };
    if !meta.is_dir() {
        return Err(refused(format!("{} is there", describe(out, &meta))));
    }
    let mut names: Vec<String> = fs::read_dir(out)
        .map_err(io_err("listing", out))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(io_err("listing", out))?;
    names.sort();
    if names.iter().all(|n| is_temp_name(n, oci::TEMP_PREFIX)) {
        return Ok(LayoutTarget::Empty);
    }
    match layout_problem(out, &names) {
        None => Ok(LayoutTarget::Layout),
        Some(problem) => Err(refused(format!("a directory that is not an OCI image layout ({problem})"))),
    }
}

/// Why the directory `dir` (holding `names`) is not an OCI image layout this build may update,
/// or `None` when it is one.
fn layout_problem(dir: &Path, names: &[String]) -> Option<String> {
    let regular = |name: &str| fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_file());
    if !names.iter().any(|n| n == "oci-layout") {
        return Some(format!("it has no oci-layout file and holds {}", stackbuild_common::list_names(names)));
    }
    if !regular("oci-layout") {
        return Some("its oci-layout is not a regular file".into());
    }
    let version = read_capped(&dir.join("oci-layout"), MAX_OCI_LAYOUT)
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["imageLayoutVersion"].as_str().map(str::to_owned));
    if !version.as_deref().is_some_and(|v| v.starts_with("1.")) {
        return Some("its oci-layout does not name image layout version 1".into());
    }
    if names.iter().any(|n| n == "index.json") {
        if !regular("index.json") {
            return Some("its index.json is not a regular file".into());
        }
        let index = read_capped(&dir.join("index.json"), MAX_INDEX)
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        let manifests_ok = index.as_ref().is_some_and(|i| i.is_object() && i["manifests"].is_array());
        if !manifests_ok {
            return Some("its index.json is not an image index with a manifests list".into());
        }
    }
    for sub in ["blobs", "blobs/sha256"] {
        if fs::symlink_metadata(dir.join(sub)).is_ok_and(|m| !m.is_dir()) {
            return Some(format!("its {sub} is not a directory"));
        }
    }
    None
}

/// The first `cap` bytes of a file, `None` when unreadable or longer.
fn read_capped(path: &Path, cap: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    File::open(path).ok()?.take(cap + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= cap).then_some(bytes)
}

/// Writes `images` under `tag` to `--out` `out` (see the module comment); returns the digest
/// `tag` names.
pub fn write_layout(out: &Path, images: &[Image], tag: &str) -> Result<String, OutputError> {
    // Whichever way this build writes, what an earlier killed build left next to `out` goes once
    // it is stale (an existing layout is updated in place, so no new sibling would clean it).
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    remove_stale_siblings(parent, &sibling_prefix(out));
    match check_layout_dir(out)? {
        LayoutTarget::New => write_new_layout(out, images, tag),
        LayoutTarget::Empty | LayoutTarget::Layout => Ok(oci::write_layout_images(out, images, tag)?),
    }
}

/// A new layout: written as a sibling of `out` under a unique temporary name and renamed into
/// place, so that a failed or killed build leaves none.
fn write_new_layout(out: &Path, images: &[Image], tag: &str) -> Result<String, OutputError> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(io_err("creating", parent))?;
    let tmp = parent.join(unique_temp_name(&sibling_prefix(out)));
    fs::create_dir(&tmp).map_err(io_err("creating a directory next to", out))?;
    let written = oci::write_layout_images(&tmp, images, tag).map_err(|e| name_user_path(e, &tmp, out));
    let result: Result<String, OutputError> = match written {
        Ok(digest) => match fs::rename(&tmp, out) {
            Ok(()) => stackbuild_common::sync_dir(parent)
                .map(|()| digest)
                .map_err(|e| io_err("syncing", parent)(e).into()),
            // Another build made `out` meanwhile (rename replaces only an empty directory): add
            // this tag to what is there now, as into any existing layout.
            Err(e) if matches!(e.kind(), io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists) => {
                let _ = fs::remove_dir_all(&tmp);
                return match check_layout_dir(out)? {
                    LayoutTarget::New => Err(io_err("moving the new layout into place at", out)(e).into()),
                    LayoutTarget::Empty | LayoutTarget::Layout => {
                        Ok(oci::write_layout_images(out, images, tag)?)
                    }
                };
            }
            Err(e) => Err(io_err("moving the new layout into place at", out)(e).into()),
        },
        Err(e) => Err(e.into()),
    };
    if result.is_err() {
        // Only what this build created: the temporary directory it made above.
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// `.<name>.stackbuild-tmp-`: the temporary names of `out`'s siblings.
fn sibling_prefix(out: &Path) -> String {
    let name = out.file_name().map_or_else(|| "image".into(), |n| n.to_string_lossy().into_owned());
    // Short enough that the stamp still fits NAME_MAX (255 bytes).
    let name: String = name.chars().take(100).collect();
    format!(".{name}.stackbuild-tmp-")
}

/// An error about a path inside the temporary layout `tmp` names the same path under `out`.
fn name_user_path(e: OciError, tmp: &Path, out: &Path) -> OciError {
    match e {
        OciError::Io(IoError { op, path, source }) => {
            let path = path.strip_prefix(tmp).map_or(path.clone(), |rel| out.join(rel));
            OciError::Io(IoError { op, path, source })
        }
        other => other,
    }
}

/// Removes temporary layouts a killed build left next to the output: directories named with
/// `prefix` by [`unique_temp_name`], once an hour old.
fn remove_stale_siblings(parent: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let ours = is_temp_name(&entry.file_name().to_string_lossy(), prefix);
        let dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if ours && dir && stackbuild_cache::modified_before(&entry, STALE_SIBLING) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// Checks that `path` (given as `option`) may be written as a file: nothing there, or a regular
/// file to replace.
pub fn check_output_file(option: &'static str, path: &Path) -> Result<(), OutputError> {
    if path.file_name().is_none() {
        let what = if path.as_os_str().is_empty() { "an empty path" } else { "a path without a file name" };
        return Err(OutputError::Refused {
            option,
            path: path.to_owned(),
            what: what.into(),
            hint: FILE_HINT,
        });
    }
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("reading", path)(e).into()),
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(meta) => Err(OutputError::Refused {
            option,
            path: path.to_owned(),
            what: format!("{} is there", describe(path, &meta)),
            hint: FILE_HINT,
        }),
    }
}

/// Refuses an `--archive` that is the `--out` directory itself (which the build is about to
/// make), compared as absolute paths.
pub fn check_distinct(archive: &Path, out: &Path) -> Result<(), OutputError> {
    let same = match (std::path::absolute(archive), std::path::absolute(out)) {
        (Ok(a), Ok(o)) => a == o,
        _ => archive == out,
    };
    if same {
        return Err(OutputError::Refused {
            option: "--archive",
            path: archive.to_owned(),
            what: "the --out directory of the same build".into(),
            hint: FILE_HINT,
        });
    }
    Ok(())
}

/// Writes `bytes` to the file `path` given as `option`, after [`check_output_file`], through a
/// unique temporary name in its directory and a rename.
pub fn write_file(option: &'static str, path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_output_file(option, path)?;
    stackbuild_common::write_atomic(path, bytes).map_err(|e| io_err("writing", path)(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_there_decides() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        assert_eq!(check_layout_dir(&p("new")).unwrap(), LayoutTarget::New);
        fs::create_dir(p("empty")).unwrap();
        assert_eq!(check_layout_dir(&p("empty")).unwrap(), LayoutTarget::Empty);

        fs::create_dir(p("user")).unwrap();
        fs::write(p("user/thesis.tex"), "mine").unwrap();
        let err = check_layout_dir(&p("user")).unwrap_err().to_string();
        assert!(err.contains("not an OCI image layout") && err.contains("thesis.tex"), "{err}");

        fs::write(p("file"), "mine").unwrap();
        let err = check_layout_dir(&p("file")).unwrap_err().to_string();
        assert!(err.contains("a regular file is there"), "{err}");

        std::os::unix::fs::symlink(p("empty"), p("link")).unwrap();
        let err = check_layout_dir(&p("link")).unwrap_err().to_string();
        assert!(err.contains("a symlink to"), "{err}");

        fs::create_dir(p("layout")).unwrap();
        fs::write(p("layout/oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        fs::write(p("layout/index.json"), r#"{"schemaVersion":2,"manifests":[]}"#).unwrap();
        assert_eq!(check_layout_dir(&p("layout")).unwrap(), LayoutTarget::Layout);
        fs::write(p("layout/index.json"), "{").unwrap();
        let err = check_layout_dir(&p("layout")).unwrap_err().to_string();
        assert!(err.contains("index.json"), "{err}");
    }

    #[test]
    fn output_files_are_regular_or_new() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        check_output_file("--archive", &p("new.tar")).unwrap();
        fs::write(p("old.tar"), "x").unwrap();
        check_output_file("--archive", &p("old.tar")).unwrap();
        let err = check_output_file("--archive", dir.path()).unwrap_err().to_string();
        assert!(err.contains("--archive") && err.contains("a directory is there"), "{err}");
        std::os::unix::fs::symlink("/etc/passwd", p("link.tar")).unwrap();
        let err = check_output_file("--archive", &p("link.tar")).unwrap_err().to_string();
        assert!(err.contains("a symlink to /etc/passwd"), "{err}");
        let err = check_output_file("--report", Path::new("/dev/null")).unwrap_err().to_string();
        assert!(err.contains("a character device"), "{err}");
        for nameless in ["", "/", "x/.."] {
            assert!(check_output_file("--archive", Path::new(nameless)).is_err(), "{nameless:?}");
        }
        assert!(check_layout_dir(Path::new("")).is_err());
    }
}
