//! `#[repr(C)]` mirror of `include/pfprof.h`, the single source of truth.
//!
//! Every size and field offset is asserted at compile time below, and
//! `tests/layout.rs` compiles the real header to prove the two agree.

use core::mem::{offset_of, size_of};

pub const MAGIC: u32 = 0x4650_4650;
pub const ABI_VERSION: u32 = 6;

pub const DEVICE_PATH: &str = "/dev/pfprof";
pub const PROC_PATH: &str = "/proc/pfprof/status";

/// Defaults and bounds of the sampling period (the module's `period_ms`).
pub const PERIOD_MS_DEFAULT: u32 = 50;
pub const PERIOD_MS_MIN: u32 = 1;
pub const PERIOD_MS_MAX: u32 = 10_000;
/// Defaults and bounds of an area's size in pages (the module's `buffer_pages`).
pub const BUFFER_PAGES_DEFAULT: u32 = 128;
pub const BUFFER_PAGES_MIN: u32 = 2;
pub const BUFFER_PAGES_MAX: u32 = 65_536;
/// How long the producer tries for the shared lock before deferring, ns.
pub const LOCK_SPIN_NS: u32 = 10_000;

pub const MODE_NONE: u32 = 0;
pub const MODE_STRICT: u32 = 1;
pub const MODE_RELAXED: u32 = 2;

pub const LOCK_FREE: u32 = 0;
pub const LOCK_PRODUCER: u32 = 1;
pub const LOCK_CONSUMER: u32 = 2;

pub const CACHELINE_SIZE: u64 = 64;
pub const PAGE_SIZE: u64 = 4096;
/// Offset of slot 0: the control page comes first.
pub const DATA_OFFSET: u64 = PAGE_SIZE;

/// `PFPROF_AREA_SIZE(pages)`: bytes of an area of `pages` pages, control page included.
pub const fn area_size(pages: u64) -> u64 {
    pages * PAGE_SIZE
}

/// `struct pfprof_sample`: one period, summed over the session's processes: deltas of
/// faults and CPU time over the period, and memory levels at its end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sample {
    /// `CLOCK_MONOTONIC` when the period ended, ns.
    pub time_ns: u64,
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    /// Resident anonymous memory at the period's end, bytes (a level, not a delta).
    pub rss_anon: u64,
    /// Resident file-backed memory, bytes.
    pub rss_file: u64,
    /// Resident shared memory (shmem, tmpfs), bytes.
    pub rss_shmem: u64,
    /// Anonymous memory swapped out, bytes.
    pub swap: u64,
}

/// Now on the samples' clock: `CLOCK_MONOTONIC` in nanoseconds, the clock the module's
/// `ktime_get_ns()` reads.
#[cfg(not(loom))]
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux: it is always there and the pointer is ours.
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always readable");
    // Non-negative by definition; u64 nanoseconds last 584 years of uptime.
    (now.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec() as u64)
}

/// Merges a later period into this sample, as a producer does with a period it could
/// not write: the counts add up (saturating), the sample ends where the later one ends
/// and holds its memory levels.
impl core::ops::AddAssign for Sample {
    fn add_assign(&mut self, later: Sample) {
        self.time_ns = self.time_ns.max(later.time_ns);
        self.minor = self.minor.saturating_add(later.minor);
        self.major = self.major.saturating_add(later.major);
        self.cpu_ns = self.cpu_ns.saturating_add(later.cpu_ns);
        self.rss_anon = later.rss_anon;
        self.rss_file = later.rss_file;
        self.rss_shmem = later.rss_shmem;
        self.swap = later.swap;
    }
}

/// `struct pfprof_sem`: a counting semaphore both sides operate on atomically.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sem {
    pub count: u32,
    pub waiters: u32,
}

