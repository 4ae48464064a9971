/* SPDX-License-Identifier: MIT */
/*
 * scale.c - kairos-bench mode "scale": whether more caller threads get more
 * done.  T threads (--threads), each with P timers of its own (--per-thread),
 * call one kairos service through its public API; then, in the same run
 * with the same mix and seeds, what a server author writes by hand when
 * timers are set from many threads: a locked heap, one binary min-heap of
 * (deadline, slot) under one mutex, each slot's heap index kept so that a
 * cancel or push is O(log n), and one absolute timerfd set to the minimum
 * under the lock whenever an operation changes it, polled by one extra
 * thread (nothing falls due here, so it sleeps).  And beside it, per-thread
 * heaps: the same heap code once per caller thread, each with its own
 * mutex, timerfd and polling thread and only that thread's timers, as a
 * server may write it when each thread touches only its own timers (a
 * second baseline; the goal is set against the locked heap).
 *
 * Each thread arms its P timers, far (untimed); once the process is quiet,
 * all start at once and for --seconds call on random timers of their own:
 * two steps in three a push-later to now + the slot's delay moved on by
 * U[1, 1000] ms (always later: a push earlier is another kairos path), one
 * in three a cancel and the slot's re-arm, so T * P stay pending.  Every
 * call reads CLOCK_MONOTONIC, the heap's outside its lock.  calls/s is all
 * threads' calls over the wall time to the last thread's stop.  Beside
 * them, the floor: the same calls on private records with no timer behind
 * them, which says how far this machine lets T threads scale on that much
 * memory.  Each run measures every T in turn (starting at another T each
 * run), the four taking turns going first at each T, and computes its own
 * ratios (T over T=1, kairos over each heap): the ratios printed are the
 * medians of the runs' ratios, so that each compares measurements taken
 * seconds apart.  Every call is checked, and each measurement ends with
 * all T * P still pending and none fired.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#include "bench.h"

#define SC_CHECK_EVERY	64u		/* mix steps between looks at the stop flag */
#define SC_MAX_THREADS	64u
#define SC_MAX_TLIST	16u
#define SC_MAX_PER	10000000u
#define SC_GOAL_T	4u		/* the goal's row */
#define SC_GOAL_SELF	1.6		/* kairos at SC_GOAL_T over kairos at T=1 */
#define SC_GOAL_HEAP	3.0		/* kairos over the locked heap at SC_GOAL_T */
#define SC_GOAL_CPUS	2L		/* the CPUs the goal is set for */
#define SC_SHARD_THREAD	"kairos-shard-"	/* kairos's shard threads' names */
#define SC_MAX_SHARDS	256u

struct sc_opts {
	unsigned int threads[SC_MAX_TLIST];
	unsigned int nthreads;
	uint64_t per_thread;
	unsigned int shards;
	double seconds;
	struct bench_opts b;	/* runs, seed, raw */
};

/* One caller thread; its slots are 0 .. P - 1, base + slot among all. */
struct sc_thread {
	pthread_t thread;
	const struct sc_impl *im;
	uint32_t per;			/* P */
	uint32_t base;			/* its first slot among all threads' */
	unsigned int idx;		/* its index among the threads: its per-thread heap */
	pthread_barrier_t *armed;	/* its P timers are armed */
	pthread_barrier_t *go;		/* the mix starts */
	kairos_id *id;			/* kairos: [slot] the timer's id */
	uint64_t *delay;		/* [slot] the delay of its last arm or push */
	uint64_t seed;
	uint64_t calls;			/* out: calls made in the mix */
	uint64_t end_ns;		/* out: when it saw the stop flag */
};

/*
 * One implementation: a fresh instance per measurement, three calls the
 * threads make on their own slots, and an end that checks and frees.  Every
 * function dies on a failure.
 */
struct sc_impl {
	const char *name;
	void (*start)(const struct sc_opts *o, size_t slots);
	void (*arm)(struct sc_thread *t, uint32_t slot, uint64_t delay_ns);
	void (*cancel)(struct sc_thread *t, uint32_t slot);
	void (*push)(struct sc_thread *t, uint32_t slot, uint64_t delay_ns);
	void (*stop)(size_t pending);	/* all @pending still there, none fired */
};

static _Atomic bool sc_stop;		/* set by the main thread: the mix ends */

/* ------------------------------------------------------------------------
 * kairos: the public API, from every caller thread.
 */

static struct kairos *sk_k;
static _Atomic uint64_t sk_fired;

/* No timer of this workload may fire: each that does is counted, and fails. */
static void sk_cb(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	(void)status;
	atomic_fetch_add_explicit(&sk_fired, 1, memory_order_relaxed);
}

static void sk_start(const struct sc_opts *o, size_t slots)
{
	struct kairos_config cfg;
	int rc;

	(void)slots;
	kairos_config_default(&cfg);
	cfg.shards = o->shards;
	atomic_store_explicit(&sk_fired, 0, memory_order_relaxed);
	rc = kairos_create(&cfg, &sk_k);
	if (rc)
		bench_die("kairos_create: %s", strerror(-rc));
}

static void sk_arm(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	int rc = kairos_arm(sk_k, delay_ns, sk_cb, NULL, &t->id[slot]);

	if (rc)
		bench_die("kairos_arm: %s", strerror(-rc));
}

static void sk_cancel(struct sc_thread *t, uint32_t slot)
{
	int rc = kairos_cancel(sk_k, t->id[slot]);

	if (rc)
		bench_die("kairos_cancel of a pending timer: %d (%s)", rc, strerror(-rc));
}

