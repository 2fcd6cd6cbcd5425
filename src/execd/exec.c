#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"
#include "shared/fsutil.h"
#include "shared/log.h"
#include "shared/timeutil.h"
#include "spawn.h"

extern char **environ;

#define HASH_BUCKETS 4096
#define READ_CHUNK 65536
#define DRAIN_MAX (4u << 20) /* bytes read from the pipes after the process exited */
#define EARLY_MAX (1u << 20) /* bytes held in memory before the files exist */
/*
 * A new execution's files are created this long after its start, or at its end if that comes
 * first: a short command then creates them once, after its final event has gone out, instead of
 * in the middle of its run (each new inode costs ~1 ms on an ext4 without journal that has seen
 * many deletions) and then writing status.json a second time.
 */
#define FILES_DELAY_US 50000

enum { F_STDOUT, F_STDERR, F_OUTPUT, F_EVENTS };

static struct {
	struct event_base *base;
	char state_dir[PATH_MAX];
	struct execution *hash[HASH_BUCKETS];
	TAILQ_HEAD(execution_tailq, execution) finished;
	LIST_HEAD(, execution) running;
	unsigned n_running, n_finished;
	size_t finished_bytes;
} X;

static unsigned id_hash(const char *id)
{
	unsigned h = 2166136261u;
	for (const char *p = id; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h % HASH_BUCKETS;
}

static struct execution *hash_get(const char *id)
{
	for (struct execution *e = X.hash[id_hash(id)]; e; e = e->hash_next)
		if (strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

static void hash_put(struct execution *ex)
{
	unsigned h = id_hash(ex->id);
	ex->hash_next = X.hash[h];
	X.hash[h] = ex;
}

static void hash_del(struct execution *ex)
{
	struct execution **pp = &X.hash[id_hash(ex->id)];
	while (*pp && *pp != ex)
		pp = &(*pp)->hash_next;
	if (*pp)
		*pp = ex->hash_next;
}

int exec_init(struct event_base *base, const char *state_dir, struct error *err)
{
	X.base = base;
	TAILQ_INIT(&X.finished);
	LIST_INIT(&X.running);
	if (snprintf(X.state_dir, sizeof(X.state_dir), "%s", state_dir) >= (int)sizeof(X.state_dir))
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	int r = fs_mkdir_p(state_dir, 0700);
	if (r < 0)
		return error_set_errno(err, -r, "create state dir '%s'", state_dir);
	return 0;
}

void exec_path(const struct execution *ex, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s/%s", X.state_dir, ex->id, name);
}

int exec_status_to_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return 255;
}

int64_t exec_elapsed_ms(const struct execution *ex)
{
	if (!ex->running)
		return ex->finished_ms - ex->started_ms;
	if (ex->started_ns)
		return (int64_t)((time_mono_ns() - ex->started_ns) / 1000000);
	return time_now_ms() - ex->started_ms;
}

static void closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void freeev(struct event **ev)
{
	if (*ev)
		event_free(*ev);
	*ev = NULL;
}

static struct execution *exec_new(const char *id)
{
	struct execution *ex = calloc(1, sizeof(*ex));
	if (!ex)
		return NULL;
	snprintf(ex->id, sizeof(ex->id), "%s", id);
	ex->pipe_out = ex->pipe_err = -1;
	ex->fd_stdout = ex->fd_stderr = ex->fd_output = ex->fd_events = -1;
	ex->exit_code = -1;
	ex->refs = 1; /* the registry's */
	LIST_INIT(&ex->watchers);
	return ex;
}

static void exec_free(struct execution *ex)
{
	freeev(&ex->ev_out);
	freeev(&ex->ev_err);
	freeev(&ex->ev_timeout);
	freeev(&ex->ev_kill);
	closefd(&ex->pipe_out);
	closefd(&ex->pipe_err);
	closefd(&ex->fd_stdout);
	closefd(&ex->fd_stderr);
	closefd(&ex->fd_output);
	closefd(&ex->fd_events);
	free(ex->split_out);
	free(ex->split_err);
	sbuf_clear(&ex->pending);
	sbuf_clear(&ex->init_event);
	for (size_t i = 0; i < ARRAY_SIZE(ex->early); i++)
		sbuf_clear(&ex->early[i]);
	free(ex->command);
	free(ex->error);
	free(ex);
}

struct execution *exec_ref(struct execution *ex)
{
	ex->refs++;
	return ex;
}

void exec_unref(struct execution *ex)
{
	if (ex && --ex->refs == 0)
		exec_free(ex);
}

/* Forget the oldest finished records beyond the bounds (their files stay on disk). */
static void evict(void)
{
	struct execution *ex = TAILQ_FIRST(&X.finished);
	/* Never the newest: it is the one being added or looked up. */
	while (ex && ex != TAILQ_LAST(&X.finished, execution_tailq) &&
	       (X.n_finished > EXEC_MAX_FINISHED || X.finished_bytes > EXEC_MAX_FINISHED_BYTES)) {
		struct execution *next = TAILQ_NEXT(ex, lru);
		if (LIST_EMPTY(&ex->watchers)) {
			TAILQ_REMOVE(&X.finished, ex, lru);
			X.n_finished--;
			X.finished_bytes -= ex->command ? strlen(ex->command) : 0;
			hash_del(ex);
			exec_unref(ex);
		}
		ex = next;
	}
}

static void add_finished(struct execution *ex)
{
	TAILQ_INSERT_TAIL(&X.finished, ex, lru);
	X.n_finished++;
	X.finished_bytes += ex->command ? strlen(ex->command) : 0;
	evict();
}

json_t *exec_status_json(const struct execution *ex)
{
	char ts[RFC3339_MAX];
	time_format_rfc3339(ex->started_ms, ts);
	json_t *j = json_pack("{s:s, s:s, s:b, s:s}", "id", ex->id, "content",
			      ex->command ? ex->command : "", "running", ex->running, "started_at", ts);
	if (!j)
		return NULL;
	if (ex->has_exit_code)
		json_object_set_new(j, "exit_code", json_integer(ex->exit_code));
	if (ex->error)
		json_object_set_new(j, "error", json_string(ex->error));
	if (!ex->running && ex->finished_ms) {
		time_format_rfc3339(ex->finished_ms, ts);
		json_object_set_new(j, "finished_at", json_string(ts));
	}
	return j;
}

/* status.json: tmp + rename (no fsync on the command path; the rename is atomic). */
static void write_status(struct execution *ex)
{
	json_t *j = exec_status_json(ex);
	if (!j)
		return;
	json_object_set_new(j, "background", json_boolean(ex->background));
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return;
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	exec_path(ex, "status.json", path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		size_t len = strlen(s);
		bool ok = write(fd, s, len) == (ssize_t)len;
		close(fd);
		if (!ok || rename(tmp, path) < 0)
			log_warn("write %s: %m", path);
	} else {
		log_warn("open %s: %m", tmp);
	}
	free(s);
}

/* Load a record that is only on disk (evicted, or from an earlier execd). */
static struct execution *load_from_disk(const char *id)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/status.json", X.state_dir, id);
	_cleanup_free_ char *buf = NULL;
	if (fs_read_file(path, 4u << 20, &buf, NULL) < 0)
		return NULL;
	json_t *j = json_loads(buf, 0, NULL);
	if (!j)
		return NULL;
	struct execution *ex = exec_new(id);
	if (!ex) {
		json_decref(j);
		return NULL;
	}
	ex->files_ready = true;
	const char *content = json_string_value(json_object_get(j, "content"));
	ex->command = strdup(content ? content : "");
	ex->background = json_is_true(json_object_get(j, "background"));
	json_t *code = json_object_get(j, "exit_code");
	if (json_is_integer(code)) {
		ex->has_exit_code = true;
		ex->exit_code = (int)json_integer_value(code);
	}
	const char *e = json_string_value(json_object_get(j, "error"));
	if (json_is_true(json_object_get(j, "running")))
		e = "execd lost track of this execution (it was running when execd stopped)";
	if (e)
		ex->error = strdup(e);
	const char *t = json_string_value(json_object_get(j, "started_at"));
	if (t)
		time_parse_rfc3339(t, &ex->started_ms);
	t = json_string_value(json_object_get(j, "finished_at"));
	if (!t || time_parse_rfc3339(t, &ex->finished_ms) < 0)
		ex->finished_ms = ex->started_ms;
	json_decref(j);
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s/events", X.state_dir, id);
	if (stat(path, &st) == 0)
		ex->events_len = (uint64_t)st.st_size;
	hash_put(ex);
	add_finished(ex);
	return ex;
}

struct execution *exec_find(const char *id)
{
	if (!id_is_hex32(id))
		return NULL;
	struct execution *ex = hash_get(id);
	if (!ex)
		ex = load_from_disk(id);
	if (!ex)
		return NULL;
	if (!ex->running) {
		/* Most recently used goes last. */
		TAILQ_REMOVE(&X.finished, ex, lru);
		TAILQ_INSERT_TAIL(&X.finished, ex, lru);
	}
	return exec_ref(ex);
}

void exec_watch_add(struct execution *ex, struct exec_watch *w)
{
	LIST_INSERT_HEAD(&ex->watchers, w, link);
	w->attached = true;
}

void exec_watch_remove(struct execution *ex, struct exec_watch *w)
{
	if (!w->attached)
		return;
	LIST_REMOVE(w, link);
	w->attached = false;
}

static void notify_all(struct execution *ex)
{
	exec_ref(ex);
	struct exec_watch *w = LIST_FIRST(&ex->watchers), *next;
	while (w) {
		next = LIST_NEXT(w, link); /* notify may remove w (and only w) */
		w->notify(w, ex);
		w = next;
	}
	exec_unref(ex);
}

static void write_all(int fd, const void *p, size_t n, const struct execution *ex, const char *what)
{
	if (fd < 0)
		return;
	const char *c = p;
	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			log_warn("execution %s: write %s: %m", ex->id, what);
			return;
		}
		c += k;
		n -= (size_t)k;
	}
}

