// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: the shared area and the session running over it.
 *
 * The area is allocated once at load.  A session starts when the consumer
 * selects a mode (the control page is reinitialized) and ends when it
 * closes the device.  Everything that decides where the module writes
 * (write sequence, geometry, mode, cancellation) is kept here in kernel
 * memory and only published to the area: see "Trust" in pfprof.h.  Words
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

/* How long the producer tries for the shared lock before deferring. */
#define PFPROF_LOCK_SPIN_NS	(10 * NSEC_PER_USEC)
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

static struct {
	struct pfprof_area *area;	/* control page, then the slots */
	struct pfprof_sample *slots;
	u64 size;
	u64 slot_count;

	/* Serializes session changes and writes to the area. */
	struct mutex lock;
	/* Written under lock, read locklessly with READ_ONCE(). */
	u32 mode;			/* PFPROF_MODE_NONE: no session */
	bool canceled;
	unsigned int generation;	/* bumped when a session starts or ends */
	u64 write_seq;
	/* Under lock only. */
	bool slot_reserved;		/* strict: empty downed, slot not written */
	u64 overwritten;
	u64 blocked_ns;
	u64 full_since;			/* strict: first refused offer, 0: none */
	u64 deferred;
	atomic_t retry;			/* enum pfprof_retry */

	wait_queue_head_t consumer_wq;	/* WAIT_FULL and poll */
} ring;

void *pfprof_ring_area(void)
{
	return ring.area;
}

u64 pfprof_ring_size(void)
{
	return ring.size;
}

u64 pfprof_ring_slot_count(void)
{
	return ring.slot_count;
}

struct wait_queue_head *pfprof_ring_consumer_wq(void)
{
	return &ring.consumer_wq;
}

int pfprof_ring_init(void)
{
	BUILD_BUG_ON(PAGE_SIZE != PFPROF_PAGE_SIZE);
	BUILD_BUG_ON(sizeof(struct pfprof_area) > PFPROF_DATA_OFFSET);
	BUILD_BUG_ON(sizeof(atomic_t) != sizeof(((struct pfprof_sem *)0)->count));

	ring.size = PFPROF_AREA_SIZE(pfprof_buffer_pages);
	ring.slot_count = (ring.size - PFPROF_DATA_OFFSET) /
			  sizeof(struct pfprof_sample);
	/* Zeroed, and flagged VM_USERMAP for remap_vmalloc_range(). */
	ring.area = vmalloc_user(ring.size);
	if (!ring.area)
		return -ENOMEM;
	ring.slots = (void *)ring.area + PFPROF_DATA_OFFSET;
	mutex_init(&ring.lock);
	init_waitqueue_head(&ring.consumer_wq);
	return 0;
}

void pfprof_ring_exit(void)
{
	vfree(ring.area);
	ring.area = NULL;
}

/*
 * The consumer wakes up and looks again: the session it knew is gone.  The
 * sampler needs no telling: it offers its sample at its next deadline.
 */
static void pfprof_ring_wake_consumer(void)
{
	wake_up_interruptible(&ring.consumer_wq);
}

/* Names the running session: it changes when one starts or ends. */
unsigned int pfprof_ring_session(void)
{
	return READ_ONCE(ring.generation);
}

void pfprof_ring_start(u32 mode)
{
	struct pfprof_area *a = ring.area;

	mutex_lock(&ring.lock);
	memset(a, 0, PFPROF_DATA_OFFSET);
	a->magic = PFPROF_MAGIC;
	a->abi_version = PFPROF_ABI_VERSION;
	a->mode = mode;
	a->sample_size = sizeof(struct pfprof_sample);
	a->area_size = ring.size;
	a->data_offset = PFPROF_DATA_OFFSET;
	a->slot_count = ring.slot_count;
	a->period_ns = pfprof_period_ns();
	a->lock = PFPROF_LOCK_FREE;
	a->empty.count = ring.slot_count;

	WRITE_ONCE(ring.mode, mode);
	WRITE_ONCE(ring.canceled, false);
	WRITE_ONCE(ring.generation, ring.generation + 1);
	WRITE_ONCE(ring.write_seq, 0);
	ring.slot_reserved = false;
	ring.overwritten = 0;
	ring.blocked_ns = 0;
	ring.full_since = 0;
	ring.deferred = 0;
	atomic_set(&ring.retry, PFPROF_RETRY_NONE);
	mutex_unlock(&ring.lock);
	pfprof_ring_wake_consumer();
}

/*
 * Called from release() only, before the device can be opened again: no
 * session can start until it returns.
 */
void pfprof_ring_stop(void)
{
	mutex_lock(&ring.lock);
	WRITE_ONCE(ring.mode, PFPROF_MODE_NONE);
	atomic_set(&ring.retry, PFPROF_RETRY_NONE);
	WRITE_ONCE(ring.generation, ring.generation + 1);
	mutex_unlock(&ring.lock);
	/*
	 * The next opener may be another user and may map the area before it
	 * starts a session: leave it nothing of this one.  No mapping is left:
	 * each holds the file, so release() runs after the last munmap().  The
	 * sampler writes nothing without a session, and clearing up to 256 MiB
	 * outside the lock keeps it from waiting on the clearing.
	 */
	memset(ring.area, 0, ring.size);
	pfprof_ring_wake_consumer();
}

