/*
 * GET /sandboxes query parsing and pagination, as pure functions (unit-tested in
 * tests/unit/test_corrald_filter.c).
 *
 *  - state: repeatable; a sandbox matches when its state equals any of them, case-insensitively.
 *  - metadata: ONE query parameter whose (already url-decoded) value is itself a query string
 *    "k=v&k2=v2"; every pair must match exactly (AND). Parsed strictly, like Python's
 *    parse_qsl(strict_parsing=True, keep_blank_values=True): every segment needs an '=' and a
 *    non-empty key; blank values are kept; '+' is a space and %XX escapes are decoded.
 *  - page >= 1 (default 1), pageSize 1..200 (default 20).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FILTER_MAX_STATES 16
#define FILTER_MAX_META 64
#define PAGE_SIZE_DEFAULT 20
#define PAGE_SIZE_MAX 200

struct meta_pair {
	char *key;
	char *value;
};

struct meta_filter {
	struct meta_pair *pairs;
	size_t n;
};

/* Parse "k=v&k2=v2". An empty or NULL string is an empty filter. -EINVAL with msg on bad syntax. */
int meta_filter_parse(const char *s, struct meta_filter *ret, char *msg, size_t msglen);
void meta_filter_clear(struct meta_filter *f);
/* True when every pair of f has an equal entry in the lookup (get returns NULL for a missing key). */
bool meta_filter_match(const struct meta_filter *f, const char *(*get)(const char *key, void *ud),
		       void *ud);

/* True when state equals one of states[] ignoring case; an empty list matches everything. */
bool state_filter_match(const char *const *states, size_t n, const char *state);

/*
 * Parse a page/pageSize query value: NULL means def; otherwise a decimal integer in [min, max].
 * -EINVAL (not an integer) or -ERANGE (out of range), with msg naming the parameter.
 */
int query_parse_uint(const char *name, const char *s, unsigned min, unsigned max, unsigned def,
		     unsigned *ret, char *msg, size_t msglen);

struct page_info {
	unsigned page;
	unsigned page_size;
	size_t total_items;
	size_t total_pages; /* ceil(total/pageSize), 0 when empty */
	bool has_next;      /* page < totalPages */
	size_t offset;      /* index of the first item of this page (may be >= total) */
	size_t count;       /* items on this page */
};

void pagination_compute(size_t total, unsigned page, unsigned page_size, struct page_info *ret);