static int open_out(struct execution *ex, const char *name, int flags);
static void write_status(struct execution *ex);

static void notify_all(struct execution *ex);

static int *file_fd(struct execution *ex, int which)
{
	switch (which) {
	case F_STDOUT: return &ex->fd_stdout;
	case F_STDERR: return &ex->fd_stderr;
	case F_OUTPUT: return &ex->fd_output;
	default: return &ex->fd_events;
	}
}

static const char *const file_names[] = {"stdout", "stderr", "output", "events"};

/*
 * Create the execution's directory and files (once): the events file starts with init, then
 * whatever was held in memory meanwhile. A finished execution's files are closed again. With
 * notify, watchers hear about it (a reader that was waiting for the file can go on).
 */
static void ensure_files_ex(struct execution *ex, bool notify)
{
	if (ex->files_ready)
		return;
	ex->files_ready = true;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%s", X.state_dir, ex->id);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		log_warn("execution %s: create %s: %m", ex->id, dir);
	/* Each file gets what it holds right after it is created (a reader that sees the file sees
	 * its content so far). */
	for (int i = 0; i < 4; i++) {
		int *fd = file_fd(ex, i);
		/* A background process writes its output file itself. */
		if (*fd < 0 && (i == F_EVENTS || !ex->background)) {
			*fd = open_out(ex, file_names[i], O_WRONLY);
			if (*fd < 0)
				log_warn("execution %s: create %s/%s: %m", ex->id, dir,
					 file_names[i]);
		}
		if (i == F_EVENTS)
			write_all(*fd, ex->init_event.data, ex->init_event.len, ex, "events");
		write_all(*fd, ex->early[i].data, ex->early[i].len, ex, file_names[i]);
		sbuf_clear(&ex->early[i]);
	}
	/* A background execution holds no fd while it runs (1024 of them may run); its final
	 * event reopens the events file. */
	if (!ex->running || ex->background) {
		closefd(&ex->fd_stdout);
		closefd(&ex->fd_stderr);
		closefd(&ex->fd_output);
		closefd(&ex->fd_events);
	}
	write_status(ex);
	if (notify && !LIST_EMPTY(&ex->watchers)) {
		ex->pending.len = 0;
		notify_all(ex);
	}
}

