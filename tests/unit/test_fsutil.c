/* Unit tests for src/shared/fsutil.c: atomic writes, bounded reads, mkdir -p, mount-safe rm -rf. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "shared/fsutil.h"

static char root[PATH_MAX];

static const char *P(const char *rel)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, PATH_MAX, "%s/%s", root, rel);
	return b;
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void write_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "we");
	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(s, f);
	fclose(f);
}

static void test_write_atomic(void)
{
	const char *f = P("atomic.json");
	CHECK_INT(fs_write_atomic(f, "{\"a\":1}", 7, 0640), 0);
	char *buf = NULL;
	size_t len = 0;
	CHECK_INT(fs_read_file(f, 1024, &buf, &len), 0);
	CHECK_U64(len, 7);
	CHECK_STR(buf, "{\"a\":1}");
	free(buf);
	struct stat st;
	CHECK_INT(stat(f, &st), 0);
	CHECK_INT(st.st_mode & 0777, 0640 & ~0022 & 0777);

	/* Replacing keeps exactly one file and leaves no temporary behind. */
	CHECK_INT(fs_write_atomic(f, "xy", 2, 0640), 0);
	CHECK_INT(fs_read_file(f, 1024, &buf, &len), 0);
	CHECK_STR(buf, "xy");
	free(buf);
	CHECK_INT(count_entries(root), 1);

	/* Empty content is a valid (empty) file. */
	CHECK_INT(fs_write_atomic(f, "", 0, 0600), 0);
	CHECK_INT(fs_read_file(f, 1024, &buf, &len), 0);
	CHECK_U64(len, 0);
	CHECK_STR(buf, "");
	free(buf);

	/* Missing directory: an error, and no stray files. */
	CHECK_INT(fs_write_atomic(P("nope/x"), "a", 1, 0600), -ENOENT);
	CHECK_INT(count_entries(root), 1);
	CHECK_INT(unlink(f), 0);
}

static void test_read_limits(void)
{
	const char *f = P("big");
	char *data = malloc(10000);
	for (int i = 0; i < 10000; i++)
		data[i] = (char)('a' + i % 26);
	CHECK_INT(fs_write_atomic(f, data, 10000, 0600), 0);

	char *buf = NULL;
	size_t len = 0;
	CHECK_INT(fs_read_file(f, 10000, &buf, &len), 0); /* exactly the limit fits */
	CHECK_U64(len, 10000);
	CHECK(buf && memcmp(buf, data, 10000) == 0 && buf[10000] == '\0');
	free(buf);
	buf = NULL;
	CHECK_INT(fs_read_file(f, 1 << 20, &buf, &len), 0);
	CHECK_U64(len, 10000);
	free(buf);
	buf = NULL;
	CHECK_INT(fs_read_file(f, 9999, &buf, &len), -EFBIG);
	CHECK(buf == NULL);
	CHECK_INT(fs_read_file(f, 100, &buf, &len), -EFBIG); /* a limit below one read chunk */
	CHECK(buf == NULL);
	free(buf);

	CHECK_INT(fs_write_atomic(f, data, 4096, 0600), 0);
	CHECK_INT(fs_read_file(f, 4096, &buf, &len), 0);
	CHECK_U64(len, 4096);
	free(buf);
	buf = NULL;
	CHECK_INT(fs_read_file(f, 4095, &buf, &len), -EFBIG);
	CHECK_INT(fs_write_atomic(f, data, 100, 0600), 0);
	CHECK_INT(fs_read_file(f, 100, &buf, &len), 0);
	CHECK_U64(len, 100);
	free(buf);
	buf = NULL;
	CHECK_INT(fs_read_file(f, 99, &buf, &len), -EFBIG);
	CHECK_INT(fs_read_file(P("missing"), 100, &buf, &len), -ENOENT);
	/* ret_len is optional */
	CHECK_INT(fs_read_file(f, 100, &buf, NULL), 0);
	free(buf);

	/* fs_read_small strips trailing newlines and truncates to the buffer. */
	write_file(f, "max 123\n\n");
	char small[64];
	CHECK_INT(fs_read_small(f, small, sizeof(small)), 0);
	CHECK_STR(small, "max 123");
	char tiny[4];
	CHECK_INT(fs_read_small(f, tiny, sizeof(tiny)), 0);
	CHECK_STR(tiny, "max");
	CHECK_INT(fs_read_small(P("missing"), small, sizeof(small)), -ENOENT);

	/* fs_read_u64: a decimal, or "max" as UINT64_MAX (cgroup limits). */
	uint64_t v = 0;
	write_file(f, "123\n");
	CHECK_INT(fs_read_u64(f, &v), 0);
	CHECK_U64(v, 123);
	write_file(f, "max\n");
	CHECK_INT(fs_read_u64(f, &v), 0);
	CHECK_U64(v, UINT64_MAX);
	write_file(f, "lots");
	CHECK_INT(fs_read_u64(f, &v), -EINVAL);
	write_file(f, "99999999999999999999999");
	CHECK_INT(fs_read_u64(f, &v), -EINVAL);
	CHECK_INT(fs_read_u64(P("missing"), &v), -ENOENT);

	/* fs_write_string writes to an existing file only, without truncating (like a cgroup knob). */
	write_file(f, "");
	CHECK_INT(fs_write_string(f, "12345"), 0);
	CHECK_INT(fs_read_small(f, small, sizeof(small)), 0);
	CHECK_STR(small, "12345");
	CHECK_INT(fs_write_string(P("missing"), "1"), -ENOENT);
	CHECK(!exists(P("missing")));
	unlink(f);
	free(data);
}

