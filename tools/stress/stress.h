/* SPDX-License-Identifier: MIT */
/*
 * stress.h - what the files of kairos-stress share: the configuration, the
 * per-timer bookkeeping table, the load threads, the tallies, the
 * violations and the lateness histograms.
 *
 *   kairos-stress.c   options, the run (start, progress, stop, destroy), main()
 *   load.c     the slot table, the callback, the load threads, the
 *                     per-timer checks and the final sweep
 *   keys.c     the key mix: timers named by keys, own and shared
 *   report.c   histograms, the text report, --json and --plot
 *
 * Who writes what, in one paragraph: each load thread owns a disjoint range
 * of slots, and is the only thread that arms, resets or cancels the timers
 * of its slots, so a slot's bookkeeping has a single writer except for what
 * the callback touches, which is atomic.  Callbacks run on the service's
 * worker threads, on the drainer thread of a queue (kairos_queue_run(); a
 * kairos_queue_take() entry is checked there as a callback would be), and,
 * for drained timers, on the thread that destroys the service; they count
 * into striped counters so that they share no cache line in the common
 * case.  The main thread reads the live counters for the progress line and
 * everything else after it has joined the load and drainer threads.
 *
 * Keys (--keys, --shared-keys) bend the first rule a little: a timer armed
 * with a shared key still lives in its arming thread's slot, but any thread
 * may move it (kairos_key_reset) or end it (kairos_key_cancel, or an arm
 * with KAIROS_KEY_REPLACE).  Its owner learns of such an end only from the
 * timer itself (a cancel_sync that finds it ended without a run), and the
 * per-key counters in struct skey close the books (keys.c).
 */
#ifndef KAIROS_STRESS_H
#define KAIROS_STRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <kairos/kairos.h>

#include "hist.h"
#include "opt.h"
#include "rng.h"

#define ST_STR_(x)	#x
#define ST_STR(x)	ST_STR_(x)
#define KAIROS_STRESS_VERSION	ST_STR(KAIROS_VERSION_MAJOR) "." ST_STR(KAIROS_VERSION_MINOR) "." \
				ST_STR(KAIROS_VERSION_PATCH)

#define ST_ALIGN	64	/* cache line */
#define NS_PER_MS	1000000ull
#define NS_PER_S	1000000000ull

/* ---- the operations ---------------------------------------------------- */

/* The mix: what a load thread does next, by weight. */
enum mix_op {
	M_RESET,	/* push a pending one-shot timer later (an idle timeout) */
	M_CANCEL,	/* kairos_cancel() a timer, pending or ended */
	M_ARM,		/* kairos_arm() a one-shot timer on a free slot */
	M_SYNC,		/* kairos_cancel_sync() a one-shot timer, pending or ended */
	M_PERIODIC,	/* start, or stop with cancel_sync/cancel, a periodic timer */
	M_KEY,		/* a key call: set, move, remove or find a key (keys.c) */
	M_N
};

extern const char *const mix_names[M_N];

/* The API calls counted, one row each in the report. */
enum api_call {
	A_ARM,
	A_ARM_EVERY,
	A_ARM_OPTS,	/* a queue's timers, one-shot and periodic */
	A_ARM_SLACK,	/* idle timeouts with a tenth of slack, on the workers */
	A_RESET,
	A_CANCEL,
	A_CANCEL_SYNC,
	A_KEY_RESET,
	A_KEY_CANCEL,
	A_KEY_FIND,
	A_REMAINING,	/* periodic: its next run against what its calls covered */
	A_RESET_AT,
	A_RESET_N,	/* counted per timer of the batch */
	A_CANCEL_N,	/* counted per timer of the batch */
	A_ARM_AT,
	A_N
};

extern const char *const api_names[A_N];

/* Outcomes counted per call. */
enum api_rc {
	RC_OK,
	RC_ENOENT,
	RC_EBUSY,
	RC_EEXIST,
	RC_OTHER,
	RC_N
};

/* ---- configuration ----------------------------------------------------- */

struct range_ns {
	uint64_t lo, hi;	/* inclusive */
};

/* When kairos_queue_destroy() is called, against kairos_destroy(). */
enum queue_end {
	QE_MIXED,	/* the odd-numbered queues before, the others after */
	QE_BEFORE,	/* before: their waiting entries end unrun, counted as drained */
	QE_AFTER,	/* after: kairos_destroy() drained them, so each returns 0 */
};

extern const char *const queue_end_names[3];

