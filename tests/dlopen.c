/* SPDX-License-Identifier: MIT */
/*
 * dlopen.c - the shared library loaded at run time, as a plugin would load
 * it: its thread-locals are initial-exec (meson.build), so it must find
 * room in the static TLS space glibc keeps for dlopen().  A thread of the
 * program arms one timer, which must fire once, and the service must end
 * cleanly.  Then the library is closed while that thread still lives, the
 * thread exits (running the thread-exit hooks kairos and liburcu-bp
 * registered for it), and the library is loaded and used again: it is
 * linked -z nodelete (meson.build), so dlclose() leaves its code, and those
 * hooks, in place (unloaded, the thread's exit jumped into unmapped code).
 *
 * Usage: dlopen PATH-TO-libkairos.so.  Exit 0 on success, 1 on failure.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <kairos/kairos.h>

static atomic_int fired, leave;

static void on_fire(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	if (status == 1)
		atomic_fetch_add(&fired, 1);
}

#define LOAD(h, name) ((__typeof__(&name))dlsym((h), #name))

struct use {
	__typeof__(&kairos_arm) arm;
	struct kairos *k;
	atomic_int rc;	/* the arm's, read before the thread is joined */
};

/* Arms one timer (this thread's state joins the service), then waits to be let go. */
static void *arming_thread(void *arg)
{
	struct timespec pause = { 0, 1000000 };
	struct use *u = arg;

	atomic_store(&u->rc, u->arm(u->k, 1000000, on_fire, NULL, NULL));
	while (!atomic_load(&leave))
		nanosleep(&pause, NULL);
	return NULL;
}

/* Loads the library, arms from a thread of its own, waits for the fire, destroys. */
static void *load_and_use(const char *path, pthread_t *th, struct use *u)
{
	struct timespec pause = { 0, 1000000 };
	__typeof__(&kairos_create) create;
	__typeof__(&kairos_destroy) destroy;
	void *h;
	int rc;

	atomic_store(&fired, 0);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return NULL;
	}
	create = LOAD(h, kairos_create);
	u->arm = LOAD(h, kairos_arm);
	destroy = LOAD(h, kairos_destroy);
	if (!create || !u->arm || !destroy) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return NULL;
	}
	rc = create(NULL, &u->k);
	if (rc) {
		fprintf(stderr, "kairos_create: %d\n", rc);
		return NULL;
	}
	if (pthread_create(th, NULL, arming_thread, u)) {
		fprintf(stderr, "pthread_create failed\n");
		return NULL;
	}
	for (int i = 0; i < 10000 && !atomic_load(&fired); i++)
		nanosleep(&pause, NULL);
	rc = destroy(u->k, KAIROS_DRAIN_DROP);
	if (atomic_load(&u->rc) != 0 || rc != 0 || atomic_load(&fired) != 1) {
		fprintf(stderr, "kairos_arm: %d, fired %d times, kairos_destroy: %d\n", atomic_load(&u->rc),
			atomic_load(&fired), rc);
		return NULL;
	}
	return h;
}

int main(int argc, char **argv)
{
	/* Kept, as a caller keeps its handle: later calls on it say -ESHUTDOWN. */
	static struct use u[2];
	pthread_t th[2];
	void *h;

	if (argc != 2) {
		fprintf(stderr, "usage: dlopen PATH-TO-libkairos.so\n");
		return 1;
	}
	for (int round = 0; round < 2; round++) {
		h = load_and_use(argv[1], &th[round], &u[round]);
		if (!h)
			return 1;
		if (dlclose(h)) {
			fprintf(stderr, "dlclose: %s\n", dlerror());
			return 1;
		}
		/* The arming thread exits with the library closed. */
		atomic_store(&leave, 1);
		if (pthread_join(th[round], NULL)) {
			fprintf(stderr, "pthread_join failed\n");
			return 1;
		}
		atomic_store(&leave, 0);
	}
	printf("1 passed, 0 failed\n");
	return 0;
}
