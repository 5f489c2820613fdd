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

mod given;
mod render;

pub use given::REGENERATE_CDI;

use std::path::Path;

use serde::Serialize;

use crate::contract::image::{ContainerRequest, DeviceSelection};
use crate::contract::kb;
use crate::contract::require::{CudaBound, Key, RequirementSet, Unsatisfied, Value};
use crate::contract::version::{CudaVersion, DriverVersion};
use crate::given::{Given, GpuSource};
use crate::probe::{
    self, ChainEnd, GpuProbe, HostProbe, LibraryProbe, NodeState, Platform, UnresolvedDevice,
};

pub use crate::probe::Evidence;

/// The layer a finding belongs to, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Layer {
    /// The kernel module.
    #[serde(rename = "L1")]
    L1Driver,
    /// User-space libraries and device nodes.
    #[serde(rename = "L2")]
    L2UserSpace,
    /// The selected GPUs.
    #[serde(rename = "L3")]
    L3Gpus,
    /// Versions and capabilities against the image's requirements.
    #[serde(rename = "L4")]
    L4Versions,
}

impl Layer {
    /// Every layer, in order.
    pub const ALL: [Layer; 4] = [Layer::L1Driver, Layer::L2UserSpace, Layer::L3Gpus, Layer::L4Versions];

    /// `L1 driver`, as the report's headings read.
    pub fn title(self) -> &'static str {
        match self {
            Layer::L1Driver => "L1 driver",
            Layer::L2UserSpace => "L2 user space and devices",
            Layer::L3Gpus => "L3 GPUs",
            Layer::L4Versions => "L4 versions",
        }
    }
}

/// How bad a finding is; only errors block a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The container would fail: block it.
    Error,
    /// Something to fix that does not stop the container.
    Warning,
    /// Context.
    Info,
}

/// One thing found, with what shows it and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable code (`L1-NOUVEAU-LOADED`).
    pub code: &'static str,
    /// The layer.
    pub layer: Layer,
    /// How bad.
    pub severity: Severity,
    /// What is wrong, in a sentence.
    pub message: String,
    /// The files (or requirement variables) that show it.
    pub evidence: Vec<Evidence>,
    /// What to do about it, ideally a command.
    pub remedy: Option<String>,
}

impl Finding {
    fn new(code: &'static str, layer: Layer, severity: Severity, message: impl Into<String>) -> Self {
        Self { code, layer, severity, message: message.into(), evidence: Vec::new(), remedy: None }
    }

    fn with(mut self, path: &str, value: impl AsRef<str>) -> Self {
        self.evidence.push(Evidence { path: path.to_owned(), value: value.as_ref().to_owned() });
        self
    }

    fn with_evidence(mut self, e: &Evidence) -> Self {
        self.evidence.push(e.clone());
        self
    }

    fn remedy(mut self, remedy: impl Into<String>) -> Self {
        self.remedy = Some(remedy.into());
        self
    }
}

/// Whether the container may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// No error.
    Allow,
    /// At least one error.
    Block,
}

impl Verdict {
    /// The doctor's exit status: 0 allow, 1 block.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Allow => 0,
            Verdict::Block => 1,
        }
    }
}

/// One GPU as the report's header lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSummary {
    /// Index in PCI bus order.
    pub index: usize,
    /// PCI bus id.
    pub bus_id: String,
    /// The driver's model name.
    pub model: String,
    /// Compute capability (recorded `nvidia-smi` facts, else the knowledge base).
    pub compute_capability: Option<String>,
    /// How the compute capability was obtained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability_source: Option<Evidence>,
    /// Whether the container gets it.
    pub selected: bool,
}

/// The host facts the report's header shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSummary {
    /// `linux`, `wsl2` or `jetson`.
    pub platform: &'static str,
    /// `x86_64`, `aarch64`.
    pub machine: String,
    /// Kernel release.
    pub kernel: Option<String>,
    /// Loaded driver version.
    pub driver: Option<String>,
    /// `proprietary` or `open`.
    pub module: Option<&'static str>,
    /// Highest CUDA the driver supports (`>= 13.2` where only a lower bound is known).
    pub cuda: Option<String>,
    /// How `cuda` was obtained (recorded facts, a table row, or why it is not known).
    pub cuda_source: Evidence,
    /// The GPUs the driver lists.
    pub gpus: Vec<GpuSummary>,
    /// The knowledge base the facts were looked up in.
    pub knowledge_base: KbSummary,
}

/// Which knowledge base a report used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KbSummary {
    /// The date the built-in tables were checked against their sources.
    pub date: &'static str,
    /// Admin files of `/etc/stackhook/kb.d` whose rows were added.
    pub kb_d: Vec<String>,
}

/// The result of [`diagnose`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnosis {
    /// Allow or block.
    verdict: Verdict,
    /// What the host is.
    pub host: HostSummary,
    /// Findings, by layer then severity.
    pub findings: Vec<Finding>,
    /// Layers whose checks were skipped because a lower layer failed.
    pub skipped: Vec<Layer>,
    /// Where the GPU set came from (environment, device nodes, CDI annotation) and which GPUs
    /// those were.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_sources: Vec<GpuSource>,
}

impl Diagnosis {
    fn new(host: HostSummary, mut findings: Vec<Finding>, skipped: Vec<Layer>) -> Self {
        findings.sort_by_key(|f| (f.layer, f.severity));
        let verdict = if findings.iter().any(|f| f.severity == Severity::Error) {
            Verdict::Block
        } else {
            Verdict::Allow
        };
        Self { verdict, host, findings, skipped, gpu_sources: Vec::new() }
    }

    /// The diagnosis with `more` findings, its verdict decided again.
    #[must_use]
    pub fn with(self, more: Vec<Finding>) -> Self {
        let mut findings = self.findings;
        findings.extend(more);
        let mut d = Self::new(self.host, findings, self.skipped);
        d.gpu_sources = self.gpu_sources;
        d
    }

    /// Block when any finding is an error.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The findings of one severity.
    pub fn of(&self, severity: Severity) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.severity == severity)
    }

    /// Whether a finding with `code` is present.
    pub fn has(&self, code: &str) -> bool {
        self.findings.iter().any(|f| f.code == code)
    }

    /// One line for a verdict: the first error and how many more, or what passed.
    pub fn summary(&self) -> String {
        let mut errors = self.of(Severity::Error);
        match errors.next() {
            Some(first) => match errors.count() {
                0 => format!("{} [{}]", first.message, first.code),
                n => format!("{} [{}] (and {n} more error(s))", first.message, first.code),
            },
            None => match self.of(Severity::Warning).count() {
                0 => "all checks passed".to_owned(),
                n => format!("all checks passed, {n} warning(s)"),
            },
        }
    }

    /// The report for people (ANSI colours when `color`).
    pub fn render_human(&self, color: bool) -> String {
        render::human(self, color)
    }

    /// The errors only, one line each with their remedy: what a hook prints when it blocks a
    /// container (runc shows the hook's stderr).
    pub fn render_errors(&self) -> String {
        render::errors(self)
    }

    /// Pretty JSON, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }
}

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
    // The host's CDI specs: what containers given GPUs through CDI would get.
    let specs = crate::cdi::load(host_root, &[]).unwrap_or_default();
    if !specs.is_empty() {
        d = d.with(given::spec_findings(&crate::cdi::check_all(host_root, &specs)));
    }
    let text = if json { d.to_json() } else { d.render_human(color) };
    (text, d.verdict().exit_code())
}

struct Checks<'a> {
    p: &'a HostProbe,
    req: &'a Request,
    out: Vec<Finding>,
}

/// How a `/dev` entry reads in evidence.
fn node_text(n: NodeState) -> String {
    match n {
        NodeState::Missing => "missing".to_owned(),
        NodeState::CharDevice { major, minor } => format!("character device {major}:{minor}"),
        NodeState::Other { what } => format!("a {what}, not a character device"),
    }
}

