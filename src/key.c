/* SPDX-License-Identifier: MIT */
/*
 * key.c - timers named by the user's own bytes.
 *
 * A service that uses keys has one lock-free hash table (liburcu's cds_lfht)
 * from a key to a node holding the id of the timer that holds it.  The
 * table is made with the first keyed arm, so a service without keys pays
 * nothing.
 *
 * kairos sizes the table itself, from the service's reclaimer thread: one
 * bucket per key or more, grown to the keys' count rounded up to a power of
 * two when they outnumber the buckets, shrunk when they fall under an
 * eighth.  liburcu's own automatic
 * resize is not used: it lets chains grow to eight nodes before it acts,
 * needs a thread of its own, and (in 0.13) can stop resizing for good when
 * its worker finishes before the launching thread marks the resize begun.
 * The node count lives in stripes that threads add to by turns; every
 * KEY_CHECK_EVERY inserts, a thread sums them and wakes the reclaimer if
 * the table is due to grow.
 *
 * Who holds a node:
 *  - The table, from the arm that inserts it until a removal: cds_lfht_del()
 *    when its timer ends, or cds_lfht_replace() by a KAIROS_KEY_REPLACE arm
 *    that takes the key over.  Either removal happens once.
 *  - The timer's ext entry (rec_ext.key), from its arm until whoever ends
 *    the timer takes it, leaving KEY_RELEASING there until the node is out
 *    of the table, then NULL: that thread, and only it, removes the node
 *    from the table (which fails harmlessly if a replace came first) and
 *    hands it to the reclaimer, which frees it after a grace period.  A
 *    second thread ending the same timer meanwhile (a cancel that returns
 *    0 while a worker retires the record) waits for KEY_RELEASING to clear,
 *    so that the key is free when either returns.  Readers that found the
 *    node inside a read-side section may look at it until that grace
 *    period ends.
 *
 * A timer ends, and releases its key, at the first of: a cancel that
 * returns 0 (kairos.c: cancel()), the claim that starts its one-shot
 * callback or hands its expiry out (before the callback runs, so that it
 * may arm the same key again), and its retirement (every other end: a
 * periodic timer stopped, a drain, a destroyed queue).
 *
 * A KAIROS_KEY_REPLACE arm hands the key over in one step as others see it.
 * It marks the holder's node as moving (lookups that meet it wait), takes
 * the node from the holder's ext entry (as the holder's own end would; if
 * the holder ended first, its ender removes the node and the arm tries
 * again), cancels the holder exactly as kairos_cancel() would (its
 * release of the key finds nothing: the arm has it), and only then puts
 * its own node in the old one's place.  So once a lookup returns the new
 * timer, the old one has ended or is past the point where a cancel could
 * stop it, and no lookup in between finds the key missing.
 *
 * A keyed arm publishes its record (PENDING | QUEUED: live, but not yet on
 * its shard's inbox) before it inserts the key, and posts it after: from
 * the moment the key maps to it, the timer can be cancelled or reset like
 * any other, and a cancel meanwhile leaves the post to the arm (timer.h).
 * An arm that finds the key held unpublishes the record, which no one else
 * could have reached.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rcu.h"
#include <urcu/rculfhash.h>

#include "fault.h"
#include "internal.h"
#include "key.h"

/* rec_ext.key while a releaser takes the node out of the table (key_release_slow()). */
#define KEY_RELEASING	((struct key_node *)(uintptr_t)1)

struct key_node {
	struct cds_lfht_node node;
	struct key_node *garbage_next;	/* on the reclaimer's list, once removed */
	kairos_id id;			/* the timer holding the key */
	/*
	 * Set by a KAIROS_KEY_REPLACE arm taking the key from this node's
	 * timer; lookups wait (a few instructions) until the node is replaced
	 * or removed, so that no one sees the hand-over half done.
	 */
	_Atomic int moving;
	uint32_t len;
	unsigned char bytes[];
};

/* What cds_lfht's match function compares a node with. */
struct key_ref {
	const void *bytes;
	size_t len;
};

#define KEY_TABLE_INIT	256	/* buckets at first, and the fewest after a shrink */
#define KEY_CHECK_EVERY	128	/* a thread's inserts between two looks at the size */

/* Which count stripe this thread adds to (0: not chosen yet), and its inserts. */
static _Thread_local unsigned key_stripe_no;
static _Thread_local unsigned key_inserts;
static atomic_uint key_stripe_next;

/* Adds @d to the table's node count, in this thread's stripe. */
static void key_count_add(struct kairos *k, long d)
{
	if (!key_stripe_no)
		key_stripe_no = atomic_fetch_add_explicit(&key_stripe_next, 1,
							  memory_order_relaxed) % KEY_STRIPES + 1;
	atomic_fetch_add_explicit(&k->key_count[key_stripe_no - 1].n, d, memory_order_relaxed);
}

