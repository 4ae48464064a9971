/* SPDX-License-Identifier: MIT */
/*
 * remaining.c - kairos_remaining(): the time left, counting down, 0 once
 * due, -ENOENT once ended, -EBUSY while a periodic callback runs, never
 * wrapped; and opts.jitter_ns: deadlines spread over [due, due + jitter],
 * never early, drawn again at each reset.
 *
 * Real clock, shared 2-core machine: every bound below is derived from
 * clock reads taken around the calls, so none depends on how fast the
 * machine is.  meson runs this program twice: with the backend the probe
 * picks and with KAIROS_BACKEND=epoll.
 */
#include <pthread.h>

#include "t_util.h"

/* The default tick: a deadline is rounded up to it. */
#define TICK	T_MS

/* kairos_remaining(), asserted to succeed. */
static uint64_t left(struct kairos *k, kairos_id id)
{
	uint64_t ns = 0;
	int rc = kairos_remaining(k, id, &ns);

	ck_assert_msg(rc == 0, "kairos_remaining: %d", rc);
	return ns;
}

static void nop(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
}

/* ------------------------------------------------------------------ */
/* kairos_remaining                                                    */

/*
 * The time left matches the deadline to within the clock reads around the
 * calls and one tick, and counts down by exactly the time that passed.
 */
START_TEST(test_remaining_counts_down)
{
	enum { N = 16 };
	struct kairos *k = t_create(NULL);
	uint64_t delay[N], armed_before[N], armed_after[N], r1[N], r2[N];
	uint64_t b1, a1, b2, a2;
	kairos_id id[N];

	for (int i = 0; i < N; i++) {
		delay[i] = (uint64_t)(i + 1) * T_SEC;
		armed_before[i] = t_now(k);
		ck_assert_int_eq(kairos_arm(k, delay[i], nop, NULL, &id[i]), 0);
		armed_after[i] = t_now(k);
	}
	b1 = t_now(k);
	for (int i = 0; i < N; i++)
		r1[i] = left(k, id[i]);
	a1 = t_now(k);
	t_sleep_ms(30);
	b2 = t_now(k);
	for (int i = 0; i < N; i++)
		r2[i] = left(k, id[i]);
	a2 = t_now(k);
	for (int i = 0; i < N; i++) {
		/* deadline = arm's clock read + delay, rounded up to a tick. */
		uint64_t lo = armed_before[i] + delay[i], hi = armed_after[i] + delay[i] + TICK;

		ck_assert_msg(r1[i] + a1 >= lo, "timer %d: %" PRIu64 " ns left is too little", i,
			      r1[i]);
		ck_assert_msg(r1[i] + b1 <= hi, "timer %d: %" PRIu64 " ns left is too much", i,
			      r1[i]);
		/* Between the two reads, exactly the time between them passed. */
		ck_assert_uint_ge(r1[i] - r2[i], b2 - a1);
		ck_assert_uint_le(r1[i] - r2[i], a2 - b1);
	}
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_cancel(k, id[i]), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A timer whose deadline has passed but whose expiry waits, untaken, in a
 * queue is due: 0 left, and still cancellable.  Once taken it has ended.
 * A deadline long past (armed in the past) is 0 too, never a wrapped value.
 */
START_TEST(test_remaining_due_is_zero)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_timer_opts o = { 0 };
	struct kairos_expiry e;
	kairos_id a, b;
	uint64_t ns = 12345;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, 2 * T_MS, &o, NULL, NULL, &a), 0);
	o.flags = KAIROS_ABSTIME;
	ck_assert_int_eq(kairos_arm_opts(k, 1, &o, NULL, NULL, &b), 0);
	/* Both expire into the queue, where nobody takes them yet. */
	t_sleep_ms(50);
	ck_assert_int_eq(kairos_remaining(k, a, &ns), 0);
	ck_assert_uint_eq(ns, 0);
	ns = 12345;
	ck_assert_int_eq(kairos_remaining(k, b, &ns), 0);
	ck_assert_uint_eq(ns, 0);
	/* Due and untaken: a cancel still wins, and then it has ended. */
	ck_assert_int_eq(kairos_cancel(k, b), 0);
	ck_assert_int_eq(kairos_remaining(k, b, &ns), -ENOENT);
	ck_assert_int_eq(kairos_queue_take(q, &e, 1, 5 * T_SEC), 1);
	ck_assert(e.id == a);
	ns = 777;
	ck_assert_int_eq(kairos_remaining(k, a, &ns), -ENOENT);
	ck_assert_uint_eq(ns, 777);	/* untouched on failure */
	kairos_queue_destroy(q);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Ended timers, bad arguments, a destroyed service. */
