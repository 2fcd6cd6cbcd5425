/*
 * One rollout with libcorral: create a ready sandbox, run commands (streamed and background),
 * switch on the typed errors, and hand the teardown to the background reaper.
 *
 *   cc rollout.c $(pkg-config --cflags --libs libcorral) -o rollout
 *   CORRAL_SERVER=http://127.0.0.1:8080 ./rollout
 */
#include <corral/corral.h>
#include <errno.h>
#include <stdio.h>

static void print_line(void *userdata, const char *line, size_t len)
{
	fprintf(userdata, "| %.*s\n", (int)len, line);
}

int main(void)
{
	corral_options opts;
	corral_options_init(&opts); /* CORRAL_SERVER, CORRAL_API_KEY, every default */
	opts.label_prefix = "corral/";

	corral_error err;
	corral_client *client;
	if (corral_client_new(&opts, &client, &err) < 0) {
		fprintf(stderr, "client: %s\n", err.message);
		return 1;
	}

	corral_sandbox_spec spec;
	corral_sandbox_spec_init(&spec);
	spec.image = "host";
	spec.cpu = 2;           /* OMP_NUM_THREADS & co. become 2 inside */
	spec.memory_mib = 1024;
	spec.ttl_s = 1800;      /* the server reaps it even if this process dies */

	corral_sandbox *sb;
	if (corral_sandbox_create(client, &spec, &sb, &err) < 0) {
		fprintf(stderr, "create: %s: %s\n", corral_error_code_name(err.code), err.message);
		corral_client_free(client);
		return 1;
	}

	/* Foreground: lines stream to the callbacks while the command runs. */
	corral_exec_opts eo;
	corral_exec_opts_init(&eo);
	eo.timeout_s = 120; /* enforced by the server; the client waits at most 180 s */
	eo.on_stdout = print_line;
	eo.userdata = stdout;
	corral_exec_result res;
	int r = corral_exec(sb, "echo hello from $(hostname); nproc", &eo, &res, &err);
	if (r == 0)
		printf("exit %d, stdout %zu bytes\n", res.exit_code, res.out_len);
	corral_exec_result_clear(&res);

	/* Background: no stream held open; completion arrives by long-poll. */
	corral_exec_opts_init(&eo);
	eo.background = true;
	eo.timeout_s = 600;
	r = corral_exec(sb, "sleep 0.2; echo done", &eo, &res, &err);
	if (r < 0) {
		switch (err.code) {
		case CORRAL_E_SANDBOX_ENDED:
			fprintf(stderr, "sandbox ended (%s): recreate it\n", err.reason);
			break;
		case CORRAL_E_COMMAND_TIMEOUT:
			fprintf(stderr, "command timed out; partial output: %s\n", res.out);
			break;
		case CORRAL_E_BACKEND_UNREACHABLE:
		case CORRAL_E_LOST_EXECUTION:
			fprintf(stderr, "sandbox infrastructure failure: %s\n", err.message);
			break;
		default:
			fprintf(stderr, "%s: %s\n", corral_error_code_name(err.code), err.message);
		}
	} else {
		printf("background: exit %d: %s", res.exit_code, res.out ? res.out : "");
	}
	corral_exec_result_clear(&res);

	corral_sandbox_release(sb); /* returns at once; the reaper deletes it */
	corral_client_free(client); /* waits for the reaper (bounded), reports leftovers */
	return r < 0 ? 1 : 0;
}
