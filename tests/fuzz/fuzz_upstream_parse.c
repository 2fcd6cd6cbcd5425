/*
 * libFuzzer target for the execd response parser (src/shared/http_parse.c). The first input byte
 * picks how the rest is split into arrivals and whether it answers a HEAD; the parser must never
 * read out of bounds, never report more payload than it was given, and agree with itself however
 * the bytes are split. tests/unit/test_upstream_parse.c replays the corpus through this function.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shared/http_parse.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

struct outcome {
	int rc;
	bool done;
	uint64_t payload;
	size_t consumed;
};

/* Feed data in pieces of `step` bytes (0: all at once), as the proxy would. */
static struct outcome run(const unsigned char *data, size_t size, size_t step, bool head)
{
	struct http_resp p;
	struct outcome o = { 0 };
	size_t have = 0, start = 0;

	http_resp_init(&p, head);
	while (!o.rc) {
		size_t prev = have;
		have = step ? (have + step < size ? have + step : size) : size;
		for (;;) {
			size_t avail = have - start;
			const char *buf = (const char *)data + start;
			if (!p.head_done) {
				/* A copy, so ASan sees any read past the bytes received so far. */
				char *copy = malloc(avail ? avail : 1);
				memcpy(copy, buf, avail);
				ssize_t n = http_resp_parse_head(&p, copy, avail, NULL);
				free(copy);
				if (n < 0) {
					o.rc = (int)n;
					break;
				}
				if (n == 0)
					break;
				if ((size_t)n > avail)
					abort();
				start += (size_t)n;
				if (p.status >= 100 && p.status < 200 && p.status != 101)
					http_resp_init(&p, head);
				continue;
			}
			if (http_resp_done(&p))
				break;
			uint64_t pend = http_resp_payload_pending(&p);
			if (pend) {
				size_t take = pend < avail ? (size_t)pend : avail;
				if (!take)
					break;
				o.payload += take;
				start += take;
				http_resp_payload_consumed(&p, take);
				continue;
			}
			if (!avail)
				break;
			ssize_t n = http_resp_parse_framing(&p, buf, avail, NULL);
			if (n < 0) {
				o.rc = (int)n;
				break;
			}
			if ((size_t)n > avail)
				abort();
			if (n == 0 && !http_resp_done(&p))
				abort(); /* framing must make progress or finish */
			start += (size_t)n;
		}
		if (have == size || have == prev)
			break;
	}
	if (!o.rc && p.head_done)
		o.rc = http_resp_eof(&p);
	o.done = p.head_done && http_resp_done(&p);
	o.consumed = start;
	if (o.payload > size)
		abort();
	return o;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned char ctl = data[0];
	data++;
	size--;
	bool head = ctl & 0x80;
	size_t step = (ctl & 0x7f) % 17;

	struct outcome whole = run(data, size, 0, head);
	struct outcome split = run(data, size, step ? step : 1, head);
	/* Errors may be detected at different points, but success must be identical. */
	if (!whole.rc != !split.rc)
		abort();
	if (!whole.rc && (whole.payload != split.payload || whole.done != split.done ||
			  whole.consumed != split.consumed))
		abort();
	return 0;
}
