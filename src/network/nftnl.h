/* The hot nftables operations through libnftnl (nftnl.c): private to libnetwork. 0 or -errno. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Add addr to set (table inet "table") with timeout_ms, restarting its timeout if present: by
 * the add alone when in_place (the kernel updates timeouts: Linux 6.10+), else add, delete, add. */
int nftnl_elem_refresh(const char *table, const char *set, const void *addr, size_t alen,
		       uint64_t timeout_ms, bool in_place);
/* Packets of the named counter object of table inet "table". */
int nftnl_counter_packets(const char *table, const char *name, uint64_t *ret);
