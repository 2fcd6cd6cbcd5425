/* Unit tests for src/shared/dynbuf.c: the bounded growable buffer. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shared/dynbuf.h"

static void test_limit(void)
{
	struct dynbuf b = DYNBUF_INIT(10);
	CHECK(b.data == NULL);
	CHECK_INT(dynbuf_add(&b, "", 0), 0);
	CHECK_STR(b.data, "");
	CHECK_INT(dynbuf_add(&b, "hello", 5), 0);
	CHECK_INT(dynbuf_add_str(&b, "world"), 0);
	CHECK_STR(b.data, "helloworld");
	CHECK_INT(b.len, 10);
	CHECK(b.cap <= 11); /* never more than max + the terminator */
	/* Past the maximum: refused whole, the contents unchanged. */
	CHECK_INT(dynbuf_add(&b, "!", 1), -E2BIG);
	CHECK_INT(dynbuf_printf(&b, "%d", 7), -E2BIG);
	CHECK_STR(b.data, "helloworld");
	CHECK_INT(dynbuf_add(&b, "", 0), 0);
	dynbuf_reset(&b);
	CHECK_STR(b.data, "");
	CHECK_INT(b.max, 10);
	CHECK_INT(dynbuf_printf(&b, "%s-%d", "ab", 12345), 0);
	CHECK_STR(b.data, "ab-12345");
	CHECK_INT(dynbuf_printf(&b, "%s", "xyz"), -E2BIG); /* 8 + 3 > 10 */
	CHECK_INT(dynbuf_printf(&b, "%s", "xy"), 0);
	CHECK_STR(b.data, "ab-12345xy");
	dynbuf_free(&b);
	CHECK(b.data == NULL && b.len == 0 && b.max == 10);
}

static void test_growth_and_take(void)
{
	_cleanup_dynbuf_ struct dynbuf b;
	dynbuf_init(&b, 1 << 20);
	static char chunk[65536];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < 1000; i++)
		CHECK_INT(dynbuf_add(&b, chunk, 1000), 0);
	CHECK_INT(b.len, 1000000);
	CHECK_INT(strlen(b.data), 1000000);
	CHECK_INT(dynbuf_add(&b, chunk, 48577), -E2BIG); /* one over 1 MiB */
	CHECK_INT(dynbuf_add(&b, chunk, 48576), 0);     /* exactly 1 MiB */
	CHECK(b.cap == (1u << 20) + 1);
	size_t len = 0;
	char *d = dynbuf_take(&b, &len);
	CHECK(d != NULL && len == 1 << 20 && d[len] == '\0');
	free(d);
	CHECK(b.data == NULL);
	d = dynbuf_take(&b, &len); /* nothing added: "" */
	CHECK_STR(d, "");
	CHECK_INT(len, 0);
	free(d);
	struct dynbuf u = DYNBUF_INIT(SIZE_MAX);
	CHECK_INT(dynbuf_add_str(&u, "unbounded"), 0);
	CHECK_STR(u.data, "unbounded");
	dynbuf_free(&u);
}

int main(void)
{
	test_limit();
	test_growth_and_take();
	return check_summary("dynbuf");
}
