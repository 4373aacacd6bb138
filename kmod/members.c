// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the processes a session counts.
 *
 * Each member is a process (thread group) with what the session last saw
 * of it; at every collection its change since then is added to the
 * session's pending sample.  A member that inherits counts its
 * descendants too.  Members are found by their signal struct: a thread
 * group's leader's task_struct does not identify it, since a thread that
 * execs becomes the new leader.
 *
 * Descendants are found without the tasklist lock (not exported to
 * modules): the process list is walked under RCU, and a process belongs to
 * the nearest inheriting member among its real parents.  The list holds
 * every parent before its children (a process is added at fork, after its
 * parent, and an orphan is adopted by one of its ancestors), so the walk
 * decides each process from its parent alone (a member, or a process it
 * already put in a tree): its cost grows with the number of processes, not
 * with how deeply a user nests them.  For the same reason nothing is
 * counted twice when a child is reaped: the reaper sets the child's
 * exit_state to EXIT_DEAD before it adds the child's totals to its own
 * cumulative children's counts, and the walk reads a parent's cumulative
 * counts before it looks at a child, so a child whose counts are in them
 * is already seen as dead.  A race can only leave a
 * child out of one collection; totals only grow, so the next one makes up
 * for it.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/hash.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/seqlock.h>
#include <linux/slab.h>

#include "pfprof_internal.h"

/* How far up the real parents a lookup looks for a member. */
#define PFPROF_TREE_DEPTH_MAX	256
/* The walk's map: at most this many slots (16 bytes each), half of them used. */
#define PFPROF_TREE_MAP_MAX	(1u << 17)

/* A process the walk found in a tree, keyed by its signal struct. */
struct pfprof_tree_slot {
	const struct signal_struct *sig;
	struct pfprof_member *owner;
};

struct pfprof_member {
	struct list_head node;
	struct hlist_node hash;		/* by_signal, keyed by leader->signal */
	struct task_struct *leader;	/* referenced: keeps ->signal alive */
	bool inherit;
	bool from_registry;		/* joined through /proc: leaves by "U" */
	bool alive;			/* collection scratch */
	struct pfprof_totals now;	/* collection scratch */
	struct pfprof_totals seen;	/* what the session last accounted */
};

/*
 * Totals of the process whose group leader is @leader, read the way
 * do_task_stat() and thread_group_cputime() read them and without writing
 * anything: the signal struct holds what exited threads took (added by
 * __exit_signal() under stats_lock, in the same section that unlinks the
 * thread), each live thread holds its own.  CPU time is sum_exec_runtime in
 * nanoseconds: what utime + stime of wait4() add up to.  @with_children adds
 * the reaped children's counts (wait4()'s RUSAGE_CHILDREN).  Returns false
 * once every thread has been released: the totals are then final.
 *
 * The caller's reference on @leader, or RCU, keeps ->signal alive.
 */
bool pfprof_read_totals(struct task_struct *leader, struct pfprof_totals *t,
			bool with_children)
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
		t->minor = sig->min_flt;
		t->major = sig->maj_flt;
		t->cpu_ns = sig->sum_sched_runtime;
		if (with_children) {
			t->minor += sig->cmin_flt;
			t->major += sig->cmaj_flt;
			t->cpu_ns += sig->cutime + sig->cstime;
		}
		__for_each_thread(sig, th) {
			t->minor += READ_ONCE(th->min_flt);
			t->major += READ_ONCE(th->maj_flt);
			t->cpu_ns += READ_ONCE(th->se.sum_exec_runtime);
		}
		alive = !list_empty(&sig->thread_head);
		/* If the lockless pass raced a writer, retry holding the lock. */
		nextseq = 1;
	} while (need_seqretry(&sig->stats_lock, seq));
	done_seqretry_irqrestore(&sig->stats_lock, seq, flags);
	rcu_read_unlock();
	return alive;
}

void pfprof_members_init(struct pfprof_session *s)
{
	mutex_init(&s->members_lock);
	INIT_LIST_HEAD(&s->members);
	hash_init(s->by_signal);
}

static struct pfprof_member *pfprof_member_of(struct pfprof_session *s,
					      const struct signal_struct *sig)
{
	struct pfprof_member *m;

	hash_for_each_possible(s->by_signal, m, hash, (unsigned long)sig) {
		if (m->leader->signal == sig)
			return m;
	}
	return NULL;
}

