/* The HTTP/1.1 listener on the unix socket and the request router. */
#pragma once

#include <event2/event.h>

#include "shared/error.h"

#define SERVER_MAX_HEADERS_SIZE (64 * 1024)
/* evhttp buffers whole bodies; the largest is a files upload. */
#define SERVER_MAX_BODY_SIZE (1024LL << 20)

int server_start(struct event_base *base, const char *socket_path, struct error *err);
void server_stop(void);
