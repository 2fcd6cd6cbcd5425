#include <errno.h>
#include <stdlib.h>

#include "shared/posindex.h"

int posindex_reserve(struct posindex *ix, uint32_t n, uint32_t count)
{
	uint64_t want = 16;
	while (want < 2 * (uint64_t)n)
		want *= 2;
	if (ix->slot && want <= (uint64_t)ix->mask + 1)
		return 0;
	if (want > UINT32_MAX)
		return -ENOMEM;
	uint32_t *slot = calloc((size_t)want, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	free(ix->slot);
	ix->slot = slot;
	ix->mask = (uint32_t)want - 1;
	for (uint32_t pos = 0; pos < count; pos++)
		posindex_put(ix, pos);
	return 0;
}

void posindex_free(struct posindex *ix)
{
	free(ix->slot);
	ix->slot = NULL;
	ix->mask = 0;
}

uint32_t posindex_find(const struct posindex *ix, uint32_t hash, const void *key)
{
	if (!ix->slot)
		return POSINDEX_NONE;
	for (uint32_t i = hash & ix->mask;; i = (i + 1) & ix->mask) {
		uint32_t v = ix->slot[i];
		if (!v)
			return POSINDEX_NONE;
		if (ix->ops->equal_at(ix->ctx, v - 1, key))
			return v - 1;
	}
}

void posindex_put(struct posindex *ix, uint32_t pos)
{
	uint32_t i = ix->ops->hash_at(ix->ctx, pos) & ix->mask;
	while (ix->slot[i])
		i = (i + 1) & ix->mask;
	ix->slot[i] = pos + 1;
}

/* The slot holding pos (it is in the index). */
static uint32_t slot_of(const struct posindex *ix, uint32_t pos)
{
	uint32_t i = ix->ops->hash_at(ix->ctx, pos) & ix->mask;
	while (ix->slot[i] != pos + 1)
		i = (i + 1) & ix->mask;
	return i;
}

void posindex_del(struct posindex *ix, uint32_t pos)
{
	uint32_t hole = slot_of(ix, pos);
	ix->slot[hole] = 0;
	/* Shift the rest of the probe run back: an entry moves into the hole unless its home slot
	 * lies cyclically in (hole, j], where it would no longer be found from its home. */
	for (uint32_t j = (hole + 1) & ix->mask; ix->slot[j]; j = (j + 1) & ix->mask) {
		uint32_t home = ix->ops->hash_at(ix->ctx, ix->slot[j] - 1) & ix->mask;
		if (((j - home) & ix->mask) < ((j - hole) & ix->mask))
			continue;
		ix->slot[hole] = ix->slot[j];
		ix->slot[j] = 0;
		hole = j;
	}
}

void posindex_move(struct posindex *ix, uint32_t from, uint32_t to)
{
	/* The key at to is the key that was at from: the same probe run finds the slot. */
	uint32_t i = ix->ops->hash_at(ix->ctx, to) & ix->mask;
	while (ix->slot[i] != from + 1)
		i = (i + 1) & ix->mask;
	ix->slot[i] = to + 1;
}
