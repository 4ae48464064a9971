/* SPDX-License-Identifier: MIT */
/*
 * queue.c - expiries delivered to the user's own thread: kairos_queue_run()
 * and kairos_queue_take(), the fd, and every line of the queue contract.
 *
 * Real clock, shared 2-core machine: lower bounds are strict, upper bounds
 * generous, and nothing asserts speed.  meson runs this program twice: with
 * the backend the probe picks and with KAIROS_BACKEND=epoll.
 */
#include <limits.h>
#include <poll.h>

#include "t_util.h"
#include "../src/internal.h"	/* id_shard(): which shard an id names */
#include "../src/fault.h"	/* fault_take_hold: a take held with its list in hand */

/* Arms @t one-shot @delay_ns from now for @q, as t_arm() does for workers. */
static int q_arm(struct kairos *k, struct kairos_queue *q, struct t_timer *t, uint64_t delay_ns,
		 kairos_fn fn)
{
	struct kairos_timer_opts o = { .queue = q };
	uint64_t before = t_now(k);
	int rc;

	t_timer_init(t, &tt, before + delay_ns, 0);
	t->deadline = before + delay_ns;
	rc = kairos_arm_opts(k, delay_ns, &o, fn, t, &t->id);
	if (rc == 0)
		atomic_fetch_add(&tt.armed, 1);
	return rc;
}

/* Whether @q's fd is readable within @ms. */
static bool q_readable(struct kairos_queue *q, int ms)
{
	struct pollfd p = { .fd = kairos_queue_fd(q), .events = POLLIN };

	ck_assert_int_ge(p.fd, 0);
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static pthread_t q_runner;

/* t_cb, and the thread it ran on must be the one running the queue. */
static void q_cb_here(void *arg, kairos_id id, int status)
{
	if (!pthread_equal(pthread_self(), q_runner))
		atomic_fetch_add(&tt.bad, 1);
	t_cb(arg, id, status);
}

/* Runs @q until @n one-shot callbacks have run or @ms pass; returns the runs. */
static uint64_t q_run_until(struct kairos_queue *q, uint64_t n, unsigned ms)
{
	uint64_t end = t_mono() + ms * T_MS, ran = 0;

	while (atomic_load(&tt.fired) < n && t_mono() < end) {
		int rc;

		if (!q_readable(q, 10))
			continue;
		rc = kairos_queue_run(q, 7);
		ck_assert_int_ge(rc, 0);
		ran += (uint64_t)rc;
	}
	return ran;
}

/* A service and a queue of it, run by this thread. */
static struct kairos *q_begin(struct kairos_queue **q)
{
	struct kairos *k = t_create(NULL);

	ck_assert_int_eq(kairos_queue_create(k, q), 0);
	ck_assert_ptr_nonnull(*q);
	q_runner = pthread_self();
	return k;
}

/*
 * A one-shard service on the manual clock with queue @q, and @n one-shot
 * timers armed for it, due at 1 ms, with callback @fn(@arg); the clock
 * is then moved on past them, so that every one waits on the queue.
 */
static struct kairos *q_begin_due(struct kairos_queue **q, int n, kairos_fn fn, void *arg)
{
	struct kairos_timer_opts o = { 0 };
	struct kairos_config c;
	struct kairos *k;

	kairos_config_default(&c);
	c.shards = 1;
	c.clock = KAIROS_CLOCK_MANUAL;
	k = t_create(&c);
	ck_assert_int_eq(kairos_queue_create(k, q), 0);
	o.queue = *q;
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(kairos_arm_opts(k, T_MS, &o, fn, arg, NULL), 0);
	ck_assert_int_eq(kairos_clock_advance(k, 10 * T_MS), 0);
	return k;
}

/* Waits until entries wait in @q, then a while more, so that all due have come. */
static void q_settle(struct kairos_queue *q)
{
	ck_assert(q_readable(q, T_WAIT_MS));
	t_sleep_ms(100);
}

/* The callbacks' findings and the counters, then both destroyed. */
static void q_end(struct kairos *k, struct kairos_queue *q)
{
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

/* ------------------------------------------------------------------ */
/* Run and take                                                        */

START_TEST(test_queue_run_on_caller)
{
	enum { N = 200 };
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	static struct t_timer t[N];
	uint64_t seed = t_seed(1), ran;

	/* Nothing waits: the fd is quiet and a run finds nothing. */
	ck_assert(!q_readable(q, 0));
	ck_assert_int_eq(kairos_queue_run(q, 100), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], t_rand_below(&seed, 40) * T_MS, q_cb_here), 0);
	ran = q_run_until(q, N, T_WAIT_MS);
	ck_assert_uint_eq(ran, N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&t[i].runs), 1);
		ck_assert(t_u64(&t[i].cb_id) == t[i].id);
	}
	/* All run: the fd is quiet again, and the timers have ended. */
	ck_assert(!q_readable(q, 0));
	ck_assert_int_eq(kairos_cancel(k, t[0].id), -ENOENT);
	ck_assert_int_eq(kairos_reset(k, t[1].id, T_MS), -ENOENT);
	q_end(k, q);
}
END_TEST