/* The nodes in @k's table, give or take the adds in flight; never below 0. */
static unsigned long key_count(struct kairos *k)
{
	long n = 0;

	for (unsigned i = 0; i < KEY_STRIPES; i++)
		n += atomic_load_explicit(&k->key_count[i].n, memory_order_relaxed);
	return n > 0 ? (unsigned long)n : 0;
}

/* An insert was counted: now and then, see whether the table should grow. */
static void key_inserted(struct kairos *k)
{
	key_count_add(k, 1);
	if (++key_inserts % KEY_CHECK_EVERY == 0 &&
	    key_count(k) > atomic_load_explicit(&k->key_buckets, memory_order_relaxed))
		table_kick(k);
}

/* The smallest power of two at or above @n (at most 2^62). */
static unsigned long pow2_at_least(unsigned long n)
{
	unsigned long p = 1;

	while (p < n && p < (1UL << 62))
		p <<= 1;
	return p;
}

void key_resize(struct kairos *k)
{
	struct cds_lfht *ht = atomic_load_explicit(&k->keys, memory_order_acquire);
	unsigned long n, buckets, want;

	if (!ht)
		return;
	n = key_count(k);
	buckets = atomic_load_explicit(&k->key_buckets, memory_order_relaxed);
	if (n > buckets)
		want = pow2_at_least(n);
	else if (buckets > KEY_TABLE_INIT && n < buckets / 8)
		want = pow2_at_least(2 * n);
	else
		return;
	if (want < KEY_TABLE_INIT)
		want = KEY_TABLE_INIT;
	if (want == buckets)
		return;
	/* Lookups and updates go on meanwhile; only this thread resizes. */
	cds_lfht_resize(ht, want);
	atomic_store_explicit(&k->key_buckets, want, memory_order_relaxed);
}

static inline uint64_t rotl64(uint64_t x, unsigned r)
{
	return x << r | x >> (64 - r);
}

/* The last step of a 64-bit mix: every input bit reaches every output bit. */
static inline uint64_t avalanche(uint64_t h)
{
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	h ^= h >> 33;
	return h;
}

/*
 * The hash of a key: eight bytes at a time through a multiply and a rotate,
 * seeded per service, so that keys chosen to collide in one process do not
 * collide in another.
 */
static uint64_t key_hash(uint64_t seed, const unsigned char *p, size_t n)
{
	uint64_t h = seed ^ (n * UINT64_C(0x9e3779b97f4a7c15)), w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		h = rotl64(h ^ (w * UINT64_C(0x87c37b91114253d5)), 31) * UINT64_C(0x4cf5ad432745937f);
		p += 8;
		n -= 8;
	}
	if (n) {
		w = 0;
		memcpy(&w, p, n);
		h = rotl64(h ^ (w * UINT64_C(0x87c37b91114253d5)), 29) * UINT64_C(0x4cf5ad432745937f);
	}
	return avalanche(h);
}

static int key_match(struct cds_lfht_node *node, const void *arg)
{
	struct key_node *kn = caa_container_of(node, struct key_node, node);
	const struct key_ref *ref = arg;

	tsan_found(kn);
	return kn->len == ref->len && !memcmp(kn->bytes, ref->bytes, ref->len);
}

int key_check(const void *key, size_t len)
{
	return key && len && len <= KAIROS_KEY_MAX ? 0 : -EINVAL;
}

/*
 * The service's table, made on first use.  Outside any read-side section:
 * making it allocates and may start liburcu's resize thread.
 */
static int key_table(struct kairos *k, struct cds_lfht **out)
{
	struct cds_lfht *ht = atomic_load_explicit(&k->keys, memory_order_acquire);

	if (!ht) {
		mutex_lock(&k->key_lock);
		ht = atomic_load_explicit(&k->keys, memory_order_relaxed);
		/* Teardown takes the table under the lock, after the service died. */
		if (!ht && atomic_load_explicit(&k->dead, memory_order_acquire)) {
			mutex_unlock(&k->key_lock);
			return -ESHUTDOWN;
		}
		if (!ht) {
			/* No flags: kairos resizes it (key_resize()). */
			ht = fault_hit() ? NULL
					 : cds_lfht_new(KEY_TABLE_INIT, KEY_TABLE_INIT, 0, 0, NULL);
			if (ht) {
				atomic_store_explicit(&k->key_buckets, KEY_TABLE_INIT,
						      memory_order_relaxed);
				atomic_store_explicit(&k->keys, ht, memory_order_release);
			}
		}
		mutex_unlock(&k->key_lock);
		if (!ht)
			return -ENOMEM;
	}
	*out = ht;
	return 0;
}

