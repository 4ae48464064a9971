/* SPDX-License-Identifier: MIT */
/*
 * queue.c - expiries delivered to the user's own threads.
 *
 * A timer armed for a queue expires like any other: its shard moves it to
 * FIRING.  Instead of a worker run, the shard appends it to the queue's
 * list (one lock per pass and queue) and makes the queue's eventfd readable
 * if it was not.  A drainer (kairos_queue_run(), kairos_queue_take()) takes
 * the whole list under the lock, one pointer, and walks it outside:
 *  - FIRING: moved to RUNNING, then run here or handed out, and ended (a
 *    one-shot) or sent back to its shard for its next period;
 *  - PARKED (reset while it waited): sent back to its shard, which files it
 *    at its new deadline;
 *  - CANCELLED (cancelled while it waited): retired; the canceller counted it.
 * What a drainer does not get to (its @max) goes back to the front.
 *
 * A ring queue (kairos_queue_ring()) is drained by its own shard instead:
 * at the end of the pass that fired them, the shard claims its expiries
 * (FIRING -> RUNNING, as a drainer would) and queues one IORING_OP_MSG_RING
 * each on its own ring.  A completion ends the record (or sends a periodic
 * one on to its next period), as a callback's return would; a failed one
 * puts it back to FIRING on the list, where run and take find it.  The
 * records in flight stay on the shard's posting list until then.
 *
 * Lifetime.  A queue holds one reference for itself, dropped by
 * kairos_queue_destroy(), and one per timer armed for it that has not
 * ended; the last one frees it.  So a record never names a freed queue, and
 * destroy need not find the timers still armed for it: each ends, unrun,
 * when it expires (or is cancelled).  Drainers count themselves in @active
 * while they hold records, outside any read-side section during a callback;
 * kairos_destroy() waits for them before it stops anything.
 */
#include "rcu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "internal.h"
#include "key.h"
#include "timer.h"

static int queue_ring_swap(struct kairos_queue *q, int fd);

static qslot *slot_of(struct kairos *k, unsigned no)
{
	qslot *blk = atomic_load_explicit(&k->qdir[no / QUEUE_BLOCK], memory_order_acquire);

	return blk ? &blk[no % QUEUE_BLOCK] : NULL;
}

/* The queue numbered @no; only called for a number a live record holds. */
struct kairos_queue *queue_get(struct kairos *k, unsigned no)
{
	return atomic_load_explicit(slot_of(k, no), memory_order_acquire);
}

static void queue_free(struct kairos_queue *q)
{
	struct kairos *k = q->k;

	/* q_lock may be held for a while: kairos_queue_destroy() ends its list under it. */
	rcu_might_sleep();
	/*
	 * Under q_lock: a shard that found @q by its number and takes a
	 * reference under the lock (queue_tryget()) is done with it before
	 * the memory goes.  After teardown the slots are gone and nobody
	 * looks a number up.
	 */
	mutex_lock(&k->q_lock);
	if (!atomic_load_explicit(&k->queues_gone, memory_order_acquire))
		atomic_store_explicit(slot_of(k, q->no), NULL, memory_order_release);
	mutex_unlock(&k->q_lock);
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->ring_lock);
	pthread_cond_destroy(&q->cond);
	free(q);
}

/*
 * Takes a reference to @q, found in its slot under q_lock, unless its count
 * is 0: then it is being freed (queue_free() waits for q_lock to clear the
 * slot), and stays so.
 */
static bool queue_ref_live(struct kairos_queue *q)
{
	uint64_t refs = atomic_load_explicit(&q->refs, memory_order_relaxed);

	do {
		if (!refs)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&q->refs, &refs, refs + 1,
							memory_order_relaxed, memory_order_relaxed));
	return true;
}

struct kairos_queue *queue_tryget(struct kairos *k, unsigned no)
{
	struct kairos_queue *q;

	mutex_lock(&k->q_lock);
	q = queue_get(k, no);
	if (q && !queue_ref_live(q))
		q = NULL;
	mutex_unlock(&k->q_lock);
	return q;
}

/* Drops one reference; the last frees @q.  Never blocks but for q_lock. */
void queue_unref(struct kairos_queue *q)
{
	if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) == 1)
		queue_free(q);
}

