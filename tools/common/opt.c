/* SPDX-License-Identifier: MIT */
/*
 * opt.c - the command line of every tool; see opt.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "opt.h"

const char *opt_prog = "kairos";

void opt_fail(const char *opt, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: %s%s", opt_prog, opt ? opt : "", opt ? ": " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(OPT_EXIT_USAGE);
}

int opt_next(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
	char spec[64];
	int c;

	/* A leading ':' tells a missing value (':') from an unknown option ('?'). */
	snprintf(spec, sizeof(spec), ":%s", shortopts);
	opterr = 0;
	c = getopt_long(argc, argv, spec, longopts, NULL);
	if (c == ':')
		opt_fail(argv[optind - 1], "needs a value");
	if (c == '?') {
		if (strncmp(argv[optind - 1], "--", 2) && optopt > 0 && optopt < 256)
			opt_fail(NULL, "unknown option '-%c' (see --help)", optopt);
		opt_fail(NULL, "unknown option '%s' (see --help)", argv[optind - 1]);
	}
	if (c == -1 && optind < argc)
		opt_fail(NULL, "unexpected argument '%s'", argv[optind]);
	return c;
}

/* @v, a count, as the range bounds are printed: UINT64_MAX as 2^64-1. */
static const char *u64_str(char *buf, size_t len, uint64_t v)
{
	if (v == UINT64_MAX)
		snprintf(buf, len, "2^64-1");
	else
		snprintf(buf, len, "%" PRIu64, v);
	return buf;
}

uint64_t opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	char lo[24], hi[24], *end;
	unsigned long long v, e;

	/* strtoull() would take blanks and a minus sign. */
	if (*s < '0' || *s > '9')
		opt_fail(opt, "'%s' is not a number", s);
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		goto range;
	if ((*end == 'e' || *end == 'E') && strncmp(s, "0x", 2)) {
		if (end[1] < '0' || end[1] > '9')
			opt_fail(opt, "'%s' is not a number", s);
		e = strtoull(end + 1, &end, 10);
		if (e > 19)
			goto range;
		while (e--) {
			if (v > UINT64_MAX / 10)
				goto range;
			v *= 10;
		}
	}
	if (*end)
		opt_fail(opt, "'%s' is not a number", s);
	if (v >= min && v <= max)
		return v;
range:
	opt_fail(opt, "%s is out of range (%s..%s)", s, u64_str(lo, sizeof(lo), min),
		 u64_str(hi, sizeof(hi), max));
}

double opt_double(const char *opt, const char *s, double min, double max)
{
	const char *p = s;
	char *end;
	double v;

	/* strtod() would take blanks, signs, hex, exponents, "inf" and "nan". */
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '.')
		p++;
	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s || *p || !strcmp(s, "."))
		opt_fail(opt, "'%s' is not a number", s);
	v = strtod(s, &end);
	if (v < min || v > max)
		opt_fail(opt, "%s is out of range (%g..%g)", s, min, max);
	return v;
}

static const struct {
	const char *name;
	uint64_t ns;
} time_units[] = {
	{ "min", 60000000000u }, { "s", 1000000000u }, { "ms", 1000000 }, { "us", 1000 },
	{ "ns", 1 },
};

#define NUNITS	(sizeof(time_units) / sizeof(time_units[0]))

/* @ns in the largest unit that holds it whole: "500ms", "2min". */
static const char *time_str(char *buf, size_t len, uint64_t ns)
{
	for (size_t i = 0; i < NUNITS; i++) {
		if (ns % time_units[i].ns == 0 || i == NUNITS - 1) {
			snprintf(buf, len, "%" PRIu64 "%s", ns / time_units[i].ns,
				 time_units[i].name);
			break;
		}
	}
	return buf;
}

uint64_t opt_time(const char *opt, const char *s, uint64_t unit, uint64_t min, uint64_t max)
{
	char lo[32], hi[32], *end;
	double v;

	if ((*s < '0' || *s > '9') && *s != '.')
		opt_fail(opt, "'%s' is not a duration", s);
	v = strtod(s, &end);
	if (end == s || !isfinite(v))
		opt_fail(opt, "'%s' is not a duration", s);
	if (*end) {
		unit = 0;
		for (size_t i = 0; i < NUNITS; i++)
			if (!strcmp(end, time_units[i].name))
				unit = time_units[i].ns;
		if (!unit)
			opt_fail(opt, "'%s' is not a duration (units: ns, us, ms, s, min)", s);
	}
	v *= (double)unit;
	if (v < (double)min || v > (double)max)
		opt_fail(opt, "%s is out of range (%s..%s)", s, time_str(lo, sizeof(lo), min),
			 time_str(hi, sizeof(hi), max));
	return (uint64_t)llround(v);
}

unsigned opt_choice(const char *opt, const char *s, const char *const *names, unsigned n)
{
	char list[256] = "";
	size_t len = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!strcmp(s, names[i]))
			return i;
		len += (size_t)snprintf(list + len, len < sizeof(list) ? sizeof(list) - len : 0,
					"%s%s", i ? ", " : "", names[i]);
	}
	opt_fail(opt, "'%s' is not one of %s", s, list);
}

uint64_t opt_seed(const char *opt, const char *s)
{
	char *end;
	uint64_t v;

	if (*s < '0' || *s > '9')
		opt_fail(opt, "'%s' is not a seed (0..2^64-1, decimal or 0x...)", s);
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end)
		opt_fail(opt, "'%s' is not a seed (0..2^64-1, decimal or 0x...)", s);
	return v;
}

void opt_seed_str(char buf[19], uint64_t seed)
{
	snprintf(buf, 19, "0x%016" PRIx64, seed);
}

uint64_t opt_seed_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
	       ((uint64_t)getpid() << 32);
}

FILE *opt_open_out(const char *opt, const char *path)
{
	FILE *f;

	if (!strcmp(path, "-"))
		return stdout;
	f = fopen(path, "w");
	if (!f)
		opt_fail(opt, "cannot write %s: %s", path, strerror(errno));
	return f;
}
