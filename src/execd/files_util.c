#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files_util.h"
#include "shared/macro.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

int files_mode_decode(long long v, mode_t *ret)
{
	if (v < 0 || v > 7777)
		return -EINVAL;
	mode_t m = 0;
	int shift = 0;
	for (long long x = v; x; x /= 10, shift += 3) {
		int d = (int)(x % 10);
		if (d > 7)
			return -EINVAL;
		m |= (mode_t)d << shift;
	}
	*ret = m;
	return 0;
}

int files_mode_encode(mode_t m)
{
	int v = 0, mul = 1;
	m &= 0777;
	for (; m; m >>= 3, mul *= 10)
		v += (int)(m & 7) * mul;
	return v;
}

static const char *skip_sp(const char *s, const char *end)
{
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	return s;
}

/* Digits only in [s, e) (already trimmed), at most INT64_MAX. */
static int parse_u63(const char *s, const char *e, uint64_t *ret)
{
	if (s == e)
		return -EINVAL;
	uint64_t v = 0;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (v > (UINT64_C(0x7fffffffffffffff) - (uint64_t)(*s - '0')) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*ret = v;
	return 0;
}

int files_parse_range(const char *h, uint64_t size, struct files_range *ret)
{
	bool found = false;
	if (!h || strncmp(h, "bytes=", 6) != 0)
		return -EINVAL;
	const char *p = h + 6;
	for (;;) {
		const char *comma = strchr(p, ',');
		const char *end = comma ? comma : p + strlen(p);
		const char *s = skip_sp(p, end), *e = end;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (s < e) {
			const char *dash = memchr(s, '-', (size_t)(e - s));
			if (!dash)
				return -EINVAL;
			const char *a_end = dash, *b = skip_sp(dash + 1, e);
			while (a_end > s && (a_end[-1] == ' ' || a_end[-1] == '\t'))
				a_end--;
			uint64_t start, length, x, y;
			if (a_end == s) {
				if (parse_u63(b, e, &x) < 0)
					return -EINVAL;
				start = size - MIN(x, size);
				length = size - start;
			} else {
				if (parse_u63(s, a_end, &x) < 0)
					return -EINVAL;
				start = x;
				if (b == e) {
					length = x < size ? size - x : 0;
				} else {
					if (parse_u63(b, e, &y) < 0 || y < x)
						return -EINVAL;
					length = y - x + 1;
				}
			}
			if (start < size && !found) {
				if (length > size - start)
					length = size - start;
				ret->start = start;
				ret->length = length;
				found = true;
			}
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	return found ? 0 : -ERANGE;
}

/* ---- glob ---- */

/* Every input bounds its own work: see files_util.h for the limits and why. */
struct files_glob {
	size_t n;	 /* brace-free alternatives */
	size_t bytes;	 /* their lengths together */
	uint64_t budget; /* matching steps left */
	char *alt[GLOB_ALTS_MAX];
};

static size_t utf8_len(const char *s)
{
	unsigned char c = (unsigned char)*s;
	size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
	for (size_t i = 1; i < n; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			return 1;
	return n;
}

static uint32_t utf8_rune(const char *s, size_t *ret_len)
{
	size_t n = utf8_len(s);
	unsigned char c = (unsigned char)*s;
	uint32_t r = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
	for (size_t i = 1; i < n; i++)
		r = (r << 6) | ((unsigned char)s[i] & 0x3f);
	*ret_len = n;
	return r;
}

/* End of the class starting at p ('['): pointer to its ']' or NULL when malformed. */
static const char *class_end(const char *p)
{
	p++;
	if (*p == '!' || *p == '^')
		p++;
	if (*p == ']' || !*p)
		return NULL; /* empty class */
	while (*p && *p != ']') {
		if (*p == '\\') {
			if (!p[1])
				return NULL;
			p++;
		}
		p += utf8_len(p);
	}
	return *p == ']' ? p : NULL;
}

/* Match one rune of name against the class [p, end]; p points at '['. */
static bool class_match(const char *p, const char *end, uint32_t rune)
{
	p++;
	bool negate = *p == '!' || *p == '^';
	if (negate)
		p++;
	bool matched = false;
	while (p < end) {
		size_t n;
		if (*p == '\\')
			p++;
		uint32_t lo = utf8_rune(p, &n), hi = lo;
		p += n;
		if (*p == '-' && p + 1 < end) {
			p++;
			if (*p == '\\')
				p++;
			hi = utf8_rune(p, &n);
			p += n;
		}
		if (lo <= rune && rune <= hi)
			matched = true;
	}
	return matched != negate;
}

/*
 * Match a brace-free pattern of length plen: 1, 0, or -E2BIG when *budget runs out. A '*'
 * backtracks linearly, so one pass costs at most plen steps and there are at most strlen(n)+1
 * passes; each pass is charged to *budget up front.
 */
static int match_simple(const char *p, size_t plen, const char *n, uint64_t *budget)
{
	const char *star_p = NULL, *star_n = NULL;
	if (*budget < plen + 1)
		return -E2BIG;
	*budget -= plen + 1;
	while (*n) {
		if (*p == '*') {
			while (*p == '*')
				p++;
			star_p = p;
			star_n = n;
			continue;
		}
		size_t nl;
		uint32_t rune = utf8_rune(n, &nl);
		if (*p == '?') {
			p++;
			n += nl;
			continue;
		}
		if (*p == '[') {
			const char *e = class_end(p);
			if (e && class_match(p, e, rune)) {
				p = e + 1;
				n += nl;
				continue;
			}
		} else if (*p == '\\' && p[1]) {
			if (p[1] == *n) {
				p += 2;
				n++;
				continue;
			}
		} else if (*p && *p == *n) {
			p++;
			n++;
			continue;
		}
		if (!star_p)
			return 0;
		if (*budget < plen + 1)
			return -E2BIG;
		*budget -= plen + 1;
		star_n += utf8_len(star_n);
		p = star_p;
		n = star_n;
	}
	while (*p == '*')
		p++;
	return !*p;
}

/* Position of the '}' matching the '{' at p, honouring escapes and classes; NULL if none. */
static const char *brace_end(const char *p)
{
	int depth = 0;
	for (; *p; p++) {
		if (*p == '\\') {
			if (!p[1])
				return NULL;
			p++;
		} else if (*p == '[') {
			const char *e = class_end(p);
			if (!e)
				return NULL;
			p = e;
		} else if (*p == '{') {
			depth++;
		} else if (*p == '}') {
			if (--depth == 0)
				return p;
		}
	}
	return NULL;
}

struct expansion {
	struct files_glob *g;
	size_t steps;
	char *err;
	size_t errlen;
};

static int expand_fail(struct expansion *x, int r, const char *msg)
{
	snprintf(x->err, x->errlen, "%s", msg);
	return r;
}

/*
 * Expand the first {a,b} of pat into x->g, recursively. Each level removes one brace group, so
 * the recursion is at most GLOB_BRACES_MAX deep; its buffers live on the heap.
 */
static int expand(const char *pat, struct expansion *x)
{
	if (++x->steps > GLOB_STEPS_MAX)
		return expand_fail(
		    x, -E2BIG,
		    "needs more than " STRINGIFY(GLOB_STEPS_MAX) " brace expansion steps");
	const char *open = NULL;
	for (const char *p = pat; *p; p++) {
		if (*p == '\\') {
			if (!p[1])
				return expand_fail(x, -EINVAL, "ends with a lone backslash");
			p++;
		} else if (*p == '[') {
			const char *e = class_end(p);
			if (!e)
				return expand_fail(x, -EINVAL,
						   "has an unterminated or empty [...] class");
			p = e;
		} else if (*p == '{') {
			open = p;
			break;
		} else if (*p == '}') {
			return expand_fail(x, -EINVAL, "has a '}' without its '{'");
		}
	}
	if (!open) {
		size_t len = strlen(pat);
		if (x->g->n >= GLOB_ALTS_MAX)
			return expand_fail(
			    x, -E2BIG,
			    "expands to more than " STRINGIFY(GLOB_ALTS_MAX) " alternatives");
		if (x->g->bytes + len > GLOB_EXPANDED_MAX)
			return expand_fail(
			    x, -E2BIG,
			    "expands to more than " STRINGIFY(GLOB_EXPANDED_MAX) " bytes");
		if (!(x->g->alt[x->g->n] = strdup(pat)))
			return expand_fail(x, -ENOMEM, "ran out of memory");
		x->g->n++;
		x->g->bytes += len;
		return 0;
	}
	const char *close = brace_end(open);
	if (!close)
		return expand_fail(x, -EINVAL, "has a '{' without its '}'");
	size_t pre = (size_t)(open - pat), post = strlen(close + 1);
	_cleanup_free_ char *buf = malloc(pre + (size_t)(close - open) + post + 1);
	if (!buf)
		return expand_fail(x, -ENOMEM, "ran out of memory");
	memcpy(buf, pat, pre);
	const char *s = open + 1;
	int depth = 0;
	for (const char *p = s;; p++) {
		if (*p == '\\') {
			p++;
			continue;
		}
		if (*p == '[') {
			p = class_end(p);
			continue;
		}
		if (*p == '{')
			depth++;
		else if (*p == '}' && p != close)
			depth--;
		if (p == close || (*p == ',' && depth == 0)) {
			size_t mid = (size_t)(p - s);
			memcpy(buf + pre, s, mid);
			memcpy(buf + pre + mid, close + 1, post + 1);
			int r = expand(buf, x);
			if (r < 0)
				return r;
			s = p + 1;
			if (p == close)
				break;
		}
	}
	return 0;
}

/* Drop "**" + "/" at segment starts; 0 when the rest cannot match a base name (has a '/'). */
static bool strip_doublestar(char *pat)
{
	for (;;) {
		char *p = pat, *seg = pat;
		bool changed = false;
		while (*p) {
			if (p == seg && strncmp(p, "**/", 3) == 0) {
				memmove(p, p + 3, strlen(p + 3) + 1);
				changed = true;
				continue;
			}
			if (*p == '\\' && p[1]) {
				p += 2;
				continue;
			}
			if (*p == '/')
				seg = p + 1;
			p++;
		}
		if (!changed)
			break;
	}
	/* Trailing "x/" + "**" globs still need a '/', so any unescaped '/' means no match. */
	for (char *p = pat; *p; p++) {
		if (*p == '\\' && p[1])
			p++;
		else if (*p == '/')
			return false;
	}
	return true;
}

void files_glob_free(struct files_glob *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		free(g->alt[i]);
	free(g);
}

int files_glob_new(const char *pattern, struct files_glob **ret, char *err, size_t errlen)
{
	char dummy[1];
	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (strlen(pattern) >= GLOB_LEN_MAX) {
		snprintf(err, errlen, "is longer than %d bytes", GLOB_LEN_MAX - 1);
		return -E2BIG;
	}
	/* Count the groups first: the expansion's recursion depth is bounded by their number. */
	size_t groups = 0;
	for (const char *p = pattern; *p; p++) {
		if (*p == '\\' && p[1])
			p++;
		else if (*p == '[' && class_end(p))
			p = class_end(p);
		else if (*p == '{')
			groups++;
	}
	if (groups > GLOB_BRACES_MAX) {
		snprintf(err, errlen, "has more than %d brace groups '{...}'", GLOB_BRACES_MAX);
		return -E2BIG;
	}
	struct files_glob *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct expansion x = {.g = g, .err = err, .errlen = errlen};
	int r = expand(pattern, &x);
	if (r < 0) {
		files_glob_free(g);
		return r;
	}
	/* Alternatives that need a '/' can never match a base name: dropped here, once. */
	size_t k = 0;
	for (size_t i = 0; i < g->n; i++) {
		if (strip_doublestar(g->alt[i]))
			g->alt[k++] = g->alt[i];
		else
			free(g->alt[i]);
	}
	g->n = k;
	g->budget = GLOB_MATCH_BUDGET;
	*ret = g;
	return 0;
}

int files_glob_matches(struct files_glob *g, const char *name)
{
	for (size_t i = 0; i < g->n; i++) {
		int r = match_simple(g->alt[i], strlen(g->alt[i]), name, &g->budget);
		if (r != 0)
			return r;
	}
	return 0;
}

int files_glob_check(const char *pattern)
{
	struct files_glob *g = NULL;
	int r = files_glob_new(pattern, &g, NULL, 0);
	files_glob_free(g);
	return r;
}

int files_glob_match(const char *pattern, const char *name)
{
	struct files_glob *g = NULL;
	int r = files_glob_new(pattern, &g, NULL, 0);
	if (r < 0)
		return r;
	r = files_glob_matches(g, name);
	files_glob_free(g);
	return r;
}

void files_content_disposition(const char *base, char *out, size_t len)
{
	bool plain = true;
	for (const unsigned char *p = (const unsigned char *)base; *p; p++)
		if (*p < 0x20 || *p >= 0x7f || *p == '"' || *p == '\\')
			plain = false;
	if (plain) {
		snprintf(out, len, "attachment; filename=\"%s\"", base);
		return;
	}
	/* RFC 5987 attr-char is the safe set; everything else is percent-encoded. */
	static const char safe[] = "!#$&+-.^_`|~";
	char enc[3 * 256 + 1];
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)base; *p && n + 4 < sizeof(enc); p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || (*p && strchr(safe, *p)))
			enc[n++] = (char)*p;
		else
			n += (size_t)snprintf(enc + n, sizeof(enc) - n, "%%%02X", *p);
	}
	enc[n] = '\0';
	snprintf(out, len, "attachment; filename=\"%s\"; filename*=UTF-8''%s", enc, enc);
}

void files_time_nano(const struct timespec *ts, char *out, size_t len)
{
	struct tm tm;
	time_t t = ts->tv_sec;
	gmtime_r(&t, &tm);
	char frac[16] = "";
	if (ts->tv_nsec > 0) {
		snprintf(frac, sizeof(frac), ".%09ld", ts->tv_nsec);
		size_t n = strlen(frac);
		while (n > 1 && frac[n - 1] == '0')
			frac[--n] = '\0';
	}
	snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

void files_time_sec(time_t t, char *out, size_t len)
{
	struct timespec ts = {.tv_sec = t};
	files_time_nano(&ts, out, len);
}
