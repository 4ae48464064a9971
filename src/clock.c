/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the service clock: a system clock (CLOCK_MONOTONIC or
 * CLOCK_BOOTTIME), or the manual clock of KAIROS_CLOCK_MANUAL, which only
 * kairos_clock_advance() moves.
 *
 * The manual clock.  A service on it reads no system clock for its timers
 * and has no timerfd: its shards sleep until something is posted to them,
 * and every post wakes a sleeping shard (shard.c).  kairos_clock_advance()
 * stores the new time, wakes every shard, and then waits until the service
 * is settled:
 *   - every shard has run a pass at the newest time (manual_seen), sleeps
 *     (sleep_tick != 0) and has nothing on its inbox: whatever was due by
 *     then has been fired, its inline callbacks have returned, and its
 *     queue expiries are on their queues' lists (their fds readable) or
 *     posted to their rings;
 *   - no run handed to a shard's workers is queued or running
 *     (runs_done == runs_pushed), so every worker callback has returned,
 *     and a periodic timer it delivered is back on its shard's inbox.
 * A callback may arm, reset or cancel (or advance the clock again) while it
 * runs; what that makes due is fired before the wait ends, because the
 * wait looks for all of the above at once.
 *
 * The look is a scan of every shard, not one atomic snapshot, so the
 * service's event count (ev_seq) closes the gap.  Every shard or worker
 * that goes quiet bumps the count BEFORE the store that makes it look
 * quiet (clock_quiet_mark()) and AFTER it (service_event(), which also
 * wakes the waiter).  A scan that found everything quiet counts only if
 * the count did not move between its start and its end: anything that
 * went quiet during the scan, after having made work for a shard the scan
 * had already passed, moved the count first.  The bump after the store
 * is the one a sleeping waiter needs: a waiter that read the count after
 * the first bump and saw the old state sleeps until the second.
 *
 * The waiting thread holds no lock and sleeps outside any read-side
 * section, on the service header's event count, which outlives the service
 * (internal.h); a destroy during the wait ends it with -ESHUTDOWN.
 */
#include "rcu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"

#include "internal.h"

void clock_failed(int err)
{
	kairos_die_err("clock_gettime", err);
}

void clock_quiet_mark(struct kairos *k)
{
	/* seq_cst: before the store that makes the caller look quiet (see above). */
	atomic_fetch_add_explicit(&k->ev_seq, 1, memory_order_seq_cst);
}

/*
 * Whether shard @s of a manual service has expired at @now and has nothing
 * left to do.  Called inside the read-side section.  The order of the loads
 * matters:
 *  - manual_seen is stored after sleep_tick is cleared at the top of a
 *    pass, so a sleep_tick seen set after it is the store that ended that
 *    pass, or a later one; and the pass's runs were counted before that
 *    store;
 *  - the inbox is read before sleep_tick: a shard takes its inbox (acq_rel)
 *    only after it cleared sleep_tick, so an inbox seen empty because the
 *    shard took it is followed by a sleep_tick of 0, or by the store that
 *    ended the pass that handled what it took.  (Read the other way round,
 *    a callback's arm due at once could be taken between the two loads,
 *    and the advance return before it ran.)
 */
static bool shard_settled(struct shard *s, uint64_t now)
{
	uint64_t pushed;

	if (atomic_load_explicit(&s->manual_seen, memory_order_seq_cst) < now)
		return false;
	if (atomic_load_explicit(&s->inbox, memory_order_seq_cst))
		return false;
	if (!atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst))
		return false;
	pushed = atomic_load_explicit(&s->dq.runs_pushed, memory_order_seq_cst);
	return atomic_load_explicit(&s->dq.runs_done, memory_order_seq_cst) == pushed;
}

