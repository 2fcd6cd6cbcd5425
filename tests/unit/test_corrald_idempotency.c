/* Idempotency-Key of creates (corrald/idempotency.c): key syntax, request fingerprint, answers kept
 * for the window. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "corrald/idempotency.h"

static void test_key_parse(void)
{
	char k[IDEM_KEY_MAX + 1];
	CHECK_INT(idem_key_parse("abc-123", k), 0);
	CHECK_STR(k, "abc-123");
	/* The draft's form: an RFC 8941 string. */
	CHECK_INT(idem_key_parse("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"", k), 0);
	CHECK_STR(k, "8e03978e-40d5-43e8-bc93-6894a57f9324");
	CHECK_INT(idem_key_parse("  spaced \t", k), 0);
	CHECK_STR(k, "spaced");
	CHECK_INT(idem_key_parse("", k), -EINVAL);
	CHECK_INT(idem_key_parse("\"\"", k), -EINVAL);
	CHECK_INT(idem_key_parse("\"a\\\"b\"", k), -EINVAL);
	CHECK_INT(idem_key_parse("tab\tinside", k), -EINVAL);
	CHECK_INT(idem_key_parse("caf\xc3\xa9", k), -EINVAL);
	CHECK_INT(idem_key_parse(NULL, k), -EINVAL);
	char big[IDEM_KEY_MAX + 2];
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK_INT(idem_key_parse(big, k), -EINVAL);
	big[IDEM_KEY_MAX] = '\0';
	CHECK_INT(idem_key_parse(big, k), 0);
	CHECK_INT((long long)strlen(k), IDEM_KEY_MAX);
}

static void test_fingerprint(void)
{
	char a[IDEM_FP_LEN + 1], b[IDEM_FP_LEN + 1], c[IDEM_FP_LEN + 1];
	json_t *x = json_loads("{\"image\":{\"uri\":\"host\"},\"timeout\":60}", 0, NULL);
	json_t *y = json_loads("{ \"timeout\" : 60, \"image\" : { \"uri\" : \"host\" } }", 0, NULL);
	json_t *z = json_loads("{\"image\":{\"uri\":\"host\"},\"timeout\":61}", 0, NULL);
	CHECK_INT(idem_fingerprint(x, a), 0);
	CHECK_INT(idem_fingerprint(y, b), 0);
	CHECK_INT(idem_fingerprint(z, c), 0);
	CHECK_INT((long long)strlen(a), IDEM_FP_LEN);
	CHECK_STR(a, b); /* member order and spacing do not matter */
	CHECK(strcmp(a, c) != 0);
	/* sha256('{"image":{"uri":"host"},"timeout":60}') */
	CHECK_STR(a, "cb45c45f6a60d0a311426ab88268e482edacbb73efed7bad2c4c378f958f8f5c");
	json_decref(x);
	json_decref(y);
	json_decref(z);
}

static void test_cache(void)
{
	idem_set_window(10);
	CHECK_INT(idem_window_ms(), 10000);
	struct idem_answer a = {.fp = "f1", .status = 422, .code = "SANDBOX::ENTRYPOINT_EXITED",
				.message = "exit 3"}, got;
	CHECK(!idem_cache_get("k1", 1000, &got));
	idem_cache_put("k1", &a, 1000, 1000);
	CHECK(idem_cache_get("k1", 10999, &got));
	CHECK_INT(got.status, 422);
	CHECK_STR(got.code, "SANDBOX::ENTRYPOINT_EXITED");
	CHECK_STR(got.message, "exit 3");
	CHECK_STR(got.fp, "f1");
	CHECK(!idem_cache_get("k1", 11000, &got)); /* the window is over */
	CHECK(!idem_cache_get("k2", 2000, &got));
	/* Expired answers go when new ones come; at most IDEM_CACHE_MAX are kept. */
	idem_cache_put("k2", &a, 20000, 20000);
	CHECK_INT(idem_cache_size(), 1);
	char key[32];
	for (int i = 0; i < IDEM_CACHE_MAX + 10; i++) {
		snprintf(key, sizeof(key), "n%d", i);
		idem_cache_put(key, &a, 20000, 20000);
	}
	CHECK_INT(idem_cache_size(), IDEM_CACHE_MAX);
	CHECK(!idem_cache_get("k2", 20001, &got)); /* the oldest went first */
	CHECK(idem_cache_get("n10", 20001, &got));
	CHECK(!idem_cache_get("n9", 20001, &got));
	idem_cache_drop("n10");
	CHECK(!idem_cache_get("n10", 20001, &got));
	idem_cache_clear();
	CHECK_INT(idem_cache_size(), 0);
}

int main(void)
{
	test_key_parse();
	test_fingerprint();
	test_cache();
	return check_summary("corrald_idempotency");
}