static void test_read_keyed(void)
{
	const char *f = P("keyed");
	char text[2048];
	int n = snprintf(text, sizeof(text), "usage_usec 17\nusage 5\nMemTotal:       16318412 kB\n%0*d "
			 "99\nnr_periods 3\n", 1000, 0);
	CHECK_INT(fs_write_atomic(f, text, (size_t)n, 0600), 0);
	uint64_t v = 0;
	CHECK_INT(fs_read_keyed_u64(f, "usage", &v), 0);
	CHECK_U64(v, 5); /* "usage_usec" is another key */
	CHECK_INT(fs_read_keyed_u64(f, "usage_usec", &v), 0);
	CHECK_U64(v, 17);
	CHECK_INT(fs_read_keyed_u64(f, "MemTotal:", &v), 0);
	CHECK_U64(v, 16318412);
	CHECK_INT(fs_read_keyed_u64(f, "nr_periods", &v), 0); /* after a 1000-byte line */
	CHECK_U64(v, 3);
	CHECK_INT(fs_read_keyed_u64(f, "0000", &v), -ENOENT); /* no piece of a long line is a line */
	CHECK_INT(fs_read_keyed_u64(f, "nr_throttled", &v), -ENOENT);
	CHECK_INT(fs_read_keyed_u64(P("absent"), "usage", &v), -ENOENT);
}

static void test_mkdir_p(void)
{
	CHECK_INT(fs_mkdir_p(P("m/a/b/c"), 0755), 0);
	struct stat st;
	CHECK_INT(stat(P("m/a/b/c"), &st), 0);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_INT(fs_mkdir_p(P("m/a/b/c"), 0755), 0); /* existing is fine */
	CHECK_INT(fs_mkdir_p(P("m/a/b/c/"), 0755), 0);
	CHECK_INT(fs_mkdir_p(P("m//a///d/"), 0700), 0);
	CHECK_INT(stat(P("m/a/d"), &st), 0);
	CHECK_INT(st.st_mode & 0777, 0700);
	write_file(P("m/file"), "x");
	CHECK_INT(fs_mkdir_p(P("m/file"), 0755), -ENOTDIR);
	CHECK_INT(fs_mkdir_p(P("m/file/sub"), 0755), -ENOTDIR);
	CHECK_INT(fs_mkdir_p("/", 0755), 0);
	CHECK_INT(fs_mkdir_p("", 0755), -ENOENT);
	char longp[PATH_MAX + 10];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	CHECK_INT(fs_mkdir_p(longp, 0755), -ENAMETOOLONG);
	CHECK_INT(fs_remove_tree(P("m")), 0);
	CHECK(!exists(P("m")));
}

