//! A build environment installed from its wheels on every core: each wheel into a stage of its
//! own, side by side, then the stages moved into the environment in the environment's order, so
//! that a file two wheels carry is the later wheel's, as when they were installed one after the
//! other (and as pip does).
//!
//! Why: a build without isolation against the image's torch installs torch's whole environment,
//! about 100 wheels and 4.5 GB, and inflating them one at a time was most of deepspeed's build
//! on `recipes/dreamzero.toml`. Each wheel's install is independent; only the order in which
//! their files land is not, and the merge keeps it.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use stackbuild_python::{Artifact, Scheme};

use crate::error::{io, WheelBuildError};

/// Installs `wheels` (in their order) into `root` by `scheme`. `label` names the package whose
/// build environment it is, for errors.
pub(crate) fn install(
    wheels: &[Artifact],
    scheme: &Scheme,
    root: &Path,
    label: &str,
) -> Result<(), WheelBuildError> {
    let stages = root.join(".stages");
    std::fs::create_dir_all(&stages).map_err(io("creating", &stages))?;
    let threads =
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(wheels.len()).max(1);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Mutex<Option<Result<(), WheelBuildError>>>> =
        wheels.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(wheel) = wheels.get(i).filter(|_| !failed.load(Ordering::Relaxed)) else { return };
                let stage = stages.join(i.to_string());
                let result = std::fs::create_dir(&stage).map_err(io("creating", &stage)).and_then(|()| {
                    stackbuild_python::install_wheel_as(
                        &wheel.path,
                        scheme,
                        &stage,
                        wheel.name.as_ref(),
                        &wheel.version.to_string(),
                    )
                    .map(drop)
                    .map_err(|source| WheelBuildError::Install {
                        package: label.to_owned(),
                        source: Box::new(source),
                    })
                });
                failed.fetch_or(result.is_err(), Ordering::Relaxed);
                *results[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
            });
        }
    });
    // The first wheel's error in the environment's order, whichever thread met it first.
    for result in results {
        if let Some(Err(e)) = result.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
            return Err(e);
        }
    }
    for i in 0..wheels.len() {
        let stage = stages.join(i.to_string());
        merge(&stage, root).map_err(io("moving into the build environment", &stage))?;
    }
    std::fs::remove_dir_all(&stages).map_err(io("removing", &stages))
}

/// Moves everything under `from` into `into`: directories merged, a file (or symlink) replacing
/// what is at its name unless that is a directory. Nothing is followed: entries are taken by
/// their own type.
fn merge(from: &Path, into: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), into.join(entry.file_name()));
        let existing = match std::fs::symlink_metadata(&dst) {
            Ok(m) => Some(m.file_type()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match (entry.file_type()?.is_dir(), existing) {
            (true, Some(t)) if t.is_dir() => merge(&src, &dst)?,
            (_, Some(t)) if t.is_dir() => {
                return Err(io::Error::other(format!(
                    "{} is a directory of an earlier wheel and a file of a later one",
                    dst.display()
                )))
            }
            // A file of a later wheel replaces an earlier one's (rename replaces it atomically).
            (_, _) => std::fs::rename(&src, &dst)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_merge_in_order_and_a_later_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, root) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("root"));
        for (stage, text) in [(&a, "first"), (&b, "second")] {
            std::fs::create_dir_all(stage.join("env/site/ns")).unwrap();
            std::fs::write(stage.join("env/site/ns/__init__.py"), text).unwrap();
            std::fs::write(stage.join(format!("env/site/ns/{text}.py")), "").unwrap();
        }
        std::fs::create_dir_all(root.join("env")).unwrap();
        merge(&a, &root).unwrap();
        merge(&b, &root).unwrap();
        let site = root.join("env/site/ns");
        assert_eq!(std::fs::read_to_string(site.join("__init__.py")).unwrap(), "second");
        assert!(site.join("first.py").is_file() && site.join("second.py").is_file());
        // A file where an earlier wheel has a directory is refused, not merged into it.
        let c = dir.path().join("c");
        std::fs::create_dir_all(c.join("env/site")).unwrap();
        std::fs::write(c.join("env/site/ns"), "").unwrap();
        assert!(merge(&c, &root).is_err());
    }
}
