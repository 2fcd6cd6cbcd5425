#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "command.h"
#include "files.h"
#include "metrics.h"
#include "proxy.h"
#include "server.h"
#include "session.h"
#include "shared/httputil.h"
#include "shared/log.h"
#include "shared/wire_error.h"

static struct evhttp *http;

/*
 * Every client connection that has sent a request, so that an ending execd can wait until their
 * replies have left (server_unsent). We own each one's evhttp close callback; other code sets its
 * own through http_conn_set_closecb(), which we chain.
 */
struct conn {
	struct evhttp_connection *evcon;
	http_closecb_fn cb;
	void *arg;
	LIST_ENTRY(conn) link;
};
static LIST_HEAD(, conn) conns = LIST_HEAD_INITIALIZER(conns);
static const char *ending; /* NULL, or why no new command is taken */

static struct conn *conn_find(struct evhttp_connection *evcon)
{
	struct conn *c;
	LIST_FOREACH(c, &conns, link)
		if (c->evcon == evcon)
			return c;
	return NULL;
}

static void conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct conn *c = arg;
	http_closecb_fn cb = c->cb;
	void *cb_arg = c->arg;
	LIST_REMOVE(c, link);
	free(c);
	if (cb)
		cb(evcon, cb_arg);
}

static bool closecb_hook(struct evhttp_connection *evcon, http_closecb_fn cb, void *arg)
{
	struct conn *c = conn_find(evcon);
	if (!c)
		return false;
	c->cb = cb;
	c->arg = arg;
	return true;
}

/* Before any handler runs, so every close callback a handler sets is chained. */
static void conn_track(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	if (!evcon || conn_find(evcon))
		return;
	struct conn *c = calloc(1, sizeof(*c));
	if (!c)
		return; /* out of memory: an ending execd will not wait for this one */
	c->evcon = evcon;
	LIST_INSERT_HEAD(&conns, c, link);
	evhttp_connection_set_closecb(evcon, conn_closed, c);
}

size_t server_unsent(void)
{
	size_t n = 0;
	struct conn *c;
	LIST_FOREACH(c, &conns, link) {
		struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
		if (bev)
			n += evbuffer_get_length(bufferevent_get_output(bev));
	}
	return n;
}

void server_set_ending(const char *why)
{
	ending = why;
}

static const char *method_name(enum evhttp_cmd_type m)
{
	const char *s = http_method_name(m);
	return s ? s : "?";
}

static void not_found(struct evhttp_request *req, const char *path)
{
	http_send_error(req, 404, "NOT_FOUND", "no route for %s %s",
			method_name(evhttp_request_get_command(req)), path);
}

static void bad_method(struct evhttp_request *req, const char *path)
{
	http_send_error(req, 405, "METHOD_NOT_ALLOWED", "method %s is not allowed on %s",
			method_name(evhttp_request_get_command(req)), path);
}

static void route(struct evhttp_request *req, void *arg)
{
	char path[4096];
	if (http_request_path(req, path, sizeof(path)) < 0) {
		http_send_error(req, 400, "INVALID_REQUEST_BODY", "malformed or too long request path");
		return;
	}
	conn_track(req);
	if (files_dispatch(req, path) || proxy_dispatch(req, path))
		return;
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	char segbuf[4096];
	memcpy(segbuf, path, sizeof(segbuf));
	char *seg[6];
	int n = http_split_path(segbuf, seg, 6);
	if (n < 0) {
		not_found(req, path);
		return;
	}
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	if (!q) {
		http_send_error(req, 500, "RUNTIME_ERROR", "out of memory");
		return;
	}
	log_debug("%s %s", method_name(m), path);
	if (ending && m == EVHTTP_REQ_POST &&
	    ((n == 1 && strcmp(seg[0], "command") == 0) || strcmp(seg[0], "session") == 0)) {
		/* Started now, it would be killed with the sandbox before it could report. */
		http_send_error(req, 410, WIRE_CODE(SANDBOX_ENDED), "the sandbox is ending: %s", ending);
		return;
	}

	if (n == 1 && strcmp(seg[0], "ping") == 0) {
		if (m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD)
			http_send_empty(req, 200);
		else
			bad_method(req, path);
		return;
	}
	if (n >= 1 && strcmp(seg[0], "command") == 0) {
		if (n == 1) {
			if (m == EVHTTP_REQ_POST)
				command_run(req);
			else if (m == EVHTTP_REQ_DELETE)
				command_interrupt(req, q);
			else
				bad_method(req, path);
			return;
		}
		if (n == 3 && strcmp(seg[1], "status") == 0) {
			if (m == EVHTTP_REQ_GET)
				command_status(req, seg[2], q);
			else
				bad_method(req, path);
			return;
		}
		if (n == 3 && strcmp(seg[2], "logs") == 0) {
			if (m == EVHTTP_REQ_GET)
				command_logs(req, seg[1], q);
			else
				bad_method(req, path);
			return;
		}
	}
	if (n >= 1 && strcmp(seg[0], "session") == 0) {
		if (n == 1 && m == EVHTTP_REQ_POST) {
			session_create(req);
			return;
		}
		if (n == 2 && m == EVHTTP_REQ_DELETE) {
			session_delete(req, seg[1]);
			return;
		}
		if (n == 3 && strcmp(seg[2], "run") == 0 && m == EVHTTP_REQ_POST) {
			session_run(req, seg[1]);
			return;
		}
		if (n <= 3) {
			bad_method(req, path);
			return;
		}
	}
	if (n == 1 && strcmp(seg[0], "metrics") == 0) {
		if (m == EVHTTP_REQ_GET)
			metrics_get(req);
		else
			bad_method(req, path);
		return;
	}
	not_found(req, path);
}

