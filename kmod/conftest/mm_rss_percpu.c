// SPDX-License-Identifier: GPL-2.0
/*
 * An mm's resident and swap counters as per-CPU counters (6.2: "mm: convert
 * mm's rss stats into percpu_counter"), whose exact value is their sum over
 * the CPUs; before, an atomic count plus what each thread has not folded
 * into it yet (SPLIT_RSS_COUNTING).
 */
#include <linux/mm.h>
#include <linux/percpu_counter.h>

long pfprof_probe(struct mm_struct *mm);
long pfprof_probe(struct mm_struct *mm)
{
	return percpu_counter_sum_positive(&mm->rss_stat[MM_ANONPAGES]);
}