const BLACKLIST_NOUVEAU: &str = "echo 'blacklist nouveau' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf \
     && sudo update-initramfs -u && sudo reboot";
const ENROL_MOK: &str = "sign the nvidia modules with a Machine Owner Key and enrol it: \
     sudo mokutil --import /var/lib/shim-signed/mok/MOK.der, then reboot and confirm in MokManager \
     (or install your distribution's signed driver packages)";

impl<'a> Checks<'a> {
    fn push(&mut self, f: Finding) {
        self.out.push(f);
    }

    fn finish(self, summary: HostSummary, skipped: Vec<Layer>) -> Diagnosis {
        let mut d = Diagnosis::new(summary, self.out, skipped);
        d.gpu_sources.clone_from(&self.req.sources);
        d
    }

    fn summary(&self) -> HostSummary {
        let p = self.p;
        let selected: Vec<usize> = p
            .select(&self.req.selection)
            .map_or_else(|_| Vec::new(), |gpus| gpus.iter().map(|g| g.index).collect());
        let driver = p.driver.as_ref().map(|d| d.value.clone());
        let cuda = p.host_cuda();
        HostSummary {
            platform: p.platform.name(),
            machine: p.machine.value.clone(),
            kernel: p.kernel.as_ref().map(|k| k.value.to_string()),
            cuda: match (&cuda.cuda, &cuda.bound) {
                (Some(c), CudaBound::Exact) => Some(c.to_string()),
                (Some(c), CudaBound::Range { below: Some(b) }) => Some(format!(">= {c}, < {b}")),
                (Some(c), CudaBound::Range { below: None }) => Some(format!(">= {c}")),
                (None, _) => None,
            },
            cuda_source: cuda.how.into(),
            knowledge_base: KbSummary { date: kb::KB_DATE, kb_d: p.kb_files.clone() },
            driver: driver.map(|d| d.to_string()),
            module: p.module_flavor.as_ref().map(|m| match m.value {
                probe::ModuleFlavor::Proprietary => "proprietary",
                probe::ModuleFlavor::Open => "open",
            }),
            gpus: p
                .gpus
                .iter()
                .map(|g| {
                    let arch = p.gpu_arch(g);
                    GpuSummary {
                        index: g.index,
                        bus_id: g.bus_id.clone(),
                        model: g.model.clone().unwrap_or_else(|| "(no model)".to_owned()),
                        compute_capability: arch.as_ref().map(|a| a.value.to_string()),
                        compute_capability_source: arch.map(|a| a.how.into()),
                        selected: selected.contains(&g.index),
                    }
                })
                .collect(),
        }
    }

    /// L1. Returns whether the driver is usable for the checks above it.
    fn l1_driver(&mut self) -> bool {
        let p = self.p;
        match &p.platform {
            Platform::Wsl2 { evidence } => {
                self.push(
                    Finding::new(
                        "L1-WSL2",
                        Layer::L1Driver,
                        Severity::Info,
                        "WSL2 host: the Windows driver serves the GPUs through /dev/dxg; kernel module \
                         checks do not apply and the driver version cannot be read from files",
                    )
                    .with_evidence(evidence),
                );
                return true;
            }
            Platform::Jetson { evidence, .. } => {
                self.push(
                    Finding::new(
                        "L1-JETSON",
                        Layer::L1Driver,
                        Severity::Info,
                        "Jetson board: the integrated GPU is driven by nvgpu; PCI and module checks do not apply",
                    )
                    .with_evidence(evidence),
                );
                return true;
            }
            Platform::Linux => {}
        }
        let nvidia = p.modules.get("nvidia");
        self.l1_nouveau(nvidia.is_some());

        let Some(nv) = nvidia else {
            self.l1_not_loaded();
            return false;
        };

        if nv.state != "Live" {
            self.push(
                Finding::new(
                    "L1-MODULE-NOT-LIVE",
                    Layer::L1Driver,
                    Severity::Warning,
                    format!("the nvidia module is {}, not Live", nv.state),
                )
                .with_evidence(&nv.evidence),
            );
        }
        let taint = nv.sys_taint.as_deref().unwrap_or(&nv.taint);
        if p.secure_boot_enforced() && taint.contains('E') {
            let mut f = Finding::new(
                "L1-SECURE-BOOT-UNSIGNED-MODULE",
                Layer::L1Driver,
                Severity::Warning,
                "Secure Boot is on and the loaded nvidia module is unsigned (taint E): this kernel does not \
                 enforce module signatures now, but one that does (lockdown, an update) will refuse it",
            )
            .with(if nv.sys_taint.is_some() { "/sys/module/nvidia/taint" } else { "/proc/modules" }, taint);
            if let Some(sb) = &p.secure_boot {
                f = f.with_evidence(&sb.evidence);
            }
            self.push(f.remedy(ENROL_MOK));
        }
        if p.driver.is_none() {
            let mut f = Finding::new(
                "L1-DRIVER-VERSION-UNREADABLE",
                Layer::L1Driver,
                Severity::Error,
                "the nvidia module is loaded but no version can be read from /sys/module/nvidia/version \
                 or /proc/driver/nvidia/version",
            )
            .with_evidence(&nv.evidence);
            if let Some(l4t) = &p.l4t_release {
                f = f.with_evidence(&l4t.evidence);
            }
            self.push(f.remedy("sudo dmesg | grep -i NVRM"));
            return false;
        }
        true
    }

    /// L1: `nouveau` loaded, or bound to NVIDIA GPUs.
    fn l1_nouveau(&mut self, nvidia_loaded: bool) {
        let p = self.p;
        let nouveau_bound: Vec<&probe::PciGpu> =
            p.other_pci_gpus.iter().filter(|g| g.pci.driver.as_deref() == Some("nouveau")).collect();
        if let Some(m) = p.modules.get("nouveau") {
            let severity =
                if !nvidia_loaded || !nouveau_bound.is_empty() { Severity::Error } else { Severity::Warning };
            let mut f = Finding::new(
                "L1-NOUVEAU-LOADED",
                Layer::L1Driver,
                severity,
                if nouveau_bound.is_empty() {
                    "the open-source nouveau driver is loaded; it competes with nvidia for the GPUs".to_owned()
                } else {
                    format!(
                        "the open-source nouveau driver is loaded and holds {} NVIDIA GPU(s), so nvidia cannot \
                         drive them",
                        nouveau_bound.len()
                    )
                },
            )
            .with_evidence(&m.evidence);
            for g in &nouveau_bound {
                f = f.with(&format!("{}/driver", g.pci.path), "nouveau");
            }
            self.push(f.remedy(BLACKLIST_NOUVEAU));
        } else if !nouveau_bound.is_empty() {
            let mut f = Finding::new(
                "L1-NOUVEAU-LOADED",
                Layer::L1Driver,
                Severity::Error,
                format!("{} NVIDIA GPU(s) are bound to nouveau", nouveau_bound.len()),
            );
            for g in &nouveau_bound {
                f = f.with(&format!("{}/driver", g.pci.path), "nouveau");
            }
            self.push(f.remedy(BLACKLIST_NOUVEAU));
        }
    }

