/*
 * Unpack one layer with libarchive into its own directory.
 *
 * Every entry's path (and hard link target) is checked before libarchive writes it: relative
 * after dropping "./", no ".." component, and its parent, when it exists, reached from the layer
 * directory without following any symlink (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). A
 * symlink already at an entry's own name is removed first, so nothing is written through it.
 * libarchive's own SECURE_* checks stay on behind ours. Any violation makes the whole layer
 * invalid (-EPROTO): a layer that tries to escape is not half-trusted.
 *
 * OCI whiteouts become overlayfs ones: ".wh.NAME" a 0/0 character device NAME, ".wh..wh..opq"
 * the xattr trusted.overlay.opaque=y on its directory (set by the unconfined parent from the list
 * a confined layer child writes: image_layer_mark_opaque()). Owners are kept as numeric ids (no name
 * lookup), and so are modes with setuid bits, hard links, symlinks, device nodes and xattrs, except
 * trusted.* ones (overlayfs metadata such as trusted.overlay.redirect is ours to write, not the
 * image's).
 */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "images/images.h"
#include "shared/fsutil.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

/* An entry path without "." components and repeated or trailing slashes. -EPROTO for an absolute
 * path or a ".." component. */
static int clean_path(const char *in, char *out, size_t len)
{
	if (!in || in[0] == '/')
		return -EPROTO;
	size_t n = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = p + strcspn(p, "/");
		size_t cl = (size_t)(e - p);
		if (cl == 0)
			break;
		if (cl == 2 && p[0] == '.' && p[1] == '.')
			return -EPROTO;
		if (!(cl == 1 && p[0] == '.')) {
			if (n + cl + 2 > len)
				return -ENAMETOOLONG;
			if (n)
				out[n++] = '/';
			memcpy(out + n, p, cl);
			n += cl;
		}
		p = e;
	}
	out[n] = '\0';
	return 0;
}

static int open_beneath(int dfd, const char *rel, int flags)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dfd, rel[0] ? rel : ".", &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

/* The parent directory of rel (relative, clean): an fd, -ENOENT when it does not exist yet, or
 * -EPROTO when reaching it would cross a symlink or leave the layer. */
static int open_parent(int dfd, const char *rel, const char **ret_base)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(rel, '/');
	*ret_base = slash ? slash + 1 : rel;
	snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - rel) : 0, rel);
	int fd = open_beneath(dfd, parent, O_RDONLY | O_DIRECTORY);
	if (fd == -ELOOP || fd == -EXDEV || fd == -ENOTDIR)
		return -EPROTO;
	return fd;
}

/* mkdir -p of rel's parent below dfd, never through a symlink. */
static int make_parent(int dfd, const char *rel)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", rel);
	for (char *s = strchr(p, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		int fd = open_beneath(dfd, p, O_RDONLY | O_DIRECTORY);
		if (fd == -ENOENT) {
			if (mkdirat(dfd, p, 0755) < 0 && errno != EEXIST)
				return -errno;
			fd = open_beneath(dfd, p, O_RDONLY | O_DIRECTORY);
		}
		if (fd < 0)
			return fd == -ELOOP || fd == -EXDEV || fd == -ENOTDIR ? -EPROTO : fd;
		close(fd);
		*s = '/';
	}
	return 0;
}

