/* SPDX-License-Identifier: MIT */
/*
 * term.c - the progress line; see term.h.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "term.h"

unsigned term_columns(int fd)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");
	long v;

	if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	v = env ? strtol(env, NULL, 10) : 0;
	return v > 0 && v < 10000 ? (unsigned)v : 80;
}

void term_progress(FILE *f, const char *const *fields, unsigned n)
{
	/* The last column stays empty: some terminals wrap on writing it. */
	size_t room = term_columns(fileno(f)) - 1, used = 0;

	/* Carriage return and erase-line: one status line, rewritten. */
	fputs("\r\033[K", f);
	for (unsigned i = 0; i < n; i++) {
		size_t len = strlen(fields[i]), sep = i ? 2 : 0;

		if (used + sep + len > room) {
			if (i == 0)
				fprintf(f, "%.*s", (int)room, fields[0]);
			break;
		}
		fprintf(f, "%s%s", sep ? "  " : "", fields[i]);
		used += sep + len;
	}
	fflush(f);
}

void term_progress_clear(FILE *f)
{
	fputs("\r\033[K", f);
	fflush(f);
}