    /// L1: no `nvidia` module: refused under Secure Boot, or simply not loaded.
    fn l1_not_loaded(&mut self) {
        let p = self.p;
        let unbound: Vec<&probe::PciGpu> =
            p.other_pci_gpus.iter().filter(|g| g.pci.driver.is_none()).collect();
        let modules_evidence = if p.modules_readable { "no line for nvidia" } else { "not readable" };
        if p.secure_boot_enforced() && !unbound.is_empty() {
            let mut f = Finding::new(
                "L1-SECURE-BOOT-MODULE-REFUSED",
                Layer::L1Driver,
                Severity::Error,
                format!(
                    "Secure Boot is on, the nvidia module is not loaded and {} NVIDIA GPU(s) have no driver: \
                     the kernel refuses an unsigned module under Secure Boot",
                    unbound.len()
                ),
            );
            if let Some(sb) = &p.secure_boot {
                f = f.with_evidence(&sb.evidence);
            }
            f = f.with("/proc/modules", modules_evidence);
            for g in &unbound {
                f = f.with(&format!("{}/driver", g.pci.path), "(no driver bound)");
            }
            self.push(f.remedy(ENROL_MOK));
        } else {
            let mut f = Finding::new(
                "L1-NVIDIA-NOT-LOADED",
                Layer::L1Driver,
                Severity::Error,
                "the nvidia kernel module is not loaded",
            )
            .with("/proc/modules", modules_evidence);
            for g in &p.other_pci_gpus {
                f = f.with(
                    &format!("{}/driver", g.pci.path),
                    g.pci.driver.as_deref().unwrap_or("(no driver bound)"),
                );
            }
            self.push(f.remedy("sudo modprobe nvidia (if it fails: sudo dmesg | grep -i -e nvidia -e NVRM)"));
        }
    }

    /// L2: the driver's user-space libraries.
    fn l2_libraries(&mut self, driver_up: bool) {
        let p = self.p;
        if p.is_wsl2() {
            self.l2_wsl();
            return;
        }
        if p.is_jetson() {
            return;
        }
        let driver = p.driver.as_ref().map(|d| d.value.clone());
        let mut mismatches: Vec<(&LibraryProbe, String)> = Vec::new();
        for (name, code_missing, severity_missing) in [
            ("libcuda.so.1", "L2-LIBCUDA-MISSING", Severity::Error),
            ("libnvidia-ml.so.1", "L2-NVML-MISSING", Severity::Warning),
        ] {
            let found: Vec<&LibraryProbe> = p
                .libraries
                .iter()
                .filter(|l| l.name == name && !l.path.starts_with("/usr/lib/wsl/"))
                .collect();
            if found.is_empty() {
                let what = if name == "libcuda.so.1" {
                    "CUDA programs in the container cannot load the driver"
                } else {
                    "nvidia-smi and NVML-based tools fail"
                };
                self.push(
                    Finding::new(
                        code_missing,
                        Layer::L2UserSpace,
                        severity_missing,
                        format!("{name} is in none of the driver library directories: {what}"),
                    )
                    .with(
                        "/usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib/aarch64-linux-gnu, /usr/local/nvidia/lib64",
                        format!("no {name}"),
                    )
                    .remedy(install_userspace(driver.as_ref().map(ToString::to_string).as_deref())),
                );
                continue;
            }
            for lib in found {
                match &lib.end {
                    ChainEnd::File => {}
                    end => {
                        let why = match end {
                            ChainEnd::Dangling => "a link whose target does not exist".to_owned(),
                            ChainEnd::TooManyLinks => "more than 8 links (a loop?)".to_owned(),
                            ChainEnd::Unusable { why } => why.clone(),
                            ChainEnd::File => String::new(),
                        };
                        self.push(
                            Finding::new(
                                "L2-LIBRARY-BROKEN-LINK",
                                Layer::L2UserSpace,
                                Severity::Error,
                                format!("{} ends at {why}", lib.path),
                            )
                            .with(&lib.path, lib.chain.join(" -> "))
                            .remedy(install_userspace(driver.as_ref().map(ToString::to_string).as_deref())),
                        );
                        continue;
                    }
                }
                let (Some(module), true) = (driver.as_ref(), driver_up) else { continue };
                match lib.version.as_deref() {
                    Some(v) if v.parse::<DriverVersion>().ok().as_ref() != Some(module) => {
                        mismatches.push((lib, v.to_owned()));
                    }
                    Some(_) => {}
                    None => self.push(
                        Finding::new(
                            "L2-LIBRARY-UNVERSIONED",
                            Layer::L2UserSpace,
                            Severity::Warning,
                            format!(
                                "{} ends in {}, whose name carries no driver version: it cannot be checked against \
                                 the loaded module {module}",
                                lib.path,
                                lib.final_name()
                            ),
                        )
                        .with(&lib.path, lib.final_path()),
                    ),
                }
            }
        }
        if let Some(module) = &driver {
            self.library_mismatches(module, &mismatches);
        }
        self.l2_stubs();
    }

    /// L2: toolkit stubs that shadow the driver's libcuda.
    fn l2_stubs(&mut self) {
        let p = self.p;
        for stub in &p.libcuda_stubs {
            let dir = stub.rsplit_once('/').map_or("", |(d, _)| d);
            self.push(
                Finding::new(
                    "L2-LIBCUDA-STUB",
                    Layer::L2UserSpace,
                    Severity::Warning,
                    "a CUDA toolkit stub libcuda.so sits in a system library directory: a program that loads it \
                     reports \"CUDA driver version is insufficient\" even on a good host",
                )
                .with(stub, "regular file (toolkit stub), not a link to libcuda.so.1")
                .remedy(format!("move {stub} out of {dir} (stubs are for linking only, from the toolkit's lib64/stubs)")),
            );
        }
    }

    /// L2 on WSL2: `/dev/dxg` and the libraries Windows provides.
    fn l2_wsl(&mut self) {
        let p = self.p;
        let lib = p.libraries.iter().find(|l| l.path == "/usr/lib/wsl/lib/libcuda.so.1");
        let ok = lib.is_some_and(|l| l.end == ChainEnd::File && l.chain.is_empty());
        if !ok {
            self.push(
                Finding::new(
                    "L2-WSL-LIBCUDA-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "/usr/lib/wsl/lib/libcuda.so.1 is not a regular file: the Windows driver's CUDA library \
                     is not mounted into this WSL2 distribution",
                )
                .with(
                    "/usr/lib/wsl/lib/libcuda.so.1",
                    lib.map_or("missing", |l| {
                        if l.chain.is_empty() {
                            "not a regular file"
                        } else {
                            "a symlink"
                        }
                    }),
                )
                .remedy("update the NVIDIA driver on Windows and run `wsl --update`, then `wsl --shutdown`"),
            );
        }
        if !matches!(p.node("dxg"), NodeState::CharDevice { .. }) {
            self.push(
                Finding::new(
                    "L2-WSL-DXG-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "/dev/dxg is not a character device: this WSL2 kernel exposes no GPU",
                )
                .with("/dev/dxg", node_text(p.node("dxg")))
                .remedy("wsl --update (GPU support needs a WSL2 kernel 5.10.43 or newer)"),
            );
        }
    }

