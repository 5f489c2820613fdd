//! A seeded generator, so that a failing run of random choices can be replayed from the seed it
//! printed, and test data that does not compress is the same on every run.

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators",
/// <https://arxiv.org/abs/1402.6246>).
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0, a fixed point of xorshift, is replaced by a constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// A seed from `$name` when set (to replay a run), else from the clock.
    pub fn seed_from_env(name: &str) -> u64 {
        std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            // Truncation is fine: any 64 bits of the clock make a seed.
            #[allow(clippy::cast_possible_truncation)]
            let nanos = now.as_nanos() as u64;
            nanos ^ u64::from(std::process::id())
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo).max(1)
    }

    /// `n` pseudo-random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// `len` deterministic bytes from `seed` that do not compress.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    XorShift::new(seed).bytes(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_bytes() {
        assert_eq!(noise(100, 7), noise(100, 7));
        assert_ne!(noise(100, 7), noise(100, 8));
        assert_eq!(noise(13, 0).len(), 13);
    }

    #[test]
    fn range_stays_in_bounds() {
        let mut rng = XorShift::new(1);
        assert!((0..1000).map(|_| rng.range(5, 9)).all(|n| (5..9).contains(&n)));
    }
}
