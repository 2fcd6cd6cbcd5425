#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "id.h"

static int fill_random(uint8_t *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom(b + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)r;
	}
	return 0;
}

static const char hexdig[] = "0123456789abcdef";

int id_uuid4(char buf[UUID_STR_LEN])
{
	uint8_t b[16];
	int r = fill_random(b, sizeof(b));
	if (r < 0)
		return r;
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	char *p = buf;
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hexdig[b[i] >> 4];
		*p++ = hexdig[b[i] & 15];
	}
	*p = '\0';
	return 0;
}

int id_hex32(char buf[HEXID_LEN])
{
	uint8_t b[16];
	int r = fill_random(b, sizeof(b));
	if (r < 0)
		return r;
	for (int i = 0; i < 16; i++) {
		buf[2 * i] = hexdig[b[i] >> 4];
		buf[2 * i + 1] = hexdig[b[i] & 15];
	}
	buf[32] = '\0';
	return 0;
}

static int is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

int id_is_hex32(const char *s)
{
	if (!s || strlen(s) != 32)
		return 0;
	for (int i = 0; i < 32; i++)
		if (!is_lower_hex(s[i]))
			return 0;
	return 1;
}

int id_is_uuid(const char *s)
{
	if (!s || strlen(s) != 36)
		return 0;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return 0;
		} else if (!is_lower_hex(s[i])) {
			return 0;
		}
	}
	return 1;
}
