//! Faults injected from outside: monitors SIGKILLed wherever they happen to
//! be, registered processes SIGKILLed while they fault, rmmod attempted while
//! a monitor or the sampler is blocked. After each, a new monitor attaches
//! and works, and nothing is lost that strict mode promised.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::mem::offset_of;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use memmap2::{MmapOptions, MmapRaw};
use shared_layout::abi::{self, AreaHeader};
use shared_layout::device::Device;
use shared_layout::relaxed::RelaxedConsumer;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::{Mode, Sample};

use crate::device::take_until_ended;
use crate::device::Mapping;
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::rng::Rng;

/// Where the test and its chaos monitors share the monitor's phase.
const PHASE_FILE: &str = "/tmp/pfprof-chaos-phase";
/// Monitors killed at a random moment.
const MONITOR_KILLS: u32 = 80;
/// Profiled processes killed while they fault.
const PROCESS_KILLS: u32 = 12;

/// What a chaos monitor is doing, in a word of a file both sides map: the
/// test stops the monitor (SIGSTOP), reads it, then kills it.
const PHASE_TAKE: u32 = 1;
const PHASE_HOLD_LOCK: u32 = 2;
const PHASE_DAWDLE: u32 = 3;
const PHASE_COPY: u32 = 4;

struct Phase {
    map: MmapRaw,
}

impl Phase {
    fn open(path: &str) -> Result<Phase> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("opening {path}"))?;
        file.set_len(8)?;
        Ok(Phase {
            map: MmapOptions::new().len(8).map_raw(&file)?,
        })
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: the mapping is 8 bytes, page aligned, and lives as long as
        // `self`; both processes only access it atomically.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().cast()) }
    }

    fn set(&self, phase: u32) {
        self.word().store(phase, Ordering::SeqCst);
    }

    fn get(&self) -> u32 {
        self.word().load(Ordering::SeqCst)
    }
}

/// `pfprof-guest hardening-child chaos-monitor <strict|relaxed> <seed> <phase file>`:
/// a monitor that mixes everything a monitor does (sleep in WAIT_FULL, copy
/// under the lock, hold the lock, dawdle while the ring fills) at random
/// until it is killed.
pub fn chaos_monitor(mode: &str, seed: &str, phase: &str) -> Result<()> {
    let mode: Mode = mode.parse()?;
    let mut rng = Rng::new(seed.parse()?);
    let phase = Phase::open(phase)?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(mode)?;
    let map = Mapping::new(&*device_fd(&dev)?)?;
    let lock = map.word32(offset_of!(AreaHeader, lock));
    println!("attached");
    std::io::stdout().flush()?;
    let mut strict = StrictConsumer::new(area.clone(), dev.waiter());
    let mut relaxed = RelaxedConsumer::new(area);
    let mut samples: Vec<Sample> = Vec::new();
    loop {
        samples.clear();
        match rng.below(5) {
            0 | 1 => {
                phase.set(PHASE_TAKE);
                if mode == Mode::Strict {
                    let ms = 1 + rng.below(40);
                    strict.take(&mut samples, Some(Duration::from_millis(ms)))?;
                } else {
                    relaxed.drain(&mut samples)?;
                }
            }
            2 => {
                map.lock_as_consumer()?;
                phase.set(PHASE_HOLD_LOCK);
                thread::sleep(Duration::from_micros(rng.below(5000)));
                phase.set(PHASE_TAKE);
                lock.store(abi::LOCK_FREE, Ordering::Release);
            }
            3 => {
                // A slow copy: read every slot, again and again, under the lock.
                map.lock_as_consumer()?;
                phase.set(PHASE_COPY);
                let until = Instant::now() + Duration::from_micros(2000 + rng.below(6000));
                let mut sum = 0u64;
                // The clock is read once per 32 passes: under TCG it may be a
                // real syscall, and the copy is meant to be user-space work.
                while Instant::now() < until {
                    for _ in 0..32 {
                        for offset in (abi::DATA_OFFSET as usize..map.size()).step_by(8) {
                            sum = sum.wrapping_add(map.word64(offset).load(Ordering::Relaxed));
                        }
                    }
                }
                std::hint::black_box(sum);
                phase.set(PHASE_TAKE);
                lock.store(abi::LOCK_FREE, Ordering::Release);
            }
            _ => {
                phase.set(PHASE_DAWDLE);
                thread::sleep(Duration::from_micros(rng.below(5000)));
            }
        }
    }
}

