//! The Python stage of stackbuild: resolve, lock, fetch and install wheels, compile bytecode.
//!
//! It must not depend on `stackbuild-image` (the build hands the staged tree to the layer writer)
//! nor on `check`, `audit`, `k8s` or `init`.
//!
//! - `solve`: resolution of Python packages for the target interpreter and platform.
//! - `sources`: resolution with source distributions, their metadata prepared in the build
//!   sandbox.
//! - `pkg_info`: an sdist's `PKG-INFO`, used without a build where it is static (PEP 643).
//! - `torch_build`: sdists whose build imports torch (CUDA extensions), read from the sdist.
//! - `url_deps`: direct URL dependencies, fetched and verified by the recipe's digest.
//! - `lock`: the lock file that pins every artifact by sha256.
//! - `given_lock`: a lock the user brings (`uv.lock`, `pylock.toml`), installed as it is.
//! - `pylock`: the image's Python stack as a PEP 751 `pylock.toml`, for uv and pip.
//! - `fetch`: verified downloads into the cache.
//! - `download`: the downloader: parallel, resumed, hashed as it streams, the machine's index
//!   configuration.
//! - `wheel`: PEP 427 wheel installation into a staging tree, without running Python.
//! - `bytecode`: the `.pyc` of every module a layer installs, compiled at build time in a sandboxed
//!   interpreter of the base, cached per unit.
//! - `index`: a package index read through PEP 691 pages and wheel `METADATA` only (PEP 658 files,
//!   else range requests into the wheel's zip), live or recorded.
//! - `artifact`: a verified file in the artifact directory, fetch errors, and placing a file there.

mod artifact;
mod bytecode;
mod download;
mod fetch;
mod given_lock;
mod index;
mod lock;
mod pkg_info;
mod pylock;
mod solve;
mod sources;
mod torch_build;
mod url_deps;
mod wheel;

pub use artifact::{Artifact, FetchError};
#[cfg(any(test, feature = "key-test"))]
pub use bytecode::stand_in;
pub use bytecode::{Added, BytecodeError, BytecodeKey, Plan};
pub use download::Config;
pub use fetch::{fetch_wheels, import_local_wheels};
pub use given_lock::{fetch, Chosen, GitChosen, GivenLock, GivenLockError};
pub use index::{configured_index, Index, IndexError, IndexFile};
pub use lock::{reachable, Lock, LockError, LockedBuildWheel};
pub use pkg_info::{is_static, sdist_info, sdist_pkg_info, sdist_top_member, SdistInfo};
pub use pylock::{may_write, write_from_index};
pub use solve::{glibc_baseline, resolve, targets, targets_with, Pinned, SolveError, Target};
pub use sources::{
    resolve_with_sources, tree_sdist, PkgInfoMetadata, Project, Resolution, SdistMetadata, SourceFetch, Tree,
};
pub use torch_build::{build_against_torch, force_build_variable, torch_at_build, TorchAtBuild};
pub use url_deps::fetch_url_dependencies;
pub use wheel::{
    dist_info_metadata, install_wheel_as, install_wheel_deferring, normalize_name, wheel_identity, Deferred,
    InstallKey, InstalledWheel, Scheme, WheelError, DEFER_MIN,
};
