// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the processes of inheriting members' trees and of a session's
 * cgroup, each known from its fork until its release.
 *
 * Twin: monitor/src/backend/procfs/tree.rs, which finds a tree by walking
 * /proc and cannot see forks; the words are the same where the state is
 * (kin, last, counted, kept).
 *
 * A member that inherits counts its descendants too, as perf stat's
 * inherit does: each process it or a descendant forks after its join, and
 * those alive at its join (a walk of the process list, by real parent).
 * Each is a kin, found by its signal struct: the fork probe (the
 * sched_process_fork tracepoint, before the child first runs) makes one
 * for a child whose forker is a member or a kin.  A kin holds its leader,
 * so its signal struct and its final counts stay readable after its
 * release.  Each collection reads every kin's own counts and adds what it
 * did since the last look to what it counted; a kin released has its final
 * counts read once, then leaves.  A tree's count is its member's own, plus
 * every kin's: each process is counted from its own counters, once, and
 * the reaped-children counts of the tree are not followed, so no timing of a
 * reap, an orphan or a reparenting can count a process twice or take one
 * away (a kin reparented out of its tree stays its tree's, as perf's
 * inherited events stay with a task).  What a process's children reaped
 * before it was known is read once, when a walk finds it, and is constant
 * from then on.
 *
 * A session of a cgroup counts each process while it is inside: a walk of
 * the process list at every collection finds those that came in (counted
 * from then; from their birth if born since the walk before the last one,
 * which the fork probe may have missed while their parent was not known);
 * a child forked inside by a kin is one from its fork.  A kin outside at a
 * look counts nothing of the period before; back inside, it counts from
 * then (it stays a kin until its release: a process that comes and goes is
 * never counted twice).
 *
 * Exclusion.  A kin the session's opener (or its member's asker) may not
 * read is not counted at a look that finds it so, nor for the period
 * before; readable again, it counts from then.  One whose exec hid it (a
 * setuid program: the exec probe, exec.c) is hidden for good: what it did
 * before the exec counts, nothing after, nor anything it forks later, as
 * perf stops counting a task at such an exec.
 *
 * Bounded: at most PFPROF_KIN_MAX kin a session.  A process the fork
 * probe or a walk cannot keep (past the bound, or without memory) is not
 * counted, and counts as withdrawn.  A collection offers the CPU between
 * kin; the fork probe costs a lookup in each session with a tree.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/pid.h>
#include <linux/rcupdate.h>
#include <linux/rhashtable.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/tracepoint.h>

#include "compat.h"
#include "pfprof_internal.h"

/* Kin a session keeps: past it, a process is not counted (withdrawn). */
#define PFPROF_KIN_MAX		(1u << 17)

/* A process of a tree or of the session's cgroup. */
struct pfprof_kin {
	struct rhash_head hnode;	/* in the table, by ->sig */
	const struct signal_struct *sig;
	struct list_head node;		/* births, then the kin list */
	struct rcu_head rcu;
	struct task_struct *leader;	/* referenced: ->signal and final counts */
	struct pid *tgid;		/* referenced: its current leader */
	struct pfprof_member *owner;	/* the tree's member, or the cgroup's */
	/* Under the lineage's lock. */
	bool hidden;			/* an exec hid it: nothing after counts */
	bool hidden_seen;		/* a look accounted the exec */
	struct pfprof_counters at_exec;	/* its own counts at that exec */
	/* The collection's, under members_lock. */
	struct pfprof_counters base;	/* added to its own: reaped before it was known */
	struct pfprof_counters last;	/* own + base at the last look */
	struct pfprof_counters counted;	/* what it counted so far */
	bool withdrawn;			/* once counted unreadable */
};

static const struct rhashtable_params pfprof_kin_params = {
	.key_len = sizeof(const struct signal_struct *),
	.key_offset = offsetof(struct pfprof_kin, sig),
	.head_offset = offsetof(struct pfprof_kin, hnode),
	.automatic_shrinking = true,
};

/* How many sessions have trees or a cgroup: the fork probe's cheap filter. */
static atomic_t pfprof_lineages = ATOMIC_INIT(0);
static struct tracepoint *pfprof_fork_tp;

