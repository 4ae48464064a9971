/* SPDX-License-Identifier: MIT */
/*
 * wheel.h - the hierarchical timing wheel of one kairos shard.
 *
 * The wheel is single-threaded, does no I/O and reads no clock: every
 * function that needs the time takes it as an argument, in ticks.  Records
 * (struct wheel_timer) are owned by the caller, usually embedded in a
 * larger object, and linked intrusively.  The lists never allocate; the
 * only memory the wheel allocates is each slot's log of where its records
 * are, a prefetch hint (wheel.c), and a log that cannot grow only makes
 * that slot's visit slower: no call fails for want of memory.
 *
 * Context: all functions must be called by the one thread that owns the
 * wheel (or under a lock the caller holds).  None of them blocks.
 *
 * See wheel.c for the design essay and the level table.
 */
#ifndef KAIROS_WHEEL_H
#define KAIROS_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 64 slots a level: one uint64_t occupancy bitmap covers a level. */
#define WHEEL_BITS	6
#define WHEEL_SLOTS	(1u << WHEEL_BITS)
/*
 * Eight levels cover 2^48 ticks (8,900 years at 1 ms, 8.9 years at 1 us).
 * Fire ticks further out than the top level reaches wait on the overflow
 * list, which is re-filed when the tick counter reaches the 2^48-tick block
 * of its earliest record.
 */
#define WHEEL_LEVELS	8

/* Values of wheel_timer.where other than slot numbers (1 + level*64 + slot). */
#define WHEEL_NONE	0u				/* not in a wheel */
#define WHEEL_OVERFLOW	(1u + WHEEL_LEVELS * WHEEL_SLOTS)	/* beyond the top level */
#define WHEEL_DUE	(WHEEL_OVERFLOW + 1u)		/* expired, not yet popped */

struct wheel_link {
	struct wheel_link *next;
	struct wheel_link *prev;
};

/*
 * One timer record: 32 bytes.  A zero-filled record is a valid record that
 * is in no wheel, so records from calloc() or a zeroed slab need no init.
 */
struct wheel_timer {
	struct wheel_link link;	/* in a slot, the overflow list or the due list */
	uint64_t deadline;	/* earliest tick it may fire at; accessed with
				 * relaxed atomics (see wheel_refresh()) */
	uint32_t slack;		/* it may fire as late as deadline + slack */
	uint16_t where;		/* WHEEL_NONE, a slot number, WHEEL_OVERFLOW, WHEEL_DUE */
	uint16_t flags;		/* the user's: the wheel never reads or writes it */
};

/*
 * A slot's log: the low 32 bits of the address of each record filed in the
 * slot, in filing order, stale entries (records since taken out) included.
 * Only a hint for prefetching when the slot is visited: see wheel.c.
 */
struct wheel_log {
	uint32_t *ent;
	uint32_t len, cap;
	uint32_t stale;		/* its stale entries; WHEEL_LOG_STOP once it stopped */
} __attribute__((aligned(32)));	/* a power of two: a slot's log is found by a shift */

/*
 * Filing by value.  An owner may file a record far from its fire tick as an
 * entry, its index and generation, instead of linking it: the wheel then
 * never touches the record until the entry's slot is visited, and learns
 * through the owner's callbacks whether the entry still stands and when
 * its record fires.  Only the levels from WHEEL_ENTRY_LEVEL up hold
 * entries, so a record filed by value is at least 64^WHEEL_ENTRY_LEVEL
 * ticks (4,096) from being looked at.  See wheel.c, "Entries".
 */
#define WHEEL_ENTRY_LEVEL	2
/*
 * A slot's entries are swept for stale ones when they reach this many, or
 * twice as many as the last sweep kept if that is more, and a sample finds
 * enough of them stale: so a slot holds at most this many entries, or
 * about twice those that stand.
 */
#define WHEEL_SWEEP_MIN		4096u

/*
 * Four bytes: an index of up to 24 bits and the low 8 bits of the record's
 * life.  An entry of an older life whose low bits match the new one's is
 * taken for the new one's: the owner's look and claim then act on the live
 * record, which is at worst claimed early; its own entry is then stale.
 */
