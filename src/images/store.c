/* The store and the pull: manifests resolved to one platform, blobs verified, layers unpacked
 * into place, then the image's record. Layout and guarantees in images.h. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "images/registry.h"
#include "shared/fsutil.h"
#include "shared/timeutil.h"
#include "shared/strv.h"

#define CONFIG_MAX (8u << 20)

static const char *const subdirs[] = {"blobs", "blobs/sha256", "layers",  "refs",
				      "tmp",   "sizes",	       "partial", "diffids"};

/* A partial download that a later pull of the layer may resume: a plain file of the store's
 * (never a link a confined child made), with fewer bytes than the blob (size 0: unknown). */
static bool partial_ok(const char *path, uint64_t size)
{
	struct stat st;
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
	       st.st_size > 0 && (!size || (uint64_t)st.st_size < size);
}

/* A layer's work directory is tmp/layer-<hex>-XXXXXX: what a download cut short there (corrald
 * killed mid-pull) left in its blob goes to partial/<hex>, for the next pull to resume. */
static void keep_partials(const char *store)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s/tmp", store);
	DIR *d = opendir(tmp);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		const char *hex = de->d_name + 6;
		if (strncmp(de->d_name, "layer-", 6) != 0 || strlen(hex) != IMAGE_HEX_LEN + 7 ||
		    strspn(hex, "0123456789abcdef") != IMAGE_HEX_LEN || hex[IMAGE_HEX_LEN] != '-')
			continue;
		char from[PATH_MAX + 300], to[PATH_MAX + 100];
		snprintf(from, sizeof(from), "%s/%s/blob", tmp, de->d_name);
		snprintf(to, sizeof(to), "%s/partial/%.64s", store, hex);
		if (partial_ok(from, 0))
			(void)rename(from, to);
	}
	if (d)
		closedir(d);
}

static void path_in(char *buf, size_t len, const char *store, const char *fmt, ...)
    _printf_(4, 5);
static void path_in(char *buf, size_t len, const char *store, const char *fmt, ...)
{
	int n = snprintf(buf, len, "%s/", store);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - (size_t)n, fmt, ap);
	va_end(ap);
}

int image_store_init(const char *store, struct error *err)
{
	char p[PATH_MAX];
	int r = fs_mkdir_p(store, 0700);
	if (r < 0 || chmod(store, 0700) < 0)
		return error_set_errno(err, r < 0 ? -r : errno, "image store '%s'", store);
	path_in(p, sizeof(p), store, "partial");
	if (mkdir(p, 0700) == 0 || errno == EEXIST)
		keep_partials(store);
	path_in(p, sizeof(p), store, "tmp");
	if ((r = fs_remove_tree(p)) < 0)
		return error_set_errno(err, -r, "empty '%s'", p);
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++) {
		path_in(p, sizeof(p), store, "%s", subdirs[i]);
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return error_set_errno(err, errno, "mkdir '%s'", p);
	}
	/* A record whose layers are not all there (removed by hand, a damaged disk) is dropped, so
	 * the next create pulls the image again instead of failing on it. Unreadable records too. */
	path_in(p, sizeof(p), store, "refs");
	DIR *d = opendir(p);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char rp[PATH_MAX + 300], lp[PATH_MAX + 100];
		path_in(rp, sizeof(rp), store, "refs/%s", de->d_name);
		json_t *j = json_load_file(rp, 0, NULL), *x;
		json_t *layers = json_object_get(j, "layers");
		bool ok = json_array_size(layers) > 0;
		size_t i;
		json_array_foreach(layers, i, x) {
			const char *h = json_string_value(x);
			if (!h || strlen(h) != IMAGE_HEX_LEN || strchr(h, '/')) {
				ok = false;
				break;
			}
			path_in(lp, sizeof(lp), store, "layers/%s", h);
			if (access(lp, F_OK) < 0) {
				ok = false;
				break;
			}
		}
		json_decref(j);
		if (!ok)
			unlink(rp);
	}
	if (d)
		closedir(d);
	return 0;
}

/* ---- disk usage of layers ---------------------------------------------------------------- */

static uint64_t du_total; /* nftw() has no argument for its callback */

static int du_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)path;
	(void)flag;
	(void)f;
	du_total += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* What the tree at dir takes on disk (allocated blocks; a hard link counts each time). */
static uint64_t tree_usage(const char *dir)
{
	du_total = 0;
	(void)nftw(dir, du_one, 32, FTW_PHYS);
	return du_total;
}

static void size_write(const char *store, const char *hex, uint64_t bytes)
{
	char p[PATH_MAX], v[32];
	path_in(p, sizeof(p), store, "sizes/%s", hex);
	int n = snprintf(v, sizeof(v), "%llu\n", (unsigned long long)bytes);
	(void)fs_write_atomic(p, v, (size_t)n, 0600);
}

uint64_t image_layer_usage(const char *store, const char *hex)
{
	char p[PATH_MAX], v[32];
	path_in(p, sizeof(p), store, "sizes/%s", hex);
	if (fs_read_small(p, v, sizeof(v)) == 0)
		return strtoull(v, NULL, 10);
	/* A layer unpacked before sizes were kept: measured once. */
	path_in(p, sizeof(p), store, "layers/%s", hex);
	if (access(p, F_OK) < 0)
		return 0;
	uint64_t n = tree_usage(p);
	size_write(store, hex, n);
	return n;
}

int image_store_usage(const char *store, uint64_t *ret)
{
	char p[PATH_MAX];
	*ret = 0;
	path_in(p, sizeof(p), store, "layers");
	DIR *d = opendir(p);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strlen(de->d_name) == IMAGE_HEX_LEN)
			*ret += image_layer_usage(store, de->d_name);
	closedir(d);
	return 0;
}

static void platform_or_default(const struct image_platform *in, struct image_platform *out)
{
	*out = *in;
	if (!out->os[0])
		snprintf(out->os, sizeof(out->os), "linux");
	if (!out->arch[0])
		snprintf(out->arch, sizeof(out->arch), "amd64");
}

static void record_path(char *buf, size_t len, const char *store, const struct image_ref *ref,
			const struct image_platform *p)
{
	struct image_platform pl;
	platform_or_default(p, &pl);
	char key[1024], d[72];
	int n = snprintf(key, sizeof(key), "%s\n%s/%s/%s", ref->name, pl.os, pl.arch, pl.variant);
	registry_sha256(key, (size_t)n, d);
	path_in(buf, len, store, "refs/%s.json", d + 7);
}

bool image_record_exists(const char *store, const struct image_ref *ref,
			 const struct image_platform *p)
{
	char path[PATH_MAX];
	record_path(path, sizeof(path), store, ref, p);
	return access(path, F_OK) == 0;
}

static bool digest_ok(const char *d)
{
	if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + IMAGE_HEX_LEN)
		return false;
	return strspn(d + 7, "0123456789abcdef") == IMAGE_HEX_LEN;
}

static bool is_index(const char *t)
{
	return t && (strcmp(t, "application/vnd.oci.image.index.v1+json") == 0 ||
		     strcmp(t, "application/vnd.docker.distribution.manifest.list.v2+json") == 0);
}

static bool layer_type_ok(const char *t)
{
	static const char *const ok[] = {
	    "application/vnd.oci.image.layer.v1.tar",
	    "application/vnd.oci.image.layer.v1.tar+gzip",
	    "application/vnd.oci.image.layer.v1.tar+zstd",
	    "application/vnd.docker.image.rootfs.diff.tar.gzip",
	    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
	    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
	};
	for (size_t i = 0; t && i < ARRAY_SIZE(ok); i++)
		if (strcmp(t, ok[i]) == 0)
			return true;
	return false;
}

struct pull {
	const struct image_pull_opts *o;
	const struct image_ref *ref;
	struct image_platform pl;
	struct registry *reg; /* a registry pull, or */
	const char *layout;   /* an import: an OCI image layout directory */
	struct image_budget budget; /* what its layers may unpack to, counted across the children */
	/* A registry pull: the manifest child (meta_start()) talks to the registry for the
	 * manifests and the config. In the child, save is its work directory, where each manifest
	 * body goes (manifest-<depth>, its Content-Type in types[]); in the worker and its parsing
	 * children, the child's reply and the same directory, read back (replay) as untrusted
	 * files. */
	const char *save;
	struct meta_reply *replay;
	char meta_work[PATH_MAX];
	pid_t meta_pid;
	int meta_fd;
	bool meta_done; /* the final reply is in */
	int64_t deadline_mono_ms; /* of the whole pull (o->timeout_s), 0 = none */
	char types[2][128];
	unsigned n_bodies;
};

/* What the manifest child sends the worker: once when it has the manifest (e.code < 0: it could
 * not get it, as e.msg says), once more after the config (then with the registry client's auth
 * state for the layer children). */
struct meta_reply {
	struct error e;
	char types[2][128]; /* of manifest-0 (the reference's) and manifest-1 (an index's pick) */
	unsigned n_bodies;
	struct registry_auth auth;
};

/* What the worker asks of it in between: the config blob (digest "" for none: in the store). */
struct meta_request {
	char digest[72];
	uint64_t size;
};

