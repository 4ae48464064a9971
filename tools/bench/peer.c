/* SPDX-License-Identifier: MIT */
/*
 * peer.c - kairos-bench mode "peer": the same workloads, in the same run, on
 * kairos, kairos-loop (its timers delivered to one queue that the main
 * thread runs), libev, libuv, libevent (each when found at build time) and
 * one timerfd per timer in one epoll set.  Each is one table of function
 * pointers driven by the same code over the same lists, so that all do the
 * same operations on the same slots with the same delays.  The legend each
 * run prints, and docs/BENCHMARKS.md, say what every row measures.
 *
 * What is compared is what each costs a server thread used as meant: the
 * loops are single-threaded, so every batch runs inside a callback of the
 * loop (their cached time is what they read) and is timed there, leaving
 * the loop iteration's own cost out; kairos is called from the main thread
 * while its own threads run beside it, and their CPU counts in churn.
 *
 * The idle rows run between the cancel and the arm, on the N free slots,
 * and end with a cancel in the cancel row's order, so that the arm row
 * takes records in the same order as without them.  Their N arms share one
 * deadline in libev (one loop callback), which is libev's best case for the
 * idle cancel.  libev's lazy idle push (its manual's method 3) runs last,
 * after the churn, on watchers of its own, so that no other row's heap or
 * memory is what it would not have been without it.  The order of the
 * columns rotates from run to run, so that none always goes first.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#ifdef HAVE_LIBEV
#include <ev.h>
#endif
#ifdef HAVE_LIBUV
#include <uv.h>
#endif
#ifdef HAVE_LIBEVENT
#include <event2/event.h>
#endif

#include "bench.h"
#include "plot.h"

#define PB_LAT_TIMERS	20000u
#define PB_LAT_FD_TIMERS 5000u		/* where timerfd must fit in the fd limit */
#define PB_LAT_MAX_MS	200u
#define PB_LAT_BATCH	100u		/* lateness arms per loop iteration */
#define PB_MIX_OPS	1000000u
#define PB_MIX_BATCH	1024u		/* churn ops per loop iteration */
#define PB_SLACK	2048u		/* churn: pending stays within N + this */
#define PB_FD_RESERVE	128u		/* fds left for everything but the timers */
#define PB_MAX_N	10000000u
#define PB_BIG_N	1000000u	/* from here, fewer runs by default */
#define PB_BIG_RUNS	3u
#define PB_WAIT_LIMIT	(60 * BENCH_S)	/* no callback wait may take longer */
#define PB_IDLE_DELAY	(30 * BENCH_S)	/* the idle timeout of the idle rows */
#define PB_IDLE_SLACK	(PB_IDLE_DELAY / 10)	/* kairos's: a tenth, as its manual says */
#define PB_FLOOR_RECS	1000000u	/* the floors' records: this many, or N if more */

/* ------------------------------------------------------------------------
 * Rows of the table.
 */

enum pb_row {
	PB_ARM,
	PB_CANCEL,
	PB_CANCEL_PF,
	PB_PAIR,
	PB_LATER,
	PB_IDLE_ARM,
	PB_IDLE_LATER,
	PB_IDLE_LATER_PF,
	PB_IDLE_LAZY,
	PB_IDLE_CANCEL,
	PB_LAT_P50,
	PB_LAT_P99,
	PB_LAT_MAX,
	PB_EARLY,
	PB_EARLIEST,
	PB_BYTES,
	PB_KBYTES,
	PB_CHURN,
	PB_NROWS
};

static const struct pb_row_info {
	const char *name;
	const char *unit;
	int prec;
	enum bench_agg agg;
	bool ratio;		/* x kairos means something for this row */
} pb_rows[PB_NROWS] = {
	[PB_ARM] = { "arm", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_CANCEL] = { "cancel", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_CANCEL_PF] = { "cancel, prefetch 16", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_PAIR] = { "arm+cancel", "ns/pair", 1, BENCH_MEDIAN, true },
	[PB_LATER] = { "push-later", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_IDLE_ARM] = { "idle arm", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_IDLE_LATER] = { "idle push-later", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_IDLE_LATER_PF] = { "idle push, prefetch 16", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_IDLE_LAZY] = { "idle push, lazy", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_IDLE_CANCEL] = { "idle cancel", "ns/op", 1, BENCH_MEDIAN, true },
	[PB_LAT_P50] = { "lateness p50", "us", 1, BENCH_MEDIAN, true },
	[PB_LAT_P99] = { "lateness p99", "us", 1, BENCH_MEDIAN, true },
	[PB_LAT_MAX] = { "lateness max", "us", 1, BENCH_MAX, true },
	[PB_EARLY] = { "early (sum of runs)", "calls", 0, BENCH_SUM, false },
	[PB_EARLIEST] = { "early by at most", "us", 1, BENCH_MAX, false },
	[PB_BYTES] = { "bytes/timer (RSS)", "B", 1, BENCH_MEDIAN, true },
	[PB_KBYTES] = { "bytes/timer (kernel)", "B", 1, BENCH_MEDIAN, false },
	[PB_CHURN] = { "churn CPU", "ms/1e6 ops", 1, BENCH_MEDIAN, true },
};

/*
 * The floors: what one op on a random record of a large array costs at the
 * least, whoever does it.  Not per implementation: printed under the table.
 */
enum pb_floor {
	PB_FLOOR_CAS,
	PB_FLOOR_CLOCK,
	PB_FLOOR_COARSE,
	PB_FLOOR_PREFETCH,
#if defined(__x86_64__)
	PB_FLOOR_TSC,
#endif
	PB_FLOOR_CLOCK_ALONE,
	PB_NFLOORS
};

static const char *const pb_floor_names[PB_NFLOORS] = {
	[PB_FLOOR_CAS] = "CAS",
	[PB_FLOOR_CLOCK] = "clock_gettime(CLOCK_MONOTONIC) + CAS",
	[PB_FLOOR_COARSE] = "clock_gettime(CLOCK_MONOTONIC_COARSE) + CAS",
	[PB_FLOOR_PREFETCH] = "prefetch, clock_gettime(CLOCK_MONOTONIC), CAS",
#if defined(__x86_64__)
	[PB_FLOOR_TSC] = "rdtsc (unordered) + CAS",
#endif
	[PB_FLOOR_CLOCK_ALONE] = "clock_gettime(CLOCK_MONOTONIC), no record",
};

/* ------------------------------------------------------------------------
 * One implementation: a table of function pointers, driven identically.
 *
 * Slots are the caller's timer numbers, 0 .. cap - 1: a slot is armed,
 * pushed and cancelled as one timer, and armed again after it has ended.
 * Every function dies on a failure (the numbers would mean nothing).
 */
struct pb_impl {
	const char *name;
	const char *missing;		/* non-NULL: not built in, and why */
	void (*setup)(size_t cap);	/* room for slots 0 .. cap - 1 */
	void (*arm)(uint32_t slot, uint64_t delay_ns);
	void (*cancel)(uint32_t slot);
	void (*push_later)(uint32_t slot, uint64_t delay_ns);
	/*
	 * Optional (NULL: the idle rows show n/a): an idle timeout of
	 * PB_IDLE_DELAY armed the way the library means one to be, and pushed
	 * to PB_IDLE_DELAY from now on activity.  It ends with cancel().
	 */
	void (*idle_arm)(uint32_t slot);
	void (*idle_push)(uint32_t slot);
	/*
	 * The "idle push, lazy" row: activity on an idle timeout as a store,
	 * the check left to the timer's expiry.  Either idle_push() is that
	 * already (idle_push_lazy: the row shows the idle push-later value of
	 * the same run), or lazy_push() is, on watchers of its own that
	 * lazy_arm() arms for slots 0 .. n - 1 (as idle_arm() does, and
	 * untimed) and lazy_end() stops and frees; all three run in the loop.
	 * Neither: n/a.
	 */
	bool idle_push_lazy;
	void (*lazy_arm)(size_t n);
	void (*lazy_push)(uint32_t slot);
	void (*lazy_end)(void);
	/*
	 * Optional (NULL: n/a): starts loading what a call on @slot will need,
	 * as a loop does for the connections it handles next: kairos_prefetch(),
	 * or a prefetch of the loop's own timer struct.
	 */
	void (*prefetch)(uint32_t slot);
	/*
	 * Optional, with prefetch(): what prefetch() itself reads, started
	 * twice as far ahead (kairos: the id in the caller's own array, as a
	 * server holds it in each connection's struct).
	 */
	void (*prefetch_first)(uint32_t slot);
	/* Runs @fn(@arg) as a loop iteration's work, then what is due, no wait. */
	void (*in_loop)(void (*fn)(void *), void *arg);
	void (*wait)(void);		/* one iteration that may block for what is due */
	void (*quiesce)(void);		/* until its own threads are quiet; or NULL */
	void (*teardown)(size_t pending);	/* ends what is pending, frees all */
	void (*describe)(char *buf, size_t len);	/* version, backend: one line */
	size_t (*max_cap)(void);	/* the most slots it can hold; NULL: no limit */
	bool kernel_state;		/* keeps per-timer state in the kernel */
};

/* The lateness timers: slots pb_lat_base .. + pb_lat_n - 1. */
static uint32_t pb_lat_base;
static uint32_t pb_lat_n;
static _Atomic uint64_t *pb_lat_fired;	/* [j] CLOCK_MONOTONIC in the callback */
static _Atomic uint64_t pb_lat_done;
static _Atomic uint64_t pb_strays;	/* far timers that fired */
static _Atomic uint32_t pb_stray_slot;	/* the last one's slot */
static _Atomic bool pb_stray_foreign;	/* one fired on a thread not the main one */
static pid_t pb_main_tid;
static _Atomic uint64_t pb_twice;	/* lateness timers that fired again */

/* Every implementation's callback: slot @slot fired. */
static void pb_fired(uint32_t slot)
{
	uint64_t now = bench_now_ns();
	uint32_t j = slot - pb_lat_base;

	if (slot < pb_lat_base || j >= pb_lat_n) {
		atomic_store_explicit(&pb_stray_slot, slot, memory_order_relaxed);
		if (gettid() != pb_main_tid)
			atomic_store_explicit(&pb_stray_foreign, true, memory_order_relaxed);
		atomic_fetch_add_explicit(&pb_strays, 1, memory_order_relaxed);
		return;
	}
	if (atomic_exchange_explicit(&pb_lat_fired[j], now, memory_order_relaxed) != 0)
		atomic_fetch_add_explicit(&pb_twice, 1, memory_order_relaxed);
	/* Release, paired with the waiter's acquire: the stamp before the count. */
	atomic_fetch_add_explicit(&pb_lat_done, 1, memory_order_release);
}

/*
 * --settle-all: the columns without threads of their own pause before each
 * timed phase as kairos's do (bench_settle(): one 5 ms sleep when nothing
 * else runs), so that every column starts each phase after the same pause.
 * Some virtual machines lose a core's caches within milliseconds
 * (docs/BENCHMARKS.md), so a column timed straight after its previous phase
 * finds its memory warmer than one timed after a sleep.
 */
static bool pb_settle_all;
/* --huge-pages: the kairos columns' services get KAIROS_HUGE_PAGES. */
static bool pb_huge_pages;
/* --exact-clock: and KAIROS_EXACT_CLOCK (slack timers read clock_gettime()). */
static bool pb_exact_clock;

static void pb_quiesce(const struct pb_impl *im)
{
	if (im->quiesce)
		im->quiesce();
	else if (pb_settle_all)
		bench_settle();
}

#if defined(HAVE_LIBEV) || defined(HAVE_LIBUV) || defined(HAVE_LIBEVENT)
/* A batch to run inside a loop callback. */
struct pb_call {
	void (*fn)(void *);
	void *arg;
	bool done;
};

