/* SPDX-License-Identifier: MIT */
/*
 * timer.h - every transition of a record's state word, and nothing else.
 *
 * The word (internal.h) is gen:32 | ver:23 | flags:9; its low three bits are
 * the state.  Each function below is one transition; no other file writes
 * the word.  They are static inline because each sits on a call's hot path.
 *
 *  from            to                  thread        ordering    the record then
 *  --------------  ------------------  ------------  ----------  -------------------------------
 *  DONE/CANCELLED  FREE, gen + 1       allocator     relaxed     is the allocator's alone
 *                  (31 bits, never 0)
 *                                      (after a grace period: no reader still holds the old id)
 *  FREE            PENDING | QUEUED    arming        relaxed     is posted; the post's release
 *                                                                publishes the word and fields
 *                                                                (a keyed arm inserts its key
 *                                                                between the two: key.c)
 *  FREE            PENDING | FAR       arming        release     is filed by value: its arrival
 *                                                                entry's release publishes it
 *                                                                (and the word's own, to a shard
 *                                                                that reaches it through an
 *                                                                entry of an older life: wheel.h)
 *  PENDING | FAR   PENDING             shard         acq_rel     is claimed from its entry and
 *                                                                linked (timer_claim_far())
 *  PENDING | FAR   CANCELLED | QUEUED  canceller     acq_rel     is posted; the shard retires it
 *                                                                (its entries go stale)
 *  PENDING | FAR   CANCELLED           canceller     acq_rel     a thread of its shard: is kept
 *                                      (keep)                    by it and retired with its
 *                                                                bundle (table_keep()), or by
 *                                                                the reclaimer (thread.c)
 *  PENDING | QUEUED FREE               arming        relaxed     never posted, its id never
 *   (not posted)                                                 given: a keyed arm that found
 *                                                                its key held retires it
 *  PENDING         RESETTING           resetter      acquire     is held for one deadline store
 *  RESETTING       PENDING, ver + 1    resetter      release     is posted if earlier/periodic
 *                                                                (FAR kept when not posted, else
 *                                                                dropped: the post files it)
 *  FIRING (queue,  RESETTING           resetter      acquire     is held for one deadline store
 *   one-shot),                                                   (an expiry no one took yet)
 *   PARKED
 *  RESETTING       PARKED, ver + 1     resetter      release     stays on its queue's list
 *  PARKED          PENDING | QUEUED    drainer       acq_rel     is posted back to its shard
 *  PENDING         CANCELLED | QUEUED  canceller     acq_rel     is posted; the shard retires it
 *  FIRING, PARKED  CANCELLED           canceller     acq_rel     is retired by its worker or
 *                                                                its queue's drainer
 *  RUNNING         RUNNING | STOP      canceller     acq_rel     periodic: its worker ends it
 *  RUNNING         RUNNING | WAITERS   cancel_sync   acq_rel     its end bumps the event count
 *  any             QUEUED, REBASE off  shard         acq_rel     is filed in (or out of) the wheel
 *  PENDING         FIRING              shard         acq_rel     is delivered to a worker
 *  FIRING          RUNNING             worker        acquire     runs its callback (or is
 *                                      or drainer                taken from its queue)
 *  RUNNING         DONE                worker        acq_rel     is retired by the worker
 *  RUNNING | STOP  CANCELLED           worker        acq_rel     is retired by the worker
 *  RUNNING         FIRING              shard         acq_rel     a ring queue's post failed: it
 *                                                                waits on the queue's list
 *  RUNNING         PENDING | QUEUED    worker        acq_rel     periodic: is posted again
 *  PENDING/FIRING/ DONE                destroy       release     is retired by the drain
 *   PARKED
 *
 * "Worker" here means whichever thread delivers the record: a worker, the
 * shard (inline delivery, or a CQE posted into a ring queue's ring), or a
 * queue's drainer (queue.c).
 *
 * A cancel wins iff it moves PENDING or FIRING to CANCELLED; a callback runs
 * iff its worker moves FIRING to RUNNING.  Whoever wins a race reports it,
 * the loser backs off.  The version counts resets, so that no CAS made on a
 * word read before a reset succeeds; the generation counts reuses, so that
 * an id names one life of a record only.
 */
#ifndef KAIROS_TIMER_H
#define KAIROS_TIMER_H

#include <errno.h>

#include "internal.h"

