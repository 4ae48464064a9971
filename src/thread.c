/* SPDX-License-Identifier: MIT */
/*
 * thread.c - the state a calling thread keeps for the service it uses.
 *
 * An arm or a cancel writes its timer's record and this thread's own state,
 * never a line that another thread writes on every call:
 *  - free records come from the shard one bundle (up to BUNDLE_RECS) at a
 *    time, through one CAS, and are then taken one by one from the bundle,
 *    the next record's line loading while the caller works;
 *  - the arm and cancel counters are this thread's own words, written with
 *    plain stores and summed by kairos_stats().
 *
 * A thread holds this for one service at a time (the one it called last).
 * Its state joins the service's list of threads (under thr_lock) on the
 * thread's first call, and leaves it:
 *  - when the thread calls another service: its counts fold into the
 *    service's base counters, its unused records go back to the shard's
 *    reclaimer (which returns them to the pool after a grace period, as it
 *    does every freed record, so no popper of the pool can see them come
 *    back under its feet);
 *  - when the thread exits (a pthread key destructor does the same);
 *  - when kairos_destroy() runs: it folds every thread's counts and forgets
 *    their records, whose memory it unmaps anyway.
 * Likewise it leaves its arrival block (arrival.c), which its shard pools
 * once it has filed what is on it.  It hands over its kept cancels too
 * (table_keep()), which the reclaimer otherwise takes from a thread that
 * has gone quiet (ts_collect_kept()).  So a thread holds at most
 * BUNDLE_RECS - 1 free records, BUNDLE_RECS - 1 kept cancels for at most
 * about 2 * KEPT_SCAN_NS, and one open arrival block, and nothing it holds
 * outlives it.  Every count is, at any time, either in a thread on the list
 * or in the base counters, and both move only under thr_lock:
 * kairos_stats() sums them there.
 */
#include "rcu.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sched.h>

#include "internal.h"

/* Initial-exec, as every thread-local here (meson.build): a plain %fs-relative access. */
__thread struct tstate tls_ts;

static pthread_key_t ts_key;
static pthread_once_t ts_once = PTHREAD_ONCE_INIT;
static bool ts_key_ok;
/*
 * Set once the key's destructor has run: a later destructor of the
 * program's may still call in (glibc runs them in rounds, the last with no
 * round after it), and those calls must not join a list that nothing would
 * take the thread off again.  They count on the shared counters, as a
 * thread without a key slot does.
 */
static __thread bool tls_ts_exited;

static void thr_lock(struct kairos *k)
{
	mutex_lock(&k->thr_lock);
}

static void thr_unlock(struct kairos *k)
{
	mutex_unlock(&k->thr_lock);
}

/* One calling thread more (@d = 1) or fewer (@d = -1) arms on @s. */
static void ts_count(struct shard *s, int d)
{
	atomic_fetch_add_explicit(&s->callers, (unsigned)d, memory_order_relaxed);
}

/* Takes @t off @k's list (thr_lock held), folding its counts into the base. */
static void ts_unlink(struct kairos *k, struct tstate *t)
{
	ts_count(t->s, -1);
	atomic_fetch_add_explicit(&k->base.armed, ts_read(&t->armed), memory_order_release);
	atomic_fetch_add_explicit(&k->base.cancelled, ts_read(&t->cancelled),
				  memory_order_release);
	if (t->prev)
		t->prev->next = t->next;
	else
		k->threads = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->next = t->prev = NULL;
	atomic_store_explicit(&t->armed, 0, memory_order_relaxed);
	atomic_store_explicit(&t->cancelled, 0, memory_order_relaxed);
	/* A take the reclaimer began is over: the thread is on no list of it. */
	atomic_store_explicit(&t->kept_steal, 0, memory_order_relaxed);
	/* s and free are the thread's own: it resets them when it joins again. */
	atomic_store_explicit(&t->k, NULL, memory_order_release);
}

/*
 * Hands back what @t holds of its shard: its free records go back through
 * the reclaimer, and its arrival block is left to the shard, which pools
 * it once it has filed what is on it.
 */
static void ts_hand_back(struct kairos *k, struct tstate *t)
{
	if (t->free)
		table_give_back(k, t->s, t->free);
	t->free = NULL;
	t->looked = false;
	arrival_close(t);
}

/* Forgets what @t held of a service that went (its memory went with it). */
static void ts_drop_holdings(struct tstate *t)
{
	t->free = NULL;
	t->looked = false;
	memset(&t->kept, 0, sizeof(t->kept));
	atomic_store_explicit(&t->kept_open, 0, memory_order_relaxed);
	atomic_store_explicit(&t->kept_steal, 0, memory_order_relaxed);
	t->kept_seen_open = false;
	t->arr = NULL;
	t->arr_n = 0;
}

