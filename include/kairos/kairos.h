/* SPDX-License-Identifier: MIT */
/*
 * kairos.h - a kernel-assisted timer service for programs that hold very
 * many timers at once.
 *
 * Threading model, in one paragraph: a service runs one shard thread per
 * core.  Each shard owns a hierarchical timing wheel and one timerfd, armed
 * (absolute time) to the earliest non-empty slot and waited on through an
 * io_uring ring (or epoll when io_uring is refused).  Any thread may call any
 * function below at any time, callbacks included, without registering: ids
 * are looked up in lock-free tables protected by RCU, one atomic word per
 * timer decides cancel against fire, and changes to a wheel are posted to its
 * shard's lock-free inbox (a thread arms on the shard of the CPU it first
 * armed from, or on the one with the fewest calling threads if that has
 * more).  Callbacks run on worker threads of the timer's shard (or on the
 * shard thread itself with KAIROS_DELIVER_INLINE).
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure; none reports through errno (a call's own system calls may leave
 * it changed).  A call that fails never runs its callback.  A
 * timer that was accepted ends exactly once: its callback runs (one-shot),
 * it is cancelled, or it is drained by kairos_destroy().
 */
#ifndef KAIROS_KAIROS_H
#define KAIROS_KAIROS_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The version of this header (meson.build checks that it is the project's).
 * kairos_version() returns the library's, which a program linked against
 * the shared library may find newer than its header.  The ABI rules are in
 * docs/ABI.md: within one soname (libkairos.so.0) a newer library runs
 * programs built against any older header.
 */
#define KAIROS_VERSION_MAJOR	0
#define KAIROS_VERSION_MINOR	1
#define KAIROS_VERSION_PATCH	0

#define KAIROS_VERSION_XSTR(x)	KAIROS_VERSION_STR(x)
#define KAIROS_VERSION_STR(x)	#x
/* "MAJOR.MINOR.PATCH" of this header, e.g. "0.1.0". */
#define KAIROS_VERSION_STRING						\
	KAIROS_VERSION_XSTR(KAIROS_VERSION_MAJOR) "."			\
	KAIROS_VERSION_XSTR(KAIROS_VERSION_MINOR) "."			\
	KAIROS_VERSION_XSTR(KAIROS_VERSION_PATCH)

/*
 * The header's version as one number, 0xMMmmpp (each part below 256), as
 * libuv's UV_VERSION_HEX: versions compare as numbers.
 */
#define KAIROS_VERSION_NUMBER						\
	((KAIROS_VERSION_MAJOR << 16) | (KAIROS_VERSION_MINOR << 8) | KAIROS_VERSION_PATCH)

/*
 * KAIROS_CHECK_VERSION - true (1) when this header is version
 * @major.@minor.@patch or newer (each part below 256), in #if and in C
 * code alike:
 *	#if KAIROS_CHECK_VERSION(0, 2, 0)
 *	... use what 0.2.0 added ...
 *	#endif
 */
#define KAIROS_CHECK_VERSION(major, minor, patch)				\
	(KAIROS_VERSION_NUMBER >= (((major) << 16) | ((minor) << 8) | (patch)))

/*
 * A timer's handle.  0 is never a valid id.  An id names its record and the
 * record's 31-bit generation, so a stale id (or one of another service) is
 * rejected with -ENOENT, except with a chance of 2^-31 per record reuse.
 * Opaque: pass ids as returned; one changed by hand may still name its
 * timer, or none.
 */
typedef uint64_t kairos_id;

/*
 * kairos_fn - a timer callback.
 * @arg:    the pointer given when the timer was armed
 * @id:     the timer's id
 * @status: > 0: expirations this call covers (1 for a one-shot timer, more
 *          when a periodic timer missed periods); -ECANCELED: the timer was
 *          drained by kairos_destroy(..., KAIROS_DRAIN_NOTIFY)
 */
typedef void (*kairos_fn)(void *arg, kairos_id id, int status);

struct kairos;
struct kairos_queue;

/* How expired timers reach their callbacks (a queue's timers go to their queue). */
enum kairos_delivery {
	KAIROS_DELIVER_WORKERS = 0,	/* worker threads of the timer's shard */
	KAIROS_DELIVER_INLINE = 1,	/* on the shard thread; for short callbacks */
};

/* Which kernel interface a shard waits with. */
enum kairos_backend {
	KAIROS_BACKEND_AUTO = 0,	/* io_uring, else epoll (or $KAIROS_BACKEND) */
	KAIROS_BACKEND_URING = 1,	/* io_uring only: kairos_create fails without it */
	KAIROS_BACKEND_EPOLL = 2,	/* epoll + timerfd */
};

/* kairos_destroy() modes for timers still pending. */
#define KAIROS_DRAIN_DROP	0	/* end them without calling back */
#define KAIROS_DRAIN_NOTIFY	1	/* call each once with status -ECANCELED */

