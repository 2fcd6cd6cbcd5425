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
	if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60)
		return -EINVAL;
	struct tm tm = {
		.tm_year = year - 1900,
		.tm_mon = mon - 1,
		.tm_mday = day,
		.tm_hour = hour,
		.tm_min = min,
		.tm_sec = sec,
	};
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	/* timegm normalizes Feb 30 into March: reject dates that do not exist. */
	struct tm back;
	gmtime_r(&t, &back);
	if (back.tm_mday != day && sec != 60)
		return -EINVAL;
	*ret_unix_ms = ((int64_t)t - (int64_t)offset_min * 60) * 1000 + ms;
	return 0;
}
