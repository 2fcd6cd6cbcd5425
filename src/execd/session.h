/* Bash sessions (reference §2.5): a persistent shell whose cwd and exported variables persist. */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <sys/types.h>

#define SESSION_MAX 64

/* Sessions keep their command files under <state_dir>/sessions/<id>/. */
void session_init(struct event_base *base, const char *state_dir);
void session_create(struct evhttp_request *req);             /* POST /session */
void session_run(struct evhttp_request *req, const char *id); /* POST /session/{id}/run */
void session_delete(struct evhttp_request *req, const char *id);
/*
 * DELETE /command?id=<session id>: end the run in progress. The run executes inside the shell, so
 * the whole session goes (SIGTERM to its process group, SIGKILL after 3 s). -ENOENT when there
 * is no such session, -ESRCH when it runs nothing.
 */
int session_interrupt(const char *id);
/* Reaper hook: true when pid was a session shell. */
bool session_child_exited(pid_t pid, int status);
void session_kill_all(void);
