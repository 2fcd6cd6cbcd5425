/*
 * The files API of corral-execd: /files/... and /directories/... (OpenSandbox execd, reference
 * §2.2 and §2.7). Every client path goes through fpath_* so it is resolved inside the sandbox
 * root; handlers reply through evhttp and never keep state between requests.
 *
 * Status mapping: bad input is 400 with the reference's code, a missing file 404 FILE_NOT_FOUND,
 * anything the kernel refuses for reasons not the client's 500 RUNTIME_ERROR (logged once here).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <jansson.h>

#include "files.h"
#include "files_multipart.h"
#include "files_path.h"
#include "files_util.h"
#include "shared/fsutil.h"
#include "shared/httputil.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/wire_error.h"
#include "users.h"

#define FILES_QUERY_PATHS_MAX 1024	   /* path= parameters in one request */
#define FILES_LIST_MAX 100000		   /* entries returned by list or search */
#define FILES_WALK_DEPTH_MAX 256	   /* directory levels list and search descend */
#define FILES_REPLACE_MAX (64u << 20)	   /* size of a file /files/replace reads */
#define FILES_REPLACE_OUT_MAX (256u << 20) /* size of a file /files/replace writes */
#define FILES_METADATA_MAX (64u << 10)	   /* one upload metadata part */

/* Short names of the files API's codes (shared/wire_error.h). */
#define CODE_BAD_BODY WIRE_CODE(INVALID_REQUEST_BODY)
#define CODE_MISSING_QUERY WIRE_CODE(MISSING_QUERY)
#define CODE_NOT_FOUND WIRE_CODE(FILE_NOT_FOUND)
#define CODE_RUNTIME WIRE_CODE(RUNTIME_ERROR)
#define CODE_INVALID_FILE WIRE_CODE(INVALID_FILE)
#define CODE_INVALID_CONTENT WIRE_CODE(INVALID_FILE_CONTENT)
#define CODE_INVALID_METADATA WIRE_CODE(INVALID_FILE_METADATA)
#define CODE_UNKNOWN WIRE_CODE(UNKNOWN)

static int root_fd = -1;

int files_set_root(const char *dir)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (root_fd >= 0)
		close(root_fd);
	root_fd = fd;
	return 0;
}

static int root(void)
{
	static bool announced;
	if (!announced) {
		/* Tests force the fallback walk through execd; production leaves it on auto. */
		const char *m = getenv("CORRAL_EXECD_FILES_RESOLVE");
		if (m && strcmp(m, "fallback") == 0)
			fpath_set_mode(FPATH_FALLBACK);
		else if (m && strcmp(m, "openat2") == 0)
			fpath_set_mode(FPATH_OPENAT2);
	}
	if (root_fd < 0) {
		const char *e = getenv("CORRAL_EXECD_FILES_ROOT");
		if (files_set_root(e && *e ? e : "/") < 0 && e && *e) {
			log_error("files: cannot open root '%s'; using '/'", e);
			files_set_root("/");
		}
	}
	if (!announced) {
		announced = true;
		log_info("files: paths resolve with %s",
			 fpath_using_openat2() ? "openat2" : "the fallback walk");
	}
	return root_fd;
}

static const char *home(void)
{
	const char *h = getenv("HOME");
	return h && *h ? h : "/root";
}

/* jansson provides json_decrefp. */
#define _cleanup_json_ _cleanup_(json_decrefp)

/*
 * Reply for a failed file operation: ENOENT is 404 FILE_NOT_FOUND, errors that come from what the
 * client asked for are 400 with code4xx, the rest 500 RUNTIME_ERROR.
 */
static void reply_errno(struct evhttp_request *req, int err, const char *code4xx, const char *fmt,
			...) _printf_(4, 5);
static void reply_errno(struct evhttp_request *req, int err, const char *code4xx, const char *fmt,
			...)
{
	char what[PATH_MAX + 128];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	err = err < 0 ? -err : err;
	switch (err) {
	case ENOENT:
		http_send_error(req, 404, CODE_NOT_FOUND, "file not found: %s", what);
		return;
	case ENOTDIR:
	case EISDIR:
	case ELOOP:
	case ENAMETOOLONG:
	case EEXIST:
	case ENOTEMPTY:
	case EINVAL:
	case EXDEV:
		http_send_error(req, 400, code4xx, "%s: %s", what, strerror(err));
		return;
	case ENOSPC:
	case EDQUOT:
		/* The sandbox's disk (resourceLimits.ephemeral-storage) is full: nothing was kept. */
		http_send_error(req, 507, WIRE_CODE(DISK_FULL), "%s: %s", what, strerror(err));
		return;
	case EMFILE:
	case ENFILE:
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
		http_send_error(req, 503, WIRE_CODE(FILE_LIMIT), "%s: %s; retry once files are closed", what,
				strerror(err));
		return;
	default:
		log_error("files: %s: %s", what, strerror(err));
		http_send_error(req, 500, CODE_RUNTIME, "%s: %s", what, strerror(err));
	}
}

/* Normalize a client path into abs, replying 400 (with code) and returning false when invalid. */
static bool normalize(struct evhttp_request *req, const char *in, char abs[PATH_MAX],
		      const char *code)
{
	int r = fpath_normalize(in, home(), abs, PATH_MAX);
	if (r == -EINVAL) {
		http_send_error(req, 400, code, "path must not be empty");
		return false;
	}
	if (r == -E2BIG) {
		http_send_error(req, 400, code, "path has more than %d components: %.200s...",
				FPATH_DEPTH_MAX, in);
		return false;
	}
	if (r < 0) {
		http_send_error(req, 400, code, "path is too long: %.200s...", in);
		return false;
	}
	return true;
}

/*
 * Open abs (the normalized form of the client's path shown) in the root with flags and fstat it.
 * Replies and returns false when either fails; *ret_fd is the caller's to close either way.
 */
static bool open_stat(struct evhttp_request *req, const char *abs, int flags, const char *shown,
		      int *ret_fd, struct stat *st)
{
	int r = fpath_open(root(), abs, flags, 0, ret_fd);
	if (r == 0 && fstat(*ret_fd, st) < 0)
		r = -errno;
	if (r < 0) {
		reply_errno(req, r, CODE_BAD_BODY, "'%s'", shown);
		return false;
	}
	return true;
}