struct stress_config {
	double duration_s;
	unsigned threads;
	uint32_t timers;		/* slots, over all threads */
	unsigned mix[M_N];		/* weights */
	uint64_t tick_ns;
	unsigned shards;		/* 0: one per CPU */
	unsigned workers;		/* 0: the library's default */
	enum kairos_backend backend;
	const char *backend_name;	/* as given, for the report */
	enum kairos_delivery delivery;
	bool huge_pages;		/* KAIROS_HUGE_PAGES */
	struct range_ns idle;		/* idle timeouts: reset later, mostly cancelled */
	struct range_ns shorts;		/* short timers that fire */
	struct range_ns period;		/* periodic timers */
	struct range_ns life;		/* how long a periodic timer is kept */
	unsigned short_pct;		/* share of one-shot arms that are short */
	unsigned slow_pct;		/* share of short and periodic timers with slow callbacks */
	uint64_t slow_ns;		/* how long a slow callback sleeps */
	unsigned fill_pct;		/* slots armed before the mix starts */
	uint32_t periodics;		/* periodic timers kept, over all threads */
	uint64_t rate;			/* ops/s over all threads; 0: as fast as possible */
	uint64_t max_late_ns;		/* later than this is a stall: a violation */
	uint64_t seed;
	unsigned queues;		/* kairos_queue's, each with a drainer thread */
	unsigned queue_pct;		/* share of arms (one-shot and periodic) for a queue */
	enum queue_end queue_end;	/* when the queues are destroyed */
	uint32_t keys;			/* keys of each load thread's own */
	uint32_t shared_keys;		/* keys that every load thread uses */
	double interval_s;		/* progress lines when stderr is not a terminal */
	bool quiet;
	const char *json_path;
	FILE *json_f;			/* opened before the run */
	const char *plot_path;
};

/* ---- violations -------------------------------------------------------- */

enum viol {
	V_EARLY,	/* a callback started before the timer's deadline */
	V_TWICE,	/* a one-shot timer ran twice, or ran and was cancelled */
	V_AFTER_CANCEL,	/* a callback started after a cancel returned 0 */
	V_AFTER_STOP,	/* a callback started or ran after cancel/cancel_sync said it would not */
	V_AFTER_END,	/* a callback (or drain) of a timer that had already ended */
	V_LOST,		/* a timer that never ended, or ended twice */
	V_STALE_OK,	/* a call on an ended timer's id succeeded */
	V_RC,		/* an unexpected return value */
	V_CONCURRENT,	/* a callback ran concurrently with itself */
	V_CALLBACK,	/* a callback got a bad status or a wrong id */
	V_STALL,	/* a timer ran, or was still due and not run, --max-late after its deadline */
	V_COUNTERS,	/* kairos_stats() disagrees with the tool's own tallies */
	V_API,		/* calls after kairos_destroy(), kairos_backend_info() */
	V_QUEUE,	/* a queue's delivery: wrong thread or queue, counts of run/take */
	V_KEY,		/* a key call disagrees with the key's holder; a timer a key call
			 * ended ran; a refused (-EEXIST) arm left a timer */
	V_N
};

#define VIOL_EXAMPLES	5

struct viol_class {
	_Atomic uint64_t count;
	char example[VIOL_EXAMPLES][200];
};

extern const char *const viol_names[V_N];
extern struct viol_class viols[V_N];

__attribute__((format(printf, 2, 3)))
void violation(enum viol v, const char *fmt, ...);
uint64_t violations_total(void);

/* ---- the slot table ---------------------------------------------------- */

enum slot_kind { K_FREE, K_ONESHOT, K_PERIODIC };

/* How a slot's last timer ended, as the owner saw it. */
enum slot_end { E_NONE, E_FIRED, E_CANCELLED, E_STOPPED, E_DRAINED, E_KEYED, E_REFUSED };
/*
 * E_KEYED: a key call ended it (kairos_key_cancel, or a KAIROS_KEY_REPLACE
 * arm that cancelled it as the key's holder); E_REFUSED: the arm of this
 * epoch said -EEXIST, so there never was a timer.
 */

/* Owner-only flags (struct slot.oflags). */
#define O_SHORT		0x01	/* one-shot: a short timer, reset short again */
#define O_FIRING	0x02	/* one-shot: reset or cancel said it is firing */
#define O_STOPPING	0x04	/* periodic: kairos_cancel() said -EBUSY */
#define O_SHARED	0x08	/* one-shot: its key is shared (any thread may move or end it) */

