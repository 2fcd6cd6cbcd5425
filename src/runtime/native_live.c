/*
 * The native backend's quick operations on a created sandbox, all fine on corrald's event loop:
 * the handle ("<pid> <starttime>" of PID 1), probe, the watch on PID 1, the endpoint, the exit
 * report and the disk usage of the writable layer. Also the small helpers native.c shares.
 *
 * The watch is a pidfd on PID 1. With oom_group on a cgroup manager that has no group OOM kill
 * of its own (v1), the same fd (then an epoll set) also turns readable on an OOM: the eventfd the
 * kernel signals on memory.oom_control, then a grace timer, or, without that eventfd, a timer that
 * polls the OOM-kill counter. watch_check() kills the group when one is due.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "runtime/disk.h"
#include "runtime/native.h"
#include "shared/fsutil.h"
#include "shared/macro.h"

/* The kernel signals the OOM eventfd just before its OOM killer picks a victim. Killing the group
 * at once would race that kill (a task already dying of our SIGKILL is not counted as
 * OOM-killed), and the stats would show no OOM kill: let the kernel's kill land first. */
#define OOM_GROUP_GRACE_MS 50
#define OOM_POLL_MS 250           /* the OOM-kill counter, where there is no OOM eventfd */
#define DISK_WALK_MAX 200000      /* entries walked for disk_usage(); then exact = false */
#define DISK_WALK_DEPTH_MAX 256

/* ---- helpers shared with native.c ------------------------------------------------------------ */

const struct cgroup_ops *cgroup_ops_cached(void)
{
	static const struct cgroup_ops *ops;
	if (!ops && (ops = cgroup_detect()) && ops->init)
		ops->init();
	return ops;
}

const char *cgroup_parent(const struct runtime_config *cfg)
{
	return cfg->cgroup_name && *cfg->cgroup_name ? cfg->cgroup_name : CGROUP_DEFAULT_PARENT;
}

int check_id(const char *id, struct error *err)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n >= UUID_STR_LEN || id[0] == '.')
		return error_set(err, EINVAL, "invalid sandbox id '%s'", id ? id : "");
	for (size_t i = 0; i < n; i++)
		if (!(id[i] == '-' || id[i] == '_' || id[i] == '.' ||
		      (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
		      (id[i] >= 'A' && id[i] <= 'Z')))
			return error_set(err, EINVAL, "invalid sandbox id '%s'", id);
	return 0;
}

int check_config(const struct runtime_config *cfg, struct error *err)
{
	if (!cfg->state_dir || cfg->state_dir[0] != '/')
		return error_set(err, EINVAL, "runtime state_dir must be an absolute path");
	const char *p = cgroup_parent(cfg);
	if (strstr(p, "..") || p[0] == '/')
		return error_set(err, EINVAL, "invalid cgroup name '%s'", p);
	return 0;
}

int sb_path(char *buf, size_t len, const struct runtime_config *cfg, const char *id,
	    const char *name)
{
	int n = snprintf(buf, len, "%s/sandboxes/%s%s%s", cfg->state_dir, id, name ? "/" : "",
			 name ? name : "");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Fields 3 (state) and 22 (starttime) of /proc/PID/stat. */
int pid_stat(pid_t pid, char *ret_state, uint64_t *ret_start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = RETRY_EINTR(read(fd, buf, sizeof(buf) - 1));
	if (n <= 0)
		return n < 0 ? -errno : -ESRCH;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -EINVAL;
	p += 2;
	char state = *p;
	/* p is at field 3; skip to field 22. */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EINVAL;
		p++;
	}
	if (ret_state)
		*ret_state = state;
	if (ret_start)
		*ret_start = strtoull(p, NULL, 10);
	return 0;
}

int runtime_pid_starttime(pid_t pid, uint64_t *ret)
{
	if (pid <= 0)
		return -EINVAL;
	return pid_stat(pid, NULL, ret);
}


/* ---- the handle ------------------------------------------------------------------------------ */

void runtime_native_handle(pid_t pid, uint64_t starttime, struct runtime_handle *ret)
{
	snprintf(ret->s, sizeof(ret->s), "%d %" PRIu64, (int)pid, starttime);
}

int runtime_native_handle_parse(const struct runtime_handle *h, pid_t *ret_pid,
				uint64_t *ret_starttime)
{
	int pid = 0, n = 0;
	uint64_t start = 0;
	if (!h || sscanf(h->s, "%d %" SCNu64 "%n", &pid, &start, &n) != 2 || h->s[n] != '\0' ||
	    pid <= 1)
		return -EINVAL;
	*ret_pid = pid;
	*ret_starttime = start;
	return 0;
}