/*
 * Start from kairos_config_default(), or zero-fill: every field left 0 means
 * its default.  A clock of 0 (CLOCK_REALTIME's number) means CLOCK_MONOTONIC:
 * the wall clock jumps, and is never used.  The reserved words must be 0
 * (kairos_create() says -EINVAL otherwise); later versions give them
 * meanings whose 0 is today's behaviour, so the struct's size never changes.
 */
struct kairos_config {
	unsigned shards;		/* 0: one per online CPU (at most 256) */
	unsigned workers;		/* callback threads per shard; 0: 2 */
	uint64_t tick_ns;		/* wheel tick; 0: 1 ms; 1 us to 1 s */
	int clock;			/* a clockid_t: 0 or CLOCK_MONOTONIC (default),
					 * CLOCK_BOOTTIME; or KAIROS_CLOCK_MANUAL */
	uint64_t max_timers;		/* cap on pending timers; 0: none */
	int pin_cpus;			/* non-zero: pin shard k and its workers to CPU k */
	enum kairos_delivery delivery;
	enum kairos_backend backend;
	unsigned ring_entries;		/* io_uring SQ size; 0: 8; 1 works (slower) */
	unsigned flags;			/* KAIROS_HUGE_PAGES, KAIROS_EXACT_CLOCK, or 0 */
	uint64_t reserved[8];		/* must be 0 */
};

/*
 * kairos_config.flags: each shard's records come from 2 MiB regions that
 * transparent huge pages may back (madvise(MADV_HUGEPAGE)), so that a call
 * on a timer among millions misses the TLB less.  A region is resident
 * whole: a shard's pool grows 2 MiB (32,760 records) at a time, and the
 * arm that starts a region pays for zeroing it (and for any compaction the
 * kernel does to find a huge page).  See kairos_config_default(3).
 */
#define KAIROS_HUGE_PAGES	1u

/*
 * kairos_config.flags: every timer takes "now" from clock_gettime(), as
 * exact timers always do.  Without it, on x86-64 machines whose kernel
 * keeps time with the CPU's time-stamp counter, a timer with at least
 * 50 us of slack in whole ticks takes it from that counter, read without
 * waiting for the instructions before it, and may fire up to 20 us later
 * for it, never earlier.  See kairos_arm_slack(3).
 */
#define KAIROS_EXACT_CLOCK	2u

/*
 * kairos_config.clock: a clock that only kairos_clock_advance() moves, for
 * tests of code that uses kairos.  It starts at 0; the service never reads
 * a system clock for its timers and has no timerfd (its shards sleep until
 * posted to).  Every feature works on it; kairos_now() returns its time.
 * (Not a clockid of Linux.)
 */
#define KAIROS_CLOCK_MANUAL	1024

/*
 * Counters of a service; see kairos_stats().  kairos_stats() fills the whole
 * struct, its reserved words with 0; later versions add counters there, so
 * the struct's size never changes.
 */
struct kairos_stats {
	uint64_t armed;		/* timers accepted by kairos_arm*() */
	uint64_t fired;		/* one-shot timers whose callback started (or
				 * that kairos_queue_take() handed out) */
	uint64_t cancelled;	/* timers ended by a cancel that returned 0 (or a
				 * periodic timer stopped by a cancel while running) */
	uint64_t drained;	/* timers ended by kairos_destroy(), or by
				 * kairos_queue_destroy() (the entries waiting
				 * in the queue, its timers that expire later) */
	uint64_t pending;	/* timers not yet ended */
	uint64_t rejected;	/* arms refused for max_timers */
	uint64_t periodic_runs;	/* callback calls of periodic timers */
	uint64_t early;		/* callbacks started before their deadline (always 0) */
	uint64_t lateness_p50_ns;	/* callback start - deadline (one-shot: rounded
					 * up to its tick), over all calls; */
	uint64_t lateness_p99_ns;	/* percentiles are bucket upper bounds (within
					 * 1/8 of the true value), capped at the max */
	uint64_t lateness_max_ns;	/* exact */
	uint64_t wakeups;	/* shard loop wake-ups, all shards */
	uint64_t timer_sets;	/* timerfd_settime() calls, all shards */
	unsigned shards;
	unsigned reserved_uint;	/* 0 */
	uint64_t reserved[8];	/* 0 */
};

/*
 * kairos_version - the version of the library that runs (which may be newer
 * than the header a program was built with; compare KAIROS_VERSION_STRING).
 * @major, @minor, @patch: set to its parts; each may be NULL
 *
 * Context: any thread; does not block.
 * Return: the version as a string "MAJOR.MINOR.PATCH", e.g. "0.1.0"; static
 * storage, never NULL.
 */
const char *kairos_version(unsigned *major, unsigned *minor, unsigned *patch);

/*
 * kairos_config_default - fills @cfg with the defaults: one shard per online
 * CPU, 2 workers each, 1 ms tick, CLOCK_MONOTONIC, no cap, no pinning,
 * worker delivery, backend chosen by probing; the reserved words with 0.
 *
 * Context: any thread; does not block.
 */
void kairos_config_default(struct kairos_config *cfg);

