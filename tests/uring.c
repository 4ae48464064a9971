/* SPDX-License-Identifier: MIT */
/*
 * uring.c - checks that only make sense on the io_uring backend.
 *
 * Every service here is created with KAIROS_BACKEND_URING, which fails
 * rather than fall back.  When the kernel refuses io_uring (ENOSYS, EPERM
 * from a seccomp profile, kernel.io_uring_disabled) the program says why and
 * exits 77, which meson reports as a skip, as liburing's own tests do; the
 * epoll backend is covered by every service program, run again with it forced.
 */
#include <limits.h>
#include <pthread.h>

#include "t_util.h"
#include "../src/fault.h"	/* fault_wait_fail(s): the ring refuses its waits */

static struct kairos_config t_uring_cfg(unsigned shards)
{
	struct kairos_config c;

	kairos_config_default(&c);
	c.shards = shards;
	c.backend = KAIROS_BACKEND_URING;
	return c;
}

static struct kairos_stats t_stats(struct kairos *k)
{
	struct kairos_stats s;

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	return s;
}

START_TEST(test_uring_every_shard)
{
	struct kairos_config c = t_uring_cfg(0);
	struct kairos *k = t_create(&c);
	struct kairos_stats s = t_stats(k);

	ck_assert_uint_ge(s.shards, 1);
	for (unsigned i = 0; i < s.shards; i++) {
		const char *name = NULL, *why = NULL;

		ck_assert_int_eq(kairos_backend_info(k, i, &name, &why), 0);
		ck_assert_str_eq(name, "io_uring");
		ck_assert_msg(why && why[0], "shard %u: no reason given", i);
	}
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
}
END_TEST

/*
 * Cancels every @step-th of the @n timers @tm, waits for the rest to fire:
 * each ran once or was cancelled once, none early, the counts add up, and
 * nothing is pending; then destroys @k and frees @tm.
 */
static void cancel_every_then_end(struct kairos *k, struct t_timer *tm, int n, int step)
{
	for (int i = 0; i < n; i += step)
		t_book_cancel(&tt, &tm[i], kairos_cancel(k, tm[i].id));
	t_wait_fired(t_u64(&tt.armed) - t_u64(&tt.cancelled));
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(tm[i].runs + tm[i].cancel_ok, 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	free(tm);
}

START_TEST(test_uring_never_early)
{
	enum { N = 2000 };
	struct kairos_config c = t_uring_cfg(2);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(1);

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N; i++) {
		uint64_t d = t_rand_below(&seed, 30 * T_MS + 1);

		if (i % 4 == 0)
			ck_assert_int_eq(t_arm_at(k, &tt, &tm[i], t_now(k) + d), 0);
		else
			ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
	}
	cancel_every_then_end(k, tm, N, 9);
}
END_TEST

/*
 * Tickless: with nothing due, a shard sleeps in the kernel and its counters
 * stand still.  Measured after a settling delay, since arming and firing
 * wake shards up.
 */
static void t_idle_check(struct kairos *k, const char *what)
{
	struct kairos_stats a, b;

	/*
	 * The wake-ups of what came before (an arm's wake, a flush) may come
	 * late on a stalled machine: a few windows, one of them quiet.  A
	 * shard that ticks is never quiet for 300 ms.
	 */
	for (int i = 0; i < 4; i++) {
		t_sleep_ms(50);
		a = t_stats(k);
		t_sleep_ms(300);
		b = t_stats(k);
		if (b.wakeups == a.wakeups && b.timer_sets == a.timer_sets)
			break;
	}
	ck_assert_msg(b.wakeups == a.wakeups, "%s: %" PRIu64 " wake-ups in 300 ms idle", what,
		      b.wakeups - a.wakeups);
	ck_assert_msg(b.timer_sets == a.timer_sets,
		      "%s: %" PRIu64 " timerfd_settime() in 300 ms idle", what,
		      b.timer_sets - a.timer_sets);
}

/* Sleeps until @t on @k's clock. */
static void sleep_until(struct kairos *k, uint64_t t)
{
	uint64_t now = t_now(k);

	if (now < t)
		t_sleep_ns(t - now);
}

