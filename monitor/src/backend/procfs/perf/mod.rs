//! The fault events: the kernel's software events `PERF_COUNT_SW_PAGE_FAULTS_MAJ` (every
//! major fault recorded) and `PERF_COUNT_SW_PAGE_FAULTS_MIN` (one minor fault in every
//! `minor_sampling`), which fire in `mm_account_fault()` once a fault is done, each record
//! holding the process, the thread, the time (`CLOCK_MONOTONIC`) and the faulting address.
//!
//! A ring buffer of inherited events must be per CPU (the kernel refuses to map an
//! inherited event that follows a task on every CPU), so each target gets one event of
//! each kind on every online CPU; a task's inherited events follow the threads and
//! processes it starts, their records in their parent event's ring. Every event on one
//! CPU sends its records to the first event of its kind there (`PERF_EVENT_IOC_SET_OUTPUT`):
//! two rings per CPU however many targets, each woken (poll) once half full.
//!
//! A third event on each CPU counts nothing (`PERF_COUNT_SW_DUMMY`) and records the
//! processes' mappings as they change, as `perf record` asks for them
//! (`PERF_RECORD_MMAP2`, `_FORK`, `_EXIT`, an exec's `_COMM`), each stamped
//! (`sample_id_all`) to be put in time order with the faults of every CPU's rings. Its
//! ring is its own: a storm of mappings never crowds out a fault's record, and each
//! ring's `PERF_RECORD_LOST` counts its own kind.

pub mod abi;
mod ring;

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

use abi::{flags, PerfEventAttr};
use ring::Ring;
pub use ring::{Mmap, Record};

/// Data pages of each ring (a power of two): 64 KiB holds 1,638 records of 40 bytes, a
/// 50 ms period of 32,000 major faults a second on one CPU. Smaller where the locked-memory limit
/// (`kernel.perf_event_mlock_kb`, 516 KiB a CPU for each user) refuses it.
const RING_PAGES: [usize; 3] = [16, 4, 1];
/// The same for events on every process (a fleet's), whose rings take the whole system's
/// records: 256 KiB each, 768 KiB a CPU at most (48 MiB locked on 64 CPUs), smaller where
/// refused. A flood of faults or mappings by any process can still fill them between
/// drains: the records lost are counted, never misattributed.
const EVERY_PROCESS_RING_PAGES: [usize; 4] = [64, 16, 4, 1];

/// What the events are opened on: a task or a cgroup (a profile's target, what the user
/// selected, is [`crate::backend::Selection`]).
#[derive(Clone, Copy, Debug)]
pub enum Watched<'a> {
    /// A thread (a process's first thread by its pid) and what it starts from now on;
    /// `from_exec`: counting from its next exec (a command held before it).
    Task { tid: u32, from_exec: bool },
    /// Every process in a cgroup (v2 directory, open) and its descendant cgroups.
    Cgroup(BorrowedFd<'a>),
    /// Every process on the system, each fault's record with its cgroup's id: a fleet's
    /// events, shared by its targets ([`crate::backend::procfs::fleet_faults`]).
    EveryProcess,
}

/// Which fault event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Major,
    Minor,
}

/// Which event's ring a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Faults(Kind),
    /// The records of the processes' mappings.
    Mappings,
}

