#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

void line_splitter_init(struct line_splitter *s)
{
	s->len = 0;
	s->after_cr = false;
}

/* Emit the buffered bytes as a line, cutting before a split UTF-8 sequence when the line is long. */
static void emit_full(struct line_splitter *s, line_cb cb, void *arg)
{
	size_t cut = s->len;
	/* Back up over at most 3 continuation bytes to a character boundary. */
	size_t i = s->len;
	int back = 0;
	while (i > 0 && back < 4 && ((unsigned char)s->buf[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i > 0 && back < 4) {
		unsigned char lead = (unsigned char)s->buf[i - 1];
		size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
		if (need > 1 && (size_t)back + 1 < need)
			cut = i - 1;
	}
	if (cut == 0)
		cut = s->len;
	cb(s->buf, cut, arg);
	memmove(s->buf, s->buf + cut, s->len - cut);
	s->len -= cut;
}

void line_splitter_feed(struct line_splitter *s, const char *data, size_t n, line_cb cb, void *arg)
{
	const char *p = data, *end = data + n;
	while (p < end) {
		if (s->after_cr) {
			s->after_cr = false;
			if (*p == '\n') {
				p++;
				continue;
			}
		}
		/* Fast path: the next terminator within the data. */
		const char *q = p;
		while (q < end && *q != '\n' && *q != '\r')
			q++;
		size_t chunk = (size_t)(q - p);
		while (chunk > 0) {
			if (s->len == 0 && q < end && chunk <= STREAM_LINE_MAX) {
				/* Whole line available and nothing buffered: no copy. */
				break;
			}
			if (s->len == STREAM_LINE_MAX) {
				/* Full, and the line goes on: cut it here. (A full buffer whose line
				 * ends right after is one ordinary line, not a piece plus an empty one.) */
				emit_full(s, cb, arg);
				continue;
			}
			size_t room = STREAM_LINE_MAX - s->len;
			size_t take = chunk < room ? chunk : room;
			memcpy(s->buf + s->len, p, take);
			s->len += take;
			p += take;
			chunk -= take;
		}
		if (q == end)
			break;
		if (s->len == 0) {
			cb(p, (size_t)(q - p), arg);
		} else {
			cb(s->buf, s->len, arg);
			s->len = 0;
		}
		s->after_cr = (*q == '\r');
		p = q + 1;
	}
}

void line_splitter_flush(struct line_splitter *s, line_cb cb, void *arg)
{
	if (s->len > 0)
		cb(s->buf, s->len, arg);
	s->len = 0;
	s->after_cr = false;
}

void sbuf_clear(struct sbuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int sbuf_reserve(struct sbuf *b, size_t extra)
{
	if (b->len + extra <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

int sbuf_add(struct sbuf *b, const void *p, size_t n)
{
	if (n == 0)
		return 0; /* b->data may still be NULL: no memcpy on it, even of 0 bytes */
	if (sbuf_reserve(b, n) < 0)
		return -ENOMEM;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

static int sbuf_adds(struct sbuf *b, const char *s)
{
	return sbuf_add(b, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when it is invalid. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0];
	size_t need;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 2;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 3;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
	    (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return need;
}

int sbuf_add_json_string(struct sbuf *b, const char *s, size_t n)
{
	/* Worst case: every byte becomes \ufffd (6 bytes as an escape, 3 raw). */
	if (sbuf_reserve(b, n * 6 + 2) < 0)
		return -ENOMEM;
	char *o = b->data + b->len;
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	*o++ = '"';
	while (p < end) {
		unsigned char c = *p;
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			*o++ = (char)c;
			p++;
			continue;
		}
		if (c < 0x80) {
			*o++ = '\\';
			switch (c) {
			case '"': *o++ = '"'; break;
			case '\\': *o++ = '\\'; break;
			case '\n': *o++ = 'n'; break;
			case '\r': *o++ = 'r'; break;
			case '\t': *o++ = 't'; break;
			case '\b': *o++ = 'b'; break;
			case '\f': *o++ = 'f'; break;
			default:
				o += sprintf(o, "u%04x", c);
			}
			p++;
			continue;
		}
		size_t k = utf8_seq(p, (size_t)(end - p));
		if (k == 0) {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			p++;
		} else {
			memcpy(o, p, k);
			o += k;
			p += k;
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->data);
	return 0;
}

static int add_tail(struct sbuf *b, int64_t ts)
{
	char t[48];
	int k = snprintf(t, sizeof(t), "\"timestamp\":%" PRId64 "}\n\n", ts);
	return sbuf_add(b, t, (size_t)k);
}

int stream_event_text(struct sbuf *b, const char *type, const char *text, size_t len, int64_t ts)
{
	if (sbuf_adds(b, "{\"type\":") < 0 || sbuf_add_json_string(b, type, strlen(type)) < 0 ||
	    sbuf_adds(b, ",\"text\":") < 0 || sbuf_add_json_string(b, text, len) < 0 ||
	    sbuf_adds(b, ",") < 0)
		return -ENOMEM;
	return add_tail(b, ts);
}

int stream_event_line(struct sbuf *b, const char *type, const char *line, size_t len, int64_t ts)
{
	if (len == 0)
		return stream_event_text(b, type, "\n", 1, ts);
	return stream_event_text(b, type, line, len, ts);
}

int stream_event_complete(struct sbuf *b, int64_t execution_time_ms, int64_t ts)
{
	char t[64];
	int k = snprintf(t, sizeof(t), "{\"type\":\"execution_complete\",\"execution_time\":%" PRId64 ",",
			 execution_time_ms < 0 ? 0 : execution_time_ms);
	if (sbuf_add(b, t, (size_t)k) < 0)
		return -ENOMEM;
	return add_tail(b, ts);
}

int stream_event_error(struct sbuf *b, const char *ename, const char *evalue, int64_t ts)
{
	char t[48];
	int k = snprintf(t, sizeof(t), "\"timestamp\":%" PRId64 ",", ts);
	if (sbuf_adds(b, "{\"type\":\"error\",") < 0 || sbuf_add(b, t, (size_t)k) < 0 ||
	    sbuf_adds(b, "\"error\":{\"ename\":") < 0 ||
	    sbuf_add_json_string(b, ename, strlen(ename)) < 0 || sbuf_adds(b, ",\"evalue\":") < 0 ||
	    sbuf_add_json_string(b, evalue, strlen(evalue)) < 0 ||
	    sbuf_adds(b, ",\"traceback\":[]}}\n\n") < 0)
		return -ENOMEM;
	return 0;
}

/* ----- the transcript ----- */

static size_t varint_put(char *t, uint64_t v)
{
	size_t k = 0;
	do {
		t[k] = (char)(v & 0x7f);
		v >>= 7;
		if (v)
			t[k] |= (char)0x80;
		k++;
	} while (v);
	return k;
}

int tr_varint_add(struct sbuf *b, uint64_t v)
{
	char t[10];
	return sbuf_add(b, t, varint_put(t, v));
}

/* Read a varint at *p (below end); false when it is cut short or longer than 64 bits. */
static bool varint_get(const unsigned char **p, const unsigned char *end, uint64_t *ret)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 64; shift += 7) {
		if (*p >= end)
			return false;
		unsigned char c = *(*p)++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*ret = v;
			return true;
		}
	}
	return false;
}

size_t tr_header(char buf[TR_HEADER_MAX], enum tr_kind kind, int64_t ts, int64_t ts_base, size_t len)
{
	uint64_t d = (uint64_t)ts - (uint64_t)ts_base;
	uint64_t zz = (d << 1) ^ (uint64_t)((int64_t)d >> 63);
	buf[0] = (char)kind;
	size_t k = 1 + varint_put(buf + 1, zz);
	return k + varint_put(buf + k, len);
}

int tr_record_add(struct sbuf *b, enum tr_kind kind, int64_t ts, int64_t ts_base, const void *payload,
		  size_t len)
{
	char h[TR_HEADER_MAX];
	if (sbuf_add(b, h, tr_header(h, kind, ts, ts_base, len)) < 0 || sbuf_add(b, payload, len) < 0)
		return -ENOMEM;
	return 0;
}

ssize_t tr_record_parse(const char *buf, size_t n, int64_t ts_base, struct tr_record *ret)
{
	const unsigned char *p = (const unsigned char *)buf, *end = p + n;
	uint64_t zz, len;
	if (n == 0)
		return 0;
	unsigned char kind = *p++;
	if (kind < TR_INIT || kind > TR_UNSTORED)
		return -EINVAL;
	if (!varint_get(&p, end, &zz) || !varint_get(&p, end, &len))
		return p == end && n < TR_HEADER_MAX ? 0 : -EINVAL;
	if (len > TR_PAYLOAD_MAX)
		return -EINVAL;
	if ((uint64_t)(end - p) < len)
		return 0;
	uint64_t d = (zz >> 1) ^ (uint64_t)-(int64_t)(zz & 1);
	ret->kind = kind;
	ret->ts = (int64_t)((uint64_t)ts_base + d);
	ret->payload = (const char *)p;
	ret->len = (size_t)len;
	return (ssize_t)((const char *)p + len - buf);
}

int tr_marker(enum tr_kind kind, uint64_t v, char *buf, size_t len)
{
	if (kind == TR_CUT)
		return snprintf(buf, len,
				"[corral-execd: output cap of %" PRIu64 " bytes reached; the rest of the output is dropped]",
				v);
	if (kind == TR_UNSTORED)
		return snprintf(buf, len,
				"[corral-execd: the output could not be stored (%s); the rest of the output is dropped]",
				v > 0 && v < 4096 ? strerror((int)v) : "write error");
	return snprintf(buf, len, "[corral-execd: %" PRIu64 " bytes of output dropped]", v);
}

int tr_record_events(const struct tr_record *r, struct sbuf *out)
{
	const unsigned char *p = (const unsigned char *)r->payload, *end = p + r->len;
	uint64_t v;
	char msg[192];
	switch (r->kind) {
	case TR_INIT:
		return stream_event_text(out, "init", r->payload, r->len, r->ts);
	case TR_STDOUT:
	case TR_STDERR: {
		const char *type = r->kind == TR_STDOUT ? "stdout" : "stderr";
		const char *s = r->payload, *e = s + r->len;
		while (s < e) {
			const char *nl = memchr(s, '\n', (size_t)(e - s));
			if (!nl)
				return -EINVAL;
			if (stream_event_line(out, type, s, (size_t)(nl - s), r->ts) < 0)
				return -ENOMEM;
			s = nl + 1;
		}
		return 0;
	}
	case TR_COMPLETE:
		if (!varint_get(&p, end, &v) || v > INT64_MAX)
			return -EINVAL;
		return stream_event_complete(out, (int64_t)v, r->ts);
	case TR_ERROR: {
		char code[32];
		if (r->len >= sizeof(code))
			return -EINVAL;
		memcpy(code, r->payload, r->len);
		code[r->len] = '\0';
		return stream_event_error(out, "CommandExecError", code, r->ts);
	}
	case TR_CUT:
	case TR_DROPPED:
	case TR_UNSTORED: {
		if (!varint_get(&p, end, &v))
			return -EINVAL;
		int k = tr_marker(r->kind, v, msg, sizeof(msg));
		return stream_event_text(out, "stderr", msg, (size_t)k, r->ts);
	}
	}
	return -EINVAL;
}
