//! Load: 8 threads register and unregister 1,000 short-lived processes each
//! as fast as they can, while the sampler runs at a 1 ms period and a strict
//! monitor reads. Every registration of a live process succeeds, nothing is
//! lost, and at the end the listing (and the module's slab objects) match
//! the processes that are really still registered.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::anon::map_anonymous;
use crate::device::take_until_ended;
use crate::harness::Env;
use crate::klog::{self, task_structs};
use crate::kmod::{self, Profiled};
use crate::rng::Rng;

const THREADS: usize = 8;
const PER_THREAD: usize = 1000;
/// Processes each thread leaves alive and registered until the end.
const KEPT: usize = 4;
/// Pages each process touches after it is registered.
const PAGES: usize = 8;
/// Faults the processes may take besides their pages, all of them together: the first to
/// run the code after its read may map a page of it (the address space is shared, so once
/// for all).
const FIRST_RUN_FAULTS: u64 = 16;
const PAGE: usize = 4096;

/// A process sharing our address space (as posix_spawn's child does),
/// blocked until `release`; then it faults and exits. It also has a copy of
/// our descriptors (it never execs), /dev/pfprof among them: one left alive
/// would keep the module from unloading, so dropping it unreaped kills it.
struct Forked {
    pid: i32,
    go: i32,
    reaped: std::cell::Cell<bool>,
    /// What its entry point reads and writes; lives until it is reaped.
    args: Box<ChildArgs>,
}

/// A child's stack and the fresh pages it touches.
struct Slot {
    stack: *mut u8,
    mem: *mut u8,
}

const STACK: usize = 64 * 1024;

struct ChildArgs {
    go: i32,
    mem: *mut u8,
    /// Set just before it blocks in its read: whatever it faulted to get there (its
    /// stack, its code) is behind it, and it takes no fault until released.
    waiting: AtomicU32,
    /// Set once its pages are touched: the rest is its exit.
    faulted: AtomicU32,
    /// The faults it took touching them (its own getrusage before and after): what a
    /// session counting it then must have.
    took: AtomicU64,
}

// SAFETY: `mem` names pages only the child touches; the parent only moves
// the box around until it reaps the child.
unsafe impl Send for ChildArgs {}

/// The child's whole life: raw syscalls only (it shares our memory and our
/// thread's TLS, so no libc state, no allocation). Returning exits it.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the ChildArgs its parent keeps alive until it reaps us.
    let args = unsafe { &*(arg as *const ChildArgs) };
    let mut byte = 0u8;
    let minflt = || {
        // SAFETY: rusage is plain old data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a local.
        unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_SELF, &mut ru) };
        ru.ru_minflt as u64
    };
    // Its stack as deep as it goes after the read: mapped now, not counted.
    minflt();
    args.waiting.store(1, Ordering::Release);
    // SAFETY: our own pipe.
    unsafe { libc::syscall(libc::SYS_read, args.go, &mut byte as *mut u8, 1) };
    let before = minflt();
    // SAFETY: the slot's pages; they are ours until exit.
    unsafe {
        for i in 0..PAGES {
            args.mem.add(i * PAGE).write_volatile(1);
        }
        // The next child in this slot faults afresh.
        libc::syscall(
            libc::SYS_madvise,
            args.mem,
            PAGES * PAGE,
            libc::MADV_DONTNEED,
        );
    }
    args.took.store(minflt() - before, Ordering::Relaxed);
    args.faulted.store(1, Ordering::Release);
    0
}

/// Starts a process on `slot` that waits for a byte on a pipe, touches its
/// `PAGES` pages and exits. clone(CLONE_VM) instead of fork: no copy of our
/// page tables, which is most of what a process costs under TCG.
fn fork_waiting(slot: &Slot) -> Result<Forked> {
    let mut fds = [0i32; 2];
    ensure!(
        // SAFETY: a valid array of two ints.
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0,
        "pipe2: {}",
        std::io::Error::last_os_error()
    );
    let args = Box::new(ChildArgs {
        go: fds[0],
        mem: slot.mem,
        waiting: AtomicU32::new(0),
        faulted: AtomicU32::new(0),
        took: AtomicU64::new(0),
    });
    // SAFETY: the stack is ours and unused by anyone else until this child
    // is reaped; the child runs child_main only (see there).
    let pid = unsafe {
        libc::clone(
            child_main,
            slot.stack.add(STACK).cast(),
            libc::CLONE_VM | libc::SIGCHLD,
            &*args as *const ChildArgs as *mut libc::c_void,
        )
    };
    // SAFETY: our own read end (the child has its own copy of the table).
    unsafe { libc::close(fds[0]) };
    ensure!(pid > 0, "clone: {}", std::io::Error::last_os_error());
    let forked = Forked {
        pid,
        go: fds[1],
        reaped: std::cell::Cell::new(false),
        args,
    };
    forked.until(|a| &a.waiting);
    Ok(forked)
}

