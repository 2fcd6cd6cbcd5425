/*
 * Fuzz target for libcorral's execd event-stream parser (src/client/events.c): the stream is bytes
 * from the server (each feed ends with the end-of-stream flush). The first input byte picks the chunk size the stream arrives in; the rest is
 * the stream. Checks the contract, not just "no crash":
 *  - however the stream is chunked, the handler sees the same events in the same order;
 *  - a re-attach replaying the same stream hands nothing to the handler a second time;
 *  - nothing is handed over after the event that ended the execution.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	unsigned long n;
	uint64_t hash; /* of the event types and texts, in order */
	bool ended;
	bool after_end;
};

static int handler(void *ud, json_t *ev)
{
	struct seen *s = ud;
	if (s->ended)
		s->after_end = true;
	s->n++;
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *text = json_string_value(json_object_get(ev, "text"));
	for (const char *p = type ? type : "?"; *p; p++)
		s->hash = s->hash * 1099511628211ull + (uint8_t)*p;
	for (const char *p = text ? text : ""; *p; p++)
		s->hash = s->hash * 1099511628211ull + (uint8_t)*p;
	if (type && (strcmp(type, "execution_complete") == 0 || strcmp(type, "error") == 0)) {
		s->ended = true;
		return 1;
	}
	return 0;
}

/* Feeds the stream in chunks of `chunk` bytes, as the transport would. */
static void feed(struct events *st, const uint8_t *data, size_t size, size_t chunk, struct seen *s)
{
	char *buf = malloc(size + 1);
	size_t len = 0;
	if (!buf)
		abort();
	for (size_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		memcpy(buf + len, data + off, n);
		len += n;
		buf[len] = '\0';
		events_parse(st, buf, &len, handler, s);
	}
	events_end(st, buf, &len, handler, s);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = (size_t)data[0] % 64 + 1;
	data++;
	size--;

	struct events whole = {0}, chunked = {0};
	struct seen a = {0}, b = {0};
	feed(&whole, data, size, size ? size : 1, &a);
	feed(&chunked, data, size, chunk, &b);
	if (a.n != b.n || a.hash != b.hash)
		abort(); /* chunking changed what the caller sees */
	if (a.after_end || b.after_end)
		abort(); /* an event after the end */

	/* Re-attach: the same stream again delivers nothing new. */
	unsigned long before = b.n;
	events_reattach(&chunked);
	feed(&chunked, data, size, chunk, &b);
	if (b.n != before)
		abort();
	events_clear(&whole);
	events_clear(&chunked);
	return 0;
}
