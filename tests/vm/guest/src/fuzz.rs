//! /proc/pfprof/status under random and mutated input, checked write by
//! write against a model of the command language and of the registered set.
//!
//! The fuzzer runs as pid 1 of a fresh pid namespace: the only processes it
//! can name are itself and the children it made, so the model knows exactly
//! which pid exists, and every pid a mutation produces (a prefix "R 1" of
//! "R 12", a leading-zero "R 007") is predictable. A process registered from
//! outside the namespace must stay invisible to its listing.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::process::{Command, ExitCode};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::anon::map_anonymous;
use crate::device::take_until_ended;
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::rng::Rng;

/// Write syscalls the fuzzer makes (each iovec of a writev is one command).
const WRITES: u64 = 100_000;
/// The module's command buffer: 31 bytes and the terminating NUL.
const CMD_MAX: usize = 32;
/// Children the fuzzer may register, besides itself.
const CHILDREN: usize = 6;

/// How one command should end, by the command language of proc.c's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Register(i32),
    Unregister(i32),
}

/// The reference parser: exactly "R <pid>" or "U <pid>", decimal digits
/// only, 0 < pid <= i32::MAX, one optional trailing '\n', under CMD_MAX bytes.
fn parse(input: &[u8]) -> Option<Cmd> {
    if input.is_empty() || input.len() >= CMD_MAX {
        return None;
    }
    let line = input.strip_suffix(b"\n").unwrap_or(input);
    let (&op, rest) = line.split_first()?;
    let digits = rest.strip_prefix(b" ")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 29 digits fit in the buffer: u128 cannot overflow.
    let value: u128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let pid = i32::try_from(value).ok().filter(|&p| p > 0)?;
    match op {
        b'R' => Some(Cmd::Register(pid)),
        b'U' => Some(Cmd::Unregister(pid)),
        _ => None,
    }
}

/// The registered set as the module should have it, and what it answers.
struct Model {
    /// Thread-group ids that exist in the namespace.
    live: BTreeSet<i32>,
    registered: BTreeSet<i32>,
    accepted: u64,
}

impl Model {
    /// The outcome of one write of `input` (or EFAULT when the buffer is bad).
    fn apply(&mut self, input: &[u8], readable: bool) -> Result<(), i32> {
        if input.is_empty() || input.len() >= CMD_MAX {
            return Err(libc::EINVAL);
        }
        if !readable {
            return Err(libc::EFAULT);
        }
        let cmd = parse(input).ok_or(libc::EINVAL)?;
        let pid = match cmd {
            Cmd::Register(p) | Cmd::Unregister(p) => p,
        };
        if !self.live.contains(&pid) {
            return Err(libc::ESRCH);
        }
        match cmd {
            Cmd::Register(_) if !self.registered.insert(pid) => return Err(libc::EEXIST),
            Cmd::Unregister(_) if !self.registered.remove(&pid) => return Err(libc::ENOENT),
            _ => {}
        }
        self.accepted += 1;
        Ok(())
    }
}

fn errno_of(ret: isize) -> std::result::Result<usize, i32> {
    if ret < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        Ok(ret as usize)
    }
}

/// Raw write(2) of `len` bytes at `ptr` (possibly unreadable).
fn write_raw(file: &File, ptr: *const u8, len: usize) -> std::result::Result<usize, i32> {
    // SAFETY: the kernel validates the user pointer; we never read it.
    errno_of(unsafe { libc::write(file.as_raw_fd(), ptr.cast(), len) })
}

/// Two readable pages followed by an inaccessible one: buffers that end in
/// it make copy_from_user() fail part way.
struct Guarded {
    base: *mut u8,
}

const PAGE: usize = 4096;

impl Guarded {
    fn new() -> Result<Guarded> {
        let base = map_anonymous(3 * PAGE)?.as_ptr();
        // SAFETY: the third page of our own mapping.
        let ret = unsafe { libc::mprotect(base.add(2 * PAGE).cast(), PAGE, libc::PROT_NONE) };
        ensure!(ret == 0, "mprotect: {}", std::io::Error::last_os_error());
        Ok(Guarded { base })
    }