static void test_remove_tree(void)
{
	CHECK_INT(fs_mkdir_p(P("t/a/b/c"), 0755), 0);
	CHECK_INT(fs_mkdir_p(P("t/empty"), 0755), 0);
	write_file(P("t/f"), "1");
	write_file(P("t/a/b/c/g"), "2");
	CHECK_INT(symlink("/", P("t/a/rootlink")), 0);           /* never followed */
	CHECK_INT(symlink(root, P("t/a/b/uplink")), 0);
	CHECK_INT(chmod(P("t/a/b"), 0500), 0);                     /* root ignores it; others fail */
	if (geteuid() != 0)
		chmod(P("t/a/b"), 0755);
	CHECK_INT(fs_remove_tree(P("t")), 0);
	CHECK(!exists(P("t")));
	CHECK(exists(root)); /* the uplink target survived */
	CHECK_INT(fs_remove_tree(P("t")), 0); /* missing is success */
	write_file(P("plain"), "x");
	CHECK_INT(fs_remove_tree(P("plain")), 0); /* a plain file is removed */
	CHECK(!exists(P("plain")));
	CHECK_INT(symlink(root, P("link")), 0);
	CHECK_INT(fs_remove_tree(P("link")), 0); /* a symlink is removed, not followed */
	CHECK(!exists(P("link")));
	CHECK(exists(root));
}

/* Build a chain of depth directories named "d" below dir (relative, so no PATH_MAX). */
static int make_chain(const char *dir, int depth, int *ret_deepest)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < depth && fd >= 0; i++) {
		if (mkdirat(fd, "d", 0755) < 0 && errno != EEXIST) {
			close(fd);
			return -errno;
		}
		int nfd = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		close(fd);
		fd = nfd;
	}
	if (fd < 0)
		return -errno;
	if (ret_deepest)
		*ret_deepest = fd;
	else
		close(fd);
	return 0;
}

/*
 * A sandbox can build a tree deeper than any stack or fd budget (issue 8: teardown failed forever
 * with EMFILE on a 60,000-level tree). It goes in bounded steps, files and side branches included.
 */
