#!/bin/bash
# Conformance suite: drive a private corrald with the stock OpenSandbox TypeScript SDK (npm
# @alibaba-group/opensandbox, pinned in package.json / package-lock.json, unmodified).
#
#   tests/compat/run.sh                 default run: every *.test.mjs except pending.test.mjs
#                                       (*.serial.test.mjs run one by one after the rest)
#   tests/compat/run.sh --all           also pending.test.mjs, when one exists: tests of features
#                                       known not to work yet (none today, so there is no such file)
#   tests/compat/run.sh files.test.mjs  only the named test files (paths relative to tests/compat/)
#
# Environment: CORRAL_BUILD_DIR (default <repo>/build), CORRAL_COMPAT_JOBS (test files run at once,
# default 2), CORRAL_COMPAT_DEBUG=1 (the SDK logs every request), CORRAL_COMPAT_KEEP=1 (keep the
# temp dir with corrald's state and log; by default it is removed, the log's tail is printed on failure).
#
# Steps: install the SDK if needed (npm ci), start build/corrald on a free loopback port with a temp
# --state-dir, a unique --cgroup-name and an API key, run `node --test`, delete whatever sandboxes
# the tests leaked (a failure), stop corrald, then fail if any cgroup or mount of this run is left.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${CORRAL_BUILD_DIR:-$REPO/build}
JOBS=${CORRAL_COMPAT_JOBS:-2}

say() { echo "compat: $*" >&2; }
die() { say "$*"; exit 1; }

ALL=0
FILES=()
for a in "$@"; do
	case "$a" in
	--all) ALL=1 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) FILES+=("$a") ;;
	esac
done

# ---- prerequisites ---------------------------------------------------------------------------
command -v node >/dev/null || die "node (>= 20) is required"
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
[ "$NODE_MAJOR" -ge 20 ] || die "node >= 20 is required (found $(node --version))"
command -v curl >/dev/null || die "curl is required"
# $BUILD/corrald sits next to $BUILD/corral-execd (corrald's default --execd).
CORRALD="$BUILD/corrald"
[ -x "$CORRALD" ] || die "corrald not found under $BUILD (build first: ninja -C $BUILD)"
[ "$(id -u)" -eq 0 ] || die "must run as root (corrald creates namespaces, cgroups and mounts)"

