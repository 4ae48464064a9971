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

#include "fault.h"

/*
 * What TSan cannot see of liburcu, said explicitly in TSan builds (other
 * builds compile these away):
 *  - Grace periods: everything a call did inside its read-side section
 *    (read a service's shards, write an eventfd) is ordered before
 *    kairos_destroy()'s teardown (frees, closes) only by synchronize_rcu(),
 *    where the calling thread was never joined.  Each call's section ends
 *    with rcu_tsan_call_end() (service_leave()), and destroy says
 *    rcu_tsan_calls_done() past its grace period; the bulletproof
 *    flavour's grace periods are the process's, and so is this address.
 *    The key table's lookups and inserts read nodes that the reclaimer
 *    frees past its own grace period: they end with
 *    tsan_key_reads_done(k), and the frees come after
 *    tsan_key_grace_done(k) (key.c, table.c), on an address of their own,
 *    so that nothing else of theirs looks ordered before the reclaimer.
 *  - liburcu-cds is not built with TSan: cds_lfht_add_unique() and
 *    cds_lfht_replace() (full barriers) publish a node's contents to the
 *    lookups that find it; tsan_published(node) and tsan_found(node) say
 *    so (key.c).  The same pair says that a thread's kept cancels, written
 *    inside its read-side sections, are the reclaimer's past the grace
 *    period of a take (table.c, thread.c).
 */
#ifdef __SANITIZE_THREAD__
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char rcu_tsan_calls __attribute__((visibility("hidden")));
#define rcu_tsan_call_end()	__tsan_release(&rcu_tsan_calls)
#define rcu_tsan_calls_done()	__tsan_acquire(&rcu_tsan_calls)
#define tsan_published(p)	__tsan_release(p)
#define tsan_found(p)		__tsan_acquire(p)
#define tsan_key_reads_done(k)	__tsan_release(&(k)->key_reads)
#define tsan_key_grace_done(k)	__tsan_acquire(&(k)->key_reads)
#else
#define rcu_tsan_call_end()	((void)0)
#define rcu_tsan_calls_done()	((void)0)
#define tsan_published(p)	((void)(p))
#define tsan_found(p)		((void)(p))
#define tsan_key_reads_done(k)	((void)(k))
#define tsan_key_grace_done(k)	((void)(k))
#endif

/*
 * rcu_might_sleep - marks a step that may sleep: a futex or condition wait,
 * a mapping, a large allocation.  No call sleeps inside a read-side section
 * (the bulletproof flavour's grace periods are process-wide, so one
 * sleeping reader holds back every service's reclamation).  With
 * fault_sleep_check set, as the test programs set it, such a step aborts
 * the process when it runs inside one, so every test checks the rule on
 * each path it takes; otherwise it is one relaxed load, on paths that are
 * about to sleep or map memory anyway.
 */
void rcu_sleep_in_section(const char *file, int line) __attribute__((noreturn, cold));
#define rcu_might_sleep()							\
	do {									\
		if (atomic_load_explicit(&fault_sleep_check, memory_order_relaxed) && \
		    rcu_read_ongoing())						\
			rcu_sleep_in_section(__FILE__, __LINE__);		\
	} while (0)

#endif /* KAIROS_RCU_H */
