/*
 * The OCI distribution API client: GET manifests and blobs with libcurl, answering the registry's
 * WWW-Authenticate challenge (Bearer: a token from the realm, with credentials when we have them;
 * Basic: the credentials). Registries are reached over HTTPS, or plain HTTP when listed as
 * insecure. Redirects (blob storage) are followed over the same schemes, and curl never sends our
 * Authorization header to another host.
 */
#include <ctype.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "images/registry.h"
#include "shared/timeutil.h"

#define BLOB_TRIES 3
#define CRED_MAX 1024

struct registry {
	CURL *h;
	const struct image_ref *ref;
	const struct image_pull_opts *o;
	bool insecure;
	char *user, *pass;
	char *bearer;            /* Authorization value once a challenge was answered */
	bool basic;              /* the registry asked for Basic: send it from then on */
	uint16_t realm_port;     /* of the last Bearer realm, 0 = none */
	bool ports_fixed;        /* confined: connect() reaches registry_ports() only */
	uint16_t want_port;      /* a realm's port past them, asked for (registry_auth_get()) */
	int64_t deadline_mono_ms; /* 0 = none */
};

/* Where a response body goes: memory (bounded) or a file (bounded, hashed as it is written). */
struct sink {
	char *buf;   /* memory body (manifests, tokens, error replies) */
	size_t blen;
	size_t len, max; /* file sinks: bytes written; the most either may hold */
	long status; /* of the reply being received (after any redirect) */
	int fd;
	EVP_MD_CTX *md;
	int err; /* negative errno of the write side: -EFBIG past max, -ENOSPC... */
	volatile uint64_t *progress; /* file sinks: bytes written, across the whole pull */
	/* File sinks: the first base bytes of the file are kept from an earlier request (a partial
	 * download), base_md the hash over them; a request asks for the rest (Range) and a 206 whose
	 * Content-Range starts at base continues the file. A 200 starts it over. */
	size_t base;
	EVP_MD_CTX *base_md;
	bool bad_range;   /* a 206 that does not continue at base: ask for the whole blob */
	bool ranged;      /* some bytes of the file came from before a Range request */
	/* headers of the last response */
	char auth[1024];
	char type[128];
};

void registry_sha256(const void *data, size_t len, char ret[72])
{
	unsigned char d[32];
	unsigned int n = 0;
	EVP_Digest(data, len, d, &n, EVP_sha256(), NULL);
	strcpy(ret, "sha256:");
	for (unsigned i = 0; i < 32; i++)
		sprintf(ret + 7 + 2 * i, "%02x", d[i]);
}

/* Memory kept of a non-200 reply to a blob request (its error message). */
#define ERROR_BODY_MAX 65536

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;
	if (s->fd >= 0 && s->status == 206 && s->bad_range) {
		s->err = -EAGAIN;
		return 0;
	}
	if (s->fd >= 0 && (s->status == 200 || s->status == 206)) {
		if (s->err)
			return 0;
		if (s->len + len > s->max) {
			s->err = -EFBIG;
			return 0;
		}
		size_t off = 0;
		while (off < len) {
			ssize_t w = write(s->fd, p + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				s->err = w < 0 ? -errno : -EIO;
				return 0;
			}
			off += (size_t)w;
		}
		EVP_DigestUpdate(s->md, p, len);
		if (s->progress) /* layers download in parallel processes */
			__atomic_add_fetch(s->progress, len, __ATOMIC_RELAXED);
		s->len += len;
		return len;
	}
	/* A manifest, a token, or the error body of any reply. */
	size_t max = s->fd >= 0 ? ERROR_BODY_MAX : s->max;
	if (s->blen + len > max) {
		if (s->fd >= 0)
			return len; /* an error body: its start is enough */
		s->err = -EFBIG;
		return 0;
	}
	char *b = realloc(s->buf, s->blen + len + 1);
	if (!b) {
		s->err = -ENOMEM;
		return 0;
	}
	s->buf = b;
	memcpy(b + s->blen, p, len);
	s->blen += len;
	b[s->blen] = '\0';
	return len;
}

