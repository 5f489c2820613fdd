//! `IMAGE[:TAG]` on the command line: a local image (an OCI layout directory or an archive) and
//! the tag to pick in it. `stackbuild audit` and `stackbuild affinity` read it the same way.
//!
//! A path may hold `:` itself, and so may a tag (`image.tar:name:latest`, where the archive's
//! `org.opencontainers.image.ref.name` is `name:latest`), so the split is decided by what exists:
//! the whole argument, when it exists, is the path; otherwise the longest prefix before a `:` that
//! exists is the path and the rest is the tag; when nothing exists, the tag is after the last `:`
//! (so that `layout:v1` splits the same before the layout is built as after). A tag never holds
//! `/` (OCI distribution spec,
//! <https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests>).
//!
//! The recipe's `oci = "PATH[:TAG]"` splits the same way, against the recipe's directory.

use std::path::{Path, PathBuf};

/// A local image argument, split into the path and the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArg {
    /// The layout directory or archive. When nothing named by the argument exists, the argument
    /// itself, so that opening it reports it as missing.
    pub path: PathBuf,
    /// The tag after the path, if any.
    pub tag: Option<String>,
}

impl ImageArg {
    /// Split `arg` as the module documentation says.
    pub fn parse(arg: &str) -> Self {
        Self::parse_in(Path::new(""), arg)
    }

    /// [`ImageArg::parse`] with relative paths taken against `dir`; `path` is `arg`'s part as
    /// written (join it to `dir`).
    pub fn parse_in(dir: &Path, arg: &str) -> Self {
        let whole = Self { path: PathBuf::from(arg), tag: None };
        let exists = |p: &str| dir.join(p).exists();
        if exists(arg) {
            return whole;
        }
        let tagged = |(path, tag): &(&str, &str)| !path.is_empty() && !tag.is_empty() && !tag.contains('/');
        let split = arg
            .rmatch_indices(':')
            .map(|(i, _)| (&arg[..i], &arg[i + 1..]))
            .find(|pair| tagged(pair) && exists(pair.0))
            .or_else(|| arg.rsplit_once(':').filter(tagged));
        split.map_or(whole, |(path, tag)| Self { path: PathBuf::from(path), tag: Some(tag.to_owned()) })
    }

    /// Whether the path exists.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }
}

#[cfg(test)]
mod tests {
    use super::ImageArg;

    fn arg(path: &std::path::Path, tag: Option<&str>) -> ImageArg {
        ImageArg { path: path.to_owned(), tag: tag.map(str::to_owned) }
    }

    #[test]
    fn splits_by_what_exists() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let colons = root.join("dir:with:colons");
        std::fs::create_dir(&colons).unwrap();
        let archive = root.join("image.tar");
        std::fs::write(&archive, b"").unwrap();
        let s = |p: &std::path::Path| p.to_str().unwrap().to_owned();

        // An absolute path alone, and with a tag.
        assert_eq!(ImageArg::parse(&s(&archive)), arg(&archive, None));
        assert_eq!(ImageArg::parse(&format!("{}:v1", s(&archive))), arg(&archive, Some("v1")));
        // A directory whose name holds `:`: the whole name, or the name and a tag.
        assert_eq!(ImageArg::parse(&s(&colons)), arg(&colons, None));
        assert_eq!(ImageArg::parse(&format!("{}:tag", s(&colons))), arg(&colons, Some("tag")));
        // A tag that holds `:` itself.
        assert_eq!(
            ImageArg::parse(&format!("{}:name:latest", s(&archive))),
            arg(&archive, Some("name:latest"))
        );
        // No tag holds `/`; nothing that exists: the argument as is.
        let with_slash = format!("{}:a/b", s(&archive));
        assert_eq!(ImageArg::parse(&with_slash), arg(std::path::Path::new(&with_slash), None));
        // Nothing exists: the tag is after the last `:`.
        let missing = root.join("missing:tag");
        assert_eq!(ImageArg::parse(&s(&missing)), arg(&root.join("missing"), Some("tag")));
        assert!(!ImageArg::parse(&s(&missing)).exists());
        let port = "registry:5000/name";
        assert_eq!(ImageArg::parse(port), arg(std::path::Path::new(port), None));
        // An empty tag is no tag.
        let trailing = format!("{}:", s(&archive));
        assert_eq!(ImageArg::parse(&trailing), arg(std::path::Path::new(&trailing), None));
    }

    #[test]
    fn relative_paths_are_taken_against_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("my:layout")).unwrap();
        let rel = |p: &str| std::path::Path::new(p).to_owned();
        let parse = |a: &str| ImageArg::parse_in(tmp.path(), a);
        assert_eq!(parse("my:layout"), ImageArg { path: rel("my:layout"), tag: None });
        assert_eq!(parse("my:layout:v1"), ImageArg { path: rel("my:layout"), tag: Some("v1".into()) });
        assert_eq!(parse("later:v1"), ImageArg { path: rel("later"), tag: Some("v1".into()) });
    }
}
