/* FNV-1a (32 bit) of a NUL-terminated string: the one non-cryptographic string hash of the tree
 * (hash tables of executions and pooled connections, the seed that picks a sandbox's CPUs, a
 * network's bridge MAC and NFLOG group). Not for anything a client could use to collide on
 * purpose at scale. NULL hashes like "". */
#pragma once

#include <stdint.h>

static inline uint32_t hash_fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)s; p && *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}
