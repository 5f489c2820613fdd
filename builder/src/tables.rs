//! Tables generated from what an index publishes, not typed by hand.
//!
//! - [`index`]: a package index read through PEP 691 pages and wheel `METADATA` only (PEP 658
//!   files, else range requests into the wheel's zip), live or recorded.
//! - [`torch`]: `contract/kb/torch.toml`'s rows from torch's, torchvision's, torchaudio's and
//!   triton's metadata.

pub mod index;
pub mod torch;
