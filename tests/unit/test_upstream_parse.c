/*
 * The execd response parser (src/shared/http_parse.c) against byte-exact inputs, each fed in every
 * split the network could produce, and the fuzz corpus replayed through the fuzz target.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shared/http_parse.h"
#include "shared/macro.h"
#include "check.h"

#ifndef CORPUS_DIR
#define CORPUS_DIR "tests/fuzz/corpus/upstream_parse"
#endif

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

struct result {
	int rc; /* 0, or the parser's negative errno */
	int status;
	bool done;
	bool keep_alive;
	enum http_body_kind body;
	char payload[1 << 16];
	size_t payload_len;
	size_t leftover; /* bytes after the end of the message */
	unsigned interim;
	char first_header[64];
};

/*
 * Drive the parser the way the proxy does: bytes arrive in pieces (cuts are the arrival
 * boundaries), are appended to a buffer, and consumed from its front.
 */
static void drive(const char *in, size_t len, const size_t *cuts, size_t ncuts, bool head,
		  bool eof, struct result *r)
{
	static char buf[1 << 17];
	struct http_resp p;
	size_t have = 0, start = 0, fed = 0;

	memset(r, 0, sizeof(*r));
	http_resp_init(&p, head);
	for (size_t k = 0; k <= ncuts && !r->rc; k++) {
		size_t upto = k < ncuts ? cuts[k] : len;
		if (upto < fed)
			continue;
		memcpy(buf + have, in + fed, upto - fed);
		have += upto - fed;
		fed = upto;

		for (;;) {
			size_t avail = have - start;
			if (!p.head_done) {
				if (avail == 0)
					break;
				ssize_t n = http_resp_parse_head(&p, buf + start, avail, NULL);
				if (n < 0) {
					r->rc = (int)n;
					break;
				}
				if (n == 0)
					break;
				if (p.n_headers)
					snprintf(r->first_header, sizeof(r->first_header), "%.*s=%.*s",
						 (int)p.headers[0].name_len, p.headers[0].name,
						 (int)p.headers[0].value_len, p.headers[0].value);
				start += (size_t)n;
				r->status = p.status;
				if (p.status >= 100 && p.status < 200 && p.status != 101) {
					r->interim++;
					http_resp_init(&p, head);
				}
				continue;
			}
			if (http_resp_done(&p))
				break;
			uint64_t pend = http_resp_payload_pending(&p);
			if (pend) {
				size_t take = pend < avail ? (size_t)pend : avail;
				if (!take)
					break;
				if (r->payload_len + take <= sizeof(r->payload))
					memcpy(r->payload + r->payload_len, buf + start, take);
				r->payload_len += take;
				start += take;
				http_resp_payload_consumed(&p, take);
				continue;
			}
			if (!avail)
				break;
			ssize_t n = http_resp_parse_framing(&p, buf + start, avail, NULL);
			if (n < 0) {
				r->rc = (int)n;
				break;
			}
			if (n == 0 && !http_resp_done(&p))
				break;
			start += (size_t)n;
		}
	}
	if (!r->rc && eof && p.head_done)
		r->rc = http_resp_eof(&p);
	else if (!r->rc && eof && !p.head_done)
		r->rc = -EPROTO;
	r->done = p.head_done && http_resp_done(&p);
	r->keep_alive = p.keep_alive;
	r->body = p.body;
	r->leftover = have - start;
}

/* Parse in one piece, at every single split point and byte by byte; all must agree. */
static void parse_all_ways(const char *in, size_t len, bool head, bool eof, struct result *r)
{
	static struct result other;
	static size_t cuts[1 << 16];

	drive(in, len, NULL, 0, head, eof, r);
	for (size_t c = 1; c < len; c++) {
		drive(in, len, &c, 1, head, eof, &other);
		if (other.rc != r->rc || other.payload_len != r->payload_len ||
		    memcmp(other.payload, r->payload, MIN(r->payload_len, sizeof(r->payload))) ||
		    (!r->rc && (other.done != r->done || other.leftover != r->leftover))) {
			CHECK_FAIL_("split at %zu of \"%.40s...\" gives rc %d payload %zu, whole gives rc %d payload %zu",
				    c, in, other.rc, other.payload_len, r->rc, r->payload_len);
			return;
		}
	}
	check_run_++;
	for (size_t c = 0; c < len && c < ARRAY_SIZE(cuts); c++)
		cuts[c] = c + 1;
	drive(in, len, cuts, MIN(len, ARRAY_SIZE(cuts)), head, eof, &other);
	CHECK_INT(other.rc, r->rc);
	CHECK_U64(other.payload_len, r->payload_len);
	CHECK(other.done == r->done);
}

