/* SPDX-License-Identifier: MIT */
/*
 * check_service.c - the timer service through its public API.
 *
 * Every return value of the contract in kairos.h, never-early firing
 * (sub-tick, tick multiples, level boundaries, deadlines in the past),
 * exactly-once ends under cancel/fire races from many threads, stale and
 * foreign ids, reset, periodic timers, destroy in its modes, the threads the
 * service starts, and inline delivery.  meson runs this program twice: with
 * the backend the probe picks and with KAIROS_BACKEND=epoll.
 *
 * Every test that uses a service ends by checking the stats identity against
 * its own tallies (t_check_identity()) once its callbacks are done, or, when
 * it destroys a busy service on purpose, by accounting for every timer from
 * kairos_destroy()'s count.
 *
 * Real clock, shared 2-core machine: lower bounds are strict, upper bounds
 * generous, and nothing asserts speed.  $T_SEED changes the random seeds.
 */
#include <limits.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "t_util.h"

/*
 * Under ASan (its quarantine keeps freed memory resident) and TSan (shadow
 * memory) resident size says nothing about the library's own memory.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define T_SANITIZED 1
#endif
#endif
#ifndef T_SANITIZED
#define T_SANITIZED 0
#endif

/* The generous bound on lateness: a loaded 2-core machine, maybe under ASan. */
#define T_LATE	(1500 * T_MS)
/* How long a test waits for callbacks that should come within milliseconds. */
#define T_WAIT_MS	5000

/* The tallies of the test running now (each test runs in its own child). */
static struct t_tally tt;
static pthread_t t_main_thread;

static void t_setup(void)
{
	memset(&tt, 0, sizeof(tt));
	tt.clock = CLOCK_MONOTONIC;
	t_main_thread = pthread_self();
}

static unsigned t_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		n = 1;
	return n > 256 ? 256 : (unsigned)n;
}

static struct kairos_config t_cfg(unsigned shards, unsigned workers)
{
	struct kairos_config c;

	kairos_config_default(&c);
	c.shards = shards;
	c.workers = workers;
	return c;
}

static struct kairos *t_create(const struct kairos_config *cfg)
{
	struct kairos *k = NULL;
	int rc = kairos_create(cfg, &k);

	ck_assert_msg(rc == 0, "kairos_create: %d (%s)", rc, strerror(-rc));
	ck_assert_ptr_nonnull(k);
	t_keep(k);
	return k;
}

static void t_destroy(struct kairos *k, int how, int want)
{
	int rc = kairos_destroy(k, how);

	ck_assert_msg(rc == want, "kairos_destroy: %d, want %d", rc, want);
}

static uint64_t t_pending(struct kairos *k)
{
	struct kairos_stats s;

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	return s.pending;
}

/* Waits for the one-shot timers of the tally to have fired @n callbacks. */
static void t_wait_fired(uint64_t n)
{
	uint64_t got = t_wait_u64(&tt.fired, n, T_WAIT_MS);

	ck_assert_msg(got == n, "%" PRIu64 " of %" PRIu64 " callbacks ran", got, n);
}

/* A callback for calls that must fail: it must never run. */
static void t_cb_never(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
	atomic_fetch_add(&tt.bad, 1);
}

/* Resident set size in bytes. */
static uint64_t t_rss(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	unsigned long size = 0, res = 0;

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &res), 2);
	fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * A callback that blocks: the first call sets @started, then sleeps @hold_ns
 * or, with a @hold_ns of 0, waits for @release; it sets @done as the last
 * thing before returning, so a caller that was promised "the callback has
 * returned" must see @done set.
 */
struct t_block {
	struct t_tally *ta;
	int periodic;
	uint64_t hold_ns;
	atomic_int started;
	atomic_int release;
	atomic_int done;
	atomic_int calls;		/* calls with status > 0 */
	atomic_int notified;		/* calls with -ECANCELED */
	atomic_int notified_after_done;	/* ... that came after @done was set */
	atomic_int notified_off_main;	/* ... that came on another thread */
	atomic_int last_status;
};

static void t_cb_block(void *arg, kairos_id id, int status)
{
	struct t_block *b = arg;
	int calls;

	(void)id;
	if (status == -ECANCELED) {
		if (t_int(&b->done))
			atomic_fetch_add(&b->notified_after_done, 1);
		if (!pthread_equal(pthread_self(), t_main_thread))
			atomic_fetch_add(&b->notified_off_main, 1);
		atomic_fetch_add(&b->notified, 1);
		atomic_fetch_add(&b->ta->notified, 1);
		return;
	}
	if (status <= 0)
		atomic_fetch_add(&b->ta->bad, 1);
	atomic_store(&b->last_status, status);
	atomic_fetch_add(b->periodic ? &b->ta->periodic_runs : &b->ta->fired, 1);
	calls = atomic_fetch_add(&b->calls, 1) + 1;
	if (calls != 1)
		return;
	atomic_store(&b->started, 1);
	if (b->hold_ns) {
		t_sleep_ns(b->hold_ns);
	} else {
		uint64_t end = t_mono() + 20 * T_SEC;

		while (!t_int(&b->release) && t_mono() < end)
			t_sleep_ns(100 * T_US);
	}
	atomic_store(&b->done, 1);
}

static void t_block_init(struct t_block *b, int periodic, uint64_t hold_ns)
{
	memset(b, 0, sizeof(*b));
	b->ta = &tt;
	b->periodic = periodic;
	b->hold_ns = hold_ns;
}

static kairos_id t_block_arm(struct kairos *k, struct t_block *b, uint64_t delay_ns)
{
	kairos_id id = 0;
	int rc;

	if (b->periodic)
		rc = kairos_arm_every(k, delay_ns, t_cb_block, b, &id);
	else
		rc = kairos_arm(k, delay_ns, t_cb_block, b, &id);
	ck_assert_int_eq(rc, 0);
	ck_assert(id != 0);
	atomic_fetch_add(&tt.armed, 1);
	return id;
}

static void t_block_wait_started(struct t_block *b)
{
	ck_assert_msg(t_wait_int(&b->started, 1, T_WAIT_MS) == 1,
		      "the blocking callback never started");
}

/* ------------------------------------------------------------------ */
/* Configuration and creation                                          */

START_TEST(test_service_config_default)
{
	struct kairos_config c;
	struct kairos_stats s;
	struct kairos *k;

	memset(&c, 0xa5, sizeof(c));
	kairos_config_default(&c);
	/* The defaults may be spelled as 0 ("pick") or as the value picked. */
	ck_assert(c.shards == 0 || c.shards == t_ncpu());
	ck_assert(c.workers == 0 || c.workers == 2);
	ck_assert(c.tick_ns == 0 || c.tick_ns == T_MS);
	ck_assert_int_eq(c.clock, CLOCK_MONOTONIC);
	ck_assert(c.max_timers == 0);
	ck_assert_int_eq(c.pin_cpus, 0);
	ck_assert_int_eq(c.delivery, KAIROS_DELIVER_WORKERS);
	ck_assert_int_eq(c.backend, KAIROS_BACKEND_AUTO);
	ck_assert(c.ring_entries == 0 || c.ring_entries == 8);

	k = t_create(&c);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.shards, t_ncpu());
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_create_null_cfg)
{
	struct kairos_config c;
	struct kairos_stats s;
	struct t_timer t;
	struct kairos *k;

	/* A NULL @out is refused whatever the configuration. */
	ck_assert_int_eq(kairos_create(NULL, NULL), -EINVAL);
	kairos_config_default(&c);
	ck_assert_int_eq(kairos_create(&c, NULL), -EINVAL);

	k = t_create(NULL);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.shards, t_ncpu());
	ck_assert_int_eq(t_arm(k, &tt, &t, T_MS), 0);
	ck_assert(t.id != 0);
	t_wait_fired(1);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_create_bad_cfg)
{
	int base = t_thread_baseline();
	struct kairos_config c;
	struct kairos *k = NULL;

	/* The tick must be at least 1 us. */
	c = t_cfg(1, 1);
	c.tick_ns = 999;
	ck_assert_int_eq(kairos_create(&c, &k), -EINVAL);
	/* Only CLOCK_MONOTONIC and CLOCK_BOOTTIME are service clocks. */
	c = t_cfg(1, 1);
	c.clock = CLOCK_PROCESS_CPUTIME_ID;
	ck_assert_int_eq(kairos_create(&c, &k), -EINVAL);
	c = t_cfg(1, 1);
	c.delivery = (enum kairos_delivery)7;
	ck_assert_int_eq(kairos_create(&c, &k), -EINVAL);
	c = t_cfg(1, 1);
	c.backend = (enum kairos_backend)7;
	ck_assert_int_eq(kairos_create(&c, &k), -EINVAL);
	/* A failed create leaves no thread behind. */
	ck_assert_int_eq(t_wait_threads(base, 2000), base);

	/* The smallest tick allowed works. */
	c = t_cfg(1, 1);
	c.tick_ns = T_US;
	k = t_create(&c);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(t_wait_threads(base, 2000), base);
}
END_TEST

/*
 * A zero-filled config is valid and every 0 means its default: designated
 * initialisers are how C users write configs.  clock 0 is CLOCK_REALTIME's
 * number, and it means CLOCK_MONOTONIC: the service must not run on the
 * wall clock, which jumps.
 */