static json_t *file_info(const char *path, const struct stat *st)
{
	char owner[USERS_NAME_MAX], group[USERS_NAME_MAX], mtime[64], ctime_[64];
	if (users_name_by_uid(st->st_uid, owner, sizeof(owner)) < 0)
		snprintf(owner, sizeof(owner), "%u", (unsigned)st->st_uid);
	if (users_name_by_gid(st->st_gid, group, sizeof(group)) < 0)
		snprintf(group, sizeof(group), "%u", (unsigned)st->st_gid);
	files_time_nano(&st->st_mtim, mtime, sizeof(mtime));
	/* The reference reports ctime as the creation time. */
	files_time_sec(st->st_ctim.tv_sec, ctime_, sizeof(ctime_));
	const char *type = S_ISLNK(st->st_mode)	  ? "symlink"
			   : S_ISDIR(st->st_mode) ? "directory"
			   : S_ISREG(st->st_mode) ? "file"
						  : "other";
	return json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:i}", "path", path, "type", type,
			 "size", (json_int_t)st->st_size, "modified_at", mtime, "created_at",
			 ctime_, "owner", owner, "group", group, "mode",
			 files_mode_encode(st->st_mode));
}

/* dir + "/" + name into out; false when that is longer than a path can be. */
static bool join_path(char out[PATH_MAX], const char *dir, const char *name)
{
	int n = snprintf(out, PATH_MAX, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name);
	return n >= 0 && n < PATH_MAX;
}

/* ---- owner, group and mode in request bodies ---- */

struct perm {
	mode_t mode; /* 0: leave alone */
	uid_t uid;   /* -1: leave alone */
	gid_t gid;
	bool has_owner; /* owner or group was given */
};

static int perm_parse(const json_t *obj, struct perm *p, char *err, size_t errlen)
{
	*p = (struct perm){.uid = (uid_t)-1, .gid = (gid_t)-1};
	if (!json_is_object(obj)) {
		snprintf(err, errlen, "expected an object with mode, owner and group");
		return -EINVAL;
	}
	json_t *mode = json_object_get(obj, "mode");
	if (mode && !json_is_null(mode)) {
		if (!json_is_integer(mode) ||
		    files_mode_decode((long long)json_integer_value(mode), &p->mode) < 0) {
			snprintf(err, errlen,
				 "mode must be octal digits 0..7777 (644 is rw-r--r--)");
			return -EINVAL;
		}
	}
	static const char *const keys[] = {"owner", "group"};
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		json_t *v = json_object_get(obj, keys[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_string(v)) {
			snprintf(err, errlen, "%s must be a string", keys[i]);
			return -EINVAL;
		}
		const char *name = json_string_value(v);
		if (!*name)
			continue;
		int r =
		    i == 0 ? users_uid_by_name(name, &p->uid) : users_gid_by_name(name, &p->gid);
		if (r < 0) {
			snprintf(err, errlen, "unknown %s '%.200s'", i == 0 ? "user" : "group",
				 name);
			return -EINVAL;
		}
		p->has_owner = true;
	}
	return 0;
}

static int perm_apply(int fd, const struct perm *p)
{
	int r;
	/* chown before chmod: chown clears the setuid and setgid bits. */
	if (p->has_owner) {
		r = fpath_fchown(fd, p->uid, p->gid);
		if (r < 0)
			return r;
	}
	if (p->mode) {
		r = fpath_fchmod(fd, p->mode);
		if (r < 0)
			return r;
	}
	return 0;
}

static json_t *body_json(struct evhttp_request *req, bool (*ok)(const json_t *), const char *want)
{
	char msg[512];
	json_t *j = NULL;
	if (http_body_json(req, false, &j, msg, sizeof(msg)) < 0) {
		http_send_error(req, 400, CODE_BAD_BODY, "%s", msg);
		return NULL;
	}
	if (!ok(j)) {
		json_decref(j);
		http_send_error(req, 400, CODE_BAD_BODY, "request body must be %s", want);
		return NULL;
	}
	return j;
}

static bool is_object(const json_t *j)
{
	return json_is_object(j);
}

static bool is_array(const json_t *j)
{
	return json_is_array(j);
}

/*
 * A POST of {path: {mode, owner, group}}: every entry is checked before anything changes, then
 * apply(abs, perm) runs for each in turn; the first failure is answered as "<doing> '<path>'".
 */
static void handle_perm_body(struct evhttp_request *req,
			     int (*apply)(const char *abs, const struct perm *p), const char *doing)
{
	_cleanup_json_ json_t *body =
	    body_json(req, is_object, "an object {path: {mode, owner, group}}");
	if (!body)
		return;
	const char *key;
	json_t *val;
	char err[512];
	json_object_foreach(body, key, val)
	{
		struct perm p;
		if (perm_parse(val, &p, err, sizeof(err)) < 0) {
			http_send_error(req, 400, CODE_BAD_BODY, "'%s': %s", key, err);
			return;
		}
	}
	json_object_foreach(body, key, val)
	{
		struct perm p;
		char abs[PATH_MAX];
		perm_parse(val, &p, err, sizeof(err));
		if (!normalize(req, key, abs, CODE_BAD_BODY))
			return;
		int r = apply(abs, &p);
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "%s '%s'", doing, key);
			return;
		}
	}
	http_send_empty(req, 200);
}

/*
 * Repeated path= parameters of q (NULL: parsing it ran out of memory); replies and returns -1 when
 * q is NULL or there are too many.
 */
static int query_paths(struct evhttp_request *req, const struct http_query *q, const char **out)
{
	if (!q) {
		http_send_error(req, 500, CODE_RUNTIME, "out of memory");
		return -1;
	}
	size_t n = http_query_get_all(q, "path", out, FILES_QUERY_PATHS_MAX + 1);
	if (n > FILES_QUERY_PATHS_MAX) {
		http_send_error(req, 400, CODE_BAD_BODY, "at most %d path parameters are allowed",
				FILES_QUERY_PATHS_MAX);
		return -1;
	}
	return (int)n;
}

/* ---- GET /files/info ---- */

static void handle_info(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *paths[FILES_QUERY_PATHS_MAX + 1];
	int n = query_paths(req, q, paths);
	if (n < 0)
		return;
	_cleanup_json_ json_t *out = json_object();
	for (int i = 0; i < n; i++) {
		char abs[PATH_MAX];
		if (!normalize(req, paths[i], abs, CODE_BAD_BODY))
			return;
		_cleanup_close_ int fd = -1;
		struct stat st;
		if (!open_stat(req, abs, O_PATH | O_NOFOLLOW, paths[i], &fd, &st))
			return;
		json_object_set_new(out, paths[i], file_info(abs, &st));
	}
	http_send_json(req, 200, TAKE_PTR(out));
}

