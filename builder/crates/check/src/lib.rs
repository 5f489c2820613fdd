//! What a stack asks of its host: requirements derived from the stack, GPU code, conflicts.
//!
//! - [`derive`]: what the host must provide, derived from the stack and the `[host]` rules.
//! - [`fatbin`]: TODO
//! - [`gpu_code`]: the GPU code of a build (cubins, PTX) and the compute capabilities it admits.
//! - [`check`]: the solved stack, its host requirements and its conflicts, without building.
//! - [`tables`]: knowledge-base tables generated from an index's metadata (the torch table).

pub mod check;
pub mod derive;
pub mod fatbin;
pub mod gpu_code;
pub mod tables;