SDK_PKG="$HERE/node_modules/@alibaba-group/opensandbox/package.json"
WANT=$(node -p "require('$HERE/package.json').dependencies['@alibaba-group/opensandbox']")
HAVE=$( [ -f "$SDK_PKG" ] && node -p "require('$SDK_PKG').version" 2>/dev/null || echo none)
if [ "$HAVE" != "$WANT" ]; then
	say "installing @alibaba-group/opensandbox@$WANT (npm ci)"
	(cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci failed"
fi

# ---- start corrald ---------------------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/corral-compat.XXXXXX")
STATE="$TMP/state"
LOG="$TMP/corrald.log"
mkdir -p "$STATE" "$TMP/host-volumes"
RUN_ID=$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
CGROUP="corral-compat-$RUN_ID"
API_KEY="compat-$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
CORRALD_PID=""

free_port() {
	node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

stop_corrald() {
	[ -n "$CORRALD_PID" ] || return 0
	if kill -0 "$CORRALD_PID" 2>/dev/null; then
		kill -TERM "$CORRALD_PID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$CORRALD_PID" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$CORRALD_PID" 2>/dev/null; then
			say "corrald did not exit on SIGTERM within 10 s; SIGKILL"
			kill -KILL "$CORRALD_PID" 2>/dev/null
		fi
	fi
	wait "$CORRALD_PID" 2>/dev/null
	CORRALD_PID=""
}

cleanup_on_signal() {
	stop_corrald
	exit 130
}
trap cleanup_on_signal INT TERM
trap 'stop_corrald' EXIT

# A registry for images.test.mjs: Debian's docker-registry on loopback, plain HTTP (corrald is
# told with --insecure-registry). Without the binary that test skips itself.
REG_PID=""
REG_ARGS=()
if command -v docker-registry >/dev/null && command -v skopeo >/dev/null; then
	REG_PORT=$(free_port)
	printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
		"$TMP/registry" "$REG_PORT" >"$TMP/registry.yml"
	docker-registry serve "$TMP/registry.yml" >>"$TMP/registry.log" 2>&1 &
	REG_PID=$!
	for _ in $(seq 100); do
		curl -s -o /dev/null "http://127.0.0.1:$REG_PORT/v2/" && break
		sleep 0.1
	done
	export CORRAL_COMPAT_REGISTRY="127.0.0.1:$REG_PORT"
	REG_ARGS=(--insecure-registry "127.0.0.1:$REG_PORT")
fi
stop_registry() {
	[ -n "$REG_PID" ] || return 0
	kill -TERM "$REG_PID" 2>/dev/null
	wait "$REG_PID" 2>/dev/null
	REG_PID=""
}
trap 'stop_corrald; stop_registry' EXIT

# A private "internet" for egress.test.mjs (tests/integration/netlab.py: a network namespace with
# dnsmasq serving test names and HTTP servers on addresses that exist only there): corrald's
# sandboxes get their uplink and DNS upstream from it, so nothing leaves this machine.
LAB_PID=""
LAB_ARGS=()
python3 "$REPO/tests/integration/netlab.py" >"$TMP/lab.env" 2>>"$TMP/lab.log" &
LAB_PID=$!
for _ in $(seq 200); do
	grep -q '^$' "$TMP/lab.env" 2>/dev/null && break
	kill -0 "$LAB_PID" 2>/dev/null || break
	sleep 0.1
done
if grep -q '^ARGS=' "$TMP/lab.env" 2>/dev/null; then
	read -r -a LAB_ARGS <<<"$(sed -n 's/^ARGS=//p' "$TMP/lab.env")"
	LAB_BRIDGE=$(sed -n 's/^BRIDGE=//p' "$TMP/lab.env")
	while IFS='=' read -r k v; do
		[ -n "$k" ] && [ "$k" != ARGS ] && [ "$k" != BRIDGE ] && export "CORRAL_COMPAT_LAB_$k=$v"
	done <"$TMP/lab.env"
else
	die "the network lab did not start: $(tail -n 5 "$TMP/lab.log")"
fi
stop_lab() {
	[ -n "$LAB_PID" ] || return 0
	kill -TERM "$LAB_PID" 2>/dev/null
	wait "$LAB_PID" 2>/dev/null
	LAB_PID=""
	# what corrald keeps for its next start: the bridge, its nftables tables and its lock file
	# (the lab removes them when it stops; again here, in case it could not)
	if [ -n "${LAB_BRIDGE:-}" ]; then
		ip link del "$LAB_BRIDGE" 2>/dev/null
		nft delete table inet "$LAB_BRIDGE" 2>/dev/null
		nft delete table bridge "$LAB_BRIDGE" 2>/dev/null
		rm -f "/run/corral/$LAB_BRIDGE.lock"
	fi
}
trap 'stop_corrald; stop_registry; stop_lab' EXIT

PORT=""
for attempt in 1 2 3; do
	PORT=$(free_port)
	# A capacity far above this host's (host-wide tables included): the SDK tests run several
	# 1-CPU sandboxes at once, and admission is tested by tests/integration/test_resources.py.
	"$CORRALD" --listen "127.0.0.1:$PORT" --state-dir "$STATE" --cgroup-name "$CGROUP" \
		--api-key "$API_KEY" --capacity cpu=100000,memory=100Ti,pids=1000000000,files=1000000000000 "${REG_ARGS[@]}" \
		--allow-host-path "$TMP/host-volumes" "${LAB_ARGS[@]}" >>"$LOG" 2>&1 &
	CORRALD_PID=$!
	up=0
	for _ in $(seq 100); do
		if ! kill -0 "$CORRALD_PID" 2>/dev/null; then break; fi
		if curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; then up=1; break; fi
		sleep 0.1
	done
	[ "$up" -eq 1 ] && break
	say "corrald did not come up on port $PORT (attempt $attempt); log:"
	tail -n 20 "$LOG" >&2
	stop_corrald
done
[ -n "$CORRALD_PID" ] || die "could not start corrald"
say "corrald pid $CORRALD_PID on 127.0.0.1:$PORT, state $STATE, cgroup $CGROUP"

# ---- run the tests ---------------------------------------------------------------------------
cd "$HERE" || exit 1
# *.serial.test.mjs files change server-wide state (e.g. fill the capacity queue, which is FIFO),
# so each runs alone after the others.
SERIAL=()
if [ ${#FILES[@]} -eq 0 ]; then
	for f in *.test.mjs; do
		[ "$f" = pending.test.mjs ] && [ "$ALL" -eq 0 ] && continue
		case "$f" in
		*.serial.test.mjs) SERIAL+=("$f") ;;
		*) FILES+=("$f") ;;
		esac
	done
fi
export OPEN_SANDBOX_DOMAIN="127.0.0.1:$PORT"
export OPEN_SANDBOX_API_KEY="$API_KEY"
export CORRAL_COMPAT_RUN_ID="$RUN_ID"
export CORRAL_COMPAT_HOST_VOLUMES="$TMP/host-volumes"
FAIL=0
: >"$TMP/node.out"
run_node() { # JOBS FILE...
	local jobs=$1
	shift
	say "node --test $*"
	node --test --test-reporter=spec --test-concurrency="$jobs" --test-timeout=180000 "$@" 2>&1 |
		tee -a "$TMP/node.out"
	local rc=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] || { say "node --test failed (exit $rc)"; FAIL=1; }
}
run_node "$JOBS" "${FILES[@]}"
for f in "${SERIAL[@]}"; do
	run_node 1 "$f"
done

# ---- leaked sandboxes ------------------------------------------------------------------------
api() { curl -s -H "OPEN-SANDBOX-API-KEY: $API_KEY" "$@"; }
list_ids() {
	api "http://127.0.0.1:$PORT/v1/sandboxes?pageSize=200" |
		node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{try{for(const x of JSON.parse(s).items)console.log(x.id)}catch(e){console.log("LIST-FAILED")}})'
}
if kill -0 "$CORRALD_PID" 2>/dev/null; then
	LEFT=$(list_ids)
	if [ "$LEFT" = "LIST-FAILED" ]; then
		say "GET /v1/sandboxes failed after the tests"
		FAIL=1
	elif [ -n "$LEFT" ]; then
		say "sandboxes left behind by the tests (a test or DELETE bug): $(echo $LEFT)"
		FAIL=1
		for id in $LEFT; do api -o /dev/null -X DELETE "http://127.0.0.1:$PORT/v1/sandboxes/$id"; done
		for _ in $(seq 100); do [ -z "$(list_ids)" ] && break; sleep 0.1; done
	fi
