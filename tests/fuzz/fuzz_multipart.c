/*
 * Fuzz target for the multipart/form-data parser of POST /files/upload.
 *
 * Input: the first line is the Content-Type value (the boundary comes from it, as in the server);
 * the rest is the body. The body is parsed twice: in one piece and in pieces whose sizes come from
 * the input itself, and both runs must agree on the result, the number of parts and every part's
 * data offsets and bytes (a boundary may straddle pieces anywhere). Reported offsets must lie
 * inside the body and match the bytes passed to part_data.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/files_multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	const uint8_t *body;
	size_t body_len;
	unsigned parts;
	uint64_t sum;	  /* checksum of all data bytes, in order */
	uint64_t bytes;	  /* data bytes seen */
	uint64_t start;	  /* current part */
	uint64_t in_part; /* bytes of the current part */
	uint64_t offsets; /* checksum of (start, end) pairs */
};

static int on_begin(void *ud, const struct multipart_part *p)
{
	struct run *r = ud;
	if (p->data_start > r->body_len || p->index != r->parts)
		abort();
	if (strlen(p->name) >= sizeof(p->name) || strlen(p->filename) >= sizeof(p->filename))
		abort();
	r->parts++;
	r->start = p->data_start;
	r->in_part = 0;
	return 0;
}

static int on_data(void *ud, const char *d, size_t len)
{
	struct run *r = ud;
	/* The bytes handed over are exactly the body's bytes at the part's offset. */
	if (r->start + r->in_part + len > r->body_len ||
	    memcmp(r->body + r->start + r->in_part, d, len) != 0)
		abort();
	for (size_t i = 0; i < len; i++)
		r->sum = r->sum * 31 + (unsigned char)d[i];
	r->in_part += len;
	r->bytes += len;
	return 0;
}

static int on_end(void *ud, uint64_t end)
{
	struct run *r = ud;
	if (end != r->start + r->in_part || end > r->body_len)
		abort();
	r->offsets = r->offsets * 1000003 + r->start * 7 + end;
	return 0;
}

static const struct multipart_callbacks cbs = {on_begin, on_data, on_end};

static int parse(const char *boundary, const uint8_t *body, size_t len, const uint8_t *sizes,
		 size_t nsizes, struct run *r, struct multipart_parser *p)
{
	memset(r, 0, sizeof(*r));
	r->body = body;
	r->body_len = len;
	int rc = multipart_init(p, boundary, &cbs, r);
	size_t off = 0, k = 0;
	while (rc == 0 && off < len) {
		size_t n = nsizes ? (size_t)sizes[k++ % nsizes] % 17 + 1 : len;
		if (n > len - off)
			n = len - off;
		/* An exact-size copy so an overread of the piece is caught by ASan. */
		char *piece = malloc(n);
		if (!piece)
			abort();
		memcpy(piece, body + off, n);
		rc = multipart_feed(p, piece, n);
		free(piece);
		off += n;
	}
	if (rc == 0)
		rc = multipart_finish(p);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl || nl - data > 1024 || size > (1u << 20))
		return 0;
	char ct[1025], boundary[MULTIPART_BOUNDARY_MAX + 1], err[256];
	memcpy(ct, data, (size_t)(nl - data));
	ct[nl - data] = '\0';
	if (multipart_boundary(ct, boundary, sizeof(boundary), err, sizeof(err)) < 0)
		return 0;
	const uint8_t *body = nl + 1;
	size_t len = size - (size_t)(nl - data) - 1;

	struct multipart_parser *p = malloc(sizeof(*p));
	if (!p)
		abort();
	struct run a, b;
	int ra = parse(boundary, body, len, NULL, 0, &a, p);
	int rb = parse(boundary, body, len, body, len < 64 ? len : 64, &b, p);
	if (ra != rb || a.parts != b.parts || a.sum != b.sum || a.bytes != b.bytes ||
	    (ra == 0 && a.offsets != b.offsets))
		abort();
	free(p);
	return 0;
}
