/*
 * A tiny assertion kit for the unit tests: every CHECK prints file:line and the values it compared
 * when it fails, keeps going, and check_summary() turns any failure into a non-zero exit status.
 * One static counter pair per test executable (each test is a single translation unit).
 */
#pragma once

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static unsigned check_run_, check_failed_;

#define CHECK_FAIL_(fmt, ...)                                                                      \
	do {                                                                                       \
		check_failed_++;                                                                   \
		fprintf(stderr, "%s:%d: FAIL: " fmt "\n", __FILE__, __LINE__, __VA_ARGS__);        \
	} while (0)

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		check_run_++;                                                                      \
		if (!(cond))                                                                       \
			CHECK_FAIL_("%s", #cond);                                                  \
	} while (0)

/* Signed integers (return codes, errnos). */
#define CHECK_INT(a, b)                                                                            \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		check_run_++;                                                                      \
		if (a_ != b_)                                                                      \
			CHECK_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_);                     \
	} while (0)

#define CHECK_U64(a, b)                                                                            \
	do {                                                                                       \
		uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                                   \
		check_run_++;                                                                      \
		if (a_ != b_)                                                                      \
			CHECK_FAIL_("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_);          \
	} while (0)

#define CHECK_STR(a, b)                                                                            \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		check_run_++;                                                                      \
		if (!a_ || !b_ || strcmp(a_, b_) != 0)                                             \
			CHECK_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)",      \
				    b_ ? b_ : "(null)");                                           \
	} while (0)

/* Prints the one-line summary; use as `return check_summary("name");` from main. */
static inline int check_summary(const char *name)
{
	if (check_failed_)
		printf("%s: %u of %u checks FAILED\n", name, check_failed_, check_run_);
	else
		printf("%s: all %u checks passed\n", name, check_run_);
	return check_failed_ ? 1 : 0;
}
