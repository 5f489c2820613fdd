//! Patches applied to a staged tree: exact find/replace, and strict unified diffs.
//!
//! Both kinds are strict on purpose. A recipe's patch that no longer matches its upstream (a new
//! release moved the line, changed the text) must fail the build with a message that names the
//! patch, the file and the place, rather than apply somewhere else: there is no fuzz and no offset
//! search, unlike GNU `patch`.
//!
//! - Find/replace: the file must contain exactly `count` non-overlapping occurrences.
//! - Unified diff (`diff -u`, `git diff`): every hunk must apply at exactly the line its header
//!   states, with identical context. Several files per diff, new files (`--- /dev/null`), deleted
//!   files (`+++ /dev/null`), `a/` and `b/` prefixes, and `\ No newline at end of file` are
//!   supported; binary diffs and renames are not.
//!
//! Paths are resolved inside the root without following symlinks (every existing component must
//! be a real directory, the target a regular file). All changes of a patch are computed before
//! any file is written, so a patch that fails leaves the tree untouched; each file is then
//! replaced atomically (a temporary file in the same directory, renamed over it) keeping its mode.

use std::fmt;
use std::fs::{self, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use stackbuild_common::{io_err, IoError};

/// How much of a searched text or mismatching line error messages quote.
const EXCERPT_CHARS: usize = 60;

/// One patch of a recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchSpec {
    /// Replace exactly `count` occurrences of `find` by `replace` in `file`.
    FindReplace {
        /// Path relative to the tree root.
        file: String,
        /// The text to find (non-empty).
        find: String,
        /// Its replacement.
        replace: String,
        /// How many non-overlapping occurrences there must be (at least 1).
        count: usize,
    },
    /// A unified diff.
    Diff {
        /// The diff.
        diff_text: String,
        /// Where the diff came from, for error messages.
        diff_path: PathBuf,
    },
}

