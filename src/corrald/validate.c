#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "corrald/validate.h"
#include "network/policy.h"
#include "shared/quantity.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

int verr_set(struct verr *e, int status, const char *code, const char *const *loc, const char *fmt,
	     ...)
{
	if (!e)
		return -EINVAL;
	memset(e, 0, sizeof(*e));
	e->status = status;
	e->code = code;
	for (int i = 0; loc && loc[i] && i < VERR_LOC_MAX; i++)
		snprintf(e->loc[e->nloc++], sizeof(e->loc[0]), "%s", loc[i]);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

#define LOC(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Check one metadata pair; field is "metadata" (create) or the PATCH body's top level. */
static int metadata_pair_check(const char *field, const char *key, json_t *v, struct verr *e)
{
	const char *const *loc = field ? LOC(field, key) : LOC(key);
	if (!json_is_string(v))
		return verr_set(e, 400, CODE_INVALID_METADATA_LABEL, loc,
				"metadata value for key '%s' must be a string", key);
	if (label_key_reserved(key))
		return verr_set(e, 400, CODE_INVALID_METADATA_LABEL, loc,
				"metadata key '%s' uses the reserved prefix 'opensandbox.io/'", key);
	if (!label_key_valid(key))
		return verr_set(e, 400, CODE_INVALID_METADATA_LABEL, loc,
				"metadata key '%s' is not a valid label key: [prefix/]name, where name is at most 63 characters of [A-Za-z0-9-_.] beginning and ending with an alphanumeric, and prefix is a lowercase DNS subdomain of at most 253 characters",
				key);
	const char *s = json_string_value(v);
	if (!label_value_valid(s))
		return verr_set(e, 400, CODE_INVALID_METADATA_LABEL, loc,
				"metadata value '%s' for key '%s' is not a valid label value: at most 63 characters of [A-Za-z0-9-_.] beginning and ending with an alphanumeric, or empty",
				s, key);
	return 0;
}

/* body[camel] or body[snake] (the reference server accepts both spellings). */
static json_t *field_get(json_t *body, const char *camel, const char *snake)
{
	json_t *v = json_object_get(body, camel);
	if (!v && snake)
		v = json_object_get(body, snake);
	return v;
}

/* A map string->string (null allowed when allow_null) or absent/null. Returns a new reference. */
static int string_map(json_t *v, const char *field, bool allow_null, json_t **ret, struct verr *e)
{
	*ret = json_object();
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v)) {
		json_decref(*ret);
		*ret = NULL;
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field),
				"%s must be an object mapping strings to strings", field);
	}
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x) {
		if (json_is_null(x) && allow_null)
			continue;
		if (!json_is_string(x)) {
			json_decref(*ret);
			*ret = NULL;
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field, k),
					"%s.%s must be a string%s", field, k,
					allow_null ? " or null" : "");
		}
		json_object_set(*ret, k, x);
	}
	return 0;
}

/* pids_min: the floor for a limit (a sandbox must start); a request is only for admission. */
static int resources_parse(json_t *map, const char *field, unsigned pids_min, uint64_t *cpu,
			   uint64_t *mem, uint64_t *pids, struct verr *e)
{
	json_t *v;
	*cpu = *mem = *pids = 0;
	if ((v = json_object_get(map, "cpu"))) {
		int r = quantity_parse_cpu(json_string_value(v), cpu);
		if (r < 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field, "cpu"),
					"%s.cpu: '%s' is not a valid CPU quantity (cores such as '1' or '0.5', or millicores such as '500m'; must be positive)",
					field, json_string_value(v));
	}
	if ((v = json_object_get(map, "memory"))) {
		int r = quantity_parse_bytes(json_string_value(v), mem);
		if (r < 0 || *mem == 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field, "memory"),
					"%s.memory: '%s' is not a valid memory quantity (bytes with an optional suffix such as '512Mi', '2Gi' or '1G'; must be positive)",
					field, json_string_value(v));
	}
	if ((v = json_object_get(map, "pids"))) {
		const char *s = json_string_value(v);
		char *end;
		errno = 0;
		unsigned long long n = s && *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
		if (!s || errno || n < pids_min || *end || n > 4194304)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field, "pids"),
					"%s.pids: '%s' is not a valid process count (an integer from %u to 4194304%s)",
					field, s ? s : "", pids_min,
					pids_min > 1 ? ": corral-execd, the entrypoint and one command need 3"
						     : "");
		*pids = n;
	}
	/* ephemeral-storage: only checked here; lifecycle reads it from the map (see disk.h). */
	if ((v = json_object_get(map, "ephemeral-storage"))) {
		uint64_t bytes = 0;
		int r = quantity_parse_bytes(json_string_value(v), &bytes);
		if (r < 0 || bytes < (8ULL << 20))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC(field, "ephemeral-storage"),
					"%s.ephemeral-storage: '%s' is not a valid size of at least 8Mi (e.g. '1Gi')",
					field, json_string_value(v));
	}
	return 0;
}

