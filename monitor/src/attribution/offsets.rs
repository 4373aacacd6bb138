//! Where in a file its faults were: a histogram of the faulting pages' file offsets, one
//! per file, bounded whatever the file's size.
//!
//! [`BUCKETS`] buckets of one width, a power of two from a page ([`MIN_SHIFT`]) up: the
//! histogram covers `BUCKETS × width` bytes from offset 0, and an offset beyond it (a
//! larger file, or one that grew) doubles the width, each pair of buckets summed into
//! one, until it fits. Every fault is counted in exactly one bucket and widening only
//! sums, so each bucket's count is exact for its range; what is approximate is the range,
//! a bucket's width (1/64 of the largest offset seen, rounded up to a power of two). Two
//! histograms of one file always merge exactly: the finer one's buckets each fall inside
//! one of the wider's. 64 buckets of 16 bytes: about 1 KiB a file.

use super::faults::Faults;

/// Buckets in a histogram.
pub const BUCKETS: usize = 64;
/// The narrowest bucket: a page (4 KiB).
pub const MIN_SHIFT: u32 = 12;

/// A file's faults by offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetHistogram {
    /// Each bucket is `1 << shift` bytes wide.
    shift: u32,
    buckets: [Faults; BUCKETS],
}

impl Default for OffsetHistogram {
    fn default() -> OffsetHistogram {
        OffsetHistogram {
            shift: MIN_SHIFT,
            buckets: [Faults::default(); BUCKETS],
        }
    }
}

/// A run of buckets with faults: the offsets `start..end` and the faults taken there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRegion {
    pub start: u64,
    pub end: u64,
    pub faults: Faults,
}

impl OffsetHistogram {
    /// Counts `faults` at file offset `offset`.
    pub fn add(&mut self, offset: u64, faults: Faults) {
        // 64 buckets of 2^58 bytes cover every u64: the loop ends there at the latest.
        while offset >> self.shift >= BUCKETS as u64 {
            self.widen();
        }
        self.buckets[(offset >> self.shift) as usize] += faults;
    }

    /// Adds another histogram of the same file.
    pub fn merge(&mut self, other: &OffsetHistogram) {
        for (start, _, faults) in other.buckets() {
            // Widened to at least `other`'s width first: each of its buckets then falls
            // inside one of ours.
            while self.shift < other.shift {
                self.widen();
            }
            self.add(start, faults);
        }
    }

    /// Each bucket's width in bytes.
    pub fn width(&self) -> u64 {
        1 << self.shift
    }

    /// Every faults counted, in all buckets.
    pub fn total(&self) -> Faults {
        let mut total = Faults::default();
        for faults in &self.buckets {
            total += *faults;
        }
        total
    }

    /// The buckets with faults: their offsets `start..end` and faults, in offset order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, Faults)> + '_ {
        let width = self.width();
        (self.buckets.iter().enumerate())
            .filter(|(_, f)| !f.is_empty())
            .map(move |(i, f)| {
                let start = i as u64 * width;
                // The last bucket of the widest ends at 2^64: its end saturates.
                (start, start.saturating_add(width), *f)
            })
    }

    /// The `k` regions where `count` took most, most first: each a run of adjacent
    /// buckets in which it took some, with its exact faults.
    pub fn hottest(&self, k: usize, count: impl Fn(&Faults) -> u64) -> Vec<FileRegion> {
        let width = self.width();
        let mut regions: Vec<FileRegion> = Vec::new();
        for (i, faults) in self.buckets.iter().enumerate() {
            if count(faults) == 0 {
                continue;
            }
            let start = i as u64 * width;
            let end = start.saturating_add(width);
            match regions.last_mut() {
                Some(run) if run.end == start => {
                    run.end = end;
                    run.faults += *faults;
                }
                _ => regions.push(FileRegion {
                    start,
                    end,
                    faults: *faults,
                }),
            }
        }
        regions.sort_by_key(|r| (std::cmp::Reverse(count(&r.faults)), r.start));
        regions.truncate(k);
        regions
    }

    /// Doubles the buckets' width: each pair summed into one, the upper half emptied.
    fn widen(&mut self) {
        for i in 0..BUCKETS / 2 {
            let mut pair = self.buckets[2 * i];
            pair += self.buckets[2 * i + 1];
            self.buckets[i] = pair;
        }
        self.buckets[BUCKETS / 2..].fill(Faults::default());
        self.shift += 1;
    }
}

