// SPDX-License-Identifier: GPL-2.0
/*
 * pfprof: per-process page-fault profiler.
 *
 * Module parameters, and bringing the parts up and down in order: the
 * record of execs that may hide a process, the registration file, then the
 * device, whose every open is a session with its own area and sampler;
 * teardown in reverse.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/rcupdate.h>
#include <linux/stringify.h>

#include "pfprof_internal.h"

/* Sessions one user may have open at once: each holds an area and a kthread. */
#define PFPROF_MAX_SESSIONS_DEFAULT	16
#define PFPROF_MAX_SESSIONS_MAX		1024
#define PFPROF_MAX_REGISTRATIONS_DEFAULT	1024

/* "(MIN..MAX, default D)" for a parameter's description. */
#define PFPROF_RANGE(min, max, def) \
	"(" __stringify(min) ".." __stringify(max) ", default " __stringify(def) ")"

unsigned int pfprof_period_ms = PFPROF_PERIOD_MS_DEFAULT;
module_param_named(period_ms, pfprof_period_ms, uint, 0444);
MODULE_PARM_DESC(period_ms, "Sampling period in milliseconds " PFPROF_RANGE(
		 PFPROF_PERIOD_MS_MIN, PFPROF_PERIOD_MS_MAX, PFPROF_PERIOD_MS_DEFAULT));

unsigned int pfprof_buffer_pages = PFPROF_BUFFER_PAGES_DEFAULT;
module_param_named(buffer_pages, pfprof_buffer_pages, uint, 0444);
MODULE_PARM_DESC(buffer_pages,
		 "Pages in each session's area, control page included " PFPROF_RANGE(
		 PFPROF_BUFFER_PAGES_MIN, PFPROF_BUFFER_PAGES_MAX,
		 PFPROF_BUFFER_PAGES_DEFAULT));

unsigned int pfprof_max_sessions = PFPROF_MAX_SESSIONS_DEFAULT;
module_param_named(max_sessions, pfprof_max_sessions, uint, 0444);
MODULE_PARM_DESC(max_sessions,
		 "Sessions (opens of /dev/pfprof) one user may have at once " PFPROF_RANGE(
		 1, PFPROF_MAX_SESSIONS_MAX, PFPROF_MAX_SESSIONS_DEFAULT));

unsigned int pfprof_max_registrations = PFPROF_MAX_REGISTRATIONS_DEFAULT;
module_param_named(max_registrations, pfprof_max_registrations, uint, 0444);
MODULE_PARM_DESC(max_registrations,
		 "Processes one user may have registered through /proc at once " PFPROF_RANGE(
		 1, PFPROF_MEMBERS_MAX, PFPROF_MAX_REGISTRATIONS_DEFAULT));

/* The faults region: 256 pages hold 32,640 records, a period of 650,000 recorded faults a second. */
#define PFPROF_FAULT_PAGES_DEFAULT	256
#define PFPROF_FAULT_PAGES_MIN		2
#define PFPROF_FAULT_PAGES_MAX		16384
/* Each CPU's buffer between two periods: 32 bytes a record, 128 KiB by default. */
#define PFPROF_FAULT_CPU_RECORDS_DEFAULT	4096
#define PFPROF_FAULT_CPU_RECORDS_MIN	64
#define PFPROF_FAULT_CPU_RECORDS_MAX	65536
/* Threads a session's events may cover: two events each. */
#define PFPROF_MAX_FAULT_THREADS_DEFAULT	1024
#define PFPROF_MAX_FAULT_THREADS_MAX	65536

unsigned int pfprof_fault_pages = PFPROF_FAULT_PAGES_DEFAULT;
module_param_named(fault_pages, pfprof_fault_pages, uint, 0444);
MODULE_PARM_DESC(fault_pages,
		 "Pages in each attributing session's faults region, control page included " PFPROF_RANGE(
		 PFPROF_FAULT_PAGES_MIN, PFPROF_FAULT_PAGES_MAX,
		 PFPROF_FAULT_PAGES_DEFAULT));

unsigned int pfprof_fault_cpu_records = PFPROF_FAULT_CPU_RECORDS_DEFAULT;
module_param_named(fault_cpu_records, pfprof_fault_cpu_records, uint, 0444);
MODULE_PARM_DESC(fault_cpu_records,
		 "Faults each CPU keeps for an attributing session between two periods, rounded down to a power of two " PFPROF_RANGE(
		 PFPROF_FAULT_CPU_RECORDS_MIN, PFPROF_FAULT_CPU_RECORDS_MAX,
		 PFPROF_FAULT_CPU_RECORDS_DEFAULT));

