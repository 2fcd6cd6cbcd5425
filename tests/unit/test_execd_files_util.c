/* Unit tests for src/execd/files_util.c: mode encoding, Range parsing, globs, headers, times. */
#include <errno.h>
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
	/* Brace expansion is bounded. */
	CHECK_INT(files_glob_check("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}"), -EINVAL);
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
	test_disposition();
	test_times();
	return check_summary("execd_files_util");
}
