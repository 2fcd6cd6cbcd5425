/*
 * Images: "host" (the host's own root, read-only lower layer), a directory under --image-dir, or
 * any other reference, pulled from its registry into the store (images/images.h).
 *
 * Pulls run in forked workers (they block on the network and the disk). Creates of one image
 * (same normalized reference, platform and credentials) while its pull runs wait for that pull
 * instead of starting their own: one download, one unpack.
 *
 * A pull worker execs corrald afresh (IMAGE_PULL_WORKER_ARG) before it pulls: a fork would carry
 * all of corrald's memory (the API key, every sandbox's record and env, other pulls' credentials)
 * and environment (CORRAL_API_KEY) into the processes that talk to registries and unpack their
 * layers, which an exploit of curl, libarchive or jansson would then own. The exec'd worker knows
 * only its job: read from a memfd on PULL_FD_JOB, progress into a memfd on PULL_FD_PROGRESS, the
 * result to PULL_FD_RESULT, an environment of the proxy and TLS variables alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corrald/corrald.h"
#include "images/images.h"
#include "shared/fsutil.h"
#include "shared/macro.h"
#include "shared/log.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

static bool image_name_ok(const char *s)
{
	return *s && *s != '.' && !strchr(s, '/') && strlen(s) < 256;
}

/* "host, a, b" — the names a client may use, for error messages. */
static void image_list(const struct corrald *d, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "host");
	DIR *dir = d->image_dir ? opendir(d->image_dir) : NULL;
	if (!dir)
		return;
	struct dirent *de;
	while ((de = readdir(dir)) && n < len) {
		if (!image_name_ok(de->d_name))
			continue;
		char p[PATH_MAX];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", d->image_dir, de->d_name);
		if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		n += (size_t)snprintf(buf + n, len - n, ", %s", de->d_name);
	}
	closedir(dir);
}

int image_resolve(const struct corrald *d, const char *uri, char *rootfs, size_t len,
		  bool *ret_host, bool *ret_registry, char *msg, size_t msglen)
{
	*ret_host = false;
	*ret_registry = false;
	if (strcmp(uri, "host") == 0) {
		snprintf(rootfs, len, "/");
		*ret_host = true;
		return 0;
	}
	if (d->image_dir && image_name_ok(uri)) {
		struct stat st;
		snprintf(rootfs, len, "%s/%s", d->image_dir, uri);
		if (stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
	}
	/* A bare name ("ubuntu") is an --image-dir image: a typo must not turn into a pull from
	 * Docker Hub. Registry images have a tag, a digest or a '/': python:3.11, docker.io/x/y. */
	struct image_ref ref;
	struct error err = {0};
	bool bare = !strpbrk(uri, "/:@");
	if (!bare && image_ref_parse(uri, &ref, &err) == 0) {
		snprintf(rootfs, len, "%s", ref.name);
		*ret_registry = true;
		return 0;
	}
	char names[1024];
	image_list(d, names, sizeof(names));
	if (!bare) {
		snprintf(msg, msglen, "image.uri: %s", err.msg);
		return -EINVAL;
	}
	snprintf(msg, msglen,
		 "image.uri: image '%s' does not exist; available images: %s (\"host\" is the host's root file system; others are directories under %s; registry images need a tag, a digest or a registry, e.g. %s:latest)",
		 uri, names, d->image_dir ? d->image_dir : "--image-dir, which is not set", uri);
	return -ENOENT;
}

/* ---- pulls ------------------------------------------------------------------------------- */

struct pull_waiter {
	image_pull_done_fn done;
	void *arg;
	struct sandbox *sb; /* reference: its ImagePulling message shows the progress */
	struct pull_waiter *next;
};

/* Written by the pull worker, read by corrald: a memfd both map. */
struct pull_progress {
	volatile uint64_t done, total;
};

#define PROGRESS_INTERVAL_MS 500

struct pull_job {
	struct pull_job *next;
	char key[1400];
	struct worker w;
	struct image_ref ref;
	struct image_pull_opts opts;
	char *user, *pass;
	char *import_path; /* an import from this host path (under --import-dir) instead of a pull */
	struct pull_waiter *waiters;
	int64_t start_mono_ms;
	struct pull_progress *progress; /* shared mapping, or NULL */
	int progress_fd;                /* its memfd, or -1 */
	struct event *progress_ev;
	uint64_t store_max;              /* --image-store-max, 0 = none */
	char sandboxes_dir[PATH_MAX];    /* whose layer lists the eviction keeps */
	pid_t corrald_pid;
};

static struct pull_job *jobs;

static void platform_of(json_t *platform, struct image_platform *p)
{
	memset(p, 0, sizeof(*p));
	const char *os = json_string_value(json_object_get(platform, "os"));
	const char *arch = json_string_value(json_object_get(platform, "arch"));
	snprintf(p->os, sizeof(p->os), "%s", os ? os : "");
	snprintf(p->arch, sizeof(p->arch), "%s", arch ? arch : "");
}

/* Messages reach clients: the store's host path becomes "<store>" (disk errors name files). */
static void hide_store_path(char *msg, const char *store)
{
	size_t n = strlen(store);
	char *p;
	while (n >= 7 && (p = strstr(msg, store))) {
		memcpy(p, "<store>", 7);
		memmove(p + 7, p + n, strlen(p + n) + 1);
	}
}

/* The pull itself, in the exec'd worker. */
static void pull_run(struct pull_job *j, struct worker_result *res)
{
	struct error err = {0};
	/* Shared: pulls run side by side, never beside a garbage collection. */
	int lock = image_store_lock(j->opts.store, false);
	if (lock < 0) {
		res->rc = lock;
		snprintf(res->msg, sizeof(res->msg), "lock the image store: %s", strerror(-lock));
		return;
	}
	res->rc = j->import_path ? image_import(&j->opts, j->import_path, &j->ref, &err)
				 : image_pull(&j->opts, &j->ref, &err);
	close(lock);
	/* Over --image-store-max: the least recently used images go, never this one nor one a
	 * sandbox uses. The pull itself succeeded whatever happens here (best effort). */
	if (res->rc == 0 && j->store_max) {
		unsigned gone = 0;
		struct error e2 = {0};
		(void)image_evict(j->opts.store, j->sandboxes_dir, j->store_max, j->ref.name, &gone,
				  &e2);
	}
	if (res->rc < 0) {
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg[0] ? err.msg : strerror(-res->rc));
		hide_store_path(res->msg, j->opts.store);
	}
}

