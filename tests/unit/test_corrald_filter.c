/* corrald's list query parsing: the metadata filter, state matching, page parameters, pagination. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "corrald/filter.h"

static const char *lookup(const char *key, void *ud)
{
	const char *const *kv = ud;
	for (; kv[0]; kv += 2)
		if (strcmp(kv[0], key) == 0)
			return kv[1];
	return NULL;
}

static void test_metadata_parse(void)
{
	char msg[256];
	struct meta_filter f;

	CHECK_INT(meta_filter_parse(NULL, &f, msg, sizeof(msg)), 0);
	CHECK_INT(f.n, 0);
	CHECK_INT(meta_filter_parse("", &f, msg, sizeof(msg)), 0);
	CHECK_INT(f.n, 0);

	CHECK_INT(meta_filter_parse("team=infra&project=alpha", &f, msg, sizeof(msg)), 0);
	CHECK_INT(f.n, 2);
	CHECK_STR(f.pairs[0].key, "team");
	CHECK_STR(f.pairs[0].value, "infra");
	CHECK_STR(f.pairs[1].key, "project");
	CHECK_STR(f.pairs[1].value, "alpha");
	meta_filter_clear(&f);

	/* blank values are kept; '+' is a space; %XX decodes; a bad escape stays literal */
	CHECK_INT(meta_filter_parse("a=&b=x+y&c=%2F%3d&d=100%&e=%zz", &f, msg, sizeof(msg)), 0);
	CHECK_INT(f.n, 5);
	CHECK_STR(f.pairs[0].value, "");
	CHECK_STR(f.pairs[1].value, "x y");
	CHECK_STR(f.pairs[2].value, "/=");
	CHECK_STR(f.pairs[3].value, "100%");
	CHECK_STR(f.pairs[4].value, "%zz");
	meta_filter_clear(&f);

	/* the value may contain '=' (only the first one splits) */
	CHECK_INT(meta_filter_parse("k=a=b", &f, msg, sizeof(msg)), 0);
	CHECK_STR(f.pairs[0].value, "a=b");
	meta_filter_clear(&f);

	/* keys with label prefixes */
	CHECK_INT(meta_filter_parse("app.kubernetes.io%2Fname=web", &f, msg, sizeof(msg)), 0);
	CHECK_STR(f.pairs[0].key, "app.kubernetes.io/name");
	meta_filter_clear(&f);

	/* strict: every segment is key=value with a non-empty key */
	static const char *const bad[] = {"abc", "a=1&", "&a=1", "a=1&&b=2", "=v", "a=1&b", "&", "=",
					  "a=1&=2"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg[0] = '\0';
		CHECK_INT(meta_filter_parse(bad[i], &f, msg, sizeof(msg)), -EINVAL);
		CHECK(strstr(msg, "metadata") != NULL);
		CHECK_INT(f.n, 0);
	}
}

static void test_metadata_match(void)
{
	char msg[256];
	struct meta_filter f;
	const char *md[] = {"team", "infra", "project", "alpha", "empty", "", NULL};

	CHECK_INT(meta_filter_parse("team=infra", &f, msg, sizeof(msg)), 0);
	CHECK(meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);

	CHECK_INT(meta_filter_parse("team=infra&project=alpha", &f, msg, sizeof(msg)), 0);
	CHECK(meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);

	/* AND: one mismatch fails */
	CHECK_INT(meta_filter_parse("team=infra&project=beta", &f, msg, sizeof(msg)), 0);
	CHECK(!meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);

	/* exact equality, no prefix or case folding */
	CHECK_INT(meta_filter_parse("team=Infra", &f, msg, sizeof(msg)), 0);
	CHECK(!meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);
	CHECK_INT(meta_filter_parse("team=inf", &f, msg, sizeof(msg)), 0);
	CHECK(!meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);

	/* a blank value matches a blank value, not a missing key */
	CHECK_INT(meta_filter_parse("empty=", &f, msg, sizeof(msg)), 0);
	CHECK(meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);
	CHECK_INT(meta_filter_parse("missing=", &f, msg, sizeof(msg)), 0);
	CHECK(!meta_filter_match(&f, lookup, md));
	meta_filter_clear(&f);

	/* empty filter matches everything */
	CHECK_INT(meta_filter_parse("", &f, msg, sizeof(msg)), 0);
	CHECK(meta_filter_match(&f, lookup, md));
}

