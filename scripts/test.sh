#!/bin/bash
# `make test`: every suite Meson knows (unit, integration against real sandboxes, compat), then one
# closing line "N passed, N failed" counted from Meson's own test log.
set -uo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."

# Integration suites create real sandboxes and share cgroups; two at a time fits this 2-core machine.
meson test -C "$BUILD" --print-errorlogs --num-processes 2 "${@:2}"
rc=$?

log="$BUILD/meson-logs/testlog.json"
passed=0
failed=0
skipped=0
if [ -f "$log" ]; then
	passed=$(grep -c '"result": "OK"' "$log" || true)
	skipped=$(grep -c '"result": "SKIP"' "$log" || true)
	failed=$(grep -c -E '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log" || true)
fi
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
	failed=1 # meson itself failed before recording results
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$rc" -eq 0 ]
