/*
 * Users and groups of the sandbox, read straight from /etc/passwd and /etc/group.
 *
 * corral-execd is linked statically, and getpwnam()/getgrgid() under static glibc depend on NSS
 * modules that may not exist in the sandbox image, so they are not used. The files are re-read
 * only when they change (inode, size or mtime), so lookups in a loop (a directory listing) are
 * cheap. Each file is read up to USERS_FILE_MAX bytes; a longer file is an error.
 *
 * Name lookups also accept a decimal id ("1000") when no entry has that name, so callers can pass
 * whatever a client sent.
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define USERS_FILE_MAX (4u << 20)
#define USERS_NAME_MAX 256

struct users_passwd {
	char name[USERS_NAME_MAX];
	uid_t uid;
	gid_t gid; /* primary group */
	char home[PATH_MAX];
	char shell[PATH_MAX];
};

/* Full passwd entry by name (or decimal uid). -ENOENT when unknown. */
int users_passwd_by_name(const char *name, struct users_passwd *ret);
/* Full passwd entry by uid. -ENOENT when no line has that uid. */
int users_passwd_by_uid(uid_t uid, struct users_passwd *ret);

int users_uid_by_name(const char *name, uid_t *ret_uid);
int users_gid_by_name(const char *name, gid_t *ret_gid);
/* Name of uid/gid into buf; -ENOENT when unknown, -ENAMETOOLONG when buf is too small. */
int users_name_by_uid(uid_t uid, char *buf, size_t len);
int users_name_by_gid(gid_t gid, char *buf, size_t len);

/*
 * Supplementary groups of user name (the groups whose member list names it), without the primary
 * group. Fills up to max ids and returns how many there are (may exceed max), or a negative errno.
 */
int users_groups_of(const char *name, gid_t *out, size_t max);

/*
 * Whether id is a user (group) id a process of this sandbox can switch to: inside one of the ranges
 * of /proc/self/uid_map (gid_map), "inside outside count" lines, and never (uid_t)-1. 0, or -ERANGE
 * with the valid ranges ("0-65535") in ret_ranges (optional). users_map_contains is the parser.
 */
int users_map_contains(const char *map, uint32_t id, char *ret_ranges, size_t len);
int users_id_mapped(bool group, uint32_t id, char *ret_ranges, size_t len);

/* Read other files than /etc/passwd and /etc/group (tests). NULL restores the default. */
void users_set_files(const char *passwd_path, const char *group_path);
