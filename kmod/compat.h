/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pfprof: the kernel API differences between the kernels pfprof builds on
 * (Debian's 6.1 and 6.12 and everything between), in one place.  Each is
 * keyed on the version that changed the API.
 */
#ifndef _PFPROF_COMPAT_H
#define _PFPROF_COMPAT_H

#include <linux/mm.h>
#include <linux/version.h>

/*
 * 6.3 made vma->vm_flags read-only (commit bc292ab00f6c, "mm: introduce
 * vma->vm_flags wrapper functions"); the setters take the mmap lock into
 * account.  Before that the field is written directly.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

#endif /* _PFPROF_COMPAT_H */