static int whiteout(int dfd, const char *rel, const char *base, int opaque_fd, struct error *err)
{
	int r = make_parent(dfd, rel);
	const char *b;
	_cleanup_close_ int pfd = r < 0 ? r : open_parent(dfd, rel, &b);
	if (pfd < 0)
		return pfd == -EPROTO ? error_set(err, EPROTO,
						  "layer entry '%s' lies outside the layer (through a symlink)",
						  rel)
				      : error_set_errno(err, -pfd, "whiteout '%s'", rel);
	if (strcmp(base, WH_OPAQUE) == 0 && opaque_fd >= 0) {
		/* Marked by image_layer_mark_opaque(): the directory, relative to the layer. */
		size_t n = (size_t)(base - rel);
		int k = fd_write_all(opaque_fd, n ? rel : ".", n ? n - 1 : 1);
		if (k == 0)
			k = fd_write_all(opaque_fd, "", 1);
		return k < 0 ? error_set_errno(err, -k, "list '%s' as opaque", rel) : 0;
	}
	if (strcmp(base, WH_OPAQUE) == 0) {
		if (fsetxattr(pfd, "trusted.overlay.opaque", "y", 1, 0) < 0)
			return error_set_errno(err, errno, "mark '%s' opaque", rel);
		return 0;
	}
	const char *name = base + strlen(WH_PREFIX);
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return error_set(err, EPROTO, "layer entry '%s' is an invalid whiteout", rel);
	int k = fs_remove_tree_at(pfd, name);
	if (k < 0 && k != -ENOENT)
		return error_set_errno(err, -k, "remove '%s' for its whiteout", rel);
	if (mknodat(pfd, name, S_IFCHR | 0, makedev(0, 0)) < 0)
		return error_set_errno(err, errno, "whiteout '%s'", rel);
	return 0;
}

/* Keep every xattr but trusted.* ones. */
static void filter_xattrs(struct archive_entry *e)
{
	if (archive_entry_xattr_reset(e) == 0)
		return;
	struct {
		char *name;
		void *val;
		size_t size;
	} keep[64];
	size_t n = 0;
	const char *name;
	const void *val;
	size_t size;
	bool drop = false;
	while (archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK) {
		if (strncmp(name, "trusted.", 8) == 0 || n == ARRAY_SIZE(keep)) {
			drop = true;
			continue;
		}
		keep[n].name = strdup(name);
		keep[n].val = malloc(size ? size : 1);
		if (keep[n].val)
			memcpy(keep[n].val, val, size);
		keep[n].size = size;
		n++;
	}
	if (drop) {
		archive_entry_xattr_clear(e);
		for (size_t i = 0; i < n; i++)
			if (keep[i].name && keep[i].val)
				archive_entry_xattr_add_entry(e, keep[i].name, keep[i].val,
							      keep[i].size);
	}
	for (size_t i = 0; i < n; i++) {
		free(keep[i].name);
		free(keep[i].val);
	}
}

static int archive_fail(struct archive *a, const char *what, const char *rel, struct error *err)
{
	int e = archive_errno(a);
	const char *m = archive_error_string(a);
	/* libarchive says only "Write failed": name the cause, as a full blob download does. */
	if (e == ENOSPC || e == EDQUOT)
		return error_set(err, ENOSPC, "%s '%s': %s", what, rel, strerror(e));
	if (e == ENOMEM)
		return error_set(err, ENOMEM, "%s '%s': out of memory", what, rel);
	return error_set(err, EPROTO, "%s '%s': %s", what, rel, m ? m : "failed");
}

/* "32.0 GiB", "64.0 MiB" */
static void human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ULL << 30))
		snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ULL << 30));
	else
		snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ULL << 20));
}

/* Count bytes and entries of the pull; -EFBIG past a limit. */
static int budget_take(const struct image_budget *b, uint64_t bytes, uint64_t entries,
		       const char *rel, struct error *err)
{
	if (!b)
		return 0;
	uint64_t nb = __atomic_add_fetch(b->bytes, bytes, __ATOMIC_RELAXED);
	uint64_t ne = __atomic_add_fetch(b->entries, entries, __ATOMIC_RELAXED);
	char lim[32];
	human(b->max_bytes, lim, sizeof(lim));
	if (b->max_bytes && nb > b->max_bytes)
		return error_set(err, EFBIG,
				 "the image unpacks to more than %s, the limit of %s: stopped at '%s'",
				 lim, b->limit_name ? b->limit_name : "an image", rel);
	if (b->max_entries && ne > b->max_entries)
		return error_set(err, EFBIG,
				 "the image has more than %llu files and directories, the limit of an image: stopped at '%s'",
				 (unsigned long long)b->max_entries, rel);
	return 0;
}

