/*
 * Unit tests for src/execd/files_multipart.c: boundaries from Content-Type, bodies fed in every
 * possible split (a delimiter straddling two pieces), LF-only bodies, missing closing boundaries,
 * limits, and the offsets the upload handler uses to write part data without copying it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "execd/files_multipart.h"
#include "shared/macro.h"

#define MAXP 16

struct got {
	int n;
	char name[MAXP][64];
	char filename[MAXP][64];
	bool has_filename[MAXP];
	char ctype[MAXP][64];
	char data[MAXP][512];
	size_t len[MAXP];
	uint64_t start[MAXP], end[MAXP];
	int ends;
};

static int on_begin(void *ud, const struct multipart_part *p)
{
	struct got *g = ud;
	if (g->n >= MAXP)
		return -E2BIG;
	snprintf(g->name[g->n], 64, "%s", p->name);
	snprintf(g->filename[g->n], 64, "%s", p->filename);
	snprintf(g->ctype[g->n], 64, "%s", p->content_type);
	g->has_filename[g->n] = p->has_filename;
	g->start[g->n] = p->data_start;
	g->len[g->n] = 0;
	g->n++;
	return 0;
}

static int on_data(void *ud, const char *d, size_t len)
{
	struct got *g = ud;
	int i = g->n - 1;
	if (g->len[i] + len > sizeof(g->data[i]))
		return -E2BIG;
	memcpy(g->data[i] + g->len[i], d, len);
	g->len[i] += len;
	return 0;
}

static int on_end(void *ud, uint64_t end)
{
	struct got *g = ud;
	g->end[g->n - 1] = end;
	g->ends++;
	return 0;
}

static const struct multipart_callbacks cbs = {on_begin, on_data, on_end};

/* Parse body cut at the given points (sorted offsets, ncuts of them). */
static int parse_cuts(const char *boundary, const char *body, size_t len, const size_t *cuts,
		      int ncuts, struct got *g, struct multipart_parser *p)
{
	memset(g, 0, sizeof(*g));
	int r = multipart_init(p, boundary, &cbs, g);
	size_t prev = 0;
	for (int i = 0; i <= ncuts && r == 0; i++) {
		size_t at = i < ncuts ? cuts[i] : len;
		/* An exact-size heap copy of each piece so ASan sees any overread. */
		char *piece = malloc(at - prev + 1);
		memcpy(piece, body + prev, at - prev);
		r = multipart_feed(p, piece, at - prev);
		free(piece);
		prev = at;
	}
	if (r == 0)
		r = multipart_finish(p);
	return r;
}

static struct multipart_parser parser;

static int parse(const char *boundary, const char *body, struct got *g)
{
	return parse_cuts(boundary, body, strlen(body), NULL, 0, g, &parser);
}

static const char body1[] =
    "preamble line\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
    "Content-Type: application/json\r\n"
    "\r\n"
    "{\"path\":\"/tmp/a\"}\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n"
    "\r\n"
    "line1\r\n--XyZnot-a-delimiter\r\n-\r\n--Xy\r\n"
    "--XyZ--\r\n"
    "epilogue --XyZ garbage";

static void check_body1(const struct got *g)
{
	CHECK_INT(g->n, 2);
	CHECK_INT(g->ends, 2);
	CHECK_STR(g->name[0], "metadata");
	CHECK_STR(g->filename[0], "metadata");
	CHECK(g->has_filename[0]);
	CHECK_STR(g->ctype[0], "application/json");
	CHECK_INT(g->len[0], 17);
	CHECK(memcmp(g->data[0], "{\"path\":\"/tmp/a\"}", 17) == 0);
	CHECK_STR(g->name[1], "file");
	CHECK_STR(g->filename[1], "a.bin");
	const char *want = "line1\r\n--XyZnot-a-delimiter\r\n-\r\n--Xy";
	CHECK_INT(g->len[1], strlen(want));
	CHECK(memcmp(g->data[1], want, strlen(want)) == 0);
	/* Offsets point at exactly the data inside the body. */
	for (int i = 0; i < g->n; i++) {
		CHECK_U64(g->end[i] - g->start[i], g->len[i]);
		CHECK(memcmp(body1 + g->start[i], g->data[i], g->len[i]) == 0);
	}
}

