// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: where a session's processes fault (pfprof.h, "Where the faults
 * were").
 *
 * Twin: monitor/src/backend/procfs/attribute.rs with procfs/perf/, the
 * same events from user space; a fault dropped here is one perf's full
 * ring drops there (PERF_RECORD_LOST).
 *
 * Each process member that counts with its descendants gets two kernel
 * perf counters per thread, PERF_COUNT_SW_PAGE_FAULTS_MAJ (sample_period
 * 1) and _MIN (sample_period minor_sampling), with inherit: threads and
 * children created later carry them, with the same overflow handler and context.  Events
 * are created and released in process context only: the ATTRIBUTE and ADD
 * ioctls and the session's sampler.
 *
 * The handler runs in the faulting task, preemption off and under RCU
 * (the software event path, __perf_sw_event()), after the fault is
 * accounted (mm_account_fault()).  It takes no lock: it keeps the fault
 * only if the opener and whoever asked for the process (the member's
 * asker) may read the faulting process then (its credentials and
 * dumpability, as a setuid program's exec changes them) and it can name
 * it, and appends it to its CPU's buffer, whose only writer it is
 * (preemption off; page faults are taken in task context only, and the
 * perf core keeps a context from recursing), counting it as dropped when
 * it may not or the buffer is full.  The sampler, once a period (every
 * 100 ms at least, for a longer period) and whenever a buffer is half full
 * (an interrupt work wakes it), empties every CPU's buffer into the faults
 * region.
 *
 * Lifetime: an event's handler may run until the event is released and
 * the RCU readers that found it are done; a watch's context (its asker)
 * goes a grace period after its events, the per-CPU buffers only after
 * every event is released and a grace period has passed, the region with
 * the session (mappings hold the file).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cpumask.h>
#include <linux/cred.h>
#include <linux/hashtable.h>
#include <linux/log2.h>
#include <linux/math64.h>
#include <linux/mm.h>
#include <linux/perf_event.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/ptrace.h>
#include <linux/rcupdate.h>
#include <linux/sched/signal.h>
#include <linux/sched/task_stack.h>
#include <linux/slab.h>
#include <linux/timekeeping.h>
#include <linux/vmalloc.h>

#include "compat.h"
#include "pfprof_internal.h"

/* One fault, as the handler keeps it until the sampler copies it. */
struct pfprof_cpu_fault {
	u64 time_ns;
	u64 address;
	s32 pid;
	u32 kind;
	u64 ip;
};

/*
 * A CPU's faults: head written by the handlers on that CPU only, tail by
 * the sampler only, on lines of their own; head - tail records wait.  The
 * drop counts are the handlers', read by the sampler.
 */
struct pfprof_cpu_faults {
	u32 head;
	u64 dropped_major;
	u64 dropped_minor;
	u32 tail ____cacheline_aligned;
	struct pfprof_cpu_fault records[] ____cacheline_aligned;
};

/*
 * What a watch's events hand their handler: the session's faults, and who
 * asked for the process (struct pfprof_member), whom the handler checks
 * beside the opener, as the rest of the module does.  Freed a grace period
 * after the events that point to it (a handler may still be running).
 */
struct pfprof_watch_ctx {
	struct pfprof_faults *faults;
	const struct cred *asker;	/* referenced */
	struct rcu_head rcu;
};

/* A process whose threads carry the session's events. */
struct pfprof_watch {
	struct hlist_node node;		/* faults.watches, keyed by tgid */
	struct pid *tgid;		/* referenced */
	struct pfprof_watch_ctx *ctx;
	unsigned int nr_events;
	unsigned int seen;		/* the sync that last found it a member */
	struct perf_event **events;	/* a thread's: major, minor, or one */
	/*
	 * Refused (over the bound, out of memory, a perf error, threads made
	 * faster than listed, an exec under way, a process its session may
	 * not read): no events, its threads listed again at the sampler's
	 * sync retry_at, after backoff of them, a number that doubles at each
	 * refusal (PFPROF_RETRY_MAX_SYNCS at most).
	 */
	bool refused;
	unsigned int retry_at;
	unsigned int backoff;
	/* Its events' inherited copies, at the last sync (up to the bound + 1). */
	unsigned int nr_copies;
	/*
	 * The wait after a refusal for its inherited copies, 0 before any: it
	 * doubles at each, and a success does not reset it (a spawner would be
	 * refused every other sync otherwise).  Once refused so, the
	 * descendants that lost their copies are not attributed again, though
	 * the process may be.
	 */
	unsigned int copies_backoff;
};

/* The kinds of a watch's events a thread carries. */
#define PFPROF_EVENTS_MAJOR	1u
#define PFPROF_EVENTS_MINOR	2u
#define PFPROF_EVENTS_BOTH	(PFPROF_EVENTS_MAJOR | PFPROF_EVENTS_MINOR)

/*
 * Events a look reads in its threads' contexts, at most, under one RCU read
 * lock: a user may put thousands of its own perf events on each thread.
 */
#define PFPROF_EVENTS_SCAN_MAX	(1u << 20)

/*
 * How often a process's threads are listed, at most, until a look finds
 * every one with events: then any thread made later inherits them.
 */
#define PFPROF_THREAD_LOOKS	4

/* Syncs, a period each, a refused process waits at most before another try. */
#define PFPROF_RETRY_MAX_SYNCS	64

/* Records copied to the region at once: one claim, one publication. */
#define PFPROF_FAULT_BATCH	16

/*
 * In interrupt context (on PREEMPT_RT, a per-CPU thread, as irq_work is
 * there without IRQ_WORK_HARD_IRQ): the sampler empties the buffers now.
 */
static void pfprof_faults_wake(struct irq_work *work)
{
	struct pfprof_session *s = container_of(work, struct pfprof_session,
						faults.wake);

	atomic_set(&s->faults.filling, 1);
	/* A call back up the layers (design.md, "What calls what"). */
	pfprof_sampler_kick(s);
}

void pfprof_faults_init(struct pfprof_session *s)
{
	struct pfprof_faults *f = &s->faults;

	mutex_init(&f->lock);
	hash_init(f->watches);
	init_irq_work(&f->wake, pfprof_faults_wake);
}

/* Whether a buffer filled past half since the sampler last asked. */
bool pfprof_faults_filling(struct pfprof_session *s)
{
	return atomic_read(&s->faults.filling);
}

/*
 * Whether faults are recorded: set once, by PFPROF_IOC_ATTRIBUTE, and never
 * cleared (a released session's sampler is stopped first).
 */
bool pfprof_faults_recording(struct pfprof_session *s)
{
	return READ_ONCE(s->faults.minor_sampling) != 0;
}

static struct pfprof_cpu_faults *pfprof_cpu_buffer(struct pfprof_faults *f,
						   unsigned int cpu)
{
	return f->cpus[cpu];
}

/*
 * The user instruction that took the fault: the fault's own registers' for
 * one taken in user mode; for one the kernel took on the process's behalf
 * (copying to a user buffer not yet there), where the process entered the
 * kernel, as /proc/PID/syscall names it.  A kernel thread has none.
 */
static u64 pfprof_user_ip(struct pt_regs *regs)
{
	if (regs && user_mode(regs))
		return instruction_pointer(regs);
	if (current->flags & PF_KTHREAD)
		return 0;
	return instruction_pointer(task_pt_regs(current));
}

/*
 * The overflow handler: in the faulting task, preemption off, under RCU.
 * No lock, no sleep, nothing read from user space.
 */
static void pfprof_fault_handler(struct perf_event *event,
				 struct perf_sample_data *data,
				 struct pt_regs *regs)
{
	struct pfprof_watch_ctx *ctx = event->overflow_handler_context;
	struct pfprof_faults *f = ctx->faults;
	struct pfprof_cpu_faults *c = pfprof_cpu_buffer(f, smp_processor_id());
	bool major = event->attr.config == PERF_COUNT_SW_PAGE_FAULTS_MAJ;
	struct pfprof_cpu_fault *r;
	u32 head = c->head;
	s32 pid = task_tgid_nr_ns(current, f->pid_ns);
	bool readable;

	/* The software event path holds it already: nested, it costs nothing. */
	rcu_read_lock();
	readable = pfprof_may_read_current(f->opener_cred) &&
		   pfprof_may_read_current(ctx->asker);
	rcu_read_unlock();
	/*
	 * Only what the opener and the asker may read as the fault is taken (a setuid
	 * program's exec hides what follows), and can name; acquire: the
	 * sampler has copied the records it freed (litmus faults-cpu-buffer).
	 */
	if (!pid || !readable ||
	    head - smp_load_acquire(&c->tail) >= f->cpu_records) {
		if (major)
			WRITE_ONCE(c->dropped_major, c->dropped_major + 1);
		else
			WRITE_ONCE(c->dropped_minor, c->dropped_minor + 1);
		return;
	}
	r = &c->records[head & (f->cpu_records - 1)];
	r->time_ns = ktime_get_mono_fast_ns();
	/* perf_sample_data_init() leaves addr unset for address 0. */
	r->address = data->sample_flags & PERF_SAMPLE_ADDR ? data->addr : 0;
	r->pid = pid;
	r->kind = major ? PFPROF_FAULT_MAJOR : PFPROF_FAULT_MINOR;
	r->ip = pfprof_user_ip(regs);
	/* Release: the record is complete before the sampler sees it (faults-cpu-buffer). */
	smp_store_release(&c->head, head + 1);
	/*
	 * Half full: the sampler empties it before the period ends (a faster
	 * stream of faults than a period's buffer holds loses none).  The
	 * interrupt work wakes it: no wait queue's lock is taken here.
	 */
	if (head + 1 - READ_ONCE(c->tail) == f->cpu_records / 2)
		irq_work_queue(&f->wake);
}

/*
 * Releasing an event releases its inherited copies too: the threads of
 * another member that had only those must be listed again.
 */
static void pfprof_watch_drop_events(struct pfprof_faults *f,
				     struct pfprof_watch *w)
{
	unsigned int i;

	if (w->nr_events)
		f->dropped = true;
	for (i = 0; i < w->nr_events; i++)
		perf_event_release_kernel(w->events[i]);
	f->nr_events -= w->nr_events;
	w->nr_events = 0;
	/* Their copies went with them. */
	f->nr_copies -= w->nr_copies;
	w->nr_copies = 0;
	kvfree(w->events);
	w->events = NULL;
}

static void pfprof_watch_release(struct pfprof_faults *f,
				 struct pfprof_watch *w)
{
	pfprof_watch_drop_events(f, w);
	hash_del(&w->node);
	put_pid(w->tgid);
	/* Credentials are freed a grace period after their last put, too. */
	put_cred(w->ctx->asker);
	kfree_rcu(w->ctx, rcu);
	kfree(w);
}

/*
 * @w's process is not recorded at all rather than in part: its events go,
 * and its threads are listed again only after a wait that doubles at each
 * refusal (a process over the bound would otherwise cost every period up to
 * max_fault_threads events made and released).
 */
static void pfprof_watch_refuse(struct pfprof_faults *f,
				struct pfprof_watch *w)
{
	pfprof_watch_drop_events(f, w);
	w->backoff = clamp(2 * w->backoff, 1u, (unsigned int)PFPROF_RETRY_MAX_SYNCS);
	w->retry_at = f->sampler_syncs + w->backoff;
	w->refused = true;
}

static struct perf_event *pfprof_event_create(struct pfprof_watch *w,
					      struct task_struct *t, bool major)
{
	struct pfprof_faults *f = w->ctx->faults;
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = major ? PERF_COUNT_SW_PAGE_FAULTS_MAJ :
				  PERF_COUNT_SW_PAGE_FAULTS_MIN,
		.sample_period = major ? 1 : f->minor_sampling,
		.inherit = 1,
	};

	return perf_event_create_kernel_counter(&attr, -1, t,
						pfprof_fault_handler, w->ctx);
}

