//! Sources staged into an image: git commits and local directories, and the patches applied to
//! them.
//!
//! It depends only on `stackbuild-common`.
//!
//! - `source`: git commits and local directories staged into a tree, with a content digest.
//! - `sdist`: a git commit or a directory as a reproducible source distribution.
//! - `patch`: strict find/replace and unified-diff patches applied to a staged tree.

mod patch;
mod sdist;
mod source;

pub use patch::{apply, PatchError, PatchSpec};
pub use sdist::{git_sdist, path_sdist, SdistMemo};
pub use source::{digest_path_excluding, resolve_git_rev, stage_git, stage_path_excluding, SourceError};
