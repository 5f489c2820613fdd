//! The content-addressed cache of stackbuild: artifacts, layer blobs and their keys.
//!
//! - [`cache`]: the content-addressed cache of artifacts and layer blobs.

mod cache;

pub use cache::{
    is_temp_name, modified_before, sha256_hex, stamp, sync_dir, unique_temp_name, write_atomic,
    write_atomic_in, Cache, CacheError, LayerKey, RemoteLayers, TempFile,
};
