// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: /dev/pfprof, the monitor's side.
 *
 * One opener at a time.  mmap accepts exactly one shape: offset 0 and the
 * whole area.  The ioctls are the ABI handshake, mode selection (which
 * starts a session), the strict consumer's wait for a ready sample and its
 * wake-up of a producer waiting for a free slot.  Closing ends the session.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitops.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include "compat.h"
#include "pfprof_internal.h"

static unsigned long pfprof_dev_busy;

static int pfprof_dev_open(struct inode *inode, struct file *file)
{
	if (test_and_set_bit_lock(0, &pfprof_dev_busy))
		return -EBUSY;
	return stream_open(inode, file);
}

static int pfprof_dev_release(struct inode *inode, struct file *file)
{
	pfprof_ring_stop();
	clear_bit_unlock(0, &pfprof_dev_busy);
	return 0;
}

static int pfprof_dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	/* A private copy would not be shared with the sampler. */
	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff != 0 ||
	    vma->vm_end - vma->vm_start != pfprof_ring_size())
		return -EINVAL;
	/*
	 * The monitor's children do not inherit the ring: when the monitor
	 * exits, the session ends.  remap_vmalloc_range() adds VM_DONTEXPAND
	 * and VM_DONTDUMP.
	 */
	vm_flags_set(vma, VM_DONTCOPY);
	return remap_vmalloc_range(vma, pfprof_ring_area(), 0);
}

static long pfprof_ioc_info(struct pfprof_info __user *uarg)
{
	struct pfprof_info info;
	u32 theirs;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	if (info.flags || info.reserved0 || info.reserved[0] ||
	    info.reserved[1] || info.reserved[2])
		return -EINVAL;

	theirs = info.abi_version;
	info.abi_version = PFPROF_ABI_VERSION;
	info.area_size = pfprof_ring_size();
	info.slot_count = pfprof_ring_slot_count();
	info.sample_size = sizeof(struct pfprof_sample);
	info.period_ns = pfprof_period_ns();
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return theirs == PFPROF_ABI_VERSION ? 0 : -EPROTO;
}

static long pfprof_ioc_set_mode(u32 __user *uarg)
{
	u32 mode;

	if (get_user(mode, uarg))
		return -EFAULT;
	if (mode != PFPROF_MODE_STRICT && mode != PFPROF_MODE_RELAXED)
		return -EINVAL;
	pfprof_ring_start(mode);
	return 0;
}

static long pfprof_ioc_wait_full(u32 __user *uarg)
{
	u32 timeout_ms;

	if (get_user(timeout_ms, uarg))
		return -EFAULT;
	return pfprof_ring_wait_full(timeout_ms ? msecs_to_jiffies(timeout_ms) :
					     MAX_SCHEDULE_TIMEOUT);
}

static long pfprof_dev_ioctl(struct file *file, unsigned int cmd,
			     unsigned long arg)
{
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PFPROF_IOC_INFO:
		return pfprof_ioc_info(uarg);
	case PFPROF_IOC_SET_MODE:
		return pfprof_ioc_set_mode(uarg);
	case PFPROF_IOC_WAIT_FULL:
		return pfprof_ioc_wait_full(uarg);
	case PFPROF_IOC_WAKE_PRODUCER:
		return pfprof_ring_wake_producer();
	default:
		return -ENOTTY;
	}
}

static __poll_t pfprof_dev_poll(struct file *file, poll_table *wait)
{
	poll_wait(file, pfprof_ring_consumer_wq(), wait);
	return pfprof_ring_poll_mask();
}

static const struct file_operations pfprof_dev_fops = {
	.owner		= THIS_MODULE,
	.open		= pfprof_dev_open,
	.release	= pfprof_dev_release,
	.mmap		= pfprof_dev_mmap,
	.unlocked_ioctl	= pfprof_dev_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	/* No .llseek: stream_open() makes the device unseekable (-ESPIPE). */
	.poll		= pfprof_dev_poll,
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
