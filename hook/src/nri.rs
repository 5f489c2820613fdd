//! `stackhook nri`: the same checks as the hook, as a Node Resource Interface plugin, so a
//! Kubernetes node refuses an incompatible GPU container at `CreateContainer` without a runtime
//! handler, a `RuntimeClass` or an edit of the runtime's configuration.
//!
//! NRI (github.com/containerd/nri) is spoken from its published API: `api.proto` for the
//! messages, ttrpc's `request.proto` for the envelope, and NRI's connection multiplexer
//! (`pkg/net/multiplex`) for the two ttrpc connections that share the plugin's socket. No Rust
//! crate implements NRI or its multiplexer; the ttrpc crate (containerd/ttrpc-rust) serves and
//! dials whole sockets, not connections inside a multiplexed one, so the few lines of ttrpc
//! framing are here and the messages are prost's, generated from the upstream files.
//!
//! - `generated`: prost code for `proto/nri.proto` and `proto/ttrpc.proto`, checked in and
//!   compared with a fresh generation by a test.
//! - `wire`: the multiplexer and ttrpc frames, decoded from bytes with every length capped.
//! - `plugin`: registration, the calls the runtime makes, and the decision on a container.

mod generated;
mod plugin;
mod wire;

pub use generated::{api, ttrpc};
pub use plugin::{container_spec, decide, serve, Decision, NriConfig, NriError, Served};
pub use wire::{encode, Demux, Message, MessageKind, WireError, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
