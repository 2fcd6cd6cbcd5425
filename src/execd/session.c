/*
 * Bash sessions: one long-lived shell per session, reading scripts from a pipe. Each run sends the
 * shell
 *
 *     . /dev/fd/3 3<<'__CORRAL_EOF_<marker>' </dev/null; printf '\036<marker> %d\n' "$?"
 *     <command>
 *     __CORRAL_EOF_<marker>
 *
 * (with a cd to the run's cwd and back around it when one is given), so cd and exported
 * variables persist between runs. stdout is scanned for the marker, which carries the exit code
 * and ends the run; the bytes before it are the run's output. Each run is an execution record
 * (exec_new_external): same stream framing, files and status as /command, init text = session id.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "command.h"
#include "exec.h"
#include "session.h"
#include "shared/fsutil.h"
#include "shared/httputil.h"
#include "shared/macro.h"
#include "shared/id.h"
#include "shared/log.h"
#include "shared/wire_error.h"
#include "spawn.h"

#define SESSION_READ_CHUNK 65536
#define MARKER_MAX 48
#define SESSION_PIPE_SIZE (1 << 20) /* the longest command a run can send, less the wrapper */

struct session {
	char id[HEXID_LEN];
	pid_t pid;
	int in_fd, out_fd, err_fd;
	struct event *ev_out, *ev_err, *ev_timeout;
	struct execution *cur; /* the run in progress */
	char marker[MARKER_MAX]; /* "\036corral-<hex>" */
	size_t marker_len;
	char held[MARKER_MAX]; /* stdout bytes that may be the start of the marker */
	size_t held_len;
	bool in_code;          /* after the marker: reading "<code>\n" */
	bool deleted;          /* DELETE'd: gone for clients, freed at the shell's SIGCHLD */
	char code[16];
	size_t code_len;
};

static struct {
	struct event_base *base;
	const char *state_dir;
	struct session *s[SESSION_MAX];
} S;

void session_init(struct event_base *base, const char *state_dir)
{
	S.base = base;
	S.state_dir = state_dir;
}

static struct session *session_get(const char *id)
{
	for (int i = 0; i < SESSION_MAX; i++)
		if (S.s[i] && !S.s[i]->deleted && strcmp(S.s[i]->id, id) == 0)
			return S.s[i];
	return NULL;
}

static void session_dir(const struct session *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s/sessions/%s", S.state_dir, s->id);
}

static void session_end_run(struct session *s, int code, const char *error)
{
	if (s->ev_timeout) {
		event_free(s->ev_timeout);
		s->ev_timeout = NULL;
	}
	if (!s->cur)
		return;
	struct execution *ex = s->cur;
	s->cur = NULL;
	exec_external_finish(ex, code, error);
	exec_unref(ex);
}

/* Close everything; the shell has exited or is being killed. */
static void session_free(struct session *s)
{
	for (int i = 0; i < SESSION_MAX; i++)
		if (S.s[i] == s)
			S.s[i] = NULL;
	if (s->ev_out)
		event_free(s->ev_out);
	if (s->ev_err)
		event_free(s->ev_err);
	if (s->ev_timeout)
		event_free(s->ev_timeout);
	if (s->in_fd >= 0)
		close(s->in_fd);
	if (s->out_fd >= 0)
		close(s->out_fd);
	if (s->err_fd >= 0)
		close(s->err_fd);
	char dir[PATH_MAX];
	session_dir(s, dir, sizeof(dir));
	fs_remove_tree(dir);
	free(s);
}

static void drain_stderr(struct session *s)
{
	char buf[SESSION_READ_CHUNK];
	ssize_t n;
	while (s->err_fd >= 0 && (n = read(s->err_fd, buf, sizeof(buf))) > 0)
		if (s->cur)
			exec_external_output(s->cur, true, buf, (size_t)n);
}

