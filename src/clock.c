/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "clock.h"

#include "internal.h"

uint64_t clock_now_ns(clockid_t clock)
{
	struct timespec ts;

	if (clock_gettime(clock, &ts))
		kairos_die_err("clock_gettime", errno);
	return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}
