/* SPDX-License-Identifier: MIT */
/*
 * arrival.c - far timers filed by value: the shard never touches their
 * records between their arm and their slot's visit.
 *
 * Why
 * ---
 * An idle timeout is armed, pushed later and cancelled by its connection's
 * thread, and rarely fires.  Posted through the inbox, its record is read by
 * the shard's walk and written when linked into the wheel, so the caller's
 * next push or cancel takes the line back from the shard's core: a load by
 * the shard costs the cancel as much as a write (docs/BENCHMARKS.md, "What
 * the shard's look at a record costs the next cancel").  A timer whose fire
 * tick is at least ARRIVAL_FAR_TICKS ahead instead reaches the shard as a
 * value, (record index, generation, fire tick), which the shard files in a
 * far slot of its wheel (wheel_file_entry()).  Its cancel is posted, and
 * the shard, which holds no link to the record, only retires it (its
 * entries go stale: the record's state or generation says so); a later
 * deadline is a store, as before.  The wheel looks at the record only when
 * its slot comes, and drops the entry if it went stale; its sweeps, and its
 * visits before they load a record, tell stale entries by the lives that
 * ended (ent_gone(): one byte per record, apart from the records).
 *
 * Arrival blocks
 * --------------
 * Each calling thread has at most one open block, for the shard it arms on
 * (tstate.arr): ARRIVAL_N entries that only it writes, and a published count
 * (pub) that the shard reads.  Opening a block pushes it on the shard's
 * arr_new stack (one CAS per ARRIVAL_N far arms); the shard moves new blocks
 * to its own list and, at the start of every pass and before its wheel moves
 * on, files what each block published since it last looked.  A thread leaves
 * a block when it is full, when the thread moves to another shard or leaves
 * the service, or at exit: it stores ARRIVAL_CLOSED with the final count and
 * never touches the block again; once the shard has filed all of it, the
 * block goes to the shard's pool, for a thread to open again, one block at
 * a time (arrival_get()).  A shard starts with one block on its pool; a
 * thread that takes the last one, or finds none (that arm then posts its
 * record), makes another and pools it on its way out of the call, out of
 * the read-side section, since it allocates (arrival_grow()).  Blocks are
 * freed with their shard, found by their numbers.
 *
 * Telling the shard
 * -----------------
 * An entry is two plain stores, the entry and then the count (release): no
 * fence, no look at the shard.  A fence on every arm would wait for the
 * block's line, which the shard has read, to come back (measured at about
 * 30 ns an arm, docs/BENCHMARKS.md).  Instead the shard comes to look:
 *  - It files whatever every block published at the start of each pass,
 *    before its wheel moves on, so no entry can be overtaken by time.
 *  - While a block is open and not dormant, the shard sleeps at most
 *    ARRIVAL_POLL_TICKS.  An entry's fire tick is at least ARRIVAL_FAR_TICKS
 *    past its arm, so the shard files it before it could be due.
 *  - A block whose thread published nothing for ARRIVAL_POLL_TICKS becomes
 *    dormant, so an idle service sleeps as long as its wheel lets it: the
 *    shard sets the flag (on every such block of the pass), forces a
 *    barrier on every thread of the process (one
 *    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) a pass) and reads the
 *    counts again.  The thread reads the flag after its count store.  Whichever
 *    point between those two the barrier hits the thread at, either the
 *    shard's second read sees the entry or the thread sees the flag; then
 *    it clears the flag and wakes the shard (arrival_rouse()).
 *  - Opening a block is a CAS, a full fence, after which the thread looks at
 *    the tick the shard sleeps until (seq_cst both ways, as with posts): if
 *    the shard would not look within ARRIVAL_POLL_TICKS, it is woken, since
 *    any entry the block gets may fire ARRIVAL_FAR_TICKS after its arm,
 *    whatever the first entry's tick.
 * Where membarrier() is refused (an old kernel, a seccomp filter), each
 * entry is published with a fence instead and wakes the shard if its fire
 * tick is earlier than the tick the shard sleeps until (arrival_fenced()),
 * and blocks never become dormant.
 *
 * A new block counts as ARRIVAL_POSTS posts towards the shard's backlog
 * (shard_count_posts()), so a burst of far arms wakes a sleeping shard, and
 * an arm waits for a shard that is far behind as a post's would.
 */
