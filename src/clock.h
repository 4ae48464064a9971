/* SPDX-License-Identifier: MIT */
/*
 * clock.h - every conversion between nanoseconds and wheel ticks, in one
 * place.  Tick n covers [n * tick_ns, (n + 1) * tick_ns) of the service
 * clock; a timer's deadline rounds UP to a tick boundary, so a timer whose
 * tick has been reached is never early.
 */
#ifndef KAIROS_CLOCK_H
#define KAIROS_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* Dies with clock_gettime()'s @err (clock.c): the clock could not be read. */
void clock_failed(int err) __attribute__((noreturn, cold));

/*
 * Reads @clock in ns; aborts if the clock cannot be read (it always can).
 * Inline: every arm and reset that takes a delay reads it.
 */
static inline uint64_t clock_now_ns(clockid_t clock)
{
	struct timespec ts;

	if (__builtin_expect(clock_gettime(clock, &ts) != 0, 0))
		clock_failed(errno);
	return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* The tick that contains @ns (rounds down): the wheel's current tick. */
static inline uint64_t clock_tick_floor(uint64_t ns, uint64_t tick_ns)
{
	return ns / tick_ns;
}

/* The first tick boundary at or after @ns (rounds up): a deadline's tick. */
static inline uint64_t clock_tick_ceil(uint64_t ns, uint64_t tick_ns)
{
	return ns / tick_ns + (ns % tick_ns != 0);
}

/* Start of tick @tick in ns, saturating at UINT64_MAX. */
static inline uint64_t clock_tick_ns(uint64_t tick, uint64_t tick_ns)
{
	if (tick > UINT64_MAX / tick_ns)
		return UINT64_MAX;
	return tick * tick_ns;
}

/* @a + @b into *@sum; returns non-zero (and leaves *@sum alone) on overflow. */
static inline int clock_add_overflows(uint64_t a, uint64_t b, uint64_t *sum)
{
	return __builtin_add_overflow(a, b, sum);
}

#endif /* KAIROS_CLOCK_H */
