/*
 * User namespaces of sandboxes (userns.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/userns.h"
#include "shared/fsutil.h"
#include "shared/macro.h"

/* The owner recorded in slot file name, or "" when unreadable. */
static void slot_owner(int dirfd, const char *name, char *buf, size_t len)
{
	buf[0] = '\0';
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return;
	ssize_t n = RETRY_EINTR(read(fd, buf, len - 1));
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

int userns_reserve(const char *lock_dir, const char *owner, unsigned hint, unsigned *ret_slot,
		   struct error *err)
{
	int r = fs_mkdir_p(lock_dir, 0700);
	if (r < 0)
		return error_set_errno(err, -r, "mkdir '%s'", lock_dir);
	_cleanup_close_ int dirfd = open(lock_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return error_set_errno(err, errno, "open '%s'", lock_dir);
	/* One reserver at a time host-wide: taking back a stale slot must not race a new owner. */
	if (RETRY_EINTR(flock(dirfd, LOCK_EX)) < 0)
		return error_set_errno(err, errno, "lock '%s'", lock_dir);
	char name[16], held[PATH_MAX];
	for (unsigned i = 0; i < USERNS_SLOTS; i++) {
		unsigned slot = (hint + i) % USERNS_SLOTS;
		snprintf(name, sizeof(name), "%u", slot);
		int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				0600);
		if (fd < 0 && errno == EEXIST) {
			struct stat st;
			slot_owner(dirfd, name, held, sizeof(held));
			if (held[0] != '/' || stat(held, &st) == 0 || errno != ENOENT)
				continue; /* in use (or not ours to judge) */
			unlinkat(dirfd, name, 0); /* its sandbox directory is gone: take it back */
			fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
				    0600);
		}
		if (fd < 0)
			return error_set_errno(err, errno, "reserve id range in '%s'", lock_dir);
		size_t len = strlen(owner);
		bool ok = write(fd, owner, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
		int e = errno;
		close(fd);
		if (!ok) {
			unlinkat(dirfd, name, 0);
			return error_set_errno(err, e, "write '%s/%s'", lock_dir, name);
		}
		*ret_slot = slot;
		return 0;
	}
	return error_set(err, EAGAIN, "all %u user id ranges of this host are in use ('%s')",
			 USERNS_SLOTS, lock_dir);
}

void userns_release(const char *lock_dir, unsigned slot, const char *owner)
{
	char name[16], held[PATH_MAX];
	_cleanup_close_ int dirfd = open(lock_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0 || RETRY_EINTR(flock(dirfd, LOCK_EX)) < 0)
		return;
	snprintf(name, sizeof(name), "%u", slot);
	slot_owner(dirfd, name, held, sizeof(held));
	if (strcmp(held, owner) == 0)
		unlinkat(dirfd, name, 0);
}

/* The helper only has to exist while its maps are written and its namespace opened. It shares the
 * caller's memory (no page tables copied, however big the caller) and touches none of it. It dies
 * with the caller: a create worker killed between the clone and its kill (corrald's death takes
 * its workers) left it pausing for ever, holding copies of the worker's descriptors. */
static _noreturn_ int helper_main(void *arg)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t)(intptr_t)arg)
		_exit(0); /* the caller is gone already */
	for (;;)
		pause();
}

static int write_map(pid_t pid, const char *file, uid_t base, struct error *err)
{
	char path[64], map[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	int n = snprintf(map, sizeof(map), "0 %u %u\n", (unsigned)base, USERNS_SIZE);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, map, (size_t)n) != n)
		return error_set_errno(err, errno, "write %s", path);
	return 0;
}

int userns_open(uid_t base, struct error *err)
{
	static char stack[16384] __attribute__((aligned(16)));
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old); /* the helper never runs a handler of ours */
	pid_t pid = clone(helper_main, stack + sizeof(stack), CLONE_VM | CLONE_NEWUSER | SIGCHLD,
			  (void *)(intptr_t)getpid());
	int e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return error_set_errno(err, e, "clone a user namespace");
	char path[64];
	int fd = -1, r = write_map(pid, "uid_map", base, err);
	if (r == 0)
		r = write_map(pid, "gid_map", base, err);
	if (r == 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			r = error_set_errno(err, errno, "open %s", path);
	}
	kill(pid, SIGKILL);
	RETRY_EINTR(waitpid(pid, NULL, 0));
	return r < 0 ? r : fd;
}

/* A detached clone of the tree at path, idmapped through userns_fd and read-only. */
static int idmapped_clone(const char *path, int userns_fd, struct error *err)
{
	int t = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (t < 0)
		return error_set_errno(err, errno, "clone the mount of '%s'", path);
	struct mount_attr attr = {
	    .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
	    .userns_fd = (uint64_t)userns_fd,
	};
	if (mount_setattr(t, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
		int e = errno;
		close(t);
		return error_set_errno(err, e, "idmapped mount of '%s'", path);
	}
	return t;
}

int userns_idmap_mount(const char *path, const char *target, int userns_fd, struct error *err)
{
	_cleanup_close_ int t = idmapped_clone(path, userns_fd, err);
	if (t < 0)
		return t;
	if (move_mount(t, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return error_set_errno(err, errno, "mount idmapped '%s' on '%s'", path, target);
	return 0;
}

int userns_probe_idmap(const char *path, struct error *err)
{
	_cleanup_close_ int ns = userns_open(USERNS_FIRST_ID, err);
	if (ns < 0)
		return ns;
	int t = idmapped_clone(path, ns, err);
	if (t < 0)
		return t;
	close(t);
	return 0;
}
