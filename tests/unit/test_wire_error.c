/*
 * The wire error table (src/shared/wire_error.h) against docs/api.md's "Error codes" section:
 * every (status, code) pair the docs list under "### corrald" or "### corral-execd" is in the
 * table for that daemon, and every code the table says a daemon sends is documented with each of
 * its statuses. Plus the table's own rules (unique names and codes, statuses that are errors).
 * argv[1]: docs/api.md.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shared/wire_error.h"

#define DOC_PAIRS_MAX 256

struct doc_pair {
	enum wire_scope scope;
	int status;
	char code[64];
};

static struct doc_pair pairs[DOC_PAIRS_MAX];
static size_t n_pairs;

/* One table row "| 507 / 500 | `A` / `B` | when |": every status with every code. */
static void parse_row(enum wire_scope scope, const char *line)
{
	const char *c1 = strchr(line, '|'), *c2 = c1 ? strchr(c1 + 1, '|') : NULL;
	const char *c3 = c2 ? strchr(c2 + 1, '|') : NULL;
	if (!c3)
		return;
	int statuses[8];
	size_t ns = 0;
	for (const char *p = c1 + 1; p < c2 && ns < 8; p++)
		if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1]) &&
		    isdigit((unsigned char)p[2]) && !isdigit((unsigned char)p[3])) {
			statuses[ns++] = atoi(p);
			p += 2;
		}
	for (const char *p = c2 + 1; p < c3; p++) {
		if (*p != '`')
			continue;
		const char *e = strchr(p + 1, '`');
		if (!e || e > c3)
			break;
		/* A code is upper case, digits, '_' and ':' (not `detail`, `reason`, `Bad Gateway`). */
		bool code = e > p + 1;
		for (const char *q = p + 1; q < e; q++)
			code = code && (isupper((unsigned char)*q) || isdigit((unsigned char)*q) ||
					*q == '_' || *q == ':');
		for (size_t i = 0; code && i < ns && n_pairs < DOC_PAIRS_MAX; i++) {
			struct doc_pair *d = &pairs[n_pairs++];
			d->scope = scope;
			d->status = statuses[i];
			snprintf(d->code, sizeof(d->code), "%.*s", (int)(e - p - 1), p + 1);
		}
		p = e;
	}
}

static void parse_docs(const char *path)
{
	FILE *f = fopen(path, "re");
	CHECK(f != NULL);
	if (!f)
		return;
	char line[4096];
	bool in_section = false;
	int scope = -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "## ", 3) == 0) {
			in_section = strcmp(line, "## Error codes\n") == 0;
			scope = -1;
		} else if (in_section && strncmp(line, "### ", 4) == 0) {
			scope = strcmp(line, "### corrald\n") == 0		? WIRE_SCOPE_CORRALD
				: strcmp(line, "### corral-execd\n") == 0 ? WIRE_SCOPE_EXECD
									  : -1;
		} else if (in_section && scope >= 0 && line[0] == '|' && isdigit((unsigned char)line[2])) {
			parse_row((enum wire_scope)scope, line);
		}
	}
	fclose(f);
}

static bool status_listed(const struct wire_error_info *w, int status)
{
	if (w->status == status)
		return true;
	for (const char *p = w->other_statuses; *p; p++)
		if ((p == w->other_statuses || p[-1] == ' ') && atoi(p) == status)
			return true;
	return false;
}

static bool documented(const struct wire_error_info *w, int status)
{
	for (size_t i = 0; i < n_pairs; i++)
		if (pairs[i].scope == w->scope && pairs[i].status == status &&
		    strcmp(pairs[i].code, w->code) == 0)
			return true;
	return false;
}

static void test_docs_match_table(const char *path)
{
	parse_docs(path);
	CHECK(n_pairs > 40); /* the section was found and read */
	for (size_t i = 0; i < n_pairs; i++) {
		const struct doc_pair *d = &pairs[i];
		const struct wire_error_info *w = wire_error_find(d->scope, d->code);
		if (!w)
			CHECK_FAIL_("docs/api.md lists %d `%s` for %s; the table does not have it", d->status,
				    d->code, d->scope == WIRE_SCOPE_CORRALD ? "corrald" : "corral-execd");
		else if (!status_listed(w, d->status))
			CHECK_FAIL_("docs/api.md lists %d `%s`; the table sends it with %d '%s'", d->status,
				    d->code, w->status, w->other_statuses);
		check_run_++;
	}
	for (size_t i = 0; i < WIRE_ERROR_COUNT_; i++) {
		const struct wire_error_info *w = &wire_errors[i];
		if (w->scope == WIRE_SCOPE_INTERNAL)
			continue;
		if (!documented(w, w->status))
			CHECK_FAIL_("%s: %d `%s` is not in docs/api.md's error codes", w->name, w->status,
				    w->code);
		for (const char *p = w->other_statuses; *p; p++)
			if ((p == w->other_statuses || p[-1] == ' ') && !documented(w, atoi(p)))
				CHECK_FAIL_("%s: %d `%s` is not in docs/api.md's error codes", w->name,
					    atoi(p), w->code);
		check_run_++;
	}
}

static void test_table_rules(void)
{
	for (size_t i = 0; i < WIRE_ERROR_COUNT_; i++) {
		const struct wire_error_info *w = &wire_errors[i];
		CHECK(w->name && w->code && w->when && w->when[0]);
		CHECK(w->status >= 400 && w->status <= 599);
		CHECK(wire_error_find(w->scope, w->code) == w); /* one entry per code and daemon */
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(wire_errors[j].name, w->name) != 0);
	}
	CHECK_STR(WIRE_CODE(SANDBOX_NOT_FOUND), "SANDBOX::NOT_FOUND");
	CHECK_STR(WIRE_CODE(INVALID_REQUEST_BODY), "INVALID_REQUEST_BODY");
	CHECK(wire_error_find(WIRE_SCOPE_EXECD, "SANDBOX::NOT_FOUND") == NULL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s docs/api.md\n", argv[0]);
		return 2;
	}
	test_table_rules();
	test_docs_match_table(argv[1]);
	return check_summary("wire_error");
}