START_TEST(test_service_create_zero_config)
{
	struct kairos_config c;
	struct kairos_stats st;
	struct t_timer t;
	struct kairos *k = NULL;
	uint64_t before, now, after;
	int rc;

	memset(&c, 0, sizeof(c));
	rc = kairos_create(&c, &k);
	ck_assert_msg(rc == 0, "zero-filled config: kairos_create returned %d", rc);
	t_keep(k);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.shards, t_ncpu() > 256 ? 256 : t_ncpu());
	before = t_ns(CLOCK_MONOTONIC);
	ck_assert_int_eq(kairos_now(k, &now), 0);
	after = t_ns(CLOCK_MONOTONIC);
	/* Monotonic time since boot is nowhere near the wall clock's ~1.7e18 ns. */
	ck_assert_msg(before <= now && now <= after, "kairos_now %" PRIu64 " outside the"
		      " CLOCK_MONOTONIC reads %" PRIu64 "..%" PRIu64, now, before, after);
	ck_assert_int_eq(t_arm(k, &tt, &t, 2 * T_MS), 0);
	ck_assert_int_eq(t_wait_int(&t.runs, 1, T_WAIT_MS), 1);
	t_check_identity(k, &tt);
	t_check_calls(&tt, T_LATE);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Argument errors, overflow, use after destroy                        */

START_TEST(test_service_einval)
{
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k = t_create(&c);
	struct kairos_stats s;
	const char *name, *why;
	uint64_t now = t_now(k);
	kairos_id id = 0;
	struct t_timer t;

	ck_assert_int_eq(kairos_arm(NULL, T_MS, t_cb_never, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm(k, T_MS, NULL, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_at(NULL, now, t_cb_never, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_at(k, now, NULL, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_every(NULL, T_MS, t_cb_never, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, NULL, NULL, &id), -EINVAL);
	ck_assert_int_eq(kairos_arm_every(k, 0, t_cb_never, NULL, &id), -EINVAL);

	ck_assert_int_eq(kairos_cancel(NULL, 1), -EINVAL);
	ck_assert_int_eq(kairos_cancel(k, 0), -EINVAL);
	ck_assert_int_eq(kairos_cancel_sync(NULL, 1), -EINVAL);
	ck_assert_int_eq(kairos_cancel_sync(k, 0), -EINVAL);
	ck_assert_int_eq(kairos_reset(NULL, 1, T_MS), -EINVAL);
	ck_assert_int_eq(kairos_reset(k, 0, T_MS), -EINVAL);

	ck_assert_int_eq(kairos_now(NULL, &now), -EINVAL);
	ck_assert_int_eq(kairos_now(k, NULL), -EINVAL);
	ck_assert_int_eq(kairos_stats(NULL, &s), -EINVAL);
	ck_assert_int_eq(kairos_stats(k, NULL), -EINVAL);

	ck_assert_int_eq(kairos_backend_info(NULL, 0, &name, &why), -EINVAL);
	ck_assert_int_eq(kairos_backend_info(k, 2, &name, &why), -EINVAL);
	ck_assert_int_eq(kairos_backend_info(k, UINT_MAX, &name, &why), -EINVAL);

	ck_assert_int_eq(kairos_destroy(NULL, KAIROS_DRAIN_DROP), -EINVAL);
	ck_assert_int_eq(kairos_destroy(k, 2), -EINVAL);
	ck_assert_int_eq(kairos_destroy(k, -1), -EINVAL);

	/* A refused destroy left the service running: it still fires. */
	ck_assert_int_eq(t_arm(k, &tt, &t, T_MS), 0);
	t_wait_fired(1);
	/* ... and no failed call ran its callback (t_cb_never counts "bad"). */
	t_sleep_ms(20);
	t_check_calls(&tt, T_LATE);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.armed, 1);
	ck_assert_uint_eq(s.rejected, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_arm_null_out)
{
	struct kairos *k = t_create(NULL);
	struct t_timer t1, t2;

	/* @out may be NULL: the timer is armed all the same. */
	t_timer_init(&t1, &tt, t_now(k) + 2 * T_MS, 0);
	ck_assert_int_eq(kairos_arm(k, 2 * T_MS, t_cb, &t1, NULL), 0);
	tt.armed++;
	t_timer_init(&t2, &tt, t_now(k) + T_MS, 0);
	ck_assert_int_eq(kairos_arm_at(k, t2.base, t_cb, &t2, NULL), 0);
	tt.armed++;
	t_wait_fired(2);
	ck_assert(t_u64(&t1.cb_id) != 0);
	ck_assert(t_u64(&t2.cb_id) != 0);
	ck_assert(t_u64(&t1.cb_id) != t_u64(&t2.cb_id));
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_overflow)
{
	struct kairos *k = t_create(NULL);
	struct t_timer far, far_at, far_every, top;
	kairos_id id = 0;
	uint64_t now = t_now(k);
	int rc;

	/* now + delay past 2^64 ns, for every arm that takes a delay. */
	ck_assert_int_eq(kairos_arm(k, UINT64_MAX, t_cb_never, NULL, &id), -EOVERFLOW);
	ck_assert_int_eq(kairos_arm(k, UINT64_MAX - now + 1, t_cb_never, NULL, &id), -EOVERFLOW);
	ck_assert_int_eq(kairos_arm_every(k, UINT64_MAX, t_cb_never, NULL, &id), -EOVERFLOW);
	ck_assert_int_eq(kairos_arm_every(k, UINT64_MAX - now + 1, t_cb_never, NULL, &id),
			 -EOVERFLOW);

	/* Far but representable: accepted, and never fires early. */
	ck_assert_int_eq(t_arm(k, &tt, &far, UINT64_MAX / 4), 0);
	ck_assert_int_eq(kairos_reset(k, far.id, UINT64_MAX), -EOVERFLOW);
	ck_assert_int_eq(kairos_reset(k, far.id, UINT64_MAX - now + 1), -EOVERFLOW);
	/* A refused reset left the timer pending. */
	ck_assert_int_eq(kairos_reset(k, far.id, UINT64_MAX / 8), 0);
	ck_assert_int_eq(t_arm_at(k, &tt, &far_at, now + 3650ull * 86400 * T_SEC), 0);
	ck_assert_int_eq(t_arm_every(k, &tt, &far_every, UINT64_MAX / 4), 0);
	ck_assert_uint_eq(t_pending(k), 3);

	/*
	 * An absolute deadline cannot overflow now + delay; whether the top of
	 * the range is accepted (as a far deadline) or refused for rounding up
	 * to a tick, it must not fire and must not break the service.
	 */
	rc = t_arm_at(k, &tt, &top, UINT64_MAX);
	ck_assert_msg(rc == 0 || rc == -EOVERFLOW, "arm_at(UINT64_MAX): %d", rc);
	t_sleep_ms(30);

	ck_assert_int_eq(t_cancel(k, &tt, &far), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &far_at), 0);
	ck_assert_int_eq(t_cancel(k, &tt, &far_every), 0);
	if (rc == 0)
		ck_assert_int_eq(t_cancel(k, &tt, &top), 0);
	ck_assert_int_eq(far.runs + far_at.runs + far_every.runs + top.runs, 0);
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	ck_assert_uint_eq(t_pending(k), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_eshutdown)
{
	struct kairos *k = t_create(NULL);
	struct kairos_stats s;
	const char *name, *why;
	struct t_timer t;
	kairos_id id = 0;
	uint64_t now;

	ck_assert_int_eq(t_arm(k, &tt, &t, 10 * T_SEC), 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 1);

	/* Every function, this one included, now answers -ESHUTDOWN... */
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), -ESHUTDOWN);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_NOTIFY), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm(k, T_MS, t_cb_never, NULL, &id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_at(k, 1, t_cb_never, NULL, &id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, t_cb_never, NULL, &id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_cancel(k, t.id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_cancel_sync(k, t.id), -ESHUTDOWN);
	ck_assert_int_eq(kairos_reset(k, t.id, T_MS), -ESHUTDOWN);
	ck_assert_int_eq(kairos_now(k, &now), -ESHUTDOWN);
	ck_assert_int_eq(kairos_backend_info(k, 0, &name, &why), -ESHUTDOWN);
	/* But for the final counters: the one pending timer was drained. */
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.pending, 0);
	ck_assert_uint_eq(s.drained, 1);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), -ESHUTDOWN);

	/* The dropped timer never ran, and nothing that failed ran. */
	t_sleep_ms(20);
	ck_assert_int_eq(t.runs + t.notified, 0);
	t_check_calls(&tt, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The clock                                                           */

START_TEST(test_service_now_monotonic)
{
	struct kairos *k = t_create(NULL);
	uint64_t prev = 0;

	for (int i = 0; i < 20000; i++) {
		uint64_t a = t_mono(), now = 0, b;

		ck_assert_int_eq(kairos_now(k, &now), 0);
		b = t_mono();
		/* It is CLOCK_MONOTONIC, read between our two reads. */
		ck_assert_msg(a <= now && now <= b,
			      "now %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]",
			      now, a, b);
		ck_assert(now >= prev);
		prev = now;
	}
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_clock_boottime)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer tm[200];
	uint64_t seed = t_seed(11);
	struct kairos *k;

	c.clock = CLOCK_BOOTTIME;
	tt.clock = CLOCK_BOOTTIME;
	k = t_create(&c);
	for (int i = 0; i < 1000; i++) {
		uint64_t a = t_ns(CLOCK_BOOTTIME), now = 0, b;

		ck_assert_int_eq(kairos_now(k, &now), 0);
		b = t_ns(CLOCK_BOOTTIME);
		ck_assert(a <= now && now <= b);
	}
	/* Deadlines and the callbacks' reads are both CLOCK_BOOTTIME. */
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 20 * T_MS)), 0);
	t_wait_fired(200);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The pending cap                                                     */

