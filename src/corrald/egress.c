/*
 * corrald's side of the egress policy (egress.h): records, replies, the resolver's hooks and the
 * reference sidecar's policy API on port 18080.
 *
 * The policy API answers as the reference's sidecar does (components/egress/policy_server.go):
 * JSON bodies {"status", "mode", "enforcementMode", "reason"?, "policy"?} ending in a newline,
 * errors as plain text (Go's http.Error: "text/plain; charset=utf-8", "nosniff", a newline).
 * Every /policy call needs the sandbox's OPENSANDBOX-EGRESS-AUTH token (from its endpoint reply for
 * port 18080), on top of the proxy route's own credential. A change is durable (the record) and in
 * force (nftables, learned addresses flushed) before its 200.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "corrald/corrald.h"
#include "corrald/egress.h"
#include "corrald/token.h"
#include "shared/httputil.h"
#include "shared/log.h"
#include "shared/timeutil.h"

#define POLICY_BODY_MAX (1024 * 1024)

/* --- records and replies -------------------------------------------------------------------- */

void sb_egress_free(struct sb_egress *e)
{
	if (!e)
		return;
	egress_policy_clear(&e->policy);
	free(e);
}

int egress_from_create(enum egress_action server_default, json_t *network_policy,
		       struct sb_egress **ret, struct error *err)
{
	struct sb_egress *e = calloc(1, sizeof(*e));
	if (!e)
		return error_set(err, ENOMEM, "out of memory");
	if (!network_policy || json_is_null(network_policy)) {
		egress_policy_init(&e->policy, server_default);
	} else {
		int r = egress_policy_from_json(network_policy, &e->policy, err);
		if (r < 0) {
			free(e);
			return r;
		}
		e->policy_given = true;
	}
	*ret = e;
	return 0;
}

json_t *egress_to_record(const struct sb_egress *e)
{
	json_t *p = egress_policy_to_json(&e->policy);
	if (!p)
		return NULL;
	return json_pack("{s:o, s:b}", "policy", p, "policyGiven", e->policy_given);
}

int egress_from_record(json_t *j, struct sb_egress **ret, struct error *err)
{
	*ret = NULL;
	if (!j || json_is_null(j))
		return 0;
	struct sb_egress *e = calloc(1, sizeof(*e));
	if (!e)
		return error_set(err, ENOMEM, "out of memory");
	if (!json_is_object(j)) {
		free(e);
		return error_set(err, EINVAL, "egress: not an object");
	}
	int r = egress_policy_from_json(json_object_get(j, "policy"), &e->policy, err);
	if (r < 0) {
		free(e);
		return error_prefix(err, "egress policy");
	}
	e->policy_given = json_is_true(json_object_get(j, "policyGiven"));
	*ret = e;
	return 0;
}

void egress_to_api(const struct sb_egress *e, json_t *o)
{
	if (!e)
		return;
	json_object_set_new(o, "networkPolicy", egress_policy_to_json(&e->policy));
}

void egress_stats_add(const struct sandbox *sb, json_t *network)
{
	if (!sb->egress || !json_is_object(network))
		return;
	json_object_set_new(network, "dnsAllowed", json_integer((json_int_t)sb->egress->dns_allowed));
	json_object_set_new(network, "dnsDenied", json_integer((json_int_t)sb->egress->dns_denied));
}

