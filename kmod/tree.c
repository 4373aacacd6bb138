// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the processes in inheriting members' trees.
 *
 * Twin: monitor/src/backend/procfs/tree.rs, the same rule in the same
 * words (its Slot is a slot here, its pass a walk, its heir and departed,
 * kept as here); it has no exclusion.
 *
 * A member that inherits counts its descendants too, as perf stat's
 * inherit and wait4()'s RUSAGE_CHILDREN do: live ones as they run, reaped
 * ones through its (and its descendants') reaped-children counts.
 *
 * Descendants are found without the tasklist lock (not exported to
 * modules): the process list is walked under RCU, and a process belongs to
 * the nearest inheriting member among its real parents.  The list holds
 * every parent before its children (a process is added at fork, after its
 * parent, and an orphan is adopted by one of its ancestors), so the walk
 * decides each process from its parent alone (a member, or a process it
 * already put in its map): its cost grows with the number of processes,
 * not with how deeply a user nests them.  For the same reason nothing is
 * counted twice when a child is reaped: the reaper sets the child's
 * exit_state to EXIT_DEAD before it adds the child's totals to its own
 * reaped-children counts, and the walk reads a parent's counts before it
 * looks at a child, so a child whose counts are in them is already seen as
 * dead.
 *
 * Departures.  A descendant's counts reach the tree's total through its
 * parent's reaped counts when the parent waits for it.  One that leaves
 * otherwise (its parent ignores SIGCHLD, or it is orphaned) takes them
 * away, and the total drops.  So each walk keeps what it read of every
 * descendant in its map, and the next one finds who left: their last counts
 * are set against how much the reaped counts of their nearest ancestor
 * still in the tree grew, and what did not arrive there is kept in the
 * member's ->kept.  The total never drops, and later growth counts.
 *
 * Exclusion.  A descendant the session's opener may not read (it exec'd a
 * setuid program: sudo under a profiled shell) is not counted from the walk
 * that finds it so, nor is anything below it (perf stops counting a task at
 * such an exec).  What was counted of it stays counted, in ->kept; the rest
 * reaches its parent's reaped counts when it is waited for, where its last
 * counts seen are withheld (->withheld).  Its changes since the walk before
 * the one that found it are not counted, nor are those between the last
 * walk that saw it alive and its exit: the first may be its own (before
 * the exec), the second not.
 *
 * Past PFPROF_TREE_MAP_MAX slots (or without memory for the map) a walk
 * looks up each process's real parents instead, up to
 * PFPROF_TREE_DEPTH_MAX levels (one deeper is not counted), and neither
 * departures nor exclusions below an excluded process are tracked.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/hash.h>
#include <linux/log2.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/pid.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>

#include "compat.h"
#include "pfprof_internal.h"

/* A walk's map: at most this many slots, half of them used. */
#define PFPROF_TREE_MAP_MAX	(1u << 17)

/* A process a walk found in a tree. */
struct pfprof_tree_slot {
	struct pfprof_tree_key key;	/* .sig NULL: a free slot */
	struct pfprof_tree_key parent;	/* in the tree; .sig NULL: the member */
	struct pfprof_member *owner;
	struct pfprof_counters total;	/* its own and its reaped children's */
	struct pfprof_counters reaped;	/* its reaped children's */
	struct pfprof_counters offset;	/* in total, not ours: before it entered */
	/* Descendants that left since the last walk, this one an ancestor. */
	struct pfprof_counters departed;	/* counted ones */
	struct pfprof_counters departed_excluded;
	bool excluded;
	bool present;			/* last walk's slot: found again */
};

void pfprof_tree_init(struct pfprof_tree *t)
{
	memset(t, 0, sizeof(*t));
}

void pfprof_tree_free(struct pfprof_tree *t)
{
	kvfree(t->map[0]);
	kvfree(t->map[1]);
	pfprof_tree_init(t);
}

static bool pfprof_key_eq(const struct pfprof_tree_key *a,
			  const struct pfprof_tree_key *b)
{
	return a->sig == b->sig && a->start_time == b->start_time;
}

/* Open addressing, linear probing: @key's slot, or the free one it would take. */
static struct pfprof_tree_slot *pfprof_slot(struct pfprof_tree_slot *map,
					    unsigned int cap,
					    const struct pfprof_tree_key *key)
{
	unsigned int i = hash_ptr(key->sig, ilog2(cap));

	while (map[i].key.sig && !pfprof_key_eq(&map[i].key, key))
		i = (i + 1) & (cap - 1);
	return &map[i];
}

