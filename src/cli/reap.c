/*
 * corral reap: find the sandboxes of one run (by its attribution labels) and delete them. Audit
 * by default; --reap deletes concurrently, sweeps again until nothing matches (at most 3 sweeps),
 * and exits non-zero when something is left. Built on libcorral (listing, deletes with retries,
 * 404 = already gone).
 */
#include <corral/corral.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define REAP_SWEEPS 3
#define REAP_PARALLEL 32

static const char reap_help[] =
	"Usage: corral reap --run-id RUN [--user USER] [--label-prefix PREFIX] [--reap] [-o json]\n"
	"\n"
	"Finds the sandboxes a run left behind, by the attribution labels libcorral puts on every\n"
	"sandbox (PREFIX + run, PREFIX + user), and lists them. With --reap it deletes them (32 at a\n"
	"time; a sandbox already gone counts as deleted), lists again and repeats until none is left,\n"
	"at most 3 sweeps; on a terminal the progress is shown on stderr. RUN and USER are\n"
	"sanitized like label values before matching. Ctrl-C lets the deletions under way finish.\n"
	"\n"
	"Options:\n"
	"  --run-id RUN          the run's id (label PREFIX run); required\n"
	"  --user USER           only the sandboxes of this user (label PREFIX user)\n"
	"  --label-prefix P      label key prefix (default corral/; e.g. nemo-gym.nvidia.com/)\n"
	"  --reap                delete (default: audit only)\n"
	"  -o, --output FORMAT   text (default) or json\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral reap --run-id 3f2a9c01b7de --user alice --reap\n"
	"\n"
	"Exit status: 0 nothing matched or everything was deleted (audit: the listing worked);\n"
	"1 usage error; 2 some sandboxes are left, or the server refused; 3 the server could not be\n"
	"reached; 130 interrupted.\n";

struct reap_job {
	corral_client *c;
	char **ids;
	size_t n;
	atomic_size_t next;
	atomic_size_t deleted, failed;
	bool json;
	struct progress *progress;
};

static void *reap_worker(void *p)
{
	struct reap_job *j = p;
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		if (i >= j->n || cli_interrupted())
			return NULL;
		corral_error e;
		if (corral_sandbox_delete_id(j->c, j->ids[i], &e) == 0) {
			atomic_fetch_add(&j->deleted, 1);
			char line[CORRAL_ID_MAX + 16];
			snprintf(line, sizeof(line), "Deleted %s", j->ids[i]);
			progress_step(j->progress, true, j->json ? NULL : line);
		} else {
			atomic_fetch_add(&j->failed, 1);
			progress_message(j->progress, "corral: failed to delete %s: %s (request id %s)\n",
					 j->ids[i], e.message, *e.request_id ? e.request_id : "none");
			progress_step(j->progress, false, NULL);
		}
	}
}


static void json_ids(const char *name, char **ids, bool comma)
{
	printf("\"%s\":[", name);
	for (size_t i = 0; ids && ids[i]; i++)
		printf("%s\"%s\"", i ? "," : "", ids[i]);
	printf("]%s", comma ? "," : "");
}

/* What the command line asks of reap. */
struct reap_args {
	const char *run, *user, *prefix;
	bool reap, json;
};

/* The options into a. Returns -1 to go on, or the exit status (after --help or a usage error). */
static int reap_parse_args(struct cli *cli, int argc, char **argv, struct reap_args *a)
{
	enum { OPT_RUN = OPT_FIRST_COMMAND_OPTION + 0x40, OPT_USER, OPT_PREFIX, OPT_REAP };
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"run-id", required_argument, NULL, OPT_RUN},
		{"user", required_argument, NULL, OPT_USER},
		{"label-prefix", required_argument, NULL, OPT_PREFIX},
		{"reap", no_argument, NULL, OPT_REAP},
		{"output", required_argument, NULL, 'o'},
		{0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "ho:", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(reap_help, stdout);
			return EXIT_OK;
		case OPT_RUN:
			a->run = optarg;
			break;
		case OPT_USER:
			a->user = optarg;
			break;
		case OPT_PREFIX:
			a->prefix = optarg;
			break;
		case OPT_REAP:
			a->reap = true;
			break;
		case 'o':
			if (strcmp(optarg, "json") == 0)
				a->json = true;
			else if (strcmp(optarg, "text") != 0)
				return cli_usage_error("reap", "--output: expected text or json");
			break;
		default:
			return cli_try_help("reap");
		}
	}
	if (optind < argc)
		return cli_usage_error("reap", "unexpected argument '%s'", argv[optind]);
	if (!a->run || !*a->run || strspn(a->run, " \t") == strlen(a->run))
		return cli_usage_error("reap", "--run-id is required (and not blank)");
	if (a->user && strspn(a->user, " \t") == strlen(a->user))
		return cli_usage_error("reap", "--user must not be blank");
	return -1;
}

/* Without --reap: what would be deleted. */
static void reap_print_matched(const char *srun, const char *suser, const char *who, char **ids,
			       size_t n, bool json)
{
	if (json) {
		printf("{\"run\":\"%s\",\"user\":\"%s\",", srun, suser ? suser : "");
		json_ids("matched", ids, false);
		printf("}\n");
	} else {
		printf("Would delete %zu sandbox(es) %s\n", n, who);
		for (size_t i = 0; i < n; i++)
			printf("%s\n", ids[i]);
	}
}