void egress_token_for(const struct corrald *d, const char *id, char out[65])
{
	char msg[UUID_STR_LEN + 32];
	int n = snprintf(msg, sizeof(msg), "corral-egress:%s", id);
	uint8_t mac[32];
	hmac_sha256(d->proxy_secret, sizeof(d->proxy_secret), msg, (size_t)n, mac);
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

static bool egress_token_ok(const struct corrald *d, const char *id, const char *given)
{
	char want[65];
	egress_token_for(d, id, want);
	if (!given || strlen(given) != 64)
		return false;
	unsigned char diff = 0;
	for (int i = 0; i < 64; i++)
		diff |= (unsigned char)(want[i] ^ given[i]);
	return diff == 0;
}

int egress_apply(struct corrald *d, struct sandbox *sb, struct error *err)
{
	if (!d->net || !sb->egress || !sb->net.on)
		return 0;
	/* the record's network.defaultAction is the policy's (what net_sandbox_add() re-adopts) */
	sb->net.default_action = sb->egress->policy.default_action;
	/* Not added yet (waiting for capacity): the add puts sb->net.policy, this policy, in. */
	if (!sb->net.attached)
		return 0;
	sb->egress->n_learned = 0; /* net_policy_apply() flushes the learned set, even failing */
	return net_policy_apply(d->net, sb->id, &sb->egress->policy, sb->net.mode, err);
}

/* --- the resolver's hooks ------------------------------------------------------------------- */

static struct sandbox *sandbox_at(struct corrald *d, int family, const void *addr)
{
	char id[UUID_STR_LEN];
	if (!d->net || net_sandbox_by_addr(d->net, family, addr, id) < 0)
		return NULL;
	struct sandbox *sb = registry_find(d, id);
	return sb && sb->egress ? sb : NULL;
}

static int hook_who(void *arg, int family, const void *addr, struct resolver_client *c)
{
	struct sandbox *sb = sandbox_at(arg, family, addr);
	if (!sb)
		return -ENOENT;
	snprintf(c->id, sizeof(c->id), "%s", sb->id);
	c->cookie = sb; /* judged() and learn() run before the loop goes on: sb is still there */
	c->policy = &sb->egress->policy;
	c->learn = sb->net.mode == NET_MODE_DNS_NFT;
	return 0;
}

static void hook_judged(void *arg, const struct resolver_client *c, const char *name,
			uint16_t qtype, bool allowed)
{
	struct sandbox *sb = c->cookie;
	if (sb && sb->egress) {
		if (allowed)
			sb->egress->dns_allowed++;
		else
			sb->egress->dns_denied++;
	}
	if (!allowed)
		log_debug("sandbox %s: DNS query for %s (type %u) denied by its egress policy", c->id,
			  name, qtype);
}

/*
 * dns+nft: admit an allowed answer's address. Its nftables element lives a little longer than the
 * answer's TTL (an eighth more and 2 s: a client may use the address for the whole TTL, and may
 * connect a moment after its cache expired), and an answer whose address is already admitted
 * for at least its TTL costs nothing: one nftables transaction per address and slack, not per
 * query.
 */
static int hook_learn(void *arg, const struct resolver_client *c, int family, const void *addr,
		      uint32_t ttl_s, struct error *err)
{
	struct corrald *d = arg;
	struct sandbox *sb = c->cookie;
	if (family != AF_INET || !sb || !sb->egress)
		return net_learn(d->net, c->id, family, addr, ttl_s, err);
	struct sb_egress *e = sb->egress;
	uint64_t eff = ttl_s < NET_LEARN_TTL_FLOOR_S ? NET_LEARN_TTL_FLOOR_S : ttl_s;
	if (eff > NET_LEARN_TTL_MAX_S)
		eff = NET_LEARN_TTL_MAX_S;
	uint64_t timeout = eff + eff / 8 + 2;
	if (timeout > NET_LEARN_TTL_MAX_S)
		timeout = NET_LEARN_TTL_MAX_S;
	int64_t now = time_mono_ms();
	struct in_addr a;
	memcpy(&a, addr, sizeof(a));
	unsigned slot = 0;
	for (unsigned i = 0; i < e->n_learned; i++) {
		if (e->learned[i].addr.s_addr == a.s_addr) {
			if (e->learned[i].expires_ms - now >= (int64_t)(eff + 1) * 1000)
				return 0;
			slot = i;
			goto learn;
		}
		if (e->learned[i].expires_ms < e->learned[slot].expires_ms)
			slot = i; /* the soonest to expire gives its place */
	}
	if (e->n_learned < EGRESS_LEARNED_CACHE)
		slot = e->n_learned++;
learn:;
	int r = net_learn(d->net, c->id, family, addr, (uint32_t)timeout, err);
	if (r < 0) {
		e->learned[slot].expires_ms = 0;
		return r;
	}
	e->learned[slot].addr = a;
	e->learned[slot].expires_ms = now + (int64_t)timeout * 1000;
	return 0;
}

/* At most one line a second (an upstream that is down would otherwise log every query). */
static void hook_warn(void *arg, const char *msg)
{
	(void)arg;
	static int64_t last_ms;
	static unsigned suppressed;
	int64_t now = time_mono_ms();
	if (last_ms && now - last_ms < 1000) {
		suppressed++;
		return;
	}
	if (suppressed)
		log_warn("DNS: %s (%u more not logged since the last line)", msg, suppressed);
	else
		log_warn("DNS: %s", msg);
	last_ms = now;
	suppressed = 0;
}

/* --- the host's drops, at debug ------------------------------------------------------------ */

static void log_drop(const struct net_drop *p, void *arg)
{
	(void)arg;
	char to[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &p->dst, to, sizeof(to));
	const char *proto = p->proto == IPPROTO_TCP ? "TCP" : p->proto == IPPROTO_UDP ? "UDP"
			    : p->proto == IPPROTO_ICMP ? "ICMP" : "IP";
	if (p->dport)
		log_debug("sandbox %s: %s packet to %s:%u dropped by the host (its egress policy, or always blocked)",
			  p->sandbox_id, proto, to, p->dport);
	else
		log_debug("sandbox %s: %s packet to %s dropped by the host (its egress policy, or always blocked)",
			  p->sandbox_id, proto, to);
}

static void on_droplog(evutil_socket_t fd, short what, void *arg)
{
	struct corrald *d = arg;
	(void)what;
	int r = net_droplog_read(d->net, fd, log_drop, d);
	if (r < 0)
		log_debug("reading the host's dropped packets: %s", strerror(-r));
}

/* With --log-level debug: one line per packet the host drops (net.h: rate-limited there). */
static void droplog_start(struct corrald *d)
{
	if (!d->net || !d->net->log_drops)
		return;
	struct error err = {0};
	int fd = net_droplog_open(d->net, &err);
	if (fd < 0) {
		log_warn("network: dropped packets will not be logged: %s", err.msg);
		return;
	}
	d->egress.droplog_ev = event_new(d->base, fd, EV_READ | EV_PERSIST, on_droplog, d);
	if (!d->egress.droplog_ev || event_add(d->egress.droplog_ev, NULL) < 0) {
		log_warn("network: dropped packets will not be logged: out of memory");
		if (d->egress.droplog_ev)
			event_free(d->egress.droplog_ev);
		d->egress.droplog_ev = NULL;
		close(fd);
		return;
	}
	d->egress.droplog_fd = fd;
	log_debug("network: the host's dropped packets are logged (NFLOG group %u, at most %d a second)",
		  net_droplog_group(d->net), NET_DROPLOG_RATE);
}

static const struct resolver_ops hooks = {
	.who = hook_who,
	.judged = hook_judged,
	.learn = hook_learn,
	.warn = hook_warn,
};

int egress_start(struct corrald *d, struct error *err)
{
	struct resolver_config cfg = {0};
	struct sockaddr_in *l = (struct sockaddr_in *)&cfg.listen;
	l->sin_family = AF_INET;
	l->sin_port = htons(53);
	l->sin_addr = d->net->gateway;
	for (size_t i = 0; i < d->n_dns_upstream && i < RESOLVER_UPSTREAM_MAX; i++) {
		int r = resolver_parse_addr(d->dns_upstream[i], 53, &cfg.upstream[i], err);
		if (r < 0)
			return error_prefix(err, "--dns-upstream");
		cfg.n_upstream++;
	}
	if (cfg.n_upstream == 0) {
		int n = resolver_upstreams_from_resolv_conf("/etc/resolv.conf", cfg.upstream,
							    RESOLVER_UPSTREAM_MAX, err);
		if (n < 0)
			return error_prefix(err, "no --dns-upstream given, and the host's");
		if (n == 0)
			return error_set(err, ENOENT,
					 "no --dns-upstream given, and /etc/resolv.conf names no nameserver");
		cfg.n_upstream = (size_t)n;
	}
	int r = resolver_new(d->base, &cfg, &hooks, d, &d->egress.resolver, err);
	if (r >= 0)
		droplog_start(d);
	return r;
}

void egress_stop(struct corrald *d)
{
	resolver_free(d->egress.resolver);
	d->egress.resolver = NULL;
	if (d->egress.droplog_ev) { /* the fd is set with it (droplog_start()) */
		event_free(d->egress.droplog_ev);
		close(d->egress.droplog_fd);
	}
	d->egress.droplog_ev = NULL;
}

/* --- the policy API ------------------------------------------------------------------------- */

/* Go's http.Error: the message and a newline as text/plain, nosniff. */
static void send_text(struct evhttp_request *req, int status, const char *fmt, ...) _printf_(3, 4);
static void send_text(struct evhttp_request *req, int status, const char *fmt, ...)
{
	struct evbuffer *b = evbuffer_new();
	va_list ap;
	va_start(ap, fmt);
	evbuffer_add_vprintf(b, fmt, ap);
	va_end(ap);
	evbuffer_add(b, "\n", 1);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_send_reply(req, status, http_reason(status), b);
	evbuffer_free(b);
}

/* Go's json.Encoder: compact JSON and a newline. */
static void send_json_nl(struct evhttp_request *req, int status, json_t *o)
{
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!s) {
		send_text(req, 500, "internal error: out of memory");
		return;
	}
	struct evbuffer *b = evbuffer_new();
	evbuffer_add_printf(b, "%s\n", s);
	free(s);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
	evhttp_send_reply(req, status, http_reason(status), b);
	evbuffer_free(b);
}

