// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: a session's sampler.
 *
 * Twin: monitor/src/backend/procfs/sampler.rs, on the same deadlines.
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

/*
 * PFPROF_FAULTS_DRAIN_MS (pfprof.h), in ns.  The drain's timer may fire
 * this late, to be coalesced with others: a drain needs no precision, a
 * period does.
 */
#define PFPROF_FAULTS_DRAIN_NS		(PFPROF_FAULTS_DRAIN_MS * NSEC_PER_MSEC)
#define PFPROF_FAULTS_DRAIN_SLACK_NS	(10 * NSEC_PER_MSEC)

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
	bool recording;		/* faults were recorded when it fell asleep */
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
	/*
	 * The last process left or is leaving: its final sample ends the ring
	 * now.  Faults recorded since it fell asleep: drained between samples.
	 */
	return (!w->draining && pfprof_last_sample_due(s)) ||
	       pfprof_ring_retry_fired(&s->ring) || pfprof_faults_filling(s) ||
	       pfprof_faults_recording(s) != w->recording;
}

/*
 * Sleeps until @deadline (absolute, CLOCK_MONOTONIC; KTIME_MAX: no timer;
 * up to @slack ns later) or until @w says to wake.  A wake-up for nothing
 * sleeps again until the same deadline, so it cannot shift the period.
 */
static void pfprof_sleep_until(ktime_t deadline, u64 slack,
			       const struct pfprof_wake *w)
{
	DEFINE_WAIT(wait);

	for (;;) {
		prepare_to_wait(&w->session->sampler_wq, &wait,
				TASK_INTERRUPTIBLE);
		if (pfprof_woken(w))
			break;
		/*
		 * No slack for a period's end: the period is what the user
		 * asked for.  0: the timer expired; -EINTR: woken.
		 */
		if (!schedule_hrtimeout_range(&deadline, slack,
					      HRTIMER_MODE_ABS))
			break;
	}
	finish_wait(&w->session->sampler_wq, &wait);
}

/* The first deadline after @now: the periods missed are in the next sample. */
static ktime_t pfprof_next_deadline(ktime_t deadline, ktime_t now, u64 period)
{
	u64 behind;

	if (ktime_before(now, deadline))
		return deadline;
	behind = ktime_to_ns(ktime_sub(now, deadline));
	return ktime_add_ns(deadline, (div64_u64(behind, period) + 1) * period);
}

/* What the sampler keeps between its steps: its own, nobody else's. */
struct pfprof_sampler {
	struct pfprof_session *session;
	u64 period;
	ktime_t deadline;		/* the current period's end */
	ktime_t drain_at;		/* the faults' next drain, if sooner */
	struct pfprof_wake wake;
	struct pfprof_counters pending;	/* collected, not delivered */
	struct pfprof_sample sample;	/* the offer made of it */
	unsigned int withdrawn;
	/* A collected sample the ring has not taken yet. */
	bool undelivered;
	/* The consumer's last WAKE_PRODUCER came with a free slot. */
	bool retry_earned;
	/* The ring the last sample (wake.draining) was collected for. */
	unsigned int drain_generation;
};

/* A run starts: its first period, and the faults' first drain, from now. */
static void pfprof_sampler_restart(struct pfprof_sampler *st)
{
	ktime_t now = ktime_get();

	st->deadline = ktime_add_ns(now, st->period);
	st->drain_at = ktime_add_ns(now, PFPROF_FAULTS_DRAIN_NS);
}

/*
 * Nobody to deliver to yet: what the members do meanwhile is read at the
 * start, so no sampling until then; only, while there are members, once a
 * second those that are gone are freed (their final counts pending): a
 * session never started pins no dead process.
 */
