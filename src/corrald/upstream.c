/*
 * corrald's client towards each sandbox's corral-execd: the shared reverse proxy (revproxy.h)
 * aimed at the sandbox's unix socket, with corrald's header rules: execd gets Host: localhost, never
 * a credential of corrald's, and X-Forwarded-* that corrald set itself (its clients are untrusted).
 */
#include <errno.h>
#include <string.h>

#include "shared/wire_error.h"
#include "shared/httputil.h"

#include "upstream.h"

/* corrald's credentials: no business of the sandbox's. */
static const char *const credential_fields[] = { "Authorization", "Cookie", "OPEN-SANDBOX-API-KEY",
						 "OpenSandbox-Secure-Access", NULL };

static struct revproxy_options options = {
	.peer_name = "execd",
	.forwarded = REVPROXY_FORWARDED_SET,
	.host = "localhost",
	.drop = credential_fields,
};
static struct revproxy *client;

/* The client, made on first use with that base. NULL when out of memory. */
static struct revproxy *get_client(struct event_base *base)
{
	if (!client && revproxy_new(base, &options, &client) < 0)
		client = NULL;
	return client;
}

void upstream_configure(const struct upstream_options *o)
{
	options.connect_timeout_ms = o->connect_timeout_ms;
	options.io_timeout_ms = o->io_timeout_ms;
	options.idle_timeout_ms = o->idle_timeout_ms;
	options.max_idle_per_target = o->max_idle_per_socket;
	options.max_idle_total = o->max_idle_total;
	options.client_buffer_max = o->client_buffer_max;
	/* Taken by the next client; the current one finishes what it runs. */
	revproxy_free(client);
	client = NULL;
}

void upstream_set_broken_cb(upstream_broken_cb cb, void *arg)
{
	options.broken_cb = cb;
	options.broken_arg = arg;
	if (client)
		revproxy_set_broken_cb(client, cb, arg);
}

void upstream_proxy(struct event_base *base, const char *sock_path, pid_t peer_pid,
		    struct evhttp_request *req, const char *target, upstream_fail_cb fail_cb,
		    void *arg)
{
	for (const char *t = target; *t; t++)
		if ((unsigned char)*t <= 0x20 || *t == 0x7f) {
			http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_PARAMETER),
					"proxied path contains a space or control character");
			return;
		}
	if (target[0] != '/') {
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_PARAMETER),
				"proxied path must start with '/'");
		return;
	}
	switch (evhttp_request_get_command(req)) {
	case EVHTTP_REQ_GET: case EVHTTP_REQ_POST: case EVHTTP_REQ_HEAD: case EVHTTP_REQ_PUT:
	case EVHTTP_REQ_DELETE: case EVHTTP_REQ_OPTIONS: case EVHTTP_REQ_TRACE:
	case EVHTTP_REQ_PATCH:
		break;
	default:
		http_send_error(req, 405, WIRE_CODE(SANDBOX_INVALID_PARAMETER),
				"method not supported by the sandbox proxy");
		return;
	}
	struct revproxy *rp = get_client(base);
	if (!rp) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		return;
	}
	const struct revproxy_target t = { .unix_path = sock_path, .peer_pid = peer_pid };
	revproxy_forward(rp, &t, req, target, fail_cb, arg);
}

int upstream_ping(struct event_base *base, const char *sock_path, pid_t peer_pid, int timeout_ms,
		  void (*cb)(int result, void *arg), void *arg)
{
	struct revproxy *rp = get_client(base);
	if (!rp)
		return -ENOMEM;
	const struct revproxy_target t = { .unix_path = sock_path, .peer_pid = peer_pid };
	return revproxy_probe(rp, &t, "/ping", timeout_ms, cb, arg);
}

void upstream_shutdown(void)
{
	revproxy_free(client);
	client = NULL;
}

unsigned upstream_pool_idle(void)
{
	return revproxy_pool_idle(client);
}
