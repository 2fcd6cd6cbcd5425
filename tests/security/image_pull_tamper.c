/*
 * A registry pull whose manifest child (or parsing child) is compromised (test_image_confine.py):
 * store.c built with META_CHILD_TAMPER (PARSE_CHILD_TAMPER), which runs inside the child,
 * confined, after its own checks passed, and does
 * what code running there could: rewrite the files it hands the pull worker, plant a symlink or a
 * FIFO, lie in its reply (a token with a header in it, a port), die without a word. The worker
 * must refuse each, store nothing, and say why.
 *
 *   image_pull_tamper MODE STORE REF INSECURE_HOST [FILE]
 *
 * MODE: none (the control: the pull succeeds), manifest (manifest-0 := FILE's bytes), config
 * (config := FILE's bytes), symlink (config := a symlink to FILE), fifo (manifest-0 := a FIFO),
 * bearer (a token with CRLF and another header), port (a realm port it was never allowed),
 * die (exit before its first reply), hang (never reply; the pull's timeout is 2 s then),
 * big (config := 8 MiB + 1 bytes), message (an error of its own, with a newline, an escape
 * sequence and no NUL). The parsing child (PARSE_CHILD_TAMPER): tokens (garbage for the
 * manifest), mdigest (the manifest's digest := FILE's, a body never sent), utf8 (a WorkingDir
 * that is not UTF-8), parsehang (never answer; the pull's timeout is 2 s then).
 * Prints "rc <errno> <message>" (0: pulled).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pull;
struct meta_reply;
struct parse_head;
struct tokens;
static void tamper(struct pull *p, struct meta_reply *rep, int stage);
static void tamper_parse(struct pull *p, struct parse_head *h, struct tokens *t);
#define META_CHILD_TAMPER(p, rep, stage) tamper(p, rep, stage)
#define PARSE_CHILD_TAMPER(p, h, t) tamper_parse(p, h, t)

#include "../../src/images/store.c"

static const char *mode;
static char *file_bytes;
static size_t file_len;
static const char *file_path;

static void put(const char *dir, const char *name, const char *data, size_t len)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	FILE *f = fopen(path, "we");
	if (f) {
		fwrite(data, 1, len, f);
		fclose(f);
	}
}

static void tamper(struct pull *p, struct meta_reply *rep, int stage)
{
	char path[PATH_MAX + 32];
	if (stage == 1 && strcmp(mode, "manifest") == 0)
		put(p->meta_work, "manifest-0", file_bytes, file_len);
	if (stage == 1 && strcmp(mode, "fifo") == 0) {
		snprintf(path, sizeof(path), "%s/manifest-0", p->meta_work);
		unlink(path);
		mkfifo(path, 0600);
	}
	if (stage == 1 && strcmp(mode, "die") == 0)
		_exit(3);
	if (stage == 1 && strcmp(mode, "hang") == 0)
		for (;;)
			pause();
	if (stage == 2 && strcmp(mode, "config") == 0)
		put(p->meta_work, "config", file_bytes, file_len);
	if (stage == 2 && strcmp(mode, "symlink") == 0) {
		snprintf(path, sizeof(path), "%s/config", p->meta_work);
		unlink(path);
		if (symlink(file_path, path) < 0)
			perror("symlink");
	}
	if (stage == 2 && strcmp(mode, "big") == 0) {
		size_t n = CONFIG_MAX + 1;
		char *big = malloc(n);
		if (big) {
			memset(big, '{', n);
			put(p->meta_work, "config", big, n);
		}
	}
	if (stage == 2 && strcmp(mode, "bearer") == 0)
		snprintf(rep->auth.bearer, sizeof(rep->auth.bearer), "Bearer x\r\nX-Evil: 1");
	if (stage == 2 && strcmp(mode, "port") == 0)
		rep->auth.realm_port = 1;
	if (stage == 1 && strcmp(mode, "message") == 0) { /* an error of its own making */
		memset(&rep->e, 0, sizeof(rep->e));
		memset(rep->e.msg, '\n', sizeof(rep->e.msg)); /* and no NUL */
		static const char forged[] = "forged\n2026 corrald error: \x1b[2J";
		memcpy(rep->e.msg, forged, sizeof(forged) - 1);
		rep->e.code = -ENOSPC;
	}
}

/* The parsing child (after it parsed, before it answers): its tokens rewritten. */
static void tamper_parse(struct pull *p, struct parse_head *h, struct tokens *t)
{
	(void)p;
	bool manifest = t->len > 7 && strncmp(t->buf, "sha256:", 7) == 0;
	if (strcmp(mode, "parsehang") == 0)
		for (;;)
			pause();
	if (h->e.code < 0)
		return;
	struct tokens in = *t, out = {0};
	const char *tok;
	if (manifest && strcmp(mode, "tokens") == 0) {
		tok_add(&out, "sha256:zz");
		tok_add(&out, "-");
	} else if (manifest && strcmp(mode, "mdigest") == 0) {
		char d[72];
		registry_sha256(file_bytes, file_len, d); /* a manifest the registry never sent */
		tok_add(&out, d);
		in.off = 0;
		tok_next(&in);
		while ((tok = tok_next(&in)))
			tok_add(&out, tok);
	} else if (!manifest && strcmp(mode, "utf8") == 0) {
		long long n = 0;
		in.off = 0;
		if (!tok_int(&in, 0, 1000, &n))
			return;
		tok_num(&out, n);
		for (long long i = 0; i < n && (tok = tok_next(&in)); i++)
			tok_add(&out, tok);
		tok_add(&out, "/\xff\xfe"); /* WorkingDir: not UTF-8 */
		tok_add(&out, "");
		tok_num(&out, 0);
	} else {
		return;
	}
	*t = out;
	h->len = out.len;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s MODE STORE REF INSECURE_HOST [FILE]\n", argv[0]);
		return 2;
	}
	mode = argv[1];
	file_path = argc > 5 ? argv[5] : "/dev/null";
	if (argc > 5 && fs_read_file(argv[5], 64 << 20, &file_bytes, &file_len) < 0) {
		fprintf(stderr, "cannot read %s\n", argv[5]);
		return 2;
	}
	const char *insecure[] = {argv[4], NULL};
	struct image_pull_opts o = {.store = argv[2], .insecure = insecure,
				    .timeout_s = strstr(mode, "hang") ? 2 : 60};
	struct image_ref ref;
	struct error err = {0};
	if (image_store_init(o.store, &err) < 0 || image_ref_parse(argv[3], &ref, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 2;
	}
	int r = image_pull(&o, &ref, &err);
	printf("rc %d %s\n", r < 0 ? -r : 0, r < 0 ? err.msg : "");
	return 0;
}