/* Waits until @k is settled at its newest time (see above); 0 or -ESHUTDOWN. */
static int clock_settle(struct kairos *k)
{
	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);
		bool settled = true;
		uint64_t now;

		if (service_enter(k))
			return -ESHUTDOWN;
		now = atomic_load_explicit(&k->manual_now, memory_order_seq_cst);
		for (unsigned i = 0; i < k->nshards && settled; i++)
			settled = shard_settled(k->shards[i], now);
		service_leave();
		if (!settled)
			futex_wait32(&k->ev_seq, seq);
		else if (atomic_load_explicit(&k->ev_seq, memory_order_seq_cst) == seq)
			return 0;
	}
}

KAIROS_EXPORT int kairos_clock_advance(struct kairos *k, uint64_t ns)
{
	uint64_t now, to;
	int rc;

	if (!k)
		return -EINVAL;
	rc = service_enter(k);
	if (rc)
		return rc;
	if (!service_manual(k)) {
		rc = -EINVAL;
		goto out;
	}
	now = atomic_load_explicit(&k->manual_now, memory_order_relaxed);
	do {
		/*
		 * 2^64 - 1 ns stands for never: a deadline or next period that
		 * would pass it saturates there (shard.c, jitter.c), and a clock
		 * that reached it would find such a periodic timer due after
		 * every run, where the tick divides 2^64 - 1.
		 */
		if (clock_add_overflows(now, ns, &to) || to == UINT64_MAX) {
			rc = -EOVERFLOW;
			goto out;
		}
		/*
		 * seq_cst: a shard that is woken below, or that the waiter
		 * finds quiet, reads this time or a later one; release pairs
		 * with service_now()'s acquire.
		 */
	} while (!atomic_compare_exchange_weak_explicit(&k->manual_now, &now, to,
							memory_order_seq_cst,
							memory_order_relaxed));
	for (unsigned i = 0; i < k->nshards; i++)
		shard_wake_always(k->shards[i]);
	/* An advance that waits (an enclosing one, from a callback) looks again. */
	service_event(k);
out:
	service_leave();
	/*
	 * From a callback of @k the wait could be for this very callback (its
	 * worker's run, or its shard's pass): the time moves, the shards are
	 * woken, and whoever waits (an enclosing advance) waits for the rest.
	 */
	if (rc || in_service(k))
		return rc;
	return clock_settle(k);
}

/* ---- the counter clock (clock.h) -------------------------------------------
 * Each thread keeps its own anchor: a counter value t1 and a read n of
 * CLOCK_MONOTONIC taken after it.  The rate, ns per counter tick, is the
 * process's: measured from the first pair, taken when the first service
 * was created, to the first later one at least FAST_CAL_NS on, each an
 * ordered counter read between two clock reads, and never changed after
 * (a suspend between the two voids the measure: fast_rate()).
 * Until it is known every read is an ordered one.  Once it is, t1 is the
 * counter as the caller read it (its span had run out), then comes the
 * clock read, whose own counter read in the vDSO waits for it, and a
 * counter read after that gives the pair's width (fast_reanchor()).
 *
 * Why the estimate is never early.  n was read after t1, so the real time
 * at t1 is at most n, and at a later value t at most n + (t - t1) * rate.
 * The estimate is n + (t - t1) * mult + FAST_MARGIN_NS with t - t1 at most
 * one span (FAST_SPAN_NS at mult's rate), so it is early only if the real
 * rate exceeds mult's by more than margin / span, 36% (a third, with room
 * left for what follows): NTP slews the clock by 0.05% at most and
 * adjtimex()'s tick by 10%.
 *
 * Why it is late by FAST_MARGIN_NS and a microsecond at most.  n is at
 * most the pair's width after the real time at t1, and a pair wider than
 * FAST_PAIR_NS (the thread was interrupted inside it) serves no estimate:
 * the next call anchors again.  The rate's own error, from two bracketed
 * pairs FAST_CAL_NS apart, adds 0.02% of a span.
 *
 * The margin also covers the unordered counter read running ahead of the
 * instructions before it (a few memory latencies) and the counters of two
 * CPUs differing (the kernel keeps them in step or stops using them as its
 * clocksource).
 *
 * What it assumes: the counter the kernel reads for CLOCK_MONOTONIC, which
 * fast_clock_usable() checks once, and that it does not go back.  One that
 * does (a reset at a suspend) puts a thread's next read before its anchor,
 * where the distance wraps and the read is an ordered one; only a counter
 * that had climbed back to within one span after a thread's anchor at the
 * moment of that thread's first call could be misread, a 50 us window in
 * the machine's uptime.  A counter the clock stops following at run time
 * (the kernel's clocksource moved off it) is caught where a thread's new
 * anchor is compared with its last (fast_behind()), and the counter is
 * turned off for good.
 */
