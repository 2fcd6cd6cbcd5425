#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/fsutil.h"
#include "shared/timeutil.h"
#include "sweep.h"

#define SWEEP_PASSES 100   /* passes that find new processes, at most */
#define SWEEP_TRACKED 4096
#define SWEEP_WAIT_MS 5000  /* for the killed to die */

static pid_t keep_pid;

void sweep_keep(pid_t entrypoint)
{
	keep_pid = entrypoint;
}

/* Whether pid has exited already (a zombie, or gone): nothing left to stop. */
static bool is_dead(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (fs_read_small(path, buf, sizeof(buf)) < 0)
		return true;
	const char *p = strrchr(buf, ')');
	return !p || !p[1] || p[2] == 'Z' || p[2] == 'X';
}

/* Whether pid is in the first n of set. */
static bool in_set(const pid_t *set, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (set[i] == pid)
			return true;
	return false;
}

int sweep_others(void)
{
	if (getpid() != 1)
		return -EPERM;
	/* The processes already sent SIGKILL: seen alive again in a later pass they are dying (the
	 * kernel has not run their exit yet), not new. Past SWEEP_TRACKED, every sighting counts as
	 * new, which only makes the sweep give up sooner. */
	static pid_t killed[SWEEP_TRACKED];
	size_t n_killed = 0;
	int sent = 0, new_passes = 0;
	int64_t deadline = time_now_ms() + SWEEP_WAIT_MS;
	for (;;) {
		DIR *d = opendir("/proc");
		if (!d)
			return -errno;
		int fresh = 0, dying = 0;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!isdigit((unsigned char)de->d_name[0]))
				continue;
			pid_t pid = (pid_t)strtol(de->d_name, NULL, 10);
			if (pid <= 1 || pid == keep_pid || is_dead(pid))
				continue;
			if (in_set(killed, n_killed, pid)) {
				dying++;
				continue;
			}
			/* Stopped first, so it forks no more while the pass goes on. */
			kill(pid, SIGSTOP);
			kill(pid, SIGKILL);
			if (n_killed < SWEEP_TRACKED)
				killed[n_killed++] = pid;
			fresh++;
		}
		closedir(d);
		sent += fresh;
		if (fresh == 0 && dying == 0)
			return sent;
		if (fresh > 0 && ++new_passes >= SWEEP_PASSES)
			return -EAGAIN; /* something keeps making processes faster than we kill */
		if (time_now_ms() >= deadline)
			return -EAGAIN; /* killed, but not dead (e.g. in uninterruptible sleep) */
		if (fresh == 0)
			usleep(1000); /* only the dying: let them die */
		else
			sched_yield();
	}
}
