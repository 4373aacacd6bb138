// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: /proc/pfprof/status.
 *
 * Writing "R <pid>" registers a process, "U <pid>" unregisters it (the
 * grammar and the rules are in pfprof.h): the registry (registry.c) keeps
 * it, and the sessions that follow it (session.c) are offered it or have it
 * recalled.  Reading lists the registered processes the reader may read,
 * with their counts since registration.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/ctype.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/pid.h>
#include <linux/proc_fs.h>
#include <linux/sched/task.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

#include "pfprof_internal.h"

/* "R 2147483647\n" fits; anything longer is not a command. */
#define PFPROF_CMD_MAX	32

static struct proc_dir_entry *pfprof_proc_dir;

/*
 * Whose registrations a write to @file makes and unmakes: its opener's
 * (effective uid), not a writer it was handed to.
 */
static kuid_t pfprof_registrant(const struct file *file)
{
	return file->f_cred->euid;
}

/* Registers @nr for the file's opener; the sessions that follow it are offered it. */
static int pfprof_register(const struct file *file, pid_t nr)
{
	struct task_struct *leader;
	struct pfprof_counters base;
	struct pid *pid;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;
	/* The registry's references keep pid alive until "U" and after. */
	get_pid(pid);
	ret = pfprof_registry_add(pid, leader, pfprof_registrant(file), &base);
	if (ret) {
		put_task_struct(leader);
		put_pid(pid);
	} else {
		pfprof_sessions_offer(pid, pfprof_registrant(file), &base);
	}
	put_pid(pid);
	return ret;
}

/*
 * Unregisters @nr, the registration the file's opener made; the sessions it
 * joined that way have it recalled.
 */
static int pfprof_unregister(const struct file *file, pid_t nr)
{
	struct task_struct *leader;
	struct pid *pid;
	int ret;

	ret = pfprof_lookup(file, nr, &pid, &leader);
	if (ret)
		return ret;
	ret = pfprof_registry_remove(leader, pfprof_registrant(file));
	if (!ret)
		pfprof_sessions_recall(pid);
	put_task_struct(leader);
	put_pid(pid);
	return ret;
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
	return pfprof_registry_show(m);
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
	/* Anyone may write and read; access.c decides per process. */
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
	proc_remove(pfprof_proc_dir);
	pfprof_registry_exit();
}
