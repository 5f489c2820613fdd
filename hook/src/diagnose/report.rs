//! What a diagnosis is made of: the layers, severities and findings, the verdict, and the host
//! summary at the head of a report.

use serde::Serialize;

use super::Checks;
use crate::contract::kb;
use crate::contract::require::CudaBound;
use crate::given::GpuSource;
use crate::probe::{self, Evidence};

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
    pub(super) fn new(
        code: &'static str,
        layer: Layer,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Self { code, layer, severity, message: message.into(), evidence: Vec::new(), remedy: None }
    }

    pub(super) fn with(mut self, path: &str, value: impl AsRef<str>) -> Self {
        self.evidence.push(Evidence { path: path.to_owned(), value: value.as_ref().to_owned() });
        self
    }

    pub(super) fn with_evidence(mut self, e: &Evidence) -> Self {
        self.evidence.push(e.clone());
        self
    }

    pub(super) fn remedy(mut self, remedy: impl Into<String>) -> Self {
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

/// The result of [`diagnose`](super::diagnose).
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
    pub(super) fn new(host: HostSummary, mut findings: Vec<Finding>, skipped: Vec<Layer>) -> Self {
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

    /// Pretty JSON, ending in a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }
}

impl Checks<'_> {
    pub(super) fn summary(&self) -> HostSummary {
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
}