/* ---- DELETE /files ---- */

static void handle_delete_files(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *paths[FILES_QUERY_PATHS_MAX + 1];
	int n = query_paths(req, q, paths);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		char abs[PATH_MAX];
		if (!normalize(req, paths[i], abs, CODE_BAD_BODY))
			return;
		if (strcmp(abs, "/") == 0) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"'%s' is a directory; use DELETE /directories", paths[i]);
			return;
		}
		_cleanup_close_ int dfd = -1;
		const char *name;
		struct stat st;
		int r = fpath_open_parent(root(), abs, &dfd, &name);
		if (r == 0 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			r = -errno;
		if (r == -ENOENT || r == -ENOTDIR)
			continue; /* nothing to delete */
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "removing '%s'", paths[i]);
			return;
		}
		if (S_ISDIR(st.st_mode)) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"'%s' is a directory; use DELETE /directories", paths[i]);
			return;
		}
		if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
			reply_errno(req, errno, CODE_BAD_BODY, "removing '%s'", paths[i]);
			return;
		}
	}
	http_send_empty(req, 200);
}

/* ---- POST /files/permissions ---- */

static int set_permissions(const char *abs, const struct perm *p)
{
	_cleanup_close_ int fd = -1;
	int r = fpath_open(root(), abs, O_PATH, 0, &fd);
	return r < 0 ? r : perm_apply(fd, p);
}

static void handle_permissions(struct evhttp_request *req)
{
	handle_perm_body(req, set_permissions, "changing permissions of");
}

/* ---- POST /files/mv ---- */

static void handle_mv(struct evhttp_request *req)
{
	_cleanup_json_ json_t *body = body_json(req, is_array, "an array of {src, dest}");
	if (!body)
		return;
	size_t i;
	json_t *item;
	json_array_foreach(body, i, item)
	{
		const char *src = json_string_value(json_object_get(item, "src"));
		const char *dest = json_string_value(json_object_get(item, "dest"));
		if (!json_is_object(item) || !src || !*src || !dest || !*dest) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"item %zu: src and dest must be non-empty strings", i);
			return;
		}
	}
	json_array_foreach(body, i, item)
	{
		const char *src = json_string_value(json_object_get(item, "src"));
		const char *dest = json_string_value(json_object_get(item, "dest"));
		char asrc[PATH_MAX], adest[PATH_MAX];
		if (!normalize(req, src, asrc, CODE_BAD_BODY) ||
		    !normalize(req, dest, adest, CODE_BAD_BODY))
			return;
		if (strcmp(asrc, "/") == 0 || strcmp(adest, "/") == 0) {
			http_send_error(req, 400, CODE_BAD_BODY, "cannot move the root directory");
			return;
		}
		_cleanup_close_ int sfd = -1, dfd = -1;
		const char *sname, *dname;
		struct stat st;
		int r = fpath_open_parent(root(), asrc, &sfd, &sname);
		if (r == 0 && fstatat(sfd, sname, &st, AT_SYMLINK_NOFOLLOW) < 0)
			r = -errno;
		if (r < 0) {
			reply_errno(req, r == -ENOTDIR ? -ENOENT : r, CODE_BAD_BODY, "source '%s'",
				    src);
			return;
		}
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%s", adest);
		char *slash = strrchr(parent, '/');
		slash[slash == parent ? 1 : 0] = '\0';
		r = fpath_mkdir_p(root(), parent, 0755, (uid_t)-1, (gid_t)-1, NULL);
		if (r == 0)
			r = fpath_open_parent(root(), adest, &dfd, &dname);
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "destination directory of '%s'", dest);
			return;
		}
		if (fstatat(dfd, dname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			http_send_error(req, 409, CODE_BAD_BODY,
					"destination path already exists: %s", dest);
			return;
		}
		r = renameat2(sfd, sname, dfd, dname, RENAME_NOREPLACE);
		if (r < 0 && errno == EINVAL) /* file systems without RENAME_NOREPLACE */
			r = renameat(sfd, sname, dfd, dname);
		if (r < 0) {
			if (errno == EEXIST) {
				http_send_error(req, 409, CODE_BAD_BODY,
						"destination path already exists: %s", dest);
				return;
			}
			reply_errno(req, errno, CODE_BAD_BODY, "moving '%s' to '%s'", src, dest);
			return;
		}
	}
	http_send_empty(req, 200);
}

/* ---- directory walks for search and list ---- */

