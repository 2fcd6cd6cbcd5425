/*
 * Path resolution for the files API: every path a client names is resolved inside a root
 * directory (the sandbox's "/"), so no symlink, ".." or absolute link target can reach outside it.
 *
 * The kernel does the work when it can: openat2() with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS
 * relative to the root's fd. Kernels without openat2 (or a seccomp filter that hides it) get a
 * user-space walk with the same semantics: one component at a time with O_NOFOLLOW, symlinks read
 * and spliced in by hand, ".." never climbing above the root, and absolute targets restarting at
 * the root. Both give "/" for ".." at the root, count at most FPATH_MAX_LINKS symlinks (then
 * -ELOOP) and refuse /proc magic links.
 *
 * Paths given to these functions are normalized first (fpath_normalize): absolute, no ".", "..",
 * empty or trailing components.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define FPATH_MAX_LINKS 40
/* Components in a client path: every resolution and mkdir -p step is linear in them. */
#define FPATH_DEPTH_MAX 256

enum fpath_mode {
	FPATH_AUTO,	/* openat2 when the kernel has it, else the walk */
	FPATH_OPENAT2,	/* always openat2 (fails with -ENOSYS where missing) */
	FPATH_FALLBACK, /* always the user-space walk */
};

/* Select the resolver (tests run every resolution test under both). */
void fpath_set_mode(enum fpath_mode mode);
/* True when openat2 will be used for resolution. */
bool fpath_using_openat2(void);

/*
 * Turn a client path into a normalized absolute one: "~" and "~/x" expand to home, a relative path
 * is taken relative to "/", and "." / ".." / repeated slashes are cleaned lexically (as Go's
 * filepath.Clean, so "/../a" is "/a"). -EINVAL for an empty path, -ENAMETOOLONG past out's size,
 * -E2BIG past FPATH_DEPTH_MAX components.
 */
int fpath_normalize(const char *in, const char *home, char *out, size_t outlen);

/*
 * Open path inside root. flags are open(2) flags (O_CLOEXEC is added); O_NOFOLLOW means the last
 * component is not followed (with O_PATH that opens the symlink itself); O_CREAT creates the last
 * component (following a dangling symlink to create its target inside the root, as open does).
 */
int fpath_open(int rootfd, const char *path, int flags, mode_t mode, int *ret_fd);

/*
 * Open the parent directory of path (O_PATH, symlinks in it resolved inside root) and point
 * *ret_name at the last component inside path. -EINVAL for "/", which has no parent.
 */
int fpath_open_parent(int rootfd, const char *path, int *ret_dirfd, const char **ret_name);

/*
 * mkdir -p inside root. Directories it creates get mode (then the umask) and, when uid/gid are
 * not -1, that owner. *ret_created (optional) says whether the last component was created here.
 */
int fpath_mkdir_p(int rootfd, const char *path, mode_t mode, uid_t uid, gid_t gid,
		  bool *ret_created);

/* chmod an fd of any kind (also O_PATH): fchmodat2(AT_EMPTY_PATH), else /proc/self/fd. */
int fpath_fchmod(int fd, mode_t mode);
/* chown an fd of any kind (also O_PATH) without following symlinks. */
int fpath_fchown(int fd, uid_t uid, gid_t gid);