    /// One finding per library version that differs from the loaded module's.
    fn library_mismatches(&mut self, module: &DriverVersion, mismatches: &[(&LibraryProbe, String)]) {
        let mut versions: Vec<&str> = mismatches.iter().map(|(_, v)| v.as_str()).collect();
        versions.dedup();
        for v in versions {
            let libs: Vec<&LibraryProbe> =
                mismatches.iter().filter(|(_, lv)| lv == v).map(|(l, _)| *l).collect();
            let names: Vec<&str> = libs.iter().map(|l| l.name.as_str()).collect();
            let newer = v.parse::<DriverVersion>().is_ok_and(|lv| lv > *module);
            let mut f = Finding::new(
                "L2-DRIVER-LIBRARY-MISMATCH",
                Layer::L2UserSpace,
                Severity::Error,
                format!(
                    "{} {} version {v} but the loaded module is {module}: NVML fails with \"Driver/library version \
                     mismatch\" and CUDA cannot initialise",
                    names.join(" and "),
                    if names.len() == 1 { "is" } else { "are" }
                ),
            );
            for lib in &libs {
                f = f.with(&lib.path, format!("-> {}", lib.final_path()));
            }
            if let Some(d) = &self.p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(if newer {
                format!("user space {v} was installed without a reboot: sudo reboot, to load the {v} module")
            } else {
                format!("reinstall the user-space libraries of driver {module} (or reboot, if a newer module is installed)")
            }));
        }
    }

    /// L4: a recorded facts file exists but was not used (stale after a driver change or reboot,
    /// unreadable, or malformed): the facts it held are looked up in the tables instead.
    fn stale_facts(&mut self) {
        let Some(why) = &self.p.recorded_ignored else { return };
        self.push(
            Finding::new(
                "L4-RECORDED-FACTS-IGNORED",
                Layer::L4Versions,
                Severity::Info,
                format!("the recorded nvidia-smi facts were not used: {why}"),
            )
            .with(&format!("/{}", probe::recorded::FACTS_PATH), why)
            .remedy("sudo stackhook doctor --record"),
        );
    }

    /// L4: the loaded driver is of a branch newer than every row of the knowledge base (built-in
    /// and `kb.d`): its CUDA version is then only known as a lower bound, unless `nvidia-smi`'s
    /// answer was recorded.
    fn kb_age(&mut self) {
        let p = self.p;
        let Some(d) = &p.driver else { return };
        let newest =
            kb::newest_branch().map_or(0, |b| b.branch).max(p.kb_extension.newest_branch().unwrap_or(0));
        if d.value.branch() <= newest {
            return;
        }
        let recorded = p.recorded.as_ref().is_some_and(|r| r.cuda_version.is_some());
        let (severity, tail) = if recorded {
            (Severity::Info, "the CUDA version comes from the recorded nvidia-smi facts")
        } else {
            (
                Severity::Warning,
                "its CUDA version is known only as a lower bound, and requirements above it are reported, not enforced",
            )
        };
        let f = Finding::new(
            "L4-KB-OLDER-THAN-DRIVER",
            Layer::L4Versions,
            severity,
            format!(
                "driver branch {} is newer than the knowledge base of {} (newest branch {newest}): {tail}",
                d.value.branch(),
                kb::KB_DATE
            ),
        )
        .with_evidence(&d.evidence);
        self.push(if recorded {
            f
        } else {
            f.remedy(
                "sudo stackhook doctor --record (saves nvidia-smi's CUDA version for the hook), or add a [[branch]] row \
                 with its source in /etc/stackhook/kb.d/, or update stackhook",
            )
        });
    }

    /// L3: the selected GPUs. `Err` when the selection cannot be resolved or there are none.
    fn l3_gpus(&mut self) -> Result<Vec<&'a GpuProbe>, ()> {
        let p: &'a HostProbe = self.p;
        if (p.is_wsl2() || p.is_jetson()) && p.gpus.is_empty() {
            self.push(Finding::new(
                "L3-GPUS-NOT-LISTED",
                Layer::L3Gpus,
                Severity::Info,
                if p.is_jetson() {
                    "this Jetson's SoC (/proc/device-tree/compatible) is not in the knowledge base and nvgpu \
                     does not list the GPU in /proc/driver/nvidia/gpus: per-GPU checks cannot be made"
                } else {
                    "this host does not list its GPUs in /proc/driver/nvidia/gpus: per-GPU checks cannot be made"
                },
            ));
            return Err(());
        }
        let resolved = match p.resolve(&self.req.selection) {
            Ok(r) => r,
            Err(e) => {
                let listed: Vec<String> = p
                    .gpus
                    .iter()
                    .map(|g| format!("{} {} {}", g.index, g.bus_id, g.uuid.as_deref().unwrap_or("(no uuid)")))
                    .collect();
                self.push(
                    Finding::new("L3-SELECTION-UNMATCHED", Layer::L3Gpus, Severity::Error, e.to_string())
                        .with(
                            "/proc/driver/nvidia/gpus",
                            if listed.is_empty() { "(none)".to_owned() } else { listed.join("; ") },
                        )
                        .remedy("set NVIDIA_VISIBLE_DEVICES to indexes, UUIDs or bus ids that nvidia-smi -L lists"),
                );
                return Err(());
            }
        };
        let selected = resolved.gpus;
        if p.gpus.is_empty() || (selected.is_empty() && resolved.unresolved.is_empty()) {
            self.push(
                Finding::new(
                    "L3-NO-GPUS",
                    Layer::L3Gpus,
                    Severity::Error,
                    "the nvidia driver is loaded but lists no GPU",
                )
                .with("/proc/driver/nvidia/gpus", "(empty)")
                .remedy("sudo dmesg | grep -i -e NVRM -e Xid"),
            );
            self.unbound_too_new();
            return Err(());
        }
        for g in &selected {
            self.l3_gpu(g);
        }
        for u in &resolved.unresolved {
            self.l3_unresolved(u);
        }
        for other in p.other_pci_gpus.iter().filter(|g| g.pci.driver.as_deref() != Some("nouveau")) {
            let mut f = Finding::new(
                "L3-GPU-NOT-OWNED",
                Layer::L3Gpus,
                Severity::Warning,
                format!(
                    "the NVIDIA GPU at {} is bound to {}, not nvidia: containers cannot use it",
                    other.bus_id,
                    other.pci.driver.as_deref().unwrap_or("no driver")
                ),
            )
            .with(&format!("{}/driver", other.pci.path), other.pci.driver.as_deref().unwrap_or("(none)"));
            if let Some(why) = self.architecture_dropped(other.pci.device_id()) {
                f.message = format!("{}; {why}", f.message);
                f = f.remedy("install a driver of a branch that still supports this GPU's architecture");
            } else if let Some((why, first)) =
                other.pci.device_id().and_then(kb::gpu_by_pci_id).and_then(|m| self.branch_too_old(m))
            {
                f.message = format!("{}; {why}", f.message);
                f = f.remedy(format!("install a driver of branch R{first} or later"));
            }
            self.push(f);
        }
        Ok(selected)
    }

    /// L3: the driver lists no GPU and an NVIDIA GPU on PCI has no driver because the loaded
    /// branch is older than its architecture's first: the known cause, with its remedy.
    fn unbound_too_new(&mut self) {
        let p = self.p;
        for g in p.other_pci_gpus.iter().filter(|g| g.pci.driver.is_none()) {
            let Some(model) = g.pci.device_id().and_then(kb::gpu_by_pci_id) else { continue };
            let Some((why, first)) = self.branch_too_old(model) else { continue };
            let mut f = Finding::new(
                "L3-DRIVER-TOO-OLD-FOR-GPU",
                Layer::L3Gpus,
                Severity::Error,
                format!("the NVIDIA GPU at {} has no driver: {why}, so the driver cannot drive it", g.bus_id),
            )
            .with(&format!("{}/driver", g.pci.path), "(no driver bound)")
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(d) = &p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(format!("install a driver of branch R{first} or later")));
        }
    }

    /// L3: a selected device whose GPU the host does not tell.
    fn l3_unresolved(&mut self, u: &UnresolvedDevice<'_>) {
        let candidates: Vec<String> = u.candidates.iter().map(|g| g.index.to_string()).collect();
        let mut f = match u.common_model() {
            Some(m) => Finding::new(
                "L3-DEVICE-PARENT-UNKNOWN",
                Layer::L3Gpus,
                Severity::Info,
                format!(
                    "{}: which GPU it is on is not recorded; every GPU it may be on (GPU {}) is an {}, so it \
                     is checked as one",
                    u.id,
                    candidates.join(", "),
                    m.name
                ),
            ),
            None => Finding::new(
                "L3-DEVICE-PARENT-UNKNOWN",
                Layer::L3Gpus,
                Severity::Info,
                format!(
                    "{}: which GPU it is on is not recorded and the GPUs it may be on (GPU {}) differ: arch and \
                     brand requirements cannot be checked for it",
                    u.id,
                    candidates.join(", ")
                ),
            ),
        };
        if u.id.starts_with(crate::contract::image::VOLUME_MOUNT_DEVICES_ROOT) {
            f = f.with("NVIDIA_VISIBLE_DEVICES", &u.id);
            self.push(f.remedy(
                "the device plugin passes devices as volume mounts, but none is mounted under that path: check \
                 its volume-mount setting",
            ));
            return;
        }
        f = f.with(&format!("/{}", probe::MIG_RECORD_PATH), "no line for this device");
        self.push(f.remedy(format!(
            "record which GPU each MIG device is on: nvidia-smi -L | sudo tee /{} (again after each MIG change)",
            probe::MIG_RECORD_PATH
        )));
    }

    /// Why the loaded driver does not drive a GPU of this PCI id, when its architecture's last
    /// branch (`driver_branches.toml`, `[[architecture]]`) is older than the loaded one.
    fn architecture_dropped(&self, device_id: Option<u16>) -> Option<String> {
        let model = device_id.and_then(kb::gpu_by_pci_id)?;
        let last = kb::architecture_support(&model.architecture)?;
        let driver = self.p.driver.as_ref()?;
        (driver.value.branch() > last.last_branch).then(|| {
            format!(
                "it is a {} GPU ({}), and R{} was the last driver branch for {} (the loaded driver is {})",
                model.architecture, model.name, last.last_branch, model.architecture, driver.value
            )
        })
    }

    /// Why the loaded driver cannot drive a GPU of `model`, with the first branch that can, when
    /// the first branch of its architecture (`driver_branches.toml`, `[[architecture]]`, the row
    /// of its compute capability where there is one) is newer than the loaded one.
    fn branch_too_old(&self, model: &kb::GpuModel) -> Option<(String, u64)> {
        let support = kb::gpu_support(model)?;
        let first = support.first_branch?;
        let driver = self.p.driver.as_ref()?;
        let which = if support.compute_capabilities.is_empty() {
            model.architecture.clone()
        } else {
            format!("{} {}", model.architecture, model.compute_capability)
        };
        (driver.value.branch() < first).then(|| {
            (
                format!(
                    "it is a {} GPU ({}, compute capability {}), and R{first} is the first driver branch for {which} \
                     (the loaded driver is {})",
                    model.architecture, model.name, model.compute_capability, driver.value
                ),
                first,
            )
        })
    }

    /// L3: one selected GPU.
    fn l3_gpu(&mut self, g: &GpuProbe) {
        if g.model_unknown() {
            self.push(
                Finding::new(
                    "L3-GPU-MODEL-UNKNOWN",
                    Layer::L3Gpus,
                    Severity::Error,
                    format!(
                        "GPU {} ({}) reports Model: Unknown: the board does not answer the driver (fallen off \
                         the bus, failing, or not supported by this driver)",
                        g.index, g.bus_id
                    ),
                )
                .with_evidence(&g.evidence)
                .remedy("sudo dmesg | grep -i -e NVRM -e Xid; reseat or replace the board, or update the driver"),
            );
            return;
        }
        if g.excluded == Some(true) {
            self.push(
                Finding::new(
                    "L3-GPU-EXCLUDED",
                    Layer::L3Gpus,
                    Severity::Error,
                    format!("GPU {} ({}) is excluded by the driver", g.index, g.bus_id),
                )
                .with(&g.evidence.path, "GPU Excluded: Yes")
                .remedy("check NVreg_ExcludedGpus in /etc/modprobe.d and the driver's health checks (dmesg)"),
            );
        }
        if let Some((why, first)) = self.p.gpu_model(g).and_then(|(m, _)| self.branch_too_old(m)) {
            let mut f = Finding::new(
                "L3-DRIVER-TOO-OLD-FOR-GPU",
                Layer::L3Gpus,
                Severity::Error,
                format!("GPU {} ({}): {why}: this driver cannot drive it", g.index, g.bus_id),
            )
            .with_evidence(&g.evidence)
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(d) = &self.p.driver {
                f = f.with_evidence(&d.evidence);
            }
            self.push(f.remedy(format!("install a driver of branch R{first} or later")));
        }
        if self.p.gpu_model(g).is_none() {
            let known_arch = self.p.gpu_arch(g);
            let what = if known_arch.is_some() {
                "its brand is unknown (its compute capability comes from the recorded nvidia-smi facts), so \
                 brand requirements cannot be verified"
            } else {
                "its compute capability and brand are unknown, so arch and brand requirements cannot be verified \
                 (they are reported, not enforced)"
            };
            let mut f = Finding::new(
                "L3-GPU-NOT-IN-KB",
                Layer::L3Gpus,
                Severity::Warning,
                format!(
                    "GPU {} ({}) is not in the knowledge base of {}: {what}",
                    g.index,
                    g.model.as_deref().unwrap_or(""),
                    kb::KB_DATE
                ),
            )
            .with_evidence(&g.evidence)
            .with(
                &format!("{}/device", g.pci.path),
                g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
            );
            if let Some(a) = known_arch {
                f = f.with_evidence(&a.how.into());
            }
            self.push(f.remedy(
                "confirm with nvidia-smi --query-gpu=name,pci.device_id,compute_cap --format=csv \
                 (sudo stackhook doctor --record saves it for the hook), or add a [[gpu]] row with its source \
                 in /etc/stackhook/kb.d/",
            ));
        }
    }

    /// L2: device nodes for the control device, the selected GPUs and UVM.
    fn l2_device_nodes(&mut self, gpus: &[&GpuProbe]) {
        let p = self.p;
        if p.is_wsl2() || p.is_jetson() {
            return;
        }
        let ctl = p.node("nvidiactl");
        if ctl != (NodeState::CharDevice { major: 195, minor: 255 }) {
            self.push(
                Finding::new(
                    "L2-NVIDIACTL-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "/dev/nvidiactl is not the character device 195:255",
                )
                .with("/dev/nvidiactl", node_text(ctl))
                .remedy("sudo nvidia-modprobe -c=0"),
            );
        }
        for g in gpus {
            let Some(minor) = g.minor else { continue };
            let name = format!("nvidia{minor}");
            let n = p.node(&name);
            if n != (NodeState::CharDevice { major: 195, minor }) {
                self.push(
                    Finding::new(
                        "L2-GPU-NODE-MISSING",
                        Layer::L2UserSpace,
                        Severity::Error,
                        format!("/dev/{name} (GPU {}, device minor {minor}) is not the character device 195:{minor}", g.index),
                    )
                    .with(&format!("/dev/{name}"), node_text(n))
                    .with(&g.evidence.path, format!("Device Minor: {minor}"))
                    .remedy(format!("sudo nvidia-modprobe -c={minor}")),
                );
            }
        }
        let uvm = p.node("nvidia-uvm");
        let uvm_major = p.char_major("nvidia-uvm");
        if !p.module_loaded("nvidia_uvm") {
            self.push(
                Finding::new(
                    "L2-UVM-NOT-LOADED",
                    Layer::L2UserSpace,
                    Severity::Error,
                    "nvidia_uvm is not loaded: CUDA fails inside the container (\"no CUDA-capable device is \
                     detected\") until the first CUDA call on the host loads it",
                )
                .with("/proc/modules", "no line for nvidia_uvm")
                .with("/dev/nvidia-uvm", node_text(uvm))
                .remedy("sudo nvidia-modprobe -u -c=0"),
            );
        } else if !matches!((uvm, uvm_major), (NodeState::CharDevice { major, minor: 0 }, Some(m)) if major == m)
        {
            self.push(
                Finding::new(
                    "L2-UVM-NODE-MISSING",
                    Layer::L2UserSpace,
                    Severity::Error,
                    format!(
                        "/dev/nvidia-uvm is not the character device {}:0 that proc/devices names",
                        uvm_major.map_or("?".to_owned(), |m| m.to_string())
                    ),
                )
                .with("/dev/nvidia-uvm", node_text(uvm))
                .with(
                    "/proc/devices",
                    uvm_major.map_or("no nvidia-uvm line".to_owned(), |m| format!("{m} nvidia-uvm")),
                )
                .remedy("sudo nvidia-modprobe -u -c=0"),
            );
        }
    }

    /// Requirement findings, and the forward-compatibility rule.
    fn requirements(&mut self, driver_up: bool, selected: Option<&[&GpuProbe]>) {
        let p = self.p;
        let reqs = &self.req.requirements;
        if reqs.is_empty() {
            return;
        }
        if self.req.requirements_disabled {
            self.push(Finding::new(
                "L4-REQUIREMENTS-DISABLED",
                Layer::L4Versions,
                Severity::Info,
                "NVIDIA_DISABLE_REQUIRE is set: the image's requirements were not checked",
            ));
            return;
        }
        let selection = if selected.is_some() { &self.req.selection } else { &DeviceSelection::None };
        let Ok(facts) = p.facts(selection) else { return };
        let gpus_known = selected.is_some();
        let unlisted = (p.is_wsl2() || p.is_jetson()) && p.gpus.is_empty();
        let unresolved = p.resolve(selection).map(|r| r.unresolved).unwrap_or_default();
        let resolved_count = selected.map_or(0, <[_]>::len);
        let assessment = reqs.assess(&facts);
        for u in &assessment.unverifiable {
            let Some(key) = u.key() else { continue };
            if key.per_gpu() && !gpus_known {
                continue;
            }
            let f = self.unverifiable_finding(u, key, selected);
            self.push(f);
        }
        for i in &assessment.invalid {
            if !driver_up {
                continue; // covered by L2-CHECKS-SKIPPED
            }
            let gpu = i.gpu.and_then(|n| selected.and_then(|s| s.get(n)));
            let subject = gpu.map_or_else(String::new, |g| {
                format!("GPU {} ({}): ", g.index, g.model.as_deref().unwrap_or("?"))
            });
            let message = format!(
                "{}: {subject}{}; NVIDIA's hook refuses this container too",
                i.source,
                strip_gpu_prefix_text(&i.to_string())
            );
            self.push(
                Finding::new("L4-REQUIREMENT-INVALID", Layer::L4Versions, Severity::Error, message)
                    .with(&i.source, shorten(&i.expr, 120))
                    .remedy(format!(
                        "fix {} in the image: NVIDIA_REQUIRE_* takes only cuda, driver, arch and brand (our keys go \
                         in STACKBUILD_REQUIRE_*); or start it with NVIDIA_DISABLE_REQUIRE=true",
                        i.source
                    )),
            );
        }
        for u in assessment.failures {
            let Some(primary) = u.primary() else { continue };
            let key = primary.key;
            let needs_driver = matches!(key, Key::Cuda | Key::Driver | Key::Arch | Key::Brand | Key::Gpus);
            if needs_driver && !driver_up {
                continue; // covered by L2-CHECKS-SKIPPED
            }
            let per_gpu = matches!(key, Key::Arch | Key::Brand | Key::Gpus);
            if per_gpu && !gpus_known && !unlisted {
                continue; // the selection itself failed (L3)
            }
            let device = u.gpu.and_then(|i| i.checked_sub(resolved_count)).and_then(|i| unresolved.get(i));
            // The version a WSL2 or Jetson host cannot read from files; a Jetson's CUDA known from
            // its L4T release is checked.
            let unknown_version = key == Key::Driver || (key == Key::Cuda && facts.cuda.is_none());
            let unverifiable = (unknown_version && facts.driver.is_none() && (p.is_wsl2() || p.is_jetson()))
                || (per_gpu && unlisted)
                || device.is_some_and(|d| d.common_model().is_none());
            let mut f = self.requirement_finding(&u, key, unverifiable, selected);
            if let Some(d) = device {
                f = unresolved_finding(f, &u, d);
            }
            self.push(f);
        }
        if let Some(gpus) = selected {
            self.forward_compat(&facts, gpus);
        }
    }

    /// A requirement whose truth the host and the knowledge base cannot tell: a warning that
    /// says what is unknown and how to confirm it; the container is not blocked.
    fn unverifiable_finding(
        &self,
        u: &crate::contract::require::Unverifiable,
        key: Key,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let gpu = u.gpu.and_then(|i| selected.and_then(|s| s.get(i)));
        let subject = gpu.map_or_else(String::new, |g| {
            format!("GPU {} ({}): ", g.index, g.model.as_deref().unwrap_or("?"))
        });
        let factors: Vec<String> =
            u.unknown.iter().map(|f| format!("{} (host has {})", f.factor, f.host)).collect();
        let mut f = Finding::new(
            "L4-REQUIREMENT-UNVERIFIABLE",
            Layer::L4Versions,
            Severity::Warning,
            format!(
                "{}: {subject}cannot tell whether {} holds; not enforced{}",
                u.source,
                factors.join(", "),
                u.may_be_invalid.as_ref().map_or_else(String::new, |x| format!(
                    " (if it does not, NVIDIA's evaluator reaches {}, a key it has no rule for, and refuses the \
                     container)",
                    x.factor
                ))
            ),
        )
        .with(&u.source, shorten(&u.expr, 120));
        let remedy = match key {
            Key::Arch | Key::Brand => {
                if let Some(g) = gpu {
                    f = f.with_evidence(&g.evidence).with(
                        &format!("{}/device", g.pci.path),
                        format!(
                            "{} (not in the knowledge base)",
                            g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}"))
                        ),
                    );
                }
                "confirm with nvidia-smi --query-gpu=name,compute_cap --format=csv; sudo stackhook doctor --record \
                 saves the answer for the hook, or add a [[gpu]] row with its source in /etc/stackhook/kb.d/"
            }
            _ => {
                if let Some(d) = &self.p.driver {
                    f = f.with_evidence(&d.evidence);
                }
                f = f.with_evidence(&self.p.host_cuda().how.into());
                "confirm with nvidia-smi (its header prints \"CUDA Version\", from R610 \"CUDA UMD Version\"); sudo \
                 stackhook doctor --record saves it for the hook, or add a [[branch]] row with its source in /etc/stackhook/kb.d/"
            }
        };
        f.remedy(remedy)
    }

    fn requirement_finding(
        &self,
        u: &Unsatisfied,
        key: Key,
        unverifiable: bool,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let (layer, code) = match key {
            Key::Kernel => (Layer::L1Driver, "L1-KERNEL-REQUIREMENT"),
            Key::Module => (Layer::L2UserSpace, "L2-MODULE-REQUIREMENT"),
            Key::Gpus => (Layer::L3Gpus, "L3-GPU-COUNT-REQUIREMENT"),
            Key::Cuda => (Layer::L4Versions, "L4-CUDA-REQUIREMENT"),
            Key::Driver => (Layer::L4Versions, "L4-DRIVER-REQUIREMENT"),
            Key::Arch => (Layer::L4Versions, "L4-ARCH-REQUIREMENT"),
            Key::Brand => (Layer::L4Versions, "L4-BRAND-REQUIREMENT"),
            Key::Machine => (Layer::L4Versions, "L4-MACHINE-REQUIREMENT"),
            Key::Platform => (Layer::L4Versions, "L4-PLATFORM-REQUIREMENT"),
        };
        let primary = u.primary();
        let factor = primary.map_or("", |f| f.factor.as_str());
        let wanted = factor.trim_start_matches(key.as_str()).trim_start_matches(['<', '>', '=', '!']);
        let gpu = u.gpu.and_then(|i| selected.and_then(|s| s.get(i)));
        let message = match gpu {
            Some(g) => format!(
                "{}: GPU {} ({}){}",
                u.source,
                g.index,
                g.model.as_deref().unwrap_or("?"),
                strip_gpu_prefix(u)
            ),
            None => format!("{}: {u}", u.source),
        };
        let mut f = if unverifiable {
            Finding::new(
                "L4-REQUIREMENT-UNVERIFIABLE",
                layer.max(Layer::L4Versions),
                Severity::Warning,
                format!("{message}; not enforced: this host's {} cannot be read from files", key.as_str()),
            )
        } else {
            Finding::new(code, layer, Severity::Error, message)
        };
        f = f.with(&u.source, shorten(&u.expr, 120));
        f = self.requirement_evidence(f, key, wanted, gpu, selected);
        if unverifiable {
            return f;
        }
        match self.requirement_remedy(key, factor, wanted) {
            Some(r) => f.remedy(r),
            None => f,
        }
    }

    /// Evidence of the host value a requirement failed on.
    fn requirement_evidence(
        &self,
        mut f: Finding,
        key: Key,
        wanted: &str,
        gpu: Option<&&GpuProbe>,
        selected: Option<&[&GpuProbe]>,
    ) -> Finding {
        let p = self.p;
        match key {
            Key::Cuda | Key::Driver => {
                if let Some(d) = &p.driver {
                    f = f.with_evidence(&d.evidence);
                } else if let Some(e) = p.platform.evidence().filter(|_| key == Key::Cuda) {
                    f = f.with_evidence(e);
                }
                if key == Key::Cuda {
                    f = f.with_evidence(&p.host_cuda().how.into());
                }
            }
            Key::Kernel => {
                if let Some(k) = &p.kernel {
                    f = f.with_evidence(&k.evidence);
                }
            }
            Key::Machine => f = f.with_evidence(&p.machine.evidence),
            Key::Platform => {
                f = match p.platform.evidence() {
                    Some(e) => f.with_evidence(e),
                    None => f.with(
                        "(platform)",
                        "linux: no /dev/dxg, /usr/lib/wsl/lib, /etc/nv_tegra_release or Tegra SoC in \
                         /sys/devices/soc0/family and /proc/device-tree/compatible",
                    ),
                };
            }
            Key::Module => {
                let name = wanted.to_ascii_lowercase();
                f = match p.modules.get(&name) {
                    Some(m) => f.with_evidence(&m.evidence),
                    None if p.module_loaded(&name) => f.with("/proc/modules", format!("{name} listed")),
                    None => f.with("/proc/modules", format!("no line for {name}")),
                };
            }
            Key::Arch | Key::Brand => {
                if let Some(g) = gpu {
                    if key == Key::Arch {
                        if let Some(a) = p.gpu_arch(g).filter(|a| !a.how.path.starts_with("(knowledge base)"))
                        {
                            // From the recorded nvidia-smi facts or an admin row: say so.
                            return f.with_evidence(&a.how.into());
                        }
                    }
                    let model = g.kb_model();
                    if let Some(soc) = &g.soc {
                        // An integrated GPU: the SoC string and what the knowledge base says of it.
                        f = f.with_evidence(&g.evidence).with(
                            "(knowledge base)",
                            format!(
                                "{soc} = {} ({})",
                                model.map_or("unknown SoC", |m| m.name.as_str()),
                                model.map_or("?".to_owned(), |m| if key == Key::Arch {
                                    format!("compute capability {}", m.compute_capability)
                                } else {
                                    format!("brand {}", m.brand)
                                })
                            ),
                        );
                        return f;
                    }
                    f = f.with(
                        &format!("{}/device", g.pci.path),
                        format!(
                            "{} = {} ({} {})",
                            g.pci.device.map_or("?".to_owned(), |d| format!("0x{d:04x}")),
                            model.map_or("unknown model", |m| m.name.as_str()),
                            if key == Key::Arch { "compute capability" } else { "brand" },
                            model.map_or("?".to_owned(), |m| if key == Key::Arch {
                                m.compute_capability.to_string()
                            } else {
                                m.brand.clone()
                            })
                        ),
                    );
                }
            }
            Key::Gpus => {
                f = f.with(
                    "NVIDIA_VISIBLE_DEVICES",
                    format!("{} GPU(s) selected", selected.map_or(0, <[_]>::len)),
                );
            }
        }
        f
    }

    /// What to do about a failed requirement.
    fn requirement_remedy(&self, key: Key, factor: &str, wanted: &str) -> Option<String> {
        let p = self.p;
        match key {
            Key::Cuda => {
                let host = p.host_cuda().cuda;
                let need = wanted.parse::<CudaVersion>().ok();
                if p.driver.is_none() && p.is_jetson() {
                    let h = host.map_or_else(|| "its L4T release's".to_owned(), |h| h.to_string());
                    return Some(format!(
                        "use an image built for CUDA {h} or older: this board's Jetson Linux (L4T) release ships CUDA {h} \
                         and it has no CUDA upgrade package for CUDA {wanted} (or flash a JetPack that the board supports \
                         with a newer CUDA)"
                    ));
                }
                // An admin toolkit row first, then the built-in table.
                let min = need.as_ref().and_then(|n| {
                    p.kb_extension
                        .toolkit(n)
                        .map(|(t, _)| t.driver.clone())
                        .or_else(|| kb::cuda_min_driver(n).map(|row| row.toolkit_driver))
                });
                Some(match (min, host) {
                    (Some(driver), Some(h)) => format!(
                        "install driver {driver} or newer (CUDA {wanted}'s minimum), or use an image built for CUDA {h} or older"
                    ),
                    (Some(driver), None) => format!("install driver {driver} or newer (CUDA {wanted}'s minimum)"),
                    (None, _) => format!("install a driver that supports CUDA {wanted} (nvidia-smi shows the CUDA version)"),
                })
            }
            Key::Driver => Some(format!("install a driver that satisfies {factor}")),
            Key::Kernel => {
                Some(format!("boot a kernel that satisfies {factor} (the image's author excludes this one)"))
            }
            Key::Module if factor.contains("!=") => Some(format!("sudo modprobe -r {wanted}")),
            Key::Module => Some(if wanted == "nvidia_uvm" {
                "sudo nvidia-modprobe -u -c=0".to_owned()
            } else {
                format!("sudo modprobe {wanted}")
            }),
            Key::Gpus => {
                Some("select more GPUs (NVIDIA_VISIBLE_DEVICES) or run on a host that has them".to_owned())
            }
            Key::Arch => Some(
                "run on a GPU the image was built for, or rebuild the image with this GPU's architecture \
                 in its arch list"
                    .to_owned(),
            ),
            Key::Brand => None,
            Key::Machine => Some(format!("run on a host whose machine is {wanted}")),
            Key::Platform if factor.contains("!=") => {
                Some(format!("run on a host whose platform is not {}", wanted.to_ascii_lowercase()))
            }
            Key::Platform => Some(
                match wanted.to_ascii_lowercase().as_str() {
                    "wsl2" => "run under WSL2 on a Windows host with the NVIDIA driver",
                    "jetson" => "run on a Jetson board",
                    _ => "run on a Linux host with PCI GPUs and the nvidia driver (not WSL2 or Jetson)",
                }
                .to_owned(),
            ),
        }
    }

    /// A requirement met only through a term without `cuda` relies on the driver running a newer
    /// CUDA than it supports. Within one CUDA major that is minor-version compatibility (no
    /// package needed); across majors it is forward compatibility, the `cuda-compat` package,
    /// which NVIDIA supports only on data-center GPUs and Jetson (CUDA compatibility guide).
    fn forward_compat(&mut self, facts: &crate::contract::require::HostFacts, gpus: &[&GpuProbe]) {
        let p = self.p;
        let Some(host_cuda) = facts.cuda.as_ref() else { return };
        let mut seen: Vec<(String, Option<usize>)> = Vec::new();
        for (source, gpu, term) in self.req.requirements.forward_compat_terms(facts) {
            if seen.contains(&(source.clone(), gpu)) {
                continue;
            }
            seen.push((source.clone(), gpu));
            let Some(need) = self.required_cuda(&source) else { continue };
            let Some(g) = gpu.and_then(|i| gpus.get(i)) else { continue };
            let gpu_name = format!("GPU {} ({})", g.index, g.model.as_deref().unwrap_or("?"));
            let evidence = Evidence { path: source.clone(), value: format!("met through {term}") };
            if need.part(0) <= host_cuda.part(0) {
                self.push(
                    Finding::new(
                        "L4-MINOR-VERSION-COMPAT",
                        Layer::L4Versions,
                        Severity::Info,
                        format!(
                            "{source}: {gpu_name} runs CUDA {need} on a driver that supports {host_cuda} through \
                             minor-version compatibility; PTX newer than {host_cuda} cannot be JIT-compiled"
                        ),
                    )
                    .with_evidence(&evidence),
                );
                continue;
            }
            let model = p.gpu_model(g).map(|(m, _)| m);
            // A Jetson SoC whose upgrade-package support is not known counts as an unknown model.
            let soc_unknown =
                g.soc.as_deref().and_then(kb::jetson_soc).is_some_and(|s| s.forward_compat.is_none());
            let model = model.filter(|_| !soc_unknown);
            let supported = model.is_some_and(|m| m.forward_compat);
            let mut f = match (model, supported) {
                (_, true) => Finding::new(
                    "L4-FORWARD-COMPAT",
                    Layer::L4Versions,
                    Severity::Info,
                    format!(
                        "{source}: CUDA {need} on a driver that supports {host_cuda} relies on the cuda-compat \
                         forward-compatibility package, which {gpu_name} supports"
                    ),
                ),
                (None, false) => Finding::new(
                    "L4-FORWARD-COMPAT-UNKNOWN-GPU",
                    Layer::L4Versions,
                    Severity::Warning,
                    format!(
                        "{source}: CUDA {need} on a driver that supports {host_cuda} relies on the cuda-compat \
                         forward-compatibility package; whether {gpu_name} supports it is unknown (data-center \
                         GPUs and Jetson only)"
                    ),
                ),
                (Some(m), false) => Finding::new(
                    "L4-FORWARD-COMPAT-UNSUPPORTED",
                    Layer::L4Versions,
                    Severity::Error,
                    format!(
                        "{source}: the image needs CUDA {need} and the driver supports {host_cuda}; the requirement \
                         passes only through `{term}`, i.e. the cuda-compat forward-compatibility package, which \
                         runs only on data-center GPUs and Jetson, not on {gpu_name}: {}, brand {}",
                        m.architecture, m.brand
                    ),
                ),
            };
            f = f.with_evidence(&evidence);
            if let Some(d) = &p.driver {
                f = f.with_evidence(&d.evidence);
            }
            if f.severity == Severity::Error {
                let min = kb::cuda_min_driver(&need).map_or_else(
                    || format!("a driver that supports CUDA {need}"),
                    |row| format!("driver {} or newer", row.toolkit_driver),
                );
                f = f.remedy(format!("install {min}, or use an image built for CUDA {host_cuda} or older"));
            }
            self.push(f);
        }
    }

    /// The highest `cuda>=`/`cuda>` version a requirement variable names.
    fn required_cuda(&self, source: &str) -> Option<CudaVersion> {
        self.req
            .requirements
            .entries
            .iter()
            .filter(|r| r.source == source)
            .flat_map(|r| r.expr.0.iter().flat_map(|t| t.0.iter()))
            .filter_map(|f| match (&f.value, f.op) {
                (Value::Cuda(v), crate::contract::require::Op::Ge | crate::contract::require::Op::Gt) => {
                    Some(v.clone())
                }
                _ => None,
            })
            .max()
    }

    /// L4: PCI Express links below their maximum (a warning: idle GPUs may train down).
    fn l4_links(&mut self, gpus: &[&GpuProbe]) {
        for g in gpus {
            let pci = &g.pci;
            let speed = |s: &Option<String>| {
                s.as_deref().and_then(|s| s.split_whitespace().next()).and_then(|n| n.parse::<f64>().ok())
            };
            let slow = matches!((speed(&pci.current_link_speed), speed(&pci.max_link_speed)), (Some(c), Some(m)) if c < m);
            let narrow = matches!((pci.current_link_width, pci.max_link_width), (Some(c), Some(m)) if c < m);
            if slow || narrow {
                self.push(
                    Finding::new(
                        "L4-PCIE-LINK-DEGRADED",
                        Layer::L4Versions,
                        Severity::Warning,
                        format!(
                            "GPU {} ({}) links at {} x{} of {} x{}; an idle GPU may train down, so check under load",
                            g.index,
                            g.bus_id,
                            pci.current_link_speed.as_deref().unwrap_or("?"),
                            pci.current_link_width.map_or("?".to_owned(), |w| w.to_string()),
                            pci.max_link_speed.as_deref().unwrap_or("?"),
                            pci.max_link_width.map_or("?".to_owned(), |w| w.to_string()),
                        ),
                    )
                    .with(&format!("{}/current_link_speed", pci.path), pci.current_link_speed.as_deref().unwrap_or("?"))
                    .with(
                        &format!("{}/current_link_width", pci.path),
                        pci.current_link_width.map_or("?".to_owned(), |w| w.to_string()),
                    )
                    .remedy("nvidia-smi -q -d PERFORMANCE,PCI under load; reseat the board or check the slot and riser"),
                );
            }
        }
    }
}

