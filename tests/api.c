/* SPDX-License-Identifier: MIT */
/*
 * api.c - the service's arguments and configuration: defaults, a zero-filled
 * config, every -EINVAL, -EOVERFLOW and -ESHUTDOWN (which comes first after
 * destroy), the clocks, max_timers exact under concurrency; the version
 * function and macros, and the reserved words of the public structs.
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
#include "internal.h"
/* ------------------------------------------------------------------ */
/* Configuration and creation                                          */

START_TEST(test_api_config_default)
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

START_TEST(test_api_create_null_cfg)
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

START_TEST(test_api_create_bad_cfg)
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

START_TEST(test_api_create_zero_config)
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

START_TEST(test_api_einval)
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

START_TEST(test_api_arm_null_out)
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

START_TEST(test_api_overflow)
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

START_TEST(test_api_eshutdown)
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

START_TEST(test_api_now_monotonic)
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

START_TEST(test_api_clock_boottime)
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

START_TEST(test_api_max_timers)
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

	/*
	 * So does a timer that fires.  Not so soon that it could fire before
	 * the refused arm below (a sanitizer build is slow).
	 */
	ck_assert_int_eq(t_cancel(k, &tt, &tm[1]), 0);
	ck_assert_int_eq(t_arm(k, &tt, &quick, 200 * T_MS), 0);
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

START_TEST(test_api_max_timers_concurrent)
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

/*
 * The cap's count never passes the cap, even for a moment: a refused arm
 * that counted itself in and then out made a third arm, at that moment,
 * see a full service while a place was free (a spurious -EAGAIN).  One
 * thread arms against a full service while this one watches the count.
 */
static atomic_int over_stop, over_other;

static void *t_over_arms(void *arg)
{
	struct kairos *k = arg;

	while (!atomic_load(&over_stop))
		if (kairos_arm(k, 10 * T_SEC, t_cb_never, NULL, NULL) != -EAGAIN)
			atomic_fetch_add(&over_other, 1);
	return NULL;
}

START_TEST(test_api_max_timers_count_never_over)
{
	struct kairos_config c = t_cfg(1, 1);
	struct kairos *k;
	uint64_t end, seen = 0, looks = 0;
	pthread_t th;

	c.max_timers = 4;
	atomic_store(&over_other, 0);
	k = t_create(&c);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(kairos_arm(k, 10 * T_SEC, t_cb_never, NULL, NULL), 0);
	atomic_store(&over_stop, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, t_over_arms, k), 0);
	end = t_mono() + 300 * T_MS;
	while (t_mono() < end) {
		for (int i = 0; i < 1000; i++, looks++) {
			uint64_t n = atomic_load_explicit(&k->total_pending, memory_order_relaxed);

			if (n > seen)
				seen = n;
		}
	}
	atomic_store(&over_stop, 1);
	pthread_join(th, NULL);
	ck_assert_int_eq(t_int(&over_other), 0);	/* every arm refused */
	ck_assert_msg(seen == 4, "the count read %" PRIu64 " (cap 4) in %" PRIu64 " looks",
		      seen, looks);
	t_destroy(k, KAIROS_DRAIN_DROP, 4);
}
END_TEST

/* Arms key "held" (no replace) until told to stop; anything but -EEXIST counts. */
static void *t_held_key_arms(void *arg)
{
	struct kairos_timer_opts o = { .key = "held", .key_len = 4 };
	struct kairos *k = arg;

	while (!atomic_load(&over_stop))
		if (kairos_arm_opts(k, 10 * T_SEC, &o, t_cb_never, NULL, NULL) != -EEXIST)
			atomic_fetch_add(&over_other, 1);
	return NULL;
}

/*
 * A keyed arm retried against a held key takes no place under the cap: with
 * cap 2, one timer holding the key and one plain timer armed and cancelled
 * in turn, the plain arm is never refused.
 */
