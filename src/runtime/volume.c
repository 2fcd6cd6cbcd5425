/* Volumes of sandboxes: host directories under the allowlist and named volumes; see volume.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/disk.h"
#include "runtime/volume.h"
#include "shared/fsutil.h"
#include "shared/macro.h"

#define VOLUME_IMAGE "volume.img"
#define VOLUME_MNT "mnt"
#define VOLUME_USERS "users"
#define VOLUME_DELETE_MARK "delete-on-end"
#define VOLUME_LOCK ".lock" /* no volume name starts with a dot: "lock" is a valid claim */
#define VOLUME_NEW_PREFIX ".new-"
/* Resolving beneath a trusted directory: no symlink, no magic link, no '..' out of it. */
#define BENEATH (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

bool volume_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > VOLUME_NAME_MAX || name[0] == '-' || name[n - 1] == '-')
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static int openat2_fd(int dirfd, const char *path, uint64_t flags, uint64_t resolve)
{
	struct open_how how = {.flags = flags | O_CLOEXEC, .resolve = resolve};
	int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* A path of components separated by single '/', none of them "." or "..", no trailing '/'. */
static bool path_clean(const char *p)
{
	if (!*p)
		return false;
	for (const char *c = p;;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!e)
			return true;
		c = e + 1;
	}
}

/* Open path (relative, clean) beneath dirfd, following nothing; the error names what, as shown. */
static int open_beneath(int dirfd, const char *path, const struct sandbox_volume *v,
			const char *what, const char *shown, struct error *err)
{
	int fd = openat2_fd(dirfd, path, O_PATH, BENEATH);
	if (fd >= 0)
		return fd;
	if (fd == -ELOOP || fd == -EXDEV)
		return error_set(err, strcmp(what, "subPath") == 0 ? RUNTIME_EVOL_SUBPATH
								  : RUNTIME_EVOL_DENIED,
				 "volume '%s': %s '%s' goes through a symlink or out of its directory: refused (symlinks are never followed there)",
				 v->name, what, shown);
	if (fd == -ENAMETOOLONG)
		return error_set(err, strcmp(what, "subPath") == 0 ? RUNTIME_EVOL_SUBPATH
								  : RUNTIME_EVOL_DENIED,
				 "volume '%s': %s '%.300s' has a name longer than %d bytes", v->name,
				 what, shown, NAME_MAX);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return error_set(err, RUNTIME_EVOL_NOTFOUND, "volume '%s': %s '%s' does not exist",
				 v->name, what, shown);
	if (fd == -ENOSYS)
		return error_set(err, ENOSYS, "volumes need openat2 (Linux 5.6 or later)");
	return error_set_errno(err, -fd, "volume '%s': open %s '%s'", v->name, what, shown);
}

/* The source's kind: a directory or a regular file, nothing else. */
static int source_kind(int fd, const struct sandbox_volume *v, bool *ret_dir, struct error *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return error_set_errno(err, errno, "volume '%s': stat its source", v->name);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return error_set(err, RUNTIME_EVOL_DENIED,
				 "volume '%s': the source is neither a directory nor a regular file",
				 v->name);
	*ret_dir = S_ISDIR(st.st_mode);
	return 0;
}

