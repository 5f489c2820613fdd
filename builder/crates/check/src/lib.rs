//! What a stack asks of its host: requirements derived from the stack, GPU code, conflicts.
//!
//! It must not depend on `stackbuild-image`: what the host must provide comes from the stack, not
//! from layers.
//!
//! - `derive`: what the host must provide, derived from the stack and the `[host]` rules.
//! - `fatbin`: the GPU code a CUDA library carries, read from its fat binary (cubins and PTX).
//! - `gpu_code`: the GPU code of a build (cubins, PTX) and the compute capabilities it admits.
//! - `check`: the solved stack, its host requirements and its conflicts, without building.
//! - `tables`: knowledge-base tables generated from an index's metadata (the torch table).

mod check;
mod derive;
mod fatbin;
mod gpu_code;
mod tables;

pub use check::{check, CheckOptions, Finding, FindingKind, Report, Severity};
pub use derive::{
    library_component, requirements, requirements_with, requirements_with_extensions, torch_code, Extension,
    Package,
};
pub use fatbin::{extension_code_for_build, extension_wheel_code, torch_code_for_build};
pub use gpu_code::GpuCode;
pub use tables::torch;