/* Which of the watch's kinds of event @e is. */
static unsigned int pfprof_event_kind(const struct perf_event *e)
{
	return e->attr.config == PERF_COUNT_SW_PAGE_FAULTS_MAJ ?
		       PFPROF_EVENTS_MAJOR : PFPROF_EVENTS_MINOR;
}

/* A thread listed, and the kinds of the session's events it carries. */
struct pfprof_listed {
	struct task_struct *task;
	unsigned int kinds;
};

/*
 * Which kinds of @f's events count for @t: made for it or inherited, of any
 * member's watch (a process forked under one member, reparented, then a
 * member itself, carries the first one's), and not over (an exit, or an
 * exec that left the thread not dumpable, ends an event: perf's EXIT).
 * Read from the context that counts for @t now, not from the task an event
 * was made for: perf swaps the contexts of a parent and a child whose
 * events were all inherited.  Under RCU: contexts and events are freed a
 * grace period after they leave a task's list, a watch's context after
 * its events.
 */
static unsigned int pfprof_thread_kinds(struct pfprof_faults *f,
					struct task_struct *t,
					unsigned int *scanned)
{
	struct perf_event_context *ctx = pfprof_task_sw_ctx(t);
	const struct pfprof_watch_ctx *wc;
	struct perf_event *e;
	unsigned int kinds = 0;

	if (!ctx)
		return 0;
	list_for_each_entry_rcu(e, &ctx->event_list, event_entry) {
		++*scanned;
		if (READ_ONCE(e->overflow_handler) != pfprof_fault_handler)
			continue;
		wc = e->overflow_handler_context;
		if (wc->faults == f &&
		    READ_ONCE(e->state) >= PERF_EVENT_STATE_INACTIVE)
			kinds |= pfprof_event_kind(e);
	}
	return kinds;
}

