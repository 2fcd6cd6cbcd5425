/*
 * Fuzz target for corrald's lifecycle request validation (src/corrald/validate.c): the body of
 * POST /sandboxes, of PATCH .../metadata and of POST .../renew-expiration.
 *
 * Input: a JSON document (parsed the way corrald parses bodies). Beyond "never crashes", it checks
 * the contract: a refusal is a 400 or 422 with a code and a message, and an accepted create has
 * what the runtime relies on (an image, a non-empty entrypoint of strings each short enough to
 * exec, string maps, limits at or above the floors, requests within limits, a bounded timeout,
 * label-valid metadata).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "corrald/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(int r, const struct verr *e)
{
	if (r == -ENOMEM)
		return;
	if (r != -EINVAL || (e->status != 400 && e->status != 422) || !e->code || !e->msg[0] ||
	    e->nloc < 0 || e->nloc > VERR_LOC_MAX)
		abort();
}

static void check_string_map(json_t *m)
{
	const char *k;
	json_t *v;
	if (!json_is_object(m))
		abort();
	json_object_foreach(m, k, v) {
		if (!json_is_string(v))
			abort();
	}
}

static void check_create(const struct create_params *p)
{
	if (!p->image_uri || !*p->image_uri)
		abort();
	if (!json_is_array(p->entrypoint) || json_array_size(p->entrypoint) == 0 ||
	    json_string_length(json_array_get(p->entrypoint, 0)) == 0)
		abort();
	size_t i;
	json_t *x;
	json_array_foreach(p->entrypoint, i, x) {
		if (!json_is_string(x) || json_string_length(x) > CREATE_EXEC_STRING_MAX)
			abort();
	}
	check_string_map(p->env);
	check_string_map(p->metadata);
	check_string_map(p->limits);
	check_string_map(p->requests);
	check_string_map(p->extensions);
	const char *k;
	json_object_foreach(p->env, k, x) {
		if (!*k || strchr(k, '=') ||
		    strlen(k) + 1 + json_string_length(x) > CREATE_EXEC_STRING_MAX)
			abort();
	}
	json_object_foreach(p->metadata, k, x) {
		if (!label_key_valid(k) || label_key_reserved(k) ||
		    !label_value_valid(json_string_value(x)))
			abort();
	}
	if (p->memory_limit_bytes && p->memory_limit_bytes < CREATE_MEMORY_MIN)
		abort();
	if (p->pids_max && p->pids_max < CREATE_PIDS_MIN)
		abort();
	if (p->cpu_limit_millis && p->cpu_request_millis > p->cpu_limit_millis)
		abort();
	if (p->memory_limit_bytes && p->memory_request_bytes > p->memory_limit_bytes)
		abort();
	if (p->has_timeout && (p->timeout_s < 1 || p->timeout_s > CREATE_TIMEOUT_MAX_S))
		abort();
	if (p->platform && !json_is_object(p->platform))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1024 * 1024)
		return 0;
	json_error_t jerr;
	json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
	if (!body)
		return 0;

	struct create_params p;
	struct verr e;
	int r = create_params_parse(body, &p, &e);
	if (r == 0) {
		check_create(&p);
		create_params_clear(&p);
	} else {
		check_refusal(r, &e);
	}

	json_t *current = json_pack("{s:s, s:s}", "team", "a", "keep", "b");
	json_t *merged = NULL;
	r = metadata_merge_patch(current, body, &merged, &e);
	if (r == 0) {
		check_string_map(merged);
		const char *k;
		json_t *x;
		json_object_foreach(merged, k, x) {
			/* Every key came from current or passed the label rules. */
			if (!json_object_get(current, k) && !label_key_valid(k))
				abort();
		}
		json_decref(merged);
	} else {
		check_refusal(r, &e);
	}
	json_decref(current);

	int64_t ms;
	r = renew_parse(body, &ms, &e);
	if (r < 0)
		check_refusal(r, &e);
	json_decref(body);
	return 0;
}
