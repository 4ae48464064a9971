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
#include <stdatomic.h>
#include <stdbool.h>
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

/* ---- the counter clock ----------------------------------------------------
 * What a timer with slack reads instead of clock_gettime() (clock.c): the
 * CPU's time-stamp counter, unordered, turned into CLOCK_MONOTONIC ns from
 * the calling thread's last ordered read (its anchor).  The estimate is
 * never earlier than the real time: it is taken from the anchor's first
 * counter value, FAST_MARGIN_NS is added, and an anchor serves only
 * FAST_SPAN_NS of counter ticks, so the rate could be a third off and the
 * estimate still not early.  Past its span, or before the rate is known,
 * the call reads the ordered clock and anchors again (fast_reanchor()).
 * It is late by FAST_MARGIN_NS and FAST_PAIR_NS at most, and a little of
 * the rate's error: 20 us in all.
 */
#define FAST_MARGIN_NS		UINT64_C(18000)		/* added to every estimate */
#define FAST_PAIR_NS		UINT64_C(1000)		/* widest clean anchor */
#define FAST_SPAN_NS		UINT64_C(50000)		/* an anchor's life, in counter time */
#define FAST_SLACK_MIN_NS	UINT64_C(50000)		/* least slack that takes the counter */
#define FAST_CAL_NS		UINT64_C(10000000)	/* the rate's measuring interval */
#define FAST_SUSPEND_NS		UINT64_C(1000000)	/* a suspend this long voids a measure */
#define FAST_BASES		8	/* first pairs the rate may be measured from */
#define FAST_CHECK_SPANS	20	/* anchors this close (1 ms) are compared */

struct fast_anchor {
	uint64_t tsc;		/* counter read before the clock read */
	uint64_t ns;		/* the ordered read (CLOCK_MONOTONIC) */
	uint64_t mult;		/* ns per counter tick, 32.32 */
	uint64_t span;		/* counter ticks the anchor serves; 0: none */
};

extern _Thread_local struct fast_anchor fast_anchor __attribute__((visibility("hidden")));
/* Set for good when a thread finds the counter behind the clock (clock.c). */
extern _Atomic int fast_off __attribute__((visibility("hidden")));

/*
 * Whether the counter clock can serve CLOCK_MONOTONIC in this process: an
 * x86-64 CPU whose counter runs at one rate in every state (constant_tsc,
 * nonstop_tsc) and a kernel whose clocksource is that counter.  Looked at
 * once per process (again at the next create when a look could not tell);
 * *@why gets the reason, a static sentence.
 */
bool fast_clock_usable(const char **why);

/*
 * The ordered read, a new anchor for this thread; returns the time read.
 * @tsc: the counter as the caller just read it (unordered), or 0.
 */
uint64_t fast_reanchor(uint64_t tsc);

/*
 * Whether a thread found the counter behind CLOCK_MONOTONIC (two anchors
 * FAST_CHECK_SPANS apart at most, the clock ahead by more than half the
 * margin and a quarter of the time between): every read is then an ordered
 * one, for the rest of the process, and fast_clock_usable() says no.
 */
static inline bool fast_clock_off(void)
{
	return atomic_load_explicit(&fast_off, memory_order_relaxed) != 0;
}
#define FAST_OFF_WHY	"the counter fell behind CLOCK_MONOTONIC while in use"

/* For tests: the rate (32.32 ns per tick; 0: not yet), and *@bases the first pairs taken. */
uint64_t fast_calibration(unsigned *bases);

/*
 * fork(): the look at the machine's lock, taken before and let go after in
 * both processes (kairos.c's hooks), so that a child's create never finds
 * it held by a thread that is not there.
 */
void clock_fork_lock(void);
void clock_fork_unlock(void);

/*
 * Anchors @a at counter value @tsc and clock read @ns (read after it), at
 * rate @mult; @width: how long the pair took, in ns.  It serves estimates
 * only if the rate is known and @width <= FAST_PAIR_NS.
 */
void fast_anchor_set(struct fast_anchor *a, uint64_t tsc, uint64_t ns, uint64_t width,
		     uint64_t mult);

/*
 * The estimate @a gives for counter value @tsc, in *@ns: false when @tsc is
 * outside the anchor's span (before it, or too far after).
 */
static inline bool fast_est(const struct fast_anchor *a, uint64_t tsc, uint64_t *ns)
{
	uint64_t d = tsc - a->tsc;	/* a counter before the anchor wraps: too far */

	if (__builtin_expect(d > a->span, 0))
		return false;
	/* d <= span keeps d * mult under FAST_SPAN_NS << 32: no overflow. */
	*ns = a->ns + ((d * a->mult) >> 32) + FAST_MARGIN_NS;
	return true;
}

/* CLOCK_MONOTONIC now, or later by at most 20 us (see above). */
static inline uint64_t fast_now(void)
{
#if defined(__x86_64__)
	uint64_t ns, tsc = __builtin_ia32_rdtsc();

	/* Once the counter is off (fast_clock_off()), each read is an ordered one. */
	if (__builtin_expect(fast_est(&fast_anchor, tsc, &ns), 1) &&
	    __builtin_expect(!fast_clock_off(), 1))
		return ns;
	return fast_reanchor(tsc);
#else
	return fast_reanchor(0);
#endif
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
