//! A small reproducible generator for the randomized tests: every failure
//! names its seed, and `PFPROF_SEED=<seed>` in the guest replays it.

use std::time::{SystemTime, UNIX_EPOCH};

pub struct Rng {
    state: u64,
    seed: u64,
}

impl Rng {
    /// Seeded from PFPROF_SEED if set, else from the clock.
    pub fn from_env_or_clock() -> Rng {
        let seed = std::env::var("PFPROF_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        Rng::new(seed)
    }

    pub fn new(seed: u64) -> Rng {
        // xorshift must not start at zero.
        Rng {
            state: seed | 1,
            seed,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// xorshift64.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    /// Uniform-enough in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}