/*
 * Releases @w's events that are over for good: each made for a thread that
 * exited or exec'd into a program it may not be read in (perf then ends
 * it: EXIT), with no inherited copy left, so that none can be made again
 * (every copy descends from the event made here, through a thread that
 * carries one).  Their threads are held no longer, their budget is free.
 */
static void pfprof_watch_prune(struct pfprof_faults *f, struct pfprof_watch *w)
{
	unsigned int i, kept = 0;
	struct perf_event *e;
	bool over;

	for (i = 0; i < w->nr_events; i++) {
		e = w->events[i];
		mutex_lock(&e->child_mutex);
		over = READ_ONCE(e->state) == PERF_EVENT_STATE_EXIT &&
		       list_empty(&e->child_list);
		mutex_unlock(&e->child_mutex);
		if (over)
			perf_event_release_kernel(e);
		else
			w->events[kept++] = e;
	}
	f->nr_events -= w->nr_events - kept;
	w->nr_events = kept;
}

/*
 * @e's inherited copies, counted up to @max: perf links every copy, of a
 * copy too, to the event it made them from, and unlinks one as its thread
 * exits.
 */
static unsigned int pfprof_event_copies(struct perf_event *e, unsigned int max)
{
	struct perf_event *copy;
	unsigned int n = 0;

	mutex_lock(&e->child_mutex);
	list_for_each_entry(copy, &e->child_list, child_list) {
		if (++n >= max)
			break;
	}
	mutex_unlock(&e->child_mutex);
	return n;
}