#define WHEEL_ENTRY_IDX_BITS	24

struct wheel_entry {
	uint32_t idx : WHEEL_ENTRY_IDX_BITS;	/* the owner's name for the record */
	uint32_t gen : 32 - WHEEL_ENTRY_IDX_BITS;	/* and for its life, low bits */
};

/* The bits of a life an entry keeps. */
#define WHEEL_ENTRY_GEN_MASK	((1u << (32 - WHEEL_ENTRY_IDX_BITS)) - 1)

/* The entry of record @idx (below 2^24), life @gen (any: its low bits are kept). */
static inline struct wheel_entry wheel_entry_of(uint32_t idx, uint32_t gen)
{
	return (struct wheel_entry){ .idx = idx & ((1u << WHEEL_ENTRY_IDX_BITS) - 1),
				     .gen = gen & WHEEL_ENTRY_GEN_MASK };
}

/* Whether @gen, a whole life, is the one @e names. */
static inline bool wheel_entry_gen(struct wheel_entry e, uint32_t gen)
{
	return e.gen == (gen & WHEEL_ENTRY_GEN_MASK);
}

/* A slot's entries, stale ones (whose record moved on) included. */
struct wheel_ents {
	struct wheel_entry *ent;
	uint32_t len, cap;
	uint32_t room;		/* len at which the next add needs a sweep or memory */
	uint32_t swept;		/* len after the last sweep for stale entries */
};

/*
 * The owner's view of its entries.  look() and prefetch() read the record
 * and never write it; claim() makes it the wheel's to link.
 */
struct wheel_entry_ops {
	/*
	 * Whether @e still stands for a record the wheel must file; if so,
	 * *@fire is that record's fire tick now (it may move later at any
	 * time: the wheel re-files it when its slot comes).
	 */
	bool (*look)(void *ctx, struct wheel_entry e, uint64_t *fire);
	/* Starts loading what look() and claim() will read. */
	void (*prefetch)(void *ctx, struct wheel_entry e);
	/*
	 * Takes @e's record from filing by value to being linked: returns its
	 * wheel_timer (in no wheel, deadline and slack set), or NULL when the
	 * entry went stale meanwhile.
	 */
	struct wheel_timer *(*claim)(void *ctx, struct wheel_entry e);
	/*
	 * Optional: whether @e is certainly stale, told from what the owner
	 * keeps apart from its records (so asking loads no record).  Never
	 * true for an entry that stands; it may be false for a stale one,
	 * which the visit's look() then drops.  With it, a sweep reads no
	 * record and a visit looks only at entries it does not rule out; NULL:
	 * both look() at every entry.
	 */
	bool (*gone)(void *ctx, struct wheel_entry e);
	void *ctx;
};

struct wheel {
	uint64_t curr;			/* every fire tick <= curr has been expired */
	uint64_t count;			/* records in the wheel, due list included */
	uint64_t ndue;			/* records on the due list */
	uint64_t occupied[WHEEL_LEVELS];	/* bit s set iff slot[level][s] is non-empty */
	struct wheel_link due;		/* expired records in firing order */
	struct wheel_log due_log;	/* the due list's log (a slot's, for pops) */
	uint32_t due_at, due_pf;	/* pops' place in it: matched, prefetched */
	struct wheel_link overflow;
	uint64_t overflow_visit;	/* first tick of the earliest 2^48 block
					 * an overflow record fires in (a lower
					 * bound); UINT64_MAX when none */
	struct wheel_link slot[WHEEL_LEVELS][WHEEL_SLOTS];
	struct wheel_log log[WHEEL_LEVELS][WHEEL_SLOTS];
	const struct wheel_entry_ops *eops;	/* NULL: no filing by value */
	uint64_t nents;			/* entries held, stale ones included */
	struct wheel_ents ents[WHEEL_LEVELS - WHEEL_ENTRY_LEVEL][WHEEL_SLOTS];
};

