/*
 * An index from keys to positions in an array its owner keeps: open addressing with linear
 * probing, each slot a position + 1 (0: empty), at most half full. The owner hashes and compares
 * its own keys (through the ops), so one array can have several indexes (network sandboxes: by id
 * and by address), and moves its elements itself (posindex_move() when it swaps the last into a
 * hole). Lookups, inserts and removals are O(1) on average; no tombstones (a removal shifts the
 * probe run back).
 *
 * Not for keys a client picks to collide on purpose: the hash is the owner's.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define POSINDEX_NONE UINT32_MAX

struct posindex_ops {
	/* The hash of the key of the element at pos. */
	uint32_t (*hash_at)(const void *ctx, uint32_t pos);
	/* Whether the element at pos has key. */
	bool (*equal_at)(const void *ctx, uint32_t pos, const void *key);
};

struct posindex {
	uint32_t *slot;
	uint32_t mask; /* slots - 1; 0 with no slots */
	const struct posindex_ops *ops;
	const void *ctx;
};

/*
 * Make room for n positions (the index keeps at least 2n slots): the elements at 0..count-1 are
 * put in again. 0 or -ENOMEM (the index is unchanged then).
 */
int posindex_reserve(struct posindex *ix, uint32_t n, uint32_t count);
void posindex_free(struct posindex *ix);

/* The position whose element has key (hash: its hash), or POSINDEX_NONE. */
uint32_t posindex_find(const struct posindex *ix, uint32_t hash, const void *key);
/* Index the element at pos (its key not in the index yet; room reserved). */
void posindex_put(struct posindex *ix, uint32_t pos);
/* Forget the element at pos (call before it changes). */
void posindex_del(struct posindex *ix, uint32_t pos);
/* The element at from now lives at to (to is not in the index; call after the copy). */
void posindex_move(struct posindex *ix, uint32_t from, uint32_t to);
