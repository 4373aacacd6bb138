/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pfprof: what the module's files share.  The user-space ABI lives in
 * pfprof.h; everything here is private to the module.
 *
 * Locks, outermost first: the session list's (session.c: the list and what
 * each session follows) or the registry's (registry.c), never both at once;
 * then a session's members_lock, then its ring.lock.  The first two guard
 * short, bounded work only: joining and leaving sessions (which may walk
 * the process list) happens after they are dropped, on sessions kept alive
 * by a reference.  The sampler of a session takes only the last two:
 * sessions never wait for each other.  A session's faults.lock (faults.c)
 * comes before its members_lock and is taken with no other held.
 * Innermost, a session's lineage lock (lineage.c), a spinlock that the
 * fork and exec tracepoints take and that nests nothing.
 */
#ifndef _PFPROF_INTERNAL_H
#define _PFPROF_INTERNAL_H

#include <linux/atomic.h>
#include <linux/hashtable.h>
#include <linux/irq_work.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/minmax.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/poll.h>
#include <linux/rculist.h>
#include <linux/rcupdate.h>
#include <linux/rhashtable-types.h>
#include <linux/sched.h>
#include <linux/sched/task.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/time64.h>
#include <linux/tracepoint.h>
#include <linux/types.h>
#include <linux/uidgid.h>
#include <linux/wait.h>

#include "pfprof.h"

struct cgroup;
struct pfprof_session;
struct cred;
struct file;
struct mem_cgroup;
struct pid;
struct pid_namespace;
struct seq_file;
struct task_struct;

/*
 * Fault and CPU counters of a process, or their change over a period (the
 * monitor's ProcessCounters, monitor/src/system/procstat.rs).
 */
struct pfprof_counters {
	u64 minor;
	u64 major;
	u64 cpu_ns;
};

/* Resident and swapped-out memory of processes at an instant, bytes. */
struct pfprof_memory {
	u64 anon;
	u64 file;
	u64 shmem;
	u64 swap;
};

/* main.c: validated module parameters. */
extern unsigned int pfprof_period_ms;
extern unsigned int pfprof_buffer_pages;
extern unsigned int pfprof_max_sessions;
extern unsigned int pfprof_max_registrations;
extern unsigned int pfprof_fault_pages;
extern unsigned int pfprof_fault_cpu_records;
extern unsigned int pfprof_max_fault_threads;
extern unsigned int pfprof_attribution;

/* pfprof_attribution: who may attribute a session's faults. */
#define PFPROF_ATTRIBUTION_NOBODY		0
#define PFPROF_ATTRIBUTION_PERFMON		1
#define PFPROF_ATTRIBUTION_EVERY_OPENER	2

/* The faults region's size, control page included. */
static inline u64 pfprof_faults_size(void)
{
	return (u64)pfprof_fault_pages * PFPROF_PAGE_SIZE;
}

static inline u64 pfprof_period_ns(void)
{
	return (u64)pfprof_period_ms * NSEC_PER_MSEC;
}

/* access.c: who may profile which process. */
enum pfprof_access {
	PFPROF_READABLE,
	PFPROF_UNREADABLE,
	PFPROF_EXECING,		/* mid-exec: ask again at the next look */
};

enum pfprof_access pfprof_recheck(const struct file *file,
				  const struct cred *asker,
				  struct task_struct *task);
bool pfprof_hidden_from(const struct cred *cred, struct task_struct *task,
			struct user_namespace *hidden_ns);
bool pfprof_creds_may_read(const struct cred *opener, const struct cred *asker,
			   struct task_struct *task);