static json_t *strv_json(const char *const *v)
{
	json_t *a = json_array();
	for (; a && v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

/* What the exec'd worker needs of j, as JSON (credentials of this pull included). */
static json_t *job_json(const struct pull_job *j)
{
	const struct image_ref *r = &j->ref;
	const struct image_pull_opts *o = &j->opts;
	return json_pack(
	    "{s:{s:s, s:s, s:s, s:s, s:s, s:s}, s:s, s:{s:s, s:s, s:s}, s:s?, s:s?, s:s?, s:o, s:o, "
	    "s:I, s:I, s:I, s:s?, s:I, s:s, s:I}",
	    "ref", "registry", r->registry, "host", r->host, "repo", r->repo, "tag", r->tag,
	    "digest", r->digest, "name", r->name, "store", o->store, "platform", "os",
	    o->platform.os, "arch", o->platform.arch, "variant", o->platform.variant, "username",
	    o->username, "password", o->password, "authFile", o->auth_file, "insecure",
	    strv_json(o->insecure), "mirrors", strv_json(o->mirrors), "timeoutS",
	    (json_int_t)o->timeout_s, "unpackedMax", (json_int_t)o->unpacked_max, "entriesMax",
	    (json_int_t)o->entries_max, "importPath", j->import_path, "storeMax",
	    (json_int_t)j->store_max, "sandboxesDir", j->sandboxes_dir, "corraldPid",
	    (json_int_t)j->corrald_pid);
}

/* Whether s goes into a JSON string (jansson takes UTF-8 only). */
static bool json_encodes(const char *s)
{
	json_t *t = s ? json_string(s) : NULL;
	json_decref(t);
	return !s || t;
}

int image_pull_job_check(const struct corrald *d, struct error *err)
{
	const char *paths[] = {d->image_store, d->sandboxes_dir, d->registry_auth};
	const char *what[] = {"--state-dir", "--state-dir", "--registry-auth"};
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		if (!json_encodes(paths[i]))
			return error_set(err, EINVAL,
					 "%s: the path is not UTF-8 (pull workers get it in a JSON job)",
					 what[i]);
	for (size_t i = 0; i < d->n_insecure; i++)
		if (!json_encodes(d->insecure[i]))
			return error_set(err, EINVAL, "--insecure-registry: not UTF-8");
	for (size_t i = 0; i < d->n_mirrors; i++)
		if (!json_encodes(d->mirrors[i]))
			return error_set(err, EINVAL, "--registry-mirror: not UTF-8");
	return 0;
}

/* Only what curl reads for proxies and TLS trust (and a sanitizer build's options) passes into
 * the exec'd worker. */
static bool env_kept(const char *kv)
{
	static const char *const names[] = {"SSL_CERT_FILE=", "SSL_CERT_DIR=", "CURL_CA_BUNDLE=",
					    "OPENSSL_CONF=", "OPENSSL_MODULES=", "TZ=",
					    "ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS="};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strncmp(kv, names[i], strlen(names[i])) == 0)
			return true;
	const char *eq = strchr(kv, '=');
	return eq && eq - kv >= 6 && (strncmp(eq - 6, "_proxy", 6) == 0 ||
				      strncmp(eq - 6, "_PROXY", 6) == 0);
}

/* A pull worker that could not start is corrald's failure, not the image's: -EIO (502), with e's
 * text (image_pull_http_status() would make exec's EACCES or ENOENT a 422, "fix your image"). */
static void worker_failed(struct worker_result *res, const char *what, int e)
{
	res->rc = -EIO;
	snprintf(res->msg, sizeof(res->msg), "%s: %s", what, strerror(e));
}

/* In the forked worker: exec corrald as a pull worker with j's job. Returns only on failure. */
static void pull_in_worker(void *arg, struct worker_result *res)
{
	struct pull_job *j = arg;
	/* A pull ends with corrald: the next corrald empties tmp/ under it and keeps what its
	 * downloads left there for the next pull to resume (partial/), which an orphan still
	 * writing into them would spoil. Its layer children die with it. (Kept across exec.) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != j->corrald_pid) {
		res->rc = -ECANCELED;
		snprintf(res->msg, sizeof(res->msg), "corrald is gone");
		return;
	}
	json_t *job = job_json(j);
	char *text = job ? json_dumps(job, JSON_COMPACT) : NULL;
	json_decref(job);
	if (!text) { /* image_pull_job_check() at start keeps the operator's paths UTF-8 */
		res->rc = -EIO;
		snprintf(res->msg, sizeof(res->msg),
			 "prepare the pull worker: its job does not encode as JSON (a path or name that is not UTF-8)");
		return;
	}
	int mfd = memfd_create("corral-pull-job", MFD_CLOEXEC);
	size_t len = strlen(text);
	bool ok = mfd >= 0 && fd_write_all(mfd, text, len) == 0 && lseek(mfd, 0, SEEK_SET) == 0;
	explicit_bzero(text, len);
	free(text);
	/* Out of the way of 3..5 first, then onto them. */
	int rfd = ok ? fcntl(worker_result_fd(), F_DUPFD_CLOEXEC, 10) : -1;
	int pfd = ok && j->progress_fd >= 0 ? fcntl(j->progress_fd, F_DUPFD_CLOEXEC, 10) : -1;
	int jfd = ok ? fcntl(mfd, F_DUPFD_CLOEXEC, 10) : -1;
	if (!ok || rfd < 0 || jfd < 0) {
		worker_failed(res, "prepare the pull worker", errno ? errno : ENOMEM);
		return;
	}
	if (dup2(jfd, PULL_FD_JOB) < 0 || dup2(rfd, PULL_FD_RESULT) < 0 ||
	    (pfd >= 0 ? dup2(pfd, PULL_FD_PROGRESS) : (close(PULL_FD_PROGRESS), 0)) < 0) {
		/* the result pipe's old number may be taken now: report on the copy */
		worker_failed(res, "prepare the pull worker", errno);
		worker_report(rfd, res);
		_exit(0);
	}
	extern char **environ;
	char *envp[32];
	size_t n = 0;
	for (char **e = environ; *e && n < ARRAY_SIZE(envp) - 1; e++)
		if (env_kept(*e))
			envp[n++] = *e;
	envp[n] = NULL;
	static char arg0[] = "corrald", arg1[] = IMAGE_PULL_WORKER_ARG;
	char *argv[] = {arg0, arg1, NULL};
	execve("/proc/self/exe", argv, envp);
	worker_failed(res, "exec the pull worker", errno);
	/* the result pipe is PULL_FD_RESULT now (its old number may be the job's) */
	worker_report(PULL_FD_RESULT, res);
	_exit(0);
}

