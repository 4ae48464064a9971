/* SPDX-License-Identifier: MIT */
/*
 * cancel.c - cancel, cancel_n and cancel_sync: each outcome (0, -EBUSY,
 * -ENOENT, -EINVAL, -EDEADLK), exactly-once under cancel/fire storms from
 * many threads, stale and foreign ids, and cancel_sync never sleeping inside
 * an RCU read-side section (records still recycle, other services still
 * destroy, the waited-on callback may destroy another service).
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
/* Cancel                                                              */

START_TEST(test_cancel_before_fire)
{
	enum { N = 200 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];
	uint64_t seed = t_seed(2);

	for (int i = 0; i < N; i++) {
		/* Far enough that a stalled machine still cancels each in time. */
		uint64_t d = 300 * T_MS + t_rand_below(&seed, 100 * T_MS);

		ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
	}
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), 0);
	/* Once cancelled, nothing of it is pending any more. */
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), -ENOENT);
		ck_assert_int_eq(t_cancel_sync(k, &tt, &tm[i]), -ENOENT);
		ck_assert_int_eq(kairos_reset(k, tm[i].id, T_MS), -ENOENT);
	}
	/* Wait well past the latest deadline: no callback may have run. */
	t_sleep_ms(450);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(tm[i].runs, 0);
	t_check_calls(&tt, 0);
	ck_assert_uint_eq(t_check_identity(k, &tt).cancelled, N);
	ck_assert_uint_eq(t_pending(k), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * Cancelled records leave the wheel without waiting for their slot: a shard
 * asleep with nothing due for an hour wakes once a batch of cancels (1024)
 * has piled up, instead of holding the records until then.  The timers are
 * armed at an absolute deadline, so the shard links them; far.c covers the
 * same for timers filed by value (test_far_idle_then_cancel).
 */

START_TEST(test_cancel_wakes_idle_shard)
{
	enum { N = 2000 };
	struct kairos_config c;
	struct kairos *k;
	struct kairos_stats before, after;
	static struct t_timer t[N];
	uint64_t w0;

	kairos_config_default(&c);
	c.shards = 1;
	k = t_create(&c);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm_at(k, &tt, &t[i], t_now(k) + 3600 * T_SEC), 0);
	t_sleep_ms(50);		/* the shard files them and goes to sleep */
	ck_assert_int_eq(kairos_stats(k, &before), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_cancel(k, &tt, &t[i]), 0);
	w0 = before.wakeups;
	for (int i = 0; i < 200; i++) {
		ck_assert_int_eq(kairos_stats(k, &after), 0);
		if (after.wakeups > w0)
			break;
		t_sleep_ms(10);
	}
	ck_assert_msg(after.wakeups > w0, "the shard never woke for the cancels");
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t[i].runs, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_after_fire)
{
	enum { N = 20 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], T_MS), 0);
	t_wait_fired(N);
	for (int i = 0; i < N; i++)
		t_wait_ended(k, tm[i].id);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), -ENOENT);
		ck_assert_int_eq(t_cancel_sync(k, &tt, &tm[i]), -ENOENT);
		ck_assert_int_eq(kairos_reset(k, tm[i].id, T_MS), -ENOENT);
		ck_assert_int_eq(tm[i].runs, 1);
	}
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_while_running)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;
	kairos_id id;
	int rc = 0;

	t_block_init(&b, 0, 0);
	id = t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	/* Running: too late to cancel, and a one-shot that fires cannot move. */
	ck_assert_int_eq(kairos_cancel(k, id), -EBUSY);
	ck_assert_int_eq(kairos_cancel(k, id), -EBUSY);
	ck_assert_int_eq(kairos_reset(k, id, T_MS), -ENOENT);
	atomic_store(&b.release, 1);
	ck_assert_int_eq(t_wait_int(&b.done, 1, T_WAIT_MS), 1);
	/* Once the callback has returned the timer has ended. */
	for (int i = 0; i < 1000 && (rc = kairos_cancel(k, id)) == -EBUSY; i++)
		t_sleep_ms(1);
	ck_assert_int_eq(rc, -ENOENT);
	ck_assert_int_eq(kairos_cancel_sync(k, id), -ENOENT);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_uint_eq(t_check_identity(k, &tt).cancelled, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

struct t_sync_waiter {
	struct kairos *k;
	kairos_id id;
	struct t_block *b;
	int rc;
	int done_at_return;
};

static void *t_sync_waiter_thread(void *arg)
{
	struct t_sync_waiter *w = arg;

	w->rc = kairos_cancel_sync(w->k, w->id);
	w->done_at_return = t_int(&w->b->done);
	return NULL;
}

START_TEST(test_cancel_sync_waits)
{
	struct kairos *k = t_create(NULL);
	struct t_sync_waiter w;
	struct t_block b;
	pthread_t th;
	kairos_id id;
	int rc;

	/* Held long enough that a stalled machine still waits on it running. */
	t_block_init(&b, 0, 500 * T_MS);
	id = t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	/* Two threads wait at once; both must return only after the callback. */
	w = (struct t_sync_waiter){ .k = k, .id = id, .b = &b };
	ck_assert_int_eq(pthread_create(&th, NULL, t_sync_waiter_thread, &w), 0);
	rc = kairos_cancel_sync(k, id);
	ck_assert_int_eq(t_int(&b.done), 1);
	ck_assert_int_eq(rc, -EBUSY);
	pthread_join(th, NULL);
	/* The second may come late enough to find it ended. */
	ck_assert_msg(w.rc == -EBUSY || w.rc == -ENOENT, "second cancel_sync: %d", w.rc);
	ck_assert_int_eq(w.done_at_return, 1);
	ck_assert_int_eq(b.calls, 1);
	ck_assert_int_eq(kairos_cancel(k, id), -ENOENT);
	ck_assert_uint_eq(t_check_identity(k, &tt).cancelled, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_sync_waits_periodic)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;
	kairos_id id;
	int calls;

	t_block_init(&b, 1, 500 * T_MS);
	id = t_block_arm(k, &b, 5 * T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(kairos_cancel_sync(k, id), -EBUSY);
	ck_assert_int_eq(t_int(&b.done), 1);
	/* A periodic timer stopped while running is a cancelled timer. */
	atomic_fetch_add(&tt.cancelled, 1);
	calls = t_int(&b.calls);
	ck_assert_int_eq(calls, 1);
	/* It missed ~100 periods while blocked; none of them may run now. */
	t_sleep_ms(40);
	ck_assert_int_eq(t_int(&b.calls), calls);
	ck_assert_int_eq(kairos_cancel(k, id), -ENOENT);
	ck_assert_int_eq(kairos_reset(k, id, T_MS), -ENOENT);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_periodic_while_running)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;
	kairos_id id;

	t_block_init(&b, 1, 0);
	id = t_block_arm(k, &b, 5 * T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(kairos_cancel(k, id), -EBUSY);
	ck_assert_int_eq(kairos_reset(k, id, T_MS), -EBUSY);
	atomic_fetch_add(&tt.cancelled, 1);
	atomic_store(&b.release, 1);
	ck_assert_int_eq(t_wait_int(&b.done, 1, T_WAIT_MS), 1);
	/* "A periodic timer will not run again after that call returns." */
	t_sleep_ms(40);
	ck_assert_int_eq(t_int(&b.calls), 1);
	ck_assert_int_eq(kairos_cancel(k, id), -ENOENT);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

static void t_cb_self_cancel(void *arg, kairos_id id, int status)
{
	struct t_self *s = arg;

	t_cb(arg, id, status);
	if (status <= 0 || t_int(&s->t.runs) != 1)
		return;
	s->rc_cancel = kairos_cancel(s->k, id);
	atomic_store(&s->done, 1);
}

START_TEST(test_cancel_sync_own_oneshot)
{
	struct kairos *k = t_create(NULL);
	struct t_self s = { .k = k };

	ck_assert_int_eq(t_arm_fn(k, &tt, &s.t, T_MS, t_cb_self_sync, true), 0);
	/* It must come back, not wait for itself. */
	ck_assert_int_eq(t_wait_int(&s.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(s.rc_reset, -ENOENT);
	ck_assert_int_eq(s.rc_sync, -EDEADLK);
	ck_assert_int_eq(s.rc_cancel, -EBUSY);
	ck_assert_int_eq(s.rc_destroy_drop, -EDEADLK);
	ck_assert_int_eq(s.rc_destroy_notify, -EDEADLK);
	t_wait_ended(k, s.t.id);
	ck_assert_int_eq(s.t.runs, 1);
	ck_assert_int_eq(kairos_cancel(k, s.t.id), -ENOENT);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_sync_own_periodic)
{
	struct kairos *k = t_create(NULL);
	struct t_self s = { .k = k }, c = { .k = k };

	/* One stops itself with cancel_sync, the other with cancel. */
	ck_assert_int_eq(t_arm_every_fn(k, &tt, &s.t, 5 * T_MS, t_cb_self_sync, true), 0);
	ck_assert_int_eq(t_arm_every_fn(k, &tt, &c.t, 5 * T_MS, t_cb_self_cancel, true), 0);
	ck_assert_int_eq(t_wait_int(&s.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t_wait_int(&c.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(s.rc_reset, -EBUSY);
	ck_assert_int_eq(s.rc_sync, -EDEADLK);
	/* Stopped by the call before: it no longer has a later run to stop. */
	ck_assert_msg(s.rc_cancel == -EBUSY || s.rc_cancel == -ENOENT,
		      "cancel after own cancel_sync: %d", s.rc_cancel);
	ck_assert_int_eq(s.rc_destroy_drop, -EDEADLK);
	ck_assert_int_eq(s.rc_destroy_notify, -EDEADLK);
	ck_assert_int_eq(c.rc_cancel, -EBUSY);
	tt.cancelled += 2;
	/* Ten periods later neither has run again. */
	t_sleep_ms(50);
	ck_assert_int_eq(s.t.runs, 1);
	ck_assert_int_eq(c.t.runs, 1);
	ck_assert_int_eq(kairos_cancel(k, s.t.id), -ENOENT);
	ck_assert_int_eq(kairos_cancel_sync(k, c.t.id), -ENOENT);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_cancel_destroy_from_callback)
{
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k = t_create(&c);
	struct t_self s = { .k = k };
	struct t_timer pending, after;

	ck_assert_int_eq(t_arm(k, &tt, &pending, 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm_fn(k, &tt, &s.t, T_MS, t_cb_self_sync, true), 0);
	ck_assert_int_eq(t_wait_int(&s.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(s.rc_destroy_drop, -EDEADLK);
	ck_assert_int_eq(s.rc_destroy_notify, -EDEADLK);
	/* The refused destroy changed nothing: the service still runs timers. */
	ck_assert_int_eq(t_arm(k, &tt, &after, T_MS), 0);
	t_wait_fired(2);
	ck_assert_int_eq(t_int(&pending.runs), 0);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 1);
	t_destroy(k, KAIROS_DRAIN_NOTIFY, 1);
	ck_assert_int_eq(t_int(&pending.notified), 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Cancel against fire, from many threads                              */

#define STORM_TIMERS	20000
#define STORM_THREADS	8
#define STORM_PER	(STORM_TIMERS / STORM_THREADS)

struct t_storm {
	struct kairos *k;
	struct t_timer *tm;
	atomic_uint_least64_t *ids;	/* published once armed; 0 before */
	atomic_int *is_long;
};

struct t_storm_arg {
	struct t_storm *s;
	int idx;
};

static void t_storm_cancel_one(struct t_storm *s, uint64_t *seed, int sync)
{
	int j = (int)t_rand_below(seed, STORM_TIMERS);
	kairos_id id = atomic_load_explicit(&s->ids[j], memory_order_acquire);
	int rc;

	if (!id)
		return;
	rc = sync ? kairos_cancel_sync(s->k, id) : kairos_cancel(s->k, id);
	if (rc != 0 && rc != -ENOENT && rc != -EBUSY)
		atomic_fetch_add(&tt.bad, 1);
	t_book_cancel(&tt, &s->tm[j], rc);
}

static void *t_storm_thread(void *arg)
{
	struct t_storm_arg *a = arg;
	struct t_storm *s = a->s;
	uint64_t seed = t_seed(100 + (uint64_t)a->idx);
	int sync = a->idx & 1;

	for (int i = a->idx * STORM_PER; i < (a->idx + 1) * STORM_PER; i++) {
		/* One in ten is far out, to be drained by destroy. */
		int far = t_rand_below(&seed, 10) == 0;
		uint64_t delay = far ? 10 * T_SEC : t_rand_below(&seed, 3 * T_MS + 1);

		atomic_store(&s->is_long[i], far);
		if (t_arm(s->k, &tt, &s->tm[i], delay) != 0)
			atomic_fetch_add(&tt.bad, 1);
		atomic_store_explicit(&s->ids[i], s->tm[i].id, memory_order_release);
		if (t_rand(&seed) & 1)
			t_storm_cancel_one(s, &seed, sync);
		if (t_rand_below(&seed, 64) == 0)
			t_sleep_ns(t_rand_below(&seed, 300 * T_US));
	}
	for (int i = 0; i < 2000; i++) {
		t_storm_cancel_one(s, &seed, sync);
		if (t_rand_below(&seed, 32) == 0)
			t_sleep_ns(t_rand_below(&seed, 300 * T_US));
	}
	return NULL;
}

START_TEST(test_cancel_fire_storm)
{
	struct kairos *k = t_create(NULL);
	struct t_storm s = {
		.k = k,
		.tm = calloc(STORM_TIMERS, sizeof(struct t_timer)),
		.ids = calloc(STORM_TIMERS, sizeof(atomic_uint_least64_t)),
		.is_long = calloc(STORM_TIMERS, sizeof(atomic_int)),
	};
	struct t_storm_arg args[STORM_THREADS];
	pthread_t th[STORM_THREADS];
	uint64_t end, pending = 0;
	int ran = 0, cancelled = 0, drained;
	struct kairos_stats st;

	ck_assert_ptr_nonnull(s.tm);
	ck_assert_ptr_nonnull(s.ids);
	ck_assert_ptr_nonnull(s.is_long);
	for (int i = 0; i < STORM_THREADS; i++) {
		args[i] = (struct t_storm_arg){ .s = &s, .idx = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_storm_thread, &args[i]), 0);
	}
	for (int i = 0; i < STORM_THREADS; i++)
		pthread_join(th[i], NULL);

	/* Wait for every short timer to have ended one way or the other. */
	end = t_mono() + 10 * T_SEC;
	for (int i = 0; i < STORM_TIMERS; i++) {
		struct t_timer *t = &s.tm[i];

		if (t_int(&s.is_long[i]))
			continue;
		while (t_int(&t->runs) + t_int(&t->cancel_ok) == 0 && t_mono() < end)
			t_sleep_ms(1);
	}
	for (int i = 0; i < STORM_TIMERS; i++) {
		struct t_timer *t = &s.tm[i];
		int r = t_int(&t->runs), c = t_int(&t->cancel_ok);

		ck_assert_msg(r + c <= 1, "timer %d: ran %d times and cancelled %d times", i, r, c);
		if (!t_int(&s.is_long[i]))
			ck_assert_msg(r + c == 1, "timer %d neither ran nor was cancelled", i);
		else
			ck_assert_msg(r == 0, "a 10 s timer ran");
		if (r == 0 && c == 0)
			pending++;
		ran += r;
		cancelled += c;
		if (r)
			ck_assert(t_u64(&t->cb_id) == t->id);
	}
	t_check_calls(&tt, T_LATE);
	st = t_check_identity(k, &tt);
	ck_assert_uint_eq(st.pending, pending);
	ck_assert_uint_eq(st.fired, (uint64_t)ran);
	ck_assert_uint_eq(st.cancelled, (uint64_t)cancelled);

	/* Destroy accounts for the rest, each exactly once, with -ECANCELED. */
	drained = kairos_destroy(k, KAIROS_DRAIN_NOTIFY);
	ck_assert_int_eq(drained, (int)pending);
	ck_assert_uint_eq(t_u64(&tt.notified), pending);
	for (int i = 0; i < STORM_TIMERS; i++) {
		struct t_timer *t = &s.tm[i];
		int r = t_int(&t->runs), c = t_int(&t->cancel_ok), d = t_int(&t->notified);

		ck_assert_msg(r + c + d == 1, "timer %d: ran %d, cancelled %d, drained %d", i, r, c,
			      d);
	}
	free(s.tm);
	free((void *)s.ids);
	free((void *)s.is_long);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Stale and foreign ids                                               */

static int t_cmp_id(const void *a, const void *b)
{
	kairos_id x = *(const kairos_id *)a, y = *(const kairos_id *)b;

	return x < y ? -1 : x > y;
}

START_TEST(test_cancel_stale_ids)
{
	enum { ROUNDS = 10, PER = 1000, FIRED = 50 };
	struct kairos_config c = t_cfg(1, 2);
	struct kairos *k = t_create(&c);
	kairos_id *old = calloc(ROUNDS * (PER + FIRED + 1), sizeof(*old));
	struct t_timer *fired = calloc(FIRED, sizeof(*fired));
	struct t_timer tmp, live;
	int n = 0;

	ck_assert_ptr_nonnull(old);
	ck_assert_ptr_nonnull(fired);
	for (int r = 0; r < ROUNDS; r++) {
		/* Ids that ended by cancel... */
		for (int i = 0; i < PER; i++) {
			ck_assert_int_eq(t_arm(k, &tt, &tmp, 10 * T_SEC), 0);
			ck_assert(tmp.id != 0);
			ck_assert_int_eq(t_cancel(k, &tt, &tmp), 0);
			old[n++] = tmp.id;
		}
		/* ... and by firing. */
		for (int i = 0; i < FIRED; i++)
			ck_assert_int_eq(t_arm(k, &tt, &fired[i], 0), 0);
		t_wait_fired((uint64_t)(r + 1) * FIRED);
		for (int i = 0; i < FIRED; i++) {
			t_wait_ended(k, fired[i].id);
			old[n++] = fired[i].id;
		}
		/* Give a grace period time to pass, so that records get reused. */
		t_sleep_ms(3);

		ck_assert_int_eq(t_arm(k, &tt, &live, 10 * T_SEC), 0);
		for (int j = 0; j < n; j++) {
			ck_assert_msg(old[j] != live.id, "a stale id was handed out again");
			ck_assert_int_eq(kairos_cancel(k, old[j]), -ENOENT);
			ck_assert_int_eq(kairos_reset(k, old[j], T_MS), -ENOENT);
			ck_assert_int_eq(kairos_cancel_sync(k, old[j]), -ENOENT);
		}
		/* The stale ids did not touch the live timer. */
		ck_assert_int_eq(live.runs, 0);
		ck_assert_uint_eq(t_pending(k), 1);
		ck_assert_int_eq(t_cancel(k, &tt, &live), 0);
		old[n++] = live.id;
	}
	/* No id was ever handed out twice. */
	qsort(old, (size_t)n, sizeof(*old), t_cmp_id);
	for (int j = 1; j < n; j++)
		ck_assert_msg(old[j] != old[j - 1], "id %" PRIx64 " handed out twice", old[j]);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(old);
	free(fired);
}
END_TEST

/* A thread that arms timers for test_cancel_n_mixed, on its own shard if it can. */
struct t_armer {
	struct kairos *k;
	struct t_timer *tm;
	int n;
	uint64_t delay_ns;
};

static void *t_armer_thread(void *arg)
{
	struct t_armer *a = arg;

	for (int i = 0; i < a->n; i++)
		ck_assert_int_eq(t_arm(a->k, &tt, &a->tm[i], a->delay_ns), 0);
	return NULL;
}

/*
 * kairos_cancel_n() over one shuffled batch of every kind of id: near and
 * far timers of this thread's shard, far timers another thread armed, ids
 * of timers that fired, an id listed twice, a timer whose callback is
 * running, and an id of 0.  Each result is kairos_cancel()'s for that id,
 * the return counts the 0s, and no timer it cancelled ever runs.
 */
START_TEST(test_cancel_n_mixed)
{
	enum { NEAR = 600, FAR = 600, OTHER = 600, DEAD = 20, LIVE = NEAR + FAR + OTHER };
	enum { N = LIVE + DEAD + 3 };	/* + a repeat, the running timer, an id of 0 */
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(LIVE + DEAD, sizeof(*tm));
	struct t_timer **who = calloc(N, sizeof(*who));
	kairos_id *ids = calloc(N, sizeof(*ids));
	int *results = calloc(N, sizeof(*results));
	struct t_armer other = { .k = k, .tm = tm + NEAR + FAR, .n = OTHER, .delay_ns = 60 * T_SEC };
	uint64_t seed = t_seed(3);
	struct t_block b;
	pthread_t th;
	kairos_id running;
	int want = 0;

	ck_assert(tm && who && ids && results);
	/* DEAD timers that end before the batch: their ids are stale by then. */
	for (int i = LIVE; i < LIVE + DEAD; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 0), 0);
	t_wait_fired(DEAD);
	for (int i = LIVE; i < LIVE + DEAD; i++)
		t_wait_ended(k, tm[i].id);
	t_block_init(&b, 0, 0);
	running = t_block_arm(k, &b, 0);
	t_block_wait_started(&b);
	for (int i = 0; i < NEAR; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 300 * T_MS + t_rand_below(&seed, 100 * T_MS)), 0);
	for (int i = NEAR; i < NEAR + FAR; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 60 * T_SEC), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, t_armer_thread, &other), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);

	for (int i = 0; i < LIVE + DEAD; i++)
		who[i] = &tm[i];
	who[LIVE + DEAD] = &tm[NEAR + 1];	/* listed twice */
	for (int i = N - 1; i > 0; i--) {
		int j = (int)t_rand_below(&seed, (uint64_t)i + 1);
		struct t_timer *x = who[i];

		who[i] = who[j];
		who[j] = x;
	}
	/* The two empty places: the running timer, then an id of 0. */
	for (int i = 0, empty = 0; i < N; i++) {
		ids[i] = who[i] ? who[i]->id : empty++ ? 0 : running;
		results[i] = 12345;
	}

	ck_assert_int_eq(kairos_cancel_n(k, ids, N, results), LIVE);
	for (int i = 0; i < N; i++) {
		if (!who[i]) {
			ck_assert_int_eq(results[i], ids[i] == running ? -EBUSY : -EINVAL);
			continue;
		}
		/* The first listing of a live timer cancels it; a repeat or a fired one is gone. */
		if (who[i] - tm < LIVE && !atomic_load(&who[i]->cancel_ok)) {
			ck_assert_int_eq(results[i], 0);
			want++;
		} else {
			ck_assert_int_eq(results[i], -ENOENT);
		}
		t_book_cancel(&tt, who[i], results[i]);
	}
	ck_assert_int_eq(want, LIVE);
	/* Every one really ended: a second batch finds none of them. */
	ck_assert_int_eq(kairos_cancel_n(k, ids, N, NULL), 0);
	ck_assert_int_eq(kairos_cancel(k, tm[NEAR + FAR].id), -ENOENT);
	atomic_store(&b.release, 1);
	ck_assert_int_eq(t_wait_int(&b.done, 1, T_WAIT_MS), 1);
	/* Past the near deadlines: no cancelled callback ran. */
	t_sleep_ms(500);
	for (int i = 0; i < LIVE; i++)
		ck_assert_int_eq(t_int(&tm[i].runs), 0);
	ck_assert_int_eq(t_int(&b.calls), 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).cancelled, LIVE);
	ck_assert_uint_eq(t_pending(k), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
	free(who);
	free(ids);
	free(results);
}
END_TEST

/* Call-level errors cancel nothing and leave the results alone. */
START_TEST(test_cancel_n_errors)
{
	struct kairos *k = t_create(NULL);
	struct t_timer t;
	kairos_id id;
	int result = 12345;

	ck_assert_int_eq(t_arm(k, &tt, &t, 60 * T_SEC), 0);
	id = t.id;
	ck_assert_int_eq(kairos_cancel_n(NULL, &id, 1, &result), -EINVAL);
	ck_assert_int_eq(kairos_cancel_n(k, NULL, 1, &result), -EINVAL);
	ck_assert_int_eq(kairos_cancel_n(k, &id, (unsigned)INT_MAX + 1, &result), -EINVAL);
	ck_assert_int_eq(result, 12345);
	ck_assert_int_eq(kairos_cancel_n(k, NULL, 0, NULL), 0);
	ck_assert_int_eq(kairos_cancel_n(k, &id, 0, &result), 0);
	ck_assert_int_eq(result, 12345);
	/* The timer is still pending: this cancel is the one that ends it. */
	ck_assert_uint_eq(t_pending(k), 1);
	ck_assert_int_eq(kairos_cancel_n(k, &id, 1, &result), 1);
	t_book_cancel(&tt, &t, result);
	ck_assert_int_eq(result, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	result = 12345;
	ck_assert_int_eq(kairos_cancel_n(k, &id, 1, &result), -ESHUTDOWN);
	ck_assert_int_eq(kairos_cancel_n(k, NULL, 1, &result), -ESHUTDOWN);
	ck_assert_int_eq(result, 12345);
}
END_TEST

/*
 * kairos_prefetch() changes nothing: prefetched timers stay pending, the
 * counters do not move, a prefetched timer still fires once and never
 * early, and the cancels after it end their timers as without it.  Its
 * errors: ids that cannot name a record, a NULL service, id 0, a destroyed
 * service.
 */
START_TEST(test_prefetch)
{
	enum { N = 64 };
	struct kairos_config c = t_cfg(2, 1);
	struct kairos *k = t_create(&c);
	struct t_timer far[N], near;
	struct kairos_stats before, after;
	kairos_id bad_shard, bad_slot;

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &far[i], (10 + (uint64_t)i) * T_SEC), 0);
	ck_assert_int_eq(t_arm(k, &tt, &near, 30 * T_MS), 0);
	ck_assert_int_eq(kairos_stats(k, &before), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_prefetch(k, far[i].id), 0);
	ck_assert_int_eq(kairos_prefetch(k, near.id), 0);
	ck_assert_int_eq(kairos_stats(k, &after), 0);
	/* The near timer may fire meanwhile on a slow machine: count it either way. */
	ck_assert_uint_eq(after.armed, before.armed);
	ck_assert_uint_eq(after.cancelled, 0);
	ck_assert_uint_eq(after.pending + after.fired, N + 1);
	ck_assert_uint_ge(after.pending, N);
	/* The near one fires once, not early, prefetched or not. */
	t_wait_fired(1);
	ck_assert_int_eq(near.runs, 1);
	/* Its id is stale now: the slot exists (0), the timer does not. */
	ck_assert_int_eq(kairos_prefetch(k, near.id), 0);
	t_wait_ended(k, near.id);
	ck_assert_int_eq(kairos_cancel(k, near.id), -ENOENT);
	/* Each prefetched far timer is cancelled by the next call, once. */
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(kairos_prefetch(k, far[i].id), 0);
		ck_assert_int_eq(t_cancel(k, &tt, &far[i]), 0);
		ck_assert_int_eq(t_cancel(k, &tt, &far[i]), -ENOENT);
	}
	t_check_calls(&tt, 0);
	ck_assert_uint_eq(t_check_identity(k, &tt).cancelled, N);
	ck_assert_uint_eq(t_pending(k), 0);
	/*
	 * Ids that cannot name a record of k: the last shard number with only
	 * two shards, and slot 0 of a block (a block's header, never a timer).
	 */
	bad_shard = (far[0].id & ~(kairos_id)0xff000000u) | (kairos_id)0xff000000u;
	bad_slot = far[0].id & ~(kairos_id)0xfffu;
	ck_assert_int_eq(kairos_prefetch(k, bad_shard), -ENOENT);
	ck_assert_int_eq(kairos_prefetch(k, bad_slot), -ENOENT);
	ck_assert_int_eq(kairos_cancel(k, bad_shard), -ENOENT);
	ck_assert_int_eq(kairos_prefetch(NULL, far[0].id), -EINVAL);
	ck_assert_int_eq(kairos_prefetch(k, 0), -EINVAL);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_prefetch(k, far[0].id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_prefetch(k, 0), -ESHUTDOWN);
}
END_TEST

START_TEST(test_cancel_foreign_ids)
{
	enum { N = 100 };
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *a = t_create(&c), *b = t_create(&c);
	struct t_timer ta[N], tb[N];
	struct t_tally tally_b;

	memset(&tally_b, 0, sizeof(tally_b));
	tally_b.clock = CLOCK_MONOTONIC;
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_arm(a, &tt, &ta[i], 10 * T_SEC), 0);
		ck_assert_int_eq(t_arm(b, &tally_b, &tb[i], 10 * T_SEC), 0);
	}
	/*
	 * "-ENOENT: ... ids of other services included": B must not know A's
	 * ids, and so no id of A may also be an id of B.
	 */
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < N; j++)
			ck_assert_msg(ta[i].id != tb[j].id,
				      "services A and B both handed out id %" PRIx64, ta[i].id);
		ck_assert_int_eq(kairos_cancel(b, ta[i].id), -ENOENT);
		ck_assert_int_eq(kairos_reset(b, ta[i].id, T_MS), -ENOENT);
		ck_assert_int_eq(kairos_cancel_sync(b, ta[i].id), -ENOENT);
		ck_assert_int_eq(kairos_cancel(a, tb[i].id), -ENOENT);
	}
	/* Nothing in either service was touched. */
	t_sleep_ms(10);
	ck_assert_uint_eq(t_pending(a), N);
	ck_assert_uint_eq(t_pending(b), N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_cancel(a, &tt, &ta[i]), 0);
		ck_assert_int_eq(t_cancel(b, &tally_b, &tb[i]), 0);
	}
	t_check_identity(a, &tt);
	t_check_identity(b, &tally_b);
	t_destroy(a, KAIROS_DRAIN_DROP, 0);
	t_destroy(b, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* cancel_sync never sleeps inside an RCU read-side section            */

/*
 * While cancel_sync waits for a 3 s callback, 1e6 arm+cancel cycles must
 * reuse their records: a waiter inside a read-side section would stall
 * every grace period of the process and the pool would only grow.
 */

START_TEST(test_cancel_sync_rss_flat)
{
	const int total = T_SANITIZED ? 100000 : 1000000;
	struct kairos *k = t_create(NULL);
	struct t_sync_waiter w;
	struct t_block b;
	struct kairos_stats st;
	pthread_t th;
	uint64_t rss0 = 0, rss1;

	int i;

	t_block_init(&b, 0, 4 * T_SEC);
	w = (struct t_sync_waiter){ .k = k, .b = &b };
	w.id = t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(pthread_create(&th, NULL, t_sync_waiter_thread, &w), 0);

	for (i = 0; i < total && !t_int(&b.done); i++) {
		kairos_id id;

		ck_assert_int_eq(kairos_arm(k, 10 * T_SEC, t_cb_never, NULL, &id), 0);
		ck_assert_int_eq(kairos_cancel(k, id), 0);
		if (i == total / 10)
			rss0 = t_rss();
	}
	rss1 = t_rss();
	pthread_join(th, NULL);
	ck_assert_int_eq(w.rc, -EBUSY);
	ck_assert_int_eq(w.done_at_return, 1);
	/*
	 * Without reclamation the 2e5+ records after the first measurement are
	 * 12+ MiB (the old code grew 100 MiB here); with it, a few chunks.
	 */
	if (!T_SANITIZED) {
		ck_assert_msg(i >= 300000, "only %d cycles in the callback's 4 s", i);
		ck_assert_msg(rss1 < rss0 + 8 * 1024 * 1024, "RSS grew by %" PRIu64 " KiB over %d"
			      " cycles while cancel_sync waited", (rss1 - rss0) / 1024, i);
	}
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.cancelled, (uint64_t)i);
	ck_assert_int_eq(t_u64(&tt.bad), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * kairos_destroy() of an idle, unrelated service waits for a grace period:
 * it must not wait for another service's cancel_sync, which waits for a
 * 5 s callback.
 */

START_TEST(test_cancel_sync_other_destroy)
{
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *k = t_create(&c), *k2;
	struct t_sync_waiter w;
	struct t_block b;
	pthread_t th;
	uint64_t t0, took;

	t_block_init(&b, 0, 5 * T_SEC);
	w = (struct t_sync_waiter){ .k = k, .b = &b };
	w.id = t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(pthread_create(&th, NULL, t_sync_waiter_thread, &w), 0);
	t_sleep_ms(50);		/* the waiter is asleep by now */
	k2 = t_create(&c);
	t0 = t_mono();
	t_destroy(k2, KAIROS_DRAIN_DROP, 0);
	took = t_mono() - t0;
	ck_assert_int_eq(t_int(&b.done), 0);
	ck_assert_msg(took < 2500 * T_MS, "destroying an idle service took %" PRIu64 " ms while"
		      " another service's cancel_sync waited", (uint64_t)(took / T_MS));
	pthread_join(th, NULL);
	ck_assert_int_eq(w.rc, -EBUSY);
	ck_assert_int_eq(w.done_at_return, 1);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* The callback cancel_sync waits on destroys another service (allowed by the contract). */
struct t_destroyer {
	struct kairos *victim;
	atomic_int started, rc, done;
};

static void t_cb_destroy_other(void *arg, kairos_id id, int status)
{
	struct t_destroyer *d = arg;

	(void)id;
	(void)status;
	atomic_store(&d->started, 1);
	t_sleep_ms(500);	/* let the main thread's cancel_sync start waiting */
	atomic_store(&d->rc, kairos_destroy(d->victim, KAIROS_DRAIN_DROP));
	atomic_store(&d->done, 1);
}

START_TEST(test_cancel_sync_callback_destroys)
{
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *k1 = t_create(&c), *k2 = t_create(&c);
	struct t_destroyer d = { .victim = k1 };
	kairos_id id;

	alarm(60);	/* a deadlock is a failure with a name, not a hung run */
	ck_assert_int_eq(kairos_arm(k2, T_MS, t_cb_destroy_other, &d, &id), 0);
	ck_assert_int_eq(t_wait_int(&d.started, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(kairos_cancel_sync(k2, id), -EBUSY);
	ck_assert_int_eq(t_int(&d.done), 1);
	ck_assert_int_eq(t_int(&d.rc), 0);
	alarm(0);
	t_destroy(k2, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* cancel_sync waiting while the service is destroyed: it returns once the callback has. */

START_TEST(test_cancel_sync_across_destroy)
{
	struct kairos *k = t_create(NULL);
	struct t_sync_waiter w;
	struct t_block b;
	pthread_t th;

	t_block_init(&b, 0, 300 * T_MS);
	w = (struct t_sync_waiter){ .k = k, .b = &b };
	w.id = t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(pthread_create(&th, NULL, t_sync_waiter_thread, &w), 0);
	t_sleep_ms(50);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(w.rc, -EBUSY);
	ck_assert_int_eq(w.done_at_return, 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* No configuration the docs allow may deadlock                        */

/*
 * Two shards, inline delivery: a callback on each shard thread posts 80,000
 * cancels to the other shard while the other is busy in its own callback.
 * With a bound that made posters wait, each shard thread waited for the
 * other: 131,070 timers stuck and the process hung for good.
 */
struct t_cross {
	struct kairos *k;
	kairos_id *victims;	/* timers on the other shard */
	int n;
	atomic_int *arrived;	/* both callbacks are running: then post */
	atomic_int cancelled;
};

static void t_cb_cross(void *arg, kairos_id id, int status)
{
	struct t_cross *x = arg;
	uint64_t end = t_mono() + 5 * T_SEC;

	(void)id;
	(void)status;
	atomic_fetch_add(x->arrived, 1);
	while (t_int(x->arrived) < 2 && t_mono() < end)
		;
	for (int i = 0; i < x->n; i++)
		if (kairos_cancel(x->k, x->victims[i]) == 0)
			atomic_fetch_add(&x->cancelled, 1);
}

struct t_pinned_arm {
	struct kairos *k;
	unsigned cpu;
	int n;
	kairos_id *ids;
	unsigned shard;
	struct t_cross *x;
	kairos_id trigger;
};

/* Arms from a thread pinned to @cpu, so its timers land on that CPU's shard. */
static void *t_pinned_arm_thread(void *arg)
{
	struct t_pinned_arm *p = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
		return NULL;
	for (int i = 0; i < p->n; i++)
		if (kairos_arm(p->k, 60 * T_SEC, t_cb_never, NULL, &p->ids[i]))
			return NULL;
	kairos_arm(p->k, 200 * T_MS, t_cb_cross, p->x, &p->trigger);
	p->shard = (unsigned)(p->ids[0] >> 24) & 0xff;	/* the id's shard field */
	return NULL;
}

START_TEST(test_cancel_inline_cross_shard_no_deadlock)
{
	enum { N = 80000 };
	struct kairos_config c = t_cfg(2, 1);
	struct kairos *k;
	static kairos_id ids[2][N];
	struct t_pinned_arm p[2];
	struct t_cross x[2];
	atomic_int arrived = 0;
	struct kairos_stats st;
	pthread_t th[2];

	if (t_ncpu() < 2) {
		fprintf(stderr, "inline_cross_shard: needs 2 CPUs; skipped\n");
		return;
	}
	alarm(120);
	c.delivery = KAIROS_DELIVER_INLINE;
	k = t_create(&c);
	for (int i = 0; i < 2; i++) {
		/* The callback on shard i cancels the timers shard 1 - i holds. */
		x[i] = (struct t_cross){ .k = k, .victims = ids[1 - i], .n = N, .arrived = &arrived };
		p[i] = (struct t_pinned_arm){ .k = k, .cpu = (unsigned)i, .n = N, .ids = ids[i],
					      .x = &x[i] };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_pinned_arm_thread, &p[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	ck_assert_msg(p[0].trigger && p[1].trigger, "arming from pinned threads failed");
	if (p[0].shard == p[1].shard) {
		/* The scheduler kept both on one CPU's shard: no cross traffic to test. */
		fprintf(stderr, "inline_cross_shard: both threads armed on shard %u; skipped\n",
			p[0].shard);
		t_destroy(k, KAIROS_DRAIN_DROP, 2 * N);
		return;
	}
	ck_assert_int_eq(t_wait_int(&x[0].cancelled, N, 60000), N);
	ck_assert_int_eq(t_wait_int(&x[1].cancelled, N, 60000), N);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.cancelled, 2 * N);
	ck_assert_uint_eq(st.fired, 2);
	alarm(0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cancel");
	TCase *tc = tcase_create("cancel");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cancel_before_fire);
	tcase_add_test(tc, test_cancel_wakes_idle_shard);
	tcase_add_test(tc, test_cancel_after_fire);
	tcase_add_test(tc, test_cancel_while_running);
	tcase_add_test(tc, test_cancel_sync_waits);
	tcase_add_test(tc, test_cancel_sync_waits_periodic);
	tcase_add_test(tc, test_cancel_periodic_while_running);
	tcase_add_test(tc, test_cancel_sync_own_oneshot);
	tcase_add_test(tc, test_cancel_sync_own_periodic);
	tcase_add_test(tc, test_cancel_destroy_from_callback);
	tcase_add_test(tc, test_cancel_fire_storm);
	tcase_add_test(tc, test_cancel_stale_ids);
	tcase_add_test(tc, test_cancel_n_mixed);
	tcase_add_test(tc, test_cancel_n_errors);
	tcase_add_test(tc, test_prefetch);
	tcase_add_test(tc, test_cancel_foreign_ids);
	tcase_add_test(tc, test_cancel_sync_rss_flat);
	tcase_add_test(tc, test_cancel_sync_other_destroy);
	tcase_add_test(tc, test_cancel_sync_callback_destroys);
	tcase_add_test(tc, test_cancel_sync_across_destroy);
	tcase_add_test(tc, test_cancel_inline_cross_shard_no_deadlock);
	suite_add_tcase(s, tc);
	return t_main(s, "cancel");
}