/*
 * What an entry takes on the state fs besides its file data, counted against the byte limit too:
 * an inode and a block (a directory's names, a symlink's target: a layer of 24,000 symlinks with
 * long targets took 94 MiB and counted 0), and its xattrs. Generous for small files, on purpose.
 */
#define ENTRY_COST 4096
static uint64_t entry_meta_bytes(struct archive_entry *e)
{
	uint64_t n = ENTRY_COST;
	const char *name;
	const void *val;
	size_t size;
	if (archive_entry_xattr_reset(e) > 0)
		while (archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK)
			n += strlen(name) + size;
	return n;
}

static int unpack_entries(struct archive *a, struct archive *w, int dfd,
			  const struct image_budget *budget, int opaque_fd, struct error *err)
{
	struct archive_entry *e;
	char rel[PATH_MAX], link[PATH_MAX];
	int r;
	while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		const char *path = archive_entry_pathname(e);
		int k = clean_path(path, rel, sizeof(rel));
		if (k < 0)
			return error_set(err, EPROTO, "layer entry '%s' lies outside the layer (%s)",
					 path ? path : "", k == -EPROTO ? "absolute or '..'" : "too long");
		if ((k = budget_take(budget, entry_meta_bytes(e), 1, rel, err)) < 0)
			return k;
		if (!rel[0]) { /* the layer's root: its mode and owner only */
			if (archive_entry_filetype(e) == AE_IFDIR &&
			    (fchmod(dfd, archive_entry_perm(e) & 07777) < 0 ||
			     fchown(dfd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0))
				return error_set_errno(err, errno, "set the layer root's mode");
			continue;
		}
		const char *base;
		_cleanup_close_ int pfd = open_parent(dfd, rel, &base);
		if (pfd == -EPROTO)
			return error_set(err, EPROTO,
					 "layer entry '%s' lies outside the layer (its directory is reached through a symlink)",
					 path);
		if (pfd < 0 && pfd != -ENOENT)
			return error_set_errno(err, -pfd, "open the directory of '%s'", rel);
		if (strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) == 0) {
			if ((k = whiteout(dfd, rel, base, opaque_fd, err)) < 0)
				return k;
			continue;
		}
		const char *hl = archive_entry_hardlink(e);
		if (hl) {
			if (clean_path(hl, link, sizeof(link)) < 0 || !link[0])
				return error_set(err, EPROTO,
						 "layer entry '%s' is a hard link to '%s', outside the layer",
						 path, hl);
			const char *lb;
			_cleanup_close_ int lfd = open_parent(dfd, link, &lb);
			struct stat st;
			if (lfd == -EPROTO)
				return error_set(err, EPROTO,
						 "layer entry '%s' is a hard link to '%s', outside the layer (through a symlink)",
						 path, hl);
			if (lfd < 0 || fstatat(lfd, lb, &st, AT_SYMLINK_NOFOLLOW) < 0)
				return error_set(err, EPROTO,
						 "layer entry '%s' is a hard link to '%s', which is not an earlier entry of the layer",
						 path, hl);
			archive_entry_set_hardlink(e, link);
		}
		/* Never write through a symlink at the entry's own name: replace it. */
		struct stat st;
		if (pfd >= 0 && fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode) && unlinkat(pfd, base, 0) < 0)
			return error_set_errno(err, errno, "replace the symlink '%s'", rel);
		filter_xattrs(e);
		archive_entry_set_pathname(e, rel);
		if (archive_write_header(w, e) < ARCHIVE_WARN)
			return archive_fail(w, "unpack", rel, err);
		if (archive_entry_size(e) > 0 && !hl) {
			const void *buf;
			size_t len;
			la_int64_t off;
			/* A failed write() (ENOSPC...) is only ARCHIVE_WARN to libarchive: anything
			 * but ARCHIVE_OK leaves the file short, and a short layer is no layer. */
			/* Counted before each write: the layer never holds more than the limit. */
			while ((k = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
				int b = budget_take(budget, len, 0, rel, err);
				if (b < 0)
					return b;
				if (archive_write_data_block(w, buf, len, off) != ARCHIVE_OK)
					return archive_fail(w, "write", rel, err);
			}
			if (k != ARCHIVE_EOF)
				return archive_fail(a, "read", rel, err);
		}
		if (archive_write_finish_entry(w) < ARCHIVE_WARN)
			return archive_fail(w, "finish", rel, err);
	}
	if (r != ARCHIVE_EOF)
		return archive_fail(a, "read layer at", rel, err);
	if (archive_write_close(w) < ARCHIVE_WARN)
		return archive_fail(w, "finish layer in", ".", err);
	return 0;
}

