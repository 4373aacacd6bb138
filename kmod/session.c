// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: sessions.  Every open of /dev/pfprof is one (pfprof.h,
 * "Sessions"): its own area and ring (ring.c), processes (members.c) and
 * sampler (sampler.c), released with the file; this file is the one that
 * drives the three.  Here are open and release, the ioctl handlers (the
 * ABI handshake, the mode that starts the ring, the strict consumer's
 * waits, what the session counts: ADD, FOLLOW, END and ADD_CGROUP), and the
 * list of sessions, which max_sessions bounds per user and through which
 * /proc registrations reach the sessions that follow them.
 *
 * The list's lock guards bounded work only: the sessions concerned by a
 * registration are noted under it, each referenced, and offered it after
 * it is dropped.  A registration and a FOLLOW never miss each other: FOLLOW
 * sets what the session follows before it reads the registry, and a
 * registration is in the registry before the list is read.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cred.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/rculist.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "compat.h"
#include "pfprof_internal.h"

static DEFINE_MUTEX(pfprof_sessions_lock);
static LIST_HEAD(pfprof_sessions);

/* The sessions a user opened: max_sessions bounds them. */
static unsigned int pfprof_sessions_of(kuid_t owner)
{
	struct pfprof_session *s;
	unsigned int n = 0;

	list_for_each_entry(s, &pfprof_sessions, node)
		n += uid_eq(s->owner, owner);
	return n;
}

/* -EMFILE when @owner has max_sessions open already. */
static int pfprof_sessions_room(kuid_t owner)
{
	int ret = 0;

	mutex_lock(&pfprof_sessions_lock);
	if (pfprof_sessions_of(owner) >= pfprof_max_sessions)
		ret = -EMFILE;
	mutex_unlock(&pfprof_sessions_lock);
	return ret;
}

static int pfprof_session_add(struct pfprof_session *s)
{
	int ret = 0;

	mutex_lock(&pfprof_sessions_lock);
	if (pfprof_sessions_of(s->owner) >= pfprof_max_sessions)
		ret = -EMFILE;
	else
		list_add_tail_rcu(&s->node, &pfprof_sessions);
	mutex_unlock(&pfprof_sessions_lock);
	return ret;
}

/* Follows nothing any more.  Under pfprof_sessions_lock. */
static void pfprof_session_unfollow(struct pfprof_session *s)
{
	put_pid(s->follow_root);
	s->follow_root = NULL;
	if (s->follow_cred)
		put_cred(s->follow_cred);
	s->follow_cred = NULL;
	s->follow = PFPROF_FOLLOW_NONE;
}

/* No registration reaches @s once this returns (one noted before finds it closed). */
static void pfprof_session_remove(struct pfprof_session *s)
{
	mutex_lock(&pfprof_sessions_lock);
	list_del_rcu(&s->node);
	pfprof_session_unfollow(s);
	mutex_unlock(&pfprof_sessions_lock);
}

static void pfprof_session_kfree(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct pfprof_session, rcu));
}

static void pfprof_session_free(struct kref *ref)
{
	struct pfprof_session *s = container_of(ref, struct pfprof_session, ref);

	pfprof_ring_exit(&s->ring);
	pfprof_faults_exit(s);
	put_cred(s->opener_cred);
	pfprof_memcg_put(s->memcg);
	put_pid_ns(s->pid_ns);
	/* An exec's probe may still be looking at it (exec.c). */
	call_rcu_hurry(&s->rcu, pfprof_session_kfree);
}

/* The last of the file's and the offers' references frees the session. */
static void pfprof_session_put(struct pfprof_session *s)
{
	kref_put(&s->ref, pfprof_session_free);
}

