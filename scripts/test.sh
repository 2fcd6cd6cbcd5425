#!/bin/bash
# `make test`: every suite Meson knows (unit, fuzz-corpus replay, integration against real sandboxes,
# compat with the stock SDK), then one closing line "N passed, N failed" counted from Meson's own
# test logs.
#
# With CI=true (or CORRAL_TEST_ASAN=1) the unit, fuzz-corpus replay and integration suites run a
# second time against an ASan + UBSan build (`make asan`: -Dsanitize=address), as the house style
# asks of CI: every corpus in tests/fuzz/corpus is replayed under the sanitizers. The 'runtime'
# suite (the runtime test's own clone(CLONE_VM) children, which ASan cannot follow across the stack
# switch) is left out of that pass; the integration suites still drive the runtime under ASan
# through corrald. With CI=true, libcorral's tests also run under ThreadSanitizer (`make tsan`) and
# the whole tree is built with clang (`make clang`), whose unit suite runs too.
set -uo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."

passed=0
failed=0
skipped=0
status=0

# count LOG: add the results recorded in a Meson test log to the totals.
count() {
	local log=$1 rc=$2 p f s
	p=0 f=0 s=0
	if [ -f "$log" ]; then
		p=$(grep -c '"result": "OK"' "$log" || true)
		s=$(grep -c '"result": "SKIP"' "$log" || true)
		f=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log" || true)
	fi
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # meson itself failed before recording results
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
}

# Integration suites create real sandboxes and share cgroups; two at a time fits this 2-core machine.
rm -f "$BUILD/meson-logs/testlog.json"
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "${@:2}"
rc=$?
count "$BUILD/meson-logs/testlog.json" $rc
[ $rc -eq 0 ] || status=1

# run_pass TITLE MAKE_TARGET BUILD_DIR MESON_TEST_ARGS...: build with `make MAKE_TARGET`, run
# the suites there and count them. The build dir's default test setup (meson.build) carries the
# sanitizer's runtime options.
run_pass() {
	local title=$1 target=$2 dir=$3
	shift 3
	echo "== $title ($dir) =="
	rm -f "$dir/meson-logs/testlog.json"
	if make -s "$target"; then
		meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 "$@"
		rc=$?
	else
		echo "$target build failed" >&2
		rc=1
	fi
	count "$dir/meson-logs/testlog.json" $rc
	[ $rc -eq 0 ] || status=1
}

if [ "${CI:-}" = "true" ] || [ "${CORRAL_TEST_ASAN:-}" = "1" ]; then
	run_pass "the unit, fuzz and integration suites again, under ASan + UBSan" asan build-asan \
		--suite unit --suite fuzz --suite integration --no-suite runtime
fi
if [ "${CI:-}" = "true" ]; then
	# libcorral runs a transport thread and reaper threads under its callers' threads.
	run_pass "libcorral's tests under ThreadSanitizer" tsan build-tsan --suite client
	# Everything compiles warning-free with clang too (werror under CI), and the units pass.
	run_pass "the unit suite, built with clang" clang build-clang --suite unit
fi

echo "$passed passed, $failed failed, $skipped skipped"
exit $status
