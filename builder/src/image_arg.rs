//! `IMAGE[:TAG]` on the command line: a local image (an OCI layout directory or an archive) and
//! the tag to pick in it. `stackbuild audit` and `stackbuild affinity` read it the same way.
//!
//! A path may hold `:` itself, and so may a tag (`image.tar:name:latest`, where the archive's
//! `org.opencontainers.image.ref.name` is `name:latest`), so the split is decided by what exists:
//! the whole argument, when it exists, is the path; otherwise the longest prefix before a `:` that
//! exists is the path and the rest is the tag. A tag never holds `/` (OCI distribution spec,
//! <https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests>).

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
        let whole = Self { path: PathBuf::from(arg), tag: None };
        if Path::new(arg).exists() {
            return whole;
        }
        arg.rmatch_indices(':')
            .map(|(i, _)| (&arg[..i], &arg[i + 1..]))
            .find(|(path, tag)| {
                !path.is_empty() && !tag.is_empty() && !tag.contains('/') && Path::new(path).exists()
            })
            .map_or(whole, |(path, tag)| Self { path: PathBuf::from(path), tag: Some(tag.to_owned()) })
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
        let missing = root.join("missing:tag");
        assert_eq!(ImageArg::parse(&s(&missing)), arg(&missing, None));
        assert!(!ImageArg::parse(&s(&missing)).exists());
        // An empty tag is no tag.
        let trailing = format!("{}:", s(&archive));
        assert_eq!(ImageArg::parse(&trailing), arg(std::path::Path::new(&trailing), None));
    }
}
