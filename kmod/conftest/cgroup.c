// SPDX-License-Identifier: GPL-2.0
/*
 * Control groups: a cgroup2 directory's fd to its cgroup, a task's cgroup of
 * the default hierarchy and the descendant test (a kernel without
 * CONFIG_CGROUPS has none of them).
 */
#include <linux/cgroup.h>
#include <linux/err.h>

bool pfprof_probe(int fd, struct task_struct *task);
bool pfprof_probe(int fd, struct task_struct *task)
{
	struct cgroup *cgrp = cgroup_get_from_fd(fd);
	bool in;

	if (IS_ERR(cgrp))
		return false;
	in = cgroup_is_descendant(task_dfl_cgroup(task), cgrp) &&
	     (READ_ONCE(cgrp->self.flags) & CSS_ONLINE);
	cgroup_put(cgrp);
	return in;
}
