/* SPDX-License-Identifier: MIT */
/*
 * dlopen.c - the shared library loaded at run time, as a plugin would load
 * it: its thread-locals are initial-exec (meson.build), so it must find
 * room in the static TLS space glibc keeps for dlopen().  One timer is
 * armed and must fire once, and the service must end cleanly.  The library
 * is not closed again: a service's handle stays valid after
 * kairos_destroy() (later calls return -ESHUTDOWN), so its code must stay.
 *
 * Usage: dlopen PATH-TO-libkairos.so.  Exit 0 on success, 1 on failure.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <kairos/kairos.h>

static atomic_int fired;

static void on_fire(void *arg, kairos_id id, int status)
{
	(void)arg;
	(void)id;
	if (status == 1)
		atomic_fetch_add(&fired, 1);
}

#define LOAD(h, name) ((__typeof__(&name))dlsym((h), #name))

int main(int argc, char **argv)
{
	__typeof__(&kairos_create) create;
	__typeof__(&kairos_arm) arm;
	__typeof__(&kairos_destroy) destroy;
	struct timespec pause = { 0, 1000000 };
	static struct kairos *k;	/* kept, as a caller keeps its handle */
	void *h;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: dlopen PATH-TO-libkairos.so\n");
		return 1;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	create = LOAD(h, kairos_create);
	arm = LOAD(h, kairos_arm);
	destroy = LOAD(h, kairos_destroy);
	if (!create || !arm || !destroy) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	rc = create(NULL, &k);
	if (rc) {
		fprintf(stderr, "kairos_create: %d\n", rc);
		return 1;
	}
	rc = arm(k, 1000000, on_fire, NULL, NULL);
	if (rc) {
		fprintf(stderr, "kairos_arm: %d\n", rc);
		return 1;
	}
	for (int i = 0; i < 10000 && !atomic_load(&fired); i++)
		nanosleep(&pause, NULL);
	rc = destroy(k, KAIROS_DRAIN_DROP);
	if (rc != 0 || atomic_load(&fired) != 1) {
		fprintf(stderr, "fired %d times, kairos_destroy: %d\n", atomic_load(&fired), rc);
		return 1;
	}
	printf("1 passed, 0 failed\n");
	return 0;
}