_Thread_local struct fast_anchor fast_anchor;

static struct {
	pthread_mutex_t lock;		/* over the look at the machine */
	/*
	 * 1: usable, -1: not, 0: not looked at yet (or could not tell).  Set
	 * under the lock; read without it by fast_reanchor(), whose callers
	 * use a service created after it became 1, and it never changes then.
	 */
	int known;
	const char *why;		/* the look's answer, for kairos_clock_info() */
	/*
	 * The clean pairs the rate is measured from: the first at the first
	 * create, under the lock; another each time a suspend is seen between
	 * a pair and the one in use (fast_rate()), each written once by the
	 * thread that claimed its slot and published by base_at's release.
	 */
	struct fast_base {
		uint64_t tsc, ns;	/* ns: the pair's midpoint */
		uint64_t boot;		/* CLOCK_BOOTTIME - CLOCK_MONOTONIC beside it */
	} base[FAST_BASES];
	_Atomic unsigned base_at;	/* the one in use */
	_Atomic unsigned base_used;	/* slots claimed */
	_Atomic uint64_t mult;		/* ns per tick, 32.32; 0: not measured yet */
} fast = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * Set, never cleared, when a thread finds the counter behind the clock
 * (fast_behind()): from then on every read is an ordered one (fast_now()
 * looks at it after each estimate, and a read that finds it set drops the
 * thread's anchor), and services created later do not use the counter.
 */
_Atomic int fast_off;

#if defined(__x86_64__)
/* The counter after every earlier instruction has finished. */
static inline uint64_t tsc_ordered(void)
{
	__builtin_ia32_lfence();
	return __builtin_ia32_rdtsc();
}

/*
 * An ordered counter read into *@tsc between two clock reads, the later in
 * *@ns; returns how far apart the two clock reads were, in ns.
 */
static uint64_t fast_pair(uint64_t *tsc, uint64_t *ns)
{
	uint64_t before = clock_now_ns(CLOCK_MONOTONIC);

	/* A test's suspend: the counter ran on while CLOCK_MONOTONIC stood (fault.h). */
	*tsc = tsc_ordered() + (uint64_t)atomic_load_explicit(&fault_suspend_ticks,
							      memory_order_relaxed);
	*ns = clock_now_ns(CLOCK_MONOTONIC);
	return *ns - before;
}

/*
 * How far CLOCK_BOOTTIME is ahead of CLOCK_MONOTONIC: it grows by the
 * time the machine spent suspended, during which CLOCK_MONOTONIC stands
 * and the counter may run on (or stop, or start again from 0).  @over: at
 * least the gap at the second read (CLOCK_BOOTTIME read last), else at
 * most the gap at the first (CLOCK_BOOTTIME read first).
 */
static uint64_t fast_boot_gap(bool over)
{
	uint64_t boot, mono;

	if (over) {
		mono = clock_now_ns(CLOCK_MONOTONIC);
		boot = clock_now_ns(CLOCK_BOOTTIME);
	} else {
		boot = clock_now_ns(CLOCK_BOOTTIME);
		mono = clock_now_ns(CLOCK_MONOTONIC);
	}
	return boot - mono + (uint64_t)atomic_load_explicit(&fault_suspend_ns,
							    memory_order_relaxed);
}

/*
 * Opens @path for reading; *@transient set when it failed for want of a
 * file descriptor or memory, which a later look may not lack.
 */
static FILE *open_look(const char *path, bool *transient)
{
	FILE *f = fopen(path, "re");

	if (!f && (errno == EMFILE || errno == ENFILE || errno == ENOMEM))
		*transient = true;
	return f;
}

/* Whether the first line of @path is @want. */
static bool file_is(const char *path, const char *want, bool *transient)
{
	char line[64];
	FILE *f = open_look(path, transient);
	bool is = false;

	if (f) {
		if (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = 0;
			is = strcmp(line, want) == 0;
		}
		fclose(f);
	}
	return is;
}

/* Whether the first "flags" line of /proc/cpuinfo has every flag in @want. */
static bool cpu_flags_have(const char *const *want, size_t n, bool *transient)
{
	char line[8192];
	FILE *f = open_look("/proc/cpuinfo", transient);
	bool have = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		have = true;
		for (size_t i = 0; i < n && have; i++) {
			const char *p = line;
			size_t len = strlen(want[i]);

			have = false;
			while ((p = strstr(p, want[i])) != NULL) {
				if (p > line && p[-1] == ' ' && (p[len] == ' ' || p[len] == '\n')) {
					have = true;
					break;
				}
				p += len;
			}
		}
		break;
	}
	fclose(f);
	return have;
}
#endif