/// What a patch changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchReport {
    /// The patch's name.
    pub name: String,
    /// Files changed, created or deleted, relative to the root, sorted.
    pub files: Vec<String>,
    /// Replacements made (find/replace) or hunks applied (diff).
    pub changes: usize,
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The patch itself is unusable (empty search text, zero count).
    #[error("patch {name:?}: {problem}")]
    InvalidSpec {
        /// The patch.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// A file name that is not a plain relative path inside the tree.
    #[error("patch {name:?}: file {file:?} {problem}")]
    InvalidPath {
        /// The patch.
        name: String,
        /// The file name as given.
        file: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The file to patch does not exist.
    #[error("patch {name:?}: {file} does not exist")]
    Missing {
        /// The patch.
        name: String,
        /// The file, relative to the root.
        file: String,
    },
    /// The file to patch, or a directory on its way, is not what it must be.
    #[error("patch {name:?}: {file}: {problem}")]
    NotRegular {
        /// The patch.
        name: String,
        /// The file, relative to the root.
        file: String,
        /// What is in the way.
        problem: String,
    },
    /// A find/replace found a different number of matches.
    #[error("patch {name:?}: expected {count} {} of {find} in {file}, found {found}", plural(*count, "match", "matches"))]
    Count {
        /// The patch.
        name: String,
        /// The expected count.
        count: usize,
        /// An excerpt of the searched text, quoted.
        find: String,
        /// The file, relative to the root.
        file: String,
        /// The matches found.
        found: usize,
    },
    /// The diff text is malformed.
    #[error("patch {name:?}: {}:{line}: {problem}", diff_path.display())]
    Parse {
        /// The patch.
        name: String,
        /// Where the diff came from.
        diff_path: PathBuf,
        /// The 1-based line of the diff.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A hunk does not apply.
    #[error("patch {name:?}: hunk {hunk} does not apply to {file}: {problem}")]
    Hunk {
        /// The patch.
        name: String,
        /// The file, relative to the root.
        file: String,
        /// The hunk header, `@@ -l,n +l,n @@`.
        hunk: String,
        /// What differs.
        problem: String,
    },
    /// A file the diff creates already exists.
    #[error("patch {name:?}: {file} is created by the diff but already exists")]
    Exists {
        /// The patch.
        name: String,
        /// The file, relative to the root.
        file: String,
    },
    /// Reading or writing a file failed.
    #[error("patch {name:?}: {source}")]
    Io {
        /// The patch.
        name: String,
        /// What failed, on which file.
        #[source]
        source: IoError,
    },
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// Applies the patch `name` to the tree at `root`.
pub fn apply(name: &str, spec: &PatchSpec, root: &Path) -> Result<PatchReport, PatchError> {
    let ctx = Ctx { name, root };
    let (changes, count) = match spec {
        PatchSpec::FindReplace { file, find, replace, count } => {
            (vec![ctx.find_replace(file, find, replace, *count)?], *count)
        }
        PatchSpec::Diff { diff_text, diff_path } => {
            let files = parse_diff(diff_text).map_err(|(line, problem)| PatchError::Parse {
                name: name.to_owned(),
                diff_path: diff_path.clone(),
                line,
                problem,
            })?;
            let hunks = files.iter().map(|f| f.hunks.len()).sum();
            let mut changes: Vec<Change> = Vec::new();
            for file in &files {
                let change = ctx.apply_file(file)?;
                if changes.iter().any(|c| c.rel == change.rel) {
                    return Err(PatchError::InvalidSpec {
                        name: name.to_owned(),
                        problem: format!("the diff changes {} twice", change.rel),
                    });
                }
                changes.push(change);
            }
            (changes, hunks)
        }
    };
    for change in &changes {
        ctx.write(change)?;
    }
    let mut files: Vec<String> = changes.into_iter().map(|c| c.rel).collect();
    files.sort();
    Ok(PatchReport { name: name.to_owned(), files, changes: count })
}

/// A computed change to one file, written only once every change of the patch is known.
struct Change {
    rel: String,
    path: PathBuf,
    /// The new content, or `None` to delete the file.
    content: Option<Vec<u8>>,
    mode: u32,
    /// Parent directories to create first (components relative to the root).
    create_parents: bool,
}

struct Ctx<'a> {
    name: &'a str,
    root: &'a Path,
}

/// Where a path points, resolved without following symlinks.
enum Resolved {
    /// A regular file with this mode.
    File(PathBuf, u32),
    /// Nothing there yet; the parents that exist are real directories.
    Absent(PathBuf),
}

impl Ctx<'_> {
    fn io<'a>(&'a self, op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PatchError + 'a {
        move |source| PatchError::Io { name: self.name.to_owned(), source: io_err(op, path)(source) }
    }

    /// Resolves `rel` inside the root: a plain relative path whose existing components are real
    /// directories (not symlinks), ending in a regular file or nothing.
    fn resolve(&self, rel: &str) -> Result<Resolved, PatchError> {
        let invalid =
            |problem| PatchError::InvalidPath { name: self.name.to_owned(), file: rel.to_owned(), problem };
        if rel.is_empty() {
            return Err(invalid("is empty"));
        }
        if rel.starts_with('/') {
            return Err(invalid("must be relative to the tree root"));
        }
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.iter().any(|p| matches!(*p, "" | "." | "..") || p.contains('\0')) {
            return Err(invalid("must not contain empty, `.` or `..` components"));
        }
        let not_regular = |problem: String| PatchError::NotRegular {
            name: self.name.to_owned(),
            file: rel.to_owned(),
            problem,
        };
        let mut path = self.root.to_owned();
        for (i, part) in parts.iter().enumerate() {
            path.push(part);
            let last = i + 1 == parts.len();
            match fs::symlink_metadata(&path) {
                Ok(m) if last && m.file_type().is_file() => {
                    return Ok(Resolved::File(path, m.permissions().mode() & 0o7777));
                }
                Ok(m) if !last && m.file_type().is_dir() => {}
                Ok(m) => {
                    let what = if m.file_type().is_symlink() { "a symlink" } else { "not a regular file" };
                    let at = parts[..=i].join("/");
                    return Err(not_regular(if last {
                        format!("is {what}")
                    } else {
                        format!(
                            "{at} is {}",
                            if m.file_type().is_symlink() { what } else { "not a directory" }
                        )
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let full = parts.iter().fold(self.root.to_owned(), |p, c| p.join(c));
                    return Ok(Resolved::Absent(full));
                }
                Err(e) => return Err(self.io("reading", &path)(e)),
            }
        }
        Err(invalid("is empty"))
    }

    fn existing(&self, rel: &str) -> Result<(PathBuf, u32), PatchError> {
        match self.resolve(rel)? {
            Resolved::File(path, mode) => Ok((path, mode)),
            Resolved::Absent(_) => {
                Err(PatchError::Missing { name: self.name.to_owned(), file: rel.to_owned() })
            }
        }
    }

    fn find_replace(
        &self,
        file: &str,
        find: &str,
        replace: &str,
        count: usize,
    ) -> Result<Change, PatchError> {
        let invalid = |problem: &str| PatchError::InvalidSpec {
            name: self.name.to_owned(),
            problem: problem.to_owned(),
        };
        if find.is_empty() {
            return Err(invalid("the text to find is empty"));
        }
        if count == 0 {
            return Err(invalid("count must be at least 1"));
        }
        let (path, mode) = self.existing(file)?;
        let content = fs::read(&path).map_err(self.io("reading", &path))?;
        let hits = find_all(&content, find.as_bytes());
        if hits.len() != count {
            return Err(PatchError::Count {
                name: self.name.to_owned(),
                count,
                find: excerpt(find.as_bytes()),
                file: file.to_owned(),
                found: hits.len(),
            });
        }
        let mut out = Vec::with_capacity(content.len().saturating_add(count.saturating_mul(replace.len())));
        let mut pos = 0;
        for hit in hits {
            out.extend_from_slice(&content[pos..hit]);
            out.extend_from_slice(replace.as_bytes());
            pos = hit + find.len();
        }
        out.extend_from_slice(&content[pos..]);
        Ok(Change { rel: file.to_owned(), path, content: Some(out), mode, create_parents: false })
    }

    fn apply_file(&self, fp: &FilePatch) -> Result<Change, PatchError> {
        let rel = fp.target();
        let hunk_err = |hunk: &Hunk, problem: String| PatchError::Hunk {
            name: self.name.to_owned(),
            file: rel.to_owned(),
            hunk: hunk.header.clone(),
            problem,
        };
        let (path, old, mode, create_parents) = if fp.old.is_none() {
            match self.resolve(rel)? {
                Resolved::File(..) => {
                    return Err(PatchError::Exists { name: self.name.to_owned(), file: rel.to_owned() })
                }
                Resolved::Absent(path) => (path, Vec::new(), fp.new_mode.unwrap_or(0o644), true),
            }
        } else {
            let (path, mode) = self.existing(rel)?;
            let content = fs::read(&path).map_err(self.io("reading", &path))?;
            (path, content, mode, false)
        };
        let lines: Vec<&[u8]> = old.split_inclusive(|b| *b == b'\n').collect();
        let mut out: Vec<u8> = Vec::with_capacity(old.len());
        let mut pos = 0;
        for hunk in &fp.hunks {
            // `-0,0` inserts before line 1; `-l,0` inserts after line l; otherwise line l is the first
            // old line of the hunk.
            let start = if hunk.old_len == 0 { hunk.old_start } else { hunk.old_start - 1 };
            if start < pos {
                return Err(hunk_err(hunk, "it overlaps or precedes the previous hunk".to_owned()));
            }
            // Checked: a header such as `@@ -18446744073709551615,2 +1,2 @@` must not overflow.
            let Some(end) = start.checked_add(hunk.old_len).filter(|&end| end <= lines.len()) else {
                let n = lines.len();
                return Err(hunk_err(hunk, format!("the file has only {n} {}", plural(n, "line", "lines"))));
            };
            for line in &lines[pos..start] {
                out.extend_from_slice(line);
            }
            for (k, expected) in hunk.old_lines().enumerate() {
                let found = lines[start + k];
                if found != expected {
                    return Err(hunk_err(
                        hunk,
                        format!(
                            "line {} is {}, the patch expects {}",
                            start + k + 1,
                            excerpt(found),
                            excerpt(expected)
                        ),
                    ));
                }
            }
            for line in hunk.new_lines() {
                out.extend_from_slice(line);
            }
            pos = end;
        }
        for line in &lines[pos..] {
            out.extend_from_slice(line);
        }
        let content = if fp.new.is_none() {
            if !out.is_empty() {
                let last = fp.hunks.last().map_or(String::new(), |h| h.header.clone());
                return Err(PatchError::Hunk {
                    name: self.name.to_owned(),
                    file: rel.to_owned(),
                    hunk: last,
                    problem: "the diff deletes the file but the hunks do not remove all of it".to_owned(),
                });
            }
            None
        } else {
            Some(out)
        };
        Ok(Change { rel: rel.to_owned(), path, content, mode, create_parents })
    }

    /// Writes one change: a temporary file next to the target, then `rename` over it.
    fn write(&self, change: &Change) -> Result<(), PatchError> {
        let Some(content) = &change.content else {
            return fs::remove_file(&change.path).map_err(self.io("removing", &change.path));
        };
        let dir = change.path.parent().unwrap_or(self.root);
        if change.create_parents {
            // `resolve` checked that every existing component is a real directory.
            let mut d = self.root.to_owned();
            for part in dir.strip_prefix(self.root).unwrap_or(Path::new("")).components() {
                d.push(part);
                if fs::symlink_metadata(&d).is_err() {
                    fs::create_dir(&d).map_err(self.io("creating", &d))?;
                    fs::set_permissions(&d, Permissions::from_mode(0o755))
                        .map_err(self.io("setting permissions of", &d))?;
                }
            }
        }
        stackbuild_common::write_atomic_mode(&change.path, content, change.mode)
            .map_err(self.io("writing", &change.path))
    }
}

/// Start offsets of the non-overlapping occurrences of `needle`, left to right.
fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut hits = Vec::new();
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if hay[i..].starts_with(needle) {
            hits.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    hits
}

/// A quoted, shortened rendering of some text for error messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}…")
    } else {
        format!("{head:?}")
    }
}

/// One line of a hunk, with its line ending (absent after `\ No newline at end of file`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum HunkLine {
    Context(Vec<u8>),
    Remove(Vec<u8>),
    Add(Vec<u8>),
}