#include "rcu.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"
#include "internal.h"
#include "timer.h"

_Static_assert(ID_INDEX_BITS <= WHEEL_ENTRY_IDX_BITS, "a wheel entry names any record of a shard");

bool arrival_lazy;
static pthread_once_t arrival_once = PTHREAD_ONCE_INIT;

static long membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0);
}

/* Whether this process may use expedited private membarriers; registers it if so. */
static void arrival_probe(void)
{
	long cmds = atomic_load_explicit(&fault_membarrier, memory_order_relaxed)
			    ? -1 : membarrier(MEMBARRIER_CMD_QUERY);

	arrival_lazy = cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
		       membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

/* ---- the arming thread ------------------------------------------------ */

void arrival_close(struct tstate *t)
{
	if (!t->arr)
		return;
	/* Release: the entries before the flag that lets the shard pool the block. */
	atomic_store_explicit(&t->arr->pub, t->arr_n | ARRIVAL_CLOSED, memory_order_release);
	t->arr = NULL;
	t->arr_n = 0;
}

/*
 * Pushes @first on the stack @head (seq_cst, which a block's opening needs:
 * see "Telling the shard").
 */
static void arrival_push(_Atomic(struct arrival *) *head, struct arrival *first)
{
	struct arrival *old = atomic_load_explicit(head, memory_order_relaxed);

	do {
		first->next = old;
	} while (!atomic_compare_exchange_weak_explicit(head, &old, first, memory_order_seq_cst,
							memory_order_relaxed));
}

/* Block number @no of @s (made and pooled: its page exists). */
static struct arrival *arrival_by_no(struct shard *s, uint32_t no)
{
	struct arrival **page = atomic_load_explicit(&s->arr_dir[no >> ARRIVAL_PAGE_BITS],
						     memory_order_acquire);

	return __atomic_load_n(&page[no & (ARRIVAL_PAGE - 1)], __ATOMIC_RELAXED);
}

/*
 * The pool's head: the top block's number + 1 (0: empty) in the low half,
 * and in the high half a count that every push and pop moves on.  A popper
 * that read the head, and the link of the block it names, installs that
 * link only if no push or pop came between: a block popped by another
 * thread meanwhile, opened, filled, filed and pooled again, is back at the
 * top with a different count, so the stale link is never installed (the
 * count would have to go round 2^32 times in between).
 */
static uint64_t pool_head(uint64_t old, uint32_t top)
{
	return ((old >> 32) + 1) << 32 | top;
}

/*
 * Puts @b on @s's pool: the shard, a block read to the end, or a thread, a
 * block it just made (arrival_grow()).
 */
static void arrival_pool(struct shard *s, struct arrival *b)
{
	uint64_t old = atomic_load_explicit(&s->arr_pool, memory_order_relaxed);

	do {
		/* Atomic: a popper may read it meanwhile, and then fail its CAS. */
		atomic_store_explicit(&b->pool_next, (uint32_t)old, memory_order_relaxed);
		/* Release: the pusher is done with the block before a thread takes it. */
	} while (!atomic_compare_exchange_weak_explicit(&s->arr_pool, &old,
							pool_head(old, b->no + 1),
							memory_order_release,
							memory_order_relaxed));
}

/* What arrival_install() did. */
enum { ARR_POOLED, ARR_NUMBERS_OUT, ARR_NEEDS_PAGE };

/*
 * Numbers the new block @b of @s and puts it on the pool.  Its number's
 * page is made only where it is missing: *@page, when the caller holds one,
 * is installed (a CAS; *@page is then NULL, the shard's), and without one
 * ARR_NEEDS_PAGE asks the caller to make it and come again.  A number is
 * taken (a CAS on the count, never past the last) only with its page there
 * or in hand, so a page that cannot be made uses no number up.
 * ARR_NUMBERS_OUT when @s has numbered all it can.
 */
static int arrival_install(struct shard *s, struct arrival *b, struct arrival ***page)
{
	uint32_t no = atomic_load_explicit(&s->arr_made, memory_order_relaxed);
	_Atomic(struct arrival **) *slot;
	struct arrival **at, **none = NULL;

	do {
		if (no >= ARRIVAL_DIR * ARRIVAL_PAGE)
			return ARR_NUMBERS_OUT;
		slot = &s->arr_dir[no >> ARRIVAL_PAGE_BITS];
		at = atomic_load_explicit(slot, memory_order_acquire);
		if (!at && !*page)
			return ARR_NEEDS_PAGE;
	} while (!atomic_compare_exchange_weak_explicit(&s->arr_made, &no, no + 1,
							memory_order_relaxed,
							memory_order_relaxed));
	if (!at) {
		/* Release and acquire: the page's zeroes before its pointer. */
		if (atomic_compare_exchange_strong_explicit(slot, &none, *page,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			at = *page;
			*page = NULL;
		} else {
			at = none;
		}
	}
	b->no = no;
	/* Published with the block: a thread pops it only after it was pooled. */
	__atomic_store_n(&at[no & (ARRIVAL_PAGE - 1)], b, __ATOMIC_RELAXED);
	arrival_pool(s, b);
	return ARR_POOLED;
}

/*
 * A block to open on @s, popped off the shard's pool.  One at a time, so
 * that no thread holds more than the one it writes: taking the pool whole
 * let one of many threads keep tens of thousands of blocks while the
 * others made new ones.  Blocks are never freed before their shard (a
 * popper may read the link of one another thread took): reusing them also
 * spares the allocator's lock, which a shard freeing what threads allocate
 * made them wait on.  A pop that takes the last block, or finds none (NULL:
 * the arm posts), asks @t's call for a new one, made out of its section
 * (arrival_grow()), so that the next opening finds one.
 */
static struct arrival *arrival_get(struct shard *s, struct tstate *t)
{
	/* Acquire pairs with the pool's pushes: whoever pushed was done with the block. */
	uint64_t head = atomic_load_explicit(&s->arr_pool, memory_order_acquire);
	struct arrival *b;

	while ((uint32_t)head) {
		uint32_t next;

		b = arrival_by_no(s, (uint32_t)head - 1);
		next = atomic_load_explicit(&b->pool_next, memory_order_relaxed);
		if (atomic_compare_exchange_weak_explicit(&s->arr_pool, &head,
							  pool_head(head, next),
							  memory_order_acquire,
							  memory_order_acquire)) {
			if (!next)
				t->arr_grow = s->index + 1;
			return b;
		}
	}
	t->arr_grow = s->index + 1;
	return NULL;
}

/* A block, out of any section; NULL: no memory. */
static struct arrival *arrival_alloc(void)
{
	return fault_hit() ? NULL : aligned_alloc(CACHELINE, sizeof(struct arrival));
}

/* A page of block numbers, out of any section; NULL: no memory. */
static struct arrival **arrival_page_alloc(void)
{
	return fault_calloc(ARRIVAL_PAGE, sizeof(struct arrival *));
}

/*
 * arrival_first - the first block on the pool of @s, a shard no thread can
 * reach yet (shard_new()), so that a far arm finds one from the start.
 * Returns 0 or -ENOMEM (nothing made).
 */
int arrival_first(struct shard *s)
{
	struct arrival *b = arrival_alloc();
	struct arrival **page = b ? arrival_page_alloc() : NULL;

	if (!page) {
		free(b);
		return -ENOMEM;
	}
	/* A new shard has every number left, and no page: both are used. */
	if (arrival_install(s, b, &page) != ARR_POOLED)
		kairos_die("a new shard could not number its first arrival block");
	return 0;
}

/*
 * arrival_grow - out of any read-side section: makes a block for the shard
 * that @t's arm asked one for (tstate.arr_grow), and numbers it and puts it
 * on that shard's pool inside a section; when its number is the first of a
 * page, the page is made out of the section and the install tried again.
 * What it did not use is freed after.  Returns 0, -ENOMEM, or -ESHUTDOWN.
 */
int arrival_grow(struct kairos *k, struct tstate *t)
{
	unsigned shard = t->arr_grow - 1;
	struct arrival **page = NULL;
	struct arrival *b;
	int rc, done;

	t->arr_grow = 0;
	rcu_might_sleep();
	b = arrival_alloc();
	if (!b)
		return -ENOMEM;
	for (;;) {
		rc = service_enter(k);
		if (rc)
			break;
		done = arrival_install(k->shards[shard], b, &page);
		service_leave();
		if (done == ARR_POOLED)
			b = NULL;
		if (done != ARR_NEEDS_PAGE)
			break;
		/* With a page in hand the next try takes a number. */
		page = arrival_page_alloc();
		if (!page) {
			rc = -ENOMEM;
			break;
		}
	}
	free(page);
	free(b);
	return rc;
}

/*
 * arrival_open - arrival_room()'s slow path: a block of @t's for its shard
 * @s, whose first entry fires at tick @fire, armed at @now_ns.  False when
 * none can be had; the arm then posts its record as any other.  A new
 * block counts as ARRIVAL_POSTS posts towards the shard's backlog
 * (shard_count_posts()), and sets *@behind (to 1 + the shard's index) when
 * the shard is SHARD_POST_LIMIT behind, so that the arm waits as a post's
 * would.
 */
bool arrival_open(struct shard *s, struct tstate *t, uint64_t fire, uint64_t now_ns,
		  unsigned *behind)
{
	struct arrival *b;
	uint64_t sleep, now_tick;

	arrival_close(t);
	b = arrival_get(s, t);
	if (!b)
		return false;
	atomic_store_explicit(&b->pub, 0, memory_order_relaxed);
	atomic_store_explicit(&b->dormant, 0, memory_order_relaxed);
	b->taken = 0;
	b->seen_at = 0;
	b->base = fire > ARRIVAL_SPAN / 2 ? fire - ARRIVAL_SPAN / 2 : 0;
	t->arr_base = b->base;
	arrival_push(&s->arr_new, b);
	t->arr = b;
	t->arr_n = 0;
	/*
	 * See "Telling the shard".  The shard learns of the block at its next
	 * pass and polls it from then on; until then nothing it does looks at
	 * it.  Any entry of the block fires ARRIVAL_FAR_TICKS after its own arm
	 * at the least, whatever the first's tick, so the shard must come
	 * within ARRIVAL_POLL_TICKS of now: a shard that would sleep past
	 * that is woken.
	 */
	now_tick = clock_tick_floor(now_ns, s->k->cfg.tick_ns);
	sleep = atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst);
	if (sleep && sleep_tick_of(sleep) > now_tick + ARRIVAL_POLL_TICKS)
		shard_wake(s);
	if (shard_count_posts(s, ARRIVAL_POSTS, sleep))
		*behind = s->index + 1;
	return true;
}

/*
 * A dormant block's thread published again: the shard looks at it anew.
 * Woken whatever wake_pending says (once per rousing): the entry's
 * publication and wake_pending have no seq_cst handshake, so a stale
 * wake_pending could pair with a shard that cleared it and read the block
 * before the entry (x86 orders these through the exchange; C11 does not).
 */
void arrival_rouse(struct shard *s, struct arrival *b)
{
	if (atomic_exchange_explicit(&b->dormant, 0, memory_order_relaxed))
		shard_wake_always(s);
}

/* Without membarrier(): the entry published with a fence, the shard woken if it sleeps past it. */
void arrival_fenced(struct shard *s, uint64_t fire)
{
	uint64_t sleep;

	/* seq_cst, as shard_post()'s push and load: pairs with the shard's sleep_tick store. */
	atomic_thread_fence(memory_order_seq_cst);
	sleep = atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst);
	if (fire < sleep_tick_of(sleep))
		shard_wake(s);
}

