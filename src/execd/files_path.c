#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "files_path.h"
#include "shared/macro.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

static enum fpath_mode mode_selected = FPATH_AUTO;
static int openat2_works = -1; /* -1 not probed yet */

void fpath_set_mode(enum fpath_mode mode)
{
	mode_selected = mode;
}

static bool probe_openat2(void)
{
	if (openat2_works < 0) {
		struct open_how how = {
		    .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		    .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
		};
		int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
		/* ENOSYS on old kernels; EPERM or ENOSYS when a seccomp filter hides it. */
		openat2_works = fd >= 0;
		if (fd >= 0)
			close(fd);
	}
	return openat2_works;
}

bool fpath_using_openat2(void)
{
	switch (mode_selected) {
	case FPATH_OPENAT2:
		return true;
	case FPATH_FALLBACK:
		return false;
	default:
		return probe_openat2();
	}
}

int fpath_normalize(const char *in, const char *home, char *out, size_t outlen)
{
	char tmp[2 * PATH_MAX];
	int n;
	if (!in || !*in)
		return -EINVAL;
	if (outlen < 2)
		return -ENAMETOOLONG;
	if (strcmp(in, "~") == 0 || strncmp(in, "~/", 2) == 0)
		n = snprintf(tmp, sizeof(tmp), "/%s/%s", home && *home ? home : "/root", in + 1);
	else
		n = snprintf(tmp, sizeof(tmp), "/%s", in);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -ENAMETOOLONG;

	size_t len = 1;
	unsigned depth = 0;
	out[0] = '/';
	out[1] = '\0';
	const char *p = tmp;
	while (*p) {
		while (*p == '/')
			p++;
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t cn = (size_t)(p - s);
		if (cn == 0 || (cn == 1 && s[0] == '.'))
			continue;
		if (cn == 2 && s[0] == '.' && s[1] == '.') {
			if (len > 1)
				depth--;
			while (len > 1 && out[len - 1] != '/')
				len--;
			if (len > 1)
				len--; /* the slash before the removed component */
			out[len] = '\0';
			continue;
		}
		if (len + (len > 1) + cn + 1 > outlen)
			return -ENAMETOOLONG;
		if (++depth > FPATH_DEPTH_MAX)
			return -E2BIG;
		if (len > 1)
			out[len++] = '/';
		memcpy(out + len, s, cn);
		len += cn;
		out[len] = '\0';
	}
	return 0;
}

static int open_openat2(int rootfd, const char *path, int flags, mode_t mode, int *ret_fd)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .mode = (flags & O_CREAT) ? mode : 0,
	    .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	/* RESOLVE_IN_ROOT returns EAGAIN when a concurrent rename could have let ".." escape. */
	for (int i = 0; i < 32; i++) {
		int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
		if (fd >= 0) {
			*ret_fd = fd;
			return 0;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
	}
	return -EAGAIN;
}

