#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shared/fsutil.h"
#include "shared/macro.h"
#include "users.h"

/* One cached database file, reloaded when its identity or mtime changes. */
struct db {
	const char *default_path;
	char path[PATH_MAX];
	char *data;
	size_t len;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	bool loaded;
	unsigned generation; /* bumped on every (re)load: invalidates the name caches */
};

/* id -> name answers (including "unknown"), so listing a big directory reads no files. */
#define NAME_CACHE_SIZE 64
struct name_cache {
	unsigned generation; /* of the db it came from; 0 = empty */
	uint32_t id;
	int r;
	char name[USERS_NAME_MAX];
};
static struct name_cache uid_cache[NAME_CACHE_SIZE], gid_cache[NAME_CACHE_SIZE];

static struct db passwd_db = {.default_path = "/etc/passwd"};
static struct db group_db = {.default_path = "/etc/group"};

static void db_reset(struct db *db, const char *path)
{
	free(db->data);
	db->data = NULL;
	db->len = 0;
	db->loaded = false;
	if (++db->generation == 0)
		db->generation = 1;
	snprintf(db->path, sizeof(db->path), "%s", path ? path : db->default_path);
}

void users_set_files(const char *passwd_path, const char *group_path)
{
	db_reset(&passwd_db, passwd_path);
	db_reset(&group_db, group_path);
}

static int db_load(struct db *db)
{
	if (!db->path[0])
		snprintf(db->path, sizeof(db->path), "%s", db->default_path);
	struct stat st;
	if (stat(db->path, &st) < 0)
		return -errno;
	if (db->loaded && st.st_dev == db->dev && st.st_ino == db->ino && st.st_size == db->size &&
	    st.st_mtim.tv_sec == db->mtime.tv_sec && st.st_mtim.tv_nsec == db->mtime.tv_nsec)
		return 0;
	char *data;
	size_t len;
	int r = fs_read_file(db->path, USERS_FILE_MAX, &data, &len);
	if (r < 0)
		return r;
	free(db->data);
	db->data = data;
	db->len = len;
	db->dev = st.st_dev;
	db->ino = st.st_ino;
	db->size = st.st_size;
	db->mtime = st.st_mtim;
	db->loaded = true;
	if (++db->generation == 0)
		db->generation = 1;
	return 0;
}

#define FIELDS_MAX 7

/*
 * Split one line of db into up to FIELDS_MAX ':'-separated fields (pointers into a copy in line).
 * Returns the number of fields, 0 for a blank or comment line.
 */
static int split_line(const char *s, size_t n, char *line, size_t linelen, char **fields)
{
	if (n >= linelen)
		return 0; /* absurdly long line: never matches */
	memcpy(line, s, n);
	line[n] = '\0';
	if (n && line[n - 1] == '\r')
		line[--n] = '\0';
	if (!n || line[0] == '#')
		return 0;
	int nf = 0;
	char *p = line;
	fields[nf++] = p;
	while ((p = strchr(p, ':')) && nf < FIELDS_MAX) {
		*p++ = '\0';
		fields[nf++] = p;
	}
	return nf;
}

static int parse_id(const char *s, uint32_t *ret)
{
	if (!*s || strlen(s) > 10)
		return -EINVAL;
	uint64_t v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v >= UINT32_MAX) /* (uid_t)-1 is never an id */
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

/* Iterate the lines of db: cb returns 1 to stop (found), 0 to go on. */
static int db_foreach(struct db *db, int minfields, int (*cb)(char **f, int nf, void *ud), void *ud)
{
	int r = db_load(db);
	if (r < 0)
		return r;
	_cleanup_free_ char *line = malloc(65536);
	if (!line)
		return -ENOMEM;
	const char *p = db->data, *end = db->data + db->len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char *f[FIELDS_MAX];
		int nf = split_line(p, n, line, 65536, f);
		if (nf >= minfields) {
			r = cb(f, nf, ud);
			if (r)
				return r > 0 ? 0 : r;
		}
		p += n + 1;
	}
	return -ENOENT;
}

struct pw_query {
	const char *name; /* by name when set */
	uid_t uid;
	struct users_passwd *ret;
};

static int pw_match(char **f, int nf, void *ud)
{
	struct pw_query *q = ud;
	uint32_t uid, gid;
	if (parse_id(f[2], &uid) < 0 || parse_id(f[3], &gid) < 0)
		return 0;
	if (q->name ? strcmp(f[0], q->name) != 0 : uid != q->uid)
		return 0;
	if (strlen(f[0]) >= sizeof(q->ret->name))
		return 0;
	snprintf(q->ret->name, sizeof(q->ret->name), "%s", f[0]);
	q->ret->uid = uid;
	q->ret->gid = gid;
	snprintf(q->ret->home, sizeof(q->ret->home), "%s", f[5]);
	snprintf(q->ret->shell, sizeof(q->ret->shell), "%s", f[6]);
	return 1;
}

int users_passwd_by_uid(uid_t uid, struct users_passwd *ret)
{
	struct pw_query q = {.uid = uid, .ret = ret};
	return db_foreach(&passwd_db, 7, pw_match, &q);
}

int users_passwd_by_name(const char *name, struct users_passwd *ret)
{
	if (!name || !*name)
		return -EINVAL;
	struct pw_query q = {.name = name, .ret = ret};
	int r = db_foreach(&passwd_db, 7, pw_match, &q);
	uint32_t id;
	if (r == -ENOENT && parse_id(name, &id) == 0)
		return users_passwd_by_uid(id, ret);
	return r;
}

