/*
 * Unit tests for the cgroup managers against fake cgroupfs trees in a temp dir
 * ($CORRAL_CGROUP_ROOT): detection, limits written, freeze, kill, probe parsing, remove.
 * v2 in full; v1 too, with a co-mounted "cpu,cpuacct" hierarchy.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "runtime/cgroup.h"
#include "shared/fsutil.h"

static char root[PATH_MAX];

static const char *P(const char *rel)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, PATH_MAX, "%s/%s", root, rel);
	return b;
}

static void put(const char *rel, const char *content)
{
	int fd = open(P(rel), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(P(rel));
		exit(2);
	}
	if (write(fd, content, strlen(content)) < 0)
		exit(2);
	close(fd);
}

static const char *get(const char *rel)
{
	static char buf[4][256];
	static int next;
	char *b = buf[next++ % 4];
	if (fs_read_small(P(rel), b, 256) < 0)
		snprintf(b, 256, "<missing>");
	return b;
}

#define ID "0123456789ab-test"

static void test_v2(void)
{
	snprintf(root, sizeof(root), "/tmp/corral-cgv2-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	setenv("CORRAL_CGROUP_ROOT", root, 1);
	put("cgroup.controllers", "cpuset cpu io memory pids");
	put("cgroup.subtree_control", "cpu memory pids");
	CHECK(cgroup_detect() == &cgroup_v2_ops);
	CHECK_STR(cgroup_root(), root);

	mkdir(P("corral"), 0755);
	put("corral/cgroup.controllers", "pids");
	put("corral/cgroup.subtree_control", "");
	mkdir(P("corral/" ID), 0755);
	static const char *const files[] = {
	    "cpu.max",		"cpu.weight", "memory.max",   "memory.swap.max", "memory.low",
	    "memory.oom.group", "pids.max",   "cgroup.procs", "cgroup.freeze",	 "cgroup.kill",
	};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "corral/" ID "/%s", files[i]);
		put(rel, "");
	}

	struct sandbox_spec spec = {
	    .id = ID,
	    .cpu_limit_millis = 1500,
	    .memory_limit_bytes = 512 << 20,
	    .memory_request_bytes = 256 << 20,
	    .cpu_request_millis = 250,
	    .oom_group = true,
	};
	struct error err = {0};
	CHECK_INT(cgroup_v2_ops.create("corral", ID, &spec, &err), 0);
	CHECK_STR(err.msg, "");
	CHECK_STR(get("cgroup.subtree_control"), "cpu memory pids"); /* untouched: all enabled */
	CHECK_STR(get("corral/cgroup.subtree_control"), "+pids");    /* only what is offered */
	CHECK_STR(get("corral/" ID "/cpu.max"), "150000 100000");
	CHECK_STR(get("corral/" ID "/cpu.weight"), "10"); /* 250m -> 256 shares -> weight 10 */
	CHECK_STR(get("corral/" ID "/memory.max"), "536870912");
	CHECK_STR(get("corral/" ID "/memory.swap.max"), "0");
	CHECK_STR(get("corral/" ID "/memory.low"), "268435456");
	CHECK_STR(get("corral/" ID "/memory.oom.group"), "1");
	CHECK_STR(get("corral/" ID "/pids.max"), "4096");

	/* Optional knobs may be absent; required ones fail with the path in the message. */
	unlink(P("corral/" ID "/memory.swap.max"));
	spec.pids_max = 77;
	put("corral/" ID "/pids.max", ""); /* a real knob file replaces, a fake one overwrites */
	CHECK_INT(cgroup_v2_ops.create("corral", ID, &spec, &err), 0);
	CHECK_STR(get("corral/" ID "/pids.max"), "77");
	unlink(P("corral/" ID "/memory.max"));
	error_clear(&err);
	CHECK_INT(cgroup_v2_ops.create("corral", ID, &spec, &err), -ENOENT);
	CHECK(strstr(err.msg, "memory.max") != NULL);
	put("corral/" ID "/memory.max", "");

	CHECK_INT(cgroup_v2_ops.enter("corral", ID, 4242, &err), 0);
	CHECK_STR(get("corral/" ID "/cgroup.procs"), "4242");
	CHECK_INT(cgroup_v2_ops.freeze("corral", ID, true, &err), 0);
	CHECK_STR(get("corral/" ID "/cgroup.freeze"), "1");
	CHECK_INT(cgroup_v2_ops.freeze("corral", ID, false, &err), 0);
	CHECK_STR(get("corral/" ID "/cgroup.freeze"), "0");

	/* kill: populated -> cgroup.kill written, not empty yet; unpopulated -> empty, no write. */
	bool empty = true;
	put("corral/" ID "/cgroup.events", "populated 1\nfrozen 0\n");
	CHECK_INT(cgroup_v2_ops.kill("corral", ID, &empty, &err), 0);
	CHECK(!empty);
	CHECK_STR(get("corral/" ID "/cgroup.kill"), "1");
	put("corral/" ID "/cgroup.kill", "");
	put("corral/" ID "/cgroup.events", "populated 0\nfrozen 1\n");
	CHECK_INT(cgroup_v2_ops.kill("corral", ID, &empty, &err), 0);
	CHECK(empty);
	CHECK_STR(get("corral/" ID "/cgroup.kill"), "");
	CHECK_INT(cgroup_wait_empty(&cgroup_v2_ops, "corral", ID, 100, &err), 0);
	put("corral/" ID "/cgroup.events", "populated 1\nfrozen 1\n");
	CHECK_INT(cgroup_wait_empty(&cgroup_v2_ops, "corral", ID, 20, &err), -ETIMEDOUT);

	/* probe parses every file it knows. */
	put("corral/" ID "/memory.events", "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n");
	put("corral/" ID "/memory.current", "1048576\n");
	put("corral/" ID "/cpu.max", "150000 100000\n");
	put("corral/" ID "/memory.peak", "2097152\n");
	put("corral/" ID "/memory.max", "max\n");
	put("corral/" ID "/pids.current", "3\n");
	put("corral/" ID "/pids.max", "77\n");
	put("corral/" ID "/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"
				      "nr_periods 10\nnr_throttled 4\nthrottled_usec 20\n");
	struct sandbox_probe pr = {0};
	CHECK_INT(cgroup_v2_ops.probe("corral", ID, &pr, &err), 0);
	CHECK(pr.frozen);
	CHECK_U64(pr.oom_kills, 2);
	CHECK(pr.oom_events_known);
	CHECK_U64(pr.oom_events, 2);
	CHECK_U64(pr.memory_max_events, 5);
	CHECK_U64(pr.cpu_limit_millis, 1500);
	CHECK_U64(pr.memory_current, 1048576);
	CHECK_U64(pr.memory_peak, 2097152);
	CHECK_U64(pr.memory_limit, 0);
	CHECK_U64(pr.pids_current, 3);
	CHECK_U64(pr.pids_max, 77);
	CHECK_U64(pr.cpu_usage_ns, 1500000);
	CHECK_U64(pr.cpu_nr_periods, 10);
	CHECK_U64(pr.cpu_nr_throttled, 4);
	CHECK_U64(pr.cpu_throttled_ns, 20000);
	CHECK_INT(cgroup_v2_ops.probe("corral", "nosuch", &pr, &err), -ENOENT);

	/* remove: a real cgroupfs removes the knob files with the dir; the fake needs help. */
	CHECK_INT(cgroup_v2_ops.remove("corral", ID, &err), -ENOTEMPTY);
	CHECK_INT(fs_remove_tree(P("corral/" ID)), 0);
	CHECK_INT(cgroup_v2_ops.remove("corral", ID, &err), 0); /* idempotent */
	CHECK_INT(fs_remove_tree(root), 0);
}