int pfprof_lineage_init(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;
	int ret;

	spin_lock_init(&l->lock);
	INIT_LIST_HEAD(&l->births);
	INIT_LIST_HEAD(&l->kin);
	ret = rhashtable_init(&l->table, &pfprof_kin_params);
	if (ret)
		return ret;
	l->ready = true;
	return 0;
}

static void pfprof_kin_free_rcu(struct rcu_head *rcu)
{
	struct pfprof_kin *k = container_of(rcu, struct pfprof_kin, rcu);

	put_pid(k->tgid);
	put_task_struct(k->leader);
	kfree(k);
}

/*
 * @k leaves: out of the table (the probes find it no more), freed after a
 * grace period (a probe may be looking at it).  Under members_lock, off
 * the births list.
 */
static void pfprof_kin_drop(struct pfprof_lineage *l, struct pfprof_kin *k)
{
	spin_lock(&l->lock);
	rhashtable_remove_fast(&l->table, &k->hnode, pfprof_kin_params);
	l->nr--;
	spin_unlock(&l->lock);
	list_del(&k->node);
	call_rcu(&k->rcu, pfprof_kin_free_rcu);
}

/* @s's kin of the process with signal struct @sig, or NULL.  Under RCU or the lock. */
static struct pfprof_kin *pfprof_kin_of(struct pfprof_lineage *l,
					const struct signal_struct *sig)
{
	return rhashtable_lookup(&l->table, &sig, pfprof_kin_params);
}

/*
 * The member that counts the kin @k: its owner, or the member that
 * absorbed its owner (a kin keeps naming the member it was made for until
 * pfprof_lineage_absorb() moves it).  NULL for an owner that left.  Under
 * the lock, or RCU for a look that the next collection may correct.
 */
static struct pfprof_member *pfprof_kin_owner(const struct pfprof_kin *k)
{
	struct pfprof_member *m = READ_ONCE(k->owner), *by;

	while ((by = READ_ONCE(m->absorbed_by)))
		m = by;
	return READ_ONCE(m->untracked) ? NULL : m;
}

/*
 * The member that counts @k, which @k names from now on; NULL (and @k to
 * be dropped) when its member left.  Under members_lock.
 */
static struct pfprof_member *pfprof_kin_settle_owner(struct pfprof_lineage *l,
						     struct pfprof_kin *k)
{
	struct pfprof_member *m;

	spin_lock(&l->lock);
	m = pfprof_kin_owner(k);
	if (m && m != k->owner)
		WRITE_ONCE(k->owner, m);
	spin_unlock(&l->lock);
	return m;
}

/*
 * A kin of @p for @owner, not linked anywhere yet, or NULL.  Charged to the
 * session's opener, whoever forks or asks: the opener chose to count the
 * tree.  Under RCU, atomic.
 */
static struct pfprof_kin *pfprof_kin_new(struct pfprof_session *s,
					 struct task_struct *p,
					 struct pfprof_member *owner)
{
	struct mem_cgroup *charged = pfprof_memcg_charge(s->memcg);
	struct pfprof_kin *k;

	k = kzalloc(sizeof(*k), GFP_NOWAIT | __GFP_ACCOUNT | __GFP_NOWARN);
	pfprof_memcg_charge(charged);
	if (!k)
		return NULL;
	k->sig = p->signal;
	k->leader = get_task_struct(p);
	k->tgid = get_pid(task_tgid(p));
	k->owner = owner;
	return k;
}

static void pfprof_kin_discard(struct pfprof_kin *k)
{
	put_pid(k->tgid);
	put_task_struct(k->leader);
	kfree(k);
}

/*
 * Puts @k in the table and on @list (the births, or the kin list under
 * members_lock), unless its process is known already or the session is
 * full or closed.  Under the lock.  Returns false when @k was not kept:
 * the caller frees it.
 */
static bool pfprof_kin_link(struct pfprof_lineage *l, struct pfprof_kin *k,
			    struct list_head *list)
{
	int ret;

	lockdep_assert_held(&l->lock);
	if (l->closed)
		return false;
	if (l->nr >= PFPROF_KIN_MAX) {
		l->untracked++;
		return false;
	}
	ret = rhashtable_lookup_insert_fast(&l->table, &k->hnode,
					    pfprof_kin_params);
	if (ret) {
		/* Known already; or the table could not grow: not counted. */
		if (ret != -EEXIST)
			l->untracked++;
		return false;
	}
	l->nr++;
	list_add_tail(&k->node, list);
	return true;
}

