/*
 * Task images from registries: references, pulls over the OCI distribution API, and the verified,
 * content-addressed layer store that sandboxes stack as overlay lower layers.
 *
 * Store layout (everything root-only: <store> is 0700, because layers keep setuid-root files and
 * device nodes exactly as the image has them):
 *
 *   <state>/images/                 the store (IMAGE_STORE_DIR under the state dir)
 *     blobs/sha256/<hex>            manifests and configs, verified against their digest
 *     layers/<hex>/                 one layer, unpacked, named by its blob's (compressed) digest;
 *                                   only complete layers are here (unpacked in tmp/, then renamed)
 *     refs/<key>.json               one pulled image: name, manifest digest, layers (lowest first),
 *                                   Env, WorkingDir, User; key = sha256(name "\n" platform)
 *     tmp/                          downloads and half-unpacked layers; emptied at start
 *
 * Layers are verified (digest and size) before they are unpacked, and a layer's files carry their
 * in-image owners as on-disk ids: a sandbox sees them through an idmapped mount of layers/.
 *
 * The functions here block (network, disk): corrald calls them in a forked worker, never on its
 * event loop. image_record_exists() is a single stat and may run anywhere.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

#define IMAGE_STORE_DIR "images"
#define IMAGE_HEX_LEN 64
#define IMAGE_LAYERS_MAX 127 /* what Docker allows */

/* A reference resolved the way `docker pull` does. */
struct image_ref {
	char registry[256]; /* as named: "docker.io", "127.0.0.1:5000" */
	char host[256];     /* what is contacted: "registry-1.docker.io" for docker.io */
	char repo[256];     /* "library/python" */
	char tag[129];      /* "latest" when neither tag nor digest is given; "" with a digest only */
	char digest[72];    /* "sha256:<hex>" or "" */
	char name[800];     /* normalized: "docker.io/library/python:3.11", ".../x@sha256:..." */
};

/* "python:3.11", "ghcr.io/o/r@sha256:...", "localhost:5000/x". -EINVAL with a message naming the
 * rule that the string breaks. */
int image_ref_parse(const char *s, struct image_ref *ret, struct error *err);

enum image_pull_policy {
	IMAGE_PULL_IF_NOT_PRESENT = 0,
	IMAGE_PULL_ALWAYS,
	IMAGE_PULL_NEVER,
};
/* "Always", "IfNotPresent", "Never"; -EINVAL otherwise. */
int image_pull_policy_parse(const char *s, enum image_pull_policy *ret);

struct image_platform {
	char os[32];      /* "linux" */
	char arch[32];    /* "amd64" */
	char variant[32]; /* "" = any */
};

struct image_pull_opts {
	const char *store;                /* <state>/images */
	struct image_platform platform;   /* empty os/arch: linux/amd64 */
	const char *username, *password;  /* image.auth of the create request, or NULL */
	const char *auth_file;            /* ~/.docker/config.json format (--registry-auth), or NULL */
	const char *const *insecure;      /* NULL-terminated registries reachable over plain HTTP */
	const char *const *mirrors;       /* NULL-terminated mirrors of docker.io ("host[:port]"),
					   * tried in order before Docker Hub itself */
	long timeout_s;                   /* for the whole pull; 0 = none */
	/* Optional: bytes of blobs downloaded so far and to download in all (the layers not yet in
	 * the store, and the config), updated as the pull goes; may live in memory shared with the
	 * process that watches the pull. */
	volatile uint64_t *progress_done, *progress_total;
	/* The most the image's new layers may unpack to, in file bytes and in entries (files,
	 * directories, links...); 0 = IMAGE_UNPACKED_MAX_DEFAULT, IMAGE_ENTRIES_MAX_DEFAULT. A pull
	 * past either fails with -EFBIG, and the layer being unpacked is dropped whole. */
	uint64_t unpacked_max, entries_max;
};

#define IMAGE_UNPACKED_MAX_DEFAULT (32ULL << 30)
#define IMAGE_ENTRIES_MAX_DEFAULT 4000000ULL

/* What one pull may still write: counters shared by the processes unpacking its layers. */
struct image_budget {
	uint64_t max_bytes, max_entries;
	uint64_t *bytes, *entries; /* counted so far (in memory every unpacking process shares) */
	const char *limit_name;    /* how the operator sets max_bytes, for the message */
};