void queue_unref_in_section(struct kairos *k, struct kairos_queue *q)
{
	struct kairos_queue *head;

	if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) != 1)
		return;
	/* Each queue comes here once (its count stays 0): no ABA on the push. */
	head = atomic_load_explicit(&k->queues_dead, memory_order_relaxed);
	do
		q->dead_next = head;
	while (!atomic_compare_exchange_weak_explicit(&k->queues_dead, &head, q,
						      memory_order_release, memory_order_relaxed));
	table_kick(k);
}

void queue_reap(struct kairos *k)
{
	struct kairos_queue *q, *next;

	/* queue_free() checks that this runs out of any section. */
	if (!atomic_load_explicit(&k->queues_dead, memory_order_relaxed))
		return;
	/* Acquire pairs with the push's release: the queue's last uses before it. */
	for (q = atomic_exchange_explicit(&k->queues_dead, NULL, memory_order_acquire); q; q = next) {
		next = q->dead_next;
		queue_free(q);
	}
}

/* The eventfd follows the list: readable iff it holds records (q->lock held). */
static void signal_set(struct kairos_queue *q)
{
	uint64_t one = 1;

	if (q->signalled)
		return;
	if (write(q->efd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
		kairos_die_err("eventfd write", errno);
	q->signalled = true;
}

static void signal_clear(struct kairos_queue *q)
{
	uint64_t n;

	if (!q->signalled)
		return;
	if (read(q->efd, &n, sizeof(n)) != sizeof(n) && errno != EAGAIN)
		kairos_die_err("eventfd read", errno);
	q->signalled = false;
}

/* Takes the whole list (q->lock held); NULL when empty. */
static struct rec *list_take(struct kairos_queue *q, struct rec **last)
{
	struct rec *first = q->head;

	*last = q->tail;
	q->head = q->tail = NULL;
	signal_clear(q);
	return first;
}

/*
 * Ends the waiting entries of @first (a queue being destroyed): counted as
 * drained.  Returns how many, those cancelled meanwhile and those a reset
 * armed again left out.
 */
static uint64_t end_chain(struct kairos *k, struct rec *first)
{
	/*
	 * A reset withdrew a PARKED entry and armed it again: it is a pending
	 * timer, not a waiting entry, and goes back to its shard, where it
	 * ends at its new deadline (or by cancel) like any timer of a closed
	 * queue.  Only a service that is going ends it here: its shards may
	 * have stopped.  Posting inside the read-side section keeps the
	 * shards up until the post is in an inbox that teardown drains.
	 */
	bool alive = service_enter(k) == 0;
	struct rec *r, *next;
	uint64_t n = 0;

	for (r = first; r; r = next) {
		struct shard *s = rec_shard(k, r);
		uint64_t old;

		next = rec_chain_next(r);
		switch (timer_claim(r, &old, !alive)) {
		case CLAIM_CANCELLED:
			table_retire(k, s, r);
			continue;
		case CLAIM_UNPARKED:
			(void)shard_post_recheck(s, r, __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED));
			continue;
		case CLAIM_RUN:
			break;
		}
		old = timer_done(r);
		atomic_fetch_add_explicit(&s->stats.drained, 1, memory_order_release);
		queue_unref(queue_get(k, rec_queue_no(r)));
		shard_end(s, r, old, NULL);
		n++;
	}
	if (alive)
		service_leave();
	return n;
}

/*
 * Puts @first..@last (chained through wt.link.next) on @q's list: at the
 * back (a shard's new expiries) or the front (what a drainer took and did
 * not get to).  A destroyed queue's are ended at once, unrun.
 */
static void list_put(struct kairos_queue *q, struct rec *first, struct rec *last, bool front)
{
	mutex_lock(&q->lock);
	if (atomic_load_explicit(&q->closed, memory_order_relaxed)) {
		mutex_unlock(&q->lock);
		(void)end_chain(q->k, first);
		return;
	}
	if (front) {
		last->wt.link.next = q->head ? &q->head->wt.link : NULL;
		q->head = first;
		if (!q->tail)
			q->tail = last;
	} else {
		rec_chain_append(&q->head, &q->tail, first, last);
	}
	signal_set(q);
	if (q->waiters)
		pthread_cond_broadcast(&q->cond);
	mutex_unlock(&q->lock);
}

/* The posting list of shard @s (records in flight, linked through wt.link). */
static void posting_add(struct shard *s, struct rec *r)
{
	struct wheel_link *l = &r->wt.link, *head = &s->posting;

	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
	s->nposting++;
}

static void posting_del(struct shard *s, struct rec *r)
{
	struct wheel_link *l = &r->wt.link;

	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->next = l->prev = NULL;
	s->nposting--;
}

/*
 * A delivery that did not happen: @r (RUNNING, on no list) is FIRING again,
 * and true says so: the caller puts it on @q's list.  A periodic timer
 * that a cancel stopped meanwhile (timer_unrun() made it CANCELLED) ends
 * here instead, counted as cancelled, and its reference to @q goes.  The
 * caller holds @q besides the record's reference: once FIRING, a cancel
 * may take the record's away.
 */
static bool post_undo(struct shard *s, struct kairos_queue *q, struct rec *r)
{
	uint64_t old;
	bool firing = timer_unrun(r, &old);

	if (old & ST_WAITERS)
		service_event(s->k);	/* cancel_sync looks again: it may cancel now */
	if (firing)
		return true;
	atomic_fetch_add_explicit(&s->stats.cancelled, 1, memory_order_release);
	queue_unref(q);
	shard_end(s, r, old, NULL);
	return false;
}

/*
 * The shard posts the expiries @first.. of ring queue @q, holding
 * ring_lock: claimed (RUNNING) and queued as CQEs, then submitted at once.
 * Returns false when @q has no ring (any more): the caller lists them.
 */
static bool ring_post(struct shard *s, struct kairos_queue *q, struct rec *first)
{
	struct kairos *k = s->k;
	struct rec *r, *next, *back = NULL, *back_last = NULL;
	int fd;

	mutex_lock(&q->ring_lock);
	fd = q->ring_fd;
	if (fd < 0) {
		mutex_unlock(&q->ring_lock);
		return false;
	}
	for (r = first; r; r = next) {
		struct rec_ext *p;
		uint64_t old;

		next = rec_chain_next(r);
		switch (timer_claim(r, &old, false)) {
		case CLAIM_CANCELLED:
			/* Cancelled since it fired: the canceller counted it. */
			table_retire(k, s, r);
			continue;
		case CLAIM_UNPARKED:
			(void)shard_post_recheck(s, r, __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED));
			continue;
		case CLAIM_RUN:
			break;
		}
		p = old & ST_PERIODIC ? table_ext(s, table_index(s, r)) : NULL;
		if (s->ops->post(s, fd, (uint64_t)(uintptr_t)r->arg,
				 p ? (uint32_t)p->fire_status : 1u, r) == 0) {
			/*
			 * A one-shot's key is free before its CQE can be seen.
			 * (Should the kernel refuse the post, the entry waits
			 * on the list without it.)
			 */
			if (!p)
				key_release(k, r);
			posting_add(s, r);
			continue;
		}
		/*
		 * No room in the ring: this one waits on the list, or ends if a
		 * cancel stopped it meanwhile (the shard holds @q: queue_hold()).
		 */
		if (post_undo(s, q, r))
			rec_chain_append(&back, &back_last, r, r);
	}
	/*
	 * A failed (or short) submit leaves posts queued, for the next wait
	 * to send; none may name @fd once the lock is released
	 * (queue_ring_swap() may close it then): those fail, and wait on the
	 * list.
	 */
	(void)s->ops->submit(s);
	s->ops->unsend(s, fd);
	mutex_unlock(&q->ring_lock);
	if (back)
		list_put(q, back, back_last, false);
	return true;
}

