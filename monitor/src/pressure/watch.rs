//! Memory pressure beside the samples: the memory stall time (PSI's `some` and `full`
//! totals, from `/proc/pressure/memory` and from the selected cgroup's `memory.pressure`
//! when there is one) and the swap, refault and reclaim counters of `/proc/vmstat`, read
//! as *readings* (cumulative values at one `CLOCK_MONOTONIC` moment) and apportioned to
//! the rows by [`crate::pressure::apportion`].
//!
//! When readings are taken (docs/monitor.md, "Memory pressure beside the samples"): at every
//! drain of the ring (the consumer wakes then anyway), and, while memory is under pressure,
//! every period by a watcher thread. The watcher sleeps without a timer until a PSI trigger
//! on the same file fires (some stall of [`TRIGGER`]) or a drain sees the stall grow, and
//! goes back to sleep once the stall has not grown for [`QUIET`]: an idle monitor wakes no
//! more often than without it.
//!
//! A fleet's targets share one [`PressurePool`]: one watcher thread for every target's
//! trigger, and one reader of the system-wide counters (the same for every profile),
//! which serves a recent reading again. A single profile has a pool of its own.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use shared_layout::abi;

use crate::pressure::apportion::{self, Reading};
use crate::rows::row::{Pressure, Row, COUNTERS};
use crate::system::procstat::read_whole;

/// The system's memory pressure file.
pub const SYSTEM_PSI: &str = "/proc/pressure/memory";
const VMSTAT: &str = "/proc/vmstat";
/// The PSI trigger that wakes the watcher: 50 ms of `some` stall within 500 ms (the
/// shortest window the kernel takes), so that it fires early in an onset.
const TRIGGER: &str = "some 50000 500000";
/// Unprivileged users may only use windows of whole 2 s (Linux 6.5 on; before, they may
/// set no trigger at all): 150 ms in 2 s, checked by the kernel every 2 s.
const TRIGGER_UNPRIVILEGED: &str = "some 150000 2000000";
/// The name of a pressure pool's watcher thread.
pub const WATCHER_THREAD: &str = "pfprof-pressure";
/// How long the stall must stand still before the watcher goes back to sleep.
pub const QUIET: Duration = Duration::from_secs(1);
/// How long the watcher waits on its bell alone when its triggers cannot be waited on,
/// before it tries them again.
const TRIGGERS_AGAIN: Duration = Duration::from_secs(1);
/// Before the first row, how far back readings are kept for it: its period starts at
/// most a period before its sample, taken at most an interval before the drain.
const BEFORE_FIRST_ROW: Duration = Duration::from_secs(60);

/// The `/proc/vmstat` fields read, in their order in [`Pressure`] (after the four stalls).
const VMSTAT_FIELDS: [&str; 7] = [
    "pswpin",
    "pswpout",
    "workingset_refault_anon",
    "workingset_refault_file",
    "pgscan_kswapd",
    "pgscan_direct",
    "pgmajfault",
];
const FIRST_VMSTAT: usize = COUNTERS - VMSTAT_FIELDS.len();
const _: () = assert!(FIRST_VMSTAT == 4);

/// A PSI file's `some` and `full` totals, µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsiTotals {
    pub some_us: u64,
    /// Absent from CPU pressure before Linux 5.13; always there for memory.
    pub full_us: Option<u64>,
}

/// Parses a PSI file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=123` and the same for
/// `full`.
pub fn parse_psi(text: &str) -> Option<PsiTotals> {
    let total = |kind: &str| {
        let line = text.lines().find(|l| l.starts_with(kind))?;
        let value = line
            .split_ascii_whitespace()
            .find_map(|f| f.strip_prefix("total="))?;
        value.parse::<u64>().ok()
    };
    Some(PsiTotals {
        some_us: total("some ")?,
        full_us: total("full "),
    })
}

/// The [`VMSTAT_FIELDS`] of `/proc/vmstat`, `None` for those the kernel does not have.
pub fn parse_vmstat(text: &str) -> [Option<u64>; VMSTAT_FIELDS.len()] {
    let mut values = [None; VMSTAT_FIELDS.len()];
    for line in text.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        if let Some(i) = VMSTAT_FIELDS.iter().position(|f| *f == name) {
            values[i] = value.trim().parse().ok();
        }
    }
    values
}

/// The system-wide counters (the system's PSI totals and `/proc/vmstat`'s), which every
/// profile of a process reads alike: one reader for all of a fleet's targets, so that a
/// thousand targets do not make and parse the same text a thousand times an interval.
/// A reading no older than `fresh_for` is served again; a single profile's reader
/// (`fresh_for` zero) reads every time, as before.
struct SystemCounters {
    files: Mutex<SystemFiles>,
    fresh_for: Duration,
    /// What a missing file means, said in every summary: the PSI file's, `/proc/vmstat`'s.
    psi_note: Option<String>,
    vmstat_note: Option<String>,
    has_vmstat: bool,
}

struct SystemFiles {
    psi: Option<File>,
    vmstat: Option<File>,
    buf: Vec<u8>,
    /// The last reading: its `CLOCK_MONOTONIC` ns and its values, in [`Pressure`]'s
    /// order with the cgroup's columns empty.
    last: Option<(u64, [Option<u64>; COUNTERS])>,
}