/* stdout bytes: output until the marker, then "<code>\n" ends the run. */
static void feed_stdout(struct session *s, const char *p, size_t n)
{
	while (n > 0) {
		if (s->in_code) {
			char c = *p++;
			n--;
			if (c == '\n') {
				s->code[s->code_len] = '\0';
				s->in_code = false;
				s->code_len = 0;
				drain_stderr(s);
				session_end_run(s, atoi(s->code), NULL);
			} else if (s->code_len < sizeof(s->code) - 1) {
				s->code[s->code_len++] = c;
			}
			continue;
		}
		/* Match the marker byte by byte, holding back a possible prefix. */
		char c = *p;
		if (c == s->marker[s->held_len]) {
			s->held[s->held_len++] = c;
			p++;
			n--;
			if (s->held_len == s->marker_len) {
				s->held_len = 0;
				s->in_code = true;
			}
			continue;
		}
		if (s->held_len > 0) {
			/* Not the marker after all: the held bytes were output. */
			if (s->cur)
				exec_external_output(s->cur, false, s->held, s->held_len);
			s->held_len = 0;
			continue; /* re-examine c against the marker's first byte */
		}
		/* Plain output up to the next possible marker start. */
		const char *q = memchr(p, s->marker[0], n);
		size_t k = q ? (size_t)(q - p) : n;
		if (s->cur)
			exec_external_output(s->cur, false, p, k);
		p += k;
		n -= k;
	}
}

static void on_out(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	char buf[SESSION_READ_CHUNK];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n > 0) {
		feed_stdout(s, buf, (size_t)n);
	} else if (n == 0 || errno != EAGAIN) {
		event_del(s->ev_out); /* EOF: the shell is going; SIGCHLD finishes the session */
	}
}

static void on_err(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	char buf[SESSION_READ_CHUNK];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n > 0) {
		if (s->cur)
			exec_external_output(s->cur, true, buf, (size_t)n);
	} else if (n == 0 || errno != EAGAIN) {
		event_del(s->ev_err);
	}
}

bool session_child_exited(pid_t pid, int status)
{
	for (int i = 0; i < SESSION_MAX; i++) {
		struct session *s = S.s[i];
		if (!s || s->pid != pid)
			continue;
		/* Whatever the shell wrote is in the pipes now. */
		char buf[SESSION_READ_CHUNK];
		ssize_t n;
		while ((n = read(s->out_fd, buf, sizeof(buf))) > 0)
			feed_stdout(s, buf, (size_t)n);
		drain_stderr(s);
		if (s->held_len && s->cur)
			exec_external_output(s->cur, false, s->held, s->held_len);
		s->held_len = 0;
		int code = exec_status_to_code(status);
		log_info("session %s: shell exited (%d)", s->id, code);
		session_end_run(s, code, "the session's shell exited");
		session_free(s);
		return true;
	}
	return false;
}

void session_kill_all(void)
{
	for (int i = 0; i < SESSION_MAX; i++)
		if (S.s[i] && S.s[i]->pid > 0)
			kill(-S.s[i]->pid, SIGKILL);
}

/* Single-quote s for sh into buf. */
static int sh_quote(const char *s, char *buf, size_t len)
{
	size_t o = 0;
	if (len < 3)
		return -ENAMETOOLONG;
	buf[o++] = '\'';
	for (; *s; s++) {
		if (*s == '\'') {
			if (o + 4 >= len)
				return -ENAMETOOLONG;
			memcpy(buf + o, "'\\''", 4);
			o += 4;
		} else {
			if (o + 1 >= len)
				return -ENAMETOOLONG;
			buf[o++] = *s;
		}
	}
	if (o + 2 > len)
		return -ENAMETOOLONG;
	buf[o++] = '\'';
	buf[o] = '\0';
	return 0;
}

/* ----- POST /session ----- */

