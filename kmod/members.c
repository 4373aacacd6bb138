// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the processes a session counts.
 *
 * Twins: monitor/src/backend/procfs/members.rs (a cgroup's processes, each
 * a member there) and the collection in procfs/sampler.rs (a pass there;
 * its advance() is pfprof_advance()).
 *
 * Each member is a process (thread group) with what the session last saw
 * of it; at every collection its change since then is added to the
 * session's pending sample.  A member that inherits counts its tree too
 * (lineage.c).  A member is counted while the session's opener may read it:
 * one that exec'd a program the opener may not read (a setuid one) is
 * withdrawn at the collection that finds it so, without its change since
 * the last one, as perf stops counting a task at such an exec.
 *
 * A member that is gone is freed at the next collection, its final counts
 * in the pending sample; before the ring starts (no collections yet) at
 * every join and once a second (sampler.c), so that no session pins dead
 * processes.
 *
 * A process ADDed joins at once (the opener's own request, and its own
 * cost).  One offered by a /proc registration, or recalled by "U", is only
 * marked (joining, leaving), at the cost of a hash lookup: the session's
 * sampler completes the change at its next collection (an inheriting one's
 * join walks the process list once, there), so that no user's
 * registrations make another user's ioctls or writes wait.  A
 * registration's counts run from the registration whenever its join
 * completes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cred.h>
#include <linux/err.h>
#include <linux/mm.h>
#include <linux/pid.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/seqlock.h>
#include <linux/slab.h>

#include "compat.h"
#include "pfprof_internal.h"

int pfprof_members_init(struct pfprof_session *s)
{
	mutex_init(&s->members_lock);
	INIT_LIST_HEAD(&s->members);
	INIT_LIST_HEAD(&s->buried);
	hash_init(s->by_signal);
	return pfprof_lineage_init(s);
}

/*
 * Reads @m's own totals into ->own, ->now (with what its children reaped
 * before its join, if it inherits) and ->alive; lineage.c adds its kin's.
 */
static void pfprof_member_read(struct pfprof_member *m)
{
	memset(&m->memory, 0, sizeof(m->memory));
	if (m->cgrp) {
		/* No process of its own: its tree is every process inside. */
		memset(&m->own, 0, sizeof(m->own));
		m->alive = pfprof_cgroup_alive(m->cgrp);
	} else {
		m->alive = pfprof_read_counters(m->leader, &m->own, NULL);
		pfprof_read_memory(m->leader, &m->memory);
	}
	m->now = m->own;
	if (m->inherit)
		pfprof_counters_add(&m->now, &m->reaped_at_join);
}

/*
 * The opener and @m's asker may still read @m: asked of its current leader
 * (a thread that execs becomes the leader, with the credentials of the
 * exec), which @m keeps from now on; of a process that is gone, of the
 * last leader seen, whose credentials stay with it, so that a program
 * that exec'd setuid and exited since is withdrawn all the same.  One that
 * exec'd what the session may not read since the last look, as exec.c
 * saw at the exec, is not read any more even if it is gone, or dropped
 * its privileges since.
 */
static enum pfprof_access pfprof_member_access(struct pfprof_session *s,
					       struct pfprof_member *m)
{
	struct task_struct *leader;

	/* A cgroup's processes are asked one by one, by the walk. */
	if (m->cgrp)
		return PFPROF_READABLE;
	leader = get_pid_task(m->tgid, PIDTYPE_TGID);
	if (leader) {
		/* The same signal struct: the hash keeps finding it. */
		swap(m->leader, leader);
		put_task_struct(leader);
	}
	/* It exec'd what its session may not read (exec.c), whatever it runs now. */
	if (READ_ONCE(m->hidden))
		return PFPROF_UNREADABLE;
	return pfprof_recheck(s->file, m->asker, m->leader);
}

/* Whether @m may be counted; one mid-exec is, and is accounted at the next look. */
static void pfprof_member_judge(struct pfprof_session *s, struct pfprof_member *m)
{
	enum pfprof_access access = pfprof_member_access(s, m);

	m->readable = access != PFPROF_UNREADABLE;
	m->execing = access == PFPROF_EXECING;
}

