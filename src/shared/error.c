#include <stdio.h>
#include <string.h>

#include "error.h"

static _printf_(4, 0) int error_vset(struct error *e, int errnum, int with_errno, const char *fmt,
				       va_list ap)
{
	if (errnum < 0)
		errnum = -errnum;
	if (!e)
		return -errnum;
	e->code = -errnum;
	int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	if (with_errno && n >= 0 && (size_t)n < sizeof(e->msg))
		snprintf(e->msg + n, sizeof(e->msg) - n, ": %s", strerror(errnum));
	return -errnum;
}

int error_set(struct error *e, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = error_vset(e, errnum, 0, fmt, ap);
	va_end(ap);
	return r;
}

int error_set_errno(struct error *e, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = error_vset(e, errnum, 1, fmt, ap);
	va_end(ap);
	return r;
}

int error_prefix(struct error *e, const char *fmt, ...)
{
	if (!e)
		return -EIO;
	char prefix[ERROR_MSG_MAX], old[ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	snprintf(e->msg, sizeof(e->msg), "%s: %s", prefix, old);
	return e->code ? e->code : -EIO;
}

void error_clear(struct error *e)
{
	if (!e)
		return;
	e->code = 0;
	e->msg[0] = '\0';
}
