/*
 * The native runtime: namespaces, cgroups and an overlay root on this host. This file is the
 * orchestration of create and destroy; the children's side is native_pid1.c, the quick operations
 * on a created sandbox native_live.c (native.h lists the files).
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
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "runtime/confine.h"
#include "runtime/disk.h"
#include "runtime/native.h"
#include "runtime/runtime.h"
#include "runtime/sysview.h"
#include "runtime/userns.h"
#include "runtime/volume.h"
#include "shared/fsutil.h"
#include "shared/macro.h"
#include "shared/timeutil.h"
#include "shared/unixsock.h"

#define CREATE_TIMEOUT_MS 30000
#define DESTROY_TIMEOUT_MS 10000
#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DEFAULT_HOME "HOME=/root"
#define OVERLAY_OPTS_MAX 4000 /* mount(2) copies one page of options; room for ",volatile" */

#ifdef RUNTIME_TRACE
uint64_t *runtime_trace;
#endif

/* ---- small helpers ------------------------------------------------------------------------ */

static bool tuned; /* cgroup_favor_dynmods() done, here or in a parent that called prepare() */

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
					   "/proc/self/fd/" STR(EXECD_STATE_FD) "/" EXECD_EXIT_FILE};
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
	for (size_t i = 0; i < c->n_vol; i++)
		if (c->vol_tree[i] >= 0)
			close(c->vol_tree[i]);
	c->n_vol = 0;
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

/* The handle, also in <dir>/pid: destroy() and records without a handle find PID 1 there. */
static int write_pid_file(const struct runtime_config *cfg, const char *id,
			  const struct runtime_handle *h, struct error *err)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], buf[RUNTIME_HANDLE_MAX + 1];
	if (sb_path(path, sizeof(path), cfg, id, PID_FILE) < 0)
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int n = snprintf(buf, sizeof(buf), "%s\n", h->s);
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

/* Each volume's source, resolved and cloned here on the host's side (volume.h), idmapped through
 * the sandbox's user namespace; PID 1 only moves the clones into place. */
static int open_volumes(struct child_ctx *c, struct error *err)
{
	const struct sandbox_spec *spec = c->spec;
	if (spec->n_volumes > RUNTIME_VOLUMES_MAX)
		return error_set(err, E2BIG, "%zu volumes: at most %d", spec->n_volumes,
				 RUNTIME_VOLUMES_MAX);
	for (size_t i = 0; i < spec->n_volumes; i++) {
		const struct sandbox_volume *v = &spec->volumes[i];
		bool dir = false;
		_cleanup_close_ int src = volume_source_open(c->cfg, spec->id, v, &dir, err);
		if (src < 0)
			return src;
		int t = volume_tree(src, v, c->userns_fd, err);
		if (t < 0)
			return t;
		if ((t = fd_high(t)) < 0)
			return error_set_errno(err, -t, "volume '%s'", v->name);
		c->vol_tree[c->n_vol] = t;
		c->vol_dir[c->n_vol] = dir;
		/* Insertion by mountPath: "/a" sorts before "/a/b". */
		size_t k = c->n_vol++;
		while (k > 0 &&
		       strcmp(spec->volumes[c->vol_order[k - 1]].mount_path, v->mount_path) > 0) {
			c->vol_order[k] = c->vol_order[k - 1];
			k--;
		}
		c->vol_order[k] = i;
	}
	return 0;
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


/*
 * PID 1 ended as soon as it started: its exit report (read before the rollback removes it) says
 * why. -ESRCH: the entrypoint exited or could not run (the client's to fix); -EAGAIN: the host ran
 * out of processes or memory starting it (ResourceExhausted: transient, never the entrypoint's
 * fault); -ECHILD: corral-execd died without a report.
 */
static int pid1_died_early(const struct runtime_config *cfg, const char *id, struct error *err)
{
	struct sandbox_exit ex;
	struct error xerr = {0};
	if (native_read_exit(cfg, id, &ex, &xerr) < 0)
		return error_set(err, ECHILD,
				 "sandbox PID 1 (corral-execd) died right after it started, without an exit report");
	if (strcmp(ex.reason, "ResourceExhausted") == 0)
		return error_set(err, EAGAIN, "%s", ex.message);
	if (strcmp(ex.reason, "EntrypointExited") == 0)
		return error_set(err, ESRCH, "%s (exit code %d)", ex.message, ex.exit_code);
	return error_set(err, ECHILD, "sandbox PID 1 (corral-execd) died right after it started: %s",
			 ex.message);
}

static int native_create(const struct runtime_config *cfg, const struct sandbox_spec *spec,
			 struct runtime_handle *ret_handle, struct error *err)
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
	if ((r = open_volumes(&c, err)) < 0)
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
	    clone(native_intermediate_main, stacks + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
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
		r = pid1_died_early(cfg, spec->id, err);
	if (r == 0) {
		runtime_native_handle(pid, start, ret_handle);
		r = write_pid_file(cfg, spec->id, ret_handle, err);
	}
	TRACE(17);
	if (r < 0)
		goto fail_cgroup;
	child_ctx_clear(&c);
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
	static const char *const names[] = {"rootfs",	  "upper",    "work",	   "run",
					    "lower",	  PID_FILE,   PID_FILE ".tmp", DISK_MOUNT,
					    DISK_IMAGE, EXECD_SOCKET};
	char path[PATH_MAX], buf[16];
	int ret = 0;
	/* Its named volumes lose a user (and their host mount with the last one). */
	volume_release(cfg, id);
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
	pid_t pid;
	uint64_t start = 0, now = 0;
	if (native_pid1(cfg, id, NULL, &pid, &start) < 0)
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
    .watch = native_watch,
    .watch_check = native_watch_check,
    .unwatch = native_unwatch,
    .endpoint = native_endpoint,
    .read_exit = native_read_exit,
    .disk_usage = native_disk_usage,
    .disk_prepare = native_disk_prepare,
    .volume_list = volume_list,
    .volume_delete = volume_delete,
    .netns = native_netns,
};