/* @p (alive, under RCU) is in the session's cgroup, and its opener can name it. */
static bool pfprof_in_session_cgroup(struct pfprof_session *s,
				     struct pfprof_member *cg,
				     struct task_struct *p)
{
	return pfprof_in_cgroup(cg->cgrp, p) && pid_nr_ns(task_tgid(p), s->pid_ns);
}

/*
 * The opener and the cgroup's asker could read @p (under RCU): a cgroup's
 * session keeps no other user's process it may not read (the root cgroup
 * holds every user's), which a kin would hold until a look lets it go.  A
 * process hidden by its exec, or below one, is kept (hidden) all the same:
 * what it does must stay out of the count.
 */
static bool pfprof_cgroup_keeps(struct pfprof_session *s,
				struct pfprof_member *cg, struct task_struct *p)
{
	return pfprof_may_keep(s->opener_cred, p) && pfprof_may_keep(cg->asker, p);
}

/*
 * The fork probe's work for one session: @child (a new process, not run
 * yet) is a kin if its forker @parent is an inheriting member or a kin, and
 * for a cgroup, inside.  Under RCU, atomic.
 */
struct pfprof_fork {
	struct task_struct *parent;	/* the forker */
	struct task_struct *child;
};

static void pfprof_lineage_fork(struct pfprof_session *s, void *arg)
{
	const struct pfprof_fork *fork = arg;
	struct task_struct *parent = fork->parent, *child = fork->child;
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_member *cg = READ_ONCE(s->cgroup), *m = NULL;
	struct pfprof_kin *up, *k;
	bool hidden = false;

	if (!READ_ONCE(s->nr_inheriting))
		return;
	/*
	 * A kin's children are its tree's, even if it is a member too (one
	 * about to be absorbed, or whose join is not complete yet).
	 */
	if (!pfprof_kin_of(l, parent->signal)) {
		m = cg ? NULL : pfprof_member_of_rcu(s, parent->signal);
		if (!m || !READ_ONCE(m->inherit))
			return;
	}
	if (cg && !pfprof_in_session_cgroup(s, cg, child))
		return;
	up = pfprof_kin_of(l, parent->signal);
	if (cg && !(up && READ_ONCE(up->hidden)) && !pfprof_cgroup_keeps(s, cg, child))
		return;
	k = pfprof_kin_new(s, child, NULL);
	spin_lock(&l->lock);
	/*
	 * Joined already (an ADD of its pid between its fork and this probe):
	 * a member, not a kin.  Members are published under this lock.
	 */
	if (pfprof_member_of_rcu(s, child->signal))
		goto out;
	/* Again under the lock: a member leaving, a kin dropped, are so under it. */
	up = pfprof_kin_of(l, parent->signal);
	if (up) {
		m = pfprof_kin_owner(up);
		hidden = up->hidden;
	} else if (m && !m->untracked) {
		hidden = READ_ONCE(m->hidden);
	} else {
		goto out;
	}
	if (!m)
		goto out;
	if (!k) {
		l->untracked++;
		goto out;
	}
	k->owner = m;
	/* Below a hidden process nothing counts, as perf's events do not follow it there. */
	k->hidden = hidden;
	k->hidden_seen = hidden;
	if (pfprof_kin_link(l, k, &l->births))
		k = NULL;
out:
	spin_unlock(&l->lock);
	if (k)
		pfprof_kin_discard(k);
}

/*
 * The sched_process_fork probe, in the forker after copy_process() and
 * before the child is woken: atomic context.  A new thread is its
 * process's already.
 */
static void pfprof_fork_probe(void *data, struct task_struct *parent,
			      struct task_struct *child)
{
	struct pfprof_fork fork = { .parent = parent, .child = child };

	if (!thread_group_leader(child))
		return;
	/*
	 * Between the child's linking on the process list and the looks at
	 * the sessions; pairs with pfprof_lineage_adopt()'s: either a walk
	 * finds the child, or this probe finds the member or kin it followed.
	 */
	smp_mb();
	if (atomic_read(&pfprof_lineages))
		pfprof_sessions_each(pfprof_lineage_fork, &fork);
}

