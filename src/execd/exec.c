#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "shared/hash.h"
#include "shared/log.h"
#include "shared/strv.h"
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
/* A record of lines goes to the transcript at most this long after its first line. Lines read
 * within the same millisecond share a record (and its timestamp): a flood of tiny writes costs a
 * few bytes of framing per millisecond, not per write. */
#define TAIL_FLUSH_US 2000

static struct {
	struct event_base *base;
	char state_dir[PATH_MAX];
	uint64_t output_cap;
	struct execution *hash[HASH_BUCKETS];
	TAILQ_HEAD(execution_tailq, execution) finished;
	LIST_HEAD(, execution) running;
	unsigned n_running, n_finished;
	size_t finished_bytes;
} X;

static unsigned id_hash(const char *id)
{
	return hash_fnv1a(id) % HASH_BUCKETS;
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

int exec_init(struct event_base *base, const char *state_dir, uint64_t output_cap, struct error *err)
{
	X.base = base;
	X.output_cap = output_cap ? output_cap : EXEC_OUTPUT_CAP_DEFAULT;
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
	ex->fd_tr = ex->fd_output = -1;
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
	freeev(&ex->ev_flush);
	closefd(&ex->pipe_out);
	closefd(&ex->pipe_err);
	closefd(&ex->fd_tr);
	closefd(&ex->fd_output);
	free(ex->split_out);
	free(ex->split_err);
	sbuf_clear(&ex->pending);
	sbuf_clear(&ex->tail);
	sbuf_clear(&ex->early_tr);
	sbuf_clear(&ex->early_out);
	sbuf_clear(&ex->tr_mem);
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
	if (ex->error) {
		json_object_set_new(j, "error", json_string(ex->error));
	} else if (ex->store_errno && !ex->running) {
		/* Its files failed it (also after the end: files are written late): the exit code is
		 * the process's, the error says what is not all there. */
		char m[160], e[320];
		exec_store_error(ex, m, sizeof(m));
		if (ex->out_dropped)
			snprintf(e, sizeof(e),
				 "the output could not be stored in full (%s): %" PRIu64 " bytes of it are missing; the exit code is the command's own",
				 m, ex->out_dropped);
		else
			snprintf(e, sizeof(e),
				 "the output could not be stored (%s): it is held in memory only, until corral-execd restarts; the exit code is the command's own",
				 m);
		json_object_set_new(j, "error", json_string(e));
	}
	if (!ex->running && ex->finished_ms) {
		time_format_rfc3339(ex->finished_ms, ts);
		json_object_set_new(j, "finished_at", json_string(ts));
	}
	/* Extension: cut output is never passed off as complete. */
	if (ex->out_truncated || ex->out_dropped) {
		json_object_set_new(j, "output_truncated", json_true());
		json_object_set_new(j, "output_cap", json_integer((json_int_t)ex->out_cap));
		json_object_set_new(j, "output_dropped", json_integer((json_int_t)ex->out_dropped));
	}
	if (ex->store_errno) {
		char m[160];
		exec_store_error(ex, m, sizeof(m));
		json_object_set_new(j, "output_error", json_string(m));
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
	if (json_is_true(json_object_get(j, "output_truncated"))) {
		ex->out_truncated = true;
		ex->out_cap = (uint64_t)json_integer_value(json_object_get(j, "output_cap"));
		ex->out_dropped = (uint64_t)json_integer_value(json_object_get(j, "output_dropped"));
	}
	if (json_string_value(json_object_get(j, "output_error"))) {
		/* The errno is not kept: the message is what the status and logs show. */
		ex->store_errno = EIO;
		ex->store_what = "output";
		ex->out_broken = ex->tr_broken = true;
	}
	json_decref(j);
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s/transcript", X.state_dir, id);
	if (stat(path, &st) == 0)
		ex->tr_len = ex->tr_file_len = (uint64_t)st.st_size;
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

/* Write all of p; 0, or -errno with *ret_done the bytes that were written. */
static int write_full(int fd, const void *p, size_t n, size_t *ret_done)
{
	const char *c = p;
	*ret_done = 0;
	while (n > 0) {
		ssize_t k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		c += k;
		n -= (size_t)k;
		*ret_done += (size_t)k;
	}
	return 0;
}

void exec_store_error(const struct execution *ex, char *buf, size_t len)
{
	snprintf(buf, len, "write %s: %s", ex->store_what ? ex->store_what : "output",
		 strerror(ex->store_errno ? ex->store_errno : EIO));
}

/* A write of the execution's files failed: remembered (the first one), logged once. The output
 * is cut at the next chance (store_cut()). */
static void store_failed(struct execution *ex, const char *what, int err)
{
	if (ex->store_errno)
		return;
	ex->store_errno = err > 0 ? err : EIO;
	ex->store_what = what;
	log_warn("execution %s: write %s: %s; its output is cut here", ex->id, what,
		 strerror(ex->store_errno));
}

static int open_out(struct execution *ex, const char *name, int flags);

enum { F_TR, F_OUTPUT };

static int *file_fd(struct execution *ex, int which)
{
	return which == F_TR ? &ex->fd_tr : &ex->fd_output;
}

static struct sbuf *file_early(struct execution *ex, int which)
{
	return which == F_TR ? &ex->early_tr : &ex->early_out;
}

static const char *const file_names[] = {"transcript", "output"};

/*
 * Create the execution's directory and files (once), each with what was held in memory meanwhile.
 * A finished execution's files are closed again. With notify, watchers hear about it.
 */
static void ensure_files_ex(struct execution *ex, bool notify)
{
	if (ex->files_ready)
		return;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%s", X.state_dir, ex->id);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		store_failed(ex, "directory", errno); /* the files' own errors would say ENOENT */
	for (int i = F_TR; i <= F_OUTPUT; i++) {
		int *fd = file_fd(ex, i);
		struct sbuf *early = file_early(ex, i);
		if (i == F_OUTPUT && !ex->background)
			continue;
		if (*fd < 0)
			*fd = open_out(ex, file_names[i], O_WRONLY);
		int r = *fd < 0 ? -errno : 0;
		size_t done = 0;
		if (r == 0)
			r = write_full(*fd, early->data, early->len, &done);
		if (r < 0 && i == F_TR) {
			/* Whole records only: the file is cut back to empty, the records stay in
			 * memory, where readers find them. */
			if (*fd >= 0 && ftruncate(*fd, 0) < 0)
				closefd(fd);
			ex->tr_broken = true;
			ex->tr_mem = *early;
			*early = (struct sbuf){0};
		} else if (i == F_TR) {
			ex->tr_file_len = early->len;
		} else if (r < 0) {
			size_t lost = early->len - done;
			ex->out_broken = true;
			ex->out_dropped += lost - MIN(lost, ex->marker_early); /* the marker comes last */
		}
		if (i == F_OUTPUT)
			ex->marker_early = 0;
		if (r < 0)
			store_failed(ex, file_names[i], -r);
		sbuf_clear(early);
	}
	/* Readers now find the transcript in the file (and in tr_mem after a failed write). */
	ex->files_ready = true;
	/* The transcript fd is reopened for the final records; a running background execution
	 * writes nothing else to it. */
	if (!ex->running || ex->background)
		closefd(&ex->fd_tr);
	if (!ex->running)
		closefd(&ex->fd_output);
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

/*
 * Append to one of the execution's files, or hold the bytes until the files exist. The transcript
 * gets whole records (h and p, one record): one that cannot be written is cut off the file again
 * and kept in memory with every record after it. Output that cannot be written is counted as
 * dropped; nothing is written after a failure, so a stored file never has a hole.
 */
static void file_append2(struct execution *ex, int which, const void *h, size_t hl, const void *p,
			 size_t n)
{
	int *fd = file_fd(ex, which);
	if (which == F_TR && ex->tr_broken) {
		if (sbuf_add(&ex->tr_mem, h, hl) < 0 || sbuf_add(&ex->tr_mem, p, n) < 0)
			log_error("execution %s: out of memory holding its transcript", ex->id);
		return;
	}
	if (which == F_OUTPUT && ex->out_broken) {
		if (!ex->in_marker)
			ex->out_dropped += n;
		return;
	}
	if (!ex->files_ready && *fd < 0) {
		struct sbuf *early = file_early(ex, which);
		size_t before = early->len;
		if (ex->early_tr.len + ex->early_out.len + hl + n <= EARLY_MAX &&
		    sbuf_add(early, h, hl) == 0 && sbuf_add(early, p, n) == 0) {
			if (which == F_OUTPUT && ex->in_marker)
				ex->marker_early += n;
			return;
		}
		early->len = before;
		ensure_files_ex(ex, false);
		if ((which == F_TR && ex->tr_broken) || (which == F_OUTPUT && ex->out_broken)) {
			file_append2(ex, which, h, hl, p, n);
			return;
		}
	}
	if (*fd < 0)
		*fd = open_out(ex, file_names[which], O_WRONLY);
	int r = *fd < 0 ? -errno : 0;
	size_t done = 0, done2 = 0;
	if (r == 0 && hl)
		r = write_full(*fd, h, hl, &done);
	if (r == 0)
		r = write_full(*fd, p, n, &done2);
	if (r == 0) {
		if (which == F_TR)
			ex->tr_file_len += hl + n;
		return;
	}
	store_failed(ex, file_names[which], -r);
	if (which == F_OUTPUT) {
		ex->out_broken = true;
		if (!ex->in_marker)
			ex->out_dropped += n - done2;
		return;
	}
	/* A record cut short would make the rest of the file unreadable: cut it off again. */
	if (*fd >= 0 && ftruncate(*fd, (off_t)ex->tr_file_len) < 0)
		log_warn("execution %s: cut its transcript back to %" PRIu64 " bytes: %m", ex->id,
			 ex->tr_file_len);
	ex->tr_broken = true;
	file_append2(ex, which, h, hl, p, n);
}

static void file_append(struct execution *ex, int which, const void *p, size_t n)
{
	file_append2(ex, which, NULL, 0, p, n);
}

ssize_t exec_transcript_read(struct execution *ex, int *fd, uint64_t off, void *buf, size_t n)
{
	if (off >= ex->tr_len)
		return 0;
	n = (size_t)MIN((uint64_t)n, ex->tr_len - off);
	if (!ex->files_ready) {
		memcpy(buf, ex->early_tr.data + off, n);
		return (ssize_t)n;
	}
	if (off >= ex->tr_file_len) {
		/* The records a failed write left in memory. */
		uint64_t m = off - ex->tr_file_len;
		if (m >= ex->tr_mem.len)
			return 0;
		n = (size_t)MIN((uint64_t)n, ex->tr_mem.len - m);
		memcpy(buf, ex->tr_mem.data + m, n);
		return (ssize_t)n;
	}
	n = (size_t)MIN((uint64_t)n, ex->tr_file_len - off);
	if (*fd < 0) {
		char path[PATH_MAX];
		exec_path(ex, "transcript", path, sizeof(path));
		*fd = open(path, O_RDONLY | O_CLOEXEC);
		if (*fd < 0)
			return -errno;
	}
	ssize_t k = RETRY_EINTR(pread(*fd, buf, n, (off_t)off));
	return k < 0 ? -errno : k;
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

/* ----- the transcript writer ----- */

/* Append a record to the transcript (readers see it once tr_len counts it). */
static void tr_append(struct execution *ex, enum tr_kind kind, int64_t ts, const void *payload,
		      size_t len)
{
	char h[TR_HEADER_MAX];
	size_t hl = tr_header(h, kind, ts, ex->tr_ts, len);
	file_append2(ex, F_TR, h, hl, payload, len);
	ex->tr_len += hl + len;
	ex->tr_ts = ts;
}

/* The tail record goes to the transcript. */
static void tail_flush(struct execution *ex)
{
	if (ex->tail.len == 0)
		return;
	tr_append(ex, ex->tail_kind, ex->tail_ts, ex->tail.data, ex->tail.len);
	ex->tail.len = 0;
	ex->tail_events = 0;
	if (ex->tail.cap > 4 * TR_PAYLOAD_MAX)
		sbuf_clear(&ex->tail);
}

static void on_flush_timer(evutil_socket_t fd, short what, void *arg)
{
	tail_flush(arg);
}

/*
 * One line of output at ts: its event goes to pending, its bytes to the tail record, which
 * collects the lines of one stream and one timestamp (a short line costs one byte of framing on
 * disk, not an event's ~50). The tail is written out when a line does not fit in it, and
 * TAIL_FLUSH_US after it was started at the latest.
 */
static void tr_line(struct execution *ex, enum tr_kind kind, int64_t ts, const char *line, size_t len)
{
	size_t before = ex->pending.len;
	if (stream_event_line(&ex->pending, kind == TR_STDERR ? "stderr" : "stdout", line, len, ts) < 0) {
		ex->pending.len = before;
		log_error("execution %s: out of memory encoding output", ex->id);
		return;
	}
	size_t events = ex->pending.len - before;
	if (ex->tail.len &&
	    (ex->tail_kind != kind || ex->tail_ts != ts || ex->tail.len + len + 1 > TR_PAYLOAD_MAX ||
	     ex->tail_events + events > TR_EVENTS_MAX))
		tail_flush(ex);
	if (sbuf_reserve(&ex->tail, len + 1) < 0) {
		ex->pending.len = before;
		log_error("execution %s: out of memory holding output", ex->id);
		return;
	}
	if (ex->tail.len == 0) {
		ex->tail_kind = kind;
		ex->tail_ts = ts;
		ex->tail_wire = ex->events_len;
		if (ex->ev_flush && !evtimer_pending(ex->ev_flush, NULL)) {
			const struct timeval tv = {0, TAIL_FLUSH_US};
			evtimer_add(ex->ev_flush, &tv);
		}
	}
	if (before == 0)
		ex->mark = (struct tr_pos){ex->tr_len, ex->tail_wire, ex->tr_ts};
	sbuf_add(&ex->tail, line, len);
	sbuf_add(&ex->tail, "\n", 1);
	ex->tail_events += events;
	ex->events_len += events;
}

/* A record other than lines: to the transcript at once, its events to pending. */
static void tr_record(struct execution *ex, enum tr_kind kind, int64_t ts, const void *payload,
		      size_t len)
{
	tail_flush(ex);
	size_t before = ex->pending.len;
	const struct tr_record r = {kind, ts, payload, len};
	if (tr_record_events(&r, &ex->pending) < 0) {
		ex->pending.len = before;
		log_error("execution %s: cannot encode a %d record", ex->id, (int)kind);
		return;
	}
	if (before == 0)
		ex->mark = (struct tr_pos){ex->tr_len, ex->events_len, ex->tr_ts};
	ex->events_len += ex->pending.len - before;
	tr_append(ex, kind, ts, payload, len);
}

static void tr_init(struct execution *ex, const char *text, int64_t ts)
{
	tr_record(ex, TR_INIT, ts, text, strlen(text));
}

/* The final event: execution_complete on 0, else the error with the exit code. */
static void tr_end(struct execution *ex, int code, int64_t ts)
{
	struct sbuf p = {0};
	if (code == 0) {
		int64_t ms = exec_elapsed_ms(ex);
		tr_varint_add(&p, ms < 0 ? 0 : (uint64_t)ms);
		tr_record(ex, TR_COMPLETE, ts, p.data, p.len);
	} else {
		char v[16];
		int k = snprintf(v, sizeof(v), "%d", code);
		tr_record(ex, TR_ERROR, ts, v, (size_t)k);
	}
	sbuf_clear(&p);
}

/* Tell the watchers about what pending holds (and about the end). */
static void notify_pending(struct execution *ex)
{
	if (ex->pending.len == 0 && ex->running)
		return;
	notify_all(ex);
	ex->pending.len = 0;
	if (ex->pending.cap > (4u << 20))
		sbuf_clear(&ex->pending);
}

struct line_ctx {
	struct execution *ex;
	enum tr_kind kind;
	int64_t ts;
};

static void on_line(const char *line, size_t len, void *arg)
{
	struct line_ctx *c = arg;
	tr_line(c->ex, c->kind, c->ts, line, len);
}

static void split_flush(struct execution *ex, bool is_err, int64_t ts)
{
	struct line_ctx c = {ex, is_err ? TR_STDERR : TR_STDOUT, ts};
	struct line_splitter *s = is_err ? ex->split_err : ex->split_out;
	if (s)
		line_splitter_flush(s, on_line, &c);
}

/*
 * A marker in the stream (a stderr line) and, for a background command, in its output (a line of
 * its own: the cut may fall in the middle of one).
 */
static void tr_marker_record(struct execution *ex, enum tr_kind kind, uint64_t v, int64_t ts)
{
	struct sbuf p = {0};
	tr_varint_add(&p, v);
	tr_record(ex, kind, ts, p.data, p.len);
	sbuf_clear(&p);
	if (ex->background && !ex->out_broken) {
		char m[192];
		m[0] = '\n';
		int k = tr_marker(kind, v, m + 1, sizeof(m) - 2);
		m[k + 1] = '\n';
		ex->in_marker = true;
		if (kind == TR_CUT || kind == TR_UNSTORED)
			file_append(ex, F_OUTPUT, m, (size_t)k + 2);
		else
			file_append(ex, F_OUTPUT, m + 1, (size_t)k + 1);
		ex->in_marker = false;
	}
}

/* The cap is reached: what was kept is complete in the stream, then the marker. */
static void output_cut(struct execution *ex)
{
	int64_t now = time_now_ms();
	ex->out_truncated = true;
	log_warn("execution %s: output cap of %" PRIu64 " bytes reached; dropping the rest", ex->id,
		 ex->out_cap);
	split_flush(ex, false, now);
	split_flush(ex, true, now);
	tr_marker_record(ex, TR_CUT, ex->out_cap, now);
}

/* Its files could not be written: the output is cut as at the cap, with a marker naming the
 * error; what the process writes from now on is dropped and counted. */
static void store_cut(struct execution *ex)
{
	int64_t now = time_now_ms();
	ex->out_truncated = true;
	split_flush(ex, false, now);
	split_flush(ex, true, now);
	tr_marker_record(ex, TR_UNSTORED, (uint64_t)ex->store_errno, now);
}

/* Output the process produced: kept up to the cap, then dropped and counted. */
static void exec_output(struct execution *ex, bool is_err, const char *buf, size_t n)
{
	if (ex->store_errno && !ex->out_truncated)
		store_cut(ex);
	if (ex->out_truncated) {
		ex->out_dropped += n;
		return;
	}
	size_t keep = (size_t)MIN((uint64_t)n, ex->out_cap - ex->out_kept);
	ex->out_kept += keep;
	if (keep > 0) {
		if (ex->background) {
			file_append(ex, F_OUTPUT, buf, keep);
		} else {
			struct line_ctx c = {ex, is_err ? TR_STDERR : TR_STDOUT, time_now_ms()};
			line_splitter_feed(is_err ? ex->split_err : ex->split_out, buf, keep, on_line, &c);
		}
	}
	if (keep < n) {
		ex->out_dropped += n - keep;
		output_cut(ex);
	}
	if (ex->store_errno && !ex->out_truncated)
		store_cut(ex);
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
	exec_output(ex, is_err, buf, (size_t)n);
	return n;
}

static void pipe_close(struct execution *ex, bool is_err)
{
	if (is_err) {
		freeev(&ex->ev_err);
		closefd(&ex->pipe_err);
	} else {
		freeev(&ex->ev_out);
		closefd(&ex->pipe_out);
	}
	split_flush(ex, is_err, time_now_ms());
}

static void on_pipe(evutil_socket_t fd, short what, void *arg)
{
	struct execution *ex = arg;
	bool is_err = fd == ex->pipe_err;
	ssize_t n = pipe_read_once(ex, is_err);
	if (n == 0)
		pipe_close(ex, is_err);
	notify_pending(ex);
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
	tail_flush(ex); /* a write failing here is known before the end is recorded */
	if (ex->store_errno && !ex->out_truncated)
		store_cut(ex);
	ex->running = false;
	ex->finished_ms = time_now_ms();
	if (ex->out_truncated)
		tr_marker_record(ex, TR_DROPPED, ex->out_dropped, ex->finished_ms);
	ex->has_exit_code = true;
	ex->exit_code = code;
	if (error && !ex->error)
		ex->error = strdup(error);
	tr_end(ex, code, ex->finished_ms);
	freeev(&ex->ev_timeout);
	freeev(&ex->ev_kill);
	freeev(&ex->ev_flush);
	if (ex->pid > 0) {
		LIST_REMOVE(ex, live);
		X.n_running--;
	}
	ex->pid = 0;
	/* Watchers see running == false in this notification. */
	notify_pending(ex);
	closefd(&ex->fd_tr);
	closefd(&ex->fd_output);
	free(ex->split_out);
	free(ex->split_err);
	ex->split_out = ex->split_err = NULL;
	sbuf_clear(&ex->pending);
	sbuf_clear(&ex->tail);
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
			bool was_running = ex->running;
			if (was_running) {
				/* Its transcript ends like its status: killed (a re-attach after a restart
				 * replays a complete stream). */
				ex->running = false;
				ex->has_exit_code = true;
				ex->exit_code = 128 + SIGKILL;
				ex->finished_ms = time_now_ms();
				if (!ex->error)
					ex->error = strdup("killed: corral-execd exited");
				split_flush(ex, false, ex->finished_ms);
				split_flush(ex, true, ex->finished_ms);
				tr_end(ex, ex->exit_code, ex->finished_ms);
			}
			tail_flush(ex);
			ensure_files_ex(ex, false);
			if (was_running)
				write_status(ex);
		}
}

/* The record of a new execution, running, with its init event; not yet in the registry. */
static struct execution *exec_new_running(const char *id, const char *command, uint64_t cap)
{
	struct execution *ex = exec_new(id);
	if (!ex)
		return NULL;
	if (!(ex->command = strdup(command))) {
		exec_free(ex);
		return NULL;
	}
	ex->out_cap = cap ? MIN(cap, X.output_cap) : X.output_cap;
	ex->ev_flush = evtimer_new(X.base, on_flush_timer, ex);
	if (ex->ev_flush)
		event_priority_set(ex->ev_flush, EXEC_PRIO_BACKGROUND);
	ex->started_ms = time_now_ms();
	ex->started_ns = time_mono_ns();
	ex->running = true;
	return ex;
}

struct execution *exec_new_external(const char *command, const char *init_text, struct error *err)
{
	char id[HEXID_LEN];
	if (id_hex32(id) < 0) {
		error_set_errno(err, errno, "generate an execution id");
		return NULL;
	}
	struct execution *ex = exec_new_running(id, command, 0);
	if (!ex || !(ex->split_out = malloc(sizeof(*ex->split_out))) ||
	    !(ex->split_err = malloc(sizeof(*ex->split_err)))) {
		if (ex)
			exec_free(ex);
		error_set(err, ENOMEM, "out of memory");
		return NULL;
	}
	line_splitter_init(ex->split_out);
	line_splitter_init(ex->split_err);
	hash_put(ex);
	tr_init(ex, init_text, ex->started_ms);
	ex->pending.len = 0; /* nobody watches yet: readers start from the transcript */
	defer(ex, ensure_files);
	return exec_ref(ex);
}

void exec_external_output(struct execution *ex, bool is_err, const char *buf, size_t n)
{
	if (!ex->running || n == 0)
		return;
	exec_output(ex, is_err, buf, n);
	notify_pending(ex);
}

void exec_external_finish(struct execution *ex, int code, const char *error)
{
	if (!ex->running)
		return;
	int64_t now = time_now_ms();
	split_flush(ex, false, now);
	split_flush(ex, true, now);
	exec_ref(ex);
	exec_finish(ex, code, error);
	exec_unref(ex);
}

/* ----- environment and cwd ----- */

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
	freeev(&ex->ev_flush);
	freeev(&ex->ev_out);
	freeev(&ex->ev_err);
	closefd(&ex->pipe_out);
	closefd(&ex->pipe_err);
	if (ex->tr_len == 0)
		tr_init(ex, ex->id, ex->started_ms);
	tr_end(ex, 255, ex->finished_ms);
	sbuf_clear(&ex->pending);
	ensure_files_ex(ex, false);
	closefd(&ex->fd_tr);
	closefd(&ex->fd_output);
	add_finished(ex);
}

/*
 * Environment, credentials and cwd of r into sp, checked before anything is recorded: bad input
 * must not leave a record behind. home and cwd hold what sp points to. On success *ret_envp is the
 * environment (the caller's to free); on error nothing is left to free.
 */
static int exec_prepare(const struct exec_request *r, struct spawn *sp, char ***ret_envp,
			char *home, size_t homelen, char *cwd, size_t cwdlen, struct error *err)
{
	char **envp = build_env(r->envs);
	if (!envp)
		return error_set(err, ENOMEM, "out of memory building the environment");
	if (r->has_uid)
		spawn_set_user(sp, r->uid, r->has_gid, r->gid, home, homelen);
	if (r->cwd && *r->cwd) {
		int k = expand_cwd(r->cwd, envp, home, cwd, cwdlen);
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
		sp->cwd = cwd;
	}
	*ret_envp = envp;
	return 0;
}

/*
 * Output comes through pipes that execd reads (and counts against the cap); the child's ends
 * block, as a command expects of its stdout. A background command gets one pipe for stdout
 * and stderr, so the combined output keeps the order of its writes. The read ends go to ex, the
 * child's ends to *out_w and *err_w (as they are made) and to sp.
 */
static int exec_pipes(struct execution *ex, const struct exec_request *r, struct spawn *sp,
		      int *out_w, int *err_w, struct error *err)
{
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC | O_NONBLOCK) < 0)
		return error_set_errno(err, errno, "pipe");
	ex->pipe_out = po[0];
	*out_w = po[1];
	fcntl(*out_w, F_SETFL, 0);
	sp->stdout_fd = sp->stderr_fd = *out_w;
	if (!r->background) {
		ex->split_out = malloc(sizeof(*ex->split_out));
		ex->split_err = malloc(sizeof(*ex->split_err));
		if (!ex->split_out || !ex->split_err)
			return error_set(err, ENOMEM, "out of memory");
		line_splitter_init(ex->split_out);
		line_splitter_init(ex->split_err);
		if (pipe2(pe, O_CLOEXEC | O_NONBLOCK) < 0)
			return error_set_errno(err, errno, "pipe");
		ex->pipe_err = pe[0];
		*err_w = pe[1];
		fcntl(*err_w, F_SETFL, 0);
		sp->stderr_fd = *err_w;
	}
	return 0;
}

/* Below HTTP I/O: an init or output event already queued goes out before more output is
 * read (and before the files are created). */
static void exec_watch(struct execution *ex, const struct exec_request *r)
{
	ex->ev_out = event_new(X.base, ex->pipe_out, EV_READ | EV_PERSIST, on_pipe, ex);
	if (ex->ev_out) {
		event_priority_set(ex->ev_out, EXEC_PRIO_BACKGROUND);
		event_add(ex->ev_out, NULL);
	}
	if (ex->pipe_err >= 0) {
		ex->ev_err = event_new(X.base, ex->pipe_err, EV_READ | EV_PERSIST, on_pipe, ex);
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

	char **envp = NULL;
	struct spawn sp = SPAWN_INIT;
	char home[1024] = "";
	char cwd[PATH_MAX];
	int rc = exec_prepare(r, &sp, &envp, home, sizeof(home), cwd, sizeof(cwd), err);
	if (rc < 0)
		return rc;

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

	struct execution *ex = exec_new_running(id, r->command, r->output_cap);
	if (!ex) {
		strv_free(envp);
		return error_set(err, ENOMEM, "out of memory");
	}
	ex->background = r->background;
	hash_put(ex);

	int out_w = -1, err_w = -1;
	rc = exec_pipes(ex, r, &sp, &out_w, &err_w, err);
	if (rc < 0) {
		/* the write ends made before the failure: the read ends go with ex */
		if (out_w >= 0)
			close(out_w);
		if (err_w >= 0)
			close(err_w);
		goto fail;
	}
	sp.command = ex->command;
	sp.envp = envp;
	pid_t pid;
	rc = spawn_start(&sp, &pid, err);
	if (out_w >= 0)
		close(out_w);
	if (err_w >= 0)
		close(err_w);
	strv_free(envp);
	envp = NULL;
	if (rc == -EAGAIN || rc == -ENOMEM) {
		/* Out of processes (the sandbox's pids limit or the host's) or memory: transient, and
		 * not the command's doing. Nothing is recorded: a retry with the same id runs it. */
		log_warn("execution %s: %s", id, err ? err->msg : "fork failed");
		error_set(err, EXEC_E_NO_PROCESS,
			  "the command could not be started: %s: the sandbox is at its process limit (resourceLimits.pids) or the host's, or out of memory; retry once processes have exited",
			  strerror(-rc));
		closefd(&ex->pipe_out);
		closefd(&ex->pipe_err);
		hash_del(ex);
		exec_unref(ex);
		return -EXEC_E_NO_PROCESS;
	}
	if (rc < 0) {
		error_prefix(err, "start command");
		goto fail;
	}
	ex->pid = pid;
	LIST_INSERT_HEAD(&X.running, ex, live);
	X.n_running++;

	exec_watch(ex, r);
	/* The init event goes first in the transcript: the process has started. Nobody watches
	 * yet: a stream client reads it from the transcript (held in memory for now). */
	tr_init(ex, ex->id, time_now_ms());
	ex->pending.len = 0;
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

