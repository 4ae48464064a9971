/* SPDX-License-Identifier: MIT */
/*
 * keys.c - the key mix of kairos-stress: one-shot timers named by
 * keys, set, moved, removed and looked up from many threads, and checked
 * against the contract of kairos_arm_opts(3) and kairos_key_find(3).
 *
 * A key step (the mix's "key") picks a key and one call on it:
 *
 *	set       kairos_arm_opts with the key, a free slot's new timer
 *	replace   the same with KAIROS_KEY_REPLACE
 *	move      kairos_key_reset
 *	remove    kairos_key_cancel
 *	find      kairos_key_find
 *
 * Keyed timers are one-shot and go to the service's workers; a set picks a
 * short or an idle delay as a plain arm does, and the timer joins its slot's
 * thread's live list, so that id calls (reset, cancel, cancel_sync) and
 * reaps reach it too.  There are two kinds of keys:
 *
 * Own keys (--keys per thread): only the owning thread calls on them, so it
 * knows the key's holder (the timer it last armed with the key) and every
 * answer is checked exactly.  The holder is in one of three states for the
 * tool: held (not seen to be claimed), releasing (a call said it is firing:
 * the key goes at the claim that starts its callback, before the callback
 * runs), or gone (its callback was seen to start, or it ended).  And a held
 * holder whose deadline is still ahead when a call returns was pending
 * throughout the call: its key must be found, a plain set must say -EEXIST,
 * a move and a remove must return 0, a REPLACE set must cancel it.  A key
 * that no timer holds must be free: -ENOENT to find, move and remove, 0 to
 * a set.  After a REPLACE set the old holder is settled at once with
 * kairos_cancel_sync(): cancelled (it never runs; counted as cancelled), or
 * it ran because it was firing already.
 *
 * Shared keys (--shared-keys): every thread sets, moves, removes and finds
 * them, so their holders change under everyone's feet.  A shared key's
 * timer still lives in its arming thread's slot; that owner learns that a
 * key call of anyone's ended it only when an id call says -ENOENT, and then
 * settles it with kairos_cancel_sync(): a timer that has not run by then
 * never will, and was ended by a key call ("stolen").  What is checked:
 *  - every timer ends once: runs, a cancel of its owner, stolen, or drained;
 *    a stolen timer never runs; armed == fired + cancelled (stolen and
 *    replaced included) + drained, against kairos_stats();
 *  - per key, the stolen timers are accounted for by the key calls on it:
 *    key_cancel 0s <= stolen <= key_cancel 0s + REPLACE sets;
 *  - a timer found holding a key before a set that took the key or a remove
 *    is no longer pending after it (probe_check());
 *  - an arm refused with -EEXIST leaves no timer (no callback, no count);
 *    a REPLACE set never says -EEXIST; a move never says -EBUSY;
 *  - never early: no callback before the least of its owner's last bound
 *    and the earliest deadline a move of its key could have set (the clock
 *    read before the first move in flight when it was armed, or the arm's
 *    own clock read, plus the shortest move: key_floor()).  Its lateness is
 *    not measured: a move may have pushed it later.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "stress.h"

const char *const key_op_names[K_NOPS] = {
	[K_SET] = "set",
	[K_REPLACE] = "set REPLACE",
	[K_MOVE] = "move",
	[K_REMOVE] = "remove",
	[K_FIND] = "find",
};

#define KEY_LEN_MIN	4	/* the key's number, little-endian */

/*
 * The bytes of key number @g: its number, then filler to a length of 4 to
 * KAIROS_KEY_MAX bytes, mostly short (three keys in four are at most 24).
 */
void key_bytes(uint32_t g, unsigned char *buf, size_t *len)
{
	uint32_t h = g * UINT32_C(2654435761);
	size_t n = (h >> 30) ? KEY_LEN_MIN + (h >> 8) % 21
			     : KEY_LEN_MIN + (h >> 8) % (KAIROS_KEY_MAX - KEY_LEN_MIN + 1);

	buf[0] = (unsigned char)g;
	buf[1] = (unsigned char)(g >> 8);
	buf[2] = (unsigned char)(g >> 16);
	buf[3] = (unsigned char)(g >> 24);
	for (size_t i = KEY_LEN_MIN; i < n; i++)
		buf[i] = (unsigned char)('a' + (g + i) % 26);
	*len = n;
}