/* DONE/CANCELLED -> FREE: a record leaves the pool with a new generation. */
static inline void timer_recycle(struct rec *r)
{
	uint32_t gen = (st_gen(atomic_load_explicit(&r->state, memory_order_relaxed)) + 1) & GEN_MASK;

	if (gen == 0)
		gen = 1;	/* no id is 0 */
	atomic_store_explicit(&r->state, (uint64_t)gen << 32 | ST_FREE, memory_order_relaxed);
}

/*
 * FREE -> PENDING | QUEUED (or FAR): arms a record that no one else can
 * reach through this life's id yet.  Returns its generation.  The caller
 * posts it, or files it by value; the post's (or the entry's) release
 * publishes this word and the fields stored before it.  The store is a
 * release too: the shard may reach the record first through a stale entry
 * of an older life whose low bits match this one (wheel.h), and its
 * acquire load of this word must then see the fields.  (A plain store on
 * x86-64.)
 */
static inline uint32_t timer_publish(struct rec *r, bool periodic, bool far)
{
	uint64_t st = atomic_load_explicit(&r->state, memory_order_relaxed);

	atomic_store_explicit(&r->state,
			      st_with(st, ST_PENDING) | (far ? ST_FAR : ST_QUEUED) |
			      (periodic ? ST_PERIODIC : 0),
			      memory_order_release);
	return st_gen(st);
}

/*
 * PENDING | FAR -> PENDING, by the shard, for the life @gen of @r: takes a
 * record filed by value into the wheel's lists.  *@old is the word last
 * read (acquire).  A resetter holds the record for a few instructions, and
 * a later deadline it stores posts nothing, so the claim waits it out
 * rather than give up.
 *
 * Return: whether it was claimed; false when the entry is stale (another
 * life, cancelled, or posted by an earlier reset).
 */
static inline bool timer_claim_far(struct rec *r, uint32_t gen, uint64_t *old)
{
	unsigned spins = 0;

	for (;;) {
		if (st_gen(*old) != gen || !(*old & ST_FAR))
			return false;
		if (st_of(*old) == ST_RESETTING) {
			cpu_relax_n(&spins);
			*old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		}
		if (st_of(*old) != ST_PENDING)
			kairos_die("record filed by value in an impossible state");
		if (atomic_compare_exchange_weak_explicit(&r->state, old, *old & ~ST_FAR,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return true;
	}
}

/*
 * PENDING | QUEUED -> FREE: takes back an arm whose record was never posted
 * and whose id no one was given (its key was held), so that no one else
 * can have seen the word.
 */
static inline void timer_unpublish(struct rec *r)
{
	uint64_t st = atomic_load_explicit(&r->state, memory_order_relaxed);

	atomic_store_explicit(&r->state, (st & ST_GEN_MASK) | ST_FREE, memory_order_relaxed);
}

/*
 * timer_cancel - PENDING (| FAR) -> CANCELLED | QUEUED, or FIRING ->
 * CANCELLED, for the life @gen of @r; *@old is the word last read (acquire)
 * on entry.  With @keep, PENDING | FAR -> CANCELLED: the caller retires the
 * record itself (table_keep()) and posts nothing.
 *
 * Return: 0 when this call cancelled it (*@old is then the word it
 * replaced); -EBUSY when its callback runs (*@seen is the word seen, with
 * ST_STOP set for a periodic timer, so that it does not start again);
 * -ENOENT when it has ended or @gen is over.
 */
static inline int timer_cancel(struct rec *r, uint32_t gen, uint64_t *old, uint64_t *seen,
				bool keep)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t want;

		if (st_gen(*old) != gen)
			return -ENOENT;
		/* The common case first: one test, not the switch's jump table. */
		if (__builtin_expect(st_of(*old) == ST_PENDING, 1)) {
			/*
			 * Posted, so that the shard unlinks it now, not when
			 * its slot comes; filed by value, it is in no list and
			 * the shard would only retire it (its entries go
			 * stale), so a caller that may keep it does.
			 */
			want = st_with(*old & ~ST_FAR, ST_CANCELLED);
			if (!keep || !(*old & ST_FAR))
				want |= ST_QUEUED;
		} else switch (st_of(*old)) {
		case ST_FIRING:
		case ST_PARKED:
			/*
			 * Expired, callback not started (or reset while waiting
			 * in a queue): its worker or drainer will retire it.
			 */
			want = st_with(*old, ST_CANCELLED);
			break;
		case ST_RESETTING:
			/* A resetter holds it for a few instructions. */
			cpu_relax_n(&spins);
			*old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		case ST_RUNNING:
			*seen = *old;
			if (!(*old & ST_PERIODIC) || (*old & ST_STOP))
				return -EBUSY;
			/* A periodic timer must not start again once this returns. */
			want = *old | ST_STOP;
			if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
								  memory_order_acq_rel,
								  memory_order_acquire)) {
				*seen = want;
				return -EBUSY;
			}
			continue;
		default:
			return -ENOENT;
		}
		if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return 0;
	}
}

