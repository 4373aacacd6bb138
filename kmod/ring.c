// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: a session's shared area and the protocol running over it.
 *
 * Twin: shared-layout/src/producer.rs, the same protocol's producer in
 * user space (the procfs backend's).
 *
 * Each session allocates its own area when /dev/pfprof is opened and frees
 * it when the file is released, after the last mapping is gone: no area
 * ever serves two sessions.  The ring starts when the consumer selects a
 * mode (the control page is reinitialized).  Everything that decides where
 * the module writes (write sequence, geometry, mode, cancellation) is kept
 * in kernel memory and only published to the area: see "Trust" in pfprof.h.  Words
 * the consumer writes are read once and only decide whether to write a
 * slot now or later; every wait on them is bounded.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/atomic.h>
#include <linux/build_bug.h>
#include <linux/lockdep.h>
#include <linux/math64.h>
#include <linux/mutex.h>
#include <linux/poll.h>
#include <linux/sched/clock.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/vmalloc.h>
#include <linux/wait.h>

#include "pfprof_internal.h"

/* A consumer rewriting a count without end cannot keep us in a CAS loop. */
#define PFPROF_SEM_TRIES	64

/*
 * Strict, after an offer found no free slot: the sampler may be offered one
 * retry before its next deadline, fired by the consumer's WAKE_PRODUCER.
 */
enum pfprof_retry {
	PFPROF_RETRY_NONE,
	PFPROF_RETRY_ARMED,	/* empty.waiters set, waiting for the consumer */
	PFPROF_RETRY_FIRED,	/* the consumer asked: the sampler offers once */
};

int pfprof_ring_init(struct pfprof_ring *r)
{
	BUILD_BUG_ON(PAGE_SIZE != PFPROF_PAGE_SIZE);
	BUILD_BUG_ON(sizeof(struct pfprof_area) > PFPROF_DATA_OFFSET);
	BUILD_BUG_ON(sizeof(atomic_t) != sizeof(((struct pfprof_sem *)0)->count));

	r->size = PFPROF_AREA_SIZE(pfprof_buffer_pages);
	r->slot_count = (r->size - PFPROF_DATA_OFFSET) /
			sizeof(struct pfprof_sample);
	/* Zeroed, and charged to the opener's memory cgroup. */
	r->area = __vmalloc(r->size, GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!r->area)
		return -ENOMEM;
	r->slots = (void *)r->area + PFPROF_DATA_OFFSET;
	mutex_init(&r->lock);
	init_waitqueue_head(&r->consumer_wq);
	atomic_set(&r->retry, PFPROF_RETRY_NONE);
	return 0;
}

/*
 * No mapping is left (each holds the file) and the sampler is stopped.
 * Nobody can have pinned the area's pages (chardev.c maps them by page
 * frame), so they go with it: no other session ever gets them.
 */
void pfprof_ring_exit(struct pfprof_ring *r)
{
	vfree(r->area);
	r->area = NULL;
}

static void pfprof_cancel_locked(struct pfprof_ring *r);

/*
 * The consumer wakes up and looks again: the ring it knew is gone.  The
 * sampler needs no telling: it offers its sample at its next deadline.
 */
static void pfprof_ring_wake_consumer(struct pfprof_ring *r)
{
	wake_up_interruptible(&r->consumer_wq);
}

/*
 * A process joins: the session's count grows under the ring's lock unless
 * the ring has ended, so that a join cannot slip between the last sample's
 * look at the count and the end (pfprof_ring_put()).
 */
bool pfprof_ring_admit(struct pfprof_ring *r)
{
	bool open;

	mutex_lock(&r->lock);
	open = !r->canceled;
	if (open)
		WRITE_ONCE(r->members, r->members + 1);
	mutex_unlock(&r->lock);
	return open;
}

/* A process admitted is no member any more. */
void pfprof_ring_depart(struct pfprof_ring *r)
{
	mutex_lock(&r->lock);
	WRITE_ONCE(r->members, r->members - 1);
	mutex_unlock(&r->lock);
}

/* Names the running ring: it changes when one starts or ends. */
unsigned int pfprof_ring_generation(struct pfprof_ring *r)
{
	return READ_ONCE(r->generation);
}

/*
 * The consumer selected @mode: the ring starts afresh (the whole control
 * page reinitialized), and ends at once when @end (a session that ended
 * before it counted anything: nothing is to be delivered).
 */
void pfprof_ring_start(struct pfprof_ring *r, u32 mode, bool end)
{
	struct pfprof_area *a = r->area;

	mutex_lock(&r->lock);
	memset(a, 0, PFPROF_DATA_OFFSET);
	a->magic = PFPROF_MAGIC;
	a->abi_version = PFPROF_ABI_VERSION;
	a->mode = mode;
	a->sample_size = sizeof(struct pfprof_sample);
	a->area_size = r->size;
	a->data_offset = PFPROF_DATA_OFFSET;
	a->slot_count = r->slot_count;
	a->period_ns = pfprof_period_ns();
	a->lock = PFPROF_LOCK_FREE;
	a->empty.count = r->slot_count;

	WRITE_ONCE(r->mode, mode);
	WRITE_ONCE(r->canceled, false);
	WRITE_ONCE(r->generation, r->generation + 1);
	WRITE_ONCE(r->write_seq, 0);
	r->slot_reserved = false;
	r->overwritten = 0;
	r->blocked_ns = 0;
	r->full_since = 0;
	r->deferred = 0;
	atomic_set(&r->retry, PFPROF_RETRY_NONE);
	if (end)
		pfprof_cancel_locked(r);
	mutex_unlock(&r->lock);
	pfprof_ring_wake_consumer(r);
}

/* down(): take one unit unless the count is zero; never below zero. */
static bool pfprof_sem_try_down(u32 *count)
{
	u32 old = READ_ONCE(*count);
	int tries;

	for (tries = 0; old && tries < PFPROF_SEM_TRIES; tries++) {
		/*
		 * Fully ordered, though the slot needs no more than the lock:
		 * it is written only once this and the lock succeeded (litmus
		 * strict-reuse says Never without it).
		 */
		u32 seen = cmpxchg(count, old, old - 1);

		if (seen == old)
			return true;
		old = seen;
	}
	return false;
}

/* up(full) and wake the consumer, whatever full.waiters says. */
static void pfprof_sem_up_full(struct pfprof_ring *r)
{
	struct pfprof_area *a = r->area;

	/*
	 * Fully ordered: the sample (and, strict, canceled after it) is
	 * published before the count by this or by the lock's release
	 * (litmus strict-publish, strict-cancel need one of the two).  The
	 * xchg only clears waiters: the consumer sleeps in WAIT_FULL and is
	 * woken below whatever waiters says.
	 */
	atomic_inc_return((atomic_t *)&a->full.count);
	xchg(&a->full.waiters, 0);
	wake_up_interruptible(&r->consumer_wq);
}

/* Bounded test-and-set: a consumer that dies holding it cannot hang us. */
static bool pfprof_lock_try(u32 *lock)
{
	u64 deadline = local_clock() + PFPROF_LOCK_SPIN_NS;

	do {
		/* Acquire: litmus relaxed-overwritten. */
		if (READ_ONCE(*lock) == PFPROF_LOCK_FREE &&
		    cmpxchg_acquire(lock, PFPROF_LOCK_FREE,
				    PFPROF_LOCK_PRODUCER) == PFPROF_LOCK_FREE)
			return true;
		cpu_relax();
	} while (local_clock() < deadline);
	return false;
}

static void pfprof_lock_release(u32 *lock)
{
	/* Litmus relaxed-torn, relaxed-overwritten. */
	smp_store_release(lock, PFPROF_LOCK_FREE);
}

static void pfprof_defer(struct pfprof_ring *r)
{
	WRITE_ONCE(r->area->deferred, ++r->deferred);
}

/* Writes the slot of the next sequence number; the lock is held. */
static void pfprof_write_slot(struct pfprof_ring *r,
			      const struct pfprof_sample *s)
{
	struct pfprof_sample *slot;
	u64 idx;

	div64_u64_rem(r->write_seq, r->slot_count, &idx);
	slot = &r->slots[idx];
	WRITE_ONCE(slot->time_ns, s->time_ns);
	WRITE_ONCE(slot->minor, s->minor);
	WRITE_ONCE(slot->major, s->major);
	WRITE_ONCE(slot->cpu_ns, s->cpu_ns);
	WRITE_ONCE(slot->rss_anon, s->rss_anon);
	WRITE_ONCE(slot->rss_file, s->rss_file);
	WRITE_ONCE(slot->rss_shmem, s->rss_shmem);
	WRITE_ONCE(slot->swap, s->swap);
	WRITE_ONCE(r->write_seq, r->write_seq + 1);
	/*
	 * Pairs with the consumer's acquire of write_seq: slot first.  The
	 * lock's release orders it as well (litmus relaxed-publish,
	 * relaxed-torn need one of the two).
	 */
	smp_store_release(&r->area->write_seq, r->write_seq);
}

/*
 * Strict: the time from the first offer the ring refused to the delivery,
 * published as it grows, so a consumer sees a producer that is blocked now.
 */
static void pfprof_account_blocked(struct pfprof_ring *r, bool delivered)
{
	u64 now = ktime_get_ns();

	lockdep_assert_held(&r->lock);
	if (!r->full_since)
		r->full_since = now;
	WRITE_ONCE(r->area->blocked_ns, r->blocked_ns + (now - r->full_since));
	if (delivered) {
		r->blocked_ns += now - r->full_since;
		r->full_since = 0;
	}
}

static enum pfprof_put pfprof_put_strict(struct pfprof_ring *r,
					 const struct pfprof_sample *s)
{
	struct pfprof_area *a = r->area;

	lockdep_assert_held(&r->lock);
	if (!r->slot_reserved) {
		if (!pfprof_sem_try_down(&a->empty.count)) {
			pfprof_account_blocked(r, false);
			return PFPROF_PUT_FULL;
		}
		r->slot_reserved = true;
	}
	if (!pfprof_lock_try(&a->lock)) {
		pfprof_defer(r);
		return PFPROF_PUT_DEFERRED;
	}
	pfprof_write_slot(r, s);
	pfprof_lock_release(&a->lock);
	r->slot_reserved = false;
	pfprof_sem_up_full(r);
	if (r->full_since)
		pfprof_account_blocked(r, true);
	/* A retry asked for and not needed any more. */
	if (atomic_xchg(&r->retry, PFPROF_RETRY_NONE) != PFPROF_RETRY_NONE)
		WRITE_ONCE(a->empty.waiters, 0);
	return PFPROF_PUT_DONE;
}

static enum pfprof_put pfprof_put_relaxed(struct pfprof_ring *r,
					  const struct pfprof_sample *s)
{
	struct pfprof_area *a = r->area;

	lockdep_assert_held(&r->lock);
	if (!pfprof_lock_try(&a->lock)) {
		pfprof_defer(r);
		return PFPROF_PUT_DEFERRED;
	}
	/* Advisory: read_seq is whatever the consumer wrote. */
	if (r->write_seq >= READ_ONCE(a->read_seq) + r->slot_count)
		WRITE_ONCE(a->overwritten, ++r->overwritten);
	pfprof_write_slot(r, s);
	pfprof_lock_release(&a->lock);
	wake_up_interruptible(&r->consumer_wq);
	return PFPROF_PUT_DONE;
}

/* End the ring: nothing follows the sample just written. */
static void pfprof_cancel_locked(struct pfprof_ring *r)
{
	lockdep_assert_held(&r->lock);
	WRITE_ONCE(r->canceled, true);
	/*
	 * Pairs with the consumer's acquire: last sample first.  The lock's
	 * release (relaxed) and up(full) (strict) order it as well (litmus
	 * relaxed-cancel, strict-cancel need one of the two).  The xchg only
	 * clears waiters: the callers wake the consumer's wait queue.
	 */
	smp_store_release(&r->area->canceled, 1);
	xchg(&r->area->full.waiters, 0);
}

/*
 * PFPROF_IOC_END of a session that never counted a process: nothing is to
 * be delivered, the ring ends now (or as it starts).
 */
void pfprof_ring_cancel(struct pfprof_ring *r)
{
	mutex_lock(&r->lock);
	if (r->mode != PFPROF_MODE_NONE)
		pfprof_cancel_locked(r);
	mutex_unlock(&r->lock);
	pfprof_ring_wake_consumer(r);
}

/*
 * Offer @sample to the ring, with how many processes were withdrawn so far
 * (published).  @last: the session had no process left when it was
 * collected for the ring @generation, so once it is written the ring ends -
 * in the same critical section, so that the end can only reach the ring
 * that received the sample; one started since gets neither the sample nor
 * the end - unless *@members, the session's member count (grown only under
 * this lock, pfprof_ring_admit()), says a process joined since the
 * collection: that keeps the ring going.
 */
enum pfprof_put pfprof_ring_put(struct pfprof_ring *r,
				const struct pfprof_sample *sample,
				unsigned int withdrawn, bool last,
				unsigned int generation)
{
	enum pfprof_put ret;

	mutex_lock(&r->lock);
	if (r->mode != PFPROF_MODE_NONE)
		WRITE_ONCE(r->area->withdrawn, withdrawn);
	if (r->mode == PFPROF_MODE_NONE || r->canceled ||
	    (last && generation != r->generation))
		ret = PFPROF_PUT_NO_RING;
	else if (r->mode == PFPROF_MODE_STRICT)
		ret = pfprof_put_strict(r, sample);
	else
		ret = pfprof_put_relaxed(r, sample);
	if (ret == PFPROF_PUT_DONE && last && !r->members)
		pfprof_cancel_locked(r);
	mutex_unlock(&r->lock);
	if (ret == PFPROF_PUT_DONE && last)
		pfprof_ring_wake_consumer(r);
	return ret;
}

/*
 * Strict, an offer found no free slot: ask the consumer to say when it
 * frees one (empty.waiters, the Dekker handshake in pfprof.h).  Returns
 * true when a slot is free already, so the caller offers again at once;
 * otherwise the consumer's WAKE_PRODUCER may fire one retry.
 */
bool pfprof_ring_await_slot(struct pfprof_ring *r)
{
	struct pfprof_area *a = r->area;
	bool free_now = false;

	mutex_lock(&r->lock);
	if (r->mode == PFPROF_MODE_STRICT && !r->canceled) {
		atomic_set(&r->retry, PFPROF_RETRY_ARMED);
		/*
		 * The consumer that sees waiters sees the retry armed (litmus
		 * strict-retry-armed: the smp_mb() orders it as well).
		 */
		smp_store_release(&a->empty.waiters, 1);
		/*
		 * Pairs with the consumer's SeqCst up(empty) and load of
		 * waiters (litmus strict-empty-waiters).
		 */
		smp_mb();
		free_now = READ_ONCE(a->empty.count);
		if (free_now) {
			atomic_set(&r->retry, PFPROF_RETRY_NONE);
			WRITE_ONCE(a->empty.waiters, 0);
		}
	}
	mutex_unlock(&r->lock);
	return free_now;
}

/* The consumer fired the retry; the sampler has not taken it yet. */
bool pfprof_ring_retry_fired(struct pfprof_ring *r)
{
	return atomic_read(&r->retry) == PFPROF_RETRY_FIRED;
}

/* Takes a fired retry: true once per WAKE_PRODUCER that found one armed. */
bool pfprof_ring_take_retry(struct pfprof_ring *r)
{
	return atomic_cmpxchg(&r->retry, PFPROF_RETRY_FIRED,
			      PFPROF_RETRY_NONE) == PFPROF_RETRY_FIRED;
}

static bool pfprof_full_ready(struct pfprof_ring *r, unsigned int gen)
{
	return READ_ONCE(r->area->full.count) || READ_ONCE(r->canceled) ||
	       READ_ONCE(r->generation) != gen;
}

/* Strict consumer: sleep until a sample is ready or the ring ends. */
int pfprof_ring_wait_full(struct pfprof_ring *r, long timeout)
{
	unsigned int gen = READ_ONCE(r->generation);
	long ret;

	if (READ_ONCE(r->mode) != PFPROF_MODE_STRICT)
		return -EINVAL;
	ret = wait_event_interruptible_timeout(r->consumer_wq,
					       pfprof_full_ready(r, gen),
					       timeout);
	if (ret < 0)
		return -EINTR;
	return ret ? 0 : -ETIMEDOUT;
}

/*
 * The strict consumer's WAKE_PRODUCER: fires an armed retry, and only
 * once: returns 1 when the sampler is to be woken, 0 when not, and a
 * consumer asking again and again cannot make it wake, let alone collect,
 * more often.
 */
int pfprof_ring_wake_producer(struct pfprof_ring *r)
{
	if (READ_ONCE(r->mode) != PFPROF_MODE_STRICT)
		return -EINVAL;
	/* Litmus strict-retry-armed: one word, only its atomicity counts. */
	return atomic_cmpxchg(&r->retry, PFPROF_RETRY_ARMED,
			      PFPROF_RETRY_FIRED) == PFPROF_RETRY_ARMED;
}

__poll_t pfprof_ring_poll_mask(struct pfprof_ring *r)
{
	u32 mode = READ_ONCE(r->mode);
	__poll_t mask = 0;
	bool ready;

	if (mode == PFPROF_MODE_NONE)
		return 0;
	if (mode == PFPROF_MODE_STRICT)
		ready = READ_ONCE(r->area->full.count);
	else
		ready = READ_ONCE(r->write_seq) !=
			READ_ONCE(r->area->read_seq);
	if (ready)
		mask |= EPOLLIN | EPOLLRDNORM;
	if (READ_ONCE(r->canceled))
		mask |= EPOLLHUP;
	return mask;
}
