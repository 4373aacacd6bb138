//! The period tables on their way from the producer to the consumer: in order, bounded,
//! and what the consumer must know of how they were made.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use super::table::PeriodTable;

/// The most tables waiting for the consumer: beyond it the two oldest are merged into
/// one (their counts kept, their periods joined), so a consumer that falls behind costs
/// bounded memory. 1024 periods of 50 ms are 51 s; the consumer takes them every
/// `--interval`.
pub const CAPACITY: usize = 1024;

/// Whether faults are attributed to mappings, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attribution {
    /// Every major fault is recorded, and one minor fault in every `minor_sampling`: the
    /// ratio the module and the procfs backend call `minor_sampling` (`--minor-sampling`).
    On {
        minor_sampling: u64,
        /// Faults the kernel takes on the process's behalf (copying to or from its memory
        /// in a system call) are recorded too; not where only user-space events are
        /// allowed (`kernel.perf_event_paranoid` 2).
        kernel_faults: bool,
    },
    /// Not attributed: why, and what would allow it, as the summary says it.
    Off(String),
}

/// Where a feed's tables come from when nobody pushes them: the consumer pulls them as
/// it takes its samples (the module wrote a period's faults before its sample).
pub trait TableSource: Send {
    /// The tables of every period ending at `end_ns` or before not given yet.
    fn tables_until(&mut self, end_ns: u64) -> Vec<PeriodTable>;
}

/// Period tables from the producer, taken by the consumer as their samples come.
pub struct Feed {
    attribution: Attribution,
    queue: Mutex<VecDeque<PeriodTable>>,
    source: Option<Mutex<Box<dyn TableSource>>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("attribution", &self.attribution)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl Feed {
    pub fn new(attribution: Attribution) -> Feed {
        Feed {
            attribution,
            queue: Mutex::new(VecDeque::new()),
            source: None,
        }
    }

    /// A feed whose tables `source` makes when the consumer asks for them.
    pub fn pulling(attribution: Attribution, source: Box<dyn TableSource>) -> Feed {
        Feed {
            source: Some(Mutex::new(source)),
            ..Feed::new(attribution)
        }
    }

    pub fn attribution(&self) -> &Attribution {
        &self.attribution
    }

    /// The producer's table of the period ending at `table.end_ns`, given before its
    /// sample, so the consumer finds it with the sample.
    pub fn push(&self, table: PeriodTable) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.push_back(table);
        if queue.len() > CAPACITY {
            if let (Some(mut oldest), Some(next)) = (queue.pop_front(), queue.pop_front()) {
                oldest.merge(next);
                queue.push_front(oldest);
            }
        }
    }

    /// Appends to `out` every table of a period ending at `end_ns` or before: a sample's
    /// own, and those of samples merged into it or lost.
    pub fn take_until(&self, end_ns: u64, out: &mut Vec<PeriodTable>) {
        if let Some(source) = &self.source {
            let tables =
                (source.lock().unwrap_or_else(PoisonError::into_inner)).tables_until(end_ns);
            for table in tables {
                self.push(table);
            }
        }
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        while queue.front().is_some_and(|t| t.end_ns <= end_ns) {
            out.extend(queue.pop_front());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::ProcessFaults;

    fn table(end_ns: u64, minor: u64) -> PeriodTable {
        PeriodTable {
            end_ns,
            processes: vec![ProcessFaults {
                pid: 1,
                comm: "a".into(),
                minor,
                major: 0,
            }],
            ..PeriodTable::default()
        }
    }

    #[test]
    fn the_consumer_takes_the_tables_up_to_its_sample_and_no_further() {
        let feed = Feed::new(Attribution::Off("test".into()));
        for end in [10, 20, 30] {
            feed.push(table(end, 1));
        }
        let mut out = Vec::new();
        feed.take_until(25, &mut out);
        assert_eq!(out.iter().map(|t| t.end_ns).collect::<Vec<_>>(), [10, 20]);
        feed.take_until(25, &mut out);
        assert_eq!(out.len(), 2);
        feed.take_until(30, &mut out);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_full_feed_merges_its_oldest_tables_and_keeps_every_count() {
        let feed = Feed::new(Attribution::Off("test".into()));
        let n = CAPACITY as u64 + 5;
        for end in 1..=n {
            feed.push(table(end, 1));
        }
        let mut out = Vec::new();
        feed.take_until(u64::MAX, &mut out);
        assert_eq!(out.len(), CAPACITY);
        let minor: u64 = out.iter().flat_map(|t| &t.processes).map(|p| p.minor).sum();
        assert_eq!(minor, n);
        assert!(out.windows(2).all(|w| w[0].end_ns < w[1].end_ns));
    }
}
