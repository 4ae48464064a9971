/* SPDX-License-Identifier: MIT */
/*
 * futex.c - sleeping on a 32-bit word until another thread changes it.
 *
 * Every word kairos sleeps on is a plain 32-bit counter or flag of its own
 * (never half of a wider word, which would depend on byte order), and every
 * waker changes the word before it wakes, so a waiter that read the old
 * value either sees the change or is woken.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

void futex_wait32(_Atomic uint32_t *word, uint32_t seen)
{
	/* EAGAIN (changed already) and EINTR both mean: look again. */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

bool futex_wait32_for(_Atomic uint32_t *word, uint32_t seen, uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0) &&
	    errno == ETIMEDOUT)
		return false;
	return true;
}

void futex_wake32(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