/// The device is single-open, so a second mapping (for the raw lock word)
/// must come from the descriptor `_owner` holds, found in /proc/self/fd.
fn device_fd(_owner: &Device) -> Result<ManuallyDrop<File>> {
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        if std::fs::read_link(entry.path()).is_ok_and(|l| l == Path::new(abi::DEVICE_PATH)) {
            let fd: i32 = entry.file_name().to_str().context("fd name")?.parse()?;
            // SAFETY: `_owner` owns this descriptor and outlives its use here
            // (mapping it); the File is never dropped, so never closes it.
            return Ok(ManuallyDrop::new(unsafe { File::from_raw_fd(fd) }));
        }
    }
    bail!("no descriptor of {} in /proc/self/fd", abi::DEVICE_PATH)
}

/// `pfprof-guest hardening-child full-ring`: a strict monitor that never
/// consumes, reporting the area's counters until it is killed.
pub fn full_ring_monitor() -> Result<()> {
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut out = std::io::stdout().lock();
    loop {
        let c = area.counters();
        writeln!(
            out,
            "{} {} {}",
            c.write_seq,
            area.slot_count(),
            c.blocked_ns
        )?;
        out.flush()?;
        thread::sleep(Duration::from_millis(20));
    }
}

/// Where the monitors were when they died.
#[derive(Default)]
struct Tally {
    holding_lock: u32,
    in_wait_full: u32,
    mid_copy: u32,
    elsewhere: u32,
    rmmod_refused: u32,
}

/// The syscall a stopped process sits in (/proc/<pid>/syscall): -1 in user space.
#[cfg(not(target_arch = "aarch64"))]
fn syscall_of(pid: u32) -> Result<Option<i64>> {
    let path = format!("/proc/{pid}/syscall");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(text.split(' ').next().and_then(|nr| nr.parse().ok()))
}

/// The syscall a signal took a stopped process out of, -1 in user space,
/// None when its registers cannot tell. arm64's signal delivery forgets the
/// syscall before the task stops (do_signal's forget_syscall), so
/// /proc/<pid>/syscall reads -1 for a monitor the SIGSTOP took out of
/// WAIT_FULL; its registers still say: x8 the call, x0 its return, -EINTR
/// when the signal interrupted it, pc just past the `svc`. A stop at a call's
/// normal return cannot be told from one at the next instruction (None); a
/// call the kernel restarts (pc back on its `svc`) reads as user space, and
/// WAIT_FULL's ioctl is never restarted.
#[cfg(target_arch = "aarch64")]
fn syscall_of(pid: u32) -> Result<Option<i64>> {
    use std::os::unix::fs::FileExt;
    const SVC_0: u32 = 0xd400_0001;
    let regs = stopped_registers(pid)?;
    let mut before_pc = [0u8; 4];
    let path = format!("/proc/{pid}/mem");
    File::open(&path)
        .and_then(|mem| mem.read_exact_at(&mut before_pc, regs.pc.wrapping_sub(4)))
        .with_context(|| format!("reading the instruction before pc {:#x} in {path}", regs.pc))?;
    Ok(if u32::from_le_bytes(before_pc) != SVC_0 {
        Some(-1)
    } else if regs.regs[0] as i64 == -i64::from(libc::EINTR) {
        Some(regs.regs[8] as i64)
    } else {
        None
    })
}