static void header_value(const char *line, size_t len, char *out, size_t outlen)
{
	const char *v = memchr(line, ':', len);
	if (!v)
		return;
	v++;
	while (v < line + len && (*v == ' ' || *v == '\t'))
		v++;
	size_t n = (size_t)(line + len - v);
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	snprintf(out, outlen, "%.*s", (int)MIN(n, outlen - 1), v);
}

/* The file sink back to its first keep bytes (keep = 0: empty), hashed as they are. */
static void sink_truncate(struct sink *s, size_t keep)
{
	if (s->progress) /* a retry starts over at keep */
		__atomic_sub_fetch(s->progress, s->len - keep, __ATOMIC_RELAXED);
	s->len = keep;
	if (ftruncate(s->fd, (off_t)keep) < 0 || lseek(s->fd, (off_t)keep, SEEK_SET) < 0)
		s->err = -errno; /* on_body refuses to write then */
	if (keep)
		EVP_MD_CTX_copy_ex(s->md, s->base_md);
	else
		EVP_DigestInit_ex(s->md, EVP_sha256(), NULL);
}

/* "Content-Range: bytes FIRST-LAST/TOTAL" of a 206: it must continue the file at base. */
static void check_range(struct sink *s, const char *line, size_t len)
{
	char v[128] = "";
	header_value(line, len, v, sizeof(v));
	unsigned long long first, last, total;
	if (sscanf(v, "bytes %llu-%llu/%llu", &first, &last, &total) != 3 || first != s->base ||
	    s->len != s->base || last + 1 != s->max || total != s->max)
		s->bad_range = true;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) { /* a new response (after a redirect) */
		s->auth[0] = s->type[0] = '\0';
		const char *sp = memchr(p, ' ', len);
		s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		free(s->buf);
		s->buf = NULL;
		s->blen = 0;
		if (s->fd >= 0 && s->status == 200 && s->len) /* the whole blob: start over */
			sink_truncate(s, 0);
		if (s->fd >= 0 && s->status == 206) /* until its Content-Range says where */
			s->bad_range = true;
	} else if (len > 14 && strncasecmp(p, "content-range:", 14) == 0 && s->fd >= 0 &&
		   s->status == 206) {
		s->bad_range = false;
		check_range(s, p, len);
	} else if (len > 17 && strncasecmp(p, "www-authenticate:", 17) == 0) {
		header_value(p, len, s->auth, sizeof(s->auth));
	} else if (len > 13 && strncasecmp(p, "content-type:", 13) == 0) {
		header_value(p, len, s->type, sizeof(s->type));
		char *semi = strchr(s->type, ';');
		if (semi)
			*semi = '\0';
	}
	return len;
}

/* The registry's own words from an error body: "CODE: message" of errors[0] of the distribution
 * API's JSON, printable only. Nothing else of a body is ever repeated: a reference can point
 * corrald at any URL (and a registry can redirect it), so echoing raw bodies would hand a client
 * whatever an internal service answers. */
static void registry_message(const struct sink *s, char *out, size_t len)
{
	out[0] = '\0';
	if (!s->buf)
		return;
	json_t *j = json_loadb(s->buf, s->blen, 0, NULL);
	json_t *e = json_array_get(json_object_get(j, "errors"), 0);
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	if (code || msg)
		snprintf(out, len, "%s%s%s", code ? code : "", code && msg ? ": " : "",
			 msg ? msg : "");
	for (char *p = out; *p; p++)
		if (!isprint((unsigned char)*p))
			*p = ' ';
	json_decref(j);
}

static void sink_reset(struct sink *s)
{
	free(s->buf);
	s->buf = NULL;
	s->blen = 0;
	s->status = 0;
	s->err = 0;
	s->bad_range = false;
	s->auth[0] = s->type[0] = '\0';
	if (s->fd >= 0)
		sink_truncate(s, s->base);
	else
		s->len = 0;
}

static bool is_transport_unreachable(CURLcode c)
{
	return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST ||
	       c == CURLE_COULDNT_RESOLVE_PROXY || c == CURLE_SSL_CONNECT_ERROR ||
	       c == CURLE_PEER_FAILED_VERIFICATION || c == CURLE_UNSUPPORTED_PROTOCOL;
}

