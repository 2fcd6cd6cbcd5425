/*
 * The life of a sandbox as corrald drives it: create (worker + readiness pings), the death watch
 * (the runtime's watch fd), TTL timers, pause/resume, teardown (worker), and recovery of the registry at start-up.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "corrald/admission.h"
#include "corrald/corrald.h"
#include "corrald/upstream.h"
#include "images/images.h"
#include "shared/fsutil.h"
#include "shared/log.h"
#include "shared/quantity.h"
#include "shared/strv.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

#define PING_TIMEOUT_MS 1000
#define PING_BACKOFF_MAX_MS 20
#define TEARDOWN_RETRY_S 5

struct create_ctx {
	struct sandbox *sb; /* reference */
	struct sandbox_spec spec;
	struct sandbox_volume volumes[RUNTIME_VOLUMES_MAX]; /* strings: sb->volumes' */
	char resolv[64]; /* spec.resolv_conf of a sandbox with a network */
	char **argv;
	char **envp;
	struct worker w;
	struct event *deadline_ev;
	struct event *retry_ev;
	int64_t deadline_mono_ms;
	int64_t start_mono_ms;   /* request accepted */
	int64_t created_mono_ms; /* runtime create returned */
	int backoff_ms;
	unsigned pings;
	bool ping_in_flight;
	bool finished;
	char last_ping_error[128];
	pid_t corrald_pid; /* the worker dies with it (create_in_worker) */
	create_done_fn done;
	void *arg;
};

static void watch_death(struct sandbox *sb);
static void sandbox_died(struct sandbox *sb);
static void teardown_begin(struct sandbox *sb, const char *why);

/* --- create ------------------------------------------------------------------------------- */

static void create_ctx_maybe_free(struct create_ctx *c)
{
	if (!c->finished || c->ping_in_flight || worker_running(&c->w))
		return;
	worker_clear(&c->w);
	if (c->deadline_ev)
		event_free(c->deadline_ev);
	if (c->retry_ev)
		event_free(c->retry_ev);
	strv_free(c->argv);
	strv_free(c->envp);
	sandbox_unref(c->sb);
	free(c);
}

static void create_finish(struct create_ctx *c, int status, const char *code, const char *msg)
{
	struct sandbox *sb = c->sb;
	if (c->finished)
		return;
	c->finished = true;
	sb->creating = NULL;
	if (c->deadline_ev)
		event_del(c->deadline_ev);
	if (c->retry_ev)
		event_del(c->retry_ev);
	if (status != 202) {
		/* The one log line for this failure (a client's mistake is not an error); roll back. */
		log_msg(status >= 500 ? LOG_LVL_ERROR : LOG_LVL_INFO, "create sandbox %s: %d %s: %s",
			sb->id, status, code, msg);
		teardown_begin(sb, "create failed");
	} else {
		sb->phase = SB_PHASE_LIVE;
		int64_t now = time_mono_ms();
		log_info("sandbox %s: running (pid %d) after %lld ms: runtime %lld ms, execd ready %lld ms later (%u ping(s))",
			 sb->id, (int)sb->execd_pid, (long long)(now - c->start_mono_ms),
			 (long long)(c->created_mono_ms - c->start_mono_ms),
			 (long long)(now - c->created_mono_ms), c->pings);
	}
	c->done(sb, status, code, msg, c->arg);
	create_ctx_maybe_free(c);
}

static void create_fail(struct create_ctx *c, int status, const char *code, const char *fmt, ...)
	_printf_(4, 5);
/* Every occurrence of the state dir in msg becomes "<state-dir>": no reply names a host path
 * (the log line of create_finish() has the message as it was). */
static void scrub_state_dir(const struct corrald *d, char *msg, size_t len)
{
	size_t sl = strlen(d->state_dir);
	if (sl < 2 || !strstr(msg, d->state_dir))
		return;
	char out[1024];
	size_t o = 0;
	for (const char *p = msg; *p && o + 1 < sizeof(out);) {
		if (strncmp(p, d->state_dir, sl) == 0) {
			o += (size_t)snprintf(out + o, sizeof(out) - o, "<state-dir>");
			o = MIN(o, sizeof(out) - 1);
			p += sl;
		} else {
			out[o++] = *p++;
		}
	}
	out[o] = '\0';
	snprintf(msg, len, "%s", out);
}

static void create_fail(struct create_ctx *c, int status, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (status >= 500)
		log_debug("create sandbox %s: %s", c->sb->id, msg);
	scrub_state_dir(c->sb->d, msg, sizeof(msg));
	create_finish(c, status, code, msg);
}

static void ping_start(struct create_ctx *c);

static void on_ping(int result, void *arg)
{
	struct create_ctx *c = arg;
	struct sandbox *sb = c->sb;
	c->ping_in_flight = false;
	c->pings++;
	if (c->finished) {
		create_ctx_maybe_free(c);
		return;
	}
	if (result == 0 && sb->delete_requested) {
		create_fail(c, 409, WIRE_CODE(SANDBOX_DELETED),
			    "sandbox %s was deleted while it was being created", sb->id);
		return;
	}
	if (result == 0) {
		sandbox_set_status(sb, SB_RUNNING, "Ready", NULL);
		int r = sandbox_save(sb);
		if (r < 0) {
			/* Not acknowledged unless a restart would still know it as Running. */
			sandbox_set_status(sb, SB_PENDING, "Pending", NULL);
			create_fail(c, sandbox_save_status(r), WIRE_CODE(SANDBOX_STATE_WRITE_FAILED),
				    "the record of sandbox %s could not be stored: %s; nothing was created",
				    sb->id, strerror(-r));
			return;
		}
		lifecycle_arm_ttl(sb);
		create_finish(c, 202, NULL, NULL);
		return;
	}
	snprintf(c->last_ping_error, sizeof(c->last_ping_error), "%s", strerror(-result));
	if (time_mono_ms() >= c->deadline_mono_ms) {
		create_fail(c, 504, WIRE_CODE(SANDBOX_READY_TIMEOUT),
			    "corral-execd in sandbox %s did not answer GET /ping within %d s (last error: %s)",
			    sb->id, sb->d->create_timeout_s, c->last_ping_error);
		return;
	}
	struct timeval tv = {0, c->backoff_ms * 1000};
	c->backoff_ms = MIN(c->backoff_ms * 2, PING_BACKOFF_MAX_MS);
	evtimer_add(c->retry_ev, &tv);
}

