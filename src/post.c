/* SPDX-License-Identifier: MIT */
/*
 * post.c - how records reach their shard: one ring per (calling thread,
 * shard), and the shared inbox behind them.
 *
 * A post (a new timer, a cancel, an earlier deadline) is a record pointer
 * the shard must look at.  A thread that is on the service (thread.c) posts
 * to a single-producer ring of its own for that shard: a plain store of the
 * pointer and a release store of the ring's tail, both on lines only this
 * thread writes.  The shard drains every ring on each pass, reading the
 * pointers ahead of the records so that their cache misses overlap, where a
 * linked inbox makes it chase one miss after another.
 *
 * The shared inbox (shard.c) stays for everything else: threads that are
 * not on the service, workers re-arming periodic timers, a ring that is
 * full or could not be allocated.
 *
 * Rings are the shard's: it frees them, once the thread has left (the ring
 * is marked orphaned) and the ring is empty, or when the service ends.  The
 * thread keeps only an array of pointers to them, which it frees itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "internal.h"

/* The ring of @t for @s, made on first use; NULL when it cannot be made. */
static struct post_ring *ring_of(struct tstate *t, struct shard *s)
{
	struct post_ring **rings = atomic_load_explicit(&t->rings, memory_order_relaxed);
	struct post_ring *ring, *old;

	if (!rings)
		return NULL;
	ring = rings[s->index];
	if (ring)
		return ring;
	ring = fault_hit() ? NULL : aligned_alloc(CACHELINE, sizeof(*ring));
	if (!ring) {
		/* Not again for this shard: the inbox does the job, only slower. */
		rings[s->index] = POST_RING_NONE;
		return NULL;
	}
	memset(ring, 0, sizeof(*ring));
	/* Rings are only ever added at the head; the shard alone removes them. */
	old = atomic_load_explicit(&s->rings, memory_order_relaxed);
	do {
		atomic_store_explicit(&ring->next, old, memory_order_relaxed);
	} while (!atomic_compare_exchange_weak_explicit(&s->rings, &old, ring,
							memory_order_release,
							memory_order_relaxed));
	rings[s->index] = ring;
	return ring;
}

/*
 * post_ring_push - puts @r on @t's ring for @s.  Returns false when the
 * record must go to the inbox instead (no ring, or a full one).  The caller
 * orders the store before its look at the shard's sleep_tick (shard_post()).
 */
bool post_ring_push(struct tstate *t, struct shard *s, struct rec *r)
{
	struct post_ring *ring = ring_of(t, s);
	uint32_t tail, held;

	if (!ring || ring == POST_RING_NONE)
		return false;
	tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
	held = tail - ring->head_seen;
	if (held >= POST_RING_SLOTS) {
		/* Acquire: the shard is done with the slots it has passed. */
		ring->head_seen = atomic_load_explicit(&ring->head, memory_order_acquire);
		held = tail - ring->head_seen;
		if (held >= POST_RING_SLOTS)
			return false;
	}
	ring->slot[tail % POST_RING_SLOTS] = r;
	/* Release: the slot (and the record's fields) before the tail. */
	atomic_store_explicit(&ring->tail, tail + 1, memory_order_release);
	return true;
}

/*
 * post_rings_empty - whether every ring of @s is empty: the shard's last look
 * before it sleeps, after its seq_cst store of sleep_tick (see shard_post()).
 */
bool post_rings_empty(struct shard *s)
{
	for (struct post_ring *ring = atomic_load_explicit(&s->rings, memory_order_seq_cst); ring;
	     ring = atomic_load_explicit(&ring->next, memory_order_relaxed))
		if (atomic_load_explicit(&ring->tail, memory_order_seq_cst) !=
		    atomic_load_explicit(&ring->head, memory_order_relaxed))
			return false;
	return true;
}

/* How far ahead of the record it files the shard loads a posted record. */
#define DRAIN_AHEAD	8

/*
 * post_rings_drain - the shard takes every ring's posts, calling @one for
 * each, and frees the rings whose threads have left.  Returns whether there
 * was any post.
 */
bool post_rings_drain(struct shard *s, void (*one)(struct shard *, struct rec *, void *),
		      void *ctx)
{
	struct post_ring *prev = NULL;
	struct post_ring *ring = atomic_load_explicit(&s->rings, memory_order_acquire);
	bool any = false;

	while (ring) {
		struct post_ring *next = atomic_load_explicit(&ring->next, memory_order_relaxed);
		/* Orphaned is read first: then the tail holds its thread's last post. */
		bool orphan = atomic_load_explicit(&ring->orphan, memory_order_acquire);
		uint32_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
		/* Acquire pairs with the producer's release of the tail. */
		uint32_t tail = atomic_load_explicit(&ring->tail, memory_order_acquire);

		if (head != tail) {
			any = true;
			for (uint32_t i = head; i != tail && i - head < DRAIN_AHEAD; i++)
				__builtin_prefetch(ring->slot[i % POST_RING_SLOTS], 1);
			for (uint32_t i = head; i != tail; i++) {
				if (tail - i > DRAIN_AHEAD)
					__builtin_prefetch(ring->slot[(i + DRAIN_AHEAD) % POST_RING_SLOTS], 1);
				one(s, ring->slot[i % POST_RING_SLOTS], ctx);
			}
			/* Release: the slots are free again once the producer sees this. */
			atomic_store_explicit(&ring->head, tail, memory_order_release);
		}
		/*
		 * Producers add rings at the head of the list, so only a ring
		 * behind another can be unlinked without racing them; an
		 * orphaned head waits until a newer ring is added, or the end.
		 */
		if (orphan && prev) {
			atomic_store_explicit(&prev->next, next, memory_order_relaxed);
			free(ring);
		} else {
			prev = ring;
		}
		ring = next;
	}
	return any;
}

/* post_rings_free - at the end of the service: every ring, drained or not. */
void post_rings_free(struct shard *s)
{
	struct post_ring *ring = atomic_exchange_explicit(&s->rings, NULL, memory_order_acquire);

	while (ring) {
		struct post_ring *next = atomic_load_explicit(&ring->next, memory_order_relaxed);

		free(ring);
		ring = next;
	}
}

/* post_rings_leave - a thread leaves: its @rings are the shards' to free now. */
void post_rings_leave(struct post_ring **rings, unsigned nshards)
{
	for (unsigned i = 0; i < nshards; i++) {
		struct post_ring *ring = rings[i];

		if (ring && ring != POST_RING_NONE)
			atomic_store_explicit(&ring->orphan, 1, memory_order_release);
	}
}
