/*
 * corral rm: delete each id (corral_sandbox_delete_id: retries, 404 = already gone), up to
 * RM_PARALLEL at once; the ids are printed in the order given, each once its deletion is done.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define RM_PARALLEL 16

static const char rm_help[] =
	"Usage: corral rm [OPTIONS] ID...\n"
	"\n"
	"Deletes sandboxes: their processes are killed and their files removed. Prints each id, in\n"
	"the order given, once it is deleted; up to 16 deletions run at once, and on a terminal the\n"
	"progress is shown on stderr. An id the server does not know (already deleted, or reaped by\n"
	"its TTL) counts as deleted.\n"
	"\n"
	"Options:\n"
	"  -q, --quiet           do not print the ids\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral rm $(corral ps -q --label run=42)\n"
	"\n"
	"Exit status: 0 every sandbox is gone; 1 usage error; 2 the server refused at least one\n"
	"deletion; 3 the server could not be reached; 130 interrupted. Failures are reported per id\n"
	"and the remaining ids are still deleted; Ctrl-C lets the deletions under way finish.\n";

int rm_sandbox(corral_client *client, const char *id)
{
	corral_error e;
	if (corral_sandbox_delete_id(client, id, &e) == 0)
		return EXIT_OK;
	_cleanup_free_ char *what = NULL;
	if (asprintf(&what, "sandbox %s", id) < 0)
		what = NULL;
	return cli_report(what, &e);
}

struct rm_job {
	corral_client *client;
	struct progress *progress;
	char **ids;
	int *status; /* per id: -1 not done yet, else its exit code */
	size_t n;
	atomic_size_t next;
	pthread_mutex_t mu;
	pthread_cond_t cond;
};

static void *rm_worker(void *p)
{
	struct rm_job *j = p;
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		if (i >= j->n)
			return NULL;
		int r = EXIT_INTERRUPTED;
		corral_error e;
		if (cli_interrupted()) {
			/* not started */
		} else if (corral_sandbox_delete_id(j->client, j->ids[i], &e) == 0) {
			r = EXIT_OK;
		} else {
			char what[CORRAL_ID_MAX + 16], line[1200];
			snprintf(what, sizeof(what), "sandbox %s", j->ids[i]);
			cli_format_error(line, sizeof(line), what, &e);
			progress_message(j->progress, "%s\n", line);
			r = cli_exit_code(&e);
		}
		pthread_mutex_lock(&j->mu);
		j->status[i] = r;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->mu);
	}
}

int cmd_rm(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"quiet", no_argument, NULL, 'q'},
		{0},
	};
	bool quiet = false;
	int c;
	while ((c = getopt_long(argc, argv, "hq", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(rm_help, stdout);
			return EXIT_OK;
		case 'q':
			quiet = true;
			break;
		default:
			return cli_try_help("rm");
		}
	}
	if (optind >= argc)
		return cli_usage_error("rm", "missing sandbox ID");
	corral_client *client;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	cli_interrupt_mode(CLI_INT_FLAG); /* deletions under way finish; no new one starts */
	struct progress pr;
	struct rm_job job = {.client = client, .progress = &pr, .ids = argv + optind,
			     .n = (size_t)(argc - optind)};
	progress_init(&pr, "deleting", job.n);
	job.status = malloc(job.n * sizeof(int));
	if (!job.status) {
		corral_client_free(client);
		return EXIT_API;
	}
	for (size_t i = 0; i < job.n; i++)
		job.status[i] = -1;
	pthread_mutex_init(&job.mu, NULL);
	pthread_cond_init(&job.cond, NULL);
	pthread_t t[RM_PARALLEL];
	size_t started = 0;
	for (; started < MIN(job.n, (size_t)RM_PARALLEL); started++)
		if (pthread_create(&t[started], NULL, rm_worker, &job) != 0)
			break;
	if (started == 0)
		rm_worker(&job);
	for (size_t i = 0; i < job.n; i++) {
		pthread_mutex_lock(&job.mu);
		while (job.status[i] < 0)
			pthread_cond_wait(&job.cond, &job.mu);
		int r = job.status[i];
		pthread_mutex_unlock(&job.mu);
		if (r == EXIT_INTERRUPTED) {
			ret = r;
			continue;
		}
		progress_step(&pr, r == EXIT_OK, r == EXIT_OK && !quiet ? job.ids[i] : NULL);
		/* Keep the most telling status: interrupted, then unreachable, then refused. */
		if (r && ret != EXIT_INTERRUPTED && (ret == EXIT_OK || r == EXIT_CONNECT))
			ret = r;
	}
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	progress_end(&pr);
	pthread_mutex_destroy(&job.mu);
	pthread_cond_destroy(&job.cond);
	free(job.status);
	corral_client_free(client);
	if (ret == EXIT_INTERRUPTED)
		fprintf(stderr, "corral: interrupted\n");
	return ret;
}