static char **strv_from_json(json_t *a)
{
	size_t n = json_is_array(a) ? json_array_size(a) : 0;
	char **v = calloc(n + 1, sizeof(*v));
	for (size_t i = 0; v && i < n; i++)
		if (!(v[i] = strdup(json_string_value(json_array_get(a, i)) ?: "")))
			return NULL;
	return v;
}

static void copy_field(char *dst, size_t len, json_t *o, const char *key)
{
	snprintf(dst, len, "%s", json_string_value(json_object_get(o, key)) ?: "");
}

/* The job on PULL_FD_JOB into j (strings it points to live as long as the process). */
static int job_read(struct pull_job *j, struct error *err)
{
	struct stat st;
	if (fstat(PULL_FD_JOB, &st) < 0 || st.st_size <= 0 || st.st_size > (1 << 20))
		return error_set(err, EINVAL, "no job");
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf || pread(PULL_FD_JOB, buf, (size_t)st.st_size, 0) != st.st_size)
		return error_set(err, EIO, "read the job");
	buf[st.st_size] = '\0';
	close(PULL_FD_JOB);
	json_error_t je;
	json_t *o = json_loads(buf, 0, &je);
	explicit_bzero(buf, (size_t)st.st_size);
	free(buf);
	json_t *ref = json_object_get(o, "ref"), *pl = json_object_get(o, "platform");
	if (!json_is_object(ref) || !json_is_object(pl) || !json_object_get(o, "store"))
		return error_set(err, EINVAL, "a malformed job");
	copy_field(j->ref.registry, sizeof(j->ref.registry), ref, "registry");
	copy_field(j->ref.host, sizeof(j->ref.host), ref, "host");
	copy_field(j->ref.repo, sizeof(j->ref.repo), ref, "repo");
	copy_field(j->ref.tag, sizeof(j->ref.tag), ref, "tag");
	copy_field(j->ref.digest, sizeof(j->ref.digest), ref, "digest");
	copy_field(j->ref.name, sizeof(j->ref.name), ref, "name");
	copy_field(j->opts.platform.os, sizeof(j->opts.platform.os), pl, "os");
	copy_field(j->opts.platform.arch, sizeof(j->opts.platform.arch), pl, "arch");
	copy_field(j->opts.platform.variant, sizeof(j->opts.platform.variant), pl, "variant");
	copy_field(j->sandboxes_dir, sizeof(j->sandboxes_dir), o, "sandboxesDir");
	const char *s;
