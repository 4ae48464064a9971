/* SPDX-License-Identifier: MIT */
/*
 * far.c - timers filed by value (src/arrival.c): a timer armed with a delay
 * of at least 4,096 ticks reaches its shard as (index, generation, fire
 * tick) and is not touched until its slot comes.  Every promise holds for
 * them as for any other: never early and exactly once, pushed later and
 * moved earlier, cancelled (the shard sleeps through a quiet spell), cancelled
 * synchronously, drained at destroy, armed by threads that exit at once,
 * counted under max_timers, and kept through the sweeps of a slot that
 * churns beside them.
 *
 * The services here tick every 10 us, so "far" starts at 40.96 ms and the
 * tests take a fraction of a second.  meson runs the program on both
 * backends.
 */
#include <pthread.h>

#include "t_util.h"
#include "internal.h"
#include "../src/fault.h"

#define F_TICK		(10 * T_US)
#define F_FAR		(4096 * F_TICK)		/* the least delay filed by value */

static struct kairos *f_create(unsigned shards)
{
	struct kairos_config c = t_cfg(shards, 2);

	c.tick_ns = F_TICK;
	return t_create(&c);
}

/*
 * The shard of @k is quiet: @ms with no wake-up, in one of ten windows (a
 * shard that ticks faster is never quiet for one).  Returns the stats at
 * the quiet window's end.
 */
static struct kairos_stats f_quiet(struct kairos *k, unsigned ms)
{
	struct kairos_stats a, b;

	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(kairos_stats(k, &a), 0);
		t_sleep_ms(ms);
		ck_assert_int_eq(kairos_stats(k, &b), 0);
		if (b.wakeups == a.wakeups)
			return b;
	}
	ck_abort_msg("%" PRIu64 " wake-ups in the last of ten %u ms windows", b.wakeups - a.wakeups,
		     ms);
	return b;
}

/* A delay in [lo, lo + span). */
static uint64_t f_delay(uint64_t *rng, uint64_t lo, uint64_t span)
{
	return lo + t_rand_below(rng, span);
}

static void f_exact_once(void)
{
	enum { N = 3000 };
	static struct t_timer tm[N];
	struct kairos *k = f_create(2);
	uint64_t rng = t_seed(0xfa1);

	/* Most far, some near: both paths side by side, none early, each once. */
	for (int i = 0; i < N; i++) {
		uint64_t d = i % 5 ? f_delay(&rng, F_FAR + T_MS, 250 * T_MS)
				   : f_delay(&rng, T_MS, 30 * T_MS);

		ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
	}
	t_wait_fired(N);
	t_check_calls(&tt, T_LATE);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&tm[i].runs), 1);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

START_TEST(test_far_exact_once)
{
	f_exact_once();
}
END_TEST

