/* SPDX-License-Identifier: MIT */
/*
 * key.h - timers named by the user's bytes (key.c).
 */
#ifndef KAIROS_KEY_H
#define KAIROS_KEY_H

#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

struct key_node;

/* 0 for a key kairos accepts (1 .. KAIROS_KEY_MAX bytes), else -EINVAL. */
int key_check(const void *key, size_t len);
/*
 * A node for @key, not yet in any table; makes @k's table on first use.
 * Outside any read-side section.  -ENOMEM.
 */
int key_node_new(struct kairos *k, const void *key, size_t len, struct key_node **out);
/* Frees a node that never entered the table. */
void key_node_free(struct key_node *kn);
void key_node_set_id(struct key_node *kn, kairos_id id);
/*
 * Inside the read-side section: maps the key of @kn to @kn's id.  0; or
 * -EEXIST when the key is held and @replace is false.  With @replace, a
 * holder is cancelled (cancel_for_key()) as the key passes to @kn.
 */
int key_take(struct kairos *k, struct key_node *kn, bool replace);
/* kairos.c: cancels the holder of a key being replaced, as kairos_cancel(). */
void cancel_for_key(struct kairos *k, kairos_id id);
/* Inside the read-side section: the id holding @key, or -ENOENT. */
int key_lookup(struct kairos *k, const void *key, size_t len, kairos_id *id);
/* Inside the read-side section: whether the key of @kn (not yet taken) is held. */
bool key_held(struct kairos *k, const struct key_node *kn);
/*
 * The timer of @r has ended: it gives its key up, if it still holds one.
 * Any thread, any context; at most one caller per key finds it.  @id 0:
 * whichever life of @r holds one; else only timer @id's (key_release_of()).
 */
void key_release_slow(struct kairos *k, struct rec *r, kairos_id id);

static inline void key_release(struct kairos *k, struct rec *r)
{
	if (__builtin_expect(rec_has_ext(r), 0))
		key_release_slow(k, r, 0);
}

/*
 * The same for a caller that knows only that timer @id, whose record is
 * @r, ended: a key that @r holds for a later life (the record retired and
 * reused since) is left alone.  Inside the read-side section.
 */
static inline void key_release_of(struct kairos *k, struct rec *r, kairos_id id)
{
	if (rec_has_ext(r))
		key_release_slow(k, r, id);
}

/*
 * The reclaimer's side: grows or shrinks the table to the keys it holds
 * (outside any read-side section; one caller at a time).
 */
void key_resize(struct kairos *k);
/* The reclaimer's side: removed nodes, freed after its grace period. */
struct key_node *key_garbage_take(struct kairos *k);
void key_garbage_free(struct key_node *kn);
/* At destroy, every timer ended: frees what is left and the table. */
void key_teardown(struct kairos *k);

#endif /* KAIROS_KEY_H */