/* The pull's unpack budget (images.h), its counters in memory the layer children share. */
static int budget_init(struct image_budget *b, const struct image_pull_opts *o, struct error *err)
{
	uint64_t *c = mmap(NULL, 2 * sizeof(uint64_t), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return error_set_errno(err, errno, "map the unpack counters");
	c[0] = c[1] = 0;
	*b = (struct image_budget){
	    .max_bytes = o->unpacked_max ? o->unpacked_max : IMAGE_UNPACKED_MAX_DEFAULT,
	    .max_entries = o->entries_max ? o->entries_max : IMAGE_ENTRIES_MAX_DEFAULT,
	    .bytes = &c[0],
	    .entries = &c[1],
	    .limit_name = "--image-unpacked-max",
	};
	return 0;
}

static void budget_clear(struct image_budget *b)
{
	if (b->bytes)
		munmap(b->bytes, 2 * sizeof(uint64_t));
	b->bytes = b->entries = NULL;
}

/* A blob of the layout, checked against digest and size (the whole file is hashed). */
static int layout_blob(struct pull *p, const char *digest, uint64_t size, char *path, size_t len,
		       struct error *err)
{
	snprintf(path, len, "%s/blobs/sha256/%s", p->layout, digest + 7);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return error_set_errno(err, errno, "not found: blob %s of the image layout", digest);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md)
		return error_set(err, ENOMEM, "digest context");
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	char buf[1 << 16];
	uint64_t total = 0;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		EVP_DigestUpdate(md, buf, (size_t)n);
		total += (uint64_t)n;
	}
	unsigned char d[32];
	unsigned int dl = 0;
	EVP_DigestFinal_ex(md, d, &dl);
	EVP_MD_CTX_free(md);
	if (n < 0)
		return error_set_errno(err, errno, "read blob %s of the image layout", digest);
	char got[72] = "sha256:";
	for (unsigned i = 0; i < 32; i++)
		sprintf(got + 7 + 2 * i, "%02x", d[i]);
	if (total != size || strcmp(got, digest) != 0)
		return error_set(err, EBADMSG,
				 "digest mismatch: blob %s of the image layout has %llu bytes and digest %s",
				 digest, (unsigned long long)total, got);
	return 0;
}

/* index.json of the layout: the descriptor whose org.opencontainers.image.ref.name is the tag
 * (or the only one), as "sha256:..." into reference. */
static int layout_pick(struct pull *p, char *reference, size_t len, struct error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/index.json", p->layout);
	json_error_t je;
	json_t *idx = json_load_file(path, 0, &je), *x, *pick = NULL;
	if (!idx) {
		snprintf(path, sizeof(path), "%s/manifest.json", p->layout);
		if (access(path, F_OK) == 0)
			return error_set(err, EPROTO,
					 "not an OCI image layout: a docker save archive from before Docker 25 (convert it: skopeo copy docker-archive:FILE oci:DIR)");
		return error_set(err, EPROTO, "not an OCI image layout (no index.json): %s", je.text);
	}
	json_t *ms = json_object_get(idx, "manifests");
	size_t i, n = json_array_size(ms);
	json_array_foreach(ms, i, x) {
		const char *name = json_string_value(
		    json_object_get(json_object_get(x, "annotations"), "org.opencontainers.image.ref.name"));
		if (name && p->ref->tag[0] && strcmp(name, p->ref->tag) == 0)
			pick = x;
	}
	if (!pick && n == 1)
		pick = json_array_get(ms, 0);
	const char *d = json_string_value(json_object_get(pick, "digest"));
	int r = 0;
	if (!pick)
		r = error_set(err, ENOENT,
			      "not found: the image layout has %zu images and none is tagged '%s'", n,
			      p->ref->tag);
	else if (!digest_ok(d))
		r = error_set(err, EPROTO, "index.json of the image layout names an invalid digest");
	else
		snprintf(reference, len, "%s", d);
	json_decref(idx);
	return r;
}

/* A confined child's struct error (its own words, or the registry's, or a layer's entry names)
 * as ours: the text bounded and printable ASCII only (no newline into corrald's log, no escape
 * sequence into a terminal), the code a plausible errno. */
static int error_from_child(struct error *err, const struct error *e)
{
	char msg[sizeof(e->msg)];
	size_t i;
	for (i = 0; i < sizeof(msg) - 1 && e->msg[i]; i++)
		msg[i] = e->msg[i] >= 0x20 && e->msg[i] < 0x7f ? e->msg[i] : ' ';
	msg[i] = '\0';
	return error_set(err, e->code < 0 && e->code > -4096 ? -e->code : EIO, "%s", msg);
}

/* A file the manifest child wrote in its work directory, read without trusting it: no link,
 * no FIFO or device, one name only (a hard link of a host file would otherwise be read), at most
 * max bytes. */
static int read_untrusted(const char *dir, const char *name, size_t max, char **ret,
			  size_t *ret_len)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
		return -EPERM;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	size_t len = 0;
	while (len <= (size_t)st.st_size) { /* one byte past the size: a file still growing */
		ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(buf);
			return -e;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len != (size_t)st.st_size) {
		free(buf);
		return -EIO;
	}
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

static int get_manifest_body(struct pull *p, int depth, const char *reference, char **body,
			     size_t *len, char *type, size_t type_len, struct error *err)
{
	if (p->replay) { /* a parsing child: what the manifest child got, checked by the caller */
		if ((unsigned)depth >= p->replay->n_bodies || depth >= 2)
			return error_set(err, EPROTO,
					 "manifest of %s: the registry process sent no manifest %s",
					 p->ref->name, reference);
		char name[32];
		snprintf(name, sizeof(name), "manifest-%d", depth);
		int r = read_untrusted(p->meta_work, name, REGISTRY_MANIFEST_MAX, body, len);
		if (r < 0)
			return error_set_errno(err, -r, "manifest of %s from the registry process",
					       p->ref->name);
		snprintf(type, type_len, "%.*s", (int)sizeof(p->replay->types[depth]) - 1,
			 p->replay->types[depth]);
		return 0;
	}
	if (!p->layout) {
		int r = registry_get_manifest(p->reg, reference, body, len, type, type_len, err);
		if (r < 0 || !p->save || depth >= 2)
			return r;
		/* The manifest child: for the worker to check again. */
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/manifest-%d", p->save, depth);
		_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		int e = fd < 0 ? errno : 0;
		for (size_t off = 0; !e && off < *len;) {
			ssize_t n = write(fd, *body + off, *len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				e = n < 0 ? errno : EIO;
			else
				off += (size_t)n;
		}
		if (e) {
			free(*body);
			return error_set_errno(err, e, "keep the manifest of %s", p->ref->name);
		}
		snprintf(p->types[depth], sizeof(p->types[depth]), "%s", type);
		p->n_bodies = (unsigned)depth + 1;
		return 0;
	}
	char path[PATH_MAX];
	type[0] = '\0';
	snprintf(path, sizeof(path), "%s/blobs/sha256/%s", p->layout, reference + 7);
	int r = fs_read_file(path, REGISTRY_MANIFEST_MAX, body, len);
	return r < 0 ? error_set_errno(err, -r, "not found: manifest %s of the image layout",
				       reference)
		     : 0;
}

/* The manifest for the platform: an index or list is resolved to one entry, fetched by digest.
 * Every body fetched by digest is checked against it. */
static int fetch_manifest(struct pull *p, json_t **ret, char ret_digest[72], struct error *err)
{
	const struct image_ref *ref = p->ref;
	char reference[160], type[128], got[72];
	snprintf(reference, sizeof(reference), "%s", ref->digest[0] ? ref->digest : ref->tag);
	if (p->layout && !ref->digest[0]) {
		int r = layout_pick(p, reference, sizeof(reference), err);
		if (r < 0)
			return r;
	}
	for (int depth = 0; depth < 2; depth++) {
		char *body = NULL;
		size_t len = 0;
		int r = get_manifest_body(p, depth, reference, &body, &len, type, sizeof(type),
					  err);
		if (r < 0)
			return r;
		registry_sha256(body, len, got);
		if (strncmp(reference, "sha256:", 7) == 0 && strcmp(got, reference) != 0) {
			free(body);
			return error_set(err, EBADMSG,
					 "digest mismatch: manifest %s of %s has digest %s; discarded",
					 reference, ref->name, got);
		}
		json_error_t je;
		json_t *m = json_loadb(body, len, 0, &je);
		free(body);
		if (!json_is_object(m)) {
			json_decref(m);
			return error_set(err, EPROTO, "manifest of %s is not a JSON object: %s",
					 ref->name, je.text);
		}
		const char *mt = json_string_value(json_object_get(m, "mediaType"));
		if (!is_index(mt) && !is_index(type)) {
			if (json_integer_value(json_object_get(m, "schemaVersion")) != 2) {
				json_decref(m);
				return error_set(err, EPROTO,
						 "manifest of %s: only schema 2 manifests are supported",
						 ref->name);
			}
			*ret = m;
			memcpy(ret_digest, got, 72);
			return 0;
		}
		/* An index: the entry for our platform. */
		json_t *ms = json_object_get(m, "manifests"), *x;
		size_t i;
		char have[512] = "";
		size_t hn = 0;
		const char *pick = NULL;
		json_array_foreach(ms, i, x) {
			json_t *pf = json_object_get(x, "platform");
			const char *os = json_string_value(json_object_get(pf, "os"));
			const char *arch = json_string_value(json_object_get(pf, "architecture"));
			const char *var = json_string_value(json_object_get(pf, "variant"));
			if (!os || !arch)
				continue;
			if (hn < sizeof(have))
				hn += (size_t)snprintf(have + hn, sizeof(have) - hn, "%s%s/%s%s%s",
						       hn ? ", " : "", os, arch, var ? "/" : "",
						       var ? var : "");
			if (!pick && strcmp(os, p->pl.os) == 0 && strcmp(arch, p->pl.arch) == 0 &&
			    (!p->pl.variant[0] || (var && strcmp(var, p->pl.variant) == 0)))
				pick = json_string_value(json_object_get(x, "digest"));
		}
		if (!pick) {
			json_decref(m);
			return error_set(err, ENOEXEC,
					 "no matching platform: %s has no %s/%s%s%s image (it has: %s)",
					 ref->name, p->pl.os, p->pl.arch, p->pl.variant[0] ? "/" : "",
					 p->pl.variant, have[0] ? have : "none");
		}
		if (!digest_ok(pick)) {
			json_decref(m);
			return error_set(err, EPROTO, "index of %s names an invalid digest",
					 ref->name);
		}
		snprintf(reference, sizeof(reference), "%s", pick);
		json_decref(m);
	}
	return error_set(err, EPROTO, "index of %s points to another index", ref->name);
}

static int meta_config(struct pull *p, const char *digest, uint64_t size, const char *tmp,
		       struct error *err);

/* A small blob (the config) into blobs/, verified; its content read back. */
static int fetch_config(struct pull *p, const char *digest, uint64_t size, char **ret,
			struct error *err)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	path_in(path, sizeof(path), p->o->store, "blobs/sha256/%s", digest + 7);
	if (access(path, F_OK) < 0) {
		if (size > CONFIG_MAX)
			return error_set(err, EPROTO, "config of %s is too large (%llu bytes)",
					 p->ref->name, (unsigned long long)size);
		path_in(tmp, sizeof(tmp), p->o->store, "tmp/%s.%d", digest + 7, (int)getpid());
		int r;
		if (p->layout) {
			char src[PATH_MAX], *data = NULL;
			size_t dl = 0;
			if ((r = layout_blob(p, digest, size, src, sizeof(src), err)) < 0)
				return r;
			if ((r = fs_read_file(src, CONFIG_MAX, &data, &dl)) == 0) {
				r = fs_write_atomic(tmp, data, dl, 0600);
				free(data);
			}
			if (r < 0)
				return error_set_errno(err, -r, "copy config %s", digest);
		} else if ((r = meta_config(p, digest, size, tmp, err)) < 0) {
			unlink(tmp);
			return r;
		}
		if (rename(tmp, path) < 0) {
			r = error_set_errno(err, errno, "rename '%s'", tmp);
			unlink(tmp);
			return r;
		}
	}
	size_t len;
	int r = fs_read_file(path, CONFIG_MAX, ret, &len);
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	char got[72];
	registry_sha256(*ret, len, got);
	if (strcmp(got, digest) != 0) { /* a damaged store: drop it, the next pull refetches */
		unlink(path);
		free(*ret);
		*ret = NULL; /* the caller frees it too */
		return error_set(err, EBADMSG, "digest mismatch: stored config %s; discarded", digest);
	}
	return 0;
}