#define DUP_OPT(field, key)                                                                        \
	((s = json_string_value(json_object_get(o, key))) && !((field) = strdup(s)))
	const char *store = NULL, *user = NULL, *pass = NULL, *auth = NULL, *import = NULL;
	if (DUP_OPT(store, "store") || DUP_OPT(user, "username") || DUP_OPT(pass, "password") ||
	    DUP_OPT(auth, "authFile") || DUP_OPT(import, "importPath")) {
		json_decref(o);
		return error_set(err, ENOMEM, "job");
	}
#undef DUP_OPT
	j->opts.store = store;
	j->opts.username = user;
	j->opts.password = pass;
	j->opts.auth_file = auth;
	j->import_path = (char *)import;
	char **insecure = strv_from_json(json_object_get(o, "insecure"));
	char **mirrors = strv_from_json(json_object_get(o, "mirrors"));
	j->opts.insecure = (const char *const *)insecure;
	j->opts.mirrors = (const char *const *)mirrors;
	j->opts.timeout_s = (long)json_integer_value(json_object_get(o, "timeoutS"));
	j->opts.unpacked_max = (uint64_t)json_integer_value(json_object_get(o, "unpackedMax"));
	j->opts.entries_max = (uint64_t)json_integer_value(json_object_get(o, "entriesMax"));
	j->store_max = (uint64_t)json_integer_value(json_object_get(o, "storeMax"));
	j->corrald_pid = (pid_t)json_integer_value(json_object_get(o, "corraldPid"));
	/* the password's copy in jansson's string goes with o; scrub it first */
	json_t *pw = json_object_get(o, "password");
	if (json_is_string(pw))
		explicit_bzero((char *)json_string_value(pw), json_string_length(pw));
	json_decref(o);
	if (!insecure || !mirrors || !store)
		return error_set(err, ENOMEM, "job");
	return 0;
}

/* jansson's frees in the worker zero what they free: the --registry-auth file it parses holds
 * other registries' credentials (and the job this pull's), and what a plain free leaves in the
 * heap would be in every child the worker forks to talk to this pull's registry. */
static void scrub_free(void *p)
{
	if (p) {
		explicit_bzero(p, malloc_usable_size(p));
		free(p);
	}
}

_noreturn_ void image_pull_worker_main(void)
{
	struct stat rst;
	if (fstat(PULL_FD_RESULT, &rst) < 0 || !S_ISFIFO(rst.st_mode)) {
		/* not started by corrald (an operator typed it): no result pipe to answer on */
		fprintf(stderr, "corrald: %s is corrald's own (the pull workers it starts); run corrald without it\n",
			IMAGE_PULL_WORKER_ARG);
		_exit(2);
	}
	/* "corrald-pull" in ps (not "exe", /proc/self/exe's name), and no core dump or ptrace of
	 * its memory (this pull's credentials) but by root with CAP_SYS_PTRACE */
	prctl(PR_SET_NAME, "corrald-pull");
	prctl(PR_SET_DUMPABLE, 0);
	json_set_alloc_funcs(malloc, scrub_free);
	struct worker_result res = {0};
	struct pull_job j = {.progress_fd = -1};
	struct error err = {0};
	if (job_read(&j, &err) < 0) {
		res.rc = -EIO; /* corrald's failure, as in worker_failed() */
		snprintf(res.msg, sizeof(res.msg), "pull worker: %s", err.msg);
	} else if (getppid() != j.corrald_pid) {
		res.rc = -ECANCELED;
		snprintf(res.msg, sizeof(res.msg), "corrald is gone");
	} else {
		void *m = mmap(NULL, sizeof(*j.progress), PROT_READ | PROT_WRITE, MAP_SHARED,
			       PULL_FD_PROGRESS, 0);
		if (m != MAP_FAILED) {
			j.progress = m;
			j.opts.progress_done = &j.progress->done;
			j.opts.progress_total = &j.progress->total;
		}
		pull_run(&j, &res);
	}
	if (j.opts.password)
		explicit_bzero((char *)j.opts.password, strlen(j.opts.password));
	worker_report(PULL_FD_RESULT, &res);
	/* as a forked worker ends: no atexit work (the result is out) */
	_exit(0);
}

static void waiter_free(struct pull_waiter *wt)
{
	if (wt->sb)
		sandbox_unref(wt->sb);
	free(wt);
}

static void pull_job_free(struct pull_job *j)
{
	worker_clear(&j->w);
	if (j->progress_ev)
		event_free(j->progress_ev);
	if (j->progress)
		munmap(j->progress, sizeof(*j->progress));
	if (j->progress_fd >= 0)
		close(j->progress_fd);
	explicit_bzero(j->key, sizeof(j->key));
	free(j->user);
	free(j->import_path);
	if (j->pass)
		explicit_bzero(j->pass, strlen(j->pass));
	free(j->pass);
	free(j);
}

