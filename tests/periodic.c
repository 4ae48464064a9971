/* SPDX-License-Identifier: MIT */
/*
 * periodic.c - periodic timers: counts, no drift, missed periods coalesced into
 * one call's status, and next deadlines that saturate instead of wrapping.
 *
 * Real clock, shared 2-core machine: lower bounds are strict, upper bounds
 * generous, and nothing asserts speed.  meson runs this program twice: with
 * the backend the probe picks and with KAIROS_BACKEND=epoll.
 */
#include <limits.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "t_util.h"

/* ------------------------------------------------------------------ */
/* Periodic timers                                                     */

START_TEST(test_periodic_count)
{
	struct kairos *k = t_create(NULL);
	uint64_t t_end;
	struct t_timer p;
	int runs, rc;

	ck_assert_int_eq(t_arm_every(k, &tt, &p, 10 * T_MS), 0);
	t_sleep_ms(200);
	rc = t_cancel_sync(k, &tt, &p);
	ck_assert_msg(rc == 0 || rc == -EBUSY, "cancel_sync: %d", rc);
	t_end = t_now(k);
	runs = t_int(&p.runs);
	/* About 20 periods passed; a loaded machine may merge some. */
	ck_assert_msg(t_int(&p.covered) >= 5, "only %d periods in 200 ms", t_int(&p.covered));
	/* Never more than the periods that were due (the never-early bound). */
	ck_assert_msg((uint64_t)t_int(&p.covered) <= (t_end - p.base) / (10 * T_MS),
		      "%d periods in %" PRIu64 " ns", t_int(&p.covered), t_end - p.base);
	ck_assert_int_ge(t_int(&p.max_status), 1);
	/* Cancelled: no run after cancel_sync returned. */
	t_sleep_ms(50);
	ck_assert_int_eq(t_int(&p.runs), runs);
	ck_assert_int_eq(kairos_cancel(k, p.id), -ENOENT);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_periodic_no_drift)
{
	const uint64_t period = 2 * T_MS;
	struct kairos *k = t_create(NULL);
	uint64_t after, last, due;
	struct t_timer p;
	int covered;

	ck_assert_int_eq(t_arm_every(k, &tt, &p, period), 0);
	after = t_now(k);
	t_sleep_ms(400);
	/* A run past 300 ms (later on a stalled machine). */
	for (int i = 0; i < T_WAIT_MS && t_u64(&p.last_ns) <= after + 300 * T_MS; i++)
		t_sleep_ms(1);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	last = t_u64(&p.last_ns);
	covered = t_int(&p.covered);
	ck_assert(last > after + 300 * T_MS);
	/*
	 * Deadlines are t0 + k * period, not "previous run + period": by the
	 * last run, the runs covered all but a few of the periods due.  A timer
	 * re-armed from its run time would lose a period in every few here.
	 * 25 periods (50 ms) of slack absorb a late worker.
	 */
	due = (last - after) / period;
	ck_assert_msg((uint64_t)covered + 25 >= due, "%d periods covered of %" PRIu64 " due",
		      covered, due);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

static void t_cb_slow_first(void *arg, kairos_id id, int status)
{
	struct t_timer *t = arg;

	t_cb(arg, id, status);
	/* 3.5 periods of 10 ms, once. */
	if (status > 0 && t_int(&t->runs) == 1)
		t_sleep_ns(35 * T_MS);
}

START_TEST(test_periodic_missed)
{
	struct kairos *k = t_create(NULL);
	struct t_timer p;

	ck_assert_int_eq(t_arm_every_fn(k, &tt, &p, 10 * T_MS, t_cb_slow_first, true), 0);
	ck_assert_int_ge(t_wait_int(&p.runs, 2, T_WAIT_MS), 2);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	ck_assert_int_ge(t_int(&p.st[0]), 1);
	/* The call after the slow one covers the periods it missed. */
	ck_assert_msg(t_int(&p.st[1]) >= 2, "status after a 3.5-period stall: %d",
		      t_int(&p.st[1]));
	/* The second call started after the slow first one returned. */
	ck_assert(t_u64(&p.at[1]) >= t_u64(&p.at[0]) + 35 * T_MS);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Deadline arithmetic saturates                                       */

/*
 * A period so long that now + period barely fits (100 ms to spare) is
 * accepted; after a reset to 200 ms from now it runs once, and its next
 * run, deadline + period, is past 2^64 ns: it must saturate (a run 585
 * years out), not wrap into the past and run again at once.
 */

START_TEST(test_periodic_next_saturates)
{
	struct kairos *k = t_create(NULL);
	struct t_timer t;
	uint64_t now = t_now(k);

	ck_assert_int_eq(t_arm_every(k, &tt, &t, UINT64_MAX - now - 100 * T_MS), 0);
	t.base = 0;	/* the reset moves its first run */
	ck_assert_int_eq(kairos_reset_at(k, t.id, t_now(k) + 200 * T_MS), 0);
	ck_assert_int_eq(t_wait_int(&t.runs, 1, T_WAIT_MS), 1);
	t_sleep_ms(300);
	ck_assert_int_eq(t_int(&t.runs), 1);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &t), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("periodic");
	TCase *tc = tcase_create("periodic");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_periodic_count);
	tcase_add_test(tc, test_periodic_no_drift);
	tcase_add_test(tc, test_periodic_missed);
	tcase_add_test(tc, test_periodic_next_saturates);
	suite_add_tcase(s, tc);
	return t_main(s, "periodic");
}
