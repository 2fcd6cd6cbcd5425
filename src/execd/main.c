/*
 * corral-execd: PID 1 of every sandbox. Serves the OpenSandbox execd API on a unix socket, reaps
 * every zombie, runs the optional entrypoint and leaves <run>/exit.json behind when it exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "config.h"
#include "exec.h"
#include "proxy.h"
#include "server.h"
#include "session.h"
#include "shared/fsutil.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/quantity.h"
#include "shared/timeutil.h"
#include "spawn.h"
#include "sweep.h"
#include "users.h"

/* How long an ending execd waits for a client to take the replies it has queued. */
#define EXECD_END_DRAIN_MS 2000

struct event_base *execd_base;

static struct {
	const char *socket_path;
	int listen_fd; /* -1, or the inherited listening socket (--listen-fd) */
	const char *state_dir;
	char exit_file[PATH_MAX];
	char *const *entrypoint;
	const char *entry_user; /* --user USER[:GROUP], or NULL: root */
	pid_t entry_pid;
	bool pid1;

	/* Ending (execd_end): the replies already made leave before PID 1 exits. */
	bool ending;
	char end_reason[32];
	int end_code;
	char end_message[192];
	int64_t end_deadline_ms;
	struct event *end_ev;
} M;

/*
 * The crash handler may only call async-signal-safe functions, and runs on its own stack: a stack
 * overflow leaves none to run it on. stack_top and stack_limit let it tell an overflow apart.
 */
static char crash_stack[64 * 1024];
static uintptr_t stack_top;
static rlim_t stack_limit;
static volatile sig_atomic_t crashed;

static void write_exit_file(const char *reason, int code, const char *message)
{
	json_t *j = json_pack("{s:s, s:i, s:s}", "reason", reason, "exitCode", code, "message", message);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return;
	int r = fs_write_atomic(M.exit_file, s, strlen(s), 0644);
	if (r < 0)
		log_error("write %s: %s", M.exit_file, strerror(-r));
	free(s);
}

static void kill_everything(void)
{
	exec_shutdown();
	session_kill_all();
	if (M.entry_pid > 0)
		kill(-M.entry_pid, SIGKILL);
	/* As PID 1 every other process in the namespace is ours to end; on a host, never. */
	if (M.pid1)
		kill(-1, SIGKILL);
}

static _noreturn_ void execd_exit(const char *reason, int code, const char *message)
{
	log_info("exiting (%s, %d): %s", reason, code, message);
	write_exit_file(reason, code, message);
	kill_everything();
	server_stop();
	if (!M.pid1 && M.socket_path)
		unlink(M.socket_path);
	exit(code);
}

/* Whether a child of ours still lives or waits to be reaped (on_sigchld reaps it). */
static bool children_left(void)
{
	siginfo_t si = {0};
	return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0;
}

static void on_end_tick(evutil_socket_t fd, short what, void *arg)
{
	/* As PID 1 every other process was killed: wait for the last of them, so a command that
	 * was already exiting (its zombie not there yet when the entrypoint was reaped) reports. */
	bool dying = M.pid1 && children_left();
	size_t unsent = server_unsent();
	if ((!dying && unsent == 0) || time_now_ms() >= M.end_deadline_ms) {
		if (unsent || dying)
			log_warn("after %d ms: %zu bytes of replies not sent%s; ending anyway",
				 EXECD_END_DRAIN_MS, unsent, dying ? ", processes not yet gone" : "");
		execd_exit(M.end_reason, M.end_code, M.end_message);
	}
}

/*
 * The sandbox ends (its entrypoint exited), but results already made must not go down with it.
 * Called once every zombie there was has been reaped (their results are queued): every other
 * process is killed now (a stop would not hold: a process can resume itself with a SIGCONT timer)
 * and what that kills is not reported, no new command is taken, and PID 1 exits once
 * the replies it has queued (a command that finished just before, its stream's last events) are
 * in their sockets, or after EXECD_END_DRAIN_MS when a client does not read. Commands still
 * running end with the sandbox: corrald reports them as SANDBOX::ENDED, not as killed.
 */