START_TEST(test_queue_take_hands_out)
{
	enum { N = 100 };
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_timer_opts o = { 0 };
	struct kairos_expiry e[16];
	static int seen[N];
	uint64_t start, now, deadline[N];
	int got = 0;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	/* Nothing waits: 0 does not wait, a timeout waits it out. */
	ck_assert_int_eq(kairos_queue_take(q, e, 16, 0), 0);
	start = t_mono();
	ck_assert_int_eq(kairos_queue_take(q, e, 16, 20 * T_MS), 0);
	ck_assert_uint_ge(t_mono() - start, 20 * T_MS);
	for (int i = 0; i < N; i++) {
		kairos_id id;

		deadline[i] = t_now(k) + (uint64_t)(i % 30) * T_MS;
		/* No callback: these are only taken. */
		ck_assert_int_eq(kairos_arm_opts(k, (uint64_t)(i % 30) * T_MS, &o, NULL,
						 &seen[i], &id), 0);
		atomic_fetch_add(&tt.armed, 1);
	}
	while (got < N) {
		int n = kairos_queue_take(q, e, 16, -1);

		ck_assert_int_gt(n, 0);
		now = t_now(k);
		for (int j = 0; j < n; j++) {
			int i = (int)((int *)e[j].arg - seen);

			ck_assert(i >= 0 && i < N);
			ck_assert_int_eq(e[j].status, 1);
			ck_assert_ptr_null(e[j].fn);
			ck_assert(e[j].id != 0);
			/* Never early: due at or after its deadline, taken after that. */
			ck_assert_uint_ge(e[j].deadline_ns, deadline[i]);
			ck_assert_uint_ge(now, e[j].deadline_ns);
			seen[i]++;
			/* Taken means ended. */
			ck_assert_int_eq(kairos_cancel(k, e[j].id), -ENOENT);
		}
		got += n;
		atomic_fetch_add(&tt.fired, (uint64_t)n);
	}
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(seen[i], 1);
	ck_assert_int_eq(kairos_queue_take(q, e, 16, 30 * T_MS), 0);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* A NULL callback with kairos_queue_run() ends the entry, counted as run. */
START_TEST(test_queue_run_without_callback)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_timer_opts o = { 0 };
	kairos_id id;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, T_MS, &o, NULL, NULL, &id), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert(q_readable(q, T_WAIT_MS));
	ck_assert_int_eq(kairos_queue_run(q, 10), 1);
	atomic_fetch_add(&tt.fired, 1);
	ck_assert_int_eq(kairos_cancel(k, id), -ENOENT);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* @max bounds one run; what is left stays, and the fd stays readable. */
START_TEST(test_queue_run_max)
{
	enum { N = 20 };
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	static struct t_timer t[N];

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], 2 * T_MS, q_cb_here), 0);
	/* Let them all expire into the queue. */
	q_settle(q);
	ck_assert_int_eq(kairos_queue_run(q, 3), 3);
	ck_assert_uint_eq(t_u64(&tt.fired), 3);
	ck_assert(q_readable(q, 0));
	ck_assert_int_eq(kairos_queue_run(q, 100), N - 3);
	ck_assert(!q_readable(q, 0));
	q_end(k, q);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Cancel and reset of entries that wait                               */

START_TEST(test_queue_cancel_waiting_entry)
{
	enum { N = 40 };
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	static struct t_timer t[N];

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], T_MS, q_cb_here), 0);
	q_settle(q);
	/* Expired, untaken: still cancellable, and then never run. */
	for (int i = 0; i < N; i += 2)
		ck_assert_int_eq(t_cancel(k, &tt, &t[i]), 0);
	ck_assert_int_eq(kairos_queue_run(q, 1000), N / 2);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&t[i].runs), i % 2);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(kairos_cancel(k, t[i].id), -ENOENT);
	q_end(k, q);
}
END_TEST

/*
 * A reset of an expired, untaken one-shot withdraws the entry and arms it
 * again: 0, the entry is never run, and the timer expires anew at the new
 * deadline, never before.  This is the idle-timeout pattern of a loop that
 * lags: activity seen after the expiry still keeps the connection.
 */
START_TEST(test_queue_reset_waiting_entry)
{
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	struct t_timer t;
	uint64_t before;

	ck_assert_int_eq(q_arm(k, q, &t, T_MS, q_cb_here), 0);
	ck_assert(q_readable(q, T_WAIT_MS));
	t_sleep_ms(20);
	before = t_now(k);
	ck_assert_int_eq(kairos_reset(k, t.id, 150 * T_MS), 0);
	t.base = before + 150 * T_MS;
	/* Twice: a second reset of the withdrawn entry moves it again. */
	before = t_now(k);
	ck_assert_int_eq(kairos_reset(k, t.id, 200 * T_MS), 0);
	t.base = before + 200 * T_MS;
	/* The withdrawn entry is not run; the run sends it back to its shard. */
	ck_assert_int_eq(kairos_queue_run(q, 10), 0);
	ck_assert_int_eq(t_int(&t.runs), 0);
	ck_assert_uint_eq(q_run_until(q, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t_int(&t.runs), 1);
	ck_assert_uint_ge(t_u64(&t.first_ns), before + 200 * T_MS);
	/* Taken or run: ended. */
	ck_assert_int_eq(kairos_reset(k, t.id, T_MS), -ENOENT);
	q_end(k, q);
}
END_TEST

/* A withdrawn entry can still be cancelled before a drainer sees it. */
START_TEST(test_queue_reset_then_cancel_waiting_entry)
{
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	struct t_timer t;

	ck_assert_int_eq(q_arm(k, q, &t, T_MS, q_cb_here), 0);
	ck_assert(q_readable(q, T_WAIT_MS));
	t_sleep_ms(20);
	ck_assert_int_eq(kairos_reset(k, t.id, 10 * T_MS), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &t), 0);
	ck_assert_int_eq(kairos_queue_run(q, 10), 0);
	t_sleep_ms(50);
	ck_assert_int_eq(kairos_queue_run(q, 10), 0);
	ck_assert_int_eq(t_int(&t.runs), 0);
	ck_assert_int_eq(kairos_cancel(k, t.id), -ENOENT);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Periodic entries coalesce                                           */

START_TEST(test_queue_periodic_coalesces)
{
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	struct kairos_timer_opts o = { 0 };
	struct t_timer p;
	uint64_t before;

	o.queue = q;
	o.period_ns = 10 * T_MS;
	before = t_now(k);
	t_timer_init(&p, &tt, before, 10 * T_MS);
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, q_cb_here, &p, &p.id), 0);
	atomic_fetch_add(&tt.armed, 1);
	/* Untaken for 10+ periods: one entry, whose status counts them. */
	t_sleep_ms(105);
	ck_assert_int_eq(kairos_queue_run(q, 10), 1);
	ck_assert_int_eq(t_int(&p.runs), 1);
	ck_assert_msg(t_int(&p.st[0]) >= 10, "status after 105 ms of a 10 ms period: %d",
		      t_int(&p.st[0]));
	/* And it goes on from there, on its grid. */
	{
		uint64_t end = t_mono() + T_WAIT_MS * T_MS;

		while (t_int(&p.runs) < 3 && t_mono() < end)
			if (q_readable(q, 10))
				ck_assert_int_ge(kairos_queue_run(q, 10), 0);
	}
	ck_assert_int_ge(t_int(&p.runs), 3);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p), 0);
	q_end(k, q);
}
END_TEST

