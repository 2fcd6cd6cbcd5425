/*
 * The execd event stream (reference §2.3): JSON objects separated by blank lines. As the
 * OpenSandbox SDKs do, "data: {json}" lines are accepted, ":" comments and event:/id:/retry:
 * lines are ignored, an event may span several lines (pretty-printed JSON), and the last event
 * may lack its closing blank line. Re-attaching to an execution (a resubmit with the same id)
 * replays its events from the first one; the events already handed to the handler are skipped
 * here, so output reaches the caller exactly once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

void events_reattach(struct events *st)
{
	st->seen = 0;
	st->blen = 0;
}

void events_clear(struct events *st)
{
	free(st->block);
	st->block = NULL;
	st->blen = st->bcap = 0;
}

static void one_event(struct events *st, json_t *ev, events_handler_fn handler, void *ud)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type || strcmp(type, "ping") == 0)
		return; /* pings are sent live only, never replayed */
	st->seen++;
	if (st->seen <= st->delivered)
		return; /* replayed after a re-attach: already handled */
	st->delivered++;
	if (handler(ud, ev) == 1)
		st->finished = true;
}

/* Reads the assembled block as one event; false when it is not (yet) a JSON object. */
static bool try_block(struct events *st, events_handler_fn handler, void *ud)
{
	if (st->blen == 0)
		return false;
	json_t *ev = json_loadb(st->block, st->blen, 0, NULL);
	if (!ev)
		return false;
	if (json_is_object(ev))
		one_event(st, ev, handler, ud);
	else
		st->malformed++;
	json_decref(ev);
	st->blen = 0;
	return true;
}

static void malformed(struct events *st)
{
	st->malformed++;
	snprintf(st->last_malformed, sizeof(st->last_malformed), "%.*s",
		 (int)MIN(st->blen, sizeof(st->last_malformed) - 1), st->block);
	st->blen = 0;
}

static bool starts_with(const char *p, size_t n, const char *prefix)
{
	size_t k = strlen(prefix);
	return n >= k && memcmp(p, prefix, k) == 0;
}

static void one_line(struct events *st, const char *line, size_t n, events_handler_fn handler,
		     void *ud)
{
	if (n > 0 && line[n - 1] == '\r')
		n--;
	if (n == 0) {
		/* End of an event: a block that is still not JSON is a broken event. */
		if (st->blen > 0 && !try_block(st, handler, ud))
			malformed(st);
		return;
	}
	if (line[0] == ':' || starts_with(line, n, "event:") || starts_with(line, n, "id:") ||
	    starts_with(line, n, "retry:"))
		return;
	if (starts_with(line, n, "data:")) {
		line += 5;
		n -= 5;
		if (n > 0 && line[0] == ' ') {
			line++;
			n--;
		}
	}
	size_t need = st->blen + n + 2;
	if (need > EVENTS_MAX_BLOCK) {
		st->overflow = true;
		st->blen = 0;
		return;
	}
	if (need > st->bcap) {
		size_t cap = MAX(st->bcap * 2, MAX(need, (size_t)1024));
		char *nb = realloc(st->block, cap);
		if (!nb) {
			st->overflow = true;
			st->blen = 0;
			return;
		}
		st->block = nb;
		st->bcap = cap;
	}
	if (st->blen)
		st->block[st->blen++] = '\n';
	memcpy(st->block + st->blen, line, n);
	st->blen += n;
	/* A complete event is handled at once, without waiting for the blank line. */
	try_block(st, handler, ud);
}

void events_parse(struct events *st, char *buf, size_t *len, events_handler_fn handler, void *ud)
{
	size_t start = 0;
	for (;;) {
		char *nl = memchr(buf + start, '\n', *len - start);
		if (!nl)
			break;
		size_t end = (size_t)(nl - buf);
		if (!st->finished && !st->overflow)
			one_line(st, buf + start, end - start, handler, ud);
		start = end + 1;
	}
	if (*len - start > EVENTS_MAX_BLOCK) {
		st->overflow = true; /* one line larger than any event may be */
		start = *len;
	}
	memmove(buf, buf + start, *len - start);
	*len -= start;
}

void events_end(struct events *st, char *buf, size_t *len, events_handler_fn handler, void *ud)
{
	if (!st->finished && !st->overflow && *len > 0)
		one_line(st, buf, *len, handler, ud);
	*len = 0;
	if (!st->finished && st->blen > 0 && !try_block(st, handler, ud))
		malformed(st);
}