static void pb_call_run(struct pb_call *c)
{
	c->fn(c->arg);
	c->done = true;
}
#endif

/* ------------------------------------------------------------------------
 * Measuring the process: CPU, memory, quiet.
 */

/* The kernel's slab memory, system-wide; 0 when it cannot be read. */
static uint64_t pb_slab_bytes(void)
{
	char line[128];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Slab: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024u;
}
/*
 * --pin: the calling thread on one CPU, as a thread-per-core server runs.
 * Threads inherit their creator's CPU mask, so kairos's own threads are
 * created with the mask the process started with (pb_unpin, then pb_pin_init).
 */
static int pb_pin_cpu = -1;
static cpu_set_t pb_start_mask;

/*
 * --cycles: the cancel, idle, arm and push-later rows run this many times
 * in a row on the same instance, and each reports its last time, so that
 * a row that changes as the instance ages shows it.  For kairos at small N
 * the rows move with whether its shard takes the posts during the burst or
 * after it (docs/BENCHMARKS.md).
 */
#define PB_MAX_CYCLES	100u
static unsigned pb_cycles = 1;

static void pb_pin_set(const cpu_set_t *mask)
{
	if (sched_setaffinity(0, sizeof(*mask), mask) != 0)
		bench_die("sched_setaffinity: %s", strerror(errno));
}

static void pb_pin_init(void)
{
	cpu_set_t one;

	if (sched_getaffinity(0, sizeof(pb_start_mask), &pb_start_mask) != 0)
		bench_die("sched_getaffinity: %s", strerror(errno));
	if (pb_pin_cpu < 0)
		return;
	CPU_ZERO(&one);
	CPU_SET(pb_pin_cpu, &one);
	pb_pin_set(&one);
}

static void pb_unpin(void)
{
	if (pb_pin_cpu >= 0)
		pb_pin_set(&pb_start_mask);
}

/* ------------------------------------------------------------------------
 * kairos: the public API from the calling thread.
 */

static struct kairos *pk_k;
static kairos_id *pk_id;
static size_t pk_cap;

static void pk_cb(void *arg, kairos_id id, int status)
{
	(void)id;
	(void)status;
	pb_fired((uint32_t)(uintptr_t)arg);
}

/* The kairos columns' config: the default, with --huge-pages and --exact-clock if given. */
static void pk_config(struct kairos_config *cfg)
{
	kairos_config_default(cfg);
	if (pb_huge_pages)
		cfg->flags |= KAIROS_HUGE_PAGES;
	if (pb_exact_clock)
		cfg->flags |= KAIROS_EXACT_CLOCK;
}

static void pk_setup(size_t cap)
{
	struct kairos_config cfg;
	int rc;

	pk_config(&cfg);
	/* The bench's deadlines are CLOCK_MONOTONIC, as the service's by default. */
	if (cfg.clock != CLOCK_MONOTONIC)
		bench_die("the default service clock is not CLOCK_MONOTONIC");
	pb_unpin();
	rc = kairos_create(&cfg, &pk_k);
	pb_pin_init();
	if (rc)
		bench_die("kairos_create: %s", strerror(-rc));
	pk_cap = cap;
	pk_id = bench_map(cap * sizeof(*pk_id));
}

static void pk_arm(uint32_t slot, uint64_t delay_ns)
{
	int rc = kairos_arm(pk_k, delay_ns, pk_cb, (void *)(uintptr_t)slot, &pk_id[slot]);

	if (rc)
		bench_die("kairos_arm: %s", strerror(-rc));
}

static void pk_cancel(uint32_t slot)
{
	int rc = kairos_cancel(pk_k, pk_id[slot]);

	if (rc)
		bench_die("kairos_cancel of a pending timer: %s", strerror(-rc));
}

static void pk_prefetch_first(uint32_t slot)
{
	__builtin_prefetch(&pk_id[slot]);
}

static void pk_prefetch(uint32_t slot)
{
	int rc = kairos_prefetch(pk_k, pk_id[slot]);

	if (rc)
		bench_die("kairos_prefetch of a pending timer: %s", strerror(-rc));
}

static void pk_push_later(uint32_t slot, uint64_t delay_ns)
{
	int rc = kairos_reset(pk_k, pk_id[slot], delay_ns);

	if (rc)
		bench_die("kairos_reset of a pending timer: %s", strerror(-rc));
}

/* The idle timeout as kairos_arm_slack() documents it: a tenth of slack. */
static void pk_idle_arm(uint32_t slot)
{
	int rc = kairos_arm_slack(pk_k, PB_IDLE_DELAY, PB_IDLE_SLACK, pk_cb,
				  (void *)(uintptr_t)slot, &pk_id[slot]);

	if (rc)
		bench_die("kairos_arm_slack: %s", strerror(-rc));
}

/* kairos_reset() keeps the slack of the arm. */
static void pk_idle_push(uint32_t slot)
{
	int rc = kairos_reset(pk_k, pk_id[slot], PB_IDLE_DELAY);

	if (rc)
		bench_die("kairos_reset of a pending idle timer: %s", strerror(-rc));
}

/* Not a loop: the calling thread is any thread. */
static void pk_in_loop(void (*fn)(void *), void *arg)
{
	fn(arg);
}

static void pk_wait(void)
{
	bench_sleep_ns(BENCH_MS);
}

static void pk_teardown(size_t pending)
{
	struct kairos_stats st;
	int rc;

	rc = kairos_destroy(pk_k, KAIROS_DRAIN_DROP);
	if (rc < 0)
		bench_die("kairos_destroy: %s", strerror(-rc));
	if ((size_t)rc != pending)
		bench_die("kairos_destroy dropped %d timers, %zu were pending", rc, pending);
	rc = kairos_stats(pk_k, &st);
	if (rc)
		bench_die("kairos_stats: %s", strerror(-rc));
	if (st.fired != pb_lat_n || st.early != 0)
		bench_die("kairos: stats fired %" PRIu64 " early %" PRIu64 ", expected %u and 0",
			  st.fired, st.early, pb_lat_n);
	bench_unmap(pk_id, pk_cap * sizeof(*pk_id));
	pk_k = NULL;
}

static void pk_describe(char *buf, size_t len)
{
	struct kairos_config cfg;
	struct kairos *k;
	const char *backend = "?", *clock = "?";
	int rc;

	pk_config(&cfg);
	pb_unpin();
	rc = kairos_create(&cfg, &k);
	pb_pin_init();
	if (rc)
		bench_die("kairos_create: %s", strerror(-rc));
	if (kairos_backend_info(k, 0, &backend, NULL) != 0)
		backend = "?";
	if (kairos_clock_info(k, &clock, NULL) != 0)
		clock = "?";
	snprintf(buf, len, "kairos %d.%d.%d: default config (one shard per CPU, %u workers "
		 "each, 1 ms tick)%s%s, backend %s, slack timers read %s", KAIROS_VERSION_MAJOR,
		 KAIROS_VERSION_MINOR, KAIROS_VERSION_PATCH, cfg.workers ? cfg.workers : 2u,
		 pb_huge_pages ? " + KAIROS_HUGE_PAGES" : "",
		 pb_exact_clock ? " + KAIROS_EXACT_CLOCK" : "", backend, clock);
	rc = kairos_destroy(k, KAIROS_DRAIN_DROP);
	if (rc != 0)
		bench_die("kairos_destroy: %d", rc);
}

static const struct pb_impl pb_kairos = {
	.name = "kairos",
	.setup = pk_setup,
	.arm = pk_arm,
	.cancel = pk_cancel,
	.push_later = pk_push_later,
	.idle_arm = pk_idle_arm,
	.prefetch = pk_prefetch,
	.prefetch_first = pk_prefetch_first,
	.idle_push = pk_idle_push,
	.idle_push_lazy = true,
	.in_loop = pk_in_loop,
	.wait = pk_wait,
	.quiesce = bench_settle,
	.teardown = pk_teardown,
	.describe = pk_describe,
};

/* ------------------------------------------------------------------------
 * kairos-loop: the same service, its timers delivered into a queue
 * (kairos_arm_opts() with .queue) that the main thread drains as its event
 * loop: the callbacks run there, as the loops' do, and no worker thread
 * starts.  The calls are the kairos column's; what differs is where the
 * callbacks run and what the service's threads do for them.
 */

static struct kairos_queue *pq_q;

static void pq_setup(size_t cap)
{
	int rc;

	pk_setup(cap);
	rc = kairos_queue_create(pk_k, &pq_q);
	if (rc)
		bench_die("kairos_queue_create: %s", strerror(-rc));
}

static void pq_arm(uint32_t slot, uint64_t delay_ns)
{
	struct kairos_timer_opts o = { .queue = pq_q };
	int rc = kairos_arm_opts(pk_k, delay_ns, &o, pk_cb, (void *)(uintptr_t)slot, &pk_id[slot]);

	if (rc)
		bench_die("kairos_arm_opts: %s", strerror(-rc));
}

static void pq_idle_arm(uint32_t slot)
{
	struct kairos_timer_opts o = { .queue = pq_q, .slack_ns = PB_IDLE_SLACK };
	int rc = kairos_arm_opts(pk_k, PB_IDLE_DELAY, &o, pk_cb, (void *)(uintptr_t)slot, &pk_id[slot]);

	if (rc)
		bench_die("kairos_arm_opts (slack): %s", strerror(-rc));
}

/* Runs everything due, as a loop does when the queue's fd is readable. */
static void pq_run_due(void)
{
	int rc;

	do {
		rc = kairos_queue_run(pq_q, 256);
		if (rc < 0)
			bench_die("kairos_queue_run: %s", strerror(-rc));
	} while (rc == 256);
}

static void pq_in_loop(void (*fn)(void *), void *arg)
{
	fn(arg);
	pq_run_due();
}

/* One loop iteration: wait for the queue's fd (at most 100 ms), then run. */
static void pq_wait(void)
{
	struct pollfd p = { .fd = kairos_queue_fd(pq_q), .events = POLLIN };

	if (poll(&p, 1, 100) < 0 && errno != EINTR)
		bench_die("poll: %s", strerror(errno));
	pq_run_due();
}

static void pq_teardown(size_t pending)
{
	int rc = kairos_queue_destroy(pq_q);

	/* Nothing waits (all that fired ran); the pending go with the service. */
	if (rc != 0)
		bench_die("kairos_queue_destroy ended %d waiting entries, expected 0", rc);
	pq_q = NULL;
	pk_teardown(pending);
}

static void pq_describe(char *buf, size_t len)
{
	snprintf(buf, len, "kairos-loop: kairos as above, every timer for one queue "
		 "(kairos_arm_opts .queue), run by kairos_queue_run() on the main thread "
		 "when its fd is readable");
}

static const struct pb_impl pb_kairos_loop = {
	.name = "kairos-loop",
	.setup = pq_setup,
	.arm = pq_arm,
	.cancel = pk_cancel,
	.push_later = pk_push_later,
	.idle_arm = pq_idle_arm,
	.prefetch = pk_prefetch,
	.prefetch_first = pk_prefetch_first,
	.idle_push = pk_idle_push,
	.idle_push_lazy = true,
	.in_loop = pq_in_loop,
	.wait = pq_wait,
	.quiesce = bench_settle,
	.teardown = pq_teardown,
	.describe = pq_describe,
};

/* ------------------------------------------------------------------------
 * libev: ev_timer in a loop of its own (ev_loop_new), 4-heap as built.
 */

#ifdef HAVE_LIBEV
static struct ev_loop *pe_loop;
static ev_timer *pe_w;
static size_t pe_cap;

static void pe_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	pb_fired((uint32_t)(uintptr_t)w->data);
}

