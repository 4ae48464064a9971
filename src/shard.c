/* SPDX-License-Identifier: MIT */
/*
 * shard.c - one shard: its thread, wheel, inbox, timerfd and expiry.
 *
 * The loop, once per wake-up:
 *   1. mark itself awake (sleep_tick = 0: posters need not wake it);
 *   2. take the whole inbox and make the wheel agree with each record;
 *   3. read the clock once, advance the wheel, hand due records to workers;
 *   4. arm the timerfd (absolute time) if the next visit moved earlier;
 *   5. publish the tick it sleeps until, look at the inbox once more, and
 *      block in the backend until the timerfd or the wake eventfd fires.
 * A posted deadline earlier than sleep_tick wakes the shard through its
 * eventfd; all others wait for the next pass.  Nothing is polled on a
 * schedule: a shard with nothing pending sleeps until its timerfd's last
 * setting (never moved later, so a cancelled last timer costs one stale
 * wake), for SHARD_FLUSH_NS after a pass that took posts, and every
 * ARRIVAL_POLL_TICKS while an arrival block is not dormant.
 *
 * A shard of a manual-clock service (KAIROS_CLOCK_MANUAL) has no timerfd:
 * it sleeps until posted to, every post wakes it (SLEEP_FAR always), and
 * kairos_clock_advance() wakes it when the time moves.  It publishes the
 * time of each pass and tells the advancing thread when it goes quiet
 * (clock.c).
 */
#include "rcu.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "internal.h"
#include "mapping.h"
#include "timer.h"

static struct rec *rec_of(struct wheel_timer *t)
{
	return (struct rec *)(void *)t;	/* wt is the first member */
}

kairos_id shard_rec_id(struct shard *s, struct rec *r, uint64_t state)
{
	return id_make(st_gen(state), s->index, table_index(s, r),
		       slack_fast(s->k, __atomic_load_n(&r->wt.slack, __ATOMIC_RELAXED)));
}

/*
 * shard_post - puts @r on @s's inbox and wakes @s if @tick is earlier than
 * the tick it sleeps until, or if it sleeps far (SLEEP_FAR).  Call inside
 * a read-side section, or from a worker of @s (workers are joined before
 * the shard is freed).
 *
 * Return: true when @s is SHARD_POST_LIMIT posts behind and the caller is not
 * a shard thread.  Without a bound, threads that outnumber the cores can post
 * faster than a shard thread gets CPU to drain, and every record they arm
 * and cancel stays out of the pool: memory grows until arms fail.  An arm
 * that hears true waits a little, outside its read-side section (see
 * kairos.c); nothing else waits, and a shard thread never does: two shards
 * whose inline callbacks post to each other would wait for each other.
 */
static inline __attribute__((always_inline)) bool
post(struct shard *s, struct rec *r, uint64_t tick, bool recheck)
{
	struct rec *old = atomic_load_explicit(&s->inbox, memory_order_relaxed);
	uint64_t sleep;

	do {
		rec_link_set(r, old);
		/* Release: the record's fields before it is visible on the inbox. */
	} while (!atomic_compare_exchange_weak_explicit(&s->inbox, &old, r,
							memory_order_seq_cst,
							memory_order_relaxed));
	/*
	 * seq_cst on the push and on this load pairs with the shard's seq_cst
	 * store of sleep_tick and its load of the inbox: either the shard sees
	 * this record before it sleeps, or this thread sees the tick it sleeps
	 * until and wakes it.
	 */
	sleep = atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst);
	if (recheck) {
		/*
		 * A reset that moved the deadline earlier since this poster
		 * made the record QUEUED left the post to it (kairos.c,
		 * reset_rec()), and woke nobody if it found the shard mid-pass.
		 * The seq_cst load of the state pairs with that reset's seq_cst
		 * give and its load of sleep_tick: either this sees its
		 * version, and with it the deadline it stored before, or it
		 * sees the tick the shard sleeps until.  A deadline read from a
		 * record the shard has taken since costs a needless wake at
		 * most.
		 */
		uint64_t now_tick;

		(void)atomic_load_explicit(&r->state, memory_order_seq_cst);
		now_tick = __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
		if (now_tick < tick)
			tick = now_tick;
	}
	if (tick < sleep_tick_of(sleep))
		goto wake;
	/*
	 * A shard asleep for longer than SHARD_FLUSH_NS is woken by the first
	 * post (once: wake_pending), and then, while posts keep coming, sleeps
	 * at most that long (shard_main()): no post waits longer, and a busy
	 * poster costs no wake-up per call.
	 */
	if (sleep & SLEEP_FAR)
		goto wake;
	/*
	 * Posts that need no early wake (a later deadline, a cancel) still
	 * hold records the pool cannot reuse until the shard drains them.
	 */
	return shard_count_posts(s, 1, sleep);
wake:
	shard_wake(s);
	return false;
}

bool shard_post(struct shard *s, struct rec *r, uint64_t tick)
{
	return post(s, r, tick, false);
}

/*
 * shard_post_recheck - shard_post() for a poster that made @r QUEUED before
 * this call, while other threads could reset it (a reset, a periodic
 * re-arm, a keyed arm, a queue's unparking): wakes @s for the record's own
 * deadline too, when a reset has moved it earlier meanwhile.
 */
bool shard_post_recheck(struct shard *s, struct rec *r, uint64_t tick)
{
	return post(s, r, tick, true);
}

/*
 * shard_posts_taken - the shard took its inbox, or arrivals: the backlog
 * count starts again.  seq_cst on this store and the load after it pairs
 * with a held-back arm's increment of ev_waiters and its load of
 * inbox_posts: either it sees the count fall, or this thread sees it
 * waiting and wakes it.
 */