/*
 * Leaves whatever service @t is on, handing its records back.  @k's header
 * is never freed, so its lock is safe to take even after its destroy; under
 * the lock, @t still on the list means destroy has not passed its detach
 * step, so the shards (and their records) are still there.
 */
static void ts_leave(struct tstate *t)
{
	struct kairos *k = atomic_load_explicit(&t->k, memory_order_acquire);

	if (!k)
		return;
	thr_lock(k);
	if (atomic_load_explicit(&t->k, memory_order_relaxed) == k) {
		/* Under the lock its kept cancels are its own, taken or not. */
		table_keep_flush(k, t);
		ts_hand_back(k, t);
		ts_unlink(k, t);
	}
	thr_unlock(k);
}

static void ts_exit(void *arg)
{
	ts_leave(arg);
	tls_ts_exited = true;
}

static void ts_key_make(void)
{
	ts_key_ok = pthread_key_create(&ts_key, ts_exit) == 0;
}

/* The shard a thread arms on; see ts_attach(). */
struct shard *ts_pick(struct kairos *k)
{
	int cpu;

	if (k->nshards == 1)
		return k->shards[0];
	/* A shard thread's inline callbacks arm on their own shard. */
	if (tls_shard && tls_shard->k == k)
		return tls_shard;
	cpu = sched_getcpu();
	return k->shards[(unsigned)(cpu < 0 ? 0 : cpu) % k->nshards];
}

/*
 * The shard a joining thread arms on (thr_lock held): its CPU's
 * (ts_pick()), unless another shard has fewer calling threads; then the
 * first after it of those with the fewest.  Threads that each run on a CPU
 * of their own get their CPUs' shards, and threads that first call from one
 * CPU (as new threads often do) still spread.  A thread that moves to a
 * queue's shard changes the counts without the lock, so a pick may be off
 * by such a move; nothing depends on the balance but speed.
 */
static struct shard *ts_pick_join(struct kairos *k)
{
	struct shard *s = ts_pick(k), *best = s;
	unsigned least = atomic_load_explicit(&s->callers, memory_order_relaxed);

	if (tls_shard && tls_shard->k == k)
		return s;
	for (unsigned i = 1; i < k->nshards && least > 0; i++) {
		struct shard *o = k->shards[(s->index + i) % k->nshards];
		unsigned n = atomic_load_explicit(&o->callers, memory_order_relaxed);

		if (n < least) {
			least = n;
			best = o;
		}
	}
	return best;
}

/*
 * ts_attach - the slow path of ts_for(): leaves the service this thread was
 * on and joins @k, outside any read-side section (it takes locks).
 *
 * The shard it arms on is chosen by ts_pick_join() and kept while it stays:
 * a thread that the scheduler moves keeps arming on the same shard, so the
 * records it cancels come back to the pool it takes from.
 *
 * NULL when @k is being destroyed, or when the thread cannot be made to hand
 * its state back at exit (no key slot, or its exit has begun); such calls
 * count on the service's shared counters and take records from the pool
 * one at a time.
 */
struct tstate *ts_attach(struct kairos *k)
{
	struct tstate *t = &tls_ts;

	ts_leave(t);
	int err = pthread_once(&ts_once, ts_key_make);

	if (err)
		kairos_die_err("pthread_once", err);
	if (!ts_key_ok || tls_ts_exited || pthread_setspecific(ts_key, t))
		return NULL;
	thr_lock(k);
	/* Under the lock, alive means destroy has not reached ts_detach_all(). */
	if (atomic_load_explicit(&k->dead, memory_order_acquire)) {
		thr_unlock(k);
		return NULL;
	}
	t->s = ts_pick_join(k);
	ts_count(t->s, 1);
	/* What it held of a service destroyed under it went with its shards. */
	ts_drop_holdings(t);
	t->prev = NULL;
	t->next = k->threads;
	if (k->threads)
		k->threads->prev = t;
	k->threads = t;
	atomic_store_explicit(&t->k, k, memory_order_release);
	thr_unlock(k);
	return t;
}

/*
 * ts_move - @t arms on @s from now on; what it holds of its old shard
 * goes back (ts_hand_back()).  Only the thread itself calls
 * this (inside its read-side section): @t's shard and records are its own.
 */
void ts_move(struct kairos *k, struct tstate *t, struct shard *s)
{
	/* Kept cancels being taken stay with the reclaimer, for their shard. */
	if (!atomic_load_explicit(&t->kept_steal, memory_order_acquire))
		table_keep_flush(k, t);
	ts_hand_back(k, t);
	ts_count(t->s, -1);
	ts_count(s, 1);
	t->s = s;
}

/*
 * ts_detach_all - kairos_destroy(), once no call can be running on @k:
 * folds every thread's counts into the base and takes the threads off the
 * list.  Their free records are left to be unmapped with the shards; each
 * thread forgets them when it next joins a service.
 */
