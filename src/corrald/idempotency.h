/*
 * Idempotent creates: the Idempotency-Key header of POST /v1/sandboxes (IETF
 * draft-ietf-httpapi-idempotency-key-header).
 *
 * The key and the request's fingerprint (SHA-256 of its body as canonical JSON) are part of the
 * sandbox record, written durably before the runtime makes anything, so a repeat finds the
 * sandbox the first request made, also after a restart. What a create answered without leaving a
 * sandbox (a deterministic 4xx, or the sandbox was deleted since) is kept in memory for the
 * window: a repeat gets the same answer. A 5xx leaves nothing behind and is not kept: a repeat
 * tries again.
 *
 * The pure parts (key syntax, fingerprint, the answer cache) have a unit test
 * (tests/unit/test_corrald_idempotency.c).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define IDEM_KEY_MAX 255
#define IDEM_FP_LEN 64          /* hex SHA-256 */
#define IDEM_CACHE_MAX 16384    /* answers kept at once; the oldest go first */
#define IDEM_DEFAULT_WINDOW_S 86400


/*
 * The header's value: an RFC 8941 string ("...") or, as most clients send it, a bare token; 1 to
 * IDEM_KEY_MAX printable ASCII characters. 0 and the key in out, or -EINVAL.
 */
int idem_key_parse(const char *header, char out[IDEM_KEY_MAX + 1]);

/* Hex SHA-256 of body dumped as compact JSON with sorted keys: the same request however its
 * members are ordered or spaced. -ENOMEM. */
int idem_fingerprint(const json_t *body, char out[IDEM_FP_LEN + 1]);

/* How long a key is remembered (--idempotency-window), in seconds. */
void idem_set_window(int64_t seconds);
int64_t idem_window_ms(void);

/* An answer kept for key (status, code, message), until created_ms + the window. */
struct idem_answer {
	char fp[IDEM_FP_LEN + 1];
	int status;
	char code[64];
	char message[512];
};

/* Keep (or replace) the answer for key. now_ms/created_ms: unix ms. */
void idem_cache_put(const char *key, const struct idem_answer *a, int64_t created_ms,
		    int64_t now_ms);
/* The answer kept for key and not expired at now_ms: true and *ret. */
bool idem_cache_get(const char *key, int64_t now_ms, struct idem_answer *ret);
void idem_cache_drop(const char *key);
size_t idem_cache_size(void);
void idem_cache_clear(void);
