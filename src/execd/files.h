/* corral-execd files and directories API (/files/..., /directories/...). */
#pragma once

#include <event2/http.h>
#include <stdbool.h>

/*
 * Handle req when path (percent-decoded, no query) belongs to the files API. Returns true when it
 * handled the request (a reply has been sent or is in flight), false when the path is not its own.
 */
bool files_dispatch(struct evhttp_request *req, const char *path);
