/* Registry images in corrald's store (corral extension /v1/images; docs/images.md), and named
 * volumes (/v1/volumes; docs/volumes.md). */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

/* One request, answered with status want (and a JSON object when ret is not NULL). No retries:
 * a pull is shared by corrald and is cheap to ask for again, a list or a remove is the caller's
 * to repeat. */
static int images_call(corral_client *c, const char *method, const char *path, const char *body,
		       long timeout_ms, long want, json_t **ret, const char *what,
		       corral_error *err)
{
	struct http_req rq = {.method = method, .path = path, .body = body, .api_key = true,
			      .timeout_ms = timeout_ms};
	struct http_resp rs;
	http_do(c, &rq, &rs);
	int r = 0;
	if (rs.status != want)
		r = cerr_from_resp(err, &rs, what);
	else if (ret && !json_is_object(rs.json))
		r = cerr_set(err, CORRAL_E_PROTOCOL, "%s: the answer is not a JSON object", what);
	else if (ret)
		*ret = json_incref(rs.json);
	http_resp_clear(&rs);
	return r;
}

static char *dump(json_t *j, corral_error *err)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!s)
		cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	return s;
}

/* images_call wanting 200 and a JSON object, handed back as text in *ret_json (NULL: dropped). */
static int images_call_json(corral_client *c, const char *method, const char *path,
			    const char *body, long timeout_ms, const char *what, char **ret_json,
			    corral_error *err)
{
	json_t *j = NULL;
	int r = images_call(c, method, path, body, timeout_ms, 200, &j, what, err);
	if (r < 0)
		return r;
	if (!ret_json) {
		json_decref(j);
		return 0;
	}
	*ret_json = dump(j, err);
	return *ret_json ? 0 : -ENOMEM;
}

/* prefix then arg, URL-escaped, into buf. */
static int escaped_path(char *buf, size_t len, const char *prefix, const char *arg,
			corral_error *err)
{
	char *q = curl_easy_escape(NULL, arg, 0);
	if (!q)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	snprintf(buf, len, "%s%s", prefix, q);
	curl_free(q);
	return 0;
}

static long request_timeout_ms(const corral_client *c)
{
	return (long)(c->o.request_timeout_s * 1000);
}

CORRAL_API int corral_image_list_json(corral_client *c, char **ret_json, corral_error *err)
{
	return images_call_json(c, "GET", "/v1/images", NULL, request_timeout_ms(c), "list images",
				ret_json, err);
}

CORRAL_API int corral_image_pull(corral_client *c, const char *ref, const char *username,
				 const char *password, double timeout_s, char **ret_json,
				 corral_error *err)
{
	if (!ref || !*ref)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "an image reference is required");
	json_t *body = json_pack("{s:{s:s}}", "image", "uri", ref);
	if (body && username)
		json_object_set_new(json_object_get(body, "image"), "auth",
				    json_pack("{s:s, s:s}", "username", username, "password",
					      password ? password : ""));
	char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!b)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	char what[600];
	snprintf(what, sizeof(what), "pull %s", ref);
	int r = images_call_json(c, "POST", "/v1/images", b, (long)(timeout_s * 1000), what,
				 ret_json, err);
	explicit_bzero(b, strlen(b));
	free(b);
	return r;
}

CORRAL_API int corral_image_import(corral_client *c, const char *path, const char *ref,
				   double timeout_s, char **ret_json, corral_error *err)
{
	if (!ref || !*ref || !path || !*path)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "a path and an image name are required");
	json_t *body = json_pack("{s:{s:s}, s:{s:s}}", "image", "uri", ref, "import", "path", path);
	char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!b)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	char what[600];
	snprintf(what, sizeof(what), "import %s", path);
	int r = images_call_json(c, "POST", "/v1/images", b, (long)(timeout_s * 1000), what,
				 ret_json, err);
	free(b);
	return r;
}

CORRAL_API int corral_image_remove(corral_client *c, const char *ref, corral_error *err)
{
	if (!ref || !*ref)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "an image reference is required");
	char path[2048], what[600];
	if (escaped_path(path, sizeof(path), "/v1/images?ref=", ref, err) < 0)
		return -ENOMEM;
	snprintf(what, sizeof(what), "remove image %s", ref);
	return images_call(c, "DELETE", path, NULL, request_timeout_ms(c), 204, NULL, what, err);
}

CORRAL_API int corral_image_inspect_json(corral_client *c, const char *ref, char **ret_json,
					 corral_error *err)
{
	if (!ref || !*ref)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "an image reference is required");
	char path[2048], what[600];
	if (escaped_path(path, sizeof(path), "/v1/images?ref=", ref, err) < 0)
		return -ENOMEM;
	snprintf(what, sizeof(what), "inspect image %s", ref);
	return images_call_json(c, "GET", path, NULL, request_timeout_ms(c), what, ret_json, err);
}

CORRAL_API int corral_volume_list_json(corral_client *c, char **ret_json, corral_error *err)
{
	return images_call_json(c, "GET", "/v1/volumes", NULL, request_timeout_ms(c), "list volumes",
				ret_json, err);
}

CORRAL_API int corral_volume_remove(corral_client *c, const char *name, corral_error *err)
{
	if (!name || !*name)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "a volume name is required");
	char path[1024], what[300];
	if (escaped_path(path, sizeof(path), "/v1/volumes/", name, err) < 0)
		return -ENOMEM;
	snprintf(what, sizeof(what), "remove volume %.200s", name);
	return images_call(c, "DELETE", path, NULL, request_timeout_ms(c), 204, NULL, what, err);
}
