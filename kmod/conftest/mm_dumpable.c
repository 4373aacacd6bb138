// SPDX-License-Identifier: GPL-2.0
/*
 * Dumpability and the exec-time user namespace in the mm_struct, as
 * __ptrace_may_access() read them up to 7.x: get_dumpable(mm), mm->user_ns,
 * under task_lock().
 */
#include <linux/mm_types.h>
#include <linux/sched/coredump.h>

int pfprof_probe(struct mm_struct *mm);
int pfprof_probe(struct mm_struct *mm)
{
	return get_dumpable(mm) == SUID_DUMP_USER && mm->user_ns;
}