static void ensure_files(struct execution *ex)
{
	ensure_files_ex(ex, true);
}

/* Append to one of the execution's files, or hold the bytes until the files exist. */
static void file_append(struct execution *ex, int which, const void *p, size_t n)
{
	if (!ex->files_ready) {
		size_t held = 0;
		for (int i = 0; i < 4; i++)
			held += ex->early[i].len;
		if (held + n <= EARLY_MAX && sbuf_add(&ex->early[which], p, n) == 0)
			return;
		ensure_files_ex(ex, false);
	}
	int *fd = file_fd(ex, which);
	if (*fd < 0)
		*fd = open_out(ex, file_names[which], O_WRONLY);
	write_all(*fd, p, n, ex, file_names[which]);
}

/* At the end: the status file, or all the files when they do not exist yet. */
static void finish_files(struct execution *ex)
{
	if (ex->files_ready)
		write_status(ex);
	else
		ensure_files(ex);
}

struct deferred {
	struct execution *ex;
	void (*fn)(struct execution *ex);
	struct event *ev;
};

static void deferred_run(evutil_socket_t fd, short what, void *arg)
{
	struct deferred *d = arg;
	d->fn(d->ex);
	exec_unref(d->ex);
	event_free(d->ev);
	free(d);
}

/*
 * Run fn(ex) in us microseconds, and never before the I/O the current loop turn made ready (the
 * reply bytes) went out: a timer is only looked at after the next poll, and at
 * EXEC_PRIO_BACKGROUND it runs after the sockets that poll found ready. (Not event_base_once
 * with a zero timeout: libevent activates that at once, in the current turn.)
 */
