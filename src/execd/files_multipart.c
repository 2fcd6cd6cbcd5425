#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "files_multipart.h"
#include "shared/macro.h"

static int fail(struct multipart_parser *p, const char *fmt, ...) _printf_(2, 3);
static int fail(struct multipart_parser *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, sizeof(p->err), fmt, ap);
	va_end(ap);
	p->state = MP_FAILED;
	return -EINVAL;
}

static bool is_lwsp(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_tspecial(char c)
{
	return strchr("()<>@,;:\\\"/[]?=", c) != NULL;
}

static bool is_token_char(char c)
{
	return (unsigned char)c > 0x20 && (unsigned char)c < 0x7f && !is_tspecial(c);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

typedef int (*param_cb)(void *ud, const char *key, const char *value);

/*
 * Parse a header value of the form `type *( ";" key "=" (token | quoted-string) )` (RFC 2045),
 * storing the lower-cased type and calling cb for every parameter with its decoded value.
 */
static int parse_params(const char *s, char *type, size_t typelen, param_cb cb, void *ud, char *err,
			size_t errlen)
{
	size_t n = 0;
	while (is_lwsp(*s))
		s++;
	while (*s && *s != ';' && !is_lwsp(*s)) {
		if (n + 1 >= typelen) {
			snprintf(err, errlen, "media type is too long");
			return -EINVAL;
		}
		type[n++] = (char)tolower((unsigned char)*s++);
	}
	type[n] = '\0';
	for (;;) {
		while (is_lwsp(*s))
			s++;
		if (!*s)
			return 0;
		if (*s != ';') {
			snprintf(err, errlen, "expected ';' before parameter");
			return -EINVAL;
		}
		s++;
		while (is_lwsp(*s))
			s++;
		if (!*s)
			return 0; /* a trailing ';' is tolerated */
		char key[64], val[MULTIPART_PARAM_MAX];
		size_t kn = 0, vn = 0;
		while (is_token_char(*s) || *s == '*') {
			if (kn + 1 >= sizeof(key)) {
				snprintf(err, errlen, "parameter name is too long");
				return -EINVAL;
			}
			key[kn++] = (char)tolower((unsigned char)*s++);
		}
		key[kn] = '\0';
		while (is_lwsp(*s))
			s++;
		if (kn == 0 || *s != '=') {
			snprintf(err, errlen, "malformed parameter");
			return -EINVAL;
		}
		s++;
		while (is_lwsp(*s))
			s++;
		if (*s == '"') {
			s++;
			while (*s && *s != '"') {
				if (*s == '\\' && s[1])
					s++;
				if (vn + 1 >= sizeof(val)) {
					snprintf(err, errlen, "parameter '%s' is too long", key);
					return -EINVAL;
				}
				val[vn++] = *s++;
			}
			if (*s != '"') {
				snprintf(err, errlen, "unterminated quoted value of parameter '%s'",
					 key);
				return -EINVAL;
			}
			s++;
		} else {
			while (*s && *s != ';' && !is_lwsp(*s)) {
				if (vn + 1 >= sizeof(val)) {
					snprintf(err, errlen, "parameter '%s' is too long", key);
					return -EINVAL;
				}
				val[vn++] = *s++;
			}
		}
		val[vn] = '\0';
		int r = cb(ud, key, val);
		if (r < 0) {
			snprintf(err, errlen, "bad value of parameter '%s'", key);
			return r;
		}
	}
}

static int boundary_cb(void *ud, const char *key, const char *value)
{
	char *out = ud; /* MULTIPART_BOUNDARY_MAX + 1 bytes */
	if (strcmp(key, "boundary") != 0)
		return 0;
	if (strlen(value) > MULTIPART_BOUNDARY_MAX)
		return -EINVAL;
	strcpy(out, value);
	return 0;
}

static int check_boundary(const char *b)
{
	size_t n = strlen(b);
	if (n == 0 || n > MULTIPART_BOUNDARY_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)b[i] < 0x20 || b[i] == 0x7f)
			return -EINVAL;
	return 0;
}

int multipart_boundary(const char *content_type, char *out, size_t outlen, char *err, size_t errlen)
{
	char type[128], b[MULTIPART_BOUNDARY_MAX + 1] = "";
	if (!content_type || !*content_type) {
		snprintf(err, errlen,
			 "Content-Type must be multipart/form-data; the header is missing");
		return -EINVAL;
	}
	int r = parse_params(content_type, type, sizeof(type), boundary_cb, b, err, errlen);
	if (r < 0)
		return r;
	if (strcmp(type, "multipart/form-data") != 0) {
		snprintf(err, errlen, "Content-Type must be multipart/form-data, not '%s'", type);
		return -EINVAL;
	}
	if (check_boundary(b) < 0) {
		snprintf(err, errlen,
			 "Content-Type needs a boundary parameter of 1 to %d printable characters",
			 MULTIPART_BOUNDARY_MAX);
		return -EINVAL;
	}
	if (strlen(b) >= outlen) {
		snprintf(err, errlen, "boundary is too long");
		return -EINVAL;
	}
	strcpy(out, b);
	return 0;
}

int multipart_init(struct multipart_parser *p, const char *boundary,
		   const struct multipart_callbacks *cb, void *ud)
{
	memset(p, 0, offsetof(struct multipart_parser, line));
	p->err[0] = '\0';
	p->cb = cb;
	p->ud = ud;
	if (!boundary || check_boundary(boundary) < 0)
		return fail(p, "invalid multipart boundary");
	p->blen = strlen(boundary);
	memcpy(p->boundary, boundary, p->blen + 1);
	p->state = MP_PREAMBLE;
	return 0;
}

/* Decode an RFC 5987 ext-value: charset'language'percent-encoded. */
static int decode_ext_value(const char *v, char *out, size_t outlen)
{
	const char *q1 = strchr(v, '\'');
	const char *q2 = q1 ? strchr(q1 + 1, '\'') : NULL;
	if (!q2)
		return -EINVAL;
	size_t n = 0;
	for (const char *s = q2 + 1; *s; s++) {
		char c = *s;
		if (c == '%') {
			int h = hexval(s[1]), l = h >= 0 ? hexval(s[2]) : -1;
			if (l < 0)
				return -EINVAL;
			c = (char)(h * 16 + l);
			s += 2;
		}
		if (c == '\0' || n + 1 >= outlen)
			return -EINVAL;
		out[n++] = c;
	}
	out[n] = '\0';
	return 0;
}

struct disp {
	struct multipart_part *part;
	bool ext_filename;
};

static int disposition_cb(void *ud, const char *key, const char *value)
{
	struct disp *d = ud;
	if (strcmp(key, "name") == 0) {
		snprintf(d->part->name, sizeof(d->part->name), "%s", value);
	} else if (strcmp(key, "filename") == 0) {
		if (!d->ext_filename)
			snprintf(d->part->filename, sizeof(d->part->filename), "%s", value);
	} else if (strcmp(key, "filename*") == 0) {
		if (decode_ext_value(value, d->part->filename, sizeof(d->part->filename)) < 0)
			return -EINVAL;
		d->ext_filename = true;
	}
	return 0;
}

static int header_line(struct multipart_parser *p, char *line)
{
	if (is_lwsp(line[0]))
		return 0; /* obsolete folding: continuation lines are ignored */
	char *colon = strchr(line, ':');
	if (!colon || colon == line)
		return fail(p, "part %u: malformed header line", p->nparts);
	*colon = '\0';
	char *value = colon + 1;
	while (is_lwsp(*value))
		value++;
	size_t vn = strlen(value);
	while (vn && is_lwsp(value[vn - 1]))
		value[--vn] = '\0';
	if (strcasecmp(line, "Content-Disposition") == 0) {
		char type[64], err[160];
		struct multipart_part tmp = {0};
		struct disp d = {.part = &tmp};
		if (parse_params(value, type, sizeof(type), disposition_cb, &d, err, sizeof(err)) <
		    0)
			return fail(p, "part %u: bad Content-Disposition: %s", p->nparts, err);
		/* Like Go's Part.FormName: only form-data parts have a form name. */
		if (strcmp(type, "form-data") == 0)
			memcpy(p->part.name, tmp.name, sizeof(tmp.name));
		memcpy(p->part.filename, tmp.filename, sizeof(tmp.filename));
		p->part.has_filename = tmp.filename[0] != '\0';
	} else if (strcasecmp(line, "Content-Type") == 0) {
		snprintf(p->part.content_type, sizeof(p->part.content_type), "%s", value);
	}
	return 0;
}

static int begin_part(struct multipart_parser *p, uint64_t data_start)
{
	p->part.data_start = data_start;
	p->part.index = p->nparts++;
	p->emitted = 0;
	p->held = 0;
	p->state = MP_DATA;
	if (p->cb && p->cb->part_begin) {
		int r = p->cb->part_begin(p->ud, &p->part);
		if (r)
			return fail(p, "part %u rejected", p->part.index), r;
	}
	return 0;
}

static void start_headers(struct multipart_parser *p)
{
	if (p->nparts >= MULTIPART_PARTS_MAX) {
		fail(p, "more than %d parts", MULTIPART_PARTS_MAX);
		return;
	}
	memset(&p->part, 0, sizeof(p->part));
	p->linelen = 0;
	p->hdr_total = 0;
	p->state = MP_HEADERS;
}

static int emit(struct multipart_parser *p, const char *data, size_t len)
{
	if (!len)
		return 0;
	p->emitted += len;
	if (p->cb && p->cb->part_data) {
		int r = p->cb->part_data(p->ud, data, len);
		if (r)
			return fail(p, "part %u data rejected", p->part.index), r;
	}
	return 0;
}

static int delimiter_found(struct multipart_parser *p)
{
	p->held = 0;
	p->pad = 0;
	p->state = MP_AFTER_DELIM;
	if (p->cb && p->cb->part_end) {
		int r = p->cb->part_end(p->ud, p->part.data_start + p->emitted);
		if (r)
			return fail(p, "part %u rejected", p->part.index), r;
	}
	return 0;
}

/* Scan part data for the delimiter; *used is how much of d was consumed. */
static int data_feed(struct multipart_parser *p, const char *d, size_t n, size_t *used)
{
	size_t dl = p->dlen;
	int r;
	if (p->held) {
		size_t need = dl - p->held, k = MIN(need, n);
		if (memcmp(d, p->delim + p->held, k) == 0) {
			if (k == need) {
				*used = k;
				p->held = 0;
				p->state = MP_DELIM_PEEK;
				return 0;
			}
			p->held += k;
			*used = n;
			return 0;
		}
		/*
		 * Not a delimiter after all: the held bytes are data. The delimiter's first byte
		 * (CR or LF) occurs nowhere else in it, so no later delimiter can start inside
		 * them.
		 */
		size_t h = p->held;
		p->held = 0;
		r = emit(p, p->delim, h);
		if (r)
			return r;
	}
	const char *hit = memmem(d, n, p->delim, dl);
	if (hit) {
		r = emit(p, d, (size_t)(hit - d));
		if (r)
			return r;
		*used = (size_t)(hit - d) + dl;
		p->state = MP_DELIM_PEEK;
		return 0;
	}
	/* Hold back a tail that may be the start of a delimiter completed by the next piece. */
	size_t j = n;
	for (size_t t = n > dl - 1 ? n - (dl - 1) : 0; t < n; t++) {
		if (d[t] == p->delim[0] && memcmp(d + t, p->delim, n - t) == 0) {
			j = t;
			break;
		}
	}
	r = emit(p, d, j);
	if (r)
		return r;
	p->held = n - j;
	*used = n;
	return 0;
}

/* A complete preamble line (without its "\n"): is it the first boundary? */
static int preamble_line(struct multipart_parser *p, uint64_t next_offset)
{
	char *l = p->line;
	size_t n = p->linelen;
	bool crlf = n && l[n - 1] == '\r';
	if (crlf)
		n--;
	if (n < 2 + p->blen || l[0] != '-' || l[1] != '-' || memcmp(l + 2, p->boundary, p->blen))
		return 0;
	size_t i = 2 + p->blen;
	if (n - i >= 2 && l[i] == '-' && l[i + 1] == '-') {
		/* "--boundary--" first: an empty body with no parts. */
		p->state = MP_EPILOGUE;
		return 0;
	}
	while (i < n && is_lwsp(l[i]))
		i++;
	if (i != n)
		return 0;
	size_t k = 0;
	if (crlf)
		p->delim[k++] = '\r';
	p->delim[k++] = '\n';
	p->delim[k++] = '-';
	p->delim[k++] = '-';
	memcpy(p->delim + k, p->boundary, p->blen);
	p->dlen = k + p->blen;
	(void)next_offset;
	start_headers(p);
	return p->state == MP_FAILED ? -EINVAL : 0;
}

int multipart_feed(struct multipart_parser *p, const char *data, size_t len)
{
	uint64_t base = p->offset;
	size_t i = 0;
	int r;
	p->offset += len;
	while (i < len) {
		switch (p->state) {
		case MP_FAILED:
			return -EINVAL;
		case MP_EPILOGUE:
			return 0;
		case MP_PREAMBLE_SKIP: {
			const char *nl = memchr(data + i, '\n', len - i);
			if (!nl)
				return 0;
			i = (size_t)(nl - data) + 1;
			p->linelen = 0;
			p->state = MP_PREAMBLE;
			break;
		}
		case MP_PREAMBLE: {
			char c = data[i++];
			if (c == '\n') {
				r = preamble_line(p, base + i);
				if (r)
					return r;
				p->linelen = 0;
				break;
			}
			/* Longer than any boundary line may be (with its padding): skip it. */
			if (p->linelen >= p->blen + 4 + MULTIPART_PAD_MAX) {
				p->state = MP_PREAMBLE_SKIP;
				break;
			}
			p->line[p->linelen++] = c;
			break;
		}
		case MP_HEADERS: {
			char c = data[i++];
			if (++p->hdr_total > MULTIPART_HEADER_MAX)
				return fail(p, "part %u: headers exceed %d bytes", p->nparts,
					    MULTIPART_HEADER_MAX);
			if (c != '\n') {
				p->line[p->linelen++] = c; /* bounded by hdr_total */
				break;
			}
			size_t n = p->linelen;
			if (n && p->line[n - 1] == '\r')
				n--;
			p->line[n] = '\0';
			p->linelen = 0;
			if (n == 0) {
				r = begin_part(p, base + i);
				if (r)
					return r;
				break;
			}
			r = header_line(p, p->line);
			if (r)
				return r;
			break;
		}
		case MP_DATA: {
			size_t used = 0;
			r = data_feed(p, data + i, len - i, &used);
			if (r)
				return r;
			i += used;
			break;
		}
		case MP_DELIM_PEEK: {
			/* Decide on the next byte, which is left for the state it leads to. */
			char c = data[i];
			if (c == '-') {
				i++;
				p->state = MP_DELIM_PEEK_DASH;
			} else if (is_lwsp(c) || c == '\r' || c == '\n') {
				r = delimiter_found(p);
			} else {
				p->state = MP_DATA;
				r = emit(p, p->delim, p->dlen);
			}
			if (r)
				return r;
			break;
		}
		case MP_DELIM_PEEK_DASH:
			if (data[i] == '-') {
				i++;
				r = delimiter_found(p);
				if (r)
					return r;
				p->state = MP_EPILOGUE;
			} else {
				p->state = MP_DATA;
				r = emit(p, p->delim, p->dlen);
				if (r == 0)
					r = emit(p, "-", 1);
				if (r)
					return r;
			}
			break;
		case MP_AFTER_DELIM:
		case MP_AFTER_PAD: {
			char c = data[i++];
			if (c == '-' && p->state == MP_AFTER_DELIM) {
				p->state = MP_AFTER_DASH;
			} else if (is_lwsp(c)) {
				if (++p->pad > MULTIPART_PAD_MAX)
					return fail(p, "too much padding after a boundary");
				p->state = MP_AFTER_PAD;
			} else if (c == '\r') {
				p->state = MP_AFTER_CR;
			} else if (c == '\n') {
				start_headers(p);
				if (p->state == MP_FAILED)
					return -EINVAL;
			} else {
				return fail(p, "unexpected data after a boundary");
			}
			break;
		}
		case MP_AFTER_DASH:
			if (data[i++] != '-')
				return fail(p, "unexpected data after a boundary");
			p->state = MP_EPILOGUE;
			break;
		case MP_AFTER_CR:
			if (data[i++] != '\n')
				return fail(p, "boundary line does not end with CRLF");
			start_headers(p);
			if (p->state == MP_FAILED)
				return -EINVAL;
			break;
		}
	}
	return p->state == MP_FAILED ? -EINVAL : 0;
}

int multipart_finish(struct multipart_parser *p)
{
	switch (p->state) {
	case MP_EPILOGUE:
		return 0;
	case MP_FAILED:
		return -EINVAL;
	case MP_PREAMBLE:
	case MP_PREAMBLE_SKIP:
		/* A last line without "\n" may still be the closing "--boundary--". */
		if (p->state == MP_PREAMBLE && p->linelen) {
			preamble_line(p, p->offset);
			if (p->state == MP_EPILOGUE)
				return 0;
		}
		return fail(p, "no multipart boundary found in the body");
	case MP_HEADERS:
		return fail(p, "body ends inside the headers of part %u", p->nparts);
	case MP_DATA:
	case MP_DELIM_PEEK_DASH:
		return fail(p, "body ends inside part %u (no closing boundary)", p->part.index);
	case MP_DELIM_PEEK:
	case MP_AFTER_DASH:
	case MP_AFTER_DELIM:
	case MP_AFTER_PAD:
	case MP_AFTER_CR:
		return fail(p, "body ends right after a boundary (no closing \"--\")");
	}
	return -EINVAL;
}
