//! The image-host contract: the one home of what the builder writes and the hook enforces.
//!
//! - [`version`]: CUDA, driver, kernel and compute-capability versions and how they compare.
//! - [`require`]: requirement expressions (`NVIDIA_REQUIRE_*` syntax), parsed and rendered here
//!   only, and evaluated against host facts.
//! - [`image`]: what an image carries (its requirement variables and stack document).
//! - [`kb`]: the compatibility knowledge base (`kb/*.toml`, each row with its public source).
//! - [`labels`]: the Kubernetes node label names and value codes.
//! - [`time`]: timestamps in the formats images need.

pub mod image;
pub mod kb;
pub mod labels;
pub mod require;
pub mod time;
pub mod version;
