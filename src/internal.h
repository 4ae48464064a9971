/* SPDX-License-Identifier: MIT */
/*
 * internal.h - the objects of a kairos service and how threads share them.
 *
 * Who touches what:
 *  - A shard's wheel, its timerfd arming and its expiry loop belong to the
 *    shard thread alone.
 *  - Any thread takes free records from a shard's pool (a lock-free stack
 *    of bundles, one bundle per thread at a time: thread.c), changes a
 *    record's state word with CAS, and posts records to the shard's inbox
 *    (a lock-free stack the shard takes whole).  Arms and cancels are
 *    counted in the calling thread's own state.
 *  - Workers take expired records from the shard's delivery queue (a list
 *    linked through the records themselves, so delivery never allocates,
 *    under a mutex taken once per batch, never by the hot arm/cancel/reset
 *    paths).
 *  - Records are looked up by id inside RCU read-side critical sections
 *    (liburcu, bulletproof flavour, so callers never register), and a record
 *    that ended is reused only after a grace period: a thread that looked a
 *    record up can still write to it without touching its next life.
 *  - No thread sleeps inside a read-side section: the grace periods of the
 *    bulletproof flavour are process-wide, so one sleeping reader would stall
 *    the reclamation of every service.  A thread that must wait (cancel_sync
 *    for a running callback, an arm for a shard far behind) leaves the
 *    section and sleeps on the service header's event count, which outlives
 *    the service (see struct kairos).
 */
#ifndef KAIROS_INTERNAL_H
#define KAIROS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kairos/kairos.h>

#include "clock.h"
#include "wheel.h"

#define KAIROS_HIDDEN	__attribute__((visibility("hidden")))
#define KAIROS_EXPORT	__attribute__((visibility("default")))
#define CACHELINE	64

/* die.c: impossible failures (a pthread call, a corrupted state word) stop here. */
#define kairos_die(what)	kairos_die_at(__FILE__, __LINE__, (what), 0)
#define kairos_die_err(what, err)	kairos_die_at(__FILE__, __LINE__, (what), (err))
void kairos_die_at(const char *file, int line, const char *what, int err)
	__attribute__((noreturn, cold));
/* Locks, unlocks and joins that cannot fail as kairos uses them. */
void mutex_lock(pthread_mutex_t *m);
void mutex_unlock(pthread_mutex_t *m);
void thread_join(pthread_t t);
/*
 * Starts a thread of the library with every signal blocked, so that signals
 * meant for the program reach its own threads, never a shard, worker or
 * the reclaimer (faults are still delivered).  pthread_create()'s result.
 */
int thread_start(pthread_t *t, void *(*fn)(void *), void *arg);
/*
 * Names the calling thread for top and gdb: "kairos-ROLE[-A[-B]]" (a
 * negative number is left out), truncated to 15 bytes.
 */
void thread_name(const char *role, int a, int b);

/* ---- ids ----------------------------------------------------------------
 * An id is fast:1 | gen:31 | shard:8 | index:24.  The generation is the
 * upper half of the record's state word (whose top bit stays 0) and changes
 * each time the record is reused, so a stale id fails the generation
 * compare; generations start at a per-service random value, so an id of
 * another service is rejected too (but for a 2^-31 chance).  A generation
 * is never 0, so no id is 0.  The fast bit says that the timer's slack
 * lets its resets read the counter clock (clock.h): a reset knows which
 * clock to read before it has loaded the record.  It is set at arm, and
 * wherever an id is made again from its record (shard_rec_id()), from the
 * record's slack (slack_fast()); nothing compares it.
 */
#define ID_INDEX_BITS	24
#define ID_SHARD_BITS	8
#define MAX_SHARDS	(1u << ID_SHARD_BITS)
#define MAX_RECORDS	(1u << ID_INDEX_BITS)	/* per shard */
#define GEN_MASK	UINT32_C(0x7fffffff)
#define ID_FAST		(UINT64_C(1) << 63)

static inline kairos_id id_make(uint32_t gen, unsigned shard, uint32_t index, bool fast)
{
	return (fast ? ID_FAST : 0) | (uint64_t)gen << 32 | (uint64_t)shard << ID_INDEX_BITS | index;
}

static inline uint32_t id_gen(kairos_id id) { return (uint32_t)(id >> 32) & GEN_MASK; }
static inline unsigned id_shard(kairos_id id) { return (unsigned)(id >> ID_INDEX_BITS) & (MAX_SHARDS - 1); }
static inline uint32_t id_index(kairos_id id) { return (uint32_t)id & (MAX_RECORDS - 1); }

/* ---- the state word -----------------------------------------------------
 * One 64-bit atomic per record decides every race: gen:32 | ver:23 | flags:9
 * (the generation's top bit always 0: GEN_MASK).
 *
 *   FREE ──arm──▶ PENDING ──expire (shard)──▶ FIRING ──worker──▶ RUNNING ──▶ (ended)
 *                  │  ▲ │                        │                   │
 *                  │  └─┘ RESETTING (a resetter   └──cancel──┐        └─periodic: PENDING
 *                  │        holds it for a store)            ▼
 *                  └──────────cancel────────────────────▶ CANCELLED
 *
 * Every transition, with its thread, its ordering and who retires the
 * record after it, is in timer.h; no other file writes the word.
 */
enum rec_state {
	ST_FREE = 0,
	ST_PENDING = 1,
	ST_RESETTING = 2,	/* a resetter is storing a new deadline */
	ST_FIRING = 3,		/* expired, queued for a worker, not started */
	ST_RUNNING = 4,		/* callback running */
	ST_CANCELLED = 5,
	ST_DONE = 6,		/* fired (one-shot) or drained */
	ST_PARKED = 7,		/* reset while waiting in a queue: pending again,
				 * still on the queue's list until a drainer
				 * sends it back to its shard (queue.c) */
};
#define ST_MASK		UINT64_C(0x7)
#define ST_QUEUED	UINT64_C(0x08)	/* on the shard's inbox */
#define ST_WAITERS	UINT64_C(0x10)	/* a kairos_cancel_sync() waits for this run to end */
#define ST_STOP		UINT64_C(0x20)	/* periodic: cancelled while running */
#define ST_REBASE	UINT64_C(0x40)	/* periodic: reset, take the period from the new deadline */
#define ST_PERIODIC	UINT64_C(0x80)	/* fixed for the record's life: a periodic timer */
/*
 * Filed by value (arrival.c): the shard knows the record only by index and
 * generation, on an arrival block or in a far wheel slot, never on its
 * inbox and never linked.  Nothing but the shard's claim, a cancel and a
 * reset that posts it takes the bit away.
 */
#define ST_FAR		UINT64_C(0x100)
#define ST_VER_SHIFT	9
#define ST_VER_ONE	(UINT64_C(1) << ST_VER_SHIFT)
#define ST_VER_MASK	(UINT64_C(0x7fffff) << ST_VER_SHIFT)
#define ST_GEN_MASK	(UINT64_C(0xffffffff) << 32)