unsigned image_layer_confine(const char *work, struct registry *reg, const char *read_path,
			     uint64_t fsize_max)
{
	struct image_confine c = {.write_path = work, .read_path = read_path,
				  .fsize_max = fsize_max};
	if (reg) {
		int n = registry_ports(reg, c.ports, ARRAY_SIZE(c.ports));
		if (n < 0)
			c.any_port = true;
		else
			c.n_ports = (size_t)n;
	}
	return image_confine(&c);
}

unsigned image_meta_confine(const char *work, struct registry *reg)
{
	struct image_confine c = {.write_path = work, .fsize_max = IMAGE_META_FSIZE_MAX,
				  .no_caps = true};
	int n = registry_ports(reg, c.ports, ARRAY_SIZE(c.ports));
	if (n < 0)
		c.any_port = true;
	else
		c.n_ports = (size_t)n;
	unsigned level = image_confine(&c);
	if (!c.any_port)
		registry_fix_ports(reg);
	return level;
}

/* ---- the manifest child ------------------------------------------------------------------ */

/*
 * A registry pull's conversation with the registry up to the layers (the auth challenge and
 * token, the manifest, an index resolved to the platform's, the config) runs in a child confined
 * as a layer child is, with no capability at all: a bug in libcurl, OpenSSL or jansson that the
 * registry's replies reach is contained there. The child writes each manifest body beneath its
 * work directory and the config there too; they are read back as untrusted files and checked
 * again as the registry's own replies were (a pinned digest, the index's pick, the config
 * against the manifest's digest), and parsed only in a parsing child (parse_confined()).
 */
/* tests/security/image_pull_tamper.c builds this file with a compromised manifest child here
 * (stage 1: before its manifest reply, 2: before its last); in corrald it is nothing. */
#ifndef META_CHILD_TAMPER
#define META_CHILD_TAMPER(p, rep, stage) ((void)0)
#endif

static int send_all(int fd, const void *buf, size_t len)
{
	ssize_t n = RETRY_EINTR(send(fd, buf, len, MSG_NOSIGNAL));
	return n == (ssize_t)len ? 0 : -EIO;
}

static _noreturn_ void meta_child(struct pull *p, int fd)
{
	if (fd > 3)
		syscall(SYS_close_range, 3U, (unsigned)fd - 1, 0U);
	syscall(SYS_close_range, (unsigned)fd + 1, ~0U, 0U);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	static struct meta_reply rep; /* not on the stack: the token takes 4 KiB */
	struct error *e = &rep.e;
	int r = registry_after_fork(p->reg);
	if (r < 0) {
		error_set(e, -r, "registry client");
	} else {
		(void)image_meta_confine(p->meta_work, p->reg);
		p->save = p->meta_work;
		json_t *m = NULL;
		char digest[72];
		r = fetch_manifest(p, &m, digest, e);
		json_decref(m);
	}
	e->code = r;
	memcpy(rep.types, p->types, sizeof(rep.types));
	rep.n_bodies = p->n_bodies;
	registry_auth_get(p->reg, &rep.auth);
	META_CHILD_TAMPER(p, &rep, 1);
	if (send_all(fd, &rep, sizeof(rep)) < 0 || r < 0)
		_exit(1);
	struct meta_request q;
	if (RETRY_EINTR(recv(fd, &q, sizeof(q), 0)) != (ssize_t)sizeof(q))
		_exit(1); /* the worker gave up: nothing more to do */
	memset(&rep, 0, sizeof(rep));
	q.digest[sizeof(q.digest) - 1] = '\0';
	if (q.digest[0]) {
		char path[PATH_MAX + 8];
		snprintf(path, sizeof(path), "%s/config", p->meta_work);
		r = registry_get_blob(p->reg, q.digest, q.size, path, e);
	}
	e->code = r;
	registry_auth_get(p->reg, &rep.auth);
	META_CHILD_TAMPER(p, &rep, 2);
	_exit(send_all(fd, &rep, sizeof(rep)) < 0 || r < 0 ? 1 : 0);
}

/* The child gone, its work directory removed. */
static void meta_end(struct pull *p, int *ret_status)
{
	int status = 0;
	if (p->meta_fd >= 0)
		close(p->meta_fd);
	p->meta_fd = -1;
	if (p->meta_pid > 0) {
		(void)kill(p->meta_pid, SIGKILL); /* its work is done or abandoned */
		(void)RETRY_EINTR(waitpid(p->meta_pid, &status, 0));
	}
	p->meta_pid = -1;
	if (p->meta_work[0])
		fs_remove_tree(p->meta_work);
	p->meta_work[0] = '\0';
	if (ret_status)
		*ret_status = status;
}

/* How long the worker waits for the child past the pull's deadline (the child's own requests
 * end there, with a message of their own). */
#define META_GRACE_MS 2000

/* A reply of the child into rep; its error (or its death, or its silence past the pull's
 * deadline) as the worker's. */
static int meta_recv(struct pull *p, struct meta_reply *rep, struct error *err)
{
	if (p->deadline_mono_ms) {
		struct pollfd pfd = {.fd = p->meta_fd, .events = POLLIN};
		int r;
		do {
			int64_t left = p->deadline_mono_ms + META_GRACE_MS - time_mono_ms();
			r = poll(&pfd, 1, left > 0 ? (int)MIN(left, (int64_t)INT_MAX) : 0);
		} while (r < 0 && errno == EINTR);
		if (r == 0) {
			meta_end(p, NULL);
			return error_set(err, ETIMEDOUT,
					 "pull of '%s' timed out (the registry process did not answer)",
					 p->ref->name);
		}
	}
	ssize_t n = RETRY_EINTR(recv(p->meta_fd, rep, sizeof(*rep), 0));
	if (n != (ssize_t)sizeof(*rep)) {
		int status;
		meta_end(p, &status);
		return error_set(err, EIO, "registry process died (status 0x%x)", status);
	}
	return rep->e.code < 0 ? error_from_child(err, &rep->e) : 0;
}

/* Start the child and wait for the manifests; p->replay is its reply then. A token realm on a
 * port the child was not let reach (the registry named it in its challenge) gets one more child
 * that may. */
static int meta_start(struct pull *p, struct meta_reply *rep, struct error *err)
{
	(void)image_confine_prepare();
	for (int attempt = 0;; attempt++) {
		int sv[2];
		path_in(p->meta_work, sizeof(p->meta_work), p->o->store, "tmp/meta-XXXXXX");
		if (!mkdtemp(p->meta_work)) {
			int r = error_set_errno(err, errno, "mkdtemp '%s'", p->meta_work);
			p->meta_work[0] = '\0';
			return r;
		}
		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
			int r = error_set_errno(err, errno, "socketpair");
			meta_end(p, NULL);
			return r;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(sv[0]);
			meta_child(p, sv[1]);
		}
		close(sv[1]);
		p->meta_fd = sv[0];
		if (pid < 0) {
			int r = error_set_errno(err, errno, "fork");
			meta_end(p, NULL);
			return r;
		}
		p->meta_pid = pid;
		memset(rep, 0, sizeof(*rep));
		int r = meta_recv(p, rep, err);
		uint16_t want = rep->auth.want_port;
		if (r == -EXDEV && want && attempt == 0) {
			meta_end(p, NULL);
			registry_allow_port(p->reg, want);
			error_clear(err);
			continue;
		}
		if (r < 0) {
			meta_end(p, NULL);
			return r;
		}
		p->replay = rep;
		return 0;
	}
}

/* The config from the child, checked against digest and size, into tmp (a new file). */
static int meta_config(struct pull *p, const char *digest, uint64_t size, const char *tmp,
		       struct error *err)
{
	struct meta_request q = {.size = size};
	snprintf(q.digest, sizeof(q.digest), "%s", digest);
	static struct meta_reply rep;
	if (p->meta_fd < 0 || send_all(p->meta_fd, &q, sizeof(q)) < 0)
		return error_set(err, EIO, "the registry process is gone");
	int r = meta_recv(p, &rep, err);
	p->meta_done = true;
	if (r < 0)
		return r;
	if ((r = registry_auth_set(p->reg, &rep.auth)) < 0)
		return error_set_errno(err, -r, "registry %s: auth state from the registry process",
				       p->ref->registry);
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	char got[72];
	if ((r = read_untrusted(p->meta_work, "config", CONFIG_MAX, &data, &len)) < 0)
		return error_set_errno(err, -r, "config %s from the registry process", digest);
	registry_sha256(data, len, got);
	if (len != size || strcmp(got, digest) != 0)
		return error_set(err, EBADMSG,
				 "digest mismatch: config %s of %s has %zu bytes and digest %s; discarded",
				 digest, p->ref->name, len, got);
	if ((r = fs_write_atomic(tmp, data, len, 0600)) < 0)
		return error_set_errno(err, -r, "write '%s'", tmp);
	return 0;
}

