//! The pieces every stage of stackbuild shares: platforms, atomic writes, blobs and digests, capped input, I/O errors, progress, diagnostics.
//!
//! - [`platform`]: the target platforms (`linux/amd64`, `linux/arm64`) and their names.
//! - [`atomic`]: replacing a file atomically (temporary name, `fsync`, rename).
//! - [`blob`]: the record of a finished layer blob, and `sha256:` digests.
//! - [`canonical`]: the one writer of image JSON documents (sorted keys, compact).
//! - [`input`]: opening user-named files as regular files only, with a size cap.
//! - [`io_error`]: the one I/O error (operation, path, cause) that module errors wrap.
//! - [`progress`]: progress bars on a terminal and the time each build stage took.
//! - [`diagnostic`]: a problem in a TOML file, rendered with its line and a caret.
//! - [`chunks`]: a writer that hashes and stores a stream in chunks.
//! - [`image_arg`]: `IMAGE[:TAG]` arguments naming a local layout or archive, split by what exists.
//! - [`wheel_name`]: PEP 427 wheel file names and their tags.
//! - [`zip_member`]: wheel members carried into gzip layers as their own deflate streams.
//! - [`compression`]: the compression of a layer blob: media type, name, decoder.
//! - [`base_facts`]: what was learned from a base root filesystem (its Python, its Debian packages).

pub mod atomic;
pub mod base_facts;
pub mod blob;
pub mod canonical;
pub mod chunks;
pub mod compression;
pub mod diagnostic;
pub mod image_arg;
pub mod input;
pub mod io_error;
pub mod platform;
pub mod progress;
pub mod wheel_name;
pub mod zip_member;
