/* SPDX-License-Identifier: MIT */
/*
 * reset.c - reset and reset_at: later (a store), earlier (a relink), after the
 * end, from the timer's own callback, of periodic timers, and a storm at
 * scale with flat memory.
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
#include "internal.h"	/* a shard's sleep_tick */
#include "../src/fault.h"	/* fault_reset_hold, fault_pass_hold, fault_wake_hold, fault_kicked_hold */

/* ------------------------------------------------------------------ */
/* Reset                                                               */

START_TEST(test_reset_later)
{
	enum { N = 200 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];
	uint64_t seed = t_seed(3), want[N];
	int rc[N], moved = 0;

	for (int i = 0; i < N; i++) {
		/* Far enough that a stalled machine still pushes most in time. */
		uint64_t d = 300 * T_MS + t_rand_below(&seed, 100 * T_MS);

		ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
	}
	/*
	 * Push each later three times; the deadline of the last reset that
	 * returned 0 is the one that counts.  -ENOENT (the machine stalled past
	 * a deadline) ends the pushing for that timer.
	 */
	for (int i = 0; i < N; i++) {
		rc[i] = 0;
		want[i] = tm[i].deadline;
	}
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			uint64_t d = 450 * T_MS + (uint64_t)round * 100 * T_MS +
				     t_rand_below(&seed, 100 * T_MS);
			uint64_t before = t_now(k);
			int r;

			if (rc[i] != 0)
				continue;
			r = kairos_reset(k, tm[i].id, d);
			if (r == 0)
				want[i] = before + d;
			else
				rc[i] = r;
		}
	}
	t_wait_fired(N);
	for (int i = 0; i < N; i++) {
		/* -ENOENT only if the machine stalled past the first deadline. */
		ck_assert_msg(rc[i] == 0 || rc[i] == -ENOENT, "reset: %d", rc[i]);
		ck_assert_msg(t_u64(&tm[i].first_ns) >= want[i],
			      "timer %d fired %" PRIu64 " ns before its new deadline", i,
			      want[i] - t_u64(&tm[i].first_ns));
		ck_assert_int_eq(tm[i].runs, 1);
		moved += rc[i] == 0;
	}
	ck_assert_msg(moved >= N / 2, "only %d of %d resets took", moved, N);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * kairos_reset_at takes an absolute deadline: later and earlier both hold,
 * one in the past fires promptly, and after the end it is -ENOENT.
 */

START_TEST(test_reset_at)
{
	struct kairos *k = t_create(NULL);
	struct t_timer later, earlier, past;
	uint64_t now = t_now(k), want_later, want_earlier;

	ck_assert_int_eq(t_arm(k, &tt, &later, 20 * T_MS), 0);
	ck_assert_int_eq(t_arm(k, &tt, &earlier, 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm(k, &tt, &past, 10 * T_SEC), 0);
	/* Moved deadlines: checked below from first_ns, not in the callback. */
	later.base = earlier.base = past.base = 0;
	want_later = now + 60 * T_MS;
	want_earlier = now + 30 * T_MS;
	ck_assert_int_eq(kairos_reset_at(k, later.id, want_later), 0);
	ck_assert_int_eq(kairos_reset_at(k, earlier.id, want_earlier), 0);
	ck_assert_int_eq(kairos_reset_at(k, past.id, now - T_MS), 0);
	ck_assert_int_eq(kairos_reset_at(k, 0, now), -EINVAL);
	ck_assert_int_eq(kairos_reset_at(NULL, later.id, now), -EINVAL);
	t_wait_fired(3);
	ck_assert_uint_ge(t_u64(&later.first_ns), want_later);
	ck_assert_uint_ge(t_u64(&earlier.first_ns), want_earlier);
	/* Moved from 10 s to the past: it ran long before its old deadline. */
	ck_assert_uint_lt(t_u64(&past.first_ns), now + 5 * T_SEC);
	ck_assert_int_eq(kairos_reset_at(k, later.id, now + T_SEC), -ENOENT);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_reset_at(k, later.id, now), -ESHUTDOWN);
}
END_TEST

