/*
 * The native runtime: namespaces, cgroups and an overlay root on this host.
 *
 * create() runs in a corrald worker (or any single-threaded process):
 *
 *   caller: dirs, id range + user namespace (userns.h), upper/etc files, execd's socket (bound),
 *           state dir and binary as fds, cgroup + limits, pipe(CLOEXEC)
 *     clone(VM|VFORK) -> intermediate: joins the sandbox cgroup(s)
 *                                      unshare(mnt, pid, uts, ipc, net, cgroup)
 *                                      clone(VM|VFORK) -> PID 1: mounts, pivot_root, fds 3 and 4,
 *                                                         setns(user), caps, seccomp,
 *                                                         execveat corral-execd
 *                                      reports PID 1's pid, _exit(0)
 *
 * The namespaces other than the user namespace belong to the host's user namespace: PID 1 sets
 * them up as host root, then enters the sandbox's user namespace, where it is root over nothing
 * but its own id range (it can never mount, set the hostname or configure the network again).
 *
 * Both children borrow the caller's memory, posix_spawn style (no page tables copied), and each
 * parent sleeps until its child has exec'd or exited. The intermediate exits right then, so PID 1 is
 * reparented to the host's init (or subreaper), never kept by corrald. PID 1 reports any setup
 * failure on the sync pipe with a precise message; EOF with no message means execve succeeded
 * (the pipe is close-on-exec).
 *
 * Every mount is made inside the sandbox's own mount namespace after "/" is made rprivate, so none
 * propagates to the host and all vanish with the sandbox's last process. destroy() still checks
 * /proc/self/mountinfo and lazily detaches anything found below the sandbox dir before removing.
 *
 * Host image (rootfs "/"): the overlay's lower layer is the host's root file system (only that one
 * mount: /proc, /sys, /dev, /run, /tmp and other mounts of the host are not part of it). It holds
 * private host data, so after pivot_root these paths are masked when they exist (directories by an
 * empty read-only tmpfs, files by /dev/null):
 *   the state dir (cfg->state_dir: every sandbox's upper dir and execd socket), /var/lib/corral,
 *   /home, /work, /etc/shadow, /etc/gshadow, /etc/shadow-, /etc/gshadow-, /var/backups (shadow
 *   backups), /var/mail, /var/spool/cron;
 *   /root gets an empty *writable* tmpfs (mode 0700) instead, so HOME=/root stays usable.
 * /tmp is a fresh tmpfs in every sandbox anyway. Beyond the masks, the host image is not idmapped
 * (userns.h): host files show as owned by nobody, so root-only host files cannot be read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <jansson.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "runtime/confine.h"
#include "runtime/disk.h"
#include "runtime/runtime.h"
#include "runtime/sysview.h"
#include "runtime/userns.h"
#include "shared/fsutil.h"
#include "shared/macro.h"
#include "shared/timeutil.h"
#include "shared/unixsock.h"

#define NS_FLAGS                                                                                   \
	(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP)
#define CREATE_TIMEOUT_MS 30000
#define DESTROY_TIMEOUT_MS 10000
#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DEFAULT_HOME "HOME=/root"
#define EXECD_SOCKET "execd.sock"
#define OVERLAY_OPTS_MAX 4000 /* mount(2) copies one page of options; room for ",volatile" */
#define SANDBOX_EXIT_FILE_MAX 4096 /* execd writes a few hundred bytes */

/* Phase timestamps for profiling create (build with -DRUNTIME_TRACE; off in normal builds). */
#ifdef RUNTIME_TRACE
uint64_t *runtime_trace;
#define TRACE(i)                                                                                   \
	do {                                                                                       \
		if (runtime_trace)                                                                 \
			runtime_trace[i] = time_mono_ns();                                         \
	} while (0)
#else
#define TRACE(i) ((void)0)
#endif

/* ---- small helpers ------------------------------------------------------------------------ */

static bool tuned; /* cgroup_favor_dynmods() done, here or in a parent that called prepare() */

static const struct cgroup_ops *cgroup_ops_cached(void)
{
	static const struct cgroup_ops *ops;
	if (!ops && (ops = cgroup_detect()) && ops->init)
		ops->init();
	return ops;
}

static const char *cgroup_parent(const struct runtime_config *cfg)
{
	return cfg->cgroup_name && *cfg->cgroup_name ? cfg->cgroup_name : CGROUP_DEFAULT_PARENT;
}

static int check_id(const char *id, struct error *err)
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

static int check_config(const struct runtime_config *cfg, struct error *err)
{
	if (!cfg->state_dir || cfg->state_dir[0] != '/')
		return error_set(err, EINVAL, "runtime state_dir must be an absolute path");
	const char *p = cgroup_parent(cfg);
	if (strstr(p, "..") || p[0] == '/')
		return error_set(err, EINVAL, "invalid cgroup name '%s'", p);
	return 0;
}

static int sb_path(char *buf, size_t len, const struct runtime_config *cfg, const char *id,
		   const char *name)
{
	int n = snprintf(buf, len, "%s/sandboxes/%s%s%s", cfg->state_dir, id, name ? "/" : "",
			 name ? name : "");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Fields 3 (state) and 22 (starttime) of /proc/PID/stat. */
static int pid_stat(pid_t pid, char *ret_state, uint64_t *ret_start)
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

/* ---- what the sandbox child needs, all prepared before fork ---------------------------------- */

struct sync_msg {
	int32_t kind; /* MSG_PID from the intermediate, MSG_ERROR from either */
	int32_t code; /* negative errno */
	int32_t pid;
	char msg[ERROR_MSG_MAX];
};
enum { MSG_PID = 1, MSG_ERROR = 2 };

struct child_ctx {
	const struct runtime_config *cfg;
	const struct sandbox_spec *spec;
	const struct cgroup_ops *cg;
	const char *parent;
	int sync_fd;
	int read_fd;
	char *pid1_stack;
	int cap_last;
	char dir[PATH_MAX];	  /* <state>/sandboxes/<id>: the overlay's layers are named from here */
	char rootfs[PATH_MAX];
	char run[PATH_MAX];	  /* execd's state dir: run/ or disk/run/ */
	char empty[PATH_MAX];	  /* the sandbox's one empty read-only tmpfs, once mounted */
	uid_t base;		  /* host id of sandbox root (0 without a user namespace) */
	int userns_fd;		  /* the sandbox's user namespace, or -1 (cfg->no_userns) */
	bool idmap_lower;	  /* mount the image idmapped on <dir>/lower first */
	bool bind_lower;	  /* layers without a user namespace: a plain bind mount there */
	const char *lower_src;	  /* what is mounted on <dir>/lower: rootfs or layer_root */
	char image_top[PATH_MAX]; /* the image's top directory (its root's owner and /etc) */
	int listen_fd;		  /* execd's socket, bound at <dir>/execd.sock: EXECD_LISTEN_FD */
	int state_fd;		  /* run/: EXECD_STATE_FD */
	int execd_fd;		  /* O_PATH of the host's corral-execd, exec'd by PID 1 */
	/* tmpfs options of the sandbox's own mounts: owned by sandbox root */
	char opt_dev[96], opt_shm[96], opt_tmp[96], opt_root[96], opt_pts[128];
	bool etc_in_upper;	  /* /etc files already written into the upper layer */
	struct sysview view;	  /* the CPU/memory view; pin to view.cpus when view.cpu */
	char upper[PATH_MAX]; /* the overlay's upper dir (<dir>/upper, or <dir>/disk/upper) */
	char overlay_opts[3 * PATH_MAX + 128];
	char hostname[65];
	char hosts[512];
	char resolv[2048];
	char **argv;
	char **envp;
	struct sock_fprog seccomp;
};

static _noreturn_ void sync_fail(int fd, const struct error *e)
{
	struct sync_msg m = {.kind = MSG_ERROR, .code = e->code ? e->code : -EIO};
	memcpy(m.msg, e->msg, sizeof(m.msg));
	m.msg[sizeof(m.msg) - 1] = '\0';
	ssize_t _unused_ w = write(fd, &m, sizeof(m));
	_exit(127);
}

/* Path inside the sandbox root before pivot_root. */
static const char *R(const struct child_ctx *c, const char *rel)
{
	static char bufs[4][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 4];
	snprintf(b, PATH_MAX, "%s%s", c->rootfs, rel);
	return b;
}

static int do_mount(const char *src, const char *target, const char *type, unsigned long flags,
		    const char *data, struct error *err)
{
	if (mount(src, target, type, flags, data) < 0)
		return error_set_errno(err, errno, "mount %s on '%s'", type ? type : src, target);
	return 0;
}

static int bind_ro(const char *src, const char *target, unsigned long extra, struct error *err)
{
	if (mount(src, target, NULL, MS_BIND | MS_REC, NULL) < 0)
		return error_set_errno(err, errno, "bind '%s' on '%s'", src, target);
	if (mount(NULL, target, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | extra, NULL) < 0)
		return error_set_errno(err, errno, "remount '%s' read-only", target);
	return 0;
}

/* Hide path: a directory behind an empty read-only tmpfs, anything else behind /dev/null. A path
 * that does not exist needs no mask. devnull is the /dev/null to bind from. Every directory mask of
 * a sandbox is a bind of one tmpfs (one superblock per sandbox, not one per mask). */
static int mask_path(struct child_ctx *c, const char *path, const char *devnull, struct error *err)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR
			   ? 0
			   : error_set_errno(err, errno, "stat '%s'", path);
	if (S_ISLNK(st.st_mode)) {
		/* Only called with symlinks after pivot_root (in /proc nothing on the lists is a
		 * link), so the target resolves inside the sandbox: hide what it points to (a host
		 * with /home -> /var/home). A link to "/" or a dangling one hides nothing. */
		char target[PATH_MAX];
		if (!realpath(path, target) || strcmp(target, "/") == 0)
			return 0;
		if (lstat(target, &st) < 0 || S_ISLNK(st.st_mode))
			return 0;
		return mask_path(c, target, devnull, err);
	}
	if (S_ISDIR(st.st_mode)) {
		if (c->empty[0]) {
			if (mount(c->empty, path, NULL, MS_BIND, NULL) < 0)
				return error_set_errno(err, errno, "mask '%s'", path);
			return 0;
		}
		int r =
		    do_mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			     "mode=755,size=4k", err);
		if (r == 0)
			snprintf(c->empty, sizeof(c->empty), "%s", path);
		return r;
	}
	if (mount(devnull, path, NULL, MS_BIND, NULL) < 0)
		return error_set_errno(err, errno, "mask '%s'", path);
	return 0;
}

