// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: a session's sampler.
 *
 * Every session has a kthread of its own (never the system workqueue: it
 * sleeps on its own terms), so that no session's processes, however many,
 * delay another's samples.  Periods end on absolute deadlines: period k of
 * a run ends at start + k * period on CLOCK_MONOTONIC, slept to on an
 * hrtimer, so the intervals neither drift nor round to jiffies.  A run
 * starts when the first process joins; with none the sampler sleeps
 * without a timer.
 *
 * At each deadline it adds every member's change to the pending sample and
 * offers that sample to the ring.  A sample the ring
 * cannot take (strict ring full, lock held) stays pending and keeps
 * growing, so the next one covers the longer interval and nothing is lost.
 *
 * What the sampler does is the kernel's to decide: it collects at a
 * deadline or when the last process leaves, never because of anything the
 * consumer wrote or asked.  A consumer that frees a slot after a strict
 * offer failed (WAKE_PRODUCER) gets that same sample offered once more
 * before the deadline - no new collection, and at most one such wake-up
 * per period, however often it asks.  One that asked without freeing a
 * slot loses that early offer until a sample is next delivered.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/hrtimer.h>
#include <linux/ktime.h>
#include <linux/kthread.h>
#include <linux/math64.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/wait.h>

#include "compat.h"
#include "pfprof_internal.h"

void pfprof_sampler_kick(struct pfprof_session *s)
{
	wake_up(&s->sampler_wq);
}

/*
 * Some process is a member, or the members changed since the last
 * collection (@seen changes): one that left since still has its last
 * sample to write, and the ring to end, even if none is left now.
 */
static bool pfprof_sampler_has_work(struct pfprof_session *s, unsigned int seen)
{
	return pfprof_nr_members(s) || READ_ONCE(s->changes) != seen;
}

/* What ends a wait before its deadline. */
struct pfprof_wake {
	struct pfprof_session *session;
	unsigned int seen;	/* idle: member changes at the last collection */
	unsigned int pruned;	/* unstarted: member changes at the last prune */
	bool idle;		/* waiting for a process to join */
	bool unstarted;		/* waiting for the consumer to start the ring */
	bool draining;		/* the last sample is collected, not delivered */
};

static bool pfprof_woken(const struct pfprof_wake *w)
{
	struct pfprof_session *s = w->session;

	if (kthread_should_stop())
		return true;
	/* Started, or a join that may need the prune's timer. */
	if (w->unstarted)
		return READ_ONCE(s->ring.mode) != PFPROF_MODE_NONE ||
		       READ_ONCE(s->changes) != w->pruned;
	if (w->idle)
		return pfprof_sampler_has_work(s, w->seen);
	/* The last process left or is leaving: its final sample ends the ring now. */
	return (!w->draining && pfprof_last_sample_due(s)) ||
	       pfprof_ring_retry_fired(&s->ring);
}

/*
 * Sleeps until @deadline (absolute, CLOCK_MONOTONIC; KTIME_MAX: no timer)
 * or until @w says to wake.  A wake-up for nothing sleeps again until the
 * same deadline, so it cannot shift the period.
 */
static void pfprof_sleep_until(ktime_t deadline, const struct pfprof_wake *w)
{
	DEFINE_WAIT(wait);

	for (;;) {
		prepare_to_wait(&w->session->sampler_wq, &wait,
				TASK_INTERRUPTIBLE);
		if (pfprof_woken(w))
			break;
		/*
		 * No slack: the period is what the user asked for, one timer
		 * interrupt a period.  0: the timer expired; -EINTR: woken.
		 */
		if (!schedule_hrtimeout_range(&deadline, 0, HRTIMER_MODE_ABS))
			break;
	}
	finish_wait(&w->session->sampler_wq, &wait);
}

/* The first deadline after @now: those already missed are in this sample. */
static ktime_t pfprof_next_deadline(ktime_t deadline, ktime_t now, u64 period)
{
	u64 behind;

	if (ktime_before(now, deadline))
		return deadline;
	behind = ktime_to_ns(ktime_sub(now, deadline));
	return ktime_add_ns(deadline, (div64_u64(behind, period) + 1) * period);
}