START_TEST(test_reset_earlier)
{
	enum { N = 100 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];
	uint64_t seed = t_seed(4), want[N], start;

	/* Checked afterwards: the callback only knows the old deadline. */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm_fn(k, &tt, &tm[i], 5 * T_SEC, t_cb, false), 0);
	start = t_now(k);
	for (int i = 0; i < N; i++) {
		uint64_t d = T_MS + t_rand_below(&seed, 20 * T_MS);
		uint64_t before = t_now(k);

		ck_assert_int_eq(kairos_reset(k, tm[i].id, d), 0);
		want[i] = before + d;
	}
	t_wait_fired(N);
	for (int i = 0; i < N; i++) {
		uint64_t at = t_u64(&tm[i].first_ns);

		ck_assert_msg(at >= want[i],
			      "timer %d fired %" PRIu64 " ns before its new deadline", i,
			      want[i] - at);
		/* Earlier for real: long before the old 5 s deadline. */
		ck_assert_msg(at - start < 2 * T_SEC, "timer %d fired at the old deadline", i);
	}
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Earlier, later, earlier again, at random moments, from two threads. */
struct t_reset_mix {
	struct kairos *k;
	struct t_timer *tm;
	uint64_t *want;		/* the deadline of the last reset that returned 0 */
	int *rc;
	int lo, hi;
	uint64_t seed;
};

static void *t_reset_mix_thread(void *arg)
{
	struct t_reset_mix *m = arg;

	for (int round = 0; round < 3; round++) {
		for (int i = m->lo; i < m->hi; i++) {
			uint64_t d = T_MS + t_rand_below(&m->seed, 40 * T_MS);
			uint64_t before = 0;
			int r;

			if (m->rc[i] != 0)
				continue;
			kairos_now(m->k, &before);
			r = kairos_reset(m->k, m->tm[i].id, d);
			if (r == 0)
				m->want[i] = before + d;
			else if (r == -ENOENT)
				m->rc[i] = r;
			else
				atomic_fetch_add(&tt.bad, 1);
			if (t_rand_below(&m->seed, 16) == 0)
				t_sleep_ns(t_rand_below(&m->seed, T_MS));
		}
	}
	return NULL;
}