/*
 * kairos_create - starts a timer service.
 * @cfg: the configuration, or NULL for kairos_config_default()'s
 * @out: where the new service is stored on success
 *
 * Starts the shard threads and the record-recycling thread; the workers
 * start with the first timer delivered to them (see kairos_arm()).  Every
 * thread it starts blocks every signal but those a fault raises (SIGSEGV,
 * SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS).  With KAIROS_BACKEND_AUTO each
 * shard uses io_uring when the kernel allows it and epoll + timerfd when
 * io_uring is refused (ENOSYS, EPERM or EACCES: an old kernel, a seccomp
 * profile, kernel.io_uring_disabled; or ENOMEM under a finite
 * RLIMIT_MEMLOCK), or lacks IORING_OP_READ or refuses its probe (before
 * Linux 5.6); any other
 * io_uring failure fails the create.  A ring that
 * stops working later moves its shard to epoll at run time (a refusal for
 * want of memory or completion space is tried again for a second at the
 * least, timers up to 1 ms late meanwhile, never early: kairos(3)).  The
 * environment variable KAIROS_BACKEND=auto|uring|io_uring|epoll (any case)
 * overrides KAIROS_BACKEND_AUTO, and "uring" then means io_uring or failure.
 * On failure nothing the call made (fd, thread, memory) is left.
 *
 * Context: any thread, callbacks included; blocks briefly (thread start).
 * Return: 0; -EINVAL for a NULL @out, an invalid @cfg field (more than 256
 * shards or 1024 workers, a tick under 1 us or over 1 s, a clock other than
 * CLOCK_MONOTONIC, CLOCK_BOOTTIME and KAIROS_CLOCK_MANUAL, ring_entries over
 * 4096, an unknown delivery, backend or flag, a reserved word that is not
 * 0) or another value of $KAIROS_BACKEND; -ENOMEM; -ENOSYS, -EPERM or -EACCES when
 * KAIROS_BACKEND_URING is forced and io_uring is refused (-EOPNOTSUPP when
 * it lacks IORING_OP_READ or refuses its probe); -EMFILE or -ENFILE
 * with no fd left; -EAGAIN when a thread cannot start; another -errno from a
 * failing system call (timerfd, eventfd, epoll, io_uring).
 */
int kairos_create(const struct kairos_config *cfg, struct kairos **out);

/*
 * kairos_destroy - stops a service.
 * @how: KAIROS_DRAIN_DROP or KAIROS_DRAIN_NOTIFY
 *
 * Waits for running callbacks to return, joins every thread the service
 * started, and ends each timer still pending exactly once: dropped silently,
 * or its callback called once with status -ECANCELED on the calling thread.
 * After it returns, no callback of this service is running or will run.
 * Calls on a destroyed service (the drained callbacks' too, but their
 * kairos_destroy(), which says -EDEADLK) return -ESHUTDOWN, but
 * kairos_stats(), which returns the final counters: a header of a few
 * hundred bytes stays allocated for that purpose, for the life of the
 * process.  A second, concurrent kairos_destroy() returns -ESHUTDOWN at once.
 *
 * Context: any thread except one of this service's callbacks, or a
 * callback that one runs through kairos_queue_run() (-EDEADLK); blocks
 * until callbacks return.
 * Return: the number of timers drained (>= 0); -EINVAL for a NULL @k or a
 * bad @how; -ESHUTDOWN if already destroyed; -EDEADLK from a callback of @k.
 */
int kairos_destroy(struct kairos *k, int how);

/*
 * kairos_arm - arms a one-shot timer that fires @delay_ns from now.
 * @fn:  the callback; called once when the timer fires, never before its
 *       deadline (the deadline rounds up to the next tick)
 * @out: where the timer's id is stored; may be NULL
 *
 * Context: any thread, callbacks included.  Does not block, except that a
 * thread other than a shard's waits, at most 10 ms and outside any lock,
 * while the timer's shard is 65536 posts behind (busy threads outnumber the
 * CPUs), or the recycling thread is far behind on its records; see
 * kairos_arm(3).  A thread's first arm or cancel on a service
 * (and its first after using another service) joins the service's list of
 * calling threads under a short per-service lock; see "Calling threads" in
 * kairos(3).  The service's first timer delivered to workers starts them
 * (see kairos(3), "Threading model").
 * Return: 0; -EINVAL for a NULL @k or @fn; -EOVERFLOW when now + @delay_ns
 * overflows 64 bits of nanoseconds; -EAGAIN when max_timers timers are
 * pending, or the workers could not start; -ENOMEM; -ESHUTDOWN after
 * kairos_destroy() (before any other error but a NULL @k, here and in
 * every call).
 */
int kairos_arm(struct kairos *k, uint64_t delay_ns, kairos_fn fn, void *arg, kairos_id *out);

/*
 * kairos_arm_at - like kairos_arm(), at the absolute time @deadline_ns of the
 * service clock (see kairos_now()).  A deadline in the past fires at once.
 * Return: as kairos_arm(), but never -EOVERFLOW.
 */
