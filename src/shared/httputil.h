/*
 * Glue between libevent's evhttp and the JSON APIs that corrald and corral-execd serve.
 * Both daemons reply with {"code","message"} errors; these helpers make that one call.
 */
#pragma once

#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "macro.h"

/* Reply with a JSON document (steals the reference to body; body may be NULL for an empty reply). */
void http_send_json(struct evhttp_request *req, int status, json_t *body);
/* Reply {"code": code, "message": formatted}. */
void http_send_error(struct evhttp_request *req, int status, const char *code, const char *fmt, ...)
	_printf_(4, 5);
/* Reply with status and an empty body (OpenSandbox's "success with no data"). */
void http_send_empty(struct evhttp_request *req, int status);
/* Standard reason phrase for a status code. */
const char *http_reason(int status);
/* The method's name ("GET", ... "PATCH"), or NULL for a type evhttp does not name. */
const char *http_method_name(enum evhttp_cmd_type m);

/*
 * JSON nested deeper than this is refused before it is parsed: no request body of either daemon
 * needs more than a few levels, and the parser and every walk over its result recurse per level.
 * json_depth_exceeds scans text for it (brackets outside strings) in one pass.
 */
#define HTTP_JSON_DEPTH_MAX 32
bool json_depth_exceeds(const char *s, size_t len, unsigned max);

/*
 * Parse the request body as JSON. On failure returns -EINVAL and fills msg (for a 4xx reply).
 * An empty body gives *ret = NULL and 0 when allow_empty, else an error.
 */
int http_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, char *msg, size_t msglen);
/* Copy of the whole request body, NUL-terminated; caller frees. */
char *http_body_string(struct evhttp_request *req, size_t *ret_len);

/* The path component of the request URI, percent-decoded into buf. -EINVAL when malformed. */
int http_request_path(struct evhttp_request *req, char *buf, size_t len);
/*
 * Query parameters. http_query_get returns the first value of key (decoded) or NULL;
 * http_query_get_all fills out[] with up to max values and returns how many. The returned
 * strings live as long as the struct http_query.
 */
struct http_query;
struct http_query *http_query_parse(struct evhttp_request *req);
void http_query_free(struct http_query *q);
const char *http_query_get(const struct http_query *q, const char *key);
size_t http_query_get_all(const struct http_query *q, const char *key, const char **out, size_t max);

/* Split "/a/b/c" into segments (in place in buf). Returns the count, or -E2BIG past max. */
int http_split_path(char *buf, char **segs, int max);

/*
 * Set the close callback of a server connection. corrald's front keeps a close callback of its own
 * on every client connection and chains the one set here (http_set_closecb_hook); without a hook
 * this is evhttp_connection_set_closecb(). cb NULL removes it.
 */
typedef void (*http_closecb_fn)(struct evhttp_connection *evcon, void *arg);
void http_conn_set_closecb(struct evhttp_connection *evcon, http_closecb_fn cb, void *arg);
/* hook returns false for a connection it does not track (then evhttp's own slot is used). */
void http_set_closecb_hook(bool (*hook)(struct evhttp_connection *evcon, http_closecb_fn cb,
					void *arg));

static inline void http_query_freep(struct http_query **q)
{
	http_query_free(*q);
}
#define _cleanup_query_ _cleanup_(http_query_freep)