impl HunkLine {
    fn text_mut(&mut self) -> &mut Vec<u8> {
        match self {
            Self::Context(t) | Self::Remove(t) | Self::Add(t) => t,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Hunk {
    /// `@@ -l,n +l,n @@`, without the section text.
    header: String,
    old_start: usize,
    old_len: usize,
    lines: Vec<HunkLine>,
}

impl Hunk {
    fn old_lines(&self) -> impl Iterator<Item = &[u8]> {
        self.lines.iter().filter_map(|l| match l {
            HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_slice()),
            HunkLine::Add(_) => None,
        })
    }
    fn new_lines(&self) -> impl Iterator<Item = &[u8]> {
        self.lines.iter().filter_map(|l| match l {
            HunkLine::Context(t) | HunkLine::Add(t) => Some(t.as_slice()),
            HunkLine::Remove(_) => None,
        })
    }
}

/// The changes to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FilePatch {
    /// `None` for `/dev/null` (a new file).
    old: Option<String>,
    /// `None` for `/dev/null` (a deleted file).
    new: Option<String>,
    /// From git's `new file mode 100755`.
    new_mode: Option<u32>,
    hunks: Vec<Hunk>,
}

impl FilePatch {
    /// The file patched: the new name, or the old one for a deletion.
    fn target(&self) -> &str {
        self.new.as_deref().or(self.old.as_deref()).unwrap_or_default()
    }
}

impl fmt::Display for Hunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.header)
    }
}

