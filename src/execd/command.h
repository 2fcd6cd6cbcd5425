/* HTTP handlers of the /command API (reference §2.4, plus the id and ?wait= extensions). */
#pragma once

#include <event2/http.h>

#include "shared/httputil.h"

#define COMMAND_MAX_BODY (1u << 20)
#define COMMAND_PING_MS 3000
#define COMMAND_STATUS_WAIT_MAX_S 60

void command_run(struct evhttp_request *req);                      /* POST /command */
void command_interrupt(struct evhttp_request *req, struct http_query *q); /* DELETE /command */
void command_status(struct evhttp_request *req, const char *id, struct http_query *q);
void command_logs(struct evhttp_request *req, const char *id, struct http_query *q);

/*
 * The event-stream reply shared by /command and /session/{id}/run: headers (§2.3), then the
 * events of one execution, pings every 3 s while it runs; the reply ends right after its last
 * event. A client that goes away only detaches.
 */
struct execution;
void command_stream(struct evhttp_request *req, struct execution *ex);

