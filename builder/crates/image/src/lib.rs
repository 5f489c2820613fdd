//! The image stage of stackbuild: layers and their compressions, OCI layouts, registries, loading.
//!
//! - [`layer`]: deterministic layer tars and their compression.
//! - [`oci`]: OCI image layouts and `docker load` archives.
//! - [`load`]: `--load`, streaming an image archive into the local Docker daemon.
//! - [`registry`]: an OCI distribution client: push a layout to a registry, pull an image from one.
//! - [`output`]: the paths a build writes (`--out`, `--archive`, `--report`): only where it may.
//! - [`base`]: the image's base: scratch, an OCI layout, or a Debian rootfs by mmdebstrap.
//! - [`sbom`]: the image's SBOM (SPDX 2.3 and `CycloneDX` 1.6 JSON), a pure function of the build's inputs.

pub mod base;
pub mod layer;
pub mod load;
pub mod oci;
pub mod output;
pub mod registry;
pub mod sbom;
