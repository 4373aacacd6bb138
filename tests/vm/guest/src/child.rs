//! The processes the tests profile or kill: `pfprof-guest child <mode> ...`.
//!
//! Profiled modes print `ready`, then block reading one byte from stdin (the
//! parent registers them meanwhile, while they take no fault), then work.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::thread;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::device::{raw_session, set_mode, Mapping};
use crate::kmod;

const PAGE: usize = 4096;

pub fn main(args: &[String]) -> ExitCode {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["faults", pages, threads, then] => faults(pages, threads, then),
        ["churn"] => churn(),
        ["hold-lock"] => hold_lock(),
        ["wait-full"] => wait_full(),
        ["register", pid] => register(pid),
        _ => Err(anyhow::anyhow!("unknown child mode {args:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("child: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Fresh anonymous memory, never touched: every page costs one minor fault.
struct Fresh {
    ptr: NonNull<u8>,
    len: usize,
}

/// `len` bytes of fresh anonymous private memory, readable and writable,
/// not touched yet; the caller unmaps it (or leaves it to the exit).
pub fn map_anonymous(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: anonymous private mapping, no address hint.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(
        ptr != libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    NonNull::new(ptr.cast()).context("mmap returned null")
}

impl Fresh {
    fn new(pages: usize) -> Result<Fresh> {
        let len = pages.max(1) * PAGE;
        let ptr = map_anonymous(len)?;
        // One fault per page, not one per huge page.
        // SAFETY: the range was just mapped.
        unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_NOHUGEPAGE) };
        Ok(Fresh { ptr, len })
    }

    fn touch(&self, pages: std::ops::Range<usize>) {
        for i in pages {
            // SAFETY: i < pages of the mapping; nobody else uses it.
            unsafe { self.ptr.as_ptr().add(i * PAGE).write_volatile(1) };
        }
    }
}

// SAFETY: the mapping is plain memory; threads touch disjoint pages.
unsafe impl Sync for Fresh {}

impl Drop for Fresh {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn ready_then_wait_for_go() -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n")?;
    out.flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut byte)
        .context("waiting for go")?;
    Ok(())
}

/// Touches `pages` fresh pages split over the main thread and `threads`
/// threads that exit before it does, says `done`, and then either exits at
/// once (`exit`: its last faults reach only the final sample) or stays,
/// faulting no more, until the next byte or the end of stdin (`stay`).
fn faults(pages: &str, threads: &str, then: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let threads: usize = threads.parse()?;
    let stay = match then {
        "stay" => true,
        "exit" => false,
        _ => bail!("faults: expected exit or stay, got {then:?}"),
    };
    let mem = Fresh::new(pages)?;
    ready_then_wait_for_go()?;
    let share = pages / (threads + 1);
    thread::scope(|s| {
        for t in 0..threads {
            let mem = &mem;
            s.spawn(move || mem.touch(t * share..(t + 1) * share));
        }
    });
    mem.touch(threads * share..pages);
    let mut out = std::io::stdout().lock();
    out.write_all(b"done\n")?;
    out.flush()?;
    if stay {
        let mut byte = [0u8; 1];
        std::io::stdin()
            .read(&mut byte)
            .context("waiting for exit")?;
    }
    Ok(())
}

/// Keeps faulting (256 fresh pages, then a 1 ms nap) until a second byte.
fn churn() -> Result<()> {
    ready_then_wait_for_go()?;
    // SAFETY: setting O_NONBLOCK on our own stdin.
    unsafe { libc::fcntl(0, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut byte = [0u8; 1];
    loop {
        let mem = Fresh::new(256)?;
        mem.touch(0..256);
        drop(mem);
        match std::io::stdin().read(&mut byte) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// A monitor that takes the shared lock and never lets it go, reporting the
/// area's deferred counter until it is killed.
fn hold_lock() -> Result<()> {
    let file = raw_session()?;
    set_mode(&file, Mode::Strict.as_raw()).map_err(|e| anyhow::anyhow!("SET_MODE: {e}"))?;
    let map = Mapping::new(&file)?;
    map.lock_as_consumer()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "locked")?;
    loop {
        writeln!(out, "deferred {}", map.deferred())?;
        out.flush()?;
        thread::sleep(Duration::from_millis(20));
    }
}

/// A strict consumer that sleeps in WAIT_FULL without a timeout until the
/// session ends, then says how many samples it took.
fn wait_full() -> Result<()> {
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    println!("waiting");
    std::io::stdout().flush()?;
    let mut out = Vec::new();
    loop {
        match consumer.take(&mut out, None)? {
            Take::Samples(_) => {}
            Take::TimedOut => bail!("an unbounded wait timed out"),
            Take::Ended => break,
        }
    }
    println!("ended {}", out.len());
    Ok(())
}

/// Tries to register `pid` (the test runs this as an unprivileged user).
fn register(pid: &str) -> Result<()> {
    let pid = match pid {
        "self" => std::process::id().to_string(),
        pid => pid.to_string(),
    };
    match kmod::write_status(format!("R {pid}\n").as_bytes()) {
        Ok(()) => println!("ok"),
        Err(errno) => println!("errno {errno}"),
    }
    Ok(())
}
