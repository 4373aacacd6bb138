// SPDX-License-Identifier: GPL-2.0
/*
 * One perf event context a task, task->perf_event_ctxp (6.2 on), not one
 * per kind of PMU (perf_event_ctxp[perf_nr_task_contexts], up to 6.1).
 */
#include <linux/build_bug.h>
#include <linux/sched.h>

int pfprof_probe(struct task_struct *t);
int pfprof_probe(struct task_struct *t)
{
	BUILD_BUG_ON(sizeof(t->perf_event_ctxp) != sizeof(void *));
	return t != NULL;
}