START_TEST(test_far_reset_later_and_earlier)
{
	enum { N = 600 };
	static struct t_timer tm[N];
	static uint64_t want[N];
	struct kairos *k = f_create(1);

	/*
	 * Pushed later (a store, still by value), moved earlier but still far
	 * (posted, then linked), and moved near: each fires once, never before
	 * its last deadline.
	 */
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_arm_fn(k, &tt, &tm[i], 200 * T_MS, t_cb, false), 0);
		want[i] = tm[i].deadline;
	}
	for (int i = 0; i < N; i++) {
		uint64_t d = i % 3 == 0 ? 300 * T_MS : i % 3 == 1 ? F_FAR + 5 * T_MS : 2 * T_MS;
		uint64_t before = t_now(k);

		ck_assert_int_eq(kairos_reset(k, tm[i].id, d), 0);
		want[i] = before + d;
	}
	t_wait_fired(N);
	t_check_calls(&tt, 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&tm[i].runs), 1);
		ck_assert_msg(t_u64(&tm[i].first_ns) >= want[i],
			      "timer %d ran %" PRIu64 " ns before its deadline", i,
			      want[i] - t_u64(&tm[i].first_ns));
	}
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_far_idle_then_cancel)
{
	enum { N = WHEEL_SWEEP_MIN + 1000 };
	static struct t_timer tm[N];
	struct kairos_stats before, after;
	struct kairos *k = f_create(1);
	struct shard *s = k->shards[0];
	uint64_t steals;
	bool stalled;

	/*
	 * Once the arming thread has been quiet for a while, the shard stops
	 * looking at its block and sleeps as its wheel lets it: here, with
	 * nothing near, it does not wake at all.  The cancels post nothing:
	 * the timers are filed by value on this thread's shard, so this
	 * thread retires their records itself (table_keep()).  The shard's
	 * only work on them is to sweep the entries they leave stale, and it
	 * is woken for that once WHEEL_SWEEP_MIN of them have gone.  The last
	 * ones, in a bundle that is not full, are taken from this thread by
	 * the reclaimer's look at quiet threads.  (A thread that stalls with a
	 * bundle open, as on a loaded machine, has it taken too: until that
	 * is done its cancels are posted, and the shard takes them.)
	 */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 3600 * T_SEC), 0);
	t_sleep_ms(200);	/* ten polls: the block is dormant */
	/* The dormant pass may come late on a stalled machine. */
	before = f_quiet(k, 100);
	steals = atomic_load(&k->kept_steals);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(i % 2 ? t_cancel(k, &tt, &tm[i]) : t_cancel_sync(k, &tt, &tm[i]), 0);
	stalled = atomic_load(&k->kept_steals) != steals;
	if (!stalled)
		ck_assert_ptr_null(atomic_load(&s->inbox));
	/* Cancelled means cancelled: again, and for a reset, the id is gone. */
	for (int i = 0; i < N; i += 97) {
		ck_assert_int_eq(kairos_cancel(k, tm[i].id), -ENOENT);
		ck_assert_int_eq(kairos_reset(k, tm[i].id, T_MS), -ENOENT);
	}
	for (int i = 0; i < 200; i++) {
		ck_assert_int_eq(kairos_stats(k, &after), 0);
		if (after.wakeups > before.wakeups &&
		    atomic_load(&s->far_kept) + atomic_load(&s->cancels_taken) == N)
			break;
		t_sleep_ms(10);
	}
	ck_assert_msg(after.wakeups > before.wakeups, "the shard never woke for the cancels");
	ck_assert_uint_eq(atomic_load(&s->far_kept) + atomic_load(&s->cancels_taken), N);
	if (!stalled)
		ck_assert_uint_eq(atomic_load(&s->far_kept), N);
	ck_assert_uint_eq(after.cancelled, N);
	ck_assert_uint_eq(after.pending, 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&tm[i].runs), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_far_cancel_races_its_visit)
{
	enum { N = 4000 };
	static struct t_timer tm[N];
	struct kairos *k = f_create(2);
	uint64_t rng = t_seed(0xfa2), fired = 0, cancelled = 0;

	/*
	 * Cancels at about the time the shard claims the records from their
	 * slots: each timer either fires or is cancelled, never both, never
	 * neither.
	 */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], f_delay(&rng, F_FAR, 20 * T_MS)), 0);
	t_sleep_ns(F_FAR - 2 * T_MS);
	for (int i = 0; i < N; i++)
		t_cancel(k, &tt, &tm[i]);
	/* Those not cancelled run (later on a stalled machine); then a while for a second run. */
	t_wait_fired(N - t_u64(&tt.cancelled));
	t_sleep_ms(100);
	for (int i = 0; i < N; i++) {
		int runs = t_int(&tm[i].runs), cancels = t_int(&tm[i].cancel_ok);

		ck_assert_int_eq(runs + cancels, 1);
		fired += (uint64_t)runs;
		cancelled += (uint64_t)cancels;
	}
	ck_assert_uint_eq(fired + cancelled, N);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_far_destroy_drains)
{
	enum { N = 2500 };
	static struct t_timer tm[N];
	struct kairos *k = f_create(2);

	/* Still by value at destroy: each is drained once, and told so. */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 3600 * T_SEC + (uint64_t)i * T_MS), 0);
	for (int i = 0; i < N; i += 10)
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_NOTIFY, N - N / 10);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&tm[i].notified), i % 10 ? 1 : 0);
		ck_assert_int_eq(t_int(&tm[i].runs), 0);
	}
	ck_assert_uint_eq(atomic_load(&tt.notified), N - N / 10);
}
END_TEST