/* One GET: the HTTP status (>= 100) or a negative errno for a transport failure. */
static int perform(struct registry *r, const char *url, const char *accept, const char *auth_hdr,
		   bool basic, struct sink *s, struct error *err)
{
	CURL *h = r->h;
	curl_easy_reset(h);
	struct curl_slist *hdrs = NULL;
	char line[4200];
	if (accept) {
		snprintf(line, sizeof(line), "Accept: %s", accept);
		hdrs = curl_slist_append(hdrs, line);
	}
	if (auth_hdr) {
		snprintf(line, sizeof(line), "Authorization: %s", auth_hdr);
		hdrs = curl_slist_append(hdrs, line);
	}
	const char *protos = r->insecure ? "http,https" : "https";
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, protos);
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, protos);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "corral/" CORRAL_VERSION);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
	/* A proxy's "200 Connection established" is no reply of the registry's. */
	curl_easy_setopt(h, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled for a minute: give up */
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
	char range[32];
	if (s->fd >= 0 && s->base) { /* the rest of a partial blob */
		snprintf(range, sizeof(range), "%zu-", s->base);
		curl_easy_setopt(h, CURLOPT_RANGE, range);
	}
	if (basic && r->user) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, r->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, r->pass ? r->pass : "");
	}
	if (r->deadline_mono_ms) {
		int64_t left = r->deadline_mono_ms - time_mono_ms();
		if (left <= 0) {
			curl_slist_free_all(hdrs);
			return error_set(err, ETIMEDOUT, "pull of '%s' timed out", r->ref->name);
		}
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)left);
	}
	sink_reset(s);
	CURLcode c = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	if (c == CURLE_WRITE_ERROR && s->err == -EAGAIN)
		return error_set(err, EAGAIN, "'%s' answered a range request with another range",
				 url);
	if (c == CURLE_WRITE_ERROR && s->err == -EFBIG)
		return error_set(err, EBADMSG, "'%s' sent more than the %zu bytes expected", url,
				 s->max);
	if (c == CURLE_WRITE_ERROR && s->err)
		return error_set_errno(err, -s->err, "write what '%s' sent", url);
	if (c == CURLE_OPERATION_TIMEDOUT)
		return error_set(err, ETIMEDOUT, "timed out: GET %s: %s (the pull's deadline, or a transfer stalled for a minute)",
				 url, curl_easy_strerror(c));
	if (is_transport_unreachable(c))
		return error_set(err, EHOSTUNREACH, "registry %s unreachable: %s", r->ref->registry,
				 curl_easy_strerror(c));
	if (c != CURLE_OK)
		return error_set(err, EIO, "GET %s: %s", url, curl_easy_strerror(c));
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	return (int)status;
}

/* key="value" (or key=value) from a challenge's parameter list. */
static bool challenge_param(const char *ch, const char *key, char *out, size_t len)
{
	size_t kl = strlen(key);
	for (const char *p = ch; (p = strcasestr(p, key)); p += kl) {
		if ((p != ch && p[-1] != ' ' && p[-1] != ',') || p[kl] != '=')
			continue;
		const char *v = p + kl + 1;
		size_t n;
		if (*v == '"') {
			v++;
			const char *e = strchr(v, '"');
			n = e ? (size_t)(e - v) : strlen(v);
		} else {
			n = strcspn(v, ", ");
		}
		if (n >= len)
			return false;
		memcpy(out, v, n);
		out[n] = '\0';
		return true;
	}
	return false;
}

static void url_escape(CURL *h, const char *s, char *out, size_t len)
{
	char *e = curl_easy_escape(h, s, 0);
	snprintf(out, len, "%s", e ? e : "");
	curl_free(e);
}

/* The TCP port url reaches (its scheme's default when it names none; with CURLU_GUESS_SCHEME for
 * a proxy, curl's 1080 for a proxy without one); 0 when it is not a URL. */
