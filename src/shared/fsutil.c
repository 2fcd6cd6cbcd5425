#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "macro.h"

int fd_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= sizeof(tmp))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	int r = fd_write_all(fd, data, len);
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	if (fsync(fd) < 0 || rename(tmp, path) < 0) {
		r = -errno;
		unlink(tmp);
		return r;
	}
	/* Make the rename itself durable. */
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		if (slash == dir)
			slash[1] = '\0';
		else
			*slash = '\0';
		_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || fsync(dfd) < 0)
			return -errno; /* the new file is in place, but not known to be durable */
	}
	return 0;
}

int fs_read_file(const char *path, size_t max, char **ret_buf, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* The buffer never grows past max + 1: the extra byte is how a file longer than max shows. */
	max = MIN(max, (size_t)SSIZE_MAX);
	size_t cap = MIN((size_t)4096, max + 1), len = 0;
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len > max)
			return -EFBIG;
		if (len == cap) {
			cap = cap > max / 2 ? max + 1 : cap * 2;
			char *nb = realloc(buf, cap + 1);
			if (!nb)
				return -ENOMEM;
			buf = nb;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	*ret_buf = TAKE_PTR(buf);
	return 0;
}

int fs_read_keyed_u64(const char *path, const char *key, uint64_t *ret)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char line[512];
	size_t klen = strlen(key);
	bool line_start = true; /* a line longer than the buffer comes in pieces: match the first */
	while (fgets(line, sizeof(line), f)) {
		bool at_start = line_start;
		line_start = strchr(line, '\n') != NULL;
		if (at_start && strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			*ret = strtoull(line + klen + 1, NULL, 10);
			return 0;
		}
	}
	return -ENOENT;
}

int fs_read_small(const char *path, char *buf, size_t len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = RETRY_EINTR(read(fd, buf, len - 1));
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

int fs_read_u64(const char *path, uint64_t *ret)
{
	char buf[64];
	int r = fs_read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	if (strcmp(buf, "max") == 0) {
		*ret = UINT64_MAX;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno || end == buf)
		return -EINVAL;
	*ret = v;
	return 0;
}

int fs_write_string(const char *path, const char *s)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(s);
	ssize_t n = RETRY_EINTR(write(fd, s, len));
	if (n < 0)
		return -errno;
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

int fs_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	if (!*path)
		return -ENOENT; /* as mkdir(""); the loop below must not start past the NUL */
	if ((size_t)snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1;; p++) {
		if (*p == '/' || *p == '\0') {
			char saved = *p;
			*p = '\0';
			if (mkdir(buf, mode) < 0 && errno != EEXIST)
				return -errno;
			*p = saved;
			if (saved == '\0')
				break;
		}
	}
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int mount_id_of(int dirfd, const char *name, uint64_t *ret)
{
	struct statx stx;
	if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &stx) < 0)
		return -errno;
	*ret = (stx.stx_mask & STATX_MNT_ID) ? stx.stx_mnt_id : 0;
	return 0;
}

/*
 * Remove everything inside dfd (which sits on device dev, mount mnt). Consumes dfd.
 *
 * The tree may have been built by a sandbox to any depth (relative mkdir needs no PATH_MAX), so
 * this is a loop over at most FS_REMOVE_DEPTH_MAX open directories, not a recursion: a directory
 * found at that depth is moved up into the top directory (same file system, so a rename) and
 * removed on a later pass. Stack, fds and memory stay bounded whatever the depth.
 */
#define FS_REMOVE_DEPTH_MAX 64

static void keep_first(int *ret, int r)
{
	if (r < 0 && !*ret)
		*ret = r;
}

/* Move dir name (in parent) into top under a fresh name; 0 or a negative errno. */
static int move_to_top(int parent, const char *name, int top, unsigned long *counter)
{
	for (int tries = 0; tries < 1000; tries++) {
		char tmp[64];
		snprintf(tmp, sizeof(tmp), ".corral-rm-%lu", (*counter)++);
		int r = renameat2(parent, name, top, tmp, RENAME_NOREPLACE);
		if (r < 0 && errno == EINVAL) { /* file systems without RENAME_NOREPLACE */
			struct stat st;
			if (fstatat(top, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0)
				continue;
			r = renameat(parent, name, top, tmp);
		}
		if (r == 0)
			return 0;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static int remove_inside(int dfd, dev_t dev, uint64_t mnt)
{
	DIR *level[FS_REMOVE_DEPTH_MAX];
	char(*names)[NAME_MAX + 1] = malloc(sizeof(*names) * FS_REMOVE_DEPTH_MAX);
	if (!names) {
		close(dfd);
		return -ENOMEM;
	}
	level[0] = fdopendir(dfd);
	if (!level[0]) {
		int r = -errno;
		close(dfd);
		free(names);
		return r;
	}
	int n = 1, ret = 0;
	unsigned long counter = 0;
	bool moved = false;
	for (;;) {
		DIR *d = level[n - 1];
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			keep_first(&ret, -errno);
			if (n == 1) {
				if (!moved)
					break;
				moved = false; /* another pass for what was moved up */
				rewinddir(d);
				continue;
			}
			closedir(d);
			n--;
			if (unlinkat(dirfd(level[n - 1]), names[n], AT_REMOVEDIR) < 0 &&
			    errno != ENOENT)
				keep_first(&ret, -errno);
			continue;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				keep_first(&ret, -errno);
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
				keep_first(&ret, -errno);
			continue;
		}
		uint64_t child_mnt = 0;
		mount_id_of(dirfd(d), de->d_name, &child_mnt);
		if (st.st_dev != dev || (mnt && child_mnt && child_mnt != mnt)) {
			keep_first(&ret, -EBUSY); /* a mount point: never descend into it */
			continue;
		}
		if (n == FS_REMOVE_DEPTH_MAX) {
			int r = move_to_top(dirfd(d), de->d_name, dirfd(level[0]), &counter);
			if (r == 0)
				moved = true;
			else
				keep_first(&ret, r);
			continue;
		}
		int cfd =
		    openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *child = cfd < 0 ? NULL : fdopendir(cfd);
		if (!child) {
			if (errno != ENOENT)
				keep_first(&ret, -errno);
			if (cfd >= 0)
				close(cfd);
			continue;
		}
		snprintf(names[n], sizeof(names[n]), "%s", de->d_name);
		level[n++] = child;
	}
	while (n > 0)
		closedir(level[--n]);
	free(names);
	return ret;
}

int fs_remove_tree_at(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	uint64_t mnt = 0;
	mount_id_of(dirfd, name, &mnt);
	int dfd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	int r = remove_inside(dfd, st.st_dev, mnt);
	if (r < 0)
		return r;
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int fs_remove_tree(const char *path)
{
	return fs_remove_tree_at(AT_FDCWD, path);
}