/// A diff parse failure: 1-based line and problem.
type ParseError = (usize, String);

/// Parses a file name of a `---`/`+++` line: the timestamp after a tab dropped, `/dev/null` as
/// `None`, one `a/` or `b/` prefix stripped.
fn parse_name(raw: &str, line: usize) -> Result<Option<String>, ParseError> {
    let name = raw.split('\t').next().unwrap_or_default().trim_end_matches(['\r', '\n']).trim_end();
    if name == "/dev/null" {
        return Ok(None);
    }
    if name.starts_with('"') {
        return Err((line, format!("quoted file names are not supported: {name}")));
    }
    let name = name.strip_prefix("a/").or_else(|| name.strip_prefix("b/")).unwrap_or(name);
    if name.is_empty() {
        return Err((line, "empty file name".to_owned()));
    }
    Ok(Some(name.to_owned()))
}

/// Parses `@@ -l[,n] +l[,n] @@`; returns the header, old start and length, new length.
fn parse_hunk_header(line: &str, at: usize) -> Result<(String, usize, usize, usize), ParseError> {
    let bad = || (at, format!("malformed hunk header {:?}", line.trim_end()));
    let rest = line.strip_prefix("@@ -").ok_or_else(bad)?;
    let (ranges, _section) = rest.split_once(" @@").ok_or_else(bad)?;
    let (old, new) = ranges.split_once(" +").ok_or_else(bad)?;
    let range = |r: &str| -> Result<(usize, usize), ParseError> {
        let (start, len) = r.split_once(',').unwrap_or((r, "1"));
        Ok((start.parse().map_err(|_| bad())?, len.parse().map_err(|_| bad())?))
    };
    let (old_start, old_len) = range(old)?;
    let (_, new_len) = range(new)?;
    if old_len > 0 && old_start == 0 {
        return Err(bad());
    }
    Ok((format!("@@ -{old} +{new} @@"), old_start, old_len, new_len))
}

