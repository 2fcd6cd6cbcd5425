/* Admission arithmetic (corrald/capacity.c). */
#include <errno.h>
#include <stdint.h>
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
	CHECK_INT(capacity_parse("pids=20000,files=300000", &c, msg, sizeof(msg)), 0);
	CHECK_U64(c.pids, 20000);
	CHECK_U64(c.files, 300000);
	CHECK_U64(c.cpu_millis, 1500);
	CHECK_INT(capacity_parse("pids=0", &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "pids") != NULL);
	CHECK_INT(capacity_parse("files=-1", &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "files") != NULL);
	CHECK_INT(capacity_parse("pids=12x", &c, msg, sizeof(msg)), -EINVAL);
	CHECK_INT(capacity_parse("pids=99999999999999999999999", &c, msg, sizeof(msg)), -EINVAL);
	CHECK_U64(c.pids, 20000);
}

static void test_default(void)
{
	struct capacity c;
	capacity_default(2, 24ULL << 30, &c);
	CHECK_U64(c.cpu_millis, 2000);
	CHECK_U64(c.memory_bytes, (24ULL << 30) - (24ULL << 30) / 20);
	capacity_default(1, 2ULL << 30, &c); /* small host: the 512 MiB floor */
	CHECK_U64(c.memory_bytes, (2ULL << 30) - (512ULL << 20));
	CHECK_U64(c.pids, UINT64_MAX); /* the tables are capacity_default_tables()'s */
	capacity_default_tables(32768, 2466170, &c);
	CHECK_U64(c.pids, 32768 - 2048);
	CHECK_U64(c.files, 2466170 - 2466170 / 20);
	capacity_default_tables(4194304, 100000, &c); /* large pid table, small file table */
	CHECK_U64(c.pids, 4194304 - 4194304 / 16);
	CHECK_U64(c.files, 100000 - 65536);
	capacity_default_tables(0, 1000, &c); /* unknown; smaller than the reserve */
	CHECK_U64(c.pids, UINT64_MAX);
	CHECK_U64(c.files, 1);
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

static void test_tables(void)
{
	/* 30720 pids: 7 sandboxes at 4096 */
	struct capacity cap = {100000, 1ULL << 40, 30720, UINT64_MAX}, used = {0};
	struct capacity one = {1000, 1ULL << 30, 4096, 65536};
	char msg[384];
	for (int i = 0; i < 7; i++) {
		CHECK(capacity_fits(&cap, &used, &one));
		used.cpu_millis += one.cpu_millis;
		used.memory_bytes += one.memory_bytes;
		used.pids += one.pids;
		used.files += one.files;
	}
	CHECK(!capacity_fits(&cap, &used, &one));
	capacity_shortfall(&cap, &used, &one, msg, sizeof(msg));
	CHECK_STR(msg, "pids: needs 4096, 2048 of 30720 free in the host's pid table");
	struct capacity small = {1000, 1ULL << 30, 2048, 65536};
	CHECK(capacity_fits(&cap, &used, &small));
	/* files */
	cap.files = 458752; /* 7 x 65536 */
	cap.pids = UINT64_MAX;
	CHECK(!capacity_fits(&cap, &used, &small));
	capacity_shortfall(&cap, &used, &small, msg, sizeof(msg));
	CHECK_STR(msg, "files: needs 65536, 0 of 458752 free in the host's open-file table");
	/* never */
	struct capacity big = {0, 0, 40000, 0};
	cap.pids = 30720;
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "resourceLimits.pids: 40000") != NULL);
	CHECK(strstr(msg, "kernel.pid_max") != NULL);
	big = (struct capacity){0, 0, 1, 1000000};
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "fs.file-max") != NULL);
	/* an unlimited table never overflows */
	cap.files = UINT64_MAX;
	used.files = UINT64_MAX - 10;
	big = (struct capacity){0, 0, 1, 65536};
	CHECK(!capacity_fits(&cap, &used, &big));
}

/* --capacity disk=: the sandboxes' disk limits against the state file system. */
static void test_disk(void)
{
	char msg[256];
	struct capacity c;
	capacity_default(2, 24ULL << 30, &c);
	CHECK(c.disk == UINT64_MAX); /* not counted unless asked */
	CHECK_INT(capacity_parse("disk=100Gi", &c, msg, sizeof(msg)), 0);
	CHECK(c.disk == 100ULL << 30);
	CHECK_INT(capacity_parse("disk=auto", &c, msg, sizeof(msg)), 0);
	CHECK(c.disk == CAPACITY_DISK_AUTO);
	CHECK_INT(capacity_parse("disk=0", &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "disk: '0'") != NULL);
	CHECK_INT(capacity_parse("disk=lots", &c, msg, sizeof(msg)), -EINVAL);
	/* auto: less max(1 GiB, 5%) */
	CHECK(capacity_disk_auto(100ULL << 30) == 95ULL << 30);
	CHECK(capacity_disk_auto(10ULL << 30) == 9ULL << 30);
	CHECK(capacity_disk_auto(512ULL << 20) == 1);

	/* 192 MiB for disks of 64 MiB: three fit, the fourth waits, naming the disk */
	struct capacity cap = {100000, 1ULL << 40, UINT64_MAX, UINT64_MAX, 192ULL << 20};
	struct capacity used = {0}, one = {0, 0, 1, 1, 64ULL << 20};
	for (int i = 0; i < 3; i++) {
		CHECK(capacity_fits(&cap, &used, &one));
		used.disk += one.disk;
	}
	CHECK(!capacity_fits(&cap, &used, &one));
	capacity_shortfall(&cap, &used, &one, msg, sizeof(msg));
	CHECK(strstr(msg, "disk: needs 64Mi, 0") != NULL);
	CHECK(!capacity_never_fits(&cap, &one, msg, sizeof(msg)));
	/* a disk larger than the whole capacity, or none at all, never fits */
	struct capacity big = {0, 0, 1, 1, 1ULL << 30};
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "ephemeral-storage: 1Gi") != NULL);
	big.disk = CAPACITY_DISK_UNBOUNDED;
	CHECK(capacity_never_fits(&cap, &big, msg, sizeof(msg)));
	CHECK(strstr(msg, "without a disk limit") != NULL);
	/* not counted: anything fits, an unbounded disk too */
	cap.disk = UINT64_MAX;
	CHECK(capacity_fits(&cap, &used, &big));
	CHECK(!capacity_never_fits(&cap, &big, msg, sizeof(msg)));
}

int main(void)
{
	test_parse();
	test_default();
	test_fits();
	test_tables();
	test_disk();
	return check_summary("corrald_capacity");
}
