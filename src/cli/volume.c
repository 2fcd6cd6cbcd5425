/* corral volume ls|rm: named volumes kept by corrald (docs/volumes.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shared/quantity.h"

static const char volume_help[] =
	"Usage: corral volume ls [--json]\n"
	"       corral volume rm NAME\n"
	"\n"
	"Named volumes (a create's volumes[].pvc): each is a file system of its own size that\n"
	"corrald keeps under its state dir. ls lists them with their size, what they take on the\n"
	"host and how many sandboxes use them; rm removes one and its data (refused while a\n"
	"sandbox uses it).\n"
	"\n"
	"Options:\n"
	"  --json                 ls: the server's answer as JSON\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Exit status: 0 done; 1 usage error; 2 the server refused (\"corral: VOLUME::IN_USE: ...\");\n"
	"3 the server could not be reached.\n";

enum { OPT_JSON = OPT_FIRST_COMMAND_OPTION };

static void print_table(json_t *o)
{
	json_t *it;
	size_t i;
	printf("%-40s %-10s %-10s %-9s %s\n", "NAME", "SIZE", "USED", "SANDBOXES", "DELETE-ON-END");
	json_array_foreach(json_object_get(o, "items"), i, it) {
		char size[32], used[32];
		quantity_format_bytes((uint64_t)json_integer_value(json_object_get(it, "sizeBytes")),
				      size, sizeof(size));
		quantity_format_bytes((uint64_t)json_integer_value(json_object_get(it, "usedBytes")),
				      used, sizeof(used));
		printf("%-40s %-10s %-10s %-9lld %s\n", json_string_value(json_object_get(it, "name")),
		       size, used, (long long)json_integer_value(json_object_get(it, "sandboxes")),
		       json_is_true(json_object_get(it, "deleteOnSandboxTermination")) ? "yes" : "no");
	}
}

int cmd_volume(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"json", no_argument, NULL, OPT_JSON},
		{0},
	};
	bool json_out = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			fputs(volume_help, stdout);
			return EXIT_OK;
		}
		if (c == OPT_JSON) {
			json_out = true;
			continue;
		}
		return cli_try_help("volume");
	}
	if (optind >= argc)
		return cli_usage_error("volume", "expected ls or rm");
	const char *sub = argv[optind++];
	bool is_ls = strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0;
	if (!is_ls && strcmp(sub, "rm") != 0)
		return cli_usage_error("volume", "unknown subcommand '%s': expected ls or rm", sub);
	if (argc - optind != (is_ls ? 0 : 1))
		return cli_usage_error("volume", "%s takes %s", sub, is_ls ? "no argument" : "one NAME");
	corral_client *client = NULL;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	corral_error err = {0};
	char *out = NULL;
	if (is_ls) {
		int r = corral_volume_list_json(client, &out, &err);
		ret = cli_show_listing(r, out, &err, "volume ls", json_out, print_table);
	} else if (corral_volume_remove(client, argv[optind], &err) < 0) {
		ret = cli_report("volume rm", &err);
	}
	free(out);
	corral_client_free(client);
	return ret;
}
