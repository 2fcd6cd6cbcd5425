/*
 * The execd event stream (reference §2.3): one JSON object per line, blank lines between events;
 * the SDKs also accept "data: {json}" and ignore ":" comment lines. Re-attaching to an execution
 * (a resubmit with the same id) replays its events from the first one; the events already handed
 * to the handler are skipped here, so output reaches the caller exactly once.
 */
#include <string.h>

#include "client.h"

void events_reattach(struct events *st)
{
	st->seen = 0;
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

void events_parse(struct events *st, char *buf, size_t *len, events_handler_fn handler, void *ud)
{
	size_t start = 0;
	for (;;) {
		char *nl = memchr(buf + start, '\n', *len - start);
		if (!nl)
			break;
		size_t end = (size_t)(nl - buf);
		buf[end] = '\0';
		char *line = buf + start;
		start = end + 1;
		if (st->finished || !line[0] || line[0] == ':')
			continue;
		if (strncmp(line, "data:", 5) == 0)
			line += 5;
		while (*line == ' ')
			line++;
		if (*line != '{')
			continue;
		json_t *ev = json_loads(line, 0, NULL);
		if (json_is_object(ev))
			one_event(st, ev, handler, ud);
		json_decref(ev);
	}
	memmove(buf, buf + start, *len - start);
	*len -= start;
}
