/*
 * What confines the processes of a sandbox beyond its namespaces: the seccomp filter, the
 * capability set PID 1 keeps and its resource limits. All are applied by PID 1 right before it
 * execs corral-execd, so everything in the sandbox inherits them (no_new_privs keeps the first two
 * from being regained; without CAP_SYS_RESOURCE no process can raise a hard limit).
 */
#pragma once

#include <linux/filter.h>
#include <stdint.h>

#include "shared/error.h"

/* The sandbox's seccomp filter as classic BPF, compiled on first use and cached for the life of
 * the process (a fork inherits it): *ret points at the cached program. */
int confine_seccomp_build(struct sock_fprog *ret, struct error *err);

/* Drop every capability but the sandbox's set from the bounding, ambient, inheritable, permitted
 * and effective sets of the calling process. cap_last: /proc/sys/kernel/cap_last_cap. */
int confine_drop_caps(int cap_last, struct error *err);

/* The sandbox's RLIMIT_NOFILE when its creator gives none: enough for servers and test suites
 * that open many sockets, 16x below the 1048576 of older Docker, so that with pids.max it keeps
 * the open files of one sandbox countable (docs/resources.md, "Host-wide tables"). */
#define CONFINE_DEFAULT_NOFILE 65536

/* Set RLIMIT_NOFILE (soft = hard) to nofile (0: CONFINE_DEFAULT_NOFILE) in the calling process,
 * before its capabilities are dropped. Without CAP_SYS_RESOURCE the hard limit cannot rise: the
 * current hard limit is used instead when it is lower. */
int confine_rlimits(uint64_t nofile, struct error *err);