void create_params_clear(struct create_params *p)
{
	if (!p)
		return;
	free(p->image_uri);
	free(p->auth_user);
	if (p->auth_pass)
		explicit_bzero(p->auth_pass, strlen(p->auth_pass));
	free(p->auth_pass);
	json_decref(p->entrypoint);
	json_decref(p->env);
	json_decref(p->metadata);
	json_decref(p->limits);
	json_decref(p->requests);
	json_decref(p->extensions);
	json_decref(p->platform);
	json_decref(p->volumes);
	json_decref(p->network_policy);
	memset(p, 0, sizeof(*p));
}

/*
 * path normalized into out: repeated '/' collapsed, a trailing '/' dropped. absolute: it must
 * start with '/' (else must not). Returns false for "." or ".." components, or a bad start.
 */
static bool path_normalize(const char *in, bool absolute, char *out, size_t len)
{
	if (!in || !*in || (in[0] == '/') != absolute || strlen(in) >= len)
		return false;
	size_t o = 0;
	for (const char *c = in; *c;) {
		while (*c == '/')
			c++;
		const char *end = strchrnul(c, '/');
		size_t n = (size_t)(end - c);
		if (n == 0)
			break;
		if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (o || absolute)
			out[o++] = '/';
		memcpy(out + o, c, n);
		o += n;
		c = end;
	}
	if (o == 0 && absolute)
		out[o++] = '/';
	out[o] = '\0';
	return o > 0;
}

