/* SPDX-License-Identifier: MIT */
/*
 * term.h - the progress line: one line on a terminal, rewritten in place,
 * that never wraps.
 */
#ifndef KAIROS_TOOLS_TERM_H
#define KAIROS_TOOLS_TERM_H

#include <stdbool.h>
#include <stdio.h>

/* The terminal's width: TIOCGWINSZ on @fd, else $COLUMNS, else 80. */
unsigned term_columns(int fd);

/*
 * Rewrites the progress line on @f (a terminal) with @fields, in order of
 * importance, separated by two blanks: those that do not fit in the width
 * are left out, and a first field too long for it is cut.
 */
void term_progress(FILE *f, const char *const *fields, unsigned n);

/* Erases the progress line. */
void term_progress_clear(FILE *f);

#endif /* KAIROS_TOOLS_TERM_H */
