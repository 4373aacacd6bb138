// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the registry of processes registered through /proc, each with
 * its counters at registration.
 *
 * Its lock guards bounded work only (a hash lookup, a count, a copy): what
 * a registration means to the sessions that follow it is session.c's to
 * do, after the lock is dropped.  A registered process that is gone is
 * forgotten within a second, by a timer that runs while the registry is
 * not empty (nothing tells a module of an exit).  A user may have
 * max_registrations processes registered at once.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "pfprof_internal.h"

#define PFPROF_REG_HASH_BITS	8

struct pfprof_reg {
	struct list_head node;		/* in registration order, for listing */
	struct hlist_node hash;		/* by leader->signal */
	struct task_struct *leader;	/* referenced: keeps ->signal alive */
	struct pid *pid;		/* referenced: the tgid */
	kuid_t registrant;		/* the writer's euid: max_registrations */
	struct pfprof_counters base;	/* its own counters at registration */
};

static DEFINE_MUTEX(pfprof_registry_lock);
static LIST_HEAD(pfprof_regs);
static DEFINE_HASHTABLE(pfprof_regs_by_signal, PFPROF_REG_HASH_BITS);

static void pfprof_prune_fn(struct work_struct *work);
static DECLARE_DELAYED_WORK(pfprof_prune_work, pfprof_prune_fn);

static void pfprof_reg_free(struct pfprof_reg *r)
{
	list_del(&r->node);
	hash_del(&r->hash);
	put_pid(r->pid);
	put_task_struct(r->leader);
	kfree(r);
}

/* Forgets the registered processes that are gone. */
static void pfprof_prune_fn(struct work_struct *work)
{
	struct pfprof_reg *r, *tmp;
	struct pfprof_counters now;

	mutex_lock(&pfprof_registry_lock);
	list_for_each_entry_safe(r, tmp, &pfprof_regs, node) {
		if (!pfprof_read_counters(r->leader, &now, NULL))
			pfprof_reg_free(r);
	}
	if (!list_empty(&pfprof_regs))
		schedule_delayed_work(&pfprof_prune_work, HZ);
	mutex_unlock(&pfprof_registry_lock);
}

static struct pfprof_reg *pfprof_reg_find(const struct signal_struct *sig)
{
	struct pfprof_reg *r;

	hash_for_each_possible(pfprof_regs_by_signal, r, hash,
			       (unsigned long)sig) {
		if (r->leader->signal == sig)
			return r;
	}
	return NULL;
}

static unsigned int pfprof_regs_of(kuid_t registrant)
{
	struct pfprof_reg *r;
	unsigned int n = 0;

	list_for_each_entry(r, &pfprof_regs, node)
		n += uid_eq(r->registrant, registrant);
	return n;
}

/*
 * Registers the process @pid (group leader @leader: both referenced, the
 * registry takes the references when it succeeds) for @registrant; @base
 * gets its counters at registration.
 */
int pfprof_registry_add(struct pid *pid, struct task_struct *leader,
			kuid_t registrant, struct pfprof_counters *base)
{
	struct pfprof_reg *r;
	int ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		return -ENOMEM;
	r->leader = leader;
	r->pid = pid;
	r->registrant = registrant;

	mutex_lock(&pfprof_registry_lock);
	if (pfprof_reg_find(leader->signal)) {
		ret = -EEXIST;
		goto err_unlock;
	}
	if (pfprof_regs_of(r->registrant) >= pfprof_max_registrations) {
		ret = -ENOSPC;
		goto err_unlock;
	}
	if (!pfprof_read_counters(leader, &r->base, NULL)) {
		/* Exited and reaped between the lookup and now. */
		ret = -ESRCH;
		goto err_unlock;
	}
	*base = r->base;
	list_add_tail(&r->node, &pfprof_regs);
	hash_add(pfprof_regs_by_signal, &r->hash, (unsigned long)leader->signal);
	/* Already pending while others are registered: then a no-op. */
	schedule_delayed_work(&pfprof_prune_work, HZ);
	mutex_unlock(&pfprof_registry_lock);
	return 0;

err_unlock:
	mutex_unlock(&pfprof_registry_lock);
	kfree(r);
	return ret;
}