static void on_ping_retry(evutil_socket_t fd, short what, void *arg)
{
	ping_start(arg);
}

static void ping_start(struct create_ctx *c)
{
	int64_t left = c->deadline_mono_ms - time_mono_ms();
	int timeout = (int)MAX(1, MIN(left, PING_TIMEOUT_MS));
	c->ping_in_flight = true;
	int r = upstream_ping(c->sb->d->base, c->sb->sock_path, c->sb->execd_pid, timeout, on_ping, c);
	if (r < 0)
		on_ping(r, c);
}

static void on_create_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct create_ctx *c = arg;
	if (worker_running(&c->w)) {
		worker_kill(&c->w); /* -> on_create_worker_done with -ECANCELED */
		return;
	}
	create_fail(c, 504, WIRE_CODE(SANDBOX_READY_TIMEOUT),
		    "sandbox %s was not ready within %d s (corral-execd last ping error: %s)",
		    c->sb->id, c->sb->d->create_timeout_s,
		    c->last_ping_error[0] ? c->last_ping_error : "none yet");
}

/* In the create worker: eth0 in the new sandbox's network namespace (network/net.h). */
static int attach_network(struct sandbox *sb, const struct runtime_handle *h, struct error *err)
{
	struct corrald *d = sb->d;
	if (!d->net || !d->rt->netns)
		return error_set(err, ENOTSUP, "the runtime gives no network namespace");
	int fd = d->rt->netns(&d->rt_cfg, sb->id, h, err);
	if (fd < 0)
		return fd;
	int r = net_attach(d->net, sb->id, fd, sb->net.addr, err);
	close(fd);
	return r;
}

/* On the loop, before the worker: the sandbox's address (kept in the record the worker writes)
 * and its nftables state, so its first packet already meets its policy. */
static int add_network(struct sandbox *sb)
{
	struct corrald *d = sb->d;
	struct error err = {0};
	if (!sb->net.on || sb->net.attached)
		return 0;
	if (!d->net)
		return -ENETDOWN;
	int r = net_sandbox_add_policy(d->net, sb->id, sb->net.mode, sb->net.policy,
				       sb->net.default_action, &sb->net.addr, &err);
	if (r < 0) {
		log_error("sandbox %s: network: %s", sb->id, err.msg);
		return r;
	}
	sb->net.attached = true;
	return 0;
}

/*
 * The nftables part of removed sandboxes' networks, batched: a deletion's commit holds the
 * kernel's nftables mutex through an RCU grace period (~6-13 ms), and every create's
 * net_sandbox_add() on the loop needs that mutex; deleting each sandbox's objects as it went
 * made a create that followed a delete wait for it (bench/network.py). The teardown worker now
 * deletes only the veth; the objects go NET_REAP_DELAY_MS later, all retired sandboxes' in one
 * transaction, in a worker (net.h: net_sandbox_retire()).
 */
#define NET_REAP_DELAY_MS 1000

struct net_reaper {
	struct worker w;
	struct event *ev;
};

static void net_reap_in_worker(void *arg, struct worker_result *res)
{
	struct corrald *d = arg;
	struct error err = {0};
	int r = net_reap(d->net, &err);
	if (r < 0) {
		res->rc = r;
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg);
	}
}

static void net_reap_schedule(struct corrald *d, int delay_ms);
static void on_net_reap_timer(evutil_socket_t fd, short what, void *arg);

static void on_net_reap_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct corrald *d = arg;
	if (res->rc < 0)
		log_error("removing deleted sandboxes' nftables objects failed (retrying): %s",
			  res->msg);
	net_reap_end(d->net, res->rc >= 0);
	if (!net_retired(d->net))
		return;
	if (d->shutting_down && res->rc >= 0)
		lifecycle_net_reap_now(d); /* those retired meanwhile: before the exit */
	else if (!d->shutting_down)
		net_reap_schedule(d, NET_REAP_DELAY_MS);
}

static struct net_reaper *net_reaper_of(struct corrald *d)
{
	struct net_reaper *nr = d->net_reaper;
	if (nr)
		return nr;
	nr = calloc(1, sizeof(*nr));
	if (!nr)
		return NULL; /* the objects stay until the next start's net_gc() */
	nr->w = (struct worker)WORKER_INIT;
	nr->ev = evtimer_new(d->base, on_net_reap_timer, d);
	if (!nr->ev) {
		free(nr);
		return NULL;
	}
	return d->net_reaper = nr;
}

/* Starts the reap now if none runs and something is retired; true when one runs afterwards. */
bool lifecycle_net_reap_now(struct corrald *d)
{
	struct net_reaper *nr = d->net ? net_reaper_of(d) : NULL;
	if (!nr)
		return false;
	if (worker_running(&nr->w))
		return true;
	if (!net_reap_begin(d->net))
		return false;
	nr->w.fn = net_reap_in_worker;
	nr->w.done = on_net_reap_done;
	nr->w.arg = d;
	int r = worker_start(&nr->w, d->base);
	if (r < 0) {
		log_error("removing deleted sandboxes' nftables objects: cannot start a worker: %s",
			  strerror(-r));
		net_reap_end(d->net, false);
		if (!d->shutting_down)
			net_reap_schedule(d, NET_REAP_DELAY_MS);
		return false;
	}
	return true;
}

static void on_net_reap_timer(evutil_socket_t fd, short what, void *arg)
{
	lifecycle_net_reap_now(arg);
}

static void net_reap_schedule(struct corrald *d, int delay_ms)
{
	struct net_reaper *nr = net_reaper_of(d);
	if (!nr || evtimer_pending(nr->ev, NULL))
		return;
	struct timeval tv = {delay_ms / 1000, (delay_ms % 1000) * 1000};
	evtimer_add(nr->ev, &tv);
}

void lifecycle_net_release(struct sandbox *sb)
{
	if (!sb->net.on || !sb->d->net)
		return;
	/* the teardown worker removed its veth; its nftables objects go with the next reap */
	net_sandbox_retire(sb->d->net, sb->id);
	sb->net.attached = false;
	if (sb->d->shutting_down)
		lifecycle_net_reap_now(sb->d);
	else
		net_reap_schedule(sb->d, NET_REAP_DELAY_MS);
}

