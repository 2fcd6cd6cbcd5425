/* corrald's forked workers: results over the pipe, crashes, kills, many at once, no fd leaks. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "corrald/worker.h"

static struct event_base *base;
static int done_count;

struct job {
	struct worker w;
	int mode;
	int got_rc;
	pid_t got_pid;
	char got_msg[ERROR_MSG_MAX];
	bool done;
};

static void job_fn(void *arg, struct worker_result *ret)
{
	struct job *j = arg;
	switch (j->mode) {
	case 0: /* success */
		ret->rc = 0;
		ret->pid = getpid();
		snprintf(ret->handle.s, sizeof(ret->handle.s), "42");
		snprintf(ret->msg, sizeof(ret->msg), "ok");
		break;
	case 1: /* failure with a message */
		ret->rc = -ENOSPC;
		snprintf(ret->msg, sizeof(ret->msg), "mount overlay: No space left on device");
		break;
	case 2: /* crash before reporting */
		abort();
	case 3: /* hang until killed */
		for (;;)
			pause();
	case 4: { /* only stdio and the result pipe are open in the worker */
		int n = 0;
		for (int fd = 3; fd < 1024; fd++)
			if (fcntl(fd, F_GETFD) >= 0)
				n++;
		ret->rc = n;
		break;
	}
	}
}

static void job_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct job *j = arg;
	j->got_rc = res->rc;
	j->got_pid = res->pid;
	snprintf(j->got_msg, sizeof(j->got_msg), "%s", res->msg);
	j->done = true;
	done_count++;
}

static void start(struct job *j, int mode)
{
	memset(j, 0, sizeof(*j));
	j->w = (struct worker)WORKER_INIT;
	j->w.fn = job_fn;
	j->w.done = job_done;
	j->w.arg = j;
	j->mode = mode;
	CHECK_INT(worker_start(&j->w, base), 0);
	CHECK(worker_running(&j->w));
}

static void run_until(int count)
{
	while (done_count < count)
		event_base_loop(base, EVLOOP_ONCE);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	base = event_base_new();
	/* an inherited descriptor the workers must not keep */
	int leak = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(leak >= 0);

	struct job ok, fail, crash, hang, fds;
	int before;
	start(&ok, 0);
	start(&fail, 1);
	start(&crash, 2);
	start(&fds, 4);
	CHECK_INT(worker_count(), 4);
	run_until(4);
	CHECK_INT(worker_count(), 0);

	CHECK_INT(ok.got_rc, 0);
	CHECK(ok.got_pid > 0 && ok.got_pid != getpid());
	CHECK_STR(ok.got_msg, "ok");
	CHECK(!worker_running(&ok.w));

	CHECK_INT(fail.got_rc, -ENOSPC);
	CHECK_STR(fail.got_msg, "mount overlay: No space left on device");

	CHECK_INT(crash.got_rc, -EPIPE);
	CHECK(strstr(crash.got_msg, "without reporting") != NULL);
	CHECK(strstr(crash.got_msg, "signal 6") != NULL);

	CHECK_INT(fds.got_rc, 1); /* the result pipe only */

	/* a hung worker is killed; its owner hears -ECANCELED at once */
	start(&hang, 3);
	usleep(20000);
	worker_kill(&hang.w);
	CHECK(hang.done);
	CHECK_INT(hang.got_rc, -ECANCELED);
	CHECK(!worker_running(&hang.w));
	CHECK_INT(worker_count(), 0);

	/* a full house: the next worker waits for a slot, and can be cancelled while it waits */
	static struct job hung[WORKER_MAX_RUNNING];
	struct job waiting, later;
	const int slots = (int)worker_max_running();
	CHECK(slots >= 2 && slots <= WORKER_MAX_RUNNING);
	for (int i = 0; i < slots; i++)
		start(&hung[i], 3);
	start(&waiting, 0);
	start(&later, 0);
	CHECK_INT(worker_count(), slots + 2);
	CHECK(waiting.w.pid <= 0); /* not forked yet */
	worker_kill(&waiting.w);
	CHECK(waiting.done);
	CHECK_INT(waiting.got_rc, -ECANCELED);
	CHECK(strstr(waiting.got_msg, "waiting") != NULL);
	CHECK_INT(worker_count(), slots + 1);
	/* a slot frees: the queued one starts and finishes */
	before = done_count;
	worker_kill(&hung[0].w);
	CHECK(later.w.pid > 0);
	run_until(before + 2);
	CHECK(later.done);
	CHECK_INT(later.got_rc, 0);
	for (int i = 1; i < slots; i++)
		worker_kill(&hung[i].w);
	CHECK_INT(worker_count(), 0);

	/* many at once: more than the slots */
	enum { N = WORKER_MAX_RUNNING * 2 + 5 };
	static struct job many[N];
	before = done_count;
	for (int i = 0; i < N; i++)
		start(&many[i], 0);
	run_until(before + N);
	for (int i = 0; i < N; i++)
		CHECK_INT(many[i].got_rc, 0);
	CHECK_INT(worker_count(), 0);

	close(leak);
	event_base_free(base);
	return check_summary("corrald_worker");
}
