/* SPDX-License-Identifier: MIT */
/*
 * service.c - kairos-bench modes "service" and "keys": the service through
 * its public API, called from the main thread (not a shard thread), as a
 * server's own threads would call it.  Each run creates fresh services
 * (cfg.shards from --shards, the rest default) and measures, at N pending:
 *
 *   arm (fresh pool)  N arms, delays U[10, 60] s, into a service that never
 *                     held a timer: the pool's growth is timed.
 *   arm               the same after those N were cancelled: recycled
 *                     records in a scattered order, a server's steady state.
 *   push-later        kairos_reset() (random order) to deadline + U[1, 1000]
 *                     ms; then the same through kairos_reset_at() (no clock
 *                     read), kairos_reset_n() (64 ids a call), and
 *                     kairos_reset() after a kairos_prefetch() 16 ids ahead.
 *   push-earlier      kairos_reset() to 2 ms + U[1, 1000] ms before that.
 *   cancel            kairos_cancel() (random order); each must return 0;
 *                     then, after N more arms each time, kairos_cancel_n()
 *                     (64 ids a call), and kairos_cancel() after a
 *                     kairos_prefetch() 16 ids ahead.
 *   CAS, clock+CAS    floors: one atomic CAS on a random 64-byte slot per
 *                     op, alone and after a clock_gettime().  The vDSO orders
 *                     its TSC read after earlier loads, so the gap between
 *                     the two is what that ordering costs in cache misses.
 *   pf+clock+CAS      the same with the slot prefetched before the clock
 *                     read, as kairos_reset() prefetches its record before
 *                     its ordered read: the miss then overlaps the read.
 *   push-later/...    push-later over each of those two floors, in the same
 *                     run (medians of the runs' ratios); the goal is set on
 *                     clock+CAS.
 *   expiry            N due over 50 ms; N over first-to-last callback (a
 *                     lower bound when that is barely the window), and the
 *                     whole process's CPU per timer.
 *   lateness          20000 timers U[1, 200] ms with the N pending: the
 *                     callback's CLOCK_MONOTONIC - (kairos_now() + delay);
 *                     kairos_stats() measures from the deadline rounded up
 *                     to a tick, so its p99 is shown, not judged.
 *   bytes/timer       RSS delta over N (after malloc_trim(0)), all in: the
 *                     caller's kairos_id array is mapped after the baseline
 *                     and filled by the arms, so its 8 B count too; its
 *                     sizeof expectation (the record alone), and what stays
 *                     after kairos_destroy().
 *   CPU/1e6 mixed     CPU of all threads over 1e6 ops (40% push-later, 30%
 *                     arm, 30% cancel) until quiet, and shard wake-ups/s.
 *   idle wake-ups     over 1 s of sleep, empty and with N pending: must be 0.
 *
 * Then, once, 2 shards against 1: --threads threads arming and cancelling
 * through a window of 1000 pending, operations per second.
 *
 * kairos_reset() takes a delay, so the pushes read the clock once per 1024
 * ops and turn each target into a delay from it: a push-earlier is a tick
 * earlier unless a block took over 2 ms, and the table counts any that were
 * not.  Timed loops read their inputs from lists in order, so that only the
 * records are touched at random; between phases the bench waits until the
 * process is quiet, so that no phase pays for the shards still filing the
 * previous one.  One untimed warm-up run per size comes first.
 *
 * Mode "keys" runs one sequence twice per run, each on a fresh service and
 * taking turns going first: through ids, and through a distinct 13-byte key
 * per timer (kairos_arm_opts, kairos_key_reset, kairos_key_find,
 * kairos_key_cancel), with the same delays and orders: arm (fresh pool),
 * bytes/timer (records, ext entries, key nodes, buckets), arm again, push-
 * later, find (keys only), cancel; medians of each path and key over id.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#include "bench.h"
#include "internal.h"	/* struct rec and CHUNK_RECS: the bytes a timer should cost */

#define SB_GOAL_N	1000000u	/* the N the goals are set at */
#define SB_MAX_N	10000000u
#define SB_EARLIER_PAD	(2 * BENCH_MS)	/* a push-earlier goes this much further */
#define SB_BLOCK	1024u		/* operations per clock reading in the pushes */
#define SB_EXP_WINDOW	(50 * BENCH_MS)	/* expiry deadlines U[0, this) after the start */
#define SB_LAT_TIMERS	20000u
#define SB_LAT_MAX_DELAY (200 * BENCH_MS)
#define SB_MIX_OPS	1000000u
#define SB_SCALE_OPS	1000000u	/* per thread */
#define SB_SCALE_WINDOW	1000u		/* pending per thread */
#define SB_MAX_THREADS	64u
#define SB_WAIT_LIMIT	(60 * BENCH_S)	/* no callback wait may take longer */

/* Table order. */
enum sb_row {
	SB_ARM_FRESH,
	SB_ARM,
	SB_LATER,
	SB_LATER_AT,
	SB_LATER_N,
	SB_LATER_PF,
	SB_EARLIER,
	SB_CANCEL,
	SB_CANCEL_N,
	SB_CANCEL_PF,
	SB_FLOOR,
	SB_FLOOR_CLOCK,
	SB_FLOOR_PF,
	SB_LATER_X_CLOCK,
	SB_LATER_X_PF,
	SB_EXP_RATE,
	SB_EXP_SHARD,
	SB_EXP_CPU,
	SB_LAT_P50,
	SB_LAT_P99,
	SB_LAT_MAX,
	SB_LAT_EARLY,
	SB_LAT_P99_STATS,
	SB_LAT_EARLY_STATS,
	SB_BYTES,
	SB_BYTES_SIZEOF,
	SB_BYTES_AFTER,
	SB_MIX_CPU,
	SB_MIX_WAKE,
	SB_IDLE_NONE,
	SB_IDLE_PENDING,
	SB_NROWS
};

enum sb_goal_kind {
	SB_NO_GOAL,
	SB_LE,		/* value <= goal, judged at N = SB_GOAL_N */
	SB_LE_X,	/* the same for a ratio: "<= 1.2x" */
	SB_ZERO,	/* value == 0, judged at every N */
};