static int host_open(const struct runtime_config *cfg, const struct sandbox_volume *v,
		     struct error *err)
{
	const char *p = v->source;
	if (!p || p[0] != '/' || (p[1] && !path_clean(p + 1)))
		return error_set(err, RUNTIME_EVOL_DENIED,
				 "volume '%s': host path '%s' must be absolute, without '.', '..' or empty components",
				 v->name, p ? p : "");
	const char *allowed = NULL;
	size_t alen = 0;
	for (char *const *a = cfg->host_paths; a && *a; a++) {
		size_t n = strcmp(*a, "/") == 0 ? 0 : strlen(*a);
		if (strncmp(p, *a, n) == 0 && (p[n] == '\0' || p[n] == '/') && (!allowed || n > alen)) {
			allowed = *a;
			alen = n;
		}
	}
	if (!allowed)
		return error_set(err, RUNTIME_EVOL_DENIED,
				 "volume '%s': host path '%s' is not under a directory corrald allows (--allow-host-path)",
				 v->name, p);
	_cleanup_close_ int top = open(allowed, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (top < 0)
		return error_set_errno(err, errno, "volume '%s': open the allowed directory '%s'",
				       v->name, allowed);
	const char *rest = p + alen;
	while (*rest == '/')
		rest++;
	int fd = rest[0] ? open_beneath(top, rest, v, "host path", p, err) : fcntl(top, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return fd == -1 ? error_set_errno(err, errno, "dup") : fd;
	if (v->sub_path && v->sub_path[0]) {
		_cleanup_close_ int base = fd;
		fd = open_beneath(base, v->sub_path, v, "subPath", v->sub_path, err);
	}
	return fd;
}

/* ---- named volumes ----------------------------------------------------------------------- */

/* <state>/volumes, made if missing, and its lock taken (exclusive) unless ret_lock is NULL. */
static int volumes_open(const struct runtime_config *cfg, bool make, int *ret_lock,
			struct error *err)
{
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/" VOLUME_DIR, cfg->state_dir) >= sizeof(path))
		return error_set(err, ENAMETOOLONG, "state dir path too long");
	if (make && mkdir(path, 0700) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", path);
	_cleanup_close_ int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ENOENT : error_set_errno(err, errno, "open '%s'", path);
	if (!ret_lock)
		return TAKE_FD(dfd);
	int lock = openat(dfd, VOLUME_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0)
		return error_set_errno(err, errno, "open '%s/" VOLUME_LOCK "'", path);
	while (flock(lock, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(lock);
			return error_set_errno(err, e, "lock '%s/" VOLUME_LOCK "'", path);
		}
	}
	*ret_lock = lock;
	return TAKE_FD(dfd);
}

static void mnt_path(const struct runtime_config *cfg, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/" VOLUME_DIR "/%s/" VOLUME_MNT, cfg->state_dir, name);
}

/* Whether <name>/mnt has a file system of its own mounted (the volume's). */
static bool is_mounted(int vfd)
{
	struct stat a, b;
	return fstatat(vfd, VOLUME_MNT, &a, AT_SYMLINK_NOFOLLOW) == 0 && fstat(vfd, &b) == 0 &&
	       a.st_dev != b.st_dev;
}

/*
 * A loop device already backing img, if some mount still holds one (a sandbox torn down a moment
 * ago whose mount namespace is not gone yet): its fd, or -ENOENT. Mounting that same device
 * shares its superblock; a second loop device on the image would be a second, corrupting one.
 */
static int loop_find(int img, char *dev, size_t len)
{
	struct stat st;
	if (fstat(img, &st) < 0)
		return -errno;
	DIR *d = opendir("/sys/block");
	if (!d)
		return -errno;
	struct dirent *e;
	int ret = -ENOENT;
	while (ret < 0 && (e = readdir(d))) {
		if (strncmp(e->d_name, "loop", 4) != 0)
			continue;
		snprintf(dev, len, "/dev/%s", e->d_name);
		int fd = open(dev, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct loop_info64 info;
		if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_inode == st.st_ino &&
		    info.lo_device == st.st_dev)
			ret = fd;
		else
			close(fd);
	}
	closedir(d);
	return ret;
}

/* Mount the volume's file system on <name>/mnt unless it is mounted there already. */
static int volume_mount(const struct runtime_config *cfg, int vfd, const char *name,
			struct error *err)
{
	if (is_mounted(vfd))
		return 0;
	char mnt[PATH_MAX], dev[64];
	mnt_path(cfg, name, mnt, sizeof(mnt));
	_cleanup_close_ int img = openat(vfd, VOLUME_IMAGE, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (img < 0)
		return error_set_errno(err, errno, "open the image of volume '%s'", name);
	_cleanup_close_ int loop = loop_find(img, dev, sizeof(dev));
	if (loop < 0 && (loop = disk_loop_attach(img, dev, sizeof(dev), err)) < 0)
		return loop;
	/* On the host nothing of a volume may run or open a device: its files are the sandboxes'. */
	if (mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return error_set_errno(err, errno, "mount volume '%s' ('%s') on '%s'", name, dev,
				       mnt);
	return 0;
}

/* Make volume name of size bytes: formatted in <volumes>/.new-<name>, renamed into place once
 * complete (a crash leaves only a .new- directory, removed by the next attempt). */
static int volume_make(const struct runtime_config *cfg, int dfd, const char *name, uint64_t size,
		       struct error *err)
{
	char tmp[NAME_MAX + 1];
	snprintf(tmp, sizeof(tmp), VOLUME_NEW_PREFIX "%s", name);
	(void)fs_remove_tree_at(dfd, tmp);
	if (mkdirat(dfd, tmp, 0700) < 0)
		return error_set_errno(err, errno, "make volume '%s'", name);
	_cleanup_close_ int tfd = openat(dfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tfd < 0)
		return error_set_errno(err, errno, "make volume '%s'", name);
	_cleanup_close_ int img =
	    openat(tfd, VOLUME_IMAGE, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (img < 0 || ftruncate(img, (off_t)size) < 0)
		return error_set_errno(err, errno, "make the image of volume '%s'", name);
	int r = disk_mkfs(img, NULL, true, err);
	if (r < 0)
		return error_prefix(err, "volume '%s'", name);
	if (fsync(img) < 0 || mkdirat(tfd, VOLUME_MNT, 0755) < 0 ||
	    mkdirat(tfd, VOLUME_USERS, 0700) < 0 || fsync(tfd) < 0)
		return error_set_errno(err, errno, "make volume '%s'", name);
	if (renameat(dfd, tmp, dfd, name) < 0 || fsync(dfd) < 0)
		return error_set_errno(err, errno, "make volume '%s'", name);
	/* Its root as an empty directory, like a fresh Docker volume: no lost+found. */
	_cleanup_close_ int vfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return error_set_errno(err, errno, "open volume '%s'", name);
	if ((r = volume_mount(cfg, vfd, name, err)) < 0)
		return r;
	_cleanup_close_ int root = openat(vfd, VOLUME_MNT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root >= 0)
		(void)unlinkat(root, "lost+found", AT_REMOVEDIR);
	return 0;
}

/*
 * Make each missing directory of path beneath dirfd, one component at a time, each made in and
 * opened from the one before with nothing followed: the volume's content is the sandboxes', and a
 * symlink one of them planted (x -> /etc) must not take a host-side mkdir anywhere else.
 */
static int mkdir_beneath(int dirfd, const char *path, const struct sandbox_volume *v,
			 struct error *err)
{
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof(buf))
		return error_set(err, ENAMETOOLONG, "volume '%s': subPath too long", v->name);
	snprintf(buf, sizeof(buf), "%s", path);
	int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return error_set_errno(err, errno, "dup");
	for (char *s = buf; s;) {
		char *e = strchr(s, '/');
		if (e)
			*e = '\0';
		/* A single name: mkdirat never follows it (a symlink there is EEXIST). */
		if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST) {
			int r = errno == ENAMETOOLONG
				    ? error_set(err, RUNTIME_EVOL_SUBPATH,
						"volume '%s': subPath '%.300s' has a name longer than %d bytes",
						v->name, path, NAME_MAX)
				    : error_set_errno(err, errno, "volume '%s': make subPath '%s'",
						      v->name, path);
			close(cur);
			return r;
		}
		int next = open_beneath(cur, s, v, "subPath", path, err);
		close(cur);
		if (next < 0)
			return next;
		cur = next;
		s = e ? e + 1 : NULL;
	}
	return cur;
}

/* A sandbox whose directory is gone uses nothing. */
static bool sandbox_exists(const struct runtime_config *cfg, const char *id)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/sandboxes/%s", cfg->state_dir, id);
	return lstat(path, &st) == 0;
}

/* Live users of the volume open at vfd; entries of sandboxes that are gone are dropped when
 * prune (under the lock). */
static unsigned users_live(const struct runtime_config *cfg, int vfd, bool prune)
{
	int ufd = openat(vfd, VOLUME_USERS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (ufd < 0)
		return 0;
	DIR *d = fdopendir(ufd);
	if (!d) {
		close(ufd);
		return 0;
	}
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (sandbox_exists(cfg, e->d_name))
			n++;
		else if (prune)
			(void)unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
	return n;
}

static int named_open(const struct runtime_config *cfg, const char *id,
		      const struct sandbox_volume *v, struct error *err)
{
	const char *name = v->source;
	if (!volume_name_valid(name))
		return error_set(err, RUNTIME_EVOL_DENIED, "volume '%s': invalid claim name '%s'",
				 v->name, name ? name : "");
	uint64_t size = v->size_bytes ? v->size_bytes
		      : cfg->volume_size ? cfg->volume_size
					 : VOLUME_SIZE_DEFAULT;
	if (size < DISK_MIN_BYTES)
		return error_set(err, RUNTIME_EVOL_DENIED,
				 "volume '%s': size below the minimum of %llu MiB", v->name,
				 DISK_MIN_BYTES >> 20);
	_cleanup_close_ int lock = -1;
	_cleanup_close_ int dfd = volumes_open(cfg, true, &lock, err);
	if (dfd < 0)
		return dfd;
	struct stat st;
	int r;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return error_set_errno(err, errno, "stat volume '%s'", name);
		if (!v->create)
			return error_set(err, RUNTIME_EVOL_NOCLAIM,
					 "volume '%s': named volume '%s' does not exist (createIfNotExists is false)",
					 v->name, name);
		if ((r = volume_make(cfg, dfd, name, size, err)) < 0)
			return r;
	}
	_cleanup_close_ int vfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return error_set_errno(err, errno, "open volume '%s'", name);
	/* The user first: a failure below leaves an entry that volume_release() takes back. */
	_cleanup_close_ int ufd =
	    openat(vfd, VOLUME_USERS "/", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int uf = ufd < 0 ? -1
			 : openat(ufd, id, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (uf < 0)
		return error_set_errno(err, errno, "record sandbox %s as a user of volume '%s'", id,
				       name);
	close(uf);
	if (v->delete_on_end) {
		int m = openat(vfd, VOLUME_DELETE_MARK, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (m < 0)
			return error_set_errno(err, errno, "mark volume '%s'", name);
		close(m);
	}
	if ((r = volume_mount(cfg, vfd, name, err)) < 0)
		return r;
	_cleanup_close_ int root = openat(vfd, VOLUME_MNT, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return error_set_errno(err, errno, "open volume '%s'", name);
	if (!v->sub_path || !v->sub_path[0])
		return TAKE_FD(root);
	/* Its content is the sandboxes': what they planted there is not followed either. */
	return mkdir_beneath(root, v->sub_path, v, err);
}

int volume_source_open(const struct runtime_config *cfg, const char *id,
		       const struct sandbox_volume *v, bool *ret_dir, struct error *err)
{
	if (v->sub_path && v->sub_path[0] && !path_clean(v->sub_path))
		return error_set(err, RUNTIME_EVOL_DENIED,
				 "volume '%s': subPath '%s' must be relative, without '.', '..' or empty components",
				 v->name, v->sub_path);
	int fd = v->kind == VOLUME_HOST	 ? host_open(cfg, v, err)
		 : v->kind == VOLUME_NAMED ? named_open(cfg, id, v, err)
					   : error_set(err, EINVAL, "volume '%s': unknown kind",
						       v->name);
	if (fd < 0)
		return fd;
	int r = source_kind(fd, v, ret_dir, err);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int volume_tree(int src, const struct sandbox_volume *v, int userns_fd, struct error *err)
{
	int t = (int)syscall(SYS_open_tree, src, "",
			     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (t < 0)
		return error_set_errno(err, errno, "volume '%s': clone its source", v->name);
	struct mount_attr attr = {
	    .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (v->read_only ? MOUNT_ATTR_RDONLY : 0),
	    .attr_clr = MOUNT_ATTR_NOEXEC, /* the host's mount of a named volume is noexec */
	    /*
	     * A clone joins its source's peer group when the source is shared (systemd makes
	     * every mount shared): PID 1's later mounts on it (a volume inside this one) would
	     * then propagate to the host and into every other sandbox holding a clone of the
	     * same source, and the host's mounts below it into this sandbox. Private: neither.
	     */
	    .propagation = MS_PRIVATE,
	};
	if (userns_fd >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns_fd;
	}
	if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
		int e = errno;
		close(t);
		return error_set_errno(err, e,
				       "volume '%s': set up its mount (idmapped%s; the source's file system must support idmapped mounts)",
				       v->name, v->read_only ? ", read-only" : "");
	}
	return t;
}

/* Path inside the sandbox of the host path at fd (below root_path), or NULL when not below it. */
static const char *sandbox_path_of(int fd, const char *root_path, char *buf, size_t len)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, len - 1);
	if (n < 0)
		return NULL;
	buf[n] = '\0';
	if (strcmp(root_path, "/") == 0)
		return buf[0] == '/' ? buf : NULL;
	size_t rl = strlen(root_path);
	if (strncmp(buf, root_path, rl) != 0 || (buf[rl] != '/' && buf[rl] != '\0'))
		return NULL;
	return buf[rl] ? buf + rl : "/";
}

static bool under(const char *p, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

#define NESTED_WHY \
	"volume '%s': mountPath '%s' lies in another volume of the sandbox: refused (a sandbox sharing that volume could remove the mount point and put its own files in its place)"
#define XDEV_WHY \
	"it needs a symlink that leads into or lies in another mount or volume (not followed)"

/*
 * path resolved in the sandbox's root: without symlinks when it can be; through them (the image's)
 * only while it stays on one mount. A volume mounted before this one is content other sandboxes
 * write (a shared named volume, a host directory): a symlink one of them planted there
 * (t -> /usr/local/bin) must not aim this mount anywhere in the sandbox, and a path needing a
 * symlink never enters a volume or another mount (/tmp, /proc) at all.
 */
static int in_root_open(int root, const char *path, uint64_t flags)
{
	const uint64_t in_root = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	int fd = openat2_fd(root, path, flags, in_root | RESOLVE_NO_SYMLINKS);
	return fd == -ELOOP ? openat2_fd(root, path, flags, in_root | RESOLVE_NO_XDEV) : fd;
}

#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif

/* The mount id of what fd refers to, or 0. */
static uint64_t mount_id(int fd)
{
	struct statx stx;
	if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0 ||
	    !(stx.stx_mask & STATX_MNT_ID))
		return 0;
	return stx.stx_mnt_id;
}

/*
 * Whether fd lies on one of the volume mounts earlier. A volume's content is other sandboxes' to
 * change: one of them may rmdir a mount point made there (the kernel then detaches our mount,
 * which lives in another namespace) and put its own files in its place, so nothing is made or
 * mounted on a volume.
 */
static bool on_volume(int fd, const int *earlier, size_t n_earlier)
{
	uint64_t id = mount_id(fd);
	for (size_t i = 0; id && i < n_earlier; i++)
		if (mount_id(earlier[i]) == id)
			return true;
	return false;
}

int volume_attach(const char *root_path, int tree, const struct sandbox_volume *v, bool is_dir,
		  uid_t owner, const int *earlier, size_t n_earlier, struct error *err)
{
	const char *mp = v->mount_path;
	char buf[PATH_MAX], where[PATH_MAX];
	if (!mp || mp[0] != '/' || !mp[1] || !path_clean(mp + 1) || strlen(mp) >= sizeof(buf))
		return error_set(err, RUNTIME_EVOL_MOUNTPATH,
				 "volume '%s': mountPath '%s' must be an absolute path other than '/', without '.' or '..'",
				 v->name, mp ? mp : "");
	_cleanup_close_ int root = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return error_set_errno(err, errno, "open '%s'", root_path);
	/* Each missing component, made where the path resolves inside the sandbox's root. */
	snprintf(buf, sizeof(buf), "%s", mp);
	for (char *s = buf + 1;;) {
		char *e = strchr(s, '/');
		if (e)
			*e = '\0';
		bool last = !e;
		_cleanup_close_ int fd = in_root_open(root, buf, O_PATH);
		if (fd == -ENOENT) {
			char *slash = strrchr(buf, '/');
			*slash = '\0';
			_cleanup_close_ int parent =
			    in_root_open(root, buf[0] ? buf : "/", O_PATH | O_DIRECTORY);
			*slash = '/';
			if (parent >= 0 && on_volume(parent, earlier, n_earlier))
				return error_set(err, RUNTIME_EVOL_MOUNTPATH, NESTED_WHY, v->name, mp);
			int made = -1;
			if (parent >= 0 && (!last || is_dir))
				made = mkdirat(parent, slash + 1, 0755);
			else if (parent >= 0)
				made = openat(parent, slash + 1,
					      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
					      0644);
			/* A dangling symlink of the image there (EEXIST), a file on the way, a
			 * read-only volume above it: the request's to change. */
			if (parent < 0 || made < 0) {
				int en = parent < 0 ? -parent : errno;
				return error_set(err, RUNTIME_EVOL_MOUNTPATH,
						 "volume '%s': cannot make mountPath '%s' in the sandbox%s: %s",
						 v->name, buf,
						 en == EEXIST ? " (a dangling symlink of the image?)" : "",
						 strerror(en));
			}
			if (last && !is_dir)
				close(made);
			if (owner && fchownat(parent, slash + 1, owner, owner,
					      AT_SYMLINK_NOFOLLOW) < 0)
				return error_set_errno(err, errno, "volume '%s': chown '%s'",
						       v->name, buf);
		} else if (fd < 0) {
			return error_set(err, RUNTIME_EVOL_MOUNTPATH,
					 "volume '%s': mountPath '%s' in the sandbox: %s", v->name, buf,
					 fd == -EXDEV ? XDEV_WHY : strerror(-fd));
		}
		if (last)
			break;
		*e = '/';
		s = e + 1;
	}
	_cleanup_close_ int target =
	    in_root_open(root, mp, O_PATH | (is_dir ? O_DIRECTORY : 0));
	if (target < 0)
		return error_set(err, RUNTIME_EVOL_MOUNTPATH,
				 "volume '%s': mountPath '%s' (a %s is mounted there): %s", v->name, mp,
				 is_dir ? "directory" : "file",
				 target == -EXDEV ? XDEV_WHY : strerror(-target));
	if (on_volume(target, earlier, n_earlier))
		return error_set(err, RUNTIME_EVOL_MOUNTPATH, NESTED_WHY, v->name, mp);
	/* Where it really is, symlinks of the image followed inside the sandbox. */
	const char *in = sandbox_path_of(target, root_path, where, sizeof(where));
	if (!in || strcmp(in, "/") == 0 || under(in, "/proc") || under(in, "/sys") ||
	    under(in, "/dev"))
		return error_set(err, RUNTIME_EVOL_MOUNTPATH,
				 "volume '%s': mountPath '%s' leads to '%s' in the image: a volume may not cover '/' or anything in /proc, /sys or /dev",
				 v->name, mp, in ? in : "?");
	struct stat st;
	if (fstat(target, &st) < 0 || (bool)S_ISDIR(st.st_mode) != is_dir)
		return error_set(err, RUNTIME_EVOL_MOUNTPATH,
				 "volume '%s': mountPath '%s' is %s in the image, the source is %s",
				 v->name, mp, S_ISDIR(st.st_mode) ? "a directory" : "not a directory",
				 is_dir ? "a directory" : "a file");
	if (syscall(SYS_move_mount, tree, "", target, "",
		    MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return error_set_errno(err, errno, "volume '%s': mount it on '%s'", v->name, mp);
	return 0;
}

/*
 * No live user left: unmount it from the host; remove it when it was made to go with them.
 * Returns a reference to the mount taken before the unmount (or -1): the caller closes it once
 * the volumes' lock is released, since the last reference is what pays for the file system's
 * end (writing back what the sandboxes left dirty, the loop device's release: 0.3 to 1.3 s for a
 * volume just written with 1.5 GB), and corrald's GET and DELETE /v1/volumes wait for that lock
 * in its event loop.
 */
static int volume_idle(const struct runtime_config *cfg, int dfd, int vfd, const char *name)
{
	char mnt[PATH_MAX];
	int hold = -1;
	mnt_path(cfg, name, mnt, sizeof(mnt));
	if (is_mounted(vfd)) {
		hold = openat(vfd, VOLUME_MNT, O_PATH | O_DIRECTORY | O_CLOEXEC);
		(void)umount2(mnt, MNT_DETACH);
	}
	struct stat st;
	if (fstatat(vfd, VOLUME_DELETE_MARK, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_mounted(vfd))
		(void)fs_remove_tree_at(dfd, name);
	return hold;
}

/* Drop id from every volume's users under the lock; the mounts of volumes left idle are put in
 * held (at most max) for the caller to release after the lock. */
static size_t volume_release_locked(const struct runtime_config *cfg, const char *id, int *held,
				    size_t max)
{
	size_t n = 0;
	_cleanup_close_ int lock = -1;
	_cleanup_close_ int dfd = volumes_open(cfg, false, &lock, NULL);
	if (dfd < 0)
		return 0;
	int d2 = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		if (d2 >= 0)
			close(d2);
		return 0;
	}
	struct dirent *e;
	char user[PATH_MAX];
	while ((e = readdir(d))) {
		if (!volume_name_valid(e->d_name))
			continue;
		snprintf(user, sizeof(user), "%s/" VOLUME_USERS "/%s", e->d_name, id);
		if (unlinkat(dfd, user, 0) < 0)
			continue; /* not one of its users */
		_cleanup_close_ int vfd =
		    openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (vfd < 0 || users_live(cfg, vfd, true) != 0)
			continue;
		int hold = volume_idle(cfg, dfd, vfd, e->d_name);
		if (hold >= 0 && n < max)
			held[n++] = hold;
		else if (hold >= 0)
			close(hold); /* past max: paid for here */
	}
	closedir(d);
	return n;
}

void volume_release(const struct runtime_config *cfg, const char *id)
{
	int held[RUNTIME_VOLUMES_MAX];
	size_t n = volume_release_locked(cfg, id, held, ARRAY_SIZE(held));
	for (size_t i = 0; i < n; i++)
		close(held[i]);
}

int volume_list(const struct runtime_config *cfg, struct volume_info **ret, size_t *ret_n,
		struct error *err)
{
	*ret = NULL;
	*ret_n = 0;
	/*
	 * Without the volumes' lock: corrald lists in its event loop, and a create or teardown
	 * may hold the lock a while (mkfs, an unmount). Volumes appear by rename and go whole, so a
	 * listing never sees half of one; its user counts are a moment's.
	 */
	_cleanup_close_ int dfd = volumes_open(cfg, false, NULL, err);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return dfd;
	int d2 = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
	if (!d) {
		if (d2 >= 0)
			close(d2);
		return error_set_errno(err, errno, "list volumes");
	}
	size_t n = 0, cap = 0;
	struct volume_info *v = NULL;
	struct dirent *e;
	int r = 0;
	while ((e = readdir(d))) {
		if (!volume_name_valid(e->d_name))
			continue;
		_cleanup_close_ int vfd =
		    openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (vfd < 0 || fstatat(vfd, VOLUME_IMAGE, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			struct volume_info *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				r = error_set(err, ENOMEM, "list volumes");
				break;
			}
			v = nv;
		}
		struct volume_info *i = &v[n++];
		memset(i, 0, sizeof(*i));
		snprintf(i->name, sizeof(i->name), "%s", e->d_name);
		i->size_bytes = (uint64_t)st.st_size;
		i->used_bytes = (uint64_t)st.st_blocks * 512;
		i->users = users_live(cfg, vfd, false);
		i->delete_on_end = fstatat(vfd, VOLUME_DELETE_MARK, &st, AT_SYMLINK_NOFOLLOW) == 0;
	}
	closedir(d);
	if (r < 0) {
		free(v);
		return r;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int volume_delete(const struct runtime_config *cfg, const char *name, struct error *err)
{
	if (!volume_name_valid(name))
		return error_set(err, ENOENT, "no volume '%s'", name);
	_cleanup_close_ int lock = -1;
	_cleanup_close_ int dfd = volumes_open(cfg, false, &lock, err);
	if (dfd == -ENOENT)
		return error_set(err, ENOENT, "no volume '%s'", name);
	if (dfd < 0)
		return dfd;
	_cleanup_close_ int vfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (vfd < 0)
		return errno == ENOENT ? error_set(err, ENOENT, "no volume '%s'", name)
				       : error_set_errno(err, errno, "open volume '%s'", name);
	unsigned users = users_live(cfg, vfd, true);
	if (users)
		return error_set(err, EBUSY, "volume '%s' is in use by %u sandbox(es)", name,
				 users);
	char mnt[PATH_MAX];
	mnt_path(cfg, name, mnt, sizeof(mnt));
	if (is_mounted(vfd) && umount2(mnt, MNT_DETACH) < 0)
		return error_set_errno(err, errno, "unmount volume '%s'", name);
	int r = fs_remove_tree_at(dfd, name);
	if (r < 0)
		return error_set_errno(err, -r, "remove volume '%s'", name);
	return 0;
}