START_TEST(test_remaining_errors)
{
	struct kairos *k = t_create(NULL);
	struct t_timer fired;
	kairos_id id, gone;
	uint64_t ns = 0;

	ck_assert_int_eq(kairos_arm(k, T_SEC, nop, NULL, &id), 0);
	ck_assert_int_eq(kairos_remaining(NULL, id, &ns), -EINVAL);
	ck_assert_int_eq(kairos_remaining(k, id, NULL), -EINVAL);
	ck_assert_int_eq(kairos_remaining(k, 0, &ns), -EINVAL);
	ck_assert_int_eq(kairos_arm(k, T_SEC, nop, NULL, &gone), 0);
	ck_assert_int_eq(kairos_cancel(k, gone), 0);
	ck_assert_int_eq(kairos_remaining(k, gone, &ns), -ENOENT);
	/* An id of another life of a record, or one never issued. */
	ck_assert_int_eq(kairos_remaining(k, gone ^ (UINT64_C(1) << 40), &ns), -ENOENT);
	ck_assert_int_eq(kairos_remaining(k, ~UINT64_C(0), &ns), -ENOENT);
	/* A fired one-shot timer has ended. */
	ck_assert_int_eq(t_arm(k, &tt, &fired, T_MS), 0);
	t_wait_fired(1);
	ck_assert_int_eq(kairos_remaining(k, fired.id, &ns), -ENOENT);
	/* Far out: no overflow, no wrap. */
	ck_assert_int_eq(kairos_arm_at(k, UINT64_MAX - 1, nop, NULL, &gone), 0);
	ck_assert_uint_gt(left(k, gone), UINT64_MAX / 2);
	ck_assert_uint_le(left(k, id), T_SEC);
	/* Two still pending, @id and the far one: drained. */
	t_destroy(k, KAIROS_DRAIN_DROP, 2);
	ck_assert_int_eq(kairos_remaining(k, id, &ns), -ESHUTDOWN);
}
END_TEST

/*
 * While a callback runs: a one-shot timer has ended (-ENOENT), a periodic
 * one has no next deadline yet (-EBUSY), and has one again, within a
 * period, once the callback returns.
 */
