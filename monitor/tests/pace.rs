//! The procfs backend's sampler keeps to its period's grid when its work outruns the
//! period: after every poll it sleeps until the next deadline still ahead, never
//! polling again at once (found on a loaded debug kernel: a cgroup target at 10 ms, the
//! sampler thread a minute in state R without one voluntary switch).

use std::fs;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use monitor::backend::procfs::process::Process;
use monitor::backend::procfs::sampler::{Event, Sampler, SamplerAttribution};
use monitor::rows::source::Source;
use shared_layout::wait::FutexWaiter;
use shared_layout::{Area, Mode, Sample};

/// Processes polled every period: reading each one's files takes microseconds, so a
/// poll of them all takes milliseconds on any machine, more than the period.
const PROCESSES: usize = 1000;
const PERIOD: Duration = Duration::from_millis(1);
const WINDOW: Duration = Duration::from_millis(1500);

/// Sleepers, killed when dropped.
struct Sleepers(Vec<Child>);

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The thread named `name` in this process.
fn thread_named(name: &str) -> Option<u32> {
    fs::read_dir("/proc/self/task")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|tid| {
            fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() == name)
        })
}

/// A thread's time on a CPU and waiting for one, ns (`schedstat`).
fn ran_and_waited(tid: u32) -> (u64, u64) {
    let text = fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap());
    (fields.next().unwrap(), fields.next().unwrap())
}

/// [`ran_and_waited`] and the moment it held: read again until the read took under a
/// millisecond. A test thread preempted between the clock and the read (a loaded
/// machine) would count the sampler's time then in the one window and not the other.
fn ran_and_waited_now(tid: u32) -> (Instant, (u64, u64)) {
    for _ in 0..1000 {
        let at = Instant::now();
        let read = ran_and_waited(tid);
        if at.elapsed() < Duration::from_millis(1) {
            return (at, read);
        }
    }
    panic!("reading schedstat took a millisecond or more 1000 times in a row");
}

#[test]
fn a_sampler_whose_poll_outruns_its_period_still_sleeps_between_polls() {
    let sleepers = Sleepers(
        (0..PROCESSES)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let processes = sleepers
        .0
        .iter()
        .map(|c| Process::attach(c.id(), false).unwrap())
        .collect();
    let area = Arc::new(Area::create_memfd_with_slots(4096, Mode::Strict, PERIOD).unwrap());
    let sampler = Sampler::spawn(
        Arc::clone(&area),
        processes,
        None,
        PERIOD,
        SamplerAttribution::off("not this test's"),
        || {},
    )
    .unwrap();
    // Named by the thread itself once it runs.
    let named = Instant::now() + Duration::from_secs(10);
    let tid = loop {
        if let Some(tid) = thread_named("pfprof-sampler") {
            break tid;
        }
        assert!(Instant::now() < named, "no thread named pfprof-sampler");
        thread::sleep(Duration::from_millis(10));
    };
    let mut source = Source::new(Arc::clone(&area), FutexWaiter, Duration::from_secs(1));
    let mut samples: Vec<Sample> = Vec::new();
    let drain = |source: &mut Source<FutexWaiter>, samples: &mut Vec<Sample>, span: Duration| {
        let until = Instant::now() + span;
        while Instant::now() < until {
            source.next(samples, Duration::from_millis(50)).unwrap();
        }
    };
    drain(&mut source, &mut samples, Duration::from_millis(300));
    let before = samples.len();
    let (started, (ran, waited)) = ran_and_waited_now(tid);
    drain(&mut source, &mut samples, WINDOW);
    let (ended, (ran_after, waited_after)) = ran_and_waited_now(tid);
    let wall = ended.duration_since(started).as_nanos() as u64;
    let polls = (samples.len() - before) as u64;
    let asleep = wall.saturating_sub((ran_after - ran) + (waited_after - waited));
    sampler.events().send(Event::Stop);
    sampler.join().unwrap();
    drop(sleepers);

    let periods = wall / PERIOD.as_nanos() as u64;
    // The premise: polls slower than the period, so that fewer came than periods.
    assert!(
        polls * 2 < periods,
        "{polls} polls of {PROCESSES} processes in {periods} periods: a poll took less \
         than the period, and this test shows nothing"
    );
    // After each poll the sampler sleeps to the next deadline still ahead, half a period
    // on average; a tenth of one is asked. One that polled again at once slept none.
    let asked = polls * PERIOD.as_nanos() as u64 / 10;
    assert!(
        asleep >= asked,
        "the sampler slept {:.1} ms in {:.0} ms over {polls} polls, each longer than the \
         period (at least {:.1} ms asked): it polls back to back",
        asleep as f64 / 1e6,
        wall as f64 / 1e6,
        asked as f64 / 1e6
    );
}