int pfprof_session_open(struct inode *inode, struct file *file)
{
	struct pfprof_session *s;
	int ret;

	/* Charged to the opener's memory cgroup, as its area is. */
	s = kzalloc(sizeof(*s), GFP_KERNEL_ACCOUNT);
	if (!s)
		return -ENOMEM;
	kref_init(&s->ref);
	s->file = file;
	s->opener_cred = get_cred(file->f_cred);
	s->owner = file->f_cred->euid;
	s->pid_ns = get_pid_ns(task_active_pid_ns(current));
	s->memcg = pfprof_memcg_get();
	pfprof_faults_init(s);
	ret = pfprof_members_init(s);
	if (ret)
		goto err_free_creds;

	/* Over the limit: no area allocated in vain (session_add decides). */
	ret = pfprof_sessions_room(s->owner);
	if (ret)
		goto err_free;
	ret = pfprof_ring_init(&s->ring);
	if (ret)
		goto err_free;
	/* Complete before it is published: nobody else holds it until then. */
	ret = pfprof_sampler_start(s);
	if (ret)
		goto err_free_ring;
	ret = pfprof_session_add(s);
	if (ret)
		goto err_stop;

	file->private_data = s;
	return stream_open(inode, file);

err_stop:
	pfprof_sampler_stop(s);
err_free_ring:
	pfprof_ring_exit(&s->ring);
err_free:
	pfprof_members_free(s);
err_free_creds:
	put_cred(s->opener_cred);
	pfprof_memcg_put(s->memcg);
	put_pid_ns(s->pid_ns);
	kfree(s);
	return ret;
}

/*
 * The last reference to the file is gone: so is every mapping of the area.
 * An offer of a registration may still hold the session: it finds it
 * closed.
 */
int pfprof_session_release(struct inode *inode, struct file *file)
{
	struct pfprof_session *s = file->private_data;

	/* No registration joins any more, then nobody samples. */
	pfprof_session_remove(s);
	pfprof_sampler_stop(s);
	pfprof_faults_release(s);
	pfprof_members_free(s);
	pfprof_session_put(s);
	return 0;
}

/* A session a registration concerns, and how it follows it, referenced. */
struct pfprof_follower {
	struct pfprof_session *session;
	u32 scope;			/* PFPROF_FOLLOW_* */
	u32 flags;			/* PFPROF_TARGET_* of the joining */
	struct pid *root;		/* DESCENDANTS: the tgid */
	const struct cred *asker;	/* FOLLOW's caller's */
};

/*
 * @s follows registrations, the process @pid, registered by @registrant,
 * is in the scope it follows (another user's registration only where the
 * session asked for them: PFPROF_FOLLOW_OTHER_USERS) and its opener can
 * name it: what is decided under the list's lock, bounded.
 */
static bool pfprof_may_follow(struct pfprof_session *s, struct pid *pid,
			      kuid_t registrant)
{
	lockdep_assert_held(&pfprof_sessions_lock);
	return s->follow != PFPROF_FOLLOW_NONE && pid_nr_ns(pid, s->pid_ns) &&
	       (uid_eq(registrant, s->owner) ||
		(s->follow_flags & PFPROF_FOLLOW_OTHER_USERS));
}

/*
 * The rest, with no lock held (a process's ancestry may be long): @pid is
 * in @f's scope, and both the session's opener and FOLLOW's caller may read
 * it (its current leader: a thread that exec'd became it, with the exec's
 * credentials; the session's next look asks again, security modules too).
 */
static bool pfprof_follows(const struct pfprof_follower *f, struct pid *pid)
{
	struct task_struct *leader, *root;
	bool follows = f->scope == PFPROF_FOLLOW_ALL;

	leader = get_pid_task(pid, PIDTYPE_TGID);
	if (!leader)
		return false;
	if (!follows) {
		root = get_pid_task(f->root, PIDTYPE_TGID);
		if (root) {
			follows = leader->signal == root->signal ||
				  pfprof_descends_from(leader, root);
			put_task_struct(root);
		}
	}
	follows = follows &&
		  pfprof_creds_may_read(f->session->opener_cred, f->asker, leader);
	put_task_struct(leader);
	return follows;
}

/*
 * The sessions that follow the process @pid registered by @registrant
 * (when @pid is NULL, every session a registration joined: no scope, flags
 * nor asker then), referenced, in an array the caller frees with
 * pfprof_followers_put() (NULL when there are none; an ERR_PTR without
 * memory for it).
 */
