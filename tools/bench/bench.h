/* SPDX-License-Identifier: MIT */
/*
 * bench.h - helpers shared by every mode of kairos-bench: failing loudly,
 * the clock, memory, a seeded generator, argument parsing, progress lines,
 * medians, goal cells and the machine's line.  Definitions in bench.c; the
 * few called inside timed loops are inline here.
 *
 * Each mode lives in a file of its own (<mode>.c) and is reached only
 * through its entry point, listed in the mode table of kairos-bench.c.
 */
#ifndef KAIROS_BENCH_H
#define KAIROS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define BENCH_ALIGN	64	/* cache line: records start on one */

/* Mode entry points; @argv[0] is the mode's name. */
int wb_main(int argc, char **argv);	/* wheel.c */
int sb_main(int argc, char **argv);	/* service.c */
int sk_main(int argc, char **argv);	/* service.c: keyed timers */
int pb_main(int argc, char **argv);	/* peer.c */
int sc_main(int argc, char **argv);	/* scale.c */

/* Whether to print progress lines: only when stderr is a terminal. */
extern bool bench_progress_on;

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

/* splitmix64: tiny, fast, and good enough to drive a benchmark and a test. */
struct bench_rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct bench_rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/*
 * Uniform in [0, @bound) by multiply-shift: no division in the generators.
 * The bias, below @bound / 2^32 relative, is far under the noise.
 */
static inline uint32_t rng_below(struct bench_rng *r, uint32_t bound)
{
	return (uint32_t)(((rng_next(r) >> 32) * bound) >> 32);
}

/* Fills @v with a random permutation of 0 .. @n - 1 (Fisher-Yates). */
void rng_permutation(struct bench_rng *r, uint32_t *v, size_t n);

/*
 * Parses a decimal count, also in the form 1e6, into [@min, @max].
 * Return: 0, or -EINVAL (not a number) or -ERANGE (out of range).
 */
int bench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/*
 * Parses a plain decimal number such as 12.5 (no sign, no exponent, no
 * blanks) into [@min, @max].
 * Return: 0, or -EINVAL (not a number) or -ERANGE (out of range).
 */
int bench_parse_double(const char *s, double min, double max, double *out);

/*
 * Prints "kairos-bench MODE: " and the message, then @usage's text, on
 * stderr.  Return: 2, the exit status for bad usage.
 */
__attribute__((format(printf, 3, 4)))
int bench_bad_arg(const char *mode, void (*usage)(FILE *), const char *fmt, ...);

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

/* The CPU model, the CPUs online and the kernel release, on one line. */
void bench_machine(char *buf, size_t len);

/* One status line on stderr, rewritten in place; nothing unless a terminal. */
__attribute__((format(printf, 1, 2)))
void bench_progress(const char *fmt, ...);
void bench_progress_done(void);

/* Median of @n samples; sorts @v in place. */
double bench_median(double *v, size_t n);

/* How a row's per-run samples become the one number in its table. */
enum bench_agg {
	BENCH_MEDIAN,
	BENCH_MAX,	/* the worst run: lateness max, idle wake-ups */
	BENCH_SUM,	/* over all runs: early counts */
};

double bench_aggregate(enum bench_agg how, double *sample, unsigned int runs);

/*
 * A goal cell: "<= 40 met", "<= 40 MISSED", or "-" when @judged is false or
 * there is no goal (@goal <= 0).
 */
void bench_goal_le(char *buf, size_t len, double goal, double value, bool judged);

#endif /* KAIROS_BENCH_H */
