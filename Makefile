# Thin wrapper over Meson so the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
LISTEN ?= 127.0.0.1:8080
STATE_DIR ?= /var/lib/corral

.PHONY: all bootstrap build run test clean asan

all: build

bootstrap:
	@./scripts/bootstrap.sh

$(BUILD)/build.ninja:
	@meson setup $(BUILD) >/dev/null

build: bootstrap $(BUILD)/build.ninja
	@ninja -C $(BUILD)

# The main job: corrald on $(LISTEN) with the native runtime and the host image.
run: build
	@./scripts/run.sh $(BUILD) $(LISTEN) $(STATE_DIR)

# Every test: unit, integration (real sandboxes), compat; prints "N passed, N failed" last.
test: build
	@./scripts/test.sh $(BUILD)

asan: bootstrap
	@[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
		-Dc_args=-fno-sanitize-recover=all >/dev/null
	@ninja -C build-asan

clean:
	rm -rf $(BUILD) build-asan
