/* corral image pull|ls|rm|import|inspect: registry images in corrald's store (docs/images.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "shared/quantity.h"

static const char image_help[] =
	"Usage: corral image pull [OPTIONS] REF\n"
	"       corral image ls [--json]\n"
	"       corral image rm REF\n"
	"       corral image import PATH NAME\n"
	"       corral image inspect REF\n"
	"\n"
	"Registry images in corrald's store. pull fetches REF now (python:3.11,\n"
	"127.0.0.1:5000/team/task@sha256:...), so later creates from it do not wait; a pull of the\n"
	"same image already running is shared. ls lists the store's images; rm forgets one, and\n"
	"corrald removes the layers nothing uses any more (refused while a sandbox uses it). import\n"
	"loads an OCI image layout (a directory, or a tar such as docker save writes) from PATH on\n"
	"corrald's host, under its --import-dir, as NAME. inspect prints what the store holds of REF\n"
	"as JSON: its layers and what each takes on disk unpacked, its config, when it was last used.\n"
	"pull shows its progress (megabytes of blobs downloaded of those to download) on one line\n"
	"rewritten in place on a terminal, as plain lines (at most one a second) otherwise.\n"
	"\n"
	"Options:\n"
	"  --username USER        registry user for pull; the password is read from stdin\n"
	"                         (first line), never from the command line\n"
	"  --timeout SECS         how long pull waits (default 900)\n"
	"  --json                 ls: the server's answer as JSON\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Examples:\n"
	"  corral image pull python:3.11\n"
	"  echo \"$TOKEN\" | corral image pull --username me registry.example.com/team/task:1\n"
	"  corral image ls\n"
	"\n"
	"Exit status: 0 done; 1 usage error; 2 the server refused (\"corral: SANDBOX::IMAGE_PULL_FAILED:\n"
	"...\" with the registry's words); 3 the server could not be reached; 130 interrupted.\n";

enum { OPT_JSON = OPT_FIRST_COMMAND_OPTION, OPT_USERNAME, OPT_PULL_WAIT };

static void print_table(json_t *o)
{
	json_t *items = json_object_get(o, "items"), *it;
	size_t i;
	printf("%-60s %-8s %-10s %s\n", "NAME", "LAYERS", "SIZE", "DIGEST");
	json_array_foreach(items, i, it) {
		char size[32] = "-";
		json_t *sz = json_object_get(it, "sizeBytes");
		if (json_is_integer(sz))
			quantity_format_bytes((uint64_t)json_integer_value(sz), size, sizeof(size));
		const char *digest = json_string_value(json_object_get(it, "digest"));
		printf("%-60s %-8lld %-10s %.19s\n", json_string_value(json_object_get(it, "name")),
		       (long long)json_integer_value(json_object_get(it, "layers")), size,
		       digest ? digest : "-");
	}
}

/* Whether the server's normalized name is the pull of ref as the user wrote it (python:3.11 is
 * docker.io/library/python:3.11, a name without tag has :latest). */
static bool pull_matches(const char *name, const char *ref)
{
	char a[1200], b[1200];
	snprintf(a, sizeof(a), "/%s", ref);
	snprintf(b, sizeof(b), "/%s:latest", ref);
	size_t n = strlen(name), la = strlen(a), lb = strlen(b);
	return strcmp(name, ref) == 0 || (n > la && strcmp(name + n - la, a) == 0) ||
	       (n > lb && strcmp(name + n - lb, b) == 0);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The progress of the pull of ref while it runs, from the "pulls" of GET /v1/images, polled by a
 * thread on the same client while the pull's request blocks the caller. On a terminal one line
 * rewritten in place; otherwise a line when the count moved, at most one a second.
 */
struct pull_progress {
	corral_client *client;
	const char *ref;
	bool tty, stop, shown;
	pthread_mutex_t mu;
	pthread_cond_t cond;
};

static void pull_progress_show(struct pull_progress *p, double *last_line, long long *last_done)
{
	char *out = NULL;
	corral_error err = {0};
	if (corral_image_list_json(p->client, &out, &err) < 0)
		return;
	json_t *j = json_loads(out, 0, NULL), *x, *pick = NULL;
	free(out);
	json_t *pulls = json_object_get(j, "pulls");
	size_t i;
	json_array_foreach(pulls, i, x) {
		const char *name = json_string_value(json_object_get(x, "name"));
		if (name && pull_matches(name, p->ref))
			pick = x;
	}
	if (!pick && json_array_size(pulls) == 1)
		pick = json_array_get(pulls, 0);
	const char *name = json_string_value(json_object_get(pick, "name"));
	long long done = json_integer_value(json_object_get(pick, "bytesDone"));
	long long total = json_integer_value(json_object_get(pick, "bytesTotal"));
	pthread_mutex_lock(&p->mu);
	if (name && total > 0 && !p->stop) {
		int pct = (int)(done * 100 / total);
		if (p->tty) {
			printf("\r%s: %.1f of %.1f MB (%d%%)\033[K", name, (double)done / 1e6,
			       (double)total / 1e6, pct > 100 ? 100 : pct);
			fflush(stdout);
			p->shown = true;
		} else if (done != *last_done && now_s() - *last_line >= 1.0) {
			printf("%s: %.1f of %.1f MB (%d%%)\n", name, (double)done / 1e6,
			       (double)total / 1e6, pct > 100 ? 100 : pct);
			fflush(stdout);
			*last_line = now_s();
			*last_done = done;
		}
	}
	pthread_mutex_unlock(&p->mu);
	json_decref(j);
}

static void *pull_progress_main(void *arg)
{
	struct pull_progress *p = arg;
	double last_line = 0;
	long long last_done = -1;
	for (;;) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (p->tty ? 200 : 250) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&p->mu);
		while (!p->stop && pthread_cond_timedwait(&p->cond, &p->mu, &until) == 0)
			;
		bool stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			return NULL;
		pull_progress_show(p, &last_line, &last_done);
	}
}