static inline unsigned st_of(uint64_t s) { return (unsigned)(s & ST_MASK); }
static inline uint32_t st_gen(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint64_t st_with(uint64_t s, unsigned st) { return (s & ~ST_MASK) | st; }

/*
 * One timer: 64 bytes, one cache line.  @wt.deadline is in ticks; other
 * threads store it only while they hold the record in ST_RESETTING (or own a
 * record that is not yet posted), the shard reads it under the state word.
 */
struct rec {
	struct wheel_timer wt;		/* owned by the shard while linked */
	_Atomic uint64_t state;
	union {
		struct {
			kairos_fn fn;
			void *arg;
		};
		/*
		 * While the record is retired or free: the record FREE_AHEAD
		 * further along its bundle, or NULL.  Only a prefetch hint
		 * (table_alloc()); the chain itself is wt.link.next.
		 */
		struct rec *ahead;
	};
	/*
	 * Link on the inbox (written before the push), on the retired list,
	 * or, for the first record of a free bundle, on the free stack.  The
	 * records of a free bundle are chained through wt.link.next.
	 */
	struct rec *inbox_next;
} __attribute__((aligned(CACHELINE)));

/*
 * What a record needs beyond its cache line, kept beside its chunk in an
 * array allocated on first use: a periodic timer's period and runs, a
 * jitter, a key.  A record uses its entry when it is periodic (ST_PERIODIC)
 * or when REC_EXT is set in its wt.flags; the entry is written at arm,
 * before the post's release publishes it.
 *
 * The shard writes fire_ns and fire_status when it moves a periodic record
 * to FIRING; the worker reads them after taking the record from the
 * delivery queue (whose mutex orders the two), and nobody writes them again
 * until the record is PENDING once more.
 */
struct key_node;
struct arrival;
struct cds_lfht;

struct rec_ext {
	uint64_t period_ns;
	uint64_t next_ns;	/* the deadline (ns) of the coming run; saturates */
	uint64_t fire_ns;	/* the deadline of the run being delivered */
	int fire_status;	/* the expirations it covers */
	uint32_t policy;	/* periodic: KAIROS_PERIOD_* (0: fixed rate), set at arm */
	uint64_t jitter_ns;	/* every deadline gets up to this much later */
	/*
	 * The key this timer holds, until whoever ends it (or takes its key
	 * away) exchanges it for NULL (key.c).
	 */
	_Atomic(struct key_node *) key;
	/*
	 * Periodic: the deadline (ns) of its last reset, which its period
	 * restarts from (the tick in wt.deadline rounds it up); written by
	 * the resetter while it holds the record, read by the shard as it
	 * takes the post that says REBASE.
	 */
	_Atomic uint64_t rebase_ns;
	uint64_t spare;
};

_Static_assert(sizeof(struct rec_ext) == 64, "an ext entry is one cache line");

/* wt.flags: the record's queue number, and whether its ext entry is in use. */
#define REC_QUEUE_MASK	0x7fffu
#define REC_EXT		0x8000u

/*
 * Records come in chunks of 4096 slots, 256 KiB, aligned to their size.  Slot
 * 0 of a chunk is its header, so a record's index follows from its address:
 * chunk number (in the header) and offset.  Chunks are never freed while the
 * service lives, so a looked-up pointer always points at a record.
 */
#define CHUNK_BITS	12
#define CHUNK_RECS	(1u << CHUNK_BITS)
#define CHUNK_BYTES	(CHUNK_RECS * sizeof(struct rec))
#define MAX_CHUNKS	(MAX_RECORDS / CHUNK_RECS)

struct chunk_head {
	uint32_t no;				/* chunk number in its shard */
	uint32_t shard;				/* the shard's index */
	_Atomic(struct rec_ext *) ext;		/* CHUNK_RECS entries, or NULL */
	/*
	 * CHUNK_RECS bytes: the low 8 bits of each record's generation when it
	 * last ended, stored as it is retired (table_retire(), rbundle_add()).
	 * The shard tells stale wheel entries by them without loading a
	 * record (arrival.c, ent_gone()).  Relaxed atomics: any thread that
	 * retires writes, the shard reads.
	 */
	_Atomic uint8_t *ended;
	/* The last bundle head of a fresh chunk, from chunk_make() to chunk_install(). */
	struct rec *last_bundle;
};

struct rec_chunk {
	union {
		struct chunk_head head;
		struct rec pad;
	} h;
	struct rec recs[CHUNK_RECS - 1];	/* index offsets 1 .. 4095 */
};

_Static_assert(sizeof(struct rec) == CACHELINE, "a record is one cache line");
_Static_assert(sizeof(struct rec_chunk) == CHUNK_BYTES, "a chunk is exactly its mapping");

/*
 * A record's inbox_next, with relaxed atomics: on the inbox a poster writes
 * it while the shard may read it.  The free and retired stacks and the
 * delivery queue's runs link through it as well.
 */
static inline struct rec *rec_link(struct rec *r)
{
	return __atomic_load_n(&r->inbox_next, __ATOMIC_RELAXED);
}

static inline void rec_link_set(struct rec *r, struct rec *next)
{
	__atomic_store_n(&r->inbox_next, next, __ATOMIC_RELAXED);
}

/*
 * The number of @r's queue, 0 for none.  Relaxed atomics: a canceller of a
 * record's last life may read it while the record's next arm writes it
 * (the grace period between them orders the two, which TSan cannot see).
 */
static inline unsigned rec_queue_no(const struct rec *r)
{
	return __atomic_load_n(&r->wt.flags, __ATOMIC_RELAXED) & REC_QUEUE_MASK;
}

/* Whether @r uses its ext entry for more than a period (a key, a jitter). */
static inline bool rec_has_ext(const struct rec *r)
{
	return __atomic_load_n(&r->wt.flags, __ATOMIC_RELAXED) & REC_EXT;
}

/* The record after @r on a chain through wt.link.next (its first member). */
static inline struct rec *rec_chain_next(struct rec *r)
{
	return r->wt.link.next ? (struct rec *)(void *)r->wt.link.next : NULL;
}

/* ---- delivery --------------------------------------------------------------
 * Expired records wait for a worker in runs of up to WORKER_BATCH, in the
 * order they expired.  A run is a chain through wt.link.next, which is free
 * once the wheel has popped a record (wt.link.prev then holds a prefetch
 * hint, RUN_AHEAD); runs are linked through their first record's
 * inbox_next, which is free while a record is FIRING (it is on no inbox or
 * retired list).  A worker takes a whole run under the lock, one pointer,
 * and walks it outside.  Nothing on the way from the wheel to the callback
 * needs memory it may fail to get (the wheel's slot logs grow, and a log
 * that cannot grow only stops), so an arm that succeeded never costs the
 * process its life when its timer expires.
 */
#define WORKER_BATCH	64	/* records in a run */
/*
 * A record in a run names, in its wt.link.prev (free once popped), the
 * record RUN_AHEAD further along, for the worker to start loading: the
 * run's chain alone would make each record a miss that waits for the one
 * before, and each is a line the shard's core just wrote.
 */
#define RUN_AHEAD	4

struct dqueue {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rec *head, *tail;	/* the first records of the runs */
	size_t len;			/* runs */
	_Atomic bool stop;		/* written under the lock, read without */
	/*
	 * A manual-clock service only (clock.c): runs handed to the workers
	 * (added by the shard before the push) and runs they finished (added
	 * after the last callback of the run returned).  Equal: no callback
	 * of this shard is queued or running.
	 */
	_Atomic uint64_t runs_pushed;
	_Atomic uint64_t runs_done;
};

/*
 * Records a thread ends in a row, handed to the reclaimer a bundle at a
 * time.  The last FREE_AHEAD added are kept, to point each at the record
 * FREE_AHEAD after it (rec.ahead).
 */
#define FREE_AHEAD	8

struct rbundle {
	struct rec *first, *last;
	unsigned n;
	struct rec *recent[FREE_AHEAD];
};

/*
 * What a worker (or an inline-delivering shard) ends in a row, counted and
 * handed back once per run rather than once per record: the shard's
 * finished count and the reclaimer's list are lines every worker writes.
 */
struct expiry_lane;

struct wtally {
	uint64_t finished;
	struct rbundle rb;
	struct expiry_lane *lane;	/* where its expiries are counted */
};

/* Appends the chain @first..@last (linked through wt.link.next) to *@head..*@tail. */
static inline void rec_chain_append(struct rec **head, struct rec **tail, struct rec *first,
				    struct rec *last)
{
	last->wt.link.next = NULL;
	if (*tail)
		(*tail)->wt.link.next = &first->wt.link;
	else
		*head = first;
	*tail = last;
}

/* ---- lateness histogram (hist.c): 1/8-octave buckets, ns ------------------- */
#define LAT_SUB_BITS	3
#define LAT_BUCKETS	(64 << LAT_SUB_BITS)

struct lat_hist {
	_Atomic uint64_t bucket[LAT_BUCKETS];
	_Atomic uint64_t max;
};

void lat_record(struct lat_hist *h, uint64_t ns);
uint64_t lat_percentile(const uint64_t *bucket, uint64_t total, double q);
uint64_t lat_bucket_upper(unsigned b);

/*
 * What is counted per expiry: fired one-shots, periodic runs, early
 * callbacks and the lateness histogram.  Each shard has a lane of its own
 * (struct shard.own: inline delivery, queue drainers) and one per worker,
 * up to WORKER_LANES (worker i uses lane i % WORKER_LANES): with one set
 * of counters per shard, every worker would write the same fired count and
 * the same lateness bucket (a burst of expiries has one lateness) on every
 * callback, and those lines would go from core to core.  kairos_stats()
 * adds all lanes up.
 */
#define WORKER_LANES	8

struct expiry_lane {
	_Atomic uint64_t fired;
	_Atomic uint64_t periodic_runs;
	_Atomic uint64_t early;
	struct lat_hist lat;
} __attribute__((aligned(CACHELINE)));

/* ---- backends -------------------------------------------------------------- */
struct shard;

#define BK_TIMER	1	/* the timerfd expired */
#define BK_WAKE		2	/* the wake eventfd was written */

/* What a shard reports through kairos_backend_info(); see backend.c. */
struct backend_report {
	const char *name;
	char why[192];
};

struct backend_ops {
	const char *name;
	/* Called on the shard thread; the timerfd and eventfd exist. */
	int (*init)(struct shard *s);
	/* Blocks until the timerfd or the eventfd fires; returns BK_* bits or -errno. */
	int (*wait)(struct shard *s);
	/*
	 * Ends whatever the shard still has in flight (ring queue posts),
	 * then undoes init.  The shard thread settles first as it stops;
	 * fini may run on another thread.
	 */
	void (*fini)(struct shard *s);
	/*
	 * io_uring only (NULL for epoll): queues a CQE of @len and @data for
	 * the ring @fd on behalf of record @r (on s->posting), and submits
	 * what is queued; the completions come to queue_posted().
	 */
	int (*post)(struct shard *s, int fd, uint64_t data, uint32_t len, struct rec *r);
	int (*submit)(struct shard *s);
	/*
	 * io_uring only: the posts to @fd still queued (a submit failed) are
	 * made to fail when they are sent, as @fd may be closed and its
	 * number reused by then.
	 */
	void (*unsend)(struct shard *s, int fd);
	void (*settle)(struct shard *s);
};

extern const struct backend_ops backend_uring_ops KAIROS_HIDDEN;
extern const struct backend_ops backend_epoll_ops KAIROS_HIDDEN;

/* backend.c: the choice between them. */
int backend_choose(struct kairos *k);
int backend_start(struct shard *s);
void backend_fallback(struct shard *s, int err);
#define FALLBACK_WATCH_NS	(1000ull * 1000 * 1000)
#define FALLBACK_WATCH_POLL_MS	10

/* ---- queues (queue.c) ------------------------------------------------------
 * A queue is a destination for expiries that the user's own threads drain.
 * Its number (1 .. QUEUE_MAX) is in the records of its timers (wt.flags),
 * so a record names its queue without a byte more.  The expired records
 * wait on the queue's list, chained through wt.link.next as in a worker run;
 * FIRING, PARKED (reset meanwhile) or CANCELLED (cancelled meanwhile), they
 * stay there until a drainer (or a destroy) meets them, and only it retires
 * them.
 */
#define QUEUE_BLOCK	1024
#define QUEUE_DIRS	32
#define QUEUE_MAX	(QUEUE_BLOCK * QUEUE_DIRS - 1)	/* numbers 1 .. QUEUE_MAX */

struct kairos_queue {
	struct kairos *k;
	unsigned no;			/* in its records' wt.flags */
	unsigned shard;			/* its timers' shard: (no - 1) % shards */
	/*
	 * kairos_queue_ring()'s duplicate of the user's ring fd, or -1.  Under
	 * ring_lock, which the shard holds while it queues and submits posts
	 * for it, so that the fd is never closed under a post.
	 */
	pthread_mutex_t ring_lock;
	int ring_fd;
	int efd;			/* readable while the list is not empty */
	pthread_mutex_t lock;		/* the list, the flags, the waiters */
	pthread_cond_t cond;		/* kairos_queue_take() waits here */
	struct rec *head, *tail;
	bool signalled;			/* efd holds a count */
	_Atomic bool closed;		/* kairos_queue_destroy() has run */
	unsigned waiters;		/* takers in pthread_cond_wait */
	/*
	 * Timers armed for it that have not ended, plus one while it is not
	 * destroyed: whoever drops the last frees it.
	 */
	_Atomic uint64_t refs __attribute__((aligned(CACHELINE)));
	/* Drainers between their first look and their last touch of a record. */
	_Atomic unsigned active;
	/* On its service's queues_dead once its last reference went in a section. */
	struct kairos_queue *dead_next;
};

typedef _Atomic(struct kairos_queue *) qslot;

struct kairos_queue *queue_get(struct kairos *k, unsigned no);
/*
 * A reference to the queue numbered @no, or NULL when there is none or it
 * is being freed; for a thread that holds no record's reference to it.
 */
struct kairos_queue *queue_tryget(struct kairos *k, unsigned no);
/*
 * One more reference to @q, for a caller that knows the count is above 0
 * meanwhile (it holds one, or a record it owns does).
 */
static inline void queue_ref(struct kairos_queue *q)
{
	atomic_fetch_add_explicit(&q->refs, 1, memory_order_relaxed);
}
void queue_unref(struct kairos_queue *q);
/*
 * queue_unref() for a caller inside a read-side section: a last reference
 * leaves the free to the reclaimer (queue_reap()), since queue_free() takes
 * q_lock, which a kairos_queue_destroy() holds while it ends its list.
 */
void queue_unref_in_section(struct kairos *k, struct kairos_queue *q);
/* Frees the queues queue_unref_in_section() left; outside any section. */
void queue_reap(struct kairos *k);
/* A shard's expiries for one queue, collected over a pass (shard.c). */
void queue_append(struct shard *s, struct kairos_queue *q, struct rec *first, struct rec *last);
/* A ring queue's CQE post for @r completed with @res (the shard thread). */
void queue_posted(struct shard *s, struct rec *r, int res);
/* The posts in flight that will not complete: the last @unsent were never sent. */
void queue_posts_abandon(struct shard *s, size_t unsent);
void queue_teardown_wait(struct kairos *k);
void queue_teardown_drain(struct kairos *k, int how, uint64_t *count);

/* ---- shard ----------------------------------------------------------------- */
struct kairos;

/*
 * Whether a count has paused: a sweep that falls due while threads still
 * retire kept cancels waits for far_kept to stand still (shard.c).  The
 * notes are in any one unit of time, ns or ticks.
 */
struct quiet {
	bool waiting;		/* a wait has begun and not ended */
	uint64_t since;		/* the wait's first note */
	uint64_t count;		/* the count at the last note */
	uint64_t still;		/* when the count last moved, as far as the notes saw */
};

/*
 * Notes @count at @now.  True when the wait is over: the count has not
 * moved for @quiet, or @cap has passed since the wait's first note; the
 * next note then begins a new wait.  Else *@next is when the wait could
 * end, if nothing moves meanwhile.
 */
static inline bool quiet_note(struct quiet *q, uint64_t count, uint64_t now, uint64_t quiet,
			      uint64_t cap, uint64_t *next)
{
	uint64_t end;

	if (!q->waiting || count != q->count) {
		if (!q->waiting)
			q->since = now;
		q->waiting = true;
		q->count = count;
		q->still = now;
	}
	if (now - q->still >= quiet || now - q->since >= cap) {
		q->waiting = false;
		return true;
	}
	end = q->still + quiet;
	*next = end < q->since + cap ? end : q->since + cap;
	return false;
}

/*
 * Written by the shard thread and its workers only: arms and cancels count
 * in the calling threads' own state (thread.c), expiries in struct
 * expiry_lane, and pending is derived.
 */
struct shard_stats {
	_Atomic uint64_t finished;	/* one-shot callbacks that returned */
	_Atomic uint64_t cancelled;	/* periodic timers stopped while running */
	_Atomic uint64_t drained;
	_Atomic uint64_t wakeups;
	_Atomic uint64_t timer_sets;
	_Atomic uint64_t sweeps;	/* sweeps of every slot's stale entries (ents_tidy()) */
	_Atomic uint64_t swept;		/* the entries they dropped */
};

/*
 * Arrival blocks a shard can number (arrival.c): ARRIVAL_DIR pages of
 * ARRIVAL_PAGE pointers, made as blocks are, 1,048,576 blocks (64 Mi far
 * arms in flight to one shard).  Past that an arm posts its record.
 */
#define ARRIVAL_PAGE_BITS	12
#define ARRIVAL_PAGE		(1u << ARRIVAL_PAGE_BITS)
#define ARRIVAL_DIR		256u

/*
 * A shard's wake_pending, in its low bits: no wake-up under way; a poster
 * won the flag and is on its way to the eventfd write; the write is made
 * (later posters of this sleep need not write).  Above them, the count of
 * the shard's clears (WAKE_EPOCH each): a winner that stalled past a clear
 * cannot mark a later winner's write as made (wake_kicked(), shard.c).
 */
enum shard_wake { WAKE_NONE, WAKE_KICKING, WAKE_KICKED };
#define WAKE_STATE	3u
#define WAKE_EPOCH	4u

struct shard {
	/* Written by every poster: its own cache lines. */
	_Atomic(struct rec *) inbox __attribute__((aligned(CACHELINE)));
	_Atomic uint64_t inbox_posts;	/* approximate, to wake on a deep inbox */
	/* Arrival blocks opened since the shard last looked (arrival.c), once per ARRIVAL_N arms. */
	_Atomic(struct arrival *) arr_new;
	/*
	 * Blocks the shard has read to the end, for threads to open again:
	 * a stack pushed by the shard and popped one block at a time by the
	 * threads, its head the top block's number + 1 (0: empty) with a count
	 * of its changes in the high half, which makes the pop safe from ABA
	 * (arrival.c).  Every block ever made for this shard is found by its
	 * number in arr_dir, and freed with the shard.
	 */
	_Atomic uint64_t arr_pool;
	_Atomic uint32_t arr_made;		/* blocks numbered so far */
	_Atomic(struct arrival **) arr_dir[ARRIVAL_DIR];
	/*
	 * Written by the shard (twice a pass) and read by every poster: a line
	 * of its own, so that posters' writes above do not take it away.
	 *
	 * The tick the shard sleeps until (its timerfd), or 0 while it is awake
	 * and will look at the inbox before sleeping again.  A poster whose
	 * deadline is earlier wakes it.  SLEEP_FAR is set when that tick is
	 * more than SHARD_FLUSH_NS away: a post then wakes the shard, so that
	 * no post waits longer than that for the shard to take it.
	 */
	_Atomic uint64_t sleep_tick __attribute__((aligned(CACHELINE)));
	_Atomic uint32_t wake_pending;	/* enum shard_wake and epoch, cleared by the shard */
	/*
	 * A manual-clock service only: the time the last pass expired at,
	 * published before the shard sleeps; kairos_clock_advance() reads it
	 * (clock.c).
	 */
	_Atomic uint64_t manual_seen;

	/*
	 * Free records in bundles of up to BUNDLE_RECS: a Treiber stack of
	 * bundle heads linked through inbox_next, each bundle linked through
	 * wt.link.next.  No ABA tag is needed: pops happen inside RCU read-side
	 * sections and a popped bundle comes back only after a grace period
	 * (through the reclaimer), so the head cannot return to a record a slow
	 * popper still holds.
	 */
	_Atomic(struct rec *) free_head __attribute__((aligned(CACHELINE)));
	_Atomic(struct rec *) retired;	/* ended records awaiting a grace period */
	_Atomic uint64_t retired_n;	/* records on it or in the reclaimer's hands */
	/* Cancels of records filed by value that their callers retired (table_keep_flush()). */
	_Atomic uint64_t far_kept;
	/*
	 * The far_kept at which a sweep of stale entries comes due, as the
	 * shard last worked it out (ents_tidy()): the flush that brings
	 * far_kept to it sets sweep_ask.
	 */
	_Atomic uint64_t sweep_due_kept;
	/*
	 * Set by that flush: the reclaimer wakes the shard to sweep once
	 * far_kept stands still (shard_sweep_asks()).  The reclaimer's own
	 * notes on it follow.
	 */
	_Atomic uint32_t sweep_ask;
	struct quiet ask_quiet;		/* the reclaimer's, in ns */

	struct shard_stats stats __attribute__((aligned(CACHELINE)));
	struct expiry_lane own;		/* the shard's, its queue drainers' */
	struct expiry_lane *lanes;	/* the workers', nlanes; none with inline delivery */
	unsigned nlanes;

	/* Owner-only from here. */
	struct wheel wheel __attribute__((aligned(CACHELINE)));
	struct wheel_entry_ops eops;	/* the wheel's view of records filed by value */
	struct arrival *arr_open;	/* arrival blocks being read (arrival.c) */
	_Atomic uint64_t cancels_taken;	/* cancels it has taken from its inbox (tests read it) */
	uint64_t cancels_swept;		/* cancels_taken + far_kept at its last sweep of all entries */
	uint64_t kept_looked;		/* far_kept at its last look (ents_tidy()) */
	uint64_t tidy_need;		/* the cancels a sweep needed at that look */
	struct quiet sweep_quiet;	/* a sweep waiting for far_kept to pause, in ticks */
	uint64_t sweep_look;		/* the tick to look again at it; 0: none waits */
	uint64_t timer_tick;		/* what the timerfd is armed to; UINT64_MAX: disarmed */
	/* tfd is -1 on a manual-clock service, which has no timerfd. */
	uint64_t now_ns;		/* cached per loop pass */
	int tfd, efd, epfd;
	/*
	 * After a move from io_uring to epoll, until this CLOCK_MONOTONIC
	 * time (0: not moved, or past): the old ring's reads may still
	 * consume a count of the timerfd or eventfd, so epoll waits at most
	 * FALLBACK_WATCH_POLL_MS at a time and a wait that times out passes
	 * as if both had fired (backend_epoll.c).
	 */
	uint64_t watch_until;
	const struct backend_ops *ops;
	void *backend;			/* the io_uring backend's own state */
	struct rec *deferred;		/* due records a resetter or post holds */
	/*
	 * A taken inbox, newest first (shard.c): its first DRAIN_FIXED records
	 * here, the rest in a mapping kept while posts keep coming.
	 */
	struct rec *drain_fixed[256];
	struct rec **drain_big;
	size_t drain_big_cap;
	struct rec *dfirst, *dlast;	/* the run being filled, for the workers */
	size_t dlen;			/* records in it */
	struct rec *dback[RUN_AHEAD];	/* its last RUN_AHEAD records, by dlen % RUN_AHEAD */
	struct rec *rfirst, *rlast;	/* this pass's full runs */
	size_t nruns;
	struct kairos_queue *qcur;	/* the queue this pass's last expiries go to */
	struct rec *qfirst, *qlast;	/* and those expiries */
	/* Ring queue expiries whose CQE post is in flight, oldest first (queue.c). */
	struct wheel_link posting;
	size_t nposting;
	struct wtally itally;		/* inline delivery's, flushed each pass */
	unsigned checks;		/* passes since the last wheel_check (debug builds) */
	uint64_t flush_ticks;		/* SHARD_FLUSH_NS in ticks, at least 1 */
	uint64_t quiet_ticks;		/* SWEEP_QUIET_NS in ticks, at least 1 */

	struct kairos *k;
	unsigned index;
	pthread_t thread;
	_Atomic int stop;
	_Atomic uint32_t init_done;	/* futex: the thread has set up its backend */
	int init_rc;			/* backend init result, for kairos_create */

	/* Initial choice and run-time fallback; rep points at the one in force. */
	struct backend_report report[2];
	_Atomic(struct backend_report *) rep;

	_Atomic unsigned nchunks;
	_Atomic(struct rec_chunk *) chunk[MAX_CHUNKS];
	/*
	 * KAIROS_HUGE_PAGES: the region chunks are carved from, its address
	 * (REGION_BYTES aligned) | the chunks taken from it (table.c).
	 */
	_Atomic uint64_t region;

	/* Calling threads that arm on this shard (thread.c): changed on join, move and leave. */
	_Atomic unsigned callers;

	struct dqueue dq;
	pthread_t *workers;
	unsigned nworkers;
	_Atomic unsigned worker_seq;	/* numbers the workers' names */
};

/*
 * A service.  The header is never freed (destroyed ones stay on a list), so
 * a thread may sleep on its event count outside any read-side section and
 * still wake safely after kairos_destroy() has freed everything else.
 */
/* Stripes of the key table's node count (key.c): few enough to sum often. */
#define KEY_STRIPES	16

struct kairos {
	_Atomic int dead;		/* set by kairos_destroy() or, in a child, by fork */
	_Atomic int forked;		/* a service of the parent, in a child of fork() */
	struct kairos_config cfg;
	uint32_t salt;			/* first generation of every record (31 bits) */
	/*
	 * Least slack, in ticks, of a timer that reads the counter clock
	 * (clock.h); 0: none does (KAIROS_EXACT_CLOCK, a clock other than
	 * CLOCK_MONOTONIC, or no usable counter).  fast_slack_ns: the same in ns.
	 */
	uint32_t fast_ticks;
	uint64_t fast_slack_ns;
	const char *clock_why;		/* why, or why not (kairos_clock_info()); static */
	unsigned nshards;
	struct shard **shards;
	enum kairos_backend backend;	/* after $KAIROS_BACKEND (backend.c) */
	const char *backend_why;
	_Atomic uint64_t total_pending;	/* kept only when cfg.max_timers is set */
	/*
	 * The workers start with the first timer that needs them (kairos.c:
	 * staff()); a service whose timers all go to queues never has any.
	 * Set under staff_lock, read on every arm without a queue.
	 */
	_Atomic bool staffed;
	pthread_mutex_t staff_lock;
	/*
	 * The calling threads' state (thread.c): those on the list, and the
	 * counts of those that left or could not join.  Under thr_lock.
	 */
	pthread_mutex_t thr_lock;
	struct tstate *threads;
	struct {
		_Atomic uint64_t armed;
		_Atomic uint64_t cancelled;
	} base;
	_Atomic uint64_t rejected;

	pthread_t reclaimer;
	_Atomic uint32_t reclaim_seq;	/* futex the reclaimer sleeps on */
	_Atomic uint32_t reclaim_stop;	/* futex too: it cuts a pause short */
	_Atomic uint64_t reclaim_begun;	/* when its latest pass with records began */
	/*
	 * Set while some thread may hold kept cancels (tstate.kept): the
	 * reclaimer then looks at the threads every KEPT_SCAN_NS (thread.c).
	 */
	_Atomic uint32_t kept_watch;
	_Atomic uint64_t kept_steals;	/* bundles the reclaimer began to take (tests read it) */
	struct kairos *list_next;	/* on the list of live, then destroyed, services */
	struct kairos *list_prev;
	struct kairos_stats final;	/* the counters at the end of kairos_destroy() */
	_Atomic int final_valid;

	/*
	 * Sleepers outside the read-side section wait for ev_seq to change.  It
	 * is bumped when a record that a cancel_sync waits on ends, when a
	 * shard drains its inbox while ev_waiters (arms held back) is non-zero,
	 * and when kairos_destroy() starts and ends.  Its own line: the words
	 * above are read on every call.
	 */
	_Atomic uint32_t ev_seq __attribute__((aligned(CACHELINE)));
	_Atomic uint32_t ev_waiters;

	/*
	 * The time of a KAIROS_CLOCK_MANUAL service, in ns: only
	 * kairos_clock_advance() moves it (clock.c).  Its own line: arms read
	 * it, and an advance writes it.
	 */
	_Atomic uint64_t manual_now __attribute__((aligned(CACHELINE)));

	/*
	 * Queues by number (queue.c): QUEUE_DIRS blocks of QUEUE_BLOCK slots,
	 * each block allocated on first use and kept until destroy.  Slots are
	 * filled under q_lock and emptied without it.
	 */
	pthread_mutex_t q_lock;
	_Atomic(qslot *) qdir[QUEUE_DIRS];
	_Atomic bool queues_gone;	/* teardown has ended what queues held */
	/* Queues whose last reference went inside a section, to free (queue_reap()). */
	_Atomic(struct kairos_queue *) queues_dead;

	/*
	 * Keys (key.c): the table, made by the first keyed arm under
	 * key_lock; its hash seed; nodes removed from it, which the
	 * reclaimer frees after a grace period; how many nodes it holds, in
	 * stripes that threads add to by turns, and how many buckets the
	 * reclaimer last resized it to.
	 */
	_Atomic(struct cds_lfht *) keys;
	pthread_mutex_t key_lock;
	uint64_t key_seed;
	_Atomic(struct key_node *) key_garbage;
	char key_reads;			/* TSan only: where node reads say they are done (rcu.h) */
	_Atomic unsigned long key_buckets;
	struct {
		_Atomic long n;
	} __attribute__((aligned(CACHELINE))) key_count[KEY_STRIPES];
};

/* The shard record @r belongs to (from its chunk's header). */
static inline struct shard *rec_shard(struct kairos *k, const struct rec *r)
{
	const struct rec_chunk *c = (const struct rec_chunk *)((uintptr_t)r &
							       ~(uintptr_t)(CHUNK_BYTES - 1));

	return k->shards[c->h.head.shard];
}

/* Wakes every thread sleeping on @k's event count. */
void service_event(struct kairos *k);

/* clock.c: the service clock, system or manual. */
static inline bool service_manual(const struct kairos *k)
{
	return k->cfg.clock == KAIROS_CLOCK_MANUAL;
}

/* The service clock now, in ns: every read of it goes through here. */
static inline uint64_t service_now(struct kairos *k)
{
	if (__builtin_expect(service_manual(k), 0))
		/* Acquire pairs with kairos_clock_advance()'s store. */
		return atomic_load_explicit(&k->manual_now, memory_order_acquire);
	return clock_now_ns(k->cfg.clock);
}

/*
 * The service clock for a timer whose id has the fast bit (@fast): the
 * counter clock where the service allows it, never earlier than
 * service_now() and later by at most FAST_MARGIN_NS and a little.
 */
static inline uint64_t service_now_slack(struct kairos *k, bool fast)
{
	if (fast && k->fast_ticks)
		return fast_now();
	return service_now(k);
}

/* Whether a timer with @slack_ticks reads the counter clock (its id's fast bit). */
static inline bool slack_fast(const struct kairos *k, uint32_t slack_ticks)
{
	return k->fast_ticks && slack_ticks >= k->fast_ticks;
}
/*
 * A manual-clock service's shard or worker is about to go quiet (sleep, or
 * finish a run): clock_quiet_mark() before the change that says so, and
 * service_event() after it; see clock.c.
 */
void clock_quiet_mark(struct kairos *k);
/* Enters a call: 0 inside a read-side section, or -ESHUTDOWN outside one (kairos.c). */
int service_enter(struct kairos *k);
void service_leave(void);

/*
 * Which services this thread must not wait for.  tls_service: the service
 * whose shard or worker thread this is (its destroy joins the thread).
 * tls_frame: the callbacks this thread is inside, innermost first, one
 * frame on the stack of each delivery; a callback can run another
 * service's (kairos_queue_run() from a callback), so one pair would forget
 * the outer.  Only this thread reads and writes them.
 */
struct cb_frame {
	struct kairos *k;
	kairos_id id;
	const struct cb_frame *up;
};
extern _Thread_local struct kairos *tls_service KAIROS_HIDDEN;
extern _Thread_local struct shard *tls_shard KAIROS_HIDDEN;	/* on a shard thread */
extern _Thread_local const struct cb_frame *tls_frame KAIROS_HIDDEN;

/* Around a callback of (@k, @id): cb_enter(&f, k, id); fn(...); cb_leave(&f). */
static inline void cb_enter(struct cb_frame *f, struct kairos *k, kairos_id id)
{
	f->k = k;
	f->id = id;
	f->up = tls_frame;
	tls_frame = f;
}

static inline void cb_leave(const struct cb_frame *f)
{
	tls_frame = f->up;
}

/*
 * Whether a wait for @k to stop would wait for this thread: it is one of
 * @k's own threads, or inside a callback of @k (kairos_destroy(@k) says
 * -EDEADLK there, a cancel_sync during @k's destroy waits for its run alone).
 */
static inline bool in_service(const struct kairos *k)
{
	if (tls_service == k)
		return true;
	for (const struct cb_frame *f = tls_frame; f; f = f->up)
		if (f->k == k)
			return true;
	return false;
}

/* Whether this thread is inside the callback of (@k, @id). */
static inline bool in_callback(const struct kairos *k, kairos_id id)
{
	for (const struct cb_frame *f = tls_frame; f; f = f->up)
		if (f->k == k && f->id == id)
			return true;
	return false;
}

/* ---- a calling thread's state (thread.c) -----------------------------------
 * One per thread, for the service it called last; see thread.c.  Other
 * threads read the counters (kairos_stats) and, under thr_lock, take it off
 * the service's list (kairos_destroy); the rest is the thread's own.
 */
#define BUNDLE_RECS	64	/* free records a thread takes from a shard at once */
#define POST_HINTS	8	/* how far back an arm's record points (tstate.posted) */

struct tstate {
	_Atomic(struct kairos *) k;	/* the service it is on, or NULL */
	struct shard *s;		/* the shard it arms on */
	struct rec *free;		/* FREE records of @s, linked through wt.link.next */
	/*
	 * Whether the reclaimer was looked at for the bundle this thread pops
	 * next (kairos.c, arm()): by the arm that took the last record of the
	 * one before.  A bundle handed back (ts_hand_back()) was not.
	 */
	bool looked;
	/* The arrival block it files far timers of @s on (arrival.c), and its entries. */
	struct arrival *arr;
	unsigned arr_n;
	uint64_t arr_base;		/* @arr's base */
	/*
	 * 1 + the index of a shard whose pool of blocks was empty when this
	 * thread wanted one, or 0: the arm posted instead, and the call makes
	 * a block out of its section (arrival_grow()).
	 */
	unsigned arr_grow;
	/*
	 * Its last POST_HINTS arms, oldest overwritten first: each new arm's
	 * record points at the one POST_HINTS arms back (shard.c, inbox_drain()).
	 */
	struct rec *posted[POST_HINTS];
	unsigned nposted;
	_Atomic uint64_t armed;		/* single writer: this thread */
	_Atomic uint64_t cancelled;
	/*
	 * Cancelled records of @kept_s that were filed by value, retired here
	 * rather than posted (kairos.c, cancel()), and the ended byte each
	 * owes its chunk, stored as the bundle goes (table_keep_flush()).
	 * The thread's own, except while kept_steal is set: then the
	 * reclaimer takes them (thread.c, ts_collect_kept()).
	 */
	struct rbundle kept;
	struct shard *kept_s;
	_Atomic uint8_t *kept_end[BUNDLE_RECS];
	uint8_t kept_gen[BUNDLE_RECS];
	_Atomic uint32_t kept_open;	/* kept.n != 0; written by the bundle's holder */
	_Atomic uint32_t kept_flushes;	/* bundles handed over so far; likewise */
	_Atomic uint32_t kept_steal;	/* set by the reclaimer: the bundle is its own */
	/* The reclaimer's, under thr_lock: what its last look saw. */
	uint32_t kept_seen_flushes;
	bool kept_seen_open;
	struct tstate *next, *prev;	/* on k->threads, under k->thr_lock */
};

extern __thread struct tstate tls_ts KAIROS_HIDDEN;

struct tstate *ts_attach(struct kairos *k);
struct shard *ts_pick(struct kairos *k);
void ts_move(struct kairos *k, struct tstate *t, struct shard *s);
void ts_detach_all(struct kairos *k);
void ts_sum(struct kairos *k, uint64_t *armed, uint64_t *cancelled);
bool ts_collect_kept(struct kairos *k);
void ts_lock(struct kairos *k);
void ts_unlock(struct kairos *k);
void ts_forget(void);

/* This thread's state if it is on @k, else NULL; never joins (any context). */
static inline struct tstate *ts_mine(struct kairos *k)
{
	if (__builtin_expect(atomic_load_explicit(&tls_ts.k, memory_order_relaxed) == k, 1))
		return &tls_ts;
	return NULL;
}

/*
 * This thread's state on @k, joining @k first if need be; NULL when it
 * cannot (see ts_attach()).  Call outside any read-side section: the slow
 * path takes locks.  A state that destroy takes away meanwhile is never
 * used, because every use is inside a section that checked @k alive.
 */
static inline struct tstate *ts_for(struct kairos *k)
{
	struct tstate *t = ts_mine(k);

	return t ? t : ts_attach(k);
}

/* A count only its thread writes: a plain add, published by a release store. */
static inline void ts_bump(_Atomic uint64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_release);
}

