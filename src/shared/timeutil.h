/* Clocks and RFC 3339 timestamps. All wall-clock values are unix milliseconds. */
#pragma once

#include <stddef.h>
#include <stdint.h>

int64_t time_now_ms(void);  /* CLOCK_REALTIME */
int64_t time_mono_ms(void); /* CLOCK_MONOTONIC */
uint64_t time_mono_ns(void);

#define RFC3339_MAX 40
/* "2026-06-12T10:00:00.123456Z" (microsecond precision, always UTC). */
void time_format_rfc3339(int64_t unix_ms, char buf[RFC3339_MAX]);
/*
 * Accepts "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" and, as the reference server does, a naive
 * timestamp without an offset (read as UTC). Returns -EINVAL on anything else.
 */
int time_parse_rfc3339(const char *s, int64_t *ret_unix_ms);