static int readonly_path(const char *path, struct error *err)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : error_set_errno(err, errno, "stat '%s'", path);
	return bind_ro(path, path, MS_NOSUID | MS_NODEV | MS_NOEXEC, err);
}

/* A top-level mount point in the image: must be a real directory (a symlink in the image would
 * point the mount somewhere else); created in the upper layer when missing. */
static int mount_point(const struct child_ctx *c, const char *rel, struct error *err)
{
	const char *p = R(c, rel);
	struct stat st;
	if (lstat(p, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		return error_set(err, ENOTDIR, "image path '%s' is not a directory", rel);
	}
	if (errno != ENOENT)
		return error_set_errno(err, errno, "stat '%s'", p);
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", p);
	return 0;
}

static int setup_proc(struct child_ctx *c, struct error *err)
{
	/* Docker's and runc's list, then what Podman adds (interrupts), then kernel heap and
	 * physical page layouts (slabinfo, vmallocinfo, pagetypeinfo, kpage*: heap grooming and
	 * Rowhammer aids; only host root can read them, which sandbox root is not, except with
	 * --no-userns), and kallsyms
	 * (kernel addresses for everyone on a host with kptr_restrict=0 and perf_event_paranoid<=1:
	 * no KASLR). */
	static const char *const masked[] = {
	    "/proc/acpi",	    "/proc/asound",	    "/proc/kcore",	 "/proc/keys",
	    "/proc/latency_stats",  "/proc/timer_list",	    "/proc/timer_stats", "/proc/sched_debug",
	    "/proc/scsi",	    "/proc/interrupts",	    "/proc/slabinfo",	 "/proc/vmallocinfo",
	    "/proc/pagetypeinfo",   "/proc/kpagecount",	    "/proc/kpageflags",	 "/proc/kpagecgroup",
	    "/proc/kallsyms",
	};
	static const char *const readonly[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
					       "/proc/sysrq-trigger"};
	int r =
	    do_mount("proc", R(c, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, err);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(masked); i++)
		r = mask_path(c, R(c, masked[i]), "/dev/null", err);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(readonly); i++)
		r = readonly_path(R(c, readonly[i]), err);
	return r;
}

static int setup_sys(struct child_ctx *c, struct error *err)
{
	int r = do_mount("sysfs", R(c, "/sys"), "sysfs",
			 MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, err);
	if (r == 0)
		r = c->cg->mount_ns(R(c, "/sys/fs/cgroup"), err);
	/* Block devices: every loop device's loop/backing_file names a sandbox's disk.img (its id
	 * and the host's state path), of any corrald on the host. The devices live under
	 * devices/virtual/block (loop) or a bus path (real disks, reached only through the
	 * others); block, class/block and dev/block hold the links to them. */
	static const char *const masked[] = {
	    "/sys/firmware",	  "/sys/devices/virtual/powercap", "/sys/block",
	    "/sys/class/block", "/sys/dev/block",		   "/sys/devices/virtual/block",
	};
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(masked); i++)
		r = mask_path(c, R(c, masked[i]), "/dev/null", err);
	return r;
}

/* The sandbox's own CPU and memory view (sysview.h) over the host's files: written into a scratch
 * tmpfs on the image's /tmp (replaced by the real /tmp right after), bound read-only from there.
 * The binds keep the scratch file system alive after it is unmounted. Before write_file() and
 * bind_ro() are defined: declared here. */
static int write_file(const char *path, const char *data, mode_t mode, struct error *err);
static int setup_view(const struct child_ctx *c, struct error *err)
{
	const struct {
		const char *name, *target, *data;
	} files[] = {
	    {"cpuinfo", "/proc/cpuinfo", c->view.cpu ? c->view.cpuinfo : NULL},
	    {"stat", "/proc/stat", c->view.cpu ? c->view.stat : NULL},
	    {"online", "/sys/devices/system/cpu/online", c->view.cpu ? c->view.online : NULL},
	    {"meminfo", "/proc/meminfo", c->view.mem ? c->view.meminfo : NULL},
	};
	if (!c->view.cpu && !c->view.mem)
		return 0;
	char scratch[PATH_MAX], src[PATH_MAX + 16];
	snprintf(scratch, sizeof(scratch), "%s", R(c, "/tmp"));
	int r = do_mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			 "mode=700,size=4m", err);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(files); i++) {
		if (!files[i].data)
			continue;
		snprintf(src, sizeof(src), "%s/%s", scratch, files[i].name);
		if ((r = write_file(src, files[i].data, 0444, err)) == 0)
			r = bind_ro(src, R(c, files[i].target), MS_NOSUID | MS_NODEV | MS_NOEXEC, err);
	}
	if (r == 0 && umount2(scratch, MNT_DETACH) < 0)
		r = error_set_errno(err, errno, "unmount the scratch tmpfs on '%s'", scratch);
	return r;
}

