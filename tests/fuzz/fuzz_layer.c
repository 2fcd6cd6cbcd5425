/*
 * Fuzz target for the layer unpacker (images/layer.c): a tar (plain, gzip or zstd) as a registry
 * could send it, unpacked into a fresh directory. The contract beyond "never crashes": whatever
 * the bytes, nothing appears outside the layer directory (a sibling "outside" directory, which
 * seeds aim at with "..", symlinks, hard links and whiteouts, stays empty), and a layer that
 * fails leaves nothing the caller must know about beyond its own directory.
 *
 * Runs as root in practice (owners are restored); as another user chown fails and inputs with
 * owners are refused, which is fine for the invariant.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "images/images.h"
#include "shared/fsutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[] = "/tmp/corral-fuzz-layer-XXXXXX";

/* The scratch directory goes with the process (replay and libFuzzer alike). */
__attribute__((destructor)) static void remove_base(void)
{
	if (base[sizeof(base) - 2] != 'X')
		fs_remove_tree(base);
}

static size_t entries(const char *path)
{
	DIR *d = opendir(path);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char blob[64], layer[64], outside[64];
	if (base[sizeof(base) - 2] == 'X' && !mkdtemp(base))
		abort();
	snprintf(blob, sizeof(blob), "%s/blob", base);
	snprintf(layer, sizeof(layer), "%s/layer", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	if (mkdir(outside, 0755) < 0 && errno != EEXIST)
		abort();
	int fd = open(blob, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	if (mkdir(layer, 0755) < 0)
		abort();
	struct error err = {0};
	/* A small budget: a gzip bomb among the inputs stops at it instead of filling /tmp. */
	uint64_t counted[2] = {0, 0};
	struct image_budget budget = {.max_bytes = 64 << 20, .max_entries = 100000,
				      .bytes = &counted[0], .entries = &counted[1]};
	(void)image_layer_unpack(blob, layer, &budget, &err);
	/* The invariant: the base holds blob, layer and an empty outside, nothing else. */
	if (entries(outside) != 0 || entries(base) != 3)
		abort();
	if (fs_remove_tree(layer) < 0)
		abort();
	return 0;
}
