/* Unit tests for src/execd/files_util.c: mode encoding, Range parsing, globs, headers, times. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "execd/files_util.h"

static void test_modes(void)
{
	mode_t m;
	CHECK_INT(files_mode_decode(755, &m), 0);
	CHECK_INT(m, 0755);
	CHECK_INT(files_mode_decode(644, &m), 0);
	CHECK_INT(m, 0644);
	CHECK_INT(files_mode_decode(0, &m), 0);
	CHECK_INT(m, 0);
	CHECK_INT(files_mode_decode(7, &m), 0);
	CHECK_INT(m, 07);
	CHECK_INT(files_mode_decode(4755, &m), 0);
	CHECK_INT(m, 04755);
	CHECK_INT(files_mode_decode(7777, &m), 0);
	CHECK_INT(m, 07777);
	CHECK_INT(files_mode_decode(8, &m), -EINVAL);
	CHECK_INT(files_mode_decode(789, &m), -EINVAL);
	CHECK_INT(files_mode_decode(690, &m), -EINVAL);
	CHECK_INT(files_mode_decode(-1, &m), -EINVAL);
	CHECK_INT(files_mode_decode(17777, &m), -EINVAL);
	CHECK_INT(files_mode_encode(0755), 755);
	CHECK_INT(files_mode_encode(0644 | S_IFREG), 644);
	CHECK_INT(files_mode_encode(0600), 600);
	CHECK_INT(files_mode_encode(0), 0);
	CHECK_INT(files_mode_encode(04755), 755); /* permission bits only, as the reference */
	for (int v = 0; v <= 777; v++) {
		if (files_mode_decode(v, &m) == 0)
			CHECK_INT(files_mode_encode(m), v);
	}
}

