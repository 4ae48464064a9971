/* SPDX-License-Identifier: MIT */
/*
 * plot.h - what the tools that draw with gnuplot share.
 */
#ifndef KAIROS_TOOLS_PLOT_H
#define KAIROS_TOOLS_PLOT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Whether gnuplot is in $PATH. */
static inline bool plot_have_gnuplot(void)
{
	return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* Writes @s as a gnuplot single-quoted string, where a quote is written twice. */
static inline void plot_quote(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

#endif /* KAIROS_TOOLS_PLOT_H */