static const struct sb_row_info {
	const char *name;
	const char *unit;
	int prec;
	enum bench_agg agg;
	enum sb_goal_kind kind;
	double goal;		/* SB_LE; for the lateness p99: set at run time */
} sb_rows[SB_NROWS] = {
	[SB_ARM_FRESH] = { "arm (fresh pool)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_ARM] = { "arm", "ns/op", 1, BENCH_MEDIAN, SB_LE, 60 },
	[SB_LATER] = { "push-later", "ns/op", 1, BENCH_MEDIAN, SB_LE, 30 },
	[SB_LATER_AT] = { "push-later (reset_at)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_LATER_N] = { "push-later (reset_n, 64)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_LATER_PF] = { "push-later (prefetch, 16)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_EARLIER] = { "push-earlier", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_CANCEL] = { "cancel", "ns/op", 1, BENCH_MEDIAN, SB_LE, 60 },
	[SB_CANCEL_N] = { "cancel (cancel_n, 64)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_CANCEL_PF] = { "cancel (prefetch, 16)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_FLOOR] = { "CAS (floor)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_FLOOR_CLOCK] = { "clock+CAS (floor)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_FLOOR_PF] = { "pf+clock+CAS (floor)", "ns/op", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	/* Exact push-later over each floor, the same run's: the goal is on clock+CAS. */
	[SB_LATER_X_CLOCK] = { "push-later/clock+CAS", "x", 2, BENCH_MEDIAN, SB_LE_X, 1.2 },
	[SB_LATER_X_PF] = { "push-later/pf+clock+CAS", "x", 2, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_EXP_RATE] = { "expiry", "M/s", 2, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_EXP_SHARD] = { "expiry per shard", "M/s", 2, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_EXP_CPU] = { "expiry CPU", "ns/timer", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_LAT_P50] = { "lateness p50", "us", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_LAT_P99] = { "lateness p99", "us", 1, BENCH_MEDIAN, SB_LE, 0 },
	[SB_LAT_MAX] = { "lateness max", "us", 1, BENCH_MAX, SB_NO_GOAL, 0 },
	[SB_LAT_EARLY] = { "early", "calls", 0, BENCH_SUM, SB_ZERO, 0 },
	[SB_LAT_P99_STATS] = { "lateness p99 (stats)", "us", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_LAT_EARLY_STATS] = { "early (stats)", "calls", 0, BENCH_SUM, SB_ZERO, 0 },
	[SB_BYTES] = { "bytes/timer (all in)", "B", 2, BENCH_MEDIAN, SB_LE, 64 },
	[SB_BYTES_SIZEOF] = { "bytes/timer (sizeof)", "B", 2, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_BYTES_AFTER] = { "resident after destroy", "B/timer", 2, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_MIX_CPU] = { "CPU per 1e6 mixed ops", "ms", 1, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_MIX_WAKE] = { "wake-ups, mixed load", "/s", 0, BENCH_MEDIAN, SB_NO_GOAL, 0 },
	[SB_IDLE_NONE] = { "idle wake-ups, empty", "/s", 0, BENCH_MAX, SB_ZERO, 0 },
	[SB_IDLE_PENDING] = { "idle wake-ups, N pending", "/s", 0, BENCH_MAX, SB_ZERO, 0 },
};

struct sb_opts {
	struct bench_opts b;
	unsigned int shards;	/* 0: one per CPU */
	unsigned int threads;	/* for the scaling table */
	bool huge_pages;	/* cfg.flags KAIROS_HUGE_PAGES */
	struct kairos_config cfg;	/* what every service of the N tables gets */
};

/* Notes on a size's runs, printed under its table when not zero. */
struct sb_notes {
	uint64_t not_earlier;	/* push-earlier ops not certainly earlier */
	unsigned exp_overlap;	/* runs whose arming ran into the expiry */
	unsigned exp_bound;	/* runs whose expiry kept up with the deadlines */
};

/* ------------------------------------------------------------------------
 * Measuring the process: CPU, memory, quiet.
 */

static void sb_stats(struct kairos *k, struct kairos_stats *st)
{
	int rc = kairos_stats(k, st);

	if (rc)
		bench_die("kairos_stats: %s", strerror(-rc));
}

static struct kairos *sb_create(const struct kairos_config *cfg)
{
	struct kairos *k;
	int rc = kairos_create(cfg, &k);

	if (rc)
		bench_die("kairos_create: %s", strerror(-rc));
	return k;
}

/* Destroys @k, dropping what is pending; the number dropped must be @expect. */
static void sb_destroy(struct kairos *k, uint64_t expect, const char *what)
{
	int rc = kairos_destroy(k, KAIROS_DRAIN_DROP);

	if (rc < 0)
		bench_die("%s: kairos_destroy: %s", what, strerror(-rc));
	if ((uint64_t)rc != expect)
		bench_die("%s: kairos_destroy dropped %d timers, expected %" PRIu64,
			  what, rc, expect);
}

/* ------------------------------------------------------------------------
 * Callbacks.
 */

/* Timers armed 10..60 s ahead must not fire while a run lasts. */
static _Atomic uint64_t sb_strays;

static void sb_stray_cb(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
	atomic_fetch_add_explicit(&sb_strays, 1, memory_order_relaxed);
}

static void sb_no_strays(const char *what)
{
	uint64_t n = atomic_load_explicit(&sb_strays, memory_order_relaxed);

	if (n)
		bench_die("%s: %" PRIu64 " timers armed %" PRIu64 " s or more ahead fired: "
			  "the run took too long for this N", what, n, BENCH_FAR_MIN / BENCH_S);
}

/*
 * The expiry callback counts per thread, in a tally of the worker's own, so
 * that the count adds no shared cache line (and no lock) to what is
 * measured; a worker registers its tally on its first callback of a
 * measurement.  It reads the clock on its first call and every 64th.
 */
#define SB_MAX_TALLIES	4096u
#define SB_STAMP_EVERY	64u

struct sb_tally {
	_Atomic uint64_t n;		/* callbacks run; written by its thread only */
	_Atomic uint64_t first_ns;
	_Atomic uint64_t last_ns;	/* at the last multiple of SB_STAMP_EVERY */
	uint64_t gen;			/* the measurement it is registered for */
} __attribute__((aligned(BENCH_ALIGN)));

static _Thread_local struct sb_tally sb_tls;
static _Atomic(struct sb_tally *) sb_tallies[SB_MAX_TALLIES];
static _Atomic unsigned sb_ntallies;
static _Atomic uint64_t sb_gen;

static void sb_tally_register(struct sb_tally *t, uint64_t gen)
{
	uint64_t now = bench_now_ns();
	unsigned i;

	t->gen = gen;
	atomic_store_explicit(&t->n, 0, memory_order_relaxed);
	atomic_store_explicit(&t->first_ns, now, memory_order_relaxed);
	atomic_store_explicit(&t->last_ns, now, memory_order_relaxed);
	i = atomic_fetch_add_explicit(&sb_ntallies, 1, memory_order_relaxed);
	if (i >= SB_MAX_TALLIES)
		bench_die("more than %u callback threads", SB_MAX_TALLIES);
	/* Release: the fields above before the reader finds the tally. */
	atomic_store_explicit(&sb_tallies[i], t, memory_order_release);
}

static void sb_tally_cb(void *arg, kairos_id id, int status)
{
	struct sb_tally *t = &sb_tls;
	uint64_t gen = atomic_load_explicit(&sb_gen, memory_order_relaxed), n;

	(void)arg;
	(void)id;
	(void)status;
	if (t->gen != gen)
		sb_tally_register(t, gen);
	n = atomic_load_explicit(&t->n, memory_order_relaxed) + 1;
	if (n % SB_STAMP_EVERY == 0)
		atomic_store_explicit(&t->last_ns, bench_now_ns(), memory_order_relaxed);
	/* Release, paired with sb_tally_sum(): the stamp before the count. */
	atomic_store_explicit(&t->n, n, memory_order_release);
}

/*
 * Starts a measurement.  Only while no callback of sb_tally_cb() can run:
 * the tallies of the last one belonged to threads that are gone.
 */
static void sb_tally_reset(void)
{
	unsigned n = atomic_load_explicit(&sb_ntallies, memory_order_relaxed);

	for (unsigned i = 0; i < n && i < SB_MAX_TALLIES; i++)
		atomic_store_explicit(&sb_tallies[i], NULL, memory_order_relaxed);
	atomic_store_explicit(&sb_ntallies, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&sb_gen, 1, memory_order_release);
}

/* Callbacks so far; *@first and *@last: the earliest and latest stamps. */
static uint64_t sb_tally_sum(uint64_t *first, uint64_t *last)
{
	unsigned n = atomic_load_explicit(&sb_ntallies, memory_order_acquire);
	uint64_t sum = 0;

	*first = UINT64_MAX;
	*last = 0;
	for (unsigned i = 0; i < n && i < SB_MAX_TALLIES; i++) {
		struct sb_tally *t = atomic_load_explicit(&sb_tallies[i], memory_order_acquire);
		uint64_t f, l;

		if (!t)
			continue;	/* registering now: counted on the next look */
		sum += atomic_load_explicit(&t->n, memory_order_acquire);
		f = atomic_load_explicit(&t->first_ns, memory_order_relaxed);
		l = atomic_load_explicit(&t->last_ns, memory_order_relaxed);
		*first = f < *first ? f : *first;
		*last = l > *last ? l : *last;
	}
	return sum;
}

/* The lateness callback: how late, against the deadline meant. */
struct sb_late {
	uint64_t deadline;	/* kairos_now() + delay, read before arming */
	int64_t late;		/* CLOCK_MONOTONIC at the callback - deadline */
};

static _Atomic uint64_t sb_late_done;

static void sb_late_cb(void *arg, kairos_id id, int status)
{
	struct sb_late *l = arg;

	(void)id;
	(void)status;
	l->late = (int64_t)(bench_now_ns() - l->deadline);
	/* Release, paired with the waiter's acquire: the sample before the count. */
	atomic_fetch_add_explicit(&sb_late_done, 1, memory_order_release);
}

/* ------------------------------------------------------------------------
 * The per-op rows: arm, pushes, cancel, and the floor.
 */

/* One size's lists, allocated once and filled afresh each run. */
struct sb_lists {
	size_t n;
	uint64_t *delay;	/* [timer] arm delay, ns */
	kairos_id *ids;		/* [timer] */
	uint64_t *stamp;	/* [block] clock at the block's first op; one past the last */
	uint32_t *order;	/* [op] the timer an op touches */
	kairos_id *op_id;	/* [op] its id */
	uint64_t *op_abs;	/* [op] the deadline it aims at (absolute ns) */
	uint64_t *lo;		/* [timer] earliest its deadline can be */
	char *slots;		/* N cache lines for the floor */
	struct sb_late *late;	/* SB_LAT_TIMERS */
	int64_t *late_sorted;
};

static void sb_lists_alloc(struct sb_lists *l, size_t n)
{
	l->n = n;
	l->delay = bench_alloc(n * sizeof(*l->delay));
	l->ids = bench_alloc(n * sizeof(*l->ids));
	l->stamp = bench_alloc((n / SB_BLOCK + 2) * sizeof(*l->stamp));
	l->order = bench_alloc(n * sizeof(*l->order));
	l->op_id = bench_alloc(n * sizeof(*l->op_id));
	l->op_abs = bench_alloc(n * sizeof(*l->op_abs));
	l->lo = bench_alloc(n * sizeof(*l->lo));
	l->slots = bench_alloc(n * BENCH_ALIGN);
	l->late = bench_alloc(SB_LAT_TIMERS * sizeof(*l->late));
	l->late_sorted = bench_alloc(SB_LAT_TIMERS * sizeof(*l->late_sorted));
}

static void sb_lists_free(struct sb_lists *l)
{
	free(l->delay);
	free(l->ids);
	free(l->stamp);
	free(l->order);
	free(l->op_id);
	free(l->op_abs);
	free(l->lo);
	free(l->slots);
	free(l->late);
	free(l->late_sorted);
}

static uint64_t sb_push(struct rng *r)
{
	return BENCH_PUSH_MIN + rng_next(r) % (BENCH_PUSH_SPAN + 1);
}

/*
 * N arms in list order.  The clock is read at each block's first op, so
 * timer i's deadline lies in [stamp[b], stamp[b + 1]] + delay[i], b = i / SB_BLOCK.
 */
static double sb_arm_all(struct kairos *k, struct sb_lists *l)
{
	const uint64_t *delay = l->delay;
	kairos_id *ids = l->ids;
	uint64_t *stamp = l->stamp;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		if (i % SB_BLOCK == 0)
			stamp[i / SB_BLOCK] = bench_now_ns();
		err |= kairos_arm(k, delay[i], sb_stray_cb, NULL, &ids[i]);
	}
	t1 = bench_now_ns();
	stamp[(n - 1) / SB_BLOCK + 1] = t1;
	if (err)
		bench_die("kairos_arm failed");
	return (double)(t1 - t0) / (double)n;
}

#define SB_AHEAD	16u	/* how far ahead the prefetch rows call kairos_prefetch() */

/*
 * Before op @i of the @n in @id: kairos_prefetch() of the id @ahead ops on,
 * and at op 0 of the first @ahead as well.  Nothing with @ahead 0.
 */
static inline void sb_prefetch_ahead(struct kairos *k, const kairos_id *id, size_t n, size_t i,
				     size_t ahead)
{
	if (!ahead)
		return;
	for (size_t j = 0; i == 0 && j < n && j < ahead; j++)
		kairos_prefetch(k, id[j]);
	if (i + ahead < n)
		kairos_prefetch(k, id[i + ahead]);
}

/*
 * N resets in list order, op i to the absolute deadline op_abs[i]: a delay
 * from the clock read at its block's first op, so its new deadline lies in
 * [op_abs[i], op_abs[i] + the block's span].
 */
static double sb_reset_all(struct kairos *k, struct sb_lists *l, const char *what, size_t ahead)
{
	const kairos_id *id = l->op_id;
	const uint64_t *target = l->op_abs;
	uint64_t *stamp = l->stamp;
	size_t n = l->n;
	uint64_t t0, t1, now = 0;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		if (i % SB_BLOCK == 0)
			now = stamp[i / SB_BLOCK] = bench_now_ns();
		sb_prefetch_ahead(k, id, n, i, ahead);
		err |= kairos_reset(k, id[i], target[i] - now);
	}
	t1 = bench_now_ns();
	stamp[(n - 1) / SB_BLOCK + 1] = t1;
	if (err)
		bench_die("%s: kairos_reset failed", what);
	return (double)(t1 - t0) / (double)n;
}

#define SB_BATCH	64u	/* ids per kairos_reset_n() or kairos_cancel_n() call */

/*
 * N pushes in list order through kairos_reset_n(), SB_BATCH ids a call:
 * call b moves its ids to op_abs[b * SB_BATCH] (the batch's target, made the
 * latest of its lower bounds + a push), as a delay from a clock reading
 * taken just before the call.  Sets lo[] to that reading + the delay.
 */
static double sb_reset_n_all(struct kairos *k, struct sb_lists *l)
{
	const kairos_id *id = l->op_id;
	size_t n = l->n;
	uint64_t t0, t1;
	int moved = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i += SB_BATCH) {
		unsigned m = (unsigned)(n - i < SB_BATCH ? n - i : SB_BATCH);
		uint64_t now = bench_now_ns(), delay = l->op_abs[i] - now;

		moved += kairos_reset_n(k, &id[i], m, delay, NULL);
		for (unsigned j = 0; j < m; j++)
			l->lo[l->order[i + j]] = now + delay;
	}
	t1 = bench_now_ns();
	if ((size_t)moved != n)
		bench_die("push-later (reset_n): %d of %zu moved", moved, n);
	return (double)(t1 - t0) / (double)n;
}