impl SystemCounters {
    /// Opens what this kernel has (`/proc/pressure/memory`, `/proc/vmstat`); what is
    /// missing becomes a note.
    fn open(fresh_for: Duration) -> SystemCounters {
        let mut psi_note = Vec::new();
        let psi = open_noting(
            Path::new(SYSTEM_PSI),
            "no memory stall columns and no thrashing verdict (a kernel without \
             CONFIG_PSI, or one that needs psi=1 on its command line)",
            &mut psi_note,
        );
        let mut vmstat_note = Vec::new();
        let vmstat = open_noting(
            Path::new(VMSTAT),
            "no swap, refault and reclaim columns",
            &mut vmstat_note,
        );
        let mut counters = SystemCounters::from_files(psi, vmstat, fresh_for);
        counters.psi_note = psi_note.pop();
        counters.vmstat_note = vmstat_note.pop();
        counters
    }

    fn from_files(psi: Option<File>, vmstat: Option<File>, fresh_for: Duration) -> SystemCounters {
        SystemCounters {
            has_vmstat: vmstat.is_some(),
            files: Mutex::new(SystemFiles {
                psi,
                vmstat,
                buf: Vec::with_capacity(8192),
                last: None,
            }),
            fresh_for,
            psi_note: None,
            vmstat_note: None,
        }
    }

    /// The note for the `/proc/vmstat` fields the `first` reading found missing.
    fn missing_vmstat(&self, first: &Reading) -> Option<String> {
        let missing: Vec<&str> = VMSTAT_FIELDS
            .iter()
            .zip(&first.totals.values()[FIRST_VMSTAT..])
            .filter(|(_, v)| v.is_none())
            .map(|(name, _)| *name)
            .collect();
        (self.has_vmstat && !missing.is_empty()).then(|| {
            format!(
                "this kernel's /proc/vmstat has no {}: those columns are empty",
                missing.join(", ")
            )
        })
    }

    fn files(&self) -> MutexGuard<'_, SystemFiles> {
        // A reading is kept whole or not at all: a panic elsewhere leaves nothing torn.
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn has_psi(&self) -> bool {
        self.files().psi.is_some()
    }

    /// The system's counters taken at or after `not_before` (`CLOCK_MONOTONIC` ns): the
    /// last reading when it was and is no older than `fresh_for`, else a new one. `None`
    /// when a file that was there cannot be read (no reading is better than one that
    /// says a counter vanished).
    fn read(&self, not_before: u64) -> Option<[Option<u64>; COUNTERS]> {
        let mut files = self.files();
        let now = abi::monotonic_ns();
        let fresh_ns = u64::try_from(self.fresh_for.as_nanos()).unwrap_or(u64::MAX);
        if let Some((at, values)) = files.last {
            if at >= not_before && now.saturating_sub(at) <= fresh_ns && !self.fresh_for.is_zero() {
                return Some(values);
            }
        }
        let SystemFiles {
            psi, vmstat, buf, ..
        } = &mut *files;
        let mut values = [None; COUNTERS];
        if let Some(f) = psi {
            let totals = parse_psi(&read_text(f, buf).ok()?)?;
            values[0] = Some(totals.some_us);
            values[1] = totals.full_us;
        }
        if let Some(f) = vmstat {
            let text = read_text(f, buf).ok()?;
            values[FIRST_VMSTAT..].copy_from_slice(&parse_vmstat(&text));
        }
        files.last = Some((now, values));
        Some(values)
    }
}

/// `path` opened, or `None` and a note saying `what` its absence means.
fn open_noting(path: &Path, what: &str, notes: &mut Vec<String>) -> Option<File> {
    match File::open(path) {
        Ok(f) => Some(f),
        Err(e) => {
            notes.push(format!("{} cannot be read ({e}): {what}", path.display()));
            None
        }
    }
}

