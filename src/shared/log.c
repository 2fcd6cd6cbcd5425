#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static enum log_level current_level = LOG_LVL_INFO;
static const char *ident = "corral";

enum log_level log_get_level(void)
{
	return current_level;
}

void log_set_level(enum log_level level)
{
	current_level = level;
}

void log_set_ident(const char *s)
{
	ident = s;
}

int log_level_parse(const char *s, enum log_level *ret)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcmp(s, names[i]) == 0) {
			*ret = (enum log_level)i;
			return 0;
		}
	return -EINVAL;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *const tags[] = {"error", "warn", "info", "debug"};
	if (level > current_level)
		return;
	int saved = errno;
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	char msg[2048], line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			 ts.tv_nsec / 1000000, ident, tags[level]);
	if (n < 0 || n >= (int)sizeof(line) - 1)
		n = 0;
	/*
	 * One event, one line: a control character in what the message quotes (a layer entry's
	 * name from a registry, a client's path) is escaped, so none can end this line and forge
	 * the next one.
	 */
	for (const unsigned char *c = (const unsigned char *)msg; *c && n < (int)sizeof(line) - 6;
	     c++) {
		if (*c < 0x20 || *c == 0x7f)
			n += snprintf(line + n, 5, "\\x%02x", *c);
		else
			line[n++] = (char)*c;
	}
	line[n++] = '\n';
	/* One write per line so concurrent writers never interleave within a line. */
	(void)!write(STDERR_FILENO, line, n);
	errno = saved;
}
