/*
 * Volumes of sandboxes (the create request's `volumes`): what gets mounted, from where, and how
 * the host resolves it without following anything a sandbox (or anyone else) could plant.
 *
 * Host volumes: a directory or file under one of the operator's --allow-host-path directories.
 * The allowed directory is opened as given (the operator's path is trusted); the rest of the path
 * and the subPath are resolved beneath it with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), so
 * no symlink and no '..' anywhere below the allowed directory is followed. The mount is made from
 * that fd (open_tree, never the path again), so what is mounted is what was checked.
 *
 * Named volumes (`pvc`): <state>/volumes/<name>/ holds volume.img, an ext4 file system (with a
 * journal: its data outlives sandboxes) of the volume's size, so a sandbox filling it gets ENOSPC
 * inside it and never fills the state file system. It is mounted once on the host, on
 * <state>/volumes/<name>/mnt (nosuid, nodev, noexec there), while some sandbox uses it: every
 * sandbox of the volume shares that one file system (two mounts of one image through two loop
 * devices would corrupt it). users/<sandbox-id> records each sandbox using it; when the last one
 * is destroyed the host mount goes away, and the whole volume with it if it was made with
 * deleteOnSandboxTermination. A sandbox whose directory is gone no longer counts as a user.
 * <state>/volumes/.lock (flock) orders all of this between concurrent creates and destroys.
 *
 * In the sandbox: a detached clone of the source (open_tree(OPEN_TREE_CLONE), only that mount, no
 * submounts), idmapped through the sandbox's user namespace (on-disk id N shows as sandbox id N:
 * files sandbox root writes are owned by on-disk root), read-only when asked, always nosuid and
 * nodev, moved onto mountPath resolved inside the sandbox's root (RESOLVE_IN_ROOT: a symlink in the
 * image cannot aim it at a host path), never onto "/" or into /proc, /sys or /dev. PID 1 does
 * this after pivot_root and the host image's masks, as its last mount.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/runtime.h"
#include "shared/error.h"

#define VOLUME_DIR "volumes"
#define VOLUME_SIZE_DEFAULT (1ULL << 30)

/* A DNS label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters (what OpenSandbox allows). */
bool volume_name_valid(const char *name);

/*
 * Open the source of v for sandbox id: an O_PATH fd (close-on-exec) of the directory or file to
 * mount, *ret_dir telling which. A named volume is made here when missing (v->create), mounted on
 * the host when it is not, and id recorded among its users (undone by volume_release()).
 * Errors: RUNTIME_EVOL_DENIED, RUNTIME_EVOL_NOTFOUND, or what the host failed at.
 */
int volume_source_open(const struct runtime_config *cfg, const char *id,
		       const struct sandbox_volume *v, bool *ret_dir, struct error *err);

/* A detached mount of src for the sandbox: idmapped through userns_fd (-1: none), read-only when
 * v asks, nosuid and nodev. Returns its fd (close-on-exec). */
int volume_tree(int src, const struct sandbox_volume *v, int userns_fd, struct error *err);

/*
 * Move tree onto v->mount_path inside the root at root_path ("/" once the sandbox's root is the
 * process's own), resolved there with RESOLVE_IN_ROOT; missing directories (and, for a file, the
 * file) are made, owned by owner. Refuses "/" and anything in /proc, /sys, /dev, and a place
 * on one of the volumes attached before (earlier: their trees), whose content other sandboxes
 * write (RUNTIME_EVOL_MOUNTPATH). In the sandbox's mount namespace, as host root.
 */
int volume_attach(const char *root_path, int tree, const struct sandbox_volume *v, bool is_dir,
		  uid_t owner, const int *earlier, size_t n_earlier, struct error *err);

/* Sandbox id is gone: it no longer uses any named volume (see above). Idempotent, best effort. */
void volume_release(const struct runtime_config *cfg, const char *id);

/* Every named volume, by name; *ret is malloc'd. */
int volume_list(const struct runtime_config *cfg, struct volume_info **ret, size_t *ret_n,
		struct error *err);
/* Remove a named volume: -ENOENT when there is none, -EBUSY while a live sandbox uses it. */
int volume_delete(const struct runtime_config *cfg, const char *name, struct error *err);