/* ------------------------------------------------------------------ */
/* A running queue callback: -EBUSY, and cancel_sync waits             */

struct q_runner_arg {
	struct kairos_queue *q;
	atomic_int stop;
	atomic_int ran;
};

static void *q_run_thread(void *arg)
{
	struct q_runner_arg *a = arg;

	while (!atomic_load(&a->stop)) {
		int rc;

		if (!q_readable(a->q, 5))
			continue;
		rc = kairos_queue_run(a->q, 16);
		if (rc < 0) {
			atomic_fetch_add(&tt.bad, 1);
			break;
		}
		atomic_fetch_add(&a->ran, rc);
	}
	return NULL;
}

struct q_sync_arg {
	struct kairos *k;
	kairos_id id;
	struct t_block *b;
	atomic_int rc;
	atomic_int done_seen;	/* the callback had returned when cancel_sync did */
	atomic_int returned;
};

static void *q_sync_thread(void *arg)
{
	struct q_sync_arg *a = arg;
	int rc = kairos_cancel_sync(a->k, a->id);

	atomic_store(&a->done_seen, t_int(&a->b->done));
	atomic_store(&a->rc, rc);
	atomic_store(&a->returned, 1);
	return NULL;
}

START_TEST(test_queue_cancel_while_running)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_timer_opts o = { 0 };
	struct q_runner_arg ra = { 0 };
	struct q_sync_arg sa = { 0 };
	struct t_block b;
	pthread_t runner, syncer;
	kairos_id id;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	t_block_init(&b, 0, 0);
	ck_assert_int_eq(kairos_arm_opts(k, T_MS, &o, t_cb_block, &b, &id), 0);
	atomic_fetch_add(&tt.armed, 1);
	ra.q = q;
	ck_assert_int_eq(pthread_create(&runner, NULL, q_run_thread, &ra), 0);
	t_block_wait_started(&b);
	ck_assert_int_eq(kairos_cancel(k, id), -EBUSY);
	sa.k = k;
	sa.id = id;
	sa.b = &b;
	ck_assert_int_eq(pthread_create(&syncer, NULL, q_sync_thread, &sa), 0);
	t_sleep_ms(50);
	ck_assert_int_eq(t_int(&sa.returned), 0);
	atomic_store(&b.release, 1);
	ck_assert_int_eq(pthread_join(syncer, NULL), 0);
	ck_assert_int_eq(t_int(&sa.rc), -EBUSY);
	ck_assert_int_eq(t_int(&sa.done_seen), 1);
	atomic_store(&ra.stop, 1);
	ck_assert_int_eq(pthread_join(runner, NULL), 0);
	ck_assert_int_eq(t_int(&ra.ran), 1);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* From its own queue callback: cancel_sync says -EDEADLK, destroy too. */
static struct kairos *q_self_k;
static atomic_int q_self_sync, q_self_destroy;

static void q_cb_self(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)status;
	atomic_store(&q_self_sync, kairos_cancel_sync(q_self_k, id));
	atomic_store(&q_self_destroy, kairos_destroy(q_self_k, KAIROS_DRAIN_DROP));
	atomic_fetch_add(&tt.fired, 1);
}

START_TEST(test_queue_callback_calls_on_itself)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_timer_opts o = { 0 };

	q_self_k = k;
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, T_MS, &o, q_cb_self, NULL, NULL), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert(q_readable(q, T_WAIT_MS));
	ck_assert_int_eq(kairos_queue_run(q, 1), 1);
	ck_assert_int_eq(t_int(&q_self_sync), -EDEADLK);
	ck_assert_int_eq(t_int(&q_self_destroy), -EDEADLK);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A callback of service A that runs a queue of service B: B's callback is
 * inside A's too.  Its kairos_cancel_sync() of A's running timer and its
 * kairos_destroy() of A would wait for the run they are inside (or, on A's
 * worker, join their own thread): both say -EDEADLK, as they do from A's
 * callback itself.  _i == 0: A's callback runs on A's worker; 1: on this
 * thread, from A's queue.
 */
static struct {
	struct kairos *a, *b;
	struct kairos_queue *qb;
	atomic_int run_rc, sync_a, destroy_a, sync_b, done;
} q_nest;

static void q_cb_nest_inner(void *arg, kairos_id id, int status)
{
	kairos_id outer = *(kairos_id *)arg;

	(void)status;
	atomic_store(&q_nest.sync_a, kairos_cancel_sync(q_nest.a, outer));
	atomic_store(&q_nest.destroy_a, kairos_destroy(q_nest.a, KAIROS_DRAIN_DROP));
	atomic_store(&q_nest.sync_b, kairos_cancel_sync(q_nest.b, id));
}

static void q_cb_nest_outer(void *arg, kairos_id id, int status)
{
	kairos_id *outer = arg;

	(void)status;
	*outer = id;
	atomic_store(&q_nest.run_rc, kairos_queue_run(q_nest.qb, 1));
	atomic_store(&q_nest.done, 1);
}

