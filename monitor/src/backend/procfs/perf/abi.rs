//! The parts of `<linux/perf_event.h>` the fault events use: `struct perf_event_attr` as
//! of `PERF_ATTR_SIZE_VER5` (Linux 4.1; a newer kernel takes a shorter struct, as
//! older binaries pass it), the ring buffer's control page, the records read from it
//! (the bodies of `PERF_RECORD_MMAP2`, `_FORK`, `_EXIT` are laid out in the header's
//! comments only: the test declares them as those comments say). libc has only the
//! system call's number. The test below compiles the header and compares.

/// `struct perf_event_attr`, up to `__reserved_2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bit fields from `disabled` on ([`flags`]).
    pub flags: u64,
    /// `wakeup_events`, or `wakeup_watermark` (bytes) with [`flags::WATERMARK`].
    pub wakeup_watermark: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
}

pub const PERF_ATTR_SIZE_VER5: u32 = 112;
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER5 as usize);

pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_COUNT_SW_PAGE_FAULTS_MIN: u64 = 5;
pub const PERF_COUNT_SW_PAGE_FAULTS_MAJ: u64 = 6;
/// An event that counts nothing: its ring carries the mapping records alone.
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

/// The instruction pointer at the fault (the user's, with `exclude_kernel`).
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
/// The id of the cgroup (v2) the faulting task was in (Linux 5.7): a fleet's events,
/// on every process, say which target each fault is of.
pub const PERF_SAMPLE_CGROUP: u64 = 1 << 21;

/// The bits of [`PerfEventAttr::flags`], in the order of the header's bit fields.
pub mod flags {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    /// `mmap`: executable mappings recorded (as `PERF_RECORD_MMAP2` with [`MMAP2`]).
    pub const MMAP: u64 = 1 << 8;
    /// `comm`: a `PERF_RECORD_COMM` when a task is renamed (with [`COMM_EXEC`], marked
    /// when the rename is an exec's).
    pub const COMM: u64 = 1 << 9;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    /// `task`: `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`.
    pub const TASK: u64 = 1 << 13;
    pub const WATERMARK: u64 = 1 << 14;
    /// `mmap_data`: mappings that are not executable recorded too.
    pub const MMAP_DATA: u64 = 1 << 17;
    /// `sample_id_all`: every record ends with the sample's TID and TIME fields.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// `mmap2`: `PERF_RECORD_MMAP2`, with the file's device and inode (Linux 3.16).
    pub const MMAP2: u64 = 1 << 23;
    /// `comm_exec` (Linux 3.16).
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
}

pub const PERF_FLAG_PID_CGROUP: libc::c_ulong = 1 << 2;
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// `_IO('$', 5)`: send this event's records to another event's ring buffer.
pub const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

/// Offsets in `struct perf_event_mmap_page`, the ring buffer's first page.
pub const DATA_HEAD: usize = 1024;
pub const DATA_TAIL: usize = 1032;

/// `struct perf_event_header`: every record begins with it.
pub const HEADER_SIZE: usize = 8;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_MMAP2: u32 = 10;
/// In a `PERF_RECORD_COMM`'s header: the rename is an exec's.
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// An MMAP2 record carrying a build id where the device and inode are (only with the
/// attribute's `build_id`, which the events do not set).
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// `PERF_RECORD_MMAP2`'s body, after the header (the header's comment; no struct in
/// it): `u32 pid, tid; u64 addr, len, pgoff; u32 maj, min; u64 ino, ino_generation;
/// u32 prot, flags; char filename[]` (NUL-terminated, padded to 8 bytes), then the
/// sample's id fields. `maj`, `min`, `ino` are those `/proc/PID/maps` shows.
pub mod mmap2 {
    pub const PID: usize = 0;
    pub const ADDR: usize = 8;
    pub const LEN: usize = 16;
    pub const PGOFF: usize = 24;
    pub const MAJ: usize = 32;
    pub const MIN: usize = 36;
    pub const INO: usize = 40;
    pub const PROT: usize = 56;
    pub const FLAGS: usize = 60;
    pub const FILENAME: usize = 64;
}

/// `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`'s body: `u32 pid, ppid, tid, ptid; u64
/// time`; `PERF_RECORD_COMM`'s: `u32 pid, tid; char comm[]`.
pub mod task {
    pub const PID: usize = 0;
    pub const PPID: usize = 4;
    pub const TID: usize = 8;
}

/// The sample's id fields at the end of every other record (`sample_id_all`), for the
/// events' `sample_type` (IP and ADDR are not id fields): `TID | TIME`: `u32 pid, tid;
/// u64 time`.
pub const SAMPLE_ID_SIZE: usize = 16;
pub const SAMPLE_ID_TIME: usize = 8;

#[cfg(test)]
mod tests {
    use std::mem::offset_of;
    use std::process::Command;

    use super::*;