void ts_detach_all(struct kairos *k)
{
	thr_lock(k);
	while (k->threads)
		ts_unlink(k, k->threads);
	thr_unlock(k);
}

/*
 * ts_sum - the counts of @k's threads, with thr_lock held by the caller.
 * Cancels are read before arms: a cancel counted is then never missing its
 * arm (the canceller saw the arm's release), so pending never goes below 0.
 */
void ts_sum(struct kairos *k, uint64_t *armed, uint64_t *cancelled)
{
	uint64_t a, c = atomic_load_explicit(&k->base.cancelled, memory_order_acquire);

	for (struct tstate *t = k->threads; t; t = t->next)
		c += ts_read(&t->cancelled);
	a = atomic_load_explicit(&k->base.armed, memory_order_acquire);
	for (struct tstate *t = k->threads; t; t = t->next)
		a += ts_read(&t->armed);
	*armed = a;
	*cancelled = c;
}

/*
 * ts_collect_kept - the reclaimer's look at the cancels that @k's threads
 * keep (table_keep()): a thread hands its bundle over when it is full, when
 * the thread moves to another shard or leaves, and otherwise this takes it.
 * A bundle seen open at two looks in a row with none handed over between
 * has waited at least one look; it is taken in three steps, so that the
 * thread's calls take no lock and write no shared line:
 *   - under thr_lock, kept_steal is set: from then on the thread's cancels
 *     post their records as before and leave the bundle alone;
 *   - a grace period passes (without thr_lock, so that joins, exits and
 *     kairos_stats() do not wait that long for it): every cancel that saw
 *     kept_steal clear has returned, and every later one sees it set;
 *   - under thr_lock again, each thread still on the list with kept_steal
 *     set has its bundle handed over and kept_steal cleared (release: the
 *     thread's next look sees an empty bundle).  A thread that left between
 *     the steps handed its bundle over itself, and its ts_unlink() cleared
 *     the flag, under the same lock.
 * Returns whether a bundle may still be open; if none is, kept_watch is
 * cleared (and set again if a thread opened one meanwhile: see
 * table_keep()).
 */
bool ts_collect_kept(struct kairos *k)
{
	bool open = false, take = false;

	thr_lock(k);
	for (struct tstate *t = k->threads; t; t = t->next) {
		bool o = atomic_load_explicit(&t->kept_open, memory_order_seq_cst);
		uint32_t f = atomic_load_explicit(&t->kept_flushes, memory_order_relaxed);

		if (o && t->kept_seen_open && f == t->kept_seen_flushes) {
			/*
			 * Counted first, and the flag stored with release: a
			 * cancel that sees the flag (acquire) and posts is
			 * ordered after the count (tests read it).
			 */
			atomic_fetch_add_explicit(&k->kept_steals, 1, memory_order_relaxed);
			atomic_store_explicit(&t->kept_steal, 1, memory_order_release);
			take = true;
		}
		open |= o;
		t->kept_seen_open = o;
		t->kept_seen_flushes = f;
	}
	thr_unlock(k);
	if (take) {
		synchronize_rcu();
		thr_lock(k);
		for (struct tstate *t = k->threads; t; t = t->next) {
			if (!atomic_load_explicit(&t->kept_steal, memory_order_relaxed))
				continue;
			tsan_found(&t->kept);
			table_keep_flush(k, t);
			t->kept_seen_open = false;
			atomic_store_explicit(&t->kept_steal, 0, memory_order_release);
		}
		thr_unlock(k);
	}
	if (open)
		return true;
	atomic_store_explicit(&k->kept_watch, 0, memory_order_seq_cst);
	thr_lock(k);
	for (struct tstate *t = k->threads; t && !open; t = t->next)
		open = atomic_load_explicit(&t->kept_open, memory_order_seq_cst);
	thr_unlock(k);
	if (open)
		atomic_store_explicit(&k->kept_watch, 1, memory_order_seq_cst);
	return open;
}

void ts_lock(struct kairos *k)
{
	thr_lock(k);
}

void ts_unlock(struct kairos *k)
{
	thr_unlock(k);
}

/*
 * A child of fork() has none of its parent's services (they are dead there):
 * its one thread forgets the state it had without touching their locks,
 * which another parent thread may have held at the fork.
 */
void ts_forget(void)
{
	struct tstate *t = &tls_ts;

	ts_drop_holdings(t);
	t->s = NULL;
	t->next = t->prev = NULL;
	atomic_store_explicit(&t->armed, 0, memory_order_relaxed);
	atomic_store_explicit(&t->cancelled, 0, memory_order_relaxed);
	atomic_store_explicit(&t->k, NULL, memory_order_relaxed);
}
