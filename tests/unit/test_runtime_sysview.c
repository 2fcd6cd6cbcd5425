/* The sandbox's CPU and memory view (runtime/sysview.c): CPU picking, cpulist format, and the
 * /proc/cpuinfo, /proc/stat and /proc/meminfo filters, on a fake 4-CPU host. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/sysview.h"

static const char cpuinfo4[] = "processor\t: 0\nmodel name\t: Fake CPU\n\n"
			       "processor\t: 1\nmodel name\t: Fake CPU\n\n"
			       "processor\t: 2\nmodel name\t: Fake CPU\n\n"
			       "processor\t: 3\nmodel name\t: Fake CPU\n\n";

static const char stat4[] = "cpu  40 0 4 400 0 0 0 0 0 0\n"
			    "cpu0 10 0 1 100 0 0 0 0 0 0\n"
			    "cpu1 10 0 1 100 0 0 0 0 0 0\n"
			    "cpu2 10 0 1 100 0 0 0 0 0 0\n"
			    "cpu3 10 0 1 100 0 0 0 0 0 0\n"
			    "intr 12345 0 0\nctxt 999\nbtime 1700000000\nprocesses 77\n";

static const char meminfo[] = "MemTotal:       24684092 kB\n"
			      "MemFree:        23642040 kB\n"
			      "MemAvailable:   23937132 kB\n"
			      "Buffers:           35140 kB\n"
			      "Cached:          4315120 kB\n"
			      "SwapTotal:       1000000 kB\n"
			      "SwapFree:        1000000 kB\n"
			      "HugePages_Total:       0\n"
			      "Hugepagesize:       2048 kB\n"
			      "VmallocTotal:   34359738367 kB\n";

static void set_of(cpu_set_t *s, const int *cpus, int n)
{
	CPU_ZERO(s);
	for (int i = 0; i < n; i++)
		CPU_SET(cpus[i], s);
}

static void test_ncpus(void)
{
	CHECK_INT(sysview_ncpus(0), 0);
	CHECK_INT(sysview_ncpus(1), 1);
	CHECK_INT(sysview_ncpus(500), 1);
	CHECK_INT(sysview_ncpus(1000), 1);
	CHECK_INT(sysview_ncpus(1001), 2);
	CHECK_INT(sysview_ncpus(2000), 2);
	CHECK_INT(sysview_ncpus(2500), 3);
}

static void test_pick(void)
{
	cpu_set_t allowed, got;
	int four[] = {0, 1, 2, 3};
	set_of(&allowed, four, 4);
	CHECK_INT(sysview_pick_cpus(&allowed, 2, 0, &got), 2);
	CHECK(CPU_ISSET(0, &got) && CPU_ISSET(1, &got) && CPU_COUNT(&got) == 2);
	CHECK_INT(sysview_pick_cpus(&allowed, 2, 3, &got), 2); /* wraps: 3, 0 */
	CHECK(CPU_ISSET(3, &got) && CPU_ISSET(0, &got) && CPU_COUNT(&got) == 2);
	CHECK_INT(sysview_pick_cpus(&allowed, 9, 1, &got), 4);
	/* Only CPUs the host allows (a sparse set). */
	int sparse[] = {2, 5, 7};
	set_of(&allowed, sparse, 3);
	CHECK_INT(sysview_pick_cpus(&allowed, 1, 4, &got), 1);
	CHECK(CPU_ISSET(5, &got) && CPU_COUNT(&got) == 1);
	/* Seeds spread: 64 ids over 4 CPUs use every CPU. */
	set_of(&allowed, four, 4);
	int used[4] = {0};
	char id[32];
	for (int i = 0; i < 64; i++) {
		snprintf(id, sizeof(id), "sandbox-%d", i);
		sysview_pick_cpus(&allowed, 1, sysview_seed(id), &got);
		for (int c = 0; c < 4; c++)
			used[c] += CPU_ISSET(c, &got);
	}
	for (int c = 0; c < 4; c++)
		CHECK(used[c] > 0);
}

static void test_cpulist(void)
{
	cpu_set_t s;
	char buf[64];
	int a[] = {0, 1, 2, 5, 7, 8};
	set_of(&s, a, 6);
	CHECK_INT(sysview_cpulist(&s, buf, sizeof(buf)), 0);
	CHECK_STR(buf, "0-2,5,7-8\n");
	int b[] = {3};
	set_of(&s, b, 1);
	CHECK_INT(sysview_cpulist(&s, buf, sizeof(buf)), 0);
	CHECK_STR(buf, "3\n");
	set_of(&s, a, 6);
	CHECK_INT(sysview_cpulist(&s, buf, 4), -ENOSPC);
}

static void test_cpuinfo(void)
{
	cpu_set_t s;
	int two[] = {1, 3};
	set_of(&s, two, 2);
	char *v = sysview_cpuinfo(cpuinfo4, &s);
	CHECK_STR(v, "processor\t: 1\nmodel name\t: Fake CPU\n\n"
		     "processor\t: 3\nmodel name\t: Fake CPU\n\n");
	free(v);
	/* A header outside any processor block (s390) stays. */
	v = sysview_cpuinfo("vendor_id : IBM\n\nprocessor\t: 0\n\nprocessor\t: 1\n\n", &s);
	CHECK_STR(v, "vendor_id : IBM\n\nprocessor\t: 1\n\n");
	free(v);
}

static void test_stat(void)
{
	cpu_set_t s;
	int two[] = {0, 2};
	set_of(&s, two, 2);
	char *v = sysview_stat(stat4, &s);
	CHECK_STR(v, "cpu  20 0 2 200 0 0 0 0 0 0\n"
		     "cpu0 10 0 1 100 0 0 0 0 0 0\n"
		     "cpu2 10 0 1 100 0 0 0 0 0 0\n"
		     "intr 12345 0 0\nctxt 999\nbtime 1700000000\nprocesses 77\n");
	free(v);
}

static void test_meminfo(void)
{
	char *v = sysview_meminfo(meminfo, 512ull << 20, 100ull << 20);
	CHECK_STR(v, "MemTotal:         524288 kB\n"
		     "MemFree:          421888 kB\n"
		     "MemAvailable:     421888 kB\n"
		     "Buffers:           35140 kB\n"
		     "Cached:           524288 kB\n"
		     "SwapTotal:             0 kB\n"
		     "SwapFree:              0 kB\n"
		     "HugePages_Total:       0\n"
		     "Hugepagesize:       2048 kB\n"
		     "VmallocTotal:   34359738367 kB\n");
	free(v);
	/* More charged than the limit (page cache racing): free never underflows. */
	v = sysview_meminfo("MemTotal: 100 kB\nMemFree: 50 kB\n", 1 << 20, 2 << 20);
	CHECK_STR(v, "MemTotal:           1024 kB\nMemFree:               0 kB\n");
	free(v);
}

int main(void)
{
	test_ncpus();
	test_pick();
	test_cpulist();
	test_cpuinfo();
	test_stat();
	test_meminfo();
	return check_summary("runtime_sysview");
}