struct walk {
	json_t *out;
	size_t count;
	struct files_glob *glob; /* search: glob on base names; NULL for list */
	int max_depth;	     /* list: levels to descend (1 = children only) */
	int err;	     /* negative errno */
	char where[PATH_MAX];
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* Sorted names of the entries of dfd (consumed), like Go's os.ReadDir. */
static int read_names(int dfd, char ***ret, size_t *ret_n)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		int r = -errno;
		close(dfd);
		return r;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int r = 0;
	errno = 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			char **nn = realloc(names, cap * sizeof(*names));
			if (!nn) {
				r = -ENOMEM;
				break;
			}
			names = nn;
		}
		if (!(names[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (r < 0) {
		free_names(names, n);
		return r;
	}
	if (n)
		qsort(names, n, sizeof(*names), cmp_names);
	*ret = names;
	*ret_n = n;
	return 0;
}

/*
 * Walk dfd (consumed) whose client-visible path is dir; symlinks are never followed. Recurses once
 * per level, at most FILES_WALK_DEPTH_MAX: the frame stays small (the child's path is on the heap).
 */
static int walk_dir(struct walk *w, int dfd, const char *dir, int depth)
{
	char **names = NULL;
	size_t n = 0;
	_cleanup_free_ char *child = malloc(PATH_MAX);
	if (!child) {
		close(dfd);
		snprintf(w->where, sizeof(w->where), "%s", dir);
		return -ENOMEM;
	}
	/* fdopendir consumes dfd: keep our own handle for the *at calls below. */
	_cleanup_close_ int self = openat(dfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int r = self < 0 ? -errno : read_names(dfd, &names, &n);
	if (self < 0)
		close(dfd);
	if (r < 0) {
		snprintf(w->where, sizeof(w->where), "%s", dir);
		return r;
	}
	for (size_t i = 0; i < n && r == 0; i++) {
		struct stat st;
		/* Deeper than a path can name (a tree built with relative mkdirs): not listed. */
		if (!join_path(child, dir, names[i]))
			continue;
		if (fstatat(self, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue; /* removed while we walk */
			r = -errno;
			snprintf(w->where, sizeof(w->where), "%s", child);
			break;
		}
		bool take = true;
		if (w->glob) {
			int m = S_ISREG(st.st_mode) ? files_glob_matches(w->glob, names[i]) : 0;
			if (m < 0) {
				r = m;
				break;
			}
			take = m == 1;
		}
		if (take) {
			if (w->count >= FILES_LIST_MAX) {
				r = -E2BIG;
				break;
			}
			json_array_append_new(w->out, file_info(child, &st));
			w->count++;
		}
		bool descend = S_ISDIR(st.st_mode) && depth + 1 < FILES_WALK_DEPTH_MAX &&
			       (w->glob || depth + 1 < w->max_depth);
		if (descend) {
			int cfd =
			    openat(self, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0) {
				if (errno == ENOENT)
					continue;
				r = -errno;
				snprintf(w->where, sizeof(w->where), "%s", child);
				break;
			}
			r = walk_dir(w, cfd, child, depth + 1);
		}
	}
	free_names(names, n);
	return r;
}

/* Answer a walk that returned r: its entries, or why it failed. Takes w->out. */
static void reply_walk(struct evhttp_request *req, struct walk *w, int r)
{
	if (r >= 0) {
		http_send_json(req, 200, w->out);
		return;
	}
	json_decref(w->out);
	if (r == -E2BIG && w->count >= FILES_LIST_MAX)
		http_send_error(req, 400, CODE_BAD_BODY,
				"more than %d entries; narrow the path, depth or pattern",
				FILES_LIST_MAX);
	else if (r == -E2BIG)
		http_send_error(req, 400, CODE_BAD_BODY,
				"pattern is too costly to match against this tree (more than %llu pattern bytes scanned); simplify the pattern or narrow the path",
				(unsigned long long)GLOB_MATCH_BUDGET);
	else
		reply_errno(req, r, CODE_BAD_BODY, "walking '%s'", w->where);
}

/* ---- GET /files/search ---- */

static void handle_search(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *path = q ? http_query_get(q, "path") : NULL;
	if (!path || !*path) {
		http_send_error(req, 400, CODE_MISSING_QUERY, "missing query parameter 'path'");
		return;
	}
	const char *pattern = http_query_get(q, "pattern");
	if (!pattern || !*pattern)
		pattern = "**";
	char why[160];
	_cleanup_(files_glob_freep) struct files_glob *glob = NULL;
	if (files_glob_new(pattern, &glob, why, sizeof(why)) < 0) {
		http_send_error(req, 400, CODE_BAD_BODY, "invalid pattern '%.200s': it %s", pattern,
				why);
		return;
	}
	char abs[PATH_MAX];
	if (!normalize(req, path, abs, CODE_BAD_BODY))
		return;
	_cleanup_close_ int fd = -1;
	struct stat st;
	if (!open_stat(req, abs, O_RDONLY | O_NONBLOCK, path, &fd, &st))
		return;
	struct walk w = {.out = json_array(), .glob = glob};
	int r = 0;
	if (S_ISDIR(st.st_mode)) {
		/* A symlinked root is followed (like the reference's os.Stat); nothing below is. */
		int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = dfd < 0 ? -errno : walk_dir(&w, dfd, abs, 0);
	} else if (S_ISREG(st.st_mode)) {
		const char *base = strrchr(abs, '/') + 1;
		r = files_glob_matches(glob, base);
		if (r == 1)
			json_array_append_new(w.out, file_info(abs, &st));
	}
	reply_walk(req, &w, r);
}

/* ---- GET /directories/list ---- */

static void handle_list(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *path = q ? http_query_get(q, "path") : NULL;
	if (!path || !*path) {
		http_send_error(req, 400, CODE_MISSING_QUERY, "missing query parameter 'path'");
		return;
	}
	long depth = 1;
	const char *ds = http_query_get(q, "depth");
	if (ds && *ds) {
		char *end;
		errno = 0;
		depth = strtol(ds, &end, 10);
		if (*end || errno || depth < 0) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"invalid query parameter 'depth': %.100s", ds);
			return;
		}
	}
	char abs[PATH_MAX];
	if (!normalize(req, path, abs, CODE_BAD_BODY))
		return;
	_cleanup_close_ int fd = -1;
	struct stat st;
	if (!open_stat(req, abs, O_PATH | O_NOFOLLOW, path, &fd, &st))
		return;
	if (S_ISLNK(st.st_mode)) {
		http_send_error(req, 400, CODE_BAD_BODY,
				"path is a symbolic link, refusing to traverse: %s", abs);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		http_send_error(req, 400, CODE_BAD_BODY, "path is not a directory: %s", abs);
		return;
	}
	struct walk w = {.out = json_array(), .max_depth = (int)MIN(depth, FILES_WALK_DEPTH_MAX)};
	int r = 0;
	if (depth > 0) {
		int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		r = dfd < 0 ? -errno : walk_dir(&w, dfd, abs, 0);
	}
	reply_walk(req, &w, r);
}

/* ---- POST /files/replace ---- */

static int read_all(int fd, char *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = pread(fd, buf + off, len - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* shrank under us */
		off += (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const char *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = off >= 0 ? pwrite(fd, buf, len, off) : write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
		if (off >= 0)
			off += n;
	}
	return 0;
}

static size_t count_occurrences(const char *s, size_t n, const char *old, size_t oldn)
{
	size_t c = 0;
	const char *p = s, *end = s + n;
	while ((p = memmem(p, (size_t)(end - p), old, oldn))) {
		c++;
		p += oldn;
	}
	return c;
}

/* Replace all of old in the file at fd; *ret_count gets the number of replacements. */
static int replace_in_fd(int fd, const char *old, size_t oldn, const char *new, size_t newn,
			 size_t *ret_count, char *err, size_t errlen)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "not a regular file");
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > FILES_REPLACE_MAX) {
		snprintf(err, errlen, "file is larger than %u MiB", FILES_REPLACE_MAX >> 20);
		return -EFBIG;
	}
	size_t size = (size_t)st.st_size;
	_cleanup_free_ char *buf = malloc(size + 1);
	if (!buf)
		return -ENOMEM;
	int r = read_all(fd, buf, size);
	if (r < 0)
		return r;
	size_t count = count_occurrences(buf, size, old, oldn);
	*ret_count = count;
	if (!count)
		return 0;
	uint64_t outn = (uint64_t)size - (uint64_t)count * oldn + (uint64_t)count * newn;
	if (outn > FILES_REPLACE_OUT_MAX) {
		snprintf(err, errlen, "result would be larger than %u MiB",
			 FILES_REPLACE_OUT_MAX >> 20);
		return -EFBIG;
	}
	_cleanup_free_ char *out = malloc(outn + 1);
	if (!out)
		return -ENOMEM;
	const char *p = buf, *end = buf + size, *hit;
	char *o = out;
	while ((hit = memmem(p, (size_t)(end - p), old, oldn))) {
		memcpy(o, p, (size_t)(hit - p));
		o += hit - p;
		memcpy(o, new, newn);
		o += newn;
		p = hit + oldn;
	}
	memcpy(o, p, (size_t)(end - p));
	r = write_all(fd, out, outn, 0);
	if (r == 0 && ftruncate(fd, (off_t)outn) < 0)
		r = -errno;
	return r;
}