/* The child's last word when the config was in the store already (its auth state), then the
 * child gone. */
static int meta_finish(struct pull *p, struct error *err)
{
	int r = 0;
	if (!p->meta_done && p->meta_fd >= 0) {
		struct meta_request q = {0};
		static struct meta_reply rep;
		if (send_all(p->meta_fd, &q, sizeof(q)) < 0)
			r = error_set(err, EIO, "the registry process is gone");
		else
			r = meta_recv(p, &rep, err);
		p->meta_done = true;
		if (r == 0 && (r = registry_auth_set(p->reg, &rep.auth)) < 0)
			r = error_set_errno(err, -r,
					    "registry %s: auth state from the registry process",
					    p->ref->registry);
	}
	meta_end(p, NULL);
	return r;
}

/*
 * The confined part of one layer, in its child: the blob downloaded into work/blob (or the
 * layout's verified in place), unpacked into work/root, opaque directories listed in work/opaque.
 * Everything after image_layer_confine() parses hostile bytes, and can write beneath work only;
 * the parent finishes the layer (finish_layer()).
 */
static int fetch_layer(struct pull *p, const char *digest, uint64_t size, const char *diff_id,
		       const char *work, struct error *err)
{
	char blob[PATH_MAX], root[PATH_MAX], opaque[PATH_MAX];
	snprintf(blob, sizeof(blob), "%s/blob", work);
	snprintf(root, sizeof(root), "%s/root", work);
	snprintf(opaque, sizeof(opaque), "%s/opaque", work);
	uint64_t fsize = MAX(size, p->budget.max_bytes) + (1u << 20);
	(void)image_layer_confine(work, p->reg, p->layout, fsize);
	bool own_blob = !p->layout; /* an import unpacks the layout's verified file in place */
	int r = p->layout ? layout_blob(p, digest, size, blob, sizeof(blob), err)
			  : registry_get_blob(p->reg, digest, size, blob, err);
	if (r < 0)
		return r;
	_cleanup_close_ int ofd = -1;
	if (mkdir(root, 0755) < 0 || chmod(root, 0755) < 0)
		r = error_set_errno(err, errno, "mkdir the layer's directory");
	else if ((ofd = open(opaque, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		r = error_set_errno(err, errno, "create the opaque list");
	if (r == 0)
		r = image_layer_unpack_list_opaque(blob, root, &p->budget, ofd, diff_id, err);
	if (own_blob)
		unlink(blob);
	if (r == 0) { /* measured (and synced) here, in parallel: the parent only renames it */
		char size_path[PATH_MAX], v[32];
		snprintf(size_path, sizeof(size_path), "%s/size", work);
		int n = snprintf(v, sizeof(v), "%llu\n", (unsigned long long)tree_usage(root));
		(void)fs_write_atomic(size_path, v, (size_t)n, 0600);
	}
	return r;
}

/* The layer unpacked in work (by a confined child, so nothing in work is trusted) into
 * layers/<hex>: opaque directories marked, its size measured, renamed into place. */
static int finish_layer(struct pull *p, const char *hex, const char *diff_id, const char *work,
			struct error *err)
{
	char final[PATH_MAX], root[PATH_MAX + 8], opaque[PATH_MAX + 8];
	path_in(final, sizeof(final), p->o->store, "layers/%s", hex);
	snprintf(root, sizeof(root), "%s/root", work);
	snprintf(opaque, sizeof(opaque), "%s/opaque", work);
	struct stat st;
	if (lstat(root, &st) < 0 || !S_ISDIR(st.st_mode)) /* never a symlink into layers/ */
		return error_set(err, EPROTO, "the unpacked layer is not a directory");
	int r = image_layer_mark_opaque(root, opaque, err);
	/* The child's measure, if it is a small regular file (its number is the child's claim, as
	 * the unpack budget is); else measured here. */
	char size_path[PATH_MAX + 8], sizes[PATH_MAX];
	snprintf(size_path, sizeof(size_path), "%s/size", work);
	path_in(sizes, sizeof(sizes), p->o->store, "sizes/%s", hex);
	if (r == 0 && (lstat(size_path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > 24 ||
		       rename(size_path, sizes) < 0))
		size_write(p->o->store, hex, tree_usage(root));
	/* The diff_id the layer was checked against, for the next image that names this blob. */
	char ids[PATH_MAX];
	path_in(ids, sizeof(ids), p->o->store, "diffids/%s", hex);
	if (r == 0 && (r = fs_write_atomic(ids, diff_id, strlen(diff_id), 0600)) < 0)
		r = error_set_errno(err, -r, "write '%s'", ids);
	if (r == 0 && rename(root, final) < 0 && errno != EEXIST && errno != ENOTEMPTY)
		r = error_set_errno(err, errno, "rename '%s' to '%s'", root, final);
	/* EEXIST, ENOTEMPTY: another pull got there first */
	return r;
}

/* A layer fetched in a child: its result comes back over fd as a struct error. */
static _noreturn_ void layer_child(struct pull *p, const char *digest, uint64_t size,
				   const char *diff_id, const char *work, int fd)
{
	/* Nothing of the worker's: not its pipe to corrald, the store lock or the other
	 * children's pipes (the curl handle's cached connections go with them, unused). */
	if (fd > 3)
		syscall(SYS_close_range, 3U, (unsigned)fd - 1, 0U);
	syscall(SYS_close_range, (unsigned)fd + 1, ~0U, 0U);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct error e = {0};
	int r = p->reg ? registry_after_fork(p->reg) : 0;
	if (r < 0)
		error_set(&e, -r, "registry client");
	else
		r = fetch_layer(p, digest, size, diff_id, work, &e);
	if (r < 0)
		error_prefix(&e, "layer %s of %s", digest, p->ref->name);
	e.code = r;
	ssize_t _unused_ w = write(fd, &e, sizeof(e));
	_exit(r < 0 ? 1 : 0);
}

/* A layer already in the store was checked against the diff_id of the image it came with
 * (diffids/<hex>; a layer unpacked before they were kept has none): the config of this one must
 * name the same, or it describes another layer than the blob. */
static int known_diff_id(struct pull *p, const char *digest, const char *diff_id,
			 struct error *err)
{
	char path[PATH_MAX], v[80];
	path_in(path, sizeof(path), p->o->store, "diffids/%s", digest + 7);
	if (fs_read_small(path, v, sizeof(v)) < 0)
		return 0;
	v[strcspn(v, "\n")] = '\0';
	if (strcmp(v, diff_id) == 0)
		return 0;
	return error_set(err, EBADMSG,
			 "digest mismatch: layer %s of %s is in the store with diff_id %s, the image config's diff_id is %s",
			 digest, p->ref->name, v, diff_id);
}

/* A partial download of layer hex (partial/<hex>, kept by an earlier pull) becomes the blob the
 * child continues (registry_get_blob() resumes a file it finds); a file that cannot be one goes. */
static void resume_partial(struct pull *p, const char *hex, uint64_t size, const char *work)
{
	char from[PATH_MAX], to[PATH_MAX + 8];
	path_in(from, sizeof(from), p->o->store, "partial/%.64s", hex);
	snprintf(to, sizeof(to), "%s/blob", work);
	if (p->layout)
		return;
	if (!partial_ok(from, size) || rename(from, to) < 0)
		(void)unlink(from);
}

/* What a failed child's download left (its blob cut short, kept by registry_get_blob()) to
 * partial/<hex>: bytes the child wrote, trusted for nothing (the next pull hashes them with
 * the rest and verifies the whole blob). */
static void keep_partial(struct pull *p, const char *hex, uint64_t size, const char *work)
{
	char from[PATH_MAX + 8], to[PATH_MAX];
	snprintf(from, sizeof(from), "%s/blob", work);
	path_in(to, sizeof(to), p->o->store, "partial/%.64s", hex);
	if (!p->layout && partial_ok(from, size))
		(void)rename(from, to);
}

/*
 * Every layer not yet in the store, up to PULL_PARALLEL at once, each in a child process (the
 * pull runs single-threaded in a corrald worker; each child has its own connection). After a
 * failure no new layer starts, the running ones finish (what they unpack is verified and valid),
 * and the first error is reported.
 */
#define PULL_PARALLEL 3
static int fetch_layers(struct pull *p, json_t *layers, json_t *diff_ids, struct error *err)
{
	struct {
		pid_t pid;
		int fd;
		char hex[IMAGE_HEX_LEN + 1];
		char work[PATH_MAX];
		uint64_t size;
		char diff_id[72];
	} run[PULL_PARALLEL];
	size_t n = json_array_size(layers), next = 0, running = 0;
	int first = 0;
	for (size_t k = 0; k < PULL_PARALLEL; k++)
		run[k].pid = -1;
	(void)image_confine_prepare(); /* once here, not in every child */
	while (next < n || running) {
		while (next < n && running < PULL_PARALLEL && first == 0) {
			json_t *l = json_array_get(layers, next);
			const char *diff_id = json_string_value(json_array_get(diff_ids, next++));
			const char *d = json_string_value(json_object_get(l, "digest"));
			uint64_t size = (uint64_t)json_integer_value(json_object_get(l, "size"));
			char lp[PATH_MAX], work[PATH_MAX];
			path_in(lp, sizeof(lp), p->o->store, "layers/%s", d + 7);
			if (access(lp, F_OK) == 0) {
				if ((first = known_diff_id(p, d, diff_id, err)) < 0)
					break;
				continue;
			}
			path_in(work, sizeof(work), p->o->store, "tmp/layer-%.64s-XXXXXX", d + 7);
			if (!mkdtemp(work)) {
				first = error_set_errno(err, errno, "mkdtemp '%s'", work);
				break;
			}
			resume_partial(p, d + 7, size, work);
			int fds[2];
			if (pipe2(fds, O_CLOEXEC) < 0) {
				first = error_set_errno(err, errno, "pipe");
				fs_remove_tree(work);
				break;
			}
			pid_t pid = fork();
			if (pid == 0) {
				close(fds[0]);
				layer_child(p, d, size, diff_id, work, fds[1]);
			}
			close(fds[1]);
			if (pid < 0) {
				close(fds[0]);
				first = error_set_errno(err, errno, "fork");
				fs_remove_tree(work);
				break;
			}
			for (size_t k = 0; k < PULL_PARALLEL; k++)
				if (run[k].pid < 0) {
					run[k].pid = pid;
					run[k].fd = fds[0];
					snprintf(run[k].hex, sizeof(run[k].hex), "%s", d + 7);
					snprintf(run[k].work, sizeof(run[k].work), "%s", work);
					run[k].size = size;
					snprintf(run[k].diff_id, sizeof(run[k].diff_id), "%s",
						 diff_id);
					break;
				}
			running++;
		}
		if (!running)
			break;
		int status;
		pid_t pid = RETRY_EINTR(waitpid(-1, &status, 0));
		if (pid < 0) {
			first = first ? first : error_set_errno(err, errno, "waitpid");
			break;
		}
		for (size_t k = 0; k < PULL_PARALLEL; k++) {
			if (run[k].pid != pid)
				continue;
			struct error e = {0};
			ssize_t got = read(run[k].fd, &e, sizeof(e));
			close(run[k].fd);
			run[k].pid = -1;
			running--;
			bool ok = got == (ssize_t)sizeof(e) && e.code == 0 && WIFEXITED(status) &&
				  WEXITSTATUS(status) == 0;
			if (ok) {
				struct error fe = {0};
				if (finish_layer(p, run[k].hex, run[k].diff_id, run[k].work,
						 &fe) < 0) {
					ok = false;
					e = fe;
					got = sizeof(e);
					error_prefix(&e, "layer sha256:%s of %s", run[k].hex,
						     p->ref->name);
				}
			}
			if (!ok)
				keep_partial(p, run[k].hex, run[k].size, run[k].work);
			fs_remove_tree(run[k].work);
			if (first == 0 && !ok) {
				if (got == (ssize_t)sizeof(e) && e.code < 0) {
					first = error_from_child(err, &e);
				} else {
					first = error_set(err, EIO,
							  "layer download process died (status 0x%x)",
							  status);
				}
			}
		}
	}
	return first;
}

/* ---- parsing in a confined child --------------------------------------------------------- */

/*
 * The registry's JSON (the manifests, the config) is parsed by jansson in a child of the worker
 * confined as the manifest child is, without any network: a bug in the parser that a reply
 * reaches is contained there too. Each child is a fresh fork of the worker and checks each body
 * against its digest before it parses it (the manifests in fetch_manifest(); the config was
 * checked by the worker); what it hands back is not JSON but tokens, NUL-terminated strings the
 * worker validates one by one and builds its own JSON objects from. A child taken over by what
 * it parsed can only say what the bytes it checked already could (the author of a pinned image,
 * the registry of a tag): the worker still checks the manifest digest it reports against the
 * bodies, and every digest, size, count and string it uses.
 */
#define TOKENS_MAX (CONFIG_MAX + (1u << 20))
#define PARSE_WAIT_MS 60000 /* without a pull deadline: parsing 8 MiB takes well under a second */

struct tokens {
	char *buf;
	size_t len, cap, off;
	bool oom;
};

struct parse_head {
	struct error e;
	uint64_t len; /* bytes of tokens that follow */
};

#ifndef PARSE_CHILD_TAMPER
#define PARSE_CHILD_TAMPER(p, head, t) ((void)0)
#endif

static void tok_add(struct tokens *t, const char *s)
{
	size_t n = strlen(s) + 1;
	if (t->oom || t->len + n > TOKENS_MAX) {
		t->oom = true;
		return;
	}
	if (t->len + n > t->cap) {
		size_t cap = MAX(t->cap * 2, t->len + n + 4096);
		char *b = realloc(t->buf, cap);
		if (!b) {
			t->oom = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
}

static void tok_num(struct tokens *t, long long v)
{
	char b[32];
	snprintf(b, sizeof(b), "%lld", v);
	tok_add(t, b);
}

static const char *json_str_or_empty(json_t *j)
{
	const char *s = json_string_value(j);
	return s ? s : "";
}

/* The next token, or NULL past the last. */
static const char *tok_next(struct tokens *t)
{
	if (t->off >= t->len)
		return NULL;
	const char *s = t->buf + t->off;
	const char *z = memchr(s, '\0', t->len - t->off);
	if (!z)
		return NULL;
	t->off = (size_t)(z - t->buf) + 1;
	return s;
}

/* The next token as a decimal integer in [min, max]. */
static bool tok_int(struct tokens *t, long long min, long long max, long long *ret)
{
	const char *s = tok_next(t);
	char *end;
	if (!s || !*s || (*s != '-' && (*s < '0' || *s > '9')))
		return false;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*ret = v;
	return true;
}

/* Read len bytes of fd by limit_ms (monotonic): 0, -ETIMEDOUT, or -EIO at its end. */
static int read_by(int fd, void *buf, size_t len, int64_t limit_ms)
{
	size_t got = 0;
	while (got < len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int64_t left = limit_ms - time_mono_ms();
		int r = poll(&pfd, 1, left > 0 ? (int)MIN(left, (int64_t)INT_MAX) : 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return -ETIMEDOUT;
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

typedef int (*parse_fn)(struct pull *p, const void *arg, struct tokens *t, struct error *err);

/* fn run in a confined child (no network, no capability, an empty directory of its own to
 * write, the manifest child's files to read), its tokens into out (the caller frees out->buf). */
static int parse_confined(struct pull *p, parse_fn fn, const void *arg, struct tokens *out,
			  struct error *err)
{
	char dir[PATH_MAX];
	int fds[2], r;
	path_in(dir, sizeof(dir), p->o->store, "tmp/parse-XXXXXX");
	if (!mkdtemp(dir))
		return error_set_errno(err, errno, "mkdtemp '%s'", dir);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		r = error_set_errno(err, errno, "pipe");
		fs_remove_tree(dir);
		return r;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		if (fds[1] > 3)
			syscall(SYS_close_range, 3U, (unsigned)fds[1] - 1, 0U);
		syscall(SYS_close_range, (unsigned)fds[1] + 1, ~0U, 0U);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct image_confine c = {.write_path = dir, .read_path = p->meta_work,
					  .fsize_max = 1u << 20, .no_caps = true};
		(void)image_confine(&c);
		static struct tokens t;
		static struct parse_head h;
		int k = fn(p, arg, &t, &h.e);
		if (k == 0 && t.oom)
			k = error_set(&h.e, ENOMEM, "the parsed %s is too large", p->ref->name);
		h.e.code = k;
		h.len = k < 0 ? 0 : t.len;
		PARSE_CHILD_TAMPER(p, &h, &t);
		_exit(fd_write_all(fds[1], &h, sizeof(h)) < 0 || fd_write_all(fds[1], t.buf, h.len) < 0 ||
			      k < 0
			  ? 1
			  : 0);
	}
	close(fds[1]);
	if (pid < 0) {
		r = error_set_errno(err, errno, "fork");
		close(fds[0]);
		fs_remove_tree(dir);
		return r;
	}
	int64_t limit = p->deadline_mono_ms ? p->deadline_mono_ms + META_GRACE_MS
					    : time_mono_ms() + PARSE_WAIT_MS;
	static struct parse_head h;
	memset(&h, 0, sizeof(h));
	r = read_by(fds[0], &h, sizeof(h), limit);
	if (r == 0 && h.e.code == 0 && h.len > TOKENS_MAX)
		r = -EPROTO;
	if (r == 0 && h.e.code == 0) {
		out->buf = malloc(h.len + 1);
		out->len = h.len;
		out->off = 0;
		r = out->buf ? read_by(fds[0], out->buf, h.len, limit) : -ENOMEM;
	}
	close(fds[0]);
	int status = 0;
	(void)kill(pid, SIGKILL); /* done, or given up on */
	(void)RETRY_EINTR(waitpid(pid, &status, 0));
	fs_remove_tree(dir);
	if (r == -ETIMEDOUT)
		return error_set(err, ETIMEDOUT,
				 "pull of '%s' timed out (the parsing process did not answer)",
				 p->ref->name);
	if (r == -EPROTO)
		return error_set(err, EPROTO, "the parsing process of %s sent too much",
				 p->ref->name);
	if (r < 0)
		return error_set(err, -r == ENOMEM ? ENOMEM : EIO,
				 "parsing process died (status 0x%x)", status);
	return h.e.code < 0 ? error_from_child(err, &h.e) : 0;
}

/* The parsing child's side of the manifest: fetch_manifest() over what the manifest child got
 * (each body checked against its digest before it is parsed), as tokens: the manifest's digest,
 * the config's digest and size, the number of layers, then each layer's media type, digest and
 * size. A value of the wrong type is "" (or 0), which the worker's checks refuse as before. */
static int parse_manifest_child(struct pull *p, const void *arg, struct tokens *t,
				struct error *err)
{
	(void)arg;
	json_t *m = NULL;
	char d[72];
	int r = fetch_manifest(p, &m, d, err);
	if (r < 0)
		return r;
	json_t *c = json_object_get(m, "config"), *layers = json_object_get(m, "layers");
	size_t n = MIN(json_array_size(layers), (size_t)IMAGE_LAYERS_MAX + 1);
	tok_add(t, d);
	tok_add(t, json_str_or_empty(json_object_get(c, "digest")));
	tok_num(t, json_is_integer(json_object_get(c, "size"))
		       ? (long long)json_integer_value(json_object_get(c, "size"))
		       : 0);
	tok_num(t, (long long)n);
	for (size_t i = 0; i < n; i++) {
		json_t *l = json_array_get(layers, i);
		tok_add(t, json_str_or_empty(json_object_get(l, "mediaType")));
		tok_add(t, json_str_or_empty(json_object_get(l, "digest")));
		tok_num(t, (long long)json_integer_value(json_object_get(l, "size")));
	}
	json_decref(m);
	return 0;
}

/* A string of a parsing child into JSON: valid UTF-8 (jansson checks it), else NULL. */
static json_t *tok_string(const char *s)
{
	return json_string(s);
}

/* The manifest from the parsing child: every token checked, and its digest one of the bodies
 * the worker reads itself (the reference's, which a pinned digest must be, or an index's pick). */
static int manifest_confined(struct pull *p, json_t **ret, char ret_digest[72],
			     struct error *err)
{
	struct tokens t = {0};
	int r = parse_confined(p, parse_manifest_child, NULL, &t, err);
	if (r < 0)
		return r;
	char got[2][72] = {"", ""};
	for (unsigned i = 0; i < p->replay->n_bodies && i < 2; i++) {
		char name[32], *body = NULL;
		size_t len = 0;
		snprintf(name, sizeof(name), "manifest-%u", i);
		if ((r = read_untrusted(p->meta_work, name, REGISTRY_MANIFEST_MAX, &body, &len)) < 0) {
			free(t.buf);
			return error_set_errno(err, -r, "manifest of %s from the registry process",
					       p->ref->name);
		}
		registry_sha256(body, len, got[i]);
		free(body);
	}
	const char *d = tok_next(&t), *cd = tok_next(&t);
	long long cs = 0, n = 0;
	bool ok = d && digest_ok(d) && cd && tok_int(&t, LLONG_MIN, LLONG_MAX, &cs) &&
		  tok_int(&t, 0, IMAGE_LAYERS_MAX + 1, &n);
	if (ok && p->ref->digest[0] && strcmp(got[0], p->ref->digest) != 0) {
		free(t.buf);
		return error_set(err, EBADMSG,
				 "digest mismatch: manifest %s of %s has digest %s; discarded",
				 p->ref->digest, p->ref->name, got[0]);
	}
	if (ok && strcmp(d, got[0]) != 0 && strcmp(d, got[1]) != 0)
		ok = false; /* a digest of no body the registry sent */
	json_t *layers = json_array();
	json_t *m = json_object();
	json_t *c = json_pack("{s:s, s:I}", "digest", digest_ok(cd) ? cd : "", "size",
			      (json_int_t)cs);
	ok = ok && layers && m && c && json_object_set(m, "config", c) == 0 &&
	     json_object_set(m, "layers", layers) == 0;
	for (long long i = 0; ok && i < n; i++) {
		const char *lt = tok_next(&t), *ld = tok_next(&t);
		long long ls = 0;
		json_t *tj = lt ? tok_string(lt) : NULL;
		ok = ld && tok_int(&t, LLONG_MIN, LLONG_MAX, &ls) && tj;
		json_t *l = ok ? json_pack("{s:o, s:s, s:I}", "mediaType", tj, "digest",
					   digest_ok(ld) ? ld : "", "size", (json_int_t)ls)
			       : NULL;
		if (!ok)
			json_decref(tj);
		ok = ok && l && json_array_append_new(layers, l) == 0;
	}
	ok = ok && !tok_next(&t);
	if (ok)
		snprintf(ret_digest, 72, "%s", d); /* one of got[] */
	json_decref(c);
	json_decref(layers);
	free(t.buf);
	if (!ok) {
		json_decref(m);
		return error_set(err, EPROTO, "manifest of %s: the parsing process sent an invalid result",
				 p->ref->name);
	}
	*ret = m;
	return 0;
}

struct config_arg {
	const char *body; /* verified against the manifest's config digest */
	const char *name;
};

/* The parsing child's side of the config: the number of rootfs.diff_ids then each, WorkingDir,
 * User, the number of strings in Env then each. */
static int parse_config_child(struct pull *p, const void *arg, struct tokens *t,
			      struct error *err)
{
	(void)p;
	const struct config_arg *a = arg;
	json_error_t je;
	json_t *cfg = json_loads(a->body, 0, &je), *x;
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		return error_set(err, EPROTO, "config of %s is not a JSON object: %s", a->name,
				 je.text);
	}
	json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
	size_t n = MIN(json_array_size(ids), (size_t)IMAGE_LAYERS_MAX + 1), i, k = 0;
	tok_num(t, (long long)n);
	for (i = 0; i < n; i++)
		tok_add(t, json_str_or_empty(json_array_get(ids, i)));
	json_t *cc = json_object_get(cfg, "config"), *env = json_object_get(cc, "Env");
	tok_add(t, json_str_or_empty(json_object_get(cc, "WorkingDir")));
	tok_add(t, json_str_or_empty(json_object_get(cc, "User")));
	json_array_foreach(env, i, x)
		k += json_is_string(x);
	tok_num(t, (long long)k);
	json_array_foreach(env, i, x)
		if (json_is_string(x))
			tok_add(t, json_string_value(x));
	json_decref(cfg);
	return 0;
}

/* The config from the parsing child, as the JSON object pull_via() reads: rootfs.diff_ids,
 * config.WorkingDir, .User and .Env, each checked. */
static int config_confined(struct pull *p, const char *body, const char *name, json_t **ret,
			   struct error *err)
{
	struct config_arg a = {.body = body, .name = name};
	struct tokens t = {0};
	int r = parse_confined(p, parse_config_child, &a, &t, err);
	if (r < 0)
		return r;
	long long n = 0, k = 0;
	json_t *ids = json_array(), *env = json_array();
	bool ok = ids && env && tok_int(&t, 0, IMAGE_LAYERS_MAX + 1, &n);
	for (long long i = 0; ok && i < n; i++) {
		const char *id = tok_next(&t);
		ok = id && json_array_append_new(ids, json_string(digest_ok(id) ? id : "")) == 0;
	}
	const char *wd = ok ? tok_next(&t) : NULL, *user = ok ? tok_next(&t) : NULL;
	json_t *wdj = wd ? tok_string(wd) : NULL, *uj = user ? tok_string(user) : NULL;
	ok = ok && wdj && uj && tok_int(&t, 0, TOKENS_MAX, &k);
	for (long long i = 0; ok && i < k; i++) {
		const char *e = tok_next(&t);
		json_t *ej = e ? tok_string(e) : NULL;
		ok = ej && json_array_append_new(env, ej) == 0;
	}
	ok = ok && !tok_next(&t);
	json_t *cfg = ok ? json_pack("{s:{s:O}, s:{s:O, s:O, s:O}}", "rootfs", "diff_ids", ids,
				     "config", "WorkingDir", wdj, "User", uj, "Env", env)
			 : NULL;
	json_decref(ids);
	json_decref(env);
	json_decref(wdj);
	json_decref(uj);
	free(t.buf);
	if (!cfg)
		return error_set(err, EPROTO, "config of %s: the parsing process sent an invalid result",
				 name);
	*ret = cfg;
	return 0;
}

static json_t *json_strv_or_empty(json_t *a)
{
	json_t *out = json_array(), *x;
	size_t i;
	json_array_foreach(a, i, x)
		if (json_is_string(x))
			json_array_append(out, x);
	return out;
}

/* Pull ref through the registry named in via (ref itself, or a mirror of it). */
static int pull_via(const struct image_pull_opts *o, const struct image_ref *ref,
		    const struct image_ref *via, const char *layout, struct error *err)
{
	struct pull p = {.o = o, .ref = via, .layout = layout, .meta_pid = -1, .meta_fd = -1,
			 .deadline_mono_ms = o->timeout_s > 0 ? time_mono_ms() + o->timeout_s * 1000 : 0};
	platform_or_default(&o->platform, &p.pl);
	int r = layout ? 0 : registry_open(o, via, &p.reg, err);
	if (r < 0)
		return r;
	json_t *m = NULL, *cfg = NULL, *rec = NULL;
	char *cfg_body = NULL, *dump = NULL;
	char mdigest[72];
	/* A registry's manifests come from the manifest child, checked here again. */
	static struct meta_reply meta;
	if (!layout && (r = meta_start(&p, &meta, err)) < 0)
		goto out;
	if ((r = layout ? fetch_manifest(&p, &m, mdigest, err)
			: manifest_confined(&p, &m, mdigest, err)) < 0)
		goto out;
	json_t *c = json_object_get(m, "config");
	const char *cd = json_string_value(json_object_get(c, "digest"));
	json_int_t cs = json_integer_value(json_object_get(c, "size"));
	json_t *layers = json_object_get(m, "layers"), *l;
	size_t nl = json_array_size(layers), i;
	if (!digest_ok(cd) || cs <= 0 || !json_is_array(layers) || nl == 0 ||
	    nl > IMAGE_LAYERS_MAX) {
		r = error_set(err, EPROTO,
			      "manifest of %s: needs a config digest and size and 1 to %d layers",
			      ref->name, IMAGE_LAYERS_MAX);
		goto out;
	}
	json_array_foreach(layers, i, l) {
		const char *t = json_string_value(json_object_get(l, "mediaType"));
		const char *d = json_string_value(json_object_get(l, "digest"));
		json_int_t s = json_integer_value(json_object_get(l, "size"));
		if (!layer_type_ok(t) || !digest_ok(d) || s < 0) {
			r = error_set(err, EPROTO,
				      "manifest of %s: layer %zu has an unsupported media type '%s' or an invalid digest or size",
				      ref->name, i, t ? t : "");
			goto out;
		}
	}
	/*
	 * A blob is stored whole before it is unpacked (and counted): the layers still missing (of a
	 * pull or an import) may not declare more than the limit, so what a pull downloads is
	 * bounded like what it unpacks (a 100 MiB layer took 132 MiB of the state fs under a 32Mi
	 * limit). The download stops at the declared size.
	 */
	uint64_t missing = 0;
	uint64_t limit = o->unpacked_max ? o->unpacked_max : IMAGE_UNPACKED_MAX_DEFAULT;
	json_array_foreach(layers, i, l) {
		char lp[PATH_MAX];
		path_in(lp, sizeof(lp), o->store, "layers/%s",
			json_string_value(json_object_get(l, "digest")) + 7);
		if (access(lp, F_OK) < 0)
			missing += (uint64_t)json_integer_value(json_object_get(l, "size"));
	}
	if (missing > limit) {
		r = error_set(err, EFBIG,
			      "the image's layers to download are %.1f MiB, more than %.1f MiB, the limit of --image-unpacked-max",
			      (double)missing / (1 << 20), (double)limit / (1 << 20));
		goto out;
	}
	if (o->progress_total) { /* what is left to download: the config and missing layers */
		char lp[PATH_MAX];
		uint64_t total = (uint64_t)cs;
		json_array_foreach(layers, i, l) {
			path_in(lp, sizeof(lp), o->store, "layers/%s",
				json_string_value(json_object_get(l, "digest")) + 7);
			if (access(lp, F_OK) < 0)
				total += (uint64_t)json_integer_value(json_object_get(l, "size"));
		}
		*o->progress_total = total;
	}
	if ((r = fetch_config(&p, cd, (uint64_t)cs, &cfg_body, err)) < 0)
		goto out;
	if (!layout && (r = meta_finish(&p, err)) < 0) /* before the layer children: waitpid(-1) */
		goto out;
	if (!layout) { /* the registry's: parsed by a confined child */
		if ((r = config_confined(&p, cfg_body, ref->name, &cfg, err)) < 0)
			goto out;
	} else {
		json_error_t je;
		cfg = json_loads(cfg_body, 0, &je);
		if (!json_is_object(cfg)) {
			r = error_set(err, EPROTO, "config of %s is not a JSON object: %s",
				      ref->name, je.text);
			goto out;
		}
	}
	/* Each layer's uncompressed tar is checked against its diff_id as it is unpacked: the
	 * config (bound to the reference by the manifest) must describe the layers it comes with. */
	json_t *diff_ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
	bool ids_ok = json_array_size(diff_ids) == nl;
	for (i = 0; ids_ok && i < nl; i++)
		ids_ok = digest_ok(json_string_value(json_array_get(diff_ids, i)));
	if (!ids_ok) {
		r = error_set(err, EPROTO,
			      "config of %s: rootfs.diff_ids must hold one sha256 digest for each of its %zu layers",
			      ref->name, nl);
		goto out;
	}
	if ((r = budget_init(&p.budget, o, err)) < 0)
		goto out;
	r = fetch_layers(&p, layers, diff_ids, err);
	budget_clear(&p.budget);
	if (r < 0)
		goto out;

	json_t *cc = json_object_get(cfg, "config");
	json_t *hexes = json_array();
	json_array_foreach(layers, i, l)
		json_array_append_new(hexes,
				      json_string(json_string_value(json_object_get(l, "digest")) + 7));
	rec = json_pack("{s:s, s:s, s:o, s:o}", "name", ref->name, "manifest", mdigest, "layers",
			hexes, "env", json_strv_or_empty(json_object_get(cc, "Env")));
	json_int_t size = 0;
	json_array_foreach(layers, i, l)
		size += json_integer_value(json_object_get(l, "size"));
	if (rec) {
		json_object_set_new(rec, "size", json_integer(size));
		json_object_set_new(rec, "platform", json_pack("{s:s, s:s}", "os", p.pl.os, "arch",
								p.pl.arch));
	}
	const char *wd = json_string_value(json_object_get(cc, "WorkingDir"));
	const char *user = json_string_value(json_object_get(cc, "User"));
	if (rec && wd && *wd)
		json_object_set_new(rec, "workdir", json_string(wd));
	if (rec && user && *user)
		json_object_set_new(rec, "user", json_string(user));
	dump = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
	if (!dump) {
		r = error_set(err, ENOMEM, "image record");
		goto out;
	}
	char path[PATH_MAX];
	record_path(path, sizeof(path), o->store, ref, &p.pl);
	if ((r = fs_write_atomic(path, dump, strlen(dump), 0600)) < 0)
		r = error_set_errno(err, -r, "write '%s'", path);
out:
	free(dump);
	json_decref(rec);
	json_decref(cfg);
	free(cfg_body);
	json_decref(m);
	meta_end(&p, NULL);
	registry_close(p.reg);
	return r;
}

int image_pull(const struct image_pull_opts *o, const struct image_ref *ref, struct error *err)
{
	/* Docker Hub images try the mirrors first, in order, then Docker Hub itself. */
	if (strcmp(ref->registry, "docker.io") == 0)
		for (const char *const *m = o->mirrors; m && *m; m++) {
			struct image_ref via = *ref;
			snprintf(via.registry, sizeof(via.registry), "%s", *m);
			snprintf(via.host, sizeof(via.host), "%s", *m);
			struct error e = {0};
			if (pull_via(o, ref, &via, NULL, &e) == 0)
				return 0;
			if (e.code == -ENOSPC || e.code == -ETIMEDOUT)
				return error_set(err, -e.code, "mirror %s: %s", *m, e.msg);
		}
	return pull_via(o, ref, ref, NULL, err);
}

/* The tar at path into work/root, in a child confined as a layer child is (no network; it reads
 * path, writes beneath work). The tar holds the blobs, compressed: its own limit is the image's. */
static int unpack_confined(const struct image_pull_opts *o, const char *path, const char *work,
			   struct error *err)
{
	int fds[2];
	(void)image_confine_prepare();
	if (pipe2(fds, O_CLOEXEC) < 0)
		return error_set_errno(err, errno, "pipe");
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return error_set_errno(err, errno, "fork");
	}
	if (pid == 0) {
		close(fds[0]);
		if (fds[1] > 3)
			syscall(SYS_close_range, 3U, (unsigned)fds[1] - 1, 0U);
		syscall(SYS_close_range, (unsigned)fds[1] + 1, ~0U, 0U);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		uint64_t counted[2] = {0, 0};
		struct image_budget b = {
		    .max_bytes = o->unpacked_max ? o->unpacked_max : IMAGE_UNPACKED_MAX_DEFAULT,
		    .max_entries = o->entries_max ? o->entries_max : IMAGE_ENTRIES_MAX_DEFAULT,
		    .bytes = &counted[0],
		    .entries = &counted[1],
		    .limit_name = "--image-unpacked-max",
		};
		char root[PATH_MAX + 8], opaque[PATH_MAX + 8];
		snprintf(root, sizeof(root), "%s/root", work);
		snprintf(opaque, sizeof(opaque), "%s/opaque", work);
		(void)image_layer_confine(work, NULL, path, b.max_bytes + (1u << 20));
		struct error e = {0};
		int ofd = open(opaque, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		int r = mkdir(root, 0700) < 0 || ofd < 0
			    ? error_set_errno(&e, errno, "mkdir the layout's directory")
			    : image_layer_unpack_list_opaque(path, root, &b, ofd, NULL, &e);
		e.code = r;
		ssize_t _unused_ w = write(fds[1], &e, sizeof(e));
		_exit(r < 0 ? 1 : 0);
	}
	close(fds[1]);
	int status = 0;
	struct error e = {0};
	ssize_t got = read(fds[0], &e, sizeof(e));
	close(fds[0]);
	if (RETRY_EINTR(waitpid(pid, &status, 0)) < 0)
		return error_set_errno(err, errno, "waitpid");
	if (got != (ssize_t)sizeof(e))
		return error_set(err, EIO, "unpack process died (status 0x%x)", status);
	if (e.code < 0) {
		return error_from_child(err, &e);
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0
		   ? 0
		   : error_set(err, EIO, "unpack process failed (status 0x%x)", status);
}

int image_import(const struct image_pull_opts *o, const char *path, const struct image_ref *ref,
		 struct error *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return error_set_errno(err, errno, "not found: '%s'", path);
	if (S_ISDIR(st.st_mode))
		return pull_via(o, ref, ref, path, err);
	if (!S_ISREG(st.st_mode))
		return error_set(err, EINVAL, "'%s' is neither a directory nor a tar file", path);
	/* A tar of a layout (docker save of Docker 25+, skopeo oci-archive): unpacked into tmp/
	 * by a child confined as a layer child is, imported, removed. */
	char work[PATH_MAX], root[PATH_MAX + 8];
	path_in(work, sizeof(work), o->store, "tmp/import-XXXXXX");
	if (!mkdtemp(work))
		return error_set_errno(err, errno, "mkdtemp '%s'", work);
	snprintf(root, sizeof(root), "%s/root", work);
	int r = unpack_confined(o, path, work, err);
	if (r < 0)
		error_prefix(err, "unpack '%s'", path);
	else
		r = pull_via(o, ref, ref, root, err);
	fs_remove_tree(work);
	return r;
}

static char **strv_from(json_t *a)
{
	size_t n = json_array_size(a), i;
	char **v = calloc(n + 1, sizeof(char *));
	json_t *x;
	if (!v)
		return NULL;
	json_array_foreach(a, i, x)
		if (!(v[i] = strdup(json_string_value(x) ? json_string_value(x) : "")))
			return v; /* NULL-terminated early; the caller sees ENOMEM via the count */
	return v;
}

int image_info_load(const char *store, const struct image_ref *ref, const struct image_platform *p,
		    struct image_info *ret, struct error *err)
{
	char path[PATH_MAX];
	record_path(path, sizeof(path), store, ref, p);
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!j) {
		if (access(path, F_OK) < 0)
			return error_set(err, ENOENT, "image %s is not in the store", ref->name);
		return error_set(err, EPROTO, "image record '%s': %s", path, je.text);
	}
	json_t *layers = json_object_get(j, "layers"), *x;
	size_t i;
	int r = 0;
	json_array_foreach(layers, i, x) {
		const char *h = json_string_value(x);
		char lp[PATH_MAX];
		if (!h || strlen(h) != IMAGE_HEX_LEN ||
		    strspn(h, "0123456789abcdef") != IMAGE_HEX_LEN) {
			r = error_set(err, EPROTO, "image record '%s': invalid layer", path);
			break;
		}
		path_in(lp, sizeof(lp), store, "layers/%s", h);
		if (access(lp, F_OK) < 0) {
			r = error_set(err, ENOENT, "image %s: layer %s is missing from the store",
				      ref->name, h);
			break;
		}
	}
	if (r == 0 && (json_array_size(layers) == 0 || json_array_size(layers) > IMAGE_LAYERS_MAX))
		r = error_set(err, EPROTO, "image record '%s': no layers", path);
	if (r == 0) {
		ret->n_layers = json_array_size(layers);
		ret->layers = strv_from(layers);
		ret->env = strv_from(json_object_get(j, "env"));
		const char *wd = json_string_value(json_object_get(j, "workdir"));
		const char *u = json_string_value(json_object_get(j, "user"));
		ret->workdir = wd ? strdup(wd) : NULL;
		ret->user = u ? strdup(u) : NULL;
		if (!ret->layers || !ret->env || (wd && !ret->workdir) || (u && !ret->user)) {
			image_info_clear(ret);
			r = error_set(err, ENOMEM, "image record");
		}
	}
	json_decref(j);
	return r;
}

void image_info_clear(struct image_info *info)
{
	strv_free(info->layers);
	strv_free(info->env);
	free(info->workdir);
	free(info->user);
	*info = (struct image_info)IMAGE_INFO_INIT;
}

int image_store_lock(const char *store, bool exclusive)
{
	char path[PATH_MAX];
	path_in(path, sizeof(path), store, "lock");
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (RETRY_EINTR(flock(fd, exclusive ? LOCK_EX : LOCK_SH)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* A set of hex names, as a sorted array (bsearch). */
struct hexset {
	char (*v)[IMAGE_HEX_LEN + 1];
	size_t n, cap;
};

static void hexset_add(struct hexset *h, const char *hex)
{
	if (strlen(hex) != IMAGE_HEX_LEN || strspn(hex, "0123456789abcdef") != IMAGE_HEX_LEN)
		return;
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		void *v = realloc(h->v, cap * sizeof(*h->v));
		if (!v)
			return; /* the set falls short of the count: image_gc() removes nothing */
		h->v = v;
		h->cap = cap;
	}
	memcpy(h->v[h->n++], hex, IMAGE_HEX_LEN + 1);
}

static int hex_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

int image_gc(const char *store, const char *sandboxes_dir, unsigned *ret_removed,
	     struct error *err)
{
	*ret_removed = 0;
	_cleanup_close_ int lock = image_store_lock(store, true);
	if (lock < 0)
		return error_set_errno(err, -lock, "lock the image store");
	struct hexset keep = {0};
	char path[PATH_MAX + 300];
	size_t expected = 0; /* names seen; a short set (out of memory) removes nothing */
	/* Layers of every image record. */
	path_in(path, sizeof(path), store, "refs");
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char p[PATH_MAX + 300];
		path_in(p, sizeof(p), store, "refs/%s", de->d_name);
		json_t *j = json_load_file(p, 0, NULL), *x;
		size_t i;
		if (!j && strstr(de->d_name, ".json")) {
			closedir(d);
			free(keep.v);
			return error_set(err, EPROTO, "image record '%s' is unreadable: nothing removed",
					 de->d_name);
		}
		json_array_foreach(json_object_get(j, "layers"), i, x) {
			hexset_add(&keep, json_string_value(x) ? json_string_value(x) : "");
			expected++;
		}
		json_decref(j);
	}
	if (d)
		closedir(d);
	/* Layers of every sandbox on the host's state dir (live or not yet removed). */
	d = sandboxes_dir ? opendir(sandboxes_dir) : NULL;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/" IMAGE_LAYERS_FILE, sandboxes_dir, de->d_name);
		_cleanup_fclose_ FILE *f = fopen(path, "re");
		char line[128];
		while (f && fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			hexset_add(&keep, line);
			expected++;
		}
	}
	if (d)
		closedir(d);
	if (keep.n != expected) {
		free(keep.v);
		return error_set(err, ENOMEM, "out of memory: nothing removed");
	}
	qsort(keep.v, keep.n, sizeof(*keep.v), hex_cmp);
	path_in(path, sizeof(path), store, "layers");
	d = opendir(path);
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' ||
		    bsearch(de->d_name, keep.v, keep.n, sizeof(*keep.v), hex_cmp))
			continue;
		char from[PATH_MAX + 300], to[PATH_MAX + 300];
		path_in(from, sizeof(from), store, "layers/%s", de->d_name);
		path_in(to, sizeof(to), store, "tmp/gc-%.64s-%d", de->d_name, (int)getpid());
		if (rename(from, to) == 0) {
			fs_remove_tree(to);
			(*ret_removed)++;
			path_in(from, sizeof(from), store, "sizes/%.64s", de->d_name);
			unlink(from);
			path_in(from, sizeof(from), store, "diffids/%.64s", de->d_name);
			unlink(from);
		}
	}
	if (d)
		closedir(d);
	free(keep.v);
	/* Partial downloads: no pull runs (it would hold the lock shared); the next one starts over. */
	path_in(path, sizeof(path), store, "partial");
	d = opendir(path);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.')
			(void)unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	return 0;
}

/* ---- least recently used images out ------------------------------------------------------ */

void image_record_touch(const char *store, const struct image_ref *ref,
			const struct image_platform *p)
{
	char path[PATH_MAX];
	record_path(path, sizeof(path), store, ref, p);
	(void)utimensat(AT_FDCWD, path, NULL, 0);
}

/* The layer lists of every sandbox on the state dir (live, or not yet removed), each as the
 * layers joined by ',': an image is in use when a sandbox's list is the image's. */
struct strv {
	char **v;
	size_t n;
};

static void strv_clear(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

static void sandbox_images(const char *sandboxes_dir, struct strv *ret)
{
	DIR *d = sandboxes_dir ? opendir(sandboxes_dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[PATH_MAX + 300];
		snprintf(path, sizeof(path), "%s/%s/" IMAGE_LAYERS_FILE, sandboxes_dir, de->d_name);
		_cleanup_free_ char *buf = NULL;
		if (fs_read_file(path, (IMAGE_HEX_LEN + 1) * (IMAGE_LAYERS_MAX + 1), &buf, NULL) < 0)
			continue;
		for (char *c = buf; *c; c++)
			if (*c == '\n')
				*c = ',';
		size_t n = strlen(buf);
		while (n && buf[n - 1] == ',')
			buf[--n] = '\0';
		char **v = realloc(ret->v, (ret->n + 1) * sizeof(*v));
		if (!v)
			break;
		ret->v = v;
		ret->v[ret->n++] = TAKE_PTR(buf);
	}
	if (d)
		closedir(d);
}

/* The least recently used record (oldest mtime) not named keep that no sandbox uses: its path in
 * ret, or false. */
static bool lru_record(const char *store, const char *keep, const struct strv *used, char *ret,
		       size_t len)
{
	char dir[PATH_MAX];
	path_in(dir, sizeof(dir), store, "refs");
	DIR *d = opendir(dir);
	struct dirent *de;
	struct timespec oldest = {0};
	bool found = false;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char p[PATH_MAX + 300];
		struct stat st;
		path_in(p, sizeof(p), store, "refs/%s", de->d_name);
		if (stat(p, &st) < 0 ||
		    (found && (st.st_mtim.tv_sec > oldest.tv_sec ||
			       (st.st_mtim.tv_sec == oldest.tv_sec &&
				st.st_mtim.tv_nsec >= oldest.tv_nsec))))
			continue;
		json_t *j = json_load_file(p, 0, NULL), *x;
		const char *name = json_string_value(json_object_get(j, "name"));
		bool ok = name && !(keep && strcmp(name, keep) == 0);
		char joined[(IMAGE_HEX_LEN + 1) * (IMAGE_LAYERS_MAX + 1)] = "";
		size_t i, o = 0;
		json_array_foreach(json_object_get(j, "layers"), i, x)
			if (json_string_value(x) && o + IMAGE_HEX_LEN + 2 < sizeof(joined))
				o += (size_t)snprintf(joined + o, sizeof(joined) - o, "%s%s",
						      o ? "," : "", json_string_value(x));
		for (size_t k = 0; ok && k < used->n; k++)
			if (strcmp(used->v[k], joined) == 0)
				ok = false;
		json_decref(j);
		if (!ok)
			continue;
		snprintf(ret, len, "%s", p);
		oldest = st.st_mtim;
		found = true;
	}
	if (d)
		closedir(d);
	return found;
}

int image_evict(const char *store, const char *sandboxes_dir, uint64_t max, const char *keep,
		unsigned *ret_images, struct error *err)
{
	*ret_images = 0;
	for (;;) {
		uint64_t usage = 0;
		int r = image_store_usage(store, &usage);
		if (r < 0)
			return error_set_errno(err, -r, "measure the image store");
		if (usage <= max)
			return 0;
		char victim[PATH_MAX + 300];
		{
			_cleanup_close_ int lock = image_store_lock(store, true);
			if (lock < 0)
				return error_set_errno(err, -lock, "lock the image store");
			struct strv used = {0};
			sandbox_images(sandboxes_dir, &used);
			bool found = lru_record(store, keep, &used, victim, sizeof(victim));
			strv_clear(&used);
			if (!found)
				return 0; /* what is left is in use (or the image just pulled) */
			if (unlink(victim) < 0)
				return error_set_errno(err, errno, "remove image record '%s'", victim);
		}
		(*ret_images)++;
		unsigned removed;
		if ((r = image_gc(store, sandboxes_dir, &removed, err)) < 0)
			return r;
	}
}
