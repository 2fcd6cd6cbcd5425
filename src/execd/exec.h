/*
 * Executions: the commands POST /command starts. Each has a record in memory (bounded: at most
 * EXEC_MAX_RUNNING running, and the most recent EXEC_MAX_FINISHED finished ones) and a directory
 * under the state dir that outlives the record:
 *
 *   <state>/<id>/transcript   the stream (init, stdout/stderr lines, cut marker, final event; no
 *                             pings) in the compact form of stream.h: re-attaching clients replay
 *                             it, re-encoded byte for byte as it went out live
 *   <state>/<id>/output       background only: combined stdout+stderr as produced (what
 *                             /command/{id}/logs serves, byte offsets as cursors)
 *   <state>/<id>/status.json  {"id","content","running","exit_code"?,"error"?,"started_at",
 *                             "finished_at"?,"output_*"?,"background"}: written at start and at
 *                             the end
 *
 * Output is read from pipes by execd, so it counts against a cap (exec_init; a request may lower
 * it): past it the process keeps running, its further output is read and dropped, the bytes are
 * counted, and the stream (an OutputTruncated error event), the logs (a marker line) and the
 * status (output_truncated, output_dropped) say so.
 *
 * An id is never run twice: it is claimed in memory, and an id found on disk (an evicted record)
 * is never started again.
 *
 * The directory and files of a foreground execution are created off the request's critical path
 * (file creation costs ~200 us each on a slow disk); meanwhile the transcript is held in memory,
 * where readers find it too.
 */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "shared/error.h"
#include "shared/id.h"
#include "stream.h"

#define EXEC_MAX_RUNNING 1024
#define EXEC_MAX_FINISHED 4096
#define EXEC_MAX_FINISHED_BYTES (64u << 20) /* commands kept in memory for finished records */
#define EXEC_KILL_GRACE_MS 3000
/* The event base has EXEC_PRIORITIES queues; default events (HTTP, signals) get 1, and pipe reads
 * and file bookkeeping run at EXEC_PRIO_BACKGROUND, after the replies that are ready. */
#define EXEC_PRIORITIES 3
#define EXEC_PRIO_BACKGROUND 2             /* interrupt: SIGTERM, then SIGKILL after this */

struct execution;

/* A record boundary in the transcript: its offset, the stream bytes before it, the previous
 * record's timestamp (what decoding the record needs). */
struct tr_pos {
	uint64_t off, wire;
	int64_t ts;
};

/* Someone interested in an execution's progress: stream clients, status long-polls. */
struct exec_watch {
	/* New events, or finished. During the call ex->pending holds exactly the stream bytes just
	 * produced (ex->events_len already counts them), so a caught-up reader can send them as
	 * they are; ex->mark is where a reader that cannot take them now resumes from the
	 * transcript. notify may remove its own watch and no other. */
	void (*notify)(struct exec_watch *w, struct execution *ex);
	LIST_ENTRY(exec_watch) link;
	bool attached;
};

struct execution {
	char id[HEXID_LEN];
	char *command;
	bool background;
	bool running;
	bool has_exit_code;
	int exit_code;
	char *error;
	int64_t started_ms, finished_ms; /* unix ms */
	uint64_t started_ns;             /* monotonic, for execution_time */

	/* The stream, as the transcript holds it. */
	uint64_t events_len; /* stream bytes produced so far (live executions only) */
	uint64_t tr_len;     /* bytes of the transcript (in the file, or in early_tr) */
	int64_t tr_ts;       /* timestamp of its last record */
	struct sbuf tail;    /* lines of the record being filled, not yet in the transcript */
	enum tr_kind tail_kind;
	int64_t tail_ts;
	uint64_t tail_wire;  /* stream bytes before the tail record */
	size_t tail_events;  /* stream bytes of the tail record */
	struct tr_pos mark;  /* start of the record that holds pending's first byte */
	struct sbuf pending;
	bool files_ready;    /* the directory and files exist (created off the hot path) */
	struct sbuf early_tr, early_out; /* transcript and output bytes until then */

	/* Output accounting. */
	uint64_t out_cap, out_kept, out_dropped;
	bool out_truncated;

	/* Storing the files (a full state disk): the transcript's first tr_file_len bytes are in its
	 * file; the records after a failed write are held in tr_mem instead (a few: the output is cut
	 * then, TR_UNSTORED). store_errno is the first failed write's, on the file named by
	 * store_what; the status and logs say so. */
	uint64_t tr_file_len;
	struct sbuf tr_mem;
	bool tr_broken, out_broken;
	/* execd's own marker lines in the output file (background) are not the command's output:
	 * lost ones are not counted in out_dropped. marker_early: bytes of them held in early_out. */
	bool in_marker;
	size_t marker_early;
	int store_errno;
	const char *store_what;