static void handle_replace(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *v = q ? http_query_get(q, "verbose") : NULL;
	bool verbose = v && strcmp(v, "true") == 0;
	_cleanup_json_ json_t *body = body_json(req, is_object, "an object {path: {old, new}}");
	if (!body)
		return;
	const char *key;
	json_t *val;
	json_object_foreach(body, key, val)
	{
		json_t *old = json_object_get(val, "old"), *new = json_object_get(val, "new");
		if (!json_is_object(val) || !json_is_string(old) ||
		    (new && !json_is_null(new) && !json_is_string(new))) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"'%s': expected {\"old\": string, \"new\": string}", key);
			return;
		}
		if (json_string_length(old) == 0) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"'%s': old content must not be empty", key);
			return;
		}
	}
	_cleanup_json_ json_t *results = json_object();
	json_object_foreach(body, key, val)
	{
		json_t *old = json_object_get(val, "old"), *new = json_object_get(val, "new");
		char abs[PATH_MAX], err[128] = "";
		if (!normalize(req, key, abs, CODE_BAD_BODY))
			return;
		_cleanup_close_ int fd = -1;
		size_t count = 0;
		int r = fpath_open(root(), abs, O_RDWR | O_NONBLOCK, 0, &fd);
		if (r == 0)
			r = replace_in_fd(fd, json_string_value(old), json_string_length(old),
					  json_is_string(new) ? json_string_value(new) : "",
					  json_is_string(new) ? json_string_length(new) : 0, &count,
					  err, sizeof(err));
		if (r < 0 && err[0]) {
			http_send_error(req, 400, CODE_BAD_BODY, "'%s': %s", key, err);
			return;
		}
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "replacing in '%s'", key);
			return;
		}
		json_object_set_new(results, key,
				    json_pack("{s:I}", "replacedCount", (json_int_t)count));
	}
	if (verbose)
		http_send_json(req, 200, TAKE_PTR(results));
	else
		http_send_empty(req, 200);
}

/* ---- POST /directories ---- */

static int make_directory(const char *abs, const struct perm *p)
{
	bool created = false;
	/* Like the reference: owner and group go to the directories made here only. */
	int r = fpath_mkdir_p(root(), abs, 0777, p->uid, p->gid, &created);
	if (r == 0 && created && p->mode) {
		_cleanup_close_ int fd = -1;
		r = fpath_open(root(), abs, O_PATH | O_DIRECTORY, 0, &fd);
		if (r == 0)
			r = fpath_fchmod(fd, p->mode);
	}
	return r;
}

static void handle_mkdir(struct evhttp_request *req)
{
	handle_perm_body(req, make_directory, "creating directory");
}

/* ---- DELETE /directories ---- */

static void handle_rmdir(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *paths[FILES_QUERY_PATHS_MAX + 1];
	int n = query_paths(req, q, paths);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		char abs[PATH_MAX];
		if (!normalize(req, paths[i], abs, CODE_BAD_BODY))
			return;
		if (strcmp(abs, "/") == 0) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"refusing to remove the root directory");
			return;
		}
		_cleanup_close_ int dfd = -1;
		const char *name;
		int r = fpath_open_parent(root(), abs, &dfd, &name);
		if (r == -ENOENT || r == -ENOTDIR)
			continue;
		if (r == 0) {
			/* A mount point itself is never removed, nor is anything below one. */
			struct statx top, parent;
			if (statx(dfd, name, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &top) == 0 &&
			    statx(dfd, "", AT_EMPTY_PATH, STATX_MNT_ID, &parent) == 0 &&
			    S_ISDIR(top.stx_mode) &&
			    (top.stx_dev_major != parent.stx_dev_major ||
			     top.stx_dev_minor != parent.stx_dev_minor ||
			     ((top.stx_mask & parent.stx_mask & STATX_MNT_ID) &&
			      top.stx_mnt_id != parent.stx_mnt_id)))
				r = -EBUSY;
			else
				r = fs_remove_tree_at(dfd, name);
		}
		if (r == -EBUSY) {
			const char *msg = "is or contains a mount point, which is never removed";
			http_send_error(req, 409, CODE_RUNTIME, "'%s' %s", paths[i], msg);
			return;
		}
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "removing '%s'", paths[i]);
			return;
		}
	}
	http_send_empty(req, 200);
}

/* ---- GET /files/download ---- */

/*
 * Byte range of lines [first, first + count) of fd (1-based, each with its newline; a last line
 * without one counts), found by scanning with a small buffer.
 */
static void evbuffer_freep(struct evbuffer **b)
{
	if (*b)
		evbuffer_free(*b);
}

/* A line read is built in memory (terminators stripped): at most this much of the file. */
#define LINES_MAX (64 << 20)