/* ---- the shard -------------------------------------------------------- */

/* Whether @e's record is in that life and filed by value; if so, *@fire. */
static bool ent_look(void *ctx, struct wheel_entry e, uint64_t *fire)
{
	struct rec *r = table_rec(ctx, e.idx);
	uint64_t st = atomic_load_explicit(&r->state, memory_order_acquire);

	for (;;) {
		uint64_t deadline, again;
		uint32_t slack;

		if (!wheel_entry_gen(e, st_gen(st)) || !(st & ST_FAR))
			return false;
		if (st_of(st) == ST_RESETTING) {
			/*
			 * Its deadline is on the move; the claim waits the
			 * resetter out, and a post follows if it moved earlier.
			 */
			*fire = UINT64_MAX;
			return true;
		}
		/* The word on both sides of the fields, as a sequence lock's reader. */
		deadline = __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
		slack = __atomic_load_n(&r->wt.slack, __ATOMIC_RELAXED);
		atomic_thread_fence(memory_order_acquire);
		again = atomic_load_explicit(&r->state, memory_order_relaxed);
		if (again == st) {
			*fire = wheel_fire_tick(deadline, slack);
			return true;
		}
		st = again;
	}
}

static void ent_prefetch(void *ctx, struct wheel_entry e)
{
	/* For writing: most entries looked at are claimed (they are near). */
	__builtin_prefetch(table_rec(ctx, e.idx), 1);
}

