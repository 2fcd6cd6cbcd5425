/*
 * The ephemeral-storage limit of a sandbox's writable layer.
 *
 * The state dir's file system may not support project quotas (this host's ext4 root is mounted
 * without prjquota), so the limit is enforced by giving the layer a file system of its own: a
 * sparse file <sandbox>/disk.img of exactly the limit, formatted ext4 (no journal: the layer dies
 * with the sandbox anyway), attached to a loop device with autoclear and mounted at
 * <sandbox>/disk; the overlay's upper and work dirs live in it. A write past the limit fails with
 * ENOSPC inside the sandbox; on the host the image never grows beyond the limit (sparse: it only
 * takes what was written). Cost, measured on this host: ~30 ms of mkfs plus the loop set-up per
 * create with a limit; nothing without one. tmpfs with size= was rejected: its pages are charged to
 * the writer's memory cgroup, so a disk limit would eat the memory limit.
 *
 * Usable space is the limit less ext4's metadata (measured: 58.7 MiB of 64Mi, 989 MiB of 1Gi).
 */
#pragma once

#include <stdint.h>

#include "shared/error.h"

#define DISK_IMAGE "disk.img"
#define DISK_MOUNT "disk"
#define DISK_MIN_BYTES (8ULL << 20) /* ext4 needs a few MiB for itself */

/* Make and mount the layer file system of a sandbox: dir is <state>/sandboxes/<id>. Creates
 * dir/disk.img and mounts it on dir/disk (which must exist), then dir/disk/upper and dir/disk/work.
 * Blocking (runs mkfs.ext4). */
int disk_setup(const char *dir, uint64_t limit_bytes, struct error *err);
