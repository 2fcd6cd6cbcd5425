/* The check of libevent_private.h's mirror against the running library. */
#include <errno.h>
#include <stdbool.h>

#include <event2/bufferevent.h>

#include "shared/libevent_private.h"

static void probe_closecb(struct evhttp_connection *evcon, void *arg)
{
}

int evhttp_peek_check(struct event_base *base, void (**ret_readcb)(struct bufferevent *, void *))
{
	struct evhttp_connection *evcon = evhttp_connection_base_new(base, NULL, "127.0.0.1", 9);
	if (!evcon)
		return -ENOMEM;
	struct evhttp_peek_conn *m = evhttp_peek(evcon);
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	void (*readcb)(struct bufferevent *, void *) = NULL;
	void *cbarg = NULL;
	int marker;
	bufferevent_getcb(bev, &readcb, NULL, NULL, &cbarg);
	evhttp_connection_set_max_headers_size(evcon, 4321);
	evhttp_connection_set_max_body_size(evcon, 12345);
	evhttp_connection_set_timeout(evcon, 7);
	evhttp_connection_set_retries(evcon, 3);
	evhttp_connection_set_closecb(evcon, probe_closecb, &marker);
	bool ok = m->fd == -1 && m->bufev == bev && m->port == 9 && m->max_headers_size == 4321 &&
		  m->max_body_size == 12345 && m->timeout.tv_sec == 7 && m->retry_max == 3 &&
		  m->state == EVHTTP_PEEK_DISCONNECTED && m->http_server == NULL &&
		  m->requests.tqh_first == NULL &&
		  m->requests.tqh_last == &m->requests.tqh_first && m->closecb == probe_closecb &&
		  m->closecb_arg == &marker && cbarg == evcon && readcb;
	evhttp_connection_set_closecb(evcon, NULL, NULL);
	evhttp_connection_free(evcon);
	if (!ok)
		return -EPROTO;
	*ret_readcb = readcb;
	return 0;
}
