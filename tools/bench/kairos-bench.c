/* SPDX-License-Identifier: MIT */
/*
 * kairos-bench - benchmarks for kairos.  Each mode lives in a file of its
 * own (bench.h names them) and is reached only through the mode table below,
 * so that modes never touch each other; what they share is in bench.c.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

struct bench_mode {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);	/* argv[0] is the mode's name */
};

static const struct bench_mode bench_modes[] = {
	{ "wheel", "the timing wheel against a binary heap (one thread, virtual time)",
	  wb_main },
	{ "service", "the kairos service: API costs, expiry, lateness, memory, CPU, wake-ups",
	  sb_main },
	{ "keys", "keyed timers beside the id path: arm, push-later, cancel, bytes", sk_main },
	{ "peer", "kairos against libev, libuv, libevent and one timerfd per timer", pb_main },
	{ "scale", "caller threads on one kairos service, and on one locked heap", sc_main },
};

#define BENCH_NMODES	(sizeof(bench_modes) / sizeof(bench_modes[0]))

static void bench_usage(FILE *f)
{
	fprintf(f, "usage: kairos-bench <mode> [options]\n"
		   "       kairos-bench <mode> --help\n\nmodes:\n");
	for (size_t i = 0; i < BENCH_NMODES; i++)
		fprintf(f, "  %-8s %s\n", bench_modes[i].name, bench_modes[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		bench_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		bench_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < BENCH_NMODES; i++)
		if (!strcmp(argv[1], bench_modes[i].name))
			return bench_modes[i].run(argc - 1, argv + 1);
	fprintf(stderr, "kairos-bench: unknown mode '%s' (see --help)\n", argv[1]);
	return 2;
}