static struct pfprof_follower *pfprof_followers(struct pid *pid,
						kuid_t registrant,
						unsigned int *nr)
{
	struct pfprof_follower *found = NULL;
	struct pfprof_session *s;
	unsigned int n = 0;

	*nr = 0;
	mutex_lock(&pfprof_sessions_lock);
	list_for_each_entry(s, &pfprof_sessions, node)
		n++;
	if (n) {
		found = kmalloc_array(n, sizeof(*found), GFP_KERNEL);
		if (!found) {
			mutex_unlock(&pfprof_sessions_lock);
			return ERR_PTR(-ENOMEM);
		}
	}
	if (found) {
		list_for_each_entry(s, &pfprof_sessions, node) {
			/* A recall concerns only sessions registrations joined. */
			if (pid ? !pfprof_may_follow(s, pid, registrant) :
				  !READ_ONCE(s->nr_registered))
				continue;
			kref_get(&s->ref);
			found[*nr] = (struct pfprof_follower){ .session = s };
			if (pid) {
				found[*nr].scope = s->follow;
				found[*nr].flags = s->follow_flags &
						   PFPROF_TARGET_INHERIT;
				found[*nr].root = get_pid(s->follow_root);
				found[*nr].asker = get_cred(s->follow_cred);
			}
			(*nr)++;
		}
	}
	mutex_unlock(&pfprof_sessions_lock);
	return found;
}

static void pfprof_followers_put(struct pfprof_follower *followers,
				 unsigned int nr)
{
	unsigned int i;

	for (i = 0; i < nr; i++) {
		if (followers[i].asker)
			put_cred(followers[i].asker);
		put_pid(followers[i].root);
		pfprof_session_put(followers[i].session);
	}
	kfree(followers);
}

/*
 * @s is offered the process @pid registered by @registrant, and its
 * sampler told if idle.
 */
static void pfprof_session_offer(struct pfprof_session *s, struct pid *pid,
				 u32 flags, const struct cred *asker,
				 kuid_t registrant,
				 const struct pfprof_counters *base)
{
	if (pfprof_members_offer(s, pid, flags, asker,
				 uid_eq(registrant, s->owner), base))
		pfprof_sampler_kick(s);
}

/* A registration: every session that follows @pid is offered it. */
void pfprof_sessions_offer(struct pid *pid, kuid_t registrant,
			   const struct pfprof_counters *base)
{
	struct pfprof_follower *followers;
	unsigned int nr, i;

	followers = pfprof_followers(pid, registrant, &nr);
	/* No memory: none hears of it, as when a session could not take it. */
	if (IS_ERR(followers))
		return;
	for (i = 0; i < nr; i++) {
		if (pfprof_follows(&followers[i], pid))
			pfprof_session_offer(followers[i].session, pid,
					     followers[i].flags,
					     followers[i].asker, registrant,
					     base);
	}
	pfprof_followers_put(followers, nr);
}

/*
 * A fork or an exec (lineage.c, exec.c): every session is told, by @fn,
 * which finds whether its trees hold the process.  Under RCU, from the
 * tracepoints: the session list is walked without its lock, which such a
 * probe cannot take.
 */
void pfprof_sessions_each(void (*fn)(struct pfprof_session *s, void *arg),
			  void *arg)
{
	struct pfprof_session *s;

	rcu_read_lock();
	list_for_each_entry_rcu(s, &pfprof_sessions, node)
		fn(s, arg);
	rcu_read_unlock();
}

