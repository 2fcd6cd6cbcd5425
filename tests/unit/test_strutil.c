/* Unit tests for src/shared/hash.h (FNV-1a) and src/shared/strv.c. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shared/hash.h"
#include "shared/strv.h"

static void test_fnv1a(void)
{
	/* The published FNV-1a 32-bit test vectors. */
	CHECK_U64(hash_fnv1a(""), 0x811c9dc5u);
	CHECK_U64(hash_fnv1a("a"), 0xe40c292cu);
	CHECK_U64(hash_fnv1a("foobar"), 0xbf9cf968u);
	CHECK_U64(hash_fnv1a(NULL), 0x811c9dc5u);
	/* Bytes above 0x7f count as unsigned (a signed char would give another hash). */
	CHECK_U64(hash_fnv1a("\xff"), (0x811c9dc5u ^ 0xffu) * 16777619u);
}

static void test_strv(void)
{
	strv_free(NULL);
	char **v = calloc(3, sizeof(char *));
	CHECK(v != NULL);
	v[0] = strdup("a");
	v[1] = strdup("b");
	strv_free(v); /* ASan's leak check would see what is left */
	_cleanup_strv_free_ char **w = calloc(2, sizeof(char *));
	CHECK(w != NULL);
	w[0] = strdup("freed at scope exit");
}

int main(void)
{
	test_fnv1a();
	test_strv();
	return check_summary("strutil");
}