static void create_in_worker(void *arg, struct worker_result *res)
{
	struct create_ctx *c = arg;
	struct corrald *d = c->sb->d;
	struct error err = {0};
	/* A create outliving a killed corrald would make a sandbox that the next corrald has
	 * already recovered past (its record Pending, or not there yet): nobody would know it. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != c->corrald_pid) {
		res->rc = -ECANCELED;
		snprintf(res->msg, sizeof(res->msg), "corrald ended");
		return;
	}
	/* The Pending record, durable before the runtime makes anything (a restart then tears the
	 * half-made sandbox down). Written here, not in the event loop: its create, two fsyncs and
	 * rename stall every other request, and a burst of creates queued behind them. The
	 * directory's lock is held until the worker ends: a teardown (of the next corrald's
	 * recovery) waits for it (dir_lock_wait). */
	_cleanup_close_ int dir_lock = -1;
	int r = fs_mkdir_p(c->sb->dir, 0700);
	if (r >= 0) {
		dir_lock = open(c->sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dir_lock < 0 || flock(dir_lock, LOCK_EX) < 0)
			r = -errno;
	}
	if (r >= 0)
		r = sandbox_save(c->sb);
	if (r < 0) {
		res->rc = r;
		res->state_write = true;
		snprintf(res->msg, sizeof(res->msg), "the record of sandbox %s could not be stored: %s",
			 c->sb->id, strerror(-r));
		return;
	}
	/* A registry image's layers stay put while they are mounted: a garbage collection waits
	 * for the store's lock, and then sees this sandbox's layer list. */
	_cleanup_close_ int lock = -1;
	if (c->sb->registry_image) {
		lock = image_store_lock(d->image_store, false);
		if (lock < 0) {
			res->rc = lock;
			snprintf(res->msg, sizeof(res->msg), "lock the image store: %s",
				 strerror(-lock));
			return;
		}
		if ((r = image_fill_spec(d, c->sb, &c->spec, res->msg, sizeof(res->msg))) < 0) {
			res->rc = r == -ENOENT ? -ENOMEDIUM : r; /* not (or no longer) in the store */
			return;
		}
	}
	res->rc = d->rt->create(&d->rt_cfg, &c->spec, &res->handle, &err);
	if (res->rc < 0) {
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg[0] ? err.msg : strerror(-res->rc));
		return;
	}
	if (c->sb->net.on && (res->rc = attach_network(c->sb, &res->handle, &err)) < 0)
		snprintf(res->msg, sizeof(res->msg), "sandbox network: %s",
			 err.msg[0] ? err.msg : strerror(-res->rc));
}

static void on_create_worker_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct create_ctx *c = arg;
	struct sandbox *sb = c->sb;
	if (c->finished) {
		create_ctx_maybe_free(c);
		return;
	}
	if (res->rc == -ECANCELED) {
		create_fail(c, 504, WIRE_CODE(SANDBOX_READY_TIMEOUT),
			    "runtime did not finish creating sandbox %s within %d s", sb->id,
			    sb->d->create_timeout_s);
		return;
	}
	if (res->rc == -ESRCH) {
		/* PID 1 was gone before the runtime returned: the entrypoint exited or could not run
		 * (its exit report went with the rolled-back files). */
		create_fail(c, 422, WIRE_CODE(SANDBOX_ENTRYPOINT_EXITED),
			    "entrypoint: the sandbox ended as soon as it started (%s); check that the entrypoint exists in the image and keeps running, e.g. [\"sleep\",\"infinity\"]",
			    res->msg);
		return;
	}
	if (res->state_write) {
		create_fail(c, sandbox_save_status(res->rc), WIRE_CODE(SANDBOX_STATE_WRITE_FAILED),
			    "%s; nothing was created", res->msg);
		return;
	}
	if (res->rc == -EAGAIN) {
		/* fork/clone hit a process limit of the host (or of corrald's cgroup): transient. */
		create_fail(c, 503, WIRE_CODE(SANDBOX_HOST_PID_LIMIT),
			    "the host could not start sandbox %s's processes (%s): a host process limit was reached; retry later",
			    sb->id, res->msg);
		return;
	}
	if (res->rc == -RUNTIME_EVOL_DENIED || res->rc == -RUNTIME_EVOL_NOTFOUND ||
	    res->rc == -RUNTIME_EVOL_NOCLAIM || res->rc == -RUNTIME_EVOL_MOUNTPATH ||
	    res->rc == -RUNTIME_EVOL_SUBPATH) {
		/* What the request's volumes ask for cannot be had: the client's to change. */
		create_fail(c, 400,
			    res->rc == -RUNTIME_EVOL_DENIED     ? WIRE_CODE(VOLUME_HOST_PATH_NOT_ALLOWED)
			    : res->rc == -RUNTIME_EVOL_NOTFOUND ? WIRE_CODE(VOLUME_HOST_PATH_NOT_FOUND)
			    : res->rc == -RUNTIME_EVOL_NOCLAIM  ? WIRE_CODE(VOLUME_PVC_NOT_FOUND)
			    : res->rc == -RUNTIME_EVOL_SUBPATH  ? WIRE_CODE(VOLUME_INVALID_SUB_PATH)
								: WIRE_CODE(VOLUME_INVALID_MOUNT_PATH),
			    "volumes: %s", res->msg);
		return;
	}
	if (res->rc == -ENOSPC || res->rc == -EDQUOT) {
		/* The runtime could not write the sandbox's files: the state fs is full. */
		create_fail(c, 507, WIRE_CODE(SANDBOX_STATE_WRITE_FAILED),
			    "the files of sandbox %s could not be stored (%s); nothing was created",
			    sb->id, res->msg);
		return;
	}
	if (res->rc == -EMFILE || res->rc == -ENFILE) {
		create_fail(c, 503, WIRE_CODE(SANDBOX_HOST_FD_LIMIT),
			    "the host could not open the files to start sandbox %s (%s): an open-file limit was reached; retry later",
			    sb->id, res->msg);
		return;
	}
	if (res->rc == -ENOMEM) {
		create_fail(c, 503, WIRE_CODE(SANDBOX_HOST_MEMORY_EXHAUSTED),
			    "the host had no memory to start sandbox %s (%s); retry later", sb->id,
			    res->msg);
		return;
	}
	if (res->rc == -ENOMEDIUM) {
		create_fail(c, 422, WIRE_CODE(SANDBOX_IMAGE_PULL_FAILED), "image %s: %s", sb->rootfs,
			    res->msg);
		return;
	}
	if (res->rc < 0) {
		create_fail(c, 500, WIRE_CODE(SANDBOX_CREATE_FAILED), "runtime create failed: %s",
			    res->msg);
		return;
	}
	/* Not saved until Running: a restart tears a Pending sandbox down by its id alone. */
	c->created_mono_ms = time_mono_ms();
	sandbox_set_handle(sb, &res->handle);
	watch_death(sb);
	if (c->finished) /* died already */
		return;
	ping_start(c);
}

