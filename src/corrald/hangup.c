/* Client hang-up detection while a request waits for its reply: see hangup.h. */
#include <event2/event.h>
#include <event2/bufferevent.h>

#include "corrald/hangup.h"
#include "shared/httputil.h"
#include "shared/libevent_private.h"

static void hangup_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct hangup *h = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	struct evhttp_connection *evcon = h->evcon;
	void (*cb)(void *) = h->cb;
	void *cb_arg = h->arg;
	hangup_unwatch(h);
	cb(cb_arg);		       /* may free h */
	evhttp_connection_free(evcon); /* frees the request too */
}

/* evhttp frees the connection itself (evhttp_free, say): the request goes with it. */
static void hangup_closed(struct evhttp_connection *evcon, void *arg)
{
	struct hangup *h = arg;
	void (*cb)(void *) = h->cb;
	void *cb_arg = h->arg;
	hangup_unwatch(h);
	cb(cb_arg);
}

void hangup_watch(struct hangup *h, struct evhttp_connection *evcon, void (*cb)(void *arg),
		  void *arg)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	h->evcon = evcon;
	h->cb = cb;
	h->arg = arg;
	bufferevent_peek_timeouts(bev, &h->read_tv, &h->write_tv);
	http_conn_set_closecb(evcon, hangup_closed, h);
	bufferevent_setcb(bev, NULL, NULL, hangup_event_cb, h);
	bufferevent_setwatermark(bev, EV_READ, 0, HANGUP_EARLY_MAX);
	bufferevent_set_timeouts(bev, NULL, NULL);
	bufferevent_enable(bev, EV_READ);
}

void hangup_unwatch(struct hangup *h)
{
	if (!h->evcon)
		return;
	struct bufferevent *bev = evhttp_connection_get_bufferevent(h->evcon);
	http_conn_set_closecb(h->evcon, NULL, NULL);
	bufferevent_disable(bev, EV_READ);
	bufferevent_setwatermark(bev, EV_READ, 0, 0);
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(bev, timerisset(&h->read_tv) ? &h->read_tv : NULL,
				 timerisset(&h->write_tv) ? &h->write_tv : NULL);
	h->evcon = NULL;
}