START_TEST(test_service_max_timers)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer tm[8], extra[2], quick;
	struct kairos_stats s;
	kairos_id id = 0;
	struct kairos *k;

	c.max_timers = 8;
	k = t_create(&c);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm_at(k, &tt, &tm[6], t_now(k) + 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm_every(k, &tt, &tm[7], 10 * T_SEC), 0);

	/* Full: every kind of arm is refused, and each refusal is counted. */
	ck_assert_int_eq(kairos_arm(k, T_MS, t_cb_never, NULL, &id), -EAGAIN);
	ck_assert_int_eq(kairos_arm_at(k, 1, t_cb_never, NULL, &id), -EAGAIN);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, t_cb_never, NULL, &id), -EAGAIN);
	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.rejected, 3);
	ck_assert_uint_eq(s.pending, 8);

	/* A cancel frees a place. */
	ck_assert_int_eq(t_cancel(k, &tt, &tm[0]), 0);
	ck_assert_int_eq(t_arm(k, &tt, &extra[0], 10 * T_SEC), 0);
	ck_assert_int_eq(kairos_arm(k, T_MS, t_cb_never, NULL, &id), -EAGAIN);

	/* So does a timer that fires. */
	ck_assert_int_eq(t_cancel(k, &tt, &tm[1]), 0);
	ck_assert_int_eq(t_arm(k, &tt, &quick, T_MS), 0);
	ck_assert_int_eq(kairos_arm(k, T_MS, t_cb_never, NULL, &id), -EAGAIN);
	t_wait_fired(1);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.pending, 7);
	ck_assert_int_eq(t_arm(k, &tt, &extra[1], 10 * T_SEC), 0);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, t_cb_never, NULL, &id), -EAGAIN);
	/* A refused reset or cancel does not count as a rejected arm. */
	ck_assert_int_eq(kairos_reset(k, extra[1].id, 20 * T_SEC), 0);

	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.rejected, 6);
	ck_assert_uint_eq(s.pending, 8);
	t_check_calls(&tt, T_LATE);
	t_destroy(k, KAIROS_DRAIN_DROP, 8);
}
END_TEST

#define CAP_MAX		1000
#define CAP_THREADS	4
#define CAP_TRIES	600

struct t_cap {
	struct kairos *k;
	struct t_timer *tm;
	int idx;
	int ok;
	int again;
	int other;
};

static void *t_cap_thread(void *arg)
{
	struct t_cap *c = arg;

	for (int i = 0; i < CAP_TRIES; i++) {
		struct t_timer *t = &c->tm[c->idx * CAP_TRIES + i];
		int rc;

		switch (i % 3) {
		case 0:
			rc = t_arm(c->k, &tt, t, 10 * T_SEC);
			break;
		case 1:
			rc = t_arm_at(c->k, &tt, t, t_now(c->k) + 10 * T_SEC);
			break;
		default:
			rc = t_arm_every(c->k, &tt, t, 10 * T_SEC);
			break;
		}
		if (rc == 0)
			c->ok++;
		else if (rc == -EAGAIN)
			c->again++;
		else
			c->other++;
	}
	return NULL;
}

START_TEST(test_service_max_timers_concurrent)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_cap caps[CAP_THREADS];
	pthread_t th[CAP_THREADS];
	struct t_timer *tm = calloc(CAP_THREADS * CAP_TRIES, sizeof(*tm));
	struct kairos_stats s;
	struct kairos *k;
	int ok = 0, again = 0;

	ck_assert_ptr_nonnull(tm);
	c.max_timers = CAP_MAX;
	k = t_create(&c);
	for (int i = 0; i < CAP_THREADS; i++) {
		caps[i] = (struct t_cap){ .k = k, .tm = tm, .idx = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_cap_thread, &caps[i]), 0);
	}
	for (int i = 0; i < CAP_THREADS; i++) {
		pthread_join(th[i], NULL);
		ok += caps[i].ok;
		again += caps[i].again;
		ck_assert_int_eq(caps[i].other, 0);
	}
	/* Nothing ends meanwhile, so exactly the cap gets in, no more, no less. */
	ck_assert_int_eq(ok, CAP_MAX);
	ck_assert_int_eq(again, CAP_THREADS * CAP_TRIES - CAP_MAX);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.pending, CAP_MAX);
	ck_assert_uint_eq(s.rejected, (uint64_t)again);
	t_destroy(k, KAIROS_DRAIN_DROP, CAP_MAX);
	free(tm);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Never early                                                         */

START_TEST(test_service_never_early_random)
{
	enum { N = 3000 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(1);

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N; i++) {
		uint64_t delay = t_rand_below(&seed, 30 * T_MS + 1);

		if (i % 3 == 0)
			ck_assert_int_eq(t_arm_at(k, &tt, &tm[i], t_now(k) + delay), 0);
		else
			ck_assert_int_eq(t_arm(k, &tt, &tm[i], delay), 0);
		if (i % 500 == 499)
			t_sleep_ms(1);
	}
	t_wait_fired(N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(tm[i].runs, 1);
		ck_assert(t_u64(&tm[i].cb_id) == tm[i].id);
	}
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

/*
 * kairos_arm_slack: never before the deadline, never much past the end of
 * the slack window, exactly once; a reset keeps the slack and the bound.
 */
START_TEST(test_service_arm_slack)
{
	enum { N = 2000 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t *slack = calloc(N, sizeof(*slack));
	uint64_t seed = t_seed(11);
	struct t_timer moved;
	uint64_t before;

	ck_assert_ptr_nonnull(tm);
	ck_assert_ptr_nonnull(slack);
	for (int i = 0; i < N; i++) {
		uint64_t delay = 5 * T_MS + t_rand_below(&seed, 55 * T_MS);

		slack[i] = delay / 4;
		before = t_now(k);
		t_timer_init(&tm[i], &tt, before + delay, 0);
		tm[i].deadline = before + delay;
		ck_assert_int_eq(kairos_arm_slack(k, delay, slack[i], t_cb, &tm[i], &tm[i].id), 0);
		atomic_fetch_add(&tt.armed, 1);
	}
	/* A slack timer pushed later fires no earlier than its new deadline. */
	before = t_now(k);
	t_timer_init(&moved, &tt, 0, 0);
	ck_assert_int_eq(kairos_arm_slack(k, 10 * T_MS, 20 * T_MS, t_cb, &moved, &moved.id), 0);
	atomic_fetch_add(&tt.armed, 1);
	ck_assert_int_eq(kairos_reset(k, moved.id, 80 * T_MS), 0);
	ck_assert_int_eq(kairos_arm_slack(NULL, T_MS, T_MS, t_cb, &moved, NULL), -EINVAL);
	ck_assert_int_eq(kairos_arm_slack(k, T_MS, T_MS, NULL, &moved, NULL), -EINVAL);
	ck_assert_int_eq(kairos_arm_slack(k, UINT64_MAX, 0, t_cb, &moved, NULL), -EOVERFLOW);
	t_wait_fired(N + 1);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(tm[i].runs, 1);
		ck_assert_uint_le(t_u64(&tm[i].first_ns), tm[i].deadline + slack[i] + T_LATE);
	}
	ck_assert_uint_ge(t_u64(&moved.first_ns), before + 80 * T_MS);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(slack);
	free(tm);
}
END_TEST

/*
 * Delays on and around tick multiples and wheel level boundaries (64 and
 * 4096 ticks) for the tick @tick_ns, each armed relative (arm) and absolute
 * (arm_at on a multiple of the tick, and 1 ns either side of it).
 */
static void t_never_early_ticks(uint64_t tick_ns, const unsigned *ticks, int nticks)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer *tm = calloc((size_t)nticks * 6 + 16, sizeof(*tm));
	static const uint64_t tiny[] = { 0, 1, 2, 999, 1000, 999999, 999000 };
	struct kairos *k;
	int n = 0;

	ck_assert_ptr_nonnull(tm);
	c.tick_ns = tick_ns;
	k = t_create(&c);
	for (unsigned i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[n++], tiny[i]), 0);
	for (int i = 0; i < nticks; i++) {
		uint64_t d = (uint64_t)ticks[i] * tick_ns;
		uint64_t now = t_now(k);
		uint64_t grid = (now / tick_ns + ticks[i]) * tick_ns;

		ck_assert_int_eq(t_arm(k, &tt, &tm[n++], d - 1), 0);
		ck_assert_int_eq(t_arm(k, &tt, &tm[n++], d), 0);
		ck_assert_int_eq(t_arm(k, &tt, &tm[n++], d + 1), 0);
		ck_assert_int_eq(t_arm_at(k, &tt, &tm[n++], grid - 1), 0);
		ck_assert_int_eq(t_arm_at(k, &tt, &tm[n++], grid), 0);
		ck_assert_int_eq(t_arm_at(k, &tt, &tm[n++], grid + 1), 0);
	}
	t_wait_fired((uint64_t)n);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}

START_TEST(test_service_never_early_ticks_1ms)
{
	static const unsigned ticks[] = { 1, 2, 3, 7, 63, 64, 65, 127, 128, 129 };

	t_never_early_ticks(T_MS, ticks, sizeof(ticks) / sizeof(ticks[0]));
}
END_TEST

START_TEST(test_service_never_early_ticks_100us)
{
	/* With a 100 us tick the second level boundary (4096 ticks) is 410 ms. */
	static const unsigned ticks[] = { 1, 2, 10, 63, 64, 65, 128, 4095, 4096, 4097 };

	t_never_early_ticks(100 * T_US, ticks, sizeof(ticks) / sizeof(ticks[0]));
}
END_TEST

START_TEST(test_service_never_early_ticks_1us)
{
	static const unsigned ticks[] = { 1, 2, 63, 64, 65, 4095, 4096, 4097, 20000 };

	t_never_early_ticks(T_US, ticks, sizeof(ticks) / sizeof(ticks[0]));
}
END_TEST

