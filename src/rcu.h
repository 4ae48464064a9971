/* SPDX-License-Identifier: MIT */
/*
 * rcu.h - liburcu's bulletproof flavour, with its read side inlined.
 *
 * Builds with UBSan (-Db_sanitize=...,undefined) call the library's
 * out-of-line read-side functions instead: liburcu 0.13's inline read side
 * touches its reader struct at an alignment below the one it declares, so
 * UBSan would report (and lock its own runtime for) every read lock, and a
 * child forked while another thread held that lock would hang in it.
 */
#ifndef KAIROS_RCU_H
#define KAIROS_RCU_H

#ifndef KAIROS_URCU_CALLS
#define _LGPL_SOURCE
#endif
#include <urcu-bp.h>

#endif /* KAIROS_RCU_H */