/*
 * While refusals that could pass last (a second and 100 tries at the least,
 * counted from @t0 or later), the shard keeps the ring and keeps passing:
 * within the second it still says io_uring, each of the @n timers @tm due
 * in the first 300 ms has run (by 950 ms at the latest), and it has tried
 * about once a millisecond (a wake-up each: 60 at the least in 600 ms).
 * Judged only if this thread looked within the second.
 */
static void still_trying(struct kairos *k, struct t_timer *tm, int n, uint64_t t0)
{
	struct kairos_stats a, b;
	const char *name = NULL, *why = NULL;
	int due = 0, ran = 0;

	sleep_until(k, t0 + 100 * T_MS);
	a = t_stats(k);
	sleep_until(k, t0 + 700 * T_MS);
	b = t_stats(k);
	/* Their runs, waited for until 950 ms (a stalled worker). */
	do {
		due = ran = 0;
		for (int i = 0; i < n; i++) {
			if (tm[i].deadline >= t0 + 300 * T_MS)
				continue;
			due++;
			ran += t_int(&tm[i].runs) > 0;
		}
		if (ran == due)
			break;
		t_sleep_ms(1);
	} while (t_now(k) < t0 + 950 * T_MS);
	ck_assert_int_eq(kairos_backend_info(k, 0, &name, &why), 0);
	if (t_now(k) - t0 >= T_SEC) {
		fprintf(stderr, "still_trying: this thread looked after the second; not judged\n");
		return;
	}
	ck_assert_str_eq(name, "io_uring");
	ck_assert_int_gt(due, 0);
	ck_assert_msg(ran == due, "%d of the %d timers due in the first 300 ms of refusals ran",
		      ran, due);
	ck_assert_msg(b.wakeups - a.wakeups >= 60, "%" PRIu64 " tries in 600 ms of refusals",
		      b.wakeups - a.wakeups);
}

/*
 * The ring stops working at run time (its waits are refused: fault.h): the
 * shard moves to epoll and timerfd and says why, and nothing is lost: the
 * timers pending then, near and far, and those armed after, fire once each
 * and never early; cancels still win; the counts add up.  Loop 0: a refusal
 * that could pass (EAGAIN) that lasts: the shard tries again for a second,
 * its timers running meanwhile, then gives up; loop 1: one refusal that
 * cannot pass (EPERM, as from a seccomp filter), and it moves at once.
 */
START_TEST(test_uring_stops_working_at_run_time)
{
	enum { N = 400 };
	const int err = _i == 0 ? EAGAIN : EPERM;
	struct kairos_config c = t_uring_cfg(1);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	const char *why;
	uint64_t seed = t_seed(3), t0;

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N / 2; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 20 * T_MS + t_rand_below(&seed, 200 * T_MS)),
				 0);
	/* Before the refusals begin: the shard's second is counted from later. */
	t0 = t_now(k);
	atomic_store(&fault_wait_fail, err);
	atomic_store(&fault_wait_how, 0);
	atomic_store(&fault_wait_fails, _i == 0 ? INT_MAX : 1);
	/* One due at once wakes the shard; its next wait is refused. */
	ck_assert_int_eq(t_arm(k, &tt, &tm[N / 2], 0), 0);
	if (_i == 0)
		still_trying(k, tm, N / 2 + 1, t0);
	why = t_backend_becomes(k, "epoll");
	atomic_store(&fault_wait_fails, 0);
	ck_assert_msg(strstr(why, "stopped working at run time") && strstr(why, strerror(err)),
		      "why: %s", why);
	/* A refusal that could pass was tried again for a second; the other was not. */
	if (_i == 0)
		ck_assert_uint_ge(t_now(k) - t0, T_SEC);
	for (int i = N / 2 + 1; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 100 * T_MS)), 0);
	cancel_every_then_end(k, tm, N, 7);
}
END_TEST

/*
 * After the move to epoll, the ring's reads may still take a count of the
 * eventfd (the kernel cancels them after the ring is gone): a wake-up so
 * taken (fault_kick_lost) leaves the shard's flag saying "written" and
 * epoll with nothing to report.  For a second after the move the shard
 * waits 10 ms at a time, so a timer armed then still runs (before: never,
 * the shard asleep with no timerfd armed and posters writing nothing).
 */