/* @key's slot in map @which, or NULL. */
static struct pfprof_tree_slot *pfprof_find(struct pfprof_tree *t,
					    unsigned int which,
					    const struct pfprof_tree_key *key)
{
	struct pfprof_tree_slot *slot;

	if (!t->cap[which] || !key->sig)
		return NULL;
	slot = pfprof_slot(t->map[which], t->cap[which], key);
	return slot->key.sig ? slot : NULL;
}

/*
 * Makes the other map this walk's, empty, with room for the processes the
 * last walk found and then some, and not many times more.  Returns false without one (then the walk
 * looks up real parents instead).
 */
static bool pfprof_tree_turn(struct pfprof_tree *t)
{
	unsigned int next = !t->cur;
	unsigned int want = roundup_pow_of_two(4 * (t->used[t->cur] + 64));

	want = min(want, PFPROF_TREE_MAP_MAX);
	/*
	 * Grown, or shrunk once the processes are gone: a walk's cost (the
	 * map cleared, departures and settling scanned) follows what is used.
	 */
	if (t->cap[next] < want || t->cap[next] > 2 * want) {
		kvfree(t->map[next]);
		t->map[next] = kvmalloc_array(want, sizeof(*t->map[next]),
					      GFP_KERNEL_ACCOUNT);
		t->cap[next] = t->map[next] ? want : 0;
	}
	if (t->map[next])
		memset(t->map[next], 0, t->cap[next] * sizeof(*t->map[next]));
	t->used[next] = 0;
	t->cur = next;
	return t->cap[next];
}

/*
 * @p lies deeper than PFPROF_TREE_DEPTH_MAX real parents below the top (init,
 * or kthreadd).  A process that deep is never a member (a join refuses it,
 * -ELOOP), so every look up from a member or a joiner reaches the top within
 * the bound, and no two looks can disagree on who is above whom.  A process
 * only rises: a reparenting gives it an ancestor (a subreaper), its
 * namespace's init or a thread of its parent.  (One exception, fail-open and
 * the user's own: the children of a process forked into a pid namespace from
 * outside it, through setns(), move under that namespace's init when their
 * parent dies, which may lie deeper; a member so moved is looked up only as
 * far as the bound.)  Under RCU.
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
 * The member of @s nearest among @p's real ancestors that @pick accepts,
 * or NULL; at most PFPROF_TREE_DEPTH_MAX ancestors are looked at, all of
 * them for a process that is not too deep (pfprof_too_deep()), as every
 * member is: a look costs at most the bound, however deep a user nests
 * processes.  Under RCU.
 */
static struct pfprof_member *
pfprof_ancestor_member(struct pfprof_session *s, struct task_struct *p,
		       bool (*pick)(const struct pfprof_member *m))
{
	unsigned int depth = 0;
	struct pfprof_member *m;

	while ((p = pfprof_real_parent(p)) && depth++ < PFPROF_TREE_DEPTH_MAX) {
		m = pfprof_member_of(s, p->signal);
		if (m && pick(m))
			return m;
	}
	return NULL;
}

static bool pfprof_inherits(const struct pfprof_member *m)
{
	return m->inherit;
}

static bool pfprof_joining_inherits(const struct pfprof_member *m)
{
	return m->joining && m->inherit;
}

/*
 * The inheriting member whose tree holds @p (not itself a member): its
 * nearest inheriting real ancestor.  Under RCU.
 */
struct pfprof_member *pfprof_tree_owner(struct pfprof_session *s,
					struct task_struct *p)
{
	return pfprof_ancestor_member(s, p, pfprof_inherits);
}

/* A joining inheriting member among @p's real ancestors, or NULL.  Under RCU. */
struct pfprof_member *pfprof_tree_joiner(struct pfprof_session *s,
					 struct task_struct *p)
{
	return pfprof_ancestor_member(s, p, pfprof_joining_inherits);
}

/*
 * @ancestor is a real parent, grandparent... of @p, at most
 * PFPROF_TREE_DEPTH_MAX levels up (all of them for a member's leader).
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

/*
 * @p is in the session's cgroup (or below it), and its opener can name it
 * in its pid namespace: a cgroup may hold processes of other namespaces.
 * Under RCU.
 */