    /// `bytes` placed to end `overhang` bytes inside the guard page.
    fn straddling(&self, bytes: &[u8], overhang: usize) -> *const u8 {
        let start = 2 * PAGE - (bytes.len() - overhang);
        // SAFETY: start..2*PAGE lies in the two writable pages.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.add(start),
                bytes.len() - overhang,
            );
            self.base.add(start)
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this.
        unsafe { libc::munmap(self.base.cast(), 3 * PAGE) };
    }
}

/// Everything the fuzzer writes and what it saw.
struct Fuzzer {
    rng: Rng,
    model: Model,
    file: File,
    /// Pids worth naming: the live ones, a thread, gone ones, out of range.
    pool: Vec<i32>,
    guard: Guarded,
    writes: u64,
    efault: u64,
    partial_splits: u64,
}

fn show(bytes: &[u8]) -> String {
    if bytes.len() > 48 {
        format!(
            "{} bytes: {:?}...",
            bytes.len(),
            String::from_utf8_lossy(&bytes[..48])
        )
    } else {
        format!("{:?}", String::from_utf8_lossy(bytes))
    }
}

impl Fuzzer {
    fn pid_text(&mut self) -> String {
        let r = self.rng.below(20);
        match r {
            0 => self.rng.pick(&SPECIAL_PIDS).to_string(),
            1 => {
                let width = self.rng.index(12);
                format!("{:0width$}", self.rng.pick(&self.pool))
            }
            2 => self.rng.next_u64().to_string(),
            3 => (self.rng.next_u64() as i32).to_string(),
            _ => self.rng.pick(&self.pool).to_string(),
        }
    }

    /// A well-formed command (maybe naming a pid that does not exist).
    fn command(&mut self) -> Vec<u8> {
        let op = if self.rng.one_in(2) { 'R' } else { 'U' };
        let pid = self.pid_text();
        let nl = if self.rng.one_in(4) { "" } else { "\n" };
        format!("{op} {pid}{nl}").into_bytes()
    }

    /// A command with a few bytes flipped, inserted, deleted or repeated.
    fn mutated(&mut self) -> Vec<u8> {
        let mut b = self.command();
        for _ in 0..=self.rng.below(3) {
            let at = self.rng.index(b.len() + 1);
            let byte = *self.rng.pick(b"RU \n\0-+x0123456789\t\xff");
            match self.rng.below(5) {
                0 if at < b.len() => b[at] ^= 1 << self.rng.below(8),
                1 => b.insert(at, byte),
                2 if at < b.len() => {
                    b.remove(at);
                }
                3 => {
                    let again = b.clone();
                    b.extend_from_slice(&again);
                }
                _ if at < b.len() => b[at] = byte,
                _ => b.push(byte),
            }
        }
        b
    }

    fn input(&mut self) -> Vec<u8> {
        match self.rng.below(16) {
            0..=5 => self.command(),
            6..=10 => self.mutated(),
            11 => {
                let n = self.rng.index(CMD_MAX + 8);
                self.rng.bytes(n)
            }
            12 => {
                // Huge: up to 1 MiB.
                let bits = 6 + self.rng.below(15);
                let n = CMD_MAX + self.rng.index(1 << bits);
                self.rng.bytes(n)
            }
            13 => {
                // Several commands in one write.
                let mut b = Vec::new();
                for _ in 0..2 + self.rng.below(3) {
                    b.extend(self.command());
                    if self.rng.one_in(3) {
                        b.push(*self.rng.pick(b" ;\0"));
                    }
                }
                b
            }
            14 => Vec::new(),
            _ => self.rng.pick(&ODDITIES).to_vec(),
        }
    }

    fn check(
        &mut self,
        input: &[u8],
        readable: bool,
        got: std::result::Result<usize, i32>,
    ) -> Result<()> {
        self.writes += 1;
        let want = self.model.apply(input, readable);
        let got = got.map(|n| {
            // A proc write either takes the whole command or fails.
            if n == input.len() {
                Ok(())
            } else {
                Err(-1)
            }
        });
        let ok = match (&want, &got) {
            (Ok(()), Ok(Ok(()))) => true,
            (Err(w), Err(g)) => w == g,
            _ => false,
        };
        ensure!(
            ok,
            "write #{} of {} (readable {readable}): model says {want:?}, module did {got:?} (seed {})",
            self.writes,
            show(input),
            self.rng.seed()
        );
        Ok(())
    }

    /// One plain write of `input`.
    fn write(&mut self, input: &[u8]) -> Result<()> {
        let got = write_raw(&self.file, input.as_ptr(), input.len());
        self.check(input, true, got)
    }

