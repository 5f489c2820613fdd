//! The content-addressed cache of stackbuild: artifacts, layer blobs and their keys.
//!
//! It depends only on `stackbuild-common`; the stages that fill it (python, image) are above it.
//!
//! - `cache`: the content-addressed cache of artifacts and layer blobs, and [`LayerKey`], the
//!   key of a cached thing: the sha256 of one struct of its inputs.
//! - `key_test` (tests and the `key-test` feature): the check that each input of a key struct
//!   changes its key.

mod cache;
#[cfg(any(test, feature = "key-test"))]
mod key_test;

pub use cache::{
    is_temp_name, modified_before, sha256_hex, stamp, Cache, CacheError, LayerKey, RemoteLayers, TempFile,
    ROOT_CACHE,
};
#[cfg(any(test, feature = "key-test"))]
pub use key_test::assert_every_input_changes_key;