int keys_setup(void)
{
	size_t n = (size_t)S.cfg.threads * S.cfg.shared_keys;

	if (!S.cfg.shared_keys)
		return 0;
	S.skeys = aligned_alloc(ST_ALIGN, sizeof(*S.skeys) * S.cfg.shared_keys);
	S.kmoving = calloc(n, sizeof(*S.kmoving));
	if (!S.skeys || !S.kmoving)
		return -ENOMEM;
	memset(S.skeys, 0, sizeof(*S.skeys) * S.cfg.shared_keys);
	return 0;
}

static bool key_shared(uint32_t g)
{
	return g < S.cfg.shared_keys;
}

/* Own key @g's entry in its thread's table: the holder's slot + 1, or 0. */
static uint32_t *held_ref(struct lthread *t, uint32_t g)
{
	return &t->kheld[g - S.cfg.shared_keys - t->no * S.cfg.keys];
}

/* Slot @idx's timer has ended: if it held its own key, no timer does now. */
void key_forget(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint32_t *h;

	if (!s->key || (s->oflags & O_SHARED))
		return;
	h = held_ref(t, s->key - 1);
	if (*h == idx + 1)
		*h = 0;
}

/* No callback of slot @s's timer may start before this. */
uint64_t key_bound(const struct slot *s)
{
	if ((s->oflags & O_SHARED) && s->kfloor < s->bound)
		return s->kfloor;
	return s->bound;
}

/*
 * key_floor - the earliest deadline that a move (kairos_key_reset) of
 * shared key @g may give a timer armed after this returns.  A move that
 * reaches that timer finds it in the table, so it was in flight when this
 * looked, or began later; in flight, it published the clock read before
 * its call (struct stress.kmoving: 1 while it reads it); begun later, its
 * clock read comes after this one's.  Either way its deadline is that
 * read plus at least the shortest move delay (--idle's lower end).
 */
static uint64_t key_floor(uint32_t g)
{
	uint64_t floor = service_now();

	/* The clock read above comes before the loads below. */
	atomic_thread_fence(memory_order_seq_cst);
	for (unsigned u = 0; u < S.cfg.threads; u++) {
		_Atomic uint64_t *w = &S.kmoving[(size_t)u * S.cfg.shared_keys + g];
		uint64_t v;

		/*
		 * 1: a move is reading its clock.  Wait for the value; a move
		 * that ended meanwhile (0) could not reach a timer not yet armed.
		 */
		while ((v = atomic_load_explicit(w, memory_order_seq_cst)) == 1)
			sched_yield();
		if (v && v < floor)
			floor = v;
	}
	return floor + S.cfg.idle.lo;
}

static void kcount(struct lthread *t, bool shared, enum key_op op, int rc)
{
	t->kc.rc[shared][op][rc_class(rc)]++;
}

static void key_stolen(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];

	/* Release: a callback that starts after this sees the flags. */
	atomic_fetch_or_explicit(&s->cur, F_CANCELLED | F_KEYED, memory_order_release);
	t->t.kstolen++;
	atomic_fetch_add_explicit(&S.skeys[s->key - 1].stolen, 1, memory_order_relaxed);
	slot_free(t, idx, E_KEYED);
}

/*
 * key_settle - slot @idx's shared-key timer may have been ended by a key
 * call of any thread (@why said -ENOENT or that it ran): settles how with
 * kairos_cancel_sync(), after which no callback of it starts again and any
 * that did has returned.  Returns whether the timer has ended.
 */