static char **strv_from_json_array(json_t *a)
{
	size_t n = json_array_size(a), i;
	char **v = calloc(n + 1, sizeof(char *));
	json_t *x;
	if (!v)
		return NULL;
	json_array_foreach(a, i, x) {
		if (!(v[i] = strdup(json_string_value(x)))) {
			strv_free(v);
			return NULL;
		}
	}
	return v;
}

static char **envp_from_json_object(json_t *o)
{
	size_t n = json_object_size(o), i = 0;
	char **v = calloc(n + 1, sizeof(char *));
	const char *k;
	json_t *x;
	if (!v)
		return NULL;
	json_object_foreach(o, k, x) {
		if (asprintf(&v[i++], "%s=%s", k, json_string_value(x)) < 0) {
			v[i - 1] = NULL;
			strv_free(v);
			return NULL;
		}
	}
	return v;
}

/* The create's volumes (validated and normalized: validate.h) as the runtime takes them. */
static void spec_volumes(struct create_ctx *c, json_t *vs)
{
	size_t i;
	json_t *v;
	json_array_foreach(vs, i, v) {
		if (i >= RUNTIME_VOLUMES_MAX)
			break;
		struct sandbox_volume *o = &c->volumes[i];
		json_t *host = json_object_get(v, "host"), *pvc = json_object_get(v, "pvc");
		o->name = json_string_value(json_object_get(v, "name"));
		o->mount_path = json_string_value(json_object_get(v, "mountPath"));
		o->read_only = json_is_true(json_object_get(v, "readOnly"));
		o->sub_path = json_string_value(json_object_get(v, "subPath"));
		if (host) {
			o->kind = VOLUME_HOST;
			o->source = json_string_value(json_object_get(host, "path"));
		} else {
			o->kind = VOLUME_NAMED;
			o->source = json_string_value(json_object_get(pvc, "claimName"));
			o->create = json_is_true(json_object_get(pvc, "createIfNotExists"));
			o->delete_on_end =
			    json_is_true(json_object_get(pvc, "deleteOnSandboxTermination"));
			const char *st = json_string_value(json_object_get(pvc, "storage"));
			if (st)
				(void)quantity_parse_bytes(st, &o->size_bytes); /* validated */
		}
		c->spec.n_volumes = i + 1;
	}
	c->spec.volumes = c->spec.n_volumes ? c->volumes : NULL;
}

/* The runtime's part: a worker, under the create deadline (which starts after any pull). */
static int create_start(struct create_ctx *c)
{
	struct corrald *d = c->sb->d;
	sandbox_set_status(c->sb, SB_PENDING, "Creating", NULL);
	int r = worker_start(&c->w, d->base);
	if (r < 0)
		return r;
	c->deadline_mono_ms = time_mono_ms() + (int64_t)d->create_timeout_s * 1000;
	struct timeval tv = {d->create_timeout_s, 0};
	evtimer_add(c->deadline_ev, &tv);
	return 0;
}

static void on_image_pulled(int rc, const char *msg, void *arg)
{
	struct create_ctx *c = arg;
	struct sandbox *sb = c->sb;
	if (rc == -ECANCELED) {
		create_fail(c, 503, WIRE_CODE(SANDBOX_SHUTTING_DOWN),
			    "corrald is shutting down: the pull of %s was stopped; retry once it has restarted",
			    sb->rootfs);
		return;
	}
	if (rc < 0) {
		create_fail(c, image_pull_http_status(rc), image_pull_code(rc), "pull %s: %s",
			    sb->rootfs, msg);
		return;
	}
	if (sb->delete_requested) {
		create_fail(c, 409, WIRE_CODE(SANDBOX_DELETED),
			    "sandbox %s was deleted while its image was being pulled", sb->id);
		return;
	}
	int r = create_start(c);
	if (r < 0)
		create_fail(c, 500, WIRE_CODE(SANDBOX_CREATE_FAILED), "start the create of %s: %s", sb->id,
			    strerror(-r));
}

/* Admitted: pull the image if it must be, then the runtime's part. */
static int create_begin(struct create_ctx *c)
{
	struct sandbox *sb = c->sb;
	int r;
	c->start_mono_ms = time_mono_ms();
	sb->creating = c; /* before the worker forks: it sees the sandbox as it will be */
	sb->phase = SB_PHASE_CREATING;
	if (sb->registry_image && image_needs_pull(sb)) {
		sandbox_set_status(sb, SB_PENDING, "ImagePulling", "pulling %s", sb->rootfs);
		r = image_ensure(sb, on_image_pulled, c);
	} else {
		r = create_start(c);
	}
	if (r < 0) {
		sb->creating = NULL;
		sb->phase = SB_PHASE_QUEUED; /* nothing started: as before */
	}
	return r;
}

static void on_admitted(struct sandbox *sb, void *arg)
{
	struct create_ctx *c = arg;
	int r = create_begin(c);
	if (r < 0)
		create_fail(c, 500, WIRE_CODE(SANDBOX_CREATE_FAILED), "create sandbox %s: %s", sb->id,
			    strerror(-r));
}

/* A queued create that will never be admitted: answered, then torn down. */
static void on_refused(struct sandbox *sb, int status, const char *code, const char *msg,
		       const char *why, void *arg)
{
	struct create_ctx *c = arg;
	c->finished = true;
	c->done(sb, status, code, msg, c->arg);
	teardown_begin(sb, why);
	create_ctx_maybe_free(c);
}