static void pe_setup(size_t cap)
{
	pe_loop = ev_loop_new(EVFLAG_AUTO);
	if (!pe_loop)
		bench_die("ev_loop_new failed");
	pe_cap = cap;
	pe_w = bench_map(cap * sizeof(*pe_w));
}

static void pe_arm(uint32_t slot, uint64_t delay_ns)
{
	ev_timer *w = &pe_w[slot];

	ev_timer_init(w, pe_cb, (ev_tstamp)delay_ns * 1e-9, 0.);
	w->data = (void *)(uintptr_t)slot;
	ev_timer_start(pe_loop, w);
}

static void pe_cancel(uint32_t slot)
{
	ev_timer_stop(pe_loop, &pe_w[slot]);
}

/* What ev_timer_stop() reads first: the watcher (its heap node follows from it). */
static void pe_prefetch(uint32_t slot)
{
	__builtin_prefetch(&pe_w[slot], 1);
}

/* The idle-timeout idiom of libev's manual: set repeat, then ev_timer_again. */
static void pe_push_later(uint32_t slot, uint64_t delay_ns)
{
	ev_timer *w = &pe_w[slot];

	w->repeat = (ev_tstamp)delay_ns * 1e-9;
	ev_timer_again(pe_loop, w);
}

/*
 * libev's manual, "Be smart about timeouts", method 2: the timeout is the
 * repeat of a timer started by ev_timer_again(), and activity calls
 * ev_timer_again() again, which moves it to now + repeat in the heap.
 */
static void pe_idle_arm(uint32_t slot)
{
	ev_timer *w = &pe_w[slot];

	ev_timer_init(w, pe_cb, 0., (ev_tstamp)PB_IDLE_DELAY * 1e-9);
	w->data = (void *)(uintptr_t)slot;
	ev_timer_again(pe_loop, w);
}

static void pe_idle_push(uint32_t slot)
{
	ev_timer_again(pe_loop, &pe_w[slot]);
}

/*
 * Method 3 of "Be smart about timeouts", for the "idle push, lazy" row: on
 * activity, the connection just stores ev_now() as its last activity; the
 * timer, a one-shot, checks it when it fires and re-arms for what is left.
 * A connection of its own, the last-activity field beside its watcher as a
 * server keeps both, and a set of its own, so that pe_w and the heap that
 * the other rows leave stay as they were.
 */
struct pe_conn {
	ev_timer w;			/* first: the callback finds its conn from it */
	ev_tstamp last_activity;
};

static struct pe_conn *pe_lazy;
static size_t pe_lazy_n;

static void pe_lazy_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pe_conn *c = (struct pe_conn *)w;
	ev_tstamp after = c->last_activity - ev_now(loop) + (ev_tstamp)PB_IDLE_DELAY * 1e-9;

	if (after < 0.) {
		/* Timed out: a stray here, as any timer of a timed row that fires. */
		pe_cb(loop, w, revents);
		return;
	}
	ev_timer_set(w, after, 0.);
	ev_timer_start(loop, w);
}

/* As the manual starts one: the last activity now, then the callback arms it. */
static void pe_lazy_arm(size_t n)
{
	pe_lazy_n = n;
	pe_lazy = bench_map(n * sizeof(*pe_lazy));
	for (size_t i = 0; i < n; i++) {
		struct pe_conn *c = &pe_lazy[i];

		c->last_activity = ev_now(pe_loop);
		ev_init(&c->w, pe_lazy_cb);
		c->w.data = (void *)(uintptr_t)i;
		pe_lazy_cb(pe_loop, &c->w, 0);
	}
}

static void pe_lazy_push(uint32_t slot)
{
	pe_lazy[slot].last_activity = ev_now(pe_loop);
}

static void pe_lazy_end(void)
{
	for (size_t i = 0; i < pe_lazy_n; i++)
		ev_timer_stop(pe_loop, &pe_lazy[i].w);
	bench_unmap(pe_lazy, pe_lazy_n * sizeof(*pe_lazy));
	pe_lazy = NULL;
	pe_lazy_n = 0;
}

static void pe_once_cb(int revents, void *arg)
{
	(void)revents;
	pb_call_run(arg);
}

static void pe_in_loop(void (*fn)(void *), void *arg)
{
	struct pb_call c = { fn, arg, false };

	ev_once(pe_loop, -1, 0, 0., pe_once_cb, &c);
	while (!c.done)
		ev_run(pe_loop, EVRUN_ONCE);
}

static void pe_wait(void)
{
	ev_run(pe_loop, EVRUN_ONCE);
}

static void pe_teardown(size_t pending)
{
	(void)pending;
	/* Active watchers need no stopping: the loop and its heap just go. */
	ev_loop_destroy(pe_loop);
	pe_loop = NULL;
	bench_unmap(pe_w, pe_cap * sizeof(*pe_w));
}

static void pe_describe(char *buf, size_t len)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	unsigned int b;

	if (!loop)
		bench_die("ev_loop_new failed");
	b = ev_backend(loop);
	snprintf(buf, len, "libev %d.%d: ev_loop_new(EVFLAG_AUTO), backend %s, "
		 "sizeof(ev_timer) %zu", ev_version_major(), ev_version_minor(),
		 b == EVBACKEND_EPOLL ? "epoll" : b == EVBACKEND_POLL ? "poll" :
		 b == EVBACKEND_SELECT ? "select" : "other", sizeof(ev_timer));
	ev_loop_destroy(loop);
}

static const struct pb_impl pb_libev = {
	.name = "libev",
	.setup = pe_setup,
	.arm = pe_arm,
	.cancel = pe_cancel,
	.push_later = pe_push_later,
	.idle_arm = pe_idle_arm,
	.prefetch = pe_prefetch,
	.idle_push = pe_idle_push,
	.lazy_arm = pe_lazy_arm,
	.lazy_push = pe_lazy_push,
	.lazy_end = pe_lazy_end,
	.in_loop = pe_in_loop,
	.wait = pe_wait,
	.teardown = pe_teardown,
	.describe = pe_describe,
};
#else
static const struct pb_impl pb_libev = {
	.name = "libev",
	.missing = "not built: ev.h or libev was not found at build time",
};
#endif

/* ------------------------------------------------------------------------
 * libuv: uv_timer_t on a uv_loop_t of its own.  Its timeouts are whole
 * milliseconds: delays round up.
 */

#ifdef HAVE_LIBUV
static uv_loop_t pu_loop;
static uv_timer_t *pu_t;
static uv_timer_t pu_call_timer;
static size_t pu_cap;

static uint64_t pu_ms(uint64_t delay_ns)
{
	return (delay_ns + BENCH_MS - 1) / BENCH_MS;
}

static void pu_cb(uv_timer_t *h)
{
	pb_fired((uint32_t)(uintptr_t)h->data);
	/*
	 * UV_RUN_ONCE runs the due timers before it polls, then blocks until
	 * the next one: after the last lateness timer that is a far one,
	 * minutes away.  uv_stop() makes that poll return at once.
	 */
	if (atomic_load_explicit(&pb_lat_done, memory_order_relaxed) >= pb_lat_n)
		uv_stop(&pu_loop);
}

static void pu_setup(size_t cap)
{
	int rc = uv_loop_init(&pu_loop);

	if (rc)
		bench_die("uv_loop_init: %s", uv_strerror(rc));
	rc = uv_timer_init(&pu_loop, &pu_call_timer);
	if (rc)
		bench_die("uv_timer_init: %s", uv_strerror(rc));
	pu_cap = cap;
	pu_t = bench_map(cap * sizeof(*pu_t));
}

static void pu_arm(uint32_t slot, uint64_t delay_ns)
{
	uv_timer_t *h = &pu_t[slot];
	int rc;

	/* A handle is initialized once, on its slot's first arm; loop is set then. */
	if (!h->loop) {
		rc = uv_timer_init(&pu_loop, h);
		if (rc)
			bench_die("uv_timer_init: %s", uv_strerror(rc));
		h->data = (void *)(uintptr_t)slot;
	}
	rc = uv_timer_start(h, pu_cb, pu_ms(delay_ns), 0);
	if (rc)
		bench_die("uv_timer_start: %s", uv_strerror(rc));
}

static void pu_cancel(uint32_t slot)
{
	int rc = uv_timer_stop(&pu_t[slot]);

	if (rc)
		bench_die("uv_timer_stop: %s", uv_strerror(rc));
}

static void pu_prefetch(uint32_t slot)
{
	__builtin_prefetch(&pu_t[slot], 1);
}

/* uv_timer_start() on an active handle updates it. */
static void pu_push_later(uint32_t slot, uint64_t delay_ns)
{
	int rc = uv_timer_start(&pu_t[slot], pu_cb, pu_ms(delay_ns), 0);

	if (rc)
		bench_die("uv_timer_start: %s", uv_strerror(rc));
}

static void pu_call_cb(uv_timer_t *h)
{
	pb_call_run(h->data);
}

static void pu_in_loop(void (*fn)(void *), void *arg)
{
	struct pb_call c = { fn, arg, false };
	int rc;

	pu_call_timer.data = &c;
	rc = uv_timer_start(&pu_call_timer, pu_call_cb, 0, 0);
	if (rc)
		bench_die("uv_timer_start: %s", uv_strerror(rc));
	/* NOWAIT: UV_RUN_ONCE would then block until the next (far) timer. */
	while (!c.done)
		uv_run(&pu_loop, UV_RUN_NOWAIT);
}

static void pu_wait(void)
{
	uv_run(&pu_loop, UV_RUN_ONCE);
}

static void pu_teardown(size_t pending)
{
	int rc;

	(void)pending;
	/* uv_loop_close() wants every handle closed (and stopped: a heap removal). */
	for (size_t i = 0; i < pu_cap; i++)
		if (pu_t[i].loop)
			uv_close((uv_handle_t *)&pu_t[i], NULL);
	uv_close((uv_handle_t *)&pu_call_timer, NULL);
	uv_run(&pu_loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&pu_loop);
	if (rc)
		bench_die("uv_loop_close: %s", uv_strerror(rc));
	bench_unmap(pu_t, pu_cap * sizeof(*pu_t));
}

static void pu_describe(char *buf, size_t len)
{
	snprintf(buf, len, "libuv %s: a uv_loop_t of its own (epoll), ms timeouts rounded "
		 "up, sizeof(uv_timer_t) %zu", uv_version_string(), sizeof(uv_timer_t));
}

static const struct pb_impl pb_libuv = {
	.name = "libuv",
	.setup = pu_setup,
	.arm = pu_arm,
	.cancel = pu_cancel,
	.push_later = pu_push_later,
	.prefetch = pu_prefetch,
	.in_loop = pu_in_loop,
	.wait = pu_wait,
	.teardown = pu_teardown,
	.describe = pu_describe,
};
#else
static const struct pb_impl pb_libuv = {
	.name = "libuv",
	.missing = "not built: libuv (pkg-config libuv) was not found at build time",
};
#endif

/* ------------------------------------------------------------------------
 * libevent: one event_new() per slot, on its first arm, in an event_base of
 * default flags.  Timeouts are microseconds: delays round up.
 */

#ifdef HAVE_LIBEVENT
static struct event_base *pv_base;
static struct event **pv_ev;
static size_t pv_cap;

static struct timeval pv_tv(uint64_t delay_ns)
{
	uint64_t us = (delay_ns + 999) / 1000;
	struct timeval tv = { (time_t)(us / 1000000u), (suseconds_t)(us % 1000000u) };

	return tv;
}

static void pv_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pb_fired((uint32_t)(uintptr_t)arg);
}

static void pv_setup(size_t cap)
{
	pv_base = event_base_new();
	if (!pv_base)
		bench_die("event_base_new failed");
	pv_cap = cap;
	pv_ev = bench_map(cap * sizeof(*pv_ev));
}