static void on_pull_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct pull_job *j = arg;
	for (struct pull_job **p = &jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	if (res->rc == -ECANCELED)
		log_info("pull %s: cancelled (shutting down)", j->ref.name);
	else if (res->rc < 0)
		log_warn("pull %s: %s", j->ref.name, res->msg);
	else
		log_info("pulled %s in %lld ms", j->ref.name,
			 (long long)(time_mono_ms() - j->start_mono_ms));
	struct pull_waiter *wt = j->waiters;
	while (wt) {
		struct pull_waiter *next = wt->next;
		wt->done(res->rc, res->msg, wt->arg);
		waiter_free(wt);
		wt = next;
	}
	pull_job_free(j);
}

/* "pulling NAME: 12.3 of 45.6 MB" on every waiting sandbox still Pending/ImagePulling. */
static void on_progress(evutil_socket_t fd, short what, void *arg)
{
	struct pull_job *j = arg;
	uint64_t done = j->progress->done, total = j->progress->total;
	if (!total)
		return;
	for (struct pull_waiter *wt = j->waiters; wt; wt = wt->next) {
		struct sandbox *sb = wt->sb;
		if (!sb || sb->state != SB_PENDING || !sb->reason || strcmp(sb->reason, "ImagePulling"))
			continue;
		free(sb->message); /* not a transition: lastTransitionAt stays */
		if (asprintf(&sb->message, "pulling %s: %.1f of %.1f MB", j->ref.name, done / 1e6,
			     total / 1e6) < 0)
			sb->message = NULL;
	}
}

/* Join the running pull of (ref, platform, credentials) or start one. sb (may be NULL: a pull
 * ahead of time) gets the progress in its ImagePulling message. */
static int pull_join(struct corrald *d, const struct image_ref *ref,
		     const struct image_platform *pl, const char *user, const char *pass,
		     const char *import_path, struct sandbox *sb, image_pull_done_fn done,
		     void *arg)
{
	char key[1400 + PATH_MAX];
	/* Same credentials only: a create with a wrong password must not ride on a good pull (nor
	 * a good one fail with a bad one's). The key stays in memory, like image.auth. */
	snprintf(key, sizeof(key), "%s\n%s/%s\n%s\n%s\n%s", ref->name, pl->os, pl->arch,
		 user ? user : "", pass ? pass : "", import_path ? import_path : "");
	struct pull_waiter *wt = calloc(1, sizeof(*wt));
	if (!wt) {
		explicit_bzero(key, sizeof(key));
		return -ENOMEM;
	}
	struct pull_job *j = NULL;
	wt->done = done;
	wt->arg = arg;
	wt->sb = sb ? sandbox_ref(sb) : NULL;
	for (j = jobs; j; j = j->next)
		if (strcmp(j->key, key) == 0) {
			wt->next = j->waiters;
			j->waiters = wt;
			log_info("%s%s%swaiting for the running pull of %s", sb ? "sandbox " : "",
				 sb ? sb->id : "", sb ? ": " : "", ref->name);
			explicit_bzero(key, sizeof(key));
			return 0;
		}
	j = calloc(1, sizeof(*j));
	if (!j) {
		waiter_free(wt);
		explicit_bzero(key, sizeof(key));
		return -ENOMEM;
	}
	j->progress_fd = -1;
	snprintf(j->key, sizeof(j->key), "%s", key);
	explicit_bzero(key, sizeof(key));
	j->ref = *ref;
	j->corrald_pid = getpid();
	j->w = (struct worker)WORKER_INIT;
	j->w.fn = pull_in_worker;
	j->w.done = on_pull_done;
	j->w.arg = j;
	j->opts.store = d->image_store;
	j->opts.platform = *pl;
	j->opts.auth_file = d->registry_auth;
	j->opts.insecure = d->insecure;
	j->opts.mirrors = d->mirrors;
	j->opts.timeout_s = d->pull_timeout_s;
	j->opts.unpacked_max = d->image_unpacked_max;
	j->store_max = d->image_store_max;
	snprintf(j->sandboxes_dir, sizeof(j->sandboxes_dir), "%s", d->sandboxes_dir);
	if ((user && (!(j->user = strdup(user)) || !(j->pass = strdup(pass ? pass : "")))) ||
	    (import_path && !(j->import_path = strdup(import_path)))) {
		waiter_free(wt);
		pull_job_free(j);
		return -ENOMEM;
	}
	j->opts.username = j->user;
	j->opts.password = j->pass;
	/* Progress is best effort: without the mapping the message just names the image. */
	j->progress_fd = memfd_create("corral-pull-progress", MFD_CLOEXEC);
	void *m = j->progress_fd >= 0 && ftruncate(j->progress_fd, sizeof(*j->progress)) == 0
			  ? mmap(NULL, sizeof(*j->progress), PROT_READ | PROT_WRITE, MAP_SHARED,
				 j->progress_fd, 0)
			  : MAP_FAILED;
	if (m != MAP_FAILED) {
		j->w.keep_fd = j->progress_fd;
		j->progress = m;
		j->opts.progress_done = &j->progress->done;
		j->opts.progress_total = &j->progress->total;
		j->progress_ev = event_new(d->base, -1, EV_PERSIST, on_progress, j);
		struct timeval tv = {0, PROGRESS_INTERVAL_MS * 1000};
		if (j->progress_ev)
			event_add(j->progress_ev, &tv);
	}
	j->waiters = wt;
	j->start_mono_ms = time_mono_ms();
	int r = worker_start(&j->w, d->base);
	if (r < 0) {
		waiter_free(wt);
		j->waiters = NULL;
		pull_job_free(j);
		return r;
	}
	j->next = jobs;
	jobs = j;
	log_info("%s%s%spulling %s", sb ? "sandbox " : "", sb ? sb->id : "", sb ? ": " : "",
		 ref->name);
	return 0;
}