int users_uid_by_name(const char *name, uid_t *ret_uid)
{
	struct users_passwd pw;
	int r = users_passwd_by_name(name, &pw);
	if (r == -ENOENT) {
		/* A numeric id without a passwd line is still a valid owner. */
		uint32_t id;
		if (parse_id(name, &id) == 0) {
			*ret_uid = id;
			return 0;
		}
	}
	if (r < 0)
		return r;
	*ret_uid = pw.uid;
	return 0;
}

/* Cached id -> name: reload the db if it changed, then look in the cache before scanning. */
static int cached_name(struct db *db, struct name_cache *cache, uint32_t id, char *buf, size_t len,
		       int (*lookup)(uint32_t id, char *name, size_t namelen))
{
	int r = db_load(db);
	if (r < 0)
		return r;
	struct name_cache *c = &cache[id % NAME_CACHE_SIZE];
	if (c->generation != db->generation || c->id != id) {
		c->r = lookup(id, c->name, sizeof(c->name));
		c->id = id;
		c->generation = db->generation;
	}
	if (c->r < 0)
		return c->r;
	if ((size_t)snprintf(buf, len, "%s", c->name) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static int lookup_uid(uint32_t uid, char *name, size_t len)
{
	struct users_passwd pw;
	int r = users_passwd_by_uid(uid, &pw);
	if (r < 0)
		return r;
	snprintf(name, len, "%s", pw.name); /* both USERS_NAME_MAX */
	return 0;
}

int users_name_by_uid(uid_t uid, char *buf, size_t len)
{
	return cached_name(&passwd_db, uid_cache, uid, buf, len, lookup_uid);
}

struct gr_query {
	const char *name;
	gid_t gid;
	gid_t found_gid;
	char *buf;
	size_t len;
	int r;
};

static int gr_match(char **f, int nf, void *ud)
{
	struct gr_query *q = ud;
	uint32_t gid;
	if (parse_id(f[2], &gid) < 0)
		return 0;
	if (q->name ? strcmp(f[0], q->name) != 0 : gid != q->gid)
		return 0;
	q->found_gid = gid;
	if (q->buf && (size_t)snprintf(q->buf, q->len, "%s", f[0]) >= q->len)
		q->r = -ENAMETOOLONG;
	return 1;
}

int users_gid_by_name(const char *name, gid_t *ret_gid)
{
	if (!name || !*name)
		return -EINVAL;
	struct gr_query q = {.name = name};
	int r = db_foreach(&group_db, 3, gr_match, &q);
	if (r == -ENOENT) {
		uint32_t id;
		if (parse_id(name, &id) == 0) {
			*ret_gid = id;
			return 0;
		}
	}
	if (r < 0)
		return r;
	*ret_gid = q.found_gid;
	return 0;
}

static int lookup_gid(uint32_t gid, char *name, size_t len)
{
	struct gr_query q = {.gid = gid, .buf = name, .len = len};
	int r = db_foreach(&group_db, 3, gr_match, &q);
	if (r < 0)
		return r;
	return q.r;
}

int users_name_by_gid(gid_t gid, char *buf, size_t len)
{
	return cached_name(&group_db, gid_cache, gid, buf, len, lookup_gid);
}

struct groups_query {
	const char *name;
	gid_t *out;
	size_t max;
	size_t n;
};

static int groups_match(char **f, int nf, void *ud)
{
	struct groups_query *q = ud;
	uint32_t gid;
	if (nf < 4 || parse_id(f[2], &gid) < 0)
		return 0;
	char *save = NULL;
	for (char *m = strtok_r(f[3], ",", &save); m; m = strtok_r(NULL, ",", &save)) {
		if (strcmp(m, q->name) == 0) {
			if (q->n < q->max)
				q->out[q->n] = gid;
			q->n++;
			break;
		}
	}
	return 0;
}

int users_groups_of(const char *name, gid_t *out, size_t max)
{
	if (!name || !*name)
		return -EINVAL;
	struct groups_query q = {.name = name, .out = out, .max = max};
	int r = db_foreach(&group_db, 3, groups_match, &q);
	if (r < 0 && r != -ENOENT)
		return r;
	return (int)MIN(q.n, (size_t)INT_MAX);
}

int users_map_contains(const char *map, uint32_t id, char *ret_ranges, size_t len)
{
	bool found = false;
	size_t n = 0;
	if (ret_ranges && len)
		ret_ranges[0] = '\0';
	while (map && *map) {
		unsigned long long inside, outside, count;
		int used = 0;
		if (sscanf(map, " %llu %llu %llu%n", &inside, &outside, &count, &used) != 3 ||
		    !count)
			break;
		map += used;
		while (*map && *map != '\n')
			map++;
		/* (uid_t)-1 means "no change" to setuid and friends: it is never an id. */
		unsigned long long last =
		    MIN(inside + count - 1, (unsigned long long)UINT32_MAX - 1);
		if (inside > last)
			continue;
		if (id >= inside && id <= last)
			found = true;
		if (ret_ranges && n < len) {
			int w = snprintf(ret_ranges + n, len - n, "%s%llu-%llu", n ? ", " : "",
					 inside, last);
			n = w < 0 ? len : MIN(len, n + (size_t)w);
		}
	}
	return found ? 0 : -ERANGE;
}

int users_id_mapped(bool group, uint32_t id, char *ret_ranges, size_t len)
{
	char *map = NULL;
	size_t maplen;
	int r = fs_read_file(group ? "/proc/self/gid_map" : "/proc/self/uid_map", 64 * 1024, &map,
			     &maplen);
	if (r < 0) /* no /proc: only the kernel's own rule */
		r = users_map_contains("0 0 4294967295", id, ret_ranges, len);
	else
		r = users_map_contains(map, id, ret_ranges, len);
	free(map);
	return r;
}
