/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * pfprof: per-process page-fault profiler, user-space ABI.
 *
 * This header is the single source of truth for everything the pfprof
 * module and its monitor share: the layout of the memory area mapped from
 * /dev/pfprof, the two synchronization protocols run over it, and the
 * ioctl numbers.  The Rust mirror lives in shared-layout/src/abi.rs and a
 * test compiles this file to prove the two agree.
 *
 * Sessions
 * --------
 * Every open of /dev/pfprof is a session of its own: a freshly allocated,
 * zeroed area (never one an earlier session used; mapped by page frame, so
 * no page of it can be pinned to outlive the session), its own mode, its
 * own processes and its own sampling deadlines.  Any number of sessions run at
 * once, up to the module parameter max_sessions per user.  A sample holds
 * the session's own processes' changes since its previous sample; a process
 * may be in several sessions, each counting it from when it joined (one
 * joining through /proc: its own counts from its registration).
 *
 * A process joins a session with PFPROF_IOC_ADD on the session's file, or
 * through a /proc registration the session follows (PFPROF_IOC_FOLLOW).
 * Either way both the caller (of ADD, or of FOLLOW, ADD_CGROUP) and the
 * session's opener (the file's credentials) must be allowed to ptrace-read
 * the process, for as long as it is counted: its real,
 * effective and saved ids equal their filesystem ids, or they have
 * CAP_SYS_PTRACE over it, and a process its last exec left non-dumpable
 * (a setuid program, say) needs CAP_SYS_PTRACE in the user namespace of
 * that exec (the rule /proc applies; the kernel's ptrace_may_access() is
 * not exported to modules, so security modules are not consulted).  The
 * module reads dumpability and that namespace where the running kernel
 * keeps them: in the process's mm before 7.x, in its per-task exec state
 * since.
 *
 * With PFPROF_TARGET_INHERIT a process counts with its descendants, as
 * perf stat's inherit does: those alive when it joins and every process it
 * or they fork from then on, each from its own counts, until it ends, once,
 * whether it is waited for or not and wherever it is reparented.  A process
 * inside the tree of an inheriting member is counted already: it cannot
 * join again (-EEXIST), and an inheriting process that joins absorbs the
 * members in its tree.
 *
 * A process is counted while the session's opener may read it: one whose
 * exec the opener may not read (a setuid program; as perf does) stops being
 * counted at the exec: a process the session counts is withdrawn without
 * its change since the period before; a descendant of an inheriting
 * process counts what it did until the exec, nothing after (nor what it
 * forks from then on), even if it ran and exited between two periods.
 * What was counted of it stays.  area.withdrawn counts such processes.
 *
 * A session ends, after its last sample, when PFPROF_IOC_END asks, or when
 * every process it counts is gone, provided one of its own targets ever
 * joined: a process ADDed, its cgroup (ADD_CGROUP), or a process its
 * opener's user (effective uid) registered.  Another user's registration
 * joins a session only where the session asked for them
 * (PFPROF_FOLLOW_OTHER_USERS), and even there never ends it: a session
 * that follows registrations and was given no target of its own runs
 * until END or close.
 *
 * /proc/pfprof/status
 * -------------------
 * Writing "R <pid>" registers a process, "U <pid>" unregisters it: exactly
 * one letter, one space, a decimal pid greater than zero, an optional
 * newline; the pid is read in the writer's pid namespace.  The writer and
 * whoever opened the file must both be allowed to ptrace-read the process.
 * A registration joins every session that follows registrations, whose
 * scope covers the process, whose opener (and FOLLOW's caller) may
 * ptrace-read it and can name it in its pid namespace, and that takes
 * registrations by the writer's user (the opener's own, unless
 * PFPROF_FOLLOW_OTHER_USERS), at that session's next period (counted from the
 * registration all the same); unregistering (only by the user who
 * registered it: -EPERM otherwise) takes it out of the sessions it joined
 * that way at their next period (at once where it was the last process),
 * its own counts until the unregistration.  A registration is its file
 * opener's (effective uid), whoever writes.  A user may have the
 * module parameter max_registrations processes registered at once
 * (-ENOSPC beyond).  A registered process that is gone is forgotten within
 * a second.  Reading the file lists
 * "<pid> <minor> <major> <cpu_ns>" per registered process the reader may
 * ptrace-read and can name in its pid namespace, counts since registration.
 *
 * The area
 * --------
 * One region of PFPROF_AREA_SIZE(pages) bytes: a control page followed by
 * data pages.  The control page starts with struct pfprof_area; the data
 * pages are an array of slot_count struct pfprof_sample.  Every offset in
 * the area is relative to its start; no field holds an address, because an
 * address means nothing on the other side of the mapping.
 *
 * The producer (the module's sampler, or the user-space producer that plays
 * its role on a memfd) writes samples; the consumer (the monitor) reads them.
 * Both count samples with monotonic 64-bit sequence numbers starting at 0
 * when the consumer selects a mode; the slot of sequence s is
 * s % slot_count.  A sequence number never wraps in practice (2^64 samples).
 *
 * Trust
 * -----
 * The consumer can write every byte of the area.  The module therefore
 * keeps its own write sequence, mode, geometry and cancellation state in
 * kernel memory and only ever *publishes* them here; it never derives an
 * address, a length or a loop bound from a value it reads back.  A hostile
 * consumer can spoil its own samples and nothing else.  The words the
 * module must read (semaphore counts, the lock, the read cursor) are read
 * once with READ_ONCE()/cmpxchg() and only decide whether to write a slot
 * or to wait - and every wait is bounded.
 *
 * Strict protocol (PFPROF_MODE_STRICT): no sample is ever lost
 * ---------------------------------------------------------------
 *   full.count  = samples written and not yet taken by the consumer
 *   empty.count = free slots; full.count + empty.count == slot_count
 *
 *   producer, per sample:            consumer, per batch:
 *     down(empty)                      k = down_all(full)   (k >= 1)
 *     lock                             lock
 *     slots[seq % n] = sample          copy slots [rseq, rseq + k)
 *     write_seq = ++seq                read_seq = rseq += k
 *     unlock                           unlock
 *     up(full)                         up(empty, k)
 *
 * down() is a compare-and-swap loop on count that never lets it go below
 * zero; down_all() takes every unit available at once (a semaphore down by
 * k), which is still the strict design and far cheaper per sample.
 *
 * Sleeping and waking use the waiters word of each semaphore (Dekker
 * pattern, both sides sequentially consistent):
 *
 *   side that must wait:                side that posts:
 *     xchg(waiters, 1)                    count += k        (full barrier)
 *     (a full barrier)                    if xchg(waiters, 0) != 0:
 *     if count > 0 or canceled:               wake the other side
 *         waiters = 0; retry
 *     sleep while waiters == 1
 *
 * Either the waiter sees the new count, or the poster sees waiters == 1 and
 * wakes it; cancellation sets canceled and then does the same xchg, so a
 * sleeper never misses it.  In user space "sleep" is FUTEX_WAIT on the
 * waiters word (expected value 1) and "wake" is FUTEX_WAKE.  With the
 * module, the consumer sleeps in PFPROF_IOC_WAIT_FULL (the module wakes it
 * on every up(full) and at cancellation from its own wait queue, whatever
 * full.waiters says) and wakes a producer sleeping on empty with
 * PFPROF_IOC_WAKE_PRODUCER when it finds empty.waiters set.  The module
 * relies on neither: it offers the sample again at its next period
 * boundary anyway, and a WAKE_PRODUCER after it set empty.waiters earns one
 * early offer of that same sample, at most one per period, however often
 * it is asked (and none until the next delivery once it asked without
 * having freed a slot).  A consumer can neither hang the module's sampler
 * nor make it work more often.
 *
 * While the producer waits for a free slot its fault and CPU counters keep
 * accumulating; the next sample it writes covers the longer interval, so
 * counts are conserved.  blocked_ns counts the time from the first offer
 * the ring refused to the delivery, published as it grows.
 *
 * Time
 * ----
 * sample.time_ns is CLOCK_MONOTONIC (clock_gettime() in user space,
 * ktime_get_ns() in the kernel) when the sample's counts were read.  The
 * module's periods end on absolute deadlines, start + k * period_ns from
 * the session's first process, so intervals do not drift; a period the sampler
 * could not keep is folded into the next sample.
 *
 * Relaxed protocol (PFPROF_MODE_RELAXED): the producer never blocks
 * ----------------------------------------------------------------
 *   producer, per sample:            consumer, per drain:
 *     lock                             lock
 *     slots[seq % n] = sample          w = write_seq; c = canceled
 *     if seq >= read_seq + n:          unlock
 *         overwritten++                start = max(r, w - n)
 *     write_seq = ++seq                lost += start - r
 *     unlock                           copy slots [start, w)
 *                                      lock
 *                                      w2 = write_seq
 *                                      read_seq = w
 *                                      unlock
 *                                      samples s < w2 - n were overwritten
 *                                      while being copied: drop, lost++
 *                                      r = w
 *
 * The producer writes a slot only while holding the lock and advances
 * write_seq in the same critical section, so once the consumer holds the
 * lock again every write that could have touched its copy is complete and
 * counted in w2: a torn sample is always detected.  The consumer's count of
 * lost samples is exact; the producer's overwritten counter is advisory
 * (it depends on read_seq, which the consumer writes).
 *
 * The lock
 * --------
 * A test-and-set word: 0 free, otherwise the owner (PFPROF_LOCK_PRODUCER or
 * PFPROF_LOCK_CONSUMER).  Taken with cmpxchg(FREE -> owner) (acquire), so
 * a failed attempt never overwrites the owner; released with a store
 * (release).  The producer never waits on it without bound: it tries for a
 * short, fixed time (PFPROF_LOCK_SPIN_NS) and otherwise defers the sample to its next period
 * (counting it in deferred), so a consumer that dies holding the lock cannot
 * hang the sampler.  The consumer may spin, yield or sleep.
 *
 * Ending
 * ------
 * When every process of the session is gone and its last sample is
 * written, the producer sets canceled (release) and wakes both sides.  The consumer takes
 * what is left and stops when it sees canceled (acquire) and nothing ready.
 *
 * Where the faults were: the faults region
 * ----------------------------------------
 * Beside the area, a session has a second region, mapped from offset
 * info.faults_offset with length info.faults_size: a control page (struct
 * pfprof_faults_area) and an array of record_count struct pfprof_fault.
 * After PFPROF_IOC_ATTRIBUTE, the module records the faults of the
 * session's processes through the kernel's software perf events
 * (PERF_COUNT_SW_PAGE_FAULTS_MAJ: every one; _MIN: one in minor_sampling),
 * each with its process, address, time and the instruction that took it,
 * and its sampler copies them
 * here once a period, before that period's sample is offered to the ring
 * (and every 100 ms at least when the period is longer, so that a consumer
 * may read a short-lived process's maps while it lives):
 * a consumer that holds a sample of time T finds here every fault recorded
 * up to T, but for one whose handler was still running on another CPU
 * then (it comes with the next period's).  Addresses are resolved to
 * mappings by the consumer, from /proc/<pid>/maps with its own rights: the
 * module never names a mapping.  A fault is recorded only if the opener
 * and whoever asked for the member whose events count it may ptrace-read
 * its process as the fault is taken (such faults are counted as dropped) and the opener can
 * name it in its pid namespace.  Who may ask for attribution at all is the
 * module parameter attribution's to say (by default an opener with
 * CAP_PERFMON or CAP_SYS_ADMIN, as Debian's perf_event_paranoid=3 allows
 * perf events to them only): -EPERM for others.
 *
 * The module is the only writer, and never blocks on the consumer: the
 * slot of sequence s is s % record_count, and the oldest records are
 * overwritten when the consumer falls behind.  Nothing the consumer writes
 * is read back.
 *
 *   module, per batch of k records:     consumer, per drain:
 *     claimed_seq = w + k                 w = write_seq      (acquire)
 *     (write barrier)                     start = max(r, w - n)
 *     slots[(w..w+k) % n] = records       lost += start - r
 *     write_seq = w + k   (release)       copy slots [start, w)
 *                                         (read barrier)
 *                                         c = claimed_seq
 *                                         records s < c - n were being
 *                                         overwritten while copied: lost
 *                                         r = w
 *
 * written_major and written_minor count the records of each kind written,
 * changed only with write_seq, after a claim: read between an acquire of
 * write_seq == w and a claimed_seq still equal to w (after a read
 * barrier), they are w's, and those the consumer did not receive are its
 * lost records of each kind.
 *
 * The consumer's count of lost records is exact.  What the module could
 * not record (its per-CPU buffers full between two periods, a process the
 * opener may not read or name) is counted in dropped_major and
 * dropped_minor (published with each period's records): faults not in
 * the region, exactly counted.  Faults taken after the session's last
 * sample are not copied.  A process whose
 * threads exceed the module's bound on events (the module parameter
 * max_fault_threads, per session), that makes threads faster than the
 * module lists them, or that its session may not read (a member running a
 * setuid program) is not recorded at all, until a later try: unattributed
 * counts such processes, those PFPROF_IOC_ATTRIBUTE does not cover, and,
 * for good, each exec that left a member or a process of a member's tree
 * not dumpable (perf removes its events then; what it does after is
 * counted, not recorded: a member's until the next period gives it events
 * again, if its session may read the new program, another process's after
 * an exec back into a program the opener may read).
 * Not counted anywhere (the events follow what a thread starts after they
 * exist): processes already below an inheriting member when it joins or
 * its events are made, the descendants of a member whose events went
 * (it left, or was refused) while they live on, and, for the moment a
 * sync takes to make its own, a member whose threads carried only the
 * inherited events of one that left.
 *
 * Cache lines
 * -----------
 * Fields the producer writes, fields the consumer writes, the lock, and each
 * semaphore sit on separate 64-byte lines so that the two sides do not
 * invalidate each other's lines for data they do not share.
 */
#ifndef _UAPI_LINUX_PFPROF_H
#define _UAPI_LINUX_PFPROF_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PFPROF_MAGIC		0x46504650u	/* "PFPF" in little-endian memory */
#define PFPROF_ABI_VERSION	6u

#define PFPROF_DEVICE_PATH	"/dev/pfprof"
#define PFPROF_PROC_PATH	"/proc/pfprof/status"

/*
 * Defaults and bounds: the module's parameters period_ms and buffer_pages,
 * and the period and size the monitor's user-space backend uses. Plain
 * literals: the module's parameter descriptions spell them with
 * __stringify().
 */
#define PFPROF_PERIOD_MS_DEFAULT	50
#define PFPROF_PERIOD_MS_MIN		1
#define PFPROF_PERIOD_MS_MAX		10000
#define PFPROF_BUFFER_PAGES_DEFAULT	128
/* A control page and at least one page of slots; at most 256 MiB. */
#define PFPROF_BUFFER_PAGES_MIN		2
#define PFPROF_BUFFER_PAGES_MAX		65536
/* How long the producer tries for the shared lock before deferring, ns. */
#define PFPROF_LOCK_SPIN_NS		10000u

/* Modes, selected by the consumer with PFPROF_IOC_SET_MODE. */
#define PFPROF_MODE_NONE	0u	/* no consumer attached yet */
#define PFPROF_MODE_STRICT	1u
#define PFPROF_MODE_RELAXED	2u

/* Values of the lock word. */
#define PFPROF_LOCK_FREE	0u
#define PFPROF_LOCK_PRODUCER	1u
#define PFPROF_LOCK_CONSUMER	2u

#define PFPROF_CACHELINE_SIZE	64
#define PFPROF_PAGE_SIZE	4096
/* The control page; the first slot starts right after it. */
#define PFPROF_DATA_OFFSET	PFPROF_PAGE_SIZE
/* Size of an area of the given number of pages, control page included. */
#define PFPROF_AREA_SIZE(pages)	((__u64)(pages) * PFPROF_PAGE_SIZE)

/*
 * One sample: what the session's processes did during one period, summed,
 * and the memory they held when it ended.  Written only by the producer,
 * only inside a slot it owns.  One cache line.
 *
 * minor, major and cpu_ns are deltas over the period: a sample the producer
 * could not write is merged into the next one by adding them.  rss_anon,
 * rss_file, rss_shmem and swap are levels at the period's end (the kernel's
 * MM_ANONPAGES, MM_FILEPAGES, MM_SHMEMPAGES and MM_SWAPENTS, in bytes; what
 * /proc/<pid>/status shows as RssAnon, RssFile, RssShmem and VmSwap), summed
 * over the same processes as the faults: the live members and, with
 * PFPROF_TARGET_INHERIT, their live descendants.  A process that has exited
 * (a zombie has no memory) or was reaped contributes nothing; a merged
 * sample carries the later period's levels.
 */
struct pfprof_sample {
	__u64 time_ns;	/* CLOCK_MONOTONIC when the period ended, ns */
	__u64 minor;	/* minor faults during the period */
	__u64 major;	/* major faults during the period */
	__u64 cpu_ns;	/* CPU time (user + system) during the period, ns */
	__u64 rss_anon;	/* resident anonymous memory at the period's end, bytes */
	__u64 rss_file;	/* resident file-backed memory, bytes */
	__u64 rss_shmem;	/* resident shared memory (shmem, tmpfs), bytes */
	__u64 swap;	/* anonymous memory swapped out, bytes */
};

/* A counting semaphore both sides operate on atomically. */
struct pfprof_sem {
	__u32 count;	/* units available; never below zero */
	__u32 waiters;	/* 1 while the side that downs it may be asleep */
};

/*
 * The control page.  "P" marks a field only the producer writes, "C" one
 * only the consumer writes, "PC" one both change with atomic operations.
 * The producer initializes every field when the consumer selects a mode.
 */
struct pfprof_area {
	/* Line 0, P, constant for the whole session: describes the area. */
	__u32 magic;		/* PFPROF_MAGIC */
	__u32 abi_version;	/* PFPROF_ABI_VERSION */
	__u32 mode;		/* PFPROF_MODE_* */
	__u32 sample_size;	/* sizeof(struct pfprof_sample) */
	__u64 area_size;	/* bytes, control page included */
	__u64 data_offset;	/* offset of slot 0: PFPROF_DATA_OFFSET */
	__u64 slot_count;	/* (area_size - data_offset) / sample_size */
	__u64 period_ns;	/* the sampling period the producer keeps */
	__u64 reserved0[2];

	/* Line 1, P: progress and counters. */
	__u64 write_seq;	/* samples written this session; store-release */
	__u64 overwritten;	/* relaxed: samples overwritten unread (advisory) */
	__u64 blocked_ns;	/* strict: time spent waiting for a free slot */
	__u64 deferred;		/* periods whose sample waited: lock held by the consumer */
	__u32 canceled;		/* 1: no more samples; store-release after the last */
	__u32 withdrawn;	/* processes no longer counted: see "Sessions" */
	__u64 reserved2[3];

	/* Line 2, C: the consumer's progress. */
	__u64 read_seq;		/* samples consumed; store-release */
	__u64 reserved3[7];

	/* Line 3, PC: the shared lock, PFPROF_LOCK_*. */
	__u32 lock;
	__u32 reserved4[15];

	/* Line 4, PC: strict only, samples ready; the consumer downs it. */
	struct pfprof_sem full;
	__u64 reserved5[7];

	/* Line 5, PC: strict only, free slots; the producer downs it. */
	struct pfprof_sem empty;
	__u64 reserved6[7];
};

/*
 * PFPROF_IOC_INFO: the handshake.  User space sets abi_version to the
 * version it speaks and every other field to zero; the module answers with
 * its own version and the geometry, and fails with -EPROTO (abi_version
 * still set to its own) when it does not speak the caller's version.
 * Non-zero flags, reserved or out fields fail with -EINVAL.
 */
struct pfprof_info {
	__u32 abi_version;	/* in: caller's; out: module's */
	__u32 flags;		/* must be 0 */
	__u64 area_size;	/* out: the one length mmap accepts, at offset 0 */
	__u64 slot_count;	/* out */
	__u32 sample_size;	/* out */
	__u32 reserved0;	/* must be 0 */
	__u64 period_ns;	/* out: the sampling period */
	__u64 faults_offset;	/* out: the faults region's mmap offset; in: 0 */
	__u64 faults_size;	/* out: its one length mmap accepts; in: 0 */
	__u64 reserved;		/* must be 0 */
};

#define PFPROF_IOC_MAGIC	0xB8

#define PFPROF_IOC_INFO		_IOWR(PFPROF_IOC_MAGIC, 0x00, struct pfprof_info)
/*
 * The argument points to a __u32: PFPROF_MODE_STRICT or PFPROF_MODE_RELAXED
 * (anything else: -EINVAL).  Starts the ring: the module reinitializes
 * the whole control page (sequence numbers, semaphores, lock, counters,
 * canceled).  What the session's processes did before is reported in its
 * first sample.
 */
#define PFPROF_IOC_SET_MODE	_IOW(PFPROF_IOC_MAGIC, 0x01, __u32)
/*
 * Strict consumer: sleep until full.count > 0 or the session is canceled.
 * The argument points to a __u32 timeout in milliseconds, 0 for none.  Returns 0 when
 * either holds, -ETIMEDOUT when the timeout passed, -EINTR on a signal,
 * -EINVAL outside a strict session.
 */
#define PFPROF_IOC_WAIT_FULL	_IOW(PFPROF_IOC_MAGIC, 0x02, __u32)
/* Strict consumer: wake the producer if it sleeps waiting for a free slot. */
#define PFPROF_IOC_WAKE_PRODUCER _IO(PFPROF_IOC_MAGIC, 0x03)

/* Count the process's descendants with it (see "Sessions"). */
#define PFPROF_TARGET_INHERIT	(1u << 0)
/*
 * Count what it did since it started, not since it joined: for a command
 * the monitor forked and holds before exec, its whole life (its rusage).
 * PFPROF_IOC_ADD only.
 */
#define PFPROF_TARGET_WHOLE_LIFE	(1u << 1)

/*
 * PFPROF_IOC_ADD: the process (thread group) pid, in the caller's pid
 * namespace, joins this session; its counts start now (or at its start,
 * PFPROF_TARGET_WHOLE_LIFE).  -EINVAL: pid <= 0,
 * unknown flags or non-zero reserved; -ESRCH: no such process; -EPERM: the
 * caller or the opener may not ptrace-read it; -EEXIST: the session counts
 * it already; -ELOOP: it has more than PFPROF_DEPTH_MAX real parents (a
 * chain of processes each the child of the one before: the module's looks up
 * a process's ancestry stop there, so that no user's nesting makes them
 * long); -ENOSPC: the session has PFPROF_MEMBERS_MAX processes;
 * -ESHUTDOWN: the session has ended.
 */
struct pfprof_target {
	__s32 pid;
	__u32 flags;		/* PFPROF_TARGET_* */
	__u64 reserved;		/* must be 0 */
};

#define PFPROF_MEMBERS_MAX	4096
#define PFPROF_DEPTH_MAX	256

/* Which /proc registrations a session follows (PFPROF_IOC_FOLLOW). */
#define PFPROF_FOLLOW_NONE		0u	/* none: the default */
#define PFPROF_FOLLOW_ALL		1u	/* every one the opener may read */
#define PFPROF_FOLLOW_DESCENDANTS	2u	/* pid's and its descendants' */
/*
 * A flag of PFPROF_IOC_FOLLOW: registrations by every user, not only by
 * the opener's (its effective uid), join; they never end the session.
 */
#define PFPROF_FOLLOW_OTHER_USERS	(1u << 8)

/*
 * PFPROF_IOC_FOLLOW: from now on, registrations in scope join the session
 * with flags (PFPROF_TARGET_INHERIT, PFPROF_FOLLOW_OTHER_USERS); processes
 * registered already join at once.  A FOLLOW replaces the one before.
 * pid (DESCENDANTS only, else 0) is read in the caller's pid namespace and
 * must be readable as for PFPROF_IOC_ADD.  Errors as PFPROF_IOC_ADD's.
 */
struct pfprof_follow {
	__u32 scope;		/* PFPROF_FOLLOW_* */
	__u32 flags;		/* PFPROF_TARGET_* for the processes joining */
	__s32 pid;
	__u32 reserved;		/* must be 0 */
};

#define PFPROF_IOC_ADD		_IOW(PFPROF_IOC_MAGIC, 0x04, struct pfprof_target)
#define PFPROF_IOC_FOLLOW	_IOW(PFPROF_IOC_MAGIC, 0x05, struct pfprof_follow)
/*
 * End the session now: its processes leave (their changes since the last
 * sample still reach it), it follows nothing more, and it ends after its
 * last sample - at once if it never counted a process.
 */
#define PFPROF_IOC_END		_IO(PFPROF_IOC_MAGIC, 0x06)

/*
 * PFPROF_IOC_ADD_CGROUP: the processes of the cgroup (v2) whose directory
 * fd is open, and of its descendant cgroups, are counted while they are
 * inside: each from when a period first finds it there (from its fork
 * when a process counted there forked it), until a period finds it gone or
 * outside, what it did inside staying counted; a process the opener may not
 * read is not counted (area.withdrawn says how many).  A process whose
 * parent is outside and reaps it loses what it did since the last period;
 * one that enters or leaves, what it did inside within a period of that.
 * The session's only target: -EBUSY once it has counted a process, and ADD
 * (-EBUSY) and registrations are refused after it.  When the cgroup is
 * removed the session ends, after its last sample.  -EINVAL: flags or
 * reserved not 0; -EBADF: fd is not a cgroup2 directory; -EOPNOTSUPP: a
 * kernel without control groups.
 */
struct pfprof_cgroup_target {
	__s32 fd;
	__u32 flags;		/* must be 0 */
	__u64 reserved;		/* must be 0 */
};

#define PFPROF_IOC_ADD_CGROUP	_IOW(PFPROF_IOC_MAGIC, 0x07, struct pfprof_cgroup_target)

/* The faults region: see "Where the faults were". */
#define PFPROF_FAULTS_MAGIC	0x54464650u	/* "PFFT" in little-endian memory */
/*
 * Bounds of minor_sampling, PFPROF_IOC_ATTRIBUTE's: one minor fault in N
 * is recorded (a ratio, not a time: "period" is the sampling period only).
 */
#define PFPROF_MINOR_SAMPLING_MIN		1
#define PFPROF_MINOR_SAMPLING_MAX		1000000
/*
 * How often, at least, the faults recorded reach the region when the period
 * is longer: a consumer names a fault's mapping from its process's maps,
 * read while the process lives, so it drains the region as often.
 */
#define PFPROF_FAULTS_DRAIN_MS			100

/* Kinds of struct pfprof_fault. */
#define PFPROF_FAULT_MAJOR	1u	/* a major fault: every one is recorded */
#define PFPROF_FAULT_MINOR	2u	/* a minor fault: one in minor_sampling */

/* One fault, as recorded in the faulting process's context. */
struct pfprof_fault {
	__u64 time_ns;	/* CLOCK_MONOTONIC when it was taken, ns */
	__u64 address;	/* the faulting address in the process */
	__s32 pid;	/* its process (tgid), in the opener's pid namespace */
	__u32 kind;	/* PFPROF_FAULT_* */
	__u64 ip;	/* the user instruction that took it, or where the
			 * process entered the kernel that took it for it
			 * (a read() into a page not there yet); 0: none */
};

/* The faults region's control page. */
struct pfprof_faults_area {
	/* Line 0, constant for the session. */
	__u32 magic;		/* PFPROF_FAULTS_MAGIC */
	__u32 record_size;	/* sizeof(struct pfprof_fault) */
	__u64 region_size;	/* bytes, control page included */
	__u64 data_offset;	/* offset of record 0 in the region: PFPROF_PAGE_SIZE */
	__u64 record_count;	/* (region_size - data_offset) / record_size */
	__u64 minor_sampling;	/* PFPROF_IOC_ATTRIBUTE's; 0: not attributing */
	__u64 reserved0[3];

	/* Line 1: the module bumps it before it writes records. */
	__u64 claimed_seq;
	__u64 reserved1[7];

	/* Line 2: published after the records; write_seq store-release. */
	__u64 write_seq;	/* records written this session */
	__u64 written_major;	/* of them, PFPROF_FAULT_MAJOR */
	__u64 written_minor;	/* of them, PFPROF_FAULT_MINOR */
	__u64 dropped_major;	/* major faults not recorded, ever */
	__u64 dropped_minor;	/* sampled minor faults not recorded, ever */
	__u32 unattributed;	/* processes not recorded: see above */
	__u32 reserved2;
	__u64 reserved3[2];
};

/*
 * PFPROF_IOC_ATTRIBUTE: record where the session's processes fault, one
 * minor fault in minor_sampling (every major one), from the next period on.
 * Only members that count with their descendants (PFPROF_TARGET_INHERIT)
 * are recorded, since the events follow a process's threads and children
 * alike; the others, and a cgroup target, count in unattributed.  Once per
 * session: -EBUSY after.  -EINVAL: minor_sampling out of bounds, flags or
 * reserved not 0.
 */
struct pfprof_attribution {
	__u32 minor_sampling;
	__u32 flags;		/* must be 0 */
	__u64 reserved;		/* must be 0 */
};

#define PFPROF_IOC_ATTRIBUTE	_IOW(PFPROF_IOC_MAGIC, 0x08, struct pfprof_attribution)

#endif /* _UAPI_LINUX_PFPROF_H */