int lifecycle_create(struct sandbox *sb, create_done_fn done, void *arg)
{
	struct corrald *d = sb->d;
	int nr = add_network(sb);
	if (nr < 0)
		return nr;
	struct create_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->sb = sandbox_ref(sb);
	c->w = (struct worker)WORKER_INIT;
	c->done = done;
	c->arg = arg;
	c->backoff_ms = 1;
	c->corrald_pid = getpid();
	c->argv = strv_from_json_array(sb->entrypoint);
	c->envp = envp_from_json_object(sb->env);
	c->deadline_ev = evtimer_new(d->base, on_create_deadline, c);
	c->retry_ev = evtimer_new(d->base, on_ping_retry, c);
	if (!c->argv || !c->envp || !c->deadline_ev || !c->retry_ev) {
		c->finished = true;
		create_ctx_maybe_free(c);
		return -ENOMEM;
	}
	memcpy(c->spec.id, sb->id, sizeof(c->spec.id));
	c->spec.rootfs = sb->rootfs;
	c->spec.host_image = sb->host_image;
	c->spec.entrypoint = c->argv;
	c->spec.env = c->envp;
	c->spec.cpu_limit_millis = sb->res.cpu_limit_millis;
	c->spec.memory_limit_bytes = sb->res.memory_limit_bytes;
	c->spec.pids_max = sb->res.pids_max;
	c->spec.cpu_request_millis = sb->res.cpu_request_millis;
	c->spec.memory_request_bytes = sb->res.memory_request_bytes;
	c->spec.disk_limit_bytes = sb->res.disk_limit_bytes;
	c->spec.oom_group = sb->oom_group;
	spec_volumes(c, sb->volumes);
	if (sb->net.on && d->net) {
		/* corral's resolver on the gateway, the only DNS server the sandbox can reach */
		char gw[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &d->net->gateway, gw, sizeof(gw));
		snprintf(c->resolv, sizeof(c->resolv), "nameserver %s\noptions edns0\n", gw);
		c->spec.resolv_conf = c->resolv;
	}

	c->w.fn = create_in_worker;
	c->w.done = on_create_worker_done;
	c->w.arg = c;
	static const struct admission_cb admission_cb = {on_admitted, on_refused};
	sb->phase = SB_PHASE_QUEUED;
	int r = admission_request(sb, &admission_cb, c);
	if (r == 0)
		return 0; /* queued: on_admitted() or on_refused() */
	if (r > 0)
		r = create_begin(c);
	if (r < 0) {
		admission_release(sb);
		c->finished = true;
		create_ctx_maybe_free(c);
		return r;
	}
	return 0;
}

/* --- death watch -------------------------------------------------------------------------- */

/*
 * What the runtime's watch has seen: true when the sandbox ended (then sandbox_died() has run).
 * extensions.oomGroup (the first OOM ends the whole sandbox, as Kubernetes does) is the
 * runtime's to apply behind the same fd where its kernel does not.
 */
static bool watch_events(struct sandbox *sb)
{
	struct corrald *d = sb->d;
	struct error err = {0};
	struct runtime_watch_report rep;
	int r = d->rt->watch_check(sb->watch, &rep, &err);
	if ((rep.events & RUNTIME_WATCH_OOM) && !sb->oom_fired) {
		sb->oom_fired = true;
		log_info("sandbox %s: OOM with oomGroup set (%s): killing the whole sandbox", sb->id,
			 rep.oom_source ? rep.oom_source : "runtime");
	}
	if (r < 0)
		log_error("sandbox %s: %s", sb->id, err.msg);
	if (!(rep.events & RUNTIME_WATCH_ENDED))
		return false;
	sandbox_died(sb);
	return true;
}

static void on_death_ev(evutil_socket_t fd, short what, void *arg)
{
	watch_events(arg);
}

static void unwatch_death(struct sandbox *sb)
{
	if (sb->death_ev) {
		event_free(sb->death_ev);
		sb->death_ev = NULL;
	}
	sb->d->rt->unwatch(sb->watch);
	sb->watch = NULL;
	sb->watch_fd = -1;
}

static void on_died_later(evutil_socket_t fd, short what, void *arg)
{
	struct sandbox *sb = arg;
	if (sb->in_registry || sb->creating)
		sandbox_died(sb);
	sandbox_unref(sb);
}

/* PID 1 still runs: same start time, not a zombie (the runtime's probe checks all). */
static bool pid1_alive(const struct sandbox *sb)
{
	struct corrald *d = sb->d;
	struct sandbox_probe pr = {0};
	struct error err = {0};
	return d->rt->probe(&d->rt_cfg, sb->id, &sb->handle, &pr, &err) >= 0 && pr.alive;
}

/* Where the runtime has no watch fd, PID 1 is polled instead. */
static void on_death_poll(evutil_socket_t fd, short what, void *arg)
{
	struct sandbox *sb = arg;
	if (!pid1_alive(sb))
		sandbox_died(sb);
}

static void watch_death(struct sandbox *sb)
{
	struct corrald *d = sb->d;
	struct error err = {0};
	unwatch_death(sb);
	int fd = d->rt->watch(&d->rt_cfg, sb->id, &sb->handle, sb->oom_group, &sb->watch, &err);
	if (fd == -ENOSYS && pid1_alive(sb)) {
		sb->death_ev = event_new(d->base, -1, EV_PERSIST, on_death_poll, sb);
		struct timeval tv = {0, 200 * 1000};
		event_add(sb->death_ev, &tv);
		return;
	}
	if (fd < 0) {
		/* Already gone (or the pid was recycled): report it from the loop, not from here. */
		event_base_once(d->base, -1, EV_TIMEOUT, on_died_later, sandbox_ref(sb), NULL);
		return;
	}
	sb->watch_fd = fd;
	sb->death_ev = event_new(d->base, fd, EV_READ | EV_PERSIST, on_death_ev, sb);
	event_add(sb->death_ev, NULL);
}

void lifecycle_check_alive_within(struct sandbox *sb, int wait_ms)
{
	if (!sb->death_ev || sandbox_ended(sb))
		return;
	if (sb->watch_fd < 0) {
		if (!pid1_alive(sb))
			sandbox_died(sb);
		return;
	}
	/* The watch fd also turns readable on an OOM (the sandbox then still runs for a moment). */
	int64_t deadline = time_mono_ms() + wait_ms;
	for (;;) {
		struct pollfd p = {.fd = sb->watch_fd, .events = POLLIN};
		int64_t left = deadline - time_mono_ms();
		if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0 || watch_events(sb) || left <= 0)
			return;
	}
}