static inline uint64_t ts_read(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_acquire);
}

/* table.c: record pools, lookup by id, reclamation. */
/*
 * Records of one shard on their way through the reclaimer past which an arm
 * about to take a new bundle waits for the reclaimer first (kairos.c,
 * arm_backoff()): threads that end records faster than grace periods pass
 * would otherwise grow the pool without bound.  It waits past
 * RECLAIM_LIMIT (4 MiB of records) when the bundle would grow the pool
 * (none is free) and the reclaimer's pass has lasted RECLAIM_SLOW_NS, and
 * past RECLAIM_LIMIT_HARD (16 MiB) in any case.
 *
 * Why the hard count applies with records free.  A wait is at most
 * ARM_BACKOFF_NS, and the arm that ends one may grow the pool by a whole
 * chunk, whose other bundles then go to arms that find records free and do
 * not wait: with callers that outnumber the CPUs, the reclaimer's passes
 * held up by callers preempted mid-call, and a wait only before a growth,
 * the pool grew by a chunk per wait, 25 MB a second (24 threads arming and
 * cancelling on one shard of 2 CPUs grew 54 MB in 2 s beside other tests).
 * Waiting at every bundle while the reclaimer holds the hard count keeps
 * the callers out of their read-side sections, so its grace period ends:
 * the same threads then hold 66 chunks (17 MiB) and stay level.
 *
 * Why the time.  A grace period waits for every thread inside a read-side
 * section, and liburcu-bp looks again only every 10 ms once a reader has
 * stayed in one: a caller that the reclaimer's own wake-up preempted
 * mid-call costs the pass 10-20 ms whenever the callers fill the CPUs.
 * Records then come back 10-20 ms after they end, and a pool of the live
 * timers plus that much churn is the steady state, not a backlog to wait
 * for: 2 callers on 2 CPUs with 1e4 timers each end 3.5 million records a
 * second per shard, and with the count alone they slept a third of their
 * time.  A pass that lasts longer than two such looks and some is a
 * reclaimer starved of CPU.
 */