/* What its kin that left counted is kept. */
static void pfprof_member_settle(struct pfprof_member *m)
{
	struct pfprof_counters after = m->own;

	/* Recalled: its own counts run until its unregistration. */
	if (m->leaving) {
		pfprof_counters_sub_sat(&after, &m->until);
		pfprof_counters_sub_sat(&m->now, &after);
	}
	pfprof_counters_add(&m->now, &m->kept);
}

/*
 * Reads every member, and its kin: the CPU is offered between two (4,096
 * members, or a tree of thousands, are milliseconds of reads).
 */
static void pfprof_read_all(struct pfprof_session *s)
{
	struct pfprof_member *m;

	lockdep_assert_held(&s->members_lock);
	list_for_each_entry(m, &s->members, node) {
		pfprof_member_read(m);
		pfprof_member_judge(s, m);
		cond_resched();
	}
	if (s->nr_inheriting)
		pfprof_lineage_collect(s);
	list_for_each_entry(m, &s->members, node)
		pfprof_member_settle(m);
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

/* @m's change since the session last accounted it goes to pending. */
static void pfprof_member_account(struct pfprof_session *s,
				  struct pfprof_member *m)
{
	s->pending.minor += pfprof_advance(&m->seen.minor, m->now.minor);
	s->pending.major += pfprof_advance(&m->seen.major, m->now.major);
	s->pending.cpu_ns += pfprof_advance(&m->seen.cpu_ns, m->now.cpu_ns);
}

/* Reads every member and adds the changes of those counted to pending. */
static void pfprof_account_all(struct pfprof_session *s)
{
	struct pfprof_member *m;

	pfprof_read_all(s);
	list_for_each_entry(m, &s->members, node) {
		if (m->readable && !m->execing && !m->joining)
			pfprof_member_account(s, m);
	}
}

static void pfprof_member_kfree(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct pfprof_member, rcu));
}

/* @m is freed once no RCU reader (exec.c) may see it any more. */
static void pfprof_member_free_rcu(struct pfprof_member *m)
{
	call_rcu_hurry(&m->rcu, pfprof_member_kfree);
}

/*
 * @m goes, with what it holds, once no RCU reader (exec.c) may see it any
 * more: one never counted, one freed, or one buried whose kin are dropped.
 */
static void pfprof_member_drop(struct pfprof_member *m)
{
	if (m->cgrp) {
		pfprof_cgroup_put(m->cgrp);
	} else {
		put_pid(m->tgid);
		put_task_struct(m->leader);
	}
	put_cred(m->asker);
	pfprof_member_free_rcu(m);
}

/*
 * @m is no member any more.  One that inherits may still own kin: it is
 * buried, its memory kept until pfprof_members_bury() drops them, once for
 * all those freed by the same operation.
 */
static void pfprof_member_free(struct pfprof_session *s, struct pfprof_member *m)
{
	lockdep_assert_held(&s->members_lock);
	list_del(&m->node);
	hash_del_rcu(&m->hash);
	if (m->inherit)
		WRITE_ONCE(s->nr_inheriting, s->nr_inheriting - 1);
	if (m->leaving)
		WRITE_ONCE(s->nr_leaving, s->nr_leaving - 1);
	if (m->from_registry)
		WRITE_ONCE(s->nr_registered, s->nr_registered - 1);
	pfprof_ring_depart(&s->ring);
	if (m->cgrp)
		WRITE_ONCE(s->cgroup, NULL);
	if (m->inherit) {
		/*
		 * Its kin name it, and the probes read its asker and cgroup
		 * through them: it and what it holds go once they are dropped.
		 */
		pfprof_lineage_untrack(s, m);
		list_add(&m->node, &s->buried);
	} else {
		/* exec.c may be looking at it. */
		pfprof_member_drop(m);
	}
}

/* Frees the buried members: no kin names them then. */
static void pfprof_members_bury(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;

	lockdep_assert_held(&s->members_lock);
	if (list_empty(&s->buried))
		return;
	pfprof_lineage_forget(s);
	list_for_each_entry_safe(m, tmp, &s->buried, node) {
		list_del(&m->node);
		pfprof_member_drop(m);
	}
}

/*
 * Joined through /proc: its own counts run from its registration (what the
 * listing shows, and what a session started since still gets in its first
 * sample), its descendants' from now.  After a read.
 */
