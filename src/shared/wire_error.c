#include <stddef.h>
#include <string.h>

#include "shared/wire_error.h"

const struct wire_error_info wire_errors[WIRE_ERROR_COUNT_] = {
#define WIRE_ERROR_INFO_(scope_, name_, code_, status_, others_, retryable_, when_)                 \
	[WIRE_##name_] = {.scope = WIRE_SCOPE_##scope_, .name = #name_, .code = code_,              \
			  .status = status_, .other_statuses = others_, .retryable = retryable_,    \
			  .when = when_},
	WIRE_ERROR_MAP(WIRE_ERROR_INFO_)
#undef WIRE_ERROR_INFO_
};

const struct wire_error_info *wire_error_find(enum wire_scope scope, const char *code)
{
	for (size_t i = 0; i < WIRE_ERROR_COUNT_; i++)
		if (wire_errors[i].scope == scope && strcmp(wire_errors[i].code, code) == 0)
			return &wire_errors[i];
	return NULL;
}
