/* SPDX-License-Identifier: MIT */
/*
 * t_util.h - what every test program shares: one PRNG and one seed, the
 * tallies and timers the service programs check the contract with, and one
 * main().
 *
 * Real-clock tests on a shared, noisy machine: every "never early" check is
 * a strict lower bound, every upper bound is generous, and nothing asserts
 * speed.  Callbacks never call ck_assert(): they run on the service's
 * threads, where a failing assertion would exit the process without saying
 * which timer misbehaved (or, without fork mode, longjmp across threads).
 * They record what they saw in atomics instead, and the test thread asserts
 * on those once the callbacks are done.
 */
#ifndef KAIROS_T_UTIL_H
#define KAIROS_T_UTIL_H

#include <check.h>
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#include "fault.h"

#define T_MS	1000000ull
#define T_US	1000ull
#define T_SEC	1000000000ull

/*
 * What a test itself counted, to be compared with kairos_stats().  The
 * meanings follow struct kairos_stats: @armed counts arms that returned 0,
 * @fired calls of one-shot callbacks with a status > 0, @cancelled cancels
 * that returned 0 plus periodic timers stopped by a cancel while running
 * (-EBUSY or -EDEADLK; once per timer), @periodic_runs calls of periodic
 * callbacks with a status > 0.  The rest are the callbacks' findings.
 */
struct t_tally {
	atomic_uint_least64_t armed;
	atomic_uint_least64_t fired;
	atomic_uint_least64_t cancelled;
	atomic_uint_least64_t periodic_runs;
	atomic_uint_least64_t notified;	/* calls with status -ECANCELED */
	atomic_uint_least64_t early;	/* calls that started before their deadline */
	atomic_uint_least64_t bad;	/* unexpected statuses, ids or results */
	atomic_uint_least64_t late_max;	/* worst lateness seen, ns */
	atomic_uint_least64_t early_by;	/* worst earliness seen, ns */
	clockid_t clock;		/* the service clock the deadlines use */
};

#define T_CALLS	8

/*
 * One timer as the test sees it.  @base is the earliest time the timer may
 * run: for a one-shot timer its deadline (the service clock read before
 * arming, plus the delay), for a periodic one the clock read before arming;
 * the call that brings the covered expirations to S may not start before
 * base + S * period.  A base of 0 turns the check in the callback off, for
 * tests that move deadlines and check afterwards from @first_ns.
 */
struct t_timer {
	struct t_tally *tally;
	uint64_t base;
	uint64_t period;		/* 0 for a one-shot timer */
	uint64_t deadline;		/* as armed: clock before the call + delay */
	kairos_id id;			/* as returned by the arm call */
	atomic_uint_least64_t cb_id;	/* as passed to the callback */
	atomic_int entered;		/* calls with status > 0 that began */
	atomic_int runs;		/* ... and got past their bookkeeping */
	atomic_int covered;		/* sum of those statuses */
	atomic_int max_status;
	atomic_int notified;		/* calls with -ECANCELED */
	atomic_int cancel_ok;		/* cancels of it that returned 0 */
	atomic_int stopped;		/* periodic: a cancel stopped it while running */
	atomic_uint_least64_t first_ns;	/* start of the first call with status > 0 */
	atomic_uint_least64_t last_ns;	/* start of the latest one */
	atomic_uint_least64_t at[T_CALLS];	/* starts of the first calls */
	atomic_int st[T_CALLS];		/* and their statuses */
	int rc;				/* scratch for the test */
};

/* Plain loads, as functions so that failed assertions print what was read. */
static inline int t_int(atomic_int *p)
{
	return atomic_load(p);
}

static inline uint64_t t_u64(atomic_uint_least64_t *p)
{
	return atomic_load(p);
}

static inline uint64_t t_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * T_SEC + (uint64_t)ts.tv_nsec;
}

static inline uint64_t t_mono(void)
{
	return t_ns(CLOCK_MONOTONIC);
}

