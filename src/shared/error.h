/*
 * The error idiom: a fallible function returns 0 or a negative errno and, when it has several
 * failure modes, fills a caller-provided struct error whose message says what failed and on what:
 *   "mount overlay on '/var/lib/corral/...': No space left on device".
 * The struct is always the last argument and may be NULL.
 */
#pragma once

#include <stdarg.h>

#include "macro.h"

#define ERROR_MSG_MAX 512

struct error {
	int code;                /* negative errno, 0 when unset */
	char msg[ERROR_MSG_MAX]; /* human-readable, never ends with a newline */
};

/* Record a failure; returns -errnum (errnum is a positive errno) so callers can `return error_set(...)`. */
int error_set(struct error *e, int errnum, const char *fmt, ...) _printf_(3, 4);
/* Same, with ": strerror(errnum)" appended. */
int error_set_errno(struct error *e, int errnum, const char *fmt, ...) _printf_(3, 4);
/* Prepend context: "context: previous message". Returns e->code. */
int error_prefix(struct error *e, const char *fmt, ...) _printf_(2, 3);
void error_clear(struct error *e);
