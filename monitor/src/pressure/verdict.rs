//! The thrashing verdict: a rule over the rows, with hysteresis, that says when the
//! profiled processes' system (or their cgroup) thrashed. Pure: rows in, bands out.
//!
//! Memory is *under pressure* in a period when it was fully stalled over at least
//! [`Rule::full_stall`] of it (PSI `full`: every non-idle task waiting on memory at once;
//! the selected cgroup's when there is one, else the system's), or when pages came back at
//! [`Rule::fault_rate`] a second or more (the profiled processes' major faults or the
//! system's refaults, the more of the two: a swap-in is both). A period *thrashes* when,
//! over the periods under pressure back to back up to it (the last [`Rule::onset`] of
//! them), memory was fully stalled for at least [`Rule::full_stall`] of the time *and*
//! pages came back at [`Rule::fault_rate`] a second: judged over that window, not the
//! period alone, because stall and faults take turns (reclaim stalls, then the pages
//! come back; on a slow kernel each for a few hundred ms); a calm period, neither, ends
//! the pressure only once calm has lasted [`Rule::onset`]. Thrashing *begins* with
//! thrashing periods back to back for at least [`Rule::onset`], dated from the start of
//! the stall it came in (the first stalled period of that pressure, or the first after a
//! stall-free [`Rule::quiet`] of it); it *ends* once periods that do not thrash have run
//! for [`Rule::quiet`], dated to the end of the last period that thrashed and was stalled
//! by itself (the faults that go on after the stall stopped thrash by the window alone).
//! docs/monitor.md, "The thrashing verdict", gives the thresholds and the measurements they
//! come from.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::rows::row::Row;

/// When periods thrash, and how many make thrashing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// The least share of a period with memory fully stalled.
    pub full_stall: f64,
    /// The least major-fault (the profiled processes') or refault (the system's) rate, /s.
    pub fault_rate: f64,
    /// How long thrashing periods must run, back to back, for thrashing to begin.
    pub onset: Duration,
    /// How long periods that do not thrash must run for thrashing to end.
    pub quiet: Duration,
}

/// The rule the monitor applies (docs/monitor.md, "The thrashing verdict").
pub const RULE: Rule = Rule {
    full_stall: 0.10,
    fault_rate: 50.0,
    onset: Duration::from_millis(500),
    quiet: Duration::from_millis(1000),
};

/// One stretch of thrashing, as the summary, the JSON Lines event and the plot show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Band {
    /// On the rows' time axis (their `time_ms`): ms from the profile's start.
    pub start_ms: u64,
    pub end_ms: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub start_mono_ns: u64,
    pub end_mono_ns: u64,
    /// Still thrashing when the profile ended: `end` is the end of the last period.
    pub ongoing: bool,
    /// Memory fully and partly stalled, % of the band.
    pub stall_full_pct: f64,
    pub stall_some_pct: f64,
    /// The profiled processes' major faults a second.
    pub major_rate: f64,
    /// The system's refaults (anonymous and file), pages swapped in and out, a second.
    pub refault_rate: Option<f64>,
    pub pswpin_rate: Option<f64>,
    pub pswpout_rate: Option<f64>,
    /// Major faults in the band: the profiled processes', the system's, and the share
    /// of the system's that were theirs (at most 1: both are counted over the same rows,
    /// but the system's are apportioned, theirs exact).
    pub major_faults: u64,
    pub system_major_faults: Option<u64>,
    pub target_share: Option<f64>,
    /// The profiled processes' memory at the onset (bytes): at the end of the period
    /// before the first one that thrashed.
    pub onset_rss_anon: u64,
    pub onset_rss_file: u64,
    pub onset_rss_shmem: u64,
    pub onset_swap: u64,
    /// The mapping that took most of the band's attributed major faults, when faults
    /// are attributed (the consumer names it: the verdict sees rows only).
    pub major_mapping: Option<BandMapping>,
}

/// The mapping that took most of a band's major faults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BandMapping {
    /// As the summary names it ([`crate::attribution::Mapping`]'s `Display`).
    pub name: String,
    pub kind: crate::attribution::MappingKind,
    /// Its major faults in the band, and their share of those attributed in it.
    pub major_faults: u64,
    pub share: f64,
}