#define RECLAIM_LIMIT	65536
#define RECLAIM_LIMIT_HARD	(4 * RECLAIM_LIMIT)
#define RECLAIM_SLOW_NS	(25 * 1000000ull)
bool table_reclaim_behind(struct shard *s);
void table_give_back(struct kairos *k, struct shard *s, struct rec *chain);

void rbundle_add(struct kairos *k, struct shard *s, struct rbundle *b, struct rec *r);
void table_keep_flush(struct kairos *k, struct tstate *t);
/*
 * How often the reclaimer looks for kept cancels that a quiet thread holds:
 * a bundle seen open at two looks in a row, with none handed over between,
 * is taken from its thread.  So a kept cancel reaches the reclaimer within
 * 2 * KEPT_SCAN_NS and a grace period (SHARD_FLUSH_NS in all, as a post
 * reaches its shard).
 */
#define KEPT_SCAN_NS	(4 * 1000000ull)
void rbundle_flush(struct kairos *k, struct shard *s, struct rbundle *b);

/*
 * The chunk of record @idx of @s, or NULL before it is made.  Acquire pairs
 * with chunk_install()'s release: its records and arrays are initialised.
 */
static inline struct rec_chunk *table_chunk(struct shard *s, uint32_t idx)
{
	return atomic_load_explicit(&s->chunk[idx >> CHUNK_BITS], memory_order_acquire);
}

