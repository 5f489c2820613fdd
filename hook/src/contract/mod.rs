//! The image-host contract: the one home of what the builder writes and the hook enforces.

pub mod image;
pub mod kb;
pub mod require;
pub mod version;

#[cfg(test)]
mod nvidia_conformance;