/* An unregistration: whichever sessions @pid joined that way, whatever they follow now. */
void pfprof_sessions_recall(struct pid *pid)
{
	struct pfprof_follower *followers;
	struct pfprof_session *s;
	unsigned int nr, i;

	followers = pfprof_followers(NULL, GLOBAL_ROOT_UID, &nr);
	if (IS_ERR(followers)) {
		/*
		 * No memory for the list: the registry forgot the process
		 * already, so its recall must not be lost.  Under the list's
		 * lock then (it comes before a session's members_lock).
		 */
		mutex_lock(&pfprof_sessions_lock);
		list_for_each_entry(s, &pfprof_sessions, node) {
			if (READ_ONCE(s->nr_registered) &&
			    pfprof_members_recall(s, pid))
				pfprof_sampler_kick(s);
		}
		mutex_unlock(&pfprof_sessions_lock);
		return;
	}
	for (i = 0; i < nr; i++) {
		if (pfprof_members_recall(followers[i].session, pid))
			pfprof_sampler_kick(followers[i].session);
	}
	pfprof_followers_put(followers, nr);
}

static long pfprof_ioc_info(struct pfprof_session *s,
			    struct pfprof_info __user *uarg)
{
	struct pfprof_info info;
	u32 theirs;

	if (copy_from_user(&info, uarg, sizeof(info)))
		return -EFAULT;
	if (info.flags || info.reserved0 || info.faults_offset ||
	    info.faults_size || info.reserved)
		return -EINVAL;

	theirs = info.abi_version;
	info.abi_version = PFPROF_ABI_VERSION;
	info.area_size = s->ring.size;
	info.slot_count = s->ring.slot_count;
	info.sample_size = sizeof(struct pfprof_sample);
	info.period_ns = pfprof_period_ns();
	/* Right after the area: chardev.c tells the two apart by offset. */
	info.faults_offset = s->ring.size;
	info.faults_size = pfprof_faults_size();
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
	/* Ended before it counted anything: there is nothing to wait for. */
	pfprof_ring_start(&s->ring, mode,
			  READ_ONCE(s->ended) && !READ_ONCE(s->counted_any));
	/* Attributing: the members carry events from the start. */
	pfprof_faults_sync(s, false);
	/* The sampler waits for the start. */
	pfprof_sampler_kick(s);
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

static long pfprof_ioc_wake_producer(struct pfprof_session *s)
{
	int ret = pfprof_ring_wake_producer(&s->ring);

	/* Only an armed retry wakes the sampler, and only once. */
	if (ret > 0)
		pfprof_sampler_kick(s);
	return min(ret, 0);
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
	put_task_struct(leader);
	ret = pfprof_members_join(s, pid, target.flags);
	put_pid(pid);
	/* Its faults are recorded from now, not from the next period. */
	if (ret >= 0)
		pfprof_faults_sync(s, false);
	/* The first process: an idle sampler starts its deadlines. */
	if (ret > 0)
		pfprof_sampler_kick(s);
	return min_t(long, ret, 0);
}

static long pfprof_ioc_attribute(struct file *file,
				 struct pfprof_attribution __user *uarg)
{
	struct pfprof_session *s = file->private_data;
	struct pfprof_attribution attr;
	int ret;

	if (copy_from_user(&attr, uarg, sizeof(attr)))
		return -EFAULT;
	if (attr.flags || attr.reserved)
		return -EINVAL;
	ret = pfprof_faults_start(s, file, attr.minor_sampling);
	/* A sampler asleep for a long period drains the faults between samples. */
	if (!ret)
		pfprof_sampler_kick(s);
	return ret;
}

/*
 * @s follows @scope from now on (@root: the tgid, for DESCENDANTS) for the
 * caller; the processes registered already are offered at once.  With no
 * memory to list them it follows nothing, and says so.
 */
static int pfprof_session_follow(struct pfprof_session *s, u32 scope,
				  u32 flags, struct pid *root)
{
	struct pfprof_follower f = {
		.session = s, .scope = scope, .root = root,
		.flags = flags & PFPROF_TARGET_INHERIT, .asker = current_cred(),
	};
	struct pfprof_registration *regs;
	unsigned int nr, i;
	bool follows;

	mutex_lock(&pfprof_sessions_lock);
	pfprof_session_unfollow(s);
	s->follow_root = get_pid(root);
	s->follow_cred = get_current_cred();
	s->follow = scope;
	s->follow_flags = flags;
	mutex_unlock(&pfprof_sessions_lock);

	regs = pfprof_registry_all(&nr);
	if (IS_ERR(regs)) {
		mutex_lock(&pfprof_sessions_lock);
		pfprof_session_unfollow(s);
		mutex_unlock(&pfprof_sessions_lock);
		return PTR_ERR(regs);
	}
	for (i = 0; i < nr; i++) {
		mutex_lock(&pfprof_sessions_lock);
		follows = pfprof_may_follow(s, regs[i].pid, regs[i].registrant);
		mutex_unlock(&pfprof_sessions_lock);
		if (follows && pfprof_follows(&f, regs[i].pid))
			pfprof_session_offer(s, regs[i].pid, f.flags, f.asker,
					     regs[i].registrant, &regs[i].base);
	}
	pfprof_registry_put(regs, nr);
	return 0;
}

static long pfprof_ioc_follow(struct file *file,
			      struct pfprof_follow __user *uarg)
{
	struct pfprof_session *s = file->private_data;
	struct pfprof_follow follow;
	struct task_struct *root;
	struct pid *pid = NULL;
	long ret;