/*
 * The session's events, made and inherited, within max_fault_threads
 * (two a thread).  Every thread or process a watched thread starts
 * inherits a copy of each of its events, which costs as much as one made
 * here, and perf takes its memory from nobody's cgroup: a spawner's
 * children would otherwise cost unbounded, uncharged kernel memory (with
 * attribution=2, any user's).  perf links a copy of a copy to the event
 * made here too, so a watch's copies are those of its member's whole
 * tree.  Each watch's copies are counted up to what alone would take the
 * session past the bound (a sync costs the bound a watch at most, not the
 * copies), then the watches with the most are refused until the rest fit
 * (pfprof_watch_refuse(): its events go, their copies with them): the
 * trees that make them, not whichever the hash lists last.  A watch refused
 * for its copies waits twice as long as the last time before it is tried
 * again.  Copies are made at fork, between two syncs: the bound holds at
 * each sync, and in between the user's pids limit bounds them.
 */
static void pfprof_watches_bound_copies(struct pfprof_faults *f)
{
	unsigned int limit = 2 * pfprof_max_fault_threads;
	/* The events made fit the budget: f->nr_events <= limit. */
	unsigned int alone = limit + 1 - min(limit, f->nr_events);
	struct pfprof_watch *w, *most;
	unsigned int bkt, i;

	f->nr_copies = 0;
	hash_for_each(f->watches, bkt, w, node) {
		w->nr_copies = 0;
		for (i = 0; i < w->nr_events && w->nr_copies < alone; i++) {
			w->nr_copies += pfprof_event_copies(w->events[i],
							    alone - w->nr_copies);
			cond_resched();
		}
		f->nr_copies += w->nr_copies;
	}
	while (f->nr_events + f->nr_copies > limit) {
		most = NULL;
		hash_for_each(f->watches, bkt, w, node) {
			if (!most || w->nr_copies > most->nr_copies)
				most = w;
		}
		/* Over the bound with the events made within it: copies. */
		if (WARN_ON_ONCE(!most || !most->nr_copies))
			break;
		most->copies_backoff = clamp(2 * most->copies_backoff, 1u,
					     (unsigned int)PFPROF_RETRY_MAX_SYNCS);
		pfprof_watch_refuse(f, most);
		most->retry_at = f->sampler_syncs +
				 max(most->backoff, most->copies_backoff);
		cond_resched();
	}
}

/* Room for @n more events in @w's array. */
static bool pfprof_watch_grow(struct pfprof_watch *w, unsigned int n)
{
	struct perf_event **grown;

	grown = kvmalloc_array(w->nr_events + n, sizeof(*grown),
			       GFP_KERNEL_ACCOUNT);
	if (!grown)
		return false;
	if (w->nr_events)
		memcpy(grown, w->events, w->nr_events * sizeof(*grown));
	kvfree(w->events);
	w->events = grown;
	return true;
}

/*
 * The kinds of event @t misses, both or one, on @t, or none: then true
 * only if it exited meanwhile (-ESRCH: none needed).
 */
static bool pfprof_watch_thread(struct pfprof_faults *f, struct pfprof_watch *w,
				struct task_struct *t, unsigned int missing)
{
	struct perf_event *major = NULL, *minor = NULL;

	if (missing & PFPROF_EVENTS_MAJOR) {
		major = pfprof_event_create(w, t, true);
		if (IS_ERR(major))
			return PTR_ERR(major) == -ESRCH;
	}
	if (missing & PFPROF_EVENTS_MINOR) {
		minor = pfprof_event_create(w, t, false);
		if (IS_ERR(minor)) {
			if (major)
				perf_event_release_kernel(major);
			return PTR_ERR(minor) == -ESRCH;
		}
	}
	if (major)
		w->events[w->nr_events++] = major;
	if (minor)
		w->events[w->nr_events++] = minor;
	f->nr_events += !!major + !!minor;
	return true;
}

