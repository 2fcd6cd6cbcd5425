/* Unit tests for src/execd/stream.c: the line splitter and the event encoder (reference §2.3). */
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

int main(void)
{
	test_splitter();
	test_long_line();
	test_events();
	return check_summary("execd_stream");
}