bool key_settle(struct lthread *t, uint32_t idx, const char *why)
{
	struct slot *s = &S.slots[idx];
	int rc = kairos_cancel_sync(S.k, s->id);
	uint32_t runs;

	count(t, A_CANCEL_SYNC, rc);
	t->t.ksettles++;
	/* Acquire pairs with the callback's increment and its release of done. */
	runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	switch (rc) {
	case 0:
		/* Expired but not started (FIRING) when @why looked: this cancelled it. */
		if (runs)
			violation(V_TWICE, "slot %" PRIu32 ": kairos_cancel_sync of keyed timer %#"
				  PRIx64 " returned 0 after its callback started", idx, s->id);
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		t->t.cancelled++;
		slot_free(t, idx, E_CANCELLED);
		return true;
	case -ENOENT:
	case -EBUSY:
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": kairos_cancel_sync of keyed timer %#" PRIx64
			  " returned %d (%s)", idx, s->id, rc, strerror(-rc));
		return false;
	}
	if (!runs) {
		key_stolen(t, idx);
		return true;
	}
	if (!atomic_load_explicit(&s->done, memory_order_acquire)) {
		violation(V_AFTER_STOP, "slot %" PRIu32 ": keyed timer %#" PRIx64 " still running"
			  " after kairos_cancel_sync returned %d (after %s)", idx, s->id, rc, why);
		s->oflags |= O_FIRING;
		return false;
	}
	end_fired(t, idx);
	return true;
}

/* After kairos_destroy(): a shared-key timer that neither ran nor was drained was stolen. */
void key_sweep(struct lthread *t, uint32_t idx)
{
	key_stolen(t, idx);
}

/* ---- own keys: every answer known ------------------------------------------- */

/* What the owner knows of own key @g's holder just before a call. */
struct holder {
	uint32_t idx;		/* its slot, if @s */
	struct slot *s;		/* NULL: no timer holds the key (it is free) */
	uint32_t runs;		/* its runs before the call: > 0, the key is free */
	uint64_t bound;
};

static void holder_get(struct lthread *t, uint32_t g, struct holder *h)
{
	uint32_t *ref = held_ref(t, g);

	memset(h, 0, sizeof(*h));
	if (*ref)
		reap(t, *ref - 1);	/* ended: forgotten */
	if (!*ref)
		return;
	h->idx = *ref - 1;
	h->s = &S.slots[h->idx];
	h->bound = h->s->bound;
	/* Acquire pairs with the callback's increment: the key was let go before it. */
	h->runs = atomic_load_explicit(&h->s->runs, memory_order_acquire);
}

/* The key is free for sure: no holder, or its callback has started. */
static bool holder_gone(const struct holder *h)
{
	return !h->s || h->runs;
}

/*
 * The holder was pending through a call that returned at @after: not seen
 * to be firing, and its deadline still ahead (never early: nothing claimed
 * it).  Then the call's answer is known exactly.
 */
static bool holder_pending(struct lthread *t, const struct holder *h, uint64_t after)
{
	bool sure = h->s && !h->runs && !(h->s->oflags & O_FIRING) && after < h->bound;

	t->t.kexact += sure;
	return sure;
}

static void key_bad(uint32_t g, const char *call, int rc, const struct holder *h,
		    const char *what)
{
	violation(V_KEY, "own key %" PRIu32 ": %s returned %d (%s) %s%s%#" PRIx64, g, call, rc,
		  strerror(rc < 0 ? -rc : rc), what, h->s ? "; holder " : "; last id ",
		  h->s ? h->s->id : (uint64_t)0);
}

static void own_find(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len)
{
	struct holder h;
	kairos_id id = 0;
	uint64_t after;
	int rc;

	holder_get(t, g, &h);
	rc = kairos_key_find(S.k, kb, len, &id);
	after = service_now();
	count(t, A_KEY_FIND, rc);
	kcount(t, false, K_FIND, rc);
	if (rc == 0) {
		if (holder_gone(&h))
			violation(V_KEY, "own key %" PRIu32 ": kairos_key_find returned %#" PRIx64
				  " but %s", g, id, h.s ? "its holder's callback had started"
							: "no timer holds it");
		else if (id != h.s->id)
			violation(V_KEY, "own key %" PRIu32 ": kairos_key_find returned %#" PRIx64
				  ", its holder is %#" PRIx64, g, id, h.s->id);
		else
			(void)holder_pending(t, &h, after);
		return;
	}
	if (rc != -ENOENT) {
		key_bad(g, "kairos_key_find", rc, &h, "");
		return;
	}
	if (holder_pending(t, &h, after))
		key_bad(g, "kairos_key_find", rc, &h, "while its holder was pending, not due");
	else if (h.s && !h.runs)
		h.s->oflags |= O_FIRING;	/* the key goes only at the claim */
}