static void pfprof_listed_put(struct pfprof_listed *listed, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		put_task_struct(listed[i].task);
	kvfree(listed);
}

/*
 * Events on the threads @lacking of @w's process, made while no exec
 * replaces its program, and only on a thread its session may read: events
 * are never put on a program its opener or asker may not read (perf's own
 * open asks the same, under the same lock).  A thread exiting needs none.
 */
static bool pfprof_watch_lacking(struct pfprof_faults *f, struct pfprof_watch *w,
				 struct task_struct *leader,
				 const struct pfprof_listed *lacking, unsigned int n)
{
	struct rw_semaphore *exec_lock = &leader->signal->exec_update_lock;
	struct task_struct *t;
	unsigned int i;
	bool ok = true;

	/* An exec under way: the next try finds its program. */
	if (!down_read_trylock(exec_lock))
		return false;
	for (i = 0; i < n && ok; i++) {
		t = lacking[i].task;
		if (t->flags & PF_EXITING)
			continue;
		ok = pfprof_creds_may_read(f->opener_cred, w->ctx->asker, t) &&
		     pfprof_watch_thread(f, w, t,
					 PFPROF_EVENTS_BOTH & ~lacking[i].kinds);
	}
	up_read(exec_lock);
	return ok;
}

/*
 * Events on every thread of @leader's process that lacks them, within the
 * session's bound (max_fault_threads).  Returns false when the bound,
 * memory, perf or the process's readability says no, or threads are made
 * faster than they are listed: the caller then releases the process's
 * events, so that it is not recorded at all rather than in part (nor twice:
 * a thread that carries the session's events, made or inherited, gets none
 * of their kind).  A thread created meanwhile by one that had no event yet
 * is found by the next look, which repeats until one finds every thread
 * with events, a few times at most (a thread whose event could not be
 * made, exiting, is found again): any thread made after that inherits
 * them.  A look lists one lacking thread over the budget at most.
 */
static bool pfprof_watch_threads(struct pfprof_faults *f, struct pfprof_watch *w,
				 struct task_struct *leader)
{
	struct pfprof_listed *listed;
	struct task_struct *t;
	unsigned int n, kinds, cap, budget, look, scanned;
	bool ok, every_thread;

	for (look = 0; look < PFPROF_THREAD_LOOKS; look++) {
		/* Inherited copies take the budget too. */
		budget = pfprof_max_fault_threads -
			 min(pfprof_max_fault_threads,
			     (f->nr_events + f->nr_copies + 1) / 2);
		cap = min_t(unsigned int, READ_ONCE(leader->signal->nr_threads) + 8,
			    budget + 1);
		listed = kvmalloc_array(cap, sizeof(*listed), GFP_KERNEL_ACCOUNT);
		if (!listed)
			return false;
		n = 0;
		scanned = 0;
		every_thread = true;
		rcu_read_lock();
		for_each_thread(leader, t) {
			if (scanned > PFPROF_EVENTS_SCAN_MAX)
				break;
			if (t->flags & PF_EXITING)
				continue;
			kinds = pfprof_thread_kinds(f, t, &scanned);
			if (kinds == PFPROF_EVENTS_BOTH)
				continue;
			if (n == cap) {
				every_thread = false;
				break;
			}
			listed[n++] = (struct pfprof_listed){
				.task = get_task_struct(t),
				.kinds = kinds,
			};
		}
		rcu_read_unlock();
		if (scanned > PFPROF_EVENTS_SCAN_MAX) {
			pfprof_listed_put(listed, n);
			return false;
		}
		if (!n) {
			kvfree(listed);
			if (every_thread)
				return true;
			continue;
		}
		ok = n <= budget && pfprof_watch_grow(w, 2 * n) &&
		     pfprof_watch_lacking(f, w, leader, listed, n);
		pfprof_listed_put(listed, n);
		if (!ok)
			return false;
	}
	/* Still threads made by threads without events: not in part. */
	return false;
}

static struct pfprof_watch *pfprof_watch_of(struct pfprof_faults *f,
					    struct pid *tgid)
{
	struct pfprof_watch *w;

	hash_for_each_possible(f->watches, w, node, (unsigned long)tgid) {
		if (w->tgid == tgid)
			return w;
	}
	return NULL;
}

