/* Daemon logging: one line per event on stderr. Libraries and the runtime never log; they return. */
#pragma once

#include "macro.h"

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
void log_set_ident(const char *ident);
/* Parses "error", "warn", "info", "debug"; returns -EINVAL otherwise. */
int log_level_parse(const char *s, enum log_level *ret);
void log_msg(enum log_level level, const char *fmt, ...) _printf_(2, 3);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)
