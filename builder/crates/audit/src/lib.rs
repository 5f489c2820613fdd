//! A static ldd over an image root filesystem: unresolved, shadowed and stub libraries.
//!
//! It reads images through `stackbuild-image` and must not depend on `python`, `recipe` or `check`.
//!
//! - `audit`: a static `ldd` over an image's root filesystem (unresolved, shadowed and stub
//!   libraries).

mod audit;

pub use audit::{
    audit_image_cached, audit_layout, AuditError, AuditReport, FindingKind, LayerTap, POLICY_VERSION,
};