/// Where a band may still be reported from: the start of the earliest band the rows so
/// far could still make (`start_ns`, `CLOCK_MONOTONIC`), and, once thrashing has begun,
/// the end of the time certain to be in it (`settled_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenBand {
    pub start_ns: u64,
    pub settled_ns: Option<u64>,
}

/// Sums over rows.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    period_ns: u64,
    full_us: u64,
    some_us: u64,
    major: u64,
    refaults: Option<u64>,
    pswpin: Option<u64>,
    pswpout: Option<u64>,
    pgmajfault: Option<u64>,
}

/// Adds an optional count: missing in any row, missing in the sum.
fn add_opt(sum: Option<u64>, row: Option<u64>, first: bool) -> Option<u64> {
    match (first, sum, row) {
        (true, _, row) => row,
        (false, Some(s), Some(r)) => Some(s.saturating_add(r)),
        _ => None,
    }
}

impl Sums {
    fn add(&mut self, row: &Row) {
        let first = self.period_ns == 0;
        let (some, full) = judged_stall(row).unwrap_or_default();
        let p = &row.pressure;
        self.period_ns = self.period_ns.saturating_add(row.period_ns);
        self.full_us = self.full_us.saturating_add(full);
        self.some_us = self.some_us.saturating_add(some);
        self.major = self.major.saturating_add(row.major);
        self.refaults = add_opt(self.refaults, refaults(row), first);
        self.pswpin = add_opt(self.pswpin, p.pswpin, first);
        self.pswpout = add_opt(self.pswpout, p.pswpout, first);
        self.pgmajfault = add_opt(self.pgmajfault, p.pgmajfault, first);
    }

    fn merge(&mut self, later: &Sums) {
        if later.period_ns == 0 {
            return;
        }
        if self.period_ns == 0 {
            *self = *later;
            return;
        }
        self.period_ns = self.period_ns.saturating_add(later.period_ns);
        self.full_us = self.full_us.saturating_add(later.full_us);
        self.some_us = self.some_us.saturating_add(later.some_us);
        self.major = self.major.saturating_add(later.major);
        let both = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_add(b?));
        self.refaults = both(self.refaults, later.refaults);
        self.pswpin = both(self.pswpin, later.pswpin);
        self.pswpout = both(self.pswpout, later.pswpout);
        self.pgmajfault = both(self.pgmajfault, later.pgmajfault);
    }
}

/// The stall a row is judged by, µs (`some`, `full`): its cgroup's when it has one.
pub(crate) fn judged_stall(row: &Row) -> Option<(u64, u64)> {
    let p = &row.pressure;
    match (p.cgroup_stall_some_us, p.cgroup_stall_full_us) {
        (Some(some), Some(full)) => Some((some, full)),
        _ => Some((p.stall_some_us?, p.stall_full_us?)),
    }
}

/// The system's refaults in a row, when the kernel counts both kinds.
fn refaults(row: &Row) -> Option<u64> {
    let p = &row.pressure;
    Some(
        p.workingset_refault_anon?
            .saturating_add(p.workingset_refault_file?),
    )
}

/// The stall thrashing is dated from, and the periods under pressure since.
#[derive(Clone, Copy, Debug)]
struct Stretch {
    start_ms: u64,
    start_mono_ns: u64,
    /// The row before its first: the memory at its start.
    onset: Row,
    sums: Sums,
}

impl Stretch {
    /// A stretch beginning with `row`, after `previous`.
    fn starting(row: &Row, previous: Option<&Row>) -> Stretch {
        let (start_ms, onset) = match previous {
            Some(p) => (p.time_ms, *p),
            None => (row.time_ms.saturating_sub(row.period_ns / 1_000_000), *row),
        };
        Stretch {
            start_ms,
            start_mono_ns: row.mono_ns.saturating_sub(row.period_ns),
            onset,
            sums: Sums::default(),
        }
    }
}