/* Bits of struct slot.cur, besides the epoch in the upper half. */
#define F_PERIODIC	0x01ull	/* this epoch's timer is periodic */
#define F_NO_START	0x02ull	/* a cancel said no callback of this epoch starts again */
#define F_PREV_PERIODIC	0x04ull	/* the previous epoch's timer was periodic */
#define F_CANCELLED	0x08ull	/* a cancel returned 0 for this epoch's timer */
#define F_SLOW		0x10ull	/* its callback sleeps --slow-time: -EBUSY, cancel_sync waits */
#define F_PREV_SHIFT	8	/* enum slot_end of the previous epoch */
#define F_KEYED		0x20ull	/* a key call ended this epoch's timer */
#define F_REFUSED	0x40ull	/* this epoch's arm said -EEXIST: there is no timer */

/*
 * One tracked timer.  A slot is reused timer after timer; each use is an
 * epoch, passed to the callback in its arg with the slot's index, so a
 * callback of an earlier epoch is told apart from the current timer's.
 */
struct slot {
	/* The owning load thread's. */
	kairos_id id;		/* written by kairos_arm*() through @out; callbacks read it */
	uint64_t bound;		/* one-shot: no run before this (ns, service clock);
				 * periodic: when to reset it next */
	uint64_t until;		/* periodic: stop it after this */
	uint64_t t0_hi;		/* periodic: the service clock after the arm or last reset
				 * returned, less its delay; the library's run k is due
				 * by t0_hi + k * period (+ two ticks) */
	uint32_t sched_base;	/* periodic: @sched when its schedule was last set */
	uint32_t runs_end;	/* @runs when the library said its last timer ended
				 * (before the end's flag was stored), + 1; 0: not
				 * checked (end_check()) */
	uint32_t pos;		/* index in the owner's live or periodic list */
	uint32_t allowed;	/* periodic, O_STOPPING: the most runs it may reach */
	uint32_t key;		/* one-shot: its key's number + 1 (keys.c); 0: none */
	uint64_t kfloor;	/* O_SHARED: no move by a key call sets a deadline before this */
	uint8_t kind;		/* enum slot_kind: the timer now in the slot */
	uint8_t oflags;		/* O_* */
	uint8_t last_end;	/* enum slot_end of the slot's last timer */

	/*
	 * Shared with callbacks.  @cur is written by the owner with release
	 * before the arm (and when a cancel says no callback starts again) and
	 * read by the callback with acquire; the others are reset by the owner
	 * before the arm and then written by callbacks only.
	 */
	_Atomic uint64_t cur;		/* epoch << 32 | prev_end << 8 | F_* */
	_Atomic uint64_t t0;		/* periodic: run k (1-based) is due at t0 + k * period */
	_Atomic uint64_t period;
	_Atomic uint64_t covered;	/* periodic: periods covered by its calls so far */
	_Atomic uint64_t start_ns;	/* one-shot: when its callback started */
	_Atomic uint64_t taken_ns;	/* one-shot, taken: the deadline the entry carried */
	_Atomic uint32_t runs;		/* calls with status > 0, but for those that saw
					 * F_CANCELLED, F_NO_START or F_KEYED (reported) */
	_Atomic uint32_t drains;	/* calls with -ECANCELED */
	_Atomic uint32_t done;		/* one-shot: its callback has returned (release) */
	_Atomic uint32_t running;	/* a call is in progress */
	/*
	 * The queue the timer was armed for, plus 1; 0: the service's
	 * workers.  Written by the owner before the release of @cur, read by
	 * callbacks after their acquire of it (atomic only so that a
	 * callback of an ended epoch may read it while the owner rewrites it).
	 */
	_Atomic uint32_t qno;
	/*
	 * Periodic: odd while the owner resets the timer, when the schedule
	 * (t0, covered) is unknown to a call; the owner rewrites t0 and
	 * covered before making it even again (release).
	 */
	_Atomic uint32_t sched;
	/* Periodic: the odd @sched a call saw, and so was not counted; 0: none. */
	_Atomic uint32_t sched_skipped;
};