static inline void t_sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / T_SEC),
			       .tv_nsec = (long)(ns % T_SEC) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static inline void t_sleep_ms(unsigned ms)
{
	t_sleep_ns((uint64_t)ms * T_MS);
}

/*
 * One PRNG and one seed for every test program.  The seed is $T_SEED
 * (decimal or 0x-hex) when set, else a fixed value, so a plain run is
 * reproducible; every program prints it first (t_main()), and
 * "T_SEED=<seed> CK_RUN_CASE=<case> build/tests/<program>" replays a run
 * (CK_FORK=no puts it under a debugger).  Each test and thread derives its
 * own stream with t_seed(salt).
 */
static uint64_t t_seed_value = UINT64_C(0x6b6169726f73);	/* "kairos" */

/* splitmix64: tiny, fast, and every 64-bit state is a good one. */
static inline uint64_t t_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A value in [0, n); 0 when n is 0.  The modulo bias is irrelevant here. */
static inline uint64_t t_rand_below(uint64_t *state, uint64_t n)
{
	return n ? t_rand(state) % n : 0;
}

/* The first state of the stream named @salt. */
static inline uint64_t t_seed(uint64_t salt)
{
	return t_seed_value ^ (salt * UINT64_C(0x9e3779b97f4a7c15));
}

