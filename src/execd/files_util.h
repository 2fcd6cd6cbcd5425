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
 * Glob match of a base name with doublestar semantics (*, **, ?, [...] with ! or ^, {a,b},
 * backslash escapes; "**" can only stand for an empty path prefix since a base name has no '/').
 * files_glob_check: 0 or -EINVAL for a malformed pattern. files_glob_match: 1, 0 or -EINVAL.
 */
int files_glob_check(const char *pattern);
int files_glob_match(const char *pattern, const char *name);

/* Content-Disposition for a download of base: filename="..." and, for non-ASCII, filename*. */
void files_content_disposition(const char *base, char *out, size_t len);

/* RFC 3339 in UTC: with trimmed nanoseconds (Go's RFC3339Nano), and whole seconds. */
void files_time_nano(const struct timespec *ts, char *out, size_t len);
void files_time_sec(time_t t, char *out, size_t len);