static void pv_arm(uint32_t slot, uint64_t delay_ns)
{
	struct timeval tv = pv_tv(delay_ns);
	struct event *ev = pv_ev[slot];

	if (!ev) {
		ev = pv_ev[slot] = evtimer_new(pv_base, pv_cb, (void *)(uintptr_t)slot);
		if (!ev)
			bench_die("event_new failed");
	}
	if (evtimer_add(ev, &tv) != 0)
		bench_die("evtimer_add failed");
}

static void pv_cancel(uint32_t slot)
{
	if (evtimer_del(pv_ev[slot]) != 0)
		bench_die("evtimer_del failed");
}

static void pv_prefetch(uint32_t slot)
{
	__builtin_prefetch(pv_ev[slot], 1);
}

/* evtimer_add() of a pending event reschedules it. */
static void pv_push_later(uint32_t slot, uint64_t delay_ns)
{
	struct timeval tv = pv_tv(delay_ns);

	if (evtimer_add(pv_ev[slot], &tv) != 0)
		bench_die("evtimer_add failed");
}

static void pv_once_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	pb_call_run(arg);
}

static void pv_in_loop(void (*fn)(void *), void *arg)
{
	struct pb_call c = { fn, arg, false };

	/* No timeout: made active at once (libevent's idiom for "call soon"). */
	if (event_base_once(pv_base, -1, EV_TIMEOUT, pv_once_cb, &c, NULL) != 0)
		bench_die("event_base_once failed");
	while (!c.done)
		if (event_base_loop(pv_base, EVLOOP_ONCE) < 0)
			bench_die("event_base_loop failed");
}

static void pv_wait(void)
{
	if (event_base_loop(pv_base, EVLOOP_ONCE) < 0)
		bench_die("event_base_loop failed");
}

static void pv_teardown(size_t pending)
{
	(void)pending;
	for (size_t i = 0; i < pv_cap; i++)
		if (pv_ev[i])
			event_free(pv_ev[i]);
	event_base_free(pv_base);
	pv_base = NULL;
	bench_unmap(pv_ev, pv_cap * sizeof(*pv_ev));
}

static void pv_describe(char *buf, size_t len)
{
	struct event_base *b = event_base_new();

	if (!b)
		bench_die("event_base_new failed");
	/* event_base_new() reads $EVENT_PRECISE_TIMER: set, it is the flag. */
	snprintf(buf, len, "libevent %s: event_base_new() (default flags, %s), backend %s, "
		 "sizeof(struct event) %zu", event_get_version(),
		 getenv("EVENT_PRECISE_TIMER") ?
		 "but $EVENT_PRECISE_TIMER is set: CLOCK_MONOTONIC" :
		 "so CLOCK_MONOTONIC_COARSE; EVENT_PRECISE_TIMER=1 in the environment for the "
		 "precise clock", event_base_get_method(b), event_get_struct_event_size());
	event_base_free(b);
}

static const struct pb_impl pb_libevent = {
	.name = "libevent",
	.setup = pv_setup,
	.arm = pv_arm,
	.cancel = pv_cancel,
	.push_later = pv_push_later,
	.prefetch = pv_prefetch,
	.in_loop = pv_in_loop,
	.wait = pv_wait,
	.teardown = pv_teardown,
	.describe = pv_describe,
};
#else
static const struct pb_impl pb_libevent = {
	.name = "libevent",
	.missing = "not built: libevent (pkg-config libevent) was not found at build time",
};
#endif

/* ------------------------------------------------------------------------
 * One timerfd per timer, all in one epoll set: arm = timerfd_create() +
 * timerfd_settime() + EPOLL_CTL_ADD, push = timerfd_settime(), cancel =
 * close().  A loop iteration is one epoll_wait().
 */

#define PT_EVENTS	256

static int pt_ep = -1;
static int *pt_fd;		/* [slot] its fd, or -1 */
static size_t pt_cap;
static size_t pt_nofile;	/* RLIMIT_NOFILE, after raising the soft one */

static struct itimerspec pt_its(uint64_t delay_ns)
{
	struct itimerspec its = { { 0, 0 }, { (time_t)(delay_ns / BENCH_S),
					      (long)(delay_ns % BENCH_S) } };

	return its;
}

static void pt_setup(size_t cap)
{
	pt_ep = epoll_create1(EPOLL_CLOEXEC);
	if (pt_ep < 0)
		bench_die("epoll_create1: %s", strerror(errno));
	pt_cap = cap;
	pt_fd = bench_map(cap * sizeof(*pt_fd));
}

static void pt_arm(uint32_t slot, uint64_t delay_ns)
{
	struct itimerspec its = pt_its(delay_ns);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = slot };
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

	if (fd < 0)
		bench_die("timerfd_create: %s", strerror(errno));
	if (timerfd_settime(fd, 0, &its, NULL) != 0)
		bench_die("timerfd_settime: %s", strerror(errno));
	if (epoll_ctl(pt_ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		bench_die("epoll_ctl: %s", strerror(errno));
	/* Stored + 1, so that the untouched (zero) pages of the array read as none. */
	pt_fd[slot] = fd + 1;
}

static void pt_cancel(uint32_t slot)
{
	/* close() takes the fd out of the epoll set as well. */
	if (close(pt_fd[slot] - 1) != 0)
		bench_die("close: %s", strerror(errno));
	pt_fd[slot] = 0;
}

static void pt_push_later(uint32_t slot, uint64_t delay_ns)
{
	struct itimerspec its = pt_its(delay_ns);

	if (timerfd_settime(pt_fd[slot] - 1, 0, &its, NULL) != 0)
		bench_die("timerfd_settime: %s", strerror(errno));
}

/* One loop iteration: the callbacks of what has expired; the timers end. */
static void pt_poll(int timeout_ms)
{
	struct epoll_event ev[PT_EVENTS];
	int n = epoll_wait(pt_ep, ev, PT_EVENTS, timeout_ms);

	if (n < 0 && errno != EINTR)
		bench_die("epoll_wait: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		uint32_t slot = (uint32_t)ev[i].data.u64;
		uint64_t expirations;

		if (read(pt_fd[slot] - 1, &expirations, sizeof(expirations)) !=
		    (ssize_t)sizeof(expirations))
			bench_die("read of an expired timerfd: %s", strerror(errno));
		pb_fired(slot);
		pt_cancel(slot);
	}
}

static void pt_in_loop(void (*fn)(void *), void *arg)
{
	fn(arg);
	pt_poll(0);
}

static void pt_wait(void)
{
	pt_poll(100);
}

static void pt_teardown(size_t pending)
{
	(void)pending;
	for (size_t i = 0; i < pt_cap; i++)
		if (pt_fd[i])
			pt_cancel((uint32_t)i);
	if (close(pt_ep) != 0)
		bench_die("close: %s", strerror(errno));
	pt_ep = -1;
	bench_unmap(pt_fd, pt_cap * sizeof(*pt_fd));
}

static void pt_describe(char *buf, size_t len)
{
	snprintf(buf, len, "timerfd: one timerfd (CLOCK_MONOTONIC) per timer in one epoll "
		 "set; RLIMIT_NOFILE %zu", pt_nofile);
}

static size_t pt_max_cap(void)
{
	return pt_nofile > PB_FD_RESERVE ? pt_nofile - PB_FD_RESERVE : 0;
}

static const struct pb_impl pb_timerfd = {
	.name = "timerfd",
	.setup = pt_setup,
	.arm = pt_arm,
	.cancel = pt_cancel,
	.push_later = pt_push_later,
	.in_loop = pt_in_loop,
	.wait = pt_wait,
	.teardown = pt_teardown,
	.describe = pt_describe,
	.max_cap = pt_max_cap,
	.kernel_state = true,
};

/* Column order; kairos first: every ratio is to it. */
static const struct pb_impl *const pb_impls[] = {
	&pb_kairos, &pb_kairos_loop, &pb_libev, &pb_libuv, &pb_libevent, &pb_timerfd,
};

#define PB_NIMPL	(sizeof(pb_impls) / sizeof(pb_impls[0]))

/* Raises the soft fd limit to the hard one; remembers what it is. */
static void pt_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		bench_die("getrlimit(RLIMIT_NOFILE) failed");
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0)
			bench_die("getrlimit(RLIMIT_NOFILE) failed");
	}
	pt_nofile = rl.rlim_cur == RLIM_INFINITY ? SIZE_MAX : (size_t)rl.rlim_cur;
}

/* ------------------------------------------------------------------------
 * The workload: one size's lists, filled afresh each run and the same for
 * every implementation of that run.
 */

struct pb_lists {
	size_t n;		/* pending timers */
	unsigned lat;		/* lateness timers */
	size_t cap;		/* slots: n + PB_SLACK + lat */
	uint64_t *delay;	/* [slot < n] arm delay, ns */
	uint32_t *cancel_order;	/* [op] the slot a cancel ends */
	uint32_t *later_order;	/* [op] the slot a push moves */
	uint64_t *later_delay;	/* [op] its new delay, ns */
	uint64_t *lat_delay;	/* [j] whole ms, in ns */
	uint64_t *lat_deadline;	/* [j] CLOCK_MONOTONIC before its arm + delay */
	int64_t *lat_sorted;
	uint32_t *pool;		/* churn: the pending slots */
	uint32_t *spare;	/* churn: the free slots */
	uint64_t mix_seed;
};

static void pb_lists_alloc(struct pb_lists *l, size_t n, unsigned lat)
{
	l->n = n;
	l->lat = lat;
	l->cap = n + PB_SLACK + lat;
	l->delay = bench_alloc(n * sizeof(*l->delay));
	l->cancel_order = bench_alloc(n * sizeof(*l->cancel_order));
	l->later_order = bench_alloc(n * sizeof(*l->later_order));
	l->later_delay = bench_alloc(n * sizeof(*l->later_delay));
	l->lat_delay = bench_alloc(lat * sizeof(*l->lat_delay));
	l->lat_deadline = bench_alloc(lat * sizeof(*l->lat_deadline));
	l->lat_sorted = bench_alloc(lat * sizeof(*l->lat_sorted));
	l->pool = bench_alloc((n + PB_SLACK) * sizeof(*l->pool));
	l->spare = bench_alloc((n + PB_SLACK) * sizeof(*l->spare));
	pb_lat_fired = bench_alloc(lat * sizeof(*pb_lat_fired));
}

static void pb_lists_free(struct pb_lists *l)
{
	free(l->delay);
	free(l->cancel_order);
	free(l->later_order);
	free(l->later_delay);
	free(l->lat_delay);
	free(l->lat_deadline);
	free(l->lat_sorted);
	free(l->pool);
	free(l->spare);
	free((void *)pb_lat_fired);
	pb_lat_fired = NULL;
}

static void pb_lists_fill(struct pb_lists *l, struct rng *r)
{
	size_t n = l->n;

	for (size_t i = 0; i < n; i++)
		l->delay[i] = bench_far_delay(r);
	rng_permutation(r, l->cancel_order, n);
	rng_permutation(r, l->later_order, n);
	for (size_t i = 0; i < n; i++)
		l->later_delay[i] = l->delay[l->later_order[i]] + BENCH_PUSH_MIN +
				    rng_next(r) % (BENCH_PUSH_SPAN + 1);
	for (unsigned j = 0; j < l->lat; j++)
		l->lat_delay[j] = (1 + rng_below(r, PB_LAT_MAX_MS)) * BENCH_MS;
	l->mix_seed = rng_next(r);
}

/* ------------------------------------------------------------------------
 * Batches, each run inside a loop callback and timed there.
 */

struct pb_job {
	const struct pb_impl *im;
	const struct pb_lists *l;
	unsigned from, to;	/* lateness timers of this batch */
	uint64_t ns;		/* the timed loop's wall time */
};