static int setup_dev(const struct child_ctx *c, struct error *err)
{
	static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
	static const char *const links[][2] = {
	    {"/proc/self/fd", "/dev/fd"},	{"/proc/self/fd/0", "/dev/stdin"},
	    {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
	    {"pts/ptmx", "/dev/ptmx"},
	};
	char src[64];
	int r = do_mount("tmpfs", R(c, "/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC | MS_STRICTATIME,
			 c->opt_dev, err);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(devs); i++) {
		snprintf(src, sizeof(src), "/dev/%s", devs[i]);
		const char *dst = R(c, src);
		int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0)
			return error_set_errno(err, errno, "create '%s'", dst);
		close(fd);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			return error_set_errno(err, errno, "bind '%s' on '%s'", src, dst);
	}
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(links); i++)
		if (symlink(links[i][0], R(c, links[i][1])) < 0)
			return error_set_errno(err, errno, "symlink '%s'", links[i][1]);
	if (r == 0 && (mkdir(R(c, "/dev/pts"), 0755) < 0 || mkdir(R(c, "/dev/shm"), 01777) < 0))
		return error_set_errno(err, errno, "mkdir in '%s'", R(c, "/dev"));
	if (r == 0)
		r = do_mount("devpts", R(c, "/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC, c->opt_pts,
			     err);
	if (r == 0)
		r = do_mount("shm", R(c, "/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			     c->opt_shm, err);
	return r;
}

/* The overlay's options name its layers relative to the sandbox dir (cwd here), so the sandbox's
 * /proc/self/mountinfo shows "lowerdir=lower,upperdir=upper": no host path, no id. */
static int mount_overlay(struct child_ctx *c, struct error *err)
{
	if (chdir(c->dir) < 0)
		return error_set_errno(err, errno, "chdir '%s'", c->dir);
	int r;
	if (c->idmap_lower &&
	    (r = userns_idmap_mount(c->lower_src, "lower", c->userns_fd, err)) < 0)
		return r;
	if (c->bind_lower && (r = do_mount(c->lower_src, "lower", NULL, MS_BIND, NULL, err)) < 0)
		return r;
	/* "volatile" (5.10+): no syncs on the upper layer; the layer dies with the sandbox. */
	size_t n = strlen(c->overlay_opts);
	snprintf(c->overlay_opts + n, sizeof(c->overlay_opts) - n, ",volatile");
	/* nodev: a device node in an image must not open a host device (/dev is its own mount). */
	const unsigned long flags = MS_NOSUID | MS_NODEV;
	if (mount("overlay", c->rootfs, "overlay", flags, c->overlay_opts) == 0)
		return 0;
	if (errno != EINVAL) /* an unknown option is EINVAL; anything else is not about volatile */
		return error_set_errno(err, errno, "mount overlay on '%s'", c->rootfs);
	c->overlay_opts[n] = '\0';
	return do_mount("overlay", c->rootfs, "overlay", flags, c->overlay_opts, err);
}

static int write_file(const char *path, const char *data, mode_t mode, struct error *err)
{
	/* Replace, never write through: the image may hold a symlink there. */
	if (unlink(path) < 0 && errno != ENOENT)
		return error_set_errno(err, errno, "unlink '%s'", path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return error_set_errno(err, errno, "create '%s'", path);
	size_t len = strlen(data);
	ssize_t w = write(fd, data, len);
	int e = errno;
	close(fd);
	if (w != (ssize_t)len)
		return error_set_errno(err, w < 0 ? e : EIO, "write '%s'", path);
	return 0;
}

static int mask_host(struct child_ctx *c, struct error *err)
{
	static const char *const masked[] = {
	    "/var/lib/corral", "/home",		"/work",	"/etc/shadow", "/etc/gshadow",
	    "/etc/shadow-",    "/etc/gshadow-", "/var/backups", "/var/mail",   "/var/spool/cron",
	};
	/* With a user namespace the state dir needs no mask (a mask would show its path in the
	 * sandbox's mountinfo): sandboxes/ is host root's and 0700 (native_prepare). */
	int r = c->userns_fd >= 0 ? 0 : mask_path(c, c->cfg->state_dir, "/dev/null", err);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(masked); i++)
		r = mask_path(c, masked[i], "/dev/null", err);
	struct stat st;
	if (r == 0 && lstat("/root", &st) == 0 && S_ISDIR(st.st_mode))
		r = do_mount("tmpfs", "/root", "tmpfs", MS_NOSUID | MS_NODEV, c->opt_root, err);
	return r;
}

static int loopback_up(struct error *err)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return error_set_errno(err, errno, "socket for loopback");
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return error_set_errno(err, errno, "get flags of lo");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return error_set_errno(err, errno, "bring lo up");
	return 0;
}

/* Give fd the number target, inherited across execve. fds below 10 are 0-2 and what the caller
 * (PID 1's setup) already placed; anything else is moved out of the way first. */
static int place_fd(int fd, int target, struct error *err)
{
	if (fd == target)
		return fcntl(fd, F_SETFD, 0) < 0 ? error_set_errno(err, errno, "fd %d", fd) : 0;
	if (dup2(fd, target) < 0)
		return error_set_errno(err, errno, "dup2 %d to %d", fd, target);
	return 0;
}

/* PID 1's setup, in the new namespaces. Returns only on failure. */
static int child_setup(struct child_ctx *c, struct error *err)
{
	int r;
	/* Clean process state: nothing corrald ignored or blocked leaks into the sandbox. Handlers
	 * first: they are the caller's code, and signals are blocked until they are gone. */
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	umask(022);
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) /* before Linux 5.11 */
		for (int fd = 3; fd < 4096; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return error_set_errno(err, errno, "open /dev/null");
	for (int fd = 0; fd < 3; fd++)
		if (dup2(null, fd) < 0)
			return error_set_errno(err, errno, "dup2 /dev/null");
	if (null > 2)
		close(null);

	TRACE(3);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return error_set_errno(err, errno, "make / rprivate");
	if ((r = mount_overlay(c, err)) < 0)
		return r;
	TRACE(4);
	static const char *const points[] = {"/proc", "/sys", "/dev", "/tmp"};
	for (size_t i = 0; i < ARRAY_SIZE(points); i++)
		if ((r = mount_point(c, points[i], err)) < 0)
			return r;
	TRACE(5);
	if ((r = setup_proc(c, err)) < 0)
		return r;
	TRACE(6);
	if ((r = setup_sys(c, err)) < 0 || (r = setup_view(c, err)) < 0)
		return r;
	TRACE(7);
	if ((r = setup_dev(c, err)) < 0)
		return r;
	TRACE(8);
	if ((r = do_mount("tmpfs", R(c, "/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, c->opt_tmp, err)) <
	    0)
		return r;

	TRACE(9);
	if (chdir(c->rootfs) < 0)
		return error_set_errno(err, errno, "chdir '%s'", c->rootfs);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return error_set_errno(err, errno, "pivot_root to '%s'", c->rootfs);
	if (umount2(".", MNT_DETACH) < 0)
		return error_set_errno(err, errno, "detach the old root");
	if (chdir("/") < 0)
		return error_set_errno(err, errno, "chdir /");
	size_t rl = strlen(c->rootfs);
	if (c->empty[0] && strncmp(c->empty, c->rootfs, rl) == 0)
		memmove(c->empty, c->empty + rl, strlen(c->empty + rl) + 1);
	else
		c->empty[0] = '\0';

	TRACE(10);
	/* From here on every path resolves inside the sandbox (image symlinks cannot escape). */
	if (c->spec->host_image && (r = mask_host(c, err)) < 0)
		return r;
	TRACE(18);
	if (!c->etc_in_upper && mkdir("/etc", 0755) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir /etc");
	if (!c->etc_in_upper && ((r = write_file("/etc/hostname", c->hostname, 0644, err)) < 0 ||
				 (r = write_file("/etc/hosts", c->hosts, 0644, err)) < 0 ||
				 (r = write_file("/etc/resolv.conf", c->resolv, 0644, err)) < 0))
		return r;
	if (!c->etc_in_upper && c->base) {
		static const char *const own[] = {"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"};
		for (size_t i = 0; i < ARRAY_SIZE(own); i++)
			if (lchown(own[i], c->base, c->base) < 0)
				return error_set_errno(err, errno, "chown '%s'", own[i]);
	}
	TRACE(11);
	if (sethostname(c->hostname, strlen(c->hostname)) < 0)
		return error_set_errno(err, errno, "sethostname '%s'", c->hostname);
	if ((r = loopback_up(err)) < 0)
		return r;
	/* PID 1 is never the OOM victim; execd resets its children to 0. Needs CAP_SYS_RESOURCE,
	 * which a host may withhold from corrald: then PID 1 keeps the default. */
	r = fs_write_string("/proc/self/oom_score_adj", "-1000");
	if (r < 0 && r != -EACCES && r != -EPERM)
		return error_set_errno(err, -r, "set oom_score_adj");

	/* Before the user namespace: raising a hard limit takes CAP_SYS_RESOURCE of the host's. */
	if ((r = place_fd(c->listen_fd, EXECD_LISTEN_FD, err)) < 0 ||
	    (r = place_fd(c->state_fd, EXECD_STATE_FD, err)) < 0 ||
	    (r = confine_rlimits(c->cfg->nofile, err)) < 0)
		return r;
	/* Into the user namespace last: everything above needed host root (mounts, pivot_root,
	 * hostname and lo belong to namespaces the host's user namespace owns, which sandbox root
	 * can therefore never change). Raw syscalls: glibc's setxid would signal the threads of the
	 * caller whose memory this process borrows. */
	if (c->userns_fd >= 0) {
		if (setns(c->userns_fd, CLONE_NEWUSER) < 0)
			return error_set_errno(err, errno, "enter the sandbox's user namespace");
		if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, 0, 0, 0) < 0 ||
		    syscall(SYS_setresuid, 0, 0, 0) < 0)
			return error_set_errno(err, errno, "become root of the user namespace");
	}

	/* The image's working directory, made as sandbox root like any of its files. */
	if (c->spec->workdir && c->spec->workdir[0]) {
		if ((r = fs_mkdir_p(c->spec->workdir, 0755)) < 0)
			return error_set_errno(err, -r, "make the working directory '%s'",
					       c->spec->workdir);
		if (chdir(c->spec->workdir) < 0)
			return error_set_errno(err, errno, "chdir to the working directory '%s'",
					       c->spec->workdir);
	}

	TRACE(12);
	if ((r = confine_drop_caps(c->cap_last, err)) < 0)
		return r;
	TRACE(13);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return error_set_errno(err, errno, "set no_new_privs");
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &c->seccomp, 0, 0) < 0)
		return error_set_errno(err, errno, "load seccomp filter");
	TRACE(14);
	syscall(SYS_execveat, c->execd_fd, "", c->argv, c->envp, AT_EMPTY_PATH);
	return error_set_errno(err, errno, "execve '%s'", c->cfg->execd_path);
}

static int pid1_main(void *arg)
{
	struct child_ctx *c = arg;
	struct error e = {0};
	child_setup(c, &e);
	sync_fail(c->sync_fd, &e);
}

/* Joins the cgroup(s), makes the namespaces, starts PID 1 and, once PID 1 has exec'd (or died),
 * reports its pid and exits so PID 1 is reparented away from the caller. */
static int intermediate_main(void *arg)
{
	struct child_ctx *c = arg;
	struct error e = {0};
	close(c->read_fd);
	if (c->cg->enter(c->parent, c->spec->id, 0, &e) < 0)
		sync_fail(c->sync_fd, &e);
	TRACE(15);
	/* Inherited by PID 1 and everything it starts: nproc & co. see the sandbox's CPUs. */
	if (c->view.cpu && sched_setaffinity(0, sizeof(c->view.cpus), &c->view.cpus) < 0) {
		error_set_errno(&e, errno, "pin the sandbox to its CPUs");
		sync_fail(c->sync_fd, &e);
	}
	if (unshare(NS_FLAGS) < 0) {
		error_set_errno(&e, errno, "unshare namespaces");
		sync_fail(c->sync_fd, &e);
	}
	TRACE(2);
	pid_t pid = clone(pid1_main, c->pid1_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, c);
	if (pid < 0) {
		error_set_errno(&e, errno, "clone PID 1");
		sync_fail(c->sync_fd, &e);
	}
	struct sync_msg m = {.kind = MSG_PID, .pid = pid};
	ssize_t _unused_ w = write(c->sync_fd, &m, sizeof(m));
	_exit(0);
}

/* ---- create --------------------------------------------------------------------------------- */

static int build_env(const struct sandbox_spec *spec, char ***ret)
{
	size_t n = 0;
	bool have_path = false, have_home = false;
	for (char *const *e = spec->env; e && *e; e++, n++) {
		have_path |= strncmp(*e, "PATH=", 5) == 0;
		have_home |= strncmp(*e, "HOME=", 5) == 0;
	}
	char **env = calloc(n + 3, sizeof(char *));
	if (!env)
		return -ENOMEM;
	size_t i = 0;
	for (char *const *e = spec->env; e && *e; e++)
		env[i++] = *e;
	if (!have_path)
		env[i++] = (char *)DEFAULT_PATH;
	if (!have_home)
		env[i++] = (char *)DEFAULT_HOME;
	*ret = env;
	return 0;
}

static int build_argv(const struct sandbox_spec *spec, char ***ret)
{
	static const char *const head[] = {"corral-execd", "--listen-fd", STR(EXECD_LISTEN_FD),
					   "--state", "/proc/self/fd/" STR(EXECD_STATE_FD) "/execs",
					   "--exit-file",
					   "/proc/self/fd/" STR(EXECD_STATE_FD) "/exit.json"};
	size_t n = 0;
	for (char *const *a = spec->entrypoint; a && *a; a++)
		n++;
	char **argv = calloc(ARRAY_SIZE(head) + 2 + 1 + n + 1, sizeof(char *));
	if (!argv)
		return -ENOMEM;
	size_t i = 0;
	for (size_t k = 0; k < ARRAY_SIZE(head); k++)
		argv[i++] = (char *)head[k];
	if (n && spec->user && spec->user[0]) {
		argv[i++] = (char *)"--user";
		argv[i++] = (char *)spec->user;
	}
	if (n) {
		argv[i++] = (char *)"--";
		for (char *const *a = spec->entrypoint; *a; a++)
			argv[i++] = *a;
	}
	*ret = argv;
	return 0;
}

/* A registry image: "lowerdir=lower/<top>:...:lower/<lowest>," (overlay lists the top first), the
 * whole layer root mounted once on <dir>/lower. The options must fit the kernel's one page. */
static int layer_opts(struct child_ctx *c, const struct runtime_config *cfg,
		      const struct sandbox_spec *spec, struct error *err)
{
	size_t n = 0, len = sizeof(c->overlay_opts);
	if (!spec->layer_root || spec->layer_root[0] != '/')
		return error_set(err, EINVAL, "image layer root must be an absolute path");
	for (char *const *l = spec->layers; *l; l++, n++)
		if (!**l || **l == '.' || strpbrk(*l, "/,:\\"))
			return error_set(err, EINVAL, "image layer name '%s' is invalid", *l);
	if (n == 0)
		return error_set(err, EINVAL, "image has no layers");
	size_t o = (size_t)snprintf(c->overlay_opts, len, "lowerdir=");
	for (size_t i = n; i-- > 0;)
		o += (size_t)snprintf(c->overlay_opts + o, len - o, "lower/%s%s", spec->layers[i],
				      i ? ":" : ",");
	if (o + 64 > OVERLAY_OPTS_MAX)
		return error_set(err, E2BIG,
				 "image has %zu layers: too many for one overlay mount (its options must fit in %d bytes)",
				 n, OVERLAY_OPTS_MAX);
	c->lower_src = spec->layer_root;
	c->bind_lower = cfg->no_userns;
	snprintf(c->image_top, sizeof(c->image_top), "%s/%s", spec->layer_root, spec->layers[n - 1]);
	/* /etc of the merged image: from the topmost layer that has an entry for it. */
	for (size_t i = n; i-- > 0;) {
		char p[PATH_MAX];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s/etc", spec->layer_root, spec->layers[i]);
		if (lstat(p, &st) == 0) {
			snprintf(c->image_top, sizeof(c->image_top), "%s/%s", spec->layer_root,
				 spec->layers[i]);
			break;
		}
	}
	return 0;
}

static int prepare_child(struct child_ctx *c, const struct runtime_config *cfg,
			 const struct sandbox_spec *spec, struct error *err)
{
	const char *lower = spec->host_image ? "/" : spec->rootfs;
	bool disk = spec->disk_limit_bytes > 0;
	if (spec->layers) {
		int r = layer_opts(c, cfg, spec, err);
		if (r < 0)
			return r;
		lower = NULL;
	} else if (!lower || lower[0] != '/' || strpbrk(lower, ",:\\")) {
		return error_set(err, EINVAL,
				 "image rootfs '%s' must be an absolute path without ',' ':' '\\'",
				 lower ? lower : "");
	}
	if (sb_path(c->dir, sizeof(c->dir), cfg, spec->id, NULL) < 0 ||
	    sb_path(c->rootfs, sizeof(c->rootfs), cfg, spec->id, "rootfs") < 0 ||
	    sb_path(c->run, sizeof(c->run), cfg, spec->id, disk ? DISK_MOUNT "/run" : "run") < 0 ||
	    sb_path(c->upper, sizeof(c->upper), cfg, spec->id, disk ? DISK_MOUNT "/upper" : "upper") <
		0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	/* An image other than the host's keeps its owners through an idmapped mount (userns.h). */
	c->idmap_lower = !cfg->no_userns && !spec->host_image;
	if (lower) {
		c->lower_src = spec->rootfs;
		snprintf(c->image_top, sizeof(c->image_top), "%s", lower);
		snprintf(c->overlay_opts, sizeof(c->overlay_opts), "lowerdir=%s,",
			 c->idmap_lower ? "lower" : lower);
	}
	size_t n = strlen(c->overlay_opts);
	snprintf(c->overlay_opts + n, sizeof(c->overlay_opts) - n, "upperdir=%s,workdir=%s",
		 disk ? DISK_MOUNT "/upper" : "upper", disk ? DISK_MOUNT "/work" : "work");

	const char *h = spec->hostname && *spec->hostname ? spec->hostname : NULL;
	if (h) {
		if (strlen(h) > 63)
			return error_set(err, EINVAL, "hostname '%s' is longer than 63 characters",
					 h);
		if (strspn(h,
			   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
		    strlen(h))
			return error_set(
			    err, EINVAL,
			    "hostname '%s' may only hold letters, digits, '.', '-', '_'", h);
		snprintf(c->hostname, sizeof(c->hostname), "%s", h);
	} else {
		snprintf(c->hostname, sizeof(c->hostname), "%.12s", spec->id);
	}
	snprintf(c->hosts, sizeof(c->hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
		 c->hostname);
	char buf[sizeof(c->resolv) - 64];
	if (spec->resolv_conf)
		snprintf(buf, sizeof(buf), "%s", spec->resolv_conf);
	else if (fs_read_small("/etc/resolv.conf", buf, sizeof(buf)) < 0)
		buf[0] = '\0';
	snprintf(c->resolv, sizeof(c->resolv), "%s%s", buf, buf[0] ? "\n" : "");

	c->cap_last = 40;
	char v[16];
	if (fs_read_small("/proc/sys/kernel/cap_last_cap", v, sizeof(v)) == 0)
		c->cap_last = atoi(v);
	if (build_argv(spec, &c->argv) < 0 || build_env(spec, &c->envp) < 0)
		return error_set(err, ENOMEM, "argv/env");
	return confine_seccomp_build(&c->seccomp, err);
}

/* Sandbox root owns what the sandbox gets to itself: its tmpfs mounts, its /etc files, its layer. */
static void set_owner(struct child_ctx *c, uid_t base)
{
	char ids[64] = "";
	c->base = base;
	if (base)
		snprintf(ids, sizeof(ids), ",uid=%u,gid=%u", (unsigned)base, (unsigned)base);
	snprintf(c->opt_dev, sizeof(c->opt_dev), "mode=755,size=65536k%s", ids);
	snprintf(c->opt_shm, sizeof(c->opt_shm), "mode=1777,size=65536k%s", ids);
	snprintf(c->opt_tmp, sizeof(c->opt_tmp), "mode=1777%s", ids);
	snprintf(c->opt_root, sizeof(c->opt_root), "mode=700%s", ids);
	snprintf(c->opt_pts, sizeof(c->opt_pts), "newinstance,ptmxmode=0666,mode=0620,gid=%u",
		 (unsigned)base + 5);
}

static void child_ctx_clear(struct child_ctx *c)
{
	free(c->argv);
	free(c->envp);
	c->argv = c->envp = NULL;
	sysview_clear(&c->view);
	int *fds[] = {&c->userns_fd, &c->listen_fd, &c->state_fd, &c->execd_fd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

/* Read the sync pipe until EOF: PID 1's pid, or the first error. */
static int read_sync(int fd, pid_t *ret_pid, struct error *err)
{
	int64_t deadline = time_mono_ms() + CREATE_TIMEOUT_MS;
	int ret = 0;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		if (left <= 0)
			return ret ? ret
				   : error_set(err, ETIMEDOUT, "sandbox setup took over %d ms",
					       CREATE_TIMEOUT_MS);
		int n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return error_set_errno(err, errno, "poll sync pipe");
		if (n == 0)
			continue;
		struct sync_msg m;
		ssize_t got = RETRY_EINTR(read(fd, &m, sizeof(m)));
		if (got == 0)
			return ret;
		if (got != (ssize_t)sizeof(m))
			return ret ? ret : error_set(err, EIO, "short read on sync pipe");
		if (m.kind == MSG_PID) {
			*ret_pid = m.pid;
		} else if (m.kind == MSG_ERROR && ret == 0) {
			m.msg[sizeof(m.msg) - 1] = '\0';
			ret = error_set(err, -m.code, "%s", m.msg);
		}
	}
}

static int write_pid_file(const struct runtime_config *cfg, const char *id, pid_t pid,
			  uint64_t start, struct error *err)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], buf[64];
	if (sb_path(path, sizeof(path), cfg, id, "pid") < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int n = snprintf(buf, sizeof(buf), "%d %" PRIu64 "\n", (int)pid, start);
	/* Atomic against a crash of corrald (tmp + rename); no fsync: after a host crash the
	 * sandbox is gone anyway, and an fsync would cost milliseconds on every create. */
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return error_set_errno(err, errno, "create '%s'", tmp);
	if (write(fd, buf, (size_t)n) != n || rename(tmp, path) < 0) {
		int e = errno;
		unlink(tmp);
		return error_set_errno(err, e, "write '%s'", path);
	}
	return 0;
}

static int remove_files(const struct runtime_config *cfg, const char *id, struct error *err);
static int detach_leftover_mounts(const char *dir);

static const char *userns_lock_dir(const struct runtime_config *cfg)
{
	return cfg->userns_dir && *cfg->userns_dir ? cfg->userns_dir : USERNS_DEFAULT_LOCK_DIR;
}

/* The host id that shows as id inside the sandbox (an image's owners beyond the range: root). */
static uid_t host_id(const struct child_ctx *c, uid_t id)
{
	if (!c->base)
		return id;
	return c->base + (id < USERNS_SIZE ? id : 0);
}

/*
 * Write /etc/hostname, hosts and resolv.conf straight into the fresh upper layer, before the
 * overlay exists: plain file creation instead of overlay copy-ups and whiteouts, and nothing of
 * the image is followed (upper/etc is our own new directory). Only when the image's /etc is a real
 * directory (or absent): an upper directory over a lower symlink would hide the image's /etc, so
 * then PID 1 writes the files through the overlay after pivot_root. upper/etc takes the image's
 * /etc mode and owner, because a merged directory shows its upper's.
 */
static int write_etc_upper(struct child_ctx *c, const char *lower, const char *upper,
			   struct error *err)
{
	char path[PATH_MAX];
	struct stat st = {.st_mode = S_IFDIR | 0755};
	snprintf(path, sizeof(path), "%s/etc", strcmp(lower, "/") == 0 ? "" : lower);
	if (lstat(path, &st) < 0 && errno != ENOENT)
		return error_set_errno(err, errno, "stat image '%s'", path);
	if (!S_ISDIR(st.st_mode))
		return 0;
	snprintf(path, sizeof(path), "%s/etc", upper);
	if (mkdir(path, st.st_mode & 07777) < 0)
		return error_set_errno(err, errno, "mkdir '%s'", path);
	if ((c->base || st.st_uid || st.st_gid) &&
	    chown(path, host_id(c, st.st_uid), host_id(c, st.st_gid)) < 0)
		return error_set_errno(err, errno, "chown '%s'", path);
	const char *const files[][2] = {
	    {"hostname", c->hostname}, {"hosts", c->hosts}, {"resolv.conf", c->resolv}};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/etc/%s", upper, files[i][0]);
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0)
			return error_set_errno(err, errno, "create '%s'", path);
		size_t len = strlen(files[i][1]);
		ssize_t w = c->base && fchown(fd, c->base, c->base) < 0 ? -1 : write(fd, files[i][1], len);
		int e = errno;
		close(fd);
		if (w != (ssize_t)len)
			return error_set_errno(err, w < 0 ? e : EIO, "write '%s'", path);
	}
	c->etc_in_upper = true;
	return 0;
}

/* fd moved to 10 or above (close-on-exec), out of the way of the numbers PID 1 gives it. */
static int fd_high(int fd)
{
	if (fd < 0)
		return -errno;
	int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
	int e = errno;
	close(fd);
	return h < 0 ? -e : h;
}

/* Sandbox root's host ids (userns.h): a slot reserved host-wide, recorded in <dir>/userns so that
 * remove_files() gives it back, and the user namespace PID 1 will enter. */
static int setup_userns(struct child_ctx *c, const char *dir, struct error *err)
{
	if (c->cfg->no_userns) {
		set_owner(c, 0);
		return 0;
	}
	unsigned slot, hint = 0;
	for (const char *p = c->spec->id; *p; p++)
		hint = hint * 31 + (unsigned char)*p;
	int r = userns_reserve(userns_lock_dir(c->cfg), dir, hint, &slot, err);
	if (r < 0)
		return r;
	char path[PATH_MAX + 16], buf[16];
	snprintf(path, sizeof(path), "%s/userns", dir);
	snprintf(buf, sizeof(buf), "%u\n", slot);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write(fd, buf, strlen(buf)) != (ssize_t)strlen(buf)) {
		r = error_set_errno(err, errno, "write '%s'", path);
		userns_release(userns_lock_dir(c->cfg), slot, dir);
		return r;
	}
	set_owner(c, userns_base(slot));
	r = userns_open(c->base, err);
	if (r >= 0 && (c->userns_fd = fd_high(r)) < 0)
		return error_set_errno(err, -c->userns_fd, "user namespace fd");
	return r < 0 ? r : 0;
}

static int mkdir_owned(const char *path, mode_t mode, uid_t owner, struct error *err)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", path);
	if (owner && chown(path, owner, owner) < 0)
		return error_set_errno(err, errno, "chown '%s'", path);
	return 0;
}