/* What the owners counted; added up over threads after they are joined. */
struct tally {
	uint64_t arms;		/* arms that returned 0, one-shot and periodic */
	uint64_t arms_periodic;
	uint64_t fired;		/* one-shot timers that ended by running */
	uint64_t cancelled;	/* one-shot timers a cancel returned 0 for */
	uint64_t pcancelled;	/* periodic timers a cancel returned 0 for */
	uint64_t pstopped;	/* periodic timers stopped while running (-EBUSY) */
	uint64_t preset;	/* periodic timers reset (kairos_reset returned 0) */
	uint64_t preset_busy;	/* periodic resets that found the timer firing (-EBUSY) */
	uint64_t pscheds;	/* periodic schedules checked against their calls (kairos_remaining) */
	uint64_t pscheds_skipped;	/* checks a call or a due run made unreadable */
	uint64_t syncs_running;	/* cancel_syncs of a one-shot seen running just before */
	uint64_t drained;	/* timers found drained by the final sweep */
	uint64_t overdue;	/* of those, already due when kairos_destroy began */
	uint64_t overdue_max;	/* how long the most overdue had been due (ns) */
	uint64_t late_pending;	/* resets/cancels that returned 0 over a tick past the deadline */
	uint64_t late_pending_max;	/* the most overdue of those (ns) */
	uint64_t checked;	/* timers whose end the identity was checked for */
	uint64_t stale;		/* calls made on ids of ended timers */
	uint64_t arms_queue;	/* arms for a queue, one-shot and periodic */
	uint64_t qunrun;	/* queue timers that ended unrun: their queue was destroyed */
	uint64_t qwithdrawn;	/* one-shot queue timers reset (0) over a tick past due */
	uint64_t qpaused;	/* resets and cancels made while their drainer was paused */
	uint64_t qpaused_due;	/* of those, on one-shot timers over a tick past due */
	uint64_t qfences;	/* waits for a drainer to finish checking what it took */
	uint64_t karms;		/* keyed arms that returned 0 (in arms too) */
	uint64_t karms_shared;	/* of those, on a shared key */
	uint64_t kcancelled;	/* own keys: timers a kairos_key_cancel returned 0 for */
	uint64_t kreplaced;	/* own keys: holders a KAIROS_KEY_REPLACE arm cancelled */
	uint64_t kreplaced_ran;	/* own keys: holders replaced while firing, that ran */
	uint64_t kstolen;	/* shared keys: timers found ended by someone's key call */
	uint64_t ksettles;	/* cancel_syncs that settled how a keyed timer ended */
	uint64_t kunmeasured;	/* shared keys: runs whose lateness is unknown (moved by others) */
	uint64_t kexact;	/* own keys: key calls whose one right answer was known */
	uint64_t kfired;	/* keyed timers that ended by running (in fired too) */
	uint64_t kprobes;	/* shared keys: old holders checked not pending after a call */
};

/* The key calls, counted per kind and per key scope in the report. */
enum key_op {
	K_SET,		/* kairos_arm_opts with a key */
	K_REPLACE,	/* the same with KAIROS_KEY_REPLACE */
	K_MOVE,		/* kairos_key_reset */
	K_REMOVE,	/* kairos_key_cancel */
	K_FIND,		/* kairos_key_find */
	K_NOPS
};

extern const char *const key_op_names[K_NOPS];

/* What each key call returned: 0, -ENOENT, -EBUSY, -EEXIST, other (enum api_rc). */
struct kcounts {
	uint64_t rc[2][K_NOPS][RC_N];	/* [0]: own keys, [1]: shared keys */
};

/*
 * One shared key's books, written by every load thread (relaxed atomics,
 * read after the joins).  Each timer that a key call ended is found by its
 * owner (kstolen) and counted on its key here: remove0 <= stolen <=
 * remove0 + replaced, since a kairos_key_cancel that returns 0 ends exactly
 * one holder and a REPLACE arm at most one (none if the holder was firing).
 */
struct skey {
	_Atomic uint64_t remove0 __attribute__((aligned(ST_ALIGN)));	/* key_cancel returned 0 */
	_Atomic uint64_t replaced;	/* REPLACE arms that returned 0 */
	_Atomic uint64_t stolen;	/* its timers found ended by a key call */
	_Atomic uint64_t eexist;	/* plain arms refused */
};

/* One load thread. */
struct lthread {
	/* Read live by the main thread: its own cache lines. */
	_Atomic uint64_t ops[A_N] __attribute__((aligned(ST_ALIGN)));
	_Atomic uint64_t late_pending;	/* as tally.late_pending, for the samples */
	struct lhist late;		/* one-shot lateness, measured at reap */