START_TEST(test_reset_random)
{
	enum { N = 1000 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t *want = calloc(N, sizeof(*want)), seed = t_seed(5);
	int *rc = calloc(N, sizeof(*rc));
	struct t_reset_mix m[2];
	pthread_t th[2];

	ck_assert_ptr_nonnull(tm);
	ck_assert_ptr_nonnull(want);
	ck_assert_ptr_nonnull(rc);
	for (int i = 0; i < N; i++) {
		uint64_t d = 5 * T_MS + t_rand_below(&seed, 35 * T_MS);

		ck_assert_int_eq(t_arm_fn(k, &tt, &tm[i], d, t_cb, false), 0);
		want[i] = tm[i].deadline;
	}
	for (int i = 0; i < 2; i++) {
		m[i] = (struct t_reset_mix){ .k = k, .tm = tm, .want = want, .rc = rc,
					     .lo = i * N / 2, .hi = (i + 1) * N / 2,
					     .seed = t_seed(50 + (uint64_t)i) };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_reset_mix_thread, &m[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	t_wait_fired(N);
	/*
	 * A timer fires at the deadline of its last successful reset, not
	 * before; one whose reset found it firing keeps the deadline it had.
	 */
	for (int i = 0; i < N; i++) {
		uint64_t at = t_u64(&tm[i].first_ns);

		ck_assert_int_eq(tm[i].runs, 1);
		ck_assert_msg(at >= want[i], "timer %d fired %" PRIu64 " ns early", i,
			      want[i] - at);
	}
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
	free(want);
	free(rc);
}
END_TEST

START_TEST(test_reset_after_end)
{
	struct kairos *k = t_create(NULL);
	struct t_timer f, c, p;

	ck_assert_int_eq(t_arm(k, &tt, &f, 0), 0);
	ck_assert_int_eq(t_arm(k, &tt, &c, 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm_every(k, &tt, &p, 10 * T_SEC), 0);
	t_wait_fired(1);
	ck_assert_int_eq(t_cancel(k, &tt, &c), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &p), 0);
	ck_assert_int_eq(kairos_reset(k, f.id, T_MS), -ENOENT);
	ck_assert_int_eq(kairos_reset(k, c.id, T_MS), -ENOENT);
	ck_assert_int_eq(kairos_reset(k, p.id, T_MS), -ENOENT);
	/* A refused reset did not bring anything back. */
	t_sleep_ms(20);
	ck_assert_int_eq(f.runs, 1);
	ck_assert_int_eq(c.runs + p.runs, 0);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

static void t_cb_reset_self(void *arg, kairos_id id, int status)
{
	struct t_self *s = arg;

	t_cb(arg, id, status);
	if (status <= 0 || t_int(&s->t.runs) != 1)
		return;
	s->rc_reset = kairos_reset(s->k, id, T_MS);
	atomic_store(&s->done, 1);
}

START_TEST(test_reset_in_own_callback)
{
	struct kairos *k = t_create(NULL);
	struct t_self o = { .k = k }, p = { .k = k };
	int runs;

	ck_assert_int_eq(t_arm_fn(k, &tt, &o.t, T_MS, t_cb_reset_self, true), 0);
	ck_assert_int_eq(t_arm_every_fn(k, &tt, &p.t, 5 * T_MS, t_cb_reset_self, true), 0);
	ck_assert_int_eq(t_wait_int(&o.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t_wait_int(&p.done, 1, T_WAIT_MS), 1);
	/* A one-shot that is firing is not pending any more... */
	ck_assert_int_eq(o.rc_reset, -ENOENT);
	/* ... a periodic one is, but not while it runs. */
	ck_assert_int_eq(p.rc_reset, -EBUSY);
	/* The refused reset left the periodic timer on its schedule. */
	ck_assert_int_ge(t_wait_int(&p.t.runs, 3, T_WAIT_MS), 3);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p.t) == 0 || p.t.stopped, 1);
	runs = t_int(&p.t.runs);
	t_sleep_ms(20);
	ck_assert_int_eq(t_int(&p.t.runs), runs);
	ck_assert_int_eq(o.t.runs, 1);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_reset_periodic)
{
	struct kairos *k = t_create(NULL);
	uint64_t before, t0;
	struct t_timer p;

	/* A period of a second: a stalled machine still resets it before its old deadline. */
	ck_assert_int_eq(t_arm_every_fn(k, &tt, &p, T_SEC, t_cb, false), 0);
	t0 = p.deadline - T_SEC;
	before = t_now(k);
	ck_assert_int_eq(kairos_reset(k, p.id, 5 * T_MS), 0);
	ck_assert_int_ge(t_wait_int(&p.runs, 2, T_WAIT_MS), 2);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	/* The new deadline is the next run... */
	ck_assert(t_u64(&p.at[0]) >= before + 5 * T_MS);
	ck_assert_msg(t_u64(&p.at[0]) < t0 + T_SEC,
		      "the first run waited for the old deadline");
	/* ... and the period continues from there. */
	ck_assert(t_u64(&p.at[1]) >= before + T_SEC + 5 * T_MS);
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_reset_storm)
{
	enum { N = 100000, ROUNDS = 6 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(6), rss1 = 0, rss2;
	struct kairos_stats s;

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N; i++) {
		uint64_t d = 20 * T_SEC + t_rand_below(&seed, 10 * T_SEC);

		ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
	}
	/* Earlier and later, 5 s to 35 s out: every one is still pending. */
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < N; i++) {
			uint64_t d = 5 * T_SEC + t_rand_below(&seed, 30 * T_SEC);
			int rc = kairos_reset(k, tm[i].id, d);

			if (rc != 0)
				ck_assert_msg(0, "reset %d of timer %d: %d", r, i, rc);
		}
		if (r == 1)
			rss1 = t_rss();
	}
	rss2 = t_rss();
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.pending, N);
	/* Moving deadlines allocates nothing that stays. */
	if (!T_SANITIZED)
		ck_assert_msg(rss2 < rss1 + 16 * 1024 * 1024,
			      "RSS grew by %" PRIu64 " KiB over %d rounds of resets",
			      (rss2 - rss1) / 1024, ROUNDS - 2);
	for (int i = 0; i < N; i++) {
		int rc = t_cancel(k, &tt, &tm[i]);

		if (rc != 0)
			ck_assert_msg(0, "cancel of timer %d: %d", i, rc);
	}
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.pending, 0);
	ck_assert_uint_eq(s.cancelled, N);
	t_check_calls(&tt, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

/*
 * kairos_reset_n() moves every listed timer to one new deadline: none fires
 * before it, each fires once, and the results say which ids were live.
 */
START_TEST(test_reset_n_moves_all)
{
	enum { N = 1000, DEAD = 10 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N + DEAD, sizeof(*tm));
	kairos_id ids[N + DEAD + 1];
	int results[N + DEAD + 1];
	uint64_t before;

	ck_assert_ptr_nonnull(tm);
	/* DEAD timers that end before the batch: their ids are stale by then. */
	for (int i = N; i < N + DEAD; i++) {
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 0), 0);
		ids[i] = tm[i].id;
	}
	t_wait_fired(DEAD);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 400 * T_MS), 0);
		ids[i] = tm[i].id;
	}
	ids[N + DEAD] = 0;
	before = t_now(k);
	for (int i = 0; i < N; i++)
		tm[i].base = before + 800 * T_MS;	/* the new deadline: never before it */
	for (int i = 0; i <= N + DEAD; i++)
		results[i] = 12345;
	ck_assert_int_eq(kairos_reset_n(k, ids, N + DEAD + 1, 800 * T_MS, results), N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(results[i], 0);
	for (int i = N; i < N + DEAD; i++)
		ck_assert_int_eq(results[i], -ENOENT);
	ck_assert_int_eq(results[N + DEAD], -EINVAL);
	t_sleep_ms(600);
	ck_assert_uint_eq(t_u64(&tt.fired), DEAD);	/* the 400 ms deadline is gone */
	t_wait_fired(N + DEAD);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&tm[i].runs), 1);
		ck_assert_uint_ge(t_u64(&tm[i].first_ns), before + 800 * T_MS);
	}
	/* Earlier too, and without a results array. */
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 60 * T_SEC), 0);
		ids[i] = tm[i].id;
	}
	before = t_now(k);
	for (int i = 0; i < N; i++)
		tm[i].base = before + 5 * T_MS;
	ck_assert_int_eq(kairos_reset_n(k, ids, N, 5 * T_MS, NULL), N);
	t_wait_fired(2 * N + DEAD);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

