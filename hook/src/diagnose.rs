//! Findings about a host, ordered by layer, each with a stable code, evidence and a remedy.
//!
//! [`diagnose`] checks a [`HostProbe`] against what a container asks for ([`Request`]), in four
//! layers, lowest first, since a lower layer's fault explains the higher ones':
//!
//! 1. **L1 driver**: the `nvidia` module is loaded and its version readable; `nouveau` is not
//!    loaded or bound to a GPU; Secure Boot has not refused (or tainted) an unsigned module;
//!    `kernel` requirements.
//! 2. **L2 user space and devices**: `libcuda.so.1` exists and its chain ends in the loaded
//!    module's version; no toolkit stub shadows it; `/dev/nvidiactl`, `/dev/nvidia<minor>`,
//!    `nvidia_uvm` and `/dev/nvidia-uvm`; `module` requirements. On WSL2, `/dev/dxg` and the
//!    libraries Windows provides instead.
//! 3. **L3 GPUs**: the GPUs `NVIDIA_VISIBLE_DEVICES` selects exist, have a known model and are not
//!    excluded; `gpus` requirements. A MIG device stands for its parent GPU, as
//!    libnvidia-container checks requirements on the parent; one whose parent the host does not
//!    tell is checked as the model all its candidate GPUs share, else its `arch`/`brand` checks
//!    are unverifiable (a warning). `none` selects no GPU: only `cuda`/`driver` apply.
//! 4. **L4 versions**: `cuda`, `driver`, `arch`, `brand`, `machine` and `platform` requirements;
//!    forward compatibility, which works only on data-center GPUs and Jetson; PCI Express links
//!    running below their maximum.
//!
//! A Jetson's integrated GPU is checked as the one GPU of the host when the knowledge base knows
//! its SOC (the probe lists it); it has no device node, UUID, minor or PCI link to check.
//!
//! When the driver is not loaded, the checks that need it (device nodes, GPUs, versions) are
//! skipped with one note, so the report leads with the cause rather than its consequences.
//!
//! Codes are stable (`L1-NOUVEAU-LOADED`): scripts and tests match on them, people read the
//! message.
//!
//! The checks, one file per layer or rule family, each adding findings to a [`diagnose`] run:
//!
//! - `driver`: L1, the kernel module, `nouveau` and Secure Boot.
//! - `userspace`: L2, the driver's libraries, toolkit stubs, WSL2's libraries and `/dev/dxg`.
//! - `given`: L2, what a container was given against the host (the marks of a stale CDI spec).
//! - `devices`: L2, the driver's device nodes.
//! - `gpus`: L3, the selected GPUs and those the driver does not own; L4, their PCI Express links.
//! - `requirements`: the image's requirements, each in the layer of its key.
//! - `compat`: L4, forward compatibility (`cuda-compat`).
//! - `freshness`: L4, stale recorded facts and a knowledge base older than the driver.
//!
//! The vocabulary of a report (layers, severities, findings, the verdict, the host summary) is in
//! `report`; its text renderings in `render`.

mod compat;
mod devices;
mod drift;
mod driver;
pub use drift::daemon_reload_at_start;
mod freshness;
mod given;
mod gpus;
mod render;
mod report;
mod requirements;
mod userspace;

use std::path::Path;

pub use report::{Diagnosis, Finding, GpuSummary, HostSummary, KbSummary, Layer, Severity, Verdict};

use crate::contract::image::{ContainerRequest, DeviceSelection};
use crate::contract::require::RequirementSet;
use crate::given::{Given, GpuSource};
use crate::probe::{self, HostProbe};

pub use crate::probe::Evidence;

/// What a container asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Which GPUs (`NVIDIA_VISIBLE_DEVICES`).
    pub selection: DeviceSelection,
    /// What must hold.
    pub requirements: RequirementSet,
    /// `NVIDIA_DISABLE_REQUIRE` is set: requirements are reported as skipped.
    pub requirements_disabled: bool,
    /// What the container was given (device nodes, driver libraries), checked against the host
    /// for a stale CDI spec.
    pub given: Given,
    /// Where `selection` came from, for the report.
    pub sources: Vec<GpuSource>,
}

impl Request {
    /// A request for `selection` with `requirements`.
    pub fn new(selection: DeviceSelection, requirements: RequirementSet) -> Self {
        Self {
            selection,
            requirements,
            requirements_disabled: false,
            given: Given::default(),
            sources: Vec::new(),
        }
    }

