/* SPDX-License-Identifier: MIT */
/*
 * mapping.h - growing an array that lives in an anonymous mapping of its
 * own (the shard's taken inbox, a large wheel slot log): a new mapping and
 * a copy, not mremap(), which TSan does not follow.
 */
#ifndef KAIROS_MAPPING_H
#define KAIROS_MAPPING_H

#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

/*
 * A new mapping of @bytes holding a copy of the first @used bytes of @old
 * (which may be NULL when @used is 0); NULL when there is no memory.  @old
 * stays as it was: the caller frees it its own way.
 */
static inline void *mapping_copy(const void *old, size_t used, size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (used)
		memcpy(p, old, used);
	return p;
}

#endif /* KAIROS_MAPPING_H */