/* A session is running and still takes samples. */
bool pfprof_ring_open(void)
{
	return READ_ONCE(ring.mode) != PFPROF_MODE_NONE &&
	       !READ_ONCE(ring.canceled);
}

/* down(): take one unit unless the count is zero; never below zero. */
static bool pfprof_sem_try_down(u32 *count)
{
	u32 old = READ_ONCE(*count);
	int tries;

	for (tries = 0; old && tries < PFPROF_SEM_TRIES; tries++) {
		u32 seen = cmpxchg(count, old, old - 1);

		if (seen == old)
			return true;
		old = seen;
	}
	return false;
}

/* up(full) and wake the consumer, whatever full.waiters says. */
static void pfprof_sem_up_full(struct pfprof_area *a)
{
	/* Fully ordered: the count is visible before waiters is read. */
	atomic_inc_return((atomic_t *)&a->full.count);
	xchg(&a->full.waiters, 0);
	wake_up_interruptible(&ring.consumer_wq);
}

/* Bounded test-and-set: a consumer that dies holding it cannot hang us. */
static bool pfprof_lock_try(u32 *lock)
{
	u64 deadline = local_clock() + PFPROF_LOCK_SPIN_NS;

	do {
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
	smp_store_release(lock, PFPROF_LOCK_FREE);
}

static void pfprof_defer(struct pfprof_area *a)
{
	WRITE_ONCE(a->deferred, ++ring.deferred);
}

/* Writes the slot of the next sequence number; the lock is held. */
static void pfprof_write_slot(struct pfprof_area *a,
			      const struct pfprof_sample *s)
{
	struct pfprof_sample *slot;
	u64 idx;

	div64_u64_rem(ring.write_seq, ring.slot_count, &idx);
	slot = &ring.slots[idx];
	WRITE_ONCE(slot->time_ns, s->time_ns);
	WRITE_ONCE(slot->minor, s->minor);
	WRITE_ONCE(slot->major, s->major);
	WRITE_ONCE(slot->cpu_ns, s->cpu_ns);
	WRITE_ONCE(ring.write_seq, ring.write_seq + 1);
	/* Pairs with the consumer's acquire of write_seq: slot first. */
	smp_store_release(&a->write_seq, ring.write_seq);
}

/*
 * Strict: the time from the first offer the ring refused to the delivery,
 * published as it grows, so a consumer sees a producer that is blocked now.
 */
static void pfprof_account_blocked(struct pfprof_area *a, bool delivered)
{
	u64 now = ktime_get_ns();

	lockdep_assert_held(&ring.lock);
	if (!ring.full_since)
		ring.full_since = now;
	WRITE_ONCE(a->blocked_ns, ring.blocked_ns + (now - ring.full_since));
	if (delivered) {
		ring.blocked_ns += now - ring.full_since;
		ring.full_since = 0;
	}
}

static enum pfprof_put pfprof_put_strict(const struct pfprof_sample *s)
{
	struct pfprof_area *a = ring.area;

	lockdep_assert_held(&ring.lock);
	if (!ring.slot_reserved) {
		if (!pfprof_sem_try_down(&a->empty.count)) {
			pfprof_account_blocked(a, false);
			return PFPROF_PUT_FULL;
		}
		ring.slot_reserved = true;
	}
	if (!pfprof_lock_try(&a->lock)) {
		pfprof_defer(a);
		return PFPROF_PUT_DEFERRED;
	}
	pfprof_write_slot(a, s);
	pfprof_lock_release(&a->lock);
	ring.slot_reserved = false;
	pfprof_sem_up_full(a);
	if (ring.full_since)
		pfprof_account_blocked(a, true);
	/* A retry asked for and not needed any more. */
	if (atomic_xchg(&ring.retry, PFPROF_RETRY_NONE) != PFPROF_RETRY_NONE)
		WRITE_ONCE(a->empty.waiters, 0);
	return PFPROF_PUT_DONE;
}

static enum pfprof_put pfprof_put_relaxed(const struct pfprof_sample *s)
{
	struct pfprof_area *a = ring.area;

	lockdep_assert_held(&ring.lock);
	if (!pfprof_lock_try(&a->lock)) {
		pfprof_defer(a);
		return PFPROF_PUT_DEFERRED;
	}
	/* Advisory: read_seq is whatever the consumer wrote. */
	if (ring.write_seq >= READ_ONCE(a->read_seq) + ring.slot_count)
		WRITE_ONCE(a->overwritten, ++ring.overwritten);
	pfprof_write_slot(a, s);
	pfprof_lock_release(&a->lock);
	wake_up_interruptible(&ring.consumer_wq);
	return PFPROF_PUT_DONE;
}

/* End the session: nothing follows the sample just written. */
static void pfprof_cancel_locked(struct pfprof_area *a)
{
	lockdep_assert_held(&ring.lock);
	WRITE_ONCE(ring.canceled, true);
	/* Pairs with the consumer's acquire: last sample first. */
	smp_store_release(&a->canceled, 1);
	xchg(&a->full.waiters, 0);
}

/*
 * Offer @sample to the running session.  @last: nobody was registered when
 * it was collected for @session, so once it is written that session ends -
 * in the same critical section, so that the cancellation can only reach the
 * session that received the sample; one started since gets neither the
 * sample nor the end.  A registration that slipped in since the collection
 * keeps the session going.
 */
enum pfprof_put pfprof_ring_put(const struct pfprof_sample *sample, bool last,
				unsigned int session)
{
	enum pfprof_put ret;

	mutex_lock(&ring.lock);
	if (ring.mode == PFPROF_MODE_NONE || ring.canceled ||
	    (last && session != ring.generation))
		ret = PFPROF_PUT_NO_SESSION;
	else if (ring.mode == PFPROF_MODE_STRICT)
		ret = pfprof_put_strict(sample);
	else
		ret = pfprof_put_relaxed(sample);
	if (ret == PFPROF_PUT_DONE && last && !pfprof_nr_registered())
		pfprof_cancel_locked(ring.area);
	mutex_unlock(&ring.lock);
	if (ret == PFPROF_PUT_DONE && last)
		wake_up_interruptible(&ring.consumer_wq);
	return ret;
}

/*
 * Strict, an offer found no free slot: ask the consumer to say when it
 * frees one (empty.waiters, the Dekker handshake in pfprof.h).  Returns
 * true when a slot is free already, so the caller offers again at once;
 * otherwise the consumer's WAKE_PRODUCER may fire one retry.
 */
bool pfprof_ring_await_slot(void)
{
	struct pfprof_area *a = ring.area;
	bool free_now = false;

	mutex_lock(&ring.lock);
	if (ring.mode == PFPROF_MODE_STRICT && !ring.canceled) {
		atomic_set(&ring.retry, PFPROF_RETRY_ARMED);
		/* The consumer that sees waiters sees the retry armed. */
		smp_store_release(&a->empty.waiters, 1);
		/* Pairs with the consumer's barrier between up(empty) and xchg. */
		smp_mb();
		free_now = READ_ONCE(a->empty.count);
		if (free_now) {
			atomic_set(&ring.retry, PFPROF_RETRY_NONE);
			WRITE_ONCE(a->empty.waiters, 0);
		}
	}
	mutex_unlock(&ring.lock);
	return free_now;
}

/* The consumer fired the retry; the sampler has not taken it yet. */
bool pfprof_ring_retry_fired(void)
{
	return atomic_read(&ring.retry) == PFPROF_RETRY_FIRED;
}

/* Takes a fired retry: true once per WAKE_PRODUCER that found one armed. */
bool pfprof_ring_take_retry(void)
{
	return atomic_cmpxchg(&ring.retry, PFPROF_RETRY_FIRED,
			      PFPROF_RETRY_NONE) == PFPROF_RETRY_FIRED;
}

static bool pfprof_full_ready(unsigned int gen)
{
	return READ_ONCE(ring.area->full.count) || READ_ONCE(ring.canceled) ||
	       READ_ONCE(ring.generation) != gen;
}

/* Strict consumer: sleep until a sample is ready or the session ends. */
int pfprof_ring_wait_full(long timeout)
{
	unsigned int gen = READ_ONCE(ring.generation);
	long ret;

	if (READ_ONCE(ring.mode) != PFPROF_MODE_STRICT)
		return -EINVAL;
	ret = wait_event_interruptible_timeout(ring.consumer_wq,
					       pfprof_full_ready(gen), timeout);
	if (ret < 0)
		return -EINTR;
	return ret ? 0 : -ETIMEDOUT;
}

/*
 * Only an armed retry wakes the sampler, and only once: a consumer asking
 * again and again cannot make it wake, let alone collect, more often.
 */
int pfprof_ring_wake_producer(void)
{
	if (READ_ONCE(ring.mode) != PFPROF_MODE_STRICT)
		return -EINVAL;
	if (atomic_cmpxchg(&ring.retry, PFPROF_RETRY_ARMED,
			   PFPROF_RETRY_FIRED) == PFPROF_RETRY_ARMED)
		pfprof_sampler_kick();
	return 0;
}

__poll_t pfprof_ring_poll_mask(void)
{
	u32 mode = READ_ONCE(ring.mode);
	__poll_t mask = 0;
	bool ready;

	if (mode == PFPROF_MODE_NONE)
		return 0;
	if (mode == PFPROF_MODE_STRICT)
		ready = READ_ONCE(ring.area->full.count);
	else
		ready = READ_ONCE(ring.write_seq) !=
			READ_ONCE(ring.area->read_seq);
	if (ready)
		mask |= EPOLLIN | EPOLLRDNORM;
	if (READ_ONCE(ring.canceled))
		mask |= EPOLLHUP;
	return mask;
}
