/* The per-sandbox layer file system behind an ephemeral-storage limit: see disk.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/disk.h"
#include "shared/macro.h"

static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4",
					 "/usr/bin/mkfs.ext4"};

/* mkfs.ext4 on img; its stderr becomes the error message. */
static int run_mkfs(const char *img, struct error *err)
{
	const char *mkfs = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(mkfs_paths) && !mkfs; i++)
		if (access(mkfs_paths[i], X_OK) == 0)
			mkfs = mkfs_paths[i];
	if (!mkfs)
		return error_set(err, ENOENT,
				 "mkfs.ext4 not found (install e2fsprogs): it is needed for an ephemeral-storage limit");
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return error_set_errno(err, errno, "pipe");
	/* -O ^has_journal: the layer is volatile; lazy_itable_init: no zeroing of inode tables;
	 * nodiscard: nothing to discard on a fresh sparse file; -m 0: no root reserve. */
	char *const argv[] = {(char *)mkfs, (char *)"-q", (char *)"-F", (char *)"-O",
			      (char *)"^has_journal", (char *)"-E",
			      (char *)"lazy_itable_init=1,nodiscard", (char *)"-m", (char *)"0",
			      (char *)img, NULL};
	char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return error_set_errno(err, e, "fork mkfs.ext4");
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		dup2(null, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		execve(mkfs, argv, envp);
		_exit(127);
	}
	close(p[1]);
	char out[256];
	size_t n = 0;
	ssize_t got;
	while ((got = read(p[0], out + n, sizeof(out) - 1 - n)) > 0 || (got < 0 && errno == EINTR))
		if (got > 0 && (n += (size_t)got) >= sizeof(out) - 1)
			break;
	close(p[0]);
	out[n] = '\0';
	while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = '\0';
	int status = 0;
	pid_t w;
	while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (w < 0)
		return error_set_errno(err, errno, "wait for mkfs.ext4");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return error_set(err, EIO, "mkfs.ext4 '%s' failed (status 0x%x): %s", img, status,
				 n ? out : "no output");
	return 0;
}

/* Attach img to a free loop device with autoclear (released once nothing uses it). */
static int loop_attach(int img_fd, char *dev, size_t len, struct error *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return error_set_errno(err, errno, "open /dev/loop-control");
	/* Another create may grab the same free device between GET_FREE and CONFIGURE: retry. */
	for (int attempt = 0; attempt < 64; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			return error_set_errno(err, errno, "find a free loop device");
		snprintf(dev, len, "/dev/loop%d", n);
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return error_set_errno(err, errno, "open '%s'", dev);
		struct loop_config cfg = {.fd = (unsigned)img_fd};
		cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		int r = ioctl(fd, LOOP_CONFIGURE, &cfg);
		if (r < 0 && errno == EINVAL) { /* before Linux 5.8 */
			r = ioctl(fd, LOOP_SET_FD, img_fd);
			if (r == 0) {
				struct loop_info64 info = {.lo_flags = LO_FLAGS_AUTOCLEAR};
				r = ioctl(fd, LOOP_SET_STATUS64, &info);
				if (r < 0)
					ioctl(fd, LOOP_CLR_FD, 0);
			}
		}
		int e = errno;
		if (r == 0)
			return fd;
		close(fd);
		if (e != EBUSY)
			return error_set_errno(err, e, "attach '%s'", dev);
	}
	return error_set(err, EBUSY, "no free loop device after 64 attempts");
}

int disk_setup(const char *dir, uint64_t limit_bytes, struct error *err)
{
	char img[PATH_MAX], mnt[PATH_MAX], dev[64], sub[PATH_MAX + 8];
	if (limit_bytes < DISK_MIN_BYTES)
		return error_set(err, EINVAL, "ephemeral-storage limit below the minimum of %llu MiB",
				 DISK_MIN_BYTES >> 20);
	snprintf(img, sizeof(img), "%s/%s", dir, DISK_IMAGE);
	snprintf(mnt, sizeof(mnt), "%s/%s", dir, DISK_MOUNT);
	_cleanup_close_ int fd =
	    open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return error_set_errno(err, errno, "create '%s'", img);
	if (ftruncate(fd, (off_t)limit_bytes) < 0)
		return error_set_errno(err, errno, "size '%s'", img);
	int r = run_mkfs(img, err);
	if (r < 0)
		return r;
	if (mkdir(mnt, 0755) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", mnt);
	_cleanup_close_ int loop = loop_attach(fd, dev, sizeof(dev), err);
	if (loop < 0)
		return loop;
	if (mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0)
		return error_set_errno(err, errno, "mount '%s' (%s) on '%s'", dev, img, mnt);
	/* The mount holds the device now: closing ours lets autoclear free it on unmount. */
	static const struct {
		const char *name;
		mode_t mode;
	} subdirs[] = {{"upper", 0755}, {"work", 0700}};
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++) {
		snprintf(sub, sizeof(sub), "%s/%s", mnt, subdirs[i].name);
		if (mkdir(sub, subdirs[i].mode) < 0)
			return error_set_errno(err, errno, "mkdir '%s'", sub);
	}
	return 0;
}
