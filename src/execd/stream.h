/*
 * The execd stream wire format (reference §2.3), as pure functions so it can be unit-tested:
 *  - a line splitter that turns a byte stream into lines (\n, \r and \r\n each end one line),
 *  - an encoder for the event objects, each written as compact JSON followed by "\n\n".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
/* Make room for extra more bytes. */
int sbuf_reserve(struct sbuf *b, size_t extra);
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

/*
 * The transcript: how execd stores an execution's stream on disk, compactly. Instead of one JSON
 * event per line (~50 bytes of framing around every line), a record holds one timestamp and the
 * lines that share it, each followed by "\n"; the events are encoded again when the stream is
 * replayed, byte for byte as they went out live (tr_record_events is the only encoder of a
 * record's events, live and replayed). A record:
 *
 *   kind (1 byte) | zigzag varint: ts - the previous record's ts | varint: payload length | payload
 *
 * Payloads: TR_INIT the init text; TR_STDOUT/TR_STDERR lines (each without \r or \n) each followed
 * by "\n"; TR_COMPLETE a varint execution time (ms); TR_ERROR the exit code's text; TR_CUT a
 * varint: the output cap in bytes; TR_DROPPED a varint: the bytes dropped past it. The last two
 * are markers, sent as stderr lines (an error event would end the stream in every client and
 * take the place of the exit code). A record of lines is at most TR_PAYLOAD_MAX bytes and encodes
 * to at most TR_EVENTS_MAX bytes (plus one line's events), so a reader holds one record at a time.
 */
enum tr_kind {
	TR_INIT = 1,
	TR_STDOUT = 2,
	TR_STDERR = 3,
	TR_COMPLETE = 4,
	TR_ERROR = 5,
	TR_CUT = 6,
	TR_DROPPED = 7,
	TR_UNSTORED = 8, /* a varint errno: the output could not be stored, the rest is dropped */
};

#define TR_PAYLOAD_MAX (STREAM_LINE_MAX + 1)
#define TR_HEADER_MAX (1 + 10 + 10)
#define TR_RECORD_MAX (TR_HEADER_MAX + TR_PAYLOAD_MAX)
#define TR_EVENTS_MAX (256u * 1024)

struct tr_record {
	enum tr_kind kind;
	int64_t ts;
	const char *payload;
	size_t len;
};

/* Append one record; ts_base is the previous record's timestamp (0 before the first). */
int tr_record_add(struct sbuf *b, enum tr_kind kind, int64_t ts, int64_t ts_base, const void *payload,
		  size_t len);
/* The header of such a record (what precedes its len bytes of payload); returns its size. */
size_t tr_header(char buf[TR_HEADER_MAX], enum tr_kind kind, int64_t ts, int64_t ts_base, size_t len);
/* Append a varint (the payload of TR_COMPLETE and TR_CUT). */
int tr_varint_add(struct sbuf *b, uint64_t v);
/*
 * Parse the record at the start of buf (n bytes). Returns its size (> 0), 0 when buf holds only
 * part of it, or -EINVAL when it is not a record. ret->payload points into buf.
 */
ssize_t tr_record_parse(const char *buf, size_t n, int64_t ts_base, struct tr_record *ret);
/* Append the stream events of a record (what went out live). */
int tr_record_events(const struct tr_record *r, struct sbuf *out);
/* The text of a TR_CUT, TR_DROPPED or TR_UNSTORED marker (also written into a background
 * command's output). */
int tr_marker(enum tr_kind kind, uint64_t v, char *buf, size_t len);
