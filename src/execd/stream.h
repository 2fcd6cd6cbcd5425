/*
 * The execd stream wire format (reference §2.3), as pure functions so it can be unit-tested:
 *  - a line splitter that turns a byte stream into lines (\n, \r and \r\n each end one line),
 *  - an encoder for the event objects, each written as compact JSON followed by "\n\n".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line longer than this is emitted in pieces of at most this many bytes (memory bound). */
#define STREAM_LINE_MAX (64 * 1024)

typedef void (*line_cb)(const char *line, size_t len, void *arg);

struct line_splitter {
	char buf[STREAM_LINE_MAX]; /* the partial line not yet terminated */
	size_t len;
	bool after_cr; /* the last byte seen was \r: a following \n belongs to it */
};

void line_splitter_init(struct line_splitter *s);
/* Feed bytes; cb gets each complete line without its terminator (len may be 0). */
void line_splitter_feed(struct line_splitter *s, const char *data, size_t n, line_cb cb, void *arg);
/* End of stream: a trailing partial line, if any, goes to cb. */
void line_splitter_flush(struct line_splitter *s, line_cb cb, void *arg);

/* A growable byte buffer for encoded events. */
struct sbuf {
	char *data;
	size_t len, cap;
};

void sbuf_clear(struct sbuf *b);
int sbuf_add(struct sbuf *b, const void *p, size_t n);
/* Append s as a JSON string literal (quoted, escaped); invalid UTF-8 becomes U+FFFD. */
int sbuf_add_json_string(struct sbuf *b, const char *s, size_t n);

/*
 * Event encoders. Each appends one event: {"type":...,...,"timestamp":ts} + "\n\n".
 * stream_event_line maps an empty line to the text "\n", as the reference does.
 */
int stream_event_text(struct sbuf *b, const char *type, const char *text, size_t len, int64_t ts);
int stream_event_line(struct sbuf *b, const char *type, const char *line, size_t len, int64_t ts);
int stream_event_complete(struct sbuf *b, int64_t execution_time_ms, int64_t ts);
int stream_event_error(struct sbuf *b, const char *ename, const char *evalue, int64_t ts);
