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
#include "sweep.h"

#define SWEEP_PASSES 100

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

int sweep_others(void)
{
	if (getpid() != 1)
		return -EPERM;
	int sent = 0;
	for (int pass = 0; pass < SWEEP_PASSES; pass++) {
		DIR *d = opendir("/proc");
		if (!d)
			return -errno;
		int alive = 0;
		struct dirent *de;
		while ((de = readdir(d))) {
			if (!isdigit((unsigned char)de->d_name[0]))
				continue;
			pid_t pid = (pid_t)strtol(de->d_name, NULL, 10);
			if (pid <= 1 || pid == keep_pid || is_dead(pid))
				continue;
			/* Stopped first, so it forks no more while the pass goes on. */
			kill(pid, SIGSTOP);
			kill(pid, SIGKILL);
			alive++;
		}
		closedir(d);
		if (alive == 0)
			return sent;
		sent += alive;
		sched_yield();
	}
	return -EAGAIN;
}