static bool path_under(const char *p, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static bool dns_label(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	return n > 0 && n <= 63 && s[0] != '-' && s[n - 1] != '-' &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* An optional boolean member; absent or null gives def. */
static int opt_bool(json_t *o, const char *key, bool def, bool *ret)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*ret = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return -1;
	*ret = json_is_true(v);
	return 0;
}

/* volumes: the shape of each entry (OpenSandbox's Volume), normalized into p->volumes; where a
 * host path may come from is checked by volumes_apply(), which knows the server's allowlist. */
static int volumes_parse(json_t *vs, struct create_params *p, struct verr *e)
{
	if (!vs || json_is_null(vs))
		return 0;
	if (!json_is_array(vs))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes"),
				"volumes must be an array of {name, mountPath, readOnly?, subPath?, host: {path} | pvc: {claimName, ...}}");
	if (json_array_size(vs) > VOLUMES_MAX)
		return verr_set(e, 400, CODE_INVALID_PARAMETER, LOC("volumes"),
				"volumes has %zu entries: at most %d", json_array_size(vs), VOLUMES_MAX);
	p->volumes = json_array();
	if (!p->volumes)
		return -ENOMEM;
	size_t i;
	json_t *v;
	char buf[4096];
	json_array_foreach(vs, i, v) {
		char idx[24];
		snprintf(idx, sizeof(idx), "%zu", i);
		if (!json_is_object(v))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx),
					"volumes[%zu] must be an object", i);
		const char *name = json_string_value(json_object_get(v, "name"));
		if (!dns_label(name))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx, "name"),
					"volumes[%zu].name must be a DNS label: 1 to 63 characters of [a-z0-9-], starting and ending with a letter or digit",
					i);
		json_t *o = json_object();
		if (!o || json_array_append_new(p->volumes, o) < 0)
			return -ENOMEM;
		json_object_set_new(o, "name", json_string(name));
		const char *mp = json_string_value(field_get(v, "mountPath", "mount_path"));
		if (!mp)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx, "mountPath"),
					"volumes[%zu].mountPath is required: an absolute path in the sandbox", i);
		if (!path_normalize(mp, true, buf, sizeof(buf)))
			return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_MOUNT_PATH),
					LOC("volumes", idx, "mountPath"),
					"volumes[%zu].mountPath '%.200s' must be an absolute path without '.' or '..' components",
					i, mp);
		if (strcmp(buf, "/") == 0 || path_under(buf, "/proc") || path_under(buf, "/sys") ||
		    path_under(buf, "/dev"))
			return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_MOUNT_PATH),
					LOC("volumes", idx, "mountPath"),
					"volumes[%zu].mountPath '%.200s': a volume may not cover '/' or anything in /proc, /sys or /dev",
					i, mp);
		json_object_set_new(o, "mountPath", json_string(buf));
		json_t *rov = field_get(v, "readOnly", "read_only");
		if (rov && !json_is_null(rov) && !json_is_boolean(rov))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx, "readOnly"),
					"volumes[%zu].readOnly must be a boolean", i);
		json_object_set_new(o, "readOnly", json_boolean(json_is_true(rov)));
		json_t *sp = field_get(v, "subPath", "sub_path");
		if (sp && !json_is_null(sp)) {
			const char *s = json_string_value(sp);
			if (!s)
				return verr_set(e, 422, CODE_INVALID_PARAMETER,
						LOC("volumes", idx, "subPath"),
						"volumes[%zu].subPath must be a string", i);
			if (*s && !path_normalize(s, false, buf, sizeof(buf)))
				return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_SUB_PATH),
						LOC("volumes", idx, "subPath"),
						"volumes[%zu].subPath '%.200s' must be a relative path without '.' or '..' components",
						i, s);
			if (*s)
				json_object_set_new(o, "subPath", json_string(buf));
		}
		json_t *host = json_object_get(v, "host"), *pvc = json_object_get(v, "pvc");
		json_t *oss = json_object_get(v, "ossfs");
		int backends = (host && !json_is_null(host)) + (pvc && !json_is_null(pvc)) +
			       (oss && !json_is_null(oss));
		if (backends != 1)
			return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_BACKEND), LOC("volumes", idx),
					"volumes[%zu] must have exactly one backend: host or pvc (it has %d)",
					i, backends);
		if (oss && !json_is_null(oss))
			return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_BACKEND), LOC("volumes", idx, "ossfs"),
					"volumes[%zu].ossfs is not supported by this server (native runtime): use host or pvc",
					i);
		if (host && !json_is_null(host)) {
			const char *hp = json_string_value(json_object_get(host, "path"));
			if (!json_is_object(host) || !hp)
				return verr_set(e, 422, CODE_INVALID_PARAMETER,
						LOC("volumes", idx, "host"),
						"volumes[%zu].host must be an object {\"path\": \"<absolute host path>\"}",
						i);
			if (!path_normalize(hp, true, buf, sizeof(buf)))
				return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_HOST_PATH),
						LOC("volumes", idx, "host"),
						"volumes[%zu].host.path '%.200s' must be an absolute path without '.' or '..' components",
						i, hp);
			json_object_set_new(o, "host", json_pack("{s:s}", "path", buf));
			continue;
		}
		const char *claim = json_string_value(field_get(pvc, "claimName", "claim_name"));
		if (!json_is_object(pvc) || !dns_label(claim))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx, "pvc"),
					"volumes[%zu].pvc.claimName must be a DNS label: 1 to 63 characters of [a-z0-9-], starting and ending with a letter or digit",
					i);
		bool create = true, del = false;
		if (opt_bool(pvc, "createIfNotExists", true, &create) < 0 ||
		    opt_bool(pvc, "deleteOnSandboxTermination", false, &del) < 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("volumes", idx, "pvc"),
					"volumes[%zu].pvc: createIfNotExists and deleteOnSandboxTermination must be booleans",
					i);
		json_t *no = json_pack("{s:s, s:b, s:b}", "claimName", claim, "createIfNotExists",
				       create, "deleteOnSandboxTermination", del);
		json_t *st = json_object_get(pvc, "storage");
		if (st && !json_is_null(st)) {
			uint64_t bytes = 0;
			if (quantity_parse_bytes(json_string_value(st), &bytes) < 0 ||
			    bytes < (8ULL << 20)) {
				json_decref(no);
				return verr_set(e, 422, CODE_INVALID_PARAMETER,
						LOC("volumes", idx, "pvc"),
						"volumes[%zu].pvc.storage: '%.100s' is not a valid size of at least 8Mi (e.g. '1Gi')",
						i, json_string_value(st) ? json_string_value(st) : "");
			}
			json_object_set(no, "storage", st);
		}
		json_object_set_new(o, "pvc", no);
	}
	/* Two volumes on one mountPath: the second would hide the first. */
	for (size_t a = 0; a < json_array_size(p->volumes); a++)
		for (size_t b = 0; b < a; b++) {
			json_t *va = json_array_get(p->volumes, a), *vb = json_array_get(p->volumes, b);
			const char *na = json_string_value(json_object_get(va, "name"));
			const char *ma = json_string_value(json_object_get(va, "mountPath"));
			char idx[24];
			snprintf(idx, sizeof(idx), "%zu", a);
			if (strcmp(na, json_string_value(json_object_get(vb, "name"))) == 0)
				return verr_set(e, 400, CODE_INVALID_PARAMETER, LOC("volumes", idx, "name"),
						"volumes[%zu].name '%s' is used twice", a, na);
			const char *mb = json_string_value(json_object_get(vb, "mountPath"));
			if (strcmp(ma, mb) == 0)
				return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_MOUNT_PATH),
						LOC("volumes", idx, "mountPath"),
						"volumes[%zu].mountPath '%s' is used twice", a, ma);
			/* A volume's content is every sandbox's that mounts it: one of them can rmdir
			 * a mount point made in it (the kernel detaches mounts of other namespaces
			 * there) and put its own files in its place. */
			if (path_under(ma, mb) || path_under(mb, ma))
				return verr_set(e, 400, WIRE_CODE(VOLUME_INVALID_MOUNT_PATH),
						LOC("volumes", idx, "mountPath"),
						"volumes[%zu].mountPath '%s' and '%s' lie one in the other: a volume cannot be mounted inside another (a sandbox sharing the outer one could remove the mount point and put its own files there)",
						a, ma, mb);
		}
	return 0;
}