struct f_arg {
	struct kairos *k;
	struct t_timer *tm;
	int n;
	int rc;
};

static void *f_arm_and_exit(void *p)
{
	struct f_arg *a = p;

	for (int i = 0; i < a->n && !a->rc; i++)
		a->rc = t_arm(a->k, &tt, &a->tm[i], F_FAR + 10 * T_MS + (uint64_t)i * T_US);
	return NULL;
}

static void f_thread_exit(void)
{
	enum { THREADS = 8, PER = 100 };
	static struct t_timer tm[THREADS][PER];
	struct f_arg a[THREADS];
	pthread_t th[THREADS];
	struct kairos *k = f_create(2);

	/*
	 * Threads that arm far timers and exit at once leave their arrival
	 * blocks half full: their shards still file and fire every timer.
	 */
	for (int i = 0; i < THREADS; i++) {
		a[i] = (struct f_arg){ .k = k, .tm = tm[i], .n = PER };
		ck_assert_int_eq(pthread_create(&th[i], NULL, f_arm_and_exit, &a[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_int_eq(a[i].rc, 0);
	}
	t_wait_fired(THREADS * PER);
	t_check_calls(&tt, T_LATE);
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < PER; j++)
			ck_assert_int_eq(t_int(&tm[i][j].runs), 1);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

START_TEST(test_far_thread_exit)
{
	f_thread_exit();
}
END_TEST

/*
 * quiet_note(), the rule a sweep's wait follows, on a virtual clock: a count
 * that keeps moving ends its wait only at the cap, one that stops ends it
 * exactly @quiet after its last move, never sooner, and the next note after
 * an end begins a new wait.
 */
START_TEST(test_far_sweep_quiet_rule)
{
	enum { QUIET = 100, CAP = 1000 };
	struct quiet q = { 0 };
	uint64_t next = 0, count = 7, now;

	/* Moving every 50: no end before the cap, then an end at it. */
	for (now = 5000; now < 5000 + CAP; now += 50) {
		ck_assert(!quiet_note(&q, count++, now, QUIET, CAP, &next));
		ck_assert_uint_eq(next, now + QUIET < 5000 + CAP ? now + QUIET : 5000 + CAP);
	}
	ck_assert(quiet_note(&q, count++, now, QUIET, CAP, &next));
	ck_assert(!q.waiting);

	/* A new wait: the count stops at once; it ends QUIET later, not one sooner. */
	now = 9000;
	ck_assert(!quiet_note(&q, count, now, QUIET, CAP, &next));
	ck_assert_uint_eq(next, now + QUIET);
	for (uint64_t t = now + 1; t < now + QUIET; t += 7) {
		ck_assert(!quiet_note(&q, count, t, QUIET, CAP, &next));
		ck_assert_uint_eq(next, now + QUIET);
	}
	ck_assert(quiet_note(&q, count, now + QUIET, QUIET, CAP, &next));

	/* Near the cap, the next look is the cap, not the end of the quiet. */
	now = 20000;
	ck_assert(!quiet_note(&q, count++, now, QUIET, CAP, &next));
	ck_assert(!quiet_note(&q, count++, now + CAP - 30, QUIET, CAP, &next));
	ck_assert_uint_eq(next, now + CAP);
	ck_assert(quiet_note(&q, count, now + CAP, QUIET, CAP, &next));
}
END_TEST

static uint64_t f_sweeps(struct shard *s, uint64_t *swept)
{
	*swept = atomic_load_explicit(&s->stats.swept, memory_order_relaxed);
	return atomic_load_explicit(&s->stats.sweeps, memory_order_relaxed);
}

/* Cancels @tm[@from .. @to) from this thread, @pause_us between bundles of 64. */
static void f_cancel_run(struct kairos *k, struct t_timer *tm, int from, int to, unsigned pause_us)
{
	for (int i = from; i < to; i++) {
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), 0);
		if (pause_us && (i - from) % 64 == 63)
			t_sleep_ns((uint64_t)pause_us * T_US);
	}
}

/*
 * Kept cancels (src/table.c, table_keep()) ask for a sweep of the entries
 * they leave stale; the sweep waits for them to pause (src/shard.c,
 * ents_tidy()), yet comes, and drops them: after a burst, within a bound
 * far below this test's wait; and in a steady trickle that never pauses for
 * SWEEP_QUIET_NS, by the cap of SHARD_FLUSH_NS, before the trickle ends.
 */
static void f_sweep_after(bool trickle)
{
	enum { N = 4 * WHEEL_SWEEP_MIN, TRIES = 2 };
	static struct t_timer tm[N];
	struct kairos *k;
	struct shard *s;
	uint64_t sweeps0, swept0, sweeps, swept = 0, t0, ran;
	struct kairos_stats st;

	/*
	 * The sweep falls due half way through the trickle and comes within
	 * about two flushes: a shard stalled for most of the second half (a
	 * loaded machine) misses it.  Such a try is made once more, on a fresh
	 * service.  (A cap that does not work misses unless a trickle happens
	 * to pause for SWEEP_QUIET_NS, when the quiet rule sweeps: one try
	 * more makes that likelier, so only one.)
	 */
	for (int try = 1;; try++) {
		k = f_create(1);
		s = k->shards[0];
		memset(tm, 0, sizeof(tm));
		for (int i = 0; i < N; i++)
			ck_assert_int_eq(t_arm(k, &tt, &tm[i], 3600 * T_SEC), 0);
		t_sleep_ms(200);	/* the block is dormant: the shard sleeps */
		sweeps0 = f_sweeps(s, &swept0);
		t0 = t_mono();
		/* 256 bundles, 0.5 ms or more apart: at least 128 ms, due half way. */
		f_cancel_run(k, tm, 0, N, trickle ? 500 : 0);
		ran = t_mono() - t0;
		sweeps = f_sweeps(s, &swept);
		if (trickle && ran < 4 * SHARD_FLUSH_NS)
			ck_abort_msg("the trickle ran %llu ns, too short to test the cap",
				     (unsigned long long)ran);
		if (!trickle || sweeps > sweeps0)
			break;
		ck_assert_msg(try < TRIES, "no sweep in %llu ns of kept cancels, %d tries",
			      (unsigned long long)ran, TRIES);
		fprintf(stderr, "sweep_in_trickle: no sweep in %llu ns of kept cancels; again\n",
			(unsigned long long)ran);
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		t_setup();	/* the tallies are the next service's */
	}
	/* Whatever is left stale goes once the cancels pause. */
	for (int i = 0; i < 500 && swept - swept0 < N - WHEEL_SWEEP_MIN; i++) {
		t_sleep_ms(10);
		sweeps = f_sweeps(s, &swept);
	}
	ck_assert_uint_gt(sweeps, sweeps0);
	ck_assert_uint_ge(swept - swept0, N - WHEEL_SWEEP_MIN);
	ck_assert_uint_le(swept - swept0, N);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.pending, 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&tm[i].runs), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

START_TEST(test_far_sweep_after_burst)
{
	f_sweep_after(false);
}
END_TEST

START_TEST(test_far_sweep_in_trickle)
{
	f_sweep_after(true);
}
END_TEST

/* The sweeps and the entries they dropped on every shard of @k. */
static uint64_t f_sweeps_all(struct kairos *k, uint64_t *swept)
{
	uint64_t n = 0, one;

	*swept = 0;
	for (unsigned i = 0; i < k->nshards; i++) {
		n += f_sweeps(k->shards[i], &one);
		*swept += one;
	}
	return n;
}

static uint64_t f_kept_all(struct kairos *k)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < k->nshards; i++)
		n += atomic_load(&k->shards[i]->far_kept);
	return n;
}

