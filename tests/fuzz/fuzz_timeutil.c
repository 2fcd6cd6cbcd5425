/*
 * Fuzz target for time_parse_rfc3339. Beyond "never crashes": parsing is deterministic, and a
 * parsed time inside years 0001-9999 formats to a string that parses back to the same instant.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shared/timeutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define YEAR_1_MS (-62135596800000LL)     /* 0001-01-01T00:00:00Z */
#define YEAR_10000_MS (253402300800000LL) /* 10000-01-01T00:00:00Z */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	int64_t ms, again, back;
	int r = time_parse_rfc3339(s, &ms);
	if (r == 0) {
		if (time_parse_rfc3339(s, &again) != 0 || again != ms)
			abort();
		if (ms >= YEAR_1_MS && ms < YEAR_10000_MS) {
			char buf[RFC3339_MAX];
			time_format_rfc3339(ms, buf);
			if (time_parse_rfc3339(buf, &back) != 0 || back != ms)
				abort();
		}
	}
	free(s);
	return 0;
}