else
	say "corrald died during the tests"
	FAIL=1
fi
# Teardown runs off the request path: give it a moment before stopping corrald.
for _ in $(seq 50); do
	n=$(find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -path "*/$CGROUP/*" -type d 2>/dev/null | wc -l)
	[ "$n" -eq 0 ] && break
	sleep 0.1
done
stop_corrald

# ---- nothing left behind ---------------------------------------------------------------------
LEAKED_CG=$(find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -path "*/$CGROUP/*" -type d 2>/dev/null)
if [ -n "$LEAKED_CG" ]; then
	say "cgroups left behind:"; echo "$LEAKED_CG" | sed 's/^/  /' >&2
	FAIL=1
fi
# The (empty) parent cgroups of this run: remove them; failing to is a leak too.
for d in $(find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -name "$CGROUP" -type d 2>/dev/null); do
	rmdir "$d" 2>/dev/null || { say "cannot remove cgroup $d (still in use)"; FAIL=1; }
done
LEAKED_MNT=$(awk -v p="$TMP" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo)
if [ -n "$LEAKED_MNT" ]; then
	say "mounts left behind:"; echo "$LEAKED_MNT" | sed 's/^/  /' >&2
	FAIL=1
fi

if [ "$FAIL" -ne 0 ]; then
	say "corrald log tail ($LOG):"
	tail -n 30 "$LOG" >&2
	# Last, so it survives log truncation (meson shows only the end): which tests failed.
	if grep -q '^✖' "$TMP/node.out" 2>/dev/null; then
		say "failing tests:"
		grep '^✖' "$TMP/node.out" | grep -v 'failing tests:' | sed 's/ ([0-9.]*ms)$//' | sort -u | sed 's/^/  /' >&2
	fi
	say "FAILED"
fi
# Keep nothing behind unless asked to (or unless a mount is still there: never delete through it).
if [ -n "$LEAKED_MNT" ] || [ "${CORRAL_COMPAT_KEEP:-0}" = 1 ]; then
	say "temp dir kept: $TMP"
else
	rm -rf --one-file-system "$TMP"
fi
if [ "$FAIL" -ne 0 ]; then
	exit 1
fi
say "OK"
exit 0