/*
 * Looks at the machine: 1 usable, -1 not, 0 could not tell (no fd or
 * memory); *@why says which, in a sentence for people.
 */
static int fast_look(const char **why)
{
#if defined(__x86_64__)
	static const char *const flags[] = { "constant_tsc", "nonstop_tsc" };
	bool transient = false;

	if (!file_is("/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc",
		     &transient)) {
		*why = transient ? "could not read the kernel's clocksource (no file descriptor or "
				   "memory at create)"
				 : "the kernel's clocksource is not tsc";
		return transient ? 0 : -1;
	}
	if (!cpu_flags_have(flags, sizeof(flags) / sizeof(flags[0]), &transient)) {
		*why = transient ? "could not read /proc/cpuinfo (no file descriptor or memory at "
				   "create)"
				 : "the CPU lacks constant_tsc or nonstop_tsc";
		return transient ? 0 : -1;
	}
	*why = "clocksource tsc, constant_tsc and nonstop_tsc";
	return 1;
#else
	*why = "not an x86-64 machine";
	return -1;
#endif
}

/*
 * Called by kairos_create(), outside any read-side section.  A look that
 * could not open its files for want of a descriptor or memory, or that
 * found no clean pair in 100 tries, says no for this service and is made
 * again by the next create.
 */
bool fast_clock_usable(const char **why)
{
	bool usable;

	(void)pthread_mutex_lock(&fast.lock);
	if (!fast.known) {
		int known = fast_look(&fast.why);

#if defined(__x86_64__)
		if (known == 1) {
			uint64_t width = UINT64_MAX;
			struct fast_base *b = &fast.base[0];

			/* Read before the pair: a suspend in between is seen later. */
			b->boot = fast_boot_gap(false);
			/* A clean pair: not interrupted between its clock reads. */
			for (int i = 0; i < 100 && width > FAST_PAIR_NS; i++)
				width = fast_pair(&b->tsc, &b->ns);
			if (width > FAST_PAIR_NS) {
				/* A machine too loaded (or valgrind): the next create looks again. */
				known = 0;
				fast.why = "no clean reading of the counter beside the clock at create";
			} else {
				b->ns -= width / 2;
				atomic_store_explicit(&fast.base_used, 1, memory_order_relaxed);
				atomic_store_explicit(&fast.base_at, 0, memory_order_release);
			}
		}
#endif
		fast.known = known;
	}
	usable = fast.known == 1;
	*why = fast.why;
	if (usable && fast_clock_off()) {
		usable = false;
		*why = FAST_OFF_WHY;
	}
	(void)pthread_mutex_unlock(&fast.lock);
	return usable;
}

