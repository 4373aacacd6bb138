// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: /dev/pfprof, the monitor's side.
 *
 * Every open is a session (pfprof.h, "Sessions"): its own area, sampler
 * and processes, released with the file.  mmap accepts exactly one shape:
 * offset 0 and the whole area.  The ioctls are the ABI handshake, mode
 * selection (which starts the ring), the strict consumer's wait for a
 * ready sample and its wake-up of a producer waiting for a free slot, and
 * what the session counts: ADD, FOLLOW and END.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include "compat.h"
#include "pfprof_internal.h"

static int pfprof_dev_open(struct inode *inode, struct file *file)
{
	struct pfprof_session *s;
	int ret;

	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return -ENOMEM;
	s->file = file;
	s->owner = file->f_cred->euid;
	pfprof_members_init(s);

	ret = pfprof_ring_init(&s->ring);
	if (ret)
		goto err_free;
	ret = pfprof_session_add(s);
	if (ret)
		goto err_free_ring;
	ret = pfprof_sampler_start(s);
	if (ret)
		goto err_remove;

	file->private_data = s;
	return stream_open(inode, file);

err_remove:
	pfprof_session_remove(s);
err_free_ring:
	pfprof_ring_exit(&s->ring);
err_free:
	kfree(s);
	return ret;
}

/* The last reference to the file is gone: so is every mapping of the area. */
static int pfprof_dev_release(struct inode *inode, struct file *file)
{
	struct pfprof_session *s = file->private_data;

	/* No registration joins any more, then nobody samples. */
	pfprof_session_remove(s);
	pfprof_sampler_stop(s);
	pfprof_members_free(s);
	pfprof_ring_exit(&s->ring);
	kfree(s);
	return 0;
}

static int pfprof_dev_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct pfprof_session *s = file->private_data;

	/* A private copy would not be shared with the sampler. */
	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff != 0 ||
	    vma->vm_end - vma->vm_start != s->ring.size)
		return -EINVAL;
	/*
	 * The monitor's children do not inherit the ring.
	 * remap_vmalloc_range() adds VM_DONTEXPAND and VM_DONTDUMP.
	 */
	vm_flags_set(vma, VM_DONTCOPY);
	return remap_vmalloc_range(vma, s->ring.area, 0);
}

static long pfprof_ioc_info(struct pfprof_session *s,
			    struct pfprof_info __user *uarg)
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
	info.area_size = s->ring.size;
	info.slot_count = s->ring.slot_count;
	info.sample_size = sizeof(struct pfprof_sample);
	info.period_ns = pfprof_period_ns();
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return theirs == PFPROF_ABI_VERSION ? 0 : -EPROTO;
}

static long pfprof_ioc_set_mode(struct pfprof_session *s, u32 __user *uarg)
{
	u32 mode;

	if (get_user(mode, uarg))
		return -EFAULT;
	if (mode != PFPROF_MODE_STRICT && mode != PFPROF_MODE_RELAXED)
		return -EINVAL;
	pfprof_ring_start(s, mode);
	return 0;
}

static long pfprof_ioc_wait_full(struct pfprof_session *s, u32 __user *uarg)
{
	u32 timeout_ms;

	if (get_user(timeout_ms, uarg))
		return -EFAULT;
	return pfprof_ring_wait_full(&s->ring,
				     timeout_ms ? msecs_to_jiffies(timeout_ms) :
						  MAX_SCHEDULE_TIMEOUT);
}

static long pfprof_ioc_add(struct file *file, struct pfprof_target __user *uarg)
{
	struct pfprof_session *s = file->private_data;
	struct pfprof_target target;
	struct task_struct *leader;
	struct pid *pid;
	long ret;

	if (copy_from_user(&target, uarg, sizeof(target)))
		return -EFAULT;
	if (target.flags & ~(PFPROF_TARGET_INHERIT | PFPROF_TARGET_WHOLE_LIFE) ||
	    target.reserved)
		return -EINVAL;
	ret = pfprof_lookup(file, target.pid, &pid, &leader);
	if (ret)
		return ret;
	ret = pfprof_members_join(s, leader, target.flags, NULL);
	put_task_struct(leader);
	put_pid(pid);
	return ret;
}

static long pfprof_ioc_follow(struct file *file,
			      struct pfprof_follow __user *uarg)
{
	struct pfprof_session *s = file->private_data;
	struct task_struct *root = NULL;
	struct pfprof_follow follow;
	struct pid *pid = NULL;
	long ret;

	if (copy_from_user(&follow, uarg, sizeof(follow)))
		return -EFAULT;
	if (follow.flags & ~PFPROF_TARGET_INHERIT || follow.reserved ||
	    follow.scope > PFPROF_FOLLOW_DESCENDANTS ||
	    (follow.scope == PFPROF_FOLLOW_DESCENDANTS) != (follow.pid != 0))
		return -EINVAL;
	if (READ_ONCE(s->ended) || READ_ONCE(s->ring.canceled))
		return -ESHUTDOWN;
	if (follow.pid) {
		ret = pfprof_lookup(file, follow.pid, &pid, &root);
		if (ret)
			return ret;
	}
	pfprof_session_follow(s, follow.scope, follow.flags, root);
	if (root) {
		put_task_struct(root);
		put_pid(pid);
	}
	return 0;
}

static long pfprof_dev_ioctl(struct file *file, unsigned int cmd,
			     unsigned long arg)
{
	struct pfprof_session *s = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PFPROF_IOC_INFO:
		return pfprof_ioc_info(s, uarg);
	case PFPROF_IOC_SET_MODE:
		return pfprof_ioc_set_mode(s, uarg);
	case PFPROF_IOC_WAIT_FULL:
		return pfprof_ioc_wait_full(s, uarg);
	case PFPROF_IOC_WAKE_PRODUCER:
		return pfprof_ring_wake_producer(s);
	case PFPROF_IOC_ADD:
		return pfprof_ioc_add(file, uarg);
	case PFPROF_IOC_FOLLOW:
		return pfprof_ioc_follow(file, uarg);
	case PFPROF_IOC_END:
		pfprof_members_end(s);
		return 0;
	default:
		return -ENOTTY;
	}
}

static __poll_t pfprof_dev_poll(struct file *file, poll_table *wait)
{
	struct pfprof_session *s = file->private_data;

	poll_wait(file, &s->ring.consumer_wq, wait);
	return pfprof_ring_poll_mask(&s->ring);
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