/// `struct pfprof_area`: the control page. Never read through a reference:
/// the other side writes it concurrently; see [`crate::Area`] for access.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AreaHeader {
    pub magic: u32,
    pub abi_version: u32,
    pub mode: u32,
    pub sample_size: u32,
    pub area_size: u64,
    pub data_offset: u64,
    pub slot_count: u64,
    pub period_ns: u64,
    pub reserved0: [u64; 2],

    pub write_seq: u64,
    pub overwritten: u64,
    pub blocked_ns: u64,
    pub deferred: u64,
    pub canceled: u32,
    /// Processes no longer counted: they exec'd what the opener may not read.
    pub withdrawn: u32,
    pub reserved2: [u64; 3],

    pub read_seq: u64,
    pub reserved3: [u64; 7],

    pub lock: u32,
    pub reserved4: [u32; 15],

    pub full: Sem,
    pub reserved5: [u64; 7],

    pub empty: Sem,
    pub reserved6: [u64; 7],
}

/// `struct pfprof_info`: the `PFPROF_IOC_INFO` handshake.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    pub abi_version: u32,
    pub flags: u32,
    pub area_size: u64,
    pub slot_count: u64,
    pub sample_size: u32,
    pub reserved0: u32,
    pub period_ns: u64,
    /// Where the faults region is mapped from, and its one length.
    pub faults_offset: u64,
    pub faults_size: u64,
    pub reserved: u64,
}

/// `PFPROF_TARGET_INHERIT`: the process counts with its descendants.
pub const TARGET_INHERIT: u32 = 1;
/// `PFPROF_TARGET_WHOLE_LIFE`: counted since the process started, not since it joined.
pub const TARGET_WHOLE_LIFE: u32 = 2;
/// The most processes one session counts.
pub const MEMBERS_MAX: u32 = 4096;
/// The most real parents a process may have to join a session (`PFPROF_IOC_ADD`'s
/// `ELOOP` past it).
pub const DEPTH_MAX: u32 = 256;

/// `struct pfprof_target`: `PFPROF_IOC_ADD`'s argument, the process that joins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddProcess {
    pub pid: i32,
    pub flags: u32,
    pub reserved: u64,
}

/// `struct pfprof_cgroup_target`: `PFPROF_IOC_ADD_CGROUP`'s argument, the cgroup whose
/// processes join.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddCgroup {
    /// An open cgroup2 directory.
    pub fd: i32,
    pub flags: u32,
    pub reserved: u64,
}

pub const FOLLOW_NONE: u32 = 0;
pub const FOLLOW_ALL: u32 = 1;
pub const FOLLOW_DESCENDANTS: u32 = 2;
/// A flag of `PFPROF_IOC_FOLLOW`: other users' registrations join too.
pub const FOLLOW_OTHER_USERS: u32 = 1 << 8;

/// `struct pfprof_follow`: `PFPROF_IOC_FOLLOW`'s argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Follow {
    pub scope: u32,
    pub flags: u32,
    pub pid: i32,
    pub reserved: u32,
}

/// The faults region's magic (`PFPROF_FAULTS_MAGIC`).
pub const FAULTS_MAGIC: u32 = 0x5446_4650;
/// Bounds of `PFPROF_IOC_ATTRIBUTE`'s `minor_sampling` (one minor fault in N recorded).
pub const MINOR_SAMPLING_MIN: u32 = 1;
pub const MINOR_SAMPLING_MAX: u32 = 1_000_000;
/// `PFPROF_FAULTS_DRAIN_MS`: how often, at least, the module drains recorded faults to the
/// region when the period is longer; a consumer drains the region as often.
pub const FAULTS_DRAIN_MS: u32 = 100;
/// `PFPROF_FAULT_MAJOR`: a major fault, every one recorded.
pub const FAULT_MAJOR: u32 = 1;
/// `PFPROF_FAULT_MINOR`: a minor fault, one in `minor_sampling` recorded.
pub const FAULT_MINOR: u32 = 2;

/// `struct pfprof_fault`: one fault as the module recorded it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultRecord {
    /// `CLOCK_MONOTONIC` when it was taken, ns.
    pub time_ns: u64,
    pub address: u64,
    /// Its process (tgid) in the opener's pid namespace.
    pub pid: i32,
    /// `FAULT_MAJOR` or `FAULT_MINOR`.
    pub kind: u32,
    /// The user instruction that took it (or where its process entered the kernel
    /// that took it); 0: none.
    pub ip: u64,
}

