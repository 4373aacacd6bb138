// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: execs that may hide a process from its profiler.
 *
 * A process in an inheriting member's tree that execs a setuid program
 * (anything that leaves it not dumpable, or a secure exec) must stop being
 * counted at the exec, as perf stops counting a task there.  A walk that
 * finds it alive excludes it (tree.c); but one that runs, exits and is
 * reaped between two walks would bring its whole life in through its
 * reaper's reaped-children counts.  So every such exec is told, at the exec
 * (the sched_process_exec tracepoint: the new credentials and dumpability
 * are in place), to the sessions whose trees hold the process: each gets a
 * record of its totals then, the ancestors between it and its member, and a
 * reference that keeps its final totals and credentials readable.  The
 * session's next walk withholds what it did after the exec from its tree,
 * if the session may not read it (tree.c).
 *
 * Only an exec that hides a process its session could read by its real
 * ids (another user's process is not counted anyway) reaches the session,
 * and only if the process is in its trees (at most PFPROF_TREE_DEPTH_MAX
 * below its member, or it is told it missed one), or a member (then it is
 * marked, and withdrawn at the next look, gone or not).  A session keeps at
 * most PFPROF_EXECS_MAX records; past that (or without memory for one) its
 * next walk withholds every reaped-children count its trees gained,
 * failing closed: only its own user's processes can make it so.
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
#error "pfprof does not support PREEMPT_RT kernels: its exec probe runs atomic"
#endif
#include "pfprof_internal.h"

/* Records a session keeps: far more than its setuid execs between two walks. */
#define PFPROF_EXECS_MAX	256

static struct tracepoint *pfprof_exec_tp;

void pfprof_execs_init_session(struct pfprof_session *s)
{
	spin_lock_init(&s->execs_lock);
	INIT_LIST_HEAD(&s->execs);
}

void pfprof_exec_free(struct pfprof_exec *e)
{
	put_task_struct(e->task);
	kfree(e);
}

static void pfprof_execs_free(struct list_head *execs)
{
	struct pfprof_exec *e, *tmp;

	list_for_each_entry_safe(e, tmp, execs, node) {
		list_del(&e->node);
		pfprof_exec_free(e);
	}
}

/*
 * Moves @s's records to @into.  Returns false when some were not kept (the
 * walk then fails closed).
 */
bool pfprof_execs_take(struct pfprof_session *s, struct list_head *into)
{
	unsigned long flags;
	bool kept;

	spin_lock_irqsave(&s->execs_lock, flags);
	list_splice_tail_init(&s->execs, into);
	s->nr_execs = 0;
	kept = !s->execs_lost;
	s->execs_lost = false;
	spin_unlock_irqrestore(&s->execs_lock, flags);
	return kept;
}

/* Puts @execs, taken and not done with, back before the records made since. */
void pfprof_execs_keep_back(struct pfprof_session *s, struct list_head *execs)
{
	unsigned long flags;
	struct pfprof_exec *e;
	unsigned int nr = 0;

	list_for_each_entry(e, execs, node)
		nr++;
	spin_lock_irqsave(&s->execs_lock, flags);
	if (!s->execs_closed) {
		list_splice_init(execs, &s->execs);
		s->nr_execs += nr;
	}
	spin_unlock_irqrestore(&s->execs_lock, flags);
	pfprof_execs_free(execs);
}

/* @s has no tree any more: its records concern nothing. */
void pfprof_execs_drop(struct pfprof_session *s)
{
	LIST_HEAD(execs);

	pfprof_execs_take(s, &execs);
	pfprof_execs_free(&execs);
}

/* The session closes: no record reaches it any more. */
void pfprof_execs_close(struct pfprof_session *s)
{
	unsigned long flags;
	LIST_HEAD(execs);

	spin_lock_irqsave(&s->execs_lock, flags);
	s->execs_closed = true;
	list_splice_init(&s->execs, &execs);
	spin_unlock_irqrestore(&s->execs_lock, flags);
	pfprof_execs_free(&execs);
}

/* @p is in @s's cgroup and its opener can name it.  Under RCU. */
static bool pfprof_exec_in_cgroup(struct pfprof_session *s,
				  struct pfprof_member *cg, struct task_struct *p)
{
	return pfprof_in_cgroup(cg->cgrp, p) && pid_nr_ns(task_tgid(p), s->pid_ns);
}

/*
 * What counts @p in @s: the member among its nearest real ancestors, which
 * must inherit, or in a session of a cgroup the cgroup's member (@p is in
 * it); *@depth gets how many ancestors lie between (at most
 * PFPROF_TREE_DEPTH_MAX: a deeper one stops the look, *@depth set past it).
 * NULL when nothing of @s counts @p.  Under RCU.
 */
static struct pfprof_member *pfprof_exec_owner(struct pfprof_session *s,
					       struct task_struct *p,
					       unsigned int *depth)
{
	struct pfprof_member *cg = READ_ONCE(s->cgroup), *m;
	struct task_struct *a = p;

	*depth = 0;
	if (cg) {
		if (!pfprof_exec_in_cgroup(s, cg, p))
			return NULL;
		while ((a = pfprof_real_parent(a)) &&
		       pfprof_exec_in_cgroup(s, cg, a) &&
		       ++*depth <= PFPROF_TREE_DEPTH_MAX)
			;
		return cg;
	}
	/* As the walk decides: the nearest member, inheriting or not. */
	while ((a = pfprof_real_parent(a))) {
		m = pfprof_member_of_rcu(s, a->signal);
		if (m)
			return READ_ONCE(m->inherit) ? m : NULL;
		if (++*depth > PFPROF_TREE_DEPTH_MAX)
			return NULL;
	}
	return NULL;
}

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

/* Adds @e (or, NULL, a record that could not be made) to @s's records. */
static void pfprof_exec_keep(struct pfprof_session *s, struct pfprof_exec *e)
{
	unsigned long flags;

	spin_lock_irqsave(&s->execs_lock, flags);
	if (s->execs_closed) {
		/* Nobody walks its trees any more. */
	} else if (!e || s->nr_execs >= PFPROF_EXECS_MAX) {
		s->execs_lost = true;
	} else {
		list_add_tail(&e->node, &s->execs);
		s->nr_execs++;
		e = NULL;
	}
	spin_unlock_irqrestore(&s->execs_lock, flags);
	if (e)
		pfprof_exec_free(e);
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
 * read it, or too deep to tell and a process of a user @s asks about (any
 * user's deep chain would otherwise count in every session).  Under RCU.
 */
static void pfprof_exec_unrecorded(struct pfprof_session *s,
				   struct task_struct *p)
{
	struct pfprof_member *m = pfprof_member_of_rcu(s, p->signal);
	unsigned int depth;

	if (m) {
		if (READ_ONCE(m->inherit))
			pfprof_faults_exec(s, true);
		return;
	}
	if (!READ_ONCE(s->nr_inheriting))
		return;
	m = pfprof_exec_owner(s, p, &depth);
	if (depth > PFPROF_TREE_DEPTH_MAX ? pfprof_exec_concerns(s, p) :
					    m && !m->cgrp)
		pfprof_faults_exec(s, false);
}

/*
 * Tells @s of @p's exec (its totals then: @at_exec; where it left it not
 * dumpable: @hidden_ns) if the exec hides @p from @s: a member is marked
 * (members.c withdraws it), a process in a tree of @s gets a record for its
 * next walk (tree.c).  Under RCU, in the exec'ing task: the record is
 * charged to it.
 */
static void pfprof_exec_offer(struct pfprof_session *s, struct task_struct *p,
			      const struct pfprof_counters *at_exec,
			      struct user_namespace *hidden_ns)
{
	struct pfprof_member *m;
	struct pfprof_exec *e;
	struct task_struct *a = p;
	unsigned int depth, i;

	/*
	 * Before the cheap filter below: a session that may read another
	 * user's processes (CAP_SYS_PTRACE) counts them, and perf removed
	 * their events all the same.
	 */
	if (hidden_ns && READ_ONCE(s->faults.minor_sampling))
		pfprof_exec_unrecorded(s, p);
	/* Cheap first: a process of another user than those it asks for. */
	if (!pfprof_exec_concerns(s, p))
		return;
	m = pfprof_member_of_rcu(s, p->signal);
	if (m) {
		if (pfprof_exec_hides_from(s, m, p, hidden_ns))
			WRITE_ONCE(m->hidden, true);
		return;
	}
	if (!READ_ONCE(s->nr_inheriting))
		return;
	m = pfprof_exec_owner(s, p, &depth);
	if (depth > PFPROF_TREE_DEPTH_MAX) {
		/* Too deep to tell: fail closed, where the exec hides it. */
		if (pfprof_exec_hides_from(s, NULL, p, hidden_ns))
			pfprof_exec_keep(s, NULL);
		return;
	}
	if (!m || !pfprof_exec_hides_from(s, m, p, hidden_ns))
		return;
	e = kmalloc(struct_size(e, up, depth),
		    GFP_NOWAIT | __GFP_ACCOUNT | __GFP_NOWARN);
	if (e) {
		e->task = get_task_struct(p);
		e->key = pfprof_key_of(p);
		e->at_exec = *at_exec;
		e->owner = m->cgrp ? (struct pfprof_tree_key){} :
				     (struct pfprof_tree_key){
					     .sig = m->sig,
					     .start_time = m->start_time };
		/* The same ancestors again, or fewer if some left since. */
		for (i = 0; i < depth && (a = pfprof_real_parent(a)); i++)
			e->up[i] = pfprof_key_of(a);
		e->depth = i;
	}
	pfprof_exec_keep(s, e);
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
	struct pfprof_counters at_exec, reaped;
	struct user_namespace *hidden_ns = pfprof_undumpable_ns(p);

	if (hidden_ns || bprm->secureexec) {
		pfprof_read_counters(p, &at_exec, &reaped);
		pfprof_counters_add(&at_exec, &reaped);
		/*
		 * Up the layers to the session list, which alone knows the
		 * sessions, and from there (pfprof_exec_unrecorded()) to their
		 * fault events: the module's callbacks (design.md, "What calls
		 * what").
		 */
		pfprof_sessions_exec(p, &at_exec, hidden_ns, pfprof_exec_offer);
	}
	if (hidden_ns)
		put_user_ns(hidden_ns);
}

static void pfprof_find_exec_tp(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_process_exec"))
		*(struct tracepoint **)priv = tp;
}

int pfprof_execs_init(void)
{
	int ret;

	for_each_kernel_tracepoint(pfprof_find_exec_tp, &pfprof_exec_tp);
	if (!pfprof_exec_tp) {
		pr_err("no sched_process_exec tracepoint: setuid execs cannot be told\n");
		return -ENOENT;
	}
	ret = tracepoint_probe_register(pfprof_exec_tp, (void *)pfprof_exec_probe,
					NULL);
	if (ret)
		pr_err("sched_process_exec: cannot attach (%d)\n", ret);
	return ret;
}

/* No session is left. */
void pfprof_execs_exit(void)
{
	tracepoint_probe_unregister(pfprof_exec_tp, (void *)pfprof_exec_probe,
				    NULL);
	/* No probe runs any more. */
	tracepoint_synchronize_unregister();
}
