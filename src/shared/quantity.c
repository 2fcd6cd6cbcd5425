#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "quantity.h"

/*
 * Parse the "<digits>[.<digits>]" that starts s into a value scaled by 10^9 (nano-units), so
 * "1.5" -> 1500000000, and point ret_suffix at what follows. Returns 0, or -EINVAL/-ERANGE
 * (also for a NULL or empty s).
 */
static int parse_decimal_nano(const char *s, unsigned __int128 *ret, const char **ret_suffix)
{
	if (!s || !*s)
		return -EINVAL;
	const char *p = s;
	unsigned __int128 whole = 0, frac = 0, scale = 1000000000;
	int digits = 0;

	while (*p >= '0' && *p <= '9') {
		whole = whole * 10 + (unsigned)(*p - '0');
		if (whole > (unsigned __int128)UINT64_MAX * 1024)
			return -ERANGE;
		p++;
		digits++;
	}
	if (*p == '.') {
		p++;
		int fdigits = 0;
		while (*p >= '0' && *p <= '9') {
			if (fdigits < 9) {
				scale /= 10;
				frac += (unsigned __int128)(*p - '0') * scale;
			}
			p++;
			fdigits++;
			digits++;
		}
		if (fdigits == 0)
			return -EINVAL;
	}
	if (digits == 0)
		return -EINVAL;
	*ret = whole * 1000000000 + frac;
	*ret_suffix = p;
	return 0;
}

int quantity_parse_cpu(const char *s, uint64_t *ret_millicores)
{
	unsigned __int128 nano;
	const char *suffix;
	int r = parse_decimal_nano(s, &nano, &suffix);
	if (r < 0)
		return r;
	unsigned __int128 milli;
	if (strcmp(suffix, "m") == 0) {
		/* millicores must be whole */
		if (nano % 1000000000)
			return -EINVAL;
		milli = nano / 1000000000;
	} else if (*suffix == '\0') {
		if (nano % 1000000)
			return -EINVAL; /* finer than a millicore */
		milli = nano / 1000000;
	} else {
		return -EINVAL;
	}
	if (milli == 0)
		return -EINVAL;
	if (milli > UINT32_MAX)
		return -ERANGE;
	*ret_millicores = (uint64_t)milli;
	return 0;
}

int quantity_parse_bytes(const char *s, uint64_t *ret_bytes)
{
	static const struct {
		const char *suffix;
		unsigned __int128 mult;
	} units[] = {
		{"", 1},
		{"k", 1000ULL},
		{"K", 1000ULL},
		{"M", 1000ULL * 1000},
		{"G", 1000ULL * 1000 * 1000},
		{"T", 1000ULL * 1000 * 1000 * 1000},
		{"P", 1000ULL * 1000 * 1000 * 1000 * 1000},
		{"E", 1000ULL * 1000 * 1000 * 1000 * 1000 * 1000},
		{"Ki", 1ULL << 10},
		{"Mi", 1ULL << 20},
		{"Gi", 1ULL << 30},
		{"Ti", 1ULL << 40},
		{"Pi", 1ULL << 50},
		{"Ei", 1ULL << 60},
	};
	unsigned __int128 nano;
	const char *suffix;
	int r = parse_decimal_nano(s, &nano, &suffix);
	if (r < 0)
		return r;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(suffix, units[i].suffix) != 0)
			continue;
		unsigned __int128 v = nano * units[i].mult;
		if (v / units[i].mult != nano)
			return -ERANGE;
		/* Kubernetes rounds fractional bytes up. */
		unsigned __int128 bytes = (v + 999999999) / 1000000000;
		if (bytes == 0)
			return -EINVAL;
		if (bytes > UINT64_MAX / 2)
			return -ERANGE;
		*ret_bytes = (uint64_t)bytes;
		return 0;
	}
	return -EINVAL;
}

void quantity_format_cpu(uint64_t millicores, char *buf, size_t len)
{
	if (millicores % 1000 == 0)
		snprintf(buf, len, "%llu", (unsigned long long)(millicores / 1000));
	else
		snprintf(buf, len, "%llum", (unsigned long long)millicores);
}

void quantity_format_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const suffixes[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
	for (int i = 0; i < 6; i++) {
		unsigned shift = 60 - 10 * i;
		uint64_t unit = 1ULL << shift;
		if (bytes >= unit && bytes % unit == 0) {
			snprintf(buf, len, "%llu%s", (unsigned long long)(bytes >> shift), suffixes[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)bytes);
}
