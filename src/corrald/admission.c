/* Admission by requests, FIFO queue of waiting creates: see admission.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corrald/admission.h"
#include "runtime/confine.h"
#include "shared/log.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

struct admit_wait {
	TAILQ_ENTRY(admit_wait) link;
	struct sandbox *sb; /* reference */
	const struct admission_cb *cb;
	void *arg;
	struct event *deadline_ev;
};

static struct {
	struct capacity cap, used;
	TAILQ_HEAD(, admit_wait) queue;
	unsigned queued;
	struct event *pump_ev;
	struct corrald *d;
} A;

static void pump(evutil_socket_t fd, short what, void *arg);

int admission_init(struct corrald *d, const struct capacity *cap)
{
	A.cap = *cap;
	A.d = d;
	TAILQ_INIT(&A.queue);
	A.pump_ev = event_new(d->base, -1, 0, pump, NULL);
	return A.pump_ev ? 0 : -ENOMEM;
}

/* What a sandbox holds: its requests, its pids limit and its RLIMIT_NOFILE. */
static struct capacity charge(const struct sandbox_resources *res)
{
	uint64_t nofile = A.d->rt_cfg.nofile ? A.d->rt_cfg.nofile : CONFINE_DEFAULT_NOFILE;
	return (struct capacity){
	    .cpu_millis = res->cpu_request_millis,
	    .memory_bytes = res->memory_request_bytes,
	    .pids = res->pids_max ? res->pids_max : RUNTIME_DEFAULT_PIDS_MAX,
	    .files = nofile,
	    .disk = res->disk_limit_bytes ? res->disk_limit_bytes : CAPACITY_DISK_UNBOUNDED,
	};
}

bool admission_never_fits(struct corrald *d, const struct sandbox_resources *res,
			  enum admission_table *ret_table, char *msg, size_t msglen)
{
	struct capacity req = charge(res);
	if (!capacity_never_fits(&A.cap, &req, msg, msglen))
		return false;
	*ret_table = req.cpu_millis > A.cap.cpu_millis || req.memory_bytes > A.cap.memory_bytes
			 ? ADMISSION_REQUESTS
		     : req.pids > A.cap.pids   ? ADMISSION_PIDS
		     : req.files > A.cap.files ? ADMISSION_FILES
					       : ADMISSION_DISK;
	return true;
}

static void hold(struct sandbox *sb, const struct capacity *c)
{
	sb->adm_cpu = c->cpu_millis;
	sb->adm_mem = c->memory_bytes;
	sb->adm_pids = c->pids;
	sb->adm_files = c->files;
	sb->adm_disk = A.cap.disk == UINT64_MAX ? 0 : c->disk;
	sb->admitted = true;
	A.used.cpu_millis += c->cpu_millis;
	A.used.memory_bytes += c->memory_bytes;
	A.used.pids += c->pids;
	A.used.files += c->files;
	A.used.disk += sb->adm_disk;
}

static void wait_free(struct admit_wait *w)
{
	if (w->deadline_ev)
		event_free(w->deadline_ev);
	w->sb->waiting = NULL;
	sandbox_unref(w->sb);
	free(w);
}

static void dequeue(struct admit_wait *w)
{
	TAILQ_REMOVE(&A.queue, w, link);
	A.queued--;
}

static void describe_wait(struct admit_wait *w)
{
	char shortfall[384];
	struct capacity req = charge(&w->sb->res);
	capacity_shortfall(&A.cap, &A.used, &req, shortfall, sizeof(shortfall));
	sandbox_set_status(w->sb, SB_PENDING, "InsufficientCapacity",
			   "waiting for capacity (%u create(s) queued): %s", A.queued, shortfall);
}

/* Admit from the head while it fits; FIFO, so the head blocks everyone behind it. */
static void pump(evutil_socket_t fd, short what, void *arg)
{
	struct admit_wait *w;
	while ((w = TAILQ_FIRST(&A.queue))) {
		struct capacity req = charge(&w->sb->res);
		if (!capacity_fits(&A.cap, &A.used, &req))
			break;
		dequeue(w);
		struct sandbox *sb = sandbox_ref(w->sb);
		log_info("sandbox %s: admitted after waiting for capacity", sb->id);
		const struct admission_cb *cb = w->cb;
		void *cb_arg = w->arg;
		wait_free(w);
		hold(sb, &req);
		cb->admitted(sb, cb_arg);
		sandbox_unref(sb);
	}
	TAILQ_FOREACH(w, &A.queue, link)
		describe_wait(w);
}

