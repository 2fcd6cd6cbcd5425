/* Small pure helpers of the files API, kept apart so unit tests can reach them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/*
 * OpenSandbox file modes are integers whose decimal digits are the octal digits: 755 is 0755.
 * decode accepts 0..7777 (setuid/setgid/sticky included) and rejects the digits 8 and 9;
 * encode reports the permission bits (0777) only, as the reference does.
 */
int files_mode_decode(long long v, mode_t *ret);
int files_mode_encode(mode_t m);

/*
 * HTTP Range for a file of size bytes, as the reference execd reads it: "bytes=" then a
 * comma-separated list of "a-b", "a-" or "-n"; the first satisfiable one is served. -EINVAL when
 * unparseable, -ERANGE when nothing in it is satisfiable.
 */
struct files_range {
	uint64_t start;
	uint64_t length;
};
int files_parse_range(const char *header, uint64_t size, struct files_range *ret);

/*
 * Globs on base names with doublestar semantics (*, **, ?, [...] with ! or ^, {a,b}, backslash
 * escapes; "**" can only stand for an empty path prefix since a base name has no '/').
 *
 * A pattern comes from the client, so every step is bounded: its length, the number of brace
 * groups (which bounds the expansion's recursion), the steps, alternatives and bytes the braces
 * expand to, and the matching work one compiled glob may do over its whole life (a search walks
 * many names with it). Past a bound the answer is -E2BIG with the rule in err; a malformed
 * pattern is -EINVAL.
 *
 * files_glob_new: compile pattern (err, optional, says why it was refused). files_glob_matches:
 * 1, 0, or -E2BIG once the matching budget is spent. files_glob_check and files_glob_match are
 * the one-shot forms (0 or the negative errno; 1, 0 or the negative errno).
 */
#define GLOB_LEN_MAX 4096		  /* bytes of a pattern, with its NUL */
#define GLOB_BRACES_MAX 64		  /* brace groups in a pattern */
#define GLOB_STEPS_MAX 4096		  /* brace expansion steps */
#define GLOB_ALTS_MAX 256		  /* brace-free alternatives */
#define GLOB_EXPANDED_MAX 65536		  /* bytes of all alternatives */
#define GLOB_MATCH_BUDGET (256ull << 20) /* pattern bytes scanned while matching */

struct files_glob;
int files_glob_new(const char *pattern, struct files_glob **ret, char *err, size_t errlen);
int files_glob_matches(struct files_glob *g, const char *name);
void files_glob_free(struct files_glob *g);
static inline void files_glob_freep(struct files_glob **g)
{
	files_glob_free(*g);
}
int files_glob_check(const char *pattern);
int files_glob_match(const char *pattern, const char *name);

/* Content-Disposition for a download of base: filename="..." and, for non-ASCII, filename*. */
void files_content_disposition(const char *base, char *out, size_t len);

/* RFC 3339 in UTC: with trimmed nanoseconds (Go's RFC3339Nano), and whole seconds. */
void files_time_nano(const struct timespec *ts, char *out, size_t len);
void files_time_sec(time_t t, char *out, size_t len);
