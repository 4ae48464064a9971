/* SPDX-License-Identifier: MIT */
/*
 * opt.h - the command line of every tool: getopt_long, and values checked
 * against their range.  A bad command line is one line on stderr that names
 * the option and what it accepts, and exit status 2:
 *
 *	kairos-stress: --threads: 0 is out of range (1..4096)
 */
#ifndef KAIROS_TOOLS_OPT_H
#define KAIROS_TOOLS_OPT_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#define OPT_EXIT_USAGE	2

/* The name every message starts with: "kairos-stress", "kairos-bench peer". */
extern const char *opt_prog;

/*
 * getopt_long(), with "unknown option" and "needs a value" reported in one
 * line (exit 2).  --opt=value and --opt value both work.  Return: the
 * option's value in @longopts (or its short letter), or -1 at the end;
 * then any operand left is an error too.
 */
int opt_next(int argc, char **argv, const char *shortopts, const struct option *longopts);

/* "PROG: OPT: <message>" and exit 2. */
__attribute__((format(printf, 2, 3), noreturn))
void opt_fail(const char *opt, const char *fmt, ...);

/* A count in [@min, @max]: decimal, hexadecimal (0x...) or the form 1e6. */
uint64_t opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max);

/* A plain decimal number such as 0.25 (no sign, no exponent) in [@min, @max]. */
double opt_double(const char *opt, const char *s, double min, double max);

/*
 * A duration: a number and a unit (ns, us, ms, s, min), or a bare number
 * of @unit ns; in [@min, @max] ns.
 */
uint64_t opt_time(const char *opt, const char *s, uint64_t unit, uint64_t min, uint64_t max);

/* The index of @s in @names (@n of them); else lists them and exits 2. */
unsigned opt_choice(const char *opt, const char *s, const char *const *names, unsigned n);

/*
 * A seed: any 64-bit number, decimal or 0x..., as --json writes it (a
 * string, since a double cannot hold it).  opt_seed_str() writes the form
 * the tools print: "0x" and 16 hex digits.
 */
uint64_t opt_seed(const char *opt, const char *s);
void opt_seed_str(char buf[19], uint64_t seed);

/* A seed from the clock and the pid, for a run that names none. */
uint64_t opt_seed_clock(void);

/*
 * Opens @path for writing before the run, so that a path that cannot be
 * written fails at once (exit 2) and not after the run.  "-" is stdout.
 */
FILE *opt_open_out(const char *opt, const char *path);

#endif /* KAIROS_TOOLS_OPT_H */