START_TEST(test_queue_nested_services)
{
	struct kairos_queue *qa = NULL;
	struct kairos_timer_opts o = { 0 };
	static kairos_id outer;

	alarm(60);	/* before the fix a wait for its own run: fail, not hang */
	q_nest.b = q_begin_due(&q_nest.qb, 1, q_cb_nest_inner, &outer);
	q_nest.a = t_create(NULL);
	atomic_store(&q_nest.done, 0);
	atomic_store(&q_nest.run_rc, 1000);
	atomic_store(&q_nest.sync_a, 1000);
	atomic_store(&q_nest.destroy_a, 1000);
	atomic_store(&q_nest.sync_b, 1000);
	ck_assert(q_readable(q_nest.qb, T_WAIT_MS));
	if (_i == 1) {
		ck_assert_int_eq(kairos_queue_create(q_nest.a, &qa), 0);
		o.queue = qa;
	}
	ck_assert_int_eq(kairos_arm_opts(q_nest.a, T_MS, &o, q_cb_nest_outer, &outer, NULL), 0);
	if (_i == 1) {
		ck_assert(q_readable(qa, T_WAIT_MS));
		ck_assert_int_eq(kairos_queue_run(qa, 1), 1);
	}
	ck_assert_int_eq(t_wait_int(&q_nest.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t_int(&q_nest.run_rc), 1);
	ck_assert_int_eq(t_int(&q_nest.sync_a), -EDEADLK);
	ck_assert_int_eq(t_int(&q_nest.destroy_a), -EDEADLK);
	ck_assert_int_eq(t_int(&q_nest.sync_b), -EDEADLK);
	/* Outside the callbacks both calls work as ever. */
	if (qa)
		ck_assert_int_eq(kairos_queue_destroy(qa), 0);
	ck_assert_int_eq(kairos_destroy(q_nest.a, KAIROS_DRAIN_DROP), 0);
	ck_assert_int_eq(kairos_queue_destroy(q_nest.qb), 0);
	ck_assert_int_eq(kairos_destroy(q_nest.b, KAIROS_DRAIN_DROP), 0);
	alarm(0);
}
END_TEST

/*
 * A callback that destroys its own queue: the entries its kairos_queue_run()
 * had taken and not reached end unrun (drained), not run on a queue that is
 * gone.  A manual clock puts all five on the list before the run.
 */
static struct kairos_queue *q_gone_q;
static atomic_int q_gone_ran, q_gone_rc = 1;

static void q_cb_destroy_own(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
	if (atomic_fetch_add(&q_gone_ran, 1) == 0)
		atomic_store(&q_gone_rc, kairos_queue_destroy(q_gone_q));
}

START_TEST(test_queue_callback_destroys_its_queue)
{
	struct kairos *k = q_begin_due(&q_gone_q, 5, q_cb_destroy_own, NULL);
	struct kairos_stats st;

	/* One ran; it destroyed the queue, whose list was empty by then. */
	ck_assert_int_eq(kairos_queue_run(q_gone_q, 100), 1);
	ck_assert_int_eq(t_int(&q_gone_ran), 1);
	ck_assert_int_eq(t_int(&q_gone_rc), 0);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.armed, 5);
	ck_assert_uint_eq(st.fired, 1);
	ck_assert_uint_eq(st.drained, 4);
	ck_assert_uint_eq(st.pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Races: cancel against run and take, from many threads               */

struct q_race {
	struct kairos *k;
	struct kairos_queue *q;
	kairos_id *ids;
	atomic_int *ran;		/* per timer: callbacks run or entries taken */
	atomic_int *cancelled;		/* per timer: cancels that returned 0 */
	int n;
	atomic_int stop;
	unsigned salt;
};

static void q_cb_count(void *arg, kairos_id id, int status)
{
	(void)id;
	if (status != 1)
		atomic_fetch_add(&tt.bad, 1);
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void *q_race_runner(void *arg)
{
	struct q_race *r = arg;

	while (!atomic_load(&r->stop))
		if (kairos_queue_run(r->q, 8) < 0)
			atomic_fetch_add(&tt.bad, 1);
	return NULL;
}

static void *q_race_taker(void *arg)
{
	struct q_race *r = arg;
	struct kairos_expiry e[8];

	while (!atomic_load(&r->stop)) {
		int n = kairos_queue_take(r->q, e, 8, 2 * (int64_t)T_MS);

		if (n < 0) {
			atomic_fetch_add(&tt.bad, 1);
			break;
		}
		for (int i = 0; i < n; i++)
			atomic_fetch_add((atomic_int *)e[i].arg, 1);
	}
	return NULL;
}

static void *q_race_canceller(void *arg)
{
	struct q_race *r = arg;
	uint64_t seed = t_seed(r->salt);

	while (!atomic_load(&r->stop)) {
		int i = (int)t_rand_below(&seed, (uint64_t)r->n);

		if (kairos_cancel(r->k, r->ids[i]) == 0)
			atomic_fetch_add(&r->cancelled[i], 1);
	}
	return NULL;
}

START_TEST(test_queue_cancel_races_run_and_take)
{
	enum { N = 3000 };
	struct kairos *k = t_create(NULL);
	struct q_race r = { 0 };
	struct kairos_timer_opts o = { 0 };
	pthread_t th[5];
	uint64_t seed = t_seed(7), end;
	int done = 0, ran = 0, cancelled = 0;

	r.k = k;
	r.n = N;
	r.ids = calloc(N, sizeof(*r.ids));
	r.ran = calloc(N, sizeof(*r.ran));
	r.cancelled = calloc(N, sizeof(*r.cancelled));
	ck_assert(r.ids && r.ran && r.cancelled);
	ck_assert_int_eq(kairos_queue_create(k, &r.q), 0);
	o.queue = r.q;
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(kairos_arm_opts(k, t_rand_below(&seed, 30) * T_MS, &o,
						 q_cb_count, &r.ran[i], &r.ids[i]), 0);
		atomic_fetch_add(&tt.armed, 1);
	}
	r.salt = 11;
	ck_assert_int_eq(pthread_create(&th[0], NULL, q_race_runner, &r), 0);
	ck_assert_int_eq(pthread_create(&th[1], NULL, q_race_runner, &r), 0);
	ck_assert_int_eq(pthread_create(&th[2], NULL, q_race_taker, &r), 0);
	ck_assert_int_eq(pthread_create(&th[3], NULL, q_race_canceller, &r), 0);
	ck_assert_int_eq(pthread_create(&th[4], NULL, q_race_canceller, &r), 0);
	/* Until every timer has ended one way or the other. */
	end = t_mono() + 20 * T_SEC;
	while (t_mono() < end) {
		done = 0;
		for (int i = 0; i < N; i++)
			done += atomic_load(&r.ran[i]) + atomic_load(&r.cancelled[i]) > 0;
		if (done == N)
			break;
		t_sleep_ms(10);
	}
	atomic_store(&r.stop, 1);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	ck_assert_int_eq(done, N);
	/* Each timer: run or taken exactly once XOR one cancel returned 0. */
	for (int i = 0; i < N; i++) {
		int a = atomic_load(&r.ran[i]), c = atomic_load(&r.cancelled[i]);

		ck_assert_msg(a + c == 1, "timer %d: ran %d, cancelled %d", i, a, c);
		ran += a;
		cancelled += c;
	}
	atomic_fetch_add(&tt.fired, (uint64_t)ran);
	atomic_fetch_add(&tt.cancelled, (uint64_t)cancelled);
	t_check_identity(k, &tt);
	ck_assert_int_eq(kairos_queue_destroy(r.q), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(r.ids);
	free((void *)r.ran);
	free((void *)r.cancelled);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Destroy: of the queue, of the service, in either order              */

START_TEST(test_queue_destroy_with_entries)
{
	enum { NEAR = 10, FAR = 10 };
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	static struct t_timer t[NEAR + FAR];
	struct kairos_stats s;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	for (int i = 0; i < NEAR + FAR; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], i < NEAR ? T_MS : 60 * T_SEC, t_cb), 0);
	q_settle(q);
	/* The waiting entries end now, unrun, counted as drained. */
	ck_assert_int_eq(kairos_queue_destroy(q), NEAR);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.drained, NEAR);
	ck_assert_uint_eq(s.pending, FAR);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);
	/* The far ones go on: cancel and reset work, and an expiry ends unrun. */
	ck_assert_int_eq(kairos_cancel(k, t[NEAR].id), 0);
	ck_assert_int_eq(kairos_reset(k, t[NEAR + 1].id, T_MS), 0);
	{
		uint64_t end = t_mono() + T_WAIT_MS * T_MS;

		do {
			ck_assert_int_eq(kairos_stats(k, &s), 0);
			if (s.drained == NEAR + 1)
				break;
			t_sleep_ms(5);
		} while (t_mono() < end);
	}
	ck_assert_uint_eq(s.drained, NEAR + 1);
	ck_assert_uint_eq(s.cancelled, 1);
	ck_assert_uint_eq(s.pending, FAR - 2);
	for (int i = 0; i < NEAR + FAR; i++)
		ck_assert_int_eq(t_int(&t[i].runs), 0);
	/* The rest end with the service. */
	t_destroy(k, KAIROS_DRAIN_NOTIFY, FAR - 2);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.drained, NEAR + 1 + FAR - 2);
	ck_assert_uint_eq(atomic_load(&tt.notified), FAR - 2);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);
}
END_TEST