bool pfprof_may_keep(const struct cred *cred, struct task_struct *task);
bool pfprof_may_read(const struct file *file, struct task_struct *task);
bool pfprof_may_read_current(const struct cred *cred);
bool pfprof_may_attribute(const struct file *file);
bool pfprof_may_list(const struct file *file, struct task_struct *task);
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
	/*
	 * The session's members (ring.c's to change): joins count only while
	 * the ring has not ended, so that none slips between the last
	 * sample's look at the count and the end.
	 */
	unsigned int members;
	/* Under lock only. */
	bool slot_reserved;		/* strict: empty downed, slot not written */
	u64 overwritten;
	u64 blocked_ns;
	u64 full_since;			/* strict: first refused offer, 0: none */
	u64 deferred;
	atomic_t retry;			/* enum pfprof_retry, ring.c */

	wait_queue_head_t consumer_wq;	/* WAIT_FULL and poll */
};

/* How many processes the session counts (pfprof_ring_admit()). */
static inline unsigned int pfprof_ring_members(struct pfprof_ring *r)
{
	return READ_ONCE(r->members);
}

/* Up to PFPROF_MEMBERS_MAX members: a few to a chain. */
#define PFPROF_MEMBER_HASH_BITS	9

/*
 * A process (thread group) a session counts, with what the session last
 * saw of it.  Found by its signal struct: a thread group's leader's
 * task_struct does not identify it, since a thread that execs becomes the
 * new leader; its tgid names the current leader, whose credentials count.
 * Counted while both the session's opener and whoever asked for it
 * through the session's file (ADD, ADD_CGROUP, FOLLOW) may read it.
 */
struct pfprof_member {
	struct list_head node;
	struct hlist_node hash;		/* by_signal, keyed by leader->signal */
	struct pid *tgid;		/* referenced: finds the current leader */
	/*
	 * Referenced: keeps ->signal alive; the last leader a collection saw,
	 * whose credentials judge a process that is gone.
	 */
	struct task_struct *leader;
	const struct signal_struct *sig;	/* the hash's key: leader->signal */
	struct cgroup *cgrp;		/* referenced: a cgroup's member, no process */
	const struct cred *asker;	/* referenced: who asked for it */
	struct rcu_head rcu;		/* exec.c finds members under RCU */
	bool inherit;
	bool untracked;			/* under the lineage's lock: no kin made for it */
	bool joiner;			/* the join's walk is finding its tree */
	/* Under the lineage's lock: the joiner whose tree took it in (lineage.c). */
	struct pfprof_member *absorbed_by;
	bool from_registry;		/* joined through /proc: leaves by "U" */
	bool joining;			/* offered: joins at the next collection */
	bool own_target;		/* offered: the opener's user registered it */
	bool refused;			/* joining: another user's, with targets below */
	bool hidden;			/* exec.c: exec'd what its session may not read */
	bool leaving;			/* recalled: leaves at the next collection */
	struct pfprof_counters base;	/* from_registry: own totals at registration */
	struct pfprof_counters until;	/* leaving: own totals at unregistration */
	/* Collection scratch. */
	bool alive;
	bool readable;			/* the opener may still read it */
	bool execing;			/* mid-exec: counted at the next look */
	struct pfprof_counters own;	/* its own, without children */
	struct pfprof_counters now;	/* what counts of it, its tree's too */
	struct pfprof_memory memory;	/* what it holds now, its tree's too */
	/* Kept across collections. */
	struct pfprof_counters reaped_at_join;	/* inheriting: its reaped children's then */
	struct pfprof_counters kept;	/* its kin's that left (lineage.c) */
	struct pfprof_counters seen;	/* what the session last accounted */
	struct pfprof_counters started;	/* ->seen when it joined: not its delivery */
};

/*
 * How many real parents a process may have to join a session (deeper: -ELOOP),
 * and so how far up every look at a process's ancestry goes (lineage.c).
 */
#define PFPROF_TREE_DEPTH_MAX	PFPROF_DEPTH_MAX

/*
 * @p's real parent, or NULL at the top (init) or once @p is released: a
 * released task's parent pointer may be stale.  Under RCU, which keeps
 * every task not yet released when it began (a live task's parent is one)
 * from being freed.
 */