void shard_posts_taken(struct shard *s)
{
	atomic_store_explicit(&s->inbox_posts, 0, memory_order_seq_cst);
	if (atomic_load_explicit(&s->k->ev_waiters, memory_order_seq_cst))
		service_event(s->k);
}

/* One eventfd write, however wake_pending reads. */
static void shard_kick(struct shard *s)
{
	uint64_t one = 1;

	/* A test has this write consumed by someone else (fault.h). */
	if (__builtin_expect(atomic_load_explicit(&fault_kick_lost, memory_order_relaxed), 0) &&
	    atomic_exchange_explicit(&fault_kick_lost, 0, memory_order_relaxed))
		return;

	if (write(s->efd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
		kairos_die_err("eventfd write", errno);
}

/*
 * After the write of the winner of @won (its epoch, KICKING): KICKED, unless
 * the shard has cleared the flag since (it woke: a new epoch), when the
 * flag may be another winner's, whose write is still to come.
 */
static void wake_kicked(struct shard *s, uint32_t won)
{
	uint32_t w = won;

	atomic_compare_exchange_strong_explicit(&s->wake_pending, &w,
						(won & ~WAKE_STATE) | WAKE_KICKED,
						memory_order_release, memory_order_relaxed);
}

/* The shard, awake: NONE, in a new epoch. */
static void wake_clear(struct shard *s)
{
	uint32_t w = atomic_load_explicit(&s->wake_pending, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(&s->wake_pending, &w,
						      (w & ~WAKE_STATE) + WAKE_EPOCH,
						      memory_order_release, memory_order_relaxed))
		;
}

/*
 * shard_wake_always - wakes @s whatever its wake_pending says: for
 * kairos_clock_advance(), whose new time the shard reads with no other
 * order against wake_pending.  (A post's wake is decided by sleep_tick,
 * which the shard stores after clearing wake_pending, so a poster that
 * reads the one reads the other's clear; an advance reads neither.  Were
 * it to trust a stale wake_pending, the shard could clear it and read the
 * old time, and both sleep.)  The flag is left alone: other posters may
 * write too.
 */
void shard_wake_always(struct shard *s)
{
	shard_kick(s);
}

void shard_wake(struct shard *s)
{
	/*
	 * One eventfd write per sleep: the shard clears wake_pending when it
	 * wakes.  Looked at first, so that posters of a shard about to wake do
	 * not take its line in turn.  Only a write made lets the others off:
	 * while the thread that won is on its way to it (descheduled,
	 * perhaps), each poster writes too (the writes merge), rather than
	 * leave an earlier deadline to that thread's return.
	 */
	uint32_t w = atomic_load_explicit(&s->wake_pending, memory_order_relaxed);

	if ((w & WAKE_STATE) == WAKE_KICKED)
		return;
	if ((w & WAKE_STATE) == WAKE_NONE &&
	    atomic_compare_exchange_strong_explicit(&s->wake_pending, &w, w | WAKE_KICKING,
						    memory_order_acq_rel, memory_order_relaxed)) {
		/* A test holds the winner here, before its write (fault.h). */
		if (__builtin_expect(atomic_load_explicit(&fault_wake_hold, memory_order_relaxed), 0))
			fault_hold(&fault_wake_hold, &fault_wake_held);
		shard_kick(s);
		/* And here, after it (fault.h). */
		if (__builtin_expect(atomic_load_explicit(&fault_kicked_hold, memory_order_relaxed), 0))
			fault_hold(&fault_kicked_hold, &fault_kicked_held);
		wake_kicked(s, w | WAKE_KICKING);
		return;
	}
	if ((w & WAKE_STATE) != WAKE_KICKED)
		shard_kick(s);
}

/* Retires @r: into @rb when the caller ends many in a row, else at once. */
static void retire(struct shard *s, struct rec *r, struct rbundle *rb)
{
	if (rb)
		rbundle_add(s->k, s, rb, r);
	else
		table_retire(s->k, s, r);
}

/*
 * Ends record @r whose state word was @old: wakes cancel_sync waiters, gives
 * back its place under max_timers, and retires it (into @rb, if given).
 * The caller counts how it ended (which takes it out of the derived
 * pending count).
 */
void shard_end(struct shard *s, struct rec *r, uint64_t old, struct rbundle *rb)
{
	if (old & ST_WAITERS)
		service_event(s->k);
	if (s->k->cfg.max_timers)
		atomic_fetch_sub_explicit(&s->k->total_pending, 1, memory_order_relaxed);
	if (r->wt.where != WHEEL_NONE)
		kairos_die("ended record still in the wheel");
	retire(s, r, rb);
}

/* Makes the wheel agree with one posted record; cancelled ones go to @rb. */
static inline __attribute__((always_inline)) void inbox_one(struct shard *s, struct rec *r,
							   struct rbundle *rb)
{
	uint64_t old = timer_take_post(r);

	switch (st_of(old)) {
	case ST_PENDING:
	case ST_RESETTING:
		/*
		 * A RESETTING record is mid-store; the resetter posts again if
		 * it moves the deadline earlier, and the wheel re-checks the
		 * deadline before anything fires, so filing it now is safe.
		 * A periodic timer reset (REBASE) restarts its period from the
		 * exact deadline; a resetter storing a newer one meanwhile posts
		 * again, REBASE, and it is read anew.
		 */
		if (old & ST_REBASE) {
			struct rec_ext *p = table_ext(s, table_index(s, r));

			p->next_ns = atomic_load_explicit(&p->rebase_ns, memory_order_relaxed);
		}
		if (r->wt.where == WHEEL_NONE)
			wheel_insert(&s->wheel, &r->wt);
		else
			wheel_refresh(&s->wheel, &r->wt);
		break;
	case ST_CANCELLED:
		if (r->wt.where != WHEEL_NONE)
			wheel_del(&s->wheel, &r->wt);
		/* The canceller counted it; only the record is left to retire. */
		rbundle_add(s->k, s, rb, r);
		atomic_store_explicit(&s->cancels_taken,
				      atomic_load_explicit(&s->cancels_taken, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		break;
	default:
		/* Posts are made only from PENDING; anything else is corruption. */
		kairos_die("posted record in an impossible state");
	}
}

/*
 * Tells the flushes of kept cancels at which far_kept a sweep comes due
 * (table_keep_flush() asks for a wake when it brings far_kept there).  A
 * bound stored earlier that far_kept has not reached yet stays when it is
 * lower: its ask brings the shard to look again, a wake too soon at worst.
 * Returns whether far_kept reached @due meanwhile (seq_cst store, then
 * load: pairs with the flush's add, then load).
 */
static bool sweep_due_at(struct shard *s, uint64_t kept, uint64_t due)
{
	uint64_t was = atomic_load_explicit(&s->sweep_due_kept, memory_order_relaxed);

	if (was == due || (was < due && was > kept))
		return false;
	atomic_store_explicit(&s->sweep_due_kept, due, memory_order_seq_cst);
	return atomic_load_explicit(&s->far_kept, memory_order_seq_cst) >= due;
}

/* The cancels since the last sweep that make the next one due. */
static uint64_t ents_need(const struct shard *s)
{
	uint64_t need = wheel_entries(&s->wheel) / 2;

	return need < WHEEL_SWEEP_MIN ? WHEEL_SWEEP_MIN : need;
}

/*
 * Whether a sweep is due with far_kept at *@kept.  If not, the bound is
 * stored for the flushes (sweep_due_at()); when far_kept reached it
 * meanwhile, *@kept is read again, *@moved set, and a sweep is due.
 */
static bool ents_due(struct shard *s, uint64_t *kept, bool *moved)
{
	uint64_t need = ents_need(s);
	uint64_t taken = atomic_load_explicit(&s->cancels_taken, memory_order_relaxed);
	uint64_t since = taken + *kept - s->cancels_swept;

	s->tidy_need = need;
	if (since >= need)
		return true;
	if (!sweep_due_at(s, *kept, *kept + need - since))
		return false;
	*kept = atomic_load_explicit(&s->far_kept, memory_order_relaxed);
	*moved = true;
	return true;
}

/*
 * After the cancels of a drain, and on a pass with none: once the shard has
 * taken, since its last such sweep, at least half as many cancels as its
 * wheel holds entries (and WHEEL_SWEEP_MIN), counting those that threads
 * retired themselves (far_kept, table_keep_flush()), the entries of timers
 * filed by value that they left stale are swept from every slot
 * (wheel_sweep_entries(), which reads no record).  A slot sweeps itself
 * only as it grows, so without this the entries of a batch of idle
 * timeouts, all cancelled, would hold their memory until their slot comes.
 * At most two entries looked at per cancel.
 *
 * The sweep reads the ended byte of every entry, and a thread retiring its
 * cancels writes those bytes at each flush: run beside a burst of such
 * cancels, the two pass the bytes' lines back and forth (a burst of 1e4
 * took 27-32 ns a cancel with the sweep beside it, 16-18 without;
 * docs/BENCHMARKS.md, "The sweep waits for a burst of cancels to pause").
 * So the sweep waits for far_kept to pause, by quiet_note()'s rule:
 *  - A look that finds no sweep due works out the far_kept at which one
 *    would be, with the cancels taken so far (sweep_due_at()); the flush
 *    that reaches it asks the reclaimer, which wakes the shard once
 *    far_kept has stood still for SWEEP_QUIET_NS, or SHARD_FLUSH_NS after
 *    it saw the ask (shard_sweep_asks()).  Cancels taken later come with a
 *    pass, which looks again.
 *  - A shard that finds a sweep due while far_kept moved since its last
 *    look waits the same way, its timer bringing it back to look.
 * So kept cancels are swept at most about 2 * SHARD_FLUSH_NS after they
 * reach the count, however steady their flow and however they mix with
 * taken ones.  A manual-clock shard has no timer to look again by, and
 * sweeps at once.
 */
static void ents_tidy(struct shard *s)
{
	uint64_t kept = atomic_load_explicit(&s->far_kept, memory_order_relaxed), dropped;
	bool moved = kept != s->kept_looked, swept = false;

	s->sweep_look = 0;
	/*
	 * Twice at most: after a sweep, the next bound is stored; a burst that
	 * reached it during the sweep begins a wait, or, on a manual-clock
	 * shard (no timer to look again by), asks the reclaimer for a wake
	 * once the burst pauses, as a flush would have.
	 */
	while (ents_due(s, &kept, &moved)) {
		if ((moved || s->sweep_quiet.waiting) && !service_manual(s->k)) {
			/* The wheel's tick is the last pass's, perhaps long ago: read the clock. */
			uint64_t tick = clock_tick_floor(service_now(s->k), s->k->cfg.tick_ns);

			if (!quiet_note(&s->sweep_quiet, kept, tick, s->quiet_ticks,
					s->flush_ticks, &s->sweep_look))
				break;
		} else if (swept) {
			atomic_store_explicit(&s->sweep_ask, 1, memory_order_release);
			table_kick(s->k);
			break;
		}
		s->sweep_quiet.waiting = false;
		dropped = wheel_sweep_entries(&s->wheel);
		s->cancels_swept = atomic_load_explicit(&s->cancels_taken, memory_order_relaxed) + kept;
		atomic_fetch_add_explicit(&s->stats.sweeps, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->stats.swept, dropped, memory_order_relaxed);
		swept = true;
		moved = false;
	}
	s->kept_looked = kept;
}

uint64_t shard_sweep_asks(struct kairos *k, uint64_t now)
{
	uint64_t next = 0, at;

	for (unsigned i = 0; i < k->nshards; i++) {
		struct shard *s = k->shards[i];

		/* Acquire: the far_kept of the flush that asked, or a later one. */
		if (!atomic_load_explicit(&s->sweep_ask, memory_order_acquire))
			continue;
		if (!quiet_note(&s->ask_quiet, atomic_load_explicit(&s->far_kept,
								    memory_order_relaxed),
				now, SWEEP_QUIET_NS, SHARD_FLUSH_NS, &at)) {
			next = next && next < at ? next : at;
			continue;
		}
		/*
		 * An ask made since is cleared too: this wake covers it, as the
		 * shard looks at far_kept itself, again until it stands still
		 * (ents_tidy()).
		 */
		atomic_store_explicit(&s->sweep_ask, 0, memory_order_relaxed);
		shard_wake(s);
	}
	return next;
}

/*
 * A taken inbox is noted in an array: its first DRAIN_FIXED records in the
 * shard, the rest in a mapping that grows as needed.  A pass that finds the
 * inbox empty, or needs less than an eighth of a grown mapping, unmaps it,
 * so that a burst of posts leaves no memory behind, while a steady flow
 * keeps its mapping (each unmap costs every CPU of the process a TLB
 * shootdown).  Records are loaded DRAIN_AHEAD turns before they are taken.
 */
#define DRAIN_FIXED	(sizeof(((struct shard *)0)->drain_fixed) / sizeof(struct rec *))
#define DRAIN_AHEAD	8
#define DRAIN_HINTED	4096	/* an inbox this deep follows arms' hints */
#define DRAIN_MAP_MIN	(16 * 4096 / sizeof(struct rec *))	/* the first mapping's slots */

/* Doubles the mapping (or makes it); false when there is no memory. */
static bool drain_grow(struct shard *s)
{
	size_t cap = s->drain_big_cap ? s->drain_big_cap * 2 : DRAIN_MAP_MIN;
	void *p = mapping_copy(s->drain_big, s->drain_big_cap * sizeof(struct rec *),
			       cap * sizeof(struct rec *));

	if (!p)
		return false;
	if (s->drain_big)
		munmap(s->drain_big, s->drain_big_cap * sizeof(struct rec *));
	s->drain_big = p;
	s->drain_big_cap = cap;
	return true;
}

static void drain_unmap(struct shard *s)
{
	if (s->drain_big)
		munmap(s->drain_big, s->drain_big_cap * sizeof(struct rec *));
	s->drain_big = NULL;
	s->drain_big_cap = 0;
}

/* Takes the @n records of @recs, last (oldest) first. */
static __attribute__((noinline)) void drain_take(struct shard *s, struct rec **recs, size_t n,
						 struct rbundle *rb)
{
	for (size_t i = n; i--;) {
		if (i >= DRAIN_AHEAD)
			__builtin_prefetch(&recs[i - DRAIN_AHEAD]->state, 1);
		/*
		 * Halfway there, the record's own line has come: start on its
		 * wheel neighbours, which a cancel's unlink writes (for other
		 * posts the loads are wasted, and never wrong: prefetches).
		 */
		if (i >= DRAIN_AHEAD / 2) {
			struct rec *r = recs[i - DRAIN_AHEAD / 2];

			if (r->wt.where != WHEEL_NONE) {
				__builtin_prefetch(r->wt.link.next, 1);
				__builtin_prefetch(r->wt.link.prev, 1);
			}
		}
		inbox_one(s, recs[i], rb);
	}
}

/*
 * Takes the whole inbox into the wheel; false when it was empty.
 *
 * The inbox is a stack, newest first, and its records are taken oldest
 * first, so that equal deadlines keep post order.  One walk down the chain
 * notes the records (each step waits for a record's line, unless an arm's
 * hint loaded it some steps before); they are then taken from the end, each
 * one loaded DRAIN_AHEAD turns early.  Where the mapping cannot grow, what
 * it does not hold is reversed in place and taken first, as it is older.
 */
static bool inbox_drain(struct shard *s)
{
	struct rec *list, *rest = NULL;
	struct rbundle rb = { 0 };
	size_t n = 0, m = 0;

	if (!atomic_load_explicit(&s->inbox, memory_order_relaxed)) {
		/* The flow has paused: the mapping goes. */
		drain_unmap(s);
		return false;
	}
	/*
	 * Acquire pairs with the posters' release; release, with a manual
	 * clock's waiter, which reads the inbox and then sleep_tick (clock.c).
	 */
	list = atomic_exchange_explicit(&s->inbox, NULL, memory_order_acq_rel);
	shard_posts_taken(s);
	for (; list && n < DRAIN_FIXED; list = rec_link(list))
		s->drain_fixed[n++] = list;
	for (; list; list = rec_link(list)) {
		if (m == s->drain_big_cap && !drain_grow(s))
			break;
		/*
		 * Deep in a deep inbox (a burst of arms), a fresh arm's hint
		 * names a record further down (kairos.c, arm()).  Not nearer
		 * the top: those records were posted last, and loading them
		 * early took lines the arming thread was still using.
		 */
		if (DRAIN_FIXED + m >= DRAIN_HINTED)
			__builtin_prefetch(list->wt.link.prev);
		s->drain_big[m++] = list;
	}
	while (list) {
		struct rec *next = rec_link(list);

		/* Atomic like every other access: a stale popper may read it. */
		rec_link_set(list, rest);
		rest = list;
		list = next;
	}
	while (rest) {
		struct rec *next = rec_link(rest);

		inbox_one(s, rest, &rb);
		rest = next;
	}
	drain_take(s, s->drain_big, m, &rb);
	drain_take(s, s->drain_fixed, n, &rb);
	/* A grown mapping eight times larger than this pass needed goes. */
	if (s->drain_big_cap > DRAIN_MAP_MIN && m < s->drain_big_cap / 8)
		drain_unmap(s);
	rbundle_flush(s->k, s, &rb);
	ents_tidy(s);
	return true;
}

/* Ends the run being filled: it joins this pass's runs for the workers. */
static void run_close(struct shard *s)
{
	if (!s->dfirst)
		return;
	rec_link_set(s->dfirst, NULL);
	if (s->rlast)
		rec_link_set(s->rlast, s->dfirst);
	else
		s->rfirst = s->dfirst;
	s->rlast = s->dfirst;
	s->nruns++;
	s->dfirst = s->dlast = NULL;
	s->dlen = 0;
}

/* Hands this pass's expiries for the queue last seen to it, and lets go of it. */
static void queue_flush(struct shard *s)
{
	if (s->qfirst)
		queue_append(s, s->qcur, s->qfirst, s->qlast);
	s->qfirst = s->qlast = NULL;
	if (s->qcur)
		queue_unref(s->qcur);
	s->qcur = NULL;
}

/*
 * Before a queue's record may fire, the shard holds its queue until the
 * pass's chain for it is handed over: once fired, the record's own
 * reference may go with a cancel, and with it a destroyed queue.  The
 * record read PENDING may be cancelled meanwhile, and its queue freed, so
 * the reference is taken only from a queue still alive (queue_tryget());
 * when there is none, the record has ended and will not fire.
 */
static void queue_hold(struct shard *s, struct rec *r)
{
	unsigned no = rec_queue_no(r);

	/* Comparing is safe: a queue the shard holds is not freed. */
	if (s->qcur && queue_get(s->k, no) == s->qcur)
		return;
	queue_flush(s);
	s->qcur = queue_tryget(s->k, no);
}

/*
 * Queues one expired record for its queue, for the workers, or runs it
 * (inline).  A queue's expiries go to it a chain at a time: one lock per
 * run of expiries for the same queue.
 */
static void deliver(struct shard *s, struct rec *r)
{
	if (rec_queue_no(r)) {
		/* s->qcur is its queue: expire_one() held it. */
		rec_chain_append(&s->qfirst, &s->qlast, r, r);
		return;
	}
	if (s->k->cfg.delivery == KAIROS_DELIVER_INLINE) {
		worker_deliver(s->k, s, r, &s->itally);
		return;
	}
	if (s->dlen == WORKER_BATCH)
		run_close(s);
	rec_chain_append(&s->dfirst, &s->dlast, r, r);
	r->wt.link.prev = NULL;
	if (s->dlen >= RUN_AHEAD)
		s->dback[s->dlen % RUN_AHEAD]->wt.link.prev = &r->wt.link;
	s->dback[s->dlen % RUN_AHEAD] = r;
	s->dlen++;
}

/*
 * A periodic record just moved to FIRING: records the run it delivers (the
 * periods it covers, when the shard fell behind) and the deadline of the
 * next.  Only the shard thread writes these while the record is not RUNNING.
 * The next deadline saturates: a period that would carry it past 2^64 ns
 * leaves a run that never comes, never one that wrapped into the past.
 */
static void period_step(struct shard *s, struct rec *r)
{
	struct rec_ext *p = table_ext(s, table_index(s, r));

	period_advance(p, p->next_ns, s->now_ns);
}

/*
 * The run at @from_ns, seen at @now_ns: it covers every period begun by
 * then, and the next run is the first deadline after those, on the grid of
 * @from_ns + n periods.  A queue's drainer calls it again for a periodic
 * expiry that waited there, so that the periods missed while it waited join
 * the same call.  By policy:
 *  - fixed rate: the call's status counts the periods it covers;
 *  - skip: the same next deadline (the first grid point after @now_ns),
 *    but status 1: the missed periods are dropped;
 *  - fixed delay: status 1, and the next deadline set here is replaced
 *    when the callback ends (period_restart()).
 */
void period_advance(struct rec_ext *p, uint64_t from_ns, uint64_t now_ns)
{
	uint64_t late = now_ns > from_ns ? now_ns - from_ns : 0;
	uint64_t covered = late / p->period_ns + 1, step;

	p->fire_ns = from_ns;
	/* The status saturates; the next deadline is past every period covered. */
	p->fire_status = p->policy != KAIROS_PERIOD_FIXED_RATE ? 1
			 : covered > INT32_MAX ? INT32_MAX : (int)covered;
	if (__builtin_mul_overflow(covered, p->period_ns, &step) ||
	    __builtin_add_overflow(from_ns, step, &p->next_ns))
		p->next_ns = UINT64_MAX;
}

/*
 * A fixed-delay timer's callback ended at @end_ns (or its expiry was taken
 * from its queue, or posted to its ring): the next run is a period later,
 * saturating.  Called by whoever ends the run, before the record is PENDING
 * again (worker_rearm()).
 */
void period_restart(struct rec_ext *p, uint64_t end_ns)
{
	if (__builtin_add_overflow(end_ns, p->period_ns, &p->next_ns))
		p->next_ns = UINT64_MAX;
}

/*
 * Decides one due record: fire it, re-file it (its deadline was pushed
 * later), or defer it (a post or a resetter holds it).
 */
static void expire_one(struct shard *s, struct rec *r)
{
	/* Acquire pairs with a resetter's release of the new deadline. */
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);

	for (;;) {
		uint64_t deadline;

		if ((old & ST_QUEUED) || st_of(old) == ST_RESETTING) {
			/*
			 * Its post (or the resetter's store) is handled first.  The
			 * record may be on the inbox already, so it is kept on the
			 * wheel link, which wheel_pop() left free.
			 */
			r->wt.link.next = s->deferred ? &s->deferred->wt.link : NULL;
			s->deferred = r;
			return;
		}
		if (st_of(old) != ST_PENDING)
			kairos_die("due record in an impossible state");
		deadline = __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
		if (wheel_fire_tick(deadline, r->wt.slack) > s->wheel.curr) {
			/* Pushed later by a store: back in, at its new place. */
			wheel_insert(&s->wheel, &r->wt);
			return;
		}
		if (rec_queue_no(r))
			queue_hold(s, r);
		/* The version in @old makes this fail after any reset or cancel. */
		if (timer_fire(r, &old)) {
			if (old & ST_PERIODIC)
				period_step(s, r);
			deliver(s, r);
			return;
		}
		if (st_of(old) == ST_CANCELLED && !(old & ST_QUEUED))
			kairos_die("cancelled record not posted");
	}
}

static void expire(struct shard *s)
{
	struct wheel_timer *t;

	while ((t = wheel_pop(&s->wheel)))
		expire_one(s, rec_of(t));
	/* Deferred records go back on the due list for the next pass. */
	while (s->deferred) {
		struct rec *r = s->deferred;

		s->deferred = rec_chain_next(r);
		wheel_insert(&s->wheel, &r->wt);
	}
	queue_flush(s);
	run_close(s);
	if (s->nruns) {
		/* Counted before the workers can finish them (clock.c). */
		if (service_manual(s->k))
			atomic_fetch_add_explicit(&s->dq.runs_pushed, s->nruns,
						  memory_order_seq_cst);
		dqueue_push(&s->dq, s->rfirst, s->rlast, s->nruns);
		s->rfirst = s->rlast = NULL;
		s->nruns = 0;
	}
	/* Inline delivery: what the callbacks of this pass ended. */
	worker_tally_flush(s, &s->itally);
}

/* Arms the timerfd for @tick if that is earlier than what it is armed for. */
static void arm_timer(struct shard *s, uint64_t tick)
{
	struct itimerspec its = { 0 };
	uint64_t ns;

	if (tick >= s->timer_tick)
		return;
	ns = clock_tick_ns(tick, s->k->cfg.tick_ns);
	if (ns == 0)
		ns = 1;		/* 0 would disarm it */
	if (ns > INT64_MAX)
		ns = INT64_MAX;	/* the kernel's limit; 292 years is never */
	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	if (timerfd_settime(s->tfd, TFD_TIMER_ABSTIME, &its, NULL))
		kairos_die_err("timerfd_settime", errno);
	s->timer_tick = tick;
	atomic_fetch_add_explicit(&s->stats.timer_sets, 1, memory_order_relaxed);
}

/*
 * Debug builds (where the tests run) check the wheel's invariants after
 * every pass.  The check walks every record, so above SHARD_CHECK_ALL
 * records it runs on every SHARD_CHECK_EVERY-th pass only: a 1e6-timer test
 * would otherwise spend its time in the checker, not in the code it checks.
 */
#define SHARD_CHECK_ALL		65536
#define SHARD_CHECK_EVERY	64

#ifndef NDEBUG
/*
 * A resetter may have stored an earlier deadline that is still on its way
 * here (the record is RESETTING, or QUEUED until inbox_one() relinks it):
 * such a record is skipped.  The state word is read on both sides of the
 * deadline, as a sequence lock's reader does; every reset bumps its version.
 */
static bool settled_fire(const struct wheel_timer *t, void *ctx, uint64_t *fire)
{
	struct rec *r = rec_of((struct wheel_timer *)t);
	uint64_t before = atomic_load_explicit(&r->state, memory_order_acquire);

	(void)ctx;
	if ((before & ST_QUEUED) || st_of(before) == ST_RESETTING)
		return false;
	*fire = wheel_fire_tick(__atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED), r->wt.slack);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&r->state, memory_order_relaxed) == before;
}
#endif

static void check_wheel(struct shard *s)
{
#ifndef NDEBUG
	static const struct wheel_check_ops ops = { .fire = settled_fire };
	const char *why;

	if (wheel_count(&s->wheel) > SHARD_CHECK_ALL && ++s->checks < SHARD_CHECK_EVERY)
		return;
	s->checks = 0;
	if (wheel_check_with(&s->wheel, &ops, &why)) {
		fprintf(stderr, "kairos: shard %u: %s\n", s->index, why);
		kairos_die("wheel invariant broken");
	}
#else
	(void)s;
#endif
}

/*
 * One pass: inbox, clock, wheel, delivery, timer.  Returns the next visit;
 * *@posted tells whether the inbox had anything.
 */
static uint64_t pass(struct shard *s, bool *posted)
{
	/* Records filed by value first: the wheel must hold them before it moves on. */
	arrivals_take(s);
	*posted = inbox_drain(s);
	/* Cancels that threads retired themselves count too (table_keep_flush()). */
	if (!*posted)
		ents_tidy(s);
	s->now_ns = service_now(s->k);
	wheel_advance(&s->wheel, clock_tick_floor(s->now_ns, s->k->cfg.tick_ns));
	expire(s);
	/*
	 * Slots visited drop their entries: a sweep may be due sooner than
	 * the bound the flushes were given (ents_due()).
	 */
	if (ents_need(s) < s->tidy_need)
		ents_tidy(s);
	check_wheel(s);
	/* After sleep_tick was cleared and the pass's runs counted (clock.c). */
	if (service_manual(s->k))
		atomic_store_explicit(&s->manual_seen, s->now_ns, memory_order_seq_cst);
	return wheel_next(&s->wheel);
}

static void *shard_main(void *arg)
{
	struct shard *s = arg;
	struct kairos *k = s->k;
	bool manual = service_manual(k);
	unsigned spins = 0;

	tls_service = k;
	tls_shard = s;
	thread_name("shard", (int)s->index, -1);
	/* The ring is made here: IORING_SETUP_SINGLE_ISSUER wants its one submitter. */
	s->init_rc = backend_start(s);
	/* Tells kairos_create the outcome (it waits on init_done). */
	atomic_store_explicit(&s->init_done, 1, memory_order_release);
	futex_wake32(&s->init_done, 1);
	if (s->init_rc)
		return NULL;

	while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
		uint64_t next, sleep;
		bool posted;
		int ev;

		atomic_store_explicit(&s->sleep_tick, 0, memory_order_seq_cst);
		/* A test holds a pass here, mid-pass to posters (fault.h). */
		if (__builtin_expect(atomic_load_explicit(&fault_pass_hold, memory_order_relaxed), 0))
			fault_hold(&fault_pass_hold, &fault_pass_held);
		next = pass(s, &posted);
		if (next <= s->wheel.curr) {
			/* Only deferred records are due: their holders are mid-update. */
			cpu_relax_n(&spins);
			continue;
		}
		spins = 0;
		if (manual) {
			/*
			 * No timerfd: nothing comes due until the time is
			 * advanced, and every post wakes the shard.
			 */
			sleep = UINT64_MAX;
			clock_quiet_mark(k);
		} else {
			if (next != UINT64_MAX)
				arm_timer(s, next);
			/* Posts are coming: look again within SHARD_FLUSH_NS (shard_post()). */
			if (posted)
				arm_timer(s, s->wheel.curr + s->flush_ticks);
			/* Threads file by value: look at their blocks again in time (arrival.c). */
			if (arrivals_polling(s))
				arm_timer(s, s->wheel.curr + ARRIVAL_POLL_TICKS);
			/* A sweep waits for kept cancels to pause: look again then (ents_tidy()). */
			if (s->sweep_look)
				arm_timer(s, s->sweep_look);
			sleep = s->timer_tick;
			if (sleep == UINT64_MAX || sleep > s->wheel.curr + s->flush_ticks)
				sleep |= SLEEP_FAR;
		}
		atomic_store_explicit(&s->sleep_tick, sleep, memory_order_seq_cst);
		if (atomic_load_explicit(&s->inbox, memory_order_seq_cst) || arrivals_waiting(s))
			continue;
		if (atomic_load_explicit(&s->stop, memory_order_acquire))
			break;
		/* Quiet: an advance that waits looks again (clock.c). */
		if (manual)
			service_event(k);
		ev = s->ops->wait(s);
		if (ev < 0) {
			/* The ring stopped working: move to epoll, then look again. */
			backend_fallback(s, ev);
			wake_clear(s);
			s->timer_tick = UINT64_MAX;	/* re-arm whatever is next */
			continue;
		}
		atomic_fetch_add_explicit(&s->stats.wakeups, 1, memory_order_relaxed);
		if (ev & BK_TIMER)
			s->timer_tick = UINT64_MAX;	/* a one-shot timerfd disarms itself */
		if (ev & BK_WAKE)
			wake_clear(s);
	}
	/* Ring queue posts first: a periodic one that completes posts itself again. */
	if (s->ops->settle)
		s->ops->settle(s);
	/* Leave no post behind: every record ends up in the wheel or retired. */
	arrivals_take(s);
	inbox_drain(s);
	return NULL;
}

