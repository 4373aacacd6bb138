/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pfprof: the kernel API differences between the kernels pfprof builds on
 * (Debian's 6.1, 6.12 and 7.x, and what lies between), in one place.  Each
 * is decided by what the kernel's headers offer, as conftest.sh found it
 * (conftest.h), never by LINUX_VERSION_CODE: distribution kernels backport
 * such changes without changing their version.
 */
#ifndef _PFPROF_COMPAT_H
#define _PFPROF_COMPAT_H

#include <linux/err.h>
#include <linux/mm.h>
#include <linux/perf_event.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/user_namespace.h>

#include "conftest.h"

#ifdef PFPROF_HAVE_TASK_EXEC_STATE
#include <linux/sched/exec_state.h>
#endif

/*
 * What RCU readers may still see is freed after a grace period, without
 * the lazy batching 6.2+ kernels may apply to call_rcu() (seconds): a
 * closed session's memory, and its members', goes at once.  There is no
 * lazy RCU before call_rcu_hurry() exists.
 */
#ifndef PFPROF_HAVE_CALL_RCU_HURRY
#define call_rcu_hurry call_rcu
#endif

/*
 * Before 6.3 vma->vm_flags is written directly; since, through setters
 * that take the mmap lock into account.
 */
#ifndef PFPROF_HAVE_VM_FLAGS_SET
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

/*
 * The user namespace of @task's last exec, referenced (put_user_ns()), when
 * that exec left it not dumpable by its owner (a setuid program, say), so
 * that reading it takes CAP_SYS_PTRACE there; NULL when it is dumpable, or
 * has nothing exec'd to judge.  Where the kernel keeps the two, read under
 * the rule it documents for them: the mm's under task_lock(), 7.x's
 * task_exec_state under RCU (its accessors are not exported).  A task whose
 * mm is gone (it exited, or is a leader whose threads live on) is judged as
 * the kernel does where it saved its dumpability then (user_dumpable:
 * CAP_SYS_PTRACE in the initial namespace); elsewhere it has nothing to judge.
 */
static inline struct user_namespace *pfprof_undumpable_ns(struct task_struct *task)
{
	struct user_namespace *ns = NULL;
#if defined(PFPROF_HAVE_TASK_EXEC_STATE)
	const struct task_exec_state *es;

	rcu_read_lock();
	es = rcu_dereference(task->exec_state);
	if (es && es->dumpable != TASK_DUMPABLE_OWNER)
		ns = get_user_ns(es->user_ns);
	rcu_read_unlock();
#elif defined(PFPROF_HAVE_MM_DUMPABLE)
	struct mm_struct *mm;

	task_lock(task);
	mm = task->mm;
	if (mm && get_dumpable(mm) != SUID_DUMP_USER)
		ns = get_user_ns(mm->user_ns);
#ifdef PFPROF_HAVE_TASK_USER_DUMPABLE
	else if (!mm && !task->user_dumpable)
		ns = get_user_ns(&init_user_ns);
#endif
	task_unlock(task);
#else
#error "conftest.sh found dumpability neither in task_exec_state nor in mm_struct"
#endif
	return ns;
}

/*
 * As pfprof_undumpable_ns(), for the current task from where nothing may
 * sleep or lock (a perf overflow handler, under RCU): no reference, no
 * lock, since its mm and exec state change only by its own exec, which
 * is not running while it is here.
 */
static inline struct user_namespace *pfprof_current_undumpable_ns(void)
{
#if defined(PFPROF_HAVE_TASK_EXEC_STATE)
	const struct task_exec_state *es = rcu_dereference(current->exec_state);

	return es && es->dumpable != TASK_DUMPABLE_OWNER ? es->user_ns : NULL;
#else
	struct mm_struct *mm = current->mm;

	if (mm && get_dumpable(mm) != SUID_DUMP_USER)
		return mm->user_ns;
#ifdef PFPROF_HAVE_TASK_USER_DUMPABLE
	if (!mm && !current->user_dumpable)
		return &init_user_ns;
#endif
	return NULL;
#endif
}

/*
 * Pages of @mm's counter @member (MM_ANONPAGES, MM_FILEPAGES,
 * MM_SHMEMPAGES, MM_SWAPENTS), as exactly as the kernel keeps them: the sum
 * of its per-CPU counters, or (before 6.2) its count and what the threads
 * of @leader, which share @mm, have not folded into it yet.  Under the lock
 * that keeps @mm (task_lock() of a thread using it).
 */
#ifdef PFPROF_HAVE_MM_RSS_PERCPU
static inline unsigned long pfprof_mm_pages(struct mm_struct *mm,
					    struct task_struct *leader,
					    int member)
{
	return percpu_counter_sum_positive(&mm->rss_stat[member]);
}
#else
static inline unsigned long pfprof_mm_pages(struct mm_struct *mm,
					    struct task_struct *leader,
					    int member)
{
	long pages = atomic_long_read(&mm->rss_stat.count[member]);
#ifdef SPLIT_RSS_COUNTING
	struct task_struct *t;

	rcu_read_lock();
	for_each_thread(leader, t)
		pages += READ_ONCE(t->rss_stat.count[member]);
	rcu_read_unlock();
#endif
	return pages > 0 ? pages : 0;
}
#endif

/*
 * Control groups, absent from a kernel built without CONFIG_CGROUPS: a
 * session can then not be given one.
 */
#ifdef PFPROF_HAVE_CGROUP
#include <linux/cgroup.h>

/* The cgroup2 directory open as @fd, referenced, or an ERR_PTR. */
static inline struct cgroup *pfprof_cgroup_from_fd(int fd)
{
	return cgroup_get_from_fd(fd);
}

static inline void pfprof_cgroup_put(struct cgroup *cgrp)
{
	cgroup_put(cgrp);
}

/*
 * Not removed (rmdir) yet: its own css is online (css_is_dying() does not
 * say it of a cgroup's own css on every kernel: 6.12 flags only a
 * controller's dying).
 */
static inline bool pfprof_cgroup_alive(struct cgroup *cgrp)
{
	return READ_ONCE(cgrp->self.flags) & CSS_ONLINE;
}

/* @p's cgroup of the default hierarchy is @cgrp or below it.  Under RCU. */
static inline bool pfprof_in_cgroup(struct cgroup *cgrp, struct task_struct *p)
{
	return cgroup_is_descendant(task_dfl_cgroup(p), cgrp);
}
#else
static inline struct cgroup *pfprof_cgroup_from_fd(int fd)
{
	return ERR_PTR(-EOPNOTSUPP);
}

static inline void pfprof_cgroup_put(struct cgroup *cgrp)
{
}

static inline bool pfprof_cgroup_alive(struct cgroup *cgrp)
{
	return false;
}

static inline bool pfprof_in_cgroup(struct cgroup *cgrp, struct task_struct *p)
{
	return false;
}
#endif

/*
 * The opener's memory cgroup, referenced, to which its session's sampler
 * charges what it allocates (a kthread's own allocations are charged to
 * nobody); NULL where the kernel cannot do that.
 */
#ifdef PFPROF_HAVE_MEMCG_ACTIVE
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>

static inline struct mem_cgroup *pfprof_memcg_get(void)
{
	return get_mem_cgroup_from_mm(current->mm);
}

static inline void pfprof_memcg_put(struct mem_cgroup *memcg)
{
	mem_cgroup_put(memcg);
}

/* From now on the caller's allocations are charged to @memcg: returns the last. */
static inline struct mem_cgroup *pfprof_memcg_charge(struct mem_cgroup *memcg)
{
	return set_active_memcg(memcg);
}
#else
struct mem_cgroup;

static inline struct mem_cgroup *pfprof_memcg_get(void)
{
	return NULL;
}

static inline void pfprof_memcg_put(struct mem_cgroup *memcg)
{
}

static inline struct mem_cgroup *pfprof_memcg_charge(struct mem_cgroup *memcg)
{
	return NULL;
}
#endif

/*
 * @tsk (a kthread working for the current task) joins every cgroup of the
 * current task: its CPU time is the task's cgroups'.
 */
#ifdef PFPROF_HAVE_CGROUP_ATTACH_ALL
#include <linux/cgroup.h>

static inline int pfprof_cgroups_join(struct task_struct *tsk)
{
	return cgroup_attach_task_all(current, tsk);
}
#else
static inline int pfprof_cgroups_join(struct task_struct *tsk)
{
	return 0;
}
#endif

/*
 * The perf context whose events count for @t's software events: its one
 * context from 6.2 on, its software one before.  Under RCU: perf swaps
 * contexts between a parent and a child whose events were all inherited
 * (perf_event_context_sched_out()), so an event made for one task may
 * count for another; what counts for @t is what its context holds now.
 */
static inline struct perf_event_context *pfprof_task_sw_ctx(struct task_struct *t)
{
#ifdef PFPROF_HAVE_TASK_PERF_CTX_SINGLE
	return rcu_dereference(t->perf_event_ctxp);
#else
	return rcu_dereference(t->perf_event_ctxp[perf_sw_context]);
#endif
}

#endif /* _PFPROF_COMPAT_H */
