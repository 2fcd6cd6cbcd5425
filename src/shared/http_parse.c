/*
 * HTTP/1.x response parser: see http_parse.h. Strict where leniency would let an upstream smuggle
 * framing past us (lone CR, obs-fold, conflicting lengths, unknown transfer codings), lenient only
 * where every client is (bare LF line ends, a missing reason phrase).
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "shared/macro.h"

#include "http_parse.h"

enum {
	S_HEAD,
	S_BODY_LENGTH,
	S_BODY_CLOSE,
	S_CHUNK_SIZE,
	S_CHUNK_BWS, /* whitespace after the size, before ';' or the line end */
	S_CHUNK_EXT,
	S_CHUNK_DATA,
	S_CHUNK_DATA_END,
	S_TRAILER,
	S_DONE,
};

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value / reason-phrase characters: HTAB, SP, VCHAR, obs-text */
static bool is_text(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void http_resp_init(struct http_resp *p, bool head_request)
{
	/* Only the fields the parser reads before writing are reset: headers[] stays as is. */
	p->minor = 0;
	p->status = 0;
	p->reason = NULL;
	p->reason_len = 0;
	p->n_headers = 0;
	p->body = HTTP_BODY_NONE;
	p->content_length = 0;
	p->keep_alive = false;
	p->head_request = head_request;
	p->head_done = false;
	p->scan = 0;
	p->state = S_HEAD;
	p->pending = 0;
	p->line_len = 0;
	p->trailer_len = 0;
	p->line_saw_cr = false;
	p->line_has_colon = false;
	p->chunk_digits = 0;
	p->chunk_size = 0;
}

static bool ieq(const char *a, size_t alen, const char *b)
{
	return alen == strlen(b) && strncasecmp(a, b, alen) == 0;
}

bool http_list_has_token(const char *v, size_t len, const char *token)
{
	size_t i = 0;
	while (i < len) {
		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t start = i;
		while (i < len && v[i] != ',')
			i++;
		size_t end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (end > start && ieq(v + start, end - start, token))
			return true;
	}
	return false;
}

const struct http_header *http_resp_header(const struct http_resp *p, const char *name)
{
	for (unsigned i = 0; i < p->n_headers; i++)
		if (ieq(p->headers[i].name, p->headers[i].name_len, name))
			return &p->headers[i];
	return NULL;
}

#define FAIL(code, msg)                                                                            \
	do {                                                                                       \
		if (err)                                                                           \
			*err = (msg);                                                              \
		return -(code);                                                                    \
	} while (0)

/* One line of the head, without its line end; a CR inside it is an error. */
static int check_line(const char *s, size_t n)
{
	return memchr(s, '\r', n) ? -EPROTO : 0;
}

static ssize_t parse_status_line(struct http_resp *p, const char *s, size_t n, const char **err)
{
	if (check_line(s, n) < 0)
		FAIL(EPROTO, "CR inside the status line");
	if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ')
		FAIL(EPROTO, "status line is not HTTP/1.0 or HTTP/1.1");
	p->minor = s[7] - '0';
	for (int i = 9; i < 12; i++)
		if (s[i] < '0' || s[i] > '9')
			FAIL(EPROTO, "status code is not three digits");
	p->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
	if (p->status < 100 || p->status > 599)
		FAIL(EPROTO, "status code out of range");
	if (n > 12 && s[12] != ' ')
		FAIL(EPROTO, "no space after the status code");
	p->reason = n > 13 ? s + 13 : s + n;
	p->reason_len = n > 13 ? n - 13 : 0;
	for (size_t i = 0; i < p->reason_len; i++)
		if (!is_text((unsigned char)p->reason[i]))
			FAIL(EPROTO, "control character in the reason phrase");
	return 0;
}

static ssize_t parse_header_line(struct http_resp *p, const char *s, size_t n, const char **err)
{
	if (check_line(s, n) < 0)
		FAIL(EPROTO, "CR inside a header line");
	if (s[0] == ' ' || s[0] == '\t')
		FAIL(EPROTO, "obsolete header line folding");
	size_t i = 0;
	while (i < n && is_tchar((unsigned char)s[i]))
		i++;
	if (i == 0 || i == n || s[i] != ':')
		FAIL(EPROTO, "malformed header name");
	if (p->n_headers >= HTTP_RESP_MAX_HEADERS)
		FAIL(E2BIG, "too many response headers");
	struct http_header *h = &p->headers[p->n_headers++];
	h->name = s;
	h->name_len = i;
	i++;
	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	size_t end = n;
	while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t'))
		end--;
	for (size_t j = i; j < end; j++)
		if (!is_text((unsigned char)s[j]))
			FAIL(EPROTO, "control character in a header value");
	h->value = s + i;
	h->value_len = end - i;
	return 0;
}

static ssize_t parse_content_length(const struct http_header *h, uint64_t *ret, const char **err)
{
	if (h->value_len == 0)
		FAIL(EPROTO, "empty Content-Length");
	if (h->value_len > 18)
		FAIL(EPROTO, "Content-Length too large");
	uint64_t v = 0;
	for (size_t i = 0; i < h->value_len; i++) {
		char c = h->value[i];
		if (c < '0' || c > '9')
			FAIL(EPROTO, "Content-Length is not a non-negative decimal number");
		v = v * 10 + (uint64_t)(c - '0');
	}
	*ret = v;
	return 0;
}

/* Decide framing and persistence from the parsed headers. */
static ssize_t head_semantics(struct http_resp *p, const char **err)
{
	bool have_cl = false, have_te = false, conn_close = false, conn_keep_alive = false;
	uint64_t cl = 0;

	for (unsigned i = 0; i < p->n_headers; i++) {
		const struct http_header *h = &p->headers[i];
		if (ieq(h->name, h->name_len, "Content-Length")) {
			uint64_t v;
			ssize_t r = parse_content_length(h, &v, err);
			if (r < 0)
				return r;
			if (have_cl && v != cl)
				FAIL(EPROTO, "conflicting Content-Length headers");
			have_cl = true;
			cl = v;
		} else if (ieq(h->name, h->name_len, "Transfer-Encoding")) {
			/* Only plain chunked: relaying other codings would need us to re-frame them. */
			if (have_te || !ieq(h->value, h->value_len, "chunked"))
				FAIL(EPROTO, "unsupported Transfer-Encoding");
			have_te = true;
		} else if (ieq(h->name, h->name_len, "Connection")) {
			conn_close |= http_list_has_token(h->value, h->value_len, "close");
			conn_keep_alive |= http_list_has_token(h->value, h->value_len, "keep-alive");
		}
	}
	if (have_te && p->minor == 0)
		FAIL(EPROTO, "Transfer-Encoding in an HTTP/1.0 response");

	if (p->head_request || p->status < 200 || p->status == 204 || p->status == 304) {
		p->body = HTTP_BODY_NONE;
		p->state = S_DONE;
	} else if (have_te) {
		p->body = HTTP_BODY_CHUNKED;
		p->state = S_CHUNK_SIZE;
	} else if (have_cl) {
		p->body = HTTP_BODY_LENGTH;
		p->content_length = cl;
		p->pending = cl;
		p->state = cl ? S_BODY_LENGTH : S_DONE;
	} else {
		p->body = HTTP_BODY_CLOSE;
		p->pending = UINT64_MAX;
		p->state = S_BODY_CLOSE;
	}
	p->keep_alive = p->minor == 1 ? !conn_close : (conn_keep_alive && !conn_close);
	if (p->body == HTTP_BODY_CLOSE || p->status == 101)
		p->keep_alive = false;
	return 0;
}

ssize_t http_resp_parse_head(struct http_resp *p, const char *buf, size_t len, const char **err)
{
	if (p->state != S_HEAD)
		FAIL(EINVAL, "head already parsed");

	/* Reject garbage as soon as it shows, not after HTTP_RESP_MAX_HEAD bytes. */
	if (memcmp(buf, "HTTP/1.", MIN(len, 7)) != 0)
		FAIL(EPROTO, "response does not start with HTTP/1.");

	/* Find the empty line that ends the head: LF (CR) LF. */
	size_t end = 0, limit = len < HTTP_RESP_MAX_HEAD ? len : HTTP_RESP_MAX_HEAD;
	size_t i = p->scan;
	for (; i < limit; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 >= limit)
			break;
		if (buf[i + 1] == '\n') {
			end = i + 2;
			break;
		}
		if (buf[i + 1] == '\r') {
			if (i + 2 >= limit)
				break;
			if (buf[i + 2] == '\n') {
				end = i + 3;
				break;
			}
		}
	}
	if (end == 0) {
		if (len >= HTTP_RESP_MAX_HEAD)
			FAIL(E2BIG, "response head too large");
		p->scan = i;
		return 0;
	}

	/* Split into lines; the last line is the empty one. */
	size_t pos = 0;
	bool first = true;
	for (;;) {
		const char *nl = memchr(buf + pos, '\n', end - pos);
		size_t n = (size_t)(nl - (buf + pos));
		size_t next = pos + n + 1;
		if (n > 0 && buf[pos + n - 1] == '\r')
			n--;
		if (n == 0) {
			if (first)
				FAIL(EPROTO, "empty status line");
			break;
		}
		ssize_t r = first ? parse_status_line(p, buf + pos, n, err)
				  : parse_header_line(p, buf + pos, n, err);
		if (r < 0)
			return r;
		first = false;
		pos = next;
	}
	ssize_t r = head_semantics(p, err);
	if (r < 0)
		return r;
	p->head_done = true;
	return (ssize_t)end;
}

