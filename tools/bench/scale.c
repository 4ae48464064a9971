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
 * thread (nothing falls due here, so it sleeps).
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
 * memory.  The three take turns going first.  Every call is checked, and
 * each measurement ends with all T * P still pending and none fired.
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
 * The locked heap, as written by hand: one mutex, one heap, one timerfd.
 */

#define SH_NONE		UINT32_MAX	/* pos[] of a slot not in the heap */

struct sh_ent {
	uint64_t deadline;		/* CLOCK_MONOTONIC, ns */
	uint32_t slot;
};

static struct {
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
} sh;

/* Over all of the heap's measurements: how often its minimum moved. */
static uint64_t sh_sets_total;
static uint64_t sh_calls_total;

/* Puts @e at index @i and tells its slot where it is. */
static inline void sh_put(size_t i, struct sh_ent e)
{
	sh.heap[i] = e;
	sh.pos[e.slot] = (uint32_t)i;
}

static void sh_sift_up(size_t i)
{
	struct sh_ent e = sh.heap[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (sh.heap[parent].deadline <= e.deadline)
			break;
		sh_put(i, sh.heap[parent]);
		i = parent;
	}
	sh_put(i, e);
}

static void sh_sift_down(size_t i)
{
	struct sh_ent e = sh.heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= sh.n)
			break;
		if (c + 1 < sh.n && sh.heap[c + 1].deadline < sh.heap[c].deadline)
			c++;
		if (sh.heap[c].deadline >= e.deadline)
			break;
		sh_put(i, sh.heap[c]);
		i = c;
	}
	sh_put(i, e);
}

/* Takes out the entry at @i: the last one fills the hole, and moves. */
static void sh_remove_at(size_t i)
{
	struct sh_ent last = sh.heap[--sh.n];

	sh.pos[sh.heap[i].slot] = SH_NONE;
	if (i == sh.n)
		return;
	sh_put(i, last);
	if (i > 0 && sh.heap[(i - 1) / 2].deadline > last.deadline)
		sh_sift_up(i);
	else
		sh_sift_down(i);
}

/*
 * Under the lock: the timerfd follows the minimum.  Set under the lock, so
 * that two threads cannot leave it set to the older of two minimums.
 */
