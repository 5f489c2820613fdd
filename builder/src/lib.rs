//! stackbuild: from a recipe to a reproducible, layered OCI image.
//!
//! The pipeline, one crate per stage (`builder/crates/`), dependencies only downward:
//!
//! - `stackbuild-common`: platforms, atomic writes, blobs and digests, capped input, diagnostics.
//! - `stackbuild-cache`: the content-addressed cache of artifacts and layer blobs.
//! - `stackbuild-recipe`: the recipe file, validated, with errors that point at file and line.
//! - `stackbuild-python`: resolve, lock, fetch and install wheels, compile bytecode.
//! - `stackbuild-image`: layers and their compressions, OCI layouts, registries, `--load`.
//! - `stackbuild-check`: what the stack asks of its host, and its conflicts.
//! - `stackbuild-audit`: a static `ldd` over the image's root filesystem.
//! - `stackbuild-k8s`: node affinity and DRA claims from an image's requirements.
//! - `stackbuild-source`: git and local sources, and patches.
//! - `stackbuild-init`: a first recipe from a project.
//!
//! This crate is the build that runs them in order ([`build`]) and the command line.

pub mod build;
