/* Unit tests for src/shared/label.c (the label rules corrald and libcorral share) and the
 * CPU-cap variable list of src/shared/cpucap.c. The full key/value cases are in
 * test_corrald_validate.c, the sanitizer's in test_client_policy.c. */
#include <string.h>

#include "check.h"
#include "shared/cpucap.h"
#include "shared/label.h"

#define S(s) (s), strlen(s)

static void test_dns_subdomain(void)
{
	CHECK(label_dns_subdomain_valid(S("corral")));
	CHECK(label_dns_subdomain_valid(S("nemo-gym.nvidia.com")));
	CHECK(label_dns_subdomain_valid(S("a.b-c.0")));
	CHECK(!label_dns_subdomain_valid(S("")));
	CHECK(!label_dns_subdomain_valid(S("Upper.com")));
	CHECK(!label_dns_subdomain_valid(S("-lead.com")));
	CHECK(!label_dns_subdomain_valid(S("trail-.com")));
	CHECK(!label_dns_subdomain_valid(S("a..b")));
	CHECK(!label_dns_subdomain_valid(S(".a")));
	CHECK(!label_dns_subdomain_valid(S("a.")));
	CHECK(!label_dns_subdomain_valid(S("under_score.com")));
	/* Only len bytes count: "corral/" is checked as "corral". */
	CHECK(label_dns_subdomain_valid("corral/", 6));
	char label[80], name[300];
	memset(label, 'a', 64);
	CHECK(label_dns_subdomain_valid(label, 63));
	CHECK(!label_dns_subdomain_valid(label, 64));
	for (size_t i = 0; i < sizeof(name); i++)
		name[i] = i % 2 ? '.' : 'a';
	CHECK(label_dns_subdomain_valid(name, 253));
	CHECK(!label_dns_subdomain_valid(name, 255));
}

static void test_chars_and_names(void)
{
	for (int c = 1; c < 256; c++) {
		bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			    c == '-' || c == '_' || c == '.';
		if (label_char_valid((char)c) != want)
			CHECK_INT(c, -1);
	}
	CHECK(label_name_valid(S("a")));
	CHECK(label_name_valid(S("A-b_c.D9")));
	CHECK(!label_name_valid(S("")));
	CHECK(!label_name_valid(S("_a")));
	CHECK(!label_name_valid(S("a.")));
	CHECK(label_key_valid("nemo-gym.nvidia.com/team"));
	CHECK(!label_key_valid("nemo_gym.com/team"));
	CHECK(label_value_valid(""));
	CHECK(label_key_reserved("opensandbox.io/x"));
}

static void test_cpu_cap_list(void)
{
	CHECK_STR(cpu_cap_env_vars[0], "OMP_NUM_THREADS");
	CHECK_STR(cpu_cap_env_vars[CPU_CAP_ENV_N - 1], "CMAKE_BUILD_PARALLEL_LEVEL");
	for (size_t i = 0; i < CPU_CAP_ENV_N; i++) {
		CHECK(cpu_cap_env_vars[i] && cpu_cap_env_vars[i][0]);
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(cpu_cap_env_vars[i], cpu_cap_env_vars[j]) != 0);
	}
}

int main(void)
{
	test_dns_subdomain();
	test_chars_and_names();
	test_cpu_cap_list();
	return check_summary("label");
}
