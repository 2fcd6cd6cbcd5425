/*
 * image_layer_mark_opaque(): the parent marks the opaque directories a confined layer child
 * listed. The list is the child's, so it is hostile once the child is compromised: paths that
 * leave the layer are refused, paths through a symlink (planted to point out of the layer) and
 * paths that are not directories any more are skipped, a list that is not a regular file is
 * refused. Needs root (trusted.* xattrs).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check.h"
#include "images/images.h"
#include "shared/fsutil.h"

static char base[64] = "/tmp/corral-test-opaque-XXXXXX";

static void path(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/%s", base, rel);
}

static void write_list(const char *data, size_t len)
{
	char p[256];
	path(p, sizeof(p), "opaque");
	unlink(p);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK_INT(write(fd, data, len), (long long)len);
	close(fd);
}

static bool opaque(const char *rel)
{
	char p[256], v[4];
	path(p, sizeof(p), rel);
	return lgetxattr(p, "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y';
}

static int mark(void)
{
	char root[256], list[256];
	struct error e = {0};
	path(root, sizeof(root), "root");
	path(list, sizeof(list), "opaque");
	return image_layer_mark_opaque(root, list, &e);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skipped: needs root for trusted.* xattrs\n");
		return 77;
	}
	if (!mkdtemp(base))
		return 1;
	char p[256];
	const char *dirs[] = {"root", "root/a", "root/a/b", "outside"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		path(p, sizeof(p), dirs[i]);
		CHECK_INT(mkdir(p, 0755), 0);
	}
	path(p, sizeof(p), "root/file");
	close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	/* A symlink the compromised child planted: root/l -> <base>/outside */
	char target[256];
	path(target, sizeof(target), "outside");
	path(p, sizeof(p), "root/l");
	CHECK_INT(symlink(target, p), 0);

	/* The layer's root, a nested dir; a symlink and a file are skipped; gone is skipped. */
	static const char ok_list[] = ".\0a/b\0l\0l/\0file\0gone\0";
	write_list(ok_list, sizeof(ok_list) - 1);
	CHECK_INT(mark(), 0);
	CHECK(opaque("root"));
	CHECK(opaque("root/a/b"));
	CHECK(!opaque("root/a"));
	CHECK(!opaque("outside"));

	/* Leaving the layer: refused, nothing outside marked. */
	static const char up[] = "a\0../outside\0";
	write_list(up, sizeof(up) - 1);
	CHECK_INT(mark(), -EPROTO);
	CHECK(!opaque("outside"));
	static const char abs_list[] = "/tmp\0";
	write_list(abs_list, sizeof(abs_list) - 1);
	CHECK_INT(mark(), -EPROTO);

	/* The list itself replaced by a FIFO (would block the parent) or a symlink: refused. */
	path(p, sizeof(p), "opaque");
	unlink(p);
	CHECK_INT(mkfifo(p, 0600), 0);
	CHECK(mark() < 0);
	unlink(p);
	CHECK_INT(symlink("/etc/passwd", p), 0);
	CHECK(mark() < 0);
	/* No list: no opaque directory in the layer. */
	unlink(p);
	CHECK_INT(mark(), 0);

	fs_remove_tree(base);
	return check_summary("images_opaque");
}