/*
 * N kairos_reset_at() calls in list order, op i to op_abs[i]: the caller
 * knows the time, so no clock is read inside the loop.
 */
static double sb_reset_at_all(struct kairos *k, struct sb_lists *l)
{
	const kairos_id *id = l->op_id;
	const uint64_t *target = l->op_abs;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++)
		err |= kairos_reset_at(k, id[i], target[i]);
	t1 = bench_now_ns();
	if (err)
		bench_die("push-later (reset_at): kairos_reset_at failed");
	return (double)(t1 - t0) / (double)n;
}

static double sb_cancel_all(struct kairos *k, struct sb_lists *l, size_t ahead)
{
	const kairos_id *id = l->op_id;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		sb_prefetch_ahead(k, id, n, i, ahead);
		err |= kairos_cancel(k, id[i]);
	}
	t1 = bench_now_ns();
	if (err) {
		/* Find one, untimed, to say what it returned. */
		for (size_t i = 0; i < n; i++) {
			int rc = kairos_cancel(k, id[i]);

			if (rc != -ENOENT)
				bench_die("kairos_cancel of a pending timer returned %d", rc);
		}
		bench_die("kairos_cancel of a pending timer did not return 0");
	}
	return (double)(t1 - t0) / (double)n;
}

/* N cancels in list order through kairos_cancel_n(), SB_BATCH ids a call. */
static double sb_cancel_n_all(struct kairos *k, struct sb_lists *l)
{
	const kairos_id *id = l->op_id;
	size_t n = l->n;
	uint64_t t0, t1;
	int done = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i += SB_BATCH)
		done += kairos_cancel_n(k, &id[i], (unsigned)(n - i < SB_BATCH ? n - i : SB_BATCH),
					NULL);
	t1 = bench_now_ns();
	if ((size_t)done != n)
		bench_die("cancel (cancel_n): %d of %zu cancelled", done, n);
	return (double)(t1 - t0) / (double)n;
}

/* op i touches timer order[i]; its id goes to the op list. */
static void sb_op_ids(struct sb_lists *l, struct rng *r)
{
	rng_permutation(r, l->order, l->n);
	for (size_t i = 0; i < l->n; i++)
		l->op_id[i] = l->ids[l->order[i]];
}

static void sb_expect(struct kairos *k, uint64_t armed, uint64_t cancelled, uint64_t pending,
		      const char *what)
{
	struct kairos_stats st;

	sb_stats(k, &st);
	if (st.armed != armed || st.cancelled != cancelled || st.pending != pending ||
	    st.fired != 0 || st.early != 0)
		bench_die("%s: stats armed %" PRIu64 " cancelled %" PRIu64 " pending %" PRIu64
			  " fired %" PRIu64 " early %" PRIu64 ", expected %" PRIu64 "/%" PRIu64
			  "/%" PRIu64 "/0/0", what, st.armed, st.cancelled, st.pending, st.fired,
			  st.early, armed, cancelled, pending);
}

/*
 * A new op order, each op's target a push past its timer's lower bound
 * (lo[], exact after a call that took no clock), which becomes the new one.
 */
static void sb_later_from_lo(struct sb_lists *l, struct rng *r)
{
	sb_op_ids(l, r);
	for (size_t i = 0; i < l->n; i++) {
		size_t t = l->order[i];

		l->op_abs[i] = l->lo[t] + sb_push(r);
		l->lo[t] = l->op_abs[i];
	}
}

static void sb_progress(size_t n, const char *label, const char *phase)
{
	bench_progress("kairos-bench service: N=%zu %s %s", n, label, phase);
}

static void sb_ops(const struct sb_opts *o, struct sb_lists *l, struct rng *r,
		   const char *label, double *row, struct sb_notes *notes)
{
	uint64_t tick = o->cfg.tick_ns;
	size_t n = l->n;
	struct kairos *k = sb_create(&o->cfg);

	for (size_t i = 0; i < n; i++)
		l->delay[i] = bench_far_delay(r);
	bench_settle();

	sb_progress(n, label, "arm (fresh pool)");
	row[SB_ARM_FRESH] = sb_arm_all(k, l);
	bench_settle();
	/* Untimed: cancel them all, so that their records return to the pool. */
	sb_op_ids(l, r);
	sb_cancel_all(k, l, 0);
	bench_settle();
	sb_expect(k, n, n, 0, "arm (fresh pool)");

	sb_progress(n, label, "arm");
	row[SB_ARM] = sb_arm_all(k, l);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "arm");

	/* Later than the latest each deadline can be, by U[1, 1000] ms. */
	sb_op_ids(l, r);
	for (size_t i = 0; i < n; i++) {
		size_t t = l->order[i];

		l->op_abs[i] = l->stamp[t / SB_BLOCK + 1] + l->delay[t] + sb_push(r);
		l->lo[t] = l->op_abs[i];
	}
	sb_progress(n, label, "push-later");
	row[SB_LATER] = sb_reset_all(k, l, "push-later", 0);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "push-later");

	/* Later again, to absolute deadlines: the same push without a clock read. */
	sb_later_from_lo(l, r);
	sb_progress(n, label, "push-later (reset_at)");
	row[SB_LATER_AT] = sb_reset_at_all(k, l);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "push-later (reset_at)");

	/* Later again, in batches: each batch to the latest of its lower bounds + a push. */
	sb_op_ids(l, r);
	for (size_t i = 0; i < n; i += SB_BATCH) {
		uint64_t target = 0;

		for (size_t j = i; j < n && j < i + SB_BATCH; j++)
			if (l->lo[l->order[j]] > target)
				target = l->lo[l->order[j]];
		l->op_abs[i] = target + sb_push(r);
	}
	sb_progress(n, label, "push-later (reset_n, 64)");
	row[SB_LATER_N] = sb_reset_n_all(k, l);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "push-later (reset_n)");

	/* Later again, one kairos_reset() each, the records loaded SB_AHEAD ids ahead. */
	sb_later_from_lo(l, r);
	sb_progress(n, label, "push-later (prefetch, 16)");
	row[SB_LATER_PF] = sb_reset_all(k, l, "push-later (prefetch)", SB_AHEAD);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "push-later (prefetch)");

	/*
	 * Earlier than the earliest each deadline can be, by 2 ms + U[1, 1000]
	 * ms: by a whole tick at least, unless the block took 2 ms or more.
	 */
	sb_op_ids(l, r);
	for (size_t i = 0; i < n; i++)
		l->op_abs[i] = l->lo[l->order[i]] - SB_EARLIER_PAD - sb_push(r);
	sb_progress(n, label, "push-earlier");
	row[SB_EARLIER] = sb_reset_all(k, l, "push-earlier", 0);
	for (size_t i = 0; i < n; i++) {
		uint64_t span = l->stamp[i / SB_BLOCK + 1] - l->stamp[i / SB_BLOCK];

		if (l->op_abs[i] + span + tick > l->lo[l->order[i]])
			notes->not_earlier++;
	}
	bench_settle();
	sb_expect(k, 2 * n, n, n, "push-earlier");

	sb_op_ids(l, r);
	sb_progress(n, label, "cancel");
	row[SB_CANCEL] = sb_cancel_all(k, l, 0);
	bench_settle();
	sb_expect(k, 2 * n, 2 * n, 0, "cancel");
	sb_no_strays("cancel");

	/* Untimed: N more, then the same cancels in batches. */
	sb_arm_all(k, l);
	bench_settle();
	sb_op_ids(l, r);
	sb_progress(n, label, "cancel (cancel_n, 64)");
	row[SB_CANCEL_N] = sb_cancel_n_all(k, l);
	bench_settle();
	sb_expect(k, 3 * n, 3 * n, 0, "cancel (cancel_n)");
	sb_no_strays("cancel (cancel_n)");

	/* Untimed: N more, then one kairos_cancel() each, records loaded SB_AHEAD ahead. */
	sb_arm_all(k, l);
	bench_settle();
	sb_op_ids(l, r);
	sb_progress(n, label, "cancel (prefetch, 16)");
	row[SB_CANCEL_PF] = sb_cancel_all(k, l, SB_AHEAD);
	bench_settle();
	sb_expect(k, 4 * n, 4 * n, 0, "cancel (prefetch)");
	sb_no_strays("cancel (prefetch)");

	sb_progress(n, label, "floors");
	row[SB_FLOOR] = bench_cas_floor(l->slots, l->order, l->n, BENCH_FLOOR_CAS, 0);
	row[SB_FLOOR_CLOCK] = bench_cas_floor(l->slots, l->order, l->n, BENCH_FLOOR_CLOCK,
						 CLOCK_MONOTONIC);
	row[SB_FLOOR_PF] = bench_cas_floor(l->slots, l->order, l->n, BENCH_FLOOR_PREFETCH,
					      CLOCK_MONOTONIC);
	row[SB_LATER_X_CLOCK] = row[SB_LATER] / row[SB_FLOOR_CLOCK];
	row[SB_LATER_X_PF] = row[SB_LATER] / row[SB_FLOOR_PF];
	sb_destroy(k, 0, "ops");
}