void lifecycle_check_alive(struct sandbox *sb)
{
	lifecycle_check_alive_within(sb, 0);
}

/*
 * Why PID 1 ended. execd's exit report (the runtime's read_exit()) says what it saw; the OOM-kill counter is only blamed
 * when it explains the ending: PID 1 vanished without a word (the kernel or a group OOM kill took
 * execd), or the entrypoint died of SIGKILL (137). An OOM kill of some earlier command must not
 * relabel a clean exit.
 */
static void describe_death(struct sandbox *sb, enum sb_state *state, char *reason, size_t rlen,
			   char *msg, size_t mlen)
{
	struct corrald *d = sb->d;
	struct sandbox_probe pr = {0};
	struct error err = {0};
	bool probed = d->rt->probe(&d->rt_cfg, sb->id, &sb->handle, &pr, &err) >= 0;

	struct sandbox_exit ex;
	struct error xerr = {0};
	int xr = d->rt->read_exit(&d->rt_cfg, sb->id, &ex, &xerr);
	bool have_ex = xr == 0;
	if (xr < 0 && xr != -ENOENT)
		log_warn("sandbox %s: %s", sb->id, xerr.msg);
	const char *ereason = have_ex ? ex.reason : NULL;
	const char *emsg = have_ex ? ex.message : NULL;
	long long code = have_ex ? ex.exit_code : -1;
	bool entry_exit = ereason && strcmp(ereason, "EntrypointExited") == 0;
	/* oom_fired: corrald's own group kill may beat the kernel's OOM kill to the counter. */
	bool oom = ((probed && pr.oom_kills > 0) || sb->oom_fired) &&
		   (!have_ex || (entry_exit && code == 137));

	if (oom) {
		char lim[32] = "unlimited";
		if (pr.memory_limit)
			quantity_format_bytes(pr.memory_limit, lim, sizeof(lim));
		*state = SB_FAILED;
		snprintf(reason, rlen, "OOMKilled");
		snprintf(msg, mlen,
			 "sandbox ended after the out-of-memory killer killed %llu process(es) (memory limit %s, peak %llu bytes)%s%s",
			 (unsigned long long)pr.oom_kills, lim, (unsigned long long)pr.memory_peak,
			 emsg ? "; execd: " : "", emsg ? emsg : "");
	} else if (have_ex) {
		snprintf(reason, rlen, "%s", ereason ? ereason : "ExecdExited");
		*state = entry_exit && code == 0 ? SB_TERMINATED : SB_FAILED;
		snprintf(msg, mlen, "sandbox PID 1 (pid %d) exited: %s (exit code %lld)", (int)sb->execd_pid,
			 emsg ? emsg : reason, code);
	} else {
		*state = SB_FAILED;
		snprintf(reason, rlen, "ExecdExited");
		snprintf(msg, mlen,
			 "sandbox PID 1 (corral-execd, pid %d) exited without an exit report (killed by a signal?)",
			 (int)sb->execd_pid);
	}
}

static void sandbox_died(struct sandbox *sb)
{
	unwatch_death(sb);
	if (sb->phase == SB_PHASE_DELETING || sandbox_ended(sb))
		return;
	enum sb_state state;
	char reason[64], msg[768];
	describe_death(sb, &state, reason, sizeof(reason), msg, sizeof(msg));
	if (sb->creating) {
		/* The entrypoint or the memory limit is the client's to fix: a 4xx, not a retryable 5xx. */
		if (strcmp(reason, "EntrypointExited") == 0)
			create_fail(sb->creating, 422, WIRE_CODE(SANDBOX_ENTRYPOINT_EXITED),
				    "entrypoint: the sandbox ended during start-up because its entrypoint exited (%s); an entrypoint must keep running, e.g. [\"sleep\",\"infinity\"]",
				    msg);
		else if (strcmp(reason, "ResourceExhausted") == 0)
			create_fail(sb->creating, 503, WIRE_CODE(SANDBOX_HOST_PID_LIMIT),
				    "the sandbox could not start its entrypoint for lack of a host resource (%s); retry later",
				    msg);
		else if (strcmp(reason, "OOMKilled") == 0)
			create_fail(sb->creating, 422, WIRE_CODE(SANDBOX_OOM_KILLED),
				    "resourceLimits.memory: the sandbox was killed for lack of memory during start-up: %s",
				    msg);
		else
			create_fail(sb->creating, 500, WIRE_CODE(SANDBOX_CREATE_FAILED),
				    "sandbox exited during start-up: %s: %s", reason, msg);
		return;
	}
	sandbox_set_status(sb, state, reason, "%s", msg);
	sandbox_save(sb);
	log_info("sandbox %s: %s (%s): %s", sb->id, sb_state_name(state), reason, msg);
	admission_release(sb); /* its processes are gone: its requests are free again */
}

/* --- TTL ---------------------------------------------------------------------------------- */

static void on_ttl(evutil_socket_t fd, short what, void *arg)
{
	struct sandbox *sb = arg;
	if (!sb->has_expiry || sb->phase == SB_PHASE_DELETING)
		return;
	if (time_now_ms() < sb->expires_ms) {
		lifecycle_arm_ttl(sb); /* renewed meanwhile, or the clock moved */
		return;
	}
	lifecycle_teardown(sb, "expired");
}

void lifecycle_arm_ttl(struct sandbox *sb)
{
	if (!sb->has_expiry || sb->phase == SB_PHASE_DELETING) {
		if (sb->ttl_ev)
			event_del(sb->ttl_ev);
		return;
	}
	if (!sb->ttl_ev && !(sb->ttl_ev = evtimer_new(sb->d->base, on_ttl, sb)))
		return;
	int64_t delta = sb->expires_ms - time_now_ms();
	if (delta < 0)
		delta = 0;
	struct timeval tv = {(time_t)(delta / 1000), (suseconds_t)(delta % 1000) * 1000};
	evtimer_add(sb->ttl_ev, &tv);
}

/* --- pause / resume ----------------------------------------------------------------------- */

/* The status before a transition, to put back when the transition cannot be stored. */
struct status_saved {
	enum sb_state state;
	char *reason, *message;
	int64_t transition_ms;
};

static void status_save(const struct sandbox *sb, struct status_saved *s)
{
	s->state = sb->state;
	s->reason = sb->reason ? strdup(sb->reason) : NULL;
	s->message = sb->message ? strdup(sb->message) : NULL;
	s->transition_ms = sb->transition_ms;
}