/// The user registers of a process stopped by SIGSTOP: seized with ptrace
/// (it stays stopped, for its tracer now), read, and let go to its stop.
#[cfg(target_arch = "aarch64")]
fn stopped_registers(pid: u32) -> Result<libc::user_regs_struct> {
    let pid = pid as libc::pid_t;
    let none = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: plain syscall on our own stopped child, no pointers.
    let seized = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, none, none) };
    ensure!(
        seized == 0,
        "PTRACE_SEIZE {pid}: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: user_regs_struct is plain old data; all-zero is a valid value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: std::ptr::addr_of_mut!(regs).cast(),
        iov_len: size_of::<libc::user_regs_struct>(),
    };
    // SAFETY: the iovec gives a local and its size; the kernel writes no more.
    let read = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            pid,
            libc::NT_PRSTATUS as usize as *mut libc::c_void,
            std::ptr::addr_of_mut!(iov),
        )
    };
    let read_error = std::io::Error::last_os_error();
    // SAFETY: plain syscall on our tracee, no pointers.
    let detached = unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, none, none) };
    ensure!(read == 0, "PTRACE_GETREGSET {pid}: {read_error}");
    ensure!(
        detached == 0,
        "PTRACE_DETACH {pid}: {}",
        std::io::Error::last_os_error()
    );
    Ok(regs)
}