fn read_text(file: &File, buf: &mut Vec<u8>) -> io::Result<String> {
    String::from_utf8(read_whole(file, buf)?.to_vec())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The files a reading comes from: the system's, shared, and the cgroup's, kept open.
struct Sources {
    system: Arc<SystemCounters>,
    cgroup: Option<File>,
    buf: Vec<u8>,
}

impl Sources {
    /// Opens the `cgroup`'s `memory.pressure` when given; what is missing becomes one of
    /// the `notes`. Also where the stall trigger is set: the cgroup's PSI file when it is
    /// read, else the system's.
    fn open(
        system: Arc<SystemCounters>,
        cgroup: Option<&Path>,
        notes: &mut Vec<String>,
    ) -> (Sources, Option<PathBuf>) {
        let cgroup_psi = cgroup.map(|c| c.join("memory.pressure"));
        let cgroup_file = cgroup_psi.as_deref().and_then(|p| {
            open_noting(
                p,
                "no cgroup stall columns (cgroup v2 with PSI needed)",
                notes,
            )
        });
        let trigger_path = match (cgroup_psi, &cgroup_file, system.has_psi()) {
            (Some(path), Some(_), _) => Some(path),
            (_, _, true) => Some(PathBuf::from(SYSTEM_PSI)),
            _ => None,
        };
        let sources = Sources {
            system,
            cgroup: cgroup_file,
            buf: Vec::with_capacity(512),
        };
        (sources, trigger_path)
    }

    /// Every counter now, the system's taken at or after `not_before`; `None` when a
    /// file that was there cannot be read.
    fn read(&mut self, not_before: u64) -> Option<Reading> {
        let mono_ns = abi::monotonic_ns();
        let mut values = self.system.read(not_before)?;
        if let Some(f) = &self.cgroup {
            let totals = parse_psi(&read_text(f, &mut self.buf).ok()?)?;
            values[2] = Some(totals.some_us);
            values[3] = totals.full_us;
        }
        Some(Reading {
            mono_ns,
            totals: Pressure::from_values(values),
        })
    }
}

/// A PSI trigger: readable (POLLPRI) when its stall threshold was crossed in its window.
struct Trigger(File);

impl Trigger {
    /// A trigger on `path`; that there is none becomes one of the `notes`, what it means
    /// that it is unprivileged the `coarse` note, which matters only where there was
    /// stall.
    fn arm(path: &Path, notes: &mut Vec<String>, coarse: &mut Option<String>) -> Option<Trigger> {
        match Trigger::set(path) {
            Ok((trigger, unprivileged)) => {
                if unprivileged {
                    *coarse = Some(format!(
                        "this user's PSI trigger ({TRIGGER_UNPRIVILEGED}) is checked by the \
                         kernel every 2 s: memory stall is read every period from up to \
                         2 s after it begins (CAP_SYS_RESOURCE: from 50 ms)"
                    ));
                }
                Some(trigger)
            }
            Err(why) => {
                notes.push(format!(
                    "{why}: memory stall is read at every --interval until a reading sees \
                     it grow, so the onset of pressure is placed within an interval, not a \
                     period"
                ));
                None
            }
        }
    }

    /// A trigger on `path` (and whether it had to be [`TRIGGER_UNPRIVILEGED`]), or why
    /// there is none.
    fn set(path: &Path) -> Result<(Trigger, bool), String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::PermissionDenied => format!(
                    "{} takes no PSI trigger from this user (it needs CAP_SYS_RESOURCE \
                     before Linux 6.5)",
                    path.display()
                ),
                _ => format!("{} takes no PSI trigger: {e}", path.display()),
            })?;
        // The kernel reads the text up to its NUL; a user without CAP_SYS_RESOURCE gets
        // EINVAL for a window that is not whole 2 s.
        let mut written = (&file).write(format!("{TRIGGER}\0").as_bytes());
        let unprivileged = matches!(&written, Err(e) if e.raw_os_error() == Some(libc::EINVAL));
        if unprivileged {
            written = (&file).write(format!("{TRIGGER_UNPRIVILEGED}\0").as_bytes());
        }
        written.map_err(|e| format!("{} takes no PSI trigger: {e}", path.display()))?;
        Ok((Trigger(file), unprivileged))
    }
}

/// The readings and the files they come from, shared by the consumer and the watcher.
struct Log {
    sources: Sources,
    readings: Vec<Reading>,
    /// The end of the last row given its share: no later row starts before it.
    last_end: Option<u64>,
}

impl Log {
    /// Takes a reading and keeps it, the system's counters taken at or after
    /// `not_before`; whether memory stall grew since the one before.
    fn take(&mut self, not_before: u64) -> bool {
        self.take_placed(false, not_before)
    }

    /// Takes a reading and keeps it; `triggered`: a PSI trigger just fired, so the stall
    /// since the previous reading came in a burst at its end (else the trigger would
    /// have fired before), and the growth is placed as late as it can be (see
    /// [`latest_start`]) instead of spread over the whole stretch.
    fn take_placed(&mut self, triggered: bool, not_before: u64) -> bool {
        let Some(reading) = self.sources.read(not_before) else {
            return false;
        };
        let before = self.readings.last().copied();
        if let Some(start) = before
            .filter(|_| triggered)
            .and_then(|b| latest_start(&b, &reading))
        {
            self.readings.push(start);
        }
        self.readings.push(reading);
        before.is_some_and(|before| stall_grew(&before, &reading))
    }
}

/// Stall cannot grow faster than time passes: a growth of G µs since `before` began at
/// least G before `after`. A reading at that moment holding `before`'s values puts the
/// growth of every counter there; `None` when there is no growth, or the stretch is no
/// longer than it.
fn latest_start(before: &Reading, after: &Reading) -> Option<Reading> {
    let growth = |b: Option<u64>, a: Option<u64>| a?.checked_sub(b?);
    let b = &before.totals;
    let a = &after.totals;
    let grown_us = [
        growth(b.stall_some_us, a.stall_some_us),
        growth(b.cgroup_stall_some_us, a.cgroup_stall_some_us),
    ]
    .into_iter()
    .flatten()
    .max()
    .filter(|&g| g > 0)?;
    let mono_ns = after.mono_ns.checked_sub(grown_us.checked_mul(1000)?)?;
    (mono_ns > before.mono_ns).then_some(Reading {
        mono_ns,
        totals: before.totals,
    })
}

/// Whether some memory stall (system-wide or in the cgroup) grew between two readings.
fn stall_grew(before: &Reading, after: &Reading) -> bool {
    let some = |r: &Reading| [r.totals.stall_some_us, r.totals.cgroup_stall_some_us];
    some(before)
        .into_iter()
        .zip(some(after))
        .any(|(b, a)| matches!((b, a), (Some(b), Some(a)) if a > b))
}