static void test_range(void)
{
	struct files_range r;
	CHECK_INT(files_parse_range("bytes=0-4", 10, &r), 0);
	CHECK_U64(r.start, 0);
	CHECK_U64(r.length, 5);
	CHECK_INT(files_parse_range("bytes=5-", 10, &r), 0);
	CHECK_U64(r.start, 5);
	CHECK_U64(r.length, 5);
	CHECK_INT(files_parse_range("bytes=-3", 10, &r), 0);
	CHECK_U64(r.start, 7);
	CHECK_U64(r.length, 3);
	CHECK_INT(files_parse_range("bytes=-30", 10, &r), 0); /* suffix longer than the file */
	CHECK_U64(r.start, 0);
	CHECK_U64(r.length, 10);
	CHECK_INT(files_parse_range("bytes=2-100", 10, &r), 0); /* end clamped */
	CHECK_U64(r.start, 2);
	CHECK_U64(r.length, 8);
	CHECK_INT(files_parse_range("bytes= 1 - 2 ", 10, &r), 0);
	CHECK_U64(r.start, 1);
	CHECK_U64(r.length, 2);
	CHECK_INT(files_parse_range("bytes=20-30, 3-4", 10, &r), 0); /* first satisfiable */
	CHECK_U64(r.start, 3);
	CHECK_U64(r.length, 2);
	CHECK_INT(files_parse_range("bytes=9-9", 10, &r), 0);
	CHECK_U64(r.length, 1);
	/* Unsatisfiable. */
	CHECK_INT(files_parse_range("bytes=10-", 10, &r), -ERANGE);
	CHECK_INT(files_parse_range("bytes=-0", 10, &r), -ERANGE);
	CHECK_INT(files_parse_range("bytes=0-0", 0, &r), -ERANGE);
	CHECK_INT(files_parse_range("bytes=", 10, &r), -ERANGE);
	/* Unparseable. */
	CHECK_INT(files_parse_range("bits=0-1", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=5-2", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=a-b", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=1", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=-", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=+1-2", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=0-1,x", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range("bytes=99999999999999999999-", 10, &r), -EINVAL);
	CHECK_INT(files_parse_range(NULL, 10, &r), -EINVAL);
	/* Large offsets. */
	CHECK_INT(files_parse_range("bytes=4294967296-", 8589934592ULL, &r), 0);
	CHECK_U64(r.start, 4294967296ULL);
	CHECK_U64(r.length, 4294967296ULL);
}

static void test_glob(void)
{
	CHECK_INT(files_glob_match("*.txt", "a.txt"), 1);
	CHECK_INT(files_glob_match("*.txt", "a.txt.bak"), 0);
	CHECK_INT(files_glob_match("**", "anything"), 1);
	CHECK_INT(files_glob_match("**/*.txt", "a.txt"), 1);
	CHECK_INT(files_glob_match("**/**/*.py", "x.py"), 1);
	CHECK_INT(files_glob_match("src/*.c", "a.c"), 0);
	CHECK_INT(files_glob_match("a?c", "abc"), 1);
	CHECK_INT(files_glob_match("a?c", "a\xc3\xa9"
					  "c"),
		  1); /* ? is one UTF-8 character */
	CHECK_INT(files_glob_match("a?c", "ac"), 0);
	CHECK_INT(files_glob_match("[abc]x", "bx"), 1);
	CHECK_INT(files_glob_match("[!abc]x", "bx"), 0);
	CHECK_INT(files_glob_match("[^abc]x", "dx"), 1);
	CHECK_INT(files_glob_match("[a-c]*", "cat"), 1);
	CHECK_INT(files_glob_match("[a-c]*", "dog"), 0);
	CHECK_INT(files_glob_match("*.{txt,md}", "r.md"), 1);
	CHECK_INT(files_glob_match("*.{txt,md}", "r.rs"), 0);
	CHECK_INT(files_glob_match("{a,b{c,d}}.x", "bd.x"), 1);
	CHECK_INT(files_glob_match("\\*", "*"), 1);
	CHECK_INT(files_glob_match("\\*", "a"), 0);
	CHECK_INT(files_glob_match("", ""), 1);
	CHECK_INT(files_glob_match("a*b*c*d*e*f*g*h*i*j*k",
				   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
		  0);
	CHECK_INT(files_glob_check("[abc"), -EINVAL);
	CHECK_INT(files_glob_check("[]"), -EINVAL);
	CHECK_INT(files_glob_check("{a,b"), -EINVAL);
	CHECK_INT(files_glob_check("a}"), -EINVAL);
	CHECK_INT(files_glob_check("a\\"), -EINVAL);
	CHECK_INT(files_glob_check("*.txt"), 0);
	CHECK_INT(files_glob_match("[abc", "a"), -EINVAL);
	/* Brace expansion is bounded: alternatives, groups (the recursion depth), length, steps. */
	CHECK_INT(files_glob_check("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"), 0);
	CHECK_INT(files_glob_check("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"), -E2BIG);
}

/* Repeat s n times into a new string (with prefix and suffix). */
static char *rep(const char *prefix, const char *s, size_t n, const char *suffix)
{
	size_t l = strlen(s), pl = strlen(prefix), sl = strlen(suffix);
	char *out = malloc(pl + l * n + sl + 1);
	memcpy(out, prefix, pl);
	for (size_t i = 0; i < n; i++)
		memcpy(out + pl + i * l, s, l);
	memcpy(out + pl + l * n, suffix, sl + 1);
	return out;
}

static void test_glob_bounds(void)
{
	char why[160];
	struct files_glob *g = NULL;
	/* The issue 8 bomb: 2,000 nested braces overflowed the stack of PID 1. */
	char *open = rep("", "{", 2000, ""), *bomb = rep(open, "}", 2000, "");
	CHECK_INT(files_glob_new(bomb, &g, why, sizeof(why)), -E2BIG);
	CHECK_STR(why, "has more than 64 brace groups '{...}'");
	CHECK(g == NULL);
	free(open);
	free(bomb);
	/* As many groups in a row (no nesting) recurse as deep. */
	char *row = rep("", "{a}", 1000, "");
	CHECK_INT(files_glob_check(row), -E2BIG);
	free(row);
	/* 64 groups are allowed, nested or in a row. */
	open = rep("", "{", 64, "x");
	bomb = rep(open, "}", 64, "");
	CHECK_INT(files_glob_match(bomb, "x"), 1);
	free(open);
	free(bomb);
	row = rep("", "{a}", 64, "");
	CHECK_INT(files_glob_new(row, &g, why, sizeof(why)), 0);
	char *name = rep("", "a", 64, "");
	CHECK_INT(files_glob_matches(g, name), 1);
	files_glob_free(g);
	g = NULL;
	free(name);
	free(row);
	/* Too long. */
	char *longp = rep("", "a", GLOB_LEN_MAX, "");
	CHECK_INT(files_glob_new(longp, &g, why, sizeof(why)), -E2BIG);
	CHECK_STR(why, "is longer than 4095 bytes");
	free(longp);
	/* 9 binary groups: 512 alternatives. */
	CHECK_INT(files_glob_new("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", &g, why,
				 sizeof(why)),
		  -E2BIG);
	CHECK_STR(why, "expands to more than 256 alternatives");
	/* Few alternatives but many bytes: 2 x 4 groups of 2 make 256 copies of a long tail. */
	char *tail = rep("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}", "z", 1000, "");
	CHECK_INT(files_glob_new(tail, &g, why, sizeof(why)), -E2BIG);
	CHECK_STR(why, "expands to more than 65536 bytes");
	free(tail);
	/* Malformed: the rule is named. */
	CHECK_INT(files_glob_new("{a,b", &g, why, sizeof(why)), -EINVAL);
	CHECK_STR(why, "has a '{' without its '}'");
	CHECK_INT(files_glob_new("[]x", &g, why, sizeof(why)), -EINVAL);
	CHECK_STR(why, "has an unterminated or empty [...] class");
	/* Matching work is budgeted over the glob's life: a costly pattern runs out, then stays out. */
	char *slow = rep("*", "[a-z]", 700, "!");
	CHECK_INT(files_glob_new(slow, &g, why, sizeof(why)), 0);
	char *aaa = rep("", "a", 255, "");
	int r = 0;
	for (int i = 0; i < 100000 && r == 0; i++)
		r = files_glob_matches(g, aaa);
	CHECK_INT(r, -E2BIG);
	CHECK_INT(files_glob_matches(g, aaa), -E2BIG);
	files_glob_free(g);
	free(slow);
	free(aaa);
	/* A cheap pattern over many names stays well inside the budget. */
	CHECK_INT(files_glob_new("*.{c,h}", &g, why, sizeof(why)), 0);
	for (int i = 0; i < 100000; i++)
		if (files_glob_matches(g, i % 2 ? "main.c" : "README.md") != i % 2)
			CHECK(false);
	files_glob_free(g);
}

static void test_disposition(void)
{
	char b[1024];
	files_content_disposition("x.txt", b, sizeof(b));
	CHECK_STR(b, "attachment; filename=\"x.txt\"");
	files_content_disposition("r\xc3\xa9sum\xc3\xa9.pdf", b, sizeof(b));
	CHECK_STR(b, "attachment; filename=\"r%C3%A9sum%C3%A9.pdf\"; "
		     "filename*=UTF-8''r%C3%A9sum%C3%A9.pdf");
	/* Characters that would break the header are encoded, never sent raw. */
	files_content_disposition("a\"b\r\nX: y", b, sizeof(b));
	CHECK(strchr(b, '\r') == NULL && strchr(b, '\n') == NULL);
	CHECK(strstr(b, "filename*=UTF-8''a%22b%0D%0AX%3A%20y") != NULL);
}

static void test_times(void)
{
	char b[64];
	struct timespec ts = {.tv_sec = 1700000000, .tv_nsec = 120000000};
	files_time_nano(&ts, b, sizeof(b));
	CHECK_STR(b, "2023-11-14T22:13:20.12Z");
	ts.tv_nsec = 1;
	files_time_nano(&ts, b, sizeof(b));
	CHECK_STR(b, "2023-11-14T22:13:20.000000001Z");
	ts.tv_nsec = 0;
	files_time_nano(&ts, b, sizeof(b));
	CHECK_STR(b, "2023-11-14T22:13:20Z");
	files_time_sec(0, b, sizeof(b));
	CHECK_STR(b, "1970-01-01T00:00:00Z");
}

int main(void)
{
	test_modes();
	test_range();
	test_glob();
	test_glob_bounds();
	test_disposition();
	test_times();
	return check_summary("execd_files_util");
}
