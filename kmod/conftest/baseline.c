// SPDX-License-Identifier: GPL-2.0
/* Must compile anywhere: when it does not, the probes cannot be trusted. */
#include <linux/module.h>

int pfprof_probe(void);
int pfprof_probe(void)
{
	return 0;
}