static void execd_end(const char *reason, int code, const char *message)
{
	if (M.ending)
		return;
	M.ending = true;
	snprintf(M.end_reason, sizeof(M.end_reason), "%s", reason);
	M.end_code = code;
	snprintf(M.end_message, sizeof(M.end_message), "%s", message);
	log_info("ending (%s, %d): %s", reason, code, message);
	if (M.pid1)
		kill(-1, SIGKILL); /* every process of the namespace but PID 1 */
	server_set_ending(M.end_message);
	M.end_deadline_ms = time_now_ms() + EXECD_END_DRAIN_MS;
	static const struct timeval tick = {0, 2000};
	M.end_ev = event_new(execd_base, -1, EV_PERSIST, on_end_tick, NULL);
	/* The lowest priority: it runs after the other zombies are reaped, their results queued and
	 * the replies that can be written are written. */
	if (!M.end_ev || event_priority_set(M.end_ev, EXEC_PRIO_BACKGROUND) < 0 ||
	    event_add(M.end_ev, &tick) < 0)
		execd_exit(M.end_reason, M.end_code, M.end_message);
}

/* Append s to buf[*n..len) without overflowing; async-signal-safe. */
static void crash_put(char *buf, size_t len, size_t *n, const char *s)
{
	while (*s && *n + 1 < len)
		buf[(*n)++] = *s++;
	buf[*n] = '\0';
}

static void crash_put_num(char *buf, size_t len, size_t *n, unsigned long v)
{
	char d[24];
	int i = (int)sizeof(d) - 1;
	d[i] = '\0';
	do {
		d[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v && i > 0);
	crash_put(buf, len, n, d + i);
}

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

static void on_crash(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	/* A fault signal sent by another process (the workload may signal PID 1) is no crash. */
	if (si && si->si_code <= 0 && si->si_pid != getpid())
		return;
	/* Whatever happens next (a re-fault, abort's second raise) ends the process unreported. */
	for (size_t i = 0; i < ARRAY_SIZE(crash_signals); i++)
		signal(crash_signals[i], SIG_DFL);
	if (crashed)
		return;
	crashed = 1;

	static const char *const names[] = {
	    [SIGSEGV] = "SIGSEGV", [SIGBUS] = "SIGBUS", [SIGABRT] = "SIGABRT",
	    [SIGFPE] = "SIGFPE",   [SIGILL] = "SIGILL",
	};
	bool overflow = false;
	if (sig == SIGSEGV && si && stack_top && stack_limit != RLIM_INFINITY) {
		/* The fault is in the guard gap below a stack grown to its limit (env and auxv sit
		 * above main's frame, hence the slack). */
		uintptr_t a = (uintptr_t)si->si_addr, used = stack_top - a;
		overflow = a < stack_top && used + (1u << 20) >= stack_limit &&
			   used <= stack_limit + (4u << 20);
	}
	char buf[256];
	size_t n = 0;
	crash_put(buf, sizeof(buf), &n, "{\"reason\":\"ExecdExited\",\"exitCode\":");
	crash_put_num(buf, sizeof(buf), &n, 128 + (unsigned long)sig);
	crash_put(buf, sizeof(buf), &n, ",\"message\":\"corral-execd crashed: signal ");
	crash_put_num(buf, sizeof(buf), &n, (unsigned long)sig);
	crash_put(buf, sizeof(buf), &n, " (");
	crash_put(buf, sizeof(buf), &n,
		  sig < (int)ARRAY_SIZE(names) && names[sig] ? names[sig] : "unknown");
	if (overflow)
		crash_put(buf, sizeof(buf), &n, ", stack overflow");
	crash_put(buf, sizeof(buf), &n, ")\"}");
	int fd = open(M.exit_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0) {
		(void)!write(fd, buf, n);
		close(fd);
	}
	/* A fault re-executes and ends the process; a raised signal is raised again. */
	if (!si || si->si_code <= 0)
		raise(sig);
}

/* Catch the fatal signals on an alternate stack, so even a stack overflow leaves a report. */
static void crash_handler_install(void)
{
	char here;
	stack_top = (uintptr_t)&here;
	struct rlimit rl;
	stack_limit = getrlimit(RLIMIT_STACK, &rl) == 0 ? rl.rlim_cur : RLIM_INFINITY;
	stack_t ss = {.ss_sp = crash_stack, .ss_size = sizeof(crash_stack)};
	if (sigaltstack(&ss, NULL) < 0)
		log_warn("sigaltstack: %s (a stack overflow will go unreported)", strerror(errno));
	struct sigaction sa = {.sa_sigaction = on_crash, .sa_flags = SA_SIGINFO | SA_ONSTACK};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < ARRAY_SIZE(crash_signals); i++)
		sigaction(crash_signals[i], &sa, NULL);
}