/*
 * RUNNING -> RUNNING | WAITERS, for the life @gen of @r: whether its
 * callback still runs, with the bit set so that its end bumps the service's
 * event count.  *@seen is the word last read (acquire) on entry and out.
 */
static inline bool timer_wait_mark(struct rec *r, uint32_t gen, uint64_t *seen)
{
	while (st_gen(*seen) == gen && st_of(*seen) == ST_RUNNING) {
		if (*seen & ST_WAITERS)
			return true;
		if (atomic_compare_exchange_weak_explicit(&r->state, seen, *seen | ST_WAITERS,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return true;
	}
	return false;
}

/*
 * timer_reset_take - PENDING -> RESETTING for the life @gen of @r, so that
 * nothing fires it while the caller stores a deadline; *@old is the word
 * last read (acquire) on entry, the word held on success.  A one-shot timer
 * of a queue whose expiry waits there untaken (FIRING), or that was reset
 * there before (PARKED), is taken too, and *@parked says so: it goes back
 * PARKED, and the queue's drainer sends it to its shard.
 *
 * Return: 0, -EBUSY (a periodic timer that is firing or running), -ENOENT.
 */
static inline int timer_reset_take(struct rec *r, uint32_t gen, uint64_t *old, bool *parked)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t held;

		if (st_gen(*old) != gen)
			return -ENOENT;
		if (st_of(*old) == ST_RESETTING) {
			cpu_relax_n(&spins);
			*old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		}
		*parked = st_of(*old) == ST_PARKED ||
			  (st_of(*old) == ST_FIRING && rec_queue_no(r) && !(*old & ST_PERIODIC));
		if (st_of(*old) != ST_PENDING && !*parked)
			return (*old & ST_PERIODIC) &&
			       (st_of(*old) == ST_FIRING || st_of(*old) == ST_RUNNING)
				? -EBUSY : -ENOENT;
		held = st_with(*old, ST_RESETTING);
		if (atomic_compare_exchange_weak_explicit(&r->state, old, held,
							  memory_order_acquire,
							  memory_order_acquire)) {
			*old = held;
			return 0;
		}
	}
}

/*
 * RESETTING -> PENDING with the next version: gives back what
 * timer_reset_take() took (@held), QUEUED if the caller will post it (or a
 * post is still on its way), REBASE for a periodic timer whose period
 * restarts from the new deadline; PARKED instead of PENDING when it was
 * taken from a queue's list (@parked: never posted, never QUEUED).  The
 * shard may clear QUEUED meanwhile, hence the loop.  Returns the word
 * replaced: QUEUED in it means a post is already on its way.
 */
static inline uint64_t timer_reset_give(struct rec *r, uint64_t held, bool queue, bool rebase,
					bool parked)
{
	for (;;) {
		uint64_t want = st_with((held & ~ST_VER_MASK) | ((held + ST_VER_ONE) & ST_VER_MASK),
					parked ? ST_PARKED : ST_PENDING);

		/* A posted record is filed from its post: no longer by value. */
		if (queue)
			want = (want & ~ST_FAR) | ST_QUEUED;
		if (rebase)
			want |= ST_REBASE;
		/*
		 * Release: the deadline before the word that lets the shard
		 * read it.  seq_cst: a reset that leaves the post to a poster
		 * that made the record QUEUED (reset_rec()) then loads
		 * sleep_tick, in one order with that poster's push and its
		 * look at this word (shard_post_recheck()).  The same locked
		 * instruction on x86.
		 */
		if (atomic_compare_exchange_weak_explicit(&r->state, &held, want,
							  memory_order_seq_cst,
							  memory_order_relaxed))
			return held;
	}
}

/*
 * The shard takes a post: clears QUEUED and REBASE, whatever the state.
 * Returns the word before, which says what the post asks.
 */
static inline uint64_t timer_take_post(struct rec *r)
{
	return atomic_fetch_and_explicit(&r->state, ~(ST_QUEUED | ST_REBASE), memory_order_acq_rel);
}

/*
 * PENDING -> FIRING, by the shard, from the word *@old it read: fails (with
 * *@old the word now) after any reset, cancel or post since.
 */
