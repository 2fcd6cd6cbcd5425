/*
 * An incremental multipart/form-data parser (RFC 7578 over RFC 2046) for POST /files/upload.
 *
 * It is fed the body in pieces of any size (evhttp hands over the body as a chain of buffers, and
 * a boundary may straddle two of them) and never copies part data: part_data() receives pointers
 * into the caller's pieces. Like Go's mime/multipart, the line ending of the first boundary line
 * ("\r\n" or a bare "\n") is the one every later delimiter must use, and a delimiter only counts
 * when "--", a space, a tab or a newline follows it ("\r\n--boundaryX" is data). Every internal
 * buffer is bounded: boundary length, header bytes per part, number of parts. A body that ends
 * before the closing "--boundary--" is an error in multipart_finish(), never a silently short last
 * part.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MULTIPART_BOUNDARY_MAX 200 /* RFC 2046 says 70; be lenient */
#define MULTIPART_HEADER_MAX 16384 /* header bytes of one part */
#define MULTIPART_PARTS_MAX 10000
#define MULTIPART_PARAM_MAX 1024 /* one decoded header parameter (name, filename) */
#define MULTIPART_PAD_MAX 256	 /* spaces and tabs after a boundary */

struct multipart_part {
	char name[MULTIPART_PARAM_MAX];	    /* form field name ("" when absent or not form-data) */
	char filename[MULTIPART_PARAM_MAX]; /* decoded filename or filename* ("" when absent) */
	bool has_filename;		    /* a non-empty filename: a "file" part in Go's terms */
	char content_type[MULTIPART_PARAM_MAX];
	uint64_t data_start; /* body offset of the part's first data byte */
	unsigned index;	     /* 0-based position among all parts */
};

struct multipart_callbacks {
	/* Headers of a part are complete. A nonzero (negative errno) return aborts the parse. */
	int (*part_begin)(void *ud, const struct multipart_part *part);
	/* Some data of the current part; len may be 0. */
	int (*part_data)(void *ud, const char *data, size_t len);
	/* The current part ended; data_end is the body offset just past its last data byte. */
	int (*part_end)(void *ud, uint64_t data_end);
};

enum multipart_state {
	MP_PREAMBLE,
	MP_PREAMBLE_SKIP, /* a preamble line too long to be a boundary */
	MP_HEADERS,
	MP_DATA,
	MP_DELIM_PEEK,	    /* delimiter matched: is it followed by "--", LWSP or a newline? */
	MP_DELIM_PEEK_DASH, /* ... it was followed by one '-' */
	MP_AFTER_DELIM,
	MP_AFTER_DASH,
	MP_AFTER_PAD,
	MP_AFTER_CR,
	MP_EPILOGUE,
	MP_FAILED,
};

struct multipart_parser {
	enum multipart_state state;
	const struct multipart_callbacks *cb;
	void *ud;
	char boundary[MULTIPART_BOUNDARY_MAX + 1];
	size_t blen;
	char delim[MULTIPART_BOUNDARY_MAX + 5]; /* nl "--" boundary */
	size_t dlen;
	size_t held; /* bytes at the end of the last piece that match delim[0..held) */
	uint64_t offset;
	unsigned nparts;
	size_t pad;
	size_t hdr_total;
	size_t linelen;
	char line[MULTIPART_HEADER_MAX + 1];
	struct multipart_part part;
	uint64_t emitted; /* data bytes of the current part passed to part_data */
	char err[256];
};

/*
 * Extract the boundary from a Content-Type value. It must be multipart/form-data with a boundary
 * parameter (quoted or not) of 1..MULTIPART_BOUNDARY_MAX characters without control characters.
 * Returns 0, or -EINVAL with a reason in err.
 */
int multipart_boundary(const char *content_type, char *out, size_t outlen, char *err,
		       size_t errlen);

/* -EINVAL (reason in p->err) when the boundary is empty, too long or has control characters. */
int multipart_init(struct multipart_parser *p, const char *boundary,
		   const struct multipart_callbacks *cb, void *ud);
/* Feed the next len bytes. 0, or a negative errno once the body is known to be malformed. */
int multipart_feed(struct multipart_parser *p, const char *data, size_t len);
/* The body is complete: 0 when the closing boundary was seen, else -EINVAL. */
int multipart_finish(struct multipart_parser *p);