static void on_sigchld(evutil_socket_t fd, short what, void *arg)
{
	int entry_status = -1;
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			break;
		/* Killed with the sandbox: corrald reports SANDBOX::ENDED. One that was already
		 * exiting when the sandbox ended (its exit code is its own) is still reported. */
		if (M.ending && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			continue;
		if (exec_child_exited(pid, status) || session_child_exited(pid, status))
			continue;
		if (pid == M.entry_pid) {
			entry_status = status;
			M.entry_pid = 0;
		}
		/* Anything else is an orphan we inherited as PID 1 (or subreaper): discarded. */
	}
	/* After the loop: the commands that ended before the entrypoint (or with it) are reaped
	 * and reported, whatever order waitpid() gave. */
	if (entry_status != -1) {
		int code = exec_status_to_code(entry_status);
		char msg[160];
		if (WIFSIGNALED(entry_status))
			snprintf(msg, sizeof(msg), "entrypoint killed by signal %d (%s)",
				 WTERMSIG(entry_status), strsignal(WTERMSIG(entry_status)));
		else
			snprintf(msg, sizeof(msg), "entrypoint exited with status %d", code);
		execd_end("EntrypointExited", code, msg);
	}
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
	if (M.entry_pid > 0) {
		log_info("received %s: forwarding it to the entrypoint (pid %d)", strsignal((int)sig),
			 (int)M.entry_pid);
		kill(M.entry_pid, (int)sig);
		return;
	}
	char msg[64];
	snprintf(msg, sizeof(msg), "received %s", strsignal((int)sig));
	execd_exit("ExecdExited", 0, msg);
}

/* "user", "uid", "user:group", "uid:gid" (an image config's User). */
static int entry_user(struct spawn *sp)
{
	char u[USERS_NAME_MAX];
	snprintf(u, sizeof(u), "%s", M.entry_user);
	char *g = strchr(u, ':');
	if (g)
		*g++ = '\0';
	uid_t uid;
	gid_t gid = 0;
	if (users_uid_by_name(u, &uid) < 0 || (g && users_gid_by_name(g, &gid) < 0))
		return -ENOENT;
	spawn_set_user(sp, uid, g != NULL, gid, NULL, 0);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: corral-execd (--socket PATH | --listen-fd N) --state DIR [OPTIONS] [-- ENTRYPOINT...]\n"
		"\n"
		"PID 1 of a corral sandbox: serves the OpenSandbox execd API over HTTP/1.1 on a unix\n"
		"socket, reaps zombies and runs the optional entrypoint.\n"
		"\n"
		"  --socket PATH      unix socket to listen on (a stale socket is replaced; mode 0600)\n"
		"  --listen-fd N      serve on inherited fd N instead: a unix stream socket bound outside\n"
		"                     the sandbox (how corral's runtime starts execd)\n"
		"  --state DIR        per-execution output and status files (created if missing)\n"
		"  --exit-file PATH   where to write {\"reason\",\"exitCode\",\"message\"} on exit\n"
		"                     (default: dirname(DIR)/exit.json)\n"
		"  --output-cap BYTES output kept per command (default 256Mi; K/M/G, Ki/Mi/Gi suffixes);\n"
		"                     past it the command runs on and the rest is dropped and counted\n"
		"  --log-level LEVEL  error, warn, info (default) or debug\n"
		"  --user USER[:GROUP]  run the entrypoint as this user (a name from /etc/passwd or\n"
		"                     a number; an image's User)\n"
		"  --help             this text\n"
		"  --version          print the version\n"
		"\n"
		"When ENTRYPOINT exits, execd writes the exit file, kills what is left and exits with\n"
		"the entrypoint's status (128+N when killed by signal N). SIGTERM is forwarded to the\n"
		"entrypoint; without one, execd exits cleanly.\n");
}