static void sk_push(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	int rc = kairos_reset(sk_k, t->id[slot], delay_ns);

	if (rc)
		bench_die("kairos_reset of a pending timer: %d (%s)", rc, strerror(-rc));
}

static void sk_stop(size_t pending)
{
	struct kairos_stats st;
	int rc;

	/* The shards file what was posted last before the count is taken. */
	bench_settle();
	rc = kairos_destroy(sk_k, KAIROS_DRAIN_DROP);
	if (rc < 0)
		bench_die("kairos_destroy: %s", strerror(-rc));
	if ((size_t)rc != pending)
		bench_die("kairos_destroy dropped %d timers, %zu were pending", rc, pending);
	rc = kairos_stats(sk_k, &st);
	if (rc)
		bench_die("kairos_stats: %s", strerror(-rc));
	if (st.fired || st.early || atomic_load_explicit(&sk_fired, memory_order_relaxed))
		bench_die("kairos: %" PRIu64 " timers armed %" PRIu64 " s or more ahead fired",
			  st.fired, BENCH_FAR_MIN / BENCH_S);
	sk_k = NULL;
}

static const struct sc_impl sc_kairos = {
	.name = "kairos",
	.start = sk_start,
	.arm = sk_arm,
	.cancel = sk_cancel,
	.push = sk_push,
	.stop = sk_stop,
};

/* ------------------------------------------------------------------------
 * The locked heaps, as written by hand: a mutex, a heap, a timerfd.  The
 * baseline is one of each for all threads (sc_heap); beside it, one of
 * each per caller thread (sc_pheap), as a server whose threads each touch
 * only their own timers may write it.  Each heap has the same code and its
 * own service thread.
 */

#define SH_NONE		UINT32_MAX	/* pos[] of a slot not in the heap */

struct sh_ent {
	uint64_t deadline;		/* CLOCK_MONOTONIC, ns */
	uint32_t slot;
};

struct sh_heap {
	pthread_mutex_t lock;
	struct sh_ent *heap;		/* [0 .. n): a binary min-heap on deadline */
	uint32_t *pos;			/* [slot] its index in heap, or SH_NONE */
	size_t n;
	int tfd;			/* set to heap[0].deadline, or disarmed */
	int efd;			/* written to stop the service thread */
	uint64_t armed;			/* the deadline tfd is set to; 0: none */
	uint64_t fired;			/* entries the service thread popped */
	uint64_t sets;			/* timerfd_settime() calls */
	pthread_t service;
	const char *name;		/* in messages */
} __attribute__((aligned(BENCH_ALIGN)));	/* per-thread ones share no line */

/* Puts @e at index @i and tells its slot where it is. */
static inline void sh_put(struct sh_heap *h, size_t i, struct sh_ent e)
{
	h->heap[i] = e;
	h->pos[e.slot] = (uint32_t)i;
}

static void sh_sift_up(struct sh_heap *h, size_t i)
{
	struct sh_ent e = h->heap[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (h->heap[parent].deadline <= e.deadline)
			break;
		sh_put(h, i, h->heap[parent]);
		i = parent;
	}
	sh_put(h, i, e);
}

static void sh_sift_down(struct sh_heap *h, size_t i)
{
	struct sh_ent e = h->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->heap[c + 1].deadline < h->heap[c].deadline)
			c++;
		if (h->heap[c].deadline >= e.deadline)
			break;
		sh_put(h, i, h->heap[c]);
		i = c;
	}
	sh_put(h, i, e);
}

/* Takes out the entry at @i: the last one fills the hole, and moves. */
static void sh_remove_at(struct sh_heap *h, size_t i)
{
	struct sh_ent last = h->heap[--h->n];

	h->pos[h->heap[i].slot] = SH_NONE;
	if (i == h->n)
		return;
	sh_put(h, i, last);
	if (i > 0 && h->heap[(i - 1) / 2].deadline > last.deadline)
		sh_sift_up(h, i);
	else
		sh_sift_down(h, i);
}

/*
 * Under the lock: the timerfd follows the minimum.  Set under the lock, so
 * that two threads cannot leave it set to the older of two minimums.
 */
