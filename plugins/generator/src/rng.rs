//! A small, fast, seedable PRNG (SplitMix64). One generator per event,
//! seeded from `(seed, event number)`, makes every event reproducible on its
//! own — the property that lets a restart resume at any event number.

/// SplitMix64.
pub struct Rng(u64);

impl Rng {
    /// The generator for one event.
    pub fn for_event(seed: u64, event: u64) -> Rng {
        let mut rng = Rng(seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.next_u64();
        rng
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Advance as `n` draws would (what `write_string(n, …)` consumes).
    pub fn skip(&mut self, n: usize) {
        for _ in 0..n {
            self.next_u64();
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A lowercase string of `len` letters.
    pub fn string(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len);
        self.write_string(len, &mut s);
        s
    }

    /// Append `len` random lowercase letters to `out` (no allocation: the
    /// hot path of bid generation).
    pub fn write_string(&mut self, len: usize, out: &mut impl std::fmt::Write) {
        let mut buf = [0u8; 128];
        for chunk_start in (0..len).step_by(buf.len()) {
            let n = (len - chunk_start).min(buf.len());
            for b in &mut buf[..n] {
                *b = b'a' + self.below(26) as u8;
            }
            // Letters a–z are ASCII: always valid UTF-8.
            let _ = out.write_str(std::str::from_utf8(&buf[..n]).unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_and_event_give_same_values() {
        let a: Vec<u64> = (0..4).map(|_| Rng::for_event(7, 99).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Rng::for_event(7, 99).next_u64(),
            Rng::for_event(7, 100).next_u64()
        );
    }
}