/* The command line into M and *output_cap. Returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, uint64_t *output_cap)
{
	enum { OPT_SOCKET = 256, OPT_LISTEN_FD, OPT_STATE, OPT_EXIT_FILE, OPT_LOG_LEVEL, OPT_OUTPUT_CAP,
	       OPT_USER, OPT_HELP, OPT_VERSION };
	static const struct option opts[] = {
		{"socket", required_argument, NULL, OPT_SOCKET},
		{"listen-fd", required_argument, NULL, OPT_LISTEN_FD},
		{"state", required_argument, NULL, OPT_STATE},
		{"exit-file", required_argument, NULL, OPT_EXIT_FILE},
		{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
		{"output-cap", required_argument, NULL, OPT_OUTPUT_CAP},
		{"user", required_argument, NULL, OPT_USER},
		{"help", no_argument, NULL, OPT_HELP},
		{"version", no_argument, NULL, OPT_VERSION},
		{NULL, 0, NULL, 0},
	};
	const char *exit_file = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case OPT_SOCKET: M.socket_path = optarg; break;
		case OPT_LISTEN_FD: {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || *end || v < 3 || v > INT_MAX) {
				fprintf(stderr, "corral-execd: invalid --listen-fd '%s'\n", optarg);
				return 2;
			}
			M.listen_fd = (int)v;
			break;
		}
		case OPT_STATE: M.state_dir = optarg; break;
		case OPT_EXIT_FILE: exit_file = optarg; break;
		case OPT_USER: M.entry_user = optarg; break;
		case OPT_LOG_LEVEL: {
			enum log_level lvl;
			if (log_level_parse(optarg, &lvl) < 0) {
				fprintf(stderr, "corral-execd: invalid --log-level '%s'\n", optarg);
				return 2;
			}
			log_set_level(lvl);
			break;
		}
		case OPT_OUTPUT_CAP:
			if (quantity_parse_bytes(optarg, output_cap) < 0 || *output_cap == 0) {
				fprintf(stderr, "corral-execd: invalid --output-cap '%s' (a positive number of bytes)\n",
					optarg);
				return 2;
			}
			break;
		case OPT_HELP: usage(stdout); return 0;
		case OPT_VERSION: printf("corral-execd %s\n", CORRAL_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!M.socket_path == (M.listen_fd < 0) || !M.state_dir) {
		fprintf(stderr, "corral-execd: --state and one of --socket or --listen-fd are required\n");
		usage(stderr);
		return 2;
	}
	if (optind < argc)
		M.entrypoint = &argv[optind];
	if (exit_file) {
		snprintf(M.exit_file, sizeof(M.exit_file), "%s", exit_file);
	} else {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s", M.state_dir);
		size_t l = strlen(tmp);
		while (l > 1 && tmp[l - 1] == '/')
			tmp[--l] = '\0';
		snprintf(M.exit_file, sizeof(M.exit_file), "%s/exit.json", dirname(tmp));
	}
	return -1;
}

/* The process's own settings: OOM score or subreaper, SIGPIPE, open-file limit, crash handler. */
static void process_setup(void)
{
	M.pid1 = getpid() == 1;
	if (M.pid1) {
		/* The OOM killer must pick the allocating process, never PID 1 (children reset to 0). */
		int r = fs_write_string("/proc/self/oom_score_adj", "-1000");
		if (r < 0)
			log_warn("cannot set oom_score_adj to -1000: %s", strerror(-r));
	}
	else
		prctl(PR_SET_CHILD_SUBREAPER, 1); /* reap grandchildren on a host too */
	signal(SIGPIPE, SIG_IGN);
	/* Each running execution holds a few fds: use the hard limit, children get the usual one. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
		spawn_set_child_nofile(&nofile);
		struct rlimit raised = {nofile.rlim_max, nofile.rlim_max};
		if (raised.rlim_cur > (1u << 20))
			raised.rlim_cur = 1u << 20;
		if (raised.rlim_cur > nofile.rlim_cur)
			setrlimit(RLIMIT_NOFILE, &raised);
	}
	crash_handler_install();
}

/* The event loop with executions, sessions, the proxy, signals and the server on it; exits on
 * failure. */
static void loop_setup(uint64_t output_cap)
{
	execd_base = event_base_new();
	if (!execd_base) {
		log_error("cannot create the event loop");
		execd_exit("ExecdExited", 1, "cannot create the event loop");
	}
	if (event_base_priority_init(execd_base, EXEC_PRIORITIES) < 0)
		execd_exit("ExecdExited", 1, "cannot set up event priorities");
	struct error err = {0};
	if (exec_init(execd_base, M.state_dir, output_cap, &err) < 0) {
		log_error("%s", err.msg);
		execd_exit("ExecdExited", 1, err.msg);
	}
	session_init(execd_base, M.state_dir);
	proxy_init(execd_base);
	struct event *ev_chld = evsignal_new(execd_base, SIGCHLD, on_sigchld, NULL);
	struct event *ev_term = evsignal_new(execd_base, SIGTERM, on_term, NULL);
	struct event *ev_int = evsignal_new(execd_base, SIGINT, on_term, NULL);
	if (!ev_chld || !ev_term || !ev_int || event_add(ev_chld, NULL) < 0 ||
	    event_add(ev_term, NULL) < 0 || event_add(ev_int, NULL) < 0)
		execd_exit("ExecdExited", 1, "cannot install signal handlers");

	if ((M.listen_fd >= 0 ? server_start_fd(execd_base, M.listen_fd, &err)
			      : server_start(execd_base, M.socket_path, &err)) < 0) {
		log_error("%s", err.msg);
		execd_exit("ExecdExited", 1, err.msg);
	}
}

/* Start M.entrypoint (as M.entry_user); exits with the exit file written when it cannot. */
static void entrypoint_start(void)
{
	struct error err = {0};
	struct spawn sp = SPAWN_INIT;
	sp.argv = M.entrypoint;
	sp.stdout_fd = SPAWN_FD_INHERIT;
	sp.stderr_fd = SPAWN_FD_INHERIT;
	if (M.entry_user && entry_user(&sp) < 0) {
		char msg[ERROR_MSG_MAX];
		snprintf(msg, sizeof(msg), "entrypoint user '%s' is not in the image's /etc/passwd and not a number",
			 M.entry_user);
		log_error("%s", msg);
		execd_exit("EntrypointExited", 127, msg);
	}
	int r = spawn_start(&sp, &M.entry_pid, &err);
	if (r < 0) {
		char msg[ERROR_MSG_MAX + 32];
		snprintf(msg, sizeof(msg), "start entrypoint '%s': %s", M.entrypoint[0], err.msg);
		log_error("%s", msg);
		/* fork's EAGAIN is a process limit, ENOMEM the host's memory: not the entrypoint's
		 * fault (corrald answers a retryable 503, not ENTRYPOINT_EXITED). */
		execd_exit(r == -EAGAIN || r == -ENOMEM ? "ResourceExhausted" : "EntrypointExited",
			   127, msg);
	}
	log_info("entrypoint '%s' started (pid %d)", M.entrypoint[0], (int)M.entry_pid);
	sweep_keep(M.entry_pid);
}

int main(int argc, char **argv)
{
	log_set_ident("corral-execd");
	/* Nothing else in the sandbox may trace this process, read or write its memory, or reach its
	 * file descriptors (the listening socket, the state dir) through /proc/1/{mem,fd,root} or
	 * pidfd_getfd(): those need ptrace access, which a non-dumpable process grants only to
	 * CAP_SYS_PTRACE, and no sandbox process has it. Children become dumpable again at execve. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	M.listen_fd = -1;
	uint64_t output_cap = EXEC_OUTPUT_CAP_DEFAULT;
	int r = parse_args(argc, argv, &output_cap);
	if (r >= 0)
		return r;

	process_setup();
	loop_setup(output_cap);
	if (M.entrypoint)
		entrypoint_start();
	if (M.socket_path)
		log_info("listening on %s (state %s)", M.socket_path, M.state_dir);
	else
		log_info("listening on fd %d (state %s)", M.listen_fd, M.state_dir);
	/* The entrypoint may have exited already (its SIGCHLD is pending in the loop). */
	event_base_dispatch(execd_base);
	execd_exit("ExecdExited", 1, "event loop ended unexpectedly");
}
