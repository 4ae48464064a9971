/* SPDX-License-Identifier: MIT */
/*
 * relax.c - waiting politely for another thread that holds a record for a
 * few instructions (a resetter between its two CASes): pause a while, then
 * give the CPU away, so that a holder preempted on this very CPU can finish.
 */
#include <sched.h>

#include "internal.h"

void cpu_relax_n(unsigned *spins)
{
	if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		return;
	}
	sched_yield();
}
