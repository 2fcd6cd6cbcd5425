/*
 * The wire error codes: the "code" of every {"code", "message"} error body corrald and
 * corral-execd send, and what libcorral matches. One table (libuv's UV_ERRNO_MAP idea), so a code
 * is spelled once and docs/api.md's "Error codes" lists are checked against it (test_wire_error).
 *
 * X(scope, NAME, "code", status, "other statuses", retryable, "when")
 *   scope      CORRALD or EXECD: whose list in docs/api.md; INTERNAL: never sent (logs, fallbacks)
 *   status     the usual HTTP status; "other statuses" the others it is sent with ("" for none)
 *   retryable  a client sends the same request again after a back-off (server state or load was
 *              the cause, not the request): libcorral does, for the usual status (test_client_policy
 *              holds the two together)
 *
 * Call sites keep their HTTP status (several codes are sent with more than one) and name the code
 * as WIRE_CODE(NAME).
 */
#pragma once

#include <stdbool.h>

#define WIRE_ERROR_MAP(X)                                                                          \
	X(CORRALD, INVALID_METADATA_FORMAT, "INVALID_METADATA_FORMAT", 400, "", false,              \
	  "GET /sandboxes?metadata= is not k=v&k2=v2 (or has more than 64 pairs)")                  \
	X(CORRALD, SANDBOX_INVALID_METADATA_LABEL, "SANDBOX::INVALID_METADATA_LABEL", 400, "", false, \
	  "a metadata key or value breaks the label rules")                                         \
	X(CORRALD, SANDBOX_INVALID_PARAMETER, "SANDBOX::INVALID_PARAMETER", 422, "400 405", false,  \
	  "a malformed body or an invalid field (422, with detail); a request no sandbox can serve")\
	X(CORRALD, SANDBOX_API_NOT_SUPPORTED, "SANDBOX::API_NOT_SUPPORTED", 400, "", false,         \
	  "a reference feature corral does not have")                                               \
	X(CORRALD, VOLUME_HOST_PATH_NOT_ALLOWED, "VOLUME::HOST_PATH_NOT_ALLOWED", 400, "", false,    \
	  "a host volume outside every --allow-host-path")                                         \
	X(CORRALD, VOLUME_HOST_PATH_NOT_FOUND, "VOLUME::HOST_PATH_NOT_FOUND", 400, "", false,        \
	  "a host volume's path (or a symlink on it) that cannot be opened")                       \
	X(CORRALD, VOLUME_PVC_NOT_FOUND, "VOLUME::PVC_NOT_FOUND", 400, "", false,                    \
	  "a named volume that does not exist, with createIfNotExists false")                      \
	X(CORRALD, VOLUME_INVALID_MOUNT_PATH, "VOLUME::INVALID_MOUNT_PATH", 400, "", false,          \
	  "a mountPath that is not absolute, reaches /, /proc, /sys or /dev, or cannot be made")   \
	X(CORRALD, VOLUME_INVALID_SUB_PATH, "VOLUME::INVALID_SUB_PATH", 400, "", false,              \
	  "a subPath with '..', or one that cannot be opened without following a symlink")         \
	X(CORRALD, VOLUME_INVALID_HOST_PATH, "VOLUME::INVALID_HOST_PATH", 400, "", false,            \
	  "a host path that is not absolute or not normalized")                                    \
	X(CORRALD, VOLUME_INVALID_BACKEND, "VOLUME::INVALID_BACKEND", 400, "", false,                \
	  "a volume with no backend, several, or ossfs")                                           \
	X(CORRALD, VOLUME_NOT_FOUND, "VOLUME::NOT_FOUND", 404, "", false,                            \
	  "DELETE /volumes/{name} of a volume that does not exist")                                \
	X(CORRALD, VOLUME_IN_USE, "VOLUME::IN_USE", 409, "", false,                                  \
	  "DELETE /volumes/{name} while a sandbox uses it")                                        \
	X(CORRALD, VOLUME_LIST_FAILED, "VOLUME::LIST_FAILED", 500, "", true,                         \
	  "the named volumes could not be listed")                                                 \
	X(CORRALD, VOLUME_DELETE_FAILED, "VOLUME::DELETE_FAILED", 500, "", true,                     \
	  "a named volume could not be removed")                                                   \
	X(CORRALD, SANDBOX_IMAGE_TOO_LARGE, "SANDBOX::IMAGE_TOO_LARGE", 422, "", false,             \
	  "an image that unpacks to more than --image-unpacked-max")                               \
	X(CORRALD, SANDBOX_REQUESTS_EXCEED_CAPACITY, "SANDBOX::REQUESTS_EXCEED_CAPACITY", 400, "",  \
	  false, "requests above the whole --capacity")                                             \
	X(CORRALD, SANDBOX_EXCEEDS_HOST_PID_TABLE, "SANDBOX::EXCEEDS_HOST_PID_TABLE", 400, "",      \
	  false, "a pids limit above the host's whole pid table")                                   \
	X(CORRALD, SANDBOX_EXCEEDS_HOST_FILE_TABLE, "SANDBOX::EXCEEDS_HOST_FILE_TABLE", 400, "",    \
	  false, "a sandbox RLIMIT_NOFILE above the host's whole open-file table")                  \
	X(CORRALD, SANDBOX_EXCEEDS_DISK_CAPACITY, "SANDBOX::EXCEEDS_DISK_CAPACITY", 400, "", false,  \
	  "a disk limit above --capacity disk=, or none while it is set")                          \
	X(CORRALD, SANDBOX_INVALID_EXPIRATION, "SANDBOX::INVALID_EXPIRATION", 400, "409", false,    \
	  "a renew to a bad time (400), or of a sandbox without a timeout (409)")                   \
	X(CORRALD, SANDBOX_INVALID_PORT, "SANDBOX::INVALID_PORT", 400, "", false,                   \
	  "an endpoint or proxy port that is not 1..65535")                                         \
	X(CORRALD, MISSING_API_KEY, "MISSING_API_KEY", 401, "", false, "no API key header")          \
	X(CORRALD, INVALID_API_KEY, "INVALID_API_KEY", 401, "", false, "a wrong API key")           \
	X(CORRALD, INVALID_ACCESS_TOKEN, "INVALID_ACCESS_TOKEN", 401, "", false,                    \
	  "a proxy access token that is not this sandbox's")                                        \
	X(CORRALD, SANDBOX_IMPORT_NOT_ALLOWED, "SANDBOX::IMPORT_NOT_ALLOWED", 403, "", false,       \
	  "an image import from outside --import-dir")                                              \
	X(CORRALD, SANDBOX_NOT_FOUND, "SANDBOX::NOT_FOUND", 404, "", false,                         \
	  "no sandbox with this id (or it is being deleted)")                                       \
	X(CORRALD, SANDBOX_IMAGE_NOT_FOUND, "SANDBOX::IMAGE_NOT_FOUND", 404, "", false,             \
	  "DELETE /images of an image not in the store")                                            \
	X(CORRALD, GENERAL_NOT_FOUND, "GENERAL::NOT_FOUND", 404, "", false, "no such route")        \
	X(CORRALD, GENERAL_METHOD_NOT_ALLOWED, "GENERAL::METHOD_NOT_ALLOWED", 405, "", false,       \
	  "a wrong method on a known route")                                                        \
	X(CORRALD, SANDBOX_NOT_RUNNING, "SANDBOX::NOT_RUNNING", 409, "", false,                     \
	  "pause of a sandbox that is not Running")                                                 \
	X(CORRALD, SANDBOX_NOT_PAUSED, "SANDBOX::NOT_PAUSED", 409, "", false,                       \
	  "resume of a sandbox that is not Paused")                                                 \
	X(CORRALD, SANDBOX_DELETED, "SANDBOX::DELETED", 409, "", false,                             \
	  "a create whose sandbox was deleted while it was made")                                   \
	X(CORRALD, SANDBOX_NOT_READY, "SANDBOX::NOT_READY", 409, "", false,                         \
	  "stats of a sandbox still being created")                                                 \
	X(CORRALD, SANDBOX_PAUSED, "SANDBOX::PAUSED", 409, "", false,                               \
	  "a proxy call to a paused sandbox")                                                       \
	X(CORRALD, SANDBOX_IMAGE_IN_USE, "SANDBOX::IMAGE_IN_USE", 409, "", false,                   \
	  "DELETE /images of an image a live sandbox uses")                                         \
	X(CORRALD, SANDBOX_ENDED, "SANDBOX::ENDED", 410, "", false,                                  \
	  "a proxy call to an ended sandbox; the last event of a stream whose PID 1 died")          \
	X(CORRALD, SANDBOX_REQUEST_TOO_LARGE, "SANDBOX::REQUEST_TOO_LARGE", 413, "", false,         \
	  "a body over its route's cap")                                                            \
	X(CORRALD, SANDBOX_ENTRYPOINT_EXITED, "SANDBOX::ENTRYPOINT_EXITED", 422, "", false,         \
	  "the entrypoint exited or could not run during start-up")                                 \
	X(CORRALD, SANDBOX_OOM_KILLED, "SANDBOX::OOM_KILLED", 422, "", false,                       \
	  "the OOM killer ended the sandbox during start-up")                                       \
	X(CORRALD, SANDBOX_IMAGE_PULL_FAILED, "SANDBOX::IMAGE_PULL_FAILED", 502, "422 500 504 507",  \
	  true, "the registry is unreachable or sent bad data (422: refused or not there)")         \
	X(CORRALD, SANDBOX_CREATE_FAILED, "SANDBOX::CREATE_FAILED", 500, "", true,                  \
	  "the runtime failed, or execd died during start-up")                                      \
	X(CORRALD, SANDBOX_STATE_WRITE_FAILED, "SANDBOX::STATE_WRITE_FAILED", 507, "500", true,     \
	  "a state change whose record could not be stored (nothing changed)")                      \
	X(CORRALD, SANDBOX_PAUSE_FAILED, "SANDBOX::PAUSE_FAILED", 500, "", true, "freezer failure") \
	X(CORRALD, SANDBOX_RESUME_FAILED, "SANDBOX::RESUME_FAILED", 500, "", true,                  \
	  "freezer failure")                                                                        \
	X(CORRALD, SANDBOX_STATS_FAILED, "SANDBOX::STATS_FAILED", 500, "", true,                    \
	  "the runtime could not read the stats")                                                   \
	X(CORRALD, GENERAL_OUT_OF_MEMORY, "GENERAL::OUT_OF_MEMORY", 500, "", true,                  \
	  "corrald could not allocate")                                                             \
	X(CORRALD, SANDBOX_BACKEND_UNREACHABLE, "SANDBOX::BACKEND_UNREACHABLE", 502, "", true,      \
	  "execd of a live sandbox cannot be reached")                                              \
	X(CORRALD, SANDBOX_CAPACITY_TIMEOUT, "SANDBOX::CAPACITY_TIMEOUT", 503, "", true,            \
	  "not admitted within --capacity-wait")                                                    \
	X(CORRALD, SANDBOX_HOST_FD_LIMIT, "SANDBOX::HOST_FD_LIMIT", 503, "", true,                  \
	  "corrald or the host out of file descriptors starting a sandbox or reaching one")        \
	X(CORRALD, SANDBOX_HOST_MEMORY_EXHAUSTED, "SANDBOX::HOST_MEMORY_EXHAUSTED", 503, "", true,  \
	  "no host memory to start a sandbox's processes")                                         \
	X(CORRALD, SANDBOX_INVALID_IDEMPOTENCY_KEY, "SANDBOX::INVALID_IDEMPOTENCY_KEY", 400, "",    \
	  false, "a malformed Idempotency-Key header")                                              \
	X(CORRALD, SANDBOX_IDEMPOTENCY_KEY_REUSED, "SANDBOX::IDEMPOTENCY_KEY_REUSED", 422, "",      \
	  false, "an Idempotency-Key reused for a create with another body")                        \
	X(CORRALD, SANDBOX_HOST_PID_LIMIT, "SANDBOX::HOST_PID_LIMIT", 503, "", true,                \
	  "a create hit a host process limit")                                                      \
	X(CORRALD, GENERAL_BODY_BUDGET_EXHAUSTED, "GENERAL::BODY_BUDGET_EXHAUSTED", 503, "", true,  \
	  "corrald already holds its budget of request bodies")                                     \
	X(CORRALD, SANDBOX_SHUTTING_DOWN, "SANDBOX::SHUTTING_DOWN", 503, "", true,                  \
	  "a create while corrald is stopping")                                                     \
	X(CORRALD, SANDBOX_INSUFFICIENT_STORAGE, "SANDBOX::INSUFFICIENT_STORAGE", 503, "", true,    \
	  "the default disk is more than the state file system has free")                           \
	X(CORRALD, SANDBOX_READY_TIMEOUT, "SANDBOX::READY_TIMEOUT", 504, "", true,                  \
	  "runtime or first ping not done within --create-timeout")                                 \
	X(INTERNAL, SANDBOX_CLIENT_CLOSED, "SANDBOX::CLIENT_CLOSED", 499, "", false,                \
	  "a waiting create whose client hung up (logged; nobody is left to answer)")              \
	X(INTERNAL, GENERAL_REFUSED, "GENERAL::REFUSED", 400, "", false,                            \
	  "front.c's fallback for a verdict without a code (every verdict names one)")              \
	X(EXECD, INVALID_REQUEST_BODY, "INVALID_REQUEST_BODY", 400, "404 409 413 414", false,       \
	  "bad JSON, field, id or path (404 unknown status id, 409 mv onto a file, 413/414 size)") \
	X(EXECD, MISSING_QUERY, "MISSING_QUERY", 400, "", false, "a required query parameter")      \
	X(EXECD, INVALID_FILE, "INVALID_FILE", 400, "", false, "a malformed upload")                \
	X(EXECD, INVALID_FILE_METADATA, "INVALID_FILE_METADATA", 400, "", false,                    \
	  "a malformed upload's metadata part")                                                     \
	X(EXECD, INVALID_FILE_CONTENT, "INVALID_FILE_CONTENT", 400, "", false,                      \
	  "a malformed upload's file part")                                                         \
	X(EXECD, FILE_NOT_FOUND, "FILE_NOT_FOUND", 404, "", false, "a missing file or directory")   \
	X(EXECD, CONTEXT_NOT_FOUND, "CONTEXT_NOT_FOUND", 404, "", false,                            \
	  "an unknown or ended bash session")                                                       \
	X(EXECD, NOT_FOUND, "NOT_FOUND", 404, "", false, "no such route")                           \
	X(EXECD, METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", 405, "", false, "a wrong method")        \
	X(EXECD, NOT_SUPPORTED, "NOT_SUPPORTED", 405, "", false,                                    \
	  "a wrong method on /files* and /directories*")                                            \
	X(EXECD, UNKNOWN, "UNKNOWN", 416, "", false, "an unsatisfiable or unparseable Range")       \
	X(EXECD, PROCESS_LIMIT, "PROCESS_LIMIT", 503, "", true,                                      \
	  "a command that could not be forked (the sandbox's or the host's process limit, memory)")\
	X(EXECD, FILE_LIMIT, "FILE_LIMIT", 503, "", true, "execd out of file descriptors")          \
	X(EXECD, DISK_FULL, "DISK_FULL", 507, "", true,  "the sandbox's disk is full (files API)")   \
	X(EXECD, RUNTIME_ERROR, "RUNTIME_ERROR", 500, "409 429 503", true,                          \
	  "what the kernel refused; 409 busy or unreadable record, 429 a limit, 503 no quiet")

enum wire_error {
#define WIRE_ERROR_ENUM_(scope, name, ...) WIRE_##name,
	WIRE_ERROR_MAP(WIRE_ERROR_ENUM_)
#undef WIRE_ERROR_ENUM_
	WIRE_ERROR_COUNT_
};

enum wire_scope { WIRE_SCOPE_CORRALD, WIRE_SCOPE_EXECD, WIRE_SCOPE_INTERNAL };

struct wire_error_info {
	enum wire_scope scope;
	const char *name, *code;
	int status;
	const char *other_statuses;
	bool retryable;
	const char *when;
};

extern const struct wire_error_info wire_errors[WIRE_ERROR_COUNT_];

/* The code string of WIRE_<name>, e.g. WIRE_CODE(SANDBOX_NOT_FOUND) is "SANDBOX::NOT_FOUND". */
#define WIRE_CODE(name) (wire_errors[WIRE_##name].code)

/* The entry of a code string sent by scope, or NULL. */
const struct wire_error_info *wire_error_find(enum wire_scope scope, const char *code);