/* Re-walk canon ("a/b", "" for the root) from the root, refusing any symlink on the way. */
static int reopen_canon(int rootfd, const char *canon, int *ret_fd)
{
	int cur = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	const char *p = canon;
	while (*p) {
		char name[NAME_MAX + 1];
		const char *s = p;
		while (*p && *p != '/')
			p++;
		size_t n = (size_t)(p - s);
		if (*p)
			p++;
		if (n == 0 || n > NAME_MAX)
			continue;
		memcpy(name, s, n);
		name[n] = '\0';
		int fd = openat(cur, name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
		int saved = errno;
		close(cur);
		if (fd < 0)
			return -saved;
		cur = fd;
	}
	*ret_fd = cur;
	return 0;
}

/* The path ended on a directory we already hold (the root, or after ".."). */
static int open_dir_itself(int cur, int flags, int *ret_fd)
{
	if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		return -EEXIST;
	int fd;
	if (flags & O_PATH)
		fd = openat(cur, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	else
		fd = openat(cur, ".", (flags & ~(O_CREAT | O_NOFOLLOW)) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

/*
 * A symlink on procfs whose target is absolute or not a path ("pipe:[42]") is a magic link;
 * openat2 refuses those with RESOLVE_NO_MAGICLINKS and so does the walk.
 */
static bool is_magic_link(int fd, const char *target)
{
	struct statfs sfs;
	if (fstatfs(fd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC)
		return false;
	return target[0] == '/' || strchr(target, ':');
}

/* "..": canon loses its last component and *pcur becomes that directory, reopened from the root. */
static int walk_up(int rootfd, int *pcur, char *canon, size_t *clen)
{
	char *slash = strrchr(canon, '/');
	*clen = slash ? (size_t)(slash - canon) : 0;
	canon[*clen] = '\0';
	int nfd = -1;
	int r = reopen_canon(rootfd, canon, &nfd);
	if (r < 0)
		return r;
	close(*pcur);
	*pcur = nfd;
	return 0;
}

/*
 * The last component, not a symlink: name in directory cur, fd its O_PATH descriptor (taken) and
 * st its stat. Opens it as flags ask into *ret_fd.
 */
static int walk_open_last(int cur, int fd, const char *name, const struct stat *st, int flags,
			  mode_t mode, int *ret_fd)
{
	if ((flags & O_DIRECTORY) && !S_ISDIR(st->st_mode)) {
		close(fd);
		return -ENOTDIR;
	}
	if (flags & O_PATH) {
		*ret_fd = fd;
		return 0;
	}
	close(fd);
	if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		return -EEXIST;
	/* O_NOFOLLOW: if it was swapped for a symlink since, fail rather than follow. */
	int nfd = openat(cur, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	if (nfd < 0)
		return -errno;
	*ret_fd = nfd;
	return 0;
}

static int walk(int rootfd, int *pcur, const char *path, int flags, mode_t mode, int *ret_fd)
{
	/* rest holds the components still to resolve; symlink targets are spliced in front. */
	char rest[2 * PATH_MAX + 2];
	char canon[PATH_MAX] = ""; /* resolved directories below the root, never a symlink */
	size_t clen = 0, pos = 0;
	int links = 0, r;

	if ((size_t)snprintf(rest, sizeof(rest), "%s", path) >= sizeof(rest))
		return -ENAMETOOLONG;

	for (;;) {
		while (rest[pos] == '/')
			pos++;
		if (!rest[pos])
			return open_dir_itself(*pcur, flags, ret_fd);

		size_t start = pos;
		while (rest[pos] && rest[pos] != '/')
			pos++;
		size_t n = pos - start;
		if (n > NAME_MAX)
			return -ENAMETOOLONG;
		char name[NAME_MAX + 1];
		memcpy(name, rest + start, n);
		name[n] = '\0';
		size_t q = pos;
		while (rest[q] == '/')
			q++;
		bool last = rest[q] == '\0';

		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			if (clen == 0)
				continue; /* ".." at the root is the root */
			r = walk_up(rootfd, pcur, canon, &clen);
			if (r < 0)
				return r;
			continue;
		}

		int fd = openat(*pcur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT && last && (flags & O_CREAT)) {
				fd = openat(*pcur, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
				if (fd < 0)
					return -errno;
				*ret_fd = fd;
				return 0;
			}
			return -errno;
		}
		struct stat st;
		if (fstat(fd, &st) < 0) {
			r = -errno;
			close(fd);
			return r;
		}

		if (S_ISLNK(st.st_mode)) {
			if (last && (flags & O_NOFOLLOW)) {
				if ((flags & O_PATH) && !(flags & O_DIRECTORY)) {
					*ret_fd = fd;
					return 0;
				}
				close(fd);
				return (flags & O_DIRECTORY) ? -ENOTDIR : -ELOOP;
			}
			if (++links > FPATH_MAX_LINKS) {
				close(fd);
				return -ELOOP;
			}
			char target[PATH_MAX];
			ssize_t tl = readlinkat(fd, "", target, sizeof(target));
			if (tl < 0) {
				r = -errno;
				close(fd);
				return r;
			}
			if ((size_t)tl >= sizeof(target)) {
				close(fd);
				return -ENAMETOOLONG;
			}
			target[tl] = '\0';
			bool magic = is_magic_link(fd, target);
			close(fd);
			if (magic)
				return -ELOOP;
			if (tl == 0)
				return -ENOENT;
			if (target[0] == '/') {
				/* Absolute targets restart at the sandbox root, not the host's. */
				int nfd = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (nfd < 0)
					return -errno;
				close(*pcur);
				*pcur = nfd;
				clen = 0;
				canon[0] = '\0';
			}
			size_t remlen = strlen(rest + pos);
			if ((size_t)tl + 1 + remlen + 1 > sizeof(rest))
				return -ENAMETOOLONG;
			memmove(rest + tl + 1, rest + pos, remlen + 1);
			memcpy(rest, target, (size_t)tl);
			rest[tl] = '/';
			pos = 0;
			continue;
		}

		if (last)
			return walk_open_last(*pcur, fd, name, &st, flags, mode, ret_fd);

		if (!S_ISDIR(st.st_mode)) {
			close(fd);
			return -ENOTDIR;
		}
		if (clen + 1 + n + 1 > sizeof(canon)) {
			close(fd);
			return -ENAMETOOLONG;
		}
		if (clen)
			canon[clen++] = '/';
		memcpy(canon + clen, name, n + 1);
		clen += n;
		close(*pcur);
		*pcur = fd;
	}
}

static int open_walk(int rootfd, const char *path, int flags, mode_t mode, int *ret_fd)
{
	int cur = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	int r = walk(rootfd, &cur, path, flags, mode, ret_fd);
	if (cur >= 0)
		close(cur);
	return r;
}

int fpath_open(int rootfd, const char *path, int flags, mode_t mode, int *ret_fd)
{
	if (!path || path[0] != '/')
		return -EINVAL;
	if (fpath_using_openat2())
		return open_openat2(rootfd, path, flags, mode, ret_fd);
	return open_walk(rootfd, path, flags, mode, ret_fd);
}

int fpath_open_parent(int rootfd, const char *path, int *ret_dirfd, const char **ret_name)
{
	if (!path || path[0] != '/')
		return -EINVAL;
	const char *slash = strrchr(path, '/');
	const char *name = slash + 1;
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EINVAL;
	char dir[PATH_MAX];
	size_t dlen = (size_t)(slash - path);
	if (dlen >= sizeof(dir))
		return -ENAMETOOLONG;
	if (dlen == 0) {
		dir[0] = '/';
		dir[1] = '\0';
	} else {
		memcpy(dir, path, dlen);
		dir[dlen] = '\0';
	}
	int r = fpath_open(rootfd, dir, O_PATH | O_DIRECTORY, 0, ret_dirfd);
	if (r < 0)
		return r;
	*ret_name = name;
	return 0;
}

int fpath_mkdir_p(int rootfd, const char *path, mode_t mode, uid_t uid, gid_t gid,
		  bool *ret_created)
{
	char buf[PATH_MAX];
	bool created = false;
	int r, fd;

	if ((size_t)snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
		return -ENAMETOOLONG;
	if (buf[0] != '/')
		return -EINVAL;
	for (size_t i = 1;; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char saved = buf[i];
		buf[i] = '\0';
		created = false;
		r = fpath_open(rootfd, buf, O_PATH | O_DIRECTORY, 0, &fd);
		if (r == 0) {
			close(fd);
		} else if (r == -ENOENT) {
			_cleanup_close_ int dfd = -1;
			const char *name;
			r = fpath_open_parent(rootfd, buf, &dfd, &name);
			if (r < 0)
				return r;
			if (mkdirat(dfd, name, mode) == 0) {
				created = true;
				if ((uid != (uid_t)-1 || gid != (gid_t)-1) &&
				    fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
					return -errno;
			} else if (errno != EEXIST) {
				return -errno;
			}
		} else {
			return r;
		}
		buf[i] = saved;
		if (!saved)
			break;
	}
	/* A dangling symlink on the way makes mkdirat say EEXIST: check the result is a directory.
	 */
	r = fpath_open(rootfd, path, O_PATH | O_DIRECTORY, 0, &fd);
	if (r < 0)
		return r;
	close(fd);
	if (ret_created)
		*ret_created = created;
	return 0;
}

int fpath_fchmod(int fd, mode_t mode)
{
	if (fchmod(fd, mode) == 0)
		return 0;
	if (errno != EBADF) /* EBADF: an O_PATH fd */
		return -errno;
	if (syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != ENOSYS && errno != EINVAL && errno != EPERM)
		return -errno;
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (chmod(proc, mode) < 0)
		return -errno;
	return 0;
}

int fpath_fchown(int fd, uid_t uid, gid_t gid)
{
	if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return 0;
}
