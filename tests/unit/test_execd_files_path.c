/*
 * Unit tests for src/execd/files_path.c (and users.c): path normalization, and resolution inside a
 * temp-dir root with planted escaping symlinks (absolute links, ../ chains, loops, a symlinked
 * parent directory, dangling links used with O_CREAT), run once with openat2 and once with the
 * user-space fallback walk, which must agree.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "execd/files_path.h"
#include "execd/users.h"
#include "shared/fsutil.h"

static char top[PATH_MAX], rootdir[PATH_MAX], outside[PATH_MAX];

static const char *R(const char *rel)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, PATH_MAX, "%s/%s", rootdir, rel);
	return b;
}

static void put(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, content, strlen(content)) < 0)
		perror(path);
	close(fd);
}

static void link_(const char *target, const char *rel)
{
	if (symlink(target, R(rel)) < 0)
		perror(rel);
}

static void setup(void)
{
	snprintf(top, sizeof(top), "/tmp/test-fpath-XXXXXX");
	if (!mkdtemp(top))
		abort();
	snprintf(rootdir, sizeof(rootdir), "%s/root", top);
	snprintf(outside, sizeof(outside), "%s/outside", top);
	mkdir(rootdir, 0755);
	mkdir(outside, 0755);
	put(R("../outside/secret"), "host secret");
	mkdir(R("etc"), 0755);
	put(R("etc/passwd"), "inroot");
	mkdir(R("d"), 0755);
	mkdir(R("d/sub"), 0755);
	put(R("d/sub/f"), "deep");
	link_("/etc", "abs_etc");			 /* absolute: must mean <root>/etc */
	link_(outside, "abs_out");			 /* absolute path of a host dir */
	link_("../../../../../../../outside", "dotdot"); /* climbs past the root */
	link_("../../../../outside/secret", "d/sub/chain");
	link_("../../..", "d/up");
	link_("loop2", "loop1");
	link_("loop1", "loop2");
	link_("self", "self");
	link_("d", "linkdir"); /* a symlinked parent directory */
	link_("..", "escape_parent");
	link_("/newfile", "dangle");
	link_("/tmp", "abs_tmp");
	link_("/proc/self/root", "proc_root");
}

