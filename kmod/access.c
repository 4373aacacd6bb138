// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: who may profile which process.
 *
 * The rule is ptrace's read check with filesystem credentials, the one
 * /proc applies to a process's files.  ptrace_may_access() is not exported
 * to modules (not on 6.1, 6.12 or 7.x), so this is its credential and
 * dumpability part, modelled on __ptrace_may_access(); security modules are
 * not consulted.  Where the kernel keeps dumpability (the mm before 7.x, a
 * per-task exec state since) is compat.h's to know.  Every check is made
 * for two credentials: the caller's and those of whoever opened the file
 * the request came through, so that a privileged process writing to a
 * descriptor an unprivileged one handed it (as its stdout, say) lends it no
 * authority; and what is counted for a request made through a session's
 * file stays counted only while both may read it.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/pid.h>
#include <linux/rcupdate.h>
#include <linux/rwsem.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
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

/* How a credential's CAP_SYS_PTRACE is asked. */
enum pfprof_use {
	PFPROF_USE,		/* the caller's, used: audited, noted (ns_capable()) */
	PFPROF_LOOK,		/* the caller's, looked at only (a listing) */
	PFPROF_OPENER,		/* a file's opener's (file_ns_capable()) */
	PFPROF_OPENER_AGAIN,	/* the same, asked again every period: unaudited */
	PFPROF_ASKER,		/* one who asked before, asked again every period */
};

/*
 * @cred's CAP_SYS_PTRACE in @ns as the capability module decides it
 * (cap_capable(): its effective set in its own namespace, or it owns an
 * ancestor of @ns).  security_capable() is not exported to modules, so
 * security modules are not consulted here: for the credentials of whoever
 * asked through a session's file, and the session's opener's where its
 * file is not at hand; the opener's file is asked at every look.
 */
static bool pfprof_cred_capable(const struct cred *cred,
				struct user_namespace *ns)
{
	for (;;) {
		if (ns == cred->user_ns)
			return cap_raised(cred->cap_effective, CAP_SYS_PTRACE);
		if (ns->level <= cred->user_ns->level)
			return false;
		if (ns->parent == cred->user_ns && uid_eq(ns->owner, cred->euid))
			return true;
		ns = ns->parent;
	}
}

/*
 * file_ns_capable() without its audit record: asked at every period's look,
 * an opener that holds the capability but whom a security module denies it
 * would be logged at every look (per process, 20 times a second).  No
 * exported call asks for another credential unaudited (security_capable()
 * is not exported), so the sampler asks as the opener, for a moment:
 * ns_capable_noaudit() asks the current credentials, and f_cred is held by
 * the file, so overriding with it neither takes nor drops the last
 * reference on any kernel.  The capability was the opener's, not used by
 * whoever runs this (an ioctl's caller, on a join's walk): the task's
 * "used superuser privileges" flag stays as it was.
 */
static bool pfprof_opener_capable_noaudit(const struct file *file,
					  struct user_namespace *ns)
{
	unsigned int superpriv = current->flags & PF_SUPERPRIV;
	const struct cred *saved = override_creds(file->f_cred);
	bool ok = ns_capable_noaudit(ns, CAP_SYS_PTRACE);

	revert_creds(saved);
	current->flags = (current->flags & ~PF_SUPERPRIV) | superpriv;
	return ok;
}

static bool pfprof_capable(const struct file *file, const struct cred *cred,
			   struct user_namespace *ns, enum pfprof_use use)
{
	switch (use) {
	case PFPROF_USE:
		return ns_capable(ns, CAP_SYS_PTRACE);
	case PFPROF_LOOK:
		return ns_capable_noaudit(ns, CAP_SYS_PTRACE);
	case PFPROF_OPENER:
		return file_ns_capable(file, ns, CAP_SYS_PTRACE);
	case PFPROF_OPENER_AGAIN:
		return pfprof_opener_capable_noaudit(file, ns);
	default:
		return pfprof_cred_capable(cred, ns);
	}
}

/*
 * @cred may read @task: the same ids, or CAP_SYS_PTRACE over it; and where
 * its last exec left it not dumpable, CAP_SYS_PTRACE there.  @use says how
 * the capability is asked (@file: the opener's, for PFPROF_OPENER).
 */
static bool pfprof_cred_may_read(const struct file *file,
				 const struct cred *cred,
				 struct task_struct *task, enum pfprof_use use)
{
	const struct cred *tcred;
	struct user_namespace *ns;
	bool ok;

	rcu_read_lock();
	tcred = __task_cred(task);
	ok = pfprof_ids_match(cred, tcred) ||
	     pfprof_capable(file, cred, tcred->user_ns, use);
	rcu_read_unlock();
	if (!ok)
		return false;

	/* An exec's credentials before its dumpability (commit_creds()'s smp_wmb()). */
	smp_rmb();
	ns = pfprof_undumpable_ns(task);
	if (ns) {
		ok = pfprof_capable(file, cred, ns, use);
		put_user_ns(ns);
	}
	return ok;
}

/*
 * @cred could read @task by its ids, or has CAP_SYS_PTRACE over it, its
 * exec state left aside (each look judges that): whether a session keeps
 * track of a process at all, so that none pins another user's processes
 * it may not read.  Atomic, audits nothing, consults no security module
 * (as PFPROF_ASKER).  Under RCU.
 */
