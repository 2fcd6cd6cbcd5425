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
 * pass finds none alive (zombies wait for execd's reaper): killed ones still alive are waited for
 * (up to 5 s), new ones killed (up to 100 passes that find new ones). Only as PID 1: -EPERM
 * elsewhere (on a host it would kill the host). Returns how many kills were sent, or -EAGAIN when
 * processes kept appearing or did not die. */
int sweep_others(void);