/* One sweep: delete the m sandboxes of cur on up to REAP_PARALLEL threads; how many went. */
static size_t reap_sweep(corral_client *client, char **cur, size_t m, int sweep, bool json)
{
	struct progress pr;
	progress_init(&pr, sweep == 1 ? "deleting" : "deleting (again)", m);
	struct reap_job job = {.c = client, .ids = cur, .n = m, .json = json,
			       .progress = &pr};
	size_t nt = m < REAP_PARALLEL ? m : REAP_PARALLEL;
	pthread_t t[REAP_PARALLEL];
	size_t started = 0;
	for (; started < nt; started++)
		if (pthread_create(&t[started], NULL, reap_worker, &job) != 0)
			break;
	if (started == 0)
		reap_worker(&job);
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	progress_end(&pr);
	return job.deleted;
}

/*
 * Delete matched, then what filter still lists (created while we deleted), up to REAP_SWEEPS
 * sweeps, until one deletes nothing. Adds the deletions to *deleted; *ret_left is the last listing
 * (NULL if none was made), the caller's to free unless it is matched. Returns EXIT_OK,
 * EXIT_INTERRUPTED or a listing's error.
 */
static int reap_sweeps(corral_client *client, const char *const *filter, char **matched, bool json,
		       size_t *deleted, char ***ret_left)
{
	int ret = EXIT_OK;
	corral_error e;
	char **left = NULL;
	for (int sweep = 1; sweep <= REAP_SWEEPS; sweep++) {
		char **cur = sweep == 1 ? matched : left;
		size_t m = 0;
		while (cur && cur[m])
			m++;
		if (m == 0)
			break;
		size_t job_deleted = reap_sweep(client, cur, m, sweep, json);
		*deleted += job_deleted;
		if (cli_interrupted()) {
			ret = EXIT_INTERRUPTED;
			break;
		}
		if (left != matched)
			corral_strv_free(left);
		left = NULL;
		/* Catch stragglers (created while we deleted); stop when a sweep deleted nothing. */
		if (corral_sandbox_list(client, filter, &left, &e) < 0) {
			ret = cli_report(NULL, &e);
			break;
		}
		if (job_deleted == 0)
			break;
	}
	*ret_left = left;
	return ret;
}

int cmd_reap(struct cli *cli, int argc, char **argv)
{
	struct reap_args a = {.prefix = "corral/"};
	int ret = reap_parse_args(cli, argc, argv, &a);
	if (ret >= 0)
		return ret;
	_cleanup_free_ char *pfx = NULL;
	if (corral_label_prefix_normalize(a.prefix, &pfx) < 0)
		return cli_usage_error("reap", "--label-prefix '%s': expected a lowercase DNS subdomain followed by '/', or \"\"",
				       a.prefix);
	_cleanup_free_ char *srun = corral_label_value_sanitize(a.run);
	_cleanup_free_ char *suser = a.user ? corral_label_value_sanitize(a.user) : NULL;
	_cleanup_free_ char *f_run = NULL, *f_user = NULL;
	if (!srun || asprintf(&f_run, "%srun=%s", pfx, srun) < 0 ||
	    (suser && asprintf(&f_user, "%suser=%s", pfx, suser) < 0))
		return EXIT_API;
	const char *filter[] = {f_run, f_user, NULL};

	corral_client *client;
	corral_error e;
	ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	/* Ctrl-C: the deletions under way finish, no new one starts. */
	cli_interrupt_mode(CLI_INT_FLAG);
	char **ids = NULL;
	if (corral_sandbox_list(client, filter, &ids, &e) < 0) {
		ret = cli_report(NULL, &e);
		corral_client_free(client);
		return ret;
	}
	size_t n = 0;
	while (ids[n])
		n++;
	char who[600];
	snprintf(who, sizeof(who), "for run '%s'%s%s%s", srun, suser ? " and user '" : "",
		 suser ? suser : "", suser ? "'" : "");
	if (!a.reap) {
		reap_print_matched(srun, suser, who, ids, n, a.json);
		corral_strv_free(ids);
		corral_client_free(client);
		return EXIT_OK;
	}
	char **matched = ids;
	size_t deleted = 0;
	char **left = NULL;
	if (!a.json)
		printf("Deleting %zu sandbox(es) %s\n", n, who);
	ret = reap_sweeps(client, filter, matched, a.json, &deleted, &left);
	size_t nleft = 0;
	while (left && left[nleft])
		nleft++;
	if (ret == EXIT_OK && nleft) {
		fprintf(stderr, "corral: %zu sandbox(es) were not reaped\n", nleft);
		ret = EXIT_API;
	}
	if (a.json) {
		printf("{\"run\":\"%s\",\"user\":\"%s\",\"deleted\":%zu,", srun, suser ? suser : "",
		       deleted);
		json_ids("matched", matched, true);
		json_ids("left", left, false);
		printf("}\n");
	}
	if (left != matched)
		corral_strv_free(left);
	corral_strv_free(matched);
	corral_client_free(client);
	return ret;
}