int kairos_arm_at(struct kairos *k, uint64_t deadline_ns, kairos_fn fn, void *arg, kairos_id *out);

/*
 * kairos_arm_every - arms a periodic timer: first at now + @period_ns, then
 * every @period_ns after its previous deadline (no drift).  When the service
 * falls behind by whole periods, one call covers them and its status says
 * how many (KAIROS_PERIOD_FIXED_RATE; kairos_arm_opts() offers the other
 * policies).  A periodic timer ends only by cancel or destroy.
 *
 * Return: as kairos_arm(); also -EINVAL for a @period_ns of 0.
 */
int kairos_arm_every(struct kairos *k, uint64_t period_ns, kairos_fn fn, void *arg, kairos_id *out);

/*
 * kairos_arm_slack - kairos_arm() for a timer that may fire up to @slack_ns
 * after its deadline: never before it, and at most @slack_ns (rounded down
 * to whole ticks) plus the usual wake-up latency after it.  The wheel then
 * picks a coarse slot in that window and files the timer fewer times on its
 * way down: idle timeouts that will mostly be cancelled or pushed later are
 * the use (a tenth of the delay is a good slack).  kairos_reset() keeps the
 * slack.  A slack of 0 is kairos_arm().
 *
 * Return: as kairos_arm().
 */
int kairos_arm_slack(struct kairos *k, uint64_t delay_ns, uint64_t slack_ns, kairos_fn fn,
		     void *arg, kairos_id *out);

/* kairos_timer_opts.flags */
#define KAIROS_ABSTIME		0x1	/* @when_ns is a time of the service clock, not a delay */
#define KAIROS_KEY_REPLACE	0x2	/* the key is held: cancel its holder, take the key */
/*
 * A periodic timer's policy, one of (0 is fixed rate); a policy flag
 * without a period, or both non-zero policies, is -EINVAL:
 *  - FIXED_RATE: the next deadline is the previous one + the period; periods
 *    missed while the service or the callback was late coalesce into one
 *    call whose status counts them.
 *  - FIXED_DELAY: the next deadline is the end of the run + the period, on
 *    the service clock; status 1.  The end of the run: the callback's
 *    return (worker, inline, kairos_queue_run()); for an entry taken with
 *    kairos_queue_take(), the take; for a ring queue, its CQE's post.
 *  - SKIP: missed periods are dropped (status 1); the deadlines stay on the
 *    grid of the first deadline + n periods: the next is the first grid
 *    point after the time the late run fired.
 */
#define KAIROS_PERIOD_FIXED_RATE	0x0
#define KAIROS_PERIOD_FIXED_DELAY	0x4
#define KAIROS_PERIOD_SKIP		0x8

/* The longest key, in bytes. */
#define KAIROS_KEY_MAX	256

/*
 * Options of one timer for kairos_arm_opts(): zero-fill, set what you need.
 * The reserved words must be 0; later versions give them meanings whose 0
 * is today's behaviour.
 */
struct kairos_timer_opts {
	struct kairos_queue *queue;	/* deliver to this queue; NULL: the service's
					 * workers (or inline) */
	uint64_t slack_ns;		/* may fire up to this late, never early */
	uint64_t period_ns;		/* periodic with this period; 0: one-shot */
	uint64_t jitter_ns;		/* the first deadline and each reset are
					 * uniform in [due, due + jitter_ns] */
	const void *key;		/* a key of the caller's bytes, or NULL */
	size_t key_len;			/* 1 .. KAIROS_KEY_MAX with a key, else 0 */
	int flags;			/* KAIROS_ABSTIME, KAIROS_KEY_REPLACE,
					 * KAIROS_PERIOD_* */
	int reserved_int;		/* must be 0 */
	uint64_t reserved[6];		/* must be 0 */
};

/*
 * kairos_arm_opts - arms a timer of any kind: one-shot or periodic, exact or
 * with slack, at a delay or an absolute time, delivered to the service's
 * workers or to a queue.  kairos_arm(), kairos_arm_at(), kairos_arm_every()
 * and kairos_arm_slack() are shorthands of it.
 * @when_ns: the first deadline: a delay from now, or with KAIROS_ABSTIME a
 *           time of the service clock; a periodic timer then runs every
 *           @o->period_ns after it
 * @o:       the options, or NULL for all zero
 * @fn:      the callback; may be NULL for a timer of a queue, whose entries
 *           are then only taken (kairos_queue_take())
 *
 * Context: as kairos_arm().
 * Return: as kairos_arm(); also -EINVAL for an unknown flag, both
 * KAIROS_PERIOD_FIXED_DELAY and KAIROS_PERIOD_SKIP, either of them with a
 * @o->period_ns of 0, a reserved word that is not 0, a NULL @fn without a
 * queue, a queue of another service or one destroyed, or a bad key (longer
 * than KAIROS_KEY_MAX, a key of length 0, a length without a key, or
 * KAIROS_KEY_REPLACE without a key); -EEXIST for a key held (without
 * KAIROS_KEY_REPLACE; under max_timers, before -EAGAIN).
 */
