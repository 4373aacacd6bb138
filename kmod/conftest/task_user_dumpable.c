// SPDX-License-Identifier: GPL-2.0
/*
 * A task's dumpability saved as its mm goes (exit_mm()), which
 * __ptrace_may_access() judges an mm-less task by where the kernel has it
 * (Debian's 6.1 and 6.12 since their stable updates: task_still_dumpable()).
 */
#include <linux/sched.h>

int pfprof_probe(struct task_struct *task);
int pfprof_probe(struct task_struct *task)
{
	return task->user_dumpable;
}
