// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: who may profile which process.
 *
 * The rule is ptrace's read check with filesystem credentials, the one
 * /proc applies to a process's files.  ptrace_may_access() is not exported
 * to modules (not on 6.1, 6.12 or 7.x), so this is its credential and
 * dumpability part, modelled on __ptrace_may_access(); security modules are
 * not consulted.  Where the kernel keeps dumpability (the mm before 7.x, a
 * per-task exec state since) is compat.h's to know.  Every check is made for two credentials: the caller's and
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
#include <linux/user_namespace.h>

#include "compat.h"
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

/* Who must pass, besides whoever opened the file the request came through. */
enum pfprof_asker {
	PFPROF_OPENER_ONLY,	/* a session's, for a process somebody else registered */
	PFPROF_CALLER,		/* the caller too: a request it makes */
	PFPROF_READER,		/* the caller too, without using its privilege */
};

/*
 * The caller's CAP_SYS_PTRACE in @ns; a reader's is not audited and does
 * not mark it as having used privilege (as ptrace's PTRACE_MODE_NOAUDIT).
 */
static bool pfprof_caller_capable(struct user_namespace *ns,
				  enum pfprof_asker asker)
{
	return asker == PFPROF_READER ? ns_capable_noaudit(ns, CAP_SYS_PTRACE) :
					ns_capable(ns, CAP_SYS_PTRACE);
}

static bool pfprof_check(const struct file *file, struct task_struct *task,
			 enum pfprof_asker asker)
{
	const struct cred *tcred;
	struct user_namespace *ns;
	bool ok;

	rcu_read_lock();
	tcred = __task_cred(task);
	ok = (asker == PFPROF_OPENER_ONLY ||
	      pfprof_ids_match(current_cred(), tcred) ||
	      pfprof_caller_capable(tcred->user_ns, asker)) &&
	     (pfprof_ids_match(file->f_cred, tcred) ||
	      file_ns_capable(file, tcred->user_ns, CAP_SYS_PTRACE));
	rcu_read_unlock();
	if (!ok)
		return false;

	/* Not dumpable after its last exec: CAP_SYS_PTRACE where it exec'd. */
	ns = pfprof_undumpable_ns(task);
	if (ns) {
		ok = (asker == PFPROF_OPENER_ONLY ||
		      pfprof_caller_capable(ns, asker)) &&
		     file_ns_capable(file, ns, CAP_SYS_PTRACE);
		put_user_ns(ns);
	}
	return ok;
}

/* Whoever opened @file may read @task. */
bool pfprof_opener_may_read(const struct file *file, struct task_struct *task)
{
	return pfprof_check(file, task, PFPROF_OPENER_ONLY);
}

/* Both the caller and whoever opened @file may read @task. */
bool pfprof_may_read(const struct file *file, struct task_struct *task)
{
	return pfprof_check(file, task, PFPROF_CALLER);
}

/* As pfprof_may_read(), for a listing: the caller's privilege is not used. */
bool pfprof_may_list(const struct file *file, struct task_struct *task)
{
	return pfprof_check(file, task, PFPROF_READER);
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
