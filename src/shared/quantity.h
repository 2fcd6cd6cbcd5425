/*
 * Kubernetes-style resource quantities, as used by resourceLimits / resourceRequests.
 * CPU: "2", "0.5", "500m" -> millicores. Bytes: "512Mi", "2Gi", "1G", "1000", "1.5Gi" -> bytes.
 * Anything malformed, negative, zero where zero is meaningless, or overflowing is -EINVAL / -ERANGE.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

int quantity_parse_cpu(const char *s, uint64_t *ret_millicores);
int quantity_parse_bytes(const char *s, uint64_t *ret_bytes);
/* Formats millicores back to the shortest canonical form ("2", "500m"). */
void quantity_format_cpu(uint64_t millicores, char *buf, size_t len);
/* Formats bytes with the largest exact binary suffix ("512Mi", "2Gi", "1000"). */
void quantity_format_bytes(uint64_t bytes, char *buf, size_t len);