static inline struct task_struct *pfprof_real_parent(struct task_struct *p)
{
	struct task_struct *parent;

	if (!pid_alive(p))
		return NULL;
	parent = rcu_dereference(p->real_parent);
	return parent == p || parent == &init_task ? NULL : parent;
}

/* lineage.c: the kin of a session, the processes of its trees or its cgroup. */
struct pfprof_lineage {
	spinlock_t lock;		/* the table, births, nr, untracked, closed */
	struct rhashtable table;	/* every kin, by signal struct */
	struct list_head births;	/* the fork probe's, not collected yet */
	struct list_head kin;		/* the collection's, under members_lock */
	unsigned int nr;		/* in the table */
	unsigned int untracked;		/* processes not kept since the last collection */
	bool closed;			/* the session closes: no kin is made */
	bool ready;			/* the table is there */
	bool counted_in;		/* the fork probe looks at it */
	/* cgroup discovery walks, under members_lock. */
	u64 walked_at;			/* when the last one began, ktime_get_ns() */
	u64 walked_before;		/* when the one before began */
	bool walked_complete;		/* the last one kept every process it found */
};

/* faults.c: where a session's processes fault. */
struct pfprof_cpu_faults;
struct pfprof_watch;

#define PFPROF_WATCH_HASH_BITS	6

struct pfprof_faults {
	struct mutex lock;		/* everything below but area's pages */
	u32 minor_sampling;		/* PFPROF_IOC_ATTRIBUTE's; 0: not asked */
	bool released;			/* the session closes: no more events */
	/* Published with release once made: mmap looks without the lock. */
	struct pfprof_faults_area *area;
	struct pfprof_fault *records;	/* the region's, after its control page */
	u64 size;
	u64 record_count;
	/* Ours; the region's are only published. */
	u64 write_seq;
	u64 written_major;
	u64 written_minor;
	/* The handlers': one buffer a possible CPU, cpu_records each. */
	struct pfprof_cpu_faults **cpus;
	unsigned int cpu_records;
	struct pid_namespace *pid_ns;	/* the opener's: the records' pids */
	const struct cred *opener_cred;	/* the session's: who may read what */
	DECLARE_HASHTABLE(watches, PFPROF_WATCH_HASH_BITS);
	unsigned int nr_events;		/* made here */
	unsigned int nr_copies;		/* their inherited copies, at the last sync */
	/*
	 * A CPU's buffer is half full: the handler queues the wake-up, which
	 * sets filling and wakes the sampler to empty the buffers before the
	 * period ends.
	 */
	struct irq_work wake;
	atomic_t filling;
	unsigned int sync;		/* bumped by each pfprof_faults_sync() */
	unsigned int sampler_syncs;	/* of them, the sampler's: the back-off's clock */
	unsigned int unattributed;	/* at the last sync */
	/*
	 * A watch released events: their inherited copies may have been all
	 * some member's threads carried, and the members are listed again.
	 */
	bool dropped;
	/* The exec probe's: a member exec'd not dumpable, perf removed its events. */
	atomic_t member_execd;
	/* Execs that left a member or a process of its tree not dumpable: ever. */
	atomic_t exec_unrecorded;
};

void pfprof_faults_init(struct pfprof_session *s);
int pfprof_faults_start(struct pfprof_session *s, const struct file *file,
			u32 minor_sampling);
void pfprof_faults_sync(struct pfprof_session *s, bool sampler);
void pfprof_faults_exec(struct pfprof_session *s, bool member);
void pfprof_faults_drain(struct pfprof_session *s);
bool pfprof_faults_filling(struct pfprof_session *s);
bool pfprof_faults_recording(struct pfprof_session *s);
void pfprof_faults_release(struct pfprof_session *s);
void pfprof_faults_exit(struct pfprof_session *s);

