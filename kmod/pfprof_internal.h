/* SPDX-License-Identifier: GPL-2.0 */
/*
 * pfprof: what the module's files share.  The user-space ABI lives in
 * pfprof.h; everything here is private to the module.
 */
#ifndef _PFPROF_INTERNAL_H
#define _PFPROF_INTERNAL_H

#include <linux/time64.h>
#include <linux/types.h>

#include "pfprof.h"

struct task_struct;

/* Fault and CPU counters of one process, or their change over a period. */
struct pfprof_totals {
	u64 minor;
	u64 major;
	u64 cpu_ns;
};

/* main.c: validated module parameters. */
extern unsigned int pfprof_period_ms;
extern unsigned int pfprof_buffer_pages;

static inline u64 pfprof_period_ns(void)
{
	return (u64)pfprof_period_ms * NSEC_PER_MSEC;
}

/* proc.c: registered processes and /proc/pfprof/status. */
int pfprof_proc_init(void);
void pfprof_proc_exit(void);
unsigned int pfprof_nr_registered(void);
unsigned int pfprof_reg_changes(void);
unsigned int pfprof_reg_collect(struct pfprof_totals *pending);
void pfprof_reg_settle(const struct pfprof_totals *delivered);

/* sampler.c: the sampling kthread and the totals it reads. */
bool pfprof_read_totals(struct task_struct *leader, struct pfprof_totals *t);
int pfprof_sampler_start(void);
void pfprof_sampler_stop(void);
void pfprof_sampler_kick(void);

/* ring.c: the mapped area and the session running over it. */
enum pfprof_put {
	PFPROF_PUT_DONE,	/* sample written */
	PFPROF_PUT_NO_SESSION,	/* no consumer, or its session is canceled */
	PFPROF_PUT_FULL,	/* strict: no free slot */
	PFPROF_PUT_DEFERRED,	/* the consumer holds the lock */
};

int pfprof_ring_init(void);
void pfprof_ring_exit(void);
void *pfprof_ring_area(void);
u64 pfprof_ring_size(void);
u64 pfprof_ring_slot_count(void);
void pfprof_ring_start(u32 mode);
void pfprof_ring_stop(void);
bool pfprof_ring_open(void);
unsigned int pfprof_ring_session(void);
enum pfprof_put pfprof_ring_put(const struct pfprof_sample *sample, bool last,
				unsigned int session);
bool pfprof_ring_await_slot(void);
bool pfprof_ring_retry_fired(void);
bool pfprof_ring_take_retry(void);
int pfprof_ring_wait_full(long timeout);
int pfprof_ring_wake_producer(void);
__poll_t pfprof_ring_poll_mask(void);
struct wait_queue_head *pfprof_ring_consumer_wq(void);

/* chardev.c: /dev/pfprof. */
int pfprof_chardev_init(void);
void pfprof_chardev_exit(void);

#endif /* _PFPROF_INTERNAL_H */
