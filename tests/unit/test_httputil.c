/*
 * Unit tests for src/shared/httputil.c. Path splitting is pure; the request helpers (path decoding,
 * query parsing, JSON bodies, JSON replies) need a real evhttp request, so the test runs an evhttp
 * server and client on one loopback socket inside one event loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "check.h"
#include "shared/httputil.h"

static void test_split_path(void)
{
	char buf[128];
	char *segs[4];

	strcpy(buf, "/v1/sandboxes/abc/proxy/44772/command");
	CHECK_INT(http_split_path(buf, segs, 4), -E2BIG);

	char *many[8];
	strcpy(buf, "/v1/sandboxes/abc/proxy/44772/command");
	CHECK_INT(http_split_path(buf, many, 8), 6);
	CHECK_STR(many[0], "v1");
	CHECK_STR(many[2], "abc");
	CHECK_STR(many[5], "command");

	strcpy(buf, "//a///b/");
	CHECK_INT(http_split_path(buf, segs, 4), 2);
	CHECK_STR(segs[0], "a");
	CHECK_STR(segs[1], "b");

	strcpy(buf, "/");
	CHECK_INT(http_split_path(buf, segs, 4), 0);
	strcpy(buf, "");
	CHECK_INT(http_split_path(buf, segs, 4), 0);
	strcpy(buf, "noslash");
	CHECK_INT(http_split_path(buf, segs, 4), 1);
	CHECK_STR(segs[0], "noslash");
	strcpy(buf, "/a/b/c/d");
	CHECK_INT(http_split_path(buf, segs, 4), 4); /* exactly max fits */
	CHECK_STR(segs[3], "d");
	strcpy(buf, "/a/b/c/d/");
	CHECK_INT(http_split_path(buf, segs, 4), 4);
	strcpy(buf, "/x");
	CHECK_INT(http_split_path(buf, segs, 0), -E2BIG);
	strcpy(buf, "/..//.");
	CHECK_INT(http_split_path(buf, segs, 4), 2); /* dot segments are the caller's business */
	CHECK_STR(segs[0], "..");
	CHECK_STR(segs[1], ".");
}

static void test_reason(void)
{
	CHECK_STR(http_reason(200), "OK");
	CHECK_STR(http_reason(202), "Accepted");
	CHECK_STR(http_reason(204), "No Content");
	CHECK_STR(http_reason(404), "Not Found");
	CHECK_STR(http_reason(422), "Unprocessable Entity");
	CHECK_STR(http_reason(502), "Bad Gateway");
	CHECK(http_reason(299) != NULL);
}

/* What the server callback saw, for the last request. */
static struct {
	int path_ret;
	char path[256];
	char state0[64], state1[64], state2[64];
	size_t nstates;
	char page[32];
	int has_missing;
	int json_ret;
	char json_msg[256];
	int json_null;
	char json_name[64];
} seen;

/* How the server answers: "json", "error" or "empty". */
static const char *reply_mode;
static int reply_allow_empty;