static int line_range(int fd, uint64_t size, uint64_t first, uint64_t count, uint64_t *ret_off,
		      uint64_t *ret_len)
{
	char buf[65536];
	uint64_t line = 1, pos = 0, start = first == 1 ? 0 : size, end = size;
	uint64_t last = first + count - 1; /* the last line wanted */
	while (pos < size) {
		ssize_t n = pread(fd, buf, sizeof(buf), (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		const char *p = buf, *e = buf + n;
		while ((p = memchr(p, '\n', (size_t)(e - p)))) {
			uint64_t after = pos + (uint64_t)(p - buf) + 1;
			if (line == last) {
				end = after;
				goto done;
			}
			line++;
			if (line == first)
				start = after;
			p++;
		}
		pos += (uint64_t)n;
	}
done:
	*ret_off = MIN(start, size);
	*ret_len = end > *ret_off ? end - *ret_off : 0;
	return 0;
}

/*
 * Lines [off, off + len) of fd as the reference returns them: each without its terminator ("\n"
 * or "\r\n"), joined by "\n" (so no terminator after the last one).
 */
static int lines_read(int fd, uint64_t off, uint64_t len, struct evbuffer *out)
{
	char buf[65536], o[65536];
	uint64_t end = off + len;
	for (int i = 0; i < 2 && end > off; i++) { /* the last line's "\n", then its "\r" */
		char c;
		ssize_t n = RETRY_EINTR(pread(fd, &c, 1, (off_t)(end - 1)));
		if (n < 0)
			return -errno;
		if (n == 1 && c == (i == 0 ? '\n' : '\r'))
			end--;
		else
			break;
	}
	bool cr = false; /* a '\r' held back: dropped if a '\n' follows */
	for (uint64_t pos = off; pos < end;) {
		ssize_t n = RETRY_EINTR(pread(fd, buf, MIN(sizeof(buf), end - pos), (off_t)pos));
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		size_t k = 0;
		if (cr && buf[0] != '\n')
			o[k++] = '\r';
		cr = false;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] == '\r' && i + 1 == n) {
				cr = true;
				break;
			}
			if (buf[i] == '\r' && buf[i + 1] == '\n')
				continue;
			o[k++] = buf[i];
		}
		if (evbuffer_add(out, o, k) < 0)
			return -ENOMEM;
		pos += (uint64_t)n;
	}
	if (cr && evbuffer_add(out, "\r", 1) < 0)
		return -ENOMEM;
	return 0;
}

/* A positive decimal integer query parameter. */
static bool parse_positive(const char *s, uint64_t *ret)
{
	char *end;
	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || v == 0 || v > INT64_MAX)
		return false;
	*ret = v;
	return true;
}

static void handle_download(struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *path = q ? http_query_get(q, "path") : NULL;
	if (!path || !*path) {
		http_send_error(req, 400, CODE_MISSING_QUERY, "missing query parameter 'path'");
		return;
	}
	/* Line-based reading, as the reference's newer execd: offset (1-based, default 1) and
	 * limit (default: to the end of the file), either alone; not together with Range. */
	const char *os_ = http_query_get(q, "offset"), *ls = http_query_get(q, "limit");
	bool by_lines = (os_ && *os_) || (ls && *ls);
	uint64_t first = 1, count = INT64_MAX;
	if (by_lines) {
		if (evhttp_find_header(evhttp_request_get_input_headers(req), "Range")) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"a Range header cannot be combined with offset or limit");
			return;
		}
		if (os_ && *os_ && !parse_positive(os_, &first)) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"offset must be a positive integer (1-based)");
			return;
		}
		if (ls && *ls && !parse_positive(ls, &count)) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"limit must be a positive integer");
			return;
		}
		if (count > INT64_MAX - first)
			count = INT64_MAX - first;
	}
	char abs[PATH_MAX];
	if (!normalize(req, path, abs, CODE_BAD_BODY))
		return;
	_cleanup_close_ int fd = -1;
	struct stat st;
	/* O_NONBLOCK: opening a FIFO must not hang the event loop. */
	if (!open_stat(req, abs, O_RDONLY | O_NONBLOCK, path, &fd, &st))
		return;
	if (!S_ISREG(st.st_mode)) {
		http_send_error(req, 400, CODE_BAD_BODY, "not a regular file: %s", abs);
		return;
	}
	uint64_t size = (uint64_t)st.st_size, off = 0, len = size;
	int status = 200;
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *range = by_lines ? NULL : evhttp_find_header(in, "Range");
	_cleanup_(evbuffer_freep) struct evbuffer *text = NULL;
	if (by_lines) {
		int r = line_range(fd, size, first, count, &off, &len);
		if (r == 0 && len > LINES_MAX)
			r = -EFBIG;
		if (r == 0 && !(text = evbuffer_new()))
			r = -ENOMEM;
		if (r == 0)
			r = lines_read(fd, off, len, text);
		if (r == -EFBIG) {
			http_send_error(req, 400, CODE_BAD_BODY,
					"the lines asked for are more than %d MiB: read them in parts (a smaller limit) or by bytes (Range)",
					LINES_MAX >> 20);
			return;
		}
		if (r < 0) {
			reply_errno(req, r, CODE_BAD_BODY, "reading '%s'", path);
			return;
		}
		len = evbuffer_get_length(text);
	} else if (range) {
		struct files_range rg;
		int r = files_parse_range(range, size, &rg);
		if (r < 0) {
			char cr[64];
			snprintf(cr, sizeof(cr), "bytes */%llu", (unsigned long long)size);
			evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Range",
					  cr);
			http_send_error(req, 416, CODE_UNKNOWN, "%s range '%.100s' for %llu bytes",
					r == -ERANGE ? "unsatisfiable" : "invalid", range,
					(unsigned long long)size);
			return;
		}
		off = rg.start;
		len = rg.length;
		status = 206;
	}

	/* The segment owns fd from here; it is sent with sendfile, never read into memory. */
	struct evbuffer_file_segment *seg = NULL;
	bool head = evhttp_request_get_command(req) == EVHTTP_REQ_HEAD;
	if (len && !head && !text) {
		seg = evbuffer_file_segment_new(fd, (ev_off_t)off, (ev_off_t)len,
						EVBUF_FS_CLOSE_ON_FREE);
		if (!seg) {
			reply_errno(req, ENOMEM, CODE_BAD_BODY, "sending '%s'", path);
			return;
		}
		fd = -1;
	}

	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const char *base = strrchr(abs, '/') + 1;
	char cd[3 * 256 + 128], num[32], lm[64];
	files_content_disposition(*base ? base : "download", cd, sizeof(cd));
	snprintf(num, sizeof(num), "%llu", (unsigned long long)len);
	struct tm tm;
	gmtime_r(&st.st_mtim.tv_sec, &tm);
	strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (by_lines) {
		evhttp_add_header(out, "Content-Type", "text/plain; charset=utf-8");
	} else {
		evhttp_add_header(out, "Content-Type", "application/octet-stream");
		evhttp_add_header(out, "Content-Disposition", cd);
		evhttp_add_header(out, "Accept-Ranges", "bytes");
		evhttp_add_header(out, "Last-Modified", lm);
	}
	evhttp_add_header(out, "Content-Length", num);
	if (status == 206) {
		char cr[96];
		snprintf(cr, sizeof(cr), "bytes %llu-%llu/%llu", (unsigned long long)off,
			 (unsigned long long)(off + len - 1), (unsigned long long)size);
		evhttp_add_header(out, "Content-Range", cr);
	}

	/*
	 * With Content-Length set, evhttp_send_reply_start sends plain (not chunked) framing. The
	 * file then goes straight into the connection's output buffer, which drains to the socket,
	 * so libevent uses sendfile instead of mapping or reading the file.
	 */
	evhttp_send_reply_start(req, status, http_reason(status));
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	if (seg) {
		if (bev)
			evbuffer_add_file_segment(bufferevent_get_output(bev), seg, 0,
						  (ev_off_t)len);
		evbuffer_file_segment_free(seg);
	}
	if (text && !head && bev)
		evbuffer_add_buffer(bufferevent_get_output(bev), text);
	evhttp_send_reply_end(req);
}

