//! A first stackbuild recipe from a project: requirements, pyproject, lock or Dockerfile.
//!
//! It must not depend on `stackbuild-image`: it writes a recipe, not an image.
//!
//! - `init`: a recipe from a project's requirements, pyproject, lock or Dockerfile.

mod init;

pub use init::{plan, write_new, InitError, InitOptions, Plan};
