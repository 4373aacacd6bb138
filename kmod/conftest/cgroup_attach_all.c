// SPDX-License-Identifier: GPL-2.0
/*
 * Moving a kthread into every cgroup of the task it works for, as vhost
 * does with its workers: its CPU time is then that task's cgroups'.
 */
#include <linux/cgroup.h>

int pfprof_probe(struct task_struct *from, struct task_struct *tsk);
int pfprof_probe(struct task_struct *from, struct task_struct *tsk)
{
	return cgroup_attach_task_all(from, tsk);
}