/*
 * An expired entry that a reset withdrew and armed again is a pending
 * timer: destroying its queue leaves it armed, for cancel or its deadline.
 */
START_TEST(test_queue_destroy_keeps_reset_entries)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	static struct t_timer t[2];
	struct kairos_stats s;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], T_MS, t_cb), 0);
	q_settle(q);
	/* Both wait untaken; reset withdraws them to a later deadline. */
	ck_assert_int_eq(kairos_reset(k, t[0].id, 60 * T_SEC), 0);
	ck_assert_int_eq(kairos_reset(k, t[1].id, 50 * T_MS), 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.drained, 0);
	ck_assert_uint_eq(s.pending, 2);
	/* One is cancelled while armed; the other ends unrun at its deadline. */
	ck_assert_int_eq(kairos_cancel(k, t[0].id), 0);
	{
		uint64_t end = t_mono() + T_WAIT_MS * T_MS;

		do {
			ck_assert_int_eq(kairos_stats(k, &s), 0);
			if (s.drained == 1)
				break;
			t_sleep_ms(5);
		} while (t_mono() < end);
	}
	ck_assert_uint_eq(s.drained, 1);
	ck_assert_uint_eq(s.cancelled, 1);
	ck_assert_uint_eq(s.pending, 0);
	ck_assert_int_eq(kairos_cancel(k, t[1].id), -ENOENT);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(t_int(&t[i].runs), 0);
	t_destroy(k, KAIROS_DRAIN_NOTIFY, 0);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);
}
END_TEST

/*
 * A destroyed queue lives while its timers do; the cancel that ends the
 * last of them leaves the queue's free to the service's reclaimer (the free
 * takes a lock that a kairos_queue_destroy() holds while it ends its list,
 * and a cancel runs inside a read-side section): the queue's number is let
 * go within the bound, and the service goes on.  A second queue's last
 * timer is cancelled just before the service is destroyed: the destroy
 * frees it (the sanitizer builds would report it leaked otherwise).
 */
START_TEST(test_queue_destroyed_freed_after_last_cancel)
{
	enum { N = 8 };
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	static struct t_timer t[N];
	struct kairos_stats s;
	_Atomic(struct kairos_queue *) *slot;
	uint64_t end;
	unsigned no;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	no = q->no;
	slot = &atomic_load(&k->qdir[no / QUEUE_BLOCK])[no % QUEUE_BLOCK];
	ck_assert_ptr_eq(atomic_load(slot), q);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], 60 * T_SEC, t_cb), 0);
	/* Nothing has expired: nothing to end, and the timers stay armed. */
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_ptr_eq(atomic_load(slot), q);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_cancel(k, &tt, &t[i]), 0);
	end = t_mono() + T_WAIT_MS * T_MS;
	while (atomic_load(slot) && t_mono() < end)
		t_sleep_ms(1);
	ck_assert_msg(atomic_load(slot) == NULL, "queue %u still in its slot %u ms after its "
		      "last timer was cancelled", no, T_WAIT_MS);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.cancelled, N);
	ck_assert_uint_eq(s.pending, 0);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);

	/* The next queue may take the number again, and is freed at destroy. */
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], 60 * T_SEC, t_cb), 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_cancel(k, &tt, &t[i]), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&t[i].runs), 0);
}
END_TEST