	/* Owner-only (the main thread reads them after the join). */
	pthread_t thread __attribute__((aligned(ST_ALIGN)));
	unsigned no;
	uint32_t lo, hi;		/* slots [lo, hi) */
	struct rng rng;
	uint32_t *live, nlive;		/* pending one-shot timers */
	uint32_t *per, nper, per_target;	/* periodic timers, stopping ones included */
	uint32_t *fq, fq_head, fq_len;	/* free slots, oldest first (ring of hi - lo) */
	uint32_t sweep;			/* next slot the incremental reap looks at */
	uint64_t next_sync_wait;	/* no cancel_sync waits for a one-shot to run before this */
	uint32_t slow_armed;		/* slot + 1 of the last slow short one-shot armed; 0: none */
	uint64_t rc[A_N][RC_N];
	uint64_t stale[A_N];
	uint64_t rc_busy_returning;	/* -EBUSY on a reaped one-shot still returning */
	struct tally t;
	uint32_t *kheld;		/* own keys: slot + 1 of the timer last armed with each */
	struct kcounts kc;
};

/* Counters of callbacks, striped by calling thread. */
#define CB_STRIPES	16

struct cb_stripe {
	_Atomic uint64_t oneshot;	/* one-shot calls, status > 0 */
	_Atomic uint64_t periodic;	/* periodic calls, status > 0 */
	_Atomic uint64_t periods;	/* periods those calls covered */
	_Atomic uint64_t drained;	/* -ECANCELED calls */
	struct lhist late;		/* periodic lateness, measured in the callback */
} __attribute__((aligned(ST_ALIGN)));

/* ---- queues ------------------------------------------------------------- */

#define QTAKE_MAX	64	/* entries per kairos_queue_take() */

/*
 * One queue and its drainer thread, which alone runs and takes from it, so
 * that the entries of a periodic timer are checked one at a time, in order.
 * kairos_queue_take() ends a one-shot timer (and sends a periodic one on to
 * its next period) when it hands the entry out, before the drainer has
 * checked it: an owner whose conclusions need that check to be done waits
 * for an odd @tseq to change (queue_fence()).  While @pause is odd the
 * drainer calls nothing: an owner that sees the same odd value before and
 * after a call knows that no entry of the queue was run or taken meanwhile.
 */
struct qdrainer {
	/* Read by the owners: a line of their own. */
	_Atomic uint32_t tseq __attribute__((aligned(ST_ALIGN)));
	_Atomic uint32_t pause;

	/* Read live by the main thread (single writer: the drainer). */
	_Atomic uint64_t run_calls __attribute__((aligned(ST_ALIGN)));
	_Atomic uint64_t take_calls;
	_Atomic uint64_t run_oneshot, run_periodic;	/* callbacks its runs made */
	_Atomic uint64_t take_oneshot, take_periodic;	/* entries its takes handed out */
	_Atomic uint64_t drained;	/* -ECANCELED calls of its timers (at destroy) */

	/* The drainer's; the main thread reads them after the join. */
	struct kairos_queue *q __attribute__((aligned(ST_ALIGN)));
	pthread_t thread;
	bool started;
	unsigned no;
	int shard;
	bool destroy_first;		/* destroyed before kairos_destroy() */
	_Atomic int wind_down;		/* set by the main thread when the load has stopped */
	struct rng rng;
	uint64_t run_cb;		/* on_timer calls in the current run (this thread) */
	uint64_t run_empty, take_empty;	/* calls that found nothing */
	uint64_t polls, polls_ready;	/* poll() on the queue's fd, and how many saw POLLIN */
	uint64_t pauses, paused_ns;
	int destroy_rc;			/* kairos_queue_destroy() */
	uint64_t unrun;			/* its timers that ended unrun (the final sweep) */
	struct kairos_expiry out[QTAKE_MAX];
};

/* ---- the run ------------------------------------------------------------ */

/* One sample a second, for the report's series, --json and --plot. */
struct sample {
	double t;
	double dt;		/* the sample's length: 1 s, or less for the last one */
	uint64_t ops[A_N];	/* during the second that ended at @t */
	uint64_t callbacks;	/* during the second */
	uint64_t late_pending;	/* resets/cancels that found a timer pending past its deadline */
	uint64_t wakeups;	/* during the second */
	uint64_t pending;	/* kairos_stats() at @t */
	uint64_t rss_kb;
};

struct backend_row {
	char name[32];
	char why[160];
};