static void schedule_pump(void)
{
	if (A.pump_ev && !TAILQ_EMPTY(&A.queue))
		event_active(A.pump_ev, EV_TIMEOUT, 0);
}

static void on_wait_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct admit_wait *w = arg;
	struct sandbox *sb = sandbox_ref(w->sb);
	char shortfall[384], msg[640];
	struct capacity req = charge(&sb->res);
	capacity_shortfall(&A.cap, &A.used, &req, shortfall, sizeof(shortfall));
	snprintf(msg, sizeof(msg),
		 "no capacity for sandbox %s within %d s of waiting (--capacity-wait): %s; retry later, or request less (resourceRequests)",
		 sb->id, A.d->capacity_wait_s, shortfall);
	admission_cancel(sb, 503, WIRE_CODE(SANDBOX_CAPACITY_TIMEOUT), msg,
			 "no capacity within --capacity-wait");
	sandbox_unref(sb);
}

int admission_request(struct sandbox *sb, const struct admission_cb *cb, void *arg)
{
	struct capacity req = charge(&sb->res);
	if (TAILQ_EMPTY(&A.queue) && capacity_fits(&A.cap, &A.used, &req)) {
		hold(sb, &req);
		return 1;
	}
	struct admit_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->sb = sandbox_ref(sb);
	w->cb = cb;
	w->arg = arg;
	w->deadline_ev = evtimer_new(sb->d->base, on_wait_deadline, w);
	if (!w->deadline_ev) {
		wait_free(w);
		return -ENOMEM;
	}
	sb->waiting = w;
	TAILQ_INSERT_TAIL(&A.queue, w, link);
	A.queued++;
	describe_wait(w); /* not persisted: a restart could not answer it, so it must not return */
	log_info("sandbox %s: waiting for capacity: %s", sb->id, sb->message ? sb->message : "");
	struct timeval tv = {sb->d->capacity_wait_s, 0};
	evtimer_add(w->deadline_ev, &tv);
	return 0;
}

void admission_release(struct sandbox *sb)
{
	if (!sb->admitted)
		return;
	sb->admitted = false;
	A.used.cpu_millis -= sb->adm_cpu < A.used.cpu_millis ? sb->adm_cpu : A.used.cpu_millis;
	A.used.memory_bytes -=
	    sb->adm_mem < A.used.memory_bytes ? sb->adm_mem : A.used.memory_bytes;
	A.used.pids -= sb->adm_pids < A.used.pids ? sb->adm_pids : A.used.pids;
	A.used.files -= sb->adm_files < A.used.files ? sb->adm_files : A.used.files;
	A.used.disk -= sb->adm_disk < A.used.disk ? sb->adm_disk : A.used.disk;
	schedule_pump();
}

void admission_adopt(struct sandbox *sb)
{
	if (sb->admitted)
		return;
	/* may exceed a smaller new --capacity (or a lower kernel table): new creates then wait */
	struct capacity c = charge(&sb->res);
	hold(sb, &c);
}

bool admission_cancel(struct sandbox *sb, int status, const char *code, const char *msg,
		      const char *why)
{
	struct admit_wait *w = sb->waiting;
	if (!w)
		return false;
	dequeue(w);
	const struct admission_cb *cb = w->cb;
	void *arg = w->arg;
	wait_free(w);
	cb->refused(sb, status, code, msg, why, arg);
	schedule_pump(); /* the head may have changed */
	return true;
}

void admission_shutdown(struct corrald *d)
{
	struct admit_wait *w;
	while ((w = TAILQ_FIRST(&A.queue))) {
		struct sandbox *sb = sandbox_ref(w->sb);
		char msg[160];
		snprintf(msg, sizeof(msg),
			 "corrald is shutting down; sandbox %s was still waiting for capacity: retry once it has restarted",
			 sb->id);
		admission_cancel(sb, 503, WIRE_CODE(SANDBOX_SHUTTING_DOWN), msg,
				 "corrald is shutting down while it waited for capacity");
		sandbox_unref(sb);
	}
}

void admission_usage(const struct corrald *d, struct capacity *ret_cap, struct capacity *ret_used,
		     unsigned *ret_queued)
{
	*ret_cap = A.cap;
	*ret_used = A.used;
	*ret_queued = A.queued;
}