static void pb_arm_job(void *arg)
{
	struct pb_job *j = arg;
	void (*arm)(uint32_t, uint64_t) = j->im->arm;
	const uint64_t *delay = j->l->delay;
	size_t n = j->l->n;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; i < n; i++)
		arm((uint32_t)i, delay[i]);
	j->ns = bench_now_ns() - t0;
}

static void pb_cancel_job(void *arg)
{
	struct pb_job *j = arg;
	void (*cancel)(uint32_t) = j->im->cancel;
	const uint32_t *order = j->l->cancel_order;
	size_t n = j->l->n;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; i < n; i++)
		cancel(order[i]);
	j->ns = bench_now_ns() - t0;
}

/* The cancel row's order, each call after a prefetch PB_PF_AHEAD slots ahead. */
#define PB_PF_AHEAD	16u

/*
 * @op on @order's n slots, each call after a prefetch PB_PF_AHEAD slots
 * ahead (and the implementation's prefetch_first, if any, twice as far):
 * a loop that handles its connections one by one and knows the next ones.
 */
static uint64_t pb_pf_run(const struct pb_impl *im, const uint32_t *order, size_t n,
			  void (*op)(uint32_t))
{
	void (*pf)(uint32_t) = im->prefetch;
	void (*pf1)(uint32_t) = im->prefetch_first;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; pf1 && i < n && i < 2 * PB_PF_AHEAD; i++)
		pf1(order[i]);
	for (size_t i = 0; i < n && i < PB_PF_AHEAD; i++)
		pf(order[i]);
	for (size_t i = 0; i < n; i++) {
		if (pf1 && i + 2 * PB_PF_AHEAD < n)
			pf1(order[i + 2 * PB_PF_AHEAD]);
		if (i + PB_PF_AHEAD < n)
			pf(order[i + PB_PF_AHEAD]);
		op(order[i]);
	}
	return bench_now_ns() - t0;
}

static void pb_cancel_pf_job(void *arg)
{
	struct pb_job *j = arg;

	j->ns = pb_pf_run(j->im, j->l->cancel_order, j->l->n, j->im->cancel);
}

/* The idle push-later row again, each push after the prefetches. */
static void pb_idle_later_pf_job(void *arg)
{
	struct pb_job *j = arg;

	j->ns = pb_pf_run(j->im, j->l->later_order, j->l->n, j->im->idle_push);
}

static void pb_later_job(void *arg)
{
	struct pb_job *j = arg;
	void (*push)(uint32_t, uint64_t) = j->im->push_later;
	const uint32_t *order = j->l->later_order;
	const uint64_t *delay = j->l->later_delay;
	size_t n = j->l->n;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; i < n; i++)
		push(order[i], delay[i]);
	j->ns = bench_now_ns() - t0;
}

/* Idle timeouts armed in slot order, as the arm row arms its timers. */
static void pb_idle_arm_job(void *arg)
{
	struct pb_job *j = arg;
	void (*arm)(uint32_t) = j->im->idle_arm;
	size_t n = j->l->n;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; i < n; i++)
		arm((uint32_t)i);
	j->ns = bench_now_ns() - t0;
}

/* Activity on each connection, in the push-later row's random order. */
static void pb_idle_later_job(void *arg)
{
	struct pb_job *j = arg;
	void (*push)(uint32_t) = j->im->idle_push;
	const uint32_t *order = j->l->later_order;
	size_t n = j->l->n;
	uint64_t t0 = bench_now_ns();

	for (size_t i = 0; i < n; i++)
		push(order[i]);
	j->ns = bench_now_ns() - t0;
}

/*
 * The "idle push, lazy" row where it has watchers of its own: armed for
 * slots 0 .. n - 1 (untimed), then the idle push-later row's timed loop, its
 * order and its slots, with lazy_push() as the push, then stopped (untimed).
 */
static void pb_lazy_arm_job(void *arg)
{
	struct pb_job *j = arg;

	j->im->lazy_arm(j->l->n);
}

static void pb_idle_lazy_job(void *arg)
{
	struct pb_job *j = arg;
	const struct pb_impl *im = j->im;
	struct pb_impl lazy = *im;

	lazy.idle_push = im->lazy_push;
	j->im = &lazy;
	pb_idle_later_job(j);
	j->im = im;
}

static void pb_lazy_end_job(void *arg)
{
	struct pb_job *j = arg;

	j->im->lazy_end();
}

/* The deadline meant: the clock just before the arm call, plus the delay. */
static void pb_lat_job(void *arg)
{
	struct pb_job *j = arg;
	const struct pb_lists *l = j->l;

	for (unsigned i = j->from; i < j->to; i++) {
		uint64_t delay = l->lat_delay[i];

		l->lat_deadline[i] = bench_now_ns() + delay;
		j->im->arm(pb_lat_base + i, delay);
	}
}

/* The churn: its state lives across the loop iterations it runs in. */
struct pb_mix {
	const struct pb_impl *im;
	struct rng r;
	uint32_t *pool;
	uint32_t *spare;
	uint32_t count;		/* pending */
	uint32_t nspare;
	uint32_t max;		/* pending at most */
	uint32_t i;		/* ops done */
};

static void pb_mix_job(void *arg)
{
	struct pb_mix *m = arg;
	const struct pb_impl *im = m->im;
	uint32_t end = m->i + PB_MIX_BATCH < PB_MIX_OPS ? m->i + PB_MIX_BATCH : PB_MIX_OPS;

	for (; m->i < end; m->i++) {
		uint32_t op = rng_below(&m->r, 10);

		if (op < 4 && m->count) {
			uint32_t j = rng_below(&m->r, m->count);

			/* Later than any deadline before it: the delays grow with i. */
			im->push_later(m->pool[j], BENCH_FAR_MIN + BENCH_FAR_SPAN + BENCH_S +
					(uint64_t)m->i * 1000u);
		} else if ((op < 7 && m->count < m->max) || !m->count) {
			uint32_t slot = m->spare[--m->nspare];

			im->arm(slot, bench_far_delay(&m->r));
			m->pool[m->count++] = slot;
		} else {
			uint32_t j = rng_below(&m->r, m->count);
			uint32_t slot = m->pool[j];

			im->cancel(slot);
			m->pool[j] = m->pool[--m->count];
			m->spare[m->nspare++] = slot;
		}
	}
}

/* ------------------------------------------------------------------------
 * One implementation, one run.
 */

static void pb_no_strays(const struct pb_impl *im, const char *what)
{
	uint64_t n = atomic_load_explicit(&pb_strays, memory_order_relaxed);

	if (n)
		bench_die("%s, %s: %" PRIu64 " timers armed %" PRIu64 " s or more ahead fired "
			  "(the last: slot %" PRIu32 ", %s): the run took too long, or it fired early",
			  im->name, what, n, BENCH_FAR_MIN / BENCH_S,
			  atomic_load_explicit(&pb_stray_slot, memory_order_relaxed),
			  atomic_load_explicit(&pb_stray_foreign, memory_order_relaxed) ?
			  "one ran on a thread other than the main one" : "on the main thread");
}

static void pb_lateness(const struct pb_impl *im, struct pb_lists *l, double *row)
{
	uint64_t give_up, early = 0, earliest = 0;
	int64_t *v = l->lat_sorted;

	for (unsigned j = 0; j < l->lat; j++)
		atomic_store_explicit(&pb_lat_fired[j], 0, memory_order_relaxed);
	atomic_store_explicit(&pb_lat_done, 0, memory_order_relaxed);
	atomic_store_explicit(&pb_twice, 0, memory_order_relaxed);
	for (unsigned from = 0; from < l->lat; from += PB_LAT_BATCH) {
		struct pb_job j = { .im = im, .l = l, .from = from,
				    .to = from + PB_LAT_BATCH < l->lat ? from + PB_LAT_BATCH : l->lat };

		im->in_loop(pb_lat_job, &j);
	}
	give_up = bench_now_ns() + PB_LAT_MAX_MS * BENCH_MS + PB_WAIT_LIMIT;
	while (atomic_load_explicit(&pb_lat_done, memory_order_acquire) < l->lat) {
		if (bench_now_ns() > give_up)
			bench_die("%s, lateness: %" PRIu64 " of %u callbacks after %" PRIu64 " s",
				  im->name, atomic_load_explicit(&pb_lat_done, memory_order_relaxed),
				  l->lat, PB_WAIT_LIMIT / BENCH_S);
		im->wait();
	}
	if (atomic_load_explicit(&pb_twice, memory_order_relaxed))
		bench_die("%s, lateness: a one-shot timer fired twice", im->name);
	for (unsigned j = 0; j < l->lat; j++) {
		uint64_t fired = atomic_load_explicit(&pb_lat_fired[j], memory_order_relaxed);

		v[j] = (int64_t)(fired - l->lat_deadline[j]);
		if (v[j] < 0) {
			early++;
			earliest = (uint64_t)-v[j] > earliest ? (uint64_t)-v[j] : earliest;
		}
	}
	qsort(v, l->lat, sizeof(*v), bench_cmp_i64);
	row[PB_LAT_P50] = (double)v[l->lat / 2] / 1e3;
	row[PB_LAT_P99] = (double)v[(size_t)l->lat * 99 / 100] / 1e3;
	row[PB_LAT_MAX] = (double)v[l->lat - 1] / 1e3;
	row[PB_EARLY] = (double)early;
	row[PB_EARLIEST] = (double)earliest / 1e3;
}

static void pb_churn(const struct pb_impl *im, struct pb_lists *l, double *row,
		     size_t *pending)
{
	struct pb_mix m = {
		.im = im, .r = { l->mix_seed }, .pool = l->pool, .spare = l->spare,
		.count = (uint32_t)l->n, .nspare = PB_SLACK,
		.max = (uint32_t)(l->n + PB_SLACK),
	};
	uint64_t cpu0, cpu1;

	/* Pending: slots 0 .. n - 1; spare: the next PB_SLACK, lowest on top. */
	for (uint32_t i = 0; i < l->n; i++)
		l->pool[i] = i;
	for (uint32_t k = 0; k < PB_SLACK; k++)
		l->spare[k] = (uint32_t)l->n + PB_SLACK - 1 - k;
	cpu0 = bench_cpu_ns();
	while (m.i < PB_MIX_OPS)
		im->in_loop(pb_mix_job, &m);
	/* kairos: what its threads do after the calls return counts too. */
	pb_quiesce(im);
	cpu1 = bench_cpu_ns();
	row[PB_CHURN] = (double)(cpu1 - cpu0) / PB_MIX_OPS;	/* ns/op == ms per 1e6 */
	*pending = m.count;
}

static void pb_progress(const struct pb_impl *im, size_t n, const char *label,
			const char *phase)
{
	bench_progress("kairos-bench peer: N=%zu %s %s: %s", n, label, im->name, phase);
}