int key_node_new(struct kairos *k, const void *key, size_t len, struct key_node **out)
{
	struct cds_lfht *ht;
	struct key_node *kn;
	int rc = key_table(k, &ht);

	if (rc)
		return rc;
	kn = fault_calloc(1, sizeof(*kn) + len);
	if (!kn)
		return -ENOMEM;
	cds_lfht_node_init(&kn->node);
	kn->len = (uint32_t)len;
	memcpy(kn->bytes, key, len);
	*out = kn;
	return 0;
}

void key_node_free(struct key_node *kn)
{
	free(kn);
}

void key_node_set_id(struct key_node *kn, kairos_id id)
{
	kn->id = id;
}

/* Hands a removed node to the reclaimer, which frees it after a grace period. */
static void garbage_push(struct kairos *k, struct key_node *kn)
{
	struct key_node *old = atomic_load_explicit(&k->key_garbage, memory_order_relaxed);

	key_count_add(k, -1);
	do
		kn->garbage_next = old;
	while (!atomic_compare_exchange_weak_explicit(&k->key_garbage, &old, kn,
						      memory_order_release, memory_order_relaxed));
	if (!old)
		table_kick(k);
}

/*
 * Takes @old's node away from its timer, as the timer's own end would: true
 * when this thread now owns the node's removal.  The timer's record cannot
 * be reused while the caller's read-side section lasts, and @old cannot be
 * freed, so the exchange cannot meet a later life's node at that address.
 */
static bool key_claim(struct kairos *k, struct key_node *old)
{
	struct shard *s;
	struct rec *r = table_lookup(k, old->id, &s);
	struct rec_ext *e = r ? table_ext_peek(s, table_index(s, r)) : NULL;
	struct key_node *want = old;

	return e && atomic_compare_exchange_strong_explicit(&e->key, &want, NULL,
							    memory_order_acq_rel,
							    memory_order_relaxed);
}

static int key_take_in(struct kairos *k, struct key_node *kn, bool replace)
{
	struct cds_lfht *ht = atomic_load_explicit(&k->keys, memory_order_acquire);
	struct key_ref ref = { kn->bytes, kn->len };
	unsigned long hash = (unsigned long)key_hash(k->key_seed, kn->bytes, kn->len);
	unsigned spins = 0;

	tsan_published(kn);
	for (;;) {
		struct cds_lfht_node *got = cds_lfht_add_unique(ht, hash, key_match, &ref, &kn->node);
		struct key_node *old;
		struct cds_lfht_iter it;
		int idle = 0;

		if (got == &kn->node) {
			key_inserted(k);
			return 0;
		}
		if (!replace)
			return -EEXIST;
		old = caa_container_of(got, struct key_node, node);
		/* One hand-over at a time; another replace is finishing its own. */
		if (!atomic_compare_exchange_strong_explicit(&old->moving, &idle, 1,
							     memory_order_acq_rel,
							     memory_order_relaxed)) {
			cpu_relax_n(&spins);
			continue;
		}
		if (!key_claim(k, old)) {
			/*
			 * Its timer ended first; whoever ended it removes the
			 * node (lookups wait meanwhile).  Then the key is free.
			 */
			cpu_relax_n(&spins);
			continue;
		}
		/* Exactly as kairos_cancel(): it may be running already. */
		cancel_for_key(k, old->id);
		/* This thread owns the node's removal: the replace cannot fail. */
		cds_lfht_lookup(ht, hash, key_match, &ref, &it);
		if (cds_lfht_iter_get_node(&it) != &old->node ||
		    cds_lfht_replace(ht, &it, hash, key_match, &ref, &kn->node))
			kairos_die("key hand-over lost its node");
		key_inserted(k);
		garbage_push(k, old);
		return 0;
	}
}

static int key_lookup_in(struct kairos *k, const void *key, size_t len, kairos_id *id)
{
	struct cds_lfht *ht = atomic_load_explicit(&k->keys, memory_order_acquire);
	struct key_ref ref = { key, len };
	unsigned long hash;
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;
	unsigned spins = 0;

	if (!ht)
		return -ENOENT;
	hash = (unsigned long)key_hash(k->key_seed, key, len);
	for (;;) {
		struct key_node *kn;

		cds_lfht_lookup(ht, hash, key_match, &ref, &it);
		node = cds_lfht_iter_get_node(&it);
		if (!node)
			return -ENOENT;
		kn = caa_container_of(node, struct key_node, node);
		tsan_found(kn);
		/* A hand-over in progress: wait for its end, as for a resetter. */
		if (!atomic_load_explicit(&kn->moving, memory_order_acquire)) {
			*id = kn->id;
			return 0;
		}
		cpu_relax_n(&spins);
	}
}

