/*
 * Replays fuzz corpora through a libFuzzer entry point without libFuzzer, so CI runs every corpus
 * as an ordinary test with any compiler (and under ASan/UBSan when the build has them).
 *
 *   replay DIR|FILE...
 *
 * Every regular file of each directory (sorted, so runs are reproducible) is read into a buffer of
 * exactly its size and passed to LLVMFuzzerTestOneInput. A target signals a bug by crashing or
 * aborting. A missing or empty corpus directory is an error, so a typo cannot pass silently.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/fsutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define REPLAY_MAX_INPUT (16u << 20)

static int replay_file(const char *path)
{
	char *buf = NULL;
	size_t len = 0;
	int r = fs_read_file(path, REPLAY_MAX_INPUT, &buf, &len);
	if (r < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(-r));
		return r;
	}
	/* An exact-size copy, so an overread by the target is caught by ASan. */
	uint8_t *data = malloc(len ? len : 1);
	if (!data) {
		free(buf);
		return -ENOMEM;
	}
	memcpy(data, buf, len);
	free(buf);
	fprintf(stderr, "replay: %s\n", path); /* the last line names the culprit of a crash */
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_hidden(const struct dirent *d)
{
	return d->d_name[0] != '.';
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR|FILE...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	unsigned total = 0, failed = 0;
	for (int i = 1; i < argc; i++) {
		struct dirent **names;
		int n = scandir(argv[i], &names, skip_hidden, by_name);
		if (n < 0 && errno == ENOTDIR) {
			failed += replay_file(argv[i]) < 0;
			total++;
			continue;
		}
		if (n < 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (n == 0) {
			fprintf(stderr, "replay: %s: empty corpus\n", argv[i]);
			return 1;
		}
		for (int j = 0; j < n; j++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], names[j]->d_name);
			failed += replay_file(path) < 0;
			total++;
			free(names[j]);
		}
		free(names);
	}
	printf("replay: %u inputs, %u unreadable\n", total, failed);
	return failed ? 1 : 0;
}