struct stress {
	struct stress_config cfg;
	struct kairos *k;
	clockid_t clock;		/* the service clock, for callback start times */
	struct slot *slots;
	struct lthread *th;
	struct cb_stripe cb[CB_STRIPES];
	struct qdrainer *qd;		/* cfg.queues of them */
	struct skey *skeys;		/* cfg.shared_keys of them */
	/*
	 * [thread * shared_keys + key]: 0, or the clock read before that
	 * thread's kairos_key_reset of that key in progress (1 while it is
	 * being read); see key_floor().
	 */
	_Atomic uint64_t *kmoving;
	_Atomic int stop;		/* load threads stop when set */
	_Atomic unsigned started;	/* load threads that have finished their fill */

	/* Filled by the run for the report. */
	double elapsed_s;		/* load phase */
	uint64_t destroy_ns;
	uint64_t destroy_start;		/* service clock when kairos_destroy was called */
	_Atomic int destroying;		/* set before kairos_destroy: -ESHUTDOWN expected */
	int destroy_rc;
	struct kairos_stats live;	/* kairos_stats() when the load stopped */
	struct kairos_stats fin;	/* kairos_stats() after kairos_destroy() */
	int fin_rc;
	uint64_t live_tool_pending;	/* timers the slots held when the load stopped */
	unsigned nshards;
	struct backend_row *backends;
	struct backend_row slack_clock;	/* kairos_clock_info(): what slack timers read */
	struct backend_row slack_clock_end;	/* the same when the load stopped */
	uint64_t rss_start_kb, rss_load_kb, rss_end_kb, hwm_kb;
	struct sample *samples;
	size_t nsamples, samples_cap;
	bool interrupted;
	double stall_s;			/* longest time without a callback while timers were overdue */
	double stall_at;		/* when it ended (s into the load) */
};

extern struct stress S;

/* load.c */
int load_setup(void);
uint64_t rng_range(struct rng *s, const struct range_ns *r);
uint64_t service_now(void);
void count(struct lthread *t, enum api_call a, int rc);
int rc_class(int rc);
uint32_t slot_prepare(struct slot *s, bool periodic, bool slow, uint32_t qno);
void *slot_arg(uint32_t idx, uint32_t epoch);
bool fq_pop(struct lthread *t, uint32_t *idx);
void fq_push(struct lthread *t, uint32_t idx);
void list_add(uint32_t *list, uint32_t *n, uint32_t idx);
void slot_free(struct lthread *t, uint32_t idx, enum slot_end end);
void end_fired(struct lthread *t, uint32_t idx);
void reap(struct lthread *t, uint32_t idx);
const char *end_name(unsigned e);

/* keys.c */
int keys_setup(void);
void key_step(struct lthread *t);
void key_forget(struct lthread *t, uint32_t idx);
bool key_settle(struct lthread *t, uint32_t idx, const char *why);
void key_sweep(struct lthread *t, uint32_t idx);
uint64_t key_bound(const struct slot *s);
void keys_crosscheck(void);
void key_bytes(uint32_t g, unsigned char *buf, size_t *len);
void *load_main(void *arg);
int queues_setup(void);
void *drain_main(void *arg);
void load_final_sweep(void);
void on_timer(void *arg, kairos_id id, int status);
uint64_t now_ns(void);
void tally_sum(struct tally *out);
void cb_sum(uint64_t *oneshot, uint64_t *periodic, uint64_t *periods, uint64_t *drained);
/* Every load thread's calls into @totals; with @rc, their answers and stale-id calls added. */
void ops_sum(uint64_t totals[A_N], uint64_t rc[A_N][RC_N], uint64_t stale[A_N]);
uint64_t ops_total(const uint64_t ops[A_N]);
void sleep_ns(uint64_t ns);

/* One line of the cross-check of kairos_stats() against the tool's tallies. */
struct xcheck {
	const char *what;
	uint64_t lib, tool;
	bool ok;
};

#define XCHECKS_MAX	32
extern struct xcheck xchecks[XCHECKS_MAX];
extern unsigned nxchecks;

/* report.c */
void crosscheck(void);
void check_stalls(void);
void fmt_ns(char *buf, size_t len, uint64_t ns);
void fmt_count(char *buf, size_t len, double v);
void late_snapshot(struct lsnap *all, struct lsnap *oneshot, struct lsnap *periodic);
int report_text(FILE *f);
int report_json(FILE *f);
int report_plot(const char *path);
uint64_t rss_kb(const char *field);

#endif /* KAIROS_STRESS_H */