/* ------------------------------------------------------------------------
 * Expiry throughput.
 */

static void sb_expiry(const struct sb_opts *o, struct sb_lists *l, struct rng *r,
		      const char *label, double *row, struct sb_notes *notes)
{
	size_t n = l->n;
	struct kairos *k = sb_create(&o->cfg);
	struct kairos_stats st;
	uint64_t base, lead, armed_at, cpu0, cpu1, first, last, seen, give_up, got;
	int err = 0;

	for (size_t i = 0; i < n; i++)
		l->op_abs[i] = rng_next(r) % SB_EXP_WINDOW;
	/* Twice what arming took on a fresh pool this run, and 100 ms. */
	lead = 100 * BENCH_MS + (uint64_t)(2 * row[SB_ARM_FRESH] * (double)n);
	sb_tally_reset();
	bench_settle();

	sb_progress(n, label, "expiry");
	base = bench_now_ns() + lead;
	for (size_t i = 0; i < n; i++)
		err |= kairos_arm_at(k, base + l->op_abs[i], sb_tally_cb, NULL, NULL);
	armed_at = bench_now_ns();
	if (err)
		bench_die("expiry: kairos_arm_at failed");
	if (armed_at >= base)
		notes->exp_overlap++;
	/* The shards file what was armed before the CPU count starts, if they can. */
	bench_settle_until(base - BENCH_MS);
	cpu0 = bench_cpu_ns();

	give_up = base + SB_EXP_WINDOW + SB_WAIT_LIMIT;
	while ((got = sb_tally_sum(&first, &last)) < n) {
		if (bench_now_ns() > give_up)
			bench_die("expiry: %" PRIu64 " of %zu callbacks after %" PRIu64 " s",
				  got, n, SB_WAIT_LIMIT / BENCH_S);
		bench_sleep_ns(BENCH_MS);
	}
	seen = bench_now_ns();
	cpu1 = bench_cpu_ns();
	if (got != n)
		bench_die("expiry: %" PRIu64 " callbacks for %zu timers", got, n);
	sb_stats(k, &st);
	if (st.fired != n || st.early != 0)
		bench_die("expiry: stats fired %" PRIu64 " early %" PRIu64 " for %zu timers",
			  st.fired, st.early, n);
	/*
	 * Stamps come every SB_STAMP_EVERY calls, so the last callback ran
	 * between the latest stamp and now; with too few calls a thread has
	 * only its first stamp, and now is the bound left.
	 */
	if (last <= first)
		last = seen;
	if (last - first <= SB_EXP_WINDOW + SB_EXP_WINDOW / 10)
		notes->exp_bound++;
	row[SB_EXP_RATE] = (double)n / (double)(last - first) * 1e3;	/* M/s */
	row[SB_EXP_SHARD] = row[SB_EXP_RATE] / st.shards;
	row[SB_EXP_CPU] = (double)(cpu1 - cpu0) / (double)n;
	sb_destroy(k, 0, "expiry");
}

/* ------------------------------------------------------------------------
 * Memory, lateness, CPU of a mixed load, idle wake-ups: one service that
 * holds N far timers throughout.
 */

static void sb_lateness(struct kairos *k, struct sb_lists *l, struct rng *r, double *row)
{
	struct kairos_stats st;
	uint64_t give_up, early = 0;
	int64_t *v = l->late_sorted;

	atomic_store_explicit(&sb_late_done, 0, memory_order_relaxed);
	for (unsigned i = 0; i < SB_LAT_TIMERS; i++) {
		uint64_t delay = BENCH_MS + rng_next(r) % (SB_LAT_MAX_DELAY - BENCH_MS + 1), now;
		int rc = kairos_now(k, &now);

		if (rc)
			bench_die("kairos_now: %s", strerror(-rc));
		l->late[i].deadline = now + delay;
		rc = kairos_arm(k, delay, sb_late_cb, &l->late[i], NULL);
		if (rc)
			bench_die("lateness: kairos_arm: %s", strerror(-rc));
	}
	give_up = bench_now_ns() + SB_LAT_MAX_DELAY + SB_WAIT_LIMIT;
	while (atomic_load_explicit(&sb_late_done, memory_order_acquire) < SB_LAT_TIMERS) {
		if (bench_now_ns() > give_up)
			bench_die("lateness: %" PRIu64 " of %u callbacks after %" PRIu64 " s",
				  atomic_load_explicit(&sb_late_done, memory_order_relaxed),
				  SB_LAT_TIMERS, SB_WAIT_LIMIT / BENCH_S);
		bench_sleep_ns(10 * BENCH_MS);
	}
	for (unsigned i = 0; i < SB_LAT_TIMERS; i++) {
		v[i] = l->late[i].late;
		early += v[i] < 0;
	}
	qsort(v, SB_LAT_TIMERS, sizeof(*v), bench_cmp_i64);
	row[SB_LAT_P50] = (double)v[SB_LAT_TIMERS / 2] / 1e3;
	row[SB_LAT_P99] = (double)v[SB_LAT_TIMERS * 99 / 100] / 1e3;
	row[SB_LAT_MAX] = (double)v[SB_LAT_TIMERS - 1] / 1e3;
	row[SB_LAT_EARLY] = (double)early;
	sb_stats(k, &st);
	if (st.fired != SB_LAT_TIMERS)
		bench_die("lateness: stats fired %" PRIu64 " of %u", st.fired, SB_LAT_TIMERS);
	row[SB_LAT_P99_STATS] = (double)st.lateness_p99_ns / 1e3;
	row[SB_LAT_EARLY_STATS] = (double)st.early;
}

/*
 * 1e6 operations on the pool: 40% push-later, 30% arm, 30% cancel, each on
 * a random member.  Every push goes later than any deadline before it (the
 * delays grow with the op count), so none is a push earlier.
 * Return: the operations' wall time, ns.
 */