static void defer_us(struct execution *ex, void (*fn)(struct execution *ex), long us)
{
	const struct timeval soon = {us / 1000000, us % 1000000};
	struct deferred *d = calloc(1, sizeof(*d));
	if (d)
		d->ev = evtimer_new(X.base, deferred_run, d);
	if (!d || !d->ev) {
		free(d);
		fn(ex);
		return;
	}
	d->ex = exec_ref(ex);
	d->fn = fn;
	event_priority_set(d->ev, EXEC_PRIO_BACKGROUND);
	evtimer_add(d->ev, &soon);
}

static void defer(struct execution *ex, void (*fn)(struct execution *ex))
{
	defer_us(ex, fn, 1);
}

/* Move the encoded events in ex->pending to the events file and tell the watchers. */
static void flush_pending(struct execution *ex)
{
	if (ex->pending.len == 0)
		return;
	file_append(ex, F_EVENTS, ex->pending.data, ex->pending.len);
	ex->events_len += ex->pending.len;
	notify_all(ex);
	ex->pending.len = 0;
}

struct line_ctx {
	struct execution *ex;
	const char *type;
	int64_t ts;
};

static void on_line(const char *line, size_t len, void *arg)
{
	struct line_ctx *c = arg;
	if (stream_event_line(&c->ex->pending, c->type, line, len, c->ts) < 0)
		log_error("execution %s: out of memory encoding output", c->ex->id);
}

/* Read what the pipe has; returns bytes read, 0 at EOF, -1 when it would block. */
static ssize_t pipe_read_once(struct execution *ex, bool is_err)
{
	char buf[READ_CHUNK];
	int fd = is_err ? ex->pipe_err : ex->pipe_out;
	ssize_t n = RETRY_EINTR(read(fd, buf, sizeof(buf)));
	if (n < 0)
		return errno == EAGAIN ? -1 : 0;
	if (n == 0)
		return 0;
	file_append(ex, is_err ? F_STDERR : F_STDOUT, buf, (size_t)n);
	file_append(ex, F_OUTPUT, buf, (size_t)n);
	struct line_ctx c = {ex, is_err ? "stderr" : "stdout", time_now_ms()};
	line_splitter_feed(is_err ? ex->split_err : ex->split_out, buf, (size_t)n, on_line, &c);
	return n;
}

static void pipe_close(struct execution *ex, bool is_err)
{
	struct line_ctx c = {ex, is_err ? "stderr" : "stdout", time_now_ms()};
	if (is_err) {
		freeev(&ex->ev_err);
		closefd(&ex->pipe_err);
		if (ex->split_err)
			line_splitter_flush(ex->split_err, on_line, &c);
	} else {
		freeev(&ex->ev_out);
		closefd(&ex->pipe_out);
		if (ex->split_out)
			line_splitter_flush(ex->split_out, on_line, &c);
	}
}

static void on_pipe(evutil_socket_t fd, short what, void *arg)
{
	struct execution *ex = arg;
	bool is_err = fd == ex->pipe_err;
	ssize_t n = pipe_read_once(ex, is_err);
	if (n == 0)
		pipe_close(ex, is_err);
	flush_pending(ex);
}