/* The writable layer (upper/ work/, or the disk's) and execd's state dir run/ (inside the disk
 * with one, so it counts against the limit). The upper dir is the merged root's owner. */
static int make_layer_dirs(struct child_ctx *c, const char *dir, struct error *err)
{
	const struct sandbox_spec *spec = c->spec;
	char path[PATH_MAX + 16];
	int r;
	if (spec->disk_limit_bytes) {
		if ((r = disk_setup(c->cfg->state_dir, dir, spec->disk_limit_bytes, err)) < 0)
			return r;
	} else {
		snprintf(path, sizeof(path), "%s/work", dir);
		if ((r = mkdir_owned(path, 0700, 0, err)) < 0 ||
		    (r = mkdir_owned(c->upper, 0755, 0, err)) < 0)
			return r;
	}
	struct stat st = {0};
	if (stat(c->image_top, &st) < 0)
		return error_set_errno(err, errno, "stat image '%s'", c->image_top);
	if (c->base && chown(c->upper, host_id(c, st.st_uid), host_id(c, st.st_gid)) < 0)
		return error_set_errno(err, errno, "chown '%s'", c->upper);
	if ((r = mkdir_owned(c->run, 0700, c->base, err)) < 0)
		return r;
	snprintf(path, sizeof(path), "%s/lower", dir);
	return c->idmap_lower || c->bind_lower ? mkdir_owned(path, 0755, 0, err) : 0;
}