static uint64_t sb_mixed(struct kairos *k, kairos_id *pool, struct rng *r, size_t count)
{
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (uint32_t i = 0; i < SB_MIX_OPS; i++) {
		uint32_t op = rng_below(r, 10);

		if (op < 4 && count) {
			uint32_t j = rng_below(r, (uint32_t)count);

			err |= kairos_reset(k, pool[j], BENCH_FAR_MIN + BENCH_FAR_SPAN + BENCH_S +
					    (uint64_t)i * 1000u);
		} else if (op < 7 || !count) {
			err |= kairos_arm(k, bench_far_delay(r), sb_stray_cb, NULL, &pool[count++]);
		} else {
			uint32_t j = rng_below(r, (uint32_t)count);

			err |= kairos_cancel(k, pool[j]);
			pool[j] = pool[--count];
		}
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("mixed: an arm, push or cancel failed");
	return t1 - t0;
}

static void sb_held(const struct sb_opts *o, struct sb_lists *l, struct rng *r,
		    const char *label, double *row)
{
	size_t n = l->n, count = n;
	uint64_t rss0, rss1, rss2, rss3, cpu0, cpu1, t0, t1, wall;
	struct kairos_stats st0, st1, e0, e1;
	struct kairos *k, *empty;
	size_t pool_bytes = (n + SB_MIX_OPS) * sizeof(kairos_id);
	kairos_id *pool;
	int err = 0;

	for (size_t i = 0; i < n; i++)
		l->delay[i] = bench_far_delay(r);
	/*
	 * Give what earlier services freed back to the kernel first: memory
	 * still resident would be reused here without showing in the RSS.
	 */
	malloc_trim(0);
	rss0 = bench_rss_bytes();
	k = sb_create(&o->cfg);
	bench_settle();
	rss1 = bench_rss_bytes();
	/*
	 * The caller's ids (the mixed load's room too), mapped after the
	 * baseline and left untouched: the arms fault in their pages, so that
	 * the 8 B a caller keeps per timer are in the delta (all in).
	 */
	pool = bench_map(pool_bytes);
	sb_progress(n, label, "memory");
	for (size_t i = 0; i < n; i++)
		err |= kairos_arm(k, l->delay[i], sb_stray_cb, NULL, &pool[i]);
	if (err)
		bench_die("memory: kairos_arm failed");
	bench_settle();
	rss2 = bench_rss_bytes();
	row[SB_BYTES] = ((double)rss2 - (double)rss1) / (double)n;
	row[SB_BYTES_SIZEOF] = (double)sizeof(struct rec) * CHUNK_RECS / (CHUNK_RECS - 1);

	sb_progress(n, label, "lateness");
	sb_lateness(k, l, r, row);
	bench_settle();

	sb_progress(n, label, "mixed");
	sb_stats(k, &st0);
	cpu0 = bench_cpu_ns();
	wall = sb_mixed(k, pool, r, count);
	sb_stats(k, &st1);
	/* The shards' share: what they do after the calls return counts too. */
	bench_settle();
	cpu1 = bench_cpu_ns();
	row[SB_MIX_CPU] = (double)(cpu1 - cpu0) / SB_MIX_OPS;	/* ns/op == ms per 1e6 */
	row[SB_MIX_WAKE] = (double)(st1.wakeups - st0.wakeups) / ((double)wall / 1e9);
	sb_no_strays("mixed");

	sb_progress(n, label, "idle");
	empty = sb_create(&o->cfg);
	bench_settle();
	sb_stats(k, &st0);
	sb_stats(empty, &e0);
	t0 = bench_now_ns();
	bench_sleep_ns(BENCH_S);
	sb_stats(k, &st1);
	sb_stats(empty, &e1);
	t1 = bench_now_ns();
	row[SB_IDLE_PENDING] = (double)(st1.wakeups - st0.wakeups) / ((double)(t1 - t0) / 1e9);
	row[SB_IDLE_NONE] = (double)(e1.wakeups - e0.wakeups) / ((double)(t1 - t0) / 1e9);
	sb_destroy(empty, 0, "idle");
	sb_no_strays("idle");
	sb_destroy(k, st1.pending, "memory");
	/* Resident after destroy: kairos's share only, as the caller frees its ids. */
	bench_unmap(pool, pool_bytes);
	rss3 = bench_rss_bytes();
	row[SB_BYTES_AFTER] = ((double)rss3 - (double)rss0) / (double)n;
}

/* ------------------------------------------------------------------------
 * The table of one size.
 */

static double sb_goal(const struct sb_opts *o, int row)
{
	/* Lateness: one tick (the deadline rounds up to one) + 0.2 ms, in us. */
	if (row == SB_LAT_P99)
		return (double)o->cfg.tick_ns / 1e3 + 200;
	return sb_rows[row].goal;
}

static void sb_goal_cell(const struct sb_opts *o, char *buf, size_t len, int row, double v,
			 size_t n)
{
	switch (sb_rows[row].kind) {
	case SB_LE:
		bench_goal_le(buf, len, sb_goal(o, row), v, n == SB_GOAL_N);
		break;
	case SB_LE_X:
		if (n == SB_GOAL_N)
			snprintf(buf, len, "<= %.1fx %s", sb_goal(o, row),
				 v <= sb_goal(o, row) ? "met" : "MISSED");
		else
			snprintf(buf, len, "-");
		break;
	case SB_ZERO:
		snprintf(buf, len, "= 0 %s", v == 0 ? "met" : "MISSED");
		break;
	default:
		snprintf(buf, len, "-");
		break;
	}
}

/* The backend's name, as a string that outlives @k; *@why lives as long as @k. */
static const char *sb_backend(struct kairos *k, const char **why)
{
	const char *name = "?";

	*why = "?";
	if (kairos_backend_info(k, 0, &name, why) != 0)
		name = "?";
	return !strcmp(name, "io_uring") ? "io_uring" : !strcmp(name, "epoll") ? "epoll" : "?";
}

static void sb_print_table(const struct sb_opts *o, size_t n, const double *v,
			   const struct sb_notes *notes, unsigned shards, const char *backend)
{
	const struct bench_table t = { o->b.markdown, "%-24s %10s  %-9s %s" };
	char goal[32], val[32];

	bench_title(&t, "N=%zu runs=%u seed=%" PRIu64 " shards=%u backend=%s (medians)", n,
		    o->b.runs, o->b.seed, shards, backend);
	bench_row(&t, (const char *const[]){ "op", "value", "unit", "goal" }, true);
	for (int row = 0; row < SB_NROWS; row++) {
		const struct sb_row_info *ri = &sb_rows[row];

		sb_goal_cell(o, goal, sizeof(goal), row, v[row], n);
		snprintf(val, sizeof(val), "%.*f", ri->prec, v[row]);
		bench_row(&t, (const char *const[]){ ri->name, val, ri->unit, goal }, false);
	}
	if (notes->not_earlier)
		printf("note: %" PRIu64 " push-earlier ops (of %zu x %u) were not certainly a tick "
		       "earlier (a block of %u took over 2 ms)\n", notes->not_earlier, n,
		       o->b.runs, SB_BLOCK);
	if (notes->exp_overlap)
		printf("note: in %u run(s) arming went on past the first expiry deadline\n",
		       notes->exp_overlap);
	if (notes->exp_bound)
		printf("note: in %u run(s) the expiry kept up with deadlines spread over %" PRIu64
		       " ms: its rate is a lower bound there\n", notes->exp_bound,
		       SB_EXP_WINDOW / BENCH_MS);
	printf("\n");
	fflush(stdout);
}

static void sb_bench_size(const struct sb_opts *o, size_t n)
{
	double (*v)[SB_NROWS] = bench_alloc(o->b.runs * sizeof(*v));
	double med[SB_NROWS];
	struct sb_notes notes = { 0 }, ignored;
	const char *backend, *why;
	struct sb_lists l;
	struct kairos *k;

	sb_lists_alloc(&l, n);
	k = sb_create(&o->cfg);
	backend = sb_backend(k, &why);
	sb_destroy(k, 0, "backend");

	for (int run = -(int)o->b.warmup; run < (int)o->b.runs; run++) {
		struct bench_run br = bench_run_at(run, o->b.warmup, o->b.runs, o->b.seed, n);
		struct sb_notes *nt = run < 0 ? &ignored : &notes;
		struct rng r = { br.seed };
		double one[SB_NROWS] = { 0 };

		atomic_store_explicit(&sb_strays, 0, memory_order_relaxed);
		sb_ops(o, &l, &r, br.label, one, nt);
		sb_expiry(o, &l, &r, br.label, one, nt);
		sb_held(o, &l, &r, br.label, one);
		if (run >= 0)
			memcpy(v[br.idx], one, sizeof(one));
	}
	bench_progress_done();
	if (o->b.raw) {
		printf("kairos-bench service: N=%zu, each run's values\n", n);
		for (int row = 0; row < SB_NROWS; row++) {
			printf("%-24s", sb_rows[row].name);
			bench_raw_runs(&v[0][row], SB_NROWS, o->b.runs, 10, sb_rows[row].prec, 1);
		}
		printf("\n");
	}
	for (int row = 0; row < SB_NROWS; row++)
		med[row] = bench_aggregate(sb_rows[row].agg, &v[0][row], SB_NROWS, o->b.runs);
	sb_print_table(o, n, med, &notes, o->cfg.shards, backend);
	sb_lists_free(&l);
	free(v);
}

/* ------------------------------------------------------------------------
 * 2 shards against 1: threads arm and cancel through a window.
 */

struct sb_scaler {
	pthread_t thread;
	struct kairos *k;
	pthread_barrier_t *start;
	kairos_id *ring;
	uint64_t seed;
	uint64_t ops;		/* done */
	uint64_t end_ns;
	int err;
};

static void *sb_scaler_main(void *arg)
{
	struct sb_scaler *s = arg;
	struct rng r = { s->seed };
	kairos_id *ring = s->ring;
	int err = 0;

	pthread_barrier_wait(s->start);
	for (unsigned i = 0; i < SB_SCALE_WINDOW; i++)
		err |= kairos_arm(s->k, bench_far_delay(&r), sb_stray_cb, NULL, &ring[i]);
	for (unsigned i = 0; i < (SB_SCALE_OPS - 2 * SB_SCALE_WINDOW) / 2; i++) {
		kairos_id *slot = &ring[i % SB_SCALE_WINDOW];

		err |= kairos_cancel(s->k, *slot);
		err |= kairos_arm(s->k, bench_far_delay(&r), sb_stray_cb, NULL, slot);
	}
	for (unsigned i = 0; i < SB_SCALE_WINDOW; i++)
		err |= kairos_cancel(s->k, ring[i]);
	s->end_ns = bench_now_ns();
	s->ops = 2 * SB_SCALE_WINDOW + (SB_SCALE_OPS - 2 * SB_SCALE_WINDOW) / 2 * 2;
	s->err = err;
	return NULL;
}

/* Operations per second of o->threads threads on a service of @shards shards. */
static double sb_scale_once(const struct sb_opts *o, unsigned shards, uint64_t seed)
{
	struct sb_scaler s[SB_MAX_THREADS];
	struct kairos_config cfg = o->cfg;
	pthread_barrier_t start;
	uint64_t t0, end = 0, ops = 0;
	struct kairos *k;

	cfg.shards = shards;
	k = sb_create(&cfg);
	bench_settle();
	if (pthread_barrier_init(&start, NULL, o->threads + 1))
		bench_die("pthread_barrier_init failed");
	for (unsigned t = 0; t < o->threads; t++) {
		s[t] = (struct sb_scaler){ .k = k, .start = &start, .seed = seed + t };
		s[t].ring = bench_alloc(SB_SCALE_WINDOW * sizeof(*s[t].ring));
		if (pthread_create(&s[t].thread, NULL, sb_scaler_main, &s[t]))
			bench_die("pthread_create failed");
	}
	pthread_barrier_wait(&start);
	t0 = bench_now_ns();
	for (unsigned t = 0; t < o->threads; t++) {
		if (pthread_join(s[t].thread, NULL))
			bench_die("pthread_join failed");
		if (s[t].err)
			bench_die("scaling: an arm or cancel failed");
		end = s[t].end_ns > end ? s[t].end_ns : end;
		ops += s[t].ops;
		free(s[t].ring);
	}
	pthread_barrier_destroy(&start);
	bench_settle();
	sb_no_strays("scaling");
	sb_destroy(k, 0, "scaling");
	return (double)ops / ((double)(end - t0) / 1e9);
}

static void sb_scaling(const struct sb_opts *o)
{
	const struct bench_table t = { o->b.markdown, "%-8s %10s %8s" };
	double (*v)[2] = bench_alloc(o->b.runs * sizeof(*v));	/* [run][1 shard, 2 shards] */
	char m[2][16], ratio[16];
	double x[2];

	for (int run = -(int)o->b.warmup; run < (int)o->b.runs; run++) {
		struct bench_run br = bench_run_at(run, o->b.warmup, o->b.runs, 0, 0);
		uint64_t seed = o->b.seed * 1000003u + (uint64_t)(run + 1000) * 64u;
		double a, b;

		bench_progress("kairos-bench service: 2 shards vs 1, %s", br.label);
		/* Take turns going first. */
		if (br.idx % 2) {
			b = sb_scale_once(o, 2, seed);
			a = sb_scale_once(o, 1, seed);
		} else {
			a = sb_scale_once(o, 1, seed);
			b = sb_scale_once(o, 2, seed);
		}
		if (run >= 0) {
			v[br.idx][0] = a;
			v[br.idx][1] = b;
		}
	}
	bench_progress_done();
	if (o->b.raw) {
		printf("kairos-bench service: 2 shards vs 1, Mops/s in each run\n");
		for (int s = 0; s < 2; s++) {
			printf("%-8s", s ? "2 shards" : "1 shard");
			bench_raw_runs(&v[0][s], 2, o->b.runs, 8, 2, 1e6);
		}
		printf("\n");
	}
	bench_title(&t, "2 shards vs 1, %u threads arm+cancel, %u pending each, runs=%u (median)",
		    o->threads, SB_SCALE_WINDOW, o->b.runs);
	bench_row(&t, (const char *const[]){ "shards", "Mops/s", "ratio" }, true);
	for (int s = 0; s < 2; s++) {
		x[s] = bench_aggregate(BENCH_MEDIAN, &v[0][s], 2, o->b.runs) / 1e6;
		snprintf(m[s], sizeof(m[s]), "%.2f", x[s]);
		snprintf(ratio, sizeof(ratio), "%.2fx", s ? x[s] / x[0] : 1.0);
		bench_row(&t, (const char *const[]){ s ? "2" : "1", m[s], ratio }, false);
	}
	printf("\n");
	fflush(stdout);
	free(v);
}

/* ------------------------------------------------------------------------
 * Mode "keys": keyed timers beside the id path.
 *
 * Each run measures the same sequence twice, on a fresh service each time:
 * once through ids (kairos_arm, kairos_reset, kairos_cancel) and once
 * through keys (kairos_arm_opts with .key, kairos_key_reset,
 * kairos_key_find, kairos_key_cancel), with the same delays and the same
 * random orders.  The two take turns going first.
 */

#define SK_DEFAULT_RUNS	5u
/*
 * Arms U[SK_FAR_MIN, + SK_FAR_SPAN), 10 to 20 min: far enough that nothing
 * fires even when the key table stops growing and a keyed arm of 1e6 takes
 * minutes (seen with liburcu 0.13: the run is then slow, not wrong).
 */
#define SK_FAR_MIN	(600 * BENCH_S)
#define SK_FAR_SPAN	(600 * BENCH_S)
#define SK_PUSH_MIN	(1201 * BENCH_S)	/* resets: U[1201, 1202) s from now, later than any arm */
#define SK_PUSH_SPAN	BENCH_S
#define SK_KEY_SLOT	16u		/* bytes a key takes in the bench's lists */
#define SK_KEY_LEN	13u		/* "conn:" and 8 digits; no NUL */

enum sk_path { SK_ID, SK_KEY, SK_NPATHS };

static const char *const sk_path_name[SK_NPATHS] = { "id", "key" };

enum sk_row {
	SK_ARM_FRESH,
	SK_ARM,
	SK_RESET,
	SK_FIND,
	SK_CANCEL,
	SK_BYTES,
	SK_BYTES_SIZEOF,
	SK_NROWS
};

static const struct sk_row_info {
	const char *name;
	const char *unit;
	int prec;
	bool key_only;		/* no id call does this: "-" in the id column */
} sk_rows[SK_NROWS] = {
	[SK_ARM_FRESH] = { "arm (fresh pool)", "ns/op", 1, false },
	[SK_ARM] = { "arm", "ns/op", 1, false },
	[SK_RESET] = { "push-later", "ns/op", 1, false },
	[SK_FIND] = { "find", "ns/op", 1, true },
	[SK_CANCEL] = { "cancel", "ns/op", 1, false },
	[SK_BYTES] = { "bytes/timer (RSS)", "B", 2, false },
	[SK_BYTES_SIZEOF] = { "bytes/timer (sizeof)", "B", 2, false },
};

/* One size's lists, allocated once and filled afresh for each path. */
struct sk_lists {
	size_t n;
	uint64_t *delay;	/* [timer] arm delay, ns */
	kairos_id *ids;		/* [timer] */
	char *keys;		/* [timer] its key, SK_KEY_SLOT bytes each */
	uint32_t *order;	/* [op] the timer an op touches */
	kairos_id *op_id;	/* [op] its id */
	char *op_key;		/* [op] its key */
	uint64_t *push;		/* [op] a reset's delay, ns */
};

static void sk_lists_alloc(struct sk_lists *l, size_t n)
{
	char key[SK_KEY_SLOT + 8];

	l->n = n;
	l->delay = bench_alloc(n * sizeof(*l->delay));
	l->ids = bench_alloc(n * sizeof(*l->ids));
	l->keys = bench_alloc(n * SK_KEY_SLOT);
	l->order = bench_alloc(n * sizeof(*l->order));
	l->op_id = bench_alloc(n * sizeof(*l->op_id));
	l->op_key = bench_alloc(n * SK_KEY_SLOT);
	l->push = bench_alloc(n * sizeof(*l->push));
	/* A connection's name, as a server would key its idle timeout. */
	for (size_t i = 0; i < n; i++) {
		if (snprintf(key, sizeof(key), "conn:%08u", (unsigned)i) != (int)SK_KEY_LEN)
			bench_die("key %zu is not %u bytes", i, SK_KEY_LEN);
		memcpy(l->keys + i * SK_KEY_SLOT, key, SK_KEY_LEN);
	}
}

static void sk_lists_free(struct sk_lists *l)
{
	free(l->delay);
	free(l->ids);
	free(l->keys);
	free(l->order);
	free(l->op_id);
	free(l->op_key);
	free(l->push);
}

/* A fresh random order of the ops: op i touches timer order[i]. */
static void sk_op_order(struct sk_lists *l, struct rng *r)
{
	rng_permutation(r, l->order, l->n);
	for (size_t i = 0; i < l->n; i++) {
		l->op_id[i] = l->ids[l->order[i]];
		memcpy(l->op_key + i * SK_KEY_SLOT, l->keys + (size_t)l->order[i] * SK_KEY_SLOT,
		       SK_KEY_SLOT);
		l->push[i] = SK_PUSH_MIN + rng_next(r) % SK_PUSH_SPAN;
	}
}

/* N arms in timer order; the key path gives timer i the key keys[i]. */
static double sk_arm_all(struct kairos *k, struct sk_lists *l, enum sk_path p)
{
	struct kairos_timer_opts opts = { .key_len = SK_KEY_LEN };
	const uint64_t *delay = l->delay;
	kairos_id *ids = l->ids;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	if (p == SK_ID) {
		for (size_t i = 0; i < n; i++)
			err |= kairos_arm(k, delay[i], sb_stray_cb, NULL, &ids[i]);
	} else {
		for (size_t i = 0; i < n; i++) {
			opts.key = l->keys + i * SK_KEY_SLOT;
			err |= kairos_arm_opts(k, delay[i], &opts, sb_stray_cb, NULL, &ids[i]);
		}
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("%s arm failed", sk_path_name[p]);
	return (double)(t1 - t0) / (double)n;
}

/* N pushes later in op order, each to push[i] from now (later than its arm). */
static double sk_reset_all(struct kairos *k, struct sk_lists *l, enum sk_path p)
{
	const uint64_t *push = l->push;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	if (p == SK_ID) {
		const kairos_id *id = l->op_id;

		for (size_t i = 0; i < n; i++)
			err |= kairos_reset(k, id[i], push[i]);
	} else {
		const char *key = l->op_key;

		for (size_t i = 0; i < n; i++)
			err |= kairos_key_reset(k, key + i * SK_KEY_SLOT, SK_KEY_LEN, push[i]);
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("%s reset of a pending timer failed", sk_path_name[p]);
	return (double)(t1 - t0) / (double)n;
}

/* N kairos_key_find() in op order; each must give the id its arm returned. */
static double sk_find_all(struct kairos *k, struct sk_lists *l)
{
	const kairos_id *want = l->op_id;
	const char *key = l->op_key;
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		kairos_id got = 0;

		err |= kairos_key_find(k, key + i * SK_KEY_SLOT, SK_KEY_LEN, &got);
		err |= got != want[i];
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("kairos_key_find of a held key failed or named another timer");
	return (double)(t1 - t0) / (double)n;
}

/* N cancels in op order; every one must return 0. */
static double sk_cancel_all(struct kairos *k, struct sk_lists *l, enum sk_path p)
{
	size_t n = l->n;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	if (p == SK_ID) {
		const kairos_id *id = l->op_id;

		for (size_t i = 0; i < n; i++)
			err |= kairos_cancel(k, id[i]);
	} else {
		const char *key = l->op_key;

		for (size_t i = 0; i < n; i++)
			err |= kairos_key_cancel(k, key + i * SK_KEY_SLOT, SK_KEY_LEN);
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("%s cancel of a pending timer did not return 0", sk_path_name[p]);
	return (double)(t1 - t0) / (double)n;
}

static void sk_progress(size_t n, const char *label, enum sk_path p, const char *phase)
{
	bench_progress("kairos-bench keys: N=%zu %s %s %s", n, label, sk_path_name[p], phase);
}

/*
 * One path on a fresh service: arm N on a fresh pool (timed, and the RSS
 * it adds), cancel them all untimed, then arm (recycled records), push
 * later, find (keys only) and cancel, each timed, each in a fresh random
 * order.  @r is the run's generator, copied: both paths draw the same.
 */
static void sk_path_run(const struct sb_opts *o, struct sk_lists *l, struct rng r0,
			enum sk_path p, const char *label, double *row)
{
	struct rng *r = &r0;
	size_t n = l->n;
	uint64_t rss1, rss2;
	struct kairos *k;

	for (size_t i = 0; i < n; i++)
		l->delay[i] = SK_FAR_MIN + rng_next(r) % SK_FAR_SPAN;
	/* As the service's bytes row: what earlier services freed goes back first. */
	malloc_trim(0);
	k = sb_create(&o->cfg);
	bench_settle();
	rss1 = bench_rss_bytes();

	sk_progress(n, label, p, "arm (fresh pool)");
	row[SK_ARM_FRESH] = sk_arm_all(k, l, p);
	bench_settle();
	rss2 = bench_rss_bytes();
	row[SK_BYTES] = ((double)rss2 - (double)rss1) / (double)n;
	row[SK_BYTES_SIZEOF] = (double)(sizeof(struct rec) +
					(p == SK_KEY ? sizeof(struct rec_ext) : 0)) *
			       CHUNK_RECS / (CHUNK_RECS - 1);
	sb_expect(k, n, 0, n, "keys: arm (fresh pool)");
	/* Untimed: records, and key nodes after a grace period, go back. */
	sk_op_order(l, r);
	sk_cancel_all(k, l, p);
	bench_settle();
	sb_expect(k, n, n, 0, "keys: arm (fresh pool)");

	sk_progress(n, label, p, "arm");
	row[SK_ARM] = sk_arm_all(k, l, p);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "keys: arm");

	sk_op_order(l, r);
	sk_progress(n, label, p, "push-later");
	row[SK_RESET] = sk_reset_all(k, l, p);
	bench_settle();
	sb_expect(k, 2 * n, n, n, "keys: push-later");

	/* Drawn on both paths, so that the cancel's order is the same on both. */
	sk_op_order(l, r);
	if (p == SK_KEY) {
		sk_progress(n, label, p, "find");
		row[SK_FIND] = sk_find_all(k, l);
		bench_settle();
	}

	sk_op_order(l, r);
	sk_progress(n, label, p, "cancel");
	row[SK_CANCEL] = sk_cancel_all(k, l, p);
	bench_settle();
	sb_expect(k, 2 * n, 2 * n, 0, "keys: cancel");
	sb_no_strays("keys");
	sb_destroy(k, 0, "keys");
}

static void sk_print_table(const struct sb_opts *o, size_t n, double (*v)[SK_NROWS],
			   const char *backend)
{
	const struct bench_table t = { o->b.markdown, "%-22s %10s %10s %8s  %s" };
	char idc[32], keyc[32], ratio[32];

	bench_title(&t, "N=%zu runs=%u seed=%" PRIu64 " shards=%u backend=%s (medians)", n,
		    o->b.runs, o->b.seed, o->cfg.shards, backend);
	bench_row(&t, (const char *const[]){ "op", "id", "key", "key/id", "unit" }, true);
	for (int row = 0; row < SK_NROWS; row++) {
		const struct sk_row_info *ri = &sk_rows[row];
		double a = v[SK_ID][row], b = v[SK_KEY][row];

		if (ri->key_only) {
			snprintf(idc, sizeof(idc), "-");
			snprintf(ratio, sizeof(ratio), "-");
		} else {
			snprintf(idc, sizeof(idc), "%.*f", ri->prec, a);
			snprintf(ratio, sizeof(ratio), "%.2fx", b / a);
		}
		snprintf(keyc, sizeof(keyc), "%.*f", ri->prec, b);
		bench_row(&t, (const char *const[]){ ri->name, idc, keyc, ratio, ri->unit }, false);
	}
	printf("\n");
	fflush(stdout);
}

static void sk_print_raw(const struct sb_opts *o, size_t n, double (*v)[SK_NPATHS][SK_NROWS])
{
	printf("kairos-bench keys: N=%zu, each run's values (id / key)\n", n);
	for (int row = 0; row < SK_NROWS; row++) {
		const struct sk_row_info *ri = &sk_rows[row];

		printf("%-22s", ri->name);
		for (unsigned int run = 0; run < o->b.runs; run++) {
			if (ri->key_only)
				printf(" %8s / %-8.*f", "-", ri->prec, v[run][SK_KEY][row]);
			else
				printf(" %8.*f / %-8.*f", ri->prec, v[run][SK_ID][row], ri->prec,
				       v[run][SK_KEY][row]);
		}
		printf("\n");
	}
	printf("\n");
}

static void sk_bench_size(const struct sb_opts *o, size_t n, const char *backend)
{
	double (*v)[SK_NPATHS][SK_NROWS] = bench_alloc(o->b.runs * sizeof(*v));
	double med[SK_NPATHS][SK_NROWS];
	struct sk_lists l;

	sk_lists_alloc(&l, n);
	for (int run = -(int)o->b.warmup; run < (int)o->b.runs; run++) {
		struct bench_run br = bench_run_at(run, o->b.warmup, o->b.runs, o->b.seed, n);
		struct rng r = { br.seed };	/* the same for both paths */
		double one[SK_NPATHS][SK_NROWS] = { { 0 } };

		atomic_store_explicit(&sb_strays, 0, memory_order_relaxed);
		/* Take turns going first, so that a drift of the machine favours neither. */
		for (int i = 0; i < SK_NPATHS; i++) {
			enum sk_path p = (enum sk_path)((i + (int)br.idx) % SK_NPATHS);

			sk_path_run(o, &l, r, p, br.label, one[p]);
		}
		if (run >= 0)
			memcpy(v[br.idx], one, sizeof(one));
	}
	bench_progress_done();
	if (o->b.raw)
		sk_print_raw(o, n, v);
	for (int p = 0; p < SK_NPATHS; p++)
		for (int row = 0; row < SK_NROWS; row++)
			med[p][row] = bench_aggregate(BENCH_MEDIAN, &v[0][p][row],
						      SK_NPATHS * SK_NROWS, o->b.runs);
	sk_print_table(o, n, med, backend);
	sk_lists_free(&l);
	free(v);
}

static void sk_print_legend(const struct sb_opts *o, const char *backend, const char *why)
{
	const char *pre = o->b.markdown ? "" : "# ";

	printf("%skeys: called from the main thread (not a shard thread); shards=%u%s, "
	       "workers=%u per shard, tick=%" PRIu64 " us%s;\n", pre, o->cfg.shards,
	       o->shards ? "" : " (one per CPU)", o->cfg.workers, o->cfg.tick_ns / 1000,
	       o->huge_pages ? ", KAIROS_HUGE_PAGES" : "");
	printf("%sbackend %s: %s;\n", pre, backend, why);
	printf("%sid: kairos_arm, kairos_reset, kairos_cancel; key: kairos_arm_opts with a "
	       "distinct %u-byte key per timer (\"conn:%%08u\"),\n", pre, SK_KEY_LEN);
	printf("%s  kairos_key_reset, kairos_key_find, kairos_key_cancel; each path on a fresh "
	       "service, same delays and orders, taking turns first;\n", pre);
	printf("%sarm (fresh pool): N arms, delays U[10,20] min, into a new service; then all "
	       "cancelled untimed; arm: N again on the recycled pool;\n", pre);
	printf("%spush-later: each to U[1201,1202) s from now; find (key -> id) and cancel: every "
	       "one must succeed; each op list in a fresh random order;\n", pre);
	printf("%sbytes: RSS after the fresh arm minus before it, over N (key nodes, hash table "
	       "and ext entries included); sizeof: 64 B record\n", pre);
	printf("%s  (+ 64 B ext entry for a keyed timer) + chunk header share, the key's node "
	       "and table buckets not counted.  Medians over the runs.\n\n", pre);
}

/* ------------------------------------------------------------------------
 * Options and the entry point.
 */

static void sb_print_legend(const struct sb_opts *o)
{
	const char *pre = o->b.markdown ? "" : "# ";
	const char *backend, *why;
	struct kairos *k = sb_create(&o->cfg);

	backend = sb_backend(k, &why);
	printf("%sservice: called from the main thread (not a shard thread); shards=%u%s, "
	       "workers=%u per shard, tick=%" PRIu64 " us%s;\n", pre, o->cfg.shards,
	       o->shards ? "" : " (one per CPU)", o->cfg.workers, o->cfg.tick_ns / 1000,
	       o->huge_pages ? ", KAIROS_HUGE_PAGES" : "");
	printf("%sbackend %s: %s;\n", pre, backend, why);
	sb_destroy(k, 0, "legend");
	printf("%sarm: delays U[10,60] s, fresh pool, then again on the recycled pool; pushes "
	       "+U[1,1000] ms, then -(2 ms + U[1,1000] ms);\n", pre);
	printf("%scancel: every one returns 0; cancel_n: N more armed, then cancelled %u a call; "
	       "(prefetch, %u): one call each,\n", pre, SB_BATCH, SB_AHEAD);
	printf("%s  kairos_prefetch() of the id %u ahead before each (push-later too); "
	       "CAS (floor) = one atomic CAS\n", pre, SB_AHEAD);
	printf("%s  on a random 64-byte slot per op, clock+CAS: after a "
	       "clock_gettime(CLOCK_MONOTONIC); pf+clock+CAS: prefetch of the slot,\n", pre);
	printf("%s  then clock_gettime(CLOCK_MONOTONIC), then the CAS, as kairos_reset() "
	       "prefetches its record before its clock read;\n", pre);
	printf("%spush-later/clock+CAS, push-later/pf+clock+CAS: push-later over that floor, "
	       "each run's own, median of the ratios\n", pre);
	printf("%s  (goal <= 1.2x on clock+CAS, at N=%u);\n", pre, SB_GOAL_N);
	printf("%sexpiry: N due over 50 ms, first to last callback; lateness: %u timers U[1,200] "
	       "ms with N pending,\n", pre, SB_LAT_TIMERS);
	printf("%s  CLOCK_MONOTONIC at the callback - (kairos_now() + delay); (stats): from the "
	       "deadline rounded up to a tick, not judged;\n", pre);
	printf("%sbytes/timer (all in): RSS delta over N, all in: the caller's id included "
	       "(%zu B, mapped after the baseline);\n", pre, sizeof(kairos_id));
	printf("%s  sizeof: 64 B record + chunk header, no id; mixed: %u ops, "
	       "40%% push-later / 30%% arm / 30%% cancel\n", pre, SB_MIX_OPS);
	printf("%s  on N pending, CPU of all threads; idle: 1 s of sleep.  Medians over the "
	       "runs; worst run for lateness max and idle\n", pre);
	printf("%s  wake-ups; early: sum over the runs.\n\n", pre);
}

static void sb_usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-bench service [--n N]... [--runs N] [--warmup N] [--seed S]\n"
		"                            [--shards N] [--threads N] [--markdown] [--raw]\n"
		"\n"
		"The kairos service through its public API, from a thread that is not a\n"
		"shard thread: arm, push-later, push-earlier and cancel costs against a\n"
		"CAS floor, expiry throughput, lateness, bytes per pending timer, CPU per\n"
		"million mixed operations and idle wake-ups, at each N; then 2 shards\n"
		"against 1.  Medians over the runs.\n"
		"\n"
		"  --n N        pending timers (1000..%u, 1e6 style allowed); repeat for\n"
		"               more sizes (default: 100000 and 1000000)\n"
		"  --runs N     runs per size, median reported (default 5)\n"
		"  --warmup N   untimed runs per size before those (default 1)\n"
		"  --seed S     workload seed (default 1)\n"
		"  --shards N   cfg.shards for the per-N tables (0..256; default 0: one\n"
		"               per CPU)\n"
		"  --threads N  threads of the 2-shards-vs-1 table (1..%u, default 2)\n"
		"  --huge-pages cfg.flags = KAIROS_HUGE_PAGES for the per-N tables\n"
		"  --markdown   print the tables as markdown\n"
		"  --raw        also print every run's numbers, not only the medians\n"
		"  -h, --help   this text\n"
		"\n"
		"Goals (met/MISSED) on costs and bytes are judged at N=%u only; those that\n"
		"must be 0 (early callbacks, idle wake-ups) at every N.\n",
		SB_MAX_N, SB_MAX_THREADS, SB_GOAL_N);
}

static void sk_usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-bench keys [--n N]... [--runs N] [--warmup N] [--seed S]\n"
		"                         [--shards N] [--markdown] [--raw]\n"
		"\n"
		"Keyed timers beside the id path, in the same run, at each N pending:\n"
		"arm (kairos_arm against kairos_arm_opts with a distinct 13-byte key per\n"
		"timer), push-later (kairos_reset against kairos_key_reset), find\n"
		"(kairos_key_find), cancel (kairos_cancel against kairos_key_cancel), and\n"
		"bytes per pending timer from the RSS, with the key/id ratio of each.\n"
		"Medians over the runs.\n"
		"\n"
		"  --n N        pending timers (1000..%u, 1e6 style allowed); repeat for\n"
		"               more sizes (default: 10000 and 1000000)\n"
		"  --runs N     runs per size, median reported (default %u)\n"
		"  --warmup N   untimed runs per size before those (default 1)\n"
		"  --seed S     workload seed (default 1)\n"
		"  --shards N   cfg.shards (0..256; default 0: one per CPU)\n"
		"  --huge-pages cfg.flags = KAIROS_HUGE_PAGES\n"
		"  --markdown   print the tables as markdown\n"
		"  --raw        also print every run's numbers, not only the medians\n"
		"  -h, --help   this text\n",
		SB_MAX_N, SK_DEFAULT_RUNS);
}

