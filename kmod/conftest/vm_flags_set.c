// SPDX-License-Identifier: GPL-2.0
/*
 * vm_flags_set(): 6.3 made vma->vm_flags read-only and added the setters
 * (commit bc292ab00f6c, "mm: introduce vma->vm_flags wrapper functions").
 */
#include <linux/mm.h>

void pfprof_probe(struct vm_area_struct *vma);
void pfprof_probe(struct vm_area_struct *vma)
{
	vm_flags_set(vma, VM_DONTCOPY);
}
