/*
 * The ephemeral-storage limit of a sandbox's writable layer.
 *
 * The state dir's file system may not support project quotas (this host's ext4 root is mounted
 * without prjquota), so the limit is enforced by giving the layer a file system of its own: an
 * image file of exactly the limit, ext4 without a journal (the layer dies with the sandbox anyway),
 * attached to a loop device with autoclear and mounted at <sandbox>/disk; the overlay's upper and
 * work dirs live in it. A write past the limit fails with ENOSPC inside the sandbox; on the host
 * the image never grows beyond the limit (sparse: it only takes what was written).
 *
 * Cheap enough for every create (corrald applies a default limit to every sandbox):
 *  - mkfs.ext4 runs once per size, not per sandbox: <state>/disks/ext4-v2-<bytes>.img is a
 *    formatted template (upper/ and work/ already made, no resize inode: ~240 KB of data for
 *    10Gi). It is made as an unnamed O_TMPFILE and linked into place only once complete and
 *    fsync'd, so a crash never leaves a half-made template under that name. At most
 *    DISK_TEMPLATES_MAX are kept (oldest removed), so odd sizes cannot fill the directory.
 *  - A create attaches a fresh, empty image with LOOP_CONFIGURE (4 KiB logical blocks), writes
 *    the template's data extents through the device (they stay in its page cache, so the mount
 *    reads them without waiting for the loop worker) and mounts it with noinit_itable (the inode
 *    tables of a sparse image read as zeros already: no background zeroing thread) and nobarrier
 *    (no flush of the volatile layer ever reaches the image's file: fsync in the sandbox does not
 *    sync the host's disk). Measured here: ~0.6 ms in all; 1.2 when copying into the file before
 *    attaching (then LOOP_CONFIGURE flushes it first and the mount reads through the loop
 *    worker); ~30 ms with mkfs per create. O_DIRECT in the sandbox must be 4 KiB aligned.
 *  - Teardown drops what was not yet written (disk_discard) instead of writing it out.
 *
 * The image has no name: it is an O_TMPFILE in a detached clone of <state>/disks (open_tree), so
 * /sys/block/loopN/loop/backing_file shows "/#<inode> (deleted)": no sandbox id, no host path. The
 * loop device holds the only reference to the file and the mount holds the loop device, so the
 * image lives exactly as long as the last mount of the layer (the host's <sandbox>/disk or the
 * sandbox's own copy of it); its space returns to the host by itself after that, across corrald
 * restarts and crashes alike. Nothing is left to remove, and a crash half-way through a create
 * leaves no file behind: before LOOP_CONFIGURE only our descriptor holds the image.
 *
 * Usable space is the limit less ext4's metadata (measured: 58.7 MiB of 64Mi, 992 MiB of 1Gi).
 * tmpfs with size= was rejected: its pages are charged to the writer's memory cgroup, so a disk
 * limit would eat the memory limit.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

#define DISK_DIR "disks"   /* <state>/disks: the templates, and the stage dir mkfs copies in */
#define DISK_IMAGE "disk.img" /* named image of a sandbox made by an older corrald (removed) */
#define DISK_MOUNT "disk"
#define DISK_MIN_BYTES (8ULL << 20) /* ext4 needs a few MiB for itself */
#define DISK_TEMPLATES_MAX 8
/* <state>/disks/ext4-v2-<bytes>.img. Bump the version when the mkfs options or the template's
 * content change: old templates are then unused (and trimmed away as new ones are made). */
#define DISK_TEMPLATE_PREFIX "ext4-v2-"

/*
 * Make sure the template for limit_bytes exists under <state_dir>/disks (mkfs.ext4 if not), so the
 * next create of that size is quick; also checks that a layer can be made at all (mkfs.ext4
 * installed). Blocking (~20 ms when it formats).
 */
int disk_template_prepare(const char *state_dir, uint64_t limit_bytes, struct error *err);

/*
 * Make and mount the layer file system of a sandbox: dir is <state_dir>/sandboxes/<id>. Mounts an
 * image of limit_bytes on dir/disk (made here if missing), holding dir/disk/upper and
 * dir/disk/work. Blocking (formats a template first when none of this size exists).
 */
int disk_setup(const char *state_dir, const char *dir, uint64_t limit_bytes, struct error *err);

/*
 * Before a dead sandbox's layer is unmounted for good: drop what the kernel has not written to the
 * image yet instead of writing it out through the loop device just to free it (a sandbox that
 * wrote 100 MB: unmount 10 ms instead of 120, and no host I/O). Acts only when dir/disk is the root
 * of an ext4 file system on a loop device; best effort.
 */
void disk_discard(const char *dir);

/* mkfs.ext4 (4 KiB blocks, no root reserve) on the open file img_fd, holding the contents of the
 * directory stage (NULL: empty); with a journal or without one (a layer that dies with its
 * sandbox). Its stderr becomes the message. Blocking (tens of ms). */
int disk_mkfs(int img_fd, const char *stage, bool journal, struct error *err);

/* Attach img_fd to a free loop device with autoclear (released once nothing holds it) and 4 KiB
 * logical blocks; its path in dev. Returns the device's fd: until a mount holds the device,
 * closing it frees the device. */
int disk_loop_attach(int img_fd, char *dev, size_t len, struct error *err);