START_TEST(test_service_arm_at_past)
{
	struct kairos *k = t_create(NULL);
	struct t_timer tm[6];
	uint64_t now = t_now(k);
	uint64_t deadlines[6] = { 0, 1, now - T_SEC, now - 1, now, now + 1 };

	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(t_arm_at(k, &tt, &tm[i], deadlines[i]), 0);
	t_wait_fired(6);
	/* "Fires at once": within a generous bound of arming. */
	for (int i = 0; i < 6; i++)
		ck_assert_msg(t_u64(&tm[i].first_ns) - now < 1000 * T_MS,
			      "past deadline %d fired %" PRIu64 " ns after arming", i,
			      t_u64(&tm[i].first_ns) - now);
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Cancel                                                              */

START_TEST(test_service_cancel_before_fire)
{
	enum { N = 200 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];
	uint64_t seed = t_seed(2);

	for (int i = 0; i < N; i++) {
		uint64_t d = 20 * T_MS + t_rand_below(&seed, 20 * T_MS);

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
	t_sleep_ms(80);
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
 * has piled up, instead of holding the records until then.
 */
START_TEST(test_service_cancel_wakes_idle_shard)
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
		ck_assert_int_eq(t_arm(k, &tt, &t[i], 3600 * T_SEC), 0);
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

START_TEST(test_service_cancel_after_fire)
{
	enum { N = 20 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], T_MS), 0);
	t_wait_fired(N);
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

START_TEST(test_service_cancel_while_running)
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

START_TEST(test_service_cancel_sync_waits)
{
	struct kairos *k = t_create(NULL);
	struct t_sync_waiter w;
	struct t_block b;
	pthread_t th;
	kairos_id id;
	int rc;

	t_block_init(&b, 0, 150 * T_MS);
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

START_TEST(test_service_cancel_sync_waits_periodic)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;
	kairos_id id;
	int calls;

	t_block_init(&b, 1, 150 * T_MS);
	id = t_block_arm(k, &b, 5 * T_MS);
	t_block_wait_started(&b);
	ck_assert_int_eq(kairos_cancel_sync(k, id), -EBUSY);
	ck_assert_int_eq(t_int(&b.done), 1);
	/* A periodic timer stopped while running is a cancelled timer. */
	atomic_fetch_add(&tt.cancelled, 1);
	calls = t_int(&b.calls);
	ck_assert_int_eq(calls, 1);
	/* It missed ~30 periods while blocked; none of them may run now. */
	t_sleep_ms(40);
	ck_assert_int_eq(t_int(&b.calls), calls);
	ck_assert_int_eq(kairos_cancel(k, id), -ENOENT);
	ck_assert_int_eq(kairos_reset(k, id, T_MS), -ENOENT);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_cancel_periodic_while_running)
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

/* What a callback did to its own timer and service. */
struct t_self {
	struct t_timer t;	/* first: t_cb's argument */
	struct kairos *k;
	int rc_sync;
	int rc_cancel;
	int rc_reset;
	int rc_destroy_drop;
	int rc_destroy_notify;
	atomic_int done;
};

static void t_cb_self_sync(void *arg, kairos_id id, int status)
{
	struct t_self *s = arg;

	t_cb(arg, id, status);
	if (status <= 0 || t_int(&s->t.runs) != 1)
		return;
	s->rc_reset = kairos_reset(s->k, id, T_MS);
	s->rc_sync = kairos_cancel_sync(s->k, id);
	s->rc_cancel = kairos_cancel(s->k, id);
	s->rc_destroy_drop = kairos_destroy(s->k, KAIROS_DRAIN_DROP);
	s->rc_destroy_notify = kairos_destroy(s->k, KAIROS_DRAIN_NOTIFY);
	atomic_store(&s->done, 1);
}

static void t_cb_self_cancel(void *arg, kairos_id id, int status)
{
	struct t_self *s = arg;

	t_cb(arg, id, status);
	if (status <= 0 || t_int(&s->t.runs) != 1)
		return;
	s->rc_cancel = kairos_cancel(s->k, id);
	atomic_store(&s->done, 1);
}

START_TEST(test_service_cancel_sync_own_oneshot)
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
	t_sleep_ms(10);
	ck_assert_int_eq(s.t.runs, 1);
	ck_assert_int_eq(kairos_cancel(k, s.t.id), -ENOENT);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_cancel_sync_own_periodic)
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

START_TEST(test_service_destroy_from_callback)
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

START_TEST(test_service_cancel_fire_storm)
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

START_TEST(test_service_stale_ids)
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
		for (int i = 0; i < FIRED; i++)
			old[n++] = fired[i].id;
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

START_TEST(test_service_foreign_ids)
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
/* Reset                                                               */

START_TEST(test_service_reset_later)
{
	enum { N = 200 };
	struct kairos *k = t_create(NULL);
	struct t_timer tm[N];
	uint64_t seed = t_seed(3), want[N];
	int rc[N], moved = 0;

	for (int i = 0; i < N; i++) {
		uint64_t d = 30 * T_MS + t_rand_below(&seed, 10 * T_MS);

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
			uint64_t d = 45 * T_MS + (uint64_t)round * 10 * T_MS +
				     t_rand_below(&seed, 10 * T_MS);
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
START_TEST(test_service_reset_at)
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

START_TEST(test_service_reset_earlier)
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

START_TEST(test_service_reset_random)
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

START_TEST(test_service_reset_after_end)
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

START_TEST(test_service_reset_in_own_callback)
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

START_TEST(test_service_reset_periodic)
{
	struct kairos *k = t_create(NULL);
	uint64_t before, t0;
	struct t_timer p;

	ck_assert_int_eq(t_arm_every_fn(k, &tt, &p, 200 * T_MS, t_cb, false), 0);
	t0 = p.deadline - 200 * T_MS;
	before = t_now(k);
	ck_assert_int_eq(kairos_reset(k, p.id, 5 * T_MS), 0);
	ck_assert_int_ge(t_wait_int(&p.runs, 2, T_WAIT_MS), 2);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	/* The new deadline is the next run... */
	ck_assert(t_u64(&p.at[0]) >= before + 5 * T_MS);
	ck_assert_msg(t_u64(&p.at[0]) < t0 + 200 * T_MS,
		      "the first run waited for the old deadline");
	/* ... and the period continues from there. */
	ck_assert(t_u64(&p.at[1]) >= before + 205 * T_MS);
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_reset_storm)
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

/* ------------------------------------------------------------------ */
/* Periodic timers                                                     */

START_TEST(test_service_periodic_count)
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

START_TEST(test_service_periodic_no_drift)
{
	const uint64_t period = 2 * T_MS;
	struct kairos *k = t_create(NULL);
	uint64_t after, last, due;
	struct t_timer p;
	int covered;

	ck_assert_int_eq(t_arm_every(k, &tt, &p, period), 0);
	after = t_now(k);
	t_sleep_ms(400);
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

START_TEST(test_service_periodic_missed)
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
/* Slow callbacks                                                      */

struct t_witness {
	struct t_timer t;	/* first: t_cb's argument */
	struct t_block *blocker;
	atomic_int saw_done;	/* the blocker had returned when this one started */
};

static void t_cb_witness(void *arg, kairos_id id, int status)
{
	struct t_witness *w = arg;

	if (status > 0 && t_int(&w->blocker->done))
		atomic_store(&w->saw_done, 1);
	t_cb(arg, id, status);
}

START_TEST(test_service_blocking_callback)
{
	enum { N = 8 };
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k = t_create(&c);
	struct t_witness w[N];
	struct t_block b;

	t_block_init(&b, 0, 300 * T_MS);
	t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	/*
	 * Due 20 ms later, on this shard or the other: each must run on a free
	 * worker while the blocker still holds its own.
	 */
	for (int i = 0; i < N; i++) {
		w[i].blocker = &b;
		atomic_init(&w[i].saw_done, 0);
		ck_assert_int_eq(t_arm_fn(k, &tt, &w[i].t, 20 * T_MS, t_cb_witness, true), 0);
	}
	t_wait_fired(N + 1);
	for (int i = 0; i < N; i++) {
		ck_assert_msg(!t_int(&w[i].saw_done), "timer %d waited for the blocking callback",
			      i);
		ck_assert(t_u64(&w[i].t.first_ns) - w[i].t.deadline < 250 * T_MS);
	}
	ck_assert_int_eq(t_wait_int(&b.done, 1, T_WAIT_MS), 1);
	t_check_calls(&tt, 0);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Callbacks that use the service                                      */

#define CHAIN_LEN 50

struct t_link {
	struct t_timer t;	/* first: t_cb's argument */
	struct t_chain *c;
	int i;
};

struct t_chain {
	struct kairos *k;
	struct t_link link[CHAIN_LEN];
	struct t_timer victim;	/* cancelled by the first link */
	struct t_timer moved;	/* pulled earlier by the first link */
	struct t_timer tick;	/* periodic, armed by the first link */
	int rc_cancel1, rc_cancel2, rc_reset;
	int rc_other_create, rc_other_arm, rc_other_destroy, rc_other_destroy2, rc_other_stats;
	struct kairos_stats other_stats;
	uint64_t reset_want;
	atomic_int first_done;
};

static void t_cb_link(void *arg, kairos_id id, int status);

static void t_chain_first(struct t_chain *c)
{
	struct kairos_config cfg = t_cfg(1, 1);
	struct kairos *other = NULL;
	struct t_tally ot;
	struct t_timer far;
	uint64_t before = 0;

	c->rc_cancel1 = t_cancel(c->k, &tt, &c->victim);
	c->rc_cancel2 = t_cancel(c->k, &tt, &c->victim);
	kairos_now(c->k, &before);
	c->rc_reset = kairos_reset(c->k, c->moved.id, 2 * T_MS);
	c->reset_want = before + 2 * T_MS;
	if (t_arm_every(c->k, &tt, &c->tick, 3 * T_MS) != 0)
		atomic_fetch_add(&tt.bad, 1);

	/* A callback may run a whole other service, and destroy it. */
	memset(&ot, 0, sizeof(ot));
	ot.clock = CLOCK_MONOTONIC;
	c->rc_other_create = kairos_create(&cfg, &other);
	if (c->rc_other_create == 0) {
		t_keep(other);
		c->rc_other_arm = t_arm(other, &ot, &far, 10 * T_SEC);
		/* The stats identity of the other service, checked by the test thread. */
		c->rc_other_stats = kairos_stats(other, &c->other_stats);
		c->rc_other_destroy = kairos_destroy(other, KAIROS_DRAIN_DROP);
		c->rc_other_destroy2 = kairos_destroy(other, KAIROS_DRAIN_DROP);
	}
	atomic_store(&c->first_done, 1);
}

static void t_cb_link(void *arg, kairos_id id, int status)
{
	struct t_link *l = arg;
	struct t_chain *c = l->c;

	t_cb(arg, id, status);
	if (status <= 0)
		return;
	if (l->i == 0)
		t_chain_first(c);
	/* Arm the next link from this callback, into the same service. */
	if (l->i + 1 < CHAIN_LEN) {
		struct t_link *n = &c->link[l->i + 1];

		n->c = c;
		n->i = l->i + 1;
		if (t_arm_fn(c->k, &tt, &n->t, (uint64_t)(l->i % 3) * T_MS, t_cb_link, true) != 0)
			atomic_fetch_add(&tt.bad, 1);
	}
}

START_TEST(test_service_callbacks_arm_and_cancel)
{
	struct kairos *k = t_create(NULL);
	struct t_chain *c = calloc(1, sizeof(*c));

	ck_assert_ptr_nonnull(c);
	c->k = k;
	ck_assert_int_eq(t_arm(k, &tt, &c->victim, 10 * T_SEC), 0);
	ck_assert_int_eq(t_arm_fn(k, &tt, &c->moved, 10 * T_SEC, t_cb, false), 0);
	c->link[0].c = c;
	c->link[0].i = 0;
	ck_assert_int_eq(t_arm_fn(k, &tt, &c->link[0].t, T_MS, t_cb_link, true), 0);

	/* The chain: every link armed by the one before. */
	ck_assert_int_eq(t_wait_int(&c->link[CHAIN_LEN - 1].t.runs, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t_wait_int(&c->first_done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(c->rc_cancel1, 0);
	ck_assert_int_eq(c->rc_cancel2, -ENOENT);
	ck_assert_int_eq(c->rc_reset, 0);
	ck_assert_int_eq(c->rc_other_create, 0);
	ck_assert_int_eq(c->rc_other_arm, 0);
	ck_assert_int_eq(c->rc_other_stats, 0);
	ck_assert_uint_eq(c->other_stats.armed, 1);
	ck_assert_uint_eq(c->other_stats.pending, 1);
	ck_assert_uint_eq(c->other_stats.fired, 0);
	ck_assert_uint_eq(c->other_stats.cancelled, 0);
	ck_assert_uint_eq(c->other_stats.drained, 0);
	ck_assert_int_eq(c->rc_other_destroy, 1);
	ck_assert_int_eq(c->rc_other_destroy2, -ESHUTDOWN);

	/* The timer pulled in from a callback fired at its new deadline. */
	ck_assert_int_eq(t_wait_int(&c->moved.runs, 1, T_WAIT_MS), 1);
	ck_assert(t_u64(&c->moved.first_ns) >= c->reset_want);
	/* The periodic one armed from a callback runs until cancelled here. */
	ck_assert_int_ge(t_wait_int(&c->tick.runs, 3, T_WAIT_MS), 3);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &c->tick) == 0 || c->tick.stopped, 1);
	ck_assert_int_eq(c->victim.runs, 0);
	t_wait_fired(CHAIN_LEN + 1);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(c);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Destroy                                                             */

static void t_cb_on_main(void *arg, kairos_id id, int status)
{
	struct t_timer *t = arg;

	/* Notified timers are called on the thread that destroys. */
	if (status == -ECANCELED && !pthread_equal(pthread_self(), t_main_thread))
		atomic_fetch_add(&t->tally->bad, 1);
	t_cb(arg, id, status);
}

static void t_destroy_pending(int how)
{
	enum { N = 1000, P = 2 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N + P, sizeof(*tm));
	struct kairos_stats s;

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm_fn(k, &tt, &tm[i], 10 * T_SEC, t_cb_on_main, true), 0);
	for (int i = N; i < N + P; i++)
		ck_assert_int_eq(t_arm_every_fn(k, &tt, &tm[i], 10 * T_SEC, t_cb_on_main, true), 0);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.pending, N + P);
	t_destroy(k, how, N + P);
	/* Notified before destroy returned, on this thread; dropped: never. */
	for (int i = 0; i < N + P; i++) {
		ck_assert_int_eq(tm[i].runs, 0);
		ck_assert_int_eq(tm[i].notified, how == KAIROS_DRAIN_NOTIFY);
		if (how == KAIROS_DRAIN_NOTIFY)
			ck_assert(t_u64(&tm[i].cb_id) == tm[i].id);
	}
	t_sleep_ms(20);
	for (int i = 0; i < N + P; i++)
		ck_assert_int_eq(tm[i].runs + tm[i].notified, how == KAIROS_DRAIN_NOTIFY);
	t_check_calls(&tt, 0);
	free(tm);
}

START_TEST(test_service_destroy_drop_pending)
{
	t_destroy_pending(KAIROS_DRAIN_DROP);
}
END_TEST

START_TEST(test_service_destroy_notify_pending)
{
	t_destroy_pending(KAIROS_DRAIN_NOTIFY);
}
END_TEST

START_TEST(test_service_destroy_waits_running)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;

	t_block_init(&b, 0, 200 * T_MS);
	t_block_arm(k, &b, T_MS);
	t_block_wait_started(&b);
	t_check_identity(k, &tt);
	/* The running one-shot has ended (it fired): nothing to drain. */
	t_destroy(k, KAIROS_DRAIN_NOTIFY, 0);
	ck_assert_int_eq(t_int(&b.done), 1);
	ck_assert_int_eq(t_int(&b.calls), 1);
	ck_assert_int_eq(t_int(&b.notified), 0);
}
END_TEST

START_TEST(test_service_destroy_waits_running_periodic)
{
	struct kairos *k = t_create(NULL);
	struct t_block b;

	t_block_init(&b, 1, 200 * T_MS);
	t_block_arm(k, &b, 5 * T_MS);
	t_block_wait_started(&b);
	t_check_identity(k, &tt);
	/* Still pending while it runs: drained once, after it returned. */
	t_destroy(k, KAIROS_DRAIN_NOTIFY, 1);
	ck_assert_int_eq(t_int(&b.done), 1);
	ck_assert_int_eq(t_int(&b.calls), 1);
	ck_assert_int_eq(t_int(&b.notified), 1);
	ck_assert_int_eq(t_int(&b.notified_after_done), 1);
	ck_assert_int_eq(t_int(&b.notified_off_main), 0);
	t_sleep_ms(20);
	ck_assert_int_eq(t_int(&b.calls), 1);
	ck_assert_int_eq(t_int(&b.notified), 1);
}
END_TEST

/* Destroy while timers are expiring: each ends exactly once either way. */
static void t_destroy_racing(int how)
{
	enum { N = 3000 };
	struct kairos *k = t_create(NULL);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(7);
	int drained, ran = 0;

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < N; i++) {
		uint64_t d = t_rand_below(&seed, 2 * T_MS);

		ck_assert_int_eq(t_arm_fn(k, &tt, &tm[i], d, t_cb_on_main, true), 0);
	}
	drained = kairos_destroy(k, how);
	ck_assert_int_ge(drained, 0);
	for (int i = 0; i < N; i++) {
		int r = t_int(&tm[i].runs), d = t_int(&tm[i].notified);

		ck_assert_int_le(r, 1);
		ran += r;
		if (how == KAIROS_DRAIN_NOTIFY)
			ck_assert_msg(r + d == 1, "timer %d: ran %d, notified %d", i, r, d);
		else
			ck_assert_int_eq(d, 0);
	}
	/* armed == fired + drained: nothing was cancelled. */
	ck_assert_int_eq(ran + drained, N);
	ck_assert_uint_eq(t_u64(&tt.fired), (uint64_t)ran);
	/* Nothing runs after destroy returned. */
	t_sleep_ms(20);
	for (int i = 0; i < N; i++)
		ran -= t_int(&tm[i].runs);
	ck_assert_int_eq(ran, 0);
	t_check_calls(&tt, 0);
	free(tm);
}

START_TEST(test_service_destroy_racing_fire_notify)
{
	t_destroy_racing(KAIROS_DRAIN_NOTIFY);
}
END_TEST

START_TEST(test_service_destroy_racing_fire_drop)
{
	t_destroy_racing(KAIROS_DRAIN_DROP);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Threads                                                             */

START_TEST(test_service_threads_baseline)
{
	int base = t_thread_baseline();
	struct kairos_config cfgs[4];
	const struct kairos_config *pick[5] = { NULL, &cfgs[0], &cfgs[1], &cfgs[2], &cfgs[3] };

	cfgs[0] = t_cfg(2, 3);
	cfgs[1] = t_cfg(1, 1);
	cfgs[1].delivery = KAIROS_DELIVER_INLINE;
	cfgs[2] = t_cfg(2, 1);
	cfgs[2].backend = KAIROS_BACKEND_EPOLL;
	cfgs[3] = t_cfg(t_ncpu(), 2);
	cfgs[3].pin_cpus = 1;
	for (int i = 0; i < 5; i++) {
		struct t_timer tm[20];
		struct kairos_stats s;
		struct kairos *k;
		int during;

		t_setup();
		k = t_create(pick[i]);
		during = t_count_threads();
		ck_assert_int_eq(kairos_stats(k, &s), 0);
		/* At least one thread per shard. */
		ck_assert_msg(during >= base + (int)s.shards, "config %d: %d threads for %u shards",
			      i, during - base, s.shards);
		for (int j = 0; j < 20; j++)
			ck_assert_int_eq(t_arm(k, &tt, &tm[j], (uint64_t)j * 100 * T_US), 0);
		t_wait_fired(20);
		t_check_calls(&tt, T_LATE);
		t_check_identity(k, &tt);
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		ck_assert_msg(t_wait_threads(base, 2000) == base,
			      "config %d: %d threads left after destroy", i,
			      t_count_threads() - base);
	}
}
END_TEST

#define UNREG_THREADS	16
#define UNREG_SHORT	40
#define UNREG_LONG	40

struct t_unreg {
	struct kairos *k;
	struct t_timer sh[UNREG_SHORT];
	struct t_timer lg[UNREG_LONG];
	uint64_t seed;
};

/* A thread that never registered with anything: it arms, moves, cancels, exits. */
static void *t_unreg_thread(void *arg)
{
	struct t_unreg *u = arg;

	for (int i = 0; i < UNREG_SHORT; i++)
		if (t_arm(u->k, &tt, &u->sh[i], T_MS + t_rand_below(&u->seed, 4 * T_MS)) != 0)
			atomic_fetch_add(&tt.bad, 1);
	for (int i = 0; i < UNREG_LONG; i++)
		if (t_arm(u->k, &tt, &u->lg[i], 10 * T_SEC) != 0)
			atomic_fetch_add(&tt.bad, 1);
	for (int i = 0; i < UNREG_LONG / 2; i++) {
		uint64_t d = 10 * T_SEC + t_rand_below(&u->seed, 10 * T_SEC);

		if (kairos_reset(u->k, u->lg[i].id, d) != 0)
			atomic_fetch_add(&tt.bad, 1);
	}
	for (int i = UNREG_LONG / 2; i < UNREG_LONG; i++)
		if (t_cancel(u->k, &tt, &u->lg[i]) != 0)
			atomic_fetch_add(&tt.bad, 1);
	for (int i = 0; i < UNREG_SHORT; i += 4) {
		int rc = t_cancel_sync(u->k, &tt, &u->sh[i]);

		if (rc != 0 && rc != -ENOENT && rc != -EBUSY)
			atomic_fetch_add(&tt.bad, 1);
	}
	return NULL;
}

START_TEST(test_service_unregistered_threads)
{
	struct kairos *k = t_create(NULL);
	struct t_unreg *u = calloc(UNREG_THREADS, sizeof(*u));
	pthread_t th[UNREG_THREADS];
	uint64_t ended = 0, want = 0;
	struct kairos_stats s;

	ck_assert_ptr_nonnull(u);
	for (int i = 0; i < UNREG_THREADS; i++) {
		u[i].k = k;
		u[i].seed = t_seed(200 + (uint64_t)i);
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_unreg_thread, &u[i]), 0);
	}
	for (int i = 0; i < UNREG_THREADS; i++)
		pthread_join(th[i], NULL);
	/* The threads are gone; their short timers end on the service's threads. */
	want = UNREG_THREADS * UNREG_SHORT;
	for (uint64_t end = t_mono() + T_WAIT_MS * T_MS; t_mono() < end; t_sleep_ms(1)) {
		ended = 0;
		for (int i = 0; i < UNREG_THREADS; i++)
			for (int j = 0; j < UNREG_SHORT; j++)
				ended += (uint64_t)(t_int(&u[i].sh[j].runs) +
						    t_int(&u[i].sh[j].cancel_ok));
		if (ended >= want)
			break;
	}
	ck_assert_uint_eq(ended, want);
	t_check_calls(&tt, T_LATE);
	s = t_check_identity(k, &tt);
	ck_assert_uint_eq(s.pending, UNREG_THREADS * UNREG_LONG / 2);
	t_destroy(k, KAIROS_DRAIN_NOTIFY, UNREG_THREADS * UNREG_LONG / 2);
	for (int i = 0; i < UNREG_THREADS; i++) {
		for (int j = 0; j < UNREG_SHORT; j++) {
			struct t_timer *t = &u[i].sh[j];

			ck_assert_int_eq(t->runs + t->cancel_ok + t->notified, 1);
		}
		for (int j = 0; j < UNREG_LONG; j++) {
			struct t_timer *t = &u[i].lg[j];

			ck_assert_int_eq(t->runs + t->cancel_ok + t->notified, 1);
		}
	}
	free(u);
}
END_TEST

#define ONE_THREADS	32
#define ONE_PER		500

struct t_one {
	struct kairos *k;
	struct t_timer *tm;
	int idx;
};

static void *t_one_thread(void *arg)
{
	struct t_one *o = arg;
	uint64_t seed = t_seed(300 + (uint64_t)o->idx);

	for (int i = 0; i < ONE_PER; i++) {
		struct t_timer *t = &o->tm[i];
		int rc;

		uint64_t d = t_rand_below(&seed, 5 * T_MS);

		if (t_arm(o->k, &tt, t, d) != 0) {
			atomic_fetch_add(&tt.bad, 1);
			continue;
		}
		if (i % 3 == 0) {
			rc = t_cancel(o->k, &tt, t);
			if (rc != 0 && rc != -ENOENT && rc != -EBUSY)
				atomic_fetch_add(&tt.bad, 1);
		} else if (i % 3 == 1) {
			/*
			 * Later only: the callback checks against the armed
			 * deadline, which stays a lower bound.
			 */
			rc = kairos_reset(o->k, t->id, d + t_rand_below(&seed, 5 * T_MS));
			if (rc != 0 && rc != -ENOENT)
				atomic_fetch_add(&tt.bad, 1);
		}
	}
	return NULL;
}

START_TEST(test_service_one_shard_32_threads)
{
	struct kairos_config c = t_cfg(1, 2);
	struct kairos *k = t_create(&c);
	struct t_timer *tm = calloc(ONE_THREADS * ONE_PER, sizeof(*tm));
	struct t_one o[ONE_THREADS];
	pthread_t th[ONE_THREADS];
	uint64_t end;

	ck_assert_ptr_nonnull(tm);
	for (int i = 0; i < ONE_THREADS; i++) {
		o[i] = (struct t_one){ .k = k, .tm = &tm[i * ONE_PER], .idx = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_one_thread, &o[i]), 0);
	}
	for (int i = 0; i < ONE_THREADS; i++)
		pthread_join(th[i], NULL);
	end = t_mono() + 10 * T_SEC;
	for (int i = 0; i < ONE_THREADS * ONE_PER; i++)
		while (t_int(&tm[i].runs) + t_int(&tm[i].cancel_ok) == 0 && t_mono() < end)
			t_sleep_ms(1);
	for (int i = 0; i < ONE_THREADS * ONE_PER; i++)
		ck_assert_msg(tm[i].runs + tm[i].cancel_ok == 1, "timer %d: ran %d, cancelled %d",
			      i, t_int(&tm[i].runs), t_int(&tm[i].cancel_ok));
	t_check_calls(&tt, 0);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Inline delivery                                                     */

START_TEST(test_service_inline_basics)
{
	enum { N = 500, C = 50 };
	struct kairos_config c = t_cfg(2, 0);
	struct t_timer *tm = calloc(N + C, sizeof(*tm));
	struct t_self self = { 0 };
	struct t_timer p, p2;
	uint64_t seed = t_seed(8);
	struct kairos *k;
	int runs;

	ck_assert_ptr_nonnull(tm);
	c.delivery = KAIROS_DELIVER_INLINE;
	k = t_create(&c);
	self.k = k;
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 20 * T_MS)), 0);
	for (int i = N; i < N + C; i++) {
		uint64_t d = 20 * T_MS + t_rand_below(&seed, 20 * T_MS);

		ck_assert_int_eq(t_arm(k, &tt, &tm[i], d), 0);
		ck_assert_int_eq(t_cancel(k, &tt, &tm[i]), 0);
	}
	t_wait_fired(N);
	/* Own-timer calls from a callback on the shard thread itself. */
	ck_assert_int_eq(t_arm_fn(k, &tt, &self.t, T_MS, t_cb_self_sync, true), 0);
	ck_assert_int_eq(t_wait_int(&self.done, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(self.rc_sync, -EDEADLK);
	ck_assert_int_eq(self.rc_cancel, -EBUSY);
	ck_assert_int_eq(self.rc_reset, -ENOENT);
	ck_assert_int_eq(self.rc_destroy_drop, -EDEADLK);
	/* Periodic, stopped from outside... */
	ck_assert_int_eq(t_arm_every(k, &tt, &p, 5 * T_MS), 0);
	ck_assert_int_ge(t_wait_int(&p.runs, 5, T_WAIT_MS), 5);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	runs = t_int(&p.runs);
	/* ... and from inside. */
	{
		struct t_self ps = { .k = k };

		ck_assert_int_eq(t_arm_every_fn(k, &tt, &ps.t, 2 * T_MS, t_cb_self_sync, true), 0);
		ck_assert_int_eq(t_wait_int(&ps.done, 1, T_WAIT_MS), 1);
		ck_assert_int_eq(ps.rc_sync, -EDEADLK);
		tt.cancelled++;
		t_sleep_ms(20);
		ck_assert_int_eq(ps.t.runs, 1);
	}
	ck_assert_int_eq(t_int(&p.runs), runs);
	ck_assert_int_eq(t_arm_every(k, &tt, &p2, 10 * T_SEC), 0);
	for (int i = N; i < N + C; i++)
		ck_assert_int_eq(tm[i].runs, 0);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 1);
	t_destroy(k, KAIROS_DRAIN_NOTIFY, 1);
	ck_assert_int_eq(p2.notified, 1);
	free(tm);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Backends                                                            */

START_TEST(test_service_backend_info)
{
	const char *env = getenv("KAIROS_BACKEND");
	struct kairos_config c = t_cfg(2, 1);
	struct kairos_stats s;
	struct kairos *k = t_create(NULL);

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	for (unsigned i = 0; i < s.shards; i++) {
		const char *name = NULL, *why = NULL;

		ck_assert_int_eq(kairos_backend_info(k, i, &name, &why), 0);
		ck_assert_ptr_nonnull(name);
		ck_assert_ptr_nonnull(why);
		ck_assert_msg(!strcmp(name, "io_uring") || !strcmp(name, "epoll"), "backend \"%s\"",
			      name);
		ck_assert_msg(why[0] != '\0', "shard %u: no reason given", i);
		/* The environment overrides AUTO. */
		if (env && !strcmp(env, "epoll"))
			ck_assert_str_eq(name, "epoll");
		if (env && !strcmp(env, "uring"))
			ck_assert_str_eq(name, "io_uring");
		/* Both outputs are optional. */
		ck_assert_int_eq(kairos_backend_info(k, i, NULL, NULL), 0);
		ck_assert_int_eq(kairos_backend_info(k, i, &name, NULL), 0);
		ck_assert_int_eq(kairos_backend_info(k, i, NULL, &why), 0);
	}
	ck_assert_int_eq(kairos_backend_info(k, s.shards, NULL, NULL), -EINVAL);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);

	/* Forced by the configuration. */
	c.backend = KAIROS_BACKEND_EPOLL;
	k = t_create(&c);
	for (unsigned i = 0; i < 2; i++) {
		const char *name = NULL, *why = NULL;

		ck_assert_int_eq(kairos_backend_info(k, i, &name, &why), 0);
		ck_assert_str_eq(name, "epoll");
		ck_assert(why && why[0]);
	}
	t_setup();
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_service_epoll_forced_fires)
{
	enum { N = 500 };
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(9);
	struct kairos *k;

	ck_assert_ptr_nonnull(tm);
	c.backend = KAIROS_BACKEND_EPOLL;
	k = t_create(&c);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 20 * T_MS)), 0);
	for (int i = 0; i < N; i += 5)
		t_cancel(k, &tt, &tm[i]);
	t_wait_fired(t_u64(&tt.armed) - t_u64(&tt.cancelled));
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