START_TEST(test_uring_wake_lost_after_move)
{
	struct kairos_config c = t_uring_cfg(1);
	struct kairos *k = t_create(&c);
	struct t_timer tm[2] = { 0 };

	atomic_store(&fault_wait_fail, EPERM);
	atomic_store(&fault_wait_how, 0);
	atomic_store(&fault_wait_fails, 1);
	/* One due at once wakes the shard; its next wait is refused. */
	ck_assert_int_eq(t_arm(k, &tt, &tm[0], 0), 0);
	(void)t_backend_becomes(k, "epoll");
	atomic_store(&fault_wait_fails, 0);
	ck_assert_int_eq(t_wait_u64(&tt.fired, 1, T_WAIT_MS), 1);
	atomic_store(&fault_kick_lost, 1);
	ck_assert_int_eq(t_arm(k, &tt, &tm[1], 5 * T_MS), 0);
	ck_assert_msg(t_wait_u64(&tt.fired, 2, T_WAIT_MS) == 2,
		      "the timer armed with its wake-up lost never ran");
	ck_assert_int_eq(atomic_load(&fault_kick_lost), 0);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * The ring refuses some waits for want of memory or of completion space,
 * then works again: the shard keeps it, with the reason it gave at the
 * start, and its timers run: those due while the waits are refused (armed
 * before and during), and those after, once each, never early; the counts
 * add up.  Loops 0-2: the kernel refuses the enter (EAGAIN, ENOMEM, EBUSY),
 * the wait's reads left queued; loops 3-5: the reads' completions fail
 * (ENOMEM, EAGAIN, EINTR), what they read lost (the last two are no
 * refusal, and were taken as reads of nothing: the shard slept past the
 * expiry it lost).
 */
START_TEST(test_uring_refused_for_a_moment)
{
	enum { N = 400, REFUSED = 20 };
	static const int errs[] = { EAGAIN, ENOMEM, EBUSY, ENOMEM, EAGAIN, EINTR };
	struct kairos_config c = t_uring_cfg(1);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	const char *name = NULL, *why = NULL;
	char why0[256];
	uint64_t seed = t_seed(4);
	int i = 0;

	ck_assert_ptr_nonnull(tm);
	ck_assert_int_eq(kairos_backend_info(k, 0, &name, &why), 0);
	snprintf(why0, sizeof(why0), "%s", why);
	for (; i < N / 4; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 60 * T_MS)), 0);
	atomic_store(&fault_wait_fail, errs[_i]);
	atomic_store(&fault_wait_how, _i >= 3);
	atomic_store(&fault_wait_fails, REFUSED);
	/*
	 * Due during the refusals, one armed each millisecond (each wakes the
	 * shard: a read completes) until they are used up.
	 */
	for (int j = 0; j < T_WAIT_MS && atomic_load(&fault_wait_fails); j++) {
		if (i < 3 * N / 4)
			ck_assert_int_eq(t_arm(k, &tt, &tm[i++], t_rand_below(&seed, 5 * T_MS)), 0);
		t_sleep_ms(1);
	}
	ck_assert_msg(atomic_load(&fault_wait_fails) == 0,
		      "%d of %d refusals left: the shard left the ring, or stopped waking up",
		      atomic_load(&fault_wait_fails), REFUSED);
	for (; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 60 * T_MS)), 0);
	ck_assert_int_eq(kairos_backend_info(k, 0, &name, &why), 0);
	ck_assert_str_eq(name, "io_uring");
	ck_assert_str_eq(why, why0);
	cancel_every_then_end(k, tm, N, 7);
}
END_TEST