    /// The request a container's configuration makes.
    pub fn from_container(c: &ContainerRequest) -> Self {
        Self { requirements_disabled: c.disabled, ..Self::new(c.selection.clone(), c.requirements.clone()) }
    }
}

/// Checks the probed host against the request.
pub fn diagnose(probe: &HostProbe, request: &Request) -> Diagnosis {
    let mut c = Checks { p: probe, req: request, out: Vec::new() };
    let summary = c.summary();
    if !request.selection.any() {
        c.push(Finding::new(
            "L3-NO-GPU-REQUESTED",
            Layer::L3Gpus,
            Severity::Info,
            "no GPU requested (NVIDIA_VISIBLE_DEVICES unset, empty or void): nothing to check",
        ));
        return c.finish(summary, Vec::new());
    }
    let driver_up = c.l1_driver();
    c.l2_libraries(driver_up);
    c.l2_given(driver_up);
    let selected = match (driver_up, &request.selection) {
        (false, _) => Err(()),
        (true, DeviceSelection::NoDevices) => {
            c.push(Finding::new(
                "L3-NO-DEVICES",
                Layer::L3Gpus,
                Severity::Info,
                "no GPU device (NVIDIA_VISIBLE_DEVICES=none, or only the driver's control and UVM nodes): the \
                 container gets the driver's libraries, so only the cuda and driver requirements apply",
            ));
            Ok(Vec::new())
        }
        (true, _) => c.l3_gpus(),
    };
    if driver_up {
        if let Ok(gpus) = &selected {
            c.l2_device_nodes(gpus);
        }
    } else {
        c.push(Finding::new(
            "L2-CHECKS-SKIPPED",
            Layer::L2UserSpace,
            Severity::Info,
            "device nodes, GPUs and the cuda/driver/arch/brand/gpus requirements were not checked: \
             they need the driver loaded (fix the errors above first)",
        ));
    }
    if driver_up {
        c.kb_age();
    }
    c.stale_facts();
    c.requirements(driver_up, selected.as_ref().ok().map(Vec::as_slice));
    if let Ok(gpus) = &selected {
        c.l4_links(gpus);
    }
    let skipped = if driver_up { Vec::new() } else { vec![Layer::L3Gpus, Layer::L4Versions] };
    c.finish(summary, skipped)
}

/// `stackhook doctor`: probes `host_root`, checks the GPUs `gpus` selects (as
/// `NVIDIA_VISIBLE_DEVICES` would) against each requirement in `requires`, and returns the report
/// with the exit status: 0 allow, 1 block, 2 for a requirement that does not parse.
pub fn doctor(host_root: &Path, requires: &[String], gpus: &str, json: bool, color: bool) -> (String, i32) {
    let mut requirements = RequirementSet::default();
    for r in requires {
        if let Err(e) = requirements.push("--require", r) {
            return (format!("stackhook doctor: {e}\n"), 2);
        }
    }
    let probe = probe::probe(host_root);
    let mut request = Request::new(DeviceSelection::parse(Some(gpus)), requirements);
    request.sources =
        vec![GpuSource { source: "command-line", devices: vec![format!("--gpus {gpus}")], counted: true }];
    let mut d = diagnose(&probe, &request);
    // What breaks in containers already running: driver libraries of another version, and the
    // daemon-reload loss.
    d = d.with(drift::findings(&probe));
    // The host's CDI specs: what containers given GPUs through CDI would get.
    let specs = crate::cdi::load(host_root, &[]).unwrap_or_default();
    if !specs.is_empty() {
        d = d.with(given::spec_findings(&crate::cdi::check_all(host_root, &specs)));
    }
    let text = if json { d.to_json() } else { d.render_human(color) };
    (text, d.verdict().exit_code())
}

/// One [`diagnose`] run: the probe, the request and the findings so far. Each family of checks adds
/// its methods (`impl Checks` in its module).
struct Checks<'a> {
    p: &'a HostProbe,
    req: &'a Request,
    out: Vec<Finding>,
}

impl Checks<'_> {
    fn push(&mut self, f: Finding) {
        self.out.push(f);
    }

    fn finish(self, summary: HostSummary, skipped: Vec<Layer>) -> Diagnosis {
        let mut d = Diagnosis::new(summary, self.out, skipped);
        d.gpu_sources.clone_from(&self.req.sources);
        d
    }
}

#[cfg(test)]
mod tests;
