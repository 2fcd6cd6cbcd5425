/* NULL-terminated vectors of malloc'ed strings (argv, environ, id lists). */
#pragma once

#include "macro.h"

/* Frees every string and the vector; accepts NULL. */
void strv_free(char **v);
static inline void strv_freep(char ***v)
{
	strv_free(*v);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)