START_TEST(test_uring_idle_no_wakeups)
{
	enum { N = 1000 };
	struct kairos_config c = t_uring_cfg(2);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(N + 1, sizeof(*tm));
	struct kairos_stats a, b;

	ck_assert_ptr_nonnull(tm);
	t_idle_check(k, "fresh service");

	/*
	 * A burst due in order, 100 ms out, each later than the one before:
	 * the earliest deadline never moves earlier, so the timerfd needs
	 * setting about once per tick that has timers, not once per timer.
	 */
	a = t_stats(k);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 100 * T_MS + (uint64_t)i * 10 * T_US), 0);
	t_wait_fired(N);
	b = t_stats(k);
	ck_assert_msg(b.timer_sets - a.timer_sets <= 200,
		      "%" PRIu64 " timerfd_settime() calls for %d timers over 10 ms",
		      b.timer_sets - a.timer_sets, N);
	t_idle_check(k, "after a burst");

	/* A far timer pending does not make the shards tick either. */
	ck_assert_int_eq(t_arm(k, &tt, &tm[N], 60 * T_SEC), 0);
	t_idle_check(k, "one timer 60 s out");
	t_book_cancel(&tt, &tm[N], kairos_cancel(k, tm[N].id));
	ck_assert_int_eq(tm[N].cancel_ok, 1);
	t_idle_check(k, "after the cancel");

	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	free(tm);
}
END_TEST

#define BURST_THREADS	4
#define BURST_PER	2000

struct t_burst {
	struct kairos *k;
	struct t_timer *tm;
	uint64_t seed;
};

static void *t_burst_thread(void *arg)
{
	struct t_burst *b = arg;

	for (int i = 0; i < BURST_PER; i++)
		if (t_arm(b->k, &tt, &b->tm[i], t_rand_below(&b->seed, 2 * T_MS)) != 0)
			atomic_fetch_add(&tt.bad, 1);
	return NULL;
}

/* Ring sizes for the loop test below, one run each. */
static const unsigned t_ring_sizes[] = { 1, 2, 4 };

START_TEST(test_uring_tiny_ring_burst)
{
	struct kairos_config c = t_uring_cfg(2);
	struct t_timer *tm = calloc(BURST_THREADS * BURST_PER, sizeof(*tm));
	struct t_burst b[BURST_THREADS];
	pthread_t th[BURST_THREADS];
	struct kairos *k;

	ck_assert_ptr_nonnull(tm);
	t_setup();
	/* Far fewer submission entries than requests in flight. */
	c.ring_entries = t_ring_sizes[_i];
	k = t_create(&c);
	for (int i = 0; i < BURST_THREADS; i++) {
		b[i] = (struct t_burst){ .k = k, .tm = &tm[i * BURST_PER],
					 .seed = t_seed(10 + (uint64_t)i) };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_burst_thread, &b[i]), 0);
	}
	for (int i = 0; i < BURST_THREADS; i++)
		pthread_join(th[i], NULL);
	t_wait_fired(BURST_THREADS * BURST_PER);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	free(tm);
}
END_TEST

/*
 * Creates and destroys a forced-io_uring service; returns 0, or the refusal
 * to report as a skip.
 */
static int t_probe(void)
{
	struct kairos_config c = t_uring_cfg(1);
	struct kairos *k = NULL;
	int rc = kairos_create(&c, &k);

	if (rc == 0) {
		t_keep(k);
		kairos_destroy(k, KAIROS_DRAIN_DROP);
	}
	return rc;
}

int main(void)
{
	Suite *s;
	TCase *tc;
	int rc = t_probe();

	switch (rc) {
	case 0:
		break;
	case -ENOSYS:
	case -EPERM:
	case -EACCES:
	case -EOPNOTSUPP:
	case -ENOMEM:	/* RLIMIT_MEMLOCK on kernels before 5.12 */
		printf("io_uring refused by the kernel (%s): skipping\n", strerror(-rc));
		return 77;
	default:
		printf("kairos_create(KAIROS_BACKEND_URING) failed: %d (%s)\n", rc, strerror(-rc));
		return EXIT_FAILURE;
	}

	s = suite_create("uring");
	tc = tcase_create("uring");
	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_uring_every_shard);
	tcase_add_test(tc, test_uring_never_early);
	tcase_add_loop_test(tc, test_uring_stops_working_at_run_time, 0, 2);
	tcase_add_loop_test(tc, test_uring_refused_for_a_moment, 0, 6);
	tcase_add_test(tc, test_uring_wake_lost_after_move);
	tcase_add_test(tc, test_uring_idle_no_wakeups);
	tcase_add_loop_test(tc, test_uring_tiny_ring_burst, 0,
			    (int)(sizeof(t_ring_sizes) / sizeof(t_ring_sizes[0])));
	suite_add_tcase(s, tc);
	return t_main(s, "uring");
}