/* @s now has a tree or a cgroup: the fork probe looks at it. */
void pfprof_lineage_open(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;

	if (!l->counted_in) {
		l->counted_in = true;
		atomic_inc(&pfprof_lineages);
	}
}

/* From when a walk counts a process it makes a kin. */
enum pfprof_since {
	PFPROF_SINCE_NOW,
	PFPROF_SINCE_BIRTH,		/* its own counts, all of them */
	PFPROF_SINCE_BIRTH_AND_REAPED,	/* and its reaped children's before */
};

/*
 * The process @p (alive when its walk found it, under RCU) is a kin of
 * @owner, counted @since.  Under members_lock.  Returns the kin, or NULL
 * (known already, or not kept).
 */
static struct pfprof_kin *pfprof_lineage_adopt(struct pfprof_session *s,
					       struct task_struct *p,
					       struct pfprof_member *owner,
					       enum pfprof_since since)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_counters own, reaped;
	struct pfprof_kin *k;

	k = pfprof_kin_new(s, p, owner);
	spin_lock(&l->lock);
	if (!k) {
		l->untracked++;
	} else if (!pfprof_kin_link(l, k, &l->kin)) {
		spin_unlock(&l->lock);
		pfprof_kin_discard(k);
		return NULL;
	}
	spin_unlock(&l->lock);
	if (!k)
		return NULL;
	/*
	 * Between the kin's publication and the walk's next reads of the
	 * process list; pairs with the fork probe's: a child it forks from now
	 * is the walk's or the probe's.
	 */
	smp_mb();
	pfprof_read_counters(p, &own, &reaped);
	switch (since) {
	case PFPROF_SINCE_NOW:
		k->last = own;
		break;
	case PFPROF_SINCE_BIRTH:
		break;
	case PFPROF_SINCE_BIRTH_AND_REAPED:
		/* A tree's whole life: its descendants dead before the join. */
		k->base = reaped;
		break;
	}
	return k;
}

/*
 * The member that counts the process with signal struct @sig: the one
 * whose kin it is (an inheriting member, or the session's cgroup), or
 * NULL.  Under RCU.
 */
struct pfprof_member *pfprof_lineage_owner(struct pfprof_session *s,
					   const struct signal_struct *sig)
{
	struct pfprof_kin *k = pfprof_kin_of(&s->lineage, sig);

	return k ? pfprof_kin_owner(k) : NULL;
}

/*
 * The joiner whose tree the child of @parent is in, for the join's walk: a
 * joiner itself, a kin of one, or a kin of a member whose process this
 * walk made a joiner's kin (absorbed, with its tree).  Under RCU.
 */
static struct pfprof_member *pfprof_walk_owner(struct pfprof_session *s,
					       struct task_struct *parent)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_member *m;
	struct pfprof_kin *up;

	up = pfprof_kin_of(l, parent->signal);
	if (!up) {
		m = pfprof_member_of_rcu(s, parent->signal);
		return m && m->joiner ? m : NULL;
	}
	m = pfprof_kin_owner(up);
	if (!m || m->joiner)
		return m;
	if (m->cgrp)
		return NULL;
	up = pfprof_kin_of(l, m->sig);
	m = up ? pfprof_kin_owner(up) : NULL;
	return m && m->joiner ? m : NULL;
}

/*
 * The members marked joiner (inheriting, linked: the fork probe makes
 * their children kin from now) join: their live descendants become their
 * kin, counted from now, or from their start (@whole_life, with what they
 * reaped before).  One walk of the process list for all of them, which
 * holds every parent before its children, deciding each from its real
 * parent: the tree at the join is the real one; from then on, the forks'.
 * A member whose process the walk makes a joiner's kin is absorbed, its
 * kin with it (pfprof_lineage_absorb()).
 */