/*
 * @p's real parent, or NULL at the top (init) or once @p is released: a
 * released task's parent pointer may be stale.  Under RCU, which keeps
 * every task not yet released when it began (a live task's parent is one)
 * from being freed.
 */
static struct task_struct *pfprof_real_parent(struct task_struct *p)
{
	struct task_struct *parent;

	if (!pid_alive(p))
		return NULL;
	parent = rcu_dereference(p->real_parent);
	return parent == p || parent == &init_task ? NULL : parent;
}

/*
 * The inheriting member whose tree holds @p (not itself a member): its
 * nearest inheriting real ancestor.  Under RCU.
 */
static struct pfprof_member *pfprof_tree_owner(struct pfprof_session *s,
					       struct task_struct *p)
{
	struct pfprof_member *m;
	int depth;

	for (depth = 0; depth < PFPROF_TREE_DEPTH_MAX; depth++) {
		p = pfprof_real_parent(p);
		if (!p)
			return NULL;
		m = pfprof_member_of(s, p->signal);
		if (m && m->inherit)
			return m;
	}
	return NULL;
}

/* Open addressing, linear probing: the slot of @sig, or the free one it would take. */
static struct pfprof_tree_slot *pfprof_tree_slot(struct pfprof_session *s,
						 const struct signal_struct *sig)
{
	unsigned int i = hash_ptr(sig, ilog2(s->tree_cap));

	while (s->tree_map[i].sig && s->tree_map[i].sig != sig)
		i = (i + 1) & (s->tree_cap - 1);
	return &s->tree_map[i];
}

/*
 * An empty map with room for the processes the last walk found, and then
 * some; without it (or once it is half full) the walk falls back to
 * looking up each process's real parents.
 */
static void pfprof_tree_map_reset(struct pfprof_session *s)
{
	unsigned int want = roundup_pow_of_two(4 * (s->tree_used + 64));

	want = min(want, PFPROF_TREE_MAP_MAX);
	if (s->tree_cap < want) {
		kvfree(s->tree_map);
		s->tree_map = kvmalloc_array(want, sizeof(*s->tree_map),
					     GFP_KERNEL);
		s->tree_cap = s->tree_map ? want : 0;
	}
	if (s->tree_map)
		memset(s->tree_map, 0, s->tree_cap * sizeof(*s->tree_map));
	s->tree_used = 0;
}

/*
 * The inheriting member whose tree holds @p, in a walk of the process list:
 * @p's parent was visited before it, so the parent is a member, or in the
 * map if it is in a tree at all.  Under RCU.
 */
static struct pfprof_member *pfprof_walk_owner(struct pfprof_session *s,
					       struct task_struct *p, bool full)
{
	struct task_struct *parent;
	struct pfprof_member *m;

	if (!s->tree_cap || full)
		return pfprof_tree_owner(s, p);
	parent = pfprof_real_parent(p);
	if (!parent)
		return NULL;
	m = pfprof_member_of(s, parent->signal);
	if (m)
		return m->inherit ? m : NULL;
	return pfprof_tree_slot(s, parent->signal)->owner;
}

/*
 * Adds every live descendant's totals to its inheriting member's ->now,
 * or only @only's when it is given.  The members' own totals are read
 * already: before any of their children is looked at.
 */
static void pfprof_add_descendants(struct pfprof_session *s,
				   struct pfprof_member *only)
{
	struct pfprof_tree_slot *slot;
	struct pfprof_totals t;
	struct pfprof_member *m;
	struct task_struct *p;
	bool full = false;

	pfprof_tree_map_reset(s);
	rcu_read_lock();
	for_each_process(p) {
		/* Parents' cumulative counts, read before, first. */
		smp_rmb();
		if (READ_ONCE(p->exit_state) == EXIT_DEAD ||
		    pfprof_member_of(s, p->signal))
			continue;
		m = pfprof_walk_owner(s, p, full);
		if (!m)
			continue;
		if (!full) {
			slot = pfprof_tree_slot(s, p->signal);
			slot->sig = p->signal;
			slot->owner = m;
			full = ++s->tree_used >= s->tree_cap / 2;
		}
		if (only && m != only)
			continue;
		pfprof_read_totals(p, &t, true);
		m->now.minor += t.minor;
		m->now.major += t.major;
		m->now.cpu_ns += t.cpu_ns;
	}
	rcu_read_unlock();
}