/* Call-level errors move nothing and leave the results alone. */
START_TEST(test_reset_n_errors)
{
	struct kairos *k = t_create(NULL);
	struct t_timer t;
	kairos_id id;
	int result = 12345;

	ck_assert_int_eq(t_arm(k, &tt, &t, 60 * T_SEC), 0);
	id = t.id;
	ck_assert_int_eq(kairos_reset_n(NULL, &id, 1, T_MS, &result), -EINVAL);
	ck_assert_int_eq(kairos_reset_n(k, NULL, 1, T_MS, &result), -EINVAL);
	ck_assert_int_eq(kairos_reset_n(k, &id, (unsigned)INT_MAX + 1, T_MS, &result), -EINVAL);
	ck_assert_int_eq(kairos_reset_n(k, &id, 1, UINT64_MAX, &result), -EOVERFLOW);
	ck_assert_int_eq(result, 12345);
	ck_assert_int_eq(kairos_reset_n(k, NULL, 0, T_MS, NULL), 0);
	ck_assert_int_eq(kairos_reset_n(k, &id, 0, T_MS, &result), 0);
	ck_assert_int_eq(result, 12345);
	/* The timer was never moved: it is still 60 s out, and cancels. */
	ck_assert_int_eq(t_cancel(k, &tt, &t), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_reset_n(k, &id, 1, UINT64_MAX, &result), -ESHUTDOWN);
	ck_assert_int_eq(kairos_reset_n(k, NULL, 1, T_MS, &result), -ESHUTDOWN);
	ck_assert_int_eq(result, 12345);
}
END_TEST