static void pfprof_since_registration(struct pfprof_member *m)
{
	/* Recalled already: its own counts end at its unregistration. */
	const struct pfprof_counters *own = m->leaving ? &m->until : &m->own;

	m->seen.minor = m->now.minor - (own->minor - m->base.minor);
	m->seen.major = m->now.major - (own->major - m->base.major);
	m->seen.cpu_ns = m->now.cpu_ns - (own->cpu_ns - m->base.cpu_ns);
}

/*
 * The inheriting member whose tree holds @m's process (a kin of it), or
 * NULL.  A cgroup's kin are no tree: its session has no other member.
 */
static struct pfprof_member *pfprof_tree_of(struct pfprof_session *s,
					    struct pfprof_member *m)
{
	struct pfprof_member *owner;

	rcu_read_lock();
	owner = pfprof_lineage_owner(s, m->sig);
	rcu_read_unlock();
	return owner && !owner->cgrp ? owner : NULL;
}

/*
 * May @m's process join @s: 0, or -ESRCH when it is gone, -ELOOP when it
 * lies deeper than the ABI's bound of real parents, -EEXIST when @s counts
 * it already (a member, or a kin of an inheriting one).  Asked of its
 * leader now: one released since the member was made (a thread exec'd) has
 * no parent to look up.
 */
static int pfprof_may_join(struct pfprof_session *s, struct pfprof_member *m)
{
	struct task_struct *leader;
	int ret = 0;

	rcu_read_lock();
	leader = pid_task(m->tgid, PIDTYPE_TGID);
	if (!leader)
		ret = -ESRCH;
	else if (pfprof_too_deep(leader))
		ret = -ELOOP;
	else if (pfprof_member_of(s, leader->signal) ||
		 pfprof_lineage_owner(s, leader->signal))
		ret = -EEXIST;
	rcu_read_unlock();
	return ret;
}

/*
 * Frees the members that the join's walk put in a joiner's tree (lineage.c
 * absorbed them: the joiner counts them, and their kin, from now), after
 * their last change if @account (else accounted already).  Returns what
 * the session had accounted of them: a join of a whole life must not
 * count it again.
 */
static struct pfprof_counters pfprof_absorb(struct pfprof_session *s, bool account)
{
	struct pfprof_counters delivered = {}, gave;
	struct pfprof_member *m, *tmp;

	if (!pfprof_lineage_absorb(s))
		return delivered;
	list_for_each_entry_safe(m, tmp, &s->members, node) {
		if (!m->absorbed_by)
			continue;
		/* One joining (offered, not joined yet) delivered nothing. */
		if (!m->joining) {
			if (account && m->readable && !m->execing)
				pfprof_member_account(s, m);
			gave = m->seen;
			pfprof_counters_sub_sat(&gave, &m->started);
			pfprof_counters_add(&delivered, &gave);
		}
		pfprof_member_free(s, m);
	}
	return delivered;
}

/*
 * A member for the process @tgid (its current leader), asked for by
 * @asker, or an ERR_PTR.
 */
static struct pfprof_member *pfprof_member_new(struct pid *tgid, u32 flags,
					       const struct cred *asker)
{
	struct pfprof_member *m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);

	if (!m)
		return ERR_PTR(-ENOMEM);
	/* The current leader: a thread that exec'd since the lookup is it now. */
	m->leader = get_pid_task(tgid, PIDTYPE_TGID);
	if (!m->leader) {
		kfree(m);
		return ERR_PTR(-ESRCH);
	}
	m->sig = m->leader->signal;
	m->tgid = get_pid(tgid);
	m->asker = get_cred(asker);
	m->inherit = flags & PFPROF_TARGET_INHERIT;
	return m;
}