    /// `input` with its tail in the inaccessible page, or at a bad address.
    fn write_unreadable(&mut self, input: &[u8]) -> Result<()> {
        if input.is_empty() {
            return Ok(());
        }
        let (ptr, readable) = match self.rng.below(3) {
            0 => (std::ptr::null(), false),
            _ if input.len() > PAGE => (std::ptr::null(), false),
            // A kernel address: access_ok() refuses it whatever the length.
            1 => ((usize::MAX - 4095) as *const u8, false),
            _ => {
                let overhang = 1 + self.rng.index(input.len().min(PAGE));
                (self.guard.straddling(input, overhang), false)
            }
        };
        self.efault += 1;
        let got = write_raw(&self.file, ptr, input.len());
        if ptr as usize > usize::MAX - PAGE {
            // Refused before the module sees the length.
            self.writes += 1;
            ensure!(got == Err(libc::EFAULT), "kernel pointer write: {got:?}");
            return Ok(());
        }
        self.check(input, readable, got)
    }

    /// `input` cut at `at` and written as two commands: by two write()s or
    /// as two iovecs of one writev() (the kernel calls the handler per iovec
    /// and stops at the first failure).
    fn write_split(&mut self, input: &[u8], at: usize) -> Result<()> {
        let (a, b) = input.split_at(at);
        self.partial_splits += 1;
        if self.rng.one_in(2) {
            self.write(a)?;
            return self.write(b);
        }
        let iov = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut _,
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: b.len(),
            },
        ];
        // SAFETY: two iovecs over live slices.
        let got = errno_of(unsafe { libc::writev(self.file.as_raw_fd(), iov.as_ptr(), 2) });
        // Predict the first, then the second only if the first was taken whole.
        self.writes += 1;
        let first = self.model.apply(a, true);
        let want = match first {
            Err(e) => Err(e),
            Ok(()) => {
                self.writes += 1;
                match self.model.apply(b, true) {
                    Ok(()) => Ok(input.len()),
                    Err(_) => Ok(a.len()),
                }
            }
        };
        ensure!(
            got == want,
            "writev of {} | {}: model says {want:?}, module did {got:?} (seed {})",
            show(a),
            show(b),
            self.rng.seed()
        );
        Ok(())
    }

    fn ensure_listing_matches(&self) -> Result<()> {
        let listed: BTreeSet<i32> = kmod::registered()?.into_iter().map(|p| p as i32).collect();
        ensure!(
            listed == self.model.registered,
            "after {} writes the module lists {listed:?}, the model has {:?} (seed {})",
            self.writes,
            self.model.registered,
            self.rng.seed()
        );
        Ok(())
    }

    fn run(&mut self) -> Result<()> {
        while self.writes < WRITES {
            let input = self.input();
            match self.rng.below(10) {
                0 if input.len() > 1 => {
                    let at = 1 + self.rng.index(input.len() - 1);
                    self.write_split(&input, at)?;
                }
                1 => self.write_unreadable(&input)?,
                2 => {
                    // A valid command cut at every offset.
                    let cmd = self.command();
                    for at in 1..cmd.len() {
                        self.write_split(&cmd, at)?;
                    }
                }
                _ => self.write(&input)?,
            }
            if self.writes % 1000 < 3 {
                self.ensure_listing_matches()?;
            }
        }
        self.ensure_listing_matches()
    }
}

/// Pids the parser must refuse or that name nobody.
const SPECIAL_PIDS: [&str; 18] = [
    "-1",
    "0",
    "000",
    "-0",
    "+2",
    "0x2",
    "0X10",
    "1e3",
    "2147483647",
    "2147483648",
    "4294967297",
    "99999999999999999999",
    "00000000000000000000000002",
    " 2",
    "2 ",
    "\t2",
    "\u{0663}",
    "4194305",
];

/// Inputs that are almost commands.
const ODDITIES: [&[u8]; 14] = [
    b"R",
    b"R ",
    b"R \n",
    b"\n",
    b"R 2\n\n",
    b"R 2\r\n",
    b"R 2\0",
    b"\0R 2",
    b"r 2",
    b"RR 2",
    b"R  2",
    b"R 2\nU 2\n",
    b"U 2 U 3",
    b"R\xff2",
];

