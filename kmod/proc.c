// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: /proc/pfprof/status, the registry it keeps, and the sessions
 * that follow it.
 *
 * Writing "R <pid>" registers a process, "U <pid>" unregisters it (the
 * grammar and the rules are in pfprof.h).  A registration joins every
 * session that follows registrations in its scope and whose opener may
 * read the process; unregistering takes it out of them again.  Reading
 * lists the registered processes the reader may read, with their counts
 * since registration.  A registered process that is gone is forgotten
 * within a second (sooner if the registry is used).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/ctype.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/proc_fs.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "pfprof_internal.h"

/* "R 2147483647\n" fits; anything longer is not a command. */
#define PFPROF_CMD_MAX	32

struct pfprof_reg {
	struct list_head node;
	struct task_struct *leader;	/* referenced: keeps ->signal alive */
	struct pid *pid;		/* referenced: the tgid, for listing */
	struct pfprof_totals base;	/* totals at registration */
};

static struct proc_dir_entry *pfprof_proc_dir;

/* The registry, the sessions and what they follow: see pfprof_internal.h. */
static DEFINE_MUTEX(pfprof_reg_lock);
static LIST_HEAD(pfprof_regs);
static LIST_HEAD(pfprof_sessions);

static void pfprof_prune_fn(struct work_struct *work);
/* Runs while the registry is not empty: nothing tells us of an exit. */
static DECLARE_DELAYED_WORK(pfprof_prune_work, pfprof_prune_fn);

static void pfprof_reg_free(struct pfprof_reg *r)
{
	list_del(&r->node);
	put_pid(r->pid);
	put_task_struct(r->leader);
	kfree(r);
}

/* Forgets the registered processes that are gone. */
static void pfprof_reg_prune(void)
{
	struct pfprof_reg *r, *tmp;
	struct pfprof_totals now;

	lockdep_assert_held(&pfprof_reg_lock);
	list_for_each_entry_safe(r, tmp, &pfprof_regs, node) {
		if (!pfprof_read_totals(r->leader, &now, false))
			pfprof_reg_free(r);
	}
}

static void pfprof_prune_fn(struct work_struct *work)
{
	mutex_lock(&pfprof_reg_lock);
	pfprof_reg_prune();
	if (!list_empty(&pfprof_regs))
		schedule_delayed_work(&pfprof_prune_work, HZ);
	mutex_unlock(&pfprof_reg_lock);
}

static struct pfprof_reg *pfprof_reg_find(struct task_struct *leader)
{
	struct pfprof_reg *r;

	list_for_each_entry(r, &pfprof_regs, node) {
		if (r->leader->signal == leader->signal)
			return r;
	}
	return NULL;
}

/* @s follows registrations, and @leader is in the scope it follows. */
static bool pfprof_follows(struct pfprof_session *s, struct task_struct *leader)
{
	lockdep_assert_held(&pfprof_reg_lock);
	switch (s->follow) {
	case PFPROF_FOLLOW_ALL:
		return true;
	case PFPROF_FOLLOW_DESCENDANTS:
		return leader->signal == s->follow_root->signal ||
		       pfprof_descends_from(leader, s->follow_root);
	default:
		return false;
	}
}

/* A registered process joins @s if @s follows it and may read it. */
static void pfprof_offer(struct pfprof_session *s, struct pfprof_reg *r)
{
	if (pfprof_follows(s, r->leader) &&
	    pfprof_opener_may_read(s->file, r->leader))
		/* Counted already, full or ended: it simply does not join. */
		pfprof_members_join(s, r->leader, s->follow_flags, &r->base);
}

/* The sessions a user opened: max_sessions bounds them. */
static unsigned int pfprof_sessions_of(kuid_t owner)
{
	struct pfprof_session *s;
	unsigned int n = 0;

	list_for_each_entry(s, &pfprof_sessions, node)
		n += uid_eq(s->owner, owner);
	return n;
}

int pfprof_session_add(struct pfprof_session *s)
{
	int ret = 0;

	mutex_lock(&pfprof_reg_lock);
	if (pfprof_sessions_of(s->owner) >= pfprof_max_sessions)
		ret = -EMFILE;
	else
		list_add_tail(&s->node, &pfprof_sessions);
	mutex_unlock(&pfprof_reg_lock);
	return ret;
}

/* No registration reaches @s once this returns. */
void pfprof_session_remove(struct pfprof_session *s)
{
	mutex_lock(&pfprof_reg_lock);
	list_del(&s->node);
	if (s->follow_root)
		put_task_struct(s->follow_root);
	s->follow_root = NULL;
	s->follow = PFPROF_FOLLOW_NONE;
	mutex_unlock(&pfprof_reg_lock);
}

/*
 * @s follows @scope from now on (@root: referenced by the caller, for
 * DESCENDANTS); the processes registered already join at once.
 */
void pfprof_session_follow(struct pfprof_session *s, u32 scope, u32 flags,
			   struct task_struct *root)
{
	struct pfprof_reg *r;

	mutex_lock(&pfprof_reg_lock);
	if (s->follow_root)
		put_task_struct(s->follow_root);
	if (root)
		get_task_struct(root);
	s->follow_root = root;
	s->follow = scope;
	s->follow_flags = flags;
	pfprof_reg_prune();
	list_for_each_entry(r, &pfprof_regs, node)
		pfprof_offer(s, r);
	mutex_unlock(&pfprof_reg_lock);
}

