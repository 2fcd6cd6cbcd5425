/* Random identifiers. */
#pragma once

#include <stddef.h>

#define UUID_STR_LEN 37 /* 36 chars + NUL */
#define HEXID_LEN 33    /* 32 lowercase hex + NUL */

/* uuid4 with dashes, the shape of OpenSandbox sandbox ids. Returns 0 or -errno. */
int id_uuid4(char buf[UUID_STR_LEN]);
/* 32 lowercase hex characters, the shape of execd execution ids and request ids. */
int id_hex32(char buf[HEXID_LEN]);
/* True when s is exactly 32 lowercase hex characters. */
int id_is_hex32(const char *s);
/* True when s is a uuid4-shaped id (36 chars, lowercase hex and dashes at 8-4-4-4-12). */
int id_is_uuid(const char *s);
