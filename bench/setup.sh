#!/bin/sh
# Installs the local anchors the benchmark compares against, and wrk (Debian 12 packages).
# Idempotent and quiet when everything is already there.
set -e
need=""
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
command -v crun >/dev/null 2>&1 || need="$need crun"
command -v runc >/dev/null 2>&1 || need="$need runc"
dpkg -s busybox-static >/dev/null 2>&1 || need="$need busybox-static"
command -v unshare >/dev/null 2>&1 || need="$need util-linux"
command -v wrk >/dev/null 2>&1 || need="$need wrk"
if [ -n "$need" ]; then
	echo "bench/setup.sh: installing$need" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq $need >/dev/null 2>&1 || {
		apt-get update -qq >/dev/null 2>&1
		apt-get install -y -qq $need >/dev/null
	}
fi
