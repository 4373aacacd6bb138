//! The CPU time a sample may show: no more than its threads could have used in its
//! period, what a clock read late put above that carried into the next samples.

use std::time::Duration;

use shared_layout::abi::Sample;

/// Keeps a sample's CPU time within what its threads could have used: the kernel brings
/// the CPU time of another process's running thread up to date only at its ticks and
/// context switches, so a busy thread's clock, read each period, may lag by up to a
/// tick at one read and not at the next: that period would show more than its length
/// of CPU (up to ~1.2 of it at 50 ms), the period before as much less.
///
/// A sample's CPU time is capped at (threads that could have run) × (its period), and
/// what is above is carried into the next samples, which take it as far as their own
/// cap allows; the last sample takes whatever is left, so the total is unchanged. The
/// carry never exceeds what the lag can explain, `CARRY_PER_THREAD` per thread (or one
/// period per thread, when longer): beyond that the threads were more than counted
/// (threads or children that started and ended between two reads), and the CPU time is
/// shown in its own period, above the cap.
///
/// The first sample is the start mark (sampler.rs): an instant, not a period. What it
/// read was used before it (a command's start) and is carried as any excess is: the
/// consumer folds the mark into the first period ([`crate::rows::row::Timeline`]), whose
/// row must not show more than its threads could use.
pub(super) struct CpuCap {
    /// The previous sample's timestamp: `None` before the start mark.
    previous: Option<u64>,
    /// CPU time read but not shown yet, ns.
    carry: u64,
}

/// The most CPU time carried per thread, when the period is shorter: a thread's clock
/// lags by less than a kernel tick (1 to 10 ms), twice over for safety.
const CARRY_PER_THREAD: Duration = Duration::from_millis(20);

impl CpuCap {
    pub(super) fn new() -> CpuCap {
        CpuCap {
            previous: None,
            carry: 0,
        }
    }

    /// Caps `sample`'s CPU time, given how many `threads` could have run in its period.
    pub(super) fn apply(&mut self, sample: &mut Sample, threads: u64) {
        let length = match self.previous.replace(sample.time_ns) {
            Some(previous) => sample.time_ns.saturating_sub(previous),
            None => 0,
        };
        let threads = threads.max(1);
        let cap = threads.saturating_mul(length);
        let limit = threads.saturating_mul(length.max(CARRY_PER_THREAD.as_nanos() as u64));
        let cpu = sample.cpu_ns.saturating_add(self.carry);
        sample.cpu_ns = cpu.min(cap);
        self.carry = cpu - sample.cpu_ns;
        if self.carry > limit {
            sample.cpu_ns += self.carry - limit;
            self.carry = limit;
        }
    }

    /// The last sample: it takes whatever is left.
    pub(super) fn flush(&mut self, sample: &mut Sample) {
        sample.cpu_ns = sample
            .cpu_ns
            .saturating_add(std::mem::take(&mut self.carry));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Samples every `period` ms with these raw CPU deltas (ms), capped for
    /// `threads`, the last one flushed; their CPU use in CPUs (what a row's cpu_util
    /// shows: the samples are exactly a period apart) and CPU times.
    fn capped(period: u64, threads: u64, raw_ms: &[f64]) -> (Vec<f64>, Vec<u64>) {
        let mut cap = CpuCap::new();
        let mut mark = Sample {
            time_ns: 1_000 * MS,
            ..Sample::default()
        };
        cap.apply(&mut mark, threads);
        let (mut utils, mut cpu) = (Vec::new(), Vec::new());
        for (i, raw) in raw_ms.iter().enumerate() {
            let mut sample = Sample {
                time_ns: 1_000 * MS + (i as u64 + 1) * period * MS,
                cpu_ns: (raw * MS as f64) as u64,
                ..Sample::default()
            };
            if i + 1 == raw_ms.len() {
                cap.flush(&mut sample);
            } else {
                cap.apply(&mut sample, threads);
            }
            utils.push(sample.cpu_ns as f64 / (period * MS) as f64);
            cpu.push(sample.cpu_ns);
        }
        (utils, cpu)
    }

    #[test]
    fn what_the_start_mark_read_is_carried_into_the_first_period() {
        let mut cap = CpuCap::new();
        // A command that ran 2 ms before the mark, then a busy period of 50 ms.
        let mut mark = Sample {
            time_ns: 1_000 * MS,
            cpu_ns: 2 * MS,
            ..Sample::default()
        };
        cap.apply(&mut mark, 1);
        let mut first = Sample {
            time_ns: 1_050 * MS,
            cpu_ns: 50 * MS,
            ..Sample::default()
        };
        cap.apply(&mut first, 1);
        // Folded, as the consumer does: one CPU at most, the 2 ms carried on.
        assert_eq!((mark.cpu_ns + first.cpu_ns, cap.carry), (50 * MS, 2 * MS));
    }

    fn total_ns(raw_ms: &[f64]) -> u64 {
        raw_ms.iter().map(|raw| (raw * MS as f64) as u64).sum()
    }

    #[test]
    fn a_busy_thread_whose_clock_lags_shows_at_most_one_cpu_and_the_same_total() {
        // One thread busy all along, its clock read every 50 ms a tick (4 ms) late or on
        // time: the raw deltas swing around 50 ms, up to 1.19 of a period.
        let raw = [
            44.0, 54.0, 50.0, 59.5, 40.5, 52.0, 50.0, 48.0, 56.0, 46.0, 30.0,
        ];
        assert!(raw.iter().any(|&ms| ms / 50.0 > 1.1));
        let (utils, cpu) = capped(50, 1, &raw);
        let (last, full) = utils.split_last().unwrap();
        assert!(full.iter().all(|&u| u <= 1.0), "{utils:?}");
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
        // The clock was 6 ms late at the first read, as much on time at the last: the
        // carry, which the last sample takes.
        assert_eq!(*last, 36.0 / 50.0);
        assert_eq!(&cpu[1..10], &[50 * MS; 9]);
    }

    #[test]
    fn a_process_with_more_threads_may_use_as_many_cpus() {
        let raw = [100.0, 110.0, 90.0, 100.0];
        let (utils, cpu) = capped(50, 2, &raw);
        assert_eq!(utils, [2.0, 2.0, 2.0, 2.0]);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }

    #[test]
    fn cpu_time_beyond_what_a_lag_explains_is_shown_in_its_own_period() {
        // Counted as one thread, but three ran (threads that started and ended between
        // two reads): at most one period's cap is carried, the rest is shown where it
        // came, above the cap, never held back for the end of the profile.
        let raw = [150.0; 6];
        let (utils, cpu) = capped(50, 1, &raw);
        assert_eq!(utils, [2.0, 3.0, 3.0, 3.0, 3.0, 4.0]);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }

    #[test]
    fn the_carry_outlasts_a_period_shorter_than_a_tick() {
        // 2 ms periods, a thread busy from the third, its clock 4 ms late then on time.
        let raw = [0.0, 0.0, 0.0, 0.0, 6.0, 2.0, 2.0, 1.0];
        let (utils, cpu) = capped(2, 1, &raw);
        let (last, full) = utils.split_last().unwrap();
        assert!(full.iter().all(|&u| u <= 1.0), "{utils:?}");
        // Two periods' worth carried, then taken by the last sample.
        assert_eq!(*last, 2.5);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }
}