static uint16_t url_port(const char *url, unsigned guess)
{
	CURLU *u = curl_url();
	char *port = NULL, *scheme = NULL;
	long n = 0;
	if (u && curl_url_set(u, CURLUPART_URL, url, guess) == CURLUE_OK) {
		if (curl_url_get(u, CURLUPART_PORT, &port, guess ? 0 : CURLU_DEFAULT_PORT) ==
		    CURLUE_OK)
			n = strtol(port, NULL, 10);
		else if (guess && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK)
			n = strcmp(scheme, "https") == 0 ? 443 : 1080;
	}
	curl_free(port);
	curl_free(scheme);
	curl_url_cleanup(u);
	return n > 0 && n < 65536 ? (uint16_t)n : 0;
}

int registry_ports(const struct registry *r, uint16_t *ports, size_t max)
{
	static const char *const proxy_vars[] = {"http_proxy",	"HTTPS_PROXY", "https_proxy",
						 "ALL_PROXY",	"all_proxy"};
	char url[300];
	size_t n = 0;
	uint16_t want[3 + ARRAY_SIZE(proxy_vars) + 1];
	snprintf(url, sizeof(url), "%s://%s/", r->insecure ? "http" : "https", r->ref->host);
	want[n++] = url_port(url, 0);
	want[n++] = 443; /* redirects to blob storage */
	if (r->insecure)
		want[n++] = 80;
	if (r->realm_port)
		want[n++] = r->realm_port;
	for (size_t i = 0; i < ARRAY_SIZE(proxy_vars); i++) {
		const char *v = getenv(proxy_vars[i]);
		if (!v || !*v)
			continue;
		uint16_t p = url_port(v, CURLU_GUESS_SCHEME);
		if (!p)
			return -EINVAL; /* a proxy curl may understand and we do not */
		want[n++] = p;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		bool dup = want[i] == 0;
		for (size_t j = 0; j < k && !dup; j++)
			dup = ports[j] == want[i];
		if (dup)
			continue;
		if (k == max)
			return -E2BIG;
		ports[k++] = want[i];
	}
	return (int)k;
}

/* Answer a Bearer challenge: GET realm?service=&scope= (with Basic credentials when we have
 * them) and keep "Bearer <token>". */
static int fetch_token(struct registry *r, const char *challenge, struct error *err)
{
	char realm[1024], service[256] = "", scope[512] = "", url[2600], es[800], esc[1600];
	if (!challenge_param(challenge, "realm", realm, sizeof(realm)))
		return error_set(err, EPROTO, "registry %s: Bearer challenge without a realm",
				 r->ref->registry);
	if (strncmp(realm, "https://", 8) != 0 &&
	    !(r->insecure && strncmp(realm, "http://", 7) == 0))
		return error_set(err, EPROTO,
				 "registry %s: token realm '%s' is not https (plain http only for --insecure-registry)",
				 r->ref->registry, realm);
	uint16_t rp = url_port(realm, 0);
	if (rp && r->ports_fixed) { /* a port the confinement does not allow: the caller's to add */
		uint16_t ports[IMAGE_CONFINE_PORTS_MAX];
		int n = registry_ports(r, ports, ARRAY_SIZE(ports));
		bool ok = false;
		for (int i = 0; i < n && !ok; i++)
			ok = ports[i] == rp;
		if (!ok) {
			r->want_port = rp;
			return error_set(err, EXDEV,
					 "registry %s: token realm port %u is not among the ports allowed",
					 r->ref->registry, rp);
		}
	}
	if (rp)
		r->realm_port = rp;
	challenge_param(challenge, "service", service, sizeof(service));
	if (!challenge_param(challenge, "scope", scope, sizeof(scope)))
		snprintf(scope, sizeof(scope), "repository:%s:pull", r->ref->repo);
	url_escape(r->h, service, es, sizeof(es));
	url_escape(r->h, scope, esc, sizeof(esc));
	snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", realm, strchr(realm, '?') ? "&" : "?",
		 es, esc);
	struct sink s = {.max = 1 << 20, .fd = -1};
	int st = perform(r, url, "application/json", NULL, true, &s, err);
	if (st < 0) {
		free(s.buf);
		return st;
	}
	if (st != 200) {
		char m[256];
		registry_message(&s, m, sizeof(m));
		free(s.buf);
		return error_set(err, st == 401 || st == 403 ? EACCES : EPROTO,
				 "%sregistry %s: token server answered %d%s%s",
				 st == 401 || st == 403 ? "unauthorized: " : "", r->ref->registry, st,
				 m[0] ? ": " : "", m);
	}
	json_t *j = json_loadb(s.buf ? s.buf : "", s.blen, 0, NULL);
	free(s.buf);
	const char *tok = json_string_value(json_object_get(j, "token"));
	if (!tok)
		tok = json_string_value(json_object_get(j, "access_token"));
	if (!tok || strlen(tok) > 4000) {
		json_decref(j);
		return error_set(err, EPROTO, "registry %s: token server sent no usable token",
				 r->ref->registry);
	}
	free(r->bearer);
	if (asprintf(&r->bearer, "Bearer %s", tok) < 0)
		r->bearer = NULL;
	json_decref(j);
	return r->bearer ? 0 : error_set(err, ENOMEM, "token");
}