/* @m goes on @s's lists, counted by the ring if it has not ended. */
static int pfprof_member_link(struct pfprof_session *s, struct pfprof_member *m)
{
	struct pfprof_member *kin;

	lockdep_assert_held(&s->members_lock);
	if (pfprof_nr_members(s) >= PFPROF_MEMBERS_MAX)
		return -ENOSPC;
	/*
	 * Counted by a ring that has not ended, or not at all: asked before
	 * it is published, so that no probe makes kin of a member that is not.
	 */
	if (!pfprof_ring_admit(&s->ring))
		return -ESHUTDOWN;
	/*
	 * Published under the lineage's lock, as the fork probe makes kin: a
	 * process forked in a tree while it was asked for is either a kin
	 * already (counted: refused) or, from now, a member the probe leaves
	 * alone.  A cgroup's member is no process: nobody looks it up by one.
	 */
	if (!m->cgrp) {
		rcu_read_lock();
		spin_lock(&s->lineage.lock);
		kin = pfprof_lineage_owner(s, m->sig);
		if (!kin)
			hash_add_rcu(s->by_signal, &m->hash, (unsigned long)m->sig);
		spin_unlock(&s->lineage.lock);
		rcu_read_unlock();
		if (kin) {
			pfprof_ring_depart(&s->ring);
			return -EEXIST;
		}
	}
	/* exec.c then asks about every user's processes, not just the opener's. */
	if (!uid_eq(m->asker->fsuid, s->opener_cred->fsuid))
		WRITE_ONCE(s->foreign_asker, true);
	list_add_tail(&m->node, &s->members);
	if (m->inherit)
		WRITE_ONCE(s->nr_inheriting, s->nr_inheriting + 1);
	WRITE_ONCE(s->changes, s->changes + 1);
	return 0;
}

/*
 * Another user's inheriting registration stays out if a member is in its
 * tree: taking in the session's own targets, it could end the session by
 * leaving.  Decided before the join's walk, so that a refused joiner makes
 * no kin: one look up each member's real parents, at most
 * PFPROF_TREE_DEPTH_MAX (no member lies deeper), the CPU offered between
 * two.
 */
static void pfprof_refuse_joiners(struct pfprof_session *s)
{
	struct pfprof_member *m, *joiner;
	struct task_struct *p;
	unsigned int depth;
	bool any = false;

	list_for_each_entry(m, &s->members, node)
		any |= m->joining && m->inherit && !m->own_target;
	if (!any)
		return;
	list_for_each_entry(m, &s->members, node) {
		depth = 0;
		rcu_read_lock();
		p = pid_task(m->tgid, PIDTYPE_TGID);
		while (p && (p = pfprof_real_parent(p)) &&
		       depth++ < PFPROF_TREE_DEPTH_MAX) {
			joiner = pfprof_member_of(s, p->signal);
			if (joiner && joiner->joining && joiner->inherit &&
			    !joiner->own_target)
				joiner->refused = true;
		}
		rcu_read_unlock();
		cond_resched();
	}
}

/*
 * Completes the joins the registry offered, after a read of every member:
 * a process in an inheriting member's tree (it may have joined since the
 * offer, or join now) stays out; so does another user's inheriting
 * registration with a member in its tree (pfprof_refuse_joiners()).  The
 * inheriting joiners find their trees in one walk (lineage.c) and take in
 * the members in them, after their last change; then every member is read
 * again, so that their counts start with them in.  Each counts from its
 * registration.  Each pass frees only the member it is at: what it visits
 * next is never freed under it.
 */
static void pfprof_complete_joins(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;
	bool walked = false;

	list_for_each_entry_safe(m, tmp, &s->members, node) {
		if (m->joining && pfprof_tree_of(s, m))
			pfprof_member_free(s, m);
	}
	pfprof_refuse_joiners(s);
	list_for_each_entry_safe(m, tmp, &s->members, node) {
		if (m->refused)
			pfprof_member_free(s, m);
	}
	list_for_each_entry(m, &s->members, node) {
		m->joiner = m->joining && m->inherit;
		walked |= m->joiner;
	}
	if (walked) {
		pfprof_lineage_join(s, false);
		pfprof_absorb(s, true);
		list_for_each_entry(m, &s->members, node)
			m->joiner = false;
		pfprof_read_all(s);
	}
	list_for_each_entry(m, &s->members, node) {
		if (!m->joining)
			continue;
		pfprof_since_registration(m);
		m->started = m->seen;
		m->joining = false;
		WRITE_ONCE(s->counted_any, true);
	}
}

/*
 * Frees the members that are gone (their final changes in pending), the
 * ones withdrawn and the ones recalled; after pfprof_account_all().
 */
static void pfprof_free_departed(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;

	list_for_each_entry_safe(m, tmp, &s->members, node) {
		if (m->alive && m->readable && !m->leaving)
			continue;
		if (!m->readable)
			s->withdrawn++;
		pfprof_member_free(s, m);
	}
}

/*
 * Frees the members that are gone, their final counts (their kin's too) in
 * pending.  The ring has not started or a join is under way: the sampler
 * collects nothing.
 */
