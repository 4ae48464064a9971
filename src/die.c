/* SPDX-License-Identifier: MIT */
/*
 * die.c - where impossible failures stop the process: a pthread call that
 * cannot fail as kairos uses it, a state word in a state no path makes, a
 * system call on an fd the library owns failing with EBADF.  Carrying on
 * would break the contract (a timer lost or run twice), so the message
 * names the place, what failed and the errno it failed with, and aborts.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rcu.h"

void kairos_die_at(const char *file, int line, const char *what, int err)
{
	if (err)
		fprintf(stderr, "kairos: %s:%d: %s: %s (errno %d)\n", file, line, what,
			strerror(err), err);
	else
		fprintf(stderr, "kairos: %s:%d: %s\n", file, line, what);
	abort();
}

void rcu_sleep_in_section(const char *file, int line)
{
	kairos_die_at(file, line, "a step that may sleep runs inside a read-side section", 0);
}

void mutex_lock(pthread_mutex_t *m)
{
	int err = pthread_mutex_lock(m);

	if (err)
		kairos_die_err("pthread_mutex_lock", err);
}

void mutex_unlock(pthread_mutex_t *m)
{
	int err = pthread_mutex_unlock(m);

	if (err)
		kairos_die_err("pthread_mutex_unlock", err);
}

void thread_join(pthread_t t)
{
	int err = pthread_join(t, NULL);

	if (err)
		kairos_die_err("pthread_join", err);
}

/*
 * The signals a fault raises in the thread that faults: left unblocked in
 * the service's threads, so that a fault in a callback reaches the
 * program's handler (a crash reporter, a sanitizer's).  Blocked, the
 * kernel would unblock it and reset its action to the default for the
 * whole process before delivering it.
 */
static const int fault_signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };

int thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int err, rc;

	/* The new thread inherits the mask in force here. */
	sigfillset(&all);
	for (size_t i = 0; i < sizeof(fault_signals) / sizeof(fault_signals[0]); i++)
		sigdelset(&all, fault_signals[i]);
	err = pthread_sigmask(SIG_SETMASK, &all, &old);
	if (err)
		kairos_die_err("pthread_sigmask", err);
	rc = pthread_create(t, NULL, fn, arg);
	err = pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		kairos_die_err("pthread_sigmask", err);
	return rc;
}

void thread_name(const char *role, int a, int b)
{
	char name[48];

	if (b >= 0)
		snprintf(name, sizeof(name), "kairos-%s-%d-%d", role, a, b);
	else if (a >= 0)
		snprintf(name, sizeof(name), "kairos-%s-%d", role, a);
	else
		snprintf(name, sizeof(name), "kairos-%s", role);
	/* The kernel keeps 15 bytes; a name only helps, so a failure is ignored. */
	name[15] = '\0';
	(void)pthread_setname_np(pthread_self(), name);
}