/* ---- POST /files/upload ---- */

enum up_kind { UP_OTHER, UP_METADATA, UP_FILE };

struct up_part {
	enum up_kind kind;
	uint64_t start, end;
	char *meta; /* metadata JSON */
	size_t metalen;
};

struct upload {
	struct up_part *parts;
	size_t n, cap;
	bool meta_too_big;
};

static int up_begin(void *ud, const struct multipart_part *part)
{
	struct upload *u = ud;
	if (u->n == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 8;
		struct up_part *np = realloc(u->parts, cap * sizeof(*np));
		if (!np)
			return -ENOMEM;
		u->parts = np;
		u->cap = cap;
	}
	struct up_part *p = &u->parts[u->n++];
	*p = (struct up_part){.start = part->data_start, .end = part->data_start};
	/* Like Go's form.File: only parts with a filename count. */
	if (part->has_filename && strcmp(part->name, "metadata") == 0)
		p->kind = UP_METADATA;
	else if (part->has_filename && strcmp(part->name, "file") == 0)
		p->kind = UP_FILE;
	return 0;
}

static int up_data(void *ud, const char *data, size_t len)
{
	struct upload *u = ud;
	struct up_part *p = &u->parts[u->n - 1];
	if (p->kind != UP_METADATA || !len)
		return 0;
	if (p->metalen + len > FILES_METADATA_MAX) {
		u->meta_too_big = true;
		return -EFBIG;
	}
	char *nm = realloc(p->meta, p->metalen + len + 1);
	if (!nm)
		return -ENOMEM;
	memcpy(nm + p->metalen, data, len);
	p->meta = nm;
	p->metalen += len;
	p->meta[p->metalen] = '\0';
	return 0;
}

static int up_end(void *ud, uint64_t end)
{
	struct upload *u = ud;
	u->parts[u->n - 1].end = end;
	return 0;
}

static const struct multipart_callbacks up_callbacks = {
    .part_begin = up_begin,
    .part_data = up_data,
    .part_end = up_end,
};

static void upload_clear(struct upload *u)
{
	for (size_t i = 0; i < u->n; i++)
		free(u->parts[i].meta);
	free(u->parts);
}

struct up_meta {
	char abs[PATH_MAX];
	struct perm perm;
};

/* Write body bytes [start, end) (offsets over the iovecs) to fd. */
static int write_range(int fd, const struct evbuffer_iovec *v, int nv, uint64_t start, uint64_t end)
{
	uint64_t pos = 0;
	for (int i = 0; i < nv && pos < end; i++) {
		uint64_t a = pos, b = pos + v[i].iov_len;
		pos = b;
		if (b <= start)
			continue;
		uint64_t s = MAX(a, start), e = MIN(b, end);
		int r = write_all(fd, (const char *)v[i].iov_base + (s - a), (size_t)(e - s), -1);
		if (r < 0)
			return r;
	}
	return pos >= end ? 0 : -EIO;
}

static int upload_one(struct evhttp_request *req, const struct up_meta *m,
		      const struct evbuffer_iovec *v, int nv, const struct up_part *fp)
{
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", m->abs);
	char *slash = strrchr(parent, '/');
	slash[slash == parent ? 1 : 0] = '\0';
	uid_t uid = m->perm.has_owner ? m->perm.uid : (uid_t)-1;
	gid_t gid = m->perm.has_owner ? m->perm.gid : (gid_t)-1;
	int r = fpath_mkdir_p(root(), parent, 0777, uid, gid, NULL);
	if (r < 0) {
		reply_errno(req, r, CODE_INVALID_FILE, "creating the directory of '%s'", m->abs);
		return r;
	}
	_cleanup_close_ int fd = -1;
	/* O_NONBLOCK: a FIFO planted at the path must not hang the event loop (ENXIO instead). */
	r = fpath_open(root(), m->abs, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK, 0777, &fd);
	struct stat st;
	if (r == 0 && fstat(fd, &st) < 0)
		r = -errno;
	if (r == 0 && !S_ISREG(st.st_mode))
		r = -EINVAL;
	if (r < 0) {
		reply_errno(req, r == -ENXIO ? -EINVAL : r, CODE_INVALID_FILE,
			    "opening '%s' as a regular file", m->abs);
		return r;
	}
	r = write_range(fd, v, nv, fp->start, fp->end);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r < 0) {
		reply_errno(req, r, CODE_INVALID_FILE, "writing '%s'", m->abs);
		return r;
	}
	struct perm p = m->perm;
	if (!p.has_owner) {
		/* The reference chowns to execd's own ids when neither owner nor group is given. */
		p.uid = geteuid();
		p.gid = getegid();
		p.has_owner = true;
	}
	r = perm_apply(fd, &p);
	if (r < 0) {
		reply_errno(req, r, CODE_INVALID_FILE, "setting owner and mode of '%s'", m->abs);
		return r;
	}
	/* Make the new directory entry durable too (best effort, as the reference). */
	_cleanup_close_ int dfd = -1;
	if (fpath_open(root(), parent, O_RDONLY | O_DIRECTORY, 0, &dfd) == 0)
		(void)fsync(dfd);
	return 0;
}