static inline void t_atomic_max(atomic_uint_least64_t *v, uint64_t x)
{
	uint64_t cur = atomic_load_explicit(v, memory_order_relaxed);

	while (x > cur &&
	       !atomic_compare_exchange_weak_explicit(v, &cur, x, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* Waits until *@v >= @want, for at most @ms; returns the last value read. */
static inline uint64_t t_wait_u64(atomic_uint_least64_t *v, uint64_t want, unsigned ms)
{
	uint64_t end = t_mono() + (uint64_t)ms * T_MS;
	uint64_t x;

	while ((x = atomic_load(v)) < want && t_mono() < end)
		t_sleep_ns(200 * T_US);
	return x;
}

static inline int t_wait_int(atomic_int *v, int want, unsigned ms)
{
	uint64_t end = t_mono() + (uint64_t)ms * T_MS;
	int x;

	while ((x = atomic_load(v)) < want && t_mono() < end)
		t_sleep_ns(200 * T_US);
	return x;
}

/* Threads of this process, from /proc/self/task. */
/* Entries of directory @path, "." and ".." aside. */
static inline int t_count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static inline int t_count_threads(void)
{
	return t_count_dir("/proc/self/task");
}

/*
 * Waits up to @ms for the thread count to come back to @want: a joined
 * thread may linger in /proc for a moment after pthread_join() returns,
 * because the kernel clears the join futex before it reaps the task.
 */
static inline int t_wait_threads(int want, unsigned ms)
{
	uint64_t end = t_mono() + (uint64_t)ms * T_MS;
	int n;

	while ((n = t_count_threads()) != want && t_mono() < end)
		t_sleep_ms(1);
	return n;
}

static inline void *t_noop_thread(void *arg)
{
	return arg;
}

/*
 * The thread count to compare against, taken after starting and joining one
 * thread of our own: TSan starts its background thread at a process's first
 * pthread_create(), and that thread is not the service's.
 */
static inline int t_thread_baseline(void)
{
	pthread_t th;

	ck_assert_int_eq(pthread_create(&th, NULL, t_noop_thread, NULL), 0);
	pthread_join(th, NULL);
	/* Our joined thread may linger in /proc a moment; take the count once it has gone. */
	for (int i = 0, prev = -1, n; i < 200; i++, prev = n) {
		n = t_count_threads();
		if (n == prev)
			return n;
		t_sleep_ms(2);
	}
	return t_count_threads();
}

static inline void t_timer_init(struct t_timer *t, struct t_tally *tally, uint64_t base,
				uint64_t period)
{
	memset(t, 0, sizeof(*t));
	t->tally = tally;
	t->base = base;
	t->period = period;
}

/*
 * The callback of struct t_timer: counts the call, checks the id and the
 * status, and checks it did not start before its deadline.
 */
static inline void t_cb(void *arg, kairos_id id, int status)
{
	struct t_timer *t = arg;
	struct t_tally *ta = t->tally;
	uint64_t now = t_ns(ta->clock);
	int entered, covered;

	atomic_store(&t->cb_id, id);
	if (status == -ECANCELED) {
		atomic_fetch_add(&t->notified, 1);
		atomic_fetch_add(&ta->notified, 1);
		return;
	}
	if (status <= 0) {
		atomic_fetch_add(&ta->bad, 1);
		return;
	}

	entered = atomic_fetch_add(&t->entered, 1) + 1;
	covered = atomic_fetch_add(&t->covered, status) + status;
	if (entered == 1)
		atomic_store(&t->first_ns, now);
	atomic_store(&t->last_ns, now);
	if (entered <= T_CALLS) {
		atomic_store(&t->at[entered - 1], now);
		atomic_store(&t->st[entered - 1], status);
	}
	if (status > atomic_load(&t->max_status))
		atomic_store(&t->max_status, status);
	/* A one-shot timer runs once, covering one expiration. */
	if (t->period == 0 && (status != 1 || entered != 1))
		atomic_fetch_add(&ta->bad, 1);
	if (t->base) {
		uint64_t need = t->base + (uint64_t)covered * t->period;

		if (now < need) {
			atomic_fetch_add(&ta->early, 1);
			t_atomic_max(&ta->early_by, need - now);
		} else {
			t_atomic_max(&ta->late_max, now - need);
		}
	}
	/*
	 * Published last: a test that saw @runs or the tally move may read
	 * everything above, and may re-arm @t, which this call no longer reads.
	 */
	atomic_fetch_add(&t->runs, 1);
	atomic_fetch_add(t->period ? &ta->periodic_runs : &ta->fired, 1);
}

/*
 * kairos_destroy() keeps a small header allocated so that later calls can
 * answer -ESHUTDOWN (kairos.h).  A program keeps its pointer to it; the
 * tests keep theirs here, past the end of the test function, so that
 * LeakSanitizer reports real leaks and not that header.
 */
#define T_KEPT	1024
static struct kairos *t_kept[T_KEPT];
static atomic_uint t_nkept;

static inline void t_keep(struct kairos *k)
{
	if (k)
		t_kept[atomic_fetch_add(&t_nkept, 1) % T_KEPT] = k;
}

/* The service clock, asserted to work. */
static inline uint64_t t_now(struct kairos *k)
{
	uint64_t now = 0;
	int rc = kairos_now(k, &now);

	ck_assert_msg(rc == 0, "kairos_now: %d", rc);
	return now;
}

/*
 * Arms @t as a one-shot timer @delay_ns from now with callback @fn (t_cb or
 * a wrapper around it; @t is its argument), its deadline taken from the
 * service clock read before the call.  With @check false the callback does
 * not judge earliness (the test moves the deadline and judges afterwards
 * from @first_ns).  Returns the arm's result; counts a success.
 */
static inline int t_arm_fn(struct kairos *k, struct t_tally *ta, struct t_timer *t,
			   uint64_t delay_ns, kairos_fn fn, bool check)
{
	uint64_t before = 0;
	int rc;

	if (kairos_now(k, &before) != 0)
		atomic_fetch_add(&ta->bad, 1);
	t_timer_init(t, ta, check ? before + delay_ns : 0, 0);
	t->deadline = before + delay_ns;
	rc = kairos_arm(k, delay_ns, fn, t, &t->id);
	if (rc == 0)
		atomic_fetch_add(&ta->armed, 1);
	return rc;
}

static inline int t_arm(struct kairos *k, struct t_tally *ta, struct t_timer *t, uint64_t delay_ns)
{
	return t_arm_fn(k, ta, t, delay_ns, t_cb, true);
}

static inline int t_arm_at(struct kairos *k, struct t_tally *ta, struct t_timer *t,
			   uint64_t deadline)
{
	int rc;

	/* A base of 0 would mean "do not check": deadline 0 checks against 1. */
	t_timer_init(t, ta, deadline ? deadline : 1, 0);
	t->deadline = deadline;
	rc = kairos_arm_at(k, deadline, t_cb, t, &t->id);
	if (rc == 0)
		atomic_fetch_add(&ta->armed, 1);
	return rc;
}

static inline int t_arm_every_fn(struct kairos *k, struct t_tally *ta, struct t_timer *t,
				 uint64_t period, kairos_fn fn, bool check)
{
	uint64_t before = 0;
	int rc;

	if (kairos_now(k, &before) != 0)
		atomic_fetch_add(&ta->bad, 1);
	t_timer_init(t, ta, check ? before : 0, period);
	t->deadline = before + period;
	rc = kairos_arm_every(k, period, fn, t, &t->id);
	if (rc == 0)
		atomic_fetch_add(&ta->armed, 1);
	return rc;
}

static inline int t_arm_every(struct kairos *k, struct t_tally *ta, struct t_timer *t,
			      uint64_t period)
{
	return t_arm_every_fn(k, ta, t, period, t_cb, true);
}

/*
 * Books the result @rc of a cancel (or cancel_sync) of @t: 0 ends the timer;
 * for a periodic timer -EBUSY and -EDEADLK stop it too, once.
 */
static inline void t_book_cancel(struct t_tally *ta, struct t_timer *t, int rc)
{
	if (rc == 0) {
		atomic_fetch_add(&t->cancel_ok, 1);
		atomic_fetch_add(&ta->cancelled, 1);
	} else if (t->period && (rc == -EBUSY || rc == -EDEADLK)) {
		if (atomic_exchange(&t->stopped, 1) == 0)
			atomic_fetch_add(&ta->cancelled, 1);
	}
}

static inline int t_cancel(struct kairos *k, struct t_tally *ta, struct t_timer *t)
{
	int rc = kairos_cancel(k, t->id);

	t_book_cancel(ta, t, rc);
	return rc;
}

static inline int t_cancel_sync(struct kairos *k, struct t_tally *ta, struct t_timer *t)
{
	int rc = kairos_cancel_sync(k, t->id);

	t_book_cancel(ta, t, rc);
	return rc;
}

/* The callbacks' findings: nothing early, nothing odd, lateness bounded. */
static inline void t_check_calls(struct t_tally *ta, uint64_t late_bound_ns)
{
	ck_assert_msg(atomic_load(&ta->early) == 0,
		      "%" PRIu64 " callbacks started early (worst by %" PRIu64 " ns)",
		      (uint64_t)atomic_load(&ta->early), (uint64_t)atomic_load(&ta->early_by));
	ck_assert_msg(atomic_load(&ta->bad) == 0, "%" PRIu64 " unexpected statuses or results",
		      (uint64_t)atomic_load(&ta->bad));
	if (late_bound_ns)
		ck_assert_msg(atomic_load(&ta->late_max) <= late_bound_ns,
			      "a callback started %" PRIu64 " ns late (bound %" PRIu64 ")",
			      (uint64_t)atomic_load(&ta->late_max), late_bound_ns);
}

static inline bool t_stats_match(const struct kairos_stats *s, struct t_tally *ta)
{
	return s->armed == atomic_load(&ta->armed) && s->fired == atomic_load(&ta->fired) &&
	       s->cancelled == atomic_load(&ta->cancelled) &&
	       s->periodic_runs == atomic_load(&ta->periodic_runs) &&
	       s->armed == s->fired + s->cancelled + s->drained + s->pending;
}

/*
 * The stats identity, checked once the service is quiet: armed == fired +
 * cancelled + drained + pending, the counters equal the test's own tallies,
 * and no callback started early.  The caller has already waited for its own
 * counters; the service may still be finishing the bookkeeping around a
 * callback that returned, so the snapshot is retried for a while before the
 * assertions judge the last one.  Returns the snapshot.
 */
static inline struct kairos_stats t_check_identity(struct kairos *k, struct t_tally *ta)
{
	struct kairos_stats s;
	uint64_t end = t_mono() + 3 * T_SEC;
	int rc;

	for (;;) {
		memset(&s, 0, sizeof(s));
		rc = kairos_stats(k, &s);
		ck_assert_msg(rc == 0, "kairos_stats: %d", rc);
		if (t_stats_match(&s, ta) || t_mono() > end)
			break;
		t_sleep_ms(1);
	}
	ck_assert_msg(s.armed == s.fired + s.cancelled + s.drained + s.pending,
		      "identity: armed %" PRIu64 " != fired %" PRIu64 " + cancelled %" PRIu64
		      " + drained %" PRIu64 " + pending %" PRIu64,
		      s.armed, s.fired, s.cancelled, s.drained, s.pending);
	ck_assert_msg(s.armed == atomic_load(&ta->armed), "armed: stats %" PRIu64 ", test %" PRIu64,
		      s.armed, (uint64_t)atomic_load(&ta->armed));
	ck_assert_msg(s.fired == atomic_load(&ta->fired), "fired: stats %" PRIu64 ", test %" PRIu64,
		      s.fired, (uint64_t)atomic_load(&ta->fired));
	ck_assert_msg(s.cancelled == atomic_load(&ta->cancelled),
		      "cancelled: stats %" PRIu64 ", test %" PRIu64, s.cancelled,
		      (uint64_t)atomic_load(&ta->cancelled));
	ck_assert_msg(s.periodic_runs == atomic_load(&ta->periodic_runs),
		      "periodic_runs: stats %" PRIu64 ", test %" PRIu64, s.periodic_runs,
		      (uint64_t)atomic_load(&ta->periodic_runs));
	ck_assert_msg(s.early == 0, "stats.early = %" PRIu64, s.early);
	/* Percentiles are ordered and never above the exact maximum. */
	ck_assert_msg(s.lateness_p50_ns <= s.lateness_p99_ns &&
		      s.lateness_p99_ns <= s.lateness_max_ns,
		      "lateness p50 %" PRIu64 ", p99 %" PRIu64 ", max %" PRIu64,
		      s.lateness_p50_ns, s.lateness_p99_ns, s.lateness_max_ns);
	ck_assert_msg(s.drained == 0, "stats.drained = %" PRIu64 " before destroy", s.drained);
	ck_assert_msg(atomic_load(&ta->early) == 0,
		      "%" PRIu64 " callbacks started early (worst by %" PRIu64 " ns)",
		      (uint64_t)atomic_load(&ta->early), (uint64_t)atomic_load(&ta->early_by));
	ck_assert_msg(atomic_load(&ta->bad) == 0, "%" PRIu64 " unexpected statuses or results",
		      (uint64_t)atomic_load(&ta->bad));
	return s;
}

/* ---- shared by the service programs ------------------------------------ */

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
#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define T_TSAN 1
#endif
#endif
#ifndef T_TSAN
#define T_TSAN 0
#endif

/* The generous bound on lateness: a loaded 2-core machine, maybe under ASan. */
#define T_LATE	(1500 * T_MS)
/* How long a test waits for callbacks that should come within milliseconds. */
#define T_WAIT_MS	5000

/* The tallies of the test running now (each test runs in its own child). */
static struct t_tally tt;
static pthread_t t_main_thread;

static inline void t_setup(void)
{
	memset(&tt, 0, sizeof(tt));
	tt.clock = CLOCK_MONOTONIC;
	t_main_thread = pthread_self();
}

static inline unsigned t_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		n = 1;
	return n > 256 ? 256 : (unsigned)n;
}

static inline struct kairos_config t_cfg(unsigned shards, unsigned workers)
{
	struct kairos_config c;

	kairos_config_default(&c);
	c.shards = shards;
	c.workers = workers;
	return c;
}

static inline struct kairos *t_create(const struct kairos_config *cfg)
{
	struct kairos *k = NULL;
	int rc = kairos_create(cfg, &k);

	ck_assert_msg(rc == 0, "kairos_create: %d (%s)", rc, strerror(-rc));
	ck_assert_ptr_nonnull(k);
	t_keep(k);
	return k;
}

static inline void t_destroy(struct kairos *k, int how, int want)
{
	int rc = kairos_destroy(k, how);

	ck_assert_msg(rc == want, "kairos_destroy: %d, want %d", rc, want);
}

static inline uint64_t t_pending(struct kairos *k)
{
	struct kairos_stats s;

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	return s.pending;
}

/* Waits for the one-shot timers of the tally to have fired @n callbacks. */
static inline void t_wait_fired(uint64_t n)
{
	uint64_t got = t_wait_u64(&tt.fired, n, T_WAIT_MS);

	ck_assert_msg(got == n, "%" PRIu64 " of %" PRIu64 " callbacks ran", got, n);
}

/*
 * A one-shot whose callback was seen to run (it counted), or a periodic
 * timer stopped while its run was under way, may still be running, and a
 * cancel then says -EBUSY: waits until it has ended, after which a cancel
 * or reset of @id says -ENOENT.  Only for a timer known to have run: a
 * pending one would be cancelled.
 */
static inline void t_wait_ended(struct kairos *k, kairos_id id)
{
	int rc = kairos_cancel_sync(k, id);

	ck_assert_msg(rc == -ENOENT || rc == -EBUSY, "cancel_sync of a timer that ran: %d", rc);
}

/* The reason shard 0 of @k gives, once it reports backend @want (T_WAIT_MS at most). */
static inline const char *t_backend_becomes(struct kairos *k, const char *want)
{
	const char *name = NULL, *why = NULL;

	for (int i = 0; i < T_WAIT_MS; i++) {
		ck_assert_int_eq(kairos_backend_info(k, 0, &name, &why), 0);
		if (strcmp(name, want) == 0)
			break;
		t_sleep_ms(1);
	}
	ck_assert_str_eq(name, want);
	return why;
}

/* A callback for calls that must fail: it must never run. */
static inline void t_cb_never(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
	atomic_fetch_add(&tt.bad, 1);
}

/* Resident set size in bytes. */
static inline uint64_t t_rss(void)
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

static inline void t_cb_block(void *arg, kairos_id id, int status)
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

static inline void t_block_init(struct t_block *b, int periodic, uint64_t hold_ns)
{
	memset(b, 0, sizeof(*b));
	b->ta = &tt;
	b->periodic = periodic;
	b->hold_ns = hold_ns;
}

static inline kairos_id t_block_arm(struct kairos *k, struct t_block *b, uint64_t delay_ns)
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

static inline void t_block_wait_started(struct t_block *b)
{
	ck_assert_msg(t_wait_int(&b->started, 1, T_WAIT_MS) == 1,
		      "the blocking callback never started");
}


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

static inline void t_cb_self_sync(void *arg, kairos_id id, int status)
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

/*
 * t_main - the main() of every test program: takes $T_SEED, prints it so a
 * failure in CI can be replayed, and runs @s (CK_RUN_CASE and CK_VERBOSITY
 * apply).
 */
static inline int t_main(Suite *s, const char *prog)
{
	const char *env = getenv("T_SEED");
	SRunner *sr;
	int failed;

	if (env && *env) {
		char *end;

		errno = 0;
		t_seed_value = strtoull(env, &end, 0);
		if (errno || *end) {
			fprintf(stderr, "%s: bad T_SEED '%s'\n", prog, env);
			return EXIT_FAILURE;
		}
	}
	printf("%s: T_SEED=%#" PRIx64 "\n", prog, t_seed_value);
	fflush(stdout);
	/* Every step that may sleep checks that it runs outside a read-side section. */
	atomic_store(&fault_sleep_check, 1);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* KAIROS_T_UTIL_H */
