// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: execs that may hide a process from its profiler.
 *
 * A process a session counts that execs a setuid program (anything that
 * leaves it not dumpable, or a secure exec) must stop being counted at the
 * exec, as perf stops counting a task there.  Every such exec is told, at
 * the exec (the sched_process_exec tracepoint: the new credentials and
 * dumpability are in place), to every session: a member is marked
 * (members.c withdraws it at its next look, gone or not), a kin is hidden
 * with its own counts then (lineage.c counts what it did before the exec,
 * nothing after, nor what it forks later), which holds whether it runs,
 * exits and is reaped before the next look or not.
 *
 * Only an exec that hides a process its session could read by its real
 * ids (another user's process is not counted anyway) concerns the session.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/binfmts.h>
#include <linux/list.h>
#include <linux/overflow.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/tracepoint.h>
#include <linux/user_namespace.h>

#include "compat.h"

/* Spinlocks and allocations in a tracepoint's probe sleep there. */
#ifdef CONFIG_PREEMPT_RT
#error "pfprof does not support PREEMPT_RT kernels: its fork and exec probes run atomic"
#endif
#include "pfprof_internal.h"

static struct tracepoint *pfprof_exec_tp;

/*
 * @s's opener, or whoever asked for @m, could read @p as its real ids say
 * (no other user's process) and may not read it now: the exec hides it.
 * @hidden_ns: where @p's exec left it not dumpable, or NULL.  Under RCU.
 */
static bool pfprof_exec_hides_from(struct pfprof_session *s,
				   struct pfprof_member *m, struct task_struct *p,
				   struct user_namespace *hidden_ns)
{
	return pfprof_hidden_from(s->opener_cred, p, hidden_ns) ||
	       (m && pfprof_hidden_from(m->asker, p, hidden_ns));
}

/* @p is a process of a user @s asks about: its opener's, or any with another asker. */
static bool pfprof_exec_concerns(struct pfprof_session *s, struct task_struct *p)
{
	return READ_ONCE(s->foreign_asker) ||
	       uid_eq(s->opener_cred->fsuid, __task_cred(p)->uid);
}

/*
 * perf removed the events of @p, which an exec left not dumpable: tells
 * @s's attribution if @p is its member or in a member's tree, whoever may
 * read it.  Under RCU.
 */
static void pfprof_exec_unrecorded(struct pfprof_session *s,
				   struct task_struct *p)
{
	struct pfprof_member *m = pfprof_member_of_rcu(s, p->signal);

	if (m) {
		if (READ_ONCE(m->inherit))
			pfprof_faults_exec(s, true);
		return;
	}
	m = pfprof_lineage_owner(s, p->signal);
	if (m && !m->cgrp)
		pfprof_faults_exec(s, false);
}

/* What the exec probe tells every session. */
struct pfprof_exec {
	struct task_struct *task;
	struct pfprof_counters at_exec;	/* its own counts then */
	struct user_namespace *hidden_ns;	/* where it is not dumpable, or NULL */
};

/*
 * Tells @s of an exec if it hides the process from @s: a member is marked
 * (members.c withdraws it), a kin, or a process of its cgroup, hidden
 * (lineage.c).  Under RCU.
 */
static void pfprof_exec_offer(struct pfprof_session *s, void *arg)
{
	const struct pfprof_exec *e = arg;
	struct task_struct *p = e->task;
	struct pfprof_member *m;

	/*
	 * Before the cheap filter below: a session that may read another
	 * user's processes (CAP_SYS_PTRACE) counts them, and perf removed
	 * their events all the same.
	 */
	if (e->hidden_ns && READ_ONCE(s->faults.minor_sampling))
		pfprof_exec_unrecorded(s, p);
	/* Cheap first: a process of another user than those it asks for. */
	if (!pfprof_exec_concerns(s, p))
		return;
	m = pfprof_member_of_rcu(s, p->signal);
	if (m && pfprof_exec_hides_from(s, m, p, e->hidden_ns))
		WRITE_ONCE(m->hidden, true);
	if (!READ_ONCE(s->nr_inheriting))
		return;
	/* A kin (a member too, about to be absorbed or not joined yet). */
	m = pfprof_lineage_owner(s, p->signal);
	if (m) {
		if (pfprof_exec_hides_from(s, m, p, e->hidden_ns))
			pfprof_lineage_hide(s, p, &e->at_exec);
		return;
	}
	/*
	 * In the cgroup, not walked yet: its life before the exec counts only
	 * if the opener and the cgroup's asker both could read it (it was
	 * their user's), as the walk would have judged it.
	 */
	m = READ_ONCE(s->cgroup);
	if (m && pfprof_hidden_from(s->opener_cred, p, e->hidden_ns) &&
	    pfprof_hidden_from(m->asker, p, e->hidden_ns))
		pfprof_lineage_hide(s, p, &e->at_exec);
}

/*
 * The tracepoint's probe, in the exec'ing task after its exec (its new
 * credentials and dumpability in place): atomic context.  What concerns a
 * session is an exec that leaves the process not dumpable, or a secure one
 * (setuid, setgid, file capabilities).
 */
static void pfprof_exec_probe(void *data, struct task_struct *p, pid_t old_pid,
			      struct linux_binprm *bprm)
{
	struct pfprof_exec e = { .task = p, .hidden_ns = pfprof_undumpable_ns(p) };

	if (e.hidden_ns || bprm->secureexec) {
		pfprof_read_counters(p, &e.at_exec, NULL);
		/*
		 * Up the layers to the session list, which alone knows the
		 * sessions, and from there (pfprof_exec_unrecorded()) to their
		 * fault events: the module's callbacks (design.md, "What calls
		 * what").
		 */
		pfprof_sessions_each(pfprof_exec_offer, &e);
	}
	if (e.hidden_ns)
		put_user_ns(e.hidden_ns);
}

int pfprof_execs_init(void)
{
	return pfprof_tracepoint_attach("sched_process_exec", pfprof_exec_probe,
					&pfprof_exec_tp,
					"setuid execs cannot be told");
}

/* No session is left. */
void pfprof_execs_exit(void)
{
	pfprof_tracepoint_detach(pfprof_exec_tp, pfprof_exec_probe);
}
