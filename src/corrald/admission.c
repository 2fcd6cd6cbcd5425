/* Admission by requests, FIFO queue of waiting creates: see admission.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corrald/admission.h"
#include "runtime/confine.h"
#include "shared/log.h"
#include "shared/quantity.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

struct admit_wait {
	TAILQ_ENTRY(admit_wait) link;
	struct sandbox *sb; /* reference */
	struct create_args args;
	create_done_fn done;
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
static struct capacity charge(uint64_t cpu_req, uint64_t mem_req, uint64_t pids_max)
{
	uint64_t nofile = A.d->rt_cfg.nofile ? A.d->rt_cfg.nofile : CONFINE_DEFAULT_NOFILE;
	return (struct capacity){cpu_req, mem_req, pids_max ? pids_max : RUNTIME_DEFAULT_PIDS_MAX,
				 nofile};
}

static struct capacity args_charge(const struct create_args *a)
{
	return charge(a->cpu_req, a->mem_req, a->pids_max);
}

bool admission_never_fits(struct corrald *d, uint64_t cpu_req, uint64_t mem_req, uint64_t pids_max,
			  enum admission_table *ret_table, char *msg, size_t msglen)
{
	struct capacity req = charge(cpu_req, mem_req, pids_max);
	if (!capacity_never_fits(&A.cap, &req, msg, msglen))
		return false;
	*ret_table = req.cpu_millis > A.cap.cpu_millis || req.memory_bytes > A.cap.memory_bytes
			 ? ADMISSION_REQUESTS
		     : req.pids > A.cap.pids ? ADMISSION_PIDS
					     : ADMISSION_FILES;
	return true;
}

static void hold(struct sandbox *sb, const struct capacity *c)
{
	sb->adm_cpu = c->cpu_millis;
	sb->adm_mem = c->memory_bytes;
	sb->adm_pids = c->pids;
	sb->adm_files = c->files;
	sb->admitted = true;
	A.used.cpu_millis += c->cpu_millis;
	A.used.memory_bytes += c->memory_bytes;
	A.used.pids += c->pids;
	A.used.files += c->files;
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

static void start(struct sandbox *sb, const struct create_args *a, create_done_fn done, void *arg)
{
	struct capacity req = args_charge(a);
	hold(sb, &req);
	int r = lifecycle_create(sb, a->cpu_limit, a->mem_limit, a->pids_max, a->cpu_req,
				 a->mem_req, done, arg);
	if (r < 0) {
		char msg[256];
		log_error("create sandbox %s: %s", sb->id, strerror(-r));
		snprintf(msg, sizeof(msg), "create sandbox %s: %s", sb->id, strerror(-r));
		done(sb, 500, WIRE_CODE(SANDBOX_CREATE_FAILED), msg, arg);
		lifecycle_teardown(sb, "create failed");
	}
}

static void describe_wait(struct admit_wait *w)
{
	char shortfall[384];
	struct capacity req = args_charge(&w->args);
	capacity_shortfall(&A.cap, &A.used, &req, shortfall, sizeof(shortfall));
	sandbox_set_status(w->sb, SB_PENDING, "InsufficientCapacity",
			   "waiting for capacity (%u create(s) queued): %s", A.queued, shortfall);
}

/* Admit from the head while it fits; FIFO, so the head blocks everyone behind it. */
static void pump(evutil_socket_t fd, short what, void *arg)
{
	struct admit_wait *w;
	while ((w = TAILQ_FIRST(&A.queue))) {
		struct capacity req = args_charge(&w->args);
		if (!capacity_fits(&A.cap, &A.used, &req))
			break;
		dequeue(w);
		struct sandbox *sb = sandbox_ref(w->sb);
		log_info("sandbox %s: admitted after waiting for capacity", sb->id);
		struct create_args a = w->args;
		create_done_fn done = w->done;
		void *darg = w->arg;
		wait_free(w);
		start(sb, &a, done, darg);
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
	struct capacity req = args_charge(&w->args);
	capacity_shortfall(&A.cap, &A.used, &req, shortfall, sizeof(shortfall));
	snprintf(msg, sizeof(msg),
		 "no capacity for sandbox %s within %d s of waiting (--capacity-wait): %s; retry later, or request less (resourceRequests)",
		 sb->id, A.d->capacity_wait_s, shortfall);
	admission_cancel(sb, 503, WIRE_CODE(SANDBOX_CAPACITY_TIMEOUT), msg);
	lifecycle_teardown(sb, "no capacity within --capacity-wait");
	sandbox_unref(sb);
}

int admission_create(struct sandbox *sb, const struct create_args *a, create_done_fn done,
		     void *arg)
{
	struct capacity req = args_charge(a);
	if (TAILQ_EMPTY(&A.queue) && capacity_fits(&A.cap, &A.used, &req)) {
		hold(sb, &req);
		int r = lifecycle_create(sb, a->cpu_limit, a->mem_limit, a->pids_max, a->cpu_req,
					 a->mem_req, done, arg);
		if (r < 0)
			admission_release(sb);
		return r;
	}
	struct admit_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->sb = sandbox_ref(sb);
	w->args = *a;
	w->done = done;
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
	schedule_pump();
}

void admission_adopt(struct sandbox *sb)
{
	uint64_t cpu = 0, mem = 0, pids = 0;
	const char *v;
	if (sb->admitted)
		return;
	if ((v = json_string_value(json_object_get(sb->requests, "cpu"))))
		(void)quantity_parse_cpu(v, &cpu);
	if ((v = json_string_value(json_object_get(sb->requests, "memory"))))
		(void)quantity_parse_bytes(v, &mem);
	if ((v = json_string_value(json_object_get(sb->limits, "pids")))) {
		char *end;
		unsigned long long n = strtoull(v, &end, 10);
		pids = *end ? 0 : n;
	}
	/* may exceed a smaller new --capacity (or a lower kernel table): new creates then wait */
	struct capacity c = charge(cpu, mem, pids);
	hold(sb, &c);
}

bool admission_cancel(struct sandbox *sb, int status, const char *code, const char *msg)
{
	struct admit_wait *w = sb->waiting;
	if (!w)
		return false;
	dequeue(w);
	create_done_fn done = w->done;
	void *arg = w->arg;
	wait_free(w);
	done(sb, status, code, msg, arg);
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
		admission_cancel(sb, 503, WIRE_CODE(SANDBOX_SHUTTING_DOWN), msg);
		lifecycle_teardown(sb, "corrald is shutting down while it waited for capacity");
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
