/*
 * Fuzz target for corral-execd's transcript reader (src/execd/stream.c: tr_record_parse and
 * tr_record_events). The transcript lives in a directory the sandbox could write to, and a
 * re-attaching client gets what execd decodes from it. Checks the contract, not just "no crash":
 *  - a parsed record lies within the input and its payload within the record;
 *  - every prefix of a record is "incomplete" (0), never another record;
 *  - the record written again by tr_record_add parses back to the same kind, timestamp, payload;
 *  - the events of a record are compact JSON objects each followed by "\n\n", and stdout/stderr
 *    records give one event per "\n"-terminated line.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_events(const struct tr_record *r, const struct sbuf *ev)
{
	size_t events = 0, lines = 0;
	for (const char *p = ev->data, *end = p + ev->len; p < end; events++) {
		const char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
		if (!sep || memchr(p, '\n', (size_t)(sep - p)))
			abort();
		json_t *j = json_loadb(p, (size_t)(sep - p), JSON_ALLOW_NUL, NULL);
		if (!json_is_object(j) || !json_is_integer(json_object_get(j, "timestamp")) ||
		    json_integer_value(json_object_get(j, "timestamp")) != r->ts)
			abort();
		json_decref(j);
		p = sep + 2;
	}
	if (r->kind == TR_STDOUT || r->kind == TR_STDERR) {
		for (size_t i = 0; i < r->len; i++)
			lines += r->payload[i] == '\n';
		if (events != lines)
			abort();
	} else if (events != 1) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	size_t off = 0;
	int64_t ts = 0;
	while (off < size) {
		struct tr_record r;
		ssize_t k = tr_record_parse(buf + off, size - off, ts, &r);
		if (k <= 0)
			break;
		if ((size_t)k > size - off || r.payload < buf + off || r.payload + r.len != buf + off + k ||
		    r.len > TR_PAYLOAD_MAX)
			abort();
		for (ssize_t cut = 0; cut < k; cut += 1 + cut / 8) {
			struct tr_record r2;
			if (tr_record_parse(buf + off, (size_t)cut, ts, &r2) != 0)
				abort();
		}
		struct sbuf again = {0};
		struct tr_record r3;
		if (tr_record_add(&again, r.kind, r.ts, ts, r.payload, r.len) < 0 ||
		    tr_record_parse(again.data, again.len, ts, &r3) != (ssize_t)again.len ||
		    r3.kind != r.kind || r3.ts != r.ts || r3.len != r.len ||
		    memcmp(r3.payload, r.payload, r.len) != 0)
			abort();
		sbuf_clear(&again);
		struct sbuf ev = {0};
		if (tr_record_events(&r, &ev) == 0)
			check_events(&r, &ev);
		sbuf_clear(&ev);
		off += (size_t)k;
		ts = r.ts;
	}
	return 0;
}