/// Parses a unified diff into per-file patches. Lines outside file sections (commit messages,
/// `diff --git`, `index` lines) are ignored, except those that announce unsupported changes.
fn parse_diff(text: &str) -> Result<Vec<FilePatch>, ParseError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut files = Vec::new();
    let mut new_mode = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let at = i + 1;
        if line.starts_with("diff --git ") {
            new_mode = None;
        } else if let Some(mode) = line.strip_prefix("new file mode ") {
            let mode = u32::from_str_radix(mode.trim(), 8)
                .map_err(|_| (at, format!("bad mode {:?}", mode.trim())))?;
            new_mode = Some(mode & 0o777);
        } else if line.starts_with("GIT binary patch") || line.starts_with("Binary files ") {
            return Err((at, "binary diffs are not supported".to_owned()));
        } else if line.starts_with("rename from ") || line.starts_with("copy from ") {
            return Err((at, "renames and copies are not supported".to_owned()));
        } else if line.starts_with("@@ ") {
            return Err((at, "hunk without a preceding ---/+++ file header".to_owned()));
        } else if let (Some(old), Some(new)) =
            (line.strip_prefix("--- "), lines.get(i + 1).and_then(|l| l.strip_prefix("+++ ")))
        {
            let old = parse_name(old, at)?;
            let new = parse_name(new, at + 1)?;
            if old.is_none() && new.is_none() {
                return Err((at, "both file names are /dev/null".to_owned()));
            }
            i += 2;
            let mut hunks = Vec::new();
            while let Some(header) = lines.get(i).filter(|l| l.starts_with("@@ ")) {
                let (hunk, next) = parse_hunk(&lines, i, header)?;
                hunks.push(hunk);
                i = next;
            }
            if hunks.is_empty() {
                return Err((at, format!("no hunks for {}", line.trim_end())));
            }
            if old.is_none() && (hunks.len() != 1 || hunks[0].old_len != 0) {
                return Err((at, "a new file must have one hunk that removes nothing".to_owned()));
            }
            files.push(FilePatch { old, new, new_mode: new_mode.take(), hunks });
            continue;
        }
        i += 1;
    }
    if files.is_empty() {
        return Err((1, "no file changes found (expected ---/+++ headers and @@ hunks)".to_owned()));
    }
    Ok(files)
}