struct f_range {
	struct kairos *k;
	struct t_timer *tm;
	int from, to;
};

static void *f_cancel_thread(void *arg)
{
	struct f_range *r = arg;

	f_cancel_run(r->k, r->tm, r->from, r->to, 0);
	return NULL;
}

/*
 * A sweep counts the cancels its shard took from its inbox and those that
 * threads kept alike: once together they reach its bound (WHEEL_SWEEP_MIN
 * here, half the entries), it comes, however they split.  Here a thread of
 * the other shard posts half the bound's cancels (taken while the count is
 * short), then the arming thread keeps a few bundles more than the other
 * half: neither kind alone reaches the bound, and the kept ones stay short
 * of WHEEL_SWEEP_MIN.
 */
START_TEST(test_far_sweep_after_posted_and_kept)
{
	enum { N = 2 * WHEEL_SWEEP_MIN, POSTED = WHEEL_SWEEP_MIN / 2,
	       KEPT = WHEEL_SWEEP_MIN / 2 + 4 * BUNDLE_RECS };
	static struct t_timer tm[N];
	struct kairos *k = f_create(2);
	struct f_range other = { k, tm, 0, POSTED };
	uint64_t sweeps0, swept0, sweeps = 0, swept = 0;
	pthread_t th;

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 3600 * T_SEC), 0);
	t_sleep_ms(200);	/* filed, and the block is dormant: the shards sleep */
	sweeps0 = f_sweeps_all(k, &swept0);
	/* A second thread joins the shard with no caller: its cancels are posted. */
	ck_assert_int_eq(pthread_create(&th, NULL, f_cancel_thread, &other), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(f_kept_all(k), 0);
	t_sleep_ms(50);		/* taken: short of the bound, no sweep */
	f_cancel_run(k, tm, POSTED, POSTED + KEPT, 0);
	ck_assert_uint_le(f_kept_all(k), KEPT);
	/* A sweep drops what had gone by then: at least the bound's worth. */
	for (int i = 0; i < 300 && swept - swept0 < WHEEL_SWEEP_MIN; i++) {
		t_sleep_ms(10);
		sweeps = f_sweeps_all(k, &swept);
	}
	ck_assert_msg(sweeps > sweeps0, "no sweep for %d posted and %d kept cancels",
		      (int)POSTED, (int)KEPT);
	ck_assert_uint_ge(swept - swept0, WHEEL_SWEEP_MIN);
	ck_assert_uint_le(swept - swept0, POSTED + KEPT);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_int(&tm[i].runs), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, N - POSTED - KEPT);
}
END_TEST

