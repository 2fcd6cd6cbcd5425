/*
 * Fuzz target for the quantity parsers. Beyond "never crashes", it checks the contract: an
 * accepted value is in range, and formatting it gives a string that parses back to the same value.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shared/quantity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';

	char buf[64];
	uint64_t v, back;
	if (quantity_parse_cpu(s, &v) == 0) {
		if (v == 0 || v > UINT32_MAX)
			abort();
		quantity_format_cpu(v, buf, sizeof(buf));
		if (quantity_parse_cpu(buf, &back) != 0 || back != v)
			abort();
	}
	if (quantity_parse_bytes(s, &v) == 0) {
		if (v == 0 || v > UINT64_MAX / 2)
			abort();
		quantity_format_bytes(v, buf, sizeof(buf));
		if (quantity_parse_bytes(buf, &back) != 0 || back != v)
			abort();
	}
	free(s);
	return 0;
}
