/* corral-execd files and directories API (/files/..., /directories/...). */
#pragma once

#include <event2/http.h>
#include <stdbool.h>

/*
 * Handle req when path (percent-decoded, no query) belongs to the files API. Returns true when it
 * handled the request (a reply has been sent or is in flight), false when the path is not its own.
 *
 * Request bodies are read from evhttp's input buffer, so the server must allow bodies as large as
 * the uploads it accepts (evhttp_set_max_body_size).
 */
bool files_dispatch(struct evhttp_request *req, const char *path);

/*
 * Directory that client paths are resolved in (the sandbox's "/"). No symlink or ".." in a
 * request can reach outside it. Defaults to $CORRAL_EXECD_FILES_ROOT, else "/". Returns 0 or a
 * negative errno (the previous root stays in effect). $CORRAL_EXECD_FILES_RESOLVE=fallback (tests)
 * makes resolution use the user-space walk even where openat2 exists.
 */
int files_set_root(const char *dir);
