//! Counts are conserved: every fault the command took is in exactly one sample, whatever
//! the protocol, however slowly the consumer reads.

mod common;

use std::ffi::OsString;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::*;
use monitor::backend::procfs::process::Process;
use monitor::backend::procfs::sampler::{Event, Sampler, SamplerAttribution};
use monitor::command::child;
use monitor::rows::source::Source;
use monitor::system::procstat::ProcessCounters;
use shared_layout::wait::FutexWaiter;
use shared_layout::{Area, Mode, Sample};

fn conserved_in(mode: &str) {
    let dir = Scratch::new(&format!("conserved-{mode}"));
    let csv = dir.join("samples.csv");
    let out = monitor(&[
        "run",
        "--output",
        csv.to_str().unwrap(),
        "--backend",
        "procfs",
        "--mode",
        mode,
        "--interval",
        "200ms",
        "--format",
        "csv",
        "--",
        WORK,
        "64",
        "R",
        "20000",
        "3",
        "--sleep-ms",
        "100",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&std::fs::read_to_string(&csv).unwrap());
    let minor: u64 = rows.iter().map(|r| r.minor).sum();
    let major: u64 = rows.iter().map(|r| r.major).sum();
    // The monitor's own view of the command: wait4() rusage.
    assert_eq!(minor, summary_value(&err, "command rusage"), "{err}");
    let rusage_major: u64 = {
        let line = err.lines().find(|l| l.contains("command rusage")).unwrap();
        line.split(", ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(major, rusage_major, "{err}");
    // The command's view of itself, read just before it exited: only the exit path
    // (a few pages) may come after it.
    let (work_minor, _) = work_self_report(&err);
    assert!(
        minor >= work_minor,
        "the profile lost faults: {minor} < {work_minor}"
    );
    assert!(
        minor - work_minor < 200,
        "the profile invented faults: {minor} vs {work_minor}"
    );
    assert!(work_minor > 20_000, "work did not touch its memory: {err}");
}

#[test]
fn the_minor_column_sums_to_the_commands_rusage_in_strict_mode() {
    conserved_in("strict");
}

#[test]
fn the_minor_column_sums_to_the_commands_rusage_in_relaxed_mode() {
    conserved_in("relaxed");
}

/// Samples the command `argv` (counted with its descendants) every `period` into a strict
/// ring of `slots`, the consumer taking what is ready every `pause`; returns every sample
/// received, the command's wait4() counts and the area.
fn sample_command(
    argv: &[OsString],
    period: Duration,
    slots: u64,
    pause: Duration,
) -> (Vec<Sample>, ProcessCounters, Arc<Area>) {
    let area = Arc::new(Area::create_memfd_with_slots(slots, Mode::Strict, period).unwrap());
    let pid = child::spawn(argv).unwrap();
    let sampler = Sampler::spawn(
        Arc::clone(&area),
        vec![Process::child(pid, true, shared_layout::abi::monotonic_ns()).unwrap()],
        None,
        period,
        SamplerAttribution::off("not this test's"),
        || {},
    )
    .unwrap();
    let events = sampler.events();
    let reaper = thread::spawn(move || {
        let (_, totals, _) = child::wait(pid).unwrap();
        events.send(Event::Exited {
            pid,
            totals,
            zombie: None,
        });
        totals
    });

    let mut source = Source::new(Arc::clone(&area), FutexWaiter, Duration::from_secs(1));
    let mut samples: Vec<Sample> = Vec::new();
    loop {
        thread::sleep(pause);
        if source
            .next(&mut samples, Duration::from_millis(100))
            .unwrap()
            .ended
        {
            break;
        }
    }
    let report = sampler.join().unwrap();
    let totals = reaper.join().unwrap();
    assert_eq!(report.unflushed, Sample::default());
    (samples, totals, area)
}

fn sums(samples: &[Sample]) -> ProcessCounters {
    ProcessCounters {
        minor: samples.iter().map(|s| s.minor).sum(),
        major: samples.iter().map(|s| s.major).sum(),
        cpu_ns: samples.iter().map(|s| s.cpu_ns).sum(),
    }
}

#[test]
fn a_two_slot_strict_ring_and_a_slow_consumer_lose_no_fault() {
    // The producer finds the ring full most periods: it merges those periods into the
    // next sample and waits (blocked_ns) instead of dropping anything.
    let argv = [WORK, "32", "R", "3000", "6", "--sleep-ms", "30"].map(Into::into);
    let (samples, totals, area) = sample_command(
        &argv,
        Duration::from_millis(10),
        2,
        Duration::from_millis(40),
    );
    assert_eq!(sums(&samples), totals);
    assert!(
        area.counters().blocked_ns > 0,
        "the ring never filled: the test proves nothing"
    );
}

#[test]
fn children_reaped_while_their_shell_is_read_every_millisecond_count_once_each() {
    // Eighty `work`s, two at a time, each reaped by the shell while the sampler reads
    // the tree every millisecond: reaps race with reads all along.
    let script = "i=0; while [ $i -lt 40 ]; do \
                  \"$0\" 4 R 2000 1 --sleep-ms 0 2>/dev/null & \
                  \"$0\" 4 R 2000 1 --sleep-ms 0 2>/dev/null; wait; i=$((i+1)); done";
    let argv = ["sh", "-c", script, WORK].map(Into::into);
    let (samples, totals, _) = sample_command(
        &argv,
        Duration::from_millis(1),
        4096,
        Duration::from_millis(10),
    );
    let counted = sums(&samples);
    // Exact for faults: live children as they run, then in the shell's reaped counts.
    assert_eq!((counted.minor, counted.major), (totals.minor, totals.major));
    // Far more than the shell's own: the children's, while they ran.
    let live = samples.iter().filter(|s| s.minor > 200).count();
    assert!(live > 20, "{live} samples with the children's faults");
}

/// SIGKILLs process `pid` (our child, not reaped: the pid is still its own) when dropped;
/// forgotten once it is reaped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Waits until process `pid` has stopped (state T).
fn stopped(pid: u32) {
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .contains(") T ")
    {
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_samples_taken_while_a_command_is_stopped_hold_exactly_what_its_stat_says_so_far() {
    // The shell runs a `work` and reaps it, then stops itself: what the samples hold then
    // is what they counted while it ran, not what wait4() brings at the end.
    let script = "\"$0\" 16 R 3000 2 --sleep-ms 20 2>/dev/null; kill -STOP $$; \
                  \"$0\" 16 R 3000 1 --sleep-ms 0 2>/dev/null";
    let argv: [OsString; 4] = ["sh", "-c", script, WORK].map(Into::into);
    let period = Duration::from_millis(10);
    let area = Arc::new(Area::create_memfd_with_slots(4096, Mode::Strict, period).unwrap());
    let pid = child::spawn(&argv).unwrap();
    // A failed check leaves no stopped shell behind.
    let guard = KillOnDrop(pid);
    let sampler = Sampler::spawn(
        Arc::clone(&area),
        vec![Process::child(pid, true, shared_layout::abi::monotonic_ns()).unwrap()],
        None,
        period,
        SamplerAttribution::off("not this test's"),
        || {},
    )
    .unwrap();
    let mut source = Source::new(Arc::clone(&area), FutexWaiter, period);
    let mut samples: Vec<Sample> = Vec::new();
    stopped(pid);
    // A sample whose counts were read after the stop: nothing can come between.
    let stop = shared_layout::abi::monotonic_ns();
    while samples.last().is_none_or(|s| s.time_ns <= stop) {
        source.next(&mut samples, period).unwrap();
    }
    let stat = monitor::system::procstat::read(pid).unwrap();
    let so_far = sums(&samples);
    // Its own faults and those of the `work` it reaped: its counts since its fork.
    assert_eq!(
        (so_far.minor, so_far.major),
        (
            stat.counters.minor + stat.reaped.minor,
            stat.counters.major + stat.reaped.major
        ),
        "samples so far against /proc/{pid}/stat"
    );
    assert!(so_far.minor > 3000, "the first work's faults: {so_far:?}");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let events = sampler.events();
    let (_, totals, _) = child::wait(pid).unwrap();
    std::mem::forget(guard);
    events.send(Event::Exited {
        pid,
        totals,
        zombie: None,
    });
    while !source
        .next(&mut samples, Duration::from_millis(100))
        .unwrap()
        .ended
    {}
    assert_eq!(sampler.join().unwrap().unflushed, Sample::default());
    let all = sums(&samples);
    assert_eq!((all.minor, all.major), (totals.minor, totals.major));
}