static void pb_measure(const struct pb_impl *im, struct pb_lists *l, const char *label,
		       double *row)
{
	struct pb_job j = { .im = im, .l = l };
	uint64_t rss0, rss1, slab0, slab1;
	size_t n = l->n, pending;

	atomic_store_explicit(&pb_strays, 0, memory_order_relaxed);
	atomic_store_explicit(&pb_stray_foreign, false, memory_order_relaxed);
	pb_lat_base = (uint32_t)(n + PB_SLACK);
	pb_lat_n = l->lat;
	/* What earlier implementations freed goes back to the kernel first. */
	malloc_trim(0);
	bench_settle();
	rss0 = bench_rss_bytes();
	slab0 = pb_slab_bytes();
	im->setup(l->cap);
	pb_quiesce(im);

	pb_progress(im, n, label, "fill");
	im->in_loop(pb_arm_job, &j);
	pb_quiesce(im);
	/* N pending at the start of each cycle, and again at its end. */
	for (unsigned cycle = 0; cycle < pb_cycles; cycle++) {
		pb_progress(im, n, label, "cancel");
		im->in_loop(pb_cancel_job, &j);
		row[PB_CANCEL] = (double)j.ns / (double)n;
		pb_quiesce(im);
		/*
		 * The idle rows go here, between the cancel and the arm: the N slots
		 * are free, and the idle cancel, in the cancel row's order, hands the
		 * arm row the records in the same order as the cancel row did.
		 */
		if (im->idle_arm) {
			pb_progress(im, n, label, "idle arm");
			im->in_loop(pb_idle_arm_job, &j);
			row[PB_IDLE_ARM] = (double)j.ns / (double)n;
			pb_quiesce(im);
			pb_progress(im, n, label, "idle push-later");
			im->in_loop(pb_idle_later_job, &j);
			row[PB_IDLE_LATER] = (double)j.ns / (double)n;
			/* Its push is already a store: the lazy row is this one. */
			if (im->idle_push_lazy)
				row[PB_IDLE_LAZY] = row[PB_IDLE_LATER];
			pb_quiesce(im);
			if (im->prefetch) {
				pb_progress(im, n, label, "idle push, prefetch 16");
				im->in_loop(pb_idle_later_pf_job, &j);
				row[PB_IDLE_LATER_PF] = (double)j.ns / (double)n;
				pb_quiesce(im);
			}
			pb_progress(im, n, label, "idle cancel");
			im->in_loop(pb_cancel_job, &j);
			row[PB_IDLE_CANCEL] = (double)j.ns / (double)n;
			pb_quiesce(im);
			pb_no_strays(im, "idle");
		}
		pb_progress(im, n, label, "arm");
		im->in_loop(pb_arm_job, &j);
		row[PB_ARM] = (double)j.ns / (double)n;
		row[PB_PAIR] = row[PB_ARM] + row[PB_CANCEL];
		pb_quiesce(im);
		if (cycle + 1 == pb_cycles) {
			rss1 = bench_rss_bytes();
			slab1 = pb_slab_bytes();
			row[PB_BYTES] = ((double)rss1 - (double)rss0) / (double)n;
			row[PB_KBYTES] = ((double)slab1 - (double)slab0) / (double)n;
		}

		pb_progress(im, n, label, "push-later");
		im->in_loop(pb_later_job, &j);
		row[PB_LATER] = (double)j.ns / (double)n;
		pb_quiesce(im);

		/* Cancelled again with prefetches ahead, then armed again (untimed). */
		if (im->prefetch) {
			pb_progress(im, n, label, "cancel, prefetch 16");
			im->in_loop(pb_cancel_pf_job, &j);
			row[PB_CANCEL_PF] = (double)j.ns / (double)n;
			pb_quiesce(im);
			im->in_loop(pb_arm_job, &j);
			pb_quiesce(im);
		}
	}

	pb_progress(im, n, label, "lateness");
	pb_lateness(im, l, row);
	pb_quiesce(im);
	pb_no_strays(im, "lateness");

	pb_progress(im, n, label, "churn");
	pb_churn(im, l, row, &pending);
	pb_no_strays(im, "churn");

	/*
	 * The lazy idle push on watchers of its own, last, so that no phase
	 * before it runs on a different heap or cache: armed in slot order as
	 * the idle rows' are, pushed in their order, then stopped again.
	 */
	if (im->lazy_push) {
		pb_progress(im, n, label, "idle push, lazy");
		im->in_loop(pb_lazy_arm_job, &j);
		pb_quiesce(im);
		im->in_loop(pb_idle_lazy_job, &j);
		row[PB_IDLE_LAZY] = (double)j.ns / (double)n;
		im->in_loop(pb_lazy_end_job, &j);
		pb_no_strays(im, "idle push, lazy");
	}
	pb_progress(im, n, label, "teardown");
	im->teardown(pending);
}

/* ------------------------------------------------------------------------
 * The floors: one atomic CAS on a random 64-byte record per op, alone and
 * after a clock read.  A timer call that any thread may make must change
 * its record's state word with an atomic op, and one that takes a delay
 * must read the clock for now + delay: these are what such a call costs at
 * the very least on this machine, at this many records.  Two more show what
 * the clock read waits for: with the record prefetched before it (the miss
 * then overlaps the read, as in kairos_reset()), and with the bare counter
 * read instead (whether an unordered counter would spare the wait).
 */

struct pb_floors {
	size_t n;		/* records: max(PB_FLOOR_RECS, N) */
	char *recs;		/* n * BENCH_ALIGN bytes */
	uint32_t *order;	/* a random permutation of 0 .. n - 1 */
};

static void pb_floors_alloc(struct pb_floors *f, size_t n)
{
	f->n = n > PB_FLOOR_RECS ? n : PB_FLOOR_RECS;
	f->recs = bench_alloc(f->n * BENCH_ALIGN);
	f->order = bench_alloc(f->n * sizeof(*f->order));
}

static void pb_floors_free(struct pb_floors *f)
{
	free(f->recs);
	free(f->order);
}

/* One run's floors, in a fresh random order drawn from @r. */
static void pb_floors_measure(struct pb_floors *f, struct rng *r, size_t n,
			      const char *label, double *out)
{
	bench_progress("kairos-bench peer: N=%zu %s: floors", n, label);
	rng_permutation(r, f->order, f->n);
	out[PB_FLOOR_CAS] = bench_cas_floor(f->recs, f->order, f->n, BENCH_FLOOR_CAS, 0);
	out[PB_FLOOR_CLOCK] = bench_cas_floor(f->recs, f->order, f->n, BENCH_FLOOR_CLOCK,
					      CLOCK_MONOTONIC);
	out[PB_FLOOR_COARSE] = bench_cas_floor(f->recs, f->order, f->n, BENCH_FLOOR_CLOCK,
					       CLOCK_MONOTONIC_COARSE);
	out[PB_FLOOR_PREFETCH] = bench_cas_floor(f->recs, f->order, f->n, BENCH_FLOOR_PREFETCH,
						 CLOCK_MONOTONIC);
#if defined(__x86_64__)
	out[PB_FLOOR_TSC] = bench_cas_floor(f->recs, f->order, f->n, BENCH_FLOOR_TSC, 0);
#endif
	out[PB_FLOOR_CLOCK_ALONE] = bench_cas_floor(f->recs, f->order, f->n,
						    BENCH_FLOOR_CLOCK_ALONE, CLOCK_MONOTONIC);
}

/* ------------------------------------------------------------------------
 * Options, sizes, the tables.
 */

struct pb_opts {
	struct bench_opts b;	/* runs 0: the default (5, fewer from PB_BIG_N) */
	const char *plot;
	bool only[PB_NIMPL];
	bool only_set;
};

/* Why an implementation has no numbers at a size. */
enum pb_state {
	PB_OK,
	PB_OFF,		/* not asked for, or not built: no column */
	PB_NOFD,	/* does not fit in RLIMIT_NOFILE at this N */
};

struct pb_size {
	size_t n;
	unsigned lat;
	unsigned runs;
	enum pb_state state[PB_NIMPL];
	double v[PB_NIMPL][PB_NROWS];	/* aggregated over the runs */
	size_t floor_n;			/* the floors' records */
	double floor[PB_NFLOORS];	/* medians over the runs */
};

static bool pb_column(const struct pb_opts *o, size_t i)
{
	return !pb_impls[i]->missing && (!o->only_set || o->only[i]);
}

/* Whether @i has a value in @row: the idle rows need its idle functions. */
static bool pb_has_row(size_t i, int row)
{
	if (row == PB_IDLE_ARM || row == PB_IDLE_LATER || row == PB_IDLE_CANCEL)
		return pb_impls[i]->idle_arm != NULL;
	if (row == PB_CANCEL_PF)
		return pb_impls[i]->prefetch != NULL;
	if (row == PB_IDLE_LATER_PF)
		return pb_impls[i]->prefetch != NULL && pb_impls[i]->idle_arm != NULL;
	if (row == PB_IDLE_LAZY)
		return (pb_impls[i]->idle_push_lazy && pb_impls[i]->idle_arm != NULL) ||
		       pb_impls[i]->lazy_push != NULL;
	return true;
}

/* Slots that @i needs at N = @n with @lat lateness timers, against its cap. */
static bool pb_fits(size_t i, size_t n, unsigned lat)
{
	return !pb_impls[i]->max_cap || n + PB_SLACK + lat <= pb_impls[i]->max_cap();
}

/*
 * The lateness count of a size: 20000, or PB_LAT_FD_TIMERS when a column
 * that is short of slots (one timerfd per timer) fits only with fewer.  The
 * same count for every column of a table.
 */
static unsigned pb_lat_for(const struct pb_opts *o, size_t n)
{
	for (size_t i = 0; i < PB_NIMPL; i++)
		if (pb_column(o, i) && !pb_fits(i, n, PB_LAT_TIMERS) &&
		    pb_fits(i, n, PB_LAT_FD_TIMERS))
			return PB_LAT_FD_TIMERS;
	return PB_LAT_TIMERS;
}

static void pb_bench_size(const struct pb_opts *o, struct pb_size *s)
{
	double (*v)[PB_NIMPL][PB_NROWS] = bench_alloc(s->runs * sizeof(*v));
	double (*fv)[PB_NFLOORS] = bench_alloc(s->runs * sizeof(*fv));
	struct pb_floors f;
	struct pb_lists l;

	pb_lists_alloc(&l, s->n, s->lat);
	pb_floors_alloc(&f, s->n);
	s->floor_n = f.n;
	for (unsigned run = 0; run < s->runs; run++) {
		struct bench_run br = bench_run_at((int)run, 0, s->runs, o->b.seed, s->n);
		struct rng r = { br.seed };	/* the same for every column */

		pb_lists_fill(&l, &r);
		/* After the lists, so that they are what they were without floors. */
		pb_floors_measure(&f, &r, s->n, br.label, fv[run]);
		/* Rotate who goes first, so that no column always starts a run. */
		for (size_t k = 0; k < PB_NIMPL; k++) {
			size_t i = (k + run) % PB_NIMPL;

			if (s->state[i] == PB_OK)
				pb_measure(pb_impls[i], &l, br.label, v[run][i]);
		}
	}
	bench_progress_done();
	for (size_t i = 0; i < PB_NIMPL; i++) {
		if (s->state[i] != PB_OK)
			continue;
		if (o->b.raw)
			printf("kairos-bench peer: N=%zu %s, each run's values\n", s->n,
			       pb_impls[i]->name);
		for (int row = 0; row < PB_NROWS; row++) {
			if (o->b.raw)
				printf("%-22s", pb_rows[row].name);
			if (o->b.raw && pb_has_row(i, row)) {
				bench_raw_runs(&v[0][i][row], PB_NIMPL * PB_NROWS, s->runs, 10,
					       pb_rows[row].prec, 1);
			} else if (o->b.raw) {
				for (unsigned run = 0; run < s->runs; run++)
					printf(" %10s", "n/a");
				printf("\n");
			}
			s->v[i][row] = bench_aggregate(pb_rows[row].agg, &v[0][i][row],
						       PB_NIMPL * PB_NROWS, s->runs);
		}
		if (o->b.raw)
			printf("\n");
	}
	if (o->b.raw)
		printf("kairos-bench peer: N=%zu floors, each run's values (ns/op)\n", s->n);
	for (int k = 0; k < PB_NFLOORS; k++) {
		if (o->b.raw) {
			printf("%-44s", pb_floor_names[k]);
			bench_raw_runs(&fv[0][k], PB_NFLOORS, s->runs, 10, 1, 1);
		}
		s->floor[k] = bench_aggregate(BENCH_MEDIAN, &fv[0][k], PB_NFLOORS, s->runs);
	}
	if (o->b.raw)
		printf("\n");
	pb_floors_free(&f);
	pb_lists_free(&l);
	free(v);
	free(fv);
}