/// `struct pfprof_faults_area`: the faults region's control page. Never read through a
/// reference: the module writes it concurrently.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultsHeader {
    pub magic: u32,
    pub record_size: u32,
    pub region_size: u64,
    pub data_offset: u64,
    pub record_count: u64,
    pub minor_sampling: u64,
    pub reserved0: [u64; 3],

    pub claimed_seq: u64,
    pub reserved1: [u64; 7],

    pub write_seq: u64,
    pub written_major: u64,
    pub written_minor: u64,
    pub dropped_major: u64,
    pub dropped_minor: u64,
    pub unattributed: u32,
    pub reserved2: u32,
    pub reserved3: [u64; 2],
}

/// `struct pfprof_attribution`: `PFPROF_IOC_ATTRIBUTE`'s argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attribute {
    pub minor_sampling: u32,
    pub flags: u32,
    pub reserved: u64,
}

// The asm-generic ioctl encoding (x86, arm, arm64, riscv, ...), or the one
// powerpc, mips and sparc use: include/uapi/asm-generic/ioctl.h and
// arch/*/include/uapi/asm/ioctl.h.
const IOC_THREE_DIR_BITS: bool = cfg!(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
));
const IOC_SIZEBITS: u32 = if IOC_THREE_DIR_BITS { 13 } else { 14 };
const IOC_NONE: u32 = if IOC_THREE_DIR_BITS { 1 } else { 0 };
const IOC_WRITE: u32 = if IOC_THREE_DIR_BITS { 4 } else { 1 };
const IOC_READ: u32 = 2;

const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = 8;
const IOC_SIZESHIFT: u32 = 16;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(size < (1 << IOC_SIZEBITS), "ioctl argument too large");
    assert!(ty < 256 && nr < 256);
    (dir << IOC_DIRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
        | (ty << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
}

/// `_IO(type, nr)`.
pub const fn io(ty: u32, nr: u32) -> u32 {
    ioc(IOC_NONE, ty, nr, 0)
}

/// `_IOW(type, nr, T)` with `size` = `sizeof(T)`.
pub const fn iow(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_WRITE, ty, nr, size)
}

/// `_IOWR(type, nr, T)` with `size` = `sizeof(T)`.
pub const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}

pub const IOC_MAGIC: u32 = 0xB8;
pub const IOC_INFO: u32 = iowr(IOC_MAGIC, 0x00, size_of::<Info>());
pub const IOC_SET_MODE: u32 = iow(IOC_MAGIC, 0x01, size_of::<u32>());
pub const IOC_WAIT_FULL: u32 = iow(IOC_MAGIC, 0x02, size_of::<u32>());
pub const IOC_WAKE_PRODUCER: u32 = io(IOC_MAGIC, 0x03);
pub const IOC_ADD: u32 = iow(IOC_MAGIC, 0x04, size_of::<AddProcess>());
pub const IOC_FOLLOW: u32 = iow(IOC_MAGIC, 0x05, size_of::<Follow>());
pub const IOC_END: u32 = io(IOC_MAGIC, 0x06);
pub const IOC_ADD_CGROUP: u32 = iow(IOC_MAGIC, 0x07, size_of::<AddCgroup>());
pub const IOC_ATTRIBUTE: u32 = iow(IOC_MAGIC, 0x08, size_of::<Attribute>());

/// Byte offset of slot `index` in the area.
pub const fn slot_offset(index: u64) -> u64 {
    DATA_OFFSET + index * size_of::<Sample>() as u64
}

/// Slots an area of `pages` pages holds.
pub const fn slots_in(pages: u64) -> u64 {
    (area_size(pages) - DATA_OFFSET) / size_of::<Sample>() as u64
}

macro_rules! assert_layout {
    ($ty:ty, size $size:expr, align $align:expr, { $($field:ident: $off:expr),* $(,)? }) => {
        const _: () = assert!(size_of::<$ty>() == $size);
        const _: () = assert!(core::mem::align_of::<$ty>() == $align);
        $(const _: () = assert!(offset_of!($ty, $field) == $off);)*
    };
}