static void pfprof_sampler_await_start(struct pfprof_sampler *st)
{
	struct pfprof_session *s = st->session;

	st->wake.unstarted = true;
	st->wake.pruned = READ_ONCE(s->changes);
	pfprof_sleep_until(pfprof_nr_members(s) ?
			   ktime_add_ns(ktime_get(), NSEC_PER_SEC) : KTIME_MAX,
			   0, &st->wake);
	st->wake.unstarted = false;
	if (READ_ONCE(s->ring.mode) == PFPROF_MODE_NONE)
		pfprof_members_prune(s);
	pfprof_sampler_restart(st);
}

/* Nothing to collect or deliver: sleeps, with no timer, until a join. */
static void pfprof_sampler_await_members(struct pfprof_sampler *st)
{
	st->wake.idle = true;
	pfprof_sleep_until(KTIME_MAX, 0, &st->wake);
	st->wake.idle = false;
	/* The run's first period starts as the process joins. */
	pfprof_sampler_restart(st);
}

/*
 * Adds every member's change to the pending sample and makes the offer of
 * it.  Returns false when there is nothing to offer: the ring has ended
 * with no member left, and nobody takes the last sample.
 */
static bool pfprof_sampler_collect(struct pfprof_sampler *st)
{
	struct pfprof_session *s = st->session;
	struct pfprof_memory memory;
	unsigned int nr;

	st->wake.seen = READ_ONCE(s->changes);
	nr = pfprof_members_collect(s, &st->pending, &memory, &st->withdrawn);
	if (!nr && READ_ONCE(s->ring.canceled)) {
		pfprof_members_settle(s, &st->pending);
		st->undelivered = false;
		st->wake.draining = false;
		return false;
	}
	/*
	 * No member left, in a session that ends so: its last sample, which
	 * belongs to the ring it was collected for.
	 */
	if (!nr && !st->wake.draining)
		st->drain_generation = pfprof_ring_generation(&s->ring);
	st->wake.draining = !nr && pfprof_ends_when_empty(s);
	/* When the counts were read: after the collection. */
	st->sample = (struct pfprof_sample){
		.time_ns = ktime_get_ns(),
		.minor = st->pending.minor,
		.major = st->pending.major,
		.cpu_ns = st->pending.cpu_ns,
		/* Levels at the period's end, not changes. */
		.rss_anon = memory.anon,
		.rss_file = memory.file,
		.rss_shmem = memory.shmem,
		.swap = memory.swap,
	};
	return true;
}

static enum pfprof_put pfprof_sampler_put(struct pfprof_sampler *st)
{
	return pfprof_ring_put(&st->session->ring, &st->sample, st->withdrawn,
			       st->wake.draining, st->drain_generation);
}

/*
 * Offers the collected sample to the ring; once delivered, its counts are
 * settled.  @early: a retry the consumer earned by freeing a slot before
 * the deadline; it fires at most once, and one asked for without a free
 * slot is not earned again until a sample is delivered.
 */
static void pfprof_sampler_offer(struct pfprof_sampler *st, bool early)
{
	struct pfprof_ring *r = &st->session->ring;
	enum pfprof_put put = pfprof_sampler_put(st);

	if (early)
		st->retry_earned = put != PFPROF_PUT_FULL;
	/* Full: ask for one retry, or make it now if a slot came free. */
	else if (put == PFPROF_PUT_FULL && st->retry_earned &&
		 pfprof_ring_await_slot(r))
		put = pfprof_sampler_put(st);
	/* Its ring is gone: nothing is left to end, nothing to keep. */
	if (put == PFPROF_PUT_NO_RING && st->wake.draining)
		put = PFPROF_PUT_DONE;
	st->undelivered = put != PFPROF_PUT_DONE;
	if (!st->undelivered) {
		pfprof_members_settle(st->session, &st->pending);
		st->wake.draining = false;
		st->retry_earned = true;
	}
}

/* Whether the faults are drained between samples too: a long period's. */
static bool pfprof_sampler_drains_between(const struct pfprof_sampler *st)
{
	return st->period > PFPROF_FAULTS_DRAIN_NS &&
	       pfprof_faults_recording(st->session);
}

