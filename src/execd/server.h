/* The HTTP/1.1 listener on the unix socket and the request router. */
#pragma once

#include <stddef.h>

#include <event2/event.h>

#include "shared/error.h"

#define SERVER_MAX_HEADERS_SIZE (64 * 1024)
/* evhttp buffers whole bodies; the largest is a files upload. */
#define SERVER_MAX_BODY_SIZE (1024LL << 20)

#define SERVER_BACKLOG 1024

/* Listen on a new unix socket at socket_path (a stale socket there is replaced). */
int server_start(struct event_base *base, const char *socket_path, struct error *err);
/* Listen on fd, an inherited unix stream socket already bound by the runtime outside the sandbox
 * (execd never sees its path); made close-on-exec here so no command inherits it. */
int server_start_fd(struct event_base *base, int fd, struct error *err);
void server_stop(void);

/* Bytes of replies not yet written to their clients' sockets. */
size_t server_unsent(void);
/* From now on POST /command and /session are refused (410 SANDBOX::ENDED, naming why). */
void server_set_ending(const char *why);