static int read_at(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

/* Open path in the root and return its content in buf, or the negative errno. */
static int cat(int rootfd, const char *path, char *buf, size_t len)
{
	int fd = -1;
	int r = fpath_open(rootfd, path, O_RDONLY, 0, &fd);
	if (r < 0)
		return r;
	r = read_at(fd, buf, len);
	close(fd);
	return r;
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static void test_normalize(void)
{
	char out[PATH_MAX];
	CHECK_INT(fpath_normalize("/a/b", "/root", out, sizeof(out)), 0);
	CHECK_STR(out, "/a/b");
	CHECK_INT(fpath_normalize("/a//b/./c/", "/root", out, sizeof(out)), 0);
	CHECK_STR(out, "/a/b/c");
	CHECK_INT(fpath_normalize("/../../etc", "/root", out, sizeof(out)), 0);
	CHECK_STR(out, "/etc");
	CHECK_INT(fpath_normalize("/a/../../b/..", "/root", out, sizeof(out)), 0);
	CHECK_STR(out, "/");
	CHECK_INT(fpath_normalize("rel/x", "/root", out, sizeof(out)), 0);
	CHECK_STR(out, "/rel/x");
	CHECK_INT(fpath_normalize("~", "/home/u", out, sizeof(out)), 0);
	CHECK_STR(out, "/home/u");
	CHECK_INT(fpath_normalize("~/x/../y", "/home/u", out, sizeof(out)), 0);
	CHECK_STR(out, "/home/u/y");
	CHECK_INT(fpath_normalize("~/../../..", "/home/u", out, sizeof(out)), 0);
	CHECK_STR(out, "/");
	CHECK_INT(fpath_normalize("~user", "/home/u", out, sizeof(out)), 0);
	CHECK_STR(out, "/~user");
	CHECK_INT(fpath_normalize("", "/root", out, sizeof(out)), -EINVAL);
	CHECK_INT(fpath_normalize("/abcdef", "/", out, 4), -ENAMETOOLONG);
	/* Depth is bounded: 256 components, not the 2,000 a PATH_MAX path can hold. */
	char deep[2 * 2000 + 1] = "";
	for (int i = 0; i < FPATH_DEPTH_MAX; i++)
		strcat(deep, "/a");
	CHECK_INT(fpath_normalize(deep, "/root", out, sizeof(out)), 0);
	strcat(deep, "/a");
	CHECK_INT(fpath_normalize(deep, "/root", out, sizeof(out)), -E2BIG);
	strcat(deep, "/..");
	CHECK_INT(fpath_normalize(deep + 2, "/root", out, sizeof(out)), 0);
	for (int i = 0; i < 1500; i++)
		strcat(deep, "/a");
	CHECK_INT(fpath_normalize(deep, "/root", out, sizeof(out)), -E2BIG);
	CHECK_INT(fpath_normalize("/../../../../../../../../../../../../etc", "/", out, sizeof(out)), 0);
}

static void test_resolution(const char *mode_name)
{
	char buf[256];
	int rootfd = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int fd = -1;
	fprintf(stderr, "-- resolution with %s\n", mode_name);

	CHECK_INT(cat(rootfd, "/etc/passwd", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "inroot");
	CHECK_INT(cat(rootfd, "/abs_etc/passwd", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "inroot");
	CHECK_INT(cat(rootfd, "/d/up/etc/passwd", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "inroot");
	CHECK_INT(cat(rootfd, "/linkdir/sub/f", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "deep");
	CHECK_INT(cat(rootfd, "/", buf, sizeof(buf)), -EISDIR);

	/* Escapes: every one of these names the host's outside/secret one way or another. */
	CHECK_INT(cat(rootfd, "/abs_out/secret", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/dotdot/secret", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/d/sub/chain", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/escape_parent/outside/secret", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/../outside/secret", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/proc_root/etc/passwd", buf, sizeof(buf)), -ENOENT);
	CHECK_INT(cat(rootfd, "/loop1", buf, sizeof(buf)), -ELOOP);
	CHECK_INT(cat(rootfd, "/self/x", buf, sizeof(buf)), -ELOOP);
	CHECK_INT(cat(rootfd, "/etc/passwd/x", buf, sizeof(buf)), -ENOTDIR);

	/* A decoy inside the root proves the escaping chain is resolved in it. */
	mkdir(R("outside"), 0755);
	put(R("outside/secret"), "decoy");
	CHECK_INT(cat(rootfd, "/d/sub/chain", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "decoy");
	CHECK_INT(cat(rootfd, "/dotdot/secret", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "decoy");
	CHECK_INT(cat(rootfd, "/escape_parent/outside/secret", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "decoy");
	unlink(R("outside/secret"));
	rmdir(R("outside"));

	/* O_NOFOLLOW: the link itself with O_PATH, ELOOP otherwise. */
	CHECK_INT(fpath_open(rootfd, "/abs_etc", O_PATH | O_NOFOLLOW, 0, &fd), 0);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode));
	close(fd);
	CHECK_INT(fpath_open(rootfd, "/abs_etc", O_RDONLY | O_NOFOLLOW, 0, &fd), -ELOOP);
	CHECK_INT(fpath_open(rootfd, "/abs_etc", O_PATH | O_DIRECTORY, 0, &fd), 0);
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode));
	close(fd);
	CHECK_INT(fpath_open(rootfd, "/etc/passwd", O_PATH | O_DIRECTORY, 0, &fd), -ENOTDIR);

	/* O_CREAT through a dangling absolute link creates the target inside the root. */
	CHECK_INT(fpath_open(rootfd, "/dangle", O_WRONLY | O_CREAT | O_TRUNC, 0600, &fd), 0);
	close(fd);
	CHECK(exists(R("newfile")));
	unlink(R("newfile"));
	char hostpath[64];
	snprintf(hostpath, sizeof(hostpath), "/tmp/fpath-created-%d", (int)getpid());
	char inroot[PATH_MAX];
	snprintf(inroot, sizeof(inroot), "/abs_tmp/fpath-created-%d", (int)getpid());
	CHECK_INT(fpath_open(rootfd, inroot, O_WRONLY | O_CREAT, 0600, &fd), -ENOENT);
	CHECK(!exists(hostpath));
	CHECK_INT(fpath_open(rootfd, "/etc/passwd", O_WRONLY | O_CREAT | O_EXCL, 0600, &fd),
		  -EEXIST);

	/* Parents. */
	const char *name = NULL;
	CHECK_INT(fpath_open_parent(rootfd, "/abs_etc/passwd", &fd, &name), 0);
	CHECK_STR(name, "passwd");
	CHECK(fd >= 0 && fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode));
	close(fd);
	CHECK_INT(fpath_open_parent(rootfd, "/dotdot/secret", &fd, &name), -ENOENT);
	CHECK_INT(fpath_open_parent(rootfd, "/", &fd, &name), -EINVAL);
	CHECK_INT(fpath_open_parent(rootfd, "/x", &fd, &name), 0);
	CHECK_STR(name, "x");
	close(fd);

	/* mkdir -p through symlinks stays inside. */
	bool created = false;
	CHECK_INT(fpath_mkdir_p(rootfd, "/abs_etc/m1/m2", 0755, (uid_t)-1, (gid_t)-1, &created), 0);
	CHECK(created);
	CHECK(exists(R("etc/m1/m2")));
	CHECK_INT(fpath_mkdir_p(rootfd, "/abs_etc/m1/m2", 0755, (uid_t)-1, (gid_t)-1, &created), 0);
	CHECK(!created);
	CHECK_INT(fpath_mkdir_p(rootfd, "/escape_parent/zz", 0755, (uid_t)-1, (gid_t)-1, NULL), 0);
	CHECK(exists(R("zz")));
	CHECK(!exists(R("../zz")));
	CHECK_INT(fpath_mkdir_p(rootfd, "/etc/passwd/x", 0755, (uid_t)-1, (gid_t)-1, NULL),
		  -ENOTDIR);
	CHECK_INT(fpath_mkdir_p(rootfd, "/loop1/x", 0755, (uid_t)-1, (gid_t)-1, NULL), -ELOOP);
	CHECK_INT(fpath_mkdir_p(rootfd, "/", 0755, (uid_t)-1, (gid_t)-1, NULL), 0);
	fs_remove_tree(R("etc/m1"));
	rmdir(R("zz"));

	/* chmod/chown on O_PATH fds act on the resolved target, never the host's. */
	CHECK_INT(fpath_open(rootfd, "/abs_etc/passwd", O_PATH, 0, &fd), 0);
	CHECK_INT(fpath_fchmod(fd, 0600), 0);
	CHECK_INT(fpath_fchown(fd, 65534, 65534), 0);
	close(fd);
	CHECK(stat(R("etc/passwd"), &st) == 0 && (st.st_mode & 07777) == 0600 &&
	      st.st_uid == 65534);
	chmod(R("etc/passwd"), 0644);
	CHECK(chown(R("etc/passwd"), 0, 0) == 0);
	CHECK(stat("/etc/passwd", &st) == 0 && (st.st_mode & 0777) == 0644 && st.st_uid == 0);

	/* Never anything written outside. */
	CHECK(!exists("/newfile"));
	CHECK_INT(cat(rootfd, "/etc/passwd", buf, sizeof(buf)), 0);
	close(rootfd);
}

/*
 * Magic links: with procfs mounted inside the root (as in every sandbox), links the workload plants
 * to /proc/self/fd/N, /proc/self/root or /proc/<pid>/cwd, or those paths named directly, would let
 * PID 1 reach its own descriptors and the host's root. Both resolvers must refuse them.
 */
static void test_magic_links(const char *mode_name, int secretfd)
{
	char buf[256], target[PATH_MAX];
	int rootfd = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int fd = -1;
	fprintf(stderr, "-- magic links with %s\n", mode_name);

	snprintf(target, sizeof(target), "/proc/self/fd/%d", secretfd);
	CHECK(cat(rootfd, target, buf, sizeof(buf)) < 0);
	CHECK(cat(rootfd, "/magic_fd", buf, sizeof(buf)) < 0);
	CHECK(cat(rootfd, "/magic_root", buf, sizeof(buf)) < 0);
	CHECK(cat(rootfd, "/magic_cwd/outside/secret", buf, sizeof(buf)) < 0);
	CHECK(cat(rootfd, "/magic_dir/secret", buf, sizeof(buf)) < 0);
	snprintf(target, sizeof(target), "/proc/self/root%s/outside/secret", top);
	CHECK(cat(rootfd, target, buf, sizeof(buf)) < 0);
	/* Writes and creates through them touch nothing. */
	CHECK(fpath_open(rootfd, "/magic_fd", O_WRONLY | O_TRUNC, 0, &fd) < 0);
	CHECK(fpath_open(rootfd, "/magic_dir/new", O_WRONLY | O_CREAT, 0600, &fd) < 0);
	CHECK(fpath_mkdir_p(rootfd, "/magic_dir/m", 0755, (uid_t)-1, (gid_t)-1, NULL) < 0);
	const char *name;
	CHECK(fpath_open_parent(rootfd, "/magic_dir/x", &fd, &name) < 0);
	char hostbuf[64];
	snprintf(target, sizeof(target), "%s/secret", outside);
	int hfd = open(target, O_RDONLY | O_CLOEXEC);
	CHECK(read_at(hfd, hostbuf, sizeof(hostbuf)) == 0);
	CHECK_STR(hostbuf, "host secret");
	close(hfd);
	snprintf(target, sizeof(target), "%s/new", outside);
	CHECK(!exists(target));
	snprintf(target, sizeof(target), "%s/m", outside);
	CHECK(!exists(target));
	/* Ordinary procfs entries (not magic links) still resolve, in the root's own /proc. */
	CHECK_INT(fpath_open(rootfd, "/proc/self/status", O_RDONLY, 0, &fd), 0);
	close(fd);
	close(rootfd);
}

static void test_magic(void)
{
	/* A private mount namespace for this process, with procfs inside the root. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		fprintf(stderr, "-- magic links: skipped (no mount namespace: %s)\n", strerror(errno));
		return;
	}
	mkdir(R("proc"), 0555);
	if (mount("proc", R("proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		fprintf(stderr, "-- magic links: skipped (mount proc: %s)\n", strerror(errno));
		return;
	}
	char target[PATH_MAX];
	snprintf(target, sizeof(target), "%s/secret", outside);
	int secretfd = open(target, O_RDWR | O_CLOEXEC);
	int dirfd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (chdir(top) < 0)
		perror("chdir");
	CHECK(secretfd >= 0 && dirfd >= 0);
	snprintf(target, sizeof(target), "/proc/self/fd/%d", secretfd);
	link_(target, "magic_fd");
	snprintf(target, sizeof(target), "/proc/self/fd/%d", dirfd);
	link_(target, "magic_dir");
	snprintf(target, sizeof(target), "/proc/self/root%s/outside/secret", top);
	link_(target, "magic_root");
	snprintf(target, sizeof(target), "/proc/%d/cwd", (int)getpid());
	link_(target, "magic_cwd");
	fpath_set_mode(FPATH_AUTO);
	if (fpath_using_openat2()) {
		fpath_set_mode(FPATH_OPENAT2);
		test_magic_links("openat2", secretfd);
	}
	fpath_set_mode(FPATH_FALLBACK);
	test_magic_links("fallback walk", secretfd);
	fpath_set_mode(FPATH_AUTO);
	if (chdir("/") < 0)
		perror("chdir");
	umount2(R("proc"), MNT_DETACH);
	rmdir(R("proc"));
	close(secretfd);
	close(dirfd);
}

static void test_users(void)
{
	char pw[PATH_MAX], gr[PATH_MAX], name[64];
	snprintf(pw, sizeof(pw), "%s/passwd", top);
	snprintf(gr, sizeof(gr), "%s/group", top);
	put(pw,
	    "root:x:0:0:root:/root:/bin/bash\n# comment\n\nbroken line\n"
	    "alice:x:1000:1001:Alice:/home/alice:/bin/sh\r\n"
	    "bad:x:notanumber:1:x:/:/bin/sh\nnobody:x:65534:65534::/nonexistent:/usr/sbin/nologin");
	put(gr, "root:x:0:\nstaff:x:1001:alice,bob\ndev:x:1002:bob,alice\nnogroup:x:65534:\n");
	users_set_files(pw, gr);
	uid_t u;
	gid_t g;
	CHECK_INT(users_uid_by_name("alice", &u), 0);
	CHECK_INT(u, 1000);
	CHECK_INT(users_uid_by_name("nobody", &u), 0);
	CHECK_INT(u, 65534);
	CHECK_INT(users_uid_by_name("4242", &u), 0); /* numeric without a line */
	CHECK_INT(u, 4242);
	CHECK_INT(users_uid_by_name("mallory", &u), -ENOENT);
	CHECK_INT(users_uid_by_name("bad", &u), -ENOENT);
	CHECK_INT(users_gid_by_name("staff", &g), 0);
	CHECK_INT(g, 1001);
	CHECK_INT(users_gid_by_name("nogroup", &g), 0);
	CHECK_INT(g, 65534);
	CHECK_INT(users_gid_by_name("nope", &g), -ENOENT);
	CHECK_INT(users_name_by_uid(1000, name, sizeof(name)), 0);
	CHECK_STR(name, "alice");
	CHECK_INT(users_name_by_uid(4242, name, sizeof(name)), -ENOENT);
	CHECK_INT(users_name_by_gid(1002, name, sizeof(name)), 0);
	CHECK_STR(name, "dev");
	CHECK_INT(users_name_by_uid(1000, name, 3), -ENAMETOOLONG);
	struct users_passwd p;
	CHECK_INT(users_passwd_by_name("alice", &p), 0);
	CHECK_STR(p.home, "/home/alice");
	CHECK_STR(p.shell, "/bin/sh");
	CHECK_INT(p.gid, 1001);
	gid_t groups[4];
	CHECK_INT(users_groups_of("alice", groups, 4), 2);
	CHECK_INT(groups[0], 1001);
	CHECK_INT(groups[1], 1002);
	CHECK_INT(users_groups_of("root", groups, 4), 0);
	/* A changed file is re-read, and cached names of the old one are forgotten. */
	CHECK_INT(users_name_by_uid(1000, name, sizeof(name)), 0);
	CHECK_INT(users_name_by_uid(7, name, sizeof(name)), -ENOENT);
	put(pw, "carol:x:7:7::/:/bin/sh\n");
	CHECK_INT(users_uid_by_name("carol", &u), 0);
	CHECK_INT(u, 7);
	CHECK_INT(users_name_by_uid(1000, name, sizeof(name)), -ENOENT);
	CHECK_INT(users_name_by_uid(7, name, sizeof(name)), 0);
	CHECK_STR(name, "carol");
	CHECK_INT(users_name_by_uid(7, name, sizeof(name)), 0); /* from the cache */
	CHECK_STR(name, "carol");
	users_set_files(NULL, NULL);
	CHECK_INT(users_uid_by_name("root", &u), 0);
	CHECK_INT(u, 0);

	/* Id maps: the initial namespace's, a sandbox user namespace's, and (uid_t)-1. */
	char ranges[128];
	const char *initial = "         0          0 4294967295\n";
	CHECK_INT(users_map_contains(initial, 0, ranges, sizeof(ranges)), 0);
	CHECK_INT(users_map_contains(initial, 4294967294u, ranges, sizeof(ranges)), 0);
	CHECK_INT(users_map_contains(initial, 4294967295u, ranges, sizeof(ranges)), -ERANGE);
	CHECK_STR(ranges, "0-4294967294");
	const char *userns = "0 1065536 65536\n";
	CHECK_INT(users_map_contains(userns, 65535, NULL, 0), 0);
	CHECK_INT(users_map_contains(userns, 65536, ranges, sizeof(ranges)), -ERANGE);
	CHECK_STR(ranges, "0-65535");
	CHECK_INT(users_map_contains("0 1000 1\n100 2000 10\n", 105, NULL, 0), 0);
	CHECK_INT(users_map_contains("0 1000 1\n100 2000 10\n", 50, ranges, sizeof(ranges)), -ERANGE);
	CHECK_STR(ranges, "0-0, 100-109");
	CHECK_INT(users_map_contains("", 0, ranges, sizeof(ranges)), -ERANGE);
	CHECK_INT(users_map_contains("garbage", 0, NULL, 0), -ERANGE);
	CHECK_INT(users_id_mapped(false, 0, NULL, 0), 0);
	CHECK_INT(users_id_mapped(false, 4294967295u, NULL, 0), -ERANGE);
	CHECK_INT(users_id_mapped(true, 4294967295u, NULL, 0), -ERANGE);
}

int main(void)
{
	setup();
	test_normalize();
	fpath_set_mode(FPATH_AUTO);
	bool have = fpath_using_openat2();
	if (have) {
		fpath_set_mode(FPATH_OPENAT2);
		test_resolution("openat2");
	} else {
		fprintf(stderr, "-- openat2 unavailable on this kernel: fallback only\n");
	}
	fpath_set_mode(FPATH_FALLBACK);
	test_resolution("fallback walk");
	fpath_set_mode(FPATH_AUTO);
	test_magic();
	test_users();
	fs_remove_tree(top);
	return check_summary("execd_files_path");
}
