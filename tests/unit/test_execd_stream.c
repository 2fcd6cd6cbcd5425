/* Unit tests for src/execd/stream.c: the line splitter and the event encoder (reference §2.3). */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "shared/macro.h"
#include "stream.h"

struct lines {
	char *v[64];
	size_t n;
};

static void collect(const char *line, size_t len, void *arg)
{
	struct lines *l = arg;
	if (l->n < 64) {
		char *s = malloc(len + 1);
		memcpy(s, line, len);
		s[len] = '\0';
		l->v[l->n++] = s;
	}
}

static void lines_clear(struct lines *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	l->n = 0;
}

/* Feed input in pieces of `step` bytes, then flush; compare with expected lines. */
static void check_split(const char *in, size_t step, const char *const *want, size_t nwant)
{
	static struct line_splitter s;
	struct lines l = {0};
	line_splitter_init(&s);
	size_t n = strlen(in);
	for (size_t i = 0; i < n; i += step)
		line_splitter_feed(&s, in + i, MIN(step, n - i), collect, &l);
	line_splitter_flush(&s, collect, &l);
	CHECK_INT(l.n, nwant);
	for (size_t i = 0; i < l.n && i < nwant; i++)
		CHECK_STR(l.v[i], want[i]);
	lines_clear(&l);
}

static void test_splitter(void)
{
	for (size_t step = 1; step <= 16; step++) {
		const char *w1[] = {"a", "", "b", "", "", "c"};
		check_split("a\n\nb\n\n\nc", step, w1, 6);
		const char *w2[] = {"x", "y", "z"};
		check_split("x\r\ny\rz\n", step, w2, 3);
		const char *w3[] = {"", ""};
		check_split("\r\r", step, w3, 2);
		const char *w4[] = {"one", "", "two"};
		check_split("one\r\n\r\ntwo", step, w4, 3);
		check_split("", step, NULL, 0);
		const char *w5[] = {"hello"};
		check_split("hello\n", step, w5, 1);
		check_split("hello", step, w5, 1);
	}
}

static void test_long_line(void)
{
	static struct line_splitter s;
	struct lines l = {0};
	size_t n = STREAM_LINE_MAX + 100;
	char *big = malloc(n + 1);
	memset(big, 'x', n);
	big[n] = '\n';
	line_splitter_init(&s);
	line_splitter_feed(&s, big, n + 1, collect, &l);
	line_splitter_flush(&s, collect, &l);
	CHECK_INT(l.n, 2);
	if (l.n == 2) {
		CHECK_INT(strlen(l.v[0]), STREAM_LINE_MAX);
		CHECK_INT(strlen(l.v[1]), 100);
	}
	lines_clear(&l);
	/* A cut never splits a UTF-8 character: é (2 bytes) straddling the limit moves whole. */
	memset(big, 'x', n);
	big[STREAM_LINE_MAX - 1] = (char)0xC3;
	big[STREAM_LINE_MAX] = (char)0xA9;
	line_splitter_init(&s);
	line_splitter_feed(&s, big, n, collect, &l);
	line_splitter_flush(&s, collect, &l);
	CHECK_INT(l.n, 2);
	if (l.n == 2) {
		CHECK_INT(strlen(l.v[0]), STREAM_LINE_MAX - 1);
		CHECK((unsigned char)l.v[1][0] == 0xC3);
	}
	lines_clear(&l);
	/* Exactly STREAM_LINE_MAX bytes, the terminator in a later read: one line, no empty one. */
	memset(big, 'z', STREAM_LINE_MAX);
	line_splitter_init(&s);
	line_splitter_feed(&s, big, STREAM_LINE_MAX, collect, &l);
	line_splitter_feed(&s, "\nnext\n", 6, collect, &l);
	line_splitter_flush(&s, collect, &l);
	CHECK_INT(l.n, 2);
	if (l.n == 2) {
		CHECK_INT(strlen(l.v[0]), STREAM_LINE_MAX);
		CHECK_STR(l.v[1], "next");
	}
	lines_clear(&l);
	free(big);
}

static void check_event(int (*fn)(struct sbuf *), const char *want)
{
	struct sbuf b = {0};
	CHECK_INT(fn(&b), 0);
	sbuf_add(&b, "", 1);
	CHECK_STR(b.data, want);
	sbuf_clear(&b);
}

static int ev_init(struct sbuf *b)
{
	return stream_event_text(b, "init", "0123456789abcdef0123456789abcdef", 32, 1718000000000);
}
static int ev_empty_line(struct sbuf *b)
{
	return stream_event_line(b, "stdout", "", 0, 5);
}
static int ev_escapes(struct sbuf *b)
{
	return stream_event_line(b, "stderr", "a\"b\\c\td\x01", 8, 6);
}
static int ev_bad_utf8(struct sbuf *b)
{
	return stream_event_line(b, "stdout", "\xff" "ok\xc3\xa9", 5, 7);
}
static int ev_complete(struct sbuf *b)
{
	return stream_event_complete(b, 12, 1718000000110);
}
static int ev_error(struct sbuf *b)
{
	return stream_event_error(b, "CommandExecError", "7", 9);
}

