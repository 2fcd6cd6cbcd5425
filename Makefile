# Thin wrapper over Meson so the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
LISTEN ?= 127.0.0.1:8080
STATE_DIR ?= /var/lib/corral

.PHONY: all bootstrap build run test clean asan

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

# The ASan + UBSan build that `make test` runs again in CI (scripts/test.sh calls this target).
asan: bootstrap
	@[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
		-Db_lundef=false -Dc_args=-fno-sanitize-recover=all \
		$(if $(filter true,$(CI)),-Dwerror=true) >/dev/null
	@ninja -C build-asan -j2 >/dev/null

clean:
	rm -rf $(BUILD) build-asan