static void handle_upload(struct evhttp_request *req)
{
	char boundary[MULTIPART_BOUNDARY_MAX + 1], err[256];
	const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
	if (multipart_boundary(ct, boundary, sizeof(boundary), err, sizeof(err)) < 0) {
		http_send_error(req, 400, CODE_INVALID_FILE, "multipart form is invalid: %s", err);
		return;
	}
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	int nv = evbuffer_peek(in, -1, NULL, NULL, 0);
	_cleanup_free_ struct evbuffer_iovec *v = calloc((size_t)MAX(nv, 1), sizeof(*v));
	_cleanup_free_ struct multipart_parser *mp = malloc(sizeof(*mp));
	_cleanup_free_ struct up_meta *metas = NULL;
	struct upload u = {0};
	if (!v || !mp) {
		http_send_error(req, 500, CODE_RUNTIME, "out of memory");
		return;
	}
	nv = evbuffer_peek(in, -1, NULL, v, nv);

	/* Pass 1: parse the whole body, remembering where each part's data lies. */
	int r = multipart_init(mp, boundary, &up_callbacks, &u);
	for (int i = 0; i < nv && r == 0; i++)
		r = multipart_feed(mp, v[i].iov_base, v[i].iov_len);
	if (r == 0)
		r = multipart_finish(mp);
	if (r < 0) {
		if (u.meta_too_big)
			http_send_error(req, 400, CODE_INVALID_METADATA,
					"metadata part is larger than %u bytes",
					FILES_METADATA_MAX);
		else
			http_send_error(req, 400, CODE_INVALID_FILE,
					"multipart form is invalid: %s", mp->err);
		upload_clear(&u);
		return;
	}

	/* Pair the i-th metadata part with the i-th file part, and validate all before writing. */
	size_t nmeta = 0, nfile = 0;
	for (size_t i = 0; i < u.n; i++) {
		nmeta += u.parts[i].kind == UP_METADATA;
		nfile += u.parts[i].kind == UP_FILE;
	}
	if (nmeta == 0) {
		http_send_error(req, 400, CODE_INVALID_METADATA, "metadata file is missing");
		goto out;
	}
	if (nfile == 0) {
		http_send_error(req, 400, CODE_INVALID_CONTENT, "file is missing");
		goto out;
	}
	if (nmeta != nfile) {
		http_send_error(req, 400, CODE_INVALID_FILE,
				"metadata and file count mismatch: %zu vs %zu", nmeta, nfile);
		goto out;
	}
	metas = calloc(nmeta, sizeof(*metas));
	if (!metas) {
		http_send_error(req, 500, CODE_RUNTIME, "out of memory");
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < u.n; i++) {
		struct up_part *p = &u.parts[i];
		if (p->kind != UP_METADATA)
			continue;
		json_error_t jerr;
		bool deep = p->meta && json_depth_exceeds(p->meta, p->metalen, HTTP_JSON_DEPTH_MAX);
		_cleanup_json_ json_t *j = p->meta && !deep ? json_loadb(p->meta, p->metalen,
									 JSON_REJECT_DUPLICATES, &jerr)
							    : NULL;
		if (!json_is_object(j)) {
			const char *msg = "expected a JSON object {path, owner, group, mode}";
			http_send_error(req, 400, CODE_INVALID_METADATA,
					"invalid metadata format in pair %zu: %s", k, msg);
			goto out;
		}
		json_t *path = json_object_get(j, "path");
		if (path && !json_is_null(path) && !json_is_string(path)) {
			http_send_error(req, 400, CODE_INVALID_METADATA,
					"metadata path must be a string (pair %zu)", k);
			goto out;
		}
		const char *ps = json_string_value(path);
		if (!ps || !*ps) {
			http_send_error(req, 400, CODE_INVALID_METADATA, "metadata path is empty");
			goto out;
		}
		if (perm_parse(j, &metas[k].perm, err, sizeof(err)) < 0) {
			http_send_error(req, 400, CODE_INVALID_METADATA, "metadata of '%s': %s", ps,
					err);
			goto out;
		}
		if (!normalize(req, ps, metas[k].abs, CODE_INVALID_METADATA))
			goto out;
		if (strcmp(metas[k].abs, "/") == 0) {
			http_send_error(req, 400, CODE_INVALID_METADATA,
					"metadata path '%s' is a directory", ps);
			goto out;
		}
		k++;
	}

	/* Pass 2: write each file straight from the request body's buffers. */
	k = 0;
	for (size_t i = 0; i < u.n; i++) {
		if (u.parts[i].kind != UP_FILE)
			continue;
		if (upload_one(req, &metas[k], v, nv, &u.parts[i]) < 0)
			goto out;
		k++;
	}
	http_send_empty(req, 200);
out:
	upload_clear(&u);
}

/* ---- routing ---- */

struct route {
	const char *path;
	enum evhttp_cmd_type method;
	void (*handler)(struct evhttp_request *req);
};

static const struct route routes[] = {
    {"/files/info", EVHTTP_REQ_GET, handle_info},
    {"/files", EVHTTP_REQ_DELETE, handle_delete_files},
    {"/files/permissions", EVHTTP_REQ_POST, handle_permissions},
    {"/files/mv", EVHTTP_REQ_POST, handle_mv},
    {"/files/search", EVHTTP_REQ_GET, handle_search},
    {"/files/replace", EVHTTP_REQ_POST, handle_replace},
    {"/files/upload", EVHTTP_REQ_POST, handle_upload},
    {"/files/download", EVHTTP_REQ_GET, handle_download},
    {"/files/download", EVHTTP_REQ_HEAD, handle_download},
    {"/directories/list", EVHTTP_REQ_GET, handle_list},
    {"/directories", EVHTTP_REQ_POST, handle_mkdir},
    {"/directories", EVHTTP_REQ_DELETE, handle_rmdir},
};

bool files_dispatch(struct evhttp_request *req, const char *path)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	bool known = false;
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		if (strcmp(path, routes[i].path) != 0)
			continue;
		known = true;
		if (routes[i].method == m) {
			routes[i].handler(req);
			return true;
		}
	}
	if (!known)
		return false;
	http_send_error(req, 405, WIRE_CODE(NOT_SUPPORTED), "method not allowed on %s", path);
	return true;
}
