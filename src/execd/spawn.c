#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/macro.h"
#include "spawn.h"
#include "users.h"

extern char **environ;

static struct rlimit child_nofile;
static bool child_nofile_set;

void spawn_set_child_nofile(const struct rlimit *rl)
{
	child_nofile = *rl;
	child_nofile_set = true;
}

struct child_failure {
	int err;       /* errno */
	char what[48]; /* the step that failed */
};

static _noreturn_ void child_fail(int fd, const char *what)
{
	struct child_failure f = {.err = errno};
	strncpy(f.what, what, sizeof(f.what) - 1);
	(void)!write(fd, &f, sizeof(f));
	_exit(127);
}

/* Put fd (or /dev/null, or nothing) at target. */
static int child_setup_fd(int fd, int target)
{
	if (fd == SPAWN_FD_INHERIT)
		return 0;
	if (fd == SPAWN_FD_NULL) {
		int n = open("/dev/null", target == STDIN_FILENO ? O_RDONLY : O_WRONLY);
		if (n < 0)
			return -1;
		if (n != target) {
			if (dup2(n, target) < 0)
				return -1;
			close(n);
		}
		return 0;
	}
	if (fd == target) {
		/* dup2 to itself keeps close-on-exec; clear it. */
		int fl = fcntl(fd, F_GETFD);
		return fl < 0 ? -1 : fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC);
	}
	return dup2(fd, target) < 0 ? -1 : 0;
}

static _noreturn_ void child_run(const struct spawn *sp, int errfd)
{
	/* Signals: default dispositions, empty mask (execd ignores SIGPIPE and catches others).
	 * All signals are blocked until here, so none of execd's handlers can run in the child. */
	/*
	 * The raw syscall, not sigaction(): libc refuses to touch its reserved signals (32, 33),
	 * and an ignored disposition inherited from whoever started execd survives exec.
	 */
	struct {
		void (*handler)(int);
		unsigned long flags;
		void (*restorer)(void);
		uint64_t mask;
	} dfl = {.handler = SIG_DFL};
	for (int s = 1; s <= 64; s++)
		if (s != SIGKILL && s != SIGSTOP)
			syscall(SYS_rt_sigaction, s, &dfl, NULL, sizeof(dfl.mask));
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	if (setpgid(0, 0) < 0)
		child_fail(errfd, "setpgid");

	/* stdout/stderr may be the same fd; the order keeps both valid. */
	if (child_setup_fd(sp->stdin_fd, STDIN_FILENO) < 0)
		child_fail(errfd, "set up stdin");
	if (child_setup_fd(sp->stdout_fd, STDOUT_FILENO) < 0)
		child_fail(errfd, "set up stdout");
	if (child_setup_fd(sp->stderr_fd, STDERR_FILENO) < 0)
		child_fail(errfd, "set up stderr");

	/* execd runs at -1000; its children must be fair game for the OOM killer. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom >= 0) {
		(void)!write(oom, "0", 1);
		close(oom);
	}

	if (sp->set_uid) {
		if (setgroups(sp->ngroups, sp->groups) < 0)
			child_fail(errfd, "setgroups");
		if (setgid(sp->gid) < 0)
			child_fail(errfd, "setgid");
		if (setuid(sp->uid) < 0)
			child_fail(errfd, "setuid");
	}
	if (sp->cwd && chdir(sp->cwd) < 0)
		child_fail(errfd, "chdir");
	if (child_nofile_set)
		setrlimit(RLIMIT_NOFILE, &child_nofile);

	/* Every other fd goes at exec (errfd stays usable until then). */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		long max = sysconf(_SC_OPEN_MAX);
		for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
			if (fd != errfd)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
	}

	char *const *envp = sp->envp ? sp->envp : environ;
	if (sp->command) {
		char *argv[] = {(char *)"bash", (char *)"-c", (char *)sp->command, NULL};
		execve("/bin/bash", argv, envp);
		if (errno == ENOENT) {
			argv[0] = (char *)"sh";
			execve("/bin/sh", argv, envp);
		}
		child_fail(errfd, "exec /bin/bash (and /bin/sh)");
	}
	/* argv: only the entrypoint, started with fork (execvp may allocate). */
	environ = (char **)envp;
	execvp(sp->argv[0], sp->argv);
	child_fail(errfd, "exec");
}

struct clone_arg {
	const struct spawn *sp;
	int errfd;
};

static int clone_child(void *p)
{
	struct clone_arg *a = p;
	child_run(a->sp, a->errfd);
}

/*
 * Commands start the way posix_spawn does: clone(CLONE_VM | CLONE_VFORK) on a separate stack, so
 * no page tables are copied and execd is suspended only until the child has exec'd. The child
 * shares execd's memory, so child_run touches nothing but its stack and syscalls (no malloc).
 */
static _unused_ pid_t clone_vfork(const struct spawn *sp, int errfd)
{
	static char stack[64 * 1024] __attribute__((aligned(16)));
	struct clone_arg a = {sp, errfd};
	return clone(clone_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
}

int spawn_start(const struct spawn *sp, pid_t *ret_pid, struct error *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return error_set_errno(err, errno, "pipe");
	/* Blocked across the clone: execd's handlers must never run in the child. */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid;
#ifndef __SANITIZE_ADDRESS__
	if (sp->command) {
		pid = clone_vfork(sp, p[1]);
	} else
#endif
	{
		/* The entrypoint (execvp may allocate), and sanitizer builds (ASan cannot follow a
		 * child running on a stack of our own). */
		pid = fork();
		if (pid == 0) {
			close(p[0]);
			child_run(sp, p[1]);
		}
	}
	int e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return error_set_errno(err, e, "start process");
	}
	close(p[1]);
	/* Also from the parent, so kill(-pid) works even before the child ran (EACCES after exec is fine). */
	setpgid(pid, pid);
	struct child_failure f;
	ssize_t n = RETRY_EINTR(read(p[0], &f, sizeof(f)));
	close(p[0]);
	if (n == (ssize_t)sizeof(f)) {
		/* The child is about to _exit(127): reap it here so nobody mistakes it for a command. */
		RETRY_EINTR(waitpid(pid, NULL, 0));
		f.what[sizeof(f.what) - 1] = '\0';
		return error_set_errno(err, f.err, "%s", f.what);
	}
	*ret_pid = pid;
	return 0;
}

/*
 * The image's /etc/passwd and /etc/group through users.h (NSS does not work in a static binary
 * inside an arbitrary image). This runs in the parent, before spawn_start(): the child only calls
 * setgroups() on what is filled in here, since it must not allocate or take locks.
 */
void spawn_set_user(struct spawn *sp, uid_t uid, bool has_gid, gid_t gid, char *ret_home,
		    size_t home_len)
{
	struct users_passwd pw;
	sp->set_uid = true;
	sp->uid = uid;
	if (ret_home && home_len)
		ret_home[0] = '\0';
	if (users_passwd_by_uid(uid, &pw) == 0) {
		sp->gid = has_gid ? gid : pw.gid;
		sp->groups[0] = sp->gid;
		/* Unreadable /etc/group: no supplementary groups; more than fit: the first ones. */
		int n = users_groups_of(pw.name, sp->groups + 1, SPAWN_GROUPS_MAX - 1);
		sp->ngroups = 1 + (n > 0 ? MIN((size_t)n, (size_t)SPAWN_GROUPS_MAX - 1) : 0);
		if (ret_home && home_len)
			snprintf(ret_home, home_len, "%s", pw.home);
	} else {
		sp->gid = has_gid ? gid : (gid_t)uid;
		sp->groups[0] = sp->gid;
		sp->ngroups = 1;
	}
}
