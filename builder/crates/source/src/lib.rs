//! Sources staged into an image: git commits and local directories, and the patches applied to them.
//!
//! - [`source`]: git commits and local directories staged into a tree, with a content digest.
//! - [`patch`]: strict find/replace and unified-diff patches applied to a staged tree.

pub mod patch;
pub mod source;
