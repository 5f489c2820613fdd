//! The Python stage of stackbuild: resolve, lock, fetch and install wheels, compile bytecode.
//!
//! - [`solve`]: resolution of Python packages for the target interpreter and platform.
//! - [`lock`]: the lock file that pins every artifact by sha256.
//! - [`given_lock`]: a lock the user brings (`uv.lock`, `pylock.toml`), installed as it is.
//! - [`pylock`]: the image's Python stack as a PEP 751 `pylock.toml`, for uv and pip.
//! - [`fetch`]: verified downloads into the cache.
//! - [`download`]: the downloader: parallel, resumed, hashed as it streams, the machine's index configuration.
//! - [`wheel`]: PEP 427 wheel installation into a staging tree, without running Python.
//! - [`bytecode`]: TODO
//! - [`index`]: a package index read through PEP 691 pages and wheel `METADATA` only (PEP 658 files, else range requests into the wheel's zip), live or recorded.
//! - [`artifact`]: a verified file in the artifact directory, fetch errors, and placing a file there.

pub mod artifact;
pub mod bytecode;
pub mod download;
pub mod fetch;
pub mod given_lock;
pub mod index;
pub mod lock;
pub mod pylock;
pub mod solve;
pub mod wheel;