static bool pfprof_in_session_cgroup(struct pfprof_session *s,
				     struct task_struct *p)
{
	return s->cgroup && pfprof_in_cgroup(s->cgroup->cgrp, p) &&
	       pid_nr_ns(task_tgid(p), s->pid_ns);
}

/*
 * Where @p belongs, from its parent: a member (@parent->sig NULL), or a
 * process already in this walk's map (whose exclusion it shares).  In a
 * session of a cgroup, every process inside belongs to it (its parent too
 * when that one is inside), and one outside below a process of the map is
 * kept track of, excluded: what it brings to its parent's reaped counts
 * when it is waited for is not the cgroup's.  Under RCU.
 */
static struct pfprof_member *pfprof_walk_owner(struct pfprof_session *s,
					       struct task_struct *p,
					       struct pfprof_tree_key *parent,
					       bool *excluded)
{
	struct pfprof_tree *t = &s->tree;
	struct pfprof_tree_slot *slot;
	struct task_struct *real;
	struct pfprof_member *m;

	*parent = (struct pfprof_tree_key){};
	*excluded = false;
	real = pfprof_real_parent(p);
	if (pfprof_in_session_cgroup(s, p)) {
		if (real)
			*parent = pfprof_key_of(real);
		if (!pfprof_find(t, t->cur, parent))
			*parent = (struct pfprof_tree_key){};
		return s->cgroup;
	}
	if (!real)
		return NULL;
	m = pfprof_member_of(s, real->signal);
	if (m)
		return m->inherit ? m : NULL;
	*parent = pfprof_key_of(real);
	slot = pfprof_find(t, t->cur, parent);
	if (!slot)
		return NULL;
	*excluded = slot->excluded || s->cgroup;
	/* Its member is freed: it counts for nobody. */
	return slot->owner && !slot->owner->buried ? slot->owner : NULL;
}

/*
 * Without the map: a cgroup's process, or the nearest inheriting ancestor's
 * within PFPROF_TREE_DEPTH_MAX levels (a walk of every process cannot
 * afford deeper looks under one RCU read section: one deeper is not
 * counted, and it decides nothing about who is a member).
 */
static struct pfprof_member *pfprof_lookup_owner(struct pfprof_session *s,
						 struct task_struct *p)
{
	if (s->cgroup)
		return pfprof_in_session_cgroup(s, p) ? s->cgroup : NULL;
	return pfprof_ancestor_member(s, p, pfprof_inherits);
}

/*
 * What of @p's @total is not ours, when the walk first counts it: nothing
 * when it was born in the tree (or in the cgroup, to a process counted there,
 * since the walk before the last one began), else all it did so far.  Not
 * since the last walk began: a fork dates its child (copy_process() sets
 * start_time) before it links it where a walk finds it, and a forker
 * preempted in between (a loaded machine) has a child the last walk did not
 * find, born before it began; all it did since would be lost.  The price: a
 * process born outside in those two periods and moved in to a counted
 * parent's cgroup has its life outside counted.
 */
static struct pfprof_counters pfprof_entry_offset(struct pfprof_session *s,
						struct task_struct *p,
						const struct pfprof_tree_key *parent,
						const struct pfprof_counters *total)
{
	struct pfprof_tree *t = &s->tree;
	struct pfprof_tree_slot *up;

	if (!s->cgroup)
		return (struct pfprof_counters){};
	up = pfprof_find(t, t->cur, parent);
	if (up && !up->excluded && t->complete[!t->cur] &&
	    p->start_time > (t->walked_before ?: t->walked_at[!t->cur]))
		return (struct pfprof_counters){};
	return *total;
}

static void pfprof_counters_min(struct pfprof_counters *t,
			      const struct pfprof_counters *bound)
{
	t->minor = min(t->minor, bound->minor);
	t->major = min(t->major, bound->major);
	t->cpu_ns = min(t->cpu_ns, bound->cpu_ns);
}

/*
 * The walk proper: puts every live process of a tree in this walk's map
 * and adds the counted ones' totals to their member's ->now.  Returns false
 * when the map ran out (the rest was decided by real-parent lookups).
 */
