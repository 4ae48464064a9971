/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the counter clock that timers with slack read (src/clock.h):
 * its estimate on made-up anchors, its estimate beside clock_gettime() on
 * every CPU, which timers take it (the id's fast bit, the same in the
 * callback), and slack timers armed and reset from several threads never
 * firing early, with the counter and with KAIROS_EXACT_CLOCK; what
 * kairos_clock_info() says of each kind of service.
 *
 * Where the kernel does not keep time with the counter (kairos_clock_info()
 * not "tsc"), the same checks run and find every timer on the ordered clock.
 * Real clock, shared 2-core machine: lower bounds are strict, upper bounds
 * generous, and nothing asserts speed.
 */
#include <pthread.h>
#include <sched.h>

#include "t_util.h"

#include "../src/internal.h"
#include "../src/fault.h"

/*
 * Whether @k's slack timers read the counter, as kairos_clock_info() says.
 * Each service's own answer is the one to expect of it: a look at create
 * that lacked a descriptor or a clean pair says no for that service only.
 */
static bool counter_on(struct kairos *k)
{
	const char *name = NULL;

	ck_assert_int_eq(kairos_clock_info(k, &name, NULL), 0);
	ck_assert_ptr_nonnull(name);
	return strcmp(name, "tsc") == 0;
}

/* kairos_clock_info() of @k: @name, and a reason that contains @why_has. */
static void clock_info_is(struct kairos *k, const char *name, const char *why_has)
{
	const char *n = NULL, *w = NULL;

	ck_assert_int_eq(kairos_clock_info(k, &n, &w), 0);
	ck_assert_str_eq(n, name);
	ck_assert_ptr_nonnull(w);
	ck_assert_msg(strstr(w, why_has) != NULL, "clock_info why \"%s\" lacks \"%s\"", w,
		      why_has);
	ck_assert_int_eq(kairos_clock_info(k, NULL, NULL), 0);
}

/* ------------------------------------------------------------------ */
/* The estimate                                                        */

/*
 * fast_est() on a made-up anchor: the margin on top, the rate applied, and
 * nothing outside the span (before the anchor, or past its end).
 */
START_TEST(test_clock_estimate)
{
	const struct fast_anchor a = {
		.tsc = UINT64_C(1) << 40, .ns = 5 * T_SEC,
		.mult = UINT64_C(1) << 31,	/* 0.5 ns a tick */
		.span = 100000,			/* 50 us at that rate */
	};
	uint64_t seed = t_seed(41), ns = 0, prev = 0;

	ck_assert(fast_est(&a, a.tsc, &ns));
	ck_assert_uint_eq(ns, a.ns + FAST_MARGIN_NS);
	ck_assert(fast_est(&a, a.tsc + 2000, &ns));
	ck_assert_uint_eq(ns, a.ns + 1000 + FAST_MARGIN_NS);
	ck_assert(fast_est(&a, a.tsc + a.span, &ns));
	ck_assert_uint_eq(ns, a.ns + 50000 + FAST_MARGIN_NS);
	ns = 7;
	ck_assert(!fast_est(&a, a.tsc + a.span + 1, &ns));
	ck_assert(!fast_est(&a, a.tsc - 1, &ns));
	ck_assert(!fast_est(&a, 0, &ns));
	ck_assert_uint_eq(ns, 7);	/* untouched when refused */
	/* Never below the anchor plus the margin; rising with the counter. */
	for (uint64_t d = 0; d <= a.span; d += 1 + t_rand_below(&seed, 997)) {
		ck_assert(fast_est(&a, a.tsc + d, &ns));
		ck_assert_uint_ge(ns, a.ns + FAST_MARGIN_NS);
		ck_assert_uint_ge(ns, prev);
		ck_assert_uint_le(ns, a.ns + FAST_MARGIN_NS + d / 2);
		prev = ns;
	}
	/* No anchor yet (a thread's first call): nothing is served. */
	{
		const struct fast_anchor none = { 0 };

		ck_assert(!fast_est(&none, UINT64_C(1) << 40, &ns));
	}
	/*
	 * fast_anchor_set(): a pair whose clock reads were more than
	 * FAST_PAIR_NS apart (an interrupted thread), or no rate yet, serves
	 * nothing; a clean one serves FAST_SPAN_NS of ticks at its rate.
	 */
	{
		struct fast_anchor b;

		fast_anchor_set(&b, a.tsc, a.ns, FAST_PAIR_NS, a.mult);
		ck_assert_uint_eq(b.span, 2 * FAST_SPAN_NS);	/* 0.5 ns a tick */
		ck_assert(fast_est(&b, a.tsc + 10, &ns));
		ck_assert_uint_eq(ns, a.ns + 5 + FAST_MARGIN_NS);
		fast_anchor_set(&b, a.tsc, a.ns, FAST_PAIR_NS + 1, a.mult);
		ck_assert(!fast_est(&b, a.tsc + 10, &ns));
		fast_anchor_set(&b, a.tsc, a.ns, 0, 0);
		ck_assert(!fast_est(&b, a.tsc + 10, &ns));
	}
}
END_TEST

