/*
 * Incremental parser for HTTP/1.x responses read by the reverse proxy (revproxy.h) from execd or
 * from a server inside the sandbox. Both run in the sandbox, so every byte is untrusted: each limit
 * below is enforced, nothing is allocated, and any malformed input is a clear error, not a guess.
 *
 * It is pure (no I/O, no libevent) so it can be tested byte by byte and fuzzed. Use:
 *   1. http_resp_init(p, is_head_request)
 *   2. http_resp_parse_head(p, buf, len) on the bytes received so far until it returns > 0
 *      (the head's length); status and headers point into buf and stay valid while buf does.
 *      For an interim 1xx response (not 101), call http_resp_init again and parse the next head.
 *   3. Body: loop while !http_resp_done(p):
 *        n = http_resp_payload_pending(p): when > 0, the next min(n, available) bytes are payload;
 *            hand them on and report them with http_resp_payload_consumed(p, count).
 *        otherwise feed framing bytes (chunk-size lines, CRLFs, trailers) to
 *            http_resp_parse_framing(p, buf, len), which consumes up to the next payload byte.
 *      At end of stream call http_resp_eof(p): 0 when that ends the body (close-delimited), else
 *      -EPROTO (truncated).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HTTP_RESP_MAX_HEAD (32 * 1024)   /* status line + headers + final CRLF */
#define HTTP_RESP_MAX_HEADERS 64
#define HTTP_RESP_MAX_LINE 4096          /* a chunk-size line (with extensions) or a trailer line */
#define HTTP_RESP_MAX_TRAILERS (16 * 1024)
#define HTTP_RESP_MAX_CHUNK_HEX 15       /* chunk sizes below 2^60 */

struct http_header {
	const char *name;
	size_t name_len;
	const char *value; /* without surrounding whitespace */
	size_t value_len;
};

enum http_body_kind {
	HTTP_BODY_NONE,    /* HEAD, 1xx, 204, 304 */
	HTTP_BODY_LENGTH,  /* Content-Length */
	HTTP_BODY_CHUNKED, /* Transfer-Encoding: chunked */
	HTTP_BODY_CLOSE,   /* until the connection closes */
};

struct http_resp {
	/* results of the head */
	int minor;  /* HTTP/1.<minor> */
	int status; /* 100..599 */
	const char *reason;
	size_t reason_len;
	struct http_header headers[HTTP_RESP_MAX_HEADERS];
	unsigned n_headers;
	enum http_body_kind body;
	uint64_t content_length;
	bool keep_alive; /* the connection may carry another request after this response */

	/* parser state */
	bool head_request;
	bool head_done;
	size_t scan; /* how far the head was searched for its end */
	int state;
	uint64_t pending; /* payload bytes left in this chunk or body */
	size_t line_len;  /* bytes of the current framing line */
	size_t trailer_len;
	bool line_saw_cr;
	bool line_has_colon;
	unsigned chunk_digits;
	uint64_t chunk_size;
};

void http_resp_init(struct http_resp *p, bool head_request);

/*
 * Parse the head from buf[0..len), the bytes received so far (always from the response's first
 * byte). Returns the head's length when complete, 0 when more bytes are needed, or -EPROTO when
 * the bytes are not a valid response head, -E2BIG when it exceeds HTTP_RESP_MAX_HEAD or
 * HTTP_RESP_MAX_HEADERS. When err is non-NULL it gets a static description of the error.
 */
ssize_t http_resp_parse_head(struct http_resp *p, const char *buf, size_t len, const char **err);

/* Payload bytes that may be taken next without framing (UINT64_MAX for close-delimited). */
uint64_t http_resp_payload_pending(const struct http_resp *p);
void http_resp_payload_consumed(struct http_resp *p, uint64_t n);

/*
 * Consume framing from buf[0..len) up to the next payload byte or the end of the message.
 * Returns the number of bytes consumed, or a negative errno (-EPROTO, -E2BIG) with err set.
 */
ssize_t http_resp_parse_framing(struct http_resp *p, const char *buf, size_t len, const char **err);

/* True when the whole message (head, payload, framing and trailers) has been consumed. */
bool http_resp_done(const struct http_resp *p);

/* The stream ended: 0 if that completes the message, -EPROTO if the message is truncated. */
int http_resp_eof(struct http_resp *p);

/* The first header named name (case-insensitive), or NULL. */
const struct http_header *http_resp_header(const struct http_resp *p, const char *name);

/* Does a comma-separated header value contain token (case-insensitive)? */
bool http_list_has_token(const char *value, size_t len, const char *token);
