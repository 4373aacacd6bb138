// SPDX-License-Identifier: GPL-2.0
/*
 * 7.x: dumpability and the exec-time user namespace moved from the mm to a
 * per-task struct task_exec_state (include/linux/sched/exec_state.h),
 * task->exec_state, replaced at exec and freed after an RCU grace period;
 * its accessors are not exported to modules.
 */
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/exec_state.h>

int pfprof_probe(struct task_struct *task);
int pfprof_probe(struct task_struct *task)
{
	const struct task_exec_state *es;
	int owner;

	rcu_read_lock();
	es = rcu_dereference(task->exec_state);
	owner = es->dumpable == TASK_DUMPABLE_OWNER && es->user_ns;
	rcu_read_unlock();
	return owner;
}
