/* Unit tests for src/shared/id.c: random uuid4 and hex32 identifiers and their validators. */
#include "check.h"
#include "shared/id.h"

static void test_uuid4(void)
{
	char a[UUID_STR_LEN], b[UUID_STR_LEN];
	CHECK_INT(id_uuid4(a), 0);
	CHECK_INT(id_uuid4(b), 0);
	CHECK_INT(strlen(a), 36);
	CHECK(id_is_uuid(a));
	CHECK(strcmp(a, b) != 0);
	CHECK(a[14] == '4');                              /* version nibble */
	CHECK(strchr("89ab", a[19]) != NULL);             /* RFC 4122 variant */
	CHECK(!id_is_hex32(a));
	/* Many draws: always well-formed, never repeating. */
	char prev[UUID_STR_LEN];
	memcpy(prev, a, sizeof(prev));
	for (int i = 0; i < 1000; i++) {
		CHECK_INT(id_uuid4(a), 0);
		if (!id_is_uuid(a) || a[14] != '4' || !strchr("89ab", a[19]) || !strcmp(a, prev))
			CHECK_STR(a, "(a fresh well-formed uuid4)");
		memcpy(prev, a, sizeof(prev));
	}
}

static void test_hex32(void)
{
	char a[HEXID_LEN], b[HEXID_LEN];
	CHECK_INT(id_hex32(a), 0);
	CHECK_INT(id_hex32(b), 0);
	CHECK_INT(strlen(a), 32);
	CHECK(id_is_hex32(a));
	CHECK(!id_is_uuid(a));
	CHECK(strcmp(a, b) != 0);
	/* Every hex digit shows up over enough draws (the alphabet is complete and lowercase). */
	int seen[16] = {0};
	for (int i = 0; i < 200; i++) {
		CHECK_INT(id_hex32(a), 0);
		for (int j = 0; j < 32; j++) {
			const char *p = strchr("0123456789abcdef", a[j]);
			if (p)
				seen[p - "0123456789abcdef"] = 1;
			else
				CHECK_STR(a, "(lowercase hex only)");
		}
	}
	for (int i = 0; i < 16; i++)
		CHECK_INT(seen[i], 1);
}

static void test_validators(void)
{
	CHECK(id_is_hex32("0123456789abcdef0123456789abcdef"));
	CHECK(!id_is_hex32("0123456789ABCDEF0123456789abcdef"));
	CHECK(!id_is_hex32("0123456789abcdef0123456789abcde"));
	CHECK(!id_is_hex32("0123456789abcdef0123456789abcdef0"));
	CHECK(!id_is_hex32("0123456789abcdeg0123456789abcdef"));
	CHECK(!id_is_hex32(""));
	CHECK(!id_is_hex32(NULL));

	CHECK(id_is_uuid("123e4567-e89b-42d3-a456-426614174000"));
	CHECK(!id_is_uuid("123E4567-e89b-42d3-a456-426614174000"));
	CHECK(!id_is_uuid("123e4567e89b-42d3-a456-426614174000-"));
	CHECK(!id_is_uuid("123e4567-e89b-42d3-a456-42661417400"));
	CHECK(!id_is_uuid("123e4567-e89b-42d3-a456-4266141740000"));
	CHECK(!id_is_uuid("123e4567_e89b_42d3_a456_426614174000"));
	CHECK(!id_is_uuid("../../../../../../../../etc/passwd00"));
	CHECK(!id_is_uuid("123e4567-e89b-42d3-a456-42661417400/"));
	CHECK(!id_is_uuid(""));
	CHECK(!id_is_uuid(NULL));
}

int main(void)
{
	test_uuid4();
	test_hex32();
	test_validators();
	return check_summary("test_id");
}
