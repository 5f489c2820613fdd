//! Checks of what a container was given against the host: the marks of a stale CDI spec.
//!
//! A spec is written once (`nvidia-ctk cdi generate`, the `nvidia-cdi-refresh` service, the
//! device plugin or DRA driver) and names the driver's libraries by their full version and its
//! nodes by number. After a driver upgrade the spec still mounts the old libraries
//! (NVIDIA/nvidia-container-toolkit issue 450: "crun: cannot stat
//! `/lib64/libEGL_nvidia.so.550.54.14`"; 856: "nvidia-ctk requires run after kernel/akmod
//! update"); after a reload the dynamic `nvidia-uvm` major may differ; after a MIG change the
//! `nvidia-caps` minors name instances that are gone (1828). A library whose version is not the
//! loaded module's cannot talk to it: CUDA fails with "driver/library version mismatch".

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::cdi::REGENERATE_CDI;
use crate::given::{Node, Role};

impl Checks<'_> {
    /// The given libraries, node numbers and devices against the running driver.
    pub(super) fn l2_given(&mut self, driver_up: bool) {
        let p = self.p;
        let given = &self.req.given;
        if !driver_up || p.is_wsl2() || p.is_jetson() {
            return;
        }
        if let Some(driver) = p.driver.as_ref() {
            let stale: Vec<_> = given.libraries.iter().filter(|l| l.version != driver.value).collect();
            if let Some(first) = stale.first() {
                let mut versions: Vec<String> = stale.iter().map(|l| l.version.to_string()).collect();
                versions.dedup();
                let mut f = Finding::new(
                    "L2-CDI-STALE-LIBRARIES",
                    Layer::L2UserSpace,
                    Severity::Error,
                    format!(
                        "the container is given driver libraries of {} ({}{}) but the loaded driver is {}: \
                         its CDI spec was written for another driver, and CUDA would fail with a \
                         driver/library version mismatch",
                        versions.join(", "),
                        first.source,
                        if stale.len() > 1 {
                            format!(" and {} more", stale.len() - 1)
                        } else {
                            String::new()
                        },
                        driver.value
                    ),
                )
                .with_evidence(&driver.evidence);
                for l in stale.iter().take(4) {
                    f = f.with("config.json mounts", format!("{} -> {}", l.source, l.destination));
                }
                self.push(f.remedy(REGENERATE_CDI));
            }
        }
        for n in &given.misnumbered {
            let now = expected_major(p, n);
            self.push(
                Finding::new(
                    "L2-CDI-STALE-NODE",
                    Layer::L2UserSpace,
                    Severity::Error,
                    format!(
                        "the container is given {} but major {} is no NVIDIA device on this host{}: the \
                         node's numbers are from before the driver was reloaded",
                        n.describe(),
                        n.major,
                        now.map_or(String::new(), |(name, m)| format!(" ({name} is {m} now)"))
                    ),
                )
                .with(
                    "proc/devices",
                    now.map_or("no such major".to_owned(), |(name, m)| format!("{m} {name}")),
                )
                .remedy(REGENERATE_CDI),
            );
        }
        for n in given.unmatched(p) {
            let known = match n.role {
                Role::Gpu { .. } => !p.gpus.is_empty(),
                _ => !p.mig.is_empty() || !p.mig.control_minors.is_empty(),
            };
            let (what, evidence) = match n.role {
                Role::Gpu { minor } => (
                    format!("no GPU with device minor {minor}"),
                    p.gpus
                        .iter()
                        .filter_map(|g| g.minor.map(|m| format!("GPU {} has minor {m}", g.index)))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                _ => (
                    format!("no MIG instance whose capability has minor {}", n.minor),
                    format!("{} compute instance(s) listed", p.mig.instances.len()),
                ),
            };
            self.push(
                Finding::new(
                    "L3-CDI-UNKNOWN-DEVICE",
                    Layer::L3Gpus,
                    if known { Severity::Error } else { Severity::Warning },
                    format!(
                        "the container is given {} but the host has {what}: the CDI spec names a device \
                         this host no longer has (a GPU or MIG layout change since it was written)",
                        n.describe()
                    ),
                )
                .with(
                    match n.role {
                        Role::Gpu { .. } => "proc/driver/nvidia/gpus",
                        _ => crate::probe::MIG_CAPABILITIES_DIR,
                    },
                    if evidence.is_empty() { "none".to_owned() } else { evidence },
                )
                .remedy(REGENERATE_CDI),
            );
        }
    }
}

/// The host's current major for the device a misnumbered node's path names.
fn expected_major(p: &crate::probe::HostProbe, n: &Node) -> Option<(&'static str, u32)> {
    let name = n.path.rsplit('/').next().unwrap_or("");
    let dev = if name.starts_with("nvidia-uvm") {
        "nvidia-uvm"
    } else if n.path.contains("/nvidia-caps/") {
        "nvidia-caps"
    } else {
        return ["nvidia", "nvidia-frontend"].into_iter().find_map(|d| p.char_major(d).map(|m| (d, m)));
    };
    p.char_major(dev).map(|m| (dev, m))
}

/// `doctor`'s findings from `stackhook cdi check`: one per NVIDIA spec with problems, an error
/// when containers given its devices would fail, a warning when it only lacks devices.
pub(super) fn spec_findings(reports: &[crate::cdi::SpecReport]) -> Vec<Finding> {
    let mut out = Vec::new();
    for r in reports.iter().filter(|r| r.nvidia || r.unreadable.is_some()) {
        if r.problems.is_empty() && r.unreadable.is_none() {
            out.push(Finding::new(
                "L2-CDI-SPEC-OK",
                Layer::L2UserSpace,
                Severity::Info,
                format!("CDI spec {} ({}) matches the host", r.path, r.kind.as_deref().unwrap_or("?")),
            ));
            continue;
        }
        let (code, severity) = if r.has_errors() {
            ("L2-CDI-SPEC-STALE", Severity::Error)
        } else {
            ("L2-CDI-SPEC-INCOMPLETE", Severity::Warning)
        };
        let summary = match &r.unreadable {
            Some(why) => format!("CDI spec {} does not parse: {why}", r.path),
            None => format!(
                "CDI spec {} ({}) no longer matches the host: {} (stackhook cdi check lists all {})",
                r.path,
                r.kind.as_deref().unwrap_or("?"),
                r.problems[0].message,
                r.problems.len()
            ),
        };
        let mut f = Finding::new(code, Layer::L2UserSpace, severity, summary);
        for p in r.problems.iter().take(6) {
            f = f.with(&r.path, format!("{}: {}", p.code, p.message));
        }
        out.push(f.remedy(REGENERATE_CDI));
    }
    out
}