#define S(lit) lit, sizeof(lit) - 1

static void test_content_length(void)
{
	static struct result r;
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b c \r\n\r\nhello"), false,
		       false, &r);
	CHECK_INT(r.rc, 0);
	CHECK_INT(r.status, 200);
	CHECK(r.done);
	CHECK(r.keep_alive);
	CHECK_INT(r.body, HTTP_BODY_LENGTH);
	CHECK_U64(r.payload_len, 5);
	CHECK(memcmp(r.payload, "hello", 5) == 0);
	CHECK_STR(r.first_header, "Content-Length=5");

	/* Value whitespace is trimmed; header names keep their case. */
	struct http_resp p;
	const char *h = "HTTP/1.1 404 Not Found\r\nx-a:\t b c \t\r\ncontent-length: 0\r\n\r\n";
	http_resp_init(&p, false);
	CHECK_INT(http_resp_parse_head(&p, h, strlen(h), NULL), (ssize_t)strlen(h));
	CHECK_INT(p.n_headers, 2);
	CHECK(p.headers[0].value_len == 3 && memcmp(p.headers[0].value, "b c", 3) == 0);
	CHECK(p.reason_len == 9 && memcmp(p.reason, "Not Found", 9) == 0);
	CHECK(http_resp_done(&p));
	CHECK(http_resp_header(&p, "Content-Length") == &p.headers[1]);
	CHECK(http_resp_header(&p, "X-B") == NULL);

	/* Bytes beyond Content-Length are not payload. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA"), false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK_U64(r.payload_len, 2);
	CHECK_U64(r.leftover, 5);

	/* Truncated body: the end of the stream is an error, not success. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"), false, true, &r);
	CHECK_INT(r.rc, -EPROTO);
	CHECK(!r.done);

	/* Identical duplicates are fine, conflicting ones are not. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
		       false, false, &r);
	CHECK_INT(r.rc, 0);
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"),
		       false, false, &r);
	CHECK_INT(r.rc, -EPROTO);
}

static void test_bad_lengths(void)
{
	static struct result r;
	static const char *bad[] = {
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1,1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		drive(bad[i], strlen(bad[i]), NULL, 0, false, false, &r);
		CHECK_INT(r.rc, -EPROTO);
	}
	/* The largest accepted length: 18 digits. */
	drive(S("HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nab"), NULL, 0, false,
	      false, &r);
	CHECK_INT(r.rc, 0);
	CHECK_U64(r.payload_len, 2);
	CHECK(!r.done);
}

static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "5;foo=bar;q=\"a b\"\r\nhello\r\n"
			      "6 \t;ext\r\n world\r\n"
			      "A\r\n0123456789\r\n"
			      "0\r\nX-Trailer: 1\r\nX-Other: two words\r\n\r\n";

