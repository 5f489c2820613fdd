//! A static ldd over an image root filesystem: unresolved, shadowed and stub libraries.
//!
//! - [`audit`]: a static `ldd` over an image's root filesystem (unresolved, shadowed and stub libraries).

pub mod audit;
