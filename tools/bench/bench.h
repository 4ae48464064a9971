/* SPDX-License-Identifier: MIT */
/*
 * bench.h - helpers shared by every mode of kairos-bench: failing loudly,
 * the clock, memory, the shared options, progress lines,
 * medians, goal cells and the machine's line.  Definitions in bench.c; the
 * few called inside timed loops are inline here.
 */
#ifndef KAIROS_BENCH_H
#define KAIROS_BENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "opt.h"
#include "rng.h"

#define BENCH_ALIGN	64	/* cache line: records start on one */
#define BENCH_MS	UINT64_C(1000000)
#define BENCH_S		UINT64_C(1000000000)

/*
 * The far timers of the service, peer and scale modes: idle timeouts of
 * U[10, 60) s that do not fire during a run; a push moves one U[1, 1000] ms.
 */
#define BENCH_FAR_MIN	(10 * BENCH_S)
#define BENCH_FAR_SPAN	(50 * BENCH_S)
#define BENCH_PUSH_MIN	BENCH_MS
#define BENCH_PUSH_SPAN	(999 * BENCH_MS)

/* Mode entry points; @argv[0] is the mode's name. */
int wb_main(int argc, char **argv);	/* wheel.c */
int sb_main(int argc, char **argv);	/* service.c */
int sk_main(int argc, char **argv);	/* service.c: keyed timers */
int pb_main(int argc, char **argv);	/* peer.c */
int sc_main(int argc, char **argv);	/* scale.c */

__attribute__((format(printf, 3, 4), noreturn))
void bench_die_at(const char *file, int line, const char *fmt, ...);

/* A broken invariant or a wrong result: the numbers would mean nothing. */
#define bench_die(...)	bench_die_at(__FILE__, __LINE__, __VA_ARGS__)

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		bench_die("clock_gettime(CLOCK_MONOTONIC) failed");
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Cache-line aligned, zeroed memory, every page faulted in (so that no timed
 * loop pays for the kernel handing out fresh pages).  Exits on failure.
 */
void *bench_alloc(size_t size);

/*
 * Fresh anonymous memory, mapped and not touched: only the pages written
 * become resident, so an RSS delta counts what the writes needed.  Exits
 * on failure; bench_unmap() takes the same @size.
 */
void *bench_map(size_t size);
void bench_unmap(void *p, size_t size);

static inline uint64_t bench_far_delay(struct rng *r)
{
	return BENCH_FAR_MIN + rng_next(r) % BENCH_FAR_SPAN;
}

/* What a floor does before its CAS (bench_cas_floor()). */
enum bench_floor {
	BENCH_FLOOR_CAS,		/* nothing */
	BENCH_FLOOR_CLOCK,		/* clock_gettime(@id) */
	BENCH_FLOOR_PREFETCH,		/* prefetches the record, then clock_gettime(@id) */
	BENCH_FLOOR_TSC,		/* reads the time-stamp counter, unordered (x86-64) */
	BENCH_FLOOR_CLOCK_ALONE,	/* clock_gettime(@id), and no CAS: the read itself */
};

/*
 * The floor of a timer call that any thread may make: one atomic CAS per op
 * on the 64-byte record order[i] of @recs (the order read from a list, as
 * the API loops read theirs), after what @how says: a call that takes a
 * delay must read a clock.  BENCH_FLOOR_CLOCK_ALONE times the clock read
 * with no record at all: what a call that reads the clock pays even when
 * everything it touches is in cache.  Return: ns per op.  Inlined with
 * constant @how and @id, so that no test is left in the loop.
 */
static inline __attribute__((always_inline))
double bench_cas_floor(char *recs, const uint32_t *order, size_t n, enum bench_floor how,
		       clockid_t id)
{
	volatile uint64_t sink;	/* keeps the clock readings */
	uint64_t t0, t1, acc = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		char *rec = recs + (size_t)order[i] * BENCH_ALIGN;
		_Atomic uint64_t *p = (_Atomic uint64_t *)(void *)rec;
		struct timespec ts;
		uint64_t v;

		if (how == BENCH_FLOOR_PREFETCH)
			__builtin_prefetch(rec, 1);
		if (how == BENCH_FLOOR_CLOCK || how == BENCH_FLOOR_PREFETCH ||
		    how == BENCH_FLOOR_CLOCK_ALONE) {
			if (clock_gettime(id, &ts) != 0)
				bench_die("clock_gettime(%d) failed", (int)id);
			acc += (uint64_t)ts.tv_nsec;
		}
#if defined(__x86_64__)
		if (how == BENCH_FLOOR_TSC)
			acc += __builtin_ia32_rdtsc();
#endif
		if (how == BENCH_FLOOR_CLOCK_ALONE)
			continue;
		/* Load, then CAS from what was read: how a state word is changed. */
		v = atomic_load_explicit(p, memory_order_relaxed);
		atomic_compare_exchange_strong_explicit(p, &v, v + 1, memory_order_acq_rel,
							memory_order_relaxed);
	}
	t1 = bench_now_ns();
	sink = acc;
	(void)sink;
	return (double)(t1 - t0) / (double)n;
}

/* Fills @v with a random permutation of 0 .. @n - 1 (Fisher-Yates). */
void rng_permutation(struct rng *r, uint32_t *v, size_t n);

/*
 * The options the modes share.  A mode lists those it takes in its
 * getopt_long table (BENCH_OPT_*) and hands them to bench_opt().
 */
