/*
 * What confines the processes of a sandbox beyond its namespaces: the seccomp filter and the
 * capability set PID 1 keeps. Both are applied by PID 1 right before it execs corral-execd, so
 * everything in the sandbox inherits them (no_new_privs keeps them from being regained).
 */
#pragma once

#include <linux/filter.h>

#include "shared/error.h"

/* The sandbox's seccomp filter as classic BPF, compiled on first use and cached for the life of
 * the process (a fork inherits it): *ret points at the cached program. */
int confine_seccomp_build(struct sock_fprog *ret, struct error *err);

/* Drop every capability but the sandbox's set from the bounding, ambient, inheritable, permitted
 * and effective sets of the calling process. cap_last: /proc/sys/kernel/cap_last_cap. */
int confine_drop_caps(int cap_last, struct error *err);