int kairos_arm_opts(struct kairos *k, uint64_t when_ns, const struct kairos_timer_opts *o,
		    kairos_fn fn, void *arg, kairos_id *out);

/*
 * kairos_cancel - cancels a timer.
 *
 * Context: any thread, callbacks included (their own timer too); does not
 * block (but for the join of kairos_arm()'s Context).  The timer's record
 * reaches its shard, and then the pool, within about 10 ms however idle the
 * shard: a cancel wakes no thread unless the shard sleeps longer than that.
 * Return:
 *   0        it was pending (or expired but its callback had not started);
 *            its callback will never run.
 *   -EBUSY   its callback is running now.  A periodic timer will not run
 *            again after that call returns.
 *   -ENOENT  no such pending timer: it fired, was cancelled, or never existed
 *            (ids of other services and stale ids included).
 *   -EINVAL  a NULL @k or an id of 0.  -ESHUTDOWN after kairos_destroy().
 */
int kairos_cancel(struct kairos *k, kairos_id id);

/*
 * kairos_cancel_n - kairos_cancel() of each of the @n timers in @ids, with
 * the next records loaded while the current one is cancelled: for an event
 * loop that closes many connections per wake-up.
 * @results: NULL, or an array of @n that receives each timer's own
 *           kairos_cancel() result (0, -EBUSY, -ENOENT, or -EINVAL for an
 *           id of 0)
 *
 * Context: as kairos_cancel(); holds no lock but kairos_cancel()'s join (a
 * thread's first call).  The whole batch is one RCU
 * read-side section, which holds back the recycling of ended records: split
 * batches of a million (tens of ms) into smaller ones.
 * Return: how many timers were cancelled (>= 0: those whose result is 0);
 * -EINVAL for a NULL @k, a NULL @ids with @n > 0 or an @n above INT_MAX;
 * -ESHUTDOWN after kairos_destroy().  On these errors no timer is cancelled
 * and @results is not written.
 */
int kairos_cancel_n(struct kairos *k, const kairos_id *ids, unsigned n, int *results);

/*
 * kairos_prefetch - starts loading timer @id's record into the cache, so
 * that a call on it soon after (kairos_cancel(), kairos_reset(),
 * kairos_remaining(), ...) does not wait for memory.  For a loop that
 * learns of many connections at once (an epoll_wait() that returned many
 * events) and then handles them one by one: prefetch the timers of the
 * next 8 to 16 first.  Changes nothing: the timer is neither looked at nor
 * touched, so a stale id is not told from a live one.
 *
 * Context: any thread, callbacks included; does not block.
 * Return: 0 when @id names a record slot of @k, its timer alive or not;
 * -ENOENT when it cannot (its shard or its block of records does not exist
 * in @k); -EINVAL for a NULL @k or an id of 0; -ESHUTDOWN after
 * kairos_destroy().
 */
int kairos_prefetch(struct kairos *k, kairos_id id);

/*
 * kairos_cancel_sync - kairos_cancel(), but when the callback is running,
 * waits until it has returned.  After it returns the callback is not running
 * and never runs again.
 *
 * Context: any thread; blocks while the callback runs, outside any lock and
 * outside RCU read-side sections (other services go on meanwhile).  From the
 * timer's own callback (or a callback that one runs through
 * kairos_queue_run()) it cannot wait for itself: it stops later runs and
 * returns -EDEADLK.
 * Once @k's destroy has begun the call returns when kairos_destroy() has
 * (the callback has then returned), or, from one of @k's own callbacks,
 * when the awaited callback has; from the timer's own callback or in a
 * child of fork(), at once.  A thread that calls it then must not hold a
 * lock that the callbacks kairos_destroy() runs (KAIROS_DRAIN_NOTIFY) take.
 * Return: 0, -ENOENT, -EINVAL, -ESHUTDOWN as kairos_cancel(); -EBUSY when the
 * callback was running (it has now returned); -EDEADLK from its own callback.
 */
int kairos_cancel_sync(struct kairos *k, kairos_id id);

/*
 * kairos_reset - moves a pending timer's deadline to now + @delay_ns, earlier
 * or later.  Pushing later is a store; pushing earlier is posted to the
 * timer's shard.  For a periodic timer the new deadline is its next run and
 * the period continues from there.
 *
 * Context: any thread, callbacks included (their own timer too); does not
 * block.
 * From a timer's own callback it therefore fails: -ENOENT for a one-shot,
 * -EBUSY for a periodic timer (arm a new timer instead).
 * Return: 0: the timer fires at the new deadline, not before; -ENOENT: the
 * timer has ended or is firing (a one-shot whose callback is starting or
 * running; but a one-shot timer of a queue whose expiry waits there
 * untaken is withdrawn from the queue and armed again: 0); -EBUSY: a periodic timer whose callback is starting or running
 * (try again after it); -EINVAL for a NULL @k or an id of 0; -EOVERFLOW
 * when now + @delay_ns overflows; -ESHUTDOWN after kairos_destroy().
 */
