//! L2, devices: `/dev/nvidiactl`, the selected GPUs' `/dev/nvidia<minor>`, `nvidia_uvm` loaded and
//! `/dev/nvidia-uvm` of the major `proc/devices` names.

use super::report::{Finding, Layer, Severity};
use super::Checks;
use crate::probe::{GpuProbe, NodeState};

/// How a `/dev` entry reads in evidence.
pub(super) fn node_text(n: NodeState) -> String {
    match n {
        NodeState::Missing => "missing".to_owned(),
        NodeState::CharDevice { major, minor } => format!("character device {major}:{minor}"),
        NodeState::Other { what } => format!("a {what}, not a character device"),
    }
}

impl Checks<'_> {
    /// L2: device nodes for the control device, the selected GPUs and UVM.
    pub(super) fn l2_device_nodes(&mut self, gpus: &[&GpuProbe]) {
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
}
