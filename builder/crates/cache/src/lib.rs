//! The content-addressed cache of stackbuild: artifacts, layer blobs and their keys.
//!
//! - [`cache`]: the content-addressed cache of artifacts and layer blobs.

pub mod cache;