/// What the pressure watches of many profiles share: the system-wide counters' reader
/// and the one watcher thread. A fleet has one for all its targets; a single profile has
/// its own.
#[derive(Clone)]
pub struct PressurePool {
    system: Arc<SystemCounters>,
    watchers: Arc<Watchers>,
}

impl PressurePool {
    /// A reading of the system-wide counters is served again for `fresh_for`; the
    /// watcher thread starts with the first profile that has a PSI file to watch.
    pub fn new(fresh_for: Duration) -> io::Result<PressurePool> {
        PressurePool::with_system(SystemCounters::open(fresh_for))
    }

    fn with_system(system: SystemCounters) -> io::Result<PressurePool> {
        Ok(PressurePool {
            system: Arc::new(system),
            watchers: Arc::new(Watchers {
                inbox: Arc::new(Inbox {
                    joining: Mutex::new(Vec::new()),
                    bell: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
                    stop: AtomicBool::new(false),
                }),
                thread: Mutex::new(None),
            }),
        })
    }
}

/// One profile's readings, and what its drains and the watcher thread tell each other.
struct Shared {
    log: Mutex<Log>,
    /// The watcher reads every period.
    active: AtomicBool,
    /// A drain saw the stall grow.
    rung: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn log(&self) -> MutexGuard<'_, Log> {
        // A reading is pushed whole or not at all: a panic elsewhere leaves nothing torn.
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The watcher thread of every profile of a [`PressurePool`]; the last profile's (or
/// fleet's) drop stops it.
struct Watchers {
    inbox: Arc<Inbox>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the watcher thread is told.
struct Inbox {
    /// Profiles to start watching.
    joining: Mutex<Vec<Watched>>,
    /// Sounded when a profile joins, rings or stops, and to stop the thread.
    bell: EventFd,
    stop: AtomicBool,
}

impl Inbox {
    fn sound_bell(&self) {
        // Cannot fail short of the counter overflowing, which the watcher's read resets.
        let _ = self.bell.write(1);
    }