static inline bool timer_fire(struct rec *r, uint64_t *old)
{
	return atomic_compare_exchange_strong_explicit(&r->state, old, st_with(*old, ST_FIRING),
						       memory_order_acq_rel, memory_order_acquire);
}

/* What a worker or a queue's drainer did with a delivered record (timer_claim()). */
enum claim { CLAIM_RUN, CLAIM_CANCELLED, CLAIM_UNPARKED };

/*
 * timer_claim - a worker or a queue's drainer meets delivered record @r:
 * FIRING -> RUNNING (CLAIM_RUN: run or take it), PARKED -> PENDING | QUEUED
 * (CLAIM_UNPARKED, queues only: the caller posts it to its shard), or
 * nothing (CLAIM_CANCELLED: a cancel ended it; the caller retires it).
 * With @ending (the service is going away) PARKED -> RUNNING too, so that
 * the caller ends it.  Waits out a resetter (queues only: a reset takes no
 * other FIRING record).  *@old is the word replaced.
 */
static inline enum claim timer_claim(struct rec *r, uint64_t *old, bool ending)
{
	unsigned spins = 0;

	*old = atomic_load_explicit(&r->state, memory_order_acquire);
	for (;;) {
		uint64_t want;

		switch (st_of(*old)) {
		case ST_CANCELLED:
			return CLAIM_CANCELLED;
		case ST_RESETTING:
			cpu_relax_n(&spins);
			*old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		case ST_FIRING:
			want = st_with(*old, ST_RUNNING);
			break;
		case ST_PARKED:
			want = ending ? st_with(*old, ST_RUNNING) : st_with(*old, ST_PENDING) | ST_QUEUED;
			break;
		default:
			kairos_die("delivered record in an impossible state");
		}
		/* Acquire: the callback sees everything done before the arm. */
		if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return st_of(want) == ST_RUNNING ? CLAIM_RUN : CLAIM_UNPARKED;
	}
}

/* RUNNING -> DONE, by its worker after a one-shot callback; returns the word replaced. */
static inline uint64_t timer_done(struct rec *r)
{
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);

	/* Release: the callback's effects before cancel_sync sees it ended. */
	return atomic_exchange_explicit(&r->state, st_with(old & ~ST_WAITERS, ST_DONE),
					memory_order_acq_rel);
}

/*
 * After a periodic callback, by its worker: RUNNING -> PENDING | QUEUED with
 * the deadline @tick (the caller then posts it), or, when a cancel set STOP
 * meanwhile, RUNNING | STOP -> CANCELLED.  Returns whether it is PENDING
 * again; *@old is the word replaced.
 */
static inline bool timer_rearm(struct rec *r, uint64_t tick, uint64_t *old)
{
	*old = atomic_load_explicit(&r->state, memory_order_acquire);
	for (;;) {
		uint64_t want;

		if (*old & ST_STOP) {
			want = st_with(*old & ~(ST_STOP | ST_WAITERS), ST_CANCELLED);
			if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
								  memory_order_acq_rel,
								  memory_order_acquire))
				return false;
			continue;
		}
		/* Only this thread writes the deadline of a RUNNING record. */
		__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
		want = st_with(*old & ~ST_WAITERS, ST_PENDING) | ST_QUEUED;
		/* Release: the deadline before the record is PENDING again. */
		if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return true;
	}
}

/*
 * timer_unrun - a delivery that did not happen (a ring queue's CQE could not
 * be posted): RUNNING -> FIRING, so that the expiry waits on its queue's
 * list and stays cancellable; or, when a cancel stopped a periodic timer
 * meanwhile, RUNNING | STOP -> CANCELLED.  Returns whether it is FIRING
 * again; *@old is the word replaced (WAITERS in it: wake them).
 */
static inline bool timer_unrun(struct rec *r, uint64_t *old)
{
	*old = atomic_load_explicit(&r->state, memory_order_acquire);
	for (;;) {
		bool stopped = *old & ST_STOP;
		uint64_t want = stopped ? st_with(*old & ~(ST_STOP | ST_WAITERS), ST_CANCELLED)
					: st_with(*old & ~ST_WAITERS, ST_FIRING);

		if (atomic_compare_exchange_weak_explicit(&r->state, old, want,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return !stopped;
	}
}

/*
 * PENDING/FIRING -> DONE, at destroy, once no thread but the caller touches
 * the service.  @old is the word the caller read.
 */
static inline void timer_drain(struct rec *r, uint64_t old)
{
	atomic_store_explicit(&r->state, st_with(old & ~ST_QUEUED, ST_DONE), memory_order_release);
}

#endif /* KAIROS_TIMER_H */
