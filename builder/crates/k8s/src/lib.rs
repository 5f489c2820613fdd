//! Kubernetes objects from an image's requirements: node affinity and DRA resource claims.
//!
//! It reads images through `stackbuild-image` and must not depend on `python`, `recipe` or `check`
//! (its tests use `check` and `recipe` to make requirements).
//!
//! - `affinity`: Kubernetes node affinity from an image's requirements, over `stackhook labels`.
//! - `claim`: a Kubernetes DRA `ResourceClaimTemplate` whose CEL selectors are an image's
//!   requirements.

mod affinity;
mod claim;

pub use affinity::{
    for_image as affinity_for_image, image_request, node_affinity, Options as AffinityOptions,
};
pub use claim::{
    default_name, for_image as claim_for_image, for_request, forward_compat_products, ClaimError,
    Options as ClaimOptions, DOMAIN,
};