int image_ensure(struct sandbox *sb, image_pull_done_fn done, void *arg)
{
	struct image_ref ref;
	struct image_platform pl;
	if (image_ref_parse(sb->rootfs, &ref, NULL) < 0)
		return -EINVAL;
	platform_of(sb->platform, &pl);
	return pull_join(sb->d, &ref, &pl, sb->auth_user, sb->auth_pass, NULL, sb, done, arg);
}

int image_pull_ahead(struct corrald *d, const char *uri, json_t *platform, const char *user,
		     const char *pass, image_pull_done_fn done, void *arg, char *msg,
		     size_t msglen)
{
	struct image_ref ref;
	struct image_platform pl;
	struct error err = {0};
	if (image_ref_parse(uri, &ref, &err) < 0) {
		snprintf(msg, msglen, "image.uri: %s", err.msg);
		return -EINVAL;
	}
	platform_of(platform, &pl);
	return pull_join(d, &ref, &pl, user, pass, NULL, NULL, done, arg);
}

int image_import_start(struct corrald *d, const char *uri, const char *path, json_t *platform,
		       image_pull_done_fn done, void *arg, char *msg, size_t msglen)
{
	struct image_ref ref;
	struct image_platform pl;
	struct error err = {0};
	if (image_ref_parse(uri, &ref, &err) < 0) {
		snprintf(msg, msglen, "image.uri: %s", err.msg);
		return -EINVAL;
	}
	/* Only what the operator put under --import-dir: the worker reads it as root. */
	char real[PATH_MAX];
	size_t n = d->import_dir[0] ? strlen(d->import_dir) : 0;
	if (!n) {
		snprintf(msg, msglen,
			 "import.path: imports are off; start corrald with --import-dir DIR and put the layout or tar there");
		return -EPERM;
	}
	if (!path || path[0] != '/' || !realpath(path, real) || strncmp(real, d->import_dir, n) != 0 ||
	    real[n] != '/') {
		snprintf(msg, msglen,
			 "import.path: '%s' is not an existing path under the --import-dir %s (symlinks resolved)",
			 path ? path : "", d->import_dir);
		return -EPERM;
	}
	platform_of(platform, &pl);
	return pull_join(d, &ref, &pl, NULL, NULL, real, NULL, done, arg);
}

void image_pulls_cancel(void)
{
	struct pull_job *next;
	for (struct pull_job *j = jobs; j; j = next) {
		next = j->next; /* worker_kill() -> on_pull_done() frees j */
		if (worker_running(&j->w))
			worker_kill(&j->w);
	}
}

bool image_needs_pull(const struct sandbox *sb)
{
	if (strcmp(sb->pull_policy ? sb->pull_policy : "IfNotPresent", "Always") == 0)
		return true;
	if (strcmp(sb->pull_policy ? sb->pull_policy : "", "Never") == 0)
		return false;
	struct image_ref ref;
	struct image_platform pl;
	if (image_ref_parse(sb->rootfs, &ref, NULL) < 0)
		return false; /* image_fill_spec() reports it */
	platform_of(sb->platform, &pl);
	return !image_record_exists(sb->d->image_store, &ref, &pl);
}

static bool env_has(char *const *env, const char *kv)
{
	size_t n = strcspn(kv, "=");
	for (char *const *e = env; e && *e; e++)
		if (strncmp(*e, kv, n) == 0 && (*e)[n] == '=')
			return true;
	return false;
}