impl Forked {
    /// Yields until the child has set `flag`.
    fn until(&self, flag: fn(&ChildArgs) -> &AtomicU32) {
        while flag(&self.args).load(Ordering::Acquire) == 0 {
            // SAFETY: plain syscall.
            unsafe { libc::sched_yield() };
        }
    }

    fn release(&self) {
        // SAFETY: our own pipe's write end.
        unsafe {
            libc::write(self.go, b"g".as_ptr().cast(), 1);
            libc::close(self.go);
        }
    }

    fn reap(&self) -> Result<()> {
        let mut status = 0;
        // SAFETY: our own unreaped child.
        let ret = unsafe { libc::waitpid(self.pid, &mut status, 0) };
        ensure!(
            ret == self.pid,
            "waitpid {}: {}",
            self.pid,
            std::io::Error::last_os_error()
        );
        self.reaped.set(true);
        ensure!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "process {} ended with {status:#x}",
            self.pid
        );
        Ok(())
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if !self.reaped.get() {
            // SAFETY: our own child, not reaped yet, so its pid is still its own.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// What one thread did.
#[derive(Default)]
struct Churned {
    unregistered_before_exit: u64,
    unregistered_racing_exit: u64,
    left_to_exit: u64,
    /// The faults the processes that were counted took, as each said.
    took: u64,
    kept: Vec<Forked>,
}

/// The children give their pages back with madvise(MADV_DONTNEED) so that the
/// next one in the slot faults afresh; they cannot report a failure, so the
/// kernel's madvise is checked here first (tinyconfig leaves it out).
fn ensure_madvise_drops_pages() -> Result<()> {
    let mem = map_anonymous(PAGE)?;
    // SAFETY: our own fresh page.
    let ret = unsafe { libc::madvise(mem.as_ptr().cast(), PAGE, libc::MADV_DONTNEED) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the page mapped above, used by nothing else.
    unsafe { libc::munmap(mem.as_ptr().cast(), PAGE) };
    ensure!(
        ret == 0,
        "madvise(MADV_DONTNEED): {err}: this kernel lacks CONFIG_ADVISE_SYSCALLS"
    );
    Ok(())
}

fn churn(seed: u64) -> Result<Churned> {
    let mut rng = Rng::new(seed);
    // One slot for the processes that come and go, one per kept process.
    // Leaked: a kept process may outlive this function (until it is reaped).
    let slots: Vec<Slot> = (0..=KEPT)
        .map(|_| {
            let mem = map_anonymous(PAGES * PAGE)?.as_ptr();
            // One fault per page, never one huge page for all (THP is "always" on Debian's
            // kernels, and the slots' mappings merge into ranges that can hold one): a
            // child would then take a fault or none where PAGES are counted. A kernel
            // without THP (the debug one) refuses the advice, and needs none.
            // SAFETY: the range was just mapped.
            unsafe { libc::madvise(mem.cast(), PAGES * PAGE, libc::MADV_NOHUGEPAGE) };
            Ok(Slot {
                stack: map_anonymous(STACK)?.as_ptr(),
                mem,
            })
        })
        .collect::<Result<_>>()?;
    let mut done = Churned::default();
    for i in 0..PER_THREAD {
        let slot = &slots[(i + KEPT + 1).saturating_sub(PER_THREAD)];
        let p = fork_waiting(slot)?;
        kmod::register(p.pid as u32).with_context(|| format!("process {i} (seed {seed})"))?;
        if i >= PER_THREAD - KEPT {
            done.kept.push(p);
            continue;
        }
        // Whether the session counts what it does once released.
        let counted = match rng.below(3) {
            0 => {
                kmod::unregister(p.pid as u32)?;
                p.release();
                done.unregistered_before_exit += 1;
                false
            }
            1 => {
                p.release();
                // Its pages touched: the unregistration races its exit alone.
                p.until(|a| &a.faulted);
                // Exiting or a zombie (we have not reaped it): still registered.
                if let Err(e) = kmod::write_status(format!("U {}\n", p.pid).as_bytes()) {
                    bail!("U racing the exit of {}: errno {e} (seed {seed})", p.pid);
                }
                done.unregistered_racing_exit += 1;
                true
            }
            _ => {
                p.release();
                done.left_to_exit += 1;
                true
            }
        };
        p.reap()?;
        if counted {
            done.took += p.args.took.load(Ordering::Relaxed);
        }
    }
    Ok(done)
}

pub fn eight_threads_churning_8000_processes_leave_exactly_the_live_registrations(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    ensure_madvise_drops_pages()?;
    let tasks_before = task_structs()?;
    let module = kmod::insmod(env, &["period_ms=1", "buffer_pages=2"])?;
    // Keeps the set from emptying, so one session spans the whole load.
    let mut anchor = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(anchor.pid)?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut rng = Rng::from_env_or_clock();
    let seeds: Vec<u64> = (0..THREADS).map(|_| rng.next_u64()).collect();

    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (churned, samples) = thread::scope(|s| -> Result<_> {
        let reader = s.spawn(|| -> Result<Vec<_>> {
            let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let took = consumer.take(&mut samples, Some(Duration::from_millis(50)))?;
                ensure!(took != Take::Ended, "the session ended under load");
            }
            Ok(samples)
        });
        let workers: Vec<_> = seeds
            .iter()
            .map(|&seed| s.spawn(move || churn(seed)))
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, Ordering::Relaxed);
        let samples = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader panicked"))??;
        let mut churned = Vec::new();
        for r in results {
            churned.push(r.map_err(|_| anyhow::anyhow!("a worker panicked"))??);
        }
        Ok((churned, samples))
    })?;
    let elapsed = started.elapsed();

    // Exited processes are dropped on the sampler's next tick.
    let mut expected: BTreeSet<u32> = churned
        .iter()
        .flat_map(|c| c.kept.iter().map(|p| p.pid as u32))
        .collect();
    expected.insert(anchor.pid);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let listed: BTreeSet<u32> = kmod::registered()?.into_iter().collect();
        if listed == expected {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the listing has {} processes, {} are registered and alive: extra {:?}, missing {:?}",
            listed.len(),
            expected.len(),
            listed.difference(&expected).take(8).collect::<Vec<_>>(),
            expected.difference(&listed).take(8).collect::<Vec<_>>()
        );
        thread::sleep(Duration::from_millis(20));
    }
    // A registry entry and a member of the monitor's session per process, and the
    // session itself.
    klog::ensure_module_slab_objects(
        2 * expected.len() as u64 + 1,
        "registrations, as many session members and a session",
    )?;