static json_t *status_reply(const struct sandbox *sb, const char *reason)
{
	const struct sb_egress *e = sb->egress;
	json_t *o = json_pack("{s:s, s:s, s:s}", "status", "ok", "mode",
			      egress_policy_mode(&e->policy), "enforcementMode",
			      net_mode_name(sb->net.mode));
	if (o && reason)
		json_object_set_new(o, "reason", json_string(reason));
	return o;
}

/*
 * Make next sb's policy: in nftables first (which also flushes the learned addresses, so a
 * deleted rule's addresses go at once), then on disk (a 2xx means it is stored). In that order a
 * corrald killed in between starts again with the old policy on disk, whose rules the start puts
 * back (net_gc()) over a learned set the new one has already emptied. The other way round the
 * record had the new policy while the learned set still held what the old one admitted, for up to
 * a day, and nothing at the start could tell. Either failing leaves the old policy in force and on
 * disk, and answers 500 (507 for a full disk).
 */
static void commit(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		   struct egress_policy *next, const char *reason, bool reset)
{
	struct sb_egress *e = sb->egress;
	struct egress_policy old = e->policy;
	bool old_given = e->policy_given;
	e->policy = *next;
	e->policy_given = true;
	struct error err = {0};
	int r = egress_apply(d, sb, &err);
	if (r < 0) {
		log_error("sandbox %s: egress policy: %s", sb->id, err.msg);
		send_text(req, 500, "failed to apply nftables policy: %s", err.msg);
		goto restore;
	}
	r = sandbox_save(sb);
	if (r < 0) {
		send_text(req, sandbox_save_status(r), "failed to persist policy: %s", strerror(-r));
		goto restore;
	}
	egress_policy_clear(&old);
	memset(next, 0, sizeof(*next));
	log_info("sandbox %s: egress policy %s: %s, %zu rules, default %s", sb->id,
		 reset ? "reset" : "updated", egress_policy_mode(&e->policy), e->policy.n,
		 egress_action_name(e->policy.default_action));
	if (reset)
		send_json_nl(req, 200,
			     json_pack("{s:s, s:s, s:s}", "status", "ok", "mode", "deny_all", "reason",
				       "policy reset to default deny-all"));
	else
		send_json_nl(req, 200, status_reply(sb, reason));
	return;
restore:
	e->policy = old;
	e->policy_given = old_given;
	struct error err2 = {0};
	if (egress_apply(d, sb, &err2) < 0)
		log_error("sandbox %s: restoring its egress policy: %s", sb->id, err2.msg);
	egress_policy_clear(next);
}