/* Stop the thread; on a terminal its line goes. Nothing is printed by it after this. */
static void pull_progress_end(struct pull_progress *p, pthread_t t)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	if (p->tty && p->shown)
		printf("\r\033[K");
	pthread_mutex_unlock(&p->mu);
	pthread_join(t, NULL);
}

static int read_password(char **ret)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, stdin);
	if (n < 0) {
		free(line);
		return -1;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	*ret = line;
	return 0;
}

int cmd_image(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"json", no_argument, NULL, OPT_JSON},
		{"username", required_argument, NULL, OPT_USERNAME},
		{"timeout", required_argument, NULL, OPT_PULL_WAIT},
		{0},
	};
	bool json_out = false;
	const char *user = NULL;
	unsigned long long timeout_s = 900;
	int c;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			fputs(image_help, stdout);
			return EXIT_OK;
		}
		if (c == OPT_JSON) {
			json_out = true;
			continue;
		}
		if (c == OPT_USERNAME) {
			user = optarg;
			continue;
		}
		if (c == OPT_PULL_WAIT) {
			if (cli_parse_uint(optarg, 86400, &timeout_s) < 0 || timeout_s == 0)
				return cli_usage_error("image", "--timeout '%s': expected 1 to 86400 seconds",
						       optarg);
			continue;
		}
		return cli_try_help("image");
	}
	if (optind >= argc)
		return cli_usage_error("image", "expected pull, ls, rm, import or inspect");
	const char *sub = argv[optind++];
	bool is_ls = strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0;
	bool is_pull = strcmp(sub, "pull") == 0, is_rm = strcmp(sub, "rm") == 0;
	bool is_import = strcmp(sub, "import") == 0, is_inspect = strcmp(sub, "inspect") == 0;
	if (!is_ls && !is_pull && !is_rm && !is_import && !is_inspect)
		return cli_usage_error("image",
				       "unknown subcommand '%s': expected pull, ls, rm, import or inspect",
				       sub);
	int want = is_ls ? 0 : is_import ? 2 : 1;
	if (argc - optind != want)
		return cli_usage_error("image", "%s takes %s", sub,
				       want == 0 ? "no argument" : want == 1 ? "one REF" : "PATH NAME");
	corral_client *client = NULL;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	corral_error err = {0};
	char *out = NULL;
	if (is_ls) {
		int r = corral_image_list_json(client, &out, &err);
		ret = cli_show_listing(r, out, &err, "image ls", json_out, print_table);
	} else if (is_pull) {
		char *pass = NULL;
		if (user && read_password(&pass) < 0) {
			corral_client_free(client);
			return cli_usage_error("image", "--username: no password on stdin");
		}
		struct pull_progress prog = {.client = client, .ref = argv[optind],
					.tty = isatty(STDOUT_FILENO) == 1};
		pthread_mutex_init(&prog.mu, NULL);
		pthread_cond_init(&prog.cond, NULL);
		pthread_t pt;
		bool polling = pthread_create(&pt, NULL, pull_progress_main, &prog) == 0;
		int pr = corral_image_pull(client, argv[optind], user, pass, (double)timeout_s, &out,
					   &err);
		if (polling)
			pull_progress_end(&prog, pt);
		pthread_cond_destroy(&prog.cond);
		pthread_mutex_destroy(&prog.mu);
		if (pr < 0)
			ret = cli_report("image pull", &err);
		else
			printf("%s\n", argv[optind]);
		if (pass) {
			explicit_bzero(pass, strlen(pass));
			free(pass);
		}
	} else if (is_inspect) {
		if (corral_image_inspect_json(client, argv[optind], &out, &err) < 0) {
			ret = cli_report("image inspect", &err);
		} else {
			json_t *j = json_loads(out, 0, NULL);
			json_t *items = json_object_get(j, "items");
			json_t *show = json_array_size(items) == 1 ? json_array_get(items, 0) : items;
			char *s = show ? json_dumps(show, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
			printf("%s\n", s ? s : out);
			free(s);
			json_decref(j);
		}
	} else if (is_import) {
		if (corral_image_import(client, argv[optind], argv[optind + 1], (double)timeout_s,
					&out, &err) < 0)
			ret = cli_report("image import", &err);
		else
			printf("%s\n", argv[optind + 1]);
	} else if (corral_image_remove(client, argv[optind], &err) < 0) {
		ret = cli_report("image rm", &err);
	}
	free(out);
	corral_client_free(client);
	return ret;
}