/* Pins the calling thread to CPU @cpu of the ones it may run on, best effort. */
static void pin_to(unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu % CPU_SETSIZE, &set);
	(void)sched_setaffinity(0, sizeof(set), &set);
}

/*
 * fast_now() between two clock_gettime() reads, 300 ms long, the thread
 * moved to each CPU in turn and paused past an anchor's span now and then
 * (so that its call anchors again): never below the read before it, above the
 * read after it by no more than the 20 us documented and a move's counter
 * difference (an interruption only moves the read after it later).
 * Once the rate is known (FAST_CAL_NS after the first service), nearly
 * every read is the counter's; only some are asked for, since how many
 * depends on timing (under valgrind few pairs are quick enough to be
 * clean, and the reads they leave are ordered ones).
 */
START_TEST(test_clock_fast_never_early)
{
	struct kairos *k = t_create(NULL);	/* the first service: the rate's base */
	bool on = counter_on(k);
	unsigned ncpu = t_ncpu();
	uint64_t start = t_mono(), reads = 0, counter = 0, worst_early = 0;
	cpu_set_t was;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(was), &was), 0);
	while (t_mono() - start < 300 * T_MS) {
		for (int i = 0; i < 1000; i++) {
			uint64_t before, est, after;

			/* Now and then a pause past the span: the call anchors again. */
			if (i % 97 == 0)
				t_sleep_ns(FAST_SPAN_NS + 10 * T_US);
			before = t_mono();
			est = fast_now();
			after = t_mono();

			if (est < before && before - est > worst_early)
				worst_early = before - est;
			/*
			 * Late by the margin, a clean pair's width and a little
			 * (20 us), and by what two CPUs' counters differ after a
			 * move (the kernel keeps them in step; 10 us allowed).
			 */
			ck_assert_msg(est <= after + 30 * T_US,
				      "estimate %" PRIu64 " ns after the read that followed it",
				      est - after);
			reads++;
			/* A counter read leaves the anchor as it was, and the margin on. */
			if (fast_anchor.span && est != fast_anchor.ns)
				counter++;
		}
		pin_to((unsigned)(reads / 1000) % ncpu);
	}
	(void)sched_setaffinity(0, sizeof(was), &was);
	ck_assert_msg(worst_early == 0, "an estimate was %" PRIu64 " ns early", worst_early);
	if (on)
		ck_assert_msg(counter > 0, "none of %" PRIu64 " reads on the counter", reads);
	else
		ck_assert_uint_eq(counter, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* A fresh clean anchor at the known rate, if one comes in 1000 tries. */
static bool clean_anchor(void)
{
	fast_anchor.span = 0;
	for (int i = 0; i < 1000 && !(fast_anchor.span && fast_anchor.mult); i++)
		(void)fast_reanchor(__builtin_ia32_rdtsc());
	return fast_anchor.span && fast_anchor.mult;
}

/*
 * A slewed clock leaves the counter on; a counter that the clock no longer
 * follows does not.  Made up here on a fresh clean anchor each time, with
 * nothing between it and the read that compares: an anchor whose clock
 * read is 20% further back than its counter says (adjtimex()'s tick moved
 * by 10% one way at the rate's measure and the other way since) is
 * compared and left on; an anchor whose counter value is moved 300 us
 * of ticks ahead makes the next read fall before it and anchor again,
 * which finds the counter behind the clock and turns it off for the
 * process (an attempt whose pair was interrupted tries again).  The old
 * anchor must not serve once the counter reaches it (its estimates would
 * be 300 us early): for 1 ms of reads after the switch none is early.  The
 * services say so, one created later does not use the counter, and slack
 * timers armed after it are never early.  Last in the case: the switch is
 * never undone (a process of its own under CK_FORK).  Skipped where clean
 * pairs do not come (under valgrind, mostly).
 */
START_TEST(test_clock_counter_behind_turns_off)
{
	struct kairos *k = t_create(NULL), *later;
	struct t_timer tm[8];
	uint64_t due[8], start, reads = 0;
	bool slewed = false;

	if (!counter_on(k)) {
		fprintf(stderr, "counter_behind: the counter does not serve here; skipped\n");
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		return;
	}
	t_sleep_ns(FAST_CAL_NS + 2 * T_MS);
	for (int i = 0; i < 100 && !slewed; i++) {
		uint64_t t0, n0, span;

		if (!clean_anchor())
			break;
		span = fast_anchor.span;
		t0 = __builtin_ia32_rdtsc();
		n0 = t_mono();
		fast_anchor.tsc = t0 - ((500 * T_US) << 32) / fast_anchor.mult;
		fast_anchor.ns = n0 - 500 * T_US * 1200 / 1000;
		fast_anchor.span = span;
		(void)fast_now();
		ck_assert_msg(!fast_clock_off(), "a slew of 20%% turned the counter off");
		slewed = fast_anchor.span && fast_anchor.tsc > t0;
	}
	if (!slewed) {
		fprintf(stderr, "counter_behind: no clean pairs here; skipped\n");
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		return;
	}
	clock_info_is(k, "tsc", "");
	for (int i = 0; i < 100 && !fast_clock_off(); i++) {
		if (!clean_anchor())
			continue;
		fast_anchor.tsc += ((300 * T_US) << 32) / fast_anchor.mult;
		(void)fast_now();
	}
	ck_assert_msg(fast_clock_off(), "a counter 300 us behind the clock left it on");
	start = t_mono();
	while (t_mono() - start < T_MS) {
		uint64_t before = t_mono(), est = fast_now();

		ck_assert_msg(est >= before, "read %" PRIu64 ": %" PRIu64 " ns early", reads,
			      before - est);
		reads++;
	}
	clock_info_is(k, "clock_gettime", "fell behind");
	later = t_create(NULL);
	clock_info_is(later, "clock_gettime", "fell behind");
	for (int i = 0; i < 8; i++) {
		struct kairos *on = i % 2 ? later : k;
		uint64_t slack = 100 * T_US << i;

		due[i] = t_now(on) + 2 * T_MS;
		t_timer_init(&tm[i], &tt, due[i], 0);
		tm[i].deadline = due[i];
		ck_assert_int_eq(kairos_arm_slack(on, 2 * T_MS, slack, t_cb, &tm[i], &tm[i].id), 0);
		ck_assert(!(tm[i].id & ID_FAST) || on == k);
		atomic_fetch_add(&tt.armed, 1);
	}
	t_wait_fired(8);
	for (int i = 0; i < 8; i++)
		ck_assert_msg(t_u64(&tm[i].first_ns) >= due[i], "timer %d early", i);
	t_check_calls(&tt, T_LATE);
	t_destroy(later, KAIROS_DRAIN_DROP, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* The counter and the clock read together: the narrowest of a few tries. */
static void tsc_pair_now(uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;

	*tsc = *ns = 0;
	for (int i = 0; i < 20; i++) {
		uint64_t before = t_mono(), c = __builtin_ia32_rdtsc(), after = t_mono();

		if (after - before < best) {
			best = after - before;
			*tsc = c;
			*ns = before + best / 2;
		}
	}
}

/*
 * A suspend between the first pair and the rate's: CLOCK_MONOTONIC stood
 * while the counter ran on (here 50 ms of it, made up: fault.h), so the
 * rate from those two pairs would be 0.4 of the true one and every
 * estimate early.  The calibration sees CLOCK_BOOTTIME move ahead and
 * measures again from a new first pair: the rate it settles on is the
 * counter's, within 1%.
 */
START_TEST(test_clock_rate_measured_across_a_suspend)
{
	struct kairos *k = t_create(NULL);	/* the first service: the rate's base */
	uint64_t t0, n0, t1, n1, truth, mult = 0;
	unsigned bases = 0;

	/* Only where the counter serves, and in a process of its own (CK_FORK). */
	if (!counter_on(k) || fast_calibration(&bases) || bases != 1) {
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		return;
	}
	/* The counter's rate, measured here; nothing reads the counter clock meanwhile. */
	tsc_pair_now(&t0, &n0);
	t_sleep_ms(50);
	tsc_pair_now(&t1, &n1);
	truth = (uint64_t)(((unsigned __int128)(n1 - n0) << 32) / (t1 - t0));
	/* Then the suspend: 50 ms of counter ticks, and CLOCK_BOOTTIME 50 ms ahead. */
	atomic_store(&fault_suspend_ticks, (long)(((unsigned __int128)(50 * T_MS) << 32) / truth));
	atomic_store(&fault_suspend_ns, (long)(50 * T_MS));
	for (int i = 0; i < 200 && !mult; i++) {
		(void)fast_now();
		t_sleep_ms(1);
		mult = fast_calibration(&bases);
	}
	atomic_store(&fault_suspend_ticks, 0);
	atomic_store(&fault_suspend_ns, 0);
	ck_assert_msg(mult, "no rate within 200 ms");
	ck_assert_msg(mult > truth - truth / 100 && mult < truth + truth / 100,
		      "rate %" PRIu64 " against the counter's %" PRIu64, mult, truth);
	/* One new base at least (a read interrupted for a millisecond may add one). */
	ck_assert_uint_ge(bases, 2);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Which timers take it                                                */

/* Arms a slack timer of @slack_ns on @k, waits for it, returns its id. */
static kairos_id slack_id(struct kairos *k, uint64_t slack_ns, bool *same_in_callback)
{
	struct t_timer tm;
	uint64_t before = t_now(k), fired = t_u64(&tt.fired);

	t_timer_init(&tm, &tt, before + 2 * T_MS, 0);
	ck_assert_int_eq(kairos_arm_slack(k, 2 * T_MS, slack_ns, t_cb, &tm, &tm.id), 0);
	atomic_fetch_add(&tt.armed, 1);
	/* The tally moves last: the callback is done with @tm. */
	t_wait_fired(fired + 1);
	/* The callback's id is made again from the record: the same bit. */
	*same_in_callback = t_u64(&tm.cb_id) == tm.id;
	return tm.id;
}

/*
 * The fast bit: set at arm for a slack of at least FAST_SLACK_MIN_NS in
 * whole ticks, on a CLOCK_MONOTONIC service without KAIROS_EXACT_CLOCK whose
 * machine has the counter; never on an exact timer; and the id the
 * callback gets has it too.
 */
START_TEST(test_clock_which_timers)
{
	struct kairos_config c = t_cfg(2, 1);
	struct kairos *k = t_create(&c);
	bool usable = counter_on(k), same;
	struct t_timer plain;
	kairos_id id;

	clock_info_is(k, usable ? "tsc" : "clock_gettime", usable ? "constant_tsc" : "");
	ck_assert_int_eq(!!(slack_id(k, 3 * T_MS, &same) & ID_FAST), usable);
	ck_assert(same);
	ck_assert_int_eq(!!(slack_id(k, T_MS, &same) & ID_FAST), usable);
	ck_assert(same);
	/* Under one tick (1 ms) of slack the timer is exact. */
	ck_assert_int_eq(!!(slack_id(k, T_MS - 1, &same) & ID_FAST), 0);
	ck_assert(same);
	ck_assert_int_eq(t_arm(k, &tt, &plain, 2 * T_MS), 0);
	ck_assert_int_eq(!!(plain.id & ID_FAST), 0);
	t_wait_fired(4);
	ck_assert(t_u64(&plain.cb_id) == plain.id);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);

	/* A 10 us tick: 50 us of slack is five ticks and takes the counter, 49 us does not. */
	c.tick_ns = 10 * T_US;
	k = t_create(&c);
	usable = counter_on(k);
	ck_assert_int_eq(!!(slack_id(k, 50 * T_US, &same) & ID_FAST), usable);
	ck_assert(same);
	ck_assert_int_eq(!!(slack_id(k, 49 * T_US, &same) & ID_FAST), 0);
	ck_assert(same);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);

	/* KAIROS_EXACT_CLOCK, CLOCK_BOOTTIME: every timer exact. */
	c = t_cfg(2, 1);
	c.flags = KAIROS_EXACT_CLOCK;
	k = t_create(&c);
	clock_info_is(k, "clock_gettime", "KAIROS_EXACT_CLOCK");
	id = slack_id(k, 10 * T_MS, &same);
	ck_assert(!(id & ID_FAST) && same);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_clock_info(k, NULL, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_clock_info(NULL, NULL, NULL), -EINVAL);
	c = t_cfg(2, 1);
	c.clock = CLOCK_BOOTTIME;
	k = t_create(&c);
	clock_info_is(k, "clock_gettime", "CLOCK_BOOTTIME");
	tt.clock = CLOCK_BOOTTIME;
	id = slack_id(k, 10 * T_MS, &same);
	ck_assert(!(id & ID_FAST) && same);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	t_check_calls(&tt, T_LATE);
	c = t_cfg(2, 1);
	c.clock = KAIROS_CLOCK_MANUAL;
	k = t_create(&c);
	clock_info_is(k, "manual", "manual clock");
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Never early, from several threads                                   */

enum { TH = 4, PER = 400 };

struct arm_thread {
	struct kairos *k;
	struct t_timer *tm;	/* PER of them */
	uint64_t *due;		/* the deadline each must not start before */
	uint64_t *slack;
	uint64_t seed;
};

/*
 * Arms PER slack timers 300 ms out, then resets each to U[1,30] ms from a
 * clock read taken just before the reset: the deadline it must keep.
 */
static void *arm_thread(void *arg)
{
	struct arm_thread *a = arg;

	for (int i = 0; i < PER; i++) {
		a->slack[i] = T_MS + t_rand_below(&a->seed, 4 * T_MS);
		t_timer_init(&a->tm[i], &tt, 0, 0);	/* judged after, from first_ns */
		if (kairos_arm_slack(a->k, 300 * T_MS, a->slack[i], t_cb, &a->tm[i],
				     &a->tm[i].id) != 0)
			atomic_fetch_add(&tt.bad, 1);
		else
			atomic_fetch_add(&tt.armed, 1);
	}
	for (int i = 0; i < PER; i++) {
		uint64_t delay = T_MS + t_rand_below(&a->seed, 29 * T_MS);

		a->due[i] = t_now(a->k) + delay;
		if (kairos_reset(a->k, a->tm[i].id, delay) != 0)
			atomic_fetch_add(&tt.bad, 1);
	}
	return NULL;
}

/*
 * TH threads arm and reset slack timers at once; each callback starts at
 * or after its reset's clock read plus its delay, and within its slack and
 * the usual allowance.  Loop 0: the default service (the counter where the
 * machine has it); loop 1: KAIROS_EXACT_CLOCK.
 */
START_TEST(test_clock_slack_never_early)
{
	struct kairos_config c = t_cfg(2, 2);
	struct arm_thread at[TH];
	pthread_t th[TH];
	struct kairos *k;
	bool on;

	if (_i == 1)
		c.flags = KAIROS_EXACT_CLOCK;
	k = t_create(&c);
	on = counter_on(k);
	if (_i == 1)
		ck_assert(!on);
	/* Past the rate's measuring interval, so that the counter serves. */
	t_sleep_ns(FAST_CAL_NS + 2 * T_MS);
	for (int j = 0; j < TH; j++) {
		at[j] = (struct arm_thread){ .k = k, .seed = t_seed(50 + (uint64_t)j) };
		at[j].tm = calloc(PER, sizeof(*at[j].tm));
		at[j].due = calloc(PER, sizeof(*at[j].due));
		at[j].slack = calloc(PER, sizeof(*at[j].slack));
		ck_assert(at[j].tm && at[j].due && at[j].slack);
		ck_assert_int_eq(pthread_create(&th[j], NULL, arm_thread, &at[j]), 0);
	}
	for (int j = 0; j < TH; j++)
		pthread_join(th[j], NULL);
	t_wait_fired(TH * PER);
	for (int j = 0; j < TH; j++) {
		for (int i = 0; i < PER; i++) {
			uint64_t first = t_u64(&at[j].tm[i].first_ns);

			ck_assert_int_eq(at[j].tm[i].runs, 1);
			ck_assert_msg(first >= at[j].due[i],
				      "thread %d timer %d started %" PRIu64 " ns early", j, i,
				      at[j].due[i] - first);
			ck_assert_uint_le(first, at[j].due[i] + at[j].slack[i] + T_LATE);
			ck_assert(t_u64(&at[j].tm[i].cb_id) == at[j].tm[i].id);
			ck_assert_int_eq(!!(at[j].tm[i].id & ID_FAST), on);
		}
		free(at[j].tm);
		free(at[j].due);
		free(at[j].slack);
	}
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clock");
	TCase *tc = tcase_create("counter");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_add_test(tc, test_clock_estimate);
	tcase_add_test(tc, test_clock_fast_never_early);
	tcase_add_test(tc, test_clock_rate_measured_across_a_suspend);
	tcase_add_test(tc, test_clock_which_timers);
	tcase_add_loop_test(tc, test_clock_slack_never_early, 0, 2);
	tcase_add_test(tc, test_clock_counter_behind_turns_off);
	suite_add_tcase(s, tc);
	return t_main(s, "clock");
}