START_TEST(test_remaining_while_running)
{
	struct kairos *k = t_create(NULL);
	struct t_block one, every;
	struct t_timer dummy = { 0 };	/* books the cancel of @every */
	kairos_id a, b;
	uint64_t ns;
	int rc = -EBUSY;

	t_block_init(&one, 0, 0);
	a = t_block_arm(k, &one, T_MS);
	t_block_wait_started(&one);
	ck_assert_int_eq(kairos_remaining(k, a, &ns), -ENOENT);
	atomic_store(&one.release, 1);

	t_block_init(&every, 1, 0);
	b = t_block_arm(k, &every, 10 * T_MS);
	t_block_wait_started(&every);
	ck_assert_int_eq(kairos_remaining(k, b, &ns), -EBUSY);
	atomic_store(&every.release, 1);
	ck_assert_int_eq(t_wait_int(&every.done, 1, T_WAIT_MS), 1);
	/* Pending again (a later run may be due or running meanwhile: retry). */
	for (int i = 0; i < 1000; i++) {
		rc = kairos_remaining(k, b, &ns);
		ck_assert_msg(rc == 0 || rc == -EBUSY, "remaining: %d", rc);
		if (rc == 0)
			break;
		t_sleep_ms(1);
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_le(ns, 10 * T_MS + TICK);
	dummy.period = 10 * T_MS;
	t_book_cancel(&tt, &dummy, kairos_cancel_sync(k, b));
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* A reset moves what is left; a reset to later than before shows more. */
START_TEST(test_remaining_after_reset)
{
	struct kairos *k = t_create(NULL);
	kairos_id id;
	uint64_t b, a, ns;

	ck_assert_int_eq(kairos_arm(k, 100 * T_MS, nop, NULL, &id), 0);
	ck_assert_uint_le(left(k, id), 100 * T_MS + TICK);
	b = t_now(k);
	ck_assert_int_eq(kairos_reset(k, id, 20 * T_SEC), 0);
	ns = left(k, id);
	a = t_now(k);
	ck_assert_uint_ge(ns + a, b + 20 * T_SEC);
	ck_assert_uint_le(ns + b, a + 20 * T_SEC + TICK);
	ck_assert_int_eq(kairos_reset(k, id, 5 * T_SEC), 0);
	ck_assert_uint_le(left(k, id), 5 * T_SEC + TICK);
	ck_assert_int_eq(kairos_cancel(k, id), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Readers racing a resetter: every answer is one of the deadlines it set. */
struct race {
	struct kairos *k;
	kairos_id id;
	atomic_int stop;
	atomic_int bad;
	atomic_uint_least64_t reads;
};

static void *race_reader(void *arg)
{
	struct race *r = arg;

	while (!t_int(&r->stop)) {
		uint64_t b = t_ns(CLOCK_MONOTONIC), ns = 0;
		int rc = kairos_remaining(r->k, r->id, &ns);

		/* Deadlines are 10 s or 20 s out: never less than 9 s, never above 20 s + a tick. */
		if (rc != 0 || ns > 20 * T_SEC + TICK || ns + (t_ns(CLOCK_MONOTONIC) - b) < 9 * T_SEC)
			atomic_fetch_add(&r->bad, 1);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

START_TEST(test_remaining_races_reset)
{
	struct race r = { .k = t_create(NULL) };
	pthread_t th[2];

	ck_assert_int_eq(kairos_arm(r.k, 10 * T_SEC, nop, NULL, &r.id), 0);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, race_reader, &r), 0);
	for (int i = 0; i < 20000; i++)
		ck_assert_int_eq(kairos_reset(r.k, r.id, (i & 1 ? 20 : 10) * T_SEC), 0);
	atomic_store(&r.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	ck_assert_int_eq(t_int(&r.bad), 0);
	ck_assert_uint_gt(t_u64(&r.reads), 0);
	ck_assert_int_eq(kairos_cancel(r.k, r.id), 0);
	t_destroy(r.k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Jitter                                                              */

/*
 * Checks that each of the @n timers @id, armed or reset between the clock
 * reads @b and @a with @delay and @jitter, is due inside its window, and
 * that the deadlines fill each quarter of the window fairly (more than an
 * eighth of them in each; uniform draws put a quarter there).  @what names
 * the step in messages.
 */
static void check_window(struct kairos *k, const kairos_id *id, int n, uint64_t b, uint64_t a,
			 uint64_t delay, uint64_t jitter, const char *what)
{
	int quarter[4] = { 0 };

	for (int i = 0; i < n; i++) {
		/* The deadline is in [lo + ns, hi + ns]: the call read its clock between. */
		uint64_t lo = t_now(k), ns = left(k, id[i]), hi = t_now(k);
		uint64_t off = lo + ns > b + delay ? lo + ns - (b + delay) : 0;
		unsigned qn = (unsigned)(off * 4 / (jitter + (a - b) + 2 * TICK));

		ck_assert_msg(hi + ns >= b + delay, "%s %d: due before its delay", what, i);
		ck_assert_msg(lo + ns <= a + delay + jitter + TICK, "%s %d: due after its window",
			      what, i);
		quarter[qn > 3 ? 3 : qn]++;
	}
	for (int i = 0; i < 4; i++)
		ck_assert_msg(quarter[i] > n / 8, "%s: quarter %d holds %d of %d deadlines", what, i,
			      quarter[i], n);
}

/*
 * Deadlines drawn over [delay, delay + jitter]: none outside (seen through
 * kairos_remaining), spread over the whole window, and drawn again at each
 * reset.
 */
START_TEST(test_jitter_spread_and_reset)
{
	enum { N = 4000 };
	const uint64_t delay = 10 * T_SEC, jitter = 4 * T_SEC;
	struct kairos *k = t_create(NULL);
	struct kairos_timer_opts o = { .jitter_ns = jitter };
	static kairos_id id[N];
	uint64_t b, a;

	b = t_now(k);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_arm_opts(k, delay, &o, nop, NULL, &id[i]), 0);
	a = t_now(k);
	check_window(k, id, N, b, a, delay, jitter, "arm");
	/* Resets draw again: a reset to the same delay spreads the same way. */
	b = t_now(k);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_reset(k, id[i], delay), 0);
	a = t_now(k);
	check_window(k, id, N, b, a, delay, jitter, "reset");
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_cancel(k, id[i]), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* What a jittered timer's callback checks: never before the delay itself. */
struct jt {
	struct t_timer t;
	uint64_t not_before;
};

static void jt_cb(void *arg, kairos_id id, int status)
{
	struct jt *j = arg;
	uint64_t now = t_ns(CLOCK_MONOTONIC);

	if (now < j->not_before)
		atomic_fetch_add(&tt.early, 1);
	t_cb(&j->t, id, status);
}

/*
 * Jittered timers fire: every one of them, once, never before its delay,
 * and spread: the first and last are well apart (the window is 200 ms, a
 * run of all of them in one tick would be far narrower).  Keys and jitter
 * together: the key reset draws the jitter too.
 */
START_TEST(test_jitter_fires_never_early)
{
	enum { N = 400 };
	const uint64_t delay = 20 * T_MS, jitter = 200 * T_MS;
	struct kairos *k = t_create(NULL);
	static struct jt j[N];
	struct kairos_timer_opts o = { .jitter_ns = jitter };
	uint64_t first = UINT64_MAX, last = 0;
	unsigned key = 42;

	for (int i = 0; i < N; i++) {
		uint64_t before = t_now(k);

		t_timer_init(&j[i].t, &tt, 0, 0);
		j[i].not_before = before + delay;
		if (i == 0) {
			/*
			 * The keyed one waits far out until its reset below moves
			 * it to 60 ms (+ up to its jitter) after a time later
			 * than this one.
			 */
			j[i].not_before = before + 60 * T_MS;
			o.key = &key;
			o.key_len = sizeof(key);
			ck_assert_int_eq(kairos_arm_opts(k, 600 * T_SEC, &o, jt_cb, &j[i],
							 &j[i].t.id), 0);
			o.key = NULL;
			o.key_len = 0;
		} else {
			ck_assert_int_eq(kairos_arm_opts(k, delay, &o, jt_cb, &j[i], &j[i].t.id),
					 0);
		}
		atomic_fetch_add(&tt.armed, 1);
	}
	ck_assert_int_eq(kairos_key_reset(k, &key, sizeof(key), 60 * T_MS), 0);
	t_wait_fired(N);
	for (int i = 0; i < N; i++) {
		uint64_t at = t_u64(&j[i].t.first_ns);

		ck_assert_int_eq(t_int(&j[i].t.runs), 1);
		first = at < first ? at : first;
		last = at > last ? at : last;
	}
	ck_assert_uint_eq(t_u64(&tt.early), 0);
	ck_assert_msg(last - first >= jitter / 2, "%d timers fired within %" PRIu64 " ns", N,
		      last - first);
	t_check_calls(&tt, T_LATE + jitter);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A periodic timer's first deadline takes the jitter; its later runs keep
 * the period from there.  Huge jitters saturate (the timer never comes)
 * and stay cancellable.
 */
START_TEST(test_jitter_periodic_and_huge)
{
	const uint64_t period = 20 * T_MS, jitter = 40 * T_MS;
	struct kairos *k = t_create(NULL);
	struct kairos_timer_opts o = { .jitter_ns = jitter, .period_ns = period };
	struct t_timer p;
	kairos_id far;
	uint64_t before, after, lo, hi, ns, first;
	int covered = 0;

	/* No check in the callback: the jittered grid is known only after the arm. */
	t_timer_init(&p, &tt, 0, period);
	before = t_now(k);
	ck_assert_int_eq(kairos_arm_opts(k, 200 * T_MS, &o, t_cb, &p, &p.id), 0);
	after = t_now(k);
	atomic_fetch_add(&tt.armed, 1);
	lo = t_now(k);
	ns = left(k, p.id);
	hi = t_now(k);
	ck_assert_uint_ge(hi + ns, before + 200 * T_MS);
	ck_assert_uint_le(lo + ns, after + 200 * T_MS + jitter + TICK);
	/* Its first deadline is at least lo + ns; run n covers the periods after it. */
	first = lo + ns;
	ck_assert_int_eq(t_wait_int(&p.runs, 4, T_WAIT_MS), 4);
	t_book_cancel(&tt, &p, kairos_cancel_sync(k, p.id));
	for (int i = 0; i < 4; i++) {
		covered += t_int(&p.st[i]);
		ck_assert_msg(t_u64(&p.at[i]) >= first + (uint64_t)(covered - 1) * period,
			      "run %d came before its place on the grid", i);
	}
	o.period_ns = 0;
	o.jitter_ns = UINT64_MAX;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, nop, NULL, &far), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert_uint_ge(left(k, far), T_SEC - 100 * T_MS);
	ck_assert_int_eq(kairos_reset(k, far, T_SEC), 0);
	ck_assert_uint_ge(left(k, far), T_SEC - 100 * T_MS);
	ck_assert_int_eq(kairos_cancel(k, far), 0);
	atomic_fetch_add(&tt.cancelled, 1);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("remaining");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_add_test(tc, test_remaining_counts_down);
	tcase_add_test(tc, test_remaining_due_is_zero);
	tcase_add_test(tc, test_remaining_errors);
	tcase_add_test(tc, test_remaining_while_running);
	tcase_add_test(tc, test_remaining_after_reset);
	tcase_add_test(tc, test_remaining_races_reset);
	tcase_add_test(tc, test_jitter_spread_and_reset);
	tcase_add_test(tc, test_jitter_fires_never_early);
	tcase_add_test(tc, test_jitter_periodic_and_huge);
	suite_add_tcase(s, tc);
	return t_main(s, "remaining");
}