static void test_every_split(void)
{
	struct got g;
	size_t len = strlen(body1);
	CHECK_INT(parse("XyZ", body1, &g), 0);
	check_body1(&g);
	/* One cut anywhere, then two cuts anywhere: every delimiter byte is split once. */
	unsigned bad = 0;
	for (size_t a = 1; a < len; a++) {
		size_t cuts[1] = {a};
		if (parse_cuts("XyZ", body1, len, cuts, 1, &g, &parser) != 0 || g.n != 2 ||
		    g.len[1] != strlen("line1\r\n--XyZnot-a-delimiter\r\n-\r\n--Xy"))
			bad++;
		else
			check_body1(&g);
	}
	CHECK_INT(bad, 0);
	for (size_t a = 1; a < len; a += 3)
		for (size_t b = a + 1; b < len; b += 2) {
			size_t cuts[2] = {a, b};
			if (parse_cuts("XyZ", body1, len, cuts, 2, &g, &parser) != 0)
				bad++;
			else
				check_body1(&g);
		}
	CHECK_INT(bad, 0);
	/* Byte by byte. */
	size_t *all = malloc(len * sizeof(*all));
	for (size_t i = 0; i < len - 1; i++)
		all[i] = i + 1;
	CHECK_INT(parse_cuts("XyZ", body1, len, all, (int)len - 1, &g, &parser), 0);
	check_body1(&g);
	free(all);
}

static void test_boundary_param(void)
{
	char b[MULTIPART_BOUNDARY_MAX + 1], err[256];
	CHECK_INT(
	    multipart_boundary("multipart/form-data; boundary=abc", b, sizeof(b), err, sizeof(err)),
	    0);
	CHECK_STR(b, "abc");
	CHECK_INT(multipart_boundary("Multipart/Form-Data;boundary=\"a b;c\"", b, sizeof(b), err,
				     sizeof(err)),
		  0);
	CHECK_STR(b, "a b;c");
	CHECK_INT(multipart_boundary("multipart/form-data; charset=utf-8; boundary=----WebKit123",
				     b, sizeof(b), err, sizeof(err)),
		  0);
	CHECK_STR(b, "----WebKit123");
	CHECK_INT(multipart_boundary("multipart/form-data; boundary=\"q\\\"x\"", b, sizeof(b), err,
				     sizeof(err)),
		  0);
	CHECK_STR(b, "q\"x");
	CHECK_INT(multipart_boundary("application/json", b, sizeof(b), err, sizeof(err)), -EINVAL);
	CHECK_INT(multipart_boundary("multipart/form-data", b, sizeof(b), err, sizeof(err)),
		  -EINVAL);
	CHECK_INT(
	    multipart_boundary("multipart/form-data; boundary=", b, sizeof(b), err, sizeof(err)),
	    -EINVAL);
	CHECK_INT(multipart_boundary("multipart/form-data; boundary=\"abc", b, sizeof(b), err,
				     sizeof(err)),
		  -EINVAL);
	CHECK_INT(multipart_boundary(NULL, b, sizeof(b), err, sizeof(err)), -EINVAL);
	char longb[400] = "multipart/form-data; boundary=";
	memset(longb + strlen(longb), 'x', 250);
	CHECK_INT(multipart_boundary(longb, b, sizeof(b), err, sizeof(err)), -EINVAL);
	struct got g;
	CHECK_INT(multipart_init(&parser, "", &cbs, &g), -EINVAL);
	CHECK_INT(multipart_init(&parser, "a\r\nb", &cbs, &g), -EINVAL);
}