uint64_t http_resp_payload_pending(const struct http_resp *p)
{
	switch (p->state) {
	case S_BODY_LENGTH:
	case S_BODY_CLOSE:
	case S_CHUNK_DATA:
		return p->pending;
	default:
		return 0;
	}
}

void http_resp_payload_consumed(struct http_resp *p, uint64_t n)
{
	if (p->state == S_BODY_CLOSE || n == 0)
		return;
	if (n > p->pending)
		n = p->pending; /* caller bug; never run past the framing */
	p->pending -= n;
	if (p->pending == 0)
		p->state = p->state == S_BODY_LENGTH ? S_DONE : S_CHUNK_DATA_END;
}

static void start_line(struct http_resp *p, int state)
{
	p->state = state;
	p->line_len = 0;
	p->line_saw_cr = false;
	p->line_has_colon = false;
}

ssize_t http_resp_parse_framing(struct http_resp *p, const char *buf, size_t len, const char **err)
{
	size_t i = 0;
	for (; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];
		switch (p->state) {
		case S_BODY_LENGTH:
		case S_BODY_CLOSE:
		case S_CHUNK_DATA:
		case S_DONE:
			return (ssize_t)i;
		case S_HEAD:
			FAIL(EINVAL, "head not parsed yet");
		default:
			break;
		}

		/* Every remaining state reads a line: CR only directly before LF. */
		if (p->line_saw_cr && c != '\n')
			FAIL(EPROTO, "CR not followed by LF in chunked framing");
		if (++p->line_len > HTTP_RESP_MAX_LINE)
			FAIL(E2BIG, "chunk-size or trailer line too long");
		if (c == '\r') {
			p->line_saw_cr = true;
			continue;
		}
		bool eol = c == '\n';

		switch (p->state) {
		case S_CHUNK_SIZE: {
			int v = hexval(c);
			if (v >= 0) {
				if (++p->chunk_digits > HTTP_RESP_MAX_CHUNK_HEX)
					FAIL(E2BIG, "chunk size too large");
				p->chunk_size = (p->chunk_size << 4) | (uint64_t)v;
				break;
			}
			if (p->chunk_digits == 0)
				FAIL(EPROTO, "chunk size is not hexadecimal");
			if (c == ' ' || c == '\t') {
				p->state = S_CHUNK_BWS;
				break;
			}
			if (c == ';') {
				p->state = S_CHUNK_EXT;
				break;
			}
			if (!eol)
				FAIL(EPROTO, "chunk size is not hexadecimal");
			goto size_line_done;
		}
		case S_CHUNK_BWS:
			if (c == ' ' || c == '\t')
				break;
			if (c == ';') {
				p->state = S_CHUNK_EXT;
				break;
			}
			if (!eol)
				FAIL(EPROTO, "garbage after the chunk size");
			goto size_line_done;
		case S_CHUNK_EXT:
			if (!eol) {
				if (!is_text(c))
					FAIL(EPROTO, "control character in a chunk extension");
				break;
			}
		size_line_done:
			if (p->chunk_size == 0) {
				start_line(p, S_TRAILER);
			} else {
				p->pending = p->chunk_size;
				p->state = S_CHUNK_DATA;
			}
			p->chunk_size = 0;
			p->chunk_digits = 0;
			break;
		case S_CHUNK_DATA_END:
			if (!eol)
				FAIL(EPROTO, "chunk data not followed by CRLF");
			start_line(p, S_CHUNK_SIZE);
			break;
		case S_TRAILER:
			if (eol) {
				if (p->line_len == (p->line_saw_cr ? 2u : 1u)) {
					p->state = S_DONE;
					return (ssize_t)(i + 1);
				}
				if (!p->line_has_colon)
					FAIL(EPROTO, "malformed trailer line");
				start_line(p, S_TRAILER);
				break;
			}
			if (++p->trailer_len > HTTP_RESP_MAX_TRAILERS)
				FAIL(E2BIG, "trailers too large");
			if (p->line_len == 1 && (c == ' ' || c == '\t'))
				FAIL(EPROTO, "obsolete trailer line folding");
			if (!is_text(c))
				FAIL(EPROTO, "control character in a trailer");
			if (c == ':')
				p->line_has_colon = true;
			else if (!p->line_has_colon && !is_tchar(c))
				FAIL(EPROTO, "malformed trailer name");
			break;
		}
		if (eol) {
			p->line_len = 0;
			p->line_saw_cr = false;
		}
	}
	return (ssize_t)i;
}

bool http_resp_done(const struct http_resp *p)
{
	return p->state == S_DONE;
}

int http_resp_eof(struct http_resp *p)
{
	if (p->state == S_BODY_CLOSE)
		p->state = S_DONE;
	return p->state == S_DONE ? 0 : -EPROTO;
}
