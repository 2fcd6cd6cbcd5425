#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <sys/queue.h>
#include <event2/keyvalq_struct.h>

#include "httputil.h"

const char *http_method_name(enum evhttp_cmd_type m)
{
	switch (m) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_CONNECT: return "CONNECT";
	case EVHTTP_REQ_PATCH: return "PATCH";
	}
	return NULL;
}

const char *http_reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 416: return "Range Not Satisfiable";
	case 422: return "Unprocessable Entity";
	case 429: return "Too Many Requests";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Status";
	}
}

void http_send_json(struct evhttp_request *req, int status, json_t *body)
{
	struct evbuffer *buf = evbuffer_new();
	if (body) {
		char *s = json_dumps(body, JSON_COMPACT);
		json_decref(body);
		if (s) {
			evbuffer_add(buf, s, strlen(s));
			free(s);
		}
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
				  "application/json");
	}
	evhttp_send_reply(req, status, http_reason(status), buf);
	evbuffer_free(buf);
}

void http_send_error(struct evhttp_request *req, int status, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	http_send_json(req, status, json_pack("{s:s, s:s}", "code", code, "message", msg));
}

void http_send_empty(struct evhttp_request *req, int status)
{
	evhttp_send_reply(req, status, http_reason(status), NULL);
}

char *http_body_string(struct evhttp_request *req, size_t *ret_len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = in ? evbuffer_get_length(in) : 0;
	char *s = malloc(len + 1);
	if (!s)
		return NULL;
	if (len)
		evbuffer_copyout(in, s, len);
	s[len] = '\0';
	if (ret_len)
		*ret_len = len;
	return s;
}

bool json_depth_exceeds(const char *s, size_t len, unsigned max)
{
	unsigned depth = 0;
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (c == '[' || c == '{') {
			if (++depth > max)
				return true;
		} else if ((c == ']' || c == '}') && depth) {
			depth--;
		}
	}
	return false;
}

int http_body_json(struct evhttp_request *req, bool allow_empty, json_t **ret, char *msg, size_t msglen)
{
	size_t len;
	_cleanup_free_ char *s = http_body_string(req, &len);
	if (!s) {
		snprintf(msg, msglen, "out of memory reading the request body");
		return -ENOMEM;
	}
	size_t i = 0;
	while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
		i++;
	if (i == len) {
		*ret = NULL;
		if (allow_empty)
			return 0;
		snprintf(msg, msglen, "request body is empty; a JSON object is required");
		return -EINVAL;
	}
	if (json_depth_exceeds(s, len, HTTP_JSON_DEPTH_MAX)) {
		snprintf(msg, msglen, "request body nests JSON deeper than %d levels",
			 HTTP_JSON_DEPTH_MAX);
		return -EINVAL;
	}
	json_error_t jerr;
	json_t *j = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		snprintf(msg, msglen, "request body is not valid JSON: %s (line %d, column %d)",
			 jerr.text, jerr.line, jerr.column);
		return -EINVAL;
	}
	*ret = j;
	return 0;
}

int http_request_path(struct evhttp_request *req, char *buf, size_t len)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	if (!path || !*path)
		path = "/";
	size_t outlen;
	char *dec = evhttp_uridecode(path, 0, &outlen);
	if (!dec)
		return -EINVAL;
	if (outlen >= len || memchr(dec, '\0', outlen)) {
		free(dec);
		return -EINVAL;
	}
	memcpy(buf, dec, outlen + 1);
	free(dec);
	return 0;
}

struct http_query {
	struct evkeyvalq kv;
};

struct http_query *http_query_parse(struct evhttp_request *req)
{
	struct http_query *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	TAILQ_INIT(&q->kv);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
	if (query && evhttp_parse_query_str(query, &q->kv) < 0) {
		/* Malformed query: behave as if empty rather than failing the whole request. */
		evhttp_clear_headers(&q->kv);
		TAILQ_INIT(&q->kv);
	}
	return q;
}

void http_query_free(struct http_query *q)
{
	if (!q)
		return;
	evhttp_clear_headers(&q->kv);
	free(q);
}

const char *http_query_get(const struct http_query *q, const char *key)
{
	struct evkeyval *kv;
	TAILQ_FOREACH(kv, &q->kv, next)
		if (strcmp(kv->key, key) == 0)
			return kv->value;
	return NULL;
}

size_t http_query_get_all(const struct http_query *q, const char *key, const char **out, size_t max)
{
	size_t n = 0;
	struct evkeyval *kv;
	TAILQ_FOREACH(kv, &q->kv, next)
		if (strcmp(kv->key, key) == 0 && n < max)
			out[n++] = kv->value;
	return n;
}

int http_split_path(char *buf, char **segs, int max)
{
	int n = 0;
	char *p = buf;
	while (*p) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		if (n == max)
			return -E2BIG;
		segs[n++] = p;
		while (*p && *p != '/')
			p++;
		if (*p)
			*p++ = '\0';
	}
	return n;
}

static bool (*closecb_hook)(struct evhttp_connection *, http_closecb_fn, void *);

void http_set_closecb_hook(bool (*hook)(struct evhttp_connection *evcon, http_closecb_fn cb,
					void *arg))
{
	closecb_hook = hook;
}

void http_conn_set_closecb(struct evhttp_connection *evcon, http_closecb_fn cb, void *arg)
{
	if (!closecb_hook || !closecb_hook(evcon, cb, arg))
		evhttp_connection_set_closecb(evcon, cb, arg);
}
