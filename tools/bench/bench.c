/* SPDX-License-Identifier: MIT */
/*
 * bench.c - helpers shared by every mode of kairos-bench; see bench.h.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "term.h"

void bench_die_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "kairos-bench: %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/*
 * The memset, rather than calloc(), is the point: it faults every page in
 * now, so that no timed loop pays for the kernel handing out fresh pages.
 */
void *bench_alloc(size_t size)
{
	size_t rounded = (size + BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN;
	void *p;

	if (rounded == 0)
		rounded = BENCH_ALIGN;
	/* rounded < size: the rounding wrapped around. */
	p = rounded < size ? NULL : aligned_alloc(BENCH_ALIGN, rounded);
	if (!p) {
		fprintf(stderr, "kairos-bench: cannot allocate %zu bytes\n", size);
		exit(1);
	}
	memset(p, 0, rounded);
	return p;
}

void *bench_map(size_t size)
{
	void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		bench_die("cannot map %zu bytes: %s", size, strerror(errno));
	return p;
}

void bench_unmap(void *p, size_t size)
{
	if (munmap(p, size ? size : 1) != 0)
		bench_die("munmap: %s", strerror(errno));
}

void rng_permutation(struct rng *r, uint32_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		v[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0 && n > 1; i--) {
		size_t j = rng_below(r, (uint32_t)(i + 1));
		uint32_t x = v[i];

		v[i] = v[j];
		v[j] = x;
	}
}

void bench_opt_start(const char *mode)
{
	static char prog[32];

	snprintf(prog, sizeof(prog), "kairos-bench %s", mode);
	opt_prog = prog;
	optind = 1;
}

bool bench_opt(int c, struct bench_opts *o, size_t min_n, size_t max_n)
{
	switch (c) {
	case 'n':
		if (o->nsizes == BENCH_MAX_SIZES)
			opt_fail("--n", "more than %d sizes", BENCH_MAX_SIZES);
		o->sizes[o->nsizes++] = opt_u64("--n", optarg, min_n, max_n);
		return true;
	case 'r':
		o->runs = (unsigned int)opt_u64("--runs", optarg, 1, 1000);
		return true;
	case 'w':
		o->warmup = (unsigned int)opt_u64("--warmup", optarg, 0, 1000);
		return true;
	case 's':
		o->seed = opt_seed("--seed", optarg);
		return true;
	case 'm':
		o->markdown = true;
		return true;
	case 'R':
		o->raw = true;
		return true;
	}
	return false;
}

void bench_progress(const char *fmt, ...)
{
	char line[256];
	const char *field = line;
	va_list ap;

	if (!isatty(STDERR_FILENO))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	term_progress(stderr, &field, 1);
}

void bench_progress_done(void)
{
	if (isatty(STDERR_FILENO))
		term_progress_clear(stderr);
}

static int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int bench_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

void bench_goal_le(char *buf, size_t len, double goal, double value, bool judged)
{
	if (goal <= 0 || !judged)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "<= %.0f %s", goal, value <= goal ? "met" : "MISSED");
}

uint64_t bench_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		bench_die("getrusage failed");
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