static void exec_finish(struct execution *ex, int code, const char *error)
{
	/* The process is gone, so everything it wrote is in the pipes: drain them, without waiting
	 * for EOF (a background grandchild may hold the write end open forever). */
	for (int i = 0; i < 2; i++) {
		bool is_err = i == 1;
		if ((is_err ? ex->pipe_err : ex->pipe_out) < 0)
			continue;
		size_t total = 0;
		ssize_t n;
		while (total < DRAIN_MAX && (n = pipe_read_once(ex, is_err)) > 0)
			total += (size_t)n;
		pipe_close(ex, is_err);
	}
	ex->running = false;
	ex->finished_ms = time_now_ms();
	ex->has_exit_code = true;
	ex->exit_code = code;
	if (error && !ex->error)
		ex->error = strdup(error);
	int64_t ts = ex->finished_ms;
	if (code == 0) {
		stream_event_complete(&ex->pending, exec_elapsed_ms(ex), ts);
	} else {
		char v[16];
		snprintf(v, sizeof(v), "%d", code);
		stream_event_error(&ex->pending, "CommandExecError", v, ts);
	}
	freeev(&ex->ev_timeout);
	freeev(&ex->ev_kill);
	if (ex->pid > 0) {
		LIST_REMOVE(ex, live);
		X.n_running--;
	}
	ex->pid = 0;
	/* Watchers see running == false in this notification. */
	flush_pending(ex);
	closefd(&ex->fd_stdout);
	closefd(&ex->fd_stderr);
	closefd(&ex->fd_output);
	closefd(&ex->fd_events);
	free(ex->split_out);
	free(ex->split_err);
	ex->split_out = ex->split_err = NULL;
	sbuf_clear(&ex->pending);
	defer(ex, finish_files);
	add_finished(ex);
}