/* Record @idx of @s, whose chunk exists (an index it handed out). */
static inline struct rec *table_rec(struct shard *s, uint32_t idx)
{
	return &table_chunk(s, idx)->h.pad + (idx & (CHUNK_RECS - 1));
}

/* The low 8 bits of the life record @idx of @s last ended in (chunk_head.ended). */
static inline uint8_t table_ended(struct shard *s, uint32_t idx)
{
	return atomic_load_explicit(&table_chunk(s, idx)->h.head.ended[idx & (CHUNK_RECS - 1)],
				    memory_order_relaxed);
}

/* The chunk record @r lies in (address arithmetic, no load). */
static inline struct rec_chunk *rec_chunk(const struct rec *r)
{
	return (struct rec_chunk *)((uintptr_t)r & ~(uintptr_t)(CHUNK_BYTES - 1));
}

/* @r's index in its shard @s (the chunk's number, then the offset in it). */
static inline uint32_t table_index(struct shard *s, const struct rec *r)
{
	const struct rec_chunk *c = rec_chunk(r);

	(void)s;
	return c->h.head.no << CHUNK_BITS | (uint32_t)(r - &c->h.pad);
}

/*
 * table_lookup - the record @id names, or NULL when the id cannot name one
 * (bad shard or index); the caller still compares the generation.  Call with
 * rcu_read_lock held.
 */