/* Reads @m's totals, its tree's if it inherits, into ->now and ->alive. */
static void pfprof_member_read(struct pfprof_member *m)
{
	m->alive = pfprof_read_totals(m->leader, &m->now, m->inherit);
}

/* Totals only grow; a smaller reading (a child left out once) adds nothing. */
static u64 pfprof_advance(u64 *seen, u64 now)
{
	u64 old = *seen;

	if (now <= old)
		return 0;
	*seen = now;
	return now - old;
}

/* Reads every member and adds its change since last time to pending. */
static void pfprof_account_all(struct pfprof_session *s)
{
	struct pfprof_member *m;

	lockdep_assert_held(&s->members_lock);
	list_for_each_entry(m, &s->members, node)
		pfprof_member_read(m);
	if (s->nr_inheriting)
		pfprof_add_descendants(s, NULL);
	list_for_each_entry(m, &s->members, node) {
		s->pending.minor += pfprof_advance(&m->seen.minor, m->now.minor);
		s->pending.major += pfprof_advance(&m->seen.major, m->now.major);
		s->pending.cpu_ns += pfprof_advance(&m->seen.cpu_ns, m->now.cpu_ns);
	}
}

static void pfprof_member_free(struct pfprof_session *s, struct pfprof_member *m)
{
	lockdep_assert_held(&s->members_lock);
	list_del(&m->node);
	hash_del(&m->hash);
	if (m->inherit)
		s->nr_inheriting--;
	WRITE_ONCE(s->nr_members, s->nr_members - 1);
	put_task_struct(m->leader);
	kfree(m);
}

/* @ancestor is a real parent, grandparent... of @p. */
bool pfprof_descends_from(struct task_struct *p,
			  const struct task_struct *ancestor)
{
	bool found = false;
	int depth;

	rcu_read_lock();
	for (depth = 0; depth < PFPROF_TREE_DEPTH_MAX && !found; depth++) {
		p = pfprof_real_parent(p);
		if (!p)
			break;
		found = p->signal == ancestor->signal;
	}
	rcu_read_unlock();
	return found;
}

/*
 * Joined through /proc: its own counts run from its registration (what the
 * listing shows, and what a session started since still gets in its first
 * sample), its descendants' from now.
 */
static void pfprof_since_registration(struct pfprof_member *m,
				      const struct pfprof_totals *registered)
{
	struct pfprof_totals own;

	pfprof_read_totals(m->leader, &own, false);
	m->seen.minor = m->now.minor - (own.minor - registered->minor);
	m->seen.major = m->now.major - (own.major - registered->major);
	m->seen.cpu_ns = m->now.cpu_ns - (own.cpu_ns - registered->cpu_ns);
}

/*
 * @leader joins @s, through /proc when @registered (its own totals at
 * registration) is given.  A process the session counts already (a
 * member, or in an inheriting member's tree) is refused; an inheriting one
 * takes the members in its tree into its own count, after their last
 * change.
 */
