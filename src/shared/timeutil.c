#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "timeutil.h"

int64_t time_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t time_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t time_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void time_format_rfc3339(int64_t unix_ms, char buf[RFC3339_MAX])
{
	time_t secs = (time_t)(unix_ms / 1000);
	int ms = (int)(unix_ms % 1000);
	if (ms < 0) {
		ms += 1000;
		secs -= 1;
	}
	struct tm tm;
	gmtime_r(&secs, &tm);
	snprintf(buf, RFC3339_MAX, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms * 1000);
}

static int take_digits(const char **p, int n, int *ret)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return -EINVAL;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*ret = v;
	return 0;
}

static int expect(const char **p, char c)
{
	if (**p != c)
		return -EINVAL;
	(*p)++;
	return 0;
}

static int days_in_month(int year, int mon)
{
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	return days[mon - 1] + (mon == 2 && leap);
}

/*
 * Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm). Computed here
 * rather than with timegm(), whose error value -1 is also the valid time 1969-12-31T23:59:59Z.
 */
static int64_t days_from_civil(int y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int time_parse_rfc3339(const char *s, int64_t *ret_unix_ms)
{
	const char *p = s;
	int year, mon, day, hour, min, sec, ms = 0;
	if (!s)
		return -EINVAL;
	if (take_digits(&p, 4, &year) || expect(&p, '-') || take_digits(&p, 2, &mon) ||
	    expect(&p, '-') || take_digits(&p, 2, &day))
		return -EINVAL;
	if (*p != 'T' && *p != 't' && *p != ' ')
		return -EINVAL;
	p++;
	if (take_digits(&p, 2, &hour) || expect(&p, ':') || take_digits(&p, 2, &min) ||
	    expect(&p, ':') || take_digits(&p, 2, &sec))
		return -EINVAL;
	if (*p == '.') {
		p++;
		int digits = 0, scale = 100;
		while (isdigit((unsigned char)*p)) {
			if (digits < 3) {
				ms += (*p - '0') * scale;
				scale /= 10;
			}
			digits++;
			p++;
		}
		if (digits == 0)
			return -EINVAL;
	}
	int offset_min = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, oh, om;
		p++;
		if (take_digits(&p, 2, &oh))
			return -EINVAL;
		if (*p == ':')
			p++;
		if (take_digits(&p, 2, &om))
			return -EINVAL;
		if (oh > 23 || om > 59)
			return -EINVAL;
		offset_min = sign * (oh * 60 + om);
	}
	if (*p != '\0')
		return -EINVAL;
	if (mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) || hour > 23 ||
	    min > 59 || sec > 60)
		return -EINVAL;
	/* A leap second (:60) reads as the first second of the next minute. */
	int64_t t = days_from_civil(year, mon, day) * 86400 + hour * 3600 + min * 60 + sec;
	*ret_unix_ms = (t - (int64_t)offset_min * 60) * 1000 + ms;
	return 0;
}