/* One cell: value, and its ratio to kairos's where that means something. */
static void pb_cell(char *buf, size_t len, const struct pb_size *s, size_t i, int row,
		    bool ratios)
{
	const struct pb_row_info *ri = &pb_rows[row];
	double x = s->v[i][row], k = s->v[0][row];

	if (s->state[i] == PB_NOFD) {
		snprintf(buf, len, "n/a (EMFILE)");
		return;
	}
	if (!pb_has_row(i, row)) {
		snprintf(buf, len, "n/a");
		return;
	}
	/* The system-wide slab moves by more than nothing per timer would. */
	if (row == PB_KBYTES && !pb_impls[i]->kernel_state) {
		snprintf(buf, len, "-");
		return;
	}
	if (i == 0 || !ratios || !ri->ratio || k <= 0 || x <= 0)
		snprintf(buf, len, "%.*f", ri->prec, x);
	else
		snprintf(buf, len, "%.*f (%.2fx)", ri->prec, x, x / k);
}

/*
 * Where kairos is not ahead, the table says so in words: each row in which
 * a peer's value is below kairos's (every ratio row is lower-is-better).
 */
static void pb_print_behind(const struct pb_opts *o, const struct pb_size *s)
{
	bool any = false;

	for (int row = 0; row < PB_NROWS; row++) {
		const struct pb_row_info *ri = &pb_rows[row];
		double k = s->v[0][row];
		bool first = true;

		if (!ri->ratio || k <= 0)
			continue;
		for (size_t i = 1; i < PB_NIMPL; i++) {
			double x = s->v[i][row];
			char ratio[32] = "";

			/* One timerfd per timer keeps its bytes in the kernel: count them. */
			if (row == PB_BYTES && pb_impls[i]->kernel_state)
				x += s->v[i][PB_KBYTES];
			if (!pb_column(o, i) || s->state[i] != PB_OK || !pb_has_row(i, row) ||
			    x >= k)
				continue;
			if (x > 0)
				snprintf(ratio, sizeof(ratio), " (%.2fx)", x / k);
			if (!any)
				printf("%s", o->b.markdown ? "Where kairos is not ahead:\n\n" :
				       "where kairos is not ahead:\n");
			if (first)
				printf("%s%s:", o->b.markdown ? "- " : "  ", ri->name);
			printf("%s %s %.*f%s%s", first ? "" : ",", pb_impls[i]->name, ri->prec,
			       x, ratio,
			       (row == PB_LAT_P50 || row == PB_LAT_P99 || row == PB_LAT_MAX) &&
			       s->v[i][PB_EARLY] > 0 ? " but fires early" : "");
			first = false;
			any = true;
		}
		if (!first)
			printf("\n");
	}
	if (!any)
		printf("kairos is ahead in every row with a ratio\n");
}

/* The floors, under the table: no column, since nothing but memory is timed. */
static void pb_print_floors(const struct pb_opts *o, const struct pb_size *s)
{
	printf("%sfloors: one atomic CAS per op on a random record of %zu (64 B each, one "
	       "array, a precomputed random order), last the clock read alone; medians:\n",
	       o->b.markdown ? "\n" : "", s->floor_n);
	if (o->b.markdown)
		printf("\n");
	for (int k = 0; k < PB_NFLOORS; k++)
		printf(o->b.markdown ? "- %s: %.1f ns/op\n" : "  %-44s %8.1f ns/op\n",
		       pb_floor_names[k], s->floor[k]);
	if (o->b.markdown)
		printf("\n");
}

static void pb_print_table(const struct pb_opts *o, const struct pb_size *s)
{
	char fmt[16 + 8 * PB_NIMPL] = "%-22s %-10s", cell[PB_NIMPL][48];
	const char *cells[2 + PB_NIMPL] = { "row", "unit" };
	const struct bench_table t = { o->b.markdown, fmt };
	bool ratios = s->state[0] == PB_OK;
	unsigned int nc = 2;

	for (size_t i = 0; i < PB_NIMPL; i++) {
		if (pb_column(o, i)) {
			strcat(fmt, " %17s");
			cells[nc++] = pb_impls[i]->name;
		}
	}
	bench_title(&t, "N=%zu pending, runs=%u, lateness timers=%u, seed=%" PRIu64
		    " (medians; (x) = value / kairos's)", s->n, s->runs, s->lat, o->b.seed);
	bench_row(&t, cells, true);
	for (int row = 0; row < PB_NROWS; row++) {
		cells[0] = pb_rows[row].name;
		cells[1] = pb_rows[row].unit;
		nc = 2;
		for (size_t i = 0; i < PB_NIMPL; i++) {
			if (!pb_column(o, i))
				continue;
			pb_cell(cell[i], sizeof(cell[i]), s, i, row, ratios);
			cells[nc++] = cell[i];
		}
		bench_row(&t, cells, false);
	}
	if (o->b.markdown)
		printf("\n");
	pb_print_floors(o, s);
	for (size_t i = 0; i < PB_NIMPL; i++)
		if (pb_column(o, i) && s->state[i] == PB_NOFD)
			printf("%s: n/a (EMFILE at ~%zu fds): N=%zu + %u churn slack + %u lateness "
			       "timers need %zu fds, RLIMIT_NOFILE is %zu\n", pb_impls[i]->name,
			       pt_nofile, s->n, PB_SLACK, s->lat,
			       s->n + PB_SLACK + s->lat + PB_FD_RESERVE, pt_nofile);
	if (!ratios)
		printf("note: kairos was not measured, so no ratios\n");
	else
		pb_print_behind(o, s);
	printf("\n");
	fflush(stdout);
}

/* ------------------------------------------------------------------------
 * The plot: gnuplot, when there is one.
 */

static void pb_plot(const struct pb_opts *o, const struct pb_size *sizes)
{
	static const struct {
		int row;
		bool log;
	} panels[] = {
		{ PB_PAIR, true }, { PB_LATER, true }, { PB_CHURN, true }, { PB_BYTES, true },
		{ PB_IDLE_LATER, true }, { PB_LAT_P50, false }, { PB_LAT_P99, false },
		{ PB_EARLY, false },
	};
	FILE *f;
	int rc;

	if (!plot_have_gnuplot()) {
		fprintf(stderr, "kairos-bench peer: gnuplot is not installed (not in PATH): "
				"no plot written to %s\n", o->plot);
		return;
	}
	f = popen("gnuplot", "w");
	if (!f) {
		fprintf(stderr, "kairos-bench peer: cannot run gnuplot: %s; no plot written\n",
			strerror(errno));
		return;
	}
	fprintf(f, "set terminal svg size 1900,900 dynamic font 'sans,11'\nset output ");
	plot_quote(f, o->plot);
	fprintf(f, "\nset style data histograms\nset style histogram clustered gap 1\n"
		   "set style fill solid 0.8 border -1\n"
		   "set key outside right top vertical font ',9'\n"
		   "set grid ytics\nset xlabel 'pending timers'\n"
		   "set multiplot layout 2,4 title 'kairos-bench peer (medians; lower is "
		   "better; missing bar: n/a)'\n");
	for (size_t p = 0; p < sizeof(panels) / sizeof(panels[0]); p++) {
		const struct pb_row_info *ri = &pb_rows[panels[p].row];
		bool first = true;

		fprintf(f, "$d%zu << EOD\n", p);
		for (unsigned s = 0; s < o->b.nsizes; s++) {
			fprintf(f, "%zu", sizes[s].n);
			for (size_t i = 0; i < PB_NIMPL; i++) {
				if (!pb_column(o, i))
					continue;
				double x = sizes[s].v[i][panels[p].row];

				/* Bytes: where per-timer state is in the kernel, that too. */
				if (panels[p].row == PB_BYTES && pb_impls[i]->kernel_state)
					x += sizes[s].v[i][PB_KBYTES];
				if (sizes[s].state[i] == PB_OK && pb_has_row(i, panels[p].row))
					fprintf(f, " %.3f", x);
				else
					fprintf(f, " NaN");
			}
			fprintf(f, "\n");
		}
		fprintf(f, "EOD\n%s\nset title '%s (%s)%s'\nplot ",
			panels[p].log ? "set logscale y" : "unset logscale y", ri->name, ri->unit,
			panels[p].row == PB_BYTES ? ", timerfd: + kernel" : "");
		for (size_t i = 0, col = 2; i < PB_NIMPL; i++) {
			if (!pb_column(o, i))
				continue;
			fprintf(f, "%s$d%zu using %zu%s title '%s'", first ? "" : ", ", p, col,
				first ? ":xtic(1)" : "", pb_impls[i]->name);
			first = false;
			col++;
		}
		fprintf(f, "\n");
	}
	fprintf(f, "unset multiplot\n");
	rc = pclose(f);
	if (rc != 0)
		fprintf(stderr, "kairos-bench peer: gnuplot failed (status %d); the plot in %s "
				"may be missing or incomplete\n", rc, o->plot);
	else
		printf("plot written to %s\n", o->plot);
}

/* ------------------------------------------------------------------------
 * The legend and the entry point.
 */