/* Sets up an empty wheel whose current tick is @now.  Allocates nothing. */
void wheel_init(struct wheel *w, uint64_t now);

/*
 * wheel_set_entry_ops - lets @w hold entries (wheel_file_entry()), seen
 * through @ops, which must outlive the wheel.  Call before filing any.
 */
void wheel_set_entry_ops(struct wheel *w, const struct wheel_entry_ops *ops);

/*
 * wheel_file_entry - files the record named by @e, whose fire tick is
 * @fire, by value: the wheel stores @e and nothing else.  When the slot
 * comes, the wheel looks at the record: a stale entry is dropped, a record
 * still far is filed by value again, and one that is near (or due) is
 * claimed and linked, as wheel_insert() would.  An owner that lets an
 * entry go stale tells the wheel nothing: stale entries are dropped at the
 * visit, or by a sweep when a slot's entries double (wheel.c).
 *
 * Return: 0; -EAGAIN when @fire is due or not at an entry level from the
 * current tick (the owner links the record instead); -ENOMEM when the
 * slot cannot grow (likewise); -EINVAL without entry ops.
 */
int wheel_file_entry(struct wheel *w, struct wheel_entry e, uint64_t fire);

/*
 * wheel_sweep_entries - drops, in every slot, the entries that the owner's
 * gone() rules out, and gives back the memory that slots no longer need:
 * for an owner that has let many entries go stale in slots that take no
 * new ones (which are swept only as they grow).  O(entries held); reads no
 * record.  Without gone(), does nothing.
 *
 * Return: the entries dropped.
 */
uint64_t wheel_sweep_entries(struct wheel *w);

/* Entries held, stale ones included. */
static inline uint64_t wheel_entries(const struct wheel *w)
{
	return w->nents;
}

/*
 * wheel_fini - frees the slots' logs.  The records still in the wheel are
 * the owner's, untouched; the wheel must be set up again before any use.
 */
void wheel_fini(struct wheel *w);

/* Marks @t as in no wheel (the same as zero-filling it). */
void wheel_timer_init(struct wheel_timer *t);

/*
 * wheel_fire_tick - the tick a record with this deadline and slack fires at:
 * the member of [deadline, deadline + slack] with the most trailing zero
 * bits, which lets it sit in a coarse slot and be re-filed as little as
 * possible.  With slack 0 it is the deadline itself.  Saturates at UINT64_MAX.
 */
uint64_t wheel_fire_tick(uint64_t deadline, uint32_t slack);

/*
 * wheel_add - puts @t in the wheel to fire at wheel_fire_tick(@deadline, @slack).
 * A fire tick at or before the current tick puts it straight on the due list.
 *
 * Return: 0; -EINVAL if @w or @t is NULL; -EBUSY if @t is already in a wheel.
 */
int wheel_add(struct wheel *w, struct wheel_timer *t, uint64_t deadline, uint32_t slack);

/*
 * wheel_insert - puts @t in the wheel with the deadline and slack already in
 * the record (for owners whose records carry their deadline from elsewhere).
 *
 * Return: as wheel_add().
 */
int wheel_insert(struct wheel *w, struct wheel_timer *t);

/*
 * wheel_del - takes @t out of the wheel in O(1), wherever it is (a slot, the
 * overflow list or the due list).
 *
 * Return: 0; -EINVAL if @w or @t is NULL; -ENOENT if @t is in no wheel.
 */
int wheel_del(struct wheel *w, struct wheel_timer *t);

/*
 * wheel_update - moves @t's deadline to @deadline, earlier or later, keeping
 * its slack.  A later deadline whose fire tick is not before the visit of the
 * record's current slot (the usual case) is a store: the record stays where
 * it is and is re-filed when its slot comes round.
 * An earlier deadline, or any new deadline for a due record, relinks it as
 * if it were added now.
 *
 * Return: 0; -EINVAL if @w or @t is NULL; -ENOENT if @t is in no wheel.
 */
int wheel_update(struct wheel *w, struct wheel_timer *t, uint64_t deadline);

