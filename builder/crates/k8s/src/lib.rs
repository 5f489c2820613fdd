//! Kubernetes objects from an image requirements: node affinity and DRA resource claims.
//!
//! - [`affinity`]: Kubernetes node affinity from an image's requirements, over `stackhook labels`.
//! - [`claim`]: a Kubernetes DRA `ResourceClaimTemplate` whose CEL selectors are an image's requirements.

pub mod affinity;
pub mod claim;