bool pfprof_may_keep(const struct cred *cred, struct task_struct *task)
{
	const struct cred *tcred = __task_cred(task);

	return pfprof_ids_match(cred, tcred) ||
	       pfprof_cred_capable(cred, tcred->user_ns);
}

/*
 * @cred could read @task by its real ids (so it is no other user's) but
 * may not read it now: an exec (@hidden_ns: where it left it not dumpable,
 * or NULL) hid it.  For exec.c's probe: atomic, audits nothing, consults
 * no security module (as PFPROF_ASKER).  Under RCU.
 */
bool pfprof_hidden_from(const struct cred *cred, struct task_struct *task,
			struct user_namespace *hidden_ns)
{
	const struct cred *tcred = __task_cred(task);

	if (!uid_eq(cred->fsuid, tcred->uid) || !gid_eq(cred->fsgid, tcred->gid))
		return false;
	if (!pfprof_ids_match(cred, tcred) &&
	    !pfprof_cred_capable(cred, tcred->user_ns))
		return true;
	return hidden_ns && !pfprof_cred_capable(cred, hidden_ns);
}

/*
 * @cred may read the current task now, asked from its perf overflow
 * handler (under RCU, preemption off: nothing may sleep or lock): as
 * PFPROF_ASKER asks, no security module consulted.  Its credentials first,
 * then its dumpability, as an exec changes them (commit_creds()'s
 * smp_wmb()).
 */
bool pfprof_may_read_current(const struct cred *cred)
{
	const struct cred *tcred = __task_cred(current);
	struct user_namespace *ns;

	if (!pfprof_ids_match(cred, tcred) &&
	    !pfprof_cred_capable(cred, tcred->user_ns))
		return false;
	smp_rmb();
	ns = pfprof_current_undumpable_ns();
	return !ns || pfprof_cred_capable(cred, ns);
}

/* Whoever opened @file may read @task. */
static bool pfprof_opener_may_read(const struct file *file,
				   struct task_struct *task)
{
	return pfprof_cred_may_read(file, file->f_cred, task, PFPROF_OPENER);
}

/*
 * Whoever opened @file and @asker (who asked, through the file, for what
 * counts @task: see struct pfprof_member) may still read @task, asked
 * again at a period's look, so audited for neither: not while an
 * exec of @task's process is replacing its credentials and dumpability
 * (under exec_update_lock, which /proc waits for: in between, the two may
 * read as neither the old program's nor the new one's), held for reading
 * through the check so that none starts under it.  Under RCU or not.
 */
enum pfprof_access pfprof_recheck(const struct file *file,
				  const struct cred *asker,
				  struct task_struct *task)
{
	struct rw_semaphore *exec_lock = &task->signal->exec_update_lock;
	bool ok;

	if (!down_read_trylock(exec_lock))
		return PFPROF_EXECING;
	ok = pfprof_cred_may_read(file, file->f_cred, task,
				  PFPROF_OPENER_AGAIN) &&
	     pfprof_cred_may_read(file, asker, task, PFPROF_ASKER);
	up_read(exec_lock);
	return ok ? PFPROF_READABLE : PFPROF_UNREADABLE;
}

/*
 * @opener (a session's opener's) and @asker may read @task, asked without
 * the opener's file (an offer may outlive its open): as PFPROF_ASKER asks,
 * no security module consulted; the session's next look asks with them.
 */
bool pfprof_creds_may_read(const struct cred *opener, const struct cred *asker,
			   struct task_struct *task)
{
	return pfprof_cred_may_read(NULL, opener, task, PFPROF_ASKER) &&
	       pfprof_cred_may_read(NULL, asker, task, PFPROF_ASKER);
}

/*
 * Whoever opened @file, and the caller, may have its processes' faults
 * attributed: the module parameter attribution says who (perf events, which
 * Debian's perf_event_paranoid=3 keeps for CAP_PERFMON), asked at the
 * request of both, as ADD asks both to read a process: a privileged
 * opener's descriptor handed to another user gives it no perf events.
 */
bool pfprof_may_attribute(const struct file *file)
{
	switch (pfprof_attribution) {
	case PFPROF_ATTRIBUTION_EVERY_OPENER:
		return true;
	case PFPROF_ATTRIBUTION_PERFMON:
		return (file_ns_capable(file, &init_user_ns, CAP_PERFMON) ||
			file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN)) &&
		       perfmon_capable();
	default:
		return false;
	}
}

/* Both the caller and whoever opened @file may read @task. */
bool pfprof_may_read(const struct file *file, struct task_struct *task)
{
	return pfprof_cred_may_read(file, current_cred(), task, PFPROF_USE) &&
	       pfprof_opener_may_read(file, task);
}

/* As pfprof_may_read(), for a listing: the caller's privilege is not used. */
bool pfprof_may_list(const struct file *file, struct task_struct *task)
{
	return pfprof_cred_may_read(file, current_cred(), task, PFPROF_LOOK) &&
	       pfprof_opener_may_read(file, task);
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
	bool readable;
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
	/*
	 * Not while an exec replaces its credentials and dumpability, as /proc
	 * waits (mm_access()): in between, 7.x's exec state may read as not
	 * dumpable, and a process just spawned, whose parent learnt of its exec
	 * when its close-on-exec files closed, would be refused.
	 */
	ret = down_read_killable(&leader->signal->exec_update_lock);
	if (ret)
		goto err_put_task;
	readable = pfprof_may_read(file, leader);
	up_read(&leader->signal->exec_update_lock);
	if (!readable) {
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