static void test_remove_deep_tree(void)
{
	CHECK_INT(fs_mkdir_p(P("deep"), 0755), 0);
	int fd = -1;
	CHECK_INT(make_chain(P("deep"), 3000, &fd), 0);
	if (fd >= 0) {
		CHECK(mkdirat(fd, "leafdir", 0755) == 0);
		int ffd = openat(fd, "leaf", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		CHECK(ffd >= 0);
		close(ffd);
		close(fd);
	}
	/* Entries at the top that look like the ones it moves up are not in the way. */
	CHECK_INT(fs_mkdir_p(P("deep/.corral-rm-0/x"), 0755), 0);
	CHECK_INT(make_chain(P("deep/.corral-rm-0"), 300, NULL), 0);
	struct rlimit old, low = {256, 256};
	getrlimit(RLIMIT_NOFILE, &old);
	setrlimit(RLIMIT_NOFILE, &low); /* more open directories than this would fail */
	CHECK_INT(fs_remove_tree(P("deep")), 0);
	setrlimit(RLIMIT_NOFILE, &old);
	CHECK(!exists(P("deep")));
}

/*
 * The safety property: fs_remove_tree never descends into another mount, whether that mount is a
 * different file system (tmpfs, new st_dev) or a bind mount of the same one (same st_dev, different
 * mount id). Runs in a private mount namespace so nothing can leak onto the host.
 */
static void test_remove_tree_mounts(void)
{
	if (geteuid() != 0) {
		printf("test_fsutil: SKIP mount-point checks (needs root)\n");
		return;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		printf("test_fsutil: SKIP mount-point checks (no mount namespace: %s)\n",
		       strerror(errno));
		return;
	}
	/* Content that must survive: a directory outside the tree, bind-mounted into it. */
	CHECK_INT(fs_mkdir_p(P("keep/sub"), 0755), 0);
	write_file(P("keep/sub/precious"), "bind");
	write_file(P("keepfile"), "file");

	CHECK_INT(fs_mkdir_p(P("t/x/tmpfs"), 0755), 0);
	CHECK_INT(fs_mkdir_p(P("t/y/bind"), 0755), 0);
	write_file(P("t/y/bindfile"), "");
	write_file(P("t/other"), "removable");
	CHECK_INT(mount("corral-test", P("t/x/tmpfs"), "tmpfs", 0, "size=1m"), 0);
	write_file(P("t/x/tmpfs/precious"), "tmpfs");
	CHECK_INT(mount(P("keep"), P("t/y/bind"), NULL, MS_BIND, NULL), 0);
	CHECK_INT(mount(P("keepfile"), P("t/y/bindfile"), NULL, MS_BIND, NULL), 0);

	CHECK_INT(fs_remove_tree(P("t")), -EBUSY);
	char buf[64];
	CHECK_INT(fs_read_small(P("t/x/tmpfs/precious"), buf, sizeof(buf)), 0);
	CHECK_STR(buf, "tmpfs");
	CHECK_INT(fs_read_small(P("keep/sub/precious"), buf, sizeof(buf)), 0);
	CHECK_STR(buf, "bind");
	CHECK_INT(fs_read_small(P("t/y/bind/sub/precious"), buf, sizeof(buf)), 0);
	CHECK_STR(buf, "bind");
	CHECK_INT(fs_read_small(P("keepfile"), buf, sizeof(buf)), 0);
	CHECK_STR(buf, "file");
	CHECK(!exists(P("t/other"))); /* everything not under a mount went */

	/* Only the bind mount left: same device, so only the mount id can tell. */
	CHECK_INT(umount2(P("t/x/tmpfs"), MNT_DETACH), 0);
	CHECK_INT(umount2(P("t/y/bindfile"), MNT_DETACH), 0);
	CHECK_INT(fs_remove_tree(P("t")), -EBUSY);
	CHECK_INT(fs_read_small(P("keep/sub/precious"), buf, sizeof(buf)), 0);
	CHECK_STR(buf, "bind");
	CHECK(!exists(P("t/x")));

	CHECK_INT(umount2(P("t/y/bind"), MNT_DETACH), 0);
	CHECK_INT(fs_remove_tree(P("t")), 0);

	/* Below the depth where directories are moved up, a mount point is still never entered. */
	int fd = -1;
	CHECK_INT(fs_mkdir_p(P("t"), 0755), 0);
	CHECK_INT(make_chain(P("t"), 200, &fd), 0);
	if (fd >= 0) {
		CHECK(mkdirat(fd, "m", 0755) == 0);
		char proc[64];
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d/m", fd);
		CHECK_INT(mount(P("keep"), proc, NULL, MS_BIND, NULL), 0);
		CHECK_INT(fs_remove_tree(P("t")), -EBUSY);
		CHECK(exists(P("keep/sub/precious")));
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d/m", fd);
		CHECK_INT(umount2(proc, MNT_DETACH), 0);
		close(fd);
	}
	CHECK_INT(fs_remove_tree(P("t")), 0);
	CHECK(!exists(P("t")));
	CHECK(exists(P("keep/sub/precious")));
	CHECK_INT(fs_remove_tree(P("keep")), 0);
	unlink(P("keepfile"));
}

int main(void)
{
	snprintf(root, sizeof(root), "%s/corral-test-fsutil-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 2;
	}
	umask(0022);
	test_write_atomic();
	test_read_limits();
	test_read_keyed();
	test_mkdir_p();
	test_remove_tree();
	test_remove_deep_tree();
	test_remove_tree_mounts();
	int r = fs_remove_tree(root);
	if (r < 0)
		fprintf(stderr, "cleanup of %s: %s\n", root, strerror(-r));
	return check_summary("test_fsutil");
}
