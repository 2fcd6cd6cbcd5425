/* Unix socket addresses for paths of any length. */
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

/*
 * Fill *sa with path. A path too long for sun_path is reached through its directory instead, as
 * /proc/self/fd/<dirfd>/<name>: *ret_dirfd is then an O_PATH fd of that directory, which the caller
 * keeps open until bind() or connect() is done and then closes; otherwise it is -1.
 */
int unix_sockaddr(const char *path, struct sockaddr_un *sa, int *ret_dirfd);