static void test_state_match(void)
{
	const char *states[] = {"running", "PAUSED"};
	CHECK(state_filter_match(states, 2, "Running"));
	CHECK(state_filter_match(states, 2, "Paused"));
	CHECK(!state_filter_match(states, 2, "Failed"));
	CHECK(state_filter_match(states, 0, "Failed"));
	CHECK(!state_filter_match(states, 1, "Paused"));
}

static void test_query_uint(void)
{
	char msg[256];
	unsigned v = 0;
	CHECK_INT(query_parse_uint("page", NULL, 1, 100, 7, &v, msg, sizeof(msg)), 0);
	CHECK_INT(v, 7);
	CHECK_INT(query_parse_uint("page", "1", 1, 100, 7, &v, msg, sizeof(msg)), 0);
	CHECK_INT(v, 1);
	CHECK_INT(query_parse_uint("pageSize", "200", 1, 200, 20, &v, msg, sizeof(msg)), 0);
	CHECK_INT(v, 200);
	CHECK_INT(query_parse_uint("pageSize", "201", 1, 200, 20, &v, msg, sizeof(msg)), -ERANGE);
	CHECK(strstr(msg, "pageSize") != NULL);
	CHECK_INT(query_parse_uint("page", "0", 1, 100, 1, &v, msg, sizeof(msg)), -ERANGE);
	CHECK_INT(query_parse_uint("page", "-1", 1, 100, 1, &v, msg, sizeof(msg)), -ERANGE);
	CHECK_INT(query_parse_uint("page", "99999999999999999999", 1, 100, 1, &v, msg, sizeof(msg)),
		  -ERANGE);
	static const char *const bad[] = {"", "abc", "1.5", "1e3", " 1", "0x10", "-", "+"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK_INT(query_parse_uint("page", bad[i], 1, 100, 1, &v, msg, sizeof(msg)), -EINVAL);
}

static void test_pagination(void)
{
	struct page_info pi;

	pagination_compute(0, 1, 20, &pi);
	CHECK_INT(pi.total_items, 0);
	CHECK_INT(pi.total_pages, 0);
	CHECK(!pi.has_next);
	CHECK_INT(pi.count, 0);

	pagination_compute(45, 1, 20, &pi);
	CHECK_INT(pi.total_pages, 3);
	CHECK(pi.has_next);
	CHECK_INT(pi.offset, 0);
	CHECK_INT(pi.count, 20);

	pagination_compute(45, 3, 20, &pi);
	CHECK(!pi.has_next);
	CHECK_INT(pi.offset, 40);
	CHECK_INT(pi.count, 5);

	/* exact multiple */
	pagination_compute(40, 2, 20, &pi);
	CHECK_INT(pi.total_pages, 2);
	CHECK(!pi.has_next);
	CHECK_INT(pi.count, 20);

	/* past the end: empty page, still reports the totals */
	pagination_compute(45, 9, 20, &pi);
	CHECK_INT(pi.page, 9);
	CHECK_INT(pi.total_pages, 3);
	CHECK(!pi.has_next);
	CHECK_INT(pi.count, 0);

	/* pageSize 1 */
	pagination_compute(3, 2, 1, &pi);
	CHECK_INT(pi.total_pages, 3);
	CHECK(pi.has_next);
	CHECK_INT(pi.offset, 1);
	CHECK_INT(pi.count, 1);

	/* huge page numbers do not overflow the offset */
	pagination_compute(5, 1000000000, 200, &pi);
	CHECK_INT(pi.count, 0);
	CHECK(!pi.has_next);
}

int main(void)
{
	test_metadata_parse();
	test_metadata_match();
	test_state_match();
	test_query_uint();
	test_pagination();
	return check_summary("corrald_filter");
}
