//! A first stackbuild recipe from a project: requirements, pyproject, lock or Dockerfile.
//!
//! - [`init`]: a recipe from a project's requirements, pyproject, lock or Dockerfile.

pub mod init;
