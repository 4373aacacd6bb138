//! CPU 0 as the tests that measure how long the module keeps a CPU use it: threads and
//! tasks pinned there, a probe thread measuring the longest time it is kept off it, and
//! the kernel's preemption mode as Debian boots it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, ensure, Result};

/// Pins the calling thread to CPU 0.
pub fn pin_to_cpu0() -> Result<()> {
    pin_task(0, 0)
}

/// A thread pinned to CPU 0 that measures the longest time it is kept off it.
pub struct Probe {
    done: Arc<AtomicBool>,
    longest_ns: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Probe {
    pub fn start() -> Probe {
        let done = Arc::new(AtomicBool::new(false));
        let longest_ns = Arc::new(AtomicU64::new(0));
        let thread = {
            let (done, longest) = (done.clone(), longest_ns.clone());
            std::thread::spawn(move || -> Result<()> {
                pin_to_cpu0()?;
                let mut last = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    longest.fetch_max((now - last).as_nanos() as u64, Ordering::Relaxed);
                    last = now;
                }
                Ok(())
            })
        };
        Probe {
            done,
            longest_ns,
            thread: Some(thread),
        }
    }

    /// The longest gap since the last call, in ms (microsecond precision).
    pub fn gap_ms(&self) -> f64 {
        self.longest_ns.swap(0, Ordering::Relaxed) as f64 / 1e6
    }

    pub fn stop(mut self) -> Result<()> {
        self.done.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the probe panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Pins the task `tid` (0: the calling thread) to `cpu`.
pub fn pin_task(tid: i32, cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` (0 or 1) is inside the set, which CPU_SET writes alone.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of its own size.
    let ret = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    ensure!(
        ret == 0,
        "sched_setaffinity of {tid}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// The kernel's preemption mode (PREEMPT_DYNAMIC, through debugfs) at "voluntary" while
/// it lives, then as it was; nothing where the kernel cannot switch.
pub struct Preemption(Option<String>);

const PREEMPT_MODE: &str = "/sys/kernel/debug/sched/preempt";

impl Preemption {
    pub fn voluntary() -> Result<Preemption> {
        if !std::path::Path::new(PREEMPT_MODE).exists() {
            // SAFETY: mount(2) of debugfs with NUL-terminated strings; a failure leaves
            // the mode as it is.
            unsafe {
                libc::mount(
                    c"debugfs".as_ptr(),
                    c"/sys/kernel/debug".as_ptr(),
                    c"debugfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
        }
        // "none (voluntary) full": the mode in force between parentheses.
        let was = std::fs::read_to_string(PREEMPT_MODE)
            .ok()
            .and_then(|modes| {
                let start = modes.find('(')? + 1;
                let end = modes[start..].find(')')? + start;
                Some(modes[start..end].to_owned())
            });
        // A kernel without the mode (7.x's lazy preemption may have replaced it) keeps
        // its own: the probe then measures that one's.
        let switched = was.filter(|_| std::fs::write(PREEMPT_MODE, "voluntary").is_ok());
        Ok(Preemption(switched))
    }
}

impl Drop for Preemption {
    fn drop(&mut self) {
        if let Some(was) = &self.0 {
            let _ = std::fs::write(PREEMPT_MODE, was);
        }
    }
}