void session_create(struct evhttp_request *req)
{
	char msg[512];
	json_t *body = NULL;
	if (http_body_json(req, true, &body, msg, sizeof(msg)) < 0) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "%s", msg);
		return;
	}
	json_t *j __attribute__((cleanup(json_decrefp))) = body;
	if (j && !json_is_object(j)) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "request body must be a JSON object");
		return;
	}
	const char *cwd_in = NULL;
	json_t *v = j ? json_object_get(j, "cwd") : NULL;
	if (v && !json_is_null(v)) {
		if (!json_is_string(v)) {
			http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "field 'cwd' must be a string");
			return;
		}
		cwd_in = json_string_value(v);
	}
	char cwd[PATH_MAX];
	struct error err = {0};
	if (cwd_in && *cwd_in && exec_resolve_cwd(cwd_in, cwd, sizeof(cwd), &err) < 0) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "%s", err.msg);
		return;
	}
	int slot = -1;
	for (int i = 0; i < SESSION_MAX && slot < 0; i++)
		if (!S.s[i])
			slot = i;
	if (slot < 0) {
		http_send_error(req, 429, WIRE_CODE(RUNTIME_ERROR),
				"too many bash sessions (limit %d); delete some first", SESSION_MAX);
		return;
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	s->in_fd = s->out_fd = s->err_fd = -1;
	char nonce[HEXID_LEN];
	if (id_hex32(s->id) < 0 || id_hex32(nonce) < 0) {
		free(s);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "cannot generate an id");
		return;
	}
	s->marker_len = (size_t)snprintf(s->marker, sizeof(s->marker), "\036corral-%.24s", nonce);
	char dir[PATH_MAX];
	session_dir(s, dir, sizeof(dir));
	int r = fs_mkdir_p(dir, 0700);
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	if (r < 0 || pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC | O_NONBLOCK) < 0 ||
	    pipe2(perr, O_CLOEXEC | O_NONBLOCK) < 0) {
		int e = r < 0 ? -r : errno;
		for (int i = 0; i < 2; i++) {
			if (pin[i] >= 0)
				close(pin[i]);
			if (pout[i] >= 0)
				close(pout[i]);
			if (perr[i] >= 0)
				close(perr[i]);
		}
		free(s);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "set up session: %s", strerror(e));
		return;
	}
	fcntl(pout[1], F_SETFL, 0);
	fcntl(perr[1], F_SETFL, 0);
	S.s[slot] = s; /* from here session_free cleans up */
	s->in_fd = pin[1];
	s->out_fd = pout[0];
	s->err_fd = perr[0];
	char *argv_bash[] = {(char *)"/bin/bash", (char *)"--noprofile", (char *)"--norc", NULL};
	char *argv_sh[] = {(char *)"/bin/sh", NULL};
	struct spawn sp = SPAWN_INIT;
	sp.argv = access("/bin/bash", X_OK) == 0 ? argv_bash : argv_sh;
	sp.cwd = cwd_in && *cwd_in ? cwd : NULL;
	sp.stdin_fd = pin[0];
	sp.stdout_fd = pout[1];
	sp.stderr_fd = perr[1];
	r = spawn_start(&sp, &s->pid, &err);
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	if (r < 0) {
		s->pid = 0;
		session_free(s);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "start the session's shell: %s", err.msg);
		return;
	}
	/* Writes to a shell that died must fail, not block execd; a run's script goes in one write
	 * (best effort: pipe-max-size may be lower). */
	fcntl(s->in_fd, F_SETFL, O_NONBLOCK);
	fcntl(s->in_fd, F_SETPIPE_SZ, SESSION_PIPE_SIZE);
	s->ev_out = event_new(S.base, s->out_fd, EV_READ | EV_PERSIST, on_out, s);
	s->ev_err = event_new(S.base, s->err_fd, EV_READ | EV_PERSIST, on_err, s);
	if (s->ev_out)
		event_add(s->ev_out, NULL);
	if (s->ev_err)
		event_add(s->ev_err, NULL);
	log_info("session %s: shell pid %d", s->id, (int)s->pid);
	http_send_json(req, 200, json_pack("{s:s}", "session_id", s->id));
}

/* ----- POST /session/{id}/run ----- */

static void on_run_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	log_info("session %s: run timed out; killing the session", s->id);
	kill(-s->pid, SIGKILL);
}

