//! stackhook: checks, at container start, that a GPU host satisfies what an image needs.
//!
//! - [`atomic`]: whole-file writes.
//! - [`contract`]: the image-host contract both programs share (the `stackcontract` crate:
//!   versions, requirement expressions, the knowledge base, what an image carries).
//! - [`probe`]: what the host is, read from a host root (`/` or a fixture tree).
//! - [`cdi`]: `stackhook cdi check`, the host's CDI specs against its driver, GPUs and MIG
//!   devices.
//! - [`diagnose`]: findings, ordered by layer, each with a code, evidence and remedy.
//! - [`given`]: what a container was given in its final `config.json` (GPU device nodes, CDI
//!   annotations, driver library mounts), the GPU set under CDI and DRA.
//! - `fixture`: fixture host trees for tests (this crate's and the end-to-end tests), benchmarks
//!   and examples; compiled only for this crate's unit tests and with the `fixture` feature, so the
//!   shipped hook does not carry it.
//! - [`invoke`]: one hook invocation: state -> config -> request -> probe -> verdict.
//! - [`rootfs`]: reads inside an untrusted container root without leaving it.
//! - [`oci`]: the runtime's state on stdin and the bundle's `config.json`.
//! - [`runtime`]: the runc wrapper for Docker and containerd (adds the hook on `create`).
//! - [`install`]: wiring the hook into Docker, Podman, CRI-O and containerd.
//! - [`drift`]: what breaks in running containers after they started: driver libraries of
//!   another version than the module (after a driver upgrade), and the hosts where
//!   `systemctl daemon-reload` takes GPUs away.
//! - [`labels`]: Kubernetes node labels from a probe, for node affinity on image requirements.
//! - [`record`]: `doctor --record`/`labels --record`: host facts from `nvidia-smi`, which the hook
//!   reads back (the hook itself never runs a program).

pub mod atomic;
pub mod cdi;
pub use stackcontract as contract;
pub mod diagnose;
pub mod drift;
#[cfg(any(test, feature = "fixture"))]
pub mod fixture;
pub mod given;
pub mod install;
pub mod invoke;
pub mod labels;
pub mod nri;
pub mod oci;
pub mod probe;
pub mod record;
pub mod rootfs;
pub mod runtime;
pub use stackcontract::time;

#[cfg(test)]
mod nvidia_conformance;