static void sh_follow_min(void)
{
	uint64_t want = sh.n ? sh.heap[0].deadline : 0;
	struct itimerspec its = { { 0, 0 }, { (time_t)(want / BENCH_S), (long)(want % BENCH_S) } };

	if (want == sh.armed)
		return;
	/* An it_value of zero disarms it. */
	if (timerfd_settime(sh.tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
		bench_die("timerfd_settime: %s", strerror(errno));
	sh.armed = want;
	sh.sets++;
}

static void sh_lock(void)
{
	int rc = pthread_mutex_lock(&sh.lock);

	if (rc)
		bench_die("pthread_mutex_lock: %s", strerror(rc));
}

static void sh_unlock(void)
{
	int rc = pthread_mutex_unlock(&sh.lock);

	if (rc)
		bench_die("pthread_mutex_unlock: %s", strerror(rc));
}

/* The service thread: wakes when the minimum is due, pops what is due. */
static void *sh_service_main(void *arg)
{
	struct pollfd pfd[2] = { { .fd = sh.tfd, .events = POLLIN },
				 { .fd = sh.efd, .events = POLLIN } };

	(void)arg;
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
		if (read(sh.tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
			bench_die("read of the timerfd: %s", strerror(errno));
		sh_lock();
		now = bench_now_ns();
		while (sh.n && sh.heap[0].deadline <= now) {
			sh_remove_at(0);
			sh.fired++;
		}
		sh_follow_min();
		sh_unlock();
	}
}

static void sh_start(const struct sc_opts *o, size_t slots)
{
	int rc;

	(void)o;
	rc = pthread_mutex_init(&sh.lock, NULL);
	if (rc)
		bench_die("pthread_mutex_init: %s", strerror(rc));
	sh.heap = bench_alloc(slots * sizeof(*sh.heap));
	sh.pos = bench_alloc(slots * sizeof(*sh.pos));
	memset(sh.pos, 0xff, slots * sizeof(*sh.pos));	/* SH_NONE */
	sh.n = 0;
	sh.armed = 0;
	sh.fired = 0;
	sh.sets = 0;
	sh.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (sh.tfd < 0)
		bench_die("timerfd_create: %s", strerror(errno));
	sh.efd = eventfd(0, EFD_CLOEXEC);
	if (sh.efd < 0)
		bench_die("eventfd: %s", strerror(errno));
	rc = pthread_create(&sh.service, NULL, sh_service_main, NULL);
	if (rc)
		bench_die("pthread_create: %s", strerror(rc));
}

static void sh_arm(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	struct sh_ent e = { bench_now_ns() + delay_ns, t->base + slot };

	sh_lock();
	if (sh.pos[e.slot] != SH_NONE)
		bench_die("locked heap: arm of slot %" PRIu32 ", which is pending", e.slot);
	sh.heap[sh.n++] = e;
	sh_sift_up(sh.n - 1);
	sh_follow_min();
	sh_unlock();
}

static void sh_cancel(struct sc_thread *t, uint32_t slot)
{
	uint32_t s = t->base + slot;

	sh_lock();
	if (sh.pos[s] == SH_NONE)
		bench_die("locked heap: cancel of slot %" PRIu32 ", which is not pending", s);
	sh_remove_at(sh.pos[s]);
	sh_follow_min();
	sh_unlock();
}

static void sh_push(struct sc_thread *t, uint32_t slot, uint64_t delay_ns)
{
	uint64_t deadline = bench_now_ns() + delay_ns;
	uint32_t s = t->base + slot;
	size_t i;

	sh_lock();
	i = sh.pos[s];
	if (i == SH_NONE)
		bench_die("locked heap: push of slot %" PRIu32 ", which is not pending", s);
	if (deadline < sh.heap[i].deadline) {
		sh.heap[i].deadline = deadline;
		sh_sift_up(i);
	} else {
		sh.heap[i].deadline = deadline;
		sh_sift_down(i);
	}
	sh_follow_min();
	sh_unlock();
}

/* Untimed, at the end: a heap that lost its order measured nothing. */
static void sh_check(void)
{
	for (size_t i = 0; i < sh.n; i++) {
		if (sh.pos[sh.heap[i].slot] != i)
			bench_die("locked heap: slot %" PRIu32 " at %zu thinks it is at %" PRIu32,
				  sh.heap[i].slot, i, sh.pos[sh.heap[i].slot]);
		if (i > 0 && sh.heap[(i - 1) / 2].deadline > sh.heap[i].deadline)
			bench_die("locked heap: entry %zu is before its parent", i);
	}
}

static void sh_stop(size_t pending)
{
	uint64_t one = 1;
	int rc;

	if (write(sh.efd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		bench_die("write to the eventfd: %s", strerror(errno));
	rc = pthread_join(sh.service, NULL);
	if (rc)
		bench_die("pthread_join: %s", strerror(rc));
	if (sh.fired)
		bench_die("locked heap: %" PRIu64 " timers armed %" PRIu64 " s or more ahead "
			  "fired", sh.fired, BENCH_FAR_MIN / BENCH_S);
	if (sh.n != pending)
		bench_die("locked heap: %zu entries at the end, %zu were pending", sh.n, pending);
	sh_check();
	if (close(sh.tfd) != 0 || close(sh.efd) != 0)
		bench_die("close: %s", strerror(errno));
	rc = pthread_mutex_destroy(&sh.lock);
	if (rc)
		bench_die("pthread_mutex_destroy: %s", strerror(rc));
	sh_sets_total += sh.sets;
	free(sh.heap);
	free(sh.pos);
	sh.heap = NULL;
	sh.pos = NULL;
}

static const struct sc_impl sc_heap = {
	.name = "locked heap",
	.start = sh_start,
	.arm = sh_arm,
	.cancel = sh_cancel,
	.push = sh_push,
	.stop = sh_stop,
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

/* Column order; kairos first: the ratios are kairos over the heap. */
static const struct sc_impl *const sc_impls[] = { &sc_kairos, &sc_heap, &sc_floor };

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
			.base = (uint32_t)(i * o->per_thread), .armed = &armed, .go = &go,
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
		sh_calls_total += calls;
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
	       "then the same on a locked heap (machine: %s)\n", buf);
	sc_describe_kairos(o, buf, sizeof(buf));
	printf("# %s\n", buf);
	printf("# locked heap: one binary min-heap of (deadline, slot) under one pthread mutex, "
	       "index in the heap per slot (cancel, push O(log n)),\n");
	printf("#   one CLOCK_MONOTONIC timerfd set to its minimum whenever that changes "
	       "(timerfd_settime under the lock), one thread polling it to pop what is due\n");
	printf("# each thread: its P timers armed untimed (U[10,60] s: none fires), then %.1f s "
	       "of calls on random ones of its own, 2 steps in 3 a push-later\n", o->seconds);
	printf("#   (kairos_reset: the slot's delay moves on by U[1,1000] ms, so each push is "
	       "later), 1 in 3 a cancel and at once the slot's re-arm (U[10,60] s):\n");
	printf("#   of the calls 1/2 push, 1/4 cancel, 1/4 arm; pending stays T*P; every call "
	       "reads CLOCK_MONOTONIC (the heap's outside its lock)\n");
	printf("# calls/s: all threads' calls over the wall time from the start to the last "
	       "thread's stop; per thread: that over T; x T=1: over the\n");
	printf("#   same column's T=1; kairos/heap: at the same T; shard CPU: each kairos shard "
	       "thread's CPU time over the same wall time,\n");
	printf("#   the busiest one's and the mean (100%%: a shard thread never slept).  Medians "
	       "over the runs; the three take turns going first.\n");
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

static void sc_print_goal(const struct sc_opts *o, double (*med)[SC_MAX_TLIST])
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int one = sc_row_of(o, 1), four = sc_row_of(o, SC_GOAL_T);
	double self, heap;
	bool met;

	if (one < 0 || four < 0) {
		printf("goal: not judged: it needs the T=1 and T=%u rows\n", SC_GOAL_T);
		return;
	}
	self = med[0][four] / med[0][one];
	heap = med[0][four] / med[1][four];
	met = self >= SC_GOAL_SELF && heap >= SC_GOAL_HEAP;
	printf("goal: at T=%u on %ld CPUs, kairos's aggregate >= %.1fx its T=1 (%.2fx: %s) and "
	       ">= %.0fx the locked heap's (%.2fx: %s): %s", SC_GOAL_T, SC_GOAL_CPUS,
	       SC_GOAL_SELF, self, self >= SC_GOAL_SELF ? "met" : "missed", SC_GOAL_HEAP, heap,
	       heap >= SC_GOAL_HEAP ? "met" : "missed", met ? "met" : "missed");
	if (cpus != SC_GOAL_CPUS)
		printf(" (but this machine has %ld CPUs online)", cpus);
	printf("; the floor's own: %.2fx its T=1\n", med[2][four] / med[2][one]);
}

static void sc_run(const struct sc_opts *o)
{
	double (*v)[SC_MAX_TLIST][SC_NIMPL] = bench_alloc(o->b.runs * sizeof(*v));
	double (*busy)[SC_MAX_TLIST][2] = bench_alloc(o->b.runs * sizeof(*busy));
	double med[SC_NIMPL][SC_MAX_TLIST], busy_med[SC_MAX_TLIST][2];
	int one = sc_row_of(o, 1);

	for (unsigned int ti = 0; ti < o->nthreads; ti++) {
		unsigned int nt = o->threads[ti];

		for (unsigned int run = 0; run < o->b.runs; run++) {
			/* The same seeds for both: the same slots in the same order. */
			uint64_t seed = (o->b.seed * UINT64_C(1000003) + run) * 4096u + nt * 64u;

			for (size_t k = 0; k < SC_NIMPL; k++) {
				size_t i = (k + run) % SC_NIMPL;

				bench_progress("kairos-bench scale: T=%u run %u/%u: %s", nt,
					       run + 1, o->b.runs, sc_impls[i]->name);
				v[run][ti][i] = sc_measure(o, sc_impls[i], nt, seed,
							   busy[run][ti]);
			}
		}
	}
	bench_progress_done();
	if (o->b.raw)
		printf("kairos-bench scale: Mcalls/s in each run\n");
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (size_t i = 0; i < SC_NIMPL; i++) {
			if (o->b.raw) {
				printf("T=%-3u %-12s", o->threads[ti], sc_impls[i]->name);
				bench_raw_runs(&v[0][ti][i], SC_MAX_TLIST * SC_NIMPL, o->b.runs, 8, 3,
					       1e6);
			}
			med[i][ti] = bench_aggregate(BENCH_MEDIAN, &v[0][ti][i],
						     SC_MAX_TLIST * SC_NIMPL, o->b.runs);
		}
	for (unsigned int ti = 0; ti < o->nthreads; ti++)
		for (size_t j = 0; j < 2; j++) {
			if (o->b.raw) {
				printf("T=%-3u %-12s", o->threads[ti], j ? "shard mean %" :
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
	       "measurement, runs=%u, seed=%" PRIu64 " (medians)\n", o->per_thread, o->shards,
	       o->seconds, o->b.runs, o->b.seed);
	printf("%-7s  %15s %10s %7s  %15s %10s %7s  %11s  %18s  %15s %7s\n", "threads",
	       "kairos Mcalls/s", "per thread", "x T=1", "heap Mcalls/s", "per thread", "x T=1",
	       "kairos/heap", "shard CPU max/mean", "floor Mcalls/s", "x T=1");
	for (unsigned int ti = 0; ti < o->nthreads; ti++) {
		unsigned int nt = o->threads[ti];
		char self[SC_NIMPL][16], cpu[24];

		for (size_t i = 0; i < SC_NIMPL; i++)
			if (one < 0)
				snprintf(self[i], sizeof(self[i]), "-");
			else
				snprintf(self[i], sizeof(self[i]), "%.2fx",
					 med[i][ti] / med[i][one]);
		if (busy_med[ti][0] < 0)
			snprintf(cpu, sizeof(cpu), "-");
		else
			snprintf(cpu, sizeof(cpu), "%.0f%%/%3.0f%%", busy_med[ti][0] * 100,
				 busy_med[ti][1] * 100);
		printf("%-7u  %15.3f %10.3f %7s  %15.3f %10.3f %7s  %10.2fx  %18s  %15.3f %7s\n",
		       nt, med[0][ti] / 1e6, med[0][ti] / 1e6 / nt, self[0], med[1][ti] / 1e6,
		       med[1][ti] / 1e6 / nt, self[1], med[0][ti] / med[1][ti], cpu,
		       med[2][ti] / 1e6, self[2]);
	}
	printf("locked heap: %" PRIu64 " timerfd_settime() calls (arming included) over %"
	       PRIu64 " calls, all its measurements: its minimum rarely moves\n",
	       sh_sets_total, sh_calls_total);
	sc_print_goal(o, med);
	printf("\n");
	fflush(stdout);
	free(busy);
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
		"serviced by one thread: aggregate calls/s, per thread, the ratio to T=1\n"
		"and kairos's ratio to the locked heap, at each T; then the scaling goal\n"
		"(at T=%u: kairos >= %.1fx its T=1 and >= %.0fx the locked heap), which\n"
		"is printed, not enforced.\n"
		"\n"
		"  --threads LIST  comma-separated thread counts, 1..%u (default 1,2,4,8)\n"
		"  --per-thread N  timers per thread (1..%u, 1e5 style allowed; default\n"
		"                  100000)\n"
		"  --shards N      kairos shards (1..256, default 2); workers, tick and\n"
		"                  backend are the defaults\n"
		"  --seconds S     length of each measurement's mix (0.1..600, default 2)\n"
		"  --runs N        runs per thread count, median reported (default 3)\n"
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
