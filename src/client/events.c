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
#include "shared/dynbuf.h"

void events_reattach(struct events *st)
{
	st->seen = 0;
	dynbuf_reset(&st->block);
}

void events_clear(struct events *st)
{
	dynbuf_free(&st->block);
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
	if (st->block.len == 0)
		return false;
	json_t *ev = json_loadb(st->block.data, st->block.len, 0, NULL);
	if (!ev)
		return false;
	if (json_is_object(ev))
		one_event(st, ev, handler, ud);
	else
		st->malformed++;
	json_decref(ev);
	dynbuf_reset(&st->block);
	return true;
}

static void malformed(struct events *st)
{
	st->malformed++;
	snprintf(st->last_malformed, sizeof(st->last_malformed), "%.*s",
		 (int)MIN(st->block.len, sizeof(st->last_malformed) - 1), st->block.data);
	dynbuf_reset(&st->block);
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
		if (st->block.len > 0 && !try_block(st, handler, ud))
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
	/* A zeroed struct events is ready: the block's limit is set on its first line (the block
	 * and its terminator fit in EVENTS_MAX_BLOCK). */
	if (!st->block.max)
		dynbuf_init(&st->block, EVENTS_MAX_BLOCK - 1);
	if ((st->block.len && dynbuf_add(&st->block, "\n", 1) < 0) ||
	    dynbuf_add(&st->block, line, n) < 0) {
		st->overflow = true; /* too large (or out of memory) */
		dynbuf_reset(&st->block);
		return;
	}
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
	if (!st->finished && st->block.len > 0 && !try_block(st, handler, ud))
		malformed(st);
}
