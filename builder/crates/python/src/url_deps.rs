//! Direct URL dependencies of a recipe (`name @ https://host/name-1.0-py3-none-any.whl#sha256=...`):
//! the file fetched once into the artifact directory and verified by the digest the recipe
//! gives, before resolution (a wheel joins it as a file, an sdist with its metadata) and again
//! by a build on a fresh cache, which finds it nowhere else: no index serves it.

use std::path::Path;

use stackbuild_recipe::PythonSection;

use crate::artifact::Artifact;
use crate::given_lock::{Chosen, GivenLockError, GivenWheel};
use crate::solve::Pinned;

/// Fetches the URL dependencies of `python` into `dest` (`DEST/<sha256>/<filename>`), verified;
/// with `only`, just those a pin stands for (same name, its digest among the pin's).
pub fn fetch_url_dependencies(
    python: &PythonSection,
    only: Option<&[Pinned]>,
    dest: &Path,
    memo: Option<&Path>,
) -> Result<Vec<Artifact>, GivenLockError> {
    let mut chosen = Vec::new();
    for req in &python.packages {
        let Some(dep) = stackbuild_recipe::url_dependency(req) else { continue };
        if only.is_some_and(|pins| !pins.iter().any(|p| p.name == req.name && p.hashes.contains(&dep.sha256)))
        {
            continue;
        }
        let version = if dep.wheel {
            stackbuild_common::parse_wheel_name(&dep.filename).map(|w| w.version)
        } else {
            stackbuild_common::parse_sdist_name(&dep.filename).map(|(_, v)| v)
        };
        // Validated with the recipe: the file name is the project's wheel or sdist.
        let Some(version) = version else { continue };
        chosen.push(Chosen {
            name: req.name.clone(),
            version,
            wheel: GivenWheel {
                filename: dep.filename,
                url: Some(dep.url),
                path: None,
                sha256: dep.sha256,
                size: None,
            },
        });
    }
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    // The recipe is what names these URLs; errors say "[python] packages".
    let label = Path::new("[python] packages");
    crate::given_lock::fetch(label, &chosen, dest, &|| {
        crate::download::Config::for_lock_urls(python.sources(), memo)
    })
}
