/*
 * The reverse proxy's header rules (src/shared/revproxy_headers.c), byte for byte: which fields are
 * hop-by-hop, which a Connection field adds, what the two X-Forwarded modes send upstream.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "shared/macro.h"
#include "shared/revproxy_headers.h"

#include "check.h"

static void test_hop_by_hop(void)
{
	static const struct {
		const char *name, *connection;
		bool hop;
	} cases[] = {
		/* RFC 9110 §7.6.1 */
		{ "Connection", NULL, true },
		{ "keep-alive", NULL, true },
		{ "Proxy-Connection", NULL, true },
		{ "TE", NULL, true },
		{ "Trailer", NULL, true },
		{ "transfer-encoding", NULL, true },
		{ "Upgrade", NULL, true },
		/* RFC 9110 §11.7: one hop's credentials */
		{ "Proxy-Authorization", NULL, true },
		{ "Proxy-Authenticate", NULL, true },
		/* end to end */
		{ "Proxy-Status", NULL, false },
		{ "Trailers", NULL, false },
		{ "Content-Length", NULL, false },
		{ "Date", NULL, false },
		{ "X-Keep", "close", false },
		/* named by Connection: whole tokens, any case, any spacing */
		{ "X-Drop-Me", "close, x-drop-me", true },
		{ "x-b", " x-a ,X-B ", true },
		{ "X-Drop", "close, x-drop-me", false },
		{ "X-Drop-Me-Too", "x-drop-me", false },
		{ "", "close", false },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *c = cases[i].connection;
		bool got = revproxy_hop_by_hop(cases[i].name, strlen(cases[i].name), c,
					       c ? strlen(c) : 0);
		if (got != cases[i].hop)
			fprintf(stderr, "hop-by-hop '%s' (Connection: %s): got %d\n", cases[i].name,
				c ? c : "-", got);
		CHECK(got == cases[i].hop);
	}
}

static void test_response_fields(void)
{
	CHECK(!revproxy_response_field_kept("Content-Length", 14, NULL, 0, false));
	CHECK(revproxy_response_field_kept("Content-Length", 14, NULL, 0, true));
	CHECK(revproxy_response_field_kept("Date", 4, NULL, 0, false));
	CHECK(revproxy_response_field_kept("Set-Cookie", 10, "keep-alive", 10, false));
	CHECK(!revproxy_response_field_kept("Proxy-Authenticate", 18, NULL, 0, true));
	CHECK(!revproxy_response_field_kept("Keep-Alive", 10, NULL, 0, true));
	CHECK(!revproxy_response_field_kept("X-Hop", 5, "X-Hop", 5, true));
}

struct hdr {
	const char *name, *value;
};

static struct evkeyvalq *headers_of(const struct hdr *h)
{
	struct evkeyvalq *q = calloc(1, sizeof(*q));
	TAILQ_INIT(q);
	/* Inserted as they are: the rules must hold without evhttp's own checks (a folded value). */
	for (; h->name; h++) {
		struct evkeyval *kv = calloc(1, sizeof(*kv));
		kv->key = strdup(h->name);
		kv->value = strdup(h->value);
		TAILQ_INSERT_TAIL(q, kv, next);
	}
	return q;
}

static void headers_free(struct evkeyvalq *q)
{
	evhttp_clear_headers(q);
	free(q);
}

/* The head revproxy_head_write makes for h, as a string (static). */
static const char *head_of(const struct revproxy_head *h)
{
	static char s[4096];
	struct evbuffer *b = evbuffer_new();
	CHECK_INT(revproxy_head_write(b, h), 0);
	size_t n = evbuffer_get_length(b);
	CHECK(n < sizeof(s));
	n = MIN(n, sizeof(s) - 1);
	evbuffer_remove(b, s, n);
	s[n] = 0;
	evbuffer_free(b);
	return s;
}

static const char *const credentials[] = { "Authorization", "Cookie", NULL };

