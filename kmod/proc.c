// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the registered processes and /proc/pfprof/status.
 *
 * Writing "R <pid>" registers a process, "U <pid>" unregisters it; reading
 * lists "<pid> <minor> <major> <cpu_ns>" per registered process, totals
 * since registration.  Each process's change since the sampler last looked
 * is added to one pending sample, which the sampler hands to the ring; a
 * process that leaves (unregistered or exited) adds its final change first,
 * so every fault between registration and leaving lands in one sample.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/ctype.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/proc_fs.h>
#include <linux/sched/coredump.h>
#include <linux/sched/task.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "pfprof_internal.h"

/* "R 2147483647\n" fits; anything longer is not a command. */
#define PFPROF_CMD_MAX	32

struct pfprof_proc {
	struct list_head node;
	struct task_struct *leader;	/* referenced: keeps ->signal alive */
	struct pid *pid;		/* referenced: the tgid, for listing */
	struct pfprof_totals base;	/* totals at registration */
	struct pfprof_totals seen;	/* totals the sampler last accounted */
};

static struct proc_dir_entry *pfprof_proc_dir;

/*
 * Protects the list, pfprof_nr and pfprof_changes (both also read
 * locklessly) and pending.
 */
static DEFINE_MUTEX(pfprof_reg_lock);
static LIST_HEAD(pfprof_procs);
static unsigned int pfprof_nr;
/*
 * Registrations and unregistrations since load: tells the sampler about
 * one it has not collected since, even when the count is back where it was.
 */
static unsigned int pfprof_changes;
static struct pfprof_totals pfprof_pending;

/* Totals only grow; a smaller reading (never expected) adds nothing. */
static u64 pfprof_advance(u64 *seen, u64 now)
{
	u64 old = *seen;

	if (now <= old)
		return 0;
	*seen = now;
	return now - old;
}

/* Adds what @p did since the sampler last looked to pending. */
static bool pfprof_account(struct pfprof_proc *p)
{
	struct pfprof_totals now;
	bool alive = pfprof_read_totals(p->leader, &now);

	pfprof_pending.minor += pfprof_advance(&p->seen.minor, now.minor);
	pfprof_pending.major += pfprof_advance(&p->seen.major, now.major);
	pfprof_pending.cpu_ns += pfprof_advance(&p->seen.cpu_ns, now.cpu_ns);
	return alive;
}

static void pfprof_proc_free(struct pfprof_proc *p)
{
	list_del(&p->node);
	WRITE_ONCE(pfprof_nr, pfprof_nr - 1);
	put_pid(p->pid);
	put_task_struct(p->leader);
	kfree(p);
}

unsigned int pfprof_nr_registered(void)
{
	return READ_ONCE(pfprof_nr);
}

unsigned int pfprof_reg_changes(void)
{
	return READ_ONCE(pfprof_changes);
}

/*
 * Accounts every registered process, drops those that are gone, and copies
 * the pending sample to @pending.  Returns how many remain registered.
 */
unsigned int pfprof_reg_collect(struct pfprof_totals *pending)
{
	struct pfprof_proc *p, *tmp;
	unsigned int nr;

	mutex_lock(&pfprof_reg_lock);
	list_for_each_entry_safe(p, tmp, &pfprof_procs, node) {
		if (!pfprof_account(p))
			pfprof_proc_free(p);
	}
	*pending = pfprof_pending;
	nr = pfprof_nr;
	mutex_unlock(&pfprof_reg_lock);
	return nr;
}

/* Removes what the sampler delivered (or discarded) from pending. */
void pfprof_reg_settle(const struct pfprof_totals *delivered)
{
	mutex_lock(&pfprof_reg_lock);
	pfprof_pending.minor -= delivered->minor;
	pfprof_pending.major -= delivered->major;
	pfprof_pending.cpu_ns -= delivered->cpu_ns;
	mutex_unlock(&pfprof_reg_lock);
}

/*
 * The signal struct identifies the process: the leader's task_struct does
 * not, since a thread that execs becomes the new leader.
 */
static struct pfprof_proc *pfprof_find(struct task_struct *leader)
{
	struct pfprof_proc *p;

	list_for_each_entry(p, &pfprof_procs, node) {
		if (p->leader->signal == leader->signal)
			return p;
	}
	return NULL;
}

/* The filesystem ids of @cred are every id of @tcred's (ptrace's rule). */
static bool pfprof_ids_match(const struct cred *cred, const struct cred *tcred)
{
	return uid_eq(cred->fsuid, tcred->euid) &&
	       uid_eq(cred->fsuid, tcred->suid) &&
	       uid_eq(cred->fsuid, tcred->uid) &&
	       gid_eq(cred->fsgid, tcred->egid) &&
	       gid_eq(cred->fsgid, tcred->sgid) &&
	       gid_eq(cred->fsgid, tcred->gid);
}

/*
 * ptrace_may_access() is not exported: this is its read check with
 * filesystem credentials, as /proc uses it.  Both the writer and whoever
 * opened @file must pass, so that a privileged process writing to a
 * descriptor an unprivileged one handed it (as its stdout, say) lends it
 * no authority.
 */
