#include "session.h"
#include "shared/httputil.h"

/* Sessions are not implemented yet: the routes answer 501 NOT_SUPPORTED. */

void session_init(struct event_base *base)
{
}

void session_create(struct evhttp_request *req)
{
	http_send_error(req, 501, "NOT_SUPPORTED", "bash sessions are not supported yet");
}

void session_run(struct evhttp_request *req, const char *id)
{
	http_send_error(req, 501, "NOT_SUPPORTED", "bash sessions are not supported yet");
}

void session_delete(struct evhttp_request *req, const char *id)
{
	http_send_error(req, 501, "NOT_SUPPORTED", "bash sessions are not supported yet");
}

bool session_child_exited(pid_t pid, int status)
{
	return false;
}

void session_kill_all(void)
{
}
