// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the sampler.
 *
 * A kthread of its own (never the system workqueue: in strict mode it may
 * wait for the consumer).  Every period it adds each registered process's
 * change to the pending sample and offers that sample to the ring.  A
 * sample the ring cannot take now (strict ring full, lock held) stays
 * pending and keeps growing, so the next one covers the longer interval
 * and nothing is lost.  With nobody registered it sleeps until somebody is.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/err.h>
#include <linux/jiffies.h>
#include <linux/kthread.h>
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
	return pfprof_nr_registered() || pfprof_reg_changes() != seen ||
	       kthread_should_stop();
}

static int pfprof_sampler_fn(void *unused)
{
	long period = msecs_to_jiffies(pfprof_period_ms);
	struct pfprof_sample sample;
	struct pfprof_totals pending;
	/* Nobody is registered but the last sample is not written yet. */
	bool draining = false;
	bool retry = false;
	/* Registration changes before the last collection. */
	unsigned int seen = 0;
	unsigned int nr;

	while (!kthread_should_stop()) {
		if (!retry) {
			if (!draining && !pfprof_sampler_has_work(seen)) {
				/* Idle: the period starts at the registration. */
				wait_event_interruptible(pfprof_sampler_wq,
							 pfprof_sampler_has_work(seen));
				continue;
			}
			/* The last unregistration ends the period early. */
			wait_event_interruptible_timeout(pfprof_sampler_wq,
							 kthread_should_stop() ||
							 (!draining &&
							  !pfprof_nr_registered()),
							 period);
			if (kthread_should_stop())
				break;
		}
		retry = false;

		seen = pfprof_reg_changes();
		nr = pfprof_reg_collect(&pending);
		if (!nr && !pfprof_ring_open()) {
			/* Nobody to deliver the last sample to: drop it. */
			pfprof_reg_settle(&pending);
			draining = false;
			continue;
		}
		draining = !nr;

		sample.time_ns = ktime_get_ns();
		sample.minor = pending.minor;
		sample.major = pending.major;
		sample.cpu_ns = pending.cpu_ns;
		switch (pfprof_ring_put(&sample, draining)) {
		case PFPROF_PUT_DONE:
			pfprof_reg_settle(&pending);
			draining = false;
			break;
		case PFPROF_PUT_FULL:
			/*
			 * Counts keep accumulating while we wait for a slot;
			 * retry at once only after a real sleep.
			 */
			retry = pfprof_ring_wait_empty(period);
			break;
		case PFPROF_PUT_NO_SESSION:
		case PFPROF_PUT_DEFERRED:
			break;
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