int kairos_reset(struct kairos *k, kairos_id id, uint64_t delay_ns);

/*
 * kairos_reset_at - kairos_reset() to the absolute time @deadline_ns of the
 * service clock.  It reads no clock: a caller that already knows the time
 * (an event loop's cached now) saves the read, which on some machines costs
 * more than the reset itself.  A deadline in the past fires at once.
 *
 * Context: as kairos_reset().
 * Return: as kairos_reset(), but never -EOVERFLOW.
 */
int kairos_reset_at(struct kairos *k, kairos_id id, uint64_t deadline_ns);

/*
 * kairos_reset_n - kairos_reset() of each of the @n timers in @ids, all to
 * the same now + @delay_ns, with one clock read for the batch and the next
 * records loaded while the current one is reset: for an event loop that
 * handles many connections per wake-up.
 * @results: NULL, or an array of @n that receives each timer's own
 *           kairos_reset() result (0, -ENOENT, -EBUSY, or -EINVAL for an
 *           id of 0)
 *
 * Context: as kairos_reset(); holds no lock, and it may spin for a few
 * instructions per timer that another thread is resetting at that moment.
 * The whole batch is one RCU read-side section, as for kairos_cancel_n().
 * Return: how many timers were moved (>= 0); -EINVAL for a NULL @k, a NULL
 * @ids with @n > 0 or an @n above INT_MAX; -EOVERFLOW when now + @delay_ns
 * overflows; -ESHUTDOWN after kairos_destroy().  On these errors no timer
 * is moved and @results is not written.
 */
int kairos_reset_n(struct kairos *k, const kairos_id *ids, unsigned n, uint64_t delay_ns,
		   int *results);

/*
 * Queues: expiries delivered to the user's own threads.  A timer armed with
 * kairos_arm_opts() for a queue expires into it instead of onto a worker;
 * the queue's fd becomes readable, and the thread that watches it runs the
 * callbacks (kairos_queue_run()) or takes the entries (kairos_queue_take()).
 * Every promise of a worker's timer holds: never early; a cancel that
 * returns 0 means the entry is never run nor taken, even once it waits in
 * the queue; a cancel during its kairos_queue_run() callback says -EBUSY and
 * kairos_cancel_sync() waits; a reset of a one-shot entry that waits untaken
 * withdraws it and arms it again (0).  See kairos_queue_create(3).
 */

/*
 * One entry handed out by kairos_queue_take(), which fills every field, the
 * reserved words with 0.  Callers allocate arrays of it, so its size never
 * changes: later versions report more in the reserved words.
 */
struct kairos_expiry {
	kairos_id id;		/* the timer's id */
	void *arg;		/* its arm's @arg */
	uint64_t deadline_ns;	/* the deadline it expired at (service clock) */
	int status;		/* expirations it covers, as kairos_fn's status */
	int reserved_int;	/* 0 */
	kairos_fn fn;		/* its arm's @fn (may be NULL); not called */
	uint64_t reserved[2];	/* 0 */
};

/*
 * kairos_queue_create - makes a queue of @k's.  Queues are bound to shards
 * in turn: the queue numbered n (the lowest number free, from 1) belongs to
 * shard (n - 1) % shards, and every timer armed for it is kept there.  So N
 * loop threads that each create one queue use N different shards (N up to
 * the shard count), the same ones on every run.
 *
 * Context: any thread; takes a per-service lock for a few instructions.
 * Return: 0; -EINVAL for a NULL argument; -ENOMEM; -EMFILE or -ENFILE (its
 * eventfd); -ENOSPC with 32767 queues in @k; -ESHUTDOWN.
 */
int kairos_queue_create(struct kairos *k, struct kairos_queue **out);

/*
 * kairos_queue_shard - the index of the shard @q's timers are kept on
 * (0 .. shards - 1).  With cfg.pin_cpus that shard runs on the CPU of the
 * same number: a loop thread may pin itself there too.
 *
 * Context: any thread; does not block.
 * Return: the index; -EINVAL for a NULL @q.
 */
int kairos_queue_shard(const struct kairos_queue *q);

/*
 * kairos_queue_destroy - ends the entries waiting in @q without running
 * them and closes its fd.  Timers still armed for @q go on until they end:
 * cancel and reset work on them, and one that expires ends there, unrun.
 * Each is counted once, as drained.  @q must not be used again, nor be in
 * a call of another thread but a kairos_queue_take() waiting on it, which
 * returns -EINVAL.  Valid before or after kairos_destroy() of its service;
 * every queue must be destroyed to free it.  In a child of fork(), a queue
 * of a service created before the fork is left as it is (-ESHUTDOWN), as
 * kairos_destroy() leaves its service.
 *
 * Context: any thread, callbacks included; does not wait for callbacks.
 * Return: how many waiting entries it ended (>= 0); -EINVAL for a NULL @q;
 * -ESHUTDOWN in a child of fork(), as above.
 */
int kairos_queue_destroy(struct kairos_queue *q);

