/*
 * The built-in reverse proxy (reference §2.1): ANY /proxy/{port}/{rest}?{query} is forwarded to
 * http://127.0.0.1:{port}/{rest}?{query} inside the sandbox. corrald sends every
 * /sandboxes/{id}/proxy/{port}/... for a port other than execd's own here. The client is the
 * shared one (src/shared/revproxy.h): streaming, keep-alive pool per port, WebSocket splice.
 * Nothing listening, or no HTTP answer, before the reply starts: 502 text/plain "Bad Gateway".
 */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>

#define PROXY_MAX_QUEUED (1u << 20) /* response bytes queued to a slow client before we pause */
#define PROXY_TIMEOUT_S 3600        /* backend inactivity */
#define PROXY_MAX_IDLE 64           /* keep-alive backend connections kept, all ports together */

void proxy_init(struct event_base *base);
/* Handle req when path is /proxy/...; false when it is not a proxy path. */
bool proxy_dispatch(struct evhttp_request *req, const char *path);