/* GET path under /v2/<repo>/, answering one auth challenge. The final status, or -errno. */
static int get(struct registry *r, const char *what, const char *accept, struct sink *s,
	       struct error *err)
{
	char url[1200];
	snprintf(url, sizeof(url), "%s://%s/v2/%s/%s", r->insecure ? "http" : "https", r->ref->host,
		 r->ref->repo, what);
	bool basic = r->basic;
	int st = perform(r, url, accept, basic ? NULL : r->bearer, basic, s, err);
	if (st != 401)
		return st;
	char challenge[sizeof(s->auth)];
	snprintf(challenge, sizeof(challenge), "%s", s->auth);
	if (strncasecmp(challenge, "Bearer ", 7) == 0) {
		int k = fetch_token(r, challenge + 7, err);
		if (k < 0)
			return k;
	} else if (strncasecmp(challenge, "Basic", 5) == 0 && r->user && !basic) {
		basic = r->basic = true;
	} else {
		return st;
	}
	return perform(r, url, accept, basic ? NULL : r->bearer, basic, s, err);
}

static int status_error(struct registry *r, int st, const char *what, const struct sink *s,
			struct error *err)
{
	char m[300];
	registry_message(s, m, sizeof(m));
	const char *sep = m[0] ? ": " : "";
	if (st == 401 || st == 403)
		return error_set(err, EACCES, "unauthorized: registry %s refused %s of %s%s%s%s",
				 r->ref->registry, what, r->ref->repo,
				 r->user ? "" : " (no credentials given)", sep, m);
	if (st == 404)
		return error_set(err, ENOENT, "not found: %s of %s on registry %s%s%s", what,
				 r->ref->repo, r->ref->registry, sep, m);
	return error_set(err, st == 429 || st >= 500 ? EAGAIN : EPROTO,
			 "registry %s answered %d to %s of %s%s%s", r->ref->registry, st, what,
			 r->ref->repo, sep, m);
}

int registry_get_manifest(struct registry *r, const char *reference, char **ret_body,
			  size_t *ret_len, char *ret_type, size_t type_len, struct error *err)
{
	static const char accept[] =
	    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
	    "application/vnd.docker.distribution.manifest.list.v2+json, "
	    "application/vnd.docker.distribution.manifest.v2+json";
	char what[200];
	snprintf(what, sizeof(what), "manifests/%s", reference);
	struct sink s = {.max = REGISTRY_MANIFEST_MAX, .fd = -1};
	int st = -EAGAIN;
	for (int i = 0; i < BLOB_TRIES && (st == -EAGAIN || st == -EIO || st == 429 || st >= 500);
	     i++) {
		if (i)
			usleep(200000u << i);
		st = get(r, what, accept, &s, err);
	}
	if (st < 0) {
		free(s.buf);
		return st;
	}
	if (st != 200) {
		int k = status_error(r, st, "manifest", &s, err);
		free(s.buf);
		return k;
	}
	*ret_body = s.buf ? s.buf : strdup("");
	*ret_len = s.blen;
	snprintf(ret_type, type_len, "%s", s.type);
	return *ret_body ? 0 : error_set(err, ENOMEM, "manifest");
}