/// Parses the hunk whose header is `lines[i]`; returns it and the index after it.
fn parse_hunk(lines: &[&str], i: usize, header: &str) -> Result<(Hunk, usize), ParseError> {
    let (header, old_start, old_len, new_len) = parse_hunk_header(header, i + 1)?;
    let (mut old_left, mut new_left) = (old_len, new_len);
    let mut body: Vec<HunkLine> = Vec::new();
    let mut j = i + 1;
    while old_left > 0 || new_left > 0 {
        let Some(line) = lines.get(j) else {
            return Err((j, format!("hunk {header} ends early")));
        };
        let at = j + 1;
        let bytes = line.as_bytes();
        let (kind, text) = (bytes[0], bytes[1..].to_vec());
        let entry = match kind {
            b' ' => HunkLine::Context(text),
            // An empty line where a context line of an empty line was expected: editors and mail
            // clients strip the lone space (GNU patch accepts this too).
            b'\n' | b'\r' => HunkLine::Context(bytes.to_vec()),
            b'-' => HunkLine::Remove(text),
            b'+' => HunkLine::Add(text),
            b'\\' => {
                strip_newline(&mut body, at)?;
                j += 1;
                continue;
            }
            _ => return Err((at, format!("unexpected line in hunk {header}: {}", excerpt(bytes)))),
        };
        let (old_use, new_use) = match entry {
            HunkLine::Context(_) => (1, 1),
            HunkLine::Remove(_) => (1, 0),
            HunkLine::Add(_) => (0, 1),
        };
        if old_left < old_use || new_left < new_use {
            return Err((at, format!("hunk {header} has more lines than its header says")));
        }
        old_left -= old_use;
        new_left -= new_use;
        body.push(entry);
        j += 1;
    }
    if lines.get(j).is_some_and(|l| l.starts_with('\\')) {
        strip_newline(&mut body, j + 1)?;
        j += 1;
    }
    Ok((Hunk { header, old_start, old_len, lines: body }, j))
}