#define BENCH_MAX_SIZES	8

struct bench_opts {
	size_t sizes[BENCH_MAX_SIZES];	/* --n, repeated */
	unsigned int nsizes;
	unsigned int runs;		/* --runs */
	unsigned int warmup;		/* --warmup */
	uint64_t seed;			/* --seed */
	bool markdown;			/* --markdown */
	bool raw;			/* --raw */
};

#define BENCH_OPT_N		{ "n", required_argument, NULL, 'n' }
#define BENCH_OPT_RUNS		{ "runs", required_argument, NULL, 'r' }
#define BENCH_OPT_WARMUP	{ "warmup", required_argument, NULL, 'w' }
#define BENCH_OPT_SEED		{ "seed", required_argument, NULL, 's' }
#define BENCH_OPT_MARKDOWN	{ "markdown", no_argument, NULL, 'm' }
#define BENCH_OPT_RAW		{ "raw", no_argument, NULL, 'R' }
#define BENCH_OPT_HELP		{ "help", no_argument, NULL, 'h' }

/* Starts parsing the options of @mode: messages say "kairos-bench MODE". */
void bench_opt_start(const char *mode);

/*
 * Takes option @c into @o if it is one of BENCH_OPT_* (--n within
 * [@min_n, @max_n]); exits 2 on a bad value.  Return: whether it was.
 */
bool bench_opt(int c, struct bench_opts *o, size_t min_n, size_t max_n);

/* After the options: a warning on stdout when built without optimization. */
static inline void bench_warn_unoptimized(void)
{
#ifndef __OPTIMIZE__
	printf("%s: warning: built without optimization; numbers are not representative\n\n",
	       opt_prog);
#endif
}

/* The process: CPU of all its threads, resident memory, and quiet. */
uint64_t bench_cpu_ns(void);
uint64_t bench_rss_bytes(void);
void bench_sleep_ns(uint64_t ns);
/*
 * Waits until the process is quiet: under 1 ms of CPU (all threads) over
 * 5 ms of sleep, so a service has filed what it was sent and returned what
 * was retired.  Gives up at @give_up (bench_settle: 3 s from now).
 */
void bench_settle_until(uint64_t give_up);
void bench_settle(void);

/* One thread of this process and the CPU time it has had. */
struct bench_task_cpu {
	int tid;
	uint64_t ns;	/* on-CPU time, /proc/self/task/TID/schedstat */
};

/*
 * The threads of this process whose name begins with @prefix, at most @max
 * of them into @out, and how many there were.  Dies when /proc cannot be
 * read; a thread that exits while being read is left out.
 */
size_t bench_task_cpu(const char *prefix, struct bench_task_cpu *out, size_t max);

/* The CPU model, the CPUs online and the kernel release, on one line. */
void bench_machine(char *buf, size_t len);

/*
 * One status line on stderr, rewritten in place and cut to the terminal's
 * width; nothing unless stderr is a terminal.
 */
__attribute__((format(printf, 1, 2)))
void bench_progress(const char *fmt, ...);
void bench_progress_done(void);

/* qsort() comparison of two int64_t. */
int bench_cmp_i64(const void *a, const void *b);

/* How a row's per-run samples become the one number in its table. */
enum bench_agg {
	BENCH_MEDIAN,
	BENCH_MAX,	/* the worst run: lateness max, idle wake-ups */
	BENCH_SUM,	/* over all runs: early counts */
};

/*
 * Aggregates @runs samples, the first at @first and each next @stride
 * doubles on (a column of a [run][...] array); the samples are left as
 * they were.
 */
double bench_aggregate(enum bench_agg how, const double *first, size_t stride,
		       unsigned int runs);

/*
 * --raw: the samples bench_aggregate() would take, each as " %*.*f" of
 * the sample over @div, then a newline.
 */
void bench_raw_runs(const double *first, size_t stride, unsigned int runs, int width,
		    int prec, double div);

/*
 * Run @run of a size: the warm-ups are -warmup .. -1, the timed runs 0 ..
 * runs - 1.  Each (seed, N, run) draws its own stream, the warm-ups other
 * streams than the runs'.
 */
struct bench_run {
	unsigned int idx;	/* 0-based among the warm-ups, or among the runs */
	uint64_t seed;		/* its stream */
	char label[48];		/* "warm-up 1/1", "run 2/5" */
};

struct bench_run bench_run_at(int run, unsigned int warmup, unsigned int runs, uint64_t seed,
			      size_t n);

/*
 * A table, as text or as markdown.  @fmt is a text row without its
 * newline, one %s per cell ("%-24s %10s  %-9s %s"); in markdown a row is
 * "| a | b |".
 */
struct bench_table {
	bool markdown;
	const char *fmt;
};

/* "kairos-bench MODE: " and @fmt, on one line; markdown: in bold, then a blank line. */
__attribute__((format(printf, 2, 3)))
void bench_title(const struct bench_table *t, const char *fmt, ...);

/* A row of cells; a @head row is followed, in markdown, by the alignment row. */
void bench_row(const struct bench_table *t, const char *const *cells, bool head);

/*
 * A goal cell: "<= 40 met", "<= 40 MISSED", or "-" when @judged is false or
 * there is no goal (@goal <= 0).
 */
void bench_goal_le(char *buf, size_t len, double goal, double value, bool judged);

#endif /* KAIROS_BENCH_H */
