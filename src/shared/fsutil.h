/* File-system helpers with the durability and safety rules every component needs. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* All len bytes of buf to fd (write(2) again after a short write or EINTR): 0, -errno, or -EIO
 * when a write took nothing. */
int fd_write_all(int fd, const void *buf, size_t len);
/* Write data to path atomically: tmp file in the same dir, fsync, rename, fsync the dir. */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
/* Read a whole file (at most max bytes, else -EFBIG); *ret_buf is NUL-terminated, caller frees. */
int fs_read_file(const char *path, size_t max, char **ret_buf, size_t *ret_len);
/* Read a small file into buf (NUL-terminated, trailing newline stripped). */
int fs_read_small(const char *path, char *buf, size_t len);
/* A small file holding a decimal number, or "max" (a cgroup limit) as UINT64_MAX. */
int fs_read_u64(const char *path, uint64_t *ret);
/*
 * The number after "key " on a line of a flat-keyed file (cgroup cpu.stat, memory.stat,
 * memory.events; /proc/meminfo with "MemTotal:" as the key). -ENOENT when no line has the key.
 */
int fs_read_keyed_u64(const char *path, const char *key, uint64_t *ret);
/* Write a short string to an existing file (cgroup knobs, /proc files): one write, no O_CREAT. */
int fs_write_string(const char *path, const char *s);
/* mkdir -p with mode for each created component. Existing directories are fine. */
int fs_mkdir_p(const char *path, mode_t mode);
/*
 * rm -rf that never crosses a mount point: it refuses to descend into any directory whose device or
 * mount id differs from the top directory's, and reports -EBUSY for such a directory (so a leaked
 * bind mount of the host's /usr can never be recursed into). A missing path is success.
 */
int fs_remove_tree(const char *path);
/* The same for name relative to dirfd (which may be an O_PATH fd); name itself is not followed. */
int fs_remove_tree_at(int dirfd, const char *name);