int volumes_apply(struct create_params *p, char *const *host_paths, uint64_t size_max,
		  const char *size_max_str, struct verr *e)
{
	size_t i;
	json_t *v;
	json_array_foreach(p->volumes, i, v) {
		char idx[24];
		snprintf(idx, sizeof(idx), "%zu", i);
		const char *hp = json_string_value(json_object_get(json_object_get(v, "host"), "path"));
		if (hp) {
			bool ok = false;
			for (char *const *a = host_paths; a && *a && !ok; a++)
				ok = strcmp(*a, "/") == 0 || path_under(hp, *a);
			if (!host_paths || !host_paths[0])
				return verr_set(e, 400, WIRE_CODE(VOLUME_HOST_PATH_NOT_ALLOWED),
						LOC("volumes", idx, "host"),
						"volumes[%zu].host.path '%.200s': host volumes are off on this server (the operator allows host directories with corrald --allow-host-path DIR)",
						i, hp);
			if (!ok)
				return verr_set(e, 400, WIRE_CODE(VOLUME_HOST_PATH_NOT_ALLOWED),
						LOC("volumes", idx, "host"),
						"volumes[%zu].host.path '%.200s' is not under a directory this server allows (corrald --allow-host-path)",
						i, hp);
		}
		const char *st = json_string_value(json_object_get(json_object_get(v, "pvc"), "storage"));
		uint64_t bytes = 0;
		if (st && quantity_parse_bytes(st, &bytes) == 0 && size_max && bytes > size_max)
			return verr_set(e, 400, CODE_INVALID_PARAMETER, LOC("volumes", idx, "pvc"),
					"volumes[%zu].pvc.storage '%s' is more than a named volume may have on this server (corrald --volume-size %s)",
					i, st, size_max_str ? size_max_str : "");
	}
	return 0;
}

/*
 * The create's fields, one step each, run in order by create_params_parse_into(). A step returns
 * 0, -EINVAL with e filled in, or -ENOMEM; what it has parsed is in p either way (freed by
 * create_params_clear()).
 */
static int create_parse_unsupported(json_t *body, struct create_params *p, struct verr *e)
{
	/* Features this runtime does not have are refused rather than silently ignored. */
	static const char *const unsupported[][2] = {
		{"snapshotId", "snapshot_id"},
		{"credentialProxy", "credential_proxy"},
	};
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		json_t *v = field_get(body, unsupported[i][0], unsupported[i][1]);
		if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
			return verr_set(e, 400, WIRE_CODE(SANDBOX_API_NOT_SUPPORTED), LOC(unsupported[i][0]),
					"%s is not supported by this server (native runtime)",
					unsupported[i][0]);
	}
	json_t *sa = field_get(body, "secureAccess", "secure_access");
	if (sa && json_is_true(sa))
		return verr_set(e, 400, WIRE_CODE(SANDBOX_API_NOT_SUPPORTED), LOC("secureAccess"),
				"secureAccess is not supported by this server (native runtime)");
	return 0;
}