/* A shard hands its expiries for @q, collected over a pass. */
void queue_append(struct shard *s, struct kairos_queue *q, struct rec *first, struct rec *last)
{
	/* The fd is read again under the lock; a stale -1 only lists a few. */
	if (s->ops->post && __atomic_load_n(&q->ring_fd, __ATOMIC_RELAXED) >= 0 &&
	    !atomic_load_explicit(&q->closed, memory_order_relaxed) && ring_post(s, q, first))
		return;
	list_put(q, first, last, false);
}

/*
 * queue_posted - the completion of @r's CQE post, on its shard's thread:
 * posted (@res >= 0), it is delivered, and ends as a run callback would;
 * otherwise it waits on its queue's list.
 */
void queue_posted(struct shard *s, struct rec *r, int res)
{
	struct kairos *k = s->k;
	struct kairos_queue *q = queue_get(k, rec_queue_no(r));
	bool periodic;
	uint64_t old;
	int status;

	posting_del(s, r);
	if (res < 0) {
		/*
		 * The shard holds @q while it undoes the post (the record's own
		 * reference, which keeps the count above 0 here, may go with a
		 * cancel once the record is FIRING again), and lets it go out
		 * of any section, so that a destroyed queue is freed here, not
		 * under a list or a section of the undo.
		 */
		queue_ref(q);
		if (post_undo(s, q, r))
			list_put(q, r, r, false);
		queue_unref(q);
		return;
	}
	periodic = atomic_load_explicit(&r->state, memory_order_relaxed) & ST_PERIODIC;
	(void)expiry_begin(k, s, &s->own, r, periodic, false, &status);
	if (periodic) {
		atomic_fetch_add_explicit(&s->own.periodic_runs, 1, memory_order_relaxed);
		worker_rearm(s, r);
		return;
	}
	atomic_fetch_add_explicit(&s->own.fired, 1, memory_order_relaxed);
	old = timer_done(r);
	s->itally.finished++;
	queue_unref(q);
	shard_end(s, r, old, &s->itally.rb);
	worker_tally_flush(s, &s->itally);
}