/*
 * Pull ref into the store: manifest (index/list resolved to the platform), config and every layer,
 * each verified against its digest and size (a mismatch discards the blob), layers unpacked once,
 * then the ref's record written. Failures name the cause and carry the registry's message:
 *   -EACCES unauthorized, -ENOENT not found, -ENOEXEC no matching platform, -EBADMSG digest or
 *   size mismatch, -EHOSTUNREACH registry unreachable, -ETIMEDOUT timeout, -ENOSPC disk full,
 *   -EPROTO a reply that is not a valid manifest/config/layer (an escaping layer is one),
 *   -EFBIG the image unpacks to more than o->unpacked_max or o->entries_max.
 */
int image_pull(const struct image_pull_opts *o, const struct image_ref *ref, struct error *err);

/*
 * Import an OCI image layout (a directory, or a tar of one: what `docker save` writes since
 * Docker 25, `skopeo copy ... oci-archive:`) as ref: the descriptor tagged ref->tag in its
 * index.json (or its only one), resolved to the platform, every blob checked against its digest
 * and size, layers unpacked as a pull's are. Errors as image_pull()'s.
 */
int image_import(const struct image_pull_opts *o, const char *path, const struct image_ref *ref,
		 struct error *err);

/* Whether the store holds a complete record for ref on the platform (a stat). */
bool image_record_exists(const char *store, const struct image_ref *ref,
			 const struct image_platform *p);

/* What a sandbox needs of a pulled image. */
struct image_info {
	char **layers;   /* hex digests, lowest first, NULL-terminated: dirs under <store>/layers */
	size_t n_layers;
	char **env;      /* config Env, "K=V", NULL-terminated (may be empty) */
	char *workdir;   /* config WorkingDir or NULL */
	char *user;      /* config User or NULL */
};
#define IMAGE_INFO_INIT { 0 }

/* Read ref's record; -ENOENT when the image is not in the store (or a layer is missing). */
int image_info_load(const char *store, const struct image_ref *ref, const struct image_platform *p,
		    struct image_info *ret, struct error *err);
void image_info_clear(struct image_info *info);

/*
 * The store's lock (<store>/lock, flock): pulls and creates hold it shared while they use layers,
 * the garbage collector exclusively. Blocks; returns the fd (close it to unlock) or -errno.
 */
int image_store_lock(const char *store, bool exclusive);

/*
 * Remove every layer no image record references and no sandbox uses (the layer lists in
 * <sandboxes_dir>/<id>/IMAGE_LAYERS_FILE), under the exclusive lock. Each doomed layer is renamed
 * into tmp/ first, so it disappears at once and a crash leaves only tmp/ leftovers.
 */
#define IMAGE_LAYERS_FILE "image-layers"
int image_gc(const char *store, const char *sandboxes_dir, unsigned *ret_removed,
	     struct error *err);

/* What layer hex takes on disk (measured once when unpacked, kept in <store>/sizes/<hex>), and
 * what all layers of the store take. */
uint64_t image_layer_usage(const char *store, const char *hex);
int image_store_usage(const char *store, uint64_t *ret);

/* The record of ref was used now (a create): its mtime is the least-recently-used clock. */
void image_record_touch(const char *store, const struct image_ref *ref,
			const struct image_platform *p);

/*
 * --image-store-max: while the store's layers take more than max bytes, forget the least recently
 * used image (oldest record mtime) that is not named keep and that no sandbox uses (its layer
 * list is no sandbox's IMAGE_LAYERS_FILE under sandboxes_dir), then collect the layers nothing
 * references any more (a layer a sandbox uses stays, whatever image it came with).
 * Stops when under max or when nothing else may go. *ret_images: images forgotten.
 */
int image_evict(const char *store, const char *sandboxes_dir, uint64_t max, const char *keep,
		unsigned *ret_images, struct error *err);

/* Create the store's directories (root-only), empty tmp/ of a previous run's leftovers, and drop
 * image records whose layers are not all in the store (the image is pulled again when needed). */
int image_store_init(const char *store, struct error *err);

/*
 * confine.c: what a layer child does to itself before it touches the network or the blob, so that
 * a bug in libcurl, OpenSSL, a decompressor, libarchive or the path checks can write beneath
 * write_path and little else (the layers are attacker-controlled). Best effort: each step the
 * kernel refuses is skipped and left out of the level returned (IMAGE_CONFINED_* bits); the caller
 * goes on. Irreversible: only in a child made for it.
 */