/// A run of thrashing periods, long enough yet or not.
#[derive(Clone, Copy, Debug)]
struct Run {
    start_ms: u64,
    start_mono_ns: u64,
    /// The memory at its start.
    onset: Row,
    /// Over its periods up to the last that thrashed.
    thrashing: Sums,
    end_ms: u64,
    end_mono_ns: u64,
    /// Over the periods since the last that thrashed.
    quiet: Sums,
    /// It covered `onset`: thrashing began.
    begun: bool,
}

/// Applies a [`Rule`] to rows as they come.
#[derive(Debug)]
pub struct Verdict {
    rule: Rule,
    /// The stall of the current pressure, and the latest periods under pressure
    /// covering at most `rule.onset` beyond the last one: their lengths, full stall (µs)
    /// and faults.
    stretch: Option<Stretch>,
    recent: VecDeque<(u64, u64, u64)>,
    /// How long the periods since the last under pressure have run, ns: pressure ends
    /// once they cover `rule.onset`.
    calm_ns: u64,
    /// The end of the latest period stalled by itself (ms, ns): where thrashing ends.
    last_stalled: Option<(u64, u64)>,
    previous: Option<Row>,
    run: Option<Run>,
    bands: Vec<Band>,
    /// Some row could be judged: it had memory stall.
    judged: bool,
}

impl Verdict {
    pub fn new(rule: Rule) -> Verdict {
        Verdict {
            rule,
            stretch: None,
            recent: VecDeque::new(),
            calm_ns: 0,
            last_stalled: None,
            previous: None,
            run: None,
            bands: Vec::new(),
            judged: false,
        }
    }

    /// Whether `row` is under pressure (its stretch extended) and thrashes, the rows
    /// before it having been seen.
    fn thrashes(&mut self, row: &Row) -> bool {
        let full = judged_stall(row).map_or(0, |(_, full)| full);
        // A fault the profiled processes took and the system counted as a refault is
        // one fault: the more of the two.
        let faults = row.major.max(refaults(row).unwrap_or(0));
        let stalled =
            |full_us: u64, ns: u64| full_us as f64 * 1e3 >= self.rule.full_stall * ns as f64;
        let paging = |faults: u64, ns: u64| faults as f64 * 1e9 >= self.rule.fault_rate * ns as f64;
        let is_stalled = stalled(full, row.period_ns);
        let window = self.rule.onset.as_nanos() as u64;
        // A calm period (neither stalled nor paging) ends the pressure only when calm
        // lasts the onset window: on a slow kernel pages come back at a few a period,
        // and periods without one come between the others (KASAN: 58 a second).
        if is_stalled || paging(faults, row.period_ns) {
            self.calm_ns = 0;
        } else {
            self.calm_ns += row.period_ns;
            if self.stretch.is_none() || self.calm_ns >= window {
                self.stretch = None;
                self.recent.clear();
                return false;
            }
        }
        if is_stalled {
            // The stall that thrashing is dated from: the first stalled period of the
            // pressure, or after a stall-free second of it (pages coming back without
            // stall before it were no thrashing and date nothing).
            let start = row.mono_ns.saturating_sub(row.period_ns);
            let quiet = self.rule.quiet.as_nanos() as u64;
            let fresh = self.stretch.is_none()
                || self
                    .last_stalled
                    .is_none_or(|(_, end)| start.saturating_sub(end) >= quiet);
            if fresh {
                self.stretch = Some(Stretch::starting(row, self.previous.as_ref()));
            }
            self.last_stalled = Some((row.time_ms, row.mono_ns));
        }
        if let Some(stretch) = self.stretch.as_mut() {
            stretch.sums.add(row);
        }
        self.recent.push_back((row.period_ns, full, faults));
        let mut covered: u64 = self.recent.iter().map(|r| r.0).sum();
        while let Some(&(oldest, _, _)) = self.recent.front() {
            if covered.saturating_sub(oldest) < window {
                break;
            }
            covered -= oldest;
            self.recent.pop_front();
        }
        let full: u64 = self.recent.iter().map(|r| r.1).sum();
        let faults: u64 = self.recent.iter().map(|r| r.2).sum();
        stalled(full, covered) && paging(faults, covered)
    }