static void pfprof_prune_dead(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;
	bool any = false;

	lockdep_assert_held(&s->members_lock);
	pfprof_read_all(s);
	list_for_each_entry_safe(m, tmp, &s->members, node) {
		cond_resched();
		if (m->alive)
			continue;
		/* Gone: no exec of it can be under way. */
		if (pfprof_member_access(s, m) == PFPROF_UNREADABLE) {
			s->withdrawn++;
		} else if (!m->joining || !pfprof_tree_of(s, m)) {
			/*
			 * Offered and gone before its join completed: since its
			 * registration (unless a tree counted it meanwhile).
			 */
			if (m->joining) {
				pfprof_since_registration(m);
				WRITE_ONCE(s->counted_any, true);
			}
			pfprof_member_account(s, m);
		}
		pfprof_member_free(s, m);
		any = true;
	}
	/* The last one gone: the sampler has a last sample to deliver. */
	if (any)
		WRITE_ONCE(s->changes, s->changes + 1);
}

/*
 * Before the ring starts: no dead process stays pinned for long, a
 * released kin's included (the reads let it go).
 */
void pfprof_members_prune(struct pfprof_session *s)
{
	mutex_lock(&s->members_lock);
	pfprof_prune_dead(s);
	pfprof_members_bury(s);
	mutex_unlock(&s->members_lock);
}

/*
 * PFPROF_IOC_ADD: the process @tgid joins @s now; its counts start now (or
 * at its start, PFPROF_TARGET_WHOLE_LIFE).  A process the session counts
 * already (a member, or in an inheriting member's tree) is refused; an
 * inheriting one takes the members in its tree into its own count, after
 * their last change.  Returns 1 when it is the session's only process (an
 * idle sampler is to be told), 0, or an errno.
 */
int pfprof_members_join(struct pfprof_session *s, struct pid *tgid, u32 flags)
{
	struct pfprof_counters delivered = {};
	struct pfprof_member *m;
	bool first, took_in = false;
	int ret;

	m = pfprof_member_new(tgid, flags, current_cred());
	if (IS_ERR(m))
		return PTR_ERR(m);

	mutex_lock(&s->members_lock);
	if (s->closed || s->ended || READ_ONCE(s->ring.canceled)) {
		ret = -ESHUTDOWN;
		goto err_unlock;
	}
	/* A session of a cgroup counts its cgroup's processes alone. */
	if (s->cgroup) {
		ret = -EBUSY;
		goto err_unlock;
	}
	pfprof_prune_dead(s);
	/* The kin of the members it freed go now: none may stand for a tree. */
	pfprof_members_bury(s);
	/*
	 * Full: nobody joins, not even one whose tree would take members in
	 * (it is linked before its walk finds them).
	 */
	if (pfprof_nr_members(s) >= PFPROF_MEMBERS_MAX) {
		ret = -ENOSPC;
		goto err_unlock;
	}
	ret = pfprof_may_join(s, m);
	if (ret)
		goto err_unlock;
	/* Their last changes first: from now on the members in its tree are in ours. */
	if (m->inherit)
		pfprof_account_all(s);
	ret = pfprof_member_link(s, m);
	if (ret)
		goto err_unlock;
	if (m->inherit) {
		/* Linked: what its tree forks from now is its kin; then its tree now. */
		m->joiner = true;
		pfprof_lineage_join(s, flags & PFPROF_TARGET_WHOLE_LIFE);
		/*
		 * Gone already: it takes nobody in, and fails.  Gone after it
		 * took members in: it joined, and its tree counts them; the next
		 * collection lets it go, as any member that exits.
		 */
		took_in = pfprof_read_counters(m->leader, &m->own, NULL);
		if (took_in) {
			delivered = pfprof_absorb(s, false);
			pfprof_read_all(s);
		}
		m->joiner = false;
	} else {
		pfprof_member_read(m);
	}
	if (!took_in && !m->alive) {
		/* Exited and reaped since the caller found it. */
		pfprof_member_free(s, m);
		pfprof_members_bury(s);
		mutex_unlock(&s->members_lock);
		return -ESRCH;
	}
	/*
	 * Whole life: everything so far goes into the next sample, but what
	 * the members it took in delivered already.
	 */
	m->seen = flags & PFPROF_TARGET_WHOLE_LIFE ? delivered : m->now;
	m->started = m->seen;
	WRITE_ONCE(s->counted_any, true);
	WRITE_ONCE(s->targeted, true);
	first = pfprof_nr_members(s) == 1;
	pfprof_members_bury(s);
	mutex_unlock(&s->members_lock);
	return first;

err_unlock:
	pfprof_members_bury(s);
	mutex_unlock(&s->members_lock);
	pfprof_member_drop(m);
	return ret;
}

