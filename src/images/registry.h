/* The registry client (OCI distribution API over libcurl): private to src/images. */
#pragma once

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