/* What PID 1 hands to execd: its listening socket, bound here at <dir>/execd.sock (a path only the
 * host sees), its state dir, and the binary itself. */
static int open_execd_fds(struct child_ctx *c, const char *dir, struct error *err)
{
	char path[PATH_MAX + 16];
	int r;
	c->execd_fd = fd_high(open(c->cfg->execd_path, O_PATH | O_CLOEXEC));
	if (c->execd_fd < 0)
		return error_set_errno(err, -c->execd_fd, "open '%s'", c->cfg->execd_path);
	c->state_fd = fd_high(open(c->run, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
	if (c->state_fd < 0)
		return error_set_errno(err, -c->state_fd, "open '%s'", c->run);
	snprintf(path, sizeof(path), "%s/" EXECD_SOCKET, dir);
	struct sockaddr_un sa;
	_cleanup_close_ int dirfd = -1;
	if ((r = unix_sockaddr(path, &sa, &dirfd)) < 0)
		return error_set_errno(err, -r, "socket path '%s'", path);
	c->listen_fd = fd_high(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (c->listen_fd < 0)
		return error_set_errno(err, -c->listen_fd, "socket");
	if (bind(c->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return error_set_errno(err, errno, "bind '%s'", path);
	return 0;
}

static int native_create(const struct runtime_config *cfg, const struct sandbox_spec *spec,
			 pid_t *ret_pid, uint64_t *ret_starttime, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(spec->id, err)) < 0)
		return r;
	if (!cfg->execd_path || access(cfg->execd_path, X_OK) < 0)
		return error_set_errno(err, cfg->execd_path ? errno : EINVAL, "execd binary '%s'",
				       cfg->execd_path ? cfg->execd_path : "");
	const struct cgroup_ops *cg = cgroup_ops_cached();
	if (!cg)
		return error_set(err, ENOTSUP, "no usable cgroup hierarchy under '%s'",
				 cgroup_root());
	const char *parent = cgroup_parent(cfg);
	if (!tuned) {
		tuned = true;
		(void)cgroup_favor_dynmods(); /* best effort: only speed depends on it */
	}

	struct child_ctx c = {.cfg = cfg, .spec = spec, .cg = cg, .parent = parent, .sync_fd = -1,
			      .userns_fd = -1, .listen_fd = -1, .state_fd = -1, .execd_fd = -1};
	r = prepare_child(&c, cfg, spec, err);
	if (r < 0) {
		child_ctx_clear(&c);
		return r;
	}

	/* Directories. A leftover rootfs means someone else's sandbox or an unfinished destroy:
	 * never reuse it. */
	char dir[PATH_MAX];
	sb_path(dir, sizeof(dir), cfg, spec->id, NULL);
	if ((r = fs_mkdir_p(dir, 0700)) < 0) {
		child_ctx_clear(&c);
		return error_set_errno(err, -r, "mkdir '%s'", dir);
	}
	if (mkdir(c.rootfs, 0755) < 0) {
		r = error_set_errno(err, errno, "mkdir '%s'", c.rootfs);
		child_ctx_clear(&c);
		return r;
	}
	if ((r = setup_userns(&c, dir, err)) < 0)
		goto fail_files;
	if ((r = make_layer_dirs(&c, dir, err)) < 0)
		goto fail_files;
	if ((r = write_etc_upper(&c, c.image_top, c.upper, err)) < 0)
		goto fail_files;
	if ((r = open_execd_fds(&c, dir, err)) < 0)
		goto fail_files;

	if ((r = sysview_build(spec->id, spec->cpu_limit_millis, spec->memory_limit_bytes, &c.view,
			       err)) < 0)
		goto fail_files;

	TRACE(0);
	if ((r = cg->create(parent, spec->id, spec, err)) < 0)
		goto fail_cgroup;
	if (c.view.cpu && cg->pin && (r = cg->pin(parent, spec->id, c.view.online, err)) < 0)
		goto fail_cgroup;
	TRACE(1);

	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		r = error_set_errno(err, errno, "pipe");
		goto fail_cgroup;
	}
	c.sync_fd = p[1];
	c.read_fd = p[0];
	/* Both children share our memory (vfork style, as posix_spawn does) and run one at a time
	 * while we are suspended: no page tables are copied. Signals stay blocked until PID 1 has
	 * reset every handler, so none of ours can run in a child. */
	const size_t stack_size = 256 * 1024;
	char *stacks = mmap(NULL, 2 * stack_size, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stacks == MAP_FAILED) {
		r = error_set_errno(err, errno, "mmap child stacks");
		close(p[0]);
		close(p[1]);
		goto fail_cgroup;
	}
	c.pid1_stack = stacks + 2 * stack_size;
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t mid =
	    clone(intermediate_main, stacks + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	int clone_errno = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	munmap(stacks, 2 * stack_size);
	if (mid < 0) {
		r = error_set_errno(err, clone_errno, "clone");
		close(p[0]);
		close(p[1]);
		goto fail_cgroup;
	}
	close(p[1]);
	pid_t pid = 0;
	r = read_sync(p[0], &pid, err);
	close(p[0]);
	TRACE(16);
	int status;
	RETRY_EINTR(waitpid(mid, &status, 0));
	if (r == 0 && pid <= 0)
		r = error_set(err, EIO, "sandbox setup process died (status 0x%x)", status);
	uint64_t start = 0;
	char state = 0;
	if (r == 0 && (pid_stat(pid, &state, &start) < 0 || state == 'Z' || state == 'X'))
		r = error_set(err, ESRCH, "sandbox PID 1 died right after starting corral-execd");
	if (r == 0)
		r = write_pid_file(cfg, spec->id, pid, start, err);
	TRACE(17);
	if (r < 0)
		goto fail_cgroup;
	child_ctx_clear(&c);
	*ret_pid = pid;
	*ret_starttime = start;
	return 0;

fail_cgroup:
	(void)0;
	struct error e2 = {0};
	if (cgroup_wait_empty(cg, parent, spec->id, DESTROY_TIMEOUT_MS, &e2) == 0)
		for (int i = 0; i < 1000 && cg->remove(parent, spec->id, &e2) == -EBUSY; i++)
			usleep(1000);
fail_files:
	detach_leftover_mounts(dir); /* the layer's file system, if it got that far */
	remove_files(cfg, spec->id, NULL);
	child_ctx_clear(&c);
	return r;
}

/* ---- destroy and the quick operations ------------------------------------------------------- */

/* Lazily detach anything still mounted at or below dir in our mount namespace (normally nothing:
 * the sandbox's mounts live and die in its own namespace). Returns how many remain. */
static int detach_leftover_mounts(const char *dir)
{
	_cleanup_free_ char *buf = NULL;
	if (fs_read_file("/proc/self/mountinfo", 1 << 24, &buf, NULL) < 0)
		return 0;
	size_t dlen = strlen(dir);
	int left = 0;
	/* Deepest first: mountinfo lists parents before children, so walk backwards. */
	char *lines[256];
	int n = 0;
	for (char *line = strtok(buf, "\n"); line && n < (int)ARRAY_SIZE(lines);
	     line = strtok(NULL, "\n"))
		lines[n++] = line;
	for (int i = n - 1; i >= 0; i--) {
		char mp[PATH_MAX];
		/* id parent major:minor root mountpoint ... */
		if (sscanf(lines[i], "%*s %*s %*s %*s %4095s", mp) != 1)
			continue;
		if (strncmp(mp, dir, dlen) != 0 || (mp[dlen] != '/' && mp[dlen] != '\0'))
			continue;
		if (umount2(mp, MNT_DETACH) < 0)
			left++;
	}
	return left;
}

static int remove_files(const struct runtime_config *cfg, const char *id, struct error *err)
{
	/* DISK_MOUNT is unmounted by then (destroy detaches every mount below the dir first). */
	static const char *const names[] = {"rootfs", "upper",	   "work",     "run",	   "lower",
					    "pid",    "pid.tmp",   DISK_MOUNT, DISK_IMAGE, EXECD_SOCKET};
	char path[PATH_MAX], buf[16];
	int ret = 0;
	/* The id range goes back to the pool once nothing of the sandbox can run any more. */
	if (sb_path(path, sizeof(path), cfg, id, "userns") == 0 &&
	    fs_read_small(path, buf, sizeof(buf)) == 0) {
		char dir[PATH_MAX];
		sb_path(dir, sizeof(dir), cfg, id, NULL);
		userns_release(userns_lock_dir(cfg), (unsigned)strtoul(buf, NULL, 10), dir);
		unlink(path);
	}
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (sb_path(path, sizeof(path), cfg, id, names[i]) < 0)
			return error_set(err, ENAMETOOLONG, "state dir path too long");
		int r = fs_remove_tree(path);
		if (r < 0 && ret == 0)
			ret = error_set_errno(err, -r, "remove '%s'", path);
	}
	return ret;
}

/* A pidfd on the sandbox's PID 1 from its pid file, or -1 (no file, or PID 1 already gone). */
static int open_pid1(const struct runtime_config *cfg, const char *id)
{
	char path[PATH_MAX], buf[64];
	if (sb_path(path, sizeof(path), cfg, id, "pid") < 0 ||
	    fs_read_small(path, buf, sizeof(buf)) < 0)
		return -1;
	int pid = 0;
	uint64_t start = 0, now = 0;
	if (sscanf(buf, "%d %" SCNu64, &pid, &start) != 2 || pid <= 1)
		return -1;
	int fd = pidfd_open(pid, 0);
	/* Checked after opening: the pidfd pins the process, so a match cannot go stale. */
	if (fd >= 0 && (runtime_pid_starttime(pid, &now) < 0 || now != start)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int native_destroy(const struct runtime_config *cfg, const char *id, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	const struct cgroup_ops *cg = cgroup_ops_cached();
	const char *parent = cgroup_parent(cfg);
	TRACE(20);
	if (cg) {
		/* PID 1 exits last (the kernel kills and reaps the rest of its pid namespace
		 * first), so its pidfd turning readable is the moment to look again, instead of
		 * polling. */
		_cleanup_close_ int pfd = open_pid1(cfg, id);
		bool empty = false;
		if (pfd >= 0 && cg->kill(parent, id, &empty, NULL) == 0 && !empty) {
			struct pollfd pl = {.fd = pfd, .events = POLLIN};
			RETRY_EINTR(poll(&pl, 1, DESTROY_TIMEOUT_MS));
		}
		if ((r = cgroup_wait_empty(cg, parent, id, DESTROY_TIMEOUT_MS, err)) < 0)
			return error_prefix(err, "destroy sandbox %s", id);
		TRACE(21);
		/* An emptied cgroup can stay busy for a moment while the kernel finishes exits. */
		int64_t deadline = time_mono_ms() + DESTROY_TIMEOUT_MS;
		while ((r = cg->remove(parent, id, err)) == -EBUSY && time_mono_ms() < deadline)
			usleep(1000);
		if (r < 0)
			return error_prefix(err, "destroy sandbox %s", id);
	}
	char dir[PATH_MAX];
	if (sb_path(dir, sizeof(dir), cfg, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	TRACE(22);
	if (cg) /* every process of the sandbox is gone: its layer is never read again */
		disk_discard(dir);
	if (detach_leftover_mounts(dir) > 0)
		return error_set(err, EBUSY, "mounts below '%s' could not be detached", dir);
	TRACE(23);
	r = remove_files(cfg, id, err);
	TRACE(24);
	return r;
}

/* What pause, resume and kill need: a valid cfg and id, and the cgroup hierarchy in use. */
static int sandbox_cgroup(const struct runtime_config *cfg, const char *id,
			  const struct cgroup_ops **ret_cg, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	*ret_cg = cgroup_ops_cached();
	if (!*ret_cg)
		return error_set(err, ENOTSUP, "no usable cgroup hierarchy");
	return 0;
}

static int native_pause(const struct runtime_config *cfg, const char *id, struct error *err)
{
	const struct cgroup_ops *cg;
	int r = sandbox_cgroup(cfg, id, &cg, err);
	return r < 0 ? r : cg->freeze(cgroup_parent(cfg), id, true, err);
}

static int native_resume(const struct runtime_config *cfg, const char *id, struct error *err)
{
	const struct cgroup_ops *cg;
	int r = sandbox_cgroup(cfg, id, &cg, err);
	return r < 0 ? r : cg->freeze(cgroup_parent(cfg), id, false, err);
}

static int native_kill(const struct runtime_config *cfg, const char *id, struct error *err)
{
	const struct cgroup_ops *cg;
	bool empty;
	int r = sandbox_cgroup(cfg, id, &cg, err);
	return r < 0 ? r : cg->kill(cgroup_parent(cfg), id, &empty, err);
}

static int native_probe(const struct runtime_config *cfg, const char *id, pid_t pid,
			uint64_t starttime, struct sandbox_probe *ret, struct error *err)
{
	int r;
	memset(ret, 0, sizeof(*ret));
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	char state = 0;
	uint64_t start = 0;
	ret->alive = pid > 0 && pid_stat(pid, &state, &start) == 0 && start == starttime &&
		     state != 'Z' && state != 'X';
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

static int native_oom_watch(const struct runtime_config *cfg, const char *id, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	const struct cgroup_ops *cg = cgroup_ops_cached();
	if (!cg || !cg->oom_watch)
		return -ENOTSUP; /* v2: memory.oom.group */
	return cg->oom_watch(cgroup_parent(cfg), id, err);
}

static int native_watch(const struct runtime_config *cfg, const char *id, pid_t pid,
			uint64_t starttime, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	if (pid <= 1)
		return -ESRCH;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return errno == ESRCH ? -ESRCH : -ENOSYS;
	/* Checked once the pidfd pins the process: a match cannot go stale. */
	char state = 0;
	uint64_t start = 0;
	if (pid_stat(pid, &state, &start) < 0 || start != starttime || state == 'Z' ||
	    state == 'X') {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

#ifndef PIDFD_GET_NET_NAMESPACE
#define PIDFD_GET_NET_NAMESPACE _IO(0xFF, 4) /* Linux 6.11 */
#endif

static int native_netns(const struct runtime_config *cfg, const char *id, pid_t pid,
			uint64_t starttime, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	if (pid <= 1)
		return error_set(err, ESRCH, "sandbox %s has no PID 1", id);
	_cleanup_close_ int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0)
		return error_set_errno(err, errno, "pidfd of sandbox %s's PID 1", id);
	/* Checked once the pidfd pins the process: a match cannot go stale. */
	char state = 0;
	uint64_t start = 0;
	if (pid_stat(pid, &state, &start) < 0 || start != starttime || state == 'Z' || state == 'X')
		return error_set(err, ESRCH, "sandbox %s's PID 1 has ended", id);
	int fd = ioctl(pfd, PIDFD_GET_NET_NAMESPACE, 0);
	if (fd >= 0)
		return fd;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return error_set_errno(err, errno, "open '%s'", path);
	/* Still the same process (a pid reused between the check and the open would not be). */
	if (pid_stat(pid, &state, &start) < 0 || start != starttime) {
		close(fd);
		return error_set(err, ESRCH, "sandbox %s's PID 1 has ended", id);
	}
	return fd;
}

static int native_endpoint(const struct runtime_config *cfg, const char *id, char *ret_path,
			   size_t len, struct error *err)
{
	int r;
	if ((r = check_config(cfg, err)) < 0 || (r = check_id(id, err)) < 0)
		return r;
	if (sb_path(ret_path, len, cfg, id, EXECD_SOCKET) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
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

static int native_read_exit(const struct runtime_config *cfg, const char *id,
			    struct sandbox_exit *ret, struct error *err)
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
	_cleanup_close_ int fd = open_report(dirfd, "run/exit.json");
	if (fd == -ENOENT)
		fd = open_report(dirfd, DISK_MOUNT "/run/exit.json");
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
		  (strcmp(reason, "EntrypointExited") == 0 || strcmp(reason, "ExecdExited") == 0);
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

static int native_prepare(const struct runtime_config *cfg, struct error *err)
{
	int r = check_config(cfg, err);
	if (r < 0)
		return r;
	if (!cgroup_ops_cached())
		return error_set(err, ENOTSUP, "no usable cgroup hierarchy under '%s'",
				 cgroup_root());
	if (!tuned) {
		tuned = true;
		(void)cgroup_favor_dynmods();
	}
	/* Sandbox ids are keys: no sandbox may list them, whatever the state dir's own mode. */
	char dir[PATH_MAX];
	if (sb_path(dir, sizeof(dir), cfg, "", NULL) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	if ((r = fs_mkdir_p(dir, 0700)) < 0 || chmod(dir, 0700) < 0)
		return error_set_errno(err, r < 0 ? -r : errno, "make '%s' private", dir);
	/* --image-dir images are idmapped: refuse to start where that cannot work, rather than at
	 * the first create. */
	if (!cfg->no_userns && (r = userns_probe_idmap(cfg->state_dir, err)) < 0)
		return error_prefix(err,
				    "user namespaces with idmapped mounts (Linux 5.12+, a file system that supports them) are needed to keep sandbox root apart from host root; pass --no-userns to run without them (sandbox root is then host root)");
	struct sock_fprog prog;
	return confine_seccomp_build(&prog, err);
}

static int native_disk_prepare(const struct runtime_config *cfg, uint64_t disk_limit_bytes,
			       struct error *err)
{
	int r = check_config(cfg, err);
	return r < 0 ? r : disk_template_prepare(cfg->state_dir, disk_limit_bytes, err);
}

const struct runtime_ops runtime_native = {
    .name = "native",
    .create = native_create,
    .destroy = native_destroy,
    .pause = native_pause,
    .resume = native_resume,
    .kill = native_kill,
    .probe = native_probe,
    .prepare = native_prepare,
    .oom_watch = native_oom_watch,
    .watch = native_watch,
    .endpoint = native_endpoint,
    .read_exit = native_read_exit,
    .disk_prepare = native_disk_prepare,
    .netns = native_netns,
};
