/*
 * Fuzz target for the glob of GET /files/search (src/execd/files_util.c).
 *
 * Input: the first line is the pattern, every further line a base name to match. Beyond "never
 * crashes" (a pattern of nested braces once overflowed PID 1's stack), it checks the contract:
 * compiling is refused only with -EINVAL or -E2BIG and a reason, a match is 1, 0 or -E2BIG (the
 * budget), the one-shot form agrees with the compiled one, and a pattern without any special
 * character matches exactly itself.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/files_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_plain(const char *s)
{
	return !strpbrk(s, "*?[]{},\\/");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 64 * 1024)
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	char *names = strchr(s, '\n');
	if (names)
		*names++ = '\0';

	char why[160] = "";
	struct files_glob *g = NULL;
	int r = files_glob_new(s, &g, why, sizeof(why));
	if (r < 0) {
		if ((r != -EINVAL && r != -E2BIG) || g || !why[0])
			abort();
		if (files_glob_check(s) != r)
			abort();
		free(s);
		return 0;
	}
	if (!g || files_glob_check(s) != 0)
		abort();
	for (char *name = names, *next; name; name = next) {
		next = strchr(name, '\n');
		if (next)
			*next++ = '\0';
		if (strlen(name) > 255 || strchr(name, '/'))
			continue; /* not a base name */
		int m = files_glob_matches(g, name);
		if (m != 0 && m != 1 && m != -E2BIG)
			abort();
		if (m != -E2BIG && files_glob_match(s, name) != m)
			abort();
	}
	if (*s && is_plain(s)) {
		if (files_glob_match(s, s) != 1)
			abort();
	}
	files_glob_free(g);
	free(s);
	return 0;
}