/// A requirement finding about a device whose GPU is not known, reworded to name the device.
fn unresolved_finding(mut f: Finding, u: &Unsatisfied, d: &UnresolvedDevice<'_>) -> Finding {
    let head = match d.common_model() {
        Some(m) => format!("{}: {} (on a GPU with MIG instances, every one an {})", u.source, d.id, m.name),
        None => format!("{}: {}", u.source, d.id),
    };
    f.message = format!("{head}{}", strip_gpu_prefix(u));
    if f.severity == Severity::Warning {
        f.message.push_str(
            "; not enforced: which GPU this device is on is not recorded and the host's GPUs differ",
        );
    }
    f
}

/// The `Unsatisfied` message without its `GPU n: ` prefix (the finding names the GPU itself).
fn strip_gpu_prefix(u: &Unsatisfied) -> String {
    let s = u.to_string();
    match s.split_once(": ") {
        Some((head, rest)) if head.starts_with("GPU ") => format!(": {rest}"),
        _ => format!(": {s}"),
    }
}

/// A per-GPU message without its leading `GPU <n>: `.
fn strip_gpu_prefix_text(s: &str) -> &str {
    match s.split_once(": ") {
        Some((head, rest)) if head.starts_with("GPU ") => rest,
        _ => s,
    }
}

/// `s` cut to `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// How to get the driver's user-space libraries back.
fn install_userspace(driver: Option<&str>) -> String {
    match driver {
        Some(v) => {
            let branch = v.split('.').next().unwrap_or(v);
            format!(
                "install the user-space libraries of driver {v}: sudo apt-get install --reinstall \
                 libnvidia-compute-{branch} (Ubuntu), or rerun the driver's installer"
            )
        }
        None => {
            "install the NVIDIA driver's user-space libraries (the driver package or installer)".to_owned()
        }
    }
}

#[cfg(test)]
mod tests;