/// The largest mapping record: a `PERF_RECORD_MMAP2`'s header, fields, a path of
/// `PATH_MAX` bytes and its sample id. A ring found filled to within this of its end may
/// have dropped one since the last drain, its `PERF_RECORD_LOST` not written yet.
const LARGEST_MAPPING_RECORD: usize =
    abi::HEADER_SIZE + abi::mmap2::FILENAME + libc::PATH_MAX as usize + abi::SAMPLE_ID_SIZE;

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// The kernel refused (EACCES, EPERM): its paranoia setting, or the target is not
    /// ours. [`PerfError::advice`] says what would allow it.
    #[error("the kernel refused perf events ({errno}) at kernel.perf_event_paranoid {}", paranoid_text(*.paranoid))]
    Refused {
        errno: Errno,
        paranoid: Option<i32>,
        /// The target was a cgroup or every process: events on whole CPUs.
        cgroup: bool,
    },
    #[error(
        "this kernel refused events on every process with each fault's cgroup (PERF_SAMPLE_CGROUP: Linux 5.7, with CONFIG_CGROUP_PERF)"
    )]
    NoCgroupSamples,
    #[error("this kernel has no software perf events ({0})")]
    Unsupported(Errno),
    #[error("{wanted} perf events (threads x CPUs x 2) would take more descriptors than the {limit} allowed (ulimit -n)")]
    TooMany { wanted: usize, limit: usize },
    #[error("perf_event_open")]
    Open(#[source] Errno),
    #[error("sending a perf event's records to its CPU's ring")]
    SetOutput(#[source] Errno),
    #[error("mapping a perf ring buffer (locked memory: kernel.perf_event_mlock_kb, ulimit -l)")]
    Map(#[source] io::Error),
    #[error("reading the online CPUs")]
    Cpus(#[source] io::Error),
}

fn paranoid_text(paranoid: Option<i32>) -> String {
    paranoid.map_or_else(|| "unknown".to_owned(), |p| p.to_string())
}

impl PerfError {
    /// What would allow attribution, for the summary.
    pub fn advice(&self) -> String {
        match self {
            PerfError::Refused { cgroup: true, .. } => {
                "a cgroup's events, and a fleet's, watch whole CPUs, which only \
                 kernel.perf_event_paranoid <= 0 or CAP_PERFMON allows: \
                 `sysctl kernel.perf_event_paranoid=0`, or give the monitor CAP_PERFMON"
                    .to_owned()
            }
            PerfError::Refused {
                paranoid: Some(p), ..
            } if *p > 2 => {
                "this setting (Debian's default) allows no perf events to unprivileged users: \
                 `sysctl kernel.perf_event_paranoid=2` allows them on your own processes \
                 (=1 also attributes the faults taken in system calls), or give the monitor \
                 CAP_PERFMON"
                    .to_owned()
            }
            PerfError::Refused { .. } => {
                "perf events on a process need the right to trace it, as reading its \
                 /proc/PID/maps does: profile your own processes, or run the monitor as \
                 their user"
                    .to_owned()
            }
            PerfError::TooMany { .. } => {
                "raise the descriptor limit (ulimit -n), or profile fewer threads".to_owned()
            }
            PerfError::NoCgroupSamples => {
                "a kernel of 5.7 or later built with CONFIG_CGROUP_PERF".to_owned()
            }
            PerfError::Map(_) => {
                "raise kernel.perf_event_mlock_kb or the locked-memory limit (ulimit -l)".to_owned()
            }
            _ => "a kernel with CONFIG_PERF_EVENTS".to_owned(),
        }
    }
}

/// The three rings of one CPU.
struct CpuRings {
    cpu: u32,
    major: Ring,
    minor: Ring,
    mappings: Ring,
}

/// The events of one CPU for one target: the two fault events and the mappings'.
struct CpuEvents {
    major: OwnedFd,
    minor: OwnedFd,
    mappings: OwnedFd,
}

/// The fault events of every target, and their rings.
pub struct FaultEvents {
    cpus: Vec<u32>,
    rings: Vec<CpuRings>,
    /// Events whose records go to a ring of their CPU's.
    others: Vec<OwnedFd>,
    minor_sampling: u64,
    /// Faults taken in the kernel on the process's behalf are recorded too (not with
    /// `exclude_kernel`, all that `kernel.perf_event_paranoid` 2 allows).
    kernel_faults: bool,
    /// The descriptors the events may take.
    fd_budget: usize,
    /// An event was opened: `kernel_faults` is settled.
    opened_any: bool,
    /// The sizes a ring is mapped with, the first the locked-memory limit allows.
    ring_pages: &'static [usize],
    /// The samples say their cgroup (events on every process).
    cgroup_in_samples: bool,
}

impl FaultEvents {
    /// No events yet; minor faults are to be recorded one in `minor_sampling`.
    pub fn new(minor_sampling: u64) -> Result<FaultEvents, PerfError> {
        let online =
            fs::read_to_string("/sys/devices/system/cpu/online").map_err(PerfError::Cpus)?;
        let cpus = parse_cpu_list(&online).ok_or_else(|| {
            PerfError::Cpus(io::Error::other(format!("unreadable list {online:?}")))
        })?;
        Ok(FaultEvents {
            cpus,
            rings: Vec::new(),
            others: Vec::new(),
            minor_sampling: minor_sampling.max(1),
            kernel_faults: true,
            fd_budget: descriptor_budget(),
            opened_any: false,
            ring_pages: &RING_PAGES,
            cgroup_in_samples: false,
        })
    }

    pub fn minor_sampling(&self) -> u64 {
        self.minor_sampling
    }

    pub fn kernel_faults(&self) -> bool {
        self.kernel_faults
    }

    /// Opens the three events on every online CPU for `target`. A task gone meanwhile is
    /// skipped: `Ok(false)`.
    pub fn attach(&mut self, target: Watched) -> Result<bool, PerfError> {
        let wanted = self.rings.len() * 3 + self.others.len() + self.cpus.len() * 3;
        if wanted > self.fd_budget {
            return Err(PerfError::TooMany {
                wanted,
                limit: self.fd_budget,
            });
        }
        if matches!(target, Watched::EveryProcess) {
            self.ring_pages = &EVERY_PROCESS_RING_PAGES;
            self.cgroup_in_samples = true;
        }
        let cpus = self.cpus.clone();
        let mut opened = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            let events = (|| {
                Ok(CpuEvents {
                    major: self.open(Stream::Faults(Kind::Major), target, cpu)?,
                    minor: self.open(Stream::Faults(Kind::Minor), target, cpu)?,
                    mappings: self.open(Stream::Mappings, target, cpu)?,
                })
            })();
            match events {
                Ok(events) => opened.push((cpu, events)),
                Err(PerfError::Open(Errno::ESRCH)) => return Ok(false),
                // A CPU gone offline since the list was read.
                Err(PerfError::Open(Errno::ENODEV)) => continue,
                Err(e) => return Err(e),
            }
        }
        for (cpu, events) in opened {
            self.place(cpu, events)?;
        }
        Ok(true)
    }

    /// Gives the new events of `cpu` a ring of their own, or sends their records to the
    /// CPU's rings.
    fn place(&mut self, cpu: u32, events: CpuEvents) -> Result<(), PerfError> {
        if let Some(rings) = self.rings.iter().find(|r| r.cpu == cpu) {
            set_output(&events.major, rings.major.fd())?;
            set_output(&events.minor, rings.minor.fd())?;
            set_output(&events.mappings, rings.mappings.fd())?;
            (self.others).extend([events.major, events.minor, events.mappings]);
            return Ok(());
        }
        // The mappings' ring first, where the locked-memory limit leaves the later ones
        // less: a mapping record lost makes tables start again, a fault lost is one.
        let mappings = map_ring(events.mappings, self.ring_pages, self.cgroup_in_samples)?;
        self.rings.push(CpuRings {
            cpu,
            major: map_ring(events.major, self.ring_pages, self.cgroup_in_samples)?,
            minor: map_ring(events.minor, self.ring_pages, self.cgroup_in_samples)?,
            mappings,
        });
        Ok(())
    }

    /// One event on one CPU; where the kernel refuses the very first with faults taken in
    /// system calls (`exclude_kernel` unset), once without them, for it and every later
    /// event (a later refusal is the target's: not ours to trace).
    fn open(&mut self, stream: Stream, target: Watched, cpu: u32) -> Result<OwnedFd, PerfError> {
        let first = !self.opened_any;
        loop {
            match perf_event_open(&self.attr(stream, target), target, cpu) {
                Err(Errno::EACCES | Errno::EPERM) if self.kernel_faults && first => {
                    self.kernel_faults = false;
                }
                Err(errno @ (Errno::EACCES | Errno::EPERM)) => {
                    return Err(PerfError::Refused {
                        errno,
                        paranoid: paranoid(),
                        cgroup: matches!(target, Watched::Cgroup(_) | Watched::EveryProcess),
                    })
                }
                Err(Errno::EINVAL) if matches!(target, Watched::EveryProcess) => {
                    return Err(PerfError::NoCgroupSamples)
                }
                Err(errno @ (Errno::ENOENT | Errno::ENOSYS | Errno::EOPNOTSUPP)) => {
                    return Err(PerfError::Unsupported(errno))
                }
                Err(Errno::EMFILE | Errno::ENFILE) => {
                    return Err(PerfError::TooMany {
                        wanted: self.rings.len() * 3 + self.others.len() + 1,
                        limit: self.fd_budget,
                    })
                }
                Err(errno) => return Err(PerfError::Open(errno)),
                Ok(fd) => {
                    self.opened_any = true;
                    return Ok(fd);
                }
            }
        }
    }

    fn attr(&self, stream: Stream, target: Watched) -> PerfEventAttr {
        let (config, sample_period) = match stream {
            Stream::Faults(Kind::Major) => (abi::PERF_COUNT_SW_PAGE_FAULTS_MAJ, 1),
            Stream::Faults(Kind::Minor) => {
                (abi::PERF_COUNT_SW_PAGE_FAULTS_MIN, self.minor_sampling)
            }
            Stream::Mappings => (abi::PERF_COUNT_SW_DUMMY, 0),
        };
        let mut event_flags =
            flags::EXCLUDE_HV | flags::WATERMARK | flags::USE_CLOCKID | flags::SAMPLE_ID_ALL;
        if stream == Stream::Mappings {
            // The processes' mappings as they change, as `perf record` asks for them:
            // each record comes once, in the ring of the CPU it happened on, stamped
            // (`sample_id_all`) to be put in order with the faults of every CPU's rings.
            event_flags |= flags::MMAP
                | flags::MMAP2
                | flags::MMAP_DATA
                | flags::TASK
                | flags::COMM
                | flags::COMM_EXEC;
        }
        if !self.kernel_faults {
            event_flags |= flags::EXCLUDE_KERNEL;
        }
        if let Watched::Task { from_exec, .. } = target {
            // Per task: what it starts inherits the events.
            event_flags |= flags::INHERIT;
            if from_exec {
                event_flags |= flags::DISABLED | flags::ENABLE_ON_EXEC;
            }
        }
        // IP: the code that faulted, named by the consumer (attribution/symbols.rs).
        let mut sample_type = abi::PERF_SAMPLE_IP
            | abi::PERF_SAMPLE_TID
            | abi::PERF_SAMPLE_TIME
            | abi::PERF_SAMPLE_ADDR;
        if matches!(target, Watched::EveryProcess) {
            // Whose fault it is: the target whose cgroup holds this one.
            sample_type |= abi::PERF_SAMPLE_CGROUP;
        }
        PerfEventAttr {
            type_: abi::PERF_TYPE_SOFTWARE,
            size: abi::PERF_ATTR_SIZE_VER5,
            config,
            sample_period,
            sample_type,
            flags: event_flags,
            // With WATERMARK, 0: poll wakes once half the ring is written, whatever
            // size it is mapped with.
            wakeup_watermark: 0,
            clockid: libc::CLOCK_MONOTONIC,
            ..PerfEventAttr::default()
        }
    }

    /// The descriptors to poll: readable once a ring is past its watermark.
    pub fn poll_fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        (self.rings.iter()).flat_map(|r| [r.major.fd(), r.minor.fd(), r.mappings.fd()])
    }

    /// Hands every record written since the last drain to `each`, with the ring it came
    /// from; and [`Record::Overflowed`] for a mappings ring filled to within a record of
    /// its end: one lost there leaves the tables built from them wrong until its
    /// `PERF_RECORD_LOST` comes, where a fault lost is only a count.
    pub fn drain(&mut self, mut each: impl FnMut(Stream, Record)) {
        for rings in &mut self.rings {
            (rings.major).drain(|record| each(Stream::Faults(Kind::Major), record));
            (rings.minor).drain(|record| each(Stream::Faults(Kind::Minor), record));
            let found = rings
                .mappings
                .drain(|record| each(Stream::Mappings, record));
            if found + LARGEST_MAPPING_RECORD > rings.mappings.data_size() {
                each(Stream::Mappings, Record::Overflowed);
            }
        }
    }

    /// Whether any event is open.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }
}

/// Maps the ring of a new event, smaller where the locked-memory limit refuses.
fn map_ring(fd: OwnedFd, ring_pages: &[usize], cgroup_in_samples: bool) -> Result<Ring, PerfError> {
    let mut last = None;
    for &pages in ring_pages {
        match Ring::map(
            fd.try_clone().map_err(PerfError::Map)?,
            pages,
            cgroup_in_samples,
        ) {
            Ok(ring) => return Ok(ring),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => last = Some(e),
            Err(e) => return Err(PerfError::Map(e)),
        }
    }
    Err(PerfError::Map(last.unwrap_or_else(|| {
        io::Error::from(io::ErrorKind::OutOfMemory)
    })))
}

fn set_output(event: &OwnedFd, ring: BorrowedFd) -> Result<(), PerfError> {
    // SAFETY: PERF_EVENT_IOC_SET_OUTPUT takes an integer (a descriptor) and reads no
    // memory; both descriptors are open.
    let ret = unsafe {
        libc::ioctl(
            event.as_raw_fd(),
            abi::PERF_EVENT_IOC_SET_OUTPUT as _,
            ring.as_raw_fd(),
        )
    };
    Errno::result(ret).map(drop).map_err(PerfError::SetOutput)
}

/// libc has the system call's number only.
fn perf_event_open(attr: &PerfEventAttr, target: Watched, cpu: u32) -> Result<OwnedFd, Errno> {
    let (pid, mut open_flags) = match target {
        Watched::Task { tid, .. } => (tid as libc::c_int, 0),
        Watched::Cgroup(fd) => (fd.as_raw_fd(), abi::PERF_FLAG_PID_CGROUP),
        Watched::EveryProcess => (-1, 0),
    };
    open_flags |= abi::PERF_FLAG_FD_CLOEXEC;
    // SAFETY: the kernel reads `attr.size` bytes of a live, initialized
    // `struct perf_event_attr` (ours is exactly that size) and returns a new descriptor
    // or -1; it keeps no pointer.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu as libc::c_int,
            -1 as libc::c_int,
            open_flags,
        )
    };
    let fd = Errno::result(fd)?;
    // SAFETY: the descriptor was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `kernel.perf_event_paranoid`, when it can be read.
