/* SPDX-License-Identifier: MIT */
/*
 * plot.h - what the tools that draw with gnuplot share.
 */
#ifndef KAIROS_TOOLS_PLOT_H
#define KAIROS_TOOLS_PLOT_H

#include <stdio.h>

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