/*
 * queue_posts_abandon - the shard's ring is going (it stops, or io_uring
 * stopped working) with posts in flight.  The last @unsent were never taken
 * by the kernel: they go back to their queues' lists.  The others were
 * taken, and the kernel posts their CQEs when the ring's owner next runs:
 * they end as delivered.
 */
void queue_posts_abandon(struct shard *s, size_t unsent)
{
	while (s->nposting) {
		/* wt.link is the record's first member. */
		struct rec *r = (struct rec *)(void *)s->posting.next;

		queue_posted(s, r, s->nposting > unsent ? 0 : -ECANCELED);
	}
}

/*
 * What one drain ends, counted and retired per shard in a row, not per
 * record: the shard's counters are lines its own threads write too.  The
 * ends and retires are a worker's tally (struct wtally).
 */
struct qtally {
	struct shard *s;
	uint64_t fired, runs;
	struct wtally w;
};

static void qtally_flush(struct qtally *t)
{
	struct shard *s = t->s;

	if (!s)
		return;
	if (t->fired)
		atomic_fetch_add_explicit(&s->own.fired, t->fired, memory_order_relaxed);
	if (t->runs)
		atomic_fetch_add_explicit(&s->own.periodic_runs, t->runs, memory_order_relaxed);
	t->fired = t->runs = 0;
	worker_tally_flush(s, &t->w);
}

static void qtally_use(struct qtally *t, struct shard *s)
{
	if (t->s != s) {
		qtally_flush(t);
		t->s = s;
	}
}

/*
 * One expiry this thread claimed (RUNNING, *@old the word before): runs its
 * callback (@out NULL) or fills *@out, then ends it or sends it back for
 * its next period.  Called inside the read-side section; a callback runs
 * outside it.
 */
static void expiry_finish(struct kairos_queue *q, struct rec *r, uint64_t old,
			  struct kairos_expiry *out, struct qtally *t)
{
	struct kairos *k = q->k;
	struct shard *s = t->s;
	bool periodic = old & ST_PERIODIC;
	kairos_id id = shard_rec_id(s, r, old);
	int status;
	/* The periods that passed while a periodic entry waited join this call. */
	uint64_t deadline_ns = expiry_begin(k, s, &s->own, r, periodic, true, &status);

	if (periodic)
		t->runs++;
	else
		t->fired++;

	if (out) {
		/* Every field, the reserved words too (0): see struct kairos_expiry. */
		*out = (struct kairos_expiry){
			.id = id,
			.fn = r->fn,
			.arg = r->arg,
			.deadline_ns = deadline_ns,
			.status = status,
		};
	} else if (r->fn) {
		struct cb_frame f;

		/* As on a worker: its own cancel_sync and kairos_destroy() say -EDEADLK. */
		cb_enter(&f, k, id);
		rcu_read_unlock();
		r->fn(r->arg, id, status);
		rcu_read_lock();
		cb_leave(&f);
	}

	if (periodic) {
		worker_rearm(s, r);
		return;
	}
	old = timer_done(r);
	t->w.finished++;
	queue_unref(q);
	shard_end(s, r, old, &t->w.rb);
}

/*
 * Runs (@out NULL) or takes up to @max expiries of @q.  Returns how many,
 * or -ESHUTDOWN.
 */