/// Offsets `start..end` as a person reads a region, exactly, in the largest unit both
/// are whole numbers of: `0-4 MiB`, `12-16 MiB`, `2752-2816 KiB`.
pub fn human_span(start: u64, end: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
    let whole = |shift: u32| start.trailing_zeros().min(end.trailing_zeros()) >= shift;
    match UNITS
        .iter()
        .find(|(shift, _)| whole(*shift) && end >> shift > 0)
    {
        Some((shift, unit)) => format!("{}-{} {unit}", start >> shift, end >> shift),
        None => format!("{start}-{end}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    #[test]
    fn a_small_files_buckets_are_pages_and_their_edges_exact() {
        let mut h = OffsetHistogram::default();
        h.add(0, Faults::major(1));
        h.add(PAGE - 1, Faults::major(1));
        h.add(PAGE, Faults::major(1));
        h.add(63 * PAGE + 5, Faults::major(1));
        assert_eq!(h.width(), PAGE);
        let buckets: Vec<(u64, u64, u64)> = h.buckets().map(|(s, e, f)| (s, e, f.major)).collect();
        assert_eq!(
            buckets,
            [(0, PAGE, 2), (PAGE, 2 * PAGE, 1), (63 * PAGE, 64 * PAGE, 1)]
        );
    }

    #[test]
    fn a_file_that_grows_widens_its_buckets_and_keeps_every_count() {
        let mut h = OffsetHistogram::default();
        for page in 0..64 {
            h.add(page * PAGE, Faults::major(1));
        }
        // The first offset past 64 pages: buckets of two pages.
        h.add(64 * PAGE, Faults::major(10));
        assert_eq!(h.width(), 2 * PAGE);
        assert_eq!(h.total().major, 74);
        let first: Vec<(u64, u64)> = h.buckets().take(2).map(|(s, _, f)| (s, f.major)).collect();
        assert_eq!(first, [(0, 2), (2 * PAGE, 2)]);
        assert_eq!(
            h.buckets().last().map(|(s, _, f)| (s, f.major)),
            Some((64 * PAGE, 10))
        );
        // At 1 TiB, just past 64 buckets of 16 GiB: buckets of 32 GiB, still 74 + 1.
        h.add(1 << 40, Faults::major(1));
        assert_eq!(h.width(), 1 << 35);
        assert_eq!(h.total().major, 75);
        assert_eq!(h.buckets().next().map(|(_, _, f)| f.major), Some(74));
        // The largest offset there is fits too.
        h.add(u64::MAX, Faults::major(1));
        assert_eq!(h.width(), 1 << 58);
        assert_eq!(h.total().major, 76);
        let last = h.hottest(2, |f| f.major)[1];
        assert_eq!((last.start, last.end), (63 << 58, u64::MAX));
    }

    #[test]
    fn histograms_of_one_file_merge_exactly_whatever_their_widths() {
        let mut fine = OffsetHistogram::default();
        fine.add(PAGE, Faults::major(3));
        let mut wide = OffsetHistogram::default();
        wide.add(100 << 20, Faults::major(5));
        wide.add(0, Faults::major(1));
        let mut a = fine.clone();
        a.merge(&wide);
        let mut b = wide.clone();
        b.merge(&fine);
        assert_eq!(a, b);
        assert_eq!(a.total().major, 9);
        assert_eq!(a.buckets().next().map(|(_, _, f)| f.major), Some(4));
    }

    #[test]
    fn the_hottest_regions_are_runs_of_buckets_with_their_exact_counts() {
        let mut h = OffsetHistogram::default();
        // A 16 MiB file: 0-4 MiB and 12-14 MiB read, a page each, and one minor fault
        // between them.
        let mib = 1u64 << 20;
        for page in (0..4 * mib).step_by(PAGE as usize) {
            h.add(page, Faults::major(1));
        }
        for page in (12 * mib..14 * mib).step_by(PAGE as usize) {
            h.add(page, Faults::major(3));
        }
        h.add(
            8 * mib,
            Faults {
                major: 0,
                minor_samples: 1,
            },
        );
        h.add(16 * mib - 1, Faults::major(0));
        assert_eq!(h.width(), 256 << 10);
        let hot = h.hottest(5, |f| f.major);
        let seen: Vec<(u64, u64, u64)> = hot
            .iter()
            .map(|r| (r.start, r.end, r.faults.major))
            .collect();
        assert_eq!(seen, [(12 * mib, 14 * mib, 1536), (0, 4 * mib, 1024)]);
        assert_eq!(h.hottest(1, |f| f.minor_samples)[0].start, 8 * mib);
    }

    #[test]
    fn offsets_read_in_binary_units() {
        assert_eq!(human_span(0, 4 << 20), "0-4 MiB");
        assert_eq!(human_span(12 << 20, 16 << 20), "12-16 MiB");
        assert_eq!(human_span(512 << 10, 1 << 20), "512-1024 KiB");
        assert_eq!(human_span(2752 << 10, 2816 << 10), "2752-2816 KiB");
        assert_eq!(human_span(0, 100), "0-100");
    }
}
