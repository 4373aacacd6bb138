// SPDX-License-Identifier: GPL-2.0
/*
 * Charging a kthread's allocations to another task's memory cgroup, as
 * kthreads that work for a user do: the memcg of its mm, made the active
 * one around the work (set_active_memcg(), since 5.10).
 */
#include <linux/memcontrol.h>
#include <linux/sched/mm.h>

int pfprof_probe(struct mm_struct *mm);
int pfprof_probe(struct mm_struct *mm)
{
	struct mem_cgroup *memcg = get_mem_cgroup_from_mm(mm);
	struct mem_cgroup *old = set_active_memcg(memcg);

	set_active_memcg(old);
	mem_cgroup_put(memcg);
	return 0;
}