#define BURST_THREADS	4
#define BURST_PER	1500

struct t_burst {
	struct kairos *k;
	struct t_timer *tm;
	int idx;
};

static void *t_burst_thread(void *arg)
{
	struct t_burst *b = arg;
	uint64_t seed = t_seed(400 + (uint64_t)b->idx);

	for (int i = 0; i < BURST_PER; i++) {
		if (t_arm(b->k, &tt, &b->tm[i], t_rand_below(&seed, 2 * T_MS)) != 0)
			atomic_fetch_add(&tt.bad, 1);
		if (i % 7 == 0) {
			int rc = t_cancel(b->k, &tt, &b->tm[i]);

			if (rc != 0 && rc != -ENOENT && rc != -EBUSY)
				atomic_fetch_add(&tt.bad, 1);
		}
	}
	return NULL;
}

START_TEST(test_service_tiny_ring_burst)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer *tm = calloc(BURST_THREADS * BURST_PER, sizeof(*tm));
	struct t_burst b[BURST_THREADS];
	pthread_t th[BURST_THREADS];
	struct kairos *k;

	ck_assert_ptr_nonnull(tm);
	/* Two submission entries against thousands of posts a millisecond. */
	c.ring_entries = 2;
	k = t_create(&c);
	for (int i = 0; i < BURST_THREADS; i++) {
		b[i] = (struct t_burst){ .k = k, .tm = &tm[i * BURST_PER], .idx = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_burst_thread, &b[i]), 0);
	}
	for (int i = 0; i < BURST_THREADS; i++)
		pthread_join(th[i], NULL);
	t_wait_fired(t_u64(&tt.armed) - t_u64(&tt.cancelled));
	for (int i = 0; i < BURST_THREADS * BURST_PER; i++)
		ck_assert_int_eq(tm[i].runs + tm[i].cancel_ok, 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Memory and processes                                                */

START_TEST(test_service_arm_cancel_flat_rss)
{
	/* Sanitizers: fewer cycles (they are slow), and no bound (see T_SANITIZED). */
	const int total = T_SANITIZED ? 200000 : 2000000, batch = 1000;
	struct kairos_config c = t_cfg(2, 2);
	struct kairos *k = t_create(&c);
	kairos_id *ids = calloc((size_t)batch, sizeof(*ids));
	uint64_t rss_warm = 0, rss_end, armed = 0;

	ck_assert_ptr_nonnull(ids);
	for (int done = 0; done < total; done += batch) {
		for (int i = 0; i < batch; i++) {
			uint64_t d = 10 * T_SEC + (uint64_t)i * T_MS;
			int rc = kairos_arm(k, d, t_cb_never, NULL, &ids[i]);

			if (rc != 0)
				ck_assert_msg(0, "arm: %d", rc);
		}
		armed += (uint64_t)batch;
		for (int i = 0; i < batch; i++) {
			int rc = kairos_cancel(k, ids[i]);

			if (rc != 0)
				ck_assert_msg(0, "cancel: %d", rc);
		}
		if (done == total / 4)
			rss_warm = t_rss();
	}
	rss_end = t_rss();
	tt.armed = armed;
	tt.cancelled = armed;
	/*
	 * Records come back after a grace period, so a producer this fast runs
	 * ahead of reuse for a while and the pool settles at a high-water mark
	 * (~20 MB here).  A leak of even a small record per cycle would be
	 * 100 MB or more over the last three quarters.
	 */
	if (!T_SANITIZED)
		ck_assert_msg(rss_end < rss_warm + 32 * 1024 * 1024,
			      "RSS grew by %" PRIu64 " KiB over %d arm+cancel cycles",
			      (rss_end - rss_warm) / 1024, total * 3 / 4);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(ids);
}
END_TEST

/*
 * More posting threads than cores, all on one shard: the shard thread gets a
 * small share of the CPU, and without a bound the posts outran it, so the
 * records they armed and cancelled never came back to the pool and memory
 * grew by tens of MB a second.  Posters now wait once they are far ahead,
 * and memory levels off.
 */
struct t_poster {
	struct kairos *k;
	atomic_int *stop;
	uint64_t armed, cancelled;
	int bad;
};

static void *t_poster_main(void *arg)
{
	struct t_poster *p = arg;

	while (!atomic_load_explicit(p->stop, memory_order_relaxed)) {
		kairos_id id;
		int rc = kairos_arm(p->k, 10 * T_SEC, t_cb_never, NULL, &id);

		if (rc) {
			p->bad = rc;
			break;
		}
		p->armed++;
		rc = kairos_cancel(p->k, id);
		if (rc) {
			p->bad = rc;
			break;
		}
		p->cancelled++;
	}
	return NULL;
}

START_TEST(test_service_many_posters_flat_rss)
{
	enum { THREADS = 24 };
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *k = t_create(&c);
	static struct t_poster p[THREADS];
	pthread_t th[THREADS];
	atomic_int stop = 0;
	uint64_t rss_warm, rss_end;

	for (int i = 0; i < THREADS; i++) {
		p[i] = (struct t_poster){ .k = k, .stop = &stop };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_poster_main, &p[i]), 0);
	}
	t_sleep_ms(T_SANITIZED ? 300 : 1000);
	rss_warm = t_rss();
	t_sleep_ms(T_SANITIZED ? 300 : 2000);
	rss_end = t_rss();
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++) {
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
		ck_assert_msg(p[i].bad == 0, "poster %d: %d", i, p[i].bad);
		tt.armed += p[i].armed;
		tt.cancelled += p[i].cancelled;
	}
	/* Unbounded, this grew ~45 MB a second here; bounded, it stays level. */
	if (!T_SANITIZED)
		ck_assert_msg(rss_end < rss_warm + 48 * 1024 * 1024,
			      "RSS grew by %" PRIu64 " KiB in 2 s of posting",
			      (rss_end - rss_warm) / 1024);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Which descriptors are open, as a bitmap of the first 1024. */
