/*
 * The driver of tests/integration/test_client_faults.py: libcorral against a real corrald, mostly
 * through tests/integration/faultproxy.py. Each mode prints one JSON line of counts that the
 * Python test asserts on:
 *
 *   exactly-once PROXY DIRECT SANDBOXES THREADS COMMANDS
 *       commands through the faulty proxy; every command appends its id to a file inside its
 *       sandbox; afterwards (directly, no faults) each id must be there exactly once, and each
 *       command's result and callbacks must hold its output exactly once
 *   idle PROXY COMMANDS
 *       one sandbox, commands separated by idle gaps straddling the server's idle timeout
 *   create PROXY DIRECT N
 *       creates through the faulty proxy; each returned sandbox is pinged at once, directly
 *   concurrency DIRECT THREADS
 *       THREADS rollouts at once from one client: create, foreground and background command,
 *       release
 */
#include <corral/corral.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_CODES 32

static atomic_long n_ok, n_fail, n_resubmits, n_dup, n_missing, n_bad_output, n_unready;
static atomic_long codes[MAX_CODES];

static void count_error(const corral_error *e)
{
	if ((unsigned)e->code < MAX_CODES)
		atomic_fetch_add(&codes[e->code], 1);
	fprintf(stderr, "client-faults: %s: %s\n", corral_error_code_name(e->code), e->message);
}