/* One open of /dev/pfprof. */
struct pfprof_session {
	struct kref ref;		/* the file's, and each offer's in flight */
	/* exec.c walks the session list under RCU; near the start for kfree_rcu(). */
	struct rcu_head rcu;
	struct list_head node;		/* on the session list, under pfprof_sessions_lock */
	struct file *file;		/* its opener's: whose credentials count */
	const struct cred *opener_cred;	/* referenced: file->f_cred, for exec.c */
	kuid_t owner;			/* the opener's euid, for max_sessions */
	struct pid_namespace *pid_ns;	/* the opener's: what it may name */

	/* Under pfprof_sessions_lock: which /proc registrations join. */
	u32 follow;			/* PFPROF_FOLLOW_* */
	u32 follow_flags;		/* PFPROF_TARGET_*, PFPROF_FOLLOW_OTHER_USERS */
	struct pid *follow_root;	/* DESCENDANTS: referenced tgid */
	const struct cred *follow_cred;	/* referenced: FOLLOW's caller's */

	/* members.c, under members_lock. */
	struct mutex members_lock;
	struct list_head members;
	DECLARE_HASHTABLE(by_signal, PFPROF_MEMBER_HASH_BITS);
	unsigned int nr_inheriting;
	unsigned int nr_registered;	/* joined through /proc; read locklessly */
	struct list_head buried;	/* freed, their kin not dropped yet (lineage.c) */
	unsigned int nr_leaving;	/* recalled, not gone yet; read locklessly */
	unsigned int changes;		/* joins and leaves; read locklessly */
	unsigned int withdrawn;		/* processes no longer counted: exec */
	bool counted_any;		/* some process joined, ever */
	/*
	 * The opener's own target joined, ever (ADD, ADD_CGROUP, or a
	 * registration by the opener's user): then, as at END, the session
	 * ends once no member is left.  Others' registrations never end it.
	 */
	bool targeted;
	bool ended;			/* PFPROF_IOC_END: nobody joins any more */
	bool closed;			/* released: nobody joins, nothing runs */
	struct pfprof_counters pending;	/* collected, not delivered yet */
	struct pfprof_member *cgroup;	/* the session's cgroup, its only member */
	struct pfprof_lineage lineage;

	struct pfprof_ring ring;
	struct pfprof_faults faults;

	struct task_struct *sampler;
	wait_queue_head_t sampler_wq;
	struct mem_cgroup *memcg;	/* referenced: the opener's, or NULL */

	bool foreign_asker;		/* a member asked for by another than the opener */
};

/* counters.c: what a process has done and holds. */
bool pfprof_read_counters(struct task_struct *leader, struct pfprof_counters *own,
			  struct pfprof_counters *reaped);
void pfprof_read_memory(struct task_struct *leader, struct pfprof_memory *memory);

/* members.c: the processes a session counts. */
int pfprof_members_init(struct pfprof_session *s);
int pfprof_members_join(struct pfprof_session *s, struct pid *tgid, u32 flags);
bool pfprof_members_offer(struct pfprof_session *s, struct pid *tgid, u32 flags,
			  const struct cred *asker, bool own,
			  const struct pfprof_counters *base);
bool pfprof_members_recall(struct pfprof_session *s, struct pid *tgid);
int pfprof_members_add_cgroup(struct pfprof_session *s, struct cgroup *cgrp);
bool pfprof_members_end(struct pfprof_session *s);
void pfprof_members_free(struct pfprof_session *s);
void pfprof_members_prune(struct pfprof_session *s);
unsigned int pfprof_members_collect(struct pfprof_session *s,
				    struct pfprof_counters *pending,
				    struct pfprof_memory *memory,
				    unsigned int *withdrawn);
void pfprof_members_settle(struct pfprof_session *s,
			   const struct pfprof_counters *delivered);

/* @s's member whose process has signal struct @sig, or NULL.  Under members_lock. */
static inline struct pfprof_member *pfprof_member_of(struct pfprof_session *s,
						     const struct signal_struct *sig)
{
	struct pfprof_member *m;

	hash_for_each_possible(s->by_signal, m, hash, (unsigned long)sig) {
		if (m->sig == sig)
			return m;
	}
	return NULL;
}