static void copy_or_empty(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

static void server_cb(struct evhttp_request *req, void *arg)
{
	memset(&seen, 0, sizeof(seen));
	seen.path_ret = http_request_path(req, seen.path, sizeof(seen.path));

	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *states[3] = {0};
	seen.nstates = http_query_get_all(q, "state", states, 3);
	copy_or_empty(seen.state0, sizeof(seen.state0), states[0]);
	copy_or_empty(seen.state1, sizeof(seen.state1), states[1]);
	copy_or_empty(seen.state2, sizeof(seen.state2), states[2]);
	copy_or_empty(seen.page, sizeof(seen.page), http_query_get(q, "page"));
	seen.has_missing = http_query_get(q, "missing") != NULL;

	json_t *body = NULL;
	seen.json_ret = http_body_json(req, reply_allow_empty, &body, seen.json_msg,
				       sizeof(seen.json_msg));
	seen.json_null = body == NULL;
	if (body && json_is_object(body))
		copy_or_empty(seen.json_name, sizeof(seen.json_name),
			      json_string_value(json_object_get(body, "name")));
	json_decref(body);

	if (strcmp(reply_mode, "error") == 0)
		http_send_error(req, 404, "SANDBOX::NOT_FOUND", "sandbox '%s' not found", "abc");
	else if (strcmp(reply_mode, "empty") == 0)
		http_send_empty(req, 204);
	else
		http_send_json(req, 200, json_pack("{s:i}", "ok", 1));
}

static struct {
	int status;
	char body[1024];
	char ctype[128];
} got;

static void client_cb(struct evhttp_request *req, void *arg)
{
	memset(&got, 0, sizeof(got));
	if (req) {
		got.status = evhttp_request_get_response_code(req);
		struct evbuffer *in = evhttp_request_get_input_buffer(req);
		size_t n = MIN(evbuffer_get_length(in), sizeof(got.body) - 1);
		evbuffer_remove(in, got.body, n);
		copy_or_empty(got.ctype, sizeof(got.ctype),
			      evhttp_find_header(evhttp_request_get_input_headers(req),
						 "Content-Type"));
	}
	event_base_loopexit(arg, NULL);
}

static struct event_base *base;
static struct evhttp_connection *conn;

static void do_request(enum evhttp_cmd_type method, const char *uri, const char *body,
		       const char *mode, int allow_empty)
{
	reply_mode = mode;
	reply_allow_empty = allow_empty;
	struct evhttp_request *req = evhttp_request_new(client_cb, base);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
	if (body)
		evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
	got.status = -1;
	evhttp_make_request(conn, req, method, uri);
	event_base_dispatch(base);
}

static void test_method_name(void)
{
	CHECK_STR(http_method_name(EVHTTP_REQ_GET), "GET");
	CHECK_STR(http_method_name(EVHTTP_REQ_DELETE), "DELETE");
	CHECK_STR(http_method_name(EVHTTP_REQ_CONNECT), "CONNECT");
	CHECK_STR(http_method_name(EVHTTP_REQ_PATCH), "PATCH");
	CHECK(http_method_name((enum evhttp_cmd_type)0) == NULL);
	CHECK(http_method_name((enum evhttp_cmd_type)(1 << 20)) == NULL);
}

static void test_requests(void)
{
	base = event_base_new();
	struct evhttp *http = evhttp_new(base);
	evhttp_set_gencb(http, server_cb, NULL);
	struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
	CHECK(bs != NULL);
	if (!bs)
		return;
	struct sockaddr_in sin;
	socklen_t slen = sizeof(sin);
	getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sin, &slen);
	conn = evhttp_connection_base_new(base, NULL, "127.0.0.1", ntohs(sin.sin_port));
	evhttp_connection_set_timeout(conn, 5);

	do_request(EVHTTP_REQ_GET, "/v1/sandboxes?state=Running&state=Paused&page=2", NULL, "json",
		   1);
	CHECK_INT(got.status, 200);
	CHECK_STR(got.body, "{\"ok\":1}");
	CHECK_STR(got.ctype, "application/json");
	CHECK_INT(seen.path_ret, 0);
	CHECK_STR(seen.path, "/v1/sandboxes");
	CHECK_U64(seen.nstates, 2);
	CHECK_STR(seen.state0, "Running");
	CHECK_STR(seen.state1, "Paused");
	CHECK_STR(seen.page, "2");
	CHECK(!seen.has_missing);
	CHECK_INT(seen.json_ret, 0); /* empty body allowed */
	CHECK(seen.json_null);

	/* Percent-decoding of path and query; metadata is itself an encoded query string. */
	do_request(EVHTTP_REQ_GET, "/sandboxes/a%20b/x?metadata=team%3Dinfra%26p%3Dq&state=A&state=B&state=C&state=D",
		   NULL, "json", 1);
	CHECK_INT(seen.path_ret, 0);
	CHECK_STR(seen.path, "/sandboxes/a b/x");
	CHECK_U64(seen.nstates, 3); /* capped at max */
	CHECK_STR(seen.state2, "C");

	/* An encoded NUL in the path is rejected, not truncated. */
	do_request(EVHTTP_REQ_GET, "/sandboxes/a%00b", NULL, "json", 1);
	CHECK_INT(seen.path_ret, -EINVAL);

	/* JSON bodies. */
	do_request(EVHTTP_REQ_POST, "/sandboxes", "{\"name\":\"x1\"}", "json", 0);
	CHECK_INT(seen.json_ret, 0);
	CHECK_STR(seen.json_name, "x1");
	do_request(EVHTTP_REQ_POST, "/sandboxes", " \n\t", "json", 0);
	CHECK_INT(seen.json_ret, -EINVAL);
	CHECK(strstr(seen.json_msg, "empty") != NULL);
	do_request(EVHTTP_REQ_POST, "/sandboxes", "{\"name\":", "json", 0);
	CHECK_INT(seen.json_ret, -EINVAL);
	CHECK(strstr(seen.json_msg, "not valid JSON") != NULL);
	do_request(EVHTTP_REQ_POST, "/sandboxes", "{\"name\":\"a\",\"name\":\"b\"}", "json", 0);
	CHECK_INT(seen.json_ret, -EINVAL); /* duplicate keys are refused */
	/* Nesting past HTTP_JSON_DEPTH_MAX is refused before parsing, with the rule named. */
	char deep[2 * 2000 + 1];
	memset(deep, '[', 2000);
	memset(deep + 2000, ']', 2000);
	deep[4000] = '\0';
	do_request(EVHTTP_REQ_POST, "/sandboxes", deep, "json", 0);
	CHECK_INT(seen.json_ret, -EINVAL);
	CHECK(strstr(seen.json_msg, "deeper than 32 levels") != NULL);

	/* Error and empty replies. */
	do_request(EVHTTP_REQ_GET, "/sandboxes/abc", NULL, "error", 1);
	CHECK_INT(got.status, 404);
	CHECK_STR(got.body, "{\"code\":\"SANDBOX::NOT_FOUND\",\"message\":\"sandbox 'abc' not found\"}");
	CHECK_STR(got.ctype, "application/json");
	do_request(EVHTTP_REQ_DELETE, "/sandboxes/abc", NULL, "empty", 1);
	CHECK_INT(got.status, 204);
	CHECK_STR(got.body, "");

	evhttp_connection_free(conn);
	evhttp_free(http);
	event_base_free(base);
}

static void test_json_depth(void)
{
	const char *ok32 = "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]";
	CHECK(!json_depth_exceeds(ok32, strlen(ok32), 32));
	CHECK(json_depth_exceeds(ok32, strlen(ok32), 31));
	const char *mixed = "{\"a\":{\"b\":[1,{}]}}";
	CHECK(!json_depth_exceeds(mixed, strlen(mixed), 4));
	CHECK(json_depth_exceeds(mixed, strlen(mixed), 3));
	/* Brackets inside strings, escaped quotes included, do not count. */
	const char *str = "{\"k\":\"[[[[\\\"{{{{\"}";
	CHECK(!json_depth_exceeds(str, strlen(str), 1));
	/* Closing brackets never drive the depth negative to buy room. */
	CHECK(json_depth_exceeds("]]]][[[", 7, 2));
}

int main(void)
{
	test_json_depth();
	test_split_path();
	test_reason();
	test_method_name();
	test_requests();
	return check_summary("test_httputil");
}