void clock_fork_lock(void)
{
	(void)pthread_mutex_lock(&fast.lock);
}

void clock_fork_unlock(void)
{
	(void)pthread_mutex_unlock(&fast.lock);
}

#if defined(__x86_64__)
/*
 * The rate from the base pair to (@tsc, @ns), a clean pair's counter read
 * and midpoint, or 0 while they are less than FAST_CAL_NS apart or the rate
 * is implausible (a counter under 62.5 MHz or over 16 GHz).
 *
 * A suspend between the two would skew it: CLOCK_MONOTONIC stands while
 * the counter may run on, and a rate measured low makes every estimate
 * early (by up to a fifth of a span before the plausible range stops it).
 * So a pair that finds CLOCK_BOOTTIME further ahead of CLOCK_MONOTONIC
 * than at the base (by FAST_SUSPEND_NS: a rate off by a tenth at most,
 * well inside the margin) becomes the base instead, and the measure starts
 * again.  Each base's gap is read before its pair and errs low, the gap it
 * is compared with after the pair and errs high: a suspend between the two
 * pairs is always seen, and one next to a read (or a read interrupted for
 * a millisecond) costs at most a needless new base.  After FAST_BASES of
 * them the rate stays unknown, and every read an ordered one.
 */
static void fast_rebase(uint64_t tsc, uint64_t ns, uint64_t boot)
{
	unsigned n = atomic_load_explicit(&fast.base_used, memory_order_relaxed);

	do {
		if (n >= FAST_BASES)
			return;
	} while (!atomic_compare_exchange_weak_explicit(&fast.base_used, &n, n + 1,
							memory_order_relaxed, memory_order_relaxed));
	fast.base[n] = (struct fast_base){ .tsc = tsc, .ns = ns, .boot = boot };
	/* Release: the slot's words before the index that names it. */
	atomic_store_explicit(&fast.base_at, n, memory_order_release);
}

static uint64_t fast_rate(uint64_t tsc, uint64_t ns, uint64_t gap_before)
{
	const struct fast_base *b = &fast.base[atomic_load_explicit(&fast.base_at,
								   memory_order_acquire)];
	uint64_t dn = ns - b->ns, dt = tsc - b->tsc;
	unsigned __int128 mult;

	if (ns < b->ns + FAST_CAL_NS)
		return 0;
	if (tsc <= b->tsc || fast_boot_gap(true) > b->boot + FAST_SUSPEND_NS) {
		fast_rebase(tsc, ns, gap_before);
		return 0;
	}
	/* Judged before it is narrowed: a counter that barely moved is no rate. */
	mult = ((unsigned __int128)dn << 32) / dt;
	if (mult < (UINT64_C(1) << 28) || mult > (UINT64_C(1) << 36))
		return 0;
	return (uint64_t)mult;
}
#endif

uint64_t fast_calibration(unsigned *bases)
{
	*bases = atomic_load_explicit(&fast.base_used, memory_order_relaxed);
	return atomic_load_explicit(&fast.mult, memory_order_relaxed);
}

void fast_anchor_set(struct fast_anchor *a, uint64_t tsc, uint64_t ns, uint64_t width,
		     uint64_t mult)
{
	a->tsc = tsc;
	a->ns = ns;
	a->mult = mult;
	a->span = mult && width <= FAST_PAIR_NS ? (FAST_SPAN_NS << 32) / mult : 0;
}