static bool pfprof_tree_walk(struct pfprof_session *s, bool mapped)
{
	struct pfprof_tree *t = &s->tree;
	unsigned int prev = !t->cur;
	struct pfprof_counters own, reaped, offset, counted;
	struct pfprof_tree_slot *slot, *before;
	struct pfprof_tree_key key, parent;
	bool excluded, unreadable;
	struct pfprof_member *m;
	struct task_struct *p;

	t->walked_before = t->walked_at[t->cur];
	t->walked_at[t->cur] = ktime_get_ns();
	rcu_read_lock();
	for_each_process(p) {
		/* Parents' reaped counts, read before, first. */
		smp_rmb();
		if (READ_ONCE(p->exit_state) == EXIT_DEAD ||
		    pfprof_member_of(s, p->signal))
			continue;
		if (mapped) {
			m = pfprof_walk_owner(s, p, &parent, &excluded);
		} else {
			m = pfprof_lookup_owner(s, p);
			excluded = false;
		}
		if (!m)
			continue;
		key = pfprof_key_of(p);
		before = mapped ? pfprof_find(t, prev, &key) : NULL;
		unreadable = false;
		if (!excluded) {
			switch (pfprof_recheck(s->file, m->asker, p)) {
			case PFPROF_UNREADABLE:
				unreadable = true;
				break;
			case PFPROF_EXECING:
				/* As the last walk judged it: the next one will. */
				unreadable = before && before->excluded;
				break;
			default:
				break;
			}
		}
		excluded = excluded || unreadable;
		pfprof_read_counters(p, &own, &reaped);
		pfprof_counters_add(&own, &reaped);
		if (!excluded)
			pfprof_read_memory(p, &m->memory);
		if (!mapped) {
			if (!excluded)
				pfprof_counters_add(&m->now, &own);
			continue;
		}

		offset = (struct pfprof_counters){};
		if (before)
			before->present = true;
		if (excluded) {
			/* Counted until now: what was counted of it stays. */
			if (before && !before->excluded) {
				counted = before->total;
				pfprof_counters_sub_sat(&counted, &before->offset);
				pfprof_counters_add(&m->kept, &counted);
			}
			if (unreadable && (!before || !before->excluded))
				s->withdrawn++;
		} else {
			if (before && !before->excluded)
				offset = before->offset;
			else if (before)
				offset = own;	/* back in: from now */
			else
				offset = pfprof_entry_offset(s, p, &parent, &own);
			counted = own;
			pfprof_counters_sub_sat(&counted, &offset);
			pfprof_counters_add(&m->now, &counted);
		}
		slot = pfprof_slot(t->map[t->cur], t->cap[t->cur], &key);
		*slot = (struct pfprof_tree_slot){
			.key = key, .parent = parent, .owner = m, .total = own,
			.reaped = reaped, .offset = offset, .excluded = excluded,
		};
		/* Half full: the rest of this walk looks up real parents. */
		if (++t->used[t->cur] >= t->cap[t->cur] / 2)
			mapped = false;
	}
	rcu_read_unlock();
	return mapped;
}

/*
 * The last walk's processes that are gone: each one's last counts go to
 * its nearest ancestor still in the tree (this walk's slot), or else to its
 * member, to be set against how much their reaped counts grew.
 */
/*
 * This walk's slot of the process @key, or else of its nearest ancestor
 * still in the tree, up through the last walk's map; NULL when there is
 * none (a member's key is in neither map).
 */
static struct pfprof_tree_slot *pfprof_heir(struct pfprof_tree *t,
					    struct pfprof_tree_key key)
{
	struct pfprof_tree_slot *heir, *up;
	int depth;

	for (depth = 0; depth < PFPROF_TREE_DEPTH_MAX && key.sig; depth++) {
		heir = pfprof_find(t, t->cur, &key);
		if (heir)
			return heir;
		up = pfprof_find(t, !t->cur, &key);
		if (!up)
			break;
		key = up->parent;
	}
	return NULL;
}

