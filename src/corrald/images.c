/* Images: "host" (the host's own root, read-only lower layer) or a directory under --image-dir. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "corrald/corrald.h"

static bool image_name_ok(const char *s)
{
	return *s && *s != '.' && !strchr(s, '/') && strlen(s) < 256;
}

/* "host, a, b" — the names a client may use, for error messages. */
static void image_list(const struct corrald *d, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "host");
	DIR *dir = d->image_dir ? opendir(d->image_dir) : NULL;
	if (!dir)
		return;
	struct dirent *de;
	while ((de = readdir(dir)) && n < len) {
		if (!image_name_ok(de->d_name))
			continue;
		char p[PATH_MAX];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", d->image_dir, de->d_name);
		if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		n += (size_t)snprintf(buf + n, len - n, ", %s", de->d_name);
	}
	closedir(dir);
}

int image_resolve(const struct corrald *d, const char *uri, char *rootfs, size_t len,
		  bool *ret_host, char *msg, size_t msglen)
{
	*ret_host = false;
	if (strcmp(uri, "host") == 0) {
		snprintf(rootfs, len, "/");
		*ret_host = true;
		return 0;
	}
	if (d->image_dir && image_name_ok(uri)) {
		struct stat st;
		snprintf(rootfs, len, "%s/%s", d->image_dir, uri);
		if (stat(rootfs, &st) == 0 && S_ISDIR(st.st_mode))
			return 0;
	}
	char names[1024];
	image_list(d, names, sizeof(names));
	snprintf(msg, msglen,
		 "image.uri: image '%s' does not exist; available images: %s (\"host\" is the host's root file system; others are directories under %s)",
		 uri, names, d->image_dir ? d->image_dir : "--image-dir, which is not set");
	return -ENOENT;
}