static void pb_print_legend(const struct pb_opts *o)
{
	const char *pre = o->b.markdown ? "" : "# ";
	char buf[512];

	bench_machine(buf, sizeof(buf));
	printf("%speer: the same workloads on kairos and its peers, one after another in each "
	       "run (machine: %s)\n", pre, buf);
	printf("%sWhat each costs a server thread: libev, libuv and libevent are "
	       "single-threaded loops, so their timers are armed,\n", pre);
	printf("%s  pushed and cancelled inside a callback on the loop's own thread (their "
	       "cached loop time); kairos is called from\n", pre);
	printf("%s  the main thread through its public API while its shard and worker threads "
	       "run on the other cores; timerfd from the main thread.\n", pre);
	if (pb_pin_cpu >= 0)
		printf("%sThe calling thread is pinned to CPU %d (--pin); kairos's threads are "
		       "not.\n", pre, pb_pin_cpu);
	else
		printf("%sThe calling thread is not pinned: kairos_arm() takes records from the "
		       "pool of the shard of the CPU it first armed from.\n", pre);
	if (pb_settle_all)
		printf("%sEvery column pauses before each timed phase (--settle-all): a sleep "
		       "of 5 ms at least, until the process is quiet.\n", pre);
	else
		printf("%sColumns with threads of their own (kairos) pause before each timed "
		       "phase until those threads are quiet; the loops do not (--settle-all).\n",
		       pre);
	if (pb_cycles > 1)
		printf("%sThe cancel, idle, arm and push-later rows ran %u times in a row on each "
		       "instance; each shows its last time (--cycles); libev's idle push, lazy "
		       "ran once, after the churn.\n", pre, pb_cycles);
	for (size_t i = 0; i < PB_NIMPL; i++) {
		if (pb_impls[i]->missing) {
			printf("%s%s: %s: its column is left out\n", pre, pb_impls[i]->name,
			       pb_impls[i]->missing);
			continue;
		}
		if (!pb_column(o, i))
			continue;
		pb_impls[i]->describe(buf, sizeof(buf));
		printf("%s%s\n", pre, buf);
	}
	printf("%sarm/cancel: N far timers (U[10,60] s) armed untimed, all cancelled in a "
	       "random order (cancel), armed again in slot order\n", pre);
	printf("%s  (arm: a server arms the timer of the connection in hand; kairos takes its "
	       "recycled records, in the order they were freed);\n", pre);
	printf("%scancel, prefetch 16: after push-later, the same cancels with the slot %u "
	       "ahead prefetched before each (kairos_prefetch(), its id in the\n", pre,
	       PB_PF_AHEAD);
	printf("%s  bench's array prefetched %u ahead; the loops: their timer struct), as a "
	       "loop does for the connections it handles next; then all armed again, untimed;\n",
	       pre, 2 * PB_PF_AHEAD);
	printf("%spush-later: each to its delay + U[1,1000] ms (libev: repeat + "
	       "ev_timer_again; kairos: kairos_reset, which reads the clock);\n", pre);
	printf("%sidle: N idle timeouts of %" PRIu64 " s armed in slot order (kairos: "
	       "kairos_arm_slack, %" PRIu64 " s slack; libev: ev_timer_init, repeat %" PRIu64
	       " s, + ev_timer_again:\n", pre, PB_IDLE_DELAY / BENCH_S, PB_IDLE_SLACK / BENCH_S,
	       PB_IDLE_DELAY / BENCH_S);
	printf("%s  method 2 of \"Be smart about timeouts\" in libev's manual), each pushed "
	       "to %" PRIu64 " s from now in a random order (kairos_reset;\n", pre,
	       PB_IDLE_DELAY / BENCH_S);
	printf("%s  ev_timer_again, which moves the timer in libev's heap), all cancelled in a "
	       "random order\n", pre);
	printf("%s  (kairos_cancel; ev_timer_stop); n/a: no idle idiom beyond the plain arm "
	       "and push (libuv, libevent, timerfd);\n", pre);
	printf("%sidle push, prefetch 16: after idle push-later, the same pushes again with "
	       "the prefetches of \"cancel, prefetch 16\", to %" PRIu64 " s from then;\n", pre,
	       PB_IDLE_DELAY / BENCH_S);
	printf("%sidle push, lazy: the same activity done the lazy way, libev's manual's "
	       "method 3: each push only stores ev_now() in its connection's\n", pre);
	printf("%s  last-activity field, in idle push-later's random order (libev: N "
	       "connections of their own, each an ev_timer and that field, armed\n", pre);
	printf("%s  one-shot for %" PRIu64 " s in slot order, untimed, after the churn, so "
	       "that no other row changes); the work moves to expiry, which this\n", pre,
	       PB_IDLE_DELAY / BENCH_S);
	printf("%s  row does not time: the timer of a connection that stayed active fires "
	       "once per %" PRIu64 " s, reads that field and re-arms for what is\n", pre,
	       PB_IDLE_DELAY / BENCH_S);
	printf("%s  left; kairos: its idle push-later value itself, from the same run "
	       "(kairos_reset of a later deadline is already a store that the\n", pre);
	printf("%s  shard checks before firing); n/a: no such idiom (libuv, libevent, "
	       "timerfd);\n", pre);
	printf("%slateness: CLOCK_MONOTONIC in the callback - (CLOCK_MONOTONIC before the arm "
	       "+ delay), delays U{1..200} whole ms, %u per loop\n", pre, PB_LAT_BATCH);
	printf("%s  iteration, N pending; early = callbacks before that deadline (a cached "
	       "loop time makes a loop fire early);\n", pre);
	printf("%sbytes: RSS with N armed - before setup, over N, the caller's per-timer "
	       "handle included; (kernel): /proc/meminfo Slab delta\n", pre);
	printf("%s  over N, system-wide, so shown only where per-timer state is kernel memory "
	       "(timerfd);\n", pre);
	printf("%schurn: CPU of the whole process (kairos's threads included) for %u ops, "
	       "40%% push-later / 30%% arm / 30%% cancel\n", pre, PB_MIX_OPS);
	printf("%s  on random members, %u per loop iteration.\n", pre, PB_MIX_BATCH);
	printf("%sfloors: under each table, one atomic CAS per op on a random 64-byte record of "
	       "max(%u, N) in one array, alone and after\n", pre, PB_FLOOR_RECS);
	printf("%s  clock_gettime(CLOCK_MONOTONIC) or clock_gettime(CLOCK_MONOTONIC_COARSE): "
	       "what a thread-safe timer call costs at the least;\n", pre);
	printf("%s  then with the record prefetched before the clock read, and after a bare "
	       "rdtsc: what the clock read waits for;\n", pre);
	printf("%s  last, the clock read with no record: what any call that reads the clock "
	       "pays, all in cache.\n", pre);
	printf("%sMedians over the runs; lateness max and early-by: worst run; early: sum over "
	       "the runs. Deadlines are random outside the\n", pre);
	printf("%s  idle rows, so the loops' special cases for equal timeouts (libevent common "
	       "timeouts, libev's list idiom) do not apply.\n\n", pre);
}

static void pb_usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-bench peer [--n N]... [--runs N] [--seed S] [--only NAME,...]\n"
		"                         [--markdown] [--plot FILE.svg] [--raw] [--pin CPU]\n"
		"                         [--cycles K] [--settle-all] [--huge-pages]\n"
		"                         [--exact-clock]\n"
		"\n"
		"The same workloads on kairos, kairos-loop, libev, libuv, libevent (those\n"
		"found at build time) and one timerfd per timer, each value with its ratio\n"
		"to kairos's; the legend says what each row measures.\n"
		"\n"
		"  --n N          pending timers (1000..%u, 1e6 style allowed); repeat for\n"
		"                 more sizes (default: the most that one timerfd per timer\n"
		"                 fits under RLIMIT_NOFILE, then 100000 and 1000000)\n"
		"  --runs N       runs per size, median reported (default 5, and %u from\n"
		"                 N=%u)\n"
		"  --seed S       workload seed (default 1)\n"
		"  --only LIST    comma-separated columns among kairos, kairos-loop, libev,\n"
		"                 libuv, libevent, timerfd (ratios need kairos)\n"
		"  --markdown     print the tables as markdown\n"
		"  --plot FILE    also draw the headline rows into FILE (SVG) with gnuplot,\n"
		"                 when it is installed\n"
		"  --raw          also print every run's numbers\n"
		"  --pin CPU      run the calling thread (every loop, kairos's caller) on\n"
		"                 that CPU only; kairos's own threads keep the process's\n"
		"                 mask (default: not pinned)\n"
		"  --cycles K     run the cancel, idle, arm and push-later rows K times in a\n"
		"                 row on each instance and report the last (1..%u,\n"
		"                 default 1: a fresh instance's first pass)\n"
		"  --settle-all   pause every column before each timed phase, as kairos's\n"
		"                 are (default: only the columns with threads of their own)\n"
		"  --huge-pages   the kairos columns' services get KAIROS_HUGE_PAGES\n"
		"  --exact-clock  and KAIROS_EXACT_CLOCK: the idle rows' slack timers read\n"
		"                 clock_gettime(), not the time-stamp counter\n"
		"  -h, --help     this text\n"
		"\n"
		"libevent runs with its default flags (CLOCK_MONOTONIC_COARSE); set\n"
		"EVENT_PRECISE_TIMER=1 in the environment for its precise clock.\n",
		PB_MAX_N, PB_BIG_RUNS, PB_BIG_N, PB_MAX_CYCLES);
}


static void pb_parse_only(struct pb_opts *o, const char *arg)
{
	const char *p = arg;

	o->only_set = true;
	while (*p) {
		size_t len = strcspn(p, ","), i;

		for (i = 0; i < PB_NIMPL; i++)
			if (strlen(pb_impls[i]->name) == len && !strncmp(p, pb_impls[i]->name, len))
				break;
		if (i == PB_NIMPL)
			opt_fail("--only", "unknown name '%.*s'", (int)len, p);
		if (pb_impls[i]->missing)
			fprintf(stderr, "kairos-bench peer: %s: %s\n", pb_impls[i]->name,
				pb_impls[i]->missing);
		o->only[i] = true;
		p += len;
		if (*p == ',')
			p++;
	}
}

/* The default sizes: where one timerfd per timer fits, then 1e5 and 1e6. */
static void pb_default_sizes(struct pb_opts *o)
{
	for (size_t i = 0; i < PB_NIMPL; i++) {
		size_t cap, n;

		if (!pb_column(o, i) || !pb_impls[i]->max_cap)
			continue;
		cap = pb_impls[i]->max_cap();
		n = cap > PB_SLACK + PB_LAT_FD_TIMERS ? cap - PB_SLACK - PB_LAT_FD_TIMERS : 0;
		n = n / 1000 * 1000;
		if (n >= 1000 && n < 100000)
			o->b.sizes[o->b.nsizes++] = n;
		break;
	}
	o->b.sizes[o->b.nsizes++] = 100000;
	o->b.sizes[o->b.nsizes++] = 1000000;
}

/* @argv[0] is "peer". */
int pb_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		BENCH_OPT_N, BENCH_OPT_RUNS, BENCH_OPT_SEED, BENCH_OPT_MARKDOWN, BENCH_OPT_RAW,
		BENCH_OPT_HELP,
		{ "only", required_argument, NULL, 'o' },
		{ "plot", required_argument, NULL, 'p' },
		{ "pin", required_argument, NULL, 'P' },
		{ "cycles", required_argument, NULL, 'C' },
		{ "settle-all", no_argument, NULL, 'S' },
		{ "huge-pages", no_argument, NULL, 'H' },
		{ "exact-clock", no_argument, NULL, 'E' },
		{ NULL, 0, NULL, 0 },
	};
	struct pb_opts o = { .b = { .seed = 1 } };
	struct pb_size *sizes;
	bool any = false;
	int c;

	bench_opt_start("peer");
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		if (bench_opt(c, &o.b, 1000, PB_MAX_N))
			continue;
		switch (c) {
		case 'o':
			pb_parse_only(&o, optarg);
			break;
		case 'p':
			o.plot = optarg;
			break;
		case 'P':
			pb_pin_cpu = (int)opt_u64("--pin", optarg, 0, CPU_SETSIZE - 1);
			break;
		case 'C':
			pb_cycles = (unsigned)opt_u64("--cycles", optarg, 1, PB_MAX_CYCLES);
			break;
		case 'S':
			pb_settle_all = true;
			break;
		case 'H':
			pb_huge_pages = true;
			break;
		case 'E':
			pb_exact_clock = true;
			break;
		case 'h':
			pb_usage(stdout);
			return 0;
		}
	}
	/* Opened now, so that a path that cannot be written fails before the run. */
	if (o.plot) {
		FILE *f = opt_open_out("--plot", o.plot);

		if (f == stdout)
			opt_fail("--plot", "'-': gnuplot writes a file, not stdout");
		fclose(f);
	}
	for (size_t i = 0; i < PB_NIMPL; i++)
		any |= pb_column(&o, i);
	if (!any)
		opt_fail("--only", "nothing to measure: every column asked for is not built");
	pt_raise_nofile();
	pb_main_tid = gettid();
	pb_pin_init();
	if (!o.b.nsizes)
		pb_default_sizes(&o);

	bench_warn_unoptimized();
	pb_print_legend(&o);
	sizes = bench_alloc(o.b.nsizes * sizeof(*sizes));
	for (unsigned s = 0; s < o.b.nsizes; s++) {
		struct pb_size *sz = &sizes[s];

		sz->n = o.b.sizes[s];
		sz->lat = pb_lat_for(&o, sz->n);
		sz->runs = o.b.runs ? o.b.runs : sz->n >= PB_BIG_N ? PB_BIG_RUNS : 5;
		for (size_t i = 0; i < PB_NIMPL; i++)
			sz->state[i] = !pb_column(&o, i) ? PB_OFF :
				       pb_fits(i, sz->n, sz->lat) ? PB_OK : PB_NOFD;
		pb_bench_size(&o, sz);
		pb_print_table(&o, sz);
	}
	if (o.plot)
		pb_plot(&o, sizes);
	free(sizes);
	return 0;
}
