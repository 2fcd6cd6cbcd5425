/*
 * Images: "host" (the host's own root, read-only lower layer), a directory under --image-dir, or
 * any other reference, pulled from its registry into the store (images/images.h).
 *
 * Pulls run in forked workers (they block on the network and the disk). Creates of one image
 * (same normalized reference, platform and credentials) while its pull runs wait for that pull
 * instead of starting their own: one download, one unpack.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "corrald/corrald.h"
#include "images/images.h"
#include "shared/log.h"
#include "shared/timeutil.h"

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

/* Written by the pull worker, read by corrald: a page both share (MAP_SHARED before the fork). */
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
	struct pull_waiter *waiters;
	int64_t start_mono_ms;
	struct pull_progress *progress; /* shared mapping, or NULL */
	struct event *progress_ev;
};

static struct pull_job *jobs;

static void platform_of(const struct sandbox *sb, struct image_platform *p)
{
	memset(p, 0, sizeof(*p));
	const char *os = json_string_value(json_object_get(sb->platform, "os"));
	const char *arch = json_string_value(json_object_get(sb->platform, "arch"));
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

static void pull_in_worker(void *arg, struct worker_result *res)
{
	struct pull_job *j = arg;
	struct error err = {0};
	res->rc = image_pull(&j->opts, &j->ref, &err);
	if (res->rc < 0) {
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg[0] ? err.msg : strerror(-res->rc));
		hide_store_path(res->msg, j->opts.store);
	}
}

static void pull_job_free(struct pull_job *j)
{
	worker_clear(&j->w);
	if (j->progress_ev)
		event_free(j->progress_ev);
	if (j->progress)
		munmap(j->progress, sizeof(*j->progress));
	explicit_bzero(j->key, sizeof(j->key));
	free(j->user);
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
		sandbox_unref(wt->sb);
		free(wt);
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
		if (sb->state != SB_PENDING || !sb->reason || strcmp(sb->reason, "ImagePulling"))
			continue;
		free(sb->message); /* not a transition: lastTransitionAt stays */
		if (asprintf(&sb->message, "pulling %s: %.1f of %.1f MB", j->ref.name, done / 1e6,
			     total / 1e6) < 0)
			sb->message = NULL;
	}
}

int image_ensure(struct sandbox *sb, image_pull_done_fn done, void *arg)
{
	struct corrald *d = sb->d;
	struct image_ref ref;
	struct error err = {0};
	if (image_ref_parse(sb->rootfs, &ref, &err) < 0)
		return -EINVAL;
	struct image_platform pl;
	platform_of(sb, &pl);
	char key[1400];
	/* Same credentials only: a create with a wrong password must not ride on a good pull (nor
	 * a good one fail with a bad one's). The key stays in memory, like image.auth. */
	snprintf(key, sizeof(key), "%s\n%s/%s\n%s\n%s", ref.name, pl.os, pl.arch,
		 sb->auth_user ? sb->auth_user : "", sb->auth_pass ? sb->auth_pass : "");
	struct pull_waiter *wt = calloc(1, sizeof(*wt));
	if (!wt) {
		explicit_bzero(key, sizeof(key));
		return -ENOMEM;
	}
	struct pull_job *j = NULL;
	wt->done = done;
	wt->arg = arg;
	wt->sb = sandbox_ref(sb);
	for (j = jobs; j; j = j->next)
		if (strcmp(j->key, key) == 0) {
			wt->next = j->waiters;
			j->waiters = wt;
			log_info("sandbox %s: waiting for the running pull of %s", sb->id, ref.name);
			explicit_bzero(key, sizeof(key));
			return 0;
		}
	j = calloc(1, sizeof(*j));
	if (!j) {
		sandbox_unref(wt->sb);
		free(wt);
		return -ENOMEM;
	}
	snprintf(j->key, sizeof(j->key), "%s", key);
	explicit_bzero(key, sizeof(key));
	j->ref = ref;
	j->w = (struct worker)WORKER_INIT;
	j->w.fn = pull_in_worker;
	j->w.done = on_pull_done;
	j->w.arg = j;
	j->opts.store = d->image_store;
	j->opts.platform = pl;
	j->opts.auth_file = d->registry_auth;
	j->opts.insecure = d->insecure;
	j->opts.timeout_s = d->pull_timeout_s;
	if (sb->auth_user && (!(j->user = strdup(sb->auth_user)) ||
			      !(j->pass = strdup(sb->auth_pass ? sb->auth_pass : "")))) {
		sandbox_unref(wt->sb);
		free(wt);
		pull_job_free(j);
		return -ENOMEM;
	}
	/* Progress is best effort: without the mapping the message just names the image. */
	void *m = mmap(NULL, sizeof(*j->progress), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m != MAP_FAILED) {
		j->progress = m;
		j->opts.progress_done = &j->progress->done;
		j->opts.progress_total = &j->progress->total;
		j->progress_ev = event_new(d->base, -1, EV_PERSIST, on_progress, j);
		struct timeval tv = {0, PROGRESS_INTERVAL_MS * 1000};
		if (j->progress_ev)
			event_add(j->progress_ev, &tv);
	}
	j->opts.username = j->user;
	j->opts.password = j->pass;
	j->waiters = wt;
	j->start_mono_ms = time_mono_ms();
	int r = worker_start(&j->w, d->base);
	if (r < 0) {
		sandbox_unref(wt->sb);
		free(wt);
		pull_job_free(j);
		return r;
	}
	j->next = jobs;
	jobs = j;
	log_info("sandbox %s: pulling %s", sb->id, ref.name);
	return 0;
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
	platform_of(sb, &pl);
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
		platform_of(sb, &pl);
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