    /// Compiles a C program printing each `(name, C expression)` and compares it with the
    /// Rust value.
    #[test]
    fn the_layout_and_constants_agree_with_the_kernels_header() {
        let facts: Vec<(&str, String, u64)> = vec![
            (
                "sizeof attr",
                "sizeof(struct perf_event_attr) >= 112 ? 112 : 0".into(),
                PERF_ATTR_SIZE_VER5.into(),
            ),
            (
                "ver5",
                "PERF_ATTR_SIZE_VER5".into(),
                PERF_ATTR_SIZE_VER5.into(),
            ),
            (
                "config",
                "offsetof(struct perf_event_attr, config)".into(),
                offset_of!(PerfEventAttr, config) as u64,
            ),
            (
                "sample_period",
                "offsetof(struct perf_event_attr, sample_period)".into(),
                offset_of!(PerfEventAttr, sample_period) as u64,
            ),
            (
                "sample_type",
                "offsetof(struct perf_event_attr, sample_type)".into(),
                offset_of!(PerfEventAttr, sample_type) as u64,
            ),
            (
                "wakeup_watermark",
                "offsetof(struct perf_event_attr, wakeup_watermark)".into(),
                offset_of!(PerfEventAttr, wakeup_watermark) as u64,
            ),
            (
                "clockid",
                "offsetof(struct perf_event_attr, clockid)".into(),
                offset_of!(PerfEventAttr, clockid) as u64,
            ),
            (
                "aux_watermark",
                "offsetof(struct perf_event_attr, aux_watermark)".into(),
                offset_of!(PerfEventAttr, aux_watermark) as u64,
            ),
            (
                "flags",
                "flags()".into(),
                flags::DISABLED
                    | flags::INHERIT
                    | flags::EXCLUDE_KERNEL
                    | flags::EXCLUDE_HV
                    | flags::MMAP
                    | flags::COMM
                    | flags::ENABLE_ON_EXEC
                    | flags::TASK
                    | flags::WATERMARK
                    | flags::MMAP_DATA
                    | flags::SAMPLE_ID_ALL
                    | flags::MMAP2
                    | flags::COMM_EXEC
                    | flags::USE_CLOCKID,
            ),
            (
                "flags offset",
                "FLAGS_OFFSET".into(),
                offset_of!(PerfEventAttr, flags) as u64,
            ),
            (
                "software",
                "PERF_TYPE_SOFTWARE".into(),
                PERF_TYPE_SOFTWARE.into(),
            ),
            (
                "min",
                "PERF_COUNT_SW_PAGE_FAULTS_MIN".into(),
                PERF_COUNT_SW_PAGE_FAULTS_MIN,
            ),
            (
                "maj",
                "PERF_COUNT_SW_PAGE_FAULTS_MAJ".into(),
                PERF_COUNT_SW_PAGE_FAULTS_MAJ,
            ),
            ("dummy", "PERF_COUNT_SW_DUMMY".into(), PERF_COUNT_SW_DUMMY),
            ("ip", "PERF_SAMPLE_IP".into(), PERF_SAMPLE_IP),
            ("tid", "PERF_SAMPLE_TID".into(), PERF_SAMPLE_TID),
            ("time", "PERF_SAMPLE_TIME".into(), PERF_SAMPLE_TIME),
            ("addr", "PERF_SAMPLE_ADDR".into(), PERF_SAMPLE_ADDR),
            ("cgroup", "PERF_SAMPLE_CGROUP".into(), PERF_SAMPLE_CGROUP),
            (
                "cgroup flag",
                "PERF_FLAG_PID_CGROUP".into(),
                PERF_FLAG_PID_CGROUP,
            ),
            (
                "cloexec flag",
                "PERF_FLAG_FD_CLOEXEC".into(),
                PERF_FLAG_FD_CLOEXEC,
            ),
            (
                "set_output",
                "PERF_EVENT_IOC_SET_OUTPUT".into(),
                PERF_EVENT_IOC_SET_OUTPUT,
            ),
            (
                "data_head",
                "offsetof(struct perf_event_mmap_page, data_head)".into(),
                DATA_HEAD as u64,
            ),
            (
                "data_tail",
                "offsetof(struct perf_event_mmap_page, data_tail)".into(),
                DATA_TAIL as u64,
            ),
            (
                "header",
                "sizeof(struct perf_event_header)".into(),
                HEADER_SIZE as u64,
            ),
            ("lost", "PERF_RECORD_LOST".into(), PERF_RECORD_LOST.into()),
            ("comm", "PERF_RECORD_COMM".into(), PERF_RECORD_COMM.into()),
            ("exit", "PERF_RECORD_EXIT".into(), PERF_RECORD_EXIT.into()),
            ("fork", "PERF_RECORD_FORK".into(), PERF_RECORD_FORK.into()),
            (
                "mmap2",
                "PERF_RECORD_MMAP2".into(),
                PERF_RECORD_MMAP2.into(),
            ),
            (
                "comm_exec",
                "PERF_RECORD_MISC_COMM_EXEC".into(),
                PERF_RECORD_MISC_COMM_EXEC.into(),
            ),
            (
                "mmap build id",
                "PERF_RECORD_MISC_MMAP_BUILD_ID".into(),
                PERF_RECORD_MISC_MMAP_BUILD_ID.into(),
            ),
            (
                "mmap2 pid",
                "offsetof(struct mmap2, pid)".into(),
                mmap2::PID as u64,
            ),
            (
                "mmap2 addr",
                "offsetof(struct mmap2, addr)".into(),
                mmap2::ADDR as u64,
            ),
            (
                "mmap2 len",
                "offsetof(struct mmap2, len)".into(),
                mmap2::LEN as u64,
            ),
            (
                "mmap2 pgoff",
                "offsetof(struct mmap2, pgoff)".into(),
                mmap2::PGOFF as u64,
            ),
            (
                "mmap2 maj",
                "offsetof(struct mmap2, maj)".into(),
                mmap2::MAJ as u64,
            ),
            (
                "mmap2 min",
                "offsetof(struct mmap2, min)".into(),
                mmap2::MIN as u64,
            ),
            (
                "mmap2 ino",
                "offsetof(struct mmap2, ino)".into(),
                mmap2::INO as u64,
            ),
            (
                "mmap2 prot",
                "offsetof(struct mmap2, prot)".into(),
                mmap2::PROT as u64,
            ),
            (
                "mmap2 flags",
                "offsetof(struct mmap2, flags)".into(),
                mmap2::FLAGS as u64,
            ),
            (
                "mmap2 filename",
                "offsetof(struct mmap2, filename)".into(),
                mmap2::FILENAME as u64,
            ),
            (
                "task pid",
                "offsetof(struct task, pid)".into(),
                task::PID as u64,
            ),
            (
                "task ppid",
                "offsetof(struct task, ppid)".into(),
                task::PPID as u64,
            ),
            (
                "task tid",
                "offsetof(struct task, tid)".into(),
                task::TID as u64,
            ),
            (
                "sample_id",
                "sizeof(struct sample_id)".into(),
                SAMPLE_ID_SIZE as u64,
            ),
            (
                "sample_id time",
                "offsetof(struct sample_id, time)".into(),
                SAMPLE_ID_TIME as u64,
            ),
            ("prot_exec", "PROT_EXEC".into(), libc::PROT_EXEC as u64),
            ("map_shared", "MAP_SHARED".into(), libc::MAP_SHARED as u64),
            (
                "sample",
                "PERF_RECORD_SAMPLE".into(),
                PERF_RECORD_SAMPLE.into(),
            ),
        ];
        let mut program = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n\
             #include <linux/perf_event.h>\n\
             #include <sys/mman.h>\n\
             #define FLAGS_OFFSET (offsetof(struct perf_event_attr, read_format) + 8)\n\
             /* The records' bodies as the header's comments lay them out. */\n\
             struct mmap2 { __u32 pid, tid; __u64 addr, len, pgoff; __u32 maj, min;\n\
               __u64 ino, ino_generation; __u32 prot, flags; char filename[]; };\n\
             struct task { __u32 pid, ppid, tid, ptid; __u64 time; };\n\
             struct sample_id { __u32 pid, tid; __u64 time; };\n\
             static unsigned long long flags(void) {\n\
               struct perf_event_attr a;\n\
               unsigned long long f;\n\
               memset(&a, 0, sizeof a);\n\
               a.disabled = a.inherit = a.exclude_kernel = a.exclude_hv = 1;\n\
               a.mmap = a.comm = a.enable_on_exec = a.task = a.watermark = a.use_clockid = 1;\n\
               a.mmap_data = a.sample_id_all = a.mmap2 = a.comm_exec = 1;\n\
               memcpy(&f, (char *)&a + FLAGS_OFFSET, sizeof f);\n\
               return f;\n\
             }\n\
             int main(void) {\n",
        );
        for (name, expr, _) in &facts {
            program.push_str(&format!(
                "  printf(\"%s %llu\\n\", \"{name}\", (unsigned long long)({expr}));\n"
            ));
        }
        program.push_str("  return 0;\n}\n");
        let dir = std::env::temp_dir().join(format!("pfprof-perf-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("abi.c");
        let binary = dir.join("abi");
        std::fs::write(&source, program).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc)
            .arg("-o")
            .arg(&binary)
            .arg(&source)
            .status()
            .unwrap_or_else(|e| {
                panic!("running {cc} (install a C compiler and linux-libc-dev): {e}")
            });
        assert!(
            status.success(),
            "{cc} could not compile against <linux/perf_event.h>"
        );
        let output = Command::new(&binary).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let printed = String::from_utf8(output.stdout).unwrap();
        for ((name, _, rust), line) in facts.iter().zip(printed.lines()) {
            assert_eq!(line, format!("{name} {rust}"), "{name}");
        }
        assert_eq!(printed.lines().count(), facts.len());
    }
}