int image_layer_unpack(const char *blob, const char *dir, const struct image_budget *budget,
		       struct error *err)
{
	return image_layer_unpack_list_opaque(blob, dir, budget, -1, NULL, err);
}

/*
 * The blob decompressed by one reader (format "raw": every filter, no format) and fed to the tar
 * reader through its read callback, hashed on the way when a diff_id is to be checked: one
 * decompression, the hash over exactly the bytes the tar reader is given, no copy (the raw
 * reader hands out its filter's buffer).
 */
struct tar_stream {
	struct archive *raw;
	EVP_MD_CTX *md; /* NULL: no diff_id to check */
};

static la_ssize_t tar_stream_read(struct archive *a, void *arg, const void **buf)
{
	struct tar_stream *s = arg;
	size_t len = 0;
	la_int64_t off;
	int r = archive_read_data_block(s->raw, buf, &len, &off);
	if (r == ARCHIVE_EOF)
		return 0;
	if (r != ARCHIVE_OK) {
		const char *m = archive_error_string(s->raw);
		archive_set_error(a, archive_errno(s->raw) > 0 ? archive_errno(s->raw) : EIO, "%s",
				  m ? m : "decompression failed");
		return ARCHIVE_FATAL;
	}
	if (s->md && len && EVP_DigestUpdate(s->md, *buf, len) != 1) {
		archive_set_error(a, ENOMEM, "hash the layer");
		return ARCHIVE_FATAL;
	}
	return (la_ssize_t)len;
}

/* What follows the tar's end-of-archive blocks is part of the diff_id too: hashed, and counted
 * against the budget (never written, but decompressing it costs as much as data). */
static int tar_stream_drain(struct tar_stream *s, const struct image_budget *budget,
			    struct error *err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	int r, k;
	while ((r = archive_read_data_block(s->raw, &buf, &len, &off)) == ARCHIVE_OK) {
		if ((k = budget_take(budget, len, 0, "(after the end of the tar)", err)) < 0)
			return k;
		if (len && EVP_DigestUpdate(s->md, buf, len) != 1)
			return error_set(err, ENOMEM, "hash the layer");
	}
	return r == ARCHIVE_EOF ? 0 : archive_fail(s->raw, "read layer at", "(its end)", err);
}

static int diff_id_check(struct tar_stream *s, const char *diff_id, struct error *err)
{
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned int dl = 0;
	char got[72] = "sha256:";
	if (EVP_DigestFinal_ex(s->md, d, &dl) != 1 || dl != 32)
		return error_set(err, ENOMEM, "hash the layer");
	for (unsigned i = 0; i < 32; i++)
		snprintf(got + 7 + 2 * i, 3, "%02x", d[i]);
	if (strcmp(got, diff_id) != 0)
		return error_set(err, EBADMSG,
				 "digest mismatch: the layer unpacks to a tar of digest %s, the image config's diff_id is %s; discarded",
				 got, diff_id);
	return 0;
}

