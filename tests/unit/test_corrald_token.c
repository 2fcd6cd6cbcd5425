/* Per-sandbox proxy tokens (corrald/token.c): SHA-256 and HMAC against published vectors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "corrald/token.h"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void test_sha256(void)
{
	uint8_t d[32];
	char h[65];
	sha256("abc", 3, d);
	hex(d, 32, h);
	CHECK_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha256("", 0, d);
	hex(d, 32, h);
	CHECK_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 2 blocks */
	sha256(two, strlen(two), d);
	hex(d, 32, h);
	CHECK_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_hmac(void)
{
	/* RFC 4231 test cases 1 and 6 (a key longer than a block) */
	uint8_t key[131], d[32];
	char h[65];
	memset(key, 0x0b, 20);
	hmac_sha256(key, 20, "Hi There", 8, d);
	hex(d, 32, h);
	CHECK_STR(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	memset(key, 0xaa, sizeof(key));
	const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
	hmac_sha256(key, sizeof(key), m, strlen(m), d);
	hex(d, 32, h);
	CHECK_STR(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_token(void)
{
	uint8_t s1[TOKEN_SECRET_LEN] = {1}, s2[TOKEN_SECRET_LEN] = {2};
	char t[TOKEN_HEX_LEN + 1], u[TOKEN_HEX_LEN + 1];
	token_for(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", t);
	CHECK_INT((int)strlen(t), TOKEN_HEX_LEN);
	CHECK(token_check(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", t));
	CHECK(!token_check(s2, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", t)); /* another corrald */
	CHECK(!token_check(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e02", t)); /* another sandbox */
	token_for(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e02", u);
	CHECK(strcmp(t, u) != 0);
	char shorter[TOKEN_HEX_LEN];
	memcpy(shorter, t, TOKEN_HEX_LEN - 1);
	shorter[TOKEN_HEX_LEN - 1] = '\0';
	CHECK(!token_check(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", shorter));
	char longer[TOKEN_HEX_LEN + 2];
	snprintf(longer, sizeof(longer), "%s0", t);
	CHECK(!token_check(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", longer));
	CHECK(!token_check(s1, "0b5f2b8e-4d1c-4c11-9a44-0b3c7c0d9e01", ""));
}

static void test_secret_file(void)
{
	char dir[] = "/tmp/corral-token-XXXXXX", path[64], msg[512];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/key", dir);
	uint8_t a[TOKEN_SECRET_LEN], b[TOKEN_SECRET_LEN];
	CHECK_INT(token_secret_load(path, a, msg, sizeof(msg)), 0); /* made */
	struct stat st;
	CHECK_INT(stat(path, &st), 0);
	CHECK_INT((int)(st.st_mode & 0777), 0600);
	CHECK_INT(token_secret_load(path, b, msg, sizeof(msg)), 0); /* read back */
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	CHECK_INT(chmod(path, 0644), 0);
	CHECK_INT(token_secret_load(path, b, msg, sizeof(msg)), -EPERM);
	CHECK(strstr(msg, "0600") != NULL);
	unlink(path);
	CHECK_INT(symlink("/etc/passwd", path), 0);
	CHECK(token_secret_load(path, b, msg, sizeof(msg)) < 0); /* never followed */
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_sha256();
	test_hmac();
	test_token();
	test_secret_file();
	return check_summary("corrald_token");
}