void session_run(struct evhttp_request *req, const char *id)
{
	struct session *s = session_get(id);
	if (!s) {
		http_send_error(req, 404, WIRE_CODE(CONTEXT_NOT_FOUND), "no bash session with id '%s'", id);
		return;
	}
	char msg[512];
	json_t *body = NULL;
	if (http_body_json(req, false, &body, msg, sizeof(msg)) < 0) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "%s", msg);
		return;
	}
	json_t *j __attribute__((cleanup(json_decrefp))) = body;
	json_t *v = json_is_object(j) ? json_object_get(j, "command") : NULL;
	if (!json_is_object(j)) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "request body must be a JSON object");
		return;
	}
	if (!json_is_string(v) || json_string_length(v) == 0 ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
				"field 'command' is required and must be a non-empty string");
		return;
	}
	const char *command = json_string_value(v);
	const char *cwd_in = NULL;
	v = json_object_get(j, "cwd");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v)) {
			http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "field 'cwd' must be a string");
			return;
		}
		cwd_in = json_string_value(v);
	}
	int64_t timeout_ms = 0;
	v = json_object_get(j, "timeout");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
					"field 'timeout' must be a non-negative integer (milliseconds)");
			return;
		}
		timeout_ms = json_integer_value(v);
	}
	struct error err = {0};
	char cwd[PATH_MAX];
	if (cwd_in && *cwd_in && exec_resolve_cwd(cwd_in, cwd, sizeof(cwd), &err) < 0) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "%s", err.msg);
		return;
	}
	if (s->cur) {
		http_send_error(req, 409, WIRE_CODE(RUNTIME_ERROR),
				"session %s is running a command; wait for it to finish", id);
		return;
	}

	/*
	 * The command reaches the shell as a here-document on fd 3, sourced from /dev/fd/3, with a
	 * delimiter line it cannot contain by accident (the session's random marker). Nothing goes
	 * through a file, which another process of the sandbox could swap between write and source,
	 * and the command is never quoted. The whole script must fit the pipe at once (execd never
	 * blocks on the shell): its size is raised at session start.
	 */
	char qcwd[2 * PATH_MAX], delim[MARKER_MAX + 16];
	if (cwd_in && *cwd_in && sh_quote(cwd, qcwd, sizeof(qcwd)) < 0) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "field 'cwd' is too long");
		return;
	}
	snprintf(delim, sizeof(delim), "__CORRAL_EOF_%s", s->marker + 1);
	if (strstr(command, delim)) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
				"field 'command' contains the session's delimiter line");
		return;
	}
	size_t clen = strlen(command);
	bool nl = clen > 0 && command[clen - 1] == '\n';
	char head[3 * PATH_MAX];
	if (cwd_in && *cwd_in)
		snprintf(head, sizeof(head),
			 "__corral_pwd=$PWD; if cd -- %s; then . /dev/fd/3 3<<'%s' </dev/null; __corral_rc=$?; "
			 "cd -- \"$__corral_pwd\"; else __corral_rc=1; fi; printf '%s %%d\\n' \"$__corral_rc\"\n",
			 qcwd, delim, s->marker);
	else
		snprintf(head, sizeof(head), ". /dev/fd/3 3<<'%s' </dev/null; printf '%s %%d\\n' \"$?\"\n",
			 delim, s->marker);
	size_t len = strlen(head) + clen + (nl ? 0 : 1) + strlen(delim) + 1;
	int room = fcntl(s->in_fd, F_GETPIPE_SZ);
	if (room > 0 && len > (size_t)room) {
		http_send_error(req, 413, WIRE_CODE(INVALID_REQUEST_BODY),
				"field 'command' is too long for a session: at most %zu bytes",
				(size_t)room - (len - clen));
		return;
	}
	_cleanup_free_ char *script = malloc(len + 1);
	if (!script) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	snprintf(script, len + 1, "%s%s%s%s\n", head, command, nl ? "" : "\n", delim);

	struct execution *ex = exec_new_external(command, s->id, &err);
	if (!ex) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "%s", err.msg);
		return;
	}
	if (write(s->in_fd, script, len) != (ssize_t)len) {
		int e = errno;
		exec_external_finish(ex, 255, "cannot write to the session's shell");
		exec_unref(ex);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "write to the session's shell: %s", strerror(e));
		return;
	}
	s->cur = ex;
	if (timeout_ms > 0) {
		s->ev_timeout = evtimer_new(S.base, on_run_timeout, s);
		struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
		if (s->ev_timeout)
			evtimer_add(s->ev_timeout, &tv);
	}
	command_stream(req, ex);
}

static void on_kill_grace(evutil_socket_t fd, short what, void *arg)
{
	pid_t pid = (pid_t)(intptr_t)arg;
	for (int i = 0; i < SESSION_MAX; i++)
		if (S.s[i] && S.s[i]->pid == pid)
			kill(-pid, SIGKILL);
}

int session_interrupt(const char *id)
{
	struct session *s = session_get(id);
	if (!s)
		return -ENOENT;
	if (!s->cur)
		return -ESRCH;
	kill(-s->pid, SIGTERM);
	struct timeval tv = {3, 0};
	event_base_once(S.base, -1, EV_TIMEOUT, on_kill_grace, (void *)(intptr_t)s->pid, &tv);
	return 0;
}

/* ----- DELETE /session/{id} ----- */

void session_delete(struct evhttp_request *req, const char *id)
{
	struct session *s = session_get(id);
	if (!s) {
		http_send_error(req, 404, WIRE_CODE(CONTEXT_NOT_FOUND), "no bash session with id '%s'", id);
		return;
	}
	/* The shell's SIGCHLD ends a run in progress and frees the session; until then it no
	 * longer answers to its id. */
	kill(-s->pid, SIGKILL);
	s->deleted = true;
	http_send_empty(req, 200);
}