static atomic_uint_least64_t race_started;

static void cb_quiet(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
}

static void cb_started(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	if (status > 0)
		atomic_store(&race_started, t_mono());
}

struct race_reset {
	struct kairos *k;
	kairos_id id;
	uint64_t to;	/* the delay it resets to; 0: 2 s */
	int rc;
};

static void *race_reset_main(void *arg)
{
	struct race_reset *r = arg;

	r->rc = kairos_reset(r->k, r->id, r->to ? r->to : 2 * T_SEC);
	return NULL;
}

/*
 * A reset that moves a timer earlier while another reset's post of it is
 * on its way (the record QUEUED: the second reset leaves the post to the
 * first) has the shard woken for the earlier deadline, even when it found
 * the shard mid-pass.  W at 1.5 s, X at 3 s; an arm at 3.5 s wakes the
 * shard into a pass that is held at its start (sleep_tick 0); one thread
 * resets X to 2 s and is held with X QUEUED before its post; this one
 * resets X to 2 ms, which finds X QUEUED and the shard mid-pass, so it
 * wakes nobody; the pass takes the arm's post and the shard sleeps a
 * SHARD_FLUSH_NS (10 ms); then the 2 s post lands.  That post must wake
 * the shard for X's 2 ms (without, X waited for the flush, up to 8 ms
 * late): as it returns, the shard has a wake pending or has woken.  (A
 * thread held up past the flush sees the flush's wake: a pass, not a
 * false failure; the wake-ups are counted while the shard sleeps.)
 */