/*
 * Forgets the registration of @leader's process: -ENOENT if there is none,
 * -EPERM if another user than @registrant made it (its "U" would end what
 * that user's sessions count).
 */
int pfprof_registry_remove(struct task_struct *leader, kuid_t registrant)
{
	struct pfprof_reg *r;
	int ret = 0;

	mutex_lock(&pfprof_registry_lock);
	r = pfprof_reg_find(leader->signal);
	if (!r)
		ret = -ENOENT;
	else if (!uid_eq(r->registrant, registrant))
		ret = -EPERM;
	else
		pfprof_reg_free(r);
	mutex_unlock(&pfprof_registry_lock);
	return ret;
}

/*
 * Every registration, referenced, in an array the caller frees with
 * pfprof_registry_put(): NULL when there is none, ERR_PTR(-ENOMEM) when
 * there is no memory for it.
 */
struct pfprof_registration *pfprof_registry_all(unsigned int *nr)
{
	struct pfprof_registration *all = NULL;
	struct pfprof_reg *r;
	unsigned int n = 0;

	*nr = 0;
	mutex_lock(&pfprof_registry_lock);
	list_for_each_entry(r, &pfprof_regs, node)
		n++;
	if (n) {
		all = kmalloc_array(n, sizeof(*all), GFP_KERNEL);
		if (!all) {
			all = ERR_PTR(-ENOMEM);
			goto out;
		}
	}
	list_for_each_entry(r, &pfprof_regs, node) {
		all[*nr].pid = get_pid(r->pid);
		all[*nr].registrant = r->registrant;
		all[(*nr)++].base = r->base;
	}
out:
	mutex_unlock(&pfprof_registry_lock);
	return all;
}

void pfprof_registry_put(struct pfprof_registration *all, unsigned int nr)
{
	unsigned int i;

	for (i = 0; i < nr; i++)
		put_pid(all[i].pid);
	kfree(all);
}

/*
 * The listing: "<pid> <minor> <major> <cpu_ns>" since registration, per
 * registered process that @file's reader may read (its current leader),
 * can name in its pid namespace, and that is not gone.  Reading uses no
 * privilege: a capability that lets a line through is not audited.  It
 * works on a copy: a reader the scheduler holds back (a throttled cgroup
 * of its own) holds no lock that every user's R and U wait for.
 */
int pfprof_registry_show(struct seq_file *m)
{
	struct pfprof_registration *all;
	struct task_struct *leader;
	struct pfprof_counters now;
	unsigned int nr_all, i;
	bool listed;
	pid_t nr;

	all = pfprof_registry_all(&nr_all);
	if (IS_ERR(all))
		return PTR_ERR(all);
	for (i = 0; i < nr_all; i++) {
		nr = pid_vnr(all[i].pid);
		leader = nr ? get_pid_task(all[i].pid, PIDTYPE_TGID) : NULL;
		if (!leader)
			continue;
		listed = pfprof_may_list(m->file, leader) &&
			 pfprof_read_counters(leader, &now, NULL);
		put_task_struct(leader);
		if (!listed)
			continue;
		seq_printf(m, "%d %llu %llu %llu\n", nr,
			   now.minor - all[i].base.minor,
			   now.major - all[i].base.major,
			   now.cpu_ns - all[i].base.cpu_ns);
	}
	pfprof_registry_put(all, nr_all);
	return 0;
}

/* No writer is left (the /proc file is gone): forgets every registration. */
void pfprof_registry_exit(void)
{
	struct pfprof_reg *r, *tmp;

	/* Also when it re-queues itself. */
	cancel_delayed_work_sync(&pfprof_prune_work);
	mutex_lock(&pfprof_registry_lock);
	list_for_each_entry_safe(r, tmp, &pfprof_regs, node)
		pfprof_reg_free(r);
	mutex_unlock(&pfprof_registry_lock);
}