void pfprof_lineage_join(struct pfprof_session *s, bool whole_life)
{
	struct pfprof_lineage *l = &s->lineage;
	struct task_struct *p, *parent;
	struct pfprof_counters own;
	struct pfprof_member *m;

	lockdep_assert_held(&s->members_lock);
	pfprof_lineage_open(s);
	/*
	 * What their children reaped so far brought them: constant from now
	 * (their children from now are kin, counted by their own counts).  A
	 * child reaped between this read and the walk is in neither: a whole
	 * life counted short of it, never twice.
	 */
	list_for_each_entry(m, &s->members, node) {
		if (m->joiner)
			pfprof_read_counters(m->leader, &own, &m->reaped_at_join);
	}
	/* The joiners linked (and the probe counted in) before the walk: pairs with the probe's. */
	smp_mb();
	rcu_read_lock();
	for_each_process(p) {
		parent = pfprof_real_parent(p);
		if (!parent || READ_ONCE(p->exit_state) == EXIT_DEAD ||
		    pfprof_kin_of(l, p->signal))
			continue;
		m = pfprof_walk_owner(s, parent);
		if (m)
			pfprof_lineage_adopt(s, p, m,
					     whole_life ? PFPROF_SINCE_BIRTH_AND_REAPED :
							  PFPROF_SINCE_NOW);
	}
	rcu_read_unlock();
}

/*
 * Every member whose process the join's walk made a joiner's kin (one
 * joining too, inside another's tree) is absorbed by that joiner: a child its tree forks from now
 * is the joiner's kin (the probe resolves owners through ->absorbed_by),
 * and its kin are moved to the joiner.  Returns whether any was; the
 * caller frees them (members.c).
 */
bool pfprof_lineage_absorb(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_member *m, *by;
	struct pfprof_kin *k;
	unsigned int i = 0;
	bool any = false;

	lockdep_assert_held(&s->members_lock);
	list_for_each_entry(m, &s->members, node) {
		if (m->cgrp)
			continue;
		rcu_read_lock();
		k = pfprof_kin_of(l, m->sig);
		by = k ? pfprof_kin_owner(k) : NULL;
		rcu_read_unlock();
		if (!by || !by->joiner || by == m)
			continue;
		spin_lock(&l->lock);
		WRITE_ONCE(m->absorbed_by, by);
		spin_unlock(&l->lock);
		any = true;
	}
	if (!any)
		return false;
	spin_lock(&l->lock);
	list_splice_tail_init(&l->births, &l->kin);
	spin_unlock(&l->lock);
	list_for_each_entry(k, &l->kin, node) {
		if (READ_ONCE(k->owner)->absorbed_by)
			pfprof_kin_settle_owner(l, k);
		if (!(++i % 64))
			cond_resched();
	}
	return true;
}

/*
 * The exec probe's: @p exec'd what hides it from @s (its own counts then:
 * @at_exec).  A kin is hidden; a process in the session's cgroup that no
 * walk found yet becomes one, hidden, counted up to the exec as the walk
 * would have counted it.  Under RCU, atomic.
 */
void pfprof_lineage_hide(struct pfprof_session *s, struct task_struct *p,
			 const struct pfprof_counters *at_exec)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_member *cg = READ_ONCE(s->cgroup);
	struct pfprof_kin *k, *made = NULL;
	u64 before;

	if (!pfprof_kin_of(l, p->signal)) {
		if (!cg || !pfprof_in_session_cgroup(s, cg, p))
			return;
		made = pfprof_kin_new(s, p, cg);
		if (made) {
			made->hidden = true;
			made->at_exec = *at_exec;
			before = READ_ONCE(l->walked_before);
			if (!READ_ONCE(l->walked_complete) || !before ||
			    p->start_time <= before)
				made->last = *at_exec;
		}
	}
	spin_lock(&l->lock);
	k = pfprof_kin_of(l, p->signal);
	if (k) {
		if (!k->hidden) {
			k->at_exec = *at_exec;
			/* The fork probe reads it without the lock first. */
			WRITE_ONCE(k->hidden, true);
		}
	} else if (made) {
		/* The cgroup's member may have left meanwhile: then nobody counts it. */
		if (!cg->untracked && pfprof_kin_link(l, made, &l->births))
			made = NULL;
	} else if (cg && !cg->untracked) {
		l->untracked++;
	}
	spin_unlock(&l->lock);
	if (made)
		pfprof_kin_discard(made);
}

/*
 * The processes that came into the session's cgroup since the last walk
 * become kin.  Under members_lock.
 */
static void pfprof_lineage_discover(struct pfprof_session *s,
				    struct pfprof_member *cg)
{
	struct pfprof_lineage *l = &s->lineage;
	u64 before = l->walked_at;
	bool complete = l->walked_complete;
	struct task_struct *p;

