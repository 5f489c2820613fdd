//! The pieces every stage of stackbuild shares: platforms, atomic writes, blobs and digests, capped
//! input, I/O errors, progress, diagnostics.
//!
//! It depends on no other stackbuild crate: every stage may use it.
//!
//! - `platform`: the target platforms (`linux/amd64`, `linux/arm64`) and their names.
//! - `atomic`: replacing a file atomically (temporary name, `fsync`, rename).
//! - `blob`: the record of a finished layer blob, and `sha256:` digests.
//! - `canonical`: the one writer of image JSON documents (sorted keys, compact).
//! - `input`: opening user-named files as regular files only, with a size cap.
//! - `io_error`: the one I/O error (operation, path, cause) that module errors wrap.
//! - `progress`: progress bars on a terminal and the time each build stage took.
//! - `diagnostic`: a problem in a TOML file, rendered with its line and a caret.
//! - `chunks`: a writer that hashes and stores a stream in chunks.
//! - `image_arg`: `IMAGE[:TAG]` arguments naming a local layout or archive, split by what exists.
//! - `wheel_name`: PEP 427 wheel file names and their tags.
//! - `zip_member`: wheel members carried into gzip layers as their own deflate streams.
//! - `compression`: the compression of a layer blob: media type, name, decoder.
//! - `base_facts`: what was learned from a base root filesystem (its Python, its Debian packages).
//! - `glibc`: the GNU C library version of a base, which bounds the `manylinux` wheels it runs.
//! - `record`: what a build learned from an artifact, kept in the cache by the artifact's content.

mod atomic;
mod base_facts;
mod blob;
mod canonical;
mod chunks;
mod compression;
mod diagnostic;
mod glibc;
mod image_arg;
mod input;
mod io_error;
mod platform;
mod progress;
mod record;
mod wheel_name;
mod zip_member;

/// The variables a source build sets itself (the sandbox's paths, reproducibility, what
/// `[python.build]` fields say, the loader's): `wheelbuild` sets no other and checks it, and a
/// recipe's `[python.build.env]` may not name one.
pub const BUILD_OWN_ENV: [&str; 17] = [
    "PATH",
    "PYTHONPATH",
    "HOME",
    "TMPDIR",
    "LC_ALL",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "SOURCE_DATE_EPOCH",
    "PIP_NO_INDEX",
    "TORCH_CUDA_ARCH_LIST",
    "CUDA_HOME",
    "CUDA_PATH",
    "FORCE_CUDA",
    "MAX_JOBS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
];

pub use atomic::{sync_dir, unique_temp_name, write_atomic, write_atomic_in, write_atomic_mode};
pub use base_facts::BaseFacts;
pub use blob::{sha256_bytes, sha256_file, sha256_reader, LayerBlob};
pub use canonical::to_vec;
pub use chunks::ChunkWriter;
pub use compression::Compression;
pub use diagnostic::{list_names, Diagnostic};
pub use glibc::Glibc;
pub use image_arg::ImageArg;
pub use input::{kind_of, open_regular, read_capped, read_text, InputError, ReadAt, MAX_TEXT};
pub use io_error::{io_err, IoError};
pub use platform::Platform;
pub use progress::{Progress, Stage};
pub use record::{read_record, write_record};
pub use wheel_name::{is_sdist, parse_sdist_name, parse_wheel_name};
pub use zip_member::{MemberError, ZipMember};