static struct wheel_timer *ent_claim(void *ctx, struct wheel_entry e)
{
	struct rec *r = table_rec(ctx, e.idx);
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);

	/* The life the entry names, if its low bits match (wheel.h). */
	if (!wheel_entry_gen(e, st_gen(old)) || !timer_claim_far(r, st_gen(old), &old))
		return NULL;
	if (r->wt.where != WHEEL_NONE)
		kairos_die("record filed by value is linked");
	return &r->wt;
}

/*
 * Whether @e names a life of its record that has ended, from the chunk's
 * ended bytes alone (struct chunk_head): the record's line stays with
 * whoever uses it.  Every life ends through a retire, which notes it
 * before the record can be taken for the next, and the shard reads the
 * note after the entry.  So the note of a record whose entry stands is the
 * life just before the entry's, and an entry of any other life is stale.
 * Lives count up by one, but after 2^32 - 1 comes 1 (timer_recycle()): an
 * entry of life 1 mod 256 after a note of 255 mod 256 stands as well.
 */
static bool ent_gone(void *ctx, struct wheel_entry e)
{
	uint8_t ended = table_ended(ctx, e.idx);

	return !wheel_entry_gen(e, (uint8_t)(ended + 1)) &&
	       !(ended == UINT8_MAX && wheel_entry_gen(e, 1));
}

