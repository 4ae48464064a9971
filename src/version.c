/* SPDX-License-Identifier: MIT */
/*
 * version.c - kairos_version(): the version of the library that runs, from
 * the header it was built with (which meson.build checks against the
 * project's version).  A program compares it with the KAIROS_VERSION_*
 * macros of the header it was built with.
 */
#include "internal.h"

KAIROS_EXPORT const char *kairos_version(unsigned *major, unsigned *minor, unsigned *patch)
{
	if (major)
		*major = KAIROS_VERSION_MAJOR;
	if (minor)
		*minor = KAIROS_VERSION_MINOR;
	if (patch)
		*patch = KAIROS_VERSION_PATCH;
	return KAIROS_VERSION_STRING;
}
