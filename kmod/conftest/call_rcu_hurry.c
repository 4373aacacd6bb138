// SPDX-License-Identifier: GPL-2.0
/*
 * An RCU callback run without the lazy batching of CONFIG_RCU_LAZY (6.2+),
 * which may hold a callback for seconds.
 */
#include <linux/rcupdate.h>

void pfprof_probe(struct rcu_head *head, rcu_callback_t func);
void pfprof_probe(struct rcu_head *head, rcu_callback_t func)
{
	call_rcu_hurry(head, func);
}
