/* libcorral's execd event-stream parser: the framings the OpenSandbox SDKs accept, an event spread
 * over lines, an unterminated last event, malformed blocks skipped and counted, replay skipping. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "client.h"

struct seen {
	char log[1024]; /* "type:text|" per event */
	unsigned n;
};

static int handler(void *ud, json_t *ev)
{
	struct seen *s = ud;
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *text = json_string_value(json_object_get(ev, "text"));
	size_t l = strlen(s->log);
	snprintf(s->log + l, sizeof(s->log) - l, "%s:%s|", type ? type : "?", text ? text : "");
	s->n++;
	return type && (strcmp(type, "execution_complete") == 0 || strcmp(type, "error") == 0);
}

/* Feeds the stream byte by byte (the worst chunking), then ends it. */
static void feed(struct events *st, const char *stream, struct seen *s)
{
	size_t n = strlen(stream), len = 0;
	char *buf = malloc(n + 1);
	for (size_t i = 0; i < n; i++) {
		buf[len++] = stream[i];
		buf[len] = '\0';
		events_parse(st, buf, &len, handler, s);
	}
	events_end(st, buf, &len, handler, s);
	free(buf);
}

static void test_framings(void)
{
	struct events st = {0};
	struct seen s = {0};
	feed(&st,
	     "{\"type\":\"init\",\"text\":\"x\"}\n\n"
	     ": comment\nevent: message\nid: 1\nretry: 5\n"
	     "data: {\"type\":\"stdout\",\"text\":\"sse\"}\r\n\r\n"
	     "data:{\"type\":\"ping\",\"text\":\"pong\"}\n\n"
	     "{\n  \"type\": \"stderr\",\n  \"text\": \"pretty\"\n}\n\n"
	     "{not json}\n\n"
	     "{\"type\":\"execution_complete\"}", /* no closing blank line */
	     &s);
	CHECK_STR(s.log, "init:x|stdout:sse|stderr:pretty|execution_complete:|");
	CHECK(st.finished);
	CHECK_INT((int)st.malformed, 1);
	CHECK_STR(st.last_malformed, "{not json}");
	events_clear(&st);
}

static void test_nothing_after_the_end_and_replay(void)
{
	const char *stream = "{\"type\":\"stdout\",\"text\":\"a\"}\n\n{\"type\":\"stdout\",\"text\":\"b\"}\n\n";
	struct events st = {0};
	struct seen s = {0};
	feed(&st, stream, &s);
	CHECK_INT((int)s.n, 2);
	/* A re-attached stream replays from the start: only what is new is handed over. */
	events_reattach(&st);
	feed(&st, "{\"type\":\"stdout\",\"text\":\"a\"}\n\n{\"type\":\"stdout\",\"text\":\"b\"}\n\n"
		  "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"3\"}}\n\n"
		  "{\"type\":\"stdout\",\"text\":\"late\"}\n\n",
	     &s);
	CHECK_STR(s.log, "stdout:a|stdout:b|error:|");
	events_clear(&st);
}

static void test_unterminated_garbage_is_malformed(void)
{
	struct events st = {0};
	struct seen s = {0};
	feed(&st, "{\"type\":\"stdout\",\"text\":\"ok\"}\n\n{\"type\":", &s);
	CHECK_STR(s.log, "stdout:ok|");
	CHECK_INT((int)st.malformed, 1);
	CHECK(!st.finished);
	events_clear(&st);
}

/* Feeds whole lines at once (a large event is not fed byte by byte). */
static void feed_lines(struct events *st, char *stream, struct seen *s)
{
	size_t len = strlen(stream);
	events_parse(st, stream, &len, handler, s);
	events_end(st, stream, &len, handler, s);
}

/* An event of EVENTS_MAX_BLOCK bytes or more (over several lines, so no one line is too long)
 * makes the stream unusable; one byte less is an event. */
static void test_block_limit(void)
{
	for (int over = 0; over <= 1; over++) {
		/* {"type":"stdout","text":"xxx...x"} split after the comma: two lines, one block. */
		const char *head = "{\"type\":\"stdout\",\n\"text\":\"", *tail = "\"}\n\n";
		size_t total = EVENTS_MAX_BLOCK - 1 + (size_t)over; /* block bytes, "\n" joins included */
		size_t fill = total - strlen(head) - (strlen(tail) - 2);
		char *stream = malloc(total + 3);
		CHECK(stream != NULL);
		char *p = stpcpy(stream, head);
		memset(p, 'x', fill);
		strcpy(p + fill, tail);
		struct events st = {0};
		struct seen s = {0};
		feed_lines(&st, stream, &s);
		CHECK_INT(st.overflow, over);
		CHECK_INT((int)s.n, !over);
		events_clear(&st);
		free(stream);
	}
}

int main(void)
{
	test_block_limit();
	test_framings();
	test_nothing_after_the_end_and_replay();
	test_unterminated_garbage_is_malformed();
	return check_summary("client_events");
}