bool exec_child_exited(pid_t pid, int status)
{
	struct execution *ex;
	LIST_FOREACH(ex, &X.running, live)
		if (ex->pid == pid)
			break;
	if (!ex)
		return false;
	int code = exec_status_to_code(status);
	char msg[128] = "";
	if (ex->timed_out)
		snprintf(msg, sizeof(msg), "timed out: process group killed");
	else if (ex->interrupted)
		snprintf(msg, sizeof(msg), "interrupted");
	else if (WIFSIGNALED(status))
		snprintf(msg, sizeof(msg), "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	log_debug("execution %s: pid %d exited with %d", ex->id, (int)pid, code);
	exec_ref(ex);
	exec_finish(ex, code, msg[0] ? msg : NULL);
	exec_unref(ex);
	return true;
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct execution *ex = arg;
	if (!ex->running || ex->pid <= 0)
		return;
	ex->timed_out = true;
	log_info("execution %s: timeout, killing process group %d", ex->id, (int)ex->pid);
	kill(-ex->pid, SIGKILL);
}

static void on_kill_grace(evutil_socket_t fd, short what, void *arg)
{
	struct execution *ex = arg;
	if (ex->running && ex->pid > 0)
		kill(-ex->pid, SIGKILL);
}

int exec_interrupt(struct execution *ex)
{
	if (!ex->running || ex->pid <= 0)
		return -ESRCH;
	ex->interrupted = true;
	if (kill(-ex->pid, SIGTERM) < 0 && errno != ESRCH)
		return -errno;
	if (!ex->ev_kill) {
		ex->ev_kill = evtimer_new(X.base, on_kill_grace, ex);
		struct timeval tv = {EXEC_KILL_GRACE_MS / 1000, (EXEC_KILL_GRACE_MS % 1000) * 1000};
		if (ex->ev_kill)
			evtimer_add(ex->ev_kill, &tv);
	}
	return 0;
}

void exec_kill_all(void)
{
	struct execution *ex;
	LIST_FOREACH(ex, &X.running, live)
		if (ex->pid > 0)
			kill(-ex->pid, SIGKILL);
}

void exec_shutdown(void)
{
	exec_kill_all();
	/* Whatever is still only in memory goes to disk; running executions die with execd. */
	for (unsigned h = 0; h < HASH_BUCKETS; h++)
		for (struct execution *ex = X.hash[h]; ex; ex = ex->hash_next) {
			ensure_files_ex(ex, false);
			if (ex->running) {
				ex->running = false;
				ex->has_exit_code = true;
				ex->exit_code = 128 + SIGKILL;
				ex->finished_ms = time_now_ms();
				if (!ex->error)
					ex->error = strdup("killed: corral-execd exited");
				write_status(ex);
			}
		}
}

struct execution *exec_new_external(const char *command, const char *init_text, struct error *err)
{
	char id[HEXID_LEN];
	if (id_hex32(id) < 0) {
		error_set_errno(err, errno, "generate an execution id");
		return NULL;
	}
	struct execution *ex = exec_new(id);
	if (!ex || !(ex->command = strdup(command)) || !(ex->split_out = malloc(sizeof(*ex->split_out))) ||
	    !(ex->split_err = malloc(sizeof(*ex->split_err)))) {
		if (ex)
			exec_free(ex);
		error_set(err, ENOMEM, "out of memory");
		return NULL;
	}
	line_splitter_init(ex->split_out);
	line_splitter_init(ex->split_err);
	ex->started_ms = time_now_ms();
	ex->started_ns = time_mono_ns();
	ex->running = true;
	hash_put(ex);
	stream_event_text(&ex->init_event, "init", init_text, strlen(init_text), ex->started_ms);
	ex->events_len = ex->init_event.len;
	defer(ex, ensure_files);
	return exec_ref(ex);
}

void exec_external_output(struct execution *ex, bool is_err, const char *buf, size_t n)
{
	if (!ex->running || n == 0)
		return;
	file_append(ex, is_err ? F_STDERR : F_STDOUT, buf, n);
	file_append(ex, F_OUTPUT, buf, n);
	struct line_ctx c = {ex, is_err ? "stderr" : "stdout", time_now_ms()};
	line_splitter_feed(is_err ? ex->split_err : ex->split_out, buf, n, on_line, &c);
	flush_pending(ex);
}

void exec_external_finish(struct execution *ex, int code, const char *error)
{
	if (!ex->running)
		return;
	int64_t now = time_now_ms();
	struct line_ctx c = {ex, "stdout", now};
	line_splitter_flush(ex->split_out, on_line, &c);
	c.type = "stderr";
	line_splitter_flush(ex->split_err, on_line, &c);
	exec_ref(ex);
	exec_finish(ex, code, error);
	exec_unref(ex);
}

/* ----- environment and cwd ----- */

static void strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/* environ with envs merged over it. */
static char **build_env(json_t *envs)
{
	size_t n = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	size_t extra = envs ? json_object_size(envs) : 0;
	char **v = calloc(n + extra + 1, sizeof(char *));
	if (!v)
		return NULL;
	size_t k = 0;
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		if (envs && eq) {
			char key[256];
			size_t kl = (size_t)(eq - *e);
			if (kl < sizeof(key)) {
				memcpy(key, *e, kl);
				key[kl] = '\0';
				if (json_object_get(envs, key))
					continue;
			}
		}
		if (!(v[k++] = strdup(*e)))
			goto oom;
	}
	const char *key;
	json_t *val;
	if (envs)
		json_object_foreach(envs, key, val) {
			if (asprintf(&v[k], "%s=%s", key, json_string_value(val)) < 0) {
				v[k] = NULL;
				goto oom;
			}
			k++;
		}
	v[k] = NULL;
	return v;
oom:
	strv_free(v);
	return NULL;
}

static const char *env_get(char **envp, const char *name, size_t len)
{
	for (char **e = envp; *e; e++)
		if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
			return *e + len + 1;
	return NULL;
}

/* "~" / "~/x" → home, "$VAR" / "${VAR}" → its value (empty when unset). */
static int expand_cwd(const char *in, char **envp, const char *home, char *out, size_t outlen)
{
	size_t o = 0;
	const char *p = in;
#define PUT(s, n)                                                                                  \
	do {                                                                                       \
		if (o + (n) >= outlen)                                                             \
			return -ENAMETOOLONG;                                                      \
		memcpy(out + o, (s), (n));                                                         \
		o += (n);                                                                          \
	} while (0)
	if (p[0] == '~' && (p[1] == '/' || p[1] == '\0')) {
		const char *h = home && *home ? home : env_get(envp, "HOME", 4);
		if (!h || !*h)
			h = "/";
		PUT(h, strlen(h));
		p++;
	}
	while (*p) {
		if (*p == '$' && (p[1] == '{' || p[1] == '_' || (p[1] >= 'A' && p[1] <= 'Z') ||
				  (p[1] >= 'a' && p[1] <= 'z'))) {
			const char *name = p + 1, *end;
			if (*name == '{') {
				name++;
				end = strchr(name, '}');
				if (!end)
					return -EINVAL;
				p = end + 1;
			} else {
				end = name;
				while (*end == '_' || (*end >= 'A' && *end <= 'Z') ||
				       (*end >= 'a' && *end <= 'z') || (*end >= '0' && *end <= '9'))
					end++;
				p = end;
			}
			const char *val = env_get(envp, name, (size_t)(end - name));
			if (val)
				PUT(val, strlen(val));
			continue;
		}
		PUT(p, 1);
		p++;
	}
#undef PUT
	out[o] = '\0';
	return 0;
}