static void print_codes(void)
{
	printf("\"errors\":{");
	bool first = true;
	for (int i = 0; i < MAX_CODES; i++) {
		if (!codes[i])
			continue;
		printf("%s\"%s\":%ld", first ? "" : ",", corral_error_code_name((corral_error_code)i),
		       atomic_load(&codes[i]));
		first = false;
	}
	printf("}");
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

static void log_stderr(void *ud, int level, const char *msg)
{
	fprintf(stderr, "libcorral[%d]: %s\n", level, msg);
}

static corral_client *client_for(const char *server, bool faulty)
{
	corral_options o;
	corral_options_init(&o);
	if (getenv("CLIENT_FAULTS_LOG"))
		o.log = log_stderr;
	o.server = server;
	o.label_prefix = "corral/";
	o.workload = "client-faults";
	if (faulty) {
		/* Faults stall for 6 s: give up on a silent stream or call well before that. */
		o.stream_stall_s = 4;
		o.request_timeout_s = 5;
		o.status_poll_timeout_s = 2;
		o.operation_retries = 8;
		o.operation_retry_delay_s = 0.02;
		o.operation_retry_max_delay_s = 0.2;
		o.create_retry_delay_s = 0.05;
		o.create_retry_max_delay_s = 0.5;
		o.create_timeout_s = 120;
	}
	o.reaper_threads = 8;
	corral_client *c;
	corral_error e;
	if (corral_client_new(&o, &c, &e) < 0) {
		fprintf(stderr, "client: %s\n", e.message);
		exit(2);
	}
	return c;
}

static corral_sandbox *create_or_die(corral_client *c)
{
	corral_sandbox_spec s;
	corral_sandbox_spec_init(&s);
	s.memory_mib = 256;
	s.cpu_request = 0.01; /* small requests: admission packs them on a 2-core host */
	s.memory_request_mib = 16;
	s.ttl_s = 900;
	corral_sandbox *sb;
	corral_error e;
	if (corral_sandbox_create(c, &s, &sb, &e) < 0) {
		fprintf(stderr, "create: %s: %s\n", corral_error_code_name(e.code), e.message);
		exit(2);
	}
	return sb;
}

/* ---- exactly-once ---- */

struct lines {
	char want[64];
	int hits, others;
};

static void on_line(void *ud, const char *line, size_t len)
{
	struct lines *l = ud;
	if (len == strlen(l->want) && memcmp(line, l->want, len) == 0)
		l->hits++;
	else
		l->others++;
}

struct eo_arg {
	corral_client *faulty;
	corral_sandbox **sbs;
	int n_sb, index, commands;
	char (*ids)[CORRAL_EXEC_ID_LEN];
};

static int occurrences(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; hay && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void *eo_thread(void *p)
{
	struct eo_arg *a = p;
	corral_sandbox *direct_sb = a->sbs[a->index % a->n_sb];
	corral_sandbox *sb;
	corral_error e;
	if (corral_sandbox_open(a->faulty, corral_sandbox_id(direct_sb), &sb, &e) < 0) {
		count_error(&e);
		atomic_fetch_add(&n_fail, a->commands);
		return NULL;
	}
	for (int i = 0; i < a->commands; i++) {
		char *id = a->ids[a->index * a->commands + i];
		corral_exec_id_new(id);
		char cmd[256];
		/* CLIENT_FAULTS_BG_SLEEP: background commands take that long, so their completion
		 * is waited for (long-poll, or polling against a server without it). */
		const char *bg_sleep = getenv("CLIENT_FAULTS_BG_SLEEP");
		snprintf(cmd, sizeof(cmd),
			 "%s%s%secho %s >> /tmp/corral-execs; echo out-%s; echo err-%s >&2",
			 i % 3 == 2 && bg_sleep ? "sleep " : "", i % 3 == 2 && bg_sleep ? bg_sleep : "",
			 i % 3 == 2 && bg_sleep ? "; " : "", id, id, id);
		struct lines out = {0};
		snprintf(out.want, sizeof(out.want), "out-%s", id);
		corral_exec_opts o;
		corral_exec_opts_init(&o);
		o.exec_id = id;
		o.timeout_s = 60;
		o.background = i % 3 == 2;
		o.on_stdout = on_line;
		o.userdata = &out;
		corral_exec_result r;
		if (corral_exec(sb, cmd, &o, &r, &e) < 0) {
			count_error(&e);
			atomic_fetch_add(&n_fail, 1);
		} else {
			atomic_fetch_add(&n_ok, 1);
			char want_err[64];
			snprintf(want_err, sizeof(want_err), "err-%s", id);
			bool good = r.exit_code == 0 && occurrences(r.out, out.want) == 1;
			if (o.background)
				good = good && occurrences(r.out, want_err) == 1;
			else
				good = good && out.hits == 1 && out.others == 0 &&
				       r.err && strcmp(r.err, want_err) == 0;
			if (!good) {
				fprintf(stderr, "bad output for %s (bg %d): exit %d out '%s' err '%s' hits %d others %d\n",
					id, o.background, r.exit_code, r.out ? r.out : "", r.err ? r.err : "",
					out.hits, out.others);
				atomic_fetch_add(&n_bad_output, 1);
			}
		}
		if (r.submits > 1)
			atomic_fetch_add(&n_resubmits, r.submits - 1);
		corral_exec_result_clear(&r);
	}
	corral_sandbox_free(sb);
	return NULL;
}

static int mode_exactly_once(const char *proxy, const char *direct, int n_sb, int threads,
			     int commands)
{
	corral_client *dc = client_for(direct, false), *fc = client_for(proxy, true);
	corral_sandbox **sbs = calloc((size_t)n_sb, sizeof(*sbs));
	for (int i = 0; i < n_sb; i++)
		sbs[i] = create_or_die(dc);
	char(*ids)[CORRAL_EXEC_ID_LEN] = calloc((size_t)(threads * commands), CORRAL_EXEC_ID_LEN);
	pthread_t *t = calloc((size_t)threads, sizeof(*t));
	struct eo_arg *args = calloc((size_t)threads, sizeof(*args));
	double t0 = now_s();
	for (int i = 0; i < threads; i++) {
		args[i] = (struct eo_arg){fc, sbs, n_sb, i, commands, ids};
		pthread_create(&t[i], NULL, eo_thread, &args[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double elapsed = now_s() - t0;

	/* Count executions inside each sandbox, with no faults in the way. */
	char *all = NULL;
	size_t all_len = 0;
	FILE *mem = open_memstream(&all, &all_len);
	for (int i = 0; i < n_sb; i++) {
		corral_exec_result r;
		corral_error e;
		if (corral_exec(sbs[i], "cat /tmp/corral-execs 2>/dev/null; true", NULL, &r, &e) < 0) {
			fprintf(stderr, "read the execution log: %s\n", e.message);
			return 2;
		}
		fprintf(mem, "%s\n", r.out ? r.out : "");
		corral_exec_result_clear(&r);
	}
	fclose(mem);
	for (int i = 0; i < threads * commands; i++) {
		int n = occurrences(all, ids[i]);
		if (n > 1)
			atomic_fetch_add(&n_dup, n - 1);
		if (n == 0)
			atomic_fetch_add(&n_missing, 1);
	}
	printf("{\"mode\":\"exactly-once\",\"commands\":%d,\"ok\":%ld,\"failed\":%ld,\"resubmits\":%ld,"
	       "\"duplicates\":%ld,\"missing\":%ld,\"bad_output\":%ld,\"seconds\":%.1f,",
	       threads * commands, n_ok, n_fail, n_resubmits, n_dup, n_missing, n_bad_output,
	       elapsed);
	print_codes();
	printf("}\n");
	free(all);
	for (int i = 0; i < n_sb; i++)
		corral_sandbox_release(sbs[i]);
	corral_client_free(fc);
	corral_client_free(dc);
	free(sbs);
	free(ids);
	free(t);
	free(args);
	return 0;
}

/* ---- idle gaps ---- */

static int mode_idle(const char *proxy, int commands)
{
	corral_client *c = client_for(proxy, false);
	corral_sandbox *sb = create_or_die(c);
	static const double gaps[] = {0.3, 0.9, 1.1, 1.5, 1.9, 2.0, 2.1, 2.5, 3.5};
	for (int i = 0; i < commands; i++) {
		sleep_s(gaps[i % (sizeof(gaps) / sizeof(gaps[0]))]);
		corral_exec_opts o;
		corral_exec_opts_init(&o);
		o.background = i % 2 == 1;
		o.timeout_s = 30;
		corral_exec_result r;
		corral_error e;
		if (corral_exec(sb, "echo ok", &o, &r, &e) < 0) {
			count_error(&e);
			atomic_fetch_add(&n_fail, 1);
		} else if (r.exit_code == 0 && r.out &&
			   strcmp(r.out, o.background ? "ok\n" : "ok") == 0) {
			atomic_fetch_add(&n_ok, 1);
		} else {
			atomic_fetch_add(&n_bad_output, 1);
		}
		if (r.submits > 1)
			atomic_fetch_add(&n_resubmits, r.submits - 1);
		corral_exec_result_clear(&r);
	}
	printf("{\"mode\":\"idle\",\"commands\":%d,\"ok\":%ld,\"failed\":%ld,\"resubmits\":%ld,"
	       "\"bad_output\":%ld,\"keepalive_expiry\":%.1f,",
	       commands, n_ok, n_fail, n_resubmits, n_bad_output, corral_client_keepalive_expiry(c));
	print_codes();
	printf("}\n");
	corral_sandbox_release(sb);
	corral_client_free(c);
	return 0;
}

/* ---- creates through faults ---- */

static long direct_ping(const char *direct, const char *id)
{
	CURL *h = curl_easy_init();
	char url[512];
	snprintf(url, sizeof(url), "%s/sandboxes/%s/proxy/44772/ping", direct, id);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_NOBODY, 0L);
	FILE *null = fopen("/dev/null", "w");
	curl_easy_setopt(h, CURLOPT_WRITEDATA, null);
	long st = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
	fclose(null);
	curl_easy_cleanup(h);
	return st;
}

struct cr_arg {
	corral_client *c;
	const char *direct;
	int n;
};

static void *cr_thread(void *p)
{
	struct cr_arg *a = p;
	for (int i = 0; i < a->n; i++) {
		corral_sandbox_spec s;
		corral_sandbox_spec_init(&s);
		s.memory_mib = 128;
		s.cpu_request = 0.01;
		s.memory_request_mib = 16;
		s.ttl_s = 600;
		corral_sandbox *sb;
		corral_error e;
		if (corral_sandbox_create(a->c, &s, &sb, &e) < 0) {
			count_error(&e);
			atomic_fetch_add(&n_fail, 1);
			continue;
		}
		long st = direct_ping(a->direct, corral_sandbox_id(sb));
		if (st == 200) {
			atomic_fetch_add(&n_ok, 1);
		} else {
			fprintf(stderr, "sandbox %s returned by create but ping -> %ld\n",
				corral_sandbox_id(sb), st);
			atomic_fetch_add(&n_unready, 1);
		}
		corral_sandbox_release(sb);
	}
	return NULL;
}

static int mode_create(const char *proxy, const char *direct, int n)
{
	corral_client *c = client_for(proxy, true);
	enum { T = 4 };
	pthread_t t[T];
	struct cr_arg a[T];
	for (int i = 0; i < T; i++) {
		a[i] = (struct cr_arg){c, direct, n / T + (i < n % T)};
		pthread_create(&t[i], NULL, cr_thread, &a[i]);
	}
	for (int i = 0; i < T; i++)
		pthread_join(t[i], NULL);
	char **left = NULL;
	corral_client_drain(c, 60, &left, NULL);
	long leftover = 0;
	for (char **p = left; p && *p; p++)
		leftover++;
	corral_strv_free(left);
	printf("{\"mode\":\"create\",\"creates\":%d,\"ok\":%ld,\"failed\":%ld,\"unready\":%ld,"
	       "\"undeleted\":%ld,",
	       n, n_ok, n_fail, n_unready, leftover);
	print_codes();
	printf("}\n");
	corral_client_free(c);
	return 0;
}

/* ---- many rollouts at once ---- */

static pthread_barrier_t start_line;
static atomic_long n_created;

static void *roll_thread(void *p)
{
	corral_client *c = p;
	pthread_barrier_wait(&start_line);
	corral_sandbox_spec s;
	corral_sandbox_spec_init(&s);
	s.cpu = 0.1;
	s.memory_mib = 64;
	s.cpu_request = 0.001;
	s.memory_request_mib = 8;
	s.ttl_s = 900;
	corral_sandbox *sb;
	corral_error e;
	if (corral_sandbox_create(c, &s, &sb, &e) < 0) {
		count_error(&e);
		atomic_fetch_add(&n_fail, 1);
		return NULL;
	}
	atomic_fetch_add(&n_created, 1);
	corral_exec_opts o;
	corral_exec_opts_init(&o);
	o.timeout_s = 120;
	corral_exec_result r;
	bool ok = true;
	for (int i = 0; i < 2 && ok; i++) {
		o.background = i == 1;
		if (corral_exec(sb, "echo $OMP_NUM_THREADS", &o, &r, &e) < 0) {
			count_error(&e);
			ok = false;
		} else if (r.exit_code != 0 || !r.out || strncmp(r.out, "1", 1) != 0) {
			fprintf(stderr, "rollout: unexpected output '%s'\n", r.out ? r.out : "");
			atomic_fetch_add(&n_bad_output, 1);
			ok = false;
		}
		corral_exec_result_clear(&r);
	}
	atomic_fetch_add(ok ? &n_ok : &n_fail, 1);
	corral_sandbox_release(sb);
	return NULL;
}

static int mode_concurrency(const char *direct, int threads)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	corral_options o;
	corral_options_init(&o);
	o.server = direct;
	o.create_timeout_s = 600;
	o.reaper_threads = 16;
	o.drain_timeout_s = 300;
	corral_client *c;
	corral_error e;
	if (corral_client_new(&o, &c, &e) < 0)
		return 2;
	pthread_barrier_init(&start_line, NULL, (unsigned)threads);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 512 * 1024); /* room for ASan builds */
	pthread_t *t = calloc((size_t)threads, sizeof(*t));
	double t0 = now_s();
	int started = 0;
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&t[i], &attr, roll_thread, c) != 0) {
			fprintf(stderr, "thread %d: cannot start\n", i);
			return 2;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	double run_s = now_s() - t0;
	char **left = NULL;
	corral_client_drain(c, 300, &left, NULL);
	long leftover = 0;
	for (char **p = left; p && *p; p++)
		leftover++;
	corral_strv_free(left);
	double total_s = now_s() - t0;
	printf("{\"mode\":\"concurrency\",\"threads\":%d,\"ok\":%ld,\"failed\":%ld,\"created\":%ld,"
	       "\"bad_output\":%ld,\"undeleted\":%ld,\"rollouts_seconds\":%.1f,\"with_teardown_seconds\":%.1f,",
	       threads, n_ok, n_fail, n_created, n_bad_output, leftover, run_s, total_s);
	print_codes();
	printf("}\n");
	corral_client_free(c);
	free(t);
	return 0;
}

/* ---- the typed errors and result fields, against corrald directly ---- */

static double exec_timed(corral_sandbox *sb, const char *cmd, bool bg, double timeout,
			 corral_exec_result *r, corral_error *e, int *rc)
{
	corral_exec_opts o;
	corral_exec_opts_init(&o);
	o.background = bg;
	o.timeout_s = timeout;
	double t0 = now_s();
	*rc = corral_exec(sb, cmd, &o, r, e);
	return now_s() - t0;
}

static int mode_semantics(const char *direct)
{
	corral_client *c = client_for(direct, false);
	corral_sandbox *sb = create_or_die(c);
	corral_exec_result r;
	corral_error e;
	int rc;
	printf("{\"mode\":\"semantics\"");

	exec_timed(sb, "echo out; echo err >&2; exit 7", false, 30, &r, &e, &rc);
	printf(",\"fg_exit7\":%s", rc == 0 && r.exit_code == 7 && r.out && !strcmp(r.out, "out") &&
						  r.err && !strcmp(r.err, "err") ? "true" : "false");
	corral_exec_result_clear(&r);

	double t = exec_timed(sb, "sleep 30", false, 1, &r, &e, &rc);
	printf(",\"fg_timeout\":%s,\"fg_timeout_s\":%.2f",
	       rc < 0 && e.code == CORRAL_E_COMMAND_TIMEOUT && !strcmp(r.error_type, "timeout") ? "true"
												 : "false",
	       t);
	corral_exec_result_clear(&r);

	t = exec_timed(sb, "echo started; sleep 30", true, 1, &r, &e, &rc);
	printf(",\"bg_timeout\":%s,\"bg_timeout_s\":%.2f",
	       rc < 0 && e.code == CORRAL_E_COMMAND_TIMEOUT && !strcmp(r.error_type, "timeout") &&
			       r.out && strstr(r.out, "started")
		       ? "true"
		       : "false",
	       t);
	corral_exec_result_clear(&r);

	/* background completion latency: a 10 ms command, long-poll */
	double best = 1e9;
	for (int i = 0; i < 5; i++) {
		t = exec_timed(sb, "sleep 0.01; echo x", true, 30, &r, &e, &rc);
		if (rc == 0 && r.exit_code == 0 && t < best)
			best = t;
		corral_exec_result_clear(&r);
	}
	printf(",\"bg_10ms_command_s\":%.3f", best);

	/* a create the server refuses: one attempt, a validation error */
	corral_sandbox_spec s;
	corral_sandbox_spec_init(&s);
	s.image = "no-such-image";
	corral_sandbox *bad = NULL;
	double t0 = now_s();
	rc = corral_sandbox_create(c, &s, &bad, &e);
	printf(",\"create_invalid\":%s,\"create_invalid_s\":%.2f",
	       rc < 0 && e.code == CORRAL_E_INVALID_ARGUMENT && e.http_status == 422 ? "true" : "false",
	       now_s() - t0);

	corral_sandbox *x = NULL;
	rc = corral_sandbox_open(c, "00000000-0000-4000-8000-000000000000", &x, &e);
	printf(",\"open_unknown\":%s", rc < 0 && e.code == CORRAL_E_NOT_FOUND ? "true" : "false");
	rc = corral_sandbox_delete_id(c, "00000000-0000-4000-8000-000000000000", &e);
	printf(",\"delete_unknown_ok\":%s", rc == 0 ? "true" : "false");

	/* a sandbox whose entrypoint exits: calls on it are "sandbox ended" with a reason (it
	 * exits when told, after its create: 'sleep 1' could end it during a slow create) */
	corral_sandbox_spec_init(&s);
	const char *const ep[] = {"sh", "-c", "while [ ! -e /tmp/end ]; do sleep 0.05; done", NULL};
	s.entrypoint = ep;
	s.cpu_request = 0.01;
	s.memory_request_mib = 16;
	corral_sandbox *ending = NULL;
	if (corral_sandbox_create(c, &s, &ending, &e) == 0) {
		exec_timed(ending, "touch /tmp/end", false, 30, &r, &e, &rc);
		corral_exec_result_clear(&r);
		sleep_s(2.0);
		exec_timed(ending, "true", false, 10, &r, &e, &rc);
		printf(",\"ended\":%s,\"ended_reason\":\"%s\"",
		       rc < 0 && e.code == CORRAL_E_SANDBOX_ENDED && e.http_status == 410 && e.reason[0]
			       ? "true"
			       : "false",
		       e.reason);
		corral_exec_result_clear(&r);
		corral_sandbox_release(ending);
	} else {
		printf(",\"ended\":false,\"ended_create\":\"%s\"", e.message);
	}
	printf("}\n");
	corral_sandbox_release(sb);
	corral_client_free(c);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 7 && strcmp(argv[1], "exactly-once") == 0)
		return mode_exactly_once(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
	if (argc >= 4 && strcmp(argv[1], "idle") == 0)
		return mode_idle(argv[2], atoi(argv[3]));
	if (argc >= 5 && strcmp(argv[1], "create") == 0)
		return mode_create(argv[2], argv[3], atoi(argv[4]));
	if (argc >= 3 && strcmp(argv[1], "semantics") == 0)
		return mode_semantics(argv[2]);
	if (argc >= 4 && strcmp(argv[1], "concurrency") == 0)
		return mode_concurrency(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: client-faults exactly-once|idle|create|concurrency ...\n");
	return 2;
}