fn signal(pid: u32, sig: i32) -> Result<()> {
    // SAFETY: plain syscall on our own unreaped child.
    let ret = unsafe { libc::kill(pid as i32, sig) };
    ensure!(
        ret == 0,
        "kill {pid} {sig}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

fn wait_stopped(pid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while kmod::stat(pid)?.0 != 'T' {
        ensure!(Instant::now() < deadline, "{pid} does not stop");
        thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// A fresh strict monitor attaches and receives samples.
fn new_monitor_works(what: &str) -> Result<()> {
    let dev = kmod::follow_registrations().with_context(|| format!("attaching after {what}"))?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    let mut samples = Vec::new();
    let took = consumer.take(&mut samples, Some(Duration::from_secs(5)))?;
    ensure!(
        matches!(took, Take::Samples(n) if n > 0),
        "after {what} a new monitor got {took:?}"
    );
    Ok(())
}

/// rmmod while the device is open: refused at once, never a hang.
fn rmmod_is_refused(what: &str) -> Result<()> {
    let started = Instant::now();
    ensure!(kmod::try_rmmod()?.is_err(), "rmmod succeeded while {what}");
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "rmmod took {:?} to refuse while {what}",
        started.elapsed()
    );
    ensure!(
        kmod::is_loaded(),
        "the module is gone after a refused rmmod"
    );
    Ok(())
}

pub fn monitors_sigkilled_anywhere_leave_a_module_the_next_monitor_can_use(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10", "buffer_pages=2"])?;
    let mut churn = Profiled::spawn(&["churn"])?;
    kmod::register(churn.pid)?;
    churn.go()?;
    let mut rng = Rng::from_env_or_clock();
    let mut tally = Tally::default();
    let phase = Phase::open(PHASE_FILE)?;
    for round in 0..MONITOR_KILLS {
        let mode = if rng.one_in(3) { "relaxed" } else { "strict" };
        let seed = rng.next_u64().to_string();
        let mut monitor = Profiled::spawn_mode(
            "hardening-child",
            &["chaos-monitor", mode, &seed, PHASE_FILE],
            None,
        )?;
        let line = monitor.read_line()?;
        ensure!(
            line == "attached",
            "round {round}: chaos monitor said {line:?}"
        );
        thread::sleep(Duration::from_micros(rng.below(150_000)));
        if round % 6 == 0 {
            rmmod_is_refused("a monitor is attached")?;
            tally.rmmod_refused += 1;
        }
        // Stopped, it stays where it was: its phase and syscall are exact.
        signal(monitor.pid, libc::SIGSTOP)?;
        wait_stopped(monitor.pid)?;
        let syscall = syscall_of(monitor.pid)?;
        match phase.get() {
            PHASE_HOLD_LOCK => tally.holding_lock += 1,
            PHASE_TAKE if syscall == Some(libc::SYS_ioctl) => tally.in_wait_full += 1,
            // Holding the lock inside the slow copy, wherever exactly; or in
            // user space inside the library's take/drain.
            PHASE_COPY => tally.mid_copy += 1,
            PHASE_TAKE if syscall == Some(-1) => tally.mid_copy += 1,
            _ => tally.elsewhere += 1,
        }
        monitor.kill()?;
        let reaped = monitor.reap()?;
        ensure!(
            libc::WIFSIGNALED(reaped.status),
            "round {round}: the chaos monitor ended by itself ({:#x}, seed {seed})",
            reaped.status
        );
        new_monitor_works(&format!("round {round} ({mode}, seed {seed})"))?;
    }

    // The sampler blocked on a full strict ring: rmmod is refused, the kill
    // frees it, and the next monitor works.
    let mut full = Profiled::spawn_mode("hardening-child", &["full-ring"], None)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = full.read_line()?;
        let f: Vec<u64> = line.split(' ').map(str::parse).collect::<Result<_, _>>()?;
        if f[0] == f[1] && f[2] > 0 {
            break;
        }
        ensure!(Instant::now() < deadline, "the ring never filled: {line}");
    }
    rmmod_is_refused("the sampler waits for a free slot")?;
    tally.rmmod_refused += 1;
    full.kill()?;
    full.reap()?;
    new_monitor_works("killing a monitor whose ring was full")?;

    crate::harness::figure(&format!(
        "monitor kills: {} (holding the lock {}, asleep in WAIT_FULL {}, mid-copy {}, \
         elsewhere {}, with a full ring 1), rmmod refused {} times",
        MONITOR_KILLS + 1,
        tally.holding_lock,
        tally.in_wait_full,
        tally.mid_copy,
        tally.elsewhere,
        tally.rmmod_refused
    ));
    ensure!(
        tally.holding_lock > 0 && tally.in_wait_full > 0 && tally.mid_copy > 0,
        "a kill point was never hit: lock {}, WAIT_FULL {}, mid-copy {} (seed {})",
        tally.holding_lock,
        tally.in_wait_full,
        tally.mid_copy,
        rng.seed()
    );
    churn.go()?;
    churn.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

pub fn processes_sigkilled_while_faulting_have_every_fault_in_a_strict_sample(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=5", "buffer_pages=2"])?;
    let mut rng = Rng::from_env_or_clock();
    let mut faults = 0;
    for round in 0..PROCESS_KILLS {
        let dev = kmod::follow_registrations()?;
        let area = dev.start(Mode::Strict)?;
        let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
        let mut victim = Profiled::spawn(&["churn"])?;
        let before = victim.wait_asleep()?;
        kmod::register(victim.pid)?;
        victim.go()?;
        let mut samples = Vec::new();
        let until = Instant::now() + Duration::from_millis(20 + rng.below(300));
        while Instant::now() < until {
            consumer.take(&mut samples, Some(Duration::from_millis(10)))?;
        }
        victim.kill()?;
        let reaped = victim.reap()?;
        take_until_ended(&mut consumer, &mut samples).with_context(|| format!("round {round}"))?;
        let got: u64 = samples.iter().map(|s| s.minor).sum();
        let expected = reaped.minflt - before;
        ensure!(
            got == expected,
            "round {round}: samples hold {got} minor faults, wait4 says {expected} (seed {})",
            rng.seed()
        );
        ensure!(
            samples.len() as u64 == area.counters().write_seq,
            "round {round}: received {} of {} samples",
            samples.len(),
            area.counters().write_seq
        );
        faults += got;
    }
    crate::harness::figure(&format!(
        "profiled processes SIGKILLed: {PROCESS_KILLS}, {faults} minor faults, all in strict samples"
    ));
    klog::ensure_module_slab_objects(0, "registrations: a killed process stayed registered")?;
    module.unload()?;
    mark.ensure_clean()
}
