/*
 * The two children of a native create (see native.c for the whole sequence): the intermediate,
 * which joins the sandbox's cgroup(s), unshares the namespaces and clones PID 1; and PID 1's setup
 * before it execs corral-execd: the overlay root, /proc, /sys, /dev, the masks of the host image,
 * pivot_root, the loopback interface, execd's fds, then confine.c's caps, rlimits and seccomp.
 * Both run on borrowed memory (CLONE_VM | CLONE_VFORK): no allocation, every failure reported on
 * the sync pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/confine.h"
#include "runtime/disk.h"
#include "runtime/native.h"
#include "runtime/userns.h"
#include "runtime/volume.h"
#include "shared/fsutil.h"
#include "shared/macro.h"

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
	/* The volumes last, over every mount and mask of the sandbox's own (a mask of the host
	 * image must not hide one, nor /etc files land in one); each mountPath is resolved in the
	 * sandbox's root (volume_attach), as everything is from here on. */
	int earlier[RUNTIME_VOLUMES_MAX];
	for (size_t i = 0; i < c->n_vol; i++) {
		size_t k = c->vol_order[i];
		if ((r = volume_attach("/", c->vol_tree[k], &c->spec->volumes[k], c->vol_dir[k],
				       c->base, earlier, i, err)) < 0)
			return r;
		earlier[i] = c->vol_tree[k];
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
int native_intermediate_main(void *arg)
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

