/*
 * Blocking work (runtime create/destroy) runs in a forked worker process so the event loop never
 * blocks; the worker reports one fixed-size result over a pipe. The shape follows git's
 * run-command: WORKER_INIT, worker_start(), worker_finish() (internal, when the result is in),
 * worker_clear().
 *
 * corrald is single-threaded, so fork() is safe. The child closes every inherited descriptor but
 * the result pipe and stdio (a long destroy must not keep the HTTP listener or client sockets
 * open), restores default signal dispositions, and runs in its own process group so a terminal's
 * Ctrl-C aimed at corrald does not kill a half-done create.
 */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/runtime.h"
#include "shared/error.h"

struct worker_result {
	int rc; /* 0 or a negative errno */
	pid_t pid;
	struct runtime_handle handle; /* a create's */
	bool state_write; /* rc is the failure to store the sandbox's record */
	char msg[ERROR_MSG_MAX];
};

struct worker;
/* Runs in the child; fills *ret. */
typedef void (*worker_fn)(void *arg, struct worker_result *ret);
/* Runs in the parent once the result is in (or the worker died without one: rc < 0). */
typedef void (*worker_done_fn)(struct worker *w, const struct worker_result *res, void *arg);

struct worker {
	worker_fn fn;
	worker_done_fn done;
	void *arg;
	int keep_fd; /* a descriptor the child keeps open besides its result pipe, or -1 */
	/* private */
	pid_t pid;
	int fd;
	struct event *ev;
	struct worker_result res;
	size_t got;
	struct event_base *base;
	struct worker *next_queued; /* waiting for a slot (see WORKER_MAX_RUNNING) */
	bool queued;
};

#define WORKER_INIT { .keep_fd = -1, .pid = -1, .fd = -1 }

/*
 * In a worker's child: the descriptor its result goes to. A child that execs another program
 * hands it on; that program reports with worker_report() (same binary, same struct).
 */
int worker_result_fd(void);
void worker_report(int fd, const struct worker_result *res);

/*
 * At most worker_max_running() workers run at once: twice corrald's CPUs (a create or a teardown
 * is kernel CPU work plus some disk waits), between 2 and WORKER_MAX_RUNNING. Later ones wait in
 * FIFO order, so in a burst of creates the first ones finish first instead of all of them
 * sharing the cores until the end (100 creates at once on 2 cores: p50 ~1.2 s with 64 at once,
 * ~0.86 s with 4), and a mass TTL expiry does not fork thousands of processes at the same moment.
 */
#define WORKER_MAX_RUNNING 64
unsigned worker_max_running(void);

/*
 * Fork and run w->fn in the child, now or when a slot frees. 0 or -errno (fork/pipe failure of
 * an immediate start: done is not called; a queued worker that cannot fork later gets done with
 * that error).
 */
int worker_start(struct worker *w, struct event_base *base);
/* True while a worker is queued or running and its result is not yet in. */
int worker_running(const struct worker *w);
/* Cancel a queued worker or SIGKILL a running one; done is then called with rc -ECANCELED. */
void worker_kill(struct worker *w);
/* Release the event and the pipe. Does not kill the process. Safe on an idle worker. */
void worker_clear(struct worker *w);
/* How many workers are running or queued (shutdown waits for them). */
unsigned worker_count(void);