static int drain(struct kairos_queue *q, struct kairos_expiry *out, unsigned max)
{
	struct kairos *k = q->k;
	struct qtally t = { 0 };
	unsigned n = 0;

	if (service_enter(k))
		return -ESHUTDOWN;
	/* seq_cst pairs with queue_teardown_wait(): it sees this, or this sees dead. */
	atomic_fetch_add_explicit(&q->active, 1, memory_order_seq_cst);
	/* Held while records are: a callback may destroy the queue. */
	queue_ref(q);
	/*
	 * A destroy begun meanwhile waits for this call (queue_teardown_wait())
	 * while the shards still fill the list: the call stops taking, or a
	 * large @max on a busy queue would keep it, and the destroy, going.
	 */
	while (n < max && !atomic_load_explicit(&k->dead, memory_order_relaxed)) {
		struct rec *r, *last, *next;

		/*
		 * Inside the section: a short lock, whose every holder only
		 * moves list links under it (a waiter in take sleeps on the
		 * condition with it released), documented in kairos(3).
		 */
		mutex_lock(&q->lock);
		r = list_take(q, &last);
		mutex_unlock(&q->lock);
		if (!r)
			break;
		/* A test holds here, this list in hand, and destroys the queue (fault.h). */
		if (__builtin_expect(atomic_load_explicit(&fault_take_hold, memory_order_relaxed), 0))
			fault_hold(&fault_take_hold, &fault_take_held);
		for (; r; r = next) {
			uint64_t old;

			/*
			 * A callback (or another thread) destroyed the queue:
			 * what this call had not reached ends unrun, as the
			 * destroy ended what was still waiting.  Once the
			 * service's destroy has begun, it goes back on the
			 * list, for that destroy to drain.
			 */
			if (n == max || atomic_load_explicit(&q->closed, memory_order_relaxed) ||
			    atomic_load_explicit(&k->dead, memory_order_relaxed)) {
				list_put(q, r, last, true);
				break;
			}
			next = rec_chain_next(r);
			if (next)
				__builtin_prefetch(next, 1);
			qtally_use(&t, rec_shard(k, r));
			switch (timer_claim(r, &old, false)) {
			case CLAIM_CANCELLED:
				rbundle_add(k, t.s, &t.w.rb, r);
				break;
			case CLAIM_UNPARKED:
				/* Never waits: only arms do. */
				(void)shard_post_recheck(t.s, r, __atomic_load_n(&r->wt.deadline,
									 __ATOMIC_RELAXED));
				break;
			case CLAIM_RUN:
				expiry_finish(q, r, old, out ? &out[n] : NULL, &t);
				n++;
				break;
			}
		}
	}
	qtally_flush(&t);
	atomic_fetch_sub_explicit(&q->active, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&k->dead, memory_order_seq_cst))
		service_event(k);
	service_leave();
	queue_unref(q);
	return (int)n;
}

