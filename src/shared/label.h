/*
 * Kubernetes label rules, as OpenSandbox applies them to sandbox metadata. corrald checks metadata
 * keys and values with them; libcorral builds its attribution labels (the label prefix, sanitized
 * values) by the same rules.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* A character of a label name or value: [A-Za-z0-9-_.]. */
bool label_char_valid(char c);
/* A label name or non-empty value: ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63. */
bool label_name_valid(const char *s, size_t len);
/* DNS-1123 subdomain: lowercase labels of [a-z0-9-] (not starting or ending with '-') of 1..63
 * characters joined by dots, at most 253 characters: a label key's prefix. */
bool label_dns_subdomain_valid(const char *s, size_t len);
/* [prefix/]name, prefix a DNS subdomain. */
bool label_key_valid(const char *key);
/* Empty, or a label name. */
bool label_value_valid(const char *value);
/* Keys under opensandbox.io/ belong to the system. */
bool label_key_reserved(const char *key);
