#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corrald/idempotency.h"
#include "corrald/token.h"
#include "shared/macro.h"

static int64_t window_ms = (int64_t)IDEM_DEFAULT_WINDOW_S * 1000;
/* key -> {"fp","status","code","message","expiresMs"}; jansson iterates in insertion order, so
 * the first entries are the oldest. */
static json_t *cache;

int idem_key_parse(const char *header, char out[IDEM_KEY_MAX + 1])
{
	if (!header)
		return -EINVAL;
	size_t n = strlen(header);
	while (n > 0 && (header[n - 1] == ' ' || header[n - 1] == '\t'))
		n--;
	while (n > 0 && (*header == ' ' || *header == '\t')) {
		header++;
		n--;
	}
	if (n >= 2 && header[0] == '"' && header[n - 1] == '"') {
		header++;
		n -= 2;
		/* An sf-string may escape " and \ only; a key with either is refused instead. */
		if (memchr(header, '\\', n) || memchr(header, '"', n))
			return -EINVAL;
	}
	if (n == 0 || n > IDEM_KEY_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (header[i] < 0x20 || header[i] > 0x7e)
			return -EINVAL;
	memcpy(out, header, n);
	out[n] = '\0';
	return 0;
}

int idem_fingerprint(const json_t *body, char out[IDEM_FP_LEN + 1])
{
	char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	if (!s)
		return -ENOMEM;
	uint8_t md[IDEM_FP_LEN / 2];
	sha256(s, strlen(s), md);
	free(s);
	for (unsigned i = 0; i < sizeof(md); i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

void idem_set_window(int64_t seconds)
{
	window_ms = seconds * 1000;
}

int64_t idem_window_ms(void)
{
	return window_ms;
}

static void prune(int64_t now_ms)
{
	const char *k;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(cache, tmp, k, v) {
		if (json_integer_value(json_object_get(v, "expiresMs")) > now_ms &&
		    json_object_size(cache) < IDEM_CACHE_MAX)
			break;
		json_object_del(cache, k);
	}
}

void idem_cache_put(const char *key, const struct idem_answer *a, int64_t created_ms,
		    int64_t now_ms)
{
	if (!cache && !(cache = json_object()))
		return;
	json_object_del(cache, key); /* re-inserted last: the order stays that of expiry */
	prune(now_ms);
	json_object_set_new(cache, key,
			    json_pack("{s:s, s:i, s:s, s:s, s:I}", "fp", a->fp, "status", a->status,
				      "code", a->code, "message", a->message, "expiresMs",
				      (json_int_t)(created_ms + window_ms)));
}

bool idem_cache_get(const char *key, int64_t now_ms, struct idem_answer *ret)
{
	json_t *v = cache ? json_object_get(cache, key) : NULL;
	if (!v || json_integer_value(json_object_get(v, "expiresMs")) <= now_ms)
		return false;
	snprintf(ret->fp, sizeof(ret->fp), "%s", json_string_value(json_object_get(v, "fp")));
	ret->status = (int)json_integer_value(json_object_get(v, "status"));
	snprintf(ret->code, sizeof(ret->code), "%s", json_string_value(json_object_get(v, "code")));
	snprintf(ret->message, sizeof(ret->message), "%s",
		 json_string_value(json_object_get(v, "message")));
	return true;
}

void idem_cache_drop(const char *key)
{
	if (cache)
		json_object_del(cache, key);
}

size_t idem_cache_size(void)
{
	return cache ? json_object_size(cache) : 0;
}

void idem_cache_clear(void)
{
	json_decref(cache);
	cache = NULL;
}