#define IMAGE_CONFINED_MOUNTS (1u << 0)         /* a mount namespace, read-only but write_path */
#define IMAGE_CONFINED_LANDLOCK_FS (1u << 1)    /* writes beneath write_path, narrow reads */
#define IMAGE_CONFINED_LANDLOCK_NET (1u << 2)   /* TCP connect to ports[] only, no bind */
#define IMAGE_CONFINED_LANDLOCK_SCOPE (1u << 3) /* no signals, no abstract sockets out */
#define IMAGE_CONFINED_RLIMITS (1u << 4)        /* FSIZE, NOFILE, CORE 0, not dumpable */
#define IMAGE_CONFINED_CAPS (1u << 5)           /* the file-owner caps unpacking needs only */
#define IMAGE_CONFINED_SECCOMP (1u << 6)        /* the deny list of confine.c */
#define IMAGE_CONFINED_ALL ((1u << 7) - 1)
#define IMAGE_CONFINE_NOFILE 1024
#define IMAGE_CONFINE_PORTS_MAX 16

struct image_confine {
	const char *write_path; /* the work directory: the only place the child may write */
	const char *read_path;  /* another tree it may read (an import's image layout), or NULL */
	uint16_t ports[IMAGE_CONFINE_PORTS_MAX]; /* TCP ports connect() may reach (none: no TCP) */
	size_t n_ports;
	bool any_port;          /* leave TCP alone (the ports could not be known) */
	uint64_t fsize_max;     /* RLIMIT_FSIZE; 0 = unchanged */
	bool no_caps;           /* keep no capability at all (nothing to unpack) */
};
unsigned image_confine(const struct image_confine *c);
/* Compile what image_confine() loads (the seccomp filter: milliseconds) once, in the process that
 * forks the confined children; optional (each child compiles it otherwise). 0 or -errno. */
int image_confine_prepare(void);
/* What image_confine() can reach on this kernel, without changing the calling process. */
unsigned image_confine_probe(void);
/* "read-only mount view, landlock-fs, ..." or "none". */
const char *image_confine_describe(unsigned level, char *buf, size_t len);

/*
 * store.c: confine a layer child whose work directory is work (the layer is unpacked into
 * work/root, a download goes to work/blob): the ports of reg's registry (its own, 443 for
 * redirects to blob storage, 80 when it is insecure, the proxies of the environment; NULL: no
 * TCP at all), read_path readable (an import's layout, or NULL), files up to fsize_max bytes.
 * The one call every layer child makes; exported for the confinement test.
 */
struct registry;
unsigned image_layer_confine(const char *work, struct registry *reg, const char *read_path,
			     uint64_t fsize_max);
/*
 * store.c: confine the manifest child of a registry pull (it GETs the manifest, resolves an index,
 * answers the auth challenge and GETs the config, writing what it got beneath work for the pull
 * worker to verify): as a layer child, but with no capability at all and files up to
 * IMAGE_META_FSIZE_MAX bytes. Exported for the confinement test.
 */
#define IMAGE_META_FSIZE_MAX (9ULL << 20)
unsigned image_meta_confine(const char *work, struct registry *reg);

/* layer.c: unpack the tar blob (plain, gzip or zstd) at blob into the existing empty directory
 * dir, turning OCI whiteouts into overlayfs ones. Any entry that would land outside dir (absolute
 * path, "..", a path or hard link through a symlink) fails with -EPROTO: the layer is invalid.
 * Every entry and every byte of file data written is counted against budget (NULL: none) as it
 * is written; past its limits the unpack stops with -EFBIG (the caller removes dir). */
int image_layer_unpack(const char *blob, const char *dir, const struct image_budget *budget,
		       struct error *err);
/* The same, for a process without CAP_SYS_ADMIN (a confined layer child), which may not write
 * trusted.* xattrs: with opaque_fd >= 0, each opaque directory is not marked but its path
 * (relative to dir, NUL-terminated) is written to opaque_fd, for image_layer_mark_opaque().
 * With diff_id ("sha256:<hex>", the image config's rootfs.diff_ids entry), the uncompressed tar
 * (all of it, past its end-of-archive blocks too) is hashed as it is read and must match:
 * -EBADMSG otherwise (what the layer wrote is the caller's to remove). */
int image_layer_unpack_list_opaque(const char *blob, const char *dir,
				   const struct image_budget *budget, int opaque_fd,
				   const char *diff_id, struct error *err);
/* Mark the directories listed at list (image_layer_unpack_list_opaque()'s file, written by a
 * process not trusted: bounded, each path checked again) opaque, beneath dir without following
 * any symlink. A listed path that is no longer a directory of the layer is skipped. */
int image_layer_mark_opaque(const char *dir, const char *list, struct error *err);
