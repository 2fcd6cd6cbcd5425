/*
 * ANY /proxy/{port}/{rest}?{query}: the shared reverse proxy (src/shared/revproxy.h) aimed at
 * 127.0.0.1:{port} inside the sandbox. execd's only client is corrald (the socket is not in the
 * sandbox), so the X-Forwarded-* corrald set pass through as they came (REVPROXY_FORWARDED_KEEP),
 * and Host is the client's (corrald sends "localhost").
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "proxy.h"
#include "shared/httputil.h"
#include "shared/log.h"
#include "shared/revproxy.h"
#include "shared/wire_error.h"

static struct revproxy *proxy_client;

void proxy_init(struct event_base *base)
{
	const struct revproxy_options o = {
		.peer_name = "backend",
		.io_timeout_ms = PROXY_TIMEOUT_S * 1000,
		.client_buffer_max = PROXY_MAX_QUEUED,
		.max_idle_total = PROXY_MAX_IDLE,
		.forwarded = REVPROXY_FORWARDED_KEEP,
	};
	if (revproxy_new(base, &o, &proxy_client) < 0)
		proxy_client = NULL; /* every proxied request answers 500 then */
}

/* Nothing answered on the port (or not HTTP): execd's plain-text 502, as before the reply starts. */
static void on_fail(struct evhttp_request *req, enum revproxy_failure why, const char *detail,
		    void *arg)
{
	log_debug("proxy to port %d: %s", (int)(intptr_t)arg, detail ? detail : "failed");
	struct evbuffer *b = evbuffer_new();
	if (b)
		evbuffer_add_printf(b, "Bad Gateway");
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; charset=utf-8");
	evhttp_send_reply(req, 502, "Bad Gateway", b);
	if (b)
		evbuffer_free(b);
}

bool proxy_dispatch(struct evhttp_request *req, const char *path)
{
	if (strncmp(path, "/proxy/", 7) != 0 && strcmp(path, "/proxy") != 0)
		return false;
	/* The raw URI, so the rest of the path and the query go out exactly as they came. */
	const char *uri = evhttp_request_get_uri(req);
	const char *p = uri + strspn(uri, "/");
	p += strcspn(p, "/?"); /* past "proxy" */
	if (*p != '/') {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "expected /proxy/{port}/...");
		return true;
	}
	p++;
	char *end;
	errno = 0;
	long port = strtol(p, &end, 10);
	if (end == p || errno || port < 1 || port > 65535 || (*end && *end != '/' && *end != '?')) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
				"port in /proxy/{port}/ must be an integer from 1 to 65535");
		return true;
	}
	char target[8192];
	if ((size_t)snprintf(target, sizeof(target), "%s%s", *end == '/' ? "" : "/", end) >= sizeof(target)) {
		http_send_error(req, 414, WIRE_CODE(INVALID_REQUEST_BODY), "request URI too long");
		return true;
	}
	for (const char *t = target; *t; t++)
		if ((unsigned char)*t <= 0x20 || *t == 0x7f) {
			http_send_error(req, 400, "INVALID_REQUEST_BODY",
					"proxied path contains a space or control character");
			return true;
		}
	if (!proxy_client) {
		http_send_error(req, 500, "RUNTIME_ERROR", "out of memory");
		return true;
	}
	const struct revproxy_target t = { .host = "127.0.0.1", .port = (uint16_t)port };
	revproxy_forward(proxy_client, &t, req, target, on_fail, (void *)(intptr_t)port);
	return true;
}