int image_fill_spec(const struct corrald *d, const struct sandbox *sb, struct sandbox_spec *spec,
		    char *msg, size_t msglen)
{
	struct image_ref ref;
	struct image_platform pl;
	struct error err = {0};
	static struct image_info info; /* the worker's, for the rest of its short life */
	static char root[PATH_MAX];
	int r = image_ref_parse(sb->rootfs, &ref, &err);
	if (r == 0) {
		platform_of(sb->platform, &pl);
		r = image_info_load(d->image_store, &ref, &pl, &info, &err);
	}
	hide_store_path(err.msg, d->image_store);
	if (r < 0) {
		snprintf(msg, msglen, "%s%s", err.msg,
			 r == -ENOENT && sb->pull_policy && strcmp(sb->pull_policy, "Never") == 0
			     ? " and imagePullPolicy is Never"
			     : "");
		return r;
	}
	/* Used now: the least-recently-used clock of --image-store-max. */
	image_record_touch(d->image_store, &ref, &pl);
	/* What this sandbox uses, for the garbage collector (kept until the sandbox is removed). */
	char lp[PATH_MAX + 32];
	snprintf(lp, sizeof(lp), "%s/" IMAGE_LAYERS_FILE, sb->dir);
	_cleanup_fclose_ FILE *f = fopen(lp, "we");
	for (size_t i = 0; f && i < info.n_layers; i++)
		fprintf(f, "%s\n", info.layers[i]);
	/* No fsync: it only has to outlive the sandbox's processes, which a host crash ends too. */
	if (!f || fflush(f) != 0) {
		snprintf(msg, msglen, "write the image's layer list: %s", strerror(errno));
		return -EIO;
	}
	snprintf(root, sizeof(root), "%s/layers", d->image_store);
	spec->layer_root = root;
	spec->layers = info.layers;
	spec->workdir = info.workdir;
	spec->user = info.user;
	/* The image's Env first, the create's env wins. */
	size_t n = 0, m = 0;
	for (char *const *e = spec->env; e && *e; e++)
		n++;
	for (char **e = info.env; e && *e; e++)
		m++;
	char **env = calloc(n + m + 1, sizeof(char *));
	if (!env) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	size_t k = 0;
	for (char **e = info.env; e && *e; e++)
		if (strchr(*e, '=') && !env_has(spec->env, *e))
			env[k++] = *e;
	for (char *const *e = spec->env; e && *e; e++)
		env[k++] = *e;
	spec->env = env;
	return 0;
}

/* ---- the images resource (GET/POST/DELETE /v1/images) ------------------------------------ */

json_t *image_list_json(const struct corrald *d)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/refs", d->image_store);
	json_t *items = json_array();
	DIR *dd = opendir(dir);
	if (!dd || !items)
		return items;
	struct dirent *de;
	while ((de = readdir(dd))) {
		size_t n = strlen(de->d_name);
		if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		char p[PATH_MAX + 300];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		json_t *j = json_load_file(p, 0, NULL);
		const char *name = json_string_value(json_object_get(j, "name"));
		if (name) {
			json_t *o = json_pack("{s:s, s:O, s:I}", "name", name, "digest",
					      json_object_get(j, "manifest"), "layers",
					      (json_int_t)json_array_size(json_object_get(j, "layers")));
			json_t *x;
			if ((x = json_object_get(j, "size")))
				json_object_set(o, "sizeBytes", x);
			if ((x = json_object_get(j, "platform")))
				json_object_set(o, "platform", x);
			if (o)
				json_array_append_new(items, o);
		}
		json_decref(j);
	}
	closedir(dd);
	return items;
}

json_t *image_pulls_json(const struct corrald *d)
{
	(void)d;
	json_t *items = json_array();
	/* Names and byte counts only: a job's key holds its credentials. */
	for (struct pull_job *j = jobs; items && j; j = j->next) {
		json_t *o = json_pack("{s:s, s:I, s:I}", "name", j->ref.name, "bytesDone",
				      (json_int_t)(j->progress ? j->progress->done : 0), "bytesTotal",
				      (json_int_t)(j->progress ? j->progress->total : 0));
		if (o)
			json_array_append_new(items, o);
	}
	return items;
}

static struct sandbox *image_user(struct corrald *d, const char *name);

