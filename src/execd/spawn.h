/*
 * Starting the processes execd runs (commands, the entrypoint, session shells), in the shape of
 * git's run-command: fill a struct spawn, call spawn_start. The child gets its own process group,
 * default signal dispositions and an empty mask, oom_score_adj 0, only the fds it is given, and
 * the requested cwd and credentials. spawn_start returns once the child has exec'd (or failed to).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "shared/error.h"

#define SPAWN_GROUPS_MAX 64
#define SPAWN_FD_NULL (-1)    /* /dev/null */
#define SPAWN_FD_INHERIT (-2) /* keep execd's own fd */

struct spawn {
	const char *command;   /* run as `bash -c command` (sh when bash is missing) ... */
	char *const *argv;     /* ... or this argv (PATH lookup), when command is NULL */
	char *const *envp;     /* NULL: execd's environment */
	const char *cwd;       /* NULL: execd's cwd */
	bool set_uid;
	uid_t uid;
	gid_t gid;             /* used when set_uid */
	gid_t groups[SPAWN_GROUPS_MAX];
	size_t ngroups;
	int stdin_fd, stdout_fd, stderr_fd; /* an fd, SPAWN_FD_NULL or SPAWN_FD_INHERIT */
};

#define SPAWN_INIT                                                                                 \
	{ .stdin_fd = SPAWN_FD_NULL, .stdout_fd = SPAWN_FD_NULL, .stderr_fd = SPAWN_FD_NULL }

/* The RLIMIT_NOFILE children get (execd raises its own; children keep the usual one). */
void spawn_set_child_nofile(const struct rlimit *rl);

/* Fork and exec. On success *ret_pid is the child (leader of its own process group). */
int spawn_start(const struct spawn *sp, pid_t *ret_pid, struct error *err);

/*
 * Fill sp's credentials for uid (and gid when has_gid): the primary gid and supplementary groups
 * come from the image's /etc/passwd and /etc/group (read directly, not through NSS); a uid
 * without an entry gets gid = uid and no supplementary groups.
 * ret_home (optional) receives the user's home directory ("" when unknown).
 */
void spawn_set_user(struct spawn *sp, uid_t uid, bool has_gid, gid_t gid, char *ret_home,
		    size_t home_len);
