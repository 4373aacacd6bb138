// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the sampler.
 *
 * A kthread of its own (never the system workqueue: it sleeps on its own
 * terms).  Periods end on absolute deadlines: period k of a run ends at
 * start + k * period on CLOCK_MONOTONIC, slept to on an hrtimer, so the
 * intervals neither drift nor round to jiffies.  A run starts when somebody
 * registers; with nobody registered the sampler sleeps without a timer.
 *
 * At each deadline it adds every registered process's change to the
 * pending sample and offers that sample to the ring.  A sample the ring
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
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/seqlock.h>
#include <linux/wait.h>

#include "pfprof_internal.h"

static struct task_struct *pfprof_sampler;
static DECLARE_WAIT_QUEUE_HEAD(pfprof_sampler_wq);

/*
 * Totals of the process whose group leader is @leader, read the way
 * do_task_stat() and thread_group_cputime() read them and without writing
 * anything: the signal struct holds what exited threads took (added by
 * __exit_signal() under stats_lock, in the same section that unlinks the
 * thread), each live thread holds its own.  CPU time is sum_exec_runtime in
 * nanoseconds: what utime + stime of wait4() add up to.  Returns false once
 * every thread has been released: the totals are then final.
 *
 * The caller's reference on @leader keeps ->signal alive.
 */
bool pfprof_read_totals(struct task_struct *leader, struct pfprof_totals *t)
{
	struct signal_struct *sig = leader->signal;
	struct task_struct *th;
	unsigned long flags;
	int seq, nextseq = 0;
	bool alive;

	rcu_read_lock();
	do {
		seq = nextseq;
		flags = read_seqbegin_or_lock_irqsave(&sig->stats_lock, &seq);
		t->minor = sig->min_flt;
		t->major = sig->maj_flt;
		t->cpu_ns = sig->sum_sched_runtime;
		__for_each_thread(sig, th) {
			t->minor += READ_ONCE(th->min_flt);
			t->major += READ_ONCE(th->maj_flt);
			t->cpu_ns += READ_ONCE(th->se.sum_exec_runtime);
		}
		alive = !list_empty(&sig->thread_head);
		/* If the lockless pass raced a writer, retry holding the lock. */
		nextseq = 1;
	} while (need_seqretry(&sig->stats_lock, seq));
	done_seqretry_irqrestore(&sig->stats_lock, seq, flags);
	rcu_read_unlock();
	return alive;
}

void pfprof_sampler_kick(void)
{
	wake_up(&pfprof_sampler_wq);
}

/*
 * Somebody is registered, or the set changed since the last collection
 * (@seen changes): a process that left since still has its last sample to
 * write, and the session to end, even if nobody is registered now.
 */
static bool pfprof_sampler_has_work(unsigned int seen)
{
	return pfprof_nr_registered() || pfprof_reg_changes() != seen;
}

/* What ends a wait before its deadline. */
struct pfprof_wake {
	unsigned int seen;	/* idle: registration changes at the last collection */
	bool idle;		/* waiting for somebody to register */
	bool draining;		/* the last sample is collected, not delivered */
};

static bool pfprof_woken(const struct pfprof_wake *w)
{
	if (kthread_should_stop())
		return true;
	if (w->idle)
		return pfprof_sampler_has_work(w->seen);
	/* The last process left: its final sample ends the session now. */
	return (!w->draining && !pfprof_nr_registered()) ||
	       pfprof_ring_retry_fired();
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
		prepare_to_wait(&pfprof_sampler_wq, &wait, TASK_INTERRUPTIBLE);
		if (pfprof_woken(w))
			break;
		/*
		 * No slack: the period is what the user asked for, one timer
		 * interrupt a period.  0: the timer expired; -EINTR: woken.
		 */
		if (!schedule_hrtimeout_range(&deadline, 0, HRTIMER_MODE_ABS))
			break;
	}
	finish_wait(&pfprof_sampler_wq, &wait);
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

static int pfprof_sampler_fn(void *unused)
{
	const u64 period = pfprof_period_ns();
	struct pfprof_wake wake = {};
	struct pfprof_totals pending;
	struct pfprof_sample sample;
	/* A collected sample the ring has not taken yet. */
	bool undelivered = false;
	/* The consumer's last WAKE_PRODUCER came with a free slot. */
	bool retry_earned = true;
	/* The session the last sample (wake.draining) was collected for. */
	unsigned int drain_session = 0;
	ktime_t deadline = ktime_add_ns(ktime_get(), period);
	enum pfprof_put put;
	unsigned int nr;
	ktime_t now;

	while (!kthread_should_stop()) {
		if (!undelivered && !pfprof_sampler_has_work(wake.seen)) {
			wake.idle = true;
			pfprof_sleep_until(KTIME_MAX, &wake);
			wake.idle = false;
			/* The run's first period starts at the registration. */
			deadline = ktime_add_ns(ktime_get(), period);
			continue;
		}
		pfprof_sleep_until(deadline, &wake);
		if (kthread_should_stop())
			break;

		now = ktime_get();
		if (ktime_before(now, deadline) &&
		    (wake.draining || pfprof_nr_registered())) {
			/* The consumer freed a slot: the same sample, once more. */
			if (!pfprof_ring_take_retry() || !undelivered)
				continue;
			put = pfprof_ring_put(&sample, wake.draining,
					      drain_session);
			retry_earned = put != PFPROF_PUT_FULL;
			if (put == PFPROF_PUT_DONE) {
				pfprof_reg_settle(&pending);
				undelivered = false;
				wake.draining = false;
			}
			continue;
		}
		deadline = pfprof_next_deadline(deadline, now, period);

		wake.seen = pfprof_reg_changes();
		nr = pfprof_reg_collect(&pending);
		if (!nr && !pfprof_ring_open()) {
			/* Nobody to deliver the last sample to: drop it. */
			pfprof_reg_settle(&pending);
			undelivered = false;
			wake.draining = false;
			continue;
		}
		/* A last sample belongs to the session it was collected for. */
		if (!nr && !wake.draining)
			drain_session = pfprof_ring_session();
		wake.draining = !nr;
		/* When the counts were read: after the collection. */
		sample.time_ns = ktime_get_ns();
		sample.minor = pending.minor;
		sample.major = pending.major;
		sample.cpu_ns = pending.cpu_ns;

		put = pfprof_ring_put(&sample, wake.draining, drain_session);
		/* Full: ask for one retry, or make it now if a slot came free. */
		if (put == PFPROF_PUT_FULL && retry_earned &&
		    pfprof_ring_await_slot())
			put = pfprof_ring_put(&sample, wake.draining,
					      drain_session);
		/* Its session is gone: nobody is left to end, nothing to keep. */
		if (put == PFPROF_PUT_NO_SESSION && wake.draining)
			put = PFPROF_PUT_DONE;
		undelivered = put != PFPROF_PUT_DONE;
		if (!undelivered) {
			pfprof_reg_settle(&pending);
			wake.draining = false;
			retry_earned = true;
		}
	}
	return 0;
}

int pfprof_sampler_start(void)
{
	struct task_struct *t;

	t = kthread_run(pfprof_sampler_fn, NULL, "pfprof-sampler");
	if (IS_ERR(t))
		return PTR_ERR(t);
	pfprof_sampler = t;
	return 0;
}

/* Wakes the sampler from any wait (kthread_stop() wakes the task). */
void pfprof_sampler_stop(void)
{
	kthread_stop(pfprof_sampler);
	pfprof_sampler = NULL;
}