/* The two modes of this file: their names, usage texts, and what they take. */
struct sb_mode {
	const char *name;
	void (*usage)(FILE *f);
	bool threads;		/* takes --threads */
	size_t sizes[2];	/* default --n */
};

static const struct sb_mode sb_mode_service = { "service", sb_usage, true, { 100000, 1000000 } };
static const struct sb_mode sb_mode_keys = { "keys", sk_usage, false, { 10000, 1000000 } };

/*
 * Parses the options of mode @m into @o and sets up its service config.
 * Return: -1 to go on, else the exit status (0 after --help).
 */
static int sb_parse(const struct sb_mode *m, int argc, char **argv, struct sb_opts *o)
{
	static const struct option longopts[] = {
		BENCH_OPT_N, BENCH_OPT_RUNS, BENCH_OPT_WARMUP, BENCH_OPT_SEED,
		BENCH_OPT_MARKDOWN, BENCH_OPT_RAW, BENCH_OPT_HELP,
		{ "shards", required_argument, NULL, 'S' },
		{ "threads", required_argument, NULL, 't' },
		{ "huge-pages", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	bench_opt_start(m->name);
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		if (bench_opt(c, &o->b, 1000, SB_MAX_N))
			continue;
		switch (c) {
		case 'S':
			o->shards = (unsigned int)opt_u64("--shards", optarg, 0, 256);
			break;
		case 'H':
			o->huge_pages = true;
			break;
		case 't':
			if (!m->threads)
				opt_fail("--threads", "an option of mode service only");
			o->threads = (unsigned int)opt_u64("--threads", optarg, 1, SB_MAX_THREADS);
			break;
		case 'h':
			m->usage(stdout);
			return 0;
		}
	}
	if (!o->b.nsizes) {
		o->b.sizes[o->b.nsizes++] = m->sizes[0];
		o->b.sizes[o->b.nsizes++] = m->sizes[1];
	}
	kairos_config_default(&o->cfg);
	if (o->shards)
		o->cfg.shards = o->shards;
	if (o->huge_pages)
		o->cfg.flags |= KAIROS_HUGE_PAGES;
	/* The bench's deadlines are CLOCK_MONOTONIC, as the service's by default. */
	if (o->cfg.clock != CLOCK_MONOTONIC)
		bench_die("the default service clock is not CLOCK_MONOTONIC");
	bench_warn_unoptimized();
	return -1;
}

/* @argv[0] is "service". */
int sb_main(int argc, char **argv)
{
	struct sb_opts o = { .b = { .runs = 5, .warmup = 1, .seed = 1 }, .threads = 2 };
	int rc = sb_parse(&sb_mode_service, argc, argv, &o);

	if (rc >= 0)
		return rc;
	sb_print_legend(&o);
	for (unsigned int i = 0; i < o.b.nsizes; i++)
		sb_bench_size(&o, o.b.sizes[i]);
	sb_scaling(&o);
	return 0;
}

/* @argv[0] is "keys". */
int sk_main(int argc, char **argv)
{
	struct sb_opts o = { .b = { .runs = SK_DEFAULT_RUNS, .warmup = 1, .seed = 1 } };
	const char *backend, *why;
	struct kairos *k;
	int rc = sb_parse(&sb_mode_keys, argc, argv, &o);

	if (rc >= 0)
		return rc;
	k = sb_create(&o.cfg);
	backend = sb_backend(k, &why);
	sk_print_legend(&o, backend, why);
	sb_destroy(k, 0, "backend");
	for (unsigned int i = 0; i < o.b.nsizes; i++)
		sk_bench_size(&o, o.b.sizes[i], backend);
	return 0;
}
