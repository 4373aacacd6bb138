// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: who may profile which process.
 *
 * The rule is ptrace's read check with filesystem credentials, the one
 * /proc applies to a process's files.  ptrace_may_access() is not exported
 * to modules (neither on 6.1 nor on 6.12), so this is its credential and
 * dumpability part, modelled on __ptrace_may_access(); security modules are
 * not consulted.  Every check is made for two credentials: the caller's and
 * those of whoever opened the file the request came through, so that a
 * privileged process writing to a descriptor an unprivileged one handed it
 * (as its stdout, say) lends it no authority.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/pid.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#include <linux/sched/task.h>

#include "pfprof_internal.h"

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
 * @current_too: the caller must pass as well as @file's opener.  Otherwise
 * only the opener is asked: a session's, when somebody else registered the
 * process through /proc (and passed there).
 */
static bool pfprof_check(const struct file *file, struct task_struct *task,
			 bool current_too)
{
	const struct cred *tcred;
	struct mm_struct *mm;
	bool ok;

	rcu_read_lock();
	tcred = __task_cred(task);
	ok = (!current_too || pfprof_ids_match(current_cred(), tcred) ||
	      ns_capable(tcred->user_ns, CAP_SYS_PTRACE)) &&
	     (pfprof_ids_match(file->f_cred, tcred) ||
	      file_ns_capable(file, tcred->user_ns, CAP_SYS_PTRACE));
	rcu_read_unlock();
	if (!ok)
		return false;

	task_lock(task);
	mm = task->mm;
	if (mm && get_dumpable(mm) != SUID_DUMP_USER &&
	    !((!current_too || ns_capable(mm->user_ns, CAP_SYS_PTRACE)) &&
	      file_ns_capable(file, mm->user_ns, CAP_SYS_PTRACE)))
		ok = false;
	task_unlock(task);
	return ok;
}

/* Whoever opened @file may read @task. */
bool pfprof_opener_may_read(const struct file *file, struct task_struct *task)
{
	return pfprof_check(file, task, false);
}

/* Both the caller and whoever opened @file may read @task. */
bool pfprof_may_read(const struct file *file, struct task_struct *task)
{
	return pfprof_check(file, task, true);
}

/*
 * Looks up the process (thread group) @nr in the caller's pid namespace,
 * for a request made through @file.  Returns references to its tgid and
 * its group leader.
 */
int pfprof_lookup(const struct file *file, pid_t nr, struct pid **pidp,
		  struct task_struct **leaderp)
{
	struct task_struct *leader;
	struct pid *pid;
	int ret;

	if (nr <= 0)
		return -EINVAL;
	pid = find_get_pid(nr);
	if (!pid)
		return -ESRCH;
	/* Only a thread group's leader is attached to its tgid. */
	leader = get_pid_task(pid, PIDTYPE_TGID);
	if (!leader) {
		ret = -ESRCH;
		goto err_put_pid;
	}
	if (!pfprof_may_read(file, leader)) {
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
