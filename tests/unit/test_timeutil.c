/* Unit tests for src/shared/timeutil.c: RFC 3339 parsing and formatting, clocks. */
#include <errno.h>

#include "check.h"
#include "shared/timeutil.h"

struct tcase {
	const char *in;
	int ret;
	int64_t ms;
};

/* 2026-06-12T10:00:00Z */
#define T0 1781258400000LL

static void test_parse(void)
{
	static const struct tcase cases[] = {
		{"1970-01-01T00:00:00Z", 0, 0},
		{"2026-06-12T10:00:00Z", 0, T0},
		{"2026-06-12T10:00:00z", 0, T0},
		{"2026-06-12t10:00:00Z", 0, T0},
		{"2026-06-12 10:00:00Z", 0, T0},
		{"2026-06-12T10:00:00", 0, T0}, /* naive = UTC */
		{"2026-06-12T10:00:00.123Z", 0, T0 + 123},
		{"2026-06-12T10:00:00.123456Z", 0, T0 + 123},
		{"2026-06-12T10:00:00.1Z", 0, T0 + 100},
		{"2026-06-12T10:00:00.999999999Z", 0, T0 + 999}, /* truncated, not rounded */
		{"2026-06-12T10:00:00.5", 0, T0 + 500},
		{"2026-06-12T12:00:00+02:00", 0, T0},
		{"2026-06-12T15:30:00+05:30", 0, T0},
		{"2026-06-12T05:00:00-05:00", 0, T0},
		{"2026-06-12T10:00:00+00:00", 0, T0},
		{"2026-06-12T10:00:00-00:00", 0, T0},
		{"2026-06-12T12:00:00+0200", 0, T0},
		{"2026-06-12T12:00:00.250+02:00", 0, T0 + 250},
		{"2026-06-13T00:00:00+14:00", 0, T0},
		{"1969-12-31T23:59:59.500Z", 0, -500},
		{"2024-02-29T00:00:00Z", 0, 1709164800000LL}, /* leap year */
		{"2000-02-29T00:00:00Z", 0, 951782400000LL},
		{"2026-12-31T23:59:59Z", 0, 1798761599000LL},
		{"2026-02-30T00:00:00Z", -EINVAL, 0},
		{"2026-02-29T00:00:00Z", -EINVAL, 0}, /* not a leap year */
		{"1900-02-29T00:00:00Z", -EINVAL, 0},
		{"2026-04-31T00:00:00Z", -EINVAL, 0},
		{"2026-02-30T00:00:60Z", -EINVAL, 0}, /* a leap second does not make Feb 30 exist */
		{"2026-04-31T23:59:60Z", -EINVAL, 0},
		{"2026-13-01T00:00:00Z", -EINVAL, 0},
		{"2026-00-01T00:00:00Z", -EINVAL, 0},
		{"2026-01-00T00:00:00Z", -EINVAL, 0},
		{"2026-01-32T00:00:00Z", -EINVAL, 0},
		{"2026-01-01T24:00:00Z", -EINVAL, 0},
		{"2026-01-01T00:60:00Z", -EINVAL, 0},
		{"2026-01-01T00:00:61Z", -EINVAL, 0},
		{"2026-01-01T00:00:00+24:00", -EINVAL, 0},
		{"2026-01-01T00:00:00+01:60", -EINVAL, 0},
		{"2026-01-01T00:00:00+01", -EINVAL, 0},
		{"2026-01-01T00:00:00+1:00", -EINVAL, 0},
		{"2026-01-01T00:00:00.Z", -EINVAL, 0},
		{"2026-01-01T00:00:00ZZ", -EINVAL, 0},
		{"2026-01-01T00:00:00Z ", -EINVAL, 0},
		{" 2026-01-01T00:00:00Z", -EINVAL, 0},
		{"2026-01-01", -EINVAL, 0},
		{"2026-01-01T", -EINVAL, 0},
		{"2026-01-01T00:00", -EINVAL, 0},
		{"2026-1-01T00:00:00Z", -EINVAL, 0},
		{"2026/01/01T00:00:00Z", -EINVAL, 0},
		{"2026-01-01X00:00:00Z", -EINVAL, 0},
		{"26-01-01T00:00:00Z", -EINVAL, 0},
		{"garbage", -EINVAL, 0},
		{"", -EINVAL, 0},
		{"1718000000", -EINVAL, 0},
		{"2026-01-01T00:00:00UTC", -EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t v = 42;
		int r = time_parse_rfc3339(cases[i].in, &v);
		if (r != cases[i].ret)
			fprintf(stderr, "input \"%s\"\n", cases[i].in);
		CHECK_INT(r, cases[i].ret);
		if (cases[i].ret == 0) {
			if (v != cases[i].ms)
				fprintf(stderr, "input \"%s\"\n", cases[i].in);
			CHECK_INT(v, cases[i].ms);
		} else {
			CHECK_INT(v, 42);
		}
	}
	int64_t v;
	CHECK_INT(time_parse_rfc3339(NULL, &v), -EINVAL);

	/* A leap second at the end of a real day is accepted (it reads as the next second). */
	CHECK_INT(time_parse_rfc3339("2016-12-31T23:59:60Z", &v), 0);
	CHECK_INT(v, 1483228800000LL);
}

static void test_format(void)
{
	char buf[RFC3339_MAX];
	time_format_rfc3339(0, buf);
	CHECK_STR(buf, "1970-01-01T00:00:00.000000Z");
	time_format_rfc3339(T0 + 123, buf);
	CHECK_STR(buf, "2026-06-12T10:00:00.123000Z");
	time_format_rfc3339(-500, buf);
	CHECK_STR(buf, "1969-12-31T23:59:59.500000Z");
	time_format_rfc3339(1709164800000LL + 86399999, buf);
	CHECK_STR(buf, "2024-02-29T23:59:59.999000Z");

	/* Round trips through the formatter. */
	static const int64_t samples[] = {0, 1, 999, 1000, T0, T0 + 7, -1, -1001, 4102444799999LL,
					  253402300799999LL /* 9999-12-31T23:59:59.999 */};
	for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
		int64_t back = 0;
		time_format_rfc3339(samples[i], buf);
		CHECK_INT(time_parse_rfc3339(buf, &back), 0);
		CHECK_INT(back, samples[i]);
	}
}

static void test_clocks(void)
{
	int64_t now = time_now_ms();
	CHECK(now > T0 - 365LL * 86400 * 1000 * 10); /* sane wall clock */
	int64_t m1 = time_mono_ms();
	uint64_t n1 = time_mono_ns();
	int64_t m2 = time_mono_ms();
	uint64_t n2 = time_mono_ns();
	CHECK(m2 >= m1);
	CHECK(n2 >= n1);
	CHECK((int64_t)(n1 / 1000000) >= m1);
}

int main(void)
{
	test_parse();
	test_format();
	test_clocks();
	return check_summary("test_timeutil");
}