/* As pfprof_member_of(), under RCU (members are freed after a grace period). */
static inline struct pfprof_member *
pfprof_member_of_rcu(struct pfprof_session *s, const struct signal_struct *sig)
{
	struct pfprof_member *m;

	hash_for_each_possible_rcu(s->by_signal, m, hash, (unsigned long)sig) {
		if (m->sig == sig)
			return m;
	}
	return NULL;
}

static inline unsigned int pfprof_nr_members(struct pfprof_session *s)
{
	return pfprof_ring_members(&s->ring);
}

/* The session ends once it has no member left (see ->targeted). */
static inline bool pfprof_ends_when_empty(struct pfprof_session *s)
{
	return READ_ONCE(s->targeted) || READ_ONCE(s->ended);
}

/*
 * Every member (if any) is recalled, in a session that ends when empty:
 * it has a last sample to deliver now.
 */
static inline bool pfprof_last_sample_due(struct pfprof_session *s)
{
	return pfprof_ends_when_empty(s) &&
	       pfprof_nr_members(s) == READ_ONCE(s->nr_leaving);
}

static inline void pfprof_counters_add(struct pfprof_counters *t,
				     const struct pfprof_counters *d)
{
	t->minor += d->minor;
	t->major += d->major;
	t->cpu_ns += d->cpu_ns;
}

/* @t less @d, each counter at least 0. */
static inline void pfprof_counters_sub_sat(struct pfprof_counters *t,
					 const struct pfprof_counters *d)
{
	t->minor -= min(t->minor, d->minor);
	t->major -= min(t->major, d->major);
	t->cpu_ns -= min(t->cpu_ns, d->cpu_ns);
}

/* lineage.c: the processes of inheriting members' trees and of a cgroup. */
int pfprof_lineage_init(struct pfprof_session *s);
void pfprof_lineage_open(struct pfprof_session *s);
void pfprof_lineage_close(struct pfprof_session *s);
void pfprof_lineage_join(struct pfprof_session *s, bool whole_life);
bool pfprof_lineage_absorb(struct pfprof_session *s);
void pfprof_lineage_collect(struct pfprof_session *s);
void pfprof_lineage_untrack(struct pfprof_session *s, struct pfprof_member *m);
void pfprof_lineage_forget(struct pfprof_session *s);
struct pfprof_member *pfprof_lineage_owner(struct pfprof_session *s,
					   const struct signal_struct *sig);
void pfprof_lineage_hide(struct pfprof_session *s, struct task_struct *p,
			 const struct pfprof_counters *at_exec);
int pfprof_lineage_probe_init(void);
void pfprof_lineage_probe_exit(void);
bool pfprof_descends_from(struct task_struct *p,
			  const struct task_struct *ancestor);
bool pfprof_too_deep(struct task_struct *p);

/* Finds a kernel tracepoint by name, for pfprof_tracepoint_attach(). */
struct pfprof_tracepoint_find {
	const char *name;
	struct tracepoint *tp;
};

static inline void pfprof_tracepoint_match(struct tracepoint *tp, void *priv)
{
	struct pfprof_tracepoint_find *find = priv;

	if (!strcmp(tp->name, find->name))
		find->tp = tp;
}

/*
 * Attaches @probe to the kernel's tracepoint @name, found with
 * for_each_kernel_tracepoint() (exported to GPL modules; the tracepoints'
 * own symbols are not): *@tp is it.  @what says what is lost without it.
 */
static inline int pfprof_tracepoint_attach(const char *name, void *probe,
					   struct tracepoint **tp,
					   const char *what)
{
	struct pfprof_tracepoint_find find = { .name = name };
	int ret;

	for_each_kernel_tracepoint(pfprof_tracepoint_match, &find);
	*tp = find.tp;
	if (!*tp) {
		pr_err("no %s tracepoint: %s\n", name, what);
		return -ENOENT;
	}
	ret = tracepoint_probe_register(*tp, probe, NULL);
	if (ret)
		pr_err("%s: cannot attach (%d)\n", name, ret);
	return ret;
}

