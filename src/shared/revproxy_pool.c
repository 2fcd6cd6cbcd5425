/*
 * Targets, connections and the keep-alive pool of the reverse proxy: see revproxy_pool.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "shared/macro.h"
#include "shared/revproxy_pool.h"
#include "shared/unixsock.h"

#define UNIX_PATH_MAX_LEN 511

int rp_target_key(const struct revproxy_target *t, char *buf, size_t len)
{
	int n;
	if (t->unix_path) {
		if (strlen(t->unix_path) > UNIX_PATH_MAX_LEN)
			return -ENAMETOOLONG;
		n = snprintf(buf, len, "unix %d %s", t->peer_pid > 0 ? (int)t->peer_pid : 0,
			     t->unix_path);
	} else if (t->host && t->port) {
		n = snprintf(buf, len, "tcp %s %u", t->host, (unsigned)t->port);
	} else {
		return -EINVAL;
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * AF_UNIX connects complete (or fail) at once on Linux; EAGAIN means the listener's backlog is
 * full and the caller retries. Paths too long for sun_path go through /proc/self/fd/<dirfd>/<name>.
 */
static int unix_connect(const char *path, pid_t peer_pid)
{
	struct sockaddr_un sa;
	_cleanup_close_ int dirfd = -1;
	int r = unix_sockaddr(path, &sa, &dirfd);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (RETRY_EINTR(connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0)
		return errno == EINPROGRESS ? -EAGAIN : -errno;
	/* The listener must be the sandbox's own PID 1: the process that called listen() on the
	 * socket (a backlog-full connect is refused above, so the peer is known here). */
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (peer_pid > 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
			     cred.pid != peer_pid))
		return -EPERM;
	return TAKE_FD(fd);
}

static int tcp_sockaddr(const struct revproxy_target *t, struct sockaddr_storage *ss,
			socklen_t *ret_len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, t->host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(t->port);
		*ret_len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, t->host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(t->port);
		*ret_len = sizeof(*in6);
		return 0;
	}
	return -EINVAL;
}

int rp_conn_open(struct event_base *base, const struct revproxy_target *t, const char *key,
		 uint32_t hash, struct rp_conn **ret)
{
	struct sockaddr_storage ss;
	socklen_t sslen = 0;
	_cleanup_close_ int fd = -1;

	if (t->unix_path) {
		fd = unix_connect(t->unix_path, t->peer_pid);
		if (fd < 0)
			return fd;
	} else {
		int r = tcp_sockaddr(t, &ss, &sslen);
		if (r < 0)
			return r;
		/* Our own socket: libevent's would not be close-on-exec, and execd spawns. */
		fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
	}
	_cleanup_free_ struct rp_conn *c = calloc(1, sizeof(*c) + strlen(key) + 1);
	if (!c)
		return -ENOMEM;
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev)
		return -ENOMEM;
	fd = -1; /* the bufferevent's now */
	c->hash = hash;
	strcpy(c->key, key);
	if (!t->unix_path) {
		/* A refused connect is reported as BEV_EVENT_ERROR from the loop. */
		if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&ss, (int)sslen) < 0) {
			bufferevent_free(c->bev);
			return -ECONNREFUSED;
		}
		c->connecting = true;
	}
	*ret = TAKE_PTR(c);
	return 0;
}

void rp_conn_free(struct rp_conn *c)
{
	if (!c)
		return;
	bufferevent_free(c->bev);
	free(c);
}

static struct timeval ms_tv(int ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

void rp_pool_init(struct rp_pool *p, struct event_base *base, unsigned max_per_key,
		  unsigned max_total, int idle_timeout_ms)
{
	*p = (struct rp_pool){ .base = base, .max_per_key = max_per_key, .max_total = max_total,
			       .idle_timeout_ms = idle_timeout_ms };
	TAILQ_INIT(&p->idle);
}

static void idle_remove(struct rp_conn *c)
{
	TAILQ_REMOVE(&c->pool->idle, c, link);
	c->pool->n_idle--;
	c->pool = NULL;
}

void rp_pool_clear(struct rp_pool *p)
{
	struct rp_conn *c;
	while ((c = TAILQ_FIRST(&p->idle))) {
		idle_remove(c);
		rp_conn_free(c);
	}
}

/* A pooled connection said something (upstream closed it, or sent bytes nobody asked for). */
static void idle_read_cb(struct bufferevent *bev, void *arg)
{
	struct rp_conn *c = arg;
	idle_remove(c);
	rp_conn_free(c);
}

static void idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	idle_read_cb(bev, arg);
}

void rp_pool_put(struct rp_pool *p, struct rp_conn *c)
{
	unsigned same = 0;
	struct rp_conn *it;
	TAILQ_FOREACH (it, &p->idle, link)
		if (it->hash == c->hash && strcmp(it->key, c->key) == 0)
			same++;
	if (same >= p->max_per_key || p->max_total == 0) {
		rp_conn_free(c);
		return;
	}
	if (p->n_idle >= p->max_total) {
		struct rp_conn *oldest = TAILQ_LAST(&p->idle, rp_conn_list);
		idle_remove(oldest);
		rp_conn_free(oldest);
	}
	struct timeval tv = ms_tv(p->idle_timeout_ms);
	bufferevent_setcb(c->bev, idle_read_cb, NULL, idle_event_cb, c);
	bufferevent_set_timeouts(c->bev, &tv, NULL);
	bufferevent_enable(c->bev, EV_READ);
	c->pool = p;
	TAILQ_INSERT_HEAD(&p->idle, c, link);
	p->n_idle++;
}

struct rp_conn *rp_pool_take(struct rp_pool *p, const char *key, uint32_t hash)
{
	struct rp_conn *c, *next;
	for (c = TAILQ_FIRST(&p->idle); c; c = next) {
		next = TAILQ_NEXT(c, link);
		if (c->hash != hash || strcmp(c->key, key) != 0)
			continue;
		idle_remove(c);
		/* Upstream may have closed it since the loop last looked: check before reusing. */
		char b;
		ssize_t n = recv(bufferevent_getfd(c->bev), &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    evbuffer_get_length(bufferevent_get_input(c->bev)) == 0) {
			bufferevent_disable(c->bev, EV_READ);
			return c;
		}
		rp_conn_free(c);
	}
	return NULL;
}
