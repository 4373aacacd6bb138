// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: per-process page-fault profiler.
 *
 * Module parameters, and bringing the parts up and down in order: the
 * area first (the device maps it, the sampler writes it), then the
 * sampler, the registration file and the device; teardown in reverse.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>

#include "pfprof_internal.h"

#define PFPROF_PERIOD_MS_MIN		1
#define PFPROF_PERIOD_MS_MAX		10000
/* A control page and at least one page of slots; at most 256 MiB. */
#define PFPROF_BUFFER_PAGES_MIN		2
#define PFPROF_BUFFER_PAGES_MAX		65536

unsigned int pfprof_period_ms = 50;
module_param_named(period_ms, pfprof_period_ms, uint, 0444);
MODULE_PARM_DESC(period_ms, "Sampling period in milliseconds (1..10000, default 50)");

unsigned int pfprof_buffer_pages = 128;
module_param_named(buffer_pages, pfprof_buffer_pages, uint, 0444);
MODULE_PARM_DESC(buffer_pages,
		 "Pages in the shared area, control page included (2..65536, default 128)");

static int pfprof_check_params(void)
{
	if (pfprof_period_ms < PFPROF_PERIOD_MS_MIN ||
	    pfprof_period_ms > PFPROF_PERIOD_MS_MAX) {
		pr_err("period_ms=%u out of range %u..%u\n", pfprof_period_ms,
		       PFPROF_PERIOD_MS_MIN, PFPROF_PERIOD_MS_MAX);
		return -EINVAL;
	}
	if (pfprof_buffer_pages < PFPROF_BUFFER_PAGES_MIN ||
	    pfprof_buffer_pages > PFPROF_BUFFER_PAGES_MAX) {
		pr_err("buffer_pages=%u out of range %u..%u\n",
		       pfprof_buffer_pages, PFPROF_BUFFER_PAGES_MIN,
		       PFPROF_BUFFER_PAGES_MAX);
		return -EINVAL;
	}
	return 0;
}

static int __init pfprof_init(void)
{
	int ret;

	ret = pfprof_check_params();
	if (ret)
		return ret;

	ret = pfprof_ring_init();
	if (ret)
		return ret;

	ret = pfprof_sampler_start();
	if (ret)
		goto err_free_ring;

	ret = pfprof_proc_init();
	if (ret)
		goto err_stop_sampler;

	ret = pfprof_chardev_init();
	if (ret)
		goto err_remove_proc;

	pr_info("loaded: period %u ms, %u pages, %llu slots\n",
		pfprof_period_ms, pfprof_buffer_pages, pfprof_ring_slot_count());
	return 0;

err_remove_proc:
	pfprof_proc_exit();
err_stop_sampler:
	pfprof_sampler_stop();
err_free_ring:
	pfprof_ring_exit();
	return ret;
}

static void __exit pfprof_exit(void)
{
	/* The device cannot be open here: its fops pin the module. */
	pfprof_chardev_exit();
	/* No new registrations; the sampler may still hold some. */
	pfprof_sampler_stop();
	pfprof_proc_exit();
	pfprof_ring_exit();
	pr_info("unloaded\n");
}

module_init(pfprof_init);
module_exit(pfprof_exit);

MODULE_DESCRIPTION("Per-process page-fault profiler with a shared-memory ring");
MODULE_LICENSE("GPL");