static void test_v1(void)
{
	snprintf(root, sizeof(root), "/tmp/corral-cgv1-XXXXXX");
	CHECK(mkdtemp(root) != NULL);
	setenv("CORRAL_CGROUP_ROOT", root, 1);
	mkdir(P("cpu,cpuacct"), 0755);
	CHECK_INT(symlink("cpu,cpuacct", P("cpu")), 0);
	CHECK_INT(symlink("cpu,cpuacct", P("cpuacct")), 0);
	mkdir(P("memory"), 0755);
	mkdir(P("pids"), 0755);
	mkdir(P("freezer"), 0755);
	mkdir(P("cpuset"), 0755);
	put("cpuset/cpuset.cpus", "0-3");
	put("cpuset/cpuset.mems", "0");
	CHECK(cgroup_detect() == &cgroup_v1_ops);
	static const char *const dirs[] = {"cpu,cpuacct", "memory", "pids", "freezer", "cpuset"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "%s/corral", dirs[i]);
		mkdir(P(rel), 0755);
		snprintf(rel, sizeof(rel), "%s/corral/" ID, dirs[i]);
		mkdir(P(rel), 0755);
		snprintf(rel, sizeof(rel), "%s/corral/" ID "/cgroup.procs", dirs[i]);
		put(rel, "");
	}
	put("cpu,cpuacct/corral/" ID "/cpu.cfs_period_us", "");
	put("cpu,cpuacct/corral/" ID "/cpu.cfs_quota_us", "");
	put("cpu,cpuacct/corral/" ID "/cpu.shares", "");
	put("memory/corral/" ID "/memory.limit_in_bytes", "");
	put("memory/corral/" ID "/memory.soft_limit_in_bytes", "");
	put("pids/corral/" ID "/pids.max", "");
	put("freezer/corral/" ID "/freezer.state", "");
	/* A fresh v1 cpuset has no CPUs and no memory nodes (files exist, empty). */
	put("cpuset/corral/cpuset.cpus", "");
	put("cpuset/corral/cpuset.mems", "");
	put("cpuset/corral/" ID "/cpuset.cpus", "");
	put("cpuset/corral/" ID "/cpuset.mems", "");

	struct sandbox_spec spec = {.id = ID,
				    .cpu_limit_millis = 500,
				    .memory_limit_bytes = 1 << 30,
				    .memory_request_bytes = 1 << 20};
	struct error err = {0};
	/* memory.memsw.limit_in_bytes is absent (no swap accounting): optional. */
	CHECK_INT(cgroup_v1_ops.create("corral", ID, &spec, &err), 0);
	CHECK_STR(err.msg, "");
	CHECK_STR(get("cpu/corral/" ID "/cpu.cfs_period_us"), "100000");
	CHECK_STR(get("cpu/corral/" ID "/cpu.cfs_quota_us"), "50000");
	CHECK_STR(get("cpuacct/corral/" ID "/cpu.shares"), "512");
	CHECK_STR(get("memory/corral/" ID "/memory.limit_in_bytes"), "1073741824");
	CHECK_STR(get("memory/corral/" ID "/memory.soft_limit_in_bytes"), "1048576");
	CHECK_STR(get("pids/corral/" ID "/pids.max"), "4096");
	/* cpuset: the parent and the sandbox inherit the root's CPUs and nodes; pin narrows them. */
	CHECK_STR(get("cpuset/corral/cpuset.cpus"), "0-3");
	CHECK_STR(get("cpuset/corral/cpuset.mems"), "0");
	CHECK_STR(get("cpuset/corral/" ID "/cpuset.cpus"), "0-3");
	CHECK_STR(get("cpuset/corral/" ID "/cpuset.mems"), "0");
	put("cpuset/corral/" ID "/cpuset.cpus", ""); /* a fake file is not truncated by a write */
	CHECK_INT(cgroup_v1_ops.pin("corral", ID, "2", &err), 0);
	CHECK_STR(get("cpuset/corral/" ID "/cpuset.cpus"), "2");
	CHECK_STR(get("cpuset/corral/" ID "/cpuset.mems"), "0");
	put("memory/corral/" ID "/memory.memsw.limit_in_bytes", "");
	CHECK_INT(cgroup_v1_ops.create("corral", ID, &spec, &err), 0);
	CHECK_STR(get("memory/corral/" ID "/memory.memsw.limit_in_bytes"), "1073741824");

	/* enter writes each distinct hierarchy once (a co-mounted one is one file). */
	CHECK_INT(cgroup_v1_ops.enter("corral", ID, 99, &err), 0);
	CHECK_STR(get("cpu,cpuacct/corral/" ID "/cgroup.procs"), "99");
	CHECK_STR(get("freezer/corral/" ID "/cgroup.procs"), "99");
	CHECK_INT(cgroup_v1_ops.freeze("corral", ID, true, &err), 0);
	CHECK_STR(get("freezer/corral/" ID "/freezer.state"), "FROZEN");
	put("freezer/corral/" ID "/cgroup.procs", "");
	bool empty = false;
	CHECK_INT(cgroup_v1_ops.is_empty("corral", ID, &empty, &err), 0);
	CHECK(empty);
	CHECK_INT(cgroup_v1_ops.kill("corral", ID, &empty, &err), 0);
	CHECK(empty);
	CHECK_STR(get("freezer/corral/" ID "/freezer.state"), "THAWED");

	put("memory/corral/" ID "/memory.oom_control",
	    "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
	put("memory/corral/" ID "/memory.usage_in_bytes", "4096\n");
	put("memory/corral/" ID "/memory.failcnt", "12\n");
	put("cpu,cpuacct/corral/" ID "/cpu.cfs_quota_us", "50000\n");
	put("cpu,cpuacct/corral/" ID "/cpu.cfs_period_us", "100000\n");
	put("memory/corral/" ID "/memory.max_usage_in_bytes", "8192\n");
	put("memory/corral/" ID "/memory.limit_in_bytes", "9223372036854771712\n");
	put("pids/corral/" ID "/pids.current", "2\n");
	put("pids/corral/" ID "/pids.max", "max\n");
	put("cpu,cpuacct/corral/" ID "/cpuacct.usage", "123456\n");
	put("cpu,cpuacct/corral/" ID "/cpu.stat",
	    "nr_periods 7\nnr_throttled 1\nthrottled_time 99\n");
	put("freezer/corral/" ID "/freezer.state", "FROZEN\n");
	struct sandbox_probe pr = {0};
	CHECK_INT(cgroup_v1_ops.probe("corral", ID, &pr, &err), 0);
	CHECK(pr.frozen);
	CHECK_U64(pr.oom_kills, 3);
	CHECK(!pr.oom_events_known);
	CHECK_U64(pr.memory_max_events, 12);
	CHECK_U64(pr.cpu_limit_millis, 500);
	CHECK_U64(pr.memory_current, 4096);
	CHECK_U64(pr.memory_peak, 8192);
	CHECK_U64(pr.memory_limit, 0);
	CHECK_U64(pr.pids_current, 2);
	CHECK_U64(pr.pids_max, 0);
	CHECK_U64(pr.cpu_usage_ns, 123456);
	CHECK_U64(pr.cpu_nr_periods, 7);
	CHECK_U64(pr.cpu_nr_throttled, 1);
	CHECK_U64(pr.cpu_throttled_ns, 99);

	/* The OOM watch registers "<eventfd> <oom_control fd>" in cgroup.event_control. */
	put("memory/corral/" ID "/cgroup.event_control", "");
	int efd = cgroup_v1_ops.oom_watch("corral", ID, &err);
	CHECK(efd >= 0);
	int e1 = -1, e2 = -1;
	CHECK_INT(sscanf(get("memory/corral/" ID "/cgroup.event_control"), "%d %d", &e1, &e2), 2);
	CHECK_INT(e1, efd);
	CHECK(e2 >= 0 && e2 != efd);
	CHECK(fcntl(efd, F_GETFD) & FD_CLOEXEC);
	if (efd >= 0)
		close(efd);
	CHECK(cgroup_v1_ops.oom_watch("corral", "nosuch", &err) < 0);
	CHECK(cgroup_v2_ops.oom_watch == NULL); /* v2: memory.oom.group, no watch needed */

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char rel[128];
		snprintf(rel, sizeof(rel), "%s/corral/" ID, dirs[i]);
		CHECK_INT(fs_remove_tree(P(rel)), 0);
	}
	CHECK_INT(cgroup_v1_ops.remove("corral", ID, &err), 0);
	CHECK_INT(fs_remove_tree(root), 0);
}

int main(void)
{
	CHECK_U64(cgroup_cpu_shares(1000), 1024);
	CHECK_U64(cgroup_cpu_quota_us(1500), 150000);
	CHECK_U64(cgroup_cpu_quota_us(1), 1000); /* the kernel refuses less than 1 ms */
	CHECK_U64(cgroup_cpu_shares(1), 2);
	CHECK_U64(cgroup_cpu_weight(1024), 39);
	CHECK_U64(cgroup_cpu_weight(2), 1);
	CHECK_U64(cgroup_cpu_weight(262144), 10000);
	test_v2();
	test_v1();
	return check_summary("cgroup_v2");
}