	pid_t pid;
	bool timed_out, interrupted;
	int pipe_out, pipe_err; /* background: one pipe for both */
	struct event *ev_out, *ev_err, *ev_timeout, *ev_kill, *ev_flush;
	int fd_tr, fd_output;
	struct line_splitter *split_out, *split_err;

	LIST_HEAD(, exec_watch) watchers;
	unsigned refs;
	struct execution *hash_next;
	TAILQ_ENTRY(execution) lru; /* finished records, oldest first */
	LIST_ENTRY(execution) live; /* running records */
};

struct exec_request {
	const char *id; /* client-chosen (32 lowercase hex) or NULL */
	const char *command;
	const char *cwd;
	bool background;
	int64_t timeout_ms; /* 0 = none */
	bool has_uid, has_gid;
	uid_t uid;
	gid_t gid;
	json_t *envs; /* object of strings, or NULL */
	uint64_t output_cap; /* 0 = execd's; larger than execd's is execd's */
};

/* The output kept per execution unless the request asks for less (--output-cap). */
#define EXEC_OUTPUT_CAP_DEFAULT (256ull << 20)

int exec_init(struct event_base *base, const char *state_dir, uint64_t output_cap, struct error *err);
/* "write output: No space left on device": the failed write of ex's files (store_errno != 0). */
void exec_store_error(const struct execution *ex, char *buf, size_t len);
/* execd is exiting: SIGKILL what runs, write every file still held in memory, and record the
 * running executions as killed (exit code 137). */
void exec_shutdown(void);

/* exec_start(): the process could not be forked for lack of a process slot or memory (the
 * sandbox's pids limit, the host's, or memory): nothing was recorded, the id is still free. */
#define EXEC_E_NO_PROCESS ENOBUFS

/*
 * Start an execution. Returns 0 with a new reference in *ret, or:
 *  -EEXIST  the id exists (running, finished, or only on disk): *ret is a reference to it;
 *  -EAGAIN  EXEC_MAX_RUNNING executions are running;
 *  -EBUSY   the id's directory exists but its status cannot be read (never run again);
 *  -EINVAL  bad input (err says which field);
 *  -EXEC_E_NO_PROCESS  fork failed with EAGAIN or ENOMEM: no record, the id may be used again;
 *  other    the process could not be started: the record exists, finished with exit code 255,
 *           and *ret is set when it could be created.
 */
int exec_start(const struct exec_request *r, struct execution **ret, struct error *err);
/* A reference to the execution with this id (memory, then <state>/<id>), or NULL. */
struct execution *exec_find(const char *id);
struct execution *exec_ref(struct execution *ex);
void exec_unref(struct execution *ex);
/* SIGTERM the process group now, SIGKILL after EXEC_KILL_GRACE_MS. -ESRCH when not running. */
int exec_interrupt(struct execution *ex);
/* Called by the reaper: true when pid was one of ours (its status is consumed). */
bool exec_child_exited(pid_t pid, int status);
/* SIGKILL every running execution's process group (execd is going down). */
void exec_kill_all(void);

/*
 * Executions driven by someone else (a bash session's shell): the output is fed in and the end is
 * reported; records, files, the event stream and status work as for any execution. init_text is
 * the init event's text (the session id, as the reference has it).
 */
struct execution *exec_new_external(const char *command, const char *init_text, struct error *err);
void exec_external_output(struct execution *ex, bool is_err, const char *buf, size_t n);
void exec_external_finish(struct execution *ex, int code, const char *error);

/* Expand ~ and $VAR in a client's cwd (execd's environment) and check it is a directory. */
int exec_resolve_cwd(const char *in, char *out, size_t len, struct error *err);

void exec_watch_add(struct execution *ex, struct exec_watch *w);
void exec_watch_remove(struct execution *ex, struct exec_watch *w);

/* Path of a file of the execution: <state>/<id>/<name>. */
void exec_path(const struct execution *ex, const char *name, char *buf, size_t len);
/*
 * Read transcript bytes from off (below ex->tr_len): from memory while the files do not exist
 * yet, else from the file through *fd (opened on first use; the caller closes it). Returns the
 * bytes read, or a negative errno.
 */
ssize_t exec_transcript_read(struct execution *ex, int *fd, uint64_t off, void *buf, size_t n);
/* The status object of GET /command/status/{id}. */
json_t *exec_status_json(const struct execution *ex);
/* Milliseconds the execution ran (so far, when still running). */
int64_t exec_elapsed_ms(const struct execution *ex);
/* Process exit status as execd reports it: the exit code, or 128+N when killed by signal N. */
int exec_status_to_code(int wstatus);