static void test_lf_only(void)
{
	struct got g;
	const char *body = "--b\n"
			   "Content-Disposition: form-data; name=file; filename=x\n"
			   "\n"
			   "one\r\ntwo\n"
			   "--b\n"
			   "Content-Disposition: form-data; name=\"v\"\n"
			   "\n"
			   "\n"
			   "--b--\n";
	CHECK_INT(parse("b", body, &g), 0);
	CHECK_INT(g.n, 2);
	CHECK_STR(g.filename[0], "x");
	CHECK_INT(g.len[0], 8);
	CHECK(memcmp(g.data[0], "one\r\ntwo", 8) == 0);
	CHECK_STR(g.name[1], "v");
	CHECK(!g.has_filename[1]);
	CHECK_INT(g.len[1], 0); /* the empty line before the delimiter is the delimiter's LF */

	/* In CRLF mode a bare "\n--b" is data, not a delimiter (as in Go). */
	const char *crlf = "--b\r\n\r\nx\n--b\r\n--b--";
	CHECK_INT(parse("b", crlf, &g), 0);
	CHECK_INT(g.n, 1);
	CHECK_INT(g.len[0], 5);
	CHECK(memcmp(g.data[0], "x\n--b", 5) == 0);
}

static void test_edges(void)
{
	struct got g;
	/* Padding after a boundary, no final CRLF, epilogue without newline. */
	CHECK_INT(parse("b", "--b \t\r\n\r\ndata\r\n--b--", &g), 0);
	CHECK_INT(g.n, 1);
	CHECK_INT(g.len[0], 4);
	/* Empty data, zero parts. */
	CHECK_INT(parse("b", "--b\r\n\r\n\r\n--b--\r\n", &g), 0);
	CHECK_INT(g.len[0], 0);
	CHECK_INT(parse("b", "--b--\r\n", &g), 0);
	CHECK_INT(g.n, 0);
	CHECK_INT(parse("b", "--b--", &g), 0);
	/* Data containing CR and LF runs right before the delimiter. */
	CHECK_INT(parse("b", "--b\r\n\r\n\r\r\n\r\n\r\n--b--", &g), 0);
	CHECK_INT(g.len[0], 5);
	CHECK(memcmp(g.data[0], "\r\r\n\r\n", 5) == 0);
	/* filename* (RFC 5987) and a Content-Disposition that is not form-data. */
	CHECK_INT(
	    parse("b",
		  "--b\r\nContent-Disposition: form-data; name=\"f\"; "
		  "filename*=UTF-8''%E2%82%AC.txt\r\n\r\n\r\n--b\r\n"
		  "Content-Disposition: attachment; name=\"g\"; filename=\"y\"\r\n\r\n\r\n--b--",
		  &g),
	    0);
	CHECK_INT(g.n, 2);
	CHECK_STR(g.filename[0], "\xe2\x82\xac.txt");
	CHECK_STR(g.name[1], "");
	CHECK(g.has_filename[1]);
	/* Header names are case-insensitive; an empty filename is not a file part. */
	CHECK_INT(
	    parse("b",
		  "--b\r\ncontent-disposition: FORM-DATA; NAME=m; filename=\"\"\r\n\r\n\r\n--b--",
		  &g),
	    0);
	CHECK_STR(g.name[0], "m");
	CHECK(!g.has_filename[0]);
}

