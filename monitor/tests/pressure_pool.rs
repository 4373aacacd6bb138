//! The fleet's pressure watcher thread outlives a poll() that fails: here more triggers
//! than the open-file limit, which poll() refuses (EINVAL). Its own test binary: the
//! limit it lowers is the whole process's.

use std::thread;
use std::time::{Duration, Instant};

use monitor::pressure::watch::{PressurePool, PressureWatch, WATCHER_THREAD};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// The process's threads named `pfprof-pressure`.
fn watcher_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    (tasks.flatten())
        .filter(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            comm.trim() == WATCHER_THREAD
        })
        .count()
}

#[test]
fn the_watcher_thread_lives_on_when_its_triggers_cannot_be_polled() {
    let pool = PressurePool::new(Duration::ZERO).unwrap();
    let period = Duration::from_millis(50);
    // On the system's PSI file, each arms a trigger of its own: one fd each.
    let mut watches: Vec<PressureWatch> = (0..40)
        .map(|_| PressureWatch::start(&pool, None, period).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while watcher_threads() == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if watcher_threads() == 0 {
        eprintln!("no PSI on this kernel: no watcher thread, nothing checked");
        return;
    }
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // Fewer than the 41 fds it polls: poll() fails with EINVAL from now on.
    setrlimit(Resource::RLIMIT_NOFILE, 16, hard).unwrap();
    // A profile's end sounds the bell: the watcher wakes and polls again.
    drop(watches.pop());
    thread::sleep(Duration::from_millis(300));
    // Restored first: listing the threads takes an fd too.
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    // A thread that ended closes its triggers first, slowly (each close waits for an RCU
    // grace period): given the time to.
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        watcher_threads(),
        1,
        "the watcher thread ended at a failed poll()"
    );
    drop(watches);
    drop(pool);
}
