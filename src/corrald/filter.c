#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "corrald/filter.h"
#include "shared/macro.h"

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decode [s, s+len) like urllib.parse.unquote_plus: '+' is a space, a bad %XX stays literal. */
static char *form_decode(const char *s, size_t len)
{
	char *out = malloc(len + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '+') {
			*o++ = ' ';
		} else if (s[i] == '%' && i + 2 < len && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
			*o++ = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
			i += 2;
		} else {
			*o++ = s[i];
		}
	}
	*o = '\0';
	return out;
}

void meta_filter_clear(struct meta_filter *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++) {
		free(f->pairs[i].key);
		free(f->pairs[i].value);
	}
	free(f->pairs);
	f->pairs = NULL;
	f->n = 0;
}

int meta_filter_parse(const char *s, struct meta_filter *ret, char *msg, size_t msglen)
{
	struct meta_filter f = {0};
	*ret = f;
	if (!s || !*s)
		return 0;
	const char *p = s;
	for (;;) {
		const char *end = strchr(p, '&');
		size_t seglen = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', seglen);
		if (seglen == 0 || !eq || eq == p) {
			snprintf(msg, msglen,
				 "invalid metadata filter '%s': segment '%.*s' is not key=value (expected a url-encoded query string such as 'team=infra&project=alpha')",
				 s, (int)seglen, p);
			meta_filter_clear(&f);
			return -EINVAL;
		}
		if (f.n == FILTER_MAX_META) {
			snprintf(msg, msglen, "invalid metadata filter: more than %d pairs",
				 FILTER_MAX_META);
			meta_filter_clear(&f);
			return -EINVAL;
		}
		struct meta_pair *np = realloc(f.pairs, (f.n + 1) * sizeof(*np));
		if (!np) {
			meta_filter_clear(&f);
			return -ENOMEM;
		}
		f.pairs = np;
		char *k = form_decode(p, (size_t)(eq - p));
		char *v = form_decode(eq + 1, seglen - (size_t)(eq - p) - 1);
		if (!k || !v) {
			free(k);
			free(v);
			meta_filter_clear(&f);
			return -ENOMEM;
		}
		f.pairs[f.n].key = k;
		f.pairs[f.n].value = v;
		f.n++;
		if (!end)
			break;
		p = end + 1;
	}
	*ret = f;
	return 0;
}

bool meta_filter_match(const struct meta_filter *f, const char *(*get)(const char *key, void *ud),
		       void *ud)
{
	for (size_t i = 0; i < f->n; i++) {
		const char *v = get(f->pairs[i].key, ud);
		if (!v || strcmp(v, f->pairs[i].value) != 0)
			return false;
	}
	return true;
}

bool state_filter_match(const char *const *states, size_t n, const char *state)
{
	if (n == 0)
		return true;
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(states[i], state) == 0)
			return true;
	return false;
}

int query_parse_uint(const char *name, const char *s, unsigned min, unsigned max, unsigned def,
		     unsigned *ret, char *msg, size_t msglen)
{
	if (!s) {
		*ret = def;
		return 0;
	}
	const char *p = s;
	bool neg = false;
	if (*p == '-' || *p == '+') {
		neg = *p == '-';
		p++;
	}
	if (!*p || strspn(p, "0123456789") != strlen(p)) {
		snprintf(msg, msglen, "query parameter %s must be an integer, got '%s'", name, s);
		return -EINVAL;
	}
	unsigned long long v = 0;
	for (; *p; p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT32_MAX)
			break;
	}
	if (neg || v < min || v > max) {
		snprintf(msg, msglen, "query parameter %s must be between %u and %u, got '%s'", name,
			 min, max, s);
		return -ERANGE;
	}
	*ret = (unsigned)v;
	return 0;
}

void pagination_compute(size_t total, unsigned page, unsigned page_size, struct page_info *ret)
{
	struct page_info pi = {
		.page = page,
		.page_size = page_size,
		.total_items = total,
	};
	if (page_size == 0)
		page_size = 1;
	pi.total_pages = total / page_size + (total % page_size ? 1 : 0);
	pi.has_next = page < pi.total_pages;
	unsigned long long off = (unsigned long long)(page ? page - 1 : 0) * page_size;
	if (off >= total) {
		pi.offset = total;
		pi.count = 0;
	} else {
		pi.offset = (size_t)off;
		pi.count = MIN((size_t)page_size, total - pi.offset);
	}
	*ret = pi;
}