void arrival_ops_init(struct shard *s)
{
	int err = pthread_once(&arrival_once, arrival_probe);

	if (err)
		kairos_die_err("pthread_once", err);
	s->eops = (struct wheel_entry_ops){
		.look = ent_look,
		.prefetch = ent_prefetch,
		.claim = ent_claim,
		.gone = ent_gone,
		.ctx = s,
	};
	wheel_set_entry_ops(&s->wheel, &s->eops);
}

/* Files one arrival: by value when the wheel takes it, else claimed and linked now. */
static void arrival_file(struct shard *s, const struct arrival *b, const struct arrival_ent *a)
{
	struct wheel_entry e = a->ent;
	struct wheel_timer *t;

	if (wheel_file_entry(&s->wheel, e, b->base + a->dtick) == 0)
		return;
	/* Near by now (the shard was late), or no memory for the slot. */
	t = ent_claim(s, e);
	if (t)
		wheel_insert(&s->wheel, t);
}

/*
 * After the pass set the dormant flag of the blocks whose threads published
 * nothing for a while: one barrier on every thread, then each dormant block
 * whose count moved is looked at again (see "Telling the shard").  What
 * was published meanwhile is filed next pass.  A block that went dormant
 * in an earlier pass and whose thread is rousing it now is only looked at
 * again a little sooner.
 */