static void t_open_fds(unsigned char *map)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	ck_assert_ptr_nonnull(d);
	memset(map, 0, 1024);
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd >= 0 && fd < 1024 && fd != dirfd(d))
			map[fd] = 1;
	}
	closedir(d);
}

START_TEST(test_service_fork_exec)
{
	unsigned char before[1024], after[1024];
	char script[4096];
	struct kairos *k;
	struct t_timer p, t;
	size_t len;
	int status, nfds = 0;
	pid_t pid;

	t_open_fds(before);
	k = t_create(NULL);
	t_open_fds(after);
	ck_assert_int_eq(t_arm_every(k, &tt, &p, T_MS), 0);
	ck_assert_int_ge(t_wait_int(&p.runs, 2, T_WAIT_MS), 2);

	/*
	 * The child execs a shell that checks none of the service's
	 * descriptors crossed exec: they must be close-on-exec, or every
	 * program a server spawns would hold its timerfds and rings.
	 */
	len = (size_t)snprintf(script, sizeof(script), "for f in");
	for (int fd = 0; fd < 1024; fd++)
		if (after[fd] && !before[fd] && len < sizeof(script) - 64) {
			len += (size_t)snprintf(script + len, sizeof(script) - len, " %d", fd);
			nfds++;
		}
	snprintf(script + len, sizeof(script) - len,
		 "; do [ -e /proc/$$/fd/$f ] && exit 3; done; exit 0");
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", nfds ? script : "exit 0", (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_msg(WEXITSTATUS(status) != 3, "a service descriptor survived exec (%s)", script);
	ck_assert_int_eq(WEXITSTATUS(status), 0);

	/* The parent's service carried on through the fork. */
	ck_assert_int_eq(t_arm(k, &tt, &t, T_MS), 0);
	t_wait_fired(1);
	ck_assert_int_ge(t_wait_int(&p.runs, t_int(&p.runs) + 2, T_WAIT_MS), 2);
	ck_assert_int_eq(t_cancel_sync(k, &tt, &p) == 0 || p.stopped, 1);
	t_check_calls(&tt, T_LATE);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* cancel_sync never sleeps inside an RCU read-side section            */

/*
 * While cancel_sync waits for a 3 s callback, 1e6 arm+cancel cycles must
 * reuse their records: a waiter inside a read-side section would stall
 * every grace period of the process and the pool would only grow.
 */
START_TEST(test_service_cancel_sync_rss_flat)
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
START_TEST(test_service_cancel_sync_other_destroy)
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
	t_sleep_ms(100);	/* let the main thread's cancel_sync start waiting */
	atomic_store(&d->rc, kairos_destroy(d->victim, KAIROS_DRAIN_DROP));
	atomic_store(&d->done, 1);
}