static void f_quiet_then_arm(void)
{
	static struct t_timer a, b;
	struct kairos *k = f_create(1);

	/*
	 * A thread arms, then keeps quiet until the shard stops looking at its
	 * block; its next far timer must wake the shard, which otherwise has
	 * nothing to wake for, and fire on time.
	 */
	ck_assert_int_eq(t_arm(k, &tt, &a, F_FAR + 5 * T_MS), 0);
	t_wait_fired(1);
	t_sleep_ms(200);
	/* The last passes may come late on a stalled machine. */
	(void)f_quiet(k, 50);
	ck_assert_int_eq(t_arm(k, &tt, &b, F_FAR + 5 * T_MS), 0);
	t_wait_fired(2);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

START_TEST(test_far_quiet_then_arm)
{
	f_quiet_then_arm();
}
END_TEST

static void f_earlier_in_open_block(void)
{
	static struct t_timer a, b;
	struct kairos *k = f_create(1);

	/*
	 * The second entry of a block the shard already knows, due long before
	 * anything the shard waits for: no new block, no wake from the arm,
	 * yet the shard files it in time and it fires.
	 */
	ck_assert_int_eq(t_arm(k, &tt, &a, 3600 * T_SEC), 0);
	t_sleep_ms(5);
	ck_assert_int_eq(t_arm(k, &tt, &b, F_FAR + 5 * T_MS), 0);
	t_wait_fired(1);
	ck_assert_int_eq(t_int(&b.runs), 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_int_eq(t_cancel(k, &tt, &a), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}

START_TEST(test_far_earlier_in_open_block)
{
	f_earlier_in_open_block();
}
END_TEST

/*
 * Where membarrier() is refused, each entry is published with a fence and
 * wakes the shard itself when it must (src/arrival.c): the same promises.
 */
START_TEST(test_far_fenced)
{
	atomic_store(&fault_membarrier, 1);
	f_exact_once();
	t_setup();
	f_thread_exit();
	t_setup();
	f_quiet_then_arm();
	t_setup();
	f_earlier_in_open_block();
}
END_TEST

/* How many blocks are on @s's pool (or, with @all, were ever made for it). */
static unsigned f_blocks(struct shard *s, bool all)
{
	unsigned n = 0;

	if (all)
		for (unsigned i = 0; i < ARRIVAL_DIR; i++) {
			struct arrival **page = atomic_load(&s->arr_dir[i]);

			for (unsigned j = 0; page && j < ARRIVAL_PAGE; j++)
				n += __atomic_load_n(&page[j], __ATOMIC_ACQUIRE) != NULL;
		}
	else
		for (uint32_t no = (uint32_t)atomic_load(&s->arr_pool); no; n++) {
			struct arrival **page = atomic_load(&s->arr_dir[(no - 1) >>
								       ARRIVAL_PAGE_BITS]);
			struct arrival *b = __atomic_load_n(&page[(no - 1) & (ARRIVAL_PAGE - 1)],
							    __ATOMIC_ACQUIRE);

			no = atomic_load(&b->pool_next);
		}
	return n;
}

enum { F_POOL_THREADS = 8 };
static struct t_timer f_pool_t[F_POOL_THREADS][ARRIVAL_N / 2];
static struct t_timer f_pool_b[(F_POOL_THREADS - 1) * ARRIVAL_N], f_pool_a;
static struct kairos *f_pool_k;
static pthread_barrier_t f_pool_armed, f_pool_go;

/* Opens a block of its own with half a block of far timers, then leaves it. */
static void *f_pool_opener(void *arg)
{
	struct t_timer *tm = arg;

	for (unsigned i = 0; i < ARRIVAL_N / 2; i++)
		ck_assert_int_eq(t_arm(f_pool_k, &tt, &tm[i], 3600 * T_SEC), 0);
	pthread_barrier_wait(&f_pool_armed);
	pthread_barrier_wait(&f_pool_go);
	for (unsigned i = 0; i < ARRIVAL_N / 2; i++)
		ck_assert_int_eq(t_cancel(f_pool_k, &tt, &tm[i]), 0);
	return NULL;
}

/* Fills as many blocks as the pool holds. */
static void *f_pool_second(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < (F_POOL_THREADS - 1) * ARRIVAL_N; i++)
		ck_assert_int_eq(t_arm(f_pool_k, &tt, &f_pool_b[i], 3600 * T_SEC), 0);
	for (unsigned i = 0; i < (F_POOL_THREADS - 1) * ARRIVAL_N; i++)
		ck_assert_int_eq(t_cancel(f_pool_k, &tt, &f_pool_b[i]), 0);
	return NULL;
}

START_TEST(test_far_blocks_shared)
{
	struct kairos *k = f_pool_k = f_create(1);
	struct shard *s = k->shards[0];
	pthread_t th[F_POOL_THREADS];
	unsigned made;

	/*
	 * The blocks threads leave go back to their shard's pool for any
	 * thread to open, one at a time: a thread that opens one does not
	 * take the others with it.  8 threads each open a block (none can
	 * reuse another's while all are open; a thread that takes the pool's
	 * last block, or finds none, makes one more for it) and leave it as
	 * they exit; once the shard has pooled all M, this thread opens one,
	 * and M - 1 stay in the pool.  A second thread then fills 7 blocks
	 * and makes none, or one if its seventh was the pool's last.  A
	 * thread that took the pool whole would have left the second thread
	 * to make its own.
	 */
	ck_assert_int_eq(pthread_barrier_init(&f_pool_armed, NULL, F_POOL_THREADS + 1), 0);
	ck_assert_int_eq(pthread_barrier_init(&f_pool_go, NULL, F_POOL_THREADS + 1), 0);
	for (int i = 0; i < F_POOL_THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, f_pool_opener, f_pool_t[i]), 0);
	pthread_barrier_wait(&f_pool_armed);
	made = f_blocks(s, true);
	ck_assert_uint_ge(made, F_POOL_THREADS + 1);
	pthread_barrier_wait(&f_pool_go);
	for (int i = 0; i < F_POOL_THREADS; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 500 && f_blocks(s, false) < made; i++)
		t_sleep_ms(10);
	ck_assert_uint_eq(f_blocks(s, false), made);
	ck_assert_int_eq(t_arm(k, &tt, &f_pool_a, 3600 * T_SEC), 0);
	ck_assert_uint_eq(f_blocks(s, false), made - 1);
	ck_assert_int_eq(pthread_create(&th[0], NULL, f_pool_second, NULL), 0);
	ck_assert_int_eq(pthread_join(th[0], NULL), 0);
	ck_assert_uint_ge(f_blocks(s, true), made);
	ck_assert_uint_le(f_blocks(s, true), made + 1);
	ck_assert_int_eq(t_cancel(k, &tt, &f_pool_a), 0);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(pthread_barrier_destroy(&f_pool_armed), 0);
	ck_assert_int_eq(pthread_barrier_destroy(&f_pool_go), 0);
}
END_TEST

/*
 * A shard that has numbered all the blocks it can (1 Mi, far beyond what a
 * test can make: the count is set by hand) makes no more: once the block
 * it started with is full, far arms post their records instead, fire on
 * time and cancel as any other, and asking again for every arm does not
 * move the count round.
 */
START_TEST(test_far_blocks_exhausted)
{
	enum { N = 3 * ARRIVAL_N };
	static struct t_timer fire[N], stand[N];
	struct kairos *k = f_create(1);
	struct shard *s = k->shards[0];
	uint64_t rng = t_seed(0xb10c);

	atomic_store(&s->arr_made, ARRIVAL_DIR * ARRIVAL_PAGE);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_arm(k, &tt, &fire[i], f_delay(&rng, F_FAR, 5 * T_MS)), 0);
		ck_assert_int_eq(t_arm(k, &tt, &stand[i], 3600 * T_SEC), 0);
	}
	ck_assert_uint_eq(f_blocks(s, true), 1);
	ck_assert_uint_eq(atomic_load(&s->arr_made), ARRIVAL_DIR * ARRIVAL_PAGE);
	t_wait_fired(N);
	t_check_calls(&tt, T_LATE);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&fire[i].runs), 1);
		ck_assert_int_eq(t_cancel(k, &tt, &stand[i]), 0);
	}
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