static void pfprof_tree_departures(struct pfprof_session *s)
{
	struct pfprof_tree *t = &s->tree;
	unsigned int prev = !t->cur;
	struct pfprof_tree_slot *gone, *heir;
	struct pfprof_counters *departed, *departed_excluded, counted;
	unsigned int i;

	for (i = 0; i < t->cap[prev]; i++) {
		gone = &t->map[prev][i];
		/* Its member left: nothing of its tree counts any more. */
		if (!gone->key.sig || gone->present || !gone->owner ||
		    gone->owner->buried)
			continue;
		/* Up through the ancestors that left too. */
		heir = pfprof_heir(t, gone->parent);
		if (heir && heir->excluded)
			continue;	/* it reached nobody counted */
		if (heir) {
			departed = &heir->departed;
			departed_excluded = &heir->departed_excluded;
		} else {
			departed = &gone->owner->departed;
			departed_excluded = &gone->owner->departed_excluded;
		}
		if (gone->excluded) {
			pfprof_counters_add(departed_excluded, &gone->total);
		} else {
			/* What it did before it entered is not ours either. */
			counted = gone->total;
			pfprof_counters_sub_sat(&counted, &gone->offset);
			pfprof_counters_add(departed, &counted);
			pfprof_counters_add(departed_excluded, &gone->offset);
		}
	}
}

/*
 * What left below a process whose reaped counts grew from @before to @now:
 * an excluded one's counts that arrived there are withheld; a counted one's
 * that did not arrive are kept.
 */
static void pfprof_settle(struct pfprof_member *m,
			  const struct pfprof_counters *now,
			  const struct pfprof_counters *before,
			  struct pfprof_counters *departed,
			  const struct pfprof_counters *departed_excluded,
			  bool withhold_all)
{
	struct pfprof_counters growth = *now, withhold = *departed_excluded;

	pfprof_counters_sub_sat(&growth, before);
	/* An exec that may have hidden a process was missed: fail closed. */
	if (withhold_all)
		withhold = growth;
	pfprof_counters_min(&withhold, &growth);
	pfprof_counters_add(&m->withheld, &withhold);
	pfprof_counters_sub_sat(&growth, &withhold);
	pfprof_counters_sub_sat(departed, &growth);
	pfprof_counters_add(&m->kept, departed);
}

static void pfprof_tree_settle(struct pfprof_session *s, bool withhold_all)
{
	struct pfprof_tree *t = &s->tree;
	struct pfprof_tree_slot *slot, *before;
	struct pfprof_member *m;
	unsigned int i;

	for (i = 0; i < t->cap[t->cur]; i++) {
		slot = &t->map[t->cur][i];
		if (!slot->key.sig)
			continue;
		before = pfprof_find(t, !t->cur, &slot->key);
		if (before)
			pfprof_settle(slot->owner, &slot->reaped, &before->reaped,
				      &slot->departed, &slot->departed_excluded,
				      withhold_all);
	}
	list_for_each_entry(m, &s->members, node) {
		if (m->inherit)
			pfprof_settle(m, &m->reaped, &m->reaped_before,
				      &m->departed, &m->departed_excluded,
				      withhold_all);
	}
}

/*
 * A record of an exec that hid @e's process from @s (exec.c), at a walk
 * that, as the one before it, mapped every process of the trees.  One
 * released before the walk began (@e->gone) had what it did reach its
 * reaper's reaped counts, which the walk read: what it did after the exec
 * (after the last look, if a walk excluded it) is withheld from the growth
 * of its nearest ancestor still in the tree, or of its member, as the
 * departures' are (pfprof_settle() bounds it by what arrived).  One still
 * there stays recorded until it is gone, unless it is out of the trees.
 * Returns true when done with the record.
 */
static bool pfprof_tree_exec(struct pfprof_session *s,
			     const struct pfprof_exec *e)
{
	struct pfprof_tree *t = &s->tree;
	struct pfprof_counters after, reaped, *into;
	const struct pfprof_counters *from = &e->at_exec;
	struct pfprof_tree_slot *heir = NULL, *before;
	struct pfprof_member *owner;
	unsigned int i;

	if (!e->gone)
		return !pfprof_find(t, t->cur, &e->key) &&
		       pid_alive(e->task) &&
		       READ_ONCE(e->task->exit_state) != EXIT_DEAD;
	if (pfprof_member_of(s, e->key.sig))
		return true;
	owner = e->owner.sig ? pfprof_member_of(s, e->owner.sig) : s->cgroup;
	if (!owner || !owner->inherit ||
	    (!owner->cgrp && owner->start_time != e->owner.start_time))
		return true;
	for (i = 0; i < e->depth && !heir; i++)
		heir = pfprof_find(t, t->cur, &e->up[i]);
	if (heir && heir->excluded)
		return true;	/* it reached nobody counted */
	into = heir ? &heir->departed_excluded : &owner->departed_excluded;
	/* A walk excluded it: its departure withholds what it had then. */
	before = pfprof_find(t, !t->cur, &e->key);
	if (before && before->excluded)
		from = &before->total;
	else
		s->withdrawn++;
	pfprof_read_counters(e->task, &after, &reaped);
	pfprof_counters_add(&after, &reaped);
	pfprof_counters_sub_sat(&after, from);
	pfprof_counters_add(into, &after);
	return true;
}