START_TEST(test_api_max_timers_held_key_takes_no_place)
{
	struct kairos_timer_opts o = { .key = "held", .key_len = 4 };
	struct kairos_config c = t_cfg(1, 1);
	struct kairos_stats st;
	uint64_t end, tries = 0, refused = 0;
	struct kairos *k;
	pthread_t th;
	kairos_id id;

	c.max_timers = 2;
	atomic_store(&over_other, 0);
	k = t_create(&c);
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_SEC, &o, t_cb_never, NULL, NULL), 0);
	atomic_store(&over_stop, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, t_held_key_arms, k), 0);
	end = t_mono() + 300 * T_MS;
	while (t_mono() < end) {
		int rc = kairos_arm(k, 10 * T_SEC, t_cb_never, NULL, &id);

		tries++;
		if (rc == -EAGAIN) {
			refused++;
			continue;
		}
		ck_assert_int_eq(rc, 0);
		ck_assert_int_eq(kairos_cancel(k, id), 0);
	}
	atomic_store(&over_stop, 1);
	pthread_join(th, NULL);
	ck_assert_int_eq(t_int(&over_other), 0);	/* every keyed arm found it held */
	ck_assert_msg(refused == 0, "%" PRIu64 " of %" PRIu64 " arms refused with a place free",
		      refused, tries);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.rejected, 0);
	ck_assert_uint_eq(st.armed, 1 + tries);
	ck_assert_uint_eq(st.pending, 1);
	t_destroy(k, KAIROS_DRAIN_DROP, 1);
}
END_TEST

/* ------------------------------------------------------------------ */
/* After destroy, -ESHUTDOWN comes first                               */

START_TEST(test_api_eshutdown_before_argument_errors)
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

START_TEST(test_api_tick_bounds)
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
/* Versions and reserved words                                         */

/* The library that runs is the header's version, in every spelling. */

#if !KAIROS_CHECK_VERSION(KAIROS_VERSION_MAJOR, KAIROS_VERSION_MINOR, KAIROS_VERSION_PATCH)
#error "KAIROS_CHECK_VERSION is false for the header's own version"
#endif
#if KAIROS_CHECK_VERSION(KAIROS_VERSION_MAJOR, KAIROS_VERSION_MINOR, KAIROS_VERSION_PATCH + 1)
#error "KAIROS_CHECK_VERSION is true for a later patch"
#endif

START_TEST(test_api_version)
{
	unsigned major = 99, minor = 99, patch = 99;
	const char *v = kairos_version(&major, &minor, &patch);
	char want[64];

	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v, KAIROS_VERSION_STRING);
	ck_assert_uint_eq(major, KAIROS_VERSION_MAJOR);
	ck_assert_uint_eq(minor, KAIROS_VERSION_MINOR);
	ck_assert_uint_eq(patch, KAIROS_VERSION_PATCH);
	ck_assert_uint_eq(KAIROS_VERSION_NUMBER, major << 16 | minor << 8 | patch);
	snprintf(want, sizeof(want), "%u.%u.%u", major, minor, patch);
	ck_assert_str_eq(v, want);
	/* Each part may be NULL; the string stays the same one. */
	ck_assert_ptr_eq(kairos_version(NULL, NULL, NULL), v);
	major = 99;
	ck_assert_ptr_eq(kairos_version(&major, NULL, NULL), v);
	ck_assert_uint_eq(major, KAIROS_VERSION_MAJOR);

	/* The check macro: the header's version and everything older, nothing newer. */
	ck_assert(KAIROS_CHECK_VERSION(0, 0, 0));
	ck_assert(KAIROS_CHECK_VERSION(major, minor, patch));
	ck_assert(!KAIROS_CHECK_VERSION(major, minor, patch + 1));
	ck_assert(!KAIROS_CHECK_VERSION(major, minor + 1, 0));
	ck_assert(!KAIROS_CHECK_VERSION(major + 1, 0, 0));
	if (patch > 0)
		ck_assert(KAIROS_CHECK_VERSION(major, minor, patch - 1));
	if (minor > 0)
		ck_assert(KAIROS_CHECK_VERSION(major, minor - 1, 255));
	if (major > 0)
		ck_assert(KAIROS_CHECK_VERSION(major - 1, 255, 255));
}
END_TEST

/*
 * The sizes of the structs callers allocate are part of the ABI: they grow
 * only into their reserved words (docs/ABI.md).  Pinned for LP64.
 */

START_TEST(test_api_struct_sizes)
{
#if UINTPTR_MAX == UINT64_MAX
	ck_assert_uint_eq(sizeof(struct kairos_config), 120);
	ck_assert_uint_eq(sizeof(struct kairos_stats), 176);
	ck_assert_uint_eq(sizeof(struct kairos_timer_opts), 104);
	ck_assert_uint_eq(sizeof(struct kairos_expiry), 56);
#endif
}
END_TEST

/* kairos_config_default() zero-fills the reserved words; create refuses any other. */