static bool pfprof_may_read(struct task_struct *task, const struct file *file)
{
	const struct cred *tcred;
	struct mm_struct *mm;
	bool ok;

	rcu_read_lock();
	tcred = __task_cred(task);
	ok = (pfprof_ids_match(current_cred(), tcred) ||
	      ns_capable(tcred->user_ns, CAP_SYS_PTRACE)) &&
	     (pfprof_ids_match(file->f_cred, tcred) ||
	      file_ns_capable(file, tcred->user_ns, CAP_SYS_PTRACE));
	rcu_read_unlock();
	if (!ok)
		return false;

	task_lock(task);
	mm = task->mm;
	if (mm && get_dumpable(mm) != SUID_DUMP_USER &&
	    !(ns_capable(mm->user_ns, CAP_SYS_PTRACE) &&
	      file_ns_capable(file, mm->user_ns, CAP_SYS_PTRACE)))
		ok = false;
	task_unlock(task);
	return ok;
}

/*
 * Looks up the process (thread group) @nr in the caller's pid namespace,
 * for a command written to @file.
 */
static int pfprof_lookup(const struct file *file, pid_t nr, struct pid **pidp,
			 struct task_struct **leaderp)
{
	struct task_struct *leader;
	struct pid *pid;
	int ret;

	pid = find_get_pid(nr);
	if (!pid)
		return -ESRCH;
	/* Only a thread group's leader is attached to its tgid. */
	leader = get_pid_task(pid, PIDTYPE_TGID);
	if (!leader) {
		ret = -ESRCH;
		goto err_put_pid;
	}
	if (!pfprof_may_read(leader, file)) {
		ret = -EPERM;
		goto err_put_task;
	}
	*pidp = pid;
	*leaderp = leader;
	return 0;

err_put_task:
	put_task_struct(leader);
err_put_pid:
	put_pid(pid);
	return ret;
}

static int pfprof_register(const struct file *file, pid_t nr)
{
	struct task_struct *leader;
	struct pfprof_proc *p;
	struct pid *pid;
	bool first;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;

	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (!p) {
		ret = -ENOMEM;
		goto err_put_refs;
	}
	p->leader = leader;
	p->pid = pid;

	mutex_lock(&pfprof_reg_lock);
	if (pfprof_find(leader)) {
		ret = -EEXIST;
		goto err_unlock;
	}
	if (!pfprof_read_totals(leader, &p->base)) {
		/* Exited and reaped between the lookup and now. */
		ret = -ESRCH;
		goto err_unlock;
	}
	p->seen = p->base;
	list_add_tail(&p->node, &pfprof_procs);
	WRITE_ONCE(pfprof_nr, pfprof_nr + 1);
	WRITE_ONCE(pfprof_changes, pfprof_changes + 1);
	first = pfprof_nr == 1;
	mutex_unlock(&pfprof_reg_lock);

	/* Only an idle sampler needs telling: a busy one keeps its deadlines. */
	if (first)
		pfprof_sampler_kick();
	return 0;

err_unlock:
	mutex_unlock(&pfprof_reg_lock);
	kfree(p);
err_put_refs:
	put_task_struct(leader);
	put_pid(pid);
	return ret;
}

static int pfprof_unregister(const struct file *file, pid_t nr)
{
	struct task_struct *leader;
	struct pfprof_proc *p;
	struct pid *pid;
	bool last = false;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;

	mutex_lock(&pfprof_reg_lock);
	p = pfprof_find(leader);
	if (p) {
		/* Its last faults still belong to the pending sample. */
		pfprof_account(p);
		pfprof_proc_free(p);
		WRITE_ONCE(pfprof_changes, pfprof_changes + 1);
		last = !pfprof_nr;
	}
	mutex_unlock(&pfprof_reg_lock);

	put_task_struct(leader);
	put_pid(pid);
	if (!p)
		return -ENOENT;
	/* The last one gone: let the sampler deliver and cancel now. */
	if (last)
		pfprof_sampler_kick();
	return 0;
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
	struct pfprof_proc *p;

	mutex_lock(&pfprof_reg_lock);
	list_for_each_entry(p, &pfprof_procs, node) {
		/* Pids are the reader's; one it cannot name is not listed. */
		pid_t nr = pid_vnr(p->pid);

		if (!nr)
			continue;
		pfprof_read_totals(p->leader, &now);
		seq_printf(m, "%d %llu %llu %llu\n", nr,
			   now.minor - p->base.minor, now.major - p->base.major,
			   now.cpu_ns - p->base.cpu_ns);
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
	/* Anyone may write; pfprof_may_read() decides per target. */
	if (!proc_create("status", 0666, pfprof_proc_dir, &pfprof_status_ops)) {
		proc_remove(pfprof_proc_dir);
		return -ENOMEM;
	}
	return 0;
}

/* Removes the file (waiting for writers in flight) and every registration. */
void pfprof_proc_exit(void)
{
	struct pfprof_proc *p, *tmp;

	proc_remove(pfprof_proc_dir);
	mutex_lock(&pfprof_reg_lock);
	list_for_each_entry_safe(p, tmp, &pfprof_procs, node)
		pfprof_proc_free(p);
	pfprof_pending = (struct pfprof_totals){};
	mutex_unlock(&pfprof_reg_lock);
}
