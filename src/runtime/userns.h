/*
 * User namespaces of sandboxes: sandbox root is not host root.
 *
 * Every sandbox gets its own range of USERNS_SIZE host ids, uid and gid alike: sandbox id N is
 * host id base + N. Ranges come from a host-wide pool of slots (a slot is a range), shared by every
 * corrald on the host, so no two live sandboxes share an id, whichever corrald made them. A slot is
 * held by a file <lock_dir>/<slot> made with O_EXCL whose content is the sandbox's state directory;
 * a slot whose directory no longer exists is taken back (its sandbox is gone).
 *
 * Owners in the sandbox: files of an --image-dir image keep their in-image owners through an
 * idmapped mount of the image (on-disk id N shows as sandbox id N). The host image is NOT idmapped:
 * the host's files show as owned by the overflow id (nobody), and sandbox root, whose capabilities
 * count only for ids mapped into its namespace, gets only the "other" permission bits on them. So
 * root-only host files stay unreadable even though the host's root file system is the image.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "shared/error.h"

#define USERNS_SIZE 65536u
#define USERNS_FIRST_ID 0x10000000u /* host id of slot 0's root; far above ordinary users */
#define USERNS_SLOTS 61439u         /* (2^32 - FIRST) / SIZE, less the slot holding id 2^32-1 */
#define USERNS_DEFAULT_LOCK_DIR "/run/corral/userns"

static inline uid_t userns_base(unsigned slot)
{
	return (uid_t)(USERNS_FIRST_ID + slot * USERNS_SIZE);
}

/* Reserve a free slot for the sandbox whose state directory is owner, starting the search at hint
 * (any number; e.g. a hash of the id). Host-wide and race-free between processes. */
int userns_reserve(const char *lock_dir, const char *owner, unsigned hint, unsigned *ret_slot,
		   struct error *err);
/* Give the slot back if owner still holds it; idempotent. Only once no process of the sandbox is
 * left. */
void userns_release(const char *lock_dir, unsigned slot, const char *owner);

/* A new user namespace mapping ids 0..USERNS_SIZE-1 to base..base+USERNS_SIZE-1, as an fd
 * (close-on-exec) for setns() and idmapped mounts. Made by a short-lived helper process. */
int userns_open(uid_t base, struct error *err);

/* Mount the tree at path read-only on target, idmapped through userns_fd (on-disk id N shows as
 * host id base + N). In the caller's mount namespace. */
int userns_idmap_mount(const char *path, const char *target, int userns_fd, struct error *err);

/* Whether the kernel and the file system at path support idmapped mounts: makes a detached
 * idmapped clone of path and throws it away. */
int userns_probe_idmap(const char *path, struct error *err);
