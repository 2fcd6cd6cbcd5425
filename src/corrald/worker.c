#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corrald/worker.h"
#include "shared/fsutil.h"
#include "shared/macro.h"

static unsigned n_running, n_queued;
static struct worker *queue_head, *queue_tail;

unsigned worker_max_running(void)
{
	static unsigned max;
	if (!max) {
		/* The CPUs corrald may run on (its affinity), else the online ones. */
		cpu_set_t set;
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		if (sched_getaffinity(0, sizeof(set), &set) == 0)
			n = CPU_COUNT(&set);
		max = n > 0 && n < WORKER_MAX_RUNNING / 2 ? 2 * (unsigned)n : WORKER_MAX_RUNNING;
	}
	return max;
}

unsigned worker_count(void)
{
	return n_running + n_queued;
}

int worker_running(const struct worker *w)
{
	return w->pid > 0 || w->queued;
}

static int worker_fork(struct worker *w);
static void queue_run(void);

static void close_range_from(unsigned first, unsigned last)
{
	/* close_range(2) exists since Linux 5.9; fall back to a loop on older kernels. */
	if (first <= last && syscall(SYS_close_range, first, last, 0U) < 0 && errno == ENOSYS)
		for (unsigned fd = first; fd <= last && fd < 65536; fd++)
			close((int)fd);
}

/* Every descriptor from 3 up but keep and also (-1: none). */
static void close_all_but(int keep, int also)
{
	if (also <= 2)
		also = keep;
	int a = MIN(keep, also), b = MAX(keep, also);
	close_range_from(3, (unsigned)a - 1);
	close_range_from((unsigned)a + 1, (unsigned)b - 1);
	close_range_from((unsigned)b + 1, ~0U);
}

static int result_fd = -1;

int worker_result_fd(void)
{
	return result_fd;
}

void worker_report(int fd, const struct worker_result *res)
{
	(void)fd_write_all(fd, res, sizeof(*res)); /* short: the parent reports the worker's death */
}

static void child_run(struct worker *w, int wfd)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	setpgid(0, 0);
	close_all_but(wfd, w->keep_fd);
	result_fd = wfd;

	struct worker_result res = {0};
	w->fn(w->arg, &res);
	worker_report(wfd, &res);
	_exit(0);
}

/* Reap the worker and hand the result to the owner. */
static void worker_finish(struct worker *w, int rc_if_short, const char *why)
{
	int status = 0;
	pid_t pid = w->pid;
	if (pid > 0 && RETRY_EINTR(waitpid(pid, &status, 0)) < 0)
		status = 0;
	w->pid = -1;
	n_running--;
	if (w->got < sizeof(w->res)) {
		memset(&w->res, 0, sizeof(w->res));
		w->res.rc = rc_if_short;
		if (WIFSIGNALED(status))
			snprintf(w->res.msg, sizeof(w->res.msg), "%s (worker %d killed by signal %d)",
				 why, (int)pid, WTERMSIG(status));
		else
			snprintf(w->res.msg, sizeof(w->res.msg), "%s (worker %d exited with status %d)",
				 why, (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
	worker_clear(w);
	if (w->done)
		w->done(w, &w->res, w->arg);
	queue_run();
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct worker *w = arg;
	for (;;) {
		ssize_t n = read(fd, (char *)&w->res + w->got, sizeof(w->res) - w->got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n > 0) {
			w->got += (size_t)n;
			if (w->got < sizeof(w->res))
				continue;
		}
		/* Complete result, EOF, or a read error: either way the worker is done. */
		worker_finish(w, -EPIPE, "worker exited without reporting a result");
		return;
	}
}

static int worker_fork(struct worker *w)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	/* The child writes with a blocking descriptor. */
	w->got = 0;
	memset(&w->res, 0, sizeof(w->res));
	w->ev = event_new(w->base, p[0], EV_READ | EV_PERSIST, on_readable, w);
	if (!w->ev) {
		close(p[0]);
		close(p[1]);
		return -ENOMEM;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int r = -errno;
		event_free(w->ev);
		w->ev = NULL;
		close(p[0]);
		close(p[1]);
		return r;
	}
	if (pid == 0) {
		int fl = fcntl(p[1], F_GETFL);
		fcntl(p[1], F_SETFL, fl & ~O_NONBLOCK);
		child_run(w, p[1]);
	}
	close(p[1]);
	setpgid(pid, pid); /* also done by the child; whichever runs first wins the race */
	w->pid = pid;
	w->fd = p[0];
	n_running++;
	event_add(w->ev, NULL);
	return 0;
}

/* Start queued workers while there are free slots. */
static void queue_run(void)
{
	while (queue_head && n_running < worker_max_running()) {
		struct worker *w = queue_head;
		queue_head = w->next_queued;
		if (!queue_head)
			queue_tail = NULL;
		w->next_queued = NULL;
		w->queued = false;
		n_queued--;
		int r = worker_fork(w);
		if (r < 0) {
			memset(&w->res, 0, sizeof(w->res));
			w->res.rc = r;
			snprintf(w->res.msg, sizeof(w->res.msg), "cannot start a worker: %s",
				 strerror(-r));
			if (w->done)
				w->done(w, &w->res, w->arg);
		}
	}
}

int worker_start(struct worker *w, struct event_base *base)
{
	w->base = base;
	if (n_running < worker_max_running() && !queue_head)
		return worker_fork(w);
	w->queued = true;
	w->next_queued = NULL;
	if (queue_tail)
		queue_tail->next_queued = w;
	else
		queue_head = w;
	queue_tail = w;
	n_queued++;
	return 0;
}

void worker_kill(struct worker *w)
{
	if (w->queued) {
		struct worker **pp = &queue_head, *prev = NULL;
		while (*pp && *pp != w) {
			prev = *pp;
			pp = &(*pp)->next_queued;
		}
		if (*pp) {
			*pp = w->next_queued;
			if (queue_tail == w)
				queue_tail = prev;
		}
		w->next_queued = NULL;
		w->queued = false;
		n_queued--;
		memset(&w->res, 0, sizeof(w->res));
		w->res.rc = -ECANCELED;
		snprintf(w->res.msg, sizeof(w->res.msg), "worker cancelled while waiting for a slot");
		if (w->done)
			w->done(w, &w->res, w->arg);
		return;
	}
	if (w->pid <= 0)
		return;
	/* The whole process group: whatever the worker forked (a half-made sandbox) goes too. */
	kill(-w->pid, SIGKILL);
	kill(w->pid, SIGKILL);
	w->got = 0;
	worker_finish(w, -ECANCELED, "worker killed: deadline passed");
}

void worker_clear(struct worker *w)
{
	if (w->ev) {
		event_free(w->ev);
		w->ev = NULL;
	}
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
}
