//! The stackbuild recipe: parsed, validated, with errors that point at file, line and column.
//!
//! - [`recipe`]: the recipe file, with errors that point at file, line and column.

pub mod recipe;