START_TEST(test_reset_earlier_while_post_on_its_way)
{
	struct kairos_config c = t_cfg(1, 1);
	struct race_reset rr = { 0 };
	uint64_t before, started, wakeups = 0;
	struct kairos_stats st;
	bool asleep = false, pending;
	struct shard *s;
	struct kairos *k;
	kairos_id w, v;
	pthread_t th;

	k = t_create(&c);
	s = k->shards[0];
	rr.k = k;
	ck_assert_int_eq(kairos_arm(k, 1500 * T_MS, cb_quiet, NULL, &w), 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_started, NULL, &rr.id), 0);
	/* The arms' passes are over: the shard sleeps until W's visit. */
	t_sleep_ms(100);
	atomic_store(&fault_pass_held, 0);
	atomic_store(&fault_pass_hold, 1);
	ck_assert_int_eq(kairos_arm(k, 3500 * T_MS, cb_quiet, NULL, &v), 0);
	ck_assert_int_eq(t_wait_int(&fault_pass_held, 1, 1000), 1);
	atomic_store(&fault_reset_held, 0);
	atomic_store(&fault_reset_hold, 1);
	ck_assert_int_eq(pthread_create(&th, NULL, race_reset_main, &rr), 0);
	ck_assert_int_eq(t_wait_int(&fault_reset_held, 1, 1000), 1);
	before = t_mono();
	ck_assert_int_eq(kairos_reset(k, rr.id, 2 * T_MS), 0);
	atomic_store(&fault_pass_hold, 0);
	/*
	 * The shard asleep, and still asleep once its wake-ups are counted: a
	 * wake-up after that count (the flush's, on a slow machine) is counted
	 * after it, and the post cannot find the shard mid-pass unwoken.
	 */
	for (int i = 0; i < 1000 && !asleep; i++) {
		if (atomic_load(&s->sleep_tick)) {
			ck_assert_int_eq(kairos_stats(k, &st), 0);
			wakeups = st.wakeups;
			asleep = atomic_load(&s->sleep_tick) != 0;
		}
		if (!asleep)
			t_sleep_ms(1);
	}
	ck_assert_msg(asleep, "the shard never slept");
	atomic_store(&fault_reset_hold, 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	/*
	 * The flag first, then the count: a shard that wakes in between has
	 * cleared the flag, and counted the wake-up before it did.
	 */
	pending = (atomic_load(&s->wake_pending) & WAKE_STATE) != WAKE_NONE;
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_msg(pending || st.wakeups > wakeups,
		      "the post of a timer reset earlier meanwhile woke nobody");
	ck_assert_int_eq(rr.rc, 0);
	for (int i = 0; i < 4000 && !atomic_load(&race_started); i++)
		t_sleep_ms(1);
	started = atomic_load(&race_started);
	ck_assert_msg(started, "X never ran");
	ck_assert_uint_ge(started, before + 2 * T_MS);
	ck_assert_msg(started - before < 700 * T_MS, "X started %.1f ms after its reset to 2 ms",
		      (double)(started - before) / 1e6);
	ck_assert_int_eq(kairos_cancel(k, w), 0);
	ck_assert_int_eq(kairos_cancel(k, v), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Starts @r's reset to @to in a thread, and waits until it is held at @hold. */
static pthread_t held_reset(struct race_reset *r, uint64_t to, _Atomic int *hold,
			    _Atomic int *held)
{
	pthread_t th;

	atomic_store(held, 0);
	atomic_store(hold, 1);
	r->to = to;
	ck_assert_int_eq(pthread_create(&th, NULL, race_reset_main, r), 0);
	ck_assert_int_eq(t_wait_int(held, 1, 1000), 1);
	return th;
}

/*
 * Resets @x (its callback cb_started) to 5 ms while a reset is held at
 * @hold in thread @th, then lets that one go; @x must have run within
 * @bound, never early.  The hold ends by itself 2 s after it began
 * (fault_hold()).
 */
static void x_runs_while_held(struct kairos *k, kairos_id x, _Atomic int *hold, pthread_t th,
			      struct race_reset *r, uint64_t bound)
{
	uint64_t before = t_mono(), started;

	ck_assert_int_eq(kairos_reset(k, x, 5 * T_MS), 0);
	for (int i = 0; i < 1000 && !atomic_load(&race_started); i++)
		t_sleep_ms(1);
	started = atomic_load(&race_started);
	atomic_store(hold, 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(r->rc, 0);
	ck_assert_msg(started, "X had not run 1 s after its reset to 5 ms, a wake-up held");
	ck_assert_uint_ge(started, before + 5 * T_MS);
	ck_assert_msg(started - before < bound, "X started %.1f ms after its reset to 5 ms",
		      (double)(started - before) / 1e6);
}

/*
 * A poster that won a sleeping shard's wake-up and stalls before its
 * eventfd write (held there: fault_wake_hold) does not hold back another
 * poster's earlier deadline: W and X sleep at 3 s; one thread resets W to
 * 1 s and is held in its wake-up; this one then resets X to 5 ms, which
 * must run without waiting for the held thread (before: it ran when the
 * hold ended, a second or more later).
 */
START_TEST(test_reset_earlier_while_a_wake_is_held)
{
	struct kairos_config c = t_cfg(1, 1);
	struct race_reset rr = { 0 };
	struct kairos *k;
	kairos_id x;
	pthread_t th;

	k = t_create(&c);
	rr.k = k;
	atomic_store(&race_started, 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_quiet, NULL, &rr.id), 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_started, NULL, &x), 0);
	/* The arms' passes are over: the shard sleeps until 3 s. */
	t_sleep_ms(100);
	th = held_reset(&rr, T_SEC, &fault_wake_hold, &fault_wake_held);
	x_runs_while_held(k, x, &fault_wake_hold, th, &rr, 500 * T_MS);
	ck_assert_int_eq(kairos_cancel(k, rr.id), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A poster that won the flag and wrote, but stalled before marking its
 * write made, cannot mark a later winner's write as made: A resets W
 * earlier, writes, and is held (fault_kicked_hold); the shard wakes, clears
 * the flag and sleeps again; B resets V earlier, wins the flag and is held
 * before its write (fault_wake_hold); A goes on.  Then X reset to 5 ms must
 * run without waiting for B (before the flag's epoch: A's mark found B's
 * "on its way" and made it "written", and X waited for B's hold to end or
 * V's 900 ms).
 */
START_TEST(test_reset_earlier_after_a_stale_mark)
{
	struct kairos_config c = t_cfg(1, 1);
	struct race_reset ra = { 0 }, rb = { 0 };
	struct kairos *k;
	struct shard *s;
	pthread_t ta, tb;
	kairos_id x;
	bool settled = false;

	k = t_create(&c);
	s = k->shards[0];
	ra.k = rb.k = k;
	atomic_store(&race_started, 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_quiet, NULL, &ra.id), 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_quiet, NULL, &rb.id), 0);
	ck_assert_int_eq(kairos_arm(k, 3 * T_SEC, cb_started, NULL, &x), 0);
	t_sleep_ms(100);
	ta = held_reset(&ra, T_SEC, &fault_kicked_hold, &fault_kicked_held);
	/*
	 * A's write woke the shard: it cleared the flag and sleeps again, after
	 * the short sleeps that follow a post (SHARD_FLUSH_NS), until W's 1 s.
	 */
	for (int i = 0; i < 1000 && !settled; i++) {
		t_sleep_ms(1);
		if ((atomic_load(&s->wake_pending) & WAKE_STATE) != WAKE_NONE)
			continue;
		t_sleep_ms(100);
		settled = atomic_load(&s->sleep_tick) &&
			  (atomic_load(&s->wake_pending) & WAKE_STATE) == WAKE_NONE;
	}
	ck_assert_msg(settled, "the shard did not sleep again after A's write");
	tb = held_reset(&rb, 900 * T_MS, &fault_wake_hold, &fault_wake_held);
	ck_assert_uint_eq(atomic_load(&s->wake_pending) & WAKE_STATE, WAKE_KICKING);
	atomic_store(&fault_kicked_hold, 0);
	ck_assert_int_eq(pthread_join(ta, NULL), 0);
	ck_assert_int_eq(ra.rc, 0);
	x_runs_while_held(k, x, &fault_wake_hold, tb, &rb, 400 * T_MS);
	t_destroy(k, KAIROS_DRAIN_DROP, 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reset");
	TCase *tc = tcase_create("reset");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_reset_later);
	tcase_add_test(tc, test_reset_at);
	tcase_add_test(tc, test_reset_earlier);
	tcase_add_test(tc, test_reset_random);
	tcase_add_test(tc, test_reset_after_end);
	tcase_add_test(tc, test_reset_in_own_callback);
	tcase_add_test(tc, test_reset_periodic);
	tcase_add_test(tc, test_reset_storm);
	tcase_add_test(tc, test_reset_n_moves_all);
	tcase_add_test(tc, test_reset_n_errors);
	tcase_add_test(tc, test_reset_earlier_while_post_on_its_way);
	tcase_add_test(tc, test_reset_earlier_while_a_wake_is_held);
	tcase_add_test(tc, test_reset_earlier_after_a_stale_mark);
	suite_add_tcase(s, tc);
	return t_main(s, "reset");
}