/*
 * wheel_refresh - makes the wheel agree with a deadline that was stored in @t
 * from outside (with a relaxed atomic store): a store suffices when the
 * record's slot is still visited in time, else it is relinked.  Unlike
 * wheel_update() it does not know the old deadline, so an earlier deadline
 * whose slot is still visited in time also stays in place.
 *
 * Return: 0; -EINVAL for NULL; -ENOENT if @t is in no wheel.
 */
int wheel_refresh(struct wheel *w, struct wheel_timer *t);

/*
 * wheel_advance - moves the current tick forward to @now and puts every record
 * whose fire tick is <= @now on the due list, re-filing those whose slot came
 * round but whose (pushed) fire tick has not.  A @now at or before the
 * current tick changes nothing: the wheel's time never runs backwards.
 *
 * The due list is in the order records became due: at their fire tick, or,
 * for a record added (or moved) with a fire tick already at or before the
 * current tick, at once.  So what one call makes due is in fire-tick order,
 * after everything already on the due list.  Records with equal fire ticks
 * keep the order in which they were added (or moved earlier by
 * wheel_update); a record pushed later in place joins that order when its
 * old slot comes round and it is re-filed.
 *
 * Return: how many records became due.
 */
uint64_t wheel_advance(struct wheel *w, uint64_t now);

/*
 * wheel_flush - puts every record on the due list at once, whatever its fire
 * tick, without moving the current tick: for an owner that shuts down and
 * must end every record.  Entries that still stand are claimed and made
 * due too; stale ones are dropped.  O(records + entries).  Afterwards
 * wheel_check() reports due records whose fire tick is ahead: pop them
 * all before checking.
 */
void wheel_flush(struct wheel *w);

/* wheel_pop - takes the first record off the due list; NULL when it is empty. */
struct wheel_timer *wheel_pop(struct wheel *w);

/*
 * wheel_next - the earliest tick at which wheel_advance() has work to do:
 * the current tick when records are due, UINT64_MAX when the wheel is empty.
 * Found from the occupancy bitmaps in O(levels).  For a slot above level 0
 * this is when the slot is visited, which may re-file records without any
 * becoming due; it is never later than the earliest fire tick.
 */
uint64_t wheel_next(const struct wheel *w);

/*
 * Bytes the logs (the slots' and the due list's) and the entries hold now
 * (their capacity), beyond sizeof(struct wheel).
 */
size_t wheel_log_bytes(const struct wheel *w);

/* Number of records linked in the wheel, due ones included (entries are not counted). */
static inline uint64_t wheel_count(const struct wheel *w)
{
	return w->count;
}

/* Whether @t is in a wheel (a slot, the overflow list or the due list). */
static inline bool wheel_timer_pending(const struct wheel_timer *t)
{
	return t->where != WHEEL_NONE;
}

/*
 * wheel_check - verifies every invariant of @w: list links, occupancy bits,
 * counts, that each record sits where it is visited no later than its fire
 * tick (where its fire tick belongs, or in an earlier-visited slot when its
 * deadline was pushed later in place), and that due records are due; of
 * entries, that they sit at entry levels in occupied slots and that each
 * that still stands is visited no later than its fire tick.
 * O(records + entries); for tests and debug builds.
 *
 * Return: 0 when all hold; otherwise -EUCLEAN and *@why (if @why is not NULL)
 * points to a static description of the first broken one.
 */
int wheel_check(const struct wheel *w, const char **why);

/*
 * For an owner whose records' deadlines other threads may store between
 * wheel calls: @fire gives the fire tick to check a record against, or
 * returns false for a record whose new deadline is still on its way to the
 * owner (that record's placement is checked once it arrives).
 */
struct wheel_check_ops {
	bool (*fire)(const struct wheel_timer *t, void *ctx, uint64_t *fire);
	void *ctx;
};

/* wheel_check - with the owner's view of deadlines in flight; @ops may be NULL. */
int wheel_check_with(const struct wheel *w, const struct wheel_check_ops *ops, const char **why);

#endif /* KAIROS_WHEEL_H */