	if (copy_from_user(&follow, uarg, sizeof(follow)))
		return -EFAULT;
	if (follow.flags & ~(PFPROF_TARGET_INHERIT | PFPROF_FOLLOW_OTHER_USERS) ||
	    follow.reserved || follow.scope > PFPROF_FOLLOW_DESCENDANTS ||
	    (follow.scope == PFPROF_FOLLOW_DESCENDANTS) != (follow.pid != 0))
		return -EINVAL;
	if (READ_ONCE(s->ended) || READ_ONCE(s->ring.canceled))
		return -ESHUTDOWN;
	if (follow.pid) {
		ret = pfprof_lookup(file, follow.pid, &pid, &root);
		if (ret)
			return ret;
		put_task_struct(root);
	}
	ret = pfprof_session_follow(s, follow.scope, follow.flags, pid);
	put_pid(pid);
	return ret;
}

/* PFPROF_IOC_END: with a process ever counted the last sample ends it, else nothing. */
static long pfprof_ioc_end(struct pfprof_session *s)
{
	if (pfprof_members_end(s))
		pfprof_sampler_kick(s);
	else
		pfprof_ring_cancel(&s->ring);
	return 0;
}

static long pfprof_ioc_add_cgroup(struct pfprof_session *s,
				  struct pfprof_cgroup_target __user *uarg)
{
	struct pfprof_cgroup_target target;
	struct cgroup *cgrp;
	int ret;

	if (copy_from_user(&target, uarg, sizeof(target)))
		return -EFAULT;
	if (target.flags || target.reserved)
		return -EINVAL;
	/* A cgroup2 directory only: -EBADF for anything else. */
	cgrp = pfprof_cgroup_from_fd(target.fd);
	if (IS_ERR(cgrp))
		return PTR_ERR(cgrp);
	/* Its processes are counted while the caller may read them too. */
	ret = pfprof_members_add_cgroup(s, cgrp);
	if (!ret)
		pfprof_sampler_kick(s);
	return ret;
}

long pfprof_session_ioctl(struct file *file, unsigned int cmd,
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
		return pfprof_ioc_wake_producer(s);
	case PFPROF_IOC_ADD:
		return pfprof_ioc_add(file, uarg);
	case PFPROF_IOC_FOLLOW:
		return pfprof_ioc_follow(file, uarg);
	case PFPROF_IOC_END:
		return pfprof_ioc_end(s);
	case PFPROF_IOC_ADD_CGROUP:
		return pfprof_ioc_add_cgroup(s, uarg);
	case PFPROF_IOC_ATTRIBUTE:
		return pfprof_ioc_attribute(file, uarg);
	default:
		return -ENOTTY;
	}
}

__poll_t pfprof_session_poll(struct file *file, poll_table *wait)
{
	struct pfprof_session *s = file->private_data;

	poll_wait(file, &s->ring.consumer_wq, wait);
	return pfprof_ring_poll_mask(&s->ring);
}