static void status_restore(struct sandbox *sb, struct status_saved *s)
{
	sandbox_set_status(sb, s->state, s->reason, s->message ? "%s" : NULL, s->message);
	sb->transition_ms = s->transition_ms;
	free(s->reason);
	free(s->message);
}

/*
 * Pause (freeze) or resume a sandbox and store the new state. A state that cannot be stored undoes
 * the freeze or thaw and the status change: nothing is acknowledged that a restart would not show.
 */
static int set_frozen(struct sandbox *sb, bool freeze, char *msg, size_t msglen, int *write_err)
{
	const struct runtime_ops *rt = sb->d->rt;
	const struct runtime_config *cfg = &sb->d->rt_cfg;
	int (*apply)(const struct runtime_config *, const char *, struct error *) =
	    freeze ? rt->pause : rt->resume;
	int (*undo)(const struct runtime_config *, const char *, struct error *) =
	    freeze ? rt->resume : rt->pause;
	const char *verb = freeze ? "pause" : "resume";
	struct error err = {0};
	if (sb->state != (freeze ? SB_RUNNING : SB_PAUSED)) {
		snprintf(msg, msglen, "sandbox %s is %s, not %s; only a %s sandbox can be %sd",
			 sb->id, sb_state_name(sb->state), freeze ? "Running" : "Paused",
			 freeze ? "running" : "paused", verb);
		return -EBUSY;
	}
	int r = apply(cfg, sb->id, &err);
	if (r < 0) {
		snprintf(msg, msglen, "%s sandbox %s: %s", verb, sb->id,
			 err.msg[0] ? err.msg : strerror(-r));
		return r == -EBUSY ? -EIO : r;
	}
	struct status_saved old;
	status_save(sb, &old);
	sandbox_set_status(sb, freeze ? SB_PAUSED : SB_RUNNING, freeze ? "Paused" : "Resumed", NULL);
	r = sandbox_save(sb);
	if (r < 0) {
		status_restore(sb, &old);
		*write_err = r;
		snprintf(msg, msglen, "sandbox %s was not %sd: its record could not be stored: %s",
			 sb->id, verb, strerror(-r));
		if (undo(cfg, sb->id, &err) < 0)
			log_error("sandbox %s: undo the %s after its record could not be stored: %s",
				  sb->id, verb, err.msg);
		return r;
	}
	free(old.reason);
	free(old.message);
	return 0;
}

int lifecycle_pause(struct sandbox *sb, char *msg, size_t msglen, int *write_err)
{
	return set_frozen(sb, true, msg, msglen, write_err);
}

int lifecycle_resume(struct sandbox *sb, char *msg, size_t msglen, int *write_err)
{
	return set_frozen(sb, false, msg, msglen, write_err);
}

/* --- teardown ----------------------------------------------------------------------------- */

/* Wait (bounded) until no create worker holds sandbox dir's lock: one left running by a corrald
 * killed mid-create finishes, or dies with it, before its sandbox is destroyed. */
#define DIR_LOCK_WAIT_MS 30000
static void dir_lock_wait(const char *dir)
{
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (int waited = 0; waited < DIR_LOCK_WAIT_MS; waited += 10) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK)
			return;
		usleep(10 * 1000);
	}
}

static void teardown_in_worker(void *arg, struct worker_result *res)
{
	struct sandbox *sb = arg;
	struct corrald *d = sb->d;
	struct error err = {0};
	dir_lock_wait(sb->dir);
	int r = d->rt->destroy(&d->rt_cfg, sb->id, &err);
	if (r < 0) {
		res->rc = r;
		snprintf(res->msg, sizeof(res->msg), "%s", err.msg[0] ? err.msg : strerror(-r));
		return;
	}
	/* Its veth, off the loop (its nftables objects follow, batched: lifecycle_net_release()). */
	if (sb->net.on && d->net && (r = net_sandbox_unplug(d->net, sb->id, &err)) < 0) {
		res->rc = r;
		snprintf(res->msg, sizeof(res->msg), "remove its network: %s", err.msg);
		return;
	}
	r = fs_remove_tree(sb->dir);
	if (r < 0) {
		res->rc = r;
		snprintf(res->msg, sizeof(res->msg), "remove %s: %s", sb->dir, strerror(-r));
	}
}

static void teardown_start(struct sandbox *sb);

static void on_teardown_retry(evutil_socket_t fd, short what, void *arg)
{
	teardown_start(arg);
}

static void teardown_retry_later(struct sandbox *sb)
{
	if (!sb->retry_ev)
		sb->retry_ev = evtimer_new(sb->d->base, on_teardown_retry, sb);
	struct timeval tv = {TEARDOWN_RETRY_S, 0};
	if (sb->retry_ev && !sb->d->shutting_down)
		evtimer_add(sb->retry_ev, &tv);
}

static void on_teardown_done(struct worker *w, const struct worker_result *res, void *arg)
{
	struct sandbox *sb = arg;
	if (res->rc < 0) {
		log_error("teardown of sandbox %s failed (retrying in %d s): %s", sb->id,
			  TEARDOWN_RETRY_S, res->msg);
		teardown_retry_later(sb);
	} else {
		log_info("sandbox %s: removed", sb->id);
		lifecycle_net_release(sb);
		registry_remove(sb->d, sb);
	}
	sandbox_unref(sb); /* the worker's reference */
}

static void teardown_start(struct sandbox *sb)
{
	if (worker_running(&sb->teardown) || !sb->in_registry)
		return;
	sb->teardown.fn = teardown_in_worker;
	sb->teardown.done = on_teardown_done;
	sb->teardown.arg = sb;
	sandbox_ref(sb);
	int r = worker_start(&sb->teardown, sb->d->base);
	if (r < 0) {
		log_error("teardown of sandbox %s: cannot start a worker: %s", sb->id, strerror(-r));
		sandbox_unref(sb);
		teardown_retry_later(sb);
	}
}

/*
 * The delete mark, durable: sandbox.json saying "deleting", or, when that cannot be written (a full
 * file system), no sandbox.json at all: recovery tears a directory without a record down. Sets
 * the phase Deleting; -errno when neither could be made durable.
 */
