#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/dynbuf.h"

void dynbuf_init(struct dynbuf *b, size_t max)
{
	*b = (struct dynbuf)DYNBUF_INIT(max);
}

/* Room for n more bytes and the terminator. */
static int reserve(struct dynbuf *b, size_t n)
{
	if (n > b->max - b->len)
		return -E2BIG;
	if (b->data && b->len + n < b->cap)
		return 0;
	size_t want = b->len + n + 1, cap = b->cap ? b->cap : 64;
	while (cap < want)
		cap = cap > SIZE_MAX / 2 ? want : cap * 2;
	/* Never more than max + 1: a buffer at its limit holds exactly what it may. */
	if (b->max < SIZE_MAX && cap > b->max + 1)
		cap = b->max + 1;
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	if (!b->data)
		d[0] = '\0';
	b->data = d;
	b->cap = cap;
	return 0;
}

int dynbuf_add(struct dynbuf *b, const void *p, size_t n)
{
	int r = reserve(b, n);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int dynbuf_add_str(struct dynbuf *b, const char *s)
{
	return dynbuf_add(b, s, strlen(s));
}

int dynbuf_printf(struct dynbuf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int r = reserve(b, (size_t)n);
	if (r < 0)
		return r;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void dynbuf_reset(struct dynbuf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void dynbuf_free(struct dynbuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *dynbuf_take(struct dynbuf *b, size_t *ret_len)
{
	char *d = b->data ? b->data : strdup("");
	if (d && ret_len)
		*ret_len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return d;
}