/*
 * kairos_queue_fd - an eventfd that is readable while entries wait in @q:
 * poll it (POLLIN), put it in epoll, or read it through io_uring, then call
 * kairos_queue_run() or kairos_queue_take().  Reading it is not needed (and
 * does no harm).  It may be readable with nothing left to run: the entries
 * waiting may all have been cancelled or reset meanwhile.
 *
 * Context: any thread; does not block.
 * Return: the fd (owned by @q: do not close it); -EINVAL.
 */
int kairos_queue_fd(struct kairos_queue *q);

/*
 * kairos_queue_ring - posts @q's expiries as completions into the io_uring
 * ring whose fd is @ring_fd (IORING_OP_MSG_RING, Linux 5.18), from @q's
 * shard, instead of holding them for kairos_queue_run() or _take().  Each
 * expiry becomes one CQE: user_data is the timer's arm @arg, res its status
 * (the expirations it covers, >= 1); its callback is not called.  An
 * expiry counts as run once its CQE is posted: until then a cancel says
 * -EBUSY and kairos_cancel_sync() waits; a cancel that returns 0 means no
 * CQE ever comes.  An expiry whose post fails (the ring's owner exited, its
 * completion queue cannot grow) waits in @q as without a ring, so @q's fd
 * is worth watching too.  kairos keeps a duplicate of @ring_fd until @q is
 * detached (@ring_fd < 0) or destroyed.
 *
 * Context: any thread; takes @q's lock; does not wait for a post.
 * Return: 0; -EINVAL for a NULL @q; -EBADF when @ring_fd is not an open
 * io_uring ring (without /proc to tell, any open fd is taken for one);
 * -EOPNOTSUPP when the kernel has no IORING_OP_MSG_RING or @q's shard
 * runs on epoll; -EMFILE or -ENFILE (the duplicate, or the probe's ring);
 * -ENOMEM (the probe: the next call probes again); -ESHUTDOWN.
 */
int kairos_queue_ring(struct kairos_queue *q, int ring_fd);

/*
 * kairos_queue_run - runs up to @max callbacks of entries waiting in @q, on
 * the calling thread, oldest first.  Entries cancelled meanwhile are
 * skipped, and entries reset meanwhile go back to their shard; neither
 * counts toward @max.  An entry without a callback counts as run.
 *
 * Context: any thread, callbacks included; several threads may run one
 * queue.  Does not block, except in the callbacks it runs, which run
 * outside any lock.
 * Return: how many it ran (>= 0); -EINVAL for a NULL @q or a @max of 0;
 * -ESHUTDOWN after kairos_destroy().
 */
int kairos_queue_run(struct kairos_queue *q, unsigned max);

/*
 * kairos_queue_take - takes up to @max entries waiting in @q into @out,
 * oldest first, without running anything: each ends as a timer whose
 * callback ran (a periodic one goes on to its next period).  Waits up to
 * @timeout_ns for the first: 0 does not wait, < 0 waits until one comes.
 *
 * Context: any thread; several threads may take from one queue.  Blocks up
 * to @timeout_ns, outside any read-side section.
 * Return: how many it took (0 when the time ran out); -EINVAL for a NULL
 * argument, a @max of 0, or @q destroyed while it waited; -ESHUTDOWN after
 * (or during) kairos_destroy().
 */
int kairos_queue_take(struct kairos_queue *q, struct kairos_expiry *out, unsigned max,
		      int64_t timeout_ns);

/*
 * kairos_key_reset - kairos_reset() of the timer that holds the key @key of
 * @len bytes.
 *
 * Context: any thread; does not block.
 * Return: as kairos_reset(); -ENOENT also when no timer holds the key;
 * -EINVAL for a NULL @key, or @len 0 or over KAIROS_KEY_MAX.
 */
int kairos_key_reset(struct kairos *k, const void *key, size_t len, uint64_t delay_ns);

/*
 * kairos_key_cancel - kairos_cancel() of the timer that holds @key.  A
 * cancel that returns 0 releases the key.
 *
 * Context: any thread; does not block, but for kairos_cancel()'s join (a
 * thread's first call).
 * Return: as kairos_cancel(); -ENOENT also when no timer holds the key;
 * -EINVAL as kairos_key_reset().
 */
int kairos_key_cancel(struct kairos *k, const void *key, size_t len);

/*
 * kairos_key_find - the id of the timer that holds @key, into *@out.
 *
 * Context: any thread; does not block.
 * Return: 0; -ENOENT when no timer holds the key; -EINVAL as
 * kairos_key_reset() or for a NULL @out; -ESHUTDOWN.
 */
int kairos_key_find(struct kairos *k, const void *key, size_t len, kairos_id *out);

/*
 * kairos_remaining - how long timer @id has left before its (next)
 * deadline, in ns, into *@ns: 0 once it is due but has not run, never a
 * wrapped value.  The deadline counted is the start of the tick it was
 * rounded up to, the earliest the timer may run; the timer does not run
 * within *@ns of the call.
 *
 * Context: any thread; does not block.
 * Return: 0; -ENOENT once the timer has ended (a one-shot timer whose
 * callback has started, or a queue entry taken, has ended) or for an id
 * never issued; -EBUSY for a periodic timer whose callback runs now (its
 * next deadline is set when the callback returns); -EINVAL for a NULL @k
 * or @ns or an id of 0; -ESHUTDOWN.
 */
