/* Per-sandbox proxy tokens: SHA-256 (FIPS 180-4), HMAC (RFC 2104), and the secret's file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corrald/token.h"
#include "shared/macro.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
	0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
	0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
	0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
	0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
	0xc67178f2,
};

struct sha256_ctx {
	uint32_t h[8];
	uint64_t len;
	uint8_t buf[64];
	size_t n;
};

static uint32_t ror(uint32_t x, int n)
{
	return (x >> n) | (x << (32 - n));
}

static void sha256_block(struct sha256_ctx *c, const uint8_t *p)
{
	uint32_t w[64], a, b, cc, d, e, f, g, h;
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3];
	e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] +
			      w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
		h = g, g = f, f = e, e = d + t1;
		d = cc, cc = b, b = a, a = t1 + t2;
	}
	c->h[0] += a, c->h[1] += b, c->h[2] += cc, c->h[3] += d;
	c->h[4] += e, c->h[5] += f, c->h[6] += g, c->h[7] += h;
}

static void sha256_init(struct sha256_ctx *c)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	memcpy(c->h, iv, sizeof(iv));
	c->len = 0;
	c->n = 0;
}

static void sha256_update(struct sha256_ctx *c, const void *data, size_t len)
{
	const uint8_t *p = data;
	c->len += len;
	while (len) {
		size_t take = MIN(len, 64 - c->n);
		memcpy(c->buf + c->n, p, take);
		c->n += take;
		p += take;
		len -= take;
		if (c->n == 64) {
			sha256_block(c, c->buf);
			c->n = 0;
		}
	}
}

static void sha256_final(struct sha256_ctx *c, uint8_t out[32])
{
	uint64_t bits = c->len * 8;
	uint8_t pad = 0x80, zero = 0, lenbe[8];
	sha256_update(c, &pad, 1);
	while (c->n != 56)
		sha256_update(c, &zero, 1);
	for (int i = 0; i < 8; i++)
		lenbe[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha256_update(c, lenbe, 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
}

void sha256(const void *data, size_t len, uint8_t out[32])
{
	struct sha256_ctx c;
	sha256_init(&c);
	sha256_update(&c, data, len);
	sha256_final(&c, out);
}

void hmac_sha256(const uint8_t *key, size_t keylen, const void *data, size_t len, uint8_t out[32])
{
	uint8_t k[64] = {0}, pad[64], inner[32];
	struct sha256_ctx c;
	if (keylen > 64)
		sha256(key, keylen, k);
	else
		memcpy(k, key, keylen);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sha256_init(&c);
	sha256_update(&c, pad, 64);
	sha256_update(&c, data, len);
	sha256_final(&c, inner);
	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sha256_init(&c);
	sha256_update(&c, pad, 64);
	sha256_update(&c, inner, 32);
	sha256_final(&c, out);
}

void token_for(const uint8_t secret[TOKEN_SECRET_LEN], const char *id, char out[TOKEN_HEX_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	char msg[128];
	uint8_t mac[32];
	int n = snprintf(msg, sizeof(msg), "corral-proxy:%s", id);
	hmac_sha256(secret, TOKEN_SECRET_LEN, msg, (size_t)MIN(n, (int)sizeof(msg) - 1), mac);
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[mac[i] >> 4];
		out[2 * i + 1] = hex[mac[i] & 15];
	}
	out[TOKEN_HEX_LEN] = '\0';
}

bool token_check(const uint8_t secret[TOKEN_SECRET_LEN], const char *id, const char *given)
{
	char want[TOKEN_HEX_LEN + 1];
	token_for(secret, id, want);
	size_t glen = strnlen(given, TOKEN_HEX_LEN + 1);
	unsigned char diff = glen != TOKEN_HEX_LEN;
	for (size_t i = 0; i < TOKEN_HEX_LEN; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return diff == 0;
}

static int read_secret(int fd, const char *path, uint8_t secret[TOKEN_SECRET_LEN], char *msg,
		       size_t msglen)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		snprintf(msg, msglen, "stat %s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
	    st.st_size != TOKEN_SECRET_LEN) {
		snprintf(msg, msglen,
			 "%s must be a regular file of %d bytes owned by uid %u with mode 0600; remove it and corrald makes a new one (the sandboxes' proxy tokens change)",
			 path, TOKEN_SECRET_LEN, (unsigned)geteuid());
		return -EPERM;
	}
	ssize_t n = pread(fd, secret, TOKEN_SECRET_LEN, 0);
	if (n != TOKEN_SECRET_LEN) {
		snprintf(msg, msglen, "read %s: %s", path, n < 0 ? strerror(errno) : "short read");
		return n < 0 ? -errno : -EIO;
	}
	return 0;
}

int token_secret_load(const char *path, uint8_t secret[TOKEN_SECRET_LEN], char *msg, size_t msglen)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0)
		return read_secret(fd, path, secret, msg, msglen);
	if (errno != ENOENT) {
		snprintf(msg, msglen, "open %s: %s", path, strerror(errno));
		return -errno;
	}
	if (getrandom(secret, TOKEN_SECRET_LEN, 0) != TOKEN_SECRET_LEN) {
		snprintf(msg, msglen, "getrandom: %s", strerror(errno));
		return -EIO;
	}
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, secret, TOKEN_SECRET_LEN) != TOKEN_SECRET_LEN || fsync(fd) < 0 ||
	    rename(tmp, path) < 0) {
		int e = errno ? errno : EIO;
		snprintf(msg, msglen, "write %s: %s", path, strerror(e));
		unlink(tmp);
		return -e;
	}
	return 0;
}