static void test_edge(void)
{
	/* Attack: a client forges every forwarding field and smuggles hop-by-hop ones upstream. */
	struct evkeyvalq *q = headers_of((const struct hdr[]){
		{ "Host", "front.example:8080" },
		{ "Connection", "X-Drop-Me, close" },
		{ "X-Drop-Me", "1" },
		{ "Keep-Alive", "300" },
		{ "TE", "trailers" },
		{ "Trailer", "X-T" },
		{ "Transfer-Encoding", "chunked" },
		{ "Proxy-Authorization", "Basic cA==" },
		{ "Proxy-Connection", "keep-alive" },
		{ "Upgrade", "h2c" }, /* not asked for: Connection does not list upgrade */
		{ "Authorization", "Bearer secret" },
		{ "cookie", "a=b" },
		{ "X-Forwarded-For", "6.6.6.6" },
		{ "x-forwarded-host", "evil.example" },
		{ "X-Forwarded-Proto", "https" },
		{ "Forwarded", "for=6.6.6.6;proto=https" },
		{ "Content-Length", "99" },
		{ "Expect", "100-continue" },
		{ "X-Fold", "a\r\n b" },
		{ "X-Keep", "kept" },
		{ "Content-Type", "text/plain" },
		{ NULL, NULL },
	});
	struct revproxy_head h = {
		.method = "POST",
		.target = "/x?y=1",
		.headers = q,
		.client_addr = "192.0.2.7",
		.host = "localhost",
		.host_default = "localhost",
		.forwarded = REVPROXY_FORWARDED_SET,
		.drop = credentials,
		.body_len = 5,
		.body_method = true,
	};
	CHECK_STR(head_of(&h), "POST /x?y=1 HTTP/1.1\r\n"
			       "Host: localhost\r\n"
			       "X-Keep: kept\r\n"
			       "Content-Type: text/plain\r\n"
			       "X-Forwarded-Proto: http\r\n"
			       "X-Forwarded-Host: front.example:8080\r\n"
			       "X-Forwarded-For: 192.0.2.7\r\n"
			       "Content-Length: 5\r\n"
			       "\r\n");

	/* A body method says Content-Length: 0; a unix-socket client has no address to give. */
	h.body_len = 0;
	h.client_addr = NULL;
	CHECK(strstr(head_of(&h), "\r\nContent-Length: 0\r\n") != NULL);
	CHECK(strstr(head_of(&h), "\r\nX-Forwarded-For: 127.0.0.1\r\n") != NULL);
	h.method = "GET";
	h.body_method = false;
	CHECK(strstr(head_of(&h), "Content-Length") == NULL);
	headers_free(q);
}

static void test_behind_corrald(void)
{
	/* What corrald sends execd: passed on as it came. */
	struct evkeyvalq *q = headers_of((const struct hdr[]){
		{ "Host", "localhost" },
		{ "X-Keep", "kept" },
		{ "X-Forwarded-Proto", "http" },
		{ "X-Forwarded-Host", "front.example:8080" },
		{ "X-Forwarded-For", "192.0.2.7" },
		{ "Content-Length", "0" },
		{ "Connection", "keep-alive" },
		{ NULL, NULL },
	});
	struct revproxy_head h = {
		.method = "GET",
		.target = "/",
		.headers = q,
		.client_addr = NULL,
		.host_default = "127.0.0.1:8000",
		.forwarded = REVPROXY_FORWARDED_KEEP,
	};
	CHECK_STR(head_of(&h), "GET / HTTP/1.1\r\n"
			       "Host: localhost\r\n"
			       "X-Keep: kept\r\n"
			       "X-Forwarded-Proto: http\r\n"
			       "X-Forwarded-Host: front.example:8080\r\n"
			       "X-Forwarded-For: 192.0.2.7\r\n"
			       "\r\n");
	headers_free(q);

	/* A direct client without any: Host defaults to the target, the missing ones are added. */
	q = headers_of((const struct hdr[]){ { "Accept", "*/*" }, { NULL, NULL } });
	h.headers = q;
	CHECK_STR(head_of(&h), "GET / HTTP/1.1\r\n"
			       "Host: 127.0.0.1:8000\r\n"
			       "Accept: */*\r\n"
			       "X-Forwarded-Proto: http\r\n"
			       "X-Forwarded-For: 127.0.0.1\r\n"
			       "\r\n");
	headers_free(q);
}

static void test_upgrade(void)
{
	/* Connection fields are read together: the second one asks for the upgrade. */
	struct evkeyvalq *q = headers_of((const struct hdr[]){
		{ "Host", "x" },
		{ "Connection", "keep-alive" },
		{ "Connection", "Upgrade, X-A" },
		{ "X-A", "dropped" },
		{ "Upgrade", "websocket" },
		{ "Sec-WebSocket-Key", "k" },
		{ NULL, NULL },
	});
	const char *proto = NULL;
	CHECK(revproxy_wants_upgrade(q, &proto));
	CHECK_STR(proto, "websocket");
	struct revproxy_head h = {
		.method = "GET",
		.target = "/chat",
		.headers = q,
		.forwarded = REVPROXY_FORWARDED_KEEP,
	};
	CHECK_STR(head_of(&h), "GET /chat HTTP/1.1\r\n"
			       "Host: x\r\n"
			       "Sec-WebSocket-Key: k\r\n"
			       "X-Forwarded-Proto: http\r\n"
			       "X-Forwarded-For: 127.0.0.1\r\n"
			       "Connection: Upgrade\r\n"
			       "Upgrade: websocket\r\n"
			       "\r\n");
	headers_free(q);

	const struct hdr *const no[] = {
		(const struct hdr[]){ { "Connection", "upgrades" }, { "Upgrade", "ws" }, { NULL, NULL } },
		(const struct hdr[]){ { "Connection", "upgrade" }, { NULL, NULL } },
		(const struct hdr[]){ { "Upgrade", "ws" }, { NULL, NULL } },
		(const struct hdr[]){ { "Connection", "upgrade" }, { "Upgrade", "" }, { NULL, NULL } },
	};
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		q = headers_of(no[i]);
		CHECK(!revproxy_wants_upgrade(q, NULL));
		headers_free(q);
	}
}

int main(void)
{
	test_hop_by_hop();
	test_response_fields();
	test_edge();
	test_behind_corrald();
	test_upgrade();
	return check_summary("revproxy_headers");
}
