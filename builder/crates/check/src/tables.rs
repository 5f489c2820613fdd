//! Tables generated from what an index publishes, not typed by hand.
//!
//! - [`torch`]: `contract/kb/torch.toml`'s rows from torch's, torchvision's, torchaudio's and
//!   triton's metadata.

pub mod torch;