/*
 * shard_new - makes shard @index of @k with its timerfd and wake eventfd, no
 * thread yet.  On failure nothing it made is left.
 */
int shard_new(struct kairos *k, unsigned index, struct shard **out)
{
	size_t size = (sizeof(struct shard) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1);
	struct shard *s = fault_hit() ? NULL : aligned_alloc(CACHELINE, size);
	int rc;

	if (!s)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	s->k = k;
	s->index = index;
	s->epfd = -1;
	s->timer_tick = UINT64_MAX;
	s->posting.next = s->posting.prev = &s->posting;
	s->flush_ticks = (SHARD_FLUSH_NS + k->cfg.tick_ns - 1) / k->cfg.tick_ns;
	s->quiet_ticks = (SWEEP_QUIET_NS + k->cfg.tick_ns - 1) / k->cfg.tick_ns;
	atomic_store_explicit(&s->sweep_due_kept, WHEEL_SWEEP_MIN, memory_order_relaxed);
	s->itally.lane = &s->own;
	/* None of these can fail with default attributes. */
	if ((rc = pthread_mutex_init(&s->dq.lock, NULL)) ||
	    (rc = pthread_cond_init(&s->dq.cond, NULL)))
		kairos_die_err("pthread init", rc);
	if (k->cfg.delivery != KAIROS_DELIVER_INLINE) {
		unsigned n = k->cfg.workers < WORKER_LANES ? k->cfg.workers : WORKER_LANES;

		s->lanes = fault_hit() ? NULL : aligned_alloc(CACHELINE, n * sizeof(*s->lanes));
		if (!s->lanes) {
			rc = -ENOMEM;
			goto fail;
		}
		memset(s->lanes, 0, n * sizeof(*s->lanes));
		s->nlanes = n;
	}
	/* A manual clock is no clock of the kernel's: no timerfd. */
	s->tfd = -1;
	if (!service_manual(k)) {
		rc = fault_hit() ? -EMFILE : 0;
		s->tfd = rc ? -1 : timerfd_create(k->cfg.clock, TFD_CLOEXEC);
		if (s->tfd < 0) {
			rc = rc ? rc : -errno;
			goto fail;
		}
	}
	rc = fault_hit() ? -EMFILE : 0;
	s->efd = rc ? -1 : eventfd(0, EFD_CLOEXEC);
	if (s->efd < 0) {
		rc = rc ? rc : -errno;
		goto fail_tfd;
	}
	/* The first block of far arms filed by value (arrival.c): none posts for want of one. */
	rc = arrival_first(s);
	if (rc)
		goto fail_efd;
	wheel_init(&s->wheel, clock_tick_floor(service_now(k), k->cfg.tick_ns));
	arrival_ops_init(s);
	*out = s;
	return 0;
fail_efd:
	close(s->efd);
fail_tfd:
	if (s->tfd >= 0)
		close(s->tfd);
fail:
	free(s->lanes);
	pthread_mutex_destroy(&s->dq.lock);
	pthread_cond_destroy(&s->dq.cond);
	free(s);
	return rc;
}

