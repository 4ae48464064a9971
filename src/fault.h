/* SPDX-License-Identifier: MIT */
/*
 * fault.h - failure injection for the tests of every error path.
 *
 * Each step that can fail while a service is made (an allocation, an fd, a
 * thread, a ring) and each allocation a running service makes asks
 * fault_hit() first.  A test sets fault_countdown to n and the n-th step
 * fails as if the system had refused it; a countdown still above 0 after
 * the call means the call has fewer steps, so a test walks every one in turn.  With the countdown at 0 (always,
 * outside tests) fault_hit() is one relaxed load on paths that are slow
 * anyway: none of them is on the arm, cancel or reset path, and none runs
 * inside a read-side section.
 */
#ifndef KAIROS_FAULT_H
#define KAIROS_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

extern _Atomic long fault_countdown __attribute__((visibility("hidden")));
/* Non-zero: every io_uring setup fails with this errno (as a kernel refusing it). */
extern _Atomic int fault_uring __attribute__((visibility("hidden")));
/* Non-zero: every io_uring ring is taken as lacking IORING_OP_READ (a kernel before 5.6). */
extern _Atomic int fault_uring_no_read __attribute__((visibility("hidden")));
/*
 * Non-zero: the next eventfd write that wakes a shard is lost, as if a
 * read of the ring the shard just left had consumed it (backend.c); the
 * flag is cleared as it is used.
 */
extern _Atomic int fault_kick_lost __attribute__((visibility("hidden")));
/*
 * fault_wait_fails above 0: the next that many io_uring refusals, in any
 * shard of the process, are made with errno fault_wait_fail (INT_MAX:
 * every one, until the test sets it to 0); the ring stops working at run
 * time, for a moment or for good (backend_uring.c).  fault_wait_how 0: the
 * kernel refuses a wait's enter, the wait's reads queued (one a wait);
 * 1: the completions of the reads of the timerfd and eventfd fail instead,
 * what they read lost (up to two a wait).  Set fault_wait_fail and
 * fault_wait_how first.
 */
extern _Atomic int fault_wait_fail __attribute__((visibility("hidden")));
extern _Atomic int fault_wait_fails __attribute__((visibility("hidden")));
extern _Atomic int fault_wait_how __attribute__((visibility("hidden")));
/* Non-zero: the kernel is made to refuse every ring queue post (backend_uring.c). */
extern _Atomic int fault_post __attribute__((visibility("hidden")));
/*
 * fault_post at 2: every ring queue post is refused on the spot instead
 * (-EBUSY), after fault_post_refuse() has set fault_post_held to 1 and
 * waited (a second at most) for the test to set it to 2: a window in
 * which a test's cancel meets a delivery under way.
 */
extern _Atomic int fault_post_held __attribute__((visibility("hidden")));
/*
 * fault_post at 3: a shard's submit of its posts fails, the kernel taking
 * none (-EAGAIN), and its next wait holds the same way before it enters
 * the kernel, until fault_post_held is 2 (or a second has passed): a
 * window in which a test can close and reuse a queue's ring fd.
 */
int fault_post_refuse(void) __attribute__((visibility("hidden")));
/*
 * fault_post at 4: short submits, as from a kernel that can allocate some
 * requests and not others: a shard's waits hand the kernel nothing (a
 * full SQ aside) and do not sleep, and its submits of posts take nothing
 * until one finds a read queued ahead of the last post; that one takes all
 * but the last post, sets fault_post_held to the entries it left (1), and
 * the ring stops working: the shard sets fault_post to 5, and then its
 * submits take nothing, its next wait is refused (EPERM: fault_wait_fail)
 * and its settle sends nothing.  The post left queued must go back to its
 * queue's list (uring_settle()).
 */
/*
 * Test holds, each until the test clears its flag (two seconds at most),
 * having set its _held to 1; they spin and yield, since the take and the
 * reset are inside a read-side section:
 *  - fault_take_hold: a take or run of a queue (drain(), queue.c), the
 *    queue's list in hand: a window in which a test destroys the queue;
 *  - fault_reset_hold: a reset that posts its record (reset_rec(),
 *    kairos.c), between making it QUEUED and posting it;
 *  - fault_pass_hold: a shard pass at its start, sleep_tick 0 (shard.c);
 *  - fault_wake_hold: a poster that won a sleeping shard's wake-up flag,
 *    before its eventfd write (shard_wake(), shard.c);
 *  - fault_kicked_hold: the same poster after that write, before it marks
 *    the write made.
 */
extern _Atomic int fault_take_hold __attribute__((visibility("hidden")));
extern _Atomic int fault_take_held __attribute__((visibility("hidden")));
extern _Atomic int fault_reset_hold __attribute__((visibility("hidden")));
extern _Atomic int fault_reset_held __attribute__((visibility("hidden")));
extern _Atomic int fault_pass_hold __attribute__((visibility("hidden")));
extern _Atomic int fault_pass_held __attribute__((visibility("hidden")));
extern _Atomic int fault_wake_hold __attribute__((visibility("hidden")));
extern _Atomic int fault_wake_held __attribute__((visibility("hidden")));
extern _Atomic int fault_kicked_hold __attribute__((visibility("hidden")));
extern _Atomic int fault_kicked_held __attribute__((visibility("hidden")));
void fault_hold(_Atomic int *hold, _Atomic int *held) __attribute__((visibility("hidden")));
/*
 * Non-zero before a process's first service: membarrier() is taken as
 * refused, and arrivals are published with a fence each (arrival.c).
 */
extern _Atomic int fault_membarrier __attribute__((visibility("hidden")));
/*
 * A suspend as the counter clock's calibration sees it (clock.c): its
 * counter reads run this many ticks further on, and CLOCK_BOOTTIME this
 * many ns further ahead of CLOCK_MONOTONIC.
 */
extern _Atomic long fault_suspend_ticks __attribute__((visibility("hidden")));
extern _Atomic long fault_suspend_ns __attribute__((visibility("hidden")));

/*
 * Non-zero: a step that may sleep aborts the process when it runs inside a
 * read-side section (rcu_might_sleep(), rcu.h).  The test programs set it.
 */
extern _Atomic int fault_sleep_check __attribute__((visibility("hidden")));

bool fault_hit_slow(void) __attribute__((visibility("hidden")));
void fault_sleep_look(const char *file, int line) __attribute__((visibility("hidden")));

/*
 * Whether this step must fail (a test asked for it).  Every such step
 * allocates, maps, opens an fd or starts a thread, any of which may sleep:
 * with fault_sleep_check set, one inside a read-side section aborts
 * (rcu_might_sleep(), rcu.h).
 */
#define fault_hit() fault_hit_at(__FILE__, __LINE__)

static inline bool fault_hit_at(const char *file, int line)
{
	if (__builtin_expect(atomic_load_explicit(&fault_sleep_check, memory_order_relaxed), 0))
		fault_sleep_look(file, line);
	if (__builtin_expect(!atomic_load_explicit(&fault_countdown, memory_order_relaxed), 1))
		return false;
	return fault_hit_slow();
}

/* calloc() that an armed test can make fail (and that a section must not hold). */
void *fault_calloc_at(size_t n, size_t size, const char *file, int line)
	__attribute__((visibility("hidden")));
#define fault_calloc(n, size) fault_calloc_at((n), (size), __FILE__, __LINE__)

#endif /* KAIROS_FAULT_H */
