// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: what a process has done and holds, read the way /proc reads it:
 * its fault and CPU counters, its reaped children's, and its resident and
 * swapped memory.  Nothing here writes to the process or sleeps.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/mm.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/seqlock.h>

#include "compat.h"
#include "pfprof_internal.h"

/*
 * Totals of the process whose group leader is @leader, read the way
 * do_task_stat() and thread_group_cputime() read them and without writing
 * anything: the signal struct holds what exited threads took (added by
 * __exit_signal() under stats_lock, in the same section that unlinks the
 * thread), each live thread holds its own.  CPU time is sum_exec_runtime in
 * nanoseconds: what utime + stime of wait4() add up to.  @reaped, when
 * given, gets the reaped children's counts (wait4()'s RUSAGE_CHILDREN).
 * Returns false once every thread has been released: the totals are then
 * final.
 *
 * The caller's reference on @leader, or RCU, keeps ->signal alive.
 */
bool pfprof_read_counters(struct task_struct *leader, struct pfprof_counters *own,
			  struct pfprof_counters *reaped)
{
	struct signal_struct *sig = leader->signal;
	struct task_struct *th;
	unsigned long flags;
	int seq, nextseq = 0;
	bool alive;

	rcu_read_lock();
	do {
		seq = nextseq;
		flags = read_seqbegin_or_lock_irqsave(&sig->stats_lock, &seq);
		own->minor = sig->min_flt;
		own->major = sig->maj_flt;
		own->cpu_ns = sig->sum_sched_runtime;
		if (reaped) {
			reaped->minor = sig->cmin_flt;
			reaped->major = sig->cmaj_flt;
			reaped->cpu_ns = sig->cutime + sig->cstime;
		}
		__for_each_thread(sig, th) {
			own->minor += READ_ONCE(th->min_flt);
			own->major += READ_ONCE(th->maj_flt);
			own->cpu_ns += READ_ONCE(th->se.sum_exec_runtime);
		}
		alive = !list_empty(&sig->thread_head);
		/* If the lockless pass raced a writer, retry holding the lock. */
		nextseq = 1;
	} while (need_seqretry(&sig->stats_lock, seq));
	done_seqretry_irqrestore(&sig->stats_lock, seq, flags);
	rcu_read_unlock();
	return alive;
}

/*
 * Adds what the process whose group leader is @leader holds now to
 * @memory: its mm's resident anonymous, file and shmem pages and its
 * swapped-out ones, as exactly as the kernel keeps them (compat.h).  The
 * mm is found through a thread that still has it (the leader may have
 * exited before the others); a zombie, or a process without one, holds
 * nothing.  Neither sleeps nor takes the mmap lock: under RCU or not.
 */
void pfprof_read_memory(struct task_struct *leader, struct pfprof_memory *memory)
{
	struct task_struct *t;
	struct mm_struct *mm;

	rcu_read_lock();
	for_each_thread(leader, t) {
		task_lock(t);
		mm = t->mm;
		if (mm) {
			memory->anon += (u64)pfprof_mm_pages(mm, leader, MM_ANONPAGES) << PAGE_SHIFT;
			memory->file += (u64)pfprof_mm_pages(mm, leader, MM_FILEPAGES) << PAGE_SHIFT;
			memory->shmem += (u64)pfprof_mm_pages(mm, leader, MM_SHMEMPAGES) << PAGE_SHIFT;
			memory->swap += (u64)pfprof_mm_pages(mm, leader, MM_SWAPENTS) << PAGE_SHIFT;
		}
		task_unlock(t);
		if (mm)
			break;
	}
	rcu_read_unlock();
}