static inline struct rec *table_lookup(struct kairos *k, kairos_id id, struct shard **sp)
{
	unsigned sh = id_shard(id);
	uint32_t idx = id_index(id);
	struct rec_chunk *c;
	struct shard *s;

	if (sh >= k->nshards || (idx & (CHUNK_RECS - 1)) == 0)
		return NULL;
	s = k->shards[sh];
	c = table_chunk(s, idx);
	if (!c)
		return NULL;
	*sp = s;
	return &c->h.pad + (idx & (CHUNK_RECS - 1));
}

/* The ext entry of record @index, which it uses (dies if its chunk has no array). */
struct rec_ext *table_ext(struct shard *s, uint32_t index);
/* The ext entry of record @index, or NULL if its chunk has none (never allocates). */
struct rec_ext *table_ext_peek(struct shard *s, uint32_t index);
/* Wakes the reclaimer: something waits for a grace period. */
void table_kick(struct kairos *k);
void table_retire(struct kairos *k, struct shard *s, struct rec *r);
int table_reclaimer_start(struct kairos *k);
void table_reclaimer_stop(struct kairos *k);
void table_free(struct shard *s);

/* shard.c */
#define SHARD_POST_LIMIT	65536	/* posts a shard may be behind; see shard_post() */
#define SHARD_POST_BATCH	1024	/* posts that wake a sleeping shard even when no deadline moved earlier */
/*
 * The longest a post waits for its shard to take it: a cancelled record
 * reaches its shard (and then the reclaimer) within this, however idle the
 * shard.  See shard_post().
 */
