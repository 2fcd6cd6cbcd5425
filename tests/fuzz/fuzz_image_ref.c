/*
 * Fuzz target for image references (image.uri of a create). Beyond "never crashes": an accepted
 * reference normalizes to a name that parses back to itself, with the same registry, repository,
 * tag and digest, and nothing in it that could break a log line or a URL path.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "images/images.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1024)
		return 0;
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	struct image_ref a, b;
	if (image_ref_parse(s, &a, NULL) == 0) {
		if (image_ref_parse(a.name, &b, NULL) != 0 || strcmp(a.name, b.name) != 0 ||
		    strcmp(a.registry, b.registry) != 0 || strcmp(a.repo, b.repo) != 0 ||
		    strcmp(a.tag, b.tag) != 0 || strcmp(a.digest, b.digest) != 0 ||
		    strcmp(a.host, b.host) != 0)
			abort();
		for (const char *p = a.name; *p; p++)
			if (*p <= ' ' || *p >= 0x7f || *p == '?' || *p == '#' || *p == '%')
				abort();
		if (!a.tag[0] && !a.digest[0])
			abort();
	}
	free(s);
	return 0;
}