static void own_move(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len)
{
	struct holder h;
	uint64_t delay, before, after;
	int rc;

	holder_get(t, g, &h);
	delay = rng_range(&t->rng, h.s && (h.s->oflags & O_SHORT) ? &S.cfg.shorts : &S.cfg.idle);
	before = service_now();
	rc = kairos_key_reset(S.k, kb, len, delay);
	after = service_now();
	count(t, A_KEY_RESET, rc);
	kcount(t, false, K_MOVE, rc);
	switch (rc) {
	case 0:
		if (holder_gone(&h) || (h.s->oflags & O_FIRING)) {
			key_bad(g, "kairos_key_reset", rc, &h, h.s ? "after its holder was seen firing"
								  : "though no timer holds it");
			return;
		}
		(void)holder_pending(t, &h, after);
		h.s->bound = before + delay;
		return;
	case -ENOENT:
		if (holder_pending(t, &h, after))
			key_bad(g, "kairos_key_reset", rc, &h, "while its holder was pending, not due");
		else if (h.s && !h.runs)
			h.s->oflags |= O_FIRING;
		return;
	default:
		/* -EBUSY too: a one-shot timer's reset never says it. */
		key_bad(g, "kairos_key_reset", rc, &h, "");
	}
}

static void own_remove(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len)
{
	struct holder h;
	uint64_t after;
	int rc;

	holder_get(t, g, &h);
	rc = kairos_key_cancel(S.k, kb, len);
	after = service_now();
	count(t, A_KEY_CANCEL, rc);
	kcount(t, false, K_REMOVE, rc);
	switch (rc) {
	case 0:
		if (holder_gone(&h)) {
			key_bad(g, "kairos_key_cancel", rc, &h, h.s ? "after its holder's callback"
								  " started" : "though no timer holds it");
			return;
		}
		(void)holder_pending(t, &h, after);
		/* Release: a callback that starts after this sees the flag. */
		atomic_fetch_or_explicit(&h.s->cur, F_CANCELLED, memory_order_release);
		t->t.kcancelled++;
		slot_free(t, h.idx, E_CANCELLED);
		return;
	case -EBUSY:
	case -ENOENT:
		if (rc == -EBUSY && holder_gone(&h))
			key_bad(g, "kairos_key_cancel", rc, &h, "though the key was free");
		else if (holder_pending(t, &h, after))
			key_bad(g, "kairos_key_cancel", rc, &h, "while its holder was pending, not due");
		else if (h.s && !h.runs)
			h.s->oflags |= O_FIRING;
		return;
	default:
		key_bad(g, "kairos_key_cancel", rc, &h, "");
	}
}

/*
 * The holder @h of own key @g after a REPLACE set took the key: the arm
 * cancelled it as kairos_cancel() would, so it never runs, unless it was
 * firing already.  kairos_cancel_sync() waits for such a callback.
 */