START_TEST(test_service_cancel_sync_callback_destroys)
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
START_TEST(test_service_cancel_sync_across_destroy)
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

START_TEST(test_service_inline_cross_shard_no_deadlock)
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

/* ------------------------------------------------------------------ */
/* Deadline arithmetic saturates                                       */

/*
 * A period so long that now + period barely fits (100 ms to spare) is
 * accepted; after a reset to 200 ms from now it runs once, and its next
 * run, deadline + period, is past 2^64 ns: it must saturate (a run 585
 * years out), not wrap into the past and run again at once.
 */
START_TEST(test_service_periodic_next_saturates)
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

/* ------------------------------------------------------------------ */
/* After destroy, -ESHUTDOWN comes first                               */

START_TEST(test_service_eshutdown_before_argument_errors)
{
	struct kairos *k = t_create(NULL);
	struct kairos_stats st;
	uint64_t now;
	int x;

	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_arm(k, T_MS, NULL, &x, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm(k, UINT64_MAX, t_cb_never, &x, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_at(k, 0, NULL, &x, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_every(k, 0, t_cb_never, &x, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_arm_slack(k, UINT64_MAX, 1, t_cb_never, &x, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_cancel(k, 0), -ESHUTDOWN);
	ck_assert_int_eq(kairos_cancel_sync(k, 0), -ESHUTDOWN);
	ck_assert_int_eq(kairos_reset(k, 0, T_MS), -ESHUTDOWN);
	ck_assert_int_eq(kairos_reset(k, 1, UINT64_MAX), -ESHUTDOWN);
	ck_assert_int_eq(kairos_reset_at(k, 0, 0), -ESHUTDOWN);
	ck_assert_int_eq(kairos_now(k, NULL), -ESHUTDOWN);
	ck_assert_int_eq(kairos_now(k, &now), -ESHUTDOWN);
	ck_assert_int_eq(kairos_destroy(k, 12345), -ESHUTDOWN);
	ck_assert_int_eq(kairos_backend_info(k, 9999, NULL, NULL), -ESHUTDOWN);
	/* The final counters stay readable; a NULL out is still an argument error. */
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_int_eq(kairos_stats(k, NULL), -EINVAL);
}
END_TEST

/* tick_ns: 1 us to 1 s; near 2^64 nothing would ever fire. */
START_TEST(test_service_tick_bounds)
{
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *k = NULL;
	static const uint64_t bad[] = { 999, 1000000001, UINT64_MAX / 2, UINT64_MAX };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c.tick_ns = bad[i];
		ck_assert_msg(kairos_create(&c, &k) == -EINVAL, "tick_ns %" PRIu64 " accepted",
			      bad[i]);
	}
	c.tick_ns = 1000000000;
	k = t_create(&c);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST


/* ------------------------------------------------------------------ */

static Suite *t_suite(void)
{
	Suite *s = suite_create("service");
	TCase *api = tcase_create("api");
	TCase *fire = tcase_create("fire");
	TCase *cancel = tcase_create("cancel");
	TCase *reset = tcase_create("reset");
	TCase *periodic = tcase_create("periodic");
	TCase *life = tcase_create("lifecycle");

	TCase *all[] = { api, fire, cancel, reset, periodic, life };
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		tcase_add_checked_fixture(all[i], t_setup, NULL);
		tcase_set_timeout(all[i], 120);
		suite_add_tcase(s, all[i]);
	}

	tcase_add_test(api, test_service_config_default);
	tcase_add_test(api, test_service_create_null_cfg);
	tcase_add_test(api, test_service_create_bad_cfg);
	tcase_add_test(api, test_service_create_zero_config);
	tcase_add_test(api, test_service_einval);
	tcase_add_test(api, test_service_arm_null_out);
	tcase_add_test(api, test_service_overflow);
	tcase_add_test(api, test_service_eshutdown);
	tcase_add_test(api, test_service_now_monotonic);
	tcase_add_test(api, test_service_clock_boottime);
	tcase_add_test(api, test_service_max_timers);
	tcase_add_test(api, test_service_max_timers_concurrent);
	tcase_add_test(api, test_service_backend_info);
	tcase_add_test(api, test_service_eshutdown_before_argument_errors);
	tcase_add_test(api, test_service_tick_bounds);

	tcase_add_test(fire, test_service_never_early_random);
	tcase_add_test(fire, test_service_arm_slack);
	tcase_add_test(fire, test_service_never_early_ticks_1ms);
	tcase_add_test(fire, test_service_never_early_ticks_100us);
	tcase_add_test(fire, test_service_never_early_ticks_1us);
	tcase_add_test(fire, test_service_arm_at_past);
	tcase_add_test(fire, test_service_blocking_callback);
	tcase_add_test(fire, test_service_callbacks_arm_and_cancel);
	tcase_add_test(fire, test_service_inline_basics);
	tcase_add_test(fire, test_service_epoll_forced_fires);
	tcase_add_test(fire, test_service_tiny_ring_burst);

	tcase_add_test(cancel, test_service_cancel_before_fire);
	tcase_add_test(cancel, test_service_cancel_after_fire);
	tcase_add_test(cancel, test_service_cancel_wakes_idle_shard);
	tcase_add_test(cancel, test_service_cancel_while_running);
	tcase_add_test(cancel, test_service_cancel_sync_waits);
	tcase_add_test(cancel, test_service_cancel_sync_waits_periodic);
	tcase_add_test(cancel, test_service_cancel_periodic_while_running);
	tcase_add_test(cancel, test_service_cancel_sync_own_oneshot);
	tcase_add_test(cancel, test_service_cancel_sync_own_periodic);
	tcase_add_test(cancel, test_service_cancel_sync_rss_flat);
	tcase_add_test(cancel, test_service_cancel_sync_other_destroy);
	tcase_add_test(cancel, test_service_cancel_sync_callback_destroys);
	tcase_add_test(cancel, test_service_cancel_sync_across_destroy);
	tcase_add_test(cancel, test_service_inline_cross_shard_no_deadlock);
	tcase_add_test(cancel, test_service_destroy_from_callback);
	tcase_add_test(cancel, test_service_cancel_fire_storm);
	tcase_add_test(cancel, test_service_stale_ids);
	tcase_add_test(cancel, test_service_foreign_ids);

	tcase_add_test(reset, test_service_reset_later);
	tcase_add_test(reset, test_service_reset_at);
	tcase_add_test(reset, test_service_reset_earlier);
	tcase_add_test(reset, test_service_reset_random);
	tcase_add_test(reset, test_service_reset_after_end);
	tcase_add_test(reset, test_service_reset_in_own_callback);
	tcase_add_test(reset, test_service_reset_periodic);
	tcase_add_test(reset, test_service_reset_storm);

	tcase_add_test(periodic, test_service_periodic_count);
	tcase_add_test(periodic, test_service_periodic_no_drift);
	tcase_add_test(periodic, test_service_periodic_missed);
	tcase_add_test(periodic, test_service_periodic_next_saturates);

	tcase_add_test(life, test_service_destroy_drop_pending);
	tcase_add_test(life, test_service_destroy_notify_pending);
	tcase_add_test(life, test_service_destroy_waits_running);
	tcase_add_test(life, test_service_destroy_waits_running_periodic);
	tcase_add_test(life, test_service_destroy_racing_fire_notify);
	tcase_add_test(life, test_service_destroy_racing_fire_drop);
	tcase_add_test(life, test_service_threads_baseline);
	tcase_add_test(life, test_service_unregistered_threads);
	tcase_add_test(life, test_service_one_shard_32_threads);
	tcase_add_test(life, test_service_arm_cancel_flat_rss);
	tcase_add_test(life, test_service_many_posters_flat_rss);
	tcase_add_test(life, test_service_fork_exec);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(t_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