/*
 * PFPROF_IOC_ADD_CGROUP: the processes of @cgrp (referenced; the session
 * takes the reference) and of its descendant cgroups are counted while they
 * are inside, from now: the session's only member, once it has none.
 */
int pfprof_members_add_cgroup(struct pfprof_session *s, struct cgroup *cgrp)
{
	struct pfprof_member *m;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL_ACCOUNT);
	if (!m) {
		pfprof_cgroup_put(cgrp);
		return -ENOMEM;
	}
	m->cgrp = cgrp;
	m->asker = get_current_cred();
	m->inherit = true;

	mutex_lock(&s->members_lock);
	if (s->closed || s->ended || READ_ONCE(s->ring.canceled)) {
		ret = -ESHUTDOWN;
		goto err_unlock;
	}
	if (pfprof_nr_members(s) || s->counted_any) {
		ret = -EBUSY;
		goto err_unlock;
	}
	WRITE_ONCE(s->cgroup, m);
	ret = pfprof_member_link(s, m);
	if (ret) {
		WRITE_ONCE(s->cgroup, NULL);
		goto err_unlock;
	}
	/* The first walk: what its processes did so far is not counted. */
	pfprof_lineage_open(s);
	pfprof_read_all(s);
	m->seen = m->now;
	m->started = m->seen;
	WRITE_ONCE(s->counted_any, true);
	WRITE_ONCE(s->targeted, true);
	mutex_unlock(&s->members_lock);
	return 0;

err_unlock:
	mutex_unlock(&s->members_lock);
	pfprof_cgroup_put(cgrp);
	put_cred(m->asker);
	/* exec.c may have seen it as the session's cgroup. */
	pfprof_member_free_rcu(m);
	return ret;
}

/*
 * A /proc registration (its own totals at registration: @base) offers the
 * process @tgid to @s, which follows it for @asker: it joins at the
 * sampler's next collection, counted from its registration, unless the
 * session counts it already.  @own: the opener's user registered it (its
 * own target: the session ends when it and the others have gone).  Cheap:
 * no process-list walk.  Nothing to report: a process that cannot join
 * simply does not.  Returns true when it is the session's only process: an
 * idle sampler is to be told (a busy one joins it on its period).
 */
bool pfprof_members_offer(struct pfprof_session *s, struct pid *tgid, u32 flags,
			  const struct cred *asker, bool own,
			  const struct pfprof_counters *base)
{
	struct pfprof_member *m, *there;
	bool first;

	m = pfprof_member_new(tgid, flags, asker);
	if (IS_ERR(m))
		return false;
	m->from_registry = true;
	m->joining = true;
	m->own_target = own;
	m->base = *base;

	mutex_lock(&s->members_lock);
	if (s->closed || s->ended || READ_ONCE(s->ring.canceled) || s->cgroup)
		goto drop;
	there = pfprof_member_of(s, m->leader->signal);
	if (there) {
		/*
		 * Registered again, by the same side (the opener's user or
		 * another), before its leaving completed: it stays.
		 */
		if (there->from_registry && there->leaving &&
		    there->own_target == own) {
			there->leaving = false;
			WRITE_ONCE(s->nr_leaving, s->nr_leaving - 1);
		}
		goto drop;
	}
	if (pfprof_may_join(s, m) || pfprof_member_link(s, m))
		goto drop;
	WRITE_ONCE(s->nr_registered, s->nr_registered + 1);
	/*
	 * Its own target: its leaving may end the session at once (another
	 * user's joiner above it is refused at the join: members.c).
	 */
	if (own)
		WRITE_ONCE(s->targeted, true);
	first = pfprof_nr_members(s) == 1;
	mutex_unlock(&s->members_lock);
	return first;

drop:
	mutex_unlock(&s->members_lock);
	pfprof_member_drop(m);
	return false;
}