#define SHARD_FLUSH_NS		(10 * 1000000ull)
/*
 * A sweep of stale entries that falls due while threads are still retiring
 * cancels of timers filed by value waits until they pause for this long, or
 * SHARD_FLUSH_NS at most, first at the reclaimer and then at the shard
 * (shard.c, ents_tidy()).
 */
#define SWEEP_QUIET_NS		(1000000ull)
#define SLEEP_FAR		(UINT64_C(1) << 63)	/* in sleep_tick; ticks stay below */

static inline uint64_t sleep_tick_of(uint64_t sleep)
{
	return sleep & ~SLEEP_FAR;
}

void shard_wake(struct shard *s);
void shard_wake_always(struct shard *s);
/*
 * The reclaimer's look at the shards whose threads asked for a sweep
 * (sweep_ask): wakes each one whose far_kept has not moved for
 * SWEEP_QUIET_NS, or that asked SHARD_FLUSH_NS ago.  Returns when it must
 * look again (CLOCK_MONOTONIC ns), or 0 when nothing is asked.
 */
uint64_t shard_sweep_asks(struct kairos *k, uint64_t now);

/*
 * shard_count_posts - adds @n to @s's backlog of posts (records on its
 * inbox, or an arrival block's worth), @sleep being the word of sleep_tick
 * the caller read: a sleeping shard is woken every SHARD_POST_BATCH, so the
 * backlog stays bounded and small without a wake-up per post.  The count
 * is approximate (racing posters may lose increments): it only paces
 * wake-ups.  Returns whether the shard is SHARD_POST_LIMIT behind (never
 * for a shard thread, which must not wait for one).
 */
