/*
 * The CPU-cap environment variables (reference/nemo-gym-provider.md section 3): thread-pool sizes
 * of OpenMP, BLAS, Python, Go, Rust, libuv, pytest-xdist... that a sandbox with a CPU limit gets
 * set to max(1, floor(cpu)). corrald adds them at create (validate.h cpu_cap_env_add); libcorral
 * sends them with its creates (for servers that do not).
 */
#pragma once

#define CPU_CAP_ENV_N 19
extern const char *const cpu_cap_env_vars[CPU_CAP_ENV_N];
