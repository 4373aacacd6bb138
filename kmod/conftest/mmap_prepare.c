// SPDX-License-Identifier: GPL-2.0
/*
 * ->mmap_prepare(), the file operation that replaces ->mmap (from 6.17),
 * with the descriptor's VMA flags as a bitmap and its vm_ops.
 */
#include <linux/fs.h>
#include <linux/mm.h>

static const struct vm_operations_struct pfprof_probe_vm_ops;

static int pfprof_probe_mmap_prepare(struct vm_area_desc *desc)
{
	if (!vma_desc_test(desc, VMA_MAYSHARE_BIT) || vma_desc_size(desc) == 0)
		return -EINVAL;
	vma_desc_set_flags(desc, VMA_PFNMAP_BIT, VMA_IO_BIT, VMA_DONTCOPY_BIT,
			   VMA_DONTEXPAND_BIT, VMA_DONTDUMP_BIT);
	desc->vm_ops = &pfprof_probe_vm_ops;
	return 0;
}

const struct file_operations pfprof_probe_fops = {
	.mmap_prepare = pfprof_probe_mmap_prepare,
};
