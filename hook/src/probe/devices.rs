//! The driver's device nodes under `/dev`: the control, UVM and modeset nodes, one
//! `/dev/nvidia<minor>` per listed GPU, and the nodes an integrated GPU comes through.

use rustix::fs::FileType;
use serde::Serialize;

use super::hostfs::{self, HostFs, ReadError};
use super::{HostProbe, Reader};

/// The host nodes through which an integrated GPU is given: WSL2's paravirtual GPU (`dxg`), a
/// Jetson's nvgpu channel and control nodes and its memory manager. The probe reads these `/dev`
/// entries, and a container's nodes are compared by number with the host's own of these names.
pub const INTEGRATED_NODES: [&str; 4] = ["dxg", "nvhost-gpu", "nvhost-ctrl-gpu", "nvmap"];

/// What a `/dev` entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeState {
    /// No such entry.
    Missing,
    /// A character device.
    CharDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// Something else (a regular file, a symlink, a directory).
    Other {
        /// What it is.
        what: &'static str,
    },
}

impl Reader {
    pub(super) fn device_nodes(&mut self, p: &mut HostProbe) {
        let mut names: Vec<String> = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"]
            .iter()
            .chain(INTEGRATED_NODES.iter())
            .map(|s| (*s).to_owned())
            .collect();
        names.extend(p.gpus.iter().filter_map(|g| g.minor).map(|m| format!("nvidia{m}")));
        let dev = match self.fs.open_dir("dev") {
            Ok(fd) => Some(fd),
            Err(e) => {
                self.note("dev", &e);
                None
            }
        };
        for name in names {
            let state = match dev.as_ref().map(|d| HostFs::lstat_in(d, &name)) {
                None | Some(Err(ReadError::NotFound)) => NodeState::Missing,
                Some(Err(e)) => {
                    self.note(&format!("dev/{name}"), &e);
                    NodeState::Missing
                }
                Some(Ok(st)) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::CharacterDevice => NodeState::CharDevice {
                        major: rustix::fs::major(st.st_rdev),
                        minor: rustix::fs::minor(st.st_rdev),
                    },
                    other => NodeState::Other { what: hostfs::type_name(other) },
                },
            };
            p.device_nodes.insert(format!("/dev/{name}"), state);
        }
    }
}

impl HostProbe {
    /// The state of `/dev/<name>`, `Missing` when it was not looked at.
    pub fn node(&self, name: &str) -> NodeState {
        self.device_nodes.get(&format!("/dev/{name}")).copied().unwrap_or(NodeState::Missing)
    }
}