#if defined(__x86_64__)
/*
 * Whether the counter fell behind the clock between the thread's last
 * anchor @a and the clean pair (@tsc, @ns) it takes now: the clock moved on
 * further than the counter did at the rate @mult, by more than half the
 * margin and a quarter of the time between.  Both pairs clean, and the two
 * 1 ms apart at most, their difference is the pairs' widths and the rate's
 * error (3 us at most) and what the clock's rate was moved by since the
 * rate was measured: NTP's slew, 0.05%, or adjtimex()'s tick, 10% either
 * way (22% between a measure and a read), which the quarter allows; the
 * estimate itself stands a third.  More is a counter the clock no longer
 * follows (the kernel moved its clocksource off it, a counter reset),
 * whose estimates could come early; fast_off then turns it off.  (While
 * the kernel keeps time with the counter, a CPU whose counter lags reads
 * CLOCK_MONOTONIC from that counter too: no lag shows, and the estimate
 * is no earlier than that CPU's own clock read.)
 */
static bool fast_behind(const struct fast_anchor *a, uint64_t tsc, uint64_t ns, uint64_t mult)
{
	/* 1 ms in counter ticks, from the span: no division here. */
	int64_t d = (int64_t)(tsc - a->tsc), window = (int64_t)(a->span * FAST_CHECK_SPANS);
	int64_t by_counter, lag;

	if (!a->span || d > window || d < -window)
		return false;
	/* |d| <= window keeps the product under 1 ms << 32. */
	by_counter = d * (int64_t)mult / ((int64_t)1 << 32);
	lag = (int64_t)(ns - a->ns) - by_counter;
	if (lag <= (int64_t)(FAST_MARGIN_NS / 2) + (int64_t)(ns - a->ns) / 4)
		return false;
	atomic_store_explicit(&fast_off, 1, memory_order_relaxed);
	return true;
}
#endif

uint64_t fast_reanchor(uint64_t tsc)
{
#if defined(__x86_64__)
	uint64_t ns, width, mult, gap;

	/* Set before the first service that uses it was created (see struct fast). */
	if (fast.known != 1)
		return clock_now_ns(CLOCK_MONOTONIC);
	if (fast_clock_off()) {
		/* The anchor this thread held serves no later read either. */
		fast_anchor.span = 0;
		return clock_now_ns(CLOCK_MONOTONIC);
	}
	mult = atomic_load_explicit(&fast.mult, memory_order_relaxed);
	if (mult) {
		/*
		 * The caller's counter read is the anchor's: the clock read's
		 * own counter read waits for it (lfence or rdtscp in the vDSO),
		 * so the time read is at or after it.  A counter read after the
		 * clock's bounds the pair's width; a thread interrupted between
		 * them gets an anchor that serves nothing.  One clock read: a
		 * thread that calls less often than once a span pays 20-40 ns
		 * over an exact timer's call here, not a second clock read.
		 */
		uint64_t dt;

		ns = clock_now_ns(CLOCK_MONOTONIC);
		dt = __builtin_ia32_rdtsc() - tsc;	/* wraps if the thread moved back */
		/* Past a span it never serves (nor would the next read be in it). */
		width = dt > (FAST_SPAN_NS << 32) / mult ? UINT64_MAX : (dt * mult) >> 32;
		/*
		 * Behind: the old anchor serves nothing more (a counter that
		 * went back would come into its span again) and no new one is
		 * taken, so this thread's next read is an ordered one too.
		 */
		if (width <= FAST_PAIR_NS && fast_behind(&fast_anchor, tsc, ns, mult)) {
			fast_anchor.span = 0;
			return ns;
		}
		fast_anchor_set(&fast_anchor, tsc, ns, width, mult);
		return ns;
	}
	/* No rate yet: a pair bracketed by two clock reads, clean ones measure it. */
	gap = fast_boot_gap(false);
	width = fast_pair(&tsc, &ns);
	if (width <= FAST_PAIR_NS) {
		/* Racing threads store rates measured the same way: any will do. */
		mult = fast_rate(tsc, ns - width / 2, gap);
		if (mult)
			atomic_store_explicit(&fast.mult, mult, memory_order_relaxed);
	}
	fast_anchor_set(&fast_anchor, tsc, ns, width, mult);
	return ns;
#else
	(void)tsc;
	return clock_now_ns(CLOCK_MONOTONIC);
#endif
}