uint64_t bench_rss_bytes(void)
{
	unsigned long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		bench_die("cannot open /proc/self/statm");
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		bench_die("cannot read /proc/self/statm");
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The first line of /proc/self/task/@tid/@what into @buf, or false. */
static bool task_read(const char *tid, const char *what, char *buf, size_t len)
{
	char path[300];
	FILE *f;
	bool ok;

	snprintf(path, sizeof(path), "/proc/self/task/%s/%s", tid, what);
	f = fopen(path, "r");
	if (!f)
		return false;
	ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	return ok;
}

size_t bench_task_cpu(const char *prefix, struct bench_task_cpu *out, size_t max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	size_t n = 0, plen = strlen(prefix);

	if (!d)
		bench_die("cannot open /proc/self/task: %s", strerror(errno));
	while ((e = readdir(d)) != NULL) {
		char comm[64], stat[128];
		unsigned long long ns;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		if (!task_read(e->d_name, "comm", comm, sizeof(comm)) ||
		    strncmp(comm, prefix, plen) != 0)
			continue;
		if (!task_read(e->d_name, "schedstat", stat, sizeof(stat)))
			continue;	/* it exited */
		if (sscanf(stat, "%llu", &ns) != 1)
			bench_die("cannot read /proc/self/task/%s/schedstat", e->d_name);
		if (n < max)
			out[n] = (struct bench_task_cpu){ atoi(e->d_name), (uint64_t)ns };
		n++;
	}
	closedir(d);
	return n;
}

void bench_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void bench_settle_until(uint64_t give_up)
{
	for (;;) {
		uint64_t c0 = bench_cpu_ns(), c1;

		bench_sleep_ns(5000000u);
		c1 = bench_cpu_ns();
		if (c1 - c0 < 1000000u || bench_now_ns() + 5000000u > give_up)
			return;
	}
}

void bench_settle(void)
{
	bench_settle_until(bench_now_ns() + 3000000000u);
}

double bench_aggregate(enum bench_agg how, const double *first, size_t stride,
		       unsigned int runs)
{
	double *v, x = 0;

	switch (how) {
	case BENCH_MAX:
		for (unsigned int i = 0; i < runs; i++)
			x = i == 0 || first[i * stride] > x ? first[i * stride] : x;
		return x;
	case BENCH_SUM:
		for (unsigned int i = 0; i < runs; i++)
			x += first[i * stride];
		return x;
	default:
		/* The median, of a sorted copy. */
		v = bench_alloc(runs * sizeof(*v));
		for (unsigned int i = 0; i < runs; i++)
			v[i] = first[i * stride];
		qsort(v, runs, sizeof(*v), bench_cmp_double);
		x = runs % 2 ? v[runs / 2] : (v[runs / 2 - 1] + v[runs / 2]) / 2;
		free(v);
		return x;
	}
}

void bench_raw_runs(const double *first, size_t stride, unsigned int runs, int width,
		    int prec, double div)
{
	for (unsigned int i = 0; i < runs; i++)
		printf(" %*.*f", width, prec, first[i * stride] / div);
	printf("\n");
}

struct bench_run bench_run_at(int run, unsigned int warmup, unsigned int runs, uint64_t seed,
			      size_t n)
{
	struct bench_run r = { .idx = run < 0 ? (unsigned int)(run + (int)warmup)
						 : (unsigned int)run };

	snprintf(r.label, sizeof(r.label), "%s %u/%u", run < 0 ? "warm-up" : "run", r.idx + 1,
		 run < 0 ? warmup : runs);
	r.seed = rng_next(&(struct rng){ seed }) ^ ((uint64_t)n << 20) ^
		 (run < 0 ? UINT32_MAX - r.idx : r.idx);
	return r;
}

void bench_title(const struct bench_table *t, const char *fmt, ...)
{
	va_list ap;

	printf(t->markdown ? "**%s**: " : "%s: ", opt_prog);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(t->markdown ? "\n\n" : "\n");
}

void bench_row(const struct bench_table *t, const char *const *cells, bool head)
{
	const char *p = t->fmt;
	unsigned int i = 0;

	if (t->markdown)
		putchar('|');
	while (*p) {
		bool left = p[0] == '%' && p[1] == '-';
		char *end;
		long width;

		if (*p != '%') {
			if (!t->markdown)
				putchar(*p);
			p++;
			continue;
		}
		width = strtol(p + 1 + left, &end, 10);
		p = end + 1;	/* past the 's' */
		if (t->markdown)
			printf(" %s |", cells[i++]);
		else
			printf("%*s", (int)(left ? -width : width), cells[i++]);
	}
	printf("\n");
	if (head && t->markdown) {
		/* The alignment row: a cell with a width but no '-' is right-aligned. */
		putchar('|');
		for (p = t->fmt; (p = strchr(p, '%')); p++)
			printf("%s|", p[1] >= '1' && p[1] <= '9' ? "---:" : "---");
		printf("\n");
	}
}

void bench_machine(char *buf, size_t len)
{
	char line[256], model[128] = "?";
	struct utsname u;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char *c = strchr(line, ':');

			if (!strncmp(line, "model name", 10) && c) {
				snprintf(model, sizeof(model), "%s", c + 2);
				model[strcspn(model, "\n")] = '\0';
				break;
			}
		}
		fclose(f);
	}
	if (uname(&u) != 0)
		snprintf(u.release, sizeof(u.release), "?");
	snprintf(buf, len, "%s, %ld CPUs online, Linux %s", model, sysconf(_SC_NPROCESSORS_ONLN),
		 u.release);
}