static void test_events(void)
{
	check_event(ev_init, "{\"type\":\"init\",\"text\":\"0123456789abcdef0123456789abcdef\","
			     "\"timestamp\":1718000000000}\n\n");
	check_event(ev_empty_line, "{\"type\":\"stdout\",\"text\":\"\\n\",\"timestamp\":5}\n\n");
	check_event(ev_escapes,
		    "{\"type\":\"stderr\",\"text\":\"a\\\"b\\\\c\\td\\u0001\",\"timestamp\":6}\n\n");
	check_event(ev_bad_utf8,
		    "{\"type\":\"stdout\",\"text\":\"\xef\xbf\xbdok\xc3\xa9\",\"timestamp\":7}\n\n");
	check_event(ev_complete, "{\"type\":\"execution_complete\",\"execution_time\":12,"
				 "\"timestamp\":1718000000110}\n\n");
	check_event(ev_error, "{\"type\":\"error\",\"timestamp\":9,\"error\":{\"ename\":"
			      "\"CommandExecError\",\"evalue\":\"7\",\"traceback\":[]}}\n\n");
}

/* The transcript: records round-trip, decode to the events the live path sends, and a reader
 * that walks them from the start needs only the previous record's timestamp. */
static void test_transcript(void)
{
	struct sbuf t = {0}, live = {0}, p = {0};
	int64_t base = 0;
	const int64_t ts0 = 1796137100824;
	CHECK_INT(tr_record_add(&t, TR_INIT, ts0, base, "abc", 3), 0);
	stream_event_text(&live, "init", "abc", 3, ts0);
	base = ts0;
	/* Lines, each followed by "\n"; an empty line is the event text "\n". */
	CHECK_INT(tr_record_add(&t, TR_STDOUT, ts0 + 5, base, "one\n\ntwo \"q\"\n", 13), 0);
	stream_event_line(&live, "stdout", "one", 3, ts0 + 5);
	stream_event_line(&live, "stdout", "", 0, ts0 + 5);
	stream_event_line(&live, "stdout", "two \"q\"", 7, ts0 + 5);
	base = ts0 + 5;
	/* A timestamp going backwards (the wall clock was set) still round-trips. */
	CHECK_INT(tr_record_add(&t, TR_STDERR, ts0 - 1000, base, "e\n", 2), 0);
	stream_event_line(&live, "stderr", "e", 1, ts0 - 1000);
	base = ts0 - 1000;
	tr_varint_add(&p, 1u << 20);
	CHECK_INT(tr_record_add(&t, TR_CUT, ts0 + 7, base, p.data, p.len), 0);
	char msg[256];
	int mlen = tr_marker(TR_CUT, 1u << 20, msg, sizeof(msg));
	CHECK(strstr(msg, "output cap of 1048576 bytes reached") != NULL);
	/* Markers are stderr lines: an error event would end the stream in every client. */
	stream_event_text(&live, "stderr", msg, (size_t)mlen, ts0 + 7);
	base = ts0 + 7;
	CHECK_INT(tr_record_add(&t, TR_ERROR, ts0 + 9, base, "137", 3), 0);
	stream_event_error(&live, "CommandExecError", "137", ts0 + 9);
	p.len = 0;
	tr_varint_add(&p, 300);
	struct sbuf t2 = {0};
	CHECK_INT(tr_record_add(&t2, TR_COMPLETE, ts0, 0, p.data, p.len), 0);

	/* Framing costs a few bytes a record. */
	CHECK(t.len < 3 + 13 + 2 + 3 + 3 + 5 * 8);

	struct sbuf got = {0};
	size_t off = 0;
	int64_t ts = 0;
	int n = 0;
	while (off < t.len) {
		struct tr_record r;
		ssize_t k = tr_record_parse(t.data + off, t.len - off, ts, &r);
		CHECK(k > 0);
		if (k <= 0)
			break;
		/* Any proper prefix of a record is "incomplete", never a record. */
		for (size_t cut = 0; cut < (size_t)k; cut++) {
			struct tr_record r2;
			CHECK_INT(tr_record_parse(t.data + off, cut, ts, &r2), 0);
		}
		CHECK_INT(tr_record_events(&r, &got), 0);
		off += (size_t)k;
		ts = r.ts;
		n++;
	}
	CHECK_INT(n, 5);
	CHECK_INT(got.len, live.len);
	CHECK(got.len == live.len && memcmp(got.data, live.data, got.len) == 0);

	struct tr_record r;
	got.len = 0;
	CHECK(tr_record_parse(t2.data, t2.len, 0, &r) > 0);
	CHECK_INT(tr_record_events(&r, &got), 0);
	CHECK(got.len > 0 && strstr(got.data, "\"execution_time\":300,") != NULL);

	/* Garbage is refused, not misread. */
	CHECK_INT(tr_record_parse("\x09\x00\x00", 3, 0, &r), -EINVAL);
	CHECK_INT(tr_record_parse("\x02\x00\xff\xff\xff\x0f", 6, 0, &r), -EINVAL); /* too long */
	CHECK_INT(tr_record_parse("\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00", 13, 0, &r),
		  -EINVAL);
	/* Lines without their terminator are not a record of lines. */
	r = (struct tr_record){TR_STDOUT, 0, "abc", 3};
	CHECK(tr_record_events(&r, &got) < 0);

	sbuf_clear(&t);
	sbuf_clear(&t2);
	sbuf_clear(&live);
	sbuf_clear(&p);
	sbuf_clear(&got);
}

int main(void)
{
	test_splitter();
	test_long_line();
	test_events();
	test_transcript();
	return check_summary("execd_stream");
}