int exec_resolve_cwd(const char *in, char *out, size_t len, struct error *err)
{
	struct stat st;
	if (expand_cwd(in, environ, NULL, out, len) < 0)
		return error_set(err, EINVAL, "field 'cwd': cannot expand '%s'", in);
	if (stat(out, &st) < 0)
		return error_set(err, EINVAL, "field 'cwd': '%s': %s", out, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return error_set(err, EINVAL, "field 'cwd': '%s' is not a directory", out);
	return 0;
}

/* ----- start ----- */

static int open_out(struct execution *ex, const char *name, int flags)
{
	char path[PATH_MAX];
	exec_path(ex, name, path, sizeof(path));
	return open(path, flags | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

static void start_failed(struct execution *ex, const char *msg)
{
	ex->running = false;
	ex->has_exit_code = true;
	ex->exit_code = 255;
	ex->finished_ms = time_now_ms();
	ex->error = strdup(msg);
	char v[8] = "255";
	ex->pending.len = 0;
	if (ex->init_event.len == 0)
		stream_event_text(&ex->init_event, "init", ex->id, strlen(ex->id), ex->started_ms);
	ex->events_len = ex->init_event.len;
	ensure_files_ex(ex, false);
	stream_event_error(&ex->pending, "CommandExecError", v, ex->finished_ms);
	write_all(ex->fd_events, ex->pending.data, ex->pending.len, ex, "events");
	ex->events_len += ex->pending.len;
	sbuf_clear(&ex->pending);
	closefd(&ex->fd_events);
	closefd(&ex->fd_output);
	closefd(&ex->fd_stdout);
	closefd(&ex->fd_stderr);
	write_status(ex);
	add_finished(ex);
}

int exec_start(const struct exec_request *r, struct execution **ret, struct error *err)
{
	*ret = NULL;
	char id[HEXID_LEN];
	if (r->id) {
		struct execution *old = exec_find(r->id);
		if (old) {
			*ret = old;
			return -EEXIST;
		}
		snprintf(id, sizeof(id), "%s", r->id);
	} else if (id_hex32(id) < 0) {
		return error_set_errno(err, errno, "generate an execution id");
	}
	if (X.n_running >= EXEC_MAX_RUNNING)
		return error_set(err, EAGAIN, "too many running executions (limit %d); wait for some to finish",
				 EXEC_MAX_RUNNING);

	/* Environment, credentials and cwd first: bad input must not leave a record behind. */
	char **envp = build_env(r->envs);
	if (!envp)
		return error_set(err, ENOMEM, "out of memory building the environment");
	struct spawn sp = SPAWN_INIT;
	char home[1024] = "";
	if (r->has_uid)
		spawn_set_user(&sp, r->uid, r->has_gid, r->gid, home, sizeof(home));
	char cwd[PATH_MAX];
	if (r->cwd && *r->cwd) {
		int k = expand_cwd(r->cwd, envp, home, cwd, sizeof(cwd));
		struct stat st;
		if (k < 0) {
			strv_free(envp);
			return error_set(err, EINVAL, "field 'cwd': cannot expand '%s'", r->cwd);
		}
		if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
			int e = errno;
			strv_free(envp);
			return error_set(err, EINVAL, "field 'cwd': '%s' is not a directory (%s)", cwd,
					 S_ISDIR(st.st_mode) ? strerror(e) : "not a directory");
		}
		sp.cwd = cwd;
	}

	/*
	 * Claim the id. Ids in memory were checked above; an id whose directory exists is an
	 * evicted or unreadable record and is never started again.
	 */
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%s", X.state_dir, id);
	struct stat dst;
	if (r->id && lstat(dir, &dst) == 0) {
		strv_free(envp);
		return error_set(err, EBUSY, "execution %s exists but its status is unreadable; it is not run again", id);
	}

	struct execution *ex = exec_new(id);
	if (!ex || !(ex->command = strdup(r->command))) {
		if (ex)
			exec_free(ex);
		strv_free(envp);
		return error_set(err, ENOMEM, "out of memory");
	}
	ex->background = r->background;
	ex->started_ms = time_now_ms();
	ex->started_ns = time_mono_ns();
	ex->running = true;
	hash_put(ex);

	int rc = 0;
	int out_w = -1, err_w = -1;
	if (r->background) {
		/* The process writes the combined file itself, so ordering is exact and the output
		 * does not depend on execd reading it. So the file must exist first. */
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			rc = error_set_errno(err, errno, "create '%s'", dir);
			goto fail;
		}
		ex->fd_output = open_out(ex, "output", O_WRONLY);
		if (ex->fd_output < 0) {
			rc = error_set_errno(err, errno, "create output file in '%s'", dir);
			goto fail;
		}
		sp.stdout_fd = sp.stderr_fd = ex->fd_output;
	} else {
		int po[2], pe[2];
		ex->split_out = malloc(sizeof(*ex->split_out));
		ex->split_err = malloc(sizeof(*ex->split_err));
		if (!ex->split_out || !ex->split_err) {
			rc = error_set(err, ENOMEM, "out of memory");
			goto fail;
		}
		line_splitter_init(ex->split_out);
		line_splitter_init(ex->split_err);
		if (pipe2(po, O_CLOEXEC | O_NONBLOCK) < 0) {
			rc = error_set_errno(err, errno, "pipe");
			goto fail;
		}
		if (pipe2(pe, O_CLOEXEC | O_NONBLOCK) < 0) {
			close(po[0]);
			close(po[1]);
			rc = error_set_errno(err, errno, "pipe");
			goto fail;
		}
		ex->pipe_out = po[0];
		ex->pipe_err = pe[0];
		out_w = po[1];
		err_w = pe[1];
		/* The child's ends must block: a command does not expect O_NONBLOCK stdout. */
		fcntl(out_w, F_SETFL, 0);
		fcntl(err_w, F_SETFL, 0);
		sp.stdout_fd = out_w;
		sp.stderr_fd = err_w;
	}
	sp.command = ex->command;
	sp.envp = envp;
	pid_t pid;
	rc = spawn_start(&sp, &pid, err);
	if (r->background)
		closefd(&ex->fd_output); /* the process has its own */
	if (out_w >= 0)
		close(out_w);
	if (err_w >= 0)
		close(err_w);
	strv_free(envp);
	envp = NULL;
	if (rc < 0) {
		error_prefix(err, "start command");
		goto fail;
	}
	ex->pid = pid;
	LIST_INSERT_HEAD(&X.running, ex, live);
	X.n_running++;

	if (!r->background) {
		ex->ev_out = event_new(X.base, ex->pipe_out, EV_READ | EV_PERSIST, on_pipe, ex);
		ex->ev_err = event_new(X.base, ex->pipe_err, EV_READ | EV_PERSIST, on_pipe, ex);
		/* Below HTTP I/O: an init or output event already queued goes out before more
		 * output is read (and before the files are created). */
		if (ex->ev_out) {
			event_priority_set(ex->ev_out, EXEC_PRIO_BACKGROUND);
			event_add(ex->ev_out, NULL);
		}
		if (ex->ev_err) {
			event_priority_set(ex->ev_err, EXEC_PRIO_BACKGROUND);
			event_add(ex->ev_err, NULL);
		}
	}
	if (r->timeout_ms > 0) {
		ex->ev_timeout = evtimer_new(X.base, on_timeout, ex);
		struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
		if (ex->ev_timeout)
			evtimer_add(ex->ev_timeout, &tv);
	}
	/* The init event goes first in the transcript: the process has started. */
	stream_event_text(&ex->init_event, "init", ex->id, strlen(ex->id), time_now_ms());
	ex->events_len = ex->init_event.len;
	defer_us(ex, ensure_files, FILES_DELAY_US); /* a no-op if the end came first */
	*ret = exec_ref(ex);
	return 0;

fail:
	strv_free(envp);
	log_warn("execution %s: %s", id, err ? err->msg : "start failed");
	start_failed(ex, err ? err->msg : "start failed");
	*ret = exec_ref(ex);
	return rc < 0 ? rc : -EIO;
}
