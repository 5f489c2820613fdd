//! The build-from-source stage of stackbuild: a package with no wheel for the image becomes one,
//! built by its own PEP 517 backend in a sandbox, and is installed like any other wheel.
//!
//! It sits between fetch and layer: it depends on `stackbuild-python` (artifacts, the wheel
//! installer, targets) and below, never on `stackbuild-image` (the caller hands it the build root)
//! nor on `check`, `audit`, `k8s` or `init`.
//!
//! - `sandbox`: bubblewrap, no network, no host files, not root, memory and time caps.
//! - `sdist`: an sdist unpacked safely, and its `[build-system]`.
//! - `frontend`: the PEP 517 frontend that calls the backend's hooks inside the sandbox.
//! - `root`: the build root, unpacked from its layer into the cache.
//! - `share`: built wheels as blobs of the layer store, so `--cache-registry` shares them.
//! - `error`: why a package could not be built.
//! - `toolkit`: CUDA 12's nvcc from Debian's `nvidia-cuda-toolkit`, laid out as a `CUDA_HOME`.
//! - `contents`: which Debian package ships a library (the suite's Contents index, through apt).
//! - `environment`: a build environment's wheels installed side by side, merged in order.
//! - `builder`: one package from sdist to a verified wheel in the cache, keyed by every input.

mod builder;
mod contents;
mod environment;
mod error;
mod frontend;
mod root;
mod sandbox;
mod sdist;
mod share;
mod toolkit;

pub use builder::{
    index_resolver, BuildRoot, Built, BuiltWheelKey, CudaToolchain, ResolveRequires, Settings, SourcePackage,
    WheelBuilder,
};
pub use contents::debian_providers;
pub use error::WheelBuildError;
pub use sandbox::{Mount, Sandbox, SandboxError, BUILD_DIR, BUILD_UID};
pub use sdist::{build_system, build_system_recorded, unpack, BuildSystem, SdistError};
pub use toolkit::{
    debian_cuda12, debian_mirror, ubuntu_keyring, DebianCuda, DebianPackage, ToolkitError,
    DEBIAN_CUDA12_PACKAGES,
};