START_TEST(test_queue_service_destroyed_first)
{
	enum { N = 30 };
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	static struct t_timer t[N];
	struct kairos_expiry e[4];
	struct kairos_stats s;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(q_arm(k, q, &t[i], i % 2 ? T_MS : 60 * T_SEC, t_cb), 0);
	q_settle(q);
	/* Waiting and pending alike are notified once, on the destroying thread. */
	t_destroy(k, KAIROS_DRAIN_NOTIFY, N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&t[i].notified), 1);
		ck_assert_int_eq(t_int(&t[i].runs), 0);
	}
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.drained, N);
	ck_assert_uint_eq(s.pending, 0);
	ck_assert_int_eq(kairos_queue_run(q, 4), -ESHUTDOWN);
	ck_assert_int_eq(kairos_queue_take(q, e, 4, -1), -ESHUTDOWN);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
}
END_TEST

/*
 * Waits until a taker is blocked inside kairos_queue_take() on @q (a thread
 * that started late would otherwise call it on a queue already gone).
 */
static void q_wait_taker(struct kairos_queue *q)
{
	unsigned n = 0;

	for (int i = 0; i < T_WAIT_MS && n == 0; i++) {
		pthread_mutex_lock(&q->lock);
		n = q->waiters;
		pthread_mutex_unlock(&q->lock);
		if (n == 0)
			t_sleep_ms(1);
	}
	ck_assert_uint_eq(n, 1);
}

/* A taker blocked for ever returns when the service goes. */
static void *q_take_forever(void *arg)
{
	struct kairos_queue *q = arg;
	struct kairos_expiry e;

	return (void *)(intptr_t)kairos_queue_take(q, &e, 1, -1);
}

START_TEST(test_queue_take_wakes_at_destroy)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	pthread_t th;
	void *rc;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, q_take_forever, q), 0);
	q_wait_taker(q);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(pthread_join(th, &rc), 0);
	ck_assert_int_eq((int)(intptr_t)rc, -ESHUTDOWN);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
}
END_TEST

/*
 * A taker blocked for ever returns -EINVAL when its queue is destroyed
 * (kairos_queue_take(3)), and the queue is freed only once it has left:
 * ASan reports any use after the free.
 */
START_TEST(test_queue_take_wakes_at_queue_destroy)
{
	struct kairos *k = t_create(NULL);
	struct kairos_queue *q;
	struct kairos_stats s;
	pthread_t th;
	void *rc;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, q_take_forever, q), 0);
	q_wait_taker(q);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_int_eq(pthread_join(th, &rc), 0);
	ck_assert_int_eq((int)(intptr_t)rc, -EINVAL);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

static atomic_int q_busy_calls, q_busy_after_dead;

/*
 * Takes a little longer than the period of the timers that call it; counts
 * the calls that start with @arg's destroy begun.
 */
static void q_cb_busy(void *arg, kairos_id id, int status)
{
	struct kairos *k = arg;

	(void)id;
	(void)status;
	if (atomic_load(&k->dead))
		atomic_fetch_add(&q_busy_after_dead, 1);
	atomic_fetch_add(&q_busy_calls, 1);
	t_sleep_ns(1500 * T_US);
}

/* Once entries wait, one run with no limit. */
static void *q_run_all(void *arg)
{
	struct pollfd p = { .fd = kairos_queue_fd(arg), .events = POLLIN };

	if (poll(&p, 1, T_WAIT_MS) != 1)
		return (void *)(intptr_t)-1;
	return (void *)(intptr_t)kairos_queue_run(arg, UINT_MAX);
}

struct q_destroyer {
	struct kairos *k;
	atomic_int rc, done;
};

static void *q_destroy_thread(void *arg)
{
	struct q_destroyer *d = arg;

	atomic_store(&d->rc, kairos_destroy(d->k, KAIROS_DRAIN_DROP));
	atomic_store(&d->done, 1);
	return NULL;
}

/*
 * A kairos_queue_run() with no limit, on a queue its shard keeps filling
 * (two 1 ms periodic timers whose callbacks take 1.5 ms), stops once the
 * service's destroy has begun: the destroy waits for it, and would wait
 * for ever (as it did: the run went on taking).  At most the callback it
 * was about to start starts once the destroy has marked the service.
 */
START_TEST(test_queue_run_stops_at_service_destroy)
{
	struct kairos_timer_opts o = { .period_ns = T_MS };
	struct kairos_config c = t_cfg(1, 1);
	struct q_destroyer d = { 0 };
	struct kairos_queue *q;
	pthread_t run, des;
	int before, after;
	void *ran;

	atomic_store(&q_busy_calls, 0);
	atomic_store(&q_busy_after_dead, 0);
	d.k = t_create(&c);
	ck_assert_int_eq(kairos_queue_create(d.k, &q), 0);
	o.queue = q;
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(kairos_arm_opts(d.k, T_MS, &o, q_cb_busy, d.k, NULL), 0);
	ck_assert_int_eq(pthread_create(&run, NULL, q_run_all, q), 0);
	ck_assert_int_ge(t_wait_int(&q_busy_calls, 20, T_WAIT_MS), 20);
	before = atomic_load(&q_busy_calls);
	ck_assert_int_eq(pthread_create(&des, NULL, q_destroy_thread, &d), 0);
	for (int i = 0; i < T_WAIT_MS && !atomic_load(&d.done); i++)
		t_sleep_ms(1);
	after = atomic_load(&q_busy_calls);
	ck_assert_msg(atomic_load(&d.done), "kairos_destroy() still waits after %d ms: %d "
		      "callbacks since it began", T_WAIT_MS, after - before);
	ck_assert_int_eq(pthread_join(des, NULL), 0);
	ck_assert_int_eq(pthread_join(run, &ran), 0);
	ck_assert_int_eq((int)(intptr_t)ran, after);
	/* The run checks before each entry: one may start just as the flag is set. */
	ck_assert_int_le(atomic_load(&q_busy_after_dead), 1);
	ck_assert_int_eq(atomic_load(&d.rc), 2);	/* both periodic timers drained */
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
}
END_TEST

static atomic_int q_hold_ran;