KAIROS_EXPORT int kairos_queue_create(struct kairos *k, struct kairos_queue **out)
{
	pthread_condattr_t ca;
	struct kairos_queue *q;
	int rc = 0, err;

	if (!k)
		return -EINVAL;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (!out)
		return -EINVAL;
	q = fault_hit() ? NULL : aligned_alloc(CACHELINE, sizeof(*q));
	if (!q)
		return -ENOMEM;
	memset(q, 0, sizeof(*q));
	q->k = k;
	q->ring_fd = -1;
	atomic_init(&q->refs, 1);
	q->efd = fault_hit() ? (errno = EMFILE, -1) : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->efd < 0) {
		rc = -errno;
		free(q);
		return rc;
	}
	err = pthread_mutex_init(&q->lock, NULL);
	if (!err)
		err = pthread_mutex_init(&q->ring_lock, NULL);
	if (!err)
		err = pthread_condattr_init(&ca);
	if (err)
		kairos_die_err("pthread_mutex_init", err);	/* cannot fail with default attributes */
	/* kairos_queue_take() waits against CLOCK_MONOTONIC. */
	err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!err)
		err = pthread_cond_init(&q->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (err)
		kairos_die_err("pthread_cond_init", err);

	mutex_lock(&k->q_lock);
	if (atomic_load_explicit(&k->dead, memory_order_acquire)) {
		rc = -ESHUTDOWN;
		goto out;
	}
	rc = -ENOSPC;
	for (unsigned d = 0; d < QUEUE_DIRS && rc == -ENOSPC; d++) {
		qslot *blk = atomic_load_explicit(&k->qdir[d], memory_order_relaxed);

		if (!blk) {
			blk = fault_calloc(QUEUE_BLOCK, sizeof(*blk));
			if (!blk) {
				rc = -ENOMEM;
				break;
			}
			atomic_store_explicit(&k->qdir[d], blk, memory_order_release);
		}
		/* Number 0 means "no queue" in a record. */
		for (unsigned i = d ? 0 : 1; i < QUEUE_BLOCK; i++) {
			if (!atomic_load_explicit(&blk[i], memory_order_relaxed)) {
				q->no = d * QUEUE_BLOCK + i;
				/* The lowest free number: a queue takes a gone one's shard. */
				q->shard = (q->no - 1) % k->nshards;
				atomic_store_explicit(&blk[i], q, memory_order_release);
				rc = 0;
				break;
			}
		}
	}
out:
	mutex_unlock(&k->q_lock);
	if (rc) {
		close(q->efd);
		pthread_mutex_destroy(&q->lock);
		pthread_mutex_destroy(&q->ring_lock);
		pthread_cond_destroy(&q->cond);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

KAIROS_EXPORT int kairos_queue_destroy(struct kairos_queue *q)
{
	struct kairos *k;
	struct rec *first, *last;
	uint64_t n = 0;

	if (!q)
		return -EINVAL;
	k = q->k;
	/*
	 * In a child of fork(), a parent thread may have held either lock at
	 * the fork: the queue stays, as its service does (kairos_destroy()).
	 */
	if (atomic_load_explicit(&k->forked, memory_order_relaxed))
		return -ESHUTDOWN;
	mutex_lock(&k->q_lock);
	mutex_lock(&q->lock);
	if (atomic_load_explicit(&q->closed, memory_order_relaxed)) {
		mutex_unlock(&q->lock);
		mutex_unlock(&k->q_lock);
		return -EINVAL;
	}
	atomic_store_explicit(&q->closed, true, memory_order_relaxed);
	first = list_take(q, &last);
	pthread_cond_broadcast(&q->cond);
	mutex_unlock(&q->lock);
	/* After kairos_destroy() the list is empty: its teardown ended all. */
	n = end_chain(k, first);
	mutex_unlock(&k->q_lock);
	close(q->efd);
	(void)queue_ring_swap(q, -1);
	queue_unref(q);
	return n > INT_MAX ? INT_MAX : (int)n;
}

/* Puts @fd (or -1) in place of @q's ring fd, and closes the one it replaces. */
static int queue_ring_swap(struct kairos_queue *q, int fd)
{
	int old;

	mutex_lock(&q->ring_lock);
	old = q->ring_fd;
	__atomic_store_n(&q->ring_fd, fd, __ATOMIC_RELAXED);
	mutex_unlock(&q->ring_lock);
	if (old >= 0)
		close(old);
	return 0;
}

/*
 * Whether @fd, known to be open, is an io_uring ring; true when /proc cannot
 * tell (not mounted, in a chroot or a small container): the posts to a fd
 * that is not a ring then fail, each waiting on the queue's list.
 */
static bool is_ring(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return true;
	link[n] = '\0';
	return strcmp(link, "anon_inode:[io_uring]") == 0;
}

/* IORING_REGISTER_PROBE of ring @fd into @p (zeroed, room for 256 ops). */
static int probe_ring_fd(int fd, struct io_uring_probe *p)
{
	long rc = syscall(__NR_io_uring_register, fd, IORING_REGISTER_PROBE, p, 256);

	return rc < 0 ? -errno : 0;
}

/* A probe that could not be made: its errno when it is worth a retry, else -EOPNOTSUPP. */
static int probe_failed(int rc)
{
	return rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE ? rc : -EOPNOTSUPP;
}

/*
 * 0 when the kernel has IORING_OP_MSG_RING, -EOPNOTSUPP when it has not.
 * Probed on the caller's ring @ring_fd (which needs no descriptor), or,
 * where that ring refuses (another thread's single-issuer ring, a
 * restricted one), on a small ring of its own.  Only an answer is kept for
 * the process: a probe that could not be made (no memory, no descriptor)
 * returns its errno and the next call probes again.
 */
static int msg_ring_probe(int ring_fd)
{
	static _Atomic int known;	/* 0: not probed; 1: yes; -1: no */
	size_t size = sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op);
	int v = atomic_load_explicit(&known, memory_order_relaxed);
	struct io_uring_probe *p;
	struct io_uring ring;
	int rc;

	if (v)
		return v > 0 ? 0 : -EOPNOTSUPP;
	p = fault_calloc(1, size);
	if (!p)
		return -ENOMEM;
	rc = probe_ring_fd(ring_fd, p);
	if (rc) {
		memset(p, 0, size);
		rc = io_uring_queue_init(2, &ring, 0);
		if (rc) {
			/* No ring of its own: no answer (an -EINVAL here is not one). */
			free(p);
			return probe_failed(rc);
		}
		rc = probe_ring_fd(ring.ring_fd, p);
		io_uring_queue_exit(&ring);
	}
	/* -EINVAL: a kernel without the probe (before 5.6), so without MSG_RING. */
	if (!rc)
		v = io_uring_opcode_supported(p, IORING_OP_MSG_RING) ? 1 : -1;
	else if (rc == -EINVAL)
		v = -1;
	free(p);
	if (v) {
		atomic_store_explicit(&known, v, memory_order_relaxed);
		return v > 0 ? 0 : -EOPNOTSUPP;
	}
	return probe_failed(rc);
}

KAIROS_EXPORT int kairos_queue_ring(struct kairos_queue *q, int ring_fd)
{
	const struct backend_report *rep;
	struct kairos *k;
	int dup, rc;

	if (!q)
		return -EINVAL;
	k = q->k;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (atomic_load_explicit(&q->closed, memory_order_relaxed))
		return -EINVAL;
	if (ring_fd < 0)
		return queue_ring_swap(q, -1);
	if (fcntl(ring_fd, F_GETFD) < 0 || !is_ring(ring_fd))
		return -EBADF;
	rc = msg_ring_probe(ring_fd);
	if (rc)
		return rc;
	rc = service_enter(k);
	if (rc)
		return rc;
	rep = atomic_load_explicit(&k->shards[q->shard]->rep, memory_order_acquire);
	rc = rep->name == backend_uring_ops.name ? 0 : -EOPNOTSUPP;
	service_leave();
	if (rc)
		return rc;
	dup = fault_hit() ? (errno = EMFILE, -1) : fcntl(ring_fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0)
		return -errno;
	return queue_ring_swap(q, dup);
}

KAIROS_EXPORT int kairos_queue_shard(const struct kairos_queue *q)
{
	if (!q)
		return -EINVAL;
	if (atomic_load_explicit(&q->closed, memory_order_relaxed))
		return -EINVAL;
	return (int)q->shard;
}

KAIROS_EXPORT int kairos_queue_fd(struct kairos_queue *q)
{
	if (!q)
		return -EINVAL;
	if (atomic_load_explicit(&q->closed, memory_order_relaxed))
		return -EINVAL;
	return q->efd;
}

KAIROS_EXPORT int kairos_queue_run(struct kairos_queue *q, unsigned max)
{
	if (!q)
		return -EINVAL;
	if (atomic_load_explicit(&q->k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (!max)
		return -EINVAL;
	return drain(q, NULL, max > INT_MAX ? INT_MAX : max);
}

/* Waits until @q's list may hold records, @deadline (0: none) or the end. */
static void take_wait(struct kairos_queue *q, uint64_t deadline)
{
	struct kairos *k = q->k;

	mutex_lock(&q->lock);
	while (!q->head && !atomic_load_explicit(&q->closed, memory_order_relaxed) &&
	       !atomic_load_explicit(&k->dead, memory_order_acquire)) {
		int err;

		q->waiters++;
		if (deadline) {
			struct timespec ts = {
				.tv_sec = (time_t)(deadline / 1000000000u),
				.tv_nsec = (long)(deadline % 1000000000u),
			};

			rcu_might_sleep();
			err = pthread_cond_timedwait(&q->cond, &q->lock, &ts);
		} else {
			rcu_might_sleep();
			err = pthread_cond_wait(&q->cond, &q->lock);
		}
		q->waiters--;
		if (err == ETIMEDOUT)
			break;
		if (err)
			kairos_die_err("pthread_cond_wait", err);
	}
	mutex_unlock(&q->lock);
}

KAIROS_EXPORT int kairos_queue_take(struct kairos_queue *q, struct kairos_expiry *out,
				    unsigned max, int64_t timeout_ns)
{
	uint64_t deadline = 0;
	int n;

	if (!q)
		return -EINVAL;
	if (atomic_load_explicit(&q->k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (!out || !max)
		return -EINVAL;
	if (max > INT_MAX)
		max = INT_MAX;
	if (timeout_ns > 0 &&
	    clock_add_overflows(clock_now_ns(CLOCK_MONOTONIC), (uint64_t)timeout_ns, &deadline))
		deadline = 0;	/* centuries: the same as no limit */
	/*
	 * A reference for the call (the queue's own is there as it starts): a
	 * kairos_queue_destroy() while this waits leaves @q closed, not freed,
	 * and the wait ends with -EINVAL.  Let go out of any section.
	 */
	queue_ref(q);
	for (;;) {
		n = drain(q, out, max);
		if (n || timeout_ns == 0)
			break;
		if (deadline && clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			break;
		if (atomic_load_explicit(&q->closed, memory_order_relaxed)) {
			n = -EINVAL;
			break;
		}
		take_wait(q, deadline);
	}
	queue_unref(q);
	return n;
}

/*
 * kairos_destroy(), after every call that saw the service alive has left
 * its read-side section: waits for the drainers still at work (outside a
 * section while a callback runs), and wakes every waiting taker.
 */
void queue_teardown_wait(struct kairos *k)
{
	struct kairos_queue *held[64];

	for (unsigned d = 0; d < QUEUE_DIRS; d++) {
		for (unsigned base = 0; base < QUEUE_BLOCK; base += 64) {
			unsigned nheld = 0;

			/* A reference each, so no destroy frees them while this waits. */
			mutex_lock(&k->q_lock);
			qslot *blk = atomic_load_explicit(&k->qdir[d], memory_order_relaxed);

			for (unsigned i = base; blk && i < base + 64; i++) {
				struct kairos_queue *q = atomic_load_explicit(&blk[i],
									      memory_order_relaxed);

				if (q && queue_ref_live(q))
					held[nheld++] = q;
			}
			mutex_unlock(&k->q_lock);
			for (unsigned i = 0; i < nheld; i++) {
				struct kairos_queue *q = held[i];

				mutex_lock(&q->lock);
				pthread_cond_broadcast(&q->cond);
				mutex_unlock(&q->lock);
				for (;;) {
					uint32_t seq = atomic_load_explicit(&k->ev_seq,
									    memory_order_seq_cst);

					if (!atomic_load_explicit(&q->active, memory_order_seq_cst))
						break;
					futex_wait32(&k->ev_seq, seq);
				}
				queue_unref(q);
			}
		}
	}
}

/*
 * kairos_destroy(), once the shards have stopped and drained: ends what
 * every queue still holds (dropped or notified, as the shards' records),
 * then lets go of the queue numbers.  The queues themselves stay until
 * their kairos_queue_destroy().
 */
void queue_teardown_drain(struct kairos *k, int how, uint64_t *count)
{
	struct rec *all = NULL, *tail = NULL;

	mutex_lock(&k->q_lock);
	for (unsigned d = 0; d < QUEUE_DIRS; d++) {
		qslot *blk = atomic_load_explicit(&k->qdir[d], memory_order_relaxed);

		for (unsigned i = 0; blk && i < QUEUE_BLOCK; i++) {
			struct kairos_queue *q = atomic_load_explicit(&blk[i], memory_order_relaxed);
			struct rec *first, *last;

			if (!q)
				continue;
			mutex_lock(&q->lock);
			first = list_take(q, &last);
			mutex_unlock(&q->lock);
			if (first)
				rec_chain_append(&all, &tail, first, last);
		}
	}
	mutex_unlock(&k->q_lock);
	/* Outside the lock: a notified callback may destroy its queue. */
	for (struct rec *r = all, *next; r; r = next) {
		next = rec_chain_next(r);
		shard_drain_one(k, rec_shard(k, r), r, how, count, NULL);
	}
	mutex_lock(&k->q_lock);
	atomic_store_explicit(&k->queues_gone, true, memory_order_release);
	for (unsigned d = 0; d < QUEUE_DIRS; d++) {
		free(atomic_load_explicit(&k->qdir[d], memory_order_relaxed));
		atomic_store_explicit(&k->qdir[d], NULL, memory_order_relaxed);
	}
	mutex_unlock(&k->q_lock);
}