/* The partial download at fd (an earlier pull's, kept by the store), hashed into s: its bytes
 * are kept when there are fewer than the blob's. */
static int sink_resume(struct sink *s, struct error *err)
{
	struct stat st;
	if (fstat(s->fd, &st) < 0)
		return error_set_errno(err, errno, "stat the partial blob");
	if (!S_ISREG(st.st_mode))
		return error_set(err, EPROTO, "the partial blob is not a regular file");
	s->len = 0;
	EVP_DigestInit_ex(s->md, EVP_sha256(), NULL);
	if (st.st_size <= 0 || (uint64_t)st.st_size >= s->max)
		return 0; /* nothing to resume (or all of it: hashed and verified as new) */
	char buf[1 << 16];
	while (s->len < (size_t)st.st_size) {
		ssize_t n = pread(s->fd, buf, MIN(sizeof(buf), (size_t)st.st_size - s->len),
				  (off_t)s->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		EVP_DigestUpdate(s->md, buf, (size_t)n);
		s->len += (size_t)n;
	}
	if (s->progress)
		__atomic_add_fetch(s->progress, s->len, __ATOMIC_RELAXED);
	s->ranged = s->len > 0;
	return 0;
}

static bool transient(int st)
{
	return st == -EAGAIN || st == -EIO || st == 429 || st >= 500;
}

int registry_get_blob(struct registry *r, const char *digest, uint64_t size, const char *path,
		      struct error *err)
{
	char what[120];
	snprintf(what, sizeof(what), "blobs/%s", digest);
	/* A file already at path is a partial download of this blob: resumed. */
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	if (fd < 0)
		return error_set_errno(err, errno, "create '%s'", path);
	struct sink s = {.max = size, .fd = fd, .md = EVP_MD_CTX_new(), .base_md = EVP_MD_CTX_new(),
			 .progress = r->o->progress_done};
	int st = -EAGAIN;
	bool keep = false;
	if (!s.md || !s.base_md) {
		st = error_set(err, ENOMEM, "digest context");
		goto out;
	}
	if ((st = sink_resume(&s, err)) < 0)
		goto out;
	st = -EAGAIN;
	/* Each try continues from what the previous ones wrote (Range), or from the start when
	 * the registry answers 200, 416 or a 206 of another range. A resumed blob whose digest
	 * does not match is downloaded again whole, once: the kept bytes may be the bad ones. */
	for (int i = 0, full = 0; i < BLOB_TRIES + 1 && transient(st); i++) {
		if (i && !full)
			usleep(200000u << MIN(i, 3));
		full = 0;
		s.base = s.bad_range ? 0 : s.len;
		if (s.base) {
			EVP_MD_CTX_copy_ex(s.base_md, s.md);
			s.ranged = true;
		}
		st = get(r, what, NULL, &s, err);
		if (st == 416 && s.base) { /* not satisfiable: the whole blob */
			s.bad_range = true;
			st = error_set(err, EAGAIN, "registry %s refused the rest of blob %s (416)",
				       r->ref->registry, digest);
			full = 1;
			continue;
		}
		if ((st == 200 || st == 206) && s.len == size) {
			unsigned char d[32];
			unsigned int n = 0;
			char got[72] = "sha256:";
			EVP_MD_CTX *fin = EVP_MD_CTX_new();
			if (!fin || EVP_MD_CTX_copy_ex(fin, s.md) != 1 ||
			    EVP_DigestFinal_ex(fin, d, &n) != 1) {
				EVP_MD_CTX_free(fin);
				st = error_set(err, ENOMEM, "digest");
				goto out;
			}
			EVP_MD_CTX_free(fin);
			for (unsigned k = 0; k < 32; k++)
				sprintf(got + 7 + 2 * k, "%02x", d[k]);
			if (strcmp(got, digest) == 0)
				break;
			if (s.ranged) {
				s.ranged = false;
				s.bad_range = true; /* next try: all of it, from the start */
				st = error_set(err, EAGAIN,
					       "digest mismatch: blob %s of %s has digest %s, resumed; downloaded again",
					       digest, r->ref->name, got);
				full = 1;
				continue;
			}
			st = error_set(err, EBADMSG,
				       "digest mismatch: blob %s of %s has digest %s; discarded", digest,
				       r->ref->name, got);
			goto out;
		}
		/* A reply cut short (the connection reset) is retried from where it stopped. */
	}
	if (st < 0) {
		keep = transient(st) || st == -ETIMEDOUT || st == -EHOSTUNREACH;
		goto out;
	}
	if (st != 200 && st != 206) {
		keep = transient(st);
		st = status_error(r, st, "blob", &s, err);
		goto out;
	}
	if (s.len != size) {
		st = error_set(err, EBADMSG,
			       "blob %s of %s: got %zu bytes, the manifest says %llu; discarded",
			       digest, r->ref->name, s.len, (unsigned long long)size);
		goto out;
	}
	if (fsync(fd) < 0) {
		st = error_set_errno(err, errno, "fsync '%s'", path);
		goto out;
	}
	st = 0;
out:
	EVP_MD_CTX_free(s.md);
	EVP_MD_CTX_free(s.base_md);
	free(s.buf);
	close(fd);
	/* A download cut short keeps its bytes for the next pull (the store moves them to
	 * partial/); anything else wrong with it is discarded. */
	if (st < 0 && !(keep && s.len > 0 && s.len < size))
		unlink(path);
	return st;
}

#define AUTH_FILE_MAX (1 << 20)

/* The text of the auth file in *ret, which the caller scrubs and frees (read without stdio, whose
 * buffer would be freed with every registry's credentials in it). */
static int auth_file_read(const char *file, char **ret, size_t *ret_len, struct error *err)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int r = error_set_errno(err, errno, "--registry-auth '%s'", file);
		if (fd >= 0)
			close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > AUTH_FILE_MAX) {
		close(fd);
		return error_set(err, EINVAL,
				 "--registry-auth '%s': not a regular file of at most %d bytes", file,
				 AUTH_FILE_MAX);
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t len = 0;
	ssize_t n = 1;
	while (buf && len < (size_t)st.st_size &&
	       ((n = read(fd, buf + len, (size_t)st.st_size - len)) > 0 || (n < 0 && errno == EINTR)))
		len += n > 0 ? (size_t)n : 0;
	int e = !buf ? ENOMEM : errno;
	close(fd);
	if (!buf || n < 0) {
		if (buf)
			explicit_bzero(buf, len);
		free(buf);
		return error_set_errno(err, e, "--registry-auth '%s'", file);
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* user:pass for the registry from a ~/.docker/config.json: "auths" keyed by host, "https://host",
 * or for Docker Hub "https://index.docker.io/v1/"; "auth" is base64("user:pass"). The file holds
 * other registries' credentials too: its text is scrubbed here, and the pull worker's jansson
 * frees scrub what parsing it allocated (images.c), so none of it is left in the memory of the
 * children it forks for this registry. */
static int auth_file_lookup(struct registry *r, const char *file, struct error *err)
{
	json_error_t je;
	size_t len = 0;
	char *text = NULL;
	int k = auth_file_read(file, &text, &len, err);
	if (k < 0)
		return k;
	json_t *j = json_loadb(text, len, 0, &je);
	explicit_bzero(text, len);
	free(text);
	if (!j)
		return error_set(err, EINVAL, "--registry-auth '%s': %s (line %d)", file, je.text,
				 je.line);
	json_t *auths = json_object_get(j, "auths");
	const char *reg = r->ref->registry;
	char k2[300], k3[300];
	snprintf(k2, sizeof(k2), "https://%s", reg);
	snprintf(k3, sizeof(k3), "http://%s", reg);
	const char *keys[] = {reg, k2, k3, "https://index.docker.io/v1/", "index.docker.io"};
	size_t nk = strcmp(reg, "docker.io") == 0 ? 5 : 3;
	json_t *e = NULL;
	for (size_t i = 0; i < nk && !e; i++)
		e = json_object_get(auths, keys[i]);
	const char *b64 = json_string_value(json_object_get(e, "auth"));
	const char *u = json_string_value(json_object_get(e, "username"));
	const char *p = json_string_value(json_object_get(e, "password"));
	if (b64 && strlen(b64) < CRED_MAX) {
		unsigned char dec[CRED_MAX];
		int n = EVP_DecodeBlock(dec, (const unsigned char *)b64, (int)strlen(b64));
		while (n > 0 && dec[n - 1] == '\0') /* padding */
			n--;
		if (n > 0) {
			dec[n] = '\0';
			char *colon = strchr((char *)dec, ':');
			if (colon) {
				*colon = '\0';
				r->user = strdup((char *)dec);
				r->pass = strdup(colon + 1);
			}
		}
		explicit_bzero(dec, sizeof(dec));
	} else if (u) {
		r->user = strdup(u);
		r->pass = strdup(p ? p : "");
	}
	json_decref(j);
	return 0;
}

int registry_open(const struct image_pull_opts *o, const struct image_ref *ref,
		  struct registry **ret, struct error *err)
{
	static bool inited;
	if (!inited) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
			return error_set(err, EIO, "curl_global_init failed");
		inited = true;
	}
	struct registry *r = calloc(1, sizeof(*r));
	if (!r || !(r->h = curl_easy_init())) {
		free(r);
		return error_set(err, ENOMEM, "registry client");
	}
	r->ref = ref;
	r->o = o;
	for (const char *const *h = o->insecure; h && *h; h++)
		if (strcmp(*h, ref->registry) == 0)
			r->insecure = true;
	if (o->username) {
		r->user = strdup(o->username);
		r->pass = strdup(o->password ? o->password : "");
	} else if (o->auth_file) {
		int k = auth_file_lookup(r, o->auth_file, err);
		if (k < 0) {
			registry_close(r);
			return k;
		}
	}
	if (o->timeout_s > 0)
		r->deadline_mono_ms = time_mono_ms() + o->timeout_s * 1000;
	*ret = r;
	return 0;
}

int registry_after_fork(struct registry *r)
{
	r->h = curl_easy_init(); /* the old one: left alone, its sockets are the parent's */
	return r->h ? 0 : -ENOMEM;
}

void registry_fix_ports(struct registry *r)
{
	r->ports_fixed = true;
}

void registry_allow_port(struct registry *r, uint16_t port)
{
	r->realm_port = port;
}

void registry_auth_get(const struct registry *r, struct registry_auth *a)
{
	memset(a, 0, sizeof(*a));
	if (r->bearer && strlen(r->bearer) < sizeof(a->bearer))
		memcpy(a->bearer, r->bearer, strlen(r->bearer));
	a->basic = r->basic;
	a->realm_port = r->realm_port;
	a->want_port = r->want_port;
}

int registry_auth_set(struct registry *r, const struct registry_auth *a)
{
	/* From a confined child: "Bearer " and a token of visible ASCII (a header value, so no CR,
	 * LF or space), or nothing. */
	size_t n = strnlen(a->bearer, sizeof(a->bearer));
	if (n == sizeof(a->bearer) || (n && (n <= 7 || strncmp(a->bearer, "Bearer ", 7) != 0)))
		return -EPROTO;
	for (size_t i = 7; i < n; i++)
		if (a->bearer[i] < 0x21 || a->bearer[i] > 0x7e)
			return -EPROTO;
	/* No port but those it was let reach: what the layer children will be let reach. */
	uint16_t ports[IMAGE_CONFINE_PORTS_MAX];
	int np = registry_ports(r, ports, ARRAY_SIZE(ports));
	bool port_ok = !a->realm_port || np < 0;
	for (int i = 0; i < np && !port_ok; i++)
		port_ok = ports[i] == a->realm_port;
	if (!port_ok)
		return -EPROTO;
	char *b = n ? strndup(a->bearer, n) : NULL;
	if (n && !b)
		return -ENOMEM;
	free(r->bearer);
	r->bearer = b;
	r->basic = a->basic && r->user; /* Basic means our credentials: only with some */
	r->realm_port = a->realm_port;
	return 0;
}

void registry_close(struct registry *r)
{
	if (!r)
		return;
	curl_easy_cleanup(r->h);
	free(r->user);
	free(r->pass);
	free(r->bearer);
	free(r);
}