    /// Takes the next row; the band it ends, if it ends one.
    pub fn feed(&mut self, row: &Row) -> Option<Band> {
        self.judged |= judged_stall(row).is_some();
        let thrashes = self.thrashes(row);
        let onset_ns = self.rule.onset.as_nanos() as u64;
        let quiet_ns = self.rule.quiet.as_nanos() as u64;
        let mut ended = None;
        // A period thrashes by its window: the faults after the stall stopped would carry
        // thrashing on for up to the window; it ends with the last stalled period.
        let (end_ms, end_mono_ns) = self.last_stalled.unwrap_or((row.time_ms, row.mono_ns));
        match (&mut self.run, thrashes, self.stretch) {
            // Thrashing is dated from the start of the stall it came in.
            (None, true, Some(stretch)) => {
                self.run = Some(Run {
                    start_ms: stretch.start_ms,
                    start_mono_ns: stretch.start_mono_ns,
                    onset: stretch.onset,
                    thrashing: stretch.sums,
                    end_ms,
                    end_mono_ns,
                    quiet: Sums::default(),
                    begun: stretch.sums.period_ns >= onset_ns,
                });
            }
            (None, _, _) => {}
            // Past the last stalled period: the band's rates stop there too, unless a
            // stalled one follows.
            (Some(run), true, _) if end_mono_ns != row.mono_ns => run.quiet.add(row),
            (Some(run), true, _) => {
                let quiet = std::mem::take(&mut run.quiet);
                run.thrashing.merge(&quiet);
                run.thrashing.add(row);
                run.end_ms = end_ms;
                run.end_mono_ns = end_mono_ns;
                run.begun |= run.thrashing.period_ns >= onset_ns;
            }
            (Some(run), false, _) if !run.begun => self.run = None,
            (Some(run), false, _) => {
                run.quiet.add(row);
                if run.quiet.period_ns >= quiet_ns {
                    ended = self.run.take().map(|run| band(&run, false));
                    // What thrashes next is dated afresh, not from this band's stall.
                    self.stretch = None;
                }
            }
        }
        self.previous = Some(*row);
        self.bands.extend(ended.clone());
        ended
    }

    /// The profile ended: thrashing still going on ends with it.
    pub fn finish(&mut self) -> Option<Band> {
        let run = self.run.take().filter(|run| run.begun)?;
        let band = band(&run, true);
        self.bands.push(band.clone());
        Some(band)
    }

    /// Every band so far.
    pub fn bands(&self) -> &[Band] {
        &self.bands
    }

    /// Where a band may still come from, after the rows fed so far; `None`: no band
    /// the next rows make can begin before them.
    pub fn open_band(&self) -> Option<OpenBand> {
        let run = self.run.as_ref();
        let start_ns = [
            run.map(|r| r.start_mono_ns),
            self.stretch.map(|s| s.start_mono_ns),
        ]
        .into_iter()
        .flatten()
        .min()?;
        Some(OpenBand {
            start_ns,
            settled_ns: run.filter(|r| r.begun).map(|r| r.end_mono_ns),
        })
    }

    /// Thrashing has begun and not ended yet.
    pub fn thrashing_now(&self) -> bool {
        self.run.as_ref().is_some_and(|run| run.begun)
    }

    /// Whether any row had memory stall to judge by.
    pub fn judged(&self) -> bool {
        self.judged
    }
}

fn band(run: &Run, ongoing: bool) -> Band {
    let s = &run.thrashing;
    let secs = s.period_ns as f64 / 1e9;
    let rate = |count: Option<u64>| count.map(|c| c as f64 / secs);
    let pct = |us: u64| us as f64 * 1e3 / s.period_ns as f64 * 100.0;
    Band {
        start_ms: run.start_ms,
        end_ms: run.end_ms,
        start_mono_ns: run.start_mono_ns,
        end_mono_ns: run.end_mono_ns,
        ongoing,
        stall_full_pct: pct(s.full_us),
        stall_some_pct: pct(s.some_us),
        major_rate: s.major as f64 / secs,
        refault_rate: rate(s.refaults),
        pswpin_rate: rate(s.pswpin),
        pswpout_rate: rate(s.pswpout),
        major_faults: s.major,
        system_major_faults: s.pgmajfault,
        target_share: s
            .pgmajfault
            .map(|system| (s.major as f64 / system.max(1) as f64).min(1.0)),
        onset_rss_anon: run.onset.rss_anon,
        onset_rss_file: run.onset.rss_file,
        onset_rss_shmem: run.onset.rss_shmem,
        onset_swap: run.onset.swap,
        major_mapping: None,
    }
}

