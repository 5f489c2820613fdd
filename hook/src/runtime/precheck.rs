//! The wrapper's look at a bundle before it execs runc: the driver libraries and device nodes
//! a stale CDI spec put in `config.json`.
//!
//! containerd, CRI-O and Docker (25.0 and later) apply a CDI spec's edits before they call the
//! runtime. After a driver upgrade a spec written for the old driver still bind-mounts its
//! libraries, which are gone, and runc then fails before any hook runs with only "cannot stat
//! `/lib64/libEGL_nvidia.so.550.54.14`" (NVIDIA/nvidia-container-toolkit issue 450). Seen here,
//! the same failure gets the hook's diagnosis: both driver versions and the remedy. Only a
//! mount whose source is a driver library named by its version is looked at, and the host is
//! probed only when one is missing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::cdi::REGENERATE_CDI;
use crate::given::{Given, Library};
use crate::oci::Config;
use crate::probe;

/// What is wrong with a bundle, as the lines the wrapper prints: the first is the verdict.
pub fn stale_spec(bundle: &Path, host_root: &Path) -> Option<String> {
    let config = Config::load(bundle).ok()?;
    let mut majors = BTreeMap::new();
    if !config.devices().is_empty() {
        majors = probe::char_majors(host_root);
    }
    let given = Given::read(&config, &BTreeMap::new(), &majors);
    let missing: Vec<&Library> =
        given.libraries.iter().filter(|l| std::fs::metadata(&l.source).is_err()).collect();
    // A renumbered node is stale only where the host has NVIDIA majors to compare with.
    let misnumbered = if majors.is_empty() { Vec::new() } else { given.misnumbered.clone() };
    if missing.is_empty() && misnumbered.is_empty() {
        return None;
    }
    let host = probe::probe(host_root);
    let driver = host.driver.as_ref().map(|d| d.value.to_string());
    let mut out = String::new();
    if let Some(first) = missing.first() {
        let mut versions: Vec<String> = missing.iter().map(|l| l.version.to_string()).collect();
        versions.dedup();
        let more = if missing.len() > 1 { format!(" and {} more", missing.len() - 1) } else { String::new() };
        let loaded = driver.as_deref().map_or_else(
            || "the driver is not loaded or its version unknown".to_owned(),
            |d| format!("the loaded driver is {d}"),
        );
        let _ = writeln!(
            out,
            "the container's CDI spec is stale: it mounts driver libraries of {} ({}{more}), which do not exist; \
             {loaded} [L2-CDI-STALE-LIBRARIES]",
            versions.join(", "),
            first.source
        );
    }
    for n in &misnumbered {
        let _ = writeln!(
            out,
            "the container is given {} but major {} is no NVIDIA device on this host: the spec's numbers are from \
             before the driver was reloaded [L2-CDI-STALE-NODE]",
            n.describe(),
            n.major
        );
    }
    let _ = writeln!(out, "  fix: {REGENERATE_CDI}");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::{cdi, Preset};

    #[test]
    fn a_spec_of_the_previous_driver_names_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("host");
        Preset::Healthy.build(&root).unwrap();
        let bundle = dir.path().join("bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        let write = |spec: &serde_json::Value| {
            std::fs::write(bundle.join("config.json"), cdi::apply(spec, &["0"], &[]).to_string()).unwrap();
        };
        write(&Preset::Healthy.spec().cdi_spec(&root, "nvidia.com/gpu"));
        assert_eq!(stale_spec(&bundle, &root), None, "a current spec");
        write(&Preset::Healthy.spec().driver("550.54.14").cdi_spec(&root, "nvidia.com/gpu"));
        let said = stale_spec(&bundle, &root).expect("stale");
        let first = said.lines().next().unwrap();
        assert!(first.contains("libcuda.so.550.54.14") && first.contains("and 1 more"), "{first}");
        assert!(first.contains("the loaded driver is 535.104.05 [L2-CDI-STALE-LIBRARIES]"), "{first}");
        assert!(said.contains("nvidia-ctk cdi generate --output="), "{said}");
        std::fs::write(bundle.join("config.json"), "{}").unwrap();
        assert_eq!(stale_spec(&bundle, &root), None, "nothing given");
    }
}
