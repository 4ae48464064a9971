/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the service clock: a system clock (CLOCK_MONOTONIC or
 * CLOCK_BOOTTIME), or the manual clock of KAIROS_CLOCK_MANUAL, which only
 * kairos_clock_advance() moves.
 *
 * The manual clock.  A service on it reads no system clock for its timers
 * and has no timerfd: its shards sleep until something is posted to them,
 * and every post wakes a sleeping shard (shard.c).  kairos_clock_advance()
 * stores the new time, wakes every shard, and then waits until the service
 * is settled:
 *   - every shard has run a pass at the newest time (manual_seen), sleeps
 *     (sleep_tick != 0) and has nothing on its inbox: whatever was due by
 *     then has been fired, its inline callbacks have returned, and its
 *     queue expiries are on their queues' lists (their fds readable) or
 *     posted to their rings;
 *   - no run handed to a shard's workers is queued or running
 *     (runs_done == runs_pushed), so every worker callback has returned,
 *     and a periodic timer it delivered is back on its shard's inbox.
 * A callback may arm, reset or cancel (or advance the clock again) while it
 * runs; what that makes due is fired before the wait ends, because the
 * wait looks for all of the above at once.
 *
 * The look is a scan of every shard, not one atomic snapshot, so the
 * service's event count (ev_seq) closes the gap.  Every shard or worker
 * that goes quiet bumps the count BEFORE the store that makes it look
 * quiet (clock_quiet_mark()) and AFTER it (service_event(), which also
 * wakes the waiter).  A scan that found everything quiet counts only if
 * the count did not move between its start and its end: anything that
 * went quiet during the scan, after having made work for a shard the scan
 * had already passed, moved the count first.  The bump after the store
 * is the one a sleeping waiter needs: a waiter that read the count after
 * the first bump and saw the old state sleeps until the second.
 *
 * The waiting thread holds no lock and sleeps outside any read-side
 * section, on the service header's event count, which outlives the service
 * (internal.h); a destroy during the wait ends it with -ESHUTDOWN.
 */
#include "rcu.h"

#include <errno.h>

#include "clock.h"

#include "internal.h"

void clock_failed(int err)
{
	kairos_die_err("clock_gettime", err);
}

void clock_quiet_mark(struct kairos *k)
{
	/* seq_cst: before the store that makes the caller look quiet (see above). */
	atomic_fetch_add_explicit(&k->ev_seq, 1, memory_order_seq_cst);
}

/*
 * Whether shard @s of a manual service has expired at @now and has nothing
 * left to do.  Called inside the read-side section.  The order of the loads
 * matters: manual_seen is stored after sleep_tick is cleared at the top of
 * a pass, so a sleep_tick seen set after it is the store that ended that
 * pass, or a later one; and the pass's runs were counted before that store.
 */
static bool shard_settled(struct shard *s, uint64_t now)
{
	uint64_t pushed;

	if (atomic_load_explicit(&s->manual_seen, memory_order_seq_cst) < now)
		return false;
	if (!atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst))
		return false;
	if (atomic_load_explicit(&s->inbox, memory_order_seq_cst))
		return false;
	pushed = atomic_load_explicit(&s->dq.runs_pushed, memory_order_seq_cst);
	return atomic_load_explicit(&s->dq.runs_done, memory_order_seq_cst) == pushed;
}

/* Waits until @k is settled at its newest time (see above); 0 or -ESHUTDOWN. */
static int clock_settle(struct kairos *k)
{
	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);
		bool settled = true;
		uint64_t now;

		if (service_enter(k))
			return -ESHUTDOWN;
		now = atomic_load_explicit(&k->manual_now, memory_order_seq_cst);
		for (unsigned i = 0; i < k->nshards && settled; i++)
			settled = shard_settled(k->shards[i], now);
		rcu_tsan_section_end(k);
		service_leave();
		if (!settled)
			futex_wait32(&k->ev_seq, seq);
		else if (atomic_load_explicit(&k->ev_seq, memory_order_seq_cst) == seq)
			return 0;
	}
}

KAIROS_EXPORT int kairos_clock_advance(struct kairos *k, uint64_t ns)
{
	uint64_t now, to;
	int rc;

	if (!k)
		return -EINVAL;
	rc = service_enter(k);
	if (rc)
		return rc;
	if (!service_manual(k)) {
		rc = -EINVAL;
		goto out;
	}
	now = atomic_load_explicit(&k->manual_now, memory_order_relaxed);
	do {
		if (clock_add_overflows(now, ns, &to)) {
			rc = -EOVERFLOW;
			goto out;
		}
		/*
		 * seq_cst: a shard that is woken below, or that the waiter
		 * finds quiet, reads this time or a later one; release pairs
		 * with service_now()'s acquire.
		 */
	} while (!atomic_compare_exchange_weak_explicit(&k->manual_now, &now, to,
							memory_order_seq_cst,
							memory_order_relaxed));
	for (unsigned i = 0; i < k->nshards; i++)
		shard_wake(k->shards[i]);
	/* An advance that waits (an enclosing one, from a callback) looks again. */
	service_event(k);
out:
	rcu_tsan_section_end(k);
	service_leave();
	/*
	 * From a callback of @k the wait could be for this very callback (its
	 * worker's run, or its shard's pass): the time moves, the shards are
	 * woken, and whoever waits (an enclosing advance) waits for the rest.
	 */
	if (rc || tls_service == k)
		return rc;
	return clock_settle(k);
}
