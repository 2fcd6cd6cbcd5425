/*
 * The reverse proxy's header rules: see revproxy_headers.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>

#include "shared/http_parse.h"
#include "shared/macro.h"
#include "shared/revproxy_headers.h"

static bool name_is(const char *name, size_t len, const char *what)
{
	return len == strlen(what) && strncasecmp(name, what, len) == 0;
}

bool revproxy_hop_by_hop(const char *name, size_t len, const char *connection,
			 size_t connection_len)
{
	static const char *const hop[] = {
		/* RFC 9110 §7.6.1 */
		"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding",
		"Upgrade",
		/* RFC 9110 §11.7.1, §11.7.2: this hop's credentials */
		"Proxy-Authenticate", "Proxy-Authorization",
	};
	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (name_is(name, len, hop[i]))
			return true;
	if (!connection || !len)
		return false;
	char tok[128];
	if (len >= sizeof(tok))
		return false; /* no token that long is worth naming; it is not hop-by-hop */
	memcpy(tok, name, len);
	tok[len] = 0;
	return http_list_has_token(connection, connection_len, tok);
}

static bool field_ok(const char *s)
{
	return !strpbrk(s, "\r\n");
}

/* Every Connection field of headers joined with commas (malloc'd), or NULL when there is none. */
static char *connection_values(const struct evkeyvalq *headers)
{
	size_t len = 0;
	struct evkeyval *kv;
	TAILQ_FOREACH (kv, headers, next)
		if (!strcasecmp(kv->key, "Connection"))
			len += strlen(kv->value) + 1;
	if (!len)
		return NULL;
	char *s = malloc(len), *p = s;
	if (!s)
		return NULL;
	TAILQ_FOREACH (kv, headers, next)
		if (!strcasecmp(kv->key, "Connection")) {
			if (p != s)
				*p++ = ',';
			size_t n = strlen(kv->value);
			memcpy(p, kv->value, n);
			p += n;
		}
	*p = 0;
	return s;
}

static const char *find(const struct evkeyvalq *headers, const char *name)
{
	struct evkeyval *kv;
	TAILQ_FOREACH (kv, headers, next)
		if (!strcasecmp(kv->key, name))
			return kv->value;
	return NULL;
}

bool revproxy_wants_upgrade(const struct evkeyvalq *headers, const char **ret_protocol)
{
	_cleanup_free_ char *conn = connection_values(headers);
	const char *up = find(headers, "Upgrade");
	if (!conn || !up || !*up || !field_ok(up) || !http_list_has_token(conn, strlen(conn), "upgrade"))
		return false;
	if (ret_protocol)
		*ret_protocol = up;
	return true;
}

static bool is_forwarded_field(const char *name)
{
	return !strcasecmp(name, "X-Forwarded-For") || !strcasecmp(name, "X-Forwarded-Host") ||
	       !strcasecmp(name, "X-Forwarded-Proto") || !strcasecmp(name, "Forwarded");
}

static bool dropped(const char *name, const char *const *drop)
{
	for (; drop && *drop; drop++)
		if (!strcasecmp(name, *drop))
			return true;
	return false;
}

int revproxy_head_write(struct evbuffer *out, const struct revproxy_head *h)
{
	_cleanup_free_ char *conn = connection_values(h->headers);
	size_t conn_len = conn ? strlen(conn) : 0;
	const char *client_host = find(h->headers, "Host");
	const char *upgrade = NULL;
	bool upgrading = revproxy_wants_upgrade(h->headers, &upgrade);
	bool keep = h->forwarded == REVPROXY_FORWARDED_KEEP;
	bool have_xff = false, have_xfh = false, have_xfp = false;
	int r = 0;

	if (client_host && !field_ok(client_host))
		client_host = NULL;
	const char *host = h->host ? h->host : client_host ? client_host : h->host_default;
	r |= evbuffer_add_printf(out, "%s %s HTTP/1.1\r\n", h->method, h->target) < 0;
	if (host)
		r |= evbuffer_add_printf(out, "Host: %s\r\n", host) < 0;

	struct evkeyval *kv;
	TAILQ_FOREACH (kv, h->headers, next) {
		if (revproxy_hop_by_hop(kv->key, strlen(kv->key), conn, conn_len) ||
		    !strcasecmp(kv->key, "Host") || !strcasecmp(kv->key, "Content-Length") ||
		    !strcasecmp(kv->key, "Expect") || dropped(kv->key, h->drop) ||
		    !field_ok(kv->key) || !field_ok(kv->value))
			continue;
		if (is_forwarded_field(kv->key)) {
			if (!keep)
				continue;
			have_xff |= !strcasecmp(kv->key, "X-Forwarded-For");
			have_xfh |= !strcasecmp(kv->key, "X-Forwarded-Host");
			have_xfp |= !strcasecmp(kv->key, "X-Forwarded-Proto");
		}
		r |= evbuffer_add_printf(out, "%s: %s\r\n", kv->key, kv->value) < 0;
	}
	if (!have_xfp)
		r |= evbuffer_add(out, "X-Forwarded-Proto: http\r\n", 25);
	/* The Host the client asked for, when this hop sends another. */
	if (!have_xfh && h->host && client_host)
		r |= evbuffer_add_printf(out, "X-Forwarded-Host: %s\r\n", client_host) < 0;
	if (!have_xff) {
		const char *addr = h->client_addr && *h->client_addr && field_ok(h->client_addr)
					   ? h->client_addr
					   : "127.0.0.1";
		r |= evbuffer_add_printf(out, "X-Forwarded-For: %s\r\n", addr) < 0;
	}
	if (upgrading)
		r |= evbuffer_add_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade) < 0;
	if (h->body_len || h->body_method)
		r |= evbuffer_add_printf(out, "Content-Length: %zu\r\n", h->body_len) < 0;
	r |= evbuffer_add(out, "\r\n", 2);
	return r ? -ENOMEM : 0;
}

bool revproxy_response_field_kept(const char *name, size_t len, const char *connection,
				  size_t connection_len, bool keep_length)
{
	if (revproxy_hop_by_hop(name, len, connection, connection_len))
		return false;
	return keep_length || !name_is(name, len, "Content-Length");
}