pub fn paranoid() -> Option<i32> {
    fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The descriptors the events may take: half the soft limit, the rest left to the
/// monitor's /proc files and outputs.
fn descriptor_budget() -> usize {
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(limit / 2).unwrap_or(usize::MAX)
}

/// `0-3,8,10-11` as the kernel lists CPUs.
fn parse_cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The threads of process `pid`: `/proc/<pid>/task`.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The events on the calling thread, one minor fault recorded in `minor_sampling`,
    /// and its tid; `None` where the kernel refuses them (said: nothing is checked).
    fn events_on_this_thread(minor_sampling: u64) -> Option<(FaultEvents, u32)> {
        let mut events = FaultEvents::new(minor_sampling).unwrap();
        let tid = nix::unistd::gettid().as_raw() as u32;
        match events.attach(Watched::Task {
            tid,
            from_exec: false,
        }) {
            Err(PerfError::Refused { .. } | PerfError::Unsupported(_)) => {
                eprintln!("perf events refused here: not checked");
                None
            }
            attached => {
                assert!(attached.unwrap());
                Some((events, tid))
            }
        }
    }

    /// The records as the running kernel writes them: a file this thread maps, then a
    /// fault in it, read back with what the file's metadata says.
    #[test]
    fn the_kernel_records_a_mapping_with_its_file_then_the_faults_in_it() {
        let Some((mut events, tid)) = events_on_this_thread(1) else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("pfprof-mmap2-{tid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mapped file");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = fs::File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        // SAFETY: the file is ours, mapped read-only and read once here.
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        let start = map.as_ptr() as u64;
        assert_eq!(std::hint::black_box(map[4096]), 7);
        let mut records = Vec::new();
        events.drain(|_, record| records.push(record));
        drop(map);
        let _ = fs::remove_dir_all(&dir);
        let mmap = (records.iter())
            .find_map(|r| match r {
                Record::Mmap(m) if m.start == start => Some(m.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no mmap record at {start:#x} in {records:?}"));
        assert_eq!(mmap.pid, std::process::id());
        assert_eq!(mmap.end, start + 8192);
        assert_eq!(mmap.name, path.to_str().unwrap());
        assert_eq!(
            (mmap.file.major, mmap.file.minor, mmap.file.inode),
            (libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino())
        );
        // memmap2 maps it shared: read-only, yet shared as /proc/PID/maps's `s` says.
        assert!(!mmap.exec && mmap.shared);
        let fault = (records.iter()).find_map(|r| match r {
            Record::Sample { addr, time_ns, .. } if *addr == start + 4096 => Some(*time_ns),
            _ => None,
        });
        assert!(
            fault.is_some_and(|t| t > mmap.time_ns),
            "{fault:?}, mapped at {}",
            mmap.time_ns
        );
    }

    /// A storm of mappings fills their ring alone: the drain says it overflowed (or the
    /// kernel's count of what it dropped), no fault's ring loses a record, and each
    /// ring carries its own kind of record only.
    #[test]
    fn a_storm_of_mappings_overflows_their_ring_and_costs_the_faults_nothing() {
        // One fault in 4 recorded: the faults' ring holds them all (1 KiB a page of ring).
        let Some((mut events, _)) = events_on_this_thread(4) else {
            return;
        };
        const MAPPED: usize = 1500;
        let page = crate::system::page_size();
        // Far more mapping records (about 100 bytes each) than a 64 KiB ring holds.
        for _ in 0..MAPPED {
            // SAFETY: an anonymous private page of our own, touched once and unmapped; no
            // other reference to it exists.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                p.cast::<u8>().write_volatile(1);
                libc::munmap(p, page);
            }
        }
        let (mut overflowed, mut minor_samples, mut fault_losses) = (false, 0, 0);
        events.drain(|stream, record| match (stream, record) {
            (Stream::Mappings, Record::Overflowed | Record::Lost(_)) => overflowed = true,
            (Stream::Mappings, Record::Sample { .. }) => panic!("a fault in the mappings' ring"),
            (Stream::Faults(_), Record::Lost(n)) => fault_losses += n,
            (Stream::Faults(_), Record::Sample { .. }) => minor_samples += 1,
            (Stream::Faults(_), record) => panic!("{record:?} in a fault's ring"),
            (Stream::Mappings, _) => {}
        });
        assert!(overflowed, "{MAPPED} mappings did not fill their ring");
        assert_eq!(fault_losses, 0);
        // The events are per CPU, each with its own count to the next record: a thread
        // that moved between CPUs leaves up to 3 faults unrecorded on each.
        let cpus = events.cpus.len();
        assert!(
            minor_samples * 4 + 3 * cpus >= MAPPED,
            "{minor_samples} faults recorded on {cpus} CPUs"
        );
    }

    #[test]
    fn cpu_lists_are_read_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }
}