static void *q_take_many(void *arg)
{
	struct kairos_expiry e[64];

	return (void *)(intptr_t)kairos_queue_take(arg, e, 64, 0);
}

/*
 * A take that has the queue's list in hand when the queue is destroyed
 * ends what it had not reached unrun, as the destroy ends what was still
 * waiting (kairos_queue_take(3)): every timer ends once, none is lost.
 * The take is held there (fault_take_hold) while the destroy runs.
 */
START_TEST(test_queue_take_holds_list_at_destroy)
{
	struct kairos_queue *q;
	struct kairos *k = q_begin_due(&q, 20, q_cb_count, &q_hold_ran);
	struct kairos_stats st;
	pthread_t th;
	void *rc;

	atomic_store(&fault_take_held, 0);
	atomic_store(&fault_take_hold, 1);
	ck_assert_int_eq(pthread_create(&th, NULL, q_take_many, q), 0);
	ck_assert_int_eq(t_wait_int(&fault_take_held, 1, 2000), 1);
	/* The list is in the take's hands: nothing waits for the destroy to end. */
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	atomic_store(&fault_take_hold, 0);
	ck_assert_int_eq(pthread_join(th, &rc), 0);
	/* Closed before it reached any: none handed out. */
	ck_assert_int_le((int)(intptr_t)rc, 0);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.armed, 20);
	ck_assert_uint_eq(st.fired, 0);
	ck_assert_uint_eq(st.drained, 20);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_int_eq(atomic_load(&q_hold_ran), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Options and errors                                                  */

START_TEST(test_queue_opts_kinds)
{
	struct kairos_queue *q;
	struct kairos *k = q_begin(&q);
	struct kairos_timer_opts o = { 0 };
	struct t_timer a, sl;
	uint64_t at;

	o.queue = q;
	/* Absolute. */
	o.flags = KAIROS_ABSTIME;
	at = t_now(k) + 30 * T_MS;
	t_timer_init(&a, &tt, at, 0);
	ck_assert_int_eq(kairos_arm_opts(k, at, &o, q_cb_here, &a, &a.id), 0);
	atomic_fetch_add(&tt.armed, 1);
	/* With slack: never early, late by at most the slack (plus the usual). */
	o.flags = 0;
	o.slack_ns = 20 * T_MS;
	ck_assert_int_eq(q_arm(k, NULL, &sl, 0, NULL), -EINVAL);	/* no fn, no queue */
	t_timer_init(&sl, &tt, t_now(k) + 40 * T_MS, 0);
	ck_assert_int_eq(kairos_arm_opts(k, 40 * T_MS, &o, q_cb_here, &sl, &sl.id), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert_uint_eq(q_run_until(q, 2, T_WAIT_MS), 2);
	q_end(k, q);
}
END_TEST

START_TEST(test_queue_errors)
{
	struct kairos *k = t_create(NULL), *k2 = t_create(NULL);
	struct kairos_queue *q, *q2;
	struct kairos_timer_opts o = { 0 };
	struct kairos_expiry e;
	kairos_id id;

	ck_assert_int_eq(kairos_queue_create(NULL, &q), -EINVAL);
	ck_assert_int_eq(kairos_queue_create(k, NULL), -EINVAL);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_create(k2, &q2), 0);
	ck_assert_int_eq(kairos_queue_destroy(NULL), -EINVAL);
	ck_assert_int_eq(kairos_queue_fd(NULL), -EINVAL);
	ck_assert_int_ge(kairos_queue_fd(q), 0);
	ck_assert_int_ne(kairos_queue_fd(q), kairos_queue_fd(q2));
	ck_assert_int_eq(kairos_queue_run(NULL, 1), -EINVAL);
	ck_assert_int_eq(kairos_queue_run(q, 0), -EINVAL);
	ck_assert_int_eq(kairos_queue_take(NULL, &e, 1, 0), -EINVAL);
	ck_assert_int_eq(kairos_queue_take(q, NULL, 1, 0), -EINVAL);
	ck_assert_int_eq(kairos_queue_take(q, &e, 0, 0), -EINVAL);

	ck_assert_int_eq(kairos_arm_opts(NULL, 0, &o, t_cb_never, NULL, &id), -EINVAL);
	/* No queue: a callback is needed. */
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, NULL, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, NULL, NULL, NULL, &id), -EINVAL);
	o.flags = 0x100;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.flags = 0;
	o.reserved[5] = 1;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.reserved[5] = 0;
	o.reserved_int = 1;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.reserved_int = 0;
	/* A policy needs a period, and only one policy at a time. */
	o.flags = KAIROS_PERIOD_SKIP;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.period_ns = T_SEC;
	o.flags = KAIROS_PERIOD_SKIP | KAIROS_PERIOD_FIXED_DELAY;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.flags = 0;
	o.period_ns = 0;
	/* A queue of another service. */
	o.queue = q2;
	ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, t_cb_never, NULL, &id), -EINVAL);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, UINT64_MAX, &o, t_cb_never, NULL, &id), -EOVERFLOW);
	/* NULL options are all zero: a plain one-shot. */
	ck_assert_int_eq(kairos_arm_opts(k, 60 * T_SEC, NULL, t_cb_never, NULL, &id), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert_int_eq(t_cancel(k, &tt, &(struct t_timer){ .id = id }), 0);
	t_check_identity(k, &tt);

	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_int_eq(kairos_queue_destroy(q2), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	t_destroy(k2, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_opts(k, 0, &o, t_cb_never, NULL, &id), -ESHUTDOWN);
}
END_TEST

/* Many queues of one service, each with its own timers. */
START_TEST(test_queue_many_queues)
{
	enum { Q = 300 };
	struct kairos *k = t_create(NULL);
	static struct kairos_queue *q[Q];
	static struct t_timer t[Q];

	q_runner = pthread_self();
	for (int i = 0; i < Q; i++) {
		ck_assert_int_eq(kairos_queue_create(k, &q[i]), 0);
		ck_assert_int_eq(q_arm(k, q[i], &t[i], (uint64_t)(i % 20) * T_MS, q_cb_here), 0);
	}
	/* Destroy and make a few again: numbers are reused, timers stay apart. */
	for (int i = 0; i < Q; i += 3) {
		ck_assert_int_eq(t_cancel(k, &tt, &t[i]), 0);
		ck_assert_int_eq(kairos_queue_destroy(q[i]), 0);
		ck_assert_int_eq(kairos_queue_create(k, &q[i]), 0);
		ck_assert_int_eq(q_arm(k, q[i], &t[i], 5 * T_MS, q_cb_here), 0);
	}
	for (int i = 0; i < Q; i++) {
		uint64_t end = t_mono() + T_WAIT_MS * T_MS;

		while (t_int(&t[i].runs) == 0 && t_mono() < end)
			if (q_readable(q[i], 10))
				ck_assert_int_ge(kairos_queue_run(q[i], 10), 0);
		ck_assert_int_eq(t_int(&t[i].runs), 1);
	}
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	for (int i = 0; i < Q; i++)
		ck_assert_int_eq(kairos_queue_destroy(q[i]), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * Queues go to shards in turn, by number, and a queue's timers stay on its
 * shard whichever thread arms them: three loop threads with a queue each
 * use three shards, and a destroyed queue's number (and shard) is reused.
 */
struct q_loop {
	struct kairos *k;
	struct kairos_queue *q;
	kairos_id ids[40];
	int ran;
};

static void q_count_cb(void *arg, kairos_id id, int status)
{
	(void)id;
	if (status == 1)
		((struct q_loop *)arg)->ran++;
}

static void *q_loop_main(void *arg)
{
	struct q_loop *l = arg;
	struct kairos_timer_opts o = { .queue = l->q };
	uint64_t end = t_mono() + T_WAIT_MS * T_MS;
	kairos_id first;

	/* A timer for workers first: the thread joins its CPU's shard. */
	ck_assert_int_eq(kairos_arm(l->k, T_SEC, q_count_cb, l, &first), 0);
	ck_assert_int_eq(kairos_cancel(l->k, first), 0);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(kairos_arm_opts(l->k, (uint64_t)(i % 4) * T_MS, &o, q_count_cb, l,
						 &l->ids[i]), 0);
	while (l->ran < 40 && t_mono() < end)
		if (q_readable(l->q, 10))
			ck_assert_int_ge(kairos_queue_run(l->q, 64), 0);
	return NULL;
}

START_TEST(test_queue_bound_to_shard)
{
	struct kairos_config c = t_cfg(3, 1);
	struct kairos *k = t_create(&c);
	struct q_loop l[4] = { { 0 } };
	struct kairos_queue *again;
	pthread_t th[4];
	struct kairos_stats st;

	for (int i = 0; i < 4; i++) {
		l[i].k = k;
		ck_assert_int_eq(kairos_queue_create(k, &l[i].q), 0);
		ck_assert_int_eq(kairos_queue_shard(l[i].q), i % 3);
	}
	/* The lowest free number: a new queue takes the gone one's shard. */
	ck_assert_int_eq(kairos_queue_destroy(l[1].q), 0);
	ck_assert_int_eq(kairos_queue_create(k, &again), 0);
	ck_assert_int_eq(kairos_queue_shard(again), 1);
	l[1].q = again;
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, q_loop_main, &l[i]), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(l[i].ran, 40);
		for (int j = 0; j < 40; j++)
			ck_assert_uint_eq(id_shard(l[i].ids[j]), (unsigned)kairos_queue_shard(l[i].q));
	}
	/* This thread, too, follows the queue it arms for, back and forth. */
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++) {
			struct kairos_timer_opts o = { .queue = l[i].q };
			kairos_id id;

			ck_assert_int_eq(kairos_arm_opts(k, T_SEC, &o, q_count_cb, &l[i], &id), 0);
			ck_assert_uint_eq(id_shard(id), (unsigned)kairos_queue_shard(l[i].q));
			ck_assert_int_eq(kairos_cancel(k, id), 0);
		}
	}
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.armed, 4 * 41 + 12);
	ck_assert_uint_eq(st.fired, 4 * 40);
	ck_assert_uint_eq(st.cancelled, 4 + 12);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.early, 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(kairos_queue_destroy(l[i].q), 0);
		ck_assert_int_eq(kairos_queue_shard(NULL), -EINVAL);
	}
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("queue");
	TCase *tc = tcase_create("queue");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_queue_run_on_caller);
	tcase_add_test(tc, test_queue_take_hands_out);
	tcase_add_test(tc, test_queue_run_without_callback);
	tcase_add_test(tc, test_queue_run_max);
	tcase_add_test(tc, test_queue_cancel_waiting_entry);
	tcase_add_test(tc, test_queue_reset_waiting_entry);
	tcase_add_test(tc, test_queue_reset_then_cancel_waiting_entry);
	tcase_add_test(tc, test_queue_periodic_coalesces);
	tcase_add_test(tc, test_queue_cancel_while_running);
	tcase_add_test(tc, test_queue_callback_calls_on_itself);
	tcase_add_test(tc, test_queue_callback_destroys_its_queue);
	tcase_add_loop_test(tc, test_queue_nested_services, 0, 2);
	tcase_add_test(tc, test_queue_cancel_races_run_and_take);
	tcase_add_test(tc, test_queue_destroy_with_entries);
	tcase_add_test(tc, test_queue_destroy_keeps_reset_entries);
	tcase_add_test(tc, test_queue_destroyed_freed_after_last_cancel);
	tcase_add_test(tc, test_queue_service_destroyed_first);
	tcase_add_test(tc, test_queue_take_wakes_at_destroy);
	tcase_add_test(tc, test_queue_take_wakes_at_queue_destroy);
	tcase_add_test(tc, test_queue_take_holds_list_at_destroy);
	tcase_add_test(tc, test_queue_run_stops_at_service_destroy);
	tcase_add_test(tc, test_queue_opts_kinds);
	tcase_add_test(tc, test_queue_errors);
	tcase_add_test(tc, test_queue_many_queues);
	tcase_add_test(tc, test_queue_bound_to_shard);
	suite_add_tcase(s, tc);
	return t_main(s, "queue");
}