static void arrivals_doze(struct shard *s)
{
	if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		kairos_die_err("membarrier", errno);
	for (struct arrival *b = s->arr_open; b; b = b->next)
		if (atomic_load_explicit(&b->dormant, memory_order_relaxed) &&
		    atomic_load_explicit(&b->pub, memory_order_relaxed) != b->taken)
			atomic_store_explicit(&b->dormant, 0, memory_order_relaxed);
}

/*
 * arrivals_take - the shard files what every arrival block published since
 * it last looked, and pools the blocks their threads left and it has read
 * to the end.  Shard thread (or, after it stopped, its destroyer).
 */
void arrivals_take(struct shard *s)
{
	struct arrival **pp, *b;
	bool took = false, dozed = false;

	if (atomic_load_explicit(&s->arr_new, memory_order_relaxed)) {
		/* Acquire pairs with the openers' CAS: the blocks' first words. */
		b = atomic_exchange_explicit(&s->arr_new, NULL, memory_order_acquire);
		while (b) {
			struct arrival *next = b->next;

			b->next = s->arr_open;
			b->seen_at = s->wheel.curr;
			s->arr_open = b;
			b = next;
		}
	}
	for (pp = &s->arr_open; (b = *pp);) {
		/* Acquire pairs with the thread's stores: the entries up to pub. */
		uint32_t pub = atomic_load_explicit(&b->pub, memory_order_acquire);
		uint32_t n = pub & ~ARRIVAL_CLOSED;

		if (b->taken < n) {
			took = true;
			b->seen_at = s->wheel.curr;
		}
		for (; b->taken < n; b->taken++)
			arrival_file(s, b, &b->e[b->taken]);
		if (pub & ARRIVAL_CLOSED) {
			*pp = b->next;
			arrival_pool(s, b);
			continue;
		}
		if (arrival_lazy && !atomic_load_explicit(&b->dormant, memory_order_relaxed) &&
		    s->wheel.curr - b->seen_at >= ARRIVAL_POLL_TICKS) {
			atomic_store_explicit(&b->dormant, 1, memory_order_relaxed);
			dozed = true;
		}
		pp = &b->next;
	}
	if (dozed)
		arrivals_doze(s);
	if (took)
		shard_posts_taken(s);
}

/*
 * arrivals_waiting - after the shard stored the tick it sleeps until
 * (seq_cst): whether an arrival block has something it has not taken.
 */
bool arrivals_waiting(struct shard *s)
{
	if (atomic_load_explicit(&s->arr_new, memory_order_seq_cst))
		return true;
	for (struct arrival *b = s->arr_open; b; b = b->next) {
		uint32_t pub = atomic_load_explicit(&b->pub, memory_order_seq_cst);

		if ((pub & ARRIVAL_CLOSED) || pub != b->taken)
			return true;
	}
	return false;
}

/*
 * arrivals_polling - whether the shard must look at its blocks again within
 * ARRIVAL_POLL_TICKS: a block is open and not dormant.
 */
bool arrivals_polling(struct shard *s)
{
	if (!arrival_lazy)
		return false;
	for (struct arrival *b = s->arr_open; b; b = b->next)
		if (!atomic_load_explicit(&b->dormant, memory_order_relaxed))
			return true;
	return false;
}

/*
 * arrivals_free - frees every block of @s, each found by its number, as its
 * service goes (no thread uses them).
 */
void arrivals_free(struct shard *s)
{
	for (unsigned i = 0; i < ARRIVAL_DIR; i++) {
		struct arrival **page = atomic_exchange_explicit(&s->arr_dir[i], NULL,
								 memory_order_acquire);

		if (!page)
			continue;
		/* A number whose block could not be made has no pointer. */
		for (unsigned j = 0; j < ARRIVAL_PAGE; j++)
			free(__atomic_load_n(&page[j], __ATOMIC_RELAXED));
		free(page);
	}
	atomic_store_explicit(&s->arr_made, 0, memory_order_relaxed);
	atomic_store_explicit(&s->arr_new, NULL, memory_order_relaxed);
	atomic_store_explicit(&s->arr_pool, 0, memory_order_relaxed);
	s->arr_open = NULL;
}