static void own_replaced(struct lthread *t, uint32_t g, const struct holder *h, bool pending)
{
	struct slot *s = h->s;
	int rc = kairos_cancel_sync(S.k, s->id);
	uint32_t runs;

	count(t, A_CANCEL_SYNC, rc);
	t->t.ksettles++;
	runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	if (rc == 0) {
		key_bad(g, "kairos_cancel_sync of the holder after a REPLACE set", rc, h,
			"(the set left it pending)");
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		t->t.cancelled++;
		slot_free(t, h->idx, E_CANCELLED);
		return;
	}
	if (rc != -ENOENT && rc != -EBUSY) {
		key_bad(g, "kairos_cancel_sync of the holder after a REPLACE set", rc, h, "");
		return;
	}
	if (!runs) {
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED | F_KEYED, memory_order_release);
		t->t.kreplaced++;
		slot_free(t, h->idx, E_KEYED);
		return;
	}
	if (!atomic_load_explicit(&s->done, memory_order_acquire)) {
		violation(V_AFTER_STOP, "slot %" PRIu32 ": timer %#" PRIx64 " still running after"
			  " kairos_cancel_sync returned %d", h->idx, s->id, rc);
		s->oflags |= O_FIRING;
		return;
	}
	if (pending)
		key_bad(g, "a REPLACE set", 0, h, "while its holder was pending, not due, and the"
			" holder ran");
	/* Firing when the key was taken (or let go before): it ran. */
	t->t.kreplaced_ran += !h->runs;
	end_fired(t, h->idx);
}

/* A probe of a call on a shared key: the holder found before it. */
struct probe {
	kairos_id id;		/* 0: none found */
};

/*
 * Shared key @g's holder, looked up before a call, into @p.  A key leaves
 * its holder only when the holder ends (a cancel, the claim that starts
 * its callback) or when a REPLACE set cancels it, atomically with taking
 * the key, so a timer that held the key at the lookup has ended, or is
 * running, once a later call saw the key taken over or free.
 */
static void probe_find(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len,
		       struct probe *p)
{
	kairos_id id = 0;
	int rc;

	rc = kairos_key_find(S.k, kb, len, &id);

	count(t, A_KEY_FIND, rc);
	kcount(t, true, K_FIND, rc);
	if ((rc == 0 && !id) || (rc && rc != -ENOENT))
		violation(V_KEY, "shared key %" PRIu32 ": kairos_key_find returned %d (%s), id %#"
			  PRIx64, g, rc, strerror(rc < 0 ? -rc : rc), id);
	p->id = rc ? 0 : id;
}

/*
 * After @call on shared key @g said
 * that the key was taken over or free: the holder seen by probe @p before
 * it must not be pending.  A kairos_cancel() that returns 0 says it was:
 * the key left a live timer (and the cancel ends it, so its owner counts
 * it as ended by a key call).  Another thread's REPLACE set in flight
 * changes nothing: it cancels the holder before anyone can see the key
 * taken over (kairos_arm_opts(3)).
 */
static void probe_check(struct lthread *t, uint32_t g, const struct probe *p, const char *call,
			int rc)
{
	int crc;

	if (!p->id)
		return;
	crc = kairos_cancel(S.k, p->id);
	count(t, A_CANCEL, crc);
	t->t.kprobes++;
	if (crc == 0)
		violation(V_KEY, "shared key %" PRIu32 ": timer %#" PRIx64 " held it before %s"
			  " returned %d, and was still pending after it (a cancel returned 0)", g,
			  p->id, call, rc);
	else if (crc != -ENOENT && crc != -EBUSY)
		violation(V_RC, "shared key %" PRIu32 ": kairos_cancel of its old holder %#" PRIx64
			  " returned %d (%s)", g, p->id, crc, strerror(-crc));
}

/* ---- sets, own and shared -------------------------------------------------------- */

/* Slot @idx's arm said @rc: no timer; a callback of this epoch is a violation. */
static void set_refused(struct lthread *t, uint32_t idx, int rc)
{
	struct slot *s = &S.slots[idx];

	atomic_fetch_or_explicit(&s->cur, F_REFUSED, memory_order_release);
	s->last_end = rc == -EEXIST ? E_REFUSED : E_NONE;
	s->key = 0;
	fq_push(t, idx);
}