/* Detaches @probe from @tp; no probe runs any more once it returns. */
static inline void pfprof_tracepoint_detach(struct tracepoint *tp, void *probe)
{
	tracepoint_probe_unregister(tp, probe, NULL);
	tracepoint_synchronize_unregister();
}

/* exec.c: execs that may hide a process from its sessions. */
int pfprof_execs_init(void);
void pfprof_execs_exit(void);

/* registry.c: the processes registered through /proc. */
struct pfprof_registration {
	struct pid *pid;		/* referenced */
	kuid_t registrant;		/* the writer's euid */
	struct pfprof_counters base;	/* its own counters at registration */
};

int pfprof_registry_add(struct pid *pid, struct task_struct *leader,
			kuid_t registrant, struct pfprof_counters *base);
int pfprof_registry_remove(struct task_struct *leader, kuid_t registrant);
struct pfprof_registration *pfprof_registry_all(unsigned int *nr);
void pfprof_registry_put(struct pfprof_registration *all, unsigned int nr);
int pfprof_registry_show(struct seq_file *m);
void pfprof_registry_exit(void);

/* proc.c: /proc/pfprof/status. */
int pfprof_proc_init(void);
void pfprof_proc_exit(void);

/* session.c: every open of /dev/pfprof, and the list of them. */
int pfprof_session_open(struct inode *inode, struct file *file);
int pfprof_session_release(struct inode *inode, struct file *file);
long pfprof_session_ioctl(struct file *file, unsigned int cmd,
			  unsigned long arg);
__poll_t pfprof_session_poll(struct file *file, poll_table *wait);
void pfprof_sessions_offer(struct pid *pid, kuid_t registrant,
			   const struct pfprof_counters *base);
void pfprof_sessions_each(void (*fn)(struct pfprof_session *s, void *arg),
			  void *arg);
void pfprof_sessions_recall(struct pid *pid);

/* sampler.c: a session's sampling kthread. */
int pfprof_sampler_start(struct pfprof_session *s);
void pfprof_sampler_stop(struct pfprof_session *s);
void pfprof_sampler_kick(struct pfprof_session *s);

/* ring.c */
enum pfprof_put {
	PFPROF_PUT_DONE,	/* sample written */
	PFPROF_PUT_NO_RING,	/* not started, canceled, or not the generation asked for */
	PFPROF_PUT_FULL,	/* strict: no free slot */
	PFPROF_PUT_DEFERRED,	/* the consumer holds the lock */
};

int pfprof_ring_init(struct pfprof_ring *r);
void pfprof_ring_exit(struct pfprof_ring *r);
void pfprof_ring_start(struct pfprof_ring *r, u32 mode, bool end);
void pfprof_ring_cancel(struct pfprof_ring *r);
bool pfprof_ring_admit(struct pfprof_ring *r);
void pfprof_ring_depart(struct pfprof_ring *r);
unsigned int pfprof_ring_generation(struct pfprof_ring *r);
enum pfprof_put pfprof_ring_put(struct pfprof_ring *r,
				const struct pfprof_sample *sample,
				unsigned int withdrawn, bool last,
				unsigned int generation);
bool pfprof_ring_await_slot(struct pfprof_ring *r);
bool pfprof_ring_retry_fired(struct pfprof_ring *r);
bool pfprof_ring_take_retry(struct pfprof_ring *r);
int pfprof_ring_wait_full(struct pfprof_ring *r, long timeout);
int pfprof_ring_wake_producer(struct pfprof_ring *r);
__poll_t pfprof_ring_poll_mask(struct pfprof_ring *r);

/* chardev.c: /dev/pfprof. */
int pfprof_chardev_init(void);
void pfprof_chardev_exit(void);

#endif /* _PFPROF_INTERNAL_H */
