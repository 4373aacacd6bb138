// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: /dev/pfprof, the device: its file operations, whose every open is
 * a session (session.c), and the mapping of a session's area and faults
 * region, which accepts exactly two shapes: each whole, from its offset.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/vmalloc.h>

#include "compat.h"
#include "pfprof_internal.h"

/*
 * The area's page at @vmf's offset, mapped by its page frame: the mapping
 * is VM_PFNMAP, so its entries are special and no get_user_pages() (fast or
 * not: vmsplice(), O_DIRECT, process_vm_readv()) can pin a page of it to
 * outlive the session.  The mapping holds the file, so the area is there.
 */
static vm_fault_t pfprof_vm_fault(struct vm_fault *vmf)
{
	struct pfprof_session *s = vmf->vma->vm_file->private_data;
	u64 offset = (u64)vmf->pgoff << PAGE_SHIFT;
	/* Published before any mapping of it was allowed. */
	struct pfprof_faults_area *faults = smp_load_acquire(&s->faults.area);

	if (offset < s->ring.size)
		return vmf_insert_pfn(vmf->vma, vmf->address,
				      vmalloc_to_pfn((void *)s->ring.area + offset));
	offset -= s->ring.size;
	if (!faults || offset >= pfprof_faults_size())
		return VM_FAULT_SIGBUS;
	return vmf_insert_pfn(vmf->vma, vmf->address,
			      vmalloc_to_pfn((void *)faults + offset));
}

static const struct vm_operations_struct pfprof_vm_ops = {
	.fault = pfprof_vm_fault,
};

/*
 * Two shapes are mapped: the whole area, from offset 0, and, once
 * PFPROF_IOC_ATTRIBUTE made it, the whole faults region from the offset
 * INFO gives (right after the area), each shared (a
 * private copy would not be shared with the sampler; a read-only shared
 * mapping is fine).  The monitor's children never inherit it (DONTCOPY;
 * being IO, madvise(MADV_DOFORK) cannot undo that), it cannot grow
 * (DONTEXPAND) and stays out of core dumps.
 */
static bool pfprof_mmap_shape_ok(struct pfprof_session *s, bool may_share,
				 pgoff_t pgoff, unsigned long size)
{
	if (!may_share)
		return false;
	if (pgoff == 0)
		return size == s->ring.size;
	return smp_load_acquire(&s->faults.area) &&
	       pgoff == s->ring.size >> PAGE_SHIFT &&
	       size == pfprof_faults_size();
}

#ifdef PFPROF_HAVE_MMAP_PREPARE
static int pfprof_dev_mmap_prepare(struct vm_area_desc *desc)
{
	struct pfprof_session *s = desc->file->private_data;

	if (!pfprof_mmap_shape_ok(s, vma_desc_test(desc, VMA_MAYSHARE_BIT),
				  desc->pgoff, vma_desc_size(desc)))
		return -EINVAL;
	vma_desc_set_flags(desc, VMA_PFNMAP_BIT, VMA_IO_BIT, VMA_DONTCOPY_BIT,
			   VMA_DONTEXPAND_BIT, VMA_DONTDUMP_BIT);
	desc->vm_ops = &pfprof_vm_ops;
	return 0;
}
#else
static int pfprof_dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct pfprof_session *s = file->private_data;

	if (!pfprof_mmap_shape_ok(s, vma->vm_flags & VM_MAYSHARE, vma->vm_pgoff,
				  vma->vm_end - vma->vm_start))
		return -EINVAL;
	vm_flags_set(vma, VM_PFNMAP | VM_IO | VM_DONTCOPY | VM_DONTEXPAND |
			  VM_DONTDUMP);
	vma->vm_ops = &pfprof_vm_ops;
	return 0;
}
#endif

static const struct file_operations pfprof_dev_fops = {
	.owner		= THIS_MODULE,
	.open		= pfprof_session_open,
	.release	= pfprof_session_release,
#ifdef PFPROF_HAVE_MMAP_PREPARE
	.mmap_prepare	= pfprof_dev_mmap_prepare,
#else
	.mmap		= pfprof_dev_mmap,
#endif
	.unlocked_ioctl	= pfprof_session_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	/* No .llseek: stream_open() makes the device unseekable (-ESPIPE). */
	.poll		= pfprof_session_poll,
};

static struct miscdevice pfprof_miscdev = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "pfprof",
	.fops	= &pfprof_dev_fops,
};

int pfprof_chardev_init(void)
{
	return misc_register(&pfprof_miscdev);
}

void pfprof_chardev_exit(void)
{
	misc_deregister(&pfprof_miscdev);
}
