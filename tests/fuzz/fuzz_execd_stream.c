/*
 * Fuzz target for corral-execd's stream framing (src/execd/stream.c): command output is bytes the
 * sandbox controls. The first input byte picks the chunk size the output arrives in; the rest is
 * the output. Checks the contract, not just "no crash":
 *  - the lines joined with "\n" give the input with every "\r\n" and "\r" turned into "\n"
 *    (minus one final terminator), however the input is chunked;
 *  - no line is longer than STREAM_LINE_MAX;
 *  - every encoded event is one line of JSON followed by "\n\n", parses, and its text is the line
 *    (or "\n" for an empty line) when the line is valid UTF-8.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct ctx {
	struct sbuf joined;
	size_t nlines;
};

static bool valid_utf8(const char *s, size_t n)
{
	json_t *j = json_stringn(s, n);
	json_decref(j);
	return j != NULL;
}

static void on_line(const char *line, size_t len, void *arg)
{
	struct ctx *c = arg;
	if (len > STREAM_LINE_MAX)
		abort();
	if (c->nlines++)
		sbuf_add(&c->joined, "\n", 1);
	sbuf_add(&c->joined, line, len);

	struct sbuf ev = {0};
	if (stream_event_line(&ev, "stdout", line, len, 1718000000000) < 0)
		abort();
	if (ev.len < 3 || memcmp(ev.data + ev.len - 2, "\n\n", 2) != 0 ||
	    memchr(ev.data, '\n', ev.len - 2))
		abort();
	json_error_t err;
	json_t *j = json_loadb(ev.data, ev.len - 2, JSON_ALLOW_NUL, &err); /* "\u0000" is valid JSON */
	if (!j)
		abort();
	const char *text = json_string_value(json_object_get(j, "text"));
	if (!text || strcmp(json_string_value(json_object_get(j, "type")), "stdout") != 0 ||
	    json_integer_value(json_object_get(j, "timestamp")) != 1718000000000)
		abort();
	if (len == 0) {
		if (strcmp(text, "\n") != 0)
			abort();
	} else if (valid_utf8(line, len) && memchr(line, '\0', len) == NULL) {
		if (strlen(text) != len || memcmp(text, line, len) != 0)
			abort();
	}
	json_decref(j);
	sbuf_clear(&ev);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 300000)
		return 0;
	size_t step = (size_t)data[0] * 257 % 70001 + 1;
	const char *in = (const char *)data + 1;
	size_t n = size - 1;

	static struct line_splitter s;
	struct ctx c = {0};
	line_splitter_init(&s);
	for (size_t i = 0; i < n; i += step)
		line_splitter_feed(&s, in + i, n - i < step ? n - i : step, on_line, &c);
	line_splitter_flush(&s, on_line, &c);

	/* Expected: CRLF and CR → LF, then one trailing LF dropped (it ended the last line). */
	char *want = malloc(n + 1);
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		if (in[i] == '\r') {
			want[w++] = '\n';
			if (i + 1 < n && in[i + 1] == '\n')
				i++;
		} else {
			want[w++] = in[i];
		}
	}
	if (w > 0 && want[w - 1] == '\n')
		w--;
	/* Long lines are cut into pieces: each cut shows up as an extra "\n" in the joined text. */
	bool has_long = false;
	for (size_t i = 0, run = 0; i < w; i++) {
		run = want[i] == '\n' ? 0 : run + 1;
		if (run > STREAM_LINE_MAX)
			has_long = true;
	}
	if (!has_long && (c.joined.len != w || (w && memcmp(c.joined.data, want, w) != 0)))
		abort();
	free(want);
	sbuf_clear(&c.joined);
	return 0;
}
