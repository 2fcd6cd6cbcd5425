#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "shared/label.h"

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool label_char_valid(char c)
{
	return is_alnum(c) || c == '-' || c == '_' || c == '.';
}

/* ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63 characters. */
bool label_name_valid(const char *s, size_t len)
{
	if (len == 0 || len > 63)
		return false;
	if (!is_alnum(s[0]) || !is_alnum(s[len - 1]))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

bool label_dns_subdomain_valid(const char *s, size_t len)
{
	if (len == 0 || len > 253)
		return false;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || s[i] == '.') {
			size_t l = i - start;
			if (l == 0 || l > 63)
				return false;
			const char *lab = s + start;
			bool ok_ends = ((lab[0] >= 'a' && lab[0] <= 'z') || (lab[0] >= '0' && lab[0] <= '9')) &&
				       ((lab[l - 1] >= 'a' && lab[l - 1] <= 'z') ||
					(lab[l - 1] >= '0' && lab[l - 1] <= '9'));
			if (!ok_ends)
				return false;
			for (size_t j = 0; j < l; j++) {
				char c = lab[j];
				if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
					return false;
			}
			start = i + 1;
		}
	}
	return true;
}

bool label_key_valid(const char *key)
{
	if (!key)
		return false;
	const char *slash = strchr(key, '/');
	if (!slash)
		return label_name_valid(key, strlen(key));
	if (strchr(slash + 1, '/'))
		return false;
	return label_dns_subdomain_valid(key, (size_t)(slash - key)) &&
	       label_name_valid(slash + 1, strlen(slash + 1));
}

bool label_value_valid(const char *value)
{
	if (!value)
		return false;
	size_t len = strlen(value);
	return len == 0 || label_name_valid(value, len);
}

bool label_key_reserved(const char *key)
{
	return strncasecmp(key, "opensandbox.io/", strlen("opensandbox.io/")) == 0;
}