/// Applies `\ No newline at end of file` to the previous hunk line.
fn strip_newline(body: &mut [HunkLine], at: usize) -> Result<(), ParseError> {
    let last = body.last_mut().ok_or_else(|| (at, "`\\ No newline` marker before any line".to_owned()))?;
    let text = last.text_mut();
    if text.last() == Some(&b'\n') {
        text.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("src/pkg")).unwrap();
        fs::write(tmp.path().join("src/pkg/config.py"), "A = 1\nB = 2\nC = 3\nD = 4\nE = 5\n").unwrap();
        fs::set_permissions(tmp.path().join("src/pkg/config.py"), Permissions::from_mode(0o755)).unwrap();
        fs::write(tmp.path().join("setup.cfg"), "[x]\nflag = old\nother = old\n").unwrap();
        tmp
    }

    fn fr(file: &str, find: &str, replace: &str, count: usize) -> PatchSpec {
        PatchSpec::FindReplace { file: file.into(), find: find.into(), replace: replace.into(), count }
    }

    fn diff(text: &str) -> PatchSpec {
        PatchSpec::Diff { diff_text: text.to_owned(), diff_path: PathBuf::from("patches/fix.diff") }
    }

    fn read(root: &Path, rel: &str) -> String {
        fs::read_to_string(root.join(rel)).unwrap()
    }

    #[test]
    fn find_replace_counts_and_keeps_mode() {
        let t = tree();
        let report = apply("flags", &fr("setup.cfg", "= old", "= new", 2), t.path()).unwrap();
        assert_eq!(report, PatchReport { name: "flags".into(), files: vec!["setup.cfg".into()], changes: 2 });
        assert_eq!(read(t.path(), "setup.cfg"), "[x]\nflag = new\nother = new\n");
        apply("c", &fr("src/pkg/config.py", "C = 3", "C = 30", 1), t.path()).unwrap();
        let mode = fs::metadata(t.path().join("src/pkg/config.py")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        // Non-overlapping: "aaaa" holds two "aa".
        fs::write(t.path().join("a.txt"), "aaaa").unwrap();
        apply("aa", &fr("a.txt", "aa", "b", 2), t.path()).unwrap();
        assert_eq!(read(t.path(), "a.txt"), "bb");
        let leftovers: Vec<_> = fs::read_dir(t.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(!leftovers.iter().any(|n| n.to_string_lossy().contains("stackbuild-patch")));
    }

    #[test]
    fn find_replace_errors() {
        let t = tree();
        let e = apply("flags", &fr("setup.cfg", "= old", "= new", 1), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "flags": expected 1 match of "= old" in setup.cfg, found 2"#);
        let long = "flag = something that is much longer than the excerpt shown in messages, really";
        let e = apply("long", &fr("setup.cfg", long, "", 3), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "long": expected 3 matches of "flag = something that is much longer than the excerpt shown "… in setup.cfg, found 0"#);
        let e = apply("gone", &fr("src/missing.py", "x", "y", 1), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "gone": src/missing.py does not exist"#);
        let e = apply("up", &fr("../etc/passwd", "x", "y", 1), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "up": file "../etc/passwd" must not contain empty, `.` or `..` components"#);
        let e = apply("dir", &fr("src", "x", "y", 1), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "dir": src: is not a regular file"#);
        std::os::unix::fs::symlink("/etc", t.path().join("etc")).unwrap();
        let e = apply("link", &fr("etc/hostname", "x", "y", 1), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "link": etc/hostname: etc is a symlink"#);
        let e = apply("zero", &fr("setup.cfg", "x", "y", 0), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "zero": count must be at least 1"#);
        assert_eq!(read(t.path(), "setup.cfg"), "[x]\nflag = old\nother = old\n");
    }

    #[test]
    fn huge_hunk_numbers_are_errors_not_panics() {
        let max = usize::MAX;
        let headers = [
            "@@ -18446744073709551615,2 +1,2 @@".to_owned(),
            format!("@@ -{max},{max} +1,1 @@"),
            format!("@@ -{},2 +1,2 @@", max - 1),
            format!("@@ -1,{max} +1,{max} @@"),
            "@@ -99999999999999999999999,1 +1,1 @@".to_owned(),
            "@@ -1,2 +18446744073709551615,18446744073709551615 @@".to_owned(),
        ];
        for header in headers {
            let t = tree();
            let text =
                format!("--- a/setup.cfg\n+++ b/setup.cfg\n{header}\n-[x]\n-flag = old\n+[x]\n+flag = new\n");
            let result = std::panic::catch_unwind(|| apply("huge", &diff(&text), t.path()));
            let result = result.unwrap_or_else(|_| panic!("{header} panicked"));
            assert!(result.is_err(), "{header} applied");
            assert_eq!(read(t.path(), "setup.cfg"), "[x]\nflag = old\nother = old\n");
        }
    }

    const MULTI: &str = "\
diff --git a/src/pkg/config.py b/src/pkg/config.py
index 1111111..2222222 100755
--- a/src/pkg/config.py
+++ b/src/pkg/config.py
@@ -1,3 +1,3 @@
 A = 1
-B = 2
+B = 20
 C = 3
@@ -5 +5,2 @@
 E = 5
+F = 6
diff --git a/docs/NOTES.md b/docs/NOTES.md
new file mode 100644
--- /dev/null
+++ b/docs/NOTES.md
@@ -0,0 +1,2 @@
+# Notes
+patched by stackbuild
\\ No newline at end of file
--- setup.cfg.orig\t2024-01-01 00:00:00
+++ setup.cfg\t2024-01-02 00:00:00
@@ -1,3 +1,2 @@
 [x]
 flag = old
-other = old
";

    #[test]
    fn applies_a_multi_file_diff() {
        let t = tree();
        let report = apply("multi", &diff(MULTI), t.path()).unwrap();
        assert_eq!(report.files, vec!["docs/NOTES.md", "setup.cfg", "src/pkg/config.py"]);
        assert_eq!(report.changes, 4);
        assert_eq!(read(t.path(), "src/pkg/config.py"), "A = 1\nB = 20\nC = 3\nD = 4\nE = 5\nF = 6\n");
        assert_eq!(read(t.path(), "docs/NOTES.md"), "# Notes\npatched by stackbuild");
        assert_eq!(read(t.path(), "setup.cfg"), "[x]\nflag = old\n");
        let mode = fs::metadata(t.path().join("src/pkg/config.py")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        let mode = fs::metadata(t.path().join("docs/NOTES.md")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        // Applying again fails: the context moved on, and the new file exists.
        let e = apply("multi", &diff(MULTI), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "multi": hunk @@ -1,3 +1,3 @@ does not apply to src/pkg/config.py: line 2 is "B = 20\n", the patch expects "B = 2\n""#);
    }

    #[test]
    fn diff_errors_leave_the_tree_untouched() {
        let t = tree();
        // The second file's hunk is stale; the first file must not be written either.
        let stale = "\
--- a/setup.cfg
+++ b/setup.cfg
@@ -2 +2 @@
-flag = old
+flag = new
--- a/src/pkg/config.py
+++ b/src/pkg/config.py
@@ -4,2 +4,2 @@
-D = 40
+D = 41
 E = 5
";
        let e = apply("stale", &diff(stale), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "stale": hunk @@ -4,2 +4,2 @@ does not apply to src/pkg/config.py: line 4 is "D = 4\n", the patch expects "D = 40\n""#);
        assert_eq!(read(t.path(), "setup.cfg"), "[x]\nflag = old\nother = old\n");

        // No offset search: the right text one line off is still a failure.
        let shifted = "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -3 +3 @@\n-flag = old\n+flag = new\n";
        let e = apply("shifted", &diff(shifted), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "shifted": hunk @@ -3 +3 @@ does not apply to setup.cfg: line 3 is "other = old\n", the patch expects "flag = old\n""#);

        let past_end = "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -9,2 +9,2 @@\n-x\n-y\n+z\n+w\n";
        let e = apply("end", &diff(past_end), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "end": hunk @@ -9,2 +9,2 @@ does not apply to setup.cfg: the file has only 3 lines"#);

        let missing = "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n";
        let e = apply("missing", &diff(missing), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "missing": nope.py does not exist"#);

        let exists = "--- /dev/null\n+++ b/setup.cfg\n@@ -0,0 +1 @@\n+x\n";
        let e = apply("exists", &diff(exists), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "exists": setup.cfg is created by the diff but already exists"#);

        let escape = "--- /dev/null\n+++ b/../outside\n@@ -0,0 +1 @@\n+x\n";
        let e = apply("escape", &diff(escape), t.path()).unwrap_err();
        insta::assert_snapshot!(e, @r#"patch "escape": file "../outside" must not contain empty, `.` or `..` components"#);
    }

    #[test]
    fn malformed_diffs() {
        let t = tree();
        let cases = [
            ("empty", "just some text\n"),
            ("short", "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1,3 +1,3 @@\n [x]\n"),
            ("header", "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1,x +1 @@\n [x]\n"),
            ("orphan", "@@ -1 +1 @@\n-a\n+b\n"),
            ("binary", "diff --git a/x b/x\nBinary files a/x and b/x differ\n"),
            ("garbage", "--- a/setup.cfg\n+++ b/setup.cfg\n@@ -1,2 +1,2 @@\n [x]\n*flag\n"),
        ];
        let mut out = String::new();
        for (name, text) in cases {
            out.push_str(&apply(name, &diff(text), t.path()).unwrap_err().to_string());
            out.push('\n');
        }
        insta::assert_snapshot!(out, @r#"
        patch "empty": patches/fix.diff:1: no file changes found (expected ---/+++ headers and @@ hunks)
        patch "short": patches/fix.diff:4: hunk @@ -1,3 +1,3 @@ ends early
        patch "header": patches/fix.diff:3: malformed hunk header "@@ -1,x +1 @@"
        patch "orphan": patches/fix.diff:1: hunk without a preceding ---/+++ file header
        patch "binary": patches/fix.diff:2: binary diffs are not supported
        patch "garbage": patches/fix.diff:5: unexpected line in hunk @@ -1,2 +1,2 @@: "*flag\n"
        "#);
    }

    #[test]
    fn deletes_and_handles_missing_final_newline() {
        let t = tree();
        fs::write(t.path().join("tail.txt"), "one\ntwo").unwrap();
        let d = "--- a/tail.txt\n+++ b/tail.txt\n@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n+two\n";
        apply("tail", &diff(d), t.path()).unwrap();
        assert_eq!(read(t.path(), "tail.txt"), "one\ntwo\n");
        let del = "--- a/tail.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n";
        let report = apply("del", &diff(del), t.path()).unwrap();
        assert_eq!(report.files, vec!["tail.txt"]);
        assert!(!t.path().join("tail.txt").exists());
    }
}