static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!strchr(" \t\r\n\f\v", s[i]))
			return false;
	return true;
}

/* The body as JSON of the given kind (array), with the reference's messages. */
static json_t *body_array(struct evhttp_request *req, const char *what, const char *s, size_t len)
{
	json_error_t je;
	if (json_depth_exceeds(s, len, 32)) {
		send_text(req, 400, "invalid %s: nested too deeply", what);
		return NULL;
	}
	json_t *j = json_loadb(s, len, JSON_DECODE_ANY, &je);
	if (!j) {
		send_text(req, 400, "invalid %s: %s", what, je.text);
		return NULL;
	}
	if (!json_is_array(j)) {
		send_text(req, 400, "invalid %s: expected a JSON array", what);
		json_decref(j);
		return NULL;
	}
	if (json_array_size(j) == 0) {
		send_text(req, 400, "invalid %s: empty array", what);
		json_decref(j);
		return NULL;
	}
	return j;
}

static void policy_replace(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
			   const char *s, size_t len)
{
	struct egress_policy next;
	struct error err = {0};
	if (blank(s, len)) {
		egress_policy_init(&next, EGRESS_DENY);
		commit(d, req, sb, &next, NULL, true);
		return;
	}
	if (json_depth_exceeds(s, len, 32) || egress_policy_parse(s, len, &next, &err) < 0 ||
	    egress_rules_refuse_ipv6(next.rules, next.n, &err) < 0) {
		send_text(req, 400, "invalid policy: %s", err.msg[0] ? err.msg : "nested too deeply");
		egress_policy_clear(&next);
		return;
	}
	commit(d, req, sb, &next, NULL, false);
}