int native_pid1(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		pid_t *ret_pid, uint64_t *ret_starttime)
{
	struct runtime_handle file;
	if (!h || !h->s[0]) {
		char path[PATH_MAX];
		if (sb_path(path, sizeof(path), cfg, id, PID_FILE) < 0 ||
		    fs_read_small(path, file.s, sizeof(file.s)) < 0)
			return -ESRCH;
		h = &file;
	}
	return runtime_native_handle_parse(h, ret_pid, ret_starttime) < 0 ? -ESRCH : 0;
}

/* PID 1 still runs: same start time, not a zombie. */
static bool pid1_alive(pid_t pid, uint64_t starttime)
{
	char state = 0;
	uint64_t start = 0;
	return pid_stat(pid, &state, &start) == 0 && start == starttime && state != 'Z' &&
	       state != 'X';
}

int native_probe(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 struct sandbox_probe *ret, struct error *err)
{
	int r;
	memset(ret, 0, sizeof(*ret));
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	pid_t pid;
	uint64_t starttime;
	ret->alive = native_pid1(cfg, id, h, &pid, &starttime) == 0 && pid1_alive(pid, starttime);
	const struct cgroup_ops *cg = cgroup_ops_cached();
	if (!cg)
		return 0;
	struct error e = {0};
	r = cg->probe(cgroup_parent(cfg), id, ret, &e);
	if (r == -ENOENT)
		return 0; /* cgroup already removed: only `alive` is meaningful */
	if (r < 0 && err)
		*err = e;
	return r;
}

/* ---- the watch ------------------------------------------------------------------------------- */

struct runtime_watch {
	int fd;       /* what the caller waits on: pidfd alone, or epoll_fd */
	int pidfd;
	int epoll_fd; /* -1 without an OOM policy */
	int oom_fd;   /* the cgroup manager's OOM eventfd, or -1 */
	int timer_fd; /* after an OOM event: the grace timer; without oom_fd: the counter poll */
	bool grace;   /* timer_fd is the grace timer of an OOM event (not the counter poll) */
	bool killed;  /* the group kill is done: nothing more to watch but the end */
	const struct runtime_config *cfg;
	char id[UUID_STR_LEN];
};

