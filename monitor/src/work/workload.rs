//! The `work` workload: a buffer touched by random or local accesses.

use std::hint::black_box;
use std::io;
use std::str::FromStr;

use memmap2::{Advice, MmapMut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Largest step of the locality walk in bytes, as in the original assignment's `work`
/// (`addr + rand() % 300`): consecutive accesses mostly stay on the same page.
const LOCAL_STEP: usize = 300;

/// How each access picks its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Uniformly random over the whole buffer: every access may touch a new page.
    Random,
    /// A forward walk in steps below 300 bytes that wraps around: strong locality.
    Locality,
}

#[derive(Debug, thiserror::Error)]
#[error("access pattern must be R (random) or L (locality), not {0:?}")]
pub struct ParsePatternError(String);

impl FromStr for Pattern {
    type Err = ParsePatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "R" | "r" => Ok(Pattern::Random),
            "L" | "l" => Ok(Pattern::Locality),
            _ => Err(ParsePatternError(s.to_owned())),
        }
    }
}

/// A buffer of `MiB` mebibytes whose pages are first touched by the accesses themselves.
pub struct Workload {
    buf: MmapMut,
    rng: StdRng,
    pos: usize,
    acc: u8,
}

impl Workload {
    /// Maps the buffer lazily (zeroed pages come from the kernel on first touch), so
    /// faults happen during the iterations and not here: two per page touched (the read
    /// maps the zero page, the write copies it), in base pages, since a transparent huge
    /// page (THP "always", Debian's default) would serve 512 of them at once, or not, as
    /// the mapping's alignment and the free memory fall.
    pub fn new(mib: usize) -> io::Result<Self> {
        let buf = MmapMut::map_anon(mib.max(1) << 20)?;
        // EINVAL: a kernel without THP, whose pages are all base pages anyway.
        match buf.advise(Advice::NoHugePage) {
            Err(e) if e.raw_os_error() != Some(libc::EINVAL) => return Err(e),
            _ => {}
        }
        Ok(Workload {
            buf,
            rng: StdRng::from_entropy(),
            pos: 0,
            acc: 0,
        })
    }

    /// Makes `accesses` read-modify-write accesses and returns a running checksum.
    pub fn iterate(&mut self, pattern: Pattern, accesses: u64) -> u8 {
        for _ in 0..accesses {
            let i = self.next_index(pattern);
            // Each access depends on the previous one and writes back, so neither the
            // load nor the store can be dropped or reordered away.
            self.acc = self.acc.wrapping_add(self.buf[i]).rotate_left(1) ^ 1;
            self.buf[i] = self.acc;
        }
        // The buffer counts as observed: every store above must really happen.
        black_box(&mut self.buf[..]);
        self.acc
    }

    /// The buffer's address range.
    pub fn range(&self) -> (usize, usize) {
        let start = self.buf.as_ptr() as usize;
        (start, start + self.buf.len())
    }

    /// How many of its pages the accesses touched: each took two minor faults, a read
    /// (the zero page mapped) then a write (a page of its own).
    pub fn touched_pages(&self) -> std::io::Result<u64> {
        super::filemap::resident_pages(self.buf.as_ptr(), self.buf.len())
    }

    fn next_index(&mut self, pattern: Pattern) -> usize {
        let len = self.buf.len();
        match pattern {
            Pattern::Random => self.rng.gen_range(0..len),
            Pattern::Locality => {
                self.pos = (self.pos + self.rng.gen_range(0..LOCAL_STEP)) % len;
                self.pos
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_parses_r_and_l_and_rejects_anything_else() {
        assert_eq!("R".parse::<Pattern>().unwrap(), Pattern::Random);
        assert_eq!("L".parse::<Pattern>().unwrap(), Pattern::Locality);
        assert!("X".parse::<Pattern>().is_err());
    }

    fn distinct_pages(pattern: Pattern) -> usize {
        let mut w = Workload::new(64).unwrap();
        let pages: std::collections::HashSet<usize> =
            (0..10_000).map(|_| w.next_index(pattern) >> 12).collect();
        pages.len()
    }

    #[test]
    fn random_accesses_spread_over_the_whole_buffer() {
        // 10,000 uniform draws over 16,384 pages hit about 7,540 distinct ones.
        assert!(distinct_pages(Pattern::Random) > 7_000);
    }

    #[test]
    fn local_accesses_touch_few_pages() {
        // 10,000 steps of at most 300 bytes span at most ~733 pages.
        assert!(distinct_pages(Pattern::Locality) < 800);
    }
}