/* A watch of @tgid for @asker, in no hash yet, or NULL. */
static struct pfprof_watch *pfprof_watch_new(struct pfprof_faults *f,
					     struct pid *tgid,
					     const struct cred *asker)
{
	struct pfprof_watch *w = kzalloc(sizeof(*w), GFP_KERNEL_ACCOUNT);

	if (!w)
		return NULL;
	w->ctx = kzalloc(sizeof(*w->ctx), GFP_KERNEL_ACCOUNT);
	if (!w->ctx) {
		kfree(w);
		return NULL;
	}
	w->ctx->faults = f;
	w->ctx->asker = get_cred(asker);
	w->tgid = get_pid(tgid);
	return w;
}

/*
 * The process @tgid carries events for @asker, unless the bound, memory,
 * perf or its readability says no, now or at its last try (then false
 * until its retry, which only the sampler's syncs make).  @relist: its
 * threads are listed again, even if they had events.
 */
static bool pfprof_watch_member(struct pfprof_faults *f, struct pid *tgid,
				const struct cred *asker, bool relist,
				bool may_retry)
{
	struct pfprof_watch *w = pfprof_watch_of(f, tgid);
	struct task_struct *leader;
	bool ok;

	if (w) {
		if (!w->refused && !relist)
			return true;
		if (w->refused &&
		    (!may_retry || (int)(f->sampler_syncs - w->retry_at) < 0))
			return false;
	}
	leader = get_pid_task(tgid, PIDTYPE_TGID);
	if (!leader)
		return true;		/* gone: nothing to record */
	if (!w) {
		w = pfprof_watch_new(f, tgid, asker);
		if (!w) {
			put_task_struct(leader);
			return false;
		}
		w->seen = f->sync;
		hash_add(f->watches, &w->node, (unsigned long)w->tgid);
	}
	pfprof_watch_prune(f, w);
	ok = pfprof_watch_threads(f, w, leader);
	put_task_struct(leader);
	if (ok) {
		w->refused = false;
		w->backoff = 0;
	} else {
		pfprof_watch_refuse(f, w);
	}
	return ok;
}

/* A member to record, as a sync finds it: references to its process and asker. */
struct pfprof_to_watch {
	struct pid *tgid;
	const struct cred *asker;
};

/*
 * The members to record, referenced, in the array returned, their number
 * in @n; the other members counted in @unattributed.  Only the references
 * are taken under members_lock: the events, whose creation may interrupt
 * other CPUs, are made after it.  NULL when memory says no.
 */
static struct pfprof_to_watch *pfprof_members_to_watch(struct pfprof_session *s,
						       unsigned int *n,
						       unsigned int *unattributed)
{
	struct pfprof_to_watch *tgids;
	struct pfprof_member *m;
	unsigned int cap = 0;

	mutex_lock(&s->members_lock);
	list_for_each_entry(m, &s->members, node) {
		/* Offered, not joined yet: the collection after its join. */
		if (m->joining)
			continue;
		if (m->cgrp || !m->inherit)
			(*unattributed)++;
		else
			cap++;
	}
	tgids = kmalloc_array(max(cap, 1u), sizeof(*tgids), GFP_KERNEL_ACCOUNT);
	*n = 0;
	if (tgids) {
		list_for_each_entry(m, &s->members, node) {
			if (m->joining || m->cgrp || !m->inherit)
				continue;
			tgids[*n].tgid = get_pid(m->tgid);
			tgids[(*n)++].asker = get_cred(m->asker);
		}
	} else {
		*unattributed += cap;
	}
	mutex_unlock(&s->members_lock);
	return tgids;
}

/*
 * Watches of members that left, or that another asker asked for since
 * (the process left and joined again), are released: first, since their
 * events' inherited copies may be all that threads of a member listed
 * after carry.
 */
static void pfprof_watches_release_left(struct pfprof_faults *f,
					const struct pfprof_to_watch *tgids,
					unsigned int n)
{
	struct pfprof_watch *w;
	struct hlist_node *tmp;
	unsigned int bkt, i;

	for (i = 0; i < n; i++) {
		w = pfprof_watch_of(f, tgids[i].tgid);
		if (w && w->ctx->asker == tgids[i].asker)
			w->seen = f->sync;
	}
	hash_for_each_safe(f->watches, bkt, tmp, w, node) {
		if (w->seen != f->sync)
			pfprof_watch_release(f, w);
	}
}

/*
 * Every member that can be recorded carries events, those that left
 * release theirs.  Only once the ring started: a session that never
 * starts has no sampler to release them.  @sampler: the sampler's sync,
 * the only one that retries refused processes (an ADD's would shorten
 * their wait).  Process context; takes members_lock briefly.
 */
