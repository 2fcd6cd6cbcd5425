/*
 * Admission by resource requests: the sum of the requests of admitted sandboxes (those created or
 * being created, not yet ended or torn down) must fit --capacity, and so must the sum of their
 * shares of the host's pid and open-file tables (capacity.h). A create that does not fit waits
 * in a FIFO queue, visible as Pending with reason "InsufficientCapacity" and a message saying what
 * is short, until capacity frees (a sandbox ends or is deleted) or --capacity-wait passes: then
 * 503 SANDBOX::CAPACITY_TIMEOUT. A queued create is not persisted: a restart could not answer it. Strict FIFO: a later, smaller create never overtakes
 * the head of the queue, so nothing starves. No polling: the queue moves only when capacity is
 * released. A request larger than the whole capacity is refused at once (400).
 */
#pragma once

#include "corrald/capacity.h"
#include "corrald/corrald.h"

int admission_init(struct corrald *d, const struct capacity *cap);
enum admission_table {
	ADMISSION_REQUESTS, /* resourceRequests (cpu, memory) */
	ADMISSION_PIDS,     /* the host's pid table */
	ADMISSION_FILES,    /* the host's open-file table */
	ADMISSION_DISK,     /* the state file system (--capacity disk=) */
};
/* Why a sandbox of these resources can never fit (msg set, *ret_table says which part of the
 * capacity, true), checked before the sandbox exists. */
bool admission_never_fits(struct corrald *d, const struct sandbox_resources *res,
			  enum admission_table *ret_table, char *msg, size_t msglen);
/*
 * What admission calls back, later, for a create it queued (never from inside
 * admission_request()): admitted, capacity is held and the create goes on; or refused, it never
 * will be (--capacity-wait passed, corrald is stopping, admission_cancel()): the create is to be
 * answered with status/code/msg and the sandbox torn down (why: for the log).
 */
struct admission_cb {
	void (*admitted)(struct sandbox *sb, void *arg);
	void (*refused)(struct sandbox *sb, int status, const char *code, const char *msg,
			const char *why, void *arg);
};
/* Hold sb->res of the capacity now (1), or queue sb until it fits (0: Pending
 * "InsufficientCapacity", sb->waiting set, cb called later). -ENOMEM. */
int admission_request(struct sandbox *sb, const struct admission_cb *cb, void *arg);
/* sb no longer holds its requests (ended, deleted, create failed). Idempotent. */
void admission_release(struct sandbox *sb);
/* A live sandbox re-adopted after a restart holds its requests again. */
void admission_adopt(struct sandbox *sb);
/* sb is queued: take it out and refuse it (cb->refused) with status/code/msg. False if not queued. */
bool admission_cancel(struct sandbox *sb, int status, const char *code, const char *msg,
		      const char *why);
/* corrald is stopping: refuse every queued create with 503 SANDBOX::SHUTTING_DOWN (a queued
 * create has no runtime state yet). */
void admission_shutdown(struct corrald *d);
/* For logs and metrics: capacity and what is admitted now. */
void admission_usage(const struct corrald *d, struct capacity *ret_cap, struct capacity *ret_used,
		     unsigned *ret_queued);