/*
 * Lookups and inserts read the nodes they meet (key_match(), the moving
 * flag, the id); the reclaimer frees a removed node one grace period after
 * it took it (table.c).  For TSan, each says that its reads are done,
 * inside the section, and the reclaimer's grace period orders them before
 * its frees (rcu.h).
 */
int key_take(struct kairos *k, struct key_node *kn, bool replace)
{
	int rc = key_take_in(k, kn, replace);

	tsan_key_reads_done(k);
	return rc;
}

int key_lookup(struct kairos *k, const void *key, size_t len, kairos_id *id)
{
	int rc = key_lookup_in(k, key, len, id);

	tsan_key_reads_done(k);
	return rc;
}

bool key_held(struct kairos *k, const struct key_node *kn)
{
	kairos_id id;

	return key_lookup(k, kn->bytes, kn->len, &id) == 0;
}

void key_release_slow(struct kairos *k, struct rec *r, kairos_id id)
{
	struct shard *s = rec_shard(k, r);
	struct rec_ext *e = table_ext_peek(s, table_index(s, r));
	struct key_node *kn = e ? atomic_load_explicit(&e->key, memory_order_acquire) : NULL;
	unsigned spins = 0;

	/*
	 * Take the node (it becomes KEY_RELEASING until it is out of the
	 * table), or wait for the thread that took it: a cancel that returns 0
	 * while the shard or a worker retires the same record must not return
	 * before the key is free.
	 */
	for (;;) {
		if (!kn)
			return;
		if (kn == KEY_RELEASING) {
			cpu_relax_n(&spins);
			kn = atomic_load_explicit(&e->key, memory_order_acquire);
			continue;
		}
		/*
		 * Another life's node: its release is not this caller's.  A
		 * caller that knows only @id may come after @r was retired
		 * and taken again: that later arm gives @r its generation
		 * before it stores its node (release, paired with the
		 * acquire that loaded @kn), and frees the node at once if its
		 * key turns out held (arm()).  So the generation is read
		 * before the node is.  A node of @id's own life is in the
		 * table or on its way out, freed a grace period after it
		 * left e->key: the caller's section holds it.
		 */
		if (id && (st_gen(atomic_load_explicit(&r->state, memory_order_relaxed)) !=
				   id_gen(id) ||
			   kn->id != id))
			return;
		if (atomic_compare_exchange_weak_explicit(&e->key, &kn, KEY_RELEASING,
							  memory_order_acq_rel,
							  memory_order_acquire))
			break;
	}
	/* Fails if a replace took the key first: then it is gone already. */
	rcu_read_lock();
	(void)cds_lfht_del(atomic_load_explicit(&k->keys, memory_order_relaxed), &kn->node);
	rcu_read_unlock();
	garbage_push(k, kn);
	/* Release: whoever waits sees the node gone from the table. */
	atomic_store_explicit(&e->key, NULL, memory_order_release);
}

struct key_node *key_garbage_take(struct kairos *k)
{
	return atomic_exchange_explicit(&k->key_garbage, NULL, memory_order_acquire);
}

void key_garbage_free(struct key_node *kn)
{
	while (kn) {
		struct key_node *next = kn->garbage_next;

		free(kn);
		kn = next;
	}
}

void key_teardown(struct kairos *k)
{
	struct key_node *left = key_garbage_take(k);
	struct cds_lfht *ht;
	struct cds_lfht_iter it;
	struct cds_lfht_node *node;

	mutex_lock(&k->key_lock);
	ht = atomic_exchange_explicit(&k->keys, NULL, memory_order_acq_rel);
	mutex_unlock(&k->key_lock);
	if (!ht && !left)
		return;
	/*
	 * Every timer has ended, and each removed its node; whatever is
	 * still in the table would be a leak, so it goes the same way.
	 */
	if (ht) {
		rcu_read_lock();
		cds_lfht_for_each(ht, &it, node) {
			struct key_node *kn = caa_container_of(node, struct key_node, node);

			if (cds_lfht_del(ht, node) == 0) {
				kn->garbage_next = left;
				left = kn;
			}
		}
		rcu_read_unlock();
	}
	/* No reader that saw these survives this. */
	synchronize_rcu();
	tsan_key_grace_done(k);
	key_garbage_free(left);
	if (ht && cds_lfht_destroy(ht, NULL))
		kairos_die("key table not empty at destroy");
}