static void policy_patch(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
			 const char *s, size_t len)
{
	if (blank(s, len)) {
		send_text(req, 400, "empty body");
		return;
	}
	json_t *j = body_array(req, "patch rules", s, len);
	if (!j)
		return;
	struct egress_rule *rules = NULL;
	size_t n = 0;
	struct error err = {0};
	int r = egress_rules_from_json(j, &rules, &n, &err);
	json_decref(j);
	if (r == 0 && (r = egress_rules_refuse_ipv6(rules, n, &err)) < 0)
		free(rules);
	if (r < 0) {
		send_text(req, 400, "invalid patch rules: %s", err.msg);
		return;
	}
	struct egress_policy next = {0};
	if (egress_policy_copy(&next, &sb->egress->policy) < 0 ||
	    egress_policy_patch(&next, rules, n, &err) < 0) {
		free(rules);
		egress_policy_clear(&next);
		send_text(req, 400, "invalid merged policy: %s", err.msg[0] ? err.msg : "out of memory");
		return;
	}
	free(rules);
	commit(d, req, sb, &next, NULL, false);
}

static void policy_delete(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
			  const char *s, size_t len)
{
	if (blank(s, len)) {
		send_text(req, 400, "empty body");
		return;
	}
	json_t *j = body_array(req, "delete targets", s, len);
	if (!j)
		return;
	size_t n = json_array_size(j);
	/* No policy has more rules than that: a longer list can only cost corrald's loop (each
	 * target is compared with each rule; 1 MiB of "a" is 262,000 targets, seconds of it). */
	if (n > EGRESS_RULES_MAX) {
		send_text(req, 400, "invalid delete targets: %zu targets: at most %d are allowed", n,
			  EGRESS_RULES_MAX);
		json_decref(j);
		return;
	}
	const char **targets = calloc(n, sizeof(*targets));
	if (!targets) {
		json_decref(j);
		send_text(req, 500, "internal error: out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		targets[i] = json_string_value(json_array_get(j, i));
		if (!targets[i]) {
			send_text(req, 400, "invalid delete targets: element %zu is not a string", i);
			free(targets);
			json_decref(j);
			return;
		}
	}
	struct egress_policy next = {0};
	ssize_t removed = -ENOMEM;
	if (egress_policy_copy(&next, &sb->egress->policy) == 0)
		removed = egress_policy_delete(&next, targets, n);
	free(targets);
	json_decref(j);
	if (removed < 0) {
		egress_policy_clear(&next);
		send_text(req, 500, "internal error: out of memory");
		return;
	}
	if (removed == 0) {
		egress_policy_clear(&next);
		send_json_nl(req, 200, status_reply(sb, "no matching targets found"));
		return;
	}
	commit(d, req, sb, &next, NULL, false);
}

void egress_api(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		const char *rest)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	/* rest: "/policy", "/healthz", with or without a trailing slash; the query is ignored. */
	while (*rest == '/' && rest[1] == '/')
		rest++;
	size_t plen = strcspn(rest, "?");
	bool healthz = plen == 8 && strncmp(rest, "/healthz", 8) == 0;
	bool policy = plen == 7 && strncmp(rest, "/policy", 7) == 0;
	if (healthz) {
		send_text(req, 200, "ok");
		return;
	}
	if (!policy) {
		send_text(req, 404, "404 page not found");
		return;
	}
	const char *tok = evhttp_find_header(evhttp_request_get_input_headers(req),
					     EGRESS_TOKEN_HEADER);
	if (!egress_token_ok(d, sb->id, tok)) {
		send_text(req, 401, "unauthorized");
		return;
	}
	if (!sb->egress) {
		send_text(req, 404, "sandbox %s has no network, so no egress policy", sb->id);
		return;
	}
	if (m == EVHTTP_REQ_GET) {
		json_t *o = status_reply(sb, NULL);
		json_t *p = egress_policy_to_json(&sb->egress->policy);
		if (o && p)
			json_object_set_new(o, "policy", p);
		else
			json_decref(p);
		send_json_nl(req, 200, o);
		return;
	}
	if (m != EVHTTP_REQ_POST && m != EVHTTP_REQ_PUT && m != EVHTTP_REQ_PATCH &&
	    m != EVHTTP_REQ_DELETE) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
				  "GET, POST, PUT, PATCH, DELETE");
		send_text(req, 405, "method not allowed");
		return;
	}
	size_t len = 0;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	if (in && evbuffer_get_length(in) > POLICY_BODY_MAX) {
		send_text(req, 413, "failed to read body: larger than %d bytes", POLICY_BODY_MAX);
		return;
	}
	_cleanup_free_ char *s = http_body_string(req, &len);
	if (!s) {
		send_text(req, 500, "internal error: out of memory");
		return;
	}
	if (m == EVHTTP_REQ_PATCH)
		policy_patch(d, req, sb, s, len);
	else if (m == EVHTTP_REQ_DELETE)
		policy_delete(d, req, sb, s, len);
	else
		policy_replace(d, req, sb, s, len);
}