/// `pfprof-guest hardening-child fuzz`: pid 1 of a new pid namespace.
pub fn fuzz_main() -> Result<()> {
    ensure!(
        std::process::id() == 1,
        "the fuzzer must be pid 1 of its namespace"
    );
    let mut children = Vec::new();
    for _ in 0..CHILDREN {
        let mut c = Profiled::spawn_raw(&["faults", "0", "0", "stay"], None)?;
        ensure!(c.read_line()? == "ready", "child not ready");
        children.push(c);
    }
    // A thread's id names no process.
    let (tid_tx, tid_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let thread = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).ok();
        stop_rx.recv().ok();
    });
    let tid = tid_rx.recv()?;
    // A process that was and is no more.
    let mut gone = Profiled::spawn_raw(&["faults", "0", "0", "exit"], None)?;
    let gone_pid = gone.pid as i32;
    gone.go()?;
    gone.reap()?;

    let mut live: BTreeSet<i32> = children.iter().map(|c| c.pid as i32).collect();
    live.insert(1);
    let mut pool: Vec<i32> = live.iter().copied().collect();
    pool.extend([tid, gone_pid, 4_194_305, i32::MAX]);

    let file = OpenOptions::new()
        .write(true)
        .open(abi::PROC_PATH)
        .context("opening the status file")?;
    let mut fuzzer = Fuzzer {
        rng: Rng::from_env_or_clock(),
        model: Model {
            live,
            registered: BTreeSet::new(),
            accepted: 0,
        },
        file,
        pool,
        guard: Guarded::new()?,
        writes: 0,
        efault: 0,
        partial_splits: 0,
    };
    fuzzer.ensure_listing_matches()?;
    let started = Instant::now();
    fuzzer.run()?;
    println!(
        "{} writes in {:.1} s: {} accepted, {} with unreadable buffers, {} split commands (seed {})",
        fuzzer.writes,
        started.elapsed().as_secs_f64(),
        fuzzer.model.accepted,
        fuzzer.efault,
        fuzzer.partial_splits,
        fuzzer.rng.seed()
    );

    // Leave nothing registered, and the listing says so.
    for pid in std::mem::take(&mut fuzzer.model.registered) {
        kmod::unregister(pid as u32)?;
    }
    fuzzer.ensure_listing_matches()?;
    stop_tx.send(())?;
    thread.join().ok();
    for mut c in children {
        c.go()?;
        c.reap()?;
    }
    Ok(())
}

/// `pfprof-guest hardening-child in-new-pid-ns ARGS...`: runs
/// `pfprof-guest hardening-child ARGS...` as pid 1 of a new pid namespace.
pub fn in_new_pid_ns(args: &[String]) -> Result<ExitCode> {
    // SAFETY: plain syscall; it moves only the children we make from now on.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
        bail!("unshare(CLONE_NEWPID): {}", std::io::Error::last_os_error());
    }
    let status = Command::new(std::env::current_exe()?)
        .arg("hardening-child")
        .args(args)
        .status()?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub fn proc_file_survives_fuzzing_and_registers_exactly_what_valid_commands_asked(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=5"])?;
    // Registered from outside the fuzzer's namespace: it must not see it.
    let mut outsider = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(outsider.pid)?;

    let out = Command::new(std::env::current_exe()?)
        .args(["hardening-child", "in-new-pid-ns", "fuzz"])
        .output()
        .context("running the fuzzer")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "the fuzzer failed: {}{}",
        stdout.trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    crate::harness::figure(&format!("proc fuzzing: {}", stdout.trim()));

    // The module still works: the outsider is still there, a session samples it.
    ensure!(
        kmod::registered()? == [outsider.pid],
        "after fuzzing the module lists {:?}, expected only {}",
        kmod::registered()?,
        outsider.pid
    );
    klog::ensure_module_slab_objects(1, "registration")?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    let mut samples = Vec::new();
    let took = consumer.take(&mut samples, Some(Duration::from_secs(5)))?;
    ensure!(
        matches!(took, Take::Samples(n) if n > 0),
        "no sample after fuzzing: {took:?}"
    );
    kmod::unregister(outsider.pid)?;
    take_until_ended(&mut consumer, &mut samples)?;
    drop((consumer, dev));
    klog::ensure_module_slab_objects(0, "registrations: one leaked")?;
    outsider.go()?;
    outsider.reap()?;
    module.unload()?;
    mark.ensure_clean()
}
