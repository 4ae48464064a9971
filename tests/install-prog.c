/* SPDX-License-Identifier: MIT */
/*
 * install-prog.c - a program from outside the tree, built by
 * install-test.sh against an installed kairos through pkg-config: it sees
 * only the installed header and library.  One timer on the manual clock,
 * the runtime version against the header's; exit 0 when all agree.
 */
#include <stdio.h>
#include <string.h>

#include <kairos/kairos.h>

#if !KAIROS_CHECK_VERSION(0, 1, 0)
#error "kairos.h older than 0.1.0"
#endif

static void fired(void *arg, kairos_id id, int status)
{
	(void)id;
	*(int *)arg = status;
}

int main(void)
{
	struct kairos_config c;
	struct kairos *k;
	unsigned major, minor, patch;
	int status = 0, rc;

	if (strcmp(kairos_version(&major, &minor, &patch), KAIROS_VERSION_STRING) ||
	    major != KAIROS_VERSION_MAJOR || minor != KAIROS_VERSION_MINOR ||
	    patch != KAIROS_VERSION_PATCH) {
		fprintf(stderr, "install-prog: library %s, header %s\n",
			kairos_version(NULL, NULL, NULL), KAIROS_VERSION_STRING);
		return 1;
	}
	kairos_config_default(&c);
	c.shards = 1;
	c.workers = 1;
	c.clock = KAIROS_CLOCK_MANUAL;
	rc = kairos_create(&c, &k);
	if (rc) {
		fprintf(stderr, "install-prog: kairos_create: %d\n", rc);
		return 1;
	}
	rc = kairos_arm(k, 1000000, fired, &status, NULL);
	if (!rc)
		rc = kairos_clock_advance(k, 2000000);
	if (rc || status != 1) {
		fprintf(stderr, "install-prog: arm/advance %d, status %d\n", rc, status);
		return 1;
	}
	rc = kairos_destroy(k, KAIROS_DRAIN_DROP);
	if (rc) {
		fprintf(stderr, "install-prog: kairos_destroy: %d\n", rc);
		return 1;
	}
	printf("install-prog: kairos %s ok\n", kairos_version(NULL, NULL, NULL));
	return 0;
}