int image_inspect_json(const struct corrald *d, const char *uri, json_t **ret, char *msg,
		       size_t msglen)
{
	struct image_ref ref;
	struct error err = {0};
	if (image_ref_parse(uri, &ref, &err) < 0) {
		snprintf(msg, msglen, "ref: %s", err.msg);
		return -EINVAL;
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/refs", d->image_store);
	json_t *items = json_array();
	DIR *dd = opendir(dir);
	struct dirent *de;
	while (items && dd && (de = readdir(dd))) {
		char p[PATH_MAX + 300];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		json_t *j = de->d_name[0] != '.' ? json_load_file(p, 0, NULL) : NULL;
		const char *name = json_string_value(json_object_get(j, "name"));
		if (!name || strcmp(name, ref.name) != 0 || stat(p, &st) < 0) {
			json_decref(j);
			continue;
		}
		/* The record as stored, less nothing secret (it holds none), plus disk usage. */
		json_t *o = json_pack("{s:s, s:O}", "name", name, "digest",
				      json_object_get(j, "manifest"));
		json_t *layers = json_array(), *x;
		uint64_t total = 0;
		size_t i;
		json_array_foreach(json_object_get(j, "layers"), i, x) {
			const char *h = json_string_value(x);
			uint64_t u = h ? image_layer_usage(d->image_store, h) : 0;
			total += u;
			char digest[80];
			snprintf(digest, sizeof(digest), "sha256:%s", h ? h : "");
			json_array_append_new(layers, json_pack("{s:s, s:I}", "digest", digest,
								"unpackedBytes", (json_int_t)u));
		}
		json_object_set_new(o, "layers", layers);
		json_object_set_new(o, "unpackedBytes", json_integer((json_int_t)total));
		static const char *const keys[][2] = {{"size", "sizeBytes"},
						      {"platform", "platform"},
						      {"env", "env"},
						      {"workdir", "workingDir"},
						      {"user", "user"}};
		for (size_t k = 0; k < ARRAY_SIZE(keys); k++)
			if ((x = json_object_get(j, keys[k][0])))
				json_object_set(o, keys[k][1], x);
		char when[RFC3339_MAX];
		time_format_rfc3339((int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000,
				    when);
		json_object_set_new(o, "lastUsedAt", json_string(when));
		struct sandbox *user = image_user((struct corrald *)d, name);
		json_object_set_new(o, "inUse", json_boolean(user != NULL));
		json_array_append_new(items, o);
		json_decref(j);
	}
	if (dd)
		closedir(dd);
	if (!items)
		return -ENOMEM;
	if (json_array_size(items) == 0) {
		json_decref(items);
		snprintf(msg, msglen, "image %s is not in the store", ref.name);
		return -ENOENT;
	}
	*ret = items;
	return 0;
}

int image_forget(const struct corrald *d, const char *uri, char *msg, size_t msglen)
{
	struct image_ref ref;
	struct error err = {0};
	if (image_ref_parse(uri, &ref, &err) < 0) {
		snprintf(msg, msglen, "ref: %s", err.msg);
		return -EINVAL;
	}
	struct sandbox *user = image_user((struct corrald *)d, ref.name);
	if (user) {
		snprintf(msg, msglen, "image %s is used by sandbox %s; delete the sandboxes first",
			 ref.name, user->id);
		return -EBUSY;
	}
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/refs", d->image_store);
	DIR *dd = opendir(dir);
	int found = 0;
	struct dirent *de;
	while (dd && (de = readdir(dd))) {
		char p[PATH_MAX + 300];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		json_t *j = de->d_name[0] != '.' ? json_load_file(p, 0, NULL) : NULL;
		const char *name = json_string_value(json_object_get(j, "name"));
		if (name && strcmp(name, ref.name) == 0 && unlink(p) == 0)
			found++;
		json_decref(j);
	}
	if (dd)
		closedir(dd);
	if (!found) {
		snprintf(msg, msglen, "image %s is not in the store", ref.name);
		return -ENOENT;
	}
	log_info("image %s removed from the store (%d platform(s))", ref.name, found);
	if (image_gc_start((struct corrald *)d) < 0)
		log_warn("cannot start the image store's garbage collection; unused layers stay");
	return 0;
}

/* The client's reference or credentials (422), the pull's own deadline (504), the disk (507),
 * the registry or what it sent (502). */
int image_pull_http_status(int rc)
{
	switch (rc) {
	case -EACCES:
	case -ENOENT:
	case -ENOEXEC:
	case -EINVAL:
		return 422;
	case -ETIMEDOUT:
		return 504;
	case -ENOSPC:
		return 507;
	case -EFBIG:
		return 422;
	default:
		return 502;
	}
}

const char *image_pull_code(int rc)
{
	return rc == -EFBIG ? WIRE_CODE(SANDBOX_IMAGE_TOO_LARGE) : WIRE_CODE(SANDBOX_IMAGE_PULL_FAILED);
}

/* ---- garbage collection ----------------------------------------------------------------- */

struct gc_job {
	struct worker w;
	char store[PATH_MAX], sandboxes[PATH_MAX];
};

static void gc_in_worker(void *arg, struct worker_result *res)
{
	struct gc_job *g = arg;
	struct error err = {0};
	unsigned removed = 0;
	res->rc = image_gc(g->store, g->sandboxes, &removed, &err);
	res->pid = (pid_t)removed;
	if (res->rc < 0)
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg);
}

static void on_gc_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct gc_job *g = arg;
	if (res->rc < 0)
		log_warn("image store garbage collection: %s", res->msg);
	else
		log_info("image store garbage collection: %d unused layer(s) removed", (int)res->pid);
	worker_clear(&g->w);
	free(g);
}

int image_gc_start(struct corrald *d)
{
	struct gc_job *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->w = (struct worker)WORKER_INIT;
	g->w.fn = gc_in_worker;
	g->w.done = on_gc_done;
	g->w.arg = g;
	snprintf(g->store, sizeof(g->store), "%s", d->image_store);
	snprintf(g->sandboxes, sizeof(g->sandboxes), "%s", d->sandboxes_dir);
	int r = worker_start(&g->w, d->base);
	if (r < 0)
		free(g);
	return r;
}

/* The first live sandbox made from the image named (normalized) name, or NULL. */
static struct sandbox *image_user(struct corrald *d, const char *name)
{
	struct sandbox *sb;
	TAILQ_FOREACH(sb, &d->sandboxes, link)
		if (sb->registry_image && sb->phase != SB_PHASE_DELETING && !sandbox_ended(sb) &&
		    strcmp(sb->rootfs, name) == 0)
			return sb;
	return NULL;
}
