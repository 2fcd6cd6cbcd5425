# Thin wrapper over Meson so the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
LISTEN ?= 127.0.0.1:8080
STATE_DIR ?= /var/lib/corral

.PHONY: all bootstrap build run test clean asan tsan clang

all: build

bootstrap:
	@./scripts/bootstrap.sh

# Warnings are errors in CI builds (CI=true, as .ci/run is run), not on a developer's compiler.
$(BUILD)/build.ninja:
	@meson setup $(BUILD) $(if $(filter true,$(CI)),-Dwerror=true) >/dev/null

build: bootstrap $(BUILD)/build.ninja
	@ninja -C $(BUILD)

# The main job: corrald on $(LISTEN) with the native runtime and the host image.
run: build
	@./scripts/run.sh $(BUILD) $(LISTEN) $(STATE_DIR)

# Every test: unit, integration (real sandboxes), compat; prints "N passed, N failed" last.
test: build
	@./scripts/test.sh $(BUILD)

# The sanitizer and clang builds scripts/test.sh adds under CI. Each build dir's options are
# meson_options.txt's (-Dsanitize) and are set again on an existing dir, so a dir made by an older
# Makefile cannot keep other flags.
WERROR = $(if $(filter true,$(CI)),-Dwerror=true)
# meson_dir DIR OPTIONS [ENV]: set DIR up, or reconfigure it, with OPTIONS.
meson_dir = if [ -f $(1)/build.ninja ]; then meson configure $(1) $(2) >/dev/null; \
	else $(3) meson setup $(1) $(2) >/dev/null; fi

# ASan + UBSan: CI runs the unit, fuzz and integration suites in it.
asan: bootstrap
	@$(call meson_dir,build-asan,-Dsanitize=address -Db_sanitize=none $(WERROR))
	@ninja -C build-asan -j2 >/dev/null

# ThreadSanitizer: CI runs libcorral's tests (suite 'client') in it; only those are built.
TSAN_TARGETS = src/client/test_client_policy src/client/test_client_events src/client/test_client_threads
tsan: bootstrap
	@$(call meson_dir,build-tsan,-Dsanitize=thread -Db_sanitize=none $(WERROR))
	@ninja -C build-tsan -j2 $(TSAN_TARGETS) >/dev/null

# clang: CI compiles everything with it (warnings are errors there) and runs the unit suite.
clang: bootstrap
	@$(call meson_dir,build-clang,$(WERROR),CC=clang)
	@ninja -C build-clang -j2 >/dev/null

clean:
	rm -rf $(BUILD) build-asan build-tsan build-clang