static int create_parse_image(json_t *body, struct create_params *p, struct verr *e)
{
	/* image.uri */
	json_t *image = json_object_get(body, "image");
	if (!image || json_is_null(image))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("image"),
				"image is required: an object {\"uri\": \"<image>\"}");
	if (!json_is_object(image))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("image"),
				"image must be an object {\"uri\": \"<image>\"}");
	json_t *uri = json_object_get(image, "uri");
	if (uri && !json_is_null(uri) && !json_is_string(uri))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("image", "uri"),
				"image.uri must be a string");
	const char *u = json_string_value(uri);
	while (u && isspace((unsigned char)*u))
		u++;
	if (!u || !*u)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("image", "uri"),
				"image.uri is required and must not be blank");
	p->image_uri = strdup(json_string_value(uri));
	if (!p->image_uri)
		return -ENOMEM;
	json_t *auth = json_object_get(image, "auth");
	if (auth && !json_is_null(auth)) {
		const char *au = json_string_value(json_object_get(auth, "username"));
		const char *ap = json_string_value(json_object_get(auth, "password"));
		if (!json_is_object(auth) || !au || !ap || strlen(au) > 256 || strlen(ap) > 4096)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("image", "auth"),
					"image.auth must be an object {\"username\": string, \"password\": string} (at most 256 and 4096 bytes)");
		if (!(p->auth_user = strdup(au)) || !(p->auth_pass = strdup(ap)))
			return -ENOMEM;
	}
	return 0;
}

static int create_parse_entrypoint(json_t *body, struct create_params *p, struct verr *e)
{
	/* entrypoint: required, array of strings, minItems 1. */
	json_t *ep = json_object_get(body, "entrypoint");
	if (!ep || json_is_null(ep))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint"),
				"entrypoint is required: an array of at least one string, e.g. [\"tail\",\"-f\",\"/dev/null\"]");
	if (!json_is_array(ep) || json_array_size(ep) == 0)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint"),
				"entrypoint must be an array of at least one string");
	if (json_array_size(ep) > 4096)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint"),
				"entrypoint has more than 4096 items");
	size_t i;
	json_t *x;
	json_array_foreach(ep, i, x) {
		char idx[24];
		snprintf(idx, sizeof(idx), "%zu", i);
		if (!json_is_string(x))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint", idx),
					"entrypoint[%zu] must be a string", i);
		if (json_string_length(x) > CREATE_EXEC_STRING_MAX)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint", idx),
					"entrypoint[%zu] is longer than %d bytes (the kernel's limit on one argument)",
					i, CREATE_EXEC_STRING_MAX);
	}
	if (json_string_length(json_array_get(ep, 0)) == 0)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("entrypoint", "0"),
				"entrypoint[0] (the program) must not be empty");
	p->entrypoint = json_incref(ep);
	return 0;
}

static int create_parse_timeout(json_t *body, struct create_params *p, struct verr *e)
{
	/*
	 * timeout: seconds, or null/absent for manual cleanup. The reference server requires >= 60;
	 * we deliberately accept any timeout >= 1 (short-lived rollouts and TTL tests want seconds).
	 */
	json_t *to = json_object_get(body, "timeout");
	if (to && !json_is_null(to)) {
		json_int_t t;
		double d = json_is_real(to) ? json_real_value(to) : 0;
		if (json_is_integer(to))
			t = json_integer_value(to);
		else if (json_is_real(to) && d >= -1e18 && d <= 1e18 && d == (double)(json_int_t)d)
			t = (json_int_t)d; /* in range before the cast: out of range it is undefined */
		else
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("timeout"),
					"timeout must be an integer number of seconds (>= 1) or null for manual cleanup");
		if (t < 1 || t > CREATE_TIMEOUT_MAX_S)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("timeout"),
					"timeout must be between 1 and %lld seconds, or null for manual cleanup; got %lld",
					(long long)CREATE_TIMEOUT_MAX_S, (long long)t);
		p->has_timeout = true;
		p->timeout_s = t;
	}
	return 0;
}

