//! The recipe's input hash: what the lock file records to tell whether it is stale.

use std::collections::BTreeMap;
use std::path::Path;

use pep508_rs::Requirement;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Base, Recipe};

impl Recipe {
    /// Lowercase hex sha256 of a canonical serialization of what affects resolution: the
    /// platforms, the base, and the Python version, packages, constraints and index. The lock
    /// records it; a different hash means the lock is stale. Order of packages does not matter,
    /// and paths are taken relative to the recipe's directory, so moving the checkout does not
    /// invalidate the lock.
    pub fn input_hash(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            format: u32,
            platforms: Vec<&'static str>,
            base: BTreeMap<&'static str, serde_json::Value>,
            python: Option<CanonicalPython<'a>>,
            /// The `[[source]]`s installed as wheels: their projects' dependencies are resolved.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            projects: Vec<(String, String)>,
        }
        #[derive(Serialize)]
        struct CanonicalPython<'a> {
            version: &'a str,
            packages: Vec<String>,
            constraints: Vec<String>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            overrides: Vec<String>,
            index: Option<&'a str>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            extra_index: &'a [String],
            #[serde(skip_serializing_if = "Vec::is_empty")]
            find_links: Vec<String>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            wheels: Vec<(&'a str, Option<&'a str>)>,
            /// The given lock's path and the sha256 of its bytes: an edited lock is a new input.
            #[serde(skip_serializing_if = "Option::is_none")]
            lock: Option<(String, String)>,
            /// `[python.build] no_build`: which packages may resolve to their source.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            no_build: Vec<String>,
            /// `[python.build] dependency_metadata`: dependencies given instead of prepared.
            #[serde(skip_serializing_if = "Vec::is_empty")]
            dependency_metadata: Vec<(String, Vec<String>)>,
        }
        let rel = |p: &Path| p.strip_prefix(&self.dir).unwrap_or(p).to_string_lossy().into_owned();
        let mut base = BTreeMap::new();
        base.insert("kind", self.base.kind().into());
        match &self.base {
            Base::Scratch => {}
            Base::Oci { path, tag } => {
                base.insert("path", rel(path).into());
                base.insert("tag", tag.clone().into());
            }
            Base::Archive { path } => {
                base.insert("path", rel(path).into());
            }
            Base::Docker { reference } | Base::Registry { reference } => {
                base.insert("reference", reference.clone().into());
            }
            Base::Bootstrap(b) => {
                let mut packages: Vec<String> = b.packages.iter().map(ToString::to_string).collect();
                packages.sort();
                base.insert("suite", b.suite.clone().into());
                base.insert("packages", packages.into());
                base.insert("mirror", b.mirror.clone().into());
                base.insert("variant", b.variant.clone().into());
            }
        }
        let sorted = |reqs: &[Requirement]| {
            let mut v: Vec<String> = reqs.iter().map(ToString::to_string).collect();
            v.sort();
            v
        };
        let mut platforms: Vec<&'static str> = self.image.platforms.iter().map(|p| p.as_str()).collect();
        platforms.sort_unstable();
        let projects = self.installed_projects(&rel);
        let canonical = Canonical {
            projects,
            format: 1,
            platforms,
            base,
            python: self.python.as_ref().map(|py| CanonicalPython {
                version: py.version.as_str(),
                packages: sorted(&py.packages),
                constraints: sorted(&py.constraints),
                overrides: sorted(&py.overrides),
                index: py.index.as_deref(),
                extra_index: &py.extra_index,
                // A directory of the checkout counts as written, so moving the checkout keeps the lock.
                find_links: py.find_links.iter().map(|l| rel(Path::new(l))).collect(),
                wheels: py.wheels.iter().map(|w| (w.written.as_str(), w.sha256.as_deref())).collect(),
                lock: py.lock.as_ref().map(|l| {
                    // Unreadable now: the lock is stale, and locking again reports why.
                    let digest = stackbuild_common::open_regular(l, "[python] lock file")
                        .map_err(|e| e.to_string())
                        .and_then(|f| stackbuild_common::sha256_reader(f).map_err(|e| e.to_string()))
                        .map_or_else(|e| format!("unreadable: {e}"), |(digest, _)| digest);
                    (rel(l), digest)
                }),
                no_build: sorted_names(&py.build.no_build),
                dependency_metadata: by_package(&py.build.dependency_metadata),
            }),
        };
        // Serializing plain structs, strings and a BTreeMap cannot fail.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
    }

    /// The projects installed from their trees, as the lock's key has them: (name, origin and
    /// extras), paths through `rel`.
    fn installed_projects(&self, rel: &dyn Fn(&Path) -> String) -> Vec<(String, String)> {
        self.sources
            .iter()
            .filter(|s| s.install_wheel)
            .map(|s| {
                let origin = match &s.origin {
                    super::SourceOrigin::Git { url, commit } => format!("{url}@{commit}"),
                    super::SourceOrigin::Path { path } => rel(path),
                };
                // Extras change what is installed; none keeps the key locks had before them.
                let extras =
                    if s.extras.is_empty() { String::new() } else { format!("[{}]", s.extras.join(",")) };
                (s.name.clone(), format!("{origin}{extras}"))
            })
            .collect()
    }
}

/// Package names as strings, sorted: their order in the recipe changes nothing.
fn sorted_names(names: &[pep508_rs::PackageName]) -> Vec<String> {
    let mut v: Vec<String> = names.iter().map(ToString::to_string).collect();
    v.sort();
    v
}

/// A table of requirements by package, as strings (`[python.build] dependency_metadata`).
fn by_package(table: &BTreeMap<pep508_rs::PackageName, Vec<Requirement>>) -> Vec<(String, Vec<String>)> {
    table
        .iter()
        .map(|(name, reqs)| (name.to_string(), reqs.iter().map(ToString::to_string).collect()))
        .collect()
}