START_TEST(test_api_config_reserved)
{
	int base = t_thread_baseline();
	struct kairos_config c;
	struct kairos *k = NULL;
	size_t n = sizeof(c.reserved) / sizeof(c.reserved[0]);

	memset(&c, 0xa5, sizeof(c));
	kairos_config_default(&c);
	ck_assert_uint_eq(c.flags, 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(c.reserved[i] == 0, "reserved[%zu] not zero-filled", i);

	/* Every flag bit but the known ones is refused. */
	for (unsigned bit = 0; bit < 32; bit++) {
		c = t_cfg(1, 1);
		c.flags = 1u << bit;
		if (c.flags & (KAIROS_HUGE_PAGES | KAIROS_EXACT_CLOCK))
			continue;
		ck_assert_msg(kairos_create(&c, &k) == -EINVAL, "flags bit %u accepted", bit);
		ck_assert_ptr_null(k);
	}
	for (size_t i = 0; i < n; i++) {
		c = t_cfg(1, 1);
		c.reserved[i] = UINT64_C(1) << (i * 8);
		ck_assert_msg(kairos_create(&c, &k) == -EINVAL, "reserved[%zu] != 0 accepted", i);
		ck_assert_ptr_null(k);
	}
	/* A zero-filled config has them 0 too; and a failed create leaves no thread. */
	memset(&c, 0, sizeof(c));
	c.shards = 1;
	c.workers = 1;
	c.reserved[n - 1] = UINT64_MAX;
	ck_assert_int_eq(kairos_create(&c, &k), -EINVAL);
	ck_assert_int_eq(t_wait_threads(base, 2000), base);
}
END_TEST

/* kairos_stats() and kairos_queue_take() write 0 into their reserved words. */

START_TEST(test_api_output_reserved)
{
	struct kairos_config c = t_cfg(1, 1);
	struct kairos_timer_opts o;
	struct kairos_expiry e[2];
	struct kairos_queue *q;
	struct kairos_stats st;
	struct kairos *k;
	int arg;

	c.clock = KAIROS_CLOCK_MANUAL;
	k = t_create(&c);
	memset(&st, 0xa5, sizeof(st));
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.reserved_uint, 0);
	for (size_t i = 0; i < sizeof(st.reserved) / sizeof(st.reserved[0]); i++)
		ck_assert_msg(st.reserved[i] == 0, "stats reserved[%zu] = %#" PRIx64, i,
			      st.reserved[i]);

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	memset(&o, 0, sizeof(o));
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, T_MS, &o, NULL, &arg, NULL), 0);
	ck_assert_int_eq(kairos_clock_advance(k, 2 * T_MS), 0);
	memset(e, 0xa5, sizeof(e));
	ck_assert_int_eq(kairos_queue_take(q, e, 2, 0), 1);
	ck_assert_ptr_eq(e[0].arg, &arg);
	ck_assert_int_eq(e[0].status, 1);
	ck_assert_int_eq(e[0].reserved_int, 0);
	for (size_t i = 0; i < sizeof(e[0].reserved) / sizeof(e[0].reserved[0]); i++)
		ck_assert_msg(e[0].reserved[i] == 0, "expiry reserved[%zu] = %#" PRIx64, i,
			      e[0].reserved[i]);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);

	/* The final counters after destroy, too. */
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	memset(&st, 0xa5, sizeof(st));
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.reserved_uint, 0);
	for (size_t i = 0; i < sizeof(st.reserved) / sizeof(st.reserved[0]); i++)
		ck_assert_uint_eq(st.reserved[i], 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("api");
	TCase *tc = tcase_create("api");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_api_config_default);
	tcase_add_test(tc, test_api_create_null_cfg);
	tcase_add_test(tc, test_api_create_bad_cfg);
	tcase_add_test(tc, test_api_create_zero_config);
	tcase_add_test(tc, test_api_einval);
	tcase_add_test(tc, test_api_arm_null_out);
	tcase_add_test(tc, test_api_overflow);
	tcase_add_test(tc, test_api_eshutdown);
	tcase_add_test(tc, test_api_now_monotonic);
	tcase_add_test(tc, test_api_clock_boottime);
	tcase_add_test(tc, test_api_max_timers);
	tcase_add_test(tc, test_api_max_timers_concurrent);
	tcase_add_test(tc, test_api_max_timers_count_never_over);
	tcase_add_test(tc, test_api_max_timers_held_key_takes_no_place);
	tcase_add_test(tc, test_api_eshutdown_before_argument_errors);
	tcase_add_test(tc, test_api_tick_bounds);
	tcase_add_test(tc, test_api_version);
	tcase_add_test(tc, test_api_struct_sizes);
	tcase_add_test(tc, test_api_config_reserved);
	tcase_add_test(tc, test_api_output_reserved);
	suite_add_tcase(s, tc);
	return t_main(s, "api");
}