static void key_set(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len,
		    bool replace)
{
	bool shared = key_shared(g), shorty = rng_below(&t->rng, 100) < S.cfg.short_pct;
	uint64_t delay = rng_range(&t->rng, shorty ? &S.cfg.shorts : &S.cfg.idle);
	struct kairos_timer_opts o = { .key = kb, .key_len = len,
				       .flags = replace ? KAIROS_KEY_REPLACE : 0 };
	uint64_t before, after, floor = 0;
	struct holder h = { 0 };
	struct probe was = { 0 };
	uint32_t idx, epoch;
	struct slot *s;
	int rc;

	if (!fq_pop(t, &idx))
		return;
	s = &S.slots[idx];
	epoch = slot_prepare(s, false, shorty && rng_below(&t->rng, 100) < S.cfg.slow_pct, 0);
	if (shared) {
		probe_find(t, g, kb, len, &was);
		floor = key_floor(g);
	} else {
		holder_get(t, g, &h);
	}
	before = service_now();
	rc = kairos_arm_opts(S.k, delay, &o, on_timer, slot_arg(idx, epoch), &s->id);
	after = service_now();
	count(t, A_ARM_OPTS, rc);
	kcount(t, shared, replace ? K_REPLACE : K_SET, rc);
	if (rc == -EEXIST && !replace) {
		if (shared)
			atomic_fetch_add_explicit(&S.skeys[g].eexist, 1, memory_order_relaxed);
		else if (holder_gone(&h))
			key_bad(g, "kairos_arm_opts", rc, &h, h.s ? "after its holder's callback"
								  " started" : "though no timer holds it");
		else
			(void)holder_pending(t, &h, after);
		set_refused(t, idx, rc);
		return;
	}
	if (rc) {
		violation(rc == -EEXIST ? V_KEY : V_RC, "kairos_arm_opts(%" PRIu64 " ns, %s key %"
			  PRIu32 "%s) returned %d (%s)", delay, shared ? "shared" : "own", g,
			  replace ? ", KAIROS_KEY_REPLACE" : "", rc, strerror(-rc));
		set_refused(t, idx, rc);
		return;
	}
	s->kind = K_ONESHOT;
	s->oflags = (shorty ? O_SHORT : 0) | (shared ? O_SHARED : 0);
	s->bound = before + delay;
	s->kfloor = floor;
	s->key = g + 1;
	list_add(t->live, &t->nlive, idx);
	t->t.arms++;
	t->t.karms++;
	if (shared) {
		t->t.karms_shared++;
		if (replace)
			atomic_fetch_add_explicit(&S.skeys[g].replaced, 1, memory_order_relaxed);
		probe_check(t, g, &was, replace ? "a REPLACE set" : "a set", rc);
		return;
	}
	*held_ref(t, g) = idx + 1;
	if (holder_gone(&h))
		return;
	if (replace) {
		own_replaced(t, g, &h, holder_pending(t, &h, after));
		return;
	}
	/* A plain set took the key: its holder's callback was claimed. */
	if (holder_pending(t, &h, after))
		key_bad(g, "kairos_arm_opts", rc, &h, "while its holder was pending, not due");
	h.s->oflags |= O_FIRING;
}

/* ---- shared keys: races, counted per key ----------------------------------------- */

static void shared_call(struct lthread *t, uint32_t g, const unsigned char *kb, size_t len,
			enum key_op op)
{
	_Atomic uint64_t *moving = &S.kmoving[(size_t)t->no * S.cfg.shared_keys + g];
	struct probe was = { 0 };
	kairos_id id = 0;
	uint64_t before;
	int rc;