	l->walked_at = ktime_get_ns();
	WRITE_ONCE(l->walked_complete, true);
	rcu_read_lock();
	for_each_process(p) {
		if (READ_ONCE(p->exit_state) == EXIT_DEAD || !pid_alive(p) ||
		    !pfprof_in_session_cgroup(s, cg, p) ||
		    pfprof_kin_of(l, p->signal) || !pfprof_cgroup_keeps(s, cg, p))
			continue;
		/*
		 * Born since the walk before the last one began (a fork dates its
		 * child before it links it where a walk finds it: a forker
		 * preempted in between has a child the last walk missed): its
		 * parent may have come in after its fork, when the probe did not
		 * know it; all it did is the cgroup's.  A process born outside in
		 * that time and moved in has its life outside counted: the price.
		 */
		if (!pfprof_lineage_adopt(s, p, cg,
					  complete && l->walked_before &&
					  p->start_time > l->walked_before ?
					  PFPROF_SINCE_BIRTH : PFPROF_SINCE_NOW) &&
		    !pfprof_kin_of(l, p->signal))
			WRITE_ONCE(l->walked_complete, false);
	}
	rcu_read_unlock();
	WRITE_ONCE(l->walked_before, before);
}

/*
 * What @k, a kin of @m, did since the last look counts, as far as it may:
 * @cur is its own counts (and base) now, @inside whether it is in the
 * session's cgroup (always, in a tree).
 */
static void pfprof_kin_look(struct pfprof_session *s, struct pfprof_member *m,
			    struct pfprof_kin *k,
			    const struct pfprof_counters *cur, bool inside)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_counters upto = *cur, done;
	struct task_struct *task;
	enum pfprof_access access;
	bool hidden, hidden_seen;

	spin_lock(&l->lock);
	hidden = k->hidden;
	hidden_seen = k->hidden_seen;
	if (hidden && !hidden_seen) {
		upto = k->at_exec;
		pfprof_counters_add(&upto, &k->base);
		k->hidden_seen = true;
	}
	spin_unlock(&l->lock);
	if (hidden) {
		/* What it did before the exec, if it counted then: once. */
		if (!hidden_seen && !k->withdrawn && inside) {
			done = upto;
			pfprof_counters_sub_sat(&done, &k->last);
			pfprof_counters_add(&k->counted, &done);
		}
		if (!hidden_seen && !k->withdrawn)
			s->withdrawn++;
		k->withdrawn = true;
		goto seen;
	}
	/*
	 * Judged by its current leader (a thread that exec'd is it), which it
	 * keeps: once released, by the last one seen, whose credentials stay.
	 */
	task = get_pid_task(k->tgid, PIDTYPE_TGID);
	if (task) {
		swap(k->leader, task);
		put_task_struct(task);
	}
	access = pfprof_recheck(s->file, m->asker, k->leader);
	/* Mid-exec: as the next look judges it. */
	if (access == PFPROF_EXECING)
		return;
	if (access == PFPROF_UNREADABLE) {
		if (!k->withdrawn) {
			k->withdrawn = true;
			s->withdrawn++;
		}
		goto seen;
	}
	k->withdrawn = false;
	if (inside) {
		done = *cur;
		pfprof_counters_sub_sat(&done, &k->last);
		pfprof_counters_add(&k->counted, &done);
	}
seen:
	k->last = *cur;
}

/*
 * Adds each kin's count to its member's ->now, the final count of a kin
 * released to its member's ->kept, the memory of those counted to its
 * member's ->memory.  Under members_lock, after the members' reads.
 */