static void sh_follow_min(struct sh_heap *h)
{
	uint64_t want = h->n ? h->heap[0].deadline : 0;
	struct itimerspec its = { { 0, 0 }, { (time_t)(want / BENCH_S), (long)(want % BENCH_S) } };

	if (want == h->armed)
		return;
	/* An it_value of zero disarms it. */
	if (timerfd_settime(h->tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
		bench_die("timerfd_settime: %s", strerror(errno));
	h->armed = want;
	h->sets++;
}

static void sh_lock(struct sh_heap *h)
{
	int rc = pthread_mutex_lock(&h->lock);

	if (rc)
		bench_die("pthread_mutex_lock: %s", strerror(rc));
}

static void sh_unlock(struct sh_heap *h)
{
	int rc = pthread_mutex_unlock(&h->lock);

	if (rc)
		bench_die("pthread_mutex_unlock: %s", strerror(rc));
}

/* A heap's service thread: wakes when the minimum is due, pops what is due. */
static void *sh_service_main(void *arg)
{
	struct sh_heap *h = arg;
	struct pollfd pfd[2] = { { .fd = h->tfd, .events = POLLIN },
				 { .fd = h->efd, .events = POLLIN } };

	for (;;) {
		uint64_t expirations, now;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			bench_die("poll: %s", strerror(errno));
		}
		if (pfd[1].revents)
			return NULL;
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* A re-arm between the poll and the read clears it: EAGAIN. */
		if (read(h->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
			bench_die("read of the timerfd: %s", strerror(errno));
		sh_lock(h);
		now = bench_now_ns();
		while (h->n && h->heap[0].deadline <= now) {
			sh_remove_at(h, 0);
			h->fired++;
		}
		sh_follow_min(h);
		sh_unlock(h);
	}
}

/* An empty heap for @slots slots, its timerfd and its service thread. */
static void sh_init(struct sh_heap *h, size_t slots, const char *name)
{
	int rc;

	rc = pthread_mutex_init(&h->lock, NULL);
	if (rc)
		bench_die("pthread_mutex_init: %s", strerror(rc));
	h->heap = bench_alloc(slots * sizeof(*h->heap));
	h->pos = bench_alloc(slots * sizeof(*h->pos));
	memset(h->pos, 0xff, slots * sizeof(*h->pos));	/* SH_NONE */
	h->n = 0;
	h->armed = 0;
	h->fired = 0;
	h->sets = 0;
	h->name = name;
	h->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (h->tfd < 0)
		bench_die("timerfd_create: %s", strerror(errno));
	h->efd = eventfd(0, EFD_CLOEXEC);
	if (h->efd < 0)
		bench_die("eventfd: %s", strerror(errno));
	rc = pthread_create(&h->service, NULL, sh_service_main, h);
	if (rc)
		bench_die("pthread_create: %s", strerror(rc));
}

static inline void sh_do_arm(struct sh_heap *h, uint32_t slot, uint64_t delay_ns)
{
	struct sh_ent e = { bench_now_ns() + delay_ns, slot };

	sh_lock(h);
	if (h->pos[e.slot] != SH_NONE)
		bench_die("%s: arm of slot %" PRIu32 ", which is pending", h->name, e.slot);
	h->heap[h->n++] = e;
	sh_sift_up(h, h->n - 1);
	sh_follow_min(h);
	sh_unlock(h);
}

static inline void sh_do_cancel(struct sh_heap *h, uint32_t s)
{
	sh_lock(h);
	if (h->pos[s] == SH_NONE)
		bench_die("%s: cancel of slot %" PRIu32 ", which is not pending", h->name, s);
	sh_remove_at(h, h->pos[s]);
	sh_follow_min(h);
	sh_unlock(h);
}

static inline void sh_do_push(struct sh_heap *h, uint32_t s, uint64_t delay_ns)
{
	uint64_t deadline = bench_now_ns() + delay_ns;
	size_t i;

	sh_lock(h);
	i = h->pos[s];
	if (i == SH_NONE)
		bench_die("%s: push of slot %" PRIu32 ", which is not pending", h->name, s);
	if (deadline < h->heap[i].deadline) {
		h->heap[i].deadline = deadline;
		sh_sift_up(h, i);
	} else {
		h->heap[i].deadline = deadline;
		sh_sift_down(h, i);
	}
	sh_follow_min(h);
	sh_unlock(h);
}

/* Untimed, at the end: a heap that lost its order measured nothing. */
static void sh_check(struct sh_heap *h)
{
	for (size_t i = 0; i < h->n; i++) {
		if (h->pos[h->heap[i].slot] != i)
			bench_die("%s: slot %" PRIu32 " at %zu thinks it is at %" PRIu32,
				  h->name, h->heap[i].slot, i, h->pos[h->heap[i].slot]);
		if (i > 0 && h->heap[(i - 1) / 2].deadline > h->heap[i].deadline)
			bench_die("%s: entry %zu is before its parent", h->name, i);
	}
}

/* Stops @h's service thread, checks that all @pending are there, frees. Return: its sets. */
static uint64_t sh_fini(struct sh_heap *h, size_t pending)
{
	uint64_t one = 1;
	int rc;

	if (write(h->efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		bench_die("write to the eventfd: %s", strerror(errno));
	rc = pthread_join(h->service, NULL);
	if (rc)
		bench_die("pthread_join: %s", strerror(rc));
	if (h->fired)
		bench_die("%s: %" PRIu64 " timers armed %" PRIu64 " s or more ahead fired",
			  h->name, h->fired, BENCH_FAR_MIN / BENCH_S);
	if (h->n != pending)
		bench_die("%s: %zu entries at the end, %zu were pending", h->name, h->n, pending);
	sh_check(h);
	if (close(h->tfd) != 0 || close(h->efd) != 0)
		bench_die("close: %s", strerror(errno));
	rc = pthread_mutex_destroy(&h->lock);
	if (rc)
		bench_die("pthread_mutex_destroy: %s", strerror(rc));
	free(h->heap);
	free(h->pos);
	h->heap = NULL;
	h->pos = NULL;
	return h->sets;
}

/* Over all of a column's measurements: how often its minimums moved. */
struct sh_totals {
	uint64_t sets;		/* timerfd_settime() calls, arming included */
	uint64_t calls;		/* calls of the mixes */
};

/* The baseline: one heap, one lock, one timerfd for all threads' slots. */
static struct sh_heap sh;
static struct sh_totals sh_totals;

static void sh_start(const struct sc_opts *o, size_t slots)
{
	(void)o;
	sh_init(&sh, slots, "locked heap");
}

static void sh_arm(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sh_do_arm(&sh, t->base + slot, delay_ns);
}

static void sh_cancel(struct sc_thread *t, uint32_t slot)
{
	sh_do_cancel(&sh, t->base + slot);
}

static void sh_push(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sh_do_push(&sh, t->base + slot, delay_ns);
}

static void sh_stop(size_t pending)
{
	sh_totals.sets += sh_fini(&sh, pending);
}

static const struct sc_impl sc_heap = {
	.name = "locked heap",
	.start = sh_start,
	.arm = sh_arm,
	.cancel = sh_cancel,
	.push = sh_push,
	.stop = sh_stop,
};

/*
 * Per-thread heaps: caller thread i has heap i, with its own lock, timerfd
 * and service thread, and only its own P slots (0 .. P - 1) in it.
 */
static struct sh_heap *sp_heaps;
static unsigned int sp_n;
static struct sh_totals sp_totals;

static void sp_start(const struct sc_opts *o, size_t slots)
{
	sp_n = (unsigned int)(slots / o->per_thread);
	sp_heaps = bench_alloc(sp_n * sizeof(*sp_heaps));
	for (unsigned int i = 0; i < sp_n; i++)
		sh_init(&sp_heaps[i], o->per_thread, "per-thread heap");
}

static void sp_arm(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sh_do_arm(&sp_heaps[t->idx], slot, delay_ns);
}

static void sp_cancel(struct sc_thread *t, uint32_t slot)
{
	sh_do_cancel(&sp_heaps[t->idx], slot);
}

static void sp_push(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sh_do_push(&sp_heaps[t->idx], slot, delay_ns);
}

/* Each thread's heap holds its P: @pending over the threads. */
static void sp_stop(size_t pending)
{
	for (unsigned int i = 0; i < sp_n; i++)
		sp_totals.sets += sh_fini(&sp_heaps[i], pending / sp_n);
	free(sp_heaps);
	sp_heaps = NULL;
}

static const struct sc_impl sc_pheap = {
	.name = "per-thread heaps",
	.start = sp_start,
	.arm = sp_arm,
	.cancel = sp_cancel,
	.push = sp_push,
	.stop = sp_stop,
};

/* ------------------------------------------------------------------------
 * The machine's floor: the same calls on private memory, no timer at all.
 * Each slot is a 64-byte record of its thread's own, as a kairos record
 * is; an arm or a push reads CLOCK_MONOTONIC and CASes the deadline into
 * it, a cancel CASes it to 0.  What this loses from T=1 to T is what the
 * CPUs and caches lose with T threads on records of that size; no timer
 * service can scale past it on the same machine.
 */

struct sf_rec {
	_Atomic uint64_t deadline;	/* 0: not pending */
	char pad[BENCH_ALIGN - sizeof(uint64_t)];
};

static struct sf_rec *sf_recs;
static size_t sf_slots;

static void sf_start(const struct sc_opts *o, size_t slots)
{
	(void)o;
	sf_recs = bench_alloc(slots * sizeof(*sf_recs));
	memset(sf_recs, 0, slots * sizeof(*sf_recs));
	sf_slots = slots;
}

/* One CAS of @slot's record from what it holds to @to; dies if it was not @pending. */
static void sf_cas(struct sc_thread *t, uint32_t slot, uint64_t to, bool pending)
{
	struct sf_rec *r = &sf_recs[t->base + slot];
	uint64_t was = atomic_load_explicit(&r->deadline, memory_order_relaxed);

	if ((was != 0) != pending ||
	    !atomic_compare_exchange_strong_explicit(&r->deadline, &was, to,
						     memory_order_acq_rel, memory_order_relaxed))
		bench_die("floor: slot %" PRIu32 " was %s", t->base + slot,
			  pending ? "not pending" : "pending");
}

static void sf_arm(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sf_cas(t, slot, bench_now_ns() + delay_ns, false);
}

static void sf_cancel(struct sc_thread *t, uint32_t slot)
{
	sf_cas(t, slot, 0, true);
}

static void sf_push(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	sf_cas(t, slot, bench_now_ns() + delay_ns, true);
}

static void sf_stop(size_t pending)
{
	size_t n = 0;

	for (size_t i = 0; i < sf_slots; i++)
		n += atomic_load_explicit(&sf_recs[i].deadline, memory_order_relaxed) != 0;
	if (n != pending)
		bench_die("floor: %zu records pending at the end, %zu expected", n, pending);
	free(sf_recs);
	sf_recs = NULL;
}

static const struct sc_impl sc_floor = {
	.name = "floor",
	.start = sf_start,
	.arm = sf_arm,
	.cancel = sf_cancel,
	.push = sf_push,
	.stop = sf_stop,
};

/* Column order; kairos first: the ratios are kairos over each heap. */
enum { SC_KAIROS, SC_HEAP, SC_PHEAP, SC_FLOOR };

static const struct sc_impl *const sc_impls[] = {
	[SC_KAIROS] = &sc_kairos, [SC_HEAP] = &sc_heap, [SC_PHEAP] = &sc_pheap,
	[SC_FLOOR] = &sc_floor,
};

#define SC_NIMPL	(sizeof(sc_impls) / sizeof(sc_impls[0]))

/* ------------------------------------------------------------------------
 * One measurement: T threads arm, then run the mix until told to stop.
 */

static void sc_barrier_wait(pthread_barrier_t *b)
{
	int rc = pthread_barrier_wait(b);

	if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
		bench_die("pthread_barrier_wait: %s", strerror(rc));
}

static void *sc_thread_main(void *arg)
{
	struct sc_thread *t = arg;
	const struct sc_impl *im = t->im;
	struct rng r = { t->seed };
	uint64_t *delay = t->delay;
	uint32_t per = t->per;
	uint64_t calls = 0;

	for (uint32_t s = 0; s < per; s++) {
		delay[s] = bench_far_delay(&r);
		im->arm(t, s, delay[s]);
	}
	sc_barrier_wait(t->armed);
	sc_barrier_wait(t->go);
	while (!atomic_load_explicit(&sc_stop, memory_order_relaxed)) {
		for (unsigned int i = 0; i < SC_CHECK_EVERY; i++) {
			uint32_t s = rng_below(&r, per);

			/* 2 steps in 3 a push: of the calls, 1/2 push, 1/4 cancel, 1/4 arm. */
			if (rng_below(&r, 3) < 2) {
				delay[s] += BENCH_PUSH_MIN + rng_below(&r, (uint32_t)BENCH_PUSH_SPAN + 1);
				im->push(t, s, delay[s]);
				calls++;
			} else {
				im->cancel(t, s);
				delay[s] = bench_far_delay(&r);
				im->arm(t, s, delay[s]);
				calls += 2;
			}
		}
	}
	t->end_ns = bench_now_ns();
	t->calls = calls;
	return NULL;
}

/*
 * How busy kairos's shard threads were from @t0 to @t1, given their CPU
 * times then (@before, @nb of them) and now: the busiest one's share of the
 * wall into busy[0], the mean over them into busy[1]; both -1 when none
 * could be read (a kernel without per-task schedstat).
 */
static void sc_shard_busy(const struct bench_task_cpu *before, size_t nb, uint64_t t0,
			  uint64_t t1, double busy[2])
{
	static struct bench_task_cpu after[SC_MAX_SHARDS];
	size_t na = bench_task_cpu(SC_SHARD_THREAD, after, SC_MAX_SHARDS), n = 0;
	double max = 0, sum = 0;

	for (size_t i = 0; i < nb; i++)
		for (size_t j = 0; j < na && j < SC_MAX_SHARDS; j++) {
			double f;

			if (after[j].tid != before[i].tid)
				continue;
			f = (double)(after[j].ns - before[i].ns) / (double)(t1 - t0);
			max = f > max ? f : max;
			sum += f;
			n++;
		}
	busy[0] = n ? max : -1;
	busy[1] = n ? sum / (double)n : -1;
}

/*
 * Aggregate calls per second of @nt threads on a fresh @im; for kairos,
 * how busy its shard threads were over the mix into @busy (sc_shard_busy()).
 */
static double sc_measure(const struct sc_opts *o, const struct sc_impl *im, unsigned int nt,
			 uint64_t seed, double busy[2])
{
	static struct bench_task_cpu shard0[SC_MAX_SHARDS];
	struct sc_thread *t = bench_alloc(nt * sizeof(*t));
	size_t slots = (size_t)nt * o->per_thread, nshard = 0;
	pthread_barrier_t armed, go;
	uint64_t t0, t1, end = 0, calls = 0;
	int rc;

	im->start(o, slots);
	if (pthread_barrier_init(&armed, NULL, nt + 1) || pthread_barrier_init(&go, NULL, nt + 1))
		bench_die("pthread_barrier_init failed");
	atomic_store_explicit(&sc_stop, false, memory_order_relaxed);
	for (unsigned int i = 0; i < nt; i++) {
		t[i] = (struct sc_thread){
			.im = im, .per = (uint32_t)o->per_thread,
			.base = (uint32_t)(i * o->per_thread), .idx = i, .armed = &armed, .go = &go,
			.seed = seed + i,
		};
		t[i].delay = bench_alloc(o->per_thread * sizeof(*t[i].delay));
		if (im == &sc_kairos)
			t[i].id = bench_alloc(o->per_thread * sizeof(*t[i].id));
		rc = pthread_create(&t[i].thread, NULL, sc_thread_main, &t[i]);
		if (rc)
			bench_die("pthread_create: %s", strerror(rc));
	}
	sc_barrier_wait(&armed);
	/* kairos's shards file the arms before the clock starts. */
	bench_settle();
	if (im == &sc_kairos)
		nshard = bench_task_cpu(SC_SHARD_THREAD, shard0, SC_MAX_SHARDS);
	sc_barrier_wait(&go);
	t0 = bench_now_ns();
	bench_sleep_ns((uint64_t)(o->seconds * 1e9));
	atomic_store_explicit(&sc_stop, true, memory_order_relaxed);
	for (unsigned int i = 0; i < nt; i++) {
		rc = pthread_join(t[i].thread, NULL);
		if (rc)
			bench_die("pthread_join: %s", strerror(rc));
		end = t[i].end_ns > end ? t[i].end_ns : end;
		calls += t[i].calls;
	}
	t1 = bench_now_ns();
	if (im == &sc_kairos)
		sc_shard_busy(shard0, nshard < SC_MAX_SHARDS ? nshard : SC_MAX_SHARDS, t0, t1,
			      busy);
	im->stop(slots);
	if (im == &sc_heap)
		sh_totals.calls += calls;
	else if (im == &sc_pheap)
		sp_totals.calls += calls;
	for (unsigned int i = 0; i < nt; i++) {
		free(t[i].delay);
		free(t[i].id);
	}
	if (pthread_barrier_destroy(&armed) || pthread_barrier_destroy(&go))
		bench_die("pthread_barrier_destroy failed");
	free(t);
	return (double)calls / ((double)(end - t0) / 1e9);
}

/* ------------------------------------------------------------------------
 * The runs, the table and the goal.
 */

static void sc_describe_kairos(const struct sc_opts *o, char *buf, size_t len)
{
	struct kairos_config cfg;
	struct kairos *k;
	const char *backend = "?";
	int rc;

	kairos_config_default(&cfg);
	cfg.shards = o->shards;
	rc = kairos_create(&cfg, &k);
	if (rc)
		bench_die("kairos_create: %s", strerror(-rc));
	if (kairos_backend_info(k, 0, &backend, NULL) != 0)
		backend = "?";
	snprintf(buf, len, "kairos %d.%d.%d: shards=%u, %u workers per shard (default), "
		 "1 ms tick (default), backend %s", KAIROS_VERSION_MAJOR, KAIROS_VERSION_MINOR,
		 KAIROS_VERSION_PATCH, o->shards, cfg.workers ? cfg.workers : 2u, backend);
	rc = kairos_destroy(k, KAIROS_DRAIN_DROP);
	if (rc != 0)
		bench_die("kairos_destroy: %d", rc);
}

static void sc_print_legend(const struct sc_opts *o)
{
	char buf[512];

	bench_machine(buf, sizeof(buf));
	printf("# scale: T caller threads, each with its own P timers, on one kairos service, "
	       "then the same on a locked heap and on per-thread heaps (machine: %s)\n", buf);
	sc_describe_kairos(o, buf, sizeof(buf));
	printf("# %s\n", buf);
	printf("# locked heap: one binary min-heap of (deadline, slot) under one pthread mutex, "
	       "index in the heap per slot (cancel, push O(log n)),\n");
	printf("#   one CLOCK_MONOTONIC timerfd set to its minimum whenever that changes "
	       "(timerfd_settime under the lock), one thread polling it to pop what is due\n");
	printf("# pt-heaps (per-thread heaps): the same heap code once per caller thread, each "
	       "with only that thread's P slots: its own mutex, heap,\n");
	printf("#   timerfd and polling thread (T of each), so no caller thread ever waits for "
	       "another's lock; a second baseline, the goal stays on the locked heap\n");
	printf("# each thread: its P timers armed untimed (U[10,60] s: none fires), then %.1f s "
	       "of calls on random ones of its own, 2 steps in 3 a push-later\n", o->seconds);
	printf("#   (kairos_reset: the slot's delay moves on by U[1,1000] ms, so each push is "
	       "later), 1 in 3 a cancel and at once the slot's re-arm (U[10,60] s):\n");
	printf("#   of the calls 1/2 push, 1/4 cancel, 1/4 arm; pending stays T*P; every call "
	       "reads CLOCK_MONOTONIC (the heaps' outside their lock)\n");
	printf("# each run measures every T in turn, from a different T each run, and the four "
	       "columns in turn at each T, each of them first in turn;\n");
	printf("# calls/s: all threads' calls over the wall time from the start to the last "
	       "thread's stop, median over the runs; per thread: that over T;\n");
	printf("#   x T=1: over the same column's T=1 of the same run; kairos/heap, "
	       "kairos/pt-heaps: kairos over that column at the same T, same run;\n");
	printf("#   each ratio is the median of the runs' own ratios (not a ratio of the medians); "
	       "shard CPU: each kairos shard thread's CPU time over\n");
	printf("#   the same wall time, the busiest one's and the mean (100%%: a shard thread never "
	       "slept), medians over the runs\n");
	printf("# floor: the same calls on private 64-byte records, one per slot, no timers: an "
	       "arm or push reads CLOCK_MONOTONIC and CASes the record,\n");
	printf("#   a cancel CASes it; its x T=1 is what this machine's CPUs and caches allow "
	       "T threads on that much memory\n\n");
}

/* The index of the first @nt in the thread list, or -1. */
static int sc_row_of(const struct sc_opts *o, unsigned int nt)
{
	for (unsigned int i = 0; i < o->nthreads; i++)
		if (o->threads[i] == nt)
			return (int)i;
	return -1;
}

/*
 * A run's ratios at one T: each column over its T=1 (SC_X_SELF + column),
 * and kairos over each heap.
 */
enum {
	SC_X_SELF,
	SC_X_HEAP = SC_X_SELF + SC_NIMPL,	/* kairos / locked heap */
	SC_X_PHEAP,				/* kairos / per-thread heaps */
	SC_NX
};

/* @xmed: [T index][SC_X_*], medians of the runs' ratios. */
static void sc_print_goal(const struct sc_opts *o, double (*xmed)[SC_NX])
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int one = sc_row_of(o, 1), four = sc_row_of(o, SC_GOAL_T);
	double self, heap;
	bool met;

	if (one < 0 || four < 0) {
		printf("goal: not judged: it needs the T=1 and T=%u rows\n", SC_GOAL_T);
		return;
	}
	self = xmed[four][SC_X_SELF + SC_KAIROS];
	heap = xmed[four][SC_X_HEAP];
	met = self >= SC_GOAL_SELF && heap >= SC_GOAL_HEAP;
	printf("goal: at T=%u on %ld CPUs, kairos's aggregate >= %.1fx its T=1 (%.2fx: %s) and "
	       ">= %.0fx the locked heap's (%.2fx: %s): %s", SC_GOAL_T, SC_GOAL_CPUS,
	       SC_GOAL_SELF, self, self >= SC_GOAL_SELF ? "met" : "missed", SC_GOAL_HEAP, heap,
	       heap >= SC_GOAL_HEAP ? "met" : "missed", met ? "met" : "missed");
	if (cpus != SC_GOAL_CPUS)
		printf(" (but this machine has %ld CPUs online)", cpus);
	printf("; the floor's own: %.2fx its T=1; kairos over the per-thread heaps (no goal): "
	       "%.2fx (medians of the runs' ratios)\n", xmed[four][SC_X_SELF + SC_FLOOR],
	       xmed[four][SC_X_PHEAP]);
}

/* --raw: each run's ratios, one line per T and ratio. */
static void sc_print_raw_ratios(const struct sc_opts *o, double (*x)[SC_MAX_TLIST][SC_NX],
				int one)
{
	char name[48];

	printf("kairos-bench scale: ratios in each run (each run's own)\n");
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (int j = 0; j < SC_NX; j++) {
			/* x T=1: none without a T=1 row, and 1 on it. */
			if (j < SC_X_HEAP && (one < 0 || (int)ti == one))
				continue;
			if (j < SC_X_HEAP)
				snprintf(name, sizeof(name), "%s x T=1", sc_impls[j]->name);
			else
				snprintf(name, sizeof(name), "%s", j == SC_X_HEAP ? "kairos/heap" :
					 "kairos/pt-heaps");
			printf("T=%-3u %-22s", o->threads[ti], name);
			bench_raw_runs(&x[0][ti][j], SC_MAX_TLIST * SC_NX, o->b.runs, 8, 3, 1);
		}
}

static void sc_run(const struct sc_opts *o)
{
	double (*v)[SC_MAX_TLIST][SC_NIMPL] = bench_alloc(o->b.runs * sizeof(*v));
	double (*x)[SC_MAX_TLIST][SC_NX] = bench_alloc(o->b.runs * sizeof(*x));
	double (*busy)[SC_MAX_TLIST][2] = bench_alloc(o->b.runs * sizeof(*busy));
	double med[SC_NIMPL][SC_MAX_TLIST], xmed[SC_MAX_TLIST][SC_NX], busy_med[SC_MAX_TLIST][2];
	int one = sc_row_of(o, 1);

	for (unsigned int run = 0; run < o->b.runs; run++) {
		/*
		 * Every T in this run, so that its ratios compare measurements
		 * seconds apart, not a whole pass over the thread counts; each
		 * run starts at another T.
		 */
		for (unsigned int step = 0; step < o->nthreads; step++) {
			unsigned int ti = (step + run) % o->nthreads, nt = o->threads[ti];
			/* The same seeds for all columns: the same slots in the same order. */
			uint64_t seed = (o->b.seed * UINT64_C(1000003) + run) * 4096u + nt * 64u;

			for (size_t k = 0; k < SC_NIMPL; k++) {
				size_t i = (k + run + ti) % SC_NIMPL;

				bench_progress("kairos-bench scale: run %u/%u T=%u: %s", run + 1,
					       o->b.runs, nt, sc_impls[i]->name);
				v[run][ti][i] = sc_measure(o, sc_impls[i], nt, seed,
							   busy[run][ti]);
			}
		}
		for (unsigned int ti = 0; ti < o->nthreads; ti++) {
			for (size_t i = 0; i < SC_NIMPL; i++)
				x[run][ti][SC_X_SELF + i] = one < 0 ? 0 :
							    v[run][ti][i] / v[run][one][i];
			x[run][ti][SC_X_HEAP] = v[run][ti][SC_KAIROS] / v[run][ti][SC_HEAP];
			x[run][ti][SC_X_PHEAP] = v[run][ti][SC_KAIROS] / v[run][ti][SC_PHEAP];
		}
	}
	bench_progress_done();
	if (o->b.raw)
		printf("kairos-bench scale: Mcalls/s in each run\n");
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (size_t i = 0; i < SC_NIMPL; i++) {
			if (o->b.raw) {
				printf("T=%-3u %-22s", o->threads[ti], sc_impls[i]->name);
				bench_raw_runs(&v[0][ti][i], SC_MAX_TLIST * SC_NIMPL, o->b.runs, 8, 3,
					       1e6);
			}
			med[i][ti] = bench_aggregate(BENCH_MEDIAN, &v[0][ti][i],
						     SC_MAX_TLIST * SC_NIMPL, o->b.runs);
		}
	if (o->b.raw)
		sc_print_raw_ratios(o, x, one);
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (int j = 0; j < SC_NX; j++)
			xmed[ti][j] = bench_aggregate(BENCH_MEDIAN, &x[0][ti][j],
						      SC_MAX_TLIST * SC_NX, o->b.runs);
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (size_t j = 0; j < 2; j++) {
			if (o->b.raw) {
				printf("T=%-3u %-22s", o->threads[ti], j ? "shard mean %" :
				       "shard max %");
				for (unsigned int run = 0; run < o->b.runs; run++)
					if (busy[run][ti][j] < 0)
						printf(" %8s", "-");
					else
						printf(" %8.1f", busy[run][ti][j] * 100);
				printf("\n");
			}
			busy_med[ti][j] = bench_aggregate(BENCH_MEDIAN, &busy[0][ti][j],
							  SC_MAX_TLIST * 2, o->b.runs);
		}
	if (o->b.raw)
		printf("\n");

	printf("kairos-bench scale: P=%" PRIu64 " timers per thread, shards=%u, %.1f s per "
	       "measurement, runs=%u, seed=%" PRIu64 " (medians; ratios: medians of each "
	       "run's)\n", o->per_thread, o->shards, o->seconds, o->b.runs, o->b.seed);
	printf("%-7s  %15s %10s %7s  %15s %10s %7s  %11s  %17s %10s %7s  %15s  %18s  %15s "
	       "%7s\n", "threads", "kairos Mcalls/s", "per thread", "x T=1", "heap Mcalls/s",
	       "per thread", "x T=1", "kairos/heap", "pt-heaps Mcalls/s", "per thread", "x T=1",
	       "kairos/pt-heaps", "shard CPU max/mean", "floor Mcalls/s", "x T=1");
	for (unsigned int ti = 0; ti < o->nthreads; ti++) {
		unsigned int nt = o->threads[ti];
		char self[SC_NIMPL][16], cpu[24];

		for (size_t i = 0; i < SC_NIMPL; i++)
			if (one < 0)
				snprintf(self[i], sizeof(self[i]), "-");
			else
				snprintf(self[i], sizeof(self[i]), "%.2fx",
					 xmed[ti][SC_X_SELF + i]);
		if (busy_med[ti][0] < 0)
			snprintf(cpu, sizeof(cpu), "-");
		else
			snprintf(cpu, sizeof(cpu), "%.0f%%/%3.0f%%", busy_med[ti][0] * 100,
				 busy_med[ti][1] * 100);
		printf("%-7u  %15.3f %10.3f %7s  %15.3f %10.3f %7s  %10.2fx  %17.3f %10.3f %7s  "
		       "%14.2fx  %18s  %15.3f %7s\n", nt, med[SC_KAIROS][ti] / 1e6,
		       med[SC_KAIROS][ti] / 1e6 / nt, self[SC_KAIROS], med[SC_HEAP][ti] / 1e6,
		       med[SC_HEAP][ti] / 1e6 / nt, self[SC_HEAP], xmed[ti][SC_X_HEAP],
		       med[SC_PHEAP][ti] / 1e6, med[SC_PHEAP][ti] / 1e6 / nt, self[SC_PHEAP],
		       xmed[ti][SC_X_PHEAP], cpu, med[SC_FLOOR][ti] / 1e6, self[SC_FLOOR]);
	}
	printf("locked heap: %" PRIu64 " timerfd_settime() calls (arming included) over %"
	       PRIu64 " calls, all its measurements: its minimum rarely moves\n",
	       sh_totals.sets, sh_totals.calls);
	printf("pt-heaps: %" PRIu64 " timerfd_settime() calls (arming included) over %" PRIu64
	       " calls, all its measurements\n", sp_totals.sets, sp_totals.calls);
	sc_print_goal(o, xmed);
	printf("\n");
	fflush(stdout);
	free(busy);
	free(x);
	free(v);
}

/* ------------------------------------------------------------------------
 * Options and the entry point.
 */

static void sc_usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-bench scale [--threads LIST] [--per-thread N] [--shards N]\n"
		"                          [--seconds S] [--runs N] [--seed S] [--raw]\n"
		"\n"
		"T caller threads, each with its own P pending timers, run a fixed-time mix\n"
		"of push-later (1/2 of the calls), cancel (1/4) and re-arm (1/4) on one\n"
		"kairos service, then on one binary heap under one mutex with a timerfd\n"
		"serviced by one thread, and on per-thread heaps (each caller thread its\n"
		"own mutex, heap, timerfd and service thread): aggregate calls/s, per\n"
		"thread, the ratio to T=1 and kairos's ratio to each heap, at each T,\n"
		"ratios as medians of each run's own; then the scaling goal\n"
		"(at T=%u: kairos >= %.1fx its T=1 and >= %.0fx the locked heap), which\n"
		"is printed, not enforced.\n"
		"\n"
		"  --threads LIST  comma-separated thread counts, 1..%u (default 1,2,4,8)\n"
		"  --per-thread N  timers per thread (1..%u, 1e5 style allowed; default\n"
		"                  100000)\n"
		"  --shards N      kairos shards (1..256, default 2); workers, tick and\n"
		"                  backend are the defaults\n"
		"  --seconds S     length of each measurement's mix (0.1..600, default 2)\n"
		"  --runs N        runs, each through every thread count; medians\n"
		"                  reported (default 3)\n"
		"  --seed S        workload seed (default 1)\n"
		"  --raw           also print every run's numbers\n"
		"  -h, --help      this text\n",
		SC_GOAL_T, SC_GOAL_SELF, SC_GOAL_HEAP, SC_MAX_THREADS, SC_MAX_PER);
}


static void sc_parse_threads(struct sc_opts *o, const char *arg)
{
	const char *p = arg;
	char num[32];

	o->nthreads = 0;
	do {
		size_t len = strcspn(p, ",");

		snprintf(num, sizeof(num), "%.*s", (int)len, p);
		if (o->nthreads == SC_MAX_TLIST)
			opt_fail("--threads", "more than %u thread counts", SC_MAX_TLIST);
		o->threads[o->nthreads++] = (unsigned int)opt_u64("--threads", num, 1,
								  SC_MAX_THREADS);
		p += len;
	} while (*p++ == ',');
}

/* @argv[0] is "scale". */
int sc_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		BENCH_OPT_RUNS, BENCH_OPT_SEED, BENCH_OPT_RAW, BENCH_OPT_HELP,
		{ "threads", required_argument, NULL, 't' },
		{ "per-thread", required_argument, NULL, 'p' },
		{ "shards", required_argument, NULL, 'S' },
		{ "seconds", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	struct sc_opts o = {
		.threads = { 1, 2, 4, 8 }, .nthreads = 4, .per_thread = 100000, .shards = 2,
		.seconds = 2, .b = { .runs = 3, .seed = 1 },
	};
	int c;

	bench_opt_start("scale");
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		if (bench_opt(c, &o.b, 0, 0))
			continue;
		switch (c) {
		case 't':
			sc_parse_threads(&o, optarg);
			break;
		case 'p':
			o.per_thread = opt_u64("--per-thread", optarg, 1, SC_MAX_PER);
			break;
		case 'S':
			o.shards = (unsigned int)opt_u64("--shards", optarg, 1, SC_MAX_SHARDS);
			break;
		case 'd':
			o.seconds = opt_double("--seconds", optarg, 0.1, 600);
			break;
		case 'h':
			sc_usage(stdout);
			return 0;
		}
	}

	bench_warn_unoptimized();
	sc_print_legend(&o);
	sc_run(&o);
	return 0;
}