static void test_errors(void)
{
	struct got g;
	/* Truncated bodies are errors, never a short last part. */
	CHECK_INT(parse("b", "", &g), -EINVAL);
	CHECK_INT(parse("b", "no boundary here\r\n", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\nContent-Type: x\r\n", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n\r\npartial data", &g), -EINVAL);
	CHECK(strstr(parser.err, "closing boundary") != NULL);
	CHECK_INT(parse("b", "--b\r\n\r\ndata\r\n--b", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n\r\ndata\r\n--b-", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n\r\ndata\r\n--b\r", &g), -EINVAL);
	/* Malformed header and garbage after a boundary. */
	CHECK_INT(parse("b", "--b\r\nno colon\r\n\r\n--b--", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n\r\nx\r\n--bX\r\n--b--", &g), 0); /* "--bX" is data */
	CHECK_INT(parse("b", "--b\r\n\r\nx\r\n--b X\r\n--b--", &g), -EINVAL);
	CHECK_INT(parse("b", "--b\r\n\r\nx\r\n--b-x", &g), -EINVAL);
	CHECK_INT(parse("b",
			"--b\r\nContent-Disposition: form-data; name=\"unterminated\r\n\r\n--b--",
			&g),
		  -EINVAL);
	/* Feeding after a failure keeps failing. */
	CHECK_INT(multipart_feed(&parser, "--b--", 5), -EINVAL);

	/* Header bytes per part are bounded. */
	size_t n = MULTIPART_HEADER_MAX + 100;
	char *big = malloc(n + 64);
	strcpy(big, "--b\r\nX-Big: ");
	memset(big + strlen(big), 'a', n);
	strcpy(big + 12 + n, "\r\n\r\n--b--");
	CHECK_INT(parse("b", big, &g), -EINVAL);
	CHECK(strstr(parser.err, "headers exceed") != NULL);
	free(big);

	/* Number of parts is bounded. */
	struct multipart_parser *p = malloc(sizeof(*p));
	CHECK_INT(multipart_init(p, "b", NULL, NULL), 0);
	int r = multipart_feed(p, "--b\r\n", 5);
	for (int i = 0; i < MULTIPART_PARTS_MAX + 5 && r == 0; i++)
		r = multipart_feed(p, "\r\n\r\n--b\r\n", 9);
	CHECK_INT(r, -EINVAL);
	CHECK(strstr(p->err, "parts") != NULL);
	free(p);

	/* A long preamble line (not a boundary) is skipped without buffering it. */
	size_t pl = 100000;
	char *pre = malloc(pl + 64);
	memset(pre, '-', pl);
	strcpy(pre + pl, "\r\n--b\r\n\r\nok\r\n--b--");
	CHECK_INT(parse("b", pre, &g), 0);
	CHECK_INT(g.n, 1);
	CHECK_INT(g.len[0], 2);
	free(pre);
}

/* Large data in uneven pieces: everything arrives, nothing is held back at the end. */
static void test_large(void)
{
	size_t dlen = 3u << 20;
	const char *head =
	    "--0123456789abcdef\r\n"
	    "Content-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n";
	const char *tail = "\r\n--0123456789abcdef--\r\n";
	size_t hl = strlen(head), tl = strlen(tail), len = hl + dlen + tl;
	char *body = malloc(len);
	memcpy(body, head, hl);
	for (size_t i = 0; i < dlen; i++)
		body[hl + i] = (char)("\r\n-0123456789abcdef"[(i * 7 + i / 3) % 19]);
	memcpy(body + hl + dlen, tail, tl);

	struct multipart_parser *p = malloc(sizeof(*p));
	uint64_t start = 0, end = 0, seen = 0;
	struct got g;
	memset(&g, 0, sizeof(g));
	struct multipart_callbacks c = {on_begin, NULL, on_end};
	CHECK_INT(multipart_init(p, "0123456789abcdef", &c, &g), 0);
	size_t off = 0, step = 1;
	int r = 0;
	while (off < len && r == 0) {
		size_t n = MIN(step, len - off);
		r = multipart_feed(p, body + off, n);
		off += n;
		step = step * 3 + 1;
		if (step > 100000)
			step = 7;
	}
	CHECK_INT(r, 0);
	CHECK_INT(multipart_finish(p), 0);
	start = g.start[0];
	end = g.end[0];
	seen = end - start;
	CHECK_INT(g.n, 1);
	CHECK_U64(start, hl);
	CHECK_U64(seen, dlen);
	free(p);
	free(body);
}

int main(void)
{
	test_every_split();
	test_boundary_param();
	test_lf_only();
	test_edges();
	test_errors();
	test_large();
	return check_summary("execd_files_multipart");
}