unsigned int pfprof_max_fault_threads = PFPROF_MAX_FAULT_THREADS_DEFAULT;
module_param_named(max_fault_threads, pfprof_max_fault_threads, uint, 0444);
MODULE_PARM_DESC(max_fault_threads,
		 "Threads an attributing session's fault events cover " PFPROF_RANGE(
		 1, PFPROF_MAX_FAULT_THREADS_MAX, PFPROF_MAX_FAULT_THREADS_DEFAULT));

/*
 * Who may ask a session's faults attributed (PFPROF_IOC_ATTRIBUTE): it puts
 * kernel perf events on the profiled processes, which Debian's
 * perf_event_paranoid=3 keeps from unprivileged users.
 */
unsigned int pfprof_attribution = PFPROF_ATTRIBUTION_PERFMON;
module_param_named(attribution, pfprof_attribution, uint, 0444);
MODULE_PARM_DESC(attribution,
		 "Who may attribute faults: 0 nobody, 1 an opener with CAP_PERFMON or CAP_SYS_ADMIN, 2 every opener " PFPROF_RANGE(
		 PFPROF_ATTRIBUTION_NOBODY, PFPROF_ATTRIBUTION_EVERY_OPENER,
		 PFPROF_ATTRIBUTION_PERFMON));

static int pfprof_check_range(const char *name, unsigned int value,
			      unsigned int min, unsigned int max)
{
	if (value >= min && value <= max)
		return 0;
	pr_err("%s=%u out of range %u..%u\n", name, value, min, max);
	return -EINVAL;
}

static int pfprof_check_params(void)
{
	int ret;

	ret = pfprof_check_range("fault_pages", pfprof_fault_pages,
				 PFPROF_FAULT_PAGES_MIN, PFPROF_FAULT_PAGES_MAX) ?:
	      pfprof_check_range("fault_cpu_records", pfprof_fault_cpu_records,
				 PFPROF_FAULT_CPU_RECORDS_MIN,
				 PFPROF_FAULT_CPU_RECORDS_MAX) ?:
	      pfprof_check_range("max_fault_threads", pfprof_max_fault_threads,
				 1, PFPROF_MAX_FAULT_THREADS_MAX) ?:
	      pfprof_check_range("attribution", pfprof_attribution,
				 PFPROF_ATTRIBUTION_NOBODY,
				 PFPROF_ATTRIBUTION_EVERY_OPENER) ?:
	      pfprof_check_range("period_ms", pfprof_period_ms,
				 PFPROF_PERIOD_MS_MIN, PFPROF_PERIOD_MS_MAX) ?:
	      pfprof_check_range("buffer_pages", pfprof_buffer_pages,
				 PFPROF_BUFFER_PAGES_MIN, PFPROF_BUFFER_PAGES_MAX) ?:
	      pfprof_check_range("max_sessions", pfprof_max_sessions,
				 1, PFPROF_MAX_SESSIONS_MAX) ?:
	      pfprof_check_range("max_registrations", pfprof_max_registrations,
				 1, PFPROF_MEMBERS_MAX);
	return ret;
}

static int __init pfprof_init(void)
{
	int ret;

	ret = pfprof_check_params();
	if (ret)
		return ret;

	ret = pfprof_lineage_probe_init();
	if (ret)
		return ret;

	ret = pfprof_execs_init();
	if (ret)
		goto err_lineage;

	ret = pfprof_proc_init();
	if (ret)
		goto err_execs;

	ret = pfprof_chardev_init();
	if (ret)
		goto err_remove_proc;

	pr_info("loaded: period %u ms, %u pages a session, %u sessions and %u registrations a user\n",
		pfprof_period_ms, pfprof_buffer_pages, pfprof_max_sessions,
		pfprof_max_registrations);
	return 0;

err_remove_proc:
	pfprof_proc_exit();
err_execs:
	pfprof_execs_exit();
err_lineage:
	pfprof_lineage_probe_exit();
	return ret;
}

static void __exit pfprof_exit(void)
{
	/* No session is open here: the device's fops pin the module. */
	pfprof_chardev_exit();
	pfprof_proc_exit();
	pfprof_execs_exit();
	pfprof_lineage_probe_exit();
	/* The sessions', members' and kin's RCU callbacks are this module's code. */
	rcu_barrier();
	pr_info("unloaded\n");
}

module_init(pfprof_init);
module_exit(pfprof_exit);

MODULE_DESCRIPTION("Per-process page-fault profiler with a shared-memory ring");
MODULE_LICENSE("GPL");
/*
 * The packages' and the monitor's version (Kbuild takes it from dkms.conf): in
 * modinfo, and in /sys/module/pfprof/version for a monitor of another ABI to
 * say which package version matches this module.
 */
MODULE_VERSION(PFPROF_VERSION);
