/* SPDX-License-Identifier: MIT */
#include "rcu.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"

_Atomic long fault_countdown;
_Atomic int fault_uring;
_Atomic int fault_uring_no_read;
_Atomic int fault_kick_lost;
_Atomic int fault_wait_fail;
_Atomic int fault_wait_fails;
_Atomic int fault_wait_how;
_Atomic int fault_post;
_Atomic int fault_post_held;
_Atomic int fault_take_hold;
_Atomic int fault_take_held;
_Atomic int fault_reset_hold;
_Atomic int fault_reset_held;
_Atomic int fault_pass_hold;
_Atomic int fault_pass_held;
_Atomic int fault_wake_hold;
_Atomic int fault_wake_held;
_Atomic int fault_kicked_hold;
_Atomic int fault_kicked_held;
_Atomic int fault_membarrier;
_Atomic long fault_suspend_ticks;
_Atomic long fault_suspend_ns;
_Atomic int fault_sleep_check;

bool fault_hit_slow(void)
{
	long n = atomic_load_explicit(&fault_countdown, memory_order_relaxed);

	/* Several threads may ask at once: exactly one of them sees 1 -> 0. */
	while (n > 0) {
		if (atomic_compare_exchange_weak_explicit(&fault_countdown, &n, n - 1,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return n == 1;
	}
	return false;
}

/* A step that may sleep, asked for inside a read-side section: the tests abort. */
void fault_sleep_look(const char *file, int line)
{
	if (rcu_read_ongoing())
		rcu_sleep_in_section(file, line);
}

void *fault_calloc_at(size_t n, size_t size, const char *file, int line)
{
	return fault_hit_at(file, line) ? NULL : calloc(n, size);
}

int fault_post_refuse(void)
{
	atomic_store_explicit(&fault_post_held, 1, memory_order_seq_cst);
	for (int i = 0; i < 1000 && atomic_load_explicit(&fault_post_held, memory_order_seq_cst) == 1;
	     i++)
		usleep(1000);
	return -EBUSY;
}

/* Holds while *@hold is set (two seconds at most), having set *@held (fault.h). */
void fault_hold(_Atomic int *hold, _Atomic int *held)
{
	struct timespec t0, t;

	atomic_store_explicit(held, 1, memory_order_seq_cst);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (atomic_load_explicit(hold, memory_order_seq_cst) &&
		 (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000000L);
}