static int create_parse_resources(json_t *body, struct create_params *p, struct verr *e)
{
	int r;
	/* resourceLimits (required, as in the reference) / resourceRequests (optional). */
	json_t *rl = field_get(body, "resourceLimits", "resource_limits");
	if (!rl || json_is_null(rl))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("resourceLimits"),
				"resourceLimits is required: an object such as {\"cpu\": \"1\", \"memory\": \"2Gi\"} (unknown keys are ignored)");
	r = string_map(rl, "resourceLimits", false, &p->limits, e);
	if (r < 0)
		return r;
	r = resources_parse(p->limits, "resourceLimits", CREATE_PIDS_MIN, &p->cpu_limit_millis,
			    &p->memory_limit_bytes, &p->pids_max, e);
	if (r < 0)
		return r;
	/* Below this the sandbox dies starting, or its first command is OOM-killed. */
	if (p->memory_limit_bytes && p->memory_limit_bytes < CREATE_MEMORY_MIN)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("resourceLimits", "memory"),
				"resourceLimits.memory: '%s' is below the minimum of %dMi a sandbox needs to start",
				json_string_value(json_object_get(p->limits, "memory")),
				(int)(CREATE_MEMORY_MIN >> 20));
	json_t *rq = field_get(body, "resourceRequests", "resource_requests");
	if (rq && !json_is_null(rq)) {
		p->requests_given = true;
		r = string_map(rq, "resourceRequests", false, &p->requests, e);
		if (r < 0)
			return r;
		uint64_t unused_pids;
		r = resources_parse(p->requests, "resourceRequests", 1, &p->cpu_request_millis,
				    &p->memory_request_bytes, &unused_pids, e);
		if (r < 0)
			return r;
		if (p->cpu_limit_millis && p->cpu_request_millis > p->cpu_limit_millis)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("resourceRequests", "cpu"),
					"resourceRequests.cpu must not exceed resourceLimits.cpu");
		if (p->memory_limit_bytes && p->memory_request_bytes > p->memory_limit_bytes)
			return verr_set(e, 422, CODE_INVALID_PARAMETER,
					LOC("resourceRequests", "memory"),
					"resourceRequests.memory must not exceed resourceLimits.memory");
	} else {
		p->requests = json_deep_copy(p->limits);
		p->cpu_request_millis = p->cpu_limit_millis;
		p->memory_request_bytes = p->memory_limit_bytes;
	}
	return 0;
}

static int create_parse_env(json_t *body, struct create_params *p, struct verr *e)
{
	int r;
	json_t *x;
	/* env: string values, null values dropped. */
	r = string_map(json_object_get(body, "env"), "env", true, &p->env, e);
	if (r < 0)
		return r;
	const char *k;
	json_object_foreach(p->env, k, x) {
		if (!*k || strchr(k, '='))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("env", k),
					"env key '%.200s' is not a valid variable name (non-empty, no '=')", k);
		if (strlen(k) + 1 + json_string_length(x) > CREATE_EXEC_STRING_MAX)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("env", k),
					"env.%.200s: NAME=VALUE is longer than %d bytes (the kernel's limit on one variable)",
					k, CREATE_EXEC_STRING_MAX);
	}
	return 0;
}

static int create_parse_metadata(json_t *body, struct create_params *p, struct verr *e)
{
	int r;
	const char *k;
	json_t *x;
	/* metadata: Kubernetes label rules, reserved prefix refused. */
	json_t *md = json_object_get(body, "metadata");
	if (md && !json_is_null(md) && !json_is_object(md))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("metadata"),
				"metadata must be an object mapping strings to strings");
	p->metadata = json_object();
	if (md && json_is_object(md)) {
		json_object_foreach(md, k, x) {
			if ((r = metadata_pair_check("metadata", k, x, e)) < 0)
				return r;
			json_object_set(p->metadata, k, x);
		}
	}
	return 0;
}

static int create_parse_network_policy(json_t *body, struct create_params *p, struct verr *e)
{
	int r;
	/* networkPolicy: OpenSandbox's egress policy plus IP/CIDR targets (network/policy.h). */
	json_t *np = field_get(body, "networkPolicy", "network_policy");
	if (np && !json_is_null(np)) {
		struct egress_policy pol;
		struct error pe = {0};
		r = egress_policy_from_json(np, &pol, &pe);
		if (r == 0)
			r = egress_rules_refuse_ipv6(pol.rules, pol.n, &pe);
		egress_policy_clear(&pol);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return verr_set(e, 400, CODE_INVALID_PARAMETER, LOC("networkPolicy"),
					"networkPolicy: %s", pe.msg);
		p->network_policy = json_incref(np);
	}
	return 0;
}

