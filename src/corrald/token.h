/*
 * Per-sandbox proxy tokens. When corrald has an API key, the proxy route takes either that key or
 * the sandbox's own token, which corrald hands out in the endpoint reply's headers. A token is
 * HMAC-SHA256(secret, "corral-proxy:" id) in hex: unguessable without the secret, valid for that
 * sandbox only, and the same after a restart (the secret lives in the state dir, mode 0600).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOKEN_SECRET_LEN 32
#define TOKEN_HEX_LEN 64
#define TOKEN_HEADER "OpenSandbox-Secure-Access"

void sha256(const void *data, size_t len, uint8_t out[32]);
void hmac_sha256(const uint8_t *key, size_t keylen, const void *data, size_t len, uint8_t out[32]);

/* The token of sandbox id, NUL-terminated hex. */
void token_for(const uint8_t secret[TOKEN_SECRET_LEN], const char *id, char out[TOKEN_HEX_LEN + 1]);
/* Whether given is id's token; constant time in the token's length. */
bool token_check(const uint8_t secret[TOKEN_SECRET_LEN], const char *id, const char *given);

/*
 * Read the secret from path, or create it (random, mode 0600) when missing. Refuses a path that is
 * a symlink, not a regular file, not owned by us, readable by others, or of the wrong size.
 * Returns 0 or -errno with msg filled.
 */
int token_secret_load(const char *path, uint8_t secret[TOKEN_SECRET_LEN], char *msg, size_t msglen);