/* shard_free - frees a shard made by shard_new() whose thread has stopped. */
void shard_free(struct shard *s)
{
	if (s->tfd >= 0)
		close(s->tfd);
	close(s->efd);
	arrivals_free(s);
	table_free(s);
	drain_unmap(s);
	wheel_fini(&s->wheel);
	free(s->lanes);
	pthread_mutex_destroy(&s->dq.lock);
	pthread_cond_destroy(&s->dq.cond);
	free(s);
}

/*
 * shard_start - starts @s's thread and waits until it has set up its
 * backend.  On failure the thread has been joined and its backend undone.
 */
int shard_start(struct shard *s)
{
	int rc;

	rc = fault_hit() ? -EAGAIN : -thread_start(&s->thread, shard_main, s);
	if (rc)
		return rc;
	while (!atomic_load_explicit(&s->init_done, memory_order_acquire))
		futex_wait32(&s->init_done, 0);
	if (s->init_rc) {
		thread_join(s->thread);
		return s->init_rc;
	}
	return 0;
}

/* shard_stop - stops and joins a started shard's thread, and undoes its backend. */
void shard_stop(struct shard *s)
{
	atomic_store_explicit(&s->stop, 1, memory_order_release);
	/*
	 * Always: stop and wake_pending have no seq_cst handshake, so a stale
	 * wake_pending read here could pair with a shard that cleared it and
	 * read stop before this store, and both would wait.
	 */
	shard_wake_always(s);
	thread_join(s->thread);
	s->ops->fini(s);
}