	/*
	 * Removes probe the holder (one in two: they race alone too).  Not
	 * moves: a holder that has expired but not started (FIRING) keeps its
	 * key, and a reset of it says -ENOENT while a cancel still wins.
	 */
	if (op == K_REMOVE && rng_below(&t->rng, 2))
		probe_find(t, g, kb, len, &was);
	switch (op) {
	case K_FIND:
		rc = kairos_key_find(S.k, kb, len, &id);
		count(t, A_KEY_FIND, rc);
		if ((rc == 0 && !id) || (rc && rc != -ENOENT))
			violation(V_KEY, "shared key %" PRIu32 ": kairos_key_find returned %d (%s),"
				  " id %#" PRIx64, g, rc, strerror(rc < 0 ? -rc : rc), id);
		break;
	case K_MOVE:
		/* 1 while the clock is read: see key_floor(). */
		atomic_store_explicit(moving, 1, memory_order_seq_cst);
		before = service_now();
		atomic_store_explicit(moving, before > 1 ? before : 2, memory_order_seq_cst);
		rc = kairos_key_reset(S.k, kb, len, rng_range(&t->rng, &S.cfg.idle));
		atomic_store_explicit(moving, 0, memory_order_release);
		count(t, A_KEY_RESET, rc);
		/* -EBUSY too: a one-shot timer's reset never says it. */
		if (rc && rc != -ENOENT)
			violation(V_KEY, "shared key %" PRIu32 ": kairos_key_reset returned %d (%s)",
				  g, rc, strerror(-rc));
		break;
	default:
		rc = kairos_key_cancel(S.k, kb, len);
		count(t, A_KEY_CANCEL, rc);
		if (rc == 0)
			atomic_fetch_add_explicit(&S.skeys[g].remove0, 1, memory_order_relaxed);
		else if (rc != -EBUSY && rc != -ENOENT)
			violation(V_KEY, "shared key %" PRIu32 ": kairos_key_cancel returned %d (%s)",
				  g, rc, strerror(-rc));
		/* Whatever it says, a holder seen before has ended or runs. */
		probe_check(t, g, &was, "kairos_key_cancel", rc);
		break;
	}
	kcount(t, true, op, rc);
}

/*
 * A key among @n: half of the calls go to the first KEY_HOT (hot keys,
 * whose holders rarely live to fire: collisions, -EEXIST and REPLACE
 * races), the others to any (cold ones, whose timers mostly fire or are
 * moved: races with the claim that starts a callback).
 */
#define KEY_HOT	4

static uint32_t key_pick(struct lthread *t, uint32_t n)
{
	if (n > KEY_HOT && rng_below(&t->rng, 2))
		n = KEY_HOT;
	return rng_below(&t->rng, n);
}

/*
 * key_step - one key call: on a shared key or one of the thread's own
 * (even odds when there are both), set (20%), set with REPLACE (20%),
 * move (30%), remove (15%) or find (15%).  A set without a free slot
 * finds instead.
 */
void key_step(struct lthread *t)
{
	uint32_t m = S.cfg.shared_keys, n = S.cfg.keys, g, r = rng_below(&t->rng, 100);
	bool shared = m && (!n || rng_below(&t->rng, 2));
	unsigned char kb[KAIROS_KEY_MAX];
	enum key_op op;
	size_t len;

	g = shared ? key_pick(t, m) : m + t->no * n + key_pick(t, n);
	key_bytes(g, kb, &len);
	op = r < 20 ? K_SET : r < 40 ? K_REPLACE : r < 70 ? K_MOVE : r < 85 ? K_REMOVE : K_FIND;
	if ((op == K_SET || op == K_REPLACE) && !t->fq_len)
		op = K_FIND;
	if (op == K_SET || op == K_REPLACE)
		key_set(t, g, kb, len, op == K_REPLACE);
	else if (shared)
		shared_call(t, g, kb, len, op);
	else if (op == K_FIND)
		own_find(t, g, kb, len);
	else if (op == K_MOVE)
		own_move(t, g, kb, len);
	else
		own_remove(t, g, kb, len);
}

/*
 * keys_crosscheck - after the final sweep: each shared key's stolen timers
 * against the calls that can have ended them.
 */
void keys_crosscheck(void)
{
	for (uint32_t g = 0; g < S.cfg.shared_keys; g++) {
		const struct skey *k = &S.skeys[g];
		uint64_t rm = atomic_load(&k->remove0), rp = atomic_load(&k->replaced);
		uint64_t st = atomic_load(&k->stolen);

		if (st < rm || st > rm + rp)
			violation(V_KEY, "shared key %" PRIu32 ": %" PRIu64 " of its timers ended by"
				  " key calls, but kairos_key_cancel returned 0 %" PRIu64 " times"
				  " and REPLACE sets took it %" PRIu64 " times", g, st, rm, rp);
	}
}
