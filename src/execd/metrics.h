/* GET /metrics (reference §2.8), from the sandbox's own cgroup. */
#pragma once

#include <event2/http.h>

void metrics_get(struct evhttp_request *req);