static int mark_deleting(struct sandbox *sb)
{
	struct stat st;
	sb->phase = SB_PHASE_DELETING;
	if (stat(sb->dir, &st) < 0)
		return 0; /* nothing on disk yet */
	int r = sandbox_save(sb);
	if (r >= 0)
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/sandbox.json", sb->dir);
	if (unlink(path) < 0 && errno != ENOENT)
		return r;
	_cleanup_close_ int dfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		return r;
	log_warn("sandbox %s: the delete mark could not be written (%s): its record was removed instead",
		 sb->id, strerror(-r));
	return 0;
}

int lifecycle_delete(struct sandbox *sb, const char *why)
{
	char msg[160], why_queued[160];
	int r;
	switch (sb->phase) {
	case SB_PHASE_QUEUED:
		snprintf(msg, sizeof(msg), "sandbox %s was deleted while waiting for capacity",
			 sb->id);
		snprintf(why_queued, sizeof(why_queued), "%s while it waited for capacity", why);
		admission_cancel(sb, 409, WIRE_CODE(SANDBOX_DELETED), msg, why_queued); /* on_refused() */
		return 0;
	case SB_PHASE_CREATING:
		if (!sb->delete_requested)
			log_info("sandbox %s: %s while it was being created: rolling back", sb->id,
				 why);
		sb->delete_requested = true; /* create_finish() tears it down */
		return 0;
	case SB_PHASE_LIVE:
		if ((r = mark_deleting(sb)) < 0) {
			sb->phase = SB_PHASE_LIVE;
			return r;
		}
		log_info("sandbox %s: teardown (%s)", sb->id, why);
		break;
	case SB_PHASE_DELETING:
		break;
	}
	teardown_begin(sb, why);
	return 0;
}

void lifecycle_teardown(struct sandbox *sb, const char *why)
{
	if (sb->phase == SB_PHASE_CREATING)
		return; /* the create path rolls back itself */
	teardown_begin(sb, why);
}

/* Release the requests, mark (durably, best effort), stop the timers and watches, remove. */
static void teardown_begin(struct sandbox *sb, const char *why)
{
	admission_release(sb);
	if (sb->phase != SB_PHASE_DELETING) {
		log_info("sandbox %s: teardown (%s)", sb->id, why);
		int r = mark_deleting(sb);
		if (r < 0) /* the teardown goes on: it removes the directory, record and all */
			log_error("sandbox %s: the delete mark could not be stored: %s", sb->id,
				  strerror(-r));
	}
	if (sb->ttl_ev)
		event_del(sb->ttl_ev);
	unwatch_death(sb);
	teardown_start(sb);
}

/* --- recovery ----------------------------------------------------------------------------- */

static void on_adopt_ping(int result, void *arg)
{
	struct sandbox *sb = arg;
	if (result < 0 && sb->in_registry && sb->phase == SB_PHASE_LIVE && sb->state == SB_RUNNING)
		log_warn("sandbox %s: re-adopted, but corral-execd does not answer ping yet: %s",
			 sb->id, strerror(-result));
	sandbox_unref(sb);
}

static void recover_one(struct corrald *d, const char *id)
{
	char msg[512];
	struct sandbox *sb = NULL;
	int r = sandbox_load(d, id, &sb, msg, sizeof(msg));
	if (r < 0) {
		/* A directory without a usable record: nothing to show, everything to clean up. */
		log_warn("sandbox %s: %s; tearing it down", id, msg);
		sb = sandbox_new(d, id);
		if (!sb)
			return;
		sb->image_uri = strdup("");
		sb->entrypoint = json_array();
		sb->phase = SB_PHASE_DELETING;
		registry_add(d, sb);
		teardown_start(sb);
		sandbox_unref(sb);
		return;
	}
	registry_add(d, sb);
	if (sb->net.on && sb->phase != SB_PHASE_DELETING && sb->state != SB_PENDING) {
		/* The recorded address and the learned addresses as they are; net_gc() after
		 * recovery refills the chain from the recorded policy and removes what no record
		 * names. */
		if (!d->net) {
			log_warn("sandbox %s: has a network address but corrald runs without a network (--sandbox-subnet none)",
				 id);
		} else if (add_network(sb) < 0) {
			log_warn("sandbox %s: its network could not be re-adopted", id);
		}
	}
	if (sb->phase == SB_PHASE_DELETING) {
		log_info("sandbox %s: finishing an interrupted teardown", id);
		teardown_start(sb);
	} else if (sb->state == SB_PENDING) {
		lifecycle_teardown(sb, "its create was interrupted by a restart");
	} else if (sb->state == SB_RUNNING || sb->state == SB_PAUSED || sb->state == SB_STOPPING) {
		/* Alive = same pid, same start time, not a zombie (the runtime's probe checks all). */
		struct sandbox_probe pr = {0};
		struct error err = {0};
		bool probed = d->rt->probe(&d->rt_cfg, sb->id, &sb->handle, &pr, &err) >= 0;
		bool alive = probed && pr.alive;
		if (alive) {
			enum sb_state want = !probed ? sb->state : pr.frozen ? SB_PAUSED : SB_RUNNING;
			if (want != sb->state) {
				sandbox_set_status(sb, want, want == SB_PAUSED ? "Paused" : "Resumed",
						   NULL);
				sandbox_save(sb);
			}
			admission_adopt(sb);
			watch_death(sb);
			if (sb->state == SB_RUNNING &&
			    upstream_ping(d->base, sb->sock_path, sb->execd_pid, 2000, on_adopt_ping, sandbox_ref(sb)) < 0)
				sandbox_unref(sb);
			log_info("sandbox %s: re-adopted (%s, pid %d)", id, sb_state_name(sb->state),
				 (int)sb->execd_pid);
		} else {
			sandbox_died(sb);
		}
		lifecycle_arm_ttl(sb);
	} else {
		lifecycle_arm_ttl(sb);
	}
	sandbox_unref(sb);
}

int lifecycle_recover(struct corrald *d)
{
	DIR *dir = opendir(d->sandboxes_dir);
	if (!dir)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	unsigned n = 0;
	while ((de = readdir(dir))) {
		if (!id_is_uuid(de->d_name))
			continue;
		recover_one(d, de->d_name);
		n++;
	}
	closedir(dir);
	if (n)
		log_info("recovered %u sandbox record(s) from %s", n, d->sandboxes_dir);
	return 0;
}