void pfprof_lineage_collect(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_member *cg = s->cgroup, *m;
	struct pfprof_counters own, cur;
	struct pfprof_kin *k, *tmp;
	unsigned int untracked, i = 0;
	bool alive, inside;

	lockdep_assert_held(&s->members_lock);
	if (cg)
		pfprof_lineage_discover(s, cg);
	spin_lock(&l->lock);
	list_splice_tail_init(&l->births, &l->kin);
	untracked = l->untracked;
	l->untracked = 0;
	spin_unlock(&l->lock);
	s->withdrawn += untracked;
	list_for_each_entry_safe(k, tmp, &l->kin, node) {
		if (!(++i % 64))
			cond_resched();
		/* Its member left: nothing of its tree counts any more. */
		m = pfprof_kin_settle_owner(l, k);
		if (!m) {
			pfprof_kin_drop(l, k);
			continue;
		}
		alive = pfprof_read_counters(k->leader, &own, NULL);
		cur = own;
		pfprof_counters_add(&cur, &k->base);
		/*
		 * Its current leader's cgroup, or once released its last one's,
		 * which a task keeps until it is freed.  Whether its opener can
		 * name it was asked when it became a kin: a process does not
		 * change pid namespaces, and a released one has no pid to ask of.
		 */
		rcu_read_lock();
		inside = !cg || pfprof_in_cgroup(cg->cgrp,
						 pid_task(k->tgid, PIDTYPE_TGID) ?: k->leader);
		rcu_read_unlock();
		pfprof_kin_look(s, m, k, &cur, inside);
		if (!alive) {
			pfprof_counters_add(&m->kept, &k->counted);
			pfprof_kin_drop(l, k);
			continue;
		}
		pfprof_counters_add(&m->now, &k->counted);
		if (inside && !k->withdrawn && !k->hidden)
			pfprof_read_memory(k->leader, &m->memory);
	}
}

/* @m leaves: no kin is made for it any more, and its kin go at the next collection. */
void pfprof_lineage_untrack(struct pfprof_session *s, struct pfprof_member *m)
{
	struct pfprof_lineage *l = &s->lineage;

	spin_lock(&l->lock);
	m->untracked = true;
	spin_unlock(&l->lock);
}

/*
 * The kin of members that left: dropped now, so that those members may be
 * freed.  Under members_lock.
 */
void pfprof_lineage_forget(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_kin *k, *tmp;
	unsigned int i = 0;

	lockdep_assert_held(&s->members_lock);
	spin_lock(&l->lock);
	list_splice_tail_init(&l->births, &l->kin);
	spin_unlock(&l->lock);
	list_for_each_entry_safe(k, tmp, &l->kin, node) {
		if (!pfprof_kin_settle_owner(l, k))
			pfprof_kin_drop(l, k);
		if (!(++i % 64))
			cond_resched();
	}
}

/*
 * The session closes (off the session list): no probe makes or changes a
 * kin once a grace period has passed, and every kin goes.
 */
void pfprof_lineage_close(struct pfprof_session *s)
{
	struct pfprof_lineage *l = &s->lineage;
	struct pfprof_kin *k, *tmp;

	if (!l->ready)
		return;
	spin_lock(&l->lock);
	l->closed = true;
	list_splice_tail_init(&l->births, &l->kin);
	spin_unlock(&l->lock);
	if (l->counted_in)
		atomic_dec(&pfprof_lineages);
	/* A probe that looked the table up before the close is done with it. */
	synchronize_rcu();
	list_for_each_entry_safe(k, tmp, &l->kin, node) {
		list_del(&k->node);
		pfprof_kin_discard(k);
	}
	rhashtable_destroy(&l->table);
	l->ready = false;
}

int pfprof_lineage_probe_init(void)
{
	return pfprof_tracepoint_attach("sched_process_fork", pfprof_fork_probe,
					&pfprof_fork_tp,
					"trees cannot be followed");
}

/* No session is left. */
void pfprof_lineage_probe_exit(void)
{
	pfprof_tracepoint_detach(pfprof_fork_tp, pfprof_fork_probe);
}

/*
 * @p lies deeper than PFPROF_TREE_DEPTH_MAX real parents below the top (init,
 * or kthreadd).  A process that deep is never a member (a join refuses it,
 * -ELOOP: the ABI's bound, which the looks up a registration's ancestry,
 * session.c, rely on).  Under RCU.
 */
bool pfprof_too_deep(struct task_struct *p)
{
	unsigned int depth = 0;

	while ((p = pfprof_real_parent(p)))
		if (++depth > PFPROF_TREE_DEPTH_MAX)
			return true;
	return false;
}

/*
 * @ancestor is a real parent, grandparent... of @p, at most
 * PFPROF_TREE_DEPTH_MAX levels up.
 */
bool pfprof_descends_from(struct task_struct *p,
			  const struct task_struct *ancestor)
{
	unsigned int depth = 0;
	bool found = false;

	rcu_read_lock();
	while (!found && (p = pfprof_real_parent(p)) &&
	       depth++ < PFPROF_TREE_DEPTH_MAX)
		found = p->signal == ancestor->signal;
	rcu_read_unlock();
	return found;
}
