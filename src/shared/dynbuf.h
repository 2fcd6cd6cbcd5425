/*
 * A growable byte buffer with its maximum set at init (curl's dynbuf): every append checks it, so
 * no caller writes a limit check of its own or forgets one. The data is kept NUL-terminated (the
 * terminator is not counted in len nor against max).
 */
#pragma once

#include <stddef.h>

#include "macro.h"

struct dynbuf {
	char *data; /* NULL until something (even "") was added */
	size_t len, cap;
	size_t max; /* the most len may become */
};

#define DYNBUF_INIT(max_) {.data = NULL, .len = 0, .cap = 0, .max = (max_)}
void dynbuf_init(struct dynbuf *b, size_t max);
/* Append n bytes (n may be 0: data is then at least ""). -E2BIG when len would pass max (nothing
 * is appended), -ENOMEM. */
int dynbuf_add(struct dynbuf *b, const void *p, size_t n);
int dynbuf_add_str(struct dynbuf *b, const char *s);
int dynbuf_printf(struct dynbuf *b, const char *fmt, ...) _printf_(2, 3);
/* Forget the contents, keep the memory and the maximum. */
void dynbuf_reset(struct dynbuf *b);
/* Free the memory; the maximum stays. */
void dynbuf_free(struct dynbuf *b);
/* Hand the data to the caller (to free()); "" when nothing was added, NULL only when out of
 * memory. The buffer is left empty. */
char *dynbuf_take(struct dynbuf *b, size_t *ret_len);

static inline void dynbuf_freep(struct dynbuf *b)
{
	dynbuf_free(b);
}
#define _cleanup_dynbuf_ _cleanup_(dynbuf_freep)
