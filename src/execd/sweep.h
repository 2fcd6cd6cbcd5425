/*
 * Clearing a sandbox for a command that must run alone (POST /command {"exclusive": true}): a
 * grading command shares the sandbox with whatever the workload left running, and any process of
 * the same uid (sandbox root can take any uid) can write into its pipes or its memory. So before
 * it starts, every process but PID 1 (execd) and the entrypoint itself is stopped and killed.
 */
#pragma once

#include <sys/types.h>

/* The entrypoint's pid (0: none): the one process a sweep leaves alone, since the sandbox ends
 * when it does. */
void sweep_keep(pid_t entrypoint);

/* SIGSTOP, then SIGKILL, every other process of the sandbox, pass after pass over /proc, until a
 * pass finds none alive (zombies wait for execd's reaper) or 100 passes are done. Only as PID 1:
 * -EPERM elsewhere (on a host it would kill the host). Returns how many kills were sent, or
 * -EAGAIN when processes were still appearing after the last pass. */
int sweep_others(void);