static int pfprof_register(const struct file *file, pid_t nr)
{
	struct pfprof_session *s;
	struct task_struct *leader;
	struct pfprof_reg *r;
	struct pid *pid;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r) {
		ret = -ENOMEM;
		goto err_put_refs;
	}
	r->leader = leader;
	r->pid = pid;

	mutex_lock(&pfprof_reg_lock);
	pfprof_reg_prune();
	if (pfprof_reg_find(leader)) {
		ret = -EEXIST;
		goto err_unlock;
	}
	if (!pfprof_read_totals(leader, &r->base, false)) {
		/* Exited and reaped between the lookup and now. */
		ret = -ESRCH;
		goto err_unlock;
	}
	list_add_tail(&r->node, &pfprof_regs);
	list_for_each_entry(s, &pfprof_sessions, node)
		pfprof_offer(s, r);
	/* Already pending while others are registered: then a no-op. */
	schedule_delayed_work(&pfprof_prune_work, HZ);
	mutex_unlock(&pfprof_reg_lock);
	return 0;

err_unlock:
	mutex_unlock(&pfprof_reg_lock);
	kfree(r);
err_put_refs:
	put_task_struct(leader);
	put_pid(pid);
	return ret;
}

static int pfprof_unregister(const struct file *file, pid_t nr)
{
	struct pfprof_session *s;
	struct task_struct *leader;
	struct pfprof_reg *r;
	struct pid *pid;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;

	mutex_lock(&pfprof_reg_lock);
	r = pfprof_reg_find(leader);
	if (r) {
		list_for_each_entry(s, &pfprof_sessions, node)
			pfprof_members_leave(s, leader);
		pfprof_reg_free(r);
	}
	mutex_unlock(&pfprof_reg_lock);

	put_task_struct(leader);
	put_pid(pid);
	return r ? 0 : -ENOENT;
}

/* Exactly "R <pid>" or "U <pid>", decimal pid > 0, one optional '\n'. */
static int pfprof_parse(char *buf, size_t len, char *cmd, pid_t *nr)
{
	size_t i;
	int ret;

	if (len && buf[len - 1] == '\n')
		buf[--len] = '\0';
	if (len < 3 || (buf[0] != 'R' && buf[0] != 'U') || buf[1] != ' ')
		return -EINVAL;
	/* kstrtoint() would also take a sign and a trailing newline. */
	for (i = 2; i < len; i++) {
		if (!isdigit(buf[i]))
			return -EINVAL;
	}
	ret = kstrtoint(buf + 2, 10, nr);
	if (ret)
		return -EINVAL;
	if (*nr <= 0)
		return -EINVAL;
	*cmd = buf[0];
	return 0;
}

static ssize_t pfprof_status_write(struct file *file, const char __user *ubuf,
				   size_t count, loff_t *ppos)
{
	char buf[PFPROF_CMD_MAX];
	pid_t nr;
	char cmd;
	int ret;

	if (count == 0 || count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';

	ret = pfprof_parse(buf, count, &cmd, &nr);
	if (ret)
		return ret;
	ret = cmd == 'R' ? pfprof_register(file, nr) :
			   pfprof_unregister(file, nr);
	return ret ? ret : count;
}

static int pfprof_status_show(struct seq_file *m, void *v)
{
	struct pfprof_totals now;
	struct pfprof_reg *r;

	mutex_lock(&pfprof_reg_lock);
	pfprof_reg_prune();
	list_for_each_entry(r, &pfprof_regs, node) {
		/* Pids are the reader's; one it cannot name is not listed. */
		pid_t nr = pid_vnr(r->pid);

		if (!nr || !pfprof_may_read(m->file, r->leader))
			continue;
		pfprof_read_totals(r->leader, &now, false);
		seq_printf(m, "%d %llu %llu %llu\n", nr,
			   now.minor - r->base.minor, now.major - r->base.major,
			   now.cpu_ns - r->base.cpu_ns);
	}
	mutex_unlock(&pfprof_reg_lock);
	return 0;
}

static int pfprof_status_open(struct inode *inode, struct file *file)
{
	return single_open(file, pfprof_status_show, NULL);
}

static const struct proc_ops pfprof_status_ops = {
	.proc_open	= pfprof_status_open,
	.proc_read	= seq_read,
	.proc_lseek	= seq_lseek,
	.proc_release	= single_release,
	.proc_write	= pfprof_status_write,
};

int pfprof_proc_init(void)
{
	pfprof_proc_dir = proc_mkdir("pfprof", NULL);
	if (!pfprof_proc_dir)
		return -ENOMEM;
	/* Anyone may write and read; pfprof_may_read() decides per process. */
	if (!proc_create("status", 0666, pfprof_proc_dir, &pfprof_status_ops)) {
		proc_remove(pfprof_proc_dir);
		return -ENOMEM;
	}
	return 0;
}

/*
 * Removes the file (waiting for writers in flight) and the registry.  No
 * session is left: each pins the module while its device file is open.
 */
void pfprof_proc_exit(void)
{
	struct pfprof_reg *r, *tmp;

	proc_remove(pfprof_proc_dir);
	/* Also when it re-queues itself. */
	cancel_delayed_work_sync(&pfprof_prune_work);
	mutex_lock(&pfprof_reg_lock);
	list_for_each_entry_safe(r, tmp, &pfprof_regs, node)
		pfprof_reg_free(r);
	mutex_unlock(&pfprof_reg_lock);
}