static void test_chunked(void)
{
	static struct result r;
	parse_all_ways(chunked, sizeof(chunked) - 1, false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK(r.done);
	CHECK(r.keep_alive);
	CHECK_INT(r.body, HTTP_BODY_CHUNKED);
	CHECK_U64(r.payload_len, 21);
	CHECK(memcmp(r.payload, "hello world0123456789", 21) == 0);
	CHECK_U64(r.leftover, 0);

	/* No trailers, bare LF line ends, hex in either case, leading zeros. */
	parse_all_ways(S("HTTP/1.1 200 OK\nTransfer-Encoding: Chunked\n\n00a\n0123456789\nF\n"
			 "0123456789abcde\n0\n\n"),
		       false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK(r.done);
	CHECK_U64(r.payload_len, 25);

	/* A chunked body cut short is an error at EOF, even right after a chunk. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"),
		       false, true, &r);
	CHECK_INT(r.rc, -EPROTO);
	CHECK_U64(r.payload_len, 5);

	/* Transfer-Encoding wins over Content-Length. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "1\r\nx\r\n0\r\n\r\n"),
		       false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK(r.done);
	CHECK_U64(r.payload_len, 1);
}

static void test_bad_chunks(void)
{
	static struct result r;
	static const char *bad_proto[] = {
		"zz\r\n",              /* not hex */
		"\r\n",                /* empty size */
		";ext\r\n",            /* extension without size */
		"-1\r\nx\r\n",         /* negative */
		"5\rX\nhello\r\n",     /* lone CR */
		"5 x\r\nhello\r\n",    /* junk after whitespace */
		"5\r\nhelloXX0\r\n\r\n", /* data longer than the size */
		"5;a\x01\r\nhello\r\n",  /* control char in extension */
		"0\r\nno colon\r\n\r\n", /* malformed trailer */
		"0\r\n folded: x\r\n\r\n",
		"0\r\nX: a\rb\r\n\r\n",
	};
	static const char *bad_big[] = {
		"1000000000000000\r\n", /* 16 hex digits: beyond 2^60 */
		"ffffffffffffffffffff\r\n",
	};
	char in[16384];
	const char *hdr = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
	for (size_t i = 0; i < ARRAY_SIZE(bad_proto); i++) {
		snprintf(in, sizeof(in), "%s%s", hdr, bad_proto[i]);
		parse_all_ways(in, strlen(in), false, false, &r);
		if (r.rc != -EPROTO)
			CHECK_FAIL_("chunk case %zu: rc %d", i, r.rc);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad_big); i++) {
		snprintf(in, sizeof(in), "%s%s", hdr, bad_big[i]);
		drive(in, strlen(in), NULL, 0, false, false, &r);
		CHECK_INT(r.rc, -E2BIG);
	}
	/* The largest chunk size: 15 hex digits is accepted (and waits for data). */
	snprintf(in, sizeof(in), "%sfffffffffffffff\r\nabc", hdr);
	drive(in, strlen(in), NULL, 0, false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK_U64(r.payload_len, 3);

	/* An endless chunk extension is cut off at HTTP_RESP_MAX_LINE. */
	size_t n = (size_t)snprintf(in, sizeof(in), "%s5;", hdr);
	memset(in + n, 'a', sizeof(in) - n - 1);
	in[sizeof(in) - 1] = 0;
	drive(in, strlen(in), NULL, 0, false, false, &r);
	CHECK_INT(r.rc, -E2BIG);

	/* Trailers are bounded in total, not just per line. */
	static char big[64 * 1024];
	n = (size_t)snprintf(big, sizeof(big), "%s0\r\n", hdr);
	while (n + 200 < sizeof(big))
		n += (size_t)snprintf(big + n, sizeof(big) - n, "X-T: %0100d\r\n", 1);
	drive(big, n, NULL, 0, false, false, &r);
	CHECK_INT(r.rc, -E2BIG);
}

static void test_close_delimited(void)
{
	static struct result r;
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nabc\r\n0\r\n\r\n"),
		       false, true, &r);
	CHECK_INT(r.rc, 0);
	CHECK(r.done);
	CHECK(!r.keep_alive);
	CHECK_INT(r.body, HTTP_BODY_CLOSE);
	CHECK_U64(r.payload_len, 10);

	/* Without EOF the body is still open. */
	drive(S("HTTP/1.0 200 OK\r\n\r\nabc"), NULL, 0, false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK(!r.done);
	CHECK_U64(r.payload_len, 3);

	/* EOF in the middle of the head is an error. */
	drive(S("HTTP/1.1 200 OK\r\nX: y\r\n"), NULL, 0, false, true, &r);
	CHECK_INT(r.rc, -EPROTO);
}

static void test_no_body(void)
{
	static struct result r;
	/* HEAD: Content-Length describes the resource, no body follows. */
	parse_all_ways(S("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"), true, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK(r.done);
	CHECK(r.keep_alive);
	CHECK_INT(r.body, HTTP_BODY_NONE);

	parse_all_ways(S("HTTP/1.1 204 No Content\r\n\r\n"), false, false, &r);
	CHECK(r.done);
	CHECK(r.keep_alive);
	parse_all_ways(S("HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n"), false, false, &r);
	CHECK(r.done);

	/* Interim responses are skipped; the final one counts. */
	parse_all_ways(S("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
			 "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"),
		       false, false, &r);
	CHECK_INT(r.rc, 0);
	CHECK_INT(r.interim, 2);
	CHECK_INT(r.status, 201);
	CHECK_U64(r.payload_len, 2);

	/* 101 ends HTTP on this connection. */
	parse_all_ways(S("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nraw"),
		       false, false, &r);
	CHECK_INT(r.status, 101);
	CHECK(r.done);
	CHECK(!r.keep_alive);
	CHECK_U64(r.leftover, 3);
}

static void test_keep_alive(void)
{
	static struct result r;
	drive(S("HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n"),
	      NULL, 0, false, false, &r);
	CHECK(!r.keep_alive);
	drive(S("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"), NULL, 0, false, false, &r);
	CHECK(!r.keep_alive);
	drive(S("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"), NULL, 0,
	      false, false, &r);
	CHECK(r.keep_alive);
	CHECK(r.done);
	CHECK(http_list_has_token(S(" a ,\tClose\t, b"), "close"));
	CHECK(!http_list_has_token(S("closed, xclose"), "close"));
}

static void test_garbage(void)
{
	static struct result r;
	static const char *bad[] = {
		"SSH-2.0-OpenSSH\r\n",
		"HTTP/2 200\r\n\r\n",
		"HTTP/1.2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 099 OK\r\n\r\n",
		"HTTP/1.1 600 OK\r\n\r\n",
		"HTTP/1.1 200OK\r\n\r\n",
		"HTTP/1.1 200 O\x01K\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX A: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\n: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nnocolon\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: a\rb\r\n\r\n",
		"HTTP/1.1 200 OK\rX-A: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-A: a\x7f\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		drive(bad[i], strlen(bad[i]), NULL, 0, false, false, &r);
		if (r.rc != -EPROTO)
			CHECK_FAIL_("garbage case %zu: rc %d", i, r.rc);
	}
	/* Garbage is rejected from its first bytes, without waiting for a full head. */
	struct http_resp p;
	const char *err = NULL;
	http_resp_init(&p, false);
	CHECK_INT(http_resp_parse_head(&p, "GET", 3, &err), -EPROTO);
	CHECK(err != NULL);
	http_resp_init(&p, false);
	CHECK_INT(http_resp_parse_head(&p, "HTT", 3, NULL), 0);
}

static void test_limits(void)
{
	static struct result r;
	static char big[HTTP_RESP_MAX_HEAD + 1024];

	/* One oversized header line. */
	size_t n = (size_t)snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(big + n, 'a', sizeof(big) - n);
	drive(big, sizeof(big), NULL, 0, false, false, &r);
	CHECK_INT(r.rc, -E2BIG);

	/* A head of exactly HTTP_RESP_MAX_HEAD bytes is accepted. */
	n = (size_t)snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(big + n, 'a', HTTP_RESP_MAX_HEAD - n - 4);
	memcpy(big + HTTP_RESP_MAX_HEAD - 4, "\r\n\r\n", 4);
	drive(big, HTTP_RESP_MAX_HEAD, NULL, 0, false, true, &r);
	CHECK_INT(r.rc, 0);
	CHECK_INT(r.status, 200);

	/* Too many headers, each small. */
	n = (size_t)snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i <= HTTP_RESP_MAX_HEADERS; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "X-%d: v\r\n", i);
	n += (size_t)snprintf(big + n, sizeof(big) - n, "\r\n");
	drive(big, n, NULL, 0, false, false, &r);
	CHECK_INT(r.rc, -E2BIG);

	/* Exactly HTTP_RESP_MAX_HEADERS is fine. */
	n = (size_t)snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i < HTTP_RESP_MAX_HEADERS; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "X-%d: v\r\n", i);
	n += (size_t)snprintf(big + n, sizeof(big) - n, "Content-Length: 0\r\n\r\n");
	drive(big, n, NULL, 0, false, false, &r);
	CHECK_INT(r.rc, -E2BIG); /* Content-Length is header 65 */
	n -= strlen("Content-Length: 0\r\n\r\n");
	n += (size_t)snprintf(big + n, sizeof(big) - n, "\r\n");
	drive(big, n, NULL, 0, false, true, &r);
	CHECK_INT(r.rc, 0);
}

static int replay_corpus(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		CHECK_FAIL_("open corpus %s: %s", dir, strerror(errno));
		return 0;
	}
	int count = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		static unsigned char data[1 << 20];
		size_t n = fread(data, 1, sizeof(data), f);
		fclose(f);
		LLVMFuzzerTestOneInput(data, n); /* aborts on a violated invariant */
		count++;
	}
	closedir(d);
	return count;
}

int main(int argc, char **argv)
{
	test_content_length();
	test_bad_lengths();
	test_chunked();
	test_bad_chunks();
	test_close_delimited();
	test_no_body();
	test_keep_alive();
	test_garbage();
	test_limits();

	const char *corpus = argc > 1 ? argv[1] : CORPUS_DIR;
	int n = replay_corpus(corpus);
	check_run_++;
	if (n < 5)
		CHECK_FAIL_("corpus %s has only %d inputs", corpus, n);
	return check_summary("upstream_parse");
}