/*
 * "U <pid>": the process @tgid leaves @s, if it joined through /proc, at the
 * sampler's next collection; its own counts run until now, its
 * descendants' until then.  Returns true when every member is leaving: the
 * sampler is to deliver the last sample and end the ring now.
 */
bool pfprof_members_recall(struct pfprof_session *s, struct pid *tgid)
{
	struct pfprof_member *m;
	struct task_struct *task;
	bool all_leaving = false;
	bool member = true;

	/*
	 * Most sessions a recall visits do not count the process: the hash
	 * says so under RCU, without their members_lock, which a session's
	 * opener may keep held for long (a sampler in a throttled cgroup of
	 * its own) and every user's U would wait for.  A process gone already
	 * is looked for under the lock.
	 */
	rcu_read_lock();
	task = pid_task(tgid, PIDTYPE_TGID);
	if (task)
		member = !!pfprof_member_of_rcu(s, task->signal);
	rcu_read_unlock();
	if (!member)
		return false;

	mutex_lock(&s->members_lock);
	list_for_each_entry(m, &s->members, node) {
		if (m->tgid != tgid || !m->from_registry || m->leaving)
			continue;
		pfprof_read_counters(m->leader, &m->until, NULL);
		m->leaving = true;
		WRITE_ONCE(s->nr_leaving, s->nr_leaving + 1);
		WRITE_ONCE(s->changes, s->changes + 1);
		all_leaving = s->nr_leaving == pfprof_nr_members(s);
		break;
	}
	mutex_unlock(&s->members_lock);
	return all_leaving;
}

/*
 * PFPROF_IOC_END: every member leaves after its last change.  Returns
 * whether the session ever counted a process: then its last sample ends
 * the ring, else nothing will.
 */
bool pfprof_members_end(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;
	bool counted_any;

	mutex_lock(&s->members_lock);
	WRITE_ONCE(s->ended, true);
	if (pfprof_nr_members(s))
		pfprof_account_all(s);
	list_for_each_entry_safe(m, tmp, &s->members, node)
		pfprof_member_free(s, m);
	pfprof_members_bury(s);
	WRITE_ONCE(s->changes, s->changes + 1);
	counted_any = s->counted_any;
	mutex_unlock(&s->members_lock);
	return counted_any;
}

/* The session is closing, its sampler stopped: nobody joins any more. */
void pfprof_members_free(struct pfprof_session *s)
{
	struct pfprof_member *m, *tmp;

	mutex_lock(&s->members_lock);
	s->closed = true;
	list_for_each_entry_safe(m, tmp, &s->members, node)
		pfprof_member_free(s, m);
	pfprof_members_bury(s);
	mutex_unlock(&s->members_lock);
	/* Off the session list already: no probe makes kin of it once a grace period passed. */
	pfprof_lineage_close(s);
}

/*
 * Accounts every member, drops those that are gone or withdrawn, and copies
 * the pending sample to @pending and how many processes were withdrawn so
 * far to @withdrawn.  Returns how many members remain.
 */
unsigned int pfprof_members_collect(struct pfprof_session *s,
				    struct pfprof_counters *pending,
				    struct pfprof_memory *memory,
				    unsigned int *withdrawn)
{
	struct pfprof_member *m;
	unsigned int nr;

	memset(memory, 0, sizeof(*memory));
	mutex_lock(&s->members_lock);
	pfprof_read_all(s);
	pfprof_complete_joins(s);
	list_for_each_entry(m, &s->members, node) {
		if (!m->readable || m->execing)
			continue;
		pfprof_member_account(s, m);
		if (!m->leaving) {
			memory->anon += m->memory.anon;
			memory->file += m->memory.file;
			memory->shmem += m->memory.shmem;
			memory->swap += m->memory.swap;
		}
	}
	pfprof_free_departed(s);
	pfprof_members_bury(s);
	*pending = s->pending;
	*withdrawn = s->withdrawn;
	nr = pfprof_nr_members(s);
	mutex_unlock(&s->members_lock);
	return nr;
}

/* Removes what the sampler delivered (or discarded) from pending. */
void pfprof_members_settle(struct pfprof_session *s,
			   const struct pfprof_counters *delivered)
{
	mutex_lock(&s->members_lock);
	s->pending.minor -= delivered->minor;
	s->pending.major -= delivered->major;
	s->pending.cpu_ns -= delivered->cpu_ns;
	mutex_unlock(&s->members_lock);
}