    // Strict: the monitor got every sample written (nothing lost under load).
    let mut samples = samples;
    let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
    for p in churned.iter().flat_map(|c| &c.kept) {
        kmod::unregister(p.pid as u32)?;
        p.release();
        p.reap()?;
    }
    kmod::unregister(anchor.pid)?;
    take_until_ended(&mut consumer, &mut samples)?;
    let written = area.counters().write_seq;
    ensure!(
        samples.len() as u64 == written,
        "the monitor received {} of {written} samples",
        samples.len()
    );
    // Every process was registered while it waited, faultless, for its release: one that
    // exits registered, or is unregistered once its pages are touched, has in the samples
    // exactly the faults it took touching them (PAGES each, as each counted itself with
    // getrusage); one unregistered before its release, none. Only the first run of the
    // code around the touches may add a fault or two (FIRST_RUN_FAULTS), far less than
    // one process's PAGES: a process counted twice, or one missing, shows.
    let sum = |f: fn(&Churned) -> u64| churned.iter().map(f).sum::<u64>();
    let (left, racing) = (sum(|c| c.left_to_exit), sum(|c| c.unregistered_racing_exit));
    let minor: u64 = samples.iter().map(|s| s.minor).sum();
    let took = sum(|c| c.took);
    let pages = (left + racing) * PAGES as u64;
    ensure!(
        (pages..=pages + FIRST_RUN_FAULTS).contains(&took),
        "the {} counted processes took {took} faults by their own count for {PAGES} fresh \
         pages each",
        left + racing
    );
    ensure!(
        (took..=took + FIRST_RUN_FAULTS).contains(&minor),
        "{minor} minor faults in the samples, expected {took}..={}",
        took + FIRST_RUN_FAULTS
    );
    ensure!(
        kmod::registered()?.is_empty(),
        "registrations left after the load"
    );
    drop((consumer, area, dev));
    klog::ensure_module_slab_objects(0, "registrations or sessions after the load")?;
    anchor.go()?;
    anchor.reap()?;
    module.unload()?;

    crate::harness::figure(&format!(
        "load: {} processes by {THREADS} threads in {:.1} s ({} unregistered before exit, {} \
         racing exit, {} left to exit registered, {} kept), {} strict samples, none lost, \
         {minor} minor faults",
        THREADS * PER_THREAD,
        elapsed.as_secs_f64(),
        sum(|c| c.unregistered_before_exit),
        racing,
        left,
        THREADS * KEPT,
        samples.len()
    ));
    // Every task the module referenced is freed (RCU frees them a little later).
    let deadline = Instant::now() + Duration::from_secs(5);
    while task_structs()? > tasks_before + 16 {
        ensure!(
            Instant::now() < deadline,
            "{} task_structs in use after the load, {tasks_before} before: references leaked",
            task_structs()?
        );
        thread::sleep(Duration::from_millis(50));
    }
    mark.ensure_clean()
}
