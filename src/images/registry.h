/* The registry client (OCI distribution API over libcurl): private to src/images. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "images/images.h"

#define REGISTRY_MANIFEST_MAX (4u << 20)

struct registry;

/* A client for ref's registry: plain HTTP only when its registry is listed in o->insecure;
 * credentials from o->username/password, else o->auth_file. */
int registry_open(const struct image_pull_opts *o, const struct image_ref *ref,
		  struct registry **ret, struct error *err);
void registry_close(struct registry *r);
/* In a child forked while r was open: a fresh curl handle, so the parent's cached connections
 * (shared sockets) are never used by two processes. The inherited handle is dropped unused. */
int registry_after_fork(struct registry *r);
/* The TCP ports a client of r connects to: the registry's, 443 (redirects to blob storage), 80
 * when it is insecure, the last token realm's, the proxies' of the environment; at most max of
 * them, deduplicated. Their count, or -EINVAL (a proxy whose port cannot be told), -E2BIG. */
int registry_ports(const struct registry *r, uint16_t *ports, size_t max);

/* In a confined child: a token realm on a port registry_ports() does not list fails with -EXDEV
 * (the port it wants in registry_auth_get()) instead of a connect() the confinement refuses. */
void registry_fix_ports(struct registry *r);
/* Let the next child reach port as a token realm's (one want_port said it needs). */
void registry_allow_port(struct registry *r, uint16_t port);

/* What a client learnt answering the registry's challenge, handed from the child that learnt it
 * to the processes that go on with the pull: the Authorization value of a Bearer token ("" for
 * none), whether the registry asked for Basic, the realm's port, and (want_port) a realm's port
 * the child was not allowed to reach. */
struct registry_auth {
	char bearer[4100];
	bool basic;
	uint16_t realm_port, want_port;
};
void registry_auth_get(const struct registry *r, struct registry_auth *a);
/* Take a's state (from an untrusted child: -EPROTO unless the token is a valid header value). */
int registry_auth_set(struct registry *r, const struct registry_auth *a);

/* GET /v2/<repo>/manifests/<reference> accepting the four manifest types: the body (malloc'd,
 * NUL-terminated, at most REGISTRY_MANIFEST_MAX) and its Content-Type. */
int registry_get_manifest(struct registry *r, const char *reference, char **ret_body,
			  size_t *ret_len, char *ret_type, size_t type_len, struct error *err);

/* GET the blob digest into a new file at path, verified against digest and size while it is
 * written; the file is removed on any failure (-EBADMSG for a mismatch). Transient failures
 * (connection reset, 5xx) are retried from the start a few times. */
int registry_get_blob(struct registry *r, const char *digest, uint64_t size, const char *path,
		      struct error *err);

/* sha256 of data as "sha256:<hex>" (71 characters + NUL). */
void registry_sha256(const void *data, size_t len, char ret[72]);