/*
 * When to wake, and how much later the timer may fire: the period's end,
 * or the faults' drain when that comes sooner by more than its slack (the
 * period's end drains them anyway).
 */
static ktime_t pfprof_sampler_wake_at(const struct pfprof_sampler *st,
				      u64 *slack)
{
	ktime_t latest = ktime_add_ns(st->drain_at,
				      PFPROF_FAULTS_DRAIN_SLACK_NS);

	*slack = 0;
	if (!pfprof_sampler_drains_between(st) ||
	    !ktime_before(latest, st->deadline))
		return st->deadline;
	*slack = PFPROF_FAULTS_DRAIN_SLACK_NS;
	return st->drain_at;
}

/* Whether the faults' drain between samples is due at @now. */
static bool pfprof_sampler_drain_due(const struct pfprof_sampler *st,
				     ktime_t now)
{
	return pfprof_sampler_drains_between(st) &&
	       !ktime_before(now, st->drain_at) &&
	       ktime_before(now, st->deadline);
}

/* Hands the faults recorded so far to the region; the next drain is due later. */
static void pfprof_sampler_drain(struct pfprof_sampler *st, ktime_t now)
{
	pfprof_faults_drain(st->session);
	st->drain_at = ktime_add_ns(now, PFPROF_FAULTS_DRAIN_NS);
}

/*
 * Woken before the deadline, and not for the last sample: only a retry
 * the consumer earned offers the same sample once more.
 */
static bool pfprof_sampler_early(struct pfprof_sampler *st, ktime_t now)
{
	return ktime_before(now, st->deadline) &&
	       (st->wake.draining || !pfprof_last_sample_due(st->session));
}

static int pfprof_sampler_fn(void *data)
{
	struct pfprof_session *s = data;
	struct pfprof_sampler st = {
		.session = s,
		.period = pfprof_period_ns(),
		.wake = { .session = s },
		.retry_earned = true,
	};
	struct mem_cgroup *charged;
	ktime_t now, wake_at;
	bool collected;
	u64 slack;

	pfprof_sampler_restart(&st);
	/* What it allocates (the kin its walks make) is its opener's. */
	charged = pfprof_memcg_charge(s->memcg);
	while (!kthread_should_stop()) {
		if (READ_ONCE(s->ring.mode) == PFPROF_MODE_NONE) {
			pfprof_sampler_await_start(&st);
			continue;
		}
		if (!st.undelivered && !pfprof_sampler_has_work(s, st.wake.seen)) {
			pfprof_sampler_await_members(&st);
			continue;
		}
		st.wake.recording = pfprof_faults_recording(s);
		wake_at = pfprof_sampler_wake_at(&st, &slack);
		pfprof_sleep_until(wake_at, slack, &st.wake);
		if (kthread_should_stop())
			break;
		now = ktime_get();
		/*
		 * A CPU's buffer of faults half full (emptied now, not lost), or
		 * their drain between samples due.
		 */
		if (pfprof_faults_filling(s) || pfprof_sampler_drain_due(&st, now))
			pfprof_sampler_drain(&st, now);
		if (pfprof_sampler_early(&st, now)) {
			if (pfprof_ring_take_retry(&s->ring) && st.undelivered)
				pfprof_sampler_offer(&st, true);
			continue;
		}
		collected = pfprof_sampler_collect(&st);
		/* Members that joined carry events, those that left none. */
		pfprof_faults_sync(s, true);
		if (collected) {
			/* A sample's consumer finds its period's faults. */
			pfprof_sampler_drain(&st, ktime_get());
			pfprof_sampler_offer(&st, false);
		}
		/*
		 * The first deadline still ahead once the work is done: a
		 * collection slower than the period (many members, a debug
		 * kernel, a CPU shared with busy loops) would otherwise find
		 * its deadline passed every time and collect back to back,
		 * never sleeping.  The deadlines skipped are in the next
		 * sample.
		 */
		st.deadline = pfprof_next_deadline(st.deadline, ktime_get(),
						   st.period);
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