int kairos_remaining(struct kairos *k, kairos_id id, uint64_t *ns);

/*
 * kairos_clock_advance - moves a KAIROS_CLOCK_MANUAL service's clock @ns
 * forward (0 is allowed) and makes due whatever became due.
 *
 * When it returns 0 to a thread that is not running a callback of @k, the
 * service has settled at the clock's newest time: every timer due by then
 * (deadline rounded up to its tick) that was armed or reset by a call that
 * returned before this one was made has expired, and none due later has;
 * the callbacks of those delivered to workers or inline have returned (a
 * periodic timer's next deadline is set); those of a queue wait in it (its
 * fd readable, kairos_queue_take() with timeout 0 gets them) or, for a ring
 * queue, their CQE posts have been submitted; and whatever those callbacks
 * armed that was due at once, or made due by advancing the clock
 * themselves, has been handled the same way.  It does not wait for a
 * queue's owner to run or take its entries, nor for calls other threads
 * make meanwhile.  Several threads may advance at once; each returns once
 * the service has settled at the newest time.
 *
 * Context: any thread.  Blocks until the service has settled (outside any
 * lock and RCU read-side section, on a futex), so it waits for the
 * callbacks it makes due: one that waits for the advancing thread
 * deadlocks.  From a callback of @k (worker, inline, kairos_queue_run())
 * it cannot wait for itself: it moves the clock, wakes the shards and
 * returns 0 at once; an advance another thread waits in also waits for
 * what this one made due.
 * Return: 0; -EINVAL for a NULL @k or a service whose clock is not manual;
 * -EOVERFLOW when the clock would reach 2^64 - 1 ns, which stands for never
 * (it does not move);
 * -ESHUTDOWN after kairos_destroy(), or when a destroy ended the wait (the
 * clock moved, but what became due may have been drained instead).
 */
int kairos_clock_advance(struct kairos *k, uint64_t ns);

/*
 * kairos_now - reads the service clock (the configured clockid), in ns; for
 * a KAIROS_CLOCK_MANUAL service, the time kairos_clock_advance() has moved
 * it to (0 at first).
 *
 * Context: any thread; does not block.
 * Return: 0; -EINVAL for a NULL argument; -ESHUTDOWN after kairos_destroy().
 */
int kairos_now(struct kairos *k, uint64_t *now_ns);

/*
 * kairos_stats - a snapshot of the service's counters.  Each counter is read
 * atomically, the set is not: while timers are armed and fire concurrently
 * the identity armed == fired + cancelled + drained + pending holds only
 * once the service is quiet (a one-shot timer counts as fired when its
 * callback starts and stops being pending when it returns).  After
 * kairos_destroy() has returned it gives the final counters, with pending
 * 0 and drained set.  Arms and cancels are counted by each calling thread
 * and summed here; pending is derived (armed minus what ended), and never
 * below 0.
 *
 * Context: any thread; takes the per-service lock that threads hold only
 * to join or leave the service (never across a wait), so it may wait for a
 * few instructions; it never waits for a callback or a shard.
 * Return: 0; -EINVAL for a NULL argument; -ESHUTDOWN while kairos_destroy()
 * runs.
 */
int kairos_stats(struct kairos *k, struct kairos_stats *out);

/*
 * kairos_backend_info - which backend shard @shard uses, and why.
 * @name: set to "io_uring" or "epoll"; may be NULL
 * @why:  set to a sentence saying why it was chosen; may be NULL
 *
 * Context: any thread; does not block.  The strings stay valid until
 * kairos_destroy(@k) is called; a shard whose ring stops working moves to
 * epoll at run time, and later calls report that.
 * Return: 0; -EINVAL for a NULL @k or a @shard out of range; -ESHUTDOWN.
 */
int kairos_backend_info(struct kairos *k, unsigned shard, const char **name, const char **why);

/*
 * kairos_clock_info - which clock the slack timers of @k read, and why.
 * @name: set to "tsc" (timers with at least 50 us of slack in whole ticks
 *        read the time-stamp counter, see KAIROS_EXACT_CLOCK),
 *        "clock_gettime" (every timer reads the service clock exactly) or
 *        "manual" (KAIROS_CLOCK_MANUAL); may be NULL
 * @why:  set to a sentence saying why; may be NULL
 *
 * Context: any thread; does not block.  Fixed at create, but "tsc" turns
 * to "clock_gettime" for good once a thread finds the counter behind
 * CLOCK_MONOTONIC; the strings are static.
 * Return: 0; -EINVAL for a NULL @k; -ESHUTDOWN.
 */
int kairos_clock_info(struct kairos *k, const char **name, const char **why);

#ifdef __cplusplus
}
#endif

#endif /* KAIROS_KAIROS_H */