void pfprof_faults_sync(struct pfprof_session *s, bool sampler)
{
	struct pfprof_faults *f = &s->faults;
	unsigned int i, n, pass, bkt, refused = 0, unattributed = 0;
	struct pfprof_to_watch *tgids;
	struct pfprof_watch *w;
	bool relist;

	mutex_lock(&f->lock);
	if (!f->minor_sampling || f->released ||
	    READ_ONCE(s->ring.mode) == PFPROF_MODE_NONE)
		goto out;
	f->sync++;
	f->sampler_syncs += sampler;
	tgids = pfprof_members_to_watch(s, &n, &unattributed);
	/* Without the list, keep what is there: the next sync decides. */
	if (!tgids) {
		f->unattributed = unattributed;
		goto out;
	}
	pfprof_watches_release_left(f, tgids, n);
	pfprof_watches_bound_copies(f);
	/*
	 * Again while a pass released events (a refusal): their inherited
	 * copies may have been all some member's threads had.  A watch refused
	 * is not tried again in this sync, so n + 1 passes at most.  A member's
	 * exec asks for one listing, not for more passes: an exec removes only
	 * its own process's events.
	 */
	for (pass = 0; pass <= n; pass++) {
		relist = f->dropped;
		if (!pass)
			relist |= atomic_xchg(&f->member_execd, 0);
		else if (!relist)
			break;
		f->dropped = false;
		refused = 0;
		for (i = 0; i < n; i++)
			refused += !pfprof_watch_member(f, tgids[i].tgid,
							tgids[i].asker, relist,
							sampler);
	}
	for (i = 0; i < n; i++) {
		put_pid(tgids[i].tgid);
		put_cred(tgids[i].asker);
	}
	kfree(tgids);
	/* Attributed again, but not whole: its descendants' copies went. */
	hash_for_each(f->watches, bkt, w, node)
		refused += w->copies_backoff && !w->refused;
	f->unattributed = unattributed + refused;
out:
	mutex_unlock(&f->lock);
}

/*
 * An exec left a member of @s, or a process of a member's tree, not
 * dumpable, and perf removed its events (begin_new_exec()): counted as not
 * recorded for good, since what it does after (a member until the next
 * sync gives it events again, if @s may read the new program; another
 * process after it execs back into a readable one) is counted, not
 * recorded.  Atomic: the exec probe's.
 */
void pfprof_faults_exec(struct pfprof_session *s, bool member)
{
	if (member)
		atomic_set(&s->faults.member_execd, 1);
	atomic_add_unless(&s->faults.exec_unrecorded, 1, INT_MAX);
}

/* Copies @n records to the region: claimed first, published after. */
static void pfprof_faults_publish(struct pfprof_faults *f,
				  const struct pfprof_fault *batch,
				  unsigned int n)
{
	struct pfprof_faults_area *a = f->area;
	unsigned int i;

	if (!n)
		return;
	WRITE_ONCE(a->claimed_seq, f->write_seq + n);
	/*
	 * The claim is seen before any record or count it covers changes
	 * (litmus faults-torn, faults-counts).
	 */
	smp_wmb();
	for (i = 0; i < n; i++) {
		u64 slot;

		/* div64: a 32-bit kernel has no u64 % of its own. */
		div64_u64_rem(f->write_seq + i, f->record_count, &slot);
		f->records[slot] = batch[i];
		if (batch[i].kind == PFPROF_FAULT_MAJOR)
			f->written_major++;
		else
			f->written_minor++;
	}
	WRITE_ONCE(a->written_major, f->written_major);
	WRITE_ONCE(a->written_minor, f->written_minor);
	f->write_seq += n;
	/* Records and counts before write_seq (faults-publish, faults-counts). */
	smp_store_release(&a->write_seq, f->write_seq);
}

/*
 * The sampler's, once a period before it offers the sample (and between
 * samples: sampler.c): every CPU's faults into the region, the drop counts
 * after them.
 */
void pfprof_faults_drain(struct pfprof_session *s)
{
	struct pfprof_faults *f = &s->faults;
	struct pfprof_fault batch[PFPROF_FAULT_BATCH];
	u64 dropped_major = 0, dropped_minor = 0;
	unsigned int cpu, n = 0;

	atomic_set(&f->filling, 0);
	mutex_lock(&f->lock);
	if (!f->minor_sampling || f->released) {
		mutex_unlock(&f->lock);
		return;
	}
	for_each_possible_cpu(cpu) {
		struct pfprof_cpu_faults *c = pfprof_cpu_buffer(f, cpu);
		/* Acquire: the records up to head are complete (faults-cpu-buffer). */
		u32 head = smp_load_acquire(&c->head);
		u32 tail = c->tail;

		for (; tail != head; tail++) {
			const struct pfprof_cpu_fault *r =
				&c->records[tail & (f->cpu_records - 1)];

			batch[n++] = (struct pfprof_fault){
				.time_ns = r->time_ns,
				.address = r->address,
				.pid = r->pid,
				.kind = r->kind,
				.ip = r->ip,
			};
			if (n == PFPROF_FAULT_BATCH) {
				pfprof_faults_publish(f, batch, n);
				n = 0;
			}
		}
		/* Release: copied before the handler may write them again (faults-cpu-buffer). */
		smp_store_release(&c->tail, tail);
		dropped_major += READ_ONCE(c->dropped_major);
		dropped_minor += READ_ONCE(c->dropped_minor);
	}
	pfprof_faults_publish(f, batch, n);
	WRITE_ONCE(f->area->dropped_major, dropped_major);
	WRITE_ONCE(f->area->dropped_minor, dropped_minor);
	WRITE_ONCE(f->area->unattributed,
		   f->unattributed + atomic_read(&f->exec_unrecorded));
	mutex_unlock(&f->lock);
}