    fn joining(&self) -> MutexGuard<'_, Vec<Watched>> {
        self.joining.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A profile the watcher watches.
struct Watched {
    shared: Arc<Shared>,
    trigger: Option<Trigger>,
    period: Duration,
    /// While it is read every period.
    active: Option<Active>,
}

struct Active {
    /// The trigger fired: the first reading places the stall's onset.
    triggered: bool,
    /// When the stall last grew (or the watch became active).
    quiet_since: Instant,
    next: Instant,
}

impl Watchers {
    /// Watches `shared`'s profile from now, starting the thread if it is the first.
    fn watch(
        &self,
        shared: Arc<Shared>,
        trigger: Option<Trigger>,
        period: Duration,
    ) -> io::Result<()> {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.is_none() {
            let inbox = Arc::clone(&self.inbox);
            *thread = Some(
                thread::Builder::new()
                    .name(WATCHER_THREAD.into())
                    .spawn(move || watch_all(&inbox))?,
            );
        }
        self.inbox.joining().push(Watched {
            shared,
            trigger,
            period,
            active: None,
        });
        self.inbox.sound_bell();
        Ok(())
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        self.inbox.stop.store(true, Ordering::Release);
        self.inbox.sound_bell();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(thread) = thread.take() {
            // The watcher only reads files and sleeps: it ends at the bell.
            let _ = thread.join();
        }
    }
}

/// Memory pressure for one profile: readings at every drain and, under pressure, every
/// period; [`PressureWatch::fill`] gives each row its share.
pub struct PressureWatch {
    shared: Arc<Shared>,
    watchers: Arc<Watchers>,
    notes: Vec<String>,
    /// The trigger is this user's coarse one: said only of a profile that saw stall.
    coarse: Option<String>,
}

impl PressureWatch {
    /// Reads the `pool`'s system-wide counters and the `cgroup`'s `memory.pressure` when
    /// given, takes a first reading and has the pool's watcher thread read every
    /// `period` while under pressure. What is missing becomes a note for the summary,
    /// never an error: the profile goes on without it. Fails only when the watcher
    /// thread cannot be had.
    pub fn start(
        pool: &PressurePool,
        cgroup: Option<&Path>,
        period: Duration,
    ) -> io::Result<PressureWatch> {
        let system = Arc::clone(&pool.system);
        let mut notes: Vec<String> = system.psi_note.iter().cloned().collect();
        let (mut sources, trigger_path) = Sources::open(system, cgroup, &mut notes);
        notes.extend(sources.system.vmstat_note.clone());
        let first = sources.read(0);
        notes.extend((first.as_ref()).and_then(|first| sources.system.missing_vmstat(first)));
        let mut coarse = None;
        let trigger = trigger_path.and_then(|path| Trigger::arm(&path, &mut notes, &mut coarse));
        let has_psi = sources.system.has_psi() || sources.cgroup.is_some();
        let log = Log {
            sources,
            readings: first.into_iter().collect(),
            last_end: None,
        };
        let shared = Arc::new(Shared {
            log: Mutex::new(log),
            active: AtomicBool::new(false),
            rung: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        // Without PSI there is no stall to watch for: readings come at the drains.
        if has_psi {
            (pool.watchers).watch(Arc::clone(&shared), trigger, period)?;
        }
        Ok(PressureWatch {
            shared,
            watchers: Arc::clone(&pool.watchers),
            notes,
            coarse,
        })
    }

    /// Takes a reading now (after the rows were taken from the ring: it comes after each
    /// of their ends) and gives each row its share of the counters' growth; rows must come
    /// in order. Wakes the watcher when the stall grew.
    pub fn fill(&self, rows: &mut [Row]) {
        let mut log = self.shared.log();
        let grew = log.take(rows.last().map_or(0, |row| row.mono_ns));
        for row in rows.iter_mut() {
            let start = row.mono_ns.saturating_sub(row.period_ns);
            row.pressure = apportion::share(&log.readings, start, row.mono_ns);
        }
        if let Some(last) = rows.last() {
            log.last_end = Some(last.mono_ns);
        }
        // What no later row can need, so that a profile waiting long for its first
        // sample, or for its next, keeps no more than it must.
        let keep_from = log.last_end.unwrap_or_else(|| {
            let before = u64::try_from(BEFORE_FIRST_ROW.as_nanos()).unwrap_or(u64::MAX);
            abi::monotonic_ns().saturating_sub(before)
        });
        apportion::forget_before(&mut log.readings, keep_from);
        drop(log);
        if grew && !self.shared.active.load(Ordering::Acquire) {
            self.shared.rung.store(true, Ordering::Release);
            self.watchers.inbox.sound_bell();
        }
    }

    /// Stops watching; what the summary should say about the pressure columns, the
    /// trigger's coarseness only when the profile `stalled` (elsewhere it changed
    /// nothing: a note on every unprivileged user's summary was noise).
    pub fn finish(mut self, stalled: bool) -> Vec<String> {
        self.stop();
        let mut notes = std::mem::take(&mut self.notes);
        notes.extend(self.coarse.take().filter(|_| stalled));
        notes
    }

    /// The watcher lets go of it at its next wake-up (and a single profile's thread ends
    /// with the last handle to its pool).
    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.watchers.inbox.sound_bell();
    }
}

impl Drop for PressureWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The watcher: asleep on every watched profile's trigger and on the bell while none is
/// under pressure; once a trigger fires or a drain rings (it saw the stall grow), a
/// reading of that profile every `period`, on absolute deadlines, until its stall has
/// stood still for [`QUIET`].
fn watch_all(inbox: &Inbox) {
    let mut watched: Vec<Watched> = Vec::new();
    while !inbox.stop.load(Ordering::Acquire) {
        watched.append(&mut inbox.joining());
        watched.retain(|w| !w.shared.stop.load(Ordering::Acquire));
        let next = (watched.iter())
            .filter_map(|w| w.active.as_ref().map(|a| a.next))
            .min();
        // Idle: no timer.
        let left = next.map(|next| next.saturating_duration_since(Instant::now()));
        let mut fired = wait(inbox, &watched, poll_timeout(left)).unwrap_or_else(|_| {
            // The triggers cannot be waited on now (more than the open-file limit, no
            // memory): the bell alone for a while, then the triggers again. The thread
            // must not end: every profile's readings under pressure count on it.
            let mut bell = [PollFd::new(inbox.bell.as_fd(), PollFlags::POLLIN)];
            let left = left.map_or(TRIGGERS_AGAIN, |left| left.min(TRIGGERS_AGAIN));
            if poll(&mut bell, poll_timeout(Some(left))).is_err() {
                thread::sleep(left);
            }
            vec![PollFlags::empty(); watched.len()]
        });
        // What fired, fired before this: one system reading from now on serves every
        // trigger of this wake-up, not one new reading each.
        let woke_ns = abi::monotonic_ns();
        let _ = inbox.bell.read();
        // Those that joined while it slept: a drain of theirs may have rung already.
        watched.append(&mut inbox.joining());
        fired.resize(watched.len(), PollFlags::empty());
        let now = Instant::now();
        for (w, fired) in watched.iter_mut().zip(fired) {
            // A trigger whose file went away (a cgroup removed) would wake it for ever.
            let broken = PollFlags::POLLERR | PollFlags::POLLNVAL | PollFlags::POLLHUP;
            if fired.intersects(broken) {
                w.trigger = None;
            }
            let triggered = fired.contains(PollFlags::POLLPRI);
            // Rung while it was becoming active: nothing more to do.
            let rung = w.shared.rung.swap(false, Ordering::AcqRel);
            if (triggered || rung) && w.active.is_none() {
                w.shared.active.store(true, Ordering::Release);
                w.active = Some(Active {
                    triggered,
                    quiet_since: now,
                    next: now,
                });
            }
            read_when_due(w, now, woke_ns);
        }
    }
}

/// poll()'s timeout for `left`, rounded up to a millisecond; none for `None`.
fn poll_timeout(left: Option<Duration>) -> PollTimeout {
    left.map_or(PollTimeout::NONE, |left| {
        let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
    })
}

/// Sleeps until `timeout`, a trigger of `watched` fires or the bell sounds; each
/// watched profile's trigger's events, in order (empty for one without a trigger).
fn wait(inbox: &Inbox, watched: &[Watched], timeout: PollTimeout) -> nix::Result<Vec<PollFlags>> {
    let triggers = (watched.iter()).filter_map(|w| w.trigger.as_ref());
    let mut fds: Vec<PollFd> = std::iter::once(PollFd::new(inbox.bell.as_fd(), PollFlags::POLLIN))
        .chain(triggers.map(|t| PollFd::new(t.0.as_fd(), PollFlags::POLLPRI)))
        .collect();
    match poll(&mut fds, timeout) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(e),
    }
    let mut events = fds[1..]
        .iter()
        .map(|fd| fd.revents().unwrap_or(PollFlags::empty()));
    Ok((watched.iter())
        .map(|w| match w.trigger {
            Some(_) => events.next().unwrap_or(PollFlags::empty()),
            None => PollFlags::empty(),
        })
        .collect())
}

/// An active profile's reading when its deadline has come, the next a period on (missed
/// deadlines are skipped, not caught up); back to idle once its stall has stood still
/// for [`QUIET`]. `woke_ns`: when the watcher woke, after any trigger that fired.
fn read_when_due(w: &mut Watched, now: Instant, woke_ns: u64) {
    let Some(active) = w.active.as_mut().filter(|a| a.next <= now) else {
        return;
    };
    let triggered = std::mem::take(&mut active.triggered);
    // A trigger's reading places the burst that fired it: the system's counters read
    // since the wake-up, not a reading from before it served again.
    let not_before = if triggered { woke_ns } else { 0 };
    if w.shared.log().take_placed(triggered, not_before) {
        active.quiet_since = Instant::now();
    }
    if active.quiet_since.elapsed() >= QUIET {
        w.active = None;
        w.shared.active.store(false, Ordering::Release);
        return;
    }
    active.next += w.period;
    let now = Instant::now();
    if active.next < now {
        active.next = now + w.period;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMORY: &str = "some avg10=1.50 avg60=0.40 avg300=0.08 total=1234567\n\
                          full avg10=1.20 avg60=0.30 avg300=0.06 total=987654\n";

    #[test]
    fn psi_totals_are_read_from_both_lines() {
        assert_eq!(
            parse_psi(MEMORY),
            Some(PsiTotals {
                some_us: 1_234_567,
                full_us: Some(987_654),
            })
        );
    }

    #[test]
    fn psi_without_a_full_line_has_some_alone_and_garbage_has_nothing() {
        let cpu_before_5_13 = "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n";
        assert_eq!(
            parse_psi(cpu_before_5_13),
            Some(PsiTotals {
                some_us: 42,
                full_us: None,
            })
        );
        assert_eq!(parse_psi(""), None);
        assert_eq!(parse_psi("some avg10=0.00 total=lots\n"), None);
    }

    #[test]
    fn vmstat_fields_are_picked_by_name_and_missing_ones_are_none() {
        // A kernel before 5.9 counts refaults in one workingset_refault: the anonymous
        // and file columns stay None.
        let text = "nr_free_pages 988748\npswpin 7\npswpout 11\nworkingset_refault 5\n\
                    pgmajfault 3479\npgscan_kswapd 100\npgscan_direct 2\n\
                    pgscan_direct_throttle 9\n";
        assert_eq!(
            parse_vmstat(text),
            [
                Some(7),
                Some(11),
                None,
                None,
                Some(100),
                Some(2),
                Some(3479)
            ]
        );
    }

    /// Files standing in for /proc's, written by the test.
    struct Fake(PathBuf);

    impl Fake {
        fn new(name: &str) -> Fake {
            let dir =
                std::env::temp_dir().join(format!("pfprof-pressure-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Fake(dir)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn psi(some: u64, full: u64) -> String {
        format!(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"
        )
    }

    #[test]
    fn a_reading_puts_the_system_the_cgroup_and_vmstat_in_their_columns() {
        let fake = Fake::new("columns");
        let system = SystemCounters::from_files(
            Some(File::open(fake.write("system", &psi(10, 5))).unwrap()),
            Some(File::open(fake.write("vmstat", "pswpout 8\npgmajfault 9\n")).unwrap()),
            Duration::ZERO,
        );
        let mut sources = Sources {
            system: Arc::new(system),
            cgroup: Some(File::open(fake.write("cgroup", &psi(3, 2))).unwrap()),
            buf: Vec::new(),
        };
        let reading = sources.read(0).unwrap();
        assert_eq!(
            reading.totals,
            Pressure {
                stall_some_us: Some(10),
                stall_full_us: Some(5),
                cgroup_stall_some_us: Some(3),
                cgroup_stall_full_us: Some(2),
                pswpout: Some(8),
                pgmajfault: Some(9),
                ..Pressure::default()
            }
        );
        // A file that was there and no longer parses: no reading rather than a wrong one.
        fake.write("cgroup", "gone");
        assert_eq!(sources.read(0), None);
    }

    #[test]
    fn the_system_counters_are_read_once_for_every_reader_while_fresh_and_late_enough() {
        let fake = Fake::new("shared");
        let vmstat = |pswpin: u64| {
            let path = fake.write("vmstat", &format!("pswpin {pswpin}\n"));
            Some(File::open(path).unwrap())
        };
        let system = Arc::new(SystemCounters::from_files(
            None,
            vmstat(1),
            Duration::from_secs(3600),
        ));
        let mut targets: Vec<Sources> = (0..3)
            .map(|_| Sources {
                system: Arc::clone(&system),
                cgroup: None,
                buf: Vec::new(),
            })
            .collect();
        let before = abi::monotonic_ns();
        // The first target's reading is the first of the counters...
        assert_eq!(targets[0].read(0).unwrap().totals.pswpin, Some(1));
        fake.write("vmstat", "pswpin 2\n");
        // ...and every other target is served it again...
        for target in &mut targets[1..] {
            let reading = target.read(0).unwrap();
            assert_eq!(reading.totals.pswpin, Some(1));
            assert!(reading.mono_ns >= before, "each reading is its own moment");
        }
        // ...but a target whose rows end after it gets a new one, which the others are
        // then served.
        let after = abi::monotonic_ns();
        assert_eq!(targets[0].read(after).unwrap().totals.pswpin, Some(2));
        fake.write("vmstat", "pswpin 3\n");
        assert_eq!(targets[1].read(after).unwrap().totals.pswpin, Some(2));
        // A single profile's (fresh for no time) reads every time.
        let own = SystemCounters::from_files(None, vmstat(4), Duration::ZERO);
        fake.write("vmstat", "pswpin 5\n");
        assert_eq!(own.read(0).unwrap()[FIRST_VMSTAT], Some(5));
        fake.write("vmstat", "pswpin 6\n");
        assert_eq!(own.read(0).unwrap()[FIRST_VMSTAT], Some(6));
    }

    #[test]
    fn a_reading_of_the_system_counters_is_served_again_no_longer_than_it_is_fresh() {
        let fake = Fake::new("fresh");
        let path = fake.write("vmstat", "pswpin 1\n");
        let fresh_for = Duration::from_millis(200);
        let system = SystemCounters::from_files(None, Some(File::open(path).unwrap()), fresh_for);
        assert_eq!(system.read(0).unwrap()[FIRST_VMSTAT], Some(1));
        fake.write("vmstat", "pswpin 2\n");
        thread::sleep(fresh_for + Duration::from_millis(50));
        assert_eq!(
            system.read(0).unwrap()[FIRST_VMSTAT],
            Some(2),
            "older than it is fresh: read again"
        );
    }

    /// The pressure pools' watcher threads: no other test in this process starts one.
    fn watcher_threads() -> usize {
        crate::system::threads_named(WATCHER_THREAD).len()
    }

    /// Waits up to 10 s for `done`.
    fn within_10_s(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "after 10 s: {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Held by each test that makes a pool: one counts the watcher threads by name.
    static POOL_TESTS: Mutex<()> = Mutex::new(());

    fn one_pool_test_at_a_time() -> MutexGuard<'static, ()> {
        POOL_TESTS.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A profile's shared state on `system`'s counters alone, its first reading taken.
    fn shared_on(system: SystemCounters, rung: bool) -> Arc<Shared> {
        let mut log = Log {
            sources: Sources {
                system: Arc::new(system),
                cgroup: None,
                buf: Vec::new(),
            },
            readings: Vec::new(),
            last_end: None,
        };
        log.take(0);
        Arc::new(Shared {
            log: Mutex::new(log),
            active: AtomicBool::new(false),
            rung: AtomicBool::new(rung),
            stop: AtomicBool::new(false),
        })
    }

    #[test]
    fn a_triggered_reading_reads_the_system_counters_anew_however_fresh_the_last() {
        let fake = Fake::new("triggered");
        let path = fake.write("system", &psi(10, 0));
        let fresh_for = Duration::from_secs(3600);
        let system = SystemCounters::from_files(Some(File::open(path).unwrap()), None, fresh_for);
        let shared = shared_on(system, false);
        // The burst that fired the trigger.
        fake.write("system", &psi(500, 0));
        let now = Instant::now();
        let mut watched = Watched {
            shared: Arc::clone(&shared),
            trigger: None,
            period: Duration::from_millis(10),
            active: Some(Active {
                triggered: true,
                quiet_since: now,
                next: now,
            }),
        };
        // The watcher wakes after the trigger fired.
        read_when_due(&mut watched, now, abi::monotonic_ns());
        let log = shared.log();
        let last = log.readings.last().unwrap();
        assert_eq!(
            last.totals.stall_some_us,
            Some(500),
            "the burst, read after it"
        );
    }

    #[test]
    fn a_profile_that_joined_and_rang_before_the_watcher_woke_is_read() {
        let _alone = one_pool_test_at_a_time();
        let fake = Fake::new("joined");
        let path = fake.write("system", &psi(10, 0));
        let open = || File::open(&path).unwrap();
        let period = Duration::from_millis(10);
        let pool = PressurePool::with_system(SystemCounters::from_files(
            Some(open()),
            None,
            Duration::ZERO,
        ))
        .unwrap();
        // A first profile, the thread started and idle on its bell.
        let _first = PressureWatch::start(&pool, None, period).unwrap();
        thread::sleep(Duration::from_millis(100));
        // A second joins, and one of its drains rings, both before the watcher wakes: one
        // bell for the two.
        let system = SystemCounters::from_files(Some(open()), None, Duration::ZERO);
        let joined = shared_on(system, true);
        pool.watchers.inbox.joining().push(Watched {
            shared: Arc::clone(&joined),
            trigger: None,
            period,
            active: None,
        });
        pool.watchers.inbox.sound_bell();
        within_10_s("the rung profile read every period", || {
            joined.active.load(Ordering::Acquire)
        });
        joined.stop.store(true, Ordering::Release);
    }

    #[test]
    fn one_watcher_thread_reads_every_rung_profile_and_lets_go_of_ended_ones() {
        let _alone = one_pool_test_at_a_time();
        let fake = Fake::new("pool");
        let system_psi = fake.write("system", &psi(10, 0));
        let system = SystemCounters::from_files(
            Some(File::open(&system_psi).unwrap()),
            None,
            Duration::ZERO,
        );
        let pool = PressurePool::with_system(system).unwrap();
        let before = watcher_threads();
        let period = Duration::from_millis(10);
        let watches: Vec<PressureWatch> = (0..100)
            .map(|_| PressureWatch::start(&pool, None, period).unwrap())
            .collect();
        // The stall grew: every drain rings, and every profile is read every period. It
        // goes on growing while they are looked at: a loaded machine may keep the watcher
        // off its CPU for longer than QUIET, after which a still stall sends it to sleep.
        fake.write("system", &psi(20, 0));
        for watch in &watches {
            watch.fill(&mut []);
        }
        let looked_at = AtomicBool::new(false);
        thread::scope(|scope| {
            // Bounded: a failed look ends the scope once this ends too.
            scope.spawn(|| {
                for stall in 21..2_021 {
                    if looked_at.load(Ordering::Acquire) {
                        break;
                    }
                    std::fs::write(&system_psi, psi(stall, 0)).unwrap();
                    thread::sleep(period);
                }
            });
            for (i, watch) in watches.iter().enumerate() {
                within_10_s(&format!("profile {i} read every period"), || {
                    watch.shared.log().readings.len() >= 5
                });
            }
            looked_at.store(true, Ordering::Release);
        });
        // Counted once every profile was read: a thread is named once it runs.
        assert_eq!(watcher_threads(), before + 1, "one thread for 100 profiles");
        // The stall stands still: each goes back to sleep after QUIET.
        within_10_s("every profile idle again", || {
            !(watches.iter()).any(|w| w.shared.active.load(Ordering::Acquire))
        });
        let ended: Vec<_> = (watches.into_iter())
            .map(|watch| Arc::downgrade(&watch.shared))
            .collect();
        within_10_s("every ended profile let go of", || {
            ended.iter().all(|shared| shared.upgrade().is_none())
        });
        drop(pool);
        // Joined, it may still be listed for a moment.
        within_10_s("the thread ended with its pool", || {
            watcher_threads() == before
        });
    }

    #[test]
    fn only_a_growing_some_stall_counts_as_growth() {
        let reading = |some, cgroup_some| Reading {
            mono_ns: 0,
            totals: Pressure {
                stall_some_us: Some(some),
                cgroup_stall_some_us: cgroup_some,
                pswpin: Some(some * 7),
                ..Pressure::default()
            },
        };
        assert!(!stall_grew(&reading(5, None), &reading(5, None)));
        assert!(stall_grew(&reading(5, None), &reading(6, None)));
        assert!(stall_grew(&reading(5, Some(1)), &reading(5, Some(2))));
        assert!(!stall_grew(&reading(6, None), &reading(5, None)));
    }

    #[test]
    fn stall_a_trigger_fired_for_is_placed_at_the_end_of_its_stretch_not_spread_over_it() {
        const MS: u64 = 1_000_000;
        let reading = |ms: u64, some_us: u64, pswpout: u64| Reading {
            mono_ns: ms * MS,
            totals: Pressure {
                stall_some_us: Some(some_us),
                pswpout: Some(pswpout),
                ..Pressure::default()
            },
        };
        // 200 ms of stall (and 500 swap-outs) in the second since the last reading.
        let (before, after) = (reading(1000, 50, 7), reading(2000, 200_050, 507));
        let start = latest_start(&before, &after).unwrap();
        assert_eq!(start, reading(1800, 50, 7));
        let readings = [before, start, after];
        let share = |from: u64, to: u64| apportion::share(&readings, from * MS, to * MS);
        assert_eq!(
            share(1000, 1800),
            Pressure {
                stall_some_us: Some(0),
                pswpout: Some(0),
                ..Pressure::default()
            }
        );
        // At the most it can be: all of the last 200 ms.
        assert_eq!(share(1950, 2000).stall_some_us, Some(50_000));
        // Stall as long as the stretch, or none: nothing to place.
        assert_eq!(latest_start(&before, &reading(1200, 200_050, 8)), None);
        assert_eq!(latest_start(&before, &reading(2000, 50, 8)), None);
    }

    #[test]
    fn without_psi_rows_get_vmstat_shares_and_empty_stall_columns() {
        let fake = Fake::new("no-psi");
        let vmstat = fake.write("vmstat", "pswpin 100\n");
        let mut log = Log {
            sources: Sources {
                system: Arc::new(SystemCounters::from_files(
                    None,
                    Some(File::open(&vmstat).unwrap()),
                    Duration::ZERO,
                )),
                cgroup: None,
                buf: Vec::new(),
            },
            readings: Vec::new(),
            last_end: None,
        };
        assert!(!log.take(0));
        fake.write("vmstat", "pswpin 160\n");
        assert!(!log.take(0), "no stall to grow");
        let [first, second] = [log.readings[0].mono_ns, log.readings[1].mono_ns];
        let share = apportion::share(&log.readings, first, second);
        assert_eq!(share.pswpin, Some(60));
        assert_eq!(
            (share.stall_some_us, share.cgroup_stall_full_us),
            (None, None)
        );
    }
}
