/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pfprof: what the module's files share.  The user-space ABI lives in
 * pfprof.h; everything here is private to the module.
 *
 * Locks, outermost first: pfprof_reg_lock (the /proc registry, the list of
 * sessions and what each follows), a session's members_lock, its ring.lock.
 * The sampler of a session takes only the last two: sessions never wait
 * for each other.
 */
#ifndef _PFPROF_INTERNAL_H
#define _PFPROF_INTERNAL_H

#include <linux/atomic.h>
#include <linux/hashtable.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/time64.h>
#include <linux/types.h>
#include <linux/uidgid.h>
#include <linux/wait.h>

#include "pfprof.h"

struct file;
struct pfprof_tree_slot;
struct pid;
struct task_struct;

/* Fault and CPU counters of a process, or their change over a period. */
struct pfprof_totals {
	u64 minor;
	u64 major;
	u64 cpu_ns;
};

/* main.c: validated module parameters. */
extern unsigned int pfprof_period_ms;
extern unsigned int pfprof_buffer_pages;
extern unsigned int pfprof_max_sessions;

static inline u64 pfprof_period_ns(void)
{
	return (u64)pfprof_period_ms * NSEC_PER_MSEC;
}

/* access.c: who may profile which process. */
bool pfprof_opener_may_read(const struct file *file, struct task_struct *task);
bool pfprof_may_read(const struct file *file, struct task_struct *task);
int pfprof_lookup(const struct file *file, pid_t nr, struct pid **pidp,
		  struct task_struct **leaderp);

/* The mapped area of a session and the protocol run over it (ring.c). */
struct pfprof_ring {
	struct pfprof_area *area;	/* control page, then the slots */
	struct pfprof_sample *slots;
	u64 size;
	u64 slot_count;

	/* Serializes ring starts and ends and writes to the area. */
	struct mutex lock;
	/* Written under lock, read locklessly with READ_ONCE(). */
	u32 mode;			/* PFPROF_MODE_NONE: not started */
	bool canceled;
	unsigned int generation;	/* bumped when the ring starts or ends */
	u64 write_seq;
	/* Under lock only. */
	bool slot_reserved;		/* strict: empty downed, slot not written */
	u64 overwritten;
	u64 blocked_ns;
	u64 full_since;			/* strict: first refused offer, 0: none */
	u64 deferred;
	atomic_t retry;			/* enum pfprof_retry, ring.c */

	wait_queue_head_t consumer_wq;	/* WAIT_FULL and poll */
};

#define PFPROF_MEMBER_HASH_BITS	6

/* One open of /dev/pfprof. */
struct pfprof_session {
	struct list_head node;		/* on the session list, under pfprof_reg_lock */
	struct file *file;		/* its opener's: whose credentials count */
	kuid_t owner;			/* the opener's euid, for max_sessions */

	/* Under pfprof_reg_lock: which /proc registrations join. */
	u32 follow;			/* PFPROF_FOLLOW_* */
	u32 follow_flags;		/* PFPROF_TARGET_* of those joining */
	struct task_struct *follow_root;	/* DESCENDANTS: referenced leader */

	/* members.c, under members_lock. */
	struct mutex members_lock;
	struct list_head members;
	DECLARE_HASHTABLE(by_signal, PFPROF_MEMBER_HASH_BITS);
	unsigned int nr_members;	/* also read locklessly */
	unsigned int nr_inheriting;
	unsigned int changes;		/* joins and leaves; read locklessly */
	bool counted_any;		/* some process joined, ever */
	bool ended;			/* PFPROF_IOC_END: nobody joins any more */
	struct pfprof_totals pending;	/* collected, not delivered yet */
	/* The process-list walk's map of processes in trees (members.c). */
	struct pfprof_tree_slot *tree_map;
	unsigned int tree_cap;		/* slots, a power of two, or 0 */
	unsigned int tree_used;		/* processes the last walk put in it */

	struct pfprof_ring ring;

	struct task_struct *sampler;
	wait_queue_head_t sampler_wq;
};

/* members.c: the processes a session counts. */
bool pfprof_read_totals(struct task_struct *leader, struct pfprof_totals *t,
			bool with_children);
bool pfprof_descends_from(struct task_struct *p,
			  const struct task_struct *ancestor);
void pfprof_members_init(struct pfprof_session *s);
int pfprof_members_join(struct pfprof_session *s, struct task_struct *leader,
			u32 flags, const struct pfprof_totals *registered);
void pfprof_members_leave(struct pfprof_session *s, struct task_struct *leader);
void pfprof_members_end(struct pfprof_session *s);
void pfprof_members_free(struct pfprof_session *s);
unsigned int pfprof_members_collect(struct pfprof_session *s,
				    struct pfprof_totals *pending);
void pfprof_members_settle(struct pfprof_session *s,
			   const struct pfprof_totals *delivered);

static inline unsigned int pfprof_nr_members(struct pfprof_session *s)
{
	return READ_ONCE(s->nr_members);
}

/* proc.c: the /proc registry, and the sessions that follow it. */
int pfprof_proc_init(void);
void pfprof_proc_exit(void);
int pfprof_session_add(struct pfprof_session *s);
void pfprof_session_remove(struct pfprof_session *s);
void pfprof_session_follow(struct pfprof_session *s, u32 scope, u32 flags,
			   struct task_struct *root);

/* sampler.c: a session's sampling kthread. */
int pfprof_sampler_start(struct pfprof_session *s);
void pfprof_sampler_stop(struct pfprof_session *s);
void pfprof_sampler_kick(struct pfprof_session *s);

/* ring.c */
enum pfprof_put {
	PFPROF_PUT_DONE,	/* sample written */
	PFPROF_PUT_NO_SESSION,	/* not started, canceled, or not the ring asked for */
	PFPROF_PUT_FULL,	/* strict: no free slot */
	PFPROF_PUT_DEFERRED,	/* the consumer holds the lock */
};

int pfprof_ring_init(struct pfprof_ring *r);
void pfprof_ring_exit(struct pfprof_ring *r);
void pfprof_ring_start(struct pfprof_session *s, u32 mode);
void pfprof_ring_cancel(struct pfprof_session *s);
unsigned int pfprof_ring_session(struct pfprof_ring *r);
enum pfprof_put pfprof_ring_put(struct pfprof_session *s,
				const struct pfprof_sample *sample, bool last,
				unsigned int session);
bool pfprof_ring_await_slot(struct pfprof_ring *r);
bool pfprof_ring_retry_fired(struct pfprof_ring *r);
bool pfprof_ring_take_retry(struct pfprof_ring *r);
int pfprof_ring_wait_full(struct pfprof_ring *r, long timeout);
int pfprof_ring_wake_producer(struct pfprof_session *s);
__poll_t pfprof_ring_poll_mask(struct pfprof_ring *r);

/* chardev.c: /dev/pfprof. */
int pfprof_chardev_init(void);
void pfprof_chardev_exit(void);

#endif /* _PFPROF_INTERNAL_H */