/* An earlier record of @e's process, which withholds from its first exec on. */
static bool pfprof_exec_repeated(const struct list_head *execs,
				 const struct pfprof_exec *e)
{
	const struct pfprof_exec *earlier;

	list_for_each_entry(earlier, execs, node) {
		if (earlier == e)
			return false;
		if (earlier->gone &&
		    !memcmp(&earlier->key, &e->key, sizeof(e->key)))
			return true;
	}
	return false;
}

/*
 * Goes through the records of @execs after a walk: at one that, as the one
 * before it, mapped everything (@complete), as pfprof_tree_exec() says; at
 * one that did not (no memory for the map, or past its size: neither
 * departures nor exclusions are tracked then), those of processes gone are
 * done with, failing closed.  Returns whether the walk must withhold every
 * reaped count its trees gained.
 */
static bool pfprof_tree_execs(struct pfprof_session *s, struct list_head *execs,
			      bool complete)
{
	struct pfprof_exec *e, *tmp;
	bool withhold_all = false;

	list_for_each_entry_safe(e, tmp, execs, node) {
		if (complete ? pfprof_exec_repeated(execs, e) ||
			       pfprof_tree_exec(s, e) :
			       e->gone) {
			withhold_all |= !complete;
			list_del(&e->node);
			pfprof_exec_free(e);
		}
	}
	return withhold_all;
}

/*
 * Adds every live descendant the opener may read to its inheriting
 * member's ->now (whose own and reaped counts are read already), keeps
 * what departed descendants took away in ->kept and withholds what excluded
 * ones brought in, in ->withheld.
 */
void pfprof_tree_collect(struct pfprof_session *s)
{
	struct pfprof_tree *t = &s->tree;
	struct pfprof_member *m;
	struct pfprof_exec *e;
	LIST_HEAD(execs);
	bool complete;

	lockdep_assert_held(&s->members_lock);
	/* The exec records so far, each told whether its process was gone. */
	if (!pfprof_execs_take(s, &execs))
		s->execs_missed = true;
	list_for_each_entry(e, &execs, node)
		e->gone = !pid_alive(e->task) ||
			  READ_ONCE(e->task->exit_state) == EXIT_DEAD;
	complete = pfprof_tree_turn(t);
	complete = pfprof_tree_walk(s, complete);
	/* Who left is known only between two walks that mapped everything. */
	if (complete && t->complete[!t->cur]) {
		pfprof_tree_departures(s);
		pfprof_tree_execs(s, &execs, true);
		pfprof_tree_settle(s, s->execs_missed);
		s->execs_missed = false;
	} else if (pfprof_tree_execs(s, &execs, false) || s->execs_missed) {
		/* Its members' own reaped counts, at least, are withheld. */
		list_for_each_entry(m, &s->members, node) {
			if (m->inherit)
				pfprof_settle(m, &m->reaped, &m->reaped_before,
					      &m->departed,
					      &m->departed_excluded, true);
		}
		s->execs_missed = false;
	}
	pfprof_execs_keep_back(s, &execs);
	t->complete[t->cur] = complete;
}

/*
 * The buried members (members.c) left: the processes of their trees in both
 * maps belong to nobody, and their departures are nobody's.  One pass for
 * every member freed since the last: freeing thousands of inheriting
 * members at once costs the maps' size, not that times theirs.
 */
void pfprof_tree_forget_buried(struct pfprof_tree *t)
{
	struct pfprof_tree_slot *slot;
	unsigned int which, i;

	for (which = 0; which < 2; which++) {
		for (i = 0; i < t->cap[which]; i++) {
			slot = &t->map[which][i];
			if (slot->owner && slot->owner->buried)
				slot->owner = NULL;
		}
	}
}
