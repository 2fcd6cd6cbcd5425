/*
 * Fuzz target for the files API's path handling (src/execd/files_path.c): normalization of a
 * client path and its resolution inside a root full of escaping symlinks.
 *
 * Input: the first byte picks the open flags, the rest is the client path. Checks: a normalized
 * path is absolute and clean (no empty, "." or ".." component, no trailing slash, at most
 * FPATH_DEPTH_MAX components) and normalizing it again changes nothing; resolution never opens
 * anything outside the root (the fixture's outside directory and secret, the host's / and /etc),
 * and openat2 and the user-space walk agree on whether the path opens and on what it opens.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "execd/files_path.h"
#include "shared/fsutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char top[PATH_MAX];
static int rootfd = -1;
static bool have_openat2;
static struct stat forbidden[4];
static size_t nforbidden;

static void cleanup(void)
{
	if (top[0])
		fs_remove_tree(top);
}

static void put(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, content, strlen(content)) < 0)
		abort();
	close(fd);
}

static void mk(const char *rel, const char *target)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/root/%s", top, rel);
	if (target ? symlink(target, p) < 0 : mkdir(p, 0755) < 0)
		abort();
}

static void forbid(const char *path)
{
	if (stat(path, &forbidden[nforbidden]) == 0)
		nforbidden++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(top, sizeof(top), "/tmp/fuzz-fpath-XXXXXX");
	if (!mkdtemp(top))
		abort();
	atexit(cleanup);
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/outside", top);
	mkdir(p, 0755);
	forbid(p);
	snprintf(p, sizeof(p), "%s/outside/secret", top);
	put(p, "host secret");
	forbid(p);
	forbid("/");
	forbid("/etc");
	snprintf(p, sizeof(p), "%s/root", top);
	mkdir(p, 0755);
	rootfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	mk("etc", NULL);
	mk("d", NULL);
	mk("d/sub", NULL);
	snprintf(p, sizeof(p), "%s/root/etc/passwd", top);
	put(p, "inroot");
	snprintf(p, sizeof(p), "%s/root/d/sub/f", top);
	put(p, "deep");
	snprintf(p, sizeof(p), "%s/outside", top);
	mk("abs_etc", "/etc");
	mk("abs_out", p);
	mk("dotdot", "../../../../../../../outside");
	mk("d/sub/chain", "../../../../outside/secret");
	mk("d/up", "../../..");
	mk("loop1", "loop2");
	mk("loop2", "loop1");
	mk("self", "self");
	mk("linkdir", "d");
	mk("escape_parent", "..");
	mk("dangle", "/newfile");
	mk("proc_root", "/proc/self/root");
	mk("fd", "/proc/self/fd/3");
	fpath_set_mode(FPATH_AUTO);
	have_openat2 = fpath_using_openat2();
	return 0;
}

static const int flag_sets[] = {
    O_RDONLY,
    O_PATH,
    O_PATH | O_NOFOLLOW,
    O_PATH | O_DIRECTORY,
    O_RDONLY | O_DIRECTORY,
    O_RDONLY | O_NOFOLLOW,
};

static void check_normalized(const char *s)
{
	size_t n = strlen(s);
	if (s[0] != '/' || (n > 1 && s[n - 1] == '/') || strstr(s, "//") || strstr(s, "/./") ||
	    strstr(s, "/../") || (n >= 2 && strcmp(s + n - 2, "/.") == 0) ||
	    (n >= 3 && strcmp(s + n - 3, "/..") == 0))
		abort();
	size_t depth = 0;
	for (const char *p = s; *p; p++)
		depth += *p == '/' && p[1];
	if (depth > FPATH_DEPTH_MAX)
		abort();
}

/* Resolve with one mode: -errno, or 0 with the identity of what was opened. */
static int resolve(enum fpath_mode mode, const char *path, int flags, struct stat *st)
{
	fpath_set_mode(mode);
	int fd = -1;
	int r = fpath_open(rootfd, path, flags, 0, &fd);
	if (r == 0) {
		if (fd < 0 || fstat(fd, st) < 0)
			abort();
		for (size_t i = 0; i < nforbidden; i++)
			if (st->st_dev == forbidden[i].st_dev && st->st_ino == forbidden[i].st_ino)
				abort(); /* escaped the root */
		close(fd);
	}
	int dfd = -1;
	const char *name;
	if (fpath_open_parent(rootfd, path, &dfd, &name) == 0) {
		struct stat dst;
		if (fstat(dfd, &dst) < 0 || !S_ISDIR(dst.st_mode) || strchr(name, '/'))
			abort();
		for (size_t i = 0; i < nforbidden; i++)
			if (dst.st_dev == forbidden[i].st_dev && dst.st_ino == forbidden[i].st_ino)
				abort();
		close(dfd);
	}
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 2 * PATH_MAX)
		return 0;
	int flags = flag_sets[data[0] % (sizeof(flag_sets) / sizeof(flag_sets[0]))];
	char in[2 * PATH_MAX + 1];
	memcpy(in, data + 1, size - 1);
	in[size - 1] = '\0';

	char out[PATH_MAX], again[PATH_MAX];
	if (fpath_normalize(in, "/home/u", out, sizeof(out)) < 0)
		return 0;
	check_normalized(out);
	if (fpath_normalize(out, "/home/u", again, sizeof(again)) < 0 || strcmp(out, again) != 0)
		abort();

	struct stat a, b;
	int rb = resolve(FPATH_FALLBACK, out, flags, &b);
	if (have_openat2) {
		int ra = resolve(FPATH_OPENAT2, out, flags, &a);
		if ((ra == 0) != (rb == 0))
			abort();
		if (ra == 0 && (a.st_dev != b.st_dev || a.st_ino != b.st_ino))
			abort();
	}
	fpath_set_mode(FPATH_AUTO);
	return 0;
}