/* Serve on fd, a listening (or only bound) unix socket; takes ownership. what names it in errors. */
static int serve_fd(struct event_base *base, int fd, const char *what, struct error *err)
{
	http = evhttp_new(base);
	if (!http) {
		close(fd);
		return error_set(err, ENOMEM, "evhttp_new");
	}
	evhttp_set_max_headers_size(http, SERVER_MAX_HEADERS_SIZE);
	evhttp_set_max_body_size(http, SERVER_MAX_BODY_SIZE);
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE |
						 EVHTTP_REQ_PUT | EVHTTP_REQ_HEAD | EVHTTP_REQ_PATCH |
						 EVHTTP_REQ_OPTIONS);
	/* No invented Content-Type on empty replies (ping, "success with no data"). */
	evhttp_set_default_content_type(http, NULL);
	evhttp_set_gencb(http, route, NULL);
	http_set_closecb_hook(closecb_hook);
	if (!evhttp_accept_socket_with_handle(http, fd)) {
		close(fd);
		return error_set(err, EIO, "evhttp cannot accept on %s", what);
	}
	return 0;
}

int server_start(struct event_base *base, const char *socket_path, struct error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(socket_path) >= sizeof(sa.sun_path))
		return error_set(err, ENAMETOOLONG, "socket path '%s' is too long", socket_path);
	strcpy(sa.sun_path, socket_path);

	/* A stale socket from an earlier run: remove it, but never anything that is not a socket. */
	struct stat st;
	if (lstat(socket_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return error_set(err, EEXIST, "'%s' exists and is not a socket", socket_path);
		if (unlink(socket_path) < 0)
			return error_set_errno(err, errno, "remove stale socket '%s'", socket_path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return error_set_errno(err, errno, "socket");
	mode_t old = umask(0177); /* the socket is created 0600 */
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(socket_path, 0600) < 0 || listen(fd, SERVER_BACKLOG) < 0) {
		int e = errno;
		close(fd);
		return error_set_errno(err, e, "listen on '%s'", socket_path);
	}
	char what[PATH_MAX + 16];
	snprintf(what, sizeof(what), "'%s'", socket_path);
	return serve_fd(base, fd, what, err);
}

int server_start_fd(struct event_base *base, int fd, struct error *err)
{
	struct stat st;
	int type = 0;
	socklen_t len = sizeof(type);
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return error_set(err, EBADF, "--listen-fd %d is not a stream socket", fd);
	/* listen() here, not in whoever bound it: the listener's credentials are then execd's, which
	 * is what a connecting corrald checks (SO_PEERCRED). */
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ||
	    listen(fd, SERVER_BACKLOG) < 0)
		return error_set_errno(err, errno, "listen on --listen-fd %d", fd);
	char what[32];
	snprintf(what, sizeof(what), "fd %d", fd);
	return serve_fd(base, fd, what, err);
}

void server_stop(void)
{
	if (http)
		evhttp_free(http);
	http = NULL;
}
