/* Admission arithmetic (corrald/capacity.c). */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "corrald/capacity.h"

static void test_parse(void)
{
	struct capacity c = {1000, 1};
	char msg[256];
	CHECK_INT(capacity_parse("cpu=2,memory=8Gi", &c, msg, sizeof(msg)), 0);
	CHECK_U64(c.cpu_millis, 2000);
	CHECK_U64(c.memory_bytes, 8ULL << 30);
	CHECK_INT(capacity_parse("cpu=1500m", &c, msg, sizeof(msg)), 0); /* memory kept */
	CHECK_U64(c.cpu_millis, 1500);
	CHECK_U64(c.memory_bytes, 8ULL << 30);
	CHECK_INT(capacity_parse("memory=512Mi", &c, msg, sizeof(msg)), 0);
	CHECK_U64(c.memory_bytes, 512ULL << 20);
	CHECK_INT(capacity_parse("gpu=1", &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "gpu") != NULL);
	CHECK_INT(capacity_parse("cpu=abc", &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "cpu") != NULL);
	CHECK_INT(capacity_parse("cpu=0", &c, msg, sizeof(msg)), -EINVAL);
	CHECK_INT(capacity_parse("cpu", &c, msg, sizeof(msg)), -EINVAL);
	CHECK_INT(capacity_parse("", &c, msg, sizeof(msg)), -EINVAL);
	/* a failed parse leaves the capacity alone */
	CHECK_U64(c.cpu_millis, 1500);
}

static void test_default(void)
{
	struct capacity c;
	capacity_default(2, 24ULL << 30, &c);
	CHECK_U64(c.cpu_millis, 2000);
	CHECK_U64(c.memory_bytes, (24ULL << 30) - (24ULL << 30) / 20);
	capacity_default(1, 2ULL << 30, &c); /* small host: the 512 MiB floor */
	CHECK_U64(c.memory_bytes, (2ULL << 30) - (512ULL << 20));
}

static void test_fits(void)
{
	struct capacity cap = {2000, 4ULL << 30}, used = {0, 0}, one = {1000, 1ULL << 30};
	CHECK(capacity_fits(&cap, &used, &one));
	used.cpu_millis = 1000;
	CHECK(capacity_fits(&cap, &used, &one));
	used.cpu_millis = 2000;
	CHECK(!capacity_fits(&cap, &used, &one));
	char msg[256];
	capacity_shortfall(&cap, &used, &one, msg, sizeof(msg));
	CHECK_STR(msg, "cpu: needs 1000m, 0m of 2000m free");
	used = (struct capacity){0, 4ULL << 30};
	capacity_shortfall(&cap, &used, &one, msg, sizeof(msg));
	CHECK_STR(msg, "memory: needs 1Gi, 0 of 4Gi free");
	/* zero requests always fit */
	struct capacity zero = {0, 0};
	CHECK(capacity_fits(&cap, &used, &zero));
	/* never */
	struct capacity big = {3000, 0};
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "resourceRequests.cpu") != NULL);
	big = (struct capacity){0, 5ULL << 30};
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "resourceRequests.memory") != NULL);
	CHECK(!capacity_never_fits(&cap, &one, msg, sizeof(msg)));
}

int main(void)
{
	test_parse();
	test_default();
	test_fits();
	return check_summary("corrald_capacity");
}