int pfprof_members_join(struct pfprof_session *s, struct task_struct *leader,
			u32 flags, const struct pfprof_totals *registered)
{
	struct pfprof_member *m, *other, *tmp;
	bool counted, first;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	get_task_struct(leader);
	m->leader = leader;
	m->inherit = flags & PFPROF_TARGET_INHERIT;
	m->from_registry = registered;

	mutex_lock(&s->members_lock);
	if (s->ended || READ_ONCE(s->ring.canceled)) {
		ret = -ESHUTDOWN;
		goto err_unlock;
	}
	rcu_read_lock();
	counted = pfprof_member_of(s, leader->signal) ||
		  pfprof_tree_owner(s, leader);
	rcu_read_unlock();
	if (counted) {
		ret = -EEXIST;
		goto err_unlock;
	}
	if (s->nr_members >= PFPROF_MEMBERS_MAX) {
		ret = -ENOSPC;
		goto err_unlock;
	}

	if (m->inherit) {
		/* Their last changes first: from now on they are in ours. */
		pfprof_account_all(s);
		list_for_each_entry_safe(other, tmp, &s->members, node) {
			if (pfprof_descends_from(other->leader, leader))
				pfprof_member_free(s, other);
		}
	}
	hash_add(s->by_signal, &m->hash, (unsigned long)leader->signal);
	pfprof_member_read(m);
	if (!m->alive) {
		/* Exited and reaped since the caller found it. */
		hash_del(&m->hash);
		ret = -ESRCH;
		goto err_unlock;
	}
	if (m->inherit)
		pfprof_add_descendants(s, m);
	/* Whole life: everything so far goes into the next sample. */
	if (registered)
		pfprof_since_registration(m, registered);
	else if (!(flags & PFPROF_TARGET_WHOLE_LIFE))
		m->seen = m->now;
	list_add_tail(&m->node, &s->members);
	if (m->inherit)
		s->nr_inheriting++;
	WRITE_ONCE(s->nr_members, s->nr_members + 1);
	WRITE_ONCE(s->changes, s->changes + 1);
	WRITE_ONCE(s->counted_any, true);
	first = s->nr_members == 1;
	mutex_unlock(&s->members_lock);

	/* Only an idle sampler needs telling: a busy one keeps its deadlines. */
	if (first)
		pfprof_sampler_kick(s);
	return 0;

err_unlock:
	mutex_unlock(&s->members_lock);
	put_task_struct(leader);
	kfree(m);
	return ret;
}

/* "U <pid>": @leader leaves @s if it joined through /proc. */
void pfprof_members_leave(struct pfprof_session *s, struct task_struct *leader)
{
	struct pfprof_member *m;
	bool last = false;

	mutex_lock(&s->members_lock);
	m = pfprof_member_of(s, leader->signal);
	if (m && m->from_registry) {
		/* Its last changes still belong to the pending sample. */
		pfprof_account_all(s);
		pfprof_member_free(s, m);
		WRITE_ONCE(s->changes, s->changes + 1);
		last = !s->nr_members;
	}
	mutex_unlock(&s->members_lock);
	/* The last one gone: let the sampler deliver and end now. */
	if (last)
		pfprof_sampler_kick(s);
}

/* PFPROF_IOC_END: every member leaves after its last change. */
void pfprof_members_end(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;
	bool counted_any;

	mutex_lock(&s->members_lock);
	WRITE_ONCE(s->ended, true);
	if (s->nr_members)
		pfprof_account_all(s);
	list_for_each_entry_safe(m, tmp, &s->members, node)
		pfprof_member_free(s, m);
	WRITE_ONCE(s->changes, s->changes + 1);
	counted_any = s->counted_any;
	mutex_unlock(&s->members_lock);
	/* With a process ever counted the last sample ends it, else nothing. */
	if (counted_any)
		pfprof_sampler_kick(s);
	else
		pfprof_ring_cancel(s);
}

/* The session is closing: its sampler is stopped. */
void pfprof_members_free(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;

	mutex_lock(&s->members_lock);
	list_for_each_entry_safe(m, tmp, &s->members, node)
		pfprof_member_free(s, m);
	kvfree(s->tree_map);
	s->tree_map = NULL;
	s->tree_cap = 0;
	mutex_unlock(&s->members_lock);
}

/*
 * Accounts every member, drops those that are gone, and copies the pending
 * sample to @pending.  Returns how many members remain.
 */
unsigned int pfprof_members_collect(struct pfprof_session *s,
				    struct pfprof_totals *pending)
{
	struct pfprof_member *m, *tmp;
	unsigned int nr;

	mutex_lock(&s->members_lock);
	pfprof_account_all(s);
	list_for_each_entry_safe(m, tmp, &s->members, node) {
		if (!m->alive)
			pfprof_member_free(s, m);
	}
	*pending = s->pending;
	nr = s->nr_members;
	mutex_unlock(&s->members_lock);
	return nr;
}

/* Removes what the sampler delivered (or discarded) from pending. */
void pfprof_members_settle(struct pfprof_session *s,
			   const struct pfprof_totals *delivered)
{
	mutex_lock(&s->members_lock);
	s->pending.minor -= delivered->minor;
	s->pending.major -= delivered->major;
	s->pending.cpu_ns -= delivered->cpu_ns;
	mutex_unlock(&s->members_lock);
}
