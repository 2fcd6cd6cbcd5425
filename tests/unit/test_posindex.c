/*
 * Unit tests for src/shared/posindex.c: against a brute-force model over random inserts,
 * swap-removals and growth, with a hash that collides on purpose (long probe runs that wrap
 * around the table's end), so every removal's back-shift is exercised.
 */
#include <stdlib.h>

#include "check.h"
#include "shared/posindex.h"

#define KEYS_MAX 5000

struct arr {
	uint32_t key[KEYS_MAX];
	uint32_t n;
	uint32_t buckets; /* the hash: key % buckets, shifted to the table's end */
};

static uint32_t hash_at(const void *ctx, uint32_t pos)
{
	const struct arr *a = ctx;
	return a->key[pos] % a->buckets + UINT32_MAX - 3; /* wraps: runs cross slot 0 */
}

static bool equal_at(const void *ctx, uint32_t pos, const void *key)
{
	const struct arr *a = ctx;
	return a->key[pos] == *(const uint32_t *)key;
}

static const struct posindex_ops ops = {hash_at, equal_at};

static uint32_t find(const struct posindex *ix, const struct arr *a, uint32_t key)
{
	uint32_t h = key % a->buckets + UINT32_MAX - 3;
	return posindex_find(ix, h, &key);
}

static void check_all(const struct posindex *ix, const struct arr *a, uint32_t key_space)
{
	for (uint32_t k = 0; k < key_space; k++) {
		uint32_t want = POSINDEX_NONE;
		for (uint32_t i = 0; i < a->n; i++)
			if (a->key[i] == k)
				want = i;
		uint32_t got = find(ix, a, k);
		if (got != want) {
			CHECK_FAIL_("key %u: found at %u, is at %u", k, got, want);
			return;
		}
	}
	check_run_++;
}

static void run(uint32_t buckets, unsigned steps, uint32_t key_space, unsigned seed)
{
	static struct arr a;
	a.n = 0;
	a.buckets = buckets;
	struct posindex ix = {.ops = &ops, .ctx = &a};
	CHECK(find(&ix, &a, 1) == POSINDEX_NONE); /* no table yet */
	srand(seed);
	for (unsigned s = 0; s < steps; s++) {
		bool add = a.n == 0 || (a.n < KEYS_MAX && rand() % 100 < 55);
		if (add) {
			uint32_t k = (uint32_t)rand() % key_space;
			if (find(&ix, &a, k) != POSINDEX_NONE)
				continue;
			if (posindex_reserve(&ix, a.n + 1, a.n) < 0) {
				CHECK_FAIL_("%s", "reserve failed");
				return;
			}
			a.key[a.n] = k;
			posindex_put(&ix, a.n++);
		} else {
			uint32_t pos = (uint32_t)rand() % a.n, last = a.n - 1;
			posindex_del(&ix, pos);
			if (pos != last) {
				a.key[pos] = a.key[last];
				posindex_move(&ix, last, pos);
			}
			a.n--;
		}
		if (s % 97 == 0)
			check_all(&ix, &a, key_space);
	}
	check_all(&ix, &a, key_space);
	CHECK(ix.mask + 1 >= 2 * a.n);
	posindex_free(&ix);
	CHECK(ix.slot == NULL);
}

int main(void)
{
	run(1, 3000, 200, 1);          /* one bucket: every key in one run */
	run(7, 20000, 400, 2);         /* long colliding runs */
	run(UINT32_MAX, 40000, 6000, 3); /* spread: grows to thousands */
	return check_summary("posindex");
}
