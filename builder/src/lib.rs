//! stackbuild: from a recipe to a reproducible, layered OCI image.
//!
//! - [`recipe`]: the recipe file, with errors that point at file, line and column.
//! - [`platform`]: the target platforms (`linux/amd64`, `linux/arm64`) and their names.
//! - [`diagnostic`]: a problem in a TOML file, rendered with its line and a caret.
//! - [`init`]: a recipe from a project's requirements, pyproject, lock or Dockerfile.
//! - [`lock`]: the lock file that pins every artifact by sha256.
//! - [`pylock`]: the image's Python stack as a PEP 751 `pylock.toml`, for uv and pip.
//! - [`solve`]: resolution of Python packages for the target interpreter and platform.
//! - [`check`]: the solved stack, its host requirements and its conflicts, without building.
//! - [`derive`]: what the host must provide, derived from the stack and the `[host]` rules.
//! - [`fetch`]: verified downloads into the cache.
//! - [`download`]: the downloader: parallel, resumed, hashed as it streams, the machine's index configuration.
//! - [`given_lock`]: a lock the user brings (`uv.lock`, `pylock.toml`), installed as it is.
//! - [`image_arg`]: `IMAGE[:TAG]` arguments naming a local layout or archive, split by what exists.
//! - [`io_error`]: the one I/O error (operation, path, cause) that module errors wrap.
//! - [`input`]: opening user-named files as regular files only, with a size cap.
//! - [`wheel`]: PEP 427 wheel installation into a staging tree, without running Python.
//! - [`wheel_name`]: PEP 427 wheel file names and their tags.
//! - [`zip_member`]: wheel members carried into gzip layers as their own deflate streams.
//! - [`source`]: git commits and local directories staged into a tree, with a content digest.
//! - [`patch`]: strict find/replace and unified-diff patches applied to a staged tree.
//! - [`base`]: the image's base: scratch, an OCI layout, or a Debian rootfs by mmdebstrap.
//! - [`build`]: the build itself: recipe -> lock -> layers -> image layout.
//! - [`atomic`]: replacing a file atomically (temporary name, `fsync`, rename).
//! - [`blob`]: the record of a finished layer blob, and `sha256:` digests.
//! - [`canonical`]: the one writer of image JSON documents (sorted keys, compact).
//! - [`cache`]: the content-addressed cache of artifacts and layer blobs.
//! - [`layer`]: deterministic layer tars and their compression.
//! - [`load`]: `--load`, streaming an image archive into the local Docker daemon.
//! - [`oci`]: OCI image layouts and `docker load` archives.
//! - [`progress`]: progress bars on a terminal and the time each build stage took.
//! - [`output`]: the paths a build writes (`--out`, `--archive`, `--report`): only where it may.
//! - [`audit`]: a static `ldd` over an image's root filesystem (unresolved, shadowed and stub libraries).
//! - [`registry`]: an OCI distribution client: push a layout to a registry, pull an image from one.
//! - [`sbom`]: the image's SBOM (SPDX 2.3 and `CycloneDX` 1.6 JSON), a pure function of the build's inputs.
//! - [`affinity`]: Kubernetes node affinity from an image's requirements, over `stackhook labels`.
//! - [`claim`]: a Kubernetes DRA `ResourceClaimTemplate` whose CEL selectors are an image's requirements.
//! - [`tables`]: knowledge-base tables generated from an index's metadata (the torch table).

pub mod affinity;
pub mod artifact;
pub mod atomic;
pub mod audit;
pub mod base;
pub mod base_facts;
pub mod blob;
pub mod build;
pub mod bytecode;
pub mod cache;
pub mod canonical;
pub mod check;
pub mod chunks;
pub mod claim;
pub mod compression;
pub mod derive;
pub mod diagnostic;
pub mod download;
pub mod fatbin;
pub mod fetch;
pub mod given_lock;
pub mod gpu_code;
pub mod image_arg;
pub mod index;
pub mod init;
pub mod input;
pub mod io_error;
pub mod layer;
pub mod load;
pub mod lock;
pub mod oci;
pub mod output;
pub mod patch;
pub mod platform;
pub mod progress;
pub mod pylock;
pub mod recipe;
pub mod registry;
pub mod sbom;
pub mod solve;
pub mod source;
pub mod tables;
pub mod wheel;
pub mod wheel_name;
pub mod zip_member;
