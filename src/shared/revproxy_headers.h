/*
 * The header rules of the reverse proxy (revproxy.h): one set for both daemons, pure (they read an
 * evkeyvalq and write an evbuffer, no socket), so tests/unit/test_revproxy_headers.c checks them
 * line by line.
 *
 * Hop-by-hop, dropped in both directions: the fields RFC 9110 §7.6.1 names (Connection,
 * Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade), every field a Connection
 * header of the same message names, and Proxy-Authenticate / Proxy-Authorization, which RFC 9110
 * §11.7 scopes to the next hop (credentials for this proxy, never for the server behind it). An
 * upgrade the client asked for is asked again by the proxy itself ("Connection: Upgrade" plus the
 * client's Upgrade), since those two are hop-by-hop too.
 *
 * Always set by the proxy, whatever the client sent: Host (see struct revproxy_head), Content-Length
 * (the body is read whole before it is forwarded), and Expect is dropped (the front answered it).
 *
 * X-Forwarded: one rule, decided by whether the proxy's immediate client is trusted.
 *  - REVPROXY_FORWARDED_SET, at the edge (corrald: its clients are untrusted network clients).
 *    X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and Forwarded from the client are
 *    dropped, and the proxy sets X-Forwarded-For to the client's socket address, X-Forwarded-Proto
 *    to "http" and X-Forwarded-Host to the Host the client sent. A server in the sandbox can
 *    believe all three: nobody but corrald wrote them. Replace, not append: an appended list keeps
 *    the client's entries ahead of corrald's, and a server that reads the first one (most do) would
 *    take a forged address for one corrald vouched for; corral has no trusted front of its own
 *    whose entries would be worth keeping.
 *  - REVPROXY_FORWARDED_KEEP, behind a trusted proxy (execd: its only client is corrald, on a
 *    socket no sandbox process can reach). They pass as they came; a missing X-Forwarded-For (the
 *    client's address, 127.0.0.1 for a unix-socket client) or X-Forwarded-Proto ("http") is added,
 *    and a missing X-Forwarded-Host too when this hop replaces Host.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct evbuffer;
struct evkeyvalq;

enum revproxy_forwarded {
	REVPROXY_FORWARDED_SET,
	REVPROXY_FORWARDED_KEEP,
};

/* What the proxy sends upstream for one client request. */
struct revproxy_head {
	const char *method;
	const char *target;              /* origin-form request-target, checked by the caller */
	const struct evkeyvalq *headers; /* the client's */
	const char *client_addr;         /* the client's IP address; NULL for a unix-socket client */
	const char *host;         /* Host sent upstream; NULL: the client's own (host_default if none) */
	const char *host_default; /* Host when host is NULL and the client sent none */
	enum revproxy_forwarded forwarded;
	const char *const *drop; /* NULL-terminated: more fields never forwarded (credentials) */
	size_t body_len;
	bool body_method; /* POST/PUT/PATCH: "Content-Length: 0" for an empty body too */
};

/*
 * Is the field name[0..len) hop-by-hop for a message whose Connection header values are given
 * (connection: the values of every Connection field of the message joined by commas, or NULL)?
 */
bool revproxy_hop_by_hop(const char *name, size_t len, const char *connection,
			 size_t connection_len);

/*
 * Did the client ask for a protocol upgrade (a Connection field listing "upgrade" and a valid
 * Upgrade field)? ret_protocol gets the Upgrade value.
 */
bool revproxy_wants_upgrade(const struct evkeyvalq *headers, const char **ret_protocol);

/*
 * Append the request head (request line through the empty line) to out. Fields with a CR or LF in
 * the name or value are dropped. Returns 0 or -ENOMEM.
 */
int revproxy_head_write(struct evbuffer *out, const struct revproxy_head *h);

/*
 * Is a response field kept on its way to the client? connection as for revproxy_hop_by_hop, from
 * the response. Content-Length is kept only when keep_length (the reply is relayed with upstream's
 * framing: a length-delimited body, or a HEAD).
 */
bool revproxy_response_field_kept(const char *name, size_t len, const char *connection,
				  size_t connection_len, bool keep_length);