/*
 * Ends one record still held at destroy (in a wheel, a delivery queue or a
 * queue's list): once, counted as drained.  Retired into @rb, a bundle of
 * @s's records, when not NULL.
 */
void shard_drain_one(struct kairos *k, struct shard *s, struct rec *r, int how, uint64_t *count,
		     struct rbundle *rb)
{
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);
	unsigned st = st_of(old);

	if (st == ST_CANCELLED) {
		/* Cancelled while queued for delivery: the canceller counted it. */
		retire(s, r, rb);
		return;
	}
	if (st != ST_PENDING && st != ST_FIRING && st != ST_PARKED)
		kairos_die("drained record in an impossible state");
	timer_drain(r, old);
	atomic_fetch_add_explicit(&s->stats.drained, 1, memory_order_release);
	(*count)++;
	/*
	 * A queue's timer may have no callback (kairos_queue_take() only).
	 * The callback runs on the destroying thread, as one of the
	 * service's: its kairos_cancel_sync() must not wait for the destroy
	 * it runs in (kairos.c).
	 */
	if (how == KAIROS_DRAIN_NOTIFY && r->fn) {
		struct cb_frame f;
		kairos_id id = shard_rec_id(s, r, old);

		cb_enter(&f, k, id);
		r->fn(r->arg, id, -ECANCELED);
		cb_leave(&f);
	}
	if (rec_queue_no(r))
		queue_unref(queue_get(k, rec_queue_no(r)));
	shard_end(s, r, old, rb);
}

/*
 * shard_drain - after the shard thread and its workers have stopped, ends
 * every record still in the wheel or the delivery queue.
 */
void shard_drain(struct kairos *k, struct shard *s, int how, uint64_t *count)
{
	struct rbundle rb = { 0 };
	struct wheel_timer *t;

	/* Queued deliveries first: they expired earliest. */
	while (s->dq.head) {
		struct rec *r = s->dq.head;

		s->dq.head = rec_link(r);
		while (r) {
			struct rec *next = rec_chain_next(r);

			shard_drain_one(k, s, r, how, count, &rb);
			r = next;
		}
	}
	s->dq.tail = NULL;
	s->dq.len = 0;
	/* Whatever arrived after the shard's last pass; then what is filed by value is claimed. */
	arrivals_take(s);
	wheel_flush(&s->wheel);
	while ((t = wheel_pop(&s->wheel)))
		shard_drain_one(k, s, rec_of(t), how, count, &rb);
	/* One retire per bundle, not per record: the reclaimer walks bundles. */
	rbundle_flush(k, s, &rb);
}
