#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shared/unixsock.h"

int unix_sockaddr(const char *path, struct sockaddr_un *sa, int *ret_dirfd)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	*ret_dirfd = -1;
	size_t len = strlen(path);
	if (len < sizeof(sa->sun_path)) {
		memcpy(sa->sun_path, path, len + 1);
		return 0;
	}
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = '\0';
	int dirfd = open(slash == path ? "/" : dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	int n = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", dirfd, slash + 1);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path)) {
		close(dirfd);
		return -ENAMETOOLONG;
	}
	*ret_dirfd = dirfd;
	return 0;
}