static void pfprof_cpu_buffers_free(struct pfprof_faults *f)
{
	unsigned int cpu;

	if (!f->cpus)
		return;
	for_each_possible_cpu(cpu)
		kvfree(f->cpus[cpu]);
	kfree(f->cpus);
	f->cpus = NULL;
}

/* PFPROF_IOC_ATTRIBUTE: the region and buffers, then the members' events. */
int pfprof_faults_start(struct pfprof_session *s, const struct file *file,
			u32 minor_sampling)
{
	struct pfprof_faults *f = &s->faults;
	struct pfprof_faults_area *a;
	unsigned int cpu;
	int ret = 0;

	if (minor_sampling < PFPROF_MINOR_SAMPLING_MIN ||
	    minor_sampling > PFPROF_MINOR_SAMPLING_MAX)
		return -EINVAL;
	if (!pfprof_may_attribute(file))
		return -EPERM;
	mutex_lock(&f->lock);
	if (f->minor_sampling || f->released) {
		ret = -EBUSY;
		goto out;
	}
	f->size = pfprof_faults_size();
	f->record_count = div_u64(f->size - PFPROF_PAGE_SIZE,
				  sizeof(struct pfprof_fault));
	/* A power of two: the u32 positions wrap without moving a slot. */
	f->cpu_records = rounddown_pow_of_two(pfprof_fault_cpu_records);
	f->pid_ns = s->pid_ns;
	f->opener_cred = s->opener_cred;
	/* Zeroed, charged to the opener's memory cgroup, as the area is. */
	a = __vmalloc(f->size, GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!a) {
		ret = -ENOMEM;
		goto out;
	}
	f->cpus = kcalloc(nr_cpu_ids, sizeof(*f->cpus), GFP_KERNEL_ACCOUNT);
	if (!f->cpus)
		goto err_nomem;
	for_each_possible_cpu(cpu) {
		f->cpus[cpu] = kvzalloc_node(struct_size(f->cpus[cpu], records,
							 f->cpu_records),
					     GFP_KERNEL_ACCOUNT, cpu_to_node(cpu));
		if (!f->cpus[cpu])
			goto err_nomem;
	}
	a->magic = PFPROF_FAULTS_MAGIC;
	a->record_size = sizeof(struct pfprof_fault);
	a->region_size = f->size;
	a->data_offset = PFPROF_PAGE_SIZE;
	a->record_count = f->record_count;
	a->minor_sampling = minor_sampling;
	f->records = (void *)a + PFPROF_PAGE_SIZE;
	/* mmap and the fault handler of the mapping look without the lock. */
	smp_store_release(&f->area, a);
	WRITE_ONCE(f->minor_sampling, minor_sampling);
	mutex_unlock(&f->lock);
	pfprof_faults_sync(s, false);
	return 0;

err_nomem:
	pfprof_cpu_buffers_free(f);
	vfree(a);
	ret = -ENOMEM;
out:
	mutex_unlock(&f->lock);
	return ret;
}

/*
 * The session is closing, its sampler stopped: every event goes, then,
 * once no handler can be running, the buffers.  The region stays until
 * the session is freed.
 */
void pfprof_faults_release(struct pfprof_session *s)
{
	struct pfprof_faults *f = &s->faults;
	struct pfprof_watch *w;
	struct hlist_node *tmp;
	unsigned int bkt;

	mutex_lock(&f->lock);
	f->released = true;
	hash_for_each_safe(f->watches, bkt, tmp, w, node)
		pfprof_watch_release(f, w);
	mutex_unlock(&f->lock);
	/*
	 * A handler runs under rcu_read_lock() with preemption off
	 * (__perf_sw_event()): one that found an event before its release
	 * is done after a grace period, and so is any wake-up it queued.
	 */
	synchronize_rcu();
	irq_work_sync(&f->wake);
	pfprof_cpu_buffers_free(f);
}

/* The session is freed: no mapping is left. */
void pfprof_faults_exit(struct pfprof_session *s)
{
	vfree(s->faults.area);
	s->faults.area = NULL;
}