int image_layer_unpack_list_opaque(const char *blob, const char *dir,
				   const struct image_budget *budget, int opaque_fd,
				   const char *diff_id, struct error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return error_set_errno(err, errno, "open '%s'", dir);
	_cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cwd < 0)
		return error_set_errno(err, errno, "open the working directory");
	struct tar_stream s = {.raw = archive_read_new()};
	struct archive *a = archive_read_new();
	struct archive *w = archive_write_disk_new();
	int r;
	if (!a || !w || !s.raw || (diff_id && !(s.md = EVP_MD_CTX_new())) ||
	    (s.md && EVP_DigestInit_ex(s.md, EVP_sha256(), NULL) != 1)) {
		r = error_set(err, ENOMEM, "libarchive");
		goto out;
	}
	archive_read_support_filter_gzip(s.raw);
	archive_read_support_filter_zstd(s.raw);
	archive_read_support_filter_none(s.raw);
	archive_read_support_format_raw(s.raw);
	archive_read_support_filter_none(a);
	archive_read_support_format_tar(a);
	/* Numeric owners: no archive_write_disk_set_standard_lookup(). */
	archive_write_disk_set_options(
	    w, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
		   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
		   ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
	struct archive_entry *re;
	if (archive_read_open_filename(s.raw, blob, 1 << 16) != ARCHIVE_OK ||
	    archive_read_next_header(s.raw, &re) != ARCHIVE_OK) {
		r = archive_fail(s.raw, "open layer", "blob", err);
		goto out;
	}
	if (archive_read_open(a, &s, NULL, tar_stream_read, NULL) != ARCHIVE_OK) {
		r = archive_fail(a, "open layer", "blob", err);
		goto out;
	}
	/* libarchive writes relative to the working directory. */
	if (fchdir(dfd) < 0) {
		r = error_set_errno(err, errno, "chdir '%s'", dir);
		goto out;
	}
	r = unpack_entries(a, w, dfd, budget, opaque_fd, err);
	/* Freed here: its deferred directory fix-ups are relative to the working directory. */
	archive_write_free(w);
	w = NULL;
	if (fchdir(cwd) < 0 && r == 0)
		r = error_set_errno(err, errno, "chdir back");
	if (r == 0 && s.md && (r = tar_stream_drain(&s, budget, err)) == 0)
		r = diff_id_check(&s, diff_id, err);
	if (r == 0 && syncfs(dfd) < 0)
		r = error_set_errno(err, errno, "sync '%s'", dir);
out:
	if (w)
		archive_write_free(w);
	if (a)
		archive_read_free(a);
	if (s.raw)
		archive_read_free(s.raw);
	EVP_MD_CTX_free(s.md);
	return r; /* the caller names the layer: no host path in a message a client sees */
}

/* A list longer than this is no list an unpack of IMAGE_ENTRIES_MAX_DEFAULT entries writes. */
#define OPAQUE_LIST_MAX (256ULL << 20)

int image_layer_mark_opaque(const char *dir, const char *list, struct error *err)
{
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return error_set_errno(err, errno, "open '%s'", dir);
	/* Written by the confined child: never a FIFO to block on, never through a symlink. */
	int fd = open(list, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : error_set_errno(err, errno, "open the opaque list");
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > OPAQUE_LIST_MAX) {
		close(fd);
		return error_set(err, EPROTO, "the opaque list is not a regular file of at most %llu bytes",
				 OPAQUE_LIST_MAX);
	}
	_cleanup_fclose_ FILE *f = fdopen(fd, "re");
	if (!f) {
		close(fd);
		return error_set_errno(err, errno, "read the opaque list");
	}
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	char rel[PATH_MAX];
	while ((n = getdelim(&line, &cap, '\0', f)) > 0) {
		if (line[n - 1] == '\0')
			n--;
		line[n] = '\0';
		if ((size_t)n >= sizeof(rel) || clean_path(line, rel, sizeof(rel)) < 0)
			return error_set(err, EPROTO, "the opaque list names an invalid path");
		_cleanup_close_ int od = open_beneath(dfd, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
		if (od == -ENOENT || od == -ENOTDIR || od == -ELOOP || od == -EXDEV)
			continue; /* replaced by a later entry of the layer: nothing left to mark */
		if (od < 0)
			return error_set_errno(err, -od, "open '%s' to mark it opaque", rel);
		if (fsetxattr(od, "trusted.overlay.opaque", "y", 1, 0) < 0)
			return error_set_errno(err, errno, "mark '%s' opaque", rel);
	}
	if (ferror(f))
		return error_set_errno(err, errno ? errno : EIO, "read the opaque list");
	return 0;
}