static struct t_timer f_nb_left;

/* Arms one far timer and exits: the shard's pool then holds a block. */
static void *f_nb_leaver(void *arg)
{
	ck_assert_int_eq(t_arm(arg, &tt, &f_nb_left, 3600 * T_SEC), 0);
	return NULL;
}

/*
 * A block new to a shard that sleeps for seconds, its first entry an hour
 * off and its second due within 50 ms: the shard learns of a block only
 * at its next pass, so the opening must wake it for any entry the block
 * may get, not for the first alone; else the second fires when the shard
 * next wakes (here with the anchor, 8 s on).
 */
START_TEST(test_far_new_block_later_entry_earlier)
{
	static struct t_timer anchor, a, b;
	struct kairos *k = f_create(1);
	struct shard *s = k->shards[0];
	pthread_t th;
	uint64_t now;

	ck_assert_int_eq(pthread_create(&th, NULL, f_nb_leaver, k), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	for (int i = 0; i < 1000 && !f_blocks(s, false); i++)
		t_sleep_ms(1);
	ck_assert_uint_ge(f_blocks(s, false), 1);
	/* Posted (an absolute deadline is never filed by value): the shard sleeps till it. */
	ck_assert_int_eq(kairos_now(k, &now), 0);
	ck_assert_int_eq(t_arm_at(k, &tt, &anchor, now + 8 * T_SEC), 0);
	t_sleep_ms(50);
	ck_assert_int_eq(t_arm(k, &tt, &a, 3600 * T_SEC), 0);
	ck_assert_ptr_nonnull(tls_ts.arr);
	ck_assert_int_eq(t_arm(k, &tt, &b, F_FAR + 5 * T_MS), 0);
	ck_assert_uint_eq(tls_ts.arr_n, 2);
	t_wait_fired(1);
	ck_assert_int_eq(t_int(&b.runs), 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_int_eq(t_cancel(k, &tt, &a), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &anchor), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &f_nb_left), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_far_churn_beside_standing)
{
	enum { STAND = 2000, CHURN = 300, ROUNDS = 50 };
	static struct t_timer stand[STAND], churn[ROUNDS][CHURN];
	struct kairos *k = f_create(1);
	uint64_t rng = t_seed(0xfa7);

	/*
	 * Standing far timers, and beside them, in the same few slots, far
	 * timers armed and cancelled over and over: each cancel leaves a stale
	 * entry, their records come back in new lives, and the slots pass the
	 * size at which they are swept (src/wheel.c).  A sweep tells stale
	 * entries by the lives that ended, without loading a record: it must
	 * never drop one that stands.  Every standing timer and each churned
	 * one's last life fire once, never early; no cancelled life runs.
	 */
	for (int i = 0; i < STAND; i++)
		ck_assert_int_eq(t_arm(k, &tt, &stand[i], f_delay(&rng, 2 * F_FAR, 5 * T_MS)), 0);
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < CHURN; i++) {
			if (r > 0)
				ck_assert_int_eq(t_cancel(k, &tt, &churn[r - 1][i]), 0);
			ck_assert_int_eq(t_arm(k, &tt, &churn[r][i],
					       f_delay(&rng, 2 * F_FAR, 5 * T_MS)), 0);
		}
	t_wait_fired(STAND + CHURN);
	t_check_calls(&tt, T_LATE);
	for (int i = 0; i < STAND; i++)
		ck_assert_int_eq(t_int(&stand[i].runs), 1);
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < CHURN; i++)
			ck_assert_int_eq(t_int(&churn[r][i].runs), r == ROUNDS - 1);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_far_max_timers)
{
	enum { MAX = 1000 };
	static struct t_timer tm[MAX + 10];
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k;
	int ok = 0;

	/* Filed by value or not, max_timers is exact; a cancel gives its place back. */
	c.tick_ns = F_TICK;
	c.max_timers = MAX;
	k = t_create(&c);
	for (int i = 0; i < MAX + 10; i++) {
		int rc = t_arm(k, &tt, &tm[i], 3600 * T_SEC);

		ck_assert(rc == 0 || rc == -EAGAIN);
		ok += rc == 0;
		ck_assert_int_eq(rc, i < MAX ? 0 : -EAGAIN);
	}
	ck_assert_int_eq(ok, MAX);
	ck_assert_int_eq(t_cancel(k, &tt, &tm[0]), 0);
	ck_assert_int_eq(t_arm(k, &tt, &tm[MAX], 3600 * T_SEC), 0);
	ck_assert_int_eq(t_arm(k, &tt, &tm[MAX + 1], 3600 * T_SEC), -EAGAIN);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, MAX);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("far");
	TCase *tc = tcase_create("far");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_far_exact_once);
	tcase_add_test(tc, test_far_reset_later_and_earlier);
	tcase_add_test(tc, test_far_idle_then_cancel);
	tcase_add_test(tc, test_far_cancel_races_its_visit);
	tcase_add_test(tc, test_far_destroy_drains);
	tcase_add_test(tc, test_far_thread_exit);
	tcase_add_test(tc, test_far_max_timers);
	tcase_add_test(tc, test_far_churn_beside_standing);
	tcase_add_test(tc, test_far_quiet_then_arm);
	tcase_add_test(tc, test_far_sweep_quiet_rule);
	tcase_add_test(tc, test_far_sweep_after_burst);
	tcase_add_test(tc, test_far_sweep_in_trickle);
	tcase_add_test(tc, test_far_sweep_after_posted_and_kept);
	tcase_add_test(tc, test_far_earlier_in_open_block);
	tcase_add_test(tc, test_far_new_block_later_entry_earlier);
	tcase_add_test(tc, test_far_fenced);
	tcase_add_test(tc, test_far_blocks_shared);
	tcase_add_test(tc, test_far_blocks_exhausted);
	suite_add_tcase(s, tc);
	return t_main(s, "far");
}