/// A band with every field set (one rate unknown): for the tests of what shows bands.
#[cfg(test)]
pub(crate) fn test_band() -> Band {
    Band {
        start_ms: 2150,
        end_ms: 6200,
        start_mono_ns: 7_150_000_000,
        end_mono_ns: 11_200_000_000,
        ongoing: false,
        stall_full_pct: 52.4,
        stall_some_pct: 53.0,
        major_rate: 3000.0,
        refault_rate: Some(2990.0),
        pswpin_rate: Some(2995.0),
        pswpout_rate: None,
        major_faults: 12150,
        system_major_faults: Some(12200),
        target_share: Some(0.996),
        onset_rss_anon: 64 << 20,
        onset_rss_file: 1 << 20,
        onset_rss_shmem: 0,
        onset_swap: 0,
        major_mapping: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::row::Pressure;

    const PERIOD_MS: u64 = 50;

    /// A row of the 50 ms period ending at `i` periods, with this full stall (share of the
    /// period) and these major faults; some stall twice the full one, refaults none.
    fn row(i: u64, full_share: f64, major: u64) -> Row {
        let full_us = (full_share * PERIOD_MS as f64 * 1e3) as u64;
        Row {
            time_ms: i * PERIOD_MS,
            mono_ns: 1_000_000_000 + i * PERIOD_MS * 1_000_000,
            minor: 0,
            major,
            cpu_ns: 0,
            cpu_util: 0.0,
            rss_anon: i << 20,
            rss_file: 1 << 20,
            rss_shmem: 0,
            swap: i << 12,
            pressure: Pressure {
                stall_some_us: Some(full_us * 2),
                stall_full_us: Some(full_us),
                workingset_refault_anon: Some(0),
                workingset_refault_file: Some(0),
                pswpin: Some(major),
                pswpout: Some(major),
                pgmajfault: Some(major * 2),
                ..Pressure::default()
            },
            period_ns: PERIOD_MS * 1_000_000,
        }
    }

    /// Feeds rows 1.. made by `make(i)`, returning every band and the profile's last.
    fn judge(count: u64, make: impl Fn(u64) -> Row) -> (Vec<Band>, Option<Band>) {
        let mut verdict = Verdict::new(RULE);
        let closed: Vec<Band> = (1..=count).filter_map(|i| verdict.feed(&make(i))).collect();
        let last = verdict.finish();
        assert_eq!(
            verdict.bands().len(),
            closed.len() + usize::from(last.is_some())
        );
        (closed, last)
    }

    /// Quiet until 2 s, thrashing (50% full stall, 20 major faults a period) until 6 s,
    /// quiet again until 9 s.
    fn phases(i: u64) -> Row {
        match i * PERIOD_MS {
            0..=2000 => row(i, 0.0, 0),
            2001..=6000 => row(i, 0.5, 20),
            _ => row(i, 0.0, 0),
        }
    }

    #[test]
    fn thrashing_is_dated_from_its_first_period_to_its_last_with_the_rates_and_the_onset_memory() {
        let (closed, last) = judge(180, phases);
        assert_eq!(last, None);
        let [band] = &closed[..] else {
            panic!("{closed:?}")
        };
        assert_eq!((band.start_ms, band.end_ms), (2000, 6000));
        assert_eq!(band.start_mono_ns, 3_000_000_000);
        assert!(!band.ongoing);
        assert_eq!(band.stall_full_pct, 50.0);
        assert_eq!(band.stall_some_pct, 100.0);
        assert_eq!(band.major_rate, 400.0);
        assert_eq!(band.major_faults, 1600);
        assert_eq!(band.system_major_faults, Some(3200));
        assert_eq!(band.target_share, Some(0.5));
        assert_eq!(band.refault_rate, Some(0.0));
        // The memory at the end of the last quiet period, row 40.
        assert_eq!((band.onset_rss_anon, band.onset_swap), (40 << 20, 40 << 12));
    }

    #[test]
    fn the_band_is_closed_only_after_the_quiet_time_and_reported_then() {
        let mut verdict = Verdict::new(RULE);
        for i in 1..=139 {
            assert_eq!(verdict.feed(&phases(i)), None, "row {i}");
        }
        // Quiet from 6.05 s: 1 s of quiet periods is 20 of them, the 20th is row 140.
        assert_eq!(verdict.feed(&phases(140)).map(|b| b.end_ms), Some(6000));
    }

    #[test]
    fn thrashing_now_holds_from_the_onset_until_the_band_ends() {
        let mut verdict = Verdict::new(RULE);
        let now: Vec<bool> = (1..=180)
            .map(|i| {
                verdict.feed(&phases(i));
                verdict.thrashing_now()
            })
            .collect();
        // Thrashing from 2 s (row 41) is known at its 0.5 s onset, row 50; the band
        // ends once 1 s of quiet has passed after 6 s, at row 140.
        assert!(!now[..49].iter().any(|&n| n), "before the onset");
        assert!(now[49..139].iter().all(|&n| n), "during the band");
        assert!(!now[139..].iter().any(|&n| n), "after the band");
        assert_eq!(verdict.bands().len(), 1);
    }

    #[test]
    fn stall_shorter_than_the_onset_is_no_thrashing() {
        // Nine thrashing periods (0.45 s), then quiet: twice.
        let (closed, last) = judge(100, |i| match i % 50 {
            10..=18 => row(i, 0.9, 50),
            _ => row(i, 0.0, 0),
        });
        assert!(closed.is_empty() && last.is_none(), "{closed:?} {last:?}");
    }

    #[test]
    fn a_short_lull_inside_thrashing_does_not_end_it() {
        // Thrashing from 1 s to 5 s but for 0.5 s of calm at 3 s.
        let (closed, _) = judge(150, |i| match i * PERIOD_MS {
            1001..=3000 | 3501..=5000 => row(i, 0.5, 20),
            _ => row(i, 0.0, 0),
        });
        let [band] = &closed[..] else {
            panic!("{closed:?}")
        };
        assert_eq!((band.start_ms, band.end_ms), (1000, 5000));
        // Its rates count the lull in.
        assert_eq!(band.major_faults, 70 * 20);
        assert_eq!(band.stall_full_pct, 70.0 / 80.0 * 50.0);
    }

    #[test]
    fn faults_that_come_and_go_between_stalled_periods_do_not_break_the_run() {
        // Stalled throughout; 20 faults in every other period: 200 a second.
        let (_, last) = judge(40, |i| row(i, 0.5, if i % 2 == 0 { 20 } else { 0 }));
        let band = last.expect("thrashing");
        assert_eq!((band.start_ms, band.end_ms), (0, 2000));
    }

    #[test]
    fn stall_that_comes_before_the_faults_dates_the_thrashing_they_bring() {
        // Stalled from 1 s (the kernel swapping out, nothing coming back), 10 faults a
        // period (200 a second) from 1.5 s: over the last 0.5 s of stalled periods they
        // reach 100 a second at 1.75 s; the thrashing is that stall's, from 1 s.
        let (_, last) = judge(60, |i| match i {
            0..=20 => row(i, 0.0, 0),
            21..=30 => row(i, 0.9, 0),
            _ => row(i, 0.9, 10),
        });
        let band = last.expect("thrashing");
        assert_eq!(band.start_ms, 1000);
        // Its rates count the stall before the faults in.
        assert_eq!(band.major_faults, 30 * 10);
    }

    #[test]
    fn stall_and_faults_taking_turns_are_thrashing_from_the_first() {
        // As on the debug kernel: 150 ms of reclaim stall without a fault, then 150 ms
        // of pages coming back without stall, and again.
        let (_, last) = judge(60, |i| match (i - 1) % 6 {
            0..=2 => row(i, 0.6, 0),
            _ => row(i, 0.0, 8),
        });
        let band = last.expect("thrashing");
        // Until the last stalled period, the 57th.
        assert_eq!((band.start_ms, band.end_ms), (0, 2850));
    }

    #[test]
    fn calm_periods_between_slow_thrashing_ones_do_not_delay_its_onset() {
        // As the procfs backend saw it on the debug kernel: 58 pages a second, so a
        // period with stall and a few faults, then one with neither, and again.
        let (_, last) = judge(60, |i| match i % 2 {
            1 => row(i, 0.4, 6),
            _ => row(i, 0.0, 0),
        });
        let band = last.expect("thrashing");
        // From the first stalled period to the last, the 59th.
        assert_eq!((band.start_ms, band.end_ms), (0, 2950));
        // A calm onset window ends the pressure: what comes after dates afresh.
        let (_, last) = judge(60, |i| match i {
            1..=4 | 16.. => row(i, 0.4, 6),
            _ => row(i, 0.0, 0),
        });
        assert_eq!(last.expect("thrashing").start_ms, 750);
    }

    #[test]
    fn thrashing_again_after_a_band_ended_under_pressure_is_dated_after_it() {
        // Thrashing until 2 s, 1.5 s of stall without faults (pressure, no thrashing),
        // thrashing again from 3.5 s: two bands, the second after the first.
        let (closed, last) = judge(110, |i| match i * PERIOD_MS {
            0..=2000 => row(i, 0.5, 20),
            2001..=3500 => row(i, 0.5, 0),
            _ => row(i, 0.5, 20),
        });
        let (first, second) = (&closed[0], last.expect("thrashing again"));
        assert_eq!(closed.len(), 1);
        // The stalled periods thrash by the window for 0.4 s more.
        assert_eq!((first.start_ms, first.end_ms), (0, 2400));
        assert!(
            second.start_ms >= first.end_ms,
            "{second:?} overlaps {first:?}"
        );
    }

    #[test]
    fn pages_coming_back_without_stall_before_thrashing_do_not_date_it() {
        // Refaults at 100 a second without stall for 2 s (a program paging in what it
        // lost), then thrashing from 2 s.
        let (_, last) = judge(80, |i| match i {
            0..=40 => row(i, 0.02, 5),
            _ => row(i, 0.5, 20),
        });
        assert_eq!(last.expect("thrashing").start_ms, 2000);
    }

    #[test]
    fn faults_without_stall_or_stall_without_faults_are_no_thrashing() {
        // A program faulting in a file at full speed without memory stall.
        let faulting = judge(100, |i| row(i, 0.05, 500));
        // Stalled, and pages coming back at 20 a second: too few.
        let stalled = judge(100, |i| row(i, 0.9, 1));
        assert_eq!(faulting, (vec![], None));
        assert_eq!(stalled, (vec![], None));
    }

    #[test]
    fn refaults_of_the_system_count_when_the_target_takes_no_major_fault() {
        let (_, last) = judge(40, |i| {
            let mut r = row(i, 0.5, 0);
            r.pressure.workingset_refault_file = Some(10);
            r
        });
        let band = last.expect("thrashing");
        assert!(band.ongoing);
        assert_eq!((band.start_ms, band.end_ms), (0, 2000));
        assert_eq!(band.refault_rate, Some(200.0));
        assert_eq!(band.target_share, Some(0.0));
    }

    #[test]
    fn the_cgroups_stall_is_judged_before_the_systems() {
        let (_, last) = judge(40, |i| {
            let mut r = row(i, 0.5, 20);
            r.pressure.cgroup_stall_some_us = Some(0);
            r.pressure.cgroup_stall_full_us = Some(0);
            r
        });
        assert_eq!(last, None);
    }

    #[test]
    fn rows_without_stall_are_not_judged() {
        let mut verdict = Verdict::new(RULE);
        let mut r = row(1, 0.9, 100);
        r.pressure = Pressure::default();
        assert_eq!(verdict.feed(&r), None);
        assert!(!verdict.judged());
        verdict.feed(&row(2, 0.0, 0));
        assert!(verdict.judged());
    }
}
