/* Unit tests for src/shared/quantity.c: Kubernetes-style cpu and byte quantities. */
#include <errno.h>

#include "check.h"
#include "shared/quantity.h"

struct qcase {
	const char *in;
	int ret;         /* expected return: 0, -EINVAL or -ERANGE */
	uint64_t value;  /* expected value when ret == 0 */
};

static void test_cpu(void)
{
	static const struct qcase cases[] = {
		{"500m", 0, 500},
		{"2", 0, 2000},
		{"0.5", 0, 500},
		{"1.5", 0, 1500},
		{"0.001", 0, 1},
		{"1m", 0, 1},
		{"1500m", 0, 1500},
		{".5", 0, 500},
		{"64", 0, 64000},
		{"0.0001", -EINVAL, 0}, /* finer than a millicore */
		{"0.5m", -EINVAL, 0},   /* fractional millicores */
		{"0", -EINVAL, 0},
		{"0m", -EINVAL, 0},
		{"0.0", -EINVAL, 0},
		{"-1", -EINVAL, 0},
		{"+1", -EINVAL, 0},
		{"", -EINVAL, 0},
		{"1e3", -EINVAL, 0},    /* exponents are not accepted */
		{"abc", -EINVAL, 0},
		{"m", -EINVAL, 0},
		{"1.", -EINVAL, 0},
		{".", -EINVAL, 0},
		{"1 ", -EINVAL, 0},
		{" 1", -EINVAL, 0},
		{"1k", -EINVAL, 0},
		{"1Mi", -EINVAL, 0},
		{"2mm", -EINVAL, 0},
		{"4294967295m", 0, 4294967295ULL},
		{"4294967296m", -ERANGE, 0},
		{"4294968", -ERANGE, 0},
		{"99999999999999999999999999", -ERANGE, 0},
		{"99999999999999999999999999999999999999999999", -ERANGE, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int r = quantity_parse_cpu(cases[i].in, &v);
		if (r != cases[i].ret)
			fprintf(stderr, "cpu input \"%s\"\n", cases[i].in);
		CHECK_INT(r, cases[i].ret);
		if (cases[i].ret == 0)
			CHECK_U64(v, cases[i].value);
		else
			CHECK_U64(v, 12345); /* untouched on failure */
	}
	uint64_t v;
	CHECK_INT(quantity_parse_cpu(NULL, &v), -EINVAL);
}

static void test_bytes(void)
{
	static const struct qcase cases[] = {
		{"512Mi", 0, 512ULL << 20},
		{"2Gi", 0, 2ULL << 30},
		{"1G", 0, 1000000000ULL},
		{"1000", 0, 1000},
		{"1.5Gi", 0, 3ULL << 29},
		{"1Ki", 0, 1024},
		{"1k", 0, 1000},
		{"1K", 0, 1000},
		{"1M", 0, 1000000},
		{"1T", 0, 1000000000000ULL},
		{"1Ti", 0, 1ULL << 40},
		{"1Pi", 0, 1ULL << 50},
		{"1Ei", 0, 1ULL << 60},
		{"7Ei", 0, 7ULL << 60},
		{"0.1", 0, 1},           /* fractional bytes round up */
		{"1.0001Ki", 0, 1025},   /* 1024.1024 rounds up */
		{"1", 0, 1},
		{"0", -EINVAL, 0},
		{"0Gi", -EINVAL, 0},
		{"", -EINVAL, 0},
		{"-1", -EINVAL, 0},
		{"abc", -EINVAL, 0},
		{"Gi", -EINVAL, 0},
		{"1gi", -EINVAL, 0},
		{"1GB", -EINVAL, 0},
		{"1KiB", -EINVAL, 0},
		{"1ki", -EINVAL, 0},
		{"1m", -EINVAL, 0},      /* milli-bytes are not a thing here */
		{"1 Gi", -EINVAL, 0},
		{"1Gi ", -EINVAL, 0},
		{"1e3", -EINVAL, 0},
		{"1.Gi", -EINVAL, 0},
		{"8Ei", -ERANGE, 0},
		{"9223372036854775807", 0, 9223372036854775807ULL},
		{"9223372036854775808", -ERANGE, 0},
		{"99999999999999999999Ei", -ERANGE, 0},
		{"18446744073709551616E", -ERANGE, 0},
		{"99999999999999999999999999999999999999999999", -ERANGE, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int r = quantity_parse_bytes(cases[i].in, &v);
		if (r != cases[i].ret)
			fprintf(stderr, "bytes input \"%s\"\n", cases[i].in);
		CHECK_INT(r, cases[i].ret);
		if (cases[i].ret == 0)
			CHECK_U64(v, cases[i].value);
		else
			CHECK_U64(v, 12345);
	}
	uint64_t v;
	CHECK_INT(quantity_parse_bytes(NULL, &v), -EINVAL);
}

static void test_format(void)
{
	char buf[64];
	quantity_format_cpu(500, buf, sizeof(buf));
	CHECK_STR(buf, "500m");
	quantity_format_cpu(2000, buf, sizeof(buf));
	CHECK_STR(buf, "2");
	quantity_format_cpu(1500, buf, sizeof(buf));
	CHECK_STR(buf, "1500m");
	quantity_format_bytes(512ULL << 20, buf, sizeof(buf));
	CHECK_STR(buf, "512Mi");
	quantity_format_bytes(2ULL << 30, buf, sizeof(buf));
	CHECK_STR(buf, "2Gi");
	quantity_format_bytes(1000, buf, sizeof(buf));
	CHECK_STR(buf, "1000");
	quantity_format_bytes(3ULL << 29, buf, sizeof(buf));
	CHECK_STR(buf, "1536Mi");
	quantity_format_bytes(1ULL << 60, buf, sizeof(buf));
	CHECK_STR(buf, "1Ei");
	quantity_format_bytes(1025, buf, sizeof(buf));
	CHECK_STR(buf, "1025");

	/* Round trips: format(parse(x)) is canonical and parse(format(v)) == v. */
	static const uint64_t cpus[] = {1, 7, 250, 999, 1000, 1001, 2500, 64000, 4294967295ULL};
	for (size_t i = 0; i < sizeof(cpus) / sizeof(cpus[0]); i++) {
		uint64_t back = 0;
		quantity_format_cpu(cpus[i], buf, sizeof(buf));
		CHECK_INT(quantity_parse_cpu(buf, &back), 0);
		CHECK_U64(back, cpus[i]);
	}
	static const uint64_t sizes[] = {1,          1000,       1023,     1024,      4096,
					 1ULL << 20, 3ULL << 29, 123456789, 1ULL << 40, 7ULL << 60,
					 (1ULL << 63) - 1};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t back = 0;
		quantity_format_bytes(sizes[i], buf, sizeof(buf));
		CHECK_INT(quantity_parse_bytes(buf, &back), 0);
		CHECK_U64(back, sizes[i]);
	}
	/* A tiny buffer truncates instead of overflowing. */
	char small[3] = {'x', 'x', 'x'};
	quantity_format_bytes(512ULL << 20, small, sizeof(small));
	CHECK_STR(small, "51");
}

int main(void)
{
	test_cpu();
	test_bytes();
	test_format();
	return check_summary("test_quantity");
}