assert_layout!(Sample, size 64, align 8, {
    time_ns: 0, minor: 8, major: 16, cpu_ns: 24,
    rss_anon: 32, rss_file: 40, rss_shmem: 48, swap: 56,
});
assert_layout!(Sem, size 8, align 4, { count: 0, waiters: 4 });
assert_layout!(AreaHeader, size 384, align 8, {
    magic: 0, abi_version: 4, mode: 8, sample_size: 12,
    area_size: 16, data_offset: 24, slot_count: 32, period_ns: 40, reserved0: 48,
    write_seq: 64, overwritten: 72, blocked_ns: 80, deferred: 88,
    canceled: 96, withdrawn: 100, reserved2: 104,
    read_seq: 128, reserved3: 136,
    lock: 192, reserved4: 196,
    full: 256, reserved5: 264,
    empty: 320, reserved6: 328,
});
assert_layout!(AddProcess, size 16, align 8, { pid: 0, flags: 4, reserved: 8 });
assert_layout!(Follow, size 16, align 4, { scope: 0, flags: 4, pid: 8, reserved: 12 });
assert_layout!(AddCgroup, size 16, align 8, { fd: 0, flags: 4, reserved: 8 });
assert_layout!(Info, size 64, align 8, {
    abi_version: 0, flags: 4, area_size: 8, slot_count: 16,
    sample_size: 24, reserved0: 28, period_ns: 32, faults_offset: 40, faults_size: 48,
    reserved: 56,
});
assert_layout!(FaultRecord, size 32, align 8, {
    time_ns: 0, address: 8, pid: 16, kind: 20, ip: 24,
});
assert_layout!(FaultsHeader, size 192, align 8, {
    magic: 0, record_size: 4, region_size: 8, data_offset: 16, record_count: 24,
    minor_sampling: 32, reserved0: 40,
    claimed_seq: 64, reserved1: 72,
    write_seq: 128, written_major: 136, written_minor: 144, dropped_major: 152,
    dropped_minor: 160, unattributed: 168, reserved2: 172, reserved3: 176,
});
assert_layout!(Attribute, size 16, align 8, { minor_sampling: 0, flags: 4, reserved: 8 });

// Producer, consumer, lock and each semaphore on their own cache line.
const _: () = assert!(offset_of!(AreaHeader, write_seq) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(offset_of!(AreaHeader, read_seq) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(offset_of!(AreaHeader, lock) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(offset_of!(AreaHeader, full) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(offset_of!(AreaHeader, empty) as u64 % CACHELINE_SIZE == 0);
// The control page holds the header; slots are 8-aligned and tile the data pages.
const _: () = assert!(size_of::<AreaHeader>() as u64 <= DATA_OFFSET);
const _: () = assert!(DATA_OFFSET % 8 == 0);
const _: () = assert!(PAGE_SIZE % size_of::<Sample>() as u64 == 0);
// The faults region's writer and its claim on lines of their own; records tile a page.
const _: () = assert!(offset_of!(FaultsHeader, claimed_seq) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(offset_of!(FaultsHeader, write_seq) as u64 % CACHELINE_SIZE == 0);
const _: () = assert!(PAGE_SIZE % size_of::<FaultRecord>() as u64 == 0);
// A sample is one cache line.
const _: () = assert!(size_of::<Sample>() as u64 == CACHELINE_SIZE);

#[cfg(test)]
mod tests {
    use super::Sample;

    #[test]
    fn merging_a_later_period_adds_its_counts_and_takes_its_end_and_memory_levels() {
        let mut merged = Sample {
            time_ns: 10,
            minor: 1,
            major: 2,
            cpu_ns: u64::MAX,
            rss_anon: 100,
            rss_file: 200,
            rss_shmem: 300,
            swap: 400,
        };
        merged += Sample {
            time_ns: 15,
            minor: 3,
            major: 4,
            cpu_ns: 1,
            rss_anon: 5,
            rss_file: 0,
            rss_shmem: 7,
            swap: 8,
        };
        let expected = Sample {
            time_ns: 15,
            minor: 4,
            major: 6,
            cpu_ns: u64::MAX,
            rss_anon: 5,
            rss_file: 0,
            rss_shmem: 7,
            swap: 8,
        };
        assert_eq!(merged, expected);
    }
}