static inline bool shard_count_posts(struct shard *s, unsigned n, uint64_t sleep)
{
	uint64_t c = atomic_load_explicit(&s->inbox_posts, memory_order_relaxed) + n;

	atomic_store_explicit(&s->inbox_posts, c, memory_order_relaxed);
	if (c >= SHARD_POST_BATCH && sleep != 0)
		shard_wake(s);
	return c >= SHARD_POST_LIMIT && !tls_shard;
}
int shard_new(struct kairos *k, unsigned index, struct shard **out);
void shard_free(struct shard *s);
int shard_start(struct shard *s);
void shard_stop(struct shard *s);
bool shard_post(struct shard *s, struct rec *r, uint64_t tick);
bool shard_post_recheck(struct shard *s, struct rec *r, uint64_t tick);
void shard_posts_taken(struct shard *s);
void shard_drain(struct kairos *k, struct shard *s, int how, uint64_t *count);
kairos_id shard_rec_id(struct shard *s, struct rec *r, uint64_t state);
void shard_end(struct shard *s, struct rec *r, uint64_t old, struct rbundle *rb);
void shard_drain_one(struct kairos *k, struct shard *s, struct rec *r, int how, uint64_t *count,
		     struct rbundle *rb);
void period_advance(struct rec_ext *p, uint64_t from_ns, uint64_t now_ns);
void period_restart(struct rec_ext *p, uint64_t end_ns);

/* worker.c */
int worker_start(struct kairos *k, struct shard *s);
void worker_stop(struct shard *s);
void worker_deliver(struct kairos *k, struct shard *s, struct rec *r, struct wtally *w);
void worker_tally_flush(struct shard *s, struct wtally *w);
void worker_rearm(struct shard *s, struct rec *r);
uint64_t expiry_begin(struct kairos *k, struct shard *s, struct expiry_lane *lane, struct rec *r,
		      bool periodic, bool coalesce, int *status);
void dqueue_push(struct dqueue *q, struct rec *first, struct rec *last, size_t nruns);

/* ---- arrivals (arrival.c) --------------------------------------------------
 * A far timer's arm files it by value: its record's index, generation and
 * fire tick go on the arming thread's arrival block for its shard, and the
 * shard copies them into its wheel (wheel_file_entry()) without touching
 * the record.  See arrival.c.
 */
#define ARRIVAL_N	64	/* entries in a block */
#define ARRIVAL_POSTS	8	/* posts a block counts as (shard_post()) */

/*
 * Eight bytes: the wheel's entry for the record and life, and the fire tick
 * at arm, as an offset from the block's base.
 */
struct arrival_ent {
	struct wheel_entry ent;
	uint32_t dtick;
};

/*
 * A block's base is its first entry's fire tick less ARRIVAL_SPAN / 2: an
 * entry whose fire tick lies more than ARRIVAL_SPAN / 2 before or after
 * the first's (24 days at the default tick) is posted instead.
 */
#define ARRIVAL_SPAN	(UINT64_C(1) << 32)

struct arrival {
	/*
	 * Entries published, with ARRIVAL_CLOSED once the thread has left the
	 * block: stored by the thread, read by the shard.
	 */
	_Atomic uint32_t pub;
	/*
	 * Set by the shard when it stops looking at the block (the thread has
	 * been quiet); the thread's next entry clears it and wakes the shard.
	 */
	_Atomic uint32_t dormant;
	uint64_t base;			/* entries' fire ticks are base + dtick */
	struct arrival_ent e[ARRIVAL_N];
	/* The shard's, on a line of their own (and @next, the opener's first). */
	uint32_t taken __attribute__((aligned(CACHELINE)));	/* entries it has filed */
	uint64_t seen_at;		/* the tick at which it last found a new entry */
	struct arrival *next;		/* on arr_new, then on arr_open */
	uint32_t no;			/* its number in its shard's arr_dir */
	_Atomic uint32_t pool_next;	/* on arr_pool: the next block's number + 1, or 0 */
};

#define ARRIVAL_CLOSED	(UINT32_C(1) << 31)

/* The least fire tick, ahead of the arm's own tick, that is filed by value. */
#define ARRIVAL_FAR_TICKS	(UINT64_C(1) << (WHEEL_BITS * WHEEL_ENTRY_LEVEL))
/* How often a shard looks at the blocks of threads that file by value. */
#define ARRIVAL_POLL_TICKS	(ARRIVAL_FAR_TICKS / 2)

bool arrival_open(struct shard *s, struct tstate *t, uint64_t fire, uint64_t now_ns,
		  unsigned *behind);
int arrival_grow(struct kairos *k, struct tstate *t);
int arrival_first(struct shard *s);
void arrival_close(struct tstate *t);
void arrival_rouse(struct shard *s, struct arrival *b);
void arrival_fenced(struct shard *s, uint64_t fire);

/* Whether shards look at arrival blocks by themselves (arrival.c): set once per process. */
extern bool arrival_lazy KAIROS_HIDDEN;
bool arrivals_polling(struct shard *s);
void arrivals_take(struct shard *s);
bool arrivals_waiting(struct shard *s);
void arrivals_free(struct shard *s);
void arrival_ops_init(struct shard *s);

/*
 * arrival_room - whether @t has a block for its shard @s with room for one
 * entry firing at tick @fire, armed at @now_ns, opening one if need be
 * (arrival_open()).  False: the arm posts its record as any other.
 */
static inline bool arrival_room(struct shard *s, struct tstate *t, uint64_t fire,
				uint64_t now_ns, unsigned *behind)
{
	if (__builtin_expect(t->arr && t->arr_n < ARRIVAL_N, 1))
		return fire - t->arr_base < ARRIVAL_SPAN;
	return arrival_open(s, t, fire, now_ns, behind);
}

/*
 * arrival_put - files record @idx of @s, life @gen, firing at @fire, by
 * value: after arrival_room() said yes, and after the record was published
 * PENDING | FAR with its fields.  Call with rcu_read_lock held.
 */
static inline void arrival_put(struct shard *s, struct tstate *t, uint32_t idx, uint32_t gen,
			       uint64_t fire)
{
	struct arrival *b = t->arr;

	b->e[t->arr_n] = (struct arrival_ent){ .ent = wheel_entry_of(idx, gen),
					       .dtick = (uint32_t)(fire - t->arr_base) };
	/* The block's next line starts coming now: after a quiet spell it is cold. */
	if (t->arr_n + 8 < ARRIVAL_N)
		__builtin_prefetch(&b->e[t->arr_n + 8], 1);
	t->arr_n++;
	/* Release: the entry before the count (arrival.c, "Telling the shard"). */
	atomic_store_explicit(&b->pub, t->arr_n, memory_order_release);
	if (!arrival_lazy) {
		arrival_fenced(s, fire);
		return;
	}
	/* The flag is read after the count is stored: the compiler must keep that order too. */
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(atomic_load_explicit(&b->dormant, memory_order_relaxed), 0))
		arrival_rouse(s, b);
}

/* futex.c: waits on 32-bit words (never on a state word, which is 64-bit). */
void futex_wait32(_Atomic uint32_t *word, uint32_t seen);
/* As futex_wait32(), for at most @ns; returns false once that time has passed. */
bool futex_wait32_for(_Atomic uint32_t *word, uint32_t seen, uint64_t ns);
void futex_wake32(_Atomic uint32_t *word, int n);

/* relax.c: spin politely while another thread holds a record for a few instructions. */
void cpu_relax_n(unsigned *spins);

#endif /* KAIROS_INTERNAL_H */