/* After env and resourceLimits: cpuCapEnv adds to the env what the CPU limit implies. */
static int create_parse_extensions(json_t *body, struct create_params *p, struct verr *e)
{
	int r;
	/* extensions: string map; "oomGroup": "true"|"false" is ours. */
	r = string_map(json_object_get(body, "extensions"), "extensions", false, &p->extensions, e);
	if (r < 0)
		return r;
	json_t *og = json_object_get(p->extensions, "oomGroup");
	if (og) {
		const char *s = json_string_value(og);
		if (strcasecmp(s, "true") == 0)
			p->oom_group = true;
		else if (strcasecmp(s, "false") != 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("extensions", "oomGroup"),
					"extensions.oomGroup must be \"true\" or \"false\", got '%s'", s);
	}
	/* extensions.network: "none" keeps the sandbox loopback-only; "default" (or absent) gives
	 * it corrald's network when corrald has one. */
	json_t *nw = json_object_get(p->extensions, "network");
	if (nw) {
		const char *s = json_string_value(nw);
		if (strcmp(s, "none") == 0)
			p->network_none = true;
		else if (strcmp(s, "default") != 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("extensions", "network"),
					"extensions.network must be \"none\" or \"default\", got '%s'", s);
	}
	/* The image pull policy, under either of its two names. */
	static const char *const policy_keys[] = {"imagePullPolicy",
						  "opensandbox.extensions.image-pull-policy"};
	p->pull_policy = "IfNotPresent";
	for (size_t pk = 0; pk < sizeof(policy_keys) / sizeof(policy_keys[0]); pk++) {
		const char *s = json_string_value(json_object_get(p->extensions, policy_keys[pk]));
		if (!s)
			continue;
		if (strcmp(s, "Always") && strcmp(s, "IfNotPresent") && strcmp(s, "Never"))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("extensions", policy_keys[pk]),
					"extensions.%s must be \"Always\", \"IfNotPresent\" or \"Never\", got '%s'",
					policy_keys[pk], s);
		p->pull_policy = strcmp(s, "Always") == 0 ? "Always" : strcmp(s, "Never") == 0 ? "Never" : "IfNotPresent";
	}
	/* extensions.cpuCapEnv (default "true"): the CPU-cap variables below, explicit env wins. */
	json_t *ce = json_object_get(p->extensions, "cpuCapEnv");
	bool cap_env = true;
	if (ce) {
		const char *s = json_string_value(ce);
		if (strcasecmp(s, "false") == 0)
			cap_env = false;
		else if (strcasecmp(s, "true") != 0)
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("extensions", "cpuCapEnv"),
					"extensions.cpuCapEnv must be \"true\" or \"false\", got '%s'", s);
	}
	if (cap_env && cpu_cap_env_add(p->env, p->cpu_limit_millis) < 0)
		return -ENOMEM;
	return 0;
}

static int create_parse_platform(json_t *body, struct create_params *p, struct verr *e)
{
	/* platform: only linux on this host's architecture can be satisfied. */
	json_t *pl = json_object_get(body, "platform");
	if (pl && !json_is_null(pl)) {
		if (!json_is_object(pl))
			return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("platform"),
					"platform must be an object {\"os\",\"arch\"}");
		static const char *const keys[] = {"os", "arch"};
		for (size_t j = 0; j < 2; j++) {
			json_t *v = json_object_get(pl, keys[j]);
			if (v && !json_is_null(v) && !json_is_string(v))
				return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("platform", keys[j]),
						"platform.%s must be a string", keys[j]);
		}
		const char *os = json_string_value(json_object_get(pl, "os"));
		const char *arch = json_string_value(json_object_get(pl, "arch"));
#if defined(__x86_64__)
		const char *host_arch = "amd64";
#elif defined(__aarch64__)
		const char *host_arch = "arm64";
#else
		const char *host_arch = "unknown";
#endif
		if ((os && strcmp(os, "linux") != 0) || (arch && strcmp(arch, host_arch) != 0))
			return verr_set(e, 400, CODE_INVALID_PARAMETER, LOC("platform"),
					"platform %s/%s cannot be satisfied: this host runs linux/%s",
					os ? os : "linux", arch ? arch : host_arch, host_arch);
		p->platform = json_incref(pl);
	}
	return 0;
}