void native_unwatch(struct runtime_watch *w)
{
	if (!w)
		return;
	int fds[] = {w->pidfd, w->epoll_fd, w->oom_fd, w->timer_fd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(w);
}

static int timer_arm(int fd, int ms, bool periodic)
{
	struct itimerspec its = {
	    .it_value = {ms / 1000, (long)(ms % 1000) * 1000000},
	    .it_interval = {periodic ? ms / 1000 : 0, periodic ? (long)(ms % 1000) * 1000000 : 0},
	};
	return timerfd_settime(fd, 0, &its, NULL) < 0 ? -errno : 0;
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* oom_group without a group OOM kill in the kernel: the OOM eventfd (or the counter poll) and the
 * timer, in one epoll set with the pidfd. */
static int watch_oom(struct runtime_watch *w, const struct cgroup_ops *cg, struct error *err)
{
	const char *parent = cgroup_parent(w->cfg);
	if (cg->oom_watch) {
		struct error e = {0};
		int fd = cg->oom_watch(parent, w->id, &e);
		if (fd >= 0)
			w->oom_fd = fd; /* else: poll the counter, as on v2 (a second kill is harmless) */
	}
	w->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	int r;
	if (w->timer_fd < 0 || w->epoll_fd < 0)
		return error_set_errno(err, errno, "watch sandbox %s for OOM", w->id);
	if ((r = epoll_add(w->epoll_fd, w->pidfd)) < 0 || (r = epoll_add(w->epoll_fd, w->timer_fd)) < 0 ||
	    (w->oom_fd >= 0 && (r = epoll_add(w->epoll_fd, w->oom_fd)) < 0) ||
	    (w->oom_fd < 0 && (r = timer_arm(w->timer_fd, OOM_POLL_MS, true)) < 0))
		return error_set_errno(err, -r, "watch sandbox %s for OOM", w->id);
	w->fd = w->epoll_fd;
	return 0;
}

/* A pidfd of the PID 1 h names, checked once the pidfd pins the process (a match cannot go
 * stale): -ENOENT when there is none on record, -ESRCH when it has ended, or pidfd_open's
 * -errno. */
static int pid1_pidfd(const struct runtime_config *cfg, const char *id,
		      const struct runtime_handle *h, pid_t *ret_pid, uint64_t *ret_starttime)
{
	if (native_pid1(cfg, id, h, ret_pid, ret_starttime) < 0)
		return -ENOENT;
	int pidfd = (int)syscall(SYS_pidfd_open, *ret_pid, 0);
	if (pidfd < 0)
		return -errno;
	if (!pid1_alive(*ret_pid, *ret_starttime)) {
		close(pidfd);
		return -ESRCH;
	}
	return pidfd;
}

int native_watch(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 bool oom_group, struct runtime_watch **ret, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	pid_t pid;
	uint64_t starttime;
	int pidfd = pid1_pidfd(cfg, id, h, &pid, &starttime);
	if (pidfd < 0)
		return pidfd == -ENOENT || pidfd == -ESRCH ? -ESRCH : -ENOSYS;
	struct runtime_watch *w = calloc(1, sizeof(*w));
	if (!w) {
		close(pidfd);
		return error_set(err, ENOMEM, "out of memory");
	}
	*w = (struct runtime_watch){.fd = pidfd, .pidfd = pidfd, .epoll_fd = -1, .oom_fd = -1,
				    .timer_fd = -1, .cfg = cfg};
	snprintf(w->id, sizeof(w->id), "%s", id);
	const struct cgroup_ops *cg = cgroup_ops_cached();
	/* v2 kills the group itself (memory.oom.group); the counter poll runs there too, as
	 * corrald's did before this moved here: a second kill is harmless. */
	if (oom_group && cg && (r = watch_oom(w, cg, err)) < 0) {
		native_unwatch(w);
		return r;
	}
	*ret = w;
	return w->fd;
}

static int group_kill(struct runtime_watch *w, struct runtime_watch_report *ret,
		      const char *source, struct error *err)
{
	const struct cgroup_ops *cg = cgroup_ops_cached();
	bool empty;
	ret->events |= RUNTIME_WATCH_OOM;
	if (!ret->oom_source)
		ret->oom_source = source;
	w->killed = true;
	timer_arm(w->timer_fd, 0, false); /* disarmed */
	if (cg->kill(cgroup_parent(w->cfg), w->id, &empty, err) < 0)
		return error_prefix(err, "group OOM kill of sandbox %s", w->id);
	return 0;
}

int native_watch_check(struct runtime_watch *w, struct runtime_watch_report *ret,
		       struct error *err)
{
	*ret = (struct runtime_watch_report){0};
	struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
	if (poll(&p, 1, 0) > 0) {
		ret->events = RUNTIME_WATCH_ENDED;
		return 0;
	}
	uint64_t n;
	if (w->epoll_fd >= 0) { /* drained: its readiness is read again from the members below */
		struct epoll_event evs[4];
		(void)epoll_wait(w->epoll_fd, evs, ARRAY_SIZE(evs), 0);
	}
	if (w->oom_fd >= 0 && read(w->oom_fd, &n, sizeof(n)) == (ssize_t)sizeof(n)) {
		/* One OOM ends the sandbox: no need to hear of the next ones. */
		epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, w->oom_fd, NULL);
		close(w->oom_fd);
		w->oom_fd = -1;
		ret->events |= RUNTIME_WATCH_OOM;
		ret->oom_source = "memory.oom_control event";
		w->grace = true;
		if (!w->killed && timer_arm(w->timer_fd, OOM_GROUP_GRACE_MS, false) < 0)
			return group_kill(w, ret, NULL, err);
		return 0;
	}
	if (w->timer_fd < 0 || read(w->timer_fd, &n, sizeof(n)) != (ssize_t)sizeof(n) || w->killed)
		return 0;
	if (w->grace)
		return group_kill(w, ret, "memory.oom_control event", err);
	/* The counter poll. */
	struct sandbox_probe pr = {0};
	struct error e = {0};
	const struct cgroup_ops *cg = cgroup_ops_cached();
	if (cg->probe(cgroup_parent(w->cfg), w->id, &pr, &e) < 0 || !pr.oom_kills)
		return 0;
	return group_kill(w, ret, "OOM-kill counter", err);
}

/* ---- the endpoint, the exit report, disk usage ----------------------------------------------- */

#ifndef PIDFD_GET_NET_NAMESPACE
#define PIDFD_GET_NET_NAMESPACE _IO(0xFF, 4) /* Linux 6.11 */
#endif

int native_netns(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	pid_t pid;
	uint64_t starttime;
	_cleanup_close_ int pfd = pid1_pidfd(cfg, id, h, &pid, &starttime);
	if (pfd == -ENOENT)
		return error_set(err, ESRCH, "sandbox %s has no PID 1", id);
	if (pfd == -ESRCH)
		return error_set(err, ESRCH, "sandbox %s's PID 1 has ended", id);
	if (pfd < 0)
		return error_set_errno(err, -pfd, "pidfd of sandbox %s's PID 1", id);
	int fd = ioctl(pfd, PIDFD_GET_NET_NAMESPACE, 0);
	if (fd >= 0)
		return fd;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set_errno(err, errno, "open '%s'", path);
	/* Still the same process (a pid reused between the check and the open would not be). */
	if (!pid1_alive(pid, starttime)) {
		close(fd);
		return error_set(err, ESRCH, "sandbox %s's PID 1 has ended", id);
	}
	return fd;
}

int native_endpoint(const struct runtime_config *cfg, const char *id,
		    const struct runtime_handle *h, struct runtime_endpoint *ret, struct error *err)
{
	int r;
	ret->peer_pid = 0;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	if (sb_path(ret->path, sizeof(ret->path), cfg, id, EXECD_SOCKET) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	uint64_t starttime;
	if (h && native_pid1(cfg, id, h, &ret->peer_pid, &starttime) < 0)
		ret->peer_pid = 0;
	return 0;
}

/* name beneath dirfd, never through a link of any kind, without blocking (a FIFO or a device
 * opens as what it is, then fails the regular-file check). */
static int open_report(int dirfd, const char *name)
{
	struct open_how how = {
	    .flags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

int native_read_exit(const struct runtime_config *cfg, const char *id, struct sandbox_exit *ret,
		     struct error *err)
{
	int r;
	memset(ret, 0, sizeof(*ret));
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	char dir[PATH_MAX], buf[SANDBOX_EXIT_FILE_MAX + 1];
	sb_path(dir, sizeof(dir), cfg, id, NULL);
	_cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dirfd < 0)
		return error_set_errno(err, errno, "open '%s'", dir);
	_cleanup_close_ int fd = open_report(dirfd, "run/" EXECD_EXIT_FILE);
	if (fd == -ENOENT)
		fd = open_report(dirfd, DISK_MOUNT "/run/" EXECD_EXIT_FILE);
	if (fd < 0)
		return error_set_errno(err, -fd, "open the exit report of sandbox %s", id);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SANDBOX_EXIT_FILE_MAX)
		return error_set(err, EBADMSG, "the exit report of sandbox %s is not a small file", id);
	ssize_t n = RETRY_EINTR(read(fd, buf, SANDBOX_EXIT_FILE_MAX));
	if (n < 0)
		return error_set_errno(err, errno, "read the exit report of sandbox %s", id);
	buf[n] = '\0';
	json_error_t jerr;
	json_t *j = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	const char *reason = json_string_value(json_object_get(j, "reason"));
	json_t *code = json_object_get(j, "exitCode");
	const char *msg = json_string_value(json_object_get(j, "message"));
	bool ok = reason && msg && json_is_integer(code) && json_integer_value(code) >= -1 &&
		  json_integer_value(code) <= 255 &&
		  (strcmp(reason, "EntrypointExited") == 0 || strcmp(reason, "ExecdExited") == 0 ||
		   strcmp(reason, "ResourceExhausted") == 0);
	if (ok) {
		snprintf(ret->reason, sizeof(ret->reason), "%s", reason);
		ret->exit_code = (int)json_integer_value(code);
		/* Printable ASCII only: the message reaches logs and API replies. */
		size_t i = 0;
		for (; msg[i] && i < sizeof(ret->message) - 1; i++)
			ret->message[i] = msg[i] >= 0x20 && msg[i] < 0x7f ? msg[i] : '?';
		ret->message[i] = '\0';
	}
	json_decref(j);
	return ok ? 0 : error_set(err, EBADMSG, "the exit report of sandbox %s is malformed", id);
}


static void walk(int dfd, dev_t dev, unsigned depth, uint64_t *sum, unsigned long *n)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (++*n > DISK_WALK_MAX)
			break;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
			continue;
		/* A hard-linked file is counted once per link: cheap, and an overestimate. */
		*sum += (uint64_t)st.st_blocks * 512;
		if (S_ISDIR(st.st_mode) && depth < DISK_WALK_DEPTH_MAX) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				walk(sub, dev, depth + 1, sum, n);
		}
	}
	closedir(d);
}

/* Bytes allocated below the upper dir (st_blocks), not crossing mount points, at most
 * DISK_WALK_MAX entries. The layer is disk/upper on the sandbox's own file system, or upper. */
int native_disk_usage(const struct runtime_config *cfg, const char *id,
		      struct sandbox_disk_usage *ret, struct error *err)
{
	int r;
	*ret = (struct sandbox_disk_usage){.exact = true};
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	char dir[PATH_MAX];
	if (sb_path(dir, sizeof(dir), cfg, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	_cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dirfd < 0)
		return error_set_errno(err, errno, "open '%s'", dir);
	const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dirfd, DISK_MOUNT "/upper", flags);
	if (fd < 0 && errno == ENOENT)
		fd = openat(dirfd, "upper", flags);
	if (fd < 0)
		return error_set_errno(err, errno, "open the writable layer of sandbox %s", id);
	struct stat st;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return error_set_errno(err, errno, "stat the writable layer of sandbox %s", id);
	}
	unsigned long n = 0;
	walk(fd, st.st_dev, 0, &ret->used_bytes, &n);
	ret->exact = n <= DISK_WALK_MAX;
	return 0;
}
