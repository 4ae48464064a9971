/* SPDX-License-Identifier: MIT */
/*
 * futex.c - sleeping on a 32-bit word until another thread changes it.
 *
 * Every word kairos sleeps on is a plain 32-bit counter or flag of its own
 * (never half of a wider word, which would depend on byte order), and every
 * waker changes the word before it wakes, so a waiter that read the old
 * value either sees the change or is woken.
 *
 * The calls go through liburcu's futex_noasync(), which falls back to its
 * own wait queue where the kernel has no futex (ENOSYS).  No word here is
 * woken from a signal handler, so the non-async-safe variant fits, and it
 * is the only one used on these words, as liburcu requires.
 */
#include <errno.h>
#include <linux/futex.h>
#include <time.h>
#include <urcu/futex.h>

#include "internal.h"
#include "rcu.h"

void futex_wait32(_Atomic uint32_t *word, uint32_t seen)
{
	rcu_might_sleep();
	/* EAGAIN (changed already) and EINTR both mean: look again. */
	(void)futex_noasync((int32_t *)word, FUTEX_WAIT_PRIVATE, (int32_t)seen, NULL, NULL, 0);
}

bool futex_wait32_for(_Atomic uint32_t *word, uint32_t seen, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	rcu_might_sleep();
	if (futex_noasync((int32_t *)word, FUTEX_WAIT_PRIVATE, (int32_t)seen, &ts, NULL, 0) &&
	    errno == ETIMEDOUT)
		return false;
	return true;
}

void futex_wake32(_Atomic uint32_t *word, int n)
{
	(void)futex_noasync((int32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