static int create_params_parse_into(json_t *body, struct create_params *p, struct verr *e)
{
	/* In the order the fields are checked: the first error is the one reported. */
	static int (*const steps[])(json_t *, struct create_params *, struct verr *) = {
		create_parse_unsupported, create_parse_image, create_parse_entrypoint,
		create_parse_timeout, create_parse_resources, create_parse_env,
		create_parse_metadata, create_parse_network_policy, create_parse_extensions,
		create_parse_platform,
	};
	if (!json_is_object(body))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, NULL,
				"request body must be a JSON object (CreateSandboxRequest)");
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		int r = steps[i](body, p, e);
		if (r < 0)
			return r;
	}
	return volumes_parse(json_object_get(body, "volumes"), p, e);
}

int cpu_cap_env_add(json_t *env, uint64_t cpu_millis)
{
	if (!cpu_millis)
		return 0;
	char v[24];
	snprintf(v, sizeof(v), "%llu",
		 (unsigned long long)(cpu_millis < 1000 ? 1 : cpu_millis / 1000));
	for (size_t i = 0; i < CPU_CAP_ENV_N; i++)
		if (!json_object_get(env, cpu_cap_env_vars[i]) &&
		    json_object_set_new(env, cpu_cap_env_vars[i], json_string(v)) < 0)
			return -ENOMEM;
	return 0;
}

int create_params_parse(json_t *body, struct create_params *ret, struct verr *e)
{
	memset(ret, 0, sizeof(*ret));
	int r = create_params_parse_into(body, ret, e);
	if (r < 0)
		create_params_clear(ret);
	return r;
}

int metadata_merge_patch(json_t *current, json_t *patch, json_t **ret_new, struct verr *e)
{
	if (!json_is_object(patch))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, NULL,
				"request body must be a JSON merge-patch object: {\"key\": \"value\"} sets, {\"key\": null} deletes");
	const char *k;
	json_t *x;
	json_object_foreach(patch, k, x) {
		if (json_is_null(x))
			continue;
		int r = metadata_pair_check(NULL, k, x, e);
		if (r < 0)
			return r;
	}
	json_t *n = current ? json_copy(current) : json_object();
	if (!n)
		return -ENOMEM;
	json_object_foreach(patch, k, x) {
		if (json_is_null(x))
			json_object_del(n, k);
		else
			json_object_set(n, k, x);
	}
	*ret_new = n;
	return 0;
}

int renew_parse(json_t *body, int64_t *ret_ms, struct verr *e)
{
	if (!json_is_object(body))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, NULL,
				"request body must be a JSON object {\"expiresAt\": \"<RFC 3339 time>\"}");
	json_t *v = field_get(body, "expiresAt", "expires_at");
	if (!v || !json_is_string(v))
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("expiresAt"),
				"expiresAt is required: an RFC 3339 timestamp such as \"2026-06-12T12:00:00Z\"");
	if (time_parse_rfc3339(json_string_value(v), ret_ms) < 0)
		return verr_set(e, 422, CODE_INVALID_PARAMETER, LOC("expiresAt"),
				"expiresAt '%s' is not an RFC 3339 timestamp (e.g. \"2026-06-12T12:00:00Z\")",
				json_string_value(v));
	return 0;
}

/* "79.5 GiB", "512.0 MiB": free space for a message. */
static void bytes_human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ULL << 30))
		snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ULL << 30));
	else
		snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ULL << 20));
}

int disk_limit_apply(struct create_params *p, uint64_t default_bytes, const char *default_str,
		     uint64_t avail_bytes, struct verr *e)
{
	char avail[32];
	bytes_human(avail_bytes, avail, sizeof(avail));
	const char *given = json_string_value(json_object_get(p->limits, "ephemeral-storage"));
	if (given) {
		uint64_t bytes = 0;
		(void)quantity_parse_bytes(given, &bytes); /* checked by create_params_parse() */
		p->disk_limit_bytes = bytes;
		if (bytes > avail_bytes)
			return verr_set(e, 422, CODE_INVALID_PARAMETER,
					LOC("resourceLimits", "ephemeral-storage"),
					"resourceLimits.ephemeral-storage: '%s' is more than the state file system can hold (%s free)",
					given, avail);
		return 0;
	}
	if (!default_bytes)
		return 0;
	if (default_bytes > avail_bytes)
		return verr_set(e, 503, CODE_INSUFFICIENT_STORAGE, NULL,
				"the state file system has %s free, less than the default disk of a sandbox (--default-disk %s): free space there, or send a smaller resourceLimits.ephemeral-storage",
				avail, default_str);
	if (json_object_set_new(p->limits, "ephemeral-storage", json_string(default_str)) < 0)
		return -ENOMEM;
	p->disk_limit_bytes = default_bytes;
	return 0;
}