static int pfprof_sampler_fn(void *data)
{
	struct pfprof_session *s = data;
	struct pfprof_ring *r = &s->ring;
	const u64 period = pfprof_period_ns();
	struct pfprof_wake wake = { .session = s };
	struct pfprof_counters pending;
	struct pfprof_memory memory;
	struct pfprof_sample sample;
	unsigned int withdrawn = 0;
	/* A collected sample the ring has not taken yet. */
	bool undelivered = false;
	/* The consumer's last WAKE_PRODUCER came with a free slot. */
	bool retry_earned = true;
	/* The ring the last sample (wake.draining) was collected for. */
	unsigned int drain_generation = 0;
	ktime_t deadline = ktime_add_ns(ktime_get(), period);
	struct mem_cgroup *charged;
	enum pfprof_put put;
	unsigned int nr;
	ktime_t now;

	/* What it allocates (the trees' maps) is its opener's. */
	charged = pfprof_memcg_charge(s->memcg);
	while (!kthread_should_stop()) {
		/*
		 * Nobody to deliver to yet: what the members do meanwhile is
		 * read at the start, so no sampling until then; only, while
		 * there are members, once a second those that are gone are
		 * freed (their final counts pending): a session never started
		 * pins no dead process.
		 */
		if (READ_ONCE(r->mode) == PFPROF_MODE_NONE) {
			wake.unstarted = true;
			wake.pruned = READ_ONCE(s->changes);
			pfprof_sleep_until(pfprof_nr_members(s) ?
					   ktime_add_ns(ktime_get(), NSEC_PER_SEC) :
					   KTIME_MAX, &wake);
			wake.unstarted = false;
			if (READ_ONCE(r->mode) == PFPROF_MODE_NONE)
				pfprof_members_prune(s);
			deadline = ktime_add_ns(ktime_get(), period);
			continue;
		}
		if (!undelivered && !pfprof_sampler_has_work(s, wake.seen)) {
			wake.idle = true;
			pfprof_sleep_until(KTIME_MAX, &wake);
			wake.idle = false;
			/* The run's first period starts as the process joins. */
			deadline = ktime_add_ns(ktime_get(), period);
			continue;
		}
		pfprof_sleep_until(deadline, &wake);
		if (kthread_should_stop())
			break;

		now = ktime_get();
		if (ktime_before(now, deadline) &&
		    (wake.draining || !pfprof_last_sample_due(s))) {
			/* The consumer freed a slot: the same sample, once more. */
			if (!pfprof_ring_take_retry(r) || !undelivered)
				continue;
			put = pfprof_ring_put(r, &sample, withdrawn,
					      wake.draining, drain_generation,
					      &s->nr_members);
			retry_earned = put != PFPROF_PUT_FULL;
			if (put == PFPROF_PUT_DONE) {
				pfprof_members_settle(s, &pending);
				undelivered = false;
				wake.draining = false;
			}
			continue;
		}
		deadline = pfprof_next_deadline(deadline, now, period);

		wake.seen = READ_ONCE(s->changes);
		nr = pfprof_members_collect(s, &pending, &memory, &withdrawn);
		if (!nr && READ_ONCE(r->canceled)) {
			/* The ring has ended: nobody takes the last sample. */
			pfprof_members_settle(s, &pending);
			undelivered = false;
			wake.draining = false;
			continue;
		}
		/*
		 * No member left, in a session that ends so: its last sample,
		 * which belongs to the ring it was collected for.
		 */
		if (!nr && !wake.draining)
			drain_generation = pfprof_ring_generation(r);
		wake.draining = !nr && pfprof_ends_when_empty(s);
		/* When the counts were read: after the collection. */
		sample.time_ns = ktime_get_ns();
		sample.minor = pending.minor;
		sample.major = pending.major;
		sample.cpu_ns = pending.cpu_ns;
		/* Levels at the period's end, not changes. */
		sample.rss_anon = memory.anon;
		sample.rss_file = memory.file;
		sample.rss_shmem = memory.shmem;
		sample.swap = memory.swap;

		put = pfprof_ring_put(r, &sample, withdrawn, wake.draining,
				      drain_generation, &s->nr_members);
		/* Full: ask for one retry, or make it now if a slot came free. */
		if (put == PFPROF_PUT_FULL && retry_earned &&
		    pfprof_ring_await_slot(r))
			put = pfprof_ring_put(r, &sample, withdrawn,
					      wake.draining, drain_generation,
					      &s->nr_members);
		/* Its ring is gone: nothing is left to end, nothing to keep. */
		if (put == PFPROF_PUT_NO_RING && wake.draining)
			put = PFPROF_PUT_DONE;
		undelivered = put != PFPROF_PUT_DONE;
		if (!undelivered) {
			pfprof_members_settle(s, &pending);
			wake.draining = false;
			retry_earned = true;
		}
	}
	pfprof_memcg_charge(charged);
	return 0;
}

/*
 * Before the session is published (session.c): no registration can kick a
 * sampler that is not there yet, nor hold a session whose start failed.
 * The sampler works for the opener, in the opener's cgroups: its CPU time
 * is the opener's, as what it allocates (pfprof_sampler_fn()).
 */
int pfprof_sampler_start(struct pfprof_session *s)
{
	struct task_struct *t;
	int ret;

	init_waitqueue_head(&s->sampler_wq);
	/* Named after the opener, as ps shows it. */
	t = kthread_create(pfprof_sampler_fn, s, "pfprof/%d",
			   task_tgid_nr(current));
	if (IS_ERR(t))
		return PTR_ERR(t);
	ret = pfprof_cgroups_join(t);
	if (ret) {
		/* Never woken: it ends without running. */
		kthread_stop(t);
		return ret;
	}
	s->sampler = t;
	wake_up_process(t);
	return 0;
}

/* Wakes the sampler from any wait (kthread_stop() wakes the task). */
void pfprof_sampler_stop(struct pfprof_session *s)
{
	kthread_stop(s->sampler);
	s->sampler = NULL;
}
